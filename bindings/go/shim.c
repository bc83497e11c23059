#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/bpf.h>

#include "shim.h"
#include "_cgo_export.h"

struct perfbuf_go_stage *perfbuf_go_stage_new(void)
{
	return calloc(1, sizeof(struct perfbuf_go_stage));
}

void perfbuf_go_stage_free(struct perfbuf_go_stage *st)
{
	if (!st)
		return;
	free(st->data);
	free(st->ents);
	free(st->batch);
	free(st);
}

void perfbuf_go_stage_reset(uintptr_t stage)
{
	struct perfbuf_go_stage *st = (struct perfbuf_go_stage *)stage;
	st->len = st->n = st->marked = 0;
}

/* Room for `ents` more entries and `size` more bytes (doubling), or 0. */
static int stage_reserve(struct perfbuf_go_stage *st, size_t ents, size_t size)
{
	if (st->ents_cap - st->n < ents) {
		size_t cap = st->ents_cap ? st->ents_cap : 256;
		while (cap - st->n < ents)
			cap *= 2;
		void *p = realloc(st->ents, cap * sizeof(*st->ents));
		if (!p)
			return 0;
		st->ents = p;
		st->ents_cap = cap;
	}
	if (st->cap - st->len < size) {
		size_t cap = st->cap ? st->cap : 16384;
		while (cap - st->len < size)
			cap *= 2;
		void *p = realloc(st->data, cap);
		if (!p)
			return 0;
		st->data = p;
		st->cap = cap;
	}
	return 1;
}

/* Room for one more entry and `size` more bytes, or 0. */
static int stage_room(struct perfbuf_go_stage *st, size_t size)
{
	return stage_reserve(st, 1, size);
}

/* Entries a batch read takes at most, and the data room it gets at least
 * (more when a record needs it: -EMSGSIZE says how much). */
#define BATCH_ENTRIES 4096
#define BATCH_MIN_DATA (256 * 1024)

/* One perfbuf_poll_batch (wait) or perfbuf_read_batch into the stage's
 * free room: the entries, or 0, or -errno. */
static int stage_batch(struct perf_buffer *pb, struct perfbuf_go_stage *st, int timeout_ms, int wait)
{
	if (!st->batch && !(st->batch = malloc(BATCH_ENTRIES * sizeof(*st->batch))))
		return -ENOMEM;
	size_t want = BATCH_MIN_DATA;
	for (;;) {
		if (!stage_reserve(st, BATCH_ENTRIES, want))
			return -ENOMEM;
		struct perfbuf_read_batch b = {.sz = sizeof(b), .data = st->data + st->len, .data_size = st->cap - st->len,
					       .entries = st->batch, .entry_cnt = BATCH_ENTRIES};
		int ret = wait ? perfbuf_poll_batch(pb, &b, timeout_ms) : perfbuf_read_batch(pb, &b);
		if (ret == -EMSGSIZE && b.needed > want) {
			want = b.needed;
			continue;
		}
		if (ret <= 0)
			return ret;
		for (int i = 0; i < ret; i++) {
			const struct perfbuf_batch_entry *be = &st->batch[i];
			struct perfbuf_go_entry *e = &st->ents[st->n++];
			e->cpu = (int32_t)be->cpu;
			e->size = be->size;
			e->lost = be->lost;
			e->off = st->len + be->offset;
			e->remaining = 0;
			e->type = be->lost ? PERF_RECORD_LOST : PERF_RECORD_SAMPLE;
			e->err = 0;
		}
		st->len += (b.data_used + 7) & ~(size_t)7;
		/* Full (entries, or data beyond a record's worth of slack): more waits. */
		if (ret == BATCH_ENTRIES || b.data_size - b.data_used < 4096)
			st->full = 1;
		return ret;
	}
}

static void stage_sample(void *ctx, int cpu, void *data, __u32 size)
{
	struct perfbuf_go_stage *st = ctx;
	/* 8-byte aligned copies, as the ring's. */
	size_t room = ((size_t)size + 7) & ~(size_t)7;
	if (!stage_room(st, room)) {
		st->dropped++;
		return;
	}
	struct perfbuf_go_entry *e = &st->ents[st->n++];
	e->cpu = cpu;
	e->size = size;
	e->lost = 0;
	e->off = st->len;
	e->remaining = 0;
	e->type = PERF_RECORD_SAMPLE;
	e->err = 0;
	memcpy(st->data + st->len, data, size);
	st->len += room;
}

static void stage_lost(void *ctx, int cpu, __u64 cnt)
{
	struct perfbuf_go_stage *st = ctx;
	if (!stage_room(st, 0)) {
		st->dropped += cnt;
		return;
	}
	struct perfbuf_go_entry *e = &st->ents[st->n++];
	e->cpu = cpu;
	e->size = 0;
	e->lost = cnt;
	e->off = st->len;
	e->remaining = 0;
	e->type = PERF_RECORD_LOST;
	e->err = 0;
}

int perfbuf_go_drain(uintptr_t buffer, uintptr_t stage, int timeout_ms, int consume)
{
	struct perf_buffer *pb = (struct perf_buffer *)buffer;
	struct perfbuf_go_stage *st = (struct perfbuf_go_stage *)stage;
	st->full = 0;
	int ret = stage_batch(pb, st, timeout_ms, !consume);
	/* A consume takes what the rings hold, as perf_buffer__consume does,
	 * however many batches that is (bounded: a producer outrunning the
	 * copy would keep it here). */
	for (int more = 0; consume && ret > 0 && st->full && more < 64; more++) {
		st->full = 0;
		int next = stage_batch(pb, st, 0, 0);
		if (next < 0)
			ret = next;
		else
			ret += next;
		if (next <= 0)
			break;
	}
	/* The entries come in runs of one CPU: one look at its ring per run. */
	int cpu = -2;
	uint64_t pending = 0;
	for (; st->marked < st->n; st->marked++) {
		struct perfbuf_go_entry *e = &st->ents[st->marked];
		if (e->cpu != cpu) {
			cpu = e->cpu;
			pending = 0;
			size_t cnt = perfbuf_buffer_cnt(pb);
			for (size_t i = 0; i < cnt; i++)
				if (perfbuf_buffer_cpu(pb, i) == cpu) {
					pending = perfbuf_go_pending(buffer, i);
					break;
				}
		}
		e->remaining = pending;
	}
	return ret;
}

struct perf_buffer *perfbuf_go_new(int map_fd, size_t page_cnt, struct perfbuf_go_stage *stage, int use_opts,
				   uint32_t wakeup_events, uint32_t wakeup_bytes, uint32_t max_delay_ms,
				   uint32_t flags, const int *cpus, int cpu_cnt, int output_counts_fd, int *err)
{
	struct perfbuf_opts o;
	/* libperfbuf checks that the padding is zero too. */
	memset(&o, 0, sizeof(o));
	o.sz = sizeof(o);
	o.wakeup_events = wakeup_events;
	o.wakeup_bytes = wakeup_bytes;
	o.max_delay_ms = max_delay_ms;
	o.flags = flags;
	o.cpus = cpus;
	o.cpu_cnt = cpu_cnt;
	o.output_counts_fd = output_counts_fd;
	struct perf_buffer *pb =
		perfbuf_new(map_fd, page_cnt, stage_sample, stage_lost, stage, use_opts ? &o : NULL);
	*err = pb ? 0 : errno;
	return pb;
}

uint64_t perfbuf_go_pending(uintptr_t buffer, size_t idx)
{
	struct perf_buffer *pb = (struct perf_buffer *)buffer;
	struct perfbuf_ring_stats st = {.sz = sizeof(st)};
	return perfbuf_ring_stats(pb, idx, &st) == 0 ? st.pending_bytes : 0;
}

int perfbuf_go_drain_ring(uintptr_t buffer, uintptr_t stage, size_t idx)
{
	struct perf_buffer *pb = (struct perf_buffer *)buffer;
	struct perfbuf_go_stage *st = (struct perfbuf_go_stage *)stage;
	/* A BPF output event's layout: PERF_SAMPLE_RAW only. */
	struct perfbuf_decode_attr attr = {.sz = sizeof(attr), .sample_type = PERF_SAMPLE_RAW};
	uint64_t head = perfbuf_go_pending(buffer, idx), done = 0;
	int cpu = perfbuf_buffer_cpu(pb, idx), staged = 0, ret = 0;
	while (done < head) {
		const struct perf_event_header *rec;
		size_t len;
		if ((ret = perfbuf_ring_peek(pb, idx, &rec, &len)) <= 0)
			break;
		struct perfbuf_sample s = {.sz = sizeof(s)};
		int err = perfbuf_decode(rec, len, &attr, &s);
		size_t size = err == 0 && s.record_type == PERF_RECORD_SAMPLE ? (size_t)s.raw_size : 0;
		if (size > UINT32_MAX) {
			err = -EBADMSG;
			size = 0;
		}
		/* Not consumed when there is no memory: the next drain retries. */
		if (!stage_room(st, (size + 7) & ~(size_t)7)) {
			ret = -ENOMEM;
			break;
		}
		struct perfbuf_go_entry *e = &st->ents[st->n++];
		e->cpu = cpu;
		e->size = (uint32_t)size;
		e->lost = err == 0 && s.record_type == PERF_RECORD_LOST ? s.lost : 0;
		e->off = st->len;
		e->type = s.record_type;
		e->err = err;
		if (size) {
			memcpy(st->data + st->len, s.raw, size);
			st->len += (size + 7) & ~(size_t)7;
		}
		if ((ret = perfbuf_ring_advance(pb, idx)) < 0)
			break;
		done += len;
		e->remaining = head > done ? head - done : 0;
		staged++;
	}
	st->marked = st->n;
	int pub = perfbuf_ring_publish(pb, idx);
	if (ret < 0)
		return ret;
	return pub < 0 ? pub : staged;
}

int perfbuf_go_map_slot(int map_fd, uint32_t key, int fd)
{
	union bpf_attr attr;
	uint32_t value = (uint32_t)fd;
	memset(&attr, 0, sizeof(attr));
	attr.map_fd = (uint32_t)map_fd;
	attr.key = (uint64_t)(uintptr_t)&key;
	if (fd >= 0) {
		attr.value = (uint64_t)(uintptr_t)&value;
		attr.flags = BPF_ANY;
	}
	long ret = syscall(__NR_bpf, fd >= 0 ? BPF_MAP_UPDATE_ELEM : BPF_MAP_DELETE_ELEM, &attr, sizeof(attr));
	return ret < 0 ? -errno : 0;
}

int perfbuf_go_peek(struct perf_buffer *pb, size_t idx, void *dst, size_t cap, size_t *size)
{
	const struct perf_event_header *rec;
	int ret = perfbuf_ring_peek(pb, idx, &rec, size);
	if (ret <= 0)
		return ret;
	if (*size > cap)
		return 2;
	memcpy(dst, rec, *size);
	return 1;
}

static int record_tramp(void *ctx, const struct perfbuf_event_record *rec)
{
	perfbufGoEventRecord((uintptr_t)ctx, (struct perfbuf_event_record *)rec);
	return LIBBPF_PERF_EVENT_CONT;
}

struct perf_buffer *perfbuf_go_events_reader(struct perfbuf_events *set, uintptr_t handle, int *err)
{
	struct perf_buffer *pb = perfbuf_events_decoded_reader(set, record_tramp, (void *)handle);
	*err = pb ? 0 : errno;
	return pb;
}

int perfbuf_go_decode_record(const struct perfbuf_events *set, uint32_t cpu, const void *rec, size_t len,
			     uintptr_t handle)
{
	int ret = perfbuf_events_decode_record(set, cpu, rec, len, record_tramp, (void *)handle);
	return ret == LIBBPF_PERF_EVENT_CONT ? 0 : ret;
}

int perfbuf_go_field(const struct perfbuf_events *set, int ev, const void *raw, size_t raw_size, const char *name,
		     uint32_t *kind, int64_t *i, uint64_t *u, size_t *off, size_t *len)
{
	struct perfbuf_field f = {.sz = sizeof(f)};
	int ret = perfbuf_events_field(set, ev, raw, raw_size, name, &f);
	if (ret < 0)
		return ret;
	*kind = f.kind;
	*i = f.i;
	*u = f.u;
	*off = f.data ? (size_t)((const char *)f.data - (const char *)raw) : 0;
	*len = f.len;
	return 0;
}

/* ---- BPF ring buffers ---- */

static struct {
	struct ring_buffer *(*new_rb)(int, ring_buffer_sample_fn, void *, const struct ring_buffer_opts *);
	void (*free_rb)(struct ring_buffer *);
	struct ring *(*ring)(struct ring_buffer *, unsigned int);
	int (*consume_n)(struct ring *, size_t);
	size_t (*avail)(const struct ring *);
	size_t (*size)(const struct ring *);
} rbf;
static pthread_once_t rbf_once = PTHREAD_ONCE_INIT;

/* The global lookup binds these names to whichever library came first on
 * the link line; a handle on libperfbuf looks in it first. */
static void rbf_resolve(void)
{
	rbf.new_rb = ring_buffer__new;
	rbf.free_rb = ring_buffer__free;
	rbf.ring = ring_buffer__ring;
	rbf.consume_n = ring__consume_n;
	rbf.avail = ring__avail_data_size;
	rbf.size = ring__size;
	void *lib = dlopen("libperfbuf.so.0", RTLD_LAZY | RTLD_NOLOAD);
	if (!lib)
		return;
	void *f[6] = {dlsym(lib, "ring_buffer__new"),	   dlsym(lib, "ring_buffer__free"),
		      dlsym(lib, "ring_buffer__ring"),	   dlsym(lib, "ring__consume_n"),
		      dlsym(lib, "ring__avail_data_size"), dlsym(lib, "ring__size")};
	for (int i = 0; i < 6; i++)
		if (!f[i])
			return;
	memcpy(&rbf.new_rb, &f[0], sizeof(f[0]));
	memcpy(&rbf.free_rb, &f[1], sizeof(f[1]));
	memcpy(&rbf.ring, &f[2], sizeof(f[2]));
	memcpy(&rbf.consume_n, &f[3], sizeof(f[3]));
	memcpy(&rbf.avail, &f[4], sizeof(f[4]));
	memcpy(&rbf.size, &f[5], sizeof(f[5]));
	/* The handle stays open: the library is linked in for good anyway. */
}

static int rb_sample(void *ctx, void *data, size_t size)
{
	struct perfbuf_go_rb *h = ctx;
	h->size = size;
	h->spilled = size > h->cap;
	if (!h->spilled) {
		if (size)
			memcpy(h->dst, data, size);
		return 0;
	}
	if (size > h->spill_cap) {
		void *p = realloc(h->spill, size);
		if (!p)
			return -ENOMEM; /* the record is lost: libbpf's rule for a failing callback */
		h->spill = p;
		h->spill_cap = size;
	}
	memcpy(h->spill, data, size);
	return 0;
}

struct perfbuf_go_rb *perfbuf_go_rb_new(int map_fd, int *err)
{
	pthread_once(&rbf_once, rbf_resolve);
	struct perfbuf_go_rb *h = calloc(1, sizeof(*h));
	if (!h) {
		*err = ENOMEM;
		return NULL;
	}
	h->rb = rbf.new_rb(map_fd, rb_sample, h, NULL);
	if (!h->rb) {
		*err = errno;
		free(h);
		return NULL;
	}
	h->ring = rbf.ring(h->rb, 0);
	if (!h->ring) {
		*err = errno ? errno : EINVAL;
		rbf.free_rb(h->rb);
		free(h);
		return NULL;
	}
	*err = 0;
	return h;
}

int perfbuf_go_rb_read(uintptr_t rb, void *dst, size_t cap)
{
	struct perfbuf_go_rb *h = (struct perfbuf_go_rb *)rb;
	h->dst = dst;
	h->cap = dst ? cap : 0;
	h->size = 0;
	int ret = rbf.consume_n(h->ring, 1);
	h->dst = NULL;
	if (ret <= 0)
		return ret;
	h->remaining = rbf.avail(h->ring);
	return h->spilled ? PERFBUF_GO_RB_SPILLED : PERFBUF_GO_RB_RECORD;
}

size_t perfbuf_go_rb_size(const struct perfbuf_go_rb *rb)
{
	return rbf.size(rb->ring);
}

void perfbuf_go_rb_free(struct perfbuf_go_rb *rb)
{
	if (!rb)
		return;
	rbf.free_rb(rb->rb);
	free(rb->spill);
	free(rb);
}
