/* C side of the Go package: trampolines from libperfbuf's callbacks into
 * exported Go functions, and a constructor taking plain arguments. Only
 * libperfbuf's perfbuf_* names are used (never libbpf's perf_buffer__*),
 * so a program linking libbpf too reads through libperfbuf whatever the
 * link order. */
#ifndef PERFBUF_GO_SHIM_H
#define PERFBUF_GO_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include "perfbuf.h"

/* One record staged for Go: the callbacks copy what a poll or consume
 * delivers into C memory, so Go takes a whole drain without a callback
 * into Go per record (each is a costly crossing). */
struct perfbuf_go_entry {
	int32_t cpu;
	uint32_t size;	    /* sample bytes at data + off */
	uint64_t lost;	    /* a lost report's count (0: a sample) */
	uint64_t off;	    /* into perfbuf_go_stage.data */
	uint64_t remaining; /* bytes left in the CPU's ring (see the drains) */
	uint32_t type;	    /* PERF_RECORD_SAMPLE, _LOST, or what perfbuf_decode found */
	int32_t err;	    /* perfbuf_decode's -errno for a record it could not decode */
};

struct perfbuf_go_stage {
	unsigned char *data;
	size_t len, cap;
	struct perfbuf_go_entry *ents;
	size_t n, ents_cap;
	size_t marked;	  /* entries whose remaining is set */
	uint64_t dropped; /* records that found no memory */
	struct perfbuf_batch_entry *batch; /* perfbuf_read_batch's entries */
	int full;			   /* the last batch filled its room */
};

struct perfbuf_go_stage *perfbuf_go_stage_new(void);
void perfbuf_go_stage_free(struct perfbuf_go_stage *st);
/* Empties the stage (Go took every entry). */
void perfbuf_go_stage_reset(uintptr_t stage);

/* perfbuf_poll_batch (timeout_ms >= 0 or -1) or, with consume set,
 * perfbuf_read_batch, into the stage (libperfbuf copies the records there:
 * no callback runs); then sets the new entries' remaining. Returns the
 * entries read, 0, or -errno. Both pointers are passed as integers (cgo
 * would allocate for a pointer to an incomplete type). */
int perfbuf_go_drain(uintptr_t buffer, uintptr_t stage, int timeout_ms, int consume);

/* Stages ring idx's records up to the head it finds now (a fast producer
 * cannot keep the reader here), each decoded by perfbuf_decode, remaining
 * = the bytes after it up to that head; publishes the tail once. Returns
 * the records staged, or -errno. */
int perfbuf_go_drain_ring(uintptr_t buffer, uintptr_t stage, size_t idx);

/* perfbuf_new with NULL opts when use_opts is 0 (perf_buffer__new's
 * defaults, environment variables included), else with these options; its
 * callbacks stage the records in `stage`. NULL with *err = errno on failure. */
struct perf_buffer *perfbuf_go_new(int map_fd, size_t page_cnt, struct perfbuf_go_stage *stage, int use_opts,
				   uint32_t wakeup_events, uint32_t wakeup_bytes, uint32_t max_delay_ms,
				   uint32_t flags, const int *cpus, int cpu_cnt, int output_counts_fd, int *err);
/* The bytes waiting in ring idx. The buffer is passed as an integer: a
 * pointer to an incomplete C type makes each cgo call allocate. */
uint64_t perfbuf_go_pending(uintptr_t buffer, size_t idx);

/* Deletes (fd < 0) or sets slot `key` of a PERF_EVENT_ARRAY: 0 or -errno. */
int perfbuf_go_map_slot(int map_fd, uint32_t key, int fd);

/* perfbuf_ring_peek copying the record (header included) into dst: 1 with
 * the record (*size bytes), 2 when it needs more than cap bytes (*size;
 * nothing copied), 0 when the ring is empty, or -errno. */
int perfbuf_go_peek(struct perf_buffer *pb, size_t idx, void *dst, size_t cap, size_t *size);

/* perfbuf_events_decoded_reader delivering every record, finished by
 * libperfbuf, to the exported Go function perfbufGoEventRecord with
 * `handle`; NULL with *err = errno on failure. */
struct perf_buffer *perfbuf_go_events_reader(struct perfbuf_events *set, uintptr_t handle, int *err);

/* perfbuf_events_decode_record into perfbufGoEventRecord with `handle`: 0
 * once delivered, or -errno. */
int perfbuf_go_decode_record(const struct perfbuf_events *set, uint32_t cpu, const void *rec, size_t len,
			     uintptr_t handle);

/* perfbuf_events_field with the data's place as an offset into `raw` (not
 * a pointer: raw may be Go memory, which must not receive pointers). */
int perfbuf_go_field(const struct perfbuf_events *set, int ev, const void *raw, size_t raw_size, const char *name,
		     uint32_t *kind, int64_t *i, uint64_t *u, size_t *off, size_t *len);

/* ---- BPF ring buffers (ringbuf.go) ----
 * libbpf's ring_buffer__* and ring__* names, taken from libperfbuf itself
 * (dlsym on its soname) so that a program linking libbpf first still reads
 * through libperfbuf; a static build, with one library, calls them as
 * linked. */

/* One map read record by record. The record being read goes to dst (Go
 * memory, set for the call only) when it fits in cap bytes, else to spill
 * (C memory, grown as needed). */
struct perfbuf_go_rb {
	struct ring_buffer *rb;
	struct ring *ring;
	void *dst;
	size_t cap;
	void *spill;
	size_t spill_cap;
	size_t size;	    /* the record's bytes */
	uint64_t remaining; /* bytes left in the ring after it */
	int spilled;
};

#define PERFBUF_GO_RB_EMPTY 0
#define PERFBUF_GO_RB_RECORD 1	/* in dst */
#define PERFBUF_GO_RB_SPILLED 2 /* in spill: it needed more than cap bytes */

/* ring_buffer__new on map_fd; NULL with *err = errno on failure. */
struct perfbuf_go_rb *perfbuf_go_rb_new(int map_fd, int *err);
/* Consumes the next committed record (discarded ones are stepped over):
 * a PERFBUF_GO_RB_* value or -errno. rb is a struct perfbuf_go_rb *. */
int perfbuf_go_rb_read(uintptr_t rb, void *dst, size_t cap);
/* The ring's data size in bytes. */
size_t perfbuf_go_rb_size(const struct perfbuf_go_rb *rb);
void perfbuf_go_rb_free(struct perfbuf_go_rb *rb);

#endif
