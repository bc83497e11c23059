//! libbpf's `OPTS_VALID` / `OPTS_GET` rules over the caller's option
//! bytes, and the environment variables of unchanged programs.
//!
//! The shims hand us the caller's struct as a byte slice of length `sz`,
//! so these rules are pure functions: a struct from an older header
//! (smaller `sz`) gets defaults for the fields it lacks, one from a newer
//! header (larger `sz`) is accepted only if the bytes we do not know are 0.

use super::abi::{
    PERFBUF_F_ADAPTIVE, PERFBUF_F_COUNT_LOST, PERFBUF_F_KEEP_SLOTS, PERFBUF_F_NO_HOTPLUG,
    PERFBUF_F_OVERWRITE, PERFBUF_ORDER_SAMPLE_TIME,
};
use super::ffi::{check_tail, field};
use crate::print;
use perfbuf::{Result, Wakeup};
use std::time::Duration;

/// `offsetofend(struct perf_buffer_opts, sample_period)`.
const PERF_BUFFER_OPTS_LAST_END: usize = 12;
/// `offsetofend(struct perf_buffer_raw_opts, map_keys)`.
const PERF_BUFFER_RAW_OPTS_LAST_END: usize = 32;
/// `offsetofend(struct perfbuf_opts, cpu_cnt)`.
const PERFBUF_OPTS_LAST_END: usize = 44;
/// `offsetofend(struct perfbuf_order_opts, idle_wait_ms)`.
const PERFBUF_ORDER_OPTS_LAST_END: usize = 32;

/// Largest accepted delay bound, in ms.
pub(crate) const MAX_MAX_DELAY_MS: u32 = 60_000;
/// Default bound on how long an idle ring holds ordered delivery back.
pub(crate) const DEFAULT_IDLE_WAIT_MS: u32 = 10;

/// Samples per wakeup from `struct perf_buffer_opts` (1 for NULL, an old
/// `sz`, or 0).
pub(crate) fn sample_period(bytes: Option<&[u8]>) -> Result<u32> {
    let Some(bytes) = bytes else { return Ok(1) };
    check_tail(bytes, PERF_BUFFER_OPTS_LAST_END, "perf_buffer_opts: bad size or non-zero extra bytes")?;
    Ok(field::<4>(bytes, 8).map_or(1, u32::from_ne_bytes).max(1))
}

/// Options of `perf_buffer__new_raw`, after validation (pointers not yet read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawOpts {
    /// `cpu_cnt` (negative behaves as 0, as in libbpf).
    pub(crate) cpu_cnt: i32,
    /// Address of the `cpus` array.
    pub(crate) cpus: usize,
    /// Address of the `map_keys` array.
    pub(crate) map_keys: usize,
}

/// Parses `struct perf_buffer_raw_opts`; `None` means the caller passed NULL.
pub(crate) fn raw_opts(bytes: Option<&[u8]>) -> Result<RawOpts> {
    let Some(bytes) = bytes else { return Ok(RawOpts::default()) };
    check_tail(
        bytes,
        PERF_BUFFER_RAW_OPTS_LAST_END,
        "perf_buffer_raw_opts: bad size or non-zero extra bytes",
    )?;
    Ok(RawOpts {
        cpu_cnt: field::<4>(bytes, 8).map_or(0, i32::from_ne_bytes),
        cpus: field::<8>(bytes, 16).map_or(0, usize::from_ne_bytes),
        map_keys: field::<8>(bytes, 24).map_or(0, usize::from_ne_bytes),
    })
}

/// Options of `perfbuf_new`, after validation (the CPU list not yet read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ExtOpts {
    pub(crate) wakeup: Wakeup,
    pub(crate) max_delay: Option<Duration>,
    pub(crate) overwrite: bool,
    pub(crate) adaptive: bool,
    pub(crate) count_lost: bool,
    /// Address of the CPU list.
    pub(crate) cpus: usize,
    /// Its length (≤ 0: all CPUs).
    pub(crate) cpu_cnt: i32,
    /// CPUs that come and go are served (no `PERFBUF_F_NO_HOTPLUG`).
    pub(crate) hotplug: bool,
    /// `perfbuf_free` leaves the map's slots (`PERFBUF_F_KEEP_SLOTS`).
    pub(crate) keep_slots: bool,
    /// perfbuf.bpf.h's counts map (0: none).
    pub(crate) output_counts_fd: i32,
}

/// The wake-up choice of `wakeup_events` / `wakeup_bytes`.
fn wakeup(events: u32, bytes: u32) -> Wakeup {
    match (events, bytes) {
        (_, b) if b > 0 => Wakeup::Bytes(b),
        (0 | 1, _) => Wakeup::EveryRecord,
        (n, _) => Wakeup::Records(n),
    }
}

/// A delay bound in ms (0: the default).
fn max_delay(ms: u32) -> Result<Option<Duration>> {
    if ms > MAX_MAX_DELAY_MS {
        return Err(print::invalid("max_delay_ms is above 60000"));
    }
    Ok((ms > 0).then(|| Duration::from_millis(ms.into())))
}

/// Parses `struct perfbuf_opts`; `None` means the caller passed NULL.
pub(crate) fn ext_opts(bytes: Option<&[u8]>) -> Result<ExtOpts> {
    let mut o = ExtOpts {
        wakeup: Wakeup::EveryRecord,
        max_delay: None,
        overwrite: false,
        adaptive: false,
        count_lost: false,
        cpus: 0,
        cpu_cnt: 0,
        hotplug: true,
        keep_slots: false,
        output_counts_fd: 0,
    };
    let Some(bytes) = bytes else { return Ok(o) };
    check_tail(bytes, PERFBUF_OPTS_LAST_END, "perfbuf_opts: bad size or non-zero extra bytes")?;
    let u32_at = |off| field::<4>(bytes, off).map_or(0, u32::from_ne_bytes);
    let flags = u32_at(20);
    let known = PERFBUF_F_OVERWRITE
        | PERFBUF_F_ADAPTIVE
        | PERFBUF_F_COUNT_LOST
        | PERFBUF_F_NO_HOTPLUG
        | PERFBUF_F_KEEP_SLOTS;
    if flags & !known != 0 {
        return Err(print::invalid("perfbuf_opts: unknown flags"));
    }
    o.wakeup = wakeup(u32_at(8), u32_at(12));
    o.max_delay = max_delay(u32_at(16))?;
    o.overwrite = flags & PERFBUF_F_OVERWRITE != 0;
    o.adaptive = flags & PERFBUF_F_ADAPTIVE != 0;
    o.count_lost = flags & PERFBUF_F_COUNT_LOST != 0;
    o.cpus = field::<8>(bytes, 24).map_or(0, usize::from_ne_bytes);
    o.cpu_cnt = field::<4>(bytes, 32).map_or(0, i32::from_ne_bytes);
    o.hotplug = flags & PERFBUF_F_NO_HOTPLUG == 0;
    o.keep_slots = flags & PERFBUF_F_KEEP_SLOTS != 0;
    if field::<4>(bytes, 36).is_some_and(|r| r != [0; 4]) {
        return Err(print::invalid("perfbuf_opts: reserved is not 0"));
    }
    o.output_counts_fd = field::<4>(bytes, 40).map_or(0, i32::from_ne_bytes);
    Ok(o)
}

/// Options of `perfbuf_set_order`, after validation (pointers not yet used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OrderFields {
    /// Address of the key function (0: none).
    pub(crate) key_fn: usize,
    /// Its ctx.
    pub(crate) key_ctx: usize,
    /// `PERFBUF_ORDER_*`.
    pub(crate) flags: u32,
    /// Idle bound in ms (defaulted).
    pub(crate) idle_wait_ms: u32,
}

/// Parses `struct perfbuf_order_opts`; `None` means the caller passed NULL.
pub(crate) fn order_opts(bytes: Option<&[u8]>) -> Result<OrderFields> {
    let mut f = OrderFields { key_fn: 0, key_ctx: 0, flags: 0, idle_wait_ms: DEFAULT_IDLE_WAIT_MS };
    let Some(bytes) = bytes else { return Ok(f) };
    check_tail(bytes, PERFBUF_ORDER_OPTS_LAST_END, "perfbuf_order_opts: bad size or non-zero extra bytes")?;
    f.key_fn = field::<8>(bytes, 8).map_or(0, usize::from_ne_bytes);
    f.key_ctx = field::<8>(bytes, 16).map_or(0, usize::from_ne_bytes);
    f.flags = field::<4>(bytes, 24).map_or(0, u32::from_ne_bytes);
    if let Some(ms) = field::<4>(bytes, 28).map(u32::from_ne_bytes).filter(|&ms| ms != 0) {
        f.idle_wait_ms = ms;
    }
    if f.flags & !PERFBUF_ORDER_SAMPLE_TIME != 0
        || (f.key_fn != 0 && f.flags & PERFBUF_ORDER_SAMPLE_TIME != 0)
    {
        return Err(print::invalid("perfbuf_order_opts: bad flags"));
    }
    Ok(f)
}

/// Batching asked for by the environment of an unchanged program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EnvBatching {
    pub(crate) wakeup_events: u32,
    pub(crate) max_delay: Option<Duration>,
}

/// The LD_PRELOAD opt-in: `PERFBUF_WAKEUP_EVENTS` and `PERFBUF_MAX_DELAY_MS`
/// (decimal). `None` when neither is set; a value that is not a number in
/// range is an error, never silently ignored.
pub(crate) fn env_batching(
    wakeup_events: Option<&str>,
    max_delay_ms: Option<&str>,
) -> Result<Option<EnvBatching>> {
    if wakeup_events.is_none() && max_delay_ms.is_none() {
        return Ok(None);
    }
    let parse = |name: &str, value: Option<&str>, max: u32| -> Result<u32> {
        let Some(value) = value else { return Ok(0) };
        match value.trim().parse::<u32>() {
            Ok(v) if v >= 1 && v <= max => Ok(v),
            _ => {
                print::warn(format_args!("{name}={value:?} is not a number in 1..={max}; refusing to start"));
                Err(perfbuf::Error::invalid("bad PERFBUF_WAKEUP_EVENTS or PERFBUF_MAX_DELAY_MS"))
            }
        }
    };
    let events = parse("PERFBUF_WAKEUP_EVENTS", wakeup_events, 1 << 20)?;
    let delay = parse("PERFBUF_MAX_DELAY_MS", max_delay_ms, MAX_MAX_DELAY_MS)?;
    Ok(Some(EnvBatching { wakeup_events: events.max(1), max_delay: max_delay(delay)? }))
}

/// `PERFBUF_ADAPTIVE`: `1` opts in to the fast mode (adaptive wake-ups)
/// under the default attr; unset or `0` keeps libbpf's per-record
/// wake-ups. Anything else is an error, never silently ignored.
pub(crate) fn env_adaptive(value: Option<&str>) -> Result<bool> {
    env_switch("PERFBUF_ADAPTIVE", "bad PERFBUF_ADAPTIVE", value)
}

/// A `0`/`1` switch from the environment (`value` of variable `name`):
/// unset is off; anything but 0 or 1 is an error (`bad` says which),
/// never silently ignored.
pub(crate) fn env_switch(name: &str, bad: &'static str, value: Option<&str>) -> Result<bool> {
    match value.map(str::trim) {
        Some("1") => Ok(true),
        None | Some("0") => Ok(false),
        Some(other) => {
            print::warn(format_args!("{name}={other:?} is not 0 or 1; refusing to start"));
            Err(perfbuf::Error::invalid(bad))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfbuf::Error;

    fn opts_bytes(sz: usize, fill: &[(usize, u8)]) -> Vec<u8> {
        let mut v = vec![0u8; sz.max(8)];
        v[..8].copy_from_slice(&sz.to_ne_bytes());
        for &(i, b) in fill {
            v[i] = b;
        }
        v.truncate(sz);
        v
    }

    #[test]
    fn adaptive_env_is_strict() {
        assert_eq!(env_adaptive(None), Ok(false));
        assert_eq!(env_adaptive(Some("1")), Ok(true));
        assert_eq!(env_adaptive(Some(" 0 ")), Ok(false));
        assert_eq!(env_adaptive(Some("no")).map_err(|e| e.errno()), Err(libc::EINVAL));
    }

    #[test]
    fn null_opts_give_defaults() {
        assert_eq!(sample_period(None), Ok(1));
        assert_eq!(raw_opts(None), Ok(RawOpts::default()));
    }

    #[test]
    fn too_small_is_einval() {
        assert!(sample_period(Some(&[4, 0, 0, 0])).is_err());
        assert!(raw_opts(Some(&[0; 7])).is_err());
    }

    #[test]
    fn libbpf_1_0_size_defaults_period() {
        assert_eq!(sample_period(Some(&opts_bytes(8, &[]))), Ok(1));
    }

    #[test]
    fn period_zero_means_one_and_value_is_read() {
        assert_eq!(sample_period(Some(&opts_bytes(16, &[]))), Ok(1));
        assert_eq!(sample_period(Some(&opts_bytes(16, &[(8, 64)]))), Ok(64));
    }

    #[test]
    fn unknown_tail_must_be_zero() {
        assert!(sample_period(Some(&opts_bytes(16, &[(12, 1)]))).is_err());
        assert!(sample_period(Some(&opts_bytes(64, &[]))).is_ok());
        assert!(sample_period(Some(&opts_bytes(64, &[(63, 1)]))).is_err());
        assert!(raw_opts(Some(&opts_bytes(40, &[(39, 1)]))).is_err());
    }

    #[test]
    fn ext_opts_wakeups_flags_and_defaults() {
        let none = ext_opts(None).unwrap();
        assert_eq!((none.wakeup, none.max_delay, none.adaptive), (Wakeup::EveryRecord, None, false));
        let o = ext_opts(Some(&opts_bytes(40, &[(8, 64)]))).unwrap();
        assert_eq!(o.wakeup, Wakeup::Records(64));
        let o = ext_opts(Some(&opts_bytes(40, &[(12, 0), (13, 1), (16, 2)]))).unwrap();
        assert_eq!((o.wakeup, o.max_delay), (Wakeup::Bytes(256), Some(Duration::from_millis(2))));
        assert!(ext_opts(Some(&opts_bytes(40, &[(20, 2)]))).unwrap().adaptive);
        assert!(ext_opts(Some(&opts_bytes(40, &[(20, 1)]))).unwrap().overwrite);
        assert!(ext_opts(Some(&opts_bytes(40, &[(20, 4)]))).unwrap().count_lost);
        let all = ext_opts(Some(&opts_bytes(48, &[]))).unwrap();
        assert!(all.hotplug && all.output_counts_fd == 0, "CPUs that come and go are served by default");
        let o = ext_opts(Some(&opts_bytes(48, &[(20, 8), (40, 7)]))).unwrap();
        assert!(!o.hotplug && o.output_counts_fd == 7);
        let o = ext_opts(Some(&opts_bytes(40, &[(20, 16)]))).unwrap();
        assert!(o.keep_slots && !ext_opts(Some(&opts_bytes(40, &[]))).unwrap().keep_slots);
        assert_eq!(
            ext_opts(Some(&opts_bytes(40, &[(20, 32)]))).map(drop),
            Err(Error::invalid("perfbuf_opts: unknown flags"))
        );
        assert!(ext_opts(Some(&opts_bytes(48, &[(36, 1)]))).is_err(), "reserved");
        assert!(ext_opts(Some(&opts_bytes(56, &[(44, 1)]))).is_err());
        assert!(ext_opts(Some(&opts_bytes(56, &[(48, 1)]))).is_err());
        // A caller from before cpus/cpu_cnt existed still works.
        assert!(ext_opts(Some(&opts_bytes(24, &[]))).is_ok());
    }

    #[test]
    fn env_switches_are_0_or_1() {
        assert_eq!(env_switch("PERFBUF_HOTPLUG", "bad PERFBUF_HOTPLUG", None), Ok(false));
        assert_eq!(env_switch("PERFBUF_HOTPLUG", "bad PERFBUF_HOTPLUG", Some("1")), Ok(true));
        let e = env_switch("PERFBUF_HOTPLUG", "bad PERFBUF_HOTPLUG", Some("yes")).unwrap_err();
        assert!(e.to_string().contains("PERFBUF_HOTPLUG"), "{e}");
    }

    #[test]
    fn env_opt_in_is_strict() {
        assert_eq!(env_batching(None, None), Ok(None));
        let b = env_batching(Some("64"), Some("5")).unwrap().unwrap();
        assert_eq!((b.wakeup_events, b.max_delay), (64, Some(Duration::from_millis(5))));
        let b = env_batching(Some("16"), None).unwrap().unwrap();
        assert_eq!(b.max_delay, None, "the reader's default bound then");
        for bad in ["", "0", "-1", "abc", "12ms", "99999999999"] {
            assert!(env_batching(Some(bad), None).is_err(), "{bad:?}");
        }
        assert!(env_batching(None, Some("60001")).is_err());
    }

    #[test]
    fn raw_fields_are_read_at_1x_offsets() {
        let mut b = opts_bytes(32, &[(8, 2)]);
        b[16..24].copy_from_slice(&0x1000usize.to_ne_bytes());
        b[24..32].copy_from_slice(&0x2000usize.to_ne_bytes());
        assert_eq!(raw_opts(Some(&b)), Ok(RawOpts { cpu_cnt: 2, cpus: 0x1000, map_keys: 0x2000 }));
        // An older caller whose struct ends before map_keys gets NULL for it.
        assert_eq!(raw_opts(Some(&b[..24])).unwrap().map_keys, 0);
    }

    #[test]
    fn order_flags_are_checked() {
        assert_eq!(order_opts(None).unwrap().idle_wait_ms, DEFAULT_IDLE_WAIT_MS);
        let mut b = opts_bytes(32, &[(24, 1)]);
        assert_eq!(order_opts(Some(&b)).unwrap().flags, PERFBUF_ORDER_SAMPLE_TIME);
        b[8] = 1; // a key_fn and the SAMPLE_TIME flag
        assert!(order_opts(Some(&b)).is_err());
    }
}
