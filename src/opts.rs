//! libbpf's `OPTS_VALID` / `OPTS_GET` rules over the caller's option bytes.
//!
//! The FFI layer hands us the caller's struct as a byte slice of length
//! `sz`, so these rules are pure functions: a struct from an older header
//! (smaller `sz`) gets defaults for the fields it lacks, one from a newer
//! header (larger `sz`) is accepted only if the bytes we do not know are 0.

use crate::error::{Errno, Result};
use crate::log;

/// `offsetofend(struct perf_buffer_opts, sample_period)`.
const PERF_BUFFER_OPTS_LAST_END: usize = 12;
/// `offsetofend(struct perf_buffer_raw_opts, map_keys)`.
const PERF_BUFFER_RAW_OPTS_LAST_END: usize = 32;

/// Options of `perf_buffer__new`, after validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleOpts {
    /// Samples per wakeup (`wakeup_events`), at least 1.
    pub sample_period: u32,
}

impl Default for SampleOpts {
    fn default() -> Self {
        SampleOpts { sample_period: 1 }
    }
}

/// Options of `perf_buffer__new_raw`, after validation (pointers not yet read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RawOptsFields {
    /// `cpu_cnt` (negative behaves as 0, as in libbpf).
    pub cpu_cnt: i32,
    /// Address of the `cpus` array.
    pub cpus: usize,
    /// Address of the `map_keys` array.
    pub map_keys: usize,
}

/// Reads `sz`, the first field of every opts struct, from its raw bytes.
pub fn read_sz(first_word: [u8; 8]) -> usize {
    usize::from_ne_bytes(first_word)
}

/// Checks `sz` and the unknown tail of an opts struct named `type_name`.
fn validate(bytes: &[u8], last_end: usize, type_name: &str) -> Result<()> {
    if bytes.len() < size_of::<usize>() {
        log::warn(format_args!("{type_name} size ({}) is too small", bytes.len()));
        return Err(Errno::INVAL);
    }
    if bytes.len() > last_end && bytes[last_end..].iter().any(|&b| b != 0) {
        log::warn(format_args!("{type_name} has non-zero extra bytes"));
        return Err(Errno::INVAL);
    }
    Ok(())
}

/// Reads the `N` bytes of a field at `offset` if the caller's struct has it.
fn field<const N: usize>(bytes: &[u8], offset: usize) -> Option<[u8; N]> {
    bytes.get(offset..offset + N).map(|s| s.try_into().expect("length checked by get"))
}

/// Parses `struct perf_buffer_opts`; `None` means the caller passed NULL.
pub fn sample_opts(bytes: Option<&[u8]>) -> Result<SampleOpts> {
    let Some(bytes) = bytes else { return Ok(SampleOpts::default()) };
    validate(bytes, PERF_BUFFER_OPTS_LAST_END, "perf_buffer_opts")?;
    let period = field::<4>(bytes, 8).map_or(1, u32::from_ne_bytes);
    Ok(SampleOpts { sample_period: period.max(1) })
}

/// Parses `struct perf_buffer_raw_opts`; `None` means the caller passed NULL.
pub fn raw_opts(bytes: Option<&[u8]>) -> Result<RawOptsFields> {
    let Some(bytes) = bytes else { return Ok(RawOptsFields::default()) };
    validate(bytes, PERF_BUFFER_RAW_OPTS_LAST_END, "perf_buffer_raw_opts")?;
    Ok(RawOptsFields {
        cpu_cnt: field::<4>(bytes, 8).map_or(0, i32::from_ne_bytes),
        cpus: field::<8>(bytes, 16).map_or(0, usize::from_ne_bytes),
        map_keys: field::<8>(bytes, 24).map_or(0, usize::from_ne_bytes),
    })
}

/// `offsetofend(struct perfbuf_opts, cpu_cnt)`.
const PERFBUF_OPTS_LAST_END: usize = 36;

/// Default bound on how long a batched record may wait.
pub const DEFAULT_MAX_DELAY_MS: u32 = 10;
/// Largest accepted delay bound.
pub const MAX_MAX_DELAY_MS: u32 = 60_000;

/// When the kernel should wake the reader, and how long records may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    /// Samples per wakeup (≥ 1).
    pub wakeup_events: u32,
    /// Bytes per wakeup (0: count samples instead).
    pub wakeup_bytes: u32,
    /// Drain everything pending at least this often; `None` when every
    /// sample wakes the reader anyway.
    pub max_delay_ms: Option<u32>,
}

impl Batching {
    fn new(wakeup_events: u32, wakeup_bytes: u32, max_delay_ms: u32) -> Result<Self> {
        if max_delay_ms > MAX_MAX_DELAY_MS {
            log::warn(format_args!("max_delay_ms {max_delay_ms} is above {MAX_MAX_DELAY_MS}"));
            return Err(Errno::INVAL);
        }
        let wakeup_events = wakeup_events.max(1);
        let batched = wakeup_events > 1 || wakeup_bytes > 0;
        let delay = if max_delay_ms == 0 { DEFAULT_MAX_DELAY_MS } else { max_delay_ms };
        Ok(Batching { wakeup_events, wakeup_bytes, max_delay_ms: batched.then_some(delay) })
    }
}

/// Options of `perfbuf_new`, after validation (the CPU list not yet read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtOpts {
    /// Wakeups and delay bound.
    pub batching: Batching,
    /// `PERFBUF_F_*`.
    pub flags: u32,
    /// Address of the CPU list.
    pub cpus: usize,
    /// Its length (≤ 0: all CPUs).
    pub cpu_cnt: i32,
}

/// Parses `struct perfbuf_opts`; `None` means the caller passed NULL.
pub fn ext_opts(bytes: Option<&[u8]>) -> Result<ExtOpts> {
    let none = ExtOpts { batching: Batching::new(1, 0, 0)?, flags: 0, cpus: 0, cpu_cnt: 0 };
    let Some(bytes) = bytes else { return Ok(none) };
    validate(bytes, PERFBUF_OPTS_LAST_END, "perfbuf_opts")?;
    let u32_at = |off| field::<4>(bytes, off).map_or(0, u32::from_ne_bytes);
    let flags = u32_at(20);
    if flags & !crate::abi::PERFBUF_F_OVERWRITE != 0 {
        log::warn(format_args!("perfbuf_opts: unknown flags {flags:#x}"));
        return Err(Errno::INVAL);
    }
    Ok(ExtOpts {
        batching: Batching::new(u32_at(8), u32_at(12), u32_at(16))?,
        flags,
        cpus: field::<8>(bytes, 24).map_or(0, usize::from_ne_bytes),
        cpu_cnt: field::<4>(bytes, 32).map_or(0, i32::from_ne_bytes),
    })
}

/// `offsetofend(struct perfbuf_order_opts, idle_wait_ms)`.
const PERFBUF_ORDER_OPTS_LAST_END: usize = 32;

/// Default bound on how long an idle ring holds ordered delivery back.
pub const DEFAULT_IDLE_WAIT_MS: u32 = 10;

/// Options of `perfbuf_set_order`, after validation (pointers not yet used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderFields {
    /// Address of the key function (0: none).
    pub key_fn: usize,
    /// Its ctx.
    pub key_ctx: usize,
    /// `PERFBUF_ORDER_*`.
    pub flags: u32,
    /// Idle bound in ms (defaulted).
    pub idle_wait_ms: u32,
}

/// Parses `struct perfbuf_order_opts`; `None` means the caller passed NULL.
pub fn order_opts(bytes: Option<&[u8]>) -> Result<OrderFields> {
    let mut f = OrderFields { key_fn: 0, key_ctx: 0, flags: 0, idle_wait_ms: DEFAULT_IDLE_WAIT_MS };
    let Some(bytes) = bytes else { return Ok(f) };
    validate(bytes, PERFBUF_ORDER_OPTS_LAST_END, "perfbuf_order_opts")?;
    f.key_fn = field::<8>(bytes, 8).map_or(0, usize::from_ne_bytes);
    f.key_ctx = field::<8>(bytes, 16).map_or(0, usize::from_ne_bytes);
    f.flags = field::<4>(bytes, 24).map_or(0, u32::from_ne_bytes);
    if let Some(ms) = field::<4>(bytes, 28).map(u32::from_ne_bytes).filter(|&ms| ms != 0) {
        f.idle_wait_ms = ms;
    }
    if f.flags & !crate::abi::PERFBUF_ORDER_SAMPLE_TIME != 0
        || (f.key_fn != 0 && f.flags & crate::abi::PERFBUF_ORDER_SAMPLE_TIME != 0)
    {
        log::warn(format_args!("perfbuf_order_opts: bad flags {:#x}", f.flags));
        return Err(Errno::INVAL);
    }
    Ok(f)
}

/// The LD_PRELOAD opt-in: `PERFBUF_WAKEUP_EVENTS` and `PERFBUF_MAX_DELAY_MS`
/// (decimal). `None` when neither is set; a value that is not a number in
/// range is an error, never silently ignored.
pub fn env_batching(wakeup_events: Option<&str>, max_delay_ms: Option<&str>) -> Result<Option<Batching>> {
    if wakeup_events.is_none() && max_delay_ms.is_none() {
        return Ok(None);
    }
    let parse = |name: &str, value: Option<&str>, max: u32| -> Result<u32> {
        let Some(value) = value else { return Ok(0) };
        match value.trim().parse::<u32>() {
            Ok(v) if v >= 1 && v <= max => Ok(v),
            _ => {
                log::warn(format_args!("{name}={value:?} is not a number in 1..={max}; refusing to start"));
                Err(Errno::INVAL)
            }
        }
    };
    let events = parse("PERFBUF_WAKEUP_EVENTS", wakeup_events, 1 << 20)?;
    let delay = parse("PERFBUF_MAX_DELAY_MS", max_delay_ms, MAX_MAX_DELAY_MS)?;
    Batching::new(events, 0, delay).map(Some)
}

/// `PERFBUF_ADAPTIVE`: `1` opts in to the fast mode (adaptive wake-ups)
/// under the default attr; unset or `0` keeps libbpf's per-record
/// wake-ups. Anything else is an error, never silently ignored.
pub fn env_adaptive(value: Option<&str>) -> Result<bool> {
    match value.map(str::trim) {
        Some("1") => Ok(true),
        None | Some("0") => Ok(false),
        Some(other) => {
            log::warn(format_args!("PERFBUF_ADAPTIVE={other:?} is not 0 or 1; refusing to start"));
            Err(Errno::INVAL)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(env_adaptive(Some("no")), Err(Errno::INVAL));
    }

    #[test]
    fn null_opts_give_defaults() {
        assert_eq!(sample_opts(None), Ok(SampleOpts { sample_period: 1 }));
        assert_eq!(raw_opts(None), Ok(RawOptsFields::default()));
    }

    #[test]
    fn too_small_is_einval() {
        assert_eq!(sample_opts(Some(&[4, 0, 0, 0])), Err(Errno::INVAL));
        assert_eq!(raw_opts(Some(&[0; 7])), Err(Errno::INVAL));
    }

    #[test]
    fn libbpf_1_0_size_defaults_period() {
        assert_eq!(sample_opts(Some(&opts_bytes(8, &[]))), Ok(SampleOpts { sample_period: 1 }));
    }

    #[test]
    fn period_zero_means_one_and_value_is_read() {
        assert_eq!(sample_opts(Some(&opts_bytes(16, &[]))).unwrap().sample_period, 1);
        assert_eq!(sample_opts(Some(&opts_bytes(16, &[(8, 64)]))).unwrap().sample_period, 64);
    }

    #[test]
    fn unknown_tail_must_be_zero() {
        assert_eq!(sample_opts(Some(&opts_bytes(16, &[(12, 1)]))), Err(Errno::INVAL));
        assert!(sample_opts(Some(&opts_bytes(64, &[]))).is_ok());
        assert_eq!(sample_opts(Some(&opts_bytes(64, &[(63, 1)]))), Err(Errno::INVAL));
        assert_eq!(raw_opts(Some(&opts_bytes(40, &[(39, 1)]))), Err(Errno::INVAL));
    }

    #[test]
    fn ext_opts_batching_and_defaults() {
        let none = ext_opts(None).unwrap();
        assert_eq!(none.batching, Batching { wakeup_events: 1, wakeup_bytes: 0, max_delay_ms: None });
        let b = opts_bytes(40, &[(8, 64)]);
        let o = ext_opts(Some(&b)).unwrap();
        assert_eq!(o.batching.wakeup_events, 64);
        assert_eq!(o.batching.max_delay_ms, Some(DEFAULT_MAX_DELAY_MS));
        let b = opts_bytes(40, &[(12, 0), (13, 1), (16, 2)]);
        let o = ext_opts(Some(&b)).unwrap();
        assert_eq!((o.batching.wakeup_bytes, o.batching.max_delay_ms), (256, Some(2)));
        assert_eq!(ext_opts(Some(&opts_bytes(40, &[(20, 2)]))), Err(Errno::INVAL));
        assert_eq!(ext_opts(Some(&opts_bytes(48, &[(44, 1)]))), Err(Errno::INVAL));
        // A caller from before cpus/cpu_cnt existed still works.
        assert!(ext_opts(Some(&opts_bytes(24, &[]))).is_ok());
    }

    #[test]
    fn env_opt_in_is_strict() {
        assert_eq!(env_batching(None, None), Ok(None));
        let b = env_batching(Some("64"), Some("5")).unwrap().unwrap();
        assert_eq!((b.wakeup_events, b.max_delay_ms), (64, Some(5)));
        let b = env_batching(Some("16"), None).unwrap().unwrap();
        assert_eq!(b.max_delay_ms, Some(DEFAULT_MAX_DELAY_MS));
        for bad in ["", "0", "-1", "abc", "12ms", "99999999999"] {
            assert_eq!(env_batching(Some(bad), None), Err(Errno::INVAL), "{bad:?}");
        }
        assert_eq!(env_batching(None, Some("60001")), Err(Errno::INVAL));
    }

    #[test]
    fn raw_fields_are_read_at_1x_offsets() {
        let mut b = opts_bytes(32, &[(8, 2)]);
        b[16..24].copy_from_slice(&0x1000usize.to_ne_bytes());
        b[24..32].copy_from_slice(&0x2000usize.to_ne_bytes());
        assert_eq!(raw_opts(Some(&b)), Ok(RawOptsFields { cpu_cnt: 2, cpus: 0x1000, map_keys: 0x2000 }));
        // An older caller whose struct ends before map_keys gets NULL for it.
        assert_eq!(raw_opts(Some(&b[..24])).unwrap().map_keys, 0);
    }
}
