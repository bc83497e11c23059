// Package probeargs is a target for probes with fetch arguments: a C
// function of the test binary taking an int, a string and a struct.
package probeargs

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct perfbuf_go_item { uint64_t tag; uint32_t count; };

__attribute__((noinline, used)) long perfbuf_go_args_target(int n, const char *name, const struct perfbuf_go_item *item)
{
	__asm__ volatile("" ::: "memory");
	return (long)n * 1000 + (long)strlen(name) + item->count;
}

static long perfbuf_go_args_call(int n, const char *name, uint32_t count)
{
	struct perfbuf_go_item item = {.tag = 7, .count = count};
	return perfbuf_go_args_target(n, name, &item);
}
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Symbol is the target function's name in the binary.
const Symbol = "perfbuf_go_args_target"

// Args fetches the three arguments in this machine's registers: n, name
// and the struct's count (at offset 8).
func Args() string {
	if runtime.GOARCH == "arm64" {
		return "n=%x0:s32 name=+0(%x1):ustring count=+8(%x2):u32"
	}
	return "n=%di:s32 name=+0(%si):ustring count=+8(%dx):u32"
}

// Call calls the target once with these values, on the calling goroutine's
// thread, and returns what it returned.
func Call(n int, name string, count uint32) int64 {
	c := C.CString(name)
	defer C.free(unsafe.Pointer(c))
	return int64(C.perfbuf_go_args_call(C.int(n), c, C.uint32_t(count)))
}
