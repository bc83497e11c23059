/* A real BPF producer for tests and benchmarks: a PERF_EVENT_ARRAY map and
 * two hand-assembled tc programs that call bpf_perf_event_output, run with
 * BPF_PROG_TEST_RUN on a chosen CPU. Uses only the bpf(2) syscall, never
 * libbpf, so it links beside libbpf or libperfbuf alike. */
#ifndef PERFBUF_PRODUCER_H
#define PERFBUF_PRODUCER_H

#include <stdint.h>

struct producer {
	int map_fd;	   /* BPF_MAP_TYPE_PERF_EVENT_ARRAY, u32 -> u32 */
	int det_prog_fd;   /* sample = packet[2..10) then packet[0..cnt) */
	int stamp_prog_fd; /* sample = bpf_ktime_get_ns() then packet[0..cnt) */
};

/* Largest payload producer_emit_det accepts. */
#define PRODUCER_MAX_N 3000

/* Creates the map (max_entries 0 = number of possible CPUs) and loads both
 * programs. Returns 0 or -errno (the verifier log goes to stderr). */
int producer_open(struct producer *p, unsigned max_entries);
void producer_close(struct producer *p);

/* Runs a program `repeat` times on `cpu` with packet `pkt` (at least 14
 * bytes: u16 cnt, then anything). Each run outputs 8 bytes of meta plus the
 * first cnt packet bytes with BPF_F_CURRENT_CPU. *helper_ret gets the last
 * run's bpf_perf_event_output result (0, -ENOSPC, -ENOENT, ...).
 * Returns 0 or -errno. */
int producer_emit(struct producer *p, int use_stamp, int cpu, const void *pkt, unsigned pkt_len,
		  unsigned repeat, int *helper_ret);

/* Emits `repeat` deterministic samples of n bytes (8 <= n <= PRODUCER_MAX_N)
 * on `cpu`; their bytes are producer_expected(n, seed). */
int producer_emit_det(struct producer *p, int cpu, unsigned n, uint8_t seed, unsigned repeat, int *helper_ret);

/* The n payload bytes a consumer sees for producer_emit_det(n, seed). */
void producer_expected(unsigned n, uint8_t seed, uint8_t *out);

/* Emits `repeat` samples of n bytes (n >= 8) whose first 8 bytes are the
 * bpf_ktime_get_ns() of the write (CLOCK_MONOTONIC). */
int producer_emit_stamped(struct producer *p, int cpu, unsigned n, unsigned repeat, int *helper_ret);

/* Emits one sample of n bytes (16 <= n <= PRODUCER_MAX_N) on `cpu`:
 * u64 bpf_ktime_get_ns(), u16 n-8, u32 seq, u8 cpu, then zeros. For
 * ordering tests: (cpu, seq) identifies each record. */
int producer_emit_stamped_seq(struct producer *p, int cpu, unsigned n, uint32_t seq, int *helper_ret);

#endif
