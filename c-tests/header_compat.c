/* perfbuf.h and <bpf/libbpf.h> together, in the order chosen by the build
 * (-DLIBBPF_FIRST or not), compiled as C and as C++: no conflicts, and our
 * prototypes are exactly libbpf's (assigning to typed pointers checks it). */
#ifdef LIBBPF_FIRST
#include <bpf/libbpf.h>
#include "perfbuf.h"
#else
#include "perfbuf.h"
#include <bpf/libbpf.h>
#endif

struct perf_buffer *(*new_fn)(int, size_t, perf_buffer_sample_fn, perf_buffer_lost_fn, void *,
			      const struct perf_buffer_opts *) = perf_buffer__new;
struct perf_buffer *(*new_raw_fn)(int, size_t, struct perf_event_attr *, perf_buffer_event_fn, void *,
				  const struct perf_buffer_raw_opts *) = perf_buffer__new_raw;
int (*buffer_fn)(struct perf_buffer *, int, void **, size_t *) = perf_buffer__buffer;
size_t (*cnt_fn)(const struct perf_buffer *) = perf_buffer__buffer_cnt;

int main(void)
{
	return new_fn == 0 || new_raw_fn == 0 || buffer_fn == 0 || cnt_fn == 0;
}
