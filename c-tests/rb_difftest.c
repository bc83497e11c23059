/* The ring buffer's differential test: loads a libbpf (the system's
 * libbpf.so.1, or RB_LIBBPF=PATH, e.g. a newer libbpf with the 1.3/1.5
 * functions) and libperfbuf.so side by side (RTLD_LOCAL), runs every
 * ring buffer scenario through each, and requires identical transcripts
 * plus every absolute check to pass.
 *
 * usage: rb_difftest PATH/libperfbuf.so [OUTDIR]   (OUTDIR gets the transcripts) */
#define _GNU_SOURCE
#include "rb_harness.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/libperfbuf.so [OUTDIR]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *libbpf = getenv("RB_LIBBPF") ? getenv("RB_LIBBPF") : "libbpf.so.1";
	struct rb_api bpf, pb;
	rb_load_api(&bpf, "libbpf", libbpf);
	rb_load_api(&pb, "libperfbuf", argv[1]);
	struct rb_harness hb = {.api = &bpf}, hp = {.api = &pb};
	int failed = rb_run_compared(&hb, &hp, argc > 2 ? argv[2] : NULL);
	printf("rb_difftest: %zu passed, %d failed\n", rb_scenario_count - (size_t)failed, failed);
	tx_free(&hb.tx);
	tx_free(&hp.tx);
	return failed ? 1 : 0;
}
