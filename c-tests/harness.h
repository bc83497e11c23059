/* The differential test harness: scenarios written once against a table of
 * the ten perf_buffer__* functions, run through libbpf and libperfbuf.
 *
 * Each scenario appends deterministic lines (return values, errno, every
 * record's CPU, size and checksum) to a transcript, and also checks absolute
 * expectations (bytes equal what the BPF producer wrote, counts add up).
 * Drivers compare the transcripts of the two libraries line by line. */
#ifndef PERFBUF_HARNESS_H
#define PERFBUF_HARNESS_H

#include <bpf/libbpf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "producer.h"
#include "testutil.h"

/* The ten functions, however they were obtained (linked, dlsym, preload). */
struct pb_api {
	const char *name;
	struct perf_buffer *(*new_)(int, size_t, perf_buffer_sample_fn, perf_buffer_lost_fn, void *,
				    const struct perf_buffer_opts *);
	struct perf_buffer *(*new_raw)(int, size_t, struct perf_event_attr *, perf_buffer_event_fn, void *,
				       const struct perf_buffer_raw_opts *);
	void (*free_)(struct perf_buffer *);
	int (*epoll_fd)(const struct perf_buffer *);
	int (*poll)(struct perf_buffer *, int);
	int (*consume)(struct perf_buffer *);
	int (*consume_buffer)(struct perf_buffer *, size_t);
	size_t (*buffer_cnt)(const struct perf_buffer *);
	int (*buffer_fd)(const struct perf_buffer *, size_t);
	int (*buffer)(struct perf_buffer *, int, void **, size_t *);
};

/* The table of a program linked against the functions directly (with
 * -lperfbuf, or -lbpf possibly under LD_PRELOAD). */
#define PB_API_LINKED(label)                                                       \
	{                                                                          \
		.name = (label), .new_ = perf_buffer__new, .new_raw = perf_buffer__new_raw, \
		.free_ = perf_buffer__free, .epoll_fd = perf_buffer__epoll_fd,        \
		.poll = perf_buffer__poll, .consume = perf_buffer__consume,           \
		.consume_buffer = perf_buffer__consume_buffer,                        \
		.buffer_cnt = perf_buffer__buffer_cnt, .buffer_fd = perf_buffer__buffer_fd, \
		.buffer = perf_buffer__buffer,                                        \
	}

/* A growing text transcript. */
struct transcript {
	char *text;
	size_t len, cap;
};

struct harness {
	const struct pb_api *api;
	struct producer prod;
	struct transcript tx;
	int failures; /* absolute-expectation failures */
	int checks;
};

void tx_printf(struct transcript *tx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tx_reset(struct transcript *tx);
void tx_free(struct transcript *tx);

/* Records an absolute check; failures are printed with the scenario name. */
#define CHECK(h, cond, ...)                                                    \
	do {                                                                   \
		(h)->checks++;                                                 \
		if (!(cond)) {                                                 \
			(h)->failures++;                                       \
			harness_fail((h), __FILE__, __LINE__, #cond, __VA_ARGS__); \
		}                                                              \
	} while (0)
void harness_fail(struct harness *h, const char *file, int line, const char *cond, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

struct scenario {
	const char *name;
	void (*run)(struct harness *h);
};
extern const struct scenario scenarios[];
extern const size_t scenario_count;

/* Opens the producer or exits (see producer_open_or_exit). */
void harness_open(struct harness *h, const struct pb_api *api);
void harness_close(struct harness *h);

/* Runs every scenario once through h->api, printing ok/FAIL per scenario
 * and, if `transcript` is not NULL, writing each one's transcript to it.
 * Returns how many scenarios failed an absolute check. */
int run_scenarios(struct harness *h, FILE *transcript);

/* Fills `api` with the ten functions of the library at `path`, dlopened
 * RTLD_LOCAL and RTLD_DEEPBIND (neither side's perf_buffer__* names
 * reach the other; not under AddressSanitizer, which refuses DEEPBIND);
 * exits unless `libname` appears in the path of the object serving them. */
void harness_load_api(struct pb_api *api, const char *libname, const char *path);

/* Runs every scenario through `ref` (libbpf) and then `h`, printing per
 * scenario ok when the transcripts are identical and both passed their
 * absolute checks; writes the transcripts to `outdir` if not NULL. Returns
 * how many scenarios failed. */
int run_compared(struct harness *ref, struct harness *h, const char *outdir);

/* Writes `tx` to DIR/SCENARIO.LIB.txt (nothing when `dir` is NULL). */
void transcript_save(const char *dir, const char *scenario, const char *lib, const struct transcript *tx);

/* Compares two transcripts; prints the first difference; returns 0 if equal. */
int transcript_compare(const char *scenario, const char *a_name, const char *a, const char *b_name,
		       const char *b);

#endif
