/* Differential test, the dlopen way in: loads the system libbpf.so.1 and
 * libperfbuf.so side by side (RTLD_LOCAL), runs every scenario through each,
 * and requires identical transcripts plus every absolute check to pass.
 *
 * usage: difftest PATH/libperfbuf.so [OUTDIR]   (OUTDIR gets the transcripts) */
#define _GNU_SOURCE
#include "harness.h"

#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/libperfbuf.so [OUTDIR]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct pb_api bpf, pb;
	harness_load_api(&bpf, "libbpf", "libbpf.so.1");
	harness_load_api(&pb, "libperfbuf", argv[1]);

	struct harness hb, hp;
	harness_open(&hb, &bpf);
	harness_open(&hp, &pb);
	int failed = run_compared(&hb, &hp, argc > 2 ? argv[2] : NULL);
	printf("difftest: %zu passed, %d failed\n", scenario_count - (size_t)failed, failed);
	harness_close(&hb);
	harness_close(&hp);
	return failed ? 1 : 0;
}
