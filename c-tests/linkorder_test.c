/* Link order: a program that uses both libbpf and libperfbuf, built with
 * -lbpf before -lperfbuf and after it, with and without --as-needed.
 * libbpf's perf_buffer__* names bind to whichever library the linker saw
 * first; the perfbuf_* names exist only in libperfbuf, so through them
 * the program reads its records whatever the order. A handle libbpf made,
 * passed to a perfbuf_* call, is refused with EINVAL and a message that
 * names the cause, never used (the old failure was a segfault).
 *
 * usage: linkorder_test libbpf|libperfbuf   (whose perf_buffer__new the
 * link order must have bound: the make target knows which it built) */
#define _GNU_SOURCE
#include <bpf/libbpf.h>

#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static struct producer prod;
static const char *new_is_from; /* the object serving perf_buffer__new */

static void count(void *ctx, int cpu, void *data, __u32 size)
{
	(void)cpu;
	(void)data;
	(void)size;
	++*(unsigned *)ctx;
}

/* Through perfbuf_* names only: records arrive whatever the link order. */
static void test_perfbuf_names(void)
{
	unsigned n = 0;
	struct perf_buffer *pb = perfbuf_new(prod.map_fd, 8, count, NULL, &n, NULL);
	EXPECT(pb, "perfbuf_new: %s", perfbuf_last_error());
	if (!pb)
		return;
	int ret = 0;
	EXPECT(producer_emit_det(&prod, 0, 16, 1, 100, &ret) == 0 && ret == 0, "emit");
	for (int i = 0; i < 100 && n < 100; i++)
		EXPECT(perfbuf_poll(pb, 100) >= 0, "perfbuf_poll");
	EXPECT(perfbuf_consume(pb) == 0 && perfbuf_consume_buffer(pb, 0) == 0, "consume");
	struct perfbuf_ring_stats st = {.sz = sizeof(st)};
	EXPECT(perfbuf_ring_stats(pb, 0, &st) == 0 && st.records == 100, "ring_stats: %llu records",
	       (unsigned long long)st.records);
	EXPECT(perfbuf_buffer_cnt(pb) >= 1 && perfbuf_epoll_fd(pb) >= 0 && perfbuf_buffer_fd(pb, 0) >= 0,
	       "accessors");
	void *base;
	size_t size;
	EXPECT(perfbuf_buffer(pb, 0, &base, &size) == 0 && size == 8 * 4096, "perfbuf_buffer");
	printf("  perfbuf_* names: %u of 100 records\n", n);
	EXPECT(n == 100, "%u of 100 records", n);
	perfbuf_free(pb);
}

/* A handle from the libbpf name, whichever library made it, given to the
 * extensions and the perfbuf_* names. */
static void test_foreign_handle(void)
{
	struct perf_buffer *pb = perf_buffer__new(prod.map_fd, 8, NULL, NULL, NULL, NULL);
	EXPECT(pb, "perf_buffer__new");
	if (!pb)
		return;
	int libbpf_made = strstr(new_is_from, "libbpf.so") != NULL;
	struct perfbuf_ring_stats st = {.sz = sizeof(st)};
	errno = 0;
	int r = perfbuf_ring_stats(pb, 0, &st);
	int e = errno;
	const char *why = perfbuf_last_error();
	if (libbpf_made) {
		EXPECT(r == -EINVAL && e == EINVAL, "ring_stats on libbpf's handle: %d errno %d", r, e);
		EXPECT(strstr(why, "not made by libperfbuf") && strstr(why, "link -lperfbuf before -lbpf"),
		       "message: %s", why);
		EXPECT(perfbuf_poll(pb, 0) == -EINVAL && perfbuf_buffer_cnt(pb) == 0, "perfbuf_poll/buffer_cnt");
		printf("  libbpf's handle refused: %s\n", why);
	} else {
		EXPECT(r == 0, "ring_stats on our own handle: %d", r);
		printf("  perf_buffer__new is libperfbuf's here: its handle works with the extensions\n");
	}
	perf_buffer__free(pb); /* the library that made it frees it */
}

int main(int argc, char **argv)
{
	if (argc != 2 || (strcmp(argv[1], "libbpf") && strcmp(argv[1], "libperfbuf"))) {
		fprintf(stderr, "usage: %s libbpf|libperfbuf\n", argv[0]);
		return 2;
	}
	Dl_info info;
	if (!dladdr((void *)perf_buffer__new, &info)) {
		fprintf(stderr, "dladdr failed\n");
		return 1;
	}
	Dl_info ours;
	if (!dladdr((void *)perfbuf_poll, &ours) || !strstr(ours.dli_fname, "libperfbuf")) {
		fprintf(stderr, "perfbuf_poll not from libperfbuf\n");
		return 1;
	}
	new_is_from = info.dli_fname;
	printf("linkorder: perf_buffer__new from %s\n", new_is_from);
	/* The branch test_foreign_handle takes is the one this link order
	 * must give: a libbpf handle refused, or our own accepted. */
	char want[32];
	snprintf(want, sizeof(want), "/%s.so", argv[1]);
	if (!strstr(new_is_from, want)) {
		fprintf(stderr, "linkorder: perf_buffer__new from %s, expected %s\n", new_is_from, argv[1]);
		return 1;
	}
	producer_open_or_exit(&prod, 0);
	static const struct test_case tests[] = {
		{"perfbuf_names", test_perfbuf_names},
		{"foreign_handle", test_foreign_handle},
	};
	char prog[64];
	snprintf(prog, sizeof(prog), "linkorder (%s first)", argv[1]);
	int failed = run_tests(prog, tests, (int)(sizeof(tests) / sizeof(tests[0])));
	producer_close(&prod);
	return failed ? 1 : 0;
}
