/* Side-band records through the C face on the real kernel: a set asking
 * for COMM, TASK and MMAP (+data) records sees a child fork, exec a
 * marked binary (this one, through a symlink), map a file and exit, as
 * FORK, COMM with the exec bit, MMAP2 of the file and EXIT, in time order
 * with the exec tracepoint's sample; the same through the decoded reader
 * (perfbuf_events_decoded_reader: records finished by the library, no
 * header read here). Needs root and tracefs; under CI=true nothing is
 * skipped.
 * usage: sideband_test (or, as the child: pb_sb_marker FILE) */
#define _GNU_SOURCE
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <perfbuf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define MARKER "pb_sb_marker"
#define MAX_SEEN 4096

struct seen {
	char kind; /* F(ork) C(omm) X(exec sample) M(map) E(xit) */
	int exec;
	uint32_t pid, tid, ppid, ptid;
	uint64_t time, addr, len, pgoff, ino;
	uint32_t maj, min, prot;
	char name[PATH_MAX];
};

struct collected {
	struct perfbuf_events *set;
	int n, undecoded;
	struct seen recs[MAX_SEEN];
};

static int is_sideband(uint32_t type)
{
	switch (type) {
	case PERF_RECORD_COMM:
	case PERF_RECORD_FORK:
	case PERF_RECORD_EXIT:
	case PERF_RECORD_MMAP:
	case PERF_RECORD_MMAP2:
		return 1;
	default:
		return 0;
	}
}

/* A decoded side-band record of type `type` as seen. */
static void seen_sideband(struct collected *c, uint32_t type, const struct perfbuf_sideband *sb)
{
	struct seen *r = &c->recs[c->n];
	r->pid = sb->pid, r->tid = sb->tid, r->ppid = sb->ppid, r->ptid = sb->ptid, r->time = sb->time;
	if (sb->name)
		snprintf(r->name, sizeof(r->name), "%s", sb->name);
	switch (type) {
	case PERF_RECORD_FORK:
		r->kind = 'F';
		break;
	case PERF_RECORD_EXIT:
		r->kind = 'E';
		break;
	case PERF_RECORD_COMM:
		r->kind = 'C';
		r->exec = !!(sb->flags & PERFBUF_SIDEBAND_F_EXEC);
		break;
	default:
		r->kind = 'M';
		r->addr = sb->addr, r->len = sb->len, r->pgoff = sb->pgoff, r->ino = sb->ino;
		r->maj = sb->maj, r->min = sb->min, r->prot = sb->prot;
		break;
	}
	c->n++;
}

/* Each record whole (perfbuf_events_reader): decoded here. */
static enum bpf_perf_event_ret collect(void *ctx, int cpu, struct perf_event_header *hdr)
{
	(void)cpu;
	struct collected *c = ctx;
	if (c->n >= MAX_SEEN)
		return LIBBPF_PERF_EVENT_CONT;
	struct seen *r = &c->recs[c->n];
	memset(r, 0, sizeof(*r));
	if (hdr->type == PERF_RECORD_SAMPLE) {
		struct perfbuf_sample s = {.sz = sizeof(s)};
		if (perfbuf_events_decode(c->set, hdr, hdr->size, &s) < 0) {
			c->undecoded++;
			return LIBBPF_PERF_EVENT_CONT;
		}
		*r = (struct seen){.kind = 'X', .pid = s.pid, .tid = s.tid, .time = s.time};
		c->n++;
		return LIBBPF_PERF_EVENT_CONT;
	}
	if (!is_sideband(hdr->type))
		return LIBBPF_PERF_EVENT_CONT;
	struct perfbuf_sideband sb = {.sz = sizeof(sb)};
	int err = perfbuf_events_decode_sideband(c->set, hdr, hdr->size, &sb);
	if (err) {
		c->undecoded++;
		return LIBBPF_PERF_EVENT_CONT;
	}
	seen_sideband(c, hdr->type, &sb);
	return LIBBPF_PERF_EVENT_CONT;
}

/* Each record finished by the library (perfbuf_events_decoded_reader). */
static int collect_decoded(void *ctx, const struct perfbuf_event_record *rec)
{
	struct collected *c = ctx;
	if (c->n >= MAX_SEEN)
		return LIBBPF_PERF_EVENT_CONT;
	struct seen *r = &c->recs[c->n];
	memset(r, 0, sizeof(*r));
	if (rec->sz < sizeof(*rec) || rec->record == NULL || rec->record->size != rec->size ||
	    rec->record->type != rec->record_type) {
		c->undecoded++;
		return LIBBPF_PERF_EVENT_CONT;
	}
	switch (rec->kind) {
	case PERFBUF_EVENT_RECORD_SAMPLE:
		if (rec->sample == NULL || rec->event < 0 || rec->sample->record_type != PERF_RECORD_SAMPLE) {
			c->undecoded++;
			break;
		}
		*r = (struct seen){.kind = 'X', .pid = rec->sample->pid, .tid = rec->sample->tid, .time = rec->sample->time};
		c->n++;
		break;
	case PERFBUF_EVENT_RECORD_SIDEBAND:
		if (rec->sideband == NULL || rec->sideband->record_type != rec->record_type) {
			c->undecoded++;
			break;
		}
		if (is_sideband(rec->record_type))
			seen_sideband(c, rec->record_type, rec->sideband);
		break;
	case PERFBUF_EVENT_RECORD_OTHER:
		c->undecoded += rec->error != 0;
		break;
	}
	return LIBBPF_PERF_EVENT_CONT;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static char exe[PATH_MAX], dir[64], marker[128], data[128];

/* The child, exec'd as MARKER: maps two pages of FILE from offset 4096
 * and reports the address on stdout. */
static int child_main(const char *file)
{
	int fd = open(file, O_RDONLY);
	void *p = fd < 0 ? MAP_FAILED : mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, fd, 4096);
	if (p == MAP_FAILED)
		return 1;
	printf("%lx\n", (unsigned long)p);
	return 0;
}

/* The child's life through a set's reader: records whole, decoded by
 * this test (decoded = 0), or finished by the library (decoded = 1). */
static void fork_exec_mmap_exit(int decoded)
{
	int fds = count_open_fds();
	struct perfbuf_events_opts o = {
		.sz = sizeof(o),
		.flags = PERFBUF_EVENTS_SB_COMM | PERFBUF_EVENTS_SB_TASK | PERFBUF_EVENTS_SB_MMAP |
			 PERFBUF_EVENTS_SB_MMAP_DATA,
	};
	struct perfbuf_events *set = perfbuf_events_new(&o);
	EXPECT(set, "perfbuf_events_new: %s", perfbuf_last_error());
	if (!set)
		return;
	struct perfbuf_event_desc d = {.sz = sizeof(d), .kind = PERFBUF_EVENT_TRACEPOINT, .name = "sched:sched_process_exec"};
	int ev = perfbuf_events_add(set, &d);
	EXPECT(ev >= 0, "add: %s", perfbuf_last_error());
	struct collected *c = calloc(1, sizeof(*c));
	c->set = set;
	struct perf_buffer *pb =
		decoded ? perfbuf_events_decoded_reader(set, collect_decoded, c) : perfbuf_events_reader(set, collect, c);
	struct perfbuf_order_opts order = {.sz = sizeof(order), .flags = PERFBUF_ORDER_SAMPLE_TIME};
	EXPECT(pb && perfbuf_set_order(pb, &order) == 0, "reader/order: %s", perfbuf_last_error());
	EXPECT(perfbuf_events_enable(set, -1) == 0, "enable: %s", perfbuf_last_error());

	int out[2];
	EXPECT(pipe(out) == 0, "pipe");
	pid_t child = fork();
	if (child == 0) {
		dup2(out[1], 1);
		execl(marker, marker, data, (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	char buf[64] = "";
	ssize_t got = read(out[0], buf, sizeof(buf) - 1);
	close(out[0]);
	int status;
	waitpid(child, &status, 0);
	EXPECT(got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %d, output '%s'", status, buf);
	uint64_t addr = strtoull(buf, NULL, 16);
	uint64_t end = now_ns() + 1000000000ull;
	while (now_ns() < end)
		perfbuf_poll(pb, 50);
	perfbuf_consume(pb);
	perfbuf_ordered_flush(pb);

	struct stat st;
	EXPECT(stat(data, &st) == 0, "stat");
	char kinds[16] = "";
	struct seen *mine[16];
	int k = 0;
	uint64_t last = 0;
	int out_of_order = 0;
	for (int i = 0; i < c->n && k < 15; i++) {
		struct seen *r = &c->recs[i];
		int ours = r->kind == 'X' ? r->pid == (uint32_t)child
			 : r->kind == 'M' ? r->pid == (uint32_t)child && strcmp(r->name, data) == 0
					  : r->tid == (uint32_t)child;
		if (!ours)
			continue;
		out_of_order += r->time < last;
		last = r->time;
		mine[k] = r;
		kinds[k++] = r->kind;
	}
	printf("  %s: child %d: %s (%d records in all, %d undecoded)\n", decoded ? "decoded reader" : "reader", child,
	       kinds, c->n, c->undecoded);
	EXPECT(strcmp(kinds, "FCXME") == 0, "fork, comm, exec sample, mmap, exit: got '%s'", kinds);
	EXPECT(out_of_order == 0, "%d records out of time order", out_of_order);
	EXPECT(c->undecoded == 0, "%d records did not decode", c->undecoded);
	if (strcmp(kinds, "FCXME") == 0) {
		EXPECT(mine[0]->pid == (uint32_t)child && mine[0]->ppid == (uint32_t)getpid() &&
			       mine[0]->ptid == (uint32_t)getpid(),
		       "fork: pid %u ppid %u ptid %u", mine[0]->pid, mine[0]->ppid, mine[0]->ptid);
		EXPECT(mine[1]->exec && strcmp(mine[1]->name, MARKER) == 0, "comm: '%s' exec %d", mine[1]->name,
		       mine[1]->exec);
		struct seen *m = mine[3];
		EXPECT(m->addr == addr && m->len == 8192 && m->pgoff == 4096, "mmap: %#lx+%lu @%lu (want %#lx)",
		       (unsigned long)m->addr, (unsigned long)m->len, (unsigned long)m->pgoff, (unsigned long)addr);
		EXPECT(m->ino == st.st_ino && m->maj == major(st.st_dev) && m->min == minor(st.st_dev),
		       "mmap: inode %lu dev %u:%u", (unsigned long)m->ino, m->maj, m->min);
		EXPECT(m->prot == PROT_READ, "mmap: prot %u", m->prot);
		EXPECT(mine[4]->pid == (uint32_t)child && mine[4]->ppid == (uint32_t)getpid(), "exit: ppid %u",
		       mine[4]->ppid);
	}
	perfbuf_free(pb);
	perfbuf_events_free(set);
	free(c);
	EXPECT(count_open_fds() == fds, "fds %d -> %d", fds, count_open_fds());
}

static void test_fork_exec_mmap_exit(void)
{
	fork_exec_mmap_exit(0);
}

static void test_decoded_reader(void)
{
	fork_exec_mmap_exit(1);
	EXPECT(perfbuf_events_decoded_reader(NULL, collect_decoded, NULL) == NULL && errno == EINVAL, "NULL set");
	struct perfbuf_events_opts o = {.sz = sizeof(o)};
	struct perfbuf_events *set = perfbuf_events_new(&o);
	EXPECT(set && perfbuf_events_decoded_reader(set, NULL, NULL) == NULL && errno == EINVAL, "NULL record_fn");
	struct perf_buffer *pb = perfbuf_events_decoded_reader(set, collect_decoded, NULL);
	EXPECT(pb && perfbuf_events_decoded_reader(set, collect_decoded, NULL) == NULL && errno == EBUSY,
	       "second reader: %d", errno);
	perfbuf_free(pb);
	perfbuf_events_free(set);
}

/* Argument checks of the decoders, and a record that is not side-band. */
static void test_decode_errors(void)
{
	_Alignas(8) unsigned char rec[64] = {0};
	struct perf_event_header *h = (void *)rec;
	struct perfbuf_decode_attr a = {.sz = sizeof(a)};
	struct perfbuf_sideband sb = {.sz = sizeof(sb)};
	h->type = PERF_RECORD_LOST, h->size = 24;
	EXPECT(perfbuf_decode_sideband(h, sizeof(rec), &a, &sb) == -EOPNOTSUPP, "LOST is not side-band");
	h->type = PERF_RECORD_COMM, h->size = 24;
	memcpy(rec + 16, "abcdefgh", 8); /* no NUL */
	EXPECT(perfbuf_decode_sideband(h, sizeof(rec), &a, &sb) == -EBADMSG, "COMM without NUL");
	memcpy(rec + 16, "abc\0\0\0\0\0", 8);
	rec[6] = 24;
	EXPECT(perfbuf_decode_sideband(h, sizeof(rec), &a, &sb) == 0 && strcmp(sb.name, "abc") == 0 && sb.name_len == 3,
	       "COMM decodes: %s", sb.name);
	sb.sz = 4;
	EXPECT(perfbuf_decode_sideband(h, sizeof(rec), &a, &sb) == -EINVAL, "sz too small");
	EXPECT(perfbuf_events_decode_sideband(NULL, h, sizeof(rec), &sb) == -EINVAL, "NULL set");
}

int main(int argc, char **argv)
{
	if (strcmp(basename(argv[0]), MARKER) == 0)
		return argc > 1 ? child_main(argv[1]) : 2;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return perror("readlink"), 1;
	exe[n] = 0;
	int err = ensure_tracefs();
	if (err) {
		fprintf(stderr, "sideband_test: no tracefs: %s\n", strerror(-err));
		return ci_mode() ? 1 : 77;
	}
	snprintf(dir, sizeof(dir), "/tmp/perfbuf_sb_%d", getpid());
	snprintf(marker, sizeof(marker), "%s/%s", dir, MARKER);
	snprintf(data, sizeof(data), "%s/mapped.bin", dir);
	if (mkdir(dir, 0700) || symlink(exe, marker))
		return perror("mkdir/symlink"), 1;
	int fd = open(data, O_WRONLY | O_CREAT, 0600);
	static char page[4 * 4096];
	if (fd < 0 || write(fd, page, sizeof(page)) != (ssize_t)sizeof(page))
		return perror("data file"), 1;
	close(fd);
	static const struct test_case tests[] = {
		{"fork_exec_mmap_exit", test_fork_exec_mmap_exit},
		{"decoded_reader", test_decoded_reader},
		{"decode_errors", test_decode_errors},
	};
	int failed = run_tests("sideband_test", tests, (int)(sizeof(tests) / sizeof(tests[0])));
	unlink(marker);
	unlink(data);
	rmdir(dir);
	return failed ? 1 : 0;
}
