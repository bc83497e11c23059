/* record: `perf record` in a page of C. cpu-clock at 999 Hz with call
 * chains on every CPU, plus the scheduler's tracepoints, for the duration
 * of a command, into perf.data (or FILE), for `perf report` and `perf script`.
 *
 * usage: record [-o FILE] COMMAND [ARGS...]      (root, tracefs mounted)
 *        perf report -i perf.data --stdio */
#include <errno.h>
#include <perfbuf.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The writer takes the rings' records itself; nothing to do per record. */
static enum bpf_perf_event_ret ignore(void *ctx, int cpu, struct perf_event_header *rec)
{
	(void)ctx, (void)cpu, (void)rec;
	return LIBBPF_PERF_EVENT_CONT;
}

int main(int argc, char **argv)
{
	const char *path = "perf.data";
	int first = 1;

	if (argc > 2 && strcmp(argv[1], "-o") == 0)
		path = argv[2], first = 3;
	if (first >= argc)
		return fprintf(stderr, "usage: %s [-o FILE] COMMAND [ARGS...]\n", argv[0]), 2;

	struct perfbuf_events_opts opts = {.sz = sizeof(opts), .page_cnt = 128};
	struct perfbuf_events *set = perfbuf_events_new(&opts);
	if (!set)
		return fprintf(stderr, "record: %s\n", perfbuf_last_error()), 1;
	struct perfbuf_event_desc clock = {
		.sz = sizeof(clock),
		.kind = PERFBUF_EVENT_SOFTWARE,
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.flags = PERFBUF_EVENT_F_FREQ,
		.period = 999,
		.sample_type = PERF_SAMPLE_CALLCHAIN,
	};
	int err = perfbuf_events_add(set, &clock);
	const char *tracepoints[] = {"sched:sched_switch", "sched:sched_process_exec", "sched:sched_process_exit"};
	for (size_t i = 0; err >= 0 && i < sizeof(tracepoints) / sizeof(tracepoints[0]); i++) {
		struct perfbuf_event_desc tp = {.sz = sizeof(tp), .kind = PERFBUF_EVENT_TRACEPOINT, .name = tracepoints[i]};
		err = perfbuf_events_add(set, &tp);
	}
	/* After the events: the file describes them, plus COMM/MMAP2 of what runs. */
	struct perfbuf_perfdata *out = err < 0 ? NULL : perfbuf_perfdata_new_events(path, set);
	struct perf_buffer *pb = out ? perfbuf_events_reader(set, ignore, NULL) : NULL;
	if (!pb || perfbuf_events_enable(set, -1)) {
		fprintf(stderr, "record: %s\n", perfbuf_last_error());
		perfbuf_free(pb);
		perfbuf_perfdata_close(out);
		perfbuf_events_free(set);
		return 1;
	}

	pid_t child = fork();
	if (child == 0) {
		execvp(argv[first], &argv[first]);
		perror(argv[first]);
		_exit(127);
	}
	int status = 0;
	long records = 0;
	while (child > 0 && waitpid(child, &status, WNOHANG) == 0) {
		int n = perfbuf_perfdata_poll(out, pb, 100);
		if (n < 0) {
			err = n;
			break;
		}
		records += n;
	}
	perfbuf_events_disable(set, -1);
	int n = perfbuf_perfdata_drain(out, pb);
	records += n > 0 ? n : 0;
	int closed = perfbuf_perfdata_close(out); /* header features, header */
	if (err < 0 || n < 0 || closed < 0)
		fprintf(stderr, "record: writing %s failed: %s\n", path, strerror(errno));
	else
		fprintf(stderr, "[ record: %ld records written to %s ]\n", records, path);
	perfbuf_free(pb);
	perfbuf_events_free(set);
	return err < 0 || n < 0 || closed < 0 ? 1 : WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
