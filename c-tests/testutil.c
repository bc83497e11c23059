/* See testutil.h. */
#define _GNU_SOURCE
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int checks, failures;
static int skips;

void skip_or_fail(const char *why)
{
	if (ci_mode()) {
		EXPECT(0, "%s (CI=true: a missing capability fails)", why);
		return;
	}
	printf("  SKIP: %s\n", why);
	skips++;
}

void kernel_lacks(const char *why)
{
	printf("not-on-this-kernel: %s\n", why);
}

bool ci_mode(void)
{
	const char *ci = getenv("CI");
	return ci && strcmp(ci, "true") == 0;
}

void producer_open_or_exit(struct producer *p, unsigned max_entries)
{
	int err = producer_open(p, max_entries);
	if (err) {
		fprintf(stderr, "cannot create the BPF producer: %s (need root with BPF)\n", strerror(-err));
		exit(ci_mode() ? 1 : 77);
	}
}

int count_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own fd */
}

int count_fds_naming(const char *target)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char path[300], link[256];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t len = readlink(path, link, sizeof(link) - 1);
		if (len < 0)
			continue;
		link[len] = 0;
		n += !strcmp(link, target);
	}
	closedir(d);
	return n;
}

long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

int run_tests(const char *prog, const struct test_case *tests, int n)
{
	int failed = 0, skipped = 0;
	for (int i = 0; i < n; i++) {
		int before = failures, skips_before = skips;
		tests[i].fn();
		bool skip = failures == before && skips != skips_before;
		printf("%s %s\n", failures != before ? "FAIL" : skip ? "skip" : "ok  ", tests[i].name);
		failed += failures != before;
		skipped += skip;
	}
	if (skipped)
		printf("%s: %d passed, %d failed, %d skipped\n", prog, n - failed - skipped, failed, skipped);
	else
		printf("%s: %d passed, %d failed\n", prog, n - failed, failed);
	return failed;
}

int bpf_trivial_prog(int prog_type)
{
	struct bpf_insn insns[] = {
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
		{.code = BPF_JMP | BPF_EXIT},
	};
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.prog_type = (unsigned)prog_type;
	attr.insns = (unsigned long)insns;
	attr.insn_cnt = 2;
	attr.license = (unsigned long)"GPL";
	int fd = (int)syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
	return fd < 0 ? -errno : fd;
}

int ensure_tracefs(void)
{
	struct stat st;
	if (stat("/sys/kernel/tracing/events", &st) == 0 || stat("/sys/kernel/debug/tracing/events", &st) == 0)
		return 0;
	if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL))
		return -errno;
	return 0;
}

bool kernel_has_format_lost(void)
{
	struct perf_event_attr attr = {
		.size = sizeof(attr),
		.type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_DUMMY,
		.read_format = 1u << 4, /* PERF_FORMAT_LOST, named by newer headers only */
		.disabled = 1,
	};
	int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}
