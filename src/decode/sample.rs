//! `PERF_RECORD_SAMPLE`: the fields `sample_type` selects.

use super::cursor::Cursor;
use super::*;
use core::fmt;

/// A view of `u64`s stored in a record (native byte order).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct U64s<'a> {
    pub(super) bytes: &'a [u8],
}

impl<'a> U64s<'a> {
    /// Number of values.
    pub fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    /// True if there are no values.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Value `i`, if in range.
    pub fn get(&self, i: usize) -> Option<u64> {
        let start = i.checked_mul(8)?;
        let chunk = self.bytes.get(start..start.checked_add(8)?)?;
        chunk.try_into().ok().map(u64::from_ne_bytes)
    }

    /// The values in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        let bytes = self.bytes;
        bytes.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
    }

    /// The bytes the values occupy in the record.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl fmt::Debug for U64s<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(|v| format!("{v:#x}"))).finish()
    }
}

/// One counter of a READ value: `value`, `[id]`, `[lost]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadValue {
    /// Counter value.
    pub value: u64,
    /// With `PERF_FORMAT_ID`.
    pub id: Option<u64>,
    /// With `PERF_FORMAT_LOST`.
    pub lost: Option<u64>,
}

/// The counters of a `PERF_FORMAT_GROUP` read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadGroup<'a> {
    words: U64s<'a>,
    has_id: bool,
    has_lost: bool,
}

impl<'a> ReadGroup<'a> {
    /// Words per counter: 1, plus 1 with `PERF_FORMAT_ID`, plus 1 with
    /// `PERF_FORMAT_LOST`.
    pub fn stride(&self) -> usize {
        1 + usize::from(self.has_id) + usize::from(self.has_lost)
    }

    /// Number of counters (`nr`).
    pub fn len(&self) -> usize {
        self.words.len() / self.stride()
    }

    /// True if `nr` is 0.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Counter `i`, if in range.
    pub fn get(&self, i: usize) -> Option<ReadValue> {
        if i >= self.len() {
            return None;
        }
        let base = i * self.stride();
        let value = self.words.get(base)?;
        let id = if self.has_id { Some(self.words.get(base + 1)?) } else { None };
        let lost_at = base + 1 + usize::from(self.has_id);
        let lost = if self.has_lost { Some(self.words.get(lost_at)?) } else { None };
        Some(ReadValue { value, id, lost })
    }

    /// The counters in order.
    pub fn iter(&self) -> impl Iterator<Item = ReadValue> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The raw words: `nr` entries of [`Self::stride`] words.
    pub fn words(&self) -> U64s<'a> {
        self.words
    }
}

/// The values of `PERF_SAMPLE_READ`, without or with `PERF_FORMAT_GROUP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadValues<'a> {
    /// One counter (no `PERF_FORMAT_GROUP`).
    Single(ReadValue),
    /// A group's counters.
    Group(ReadGroup<'a>),
}

/// `PERF_SAMPLE_READ`: the event's `struct read_format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read<'a> {
    /// With `PERF_FORMAT_TOTAL_TIME_ENABLED`.
    pub time_enabled: Option<u64>,
    /// With `PERF_FORMAT_TOTAL_TIME_RUNNING`.
    pub time_running: Option<u64>,
    /// The counter(s).
    pub values: ReadValues<'a>,
}

/// One entry of a branch stack (`struct perf_branch_entry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BranchEntry {
    /// Source address.
    pub from: u64,
    /// Target address.
    pub to: u64,
    /// The flag bit-field (mispred, predicted, in_tx, abort, cycles, type, ...).
    pub flags: u64,
}

/// `PERF_SAMPLE_BRANCH_STACK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchStack<'a> {
    /// With `PERF_SAMPLE_BRANCH_HW_INDEX` (absent when the kernel had no
    /// stack to write and wrote only `nr = 0`).
    pub hw_idx: Option<u64>,
    /// The entries, three words each (from, to, flags).
    pub entries: U64s<'a>,
    /// With `PERF_SAMPLE_BRANCH_COUNTERS`: one word per entry.
    pub counters: Option<U64s<'a>>,
}

impl BranchStack<'_> {
    /// Number of entries (`nr`).
    pub fn len(&self) -> usize {
        self.entries.len() / 3
    }

    /// True if `nr` is 0.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry `i`, if in range.
    pub fn get(&self, i: usize) -> Option<BranchEntry> {
        let base = i.checked_mul(3)?;
        Some(BranchEntry {
            from: self.entries.get(base)?,
            to: self.entries.get(base + 1)?,
            flags: self.entries.get(base + 2)?,
        })
    }
}

/// `PERF_SAMPLE_REGS_USER` / `PERF_SAMPLE_REGS_INTR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs<'a> {
    /// `enum perf_sample_regs_abi`; with `PERF_SAMPLE_REGS_ABI_NONE` no
    /// registers follow.
    pub abi: u64,
    /// The attr's register mask.
    pub mask: u64,
    /// One value per bit of `mask`, lowest bit first (empty for ABI_NONE).
    pub values: U64s<'a>,
}

impl Regs<'_> {
    /// The value of register `reg` (its bit number in the mask), if dumped.
    pub fn get(&self, reg: u32) -> Option<u64> {
        if reg >= 64 || self.mask & (1 << reg) == 0 {
            return None;
        }
        let below = self.mask & ((1u64 << reg) - 1);
        self.values.get(below.count_ones() as usize)
    }
}

/// `PERF_SAMPLE_STACK_USER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackUser<'a> {
    /// The dump, `size` bytes (0 when the task had no user stack).
    pub data: &'a [u8],
    /// Bytes of `data` actually copied; present when `size` is not 0.
    pub dyn_size: Option<u64>,
}

impl<'a> StackUser<'a> {
    /// The valid part of the dump (`dyn_size` bytes).
    pub fn valid(&self) -> &'a [u8] {
        let n = self.dyn_size.map_or(0, |d| usize::try_from(d).unwrap_or(usize::MAX));
        &self.data[..n.min(self.data.len())]
    }
}

/// `PERF_SAMPLE_WEIGHT_STRUCT`'s view of the weight word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeightStruct {
    /// `var1_dw`: the low 32 bits.
    pub var1_dw: u32,
    /// `var2_w`: bits 32..48.
    pub var2_w: u16,
    /// `var3_w`: bits 48..64.
    pub var3_w: u16,
}

/// Splits a weight word as `union perf_sample_weight` does. The kernel
/// orders the struct by endianness so that the split is the same numeric
/// split on both.
pub fn weight_struct(full: u64) -> WeightStruct {
    WeightStruct { var1_dw: full as u32, var2_w: (full >> 32) as u16, var3_w: (full >> 48) as u16 }
}

/// A decoded `PERF_RECORD_SAMPLE`. On success every field selected by
/// `sample_type` is `Some` and every other one `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample<'a> {
    /// The attr's `sample_type`: the fields present.
    pub sample_type: u64,
    /// `PERF_SAMPLE_IDENTIFIER`.
    pub identifier: Option<u64>,
    /// `PERF_SAMPLE_IP`.
    pub ip: Option<u64>,
    /// `PERF_SAMPLE_TID`.
    pub tid: Option<PidTid>,
    /// `PERF_SAMPLE_TIME`.
    pub time: Option<u64>,
    /// `PERF_SAMPLE_ADDR`.
    pub addr: Option<u64>,
    /// `PERF_SAMPLE_ID`.
    pub id: Option<u64>,
    /// `PERF_SAMPLE_STREAM_ID`.
    pub stream_id: Option<u64>,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: Option<CpuRes>,
    /// `PERF_SAMPLE_PERIOD`.
    pub period: Option<u64>,
    /// `PERF_SAMPLE_READ`.
    pub read: Option<Read<'a>>,
    /// `PERF_SAMPLE_CALLCHAIN`: the `nr` instruction pointers (with the
    /// kernel's `PERF_CONTEXT_*` markers).
    pub callchain: Option<U64s<'a>>,
    /// `PERF_SAMPLE_RAW`: the data, `size` bytes as the kernel padded them.
    pub raw: Option<&'a [u8]>,
    /// `PERF_SAMPLE_BRANCH_STACK`.
    pub branch_stack: Option<BranchStack<'a>>,
    /// `PERF_SAMPLE_REGS_USER`.
    pub regs_user: Option<Regs<'a>>,
    /// `PERF_SAMPLE_STACK_USER`.
    pub stack_user: Option<StackUser<'a>>,
    /// `PERF_SAMPLE_WEIGHT` or `PERF_SAMPLE_WEIGHT_STRUCT` (see
    /// [`weight_struct`]).
    pub weight: Option<u64>,
    /// `PERF_SAMPLE_DATA_SRC`.
    pub data_src: Option<u64>,
    /// `PERF_SAMPLE_TRANSACTION`.
    pub transaction: Option<u64>,
    /// `PERF_SAMPLE_REGS_INTR`.
    pub regs_intr: Option<Regs<'a>>,
    /// `PERF_SAMPLE_PHYS_ADDR`.
    pub phys_addr: Option<u64>,
    /// `PERF_SAMPLE_CGROUP`.
    pub cgroup: Option<u64>,
    /// `PERF_SAMPLE_DATA_PAGE_SIZE`.
    pub data_page_size: Option<u64>,
    /// `PERF_SAMPLE_CODE_PAGE_SIZE`.
    pub code_page_size: Option<u64>,
    /// `PERF_SAMPLE_AUX`: the data, `size` bytes.
    pub aux: Option<&'a [u8]>,
}

impl Sample<'_> {
    /// The `PERF_SAMPLE_*` bits of the fields that are `Some` (the weight
    /// stands for whichever of `WEIGHT` and `WEIGHT_STRUCT` `sample_type`
    /// has): equal to `sample_type` for every sample `decode` returns.
    pub fn present(&self) -> u64 {
        let weight = self.sample_type & (PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT);
        [
            (PERF_SAMPLE_IDENTIFIER, self.identifier.is_some()),
            (PERF_SAMPLE_IP, self.ip.is_some()),
            (PERF_SAMPLE_TID, self.tid.is_some()),
            (PERF_SAMPLE_TIME, self.time.is_some()),
            (PERF_SAMPLE_ADDR, self.addr.is_some()),
            (PERF_SAMPLE_ID, self.id.is_some()),
            (PERF_SAMPLE_STREAM_ID, self.stream_id.is_some()),
            (PERF_SAMPLE_CPU, self.cpu.is_some()),
            (PERF_SAMPLE_PERIOD, self.period.is_some()),
            (PERF_SAMPLE_READ, self.read.is_some()),
            (PERF_SAMPLE_CALLCHAIN, self.callchain.is_some()),
            (PERF_SAMPLE_RAW, self.raw.is_some()),
            (PERF_SAMPLE_BRANCH_STACK, self.branch_stack.is_some()),
            (PERF_SAMPLE_REGS_USER, self.regs_user.is_some()),
            (PERF_SAMPLE_STACK_USER, self.stack_user.is_some()),
            (weight, self.weight.is_some()),
            (PERF_SAMPLE_DATA_SRC, self.data_src.is_some()),
            (PERF_SAMPLE_TRANSACTION, self.transaction.is_some()),
            (PERF_SAMPLE_REGS_INTR, self.regs_intr.is_some()),
            (PERF_SAMPLE_PHYS_ADDR, self.phys_addr.is_some()),
            (PERF_SAMPLE_CGROUP, self.cgroup.is_some()),
            (PERF_SAMPLE_DATA_PAGE_SIZE, self.data_page_size.is_some()),
            (PERF_SAMPLE_CODE_PAGE_SIZE, self.code_page_size.is_some()),
            (PERF_SAMPLE_AUX, self.aux.is_some()),
        ]
        .iter()
        .filter(|&&(_, some)| some)
        .fold(0, |bits, &(bit, _)| bits | bit)
    }
}

/// How to read an empty branch stack with `PERF_SAMPLE_BRANCH_HW_INDEX`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum EmptyBranch {
    /// `nr = 0, hw_idx` (a PMU stack with no entries).
    WithHwIdx,
    /// `nr = 0` alone (the kernel had no stack to write).
    Bare,
}

pub(super) fn decode_sample<'a>(rec: &'a [u8], attr: &DecodeAttr) -> Result<Sample<'a>, DecodeError> {
    let unknown_sample = attr.sample_type & !KNOWN_SAMPLE_TYPE;
    let unknown_read =
        if attr.sample_type & PERF_SAMPLE_READ != 0 { attr.read_format & !KNOWN_READ_FORMAT } else { 0 };
    if unknown_sample != 0 || unknown_read != 0 {
        return Err(DecodeError::UnsupportedLayout {
            sample_type: unknown_sample,
            read_format: unknown_read,
        });
    }
    let first = sample_fields(rec, attr, EmptyBranch::WithHwIdx);
    let ambiguous = attr.sample_type & PERF_SAMPLE_BRANCH_STACK != 0
        && attr.branch_sample_type & PERF_SAMPLE_BRANCH_HW_INDEX != 0;
    match first {
        Err(e) if ambiguous => sample_fields(rec, attr, EmptyBranch::Bare).map_err(|_| e),
        other => other,
    }
}

fn sample_fields<'a>(rec: &'a [u8], a: &DecodeAttr, empty: EmptyBranch) -> Result<Sample<'a>, DecodeError> {
    let t = a.sample_type;
    let has = |bit: u64| t & bit != 0;
    let mut c = Cursor::new(rec);
    let mut s = Sample { sample_type: t, ..Sample::default() };
    s.identifier = c.u64_if(has(PERF_SAMPLE_IDENTIFIER), Field::Identifier)?;
    s.ip = c.u64_if(has(PERF_SAMPLE_IP), Field::Ip)?;
    s.tid = c.tid_if(has(PERF_SAMPLE_TID))?;
    s.time = c.u64_if(has(PERF_SAMPLE_TIME), Field::Time)?;
    s.addr = c.u64_if(has(PERF_SAMPLE_ADDR), Field::Addr)?;
    s.id = c.u64_if(has(PERF_SAMPLE_ID), Field::Id)?;
    s.stream_id = c.u64_if(has(PERF_SAMPLE_STREAM_ID), Field::StreamId)?;
    s.cpu = c.cpu_if(has(PERF_SAMPLE_CPU))?;
    s.period = c.u64_if(has(PERF_SAMPLE_PERIOD), Field::Period)?;
    if has(PERF_SAMPLE_READ) {
        s.read = Some(c.read(a.read_format)?);
    }
    if has(PERF_SAMPLE_CALLCHAIN) {
        let nr = c.u64(Field::CallchainNr)?;
        s.callchain = Some(c.u64_array(nr, Field::Callchain)?);
    }
    if has(PERF_SAMPLE_RAW) {
        let size = c.u32(Field::RawSize)?;
        s.raw = Some(c.bytes(u64::from(size), Field::RawData)?);
    }
    if has(PERF_SAMPLE_BRANCH_STACK) {
        s.branch_stack = Some(c.branch_stack(a.branch_sample_type, empty)?);
    }
    if has(PERF_SAMPLE_REGS_USER) {
        s.regs_user = Some(c.regs(a.sample_regs_user, Field::RegsUserAbi, Field::RegsUser)?);
    }
    if has(PERF_SAMPLE_STACK_USER) {
        s.stack_user = Some(c.stack_user()?);
    }
    s.weight = c.u64_if(has(PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT), Field::Weight)?;
    s.data_src = c.u64_if(has(PERF_SAMPLE_DATA_SRC), Field::DataSrc)?;
    s.transaction = c.u64_if(has(PERF_SAMPLE_TRANSACTION), Field::Transaction)?;
    if has(PERF_SAMPLE_REGS_INTR) {
        s.regs_intr = Some(c.regs(a.sample_regs_intr, Field::RegsIntrAbi, Field::RegsIntr)?);
    }
    s.phys_addr = c.u64_if(has(PERF_SAMPLE_PHYS_ADDR), Field::PhysAddr)?;
    s.cgroup = c.u64_if(has(PERF_SAMPLE_CGROUP), Field::Cgroup)?;
    s.data_page_size = c.u64_if(has(PERF_SAMPLE_DATA_PAGE_SIZE), Field::DataPageSize)?;
    s.code_page_size = c.u64_if(has(PERF_SAMPLE_CODE_PAGE_SIZE), Field::CodePageSize)?;
    if has(PERF_SAMPLE_AUX) {
        let size = c.u64(Field::AuxSize)?;
        s.aux = Some(c.bytes(size, Field::AuxData)?);
    }
    c.end()?;
    Ok(s)
}

impl<'a> Cursor<'a> {
    fn read(&mut self, format: u64) -> Result<Read<'a>, DecodeError> {
        let has = |bit: u64| format & bit != 0;
        if has(PERF_FORMAT_GROUP) {
            let nr = self.u64(Field::ReadNr)?;
            let time_enabled = self.u64_if(has(PERF_FORMAT_TOTAL_TIME_ENABLED), Field::ReadTimeEnabled)?;
            let time_running = self.u64_if(has(PERF_FORMAT_TOTAL_TIME_RUNNING), Field::ReadTimeRunning)?;
            let (has_id, has_lost) = (has(PERF_FORMAT_ID), has(PERF_FORMAT_LOST));
            let stride = 1 + u64::from(has_id) + u64::from(has_lost);
            let count =
                nr.checked_mul(stride).ok_or(DecodeError::Overflow { field: Field::ReadGroup, count: nr })?;
            let words = self.u64_array(count, Field::ReadGroup)?;
            let values = ReadValues::Group(ReadGroup { words, has_id, has_lost });
            Ok(Read { time_enabled, time_running, values })
        } else {
            let value = self.u64(Field::ReadValue)?;
            let time_enabled = self.u64_if(has(PERF_FORMAT_TOTAL_TIME_ENABLED), Field::ReadTimeEnabled)?;
            let time_running = self.u64_if(has(PERF_FORMAT_TOTAL_TIME_RUNNING), Field::ReadTimeRunning)?;
            let id = self.u64_if(has(PERF_FORMAT_ID), Field::ReadId)?;
            let lost = self.u64_if(has(PERF_FORMAT_LOST), Field::ReadLost)?;
            Ok(Read { time_enabled, time_running, values: ReadValues::Single(ReadValue { value, id, lost }) })
        }
    }

    fn branch_stack(&mut self, branch_type: u64, empty: EmptyBranch) -> Result<BranchStack<'a>, DecodeError> {
        let nr = self.u64(Field::BranchNr)?;
        let hw_index = branch_type & PERF_SAMPLE_BRANCH_HW_INDEX != 0;
        let hw_idx =
            self.u64_if(hw_index && (nr != 0 || empty == EmptyBranch::WithHwIdx), Field::BranchHwIdx)?;
        let words =
            nr.checked_mul(3).ok_or(DecodeError::Overflow { field: Field::BranchEntries, count: nr })?;
        let entries = self.u64_array(words, Field::BranchEntries)?;
        let counters = if branch_type & PERF_SAMPLE_BRANCH_COUNTERS != 0 {
            Some(self.u64_array(nr, Field::BranchCounters)?)
        } else {
            None
        };
        Ok(BranchStack { hw_idx, entries, counters })
    }

    fn regs(&mut self, mask: u64, abi_field: Field, regs_field: Field) -> Result<Regs<'a>, DecodeError> {
        let abi = self.u64(abi_field)?;
        let count = if abi == PERF_SAMPLE_REGS_ABI_NONE { 0 } else { u64::from(mask.count_ones()) };
        Ok(Regs { abi, mask, values: self.u64_array(count, regs_field)? })
    }

    fn stack_user(&mut self) -> Result<StackUser<'a>, DecodeError> {
        let size = self.u64(Field::StackUserSize)?;
        let data = self.bytes(size, Field::StackUserData)?;
        let dyn_size = self.u64_if(size != 0, Field::StackUserDynSize)?;
        if let Some(d) = dyn_size.filter(|&d| d > size) {
            return Err(DecodeError::Inconsistent { field: Field::StackUserDynSize, value: d, limit: size });
        }
        Ok(StackUser { data, dyn_size })
    }
}
