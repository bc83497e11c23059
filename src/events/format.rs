//! Parser and decoder for Linux tracefs tracepoint `format` files.
//!
//! Every tracepoint exposes a description of its binary record layout in
//! `/sys/kernel/tracing/events/<subsystem>/<event>/format` (the real file
//! separates the attributes with tabs):
//!
//! ```text
//! name: sched_process_exec
//! ID: 365
//! format:
//!     field:unsigned short common_type;    offset:0;    size:2;    signed:0;
//!     field:unsigned char common_flags;    offset:2;    size:1;    signed:0;
//!     field:unsigned char common_preempt_count;    offset:3;    size:1;    signed:0;
//!     field:int common_pid;    offset:4;    size:4;    signed:1;
//!
//!     field:__data_loc char[] filename;    offset:8;    size:4;    signed:0;
//!     field:pid_t pid;    offset:12;    size:4;    signed:1;
//!     field:pid_t old_pid;    offset:16;    size:4;    signed:1;
//!
//! print fmt: "filename=%s pid=%d old_pid=%d", __get_str(filename), REC->pid, REC->old_pid
//! ```
//!
//! [`Format::parse`] turns such a file into a [`Format`]; [`Field::decode`]
//! then decodes one field out of a sample's raw record, which is exactly the
//! `PERF_SAMPLE_RAW` payload of a `PERF_TYPE_TRACEPOINT` event (the bytes
//! after the `u32` size, starting with `common_type`). The same bytes are
//! what the ftrace ring buffer stores per event, so this also works on
//! records read from `trace_pipe_raw`.
//!
//! Layout rules (from the kernel's `include/trace/stages/*` and
//! `kernel/trace/trace_events.c` / `trace_output.c`):
//!
//! * The `size:` attribute is authoritative, not the C type: syscall
//!   tracepoints for example declare `int dfd` with `size:8; signed:0;`
//!   because every syscall argument is stored as an `unsigned long`.
//!   Integers are read with exactly `size` bytes and sign-extended only when
//!   `signed:1`.
//! * `__data_loc T[] name` is a `u32` whose low 16 bits are the offset of the
//!   data from the start of the record and whose high 16 bits are its length
//!   in bytes (for strings the length includes the terminating NUL).
//! * `__rel_loc T[] name` is encoded the same way, but the offset is
//!   relative to the end of the 4-byte `__rel_loc` field itself.
//! * `__data_loc cpumask_t name` / `__rel_loc cpumask_t name` (no `[]`) are
//!   dynamic bitmaps encoded like the above.
//! * `T name[]` with `size:0` (seen in the `ftrace/*` events such as
//!   `ftrace/print`) is a flexible array running to the end of the record.
//!
//! All multi-byte values are read in native byte order; the sizes of `long`
//! and pointers (only needed by [`builtin_type_size`]) are those of the
//! running target. Nothing in this module panics on malformed input: all
//! indexing is checked and all offset arithmetic is overflow-checked.

#![forbid(unsafe_code)]

use std::error::Error;
use std::fmt;

/// A parsed tracepoint `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    name: String,
    id: u32,
    fields: Vec<Field>,
    common_count: usize,
    print_fmt: String,
}

/// One field of a tracepoint record, as described by a `field:` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    name: String,
    c_type: String,
    offset: usize,
    size: usize,
    signed: bool,
    common: bool,
    kind: FieldKind,
}

/// How a field is laid out in the record, derived from its C type,
/// array suffix and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldKind {
    /// A plain integer-like value (`int`, `u64`, `bool`, `pid_t`, enums,
    /// typedefs, ...). Sizes 1, 2, 4 and 8 decode to [`Value::Signed`] or
    /// [`Value::Unsigned`]; any other non-zero size (an embedded struct)
    /// decodes to [`Value::Bytes`].
    Scalar,
    /// A pointer-typed field (the C type contains `*`, e.g. `const char *`,
    /// `struct foo *`, `const void *const`). Decodes to the address as
    /// [`Value::Unsigned`]; the pointee is not part of the record.
    Pointer,
    /// A fixed-size `char` array such as `char comm[16]`. Decodes to a
    /// NUL-trimmed [`Value::Str`]. `len` is the byte size from `size:`.
    CharArray {
        /// Number of bytes (equal to the field size).
        len: usize,
    },
    /// A fixed-size array of non-`char` elements such as `u8 saddr[4]` or
    /// `unsigned long caller[8]`. Decodes to [`Value::Bytes`].
    FixedArray {
        /// Element C type as written (e.g. `__u8`, `unsigned long`).
        elem_type: String,
        /// Element size in bytes: `size / declared length` when the declared
        /// length is numeric and divides the size, otherwise inferred from the
        /// element type with [`builtin_type_size`], otherwise 1.
        elem_size: usize,
        /// Number of elements (`size / elem_size`).
        len: usize,
    },
    /// A flexible trailing array `T name[]` with `size:0`; it extends from
    /// the field offset to the end of the record. Decodes to [`Value::Str`]
    /// for `char` elements and [`Value::Bytes`] otherwise (note that the
    /// record may carry alignment padding at its end).
    FlexArray {
        /// Element C type as written.
        elem_type: String,
    },
    /// A `__data_loc T[]` (or `__data_loc cpumask_t`) dynamic array whose
    /// offset is relative to the start of the record. Decodes to
    /// [`Value::Str`] for `char` elements and [`Value::Bytes`] otherwise.
    DataLoc {
        /// Element C type (`char`, `u64`, `unsigned long`, `cpumask_t`, ...).
        elem_type: String,
    },
    /// A `__rel_loc T[]` dynamic array whose offset is relative to the end
    /// of this 4-byte field. Decodes like [`FieldKind::DataLoc`].
    RelLoc {
        /// Element C type (`char`, `unsigned long`, `cpumask_t`, ...).
        elem_type: String,
    },
}

/// A decoded field value borrowing from the raw record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value<'a> {
    /// A sign-extended signed integer (`signed:1`).
    Signed(i64),
    /// A zero-extended unsigned integer (`signed:0`) or a pointer value.
    Unsigned(u64),
    /// Bytes of a `char` array or `char` dynamic array, cut at the first NUL.
    /// Not guaranteed to be UTF-8.
    Str(&'a [u8]),
    /// Raw bytes of any other array, dynamic array or odd-sized field.
    Bytes(&'a [u8]),
}

/// Error returned by [`Format::parse`]: what went wrong and on which line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    line: usize,
    kind: FormatErrorKind,
    text: String,
}

/// The reason a format file was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatErrorKind {
    /// No `name:` line before `format:`.
    MissingName,
    /// No `ID:` line before `format:`.
    MissingId,
    /// No `format:` line.
    MissingFormatSection,
    /// No `print fmt:` line after the fields.
    MissingPrintFmt,
    /// A `name:` or `ID:` line appeared twice.
    DuplicateHeader,
    /// The `name:` line has an empty name.
    EmptyName,
    /// The `ID:` value is not a decimal `u32`.
    BadId,
    /// A line that fits nowhere in the grammar.
    UnexpectedLine,
    /// The declaration after `field:` could not be split into a C type and
    /// an identifier, or its array suffix is malformed.
    BadDeclaration,
    /// A `field:` line lacks its `offset:` attribute.
    MissingOffset,
    /// A `field:` line lacks its `size:` attribute.
    MissingSize,
    /// An attribute is not of the form `key:value`, is repeated, or its value
    /// is not a decimal number (`signed:` must be 0 or 1).
    BadAttribute,
    /// `offset + size` overflows.
    FieldTooLarge,
}

/// Error returned when a field cannot be decoded from a raw record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The field itself (`offset..offset + size`) is not inside the record.
    FieldOutOfBounds {
        /// Field offset from the format.
        offset: usize,
        /// Field size from the format.
        size: usize,
        /// Length of the raw record.
        raw_len: usize,
    },
    /// The data referenced by a `__data_loc` / `__rel_loc` word is not inside
    /// the record (or its start offset overflows).
    DynamicOutOfBounds {
        /// Computed start offset of the dynamic data (saturated on overflow).
        start: usize,
        /// Length taken from the high 16 bits of the location word.
        len: usize,
        /// Length of the raw record.
        raw_len: usize,
    },
    /// A flexible array starts beyond the end of the record.
    FlexOutOfBounds {
        /// Field offset from the format.
        offset: usize,
        /// Length of the raw record.
        raw_len: usize,
    },
    /// A non-array field has `size:0`.
    ZeroSize,
    /// A `__data_loc` / `__rel_loc` field whose size is not 4.
    BadLocSize {
        /// The size from the format.
        size: usize,
    },
}

impl Format {
    /// Parses the text of a tracefs `format` file.
    ///
    /// The grammar accepted is the one produced by the kernel's `f_show()`:
    /// `name:` and `ID:` header lines, a `format:` line, the common fields,
    /// an empty line, the event's own fields, an empty line and a
    /// `print fmt:` line. Everything after `print fmt:` up to the end of the
    /// text (which may span several lines, since some print formats contain
    /// literal newlines) is the print format. Unknown `key:value` attributes
    /// on field lines are ignored; `signed:` defaults to 0 when absent (very
    /// old kernels). The legacy `field special:` prefix is accepted.
    ///
    /// # Errors
    ///
    /// Returns a [`FormatError`] naming the 1-based line and its text when
    /// the input does not follow that grammar.
    pub fn parse(text: &str) -> Result<Format, FormatError> {
        Parser::default().run(text)
    }

    /// The event name from the `name:` line.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The event id from the `ID:` line (the perf `config` for
    /// `PERF_TYPE_TRACEPOINT`, and the value of `common_type` in records).
    #[must_use]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The text after `print fmt:` (without the trailing newline).
    #[must_use]
    pub fn print_fmt(&self) -> &str {
        &self.print_fmt
    }

    /// All fields, common fields first, in file order.
    #[must_use]
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The common fields (`common_type`, `common_pid`, ...), i.e. those
    /// before the first empty line of the `format:` section.
    #[must_use]
    pub fn common_fields(&self) -> &[Field] {
        self.fields.get(..self.common_count).unwrap_or(&[])
    }

    /// The event's own fields, i.e. those after the first empty line.
    #[must_use]
    pub fn event_fields(&self) -> &[Field] {
        self.fields.get(self.common_count..).unwrap_or(&[])
    }

    /// Looks up a field (common or event) by name. If a name occurs more than
    /// once, the first occurrence wins.
    #[must_use]
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The smallest record length that contains every fixed part of every
    /// field (the maximum of `offset + size`). Dynamic data comes after it.
    #[must_use]
    pub fn fixed_size(&self) -> usize {
        self.fields.iter().map(Field::end).max().unwrap_or(0)
    }

    /// Decodes every field (common fields first) of one raw record.
    #[must_use]
    pub fn values<'f, 'r>(&'f self, raw: &'r [u8]) -> Values<'f, 'r> {
        Values { fields: self.fields.iter(), raw }
    }

    /// Decodes only the event's own fields of one raw record.
    #[must_use]
    pub fn event_values<'f, 'r>(&'f self, raw: &'r [u8]) -> Values<'f, 'r> {
        Values { fields: self.event_fields().iter(), raw }
    }
}

/// Iterator over `(field name, decoded value)` pairs of one raw record,
/// returned by [`Format::values`] and [`Format::event_values`].
#[derive(Debug, Clone)]
pub struct Values<'f, 'r> {
    fields: std::slice::Iter<'f, Field>,
    raw: &'r [u8],
}

impl<'f, 'r> Iterator for Values<'f, 'r> {
    type Item = (&'f str, Result<Value<'r>, DecodeError>);

    fn next(&mut self) -> Option<Self::Item> {
        let field = self.fields.next()?;
        Some((field.name(), field.decode(self.raw)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.fields.size_hint()
    }
}

impl ExactSizeIterator for Values<'_, '_> {}

impl Field {
    /// The field name (the identifier in the declaration).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The C type as written before the name, without any array suffix that
    /// follows the name: `unsigned short`, `const char *`, `char` (for
    /// `char comm[16]`), `__data_loc char[]`, ...
    #[must_use]
    pub fn c_type(&self) -> &str {
        &self.c_type
    }

    /// Byte offset of the field from the start of the record.
    #[must_use]
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Size of the field in bytes (4 for `__data_loc` / `__rel_loc` words).
    #[must_use]
    pub fn size(&self) -> usize {
        self.size
    }

    /// The `signed:` attribute.
    #[must_use]
    pub fn is_signed(&self) -> bool {
        self.signed
    }

    /// Whether this is one of the common fields shared by all events.
    #[must_use]
    pub fn is_common(&self) -> bool {
        self.common
    }

    /// The layout kind of the field.
    #[must_use]
    pub fn kind(&self) -> &FieldKind {
        &self.kind
    }

    /// Whether the field decodes to [`Value::Str`] (a `char` array, or a
    /// `char` flexible or dynamic array).
    #[must_use]
    pub fn is_string(&self) -> bool {
        match &self.kind {
            FieldKind::CharArray { .. } => true,
            FieldKind::FlexArray { elem_type }
            | FieldKind::DataLoc { elem_type }
            | FieldKind::RelLoc { elem_type } => is_char_type(elem_type),
            FieldKind::Scalar | FieldKind::Pointer | FieldKind::FixedArray { .. } => false,
        }
    }

    /// Size of one array element, if the field is an array and it is known:
    /// exact for fixed arrays, inferred with [`builtin_type_size`] for
    /// flexible and dynamic arrays. `None` for scalars and pointers.
    #[must_use]
    pub fn elem_size(&self) -> Option<usize> {
        match &self.kind {
            FieldKind::CharArray { .. } => Some(1),
            FieldKind::FixedArray { elem_size, .. } => Some(*elem_size),
            FieldKind::FlexArray { elem_type }
            | FieldKind::DataLoc { elem_type }
            | FieldKind::RelLoc { elem_type } => builtin_type_size(elem_type),
            FieldKind::Scalar | FieldKind::Pointer => None,
        }
    }

    /// `offset + size`; cannot overflow (checked when parsing).
    fn end(&self) -> usize {
        self.offset.saturating_add(self.size)
    }

    /// Decodes this field from a raw tracepoint record (the
    /// `PERF_SAMPLE_RAW` payload, starting with `common_type`).
    ///
    /// Every offset and length is checked against `raw`; returned slices are
    /// always sub-slices of `raw`.
    ///
    /// # Errors
    ///
    /// Returns a [`DecodeError`] if the field or the data it references lies
    /// outside `raw`, if a non-array field has size 0, or if a
    /// `__data_loc` / `__rel_loc` field is not 4 bytes wide.
    pub fn decode<'r>(&self, raw: &'r [u8]) -> Result<Value<'r>, DecodeError> {
        match &self.kind {
            FieldKind::Scalar => self.decode_int(raw, self.signed),
            FieldKind::Pointer => self.decode_int(raw, false),
            FieldKind::CharArray { .. } => Ok(Value::Str(trim_nul(self.fixed_bytes(raw)?))),
            FieldKind::FixedArray { .. } => Ok(Value::Bytes(self.fixed_bytes(raw)?)),
            FieldKind::FlexArray { elem_type } => {
                let bytes = raw
                    .get(self.offset..)
                    .ok_or(DecodeError::FlexOutOfBounds { offset: self.offset, raw_len: raw.len() })?;
                Ok(array_value(elem_type, bytes))
            }
            FieldKind::DataLoc { elem_type } => Ok(array_value(elem_type, self.dynamic_bytes(raw, 0)?)),
            FieldKind::RelLoc { elem_type } => {
                // The offset is relative to the end of the 4-byte field.
                Ok(array_value(elem_type, self.dynamic_bytes(raw, self.end())?))
            }
        }
    }

    /// The `offset..offset + size` bytes of the record.
    fn fixed_bytes<'r>(&self, raw: &'r [u8]) -> Result<&'r [u8], DecodeError> {
        self.offset
            .checked_add(self.size)
            .and_then(|end| raw.get(self.offset..end))
            .ok_or(DecodeError::FieldOutOfBounds { offset: self.offset, size: self.size, raw_len: raw.len() })
    }

    fn decode_int<'r>(&self, raw: &'r [u8], signed: bool) -> Result<Value<'r>, DecodeError> {
        if self.size == 0 {
            return Err(DecodeError::ZeroSize);
        }
        let bytes = self.fixed_bytes(raw)?;
        Ok(read_int(bytes, signed).unwrap_or(Value::Bytes(bytes)))
    }

    /// Resolves a `__data_loc` / `__rel_loc` word; `base` is added to the
    /// 16-bit offset (0 for `__data_loc`, end of field for `__rel_loc`).
    fn dynamic_bytes<'r>(&self, raw: &'r [u8], base: usize) -> Result<&'r [u8], DecodeError> {
        if self.size != 4 {
            return Err(DecodeError::BadLocSize { size: self.size });
        }
        let word = match *self.fixed_bytes(raw)? {
            [a, b, c, d] => u32::from_ne_bytes([a, b, c, d]),
            _ => return Err(DecodeError::BadLocSize { size: self.size }),
        };
        // Low 16 bits: offset; high 16 bits: length in bytes.
        let rel = usize::from(u16::try_from(word & 0xffff).unwrap_or(u16::MAX));
        let len = usize::from(u16::try_from(word >> 16).unwrap_or(u16::MAX));
        let err = |start: usize| DecodeError::DynamicOutOfBounds { start, len, raw_len: raw.len() };
        let start = base.checked_add(rel).ok_or_else(|| err(usize::MAX))?;
        start.checked_add(len).and_then(|end| raw.get(start..end)).ok_or_else(|| err(start))
    }
}

/// Reads a native-endian integer of 1, 2, 4 or 8 bytes; `None` for other
/// lengths.
fn read_int(bytes: &[u8], signed: bool) -> Option<Value<'_>> {
    macro_rules! int {
        ($s:ty, $u:ty) => {
            if let Ok(array) = bytes.try_into() {
                return Some(if signed {
                    Value::Signed(i64::from(<$s>::from_ne_bytes(array)))
                } else {
                    Value::Unsigned(u64::from(<$u>::from_ne_bytes(array)))
                });
            }
        };
    }
    int!(i8, u8);
    int!(i16, u16);
    int!(i32, u32);
    int!(i64, u64);
    None
}

fn array_value<'r>(elem_type: &str, bytes: &'r [u8]) -> Value<'r> {
    if is_char_type(elem_type) { Value::Str(trim_nul(bytes)) } else { Value::Bytes(bytes) }
}

/// Cuts `bytes` at the first NUL, if any.
fn trim_nul(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == 0) {
        Some(n) => bytes.get(..n).unwrap_or(bytes),
        None => bytes,
    }
}

impl<'a> Value<'a> {
    /// The value as `u64`: unsigned values as is, signed values only if
    /// non-negative.
    #[must_use]
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Unsigned(v) => Some(v),
            Value::Signed(v) => u64::try_from(v).ok(),
            Value::Str(_) | Value::Bytes(_) => None,
        }
    }

    /// The value as `i64`: signed values as is, unsigned values only if they
    /// fit.
    #[must_use]
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Signed(v) => Some(v),
            Value::Unsigned(v) => i64::try_from(v).ok(),
            Value::Str(_) | Value::Bytes(_) => None,
        }
    }

    /// The bytes of a [`Value::Str`] or [`Value::Bytes`].
    #[must_use]
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Value::Str(b) | Value::Bytes(b) => Some(b),
            Value::Signed(_) | Value::Unsigned(_) => None,
        }
    }

    /// The text of a [`Value::Str`], if it is valid UTF-8.
    #[must_use]
    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            Value::Str(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
}

impl FormatError {
    /// The 1-based line number the error refers to. For a missing section
    /// this is one past the last line.
    #[must_use]
    pub fn line(&self) -> usize {
        self.line
    }

    /// What was wrong.
    #[must_use]
    pub fn kind(&self) -> FormatErrorKind {
        self.kind
    }

    /// The offending line (possibly shortened; empty at end of input).
    #[must_use]
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for FormatErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            FormatErrorKind::MissingName => "missing `name:` line before `format:`",
            FormatErrorKind::MissingId => "missing `ID:` line before `format:`",
            FormatErrorKind::MissingFormatSection => "missing `format:` line",
            FormatErrorKind::MissingPrintFmt => "missing `print fmt:` line",
            FormatErrorKind::DuplicateHeader => "duplicate header line",
            FormatErrorKind::EmptyName => "empty event name",
            FormatErrorKind::BadId => "`ID:` is not a decimal u32",
            FormatErrorKind::UnexpectedLine => "unexpected line",
            FormatErrorKind::BadDeclaration => "malformed field declaration",
            FormatErrorKind::MissingOffset => "field line has no `offset:`",
            FormatErrorKind::MissingSize => "field line has no `size:`",
            FormatErrorKind::BadAttribute => "malformed, repeated or non-numeric field attribute",
            FormatErrorKind::FieldTooLarge => "field offset + size overflows",
        };
        f.write_str(s)
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.text.is_empty() {
            write!(f, "tracefs format, line {}: {}", self.line, self.kind)
        } else {
            write!(f, "tracefs format, line {}: {}: {:?}", self.line, self.kind, self.text)
        }
    }
}

impl Error for FormatError {}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::FieldOutOfBounds { offset, size, raw_len } => {
                write!(f, "field at offset {offset} with size {size} exceeds record of {raw_len} bytes")
            }
            DecodeError::DynamicOutOfBounds { start, len, raw_len } => write!(
                f,
                "dynamic data at offset {start} with length {len} exceeds record of {raw_len} bytes"
            ),
            DecodeError::FlexOutOfBounds { offset, raw_len } => {
                write!(f, "flexible array at offset {offset} starts beyond record of {raw_len} bytes")
            }
            DecodeError::ZeroSize => f.write_str("field has size 0"),
            DecodeError::BadLocSize { size } => {
                write!(f, "__data_loc/__rel_loc field has size {size}, expected 4")
            }
        }
    }
}

impl Error for DecodeError {}

/// Size in bytes of a well-known kernel C type name, for the running target
/// (`long` and pointers are `usize`-sized). `const`/`volatile` qualifiers and
/// extra whitespace are ignored. Returns `None` for unknown names (structs,
/// enums, most typedefs, `cpumask_t`).
#[must_use]
pub fn builtin_type_size(c_type: &str) -> Option<usize> {
    if c_type.contains('*') {
        return Some(std::mem::size_of::<usize>());
    }
    let norm = normalize_type(c_type);
    let size = match norm.as_str() {
        "char" | "signed char" | "unsigned char" | "u8" | "s8" | "__u8" | "__s8" | "uint8_t" | "int8_t"
        | "bool" | "_Bool" => 1,
        "short" | "short int" | "signed short" | "unsigned short" | "unsigned short int" | "u16" | "s16"
        | "__u16" | "__s16" | "uint16_t" | "int16_t" | "__le16" | "__be16" => 2,
        "int" | "signed" | "signed int" | "unsigned" | "unsigned int" | "u32" | "s32" | "__u32" | "__s32"
        | "uint32_t" | "int32_t" | "__le32" | "__be32" | "pid_t" | "uid_t" | "gid_t" | "dev_t" | "gfp_t" => 4,
        "long long"
        | "long long int"
        | "signed long long"
        | "unsigned long long"
        | "unsigned long long int"
        | "u64"
        | "s64"
        | "__u64"
        | "__s64"
        | "uint64_t"
        | "int64_t"
        | "__le64"
        | "__be64"
        | "loff_t" => 8,
        "long" | "long int" | "signed long" | "unsigned long" | "unsigned long int" | "size_t"
        | "ssize_t" => std::mem::size_of::<usize>(),
        _ => return None,
    };
    Some(size)
}

/// `const`/`volatile`-free, single-space-separated type name.
fn normalize_type(c_type: &str) -> String {
    let mut out = String::new();
    for word in c_type.split_whitespace().filter(|w| *w != "const" && *w != "volatile") {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Whether an element type is plain `char` (strings), ignoring qualifiers.
/// `unsigned char` / `u8` arrays are treated as bytes, not strings.
fn is_char_type(c_type: &str) -> bool {
    let mut words = c_type.split_whitespace().filter(|w| *w != "const" && *w != "volatile");
    words.next() == Some("char") && words.next().is_none()
}

// ---------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------

const MAX_ERROR_TEXT: usize = 120;

#[derive(Default)]
struct Parser {
    name: Option<String>,
    id: Option<u32>,
    fields: Vec<Field>,
    common_count: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Header,
    Common,
    Event,
}

fn error(line: usize, kind: FormatErrorKind, text: &str) -> FormatError {
    let mut end = text.len().min(MAX_ERROR_TEXT);
    while !text.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    FormatError { line, kind, text: text.get(..end).unwrap_or_default().to_owned() }
}

impl Parser {
    fn run(mut self, text: &str) -> Result<Format, FormatError> {
        let mut section = Section::Header;
        let mut line_no = 0usize;
        let mut pos = 0usize; // byte offset of the current line in `text`
        for raw_line in text.split_inclusive('\n') {
            line_no = line_no.saturating_add(1);
            let line_start = pos;
            pos = pos.saturating_add(raw_line.len());
            let line = raw_line.strip_suffix('\n').unwrap_or(raw_line);
            let line = line.strip_suffix('\r').unwrap_or(line);

            if section == Section::Header {
                if self.header_line(line, line_no)? {
                    section = Section::Common;
                }
                continue;
            }
            if line.trim().is_empty() {
                if section == Section::Common {
                    self.common_count = Some(self.fields.len());
                    section = Section::Event;
                }
                continue;
            }
            if line.starts_with("print fmt:") {
                let tail = text.get(line_start.saturating_add("print fmt:".len())..).unwrap_or_default();
                return Ok(self.finish(tail));
            }
            let trimmed = line.trim_start();
            let Some(decl) =
                trimmed.strip_prefix("field:").or_else(|| trimmed.strip_prefix("field special:"))
            else {
                return Err(error(line_no, FormatErrorKind::UnexpectedLine, line));
            };
            let field =
                parse_field(decl, section == Section::Common).map_err(|kind| error(line_no, kind, line))?;
            self.fields.push(field);
        }
        let end_line = line_no.saturating_add(1);
        let kind = if section == Section::Header {
            if self.name.is_none() {
                FormatErrorKind::MissingName
            } else if self.id.is_none() {
                FormatErrorKind::MissingId
            } else {
                FormatErrorKind::MissingFormatSection
            }
        } else {
            FormatErrorKind::MissingPrintFmt
        };
        Err(error(end_line, kind, ""))
    }

    /// Handles a line before `format:`; returns `true` on the `format:` line.
    fn header_line(&mut self, line: &str, line_no: usize) -> Result<bool, FormatError> {
        let err = |kind| error(line_no, kind, line);
        if line.trim().is_empty() {
            return Ok(false);
        }
        if let Some(rest) = line.strip_prefix("name:") {
            let name = rest.trim();
            if name.is_empty() {
                return Err(err(FormatErrorKind::EmptyName));
            }
            if self.name.replace(name.to_owned()).is_some() {
                return Err(err(FormatErrorKind::DuplicateHeader));
            }
            return Ok(false);
        }
        if let Some(rest) = line.strip_prefix("ID:") {
            let id = parse_decimal(rest.trim())
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| err(FormatErrorKind::BadId))?;
            if self.id.replace(id).is_some() {
                return Err(err(FormatErrorKind::DuplicateHeader));
            }
            return Ok(false);
        }
        if line.trim_end() == "format:" {
            if self.name.is_none() {
                return Err(err(FormatErrorKind::MissingName));
            }
            if self.id.is_none() {
                return Err(err(FormatErrorKind::MissingId));
            }
            return Ok(true);
        }
        Err(err(FormatErrorKind::UnexpectedLine))
    }

    fn finish(self, print_fmt_tail: &str) -> Format {
        let tail = print_fmt_tail.strip_prefix(' ').unwrap_or(print_fmt_tail);
        let tail = tail.strip_suffix('\n').unwrap_or(tail);
        let tail = tail.strip_suffix('\r').unwrap_or(tail);
        let common_count = self.common_count.unwrap_or(self.fields.len());
        Format {
            name: self.name.unwrap_or_default(),
            id: self.id.unwrap_or_default(),
            fields: self.fields,
            common_count,
            print_fmt: tail.to_owned(),
        }
    }
}

/// Parses a non-empty all-ASCII-digit string (no sign) into `usize`.
fn parse_decimal(s: &str) -> Option<usize> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses what follows `field:` on a field line.
fn parse_field(rest: &str, common: bool) -> Result<Field, FormatErrorKind> {
    let mut parts = rest.split(';');
    let decl = parts.next().unwrap_or_default().trim();

    let mut offset = None;
    let mut size = None;
    let mut signed = None;
    for attr in parts {
        let attr = attr.trim();
        if attr.is_empty() {
            continue;
        }
        let (key, value) = attr.split_once(':').ok_or(FormatErrorKind::BadAttribute)?;
        let value = value.trim();
        let slot = match key.trim() {
            "offset" => &mut offset,
            "size" => &mut size,
            "signed" => &mut signed,
            _ => continue, // unknown attribute: ignore for forward compatibility
        };
        let number = parse_decimal(value).ok_or(FormatErrorKind::BadAttribute)?;
        if slot.replace(number).is_some() {
            return Err(FormatErrorKind::BadAttribute);
        }
    }
    let offset = offset.ok_or(FormatErrorKind::MissingOffset)?;
    let size = size.ok_or(FormatErrorKind::MissingSize)?;
    let signed = match signed {
        None | Some(0) => false,
        Some(1) => true,
        Some(_) => return Err(FormatErrorKind::BadAttribute),
    };
    if offset.checked_add(size).is_none() {
        return Err(FormatErrorKind::FieldTooLarge);
    }

    let decl = Declaration::split(decl)?;
    let kind = decl.classify(size)?;
    Ok(Field {
        name: decl.name.to_owned(),
        c_type: decl.c_type.to_owned(),
        offset,
        size,
        signed,
        common,
        kind,
    })
}

/// A field declaration split into type, name and array suffixes.
struct Declaration<'a> {
    c_type: &'a str,
    name: &'a str,
    /// Contents of each `[...]` after the name, outermost first.
    dims: Vec<&'a str>,
}

impl<'a> Declaration<'a> {
    fn split(decl: &'a str) -> Result<Self, FormatErrorKind> {
        let mut base = decl.trim();
        let mut dims = Vec::new();
        while let Some(inner) = base.strip_suffix(']') {
            let open = inner.rfind('[').ok_or(FormatErrorKind::BadDeclaration)?;
            let dim = inner.get(open.saturating_add(1)..).ok_or(FormatErrorKind::BadDeclaration)?;
            dims.push(dim.trim());
            base = inner.get(..open).ok_or(FormatErrorKind::BadDeclaration)?.trim_end();
        }
        dims.reverse();

        // The name is the trailing run of identifier characters (ASCII, so
        // the split point is always a char boundary).
        let bytes = base.as_bytes();
        let mut start = bytes.len();
        while let Some(&b) = start.checked_sub(1).and_then(|i| bytes.get(i)) {
            if b.is_ascii_alphanumeric() || b == b'_' {
                start = start.saturating_sub(1);
            } else {
                break;
            }
        }
        let name = base.get(start..).ok_or(FormatErrorKind::BadDeclaration)?;
        let c_type = base.get(..start).ok_or(FormatErrorKind::BadDeclaration)?.trim_end();
        let starts_with_digit = name.bytes().next().is_some_and(|b| b.is_ascii_digit());
        if name.is_empty() || starts_with_digit || c_type.is_empty() {
            return Err(FormatErrorKind::BadDeclaration);
        }
        if dims.iter().any(|d| d.contains(['[', ']'])) {
            return Err(FormatErrorKind::BadDeclaration);
        }
        Ok(Declaration { c_type, name, dims })
    }

    fn classify(&self, size: usize) -> Result<FieldKind, FormatErrorKind> {
        for (keyword, rel) in [("__data_loc", false), ("__rel_loc", true)] {
            let Some(rest) = self.c_type.strip_prefix(keyword) else {
                continue;
            };
            if !rest.starts_with(char::is_whitespace) || !self.dims.is_empty() {
                return Err(FormatErrorKind::BadDeclaration);
            }
            let rest = rest.trim();
            let elem = rest.strip_suffix("[]").unwrap_or(rest).trim_end();
            if elem.is_empty() || elem.contains(['[', ']']) {
                return Err(FormatErrorKind::BadDeclaration);
            }
            let elem_type = elem.to_owned();
            return Ok(if rel { FieldKind::RelLoc { elem_type } } else { FieldKind::DataLoc { elem_type } });
        }

        if self.dims.is_empty() {
            return Ok(if self.c_type.contains('*') { FieldKind::Pointer } else { FieldKind::Scalar });
        }

        if size == 0 {
            return Ok(FieldKind::FlexArray { elem_type: self.c_type.to_owned() });
        }
        if is_char_type(self.c_type) {
            return Ok(FieldKind::CharArray { len: size });
        }
        // Declared element count, if every dimension is a plain number.
        let declared =
            self.dims.iter().try_fold(1usize, |acc, d| parse_decimal(d).and_then(|n| acc.checked_mul(n)));
        let elem_size = match declared {
            Some(n) if n > 0 && size % n == 0 => size / n,
            _ => builtin_type_size(self.c_type).filter(|&s| s > 0 && size % s == 0).unwrap_or(1),
        };
        Ok(FieldKind::FixedArray {
            elem_type: self.c_type.to_owned(),
            elem_size,
            len: size.checked_div(elem_size).unwrap_or(size),
        })
    }
}
