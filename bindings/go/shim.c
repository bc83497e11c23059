#include <errno.h>

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
				   uint32_t flags, int *err)
{
	struct perfbuf_opts o = {.sz = sizeof(o),
				 .wakeup_events = wakeup_events,
				 .wakeup_bytes = wakeup_bytes,
				 .max_delay_ms = max_delay_ms,
				 .flags = flags};
	struct perf_buffer *pb =
		perfbuf_new(map_fd, page_cnt, sample_tramp, lost_tramp, (void *)handle, use_opts ? &o : NULL);
	*err = pb ? 0 : errno;
	return pb;
}

uint64_t perfbuf_go_pending(struct perf_buffer *pb, size_t idx)
{
	struct perfbuf_ring_stats st = {.sz = sizeof(st)};
	return perfbuf_ring_stats(pb, idx, &st) == 0 ? st.pending_bytes : 0;
}
