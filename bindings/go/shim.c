#include <errno.h>
#include <string.h>

#include "shim.h"
#include "_cgo_export.h"

static void sample_tramp(void *ctx, int cpu, void *data, __u32 size)
{
	perfbufGoSample((uintptr_t)ctx, cpu, data, size);
}

static void lost_tramp(void *ctx, int cpu, __u64 cnt)
{
	perfbufGoLost((uintptr_t)ctx, cpu, cnt);
}

struct perf_buffer *perfbuf_go_new(int map_fd, size_t page_cnt, uintptr_t handle, int use_opts,
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
		perfbuf_new(map_fd, page_cnt, sample_tramp, lost_tramp, (void *)handle, use_opts ? &o : NULL);
	*err = pb ? 0 : errno;
	return pb;
}

uint64_t perfbuf_go_pending(uintptr_t buffer, size_t idx)
{
	struct perf_buffer *pb = (struct perf_buffer *)buffer;
	struct perfbuf_ring_stats st = {.sz = sizeof(st)};
	return perfbuf_ring_stats(pb, idx, &st) == 0 ? st.pending_bytes : 0;
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
