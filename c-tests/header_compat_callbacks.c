/* Callbacks written for libbpf (its typedefs take __u32 and __u64, i.e.
 * unsigned int and unsigned long long) passed to perfbuf.h's functions:
 * with libbpf's headers in either order and without them, as C (GCC 14
 * makes an incompatible pointer an error: -Werror=incompatible-pointer-types
 * says the same to older compilers) and as C++. */
#ifdef LIBBPF_FIRST
#include <bpf/libbpf.h>
#endif
#include "perfbuf.h"
#ifdef LIBBPF_AFTER
#include <bpf/libbpf.h>
#endif

static void on_sample(void *ctx, int cpu, void *data, __u32 size)
{
	(void)ctx, (void)cpu, (void)data, (void)size;
}

static void on_lost(void *ctx, int cpu, __u64 cnt)
{
	(void)ctx, (void)cpu, (void)cnt;
}

/* A program that spells the types as C99 does, for the sample size. */
static void on_sample_stdint(void *ctx, int cpu, void *data, uint32_t size)
{
	(void)ctx, (void)cpu, (void)data, (void)size;
}

int main(void)
{
	perf_buffer_sample_fn s = on_sample_stdint;
	perf_buffer_lost_fn l = on_lost;
	struct perf_buffer *a = perf_buffer__new(-1, 8, on_sample, on_lost, 0, 0);
	struct perf_buffer *b = perfbuf_new(-1, 8, on_sample, on_lost, 0, 0);
	return a != 0 || b != 0 || s == 0 || l == 0;
}
