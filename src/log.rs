//! Messages, in libbpf's style: warnings when something fails, info on
//! what a buffer was set up with, debug on the fast mode's decisions.
//!
//! By default they go nowhere, or to the `log` facade (target `perfbuf`)
//! with the crate's `log` feature: errors are returned, not printed. A
//! program can take them all instead with [`set_log`]; the C library does
//! so when it is loaded, printing them to stderr as libbpf prints, or to
//! the printer of `perfbuf_set_print` (libbpf's `libbpf_set_print`).
//! Logging never allocates (messages are formatted into a buffer on the
//! stack, cut at 511 bytes) and never changes the caller's `errno`.

use crate::error::{Error, get_errno, set_errno};
use std::fmt::Arguments;
use std::sync::RwLock;

/// How much a message matters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
#[non_exhaustive]
pub enum LogLevel {
    /// Something failed (libbpf's `LIBBPF_WARN`).
    Warn,
    /// What was set up (libbpf's `LIBBPF_INFO`).
    Info,
    /// Details: the fast mode's decisions, skipped CPUs (`LIBBPF_DEBUG`).
    Debug,
}

/// A program's own destination for messages.
pub type LogFn = Box<dyn Fn(LogLevel, &str) + Send + Sync>;

static SINK: RwLock<Option<LogFn>> = RwLock::new(None);

/// Sends every message to `f` from now on (`None`: back to the default:
/// nowhere, or the `log` facade). Returns the previous destination. `f` may be
/// called from any thread that uses perfbuf.
///
/// ```
/// let previous = perfbuf::set_log(Some(Box::new(|level, msg| {
///     if level == perfbuf::LogLevel::Warn {
///         eprintln!("perfbuf warns: {msg}");
///     }
/// })));
/// # perfbuf::set_log(previous);
/// ```
pub fn set_log(f: Option<LogFn>) -> Option<LogFn> {
    let mut sink = SINK.write().unwrap_or_else(|e| e.into_inner());
    core::mem::replace(&mut *sink, f)
}

fn emit(level: LogLevel, args: Arguments<'_>) {
    let saved = get_errno();
    let mut buf = [0u8; 512];
    let text = format_into(&mut buf, args);
    match &*SINK.read().unwrap_or_else(|e| e.into_inner()) {
        Some(f) => f(level, text),
        None => by_default(level, text),
    }
    set_errno(saved);
}

/// Where a message goes when no destination was set: the `log` facade
/// (target `perfbuf`) with the `log` feature; nowhere otherwise (errors
/// are returned, not printed).
fn by_default(level: LogLevel, text: &str) {
    #[cfg(feature = "log")]
    to_log_facade(level, text);
    let _ = (level, text);
}

#[cfg(feature = "log")]
fn to_log_facade(level: LogLevel, text: &str) {
    let level = match level {
        LogLevel::Warn => ::log::Level::Warn,
        LogLevel::Info => ::log::Level::Info,
        LogLevel::Debug => ::log::Level::Debug,
    };
    ::log::log!(target: "perfbuf", level, "{text}");
}

/// Formats `args` into `buf` (cut to fit, on a character boundary).
pub fn format_into<'b>(buf: &'b mut [u8], args: Arguments<'_>) -> &'b str {
    let mut w = Fixed { buf, len: 0 };
    let _ = core::fmt::Write::write_fmt(&mut w, args);
    let len = w.len;
    // Written from &str pieces, cut on a boundary: valid UTF-8.
    core::str::from_utf8(&buf[..len]).unwrap_or("")
}

/// Formats into a fixed buffer, cutting what does not fit.
struct Fixed<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl core::fmt::Write for Fixed<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let mut n = s.len().min(self.buf.len() - self.len);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Logs a warning.
pub fn warn(args: Arguments<'_>) {
    emit(LogLevel::Warn, args);
}

/// Logs what was set up.
pub fn info(args: Arguments<'_>) {
    emit(LogLevel::Info, args);
}

/// Logs a detail.
pub fn debug(args: Arguments<'_>) {
    emit(LogLevel::Debug, args);
}

/// Logs `e` as a warning and returns it.
pub fn failed(e: Error) -> Error {
    warn(format_args!("{e}"));
    e
}

/// EINVAL for the argument or option `why`, logged as a warning.
pub fn invalid(why: &'static str) -> Error {
    failed(Error::invalid(why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_program_can_take_the_messages() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let before =
            set_log(Some(Box::new(move |level, msg| sink.lock().unwrap().push((level, msg.to_owned())))));
        debug(format_args!("cpu #{}: batched", 1));
        failed(Error::from_errno(libc::EACCES));
        let back = set_log(before);
        assert!(back.is_some());
        let got = got.lock().unwrap();
        assert!(got.contains(&(LogLevel::Debug, "cpu #1: batched".to_owned())), "{got:?}");
        assert!(got.iter().any(|(l, m)| *l == LogLevel::Warn && m.contains("EACCES")), "{got:?}");
    }

    #[test]
    fn long_messages_are_cut_not_allocated() {
        let mut buf = [0u8; 8];
        assert_eq!(format_into(&mut buf, format_args!("{}", "ééééé")), "éééé");
    }
}
