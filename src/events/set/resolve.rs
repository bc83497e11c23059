//! What an event is, before it is opened: its attr (the kind's own
//! fields, then what the set gives every event), its name, its tracepoint
//! format, and a probe defined in tracefs for a probe with arguments.

use super::{EventKind, EventSet, counted_losses};
use crate::error::{Error, Result};
use crate::events::desc::{Event, Group, Kind, Sampling, Target, UprobeAt};
use crate::events::elf;
use crate::events::format::Format;
use crate::events::pmu::{DynamicPmu, EVENT_SOURCES, ProbePmu};
use crate::events::probe_events::{self, Definition, ProbeEvent, ProbeType};
use crate::events::tracefs::Tracefs;
use crate::kernel::{self, PerfEventAttr};
use crate::log;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

/// The caller's `read_format` bits a raw attr keeps (the counts reader
/// understands them).
const READ_FORMATS_KEPT: u64 = kernel::PERF_FORMAT_GROUP | kernel::PERF_FORMAT_LOST;

/// The flags a set's default attr gives its events: `inherit`,
/// `exclude_user`, `_kernel`, `_hv`, `_idle`, `_host`, `_guest`,
/// `_callchain_kernel`, `_callchain_user`.
const DEFAULT_ATTR_FLAGS: u64 = kernel::ATTR_FLAG_INHERIT | 0b1111 << 4 | 0b1111 << 19;

/// An event's attr before the set's common fields.
pub(super) struct Resolved<'e> {
    pub(super) attr: PerfEventAttr,
    pub(super) kind: EventKind,
    pub(super) name: String,
    pub(super) format: Option<Arc<Format>>,
    pub(super) fallback: Option<u64>,
    /// A probe with arguments, defined in tracefs.
    pub(super) probe: Option<ProbeEvent>,
    /// A probe PMU's symbol or path, which `attr.config1` points to.
    pub(super) target_name: Option<CString>,
    #[allow(dead_code, reason = "a kprobe's attr points into the event's symbol")]
    pub(super) _event: core::marker::PhantomData<&'e Event>,
}

fn typed(type_: u32, config: u64) -> PerfEventAttr {
    PerfEventAttr { type_, config, ..PerfEventAttr::default() }
}

impl<'e> Resolved<'e> {
    /// An event of `kind` with nothing beyond its attr and name.
    fn of(attr: PerfEventAttr, kind: EventKind, name: String) -> Self {
        Resolved {
            attr,
            kind,
            name,
            format: None,
            fallback: None,
            probe: None,
            target_name: None,
            _event: core::marker::PhantomData,
        }
    }
}

impl EventSet {
    /// The attr for `event` (before the per-CPU opens), and what else
    /// opening it needs: the kind's own fields first, then the set's.
    pub(super) fn resolve<'e>(&mut self, event: &'e Event) -> Result<Resolved<'e>> {
        if event.args.is_some() && !matches!(event.kind, Kind::Kprobe { .. } | Kind::Uprobe { .. }) {
            return Err(log::invalid("only kprobes and uprobes take arguments"));
        }
        let mut resolved = match &event.kind {
            Kind::Software(config) => Resolved::of(
                typed(kernel::PERF_TYPE_SOFTWARE, *config),
                EventKind::Software,
                format!("software event {config:#x}"),
            ),
            Kind::Hardware { config, fallback } => Resolved {
                fallback: *fallback,
                ..Resolved::of(
                    typed(kernel::PERF_TYPE_HARDWARE, *config),
                    EventKind::Hardware,
                    format!("hardware event {config:#x}"),
                )
            },
            Kind::Tracepoint(name) => self.tracepoint(name)?,
            Kind::Kprobe { symbol, offset, retprobe } => self.kprobe(event, symbol, *offset, *retprobe)?,
            Kind::Uprobe { path, at, offset, retprobe, ref_ctr_offset } => {
                self.uprobe(event, path, at, *offset, *retprobe, *ref_ctr_offset)?
            }
            Kind::Raw(attr) => Resolved::of(
                *attr,
                EventKind::Raw,
                format!("raw event type {} config {:#x}", attr.type_, attr.config),
            ),
        };
        resolved.attr = self.event_attr(resolved.attr, resolved.kind, event);
        Ok(resolved)
    }

    /// A tracepoint: its id and format from tracefs.
    fn tracepoint<'e>(&mut self, name: &str) -> Result<Resolved<'e>> {
        let tracefs = self.tracefs()?;
        let tp = tracefs.tracepoint(name).map_err(log::failed)?;
        log::debug(format_args!("tracepoint {name}: id {} in {}", tp.id, tracefs.root().display()));
        // Its name is `subsystem:name`, as perf and the perf.data writer
        // name it (errors about it still say which it is).
        let attr = typed(kernel::PERF_TYPE_TRACEPOINT, tp.id);
        Ok(Resolved {
            format: Some(tp.format.clone()),
            ..Resolved::of(attr, EventKind::Tracepoint, name.to_owned())
        })
    }

    /// A kprobe: the kprobe PMU's attr, or with arguments a probe defined
    /// in tracefs and opened as its tracepoint.
    fn kprobe<'e>(
        &mut self,
        event: &Event,
        symbol: &CString,
        offset: u64,
        retprobe: bool,
    ) -> Result<Resolved<'e>> {
        let what = format!(
            "{} {}{}",
            if retprobe { "kretprobe" } else { "kprobe" },
            symbol.to_string_lossy(),
            if offset == 0 { String::new() } else { format!("+{offset:#x}") }
        );
        let fail = |e: Error| log::failed(e.about(&what));
        match &event.args {
            Some(args) => {
                let location = match offset {
                    0 => symbol.to_string_lossy().into_owned(),
                    off => format!("{}+{off}", symbol.to_string_lossy()),
                };
                let def = Definition { type_: ProbeType::Kprobe, retprobe, location, args };
                self.probe_event(&def, EventKind::Kprobe, what)
            }
            None => {
                let pmu = DynamicPmu::load(EVENT_SOURCES.as_ref(), ProbePmu::Kprobe).map_err(fail)?;
                let attr = *pmu.attr(symbol, offset, retprobe, 0).map_err(fail)?.attr();
                Ok(Resolved {
                    target_name: Some(symbol.clone()),
                    ..Resolved::of(attr, EventKind::Kprobe, what)
                })
            }
        }
    }

    /// A uprobe: at a symbol's file offset or a given one, as the uprobe
    /// PMU's attr, or with arguments a probe defined in tracefs.
    fn uprobe<'e>(
        &mut self,
        event: &Event,
        path: &Path,
        at: &UprobeAt,
        into: u64,
        retprobe: bool,
        ref_ctr_offset: u64,
    ) -> Result<Resolved<'e>> {
        let what = uprobe_name(path, at, into, retprobe);
        let fail = |e: Error| log::failed(e.about(&what));
        if retprobe && into != 0 {
            return Err(fail(Error::invalid(
                "a uretprobe goes at the function's entry, without an offset (elsewhere the kernel \
                 takes another stack word for the return address and the probed program crashes)",
            )));
        }
        let offset = match at {
            UprobeAt::Symbol(s) => elf::function_file_offset(path, s, into).map_err(fail)?,
            UprobeAt::Offset(o) => {
                o.checked_add(into).ok_or_else(|| fail(Error::invalid("the offset is too large")))?
            }
        };
        match &event.args {
            Some(args) => {
                let location = uprobe_location(path, offset, ref_ctr_offset).map_err(fail)?;
                let def = Definition { type_: ProbeType::Uprobe, retprobe, location, args };
                self.probe_event(&def, EventKind::Uprobe, what)
            }
            None => {
                let c_path = CString::new(path.as_os_str().as_bytes())
                    .map_err(|_| fail(Error::invalid("a path cannot contain NUL")))?;
                let pmu = DynamicPmu::load(EVENT_SOURCES.as_ref(), ProbePmu::Uprobe).map_err(fail)?;
                let attr = *pmu.attr(&c_path, offset, retprobe, ref_ctr_offset).map_err(fail)?.attr();
                Ok(Resolved { target_name: Some(c_path), ..Resolved::of(attr, EventKind::Uprobe, what) })
            }
        }
    }

    /// `base` (the kind's attr) with what the set gives every event: the
    /// shared fields, the event's and the default attr's sample fields,
    /// the counts' read format, the sampling period, inheritance.
    fn event_attr(&self, base: PerfEventAttr, kind: EventKind, event: &Event) -> PerfEventAttr {
        let mut attr = self.common_attr(base);
        attr.sample_type |= event.sample_type;
        // A raw attr keeps the caller's read_format bits (the counts
        // reader follows them); every event gets what counts need.
        let callers_read_format =
            if kind == EventKind::Raw { base.read_format & READ_FORMATS_KEPT } else { 0 };
        attr.read_format = kernel::PERF_FORMAT_TOTAL_TIME_ENABLED
            | kernel::PERF_FORMAT_TOTAL_TIME_RUNNING
            | kernel::PERF_FORMAT_ID
            | callers_read_format
            | counted_losses()
            | if event.group == Group::Leader { kernel::PERF_FORMAT_GROUP } else { 0 };
        let mut sampling = event.sampling;
        if let Some(d) = self.default_attr.filter(|_| kind != EventKind::Raw) {
            attr.sample_type |= d.sample_type;
            attr.flags |= d.flags & DEFAULT_ATTR_FLAGS;
            attr.sample_regs_user |= d.sample_regs_user;
            attr.sample_stack_user = attr.sample_stack_user.max(d.sample_stack_user);
            attr.sample_max_stack = attr.sample_max_stack.max(d.sample_max_stack);
            let counts_only = matches!(event.kind, Kind::Software(_) | Kind::Hardware { .. });
            if counts_only && sampling == Sampling::Count && d.sample_period != 0 {
                sampling = if d.has(kernel::ATTR_FLAG_FREQ) {
                    Sampling::Frequency(d.sample_period)
                } else {
                    Sampling::Period(d.sample_period)
                };
            }
        }
        attr.flags &= !kernel::ATTR_FLAG_FREQ;
        attr.sample_period = match sampling {
            Sampling::Count => 0,
            Sampling::Period(n) => n,
            Sampling::Frequency(hz) => {
                attr.flags |= kernel::ATTR_FLAG_FREQ;
                // The kernel changes the period as it goes: each sample
                // says what it stands for (perf report's event counts, a
                // perf.data file), as `perf record -F` asks.
                attr.sample_type |= kernel::PERF_SAMPLE_PERIOD;
                hz
            }
        };
        if self.inherit && self.targets.iter().any(|t| matches!(t.target, Target::Pid(_))) {
            attr.flags |= kernel::ATTR_FLAG_INHERIT;
        }
        attr
    }

    /// The set's tracefs, found once.
    pub(super) fn tracefs(&mut self) -> Result<&Tracefs> {
        if self.tracefs.is_none() {
            self.tracefs = Some(Tracefs::find().map_err(log::failed)?);
        }
        Ok(self.tracefs.as_ref().unwrap_or_else(|| unreachable!()))
    }

    /// A probe with arguments (`what`, of `kind`): defined in tracefs and
    /// opened as its tracepoint, whose format decodes its samples.
    fn probe_event<'e>(
        &mut self,
        def: &Definition<'_>,
        kind: EventKind,
        what: String,
    ) -> Result<Resolved<'e>> {
        let (attr, (format, probe)) = self.define_probe(def).map_err(|e| log::failed(e.about(&what)))?;
        Ok(Resolved { format: Some(format), probe: Some(probe), ..Resolved::of(attr, kind, what) })
    }

    /// Defines a probe with arguments in the set's group, named after the
    /// event's id to be: its tracepoint attr and format, and the probe.
    fn define_probe(&mut self, def: &Definition<'_>) -> Result<(PerfEventAttr, (Arc<Format>, ProbeEvent))> {
        let group = self.probe_group.get_or_insert_with(probe_events::new_group).clone();
        let event = format!("e{}", self.next_id);
        let tracefs = self.tracefs()?;
        let (probe, tp) = ProbeEvent::create(tracefs, def, &group, &event)?;
        log::debug(format_args!("probe {group}/{event}: tracepoint id {}", tp.id));
        Ok((typed(kernel::PERF_TYPE_TRACEPOINT, tp.id), (tp.format, probe)))
    }
}

/// A uprobe as errors and logs name it: `uprobe PATH:SYMBOL+0x4`,
/// `uretprobe PATH:0x1139`.
fn uprobe_name(path: &std::path::Path, at: &UprobeAt, into: u64, retprobe: bool) -> String {
    let kind = if retprobe { "uretprobe" } else { "uprobe" };
    let place = match at {
        UprobeAt::Symbol(s) => s.clone(),
        UprobeAt::Offset(o) => format!("{o:#x}"),
    };
    match into {
        0 => format!("{kind} {}:{place}", path.display()),
        n => format!("{kind} {}:{place}+{n:#x}", path.display()),
    }
}

/// A uprobe's place for `uprobe_events`: `PATH:0xOFFSET[(0xREF)]`, with
/// the path made absolute (the kernel splits the line at spaces).
fn uprobe_location(path: &std::path::Path, offset: u64, ref_ctr_offset: u64) -> Result<String> {
    let abs =
        std::fs::canonicalize(path).map_err(|e| Error::from_errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    let text = abs.to_str().filter(|t| !t.contains(char::is_whitespace)).ok_or(Error::invalid(
        "a uprobe with arguments needs a path without spaces or non-UTF-8 bytes (uprobe_events splits at spaces)",
    ))?;
    Ok(match ref_ctr_offset {
        0 => format!("{text}:{offset:#x}"),
        r => format!("{text}:{offset:#x}({r:#x})"),
    })
}
