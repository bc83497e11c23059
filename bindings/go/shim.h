/* C side of the Go package: trampolines from libperfbuf's callbacks into
 * exported Go functions, and a constructor taking plain arguments. */
#ifndef PERFBUF_GO_SHIM_H
#define PERFBUF_GO_SHIM_H

#include <stdint.h>
#include "perfbuf.h"

struct perf_buffer *perfbuf_go_new(int map_fd, size_t page_cnt, uintptr_t handle, uint32_t wakeup_events,
				   uint32_t wakeup_bytes, uint32_t max_delay_ms, uint32_t flags, int *err);
uint64_t perfbuf_go_pending(struct perf_buffer *pb, size_t idx);

#endif
