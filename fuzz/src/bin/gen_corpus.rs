//! Writes the seed corpus: `cargo run --bin gen-corpus` (from `fuzz/`)
//! replaces `corpus/ring/` and `corpus/decode/` with the seeds of
//! `perfbuf_fuzz::seeds`. An optional argument names another output root.

use std::fs;
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let root = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus"), PathBuf::from);
    for target in perfbuf_fuzz::seeds::TARGETS {
        let dir = root.join(target);
        // Replace, so a renamed or dropped seed does not linger.
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
        let seeds = perfbuf_fuzz::seeds::for_target(target);
        for (name, bytes) in &seeds {
            fs::write(dir.join(name), bytes)?;
        }
        println!("{}: {} seeds", dir.display(), seeds.len());
    }
    Ok(())
}
