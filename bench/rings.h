/* The rings rows of perfbench (bench/rings.c). */
#ifndef PERFBENCH_RINGS_H
#define PERFBENCH_RINGS_H

#include "producer.h"

/* Prints the rings_1024 row of library `lib` (the perf_buffer__* this
 * process resolves). */
void rings_rows(const char *lib);

#endif
