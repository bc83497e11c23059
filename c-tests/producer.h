/* A real BPF producer for tests and benchmarks: a PERF_EVENT_ARRAY map and
 * two hand-assembled tc programs that call bpf_perf_event_output, run with
 * BPF_PROG_TEST_RUN on a chosen CPU; and, separately (struct
 * ringbuf_producer, for the benchmark), a BPF ring buffer written by the
 * same shape of program with bpf_ringbuf_output. Uses only the bpf(2)
 * syscall, never libbpf, so it links beside libbpf or libperfbuf alike. */
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

/* One BPF_PROG_TEST_RUN of any tc program `prog_fd` on `cpu`, `repeat` times,
 * with packet `pkt` (at least 14 bytes). *helper_ret gets the last run's
 * return value. Returns 0 or -errno. */
int producer_test_run(int prog_fd, int cpu, const void *pkt, unsigned pkt_len, unsigned repeat, int *helper_ret);

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

/* ---- The same producer shape into a BPF ring buffer ----
 * A separate struct, so struct producer keeps its layout (the Python tests
 * mirror it with ctypes). */
struct ringbuf_producer {
	int map_fd;	    /* BPF_MAP_TYPE_RINGBUF */
	int scratch_fd;	    /* PERCPU_ARRAY, 1 entry: the record is built here */
	int stats_fd;	    /* ARRAY, 1 entry: struct ringbuf_producer_stats */
	int prog_fd;	    /* sample = packet[2..10) then packet[0..cnt) */
	int ctl_prog_fd;    /* producer_ringbuf_ctl's: output, or reserve then submit/discard */
};

/* What the program counts itself: bpf_ringbuf_output's result is seen by
 * user space only for the last run of a BPF_PROG_TEST_RUN batch. */
struct ringbuf_producer_stats {
	uint64_t output_failed; /* calls of bpf_ringbuf_output that returned non-zero */
	int64_t last_error;	/* the last such result (e.g. -EAGAIN when full) */
};

/* Creates a ring buffer of `ringbuf_bytes` (a power of 2, a multiple of
 * the page size) and loads a tc program that copies the packet with
 * bpf_skb_load_bytes into a per-CPU scratch value and writes it with
 * bpf_ringbuf_output (flags 0: the kernel decides when to wake the reader).
 * Returns 0 or -errno (the verifier log goes to stderr). */
int producer_open_ringbuf(struct ringbuf_producer *r, unsigned ringbuf_bytes);
void producer_close_ringbuf(struct ringbuf_producer *r);

/* As producer_emit_det, into the ring buffer: `repeat` records of n bytes
 * (8 <= n <= PRODUCER_MAX_N) whose bytes are producer_expected(n, seed).
 * *helper_ret gets the last run's bpf_ringbuf_output result. */
int producer_emit_ringbuf(struct ringbuf_producer *r, int cpu, unsigned n, uint8_t seed, unsigned repeat,
			  int *helper_ret);

/* What producer_ringbuf_ctl's program does. */
enum ringbuf_op {
	RINGBUF_OUTPUT = 0,	     /* bpf_ringbuf_output of the record */
	RINGBUF_RESERVE_SUBMIT = 1,  /* bpf_ringbuf_reserve, fill, bpf_ringbuf_submit */
	RINGBUF_RESERVE_DISCARD = 2, /* bpf_ringbuf_reserve, fill, bpf_ringbuf_discard */
};

/* Size of the records producer_ringbuf_ctl writes: meta, then meta again. */
#define RINGBUF_CTL_SIZE 16

/* Runs the ctl program once on `cpu`: writes (or reserves and discards) a
 * RINGBUF_CTL_SIZE record holding `meta` twice, with `flags` (BPF_RB_*)
 * for the output, submit or discard. *helper_ret gets the helper's
 * result (0, -EAGAIN when full, -EINVAL for bad flags), or 1 when the
 * reservation failed. Returns 0 or -errno. */
int producer_ringbuf_ctl(struct ringbuf_producer *r, int cpu, enum ringbuf_op op, unsigned flags, uint64_t meta,
			 int *helper_ret);

/* Reads the program's own counters. Returns 0 or -errno. */
int producer_ringbuf_stats(const struct ringbuf_producer *r, struct ringbuf_producer_stats *out);

#endif
