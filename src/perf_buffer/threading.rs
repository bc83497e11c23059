//! Whether a [`super::PerfBuffer`] may move to another thread: it is
//! `Send` when its closures are. The closures are boxed (the buffer's type
//! does not name them), so the builder records the choice in its type:
//! [`Sendable`] (the default) takes only `Send` closures and gives a `Send`
//! buffer; [`Local`] (`Builder::local`) takes any closure and keeps the
//! buffer on the thread that built it. Neither needs `Sync`: one thread at
//! a time polls a buffer.

use core::ops::ControlFlow;

mod sealed {
    pub trait Sealed {}
}

/// [`Sendable`] or [`Local`]: what the closures of a buffer may be.
pub trait Threading: sealed::Sealed + Sized + 'static {
    /// The boxed `on_sample` closure.
    type SampleFn<'a>: FnMut(u32, &[u8]) + 'a;
    /// The boxed `on_lost` closure.
    type LostFn<'a>: FnMut(u32, u64) + 'a;
    /// The boxed `on_record` closure.
    type RecordFn<'a>: FnMut(u32, &[u8]) -> ControlFlow<()> + 'a;
}

/// Closures that are `Send`, and so a buffer that is (the default).
#[derive(Debug)]
pub enum Sendable {}

/// Any closures, and a buffer that stays on its thread
/// ([`super::Builder::local`]).
///
/// ```
/// # fn f(map: std::os::fd::OwnedFd) -> perfbuf::Result<()> {
/// let pb = perfbuf::PerfBuffer::builder(map).on_sample(|_cpu, _data| {}).build()?;
/// std::thread::spawn(move || drop(pb)); // Sendable (the default): Send
/// # Ok(()) }
/// ```
///
/// ```compile_fail
/// # fn f(map: std::os::fd::OwnedFd) -> perfbuf::Result<()> {
/// let rc = std::rc::Rc::new(0u64);
/// let pb = perfbuf::PerfBuffer::builder(map).local().on_sample(move |_cpu, _data| drop(rc.clone())).build()?;
/// std::thread::spawn(move || drop(pb)); // Local: not Send
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub enum Local {}

impl sealed::Sealed for Sendable {}
impl sealed::Sealed for Local {}

impl Threading for Sendable {
    type SampleFn<'a> = Box<dyn FnMut(u32, &[u8]) + Send + 'a>;
    type LostFn<'a> = Box<dyn FnMut(u32, u64) + Send + 'a>;
    type RecordFn<'a> = Box<dyn FnMut(u32, &[u8]) -> ControlFlow<()> + Send + 'a>;
}

impl Threading for Local {
    type SampleFn<'a> = Box<dyn FnMut(u32, &[u8]) + 'a>;
    type LostFn<'a> = Box<dyn FnMut(u32, u64) + 'a>;
    type RecordFn<'a> = Box<dyn FnMut(u32, &[u8]) -> ControlFlow<()> + 'a>;
}

/// Boxes a closure `F` for a buffer of this [`Threading`].
#[diagnostic::on_unimplemented(
    message = "this closure is not `Send`, so the buffer could not move between threads",
    label = "captures something that is not `Send` (an `Rc`, a `&RefCell`, ...)",
    note = "call `.local()` on the builder before giving it closures to keep the buffer on this thread"
)]
pub trait Boxes<'a, F>: Threading {
    /// `f` as an `on_sample` closure.
    fn sample(f: F) -> Self::SampleFn<'a>
    where
        F: FnMut(u32, &[u8]) + 'a;
    /// `f` as an `on_lost` closure.
    fn lost(f: F) -> Self::LostFn<'a>
    where
        F: FnMut(u32, u64) + 'a;
    /// `f` as an `on_record` closure.
    fn record(f: F) -> Self::RecordFn<'a>
    where
        F: FnMut(u32, &[u8]) -> ControlFlow<()> + 'a;
}

/// The same boxing for both: only the bound on `F` differs.
macro_rules! impl_boxes {
    ($threading:ty $(, $bound:path)?) => {
        impl<'a, F: 'a $(+ $bound)?> Boxes<'a, F> for $threading {
            fn sample(f: F) -> Self::SampleFn<'a>
            where
                F: FnMut(u32, &[u8]) + 'a,
            {
                Box::new(f)
            }
            fn lost(f: F) -> Self::LostFn<'a>
            where
                F: FnMut(u32, u64) + 'a,
            {
                Box::new(f)
            }
            fn record(f: F) -> Self::RecordFn<'a>
            where
                F: FnMut(u32, &[u8]) -> ControlFlow<()> + 'a,
            {
                Box::new(f)
            }
        }
    };
}

impl_boxes!(Sendable, Send);
impl_boxes!(Local);
