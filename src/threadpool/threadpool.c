/* threadpool.c: persistent futex-based pool (see threadpool.h). The pattern
 * follows ggml's pool and the emcc 3.1.6 pool recipe (docs/BUILDING.md, section 3): a generation counter
 * wakes workers, and a job's `state` word (open/closed and how many workers
 * are inside) wakes the caller.
 *
 * The caller waits only for workers that entered the job. A worker enters
 * while the job is open and reads the job only after entering; the caller
 * closes the job once every unit is claimed and waits for the workers inside
 * to leave. A worker the OS has not scheduled yet (a busy 2-core machine)
 * finds the job closed when it wakes and goes back to sleep, so the caller
 * never waits for a thread that did none of the work. */
#define _GNU_SOURCE
#include "threadpool/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#ifdef __EMSCRIPTEN__
#include <emscripten/threading.h>
#include <math.h>
static void futex_wait(atomic_int * addr, int expected) {
    emscripten_futex_wait((void *)addr, (uint32_t)expected, INFINITY);
}
static void futex_wake_all(atomic_int * addr) { emscripten_futex_wake((void *)addr, INT_MAX); }
#else
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
static void futex_wait(atomic_int * addr, int expected) {
    syscall(SYS_futex, (int *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}
static void futex_wake_all(atomic_int * addr) {
    syscall(SYS_futex, (int *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#endif

/* Spin this many loads (about 50-150 us) before sleeping. A decode step is a
 * few hundred jobs with gaps of tens of microseconds between them (attention,
 * norms, JS): at 2000 loads (a few us) the workers slept in every gap and a
 * futex wake began each job, and 2 threads decoded the 135M shape slower than
 * one. At 50000 they stay awake through a step: 2-thread decode 1.22-1.44x
 * faster on that shape (q8_0, float and int16 activations; bench/HISTORY.md,
 * "The pool's spin"). The cost: a worker burns up to that long after the last
 * job before it sleeps. */
#ifndef SPIN_ITERS
#define SPIN_ITERS 50000
#endif

typedef struct worker {
    sdpa_pool * pool;
    int32_t     index;
    pthread_t   thread;
} worker;

struct sdpa_pool {
    int32_t        n_threads;     /* caller + started workers */
    worker *       workers;       /* n_threads - 1 entries used */
    atomic_int     generation;    /* bumped once per job (and to quit) */
    atomic_int     state;         /* JOB_CLOSED bit | workers inside the current job */
    atomic_int     next_unit;
    atomic_int     quit;
    int            start_generation;
    /* the current job */
    sdpa_task_fn   fn;
    void *         arg;
    int32_t        n_units;
};

#define JOB_CLOSED (1 << 30)

/* Enters the current job if it is still open (fn, arg and n_units are valid
 * from here until leave_job). */
static int enter_job(sdpa_pool * pool) {
    int s = atomic_load(&pool->state);
    while (!(s & JOB_CLOSED))
        if (atomic_compare_exchange_weak(&pool->state, &s, s + 1)) return 1;
    return 0;
}

static void leave_job(sdpa_pool * pool) {
    if (atomic_fetch_sub(&pool->state, 1) == (JOB_CLOSED | 1)) futex_wake_all(&pool->state);
}

static void run_units(sdpa_pool * pool, int32_t thread) {
    for (;;) {
        int32_t unit = atomic_fetch_add_explicit(&pool->next_unit, 1, memory_order_relaxed);
        if (unit >= pool->n_units) return;
        pool->fn(pool->arg, unit, thread);
    }
}

static void * worker_main(void * p) {
    worker * self = p;
    sdpa_pool * pool = self->pool;
    int seen = pool->start_generation;
    for (;;) {
        int gen;
        for (int s = 0; (gen = atomic_load(&pool->generation)) == seen && s < SPIN_ITERS; s++) {}
        while ((gen = atomic_load(&pool->generation)) == seen) futex_wait(&pool->generation, seen);
        seen = gen;
        if (atomic_load(&pool->quit)) return NULL;
        if (!enter_job(pool)) continue;  /* the caller finished without us */
        run_units(pool, self->index);
        leave_job(pool);
    }
}

sdpa_pool * sdpa_pool_create(int32_t n_threads) {
    if (n_threads < 1) n_threads = 1;
    sdpa_pool * pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->workers = calloc((size_t)n_threads, sizeof(worker));
    if (!pool->workers) { free(pool); return NULL; }
    atomic_init(&pool->state, JOB_CLOSED);
    pool->start_generation = atomic_load(&pool->generation);
    pool->n_threads = 1;
    for (int32_t i = 1; i < n_threads; i++) {
        worker * w = &pool->workers[i - 1];
        w->pool = pool;
        w->index = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) break;  /* run with fewer */
        pool->n_threads = i + 1;
    }
    return pool;
}

int32_t sdpa_pool_threads(const sdpa_pool * pool) { return pool ? pool->n_threads : 1; }

void sdpa_pool_run(sdpa_pool * pool, sdpa_task_fn fn, void * arg, int32_t n_units) {
    if (n_units <= 0) return;
    /* the last job is closed and empty here, so no worker reads these */
    pool->fn = fn;
    pool->arg = arg;
    pool->n_units = n_units;
    atomic_store(&pool->next_unit, 0);
    if (pool->n_threads == 1 || n_units == 1) {  /* nothing to share: skip the wake-up */
        run_units(pool, 0);
        return;
    }
    atomic_store(&pool->state, 0);  /* open, nobody inside */
    atomic_fetch_add(&pool->generation, 1);
    futex_wake_all(&pool->generation);
    run_units(pool, 0);
    /* every unit is claimed: close, then wait for the workers still inside */
    int s = atomic_fetch_or(&pool->state, JOB_CLOSED) | JOB_CLOSED;
    for (int i = 0; s != JOB_CLOSED && i < SPIN_ITERS; i++) s = atomic_load(&pool->state);
    while (s != JOB_CLOSED) {
        futex_wait(&pool->state, s);
        s = atomic_load(&pool->state);
    }
}

void sdpa_pool_free(sdpa_pool * pool) {
    if (!pool) return;
    atomic_store(&pool->quit, 1);
    atomic_fetch_add(&pool->generation, 1);
    futex_wake_all(&pool->generation);
    for (int32_t i = 1; i < pool->n_threads; i++) pthread_join(pool->workers[i - 1].thread, NULL);
    free(pool->workers);
    free(pool);
}
