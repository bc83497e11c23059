// Package difftest runs the same scenarios through cilium/ebpf's
// perf.Reader (Debian's golang-github-cilium-ebpf-dev, 0.9.1) and through
// perfbuf.dev/perfbuf/perf, and compares what a program observes: the
// records and their order per CPU, lost counts, errors, close behaviour
// and what BPF's bpf_perf_event_output returns around Pause and Close.
// What 0.9.1 lacks (SetDeadline, Flush, WakeupEvents, Overwritable,
// Remaining) is tested against v0.16's semantics in perf's own tests.
package difftest
