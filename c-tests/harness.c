/* Transcript, checks and producer set-up shared by every driver. */
#define _GNU_SOURCE
#include "harness.h"

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
