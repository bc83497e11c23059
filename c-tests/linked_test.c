/* The linked way in: built with perfbuf.h and -lperfbuf (not -lbpf). Runs
 * every scenario through the linked functions and through the system
 * libbpf.so.1 (dlopened RTLD_LOCAL, so it cannot take the linked names)
 * and requires identical transcripts and every absolute check passed;
 * then what libbpf cannot do: clear errors for NULL handles, NULL
 * out-pointers and bad indexes.
 *
 * usage: linked_test [OUTDIR]   (OUTDIR gets the transcripts) */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "harness.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* A negative errno return with errno set to match. */
#define EXPECT_ERR(call, err)                                                      \
	do {                                                                       \
		errno = 0;                                                         \
		int _r = (call);                                                   \
		EXPECT(_r == -(err) && errno == (err), "%s: %d errno %d", #call, _r, errno); \
	} while (0)

static void null_and_range_checks(int map_fd)
{
	EXPECT_ERR(perf_buffer__epoll_fd(NULL), EINVAL);
	EXPECT_ERR(perf_buffer__poll(NULL, 0), EINVAL);
	EXPECT_ERR(perf_buffer__consume(NULL), EINVAL);
	EXPECT_ERR(perf_buffer__consume_buffer(NULL, 0), EINVAL);
	EXPECT_ERR(perf_buffer__buffer_fd(NULL, 0), EINVAL);
	void *buf;
	size_t size;
	EXPECT_ERR(perf_buffer__buffer(NULL, 0, &buf, &size), EINVAL);
	errno = 0;
	EXPECT(perf_buffer__buffer_cnt(NULL) == 0 && errno == EINVAL, "unexpected");
	perf_buffer__free(NULL);
	perf_buffer__free((struct perf_buffer *)(intptr_t)-22); /* libbpf's ERR_PTR(-EINVAL) */

	struct perf_buffer *pb = perf_buffer__new(map_fd, 1, NULL, NULL, NULL, NULL);
	EXPECT(pb != NULL, "unexpected");
	if (!pb)
		return;
	EXPECT_ERR(perf_buffer__buffer(pb, -1, &buf, &size), EINVAL);
	EXPECT_ERR(perf_buffer__buffer(pb, -2147483647 - 1, &buf, &size), EINVAL);
	EXPECT_ERR(perf_buffer__buffer(pb, 0, NULL, &size), EINVAL);
	EXPECT_ERR(perf_buffer__buffer(pb, 0, &buf, NULL), EINVAL);
	EXPECT_ERR(perf_buffer__buffer_fd(pb, (size_t)-1), EINVAL);
	EXPECT_ERR(perf_buffer__consume_buffer(pb, (size_t)-1), EINVAL);
	EXPECT(perf_buffer__buffer(pb, 0, &buf, &size) == 0 && size == 4096, "unexpected");
	perf_buffer__free(pb);

	/* Raw opts with cpu_cnt > 0 but NULL arrays: libbpf dereferences them. */
	struct perf_event_attr attr = {.type = PERF_TYPE_SOFTWARE, .size = sizeof(attr),
				       .config = PERF_COUNT_SW_BPF_OUTPUT, .sample_type = PERF_SAMPLE_RAW,
				       .sample_period = 1, .wakeup_events = 1};
	struct perf_buffer_raw_opts opts = {.sz = sizeof(opts), .cpu_cnt = 1};
	errno = 0;
	EXPECT(perf_buffer__new_raw(map_fd, 1, &attr, NULL, NULL, &opts) == NULL && errno == EINVAL, "unexpected");
	/* An absurd opts size is garbage, not a newer header. */
	struct perf_buffer_opts big = {.sz = (size_t)1 << 40};
	errno = 0;
	EXPECT(perf_buffer__new(map_fd, 1, NULL, NULL, NULL, &big) == NULL && errno == EINVAL, "unexpected");
	/* A page count whose mapping size overflows. */
	errno = 0;
	EXPECT(perf_buffer__new(map_fd, (size_t)1 << 62, NULL, NULL, NULL, NULL) == NULL && errno == EINVAL, "unexpected");
}

int main(int argc, char **argv)
{
	static const struct pb_api api = PB_API_LINKED("libperfbuf");
	Dl_info info;
	void *fn;
	memcpy(&fn, &api.new_, sizeof(fn));
	EXPECT(dladdr(fn, &info) && strstr(info.dli_fname, "libperfbuf"), "served by %s", info.dli_fname);
	printf("libperfbuf %s from %s\n", perfbuf_version(), info.dli_fname);

	setvbuf(stdout, NULL, _IOLBF, 0);
	struct harness hb = {0}, h;
#ifdef __SANITIZE_ADDRESS__
	/* ASan refuses RTLD_DEEPBIND: libperfbuf's own checks only (make
	 * linked-test compares with libbpf). */
	(void)argc;
	(void)argv;
	harness_open(&h, &api);
	int failed = run_scenarios(&h, NULL);
	printf("linked_test: under ASan, not compared with libbpf\n");
#else
	struct pb_api bpf;
	harness_load_api(&bpf, "libbpf", "libbpf.so.1");
	harness_open(&hb, &bpf);
	harness_open(&h, &api);
	int failed = run_compared(&hb, &h, argc > 1 ? argv[1] : NULL);
#endif
	null_and_range_checks(h.prod.map_fd);
	printf("%s null_and_range (%d checks)\n", failures ? "FAIL" : "ok  ", checks);
	if (failures)
		failed++;
	printf("linked_test: %zu passed, %d failed\n", scenario_count + 1 - (size_t)failed, failed);
	if (hb.api)
		harness_close(&hb);
	harness_close(&h);
	return failed ? 1 : 0;
}
