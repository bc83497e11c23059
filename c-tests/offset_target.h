/* A function whose instructions are known, for probes inside a function:
 * perfbuf_offset_target(x) = x + 1, whose instruction OFFSET_INSIDE bytes in
 * still has x in the first argument register. In assembly so that the
 * compiler cannot move what is where. Included by one file of a program
 * (it defines the function). */
#ifndef PERFBUF_OFFSET_TARGET_H
#define PERFBUF_OFFSET_TARGET_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
__asm__(".pushsection .text\n"
	".globl perfbuf_offset_target\n"
	".type perfbuf_offset_target, @function\n"
	"perfbuf_offset_target:\n"
	"nop\n nop\n nop\n nop\n"
	"leaq 1(%rdi), %rax\n"
	"ret\n"
	".size perfbuf_offset_target, . - perfbuf_offset_target\n"
	".popsection\n");
#define OFFSET_TARGET_SIZE 9
#define OFFSET_TARGET_ARG "x=%di:u64"
#elif defined(__aarch64__)
__asm__(".pushsection .text\n"
	".globl perfbuf_offset_target\n"
	".type perfbuf_offset_target, %function\n"
	"perfbuf_offset_target:\n"
	"nop\n"
	"add x0, x0, #1\n"
	"ret\n"
	".size perfbuf_offset_target, . - perfbuf_offset_target\n"
	".popsection\n");
#define OFFSET_TARGET_SIZE 12
#define OFFSET_TARGET_ARG "x=%x0:u64"
#else
#error "instructions of this architecture"
#endif

#define OFFSET_INSIDE 4

uint64_t perfbuf_offset_target(uint64_t x);

/* The file offset of `addr` in this executable (/proc/self/maps), or 0. */
static inline uint64_t exe_file_offset(const void *addr)
{
	char exe[4096], line[4600], path[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	FILE *maps = fopen("/proc/self/maps", "r");
	uint64_t found = 0;
	if (n <= 0 || !maps)
		goto out;
	exe[n] = 0;
	while (fgets(line, sizeof(line), maps)) {
		unsigned long long start, end, off;
		if (sscanf(line, "%llx-%llx %*s %llx %*s %*s %4095s", &start, &end, &off, path) == 4 &&
		    strcmp(path, exe) == 0 && (uintptr_t)addr >= start && (uintptr_t)addr < end) {
			found = (uintptr_t)addr - start + off;
			break;
		}
	}
out:
	if (maps)
		fclose(maps);
	return found;
}

#endif
