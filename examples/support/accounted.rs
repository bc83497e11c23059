//! The loss identity's BPF program for the Rust tests: the C harness's
//! `c-tests/bpf/accounted.bpf.c` (records sent through
//! `include/perfbuf.bpf.h`'s counted wrappers into a perf event array and a
//! BPF ring buffer), loaded with libbpf by `build/libperfbuf_accounted.so`
//! (`make accounted-lib`) and run with `BPF_PROG_TEST_RUN` on a chosen CPU.

#![allow(dead_code, reason = "each test uses part of it")]

use std::ffi::{CStr, CString, c_int, c_uint, c_void};
use std::os::fd::{BorrowedFd, RawFd};

#[repr(C)]
struct Raw {
    obj: *mut c_void,
    events_fd: c_int,
    events_counts_fd: c_int,
    rb_fd: c_int,
    rb_counts_fd: c_int,
    perf_prog_fd: c_int,
    rb_prog_fd: c_int,
    rb_reserve_prog_fd: c_int,
}

type OpenFn = unsafe extern "C" fn(*mut Raw, *const std::ffi::c_char, c_uint) -> c_int;
type CloseFn = unsafe extern "C" fn(*mut Raw);
type RunFn = unsafe extern "C" fn(c_int, c_int, c_uint, c_uint, *mut c_int) -> c_int;

/// Which program to run.
#[derive(Clone, Copy, Debug)]
pub enum Prog {
    /// `bpf_perf_event_output` into `events`.
    Perf,
    /// `bpf_ringbuf_output` into `rb`.
    Ringbuf,
    /// 16-byte reservations in `rb`, odd sequence numbers discarded.
    RingbufReserve,
}

/// The loaded program and its maps.
pub struct Accounted {
    raw: Box<Raw>,
    close: CloseFn,
    run: RunFn,
}

// SAFETY: the library's functions only make system calls on the object's fds.
unsafe impl Send for Accounted {}
// SAFETY: as above.
unsafe impl Sync for Accounted {}

fn repo_file(rel: &str) -> String {
    let here = format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"));
    let parent = format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR"));
    if std::path::Path::new(&here).exists() { here } else { parent }
}

fn sym<T>(lib: *mut c_void, name: &str) -> Result<T, String> {
    let c = CString::new(name).expect("no NUL");
    // SAFETY: `lib` is a live handle from dlopen; `c` a C string.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        return Err(format!("{name} not found in libperfbuf_accounted.so"));
    }
    // SAFETY: the symbol has the type T (the prototypes in accounted.h).
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

impl Accounted {
    /// Loads `build/accounted.bpf.o` with a ring buffer of `rb_bytes`
    /// (needs root with BPF, and `make accounted-lib`).
    pub fn open(rb_bytes: u32) -> Result<Accounted, String> {
        let path = repo_file("build/libperfbuf_accounted.so");
        let c = CString::new(path.clone()).expect("no NUL");
        // SAFETY: a C string; the library stays loaded for the process.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            // SAFETY: dlerror returns a C string after a failed dlopen.
            let why = unsafe { CStr::from_ptr(libc::dlerror()) }.to_string_lossy();
            return Err(format!("cannot load {path} (run `make accounted-lib`): {why}"));
        }
        let open: OpenFn = sym(lib, "accounted_open")?;
        let mut raw = Box::new(Raw {
            obj: std::ptr::null_mut(),
            events_fd: -1,
            events_counts_fd: -1,
            rb_fd: -1,
            rb_counts_fd: -1,
            perf_prog_fd: -1,
            rb_prog_fd: -1,
            rb_reserve_prog_fd: -1,
        });
        let obj = CString::new(repo_file("build/accounted.bpf.o")).expect("no NUL");
        // SAFETY: `raw` is a struct accounted to fill, `obj` a C string.
        let err = unsafe { open(&mut *raw, obj.as_ptr(), rb_bytes) };
        if err != 0 {
            return Err(format!(
                "cannot load build/accounted.bpf.o: {} (needs root with BPF)",
                std::io::Error::from_raw_os_error(-err)
            ));
        }
        Ok(Accounted { raw, close: sym(lib, "accounted_close")?, run: sym(lib, "accounted_run")? })
    }

    fn fd(fd: c_int) -> BorrowedFd<'static> {
        // SAFETY: the object's fds stay open while it is loaded; callers
        // borrow them no longer than the Accounted lives.
        unsafe { BorrowedFd::borrow_raw(fd) }
    }

    /// The perf event array.
    pub fn events(&self) -> BorrowedFd<'_> {
        Self::fd(self.raw.events_fd)
    }

    /// Its output counts map.
    pub fn events_counts(&self) -> BorrowedFd<'_> {
        Self::fd(self.raw.events_counts_fd)
    }

    /// The BPF ring buffer.
    pub fn ringbuf(&self) -> BorrowedFd<'_> {
        Self::fd(self.raw.rb_fd)
    }

    /// Its output counts map.
    pub fn ringbuf_counts(&self) -> BorrowedFd<'_> {
        Self::fd(self.raw.rb_counts_fd)
    }

    /// The perf event array's fd number.
    pub fn events_fd(&self) -> RawFd {
        self.raw.events_fd
    }

    /// Its counts map's fd number.
    pub fn events_counts_fd(&self) -> RawFd {
        self.raw.events_counts_fd
    }

    /// Runs `prog` `repeat` times on `cpu`, each run sending one record of
    /// `size` bytes (16..=256; the first 8 bytes a per-CPU sequence number,
    /// then the CPU as a u32); returns the last run's helper result.
    pub fn run(&self, prog: Prog, cpu: i32, size: u32, repeat: u32) -> Result<i32, String> {
        let fd = match prog {
            Prog::Perf => self.raw.perf_prog_fd,
            Prog::Ringbuf => self.raw.rb_prog_fd,
            Prog::RingbufReserve => self.raw.rb_reserve_prog_fd,
        };
        let mut ret = 0;
        // SAFETY: plain integers and a live int to write.
        let err = unsafe { (self.run)(fd, cpu, size, repeat, &mut ret) };
        if err != 0 { Err(format!("run on cpu {cpu}: errno {}", -err)) } else { Ok(ret) }
    }
}

impl Drop for Accounted {
    fn drop(&mut self) {
        // SAFETY: closes what accounted_open loaded.
        unsafe { (self.close)(&mut *self.raw) };
    }
}
