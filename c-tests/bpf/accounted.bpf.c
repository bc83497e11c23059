// SPDX-License-Identifier: MIT OR Apache-2.0
/* The loss identity's test program: records sent through perfbuf.bpf.h's
 * wrappers into a perf event array and a BPF ring buffer, each counted in
 * its PERFBUF_OUTPUT_COUNTS map. tc programs, run with BPF_PROG_TEST_RUN on
 * a chosen CPU (c-tests/accounted.c): the packet's first two bytes give the
 * record's size (16..256). Each record starts with a per-CPU sequence
 * number and the CPU, so a reader can tell which records it did not get. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "perfbuf.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(int));
	__uint(value_size, sizeof(int));
} events SEC(".maps");
PERFBUF_OUTPUT_COUNTS(events_counts);

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 4096); /* the loader may set another size */
} rb SEC(".maps");
PERFBUF_OUTPUT_COUNTS(rb_counts);

/* The next sequence number on each CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} seqs SEC(".maps");

#define MAX_SIZE 256

struct record {
	__u64 seq;
	__u32 cpu;
	__u32 size;
	__u8 rest[MAX_SIZE - 16];
};

/* Fills `r` (seq, cpu, size) and returns the size the packet asks for. */
static __always_inline __u32 make_record(struct __sk_buff *skb, struct record *r)
{
	__u16 size = 16;
	__u32 zero = 0;
	__u64 *seq = bpf_map_lookup_elem(&seqs, &zero);

	bpf_skb_load_bytes(skb, 0, &size, sizeof(size));
	if (size < 16)
		size = 16;
	if (size > MAX_SIZE)
		size = MAX_SIZE;
	if (seq)
		r->seq = (*seq)++;
	r->cpu = bpf_get_smp_processor_id();
	r->size = size;
	return size;
}



SEC("tc")
int perf_output(struct __sk_buff *skb)
{
	struct record r = {};
	__u32 size = make_record(skb, &r);

	barrier_var(size); /* the verifier needs the bound where the size is used */
	if (size > MAX_SIZE)
		return 0;
	return (int)perfbuf_perf_event_output(skb, &events, BPF_F_CURRENT_CPU, &r, size, &events_counts);
}

SEC("tc")
int ringbuf_output(struct __sk_buff *skb)
{
	struct record r = {};
	__u32 size = make_record(skb, &r);

	barrier_var(size);
	if (size > MAX_SIZE)
		return 0;
	return (int)perfbuf_ringbuf_output(&rb, &r, size, 0, &rb_counts);
}

/* A 16-byte record by reservation; every odd sequence number is discarded
 * (the program's own choice: neither produced nor lost). */
SEC("tc")
int ringbuf_reserve(struct __sk_buff *skb)
{
	struct record r = {};
	__u64 *out;

	make_record(skb, &r);
	out = perfbuf_ringbuf_reserve(&rb, 16, 0, &rb_counts);
	if (!out)
		return -1;
	out[0] = r.seq;
	out[1] = r.cpu;
	if (r.seq & 1) {
		bpf_ringbuf_discard(out, 0);
		return 1;
	}
	perfbuf_ringbuf_submit(out, 0, &rb_counts);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
