/* internal.h: what the rooms of src/ share. Data flows one way:
 *   sdpa.c / cache/kv_cache.c (entry points)
 *     -> contract/check.c   (every rule, before anything is written)
 *     -> sdpa_problem        (validated geometry, strides, pointers)
 *     -> kernels/reference.c or kernels/flash.c (run on threadpool/)
 */
#ifndef SDPA_INTERNAL_H
#define SDPA_INTERNAL_H

#include "sdpa.h"
#include "threadpool/threadpool.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#define SDPA_ERROR_CAP 512

/* Byte counts computed from user dims are uint64_t and saturate at
 * UINT64_MAX instead of wrapping (on wasm32 a size_t product of two dims
 * wraps at 4 GiB). A count above SIZE_MAX does not fit this build's address
 * space: callers turn it into E_OOM before anything is allocated or written. */
static inline uint64_t sdpa_size_mul(uint64_t a, uint64_t b) {
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}
static inline uint64_t sdpa_size_add(uint64_t a, uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The kernels index rows, keys and head-dim elements in int32 and step past
 * a bound by less than this margin (SIMD strides, key tiles, chunk
 * rounding), so contract/ keeps every such extent <= SDPA_INDEX_LIMIT. Only
 * a native caller with > 8 GiB tensors can reach it: on wasm32 a 4 GiB
 * address space keeps every extent below 2^30. */
#define SDPA_INDEX_LIMIT (INT32_MAX - 65536)

struct sdpa_ctx {
    sdpa_pool * pool;
    int32_t     n_threads;
    int32_t     use_reference;
    void *      scratch;        /* owned; kernels align inside it */
    size_t      scratch_bytes;
    char        last_error[SDPA_ERROR_CAP];
};

struct sdpa_kv_cache {
    int32_t batch, max_seq_len, kv_heads, head_dim;
    float * k;                  /* [B, Hkv, maxSeqLen, D] */
    float * v;                  /* [B, Hkv, maxSeqLen, D] */
};

/* Key/value source of an attention call: either caller tensors in
 * [B, Skv, Hkv, D] or a cache in [B, Hkv, maxSeqLen, D]. Strides in floats;
 * D is always contiguous. */
typedef struct sdpa_kv_view {
    const float * k;
    const float * v;
    int32_t batch, len, heads, dim;
    size_t stride_b, stride_t, stride_h;
} sdpa_kv_view;

/* A validated attention problem: everything a kernel needs, nothing to check. */
typedef struct sdpa_problem {
    int32_t batch, q_len, q_heads, kv_heads, head_dim, group;  /* group = r */
    int32_t n_keys;        /* N: keys t < N exist */
    int64_t start_pos;     /* causal anchor: row i sees t <= start_pos + i */
    int32_t is_causal;
    float   scale;
    const float * q;       /* [B, Sq, Hq, D] dense */
    float *       out;     /* [B, Sq, Hq, D] dense */
    sdpa_kv_view  kv;
    const void *  mask;    /* NULL, or [Sq, n_keys_mask] with row stride mask_stride */
    int32_t       mask_dtype;
    int32_t       mask_stride;
} sdpa_problem;

/* Records a failure on the context; returns `status` for tail calls. */
sdpa_status sdpa_fail(sdpa_ctx * ctx, sdpa_status status, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void sdpa_clear_error(sdpa_ctx * ctx);

/* Ensures the context's scratch holds `bytes` (grows, never shrinks); E_OOM,
 * with a message that starts with `fn`, when it cannot (bytes > SIZE_MAX
 * included). */
sdpa_status sdpa_scratch_reserve(sdpa_ctx * ctx, const char * fn, uint64_t bytes);

/* Grows the scratch to what a validated problem needs (E_OOM). Entry points
 * call it before writing anything, so a failure leaves every buffer as it was. */
sdpa_status sdpa_reserve_problem(sdpa_ctx * ctx, const char * fn, const sdpa_problem * p);

/* Runs a reserved problem: the scalar reference when `reference` or the
 * context's switch says so, else the flash kernel. Clears the last error. */
void sdpa_run_problem(sdpa_ctx * ctx, const sdpa_problem * p, bool reference);

#endif
