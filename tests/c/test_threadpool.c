/*
 * test_threadpool.c: the thread pool (src/threadpool) on its own.
 *
 * - Every unit of every job runs exactly once, on a thread index in range,
 *   and its write is visible when sdpa_pool_run returns (plain stores into
 *   disjoint slots: ThreadSanitizer checks the join's ordering), over pools
 *   of 1-3 threads and jobs of 0-300 units.
 * - The pool shares: a job of two units that each wait for the other to have
 *   started finishes only if a worker runs one of them; and the caller
 *   returns only after that worker's unit (20 ms longer) has finished.
 * - (Linux, native, not under ThreadSanitizer) The caller never waits for a
 *   worker that did none of the work: with every worker held in a signal
 *   handler (as if the OS had not scheduled it), jobs still finish, every
 *   unit on the caller; released, the workers share again. The pool before
 *   this rule waited for each worker to pass through every job and hung here
 *   (alarm() turns a hang into a failure).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "threadpool/threadpool.h"

#if defined(__linux__) && !defined(__EMSCRIPTEN__)
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#endif
#ifndef UNDER_TSAN
#define HOLD_WORKERS 1
#endif
#endif

#ifdef HOLD_WORKERS
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

enum { MAX_UNITS = 300 };

typedef struct count_job {
    int32_t runs[MAX_UNITS];     /* plain ints: each unit writes only its own */
    int32_t thread[MAX_UNITS];
} count_job;

static void count_unit(void * arg, int32_t unit, int32_t thread) {
    count_job * j = arg;
    j->runs[unit]++;
    j->thread[unit] = thread;
}

/* Runs `jobs` jobs of random sizes; returns how many units ran off the caller. */
static long check_counts(sdpa_pool * pool, tu_rng * rng, int jobs, const char * what) {
    static count_job j;
    const int32_t nt = sdpa_pool_threads(pool);
    long shared = 0;
    for (int r = 0; r < jobs; r++) {
        const int32_t n = tu_rng_int(rng, 0, MAX_UNITS);
        memset(&j, 0, sizeof j);
        sdpa_pool_run(pool, count_unit, &j, n);
        int32_t bad = -1;
        for (int32_t u = 0; u < MAX_UNITS && bad < 0; u++)
            if (j.runs[u] != (u < n ? 1 : 0) || j.thread[u] < 0 || j.thread[u] >= nt) bad = u;
        if (!TU_CHECK(bad < 0, "%s: job %d of %d units: unit %d ran %d times on thread %d (threads %d)",
                      what, r, n, bad, bad < 0 ? 0 : j.runs[bad], bad < 0 ? 0 : j.thread[bad], nt))
            return shared;
        for (int32_t u = 0; u < n; u++) shared += j.thread[u] != 0;
    }
    return shared;
}

/* Two units, each waiting (up to 20 s) for the other to have started; the
 * one on a worker then works on for 20 ms before it records that it
 * finished (a plain store: the join must wait for it and order it). */
typedef struct pair_job {
    atomic_int started;
    atomic_int timed_out;
    int32_t finished[2];
} pair_job;

static void pair_unit(void * arg, int32_t unit, int32_t thread) {
    pair_job * j = arg;
    atomic_fetch_add(&j->started, 1);
    const double t0 = tu_seconds();
    while (atomic_load(&j->started) < 2)
        if (tu_seconds() - t0 > 20.0) { atomic_store(&j->timed_out, 1); return; }
    if (thread != 0)
        for (const double t1 = tu_seconds(); tu_seconds() - t1 < 0.02;) {}
    j->finished[unit] = 1;
}

static void check_shares(sdpa_pool * pool, const char * what) {
    pair_job j;
    atomic_init(&j.started, 0);
    atomic_init(&j.timed_out, 0);
    j.finished[0] = j.finished[1] = 0;
    sdpa_pool_run(pool, pair_unit, &j, 2);
    TU_CHECK(atomic_load(&j.started) == 2 && !atomic_load(&j.timed_out),
             "%s: two units that wait for each other: started %d, timed out %d (a worker never ran one)",
             what, atomic_load(&j.started), atomic_load(&j.timed_out));
    TU_CHECK(j.finished[0] && j.finished[1], "%s: returned before the worker's unit finished (finished %d %d)",
             what, j.finished[0], j.finished[1]);
}

#ifdef HOLD_WORKERS
static atomic_int g_held, g_release;

static void hold_handler(int sig) {
    (void)sig;
    atomic_fetch_add(&g_held, 1);
    while (!atomic_load(&g_release)) {
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
    atomic_fetch_sub(&g_held, 1);
}

/* Sends SIGUSR1 to every thread of the process but this one; returns how many. */
static int hold_other_threads(void) {
    const pid_t self = (pid_t)syscall(SYS_gettid), pid = getpid();
    DIR * dir = opendir("/proc/self/task");
    if (!dir) return -1;
    int n = 0;
    for (struct dirent * e; (e = readdir(dir)) != NULL;) {
        const pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0 || tid == self) continue;
        if (syscall(SYS_tgkill, pid, tid, SIGUSR1) == 0) n++;
    }
    closedir(dir);
    return n;
}

static void check_held_workers(tu_rng * rng) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hold_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sdpa_pool * pool = sdpa_pool_create(3);
    if (!TU_CHECK(pool && sdpa_pool_threads(pool) == 3, "held: a pool of 3 threads")) return;
    check_shares(pool, "held: before");
    atomic_store(&g_release, 0);
    const int sent = hold_other_threads();
    const double t0 = tu_seconds();
    while (atomic_load(&g_held) < sent && tu_seconds() - t0 < 20.0) {}
    if (!TU_CHECK(sent == 2 && atomic_load(&g_held) == 2, "held: signalled %d workers, %d held", sent, atomic_load(&g_held))) {
        atomic_store(&g_release, 1);
        return;
    }
    alarm(30);  /* a pool that waits for a held worker never returns: fail, don't hang */
    const long shared = check_counts(pool, rng, 200, "held: workers held");
    alarm(0);
    TU_CHECK(shared == 0, "held: %ld units ran on a held worker", shared);
    atomic_store(&g_release, 1);
    while (atomic_load(&g_held) > 0) {}
    check_counts(pool, rng, 200, "held: released");
    check_shares(pool, "held: released");
    sdpa_pool_free(pool);
}
#endif

int main(void) {
    tu_rng rng;
    tu_rng_seed(&rng, 22);
    for (int32_t nt = 1; nt <= 3; nt++) {
        char what[32];
        snprintf(what, sizeof what, "%d threads", nt);
        sdpa_pool * pool = sdpa_pool_create(nt);
        if (!TU_CHECK(pool != NULL, "%s: create", what)) continue;
        TU_CHECK(sdpa_pool_threads(pool) >= 1 && sdpa_pool_threads(pool) <= nt, "%s: threads %d", what, sdpa_pool_threads(pool));
        check_counts(pool, &rng, 3000, what);
        if (sdpa_pool_threads(pool) > 1) check_shares(pool, what);
        sdpa_pool_free(pool);
    }
    sdpa_pool_free(NULL);
#ifdef HOLD_WORKERS
    check_held_workers(&rng);
#endif
    return tu_summary("test_threadpool");
}
