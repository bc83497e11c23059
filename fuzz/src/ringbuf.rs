//! The BPF ring buffer target: a ring in one heap allocation laid out like
//! the kernel's (consumer word, producer word, the data area twice), with
//! positions and data from the input, read by the record walk. Its output
//! is compared with a model of the README's contract computed over a copy
//! of the data with safe, wrapping reads: committed records are handed out
//! whole and in order, discarded ones stepped over, a busy one ends the
//! walk, a consumer that is misaligned, behind or more than a ring from the
//! producer (or a misaligned producer) or a record longer than what was
//! published makes the walk jump to the producer and count it; the limit
//! and a callback's stop end the walk where libbpf's would. A read outside
//! the allocation is caught by AddressSanitizer's redzone.
//!
//! Input layout (integers little endian), [`PREFIX`] bytes, then the data:
//!
//! | bytes | meaning |
//! |---|---|
//! | 0 | bits 0-2: data size = 64 << n; bit 3: producer from bytes 16..24 (else consumer + delta) |
//! | 1..3 | delta |
//! | 3 | limit (255: none) |
//! | 4 | the callback stops the walk at its k-th call (0: never) |
//! | 5 | the value it stops with (as `i8`) |
//! | 6..8 | unused |
//! | 8..16 | consumer position |
//! | 16..24 | raw producer position |
//! | 24.. | bytes written into the data area from the consumer position, wrapping (one ring at most) |

use core::ops::ControlFlow;
use core::sync::atomic::Ordering;
use perfbuf::internals::ringbuf::{BUSY_BIT, DISCARD_BIT, RingMemory, Stats};

/// Bytes of an input before the data.
pub const PREFIX: usize = 24;

/// One ring buffer input.
#[derive(Clone, Copy, Debug)]
pub struct RingbufInput<'a> {
    /// Data size in bytes.
    pub size: u64,
    /// Consumer position.
    pub consumer: u64,
    /// Producer position.
    pub producer: u64,
    /// Records handed out before the walk ends.
    pub limit: u64,
    /// The callback stops the walk at this call (0: never).
    pub stop_at: u8,
    /// The value it stops with.
    pub stop_value: i8,
    /// Data-area bytes.
    pub data: &'a [u8],
}

impl<'a> RingbufInput<'a> {
    /// Parses an input; `None` if it is shorter than [`PREFIX`].
    pub fn parse(input: &'a [u8]) -> Option<Self> {
        let p: &[u8; PREFIX] = input.get(..PREFIX)?.try_into().ok()?;
        let word = |at: usize| u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"));
        let consumer = word(8);
        let delta = u16::from_le_bytes([p[1], p[2]]) as u64;
        Some(RingbufInput {
            size: 64 << (p[0] & 7),
            consumer,
            producer: if p[0] & 8 != 0 { word(16) } else { consumer.wrapping_add(delta) },
            limit: if p[3] == 255 { u64::MAX } else { p[3] as u64 },
            stop_at: p[4],
            stop_value: p[5] as i8,
            data: &input[PREFIX..],
        })
    }
}

/// What a walk did: the records handed out, how it ended, where the
/// consumer is, and the counters.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    records: Vec<Vec<u8>>,
    flow: ControlFlow<i32, u64>,
    consumer: u64,
    stats: Stats,
}

/// The contract, over a plain copy of the data area.
fn model(input: &RingbufInput<'_>, data: &[u8]) -> Outcome {
    let (size, mask) = (input.size, input.size - 1);
    let read = |pos: u64, n: u64| -> Vec<u8> { (0..n).map(|i| data[((pos + i) & mask) as usize]).collect() };
    let (mut cons, prod) = (input.consumer, input.producer);
    let mut out = Outcome {
        records: Vec::new(),
        flow: ControlFlow::Continue(0),
        consumer: cons,
        stats: Stats::default(),
    };
    let mut calls = 0u8;
    let avail = prod.wrapping_sub(cons);
    let resync = |out: &mut Outcome, skipped: u64| {
        out.stats.resyncs += 1;
        out.stats.skipped_bytes += skipped.min(size);
        out.consumer = prod;
    };
    if avail == 0 {
        return out;
    }
    if cons % 8 != 0 || prod % 8 != 0 || avail > size {
        resync(&mut out, avail);
        return out;
    }
    let mut delivered = 0u64;
    while cons != prod {
        let len = u32::from_ne_bytes(read(cons & mask, 4).try_into().expect("4 bytes"));
        if len & BUSY_BIT != 0 {
            break;
        }
        let body = (len & !(BUSY_BIT | DISCARD_BIT)) as u64;
        let total = (body + 8 + 7) & !7;
        let left = prod.wrapping_sub(cons);
        if total > left {
            resync(&mut out, left);
            out.flow = ControlFlow::Continue(delivered);
            return out;
        }
        let next = cons.wrapping_add(total);
        if len & DISCARD_BIT == 0 {
            out.records.push(read((cons & mask) + 8, body));
            out.stats.records += 1;
            out.stats.bytes += total;
            calls = calls.wrapping_add(1);
            if calls == input.stop_at {
                out.consumer = next;
                out.flow = ControlFlow::Break(input.stop_value as i32);
                return out;
            }
            delivered += 1;
        } else {
            out.stats.discarded += 1;
        }
        cons = next;
        if delivered >= input.limit {
            break;
        }
    }
    out.consumer = cons;
    out.flow = ControlFlow::Continue(delivered);
    out
}

/// Runs the walk on the input and checks it against [`model`].
pub fn run(input: &[u8]) {
    let Some(input) = RingbufInput::parse(input) else { return };
    let ring = RingMemory::heap(input.size);
    let data = &input.data[..input.data.len().min(input.size as usize)];
    ring.write_data(input.consumer, data);
    // The model reads the data area as written.
    let mut copy = vec![0u8; input.size as usize];
    for (i, &b) in data.iter().enumerate() {
        copy[(input.consumer.wrapping_add(i as u64) & (input.size - 1)) as usize] = b;
    }
    ring.consumer().store(input.consumer, Ordering::Relaxed);
    ring.store_producer(input.producer);

    let mut got =
        Outcome { records: Vec::new(), flow: ControlFlow::Continue(0), consumer: 0, stats: Stats::default() };
    let mut calls = 0u8;
    got.flow = ring.walk(input.limit, &mut got.stats, |rec| {
        got.records.push(rec.to_vec());
        calls = calls.wrapping_add(1);
        if calls == input.stop_at {
            ControlFlow::Break(input.stop_value as i32)
        } else {
            ControlFlow::Continue(())
        }
    });
    got.consumer = ring.consumer().load(Ordering::Relaxed);
    assert_eq!(got, model(&input, &copy), "walk and model disagree on {input:?}");

    // A second walk on the same ring resumes where the first ended and
    // never reads anything twice or past the producer.
    let before = got.consumer;
    let mut stats = Stats::default();
    let mut again = 0u64;
    let _ = ring.walk(u64::MAX, &mut stats, |_| {
        again += 1;
        ControlFlow::Continue(())
    });
    let after = ring.consumer().load(Ordering::Relaxed);
    assert!(stats.resyncs <= 1 && stats.skipped_bytes <= input.size);
    if stats.resyncs == 0 {
        assert!(after.wrapping_sub(before) <= input.producer.wrapping_sub(before), "read past the producer");
    }
}
