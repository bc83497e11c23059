/* Unusual but legitimate callers of libbpf's ten perf_buffer__* functions,
 * run through the system libbpf and through libperfbuf (LD_PRELOAD), each
 * scenario writing what its caller observes to a transcript of its own:
 * return values, errno, helper return codes, records and lost counts,
 * order, whether waits and polls stayed within bounds, idle wake-ups. The
 * make target compares the transcripts file by file: libperfbuf's default
 * must match libbpf's in every scenario, and its opt-in fast mode
 * (PERFBUF_ADAPTIVE=1) in every scenario that mode supports.
 *
 * Most scenarios first stream at full rate for a while (`warm`), long
 * enough for a fast mode to move map slots to its own events, and only
 * then do their unusual thing, so a mode that misroutes events or takes
 * slots back is caught.
 *
 * usage: callers_test libbpf|libperfbuf|fast OUTDIR [SCENARIO...]
 *   fast: run only the scenarios the fast mode supports, and check that
 *   the fast mode did engage (or stayed off) where it should. */
#define _GNU_SOURCE
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CPUS 8
#define PAGES 64
#define WARM_MS 300

static struct producer prod;
static int ncpu;
static bool fast_run;
static FILE *tx; /* the current scenario's transcript */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(tx, fmt, ap);
	va_end(ap);
	fputc('\n', tx);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double thread_cpu_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *yes(bool b)
{
	return b ? "yes" : "no";
}

/* Whether delivered + lost = produced, a failed check when not: the
 * transcripts of two libraries that both lost records silently would agree. */
static bool accounted(const char *what, unsigned long long delivered, unsigned long long lost,
		      unsigned long long produced)
{
	EXPECT(delivered + lost == produced, "%s: delivered %llu + lost %llu, produced %llu", what, delivered, lost,
	       produced);
	return delivered + lost == produced;
}

/* ---- what a caller counts --------------------------------------------- */

struct tally {
	unsigned long long samples, lost, lost_reports, misordered;
	int last_seed[MAX_CPUS];
	unsigned spin_ns;      /* a slow callback: busy for this long per record */
	double max_latency_ms; /* stamped samples only */
	bool stamped;
};

static void tally_reset(struct tally *t)
{
	memset(t, 0, sizeof(*t));
	for (int c = 0; c < MAX_CPUS; c++)
		t->last_seed[c] = -1;
}

static void spin(unsigned ns)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec) < ns);
}

/* Records from producer_emit_det carry their chunk's seed in byte 0 (as
 * seed + 14): within a CPU, a record's seed is its predecessor's or the
 * next one, unless records were reordered. */
static void note_sample(struct tally *t, int cpu, const uint8_t *data)
{
	t->samples++;
	if (t->spin_ns)
		spin(t->spin_ns);
	if (t->stamped) {
		uint64_t stamp;
		memcpy(&stamp, data, 8);
		double lat = now_ms() - stamp / 1e6;
		if (lat > t->max_latency_ms)
			t->max_latency_ms = lat;
		return;
	}
	if (cpu < 0 || cpu >= MAX_CPUS)
		return;
	int seed = (uint8_t)(data[0] - 14);
	int last = t->last_seed[cpu];
	if (last >= 0 && seed != last && seed != ((last + 1) & 255))
		t->misordered++;
	t->last_seed[cpu] = seed;
}

static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	(void)size;
	note_sample(ctx, cpu, data);
}

static void on_lost(void *ctx, int cpu, __u64 cnt)
{
	struct tally *t = ctx;
	(void)cpu;
	t->lost += cnt;
	t->lost_reports++;
}

/* ---- producers on their own threads ------------------------------------ */

struct job {
	int cpu;
	double ms;		  /* produce for this long ... */
	unsigned long long limit; /* ... or this many records (0: no limit) */
	unsigned chunk; /* records per producer call */
	unsigned size;	/* sample bytes */
	bool stamped;
	pthread_t th;
	atomic_bool stop; /* ... or until told to stop */
	atomic_bool done;
	unsigned long long produced;
	int last_ret;
	unsigned seed; /* the next chunk's seed */
};

static void *produce(void *arg)
{
	struct job *j = arg;
	double t0 = now_ms();
	unsigned seed = 0;
	while (!atomic_load(&j->stop) && now_ms() - t0 < j->ms && (!j->limit || j->produced < j->limit)) {
		unsigned n = j->chunk;
		if (j->limit && j->produced + n > j->limit)
			n = (unsigned)(j->limit - j->produced);
		int err = j->stamped ? producer_emit_stamped(&prod, j->cpu, j->size, n, &j->last_ret)
				     : producer_emit_det(&prod, j->cpu, j->size, (uint8_t)seed++, n, &j->last_ret);
		if (err) {
			fprintf(stderr, "emit on cpu %d: %s\n", j->cpu, strerror(-err));
			break;
		}
		j->produced += n;
	}
	j->seed = seed;
	atomic_store(&j->done, true);
	return NULL;
}

/* A producer of `chunk` records of `size` bytes per call on `cpu`. */
static void start_shaped(struct job *j, int cpu, double ms, unsigned chunk, unsigned size, bool stamped)
{
	memset(j, 0, sizeof(*j));
	j->cpu = cpu;
	j->ms = ms;
	j->chunk = chunk;
	j->size = size;
	j->stamped = stamped;
	atomic_init(&j->stop, false);
	atomic_init(&j->done, false);
	pthread_create(&j->th, NULL, produce, j);
}

static void start(struct job *j, int cpu, double ms, bool stamped)
{
	start_shaped(j, cpu, ms, 100, 16, stamped);
}

static void join(struct job *j)
{
	pthread_join(j->th, NULL);
}

/* One more record on `cpu`, after a drain: the kernel reports a ring's
 * lost records with the next record it writes there. */
static int emit_one(int cpu, uint8_t seed)
{
	int ret = 0;
	int err = producer_emit_det(&prod, cpu, 16, seed, 1, &ret);
	return err ? err : ret;
}

static int emit_n(int cpu, unsigned n, uint8_t seed)
{
	int ret = 0;
	int err = producer_emit_det(&prod, cpu, 16, seed, n, &ret);
	return err ? err : ret;
}

/* Polls until everything produced (plus `extra`) is delivered or reported
 * lost, or `ms` pass. */
static void drain(struct perf_buffer *pb, struct tally *t, unsigned long long produced, double ms)
{
	for (double t0 = now_ms(); t->samples + t->lost < produced && now_ms() - t0 < ms;)
		perf_buffer__poll(pb, 20);
	perf_buffer__consume(pb);
}

/* ---- libperfbuf's figures, when it serves the calls --------------------- */

static int (*ring_stats_fn)(const struct perf_buffer *, size_t, struct perfbuf_ring_stats *);

static unsigned long long batch_switches(struct perf_buffer *pb)
{
	unsigned long long n = 0;
	if (!ring_stats_fn)
		return 0;
	for (size_t i = 0; i < perf_buffer__buffer_cnt(pb); i++) {
		struct perfbuf_ring_stats s = {.sz = sizeof(s)};
		if (ring_stats_fn(pb, i, &s) == 0)
			n += s.batch_switches;
	}
	return n;
}

/* In the fast run, whether the fast mode engaged on this buffer as the
 * scenario expects (so that each scenario exercises what it claims to). */
static void expect_fast(struct perf_buffer *pb, bool engaged, const char *what)
{
	if (!fast_run)
		return;
	unsigned long long n = batch_switches(pb);
	EXPECT(engaged ? n > 0 : n == 0, "%s: fast mode %s (batch switches %llu)", what,
	       engaged ? "never engaged" : "engaged", n);
}

/* Streams at full rate on CPU 0 for WARM_MS while polling, then drains:
 * long enough for a fast mode to move the map slot (in the fast run, on
 * until it has: it batches a reader only while records wait little for
 * it, which a loaded machine can delay). */
static void warm(struct perf_buffer *pb, struct tally *t)
{
	struct job j;
	start(&j, 0, 10 * WARM_MS, false);
	for (double t0 = now_ms(); !atomic_load(&j.done);) {
		perf_buffer__poll(pb, 10);
		if (now_ms() - t0 >= WARM_MS && (!fast_run || batch_switches(pb)))
			atomic_store(&j.stop, true);
	}
	join(&j);
	int ret = emit_one(0, (uint8_t)j.seed);
	drain(pb, t, j.produced + (ret == 0), 3000);
	say("warm: delivered + lost = produced: %s, lost %llu",
	    yes(accounted("warm", t->samples, t->lost, j.produced + (ret == 0))), t->lost);
	tally_reset(t);
}

static struct perf_buffer *new_pb(size_t pages, struct tally *t)
{
	tally_reset(t);
	errno = 0;
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, pages, on_sample, on_lost, t, NULL);
	EXPECT(pb, "perf_buffer__new(%zu pages): %s", pages, strerror(errno));
	return pb;
}

/* A stream at full rate on CPU 0 for `ms`, polled; returns what was
 * produced (a last record after the drain included). */
static unsigned long long stream(struct perf_buffer *pb, struct tally *t, double ms)
{
	struct job j;
	start(&j, 0, ms, false);
	while (!atomic_load(&j.done))
		perf_buffer__poll(pb, 10);
	join(&j);
	unsigned long long produced = j.produced + (emit_one(0, (uint8_t)j.seed) == 0);
	drain(pb, t, produced, 3000);
	return produced;
}

/* ---- scenarios -------------------------------------------------------- */

/* A second buffer on the same map takes the slots; the first gets nothing
 * afterwards, even polled under a high rate; freeing the second deletes
 * the slots. */
static void two_buffers(void)
{
	struct tally t1, t2;
	struct perf_buffer *pb1 = new_pb(PAGES, &t1);
	if (!pb1)
		return;
	warm(pb1, &t1);
	expect_fast(pb1, true, "first buffer's warm-up");
	struct perf_buffer *pb2 = new_pb(PAGES, &t2);
	if (!pb2) {
		perf_buffer__free(pb1);
		return;
	}
	struct job j;
	start(&j, 0, 2 * WARM_MS, false);
	while (!atomic_load(&j.done)) {
		perf_buffer__poll(pb1, 5);
		perf_buffer__poll(pb2, 5);
	}
	join(&j);
	unsigned long long produced = j.produced + (emit_one(0, (uint8_t)j.seed) == 0);
	for (double t0 = now_ms(); t2.samples + t2.lost < produced && now_ms() - t0 < 3000;) {
		perf_buffer__poll(pb1, 5);
		perf_buffer__poll(pb2, 5);
	}
	perf_buffer__consume(pb1);
	perf_buffer__consume(pb2);
	say("after the second buffer opened: first got %llu samples, %llu lost", t1.samples, t1.lost);
	say("second: delivered + lost = produced: %s, lost %llu",
	    yes(accounted("second", t2.samples, t2.lost, produced)), t2.lost);
	perf_buffer__free(pb2);
	say("after freeing the second, a write returns %d", emit_one(0, 2));
	perf_buffer__poll(pb1, 50);
	say("first got %llu samples", t1.samples);
	perf_buffer__free(pb1);
}

/* The caller deletes a slot: writes fail with ENOENT from then on. */
static void slot_deleted(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	warm(pb, &t);
	int key = 0;
	say("delete slot 0: %d", bpf_map_delete_elem(prod.map_fd, &key));
	say("a write returns %d", emit_one(0, 1));
	stream(pb, &t, 2 * WARM_MS);
	say("then %llu delivered, %llu lost; a write returns %d", t.samples, t.lost, emit_one(0, 2));
	perf_buffer__poll(pb, 50);
	say("and %llu delivered", t.samples);
	perf_buffer__free(pb);
}

/* A raw reader of one mapped ring: counts samples and lost records, and
 * with a tally, hands it every sample (with its ring's CPU) as the
 * callbacks would. */
struct raw_ring {
	void *base;
	size_t data_size, page_size;
	unsigned long long samples, lost;
	struct tally *t;
	int cpu;
};

static void raw_drain(struct raw_ring *r)
{
	struct perf_event_mmap_page *page = r->base;
	uint8_t *data = (uint8_t *)r->base + r->page_size;
	uint64_t head = __atomic_load_n(&page->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = page->data_tail;
	while (tail < head) {
		struct perf_event_header h;
		uint8_t copy[64];
		size_t off = tail & (r->data_size - 1);
		for (size_t i = 0; i < sizeof(h); i++)
			((uint8_t *)&h)[i] = data[(off + i) & (r->data_size - 1)];
		if (h.size < sizeof(h) || h.size % 8)
			break;
		if (h.size <= sizeof(copy))
			for (size_t i = 0; i < h.size; i++)
				copy[i] = data[(off + i) & (r->data_size - 1)];
		if (h.type == PERF_RECORD_SAMPLE) {
			r->samples++;
			if (r->t && h.size <= sizeof(copy) && h.size >= 16)
				note_sample(r->t, r->cpu, copy + 12);
		} else if (h.type == PERF_RECORD_LOST && h.size <= sizeof(copy)) {
			uint64_t lost;
			memcpy(&lost, copy + 16, 8);
			r->lost += lost;
			if (r->t)
				on_lost(r->t, r->cpu, lost);
		}
		tail += h.size;
	}
	__atomic_store_n(&page->data_tail, tail, __ATOMIC_RELEASE);
}

static long perf_open(struct perf_event_attr *attr, int cpu)
{
	return syscall(SYS_perf_event_open, attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

/* The caller puts an event of its own in slot 0: its ring gets everything. */
static void own_event_in_slot(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	warm(pb, &t);
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(attr),
		.config = PERF_COUNT_SW_BPF_OUTPUT,
		.sample_period = 1,
		.sample_type = PERF_SAMPLE_RAW,
		.wakeup_events = 1,
	};
	int fd = (int)perf_open(&attr, 0);
	EXPECT(fd >= 0, "own event: %s", strerror(errno));
	struct raw_ring own = {.page_size = (size_t)sysconf(_SC_PAGESIZE)};
	own.data_size = 256 * own.page_size;
	own.base = mmap(NULL, own.page_size + own.data_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	EXPECT(own.base != MAP_FAILED, "mmap own event");
	int key = 0;
	say("own event into slot 0: %d", bpf_map_update_elem(prod.map_fd, &key, &fd, BPF_ANY));
	struct job j;
	start(&j, 0, 2 * WARM_MS, false);
	while (!atomic_load(&j.done)) {
		perf_buffer__poll(pb, 5);
		raw_drain(&own);
	}
	join(&j);
	perf_buffer__consume(pb);
	raw_drain(&own);
	say("buffer got %llu samples; own ring got all: %s, lost %llu", t.samples,
	    yes(accounted("own ring", own.samples, own.lost, j.produced)), own.lost);
	perf_buffer__free(pb);
	munmap(own.base, own.page_size + own.data_size);
	close(fd);
}

/* ---- processes: a daemon restarting over a shared map ------------------- */

struct child {
	pid_t pid;
	int cmd, reply; /* pipes: commands to it, counts from it */
};

/* A child process holding its own buffer over its own fd of the map (as
 * after opening a pinned map): polls for as long as told, reports counts. */
static void child_main(int cmd, int reply, unsigned map_id)
{
	int fd = bpf_map_get_fd_by_id(map_id);
	struct tally t;
	tally_reset(&t);
	struct perf_buffer *pb = fd >= 0 ? perf_buffer__new(fd, PAGES, on_sample, on_lost, &t, NULL) : NULL;
	long long ok = pb ? 1 : -errno;
	if (write(reply, &ok, sizeof(ok)) != sizeof(ok) || !pb)
		_exit(1);
	int ms;
	while (read(cmd, &ms, sizeof(ms)) == sizeof(ms) && ms > 0) {
		/* What an earlier phase left in the rings is not counted; the
		 * parent produces only once this is done. */
		perf_buffer__consume(pb);
		tally_reset(&t);
		char ready = 1;
		if (write(reply, &ready, 1) != 1)
			_exit(1);
		for (double t0 = now_ms(); now_ms() - t0 < ms;)
			perf_buffer__poll(pb, 5);
		perf_buffer__consume(pb);
		unsigned long long out[3] = {t.samples, t.lost, batch_switches(pb)};
		if (write(reply, out, sizeof(out)) != sizeof(out))
			_exit(1);
	}
	_exit(0); /* like a daemon killed: nothing freed */
}

static bool child_start(struct child *c, unsigned map_id)
{
	int to[2], from[2];
	if (pipe(to) || pipe(from))
		return false;
	fflush(NULL);
	c->pid = fork();
	if (c->pid == 0) {
		close(to[1]);
		close(from[0]);
		child_main(to[0], from[1], map_id);
	}
	close(to[0]);
	close(from[1]);
	c->cmd = to[1];
	c->reply = from[0];
	long long ok = 0;
	return read(c->reply, &ok, sizeof(ok)) == sizeof(ok) && ok == 1;
}

/* Tells the child to poll for `ms`, and waits until it has started. */
static void child_poll(struct child *c, int ms)
{
	EXPECT(write(c->cmd, &ms, sizeof(ms)) == sizeof(ms), "command to child %d", c->pid);
	char ready = 0;
	EXPECT(read(c->reply, &ready, 1) == 1 && ready == 1, "child %d did not start polling", c->pid);
}

static void child_counts(struct child *c, unsigned long long out[3])
{
	out[0] = out[1] = out[2] = 0;
	EXPECT(read(c->reply, out, 3 * sizeof(*out)) == 3 * sizeof(*out), "counts from child %d", c->pid);
}

static unsigned map_id(int fd)
{
	struct bpf_map_info info = {0};
	__u32 len = sizeof(info);
	return bpf_obj_get_info_by_fd(fd, &info, &len) ? 0 : info.id;
}

/* The old daemon reads the map; a new one opens it while the old still
 * runs; the old gets nothing from then on, and keeps getting nothing after
 * it dies; the new one gets everything. */
static void restart_over_map(void)
{
	struct child old = {0}, new_ = {0};
	unsigned id = map_id(prod.map_fd);
	if (!child_start(&old, id)) {
		EXPECT(0, "old daemon did not start");
		return;
	}
	unsigned long long o[3], n[3];
	/* The old daemon stops polling while the stream still runs, so a fast
	 * mode of its own is still batching when the new daemon opens. */
	child_poll(&old, WARM_MS);
	struct job j;
	start(&j, 0, WARM_MS + 100, false);
	join(&j);
	child_counts(&old, o);
	say("old daemon alone got records: %s", yes(o[0] > 0 && o[0] + o[1] <= j.produced));
	if (fast_run)
		EXPECT(o[2] > 0, "old daemon's fast mode never engaged");
	if (!child_start(&new_, id)) {
		EXPECT(0, "new daemon did not start");
		kill(old.pid, SIGKILL);
		waitpid(old.pid, NULL, 0);
		return;
	}
	child_poll(&old, 2 * WARM_MS + 300);
	child_poll(&new_, 2 * WARM_MS + 300);
	start(&j, 0, 2 * WARM_MS, false);
	join(&j);
	child_counts(&old, o);
	child_counts(&new_, n);
	say("both running: old got %llu samples, new got all: %s", o[0],
	    yes(accounted("new daemon", n[0], n[1], j.produced)));
	kill(old.pid, SIGKILL);
	waitpid(old.pid, NULL, 0);
	child_poll(&new_, 300);
	say("old killed: a write returns %d", emit_n(0, 1000, 1));
	child_counts(&new_, n);
	say("new got %llu samples, %llu lost", n[0], n[1]);
	int stop = 0;
	EXPECT(write(new_.cmd, &stop, sizeof(stop)) == sizeof(stop), "stop new daemon");
	waitpid(new_.pid, NULL, 0);
	close(old.cmd);
	close(old.reply);
	close(new_.cmd);
	close(new_.reply);
}

/* A forked child frees its copy of the buffer: that deletes the slots (and
 * disables the events), so the parent's stream stops for good. */
static void fork_child_frees(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	warm(pb, &t);
	expect_fast(pb, true, "warm-up");
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		perf_buffer__free(pb);
		_exit(0);
	}
	int status = -1;
	waitpid(pid, &status, 0);
	say("child freed its copy: exit %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	say("a write returns %d", emit_one(0, 1));
	stream(pb, &t, 2 * WARM_MS);
	say("then %llu delivered, %llu lost; a write returns %d", t.samples, t.lost, emit_one(0, 2));
	perf_buffer__free(pb);
}

/* The caller pauses (or disables) output with its own ioctls on the
 * events perf_buffer__buffer_fd gives it, then resumes. */
static void ioctl_on_buffer_fd(unsigned long stop, unsigned long stop_arg, unsigned long go, unsigned long go_arg)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	warm(pb, &t);
	expect_fast(pb, true, "warm-up");
	size_t n = perf_buffer__buffer_cnt(pb);
	for (size_t i = 0; i < n; i++) {
		int r = ioctl(perf_buffer__buffer_fd(pb, i), stop, stop_arg);
		say("ring %zu: stop ioctl %d", i, r);
	}
	say("while stopped, a write returns %d", emit_n(0, 1000, 1));
	perf_buffer__poll(pb, 50);
	say("delivered %llu, lost %llu", t.samples, t.lost);
	for (size_t i = 0; i < n; i++)
		say("ring %zu: go ioctl %d", i, ioctl(perf_buffer__buffer_fd(pb, i), go, go_arg));
	say("then a write returns %d", emit_n(0, 10, 2));
	drain(pb, &t, 10, 500);
	say("delivered %llu, lost %llu in %llu reports", t.samples, t.lost, t.lost_reports);
	perf_buffer__free(pb);
}

static void ioctl_pause_output(void)
{
	ioctl_on_buffer_fd(PERF_EVENT_IOC_PAUSE_OUTPUT, 1, PERF_EVENT_IOC_PAUSE_OUTPUT, 0);
}

static void ioctl_disable(void)
{
	ioctl_on_buffer_fd(PERF_EVENT_IOC_DISABLE, 0, PERF_EVENT_IOC_ENABLE, 0);
}

/* The caller's own epoll over the perf_buffer__buffer_fd events, draining
 * each ready ring with consume_buffer and now and then everything with
 * consume. Every record must arrive, none late. */
static void own_epoll_on_buffer_fds(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	t.stamped = true;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	size_t n = perf_buffer__buffer_cnt(pb);
	for (size_t i = 0; i < n; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
		EXPECT(epoll_ctl(ep, EPOLL_CTL_ADD, perf_buffer__buffer_fd(pb, i), &ev) == 0, "epoll_ctl");
	}
	struct job j;
	start(&j, 0, 3 * WARM_MS, true);
	unsigned loops = 0;
	for (double t0 = now_ms(); !atomic_load(&j.done) || now_ms() - t0 < 3 * WARM_MS + 200;) {
		struct epoll_event evs[MAX_CPUS];
		int cnt = epoll_wait(ep, evs, MAX_CPUS, 20);
		for (int k = 0; k < cnt; k++)
			perf_buffer__consume_buffer(pb, (size_t)evs[k].data.u64);
		if (++loops % 50 == 0)
			perf_buffer__consume(pb);
	}
	join(&j);
	perf_buffer__consume(pb);
	/* Seconds: a record left behind until the end is caught, a slow
	 * machine is not (latency is make bench's). */
	say("own epoll: delivered %s, lost %llu, none later than 5 s: %s",
	    accounted("own epoll", t.samples, t.lost, j.produced) ? "all" : "not all", t.lost,
	    yes(t.max_latency_ms < 5000));
	printf("  own_epoll_on_buffer_fds: %llu of %llu, max latency %.1f ms\n", t.samples, j.produced,
	       t.max_latency_ms);
	expect_fast(pb, false, "after buffer_fd");
	close(ep);
	perf_buffer__free(pb);
}

/* The caller waits on perf_buffer__epoll_fd itself, drains each ring with
 * consume_buffer and calls consume every 500 ms. After a burst and a
 * settling time, an idle second must not wake it. */
static void epoll_fd_consume_buffer_idle(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	int ep = perf_buffer__epoll_fd(pb);
	size_t n = perf_buffer__buffer_cnt(pb);
	struct job j;
	start(&j, 0, WARM_MS, false);
	/* The burst, then 300 ms to settle counted from the producer's join
	 * (a producer still running on a loaded machine is no idle time),
	 * then the idle second. */
	double last_consume = now_ms(), settled = 0, idle_from = 0, cpu0 = 0;
	bool joined = false;
	unsigned idle_wakes = 0;
	while (!idle_from || now_ms() - idle_from < 1000) {
		if (!joined && atomic_load(&j.done)) {
			join(&j);
			joined = true;
			settled = now_ms() + 300;
		}
		if (joined && !idle_from && now_ms() >= settled) {
			idle_from = now_ms();
			cpu0 = thread_cpu_ms();
		}
		struct epoll_event evs[MAX_CPUS];
		int cnt = epoll_wait(ep, evs, MAX_CPUS, 100);
		if (cnt > 0) {
			idle_wakes += idle_from > 0;
			for (size_t i = 0; i < n; i++)
				perf_buffer__consume_buffer(pb, i);
		}
		if (now_ms() - last_consume >= 500) {
			perf_buffer__consume(pb);
			last_consume = now_ms();
		}
	}
	double cpu = thread_cpu_ms() - cpu0;
	say("burst: delivered + lost = produced: %s", yes(accounted("burst", t.samples, t.lost, j.produced)));
	/* A reader spinning on a ready fd burns the whole second. */
	say("idle second: %u wake-ups, CPU under half of it: %s", idle_wakes, yes(cpu < 500));
	printf("  epoll_fd_consume_buffer_idle: %u idle wake-ups, %.1f ms CPU\n", idle_wakes, cpu);
	expect_fast(pb, true, "burst");
	perf_buffer__free(pb);
}

/* After polling for a while, the caller starts reading the raw regions of
 * perf_buffer__buffer itself and polls no more: it must see every record,
 * and an idle epoll fd must stay quiet. */
static void raw_reader_after_polling(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	warm(pb, &t);
	expect_fast(pb, true, "warm-up");
	size_t n = perf_buffer__buffer_cnt(pb);
	struct raw_ring rings[MAX_CPUS];
	for (size_t i = 0; i < n && i < MAX_CPUS; i++) {
		rings[i] = (struct raw_ring){.page_size = (size_t)sysconf(_SC_PAGESIZE)};
		EXPECT(perf_buffer__buffer(pb, (int)i, &rings[i].base, &rings[i].data_size) == 0, "buffer");
	}
	int ep = perf_buffer__epoll_fd(pb);
	struct job j;
	start(&j, 0, 2 * WARM_MS, false);
	unsigned long long seen = 0, lost = 0;
	for (double t0 = now_ms(); !atomic_load(&j.done) || now_ms() - t0 < 2 * WARM_MS + 200;) {
		struct epoll_event evs[MAX_CPUS + 2];
		epoll_wait(ep, evs, MAX_CPUS + 2, 10);
		for (size_t i = 0; i < n && i < MAX_CPUS; i++)
			raw_drain(&rings[i]);
	}
	join(&j);
	for (size_t i = 0; i < n && i < MAX_CPUS; i++) {
		raw_drain(&rings[i]);
		seen += rings[i].samples;
		lost += rings[i].lost;
	}
	say("raw reader: seen + lost = produced: %s, lost %llu", yes(accounted("raw reader", seen, lost, j.produced)),
	    lost);
	struct epoll_event ev;
	unsigned ready = 0;
	for (double t0 = now_ms(); now_ms() - t0 < 100;)
		ready += epoll_wait(ep, &ev, 1, 20) > 0;
	say("idle epoll fd ready %u times in 100 ms", ready);
	perf_buffer__free(pb);
}

/* A raw reader that takes over while records flow: the caller polls for
 * 0.5 s under a full-rate stream (in the fast run, on until the fast mode
 * has engaged: a loaded machine can take longer), then takes every ring
 * with perf_buffer__buffer and reads them itself for 1 s, waiting on
 * perf_buffer__epoll_fd, while the stream goes on. Every record must reach
 * it (through the callbacks until the switch, raw after it) or be counted
 * lost, in order. */
static void raw_reader_under_load(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	struct job j;
	start(&j, 0, 10000, false);
	double t0 = now_ms();
	while (now_ms() - t0 < 500 || (fast_run && !batch_switches(pb) && now_ms() - t0 < 5000))
		perf_buffer__poll(pb, 10);
	expect_fast(pb, true, "polling under load");
	usleep(2000); /* the caller sets its own reader up */
	size_t n = perf_buffer__buffer_cnt(pb);
	struct raw_ring rings[MAX_CPUS];
	for (size_t i = 0; i < n && i < MAX_CPUS; i++) {
		rings[i] = (struct raw_ring){.page_size = (size_t)sysconf(_SC_PAGESIZE), .t = &t, .cpu = (int)i};
		EXPECT(perf_buffer__buffer(pb, (int)i, &rings[i].base, &rings[i].data_size) == 0, "buffer");
	}
	int ep = perf_buffer__epoll_fd(pb);
	for (double t1 = now_ms(); !atomic_load(&j.done);) {
		if (now_ms() - t1 >= 1000)
			atomic_store(&j.stop, true);
		struct epoll_event evs[MAX_CPUS + 2];
		epoll_wait(ep, evs, MAX_CPUS + 2, 10);
		for (size_t i = 0; i < n && i < MAX_CPUS; i++)
			raw_drain(&rings[i]);
	}
	join(&j);
	/* The kernel reports a ring's lost records with its next record. */
	unsigned long long produced = j.produced + (emit_one(0, (uint8_t)j.seed) == 0);
	for (double t2 = now_ms(); t.samples + t.lost < produced && now_ms() - t2 < 3000;) {
		struct epoll_event evs[MAX_CPUS + 2];
		epoll_wait(ep, evs, MAX_CPUS + 2, 10);
		for (size_t i = 0; i < n && i < MAX_CPUS; i++)
			raw_drain(&rings[i]);
	}
	say("raw reader under load: delivered + lost = produced: %s, out of order %llu, nothing lost: %s",
	    yes(accounted("raw reader under load", t.samples, t.lost, produced)), t.misordered, yes(t.lost == 0));
	printf("  raw_reader_under_load: %llu delivered, %llu lost, %llu produced, %llu out of order\n", t.samples,
	       t.lost, produced, t.misordered);
	perf_buffer__free(pb);
}

/* Only one or two file descriptors to spare: what needs more must do
 * without, and nothing may be reordered. */
static void few_spare_fds(void)
{
	for (int spare = 1; spare <= 2; spare++) {
		struct rlimit old, low;
		getrlimit(RLIMIT_NOFILE, &old);
		low = old;
		/* New fds take the lowest free numbers below the limit: leave
		 * room for libbpf's (an epoll fd and one event per CPU) and
		 * `spare` more. */
		int free_wanted = 1 + ncpu + spare, free_seen = 0;
		rlim_t limit = 0;
		while (free_seen < free_wanted && limit < old.rlim_cur)
			free_seen += fcntl((int)limit++, F_GETFD) == -1;
		low.rlim_cur = limit;
		setrlimit(RLIMIT_NOFILE, &low);
		struct tally t;
		struct perf_buffer *pb = new_pb(PAGES, &t);
		if (pb) {
			unsigned long long produced = stream(pb, &t, 2 * WARM_MS);
			say("%d spare: delivered + lost = produced: %s, lost %llu, out of order %llu", spare,
			    yes(accounted("spare fds", t.samples, t.lost, produced)), t.lost, t.misordered);
			perf_buffer__free(pb);
		}
		setrlimit(RLIMIT_NOFILE, &old);
	}
}

/* Keeps the calling thread off CPU 0, where the producer runs, until
 * `old` is restored. Woken from the producer's CPU, a reader can be moved
 * onto it and share it with the producer: it then falls behind for good
 * (a full ring makes the producer faster still) and loses records, with
 * libbpf as with libperfbuf, in an occasional run. */
static void reader_off_cpu0(cpu_set_t *old)
{
	sched_getaffinity(0, sizeof(*old), old);
	if (ncpu < 2)
		return;
	cpu_set_t others = *old;
	CPU_CLR(0, &others);
	if (CPU_COUNT(&others) > 0)
		sched_setaffinity(0, sizeof(others), &others);
}

/* A slow callback (1 to 3 us per record) under one CPU at full rate for
 * 2 s, several times: libbpf's per-record wake-ups slow the producer down
 * enough for the reader to keep up, and a fast mode must give them back
 * before its reader's backlog overflows the ring, every time. */
static void slow_callback(void)
{
	static const unsigned cost_ns[] = {3000, 1000, 2000, 3000, 2000, 3000};
	cpu_set_t old;
	reader_off_cpu0(&old);
	for (size_t k = 0; k < sizeof(cost_ns) / sizeof(cost_ns[0]); k++) {
		struct tally t;
		struct perf_buffer *pb = new_pb(PAGES, &t);
		if (!pb)
			break;
		t.spin_ns = cost_ns[k];
		unsigned long long produced = stream(pb, &t, 2000);
		say("slow callback, %u us per record: delivered + lost = produced: %s, out of order %llu, "
		    "nothing lost: %s",
		    cost_ns[k] / 1000, yes(accounted("slow callback", t.samples, t.lost, produced)), t.misordered,
		    yes(t.lost == 0));
		printf("  slow_callback %u us: %llu produced, %llu lost, %llu batch switches\n", cost_ns[k] / 1000,
		       produced, t.lost, batch_switches(pb));
		perf_buffer__free(pb);
	}
	sched_setaffinity(0, sizeof(old), &old);
}

/* ---- readers of producers freed of per-record wake-ups --------------------
 * With many records per call the kernel's perf output runs 20 to 60 times
 * faster than libbpf's per-record wake-ups let a producer go (about 10 M
 * records/s on a fast host). libbpf's slow readers lose nothing because
 * those wake-ups slow the producer; a fast mode must give them back before
 * such a producer outruns what its reader can take. */

struct shape {
	unsigned size;	 /* sample bytes */
	int cpus;	 /* producers on CPUs 0..cpus-1 */
	size_t pages;	 /* the caller's ring */
	unsigned cost_ns; /* the callback's cost per record */
};

/* The reader's loop body while the producers run. */
typedef void (*read_fn)(struct perf_buffer *pb);

static void read_poll(struct perf_buffer *pb)
{
	perf_buffer__poll(pb, 10);
}

/* A caller that never polls: it consumes every 20 ms. */
static void read_consume_20ms(struct perf_buffer *pb)
{
	usleep(20000);
	perf_buffer__consume(pb);
}

/* Streams `sh` at full rate, 2000 records per call, for `ms` through a
 * new buffer read by `read`, drains, and says whether everything was
 * delivered, in order, none lost (as libbpf does). */
static void fast_producers(const char *what, const struct shape *sh, double ms, read_fn read, bool fast_expected)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(sh->pages, &t);
	if (!pb)
		return;
	t.spin_ns = sh->cost_ns;
	struct job j[MAX_CPUS];
	int jobs = sh->cpus < ncpu ? sh->cpus : ncpu;
	for (int k = 0; k < jobs; k++)
		start_shaped(&j[k], k, ms, 2000, sh->size, false);
	double t0 = now_ms();
	for (bool done = false; !done;) {
		read(pb);
		done = true;
		for (int k = 0; k < jobs; k++)
			done &= atomic_load(&j[k].done);
	}
	double secs = (now_ms() - t0) / 1e3;
	unsigned long long produced = 0;
	for (int k = 0; k < jobs; k++) {
		join(&j[k]);
		produced += j[k].produced + (emit_one(k, (uint8_t)j[k].seed) == 0);
	}
	drain(pb, &t, produced, 3000);
	say("%s, %u-byte samples on %d CPU(s), %zu pages: delivered + lost = produced: %s, out of order %llu, "
	    "nothing lost: %s",
	    what, sh->size, jobs, sh->pages, yes(accounted(what, t.samples, t.lost, produced)), t.misordered,
	    yes(t.lost == 0));
	printf("  %s, %u B on %d CPU(s): %llu produced (%.0f k/s), %llu lost, %llu batch switches\n", what, sh->size,
	       jobs, produced, produced / secs / 1e3, t.lost, batch_switches(pb));
	if (!fast_expected)
		expect_fast(pb, false, what);
	perf_buffer__free(pb);
}

/* Slow callbacks (3 us per record) under a producer of 2000 records per
 * call, the reader off its CPU. */
static void slow_callback_fast_producer(void)
{
	static const struct shape shapes[] = {
		{8, 1, PAGES, 3000},
		{64, 1, PAGES, 3000},
	};
	cpu_set_t old;
	reader_off_cpu0(&old);
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		char what[64];
		snprintf(what, sizeof(what), "slow callback, %u us per record", shapes[k].cost_ns / 1000);
		fast_producers(what, &shapes[k], 1500, read_poll, true);
	}
	sched_setaffinity(0, sizeof(old), &old);
}

/* A caller that never polls and consumes every 20 ms: it gets nothing
 * from batched wake-ups, and a producer freed of per-record ones would
 * overflow its rings between two consumes. */
static void consume_every_20ms(void)
{
	static const struct shape shapes[] = {
		{8, 1, PAGES, 0},
		{8, 2, PAGES, 0},
		{64, 1, 2 * PAGES, 0},
	};
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
		fast_producers("consume every 20 ms", &shapes[k], 1500, read_consume_20ms, false);
}

/* Both CPUs produce at full rate (the reader shares one with a
 * producer), polled by a reader that does nothing else. */
static void fast_producers_both_cpus(void)
{
	static const struct shape shapes[] = {
		{64, 2, PAGES, 0},
		{8, 2, PAGES, 0},
	};
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
		fast_producers("polled", &shapes[k], 1500, read_poll, true);
}

static void *busy_loop(void *arg)
{
	atomic_bool *stop = arg;
	while (!atomic_load_explicit(stop, memory_order_relaxed))
		;
	return NULL;
}

/* The reader's CPU is shared with a busy loop (another program's, say):
 * the reader, on CPU 1, runs only part of the time. */
static void shared_reader_cpu(void)
{
	static const struct shape shapes[] = {
		{64, 1, PAGES, 0},
		{8, 1, PAGES, 0},
	};
	if (ncpu < 2) {
		EXPECT(0, "shared_reader_cpu needs 2 CPUs");
		return;
	}
	cpu_set_t old, one;
	sched_getaffinity(0, sizeof(old), &old);
	CPU_ZERO(&one);
	CPU_SET(1, &one);
	sched_setaffinity(0, sizeof(one), &one);
	atomic_bool stop;
	atomic_init(&stop, false);
	pthread_t busy;
	pthread_create(&busy, NULL, busy_loop, &stop); /* inherits CPU 1 */
	for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
		fast_producers("reader sharing its CPU", &shapes[k], 2000, read_poll, true);
	atomic_store(&stop, true);
	pthread_join(busy, NULL);
	sched_setaffinity(0, sizeof(old), &old);
}

/* The same with a 1 us callback, in a process that may not lock more
 * memory than the kernel's per-user perf allowance (no CAP_IPC_LOCK,
 * RLIMIT_MEMLOCK 0). */
static void no_memlock(void)
{
	int out[2];
	if (pipe(out))
		return;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(out[0]);
		struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
		struct __user_cap_data_struct caps[2];
		syscall(SYS_capget, &hdr, caps);
		caps[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
		caps[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
		int capped = (int)syscall(SYS_capset, &hdr, caps);
		struct rlimit zero = {0, 0};
		int limited = setrlimit(RLIMIT_MEMLOCK, &zero);
		struct tally t;
		struct perf_buffer *pb = new_pb(PAGES, &t);
		unsigned long long r[5] = {(unsigned long long)capped, (unsigned long long)limited, pb != NULL, 0, 0};
		if (pb) {
			t.spin_ns = 1000;
			unsigned long long produced = stream(pb, &t, 3 * WARM_MS);
			r[3] = t.samples + t.lost == produced;
			r[4] = t.lost;
			if (fast_run && batch_switches(pb))
				r[2] = 2; /* the fast mode engaged without its spill ring */
			perf_buffer__free(pb);
		}
		_exit(write(out[1], r, sizeof(r)) == sizeof(r) ? 0 : 1);
	}
	close(out[1]);
	unsigned long long r[5] = {0};
	EXPECT(read(out[0], r, sizeof(r)) == sizeof(r), "no_memlock child");
	waitpid(pid, NULL, 0);
	close(out[0]);
	EXPECT(r[0] == 0 && r[1] == 0, "capset %lld, setrlimit %lld", (long long)r[0], (long long)r[1]);
	EXPECT(r[2] != 2, "the fast mode engaged without a spill ring");
	EXPECT(r[2] == 0 || r[3], "no memlock: delivered + lost != produced, lost %llu", r[4]);
	say("no memlock: built %s, delivered + lost = produced: %s, lost %llu", yes(r[2] != 0), yes(r[3]), r[4]);
}

/* One perf_buffer__buffer call (a raw region looked at once), then
 * ordinary polling at full rate. */
static void buffer_call_then_poll(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	warm(pb, &t);
	expect_fast(pb, true, "warm-up");
	void *base;
	size_t size;
	say("buffer: %d", perf_buffer__buffer(pb, 0, &base, &size));
	unsigned long long produced = stream(pb, &t, 3 * WARM_MS);
	say("then delivered + lost = produced: %s, lost %llu",
	    yes(accounted("after buffer", t.samples, t.lost, produced)), t.lost);
	perf_buffer__free(pb);
}

/* Both CPUs at full rate: poll never reports more rings than there are. */
static void poll_count(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	size_t n = perf_buffer__buffer_cnt(pb);
	struct job j[2];
	int jobs = ncpu > 1 ? 2 : 1;
	for (int k = 0; k < jobs; k++)
		start(&j[k], k, 2 * WARM_MS, false);
	int max_ret = 0;
	while (!atomic_load(&j[0].done) || !atomic_load(&j[jobs - 1].done)) {
		int r = perf_buffer__poll(pb, 10);
		if (r > max_ret)
			max_ret = r;
	}
	unsigned long long produced = 0;
	for (int k = 0; k < jobs; k++) {
		join(&j[k]);
		produced += j[k].produced + (emit_one(k, (uint8_t)j[k].seed) == 0);
	}
	for (double t0 = now_ms(); t.samples + t.lost < produced && now_ms() - t0 < 3000;) {
		int r = perf_buffer__poll(pb, 20);
		if (r > max_ret)
			max_ret = r;
	}
	say("poll returned at most buffer_cnt: %s; delivered + lost = produced: %s", yes(max_ret <= (int)n),
	    yes(accounted("poll return values", t.samples, t.lost, produced)));
	/* Not asked whether the fast mode engaged: with a producer on the
	 * reader's CPU too, records wait for the reader while it waits for
	 * that CPU, and the fast mode keeps per-record wake-ups then. */
	perf_buffer__free(pb);
}

/* A huge ring (256 MiB per CPU): no poll may overrun its timeout. */
static void huge_ring_poll_timeout(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(65536, &t);
	if (!pb)
		return;
	struct job j;
	start(&j, 0, 2 * WARM_MS, false);
	double worst = 0;
	while (!atomic_load(&j.done)) {
		double t0 = now_ms();
		perf_buffer__poll(pb, 100);
		if (now_ms() - t0 > worst)
			worst = now_ms() - t0;
	}
	join(&j);
	unsigned long long produced = j.produced + (emit_one(0, (uint8_t)j.seed) == 0);
	drain(pb, &t, produced, 3000);
	/* A poll that drained the whole ring before returning would take
	 * seconds; 1 s leaves a loaded machine its scheduling delays. */
	say("every poll(100) within 1 s: %s; delivered + lost = produced: %s", yes(worst < 1000),
	    yes(accounted("every poll", t.samples, t.lost, produced)));
	printf("  huge_ring_poll_timeout: longest poll %.1f ms\n", worst);
	expect_fast(pb, true, "huge ring");
	perf_buffer__free(pb);
}

/* read(2) on a buffer_fd event, as perf tools do for its count. */
static void read_buffer_fd(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	warm(pb, &t);
	uint64_t v[4];
	errno = 0;
	ssize_t r8 = read(perf_buffer__buffer_fd(pb, 0), v, 8);
	say("read 8 bytes: %zd (errno %d)", r8, r8 < 0 ? errno : 0);
	errno = 0;
	ssize_t r32 = read(perf_buffer__buffer_fd(pb, 0), v, sizeof(v));
	say("read 32 bytes: %zd (errno %d)", r32, r32 < 0 ? errno : 0);
	perf_buffer__free(pb);
}

/* A caller that never waits: it drains every ring with consume_buffer in
 * a loop, sleeping 100 us between rounds. */
static void consume_buffer_loop(void)
{
	struct tally t;
	struct perf_buffer *pb = new_pb(PAGES, &t);
	if (!pb)
		return;
	size_t n = perf_buffer__buffer_cnt(pb);
	struct job j;
	start(&j, 0, 2 * WARM_MS, false);
	while (!atomic_load(&j.done)) {
		for (size_t i = 0; i < n; i++)
			perf_buffer__consume_buffer(pb, i);
		usleep(100);
	}
	join(&j);
	unsigned long long produced = j.produced + (emit_one(0, (uint8_t)j.seed) == 0);
	for (double t0 = now_ms(); t.samples + t.lost < produced && now_ms() - t0 < 3000; usleep(1000))
		for (size_t i = 0; i < n; i++)
			perf_buffer__consume_buffer(pb, i);
	say("consume_buffer loop: delivered + lost = produced: %s, lost %llu",
	    yes(accounted("consume_buffer loop", t.samples, t.lost, produced)), t.lost);
	expect_fast(pb, true, "consume_buffer loop");
	perf_buffer__free(pb);
}

struct scenario {
	const char *name;
	void (*run)(void);
	bool fast; /* the fast mode supports this caller */
};

static const struct scenario scenarios[] = {
	{"two_buffers", two_buffers, true},
	{"slot_deleted", slot_deleted, false},
	{"own_event_in_slot", own_event_in_slot, false},
	{"restart_over_map", restart_over_map, false},
	{"fork_child_frees", fork_child_frees, true},
	{"ioctl_pause_output", ioctl_pause_output, true},
	{"ioctl_disable", ioctl_disable, true},
	{"own_epoll_on_buffer_fds", own_epoll_on_buffer_fds, true},
	{"epoll_fd_consume_buffer_idle", epoll_fd_consume_buffer_idle, true},
	{"raw_reader_after_polling", raw_reader_after_polling, true},
	{"raw_reader_under_load", raw_reader_under_load, true},
	{"few_spare_fds", few_spare_fds, true},
	{"slow_callback", slow_callback, true},
	{"slow_callback_fast_producer", slow_callback_fast_producer, true},
	{"consume_every_20ms", consume_every_20ms, true},
	{"fast_producers_both_cpus", fast_producers_both_cpus, true},
	{"shared_reader_cpu", shared_reader_cpu, true},
	{"no_memlock", no_memlock, true},
	{"buffer_call_then_poll", buffer_call_then_poll, true},
	{"poll_count", poll_count, true},
	{"huge_ring_poll_timeout", huge_ring_poll_timeout, true},
	{"read_buffer_fd", read_buffer_fd, true},
	{"consume_buffer_loop", consume_buffer_loop, true},
};

static bool wanted(const char *name, int argc, char **argv)
{
	if (argc <= 3)
		return true;
	for (int i = 3; i < argc; i++)
		if (!strcmp(argv[i], name))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s libbpf|libperfbuf|fast OUTDIR [SCENARIO...]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *lib = argv[1];
	fast_run = !strcmp(lib, "fast");
	Dl_info info;
	if (!dladdr((void *)perf_buffer__new, &info) || !strstr(info.dli_fname, fast_run ? "libperfbuf" : lib)) {
		fprintf(stderr, "perf_buffer__new served by %s, expected %s\n", info.dli_fname ? info.dli_fname : "?",
			lib);
		return 1;
	}
	ring_stats_fn = (int (*)(const struct perf_buffer *, size_t, struct perfbuf_ring_stats *))dlsym(
		RTLD_DEFAULT, "perfbuf_ring_stats");
	const char *adaptive = getenv("PERFBUF_ADAPTIVE");
	if (fast_run && (!ring_stats_fn || !adaptive || strcmp(adaptive, "1"))) {
		fprintf(stderr, "the fast run needs libperfbuf with PERFBUF_ADAPTIVE=1\n");
		return 1;
	}
	ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	producer_open_or_exit(&prod, 0);
	/* Producers run on CPU 0 (and 1); readers off CPU 0, as a tool reading
	 * a busy CPU's records does, not sharing it with the producer. */
	cpu_set_t all;
	reader_off_cpu0(&all);
	int failed = 0, ran = 0;
	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		const struct scenario *s = &scenarios[i];
		if ((fast_run && !s->fast) || !wanted(s->name, argc, argv))
			continue;
		char path[512];
		snprintf(path, sizeof(path), "%s/%s.txt", argv[2], s->name);
		tx = fopen(path, "w");
		if (!tx) {
			perror(path);
			return 1;
		}
		int before = failures;
		double t0 = now_ms();
		s->run();
		fclose(tx);
		bool ok = failures == before;
		printf("%s %s (%.1f s)\n", ok ? "ok  " : "FAIL", s->name, (now_ms() - t0) / 1e3);
		failed += !ok;
		ran++;
	}
	producer_close(&prod);
	printf("callers_test (%s): %d passed, %d failed\n", lib, ran - failed, failed);
	return failed ? 1 : 0;
}
