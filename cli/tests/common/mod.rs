//! What the `perfbuf` command's tests share: the binary, root checks,
//! marked programs, stderr lines of a running command, a bpffs to pin in.

#![allow(dead_code, reason = "each test file uses part of it")]

#[path = "../../../tests/getppid/mod.rs"]
pub mod getppid;
#[path = "../../../examples/support/producer.rs"]
pub mod producer;
#[path = "../../../tests/skip/mod.rs"]
pub mod skip;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_perfbuf");

/// One test at a time: the dump's reader check looks at this process's
/// fds, which another test's perf buffer would change; kernel tests that
/// count records are also steadier alone.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn root_or_skip(name: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    skip::skip(format!("{name} needs root"));
    false
}

pub fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("perfbuf-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A copy of /bin/true under a name no other process on the machine uses.
pub fn marked_binary(dir: &Path) -> PathBuf {
    let mark = dir.join(format!("perfbuf-mark-{}", std::process::id()));
    std::fs::copy("/bin/true", &mark).unwrap();
    mark
}

/// A program calling `perfbuf_mark(i)` for i in 1..=n (n its argument),
/// built with the C compiler into `dir`.
pub fn marked_program(dir: &Path) -> PathBuf {
    let src = dir.join("mark.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\n\
         __attribute__((noinline)) int perfbuf_mark(int i) { __asm__ volatile(\"\" ::: \"memory\"); return i * 2; }\n\
         int main(int argc, char **argv) { int n = atoi(argv[1]), s = 0;\n\
         for (int i = 1; i <= n; i++) s += perfbuf_mark(i); return s == n * (n + 1) ? 0 : 1; }\n",
    )
    .unwrap();
    let bin = dir.join("mark");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(cc).args(["-O1", "-o"]).arg(&bin).arg(&src).status().unwrap();
    assert!(st.success(), "cannot compile the uprobe test program");
    bin
}

/// A program calling `perfbuf_offset_target(i)` (c-tests/offset_target.h:
/// a function whose instruction 4 bytes in is known) for i in 0..n, n its
/// first argument; it writes the function's address and file offset, in
/// hex, to the file its second argument names, before the calls.
pub fn offset_program(dir: &Path) -> PathBuf {
    let src = dir.join("offset.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\n#include \"offset_target.h\"\n\
         int main(int argc, char **argv) { int n = atoi(argv[1]); FILE *f = fopen(argv[2], \"w\");\n\
         void *at = (void *)&perfbuf_offset_target;\n\
         fprintf(f, \"%llx %llx\\n\", (unsigned long long)(uintptr_t)at, (unsigned long long)exe_file_offset(at));\n\
         fclose(f); uint64_t s = 0; for (int i = 0; i < n; i++) s += perfbuf_offset_target(i);\n\
         return s == (uint64_t)n * (n + 1) / 2 ? 0 : 1; }\n",
    )
    .unwrap();
    let bin = dir.join("offset");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../c-tests");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st =
        Command::new(cc).args(["-O1", "-I"]).arg(include).arg("-o").arg(&bin).arg(&src).status().unwrap();
    assert!(st.success(), "cannot compile the offset test program");
    bin
}

/// What `offset_program` wrote: the function's address and file offset.
pub fn offset_program_place(written: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(written).unwrap();
    let mut words = text.split_whitespace().map(|w| u64::from_str_radix(w, 16).unwrap());
    (words.next().unwrap(), words.next().unwrap())
}

/// `sh -c` running the marked binary `n` times, each pid appended to `pids`.
pub fn exec_script(mark: &Path, pids: &Path, n: usize) -> String {
    format!("for i in $(seq {n}); do {} & echo $! >> {}; wait; done", mark.display(), pids.display())
}

pub fn read_pids(pids: &Path) -> BTreeSet<u32> {
    std::fs::read_to_string(pids).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect()
}

pub fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Stderr lines of a running command, as they come.
/// Spawns `cmd` with its output piped; its stderr comes line by line.
pub fn spawn_piped(cmd: &mut Command) -> (Child, Receiver<String>) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let rx = stderr_lines(&mut child);
    (child, rx)
}

pub fn stderr_lines(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (up to a generous deadline, against hangs) for a line containing `what`.
pub fn wait_for(rx: &Receiver<String>, what: &str, seen: &mut Vec<String>) {
    loop {
        let line =
            rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("no `{what}` in {seen:?}"));
        seen.push(line.clone());
        if line.contains(what) {
            return;
        }
    }
}

pub fn sigint(child: &Child) {
    // SAFETY: signals our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
}

pub fn bpf(cmd: i32, attr: &mut [u64]) -> i64 {
    // SAFETY: attr is a zeroed buffer as large as the command reads.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr) as u32) }
}

/// A bpffs mounted in a fresh directory, unmounted on drop.
pub struct Bpffs(PathBuf);

impl Bpffs {
    pub fn mount(tag: &str) -> Bpffs {
        let dir = tempdir(tag);
        let st = Command::new("mount").args(["-t", "bpf", "bpf"]).arg(&dir).status().unwrap();
        assert!(st.success(), "mount -t bpf failed");
        Bpffs(dir)
    }

    /// Pins `fd` as `name` (BPF_OBJ_PIN).
    pub fn pin(&self, fd: RawFd, name: &str) -> String {
        let path = self.0.join(name);
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let mut attr = [0u64; 2];
        attr[0] = c.as_ptr() as u64;
        attr[1] = fd as u64;
        assert_eq!(bpf(6, &mut attr), 0, "BPF_OBJ_PIN: {}", std::io::Error::last_os_error());
        path.to_str().unwrap().to_string()
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn online_cpus() -> Vec<i32> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) } as i32;
    (0..n).collect()
}
