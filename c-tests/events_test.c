/* Event sets on the real kernel: tracepoints with decoded fields, filters,
 * enable/disable and time order across CPUs; uprobes and uretprobes, at
 * a symbol, inside a function and at file offsets; the
 * kprobe PMU or the clear error without it; pid and cgroup targets; a
 * profiler (hardware cycles or the software fallback, a BPF program on
 * every CPU, deferred enable); lost records; another tool's BPF program on
 * a tracepoint, named; counter groups; events added
 * and removed while reading; errors. Needs root and tracefs (mounted here
 * if missing); under CI=true nothing is skipped.
 * usage: events_test PROFILE_BPF_OBJ */
#define _GNU_SOURCE
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <perfbuf.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "offset_target.h"
#include "testutil.h"

#define MAX_RECS 20000

static char exe[PATH_MAX], mark_a[64], mark_b[64];
static const char *profile_obj;
static int ncpus;

/* The uprobe target: a real function of this binary. */
__attribute__((noinline, used)) int perfbuf_probe_target(int x)
{
	__asm__ volatile("" ::: "memory");
	return x * 3 + 1;
}

static void call_target(int n)
{
	volatile int sink = 0;
	for (int i = 0; i < n; i++)
		sink += perfbuf_probe_target(i);
	(void)sink;
}

struct rec {
	int ev, cpu;
	uint32_t pid;
	uint64_t time, ip;
	char file[64];
};

struct collected {
	struct perfbuf_events *set;
	int n, unattributed;
	uint64_t lost;
	int out_of_order;
	uint64_t last_time;
	struct rec recs[MAX_RECS];
};

static enum bpf_perf_event_ret collect(void *ctx, int cpu, struct perf_event_header *hdr)
{
	struct collected *c = ctx;
	struct perfbuf_sample s = {.sz = sizeof(s)};
	int ev = perfbuf_events_decode(c->set, hdr, hdr->size, &s);
	if (hdr->type == PERF_RECORD_LOST) {
		c->lost += s.lost;
		return LIBBPF_PERF_EVENT_CONT;
	}
	if (ev < 0) {
		c->unattributed++;
		return LIBBPF_PERF_EVENT_CONT;
	}
	if (hdr->type != PERF_RECORD_SAMPLE || c->n >= MAX_RECS)
		return LIBBPF_PERF_EVENT_CONT;
	struct rec *r = &c->recs[c->n++];
	*r = (struct rec){.ev = ev, .cpu = cpu, .pid = s.pid, .time = s.time, .ip = s.ip};
	c->out_of_order += s.time < c->last_time;
	c->last_time = s.time;
	struct perfbuf_field f = {.sz = sizeof(f)};
	if (perfbuf_events_field(c->set, ev, s.raw, s.raw_size, "filename", &f) == 0 && f.kind == PERFBUF_FIELD_STR)
		snprintf(r->file, sizeof(r->file), "%.*s", (int)f.len, (const char *)f.data);
	return LIBBPF_PERF_EVENT_CONT;
}

static struct collected *collected_new(struct perfbuf_events *set)
{
	struct collected *c = calloc(1, sizeof(*c));
	c->set = set;
	return c;
}

static int count(const struct collected *c, int ev, const char *file, uint32_t pid)
{
	int n = 0;
	for (int i = 0; i < c->n; i++)
		n += c->recs[i].ev == ev && (!file || strcmp(c->recs[i].file, file) == 0) &&
		     (!pid || c->recs[i].pid == pid);
	return n;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static pid_t exec_on(const char *path, int cpu)
{
	pid_t pid = fork();
	if (pid == 0) {
		pin(cpu);
		execl(path, path, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void wait_children(void)
{
	while (wait(NULL) > 0)
		;
}

/* Reads until `want` samples of event `ev` arrived or 2 s passed. */
static void read_until(struct perf_buffer *pb, struct collected *c, int ev, int want)
{
	uint64_t end = now_ns() + 2000000000ull;
	while (count(c, ev, NULL, 0) < want && now_ns() < end)
		perfbuf_poll(pb, 50);
	perfbuf_consume(pb);
}

static struct perfbuf_events *must_new(const struct perfbuf_events_opts *o)
{
	struct perfbuf_events *set = perfbuf_events_new(o);
	EXPECT(set, "perfbuf_events_new: %s", perfbuf_last_error());
	if (!set)
		exit(1);
	return set;
}

static int add_tracepoint(struct perfbuf_events *set, const char *name, const char *filter)
{
	struct perfbuf_event_desc d = {.sz = sizeof(d), .kind = PERFBUF_EVENT_TRACEPOINT, .name = name, .filter = filter};
	return perfbuf_events_add(set, &d);
}

static int add_uprobe(struct perfbuf_events *set, int retprobe)
{
	struct perfbuf_event_desc d = {
		.sz = sizeof(d),
		.kind = PERFBUF_EVENT_UPROBE,
		.name = exe,
		.symbol = "perfbuf_probe_target",
		.flags = retprobe ? PERFBUF_EVENT_F_RETPROBE : 0,
	};
	return perfbuf_events_add(set, &d);
}

/* N execs of a marked binary, alternating CPUs, read in time order. */
static void test_tracepoint_exec_ordered(void)
{
	int fds = count_open_fds();
	struct perfbuf_events *set = must_new(NULL);
	int ev = add_tracepoint(set, "sched:sched_process_exec", NULL);
	EXPECT(ev >= 0, "add: %s", perfbuf_last_error());
	/* Its own fields, as the set parsed its format file. */
	char name[16], names[64] = "";
	int len;
	for (size_t i = 0; (len = perfbuf_events_field_name(set, ev, i, name, sizeof(name))) >= 0; i++)
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? "," : "", name);
	EXPECT(len == -ENOENT && strcmp(names, "filename,pid,old_pid") == 0, "field names: %s (%d)", names, len);
	EXPECT(perfbuf_events_field_name(set, ev, 0, name, 4) == 8 && strcmp(name, "fil") == 0, "cut name: %s", name);
	EXPECT(perfbuf_events_field_name(set, ev, 0, NULL, 0) == 8, "length only");
	EXPECT(perfbuf_events_field_name(set, ev, 0, NULL, 4) == -EINVAL, "NULL buf");
	EXPECT(perfbuf_events_field_name(set, ev + 1, 0, name, 4) == -ENOENT, "no such event");
	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
	struct perfbuf_order_opts order = {.sz = sizeof(order), .flags = PERFBUF_ORDER_SAMPLE_TIME};
	EXPECT(pb && perfbuf_set_order(pb, &order) == 0, "reader/order: %s", perfbuf_last_error());
	EXPECT(perfbuf_events_enable(set, -1) == 0, "enable: %s", perfbuf_last_error());
	enum { N = 12 };
	pid_t pids[N];
	uint64_t t0 = now_ns();
	for (int i = 0; i < N; i++)
		pids[i] = exec_on(mark_a, i % ncpus);
	wait_children();
	uint64_t t1 = now_ns();
	read_until(pb, c, ev, N);
	perfbuf_ordered_flush(pb);
	int matched = 0, on_cpu[2] = {0, 0}, in_window = 0;
	for (int i = 0; i < c->n; i++) {
		struct rec *r = &c->recs[i];
		if (strcmp(r->file, mark_a) != 0)
			continue;
		for (int k = 0; k < N; k++)
			if (pids[k] == (pid_t)r->pid)
				matched++;
		on_cpu[r->cpu & 1]++;
		in_window += r->time >= t0 && r->time <= t1;
	}
	printf("  %d execs of %s seen with their pids (%d on cpu 0, %d on cpu 1), %d samples in all, %d out of order\n",
	       matched, mark_a, on_cpu[0], on_cpu[1], c->n, c->out_of_order);
	EXPECT(matched == N, "%d of %d execs matched by filename and pid", matched, N);
	EXPECT(in_window == N, "%d samples within the CLOCK_MONOTONIC window", in_window);
	if (ncpus > 1)
		EXPECT(on_cpu[0] > 0 && on_cpu[1] > 0, "samples from both CPUs (%d, %d)", on_cpu[0], on_cpu[1]);
	EXPECT(c->out_of_order == 0, "%d samples out of time order", c->out_of_order);
	perfbuf_free(pb);
	perfbuf_events_free(set);
	free(c);
	EXPECT(count_open_fds() == fds, "fds %d -> %d", fds, count_open_fds());
}

/* A filter selects exactly its subset; disable stops samples, enable
 * restarts them. */
static void test_filter_enable_disable(void)
{
	struct perfbuf_events *set = must_new(NULL);
	char filter[128];
	snprintf(filter, sizeof(filter), "filename ~ \"%s\"", mark_a);
	int ev = add_tracepoint(set, "sched:sched_process_exec", filter);
	EXPECT(ev >= 0, "add with filter: %s", perfbuf_last_error());
	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
	perfbuf_events_enable(set, ev);
	for (int i = 0; i < 4; i++) {
		exec_on(mark_a, i % ncpus);
		exec_on(mark_b, i % ncpus);
	}
	wait_children();
	read_until(pb, c, ev, 4);
	usleep(50000);
	perfbuf_consume(pb);
	int a = count(c, ev, mark_a, 0), all = count(c, ev, NULL, 0);
	printf("  filter: %d samples, %d of them %s\n", all, a, mark_a);
	EXPECT(a == 4 && all == 4, "filtered: %d of %s, %d in all", a, mark_a, all);

	EXPECT(perfbuf_events_disable(set, ev) == 0, "disable");
	for (int i = 0; i < 3; i++)
		exec_on(mark_a, i % ncpus);
	wait_children();
	usleep(50000);
	perfbuf_consume(pb);
	EXPECT(count(c, ev, NULL, 0) == 4, "disabled: %d samples", count(c, ev, NULL, 0) - 4);
	EXPECT(perfbuf_events_enable(set, ev) == 0, "enable again");
	for (int i = 0; i < 3; i++)
		exec_on(mark_a, i % ncpus);
	wait_children();
	read_until(pb, c, ev, 7);
	EXPECT(count(c, ev, mark_a, 0) == 7, "re-enabled: %d samples", count(c, ev, mark_a, 0) - 4);

	/* A filter the kernel refuses. */
	int bad = add_tracepoint(set, "sched:sched_process_exec", "no_such_field == 1");
	EXPECT(bad == -EINVAL && strstr(perfbuf_last_error(), "filter"), "bad filter: %d %s", bad,
	       perfbuf_last_error());
	/* Once the reader is freed, the rings are gone: the message says so. */
	perfbuf_free(pb);
	bad = add_tracepoint(set, "sched:sched_process_exec", NULL);
	EXPECT(bad == -EINVAL && strstr(perfbuf_last_error(), "reader freed"), "after the reader: %s",
	       perfbuf_last_error());
	perfbuf_events_free(set);
	free(c);
}

/* A uprobe and a uretprobe on a function called N times: N samples each,
 * the uprobe's at the function's address. */
static void test_uprobes(void)
{
	int fds = count_open_fds();
	struct perfbuf_events *set = must_new(NULL);
	int up = add_uprobe(set, 0), ret = add_uprobe(set, 1);
	EXPECT(up >= 0 && ret >= 0, "add: %s", perfbuf_last_error());
	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
	perfbuf_events_enable(set, -1);
	enum { N = 200 };
	call_target(N);
	perfbuf_consume(pb);
	int at_entry = 0;
	for (int i = 0; i < c->n; i++)
		at_entry += c->recs[i].ev == up && c->recs[i].ip == (uint64_t)(uintptr_t)&perfbuf_probe_target;
	printf("  uprobe %d samples (%d at the function's address), uretprobe %d\n", count(c, up, NULL, 0),
	       at_entry, count(c, ret, NULL, 0));
	EXPECT(count(c, up, NULL, (uint32_t)getpid()) == N, "uprobe: %d", count(c, up, NULL, 0));
	EXPECT(at_entry == N, "uprobe samples at the entry: %d", at_entry);
	EXPECT(count(c, ret, NULL, (uint32_t)getpid()) == N, "uretprobe: %d", count(c, ret, NULL, 0));
	struct perfbuf_event_info info = {.sz = sizeof(info)};
	EXPECT(perfbuf_events_info(set, up, &info) == 0 && info.kind == PERFBUF_EVENT_UPROBE &&
		       info.instances == (unsigned)ncpus && info.enabled,
	       "info kind %u instances %u", info.kind, info.instances);

	/* What cannot be probed. */
	struct perfbuf_event_desc d = {
		.sz = sizeof(d), .kind = PERFBUF_EVENT_UPROBE, .name = exe, .symbol = "no_such_function"};
	EXPECT(perfbuf_events_add(set, &d) == -ENOENT, "missing symbol: %s", perfbuf_last_error());
	d.name = "/nonexistent/binary";
	EXPECT(perfbuf_events_add(set, &d) == -ENOENT, "missing binary: %s", perfbuf_last_error());
	perfbuf_free(pb);
	perfbuf_events_free(set);
	free(c);
	EXPECT(count_open_fds() == fds, "fds %d -> %d", fds, count_open_fds());
}

static struct perfbuf_event_desc uprobe_desc(const char *symbol, uint64_t offset, int retprobe)
{
	return (struct perfbuf_event_desc){
		.sz = sizeof(struct perfbuf_event_desc),
		.kind = PERFBUF_EVENT_UPROBE,
		.name = exe,
		.symbol = symbol,
		.offset = offset,
		.flags = retprobe ? PERFBUF_EVENT_F_RETPROBE : 0,
	};
}

/* Uprobes inside a function land there: at SYMBOL+4, at the file offset
 * of that instruction, and a uretprobe at the function's file offset; a
 * uretprobe inside a function and an offset past its end are -EINVAL,
 * naming the probe. */
static void test_uprobe_offsets(void)
{
	int fds = count_open_fds();
	struct perfbuf_events *set = must_new(NULL);
	uint64_t entry = (uint64_t)(uintptr_t)&perfbuf_offset_target, inside = entry + OFFSET_INSIDE;
	uint64_t file_entry = exe_file_offset((const void *)(uintptr_t)entry);
	EXPECT(file_entry != 0, "no mapping of %s holds %#llx", exe, (unsigned long long)entry);
	struct perfbuf_event_desc d = uprobe_desc("perfbuf_offset_target", OFFSET_INSIDE, 0);
	int at_symbol = perfbuf_events_add(set, &d);
	d = uprobe_desc(NULL, file_entry + OFFSET_INSIDE, 0);
	int at_file_offset = perfbuf_events_add(set, &d);
	d = uprobe_desc(NULL, file_entry, 1);
	int ret = perfbuf_events_add(set, &d);
	EXPECT(at_symbol >= 0 && at_file_offset >= 0 && ret >= 0, "add: %s", perfbuf_last_error());

	char want[PATH_MAX + 64];
	snprintf(want, sizeof(want), "uretprobe %s:perfbuf_offset_target+0x4", exe);
	d = uprobe_desc("perfbuf_offset_target", OFFSET_INSIDE, 1);
	EXPECT(perfbuf_events_add(set, &d) == -EINVAL && strstr(perfbuf_last_error(), want) &&
		       strstr(perfbuf_last_error(), "function's entry"),
	       "uretprobe inside: %s", perfbuf_last_error());
	d = uprobe_desc("perfbuf_offset_target", OFFSET_TARGET_SIZE, 0);
	EXPECT(perfbuf_events_add(set, &d) == -EINVAL && strstr(perfbuf_last_error(), "past the end"),
	       "past the end: %s", perfbuf_last_error());

	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
	perfbuf_events_enable(set, -1);
	enum { N = 50 };
	volatile uint64_t sum = 0;
	for (uint64_t i = 0; i < N; i++)
		sum += perfbuf_offset_target(i);
	perfbuf_events_disable(set, -1);
	perfbuf_consume(pb);
	EXPECT(sum == N * (N + 1) / 2, "sum %llu", (unsigned long long)sum);
	int inside_symbol = 0, inside_file = 0, returns = 0;
	for (int i = 0; i < c->n; i++) {
		const struct rec *r = &c->recs[i];
		if (r->pid != (uint32_t)getpid())
			continue;
		inside_symbol += r->ev == at_symbol && r->ip == inside;
		inside_file += r->ev == at_file_offset && r->ip == inside;
		returns += r->ev == ret && (r->ip < entry || r->ip >= entry + OFFSET_TARGET_SIZE);
	}
	printf("  at +%d: %d by symbol, %d by file offset (ip %#llx); %d returns\n", OFFSET_INSIDE, inside_symbol,
	       inside_file, (unsigned long long)inside, returns);
	EXPECT(inside_symbol == N && count(c, at_symbol, NULL, 0) == N, "symbol+4: %d of %d at %#llx", inside_symbol,
	       count(c, at_symbol, NULL, 0), (unsigned long long)inside);
	EXPECT(inside_file == N && count(c, at_file_offset, NULL, 0) == N, "file offset: %d of %d", inside_file,
	       count(c, at_file_offset, NULL, 0));
	EXPECT(returns == N && count(c, ret, NULL, 0) == N, "uretprobe at a file offset: %d of %d", returns,
	       count(c, ret, NULL, 0));
	perfbuf_free(pb);
	perfbuf_events_free(set);
	free(c);
	EXPECT(count_open_fds() == fds, "fds %d -> %d", fds, count_open_fds());
}

/* kprobes through the kprobe PMU where the kernel has one: exactly this
 * process's 50 calls; without it, the error names the missing kernel
 * option and the success path is listed as not run on this kernel. */
static void test_kprobe(void)
{
#if defined(__x86_64__)
	const char *fn = "__x64_sys_getppid";
#elif defined(__aarch64__)
	const char *fn = "__arm64_sys_getppid";
#else
	const char *fn = "sys_getppid";
#endif
	struct perfbuf_events_opts o = {.sz = sizeof(o), .pids = (int[]){getpid()}, .pid_cnt = 1};
	struct perfbuf_events *set = must_new(&o);
	struct perfbuf_event_desc d = {.sz = sizeof(d), .kind = PERFBUF_EVENT_KPROBE, .name = fn};
	int ev = perfbuf_events_add(set, &d);
	if (access("/sys/bus/event_source/devices/kprobe", F_OK) != 0) {
		printf("  no kprobe PMU: %s\n", perfbuf_last_error());
		EXPECT(ev == -EOPNOTSUPP, "add: %d", ev);
		EXPECT(strstr(perfbuf_last_error(), "CONFIG_KPROBES") != NULL, "message: %s", perfbuf_last_error());
		kernel_lacks("events_test: the kprobe counting this process's 50 calls: the kernel has no kprobe PMU");
	} else {
		EXPECT(ev >= 0, "kprobe on %s: %s", fn, perfbuf_last_error());
		struct collected *c = collected_new(set);
		struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
		perfbuf_events_enable(set, ev);
		for (int i = 0; i < 50; i++)
			syscall(SYS_getppid);
		perfbuf_consume(pb);
		printf("  kprobe on %s: %d samples for 50 calls\n", fn, count(c, ev, NULL, 0));
		EXPECT(count(c, ev, NULL, 0) == 50 && count(c, ev, NULL, (uint32_t)getpid()) == 50,
		       "kprobe samples %d, %d of this process", count(c, ev, NULL, 0),
		       count(c, ev, NULL, (uint32_t)getpid()));
		perfbuf_free(pb);
		free(c);
	}
	perfbuf_events_free(set);
}

/* Two children call the target; the set watches one of them, by pid or
 * through its cgroup. */
struct kids {
	pid_t a, b;
	int go[2];
};

static void kids_start(struct kids *k)
{
	EXPECT(pipe(k->go) == 0, "pipe");
	pid_t pids[2];
	for (int i = 0; i < 2; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			char ch;
			close(k->go[1]);
			if (read(k->go[0], &ch, 1) != 0)
				_exit(1);
			call_target(20);
			_exit(0);
		}
	}
	close(k->go[0]);
	k->a = pids[0];
	k->b = pids[1];
}

static void kids_run(struct kids *k)
{
	close(k->go[1]); /* both children read EOF and start */
	wait_children();
}

/* Opens a set with `o`, a uprobe on the target, lets both children and
 * this process call it, and checks only child a's 20 calls were seen. */
static void watch_kids(const struct perfbuf_events_opts *o, struct kids *k, const char *what)
{
	struct perfbuf_events *set = must_new(o);
	int ev = add_uprobe(set, 0);
	EXPECT(ev >= 0, "add: %s", perfbuf_last_error());
	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
	perfbuf_events_enable(set, ev);
	call_target(5);
	kids_run(k);
	perfbuf_consume(pb);
	int own = count(c, ev, NULL, (uint32_t)k->a), all = count(c, ev, NULL, 0);
	printf("  %s watched: %d samples, %d of them from pid %d\n", what, all, own, k->a);
	EXPECT(own == 20 && all == 20, "%s: %d of %d", what, own, all);
	perfbuf_free(pb);
	perfbuf_events_free(set);
	free(c);
}

static void test_pid_target(void)
{
	struct kids k;
	kids_start(&k);
	struct perfbuf_events_opts o = {.sz = sizeof(o), .pids = (int[]){k.a}, .pid_cnt = 1};
	watch_kids(&o, &k, "a pid");
}

/* The cgroup v2 mount point, from mountinfo. */
static int cgroup2_root(char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[1024];
	int found = 0;
	while (f && !found && fgets(line, sizeof(line), f)) {
		char mnt[512], *sep = strstr(line, " - cgroup2 ");
		if (sep && sscanf(line, "%*s %*s %*s %*s %511s", mnt) == 1) {
			snprintf(out, len, "%s", mnt);
			found = 1;
		}
	}
	if (f)
		fclose(f);
	return found;
}

static void test_cgroup_target(void)
{
	char root[512], dir[600], procs[640];
	if (!cgroup2_root(root, sizeof(root))) {
		skip_or_fail("no cgroup v2 mount");
		return;
	}
	snprintf(dir, sizeof(dir), "%s/perfbuf_events_test_%d", root, getpid());
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	EXPECT(mkdir(dir, 0755) == 0, "mkdir %s: %s", dir, strerror(errno));
	struct kids k;
	kids_start(&k);
	FILE *f = fopen(procs, "w");
	EXPECT(f && fprintf(f, "%d\n", k.a) > 0, "move %d into %s", k.a, dir);
	if (f)
		fclose(f);
	struct perfbuf_events_opts o = {.sz = sizeof(o), .cgroups = (const char *[]){dir}, .cgroup_cnt = 1};
	watch_kids(&o, &k, "a cgroup");
	EXPECT(rmdir(dir) == 0, "rmdir %s: %s", dir, strerror(errno));
	/* A directory that is not a cgroup. */
	o.cgroups = (const char *[]){"/tmp"};
	errno = 0;
	EXPECT(perfbuf_events_new(&o) == NULL && errno == EBADF, "/tmp as a cgroup: %s", strerror(errno));
}

/* Keeps every CPU busy: an idle virtual CPU may take no clock samples at
 * all. Each spinner, pinned to its CPU, spins until it has had `seconds`
 * of CPU time and every other spinner has too (however long a loaded
 * machine takes; 60 s against a hang). */
struct spinner {
	pthread_t thread;
	int cpu, n;
	double seconds;
	atomic_int *done;
};

static double thread_cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *spin(void *arg)
{
	struct spinner *s = arg;
	pin(s->cpu);
	double start = thread_cpu_seconds();
	time_t deadline = time(NULL) + 60;
	bool mine = false;
	volatile unsigned long x = 0;
	while ((!mine || atomic_load(s->done) < s->n) && time(NULL) < deadline) {
		for (int i = 0; i < 100000; i++)
			x++;
		if (!mine && thread_cpu_seconds() - start >= s->seconds) {
			mine = true;
			atomic_fetch_add(s->done, 1);
		}
	}
	return NULL;
}

static void spin_all(double seconds)
{
	atomic_int done = 0;
	struct spinner s[64];
	int n = ncpus < 64 ? ncpus : 64;
	for (int i = 0; i < n; i++) {
		s[i] = (struct spinner){.cpu = i, .n = n, .seconds = seconds, .done = &done};
		pthread_create(&s[i].thread, NULL, spin, &s[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(s[i].thread, NULL);
}

/* Each CPU's time running tasks so far (/proc/stat: user, nice, system,
 * irq and softirq; not idle, iowait or steal, when the vCPU did not run
 * anything or did not run at all), in seconds. */
static void busy_seconds(double *busy, int n)
{
	FILE *f = fopen("/proc/stat", "r");
	char line[512];
	double hz = (double)sysconf(_SC_CLK_TCK);
	while (f && fgets(line, sizeof(line), f)) {
		int cpu;
		unsigned long long user, nice, sys, idle, iowait, irq, softirq;
		if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu", &cpu, &user, &nice, &sys, &idle, &iowait,
			   &irq, &softirq) == 8 &&
		    cpu >= 0 && cpu < n)
			busy[cpu] = (double)(user + nice + sys + irq + softirq) / hz;
	}
	if (f)
		fclose(f);
}

/* The profiler: cycles or the software fallback at 99 Hz, a BPF program
 * counting samples per CPU, attached before enabling. */
static void test_profiler(void)
{
	int fds = count_open_fds();
	struct bpf_object *obj = bpf_object__open_file(profile_obj, NULL);
	EXPECT(obj && bpf_object__load(obj) == 0, "load %s", profile_obj);
	if (!obj)
		return;
	int prog = bpf_program__fd(bpf_object__find_program_by_name(obj, "on_sample"));
	int counts = bpf_object__find_map_fd_by_name(obj, "counts");
	struct perfbuf_events *set = must_new(NULL);
	struct perfbuf_event_desc d = {
		.sz = sizeof(d),
		.kind = PERFBUF_EVENT_HARDWARE,
		.config = PERF_COUNT_HW_CPU_CYCLES,
		.flags = PERFBUF_EVENT_F_FALLBACK | PERFBUF_EVENT_F_FREQ,
		.fallback_config = PERF_COUNT_SW_CPU_CLOCK,
		.period = 99,
	};
	int ev = perfbuf_events_add(set, &d);
	EXPECT(ev >= 0, "add: %s", perfbuf_last_error());
	char name[8];
	EXPECT(perfbuf_events_field_name(set, ev, 0, name, sizeof(name)) == -ENOENT, "fields of a clock event");
	struct perfbuf_event_info info = {.sz = sizeof(info)};
	perfbuf_events_info(set, ev, &info);
	int has_pmu = access("/sys/bus/event_source/devices/cpu", F_OK) == 0 ||
		      access("/sys/bus/event_source/devices/armv8_pmuv3_0", F_OK) == 0;
	printf("  opened %s (type %u config %llu), fallback from hardware: %s\n",
	       info.kind == PERFBUF_EVENT_HARDWARE ? "hardware cycles" : "the software CPU clock", info.attr_type,
	       (unsigned long long)info.config, info.fallback_errno ? strerror(info.fallback_errno) : "none");
	if (has_pmu)
		EXPECT(info.kind == PERFBUF_EVENT_HARDWARE && info.fallback_errno == 0, "a PMU: hardware");
	else
		EXPECT(info.kind == PERFBUF_EVENT_SOFTWARE && info.attr_type == PERF_TYPE_SOFTWARE &&
			       info.config == PERF_COUNT_SW_CPU_CLOCK && info.fallback_errno != 0,
		       "no PMU: the software fallback, with its reason (kind %u errno %d)", info.kind,
		       info.fallback_errno);
	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);

	/* Deferred enable: opened disabled, nothing is sampled before. */
	spin_all(0.2);
	perfbuf_consume(pb);
	uint64_t before = 0;
	for (int cpu = 0; cpu < ncpus; cpu++) {
		__u32 key = (__u32)cpu;
		__u64 v = 0;
		bpf_map_lookup_elem(counts, &key, &v);
		before += v;
	}
	struct perfbuf_counts times = {.sz = sizeof(times)};
	struct perfbuf_count value;
	EXPECT(perfbuf_events_read(set, ev, -1, &times, &value, 1) == 1 && value.value == 0 &&
		       times.time_enabled == 0,
	       "counted before enable: %llu", (unsigned long long)value.value);
	EXPECT(c->n == 0 && before == 0, "before attach and enable: %d ring samples, %llu program runs", c->n,
	       (unsigned long long)before);

	EXPECT(perfbuf_events_attach_bpf(set, ev, prog) == 0, "attach: %s", perfbuf_last_error());
	EXPECT(perfbuf_events_attach_bpf(set, ev, prog) == -EEXIST, "attach twice");
	EXPECT(perfbuf_events_enable(set, ev) == 0, "enable: %s", perfbuf_last_error());
	/* 99 Hz of the CPU clock, give or take half, for the time each CPU ran
	 * tasks (the spinners keep them busy; a vCPU the host held back runs
	 * nothing and ticks not), not for the wall time. */
	double busy0[64] = {0}, busy1[64] = {0};
	busy_seconds(busy0, 64);
	spin_all(1.0);
	perfbuf_events_disable(set, ev);
	busy_seconds(busy1, 64);
	perfbuf_consume(pb);
	for (int cpu = 0; cpu < ncpus && cpu < 64; cpu++) {
		__u32 key = (__u32)cpu;
		__u64 runs = 0;
		bpf_map_lookup_elem(counts, &key, &runs);
		int ring = 0;
		for (int i = 0; i < c->n; i++)
			ring += c->recs[i].cpu == cpu;
		double busy = busy1[cpu] - busy0[cpu];
		printf("  cpu %d: program ran %llu times, %d samples in the ring (%.0f expected at 99 Hz for %.2f s "
		       "busy)\n",
		       cpu, (unsigned long long)runs, ring, 99 * busy, busy);
		EXPECT(runs >= 99 * busy * 0.5 && runs <= 99 * busy * 1.5, "cpu %d: %llu samples in %.2f s busy", cpu,
		       (unsigned long long)runs, busy);
		EXPECT((uint64_t)ring == runs, "cpu %d: ring %d, program %llu", cpu, ring, (unsigned long long)runs);
	}
	/* A program of the wrong type. */
	int tp_prog = bpf_trivial_prog(BPF_PROG_TYPE_TRACEPOINT);
	int ev2 = perfbuf_events_add(set, &d);
	EXPECT(perfbuf_events_attach_bpf(set, ev2, tp_prog) == -EINVAL &&
		       strstr(perfbuf_last_error(), "BPF_PROG_TYPE_PERF_EVENT"),
	       "wrong program type: %s", perfbuf_last_error());
	close(tp_prog);
	perfbuf_free(pb);
	perfbuf_events_free(set);
	bpf_object__close(obj);
	free(c);
	EXPECT(count_open_fds() == fds, "fds %d -> %d", fds, count_open_fds());
}

/* A 1-page ring overflows: samples plus lost add up to the calls, and
 * the ring's figures agree. With PERF_FORMAT_LOST (Linux 6.0) the figures
 * are exact before the kernel writes its LOST record, the final drain
 * reports the loss, and the LOST record written later does not again. */
static void test_lost(void)
{
	pin(0);
	struct perfbuf_events_opts o = {.sz = sizeof(o), .cpus = (int[]){0}, .cpu_cnt = 1, .page_cnt = 1};
	struct perfbuf_events *set = must_new(&o);
	int ev = add_uprobe(set, 0);
	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
	perfbuf_events_enable(set, ev);
	enum { N = 5000 };
	call_target(N);
	perfbuf_consume(pb);
	struct perfbuf_ring_stats st = {.sz = sizeof(st)};
	perfbuf_ring_stats(pb, 0, &st);
	unsigned long long unwritten = (unsigned long long)(N - count(c, ev, NULL, 0));
	uint64_t reported = 0;
	printf("  before the kernel's LOST record: %d samples, stats lost %llu (%llu unreported)\n",
	       count(c, ev, NULL, 0), (unsigned long long)st.lost, (unsigned long long)st.lost_unreported);
	EXPECT(c->lost == 0, "no LOST record written yet: %llu", (unsigned long long)c->lost);
	if (!kernel_has_format_lost())
		unwritten = 0; /* before 6.0: known once the LOST record comes */
	EXPECT(st.lost == unwritten && st.lost_unreported == unwritten, "exact lost %llu/%llu, want %llu",
	       (unsigned long long)st.lost, (unsigned long long)st.lost_unreported, unwritten);
	EXPECT(perfbuf_drain_final(pb, &reported) == 0 && reported == unwritten && c->lost == unwritten,
	       "final drain reported %llu (callback %llu)", (unsigned long long)reported,
	       (unsigned long long)c->lost);
	/* The kernel reports the loss with its next write, once there is room. */
	call_target(1);
	perfbuf_consume(pb);
	perfbuf_ring_stats(pb, 0, &st);
	printf("  %d samples + %llu lost = %d calls; ring stats lost %llu\n", count(c, ev, NULL, 0),
	       (unsigned long long)c->lost, N + 1, (unsigned long long)st.lost);
	EXPECT(c->lost > 0 && count(c, ev, NULL, 0) + (int)c->lost == N + 1, "samples %d lost %llu",
	       count(c, ev, NULL, 0), (unsigned long long)c->lost);
	EXPECT(st.lost == c->lost, "stats lost %llu", (unsigned long long)st.lost);
	EXPECT(c->out_of_order == 0, "%d out of order in one ring", c->out_of_order);
	perfbuf_free(pb);
	perfbuf_events_free(set);
	free(c);
	cpu_set_t all;
	CPU_ZERO(&all);
	for (int i = 0; i < ncpus; i++)
		CPU_SET(i, &all);
	sched_setaffinity(0, sizeof(all), &all);
}

/* A tracepoint only this test traces, hit by getpgid calls. */
#define QUIET_TRACEPOINT "syscalls:sys_enter_getpgid"

/* A classic tracepoint program returning 0, named `name`: its fd. */
static int load_drop_prog(const char *name)
{
	struct bpf_insn insns[] = {
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
		{.code = BPF_JMP | BPF_EXIT},
	};
	return bpf_prog_load(BPF_PROG_TYPE_TRACEPOINT, name, "GPL", insns, 2, NULL);
}

/* Attaches `prog` to QUIET_TRACEPOINT through a perf event of its own, as
 * another tool would: the event's fd (closing it detaches), or -1. */
static int attach_elsewhere(int prog)
{
	char text[32] = "";
	FILE *f = fopen("/sys/kernel/tracing/events/syscalls/sys_enter_getpgid/id", "r");
	if (!f)
		return -1;
	if (!fgets(text, sizeof(text), f))
		text[0] = 0;
	fclose(f);
	struct perf_event_attr attr = {.type = PERF_TYPE_TRACEPOINT, .size = sizeof(attr),
				       .config = strtoull(text, NULL, 10), .sample_period = 1};
	int fd = (int)syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd >= 0 && ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int warnings_naming_drop;

static void count_warnings(int level, const char *msg, void *ctx)
{
	(void)ctx;
	warnings_naming_drop += level == LIBBPF_WARN && strstr(msg, "\"perfbuf_c_drop\"") != NULL;
}

/* getpgid `n` times: how many samples of this process then reached `c`. */
static int getpgid_samples(struct perf_buffer *pb, struct collected *c, int ev, int n)
{
	int before = count(c, ev, NULL, (uint32_t)getpid());
	for (int i = 0; i < n; i++)
		syscall(SYS_getpgid, 0);
	perfbuf_consume(pb);
	return count(c, ev, NULL, (uint32_t)getpid()) - before;
}

/* A BPF program another tool attached to the tracepoint, returning 0,
 * makes the kernel drop every hit for every perf event on it: the event's
 * info counts and names it, and it is warned about once. */
static void test_foreign_bpf_program(void)
{
	int fds = count_open_fds();
	struct perfbuf_events_opts o = {.sz = sizeof(o), .pids = (int[]){getpid()}, .pid_cnt = 1};
	struct perfbuf_events *set = must_new(&o);
	int ev = add_tracepoint(set, QUIET_TRACEPOINT, NULL);
	EXPECT(ev >= 0, "add: %s", perfbuf_last_error());
	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
	perfbuf_events_enable(set, ev);
	perfbuf_print_fn old = perfbuf_set_print(count_warnings, NULL);
	struct perfbuf_event_info info = {.sz = sizeof(info)};
	struct perfbuf_bpf_prog progs[4];
	EXPECT(perfbuf_events_info(set, ev, &info) == 0 && info.other_bpf_progs == 0 && info.other_bpf_prog_id == 0,
	       "nothing attached: %u programs", info.other_bpf_progs);
	EXPECT(perfbuf_events_bpf_progs(set, ev, progs, 4) == 0, "listed with nothing attached");
	int before = getpgid_samples(pb, c, ev, 5);

	int prog = load_drop_prog("perfbuf_c_drop");
	int other = prog >= 0 ? attach_elsewhere(prog) : -1;
	EXPECT(prog >= 0 && other >= 0, "load and attach: %s", strerror(errno));
	struct bpf_prog_info pinfo = {0};
	__u32 len = sizeof(pinfo);
	EXPECT(bpf_obj_get_info_by_fd(prog, &pinfo, &len) == 0, "prog info");
	EXPECT(perfbuf_events_info(set, ev, &info) == 0 && info.other_bpf_progs == 1 &&
		       info.other_bpf_prog_id == pinfo.id,
	       "attached: %u programs, first %u (want %u)", info.other_bpf_progs, info.other_bpf_prog_id, pinfo.id);
	int n = perfbuf_events_bpf_progs(set, ev, progs, 4);
	EXPECT(n == 1 && progs[0].id == pinfo.id && !progs[0].ours && strcmp(progs[0].name, "perfbuf_c_drop") == 0,
	       "listed: %d, %u \"%s\"", n, progs[0].id, n > 0 ? progs[0].name : "");
	int during = getpgid_samples(pb, c, ev, 5);
	perfbuf_events_info(set, ev, &info);
	perfbuf_events_disable(set, ev);
	perfbuf_events_enable(set, ev);
	if (other >= 0)
		close(other);
	if (prog >= 0)
		close(prog);
	EXPECT(perfbuf_events_info(set, ev, &info) == 0 && info.other_bpf_progs == 0, "detached: %u programs",
	       info.other_bpf_progs);
	int after = getpgid_samples(pb, c, ev, 5);
	perfbuf_set_print(old, NULL);
	printf("  %s: %d samples, %d with the program attached (id %u), %d after; %d warning\n", QUIET_TRACEPOINT,
	       before, during, pinfo.id, after, warnings_naming_drop);
	EXPECT(before == 5 && during == 0 && after == 5, "samples %d %d %d", before, during, after);
	EXPECT(warnings_naming_drop == 1, "%d warnings naming the program", warnings_naming_drop);
	perfbuf_free(pb);
	perfbuf_events_free(set);
	free(c);
	EXPECT(count_open_fds() == fds, "fds %d -> %d", fds, count_open_fds());
}

/* A counter group read together, with times. */
static void test_group_read(void)
{
	struct perfbuf_events_opts o = {.sz = sizeof(o), .pids = (int[]){getpid()}, .pid_cnt = 1,
					.flags = PERFBUF_EVENTS_NO_RINGS};
	struct perfbuf_events *set = must_new(&o);
	struct perfbuf_event_desc lead = {.sz = sizeof(lead), .kind = PERFBUF_EVENT_SOFTWARE,
					  .config = PERF_COUNT_SW_TASK_CLOCK, .flags = PERFBUF_EVENT_F_GROUP_LEADER};
	int l = perfbuf_events_add(set, &lead);
	struct perfbuf_event_desc member = {.sz = sizeof(member), .kind = PERFBUF_EVENT_SOFTWARE,
					    .config = PERF_COUNT_SW_PAGE_FAULTS, .flags = PERFBUF_EVENT_F_MEMBER,
					    .leader = l};
	int m = perfbuf_events_add(set, &member);
	EXPECT(l >= 0 && m >= 0, "add: %s", perfbuf_last_error());
	perfbuf_events_enable(set, -1);
	char *mem = malloc(64 << 20);
	for (size_t i = 0; i < (64 << 20); i += 4096)
		mem[i] = 1;
	free(mem);
	perfbuf_events_disable(set, -1);
	struct perfbuf_counts times = {.sz = sizeof(times)};
	struct perfbuf_count v[4];
	int n = perfbuf_events_read(set, l, -1, &times, v, 4);
	printf("  group: %d counts: task-clock %llu ns, page faults %llu; enabled %llu running %llu\n", n,
	       (unsigned long long)v[0].value, (unsigned long long)v[1].value,
	       (unsigned long long)times.time_enabled, (unsigned long long)times.time_running);
	EXPECT(n == 2 && v[0].event == l && v[1].event == m, "group read: %d", n);
	EXPECT(v[0].value > 0 && v[1].value >= 16, "counts %llu %llu", (unsigned long long)v[0].value,
	       (unsigned long long)v[1].value);
	EXPECT(times.time_enabled > 0 && times.time_running > 0, "times");
	EXPECT(perfbuf_events_remove(set, l) == -EBUSY, "remove a leader with members");
	EXPECT(perfbuf_events_remove(set, m) == 0 && perfbuf_events_remove(set, l) == 0, "remove");
	perfbuf_events_free(set);
}

/* An event added while the reader runs writes into the same rings;
 * removed, its samples stop. */
static void test_add_remove_while_reading(void)
{
	struct perfbuf_events *set = must_new(NULL);
	int exec_ev = add_tracepoint(set, "sched:sched_process_exec", NULL);
	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
	perfbuf_events_enable(set, -1);
	int up = add_uprobe(set, 0);
	EXPECT(up >= 0 && perfbuf_events_enable(set, up) == 0, "add while reading: %s", perfbuf_last_error());
	call_target(10);
	perfbuf_consume(pb);
	EXPECT(count(c, up, NULL, 0) == 10, "added later: %d samples", count(c, up, NULL, 0));
	call_target(7); /* in the rings when the event goes */
	EXPECT(perfbuf_events_remove(set, up) == 0, "remove");
	call_target(10);
	perfbuf_consume(pb);
	printf("  added while reading: %d samples; after removal %d unattributed\n", count(c, up, NULL, 0),
	       c->unattributed);
	EXPECT(count(c, up, NULL, 0) == 10 && c->unattributed == 7, "after removal: %d, %d unattributed",
	       count(c, up, NULL, 0), c->unattributed);
	(void)exec_ev;
	perfbuf_free(pb);
	perfbuf_events_free(set);
	free(c);
}

static void test_errors(void)
{
	EXPECT(perfbuf_events_add(NULL, NULL) == -EINVAL, "NULL set");
	struct perfbuf_events *set = must_new(NULL);
	EXPECT(perfbuf_events_add(set, NULL) == -EINVAL, "NULL desc");
	struct perfbuf_event_desc d = {.sz = sizeof(d), .kind = 99};
	EXPECT(perfbuf_events_add(set, &d) == -EINVAL, "bad kind");
	EXPECT(add_tracepoint(set, "nope:no_such_tracepoint", NULL) == -ENOENT &&
		       strstr(perfbuf_last_error(), "tracepoint"),
	       "missing tracepoint: %s", perfbuf_last_error());
	EXPECT(add_tracepoint(set, "../../etc", NULL) == -EINVAL, "bad name");
	EXPECT(perfbuf_events_enable(set, 42) == -ENOENT, "no such event");
	struct collected *c = collected_new(set);
	struct perf_buffer *pb = perfbuf_events_reader(set, collect, c);
	EXPECT(pb != NULL, "reader");
	errno = 0;
	EXPECT(perfbuf_events_reader(set, collect, c) == NULL && errno == EBUSY, "second reader: %d", errno);
	perfbuf_free(pb);
	perfbuf_events_free(set);
	struct perfbuf_events_opts o = {.sz = sizeof(o), .flags = PERFBUF_EVENTS_NO_RINGS};
	set = must_new(&o);
	errno = 0;
	EXPECT(perfbuf_events_reader(set, collect, c) == NULL && errno == EINVAL, "no rings: %d", errno);
	perfbuf_events_free(set);
	o = (struct perfbuf_events_opts){.sz = sizeof(o), .page_cnt = 3};
	errno = 0;
	EXPECT(perfbuf_events_new(&o) == NULL && errno == EINVAL, "3 pages");
	o = (struct perfbuf_events_opts){.sz = sizeof(o), .cpus = (int[]){4096}, .cpu_cnt = 1};
	errno = 0;
	EXPECT(perfbuf_events_new(&o) == NULL && errno == ENODEV, "no such CPU: %s", strerror(errno));
	o = (struct perfbuf_events_opts){.sz = sizeof(o), .pids = (int[]){0x3fffffff}, .pid_cnt = 1};
	errno = 0;
	EXPECT(perfbuf_events_new(&o) == NULL && errno == ESRCH, "a pid that does not exist: %s", strerror(errno));
	perfbuf_events_free(NULL);
	free(c);
}

int main(int argc, char **argv)
{
	profile_obj = argc > 1 ? argv[1] : "build/profile.bpf.o";
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return perror("readlink"), 1;
	exe[n] = 0;
	ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	int err = ensure_tracefs();
	if (err) {
		fprintf(stderr, "events_test: no tracefs: %s\n", strerror(-err));
		return ci_mode() ? 1 : 77;
	}
	snprintf(mark_a, sizeof(mark_a), "/tmp/perfbuf_evt_%d_a", getpid());
	snprintf(mark_b, sizeof(mark_b), "/tmp/perfbuf_evt_%d_b", getpid());
	if (symlink("/bin/true", mark_a) || symlink("/bin/true", mark_b))
		return perror("symlink"), 1;
	static const struct test_case tests[] = {
		{"tracepoint_exec_ordered", test_tracepoint_exec_ordered},
		{"filter_enable_disable", test_filter_enable_disable},
		{"uprobes", test_uprobes},
		{"uprobe_offsets", test_uprobe_offsets},
		{"kprobe", test_kprobe},
		{"pid_target", test_pid_target},
		{"cgroup_target", test_cgroup_target},
		{"profiler", test_profiler},
		{"lost", test_lost},
		{"group_read", test_group_read},
		{"foreign_bpf_program", test_foreign_bpf_program},
		{"add_remove_while_reading", test_add_remove_while_reading},
		{"errors", test_errors},
	};
	int failed = run_tests("events_test", tests, (int)(sizeof(tests) / sizeof(tests[0])));
	unlink(mark_a);
	unlink(mark_b);
	return failed ? 1 : 0;
}
