/* kv_format.h: how a cache page stores its rows, per cache dtype, and the
 * exact encode / decode of one row (CONTRACT.md section 3, "Cache dtypes").
 *
 * A page holds SDPA_PAGE_ROWS rows of one batch row and KV head, a K block
 * then a V block (then, for int8, K scales [ROWS] f32, V scales [ROWS] f32,
 * K zero points [ROWS] i8, V zero points [ROWS] i8; page bytes rounded up to
 * 64). Each block has one of four layouts, chosen for the kernel that reads
 * it (kernels/flash.c), with element (t, d) of page row t at
 * sdpa_kv_elem_index:
 *   ROWS        [ROWS][D]                float32 / float16 V
 *   KEY_GROUPS  [ROWS/G][D][G]           float32 / float16 K, G = SDPA_PAGE_KEY_GROUP:
 *                                        Q.K is a broadcast q[d] times G keys, no
 *                                        horizontal sums
 *   I8_KEYS     [ROWS/8][ceil(D/2)][8][2] int8 K: 16 bytes hold d, d+1 of 8 keys, so
 *                                        i32x4.dot_i16x8_s with a broadcast (q[d], q[d+1])
 *                                        sums two elements of 4 keys per lane (D padded
 *                                        to even; the pad is never read as a value)
 *   I8_PAIRS    [ROWS/2][D][2]           int8 V: 16 bytes hold d .. d+7 of 2 keys, so the
 *                                        dot with a broadcast pair of weights sums 2 keys
 *                                        for 4 elements per lane
 * Encoding happens on write, decoding on read and in the kernels: every
 * reader sees the same float32 value of a stored element, `sdpa_kv_decode`.
 */
#ifndef SDPA_KV_FORMAT_H
#define SDPA_KV_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

typedef enum sdpa_block_layout {
    SDPA_LAYOUT_ROWS,
    SDPA_LAYOUT_KEY_GROUPS,
    SDPA_LAYOUT_I8_KEYS,
    SDPA_LAYOUT_I8_PAIRS,
} sdpa_block_layout;

#define SDPA_I8_KEY_GROUP 8   /* keys per group of an I8_KEYS block */

typedef struct sdpa_page_format {
    int32_t dtype;        /* SDPA_DTYPE_FLOAT32, _FLOAT16 or _INT8 */
    int32_t dim;          /* D */
    size_t elem_bytes;    /* 4, 2, 1 */
    sdpa_block_layout k_layout, v_layout;
    int32_t k_pairs;      /* I8_KEYS: ceil(D / 2) element pairs per key */
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

/* ExecuTorch's choose_qparams_per_token_asymmetric over one row of `n`
 * values (see the contract): *scale, *zero_point. Non-finite inputs: lo and
 * hi are taken over the finite values. */
void sdpa_quantize_params(const float * x, int32_t n, float * scale, int8_t * zero_point);
/* quantize_per_token of one value with those parameters (inv = 1 / scale):
 * +Inf stores 127, -Inf -128, NaN stores the zero point (reads back as 0). */
int8_t sdpa_quantize_value(float x, float inv, int8_t zero_point);

/* Encodes row `row` of page `page` (K when !value) from n = D floats; true
 * when it stored a float16 Inf or NaN (see SDPA_PAGE_MARK_NONFINITE). */
bool sdpa_kv_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x);
/* Decodes it into D floats. */
void sdpa_kv_decode_row(const sdpa_page_format * f, const void * page, int32_t row, int value, float * out);
/* One element of it (the scalar reference's reader). */
float sdpa_kv_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d);

static inline sdpa_block_layout sdpa_kv_layout(const sdpa_page_format * f, int value) {
    return value ? f->v_layout : f->k_layout;
}

/* Element index of (row, d) inside the K (value = 0) or V block. */
static inline size_t sdpa_kv_elem_index(const sdpa_page_format * f, int32_t row, int value, int32_t d) {
    const size_t t = (size_t)row, D = (size_t)f->dim, e = (size_t)d;
    switch (sdpa_kv_layout(f, value)) {
        case SDPA_LAYOUT_KEY_GROUPS: {
            const size_t G = SDPA_PAGE_KEY_GROUP;
            return (t / G * D + e) * G + t % G;
        }
        case SDPA_LAYOUT_I8_KEYS: {
            const size_t G = SDPA_I8_KEY_GROUP;
            return ((t / G * (size_t)f->k_pairs + e / 2) * G + t % G) * 2 + e % 2;
        }
        case SDPA_LAYOUT_I8_PAIRS: return (t / 2 * D + e) * 2 + t % 2;
        default: return t * D + e;
    }
}

/* Bytes a block spends per page row (every layout keeps rows of a tile
 * that starts at a multiple of its group contiguous: the tile at row r0
 * starts r0 * this into the block). */
static inline size_t sdpa_kv_row_bytes(const sdpa_page_format * f, int value) {
    const size_t elems = sdpa_kv_layout(f, value) == SDPA_LAYOUT_I8_KEYS ? 2 * (size_t)f->k_pairs : (size_t)f->dim;
    return elems * f->elem_bytes;
}

/* The K (value = 0) or V block of a page. */
static inline const void * sdpa_kv_block(const sdpa_page_format * f, const void * page, int value) {
    return (const char *)page + (value ? f->v_offset : 0);
}

/* A row of a ROWS block (float32 / float16 V): its D stored elements, contiguous. */
const void * sdpa_kv_raw_row(const sdpa_page_format * f, const void * page, int32_t row, int value);

/* An int8 page's K (value = 0) or V scales / zero points of rows 0 .. ROWS-1. */
static inline const float * sdpa_kv_scales(const sdpa_page_format * f, const void * page, int value) {
    return (const float *)(const void *)((const char *)page + f->scale_offset) + (value ? SDPA_PAGE_ROWS : 0);
}
static inline const int8_t * sdpa_kv_zero_points(const sdpa_page_format * f, const void * page, int value) {
    return (const int8_t *)page + f->zp_offset + (value ? SDPA_PAGE_ROWS : 0);
}

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
