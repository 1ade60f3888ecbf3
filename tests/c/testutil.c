/* testutil.c: see testutil.h. */
#include "testutil.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

long tu_checks = 0;
long tu_failures = 0;
char tu_context[512] = "";

/* Only the first few failures are printed in full; the summary counts all. */
#define TU_MAX_PRINTED 40

void tu_rng_seed(tu_rng * rng, uint64_t seed) {
    rng->state = seed ^ 0x9E3779B97F4A7C15ull;
}

uint64_t tu_rng_u64(tu_rng * rng) {
    /* splitmix64 */
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int tu_rng_int(tu_rng * rng, int lo, int hi) {
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)((int64_t)hi - (int64_t)lo + 1);
    return (int)((int64_t)lo + (int64_t)(tu_rng_u64(rng) % span));
}

double tu_rng_unit(tu_rng * rng) {
    return (double)(tu_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

float tu_rng_uniform(tu_rng * rng, float lo, float hi) {
    return (float)((double)lo + ((double)hi - (double)lo) * tu_rng_unit(rng));
}

float tu_rng_normal(tu_rng * rng) {
    double u1 = tu_rng_unit(rng);
    double u2 = tu_rng_unit(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int tu_rng_pick(tu_rng * rng, const int * values, int n) {
    return values[tu_rng_int(rng, 0, n - 1)];
}

static int tu_printed_enough(void) {
    return tu_failures > TU_MAX_PRINTED;
}

static void tu_print_context(void) {
    if (tu_context[0]) printf("  case: %s\n", tu_context);
}

int tu_check_impl(int ok, const char * file, int line, const char * fmt, ...) {
    tu_checks++;
    if (ok) return 1;
    tu_failures++;
    if (tu_printed_enough()) return 0;
    printf("FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    tu_print_context();
    fflush(stdout);
    return 0;
}

static void tu_print_index(size_t i, const int32_t * dims4) {
    if (!dims4) {
        printf("[%zu]", i);
        return;
    }
    size_t d = (size_t)dims4[3], h = (size_t)dims4[2], s = (size_t)dims4[1];
    size_t id = i % d;
    size_t ih = (i / d) % h;
    size_t is = (i / d / h) % s;
    size_t ib = i / d / h / s;
    printf("[b=%zu, s=%zu, h=%zu, d=%zu]", ib, is, ih, id);
}

static int tu_close_generic(const char * what, const float * got, const double * refd,
                            const float * reff, size_t n, const int32_t * dims4, double rel) {
    tu_checks++;
    double maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = refd ? refd[i] : (double)reff[i];
        if (isfinite(r) && fabs(r) > maxref) maxref = fabs(r);
    }
    double tol = rel * (1.0 + maxref);
    size_t bad = 0, first = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = refd ? refd[i] : (double)reff[i];
        double g = (double)got[i];
        int ok;
        if (isnan(r)) ok = isnan(g);
        else if (isinf(r)) ok = (g == r);
        else {
            double e = fabs(g - r);
            ok = (e <= tol); /* false for NaN g */
            if (isfinite(e) && e > worst) worst = e;
        }
        if (!ok) {
            if (bad == 0) first = i;
            bad++;
        }
    }
    if (bad == 0) return 1;
    tu_failures++;
    if (tu_printed_enough()) return 0;
    double r = refd ? refd[first] : (double)reff[first];
    printf("FAIL %s: %zu of %zu values differ (tol %.3g, max|ref| %.6g, worst finite err %.3g); first at ",
           what, bad, n, tol, maxref, worst);
    tu_print_index(first, dims4);
    printf(": got %.9g, ref %.9g\n", (double)got[first], r);
    tu_print_context();
    fflush(stdout);
    return 0;
}

int tu_close(const char * what, const float * got, const double * ref, size_t n,
             const int32_t * dims4) {
    return tu_close_generic(what, got, ref, NULL, n, dims4, TU_TOL);
}

int tu_close_tol(const char * what, const float * got, const double * ref, size_t n,
                 const int32_t * dims4, double rel) {
    return tu_close_generic(what, got, ref, NULL, n, dims4, rel);
}

int tu_close_ff(const char * what, const float * got, const float * ref, size_t n,
                const int32_t * dims4) {
    return tu_close_generic(what, got, NULL, ref, n, dims4, TU_TOL);
}

int tu_identical(const char * what, const float * a, const float * b, size_t n,
                 const int32_t * dims4) {
    tu_checks++;
    if (memcmp(a, b, n * sizeof(float)) == 0) return 1;
    size_t first = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (bad == 0) first = i;
            bad++;
        }
    }
    tu_failures++;
    if (tu_printed_enough()) return 0;
    printf("FAIL %s: %zu of %zu values not bit-identical; first at ", what, bad, n);
    tu_print_index(first, dims4);
    printf(": %.9g vs %.9g\n", (double)a[first], (double)b[first]);
    tu_print_context();
    fflush(stdout);
    return 0;
}

int tu_contains_ci(const char * haystack, const char * needle) {
    if (!haystack || !needle) return 0;
    size_t hn = strlen(haystack), nn = strlen(needle);
    if (nn == 0) return 1;
    for (size_t i = 0; i + nn <= hn; i++) {
        size_t j = 0;
        while (j < nn && tolower((unsigned char)haystack[i + j]) == tolower((unsigned char)needle[j])) j++;
        if (j == nn) return 1;
    }
    return 0;
}

static int tu_env_flag(const char * name) {
    const char * v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

int tu_quick(void) {
#ifdef SDPA_TEST_QUICK
    return 1;
#else
    return tu_env_flag("SDPA_TEST_QUICK");
#endif
}

int tu_full(void) {
    return tu_env_flag("SDPA_TEST_FULL");
}

uint64_t tu_base_seed(uint64_t dflt) {
    const char * v = getenv("SDPA_TEST_SEED");
    if (v && v[0]) return strtoull(v, NULL, 10);
    return dflt;
}

double tu_seconds(void) {
    struct timespec ts;
    if (timespec_get(&ts, TIME_UTC) == TIME_UTC) return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return (double)clock() / (double)CLOCKS_PER_SEC;
}

static sdpa_tensor tu_tensor(void * data, int32_t dtype, int32_t rank, const int32_t * dims) {
    sdpa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.rank = rank;
    int64_t len = 1;
    for (int32_t i = 0; i < rank; i++) {
        t.dims[i] = dims[i];
        len *= dims[i];
    }
    t.len = len > 0 ? (size_t)len : 0;
    return t;
}

sdpa_tensor tu_tensor4(void * data, int32_t dtype, int32_t d0, int32_t d1, int32_t d2, int32_t d3) {
    const int32_t dims[4] = {d0, d1, d2, d3};
    return tu_tensor(data, dtype, 4, dims);
}

sdpa_tensor tu_tensor2(void * data, int32_t dtype, int32_t d0, int32_t d1) {
    const int32_t dims[2] = {d0, d1};
    return tu_tensor(data, dtype, 2, dims);
}

void tu_fill_nan(float * p, size_t n) {
    const uint32_t bits = 0x7FC0DEADu; /* quiet NaN */
    for (size_t i = 0; i < n; i++) memcpy(&p[i], &bits, sizeof bits);
}

int tu_ctx_pair(sdpa_ctx ** one, sdpa_ctx ** two) {
    sdpa_status s1 = SDPA_E_ARG, s2 = SDPA_E_ARG;
    *one = sdpa_ctx_create(1, &s1);
    *two = sdpa_ctx_create(2, &s2);
    if (!*one || !*two || s1 != SDPA_OK || s2 != SDPA_OK) {
        printf("FATAL: sdpa_ctx_create failed (%s, %s)\n", sdpa_status_code(s1), sdpa_status_code(s2));
        fflush(stdout);
        sdpa_ctx_free(*one);
        sdpa_ctx_free(*two);
        *one = *two = NULL;
        return 0;
    }
    /* every call with more than one work unit uses the pool, however small
     * (the default runs small calls on the calling thread alone) */
    sdpa_ctx_set_parallel_min_macs(*two, 0);
    TU_CHECK(sdpa_ctx_threads(*one) == 1, "1-thread context runs %d threads", sdpa_ctx_threads(*one));
    TU_CHECK(sdpa_ctx_threads(*two) == 2, "2-thread context runs %d threads", sdpa_ctx_threads(*two));
    return 1;
}

void tu_dirty_error(sdpa_ctx * ctx) {
    (void)sdpa_custom(ctx, NULL, NULL, NULL, NULL, NULL, NULL);
}

int tu_check_output(sdpa_ctx * ctx, sdpa_status st, const char * what, const float * out, const double * ref,
                    size_t n, const int32_t * dims4) {
    if (!TU_CHECK(st == SDPA_OK, "%s returned %s: %s", what, sdpa_status_code(st), sdpa_ctx_last_error(ctx)))
        return 0;
    TU_CHECK(sdpa_ctx_last_error(ctx)[0] == 0, "%s: last_error not empty after a success: '%s'", what,
             sdpa_ctx_last_error(ctx));
    tu_close(what, out, ref, n, dims4);
    return 1;
}

void tu_custom_paths(sdpa_ctx * one, sdpa_ctx * two, const sdpa_tensor * query, const sdpa_tensor * key,
                     const sdpa_tensor * value, const sdpa_tensor * mask, const sdpa_options * options,
                     const double * ref, float * out1, float * out2, float * outr, int with_switch,
                     tu_path_check check, const void * arg) {
    const int32_t * dims = query->dims;
    const size_t n = (size_t)dims[0] * (size_t)dims[1] * (size_t)dims[2] * (size_t)dims[3];
    sdpa_tensor to1 = tu_tensor4(out1, SDPA_DTYPE_FLOAT32, dims[0], dims[1], dims[2], dims[3]);
    sdpa_tensor to2 = tu_tensor4(out2, SDPA_DTYPE_FLOAT32, dims[0], dims[1], dims[2], dims[3]);
    sdpa_tensor tor = tu_tensor4(outr, SDPA_DTYPE_FLOAT32, dims[0], dims[1], dims[2], dims[3]);
    const char * what;

    what = "sdpa_custom (1 thread)";
    tu_fill_nan(out1, n);
    tu_dirty_error(one);
    sdpa_status st = sdpa_custom(one, query, key, value, mask, options, &to1);
    if (tu_check_output(one, st, what, out1, ref, n, dims) && check) check(TU_PATH_FAST1, what, out1, ref, arg);

    what = "sdpa_custom (2 threads)";
    tu_fill_nan(out2, n);
    tu_dirty_error(two);
    st = sdpa_custom(two, query, key, value, mask, options, &to2);
    if (tu_check_output(two, st, what, out2, ref, n, dims)) {
        tu_identical("sdpa_custom 1 vs 2 threads (bit-identical)", out1, out2, n, dims);
        if (check) check(TU_PATH_FAST2, what, out2, ref, arg);
    }

    what = "sdpa_custom_reference";
    tu_fill_nan(outr, n);
    tu_dirty_error(two);
    st = sdpa_custom_reference(two, query, key, value, mask, options, &tor);
    if (tu_check_output(two, st, what, outr, ref, n, dims) && check) check(TU_PATH_REFERENCE, what, outr, ref, arg);

    if (!with_switch) return;
    what = "sdpa_custom with sdpa_ctx_use_reference";
    tu_fill_nan(outr, n);
    tu_dirty_error(one);
    sdpa_ctx_use_reference(one, 1);
    st = sdpa_custom(one, query, key, value, mask, options, &tor);
    sdpa_ctx_use_reference(one, 0);
    if (tu_check_output(one, st, what, outr, ref, n, dims) && check) check(TU_PATH_SWITCH, what, outr, ref, arg);
}

void * tu_malloc(size_t bytes) {
    void * p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("FATAL: test host out of memory (%zu bytes)\n", bytes);
        fflush(stdout);
        exit(2);
    }
    return p;
}

int tu_summary(const char * name) {
    printf("%s: %ld checks, %ld failed\n", name, tu_checks, tu_failures);
    fflush(stdout);
    return tu_failures ? 1 : 0;
}

/* Under AddressSanitizer, let malloc return NULL for impossible sizes (the
   library must then report E_OOM) instead of aborting the test. */
#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif
#ifdef TU_ASAN
const char * __asan_default_options(void);
const char * __asan_default_options(void) {
    return "allocator_may_return_null=1";
}
#endif

/* The same under ThreadSanitizer (test_validation's ctx_reserve(SIZE_MAX)). */
#if defined(__SANITIZE_THREAD__)
#define TU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_TSAN 1
#endif
#endif
#ifdef TU_TSAN
const char * __tsan_default_options(void);
const char * __tsan_default_options(void) {
    return "allocator_may_return_null=1";
}
#endif

float * tu_cache_dense(const sdpa_kv_cache * c, int which) {
    int32_t B, S, H, D;
    sdpa_kv_cache_shape(c, &B, &S, &H, &D);
    const size_t n = (size_t)B * H * S * D;
    float * out = tu_malloc(n * sizeof(float) + 1);
    memset(out, 0, n * sizeof(float));
    for (int32_t b = 0; b < B; b++)
        for (int32_t h = 0; h < H; h++)
            for (int32_t t0 = 0; t0 < S; t0 += SDPA_PAGE_ROWS) {
                const float * page = sdpa_kv_cache_page(c, b, h, t0 / SDPA_PAGE_ROWS, which);
                if (!page) continue;
                const int32_t rows = S - t0 < SDPA_PAGE_ROWS ? S - t0 : SDPA_PAGE_ROWS;
                float * dst = out + (((size_t)b * H + h) * S + t0) * D;
                if (which) {
                    memcpy(dst, page, (size_t)rows * D * sizeof(float));
                    continue;
                }
                /* a float32 K block: groups of G rows, element d of row t at ((t / G) * D + d) * G + t % G */
                const size_t G = SDPA_PAGE_KEY_GROUP;
                for (size_t t = 0; t < (size_t)rows; t++)
                    for (size_t d = 0; d < (size_t)D; d++) dst[t * D + d] = page[(t / G * D + d) * G + t % G];
            }
    return out;
}
