/* See rb_harness.h. */
#define _GNU_SOURCE
#include "rb_harness.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rb_fail(struct rb_harness *h, const char *file, int line, const char *cond, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "[%s] %s:%d: check failed: %s: ", h->api->name, file, line, cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void *need(void *lib, const char *libname, const char *name)
{
	void *p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "%s: missing %s\n", libname, name);
		exit(1);
	}
	return p;
}

#define SET(field, p) memcpy(&(field), &(void *){(p)}, sizeof(void *))

void rb_load_api(struct rb_api *api, const char *libname, const char *path)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
	if (!lib) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
	memset(api, 0, sizeof(*api));
	api->name = libname;
	SET(api->new_, need(lib, libname, "ring_buffer__new"));
	SET(api->free_, need(lib, libname, "ring_buffer__free"));
	SET(api->add, need(lib, libname, "ring_buffer__add"));
	SET(api->poll, need(lib, libname, "ring_buffer__poll"));
	SET(api->consume, need(lib, libname, "ring_buffer__consume"));
	SET(api->epoll_fd, need(lib, libname, "ring_buffer__epoll_fd"));
	SET(api->consume_n, dlsym(lib, "ring_buffer__consume_n"));
	SET(api->ring, dlsym(lib, "ring_buffer__ring"));
	SET(api->consumer_pos, dlsym(lib, "ring__consumer_pos"));
	SET(api->producer_pos, dlsym(lib, "ring__producer_pos"));
	SET(api->avail_data_size, dlsym(lib, "ring__avail_data_size"));
	SET(api->size, dlsym(lib, "ring__size"));
	SET(api->map_fd, dlsym(lib, "ring__map_fd"));
	SET(api->ring_consume, dlsym(lib, "ring__consume"));
	SET(api->ring_consume_n, dlsym(lib, "ring__consume_n"));

	Dl_info info;
	void *fn;
	memcpy(&fn, &api->new_, sizeof(fn));
	if (!dladdr(fn, &info) || !strstr(info.dli_fname, libname)) {
		fprintf(stderr, "%s: ring_buffer__new resolved to %s\n", libname, info.dli_fname);
		exit(1);
	}
	printf("%-10s ring_buffer__new from %s (ring__* and consume_n: %s)\n", libname, info.dli_fname,
	       api->ring_consume_n ? "yes" : "no");
}

static bool has_new_api(const struct rb_api *api)
{
	return api->consume_n && api->ring && api->consumer_pos && api->producer_pos && api->avail_data_size &&
	       api->size && api->map_fd && api->ring_consume && api->ring_consume_n;
}

int rb_run(struct rb_harness *h, FILE *out, bool all)
{
	int failed = 0;
	for (size_t i = 0; i < rb_scenario_count; i++) {
		const struct rb_scenario *s = &rb_scenarios[i];
		if (s->kind != RB_BOTH && !all)
			continue;
		if (s->kind == RB_NEW_API && !has_new_api(h->api))
			continue;
		int before = h->failures;
		tx_reset(&h->tx);
		s->run(h);
		printf("%s %s\n", h->failures == before ? "ok  " : "FAIL", s->name);
		if (out)
			fprintf(out, "== %s ==\n%s", s->name, h->tx.text ? h->tx.text : "");
		failed += h->failures != before;
	}
	return failed;
}

int rb_run_compared(struct rb_harness *ref, struct rb_harness *h, const char *outdir)
{
	int failed = 0, alone = 0;
	for (size_t i = 0; i < rb_scenario_count; i++) {
		const struct rb_scenario *s = &rb_scenarios[i];
		bool compare = s->kind == RB_BOTH || (s->kind == RB_NEW_API && has_new_api(ref->api));
		tx_reset(&ref->tx);
		tx_reset(&h->tx);
		int fr = ref->failures, fh = h->failures;
		if (compare)
			s->run(ref);
		s->run(h);
		char name[96];
		snprintf(name, sizeof(name), "rb_%s", s->name);
		transcript_save(outdir, name, h->api->name, &h->tx);
		int differ = 0;
		if (compare) {
			transcript_save(outdir, name, ref->api->name, &ref->tx);
			differ = transcript_compare(s->name, ref->api->name, ref->tx.text ? ref->tx.text : "",
						    h->api->name, h->tx.text ? h->tx.text : "");
		}
		bool ok = !differ && ref->failures == fr && h->failures == fh && h->tx.len > 0;
		int lines = 0;
		for (const char *p = h->tx.text ? h->tx.text : ""; *p; p++)
			lines += *p == '\n';
		printf("%s %-24s %4d transcript lines %s\n", ok ? "ok  " : "FAIL", s->name, lines,
		       !compare ? (s->kind == RB_NEW_API ? "(alone: the reference lacks libbpf 1.3/1.5's functions)"
							 : "(alone: libbpf crashes on these calls)")
		       : differ ? "(transcripts differ)"
				: "identical");
		alone += !compare;
		failed += !ok;
	}
	printf("checks: %s %d/%d, %s %d/%d passed; %d scenarios compared, %d on %s alone\n", ref->api->name,
	       ref->checks - ref->failures, ref->checks, h->api->name, h->checks - h->failures, h->checks,
	       (int)rb_scenario_count - alone, alone, h->api->name);
	return failed;
}
