// SPDX-License-Identifier: MIT OR Apache-2.0
/* A BPF program for the examples: on every exec, the new process's pid and
 * name go to the `events` perf event array. A raw tracepoint, so it needs
 * neither kprobes nor a mounted tracefs. Build:
 *   clang -O2 -g -target bpf -c exec_events.bpf.c -o exec_events.bpf.o */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct exec_event {
	__u32 pid;
	__u32 ppid_unused;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(int));
	__uint(value_size, sizeof(int));
} events SEC(".maps");

SEC("raw_tp/sched_process_exec")
int on_exec(void *ctx)
{
	struct exec_event e = {};

	e.pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(&e.comm, sizeof(e.comm));
	bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, &e, sizeof(e));
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
