//! The C library's own state about messages and errors, which the Rust
//! crate does not have: where messages go (stderr by default, as libbpf
//! prints, filtered by `PERFBUF_LOG`; or the printer of
//! `perfbuf_set_print`), and each thread's last error, for
//! `perfbuf_last_error`. The core's messages reach the same printer: the
//! library installs it as the core's log destination when it is loaded.

use super::abi::{PERFBUF_DEBUG, PERFBUF_INFO, PERFBUF_WARN, perfbuf_print_fn};
use super::errno::{get_errno, set_errno};
use core::ffi::{c_char, c_int, c_void};
use core::fmt::Arguments;
use perfbuf::libbpf_compat::format_into;
use perfbuf::{Error, LogLevel};
use std::io::Write;
use std::sync::{LazyLock, Mutex};

/// The messages' destination from the moment the library is loaded
/// (linked, `LD_PRELOAD`ed or `dlopen`ed); the Rust crate alone prints
/// nothing.
extern "C" fn install_printer() {
    // A closure capturing nothing: boxing it allocates nothing.
    perfbuf::set_log(Some(Box::new(print)));
}

// SAFETY: .init_array holds pointers to functions the loader calls with no
// arguments at load time; `install_printer` is one, and only stores a
// pointer (no allocation, no I/O).
#[used]
#[unsafe(link_section = ".init_array")]
static INSTALL_PRINTER: extern "C" fn() = install_printer;

type PrintFn = unsafe extern "C" fn(c_int, *const c_char, *mut c_void);

/// The built-in printer, as `perfbuf_set_print` hands it out: never
/// called; installing it again restores printing to stderr.
pub(crate) unsafe extern "C" fn default_print(level: c_int, msg: *const c_char, _ctx: *mut c_void) {
    let _ = (level, msg);
}

/// The printer installed now, and its ctx.
static PRINTER: Mutex<(perfbuf_print_fn, usize)> = Mutex::new((Some(default_print), 0));

/// The built-in printer's level (`None`: off), from `PERFBUF_LOG`.
static LEVEL: LazyLock<Option<LogLevel>> = LazyLock::new(|| match std::env::var("PERFBUF_LOG").as_deref() {
    Err(_) | Ok("") | Ok("warn") => Some(LogLevel::Warn),
    Ok("off") => None,
    Ok("info") => Some(LogLevel::Info),
    Ok("debug") => Some(LogLevel::Debug),
    Ok(other) => {
        let _ = writeln!(
            std::io::stderr(),
            "libperfbuf: PERFBUF_LOG={other:?} is not off|warn|info|debug; using warn"
        );
        Some(LogLevel::Warn)
    }
});

/// Installs `print` with `ctx` (NULL: silence); returns the previous one.
pub(crate) fn set_printer(print: perfbuf_print_fn, ctx: *mut c_void) -> perfbuf_print_fn {
    let mut installed = PRINTER.lock().unwrap_or_else(|e| e.into_inner());
    core::mem::replace(&mut *installed, (print, ctx as usize)).0
}

/// Prints one message where messages go now.
fn print(level: LogLevel, msg: &str) {
    // Not held during the call: a printer may call into the library.
    let (printer, ctx) = *PRINTER.lock().unwrap_or_else(|e| e.into_inner());
    match printer {
        Some(f) if core::ptr::fn_addr_eq(f, default_print as PrintFn) => to_stderr(level, msg),
        Some(f) => {
            let level = match level {
                LogLevel::Warn => PERFBUF_WARN,
                LogLevel::Info => PERFBUF_INFO,
                _ => PERFBUF_DEBUG,
            };
            let mut text = [0u8; 513];
            let n = msg.len().min(512);
            text[..n].copy_from_slice(&msg.as_bytes()[..n]);
            // SAFETY: per `perfbuf_set_print`'s contract, callable with
            // its ctx from any thread; `text` is NUL-terminated.
            unsafe { f(level, text.as_ptr().cast(), ctx as *mut c_void) }
        }
        None => {}
    }
}

/// The built-in printer: stderr, as libbpf prints, to `PERFBUF_LOG`'s level.
fn to_stderr(level: LogLevel, msg: &str) {
    if LEVEL.is_some_and(|max| level <= max) {
        let _ = writeln!(std::io::stderr().lock(), "libperfbuf: {msg}");
    }
}

/// Logs a warning of the C library's own (errno unchanged).
pub(crate) fn warn(args: Arguments<'_>) {
    let saved = get_errno();
    let mut buf = [0u8; 512];
    print(LogLevel::Warn, format_into(&mut buf, args));
    set_errno(saved);
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
    static LAST: core::cell::RefCell<Option<Error>> = const { core::cell::RefCell::new(None) };
    static LAST_TEXT: core::cell::RefCell<[u8; 512]> = const { core::cell::RefCell::new([0; 512]) };
}

/// Keeps `e` as this thread's last error (see `perfbuf_last_error`).
pub(crate) fn remember(e: &Error) {
    // A clone shares the subject: no allocation.
    LAST.with(|l| *l.borrow_mut() = Some(e.clone()));
}

/// This thread's last error's text, NUL-terminated (empty before any),
/// valid until this thread's next call.
pub(crate) fn last_error_text() -> *const c_char {
    LAST_TEXT.with(|text| {
        let mut text = text.borrow_mut();
        let len = match LAST.with(|l| l.borrow().clone()) {
            Some(e) => format_into(&mut text[..511], format_args!("{e}")).len(),
            None => 0,
        };
        text[len] = 0;
        text.as_ptr().cast()
    })
}
