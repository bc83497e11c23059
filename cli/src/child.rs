//! `-- COMMAND`: the command is forked first and held before its exec
//! until the events watching its pid are enabled, so nothing it does is
//! missed.

use crate::fail::{Failure, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A forked command waiting for [`Child::start`].
pub struct Child {
    pub pid: i32,
    go: libc::c_int,
    status: Option<i32>,
}

/// Finds `name` as execvp would (a name with a slash is a path).
fn find(name: &str) -> Option<std::path::PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| name.into());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

impl Child {
    /// Forks `argv`; the child waits for [`Child::start`] (or exits if
    /// this process goes away first).
    pub fn fork(argv: &[String]) -> Result<Child> {
        if find(&argv[0]).is_none() {
            return Err(Failure::usage(format!(
                "command not found: {} (give a path or a name in PATH)",
                argv[0]
            )));
        }
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(std::ffi::OsStr::new(a).as_bytes()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Failure::usage("a command argument contains a NUL byte"))?;
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds is a writable array of two ints.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(Failure::run(format!("pipe: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: the child only calls async-signal-safe functions (close,
        // read, execvp, write, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Failure::run(format!("fork: {}", std::io::Error::last_os_error())));
        }
        if pid == 0 {
            // SAFETY: see the fork above; the pointers stay valid (copied
            // address space), argv is NULL-terminated.
            unsafe {
                libc::close(fds[1]);
                let mut b = 0u8;
                if libc::read(fds[0], (&mut b as *mut u8).cast(), 1) != 1 {
                    libc::_exit(127);
                }
                libc::execvp(ptrs[0], ptrs.as_ptr());
                let msg = b"perfbuf: cannot execute the command\n";
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::_exit(127);
            }
        }
        // SAFETY: the read end is ours to close.
        unsafe { libc::close(fds[0]) };
        Ok(Child { pid, go: fds[1], status: None })
    }

    /// Lets the command exec.
    pub fn start(&mut self) {
        let b = 1u8;
        // SAFETY: writes one byte from a live local to our pipe end.
        unsafe {
            libc::write(self.go, (&b as *const u8).cast(), 1);
            libc::close(self.go);
        }
        self.go = -1;
    }

    /// Whether it has exited (reaped; its exit status kept).
    pub fn exited(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        let mut st = 0;
        // SAFETY: waitpid on our own child, non-blocking.
        let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) };
        if r == self.pid {
            self.status = Some(st);
        }
        self.status.is_some()
    }

    /// The command's exit status as a shell shows it.
    pub fn describe(&self) -> String {
        match self.status {
            Some(st) if libc::WIFEXITED(st) => format!("exited with status {}", libc::WEXITSTATUS(st)),
            Some(st) if libc::WIFSIGNALED(st) => format!("killed by signal {}", libc::WTERMSIG(st)),
            _ => "still running".into(),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.go >= 0 {
            // SAFETY: closing our pipe end makes the held child exit.
            unsafe { libc::close(self.go) };
        }
    }
}
