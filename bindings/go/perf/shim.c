#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <linux/bpf.h>

#include "shim.h"
#include "_cgo_export.h"

int perf_next_record(uintptr_t buffer, size_t idx, void *dst, size_t cap, struct perf_next *out)
{
	struct perf_buffer *pb = (struct perf_buffer *)buffer;
	const struct perf_event_header *h;
	size_t len;
	int ret = perfbuf_ring_peek(pb, idx, &h, &len);
	if (ret <= 0)
		return ret;
	const unsigned char *rec = (const unsigned char *)h;
	out->type = h->type;
	out->size = 0;
	out->lost = 0;
	if (h->type == PERF_RECORD_SAMPLE && len >= sizeof(*h) + sizeof(uint32_t)) {
		uint32_t n;
		memcpy(&n, rec + sizeof(*h), sizeof(n));
		/* The size field is the kernel's word, the record's length ours. */
		if (n > len - sizeof(*h) - sizeof(n))
			n = (uint32_t)(len - sizeof(*h) - sizeof(n));
		out->size = n;
		if (n > cap)
			return PERF_NEXT_GROW;
		if (n)
			memcpy(dst, rec + sizeof(*h) + sizeof(n), n);
	} else if (h->type == PERF_RECORD_LOST && len >= sizeof(*h) + 2 * sizeof(uint64_t)) {
		memcpy(&out->lost, rec + sizeof(*h) + sizeof(uint64_t), sizeof(out->lost));
	}
	if ((ret = perfbuf_ring_advance(pb, idx)) < 0 || (ret = perfbuf_ring_publish(pb, idx)) < 0)
		return ret;
	out->remaining = perf_pending(buffer, idx);
	return PERF_NEXT_RECORD;
}

uint64_t perf_pending(uintptr_t buffer, size_t idx)
{
	struct perfbuf_ring_stats st;
	memset(&st, 0, sizeof(st));
	st.sz = sizeof(st);
	return perfbuf_ring_stats((struct perf_buffer *)buffer, idx, &st) == 0 ? st.pending_bytes : 0;
}

static void sample_tramp(void *ctx, int cpu, void *data, __u32 size)
{
	perfGoSample((uintptr_t)ctx, cpu, data, size);
}

static void lost_tramp(void *ctx, int cpu, __u64 cnt)
{
	perfGoLost((uintptr_t)ctx, cpu, cnt);
}

struct perf_buffer *perf_new_buffer(int map_fd, size_t page_cnt, uintptr_t handle, uint32_t wakeup_events,
				    uint32_t wakeup_bytes, uint32_t max_delay_ms, uint32_t flags, const int *cpus,
				    int cpu_cnt, int *err)
{
	struct perfbuf_opts o;
	/* libperfbuf checks the padding is zero too. */
	memset(&o, 0, sizeof(o));
	o.sz = sizeof(o);
	o.wakeup_events = wakeup_events;
	o.wakeup_bytes = wakeup_bytes;
	o.max_delay_ms = max_delay_ms;
	/* cilium/ebpf reads the CPUs online at creation, for good (and its
	 * Pause empties the slots, which a CPU coming online must not refill). */
	o.flags = flags | PERFBUF_F_NO_HOTPLUG;
	o.cpus = cpus;
	o.cpu_cnt = cpu_cnt;
	struct perf_buffer *pb = perfbuf_new(map_fd, page_cnt, sample_tramp, lost_tramp, (void *)handle, &o);
	*err = pb ? 0 : errno;
	return pb;
}

int perf_map_slot(int map_fd, uint32_t key, int fd)
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
