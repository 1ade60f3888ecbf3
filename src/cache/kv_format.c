/* kv_format.c: page layouts and the exact codec of a stored row (see
 * kv_format.h): one geometry, encode and decode per dtype, which the dtype
 * table (kv_dtype.c) holds and the sdpa_kv_* entry points call through. */
#include "cache/kv_format.h"
#include "cache/kv_dtype.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* The codecs are specified in float32 steps, so no FMA contraction: GCC in
 * ISO C mode (-std=c11) and clang for wasm (no FMA in SIMD128) never fuse;
 * clang natively honours the pragma. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float float_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

bool sdpa_is_cache_dtype(int32_t dtype) { return sdpa_dtype_traits_of(dtype) != NULL; }

/* Each dtype's block geometry for head dim D (< 2^31: no wrap), the
 * table's `geometry` column. */
static sdpa_block_geometry float_geometry(size_t elem_bytes, uint64_t D) {
    const sdpa_block_geometry g = { (int32_t)D, 0, D * elem_bytes, 0, 0 };
    return g;
}
sdpa_block_geometry sdpa_float_geometry_f32(int value, uint64_t D) { (void)value; return float_geometry(4, D); }
sdpa_block_geometry sdpa_float_geometry_f16(int value, uint64_t D) { (void)value; return float_geometry(2, D); }
sdpa_block_geometry sdpa_int8_geometry(int value, uint64_t D) {
    sdpa_block_geometry g;
    g.units = value ? (int32_t)D : (int32_t)((D + 1) / 2);  /* an I8_KEYS block pads D to even */
    g.groups = 0;
    g.row_bytes = value ? D : 2 * (uint64_t)g.units;
    g.side_bytes = SDPA_PAGE_ROWS * sizeof(float) + SDPA_PAGE_ROWS;  /* scales, zero points */
    g.zp_at = SDPA_PAGE_ROWS * sizeof(float);
    return g;
}
sdpa_block_geometry sdpa_int4_geometry(int value, uint64_t D) {
    sdpa_block_geometry g;
    g.units = (int32_t)(value ? (D + 15) / 16 : (D + 3) / 4);
    g.groups = (int32_t)((D + SDPA_I4_GROUP - 1) / SDPA_I4_GROUP);
    g.row_bytes = value ? 8 * (uint64_t)g.units : 2 * (uint64_t)g.units;
    g.side_bytes = 2 * (uint64_t)g.groups * SDPA_PAGE_ROWS * sizeof(uint16_t);  /* scales, offsets */
    g.zp_at = g.side_bytes / 2;
    return g;
}

/* One block's layout for `dtype` (K when !value) and head dim D (<= 2^31):
 * fills bf but for its offsets (*zp_at: its zero points' or offsets' place
 * in its side data); returns the block's bytes, *side its side data's. */
static uint64_t block_make(sdpa_block_format * bf, const sdpa_dtype_traits * t, int value, uint64_t D, uint64_t * side,
                           uint64_t * zp_at) {
    const sdpa_block_geometry g = t->geometry(value, D);
    bf->dtype = t->dtype;
    bf->layout = t->layout[value];
    bf->elem_bytes = t->elem_bytes;
    bf->units = g.units;
    bf->groups = g.groups;
    bf->row_bytes = (size_t)g.row_bytes;  /* < 2^34: fits (only stored when the page fits) */
    *side = g.side_bytes;
    *zp_at = g.zp_at;
    return SDPA_PAGE_ROWS * g.row_bytes;
}

uint64_t sdpa_page_format_make(sdpa_page_format * f, int32_t key_dtype, int32_t value_dtype, int32_t head_dim) {
    memset(f, 0, sizeof *f);
    const sdpa_dtype_traits * traits[2] = { sdpa_dtype_traits_of(key_dtype), sdpa_dtype_traits_of(value_dtype) };
    if (!traits[0] || !traits[1]) return 0;
    const uint64_t D = (uint64_t)(head_dim > 0 ? head_dim : 0);
    sdpa_page_format made;
    memset(&made, 0, sizeof made);
    uint64_t side[2], block[2], zp_at[2];
    for (int value = 0; value < 2; value++)
        block[value] = block_make(&made.block[value], traits[value], value, D, &side[value], &zp_at[value]);
    /* K block, V block, K side data, V side data: every part a multiple of 64 bytes */
    const uint64_t bytes = ((block[0] + block[1] + side[0] + side[1]) + 63) & ~(uint64_t)63;  /* < 2^40 */
    if (bytes > SDPA_MAX_PAGE_BYTES) return bytes;
    made.dim = head_dim;
    made.block[0].offset = 0;
    made.block[1].offset = (size_t)block[0];
    uint64_t at = block[0] + block[1];
    for (int value = 0; value < 2; value++) {
        sdpa_block_format * bf = &made.block[value];
        bf->scale_offset = (size_t)at;
        bf->zp_offset = (size_t)(at + zp_at[value]);
        at += side[value];
    }
    made.page_bytes = (size_t)bytes;
    *f = made;
    return bytes;
}

uint16_t sdpa_f32_to_f16(float x) {
    const uint32_t w = bits_of(x);
    const uint16_t sign = (uint16_t)((w >> 16) & 0x8000u);
    const uint32_t a = w & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  /* NaN, quiet */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* >= 65520 rounds to Inf (and Inf) */
    if (a >= 0x38800000u) {                                   /* a normal half: >= 2^-14 */
        uint32_t h = ((((a >> 23) - 127u + 15u) << 10) | ((a & 0x7fffffu) >> 13));
        const uint32_t rest = a & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;  /* a carry into the exponent is right */
        return (uint16_t)(sign | h);
    }
    if (a <= 0x33000000u) return sign;                        /* <= 2^-25 (a tie: to even, 0) */
    /* a subnormal half: k * 2^-24 */
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;                          /* 14 .. 24 */
    uint32_t k = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (k & 1u))) k++;
    return (uint16_t)(sign | k);
}

float sdpa_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        const float v = (float)m * 0x1p-24f;  /* exact: m < 2^10 */
        return sign ? -v : v;
    }
    return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

void sdpa_quantize_params(const float * x, int32_t n, float * scale_out, int8_t * zp_out) {
    float lo = 0.0f, hi = 0.0f;  /* min(min(x), 0), max(max(x), 0) over the finite values */
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) continue;
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    float scale = (hi - lo) / 255.0f;
    if (scale < FLT_EPSILON) scale = FLT_EPSILON;
    const float dmin = lo / scale, dmax = hi / scale;
    const float from_min = -128.0f + dmin, from_max = 127.0f + dmax;
    float zp = from_min + from_max > 0.0f ? -128.0f - dmin : 127.0f - dmax;
    zp = zp < -128.0f ? -128.0f : zp > 127.0f ? 127.0f : zp;
    *scale_out = scale;
    *zp_out = (int8_t)nearbyintf(zp);  /* the default rounding mode: half to even */
}

int8_t sdpa_quantize_value(float x, float inv, int8_t zero_point) {
    if (isnan(x)) return zero_point;
    float v = nearbyintf(x * inv + (float)zero_point);
    v = v < -128.0f ? -128.0f : v > 127.0f ? 127.0f : v;
    return (int8_t)v;
}

/* ---- int4 ---------------------------------------------------------------- */

#define F16_NAN 0x7e00u

/* The float16 after h (toward +Inf); -0 and +0 go to the least positive subnormal. */
static uint16_t f16_next_up(uint16_t h) {
    if ((h & 0x7fffu) == 0) return 1;
    return (uint16_t)(h & 0x8000u ? h - 1 : h + 1);
}
static uint16_t f16_next_down(uint16_t h) {
    if ((h & 0x7fffu) == 0) return 0x8001u;
    return (uint16_t)(h & 0x8000u ? h + 1 : h - 1);
}

void sdpa_int4_params(const float * x, int32_t n, uint16_t * scale_out, uint16_t * offset_out) {
    float lo = INFINITY, hi = -INFINITY;
    bool storable = n > 0;
    for (int32_t i = 0; i < n; i++) {
        if (!(x[i] >= -65504.0f && x[i] <= 65504.0f)) storable = false;  /* NaN, Inf, beyond float16 */
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    if (!storable) {
        *scale_out = *offset_out = F16_NAN;
        return;
    }
    /* offset: the least float16 >= lo (|lo| <= 65504, so it is finite) */
    uint16_t off = sdpa_f32_to_f16(lo);
    if (sdpa_f16_to_f32(off) < lo) off = f16_next_up(off);
    const float offset = sdpa_f16_to_f32(off);
    if (offset > hi) {  /* no float16 in [lo, hi]: the group reads as the nearest float16 to lo */
        *offset_out = sdpa_f32_to_f16(lo);
        *scale_out = 0;
        return;
    }
    /* scale: the greatest float16 >= 0 with offset + 15 scale <= hi, as the decoder adds */
    uint16_t sc = sdpa_f32_to_f16((hi - offset) / 15.0f);  /* >= 0, <= 131008 / 15: finite */
    while (sc != 0 && (float)15.0f * sdpa_f16_to_f32(sc) + offset > hi) sc = f16_next_down(sc);
    *scale_out = sc;
    *offset_out = off;
}

uint8_t sdpa_int4_level(float x, float scale, float offset) {
    if (!(scale > 0.0f)) return 0;  /* a constant group (or a NaN one) */
    const float q = nearbyintf((x - offset) / scale);
    return (uint8_t)(q < 0.0f ? 0.0f : q > 15.0f ? 15.0f : q);
}

static uint8_t get_nibble(const uint8_t * block, size_t at) {
    return (uint8_t)((block[at / 2] >> (4 * (at % 2))) & 0xfu);
}
static void put_nibble(uint8_t * block, size_t at, uint8_t q) {
    const unsigned shift = 4u * (unsigned)(at % 2);
    block[at / 2] = (uint8_t)((block[at / 2] & ~(0xfu << shift)) | ((unsigned)q << shift));
}

/* ---- rows ---------------------------------------------------------------- */

_Static_assert(SDPA_PAGE_ROWS % SDPA_PAGE_KEY_GROUP == 0 && SDPA_PAGE_ROWS % SDPA_I8_KEY_GROUP == 0,
               "a page holds whole key groups");

static void * block_mut(const sdpa_page_format * f, void * page, int value) {
    return (char *)page + sdpa_kv_blockf(f, value)->offset;
}
static uint16_t * i4_side_mut(const sdpa_page_format * f, void * page, int value, int offsets, int32_t g) {
    const sdpa_block_format * bf = sdpa_kv_blockf(f, value);
    return (uint16_t *)(void *)((char *)page + (offsets ? bf->zp_offset : bf->scale_offset)) + (size_t)g * SDPA_PAGE_ROWS;
}
static uint16_t load_u16(const uint16_t * p) { uint16_t v; memcpy(&v, p, 2); return v; }

const void * sdpa_kv_raw_row(const sdpa_page_format * f, const void * page, int32_t row, int value) {
    const sdpa_block_format * bf = sdpa_kv_blockf(f, value);
    return (const char *)sdpa_kv_block(f, page, value) + (size_t)row * (size_t)f->dim * bf->elem_bytes;
}

/* Each dtype's encode of a row (the table's `encode_row`): true when the
 * block may now hold what the in-place readers cannot convert. */
bool sdpa_f32_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x) {
    const int32_t D = f->dim;
    void * block = block_mut(f, page, value);
    if (sdpa_kv_layout(f, value) == SDPA_LAYOUT_ROWS) {  /* V: one contiguous row (a decode step's write) */
        memcpy((float *)block + (size_t)row * (size_t)D, x, (size_t)D * sizeof(float));
        return false;
    }
    for (int32_t d = 0; d < D; d++) ((float *)block)[sdpa_kv_elem_index(f, row, value, d)] = x[d];
    return false;
}

bool sdpa_f16_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x) {
    const int32_t D = f->dim;
    void * block = block_mut(f, page, value);
    uint32_t special = 0;
    for (int32_t d = 0; d < D; d++) {
        const uint16_t h = sdpa_f32_to_f16(x[d]);
        ((uint16_t *)block)[sdpa_kv_elem_index(f, row, value, d)] = h;
        special |= (h & 0x7c00u) == 0x7c00u;  /* Inf or NaN */
    }
    return special != 0;
}

bool sdpa_int8_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x) {
    const int32_t D = f->dim;
    void * block = block_mut(f, page, value);
    float scale;
    int8_t zp;
    sdpa_quantize_params(x, D, &scale, &zp);
    const float inv = 1.0f / scale;
    for (int32_t d = 0; d < D; d++)
        ((int8_t *)block)[sdpa_kv_elem_index(f, row, value, d)] = sdpa_quantize_value(x[d], inv, zp);
    memcpy((float *)(uintptr_t)sdpa_kv_scales(f, page, value) + row, &scale, sizeof scale);
    ((int8_t *)(uintptr_t)sdpa_kv_zero_points(f, page, value))[row] = zp;
    return false;
}

bool sdpa_int4_encode_group(const sdpa_page_format * f, void * page, int32_t row, int value, int32_t g, const float * x) {
    const int32_t D = f->dim;
    const int32_t d0 = g * SDPA_I4_GROUP, n = D - d0 < SDPA_I4_GROUP ? D - d0 : SDPA_I4_GROUP;
    void * block = block_mut(f, page, value);
    uint16_t sc, off;
    sdpa_int4_params(x, n, &sc, &off);
    const float scale = sdpa_f16_to_f32(sc), offset = sdpa_f16_to_f32(off);
    for (int32_t d = d0; d < d0 + n; d++)
        put_nibble(block, sdpa_kv_elem_index(f, row, value, d), sdpa_int4_level(x[d - d0], scale, offset));
    i4_side_mut(f, page, value, 0, g)[row] = sc;
    i4_side_mut(f, page, value, 1, g)[row] = off;
    return sc == F16_NAN;
}

bool sdpa_int4_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x) {
    bool special = false;
    for (int32_t g = 0; g < sdpa_kv_blockf(f, value)->groups; g++)
        special |= sdpa_int4_encode_group(f, page, row, value, g, x + (size_t)g * SDPA_I4_GROUP);
    return special;
}

bool sdpa_kv_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x) {
    return sdpa_dtype_traits_of(sdpa_kv_dtype(f, value))->encode_row(f, page, row, value, x);
}

/* Each dtype's decode of one element (the table's `decode`). */
float sdpa_f32_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d) {
    return ((const float *)sdpa_kv_block(f, page, value))[sdpa_kv_elem_index(f, row, value, d)];
}
float sdpa_f16_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d) {
    return sdpa_f16_to_f32(((const uint16_t *)sdpa_kv_block(f, page, value))[sdpa_kv_elem_index(f, row, value, d)]);
}
float sdpa_int8_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d) {
    const size_t at = sdpa_kv_elem_index(f, row, value, d);
    float scale;
    memcpy(&scale, sdpa_kv_scales(f, page, value) + row, sizeof scale);
    const int32_t zp = sdpa_kv_zero_points(f, page, value)[row];
    return (float)(((const int8_t *)sdpa_kv_block(f, page, value))[at] - zp) * scale;
}
float sdpa_int4_value(uint8_t q, uint16_t scale, uint16_t offset) {
    /* q * scale + offset, two float32 steps */
    const float scaled = (float)q * sdpa_f16_to_f32(scale);
    return scaled + sdpa_f16_to_f32(offset);
}
float sdpa_int4_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d) {
    const size_t at = sdpa_kv_elem_index(f, row, value, d);
    const int32_t g = d / SDPA_I4_GROUP;
    return sdpa_int4_value(get_nibble(sdpa_kv_block(f, page, value), at), load_u16(sdpa_kv_i4_scales(f, page, value, g) + row),
                           load_u16(sdpa_kv_i4_offsets(f, page, value, g) + row));
}

float sdpa_kv_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d) {
    return sdpa_dtype_traits_of(sdpa_kv_dtype(f, value))->decode(f, page, row, value, d);
}

void sdpa_kv_decode_row(const sdpa_page_format * f, const void * page, int32_t row, int value, float * out) {
    if (sdpa_kv_dtype(f, value) == SDPA_DTYPE_FLOAT32 && sdpa_kv_layout(f, value) == SDPA_LAYOUT_ROWS) {
        memcpy(out, sdpa_kv_raw_row(f, page, row, value), (size_t)f->dim * sizeof(float));
        return;
    }
    float (*decode)(const sdpa_page_format *, const void *, int32_t, int, int32_t) =
        sdpa_dtype_traits_of(sdpa_kv_dtype(f, value))->decode;
    for (int32_t d = 0; d < f->dim; d++) out[d] = decode(f, page, row, value, d);
}

/* Each dtype's side data of rows first .. ROWS-1 zeroed (the table's `clear_side`). */
void sdpa_int8_clear_side(const sdpa_page_format * f, void * page, int value, int32_t first) {
    const sdpa_block_format * bf = sdpa_kv_blockf(f, value);
    const size_t rows = (size_t)(SDPA_PAGE_ROWS - first);
    char * base = page;
    memset(base + bf->scale_offset + (size_t)first * sizeof(float), 0, rows * sizeof(float));
    memset(base + bf->zp_offset + (size_t)first, 0, rows);
}
void sdpa_int4_clear_side(const sdpa_page_format * f, void * page, int value, int32_t first) {
    const sdpa_block_format * bf = sdpa_kv_blockf(f, value);
    const size_t rows = (size_t)(SDPA_PAGE_ROWS - first);
    for (int32_t g = 0; g < bf->groups; g++) {
        memset(i4_side_mut(f, page, value, 0, g) + first, 0, rows * sizeof(uint16_t));
        memset(i4_side_mut(f, page, value, 1, g) + first, 0, rows * sizeof(uint16_t));
    }
}

void sdpa_kv_clear_rows(const sdpa_page_format * f, void * page, int32_t first) {
    const size_t rows = (size_t)(SDPA_PAGE_ROWS - first);
    for (int value = 0; value < 2; value++) {
        const sdpa_block_format * bf = sdpa_kv_blockf(f, value);
        const size_t eb = bf->elem_bytes;
        uint8_t * block = block_mut(f, page, value);
        if (bf->layout == SDPA_LAYOUT_ROWS) {
            memset(block + (size_t)first * (size_t)f->dim * eb, 0, rows * (size_t)f->dim * eb);
        } else {
            for (int32_t t = first; t < SDPA_PAGE_ROWS; t++)
                for (int32_t d = 0; d < f->dim; d++) {
                    const size_t at = sdpa_kv_elem_index(f, t, value, d);
                    if (eb == 0) put_nibble(block, at, 0);  /* two elements a byte */
                    else memset(block + at * eb, 0, eb);
                }
        }
        void (*clear_side)(const sdpa_page_format *, void *, int, int32_t) = sdpa_dtype_traits_of(bf->dtype)->clear_side;
        if (clear_side) clear_side(f, page, value, first);
    }
}
