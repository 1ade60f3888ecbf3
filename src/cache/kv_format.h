/* kv_format.h: how a cache page stores its rows, per cache dtype, and the
 * exact encode / decode of one row (CONTRACT.md section 3, "Cache dtypes").
 *
 * A page holds SDPA_PAGE_ROWS rows of one batch row and KV head:
 *   float32  K [ROWS/G][D][G] f32, V [ROWS][D] f32
 *   float16  K [ROWS/G][D][G] u16 (IEEE binary16), V [ROWS][D] u16
 *   int8     K [ROWS][D] i8, V [ROWS][D] i8, K scales [ROWS] f32,
 *            V scales [ROWS] f32, K zero points [ROWS] i8, V zero points [ROWS] i8
 * (page bytes rounded up to 64), G = SDPA_PAGE_KEY_GROUP. The float K block
 * is key-transposed per group of G rows ("k_groups"): for d = 0 .. D-1 the
 * d-th elements of G consecutive keys are adjacent, so Q.K is a broadcast
 * q[d] times G keys, with no horizontal sums (kernels/flash.c). int8 K stays
 * in rows: its Q.K is an integer dot product along D. Encoding happens on
 * write, decoding on read and in the kernels' tile loader: every reader sees
 * the same float32 value of a stored element, `sdpa_kv_decode`.
 */
#ifndef SDPA_KV_FORMAT_H
#define SDPA_KV_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

typedef struct sdpa_page_format {
    int32_t dtype;        /* SDPA_DTYPE_FLOAT32, _FLOAT16 or _INT8 */
    int32_t dim;          /* D */
    size_t elem_bytes;    /* 4, 2, 1 */
    int32_t k_groups;     /* 1: K is [ROWS/G][D][G] (float32, float16); 0: [ROWS][D] (int8) */
    size_t v_offset;      /* bytes from the page start to the V block */
    size_t scale_offset;  /* int8: K scales, then V scales at + ROWS * 4 */
    size_t zp_offset;     /* int8: K zero points, then V zero points at + ROWS */
    size_t page_bytes;    /* a multiple of 64 */
} sdpa_page_format;

/* The bytes of a page for a dtype and head dim (0 when the dtype is not a
 * cache dtype); fills `f` only when they fit in SDPA_MAX_PAGE_BYTES. */
uint64_t sdpa_page_format_make(sdpa_page_format * f, int32_t dtype, int32_t head_dim);

/* float32 -> IEEE binary16 bits, round to nearest even; overflow -> +-Inf,
 * NaN stays NaN (quiet), like a C cast, PyTorch's .half() or Math.f16round. */
uint16_t sdpa_f32_to_f16(float x);
/* binary16 bits -> float32 (exact). */
float sdpa_f16_to_f32(uint16_t h);

/* ExecuTorch's quantize_per_token over one row of `n` values (see the
 * contract): writes q[0..n-1], *scale, *zero_point. Non-finite inputs: lo
 * and hi are taken over the finite values; +Inf stores 127, -Inf -128, NaN
 * stores the zero point (reads back as 0). */
void sdpa_quantize_row(const float * x, int32_t n, int8_t * q, float * scale, int8_t * zero_point);

/* Encodes row `row` of page `page` (K when !value) from n = D floats. */
void sdpa_kv_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x);
/* Decodes it into D floats. */
void sdpa_kv_decode_row(const sdpa_page_format * f, const void * page, int32_t row, int value, float * out);
/* One element of it (the scalar reference's reader). */
float sdpa_kv_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d);

/* Element index of (row, d) inside the K (value = 0) or V block. */
static inline size_t sdpa_kv_elem_index(const sdpa_page_format * f, int32_t row, int value, int32_t d) {
    if (value || !f->k_groups) return (size_t)row * (size_t)f->dim + (size_t)d;
    const size_t G = SDPA_PAGE_KEY_GROUP;
    return ((size_t)row / G * (size_t)f->dim + (size_t)d) * G + (size_t)row % G;
}

/* The K (value = 0) or V block of a page. */
static inline const void * sdpa_kv_block(const sdpa_page_format * f, const void * page, int value) {
    return (const char *)page + (value ? f->v_offset : 0);
}

/* A plain row (V, or int8 K): its D stored elements, contiguous. */
const void * sdpa_kv_raw_row(const sdpa_page_format * f, const void * page, int32_t row, int value);

/* Raw access for cache.readRaw: the row's stored bytes (D elements, in row
 * order whatever the block's layout) copied to `out`, and for int8 its scale
 * and zero point. */
void sdpa_kv_copy_raw_row(const sdpa_page_format * f, const void * page, int32_t row, int value, void * out);
float sdpa_kv_row_scale(const sdpa_page_format * f, const void * page, int32_t row, int value);
int8_t sdpa_kv_row_zero_point(const sdpa_page_format * f, const void * page, int32_t row, int value);

/* Rows first .. ROWS-1 of K and V (and their int8 scales and zero points)
 * set to all-zero bytes (they decode to 0.0, as an unwritten row). */
void sdpa_kv_clear_rows(const sdpa_page_format * f, void * page, int32_t first);

#endif
