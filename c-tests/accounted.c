/* See accounted.h. */
#include "accounted.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <string.h>

static int fd_of_map(struct bpf_object *obj, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(obj, name);
	return m ? bpf_map__fd(m) : -ENOENT;
}

static int fd_of_prog(struct bpf_object *obj, const char *name)
{
	struct bpf_program *p = bpf_object__find_program_by_name(obj, name);
	return p ? bpf_program__fd(p) : -ENOENT;
}

int accounted_open(struct accounted *a, const char *path, unsigned rb_bytes)
{
	memset(a, 0, sizeof(*a));
	struct bpf_object *obj = bpf_object__open_file(path, NULL);
	long err = libbpf_get_error(obj);
	if (err)
		return (int)err;
	if (rb_bytes) {
		struct bpf_map *rb = bpf_object__find_map_by_name(obj, "rb");
		if (!rb || bpf_map__set_max_entries(rb, rb_bytes)) {
			bpf_object__close(obj);
			return -EINVAL;
		}
	}
	err = bpf_object__load(obj);
	if (err) {
		bpf_object__close(obj);
		return (int)err;
	}
	a->obj = obj;
	a->events_fd = fd_of_map(obj, "events");
	a->events_counts_fd = fd_of_map(obj, "events_counts");
	a->rb_fd = fd_of_map(obj, "rb");
	a->rb_counts_fd = fd_of_map(obj, "rb_counts");
	a->perf_prog_fd = fd_of_prog(obj, "perf_output");
	a->rb_prog_fd = fd_of_prog(obj, "ringbuf_output");
	a->rb_reserve_prog_fd = fd_of_prog(obj, "ringbuf_reserve");
	return 0;
}

void accounted_close(struct accounted *a)
{
	if (a->obj)
		bpf_object__close(a->obj);
	a->obj = NULL;
}

/* The Go tests run the programs through their own producer package. */
#ifndef ACCOUNTED_NO_RUN
#include "producer.h"

int accounted_run(int prog_fd, int cpu, unsigned size, unsigned repeat, int *last_ret)
{
	uint8_t pkt[64] = { 0 };
	pkt[0] = (uint8_t)size;
	pkt[1] = (uint8_t)(size >> 8);
	return producer_test_run(prog_fd, cpu, pkt, sizeof(pkt), repeat, last_ret);
}
#endif
