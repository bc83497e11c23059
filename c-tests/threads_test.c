/* The threading contract on the real kernel, from several threads: wakes
 * from other threads while the owner polls and producers emit on both CPUs,
 * independent buffers polled concurrently, and a buffer handed from one
 * thread to another. Every record is accounted for exactly. Built twice by
 * the Makefile: plainly, and under ThreadSanitizer with libperfbuf itself
 * instrumented (scripts/tsan.sh). Checks (EXPECT) run on the main thread
 * only; worker threads report through their own structs. */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SIZE 32

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct tally {
	unsigned long long samples, lost, bad;
	uint8_t expected[SIZE];
};

static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	struct tally *t = ctx;
	(void)cpu;
	t->samples++;
	/* raw size is padded: SIZE bytes + 4-byte size word end on 8 */
	if (size < SIZE || memcmp(data, t->expected, SIZE) != 0)
		t->bad++;
}

static void on_lost(void *ctx, int cpu, __u64 cnt)
{
	(void)cpu;
	((struct tally *)ctx)->lost += cnt;
}

/* ---- wakes from other threads while the owner polls ---- */

struct storm {
	struct producer *prod;
	struct perf_buffer *pb;
	atomic_int producing, stop;
	unsigned long long produced[2];
	atomic_uint wakes;
	int emit_errors;
};

static void *storm_producer(void *p)
{
	struct storm *s = p;
	for (int round = 0; round < 200; round++)
		for (int cpu = 0; cpu < 2; cpu++) {
			/* A full ring (-ENOSPC) is fine: the kernel reports those as lost. */
			int ret = 0;
			if (producer_emit_det(s->prod, cpu, SIZE, 5, 50, &ret) != 0)
				s->emit_errors++;
			else
				s->produced[cpu] += 50;
		}
	atomic_store(&s->producing, 0);
	return NULL;
}

static void *storm_waker(void *p)
{
	struct storm *s = p;
	unsigned seed = 1;
	while (!atomic_load(&s->stop)) {
		if (perfbuf_wake(s->pb) == 0)
			atomic_fetch_add(&s->wakes, 1);
		if (rand_r(&seed) % 4 == 0)
			usleep(rand_r(&seed) % 200);
	}
	return NULL;
}

static void test_wake_storm(void)
{
	struct producer prod;
	producer_open_or_exit(&prod, 0);
	struct tally t = {0};
	producer_expected(SIZE, 5, t.expected);
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 64, on_sample, on_lost, &t, NULL);
	EXPECT(pb, "new");
	struct storm s = {.prod = &prod, .pb = pb, .producing = 1};
	pthread_t wakers[2], producer;
	pthread_create(&producer, NULL, storm_producer, &s);
	for (int i = 0; i < 2; i++)
		pthread_create(&wakers[i], NULL, storm_waker, &s);
	unsigned cancelled = 0, other_errors = 0;
	double t0 = now_ms();
	while ((atomic_load(&s.producing) || cancelled < 10) && now_ms() - t0 < 20000) {
		int r = perf_buffer__poll(pb, 100);
		if (r == -ECANCELED)
			cancelled++;
		else if (r < 0)
			other_errors++;
	}
	atomic_store(&s.stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(wakers[i], NULL);
	pthread_join(producer, NULL);
	perf_buffer__consume(pb);
	/* The kernel reports records lost to a full ring with its next write:
	 * one more record per CPU brings out any count still pending. */
	for (int cpu = 0; cpu < 2; cpu++)
		if (producer_emit_det(&prod, cpu, SIZE, 5, 1, NULL) == 0)
			s.produced[cpu]++;
	perf_buffer__consume(pb);
	unsigned long long produced = s.produced[0] + s.produced[1];
	printf("  wake storm: %llu produced on 2 CPUs, %llu delivered + %llu lost; %u wakes ended %u polls\n",
	       produced, t.samples, t.lost, atomic_load(&s.wakes), cancelled);
	EXPECT(s.emit_errors == 0, "emit errors %d", s.emit_errors);
	EXPECT(t.samples + t.lost == produced, "%llu + %llu != %llu", t.samples, t.lost, produced);
	EXPECT(t.bad == 0, "%llu corrupt samples", t.bad);
	EXPECT(cancelled > 0 && other_errors == 0, "cancelled %u, other errors %u", cancelled, other_errors);
	EXPECT(now_ms() - t0 < 20000, "did not finish in 20 s");
	perf_buffer__free(pb);
	producer_close(&prod);
}

/* ---- independent buffers, one thread each ---- */

struct own {
	int cpu;
	unsigned long long produced;
	struct tally t;
	int err;
};

static void *own_buffer(void *p)
{
	struct own *o = p;
	struct producer prod;
	if (producer_open(&prod, 0) != 0) {
		o->err = 1;
		return NULL;
	}
	uint8_t seed = (uint8_t)(10 + o->cpu);
	producer_expected(SIZE, seed, o->t.expected);
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 16, on_sample, on_lost, &o->t, NULL);
	if (!pb) {
		o->err = 2;
		producer_close(&prod);
		return NULL;
	}
	for (int round = 0; round < 100; round++) {
		int ret = 0;
		if (producer_emit_det(&prod, o->cpu, SIZE, seed, 40, &ret) == 0 && ret == 0)
			o->produced += 40;
		perf_buffer__poll(pb, 0);
	}
	double t0 = now_ms();
	while (o->t.samples + o->t.lost < o->produced && now_ms() - t0 < 5000)
		perf_buffer__poll(pb, 50);
	perf_buffer__free(pb);
	producer_close(&prod);
	return NULL;
}

static void test_independent_buffers(void)
{
	struct own o[4] = {{.cpu = 0}, {.cpu = 1}, {.cpu = 0}, {.cpu = 1}};
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, own_buffer, &o[i]);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 4; i++) {
		printf("  independent: buffer %d: %llu produced, %llu delivered + %llu lost\n", i, o[i].produced,
		       o[i].t.samples, o[i].t.lost);
		EXPECT(o[i].err == 0, "buffer %d: set-up error %d", i, o[i].err);
		EXPECT(o[i].produced == 4000, "buffer %d produced %llu", i, o[i].produced);
		EXPECT(o[i].t.samples + o[i].t.lost == o[i].produced && o[i].t.bad == 0, "buffer %d", i);
	}
}

/* ---- a buffer handed from one thread to another ---- */

struct handover {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct perf_buffer *pb;
	struct producer *prod;
	int turn; /* 0: first thread, 1: second thread, 2: done */
	unsigned long long produced;
};

static void *second_owner(void *p)
{
	struct handover *h = p;
	pthread_mutex_lock(&h->lock);
	while (h->turn != 1)
		pthread_cond_wait(&h->cond, &h->lock);
	pthread_mutex_unlock(&h->lock);
	/* Owns the buffer now: emit and drain the second half here. */
	int ret = 0;
	if (producer_emit_det(h->prod, 1, SIZE, 7, 500, &ret) == 0 && ret == 0)
		h->produced += 500;
	perf_buffer__consume(h->pb);
	pthread_mutex_lock(&h->lock);
	h->turn = 2;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static void test_handover(void)
{
	struct producer prod;
	producer_open_or_exit(&prod, 0);
	struct tally t = {0};
	producer_expected(SIZE, 7, t.expected);
	struct handover h = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .prod = &prod};
	h.pb = perf_buffer__new(prod.map_fd, 16, on_sample, on_lost, &t, NULL);
	EXPECT(h.pb, "new");
	pthread_t th;
	pthread_create(&th, NULL, second_owner, &h);
	int ret = 0;
	if (producer_emit_det(&prod, 0, SIZE, 7, 500, &ret) == 0 && ret == 0)
		h.produced += 500;
	perf_buffer__consume(h.pb);
	unsigned long long first = t.samples;
	pthread_mutex_lock(&h.lock);
	h.turn = 1;
	pthread_cond_signal(&h.cond);
	while (h.turn != 2)
		pthread_cond_wait(&h.cond, &h.lock);
	pthread_mutex_unlock(&h.lock);
	pthread_join(th, NULL);
	printf("  handover: %llu delivered on the first thread, %llu on the second, of %llu\n", first,
	       t.samples - first, h.produced);
	EXPECT(first == 500 && t.samples == 1000 && h.produced == 1000 && t.lost == 0 && t.bad == 0,
	       "first %llu total %llu produced %llu lost %llu", first, t.samples, h.produced, t.lost);
	perf_buffer__free(h.pb);
	producer_close(&prod);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	static const struct test_case tests[] = {{"wake_storm", test_wake_storm},
						 {"independent_buffers", test_independent_buffers},
						 {"handover", test_handover}};
	int failed = run_tests("threads_test", tests, (int)(sizeof(tests) / sizeof(tests[0])));
	return failed ? 1 : 0;
}
