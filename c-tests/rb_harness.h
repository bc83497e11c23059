/* The ring buffer's differential harness: scenarios written once against a
 * table of libbpf's ring_buffer__* (and, where the library has them, the
 * libbpf 1.3/1.5 ring__* and *__consume_n) functions, run through libbpf
 * and libperfbuf with records from real BPF programs (c-tests/producer.c's
 * ring buffer producers), transcripts compared line by line. */
#ifndef PERFBUF_RB_HARNESS_H
#define PERFBUF_RB_HARNESS_H

#include <bpf/libbpf.h>
#include <stdbool.h>
#include <stddef.h>

#include "harness.h"

/* libbpf 1.3/1.5 names its 1.1 header lacks. */
struct ring;

struct rb_api {
	const char *name;
	struct ring_buffer *(*new_)(int, ring_buffer_sample_fn, void *, const struct ring_buffer_opts *);
	void (*free_)(struct ring_buffer *);
	int (*add)(struct ring_buffer *, int, ring_buffer_sample_fn, void *);
	int (*poll)(struct ring_buffer *, int);
	int (*consume)(struct ring_buffer *);
	int (*epoll_fd)(const struct ring_buffer *);
	/* NULL where the library is older than libbpf 1.3 (1.5 for consume_n). */
	int (*consume_n)(struct ring_buffer *, size_t);
	struct ring *(*ring)(struct ring_buffer *, unsigned int);
	unsigned long (*consumer_pos)(const struct ring *);
	unsigned long (*producer_pos)(const struct ring *);
	size_t (*avail_data_size)(const struct ring *);
	size_t (*size)(const struct ring *);
	int (*map_fd)(const struct ring *);
	int (*ring_consume)(struct ring *);
	int (*ring_consume_n)(struct ring *, size_t);
};

/* The six functions libbpf 1.1 declares, as linked (-lbpf, possibly under
 * LD_PRELOAD, or -lperfbuf). */
#define RB_API_LINKED(label)                                                                         \
	{                                                                                            \
		.name = (label), .new_ = ring_buffer__new, .free_ = ring_buffer__free,                \
		.add = ring_buffer__add, .poll = ring_buffer__poll, .consume = ring_buffer__consume, \
		.epoll_fd = ring_buffer__epoll_fd,                                                   \
	}

struct rb_harness {
	const struct rb_api *api;
	struct transcript tx;
	int failures, checks;
};

#define RB_CHECK(h, cond, ...)                                                        \
	do {                                                                          \
		(h)->checks++;                                                        \
		if (!(cond)) {                                                        \
			(h)->failures++;                                              \
			rb_fail((h), __FILE__, __LINE__, #cond, __VA_ARGS__);         \
		}                                                                     \
	} while (0)
void rb_fail(struct rb_harness *h, const char *file, int line, const char *cond, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

enum rb_kind {
	RB_BOTH,	 /* libbpf 1.1's six functions, compared */
	RB_NEW_API,	 /* needs the libbpf 1.3/1.5 functions (the table's optional ones) */
	RB_PERFBUF_ONLY, /* calls on which libbpf crashes (NULL handle or callback) */
};

struct rb_scenario {
	const char *name;
	void (*run)(struct rb_harness *h);
	enum rb_kind kind;
};
extern const struct rb_scenario rb_scenarios[];
extern const size_t rb_scenario_count;

/* Fills `api` from the library at `path` (dlopen, RTLD_LOCAL|DEEPBIND);
 * the optional functions stay NULL where it lacks them. Exits unless
 * `libname` appears in the path of the object serving ring_buffer__new. */
void rb_load_api(struct rb_api *api, const char *libname, const char *path);

/* Runs every scenario h->api has the functions for once (RB_BOTH only,
 * unless `all`), writing each transcript to `out` (if not NULL); returns
 * how many failed an absolute check. */
int rb_run(struct rb_harness *h, FILE *out, bool all);

/* Runs every scenario through `ref` and `h`, compares transcripts, writes
 * them to `outdir` (if not NULL); returns how many scenarios failed. A
 * scenario needing functions `ref` lacks, or on which libbpf crashes, runs
 * on `h` alone, with its absolute checks, and says so. */
int rb_run_compared(struct rb_harness *ref, struct rb_harness *h, const char *outdir);

#endif
