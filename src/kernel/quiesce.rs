//! Waiting until no BPF program still writes through a map slot that was
//! just moved, without stalling the caller for a whole RCU grace period.
//!
//! A program looks the slot up and writes the record inside
//! `bpf_perf_event_output` / `bpf_event_output`, and only into an event
//! bound to the CPU it runs on (the kernel refuses any other). Since Linux
//! 6.5 (and the stable trees that took the fix, commits "bpf: Disable
//! preemption in bpf_perf_event_output" and "... in bpf_event_output")
//! both helpers keep preemption off from the lookup to the end of the
//! write. So once this thread has run on that CPU after the move, the CPU
//! has switched tasks since, and every write that could have loaded the
//! old slot there is complete: a wait of one context switch on one CPU,
//! typically well under a millisecond, where a grace period
//! (`membarrier(MEMBARRIER_CMD_GLOBAL)`) takes 4 to 80 ms on a loaded
//! machine — long enough for a caller's ring to overflow at full rate
//! while it waits unread.
//!
//! Older kernels (where a preempted program may still be mid-write; 6.1.45
//! and 6.4.10 have the fix too, but a release string cannot tell a
//! distribution's backports, so only 6.5 and later are trusted), a
//! CPU this thread may not run on (cpusets) or more CPUs than a
//! `cpu_set_t` holds: the grace period, as before.

use super::sys;
use std::time::Duration;

/// Waits until no BPF program can still be writing into an event of any
/// of `cpus` through a slot moved away before this call: runs this thread
/// on each in turn (each CPU once), or waits a grace period where that
/// proves nothing. Leaves this thread's CPU affinity as it found it.
pub fn wait_for_writers_on(cpus: impl IntoIterator<Item = i32>, fallback: Duration) {
    #[cfg(test)]
    if super::fake::with(|k| k.wait_for_writers()).is_some() {
        return;
    }
    if !(helpers_hold_preemption() && ran_on_each(cpus)) {
        sys::wait_for_writers(fallback);
    }
}

/// Whether this kernel's output helpers keep preemption off from the slot
/// lookup to the end of the write (6.5 and later).
fn helpers_hold_preemption() -> bool {
    static HOLD: once_cell::sync::OnceCell<bool> = once_cell::sync::OnceCell::new();
    *HOLD.get_or_init(|| kernel_release().is_some_and(|v| v >= (6, 5)))
}

/// The running kernel's (major, minor).
fn kernel_release() -> Option<(u32, u32)> {
    // SAFETY: utsname is plain bytes; uname fills it and touches nothing else.
    let mut uts: libc::utsname = unsafe { core::mem::zeroed() };
    // SAFETY: `uts` is a live utsname to write.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return None;
    }
    let bytes: Vec<u8> = uts.release.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    parse_release(core::str::from_utf8(&bytes).ok()?)
}

/// "6.18.44-generic" → (6, 18).
fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Moves this thread onto each of `cpus` in turn, then back to the CPUs
/// it may run on; true once it has run on every one of them.
fn ran_on_each(cpus: impl IntoIterator<Item = i32>) -> bool {
    let size = core::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is plain bits; all zero is the empty set.
    let (mut old, mut visited): (libc::cpu_set_t, libc::cpu_set_t) = unsafe { core::mem::zeroed() };
    // SAFETY: the kernel writes at most `size` bytes into `old`.
    if unsafe { libc::sched_getaffinity(0, size, &mut old) } != 0 {
        return false;
    }
    let mut all = true;
    for cpu in cpus {
        let Some(cpu) = usize::try_from(cpu).ok().filter(|&c| c < libc::CPU_SETSIZE as usize) else {
            all = false;
            break;
        };
        // SAFETY: `cpu` < CPU_SETSIZE: the bit is inside `visited`.
        if unsafe { libc::CPU_ISSET(cpu, &visited) } {
            continue;
        }
        if !run_on(cpu, size) {
            all = false;
            break;
        }
        // SAFETY: as above.
        unsafe { libc::CPU_SET(cpu, &mut visited) };
    }
    // SAFETY: the kernel reads `size` bytes of `old`, the mask we had.
    if unsafe { libc::sched_setaffinity(0, size, &old) } != 0 {
        crate::log::warn(format_args!("cannot restore this thread's CPU affinity"));
    }
    all
}

/// Moves this thread onto `cpu` (< CPU_SETSIZE); true once it runs there.
fn run_on(cpu: usize, size: usize) -> bool {
    // SAFETY: cpu_set_t is plain bits; all zero is the empty set.
    let mut only: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE: the bit is inside `only`.
    unsafe { libc::CPU_SET(cpu, &mut only) };
    // SAFETY: the kernel reads `size` bytes of `only`.
    if unsafe { libc::sched_setaffinity(0, size, &only) } != 0 {
        return false;
    }
    // The call returns on the new CPU: checked rather than trusted.
    // SAFETY: no arguments.
    let here = unsafe { libc::sched_getcpu() };
    here == cpu as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn affinity() -> libc::cpu_set_t {
        // SAFETY: as in `ran_on_each`.
        let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
        // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes.
        assert_eq!(unsafe { libc::sched_getaffinity(0, core::mem::size_of_val(&set), &mut set) }, 0);
        set
    }

    fn cpus(set: &libc::cpu_set_t) -> Vec<usize> {
        // SAFETY: every index is < CPU_SETSIZE.
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, set) }).collect()
    }

    /// Runs on every CPU this thread may use, and leaves its affinity
    /// as it was (a thread of the caller's is borrowed).
    #[test]
    fn visits_each_cpu_and_restores_the_affinity() {
        let before = cpus(&affinity());
        assert!(!before.is_empty());
        assert!(ran_on_each(before.iter().rev().chain(before.iter()).map(|&c| c as i32)));
        assert_eq!(cpus(&affinity()), before);
        assert!(!ran_on_each([-1]), "no such CPU");
        assert!(!ran_on_each([libc::CPU_SETSIZE]), "beyond a cpu_set_t");
        assert_eq!(cpus(&affinity()), before, "restored after a refusal too");
    }

    #[test]
    fn releases_parse() {
        assert_eq!(parse_release("6.18.44-fc-v669"), Some((6, 18)));
        assert_eq!(parse_release("6.5.0"), Some((6, 5)));
        assert_eq!(parse_release("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(parse_release("weird"), None);
    }
}
