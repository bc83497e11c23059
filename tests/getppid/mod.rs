//! The kernel function of the `getppid` system call on this architecture:
//! what the kprobe tests probe (tests/events_live.rs, cli/tests/trace.rs).

/// `__x64_sys_getppid`, `__arm64_sys_getppid`, or the generic name.
pub const GETPPID: &str = if cfg!(target_arch = "x86_64") {
    "__x64_sys_getppid"
} else if cfg!(target_arch = "aarch64") {
    "__arm64_sys_getppid"
} else {
    "sys_getppid"
};
