//! A BPF producer for the Rust examples and tests: the C harness's
//! `c-tests/producer.c` (a `PERF_EVENT_ARRAY` map and hand-assembled tc
//! programs calling `bpf_perf_event_output`, run with `BPF_PROG_TEST_RUN`
//! on a chosen CPU), loaded from `build/libperfbuf_producer.so` (`make
//! producer-lib`). Not part of the library: a real tool has its own BPF
//! program and hands its map to `PerfBuffer::builder`.

#![allow(dead_code, reason = "each example or test uses part of it")]

use std::ffi::{CStr, CString, c_int, c_uint, c_void};
use std::os::fd::{BorrowedFd, RawFd};

#[repr(C)]
#[derive(Default)]
struct Raw {
    map_fd: c_int,
    det_prog_fd: c_int,
    stamp_prog_fd: c_int,
}

type OpenFn = unsafe extern "C" fn(*mut Raw, c_uint) -> c_int;
type CloseFn = unsafe extern "C" fn(*mut Raw);
type EmitDetFn = unsafe extern "C" fn(*mut Raw, c_int, c_uint, u8, c_uint, *mut c_int) -> c_int;
type ExpectedFn = unsafe extern "C" fn(c_uint, u8, *mut u8);
type EmitStampedFn = unsafe extern "C" fn(*mut Raw, c_int, c_uint, c_uint, *mut c_int) -> c_int;

/// The producer: its map and programs.
pub struct Producer {
    raw: Raw,
    close: CloseFn,
    emit_det: EmitDetFn,
    expected: ExpectedFn,
    emit_stamped: EmitStampedFn,
}

// SAFETY: the producer's functions only make system calls on its fds.
unsafe impl Send for Producer {}
// SAFETY: as above; concurrent emits on different CPUs are how the C
// harness uses it too.
unsafe impl Sync for Producer {}

fn sym<T>(lib: *mut c_void, name: &str) -> Result<T, String> {
    let c = CString::new(name).expect("no NUL");
    // SAFETY: `lib` is a live handle from dlopen; `c` a C string.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        return Err(format!("{name} not found in the producer library"));
    }
    // SAFETY: the symbol has the type T (the C prototypes above).
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// The producer library (`build/libperfbuf_producer.so`), loaded once
/// for the process.
fn load() -> Result<*mut c_void, String> {
    // The repository's build/, from the root crate or a member crate (cli/).
    let path = std::env::var("PERFBUF_PRODUCER_LIB").unwrap_or_else(|_| {
        let here = concat!(env!("CARGO_MANIFEST_DIR"), "/build/libperfbuf_producer.so");
        let parent = concat!(env!("CARGO_MANIFEST_DIR"), "/../build/libperfbuf_producer.so");
        if std::path::Path::new(here).exists() { here } else { parent }.into()
    });
    let c = CString::new(path.clone()).expect("no NUL");
    // SAFETY: a C string; the library stays loaded for the process.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
    if lib.is_null() {
        // SAFETY: dlerror returns a C string after a failed dlopen.
        let why = unsafe { CStr::from_ptr(libc::dlerror()) }.to_string_lossy();
        return Err(format!("cannot load {path} (run `make producer-lib`): {why}"));
    }
    Ok(lib)
}

impl Producer {
    /// Loads the producer library and creates its map and programs
    /// (needs root with BPF).
    pub fn open() -> Result<Producer, String> {
        Self::with_slots(0)
    }

    /// [`Self::open`] with a map of `slots` entries (0: one per possible CPU).
    pub fn with_slots(slots: u32) -> Result<Producer, String> {
        let lib = load()?;
        let open: OpenFn = sym(lib, "producer_open")?;
        let mut p = Producer {
            raw: Raw::default(),
            close: sym(lib, "producer_close")?,
            emit_det: sym(lib, "producer_emit_det")?,
            expected: sym(lib, "producer_expected")?,
            emit_stamped: sym(lib, "producer_emit_stamped")?,
        };
        // SAFETY: `raw` is a valid struct producer to fill.
        let err = unsafe { open(&mut p.raw, slots) };
        if err != 0 {
            return Err(format!(
                "cannot create the BPF producer: {} (needs root with BPF)",
                std::io::Error::from_raw_os_error(-err)
            ));
        }
        Ok(p)
    }

    /// The `PERF_EVENT_ARRAY` map.
    pub fn map(&self) -> BorrowedFd<'_> {
        // SAFETY: the map fd is open while the producer lives.
        unsafe { BorrowedFd::borrow_raw(self.raw.map_fd) }
    }

    /// The map's fd number.
    pub fn map_fd(&self) -> RawFd {
        self.raw.map_fd
    }

    /// `repeat` samples of `n` bytes (8..=3000) on `cpu` whose bytes are
    /// [`Self::expected`]`(n, seed)`; returns the last write's helper result.
    pub fn emit(&self, cpu: i32, n: u32, seed: u8, repeat: u32) -> Result<i32, String> {
        let mut ret = 0;
        let raw = &self.raw as *const Raw as *mut Raw;
        // SAFETY: the C function only reads the struct's fds.
        let err = unsafe { (self.emit_det)(raw, cpu, n, seed, repeat, &mut ret) };
        if err != 0 { Err(format!("emit on cpu {cpu}: errno {}", -err)) } else { Ok(ret) }
    }

    /// `repeat` samples of `n` bytes on `cpu` starting with the write's
    /// `CLOCK_MONOTONIC` time.
    pub fn emit_stamped(&self, cpu: i32, n: u32, repeat: u32) -> Result<i32, String> {
        let mut ret = 0;
        let raw = &self.raw as *const Raw as *mut Raw;
        // SAFETY: the C function only reads the struct's fds.
        let err = unsafe { (self.emit_stamped)(raw, cpu, n, repeat, &mut ret) };
        if err != 0 { Err(format!("emit on cpu {cpu}: errno {}", -err)) } else { Ok(ret) }
    }

    /// The `n` payload bytes a reader sees for `emit(_, n, seed, _)`.
    pub fn expected(&self, n: u32, seed: u8) -> Vec<u8> {
        let mut out = vec![0u8; n as usize];
        // SAFETY: `out` holds n bytes.
        unsafe { (self.expected)(n, seed, out.as_mut_ptr()) };
        out
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // SAFETY: closes the fds producer_open made.
        unsafe { (self.close)(&mut self.raw) };
    }
}

/// Whether a missing capability must fail (CI) rather than skip.
pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// `struct ringbuf_producer`: a `BPF_MAP_TYPE_RINGBUF` and the programs
/// writing into it (`c-tests/producer.h`).
#[repr(C)]
#[derive(Default)]
struct RawRingbuf {
    map_fd: c_int,
    scratch_fd: c_int,
    stats_fd: c_int,
    prog_fd: c_int,
    ctl_prog_fd: c_int,
}

type RbOpenFn = unsafe extern "C" fn(*mut RawRingbuf, c_uint) -> c_int;
type RbCloseFn = unsafe extern "C" fn(*mut RawRingbuf);
type RbEmitFn = unsafe extern "C" fn(*mut RawRingbuf, c_int, c_uint, u8, c_uint, *mut c_int) -> c_int;
type RbCtlFn = unsafe extern "C" fn(*mut RawRingbuf, c_int, c_int, c_uint, u64, *mut c_int) -> c_int;

/// What [`RingbufProducer::ctl`] does (`enum ringbuf_op`).
#[derive(Clone, Copy, Debug)]
pub enum RingbufOp {
    /// `bpf_ringbuf_output`.
    Output = 0,
    /// `bpf_ringbuf_reserve`, then `bpf_ringbuf_submit`.
    Submit = 1,
    /// `bpf_ringbuf_reserve`, then `bpf_ringbuf_discard`.
    Discard = 2,
}

/// A BPF ring buffer map and the programs writing into it, run with
/// `BPF_PROG_TEST_RUN`.
pub struct RingbufProducer {
    raw: RawRingbuf,
    close: RbCloseFn,
    emit: RbEmitFn,
    ctl: RbCtlFn,
    expected: ExpectedFn,
}

// SAFETY: as for Producer: its functions only make system calls on its fds.
unsafe impl Send for RingbufProducer {}
// SAFETY: as above.
unsafe impl Sync for RingbufProducer {}

impl RingbufProducer {
    /// A ring buffer of `bytes` (a power of two pages) and its programs
    /// (needs root with BPF).
    pub fn open(bytes: u32) -> Result<RingbufProducer, String> {
        let lib = load()?;
        let open: RbOpenFn = sym(lib, "producer_open_ringbuf")?;
        let mut p = RingbufProducer {
            raw: RawRingbuf::default(),
            close: sym(lib, "producer_close_ringbuf")?,
            emit: sym(lib, "producer_emit_ringbuf")?,
            ctl: sym(lib, "producer_ringbuf_ctl")?,
            expected: sym(lib, "producer_expected")?,
        };
        // SAFETY: `raw` is a valid struct ringbuf_producer to fill.
        let err = unsafe { open(&mut p.raw, bytes) };
        if err != 0 {
            return Err(format!(
                "cannot create the BPF ring buffer producer: {} (needs root with BPF)",
                std::io::Error::from_raw_os_error(-err)
            ));
        }
        Ok(p)
    }

    /// The `BPF_MAP_TYPE_RINGBUF` map.
    pub fn map(&self) -> BorrowedFd<'_> {
        // SAFETY: the map fd is open while the producer lives.
        unsafe { BorrowedFd::borrow_raw(self.raw.map_fd) }
    }

    /// `repeat` records of `n` bytes (8..=3000) by `bpf_ringbuf_output` on
    /// `cpu`, whose bytes are [`Self::expected`]`(n, seed)`; returns the last
    /// write's helper result (-EAGAIN when the ring was full).
    pub fn emit(&self, cpu: i32, n: u32, seed: u8, repeat: u32) -> Result<i32, String> {
        let mut ret = 0;
        let raw = &self.raw as *const RawRingbuf as *mut RawRingbuf;
        // SAFETY: the C function only reads the struct's fds.
        let err = unsafe { (self.emit)(raw, cpu, n, seed, repeat, &mut ret) };
        if err != 0 { Err(format!("emit on cpu {cpu}: errno {}", -err)) } else { Ok(ret) }
    }

    /// One 16-byte record holding `meta` twice, by `op`, with `flags`
    /// (`BPF_RB_*`); returns the helper's result (1: reservation failed).
    pub fn ctl(&self, cpu: i32, op: RingbufOp, flags: u32, meta: u64) -> Result<i32, String> {
        let mut ret = 0;
        let raw = &self.raw as *const RawRingbuf as *mut RawRingbuf;
        // SAFETY: the C function only reads the struct's fds.
        let err = unsafe { (self.ctl)(raw, cpu, op as c_int, flags, meta, &mut ret) };
        if err != 0 { Err(format!("ctl on cpu {cpu}: errno {}", -err)) } else { Ok(ret) }
    }

    /// The `n` bytes a reader sees for `emit(_, n, seed, _)`.
    pub fn expected(&self, n: u32, seed: u8) -> Vec<u8> {
        let mut out = vec![0u8; n as usize];
        // SAFETY: `out` holds n bytes.
        unsafe { (self.expected)(n, seed, out.as_mut_ptr()) };
        out
    }
}

impl Drop for RingbufProducer {
    fn drop(&mut self) {
        // SAFETY: closes the fds producer_open_ringbuf made.
        unsafe { (self.close)(&mut self.raw) };
    }
}
