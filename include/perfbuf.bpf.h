/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* perfbuf.bpf.h: the BPF side of perfbuf's loss accounting. Include it in a
 * BPF program (after <bpf/bpf_helpers.h>) and send records through these
 * wrappers: each counts, per CPU, every output call and every one the
 * helper refused, in a map the reader reads (Rust
 * Builder::output_counts, C perfbuf_opts.output_counts_fd, Python
 * output_counts=, Go ReaderOptions.OutputCounts, perfbuf dump
 * --output-counts). With it, every record is accounted for:
 *
 *   produced = delivered + lost reported by the kernel + lost counted by
 *              the kernel, not yet reported + refused at the BPF side
 *              + dropped by the reader's own policy
 *
 * The kernel counts a perf ring's overflow (-ENOSPC) itself, but nothing
 * else a helper refuses: a CPU whose slot is empty (-ENOENT: no reader on
 * that CPU), an event left dead by a CPU that went offline and came back
 * (-EOPNOTSUPP), and every refusal of a BPF ring buffer (which has no lost
 * count at all). Those are known only from here.
 *
 *   #include <linux/bpf.h>
 *   #include <bpf/bpf_helpers.h>
 *   #include "perfbuf.bpf.h"
 *
 *   struct {
 *           __uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
 *           __uint(key_size, sizeof(int));
 *           __uint(value_size, sizeof(int));
 *   } events SEC(".maps");
 *   PERFBUF_OUTPUT_COUNTS(events_counts);
 *
 *   SEC("raw_tp/sched_process_exec")
 *   int on_exec(void *ctx)
 *   {
 *           struct event e = { ... };
 *           perfbuf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, &e, sizeof(e), &events_counts);
 *           return 0;
 *   }
 *
 * Counts are per CPU (a one-entry BPF_MAP_TYPE_PERCPU_ARRAY): with
 * BPF_F_CURRENT_CPU, the CPU that ran the program is the ring's. The map's
 * value is struct perfbuf_output_counts; the layout only ever grows, and a
 * reader reads the fields it knows. Programs in other languages (aya,
 * cilium/ebpf's C, bpftrace...) can keep the same counts in a map of the
 * same layout. The increments are atomic adds on this CPU's value: safe
 * when programs nest on a CPU (a tracepoint program interrupted by a perf
 * event program), at the cost of a few nanoseconds per output. */
#ifndef PERFBUF_BPF_H
#define PERFBUF_BPF_H

#include <linux/bpf.h>
#include <linux/errno.h>

/* What the wrappers count on one CPU. */
struct perfbuf_output_counts {
	__u64 calls;	 /* output calls (a reservation counts when submitted, or when it fails) */
	__u64 failed;	 /* calls the helper refused */
	__u64 no_space;	 /* of those: no room (-ENOSPC from a perf ring; -EAGAIN or no reservation
			  * from a ring buffer) */
	__u64 no_reader; /* of those: no live event in the CPU's slot (-ENOENT, -EOPNOTSUPP) */
};

/* Declares `name`, the counts map of one output map: pass it to the
 * wrappers, and its fd to the reader. */
#define PERFBUF_OUTPUT_COUNTS(name)                                          \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                     \
		__uint(max_entries, 1);                                      \
		__type(key, __u32);                                          \
		__type(value, struct perfbuf_output_counts);                 \
	} name SEC(".maps")

/* Counts one call that returned `ret` (0 or -errno) in `counts`. */
static __always_inline void perfbuf_count_output(void *counts, long ret)
{
	__u32 zero = 0;
	struct perfbuf_output_counts *c = bpf_map_lookup_elem(counts, &zero);

	if (!c)
		return;
	__sync_fetch_and_add(&c->calls, 1);
	if (!ret)
		return;
	__sync_fetch_and_add(&c->failed, 1);
	if (ret == -ENOSPC || ret == -EAGAIN)
		__sync_fetch_and_add(&c->no_space, 1);
	else if (ret == -ENOENT || ret == -EOPNOTSUPP)
		__sync_fetch_and_add(&c->no_reader, 1);
}

/* bpf_perf_event_output, counted in `counts`. Returns what the helper returned. */
static __always_inline long perfbuf_perf_event_output(void *ctx, void *map, __u64 flags, void *data, __u64 size,
						      void *counts)
{
	long ret = bpf_perf_event_output(ctx, map, flags, data, size);

	perfbuf_count_output(counts, ret);
	return ret;
}

/* bpf_ringbuf_output, counted in `counts`. Returns what the helper returned. */
static __always_inline long perfbuf_ringbuf_output(void *ringbuf, void *data, __u64 size, __u64 flags,
						   void *counts)
{
	long ret = bpf_ringbuf_output(ringbuf, data, size, flags);

	perfbuf_count_output(counts, ret);
	return ret;
}

/* bpf_ringbuf_reserve; a failed reservation is counted in `counts` (no
 * room). Submit what it returns with perfbuf_ringbuf_submit, which counts
 * the call; a discard is the program's choice and counts nothing. */
static __always_inline void *perfbuf_ringbuf_reserve(void *ringbuf, __u64 size, __u64 flags, void *counts)
{
	void *sample = bpf_ringbuf_reserve(ringbuf, size, flags);

	if (!sample)
		perfbuf_count_output(counts, -ENOSPC);
	return sample;
}

/* bpf_ringbuf_submit, counted in `counts` (a submission never fails). */
static __always_inline void perfbuf_ringbuf_submit(void *sample, __u64 flags, void *counts)
{
	bpf_ringbuf_submit(sample, flags);
	perfbuf_count_output(counts, 0);
}

#endif /* PERFBUF_BPF_H */
