/* See stream.h. */
#define _GNU_SOURCE
#include "stream.h"

#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void stream_open(struct stream *s, unsigned per_cpu0, unsigned per_cpu1, unsigned size)
{
	memset(s, 0, sizeof(*s));
	int err = producer_open(&s->prod, 0);
	if (err) {
		fprintf(stderr, "cannot create the BPF producer: %s (need root with BPF)\n", strerror(-err));
		const char *ci = getenv("CI");
		exit(ci && !strcmp(ci, "true") ? 1 : 77);
	}
	s->per_cpu[0] = per_cpu0;
	s->per_cpu[1] = per_cpu1;
	s->size = size;
	for (int c = 0; c < STREAM_CPUS; c++)
		s->seen[c] = calloc(s->per_cpu[c] + 1, 1);
}

struct worker {
	struct stream *s;
	int cpu;
};

static size_t free_space(struct stream *s, int cpu)
{
	struct perf_event_mmap_page *mp = s->region[cpu];
	if (!mp)
		return (size_t)-1;
	uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = __atomic_load_n(&mp->data_tail, __ATOMIC_ACQUIRE);
	return s->region_size - (size_t)(head - tail);
}

static void *produce(void *arg)
{
	struct worker *w = arg;
	struct stream *s = w->s;
	unsigned record = 8 + ((s->size + 4 + 7) & ~7u);
	for (unsigned seq = 0; seq < s->per_cpu[w->cpu] && !s->stop; seq++) {
		while (free_space(s, w->cpu) < 2 * record && !s->stop)
			usleep(50);
		int ret = 0;
		producer_emit_stamped_seq(&s->prod, w->cpu, s->size, seq, &ret);
		if (ret)
			fprintf(stderr, "cpu %d seq %u: helper returned %d\n", w->cpu, seq, ret);
	}
	free(w);
	return NULL;
}

void stream_start(struct stream *s)
{
	for (int c = 0; c < STREAM_CPUS; c++) {
		struct worker *w = malloc(sizeof(*w));
		*w = (struct worker){.s = s, .cpu = c};
		pthread_create(&s->threads[c], NULL, produce, w);
	}
}

void stream_join(struct stream *s)
{
	for (int c = 0; c < STREAM_CPUS; c++)
		pthread_join(s->threads[c], NULL);
}

void stream_check(struct stream *s, int cpu, const void *data, uint32_t size)
{
	const uint8_t *d = data;
	uint64_t stamp;
	uint32_t seq;
	if (size < 16 || cpu < 0 || cpu >= STREAM_CPUS) {
		s->bad++;
		return;
	}
	memcpy(&stamp, d, 8);
	memcpy(&seq, d + 10, 4);
	if (d[14] != cpu || seq >= s->per_cpu[cpu]) {
		s->bad++;
		return;
	}
	if (s->seen[cpu][seq]++)
		s->duplicates++;
	if (stamp < s->last_stamp)
		s->out_of_order++;
	else
		s->last_stamp = stamp;
	s->delivered++;
}

int stream_verdict(struct stream *s, const char *name)
{
	uint64_t missing = 0, produced = 0;
	for (int c = 0; c < STREAM_CPUS; c++) {
		produced += s->per_cpu[c];
		for (unsigned i = 0; i < s->per_cpu[c]; i++)
			missing += !s->seen[c][i];
	}
	printf("%s: produced %llu, delivered %llu, missing %llu, duplicates %llu, out of order %llu, malformed %llu\n",
	       name, (unsigned long long)produced, (unsigned long long)s->delivered, (unsigned long long)missing,
	       (unsigned long long)s->duplicates, (unsigned long long)s->out_of_order, (unsigned long long)s->bad);
	return (missing || s->duplicates || s->out_of_order || s->bad || s->delivered != produced) ? 1 : 0;
}

void stream_close(struct stream *s)
{
	for (int c = 0; c < STREAM_CPUS; c++)
		free(s->seen[c]);
	producer_close(&s->prod);
}
