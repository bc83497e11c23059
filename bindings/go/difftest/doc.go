// Package difftest runs the same scenarios through cilium/ebpf's
// perf.Reader (Debian's golang-github-cilium-ebpf-dev, 0.9.1) and through
// perfbuf.dev/perfbuf/perf, and compares what a program observes: the
// records and their order per CPU, lost counts, errors, close behaviour
// and what BPF's bpf_perf_event_output returns around Pause and Close.
// What 0.9.1 lacks (SetDeadline, Flush, WakeupEvents, Overwritable,
// Remaining) is tested against v0.16's semantics in perf's own tests.
// ringbuf_test.go does the same for cilium's ringbuf.Reader and
// perfbuf.dev/perfbuf/ringbuf over a BPF_MAP_TYPE_RINGBUF: records, a full
// ring, Close, a map of the wrong type (0.9.1 has no SetDeadline, Flush
// or Remaining: ringbuf's own tests hold those to v0.16's semantics).
package difftest
