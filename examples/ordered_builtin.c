/* libperfbuf's built-in ordered reader: one call, perfbuf_set_order, and
 * perf_buffer__poll delivers the records of all CPUs in timestamp order
 * through the usual sample callback. The key here is the default one: the
 * first 8 bytes of each sample, a bpf_ktime_get_ns() the BPF program wrote.
 *
 * usage: ordered_builtin [records_cpu0 records_cpu1 [page_cnt]] */
#define _GNU_SOURCE
#include "perfbuf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stream.h"

static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	stream_check(ctx, cpu, data, size);
}

static void on_lost(void *ctx, int cpu, __u64 cnt)
{
	(void)ctx;
	fprintf(stderr, "cpu %d lost %llu\n", cpu, (unsigned long long)cnt);
}

int main(int argc, char **argv)
{
	unsigned n0 = argc > 2 ? (unsigned)atoi(argv[1]) : 20000, n1 = argc > 2 ? (unsigned)atoi(argv[2]) : 20000;
	size_t page_cnt = argc > 3 ? (size_t)atoi(argv[3]) : 1;
	struct stream s;
	stream_open(&s, n0, n1, 24);
	struct perf_buffer *pb = perf_buffer__new(s.prod.map_fd, page_cnt, on_sample, on_lost, &s, NULL);
	if (!pb) {
		perror("perf_buffer__new");
		return 1;
	}
	struct perfbuf_order_opts order = {.sz = sizeof(order), .idle_wait_ms = 10};
	if (perfbuf_set_order(pb, &order)) {
		perror("perfbuf_set_order");
		return 1;
	}
	for (int c = 0; c < STREAM_CPUS; c++) {
		size_t size;
		perf_buffer__buffer(pb, c, &s.region[c], &size);
		s.region_size = size;
	}
	stream_start(&s);
	uint64_t produced = (uint64_t)n0 + n1;
	time_t deadline = time(NULL) + 60;
	while (s.delivered < produced && time(NULL) < deadline) {
		int r = perf_buffer__poll(pb, 100);
		if (r < 0 && r != -EINTR) {
			fprintf(stderr, "poll: %d\n", r);
			break;
		}
	}
	stream_join(&s);
	perfbuf_ordered_flush(pb);
	struct perfbuf_order_stats st = {.sz = sizeof(st)};
	perfbuf_order_stats(pb, &st);
	printf("ordered_builtin: %llu delivered, %llu late, at most %llu held back at once\n",
	       (unsigned long long)st.delivered, (unsigned long long)st.late, (unsigned long long)st.max_pending);
	int bad = stream_verdict(&s, "ordered_builtin (perfbuf_set_order)");
	perf_buffer__free(pb);
	stream_close(&s);
	return bad || st.late != 0;
}
