/* Differential test, the dlopen way in: loads the system libbpf.so.1 and
 * libperfbuf.so side by side (RTLD_LOCAL), runs every scenario through each,
 * and requires identical transcripts plus every absolute check to pass.
 *
 * usage: difftest PATH/libperfbuf.so [OUTDIR]   (OUTDIR gets the transcripts) */
#define _GNU_SOURCE
#include "harness.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *sym(void *lib, const char *libname, const char *name)
{
	void *p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "%s: missing %s\n", libname, name);
		exit(1);
	}
	return p;
}

#define LOAD(api, lib, libname, field, name)                       \
	do {                                                       \
		void *_p = sym(lib, libname, name);                \
		memcpy(&(api)->field, &_p, sizeof(_p));            \
	} while (0)

static void load_api(struct pb_api *api, const char *libname, const char *path)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
	api->name = libname;
	LOAD(api, lib, libname, new_, "perf_buffer__new");
	LOAD(api, lib, libname, new_raw, "perf_buffer__new_raw");
	LOAD(api, lib, libname, free_, "perf_buffer__free");
	LOAD(api, lib, libname, epoll_fd, "perf_buffer__epoll_fd");
	LOAD(api, lib, libname, poll, "perf_buffer__poll");
	LOAD(api, lib, libname, consume, "perf_buffer__consume");
	LOAD(api, lib, libname, consume_buffer, "perf_buffer__consume_buffer");
	LOAD(api, lib, libname, buffer_cnt, "perf_buffer__buffer_cnt");
	LOAD(api, lib, libname, buffer_fd, "perf_buffer__buffer_fd");
	LOAD(api, lib, libname, buffer, "perf_buffer__buffer");

	/* Prove which object serves the calls. */
	Dl_info info;
	void *fn;
	memcpy(&fn, &api->new_, sizeof(fn));
	if (!dladdr(fn, &info) || !strstr(info.dli_fname, libname)) {
		fprintf(stderr, "%s: perf_buffer__new resolved to %s\n", libname, info.dli_fname);
		exit(1);
	}
	printf("%-10s perf_buffer__new from %s\n", libname, info.dli_fname);
}

static void save(const char *dir, const char *scenario, const char *lib, const struct transcript *tx)
{
	if (!dir)
		return;
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.%s.txt", dir, scenario, lib);
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(tx->text ? tx->text : "", f);
		fclose(f);
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s PATH/libperfbuf.so [OUTDIR]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct pb_api bpf, pb;
	load_api(&bpf, "libbpf", "libbpf.so.1");
	load_api(&pb, "libperfbuf", argv[1]);

	struct harness hb, hp;
	harness_open(&hb, &bpf);
	harness_open(&hp, &pb);
	int passed = 0, failed = 0;
	for (size_t i = 0; i < scenario_count; i++) {
		const struct scenario *s = &scenarios[i];
		tx_reset(&hb.tx);
		tx_reset(&hp.tx);
		int fb = hb.failures, fp = hp.failures;
		s->run(&hb);
		s->run(&hp);
		save(argc > 2 ? argv[2] : NULL, s->name, "libbpf", &hb.tx);
		save(argc > 2 ? argv[2] : NULL, s->name, "libperfbuf", &hp.tx);
		int differ = transcript_compare(s->name, "libbpf", hb.tx.text ? hb.tx.text : "", "libperfbuf",
						hp.tx.text ? hp.tx.text : "");
		bool ok = !differ && hb.failures == fb && hp.failures == fp && hb.tx.len > 0;
		int lines = 0;
		for (const char *p = hp.tx.text; p && *p; p++)
			lines += *p == '\n';
		printf("%s %-18s %4d transcript lines %s\n", ok ? "ok  " : "FAIL", s->name, lines,
		       differ ? "(transcripts differ)" : "identical");
		ok ? passed++ : failed++;
	}
	printf("checks: libbpf %d/%d, libperfbuf %d/%d passed\n", hb.checks - hb.failures, hb.checks,
	       hp.checks - hp.failures, hp.checks);
	printf("difftest: %d passed, %d failed\n", passed, failed);
	harness_close(&hb);
	harness_close(&hp);
	return failed ? 1 : 0;
}
