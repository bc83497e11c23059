//! Probes with fetch arguments (`fd=%di:s32 path=+0(%si):string`): the
//! kprobe and uprobe PMUs cannot take arguments, so such a probe is made a
//! dynamic event through tracefs (`kprobe_events`, `uprobe_events`), in a
//! group named after the process and set that own it, and opened as the
//! tracepoint the kernel generates for it, fields and format included.
//!
//! A group `perfbuf_<pid>_<pidns>_<set>` belongs to process `<pid>` of pid
//! namespace `<pidns>` (its inode): its probes are deleted when their event
//! goes, and a set created later in the same pid namespace deletes the
//! groups of processes that no longer exist (a crashed monitor's probes).
//! Other namespaces' groups are left alone: their pids mean nothing here.

use super::tracefs::{Tracefs, Tracepoint};
use crate::error::{Error, Result};
use crate::log;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of the groups this library creates.
const GROUP_PREFIX: &str = "perfbuf_";

/// The two kinds of dynamic probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProbeType {
    Kprobe,
    Uprobe,
}

impl ProbeType {
    /// The tracefs file that defines this kind's probes.
    fn control(self) -> &'static str {
        match self {
            ProbeType::Kprobe => "kprobe_events",
            ProbeType::Uprobe => "uprobe_events",
        }
    }
}

/// A new group name for a set of this process: `perfbuf_<pid>_<pidns>_<n>`.
pub(crate) fn new_group() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{GROUP_PREFIX}{}_{}_{n}", std::process::id(), pid_namespace())
}

/// This process's pid namespace, as the inode `/proc/self/ns/pid` names
/// (`pid:[4026531836]`); 0 if it cannot be read.
fn pid_namespace() -> u64 {
    let link = std::fs::read_link("/proc/self/ns/pid").unwrap_or_default();
    let text = link.to_string_lossy();
    text.strip_prefix("pid:[").and_then(|t| t.strip_suffix(']')).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// A probe to define: where it goes and what it fetches.
pub(crate) struct Definition<'a> {
    pub(crate) type_: ProbeType,
    pub(crate) retprobe: bool,
    /// `SYMBOL[+OFFS]` for a kprobe, `PATH:0xOFFSET[(0xREF)]` for a uprobe.
    pub(crate) location: String,
    pub(crate) args: &'a str,
}

/// A dynamic probe this set defined; deleted when dropped (after its
/// perf events are closed: the kernel refuses to delete a probe in use).
#[derive(Debug)]
pub(crate) struct ProbeEvent {
    control: PathBuf,
    group: String,
    event: String,
}

impl ProbeEvent {
    /// Defines `def` as `group/event` and reads back the tracepoint the
    /// kernel made of it. A definition the kernel rejects fails with its
    /// errno (EINVAL) and the kernel's complaint from `error_log`.
    pub(crate) fn create(
        tracefs: &Tracefs,
        def: &Definition<'_>,
        group: &str,
        event: &str,
    ) -> Result<(ProbeEvent, Tracepoint)> {
        check_args(def.args)?;
        let control = tracefs.root().join(def.type_.control());
        if !control.exists() {
            let why = match def.type_ {
                ProbeType::Kprobe => {
                    "this kernel has no kprobe_events in tracefs (built without CONFIG_KPROBE_EVENTS)"
                }
                ProbeType::Uprobe => {
                    "this kernel has no uprobe_events in tracefs (built without CONFIG_UPROBE_EVENTS)"
                }
            };
            return Err(Error::new(libc::ENOENT, crate::error::What::Arg(why)));
        }
        let command = format!(
            "{}:{group}/{event} {} {}",
            if def.retprobe { 'r' } else { 'p' },
            def.location,
            def.args.trim()
        );
        log::debug(format_args!("{}: {command}", control.display()));
        if let Err(e) = append(&control, &command) {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            let complaint = kernel_complaint(tracefs.root(), &command);
            let e = Error::from_errno(errno);
            return Err(match complaint {
                Some(text) => e.about(format_args!("the kernel rejected `{command}`: {text}")),
                None => e.about(format_args!("the kernel rejected `{command}`")),
            });
        }
        let probe = ProbeEvent { control, group: group.to_owned(), event: event.to_owned() };
        // On failure `probe` drops: the definition goes again.
        let tracepoint = tracefs.tracepoint(&format!("{group}:{event}"))?;
        Ok((probe, tracepoint))
    }
}

impl ProbeEvent {
    /// Its tracefs name, `group:event`.
    pub(crate) fn tracefs_name(&self) -> String {
        format!("{}:{}", self.group, self.event)
    }
}

impl Drop for ProbeEvent {
    fn drop(&mut self) {
        if let Err(e) = append(&self.control, &format!("-:{}/{}", self.group, self.event)) {
            log::warn(format_args!("cannot delete dynamic probe {}/{}: {e}", self.group, self.event));
        }
    }
}

/// Arguments that are one command line: a newline would start another
/// (a definition, or a deletion of someone else's probes).
fn check_args(args: &str) -> Result<()> {
    if args.contains(['\n', '\r', '\0']) {
        return Err(
            Error::invalid("probe arguments are one line, without NUL").about(format_args!("{args:?}"))
        );
    }
    if args.trim().is_empty() {
        return Err(Error::invalid("probe arguments are empty"));
    }
    Ok(())
}

/// Appends one command to a tracefs control file (never truncating it:
/// that would delete every probe of the machine).
fn append(control: &Path, command: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().append(true).open(control)?;
    // One write: the kernel parses what each write brings.
    file.write_all(format!("{command}\n").as_bytes())
}

/// The kernel's complaint about `command` in tracefs `error_log`: its
/// message and, from the caret under the command, the word it points at.
/// The last entry whose command is ours (other programs log there too).
fn kernel_complaint(root: &Path, command: &str) -> Option<String> {
    let log = std::fs::read_to_string(root.join("error_log")).ok()?;
    complaint_in(&log, command)
}

fn complaint_in(log: &str, command: &str) -> Option<String> {
    const COMMAND: &str = "  Command: ";
    let lines: Vec<&str> = log.lines().collect();
    let mut found = None;
    for (i, line) in lines.iter().enumerate() {
        let Some(logged) = line.strip_prefix(COMMAND) else { continue };
        // The kernel may cut a long command; ours starts the same way.
        if logged.is_empty() || !command.starts_with(logged.trim_end()) || i == 0 {
            continue;
        }
        let message = lines[i - 1].split_once("error: ").map_or(lines[i - 1], |(_, m)| m).trim();
        let caret = lines.get(i + 1).and_then(|l| l.find('^')).and_then(|c| c.checked_sub(COMMAND.len()));
        let word = caret.and_then(|at| word_at(command, at));
        found = Some(match word {
            Some(word) => format!("{message} (at `{word}`)"),
            None => message.to_owned(),
        });
    }
    found
}

/// The space-separated word of `text` that byte `at` falls in.
fn word_at(text: &str, at: usize) -> Option<&str> {
    if at >= text.len() || !text.is_char_boundary(at) {
        return None;
    }
    let start = text[..at].rfind(' ').map_or(0, |s| s + 1);
    let end = text[at..].find(' ').map_or(text.len(), |e| at + e);
    Some(&text[start..end]).filter(|w| !w.is_empty())
}

/// Deletes the probes of groups `perfbuf_<pid>_<pidns>_<n>` whose process no
/// longer exists. Reads the control files; writes only to delete.
pub(crate) fn remove_orphans(tracefs: &Tracefs) {
    for type_ in [ProbeType::Kprobe, ProbeType::Uprobe] {
        let control = tracefs.root().join(type_.control());
        let Ok(defined) = std::fs::read_to_string(&control) else { continue };
        for (group, event) in orphans(&defined, pid_namespace(), process_exists) {
            match append(&control, &format!("-:{group}/{event}")) {
                Ok(()) => log::info(format_args!("deleted {group}/{event}, left by a process that is gone")),
                Err(e) => log::warn(format_args!("cannot delete {group}/{event} (its process is gone): {e}")),
            }
        }
    }
}

/// The `(group, event)`s in a control file's listing whose group is of
/// pid namespace `ns` and whose process `exists` says is gone.
fn orphans(defined: &str, ns: u64, exists: impl Fn(u32) -> bool) -> Vec<(String, String)> {
    let mut gone = Vec::new();
    for line in defined.lines() {
        // `p:GROUP/EVENT LOCATION ARGS...` (`r:` and `r10:` for returns).
        let Some(name) = line.split_whitespace().next().and_then(|n| n.split_once(':')).map(|(_, n)| n)
        else {
            continue;
        };
        let Some((group, event)) = name.split_once('/') else { continue };
        let Some((pid, group_ns)) = group_owner(group) else { continue };
        if group_ns == ns && !exists(pid) {
            gone.push((group.to_owned(), event.to_owned()));
        }
    }
    gone
}

/// The pid and pid namespace in a group name `perfbuf_<pid>_<pidns>_<n>`.
fn group_owner(group: &str) -> Option<(u32, u64)> {
    let mut parts = group.strip_prefix(GROUP_PREFIX)?.split('_');
    let (pid, ns, n) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if parts.next().is_some() || !digits(n) {
        return None;
    }
    Some((pid.parse().ok()?, ns.parse().ok()?))
}

/// Whether a process exists (in this pid namespace; a pid reused since
/// keeps its groups until it too is gone).
fn process_exists(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_kernels_complaint_about_our_command() {
        let ours = "p:perfbuf_1_0/e0 /bin/bash:0x1000 a=%zz:s32";
        let log = "[  584.391165] trace_uprobe: error: Invalid register name\n  Command: p:other/x /bin/sh:0x1 a=%zz\n                            ^\n\
                   [  590.000000] trace_uprobe: error: Invalid register name\n  Command: p:perfbuf_1_0/e0 /bin/bash:0x1000 a=%zz:s32\n                                                 ^\n";
        assert_eq!(complaint_in(log, ours).as_deref(), Some("Invalid register name (at `a=%zz:s32`)"));
        assert_eq!(complaint_in(log, "p:perfbuf_2_0/e0 x"), None);
        assert_eq!(complaint_in("", ours), None);
        let no_caret =
            "[1] trace_uprobe: error: Bad thing\n  Command: p:perfbuf_1_0/e0 /bin/bash:0x1000 a=%zz:s32\n";
        assert_eq!(complaint_in(no_caret, ours).as_deref(), Some("Bad thing"));
    }

    #[test]
    fn orphans_are_our_groups_of_dead_processes() {
        let defined = "p:perfbuf_10_5_0/e0 /bin/bash:0x1000 a=%di\nr:perfbuf_11_5_2/e3 /bin/bash:0x1000 r=$retval\n\
                       p:perfbuf_x_5_0/e0 /a:0x1\np:someone/e0 /a:0x1\nr10:perfbuf_12_5_0/e1 f\n\
                       p:perfbuf_13_6_0/e0 /a:0x1\np:perfbuf_14_0/e0 /a:0x1\n";
        let gone = orphans(defined, 5, |pid| pid == 11);
        assert_eq!(gone, [("perfbuf_10_5_0".into(), "e0".into()), ("perfbuf_12_5_0".into(), "e1".into())]);
        assert_eq!(group_owner("perfbuf_1_2_"), None);
        assert_eq!(group_owner("perfbuf_99_7_3"), Some((99, 7)));
        assert!(pid_namespace() > 0);
    }

    #[test]
    fn arguments_are_one_line() {
        assert!(check_args("a=%di").is_ok());
        for bad in ["a=%di\n-:someone/e0", "a\r", "a\0", " ", ""] {
            assert_eq!(check_args(bad).unwrap_err().errno(), libc::EINVAL, "{bad:?}");
        }
    }

    #[test]
    fn words_under_the_caret() {
        assert_eq!(word_at("p:g/e /x:0x1 a=%zz", 14), Some("a=%zz"));
        assert_eq!(word_at("p:g/e /x:0x1 a=%zz", 99), None);
    }
}
