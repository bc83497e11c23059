//! What the writer needs to know of records: where a sample's time is,
//! and the `sample_id` trailer records it synthesizes must end with (perf
//! parses it from the end of every non-sample record when the attrs have
//! `sample_id_all`).

use crate::kernel::{
    ATTR_FLAG_SAMPLE_ID_ALL, PERF_SAMPLE_CPU, PERF_SAMPLE_ID, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP,
    PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PerfEventAttr,
};

/// The byte offset of the time in every sample of these attrs, if they
/// all have one at the same place (the writer then tracks the first and
/// last sample times for `HEADER_SAMPLE_TIME`).
pub(crate) fn sample_time_offset(attrs: &[&PerfEventAttr]) -> Option<usize> {
    let offset_in = |t: u64| {
        if t & PERF_SAMPLE_TIME == 0 {
            return None;
        }
        let before = [PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_TID];
        Some(8 + 8 * before.iter().filter(|&&b| t & b != 0).count())
    };
    let first = offset_in(attrs.first()?.sample_type)?;
    attrs.iter().all(|a| offset_in(a.sample_type) == Some(first)).then_some(first)
}

/// What a synthesized record's trailer says.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SampleId {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
}

/// The `sample_id` trailer perf expects after a non-sample record of
/// `attr` (empty without `sample_id_all`), naming kernel event `id`.
pub(crate) fn put_sample_id(out: &mut Vec<u8>, attr: &PerfEventAttr, id: u64, s: SampleId) {
    if attr.flags & ATTR_FLAG_SAMPLE_ID_ALL == 0 {
        return;
    }
    let t = attr.sample_type;
    let put = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
    if t & PERF_SAMPLE_TID != 0 {
        put(out, u64::from(s.pid) | u64::from(s.tid) << 32);
    }
    if t & PERF_SAMPLE_TIME != 0 {
        put(out, s.time);
    }
    if t & PERF_SAMPLE_ID != 0 {
        put(out, id);
    }
    if t & PERF_SAMPLE_STREAM_ID != 0 {
        put(out, id);
    }
    if t & PERF_SAMPLE_CPU != 0 {
        put(out, u64::from(s.cpu));
    }
    if t & PERF_SAMPLE_IDENTIFIER != 0 {
        put(out, id);
    }
}

/// perf's name for a software or hardware event (what `perf evlist`
/// prints and `perf script` shows), or `None`.
pub(crate) fn perf_name(type_: u32, config: u64) -> Option<&'static str> {
    const SOFTWARE: [&str; 12] = [
        "cpu-clock",
        "task-clock",
        "page-faults",
        "context-switches",
        "cpu-migrations",
        "minor-faults",
        "major-faults",
        "alignment-faults",
        "emulation-faults",
        "dummy",
        "bpf-output",
        "cgroup-switches",
    ];
    const HARDWARE: [&str; 10] = [
        "cycles",
        "instructions",
        "cache-references",
        "cache-misses",
        "branches",
        "branch-misses",
        "bus-cycles",
        "stalled-cycles-frontend",
        "stalled-cycles-backend",
        "ref-cycles",
    ];
    let table: &[&str] = match type_ {
        crate::kernel::PERF_TYPE_SOFTWARE => &SOFTWARE,
        crate::kernel::PERF_TYPE_HARDWARE => &HARDWARE,
        _ => return None,
    };
    table.get(usize::try_from(config).ok()?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sets_samples_have_their_time_at_32() {
        let set = PerfEventAttr {
            sample_type: PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME,
            ..Default::default()
        };
        let raw = PerfEventAttr { sample_type: crate::kernel::PERF_SAMPLE_RAW, ..Default::default() };
        assert_eq!(sample_time_offset(&[&set, &set]), Some(32));
        assert_eq!(sample_time_offset(&[&set, &raw]), None);
        assert_eq!(sample_time_offset(&[]), None);
    }

    #[test]
    fn trailer_follows_sample_type_order() {
        let attr = PerfEventAttr {
            sample_type: PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU,
            flags: ATTR_FLAG_SAMPLE_ID_ALL,
            ..Default::default()
        };
        let mut out = Vec::new();
        put_sample_id(&mut out, &attr, 99, SampleId { pid: 1, tid: 2, time: 3, cpu: 4 });
        let w: Vec<u64> = out.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(w, [1 | 2 << 32, 3, 4, 99]);
        let mut none = Vec::new();
        put_sample_id(&mut none, &PerfEventAttr::default(), 99, SampleId::default());
        assert!(none.is_empty());
    }
}
