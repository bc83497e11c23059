//! The kernel's dynamic `kprobe` and `uprobe` PMUs (Linux 4.17+): a probe
//! is one `perf_event_open` whose attr names the symbol or binary, and it
//! goes away when its fd closes. Their type numbers and config bits are
//! assigned at boot and published in sysfs, so they are read, never assumed.

use crate::error::{Error, Result, What};
use crate::kernel::PerfEventAttr;
use crate::log::debug;
use core::marker::PhantomData;
use std::ffi::CStr;
use std::io;
use std::path::Path;

/// Where sysfs lists the kernel's event sources.
pub(crate) const EVENT_SOURCES: &str = "/sys/bus/event_source/devices";

/// Types below this are the fixed `PERF_TYPE_*`; the kernel numbers dynamic
/// PMUs from here on, so a smaller `type` means we read the wrong file.
const FIRST_DYNAMIC_TYPE: u32 = 6;

/// Which dynamic probe PMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProbePmu {
    /// Probes on kernel functions.
    Kprobe,
    /// Probes on code in binaries, at file offsets.
    Uprobe,
}

impl ProbePmu {
    /// The PMU's directory name in sysfs.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ProbePmu::Kprobe => "kprobe",
            ProbePmu::Uprobe => "uprobe",
        }
    }
}

/// Bits `lo..=hi` of the attr's `config` word, as a sysfs format file
/// describes a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ConfigBits {
    lo: u32,
    hi: u32,
}

impl ConfigBits {
    fn width(self) -> u32 {
        self.hi - self.lo + 1
    }
}

/// A dynamic probe PMU as sysfs describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DynamicPmu {
    kind: ProbePmu,
    type_: u32,
    /// `format/retprobe`: absent only on a kernel we cannot make return probes with.
    retprobe_bit: Option<u32>,
    /// `format/ref_ctr_offset` (uprobe, Linux 4.20+): where the USDT semaphore offset goes.
    ref_ctr_offset_bits: Option<ConfigBits>,
}

impl DynamicPmu {
    /// Reads `<root>/<name>/type` and `<root>/<name>/format/{retprobe,ref_ctr_offset}`.
    pub(crate) fn load(root: &Path, kind: ProbePmu) -> Result<DynamicPmu> {
        let name = kind.name();
        let dir = root.join(name);
        match std::fs::metadata(&dir) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                debug(format_args!("no {} PMU: {} does not exist", name, dir.display()));
                return Err(Error::new(libc::EOPNOTSUPP, What::NoPmu(name)));
            }
            Err(e) => return Err(sysfs_error(kind, &e)),
        }
        let type_text = std::fs::read_to_string(dir.join("type")).map_err(|e| sysfs_error(kind, &e))?;
        let type_ = match type_text.trim_end().parse::<u32>() {
            Ok(t) if t >= FIRST_DYNAMIC_TYPE => t,
            _ => return Err(garbled(kind)),
        };
        let retprobe_bit = match read_format_field(&dir, "retprobe", kind)? {
            Some(bits) if bits.lo == bits.hi => Some(bits.lo),
            Some(_) => return Err(garbled(kind)),
            None => None,
        };
        let ref_ctr_offset_bits = match kind {
            ProbePmu::Uprobe => read_format_field(&dir, "ref_ctr_offset", kind)?,
            // The kernel's kprobe PMU has no such field; a sysfs that claims one is not read.
            ProbePmu::Kprobe => None,
        };
        let pmu = DynamicPmu { kind, type_, retprobe_bit, ref_ctr_offset_bits };
        debug(format_args!(
            "{} PMU: type {}, retprobe bit {:?}, ref_ctr_offset bits {:?}",
            name, type_, retprobe_bit, ref_ctr_offset_bits
        ));
        Ok(pmu)
    }

    /// The PMU's `perf_event_attr.type`.
    #[cfg(test)]
    pub(crate) fn type_(&self) -> u32 {
        self.type_
    }

    /// The attr for a probe on `target` (kprobe: a kernel symbol, "module:symbol"
    /// allowed; uprobe: a binary's path) at `offset` (kprobe: offset into the
    /// symbol; uprobe: a FILE offset), as a return probe if asked;
    /// `ref_ctr_offset` (uprobe only, USDT semaphore file offset, 0 = none).
    pub(crate) fn attr<'a>(
        &self,
        target: &'a CStr,
        offset: u64,
        retprobe: bool,
        ref_ctr_offset: u64,
    ) -> Result<ProbeAttr<'a>> {
        if target.is_empty() {
            return Err(Error::invalid("a probe needs a target: a kernel symbol or a binary's path"));
        }
        let mut config = 0u64;
        if retprobe {
            let bit = self.retprobe_bit.ok_or_else(|| garbled(self.kind))?;
            config |= 1 << bit;
        }
        if ref_ctr_offset != 0 {
            config |= self.ref_ctr_offset_field(ref_ctr_offset)?;
        }
        let attr = PerfEventAttr {
            type_: self.type_,
            size: size_of::<PerfEventAttr>() as u32,
            config,
            config1: target.as_ptr() as u64,
            config2: offset,
            ..Default::default()
        };
        Ok(ProbeAttr { attr, _target: PhantomData })
    }

    /// `ref_ctr_offset` placed in its `config` bits.
    fn ref_ctr_offset_field(&self, ref_ctr_offset: u64) -> Result<u64> {
        if self.kind != ProbePmu::Uprobe {
            return Err(Error::invalid("only uprobes take a reference counter (USDT semaphore) offset"));
        }
        let Some(bits) = self.ref_ctr_offset_bits else {
            return Err(Error::invalid(
                "this kernel's uprobe PMU takes no reference counter offset (it needs Linux 4.20)",
            ));
        };
        if bits.width() < 64 && ref_ctr_offset >> bits.width() != 0 {
            return Err(Error::invalid("the reference counter offset does not fit the uprobe PMU's field"));
        }
        Ok(ref_ctr_offset << bits.lo)
    }
}

/// A probe attr whose `config1` points into `target`: valid while it lives.
#[derive(Debug)]
pub(crate) struct ProbeAttr<'a> {
    attr: PerfEventAttr,
    _target: PhantomData<&'a CStr>,
}

impl ProbeAttr<'_> {
    /// The attr, ready for `perf_event_open` once the caller's fields are set.
    pub(crate) fn attr(&self) -> &PerfEventAttr {
        &self.attr
    }
}

/// `<pmu_dir>/format/<field>`: `None` if the kernel does not have the field.
fn read_format_field(pmu_dir: &Path, field: &str, kind: ProbePmu) -> Result<Option<ConfigBits>> {
    match std::fs::read_to_string(pmu_dir.join("format").join(field)) {
        Ok(text) => parse_config_bits(&text).map(Some).ok_or_else(|| garbled(kind)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(sysfs_error(kind, &e)),
    }
}

/// Parses `config:N` or `config:LO-HI` (with the kernel's trailing newline).
/// Fields in `config1`/`config2`, or split over several ranges, are not ones
/// these PMUs have, so they are rejected rather than misplaced.
fn parse_config_bits(text: &str) -> Option<ConfigBits> {
    let range = text.trim_end().strip_prefix("config:")?;
    let (lo, hi) = match range.split_once('-') {
        Some((lo, hi)) => (parse_bit(lo)?, parse_bit(hi)?),
        None => {
            let bit = parse_bit(range)?;
            (bit, bit)
        }
    };
    (lo <= hi).then_some(ConfigBits { lo, hi })
}

fn parse_bit(text: &str) -> Option<u32> {
    // u32::from_str takes a leading '+', which sysfs never writes.
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u32>().ok().filter(|&bit| bit < 64)
}

fn garbled(kind: ProbePmu) -> Error {
    Error::new(libc::EINVAL, What::PmuSysfs(kind.name()))
}

fn sysfs_error(kind: ProbePmu, e: &io::Error) -> Error {
    // InvalidData (a file that is not UTF-8) has no errno: it is garbled.
    Error::new(e.raw_os_error().unwrap_or(libc::EINVAL), What::PmuSysfs(kind.name()))
}

/// A unique directory under the system's temp dir, removed on drop (also
/// used by the other `events` modules' tests).
#[cfg(test)]
pub(crate) struct ScratchDir(std::path::PathBuf);

#[cfg(test)]
impl ScratchDir {
    pub(crate) fn new(what: &str) -> ScratchDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("perfbuf-{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `relative`, creating its directories.
    pub(crate) fn write(&self, relative: &str, text: impl AsRef<[u8]>) {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

#[cfg(test)]
impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_uprobe_pmu(sysfs: &ScratchDir, type_: &str, retprobe: &str) {
        sysfs.write("uprobe/type", type_);
        sysfs.write("uprobe/format/retprobe", retprobe);
        sysfs.write("uprobe/format/ref_ctr_offset", "config:32-63\n");
    }

    #[test]
    fn reads_the_type_and_the_config_bits() {
        let sysfs = ScratchDir::new("pmu");
        fake_uprobe_pmu(&sysfs, "8\n", "config:0\n");
        let pmu = DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap();
        assert_eq!(pmu.type_(), 8);
        assert_eq!(pmu.retprobe_bit, Some(0));
        assert_eq!(pmu.ref_ctr_offset_bits, Some(ConfigBits { lo: 32, hi: 63 }));
    }

    #[test]
    fn a_return_probe_sets_the_bit_sysfs_names() {
        let sysfs = ScratchDir::new("pmu");
        fake_uprobe_pmu(&sysfs, "9\n", "config:5\n");
        let pmu = DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap();
        let path = c"/bin/true";
        let attr = *pmu.attr(path, 0x1040, true, 0).unwrap().attr();
        assert_eq!((attr.type_, attr.size, attr.config, attr.config2), (9, 128, 1 << 5, 0x1040));
        assert_eq!(pmu.attr(path, 0x1040, false, 0).unwrap().attr().config, 0);
    }

    #[test]
    fn the_reference_counter_offset_goes_at_bit_32() {
        let sysfs = ScratchDir::new("pmu");
        fake_uprobe_pmu(&sysfs, "8\n", "config:0\n");
        let pmu = DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap();
        let attr = *pmu.attr(c"/bin/true", 0x1040, true, 0x2345).unwrap().attr();
        assert_eq!(attr.config, 0x2345 << 32 | 1);
        assert_eq!(
            pmu.attr(c"/bin/true", 0, false, u32::MAX.into()).unwrap().attr().config,
            0xffff_ffff << 32
        );
    }

    #[test]
    fn a_reference_counter_offset_too_large_is_rejected() {
        let sysfs = ScratchDir::new("pmu");
        fake_uprobe_pmu(&sysfs, "8\n", "config:0\n");
        let pmu = DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap();
        let e = pmu.attr(c"/bin/true", 0, false, 1 << 32).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(e.to_string().contains("does not fit"), "{e}");
    }

    #[test]
    fn a_reference_counter_offset_needs_the_field() {
        let sysfs = ScratchDir::new("pmu");
        sysfs.write("uprobe/type", "8\n");
        sysfs.write("uprobe/format/retprobe", "config:0\n");
        sysfs.write("kprobe/type", "7\n");
        sysfs.write("kprobe/format/retprobe", "config:0\n");
        let uprobe = DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap();
        assert_eq!(uprobe.attr(c"/bin/true", 0, false, 8).unwrap_err().errno(), libc::EINVAL);
        assert!(uprobe.attr(c"/bin/true", 0, false, 0).is_ok());
        let kprobe = DynamicPmu::load(sysfs.path(), ProbePmu::Kprobe).unwrap();
        assert_eq!(kprobe.attr(c"do_sys_openat2", 0, false, 8).unwrap_err().errno(), libc::EINVAL);
    }

    #[test]
    fn a_missing_pmu_is_unsupported_with_a_hint() {
        let sysfs = ScratchDir::new("pmu");
        let e = DynamicPmu::load(sysfs.path(), ProbePmu::Kprobe).unwrap_err();
        assert_eq!(e, Error::new(libc::EOPNOTSUPP, What::NoPmu("kprobe")));
        assert!(e.to_string().contains("kprobe"), "{e}");
        assert!(e.hint().unwrap().contains("CONFIG_KPROBES"), "{e}");
    }

    #[test]
    fn garbled_sysfs_files_are_errors() {
        for (type_, retprobe) in [
            ("eight\n", "config:0\n"),
            ("", "config:0\n"),
            ("-8\n", "config:0\n"),
            ("2\n", "config:0\n"),
            ("99999999999\n", "config:0\n"),
            ("8\n", "config1:0\n"),
            ("8\n", "config:64\n"),
            ("8\n", "config:0-3\n"),
            ("8\n", "config:+1\n"),
            ("8\n", "config:\n"),
            ("8\n", "\u{0}\u{ff}"),
        ] {
            let sysfs = ScratchDir::new("pmu");
            fake_uprobe_pmu(&sysfs, type_, retprobe);
            let e = DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap_err();
            assert_eq!(e, Error::new(libc::EINVAL, What::PmuSysfs("uprobe")), "{type_:?} {retprobe:?}");
        }
        let sysfs = ScratchDir::new("pmu");
        sysfs.write("uprobe/type", b"\xff\xfe");
        assert_eq!(DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap_err().errno(), libc::EINVAL);
        for ref_ctr in ["config:32-\n", "config:40-32\n", "config:0-7,32-35\n", "config2:0-31\n"] {
            let sysfs = ScratchDir::new("pmu");
            fake_uprobe_pmu(&sysfs, "8\n", "config:0\n");
            sysfs.write("uprobe/format/ref_ctr_offset", ref_ctr);
            let e = DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap_err();
            assert_eq!(e, Error::new(libc::EINVAL, What::PmuSysfs("uprobe")), "{ref_ctr:?}");
        }
    }

    #[test]
    fn a_missing_type_file_keeps_its_errno() {
        let sysfs = ScratchDir::new("pmu");
        sysfs.write("uprobe/format/retprobe", "config:0\n");
        let e = DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap_err();
        assert_eq!(e, Error::new(libc::ENOENT, What::PmuSysfs("uprobe")));
    }

    #[test]
    fn a_missing_retprobe_field_fails_only_return_probes() {
        let sysfs = ScratchDir::new("pmu");
        sysfs.write("kprobe/type", "7\n");
        let pmu = DynamicPmu::load(sysfs.path(), ProbePmu::Kprobe).unwrap();
        assert!(pmu.attr(c"do_sys_openat2", 0, false, 0).is_ok());
        let e = pmu.attr(c"do_sys_openat2", 0, true, 0).unwrap_err();
        assert_eq!(e, Error::new(libc::EINVAL, What::PmuSysfs("kprobe")));
    }

    #[test]
    fn a_kprobe_attr_points_at_the_symbol() {
        let sysfs = ScratchDir::new("pmu");
        sysfs.write("kprobe/type", "7\n");
        sysfs.write("kprobe/format/retprobe", "config:0\n");
        let pmu = DynamicPmu::load(sysfs.path(), ProbePmu::Kprobe).unwrap();
        let symbol = c"do_sys_openat2";
        let probe = pmu.attr(symbol, 4, false, 0).unwrap();
        let attr = probe.attr();
        assert_eq!((attr.type_, attr.config, attr.config2), (7, 0, 4));
        assert_eq!(attr.config1, symbol.as_ptr() as u64);
        // SAFETY: config1 is `symbol`'s address, and `symbol` is a 'static C string.
        let named = unsafe { CStr::from_ptr(attr.config1 as *const core::ffi::c_char) };
        assert_eq!(named, symbol);
        assert_eq!((attr.sample_period, attr.sample_type, attr.flags, attr.wakeup), (0, 0, 0, 0));
    }

    #[test]
    fn an_empty_target_is_rejected() {
        let sysfs = ScratchDir::new("pmu");
        fake_uprobe_pmu(&sysfs, "8\n", "config:0\n");
        let pmu = DynamicPmu::load(sysfs.path(), ProbePmu::Uprobe).unwrap();
        assert_eq!(pmu.attr(c"", 0, false, 0).unwrap_err().errno(), libc::EINVAL);
    }

    #[test]
    fn live_sysfs() {
        let root = Path::new(EVENT_SOURCES);
        for kind in [ProbePmu::Kprobe, ProbePmu::Uprobe] {
            let present = root.join(kind.name()).exists();
            match DynamicPmu::load(root, kind) {
                Ok(pmu) => {
                    assert!(present, "{kind:?}");
                    assert!(pmu.type_() >= FIRST_DYNAMIC_TYPE);
                    assert!(pmu.retprobe_bit.is_some(), "{pmu:?}");
                    // A kernel with a PMU has held the retprobe bit at config:0 since 4.17.
                    assert!(pmu.attr(c"/bin/true", 0, true, 0).is_ok());
                }
                Err(e) => {
                    assert!(!present, "{kind:?}: {e}");
                    assert_eq!(e, Error::new(libc::EOPNOTSUPP, What::NoPmu(kind.name())));
                }
            }
        }
    }
}
