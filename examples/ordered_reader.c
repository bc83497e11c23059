/* A timestamp-ordered reader across CPUs written only against libbpf's
 * API: perf_buffer__buffer hands out each CPU's raw ring (the kernel's
 * struct perf_event_mmap_page, data one page later), and this program
 * merges them itself, the use case that API was added for. It runs
 * unchanged on libbpf and on libperfbuf (make test runs it both ways, the
 * second under LD_PRELOAD).
 *
 * The merge: look at every ring's next record without moving its tail,
 * deliver the oldest as long as no ring can still produce an older one
 * (each ring's newest stamp bounds what it can still produce; a ring idle
 * for IDLE_MS stops counting), then publish each tail with a release store.
 *
 * usage: ordered_reader [records_cpu0 records_cpu1] */
#define _GNU_SOURCE
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stream.h"

#define IDLE_MS 10.0

struct ring {
	struct perf_event_mmap_page *mp;
	const uint8_t *data;
	size_t size;
	uint64_t pos;	  /* next record to deliver (tail not yet published) */
	uint64_t scanned; /* how far stamps have been looked at */
	uint64_t newest;
	double last_progress;
	uint8_t copy[65536]; /* a record that wraps, made contiguous */
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The record at pos, contiguous; its size in *size. */
static const struct perf_event_header *record_at(struct ring *r, uint64_t pos, size_t *size)
{
	size_t off = pos & (r->size - 1);
	const struct perf_event_header *h = (const void *)(r->data + off);
	*size = h->size;
	if (off + h->size <= r->size)
		return h;
	size_t first = r->size - off;
	memcpy(r->copy, r->data + off, first);
	memcpy(r->copy + first, r->data, h->size - first);
	return (const void *)r->copy;
}

static uint64_t stamp_of(const struct perf_event_header *h, uint64_t fallback)
{
	uint64_t stamp;
	if (h->type != PERF_RECORD_SAMPLE) /* LOST records keep their place */
		return fallback;
	memcpy(&stamp, (const uint8_t *)h + 12, 8); /* header, u32 size, then data */
	return stamp;
}

int main(int argc, char **argv)
{
	unsigned n0 = argc > 2 ? (unsigned)atoi(argv[1]) : 20000, n1 = argc > 2 ? (unsigned)atoi(argv[2]) : 20000;
	struct stream s;
	stream_open(&s, n0, n1, 24);
	struct perf_buffer *pb = perf_buffer__new(s.prod.map_fd, 1, NULL, NULL, NULL, NULL);
	if (!pb || perf_buffer__buffer_cnt(pb) < STREAM_CPUS) {
		perror("perf_buffer__new");
		return 1;
	}
	static struct ring rings[STREAM_CPUS];
	for (int c = 0; c < STREAM_CPUS; c++) {
		void *base;
		size_t size;
		if (perf_buffer__buffer(pb, c, &base, &size)) {
			perror("perf_buffer__buffer");
			return 1;
		}
		rings[c] = (struct ring){.mp = base, .data = (uint8_t *)base + getpagesize(), .size = size,
					 .last_progress = now_ms()};
		rings[c].pos = rings[c].scanned = rings[c].mp->data_tail;
		s.region[c] = base;
		s.region_size = size;
	}
	stream_start(&s);
	uint64_t produced = (uint64_t)n0 + n1;
	double deadline = now_ms() + 60000;
	while (s.delivered < produced && now_ms() < deadline) {
		double now = now_ms();
		uint64_t horizon = UINT64_MAX;
		for (int c = 0; c < STREAM_CPUS; c++) {
			struct ring *r = &rings[c];
			uint64_t head = __atomic_load_n(&r->mp->data_head, __ATOMIC_ACQUIRE);
			while (r->scanned != head) {
				size_t size;
				r->newest = stamp_of(record_at(r, r->scanned, &size), r->newest);
				r->scanned += size;
				r->last_progress = now;
			}
			if (now - r->last_progress < IDLE_MS && r->newest < horizon)
				horizon = r->newest;
		}
		int delivered = 0;
		for (;;) {
			int best = -1;
			uint64_t best_stamp = 0;
			const struct perf_event_header *best_rec = NULL;
			for (int c = 0; c < STREAM_CPUS; c++) {
				struct ring *r = &rings[c];
				if (r->pos == r->scanned)
					continue;
				size_t size;
				const struct perf_event_header *h = record_at(r, r->pos, &size);
				uint64_t st = stamp_of(h, r->newest);
				if (best < 0 || st < best_stamp) {
					best = c;
					best_stamp = st;
					best_rec = h;
				}
			}
			if (best < 0 || best_stamp > horizon)
				break;
			/* record_at may have reused the copy buffer: fetch again. */
			size_t size;
			best_rec = record_at(&rings[best], rings[best].pos, &size);
			if (best_rec->type == PERF_RECORD_SAMPLE) {
				uint32_t raw;
				memcpy(&raw, (const uint8_t *)best_rec + 8, 4);
				stream_check(&s, best, (const uint8_t *)best_rec + 12, raw);
			}
			rings[best].pos += size;
			delivered++;
		}
		for (int c = 0; c < STREAM_CPUS; c++) /* done with them: free the space */
			__atomic_store_n(&rings[c].mp->data_tail, rings[c].pos, __ATOMIC_RELEASE);
		if (!delivered)
			usleep(100);
	}
	stream_join(&s);
	int bad = stream_verdict(&s, "ordered_reader (raw regions)");
	perf_buffer__free(pb);
	stream_close(&s);
	return bad;
}
