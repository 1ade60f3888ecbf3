/* dense.h: the dense room's validated problems, shared by its rules
 * (contract/check_dense.c) and its kernels (dense/dense.c). */
#ifndef SDPA_DENSE_INTERNAL_H
#define SDPA_DENSE_INTERNAL_H

#include "internal.h"
#include "sdpa_dense.h"

/* Bytes of `len` elements of a weight dtype stored as rows of `cols`
 * (saturating); float32 / float16 / bool as their element size. */
uint64_t sdpa_weight_bytes(int32_t dtype, uint64_t len, int32_t cols);

/* A validated y [n, rows] (+)= x [n, cols] · w [rows, cols]ᵀ. */
typedef struct sdpa_dense_product {
    const float * x;
    float * y;
    const uint8_t * w;
    int32_t n, rows, cols, dtype;
    size_t row_bytes;      /* bytes between weight rows */
    int32_t accumulate;    /* SDPA_LINEAR_ACCUMULATE */
    int32_t int16_x;       /* SDPA_LINEAR_INT16_ACTIVATIONS with a q8_0 / q4_0 / q5_0 weight */
    int16_t * xq;          /* int16_x: x quantized, [n][cols] */
    float * xs;            /* int16_x: its scales, [n][cols / 32] */
} sdpa_dense_product;

/* A validated elementwise or row-wise call: n rows of dim floats. */
typedef struct sdpa_dense_rows {
    const float * x, * b;  /* x; rms_norm: weight [dim]; swiglu: up */
    float * y;
    int64_t n;
    int32_t dim;
    float eps;
} sdpa_dense_rows;

/* A validated embedding lookup / quantization: rows of cols values. */
typedef struct sdpa_dense_rowcopy {
    const void * src;      /* embed: the table; quantize: float32 source */
    void * dst;
    const int32_t * ids;   /* embed: n ids; quantize: NULL (row i -> row i) */
    int32_t n, cols, dtype;  /* dtype: embed the table's, quantize out's */
    size_t row_bytes;      /* of that dtype */
} sdpa_dense_rowcopy;

sdpa_status sdpa_check_linear(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight,
                              const sdpa_tensor * out, int32_t flags, sdpa_dense_product * p);
sdpa_status sdpa_check_rms_norm(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, float eps,
                                const sdpa_tensor * out, sdpa_dense_rows * p);
sdpa_status sdpa_check_swiglu(sdpa_ctx * ctx, const sdpa_tensor * gate, const sdpa_tensor * up,
                              const sdpa_tensor * out, sdpa_dense_rows * p);
sdpa_status sdpa_check_embed(sdpa_ctx * ctx, const sdpa_tensor * table, const int32_t * ids, int32_t n_ids,
                             const sdpa_tensor * out, sdpa_dense_rowcopy * p);
sdpa_status sdpa_check_quantize(sdpa_ctx * ctx, const sdpa_tensor * source, const sdpa_tensor * out,
                                sdpa_dense_rowcopy * p);

#endif
