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
/* The ring buffer's, including those libbpf 1.3/1.5 added (with a newer
 * libbpf.h both declare them: they must agree). */
struct ring_buffer *(*rb_new_fn)(int, ring_buffer_sample_fn, void *, const struct ring_buffer_opts *) =
	ring_buffer__new;
int (*rb_add_fn)(struct ring_buffer *, int, ring_buffer_sample_fn, void *) = ring_buffer__add;
int (*rb_epoll_fn)(const struct ring_buffer *) = ring_buffer__epoll_fd;
int (*rb_consume_n_fn)(struct ring_buffer *, size_t) = ring_buffer__consume_n;
struct ring *(*rb_ring_fn)(struct ring_buffer *, unsigned int) = ring_buffer__ring;
unsigned long (*ring_pos_fn)(const struct ring *) = ring__consumer_pos;
size_t (*ring_avail_fn)(const struct ring *) = ring__avail_data_size;
int (*ring_consume_n_fn)(struct ring *, size_t) = ring__consume_n;

int main(void)
{
	return new_fn == 0 || new_raw_fn == 0 || buffer_fn == 0 || cnt_fn == 0 || rb_new_fn == 0 || rb_add_fn == 0 ||
	       rb_epoll_fn == 0 || rb_consume_n_fn == 0 || rb_ring_fn == 0 || ring_pos_fn == 0 || ring_avail_fn == 0 ||
	       ring_consume_n_fn == 0;
}
