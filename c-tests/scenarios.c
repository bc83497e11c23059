/* The scenarios of the differential suite. Each drives one behaviour of the
 * perf buffer API with events from the real BPF producer, writes what the
 * caller can observe to the transcript, and checks absolute expectations. */
#define _GNU_SOURCE
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_CPUS 8
#define MAX_EXPECT 4096

/* What the producer wrote to each CPU, in order, for byte-exact checks. */
struct expect {
	uint16_t n;
	uint8_t seed;
};

struct rec_log {
	struct harness *h;
	struct expect exp[MAX_CPUS][MAX_EXPECT];
	size_t exp_len[MAX_CPUS], got[MAX_CPUS];
	uint64_t lost[MAX_CPUS];
	struct transcript per_cpu[MAX_CPUS]; /* records per CPU, flushed in CPU order */
	bool quiet;			     /* log counts, not every record */
	bool check_bytes;
	int raw_ret;	      /* what the raw event callback returns ... */
	int raw_ret_after;    /* ... from this record on (counted from 1) */
	int raw_calls;
	size_t sample_offset; /* raw mode: where the u32 size sits */
};

static struct rec_log g_log;

static uint32_t fnv1a(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}

static struct rec_log *log_reset(struct harness *h)
{
	for (int c = 0; c < MAX_CPUS; c++)
		tx_free(&g_log.per_cpu[c]);
	memset(&g_log, 0, sizeof(g_log));
	g_log.h = h;
	g_log.check_bytes = true;
	g_log.raw_ret = LIBBPF_PERF_EVENT_CONT;
	g_log.sample_offset = 8;
	return &g_log;
}

/* Moves the per-CPU record lines into the transcript (cross-CPU delivery
 * order is not part of the contract; per-CPU order is). */
static void log_flush(struct rec_log *log, const char *label)
{
	struct harness *h = log->h;
	tx_printf(&h->tx, "%s:\n", label);
	for (int c = 0; c < MAX_CPUS; c++) {
		if (log->per_cpu[c].len)
			tx_printf(&h->tx, "%s", log->per_cpu[c].text);
		tx_reset(&log->per_cpu[c]);
		if (log->quiet && (log->got[c] || log->lost[c]))
			tx_printf(&h->tx, "  cpu%d: %zu samples, %llu lost\n", c, log->got[c],
				  (unsigned long long)log->lost[c]);
	}
}

static void check_sample(struct rec_log *log, int cpu, const uint8_t *data, uint32_t size)
{
	struct harness *h = log->h;
	CHECK(h, cpu >= 0 && cpu < MAX_CPUS, "cpu %d", cpu);
	if (cpu < 0 || cpu >= MAX_CPUS)
		return;
	size_t i = log->got[cpu]++;
	if (!log->quiet)
		tx_printf(&log->per_cpu[cpu], "  sample cpu=%d size=%u fnv=%08x align8=%u\n", cpu, size,
			  fnv1a(data, size), (unsigned)((uintptr_t)data % 8));
	if (!log->check_bytes)
		return;
	CHECK(h, i < log->exp_len[cpu], "cpu %d: unexpected sample #%zu", cpu, i);
	if (i >= log->exp_len[cpu])
		return;
	struct expect e = log->exp[cpu][i];
	uint32_t want = ((e.n + 4 + 7) & ~7u) - 4; /* the kernel pads raw data */
	CHECK(h, size == want, "cpu %d sample #%zu: size %u, want %u", cpu, i, size, want);
	uint8_t buf[4096];
	producer_expected(e.n, e.seed, buf);
	CHECK(h, size >= e.n && memcmp(buf, data, e.n) == 0, "cpu %d sample #%zu (n=%u): bytes differ", cpu, i,
	      e.n);
}

static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	check_sample(ctx, cpu, data, size);
}

static void on_lost(void *ctx, int cpu, __u64 cnt)
{
	struct rec_log *log = ctx;
	if (cpu >= 0 && cpu < MAX_CPUS) {
		log->lost[cpu] += cnt;
		if (!log->quiet)
			tx_printf(&log->per_cpu[cpu], "  lost cpu=%d cnt=%llu\n", cpu, (unsigned long long)cnt);
	}
}

/* Raw mode: records are PERF_RECORD_SAMPLE with sample_type RAW|CPU, i.e.
 * header, u32 cpu, u32 reserved, u32 size, data. */
static enum bpf_perf_event_ret on_event(void *ctx, int cpu, struct perf_event_header *ev)
{
	struct rec_log *log = ctx;
	log->raw_calls++;
	if (cpu >= 0 && cpu < MAX_CPUS)
		tx_printf(&log->per_cpu[cpu], "  event cpu=%d type=%u misc=%u size=%u\n", cpu, ev->type, ev->misc,
			  ev->size);
	if (ev->type == PERF_RECORD_SAMPLE) {
		const uint8_t *rec = (const uint8_t *)ev;
		uint32_t rec_cpu, size;
		memcpy(&rec_cpu, rec + 8, 4);
		memcpy(&size, rec + 16, 4);
		CHECK(log->h, (int)rec_cpu == cpu, "PERF_SAMPLE_CPU says %u, callback says %d", rec_cpu, cpu);
		CHECK(log->h, 20 + size <= ev->size, "raw size %u beyond record %u", size, ev->size);
		check_sample(log, cpu, rec + 20, size);
	} else if (ev->type == PERF_RECORD_LOST) {
		uint64_t lost;
		memcpy(&lost, (const uint8_t *)ev + 16, 8);
		on_lost(ctx, cpu, lost);
	}
	return log->raw_calls >= log->raw_ret_after ? log->raw_ret : LIBBPF_PERF_EVENT_CONT;
}

/* One deterministic sample of n bytes on cpu; remembered when it landed. */
#define WAIT_MS 5000

/* The program runs from this thread pinned to `cpu`, interrupts on: the
 * kernel's wake-up (an irq_work, raised by self-IPI) has run on that CPU
 * when this returns, so a poll after it finds every ring it signalled. A
 * poll that expects a ring waits up to WAIT_MS for it all the same (only
 * a hang reaches that); one that expects none waits briefly. */
static int emit(struct harness *h, struct rec_log *log, int cpu, unsigned n, uint8_t seed)
{
	int ret = 0;
	int err = producer_emit_det(&h->prod, cpu, n, seed, 1, &ret);
	CHECK(h, err == 0, "producer_emit_det: %d", err);
	if (ret != 0)
		tx_printf(&h->tx, "  emit cpu=%d n=%u -> helper ret %d\n", cpu, n, ret);
	if (ret == 0 && log && log->exp_len[cpu] < MAX_EXPECT)
		log->exp[cpu][log->exp_len[cpu]++] = (struct expect){.n = (uint16_t)n, .seed = seed};
	return ret;
}

/* The lowest free fd, so fd numbers can be logged relative to it. */
static int fd_base(void)
{
	int fd = dup(0);
	close(fd);
	return fd;
}

#define SHOW(h, label, expr)                                                                  \
	do {                                                                                  \
		errno = 0;                                                                    \
		long _r = (long)(expr);                                                       \
		int _e = errno;                                                               \
		tx_printf(&(h)->tx, "%s = %ld errno=%d\n", label, _r, _r < 0 ? _e : 0);       \
	} while (0)

static struct perf_buffer *show_new(struct harness *h, const char *label, struct perf_buffer *pb)
{
	int e = errno;
	tx_printf(&h->tx, "%s: %s errno=%d\n", label, pb ? "ok" : "NULL", pb ? 0 : e);
	return pb;
}

/* ---- scenarios ---- */

/* Constructor validation: every error and its errno, and nothing leaked. */
static void s_construct_errors(struct harness *h)
{
	const struct pb_api *api = h->api;
	int map = h->prod.map_fd, fds = count_open_fds();
	struct perf_buffer *pb;
	union {
		struct perf_buffer_opts o;
		struct perf_buffer_raw_opts r;
		uint8_t bytes[64];
	} u;

#define TRY(label, call)                          \
	do {                                      \
		errno = 0;                        \
		pb = show_new(h, label, (call));  \
		if (pb)                           \
			api->free_(pb);           \
	} while (0)

	TRY("page_cnt 0", api->new_(map, 0, on_sample, on_lost, &g_log, NULL));
	TRY("page_cnt 3", api->new_(map, 3, on_sample, on_lost, &g_log, NULL));
	TRY("page_cnt 6", api->new_(map, 6, on_sample, on_lost, &g_log, NULL));
	memset(&u, 0, sizeof(u));
	u.o.sz = 4;
	TRY("opts sz 4", api->new_(map, 1, on_sample, on_lost, &g_log, &u.o));
	u.o.sz = 8;
	TRY("opts sz 8", api->new_(map, 1, on_sample, on_lost, &g_log, &u.o));
	u.o.sz = 16;
	TRY("opts sz 16 zero tail", api->new_(map, 1, on_sample, on_lost, &g_log, &u.o));
	u.bytes[13] = 1;
	TRY("opts sz 16 byte 13 set", api->new_(map, 1, on_sample, on_lost, &g_log, &u.o));
	memset(&u, 0, sizeof(u));
	u.o.sz = 48;
	u.bytes[40] = 7;
	TRY("opts sz 48 byte 40 set", api->new_(map, 1, on_sample, on_lost, &g_log, &u.o));
	TRY("map fd -1", api->new_(-1, 1, on_sample, on_lost, &g_log, NULL));
	TRY("map fd closed", api->new_(1000, 1, on_sample, on_lost, &g_log, NULL));

	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.map_type = BPF_MAP_TYPE_ARRAY;
	attr.key_size = 4;
	attr.value_size = 4;
	attr.max_entries = 4;
	int array = (int)syscall(__NR_bpf, BPF_MAP_CREATE, &attr, sizeof(attr));
	CHECK(h, array >= 0, "array map: %s", strerror(errno));
	TRY("array map", api->new_(array, 1, on_sample, on_lost, &g_log, NULL));
	close(array);

	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	TRY("not a bpf fd", api->new_(devnull, 1, on_sample, on_lost, &g_log, NULL));
	close(devnull);

	struct perf_event_attr pattr = {.type = PERF_TYPE_SOFTWARE, .size = sizeof(pattr),
					.config = PERF_COUNT_SW_BPF_OUTPUT, .sample_type = PERF_SAMPLE_RAW,
					.sample_period = 1, .wakeup_events = 1};
	TRY("raw attr NULL", api->new_raw(map, 1, NULL, on_event, &g_log, NULL));
	TRY("raw page_cnt 0", api->new_raw(map, 0, &pattr, on_event, &g_log, NULL));
	memset(&u, 0, sizeof(u));
	u.r.sz = 4;
	TRY("raw opts sz 4", api->new_raw(map, 1, &pattr, on_event, &g_log, &u.r));
	u.r.sz = 40;
	u.bytes[35] = 1;
	TRY("raw opts sz 40 byte 35 set", api->new_raw(map, 1, &pattr, on_event, &g_log, &u.r));
	int bad_cpu[1] = {4096}, key[1] = {0};
	memset(&u, 0, sizeof(u));
	u.r.sz = sizeof(u.r);
	u.r.cpu_cnt = 1;
	u.r.cpus = bad_cpu;
	u.r.map_keys = key;
	TRY("raw cpu 4096", api->new_raw(map, 1, &pattr, on_event, &g_log, &u.r));
	pattr.type = 1000; /* no such PMU */
	TRY("raw bad attr type", api->new_raw(map, 1, &pattr, on_event, &g_log, NULL));
#undef TRY
	CHECK(h, count_open_fds() == fds, "fds leaked: %d -> %d", fds, count_open_fds());
}

static bool is_cloexec(int fd)
{
	int flags = fcntl(fd, F_GETFD);
	return flags >= 0 && (flags & FD_CLOEXEC);
}

/* Every accessor on a healthy buffer, in and out of range. */
static void s_accessors(struct harness *h)
{
	const struct pb_api *api = h->api;
	struct rec_log *log = log_reset(h);
	int base = fd_base(), fds = count_open_fds();
	struct perf_buffer_opts opts = {.sz = sizeof(size_t)};
	struct perf_buffer *pb = show_new(h, "new page_cnt 2", api->new_(h->prod.map_fd, 2, on_sample, on_lost, log, &opts));
	if (!pb)
		return;
	size_t cnt = api->buffer_cnt(pb);
	tx_printf(&h->tx, "buffer_cnt = %zu\n", cnt);
	CHECK(h, cnt >= 1, "buffer_cnt %zu", cnt);
	int epfd = api->epoll_fd(pb);
	tx_printf(&h->tx, "epoll_fd = base+%d\n", epfd - base);
	CHECK(h, is_cloexec(epfd), "epoll fd not CLOEXEC");
	for (size_t i = 0; i < cnt; i++) {
		int fd = api->buffer_fd(pb, i);
		tx_printf(&h->tx, "buffer_fd(%zu) = base+%d\n", i, fd - base);
		CHECK(h, fd >= 0 && is_cloexec(fd), "buffer fd %d", fd);
		void *region = NULL;
		size_t size = 0;
		int r = api->buffer(pb, (int)i, &region, &size);
		struct perf_event_mmap_page *mp = region;
		tx_printf(&h->tx, "buffer(%zu) = %d size=%zu page_aligned=%d data_offset=%llu data_size=%llu head=%llu tail=%llu\n",
			  i, r, size, (int)((uintptr_t)region % 4096 == 0), (unsigned long long)mp->data_offset,
			  (unsigned long long)mp->data_size, (unsigned long long)mp->data_head,
			  (unsigned long long)mp->data_tail);
		CHECK(h, size == 2 * 4096 && mp->data_size == size, "buffer size %zu", size);
	}
	SHOW(h, "buffer_fd(cnt)", api->buffer_fd(pb, cnt));
	void *untouched = (void *)0x1;
	size_t untouched_size = 7;
	SHOW(h, "buffer(cnt)", api->buffer(pb, (int)cnt, &untouched, &untouched_size));
	CHECK(h, untouched == (void *)0x1 && untouched_size == 7, "outputs touched on error");
	SHOW(h, "consume_buffer(cnt)", api->consume_buffer(pb, cnt));
	SHOW(h, "consume_buffer(SIZE_MAX)", api->consume_buffer(pb, (size_t)-1));
	errno = 0;
	int r = api->consume_buffer(pb, 0);
	tx_printf(&h->tx, "consume_buffer(0) empty = %d errno after=%d\n", r, errno);
	errno = 0;
	r = api->consume(pb);
	tx_printf(&h->tx, "consume empty = %d errno after=%d\n", r, errno);
	errno = 0;
	r = api->poll(pb, 0);
	tx_printf(&h->tx, "poll(0) empty = %d errno after=%d\n", r, errno);
	api->free_(pb);
	CHECK(h, count_open_fds() == fds, "fds leaked: %d -> %d", fds, count_open_fds());
}

static const unsigned sizes[] = {8, 9, 15, 16, 18, 30, 64, 100, 255, 256, 1000, 2040};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Records of many sizes on both CPUs: CPU, size and bytes, in order. */
static void s_records(struct harness *h)
{
	const struct pb_api *api = h->api;
	struct rec_log *log = log_reset(h);
	struct perf_buffer *pb = show_new(h, "new page_cnt 8", api->new_(h->prod.map_fd, 8, on_sample, on_lost, log, NULL));
	if (!pb)
		return;
	for (int cpu = 0; cpu < 2; cpu++)
		for (size_t i = 0; i < NSIZES; i++)
			emit(h, log, cpu, sizes[i], (uint8_t)(cpu * 100 + i));
	SHOW(h, "consume", api->consume(pb));
	log_flush(log, "records");
	for (int cpu = 0; cpu < 2; cpu++)
		CHECK(h, log->got[cpu] == NSIZES, "cpu %d got %zu", cpu, log->got[cpu]);
	SHOW(h, "consume again", api->consume(pb));
	api->free_(pb);
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* What poll returns: ready buffers, 0 on timeout, -EINTR on a signal, and
 * the one-shot readiness seen through an outer poll(2). */
static void s_poll(struct harness *h)
{
	const struct pb_api *api = h->api;
	struct rec_log *log = log_reset(h);
	struct perf_buffer *pb = show_new(h, "new", api->new_(h->prod.map_fd, 4, on_sample, on_lost, log, NULL));
	if (!pb)
		return;
	SHOW(h, "poll(0) nothing", api->poll(pb, 0));
	SHOW(h, "poll(10) nothing", api->poll(pb, 10));
	emit(h, log, 0, 16, 1);
	emit(h, log, 0, 24, 2);
	SHOW(h, "poll(WAIT_MS) two records on cpu0", api->poll(pb, WAIT_MS));
	SHOW(h, "poll(0) after", api->poll(pb, 0));
	emit(h, log, 0, 32, 3);
	emit(h, log, 1, 40, 4);
	SHOW(h, "poll(WAIT_MS) one record on each cpu", api->poll(pb, WAIT_MS));
	log_flush(log, "polled");

	/* An outer poll(2) on the epoll fd consumes the one-shot readiness. */
	emit(h, log, 0, 48, 5);
	struct pollfd pfd = {.fd = api->epoll_fd(pb), .events = POLLIN};
	SHOW(h, "poll(2) on epoll_fd", poll(&pfd, 1, WAIT_MS));
	SHOW(h, "perf_buffer poll(0) after outer poll", api->poll(pb, 0));
	SHOW(h, "consume after outer poll", api->consume(pb));
	log_flush(log, "after outer poll");

	/* A signal interrupts the wait and is not retried. */
	struct sigaction sa = {.sa_handler = on_alarm}, old;
	sigaction(SIGALRM, &sa, &old);
	struct itimerval it = {.it_value = {.tv_usec = 30 * 1000}};
	setitimer(ITIMER_REAL, &it, NULL);
	SHOW(h, "poll(2000) interrupted", api->poll(pb, 2000));
	sigaction(SIGALRM, &old, NULL);
	CHECK(h, alarms > 0, "no alarm");
	api->free_(pb);
}

/* A 1-page ring wrapped many times by records of many sizes. */
static void s_wrap(struct harness *h)
{
	const struct pb_api *api = h->api;
	struct rec_log *log = log_reset(h);
	struct perf_buffer *pb = show_new(h, "new page_cnt 1", api->new_(h->prod.map_fd, 1, on_sample, on_lost, log, NULL));
	if (!pb)
		return;
	unsigned total = 0, in_ring = 0;
	for (unsigned i = 0; i < 700; i++) {
		unsigned n = 8 + (i * 37) % 700;
		unsigned rec = 8 + (((n + 4) + 7) & ~7u);
		if (in_ring + rec > 3500) {
			SHOW(h, "consume", api->consume(pb));
			in_ring = 0;
		}
		emit(h, log, 0, n, (uint8_t)i);
		in_ring += rec;
		total += rec;
	}
	SHOW(h, "consume", api->consume(pb));
	log_flush(log, "wrapped records");
	tx_printf(&h->tx, "bytes through ring: %u (%u wraps)\n", total, total / 4096);
	CHECK(h, log->got[0] == 700 && log->lost[0] == 0, "got %zu lost %llu", log->got[0],
	      (unsigned long long)log->lost[0]);
	api->free_(pb);
}

/* A full ring drops records; the next write reports them as LOST, so
 * delivered + lost = produced exactly. */
static void s_overflow(struct harness *h)
{
	const struct pb_api *api = h->api;
	struct rec_log *log = log_reset(h);
	log->check_bytes = false;
	struct perf_buffer *pb = show_new(h, "new page_cnt 1", api->new_(h->prod.map_fd, 1, on_sample, on_lost, log, NULL));
	if (!pb)
		return;
	int ret = 0;
	const unsigned produced = 300;
	CHECK(h, producer_emit_det(&h->prod, 0, 72, 9, produced - 1, &ret) == 0, "emit");
	tx_printf(&h->tx, "last helper ret of %u = %d\n", produced - 1, ret);
	SHOW(h, "consume full ring", api->consume(pb));
	size_t delivered_first = log->got[0];
	CHECK(h, producer_emit_det(&h->prod, 0, 72, 10, 1, &ret) == 0, "emit");
	tx_printf(&h->tx, "helper ret after drain = %d\n", ret);
	SHOW(h, "consume", api->consume(pb));
	log_flush(log, "overflow");
	tx_printf(&h->tx, "delivered %zu then %zu, lost %llu\n", delivered_first, log->got[0] - delivered_first,
		  (unsigned long long)log->lost[0]);
	CHECK(h, log->lost[0] > 0, "nothing lost");
	CHECK(h, log->got[0] + log->lost[0] == produced, "delivered %zu + lost %llu != %u", log->got[0],
	      (unsigned long long)log->lost[0], produced);
	api->free_(pb);
}

/* Raw mode: the caller's attr, an explicit CPU list with map keys, the raw
 * callback's return values, and a NULL callback. */
static void s_raw(struct harness *h)
{
	const struct pb_api *api = h->api;
	struct rec_log *log = log_reset(h);
	int map = h->prod.map_fd;
	struct perf_event_attr attr = {.type = PERF_TYPE_SOFTWARE, .size = sizeof(attr),
				       .config = PERF_COUNT_SW_BPF_OUTPUT,
				       .sample_type = PERF_SAMPLE_RAW | PERF_SAMPLE_CPU, .sample_period = 1,
				       .wakeup_events = 1};
	int cpus[2] = {1, 0}, keys[2] = {1, 0};
	struct perf_buffer_raw_opts opts = {.sz = sizeof(opts), .cpu_cnt = 2, .cpus = cpus, .map_keys = keys};
	struct perf_buffer *pb = show_new(h, "new_raw cpus {1,0}", api->new_raw(map, 2, &attr, on_event, log, &opts));
	if (!pb)
		return;
	tx_printf(&h->tx, "buffer_cnt = %zu\n", api->buffer_cnt(pb));
	for (int i = 0; i < 3; i++) {
		emit(h, log, 0, 20 + i, (uint8_t)i);
		emit(h, log, 1, 30 + i, (uint8_t)(10 + i));
	}
	SHOW(h, "consume_buffer(0) = cpu 1", api->consume_buffer(pb, 0));
	log_flush(log, "buffer 0");
	SHOW(h, "consume_buffer(1) = cpu 0", api->consume_buffer(pb, 1));
	log_flush(log, "buffer 1");

	log->raw_calls = 0;
	log->raw_ret_after = 1;
	log->raw_ret = LIBBPF_PERF_EVENT_DONE;
	emit(h, log, 1, 8, 50);
	emit(h, log, 1, 8, 51);
	SHOW(h, "consume_buffer DONE", api->consume_buffer(pb, 0));
	log->raw_calls = 0;
	log->raw_ret = LIBBPF_PERF_EVENT_ERROR;
	SHOW(h, "consume_buffer ERROR", api->consume_buffer(pb, 0));
	emit(h, log, 1, 8, 52);
	log->raw_calls = 0;
	SHOW(h, "consume ERROR", api->consume(pb));
	log->raw_calls = 0;
	log->raw_ret = 7;
	emit(h, log, 1, 8, 53);
	SHOW(h, "poll returning 7", api->poll(pb, WAIT_MS));
	log->raw_ret = LIBBPF_PERF_EVENT_CONT;
	SHOW(h, "consume rest", api->consume(pb));
	log_flush(log, "stops");
	api->free_(pb);

	/* Only CPU 1 in the map: the producer on CPU 0 finds an empty slot. */
	int one_cpu[1] = {1}, one_key[1] = {1};
	opts.cpu_cnt = 1;
	opts.cpus = one_cpu;
	opts.map_keys = one_key;
	pb = show_new(h, "new_raw cpus {1}", api->new_raw(map, 1, &attr, on_event, log, &opts));
	if (pb) {
		tx_printf(&h->tx, "buffer_cnt = %zu\n", api->buffer_cnt(pb));
		emit(h, NULL, 0, 8, 60);
		api->free_(pb);
	}

	/* wakeup_events = 4: three records wake nobody, the fourth does. */
	attr.wakeup_events = 4;
	pb = show_new(h, "new_raw wakeup_events 4", api->new_raw(map, 1, &attr, on_event, log, NULL));
	if (pb) {
		for (int i = 0; i < 3; i++)
			emit(h, log, 0, 8, (uint8_t)(70 + i));
		SHOW(h, "poll(50) after 3", api->poll(pb, 50));
		emit(h, log, 0, 8, 73);
		SHOW(h, "poll(WAIT_MS) after 4", api->poll(pb, WAIT_MS));
		log_flush(log, "wakeup_events 4");
		api->free_(pb);
	}

	/* No event callback: records are dropped, the ring is emptied. */
	pb = show_new(h, "new_raw NULL event_cb", api->new_raw(map, 1, &attr, NULL, NULL, NULL));
	if (pb) {
		emit(h, NULL, 0, 8, 80);
		SHOW(h, "consume", api->consume(pb));
		void *region;
		size_t size;
		api->buffer(pb, 0, &region, &size);
		struct perf_event_mmap_page *mp = region;
		tx_printf(&h->tx, "after consume head-tail = %llu\n",
			  (unsigned long long)(mp->data_head - mp->data_tail));
		api->free_(pb);
	}
}

/* NULL sample/lost callbacks: records are consumed silently. */
static void s_null_callbacks(struct harness *h)
{
	const struct pb_api *api = h->api;
	struct perf_buffer *pb = show_new(h, "new NULL cbs", api->new_(h->prod.map_fd, 1, NULL, NULL, NULL, NULL));
	if (!pb)
		return;
	for (int i = 0; i < 3; i++)
		emit(h, NULL, 0, 8, (uint8_t)i);
	SHOW(h, "consume", api->consume(pb));
	void *region;
	size_t size;
	SHOW(h, "buffer(0)", api->buffer(pb, 0, &region, &size));
	struct perf_event_mmap_page *mp = region;
	tx_printf(&h->tx, "head-tail = %llu\n", (unsigned long long)(mp->data_head - mp->data_tail));
	api->free_(pb);
}

/* The raw region: the control page then the data, readable by hand. */
static void s_raw_region(struct harness *h)
{
	const struct pb_api *api = h->api;
	struct rec_log *log = log_reset(h);
	struct perf_buffer *pb = show_new(h, "new", api->new_(h->prod.map_fd, 2, on_sample, on_lost, log, NULL));
	if (!pb)
		return;
	emit(h, log, 0, 64, 1);
	emit(h, log, 0, 100, 2);
	void *region;
	size_t size;
	SHOW(h, "buffer(0)", api->buffer(pb, 0, &region, &size));
	struct perf_event_mmap_page *mp = region;
	uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE), tail = mp->data_tail;
	tx_printf(&h->tx, "head-tail = %llu\n", (unsigned long long)(head - tail));
	const uint8_t *rec = (const uint8_t *)region + 4096 + (tail & (size - 1));
	const struct perf_event_header *hdr = (const void *)rec;
	uint32_t raw;
	memcpy(&raw, rec + 8, 4);
	tx_printf(&h->tx, "first record type=%u size=%u raw=%u\n", hdr->type, hdr->size, raw);
	uint8_t want[64];
	producer_expected(64, 1, want);
	CHECK(h, hdr->type == PERF_RECORD_SAMPLE && memcmp(rec + 12, want, 64) == 0, "raw region record");
	SHOW(h, "consume", api->consume(pb));
	tx_printf(&h->tx, "after consume head-tail = %llu\n",
		  (unsigned long long)(mp->data_head - mp->data_tail));
	log_flush(log, "records");
	api->free_(pb);
}

/* A map with max_entries 1 bounds the buffers; CPU 1 then gets -E2BIG. */
static void s_max_entries(struct harness *h)
{
	const struct pb_api *api = h->api;
	struct producer small;
	if (producer_open(&small, 1) != 0) {
		CHECK(h, 0, "producer with max_entries 1");
		return;
	}
	struct rec_log *log = log_reset(h);
	struct perf_buffer *pb = show_new(h, "new on max_entries 1", api->new_(small.map_fd, 1, on_sample, on_lost, log, NULL));
	if (pb) {
		tx_printf(&h->tx, "buffer_cnt = %zu\n", api->buffer_cnt(pb));
		SHOW(h, "buffer_fd(1)", api->buffer_fd(pb, 1));
		int ret = 0;
		producer_emit_det(&small, 1, 8, 0, 1, &ret);
		tx_printf(&h->tx, "cpu1 helper ret = %d\n", ret);
		api->free_(pb);
	}
	producer_close(&small);
}

/* free: map entries removed (the producer then gets -ENOENT), fds closed. */
static void s_free(struct harness *h)
{
	const struct pb_api *api = h->api;
	int fds = count_open_fds();
	struct rec_log *log = log_reset(h);
	struct perf_buffer *pb = show_new(h, "new", api->new_(h->prod.map_fd, 1, on_sample, on_lost, log, NULL));
	if (!pb)
		return;
	int ret = 0;
	producer_emit_det(&h->prod, 0, 8, 0, 1, &ret);
	tx_printf(&h->tx, "helper ret before free = %d\n", ret);
	api->free_(pb);
	producer_emit_det(&h->prod, 0, 8, 0, 1, &ret);
	tx_printf(&h->tx, "helper ret after free = %d\n", ret);
	api->free_(NULL);
	tx_printf(&h->tx, "free(NULL) returned\n");
	CHECK(h, count_open_fds() == fds, "fds leaked: %d -> %d", fds, count_open_fds());
}

const struct scenario scenarios[] = {
	{"construct_errors", s_construct_errors},
	{"accessors", s_accessors},
	{"records", s_records},
	{"poll", s_poll},
	{"wrap", s_wrap},
	{"overflow", s_overflow},
	{"raw", s_raw},
	{"null_callbacks", s_null_callbacks},
	{"raw_region", s_raw_region},
	{"max_entries", s_max_entries},
	{"free", s_free},
};
const size_t scenario_count = sizeof(scenarios) / sizeof(scenarios[0]);
