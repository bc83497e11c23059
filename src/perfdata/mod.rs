//! perf.data out: what a reader reads, written to a file that `perf
//! report`, `perf script` and the tools built on perf.data read.
//!
//! The records in a perf ring already have perf.data's on-disk form; the
//! writer adds the file around them: the header, the attr section (each
//! event's attr as opened and its kernel ids), the data section (the
//! rings' runs of records written whole, one `write` per run, and a
//! `FINISHED_ROUND` after each pass over the rings, as `perf record`
//! does), and at a clean close the header features perf needs. `data.size`
//! in the header is rewritten after every round, so a writer killed
//! mid-way leaves a file perf reads up to its last complete round.
//!
//! ```no_run
//! use perfbuf::events::{Event, EventSet};
//! use perfbuf::perfdata::PerfDataWriter;
//! use std::time::Duration;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut set = EventSet::builder().pages(64).build()?;
//! set.add(&Event::cpu_clock().frequency(999).sample(perfbuf::uapi::PERF_SAMPLE_CALLCHAIN))?;
//! // Side-band events (COMM, MMAP2...) and processes already running.
//! let mut out = PerfDataWriter::for_set("perf.data", &mut set)?;
//! let mut reader = set.reader(|_| {})?;
//! set.enable_all()?;
//! for _ in 0..100 {
//!     out.poll(&mut reader, Duration::from_millis(100))?;
//! }
//! set.disable_all()?;
//! out.drain(&mut reader)?;
//! out.finish()?;
//! # Ok(()) }
//! ```

mod buildid;
mod dsos;
mod error;
mod features;
mod from_set;
mod ids;
mod layout;
mod procfs;
mod tracing;

pub use error::Error;

use crate::kernel::{self, PerfEventAttr};
use crate::perf_buffer::Reader;
use crate::reader::batch::Batch;
use crate::reader::sink::Sink;
use crate::ring::Header;
use layout::{FileHeader, Section};
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The writer's result.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// An event as the file describes it: its attr as opened, its name, and
/// the kernel ids its records carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEvent {
    /// The attr as the kernel opened it.
    pub attr: PerfEventAttr,
    /// Its name (`"cpu-clock"`, `"sched:sched_switch"`): `perf` shows it,
    /// and finds a tracepoint's format by it.
    pub name: String,
    /// The ids of its kernel events (`PERF_EVENT_IOC_ID`); empty for a
    /// file of one event without ids (a BPF output perf buffer).
    pub ids: Vec<u64>,
}

/// What a writer wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Samples (`PERF_RECORD_SAMPLE`) from the rings.
    pub samples: u64,
    /// Every record from the rings (samples, side-band, LOST...).
    pub records: u64,
    /// Records synthesized from /proc.
    pub synthesized: u64,
    /// Rounds (`FINISHED_ROUND` records).
    pub rounds: u64,
    /// Bytes of the data section.
    pub data_bytes: u64,
}

/// A perf.data file being written. See the [module](self) documentation.
pub struct PerfDataWriter {
    file: File,
    path: PathBuf,
    events: Vec<FileEvent>,
    data_start: u64,
    /// Data bytes written; `committed` of them are in the header.
    written: u64,
    committed: u64,
    /// The attr section at the head: its events, where it is.
    head_events: usize,
    head_attrs: Section,
    time_at: Option<usize>,
    times: Option<(u64, u64)>,
    /// The tracepoints' formats (`HEADER_TRACING_DATA`).
    formats: Vec<tracing::TracepointFormat>,
    /// The set whose events added later join the file.
    following: Option<from_set::Following>,
    /// Whether an event at the head gained kernel ids since (the attr
    /// section is then written again at the end).
    ids_grew: bool,
    /// The mapped files' build ids (`HEADER_BUILD_ID`).
    build_ids: dsos::BuildIds,
    stats: WriteStats,
    finished: bool,
}

impl PerfDataWriter {
    /// Creates (or truncates) `path` and writes the header and the attr
    /// section for `events`; records follow with the `write_*` methods.
    pub fn create(path: impl AsRef<Path>, events: Vec<FileEvent>) -> Result<PerfDataWriter> {
        // A tracepoint's name is its tracefs `subsystem:name`.
        let events = events
            .into_iter()
            .map(|e| {
                let tracepoint = (e.attr.type_ == kernel::PERF_TYPE_TRACEPOINT).then(|| e.name.clone());
                (e, tracepoint)
            })
            .collect();
        PerfDataWriter::create_with(path.as_ref(), events)
    }

    /// [`Self::create`] for events each with the tracefs event (`subsystem:
    /// name`) whose format decodes its samples, read now.
    fn create_with(path: &Path, events: Vec<from_set::SetEvent>) -> Result<PerfDataWriter> {
        let path = path.to_path_buf();
        let file = File::create(&path).map_err(|source| Error::Write {
            path: path.clone(),
            what: "the file",
            source,
        })?;
        let mut w = PerfDataWriter {
            file,
            path,
            events: Vec::new(),
            data_start: 0,
            written: 0,
            committed: 0,
            head_events: 0,
            head_attrs: Section::default(),
            time_at: None,
            times: None,
            formats: Vec::new(),
            following: None,
            ids_grew: false,
            build_ids: dsos::BuildIds::default(),
            stats: WriteStats::default(),
            finished: false,
        };
        w.take_in(events);
        w.head_events = w.events.len();
        w.write_head()?;
        Ok(w)
    }

    /// A file for the samples of a BPF output perf buffer: one event,
    /// `PERF_COUNT_SW_BPF_OUTPUT` with `attr` (libbpf's: raw samples only;
    /// [`PerfEventAttr::bpf_output`]), which `perf script` shows as
    /// bpf-output events with their raw bytes.
    pub fn for_bpf_output(path: impl AsRef<Path>, attr: PerfEventAttr) -> Result<PerfDataWriter> {
        let name = "bpf-output".to_owned();
        PerfDataWriter::create(path, vec![FileEvent { attr, name, ids: Vec::new() }])
    }

    /// The file's events.
    pub fn events(&self) -> &[FileEvent] {
        &self.events
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What was written so far.
    pub fn stats(&self) -> WriteStats {
        self.stats
    }

    /// Header, ids, attr table; the data section starts after them.
    fn write_head(&mut self) -> Result<()> {
        let (attrs, head_attrs) = self.attr_section(layout::HEADER_SIZE);
        self.head_attrs = head_attrs;
        self.data_start = layout::HEADER_SIZE + attrs.len() as u64;
        let header = FileHeader {
            attrs: head_attrs,
            data: Section { offset: self.data_start, size: 0 },
            features: [0; 4],
        };
        let mut head = header.bytes();
        head.extend_from_slice(&attrs);
        self.put(&head, "the header and attrs")
    }

    /// Every event's ids then the attr table (`perf_file_attr`s: the attr
    /// and where its ids are), to be written at file offset `at`; and
    /// where the table is.
    fn attr_section(&self, at: u64) -> (Vec<u8>, Section) {
        let mut ids = Vec::new();
        let mut table = Vec::new();
        let mut ids_at = at;
        let attrs_at = at + 8 * self.events.iter().map(|e| e.ids.len() as u64).sum::<u64>();
        for e in &self.events {
            e.ids.iter().for_each(|&id| layout::put_u64(&mut ids, id));
            table.extend_from_slice(&layout::attr_bytes(&e.attr));
            let section = Section { offset: ids_at, size: 8 * e.ids.len() as u64 };
            section.put(&mut table);
            ids_at += section.size;
        }
        let section = Section { offset: attrs_at, size: table.len() as u64 };
        ids.extend_from_slice(&table);
        (ids, section)
    }

    /// Adds events to the file's (their formats read now), and follows
    /// where the samples' time is.
    fn take_in(&mut self, events: Vec<from_set::SetEvent>) {
        if events.is_empty() {
            return;
        }
        let tracepoints: Vec<String> = events.iter().filter_map(|(_, tp)| tp.clone()).collect();
        if !tracepoints.is_empty()
            && let Ok(tracefs) = crate::events::tracefs::Tracefs::find()
        {
            self.formats.extend(tracing::read_formats(tracefs.root(), &tracepoints));
        }
        self.events.extend(events.into_iter().map(|(e, _)| e));
        let attrs: Vec<&PerfEventAttr> = self.events.iter().map(|e| &e.attr).collect();
        self.time_at = ids::sample_time_offset(&attrs);
    }

    /// Takes in the events added to the followed set since the last look;
    /// an event opened again (a new filter) adds its new kernel ids to its
    /// entry, so that perf attributes its later samples to it.
    fn take_in_added(&mut self) {
        let Some(following) = self.following.as_mut() else { return };
        let mut fresh = Vec::new();
        let (added, new_ids) = following.take();
        for (id, ids) in new_ids {
            if let Some(&i) = following.at.get(&id) {
                let known = &mut self.events[i].ids;
                let new: Vec<u64> = ids.into_iter().filter(|x| !known.contains(x)).collect();
                self.ids_grew |= !new.is_empty();
                known.extend(new);
            }
        }
        for (id, (event, tracepoint)) in added {
            match following.at.get(&id) {
                Some(&i) => {
                    let known = &mut self.events[i].ids;
                    let new: Vec<u64> = event.ids.into_iter().filter(|x| !known.contains(x)).collect();
                    self.ids_grew |= !new.is_empty();
                    known.extend(new);
                }
                None => {
                    following.at.insert(id, self.events.len() + fresh.len());
                    fresh.push((event, tracepoint));
                }
            }
        }
        self.take_in(fresh);
    }

    /// Appends `bytes` at the end of what was written. A failed write
    /// (a full disk) may have written part of them: the file position goes
    /// back, so that a later write, once there is room, continues whole
    /// records where the good ones end.
    fn put(&mut self, bytes: &[u8], what: &'static str) -> Result<()> {
        self.file.write_all(bytes).map_err(|source| {
            let _ = self.file.seek(SeekFrom::Start(self.data_start + self.written));
            Error::Write { path: self.path.clone(), what, source }
        })
    }

    /// Synthesized records, attributed to event `at`'s first id.
    fn synthesize(&mut self, tasks: procfs::Tasks, at: usize) -> Result<()> {
        let e = &self.events[at];
        let trailer = procfs::Trailer { attr: &e.attr, id: e.ids.first().copied().unwrap_or(0) };
        let records = procfs::synthesize(&tasks, &trailer);
        for rec in (Batch { cpu: 0, bytes: &records, samples: 0, others: 0 }).records() {
            self.stats.synthesized += 1;
            if Header::of(rec).type_() == kernel::PERF_RECORD_MMAP2 {
                self.build_ids.note_mmap2(misc(rec), rec);
            }
        }
        self.put(&records, "records synthesized from /proc")?;
        self.written += records.len() as u64;
        self.end_round()
    }

    /// COMM and MMAP2 records from /proc for every process (or these
    /// pids), and the kernel's map; for callers building their own file.
    pub fn synthesize_processes(&mut self, pids: Option<&[i32]>) -> Result<()> {
        let tasks = pids.map_or(procfs::Tasks::All, |p| procfs::Tasks::Pids(p.to_vec()));
        let at = self.events.iter().position(|e| e.attr.has(kernel::ATTR_FLAG_SAMPLE_ID_ALL)).unwrap_or(0);
        self.synthesize(tasks, at)
    }

    /// Appends whole records (each with its `perf_event_header`, as a
    /// ring holds them) to the data section, in one write.
    pub fn write_records(&mut self, bytes: &[u8]) -> Result<()> {
        self.account(bytes);
        self.put(bytes, "records")?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Appends a reader's run of records (see [`Reader::consume_batch`]).
    pub fn write_batch(&mut self, batch: &Batch<'_>) -> Result<()> {
        self.write_records(batch.bytes)
    }

    /// Counts records, follows the samples' first and last times, and
    /// notes the build ids of mapped files.
    fn account(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some(h) = rest.get(..8).map(Header::of) {
            let rec = &rest[..h.size().clamp(8, rest.len())];
            self.stats.records += 1;
            if h.type_() == kernel::PERF_RECORD_SAMPLE {
                self.stats.samples += 1;
                if let Some(t) = self.time_at.and_then(|at| rec.get(at..at + 8)) {
                    let t = u64::from_le_bytes(t.try_into().unwrap_or_default());
                    self.times = Some(self.times.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
                }
            } else if h.type_() == kernel::PERF_RECORD_MMAP2 {
                self.build_ids.note_mmap2(misc(rec), rec);
            }
            rest = &rest[rec.len()..];
        }
    }

    /// Ends a round: a `FINISHED_ROUND` record, then the header's
    /// `data.size` covers everything written, so a reader of a file whose
    /// writer dies later still gets it. Call after each pass over every
    /// ring ([`Self::drain`] does).
    pub fn end_round(&mut self) -> Result<()> {
        let mut round = Vec::with_capacity(8);
        layout::put_record_header(&mut round, layout::RECORD_FINISHED_ROUND, 0, 8);
        self.put(&round, "a FINISHED_ROUND record")?;
        self.written += 8;
        self.stats.rounds += 1;
        self.commit()
    }

    fn commit(&mut self) -> Result<()> {
        self.file.write_all_at(&self.written.to_le_bytes(), layout::DATA_SIZE_AT).map_err(|source| {
            Error::Write { path: self.path.clone(), what: "the header's data size", source }
        })?;
        self.committed = self.written;
        self.stats.data_bytes = self.written;
        Ok(())
    }

    /// Writes every record the rings of `reader` hold now, one write per
    /// run, then ends the round. Returns the records written.
    pub fn drain<S: Sink>(&mut self, reader: &mut Reader<'_, S>) -> Result<usize> {
        // Their records may be in the rings now.
        self.take_in_added();
        let mut failed = None;
        let n = reader.consume_batch(|batch| match self.write_batch(batch) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let n = n?;
        self.end_round()?;
        Ok(n)
    }

    /// Waits up to `timeout` (`None`: forever) for rings of `reader` to
    /// hold records, then [`Self::drain`]s. Returns the records written (0:
    /// the timeout passed, or a signal came); fails with
    /// [`crate::ErrorKind::Cancelled`] after a [`crate::Waker::wake`], as
    /// [`Reader::poll`] does. The wait serves the reader's own wake-up and
    /// delay-timer fds, so a loop of polls sleeps between records.
    pub fn poll<S: Sink>(
        &mut self,
        reader: &mut Reader<'_, S>,
        timeout: impl Into<Option<Duration>>,
    ) -> Result<usize> {
        let ms = timeout.into().map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        match reader.wait_ready(ms) {
            Ok(0) => Ok(0),
            Ok(_) => self.drain(reader),
            Err(e) if e.errno() == libc::EINTR => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Ends the file: the last round, the header features (event names,
    /// hostname, OS release, architecture, CPUs, command line, sample
    /// times, clock; the tracepoints' formats), and the header rewritten
    /// with them. Dropping an unfinished writer finishes it, ignoring
    /// errors.
    pub fn finish(mut self) -> Result<WriteStats> {
        self.finish_file()?;
        Ok(self.stats)
    }

    fn finish_file(&mut self) -> Result<()> {
        self.finished = true;
        self.take_in_added();
        if self.committed != self.written {
            self.end_round()?;
        }
        let clockid =
            self.events.iter().find(|e| e.attr.has(kernel::ATTR_FLAG_USE_CLOCKID)).map(|e| e.attr.clockid);
        let tracing = match self.formats.as_slice() {
            [] => None,
            formats => crate::events::tracefs::Tracefs::find()
                .ok()
                .and_then(|t| tracing::tracing_data(t.root(), formats).ok()),
        };
        let facts = features::Facts {
            events: &self.events,
            sample_times: self.times,
            clockid,
            tracing: tracing.as_deref(),
            build_ids: self.build_ids.feature(),
        };
        let feats = features::features(&facts);
        let mut header = FileHeader {
            attrs: Section::default(),
            data: Section { offset: self.data_start, size: self.written },
            features: [0; 4],
        };
        let table_at = self.data_start + self.written;
        let mut at = table_at + 16 * feats.len() as u64;
        let mut table = Vec::new();
        let mut payloads = Vec::new();
        for (f, bytes) in &feats {
            header.set(*f);
            Section { offset: at, size: bytes.len() as u64 }.put(&mut table);
            payloads.extend_from_slice(bytes);
            at += bytes.len() as u64;
        }
        table.extend_from_slice(&payloads);
        // Events taken in (or ids gained) after the head was written:
        // every attr again, after the features (perf finds those right after the data).
        header.attrs = self.head_attrs;
        if self.events.len() > self.head_events || self.ids_grew {
            let (attrs, section) = self.attr_section(table_at + table.len() as u64);
            table.extend_from_slice(&attrs);
            header.attrs = section;
        }
        self.file.write_all_at(&table, table_at).map_err(|source| Error::Write {
            path: self.path.clone(),
            what: "the header features",
            source,
        })?;
        self.file.write_all_at(&header.bytes(), 0).map_err(|source| Error::Write {
            path: self.path.clone(),
            what: "the file header",
            source,
        })?;
        self.file.flush().map_err(|source| Error::Write {
            path: self.path.clone(),
            what: "the file",
            source,
        })?;
        Ok(())
    }
}

impl Drop for PerfDataWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.finish_file();
        }
    }
}

/// A record's `misc` (its header's bytes 4 and 5; `rec` has a header).
fn misc(rec: &[u8]) -> u16 {
    u16::from_le_bytes([rec[4], rec[5]])
}
