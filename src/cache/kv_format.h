/* kv_format.h: how a cache page stores its rows, per K and V dtype, and the
 * exact encode / decode of one row (CONTRACT.md section 3, "Cache dtypes").
 *
 * A page holds SDPA_PAGE_ROWS rows of one batch row and KV head: a K block,
 * a V block, then each block's side data (int8: scales [ROWS] f32 and zero
 * points [ROWS] i8; int4: scales [G][ROWS] and offsets [G][ROWS] float16,
 * G = ceil(D / 64) groups of 64 elements: one per row at head size 64),
 * page bytes rounded up to 64. K
 * and V each have their own dtype (a "K int8 / V int4" page is a K block of
 * one and a V block of the other). Each block has one of six layouts,
 * chosen for the kernel that reads it (kernels/flash.c), with element (t, d)
 * of page row t at sdpa_kv_elem_index (in elements; int4: in nibbles, the
 * low nibble of a byte first):
 *   ROWS        [ROWS][D]                  float32 / float16 V
 *   KEY_GROUPS  [ROWS/G][D][G]             float32 / float16 K, G = SDPA_PAGE_KEY_GROUP:
 *                                          Q.K is a broadcast q[d] times G keys, no
 *                                          horizontal sums
 *   I8_KEYS     [ROWS/8][ceil(D/2)][8][2]  int8 K: 16 bytes hold d, d+1 of 8 keys, so
 *                                          i32x4.dot_i16x8_s with a broadcast (q[d], q[d+1])
 *                                          sums two elements of 4 keys per lane (D padded
 *                                          to even; the pad is never read as a value)
 *   I8_PAIRS    [ROWS/2][D][2]             int8 V: 16 bytes hold d .. d+7 of 2 keys, so the
 *                                          dot with a broadcast pair of weights sums 2 keys
 *                                          for 4 elements per lane
 *   I4_KEYS     [ROWS/8][ceil(D/4)][8][2]  int4 K, bytes: the byte of (key j, element d)
 *                                          holds d in its low nibble when d % 4 < 2, else in
 *                                          its high nibble: the low nibbles of 16 bytes are
 *                                          I8_KEYS' pair d/2 for d % 4 = 0, the high ones the
 *                                          next pair (one AND, one shift unpack them)
 *   I4_PAIRS    [ROWS/2][ceil(D/16)][8][2] int4 V, bytes: 16 bytes hold elements d0 .. d0+15
 *                                          of 2 keys, d0 .. d0+7 in the low nibbles (I8_PAIRS'
 *                                          order), d0+8 .. d0+15 in the high ones
 * (int4 pads D to the layout's multiple with zero nibbles, never read as values.)
 * Encoding happens on write, decoding on read and in the kernels: every
 * reader sees the same float32 value of a stored element, `sdpa_kv_decode`.
 */
#ifndef SDPA_KV_FORMAT_H
#define SDPA_KV_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"
#include "cache/kv_types.h"  /* sdpa_page_format, sdpa_block_format, sdpa_block_layout */

/* Whether `dtype` is a cache dtype (float32, float16, int8, int4). */
bool sdpa_is_cache_dtype(int32_t dtype);

/* The bytes of a page for these dtypes and head dim (0 when a dtype is not a
 * cache dtype); fills `f` only when they fit in SDPA_MAX_PAGE_BYTES. */
uint64_t sdpa_page_format_make(sdpa_page_format * f, int32_t key_dtype, int32_t value_dtype, int32_t head_dim);

static inline const sdpa_block_format * sdpa_kv_blockf(const sdpa_page_format * f, int value) {
    return &f->block[value ? 1 : 0];
}
static inline int32_t sdpa_kv_dtype(const sdpa_page_format * f, int value) { return sdpa_kv_blockf(f, value)->dtype; }
static inline sdpa_block_layout sdpa_kv_layout(const sdpa_page_format * f, int value) {
    return sdpa_kv_blockf(f, value)->layout;
}

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

/* int4: the scale and offset (float16 bits) of one group of n values, as
 * the contract states: offset = the least float16 >= min, scale = the
 * greatest float16 with offset + 15 * scale <= max (both as decoded); a
 * group holding an Inf, a NaN or a value beyond float16's range gets NaN
 * for both (every element reads NaN). */
void sdpa_int4_params(const float * x, int32_t n, uint16_t * scale, uint16_t * offset);
/* The level 0..15 of one value of such a group (scale, offset decoded). */
uint8_t sdpa_int4_level(float x, float scale, float offset);
/* The value of level q with float16 scale and offset bits: q * scale +
 * offset in two float32 steps (every int4 decode). */
float sdpa_int4_value(uint8_t q, uint16_t scale, uint16_t offset);
/* Encodes group g (elements 64 g .. min(D, 64 g + 64) - 1) of an int4 row
 * from x (its elements, x[0] = element 64 g); true for a NaN group. */
bool sdpa_int4_encode_group(const sdpa_page_format * f, void * page, int32_t row, int value, int32_t g, const float * x);

/* Encodes row `row` of page `page` (K when !value) from n = D floats; true
 * when the block may now hold a non-finite value that the kernels' in-place
 * readers cannot convert (a float16 Inf or NaN, an int4 NaN group: see
 * SDPA_PAGE_MARK_*). */
bool sdpa_kv_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x);
/* Decodes it into D floats. */
void sdpa_kv_decode_row(const sdpa_page_format * f, const void * page, int32_t row, int value, float * out);
/* One element of it (the scalar reference's reader). */
float sdpa_kv_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d);

/* Element index of (row, d) inside the K (value = 0) or V block: in
 * elements of elem_bytes, or for int4 in nibbles (byte index / 2, nibble
 * index % 2: 0 low, 1 high). */
static inline size_t sdpa_kv_elem_index(const sdpa_page_format * f, int32_t row, int value, int32_t d) {
    const sdpa_block_format * bf = sdpa_kv_blockf(f, value);
    const size_t t = (size_t)row, D = (size_t)f->dim, e = (size_t)d, U = (size_t)bf->units;
    switch (bf->layout) {
        case SDPA_LAYOUT_KEY_GROUPS: {
            const size_t G = SDPA_PAGE_KEY_GROUP;
            return (t / G * D + e) * G + t % G;
        }
        case SDPA_LAYOUT_I8_KEYS: {
            const size_t G = SDPA_I8_KEY_GROUP;
            return ((t / G * U + e / 2) * G + t % G) * 2 + e % 2;
        }
        case SDPA_LAYOUT_I8_PAIRS: return (t / 2 * D + e) * 2 + t % 2;
        case SDPA_LAYOUT_I4_KEYS: {
            const size_t G = SDPA_I8_KEY_GROUP;
            const size_t byte = ((t / G * U + e / 4) * G + t % G) * 2 + e % 2;
            return byte * 2 + e % 4 / 2;
        }
        case SDPA_LAYOUT_I4_PAIRS: {
            const size_t byte = (t / 2 * U + e / 16) * 16 + e % 8 * 2 + t % 2;
            return byte * 2 + e % 16 / 8;
        }
        default: return t * D + e;
    }
}

/* Bytes a block spends per page row (every layout keeps rows of a tile
 * that starts at a multiple of its group contiguous: the tile at row r0
 * starts r0 * this into the block). */
static inline size_t sdpa_kv_row_bytes(const sdpa_page_format * f, int value) {
    return sdpa_kv_blockf(f, value)->row_bytes;
}

/* The K (value = 0) or V block of a page. */
static inline const void * sdpa_kv_block(const sdpa_page_format * f, const void * page, int value) {
    return (const char *)page + sdpa_kv_blockf(f, value)->offset;
}

/* A row of a ROWS block (float32 / float16 V): its D stored elements, contiguous. */
const void * sdpa_kv_raw_row(const sdpa_page_format * f, const void * page, int32_t row, int value);

/* An int8 block's scales / zero points of rows 0 .. ROWS-1. */
static inline const float * sdpa_kv_scales(const sdpa_page_format * f, const void * page, int value) {
    return (const float *)(const void *)((const char *)page + sdpa_kv_blockf(f, value)->scale_offset);
}
static inline const int8_t * sdpa_kv_zero_points(const sdpa_page_format * f, const void * page, int value) {
    return (const int8_t *)page + sdpa_kv_blockf(f, value)->zp_offset;
}
/* An int4 block's float16 scales / offsets of group g, rows 0 .. ROWS-1. */
static inline const uint16_t * sdpa_kv_i4_scales(const sdpa_page_format * f, const void * page, int value, int32_t g) {
    return (const uint16_t *)(const void *)((const char *)page + sdpa_kv_blockf(f, value)->scale_offset) +
           (size_t)g * SDPA_PAGE_ROWS;
}
static inline const uint16_t * sdpa_kv_i4_offsets(const sdpa_page_format * f, const void * page, int value, int32_t g) {
    return (const uint16_t *)(const void *)((const char *)page + sdpa_kv_blockf(f, value)->zp_offset) +
           (size_t)g * SDPA_PAGE_ROWS;
}

/* A row's stored form as bytes (readRaw, saved KV state) is a "row
 * record": cache/kv_record.h, the one codec of records. */

/* Rows first .. ROWS-1 of K and V (and their side data) set to all-zero
 * bytes (they decode to 0.0, as an unwritten row). */
void sdpa_kv_clear_rows(const sdpa_page_format * f, void * page, int32_t first);

#endif
