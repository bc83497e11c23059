/* The LD_PRELOAD way in, for ring buffers: an ordinary program built
 * against the system libbpf (<bpf/libbpf.h>, -lbpf, versioned references
 * such as ring_buffer__new@LIBBPF_0.0.9). Run plainly it uses libbpf; run
 * with LD_PRELOAD=libperfbuf.so every ring_buffer__* call must reach
 * libperfbuf, and the make target compares the two transcripts.
 *
 * usage: rb_preload_test libbpf|libperfbuf TRANSCRIPT_FILE */
#define _GNU_SOURCE
#include "rb_harness.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s libbpf|libperfbuf TRANSCRIPT_FILE\n", argv[0]);
		return 2;
	}
	const char *expect = argv[1];
	static const struct rb_api api = RB_API_LINKED("linked");
	void *fns[6];
	memcpy(fns, &api.new_, sizeof(fns));
	static const char *names[6] = {"new", "free", "add", "poll", "consume", "epoll_fd"};
	for (int i = 0; i < 6; i++) {
		Dl_info info;
		if (!dladdr(fns[i], &info) || !strstr(info.dli_fname, expect)) {
			fprintf(stderr, "ring_buffer__%s served by %s, expected %s\n", names[i],
				info.dli_fname ? info.dli_fname : "?", expect);
			return 1;
		}
		printf("ring_buffer__%s served by %s\n", names[i], info.dli_fname);
	}
	FILE *out = fopen(argv[2], "w");
	if (!out) {
		perror(argv[2]);
		return 1;
	}
	struct rb_harness h = {.api = &api};
	int failed = rb_run(&h, out, false);
	fclose(out);
	int ran = 0;
	for (size_t i = 0; i < rb_scenario_count; i++)
		ran += rb_scenarios[i].kind == RB_BOTH;
	printf("rb_preload_test (%s): %d passed, %d failed\n", expect, ran - failed, failed);
	tx_free(&h.tx);
	return failed ? 1 : 0;
}
