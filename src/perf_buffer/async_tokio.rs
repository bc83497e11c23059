//! An async reader for tokio (feature `tokio`): a [`PerfBuffer`] whose
//! epoll fd is registered with tokio's reactor, so a task awaits records
//! instead of blocking a thread in `poll`.

use super::{PerfBuffer, Threading};
use crate::error::{Error, Result};
use std::time::Duration;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A [`PerfBuffer`] read from a tokio task: [`Self::readable`] waits until
/// the kernel (or the fast mode's timer, or a [`super::Waker`]) calls for
/// a read, then reads the rings through the buffer's own closures, as
/// [`PerfBuffer::poll`] and [`PerfBuffer::consume`] would (same records,
/// same lost reports). It moves into `tokio::spawn` when the buffer is `Send`
/// (its closures are).
///
/// ```no_run
/// # async fn f(map: std::os::fd::OwnedFd) -> perfbuf::Result<()> {
/// let pb = perfbuf::PerfBuffer::builder(map)
///     .on_sample(|cpu, data| println!("cpu {cpu}: {} bytes", data.len()))
///     .on_lost(|cpu, n| eprintln!("cpu {cpu}: {n} lost"))
///     .build()?;
/// let mut reader = perfbuf::AsyncPerfBuffer::new(pb)?;
/// tokio::spawn(async move {
///     loop {
///         reader.readable().await?;
///     }
///     #[allow(unreachable_code)]
///     Ok::<(), perfbuf::Error>(())
/// });
/// # Ok(()) }
/// ```
pub struct AsyncPerfBuffer<'a, T: Threading = super::Sendable> {
    fd: AsyncFd<PerfBuffer<'a, T>>,
}

impl<'a, T: Threading> AsyncPerfBuffer<'a, T> {
    /// Registers `pb` with the current tokio runtime's reactor. Panics
    /// outside a runtime with I/O enabled, as tokio's own types do.
    pub fn new(pb: PerfBuffer<'a, T>) -> Result<Self> {
        // SAFETY: the fd registered is the buffer's epoll fd, which the
        // buffer owns for its whole life and always returns: it stays
        // open and the same for as long as the AsyncFd holds the buffer.
        let fd = unsafe { AsyncFd::register_with_interest(pb, Interest::READABLE) };
        let fd = fd.map_err(|e| Error::from_io(&e.into_parts().1))?;
        Ok(AsyncPerfBuffer { fd })
    }

    /// Waits until the kernel, the fast mode's timer or a
    /// [`super::Waker`] calls for a read, then reads every ring. Fails
    /// with [`crate::ErrorKind::Cancelled`] after a [`super::Waker::wake`]
    /// (dropping the future is the async way to stop waiting).
    pub async fn readable(&mut self) -> Result<()> {
        let mut guard = self.fd.readable_mut().await.map_err(|e| Error::from_io(&e))?;
        // Cleared before reading: whatever the kernel writes from here on
        // signals the reactor again, so no wake-up is lost.
        guard.clear_ready();
        let pb = guard.get_inner_mut();
        // The reactor's check of the buffer's epoll fd polls each ready
        // ring's event, and a perf event's poll consumes its readiness:
        // the buffer's own epoll may no longer report the rings that woke
        // us. A zero-timeout poll serves the timer and the waker; consume
        // then reads every ring.
        pb.poll(Some(Duration::ZERO))?;
        pb.consume()
    }

    /// The buffer, for its other methods (stats, consume, pause...).
    pub fn get_mut(&mut self) -> &mut PerfBuffer<'a, T> {
        self.fd.get_mut()
    }

    /// The buffer.
    pub fn get_ref(&self) -> &PerfBuffer<'a, T> {
        self.fd.get_ref()
    }

    /// Deregisters the buffer from the reactor and gives it back.
    pub fn into_inner(self) -> PerfBuffer<'a, T> {
        self.fd.into_inner()
    }
}
