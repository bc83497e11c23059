/* execmon: a tracing monitor of process execs, without BPF. The
 * sched:sched_process_exec tracepoint is opened on every CPU, its samples
 * are read in time order across CPUs, and each one's fields are decoded by
 * name from the tracepoint's format file.
 *
 * usage: execmon [-f FILTER] [-t SECONDS] [COMMAND [ARGS...]]
 *   With a COMMAND, runs it and stops once it has exited (its own execs and
 *   its children's are shown among everyone else's); otherwise runs for
 *   SECONDS (default: until Ctrl-C). FILTER is an ftrace filter on the
 *   tracepoint's fields, e.g. 'filename ~ "*bin/sh"'.
 * Needs root (or CAP_PERFMON) and a mounted tracefs. */
#include <errno.h>
#include <getopt.h>
#include <perfbuf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct monitor {
	struct perfbuf_events *set;
	int exec_event;
	unsigned long execs, lost;
	unsigned long long last_time;
	int out_of_order;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static enum bpf_perf_event_ret on_record(void *ctx, int cpu, struct perf_event_header *rec)
{
	struct monitor *m = ctx;
	struct perfbuf_sample s = {.sz = sizeof(s)};
	int ev = perfbuf_events_decode(m->set, rec, rec->size, &s);

	if (rec->type == PERF_RECORD_LOST) {
		m->lost += s.lost;
		return LIBBPF_PERF_EVENT_CONT;
	}
	if (ev != m->exec_event || rec->type != PERF_RECORD_SAMPLE)
		return LIBBPF_PERF_EVENT_CONT;
	struct perfbuf_field file = {.sz = sizeof(file)}, old_pid = {.sz = sizeof(old_pid)};
	if (perfbuf_events_field(m->set, ev, s.raw, s.raw_size, "filename", &file) ||
	    perfbuf_events_field(m->set, ev, s.raw, s.raw_size, "old_pid", &old_pid))
		return LIBBPF_PERF_EVENT_CONT;
	m->out_of_order += s.time < m->last_time;
	m->last_time = s.time;
	m->execs++;
	printf("%llu.%06llu cpu %d pid %u (was %lld) exec %.*s\n", s.time / 1000000000ull,
	       s.time % 1000000000ull / 1000, cpu, s.pid, (long long)old_pid.i, (int)file.len,
	       (const char *)file.data);
	return LIBBPF_PERF_EVENT_CONT;
}

int main(int argc, char **argv)
{
	const char *filter = NULL;
	double seconds = -1;
	int opt;

	while ((opt = getopt(argc, argv, "+f:t:h")) != -1) {
		if (opt == 'f')
			filter = optarg;
		else if (opt == 't')
			seconds = atof(optarg);
		else
			return fprintf(stderr, "usage: %s [-f FILTER] [-t SECONDS] [COMMAND [ARGS...]]\n", argv[0]), 2;
	}
	struct monitor m = {0};
	m.set = perfbuf_events_new(NULL);
	if (!m.set)
		return fprintf(stderr, "execmon: %s\n", perfbuf_last_error()), 1;
	struct perfbuf_event_desc exec = {
		.sz = sizeof(exec),
		.kind = PERFBUF_EVENT_TRACEPOINT,
		.name = "sched:sched_process_exec",
		.filter = filter,
	};
	m.exec_event = perfbuf_events_add(m.set, &exec);
	struct perf_buffer *pb = m.exec_event < 0 ? NULL : perfbuf_events_reader(m.set, on_record, &m);
	struct perfbuf_order_opts order = {.sz = sizeof(order), .flags = PERFBUF_ORDER_SAMPLE_TIME};
	if (!pb || perfbuf_set_order(pb, &order) || perfbuf_events_enable(m.set, -1)) {
		fprintf(stderr, "execmon: %s\n", perfbuf_last_error());
		perfbuf_free(pb);
		perfbuf_events_free(m.set);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	pid_t child = -1;
	if (optind < argc) {
		child = fork();
		if (child == 0) {
			execvp(argv[optind], &argv[optind]);
			perror(argv[optind]);
			_exit(127);
		}
	}
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	int status = 0, err = 0;
	while (!stop) {
		if (child > 0 && waitpid(child, &status, WNOHANG) == child)
			break;
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (seconds >= 0 && (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds)
			break;
		err = perfbuf_poll(pb, 100);
		if (err < 0 && err != -EINTR)
			break;
		err = 0;
	}
	/* Whatever the command's last execs left in the rings, in order. */
	perfbuf_events_disable(m.set, -1);
	perfbuf_consume(pb);
	perfbuf_ordered_flush(pb);
	fprintf(stderr, "execmon: %lu execs, %lu lost, %d out of order\n", m.execs, m.lost, m.out_of_order);
	perfbuf_free(pb);
	perfbuf_events_free(m.set);
	if (err < 0)
		return fprintf(stderr, "execmon: poll: %s\n", perfbuf_last_error()), 1;
	return child > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}
