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
                            const float * reff, size_t n, const int32_t * dims4) {
    tu_checks++;
    double maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = refd ? refd[i] : (double)reff[i];
        if (isfinite(r) && fabs(r) > maxref) maxref = fabs(r);
    }
    double tol = TU_TOL * (1.0 + maxref);
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
    return tu_close_generic(what, got, ref, NULL, n, dims4);
}

int tu_close_ff(const char * what, const float * got, const float * ref, size_t n,
                const int32_t * dims4) {
    return tu_close_generic(what, got, NULL, ref, n, dims4);
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

sdpa_tensor tu_tensor4(void * data, int32_t dtype, int32_t d0, int32_t d1, int32_t d2, int32_t d3) {
    sdpa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.rank = 4;
    t.dims[0] = d0;
    t.dims[1] = d1;
    t.dims[2] = d2;
    t.dims[3] = d3;
    int64_t len = (int64_t)d0 * d1 * d2 * d3;
    t.len = len > 0 ? (size_t)len : 0;
    return t;
}

sdpa_tensor tu_tensor2(void * data, int32_t dtype, int32_t d0, int32_t d1) {
    sdpa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.rank = 2;
    t.dims[0] = d0;
    t.dims[1] = d1;
    int64_t len = (int64_t)d0 * d1;
    t.len = len > 0 ? (size_t)len : 0;
    return t;
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
