//! Allocation that reports ENOMEM instead of aborting the host process.
//!
//! Rust's `Box::new` and `Vec::push` abort when malloc fails; a library
//! preloaded into someone else's program must not. Construction allocates
//! only through these (and `try_reserve`), so `perf_buffer__new` returns
//! NULL with ENOMEM as libbpf does. Each call is also the fault point
//! `"alloc"`, which the fault test fails in turn.

use super::fault;
use crate::error::{Error, Result};

/// An empty vector with room for `capacity` elements.
pub fn vec_with_capacity<T>(capacity: usize) -> Result<Vec<T>> {
    fault::at("alloc")?;
    let mut v = Vec::new();
    v.try_reserve_exact(capacity).map_err(|_| Error::NOMEM)?;
    Ok(v)
}

/// Room for `additional` more elements in `v`.
pub fn reserve<T>(v: &mut Vec<T>, additional: usize) -> Result<()> {
    fault::at("alloc")?;
    v.try_reserve(additional).map_err(|_| Error::NOMEM)
}

/// A vector of the items of `iter`, which yields exactly `len` of them.
pub fn collect<T>(len: usize, iter: impl IntoIterator<Item = T>) -> Result<Vec<T>> {
    let mut v = vec_with_capacity(len)?;
    for item in iter.into_iter().take(len) {
        v.push(item); // within the reserved capacity: no allocation
    }
    Ok(v)
}

/// `Box::new(value)`, or ENOMEM.
pub fn boxed<T>(value: T) -> Result<Box<T>> {
    let mut v = vec_with_capacity(1)?;
    v.push(value);
    // Capacity equals length, so this keeps the allocation.
    let one: Box<[T; 1]> = v.into_boxed_slice().try_into().map_err(|_| Error::NOMEM)?;
    let raw = Box::into_raw(one).cast::<T>();
    // SAFETY: `[T; 1]` and `T` have the same size and alignment, so the
    // allocation Box<[T; 1]> owned is exactly what a Box<T> owns.
    Ok(unsafe { Box::from_raw(raw) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_and_collects() {
        assert_eq!(*boxed(41u64).unwrap() + 1, 42);
        assert_eq!(collect(3, 1..10).unwrap(), vec![1, 2, 3]);
        assert!(vec_with_capacity::<u64>(usize::MAX / 4).is_err());
    }
}
