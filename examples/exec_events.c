/* README's example: a BPF program loaded with libbpf, its records read with
 * libperfbuf. Runs /bin/true three times and prints the execs it sees.
 * usage: exec_events [exec_events.bpf.o] */
#include <bpf/libbpf.h>
#include <perfbuf.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct exec_event { unsigned pid, unused; char comm[16]; }; /* as the BPF program writes it */

struct runs { pid_t kids[3]; int seen; }; /* this program's children: other execs are shown, not counted */

static void on_event(void *ctx, int cpu, void *data, unsigned size)
{
	const struct exec_event *e = data;
	struct runs *runs = ctx;
	(void)size;
	printf("cpu %d: pid %u ran %s\n", cpu, e->pid, e->comm);
	for (int i = 0; i < 3; i++)
		runs->seen += e->pid == (unsigned)runs->kids[i] && strcmp(e->comm, "true") == 0;
}

int main(int argc, char **argv)
{
	struct bpf_object *obj = bpf_object__open_file(argc > 1 ? argv[1] : "exec_events.bpf.o", NULL);
	if (!obj || bpf_object__load(obj) || !bpf_program__attach(bpf_object__find_program_by_name(obj, "on_exec")))
		return fprintf(stderr, "cannot load the BPF program (root?)\n"), 1;
	struct runs runs = {0};
	struct perf_buffer *pb = perfbuf_new(bpf_object__find_map_fd_by_name(obj, "events"), 8, on_event, NULL,
					     &runs, NULL);
	if (!pb)
		return fprintf(stderr, "%s\n", perfbuf_last_error()), 1;
	for (int i = 0; i < 3; i++)
		if ((runs.kids[i] = fork()) == 0)
			execl("/bin/true", "true", (char *)NULL), _exit(127);
	while (wait(NULL) > 0)
		;
	while (runs.seen < 3 && perfbuf_poll(pb, 1000) > 0)
		;
	perfbuf_free(pb);
	bpf_object__close(obj);
	printf("%d execs of true seen from this program\n", runs.seen);
	return runs.seen == 3 ? 0 : 1;
}
