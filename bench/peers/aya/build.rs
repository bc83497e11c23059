// Builds the repository's BPF producer (c-tests/producer.c) and the peer
// rows' producer loop (bench/peers/peer_producer.c) into this binary.
fn main() {
    let files = ["../../../c-tests/producer.c", "../peer_producer.c"];
    for f in files.iter().chain(["../../../c-tests/producer.h", "../peer_producer.h"].iter()) {
        println!("cargo:rerun-if-changed={f}");
    }
    cc::Build::new().files(files).flag("-std=gnu11").warnings(true).compile("peer_producer");
}
