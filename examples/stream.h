/* Shared by the ordering examples: a stamped stream from BPF producers on
 * two CPUs (c-tests/producer.c), and a checker that the consumer saw every
 * record exactly once, in non-decreasing timestamp order. */
#ifndef PERFBUF_EXAMPLE_STREAM_H
#define PERFBUF_EXAMPLE_STREAM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "producer.h"

#define STREAM_CPUS 2

struct stream {
	struct producer prod;
	unsigned per_cpu[STREAM_CPUS]; /* records each CPU produces (0 = idle) */
	unsigned size;		       /* sample size, >= 16 */
	/* Ring regions, for throttling: a producer waits for free space so
	 * nothing is lost and the ring wraps at many offsets. */
	void *region[STREAM_CPUS];
	size_t region_size;
	pthread_t threads[STREAM_CPUS];
	volatile bool stop;
	/* Checker state. */
	uint64_t last_stamp, delivered, out_of_order, duplicates, bad;
	uint8_t *seen[STREAM_CPUS];
};

/* Opens the producer; exits 77 (or 1 under CI=true) without BPF. */
void stream_open(struct stream *s, unsigned per_cpu0, unsigned per_cpu1, unsigned size);
/* Starts one producer thread per CPU with records to produce. */
void stream_start(struct stream *s);
void stream_join(struct stream *s);
/* Checks one delivered sample (data as the sample callback sees it). */
void stream_check(struct stream *s, int cpu, const void *data, uint32_t size);
/* Prints the verdict; returns 0 when everything arrived once, in order. */
int stream_verdict(struct stream *s, const char *name);
void stream_close(struct stream *s);

#endif
