/* Link order, for ring buffers: a program using both libraries, built with
 * -lbpf before and after -lperfbuf, with and without --as-needed. The six
 * ring_buffer__* names libbpf 1.1 has bind to whichever library the
 * linker saw first; ring_buffer__ring and ring__* (libbpf 1.3) exist here
 * only in libperfbuf. A ring_buffer made by libbpf and given to those is
 * refused with EINVAL and a message naming the cause, never used; one
 * made by libperfbuf works with all of them.
 *
 * usage: rb_linkorder_test libbpf|libperfbuf   (whose ring_buffer__new
 * the link order must have bound) */
#define _GNU_SOURCE
#include <bpf/libbpf.h>

#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static struct ringbuf_producer prod;
static const char *new_is_from;

static int count(void *ctx, void *data, size_t size)
{
	(void)data;
	(void)size;
	++*(unsigned *)ctx;
	return 0;
}

static void test_records_and_rings(void)
{
	unsigned n = 0;
	struct ring_buffer *rb = ring_buffer__new(prod.map_fd, count, &n, NULL);
	EXPECT(rb, "ring_buffer__new: %s", strerror(errno));
	if (!rb)
		return;
	int ret = 0;
	EXPECT(producer_emit_ringbuf(&prod, 0, 16, 1, 100, &ret) == 0 && ret == 0, "emit");
	for (int i = 0; i < 100 && n < 100; i++)
		EXPECT(ring_buffer__poll(rb, 100) >= 0, "ring_buffer__poll");
	EXPECT(n == 100, "%u of 100 records", n);
	int libbpf_made = strstr(new_is_from, "libbpf.so") != NULL;
	errno = 0;
	struct ring *r = ring_buffer__ring(rb, 0);
	int e = errno;
	if (libbpf_made) {
		const char *why = perfbuf_last_error();
		EXPECT(!r && e == EINVAL, "ring_buffer__ring on libbpf's handle: %p errno %d", (void *)r, e);
		EXPECT(strstr(why, "not made by libperfbuf") && strstr(why, "link -lperfbuf before -lbpf"), "message: %s",
		       why);
		printf("  libbpf's ring_buffer refused: %s\n", why);
	} else {
		EXPECT(r && ring__size(r) == 4096 && ring__map_fd(r) == prod.map_fd, "ring__* on our own handle");
		EXPECT(r && ring__consumer_pos(r) == ring__producer_pos(r) && ring__avail_data_size(r) == 0,
		       "positions");
		printf("  ring_buffer__new is libperfbuf's here: ring__* read its ring\n");
	}
	ring_buffer__free(rb); /* the library that made it frees it */
}

int main(int argc, char **argv)
{
	if (argc != 2 || (strcmp(argv[1], "libbpf") && strcmp(argv[1], "libperfbuf"))) {
		fprintf(stderr, "usage: %s libbpf|libperfbuf\n", argv[0]);
		return 2;
	}
	Dl_info info, ours;
	if (!dladdr((void *)ring_buffer__new, &info) || !dladdr((void *)ring_buffer__ring, &ours)) {
		fprintf(stderr, "dladdr failed\n");
		return 1;
	}
	if (!strstr(ours.dli_fname, "libperfbuf")) {
		fprintf(stderr, "ring_buffer__ring not from libperfbuf but %s\n", ours.dli_fname);
		return 1;
	}
	new_is_from = info.dli_fname;
	printf("rb_linkorder: ring_buffer__new from %s\n", new_is_from);
	char want[32];
	snprintf(want, sizeof(want), "/%s.so", argv[1]);
	if (!strstr(new_is_from, want)) {
		fprintf(stderr, "rb_linkorder: ring_buffer__new from %s, expected %s\n", new_is_from, argv[1]);
		return 1;
	}
	int err = producer_open_ringbuf(&prod, 4096);
	if (err) {
		fprintf(stderr, "producer_open_ringbuf: %s\n", strerror(-err));
		return ci_mode() ? 1 : 77;
	}
	static const struct test_case tests[] = {{"records_and_rings", test_records_and_rings}};
	char name[64];
	snprintf(name, sizeof(name), "rb_linkorder (%s first)", argv[1]);
	int failed = run_tests(name, tests, 1);
	producer_close_ringbuf(&prod);
	return failed ? 1 : 0;
}
