/* The LD_PRELOAD way in: an ordinary program built against the system
 * libbpf (<bpf/libbpf.h>, -lbpf, versioned references such as
 * perf_buffer__new@LIBBPF_0.6.0). Run plainly it uses libbpf; run with
 * LD_PRELOAD=libperfbuf.so it must use libperfbuf, and the make target
 * compares the two transcripts.
 *
 * usage: preload_test libbpf|libperfbuf TRANSCRIPT_FILE */
#define _GNU_SOURCE
#include "harness.h"

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
	static const struct pb_api api = PB_API_LINKED("linked");
	/* Which object serves each call? Every one must come from `expect`. */
	void *fns[10];
	memcpy(fns, &api.new_, sizeof(fns));
	for (int i = 0; i < 10; i++) {
		Dl_info info;
		if (!dladdr(fns[i], &info) || !strstr(info.dli_fname, expect)) {
			fprintf(stderr, "function %d served by %s, expected %s\n", i,
				info.dli_fname ? info.dli_fname : "?", expect);
			return 1;
		}
		if (i == 0)
			printf("perf_buffer__new served by %s\n", info.dli_fname);
	}

	FILE *out = fopen(argv[2], "w");
	if (!out) {
		perror(argv[2]);
		return 1;
	}
	struct harness h;
	harness_open(&h, &api);
	int failed = run_scenarios(&h, out);
	fclose(out);
	printf("preload_test (%s): %zu passed, %d failed\n", expect, scenario_count - (size_t)failed, failed);
	harness_close(&h);
	return failed ? 1 : 0;
}
