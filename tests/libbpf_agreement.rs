//! The Rust API on the real kernel, scenario by scenario against the
//! system libbpf: the same deterministic records from a real BPF program
//! (examples/support/producer.rs) are read once through libbpf's
//! `perf_buffer__*` (loaded with dlopen) and once through `PerfBuffer`,
//! and what each reader saw must be identical: every record's CPU, size
//! and bytes, lost counts and their place, and the errno of each error.
//!
//! Needs root with BPF and `make producer-lib`; skipped otherwise, a
//! failure under `CI=true`.

#[path = "../examples/support/producer.rs"]
mod producer;

mod skip;
use perfbuf::{Local, PerfBuffer, PerfEventAttr};
use producer::Producer;
use skip::skip;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{CStr, c_int, c_void};
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::Duration;

/// What a reader saw, per CPU, in order.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen(BTreeMap<u32, Vec<Event>>);

#[derive(Debug, PartialEq, Eq)]
enum Event {
    Sample(Vec<u8>),
    Lost(u64),
    Record(Vec<u8>),
}

impl Seen {
    fn push(&mut self, cpu: u32, e: Event) {
        self.0.entry(cpu).or_default().push(e);
    }

    fn count(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }
}

type SampleFn = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, u32);
type LostFn = unsafe extern "C" fn(*mut c_void, c_int, u64);
type EventFn = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int;

type NewFn = unsafe extern "C" fn(
    c_int,
    usize,
    Option<SampleFn>,
    Option<LostFn>,
    *mut c_void,
    *const c_void,
) -> *mut c_void;
type NewRawFn = unsafe extern "C" fn(
    c_int,
    usize,
    *mut c_void,
    Option<EventFn>,
    *mut c_void,
    *const c_void,
) -> *mut c_void;
type PollFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type ConsumeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type FreeFn = unsafe extern "C" fn(*mut c_void);

/// libbpf's functions, from the system's libbpf.so.1.
struct Libbpf {
    new: NewFn,
    new_raw: NewRawFn,
    poll: PollFn,
    consume: ConsumeFn,
    free: FreeFn,
}

fn libbpf() -> Libbpf {
    // SAFETY: a C string; the library stays loaded for the process.
    let lib = unsafe { libc::dlopen(c"libbpf.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!lib.is_null(), "libbpf.so.1 not found (apt-get install libbpf-dev)");
    let sym = |name: &CStr| {
        // SAFETY: a live handle and a C string.
        let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
        assert!(!p.is_null(), "{name:?} missing from libbpf");
        p
    };
    // SAFETY: each symbol has libbpf 1.x's prototype, as declared above.
    unsafe {
        Libbpf {
            new: std::mem::transmute::<*mut c_void, NewFn>(sym(c"perf_buffer__new")),
            new_raw: std::mem::transmute::<*mut c_void, NewRawFn>(sym(c"perf_buffer__new_raw")),
            poll: std::mem::transmute::<*mut c_void, PollFn>(sym(c"perf_buffer__poll")),
            consume: std::mem::transmute::<*mut c_void, ConsumeFn>(sym(c"perf_buffer__consume")),
            free: std::mem::transmute::<*mut c_void, FreeFn>(sym(c"perf_buffer__free")),
        }
    }
}

unsafe extern "C" fn on_sample(ctx: *mut c_void, cpu: c_int, data: *mut c_void, size: u32) {
    // SAFETY: ctx is the test's Seen; data holds size bytes for the call.
    unsafe {
        let seen = &mut *ctx.cast::<Seen>();
        seen.push(
            cpu as u32,
            Event::Sample(std::slice::from_raw_parts(data.cast::<u8>(), size as usize).to_vec()),
        );
    }
}

unsafe extern "C" fn on_lost(ctx: *mut c_void, cpu: c_int, n: u64) {
    // SAFETY: ctx is the test's Seen.
    unsafe { (*ctx.cast::<Seen>()).push(cpu as u32, Event::Lost(n)) };
}

unsafe extern "C" fn on_event(ctx: *mut c_void, cpu: c_int, rec: *mut c_void) -> c_int {
    // SAFETY: ctx is the test's Seen; rec is a whole record, header first.
    unsafe {
        let size = u16::from_ne_bytes(*rec.cast::<u8>().add(6).cast::<[u8; 2]>()) as usize;
        let bytes = std::slice::from_raw_parts(rec.cast::<u8>(), size).to_vec();
        (*ctx.cast::<Seen>()).push(cpu as u32, Event::Record(bytes));
    }
    -2 // LIBBPF_PERF_EVENT_CONT
}

/// The kernel's tests share one producer (and its map): one at a time.
static KERNEL: Mutex<()> = Mutex::new(());

fn producer() -> Option<Producer> {
    match Producer::open() {
        Ok(p) => Some(p),
        Err(e) => {
            skip(e);
            None
        }
    }
}

fn online_cpus() -> Vec<i32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(lo.parse::<i32>().unwrap()..=hi.parse::<i32>().unwrap());
    }
    cpus
}

/// Makes the Rust API's buffer over the producer, recording into `Seen`
/// (a `RefCell`: a `Local` buffer).
type MakeBuffer = dyn for<'s> Fn(&'s Producer, &'s RefCell<Seen>) -> perfbuf::Result<PerfBuffer<'s, Local>>;

/// Reads what `emit` writes through libbpf, then through the Rust API
/// (`build` makes its buffer), and returns both.
fn both(pages: usize, emit: &dyn Fn(&Producer, &mut dyn FnMut()), rust: &MakeBuffer) -> Option<(Seen, Seen)> {
    let _one = KERNEL.lock().unwrap_or_else(|e| e.into_inner());
    let p = producer()?;
    let lib = libbpf();
    let mut theirs = Seen::default();
    // SAFETY: the callbacks match libbpf's types and `theirs` outlives the buffer.
    let pb = unsafe {
        (lib.new)(
            p.map_fd(),
            pages,
            Some(on_sample),
            Some(on_lost),
            (&mut theirs as *mut Seen).cast(),
            std::ptr::null(),
        )
    };
    assert!(!pb.is_null(), "libbpf perf_buffer__new failed");
    emit(&p, &mut || {
        // SAFETY: a live libbpf buffer.
        unsafe { (lib.consume)(pb) };
    });
    // SAFETY: as above.
    unsafe {
        (lib.poll)(pb, 10);
        (lib.consume)(pb);
        (lib.free)(pb);
    }
    let ours = RefCell::new(Seen::default());
    {
        let mut pb = rust(&p, &ours).expect("PerfBuffer");
        emit(&p, &mut || pb.consume().expect("consume"));
        pb.poll(Some(Duration::from_millis(10))).expect("poll");
        pb.consume().expect("consume");
    }
    Some((theirs, ours.into_inner()))
}

/// A `PerfBuffer` of `pages` over the producer's map, recording into `seen`.
fn parsed<'s>(
    pages: usize,
    p: &'s Producer,
    seen: &'s RefCell<Seen>,
) -> perfbuf::Result<PerfBuffer<'s, Local>> {
    PerfBuffer::builder(p.map())
        .local()
        .pages(pages)
        .on_sample(move |cpu, data| seen.borrow_mut().push(cpu, Event::Sample(data.to_vec())))
        .on_lost(move |cpu, n| seen.borrow_mut().push(cpu, Event::Lost(n)))
        .build()
}

const SIZES: [u32; 10] = [8, 9, 15, 16, 63, 64, 200, 1000, 2999, 3000];

#[test]
fn records_sizes_and_bytes_agree() {
    let emit = |p: &Producer, _read: &mut dyn FnMut()| {
        for cpu in online_cpus() {
            for (i, &n) in SIZES.iter().enumerate() {
                assert_eq!(p.emit(cpu, n, i as u8 + cpu as u8, 1).unwrap(), 0);
            }
        }
    };
    let Some((theirs, ours)) = both(64, &emit, &|p, seen| parsed(64, p, seen)) else { return };
    assert_eq!(ours, theirs);
    assert_eq!(ours.count(), SIZES.len() * online_cpus().len());
    // And both are what the program wrote, padded as the kernel pads.
    let p = Producer::open().unwrap();
    for (&cpu, events) in &ours.0 {
        for (i, (e, &n)) in events.iter().zip(&SIZES).enumerate() {
            let Event::Sample(data) = e else { panic!("not a sample") };
            assert_eq!(data.len() as u32, (n + 4).next_multiple_of(8) - 4);
            assert_eq!(&data[..n as usize], &p.expected(n, i as u8 + cpu as u8)[..]);
        }
    }
}

#[test]
fn lost_records_agree_in_count_and_place() {
    // A 1-page ring: 300 records of 100 bytes overflow it, the kernel
    // reports the lost ones with the first record after the drain.
    let emit = |p: &Producer, read: &mut dyn FnMut()| {
        p.emit(0, 100, 1, 300).unwrap();
        read();
        p.emit(0, 100, 2, 1).unwrap();
    };
    let Some((theirs, ours)) = both(1, &emit, &|p, seen| parsed(1, p, seen)) else { return };
    assert_eq!(ours, theirs);
    let events = &ours.0[&0];
    let lost: u64 = events.iter().map(|e| if let Event::Lost(n) = e { *n } else { 0 }).sum();
    let samples = events.iter().filter(|e| matches!(e, Event::Sample(_))).count() as u64;
    assert!(lost > 0 && samples + lost == 301, "{samples} + {lost}");
}

#[test]
fn records_across_the_ring_end_agree() {
    // 1 page, drained after every few records of changing sizes: records
    // wrap the ring's end at many offsets.
    let emit = |p: &Producer, read: &mut dyn FnMut()| {
        for round in 0..200u32 {
            for k in 0..3 {
                let n = 8 + (round * 37 + k * 101) % 900;
                p.emit(0, n, (round + k) as u8, 1).unwrap();
            }
            read();
        }
    };
    let Some((theirs, ours)) = both(1, &emit, &|p, seen| parsed(1, p, seen)) else { return };
    assert_eq!(ours.count(), 600);
    assert_eq!(ours, theirs);
}

#[test]
fn raw_records_agree() {
    let emit = |p: &Producer, _read: &mut dyn FnMut()| {
        for (i, &n) in SIZES.iter().enumerate() {
            p.emit(0, n, i as u8, 1).unwrap();
        }
    };
    let attr = PerfEventAttr::bpf_output(1);
    let _one = KERNEL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = producer() else { return };
    let lib = libbpf();
    let mut theirs = Seen::default();
    let mut c_attr = attr;
    // SAFETY: the attr is a valid perf_event_attr; the callback matches.
    let pb = unsafe {
        (lib.new_raw)(
            p.map_fd(),
            8,
            (&mut c_attr as *mut PerfEventAttr).cast(),
            Some(on_event),
            (&mut theirs as *mut Seen).cast(),
            std::ptr::null(),
        )
    };
    assert!(!pb.is_null());
    emit(&p, &mut || {});
    // SAFETY: a live libbpf buffer.
    unsafe {
        (lib.consume)(pb);
        (lib.free)(pb);
    }
    let ours = RefCell::new(Seen::default());
    {
        let mut pb = PerfBuffer::builder(p.map())
            .local()
            .attr(attr)
            .on_record(|cpu, rec| {
                ours.borrow_mut().push(cpu, Event::Record(rec.to_vec()));
                ControlFlow::Continue(())
            })
            .build()
            .unwrap();
        emit(&p, &mut || {});
        pb.consume().unwrap();
    }
    assert_eq!(ours.into_inner(), theirs);
    assert_eq!(theirs.count(), SIZES.len());
}

#[test]
fn errors_carry_libbpfs_errno() {
    let _one = KERNEL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = producer() else { return };
    let lib = libbpf();
    let libbpf_errno = |fd: RawFd, pages: usize| {
        // SAFETY: NULL callbacks and opts are allowed.
        let pb = unsafe { (lib.new)(fd, pages, None, None, std::ptr::null_mut(), std::ptr::null()) };
        if pb.is_null() {
            std::io::Error::last_os_error().raw_os_error().unwrap()
        } else {
            // SAFETY: a live libbpf buffer.
            unsafe { (lib.free)(pb) };
            0
        }
    };
    // A page count that is not a power of two.
    let e = PerfBuffer::builder(p.map()).pages(3).build().err().expect("3 pages");
    assert_eq!(e.errno(), libbpf_errno(p.map_fd(), 3));
    assert_eq!(e.kind(), perfbuf::ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("power of two"), "{e}");
    // A map of another type: an array map.
    let array = array_map();
    let e = PerfBuffer::builder(&array).build().err().expect("an array map");
    assert_eq!(e.errno(), libbpf_errno(array.as_raw_fd(), 8));
    assert!(e.to_string().contains("BPF_MAP_TYPE_PERF_EVENT_ARRAY"), "{e}");
    // Not a BPF object at all: a pipe.
    let mut fds = [0; 2];
    // SAFETY: `fds` holds two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: new fds nothing else owns.
    let (r, _w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let e = PerfBuffer::builder(&r).build().err().expect("a pipe");
    assert_eq!(e.errno(), libbpf_errno(r.as_raw_fd(), 8));
}

/// A BPF_MAP_TYPE_ARRAY with 4-byte values.
fn array_map() -> OwnedFd {
    #[repr(C)]
    struct Create {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        rest: [u32; 28],
    }
    let mut attr = Create { map_type: 2, key_size: 4, value_size: 4, max_entries: 1, rest: [0; 28] };
    // SAFETY: a valid BPF_MAP_CREATE attr prefix.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, 0, &mut attr, size_of::<Create>()) };
    assert!(fd >= 0, "BPF_MAP_CREATE");
    // SAFETY: a new fd nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}
