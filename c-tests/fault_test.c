/* Fault injection, fd exhaustion and churn, against a libperfbuf built
 * with the `fault-injection` feature: every failure point of construction
 * returns NULL with the injected errno and leaves no file descriptor,
 * mapping or map entry behind; 10,000 create/free cycles do not grow. */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

int perfbuf_fault_arm(const char *point, unsigned nth, int err);
int perfbuf_fault_armed(void);
int perfbuf_fault_online_cpus(const char *list);


static struct producer prod;

static int count_lines(const char *path, const char *prefix)
{
	FILE *f = fopen(path, "r");
	char line[512];
	int n = 0;
	while (f && fgets(line, sizeof(line), f))
		n += !prefix || !strncmp(line, prefix, strlen(prefix));
	if (f)
		fclose(f);
	return n;
}

struct point {
	const char *name;
	unsigned nth;
	int err;
};

static void test_points(void)
{
	static const struct point points[] = {
		{"epoll_create", 1, ENFILE},   {"perf_event_open", 1, EMFILE}, {"perf_event_open", 2, EACCES},
		{"mmap", 1, ENOMEM},	       {"mmap", 2, EPERM},	       {"ioctl", 1, EIO},
		{"ioctl", 2, ENODEV},	       {"map_update", 1, E2BIG},       {"map_update", 2, ENOSPC},
		{"epoll_ctl", 1, ENOSPC},      {"epoll_ctl", 2, ENOMEM},
	};
	for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
		const struct point *p = &points[i];
		int fds = count_open_fds(), maps = count_lines("/proc/self/maps", NULL);
		EXPECT(perfbuf_fault_arm(p->name, p->nth, p->err) == 0, "arm %s", p->name);
		errno = 0;
		struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
		int err = errno;
		perfbuf_fault_arm(p->name, 0, 0);
		int ret = 0;
		producer_emit_det(&prod, 0, 8, 0, 1, &ret);
		int fds_after = count_open_fds(), maps_after = count_lines("/proc/self/maps", NULL);
		printf("  %-16s call %u -> %s errno %d (want %d), fds %d->%d, maps %d->%d, cpu0 output %d\n", p->name,
		       p->nth, pb ? "handle" : "NULL", err, p->err, fds, fds_after, maps, maps_after, ret);
		EXPECT(!pb && err == p->err, "%s #%u", p->name, p->nth);
		EXPECT(fds_after == fds && maps_after == maps, "%s #%u leaked", p->name, p->nth);
		EXPECT(ret == -ENOENT, "%s #%u left a map entry (%d)", p->name, p->nth, ret);
		if (pb)
			perf_buffer__free(pb);
	}
	/* The extensions' own descriptors. */
	struct perfbuf_opts o = {.sz = sizeof(o), .wakeup_events = 8};
	int fds = count_open_fds();
	perfbuf_fault_arm("timerfd", 1, EMFILE);
	errno = 0;
	struct perf_buffer *pb = perfbuf_new(prod.map_fd, 1, NULL, NULL, NULL, &o);
	EXPECT(!pb && errno == EMFILE && count_open_fds() == fds, "timerfd failure");
	pb = perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
	perfbuf_fault_arm("eventfd", 1, EMFILE);
	EXPECT(perfbuf_wake(pb) == -EMFILE, "eventfd failure");
	EXPECT(perfbuf_wake(pb) == 0 && perf_buffer__poll(pb, 1000) == -ECANCELED, "wake after a failed wake");
	perf_buffer__free(pb);
	EXPECT(count_open_fds() == fds, "wake leaked");
}

static int hostile_samples;
static void count_hostile(void *ctx, int cpu, void *data, __u32 size)
{
	(void)ctx;
	(void)cpu;
	uint8_t want[40];
	producer_expected(40, 0x5a, want);
	hostile_samples += size == 44 && memcmp(data, want, 40) == 0;
}

/* A custom reader on the raw region publishes a wrong data_tail (the control
 * page is writable by anyone holding the mapping). For each inconsistent
 * state the next drain must return, skip to the head and count it, and the
 * records produced afterwards must be delivered intact. */
static void test_hostile_control_page(void)
{
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1, count_hostile, NULL, NULL, NULL);
	EXPECT(pb, "new");
	void *base;
	size_t size;
	perf_buffer__buffer(pb, 0, &base, &size);
	volatile uint64_t *head = (uint64_t *)((char *)base + 1024), *tail = (uint64_t *)((char *)base + 1032);
	static const struct {
		const char *name;
		int64_t shift; /* applied to the tail after three records were written */
		int from_head;  /* shift relative to the head instead */
	} states[] = {
		{"tail misaligned", 3, 0},	  {"tail inside a record", 8, 0},   {"tail inside a record", 16, 0},
		{"head behind tail", 64, 1},	  {"tail far behind head", -8192, 1}, {"tail far beyond head", 1 << 20, 1},
		{"tail wrapped below zero", -((int64_t)1 << 40), 1},
	};
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		int ret = 0;
		producer_emit_det(&prod, 0, 40, 0x5a, 3, &ret);
		uint64_t h = *head;
		*tail = (states[i].from_head ? h : *tail) + (uint64_t)states[i].shift;
		struct perfbuf_ring_stats before = {.sz = sizeof(before)}, after = {.sz = sizeof(after)};
		perfbuf_ring_stats(pb, 0, &before);
		hostile_samples = 0;
		int r = perf_buffer__consume(pb);
		perfbuf_ring_stats(pb, 0, &after);
		/* Recovery: the next records arrive whole. */
		producer_emit_det(&prod, 0, 40, 0x5a, 2, &ret);
		int before_next = hostile_samples;
		perf_buffer__consume(pb);
		int next = hostile_samples - before_next;
		printf("  %-24s consume %d, resyncs +%llu, skipped %llu bytes, then %d of 2 new records\n", states[i].name,
		       r, (unsigned long long)(after.resyncs - before.resyncs),
		       (unsigned long long)(after.skipped_bytes - before.skipped_bytes), next);
		EXPECT(r == 0 && after.resyncs == before.resyncs + 1, "%s: not detected", states[i].name);
		EXPECT(next == 2 && *tail == *head, "%s: not recovered", states[i].name);
	}
	perf_buffer__free(pb);
}

static void test_fd_exhaustion(void)
{
	struct rlimit old, low;
	getrlimit(RLIMIT_NOFILE, &old);
	int fds = count_open_fds();
	low = old;
	int lowest_free = dup(0); /* at most two fds fit below the limit: epoll + one perf event */
	close(lowest_free);
	low.rlim_cur = (rlim_t)lowest_free + 2;
	setrlimit(RLIMIT_NOFILE, &low);
	errno = 0;
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
	int err = errno;
	setrlimit(RLIMIT_NOFILE, &old);
	printf("  fd limit %d: %s errno %d, fds %d->%d\n", lowest_free + 2, pb ? "handle" : "NULL", err, fds,
	       count_open_fds());
	EXPECT(!pb && err == EMFILE && count_open_fds() == fds, "fd exhaustion");
	if (pb)
		perf_buffer__free(pb);
}

static void test_churn(void)
{
	int fds = count_open_fds(), maps = count_lines("/proc/self/maps", NULL);
	long rss0 = 0;
	for (int i = 0; i < 10000; i++) {
		struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
		if (!pb) {
			EXPECT(0, "create #%d failed: %d", i, errno);
			break;
		}
		if (i % 100 == 0)
			perfbuf_wake(pb);
		perf_buffer__free(pb);
		if (i == 1000)
			rss0 = rss_kb();
	}
	long rss1 = rss_kb();
	printf("  10000 create/free cycles: fds %d->%d, maps %d->%d, RSS after 1000 %ld kB, after 10000 %ld kB\n", fds,
	       count_open_fds(), maps, count_lines("/proc/self/maps", NULL), rss0, rss1);
	EXPECT(count_open_fds() == fds && count_lines("/proc/self/maps", NULL) == maps, "churn leaked");
	EXPECT(rss1 - rss0 < 512, "RSS grew by %ld kB", rss1 - rss0);
}

/* Constructors under test for allocation failures. */
static struct perf_buffer *new_default(void)
{
	return perf_buffer__new(prod.map_fd, 1, NULL, NULL, NULL, NULL);
}

static struct perf_buffer *new_subset(void)
{
	int cpus[2] = {1, 0};
	struct perfbuf_opts o = {.sz = sizeof(o), .cpus = cpus, .cpu_cnt = 2, .wakeup_events = 4, .max_delay_ms = 10};
	return perfbuf_new(prod.map_fd, 1, NULL, NULL, NULL, &o);
}

static enum bpf_perf_event_ret ignore_event(void *ctx, int cpu, struct perf_event_header *event)
{
	(void)ctx, (void)cpu, (void)event;
	return LIBBPF_PERF_EVENT_CONT;
}

static struct perf_buffer *new_raw_explicit(void)
{
	struct perf_event_attr attr = {.type = PERF_TYPE_SOFTWARE, .size = sizeof(attr),
				       .config = PERF_COUNT_SW_BPF_OUTPUT, .sample_type = PERF_SAMPLE_RAW,
				       .sample_period = 1, .wakeup_events = 1};
	int cpus[2] = {0, 1}, keys[2] = {0, 1};
	struct perf_buffer_raw_opts o = {.sz = sizeof(o), .cpu_cnt = 2, .cpus = cpus, .map_keys = keys};
	return perf_buffer__new_raw(prod.map_fd, 1, &attr, ignore_event, NULL, &o);
}

/* Each allocation a constructor makes fails in turn: NULL with ENOMEM and
 * nothing left behind (fds, mappings, map entries); past the last one the
 * constructor succeeds. Rust would abort the host on a plain Box::new. */
static void test_alloc_failures(void)
{
	static const struct {
		const char *name;
		struct perf_buffer *(*make)(void);
	} ctors[] = {{"perf_buffer__new", new_default}, {"perfbuf_new", new_subset}, {"perf_buffer__new_raw", new_raw_explicit}};
	for (size_t c = 0; c < sizeof(ctors) / sizeof(ctors[0]); c++) {
		unsigned failed = 0, leaks = 0, wrong = 0;
		for (unsigned nth = 1; nth < 64; nth++) {
			int fds = count_open_fds(), maps = count_lines("/proc/self/maps", NULL);
			EXPECT(perfbuf_fault_arm("alloc", nth, ENOMEM) == 0, "arm alloc");
			errno = 0;
			struct perf_buffer *pb = ctors[c].make();
			int err = errno;
			perfbuf_fault_arm("alloc", 0, 0);
			if (pb) {
				perf_buffer__free(pb);
				break;
			}
			failed++;
			int ret = 0;
			producer_emit_det(&prod, 0, 8, 0, 1, &ret);
			wrong += err != ENOMEM;
			leaks += count_open_fds() != fds || count_lines("/proc/self/maps", NULL) != maps || ret != -ENOENT;
		}
		printf("  %-20s %u allocations failed in turn: %u without ENOMEM, %u leaving something behind\n",
		       ctors[c].name, failed, wrong, leaks);
		EXPECT(failed >= 3 && wrong == 0 && leaks == 0, "%s: %u failed, %u wrong errno, %u leaks", ctors[c].name,
		       failed, wrong, leaks);
	}
}

/* An event set's steps, each failed in turn on CPU 0 and CPU 1: the step
 * returns the injected errno and leaves no fd, mapping or link behind (what
 * it opened is closed before it returns). */
enum set_step { STEP_NEW, STEP_ADD, STEP_ADD_CLOCK, STEP_ATTACH, STEP_ENABLE, STEP_DONE };
static const char *const step_names[] = {"new", "add", "add-clock", "attach", "enable", "done"};

/* Runs the steps: a set with rings, a tracepoint with a filter, a
 * sampling cpu-clock event, a PERF_EVENT program attached to it, enable.
 * Returns the step that failed (STEP_DONE: none), its errno in *err; adds
 * to *leaked if the failed step left more fds or mappings than before it
 * (or an event enabled). */
static enum set_step run_set_steps(int prog, int *err, int *leaked)
{
	struct perfbuf_events_opts o = {.sz = sizeof(o), .page_cnt = 1};
	struct perfbuf_event_desc tp = {.sz = sizeof(tp), .kind = PERFBUF_EVENT_TRACEPOINT,
					.name = "sched:sched_process_exec", .filter = "common_pid != 0"};
	struct perfbuf_event_desc clock = {.sz = sizeof(clock), .kind = PERFBUF_EVENT_SOFTWARE,
					   .config = PERF_COUNT_SW_CPU_CLOCK, .period = 1000000};
	int fds = count_open_fds(), maps = count_lines("/proc/self/maps", NULL), ev = -1;
	enum set_step step = STEP_NEW;
	errno = 0;
	struct perfbuf_events *set = perfbuf_events_new(&o);
	*err = set ? 0 : errno;
	for (step = STEP_ADD; !*err && step < STEP_DONE; step++) {
		fds = count_open_fds();
		maps = count_lines("/proc/self/maps", NULL);
		int ret = 0;
		if (step == STEP_ADD)
			ret = perfbuf_events_add(set, &tp);
		else if (step == STEP_ADD_CLOCK)
			ret = ev = perfbuf_events_add(set, &clock);
		else if (step == STEP_ATTACH)
			ret = perfbuf_events_attach_bpf(set, ev, prog);
		else if (step == STEP_ENABLE) {
			ret = perfbuf_events_enable(set, -1);
			struct perfbuf_event_info info = {.sz = sizeof(info)};
			for (int e = 0; ret < 0 && e <= ev; e++)
				*leaked += perfbuf_events_info(set, e, &info) == 0 && info.enabled;
		}
		*err = ret < 0 ? -ret : 0;
	}
	if (*err)
		step--;
	*leaked += count_open_fds() != fds || count_lines("/proc/self/maps", NULL) != maps;
	perfbuf_events_free(set);
	return step;
}

static void test_event_set_steps(void)
{
	static const struct {
		const char *point;
		enum set_step step;
	} points[] = {
		{"perf_event_open", STEP_NEW}, {"mmap", STEP_NEW},	{"event_id", STEP_NEW},
		{"perf_event_open", STEP_ADD}, {"set_output", STEP_ADD}, {"set_filter", STEP_ADD},
		{"event_id", STEP_ADD},
		{"attach", STEP_ATTACH},       {"enable", STEP_NEW},	{"enable", STEP_ENABLE},
	};
	int prog = bpf_trivial_prog(BPF_PROG_TYPE_PERF_EVENT);
	EXPECT(prog >= 0, "load a perf event program: %s", strerror(-prog));
	if (prog < 0)
		return;
	int err = 0, leaked = 0;
	/* A first run loads what is loaded once (tracefs lookups, allocator arenas). */
	EXPECT(run_set_steps(prog, &err, &leaked) == STEP_DONE && !leaked, "unarmed: %s", strerror(err));
	int fds = count_open_fds(), maps = count_lines("/proc/self/maps", NULL);
	for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
		/* The opens, id reads and enables at construction are the rings'
		 * owners' (CPU 0, CPU 1); at add or enable, the event's: skip the
		 * construction's first. */
		int at_new_too = !strcmp(points[i].point, "perf_event_open") || !strcmp(points[i].point, "event_id") ||
				 !strcmp(points[i].point, "enable");
		unsigned skip = at_new_too && points[i].step != STEP_NEW ? 2 : 0;
		for (unsigned cpu = 0; cpu < 2; cpu++) {
			int err = 0, leaked = 0, injected = EMFILE + (int)cpu;
			EXPECT(perfbuf_fault_arm(points[i].point, skip + cpu + 1, injected) == 0, "arm");
			enum set_step step = run_set_steps(prog, &err, &leaked);
			int fired = !perfbuf_fault_armed();
			perfbuf_fault_arm(points[i].point, 0, 0);
			printf("  %-16s on cpu %u: %s failed with %s, %s\n", points[i].point, cpu, step_names[step],
			       strerror(err), leaked ? "LEFT SOMETHING BEHIND" : "nothing left behind");
			EXPECT(fired && step == points[i].step && err == injected && !leaked, "%s #%u: step %s err %d",
			       points[i].point, cpu, step_names[step], err);
		}
	}
	EXPECT(run_set_steps(prog, &err, &leaked) == STEP_DONE && !leaked, "unarmed: %s", strerror(err));
	EXPECT(count_open_fds() == fds && count_lines("/proc/self/maps", NULL) == maps, "leaks over the loop: fds %d -> %d",
	       fds, count_open_fds());
	close(prog);
}

/* CPUs going offline, simulated through the online list. */
static void test_event_set_offline_cpus(void)
{
	EXPECT(perfbuf_fault_online_cpus("") == 0, "set the online list");
	errno = 0;
	struct perfbuf_events *set = perfbuf_events_new(NULL);
	int err = errno;
	printf("  no CPU online: %s (%s)\n", set ? "a set" : "NULL", perfbuf_last_error());
	EXPECT(!set && err == ENODEV, "all CPUs offline: %s", strerror(err));
	perfbuf_fault_online_cpus("1");
	set = perfbuf_events_new(NULL);
	int cpus[4], offline[4];
	int n = set ? perfbuf_events_cpus(set, 0, cpus, 4) : -1, m = set ? perfbuf_events_cpus(set, 1, offline, 4) : -1;
	struct perfbuf_event_desc d = {.sz = sizeof(d), .kind = PERFBUF_EVENT_SOFTWARE,
				       .config = PERF_COUNT_SW_CPU_CLOCK};
	int ev = set ? perfbuf_events_add(set, &d) : -1;
	struct perfbuf_event_info info = {.sz = sizeof(info)};
	perfbuf_events_info(set, ev, &info);
	printf("  cpu 0 offline: the set has %d cpu(s) (cpu %d), skipped %d (cpu %d); the event %u instance(s)\n", n,
	       n > 0 ? cpus[0] : -1, m, m > 0 ? offline[0] : -1, info.instances);
	EXPECT(n == 1 && cpus[0] == 1 && m == 1 && offline[0] == 0 && ev >= 0 && info.instances == 1,
	       "cpu 0 offline");
	perfbuf_events_free(set);
	perfbuf_fault_online_cpus(NULL);
}

/* Samples per event of a set, told apart by perfbuf_events_decode. */
struct by_event {
	struct perfbuf_events *set;
	int ev[2];
	unsigned n[2];
};

static enum bpf_perf_event_ret count_by_event(void *ctx, int cpu, struct perf_event_header *hdr)
{
	struct by_event *c = ctx;
	(void)cpu;
	if (hdr->type == PERF_RECORD_SAMPLE) {
		struct perfbuf_sample s = {.sz = sizeof(s)};
		int ev = perfbuf_events_decode(c->set, hdr, hdr->size, &s);
		for (int i = 0; i < 2; i++)
			c->n[i] += ev == c->ev[i];
	}
	return LIBBPF_PERF_EVENT_CONT;
}

static double thread_cpu_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A kernel before 5.15 has no BPF perf links: attaching a program to an
 * event falls back to PERF_EVENT_IOC_SET_BPF. The link probe (made once
 * per process, as libbpf's) is failed with EINVAL, what such a kernel
 * answers, so this test must run first. Two cpu-clock events: the one
 * with the program (which returns 0: drop the sample) puts no sample in
 * the ring, the other does; the attach opened no link fd. */
static void test_attach_without_links(void)
{
	int prog = bpf_trivial_prog(BPF_PROG_TYPE_PERF_EVENT);
	EXPECT(prog >= 0, "load a perf event program: %s", strerror(-prog));
	struct perfbuf_events_opts o = {.sz = sizeof(o), .page_cnt = 8};
	struct perfbuf_event_desc clock = {.sz = sizeof(clock), .kind = PERFBUF_EVENT_SOFTWARE,
					   .config = PERF_COUNT_SW_CPU_CLOCK, .period = 1000000};
	struct by_event c = {.set = perfbuf_events_new(&o)};
	EXPECT(c.set, "perfbuf_events_new: %s", perfbuf_last_error());
	if (prog < 0 || !c.set)
		goto out;
	c.ev[0] = perfbuf_events_add(c.set, &clock);
	c.ev[1] = perfbuf_events_add(c.set, &clock);
	struct perf_buffer *r = perfbuf_events_reader(c.set, count_by_event, &c);
	EXPECT(c.ev[0] >= 0 && c.ev[1] >= 0 && r, "add, reader: %s", perfbuf_last_error());
	if (!r)
		goto out;
	/* The set keeps a dup of the program (for CPUs that come online later):
	 * count link fds, not all fds. */
	int fds = count_fds_naming("anon_inode:bpf_link");
	EXPECT(perfbuf_fault_arm("link_create", 1, EINVAL) == 0, "arm link_create");
	int ret = perfbuf_events_attach_bpf(c.set, c.ev[0], prog);
	int probed = !perfbuf_fault_armed();
	perfbuf_fault_arm("link_create", 0, 0);
	int link_fds = count_fds_naming("anon_inode:bpf_link") - fds;
	EXPECT(ret == 0 && probed, "attach without links: %d (the probe %s)", ret, probed ? "failed" : "did not run");
	EXPECT(link_fds == 0, "%d fds opened by the attach: links, not SET_BPF", link_fds);
	EXPECT(perfbuf_events_enable(c.set, -1) == 0, "enable");
	/* 100 ms of this thread's CPU time, however long that takes here. */
	double t0 = thread_cpu_ms();
	for (int i = 0; i < 1000000 && thread_cpu_ms() - t0 < 100; i++)
		perfbuf_consume(r);
	perfbuf_events_disable(c.set, -1);
	perfbuf_consume(r);
	printf("  no BPF links: attached by SET_BPF (%d new fds); samples: with the program %u, without %u\n", link_fds,
	       c.n[0], c.n[1]);
	EXPECT(c.n[1] > 0, "the event without a program took no sample");
	EXPECT(c.n[0] == 0, "%u samples passed a program that drops them all: not attached", c.n[0]);
	perfbuf_free(r);
out:
	perfbuf_events_free(c.set);
	if (prog >= 0)
		close(prog);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	producer_open_or_exit(&prod, 0);
	static const struct test_case tests[] = {{"attach_without_links", test_attach_without_links}, /* first */
		     {"failure_points", test_points},
		     {"hostile_control_page", test_hostile_control_page},
		     {"fd_exhaustion", test_fd_exhaustion},
		     {"churn", test_churn}, {"alloc_failures", test_alloc_failures},
		     {"event_set_steps", test_event_set_steps}, {"event_set_offline_cpus", test_event_set_offline_cpus}};
	int failed = run_tests("fault_test", tests, (int)(sizeof(tests) / sizeof(tests[0])));
	producer_close(&prod);
	return failed ? 1 : 0;
}
