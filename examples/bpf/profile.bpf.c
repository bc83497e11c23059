// SPDX-License-Identifier: MIT OR Apache-2.0
/* A BPF program for the profiler examples and tests: attached to a sampling
 * perf event on every CPU, it counts the samples taken on each CPU. It
 * returns 1, so
 * the kernel still writes each sample to the event's ring (0 would drop it:
 * a profiler whose program does all the work needs no ring). Build:
 *   clang -O2 -g -target bpf -c profile.bpf.c -o profile.bpf.o */
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

#define MAX_CPUS 1024

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx __attribute__((unused)))
{
	__u32 cpu = bpf_get_smp_processor_id();
	__u64 *samples = bpf_map_lookup_elem(&counts, &cpu);

	if (samples)
		__sync_fetch_and_add(samples, 1);
	return 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
