// What the Go peers of the benchmark share (bench/peers/cilium,
// bench/peers/perfbuf-go): the C producer and the row loop.
module perfbench/peers/gopeer

go 1.19
