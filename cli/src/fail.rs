//! Failures as one line with the fix, and their exit status: 2 for usage
//! errors (what the user typed), 1 for run-time failures.

use std::fmt;

/// A failure to report and exit with.
#[derive(Debug)]
pub struct Failure {
    pub usage: bool,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { usage: true, message: message.into() }
    }

    pub fn run(message: impl Into<String>) -> Failure {
        Failure { usage: false, message: message.into() }
    }

    /// A library error while doing `what`, with the library's hint, or
    /// the root hint for permission errors.
    pub fn lib(what: &str, e: &perfbuf::Error) -> Failure {
        let text = e.to_string();
        // Some of the library's messages carry their hint already.
        let hint = e.hint().filter(|h| !text.contains(h)).map(|h| format!(" ({h})")).unwrap_or_default();
        let mut f = Failure::run(format!("{what}: {text}{hint}"));
        if e.errno() == libc::EINVAL {
            // The library's EINVAL for a bad page count is the user's.
            f.usage = e.to_string().contains("page");
        }
        f
    }

    pub fn code(&self) -> i32 {
        if self.usage { 2 } else { 1 }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

pub type Result<T, E = Failure> = std::result::Result<T, E>;

/// Fails unless running as root (what perf events on every CPU and bpf()
/// on others' maps need).
pub fn need_root(what: &str) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Failure::run(format!("{what} needs root: run it with sudo (or as root)")));
    }
    Ok(())
}

/// Page counts are a power of two; said before anything is opened.
pub fn check_pages(pages: usize) -> Result<()> {
    if pages == 0 || !pages.is_power_of_two() {
        return Err(Failure::usage(format!("--pages {pages} is not a power of two: use 8, 16, 64...")));
    }
    Ok(())
}
