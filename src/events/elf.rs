//! Finding a function's file offset in an ELF binary, which is what a
//! uprobe is placed by.
//!
//! The file is read piecewise with `pread` (headers, then only the symbol
//! and string tables), not mapped: a mapped file that another process
//! truncates raises SIGBUS in ours, and a library must not take its host
//! down for a probe; reading it whole would copy tens of MB of code we never
//! look at. Every offset and size in the file is untrusted: reads are
//! bounded by the file's size, arithmetic is checked, and a bad file is an
//! error, never a panic.

use crate::error::{Error, Result, What};
use crate::log::{debug, warn};
use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
const EHDR_SIZE: u64 = 64;
const SHDR_SIZE: u64 = 64;
const PHDR_SIZE: u64 = 56;
const SYM_SIZE: u64 = 24;

const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const SHT_GNU_VERSYM: u32 = 0x6fff_ffff;
/// Section indexes from here on are special (ABS, COMMON, XINDEX...), not sections.
const SHN_LORESERVE: u16 = 0xff00;
const SHN_UNDEF: u16 = 0;
/// `e_phnum` saying the real count is in section 0's `sh_info`.
const PN_XNUM: u16 = 0xffff;

const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;

const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
/// In a `.gnu.version` entry: the symbol is not its name's default version.
const VERSYM_HIDDEN: u16 = 0x8000;

/// The file offset of `symbol`'s code in the ELF file at `path`: what a
/// uprobe on it takes.
#[cfg(test)]
pub(crate) fn symbol_file_offset(path: &Path, symbol: &str) -> Result<u64> {
    function_file_offset(path, symbol, 0)
}

/// The file offset of byte `into` of function `symbol`'s code in the ELF
/// file at `path`: a uprobe at `symbol+into`. An offset at or past the
/// function's end (its symbol's size, where it has one) is EINVAL: the
/// probe would land in whatever code follows.
pub(crate) fn function_file_offset(path: &Path, symbol: &str, into: u64) -> Result<u64> {
    if symbol.is_empty() || symbol.contains('\0') {
        return Err(Error::invalid("a symbol name is needed, without NUL bytes"));
    }
    let file = match ElfFile::open(path) {
        Ok(file) => file,
        Err(e) => {
            warn(format_args!("cannot read {} to look up {symbol}: {e}", path.display()));
            return Err(e);
        }
    };
    match find_symbol(&file, symbol.as_bytes()) {
        Ok(Function { file_offset, size }) if size != 0 && into >= size => {
            warn(format_args!(
                "{symbol}+{into:#x} in {} is past the function's end ({size:#x} bytes at file offset {file_offset:#x})",
                path.display()
            ));
            Err(Error::invalid("the offset is past the end of the function")
                .about(format_args!("{symbol} is {size:#x} bytes long")))
        }
        Ok(Function { file_offset, .. }) => {
            let offset = file_offset.checked_add(into).ok_or(Error::invalid("the offset is too large"))?;
            debug(format_args!("{symbol}+{into:#x} in {}: file offset {offset:#x}", path.display()));
            Ok(offset)
        }
        Err(Failure::Read(e)) => {
            warn(format_args!("cannot read {} to look up {symbol}: {e}", path.display()));
            Err(e)
        }
        Err(Failure::NotElf) => {
            warn(format_args!("{} is not a whole 64-bit little-endian ELF file", path.display()));
            Err(Error::new(libc::ENOEXEC, What::NotElf))
        }
        Err(Failure::NotFound { unusable }) => {
            warn(format_args!(
                "{} defines no function {symbol}{}",
                path.display(),
                if unusable > 0 { " in a loaded executable segment" } else { "" }
            ));
            Err(Error::new(libc::ENOENT, What::NoSymbol))
        }
        Err(Failure::Ambiguous(first, second)) => {
            warn(format_args!(
                "{symbol} in {} is at more than one file offset ({first:#x}, {second:#x})",
                path.display()
            ));
            Err(Error::invalid("the symbol is ambiguous in this binary: give a file offset instead"))
        }
        Err(Failure::Ifunc(offset)) => {
            warn(format_args!(
                "{symbol} in {} is an IFUNC (resolver at file offset {offset:#x})",
                path.display()
            ));
            Err(Error::invalid(
                "the symbol is an IFUNC: its address is the resolver's, which runs once at load; probe the \
                 implementation it picks, or give a file offset",
            ))
        }
    }
}

/// Why a lookup found no offset (turned into an [`Error`] and a message by
/// [`symbol_file_offset`], which knows the path).
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// Not a 64-bit little-endian ELF file, or one cut short or garbled.
    NotElf,
    /// The file could not be read.
    Read(Error),
    /// No function of that name; `unusable` of that name were defined
    /// outside any loaded executable segment (a debug-info file's, say).
    NotFound { unusable: usize },
    /// Functions of that name at (at least) these two different offsets.
    Ambiguous(u64, u64),
    /// The name is an IFUNC, at this offset.
    Ifunc(u64),
}

type Lookup<T> = core::result::Result<T, Failure>;

/// An ELF file's bytes, read a range at a time.
trait ElfSource {
    /// The file's size in bytes.
    fn size(&self) -> u64;
    /// The `len` bytes at `offset`, which must all lie in the file.
    fn read(&self, offset: u64, len: u64) -> Lookup<Cow<'_, [u8]>>;

    /// Whether `offset..offset + len` lies in the file.
    fn check_range(&self, offset: u64, len: u64) -> Lookup<usize> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size() => usize::try_from(len).map_err(|_| Failure::NotElf),
            _ => Err(Failure::NotElf),
        }
    }
}

struct ElfFile {
    file: File,
    size: u64,
}

impl ElfFile {
    fn open(path: &Path) -> Result<ElfFile> {
        let os_error = |e: io::Error| Error::from_errno(e.raw_os_error().unwrap_or(libc::EIO));
        // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(os_error)?;
        let meta = file.metadata().map_err(os_error)?;
        if !meta.is_file() {
            return Err(Error::new(libc::ENOEXEC, What::NotElf));
        }
        Ok(ElfFile { file, size: meta.len() })
    }
}

impl ElfSource for ElfFile {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, len: u64) -> Lookup<Cow<'_, [u8]>> {
        // Bounded by the size the file had at open, so a garbled header
        // cannot make us allocate more than the file.
        let mut bytes = vec![0; self.check_range(offset, len)?];
        match self.file.read_exact_at(&mut bytes, offset) {
            Ok(()) => Ok(Cow::Owned(bytes)),
            // Shrunk since we looked: what we saw of it no longer holds.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(Failure::NotElf),
            Err(e) => Err(Failure::Read(Error::from_errno(e.raw_os_error().unwrap_or(libc::EIO)))),
        }
    }
}

impl ElfSource for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn read(&self, offset: u64, len: u64) -> Lookup<Cow<'_, [u8]>> {
        let len = self.check_range(offset, len)?;
        // In range per check_range, and offset <= size fits usize.
        let start = usize::try_from(offset).map_err(|_| Failure::NotElf)?;
        self.get(start..start + len).map(Cow::Borrowed).ok_or(Failure::NotElf)
    }
}

/// The little-endian integer of `N` bytes at `at` in `bytes`.
fn le<const N: usize>(bytes: &[u8], at: usize) -> Lookup<[u8; N]> {
    bytes.get(at..).and_then(|b| b.first_chunk::<N>()).copied().ok_or(Failure::NotElf)
}

fn u16_at(bytes: &[u8], at: usize) -> Lookup<u16> {
    le(bytes, at).map(u16::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> Lookup<u32> {
    le(bytes, at).map(u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> Lookup<u64> {
    le(bytes, at).map(u64::from_le_bytes)
}

/// The fields of an `Elf64_Shdr` this lookup uses.
#[derive(Clone, Copy, Debug)]
struct Section {
    type_: u32,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    entsize: u64,
}

impl Section {
    fn parse(shdr: &[u8]) -> Lookup<Section> {
        Ok(Section {
            type_: u32_at(shdr, 4)?,
            addr: u64_at(shdr, 16)?,
            offset: u64_at(shdr, 24)?,
            size: u64_at(shdr, 32)?,
            link: u32_at(shdr, 40)?,
            info: u32_at(shdr, 44)?,
            entsize: u64_at(shdr, 56)?,
        })
    }

    fn data<'s>(&self, source: &'s (impl ElfSource + ?Sized)) -> Lookup<Cow<'s, [u8]>> {
        if self.type_ == SHT_NOBITS {
            return Ok(Cow::Borrowed(&[]));
        }
        source.read(self.offset, self.size)
    }

    /// The file offset of virtual address `addr`, if the section holds it in the file.
    fn file_offset(&self, addr: u64) -> Option<u64> {
        let into = addr.checked_sub(self.addr)?;
        (self.type_ != SHT_NOBITS && into < self.size).then(|| self.offset.checked_add(into)).flatten()
    }
}

/// The file range of an executable `PT_LOAD` segment: the code a uprobe can hit.
#[derive(Clone, Copy, Debug)]
struct CodeSegment {
    offset: u64,
    filesz: u64,
}

impl CodeSegment {
    fn holds(&self, file_offset: u64) -> bool {
        file_offset >= self.offset && file_offset - self.offset < self.filesz
    }
}

/// The file's sections and executable segments.
struct Layout {
    sections: Vec<Section>,
    code: Vec<CodeSegment>,
}

fn read_layout(source: &(impl ElfSource + ?Sized)) -> Lookup<Layout> {
    let ehdr = source.read(0, EHDR_SIZE)?;
    if ehdr.get(..4) != Some(ELF_MAGIC)
        || ehdr.get(4) != Some(&ELFCLASS64)
        || ehdr.get(5) != Some(&ELFDATA2LSB)
    {
        return Err(Failure::NotElf);
    }
    let phoff = u64_at(&ehdr, 32)?;
    let shoff = u64_at(&ehdr, 40)?;
    let phentsize = u16_at(&ehdr, 54)?;
    let mut phnum = u64::from(u16_at(&ehdr, 56)?);
    let shentsize = u16_at(&ehdr, 58)?;
    let mut shnum = u64::from(u16_at(&ehdr, 60)?);

    let mut sections = Vec::new();
    if shoff != 0 {
        if u64::from(shentsize) != SHDR_SIZE {
            return Err(Failure::NotElf);
        }
        let first = Section::parse(&source.read(shoff, SHDR_SIZE)?)?;
        // More than 0xff00 sections: the count is in section 0.
        if shnum == 0 {
            shnum = first.size;
        }
        if phnum == u64::from(PN_XNUM) {
            phnum = u64::from(first.info);
        }
        let table = source.read(shoff, shnum.checked_mul(SHDR_SIZE).ok_or(Failure::NotElf)?)?;
        sections = table.chunks_exact(SHDR_SIZE as usize).map(Section::parse).collect::<Lookup<_>>()?;
    }

    let mut code = Vec::new();
    if phnum != 0 {
        if u64::from(phentsize) != PHDR_SIZE {
            return Err(Failure::NotElf);
        }
        let table = source.read(phoff, phnum.checked_mul(PHDR_SIZE).ok_or(Failure::NotElf)?)?;
        for phdr in table.chunks_exact(PHDR_SIZE as usize) {
            if u32_at(phdr, 0)? == PT_LOAD && u32_at(phdr, 4)? & PF_X != 0 {
                code.push(CodeSegment { offset: u64_at(phdr, 8)?, filesz: u64_at(phdr, 32)? });
            }
        }
    }
    Ok(Layout { sections, code })
}

/// A function found: where its code starts in the file, and its size
/// (`st_size`; 0 when the symbol does not say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Function {
    file_offset: u64,
    size: u64,
}

/// A function symbol whose name matched.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    file_offset: u64,
    size: u64,
    ifunc: bool,
    /// The name's default version (or an unversioned name): what a program
    /// linked today calls.
    default_version: bool,
}

/// How a symbol's name matched the one asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NameMatch {
    Exact,
    /// `name@@VERSION`, as `.symtab` spells a default version.
    DefaultVersion,
    /// `name@VERSION`: an older version kept for old binaries.
    OtherVersion,
}

fn match_name(name: &[u8], wanted: &[u8]) -> Option<NameMatch> {
    let rest = name.strip_prefix(wanted)?;
    if rest.is_empty() {
        Some(NameMatch::Exact)
    } else if wanted.contains(&b'@') {
        // A versioned name asked for is matched as it is.
        None
    } else if rest.starts_with(b"@@") {
        Some(NameMatch::DefaultVersion)
    } else if rest.starts_with(b"@") {
        Some(NameMatch::OtherVersion)
    } else {
        None
    }
}

/// `wanted`'s file offset in `source`.
///
/// Searches `.symtab`, then `.dynsym` (all a stripped binary has) for
/// defined `STT_FUNC` and `STT_GNU_IFUNC` symbols named `wanted`,
/// `wanted@VERSION` or `wanted@@VERSION`. Like libbpf, `STT_NOTYPE` is not
/// taken: that is also the type of linker markers such as `_end` and
/// `__bss_start`, which are not code. Several names at one offset (aliases,
/// the same symbol in both tables) are one answer; at different offsets,
/// the default versions decide (`pthread_cond_wait@@GLIBC_2.3.2` over
/// `@GLIBC_2.2.5`) or it is ambiguous.
fn find_symbol(source: &(impl ElfSource + ?Sized), wanted: &[u8]) -> Lookup<Function> {
    let layout = read_layout(source)?;
    let mut candidates = Vec::new();
    let mut unusable = 0;
    for table_type in [SHT_SYMTAB, SHT_DYNSYM] {
        for (index, table) in layout.sections.iter().enumerate() {
            if table.type_ == table_type {
                collect_candidates(source, &layout, index, table, wanted, &mut candidates, &mut unusable)?;
            }
        }
    }
    choose(&candidates, unusable)
}

fn collect_candidates(
    source: &(impl ElfSource + ?Sized),
    layout: &Layout,
    table_index: usize,
    table: &Section,
    wanted: &[u8],
    candidates: &mut Vec<Candidate>,
    unusable: &mut usize,
) -> Lookup<()> {
    let strtab = usize::try_from(table.link).ok().and_then(|link| layout.sections.get(link));
    let Some(strtab) = strtab.filter(|s| s.type_ == SHT_STRTAB) else {
        return Err(Failure::NotElf);
    };
    if table.entsize != SYM_SIZE {
        return Err(Failure::NotElf);
    }
    let symbols = table.data(source)?;
    let names = strtab.data(source)?;
    // `.gnu.version` runs parallel to `.dynsym` and links to it.
    let versions = layout
        .sections
        .iter()
        .find(|s| s.type_ == SHT_GNU_VERSYM && usize::try_from(s.link).ok() == Some(table_index))
        .map(|s| s.data(source))
        .transpose()?;

    for (index, sym) in symbols.chunks_exact(SYM_SIZE as usize).enumerate() {
        let st_type = le::<1>(sym, 4)?[0] & 0xf;
        let st_shndx = u16_at(sym, 6)?;
        let st_value = u64_at(sym, 8)?;
        let st_size = u64_at(sym, 16)?;
        if !matches!(st_type, STT_FUNC | STT_GNU_IFUNC)
            || st_shndx == SHN_UNDEF
            || st_shndx >= SHN_LORESERVE
            || st_value == 0
        {
            continue;
        }
        let Some(name) = symbol_name(&names, u32_at(sym, 0)?) else { continue };
        let Some(name_match) = match_name(name, wanted) else { continue };
        let hidden_version = versions
            .as_deref()
            .and_then(|v| v.get(index.checked_mul(2)?..)?.first_chunk::<2>().copied())
            .is_some_and(|v| u16::from_le_bytes(v) & VERSYM_HIDDEN != 0);
        let file_offset = layout
            .sections
            .get(usize::from(st_shndx))
            .and_then(|section| section.file_offset(st_value))
            .filter(|&offset| offset < source.size() && layout.code.iter().any(|code| code.holds(offset)));
        let Some(file_offset) = file_offset else {
            *unusable += 1;
            continue;
        };
        candidates.push(Candidate {
            file_offset,
            size: st_size,
            ifunc: st_type == STT_GNU_IFUNC,
            default_version: name_match != NameMatch::OtherVersion && !hidden_version,
        });
    }
    Ok(())
}

/// The NUL-terminated name at `offset` in a string table.
fn symbol_name(names: &[u8], offset: u32) -> Option<&[u8]> {
    let from = names.get(usize::try_from(offset).ok()?..)?;
    from.iter().position(|&b| b == 0).map(|end| &from[..end])
}

/// The one offset the candidates agree on, if they do (with the largest
/// size any of them gives: an alias may not say).
fn choose(candidates: &[Candidate], unusable: usize) -> Lookup<Function> {
    let Some(first) = candidates.first() else {
        return Err(Failure::NotFound { unusable });
    };
    let at_one_offset = |set: &[&Candidate]| set.iter().all(|c| c.file_offset == set[0].file_offset);
    let all: Vec<&Candidate> = candidates.iter().collect();
    let defaults: Vec<&Candidate> = candidates.iter().filter(|c| c.default_version).collect();
    let chosen = if at_one_offset(&all) {
        all
    } else if !defaults.is_empty() && at_one_offset(&defaults) {
        defaults
    } else {
        let other = candidates.iter().find(|c| c.file_offset != first.file_offset).unwrap_or(first);
        return Err(Failure::Ambiguous(first.file_offset, other.file_offset));
    };
    let file_offset = chosen[0].file_offset;
    let size = chosen.iter().map(|c| c.size).max().unwrap_or(0);
    if chosen.iter().all(|c| c.ifunc) {
        Err(Failure::Ifunc(file_offset))
    } else {
        Ok(Function { file_offset, size })
    }
}

#[cfg(test)]
mod tests {
    use super::super::pmu::ScratchDir;
    use super::*;

    /// A function only this test module calls, so the linker keeps one copy
    /// under this name; its body is big enough not to be folded into another.
    #[unsafe(no_mangle)]
    #[inline(never)]
    pub extern "C" fn perfbuf_elf_test_target(x: u64) -> u64 {
        let mut h = x ^ 0x9e37_79b9_7f4a_7c15;
        for round in 0..(x % 7 + 3) {
            h = h.rotate_left(13).wrapping_mul(0xff51_afd7_ed55_8ccd) ^ round;
        }
        h
    }

    fn libc_path() -> std::path::PathBuf {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line =
            maps.lines().find(|l| l.contains("/libc.so") || l.contains("/libc-")).expect("libc mapped");
        line[line.find('/').unwrap()..].into()
    }

    #[test]
    fn finds_a_function_in_the_test_binary() {
        assert_ne!(perfbuf_elf_test_target(5), perfbuf_elf_test_target(6));
        let exe = std::env::current_exe().unwrap();
        let offset = symbol_file_offset(&exe, "perfbuf_elf_test_target").unwrap();
        let file = std::fs::read(&exe).unwrap();
        let on_disk = &file[offset as usize..][..16];
        let code = perfbuf_elf_test_target as extern "C" fn(u64) -> u64 as *const u8;
        // SAFETY: `code` is the function's entry in this process's mapped,
        // readable text; 16 bytes from it are inside that mapping (the
        // function is longer than that, and text continues past it anyway).
        let in_memory = unsafe { core::slice::from_raw_parts(code, 16) };
        assert_eq!(on_disk, in_memory, "file offset {offset:#x}");
    }

    #[test]
    fn finds_malloc_in_libc() {
        let libc = libc_path();
        let offset = symbol_file_offset(&libc, "malloc").unwrap();
        assert!(offset > 0 && offset < std::fs::metadata(&libc).unwrap().len());
        // glibc exports pthread_cond_wait at two versions: the default one wins.
        if let Ok(wait) = symbol_file_offset(&libc, "pthread_cond_wait") {
            assert_ne!(wait, 0);
        }
    }

    #[test]
    fn a_missing_symbol_is_enoent() {
        let exe = std::env::current_exe().unwrap();
        let e = symbol_file_offset(&exe, "perfbuf_no_such_function_anywhere").unwrap_err();
        assert_eq!(e, Error::new(libc::ENOENT, What::NoSymbol));
        // A prefix of a real name is not that name.
        let e = symbol_file_offset(&exe, "perfbuf_elf_test_targ").unwrap_err();
        assert_eq!(e, Error::new(libc::ENOENT, What::NoSymbol));
    }

    #[test]
    fn a_non_elf_file_is_enoexec() {
        let dir = ScratchDir::new("elf");
        dir.write("hostname", "myhost\n");
        dir.write("empty", "");
        dir.write("header", b"\x7fELF\x02\x01\x01");
        for name in ["hostname", "empty", "header"] {
            let e = symbol_file_offset(&dir.path().join(name), "main").unwrap_err();
            assert_eq!(e, Error::new(libc::ENOEXEC, What::NotElf), "{name}");
        }
        assert_eq!(
            symbol_file_offset(dir.path(), "main").unwrap_err(),
            Error::new(libc::ENOEXEC, What::NotElf)
        );
    }

    #[test]
    fn an_unopenable_path_keeps_its_errno() {
        let e = symbol_file_offset(Path::new("/nonexistent/perfbuf/binary"), "main").unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT);
        assert_eq!(symbol_file_offset(Path::new("/bin/true"), "").unwrap_err().errno(), libc::EINVAL);
    }

    /// A symbol for [`synthetic_elf`].
    #[derive(Clone, Copy)]
    struct Sym {
        name: &'static str,
        st_type: u8,
        shndx: u16,
        value: u64,
        hidden: bool,
    }

    const TEXT: u16 = 1;
    const BSS: u16 = 7;
    const TEXT_OFFSET: u64 = 0x40;
    const TEXT_ADDR: u64 = 0x201040;
    const TEXT_SIZE: u64 = 0x100;

    fn func(name: &'static str, into_text: u64) -> Sym {
        Sym { name, st_type: STT_FUNC, shndx: TEXT, value: TEXT_ADDR + into_text, hidden: false }
    }

    /// A small ET_DYN: `.text` at file offset 0x40 (address 0x201040) in
    /// one executable PT_LOAD, `.symtab`, and `.dynsym` with `.gnu.version`.
    fn synthetic_elf(symtab: &[Sym], dynsym: &[Sym]) -> Vec<u8> {
        fn table(syms: &[Sym]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
            let (mut entries, mut names, mut versions) = (vec![0; 24], vec![0], vec![0, 0]);
            for sym in syms {
                entries.extend((names.len() as u32).to_le_bytes());
                entries.extend([sym.st_type | 0x10, 0]);
                entries.extend(sym.shndx.to_le_bytes());
                entries.extend(sym.value.to_le_bytes());
                entries.extend(8u64.to_le_bytes());
                names.extend(sym.name.as_bytes());
                names.push(0);
                versions.extend((if sym.hidden { 0x8002u16 } else { 2 }).to_le_bytes());
            }
            (entries, names, versions)
        }
        let (symtab, strtab, _) = table(symtab);
        let (dynsym, dynstr, versym) = table(dynsym);
        let mut file = vec![0u8; TEXT_OFFSET as usize];
        file.extend([0xcc; TEXT_SIZE as usize]);
        // (type, flags, addr, offset, size, link, entsize) per section.
        let mut shdrs = vec![(0, 0, 0, 0, 0, 0, 0), (1, 6, TEXT_ADDR, TEXT_OFFSET, TEXT_SIZE, 0, 0)];
        for (type_, data, link, entsize) in [
            (SHT_SYMTAB, &symtab, 3, 24),
            (SHT_STRTAB, &strtab, 0, 0),
            (SHT_DYNSYM, &dynsym, 5, 24),
            (SHT_STRTAB, &dynstr, 0, 0),
            (SHT_GNU_VERSYM, &versym, 4, 2),
        ] {
            shdrs.push((type_, 0, 0, file.len() as u64, data.len() as u64, link, entsize));
            file.extend(data);
        }
        shdrs.push((SHT_NOBITS, 3, 0x300000, file.len() as u64, 0x1000, 0, 0));
        let phoff = file.len() as u64;
        file.extend(PT_LOAD.to_le_bytes());
        file.extend(5u32.to_le_bytes());
        for field in [0, TEXT_ADDR - TEXT_OFFSET, TEXT_ADDR - TEXT_OFFSET, phoff, phoff, 0x1000] {
            file.extend(u64::to_le_bytes(field));
        }
        let shoff = file.len() as u64;
        for (type_, flags, addr, offset, size, link, entsize) in shdrs {
            file.extend(0u32.to_le_bytes());
            file.extend(u32::to_le_bytes(type_));
            for field in [flags, addr, offset, size] {
                file.extend(u64::to_le_bytes(field));
            }
            file.extend(u32::to_le_bytes(link));
            file.extend(0u32.to_le_bytes());
            file.extend(8u64.to_le_bytes());
            file.extend(u64::to_le_bytes(entsize));
        }
        let mut ehdr = [0u8; 64];
        ehdr[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x00");
        ehdr[16..18].copy_from_slice(&3u16.to_le_bytes());
        ehdr[18..20].copy_from_slice(&62u16.to_le_bytes());
        ehdr[32..40].copy_from_slice(&phoff.to_le_bytes());
        ehdr[40..48].copy_from_slice(&shoff.to_le_bytes());
        ehdr[52..54].copy_from_slice(&64u16.to_le_bytes());
        ehdr[54..56].copy_from_slice(&56u16.to_le_bytes());
        ehdr[56..58].copy_from_slice(&1u16.to_le_bytes());
        ehdr[58..60].copy_from_slice(&64u16.to_le_bytes());
        ehdr[60..62].copy_from_slice(&8u16.to_le_bytes());
        file[..64].copy_from_slice(&ehdr);
        file
    }

    fn lookup(elf: &[u8], name: &str) -> Lookup<u64> {
        find_symbol(elf, name.as_bytes()).map(|f| f.file_offset)
    }

    #[test]
    fn synthetic_offsets_are_address_minus_section_address_plus_section_offset() {
        let elf = synthetic_elf(&[func("first", 0), func("second", 0x10)], &[func("exported", 0x20)]);
        assert_eq!(lookup(&elf, "first"), Ok(TEXT_OFFSET));
        assert_eq!(lookup(&elf, "second"), Ok(TEXT_OFFSET + 0x10));
        assert_eq!(lookup(&elf, "exported"), Ok(TEXT_OFFSET + 0x20));
        assert_eq!(lookup(&elf, "secon"), Err(Failure::NotFound { unusable: 0 }));
        assert_eq!(lookup(&elf, "second2"), Err(Failure::NotFound { unusable: 0 }));
    }

    #[test]
    fn only_defined_functions_in_loaded_code_count() {
        let elf = synthetic_elf(
            &[
                Sym { st_type: 0, ..func("untyped", 0) },
                Sym { st_type: 1, ..func("object", 0) },
                Sym { shndx: 0, ..func("undefined", 0) },
                Sym { shndx: 0xfff1, ..func("absolute", 0) },
                Sym { value: 0, ..func("zero", 0) },
                Sym { shndx: BSS, value: 0x300010, ..func("in_bss", 0) },
                Sym { shndx: 42, ..func("no_such_section", 0) },
                func("past_text", TEXT_SIZE),
            ],
            &[],
        );
        for name in ["untyped", "object", "undefined", "absolute", "zero"] {
            assert_eq!(lookup(&elf, name), Err(Failure::NotFound { unusable: 0 }), "{name}");
        }
        for name in ["in_bss", "no_such_section", "past_text"] {
            assert_eq!(lookup(&elf, name), Err(Failure::NotFound { unusable: 1 }), "{name}");
        }
    }

    #[test]
    fn same_offset_twice_is_fine_different_offsets_are_ambiguous() {
        let elf =
            synthetic_elf(&[func("alias", 8), func("local", 0), func("local", 0x40)], &[func("alias", 8)]);
        assert_eq!(lookup(&elf, "alias"), Ok(TEXT_OFFSET + 8));
        assert_eq!(lookup(&elf, "local"), Err(Failure::Ambiguous(TEXT_OFFSET, TEXT_OFFSET + 0x40)));
        let dir = ScratchDir::new("elf");
        dir.write("ambiguous", &elf);
        let e = symbol_file_offset(&dir.path().join("ambiguous"), "local").unwrap_err();
        assert_eq!(e, Error::invalid("the symbol is ambiguous in this binary: give a file offset instead"));
    }

    #[test]
    fn an_offset_into_a_function_stays_inside_it() {
        // Every synthetic symbol is 8 bytes long.
        let elf = synthetic_elf(&[func("f", 0x10)], &[]);
        assert_eq!(find_symbol(&elf[..], b"f"), Ok(Function { file_offset: TEXT_OFFSET + 0x10, size: 8 }));
        let dir = ScratchDir::new("elf");
        dir.write("f", &elf);
        let path = dir.path().join("f");
        assert_eq!(function_file_offset(&path, "f", 0), Ok(TEXT_OFFSET + 0x10));
        assert_eq!(function_file_offset(&path, "f", 7), Ok(TEXT_OFFSET + 0x17));
        let e = function_file_offset(&path, "f", 8).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(
            e.to_string().contains("f is 0x8 bytes long") && e.to_string().contains("past the end"),
            "{e}"
        );
        assert_eq!(function_file_offset(&path, "f", u64::MAX).unwrap_err().errno(), libc::EINVAL);
    }

    #[test]
    fn the_default_version_wins() {
        let elf = synthetic_elf(&[func("wait@V1", 0x10), func("wait@@V2", 0x20)], &[]);
        assert_eq!(lookup(&elf, "wait"), Ok(TEXT_OFFSET + 0x20));
        assert_eq!(lookup(&elf, "wait@V1"), Ok(TEXT_OFFSET + 0x10));
        assert_eq!(lookup(&elf, "wait@@V2"), Ok(TEXT_OFFSET + 0x20));
        assert_eq!(lookup(&elf, "wait@"), Err(Failure::NotFound { unusable: 0 }));
        let dynamic = synthetic_elf(&[], &[Sym { hidden: true, ..func("wait", 0x10) }, func("wait", 0x20)]);
        assert_eq!(lookup(&dynamic, "wait"), Ok(TEXT_OFFSET + 0x20));
        let two_defaults = synthetic_elf(&[func("wait@@V1", 0x10), func("wait@@V2", 0x20)], &[]);
        assert!(matches!(lookup(&two_defaults, "wait"), Err(Failure::Ambiguous(..))));
    }

    #[test]
    fn an_ifunc_is_refused() {
        let ifunc = Sym { st_type: STT_GNU_IFUNC, ..func("memcpy@@V2", 0x30) };
        let elf = synthetic_elf(&[func("memcpy@V1", 0x10), ifunc], &[]);
        assert_eq!(lookup(&elf, "memcpy"), Err(Failure::Ifunc(TEXT_OFFSET + 0x30)));
        assert_eq!(lookup(&elf, "memcpy@V1"), Ok(TEXT_OFFSET + 0x10));
        let dir = ScratchDir::new("elf");
        dir.write("ifunc", &elf);
        let e = symbol_file_offset(&dir.path().join("ifunc"), "memcpy").unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(e.to_string().contains("IFUNC"), "{e}");
    }

    #[test]
    fn other_classes_and_byte_orders_are_not_elf() {
        let elf = synthetic_elf(&[func("f", 0)], &[]);
        assert_eq!(lookup(&elf, "f"), Ok(TEXT_OFFSET));
        for (at, value) in [(0, 0x7e), (4, 1), (5, 2), (58, 40), (54, 32)] {
            let mut bad = elf.clone();
            bad[at] = value;
            assert_eq!(lookup(&bad, "f"), Err(Failure::NotElf), "byte {at} = {value}");
        }
    }

    #[test]
    fn a_file_cut_short_is_not_elf() {
        let elf = synthetic_elf(&[func("f", 0)], &[]);
        let dir = ScratchDir::new("elf");
        dir.write("cut", &elf[..elf.len() - 1]);
        let e = symbol_file_offset(&dir.path().join("cut"), "f").unwrap_err();
        assert_eq!(e, Error::new(libc::ENOEXEC, What::NotElf));
    }

    /// A small linear congruential generator: reproducible, no dependency.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, bound: usize) -> usize {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 33) % bound as u64) as usize
        }
    }

    #[test]
    fn truncated_synthetic_files_never_panic() {
        let elf = synthetic_elf(&[func("f", 0), func("g@@V", 8)], &[func("f", 0)]);
        for len in 0..elf.len() {
            let _ = lookup(&elf[..len], "f");
        }
    }

    #[test]
    fn flipped_synthetic_bytes_never_panic() {
        let mut elf =
            synthetic_elf(&[func("f", 0), func("g@@V", 8)], &[Sym { hidden: true, ..func("f", 0) }]);
        let mut rng = Lcg(1);
        for _ in 0..20_000 {
            let (at, value) = (rng.below(elf.len()), rng.below(256) as u8);
            let was = core::mem::replace(&mut elf[at], value);
            let _ = lookup(&elf, "f");
            let _ = lookup(&elf, "g");
            elf[at] = was;
        }
    }

    #[test]
    fn a_real_library_cut_or_flipped_never_panics() {
        let mut libc = std::fs::read(libc_path()).unwrap();
        let full = lookup(&libc, "malloc").unwrap();
        let layout = read_layout(libc.as_slice()).unwrap();
        // The bytes a lookup reads: headers, and the symbol and string tables.
        let mut read_ranges = vec![(0, 4096)];
        for section in &layout.sections {
            if matches!(section.type_, SHT_SYMTAB | SHT_DYNSYM | SHT_STRTAB | SHT_GNU_VERSYM) {
                read_ranges.push((section.offset as usize, section.size as usize));
            }
        }
        let shoff = u64::from_le_bytes(libc[40..48].try_into().unwrap()) as usize;
        read_ranges.push((shoff, libc.len() - shoff));

        for len in (0..8192).chain([shoff, shoff + 1, shoff + 64, libc.len() - 64, libc.len() - 1]) {
            assert!(lookup(&libc[..len], "malloc").is_err());
        }
        let mut rng = Lcg(7);
        for _ in 0..3000 {
            let (start, size) = read_ranges[rng.below(read_ranges.len())];
            let at = start + rng.below(size.max(1));
            let value = rng.below(256) as u8;
            let was = core::mem::replace(&mut libc[at], value);
            let _ = lookup(&libc, "malloc");
            libc[at] = was;
        }
        assert_eq!(lookup(&libc, "malloc"), Ok(full));
    }
}
