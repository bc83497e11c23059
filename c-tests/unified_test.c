/* One C API over both of BPF's event channels, on the real kernel:
 * perfbuf_new reads a BPF_MAP_TYPE_PERF_EVENT_ARRAY and a
 * BPF_MAP_TYPE_RINGBUF written by BPF programs with the same callbacks
 * (records, bytes, the CPU a ring buffer cannot tell: -1), options and
 * calls on a ring buffer (ignored, refused with a message, -EOPNOTSUPP),
 * pause/resume, figures and perfbuf_wake; and libbpf's own names keep
 * libbpf's behaviour: perf_buffer__new refuses a ring buffer with the
 * errno the system libbpf gives. */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct producer perf;
static struct ringbuf_producer ring;

static const unsigned sizes[] = {8, 13, 100, 1000, 3000};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

struct seen {
	unsigned samples, lost_reports, wrong_data;
	unsigned long long lost, bytes;
	int cpu; /* of the last sample */
};

/* The tool's callbacks, written once for either map kind: checks each
 * sample against what the producer wrote for its index. */
static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	struct seen *s = ctx;
	if (s->samples < N_SIZES) {
		unsigned n = sizes[s->samples];
		uint8_t want[PRODUCER_MAX_N];
		producer_expected(n, (uint8_t)s->samples, want);
		if (size < n || memcmp(data, want, n) != 0)
			s->wrong_data++;
	}
	s->samples++;
	s->bytes += size;
	s->cpu = cpu;
}

static void on_lost(void *ctx, int cpu, __u64 cnt)
{
	struct seen *s = ctx;
	(void)cpu;
	s->lost += cnt;
	s->lost_reports++;
}

/* The tool's reading code, written once: perfbuf_new with batching opts,
 * polled until every record came. */
static struct seen read_all(int map_fd, void (*emit)(void))
{
	struct seen s = {.cpu = -2};
	LIBBPF_OPTS(perfbuf_opts, opts, .wakeup_events = 4, .max_delay_ms = 2);
	struct perf_buffer *pb = perfbuf_new(map_fd, 64, on_sample, on_lost, &s, &opts);
	EXPECT(pb, "perfbuf_new on map fd %d: %s", map_fd, perfbuf_last_error());
	if (!pb)
		return s;
	emit();
	for (int i = 0; i < 50 && s.samples < N_SIZES; i++)
		EXPECT(perfbuf_poll(pb, 100) >= 0, "poll");
	EXPECT(perfbuf_consume(pb) == 0, "consume");
	perfbuf_free(pb);
	return s;
}

static void emit_perf(void)
{
	for (unsigned i = 0; i < N_SIZES; i++) {
		int ret = 1;
		EXPECT(producer_emit_det(&perf, 0, sizes[i], (uint8_t)i, 1, &ret) == 0 && ret == 0, "perf emit");
	}
}

static void emit_ring(void)
{
	for (unsigned i = 0; i < N_SIZES; i++) {
		int ret = 1;
		EXPECT(producer_emit_ringbuf(&ring, 0, sizes[i], (uint8_t)i, 1, &ret) == 0 && ret == 0, "ring emit");
	}
}

static void test_same_callbacks_both_kinds(void)
{
	struct seen p = read_all(perf.map_fd, emit_perf);
	struct seen r = read_all(ring.map_fd, emit_ring);
	unsigned long long exact = 0, padded = 0;
	for (unsigned i = 0; i < N_SIZES; i++) {
		exact += sizes[i];
		padded += (sizes[i] + 4 + 7) / 8 * 8 - 4;
	}
	printf("  perf event array: %u samples, %llu bytes, cpu %d; ring buffer: %u samples, %llu bytes, cpu %d\n",
	       p.samples, p.bytes, p.cpu, r.samples, r.bytes, r.cpu);
	EXPECT(p.samples == N_SIZES && p.wrong_data == 0 && p.bytes == padded && p.cpu == 0, "perf: %u %u %llu %d",
	       p.samples, p.wrong_data, p.bytes, p.cpu);
	EXPECT(r.samples == N_SIZES && r.wrong_data == 0 && r.bytes == exact && r.cpu == -1, "ring: %u %u %llu %d",
	       r.samples, r.wrong_data, r.bytes, r.cpu);
	EXPECT(p.lost_reports == 0 && r.lost_reports == 0, "no loss");
}

static void *wake_later(void *pb)
{
	usleep(30 * 1000);
	perfbuf_wake(pb);
	return NULL;
}

static void test_ring_buffer_calls(void)
{
	struct seen s = {0};
	struct perf_buffer *pb = perfbuf_new(ring.map_fd, 8, on_sample, on_lost, &s, NULL);
	EXPECT(pb, "new: %s", perfbuf_last_error());
	if (!pb)
		return;
	EXPECT(perfbuf_buffer_cnt(pb) == 1, "one ring");
	EXPECT(perfbuf_buffer_cpu(pb, 0) == -1, "no cpu");
	EXPECT(perfbuf_buffer_cpu(pb, 1) == -EINVAL, "index 1");
	EXPECT(perfbuf_buffer_fd(pb, 0) == -EOPNOTSUPP, "no perf event");
	EXPECT(strstr(perfbuf_last_error(), "a BPF ring buffer has none"), "%s", perfbuf_last_error());
	void *buf;
	size_t size;
	EXPECT(perfbuf_buffer(pb, 0, &buf, &size) == -EOPNOTSUPP, "no perf ring mapping");
	EXPECT(perfbuf_snapshot(pb, 0) == -EOPNOTSUPP, "no overwritable ring");
	/* Pause: what is reserved meanwhile is dropped by the reader (the
	 * program's output succeeds) and reported lost once read past. */
	int ret = 1;
	EXPECT(perfbuf_pause(pb) == 0, "pause");
	EXPECT(producer_emit_ringbuf(&ring, 0, 8, 0, 6, &ret) == 0 && ret == 0, "emit while paused: %d", ret);
	EXPECT(perfbuf_resume(pb) == 0, "resume");
	EXPECT(producer_emit_ringbuf(&ring, 0, 8, 0, 1, &ret) == 0 && ret == 0, "emit after resume");
	EXPECT(perfbuf_poll(pb, 1000) == 1, "one ring read");
	printf("  ring buffer pause: %llu lost in %u reports, %u delivered after resume\n", s.lost, s.lost_reports,
	       s.samples);
	EXPECT(s.lost == 6 && s.lost_reports == 1 && s.samples == 1, "lost %llu/%u samples %u", s.lost,
	       s.lost_reports, s.samples);
	struct perfbuf_ring_stats st = {.sz = sizeof(st)};
	EXPECT(perfbuf_ring_stats(pb, 0, &st) == 0, "stats");
	EXPECT(st.cpu == -1 && st.records == 1 && st.bytes == 16 && st.lost == 6 && st.lost_unreported == 0 &&
		       st.data_size == 65536 && st.pending_bytes == 0 && st.wakeups >= 1,
	       "stats: cpu %d records %llu bytes %llu lost %llu", st.cpu, (unsigned long long)st.records,
	       (unsigned long long)st.bytes, (unsigned long long)st.lost);
	/* perfbuf_wake unblocks a poll from another thread. */
	pthread_t t;
	pthread_create(&t, NULL, wake_later, pb);
	EXPECT(perfbuf_poll(pb, 10000) == -ECANCELED, "woken");
	pthread_join(t, NULL);
	EXPECT(perfbuf_poll(pb, 10) == 0, "wake cleared");
	perfbuf_free(pb);
}

static void test_ring_buffer_options(void)
{
	struct seen s = {0};
	LIBBPF_OPTS(perfbuf_opts, overwrite, .flags = PERFBUF_F_OVERWRITE);
	errno = 0;
	EXPECT(!perfbuf_new(ring.map_fd, 8, on_sample, NULL, &s, &overwrite) && errno == EINVAL, "overwrite");
	EXPECT(strstr(perfbuf_last_error(), "cannot be overwritable"), "%s", perfbuf_last_error());
	int cpus[] = {0};
	LIBBPF_OPTS(perfbuf_opts, subset, .cpus = cpus, .cpu_cnt = 1);
	errno = 0;
	EXPECT(!perfbuf_new(ring.map_fd, 8, on_sample, NULL, &s, &subset) && errno == EINVAL, "cpus");
	EXPECT(strstr(perfbuf_last_error(), "some CPUs"), "%s", perfbuf_last_error());
	/* Ignored: what sizes or batches per-CPU perf rings. */
	LIBBPF_OPTS(perfbuf_opts, fast, .flags = PERFBUF_F_ADAPTIVE | PERFBUF_F_COUNT_LOST);
	struct perf_buffer *pb = perfbuf_new(ring.map_fd, 1, on_sample, NULL, &s, &fast);
	EXPECT(pb, "fast mode, count_lost, 1 page: ignored: %s", perfbuf_last_error());
	perfbuf_free(pb);
}

typedef struct perf_buffer *(*new_fn)(int, size_t, perf_buffer_sample_fn, perf_buffer_lost_fn, void *,
				      const struct perf_buffer_opts *);

static void test_libbpf_names_refuse_a_ring_buffer(void)
{
	errno = 0;
	struct perf_buffer *ours = perf_buffer__new(ring.map_fd, 8, on_sample, NULL, NULL, NULL);
	int our_errno = errno;
	EXPECT(!ours && our_errno == EINVAL, "perf_buffer__new: %p errno %d", (void *)ours, our_errno);
	EXPECT(strstr(perfbuf_last_error(), "BPF_MAP_TYPE_PERF_EVENT_ARRAY"), "%s", perfbuf_last_error());
	/* The system libbpf, loaded on its own: the same NULL and errno. */
	void *libbpf = dlopen("libbpf.so.1", RTLD_NOW | RTLD_LOCAL);
	EXPECT(libbpf, "dlopen libbpf.so.1: %s", dlerror());
	if (!libbpf)
		return;
	new_fn theirs_new = (new_fn)dlsym(libbpf, "perf_buffer__new");
	EXPECT(theirs_new, "libbpf's perf_buffer__new");
	if (theirs_new) {
		errno = 0;
		struct perf_buffer *theirs = theirs_new(ring.map_fd, 8, on_sample, NULL, NULL, NULL);
		int their_errno = errno;
		printf("  perf_buffer__new on a ring buffer: libbpf NULL errno %d, libperfbuf NULL errno %d\n",
		       their_errno, our_errno);
		EXPECT(!theirs && their_errno == our_errno, "libbpf: %p errno %d", (void *)theirs, their_errno);
	}
	dlclose(libbpf);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	producer_open_or_exit(&perf, 0);
	int err = producer_open_ringbuf(&ring, 65536);
	if (err) {
		fprintf(stderr, "cannot create the BPF ring buffer producer: %s\n", strerror(-err));
		producer_close(&perf);
		return ci_mode() ? 1 : 77;
	}
	static const struct test_case tests[] = {
		{"same_callbacks_both_kinds", test_same_callbacks_both_kinds},
		{"ring_buffer_calls", test_ring_buffer_calls},
		{"ring_buffer_options", test_ring_buffer_options},
		{"libbpf_names_refuse_a_ring_buffer", test_libbpf_names_refuse_a_ring_buffer},
	};
	int failed = run_tests("unified_test", tests, (int)(sizeof(tests) / sizeof(tests[0])));
	producer_close_ringbuf(&ring);
	producer_close(&perf);
	return failed ? 1 : 0;
}
