/* The producer side of the peer rows (bench/peers/cilium, bench/peers/aya): the same BPF producer
 * as bench/perfbench.c (c-tests/producer.c, tc program calling
 * bpf_perf_event_output into a PERF_EVENT_ARRAY), driven by the same loop as
 * perfbench's produce(): bursts of 2000 BPF_PROG_TEST_RUN repeats of a
 * 64-byte sample on CPU 0 at full rate, or 1 ms bursts when paced. Called
 * from Go through cgo and from Rust through FFI, so the peers' readers face
 * exactly the producer perfbench's readers face. */
#ifndef PERFBENCH_PEER_PRODUCER_H
#define PERFBENCH_PEER_PRODUCER_H

#include <stdint.h>

/* Creates the producer (one map entry per possible CPU). Returns the
 * PERF_EVENT_ARRAY's fd, or -errno. */
int peer_producer_open(void);
void peer_producer_close(void);

/* Pins the calling thread to `cpu`. */
/* The same producer shape into a BPF ring buffer: its map fd (or -errno),
 * and how many bpf_ringbuf_output calls failed so far (ring full). */
int peer_ringbuf_open(void);
void peer_ringbuf_close(void);
uint64_t peer_ringbuf_failed(void);
/* Where peer_produce writes (ringbuf 0: the perf event array), and how many
 * records per call at full rate (0: 2000). */
void peer_set_target(int ringbuf, unsigned per_call);

void peer_pin(int cpu);

/* CLOCK_MONOTONIC and the calling thread's CPU time, in ns. */
double peer_now_ns(void);
double peer_thread_cpu_ns(void);

/* Runs on the calling thread, pinned to CPU 0, for `seconds`: `rate`
 * records/s of `size` bytes (0: as fast as it can). Sets *done to 1 at the
 * end and returns the number of records produced (calls of the helper). */
uint64_t peer_produce(double seconds, unsigned rate, unsigned size, volatile int *done);

#endif
