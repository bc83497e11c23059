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
    fn raw_fields_are_read_at_1x_offsets() {
        let mut b = opts_bytes(32, &[(8, 2)]);
        b[16..24].copy_from_slice(&0x1000usize.to_ne_bytes());
        b[24..32].copy_from_slice(&0x2000usize.to_ne_bytes());
        assert_eq!(raw_opts(Some(&b)), Ok(RawOptsFields { cpu_cnt: 2, cpus: 0x1000, map_keys: 0x2000 }));
        // An older caller whose struct ends before map_keys gets NULL for it.
        assert_eq!(raw_opts(Some(&b[..24])).unwrap().map_keys, 0);
    }
}
