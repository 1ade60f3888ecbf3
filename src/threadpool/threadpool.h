/* threadpool.h: one persistent pool per context. Workers are started once
 * and sleep on a futex between jobs (after a spin of about 50-150 us, so a
 * decode step's jobs find them awake); a job hands out work units
 * 0..n_units-1 through an atomic counter, and the calling thread
 * works too. Which thread runs a unit never changes the result: units write
 * disjoint outputs. */
#ifndef SDPA_THREADPOOL_H
#define SDPA_THREADPOOL_H

#include <stdint.h>

typedef struct sdpa_pool sdpa_pool;

/* unit: the work unit to run; thread: 0 .. n_threads-1 (for per-thread scratch). */
typedef void (*sdpa_task_fn)(void * arg, int32_t unit, int32_t thread);

/* Starts up to n_threads - 1 workers. Returns NULL only when out of memory;
 * if the platform refuses some threads, the pool runs with fewer
 * (sdpa_pool_threads says how many, the caller included). */
sdpa_pool * sdpa_pool_create(int32_t n_threads);
int32_t sdpa_pool_threads(const sdpa_pool * pool);

/* Runs fn over all units and returns when every unit is done. It waits
 * only for workers that joined the job before its last unit was claimed (not
 * for one the OS has not scheduled yet, say): the caller runs whatever the
 * workers do not take. */
void sdpa_pool_run(sdpa_pool * pool, sdpa_task_fn fn, void * arg, int32_t n_units);

/* Stops and joins the workers. NULL is a no-op. */
void sdpa_pool_free(sdpa_pool * pool);

#endif
