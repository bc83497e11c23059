// Package probe is a uprobe target for the event-set tests: a C function
// of the test binary itself, called a chosen number of times.
package probe

/*
#include <stdint.h>

__attribute__((noinline, used)) int perfbuf_go_probe_target(int x)
{
	__asm__ volatile("" ::: "memory");
	return x * 3 + 1;
}

static int perfbuf_go_probe_call(int n)
{
	volatile int sink = 0;
	for (int i = 0; i < n; i++)
		sink += perfbuf_go_probe_target(i);
	return sink;
}

static uintptr_t perfbuf_go_probe_addr(void)
{
	return (uintptr_t)&perfbuf_go_probe_target;
}
*/
import "C"

// Symbol is the target function's name in the binary.
const Symbol = "perfbuf_go_probe_target"

// Call calls the target n times, on the calling goroutine's thread.
func Call(n int) { C.perfbuf_go_probe_call(C.int(n)) }

// Addr is the target's address in this process.
func Addr() uint64 { return uint64(C.perfbuf_go_probe_addr()) }
