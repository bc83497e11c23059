/* The loss identity's test program (c-tests/bpf/accounted.bpf.c, built with
 * include/perfbuf.bpf.h), loaded with libbpf: a perf event array and a BPF
 * ring buffer written through perfbuf.bpf.h's counted wrappers, run with
 * BPF_PROG_TEST_RUN on a chosen CPU. Built into
 * build/libperfbuf_accounted.so for the Rust, Python and command tests. */
#ifndef PERFBUF_ACCOUNTED_H
#define PERFBUF_ACCOUNTED_H

#include <stdint.h>

struct accounted {
	void *obj;		  /* struct bpf_object * */
	int events_fd;		  /* BPF_MAP_TYPE_PERF_EVENT_ARRAY */
	int events_counts_fd;	  /* its PERFBUF_OUTPUT_COUNTS map */
	int rb_fd;		  /* BPF_MAP_TYPE_RINGBUF */
	int rb_counts_fd;	  /* its PERFBUF_OUTPUT_COUNTS map */
	int perf_prog_fd;	  /* perf_output */
	int rb_prog_fd;		  /* ringbuf_output */
	int rb_reserve_prog_fd;	  /* ringbuf_reserve (discards odd sequence numbers) */
};

/* Loads `path` with a ring buffer of `rb_bytes` (0: the object's). Returns
 * 0 or -errno (libbpf says why on stderr). */
int accounted_open(struct accounted *a, const char *path, unsigned rb_bytes);
void accounted_close(struct accounted *a);

/* Runs `prog_fd` `repeat` times on `cpu`, each run sending one record of
 * `size` bytes (16..256); *last_ret gets the last run's helper result.
 * Returns 0 or -errno. */
int accounted_run(int prog_fd, int cpu, unsigned size, unsigned repeat, int *last_ret);

#endif
