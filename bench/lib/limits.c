/*
 * limits.c: the machine's limits as wasm code sees them, measured by the
 * benchmark in the same run as the kernels (bench/run.mjs).
 *
 *  - limits_read: streaming-read bandwidth. Sums a large float array (much
 *    larger than the last-level cache) with SIMD128 loads into 8 independent
 *    accumulators, split over `nthreads` threads (contiguous slices). The sum
 *    is returned so nothing can be optimised away.
 *  - limits_madd: SIMD f32 multiply+add peak. Each thread runs `chains`
 *    independent dependency chains acc = acc * m + a (f32x4 mul then add:
 *    8 FLOP per chain per iteration), enough chains to hide the latency of
 *    mul + add on the pipes V8 uses. Several chain counts are built; the
 *    benchmark keeps the fastest.
 *
 *  - The same file compiled with relaxed SIMD (-mrelaxed-simd, clang 16:
 *    build/bench/limits-relaxed.*, docs/BUILDING.md section 4) makes each chain step one
 *    f32x4.relaxed_madd (FMA where the CPU has it, still 8 FLOP per step):
 *    limits_madd there is the FMA peak that bounds the relaxed-SIMD builds.
 *
 * Threads are created per call (pthread_create + join). The calls run for
 * tens of milliseconds, so the ~40 us creation cost is noise; the pool is
 * prewarmed through PTHREAD_POOL_SIZE (see bench/lib/build-limits.mjs).
 *
 * Built by bench/lib/build-limits.mjs with emcc -O3 -msimd128 -pthread.
 */
#include <emscripten.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <wasm_simd128.h>

#include "probe_loops.h"

#define LIMITS_MAX_THREADS 8

/* ---------------------------------------------------------------- memory */

EMSCRIPTEN_KEEPALIVE void * limits_alloc(size_t bytes) {
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

EMSCRIPTEN_KEEPALIVE void limits_free(void * p) { free(p); }

/* Writes every element so that all pages are committed before timing. */
EMSCRIPTEN_KEEPALIVE void limits_fill(float * p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (float)(i & 1023) * 0x1p-10f;
}

/* ------------------------------------------------------------ read bandwidth */


/* Runs fn(job 0) on this thread and fn(job t) on nthreads - 1 new threads
 * (jobs are `size` bytes apart); joins every started thread. Returns 0 when a
 * thread could not be started (the measurement is then void). */
static int run_threads(void * (*fn)(void *), void * jobs, size_t size, int nthreads) {
    pthread_t th[LIMITS_MAX_THREADS];
    int started[LIMITS_MAX_THREADS] = {0}, all = 1;
    for (int t = 1; t < nthreads; t++) {
        started[t] = pthread_create(&th[t], NULL, fn, (char *)jobs + (size_t)t * size) == 0;
        all &= started[t];
    }
    fn(jobs);
    for (int t = 1; t < nthreads; t++)
        if (started[t]) pthread_join(th[t], NULL);
    return all;
}

typedef struct read_job {
    const float * p;
    size_t n;
    float sum;
} read_job;

static void * read_thread(void * arg) {
    read_job * job = (read_job *)arg;
    job->sum = read_sum(job->p, job->n);
    return NULL;
}

/* Sums p[0..n) (n a multiple of 32 * nthreads) over nthreads threads.
 * Returns the sum, or NaN-free -1e30 when a thread could not be started. */
EMSCRIPTEN_KEEPALIVE double limits_read(const float * p, size_t n, int nthreads) {
    if (nthreads < 1) nthreads = 1;
    if (nthreads > LIMITS_MAX_THREADS) nthreads = LIMITS_MAX_THREADS;
    read_job jobs[LIMITS_MAX_THREADS];
    size_t slice = (n / (size_t)nthreads) & ~(size_t)31;
    for (int t = 0; t < nthreads; t++) {
        jobs[t].p = p + (size_t)t * slice;
        jobs[t].n = slice;
        jobs[t].sum = 0.0f;
    }
    if (!run_threads(read_thread, jobs, sizeof jobs[0], nthreads)) return -1e30; /* JS: an error */
    double total = 0.0;
    for (int t = 0; t < nthreads; t++) total += jobs[t].sum;
    return total;
}

/* ------------------------------------------------------ multiply+add peak */


typedef struct madd_job {
    int chains;
    int iters;
    float seed;
    float out;
} madd_job;

static void * madd_thread(void * arg) {
    madd_job * job = (madd_job *)arg;
    switch (job->chains) {
        case 8: job->out = madd8(job->iters, job->seed); break;
        case 12: job->out = madd12(job->iters, job->seed); break;
        default: job->out = madd14(job->iters, job->seed); break;
    }
    return NULL;
}

/* Runs `iters` iterations of `chains` (8, 12 or 14) mul+add chains on each of
 * nthreads threads: FLOP = nthreads * iters * chains * 8. Returns a checksum,
 * or -1e30 when a thread could not be started. */
EMSCRIPTEN_KEEPALIVE double limits_madd(int chains, int iters, int nthreads, float seed) {
    if (nthreads < 1) nthreads = 1;
    if (nthreads > LIMITS_MAX_THREADS) nthreads = LIMITS_MAX_THREADS;
    madd_job jobs[LIMITS_MAX_THREADS];
    for (int t = 0; t < nthreads; t++) {
        jobs[t].chains = chains;
        jobs[t].iters = iters;
        jobs[t].seed = seed + (float)t;
        jobs[t].out = 0.0f;
    }
    if (!run_threads(madd_thread, jobs, sizeof jobs[0], nthreads)) return -1e30;
    double total = 0.0;
    for (int t = 0; t < nthreads; t++) total += jobs[t].out;
    return total;
}
