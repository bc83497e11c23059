/* Batch reads through the C API on the real kernel (perfbuf_read_batch,
 * perfbuf_poll_batch): records whole and in order per CPU, with the right
 * CPUs, in the caller's buffers; a partial read leaves the rest in the
 * rings (and in the figures); losses come as entries; a record larger
 * than the data buffer gives -EMSGSIZE and the size it needs, and waits;
 * the callbacks never run; a BPF ring buffer is read the same way. */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct producer perf;
static struct ringbuf_producer ring;

#define ROUNDS 20
static const unsigned sizes[] = {8, 13, 64, 100, 1000, 64};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static unsigned callbacks;

static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	(void)ctx, (void)cpu, (void)data, (void)size;
	callbacks++;
}

static struct perf_buffer *open_reader(int map_fd, size_t pages, int cpu0_only)
{
	int cpus[] = {0};
	LIBBPF_OPTS(perfbuf_opts, opts, .cpus = cpu0_only ? cpus : NULL, .cpu_cnt = cpu0_only ? 1 : 0);
	struct perf_buffer *pb = perfbuf_new(map_fd, pages, on_sample, NULL, NULL, &opts);
	EXPECT(pb, "perfbuf_new: %s", perfbuf_last_error());
	return pb;
}

/* A batch over fresh buffers of `data_size` bytes and `cnt` entries. */
static struct perfbuf_read_batch batch_of(size_t data_size, size_t cnt)
{
	struct perfbuf_read_batch b = {
		.sz = sizeof(b),
		.data = malloc(data_size ? data_size : 1),
		.data_size = data_size,
		.entries = calloc(cnt, sizeof(struct perfbuf_batch_entry)),
		.entry_cnt = cnt,
	};
	return b;
}

static void free_batch(struct perfbuf_read_batch *b)
{
	free(b->data);
	free(b->entries);
}

static void seed_and_size(unsigned cpu, unsigned round, uint8_t *seed, unsigned *n)
{
	*seed = (uint8_t)(round + cpu * 50);
	*n = sizes[round % N_SIZES];
}

static void test_whole_in_order_and_partial(void)
{
	struct perf_buffer *pb = open_reader(perf.map_fd, 64, 0);
	if (!pb)
		return;
	unsigned cpus = perfbuf_buffer_cnt(pb) < 2 ? perfbuf_buffer_cnt(pb) : 2;
	for (unsigned round = 0; round < ROUNDS; round++)
		for (unsigned cpu = 0; cpu < cpus; cpu++) {
			uint8_t seed;
			unsigned n;
			int ret = 1;
			seed_and_size(cpu, round, &seed, &n);
			EXPECT(producer_emit_det(&perf, (int)cpu, n, seed, 1, &ret) == 0 && ret == 0, "emit");
		}
	/* 7 entries: the first read stops inside CPU 0's ring. */
	struct perfbuf_read_batch b = batch_of(65536, 7);
	int n = perfbuf_read_batch(pb, &b);
	EXPECT(n == 7, "first read: %d (%s)", n, perfbuf_last_error());
	LIBBPF_OPTS(perfbuf_ring_stats, st);
	EXPECT(perfbuf_ring_stats(pb, 0, &st) == 0 && st.records == 7 && st.pending_bytes > 0,
	       "the rest stays in ring 0: %llu records read, %llu bytes pending", (unsigned long long)st.records,
	       (unsigned long long)st.pending_bytes);
	unsigned next[2] = {0, 0}, reads = 1, wrong = 0;
	for (;;) {
		for (int i = 0; i < n; i++) {
			struct perfbuf_batch_entry *e = &b.entries[i];
			if (e->cpu >= cpus || e->lost || e->offset % 8 || e->offset + e->size > b.data_used ||
			    next[e->cpu] >= ROUNDS) {
				wrong++;
				continue;
			}
			uint8_t seed, want[PRODUCER_MAX_N];
			unsigned size;
			seed_and_size(e->cpu, next[e->cpu]++, &seed, &size);
			producer_expected(size, seed, want);
			/* Padded by the kernel with its 4-byte size to 8. */
			if (e->size != (size + 4 + 7) / 8 * 8 - 4 ||
			    memcmp((char *)b.data + e->offset, want, size) != 0)
				wrong++;
		}
		free_batch(&b);
		/* Then 3 entries and 1200 bytes at a time. */
		b = batch_of(1200, 3);
		n = perfbuf_read_batch(pb, &b);
		EXPECT(n >= 0, "read: %d", n);
		if (n <= 0)
			break;
		reads++;
	}
	free_batch(&b);
	printf("  %u reads; cpu 0: %u records, cpu 1: %u\n", reads, next[0], next[1]);
	EXPECT(wrong == 0, "%u records wrong, out of order or of the wrong CPU", wrong);
	for (unsigned cpu = 0; cpu < cpus; cpu++) {
		EXPECT(next[cpu] == ROUNDS, "cpu %u: %u records", cpu, next[cpu]);
		EXPECT(perfbuf_ring_stats(pb, cpu, &st) == 0 && st.records == ROUNDS && st.pending_bytes == 0,
		       "cpu %u figures", cpu);
	}
	EXPECT(reads >= (ROUNDS * cpus - 7) / 3, "%u reads", reads);
	EXPECT(callbacks == 0, "the sample callback ran %u times", callbacks);
	perfbuf_free(pb);
}

static void test_losses_are_entries(void)
{
	struct perf_buffer *pb = open_reader(perf.map_fd, 1, 1);
	if (!pb)
		return;
	int ret = 0;
	EXPECT(producer_emit_det(&perf, 0, 64, 1, 300, &ret) == 0 && ret == -ENOSPC, "the burst overflows: %d", ret);
	unsigned long long samples = 0, lost = 0, reports = 0;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1)
			EXPECT(producer_emit_det(&perf, 0, 64, 2, 1, &ret) == 0 && ret == 0, "one more record");
		struct perfbuf_read_batch b = batch_of(4096, 16);
		int n;
		while ((n = perfbuf_read_batch(pb, &b)) > 0)
			for (int i = 0; i < n; i++) {
				if (b.entries[i].lost) {
					lost += b.entries[i].lost;
					reports++;
					EXPECT(b.entries[i].size == 0 && b.entries[i].cpu == 0, "a loss entry");
				} else {
					samples++;
				}
			}
		EXPECT(n == 0, "read: %d", n);
		free_batch(&b);
	}
	printf("  %llu samples, %llu lost in %llu report(s)\n", samples, lost, reports);
	EXPECT(reports == 1 && samples + lost == 301, "%llu + %llu", samples, lost);
	LIBBPF_OPTS(perfbuf_ring_stats, st);
	EXPECT(perfbuf_ring_stats(pb, 0, &st) == 0 && st.lost == lost && st.samples == samples, "figures");
	perfbuf_free(pb);
}

static void test_too_large_a_record(void)
{
	struct perf_buffer *pb = open_reader(perf.map_fd, 8, 1);
	if (!pb)
		return;
	int ret = 1;
	EXPECT(producer_emit_det(&perf, 0, 1000, 9, 1, &ret) == 0 && ret == 0, "emit");
	struct perfbuf_read_batch b = batch_of(512, 4);
	errno = 0;
	int n = perfbuf_read_batch(pb, &b);
	EXPECT(n == -EMSGSIZE && errno == EMSGSIZE && b.needed == 1004, "%d errno %d needed %zu", n, errno, b.needed);
	printf("  %s\n", perfbuf_last_error());
	free_batch(&b);
	b = batch_of(1004, 4);
	n = perfbuf_read_batch(pb, &b);
	uint8_t want[1000];
	producer_expected(1000, 9, want);
	EXPECT(n == 1 && b.entries[0].size == 1004 && memcmp(b.data, want, 1000) == 0 && b.needed == 0,
	       "then read whole: %d", n);
	free_batch(&b);
	/* Arguments checked. */
	b = batch_of(512, 1);
	EXPECT(perfbuf_read_batch(pb, &b) == -EINVAL, "1 entry");
	free_batch(&b);
	b = batch_of(512, 4);
	b.sz = 8;
	EXPECT(perfbuf_read_batch(pb, &b) == -EINVAL, "sz too small");
	EXPECT(perfbuf_read_batch(pb, NULL) == -EINVAL && perfbuf_read_batch(NULL, &b) == -EINVAL, "NULL");
	b.sz = sizeof(b);
	b.entries = (struct perfbuf_batch_entry *)((char *)b.entries + 4);
	EXPECT(perfbuf_read_batch(pb, &b) == -EINVAL, "misaligned entries");
	b.entries = (struct perfbuf_batch_entry *)((char *)b.entries - 4);
	free_batch(&b);
	perfbuf_free(pb);
}

static void test_poll_batch(void)
{
	struct perf_buffer *pb = open_reader(perf.map_fd, 8, 0);
	if (!pb)
		return;
	struct perfbuf_read_batch b = batch_of(4096, 64);
	EXPECT(perfbuf_poll_batch(pb, &b, 20) == 0, "nothing: timeout");
	int ret = 1;
	EXPECT(producer_emit_det(&perf, 0, 64, 3, 5, &ret) == 0 && ret == 0, "emit");
	int n = perfbuf_poll_batch(pb, &b, 1000);
	EXPECT(n == 5 && b.data_used == 5 * 72, "poll_batch: %d, %zu bytes", n, b.data_used);
	EXPECT(callbacks == 0, "the sample callback ran %u times", callbacks);
	free_batch(&b);
	perfbuf_free(pb);
}

static void test_ring_buffer(void)
{
	struct perf_buffer *pb = open_reader(ring.map_fd, 0, 0);
	if (!pb)
		return;
	static const unsigned rsizes[] = {8, 13, 100, 1000};
	for (unsigned i = 0; i < 12; i++) {
		int ret = 1;
		EXPECT(producer_emit_ringbuf(&ring, 0, rsizes[i % 4], (uint8_t)i, 1, &ret) == 0 && ret == 0, "emit");
	}
	unsigned got = 0, reads = 0, wrong = 0;
	struct perfbuf_read_batch b = batch_of(1100, 3);
	int n;
	while ((n = perfbuf_read_batch(pb, &b)) > 0) {
		reads++;
		for (int i = 0; i < n; i++, got++) {
			struct perfbuf_batch_entry *e = &b.entries[i];
			uint8_t want[1000];
			producer_expected(rsizes[got % 4], (uint8_t)got, want);
			if (e->cpu != UINT32_MAX || e->lost || e->size != rsizes[got % 4] ||
			    memcmp((char *)b.data + e->offset, want, e->size) != 0)
				wrong++;
		}
	}
	free_batch(&b);
	printf("  ring buffer: %u records in %u reads\n", got, reads);
	EXPECT(n == 0 && got == 12 && wrong == 0 && reads >= 6, "%d %u %u %u", n, got, wrong, reads);
	perfbuf_free(pb);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	producer_open_or_exit(&perf, 0);
	int err = producer_open_ringbuf(&ring, 4096);
	if (err) {
		fprintf(stderr, "cannot create the BPF ring buffer producer: %s\n", strerror(-err));
		producer_close(&perf);
		return ci_mode() ? 1 : 77;
	}
	static const struct test_case tests[] = {
		{"whole_in_order_and_partial", test_whole_in_order_and_partial},
		{"losses_are_entries", test_losses_are_entries},
		{"too_large_a_record", test_too_large_a_record},
		{"poll_batch", test_poll_batch},
		{"ring_buffer", test_ring_buffer},
	};
	int failed = run_tests("batch_read_test", tests, (int)(sizeof(tests) / sizeof(tests[0])));
	producer_close_ringbuf(&ring);
	producer_close(&perf);
	return failed ? 1 : 0;
}
