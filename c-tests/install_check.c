/* Built against an installed libperfbuf through pkg-config (make
 * install-test): the header, the library, and the perfbuf_* names. */
#include <perfbuf.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	const char *v = perfbuf_version();
	printf("installed libperfbuf %s\n", v);
	return perfbuf_buffer_cnt(NULL) != 0 || strlen(v) == 0 || strlen(perfbuf_last_error()) == 0;
}
