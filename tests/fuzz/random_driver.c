/*
 * random_driver.c: the fuzzer's body without libFuzzer, for builds where
 * libFuzzer does not exist (the wasm32 sanitizer build, CMakeLists.txt
 * SDPA_WASM_SANITIZE), so that the library's 32-bit size_t arithmetic is
 * exercised where it really runs.
 *
 *   random_driver [ITERATIONS [SECONDS [SEED]]]     (defaults 4000 60 1)
 *
 * 1. Random inputs: fuzz_sdpa.c's LLVMFuzzerTestOneInput (every oracle of its
 *    header: status vs the model of CONTRACT.md section 2, rejected calls
 *    write nothing, accepted ones match the float64 reference) on inputs of
 *    up to 4 KiB from a seeded PRNG, until ITERATIONS inputs or SECONDS.
 * 2. Large head dims x thread counts: for 1..8 threads, head dims from the
 *    point where threads x per-thread scratch reaches 2 GiB up to 2^24
 *    (boundary values and random ones; plus one that fits and runs), through customSdpa, the reference,
 *    cache.attend and cache.step. Where the scratch cannot exist in this
 *    address space the call must be E_OOM and write nothing; where it fits
 *    size_t it may also succeed, and then the answer (one key: out = v) must
 *    be exact. Never a wrapped size, a trap or a hung pool.
 * Exits non-zero (abort) on the first violation; prints what it covered.
 */
#include <time.h>

#include "fuzz_sdpa.c"

#if defined(__SANITIZE_ADDRESS__)
#define RD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RD_ASAN 1
#endif
#endif
#ifdef RD_ASAN
/* A huge malloc must return NULL (the library answers E_OOM), not abort. */
const char * __asan_default_options(void);
const char * __asan_default_options(void) {
    return "allocator_may_return_null=1";
}
#endif

static double now_seconds(void) {
    struct timespec ts;  /* C11: wall time (clock() would count CPU time of every thread) */
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A quiet NaN with a payload no computation produces: a sentinel for "not written". */
static void rd_fill_sentinel(float * p, size_t n) {
    const uint32_t bits = 0x7fc0beefu;
    for (size_t i = 0; i < n; i++) memcpy(&p[i], &bits, sizeof bits);
}

static uint64_t splitmix64(uint64_t * s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- 2. large head dims ------------------------------------------------ */

#define LARGE_D_MAX (1 << 24)

enum { VIA_CUSTOM, VIA_REFERENCE, VIA_ATTEND, VIA_STEP, VIA_COUNT };
static const char * const via_names[VIA_COUNT] = { "customSdpa", "customSdpa (reference)", "cache.attend", "cache.step" };

static struct { long cases, oom, ran; } g_large;

/* flash.c keeps 8 query rows and 8 accumulator rows of D floats per thread. */
static uint64_t scratch_lower_bound(int32_t threads, int32_t D) { return (uint64_t)threads * 64u * (uint64_t)D; }

/* One call at head dim D: q = k = v = `in` (inputs may share memory), one key. */
static void large_case(sdpa_ctx * ctx, int32_t D, int via, const float * in, float * out, float * out_copy) {
    const int32_t threads = sdpa_ctx_threads(ctx);
    const size_t n = (size_t)D, bytes = n * sizeof(float);
    const uint64_t need = scratch_lower_bound(threads, D);
    memcpy(out, out_copy, bytes);  /* NaN sentinel */
    sdpa_tensor t = { (void *)in, n, SDPA_DTYPE_FLOAT32, 4, { 1, 1, 1, D } };
    sdpa_tensor to = { out, n, SDPA_DTYPE_FLOAT32, 4, { 1, 1, 1, D } };
    sdpa_status st;
    sdpa_kv_cache * cache = NULL;
    if (via == VIA_CUSTOM) {
        st = sdpa_custom(ctx, &t, &t, &t, NULL, NULL, &to);
    } else if (via == VIA_REFERENCE) {
        st = sdpa_custom_reference(ctx, &t, &t, &t, NULL, NULL, &to);
    } else {
        st = sdpa_kv_cache_create(ctx, 1, 1, 1, D, SDPA_DTYPE_FLOAT32, &cache);
        if (st == SDPA_E_OOM) return;  /* no room for the cache itself: nothing to test here */
        if (st != SDPA_OK) FAILF("createKVCache(D = %d): %s", D, sdpa_status_code(st));
        if (via == VIA_ATTEND) {
            st = sdpa_kv_cache_update(ctx, cache, &t, &t, 0);
            if (st != SDPA_OK) FAILF("cache.update(D = %d): %s", D, sdpa_status_code(st));
            st = sdpa_kv_cache_attend(ctx, cache, &t, NULL, NULL, &to);
        } else {
            st = sdpa_kv_cache_step(ctx, cache, &t, &t, &t, NULL, NULL, &to);
        }
    }
    g_large.cases++;
    if (st == SDPA_E_OOM) {
        g_large.oom++;
        if (memcmp(out, out_copy, bytes) != 0) FAILF("%s, D = %d, %d threads: E_OOM but out was written", via_names[via], D, threads);
        if (!strstr(sdpa_ctx_last_error(ctx), "scratch"))
            FAILF("%s, D = %d, %d threads: E_OOM message \"%s\"", via_names[via], D, threads, sdpa_ctx_last_error(ctx));
        if (via == VIA_STEP) {  /* the rejected step left the cache as created: zeros */
            sdpa_tensor tk = to, tv = to;
            tv.data = out_copy;  /* reuses the sentinel buffer: restored below */
            if (sdpa_kv_cache_read(ctx, cache, 0, 1, &tk, &tv) != SDPA_OK) FAILF("cache.read after E_OOM");
            for (size_t i = 0; i < n; i++)
                if (out[i] != 0.0f || out_copy[i] != 0.0f) FAILF("cache.step, D = %d: E_OOM but the cache was written", D);
            rd_fill_sentinel(out_copy, n);
        }
    } else if (st == SDPA_OK) {
        g_large.ran++;
        if (need > SIZE_MAX) FAILF("%s, D = %d, %d threads: OK although %llu bytes of scratch cannot exist", via_names[via], D,
                                   threads, (unsigned long long)need);
        if (memcmp(out, in, bytes) != 0) FAILF("%s, D = %d, %d threads: one key, out != v", via_names[via], D, threads);
    } else {
        FAILF("%s, D = %d, %d threads: %s (%s)", via_names[via], D, threads, sdpa_status_code(st), sdpa_ctx_last_error(ctx));
    }
    sdpa_kv_cache_free(cache);
}

static void large_sweep(uint64_t * seed, double deadline) {
    float * in = malloc((size_t)LARGE_D_MAX * sizeof(float));
    float * out = malloc((size_t)LARGE_D_MAX * sizeof(float));
    float * out_copy = malloc((size_t)LARGE_D_MAX * sizeof(float));
    if (!in || !out || !out_copy) FAILF("host malloc failed (large-D buffers)");
    for (size_t i = 0; i < LARGE_D_MAX; i++) in[i] = (float)((int32_t)(splitmix64(seed) % 2001) - 1000) / 256.0f;
    rd_fill_sentinel(out_copy, LARGE_D_MAX);
    for (int32_t threads = 1; threads <= 8 && now_seconds() < deadline; threads++) {
        sdpa_status st = SDPA_E_ARG;
        sdpa_ctx * ctx = sdpa_ctx_create(threads, &st);
        if (!ctx) FAILF("sdpa_ctx_create(%d): %s", threads, sdpa_status_code(st));
        sdpa_ctx_set_parallel_min_macs(ctx, 0);
        const int32_t T = sdpa_ctx_threads(ctx);
        /* from 2 GiB of scratch (no single wasm32 malloc that large) to the wrap at 4 GiB and past */
        const int64_t d_2g = (int64_t)((UINT64_C(1) << 31) / (64u * (uint64_t)T));
        const int64_t d_wrap = (int64_t)((UINT64_C(1) << 32) / (64u * (uint64_t)T));
        /* and one that fits (64 MiB of scratch: it runs) */
        int64_t dims[9] = { (1 << 20) / T, d_2g, d_wrap - 1, d_wrap, d_wrap + 1, LARGE_D_MAX, 10000000, 0, 0 };
        for (int i = 7; i < 9; i++) dims[i] = d_2g + (int64_t)(splitmix64(seed) % (uint64_t)(LARGE_D_MAX - d_2g + 1));
        for (int i = 0; i < 9; i++) {
            if ((i > 0 && dims[i] < d_2g) || dims[i] > LARGE_D_MAX) continue;
            for (int via = 0; via < VIA_COUNT; via++) large_case(ctx, (int32_t)dims[i], via, in, out, out_copy);
        }
        sdpa_ctx_free(ctx);
    }
    free(in);
    free(out);
    free(out_copy);
}

int main(int argc, char ** argv) {
    const long iterations = argc > 1 ? atol(argv[1]) : 4000;
    const double seconds = argc > 2 ? atof(argv[2]) : 60.0;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
    const double t0 = now_seconds();
    printf("random_driver: %ld inputs or %.0f s, seed %llu, size_t is %d bits\n", iterations, seconds,
           (unsigned long long)seed, (int)(8 * sizeof(size_t)));

    /* 1. random inputs through the fuzzer's body (most of the budget) */
    static uint8_t buf[4096];
    long done = 0;
    const double fuzz_deadline = t0 + 0.75 * seconds;
    for (; done < iterations && now_seconds() < fuzz_deadline; done++) {
        const size_t len = (size_t)(splitmix64(&seed) % sizeof buf);
        for (size_t j = 0; j < len; j += 8) {
            uint64_t w = splitmix64(&seed);
            memcpy(buf + j, &w, len - j < 8 ? len - j : 8);
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    const double t1 = now_seconds();
    printf("random_driver: %ld random inputs in %.1f s: %ld calls (%ld accepted, %ld rejected), %ld caches, "
           "%ld output rows compared (%ld NaN), %ld non-finite injections\n",
           done, t1 - t0, g_stats.calls, g_stats.accepted, g_stats.rejected, g_stats.caches, g_stats.rows_compared,
           g_stats.nan_rows, g_stats.injected);
    printf("random_driver: %ld tree-mask calls (%ld accepted), %ld keepRows (%ld accepted), %ld attendMany/stepMany (%ld accepted)\n",
           g_stats.trees, g_stats.trees_ok, g_stats.keeps, g_stats.keeps_ok, g_stats.manys, g_stats.manys_ok);
    printf("random_driver: %ld caches with a float16 newest page (%ld steps filling it mid-step not compared)\n",
           g_stats.f16_caches, g_stats.f16_fills_skipped);
    sdpa_ctx_free(g_ctx);
    g_ctx = NULL;

    /* 2. large head dims x 1..8 threads: a few hundred cheap calls, always all of
     * them unless something is very slow */
    large_sweep(&seed, t0 + 2.0 * seconds);
    printf("random_driver: %ld large-D calls in %.1f s (%ld E_OOM, %ld ran and matched)\n", g_large.cases,
           now_seconds() - t1, g_large.oom, g_large.ran);
    if (done == 0 || g_large.cases == 0) FAILF("nothing was run");
    printf("random_driver: ok\n");
    return 0;
}
