/* kv_format.h: how a cache page stores its rows, per cache dtype, and the
 * exact encode / decode of one row (CONTRACT.md section 3, "Cache dtypes").
 *
 * A page holds SDPA_PAGE_ROWS rows of one batch row and KV head:
 *   float32  K [ROWS][D] f32, V [ROWS][D] f32
 *   float16  K [ROWS][D] u16 (IEEE binary16), V [ROWS][D] u16
 *   int8     K [ROWS][D] i8, V [ROWS][D] i8, K scales [ROWS] f32,
 *            V scales [ROWS] f32, K zero points [ROWS] i8, V zero points [ROWS] i8
 * (page bytes rounded up to 64). Encoding happens on write, decoding on read
 * and in the kernels' tile loader: every reader sees the same float32 value
 * of a stored element, `sdpa_kv_decode`.
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

/* Raw access for cache.readRaw: the row's stored bytes (D elements), and for
 * int8 its scale and zero point. */
const void * sdpa_kv_raw_row(const sdpa_page_format * f, const void * page, int32_t row, int value);
float sdpa_kv_row_scale(const sdpa_page_format * f, const void * page, int32_t row, int value);
int8_t sdpa_kv_row_zero_point(const sdpa_page_format * f, const void * page, int32_t row, int value);

#endif
