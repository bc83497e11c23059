//! Without libFuzzer: the checked-in corpus is exactly what the generator
//! makes, every seed passes its target's checks, and each seed's input
//! layout round-trips.

use perfbuf_fuzz::{decode, ring, ringbuf, seeds, tracepoint};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

fn checked_in(target: &str) -> BTreeMap<String, Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.expect("dir entry");
            (e.file_name().into_string().expect("utf-8 name"), fs::read(e.path()).expect("read seed"))
        })
        .collect()
}

#[test]
fn corpus_is_generated() {
    for target in seeds::TARGETS {
        let generated: BTreeMap<_, _> = seeds::for_target(target).into_iter().collect();
        assert_eq!(generated.len(), seeds::for_target(target).len(), "{target}: duplicate seed names");
        assert!(
            checked_in(target) == generated,
            "corpus/{target} is stale: run `cargo run --bin gen-corpus` in fuzz/"
        );
    }
}

#[test]
fn ring_seeds_pass() {
    for (name, bytes) in seeds::ring_seeds() {
        let input = ring::RingInput::parse(&bytes).unwrap_or_else(|| panic!("{name}: too short"));
        assert_eq!(input.encode(), bytes, "{name}: layout does not round-trip");
        println!("{name}");
        ring::run(&bytes);
    }
}

#[test]
fn ringbuf_seeds_pass() {
    for (name, bytes) in seeds::ringbuf_seeds() {
        assert!(ringbuf::RingbufInput::parse(&bytes).is_some(), "{name}: too short");
        println!("{name}");
        ringbuf::run(&bytes);
    }
}

#[test]
fn decode_seeds_pass() {
    for (name, bytes) in seeds::decode_seeds() {
        let input = decode::DecodeInput::parse(&bytes).unwrap_or_else(|| panic!("{name}: too short"));
        assert_eq!(input.encode(), bytes, "{name}: layout does not round-trip");
        println!("{name}");
        decode::run(&bytes);
    }
}

#[test]
fn tracepoint_seeds_pass() {
    for (name, bytes) in seeds::tracepoint_seeds() {
        println!("{name}");
        tracepoint::run(&bytes);
    }
    // The real record decodes as the kernel rendered it.
    let seed = seeds::tracepoint_seeds().into_iter().find(|s| s.0 == "tp-exec-record").unwrap().1;
    let (text, raw) = tracepoint::split(&seed);
    let format = perfbuf::tracepoint::Format::parse(&text).unwrap();
    assert_eq!(format.field("filename").unwrap().decode(raw).unwrap().as_str(), Some("/usr/bin/true"));
    assert_eq!(format.field("pid").unwrap().decode(raw).unwrap().as_i64(), Some(31925));
}

/// Short and arbitrary inputs are fine too (the fuzzer's first inputs).
#[test]
fn short_inputs_pass() {
    for len in 0..64 {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
        ring::run(&bytes);
        ringbuf::run(&bytes);
        decode::run(&bytes);
        tracepoint::run(&bytes);
    }
}

/// Decoder seeds named for an error fail, the others decode (the `c-`
/// seeds are about the C arguments, whatever the record).
#[test]
fn decode_seeds_mean_what_they_say() {
    let errors = [
        "unsupported-type",
        "unknown-sample-type-bit",
        "trailing",
        "short-body",
        "size-below-header",
        "misaligned-array",
        "count-overflow",
        "stack-dyn-size-beyond",
        "mmap2-build-id-too-long",
        "namespaces-huge-nr",
        "comm-without-nul",
        "comm-name-into-trailer",
    ];
    for (name, bytes) in seeds::decode_seeds() {
        let short = name.trim_start_matches("decode-");
        if short.starts_with("c-") {
            continue;
        }
        let input = decode::DecodeInput::parse(&bytes).expect("parses");
        let result = perfbuf::decode::decode(input.record, &input.attr);
        assert_eq!(result.is_err(), errors.contains(&short), "{name}: {:?}", result.map(|_| ()));
    }
}

/// The reproducers in fuzz/regressions/, TARGET/NAME: a new one is added
/// here too, so that one that goes missing fails the replay.
const REGRESSIONS: [&str; 2] =
    ["ring/drain-resyncs-empty-misaligned-ring", "ring/drain-spans-counts-skipped-bytes"];

/// Inputs on which the fuzzer once found a library bug (fuzz/regressions/)
/// stay fixed: exactly the reproducers listed above are there, and each
/// replays through its target's harness.
#[test]
fn regressions_replay() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let mut found = Vec::new();
    for dir in fs::read_dir(&root).expect("fuzz/regressions/") {
        let dir = dir.expect("dir entry");
        let target = dir.file_name().into_string().expect("a UTF-8 name");
        assert!(seeds::TARGETS.contains(&target.as_str()), "regressions/{target}: no such fuzz target");
        for entry in fs::read_dir(dir.path()).expect("a target's reproducers") {
            let path = entry.expect("dir entry").path();
            let bytes = fs::read(&path).expect("read reproducer");
            println!("{}", path.display());
            // Each reproducer goes to its own target's harness.
            match target.as_str() {
                "ring" => ring::run(&bytes),
                "decode" => decode::run(&bytes),
                _ => tracepoint::run(&bytes),
            }
            found.push(format!("{target}/{}", path.file_name().unwrap().to_string_lossy()));
        }
    }
    found.sort();
    assert_eq!(found, REGRESSIONS, "fuzz/regressions/ holds other reproducers than the list");
}

/// `PERFBUF_FUZZ_REPLAY=ring:DIR` (or `decode:DIR`) replays every file of
/// DIR through the plain harness: a crash found by libFuzzer, or a grown
/// corpus under Miri (`cargo +nightly miri test`, with
/// `MIRIFLAGS=-Zmiri-disable-isolation`).
#[test]
fn replay_dir() {
    let Ok(spec) = std::env::var("PERFBUF_FUZZ_REPLAY") else { return };
    let (target, dir) = spec.split_once(':').expect("PERFBUF_FUZZ_REPLAY=target:dir");
    let mut files: Vec<_> =
        fs::read_dir(dir).expect("replay dir").map(|e| e.expect("entry").path()).collect();
    files.sort();
    for path in &files {
        println!("{}", path.display());
        let bytes = fs::read(path).expect("read input");
        match target {
            "ring" => ring::run(&bytes),
            "decode" => decode::run(&bytes),
            _ => panic!("unknown target {target}"),
        }
    }
    println!("replayed {} inputs", files.len());
}
