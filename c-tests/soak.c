/* Soak: BPF producers at full speed on both CPUs for SECONDS, a reader in
 * perf_buffer__poll; then exact accounting. Every delivered record is
 * checked whole (the producer's byte pattern, recovered from its seed) and
 * in order (seeds advance per burst on each CPU); delivered + lost must
 * equal produced exactly, and RSS must stay flat.
 *
 * usage: soak SECONDS PAGE_CNT */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "producer.h"

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
	int last_seed;
};

static struct producer prod;
static struct per_cpu stats[2];
static volatile int stop;

static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	(void)ctx;
	struct per_cpu *s = &stats[cpu & 1];
	const uint8_t *d = data;
	uint8_t seed = (uint8_t)(d[0] - 14); /* producer_expected: byte 0 = seed + 2 * 7 */
	uint8_t want[SIZE];
	producer_expected(SIZE, seed, want);
	if (size < SIZE || memcmp(d, want, SIZE) != 0)
		s->corrupt++;
	/* Seeds advance by one per burst: a record may repeat the seed or move
	 * forward (mod 256, bursts can be lost), never step back by a little. */
	int step = (seed - s->last_seed) & 0xff;
	if (s->last_seed >= 0 && step > 128)
		s->reordered++;
	s->last_seed = seed;
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
		if (producer_emit_det(&prod, cpu, SIZE, (uint8_t)burst, BURST, &ret) == 0)
			__atomic_add_fetch(&stats[cpu].produced, BURST, __ATOMIC_RELAXED);
	}
	return NULL;
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

int main(int argc, char **argv)
{
	int seconds = argc > 1 ? atoi(argv[1]) : 60;
	size_t page_cnt = argc > 2 ? (size_t)atoi(argv[2]) : 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	int err = producer_open(&prod, 0);
	if (err) {
		fprintf(stderr, "cannot create the BPF producer: %s\n", strerror(-err));
		const char *ci = getenv("CI");
		return ci && !strcmp(ci, "true") ? 1 : 77;
	}
	stats[0].last_seed = stats[1].last_seed = -1;
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
		producer_emit_det(&prod, c, SIZE, 0, 1, &ret);
		if (ret == 0)
			stats[c].produced++;
		stats[c].last_seed = -1;
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
