//! A function whose instructions are known, for probes inside a function:
//! `perfbuf_offset_target(x) = x + 1`, whose instruction at
//! [`INSIDE`] bytes in still has `x` in the first argument register.
//! Written in assembly so that the compiler cannot move what is where.

#![allow(dead_code, reason = "each test file uses part of it")]

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".globl perfbuf_offset_target",
    ".type perfbuf_offset_target, @function",
    "perfbuf_offset_target:",
    "nop",
    "nop",
    "nop",
    "nop",
    "lea rax, [rdi + 1]",
    "ret",
    ".size perfbuf_offset_target, . - perfbuf_offset_target",
);

#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".globl perfbuf_offset_target",
    ".type perfbuf_offset_target, %function",
    "perfbuf_offset_target:",
    "nop",
    "add x0, x0, #1",
    "ret",
    ".size perfbuf_offset_target, . - perfbuf_offset_target",
);

unsafe extern "C" {
    /// Returns `x + 1`.
    fn perfbuf_offset_target(x: u64) -> u64;
}

/// The symbol's name in this test's binary.
pub const SYMBOL: &str = "perfbuf_offset_target";

/// Bytes into the function: the first instruction after the nops.
pub const INSIDE: u64 = 4;

/// The function's size in bytes (its `.size`).
#[cfg(target_arch = "x86_64")]
pub const SIZE: u64 = 4 + 4 + 1;
#[cfg(target_arch = "aarch64")]
pub const SIZE: u64 = 12;

/// Calls the function.
pub fn call(x: u64) -> u64 {
    // SAFETY: the assembly above reads only its argument register and
    // returns; it touches no memory.
    unsafe { perfbuf_offset_target(x) }
}

/// The function's address in this process.
pub fn address() -> u64 {
    perfbuf_offset_target as unsafe extern "C" fn(u64) -> u64 as usize as u64
}
