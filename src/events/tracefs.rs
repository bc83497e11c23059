//! Finding tracefs and reading a tracepoint's id and record format from it.

use super::format::Format;
use crate::error::{Error, Result, What};
use crate::log::{debug, warn};
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where tracefs is when no mount table names it: its own mount point
/// (Linux 4.1+), then the debugfs one older kernels and tools use.
const USUAL_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The longest subsystem or event name taken (a file name's limit).
const NAME_MAX: usize = 255;

/// A tracefs mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tracefs {
    root: PathBuf,
}

/// A tracepoint: its perf `config` and the layout of its raw records.
#[derive(Clone, Debug)]
pub(crate) struct Tracepoint {
    /// The tracepoint's id: `perf_event_attr.config` for `PERF_TYPE_TRACEPOINT`.
    pub(crate) id: u64,
    /// Its parsed `format` file.
    pub(crate) format: Arc<Format>,
}

impl Tracefs {
    /// Where tracefs is mounted: /proc/self/mountinfo's `tracefs` mount (the
    /// first whose `events` dir exists), else a `debugfs` mount + "/tracing",
    /// else /sys/kernel/tracing or /sys/kernel/debug/tracing if their `events`
    /// dir exists. Never mounts anything (though looking into a debugfs
    /// `tracing` dir makes the kernel automount tracefs there, as for any
    /// reader). Nothing is cached: mounts change.
    pub(crate) fn find() -> Result<Tracefs> {
        let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap_or_else(|e| {
            debug(format_args!("cannot read /proc/self/mountinfo ({e}): trying {USUAL_ROOTS:?}"));
            Vec::new()
        });
        match first_tracefs(&mountinfo, &USUAL_ROOTS.map(Path::new)) {
            Some(root) => {
                debug(format_args!("tracefs at {}", root.display()));
                Ok(Tracefs { root })
            }
            None => Err(Error::new(libc::ENOENT, What::NoTracefs)),
        }
    }

    /// tracefs at `root`, unchecked.
    #[cfg(test)]
    pub(crate) fn at(root: PathBuf) -> Tracefs {
        Tracefs { root }
    }

    /// The mount point.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// A tracepoint by "subsystem:name" (also "subsystem/name"): its id and
    /// parsed format.
    pub(crate) fn tracepoint(&self, name: &str) -> Result<Tracepoint> {
        let (subsystem, event) = split_tracepoint_name(name)?;
        let dir = self.root.join("events").join(subsystem).join(event);
        let format_path = dir.join("format");
        let bytes = std::fs::read(&format_path).map_err(|e| {
            // The error cannot carry the name, so say here which one and where.
            debug(format_args!("tracepoint {subsystem}:{event}: cannot read {}: {e}", format_path.display()));
            Error::new(e.raw_os_error().unwrap_or(libc::EIO), What::NoTracepoint)
                .about(format_args!("tracepoint {subsystem}:{event}"))
        })?;
        let format = String::from_utf8(bytes)
            .map_err(|_| "the file is not UTF-8".to_owned())
            .and_then(|text| Format::parse(&text).map_err(|e| e.to_string()))
            .map_err(|why| {
                warn(format_args!("tracepoint {subsystem}:{event}: {}: {why}", format_path.display()));
                Error::new(libc::EINVAL, What::TracepointFormat)
                    .about(format_args!("tracepoint {subsystem}:{event}"))
            })?;
        let id = u64::from(format.id());
        // The `id` file and the format's `ID:` come from the same number; a
        // difference would mean the tracepoint was replaced between reads.
        if let Ok(text) = std::fs::read_to_string(dir.join("id")) {
            match text.trim_end().parse::<u64>() {
                Ok(id_file) if id_file != id => debug(format_args!(
                    "tracepoint {subsystem}:{event}: id file says {id_file}, format says {id}: using {id}"
                )),
                Ok(_) => {}
                Err(_) => debug(format_args!("tracepoint {subsystem}:{event}: unreadable id file {text:?}")),
            }
        }
        if format.name() != event {
            debug(format_args!("tracepoint {subsystem}:{event}: its format names it {:?}", format.name()));
        }
        Ok(Tracepoint { id, format: Arc::new(format) })
    }
}

/// The first tracefs root with an `events` dir: tracefs mounts in
/// `mountinfo`, then debugfs mounts' `tracing`, then `usual_roots`.
fn first_tracefs(mountinfo: &[u8], usual_roots: &[&Path]) -> Option<PathBuf> {
    mount_points(mountinfo, "tracefs")
        .chain(mount_points(mountinfo, "debugfs").map(|debugfs| debugfs.join("tracing")))
        .chain(usual_roots.iter().map(|root| root.to_path_buf()))
        .find(|root| has_events(root))
}

/// Whether `root/events` is a directory. One we may not look into still
/// counts: tracefs is there, and reading a tracepoint will say EACCES.
fn has_events(root: &Path) -> bool {
    match std::fs::metadata(root.join("events")) {
        Ok(meta) => meta.is_dir(),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            debug(format_args!("tracefs at {} is not readable by this process", root.display()));
            true
        }
        Err(_) => false,
    }
}

/// The mount points of `fstype` file systems in a mountinfo text (proc(5)):
/// `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`.
/// Bytes, not text: a mount point may be any bytes but `/` and NUL.
fn mount_points<'a>(mountinfo: &'a [u8], fstype: &'a str) -> impl Iterator<Item = PathBuf> + 'a {
    mountinfo.split(|&b| b == b'\n').filter_map(move |line| {
        let mut fields = line.split(|&b| b == b' ');
        let mount_point = fields.nth(4)?;
        fields.find(|&field| field == b"-")?;
        let is_fstype = fields.next()? == fstype.as_bytes();
        // A relative "mount point" is a garbled line, and would be looked up
        // from our working directory.
        (is_fstype && mount_point.starts_with(b"/")).then(|| unescape_mount_point(mount_point))
    })
}

/// Undoes the kernel's `\ooo` octal escapes (of space, tab, newline and
/// backslash) in a mountinfo path; anything else is kept as it is.
fn unescape_mount_point(escaped: &[u8]) -> PathBuf {
    let mut path = Vec::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some((&byte, after)) = rest.split_first() {
        let escaped_byte = match after.first_chunk::<3>() {
            Some(&digits) if byte == b'\\' => octal_byte(digits),
            _ => None,
        };
        match escaped_byte {
            Some(value) => {
                path.push(value);
                rest = &after[3..];
            }
            None => {
                path.push(byte);
                rest = after;
            }
        }
    }
    PathBuf::from(OsString::from_vec(path))
}

fn octal_byte(digits: [u8; 3]) -> Option<u8> {
    digits.iter().try_fold(0u8, |value, &digit| match digit {
        b'0'..=b'7' => value.checked_mul(8)?.checked_add(digit - b'0'),
        _ => None,
    })
}

/// "subsystem:event" or "subsystem/event", as two names that are safe to
/// join under `events/`.
fn split_tracepoint_name(name: &str) -> Result<(&str, &str)> {
    let invalid =
        || Error::invalid("tracepoint names are subsystem:event").about(format_args!("tracepoint {name:?}"));
    let mut parts = name.split([':', '/']);
    let (Some(subsystem), Some(event), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid());
    };
    let is_plain_name = |part: &str| {
        !part.is_empty()
            && part.len() <= NAME_MAX
            && part != "."
            && !part.contains("..")
            && !part.contains('\0')
    };
    if is_plain_name(subsystem) && is_plain_name(event) { Ok((subsystem, event)) } else { Err(invalid()) }
}

#[cfg(test)]
mod tests {
    use super::super::pmu::ScratchDir;
    use super::*;

    const EXEC_FORMAT: &str = include_str!("../../tests/fixtures/tracepoint/sched_sched_process_exec.format");

    fn points(mountinfo: &str, fstype: &str) -> Vec<PathBuf> {
        mount_points(mountinfo.as_bytes(), fstype).collect()
    }

    #[test]
    fn mountinfo_tracefs_line() {
        let mountinfo = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                         42 23 0:13 / /sys/kernel/tracing rw,relatime shared:5 - tracefs nodev rw\n\
                         43 23 0:14 / /mnt/trace rw,relatime - tracefs tracefs rw\n";
        assert_eq!(points(mountinfo, "tracefs"), [Path::new("/sys/kernel/tracing"), Path::new("/mnt/trace")]);
        assert_eq!(points(mountinfo, "debugfs"), Vec::<PathBuf>::new());
    }

    #[test]
    fn mountinfo_debugfs_only() {
        let mountinfo = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
                         37 23 0:7 / /sys/kernel/debug rw,nosuid,nodev,noexec,relatime - debugfs debugfs rw";
        assert_eq!(points(mountinfo, "tracefs"), Vec::<PathBuf>::new());
        assert_eq!(points(mountinfo, "debugfs"), [Path::new("/sys/kernel/debug")]);
        assert_eq!(points(mountinfo, "ext3"), [Path::new("/mnt2")]);
    }

    #[test]
    fn mountinfo_escaped_mount_points() {
        let mountinfo = r"50 23 0:13 / /mnt/my\040trace\011x\012y\134z rw - tracefs nodev rw
51 23 0:13 / /mnt/odd\0\777\08a\ rw - tracefs nodev rw
52 23 0:13 / /mnt/caf\303\251 rw - tracefs nodev rw";
        let found = points(mountinfo, "tracefs");
        assert_eq!(found[0], Path::new("/mnt/my trace\tx\ny\\z"));
        assert_eq!(found[1], Path::new(r"/mnt/odd\0\777\08a\"));
        assert_eq!(found[2], Path::new("/mnt/café"));
        let raw = b"53 23 0:13 / /mnt/\xff\xfe rw - tracefs nodev rw\n";
        let found: Vec<PathBuf> = mount_points(raw, "tracefs").collect();
        assert_eq!(found, [PathBuf::from(OsString::from_vec(b"/mnt/\xff\xfe".to_vec()))]);
    }

    #[test]
    fn mountinfo_without_a_match_or_garbled() {
        assert_eq!(points("", "tracefs"), Vec::<PathBuf>::new());
        let garbage = "\n\n- tracefs\n1 2 3 4 - tracefs\n1 2 3 4 /x tracefs\n1 2 3 4 relative rw - tracefs x\n\
                       1 2 3 4 /y rw -\n1 2 3 4 /z rw - debugfs x\n\u{0}\u{0}\n   - - - - - tracefs";
        assert_eq!(points(garbage, "tracefs"), Vec::<PathBuf>::new());
        assert_eq!(points("1 2 3 4 /ok rw - tracefs", "tracefs"), [Path::new("/ok")]);
    }

    #[test]
    fn finds_the_first_mount_with_events() {
        let dirs = ScratchDir::new("tracefs");
        let root = dirs.path();
        dirs.write("unused/placeholder", "");
        dirs.write("tracefs/events/header_page", "");
        dirs.write("debug/tracing/events/header_page", "");
        dirs.write("usual/events/header_page", "");
        let (unused, tracefs, debug, usual) =
            (root.join("unused"), root.join("tracefs"), root.join("debug"), root.join("usual"));
        let line = |fstype: &str, path: &Path| format!("1 2 0:1 / {} rw - {fstype} x rw\n", path.display());
        let both = line("tracefs", &unused) + &line("tracefs", &tracefs) + &line("debugfs", &debug);
        assert_eq!(first_tracefs(both.as_bytes(), &[&usual]), Some(tracefs.clone()));
        let debugfs_only = line("debugfs", &debug);
        assert_eq!(first_tracefs(debugfs_only.as_bytes(), &[&usual]), Some(debug.join("tracing")));
        assert_eq!(first_tracefs(b"", &[&unused, &usual]), Some(usual.clone()));
        assert_eq!(first_tracefs(line("tracefs", &unused).as_bytes(), &[&unused]), None);
    }

    #[test]
    fn finds_a_mount_point_with_a_space() {
        let dirs = ScratchDir::new("tracefs");
        dirs.write("with space/events/header_page", "");
        let escaped = dirs.path().display().to_string().replace(' ', r"\040") + r"/with\040space";
        let mountinfo = format!("1 2 0:1 / {escaped} rw - tracefs nodev rw\n");
        assert_eq!(first_tracefs(mountinfo.as_bytes(), &[]), Some(dirs.path().join("with space")));
    }

    fn fake_tracefs(format: &str) -> ScratchDir {
        let dirs = ScratchDir::new("tracefs");
        dirs.write("events/sched/sched_process_exec/format", format);
        dirs.write("events/sched/sched_process_exec/id", "365\n");
        dirs
    }

    #[test]
    fn reads_a_tracepoint() {
        let dirs = fake_tracefs(EXEC_FORMAT);
        let tracefs = Tracefs::at(dirs.path().to_path_buf());
        assert_eq!(tracefs.root(), dirs.path());
        for name in ["sched:sched_process_exec", "sched/sched_process_exec"] {
            let tracepoint = tracefs.tracepoint(name).unwrap();
            assert_eq!(tracepoint.id, 365);
            assert_eq!(tracepoint.format.name(), "sched_process_exec");
            assert!(tracepoint.format.field("filename").is_some());
        }
    }

    #[test]
    fn an_id_file_that_disagrees_does_not_matter() {
        let dirs = fake_tracefs(EXEC_FORMAT);
        dirs.write("events/sched/sched_process_exec/id", "366\n");
        assert_eq!(
            Tracefs::at(dirs.path().to_path_buf()).tracepoint("sched:sched_process_exec").unwrap().id,
            365
        );
        dirs.write("events/sched/sched_process_exec/id", "garbage");
        assert_eq!(
            Tracefs::at(dirs.path().to_path_buf()).tracepoint("sched:sched_process_exec").unwrap().id,
            365
        );
    }

    #[test]
    fn bad_names_are_rejected() {
        let dirs = fake_tracefs(EXEC_FORMAT);
        let tracefs = Tracefs::at(dirs.path().to_path_buf());
        let long = "x".repeat(NAME_MAX + 1);
        for name in [
            "",
            "sched",
            ":",
            "sched:",
            ":sched_process_exec",
            "sched:sched_process_exec:x",
            "sched/sched_process_exec/format",
            "sched:sched/process_exec",
            "..:sched_process_exec",
            "sched:..",
            "sched:a..b",
            ".:sched_process_exec",
            "sched:sched\0process_exec",
            &format!("sched:{long}"),
        ] {
            let e = tracefs.tracepoint(name).unwrap_err();
            assert_eq!(
                e,
                Error::invalid("tracepoint names are subsystem:event")
                    .about(format_args!("tracepoint {name:?}"))
            );
        }
        assert!(split_tracepoint_name(&format!("sched:{}", &long[1..])).is_ok());
    }

    #[test]
    fn a_missing_tracepoint_is_enoent() {
        let dirs = fake_tracefs(EXEC_FORMAT);
        let tracefs = Tracefs::at(dirs.path().to_path_buf());
        for name in ["sched:sched_process_fork", "nosuchsystem:sched_process_exec"] {
            let e = tracefs.tracepoint(name).unwrap_err();
            assert_eq!(
                e,
                Error::new(libc::ENOENT, What::NoTracepoint).about(format_args!("tracepoint {name}"))
            );
            assert!(e.to_string().starts_with(&format!("tracepoint {name}: no such tracepoint")), "{e}");
        }
        let nowhere = Tracefs::at(dirs.path().join("nowhere"));
        let e = nowhere.tracepoint("sched:sched_process_exec").unwrap_err();
        assert_eq!(
            (e.errno(), e.what(), e.subject()),
            (libc::ENOENT, What::NoTracepoint, Some("tracepoint sched:sched_process_exec"))
        );
        assert!(e.hint().is_some());
    }

    #[test]
    fn a_garbled_format_is_einval() {
        for format in ["", "garbage\n", &EXEC_FORMAT.replace("ID: 365", "ID: x"), &EXEC_FORMAT[..40]] {
            let dirs = fake_tracefs(format);
            let e =
                Tracefs::at(dirs.path().to_path_buf()).tracepoint("sched:sched_process_exec").unwrap_err();
            assert_eq!((e.errno(), e.what()), (libc::EINVAL, What::TracepointFormat), "{format:?}");
            assert_eq!(e.subject(), Some("tracepoint sched:sched_process_exec"));
        }
        let dirs = ScratchDir::new("tracefs");
        dirs.write("events/sched/sched_process_exec/format", b"name: \xff\n");
        let e = Tracefs::at(dirs.path().to_path_buf()).tracepoint("sched:sched_process_exec").unwrap_err();
        assert_eq!((e.errno(), e.what()), (libc::EINVAL, What::TracepointFormat));
    }

    #[test]
    fn a_directory_where_the_format_should_be_keeps_its_errno() {
        let dirs = ScratchDir::new("tracefs");
        dirs.write("events/sched/sched_process_exec/format/oops", "");
        let e = Tracefs::at(dirs.path().to_path_buf()).tracepoint("sched:sched_process_exec").unwrap_err();
        assert_eq!((e.errno(), e.what()), (libc::EISDIR, What::NoTracepoint));
    }

    #[test]
    fn live_tracefs() {
        match Tracefs::find() {
            Ok(tracefs) => {
                let exec = tracefs.tracepoint("sched:sched_process_exec").unwrap();
                assert!(exec.id > 0);
                assert!(exec.format.field("filename").is_some(), "{:?}", exec.format);
            }
            Err(e) => assert_eq!(e, Error::new(libc::ENOENT, What::NoTracefs)),
        }
    }
}
