//! Deterministic fuzz-style property tests without external crates: mutate
//! the real fixture texts and hand-built records (byte flips, truncations,
//! insertions, deletions, number swaps) and check that nothing panics and
//! that every decoded slice is a sub-slice of the record.

mod tracepoint_common;

use perfbuf::tracepoint::{DecodeError, Field, FieldKind, Format, Value};
use tracepoint_common::*;

/// SplitMix64: tiny, deterministic, good enough for mutation choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform-ish in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n).unwrap()).unwrap()
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const SNIPPETS: &[&str] = &[
    "field:",
    "field special:",
    ";",
    ":",
    "[",
    "]",
    "[]",
    "[0]",
    "[16]",
    "[N]",
    "\n",
    "\n\n",
    "\t",
    " ",
    "offset:",
    "size:",
    "signed:",
    "signed:1;",
    "__data_loc ",
    "__rel_loc ",
    "__data_loc char[] ",
    "char",
    "unsigned ",
    "*",
    "const ",
    "0",
    "1",
    "4",
    "8",
    "65535",
    "4294967295",
    "18446744073709551615",
    "99999999999999999999999",
    "print fmt:",
    "format:\n",
    "name: ",
    "ID: ",
    "\r",
    "é",
    "\u{1F980}",
    "\0",
    "cpumask_t",
    "-1",
    "+2",
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "7",
    "8",
    "9",
    "16",
    "20",
    "31",
    "64",
    "255",
    "4095",
    "65535",
    "65536",
    "4294967295",
    "18446744073709551615",
    "18446744073709551616",
];

fn mutate_text(rng: &mut Rng, text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let len = bytes.len();
        match rng.below(8) {
            // Flip / replace one byte.
            0 if len > 0 => {
                let i = rng.below(len);
                bytes[i] = if rng.chance(2) {
                    bytes[i] ^ (1 << rng.below(8))
                } else {
                    *rng.pick(b"0123456789;:[]*\t\n _abcfz")
                };
            }
            // Truncate.
            1 => bytes.truncate(rng.below(len + 1)),
            // Insert a snippet.
            2 | 3 => {
                let i = rng.below(len + 1);
                let s = rng.pick(SNIPPETS).as_bytes();
                bytes.splice(i..i, s.iter().copied());
            }
            // Delete a range.
            4 if len > 0 => {
                let a = rng.below(len);
                let b = (a + 1 + rng.below(16)).min(len);
                bytes.drain(a..b);
            }
            // Replace the number after an `offset:` / `size:` / `signed:` /
            // `ID:` key, which keeps the format parseable but makes the
            // layout hostile.
            5 | 6 => {
                let s = String::from_utf8_lossy(&bytes).into_owned();
                let keys = ["offset:", "size:", "signed:", "ID: "];
                let key = rng.pick(&keys);
                let hits: Vec<usize> = s.match_indices(key).map(|(i, _)| i + key.len()).collect();
                if !hits.is_empty() {
                    let at = *rng.pick(&hits);
                    let end = s[at..].find(|c: char| !c.is_ascii_digit()).map_or(s.len(), |e| at + e);
                    let mut out = s[..at].to_owned();
                    let number = *rng.pick(NUMBERS);
                    out.push_str(number);
                    out.push_str(&s[end..]);
                    bytes = out.into_bytes();
                }
            }
            // Duplicate a line.
            _ => {
                let s = String::from_utf8_lossy(&bytes).into_owned();
                let lines: Vec<&str> = s.split('\n').collect();
                let src = rng.below(lines.len());
                let dst = rng.below(lines.len());
                let mut out: Vec<&str> = lines.clone();
                out.insert(dst, lines[src]);
                bytes = out.join("\n").into_bytes();
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A plausible record for `f`: every fixed field zero-filled except dynamic
/// fields, which point at a string / data blob appended at the end.
fn plausible_record(rng: &mut Rng, f: &Format) -> Vec<u8> {
    let fixed = f.fixed_size().min(4096);
    let mut r = Rec(vec![0; fixed]);
    for (i, b) in r.0.iter_mut().enumerate() {
        *b = u8::try_from(i % 251).unwrap();
    }
    if fixed >= 2 {
        r.u16(0, u16::try_from(f.id() & 0xffff).unwrap());
    }
    for field in f.fields() {
        let end = field.offset().saturating_add(4);
        if end > r.0.len() || field.size() != 4 {
            continue;
        }
        let data: Vec<u8> = (0..rng.below(24)).map(|_| *rng.pick(b"abcxyz/._\0\x01\xff")).collect();
        match field.kind() {
            FieldKind::DataLoc { .. } => {
                r.push_data_loc(field.offset(), &data);
            }
            FieldKind::RelLoc { .. } => {
                r.push_rel_loc(field.offset(), &data);
            }
            _ => {}
        }
    }
    let pad = rng.below(8);
    r.0.extend(std::iter::repeat_n(0, pad));
    r.0
}

fn mutate_record(rng: &mut Rng, raw: &[u8]) -> Vec<u8> {
    let mut v = raw.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        match rng.below(5) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] = u8::try_from(rng.next() & 0xff).unwrap();
            }
            1 => v.truncate(rng.below(len + 1)),
            2 => {
                let i = rng.below(len + 1);
                let n = rng.below(8);
                let ins: Vec<u8> = (0..n).map(|_| u8::try_from(rng.next() & 0xff).unwrap()).collect();
                v.splice(i..i, ins);
            }
            // Overwrite an aligned u32 with a hostile __data_loc word.
            3 if len >= 4 => {
                let i = rng.below(len / 4) * 4;
                let word: u32 = match rng.below(4) {
                    0 => u32::MAX,
                    1 => u32::try_from(rng.next() & 0xffff_ffff).unwrap(),
                    2 => {
                        (u32::try_from(rng.below(64)).unwrap() << 16)
                            | u32::try_from(rng.below(len + 8)).unwrap()
                    }
                    _ => u32::try_from(len).unwrap(),
                };
                v[i..i + 4].copy_from_slice(&word.to_ne_bytes());
            }
            _ => v.truncate(len.saturating_sub(rng.below(8))),
        }
    }
    v
}

/// The property every decode must satisfy.
fn check_field(field: &Field, raw: &[u8]) {
    match field.decode(raw) {
        Ok(Value::Str(s)) => {
            assert!(is_subslice(raw, s), "{} Str escapes record", field.name());
            assert!(!s.contains(&0), "{} Str not NUL-trimmed", field.name());
        }
        Ok(Value::Bytes(b)) => {
            assert!(is_subslice(raw, b), "{} Bytes escape record", field.name());
        }
        Ok(Value::Signed(_) | Value::Unsigned(_)) => {
            assert!(matches!(field.size(), 1 | 2 | 4 | 8));
            assert!(field.offset() + field.size() <= raw.len());
        }
        Err(DecodeError::FieldOutOfBounds { offset, size, raw_len }) => {
            assert_eq!(raw_len, raw.len());
            assert!(offset.checked_add(size).is_none_or(|e| e > raw_len));
        }
        Err(DecodeError::DynamicOutOfBounds { start, len, raw_len }) => {
            assert_eq!(raw_len, raw.len());
            assert!(start.checked_add(len).is_none_or(|e| e > raw_len));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

fn check_format(f: &Format, raw: &[u8]) {
    let mut n = 0;
    for (field, (name, _)) in f.fields().iter().zip(f.values(raw)) {
        assert_eq!(field.name(), name);
        check_field(field, raw);
        n += 1;
    }
    assert_eq!(n, f.fields().len());
    for field in f.fields() {
        assert!(field.offset().checked_add(field.size()).is_some());
        let _ = (field.is_string(), field.elem_size(), f.field(field.name()));
    }
}

#[test]
fn mutated_format_texts_never_panic() {
    let mut rng = Rng(0x5eed_0001);
    let mut parsed = 0usize;
    let mut rejected = 0usize;
    for round in 0..6000 {
        let (_, base) = ALL[round % ALL.len()];
        let text = mutate_text(&mut rng, base);
        match Format::parse(&text) {
            Ok(f) => {
                parsed += 1;
                let raw = plausible_record(&mut rng, &f);
                check_format(&f, &raw);
                let bad = mutate_record(&mut rng, &raw);
                check_format(&f, &bad);
                check_format(&f, &[]);
            }
            Err(e) => {
                rejected += 1;
                assert!(e.line() >= 1);
                assert!(e.text().len() <= 120);
                assert!(e.to_string().contains("line"));
            }
        }
    }
    eprintln!("mutated formats: {parsed} parsed, {rejected} rejected");
    // Both outcomes must be well represented, or the mutator is useless.
    assert!(parsed > 1000, "parsed {parsed}");
    assert!(rejected > 1000, "rejected {rejected}");
}

#[test]
fn mutated_records_never_escape_the_payload() {
    let mut rng = Rng(0x5eed_0002);
    let formats: Vec<Format> = ALL.iter().map(|(_, t)| Format::parse(t).unwrap()).collect();
    let mut ok = 0usize;
    let mut err = 0usize;
    for round in 0..30_000 {
        let f = &formats[round % formats.len()];
        let raw = plausible_record(&mut rng, f);
        let raw = if round % 8 == 0 { raw } else { mutate_record(&mut rng, &raw) };
        for field in f.fields() {
            check_field(field, &raw);
            if field.decode(&raw).is_ok() {
                ok += 1;
            } else {
                err += 1;
            }
        }
    }
    eprintln!("mutated records: {ok} fields decoded, {err} rejected");
    assert!(ok > 10_000 && err > 1000, "ok {ok} err {err}");
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Rng(0x5eed_0003);
    for _ in 0..3000 {
        let n = rng.below(200);
        let text: String = (0..n)
            .map(|_| {
                if rng.chance(3) {
                    (*rng.pick(SNIPPETS)).to_owned()
                } else {
                    char::from(u8::try_from(rng.below(128)).unwrap()).to_string()
                }
            })
            .collect();
        let _ = Format::parse(&text);
        let with_header = format!("name: g\nID: 1\nformat:\n{text}\nprint fmt: x\n");
        if let Ok(f) = Format::parse(&with_header) {
            let raw: Vec<u8> = (0..rng.below(64)).map(|_| u8::try_from(rng.next() & 0xff).unwrap()).collect();
            check_format(&f, &raw);
        }
    }
}
