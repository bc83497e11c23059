// Package probe is a uprobe target for the event-set tests: a C function
// of the test binary itself, called a chosen number of times; and
// perfbuf_go_offset_target, whose instruction OffsetInside bytes in is
// known (in assembly, so that the compiler cannot move it), for probes
// inside a function.
package probe

/*
#include <stdint.h>

#if defined(__x86_64__)
__asm__(".pushsection .text\n"
	".globl perfbuf_go_offset_target\n"
	".type perfbuf_go_offset_target, @function\n"
	"perfbuf_go_offset_target:\n"
	"nop\n nop\n nop\n nop\n"
	"leaq 1(%rdi), %rax\n"
	"ret\n"
	".size perfbuf_go_offset_target, . - perfbuf_go_offset_target\n"
	".popsection\n");
#define OFFSET_TARGET_SIZE 9
#elif defined(__aarch64__)
__asm__(".pushsection .text\n"
	".globl perfbuf_go_offset_target\n"
	".type perfbuf_go_offset_target, %function\n"
	"perfbuf_go_offset_target:\n"
	"nop\n"
	"add x0, x0, #1\n"
	"ret\n"
	".size perfbuf_go_offset_target, . - perfbuf_go_offset_target\n"
	".popsection\n");
#define OFFSET_TARGET_SIZE 12
#endif

uint64_t perfbuf_go_offset_target(uint64_t x);

static uintptr_t perfbuf_go_offset_addr(void)
{
	return (uintptr_t)&perfbuf_go_offset_target;
}

static uint64_t perfbuf_go_offset_size(void)
{
	return OFFSET_TARGET_SIZE;
}

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

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Symbol is the target function's name in the binary.
const Symbol = "perfbuf_go_probe_target"

// Call calls the target n times, on the calling goroutine's thread.
func Call(n int) { C.perfbuf_go_probe_call(C.int(n)) }

// Addr is the target's address in this process.
func Addr() uint64 { return uint64(C.perfbuf_go_probe_addr()) }

// OffsetSymbol is the function with known instructions.
const OffsetSymbol = "perfbuf_go_offset_target"

// OffsetInside is how far into OffsetSymbol the instruction after the
// nops is: its argument is still in the first argument register there.
const OffsetInside = 4

// OffsetArg fetches OffsetSymbol's argument, as x.
func OffsetArg() string {
	if runtime.GOARCH == "arm64" {
		return "x=%x0:u64"
	}
	return "x=%di:u64"
}

// OffsetCall calls OffsetSymbol with x, on the calling goroutine's thread:
// it returns x+1.
func OffsetCall(x uint64) uint64 { return uint64(C.perfbuf_go_offset_target(C.uint64_t(x))) }

// OffsetAddr is OffsetSymbol's address in this process.
func OffsetAddr() uint64 { return uint64(C.perfbuf_go_offset_addr()) }

// OffsetSize is OffsetSymbol's size in bytes.
func OffsetSize() uint64 { return uint64(C.perfbuf_go_offset_size()) }

// FileOffset is the offset of addr in the file of this executable's
// mapping that holds it (/proc/self/maps).
func FileOffset(addr uint64) (uint64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != exe {
			continue
		}
		bounds := strings.SplitN(f[0], "-", 2)
		start, err1 := strconv.ParseUint(bounds[0], 16, 64)
		end, err2 := strconv.ParseUint(bounds[1], 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 == nil && err2 == nil && err3 == nil && addr >= start && addr < end {
			return addr - start + off, nil
		}
	}
	return 0, fmt.Errorf("%#x is in no mapping of %s", addr, exe)
}
