//! The API shapes a tracing monitor (capsule8's) needs, on the real kernel:
//! a filter changed and cleared after the event was added, an event added
//! already enabled, a set-wide default attr, a raw attr's frequency kept,
//! dense ids. Needs root and tracefs with `uprobe_events`; skipped
//! otherwise, a failure under `CI=true`.

mod skip;
use perfbuf::PerfEventAttr;
use perfbuf::events::{Event, EventId, EventRecord, EventSet};
use skip::skip;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod thread_cpu;
use thread_cpu::thread_cpu;

/// The tests that call the probed function run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn capable() -> bool {
    let ok = EventSet::builder().build().is_ok() && Path::new("/sys/kernel/tracing/uprobe_events").exists();
    if !ok {
        skip("these tests need root and tracefs with uprobe_events");
    }
    ok
}

/// The probed function.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn perfbuf_shapes_target(n: i64) -> i64 {
    std::hint::black_box(n + 1)
}

#[cfg(target_arch = "x86_64")]
const ARG: &str = "n=%di:s64";
#[cfg(target_arch = "aarch64")]
const ARG: &str = "n=%x0:s64";

/// The `n`s the probe `ev` saw while `0..10` were called.
fn seen_with(set: &mut EventSet, ev: EventId) -> Vec<i64> {
    let me = std::process::id();
    let mut seen = Vec::new();
    let mut pb = set
        .reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.pid() == me
                && s.event == ev
            {
                seen.push(s.field("n").and_then(|v| v.as_i64()).unwrap_or(-1));
            }
        })
        .unwrap();
    for n in 0..10 {
        perfbuf_shapes_target(n);
    }
    pb.consume().unwrap();
    drop(pb);
    seen
}

#[test]
fn a_filter_changes_and_clears_after_the_add() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !capable() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let probe = Event::uprobe(&exe, "perfbuf_shapes_target").args(ARG).filter("n >= 7");
    // Each reading needs its own set (a set has one reader).
    let mut set = EventSet::builder().build().unwrap();
    let ev = set.add(&probe.clone().enabled()).unwrap();
    assert!(set.info(ev).unwrap().enabled, "added enabled");
    assert_eq!(seen_with(&mut set, ev), [7, 8, 9]);

    let mut set = EventSet::builder().build().unwrap();
    let ev = set.add(&probe.clone()).unwrap();
    set.enable(ev).unwrap();
    set.set_filter(ev, Some("n < 2")).unwrap();
    let e = set.set_filter(ev, Some("no_such_field == 1")).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    assert!(set.info(ev).unwrap().enabled);
    assert_eq!(seen_with(&mut set, ev), [0, 1], "the bad filter changed nothing");

    let mut set = EventSet::builder().build().unwrap();
    let ev = set.add(&probe).unwrap();
    set.set_filter(ev, None).unwrap();
    set.enable(ev).unwrap();
    assert_eq!(seen_with(&mut set, ev), (0..10).collect::<Vec<_>>(), "cleared");
}

#[test]
fn ids_are_dense_and_a_failed_add_takes_none() {
    if !capable() {
        return;
    }
    let mut set = EventSet::builder().pages(0).build().unwrap();
    let a = set.add(&Event::cpu_clock()).unwrap();
    assert!(set.add(&Event::tracepoint("nosuch:tracepoint").enabled()).is_err());
    let b = set.add(&Event::cpu_clock().enabled()).unwrap();
    set.remove(a).unwrap();
    let c = set.add(&Event::cpu_clock()).unwrap();
    assert_eq!((a.get(), b.get(), c.get()), (0, 1, 2));
}

/// Samples of `event` while this thread spins for `spin` of its CPU time
/// (however long a loaded machine takes to give it; a wall-clock spin
/// could be descheduled for most of it and sample nothing).
fn samples_while_spinning(
    set_for: impl FnOnce(i32) -> (EventSet, EventId),
    spin: Duration,
) -> Vec<Option<u64>> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let (mut set, ev) = set_for(tid);
    let mut periods = Vec::new();
    let mut pb = set
        .reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.event == ev
            {
                periods.push(s.sample.period);
            }
        })
        .unwrap();
    set.enable(ev).unwrap();
    let (start, deadline) = (thread_cpu(), Instant::now() + Duration::from_secs(60));
    while thread_cpu() - start < spin && Instant::now() < deadline {
        std::hint::black_box(perfbuf_shapes_target(1));
        pb.consume().unwrap();
    }
    set.disable(ev).unwrap();
    pb.consume().unwrap();
    drop(pb);
    periods
}

#[test]
fn a_raw_attr_keeps_its_frequency() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !capable() {
        return;
    }
    let attr = PerfEventAttr {
        type_: perfbuf::uapi::PERF_TYPE_SOFTWARE,
        config: perfbuf::uapi::PERF_COUNT_SW_CPU_CLOCK,
        sample_period: 99,
        flags: perfbuf::uapi::ATTR_FLAG_FREQ,
        sample_type: perfbuf::uapi::PERF_SAMPLE_PERIOD,
        ..PerfEventAttr::default()
    };
    let periods = samples_while_spinning(
        |tid| {
            let mut set = EventSet::builder().pid(tid).build().unwrap();
            let ev = set.add(&Event::raw(attr)).unwrap();
            (set, ev)
        },
        Duration::from_millis(300),
    );
    // 99 Hz of cpu-clock: periods of about 10 ms once the kernel has
    // adjusted; "every 99 ns" would give periods of 99.
    assert!(!periods.is_empty());
    let last = periods.last().copied().flatten().unwrap();
    assert!(last > 100_000, "the last period is {last} ns: {periods:?}");
}

#[test]
fn samples_at_a_frequency_carry_their_period() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !capable() {
        return;
    }
    // The kernel turns 999 Hz of cpu-clock into a period of 1e9 / 999 ns:
    // what each sample stands for (perf report's event count), whether the
    // frequency comes from the event, the set's default attr or a raw attr
    // that did not ask for PERF_SAMPLE_PERIOD itself.
    let freq =
        PerfEventAttr { sample_period: 999, flags: perfbuf::uapi::ATTR_FLAG_FREQ, ..Default::default() };
    let raw = PerfEventAttr {
        type_: perfbuf::uapi::PERF_TYPE_SOFTWARE,
        config: perfbuf::uapi::PERF_COUNT_SW_CPU_CLOCK,
        ..freq
    };
    type Open = fn(i32, PerfEventAttr, PerfEventAttr) -> (EventSet, EventId);
    let ways: [(&str, Open); 3] = [
        ("Event::frequency", |tid, _, _| {
            let mut set = EventSet::builder().pid(tid).build().unwrap();
            let ev = set.add(&Event::cpu_clock().frequency(999)).unwrap();
            (set, ev)
        }),
        ("default_attr", |tid, freq, _| {
            let mut set = EventSet::builder().pid(tid).default_attr(freq).build().unwrap();
            let ev = set.add(&Event::cpu_clock()).unwrap();
            (set, ev)
        }),
        ("Event::raw", |tid, _, raw| {
            let mut set = EventSet::builder().pid(tid).build().unwrap();
            let ev = set.add(&Event::raw(raw)).unwrap();
            (set, ev)
        }),
    ];
    for (how, open) in ways {
        let periods = samples_while_spinning(
            |tid| {
                let (set, ev) = open(tid, freq, raw);
                let info = set.info(ev).unwrap();
                assert_ne!(info.sample_type & perfbuf::uapi::PERF_SAMPLE_PERIOD, 0, "{how}");
                assert_eq!(set.attr(ev).unwrap().sample_period, 999, "{how}");
                (set, ev)
            },
            Duration::from_millis(50),
        );
        assert!(!periods.is_empty(), "{how}");
        assert!(periods.iter().all(|p| *p == Some(1_001_001)), "{how}: {periods:?}");
    }
}

#[test]
fn a_default_attr_applies_to_events_without_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !capable() {
        return;
    }
    let default = PerfEventAttr {
        sample_period: 1_000_000,
        sample_type: perfbuf::uapi::PERF_SAMPLE_PERIOD,
        ..PerfEventAttr::default()
    };
    let periods = samples_while_spinning(
        |tid| {
            let mut set = EventSet::builder().pid(tid).default_attr(default).build().unwrap();
            let ev = set.add(&Event::cpu_clock()).unwrap();
            assert_ne!(set.info(ev).unwrap().sample_type & perfbuf::uapi::PERF_SAMPLE_PERIOD, 0);
            (set, ev)
        },
        Duration::from_millis(100),
    );
    // A counting event would give no samples at all.
    assert!(!periods.is_empty());
    assert!(periods.iter().all(|p| *p == Some(1_000_000)), "{periods:?}");
}
