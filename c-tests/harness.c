/* Transcript, checks and producer set-up shared by every driver. */
#define _GNU_SOURCE
#include "harness.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tx_printf(struct transcript *tx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		abort();
	if (tx->len + (size_t)n + 1 > tx->cap) {
		size_t cap = tx->cap ? tx->cap : 4096;
		while (cap < tx->len + (size_t)n + 1)
			cap *= 2;
		char *p = realloc(tx->text, cap);
		if (!p)
			abort();
		tx->text = p;
		tx->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(tx->text + tx->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	tx->len += (size_t)n;
}

void tx_reset(struct transcript *tx)
{
	tx->len = 0;
	if (tx->text)
		tx->text[0] = '\0';
}

void tx_free(struct transcript *tx)
{
	free(tx->text);
	memset(tx, 0, sizeof(*tx));
}

void harness_fail(struct harness *h, const char *file, int line, const char *cond, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "[%s] %s:%d: check failed: %s: ", h->api->name, file, line, cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void harness_open(struct harness *h, const struct pb_api *api)
{
	memset(h, 0, sizeof(*h));
	h->api = api;
	producer_open_or_exit(&h->prod, 0);
}

void harness_close(struct harness *h)
{
	producer_close(&h->prod);
	tx_free(&h->tx);
}

int run_scenarios(struct harness *h, FILE *transcript)
{
	int failed = 0;
	for (size_t i = 0; i < scenario_count; i++) {
		int before = h->failures;
		tx_reset(&h->tx);
		scenarios[i].run(h);
		printf("%s %s\n", h->failures == before ? "ok  " : "FAIL", scenarios[i].name);
		if (transcript)
			fprintf(transcript, "== %s ==\n%s", scenarios[i].name, h->tx.text ? h->tx.text : "");
		failed += h->failures != before;
	}
	return failed;
}

static void *sym(void *lib, const char *libname, const char *name)
{
	void *p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "%s: missing %s\n", libname, name);
		exit(1);
	}
	return p;
}

#define LOAD(api, lib, libname, field, name)                \
	do {                                                \
		void *_p = sym(lib, libname, name);         \
		memcpy(&(api)->field, &_p, sizeof(_p));     \
	} while (0)

void harness_load_api(struct pb_api *api, const char *libname, const char *path)
{
	/* DEEPBIND: the library's calls to its own exported names (libbpf's
	 * perf_buffer__new freeing a half-built buffer) must not reach a
	 * perf_buffer__free the program linked from libperfbuf. */
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
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

void transcript_save(const char *dir, const char *scenario, const char *lib, const struct transcript *tx)
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

int run_compared(struct harness *ref, struct harness *h, const char *outdir)
{
	int failed = 0;
	for (size_t i = 0; i < scenario_count; i++) {
		const struct scenario *s = &scenarios[i];
		tx_reset(&ref->tx);
		tx_reset(&h->tx);
		int fr = ref->failures, fh = h->failures;
		s->run(ref);
		s->run(h);
		transcript_save(outdir, s->name, ref->api->name, &ref->tx);
		transcript_save(outdir, s->name, h->api->name, &h->tx);
		const char *a = ref->tx.text ? ref->tx.text : "", *b = h->tx.text ? h->tx.text : "";
		int differ = transcript_compare(s->name, ref->api->name, a, h->api->name, b);
		bool ok = !differ && ref->failures == fr && h->failures == fh && h->tx.len > 0;
		int lines = 0;
		for (const char *p = b; *p; p++)
			lines += *p == '\n';
		printf("%s %-18s %4d transcript lines %s\n", ok ? "ok  " : "FAIL", s->name, lines,
		       differ ? "(transcripts differ)" : "identical");
		failed += !ok;
	}
	printf("checks: %s %d/%d, %s %d/%d passed\n", ref->api->name, ref->checks - ref->failures, ref->checks,
	       h->api->name, h->checks - h->failures, h->checks);
	return failed;
}

int transcript_compare(const char *scenario, const char *a_name, const char *a, const char *b_name,
		       const char *b)
{
	int line = 1;
	for (;;) {
		const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
		size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
		if (la != lb || memcmp(a, b, la) != 0) {
			fprintf(stderr, "%s: transcripts differ at line %d\n  %-10s %.*s\n  %-10s %.*s\n", scenario,
				line, a_name, (int)la, a, b_name, (int)lb, b);
			return 1;
		}
		if (!ea || !eb)
			return (ea || eb) ? 1 : 0;
		a = ea + 1;
		b = eb + 1;
		line++;
	}
}
