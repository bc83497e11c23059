/* perfbench: one benchmark binary, written against libbpf's perf buffer
 * API, run once on libbpf.so.1 and once on libperfbuf.so (LD_PRELOAD), so
 * both libraries execute the very same caller code. Rows that use
 * libperfbuf's extensions run only where those symbols resolve.
 *
 * Events come from a real BPF program (c-tests/producer.c) on the running
 * kernel. Prints one JSON object per row on stdout:
 *   {"row": "...", "lib": "...", <figures>}
 * bench/run.py runs both libraries several times, takes medians and prints
 * the side-by-side table.
 *
 * The drain and quiet rows load both libraries into one process instead
 * (see struct pb_api) and alternate between them: run them without
 * LD_PRELOAD and with PERFBENCH_LIBPERFBUF=/path/to/libperfbuf.so.
 *
 * The stream, latency and quiet rows with libbpf's default attr are
 * labelled mode "default", or "fast" when this process runs libperfbuf
 * with PERFBUF_ADAPTIVE=1 in its environment (libperfbuf's opt-in adaptive
 * wake-ups; bench/run.py runs libperfbuf both ways). A "fast" process runs
 * only those rows.
 *
 * The ringbuf rows run the same producer shape into a BPF_MAP_TYPE_RINGBUF
 * (c-tests/producer.c, bpf_ringbuf_output) read through libbpf's
 * ring_buffer__* API: libbpf's own, or libperfbuf's under LD_PRELOAD (mode
 * "ringbuf_fast" with PERFBUF_ADAPTIVE=1: its fast mode). They count CPU
 * 0's IRQ work interrupts, the producer's share of the reader's wake-ups.
 *
 * The rings rows (bench/rings.c) measure 1,024 rings on 2 CPUs.
 *
 * usage: perfbench [ROW_PREFIX]   (e.g. "drain", "stream", "quiet", "latency", "ringbuf", "rings") */
#define _GNU_SOURCE
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dlfcn.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "producer.h"
#include "rings.h"

/* libperfbuf extensions, looked up at run time (absent under libbpf). */
struct perfbuf_opts_v1 {
	size_t sz;
	uint32_t wakeup_events, wakeup_bytes, max_delay_ms, flags;
	const int *cpus;
	int cpu_cnt;
};
struct batch { /* struct perfbuf_batch: this file builds without perfbuf.h */
	int cpu;
	uint32_t reserved;
	const void *records;
	size_t len, samples, others;
};
typedef int (*batch_fn)(void *, const struct batch *);
static struct perf_buffer *(*ext_new)(int, size_t, perf_buffer_sample_fn, perf_buffer_lost_fn, void *,
				      const struct perfbuf_opts_v1 *);
static int (*ext_consume_batch)(struct perf_buffer *, batch_fn, void *);
/* struct perfbuf_ring_stats up to batch_switches (perfbuf.h). */
struct ring_stats_v1 {
	size_t sz;
	int cpu, reserved;
	uint64_t records, bytes, lost, wakeups, pending_bytes, data_size, resyncs, skipped_bytes, malformed,
		overwritten_bytes, batched, batch_switches;
};
static int (*ext_ring_stats)(const struct perf_buffer *, size_t, struct ring_stats_v1 *);

static const char *lib_name = "libbpf";
/* "fast" in a libperfbuf process with PERFBUF_ADAPTIVE=1, else "default":
 * the label of the rows that use libbpf's default attr. */
static const char *default_label = "default";
static struct producer prod;
static struct ringbuf_producer rbprod;
static volatile uint64_t sink;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static double thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* ---- callbacks ---- */

struct tally {
	uint64_t records, lost, bytes;
	double *lat;
	size_t lat_n, lat_cap;
};

static void count_sample(void *ctx, int cpu, void *data, __u32 size)
{
	(void)cpu;
	(void)data;
	(void)size;
	((struct tally *)ctx)->records++;
}

static void count_lost(void *ctx, int cpu, __u64 n)
{
	(void)cpu;
	((struct tally *)ctx)->lost += n;
}

static void latency_sample(void *ctx, int cpu, void *data, __u32 size)
{
	struct tally *t = ctx;
	(void)cpu;
	(void)size;
	uint64_t stamp;
	memcpy(&stamp, data, 8);
	if (t->lat_n < t->lat_cap)
		t->lat[t->lat_n++] = now_ns() - (double)stamp;
	t->records++;
}

/* Counts a run's samples as count_sample counts each one; walks the run
 * (as perfbuf_batch_next does) only when it holds other records, for the
 * lost counts. */
static int count_batch(void *ctx, const struct batch *b)
{
	struct tally *t = ctx;
	t->records += b->samples;
	if (b->others == 0)
		return 0;
	const unsigned char *pos = b->records, *end = pos + b->len;
	while (pos < end) {
		const struct perf_event_header *h = (const void *)pos;
		if (h->type == PERF_RECORD_LOST)
			t->lost += *(const uint64_t *)(pos + 16);
		pos += h->size;
	}
	return 0;
}

/* ---- drain rows: a ring pre-filled by the BPF producer ---- */

#define DRAIN_PAGES 64 /* 256 KiB per CPU: fits in L2, so CPU work shows */

static unsigned fill(unsigned n)
{
	unsigned rec = 8 + ((n + 4 + 7) & ~7u);
	unsigned count = (unsigned)((DRAIN_PAGES * 4096.0 * 0.9) / rec);
	int ret = 0;
	producer_emit_det(&prod, 0, n, 1, count, &ret);
	return ret == 0 ? count : 0;
}

/* The raw region, for the hand-written reader and the memory floor. */
struct region {
	struct perf_event_mmap_page *mp;
	const uint8_t *data;
	size_t size;
};

typedef void (*record_fn)(void *ctx, const void *rec, uint32_t size);
static void count_record(void *ctx, const void *rec, uint32_t size)
{
	(void)rec;
	(void)size;
	(*(uint64_t *)ctx)++;
}
static record_fn volatile hand_cb = count_record;

/* A minimal reader over the raw region: one indirect call per record. */
static uint64_t hand_drain(struct region *r)
{
	static uint8_t copy[65536];
	uint64_t head = __atomic_load_n(&r->mp->data_head, __ATOMIC_ACQUIRE), tail = r->mp->data_tail, n = 0;
	record_fn cb = hand_cb;
	while (tail != head) {
		size_t off = tail & (r->size - 1);
		const struct perf_event_header *h = (const void *)(r->data + off);
		const void *rec = h;
		if (off + h->size > r->size) {
			size_t first = r->size - off;
			memcpy(copy, h, first);
			memcpy(copy + first, r->data, h->size - first);
			rec = copy;
		}
		cb(&n, rec, h->size);
		tail += h->size;
	}
	__atomic_store_n(&r->mp->data_tail, tail, __ATOMIC_RELEASE);
	return n;
}

/* Reads every byte once: the floor for anything that looks at the data. */
static uint64_t read_floor(struct region *r)
{
	uint64_t head = __atomic_load_n(&r->mp->data_head, __ATOMIC_ACQUIRE), tail = r->mp->data_tail, acc = 0;
	for (uint64_t p = tail; p < head; p += 8)
		acc += *(const uint64_t *)(r->data + (p & (r->size - 1)));
	sink += acc;
	__atomic_store_n(&r->mp->data_tail, head, __ATOMIC_RELEASE);
	return head - tail;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The perf buffer functions of one library, for the drain rows, which load
 * both libraries into this one process and alternate between them: the
 * same caller code, the same memory and the same moment for both. Across
 * two processes the very same C loop differed by up to 3x. */
struct pb_api {
	const char *name;
	struct perf_buffer *(*new_)(int, size_t, perf_buffer_sample_fn, perf_buffer_lost_fn, void *,
				    const struct perf_buffer_opts *);
	int (*consume)(struct perf_buffer *);
	int (*poll)(struct perf_buffer *, int);
	void (*free_)(struct perf_buffer *);
	int (*buffer)(struct perf_buffer *, int, void **, size_t *);
	int (*consume_batch)(struct perf_buffer *, batch_fn, void *);
};

static void *must_sym(void *lib, const char *name, const char *file)
{
	void *fn = dlsym(lib, name);
	Dl_info info;
	if (!fn || !dladdr(fn, &info) || !strstr(info.dli_fname, file)) {
		fprintf(stderr, "%s: not found in %s\n", name, file);
		exit(1);
	}
	return fn;
}

static void load_api(struct pb_api *api, const char *name, const char *path, int extensions)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
	const char *file = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	api->name = name;
	void *fn = must_sym(lib, "perf_buffer__new", file);
	memcpy(&api->new_, &fn, sizeof(fn));
	fn = must_sym(lib, "perf_buffer__consume", file);
	memcpy(&api->consume, &fn, sizeof(fn));
	fn = must_sym(lib, "perf_buffer__poll", file);
	memcpy(&api->poll, &fn, sizeof(fn));
	fn = must_sym(lib, "perf_buffer__free", file);
	memcpy(&api->free_, &fn, sizeof(fn));
	fn = must_sym(lib, "perf_buffer__buffer", file);
	memcpy(&api->buffer, &fn, sizeof(fn));
	fn = extensions ? must_sym(lib, "perfbuf_consume_batch", file) : NULL;
	memcpy(&api->consume_batch, &fn, sizeof(fn));
}

#define DRAIN_ROUNDS 10 /* a new buffer (new ring pages) per library per round */
#define DRAIN_TIMES 5	/* drains per mode per round, of the same records */
#define DRAIN_MODES 4

static const char *drain_mode[DRAIN_MODES] = {"consume", "hand", "floor", "batch"};

/* One timed drain of the `count` records the ring holds; ns per record.
 * Afterwards the tail goes back where it was, so the same records (still in
 * the ring: nothing writes meanwhile) are there for the next drain: every
 * mode reads the same bytes from the same cache state, and the time is the
 * reader's work, not the fill's after-effects. */
static double drain_once(const struct pb_api *api, struct perf_buffer *pb, struct region *r, int mode,
			 struct tally *t, unsigned count)
{
	uint64_t tail = r->mp->data_tail;
	t->records = 0;
	uint64_t got = 0;
	double t0 = now_ns();
	if (mode == 0) {
		api->consume(pb);
		got = t->records;
	} else if (mode == 1) {
		got = hand_drain(r);
	} else if (mode == 2) {
		read_floor(r);
		got = count;
	} else {
		api->consume_batch(pb, count_batch, t);
		got = t->records;
	}
	double dt = now_ns() - t0;
	if (got != count || count == 0) {
		fprintf(stderr, "drain %s %s: got %llu of %u\n", api->name, drain_mode[mode], (unsigned long long)got,
			count);
		exit(1);
	}
	__atomic_store_n(&r->mp->data_tail, tail, __ATOMIC_RELEASE);
	return dt / count;
}

static void drain_rows(const struct pb_api apis[2], unsigned n)
{
	static double per[2][DRAIN_MODES][DRAIN_ROUNDS * DRAIN_TIMES];
	for (int round = 0; round < DRAIN_ROUNDS; round++) {
		for (int k = 0; k < 2; k++) {
			int which = (round + k) % 2; /* alternate which library goes first */
			const struct pb_api *api = &apis[which];
			struct tally t = {0};
			struct perf_buffer *pb = api->new_(prod.map_fd, DRAIN_PAGES, count_sample, count_lost, &t, NULL);
			if (!pb) {
				perror("perf_buffer__new");
				exit(1);
			}
			struct region r;
			void *base;
			api->buffer(pb, 0, &base, &r.size);
			r.mp = base;
			r.data = (const uint8_t *)base + 4096;
			unsigned count = fill(n);
			/* An untimed pass of every mode first (rep -1): the mode
			 * that comes first after the fill would otherwise pay alone
			 * for the first touch of the ring through this mapping and
			 * for the caches the fill's syscall left (2x to 10x its
			 * usual time at 512 B). */
			for (int rep = -1; rep < DRAIN_TIMES; rep++)
				for (int m = 0; m < DRAIN_MODES; m++) {
					if (m == 3 && !api->consume_batch)
						continue;
					double ns = drain_once(api, pb, &r, m, &t, count);
					if (rep >= 0)
						per[which][m][round * DRAIN_TIMES + rep] = ns;
				}
			api->free_(pb);
		}
	}
	int total = DRAIN_ROUNDS * DRAIN_TIMES;
	for (int which = 0; which < 2; which++)
		for (int m = 0; m < DRAIN_MODES; m++) {
			if (m == 3 && !apis[which].consume_batch)
				continue;
			double *v = per[which][m];
			if (getenv("PERFBENCH_DUMP")) {
				fprintf(stderr, "%s %s %u:", apis[which].name, drain_mode[m], n);
				for (int i = 0; i < total; i++)
					fprintf(stderr, " %.2f", v[i]);
				fprintf(stderr, "\n");
			}
			double med = median(v, total);
			printf("{\"row\": \"drain_%s_%u\", \"lib\": \"%s\", \"ns_per_record\": %.3f, \"min\": %.3f, "
			       "\"max\": %.3f}\n",
			       drain_mode[m], n, apis[which].name, med, v[0], v[total - 1]);
		}
}

/* ---- stream rows: producer on CPU 0, reader in poll on CPU 1 ---- */

struct producer_arg {
	double seconds;
	unsigned rate;	 /* records/s; 0 = as fast as possible */
	unsigned size;
	int stamped;
	int ringbuf; /* into rbprod's BPF ring buffer instead of the perf event array */
	uint64_t produced;
	volatile int done;
};

static void emit_burst(struct producer_arg *a, unsigned burst)
{
	int ret;
	if (a->ringbuf)
		producer_emit_ringbuf(&rbprod, 0, a->size, 7, burst, &ret);
	else if (a->stamped)
		producer_emit_stamped(&prod, 0, a->size, burst, &ret);
	else
		producer_emit_det(&prod, 0, a->size, 7, burst, &ret);
}

/* Records per BPF_PROG_TEST_RUN call at full rate: 2000 (stream_full, the
 * syscall's cost spread thin), 64 (stream_full_c64) or 1 (stream_full_c1,
 * the producer's own syscall dominates). */
static unsigned full_rate_per_call = 2000;

static void *produce(void *p)
{
	struct producer_arg *a = p;
	pin(0);
	double end = now_ns() + a->seconds * 1e9;
	if (a->rate == 0) {
		while (now_ns() < end) {
			unsigned burst = full_rate_per_call;
			emit_burst(a, burst);
			a->produced += burst;
		}
	} else {
		/* High rates go in bursts of 1 ms worth: one syscall per record
		 * would cost more than the record. */
		unsigned burst = a->rate >= 20000 ? a->rate / 1000 : 1;
		double period = 1e9 * burst / a->rate, next = now_ns();
		while (next < end) {
			while (now_ns() < next)
				;
			emit_burst(a, burst);
			a->produced += burst;
			next += period;
			double slack = next - now_ns();
			if (slack > 60e3)
				usleep((useconds_t)((slack - 50e3) / 1e3));
		}
	}
	a->done = 1;
	return NULL;
}

enum attr_mode { ATTR_DEFAULT, ATTR_RAW64, ATTR_PERFBUF64 };

static struct tally *raw_tally;
static enum bpf_perf_event_ret raw_event(void *ctx, int cpu, struct perf_event_header *h)
{
	struct tally *t = ctx;
	(void)cpu;
	if (h->type == PERF_RECORD_SAMPLE) {
		if (t->lat_cap)
			latency_sample(ctx, cpu, (uint8_t *)h + 12, 0);
		else
			t->records++;
	} else if (h->type == PERF_RECORD_LOST) {
		t->lost += *(uint64_t *)((uint8_t *)h + 16);
	}
	return LIBBPF_PERF_EVENT_CONT;
}

static struct perf_buffer *open_mode(enum attr_mode mode, struct tally *t, perf_buffer_sample_fn cb)
{
	if (mode == ATTR_DEFAULT)
		return perf_buffer__new(prod.map_fd, 64, cb, count_lost, t, NULL);
	if (mode == ATTR_RAW64) {
		struct perf_event_attr attr = {.type = PERF_TYPE_SOFTWARE, .size = sizeof(attr),
					       .config = PERF_COUNT_SW_BPF_OUTPUT, .sample_type = PERF_SAMPLE_RAW,
					       .sample_period = 1, .wakeup_events = 64};
		raw_tally = t;
		return perf_buffer__new_raw(prod.map_fd, 64, &attr, raw_event, t, NULL);
	}
	const char *delay = getenv("PERFBENCH_DELAY_MS");
	struct perfbuf_opts_v1 o = {.sz = sizeof(o), .wakeup_events = 64, .max_delay_ms = delay ? (uint32_t)atoi(delay) : 1};
	return ext_new ? ext_new(prod.map_fd, 64, cb, count_lost, t, &o) : NULL;
}

struct stream_run {
	double wall_ns, cpu_ns;
	/* From the producer's start to the last poll or consume that delivered
	 * records (wall_ns when none did): the records/s of the stream rows.
	 * wall_ns also counts the last poll's idle timeout (up to 100 ms) once
	 * the producer stopped, which made a 100 k/s stream read 90.9 k/s. */
	double active_ns;
	uint64_t produced;
};

/* The reader run_reader drives: a perf buffer with either library's poll
 * and consume, or (rb set) libbpf's ring buffer. */
struct reader {
	int (*poll)(struct perf_buffer *, int);
	int (*consume)(struct perf_buffer *);
	struct perf_buffer *pb;
	struct ring_buffer *rb;
};

/* The producer on CPU 0 at `rate` records/s (0: as fast as it can;
 * (unsigned)-1: none) for `seconds`, this thread in poll(pb, 100) on CPU 1
 * until it stops, then one consume for what a batched reader still holds:
 * wall time, this thread's CPU time, records produced. `*records` is the
 * reader's count, read after each poll (one clock read per poll that
 * delivered something) for active_ns. */
static void run_reader(const struct reader *rd, const uint64_t *records, double seconds, unsigned rate,
		       unsigned size, int stamped, int ringbuf, struct stream_run *out)
{
	pin(1);
	struct producer_arg a = {.seconds = seconds, .rate = rate, .size = size, .stamped = stamped, .ringbuf = ringbuf};
	pthread_t th;
	double cpu0 = thread_cpu_ns(), t0 = now_ns(), last = 0;
	uint64_t seen = *records;
	if (rate != (unsigned)-1)
		pthread_create(&th, NULL, produce, &a);
	double end = t0 + seconds * 1e9;
	while (rate == (unsigned)-1 ? now_ns() < end : !a.done) {
		if (rd->rb)
			ring_buffer__poll(rd->rb, 100);
		else
			rd->poll(rd->pb, 100);
		if (*records != seen) {
			seen = *records;
			last = now_ns();
		}
	}
	out->wall_ns = now_ns() - t0;
	if (rate != (unsigned)-1)
		pthread_join(th, NULL);
	if (rd->rb)
		ring_buffer__consume(rd->rb);
	else
		rd->consume(rd->pb);
	if (*records != seen)
		last = now_ns();
	out->cpu_ns = thread_cpu_ns() - cpu0;
	out->active_ns = last ? last - t0 : out->wall_ns;
	out->produced = a.produced;
	pin(0);
}

static void run_stream(int (*poll)(struct perf_buffer *, int), int (*consume)(struct perf_buffer *),
		       struct perf_buffer *pb, const uint64_t *records, double seconds, unsigned rate, unsigned size,
		       int stamped, struct stream_run *out)
{
	struct reader rd = {.poll = poll, .consume = consume, .pb = pb};
	run_reader(&rd, records, seconds, rate, size, stamped, 0, out);
}

static const char *mode_name[] = {"default", "raw_wakeup64", "perfbuf_wakeup64_delay1ms"};

/* libperfbuf only: batch switches (adaptive wake-ups at work) or epoll
 * reports of a ring ready (wakeups), over all rings; -1 elsewhere. */
static long long ring_total(struct perf_buffer *pb, int wakeups)
{
	if (!ext_ring_stats)
		return -1;
	long long n = 0;
	for (size_t i = 0; i < perf_buffer__buffer_cnt(pb); i++) {
		struct ring_stats_v1 st = {.sz = sizeof(st)};
		if (ext_ring_stats(pb, i, &st) == 0)
			n += (long long)(wakeups ? st.wakeups : st.batch_switches);
	}
	return n;
}

static long long batch_switches(struct perf_buffer *pb)
{
	return ring_total(pb, 0);
}

static void stream_row(const char *row, enum attr_mode mode, double seconds, unsigned rate, int latency)
{
	struct tally t = {0};
	if (latency) {
		t.lat_cap = 2000000;
		t.lat = malloc(t.lat_cap * sizeof(double));
	}
	struct perf_buffer *pb = open_mode(mode, &t, latency ? latency_sample : count_sample);
	if (!pb)
		return;
	struct stream_run sr;
	run_stream(perf_buffer__poll, perf_buffer__consume, pb, &t.records, seconds, rate, latency ? 16 : 64, latency,
		   &sr);
	double active = sr.active_ns, cpu = sr.cpu_ns;
	printf("{\"row\": \"%s\", \"lib\": \"%s\", \"mode\": \"%s\", \"produced\": %llu, \"delivered\": %llu, "
	       "\"lost\": %llu, \"records_per_s\": %.0f, \"reader_cpu_ns_per_record\": %.1f, \"reader_cpu_ms\": %.2f, "
	       "\"wall_ms\": %.1f, \"batch_switches\": %lld, \"ring_wakeups\": %lld",
	       row, lib_name, mode == ATTR_DEFAULT ? default_label : mode_name[mode], (unsigned long long)sr.produced,
	       (unsigned long long)t.records, (unsigned long long)t.lost, t.records / (active / 1e9),
	       t.records ? cpu / t.records : 0.0, cpu / 1e6, sr.wall_ns / 1e6, batch_switches(pb), ring_total(pb, 1));
	if (latency && t.lat_n) {
		qsort(t.lat, t.lat_n, sizeof(double), cmp_double);
		printf(", \"lat_p50_us\": %.1f, \"lat_p99_us\": %.1f, \"lat_max_us\": %.1f", t.lat[t.lat_n / 2] / 1e3,
		       t.lat[(size_t)(t.lat_n * 0.99)] / 1e3, t.lat[t.lat_n - 1] / 1e3);
	}
	printf("}\n");
	free(t.lat);
	perf_buffer__free(pb);
}

/* ---- ceiling rows: what the kernel's perf output path allows ---- */

#define CEILING_PAGES 64

/* Not a usable reader: one BPF output event per CPU that wakes its reader
 * only when half its ring is full (wakeup_watermark), read by a plain loop
 * that waits on epoll at most 1 ms and drains every ring, counting samples
 * and lost records. No per-record or per-batch wake-up costs the producer
 * anything; a record can wait up to 1 ms, and a reader this lax loses
 * whatever a hiccup of its own overflows. It shows how fast the perf
 * output path can go with the same producer, 64 pages per CPU. */
static void ceiling_row(const char *row, double seconds)
{
	long page = sysconf(_SC_PAGESIZE);
	int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	size_t data = (size_t)CEILING_PAGES * (size_t)page;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct {
		int fd;
		struct perf_event_mmap_page *mp;
	} rings[16];
	int n = ncpu < 16 ? ncpu : 16;
	for (int c = 0; c < n; c++) {
		struct perf_event_attr attr = {.type = PERF_TYPE_SOFTWARE, .size = sizeof(attr),
					       .config = PERF_COUNT_SW_BPF_OUTPUT, .sample_type = PERF_SAMPLE_RAW,
					       .sample_period = 1, .watermark = 1, .wakeup_watermark = (uint32_t)(data / 2)};
		rings[c].fd = (int)syscall(SYS_perf_event_open, &attr, -1, c, -1, PERF_FLAG_FD_CLOEXEC);
		if (rings[c].fd < 0) {
			perror("ceiling: perf_event_open");
			exit(1);
		}
		rings[c].mp = mmap(NULL, (size_t)page + data, PROT_READ | PROT_WRITE, MAP_SHARED, rings[c].fd, 0);
		if (rings[c].mp == MAP_FAILED) {
			perror("ceiling: mmap");
			exit(1);
		}
		ioctl(rings[c].fd, PERF_EVENT_IOC_ENABLE, 0);
		uint32_t key = (uint32_t)c, val = (uint32_t)rings[c].fd;
		if (bpf_map_update_elem(prod.map_fd, &key, &val, BPF_ANY)) {
			perror("ceiling: map update");
			exit(1);
		}
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)c};
		epoll_ctl(ep, EPOLL_CTL_ADD, rings[c].fd, &ev);
	}
	struct tally t = {0};
	pin(1);
	struct producer_arg a = {.seconds = seconds, .size = 64};
	pthread_t th;
	double cpu0 = thread_cpu_ns(), t0 = now_ns(), last = 0;
	pthread_create(&th, NULL, produce, &a);
	for (int stopping = 0;; stopping = a.done) {
		struct epoll_event evs[16];
		epoll_wait(ep, evs, 16, 1);
		uint64_t before = t.records;
		for (int c = 0; c < n; c++) {
			struct perf_event_mmap_page *mp = rings[c].mp;
			const uint8_t *base = (const uint8_t *)mp + page;
			uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE), tail = mp->data_tail;
			while (tail != head) {
				const struct perf_event_header *h = (const void *)(base + (tail & (data - 1)));
				if (h->type == PERF_RECORD_SAMPLE)
					t.records++;
				else if (h->type == PERF_RECORD_LOST) /* 8-aligned: never wraps mid-field here */
					t.lost += *(const uint64_t *)(base + ((tail + 16) & (data - 1)));
				tail += h->size;
			}
			__atomic_store_n(&mp->data_tail, tail, __ATOMIC_RELEASE);
		}
		if (t.records != before)
			last = now_ns();
		if (stopping)
			break;
	}
	double wall = now_ns() - t0;
	pthread_join(th, NULL);
	double cpu = thread_cpu_ns() - cpu0;
	pin(0);
	printf("{\"row\": \"%s\", \"lib\": \"ceiling\", \"mode\": \"raw_half_ring_1ms\", \"produced\": %llu, "
	       "\"delivered\": %llu, \"lost\": %llu, \"records_per_s\": %.0f, \"reader_cpu_ns_per_record\": %.1f, "
	       "\"reader_cpu_ms\": %.2f, \"wall_ms\": %.1f}\n",
	       row, (unsigned long long)a.produced, (unsigned long long)t.records, (unsigned long long)t.lost,
	       t.records / ((last ? last - t0 : wall) / 1e9), t.records ? cpu / t.records : 0.0, cpu / 1e6, wall / 1e6);
	for (int c = 0; c < n; c++) {
		uint32_t key = (uint32_t)c;
		bpf_map_delete_elem(prod.map_fd, &key);
		munmap(rings[c].mp, (size_t)page + data);
		close(rings[c].fd);
	}
	close(ep);
}

/* ---- ringbuf rows: the same producer shape into a BPF ring buffer ---- */

static int ringbuf_count(void *ctx, void *data, size_t size)
{
	(void)data;
	(void)size;
	((struct tally *)ctx)->records++;
	return 0;
}

/* The perf rows' total: 64 pages per CPU, times the CPUs (rounded up to a
 * power of 2, as a ring buffer's size must be): 512 KiB on 2 CPUs. */
static unsigned ringbuf_bytes(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_CONF), page = sysconf(_SC_PAGESIZE);
	unsigned want = (unsigned)(64 * page * (cpus > 0 ? cpus : 1)), bytes = (unsigned)page;
	while (bytes < want)
		bytes *= 2;
	return bytes;
}

/* CPU 0's IRQ work interrupts so far (/proc/interrupts' IWI line): the
 * kernel's wake-ups of a ring buffer reader are queued as IRQ work on the
 * producer's CPU. -1 when the line is missing. */
static long long irq_work_cpu0(void)
{
	FILE *f = fopen("/proc/interrupts", "r");
	char line[4096];
	long long n = -1;
	while (f && fgets(line, sizeof(line), f)) {
		char *p = line;
		while (*p == ' ')
			p++;
		if (!strncmp(p, "IWI:", 4)) {
			n = strtoll(p + 4, NULL, 10);
			break;
		}
	}
	if (f)
		fclose(f);
	return n;
}

/* As stream_row with ring_buffer__new / ring_buffer__poll(rb, 100) (libbpf's,
 * or libperfbuf's under LD_PRELOAD)
 * and a callback that counts. The program counts the bpf_ringbuf_output
 * calls that failed (the ring was full) in its own map: reported as lost. */
static void ringbuf_row(const char *row, double seconds, unsigned rate)
{
	struct tally t = {0};
	struct ring_buffer *rb = ring_buffer__new(rbprod.map_fd, ringbuf_count, &t, NULL);
	if (!rb) {
		perror("ring_buffer__new");
		exit(1);
	}
	struct ringbuf_producer_stats st0 = {0}, st1 = {0};
	if (producer_ringbuf_stats(&rbprod, &st0)) {
		perror("ring buffer producer stats");
		exit(1);
	}
	struct reader rd = {.rb = rb};
	struct stream_run sr;
	long long iwi0 = irq_work_cpu0();
	run_reader(&rd, &t.records, seconds, rate, 64, 0, 1, &sr);
	long long iwi = iwi0 < 0 ? -1 : irq_work_cpu0() - iwi0;
	producer_ringbuf_stats(&rbprod, &st1);
	unsigned long long failed = (unsigned long long)(st1.output_failed - st0.output_failed);
	double cpu = sr.cpu_ns;
	printf("{\"row\": \"%s\", \"lib\": \"%s\", \"mode\": \"%s\", \"producer_irq_work\": %lld, \"produced\": %llu, "
	       "\"delivered\": %llu, \"lost\": %llu, \"ringbuf_output_failed\": %llu, \"ringbuf_last_error\": %lld, "
	       "\"ringbuf_bytes\": %u, \"records_per_s\": %.0f, \"reader_cpu_ns_per_record\": %.1f, "
	       "\"reader_cpu_ms\": %.2f, \"wall_ms\": %.1f}\n",
	       row, lib_name, strcmp(default_label, "fast") ? "ringbuf" : "ringbuf_fast", iwi,
	       (unsigned long long)sr.produced, (unsigned long long)t.records, failed, failed,
	       failed ? (long long)st1.last_error : 0LL, ringbuf_bytes(), t.records / (sr.active_ns / 1e9),
	       t.records ? cpu / t.records : 0.0, cpu / 1e6, sr.wall_ns / 1e6);
	if (t.records + failed != sr.produced)
		fprintf(stderr, "%s ringbuf: delivered %llu + failed %llu != produced %llu\n", row,
			(unsigned long long)t.records, failed, (unsigned long long)sr.produced);
	ring_buffer__free(rb);
}

/* ---- quiet rows: both libraries in one process, alternating ---- */

#define QUIET_SEGMENTS 8   /* per library and row */
#define QUIET_SECONDS 0.5  /* per segment */

/* Reader CPU when little happens: 1 k records/s (stream_1k) and none at
 * all (idle), libbpf's default attr. A few microseconds per wake-up are
 * the figure, and this machine's state drifts by as much between runs a
 * few seconds apart, so the two libraries alternate in short segments in
 * one process, each row the median of its segments. */
static void quiet_rows(const struct pb_api apis[2])
{
	/* With PERFBUF_ADAPTIVE=1 in this process's environment the libperfbuf
	 * segments run its fast mode; the libbpf segments they alternate with
	 * (on which the variable has no effect) carry the same label, so each
	 * is compared with the libbpf run beside it. */
	const char *a = getenv("PERFBUF_ADAPTIVE");
	const char *quiet_label = a && !strcmp(a, "1") ? "fast" : "default";
	static const struct {
		const char *row;
		unsigned rate;
	} rows[] = {{"stream_1k", 1000}, {"idle", (unsigned)-1}};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		double per_record[2][QUIET_SEGMENTS], cpu_ms[2][QUIET_SEGMENTS];
		uint64_t produced[2] = {0}, delivered[2] = {0}, lost[2] = {0};
		double wall[2] = {0};
		for (int seg = 0; seg < QUIET_SEGMENTS; seg++)
			for (int k = 0; k < 2; k++) {
				int which = (seg + k) % 2;
				const struct pb_api *api = &apis[which];
				struct tally t = {0};
				struct perf_buffer *pb = api->new_(prod.map_fd, 64, count_sample, count_lost, &t, NULL);
				if (!pb) {
					perror("perf_buffer__new");
					exit(1);
				}
				struct stream_run sr;
				run_stream(api->poll, api->consume, pb, &t.records, QUIET_SECONDS, rows[i].rate, 64, 0,
					   &sr);
				api->free_(pb);
				per_record[which][seg] = t.records ? sr.cpu_ns / t.records : 0;
				cpu_ms[which][seg] = sr.cpu_ns / 1e6 / (sr.wall_ns / 1e9); /* per second */
				produced[which] += sr.produced;
				delivered[which] += t.records;
				lost[which] += t.lost;
				wall[which] += sr.wall_ns;
			}
		for (int which = 0; which < 2 && getenv("PERFBENCH_DUMP"); which++) {
			fprintf(stderr, "%s %s us/record, cpu ms/s:", apis[which].name, rows[i].row);
			for (int seg = 0; seg < QUIET_SEGMENTS; seg++)
				fprintf(stderr, " %.2f/%.3f", per_record[which][seg] / 1e3, cpu_ms[which][seg]);
			fprintf(stderr, "\n");
		}
		for (int which = 0; which < 2; which++)
			printf("{\"row\": \"%s\", \"lib\": \"%s\", \"mode\": \"%s\", \"produced\": %llu, "
			       "\"delivered\": %llu, \"lost\": %llu, \"records_per_s\": %.0f, "
			       "\"reader_cpu_ns_per_record\": %.1f, \"reader_cpu_ms\": %.3f}\n",
			       rows[i].row, apis[which].name, quiet_label, (unsigned long long)produced[which],
			       (unsigned long long)delivered[which], (unsigned long long)lost[which],
			       delivered[which] / (wall[which] / 1e9), median(per_record[which], QUIET_SEGMENTS),
			       median(cpu_ms[which], QUIET_SEGMENTS));
	}
}

/* For callgrind: fill a ring with `records` 8-byte samples (the kernel's
 * work, invisible to valgrind) and drain it once through `how`. Run with 0
 * and with N records, the difference / N is instructions per record. */
static void icount(const char *how, unsigned records)
{
	struct tally t = {0};
	/* 4 MiB: room for 100k 24-byte records. */
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 1024, count_sample, count_lost, &t, NULL);
	int ret = 0;
	if (records)
		producer_emit_det(&prod, 0, 8, 1, records, &ret);
	if (!strcmp(how, "batch") && ext_consume_batch) {
		ext_consume_batch(pb, count_batch, &t);
	} else if (!strcmp(how, "hand")) {
		struct region r;
		void *base;
		perf_buffer__buffer(pb, 0, &base, &r.size);
		r.mp = base;
		r.data = (const uint8_t *)base + 4096;
		t.records = hand_drain(&r);
	} else {
		perf_buffer__consume(pb);
	}
	fprintf(stderr, "icount %s: %llu records\n", how, (unsigned long long)t.records);
	perf_buffer__free(pb);
}

int main(int argc, char **argv)
{
	const char *only = argc > 1 ? argv[1] : "";
	setvbuf(stdout, NULL, _IOLBF, 0);
	void *fn = dlsym(RTLD_DEFAULT, "perfbuf_new");
	if (fn) {
		lib_name = "libperfbuf";
		memcpy(&ext_new, &fn, sizeof(fn));
		fn = dlsym(RTLD_DEFAULT, "perfbuf_consume_batch");
		memcpy(&ext_consume_batch, &fn, sizeof(fn));
		fn = dlsym(RTLD_DEFAULT, "perfbuf_ring_stats");
		memcpy(&ext_ring_stats, &fn, sizeof(fn));
		const char *a = getenv("PERFBUF_ADAPTIVE");
		if (a && !strcmp(a, "1"))
			default_label = "fast";
	}
	int fast = !strcmp(default_label, "fast");
	Dl_info info;
	void *pbnew = (void *)perf_buffer__new;
	if (dladdr(pbnew, &info) && !strstr(info.dli_fname, lib_name)) {
		fprintf(stderr, "perf_buffer__new comes from %s, not %s\n", info.dli_fname, lib_name);
		return 1;
	}
	int err = producer_open(&prod, 0);
	if (err) {
		fprintf(stderr, "cannot create the BPF producer: %s\n", strerror(-err));
		return 1;
	}
	pin(0);
	if (!strcmp(only, "icount")) {
		icount(argc > 2 ? argv[2] : "consume", argc > 3 ? (unsigned)atoi(argv[3]) : 0);
		producer_close(&prod);
		return 0;
	}
	int drain = !strncmp("drain", only, strlen(only)), quiet = !strncmp("quiet", only, strlen(only));
	if (drain || quiet) {
		/* Both libraries in this process: needs libbpf as linked, not
		 * replaced by LD_PRELOAD, and libperfbuf's path. */
		const char *path = getenv("PERFBENCH_LIBPERFBUF");
		if (ext_new || !path) {
			fprintf(stderr, "drain and quiet rows: run without LD_PRELOAD, with PERFBENCH_LIBPERFBUF=path\n");
			return 1;
		}
		struct pb_api apis[2];
		load_api(&apis[0], "libbpf", "libbpf.so.1", 0);
		load_api(&apis[1], "libperfbuf", path, 1);
		for (unsigned i = 0, sizes[] = {8, 64, 512}; drain && i < 3; i++)
			drain_rows(apis, sizes[i]);
		if (quiet)
			quiet_rows(apis);
	}
	/* A fast process runs only the rows with libbpf's default attr. */
	if (!strncmp("stream", only, strlen(only))) {
		for (int m = 0; m < (fast ? 1 : 3); m++)
			stream_row("stream_full", m, 1.0, 0, 0);
		stream_row("stream_100k", ATTR_DEFAULT, 1.0, 100000, 0);
		/* Fewer records per producer call: libbpf's default attr (the
		 * fast mode in a fast process), and the ceiling beside libbpf. */
		static const struct {
			const char *row;
			unsigned per_call;
		} shapes[] = {{"stream_full_c64", 64}, {"stream_full_c1", 1}};
		for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
			full_rate_per_call = shapes[i].per_call;
			stream_row(shapes[i].row, ATTR_DEFAULT, 1.0, 0, 0);
			if (!ext_new)
				ceiling_row(shapes[i].row, 1.0);
		}
		full_rate_per_call = 2000;
		if (!ext_new)
			ceiling_row("stream_full", 1.0);
	}
	if (!strncmp("latency", only, strlen(only))) {
		for (int m = 0; m < (fast ? 1 : 3); m++)
			stream_row("latency_10k", m, 0.5, 10000, 1);
		stream_row("latency_full", ATTR_DEFAULT, 0.5, 0, 1);
		if (!fast)
			stream_row("latency_full", ATTR_PERFBUF64, 0.5, 0, 1);
	}
	if (!strncmp("rings", only, strlen(only)) && !fast)
		rings_rows(lib_name);
	if (!strncmp("ringbuf", only, strlen(only))) {
		err = producer_open_ringbuf(&rbprod, ringbuf_bytes());
		if (err) {
			fprintf(stderr, "cannot create the BPF ring buffer producer: %s\n", strerror(-err));
			return 1;
		}
		ringbuf_row("stream_full", 1.0, 0);
		ringbuf_row("stream_100k", 1.0, 100000);
		full_rate_per_call = 64;
		ringbuf_row("stream_full_c64", 1.0, 0);
		full_rate_per_call = 1;
		ringbuf_row("stream_full_c1", 1.0, 0);
		full_rate_per_call = 2000;
		producer_close_ringbuf(&rbprod);
	}
	producer_close(&prod);
	return 0;
}
