/* A program spinning in a known function, for the perf.data profile test:
 * spinner SECONDS. Built by tests/perfdata_live.rs with frame pointers. */
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long perfbuf_spin_here(double secs)
{
	volatile unsigned long n = 0;
	double end = now() + secs;

	while (now() < end)
		for (int i = 0; i < 100000; i++)
			n++;
	return n;
}

int main(int argc, char **argv)
{
	return perfbuf_spin_here(argc > 1 ? atof(argv[1]) : 1.0) == 0;
}
