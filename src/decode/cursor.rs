//! The bounds-checked reader every record kind is decoded with.

use super::{
    CpuRes, PERF_SAMPLE_CPU, PERF_SAMPLE_ID, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID,
    PERF_SAMPLE_TIME, PidTid,
};
use super::{DecodeAttr, DecodeError, Field, HEADER_SIZE, SAMPLE_ID_BITS, SampleId, U64s};

/// A bounds-checked reader over one record's `header.size` bytes, starting
/// after the header.
pub(super) struct Cursor<'a> {
    rec: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(rec: &'a [u8]) -> Self {
        Cursor { rec, pos: HEADER_SIZE }
    }

    pub(super) fn take(&mut self, n: u64, field: Field) -> Result<&'a [u8], DecodeError> {
        let truncated = DecodeError::Truncated { field, offset: self.pos };
        let n = usize::try_from(n).map_err(|_| truncated)?;
        let end = self.pos.checked_add(n).ok_or(truncated)?;
        let bytes = self.rec.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    pub(super) fn array<const N: usize>(&mut self, field: Field) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N as u64, field)?;
        bytes.try_into().map_err(|_| DecodeError::Truncated { field, offset: self.pos - N })
    }

    pub(super) fn u64(&mut self, field: Field) -> Result<u64, DecodeError> {
        self.array::<8>(field).map(u64::from_ne_bytes)
    }

    pub(super) fn u32(&mut self, field: Field) -> Result<u32, DecodeError> {
        self.array::<4>(field).map(u32::from_ne_bytes)
    }

    pub(super) fn u32_pair(&mut self, field: Field) -> Result<(u32, u32), DecodeError> {
        let b = self.array::<8>(field)?;
        Ok((u32::from_ne_bytes([b[0], b[1], b[2], b[3]]), u32::from_ne_bytes([b[4], b[5], b[6], b[7]])))
    }

    pub(super) fn u64_if(&mut self, present: bool, field: Field) -> Result<Option<u64>, DecodeError> {
        if present { self.u64(field).map(Some) } else { Ok(None) }
    }

    pub(super) fn tid_if(&mut self, present: bool) -> Result<Option<PidTid>, DecodeError> {
        if !present {
            return Ok(None);
        }
        let (pid, tid) = self.u32_pair(Field::Tid)?;
        Ok(Some(PidTid { pid, tid }))
    }

    pub(super) fn cpu_if(&mut self, present: bool) -> Result<Option<CpuRes>, DecodeError> {
        if !present {
            return Ok(None);
        }
        let (cpu, res) = self.u32_pair(Field::Cpu)?;
        Ok(Some(CpuRes { cpu, res }))
    }

    /// `count` bytes of opaque data.
    pub(super) fn bytes(&mut self, count: u64, field: Field) -> Result<&'a [u8], DecodeError> {
        self.take(count, field)
    }

    /// `count` words, which must start 8-byte aligned in the record.
    pub(super) fn u64_array(&mut self, count: u64, field: Field) -> Result<U64s<'a>, DecodeError> {
        let len = count.checked_mul(8).ok_or(DecodeError::Overflow { field, count })?;
        if self.pos % 8 != 0 {
            return Err(DecodeError::Misaligned { field, offset: self.pos });
        }
        Ok(U64s { bytes: self.take(len, field)? })
    }

    /// Where the next field starts.
    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    /// A NUL-terminated name padded up to the `sample_id` trailer (which
    /// ends the record): the bytes before its NUL.
    pub(super) fn name(&mut self, a: &DecodeAttr) -> Result<&'a [u8], DecodeError> {
        let trailer =
            if a.sample_id_all { 8 * (a.sample_type & SAMPLE_ID_BITS).count_ones() as usize } else { 0 };
        let truncated = DecodeError::Truncated { field: Field::Name, offset: self.pos };
        let end = self.rec.len().checked_sub(trailer).filter(|&e| e >= self.pos).ok_or(truncated)?;
        let area = self.rec.get(self.pos..end).ok_or(truncated)?;
        let nul = area.iter().position(|&b| b == 0).ok_or(truncated)?;
        self.pos = end;
        Ok(&area[..nul])
    }

    /// The `sample_id` trailer (if the attr has `sample_id_all`), which must
    /// end the record.
    pub(super) fn sample_id_end(&mut self, a: &DecodeAttr) -> Result<SampleId, DecodeError> {
        let mut id = SampleId::default();
        if a.sample_id_all {
            let has = |bit: u64| a.sample_type & bit != 0;
            id.present = a.sample_type & SAMPLE_ID_BITS;
            id.tid = self.tid_if(has(PERF_SAMPLE_TID))?;
            id.time = self.u64_if(has(PERF_SAMPLE_TIME), Field::Time)?;
            id.id = self.u64_if(has(PERF_SAMPLE_ID), Field::Id)?;
            id.stream_id = self.u64_if(has(PERF_SAMPLE_STREAM_ID), Field::StreamId)?;
            id.cpu = self.cpu_if(has(PERF_SAMPLE_CPU))?;
            id.identifier = self.u64_if(has(PERF_SAMPLE_IDENTIFIER), Field::Identifier)?;
        }
        self.end()?;
        Ok(id)
    }

    pub(super) fn end(&self) -> Result<(), DecodeError> {
        if self.pos == self.rec.len() {
            Ok(())
        } else {
            Err(DecodeError::Trailing { used: self.pos, size: self.rec.len() })
        }
    }
}
