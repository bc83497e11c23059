//! Waiting for the rings without reading them: for callers that read the
//! rings their own way after the wait (the perf.data writer drains them
//! run by run). The reader's own fds in the epoll set, the wake-up eventfd
//! and the delay timer, are served here: a plain `poll` on the epoll fd
//! would see them readable until something reads them, and spin.

use super::RingSet;
use super::deliver::Handler;
use super::hotplug::HOTPLUG_TOKEN;
use super::ticker::TIMER_TOKEN;
use super::waker::{WAKE_TAG, clear_wake};
use super::{epoll_ms, timeout_left};
use crate::error::{Error, Result};
use crate::kernel::clock::Moment;
use crate::kernel::sys;
use std::os::fd::AsRawFd;

impl<H: Handler> RingSet<H> {
    /// Waits up to `timeout_ms` (-1: forever) for rings to read, as
    /// [`Self::poll`] does but reading nothing: returns how many rings hold
    /// records (kernel signals, in which a ring and its fast-mode spill
    /// ring count apart; after a tick of the delay timer, the rings holding
    /// records that woke nobody), 0 once the timeout passed. Clears the
    /// timer's ticks, and goes back to waiting after a tick that finds
    /// every ring empty. After a wake-up from another thread, clears it and
    /// fails with ECANCELED (rings that were ready stay so).
    pub fn wait_ready(&mut self, timeout_ms: i32) -> Result<usize> {
        let start = Moment::now();
        let mut wait_ms = timeout_ms;
        loop {
            let max = self.events.len();
            let cnt = sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, max, wait_ms)?;
            let (mut rings, mut ticked, mut woken, mut hotplug) = (0, false, false, false);
            for i in 0..cnt {
                let token = self.events[i].u64; // a copy: the struct is packed
                match token {
                    TIMER_TOKEN => ticked = true,
                    HOTPLUG_TOKEN => hotplug = true,
                    token if token & WAKE_TAG != 0 => {
                        clear_wake(token);
                        woken = true;
                    }
                    idx => {
                        if let Some(buf) = self.bufs.get_mut(idx as usize) {
                            buf.wakeups += 1;
                            rings += 1;
                        }
                    }
                }
            }
            if hotplug {
                self.serve_hotplug();
            }
            if ticked && let Some(timer) = &mut self.timer {
                timer.read(Moment::now());
            }
            if woken {
                return Err(Error::from_errno(libc::ECANCELED));
            }
            if ticked && rings == 0 {
                rings = self
                    .bufs
                    .iter()
                    .filter(|b| b.overwrite_prev_head.is_none() && b.rings.has_pending())
                    .count();
            }
            if rings > 0 {
                return Ok(rings);
            }
            // Only a tick with nothing behind it (or the timeout) ends here.
            wait_ms = match timeout_left(start, timeout_ms) {
                Some(left) if cnt > 0 && timeout_ms != 0 => epoll_ms(left),
                _ => return Ok(0),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::{Options, Wakeup};
    use super::super::deliver::Collect;
    use super::super::waker::WakeFd;
    use super::*;
    use crate::kernel::fake::{self, FakeKernel};
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn waits_through_ticks_and_wake_ups_and_reads_nothing() {
        let _k = fake::install(FakeKernel::new(1));
        let map = fake::with(|k| k.create_map(1)).unwrap();
        let mut opts = Options::new(map.as_raw_fd());
        (opts.wakeup, opts.max_delay) = (Wakeup::Records(64), Some(2 * MS));
        let mut r = RingSet::open(opts, Collect::default()).unwrap();
        // Ticks with every ring empty: the whole timeout.
        let t0 = Moment::now();
        assert_eq!(r.wait_ready(10).unwrap(), 0);
        assert!(Moment::now().since(t0) >= 10 * MS, "returned after {:?}", Moment::now().since(t0));
        // Below the batch: a tick finds them, within the bound, unread.
        fake::with(|k| k.emit_n(map.as_raw_fd(), 0, 3, 16, 0));
        let t0 = Moment::now();
        assert_eq!(r.wait_ready(10).unwrap(), 1);
        assert!(Moment::now().since(t0) <= 2 * MS, "after {:?}", Moment::now().since(t0));
        assert!(r.handler.0.is_empty());
        r.consume().unwrap();
        assert_eq!(r.handler.0.len(), 3);
        // A wake-up: ECANCELED once, then the next wait sleeps again.
        let waker = WakeFd::borrowing(r.epoll_fd());
        waker.wake().unwrap();
        assert_eq!(r.wait_ready(10).unwrap_err().errno(), libc::ECANCELED);
        let t0 = Moment::now();
        assert_eq!(r.wait_ready(10).unwrap(), 0);
        assert!(Moment::now().since(t0) >= 10 * MS, "returned after {:?}", Moment::now().since(t0));
    }
}
