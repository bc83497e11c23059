/* profile: samples every CPU at 99 Hz with a BPF program attached to each
 * CPU's event, which counts the samples per CPU (examples/bpf/profile.bpf.c);
 * reports the counts at exit. The event is CPU cycles where the machine has
 * a PMU, else the software CPU clock (a virtual machine): the set says which
 * it got, and why. No rings: the program does all the work. While it
 * samples, a demo workload keeps every CPU busy (some virtual machines take
 * no clock samples on an idle CPU).
 *
 * usage: profile [profile.bpf.o] [SECONDS]   (default 1 s; needs root) */
#define _GNU_SOURCE
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <perfbuf.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HZ 99

static atomic_int stop;

/* The demo workload: spins on one CPU until told to stop. */
static void *spin(void *arg)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET((int)(long)arg, &one);
	pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
	for (volatile unsigned long n = 0; !atomic_load(&stop); n++)
		;
	return NULL;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "profile.bpf.o";
	double seconds = argc > 2 ? atof(argv[2]) : 1.0;
	struct bpf_object *obj = bpf_object__open_file(path, NULL);
	if (!obj || bpf_object__load(obj))
		return fprintf(stderr, "profile: cannot load %s (root?)\n", path), 1;
	int prog = bpf_program__fd(bpf_object__find_program_by_name(obj, "on_sample"));
	int counts = bpf_object__find_map_fd_by_name(obj, "counts");

	struct perfbuf_events_opts opts = {.sz = sizeof(opts), .flags = PERFBUF_EVENTS_NO_RINGS};
	struct perfbuf_events *set = perfbuf_events_new(&opts);
	struct perfbuf_event_desc cycles = {
		.sz = sizeof(cycles),
		.kind = PERFBUF_EVENT_HARDWARE,
		.config = PERF_COUNT_HW_CPU_CYCLES,
		.flags = PERFBUF_EVENT_F_FALLBACK | PERFBUF_EVENT_F_FREQ,
		.fallback_config = PERF_COUNT_SW_CPU_CLOCK,
		.period = HZ,
	};
	/* Opened disabled; the program is attached before any sample is taken. */
	int ev = set ? perfbuf_events_add(set, &cycles) : -1;
	if (ev < 0 || perfbuf_events_attach_bpf(set, ev, prog) || perfbuf_events_enable(set, ev)) {
		fprintf(stderr, "profile: %s\n", perfbuf_last_error());
		perfbuf_events_free(set);
		bpf_object__close(obj);
		return 1;
	}
	struct perfbuf_event_info info = {.sz = sizeof(info)};
	perfbuf_events_info(set, ev, &info);
	if (info.fallback_errno)
		printf("no hardware cycles here (%s): sampling the software CPU clock\n", strerror(info.fallback_errno));
	else
		printf("sampling %s\n", info.kind == PERFBUF_EVENT_HARDWARE ? "CPU cycles" : "the CPU clock");

	int cpus[1024], n = perfbuf_events_cpus(set, 0, cpus, 1024), silent = 0;
	pthread_t workers[1024];
	for (int i = 0; i < n && i < 1024; i++)
		pthread_create(&workers[i], NULL, spin, (void *)(long)cpus[i]);
	usleep((useconds_t)(seconds * 1e6));
	perfbuf_events_disable(set, ev);
	atomic_store(&stop, 1);
	for (int i = 0; i < n && i < 1024; i++)
		pthread_join(workers[i], NULL);

	for (int i = 0; i < n && i < 1024; i++) {
		__u32 key = (__u32)cpus[i];
		__u64 samples = 0;
		bpf_map_lookup_elem(counts, &key, &samples);
		printf("cpu %d: %llu samples (%.0f expected at %d Hz)\n", cpus[i], (unsigned long long)samples,
		       seconds * HZ, HZ);
		silent += samples == 0;
	}
	perfbuf_events_free(set);
	bpf_object__close(obj);
	return n > 0 && !silent ? 0 : 1;
}
