/* A deliberate data race: scripts/tsan.sh runs this and fails unless
 * ThreadSanitizer reports it, proving the sanitizer is really active. */
#include <pthread.h>
#include <stdio.h>

static int shared;

static void *bump(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1000; i++)
		shared++;
	return NULL;
}

int main(void)
{
	pthread_t a, b;
	pthread_create(&a, NULL, bump, NULL);
	pthread_create(&b, NULL, bump, NULL);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("shared = %d (a race ThreadSanitizer should have reported)\n", shared);
	return 0;
}
