//! Without libFuzzer: the checked-in corpus is exactly what the generator
//! makes, every seed passes its target's checks, and each seed's input
//! layout round-trips.

use perfbuf_fuzz::{decode, ring, seeds};
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
fn decode_seeds_pass() {
    for (name, bytes) in seeds::decode_seeds() {
        let input = decode::DecodeInput::parse(&bytes).unwrap_or_else(|| panic!("{name}: too short"));
        assert_eq!(input.encode(), bytes, "{name}: layout does not round-trip");
        println!("{name}");
        decode::run(&bytes);
    }
}

/// Short and arbitrary inputs are fine too (the fuzzer's first inputs).
#[test]
fn short_inputs_pass() {
    for len in 0..64 {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
        ring::run(&bytes);
        decode::run(&bytes);
    }
}
