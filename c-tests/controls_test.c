/* perfbuf's reader controls on the real kernel. Each test would fail
 * without its feature: batching must cut wakeups yet deliver within the
 * delay bound, overwrite must keep the newest records, pause must lose what
 * was produced meanwhile, wake must unblock a poll from another thread,
 * stats must equal what was produced, CPU subsets and the env opt-in must
 * take effect, and a high rate must switch libbpf's default attr to batched
 * wake-ups and back. */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <errno.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


static struct producer prod;

struct counts {
	unsigned samples, lost_records;
	unsigned long long lost;
	unsigned long long bytes;
	int seeds[512];
};

static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	struct counts *c = ctx;
	(void)cpu;
	if (c->samples < 512) {
		uint8_t first[8];
		memcpy(first, data, 8);
		c->seeds[c->samples] = first[0]; /* byte 0 of producer_expected is seed + 14 */
	}
	c->samples++;
	c->bytes += size;
}

static void on_lost(void *ctx, int cpu, __u64 cnt)
{
	struct counts *c = ctx;
	(void)cpu;
	c->lost += cnt;
	c->lost_records++;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void emit(int cpu, unsigned n, uint8_t seed, unsigned repeat, int *ret)
{
	int r = 0;
	int err = producer_emit_det(&prod, cpu, n, seed, repeat, &r);
	EXPECT(err == 0, "emit: %d", err);
	if (ret)
		*ret = r;
}

/* Per-record polling: count how often the ring is ready. Where every
 * record must wake the ring, poll waits up to `wait_ms` for it (a slow
 * irq_work is not a missing wake-up); where records must not, pass 0: poll
 * only looks, after the kernel's irq_work has had time to run. */
static unsigned ready_count(struct perf_buffer *pb, struct counts *c, unsigned records, int wait_ms)
{
	unsigned ready = 0;
	for (unsigned i = 0; i < records; i++) {
		emit(0, 16, (uint8_t)i, 1, NULL);
		if (!wait_ms)
			usleep(200);
		int r = perf_buffer__poll(pb, wait_ms);
		EXPECT(r >= 0, "poll %d", r);
		ready += r > 0;
	}
	(void)c;
	return ready;
}

static int count_batch(void *ctx, const struct perfbuf_batch *batch)
{
	((struct counts *)ctx)->samples += (unsigned)batch->samples;
	return 0;
}

/* A caller's own loop on `epfd` for `ms`, waiting `wait_ms` at a time and
 * draining `pb` after each wake-up, by consume and by the batch API in
 * turn. Returns the wake-ups: each drain must clear a tick of the delay
 * timer, or the fd stays ready and the loop spins. */
static unsigned own_epoll_loop(int epfd, struct perf_buffer *pb, struct counts *c, double ms, int wait_ms)
{
	unsigned wakes = 0;
	for (double t0 = now_ms(); now_ms() - t0 < ms;) {
		struct epoll_event ev;
		if (epoll_wait(epfd, &ev, 1, wait_ms) > 0) {
			wakes++;
			if (wakes % 2)
				perf_buffer__consume(pb);
			else
				perfbuf_consume_batch(pb, count_batch, c);
		}
	}
	return wakes;
}

static void test_batching(void)
{
	struct counts dflt = {0}, batched = {0};
	struct perf_buffer *a = perf_buffer__new(prod.map_fd, 4, on_sample, on_lost, &dflt, NULL);
	EXPECT(a, "new");
	unsigned ready_default = ready_count(a, &dflt, 128, 5000);
	perf_buffer__consume(a);
	perf_buffer__free(a);

	struct perfbuf_opts o = {.sz = sizeof(o), .wakeup_events = 32, .max_delay_ms = 5000};
	struct perf_buffer *b = perfbuf_new(prod.map_fd, 4, on_sample, on_lost, &batched, &o);
	EXPECT(b, "perfbuf_new");
	unsigned ready_batched = ready_count(b, &batched, 128, 0);
	perf_buffer__consume(b);
	printf("  batching: ring ready %u times for 128 records by default, %u with wakeup_events=32\n",
	       ready_default, ready_batched);
	EXPECT(ready_default >= 120, "default ready %u", ready_default);
	EXPECT(ready_batched <= 8, "batched ready %u", ready_batched);
	EXPECT(dflt.samples == 128 && batched.samples == 128, "delivered %u / %u", dflt.samples, batched.samples);
	perf_buffer__free(b);

	/* A partial batch is delivered within the delay bound by poll ... */
	struct counts c = {0};
	o.max_delay_ms = 30;
	b = perfbuf_new(prod.map_fd, 4, on_sample, on_lost, &c, &o);
	EXPECT(b, "perfbuf_new");
	perf_buffer__poll(b, 0);
	for (int i = 0; i < 5; i++)
		emit(i % 2, 24, (uint8_t)i, 1, NULL);
	double t0 = now_ms();
	while (c.samples < 5 && now_ms() - t0 < 10000)
		perf_buffer__poll(b, 1000);
	double waited = now_ms() - t0;
	printf("  batching: 5 records below the threshold delivered after %.1f ms (bound 30 ms)\n", waited);
	EXPECT(c.samples == 5, "delivered %u", c.samples);
	/* Seconds, not the bound: only a bound not applied at all fails (the
	 * 5 s of the previous buffer). How fast is make bench's business. */
	EXPECT(waited < 2500, "waited %.1f ms: the 30 ms bound was not applied", waited);

	/* ... and to a caller waiting on the epoll fd in its own loop. */
	int outer = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN};
	epoll_ctl(outer, EPOLL_CTL_ADD, perf_buffer__epoll_fd(b), &ev);
	emit(0, 24, 9, 1, NULL);
	t0 = now_ms();
	int n = epoll_wait(outer, &ev, 1, 2500);
	waited = now_ms() - t0;
	int r = perf_buffer__poll(b, 0);
	EXPECT(n == 1, "outer epoll: %d after %.1f ms", n, waited);
	EXPECT(r == 1 && c.samples == 6, "poll after outer epoll %d, samples %u", r, c.samples);
	/* That caller drains with consume or the batch API: each clears the
	 * tick, so its epoll_wait is not left returning at once (ticks every
	 * 15 ms here: a handful in 100 ms). */
	unsigned wakes = own_epoll_loop(outer, b, &c, 100, 10);
	printf("  batching: an own epoll loop on the epoll fd woke %u times in 100 ms\n", wakes);
	EXPECT(wakes < 30, "epoll fd ready %u times in 100 ms: a tick is never cleared", wakes);
	close(outer);
	perf_buffer__free(b);
}

static void test_overwrite(void)
{
	struct counts c = {0};
	struct perfbuf_opts o = {.sz = sizeof(o), .flags = PERFBUF_F_OVERWRITE};
	struct perf_buffer *pb = perfbuf_new(prod.map_fd, 1, on_sample, on_lost, &c, &o);
	EXPECT(pb, "perfbuf_new overwrite");
	if (!pb)
		return;
	int ret = 0;
	for (int i = 0; i < 200; i++)
		emit(0, 72, (uint8_t)i, 1, &ret);
	EXPECT(ret == 0, "overwrite ring never refuses a write: %d", ret);
	int got = perfbuf_snapshot(pb, 0);
	struct perfbuf_ring_stats st = {.sz = sizeof(st)};
	perfbuf_ring_stats(pb, 0, &st);
	printf("  overwrite: 200 records of 88 bytes into 4096: snapshot has %d, %llu bytes overwritten\n", got,
	       (unsigned long long)st.overwritten_bytes);
	EXPECT(got >= 40 && got <= 46, "snapshot %d", got);
	EXPECT(got == (int)c.samples, "callbacks %u", c.samples);
	/* The newest records, oldest first: seeds 200-got .. 199. */
	uint8_t want[72];
	int ordered = 1;
	for (int i = 0; i < got && i < 512; i++) {
		producer_expected(72, (uint8_t)(200 - got + i), want);
		ordered &= c.seeds[i] == want[0];
	}
	EXPECT(ordered, "snapshot is not the newest records in order");
	EXPECT(st.overwritten_bytes + (unsigned long long)got * 88 == 200ull * 88, "overwritten %llu",
	       (unsigned long long)st.overwritten_bytes);
	/* A second read sees only what came after the first. */
	c.samples = 0;
	for (int i = 0; i < 3; i++)
		emit(0, 72, (uint8_t)(100 + i), 1, NULL);
	got = perf_buffer__consume(pb) == 0 ? (int)c.samples : -1;
	EXPECT(got == 3, "second read %d", got);
	EXPECT(perfbuf_snapshot(pb, 0) == 0, "third read not empty");
	perf_buffer__free(pb);

	/* A forward ring has no snapshot. */
	pb = perfbuf_new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
	errno = 0;
	EXPECT(perfbuf_snapshot(pb, 0) == -EINVAL && errno == EINVAL, "forward snapshot");
	perf_buffer__free(pb);
}

static void test_pause(void)
{
	struct counts c = {0};
	struct perf_buffer *pb = perfbuf_new(prod.map_fd, 2, on_sample, on_lost, &c, NULL);
	EXPECT(pb, "new");
	EXPECT(perfbuf_pause(pb) == 0, "pause");
	int ret = 0;
	emit(0, 16, 1, 5, &ret);
	EXPECT(ret == -ENOSPC, "write while paused: %d", ret);
	EXPECT(perfbuf_resume(pb) == 0, "resume");
	emit(0, 16, 2, 1, &ret);
	EXPECT(ret == 0, "write after resume: %d", ret);
	perf_buffer__consume(pb);
	printf("  pause: %llu lost while paused, %u delivered after resume\n", c.lost, c.samples);
	EXPECT(c.lost == 5 && c.samples == 1, "lost %llu samples %u", c.lost, c.samples);
	perf_buffer__free(pb);
}

struct waker_arg {
	struct perf_buffer *pb;
	double woke_at;
};

static void *waker(void *p)
{
	struct waker_arg *a = p;
	usleep(50 * 1000);
	a->woke_at = now_ms();
	perfbuf_wake(a->pb);
	return NULL;
}

static void test_wake(void)
{
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
	EXPECT(pb, "new");
	struct waker_arg a = {.pb = pb};
	pthread_t t;
	pthread_create(&t, NULL, waker, &a);
	errno = 0;
	int r = perf_buffer__poll(pb, 10000);
	double latency = now_ms() - a.woke_at;
	pthread_join(t, NULL);
	printf("  wake: poll returned %d %.3f ms after perfbuf_wake from another thread\n", r, latency);
	EXPECT(r == -ECANCELED && errno == ECANCELED, "poll %d errno %d", r, errno);
	EXPECT(perf_buffer__poll(pb, 0) == 0, "wake is consumed once");
	/* A wake before the poll is not lost; free right after a wake is fine. */
	EXPECT(perfbuf_wake(pb) == 0, "wake");
	EXPECT(perf_buffer__poll(pb, 10000) == -ECANCELED, "early wake");
	EXPECT(perfbuf_wake(pb) == 0, "wake");
	perf_buffer__free(pb);
	EXPECT(perfbuf_wake(NULL) == -EINVAL, "wake NULL");
}

static void test_stats_and_cpus(void)
{
	struct counts c = {0};
	struct perf_buffer *pb = perfbuf_new(prod.map_fd, 4, on_sample, on_lost, &c, NULL);
	EXPECT(pb, "new");
	emit(0, 100, 1, 7, NULL); /* raw 100 -> 100 bytes + 12 header = 112-byte records */
	emit(1, 20, 2, 3, NULL);  /* raw 20, 32-byte records */
	struct perfbuf_ring_stats s0 = {.sz = sizeof(s0)}, s1 = {.sz = sizeof(s1)};
	perfbuf_ring_stats(pb, 0, &s0);
	perfbuf_ring_stats(pb, 1, &s1);
	EXPECT(s0.pending_bytes == 7 * 112 && s1.pending_bytes == 3 * 32, "pending %llu %llu",
	       (unsigned long long)s0.pending_bytes, (unsigned long long)s1.pending_bytes);
	perf_buffer__consume(pb);
	perfbuf_ring_stats(pb, 0, &s0);
	perfbuf_ring_stats(pb, 1, &s1);
	printf("  stats: cpu0 %llu records %llu bytes, cpu1 %llu records %llu bytes, pending %llu/%llu\n",
	       (unsigned long long)s0.records, (unsigned long long)s0.bytes, (unsigned long long)s1.records,
	       (unsigned long long)s1.bytes, (unsigned long long)s0.pending_bytes,
	       (unsigned long long)s1.pending_bytes);
	EXPECT(s0.cpu == 0 && s0.records == 7 && s0.bytes == 7 * 112 && s0.pending_bytes == 0, "cpu0");
	EXPECT(s1.cpu == 1 && s1.records == 3 && s1.bytes == 3 * 32 && s1.pending_bytes == 0, "cpu1");
	EXPECT(s0.data_size == 4 * 4096 && s0.lost == 0 && s0.resyncs == 0, "cpu0 figures");
	struct perfbuf_ring_stats small = {.sz = 8};
	EXPECT(perfbuf_ring_stats(pb, 0, &small) == -EINVAL, "sz too small");
	EXPECT(perfbuf_ring_stats(pb, 9, &s0) == -EINVAL, "bad index");
	perf_buffer__free(pb);

	int cpus[2] = {1, 4000};
	struct perfbuf_opts o = {.sz = sizeof(o), .cpus = cpus, .cpu_cnt = 2};
	pb = perfbuf_new(prod.map_fd, 1, on_sample, on_lost, &c, &o);
	EXPECT(pb && perf_buffer__buffer_cnt(pb) == 1 && perfbuf_buffer_cpu(pb, 0) == 1,
	       "subset {1, 4000}: one ring on cpu 1");
	int ret = 0;
	emit(0, 8, 0, 1, &ret);
	EXPECT(ret == -ENOENT, "cpu 0 not attached: %d", ret);
	perf_buffer__free(pb);
}

/* A 1-page ring on cpu 0 overflowed by `n` 64-byte records, then drained. */
static struct perf_buffer *overflowed(struct counts *c, unsigned flags, unsigned n)
{
	struct perfbuf_opts o = {.sz = sizeof(o), .flags = flags, .cpus = (int[]){0}, .cpu_cnt = 1};
	struct perf_buffer *pb = flags ? perfbuf_new(prod.map_fd, 1, on_sample, on_lost, c, &o)
				       : perf_buffer__new(prod.map_fd, 1, on_sample, on_lost, c, NULL);
	EXPECT(pb, "new: %s", perfbuf_last_error());
	if (!pb)
		return NULL;
	emit(0, 64, 1, n, NULL);
	perf_buffer__consume(pb);
	return pb;
}

/* What a read() of ring 0's event returns: 8 bytes with libbpf's attr, 16
 * (count, lost) with PERFBUF_F_COUNT_LOST. */
static long event_read_size(struct perf_buffer *pb)
{
	uint64_t words[4];
	int fd = perf_buffer__buffer_fd(pb, 0);
	return fd < 0 ? -1 : (long)read(fd, words, sizeof(words));
}

/* PERFBUF_F_COUNT_LOST: lost == produced - delivered before the kernel
 * writes its LOST record; the final drain reports it once, the LOST record
 * written later does not again. libbpf's constructor: today's figures. */
static void test_count_lost(void)
{
	enum { N = 2000 };
	/* Before Linux 6.0 the flag changes nothing: known once the LOST record comes. */
	bool exact = kernel_has_format_lost();
	struct counts c = {0};
	struct perf_buffer *pb = overflowed(&c, PERFBUF_F_COUNT_LOST, N);
	if (!pb)
		return;
	unsigned long long lost = N - c.samples, unwritten = exact ? lost : 0;
	struct perfbuf_ring_stats st = {.sz = sizeof(st)};
	perfbuf_ring_stats(pb, 0, &st);
	printf("  count_lost: %u delivered, stats lost %llu (%llu unreported), read() %ld bytes\n", c.samples,
	       (unsigned long long)st.lost, (unsigned long long)st.lost_unreported, event_read_size(pb));
	EXPECT(c.samples < N && c.lost == 0, "overflow without a LOST record: %u, %llu", c.samples, c.lost);
	EXPECT(st.lost == unwritten && st.lost_unreported == unwritten, "exact lost %llu/%llu",
	       (unsigned long long)st.lost, (unsigned long long)st.lost_unreported);
	EXPECT(event_read_size(pb) == (exact ? 16 : 8), "count_lost event reads {value, lost}");
	uint64_t reported = 0;
	EXPECT(perfbuf_drain_final(pb, &reported) == 0 && reported == unwritten, "final drain %llu",
	       (unsigned long long)reported);
	EXPECT(c.lost == unwritten && c.lost_records == exact, "one report of %llu: %llu in %u", unwritten, c.lost,
	       c.lost_records);
	emit(0, 64, 1, 1, NULL);
	perf_buffer__consume(pb);
	perfbuf_ring_stats(pb, 0, &st);
	EXPECT(c.samples == N - lost + 1 && c.lost == lost && c.lost_records == 1,
	       "the kernel's LOST record is not reported again: %u samples, %llu lost", c.samples, c.lost);
	EXPECT(st.lost == lost && st.lost_unreported == 0, "stats after: %llu", (unsigned long long)st.lost);
	perf_buffer__free(pb);

	struct counts d = {0};
	pb = overflowed(&d, 0, N);
	if (!pb)
		return;
	lost = N - d.samples;
	perfbuf_ring_stats(pb, 0, &st);
	EXPECT(st.lost == 0 && st.lost_unreported == 0, "libbpf's attr has no count: %llu",
	       (unsigned long long)st.lost);
	EXPECT(event_read_size(pb) == 8, "libbpf's event reads one count");
	EXPECT(perfbuf_drain_final(pb, &reported) == 0 && reported == 0 && d.lost == 0, "nothing to report");
	emit(0, 64, 1, 1, NULL);
	perf_buffer__consume(pb);
	EXPECT(d.lost == lost && d.lost_records == 1, "libbpf's LOST record: %llu", d.lost);
	perf_buffer__free(pb);
}

/* peek shows the next record without consuming it, advance moves past it,
 * and only publish moves data_tail; records that wrap come out whole. */
static void test_record_api(void)
{
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
	EXPECT(pb, "new");
	void *base;
	size_t size;
	perf_buffer__buffer(pb, 0, &base, &size);
	struct perf_event_mmap_page *mp = base;
	const struct perf_event_header *rec = NULL;
	size_t len = 0;
	EXPECT(perfbuf_ring_peek(pb, 0, &rec, &len) == 0, "empty ring");
	EXPECT(perfbuf_ring_advance(pb, 0) == -ENODATA, "advance on empty");
	/* Move the ring's position near its end so later records wrap. */
	emit(0, 72, 0, 40, NULL);
	perf_buffer__consume(pb);
	unsigned wrapped = 0, checked = 0;
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 5; i++)
			emit(0, 72 + 8 * i, (uint8_t)(round * 5 + i), 1, NULL);
		uint64_t tail0 = mp->data_tail;
		for (int i = 0; i < 5; i++) {
			EXPECT(perfbuf_ring_peek(pb, 0, &rec, &len) == 1, "peek %d", i);
			const struct perf_event_header *again = NULL;
			size_t len2 = 0;
			perfbuf_ring_peek(pb, 0, &again, &len2);
			EXPECT(again == rec && len2 == len, "peek is idempotent");
			uint8_t want[128];
			unsigned n = 72 + 8 * i;
			producer_expected(n, (uint8_t)(round * 5 + i), want);
			EXPECT(rec->type == PERF_RECORD_SAMPLE && len == rec->size &&
				       memcmp((const uint8_t *)rec + 12, want, n) == 0,
			       "record %d of round %d", i, round);
			checked++;
			wrapped += (const uint8_t *)rec < (const uint8_t *)base ||
				   (const uint8_t *)rec >= (const uint8_t *)base + 4096 + size;
			EXPECT(perfbuf_ring_advance(pb, 0) == 0, "advance");
			EXPECT(mp->data_tail == tail0, "tail moved before publish");
		}
		EXPECT(perfbuf_ring_peek(pb, 0, &rec, &len) == 0, "drained");
		EXPECT(perfbuf_ring_publish(pb, 0) == 0, "publish");
		EXPECT(mp->data_tail == mp->data_head, "tail published");
	}
	printf("  record api: %u records peeked, advanced, published; %u wrapped and were copied whole\n", checked,
	       wrapped);
	EXPECT(wrapped > 0, "no record wrapped");
	EXPECT(perfbuf_ring_peek(pb, 5, &rec, &len) == -EINVAL, "bad index");
	EXPECT(perfbuf_ring_peek(pb, 0, NULL, &len) == -EINVAL, "NULL out");
	perf_buffer__free(pb);
}

struct batch_check {
	unsigned runs, records, bad, wrapped_runs;
	unsigned long long lost;
	uint8_t next_seed[2]; /* the seed each CPU's next sample must carry */
	int same_seed;	      /* overflow phase: every sample has seed 0 */
	const uint8_t *ring_lo, *ring_hi;
	unsigned miscounted; /* runs whose samples/others counts were wrong */
};

static int check_batch(void *ctx, const struct perfbuf_batch *batch)
{
	struct batch_check *b = ctx;
	const unsigned char *pos = batch->records, *end = pos + batch->len;
	const struct perf_event_header *rec;
	size_t samples = 0, others = 0;
	int cpu = batch->cpu;
	b->runs++;
	b->wrapped_runs += (const uint8_t *)batch->records < b->ring_lo || (const uint8_t *)batch->records >= b->ring_hi;
	while ((rec = perfbuf_batch_next(&pos, end))) {
		if (rec->type != PERF_RECORD_SAMPLE)
			others++;
		else
			samples++;
		if (rec->type == PERF_RECORD_LOST) {
			b->lost += *(const uint64_t *)(const void *)((const uint8_t *)rec + 16);
			continue;
		}
		uint32_t size;
		const uint8_t *data = perfbuf_sample_raw(rec, &size);
		uint8_t want[128];
		producer_expected(64, b->same_seed ? 0 : b->next_seed[cpu & 1]++, want);
		b->bad += size != 68 || memcmp(data, want, 64) != 0;
		b->records++;
	}
	b->miscounted += samples != batch->samples || others != batch->others;
	return 0;
}

/* The batch API: runs of whole records, walked with perfbuf_batch_next,
 * bytes and order intact across the ring's end, lost records reported. */
static void test_batch(void)
{
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
	EXPECT(pb, "new");
	struct batch_check b = {0};
	void *base;
	size_t size;
	perf_buffer__buffer(pb, 0, &base, &size);
	b.ring_lo = (const uint8_t *)base + 4096;
	b.ring_hi = b.ring_lo + size;
	uint8_t seed[2] = {0, 0};
	unsigned produced = 0;
	for (int round = 0; round < 30; round++) {
		for (int cpu = 0; cpu < 2; cpu++)
			for (int i = 0; i < 7; i++, produced++)
				emit(cpu, 64, seed[cpu]++, 1, NULL);
		int n = perfbuf_consume_batch(pb, check_batch, &b);
		EXPECT(n == 14, "round %d: %d records", round, n);
	}
	printf("  batch: %u records in %u runs (%u were a record copied across the ring end), %u bad\n", b.records,
	       b.runs, b.wrapped_runs, b.bad);
	EXPECT(b.records == produced && b.bad == 0 && b.wrapped_runs > 0, "batch contents");
	/* Overflow: the LOST record arrives in a run before the next sample. */
	b.same_seed = 1;
	unsigned before = b.records;
	emit(0, 64, 0, 300, NULL);
	perfbuf_consume_batch(pb, check_batch, &b);
	emit(0, 64, 0, 1, NULL);
	perfbuf_consume_batch(pb, check_batch, &b);
	printf("  batch: 301 produced into a full ring: %u delivered + %llu lost\n", b.records - before, b.lost);
	EXPECT(b.records - before + b.lost == 301 && b.bad == 0, "lost %llu bad %u", b.lost, b.bad);
	EXPECT(b.miscounted == 0, "%u runs with wrong samples/others counts", b.miscounted);
	EXPECT(perfbuf_consume_batch(pb, NULL, NULL) == -EINVAL, "NULL fn");
	perf_buffer__free(pb);
}

static void test_env_opt_in(void)
{
	setenv("PERFBUF_WAKEUP_EVENTS", "lots", 1);
	errno = 0;
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
	EXPECT(!pb && errno == EINVAL, "invalid env accepted");
	setenv("PERFBUF_WAKEUP_EVENTS", "32", 1);
	setenv("PERFBUF_MAX_DELAY_MS", "20", 1);
	struct counts c = {0};
	double t0 = now_ms();
	pb = perf_buffer__new(prod.map_fd, 4, on_sample, on_lost, &c, NULL);
	EXPECT(pb, "env batching");
	unsigned ready = ready_count(pb, &c, 64, 0);
	/* Two 32-record wake-ups, plus the ticks of the 20 ms delay timer
	 * (periodic since the buffer was made: counted from before it was)
	 * that fit in the time the loop took, which a loaded machine
	 * stretches: at most one per 20 ms, plus one. Per-record wake-ups
	 * would give 64. */
	double took = now_ms() - t0;
	unsigned allowed = 2 + (unsigned)(took / 20) + 1;
	t0 = now_ms();
	while (c.samples < 64 && now_ms() - t0 < 10000)
		perf_buffer__poll(pb, 100);
	printf("  env: PERFBUF_WAKEUP_EVENTS=32: ready %u times for 64 records in %.1f ms (at most %u), "
	       "all %u delivered\n", ready, took, allowed, c.samples);
	EXPECT(ready <= allowed && c.samples == 64, "ready %u of at most %u, samples %u", ready,
	       allowed, c.samples);
	perf_buffer__free(pb);
	unsetenv("PERFBUF_WAKEUP_EVENTS");
	unsetenv("PERFBUF_MAX_DELAY_MS");
}

static struct perfbuf_ring_stats ring_figures(struct perf_buffer *pb, size_t idx)
{
	struct perfbuf_ring_stats s = {.sz = sizeof(s)};
	EXPECT(perfbuf_ring_stats(pb, idx, &s) == 0, "ring_stats");
	return s;
}

/* Emits bursts on CPU 0 for `ms`, polling without waiting in between. */
static unsigned long long emit_fast(struct perf_buffer *pb, double ms)
{
	unsigned long long produced = 0;
	double t0 = now_ms();
	/* 20 records per call, then a poll: the records of a call wait for
	 * it (the fast mode batches a reader only while records wait little
	 * for it). */
	while (now_ms() - t0 < ms) {
		emit(0, 16, 1, 20, NULL);
		produced += 20;
		perf_buffer__poll(pb, 0);
	}
	return produced;
}

/* Full rate until ring 0 batches: 200 ms, and more while it has not (under
 * valgrind the reader can fall behind, and a reader that falls behind is
 * sent back to per-record wake-ups, as it should be). */
static unsigned long long emit_until_batched(struct perf_buffer *pb)
{
	unsigned long long produced = emit_fast(pb, 200);
	for (double t0 = now_ms(); ring_figures(pb, 0).batched != 1 && now_ms() - t0 < 5000;)
		produced += emit_fast(pb, 50);
	return produced;
}

/* Adaptive wake-ups under libbpf's default attr: a sustained high rate
 * switches the ring to batched wake-ups; every record still arrives, below
 * the batch within the delay bound; when the rate falls the ring wakes per
 * record again and the timer stops, so an idle poll sleeps its timeout. */
static void test_adaptive(void)
{
	setenv("PERFBUF_ADAPTIVE", "1", 1); /* the opt-in */
	struct counts c = {0};
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 64, on_sample, on_lost, &c, NULL);
	EXPECT(pb, "new");
	double t0 = now_ms();
	unsigned long long produced = emit_until_batched(pb);
	double rate = produced / ((now_ms() - t0) / 1e3);
	/* Seen as the stream ends: a drain slowed down (a sanitizer, a loaded
	 * machine) can outlast the rate window, and the ring then rightly
	 * stops batching before the last record is delivered. */
	struct perfbuf_ring_stats s = ring_figures(pb, 0);
	for (t0 = now_ms(); c.samples + c.lost < produced && now_ms() - t0 < 30000;)
		perf_buffer__poll(pb, 100);
	printf("  adaptive: %llu records at %.0f k/s: delivered %u, lost %llu, batched %llu, switches %llu\n",
	       produced, rate / 1e3, c.samples, c.lost, (unsigned long long)s.batched,
	       (unsigned long long)s.batch_switches);
	EXPECT(c.samples == produced && c.lost == 0, "delivered %u lost %llu of %llu", c.samples, c.lost, produced);
	EXPECT(s.batched == 1 && s.batch_switches >= 1, "ring not batched at %.0f records/s", rate);
	/* A caller waiting on the epoll fd itself: consume and the batch API
	 * clear a tick, so the fd is not left ready (epoll_wait spinning). */
	int epfd = perf_buffer__epoll_fd(pb);
	unsigned wakes = own_epoll_loop(epfd, pb, &c, 20, 5);
	printf("  adaptive: an own epoll_wait on the epoll fd returned %u times in 20 ms\n", wakes);
	EXPECT(wakes < 200, "epoll fd ready %u times in 20 ms: a tick is never cleared", wakes);
	/* The delay timer ticks every 0.5 ms, but as in libbpf an empty poll
	 * returns 0 only when its timeout has passed. */
	t0 = now_ms();
	int r = perf_buffer__poll(pb, 40);
	double waited = now_ms() - t0;
	EXPECT(r == 0 && waited >= 39, "batched, empty: poll(40) returned %d after %.1f ms", r, waited);

	unsigned before = c.samples;
	emit(0, 16, 2, 10, NULL);
	t0 = now_ms();
	while (c.samples < before + 10 && now_ms() - t0 < 10000)
		perf_buffer__poll(pb, 100);
	waited = now_ms() - t0;
	printf("  adaptive: 10 records below the batch delivered after %.2f ms\n", waited);
	EXPECT(c.samples == before + 10, "delivered %u after %.1f ms", c.samples - before, waited);

	/* No records: the rate falls and the ring stops batching. Polled until
	 * it does (a loaded machine may take longer than the rate window; the
	 * deadline only catches a ring that never stops). */
	t0 = now_ms();
	do {
		perf_buffer__poll(pb, 20);
		s = ring_figures(pb, 0);
	} while (s.batched && now_ms() - t0 < 10000);
	printf("  adaptive: no records: batching stopped after %.0f ms\n", now_ms() - t0);
	EXPECT(s.batched == 0, "still batched after %.0f ms with no records", now_ms() - t0);
	t0 = now_ms();
	r = perf_buffer__poll(pb, 200);
	waited = now_ms() - t0;
	printf("  adaptive: rate fell: batched %llu, an idle poll(200) returned %d after %.1f ms\n",
	       (unsigned long long)s.batched, r, waited);
	EXPECT(r == 0 && waited >= 150, "idle poll returned %d after %.1f ms: the timer still ticks", r, waited);
	/* Per-record wake-ups again: one record makes the ring ready at once. */
	emit(0, 16, 3, 1, NULL);
	r = perf_buffer__poll(pb, 5000);
	EXPECT(r == 1 && c.samples == before + 11, "one record: poll %d, delivered %u", r, c.samples - before);
	/* Not batched, so no tick either: the epoll fd stays quiet. (A poll
	 * that reads records must not start the stopped timer again.) */
	struct epoll_event ev;
	int ticks = epoll_wait(epfd, &ev, 1, 20);
	EXPECT(ticks == 0, "not batched, yet the epoll fd became ready (%d): the timer ticks again", ticks);
	perf_buffer__free(pb);

	/* Ordered reading takes no adaptive decisions: turning it on while
	 * batched sends the ring back to per-record wake-ups and stops the
	 * timer, so the epoll fd is quiet and one record makes it ready. */
	memset(&c, 0, sizeof(c));
	pb = perf_buffer__new(prod.map_fd, 64, on_sample, on_lost, &c, NULL);
	EXPECT(pb, "new");
	produced = emit_until_batched(pb);
	EXPECT(ring_figures(pb, 0).batched == 1, "not batched before ordering");
	struct perfbuf_order_opts oo = {.sz = sizeof(oo), .idle_wait_ms = 1};
	EXPECT(perfbuf_set_order(pb, &oo) == 0, "set_order");
	while (c.samples + c.lost < produced && perf_buffer__poll(pb, 50) > 0)
		;
	perfbuf_ordered_flush(pb);
	epfd = perf_buffer__epoll_fd(pb);
	int ready = epoll_wait(epfd, &ev, 1, 20);
	EXPECT(ready == 0, "ordered after batching: the epoll fd became ready (%d) with nothing written", ready);
	emit(0, 16, 3, 1, NULL);
	ready = epoll_wait(epfd, &ev, 1, 5000);
	printf("  adaptive: ordered after batching: delivered %u of %llu, one record makes the fd ready: %d\n",
	       c.samples, produced, ready);
	EXPECT(ready == 1 && ev.data.u64 == 0, "one record did not wake ring 0 (%d, token %llu)", ready,
	       (unsigned long long)ev.data.u64);
	perf_buffer__free(pb);

	/* Off by default and with PERFBUF_ADAPTIVE=0: libbpf's wake-ups. */
	for (int opt = 0; opt < 2; opt++) {
		if (opt)
			setenv("PERFBUF_ADAPTIVE", "0", 1);
		else
			unsetenv("PERFBUF_ADAPTIVE");
		struct counts off = {0};
		pb = perf_buffer__new(prod.map_fd, 64, on_sample, on_lost, &off, NULL);
		EXPECT(pb, "new without the opt-in");
		emit_fast(pb, 120);
		s = ring_figures(pb, 0);
		EXPECT(s.batched == 0 && s.batch_switches == 0, "batched without the opt-in (%d)", opt);
		perf_buffer__free(pb);
	}
	setenv("PERFBUF_ADAPTIVE", "maybe", 1);
	errno = 0;
	pb = perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
	EXPECT(!pb && errno == EINVAL, "PERFBUF_ADAPTIVE=maybe accepted");
	unsetenv("PERFBUF_ADAPTIVE");
}

/* Emits `n` records on CPU 0 one call each, seed i for the i-th, with
 * nobody reading. */
static void stall(unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		emit(0, 16, (uint8_t)i, 1, NULL);
}

/* The fast mode's spill ring: a CPU gets one when it first batches or when
 * a drain finds the caller's ring half full (before that it has libbpf's
 * event and ring only); from then on its records go to a ring 16 times the
 * caller's, so a stall of 1000 records, 8 times what the caller's 1-page
 * ring holds, loses nothing and keeps the order. Pausing covers the spill
 * ring. A caller that starts reading its ring itself gets the records
 * there from then on, and what the spill ring failed to write is still
 * reported exactly. A caller that reads its ring from the start gets
 * libbpf's ring, which overflows as libbpf's does. */
static void test_spill(void)
{
	setenv("PERFBUF_ADAPTIVE", "1", 1); /* the opt-in */
	struct counts c = {0};
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1, on_sample, on_lost, &c, NULL);
	EXPECT(pb, "new");
	EXPECT(ring_figures(pb, 0).spill_size == 0, "a spill ring of %llu bytes before any need",
	       (unsigned long long)ring_figures(pb, 0).spill_size);
	stall(80); /* more than half of the 128-record ring */
	perf_buffer__consume(pb);
	EXPECT(c.samples == 80 && ring_figures(pb, 0).spill_size == 16 * 4096,
	       "half a ring: delivered %u, spill ring of %llu bytes", c.samples,
	       (unsigned long long)ring_figures(pb, 0).spill_size);
	memset(&c, 0, sizeof(c));
	stall(1000);
	perf_buffer__consume(pb);
	unsigned in_order = 0;
	while (in_order < 512 && c.seeds[in_order] == (uint8_t)(in_order + 14))
		in_order++;
	printf("  spill: 1000 records while nobody read a 128-record ring: delivered %u, lost %llu, first %u in "
	       "order\n",
	       c.samples, c.lost, in_order);
	EXPECT(c.samples == 1000 && c.lost == 0 && in_order == 512, "delivered %u lost %llu in order %u", c.samples,
	       c.lost, in_order);
	EXPECT(perfbuf_pause(pb) == 0, "pause");
	int ret = 0;
	emit(0, 16, 1, 5, &ret);
	EXPECT(ret == -ENOSPC, "write into the spill ring while paused: %d", ret);
	EXPECT(perfbuf_resume(pb) == 0, "resume");

	/* Overflow the 2048-record spill ring, its last writes refused (the
	 * kernel would report them only with a later record there), then read
	 * the caller's ring directly: the slot goes back there, and perfbuf
	 * reports what the spill ring refused. The 5 refused while paused
	 * count too: the kernel reports them with the first of the 3000. */
	memset(&c, 0, sizeof(c));
	struct perfbuf_ring_stats before = ring_figures(pb, 0);
	emit(0, 16, 1, 3000, NULL);
	void *base;
	size_t size;
	EXPECT(perf_buffer__buffer(pb, 0, &base, &size) == 0, "buffer");
	perf_buffer__consume(pb);
	const volatile struct perf_event_mmap_page *mp = base;
	uint64_t head = mp->data_head;
	emit(0, 16, 1, 10, NULL);
	uint64_t moved = mp->data_head - head;
	for (double t = now_ms(); now_ms() - t < 250;)
		perf_buffer__poll(pb, 1);
	perf_buffer__consume(pb);
	struct perfbuf_ring_stats after = ring_figures(pb, 0);
	printf("  spill: 5 paused + 3000 into the spill ring, a raw reader, 10 more: delivered %u + lost %llu; the 10 "
	       "put %llu bytes in the caller's ring; spill ring then %llu bytes\n",
	       c.samples, c.lost, (unsigned long long)moved, (unsigned long long)after.spill_size);
	EXPECT(c.samples + c.lost == 3015 && c.lost > 5, "delivered %u + lost %llu of 3015", c.samples, c.lost);
	/* The lost report perfbuf made for the spill ring counts as a record. */
	unsigned long long records = after.records - before.records;
	EXPECT(records == c.samples + c.lost_records, "figures: %llu records, callbacks: %u + %u lost reports", records,
	       c.samples, c.lost_records);
	EXPECT(moved == 10 * 32, "the 10 did not land in the caller's ring: %llu bytes", (unsigned long long)moved);
	EXPECT(after.spill_size == 0, "the spill ring was not released once quiet and read");
	perf_buffer__free(pb);

	/* Batched, then a raw reader: the ring goes back to the caller's
	 * event, and with nothing batched the timer stops at once (a raw
	 * reader may never call what would stop it later). */
	memset(&c, 0, sizeof(c));
	pb = perf_buffer__new(prod.map_fd, 64, on_sample, on_lost, &c, NULL);
	EXPECT(pb, "new");
	unsigned long long produced = emit_until_batched(pb);
	EXPECT(ring_figures(pb, 0).batched == 1, "not batched at full rate");
	perf_buffer__consume(pb);
	for (size_t i = 0; i < perf_buffer__buffer_cnt(pb); i++)
		EXPECT(perf_buffer__buffer(pb, (int)i, &base, &size) == 0, "buffer");
	struct epoll_event ev;
	int ticks = epoll_wait(perf_buffer__epoll_fd(pb), &ev, 1, 20);
	perf_buffer__consume(pb);
	printf("  spill: batched, then a raw reader: delivered %u of %llu, lost %llu, then idle: epoll fd ready %d\n",
	       c.samples, produced, c.lost, ticks);
	EXPECT(ring_figures(pb, 0).batched == 0, "still batched after perf_buffer__buffer");
	EXPECT(c.samples == produced && c.lost == 0, "delivered %u lost %llu of %llu", c.samples, c.lost, produced);
	EXPECT(ticks == 0, "a raw reader stood the ring down, yet the epoll fd became ready (%d): the timer ticks on",
	       ticks);
	perf_buffer__free(pb);

	/* A raw reader from the start: the caller's 128-record ring, which
	 * overflows, and the kernel reports the stall's refused records with
	 * the next record it writes there. */
	memset(&c, 0, sizeof(c));
	pb = perf_buffer__new(prod.map_fd, 1, on_sample, on_lost, &c, NULL);
	EXPECT(pb && perf_buffer__buffer(pb, 0, &base, &size) == 0 && size == 4096, "raw reader from the start");
	stall(1000);
	perf_buffer__consume(pb);
	emit(0, 16, 1, 1, NULL);
	perf_buffer__consume(pb);
	printf("  spill: a raw reader from the start, a 1000-record stall and one more: delivered %u, lost %llu\n",
	       c.samples, c.lost);
	EXPECT(c.samples < 1000 && c.lost > 0 && c.samples + c.lost == 1001, "raw reader: delivered %u lost %llu",
	       c.samples, c.lost);
	perf_buffer__free(pb);
	unsetenv("PERFBUF_ADAPTIVE");
}

/* Messages: a program takes them with perfbuf_set_print (every level,
 * whatever PERFBUF_LOG says), NULL silences them, the printer returned
 * restores the default; each failure says what failed, the errno's name
 * and text and the likely fix, also through perfbuf_last_error(). */
struct printed {
	int count[3];
	char last[512];
};

static void on_print(int level, const char *msg, void *ctx)
{
	struct printed *p = ctx;
	if (level >= 0 && level < 3)
		p->count[level]++;
	snprintf(p->last, sizeof(p->last), "%s", msg);
}

/* What perf_buffer__new says in a process without privileges. */
static void unprivileged_message(char *out, size_t len)
{
	int fds[2];
	if (pipe(fds))
		return;
	pid_t pid = fork();
	if (pid == 0) {
		struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
		struct __user_cap_data_struct none[2] = {{0}};
		syscall(SYS_capset, &hdr, none);
		errno = 0;
		struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 8, NULL, NULL, NULL, NULL);
		char msg[512];
		snprintf(msg, sizeof(msg), "%s errno %d: %s", pb ? "built" : "NULL", errno, perfbuf_last_error());
		_exit(write(fds[1], msg, strlen(msg) + 1) > 0 ? 0 : 1);
	}
	close(fds[1]);
	ssize_t n = read(fds[0], out, len - 1);
	out[n > 0 ? n : 0] = 0;
	close(fds[0]);
	waitpid(pid, NULL, 0);
}

static void test_messages(void)
{
	struct printed p = {0};
	perfbuf_print_fn builtin = perfbuf_set_print(on_print, &p);
	EXPECT(builtin != NULL, "no built-in printer returned");
	errno = 0;
	EXPECT(!perf_buffer__new(prod.map_fd, 3, NULL, NULL, NULL, NULL) && errno == EINVAL, "3 pages");
	printf("  messages: 3 pages: \"%s\"\n", p.last);
	EXPECT(p.count[PERFBUF_WARN] == 1 && strstr(p.last, "power of two, but is 3") && strstr(p.last, "(EINVAL)") &&
		       strstr(p.last, "use a power of two"),
	       "warning: %d, \"%s\"", p.count[PERFBUF_WARN], p.last);
	EXPECT(!strcmp(perfbuf_last_error(), p.last), "last error \"%s\"", perfbuf_last_error());
	/* A pipe is not a map. */
	int fds[2];
	EXPECT(pipe(fds) == 0, "pipe");
	EXPECT(!perf_buffer__new(fds[0], 8, NULL, NULL, NULL, NULL), "a pipe as map");
	printf("  messages: a pipe as map: \"%s\"\n", perfbuf_last_error());
	EXPECT(strstr(perfbuf_last_error(), "BPF_MAP_TYPE_PERF_EVENT_ARRAY"), "pipe: \"%s\"", perfbuf_last_error());
	close(fds[0]);
	close(fds[1]);
	/* Info and debug reach the printer too. */
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 8, NULL, NULL, NULL, NULL);
	EXPECT(pb && p.count[PERFBUF_INFO] >= 1 && strstr(p.last, "rings of 8 pages"), "info: %d, \"%s\"",
	       p.count[PERFBUF_INFO], p.last);
	perf_buffer__free(pb);
	/* NULL silences; the built-in printer comes back. */
	EXPECT(perfbuf_set_print(NULL, NULL) == on_print, "previous printer");
	int before = p.count[PERFBUF_WARN];
	EXPECT(!perf_buffer__new(prod.map_fd, 3, NULL, NULL, NULL, NULL), "3 pages");
	EXPECT(p.count[PERFBUF_WARN] == before, "a silenced message reached the printer");
	EXPECT(perfbuf_set_print(builtin, NULL) == NULL, "previous printer: NULL");
	/* Without privileges: the errno's name and the capabilities needed. */
	char msg[512] = "";
	unprivileged_message(msg, sizeof(msg));
	printf("  messages: without privileges: \"%s\"\n", msg);
	EXPECT(strstr(msg, "NULL errno 13") && strstr(msg, "EACCES") && strstr(msg, "CAP_PERFMON"), "%s", msg);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	producer_open_or_exit(&prod, 0);
	static const struct test_case tests[] = {{"batching", test_batching}, {"overwrite", test_overwrite},
		     {"pause", test_pause},	  {"wake", test_wake},
		     {"stats_and_cpus", test_stats_and_cpus}, {"count_lost", test_count_lost},
		     {"record_api", test_record_api},
		     {"batch", test_batch},
		     {"env_opt_in", test_env_opt_in}, {"adaptive", test_adaptive}, {"spill", test_spill},
		     {"messages", test_messages}};
	int failed = run_tests("controls_test", tests, (int)(sizeof(tests) / sizeof(tests[0])));
	producer_close(&prod);
	return failed ? 1 : 0;
}
