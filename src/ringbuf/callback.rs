//! What a ring buffer's callbacks are: closures over each record's bytes,
//! boxed `Send` for a [`super::RingBuffer`] that moves between threads (the
//! default, [`Sendable`]) or not ([`Local`]), the same choice a
//! [`crate::PerfBuffer`] makes. A callback may return nothing, libbpf's
//! `int` (negative stops the read and is returned), or a `ControlFlow`.

use crate::perf_buffer::{Local, Sendable, Threading};
use core::ops::ControlFlow;

/// What a ring buffer callback may return: `()` (go on), an `i32` as
/// libbpf's `ring_buffer_sample_fn` returns it (a negative value stops the
/// read, which then fails with [`crate::ErrorKind::Stopped`] and that
/// value; other values go on), or a `ControlFlow<i32>` (`Break(v)` stops
/// with `v`).
pub trait SampleResult {
    /// Go on, or stop with this value.
    fn into_flow(self) -> ControlFlow<i32>;
}

impl SampleResult for () {
    #[inline(always)]
    fn into_flow(self) -> ControlFlow<i32> {
        ControlFlow::Continue(())
    }
}

impl SampleResult for i32 {
    #[inline(always)]
    fn into_flow(self) -> ControlFlow<i32> {
        if self < 0 { ControlFlow::Break(self) } else { ControlFlow::Continue(()) }
    }
}

impl SampleResult for ControlFlow<i32> {
    #[inline(always)]
    fn into_flow(self) -> ControlFlow<i32> {
        self
    }
}

/// [`Sendable`] or [`Local`], for ring buffers: the type of a boxed
/// callback.
pub trait RingThreading: Threading {
    /// A ring's boxed callback.
    type Callback<'a>: FnMut(&[u8]) -> ControlFlow<i32> + 'a;
}

impl RingThreading for Sendable {
    type Callback<'a> = Box<dyn FnMut(&[u8]) -> ControlFlow<i32> + Send + 'a>;
}

impl RingThreading for Local {
    type Callback<'a> = Box<dyn FnMut(&[u8]) -> ControlFlow<i32> + 'a>;
}

/// Boxes a callback `F` returning `R` for a ring buffer of this
/// [`RingThreading`].
#[diagnostic::on_unimplemented(
    message = "this callback is not `Send`, so the ring buffer could not move between threads",
    label = "captures something that is not `Send` (an `Rc`, a `&RefCell`, ...)",
    note = "call `.local()` on the builder before adding maps to keep the ring buffer on this thread"
)]
pub trait BoxesSample<'a, F, R>: RingThreading {
    /// `f` as a ring's callback.
    fn boxed(f: F) -> Self::Callback<'a>;
}

impl<'a, F, R> BoxesSample<'a, F, R> for Sendable
where
    F: FnMut(&[u8]) -> R + Send + 'a,
    R: SampleResult,
{
    fn boxed(mut f: F) -> Self::Callback<'a> {
        Box::new(move |data| f(data).into_flow())
    }
}

impl<'a, F, R> BoxesSample<'a, F, R> for Local
where
    F: FnMut(&[u8]) -> R + 'a,
    R: SampleResult,
{
    fn boxed(mut f: F) -> Self::Callback<'a> {
        Box::new(move |data| f(data).into_flow())
    }
}
