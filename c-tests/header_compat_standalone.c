/* perfbuf.h alone, without libbpf's headers, in strict C99: its own
 * declarations, with libbpf 1.2's sample_period (PERFBUF_NO_LIBBPF_H keeps
 * libbpf's 1.0/1.1 headers out even where they are installed). */
#include "perfbuf.h"

int main(void)
{
	struct perf_buffer_opts o = {.sz = sizeof(o), .sample_period = 64};
	struct perf_buffer_raw_opts r = {.sz = sizeof(r)};
	perf_buffer_sample_fn s = 0;
	perf_buffer_event_fn e = 0;
	struct ring_buffer_opts rb = {.sz = sizeof(rb)};
	ring_buffer_sample_fn rs = 0;
	return (int)(o.sz + r.sz + rb.sz) == 0 || o.sample_period != 64 || s != 0 || e != 0 || rs != 0;
}
