//! What the library's opaque pointers point to (`struct perf_buffer *`,
//! `struct perfbuf_events *`, `struct perfbuf_perfdata *`), and the checks
//! every call makes before using one: one handle type for all three.
//!
//! A program linked against both libbpf and libperfbuf can end up passing
//! a handle of one library to the other (link order decides which library
//! a name binds to). A libbpf `struct perf_buffer` starts with its
//! `event_cb` function pointer; ours start with a magic word whose top
//! bits make it a non-canonical address on every 64-bit target Linux runs
//! on, so it can never equal a function pointer or NULL. Reading that
//! first word stays inside either object, and a handle without the right
//! word (another kind's, libbpf's, a freed one) is refused with EINVAL and
//! a message instead of being used.

use crate::print;
use core::cell::UnsafeCell;
use perfbuf::libbpf_compat::boxed;
use perfbuf::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a handle holds: its magic word, and what a handle of another kind
/// is told.
pub(crate) trait Kind {
    /// The first word of a live handle of this kind.
    const MAGIC: u64;
    /// The message refusing a pointer that is not one.
    const NOT_OURS: &'static str;
}

/// The object behind a handle: the value, and what other threads may
/// touch while a call uses the value (`shared`).
#[repr(C)]
pub(crate) struct Handle<T, W = ()> {
    /// [`Kind::MAGIC`] while the handle lives; cleared when it is freed.
    magic: AtomicU64,
    shared: W,
    value: UnsafeCell<T>,
}

impl<T: Kind + 'static, W: 'static> Handle<T, W> {
    /// Boxes `value` (and `shared`) into a handle (ENOMEM if it cannot be
    /// allocated; `value` is then dropped), for an owner that keeps it.
    pub(crate) fn boxed(value: T, shared: W) -> Result<Box<Self>> {
        boxed(Handle { magic: AtomicU64::new(T::MAGIC), shared, value: UnsafeCell::new(value) })
    }

    /// [`Self::boxed`], as the pointer a caller gets (freed by
    /// [`Self::take`]).
    pub(crate) fn into_raw<P>(value: T, shared: W) -> Result<*mut P> {
        Ok(Box::into_raw(Self::boxed(value, shared)?).cast())
    }

    /// The pointer to this handle a caller gets, when its owner keeps it.
    pub(crate) fn as_ptr<P>(&mut self) -> *mut P {
        (self as *mut Self).cast()
    }

    /// From now on the handle is refused (its owner is freeing it).
    pub(crate) fn retire(&self) {
        self.magic.store(0, Ordering::Relaxed);
    }

    /// The handle behind `ptr`: EINVAL for NULL and for anything that is
    /// not a live handle of this kind.
    ///
    /// # Safety
    /// `ptr` is NULL or readable for at least 8 bytes (ours, or libbpf's).
    unsafe fn of<'a, P>(ptr: *const P) -> Result<&'a Self> {
        if ptr.is_null() {
            return Err(Error::INVAL);
        }
        // SAFETY: a non-NULL pointer is readable for its first 8 bytes
        // (contract); `magic` is our first field.
        if unsafe { &*ptr.cast::<AtomicU64>() }.load(Ordering::Relaxed) != T::MAGIC {
            return Err(print::invalid(T::NOT_OURS));
        }
        // SAFETY: the magic says this is a Box<Self> from into_raw.
        Ok(unsafe { &*ptr.cast::<Self>() })
    }

    /// What other threads may use while a call holds the value.
    ///
    /// # Safety
    /// As for [`Self::value_mut`], except that other calls may run.
    pub(crate) unsafe fn shared<'a, P>(ptr: *const P) -> Result<&'a W> {
        // SAFETY: per this function's contract.
        unsafe { Self::of(ptr) }.map(|h| &h.shared)
    }

    /// The value behind `ptr`.
    ///
    /// # Safety
    /// `ptr` is NULL, a live handle of ours, or a libbpf handle; no other
    /// call uses the value concurrently (libbpf's threading contract). The
    /// C API's `const` on some handle arguments is libbpf's; the value may
    /// still change inside.
    pub(crate) unsafe fn value_mut<'a, P>(ptr: *const P) -> Result<&'a mut T> {
        // SAFETY: per the contract, this is the only reference to the value.
        unsafe { Self::of(ptr).map(|h| &mut *h.value.get()) }
    }

    /// # Safety
    /// As for [`Self::value_mut`].
    pub(crate) unsafe fn value_ref<'a, P>(ptr: *const P) -> Result<&'a T> {
        // SAFETY: per the contract, nothing changes the value meanwhile.
        unsafe { Self::of(ptr).map(|h| &*h.value.get()) }
    }

    /// Takes the value out of a handle of ours and frees the handle;
    /// refuses (with a message) anything else.
    ///
    /// # Safety
    /// As for [`Self::value_mut`]; `ptr` is dangling afterwards.
    pub(crate) unsafe fn take<P>(ptr: *mut P) -> Result<T> {
        // SAFETY: per this function's contract.
        let h = unsafe { Self::of(ptr) }?;
        h.magic.store(0, Ordering::Relaxed);
        // SAFETY: checked to be a Box<Self> from into_raw, not yet freed.
        let handle = unsafe { Box::from_raw(ptr.cast::<Self>()) };
        Ok(handle.value.into_inner())
    }
}
