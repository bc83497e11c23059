/* The ring buffer scenarios of the differential suite. Each creates its
 * own ring buffer maps and BPF programs (fresh positions, so transcripts
 * are deterministic), drives one behaviour of the ring_buffer API, writes
 * what the caller can observe (return values, errno, every record's map,
 * size and checksum, positions) to the transcript, and checks absolute
 * expectations (bytes equal what the program wrote, counts add up). */
#define _GNU_SOURCE
#include "rb_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAPS 3
#define MAX_EXPECT 8192
#define WAIT_MS 5000

/* One map's producer, what it should deliver, and what its callback saw. */
struct rb_map {
	struct rb_harness *h;
	int id;
	struct ringbuf_producer prod;
	uint32_t exp_fnv[MAX_EXPECT];
	uint32_t exp_size[MAX_EXPECT];
	size_t exp_len, got;
	int calls;
	int stop_at;	/* the callback returns stop_ret at this call (from 1) */
	int stop_ret;
	int other_ret;	/* what it returns otherwise */
	bool quiet;	/* count records, do not log each */
};

static struct rb_map maps[MAPS];

static uint32_t fnv1a(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}

/* Opens `n` maps of `bytes` each (closing what a previous scenario left). */
static void maps_open(struct rb_harness *h, int n, unsigned bytes)
{
	for (int i = 0; i < MAPS; i++) {
		if (maps[i].h)
			producer_close_ringbuf(&maps[i].prod);
		memset(&maps[i], 0, sizeof(maps[i]));
		maps[i].prod.map_fd = -1;
	}
	for (int i = 0; i < n; i++) {
		maps[i].h = h;
		maps[i].id = i;
		int err = producer_open_ringbuf(&maps[i].prod, bytes);
		if (err) {
			fprintf(stderr, "producer_open_ringbuf: %s\n", strerror(-err));
			exit(ci_mode() ? 1 : 77);
		}
	}
}

static void maps_close(void)
{
	for (int i = 0; i < MAPS; i++) {
		if (maps[i].h)
			producer_close_ringbuf(&maps[i].prod);
		memset(&maps[i], 0, sizeof(maps[i]));
	}
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct rb_map *m = ctx;
	struct rb_harness *h = m->h;
	int call = ++m->calls;
	size_t i = m->got++;
	uint32_t sum = fnv1a(data, size);
	if (!m->quiet)
		tx_printf(&h->tx, "  rec map=%d size=%zu fnv=%08x align8=%d\n", m->id, size, sum,
			  (int)((uintptr_t)data % 8 == 0));
	RB_CHECK(h, i < m->exp_len, "map %d: unexpected record #%zu", m->id, i);
	if (i < m->exp_len)
		RB_CHECK(h, size == m->exp_size[i] && sum == m->exp_fnv[i], "map %d record #%zu: size %zu want %u",
			 m->id, i, size, m->exp_size[i]);
	return call == m->stop_at ? m->stop_ret : m->other_ret;
}

static void expect(struct rb_map *m, const void *bytes, size_t n)
{
	if (m->exp_len < MAX_EXPECT) {
		m->exp_fnv[m->exp_len] = fnv1a(bytes, n);
		m->exp_size[m->exp_len++] = (uint32_t)n;
	}
}

/* A record of n bytes (8 <= n <= PRODUCER_MAX_N) by bpf_ringbuf_output. */
static int emit(struct rb_map *m, unsigned n, uint8_t seed)
{
	int ret = 0, err = producer_emit_ringbuf(&m->prod, 0, n, seed, 1, &ret);
	RB_CHECK(m->h, err == 0, "producer_emit_ringbuf: %d", err);
	if (ret == 0) {
		uint8_t buf[PRODUCER_MAX_N];
		producer_expected(n, seed, buf);
		expect(m, buf, n);
	} else {
		tx_printf(&m->h->tx, "  emit map=%d n=%u -> %d\n", m->id, n, ret);
	}
	return ret;
}

/* A RINGBUF_CTL_SIZE record by output or reserve+submit, or a discarded one. */
static int ctl(struct rb_map *m, enum ringbuf_op op, unsigned flags, uint64_t meta)
{
	int ret = 0, err = producer_ringbuf_ctl(&m->prod, 0, op, flags, meta, &ret);
	RB_CHECK(m->h, err == 0, "producer_ringbuf_ctl: %d", err);
	if (ret == 0 && op != RINGBUF_RESERVE_DISCARD) {
		uint64_t rec[2] = {meta, meta};
		expect(m, rec, sizeof(rec));
	} else if (ret != 0) {
		tx_printf(&m->h->tx, "  ctl map=%d op=%d flags=%u -> %d\n", m->id, op, flags, ret);
	}
	return ret;
}

#define SHOW(h, label, expr)                                                                   \
	do {                                                                                   \
		errno = 1234;                                                                  \
		long _r = (long)(expr);                                                        \
		int _e = errno;                                                                \
		tx_printf(&(h)->tx, "%s = %ld errno=%d\n", label, _r, _e == 1234 ? 0 : _e);    \
	} while (0)

static struct ring_buffer *show_new(struct rb_harness *h, const char *label, struct ring_buffer *rb)
{
	int e = errno;
	tx_printf(&h->tx, "%s: %s errno=%d\n", label, rb ? "ok" : "NULL", rb ? 0 : e);
	return rb;
}

static int fd_base(void)
{
	int fd = dup(0);
	close(fd);
	return fd;
}

static int bpf_map(unsigned type, unsigned key, unsigned value, unsigned entries)
{
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.map_type = type;
	attr.key_size = key;
	attr.value_size = value;
	attr.max_entries = entries;
	return (int)syscall(__NR_bpf, BPF_MAP_CREATE, &attr, sizeof(attr));
}

static void check_all_delivered(struct rb_harness *h, int n)
{
	for (int i = 0; i < n; i++)
		RB_CHECK(h, maps[i].got == maps[i].exp_len, "map %d: %zu of %zu records", i, maps[i].got,
			 maps[i].exp_len);
}

/* A scenario's start: `n` fresh maps of `bytes`, a ring buffer over the
 * first (NULL, maps closed, if that failed). */
static struct ring_buffer *rb_start(struct rb_harness *h, int n, unsigned bytes)
{
	maps_open(h, n, bytes);
	struct ring_buffer *rb = show_new(h, "new", h->api->new_(maps[0].prod.map_fd, on_record, &maps[0], NULL));
	if (!rb)
		maps_close();
	return rb;
}

/* A scenario's end: every record of the `n` maps was delivered; all freed. */
static void rb_end(struct rb_harness *h, struct ring_buffer *rb, int n)
{
	check_all_delivered(h, n);
	h->api->free_(rb);
	maps_close();
}

/* ---- scenarios ---- */

/* Constructor and add errors, each with its errno; nothing leaked. */
static void s_errors(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	maps_open(h, 1, 4096);
	int fds = count_open_fds(), map = maps[0].prod.map_fd;
	struct ring_buffer *rb;
	union {
		struct ring_buffer_opts o;
		uint8_t bytes[64];
	} u;
#define TRY(label, call)                         \
	do {                                     \
		errno = 0;                       \
		rb = show_new(h, label, (call)); \
		if (rb)                          \
			api->free_(rb);          \
	} while (0)
	TRY("map fd -1", api->new_(-1, on_record, &maps[0], NULL));
	TRY("map fd closed", api->new_(1000, on_record, &maps[0], NULL));
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	TRY("not a bpf fd", api->new_(devnull, on_record, &maps[0], NULL));
	int array = bpf_map(BPF_MAP_TYPE_ARRAY, 4, 4, 4);
	RB_CHECK(h, array >= 0, "array map: %s", strerror(errno));
	TRY("array map", api->new_(array, on_record, &maps[0], NULL));
	int pea = bpf_map(BPF_MAP_TYPE_PERF_EVENT_ARRAY, 4, 4, 2);
	TRY("perf event array", api->new_(pea, on_record, &maps[0], NULL));
	int user_rb = bpf_map(BPF_MAP_TYPE_USER_RINGBUF, 0, 0, 4096);
	TRY("user ring buffer", api->new_(user_rb, on_record, &maps[0], NULL));
	memset(&u, 0, sizeof(u));
	u.o.sz = 4;
	TRY("opts sz 4", api->new_(map, on_record, &maps[0], &u.o));
	u.o.sz = 8;
	TRY("opts sz 8", api->new_(map, on_record, &maps[0], &u.o));
	u.o.sz = 16;
	TRY("opts sz 16 zero tail", api->new_(map, on_record, &maps[0], &u.o));
	u.bytes[12] = 1;
	TRY("opts sz 16 byte 12 set", api->new_(map, on_record, &maps[0], &u.o));
	TRY("NULL opts, NULL callback", api->new_(map, NULL, NULL, NULL));

	rb = show_new(h, "new", api->new_(map, on_record, &maps[0], NULL));
	if (rb) {
		SHOW(h, "add fd -1", api->add(rb, -1, on_record, &maps[0]));
		SHOW(h, "add not a bpf fd", api->add(rb, devnull, on_record, &maps[0]));
		SHOW(h, "add array map", api->add(rb, array, on_record, &maps[0]));
		SHOW(h, "add perf event array", api->add(rb, pea, on_record, &maps[0]));
		SHOW(h, "add the same fd again", api->add(rb, map, on_record, &maps[0]));
		/* Still whole: its one map reads. */
		emit(&maps[0], 24, 1);
		SHOW(h, "poll after failed adds", api->poll(rb, WAIT_MS));
		api->free_(rb);
	}
	api->free_(NULL);
	close(devnull);
	close(array);
	close(pea);
	if (user_rb >= 0)
		close(user_rb);
#undef TRY
	RB_CHECK(h, count_open_fds() == fds, "fds leaked: %d -> %d", fds, count_open_fds());
	maps_close();
}

/* Records of many sizes, wrapping a 16 KiB ring many times: each one's
 * size and bytes, poll's and consume's counts. */
static void s_records(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	struct ring_buffer *rb = rb_start(h, 1, 16384);
	if (!rb)
		return;
	static const unsigned sizes[] = {8, 9, 15, 16, 17, 23, 64, 100, 255, 256, 1000, 3000};
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		emit(&maps[0], sizes[i], (uint8_t)i);
	SHOW(h, "poll", api->poll(rb, WAIT_MS));
	SHOW(h, "poll(0) empty", api->poll(rb, 0));
	SHOW(h, "consume empty", api->consume(rb));
	unsigned in_ring = 0, total = 0;
	maps[0].quiet = true;
	for (unsigned i = 0; i < 600; i++) {
		unsigned n = 8 + (i * 41) % 1500, rec = (n + 8 + 7) & ~7u;
		if (in_ring + rec > 16384) {
			SHOW(h, "consume", api->consume(rb));
			in_ring = 0;
		}
		emit(&maps[0], n, (uint8_t)i);
		in_ring += rec;
		total += rec;
	}
	SHOW(h, "consume", api->consume(rb));
	tx_printf(&h->tx, "records %zu, bytes through the ring %u (%u wraps)\n", maps[0].got, total, total / 16384);
	rb_end(h, rb, 1);
}

/* Three maps in one ring buffer: poll and consume read them all and sum. */
static void s_several_maps(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	struct ring_buffer *rb = rb_start(h, 3, 8192);
	if (!rb)
		return;
	SHOW(h, "add map 1", api->add(rb, maps[1].prod.map_fd, on_record, &maps[1]));
	SHOW(h, "add map 2", api->add(rb, maps[2].prod.map_fd, on_record, &maps[2]));
	emit(&maps[2], 40, 1);
	emit(&maps[0], 16, 2);
	emit(&maps[1], 100, 3);
	emit(&maps[2], 8, 4);
	SHOW(h, "poll: 4 records in 3 maps", api->poll(rb, WAIT_MS));
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 5; k++)
			emit(&maps[i], 16 + 8 * k, (uint8_t)(10 * i + k));
	SHOW(h, "consume: 15 records", api->consume(rb));
	emit(&maps[1], 32, 9);
	SHOW(h, "poll: map 1 alone", api->poll(rb, WAIT_MS));
	SHOW(h, "poll(0) empty", api->poll(rb, 0));
	rb_end(h, rb, 3);
}

/* A callback's negative return stops the read, is returned (errno set)
 * and its record is consumed; positive returns are ignored. */
static void s_callback_returns(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	struct ring_buffer *rb = rb_start(h, 2, 8192);
	if (!rb)
		return;
	SHOW(h, "add", api->add(rb, maps[1].prod.map_fd, on_record, &maps[1]));
	maps[0].other_ret = 5;
	maps[0].stop_at = 3;
	maps[0].stop_ret = -7;
	for (int k = 0; k < 6; k++)
		emit(&maps[0], 16, (uint8_t)k);
	emit(&maps[1], 24, 100);
	SHOW(h, "poll: stopped at the third record", api->poll(rb, WAIT_MS));
	SHOW(h, "consume: the rest", api->consume(rb));
	maps[1].stop_at = 2;
	maps[1].stop_ret = -1000;
	maps[1].calls = 0;
	for (int k = 0; k < 3; k++)
		emit(&maps[1], 16, (uint8_t)(50 + k));
	emit(&maps[0], 16, 60);
	SHOW(h, "consume: map 1 stops", api->consume(rb));
	SHOW(h, "consume: the rest", api->consume(rb));
	maps[0].stop_at = maps[0].calls + 1;
	maps[0].stop_ret = -EINTR;
	emit(&maps[0], 16, 70);
	SHOW(h, "poll: a callback returning -EINTR", api->poll(rb, WAIT_MS));
	SHOW(h, "consume empty", api->consume(rb));
	rb_end(h, rb, 2);
}

/* bpf_ringbuf_reserve + submit and + discard, output with flags: discarded
 * records are stepped over, never delivered or counted. */
static void s_reserve_discard(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	struct ring_buffer *rb = rb_start(h, 1, 4096);
	if (!rb)
		return;
	ctl(&maps[0], RINGBUF_RESERVE_SUBMIT, 0, 1);
	ctl(&maps[0], RINGBUF_RESERVE_DISCARD, 0, 2);
	ctl(&maps[0], RINGBUF_OUTPUT, 0, 3);
	ctl(&maps[0], RINGBUF_RESERVE_DISCARD, 0, 4);
	ctl(&maps[0], RINGBUF_RESERVE_DISCARD, 0, 5);
	ctl(&maps[0], RINGBUF_RESERVE_SUBMIT, 0, 6);
	SHOW(h, "poll: 3 records kept, 3 discarded", api->poll(rb, WAIT_MS));
	ctl(&maps[0], RINGBUF_RESERVE_DISCARD, 0, 7);
	SHOW(h, "consume: only a discarded record", api->consume(rb));
	SHOW(h, "poll(0) after", api->poll(rb, 0));
	ctl(&maps[0], RINGBUF_OUTPUT, 4 /* not a BPF_RB_* flag */, 8);
	ctl(&maps[0], RINGBUF_RESERVE_SUBMIT, 0, 9);
	SHOW(h, "consume", api->consume(rb));
	rb_end(h, rb, 1);
}

/* A full ring: the program's output fails (-EAGAIN, seen only by the
 * program: no lost count anywhere), everything written is delivered, and
 * the space comes back once read. */
static void s_full_ring(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	struct ring_buffer *rb = rb_start(h, 1, 4096);
	if (!rb)
		return;
	int written = 0, failed = 0;
	for (int k = 0; k < 8; k++) {
		if (emit(&maps[0], 1000, (uint8_t)k) == 0)
			written++;
		else
			failed++;
	}
	tx_printf(&h->tx, "written %d, failed %d\n", written, failed);
	RB_CHECK(h, written == 4 && failed == 4, "written %d failed %d", written, failed);
	struct ringbuf_producer_stats st = {0};
	producer_ringbuf_stats(&maps[0].prod, &st);
	tx_printf(&h->tx, "program counted %llu failed outputs, last %lld\n", (unsigned long long)st.output_failed,
		  (long long)st.last_error);
	SHOW(h, "poll", api->poll(rb, WAIT_MS));
	emit(&maps[0], 1000, 100);
	SHOW(h, "poll after the space came back", api->poll(rb, WAIT_MS));
	rb_end(h, rb, 1);
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static long elapsed_ms(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Timeouts, a signal (EINTR, not retried), the epoll fd seen from outside,
 * and the kernel's wake-up flags. */
static void s_poll(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	int base = fd_base();
	struct ring_buffer *rb = rb_start(h, 1, 4096);
	if (!rb)
		return;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	SHOW(h, "poll(0) empty", api->poll(rb, 0));
	SHOW(h, "poll(60) empty", api->poll(rb, 60));
	RB_CHECK(h, elapsed_ms(&t0) >= 55, "poll(60) returned after %ld ms", elapsed_ms(&t0));

	int epfd = api->epoll_fd(rb);
	tx_printf(&h->tx, "epoll_fd = base+%d cloexec=%d\n", epfd - base, (fcntl(epfd, F_GETFD) & FD_CLOEXEC) != 0);
	struct pollfd pfd = {.fd = epfd, .events = POLLIN};
	SHOW(h, "poll(2) on epoll_fd, empty", poll(&pfd, 1, 0));
	emit(&maps[0], 16, 1);
	SHOW(h, "poll(2) on epoll_fd, one record", poll(&pfd, 1, WAIT_MS));
	SHOW(h, "poll", api->poll(rb, WAIT_MS));
	SHOW(h, "poll(2) on epoll_fd, read", poll(&pfd, 1, 0));

	/* BPF_RB_NO_WAKEUP: no wake-up, so poll times out; consume reads it. */
	ctl(&maps[0], RINGBUF_OUTPUT, BPF_RB_NO_WAKEUP, 11);
	SHOW(h, "poll(100) after a NO_WAKEUP record", api->poll(rb, 100));
	SHOW(h, "consume", api->consume(rb));
	ctl(&maps[0], RINGBUF_RESERVE_SUBMIT, BPF_RB_NO_WAKEUP, 12);
	ctl(&maps[0], RINGBUF_RESERVE_SUBMIT, BPF_RB_FORCE_WAKEUP, 13);
	SHOW(h, "poll after a FORCE_WAKEUP record", api->poll(rb, WAIT_MS));
	/* The kernel wakes when a commit finds the reader caught up. */
	ctl(&maps[0], RINGBUF_RESERVE_SUBMIT, 0, 14);
	SHOW(h, "poll after a default record", api->poll(rb, WAIT_MS));

	struct sigaction sa = {.sa_handler = on_alarm}, old;
	sigaction(SIGALRM, &sa, &old);
	struct itimerval it = {.it_value = {.tv_usec = 30 * 1000}};
	alarms = 0;
	setitimer(ITIMER_REAL, &it, NULL);
	SHOW(h, "poll(-1) interrupted", api->poll(rb, -1));
	sigaction(SIGALRM, &old, NULL);
	RB_CHECK(h, alarms > 0, "no alarm");
	rb_end(h, rb, 1);
}

/* Maps added after the first poll; the same map twice, through a dup of
 * its fd: one consumer position, so each record is read once, by the
 * first ring that gets to it. */
static void s_add_later(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	struct ring_buffer *rb = rb_start(h, 2, 4096);
	if (!rb)
		return;
	emit(&maps[0], 16, 1);
	SHOW(h, "poll", api->poll(rb, WAIT_MS));
	SHOW(h, "add after poll", api->add(rb, maps[1].prod.map_fd, on_record, &maps[1]));
	emit(&maps[1], 24, 2);
	emit(&maps[0], 32, 3);
	SHOW(h, "poll both", api->poll(rb, WAIT_MS));
	int dup_fd = dup(maps[1].prod.map_fd);
	SHOW(h, "add map 1 again through a dup", api->add(rb, dup_fd, on_record, &maps[1]));
	emit(&maps[1], 40, 4);
	emit(&maps[1], 48, 5);
	SHOW(h, "consume", api->consume(rb));
	emit(&maps[1], 56, 6);
	SHOW(h, "poll", api->poll(rb, WAIT_MS));
	SHOW(h, "poll(0)", api->poll(rb, 0));
	rb_end(h, rb, 2);
	close(dup_fd);
}

/* libbpf 1.3's ring_buffer__ring and ring__*, 1.5's consume_n. */
static void s_rings(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	struct ring_buffer *rb = rb_start(h, 2, 8192);
	if (!rb)
		return;
	SHOW(h, "add", api->add(rb, maps[1].prod.map_fd, on_record, &maps[1]));
	errno = 0;
	struct ring *r0 = api->ring(rb, 0), *r1 = api->ring(rb, 1), *r2 = api->ring(rb, 2);
	tx_printf(&h->tx, "ring(0) %s ring(1) %s ring(2) %s errno=%d\n", r0 ? "ok" : "NULL", r1 ? "ok" : "NULL",
		  r2 ? "ok" : "NULL", errno);
	errno = 0;
	struct ring *far = api->ring(rb, 4000000000u);
	tx_printf(&h->tx, "ring(4e9) %s errno=%d\n", far ? "ok" : "NULL", errno);
	if (!r0 || !r1)
		goto out;
	tx_printf(&h->tx, "size %zu %zu; map_fd is the map's: %d %d\n", api->size(r0), api->size(r1),
		  api->map_fd(r0) == maps[0].prod.map_fd, api->map_fd(r1) == maps[1].prod.map_fd);
	for (int k = 0; k < 5; k++)
		emit(&maps[0], 16 + 8 * k, (uint8_t)k);
	ctl(&maps[1], RINGBUF_RESERVE_DISCARD, 0, 1);
	for (int k = 0; k < 3; k++)
		emit(&maps[1], 8, (uint8_t)(20 + k));
#define POS(label)                                                                                         \
	tx_printf(&h->tx, "%s: ring0 cons %lu prod %lu avail %zu; ring1 cons %lu prod %lu avail %zu\n", label, \
		  api->consumer_pos(r0), api->producer_pos(r0), api->avail_data_size(r0), api->consumer_pos(r1), \
		  api->producer_pos(r1), api->avail_data_size(r1))
	POS("written");
	SHOW(h, "ring__consume_n(ring0, 2)", api->ring_consume_n(r0, 2));
	POS("after");
	SHOW(h, "ring__consume_n(ring1, 0): the discarded record ends it", api->ring_consume_n(r1, 0));
	SHOW(h, "ring__consume_n(ring1, 0): one record", api->ring_consume_n(r1, 0));
	SHOW(h, "ring_buffer__consume_n(2)", api->consume_n(rb, 2));
	POS("after");
	SHOW(h, "ring_buffer__consume_n(10)", api->consume_n(rb, 10));
	SHOW(h, "ring__consume(ring1) empty", api->ring_consume(r1));
	emit(&maps[1], 64, 30);
	maps[1].stop_at = maps[1].calls + 1;
	maps[1].stop_ret = -3;
	SHOW(h, "ring__consume(ring1) stopped", api->ring_consume(r1));
	for (int k = 0; k < 3; k++)
		emit(&maps[0], 8, (uint8_t)(40 + k));
	emit(&maps[1], 8, 50);
	SHOW(h, "ring_buffer__consume_n(0)", api->consume_n(rb, 0));
	POS("after");
	SHOW(h, "consume", api->consume(rb));
	POS("end");
#undef POS
	rb_end(h, rb, 2);
	return;
out:
	api->free_(rb);
	maps_close();
}

/* What libbpf would crash on: libperfbuf refuses or drops instead. */
static void s_robustness(struct rb_harness *h)
{
	const struct rb_api *api = h->api;
	maps_open(h, 1, 4096);
	SHOW(h, "poll(NULL)", api->poll(NULL, 0));
	SHOW(h, "consume(NULL)", api->consume(NULL));
	SHOW(h, "epoll_fd(NULL)", api->epoll_fd(NULL));
	SHOW(h, "add(NULL)", api->add(NULL, maps[0].prod.map_fd, on_record, &maps[0]));
	if (api->ring) {
		SHOW(h, "ring(NULL, 0)", api->ring(NULL, 0));
		SHOW(h, "ring__consume(NULL)", api->ring_consume(NULL));
		SHOW(h, "ring__map_fd(NULL)", api->map_fd(NULL));
		SHOW(h, "ring__size(NULL)", api->size(NULL));
	}
	struct ring_buffer *rb = show_new(h, "new, NULL callback", api->new_(maps[0].prod.map_fd, NULL, NULL, NULL));
	if (rb) {
		emit(&maps[0], 16, 1);
		maps[0].exp_len = 0; /* dropped, not delivered */
		SHOW(h, "poll: the record is dropped", api->poll(rb, WAIT_MS));
		SHOW(h, "poll(0) after", api->poll(rb, 0));
		api->free_(rb);
	}
	maps_close();
}

const struct rb_scenario rb_scenarios[] = {
	{"errors", s_errors, RB_BOTH},
	{"records", s_records, RB_BOTH},
	{"several_maps", s_several_maps, RB_BOTH},
	{"callback_returns", s_callback_returns, RB_BOTH},
	{"reserve_discard", s_reserve_discard, RB_BOTH},
	{"full_ring", s_full_ring, RB_BOTH},
	{"poll", s_poll, RB_BOTH},
	{"add_later", s_add_later, RB_BOTH},
	{"rings_consume_n", s_rings, RB_NEW_API},
	{"robustness", s_robustness, RB_PERFBUF_ONLY},
};
const size_t rb_scenario_count = sizeof(rb_scenarios) / sizeof(rb_scenarios[0]);
