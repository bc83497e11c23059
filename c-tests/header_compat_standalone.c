/* perfbuf.h alone, without libbpf's headers, in strict C99. */
#include "perfbuf.h"

int main(void)
{
	struct perf_buffer_opts o = {.sz = sizeof(o)};
	struct perf_buffer_raw_opts r = {.sz = sizeof(r)};
	perf_buffer_sample_fn s = 0;
	perf_buffer_event_fn e = 0;
	return (int)(o.sz + r.sz) == 0 || s != 0 || e != 0;
}
