//! Side-band records on the real kernel: a child of this test execs a
//! marked copy of this binary, which maps a file and exits; the set's
//! rings must show its FORK, its COMM with the exec bit, the MMAP2 of that
//! file (address, length, offset, inode) and its EXIT, in time order with
//! its samples. Needs root and tracefs; skipped otherwise, a failure
//! under `CI=true`.

use perfbuf::OrderKey;
use perfbuf::decode::{Body, FileId};
use perfbuf::events::{Event, EventRecord, EventSet, Sideband};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MARKER: &str = "pb_sb_marker";
const CHILD_ENV: &str = "PERFBUF_SIDEBAND_CHILD";

/// In the marked child (this binary, re-run with `CHILD_ENV` set to a
/// file): maps two pages of the file from offset 4096, prints the
/// address, and exits.
#[test]
fn child_maps_a_file() {
    let Ok(file) = std::env::var(CHILD_ENV) else { return };
    let f = std::fs::File::open(&file).expect("open the file");
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh private read-only mapping of an open file.
    let addr = unsafe {
        libc::mmap(std::ptr::null_mut(), 8192, libc::PROT_READ, libc::MAP_PRIVATE, f.as_raw_fd(), 4096)
    };
    assert_ne!(addr, libc::MAP_FAILED);
    println!("addr={:#x}", addr as usize);
    std::process::exit(0);
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// What the test saw, in delivery order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Fork {
        pid: u32,
        tid: u32,
        ppid: u32,
        ptid: u32,
    },
    Comm {
        pid: u32,
        tid: u32,
        comm: String,
        exec: bool,
    },
    Mmap {
        pid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        maj: u32,
        min: u32,
        ino: u64,
        prot: u32,
        flags: u32,
        file: String,
    },
    Exec {
        pid: u32,
    },
    Exit {
        pid: u32,
        tid: u32,
        ppid: u32,
    },
}

fn builder_or_skip() -> Option<perfbuf::events::EventSetBuilder> {
    let ok = EventSet::builder().build().is_ok() && Path::new("/sys/kernel/tracing/events/sched").exists();
    if ok {
        return Some(EventSet::builder());
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("side-band records need root and tracefs at /sys/kernel/tracing");
    }
    eprintln!("skipped: not root or no tracefs");
    None
}

/// A copy of this test binary under the marker's name.
fn marked_binary(dir: &Path) -> PathBuf {
    let path = dir.join(MARKER);
    std::fs::copy(std::env::current_exe().unwrap(), &path).unwrap();
    path
}

#[test]
fn fork_exec_mmap_exit_in_time_order() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let Some(builder) = builder_or_skip() else { return };
    let dir = std::env::temp_dir().join(format!("perfbuf-sideband-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = marked_binary(&dir);
    let data = dir.join("mapped.bin");
    std::fs::write(&data, vec![7u8; 4 * 4096]).unwrap();
    let meta = std::fs::metadata(&data).unwrap();

    let mut set = builder
        .sideband(Sideband::COMM | Sideband::TASK | Sideband::MMAP | Sideband::MMAP_DATA)
        .build()
        .unwrap();
    assert_eq!(set.sideband(), Sideband::COMM | Sideband::TASK | Sideband::MMAP | Sideband::MMAP_DATA);
    let exec = set.add(&Event::tracepoint("sched:sched_process_exec")).unwrap();
    set.enable(exec).unwrap();
    let mut seen: Vec<(u64, Seen)> = Vec::new();
    let mut pb = set
        .reader(|rec| match rec {
            EventRecord::Sample(s) => seen.push((s.time(), Seen::Exec { pid: s.pid() })),
            EventRecord::Sideband { record, .. } => {
                let time = record.sample_id().and_then(|id| id.time).unwrap_or(0);
                let s = match record.body {
                    Body::Fork(t) => Seen::Fork { pid: t.pid, tid: t.tid, ppid: t.ppid, ptid: t.ptid },
                    Body::Exit(t) => Seen::Exit { pid: t.pid, tid: t.tid, ppid: t.ppid },
                    Body::Comm(c) => Seen::Comm {
                        pid: c.pid,
                        tid: c.tid,
                        comm: String::from_utf8_lossy(c.comm).into(),
                        exec: c.exec,
                    },
                    Body::Mmap2(m) => {
                        let (maj, min, ino) = match m.file {
                            Some(FileId::Inode { maj, min, ino, .. }) => (maj, min, ino),
                            _ => (0, 0, 0),
                        };
                        Seen::Mmap {
                            pid: m.pid,
                            addr: m.addr,
                            len: m.len,
                            pgoff: m.pgoff,
                            maj,
                            min,
                            ino,
                            prot: m.prot,
                            flags: m.flags,
                            file: String::from_utf8_lossy(m.filename).into(),
                        }
                    }
                    _ => return,
                };
                seen.push((time, s));
            }
            _ => {}
        })
        .unwrap();
    pb.set_order(OrderKey::SampleTime, Duration::from_millis(5)).unwrap();

    let out = std::process::Command::new(&bin)
        .args(["child_maps_a_file", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &data)
        .output()
        .unwrap();
    let spawner = gettid();
    assert!(out.status.success(), "child: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let addr = stdout
        .lines()
        .find_map(|l| l.split_once("addr=0x"))
        .map(|(_, h)| u64::from_str_radix(h.trim(), 16).unwrap())
        .unwrap_or_else(|| panic!("no address in {stdout}"));
    for _ in 0..20 {
        pb.poll(Some(Duration::from_millis(20))).unwrap();
    }
    pb.flush_ordered().unwrap();
    let stats = pb.order_stats().unwrap();
    drop(pb);
    std::fs::remove_dir_all(&dir).ok();

    let me = std::process::id();
    let child = seen
        .iter()
        .find_map(|(_, s)| match s {
            Seen::Comm { pid, comm, exec: true, .. } if comm == MARKER => Some(*pid),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no COMM {MARKER} with the exec bit: {seen:?}"));
    let path = std::fs::canonicalize(&dir).unwrap_or(dir.clone()).join("mapped.bin");
    let mine: Vec<&(u64, Seen)> = seen
        .iter()
        .filter(|(_, s)| match s {
            // The process, not the threads the test harness starts in it.
            Seen::Fork { tid, .. } | Seen::Exit { tid, .. } | Seen::Comm { tid, .. } => *tid == child,
            Seen::Exec { pid } => *pid == child,
            Seen::Mmap { pid, file, .. } => *pid == child && Path::new(file) == path,
        })
        .collect();
    let kinds: Vec<&str> = mine
        .iter()
        .map(|(_, s)| match s {
            Seen::Fork { .. } => "fork",
            Seen::Comm { .. } => "comm",
            Seen::Exec { .. } => "exec",
            Seen::Mmap { .. } => "mmap",
            Seen::Exit { .. } => "exit",
        })
        .collect();
    assert_eq!(kinds, ["fork", "comm", "exec", "mmap", "exit"], "{mine:#?}");
    assert!(mine.windows(2).all(|w| w[0].0 <= w[1].0), "time order: {mine:#?}");
    assert!(mine.iter().all(|(t, _)| *t > 0), "every record has its time");
    assert_eq!(mine[0].1, Seen::Fork { pid: child, tid: child, ppid: me, ptid: spawner });
    assert_eq!(mine[4].1, Seen::Exit { pid: child, tid: child, ppid: me });
    let Seen::Mmap { addr: a, len, pgoff, maj, min, ino, prot, flags, .. } = mine[3].1.clone() else {
        unreachable!()
    };
    assert_eq!((a, len, pgoff), (addr, 8192, 4096));
    assert_eq!(ino, meta.ino());
    assert_eq!((maj, min), (libc::major(meta.dev()), libc::minor(meta.dev())));
    assert_eq!(prot, libc::PROT_READ as u32);
    assert_ne!(flags & libc::MAP_PRIVATE as u32, 0);
    assert_eq!(stats.late, 0, "{stats:?}");
}
