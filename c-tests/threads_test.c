/* The threading contract on the real kernel, from several threads at once:
 *  - one owner per buffer; callbacks run on the thread that polls;
 *  - perfbuf_wake may run concurrently with anything on the same buffer,
 *    from any number of threads;
 *  - buffers are independent of each other;
 *  - a buffer may move from one thread to another (synchronised by us).
 * Every record is accounted for exactly: producers emit per-CPU sequence
 * numbers (producer_emit_stamped_seq) and retry a record the kernel refused
 * (-ENOSPC, reported lost), so each stream must arrive whole, in order,
 * once, with lost == refusals. Every wake must end a poll with -ECANCELED
 * or be coalesced into one that did; no poll may hang (10 s timeouts must
 * never expire, and a watchdog ends a hung test).
 *
 * Built plainly (make threads-test) and under ThreadSanitizer with
 * libperfbuf and Rust's std instrumented (scripts/tsan.sh). The arguments
 * --race-c and --race-rust are TSan's positive controls: each commits a
 * deliberate data race (in this file; inside libperfbuf by breaking the
 * contract) that TSan must report.
 *
 * EXPECT runs on the main thread only; threads report through their structs,
 * read after pthread_join. */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define REC_SIZE 32	 /* bytes of each sample (producer_emit_stamped_seq) */
#define MAX_CPUS 64	 /* callbacks' cpu arguments are checked against it */
#define MAX_EMITTERS 4	 /* CPUs used: min(online, this) */
#define RING_PAGES 64	 /* per CPU */
#define LONG_POLL_MS 10000 /* "forever" for a poll that a wake must end */
#define TEST_LIMIT_S 300 /* a test still running after this is hung */

static int ncpu;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- watchdog: a hung test fails instead of stalling CI ---------------- */

static char hung_msg[160];
static size_t hung_len;

static void on_alarm(int sig)
{
	(void)sig;
	ssize_t w = write(2, hung_msg, hung_len); /* async-signal-safe only */
	(void)w;
	_exit(3);
}

static void watchdog(const char *test)
{
	int n = snprintf(hung_msg, sizeof(hung_msg), "threads_test: %s still running after %d s: hung (FAIL)\n",
			 test, TEST_LIMIT_S);
	hung_len = n > 0 && (size_t)n < sizeof(hung_msg) ? (size_t)n : 0;
	signal(SIGALRM, on_alarm);
	alarm(TEST_LIMIT_S);
}

/* ---- one buffer's record stream, checked in its callbacks ------------- */

struct stream {
	pthread_t owner; /* the thread that must be running the callbacks */
	uint8_t tag;	 /* high byte of every sequence number of this buffer */
	uint32_t next[MAX_CPUS];
	uint64_t last_ns[MAX_CPUS];
	unsigned long long samples, lost, lost_calls, bad, out_of_seq, wrong_thread;
};

/* Sample layout: u64 ktime, u16 REC_SIZE - 8, u32 tag << 24 | seq, u8 cpu,
 * zeros up to REC_SIZE. */
static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	struct stream *s = ctx;
	const uint8_t *d = data;
	if (!pthread_equal(pthread_self(), s->owner))
		s->wrong_thread++;
	if (size < REC_SIZE || cpu < 0 || cpu >= MAX_CPUS) {
		s->bad++;
		return;
	}
	uint64_t ns;
	uint16_t cnt;
	uint32_t seq;
	memcpy(&ns, d, 8);
	memcpy(&cnt, d + 8, 2);
	memcpy(&seq, d + 10, 4);
	int ok = cnt == REC_SIZE - 8 && d[14] == cpu && seq >> 24 == s->tag;
	for (unsigned i = 15; i < REC_SIZE && ok; i++)
		ok = d[i] == 0;
	if (!ok) {
		s->bad++;
		return;
	}
	if ((seq & 0xffffff) != s->next[cpu] || ns < s->last_ns[cpu])
		s->out_of_seq++;
	s->next[cpu] = (seq & 0xffffff) + 1;
	s->last_ns[cpu] = ns;
	s->samples++;
}

static void on_lost(void *ctx, int cpu, __u64 cnt)
{
	struct stream *s = ctx;
	(void)cpu;
	if (!pthread_equal(pthread_self(), s->owner))
		s->wrong_thread++;
	s->lost += cnt;
	s->lost_calls++;
}

/* ---- producers: one thread per CPU, retrying what the kernel refused --- */

struct emitter {
	struct producer *prod;
	int cpu;
	uint8_t tag;
	unsigned count;	       /* records to deliver: sequence 0 .. count-1 */
	unsigned nap_every;    /* sleep nap_us after this many records (0: never) */
	unsigned nap_us;
	atomic_int *active;    /* decremented when done (may be NULL) */
	pthread_barrier_t *go; /* waited on before the first record (may be NULL) */
	unsigned long long ok, refused, errors;
};

static void *emit_thread(void *p)
{
	struct emitter *e = p;
	if (e->go)
		pthread_barrier_wait(e->go);
	for (unsigned k = 0; k < e->count && !e->errors; k++) {
		uint32_t seq = (uint32_t)e->tag << 24 | k;
		for (;;) {
			int ret = 0;
			int err = producer_emit_stamped_seq(e->prod, e->cpu, REC_SIZE, seq, &ret);
			if (err || (ret != 0 && ret != -ENOSPC)) {
				fprintf(stderr, "emit on cpu %d: %d, helper %d\n", e->cpu, err, ret);
				e->errors++;
				break;
			}
			if (ret == 0) {
				e->ok++;
				break;
			}
			e->refused++; /* ring full (or paused): counted lost, try again */
			usleep(100);
		}
		if (e->nap_every && k % e->nap_every == e->nap_every - 1)
			usleep(e->nap_us);
	}
	if (e->active)
		atomic_fetch_sub(e->active, 1);
	return NULL;
}

/* One emitter per CPU, each a copy of `model` with its CPU set. */
static void start_emitters(struct emitter *e, pthread_t *th, struct emitter model)
{
	for (int c = 0; c < ncpu; c++) {
		e[c] = model;
		e[c].cpu = c;
		if (model.active)
			atomic_fetch_add(model.active, 1);
		pthread_create(&th[c], NULL, emit_thread, &e[c]);
	}
}

static void join_all(pthread_t *th, int n)
{
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
}

/* Ring figures summed over a buffer's rings, read by its owner. */
struct figures {
	unsigned long long records, lost, resyncs, malformed, pending;
	int errors;
};

static struct figures ring_figures(struct perf_buffer *pb)
{
	struct figures f = {0};
	for (size_t i = 0; i < perf_buffer__buffer_cnt(pb); i++) {
		struct perfbuf_ring_stats st = {.sz = sizeof(st)};
		if (perfbuf_ring_stats(pb, i, &st) != 0) {
			f.errors++;
			continue;
		}
		f.records += st.records;
		f.lost += st.lost;
		f.resyncs += st.resyncs + st.skipped_bytes;
		f.malformed += st.malformed;
		f.pending += st.pending_bytes;
	}
	return f;
}

/* Every sequence number of every emitter arrived once, in order, on the
 * right thread; what the kernel refused came back as lost; the ring figures
 * agree. */
static void expect_exact(const char *what, const struct stream *s, const struct emitter *e, const struct figures *f)
{
	unsigned long long ok = 0, refused = 0, errors = 0;
	for (int c = 0; c < ncpu; c++) {
		ok += e[c].ok;
		refused += e[c].refused;
		errors += e[c].errors;
		EXPECT(s->next[c] == e[c].count, "%s: cpu %d: stream ends at %u of %u", what, c, s->next[c],
		       e[c].count);
	}
	EXPECT(errors == 0, "%s: %llu emit errors", what, errors);
	EXPECT(s->samples == ok, "%s: %llu delivered, %llu emitted", what, s->samples, ok);
	EXPECT(s->lost == refused, "%s: %llu reported lost, %llu refused by the kernel", what, s->lost, refused);
	EXPECT(s->bad == 0 && s->out_of_seq == 0, "%s: %llu corrupt, %llu out of sequence", what, s->bad,
	       s->out_of_seq);
	EXPECT(s->wrong_thread == 0, "%s: %llu callbacks on a thread that was not polling", what, s->wrong_thread);
	if (f) {
		EXPECT(f->errors == 0 && f->records == s->samples + s->lost_calls && f->lost == s->lost,
		       "%s: ring stats: %llu records, %llu lost (callbacks: %llu + %llu, %llu lost)", what,
		       f->records, f->lost, s->samples, s->lost_calls, s->lost);
		EXPECT(f->resyncs == 0 && f->malformed == 0 && f->pending == 0,
		       "%s: ring stats: resyncs %llu, malformed %llu, pending %llu", what, f->resyncs, f->malformed,
		       f->pending);
	}
}

/* ---- wakes from other threads while the owner polls ------------------- */

struct waking {
	struct perf_buffer *pb;
	struct stream *s;
	atomic_uint started, completed; /* perfbuf_wake calls begun / returned 0 */
	atomic_uint cancels;		/* polls that returned -ECANCELED, so far */
	atomic_int stop;
	/* the owner's findings */
	unsigned long long polls, cancelled, ready, early, timeouts, errors, lost_wakes;
	double max_poll_ms;
	struct figures fig;
};

/* The owner: polls with a long timeout until told to stop. A poll that
 * begins after a wake returned, when no -ECANCELED has ended a poll since
 * that wake began, must return -ECANCELED: otherwise the wake was lost. */
static void *owner_poll(void *p)
{
	struct waking *w = p;
	w->s->owner = pthread_self();
	unsigned covered = 0; /* wakes begun before the last -ECANCELED returned */
	while (!atomic_load(&w->stop)) {
		unsigned done_before = atomic_load(&w->completed);
		double t0 = now_ms();
		int r = perf_buffer__poll(w->pb, LONG_POLL_MS);
		double dt = now_ms() - t0;
		if (dt > w->max_poll_ms)
			w->max_poll_ms = dt;
		w->polls++;
		if (r == -ECANCELED) {
			w->cancelled++;
			covered = atomic_load(&w->started);
			atomic_fetch_add(&w->cancels, 1);
			continue;
		}
		if (done_before > covered)
			w->lost_wakes++;
		if (r > 0)
			w->ready++;
		else if (r == 0 && dt >= LONG_POLL_MS - 100)
			w->timeouts++;
		else if (r == 0)
			w->early++; /* 0 before the timeout: libbpf never does that */
		else
			w->errors++;
	}
	perf_buffer__consume(w->pb);
	w->fig = ring_figures(w->pb);
	return NULL;
}

static int wake_once(struct waking *w)
{
	atomic_fetch_add(&w->started, 1);
	int r = perfbuf_wake(w->pb);
	if (r == 0)
		atomic_fetch_add(&w->completed, 1);
	return r;
}

struct waker {
	struct waking *w;
	unsigned count;
	unsigned seed;
	pthread_barrier_t *go;
	unsigned long long failed;
};

/* Wakes at random intervals: back to back, after a yield, or after up to
 * 200 µs of sleep. */
static void *waker_thread(void *p)
{
	struct waker *k = p;
	if (k->go)
		pthread_barrier_wait(k->go);
	for (unsigned i = 0; i < k->count; i++) {
		if (wake_once(k->w) != 0)
			k->failed++;
		unsigned x = (unsigned)rand_r(&k->seed) % 8;
		if (x >= 6)
			usleep((unsigned)rand_r(&k->seed) % 200);
		else if (x >= 3)
			sched_yield();
	}
	return NULL;
}

/* Stops the owner: the flag, then one more wake to end its blocked poll. */
static void stop_owner(struct waking *w, pthread_t owner)
{
	atomic_store(&w->stop, 1);
	EXPECT(wake_once(w) == 0, "stop wake");
	pthread_join(owner, NULL);
}

static void expect_wakes(const char *what, const struct waking *w, unsigned wakes)
{
	unsigned done = atomic_load(&w->completed);
	EXPECT(done == wakes + 1, "%s: %u of %u wakes succeeded", what, done, wakes + 1);
	EXPECT(w->lost_wakes == 0, "%s: %llu polls began after a pending wake and did not return -ECANCELED", what,
	       w->lost_wakes);
	EXPECT(w->cancelled >= 1 && w->cancelled <= done, "%s: %llu polls cancelled by %u wakes", what, w->cancelled,
	       done);
	EXPECT(w->timeouts == 0, "%s: %llu polls of %d ms timed out", what, w->timeouts, LONG_POLL_MS);
	EXPECT(w->errors == 0, "%s: %llu polls failed", what, w->errors);
	EXPECT(w->early == 0, "%s: %llu polls returned 0 before their timeout", what, w->early);
}

/* With nothing else going on, each wake must end the owner's blocked poll
 * promptly. Returns the longest wait in ms, or -1 if a poll stayed blocked
 * for a second after its wake; *sent counts the wakes. */
static double ping(struct waking *w, unsigned times, unsigned *sent)
{
	double longest = 0;
	unsigned seed = 7;
	for (*sent = 0; *sent < times;) {
		unsigned before = atomic_load(&w->cancels);
		usleep(500 + (unsigned)rand_r(&seed) % 1500); /* the owner is blocked by now */
		double t0 = now_ms();
		if (wake_once(w) != 0)
			return -1;
		++*sent;
		while (atomic_load(&w->cancels) == before && now_ms() - t0 < 1000)
			usleep(10);
		if (atomic_load(&w->cancels) == before)
			return -1;
		if (now_ms() - t0 > longest)
			longest = now_ms() - t0;
	}
	return longest;
}

/* (a) One owner blocked in poll; another thread wakes it 10,000 times at
 * random intervals while producers fill both rings; then, the rings idle,
 * 200 single wakes must each end a blocked poll. */
static void test_wake_storm(void)
{
	watchdog(__func__);
	const unsigned wakes = 10000, records = 20000;
	struct producer prod;
	producer_open_or_exit(&prod, 0);
	struct stream s = {.tag = 0x5a};
	struct waking w = {.s = &s};
	w.pb = perf_buffer__new(prod.map_fd, RING_PAGES, on_sample, on_lost, &s, NULL);
	EXPECT(w.pb, "perf_buffer__new: %s", strerror(errno));
	if (!w.pb)
		return;
	double t0 = now_ms();
	pthread_t owner, emitters[MAX_EMITTERS], waker;
	struct emitter e[MAX_EMITTERS];
	pthread_create(&owner, NULL, owner_poll, &w);
	start_emitters(e, emitters, (struct emitter){.prod = &prod, .tag = s.tag, .count = records});
	struct waker k = {.w = &w, .count = wakes, .seed = 42};
	pthread_create(&waker, NULL, waker_thread, &k);
	pthread_join(waker, NULL);
	join_all(emitters, ncpu);
	unsigned pings = 0;
	double ping_ms = ping(&w, 200, &pings);
	stop_owner(&w, owner);
	double ms = now_ms() - t0;
	unsigned done = atomic_load(&w.completed);
	printf("  wake storm: %u wakes ended %llu of %llu polls (%llu coalesced; %llu polls drained rings,"
	       " %llu returned 0 before their timeout), longest poll %.1f ms;"
	       " %llu records delivered in order, %llu lost and re-sent, %.0f ms\n",
	       done, w.cancelled, w.polls, done - w.cancelled, w.ready, w.early, w.max_poll_ms, s.samples, s.lost, ms);
	printf("  wake storm: then %u wakes of an idle owner each ended its blocked poll within %.2f ms\n", pings,
	       ping_ms);
	EXPECT(k.failed == 0, "%llu wakes failed", k.failed);
	EXPECT(ping_ms >= 0, "a wake left the owner blocked in poll for 1 s");
	expect_wakes("wake storm", &w, wakes + pings);
	expect_exact("wake storm", &s, e, &w.fig);
	perf_buffer__free(w.pb);
	producer_close(&prod);
}

/* Eventfds this process holds (perfbuf_wake creates one per buffer). */
static int count_eventfds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *ent;
	char path[300], target[256];
	while ((ent = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", ent->d_name);
		ssize_t len = readlink(path, target, sizeof(target) - 1);
		if (len > 0) {
			target[len] = 0;
			n += strcmp(target, "anon_inode:[eventfd]") == 0;
		}
	}
	closedir(d);
	return n;
}

/* (d) Several threads wake the same buffer at once while its owner polls,
 * including the very first wake (which creates the eventfd): released
 * together by a barrier, on a fresh buffer each round. Exactly one eventfd
 * per buffer, none left after free. */
static void test_concurrent_wakers(void)
{
	watchdog(__func__);
	enum { WAKERS = 4, ROUNDS = 20, WAKES = 250, RECORDS = 1000 };
	struct producer prod;
	producer_open_or_exit(&prod, 0);
	int fds_before = count_open_fds();
	unsigned long long cancelled = 0, polls = 0, delivered = 0;
	double t0 = now_ms();
	for (int round = 0; round < ROUNDS; round++) {
		char what[64];
		snprintf(what, sizeof(what), "concurrent wakers, round %d", round);
		struct stream s = {.tag = (uint8_t)(0x10 + round)};
		struct waking w = {.s = &s};
		if (round % 2 == 0) {
			w.pb = perf_buffer__new(prod.map_fd, RING_PAGES, on_sample, on_lost, &s, NULL);
		} else {
			struct perfbuf_opts o = {.sz = sizeof(o), .wakeup_events = 16, .max_delay_ms = 2};
			w.pb = perfbuf_new(prod.map_fd, RING_PAGES, on_sample, on_lost, &s, &o);
		}
		EXPECT(w.pb, "%s: new: %s", what, strerror(errno));
		if (!w.pb)
			break;
		pthread_barrier_t go;
		pthread_barrier_init(&go, NULL, WAKERS + (unsigned)ncpu);
		pthread_t owner, wakers[WAKERS], emitters[MAX_EMITTERS];
		struct waker k[WAKERS];
		struct emitter e[MAX_EMITTERS];
		pthread_create(&owner, NULL, owner_poll, &w);
		usleep(2000); /* let the owner block in epoll_wait before the first wake */
		for (int i = 0; i < WAKERS; i++) {
			k[i] = (struct waker){.w = &w, .count = WAKES, .seed = (unsigned)(round * WAKERS + i), .go = &go};
			pthread_create(&wakers[i], NULL, waker_thread, &k[i]);
		}
		start_emitters(e, emitters, (struct emitter){.prod = &prod, .tag = s.tag, .count = RECORDS, .go = &go});
		join_all(wakers, WAKERS);
		join_all(emitters, ncpu);
		int eventfds = count_eventfds();
		stop_owner(&w, owner);
		pthread_barrier_destroy(&go);
		unsigned long long failed = 0;
		for (int i = 0; i < WAKERS; i++)
			failed += k[i].failed;
		EXPECT(failed == 0, "%s: %llu wakes failed", what, failed);
		EXPECT(eventfds == 1, "%s: %d eventfds for one buffer woken from %d threads", what, eventfds,
		       WAKERS);
		expect_wakes(what, &w, WAKERS * WAKES);
		expect_exact(what, &s, e, &w.fig);
		perf_buffer__free(w.pb);
		int fds_after = count_open_fds();
		EXPECT(fds_after == fds_before, "%s: %d fds after free, %d before", what, fds_after, fds_before);
		cancelled += w.cancelled;
		polls += w.polls;
		delivered += s.samples;
	}
	printf("  concurrent wakers: %d rounds, %d threads x %d wakes each: %llu of %llu polls cancelled,"
	       " %llu records exact, one eventfd per buffer, %.0f ms\n",
	       ROUNDS, WAKERS, WAKES, cancelled, polls, delivered, now_ms() - t0);
	producer_close(&prod);
}

/* ---- independent buffers, one owner thread each ----------------------- */

struct solo {
	int id;
	pthread_barrier_t *go;
	struct stream s;
	struct emitter e[MAX_EMITTERS];
	struct figures fig;
	int setup_err, bad_new_errno;
	void *bad_new;
	unsigned long long polls;
};

enum { SOLO_BUFFERS = 4, SOLO_RECORDS = 10000 };

/* Its own map, producer, buffer and emitters; starts with the others (so
 * libperfbuf's lazily initialised globals are first touched concurrently)
 * and polls until its emitters are done. */
static void *solo_thread(void *p)
{
	struct solo *o = p;
	o->s.owner = pthread_self();
	o->s.tag = (uint8_t)(0xa0 + o->id);
	struct producer prod;
	int err = producer_open(&prod, 0);
	pthread_barrier_wait(o->go);
	if (err) {
		o->setup_err = err;
		return NULL;
	}
	/* A rejected argument logs a warning: concurrent first use of the log. */
	o->bad_new = perf_buffer__new(prod.map_fd, 3, on_sample, on_lost, &o->s, NULL);
	o->bad_new_errno = errno;
	struct perf_buffer *pb;
	if (o->id % 2 == 0) {
		pb = perf_buffer__new(prod.map_fd, RING_PAGES, on_sample, on_lost, &o->s, NULL);
	} else {
		struct perfbuf_opts opts = {.sz = sizeof(opts), .wakeup_events = 8, .max_delay_ms = 3};
		pb = perfbuf_new(prod.map_fd, RING_PAGES, on_sample, on_lost, &o->s, &opts);
	}
	if (!pb) {
		o->setup_err = -errno;
		producer_close(&prod);
		return NULL;
	}
	atomic_int active = 0;
	pthread_t th[MAX_EMITTERS];
	start_emitters(o->e, th, (struct emitter){.prod = &prod, .tag = o->s.tag, .count = SOLO_RECORDS, .active = &active});
	while (atomic_load(&active) > 0) {
		perf_buffer__poll(pb, 50);
		o->polls++;
		if (o->polls % 16 == 0)
			ring_figures(pb); /* the owner's own calls, interleaved */
	}
	join_all(th, ncpu);
	perf_buffer__consume(pb);
	o->fig = ring_figures(pb);
	perf_buffer__free(pb);
	producer_close(&prod);
	return NULL;
}

/* (b) Buffers used concurrently, each by its own thread, each over its own
 * map: each receives exactly its own records. */
static void test_independent_buffers(void)
{
	watchdog(__func__);
	struct solo o[SOLO_BUFFERS];
	pthread_t th[SOLO_BUFFERS];
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, SOLO_BUFFERS);
	double t0 = now_ms();
	fprintf(stderr, "(threads_test: %d 'page count should be power of two' warnings expected)\n", SOLO_BUFFERS);
	for (int i = 0; i < SOLO_BUFFERS; i++) {
		memset(&o[i], 0, sizeof(o[i]));
		o[i].id = i;
		o[i].go = &go;
		pthread_create(&th[i], NULL, solo_thread, &o[i]);
	}
	join_all(th, SOLO_BUFFERS);
	pthread_barrier_destroy(&go);
	for (int i = 0; i < SOLO_BUFFERS; i++) {
		char what[64];
		snprintf(what, sizeof(what), "independent buffer %d", i);
		EXPECT(o[i].setup_err == 0, "%s: set-up: %s", what, strerror(-o[i].setup_err));
		if (o[i].setup_err)
			continue;
		EXPECT(!o[i].bad_new && o[i].bad_new_errno == EINVAL, "%s: page_cnt 3 accepted", what);
		expect_exact(what, &o[i].s, o[i].e, &o[i].fig);
		printf("  independent: buffer %d (%s): %llu records from %d CPUs exact, %llu lost and re-sent,"
		       " %llu polls\n",
		       i, i % 2 ? "perfbuf_new, batched" : "perf_buffer__new", o[i].s.samples, ncpu, o[i].s.lost,
		       o[i].polls);
	}
	printf("  independent: %d buffers on %d threads, %.0f ms\n", SOLO_BUFFERS, SOLO_BUFFERS, now_ms() - t0);
}

/* ---- a buffer handed from thread to thread ---------------------------- */

enum { RELAY_DONE = -1 };

struct relay {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int turn; /* which relay thread owns the buffer, or RELAY_DONE */
	int handovers;
	int min_handovers;
	atomic_int active; /* emitters still running */
	struct perf_buffer *pb;
	struct stream s;
	struct figures fig;
	unsigned long long turns[2], pauses, control_errors, freed_by;
};

struct relay_arg {
	struct relay *r;
	int me;
};

/* Waits for its turn; then owns the buffer: polls, drains ring by ring,
 * reads the figures, sometimes pauses and resumes output, and hands the
 * buffer to the other thread. Whoever holds it when the emitters are done
 * and enough handovers happened drains it for the last time and frees it. */
static void *relay_thread(void *p)
{
	struct relay_arg *a = p;
	struct relay *r = a->r;
	for (;;) {
		pthread_mutex_lock(&r->lock);
		while (r->turn != a->me && r->turn != RELAY_DONE)
			pthread_cond_wait(&r->cond, &r->lock);
		if (r->turn == RELAY_DONE) {
			pthread_mutex_unlock(&r->lock);
			return NULL;
		}
		r->s.owner = pthread_self();
		pthread_mutex_unlock(&r->lock);

		struct perf_buffer *pb = r->pb;
		r->turns[a->me]++;
		int finished = atomic_load(&r->active) == 0; /* read before the last drain */
		for (int i = 0; i < 3; i++)
			perf_buffer__poll(pb, 1);
		if (r->handovers % 8 == 7) {
			r->pauses++;
			if (perfbuf_pause(pb) != 0)
				r->control_errors++;
			perf_buffer__poll(pb, 1);
			if (perfbuf_resume(pb) != 0)
				r->control_errors++;
		}
		for (size_t i = 0; i < perf_buffer__buffer_cnt(pb); i++)
			if (perf_buffer__consume_buffer(pb, i) != 0)
				r->control_errors++;
		ring_figures(pb);

		pthread_mutex_lock(&r->lock);
		r->handovers++;
		if (finished && r->handovers >= r->min_handovers) {
			perf_buffer__consume(pb);
			r->fig = ring_figures(pb);
			perf_buffer__free(pb);
			r->pb = NULL;
			r->freed_by = (unsigned long long)a->me;
			r->turn = RELAY_DONE;
		} else {
			r->turn = 1 - a->me;
		}
		pthread_cond_broadcast(&r->cond);
		pthread_mutex_unlock(&r->lock);
	}
}

/* (c) A buffer created on the main thread, handed back and forth between
 * two threads hundreds of times while producers emit, freed by one of them:
 * exact accounting, callbacks always on the current owner. */
static void test_handover(void)
{
	watchdog(__func__);
	const unsigned records = 10000;
	struct producer prod;
	producer_open_or_exit(&prod, 0);
	struct relay r = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .turn = 0,
			  .min_handovers = 300};
	r.s.tag = 0x77;
	r.s.owner = pthread_self();
	r.pb = perf_buffer__new(prod.map_fd, RING_PAGES, on_sample, on_lost, &r.s, NULL);
	EXPECT(r.pb, "perf_buffer__new: %s", strerror(errno));
	if (!r.pb)
		return;
	perf_buffer__poll(r.pb, 0); /* used on this thread first */
	double t0 = now_ms();
	pthread_t th[2], emitters[MAX_EMITTERS];
	struct relay_arg args[2] = {{&r, 0}, {&r, 1}};
	struct emitter e[MAX_EMITTERS];
	/* Naps spread the stream over the handovers. */
	start_emitters(e, emitters, (struct emitter){.prod = &prod, .tag = r.s.tag, .count = records,
						     .nap_every = 50, .nap_us = 1000, .active = &r.active});
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, relay_thread, &args[i]);
	join_all(emitters, ncpu);
	join_all(th, 2);
	printf("  handover: %d handovers (%llu + %llu turns, %llu with pause/resume), freed by thread %llu;"
	       " %llu records exact, %llu lost and re-sent, %.0f ms\n",
	       r.handovers, r.turns[0], r.turns[1], r.pauses, r.freed_by, r.s.samples, r.s.lost, now_ms() - t0);
	EXPECT(r.pb == NULL && r.handovers >= r.min_handovers, "handovers %d", r.handovers);
	EXPECT(r.turns[0] > 0 && r.turns[1] > 0, "turns %llu / %llu", r.turns[0], r.turns[1]);
	EXPECT(r.control_errors == 0, "%llu control calls failed", r.control_errors);
	expect_exact("handover", &r.s, e, &r.fig);
	producer_close(&prod);
}

/* ---- TSan's positive controls ---------------------------------------- */

static long racy;	/* written by two threads without synchronisation */
static atomic_int race_stop;

/* Paced, so that each thread's previous access is still in TSan's history
 * when the other thread's comes (a report whose earlier stack cannot be
 * restored is dropped). */
static void *race_c_thread(void *p)
{
	(void)p;
	for (int i = 0; i < 20000 && !atomic_load(&race_stop); i++) {
		racy++;
		if (i % 10 == 9)
			usleep(50);
	}
	return NULL;
}

/* A data race in this file: TSan must report it (the C is instrumented). */
static int race_c(void)
{
	pthread_t a, b;
	pthread_create(&a, NULL, race_c_thread, NULL);
	pthread_create(&b, NULL, race_c_thread, NULL);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("race-c: no report (counter %ld)\n", racy);
	return 0;
}

static void *race_rust_stats(void *p)
{
	struct perf_buffer *pb = p;
	while (!atomic_load(&race_stop)) {
		ring_figures(pb);
		usleep(20); /* paced: see race_c_thread */
	}
	return NULL;
}

/* Breaks the contract on purpose: perfbuf_ring_stats from one thread while
 * another polls the same buffer. The race is inside libperfbuf (the ring
 * counters poll writes, the figures read), so TSan reports it only if the
 * Rust code is instrumented. */
static int race_rust(void)
{
	struct producer prod;
	producer_open_or_exit(&prod, 0);
	struct stream s = {.tag = 1};
	s.owner = pthread_self();
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, RING_PAGES, on_sample, on_lost, &s, NULL);
	if (!pb) {
		perror("perf_buffer__new");
		return 1;
	}
	pthread_t t;
	pthread_create(&t, NULL, race_rust_stats, pb);
	double t0 = now_ms();
	for (uint32_t seq = 0; now_ms() - t0 < 10000; seq++) {
		int ret;
		producer_emit_stamped_seq(&prod, (int)(seq % (unsigned)ncpu), REC_SIZE, 1u << 24 | seq / (unsigned)ncpu,
					  &ret);
		perf_buffer__poll(pb, 0);
	}
	atomic_store(&race_stop, 1);
	pthread_join(t, NULL);
	printf("race-rust: no report (%llu records)\n", s.samples);
	perf_buffer__free(pb);
	producer_close(&prod);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	ncpu = online < 1 ? 1 : online > MAX_EMITTERS ? MAX_EMITTERS : (int)online;
	if (argc > 1 && strcmp(argv[1], "--race-c") == 0)
		return race_c();
	if (argc > 1 && strcmp(argv[1], "--race-rust") == 0)
		return race_rust();
	/* Fail (or skip outside CI) here rather than in a thread. */
	struct producer probe;
	producer_open_or_exit(&probe, 0);
	producer_close(&probe);
	static const struct test_case tests[] = {
		{"independent_buffers", test_independent_buffers},
		{"wake_storm", test_wake_storm},
		{"concurrent_wakers", test_concurrent_wakers},
		{"handover", test_handover},
	};
	int failed = run_tests("threads_test", tests, (int)(sizeof(tests) / sizeof(tests[0])));
	alarm(0);
	return failed ? 1 : 0;
}
