//! `HEADER_TRACING_DATA`: the tracefs format files of the file's
//! tracepoints, in the layout perf's trace-event reader takes (version
//! 0.6), so that `perf script` prints their fields as the kernel defines
//! them on the recording machine.

use super::layout::{put_u32, put_u64};
use std::collections::BTreeMap;
use std::path::Path;

/// A tracepoint's format file, and its subsystem.
pub(crate) struct TracepointFormat {
    pub system: String,
    pub text: Vec<u8>,
}

/// The format files of tracepoints named `subsystem:event` under tracefs
/// `root`; a tracepoint whose format cannot be read is left out (perf then
/// shows its samples without fields). Read when the events are known: a
/// probe's format is gone with the probe.
pub(crate) fn read_formats(root: &Path, tracepoints: &[String]) -> Vec<TracepointFormat> {
    let mut out = Vec::new();
    for tp in tracepoints {
        let Some((system, event)) = tp.split_once(':') else { continue };
        if let Ok(text) = read_tracefs(&root.join("events").join(system).join(event).join("format")) {
            out.push(TracepointFormat { system: system.to_owned(), text });
        }
    }
    out
}

/// The `HEADER_TRACING_DATA` blob for `formats`, with tracefs `root`'s
/// ring-buffer headers.
pub(crate) fn tracing_data(root: &Path, formats: &[TracepointFormat]) -> std::io::Result<Vec<u8>> {
    let mut out = vec![23, 8, 68];
    out.extend_from_slice(b"tracing");
    out.extend_from_slice(b"0.6\0");
    out.push(u8::from(cfg!(target_endian = "big")));
    out.push(size_of::<libc::c_long>() as u8);
    put_u32(&mut out, crate::kernel::cpu::page_size() as u32);
    for (name, file) in [(&b"header_page\0"[..], "header_page"), (b"header_event\0", "header_event")] {
        let text = read_tracefs(&root.join("events").join(file))?;
        out.extend_from_slice(name);
        put_u64(&mut out, text.len() as u64);
        out.extend_from_slice(&text);
    }
    put_u32(&mut out, 0); // ftrace's own events
    let mut systems: BTreeMap<&str, Vec<&[u8]>> = BTreeMap::new();
    for f in formats {
        systems.entry(&f.system).or_default().push(&f.text);
    }
    put_u32(&mut out, systems.len() as u32);
    for (system, texts) in systems {
        out.extend_from_slice(system.as_bytes());
        out.push(0);
        put_u32(&mut out, texts.len() as u32);
        for text in texts {
            put_u64(&mut out, text.len() as u64);
            out.extend_from_slice(text);
        }
    }
    put_u32(&mut out, 0); // kallsyms: perf reads the machine's own
    put_u32(&mut out, 0); // printk formats
    put_u64(&mut out, 0); // saved cmdlines
    Ok(out)
}

/// A tracefs file's text, read with large reads: `header_page` and
/// `header_event` give everything to the first read and nothing to a read
/// at a later offset (so `std::fs::read`'s small first probe would cut them).
fn read_tracefs(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match file.read(&mut buf)? {
            0 => return Ok(out),
            n => out.extend_from_slice(&buf[..n]),
        }
    }
}
