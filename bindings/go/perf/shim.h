/* C side of perfbuf.dev/perfbuf/perf: one call per record read from a
 * ring (peek, copy, advance, publish), the map slots Pause and Resume
 * delete and restore, and trampolines into Go for the callback paths
 * (overwritable snapshots, the fast mode). Only perfbuf_* names. */
#ifndef PERFBUF_GO_PERF_SHIM_H
#define PERFBUF_GO_PERF_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include "perfbuf.h"

/* What perf_next_record found (C memory, so Go passes no stack pointers). */
struct perf_next {
	uint32_t type;	     /* the record's perf_event_header.type */
	uint32_t size;	     /* sample bytes copied, or needed (PERF_NEXT_GROW) */
	uint64_t lost;	     /* PERF_RECORD_LOST's count */
	uint64_t remaining;  /* bytes left in the ring after this record */
};

#define PERF_NEXT_EMPTY 0
#define PERF_NEXT_RECORD 1
#define PERF_NEXT_GROW 2 /* the sample needs more than cap bytes: nothing consumed */

/* Consumes ring idx's next record into out (a sample's bytes into dst, at
 * most cap). Returns a PERF_NEXT_* value or -errno. The buffer is passed
 * as an integer: a pointer to an incomplete C type would make each
 * call allocate in Go (cgo checks it through an interface). */
int perf_next_record(uintptr_t buffer, size_t idx, void *dst, size_t cap, struct perf_next *out);

/* The bytes waiting in ring idx (0 on error). */
uint64_t perf_pending(uintptr_t buffer, size_t idx);

/* perfbuf_new with these options; the callbacks feed the Go queue of the
 * reader `handle`. NULL with *err = errno on failure. */
struct perf_buffer *perf_new_buffer(int map_fd, size_t page_cnt, uintptr_t handle, uint32_t wakeup_events,
				    uint32_t wakeup_bytes, uint32_t max_delay_ms, uint32_t flags, const int *cpus,
				    int cpu_cnt, int *err);

/* Deletes (fd < 0) or sets map slot `key` of a PERF_EVENT_ARRAY: 0 or -errno. */
int perf_map_slot(int map_fd, uint32_t key, int fd);

#endif
