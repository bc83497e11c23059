/* What every C test program shares: a checking macro that counts, the
 * producer set-up that fails under CI instead of skipping, and process
 * figures for leak checks. */
#ifndef PERFBUF_TESTUTIL_H
#define PERFBUF_TESTUTIL_H

#include <stdbool.h>
#include <stdio.h>

#include "producer.h"

extern int checks, failures;

/* Counts a check; prints the first 40 failures with a printf message. */
#define EXPECT(cond, ...)                                                                      \
	do {                                                                                   \
		checks++;                                                                      \
		if (!(cond)) {                                                                 \
			if (failures++ < 40) {                                                 \
				fprintf(stderr, "%s:%d: failed: %s: ", __FILE__, __LINE__, #cond); \
				fprintf(stderr, __VA_ARGS__);                                  \
				fputc('\n', stderr);                                           \
			}                                                                      \
		}                                                                              \
	} while (0)

/* CI=true: a missing capability is a failure, never a skip. */
bool ci_mode(void);

/* The running test cannot do what it checks for `why` (a missing
 * capability): a failure under CI, else a skip that run_tests counts and
 * prints with its reason. The caller returns from the test. */
void skip_or_fail(const char *why);
/* The success path needs a kernel option this kernel lacks (no
 * CONFIG_KPROBES here): the caller checked the clear error instead; the
 * test passes and make test lists the path as not run on this kernel. */
void kernel_lacks(const char *why);

/* Opens the BPF producer, or exits: 1 under CI, else 77 (skipped). */
void producer_open_or_exit(struct producer *p, unsigned max_entries);

/* Open file descriptors of this process. */
int count_open_fds(void);
/* Open fds whose /proc/self/fd link reads `target` (e.g. "anon_inode:bpf_link"). */
int count_fds_naming(const char *target);

/* Resident set size of this process, in kB. */
long rss_kb(void);

/* A program of `prog_type` that returns 0 (`BPF_PROG_TYPE_PERF_EVENT`,
 * _TRACEPOINT, _KPROBE...), loaded with bpf(2); its fd, or -errno. */
int bpf_trivial_prog(int prog_type);

/* Whether the kernel takes PERF_FORMAT_LOST (Linux 6.0): the exact lost
 * figures need it. */
bool kernel_has_format_lost(void);

/* Mounts tracefs at /sys/kernel/tracing unless it is mounted somewhere we
 * look; returns 0, or -errno (not root?). */
int ensure_tracefs(void);

struct test_case {
	const char *name;
	void (*fn)(void);
};

/* Runs each test, prints ok/skip/FAIL per test and "PROG: N passed, M
 * failed" (", K skipped" when some were); returns the number that failed. */
int run_tests(const char *prog, const struct test_case *tests, int n);

#endif
