/* The loss identity, health and sizing through the C face, on the real
 * kernel: c-tests/bpf/accounted.bpf.c sends records through
 * include/perfbuf.bpf.h's counted wrappers into a perf event array and a
 * BPF ring buffer; perfbuf_new reads the first with the program's counts
 * (perfbuf_opts.output_counts_fd), libperfbuf's ring_buffer__* the second
 * (perfbuf_ringbuf_output_counts). Every record is delivered or in one loss
 * bucket; perfbuf_ring_health says how full the ring got and what size
 * would have held the burst; that size, replayed, loses nothing.
 * Linked with -lperfbuf before -lbpf (libbpf only loads the object). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accounted.h"
#include "perfbuf.h"
#include "testutil.h"

static struct accounted prog;
static const char *object_path = "build/accounted.bpf.o";

struct seen {
	uint64_t samples, lost;
};

static void on_sample(void *ctx, int cpu, void *data, uint32_t size)
{
	(void)cpu, (void)data, (void)size;
	((struct seen *)ctx)->samples++;
}

static void on_lost(void *ctx, int cpu, unsigned long long n)
{
	(void)cpu;
	((struct seen *)ctx)->lost += n;
}

static struct perf_buffer *open_reader(size_t pages, struct seen *seen, int counts_fd)
{
	int cpus[] = { 0 };
	struct perfbuf_opts o = { .sz = sizeof(o), .flags = PERFBUF_F_COUNT_LOST, .cpus = cpus, .cpu_cnt = 1 };
	o.output_counts_fd = counts_fd;
	return perfbuf_new(prog.events_fd, pages, on_sample, on_lost, seen, &o);
}

static int online_cpus(void)
{
	return (int)sysconf(_SC_NPROCESSORS_ONLN);
}

static void perf_identity(void)
{
	struct seen seen = { 0 };
	struct perf_buffer *pb = open_reader(1, &seen, prog.events_counts_fd);
	EXPECT(pb, "perfbuf_new: %s", perfbuf_last_error());
	if (!pb)
		return;
	int ret = 0;
	EXPECT(accounted_run(prog.perf_prog_fd, 0, 64, 300, &ret) == 0 && ret == -ENOSPC, "ret %d", ret);
	if (online_cpus() > 1)
		EXPECT(accounted_run(prog.perf_prog_fd, 1, 64, 20, &ret) == 0 && ret == -ENOENT, "ret %d", ret);
	EXPECT(perf_buffer__poll(pb, 0) >= 0, "poll");
	EXPECT(perfbuf_count_dropped(pb, 0, 5) == 0, "count_dropped");
	EXPECT(perfbuf_count_dropped(pb, 9, 5) == -EINVAL && errno == EINVAL, "a bad index");
	struct perfbuf_ring_stats st = { .sz = sizeof(st) };
	EXPECT(perfbuf_ring_stats(pb, 0, &st) == 0, "stats");
	EXPECT(st.produced_known == 1 && st.produced == 300, "produced %llu (%llu)", (unsigned long long)st.produced,
	       (unsigned long long)st.produced_known);
	EXPECT(st.samples == seen.samples && st.delivered == seen.samples - 5 && st.dropped == 5, "samples %llu",
	       (unsigned long long)st.samples);
	EXPECT(st.lost_unreported > 0 && st.lost == st.lost_unreported, "lost %llu, unreported %llu",
	       (unsigned long long)st.lost, (unsigned long long)st.lost_unreported);
	EXPECT(st.lost_total == st.lost + st.output_failed + st.dropped, "lost_total");
	EXPECT(st.produced == st.delivered + st.lost_total, "produced %llu, delivered %llu, lost %llu",
	       (unsigned long long)st.produced, (unsigned long long)st.delivered, (unsigned long long)st.lost_total);
	/* An older caller's struct: only its size is written. */
	struct perfbuf_ring_stats old;
	memset(&old, 0xab, sizeof(old));
	old.sz = offsetof(struct perfbuf_ring_stats, produced);
	EXPECT(perfbuf_ring_stats(pb, 0, &old) == 0 && old.produced == 0xababababababababull, "sz respected");

	struct perfbuf_ring_health h = { .sz = sizeof(h) };
	EXPECT(perfbuf_ring_health(pb, 0, &h) == 0, "health");
	EXPECT(h.cpu == 0 && h.online == 1 && h.data_size == 4096, "cpu %d online %d size %llu", h.cpu, h.online,
	       (unsigned long long)h.data_size);
	EXPECT(h.peak_pending_bytes > 3000 && h.ns_since_last_record >= 0, "peak %llu",
	       (unsigned long long)h.peak_pending_bytes);
	EXPECT(h.needed_bytes >= 300 * 80 && h.suggested_pages >= 8, "needed %llu, pages %llu",
	       (unsigned long long)h.needed_bytes, (unsigned long long)h.suggested_pages);
	uint64_t reported = 0;
	EXPECT(perfbuf_drain_final(pb, &reported) == 0 && reported == st.lost_unreported, "drain_final %llu",
	       (unsigned long long)reported);
	EXPECT(seen.lost == st.lost, "the lost callback got every loss: %llu", (unsigned long long)seen.lost);
	perf_buffer__free(pb);
}

static void suggested_size_holds_the_burst(void)
{
	uint64_t pages = 0;
	for (int pass = 0; pass < 2; pass++) {
		struct seen seen = { 0 };
		struct perf_buffer *pb = open_reader(pass ? pages : 8, &seen, prog.events_counts_fd);
		EXPECT(pb, "perfbuf_new: %s", perfbuf_last_error());
		if (!pb)
			return;
		int ret = 0;
		EXPECT(accounted_run(prog.perf_prog_fd, 0, 96, 3000, &ret) == 0, "run");
		perf_buffer__poll(pb, 0);
		perfbuf_drain_final(pb, NULL);
		struct perfbuf_ring_stats st = { .sz = sizeof(st) };
		struct perfbuf_ring_health h = { .sz = sizeof(h) };
		EXPECT(perfbuf_ring_stats(pb, 0, &st) == 0 && perfbuf_ring_health(pb, 0, &h) == 0, "figures");
		if (!pass) {
			EXPECT(st.lost > 0, "8 pages lose part of the burst");
			pages = h.suggested_pages;
			EXPECT(pages >= 64, "suggested %llu pages", (unsigned long long)pages);
		} else {
			EXPECT(st.lost == 0 && seen.samples == 3000, "%llu pages: %llu lost, %llu read",
			       (unsigned long long)pages, (unsigned long long)st.lost,
			       (unsigned long long)seen.samples);
		}
		perf_buffer__free(pb);
	}
}

static int rb_count(void *ctx, void *data, size_t size)
{
	(void)data, (void)size;
	(*(uint64_t *)ctx)++;
	return 0;
}

static void ringbuf_identity(void)
{
	uint64_t read = 0;
	struct ring_buffer *rb = ring_buffer__new(prog.rb_fd, rb_count, &read, NULL);
	EXPECT(rb, "ring_buffer__new: %s", perfbuf_last_error());
	if (!rb)
		return;
	struct ring *r = ring_buffer__ring(rb, 0);
	EXPECT(r && perfbuf_ringbuf_output_counts(r, prog.rb_counts_fd) == 0, "output counts: %s",
	       perfbuf_last_error());
	EXPECT(perfbuf_ringbuf_output_counts(r, prog.events_fd) == -EINVAL, "a perf event array is no counts map");
	int ret = 0;
	EXPECT(accounted_run(prog.rb_prog_fd, 0, 128, 500, &ret) == 0 && ret == -EAGAIN, "ret %d", ret);
	ring_buffer__consume(rb);
	EXPECT(perfbuf_ringbuf_count_dropped(r, 2) == 0, "count_dropped");
	struct perfbuf_ringbuf_accounts a = { .sz = sizeof(a) };
	EXPECT(perfbuf_ringbuf_accounts(r, &a) == 0, "accounts");
	EXPECT(a.produced_known && a.produced == 500 && a.read == read, "produced %llu, read %llu",
	       (unsigned long long)a.produced, (unsigned long long)a.read);
	EXPECT(a.output_failed > 0 && a.produced == a.delivered + a.lost_total, "failed %llu, delivered %llu",
	       (unsigned long long)a.output_failed, (unsigned long long)a.delivered);
	ring_buffer__free(rb);
}

static void opts_are_checked(void)
{
	struct seen seen = { 0 };
	struct perfbuf_opts o = { .sz = sizeof(o), .output_counts_fd = prog.events_fd };
	errno = 0;
	EXPECT(!perfbuf_new(prog.events_fd, 8, on_sample, on_lost, &seen, &o) && errno == EINVAL,
	       "a perf event array is no counts map");
	EXPECT(strstr(perfbuf_last_error(), "PERCPU_ARRAY"), "%s", perfbuf_last_error());
	struct perfbuf_opts r = { .sz = sizeof(r), .reserved = 1 };
	EXPECT(!perfbuf_new(prog.events_fd, 8, on_sample, on_lost, &seen, &r) && errno == EINVAL, "reserved");
	struct perfbuf_opts n = { .sz = sizeof(n), .flags = PERFBUF_F_NO_HOTPLUG };
	struct perf_buffer *pb = perfbuf_new(prog.events_fd, 8, on_sample, on_lost, &seen, &n);
	EXPECT(pb, "PERFBUF_F_NO_HOTPLUG: %s", perfbuf_last_error());
	perf_buffer__free(pb);
	/* A caller built against the header before output_counts_fd. */
	struct perfbuf_opts older = { .sz = offsetof(struct perfbuf_opts, reserved) };
	pb = perfbuf_new(prog.events_fd, 8, on_sample, on_lost, &seen, &older);
	EXPECT(pb, "an older perfbuf_opts: %s", perfbuf_last_error());
	perf_buffer__free(pb);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		object_path = argv[1];
	int err = accounted_open(&prog, object_path, 4 * 4096);
	if (err) {
		fprintf(stderr, "accounting_test: cannot load %s: %s (root with BPF?)\n", object_path, strerror(-err));
		return ci_mode() ? 1 : 77;
	}
	static const struct test_case tests[] = {
		{ "perf_identity", perf_identity },
		{ "suggested_size_holds_the_burst", suggested_size_holds_the_burst },
		{ "ringbuf_identity", ringbuf_identity },
		{ "opts_are_checked", opts_are_checked },
	};
	int failed = run_tests("accounting_test", tests, (int)(sizeof(tests) / sizeof(tests[0])));
	accounted_close(&prog);
	return failed ? 1 : 0;
}
