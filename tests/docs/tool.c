/* README's `./tool` for the LD_PRELOAD line (make docs-test): a program
 * built against libbpf (-lbpf) that calls perf_buffer__new and says which
 * library served it; exits 0 only when it was libperfbuf. */
#define _GNU_SOURCE
#include <bpf/libbpf.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	Dl_info info;
	struct perf_buffer *pb = perf_buffer__new(-1, 8, NULL, NULL, NULL, NULL);
	if (pb || !dladdr((void *)perf_buffer__new, &info))
		return 1;
	printf("perf_buffer__new served by %s\n", info.dli_fname);
	return strstr(info.dli_fname, "libperfbuf") ? 0 : 1;
}
