//! The Rust face: [`Reader`] over per-CPU perf rings, delivering to a
//! [`crate::sink::Sink`]; [`PerfBuffer`], the reader whose sink is the
//! closures given to its [`Builder`]. The C library's `struct perf_buffer`
//! is a `Reader` too, whose sink is the caller's function pointers.

#[cfg(feature = "tokio")]
mod async_tokio;
mod builder;
mod closures;
mod map_fd;
mod reader;
mod threading;

#[cfg(feature = "tokio")]
pub use async_tokio::AsyncPerfBuffer;
pub use builder::Builder;
pub use closures::Closures;
pub use map_fd::MapFd;
pub use reader::{Reader, RingReader, Waker};
pub use threading::{Boxes, Local, Sendable, Threading};

use std::time::Duration;

/// Per-CPU perf rings over a `BPF_MAP_TYPE_PERF_EVENT_ARRAY`, read through
/// one epoll instance: what libbpf's `struct perf_buffer` is, for Rust.
/// A [`Reader`] whose records go to the closures given to the [`Builder`].
///
/// The closures run on the thread that calls [`Reader::poll`] or a
/// `consume` method. The buffer borrows the map's fd (`'a`) and whatever
/// the closures borrow.
///
/// A buffer is `Send` (it can move into a thread or a tokio task) when its
/// closures are: by default the builder takes only `Send` closures; after
/// [`Builder::local`] it takes any and the buffer is `!Send`
/// ([`Threading`]). It is never `Sync`: one thread at a time polls it.
///
/// ```no_run
/// # fn main() -> perfbuf::Result<()> {
/// # let map: std::os::fd::OwnedFd = unimplemented!();
/// let mut samples = 0u64;
/// let mut pb = perfbuf::PerfBuffer::builder(&map)
///     .pages(64)
///     .on_sample(|cpu, data| {
///         samples += 1;
///         println!("cpu {cpu}: {} bytes", data.len());
///     })
///     .on_lost(|cpu, n| eprintln!("cpu {cpu}: {n} lost"))
///     .build()?;
/// loop {
///     pb.poll(Some(std::time::Duration::from_millis(100)))?;
/// }
/// # }
/// ```
pub type PerfBuffer<'a, T = Sendable> = Reader<'a, Closures<'a, T>>;

impl<'a> Reader<'a, Closures<'a, Sendable>> {
    /// A builder for a buffer over `map`, a `BPF_MAP_TYPE_PERF_EVENT_ARRAY`:
    /// a reference to anything with an fd (`&OwnedFd`, libbpf-rs's `&Map`,
    /// aya's `map.fd()`...), a `BorrowedFd`, or an `OwnedFd`, which the
    /// buffer keeps and closes ([`MapFd`]). Defaults are libbpf's: 8 pages
    /// per CPU, every online CPU, a wake-up per record.
    pub fn builder(map: impl Into<MapFd<'a>>) -> Builder<'a> {
        Builder::new(map.into())
    }
}

/// A poll timeout in libbpf's milliseconds: -1 forever, rounded up.
pub(crate) fn timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(d) => d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
    }
}
