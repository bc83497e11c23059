/* The rings rows of perfbench: how a reader scales with the number of
 * rings. 1,024 rings on CPUs 0 and 1 (perf_buffer__new_raw with an explicit
 * CPU list: ring i reads CPU i % 2 through map key i), one page each, over
 * a producer map of 1,024 slots. The producer writes into the slot of the
 * CPU it runs on, so only rings 0 and 1 ever get records. Per library
 * (libbpf, or libperfbuf under LD_PRELOAD), one JSON line per figure set:
 *   empty_consume_ns   one perf_buffer__consume with every ring empty, 200 ms
 *                      after the buffer opened
 *   first_record_ns    the perf_buffer__consume_buffer that delivers the
 *                      first record a fresh ring ever gets (a new buffer
 *                      each time: ring 0, one record written on CPU 0)
 *   mapped_bytes_per_ring, fds_per_ring   what a ring costs the process
 * Raw mode has no fast mode (libperfbuf refuses it with a caller's attr);
 * examples/ring_scale.rs measures the fast mode over the same layout
 * through the Rust API. */
#define _GNU_SOURCE
#include "rings.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define RINGS 1024
#define FRESH_BUFFERS 15   /* first_record_ns: one sample per new buffer */
#define EMPTY_CONSUMES 2000 /* empty_consume_ns: consumes timed per buffer */

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static enum bpf_perf_event_ret count_event(void *ctx, int cpu, struct perf_event_header *h)
{
	(void)cpu;
	if (h->type == PERF_RECORD_SAMPLE)
		(*(unsigned long long *)ctx)++;
	return LIBBPF_PERF_EVENT_CONT;
}

/* Bytes of perf ring mappings and open fds in this process now. */
static void footprint(unsigned long long *mapped, unsigned long long *fds)
{
	*mapped = 0;
	*fds = 0;
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (strstr(line, "[perf_event]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
			*mapped += hi - lo;
	}
	if (f)
		fclose(f);
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	while (d && (e = readdir(d)))
		*fds += e->d_name[0] != '.';
	if (d)
		closedir(d);
}

static struct perf_buffer *open_rings(int map_fd, unsigned long long *count)
{
	static int cpus[RINGS], keys[RINGS];
	for (int i = 0; i < RINGS; i++) {
		cpus[i] = i % 2;
		keys[i] = i;
	}
	struct perf_event_attr attr = {.type = PERF_TYPE_SOFTWARE, .size = sizeof(attr),
				       .config = PERF_COUNT_SW_BPF_OUTPUT, .sample_type = PERF_SAMPLE_RAW,
				       .sample_period = 1, .wakeup_events = 1};
	LIBBPF_OPTS(perf_buffer_raw_opts, o, .cpu_cnt = RINGS, .cpus = cpus, .map_keys = keys);
	struct perf_buffer *pb = perf_buffer__new_raw(map_fd, 1, &attr, count_event, count, &o);
	if (!pb) {
		perror("rings: perf_buffer__new_raw");
		exit(1);
	}
	return pb;
}

void rings_rows(const char *lib)
{
	/* Each ring is an fd: room for them. */
	struct rlimit nofile;
	getrlimit(RLIMIT_NOFILE, &nofile);
	nofile.rlim_cur = nofile.rlim_max;
	setrlimit(RLIMIT_NOFILE, &nofile);
	struct producer p;
	int err = producer_open(&p, RINGS);
	if (err) {
		fprintf(stderr, "rings: cannot create the producer: %s\n", strerror(-err));
		exit(1);
	}
	static double first[FRESH_BUFFERS], empty[FRESH_BUFFERS];
	unsigned long long mapped0, fds0, mapped1 = 0, fds1 = 0;
	footprint(&mapped0, &fds0);
	for (int b = 0; b < FRESH_BUFFERS; b++) {
		unsigned long long count = 0;
		struct perf_buffer *pb = open_rings(p.map_fd, &count);
		if (b == 0)
			footprint(&mapped1, &fds1);
		int ret = 0;
		if (producer_emit_det(&p, 0, 16, (uint8_t)b, 1, &ret) || ret) {
			fprintf(stderr, "rings: emit failed (%d)\n", ret);
			exit(1);
		}
		double t0 = now_ns();
		perf_buffer__consume_buffer(pb, 0);
		first[b] = now_ns() - t0;
		if (count != 1) {
			fprintf(stderr, "rings: the first record was not delivered (%llu)\n", count);
			exit(1);
		}
		/* Every ring empty now. A reader runs for longer than this row:
		 * 200 ms on (a fast mode settles after 100 ms), then the first
		 * consumes warm the caches up. */
		usleep(200000);
		for (int i = 0; i < 50; i++)
			perf_buffer__consume(pb);
		t0 = now_ns();
		for (int i = 0; i < EMPTY_CONSUMES; i++)
			perf_buffer__consume(pb);
		empty[b] = (now_ns() - t0) / EMPTY_CONSUMES;
		perf_buffer__free(pb);
	}
	printf("{\"row\": \"rings_1024\", \"lib\": \"%s\", \"mode\": \"raw\", \"first_record_ns\": %.0f, "
	       "\"empty_consume_ns\": %.0f, \"mapped_bytes_per_ring\": %.0f, \"fds_per_ring\": %.2f}\n",
	       lib, median(first, FRESH_BUFFERS), median(empty, FRESH_BUFFERS),
	       (double)(mapped1 - mapped0) / RINGS, (double)(fds1 - fds0) / RINGS);
	producer_close(&p);
}
