/* Built against an installed libperfbuf through pkg-config (make install-test). */
#include <perfbuf.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	const char *v = perfbuf_version();
	printf("installed libperfbuf %s\n", v);
	return perf_buffer__buffer_cnt(NULL) != 0 || strlen(v) == 0;
}
