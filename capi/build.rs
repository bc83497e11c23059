//! Generates `include/perfbuf.h` with cbindgen and gives the shared library
//! its SONAME.
//!
//! The header is written to `$OUT_DIR/perfbuf.h` on every build; it is copied
//! over the checked-in `include/perfbuf.h` only when `PERFBUF_WRITE_HEADER=1`
//! (`make header`), and a unit test fails when the two differ.

use std::path::PathBuf;

/// Major version in the SONAME; bumped on an ABI break of the extensions.
const SOVERSION: &str = "0";

/// The files of the C face, in header order.
const FFI_SOURCES: &[&str] = &[
    "abi.rs",
    "libbpf.rs",
    "ring_buffer.rs",
    "names.rs",
    "ext.rs",
    "decode.rs",
    "records.rs",
    "batch_read.rs",
    "events.rs",
    "sideband.rs",
    "perfdata.rs",
    "event_records.rs",
];

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-env-changed=PERFBUF_WRITE_HEADER");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libperfbuf.so.{SOVERSION}");

    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("perfbuf.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    // The C face is capi/src/: its types and shims are the header (in a
    // fixed order, so the header does not change with the directory's).
    let mut builder = cbindgen::Builder::new().with_config(config);
    for file in FFI_SOURCES {
        builder = builder.with_src(crate_dir.join("src").join(file));
    }
    builder.generate().expect("cbindgen could not generate perfbuf.h").write_to_file(&out);

    if std::env::var("PERFBUF_WRITE_HEADER").as_deref() == Ok("1") {
        std::fs::copy(&out, crate_dir.join("../include/perfbuf.h")).expect("write include/perfbuf.h");
    }
}
