//! EVENT arguments of `perfbuf trace`, parsed before anything is opened:
//!
//! - `SUBSYSTEM:EVENT` (or `t:SUBSYSTEM:EVENT`): a tracepoint;
//! - `u:PATH:SYMBOL[+OFFSET][%return] [ARG...]`: a uprobe (`%return`: on
//!   return, which takes no OFFSET); `u:PATH:0xFILE_OFFSET[%return]` places
//!   it at a file offset (`uprobe_events` syntax);
//! - `k:SYMBOL[+OFFSET][%return] [ARG...]`: a kprobe;
//!
//! where each ARG is `NAME=FETCH[:TYPE]`, as `perf probe` writes them:
//! FETCH is `%REG`, `@ADDR`, `$argN`, `$retval` (return probes), `$stackN`,
//! or `+OFF(FETCH)` / `-OFF(FETCH)` (memory at an offset from another
//! fetch); TYPE is `u8`..`u64`, `s8`..`s64`, `x8`..`x64` or `string`.

use std::fmt;

/// One event to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    Tracepoint { system: String, name: String },
    Probe(Probe),
}

/// A uprobe or kprobe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The binary for a uprobe; `None` for a kprobe.
    pub binary: Option<String>,
    /// The function; `None`: a uprobe at file offset `offset`.
    pub symbol: Option<String>,
    /// Bytes into the function, or the file offset.
    pub offset: u64,
    pub ret: bool,
    pub args: Vec<ProbeArg>,
}

/// `NAME=FETCH[:TYPE]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeArg {
    pub name: String,
    pub fetch: String,
    pub type_: ArgType,
}

/// How a probe argument is read and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgType {
    Unsigned(u8),
    Signed(u8),
    Hex(u8),
    String,
    /// A string in user memory, which a kprobe reads only as this type.
    UserString,
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::Tracepoint { system, name } => write!(f, "{system}:{name}"),
            Spec::Probe(p) => {
                match &p.binary {
                    Some(bin) => write!(f, "u:{bin}:")?,
                    None => write!(f, "k:")?,
                }
                match &p.symbol {
                    Some(symbol) if p.offset != 0 => write!(f, "{symbol}+{:#x}", p.offset)?,
                    Some(symbol) => write!(f, "{symbol}")?,
                    None => write!(f, "{:#x}", p.offset)?,
                }
                if p.ret {
                    write!(f, "%return")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for ArgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgType::Unsigned(b) => write!(f, "u{b}"),
            ArgType::Signed(b) => write!(f, "s{b}"),
            ArgType::Hex(b) => write!(f, "x{b}"),
            ArgType::String => f.write_str("string"),
            ArgType::UserString => f.write_str("ustring"),
        }
    }
}

/// The kernel's dynamic-event syntax (`NAME=FETCH:TYPE`), which is also
/// the one parsed here.
impl fmt::Display for ProbeArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}:{}", self.name, self.fetch, self.type_)
    }
}

/// A probe's arguments as the kernel takes them, space-separated.
pub fn kernel_args(args: &[ProbeArg]) -> String {
    args.iter().map(ProbeArg::to_string).collect::<Vec<_>>().join(" ")
}

/// Parses one EVENT argument; the error says what is wrong and how to
/// write it.
pub fn parse(text: &str) -> Result<Spec, String> {
    let mut words = text.split_whitespace();
    let head = words.next().ok_or("empty event: give e.g. sched:sched_process_exec")?;
    let args: Vec<&str> = words.collect();
    if let Some(rest) = head.strip_prefix("u:") {
        let (binary, site) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("uprobe `{head}`: write u:/path/to/binary:symbol"))?;
        if !binary.starts_with('/') {
            return Err(format!(
                "uprobe `{head}`: the binary needs an absolute path (u:/usr/bin/bash:readline)"
            ));
        }
        return probe(Some(binary.to_string()), site, &args, head);
    }
    if let Some(site) = head.strip_prefix("k:") {
        return probe(None, site, &args, head);
    }
    if !args.is_empty() {
        return Err(format!("event `{text}`: only probes (u:, k:) take arguments"));
    }
    let tp = head.strip_prefix("t:").unwrap_or(head);
    match tp.split_once(':') {
        Some((system, name)) if ident(system) && ident(name) => {
            Ok(Spec::Tracepoint { system: system.to_string(), name: name.to_string() })
        }
        _ => Err(format!(
            "unknown event `{text}`: write SUBSYSTEM:EVENT (sched:sched_process_exec), u:/path:symbol or k:symbol"
        )),
    }
}

fn ident(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

fn probe(binary: Option<String>, site: &str, args: &[&str], head: &str) -> Result<Spec, String> {
    let (site, ret) = match site.strip_suffix("%return") {
        Some(s) => (s, true),
        None => (site, false),
    };
    let args = args.iter().map(|a| parse_arg(a, ret)).collect::<Result<Vec<_>, _>>()?;
    // A C symbol never starts with a digit: `0x1139` is a file offset.
    if binary.is_some() && site.starts_with(|c: char| c.is_ascii_digit()) {
        let offset = parse_number(site)
            .ok_or_else(|| format!("`{head}`: bad file offset `{site}` (write 0xHEX or decimal)"))?;
        return Ok(Spec::Probe(Probe { binary, symbol: None, offset, ret, args }));
    }
    let (symbol, offset) = match site.split_once('+') {
        Some((sym, off)) => (sym, parse_number(off).ok_or_else(|| format!("`{head}`: bad offset `{off}`"))?),
        None => (site, 0),
    };
    if symbol.is_empty() || !symbol.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.') {
        return Err(format!("`{head}`: bad symbol `{symbol}` (write SYMBOL[+OFFSET][%return])"));
    }
    if ret && offset != 0 {
        return Err(format!(
            "`{head}`: a return probe goes at the function's entry, without +OFFSET (the kernel would take \
             another stack word for the return address, and the program would crash)"
        ));
    }
    Ok(Spec::Probe(Probe { binary, symbol: Some(symbol.to_string()), offset, ret, args }))
}

fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn parse_arg(text: &str, ret: bool) -> Result<ProbeArg, String> {
    let (name, rest) = text
        .split_once('=')
        .ok_or_else(|| format!("probe argument `{text}`: write NAME=FETCH[:TYPE], e.g. ret=$retval:u64"))?;
    if !ident(name) {
        return Err(format!("probe argument `{text}`: bad name `{name}`"));
    }
    let (fetch, type_) = match rest.rsplit_once(':') {
        Some((fetch, ty)) => (
            fetch,
            parse_type(ty).ok_or_else(|| {
                format!("probe argument `{text}`: unknown type `{ty}` (u8..u64, s8..s64, x8..x64, string, ustring)")
            })?,
        ),
        None => (rest, ArgType::Unsigned(64)),
    };
    check_fetch(fetch, ret).map_err(|why| format!("probe argument `{text}`: {why}"))?;
    Ok(ProbeArg { name: name.to_string(), fetch: fetch.to_string(), type_ })
}

fn parse_type(ty: &str) -> Option<ArgType> {
    match ty {
        "string" => return Some(ArgType::String),
        "ustring" => return Some(ArgType::UserString),
        _ => {}
    }
    let (kind, bits) = ty.split_at(1);
    let bits: u8 = bits.parse().ok().filter(|b| matches!(b, 8 | 16 | 32 | 64))?;
    match kind {
        "u" => Some(ArgType::Unsigned(bits)),
        "s" => Some(ArgType::Signed(bits)),
        "x" => Some(ArgType::Hex(bits)),
        _ => None,
    }
}

fn check_fetch(fetch: &str, ret: bool) -> Result<(), String> {
    if let Some(inner) = fetch.strip_prefix(['+', '-']) {
        let open = inner.find('(').ok_or("write +OFF(FETCH)")?;
        let (off, rest) = inner.split_at(open);
        parse_number(off).ok_or_else(|| format!("bad offset `{off}`"))?;
        let nested =
            rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')).ok_or("unbalanced parentheses")?;
        return check_fetch(nested, ret);
    }
    if fetch == "$retval" {
        return if ret { Ok(()) } else { Err("$retval needs a return probe (SYMBOL%return)".into()) };
    }
    let ok = fetch.strip_prefix("$arg").is_some_and(|n| n.parse::<u8>().is_ok())
        || fetch.strip_prefix("$stack").is_some_and(|n| n.parse::<u16>().is_ok())
        || fetch
            .strip_prefix('%')
            .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_alphanumeric()))
        || fetch.strip_prefix('@').is_some_and(|a| parse_number(a).is_some());
    if ok {
        Ok(())
    } else {
        Err(format!("unknown fetch `{fetch}` ($argN, $retval, $stackN, %REG, @ADDR, +OFF(FETCH))"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracepoints() {
        assert_eq!(
            parse("sched:sched_process_exec").unwrap(),
            Spec::Tracepoint { system: "sched".into(), name: "sched_process_exec".into() }
        );
        assert_eq!(parse("t:irq:irq_handler_entry").unwrap().to_string(), "irq:irq_handler_entry");
        assert!(parse("sched").unwrap_err().contains("SUBSYSTEM:EVENT"));
        assert!(parse("sched:exec x=1").is_err());
    }

    #[test]
    fn uprobe_with_arguments() {
        let Spec::Probe(p) = parse("u:/bin/bash:readline%return ret=+0($retval):string").unwrap() else {
            panic!("not a probe")
        };
        assert_eq!(p.binary.as_deref(), Some("/bin/bash"));
        assert_eq!((p.symbol.as_deref(), p.ret, p.offset), (Some("readline"), true, 0));
        assert_eq!(
            p.args,
            vec![ProbeArg { name: "ret".into(), fetch: "+0($retval)".into(), type_: ArgType::String }]
        );
        let Spec::Probe(p) = parse("u:/x/y:f+0x10 a=$arg1:s32 b=%di c=-8(+16(%sp)):x64").unwrap() else {
            panic!("not a probe")
        };
        assert_eq!(p.offset, 16);
        assert_eq!(p.args[0].type_, ArgType::Signed(32));
        assert_eq!(p.args[1].type_, ArgType::Unsigned(64));
        assert_eq!(p.args[2].type_, ArgType::Hex(64));
        assert_eq!(kernel_args(&p.args), "a=$arg1:s32 b=%di:u64 c=-8(+16(%sp)):x64");
        let Spec::Probe(p) = parse("u:/x/y:f%return r=+0($retval):string n=$retval:u8").unwrap() else {
            panic!("not a probe")
        };
        assert_eq!(kernel_args(&p.args), "r=+0($retval):string n=$retval:u8");
        let Spec::Probe(p) = parse("k:do_sys_openat2 path=+0($arg2):ustring").unwrap() else {
            panic!("not a probe")
        };
        assert_eq!(p.args[0].type_, ArgType::UserString);
        assert_eq!(kernel_args(&p.args), "path=+0($arg2):ustring");
    }

    #[test]
    fn probe_mistakes() {
        assert!(parse("u:bash:readline").unwrap_err().contains("absolute path"));
        assert!(parse("u:/bin/bash:readline r=$retval").unwrap_err().contains("%return"));
        assert!(parse("u:/bin/bash:readline r=$arg1:u7").unwrap_err().contains("unknown type"));
        assert!(parse("u:/bin/bash:readline r=+0($arg1").unwrap_err().contains("parentheses"));
        assert!(parse("k:do_sys_open%return").is_ok());
        assert!(parse("k:").is_err());
        assert!(parse("u:/bin/bash:readline+4%return").unwrap_err().contains("function's entry"));
        assert!(parse("u:/bin/bash:0xzz").unwrap_err().contains("bad file offset"));
    }

    #[test]
    fn offsets_and_file_offsets() {
        let Spec::Probe(p) = parse("u:/x/y:work+4 n=%di:s32").unwrap() else { panic!("not a probe") };
        assert_eq!((p.symbol.as_deref(), p.offset), (Some("work"), 4));
        assert_eq!(Spec::Probe(p).to_string(), "u:/x/y:work+0x4");
        let Spec::Probe(p) = parse("u:/x/y:0x1139%return").unwrap() else { panic!("not a probe") };
        assert_eq!((p.symbol, p.offset, p.ret), (None, 0x1139, true));
        assert_eq!(parse("u:/x/y:4409").unwrap().to_string(), "u:/x/y:0x1139");
        assert_eq!(parse("k:vfs_read+0x10").unwrap().to_string(), "k:vfs_read+0x10");
    }
}
