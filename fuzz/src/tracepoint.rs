//! The tracepoint target: a tracefs `format` file and a raw record from the
//! input, through `perfbuf::tracepoint` (the parser event sets use on the
//! kernel's files, and the decoder they use on every sample).
//!
//! Checks: parsing never panics and is deterministic; a parsed format's
//! fields have a non-overflowing `offset + size`, can be found by name, and
//! the common fields come first; every field decodes or fails without panicking,
//! and a decoded string or byte slice lies inside the record (a string is
//! cut at its first NUL); `values()` yields one entry per field, in order.
//!
//! Input layout: the format text, a 0 byte, then the record. Without a 0
//! byte the whole input is the text and the record is empty.

use perfbuf::tracepoint::{Format, Value};

/// Splits an input into the format text (lossy UTF-8) and the record.
pub fn split(input: &[u8]) -> (String, &[u8]) {
    match input.iter().position(|&b| b == 0) {
        Some(i) => (String::from_utf8_lossy(&input[..i]).into_owned(), &input[i + 1..]),
        None => (String::from_utf8_lossy(input).into_owned(), &[]),
    }
}

/// Builds an input from its parts.
pub fn join(text: &str, raw: &[u8]) -> Vec<u8> {
    let mut v = text.as_bytes().to_vec();
    v.push(0);
    v.extend_from_slice(raw);
    v
}

fn inside(outer: &[u8], inner: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    inner.is_empty() || (i >= o && i + inner.len() <= o + outer.len())
}

/// Runs one input; panics on a failed check.
pub fn run(input: &[u8]) {
    let (text, raw) = split(input);
    let parsed = Format::parse(&text);
    assert_eq!(parsed, Format::parse(&text), "parsing is not deterministic");
    let Ok(format) = parsed else { return };
    let fields = format.fields();
    let commons = format.common_fields().len();
    assert!(
        fields[..commons].iter().all(|f| f.is_common()) && fields[commons..].iter().all(|f| !f.is_common())
    );
    for f in fields {
        assert!(f.offset().checked_add(f.size()).is_some(), "{}: offset + size overflows", f.name());
        assert!(format.field(f.name()).is_some(), "{} cannot be found by name", f.name());
        match f.decode(raw) {
            Ok(Value::Str(s)) => {
                assert!(inside(raw, s), "{}: string outside the record", f.name());
                assert!(!s.contains(&0), "{}: string not cut at NUL", f.name());
            }
            Ok(Value::Bytes(b)) => assert!(inside(raw, b), "{}: bytes outside the record", f.name()),
            Ok(Value::Signed(_) | Value::Unsigned(_)) | Err(_) => {}
        }
    }
    let values: Vec<_> = format.values(raw).map(|(name, _)| name.to_owned()).collect();
    let expected: Vec<_> = fields.iter().map(|f| f.name().to_owned()).collect();
    assert_eq!(values, expected, "values() does not follow the fields");
}
