//! Counts read from a set's events: the `read()` layout of the
//! `read_format` every event of a set has (`TOTAL_TIME_ENABLED |
//! TOTAL_TIME_RUNNING | ID`, plus `GROUP` for a group's leader), summed
//! over the event's CPUs and targets.

use super::desc::EventId;
use crate::error::{Error, Result};

/// An event's counts (a group leader's: its members' too), summed over
/// its CPUs and targets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Nanoseconds the event was enabled.
    pub time_enabled: u64,
    /// Nanoseconds it was actually counting (less than enabled when the
    /// PMU was shared by more events than it has counters).
    pub time_running: u64,
    /// Each event's raw count: the event read first, then a group's
    /// members in the order they were added.
    pub values: Vec<(EventId, u64)>,
}

impl Counts {
    /// `event`'s count scaled to the time it was enabled (what it would
    /// have counted had it run all along); `None` if it is not here.
    pub fn scaled(&self, event: EventId) -> Option<u64> {
        let (_, value) = self.values.iter().find(|(e, _)| *e == event)?;
        if self.time_running == 0 || self.time_running >= self.time_enabled {
            return Some(*value);
        }
        let scaled = u128::from(*value) * u128::from(self.time_enabled) / u128::from(self.time_running);
        Some(scaled.min(u128::from(u64::MAX)) as u64)
    }

    /// Adds one `read()` of an event: `group` if its read_format has
    /// `PERF_FORMAT_GROUP`; `event_of` maps kernel ids to the set's events.
    pub(crate) fn add_read(
        &mut self,
        words: &[u64],
        group: bool,
        lost: bool,
        event_of: impl Fn(u64) -> Option<EventId>,
    ) -> Result<()> {
        let bad = || Error::new(libc::EIO, crate::error::What::EventSet(crate::error::SetStep::Read, -1));
        // GROUP: nr, enabled, running, {value, id[, lost]} * nr.
        // Alone: value, enabled, running, id[, lost].
        let stride = if lost { 3 } else { 2 };
        let (enabled, running, pairs): (u64, u64, Vec<(u64, u64)>) = if group {
            let [nr, enabled, running, rest @ ..] = words else { return Err(bad()) };
            let nr = usize::try_from(*nr).map_err(|_| bad())?;
            if rest.len() < nr.checked_mul(stride).ok_or_else(bad)? {
                return Err(bad());
            }
            (*enabled, *running, rest.chunks_exact(stride).take(nr).map(|p| (p[0], p[1])).collect())
        } else {
            let [value, enabled, running, id, ..] = words else { return Err(bad()) };
            (*enabled, *running, vec![(*value, *id)])
        };
        self.time_enabled += enabled;
        self.time_running += running;
        for (value, id) in pairs {
            let Some(event) = event_of(id) else { continue };
            match self.values.iter_mut().find(|(e, _)| *e == event) {
                Some((_, sum)) => *sum += value,
                None => self.values.push((event, value)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_lone_and_group_reads() {
        let ev = |id: u64| Some(EventId(id as u32 / 10));
        let mut c = Counts::default();
        c.add_read(&[5, 100, 100, 10], false, false, ev).unwrap();
        c.add_read(&[7, 100, 50, 11], false, false, ev).unwrap();
        assert_eq!(c.values, vec![(EventId(1), 12)]);
        assert_eq!((c.time_enabled, c.time_running), (200, 150));
        assert_eq!(c.scaled(EventId(1)), Some(16));

        let mut g = Counts::default();
        g.add_read(&[2, 10, 10, 1, 20, 2, 30], true, false, ev).unwrap();
        g.add_read(&[2, 10, 10, 3, 21, 4, 31], true, false, ev).unwrap();
        assert_eq!(g.values, vec![(EventId(2), 4), (EventId(3), 6)]);
        assert!(g.add_read(&[3, 1, 1, 1, 2], true, false, ev).is_err());
        assert!(g.add_read(&[1, 2], false, false, ev).is_err());
        assert!(g.add_read(&[u64::MAX, 1, 1], true, false, ev).is_err());
    }
}
