//! The delay timer: a timerfd in the reader's epoll set that makes a poll
//! (or a caller's own loop on the epoll fd) read rings whose records woke
//! nobody yet: with `max_delay` batching always, in the fast mode while a
//! ring is batched.

use crate::error::Result;
use crate::kernel::clock::Moment;
use crate::kernel::sys;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// epoll token of the timerfd (ring tokens are their indexes).
pub const TIMER_TOKEN: u64 = 1 << 63;

/// A periodic timerfd and what of it has been read.
pub struct Ticker {
    fd: OwnedFd,
    /// Zero while disarmed.
    period: Duration,
    /// The start of the current period: ticks fire at `since + k * period`,
    /// and none since `since` has been read yet.
    since: Moment,
}

impl Ticker {
    /// A timerfd in `epoll` under [`TIMER_TOKEN`], ticking every `period`
    /// (never, for zero).
    pub fn new(epoll: RawFd, period: Duration) -> Result<Ticker> {
        Ticker::with_token(epoll, period, TIMER_TOKEN)
    }

    /// [`Self::new`] under another epoll token.
    pub fn with_token(epoll: RawFd, period: Duration, token: u64) -> Result<Ticker> {
        let fd = sys::timerfd()?;
        sys::epoll_add(epoll, fd.as_raw_fd(), token)?;
        let mut ticker = Ticker { fd, period: Duration::ZERO, since: Moment::now() };
        if !period.is_zero() {
            ticker.arm(period)?;
        }
        Ok(ticker)
    }

    /// Ticks every `period` from now on (never, for zero); a pending tick
    /// is dropped. Costs about 4 µs in a VM: it reprograms a kernel timer.
    pub fn arm(&mut self, period: Duration) -> Result<()> {
        sys::arm_timer(self.fd.as_fd(), period)?;
        // Taken after the call, so no tick is ever due before `since +
        // period` says: at worst a tick is seen a syscall's time late.
        (self.period, self.since) = (period, Moment::now());
        Ok(())
    }

    /// Reads the ticks that fired (epoll said so, or [`Self::clear`] knows).
    pub fn read(&mut self, now: Moment) {
        sys::read_u64(self.fd.as_raw_fd());
        if self.ticking() {
            let periods = now.since(self.since).as_nanos() / self.period.as_nanos();
            self.since = self.since + self.period * periods.min(u32::MAX as u128) as u32;
        }
    }

    /// Whether it is armed.
    pub fn ticking(&self) -> bool {
        !self.period.is_zero()
    }

    /// The start of the current period.
    pub fn since(&self) -> Moment {
        self.since
    }

    /// Clears a tick that fired, so a caller waiting on the epoll fd is not
    /// left with a ready fd; reads the timerfd (about 0.3 µs) only when a
    /// tick can have fired, and the clock only while ticking.
    pub fn clear(&mut self) {
        if !self.ticking() {
            return;
        }
        let now = Moment::now();
        if now.since(self.since) >= self.period {
            self.read(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::fake::{self, FakeKernel};

    #[test]
    fn ticks_only_while_armed_and_clears_what_fired() {
        let _k = fake::install(FakeKernel::new(1));
        let epoll = sys::epoll_create().unwrap();
        let mut t = Ticker::new(epoll.as_raw_fd(), Duration::ZERO).unwrap();
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 2];
        assert!(!t.ticking());
        assert_eq!(sys::epoll_wait(epoll.as_raw_fd(), &mut ev, 2, 10).unwrap(), 0, "disarmed: no tick");
        t.arm(Duration::from_micros(500)).unwrap();
        let start = t.since();
        fake::with(|k| k.advance(Duration::from_micros(1600)));
        assert_eq!(sys::epoll_wait(epoll.as_raw_fd(), &mut ev, 2, 0).unwrap(), 1);
        let token = ev[0].u64;
        assert_eq!(token, TIMER_TOKEN);
        t.clear();
        assert_eq!(t.since().since(start), Duration::from_micros(1500), "three periods read");
        assert_eq!(sys::epoll_wait(epoll.as_raw_fd(), &mut ev, 2, 0).unwrap(), 0, "cleared");
        // Within a period, clear reads nothing (no syscall).
        let reads = || fake::with(|k| k.calls.get("read").copied().unwrap_or(0)).unwrap();
        let before = reads();
        fake::with(|k| k.advance(Duration::from_micros(200)));
        t.clear();
        assert_eq!(reads(), before);
        t.arm(Duration::ZERO).unwrap();
        fake::with(|k| k.advance(Duration::from_secs(1)));
        assert_eq!(sys::epoll_wait(epoll.as_raw_fd(), &mut ev, 2, 0).unwrap(), 0, "stopped");
    }
}
