/*
 * testutil.h: shared helpers for the native C tests (tests/c/test_*.c).
 *
 * - a seeded RNG (splitmix64), so every case is reproducible from its seed;
 * - tu_close(): |got - ref| <= 1e-5 * (1 + max|ref|) over a whole tensor,
 *   printing the first mismatch with its [b, s, h, d] indices;
 * - TU_CHECK(): a counted boolean check with a printf-style message;
 * - tu_summary(): the closing line "<name>: N checks, N failed" and the
 *   process exit status (non-zero when anything failed);
 * - tu_ctx_pair(), tu_custom_paths(): the 1- and 2-thread contexts and the
 *   run of one customSdpa call through every path (fast 1 and 2 threads,
 *   sdpa_custom_reference, the reference switch) against a float64 reference.
 *
 * Plain C11, no platform calls: the same tests build natively and with emcc.
 * Implementation in testutil.c (linked into every test executable).
 */
#ifndef SDPA_TESTUTIL_H
#define SDPA_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

/// The f32 tolerance of the tests: |got - ref| <= TU_TOL * (1 + max|ref|).
#define TU_TOL 1e-5
/// What the tests hold an int8 cache's attention to against the float64
/// reference over its stored values: the kernel quantizes q and the softmax
/// weights to int16 (CONTRACT.md: <= 2e-3 (1 + max|ref|)); measured <= 4e-5,
/// so 2e-4 still catches one dropped key among a thousand.
#define TU_INT8_TOL 2e-4

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

/// Compares n floats against a double reference with TU_TOL.
/// dims (may be NULL) are the [B, S, H, D] shape used to print the indices of
/// the first mismatch. NaN in got where ref is finite is a mismatch. Returns 1
/// when close. Counts one check.
int tu_close(const char * what, const float * got, const double * ref, size_t n,
             const int32_t * dims4);

/// Same with the tolerance rel * (1 + max|ref|) (e.g. TU_INT8_TOL).
int tu_close_tol(const char * what, const float * got, const double * ref, size_t n,
                 const int32_t * dims4, double rel);

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

/// Seconds since an arbitrary origin: wall time (C11 timespec_get), clock()'s CPU time where that fails.
double tu_seconds(void);

/// Fills a tensor descriptor (len = product of the dims, 0 when it is not positive).
sdpa_tensor tu_tensor4(void * data, int32_t dtype, int32_t d0, int32_t d1, int32_t d2, int32_t d3);
sdpa_tensor tu_tensor2(void * data, int32_t dtype, int32_t d0, int32_t d1);

/// Fills n floats with a quiet-NaN sentinel (an output element a call should
/// have written and did not then fails tu_close).
void tu_fill_nan(float * p, size_t n);

/// Creates the 1-thread and the 2-thread context most tests compare. On
/// failure prints a FATAL line, frees what was made and returns 0; otherwise
/// counts two checks (each context runs the threads it was asked for: the
/// 1 vs 2 threads bit-identity checks mean nothing otherwise) and returns 1.
int tu_ctx_pair(sdpa_ctx ** one, sdpa_ctx ** two);

/// Leaves a message in sdpa_ctx_last_error(ctx) (a call rejected with
/// E_ARG, nothing touched), so that a success after it has a message to clear
/// (otherwise "last_error empty after a success" would hold trivially).
void tu_dirty_error(sdpa_ctx * ctx);

/// The verdict on one output of a call that should succeed: status SDPA_OK
/// and an empty sdpa_ctx_last_error(ctx), then tu_close(what, out, ref, n,
/// dims4). Returns 1 when the status was SDPA_OK (whatever the comparison).
int tu_check_output(sdpa_ctx * ctx, sdpa_status st, const char * what, const float * out, const double * ref,
                    size_t n, const int32_t * dims4);

/// The ways into customSdpa's math that tu_custom_paths runs, in its order.
enum { TU_PATH_FAST1 = 0, TU_PATH_FAST2 = 1, TU_PATH_REFERENCE = 2, TU_PATH_SWITCH = 3 };

/// Extra checks on one output of tu_custom_paths (path: TU_PATH_*).
typedef void (*tu_path_check)(int path, const char * what, const float * out, const double * ref,
                              const void * arg);

/// One customSdpa call (query, key, value, mask, options; output dims are the
/// query's) run every way the library offers, each output checked with
/// tu_check_output against ref (the tests' float64 reference):
///   sdpa_custom on `one` into out1; on `two` into out2, which must also be
///   bit-identical to out1; sdpa_custom_reference on `two` into outr; and,
///   when with_switch, sdpa_custom on `one` with sdpa_ctx_use_reference into
///   outr again.
/// Every output starts as a NaN sentinel, every call follows tu_dirty_error.
/// `check` (may be NULL) runs on each output whose call returned SDPA_OK,
/// right after it was compared.
void tu_custom_paths(sdpa_ctx * one, sdpa_ctx * two, const sdpa_tensor * query, const sdpa_tensor * key,
                     const sdpa_tensor * value, const sdpa_tensor * mask, const sdpa_options * options,
                     const double * ref, float * out1, float * out2, float * outr, int with_switch,
                     tu_path_check check, const void * arg);

/// malloc that aborts the test (not the library) when the host is out of memory.
void * tu_malloc(size_t bytes);

/* A float32 cache's K (which 0) or V (1) storage gathered from its pages
 * into the dense head-major layout [B, Hkv, maxSeqLen, D] (pages never
 * written: zeros), through sdpa_kv_cache_page (K blocks are key-transposed
 * per SDPA_PAGE_KEY_GROUP rows, sdpa.h). Caller frees. */
float * tu_cache_dense(const sdpa_kv_cache * c, int which);

/// Prints "<name>: N checks, N failed" and returns the exit status (0 / 1).
int tu_summary(const char * name);

#endif /* SDPA_TESTUTIL_H */
