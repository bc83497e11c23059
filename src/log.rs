//! Warnings in libbpf's style, written to stderr.
//!
//! libbpf prints warnings through its print hook, to stderr by default. We
//! do the same with our own prefix; `PERFBUF_LOG=off|warn|debug` sets the
//! level (default `warn`). Logging never changes the caller's `errno`.

use crate::error::{Error, get_errno, set_errno};
use once_cell::sync::Lazy;
use std::fmt::Arguments;
use std::io::Write;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Level {
    Off,
    Warn,
    Debug,
}

static LEVEL: Lazy<Level> = Lazy::new(|| match std::env::var("PERFBUF_LOG").as_deref() {
    Err(_) | Ok("") | Ok("warn") => Level::Warn,
    Ok("off") => Level::Off,
    Ok("debug") => Level::Debug,
    Ok(other) => {
        emit(format_args!("PERFBUF_LOG={other:?} is not off|warn|debug; using warn"));
        Level::Warn
    }
});

fn emit(args: Arguments<'_>) {
    let saved = get_errno();
    let _ = writeln!(std::io::stderr().lock(), "libperfbuf: {args}");
    set_errno(saved);
}

/// Logs a warning (shown by default).
pub(crate) fn warn(args: Arguments<'_>) {
    if *LEVEL >= Level::Warn {
        emit(args);
    }
}

/// Logs a debug message (hidden unless `PERFBUF_LOG=debug`).
pub(crate) fn debug(args: Arguments<'_>) {
    if *LEVEL >= Level::Debug {
        emit(args);
    }
}

/// Logs `e` as a warning and returns it.
pub(crate) fn failed(e: Error) -> Error {
    warn(format_args!("{e}"));
    e
}

/// EINVAL for the argument or option `why`, logged as a warning.
pub(crate) fn invalid(why: &'static str) -> Error {
    failed(Error::invalid(why))
}

std::thread_local! {
    static LAST: core::cell::Cell<Option<Error>> = const { core::cell::Cell::new(None) };
}

/// Keeps `e` as this thread's last error (see `perfbuf_last_error`).
pub(crate) fn remember(e: &Error) {
    LAST.with(|l| l.set(Some(*e)));
}

/// This thread's last error returned through the C face.
pub(crate) fn last_error() -> Option<Error> {
    LAST.with(core::cell::Cell::get)
}
