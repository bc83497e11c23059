/* See peer_producer.h. */
#define _GNU_SOURCE
#include "peer_producer.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "../../c-tests/producer.h"

static struct producer prod = {.map_fd = -1, .det_prog_fd = -1, .stamp_prog_fd = -1};
static struct ringbuf_producer rbprod = {.map_fd = -1};
static int into_ringbuf;
static unsigned full_rate_per_call = 2000;

int peer_producer_open(void)
{
	int err = producer_open(&prod, 0);
	return err ? err : prod.map_fd;
}

void peer_producer_close(void)
{
	producer_close(&prod);
}

/* perfbench's ring buffer size: 64 pages per CPU, rounded up to a power
 * of 2. */
int peer_ringbuf_open(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_CONF), page = sysconf(_SC_PAGESIZE);
	unsigned want = (unsigned)(64 * page * (cpus > 0 ? cpus : 1)), bytes = (unsigned)page;
	while (bytes < want)
		bytes *= 2;
	int err = producer_open_ringbuf(&rbprod, bytes);
	return err ? err : rbprod.map_fd;
}

void peer_ringbuf_close(void)
{
	if (rbprod.map_fd >= 0)
		producer_close_ringbuf(&rbprod);
	rbprod.map_fd = -1;
}

uint64_t peer_ringbuf_failed(void)
{
	struct ringbuf_producer_stats st = {0};
	return producer_ringbuf_stats(&rbprod, &st) ? 0 : st.output_failed;
}

void peer_set_target(int ringbuf, unsigned per_call)
{
	into_ringbuf = ringbuf;
	full_rate_per_call = per_call ? per_call : 2000;
}

static void emit(unsigned size, unsigned burst, int *ret)
{
	if (into_ringbuf)
		producer_emit_ringbuf(&rbprod, 0, size, 7, burst, ret);
	else
		producer_emit_det(&prod, 0, size, 7, burst, ret);
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

/* The loop of bench/perfbench.c's produce(), for 64-byte det samples, into
 * the perf event array or (peer_set_target) the ring buffer. */
uint64_t peer_produce(double seconds, unsigned rate, unsigned size, volatile int *done)
{
	peer_pin(0);
	double end = peer_now_ns() + seconds * 1e9;
	uint64_t produced = 0;
	int ret;
	if (rate == 0) {
		while (peer_now_ns() < end) {
			unsigned burst = full_rate_per_call;
			emit(size, burst, &ret);
			produced += burst;
		}
	} else {
		unsigned burst = rate >= 20000 ? rate / 1000 : 1;
		double period = 1e9 * burst / rate, next = peer_now_ns();
		while (next < end) {
			while (peer_now_ns() < next)
				;
			emit(size, burst, &ret);
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
