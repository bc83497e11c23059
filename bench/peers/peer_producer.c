/* See peer_producer.h. */
#define _GNU_SOURCE
#include "peer_producer.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "../../c-tests/producer.h"

static struct producer prod = {.map_fd = -1, .det_prog_fd = -1, .stamp_prog_fd = -1};

int peer_producer_open(void)
{
	int err = producer_open(&prod, 0);
	return err ? err : prod.map_fd;
}

void peer_producer_close(void)
{
	producer_close(&prod);
}

void peer_pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

double peer_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

double peer_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* The loop of bench/perfbench.c's produce(), for 64-byte det samples. */
uint64_t peer_produce(double seconds, unsigned rate, unsigned size, volatile int *done)
{
	peer_pin(0);
	double end = peer_now_ns() + seconds * 1e9;
	uint64_t produced = 0;
	int ret;
	if (rate == 0) {
		while (peer_now_ns() < end) {
			unsigned burst = 2000;
			producer_emit_det(&prod, 0, size, 7, burst, &ret);
			produced += burst;
		}
	} else {
		unsigned burst = rate >= 20000 ? rate / 1000 : 1;
		double period = 1e9 * burst / rate, next = peer_now_ns();
		while (next < end) {
			while (peer_now_ns() < next)
				;
			producer_emit_det(&prod, 0, size, 7, burst, &ret);
			produced += burst;
			next += period;
			double slack = next - peer_now_ns();
			if (slack > 60e3)
				usleep((useconds_t)((slack - 50e3) / 1e3));
		}
	}
	__atomic_store_n(done, 1, __ATOMIC_RELEASE);
	return produced;
}
