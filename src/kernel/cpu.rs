//! CPU masks from sysfs and the page size, cached like libbpf caches them.

use super::fallible;
use crate::error::{Error, Result};
use crate::log;
use once_cell::sync::OnceCell;

const POSSIBLE: &str = "/sys/devices/system/cpu/possible";
const ONLINE: &str = "/sys/devices/system/cpu/online";

/// Parses a kernel CPU list such as `"0-3,8,10-11\n"` into a mask indexed by
/// CPU id. Empty lists and reversed ranges are errors.
pub fn parse_cpu_list(text: &str) -> Result<Vec<bool>> {
    let text = text.trim_end_matches(['\n', '\0']);
    if text.is_empty() {
        log::warn(format_args!("Empty CPU range"));
        return Err(Error::INVAL);
    }
    let mut mask = Vec::new();
    for item in text.split(',') {
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (parse_id(a)?, parse_id(b)?),
            None => (parse_id(item)?, parse_id(item)?),
        };
        if lo > hi {
            log::warn(format_args!("Invalid CPU range [{lo},{hi}]"));
            return Err(Error::INVAL);
        }
        if mask.len() <= hi {
            let more = hi + 1 - mask.len();
            fallible::reserve(&mut mask, more)?;
            mask.resize(hi + 1, false);
        }
        mask[lo..=hi].iter_mut().for_each(|b| *b = true);
    }
    Ok(mask)
}

/// Largest CPU id we accept from sysfs; bounds the mask allocation.
const MAX_CPU_ID: usize = 1 << 16;

fn parse_id(s: &str) -> Result<usize> {
    match s.trim().parse::<usize>() {
        Ok(v) if v < MAX_CPU_ID => Ok(v),
        _ => {
            log::warn(format_args!("Failed to get CPU range {s}"));
            Err(Error::INVAL)
        }
    }
}

fn read_cpu_list(path: &str) -> Result<Vec<bool>> {
    // Read into the stack: no allocation that could abort (the list of a
    // machine with thousands of CPUs in ranges is still short).
    let mut buf = [0u8; 4096];
    let read = std::fs::File::open(path).and_then(|mut f| std::io::Read::read(&mut f, &mut buf));
    let n = read.map_err(|e| {
        log::warn(format_args!("Failed to read cpu mask from {path}: {e}"));
        Error::from_errno(e.raw_os_error().unwrap_or(libc::EIO))
    })?;
    let text = core::str::from_utf8(&buf[..n]).map_err(|_| Error::INVAL)?;
    parse_cpu_list(text)
}

/// Number of possible CPUs: the number of set bits in the possible mask
/// (libbpf's `libbpf_num_possible_cpus`), cached after the first success.
pub fn possible_cpu_count() -> Result<usize> {
    #[cfg(test)]
    if let Some(n) = super::fake::with(|k| k.possible_cpus()) {
        return Ok(n);
    }
    static COUNT: OnceCell<usize> = OnceCell::new();
    COUNT.get_or_try_init(|| Ok(read_cpu_list(POSSIBLE)?.iter().filter(|&&b| b).count())).copied()
}

/// The possible mask (CPU ids the kernel may ever bring online), cached
/// after the first success: per-CPU BPF map values come in its order.
pub fn possible_mask() -> Result<Vec<bool>> {
    #[cfg(test)]
    if let Some(n) = super::fake::with(|k| k.possible_cpus()) {
        return Ok(vec![true; n]);
    }
    static MASK: OnceCell<Vec<bool>> = OnceCell::new();
    MASK.get_or_try_init(|| read_cpu_list(POSSIBLE)).cloned()
}

/// The online mask, read fresh each time (CPUs come and go).
pub fn online_mask() -> Result<Vec<bool>> {
    #[cfg(test)]
    if let Some(mask) = super::fake::with(|k| k.online_mask()) {
        return mask;
    }
    #[cfg(feature = "fault-injection")]
    if let Some(mask) = super::fault::online() {
        return Ok(mask);
    }
    read_cpu_list(ONLINE)
}

/// Fault injection: the library sees `list` (`"0,2-3"`; `""` for none)
/// as the online CPUs, or the machine's again with `None`.
#[cfg(feature = "fault-injection")]
pub fn set_online_for_tests(list: Option<&str>) -> Result<()> {
    let mask = match list {
        Some("") => Some(Vec::new()),
        Some(l) => Some(parse_cpu_list(l)?),
        None => None,
    };
    super::fault::set_online(mask);
    Ok(())
}

/// The system page size, cached.
pub fn page_size() -> usize {
    static SIZE: OnceCell<usize> = OnceCell::new();
    // SAFETY: sysconf has no memory-safety preconditions.
    *SIZE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        let m = parse_cpu_list("0,2-3\n").unwrap();
        assert_eq!(m, vec![true, false, true, true]);
        assert_eq!(parse_cpu_list("0-1,8-9").unwrap().iter().filter(|&&b| b).count(), 4);
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse_cpu_list(""), Err(Error::INVAL));
        assert_eq!(parse_cpu_list("\n"), Err(Error::INVAL));
        assert_eq!(parse_cpu_list("3-1"), Err(Error::INVAL));
        assert_eq!(parse_cpu_list("x"), Err(Error::INVAL));
        assert_eq!(parse_cpu_list("0-99999999"), Err(Error::INVAL));
    }

    #[test]
    fn reads_this_machine() {
        assert!(possible_cpu_count().unwrap() >= 1);
        assert!(online_mask().unwrap().iter().any(|&b| b));
        assert!(page_size().is_power_of_two());
    }
}
