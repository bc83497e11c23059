/* Soak: BPF producers at full speed on both CPUs for SECONDS, a reader in
 * perf_buffer__poll; then exact accounting. Every delivered record is
 * checked whole (the producer's byte pattern after its stamp) and in order
 * (each CPU's bpf_ktime_get_ns() stamps never go back); delivered + lost
 * must equal produced exactly, and RSS must stay flat.
 *
 * usage: soak SECONDS PAGE_CNT */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SIZE 40 /* payload bytes per sample */
#define BURST 256

struct per_cpu {
	uint64_t produced, delivered, lost, corrupt, reordered;
	uint64_t last_stamp;
};

static struct producer prod;
static struct per_cpu stats[2];
static volatile int stop;
static uint8_t pattern[SIZE]; /* what follows the 8-byte stamp */

static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	(void)ctx;
	struct per_cpu *s = &stats[cpu & 1];
	const uint8_t *d = data;
	uint64_t stamp;
	memcpy(&stamp, d, 8);
	if (size < SIZE || memcmp(d + 8, pattern + 8, SIZE - 8) != 0)
		s->corrupt++;
	/* Each CPU's bpf_ktime_get_ns() stamps never go back within its ring. */
	if (stamp < s->last_stamp)
		s->reordered++;
	s->last_stamp = stamp;
	s->delivered++;
}

static void on_lost(void *ctx, int cpu, __u64 cnt)
{
	(void)ctx;
	stats[cpu & 1].lost += cnt;
}

static void *produce(void *arg)
{
	int cpu = (int)(intptr_t)arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
	for (unsigned burst = 0; !stop; burst++) {
		int ret;
		if (producer_emit_stamped(&prod, cpu, SIZE, BURST, &ret) == 0)
			__atomic_add_fetch(&stats[cpu].produced, BURST, __ATOMIC_RELAXED);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 60;
	size_t page_cnt = argc > 2 ? (size_t)atoi(argv[2]) : 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	producer_open_or_exit(&prod, 0);
	producer_expected(SIZE, 0, pattern);
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, page_cnt, on_sample, on_lost, NULL, NULL);
	if (!pb) {
		perror("perf_buffer__new");
		return 1;
	}
	pthread_t th[2];
	for (int c = 0; c < 2; c++)
		pthread_create(&th[c], NULL, produce, (void *)(intptr_t)c);
	time_t start = time(NULL);
	long rss_early = -1;
	while (time(NULL) - start < seconds) {
		int r = perf_buffer__poll(pb, 100);
		if (r < 0 && r != -EINTR) {
			fprintf(stderr, "poll: %d\n", r);
			break;
		}
		if (rss_early < 0 && time(NULL) - start >= (seconds > 10 ? 5 : 1))
			rss_early = rss_kb();
	}
	stop = 1;
	for (int c = 0; c < 2; c++)
		pthread_join(th[c], NULL);
	/* Drain, then one more record per CPU: the kernel reports losses only in
	 * front of the next successful write. */
	perf_buffer__consume(pb);
	for (int c = 0; c < 2; c++) {
		int ret = 0;
		producer_emit_stamped(&prod, c, SIZE, 1, &ret);
		if (ret == 0)
			stats[c].produced++;
	}
	perf_buffer__consume(pb);
	long rss_end = rss_kb();
	int bad = 0;
	for (int c = 0; c < 2; c++) {
		struct per_cpu *s = &stats[c];
		int exact = s->delivered + s->lost == s->produced;
		printf("cpu%d: produced %llu = delivered %llu + lost %llu: %s; corrupt %llu, out of order %llu\n", c,
		       (unsigned long long)s->produced, (unsigned long long)s->delivered, (unsigned long long)s->lost,
		       exact ? "exact" : "MISMATCH", (unsigned long long)s->corrupt,
		       (unsigned long long)s->reordered);
		bad |= !exact || s->corrupt || s->reordered || !s->delivered;
	}
	printf("RSS %ld kB after warm-up, %ld kB at the end\n", rss_early, rss_end);
	bad |= rss_end - rss_early > 1024;
	perf_buffer__free(pb);
	producer_close(&prod);
	printf("soak (%ds, %zu pages): %d passed, %d failed\n", seconds, page_cnt, !bad, bad);
	return bad;
}
