//! A kernel test that cannot run here: under `CI=true` a failure, otherwise
//! a skip that `make test` counts and names. Cargo's harness has no skip
//! decided at run time (a test that returns counts as passed), so the
//! reason goes straight to stderr, past the harness's output capture, as a
//! `cargo-skip:` line that scripts/suite-counts.awk counts as a skip and
//! takes off the passed tests.

#![allow(dead_code, reason = "each test file uses part of it")]

use std::io::Write;

/// Whether a missing capability must fail (`CI=true`) rather than skip.
pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skips the calling test, which returns after it: panics under `CI=true`,
/// otherwise writes `cargo-skip: CRATE::TEST: WHY` on a line of its own.
pub fn skip(why: impl std::fmt::Display) {
    let thread = std::thread::current();
    let name = format!("{}::{}", env!("CARGO_CRATE_NAME"), thread.name().unwrap_or("?"));
    assert!(!ci(), "{name}: {why} (under CI=true a test that cannot run fails)");
    // One write (the harness prints whole lines too), not captured.
    let _ = std::io::stderr().write_all(format!("\ncargo-skip: {name}: {why}\n").as_bytes());
}

/// A test whose success path needs what this kernel was built without (the
/// project's machines have no CONFIG_KPROBES): the caller has checked the
/// clear error instead, so the test passes, and `make test` lists the path
/// not run under "not run on this kernel" (`not-on-this-kernel:` lines),
/// under `CI=true` too. Only for a kernel option, never for a missing
/// privilege or tool, which [`skip`] handles.
pub fn kernel_lacks(why: impl std::fmt::Display) {
    let thread = std::thread::current();
    let name = format!("{}::{}", env!("CARGO_CRATE_NAME"), thread.name().unwrap_or("?"));
    let _ = std::io::stderr().write_all(format!("\nnot-on-this-kernel: {name}: {why}\n").as_bytes());
}
