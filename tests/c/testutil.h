/*
 * testutil.h: shared helpers for the native C tests (tests/c/test_*.c).
 *
 * - a seeded RNG (splitmix64), so every case is reproducible from its seed;
 * - tu_close(): |got - ref| <= 1e-5 * (1 + max|ref|) over a whole tensor,
 *   printing the first mismatch with its [b, s, h, d] indices;
 * - TU_CHECK(): a counted boolean check with a printf-style message;
 * - tu_summary(): the closing line "<name>: N checks, N failed" and the
 *   process exit status (non-zero when anything failed).
 *
 * Plain C11, no platform calls: the same tests build natively and with emcc.
 * Implementation in testutil.c (linked into every test executable).
 */
#ifndef SDPA_TESTUTIL_H
#define SDPA_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

/// The f32 tolerance of the issue: |got - ref| <= TU_TOL * (1 + max|ref|).
#define TU_TOL 1e-5

typedef struct tu_rng {
    uint64_t state;
} tu_rng;

void     tu_rng_seed(tu_rng * rng, uint64_t seed);
uint64_t tu_rng_u64(tu_rng * rng);
/// Uniform integer in [lo, hi] (inclusive).
int      tu_rng_int(tu_rng * rng, int lo, int hi);
/// Uniform double in [0, 1).
double   tu_rng_unit(tu_rng * rng);
/// Uniform float in [lo, hi).
float    tu_rng_uniform(tu_rng * rng, float lo, float hi);
/// Standard normal (Box-Muller).
float    tu_rng_normal(tu_rng * rng);
/// One of n ints.
int      tu_rng_pick(tu_rng * rng, const int * values, int n);

/// Global counters (all tests of one executable).
extern long tu_checks;
extern long tu_failures;
/// When set, failure messages start with this context line (e.g. the case).
extern char tu_context[512];

/// Counted check; prints "FAIL <file>:<line>: <msg>" (plus tu_context) on failure.
int tu_check_impl(int ok, const char * file, int line, const char * fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#define TU_CHECK(cond, ...) tu_check_impl((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)

/// Compares n floats against a double reference with the tolerance.
/// dims (may be NULL) are the [B, S, H, D] shape used to print the indices of
/// the first mismatch. NaN in got where ref is finite is a mismatch. Returns 1
/// when close. Counts one check.
int tu_close(const char * what, const float * got, const double * ref, size_t n,
             const int32_t * dims4);

/// Same, float vs float (e.g. library reference vs fast path), tolerance as above.
int tu_close_ff(const char * what, const float * got, const float * ref, size_t n,
                const int32_t * dims4);

/// Bytewise equality of two float arrays (bit-identical), printing the first
/// differing index. Counts one check.
int tu_identical(const char * what, const float * a, const float * b, size_t n,
                 const int32_t * dims4);

/// Case-insensitive substring test.
int tu_contains_ci(const char * haystack, const char * needle);

/// Non-zero when the executable should run its shorter variant: compiled with
/// -DSDPA_TEST_QUICK, or the environment variable SDPA_TEST_QUICK is set to a
/// non-empty value other than "0".
int tu_quick(void);
/// Non-zero when SDPA_TEST_FULL is set (more random cases).
int tu_full(void);

/// Base seed for the random sweeps: `dflt`, or SDPA_TEST_SEED when set (to
/// explore other combinations; failures print the case's own seed).
uint64_t tu_base_seed(uint64_t dflt);

/// Seconds since an arbitrary origin (clock(), CPU time: portable C11).
double tu_seconds(void);

/// Fills a tensor descriptor.
sdpa_tensor tu_tensor4(void * data, int32_t dtype, int32_t d0, int32_t d1, int32_t d2, int32_t d3);
sdpa_tensor tu_tensor2(void * data, int32_t dtype, int32_t d0, int32_t d1);

/// malloc that aborts the test (not the library) when the host is out of memory.
void * tu_malloc(size_t bytes);

/// Prints "<name>: N checks, N failed" and returns the exit status (0 / 1).
int tu_summary(const char * name);

#endif /* SDPA_TESTUTIL_H */
