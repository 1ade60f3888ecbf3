/* kv_format.c: page layouts and the exact row codecs (see kv_format.h). */
#include "cache/kv_format.h"

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

uint64_t sdpa_page_format_make(sdpa_page_format * f, int32_t dtype, int32_t head_dim) {
    memset(f, 0, sizeof *f);
    const uint64_t rows = SDPA_PAGE_ROWS, D = (uint64_t)(head_dim > 0 ? head_dim : 0);
    uint64_t elem;
    switch (dtype) {
        case SDPA_DTYPE_FLOAT32: elem = 4; break;
        case SDPA_DTYPE_FLOAT16: elem = 2; break;
        case SDPA_DTYPE_INT8: elem = 1; break;
        default: return 0;
    }
    /* an int8 K block pads D to even (I8_KEYS) */
    const uint64_t k_block = rows * (dtype == SDPA_DTYPE_INT8 ? (D + 1) / 2 * 2 : D) * elem;  /* < 2^40: no wrap */
    uint64_t bytes = k_block + rows * D * elem;
    uint64_t scale_offset = 0, zp_offset = 0;
    if (dtype == SDPA_DTYPE_INT8) {
        scale_offset = bytes;
        zp_offset = scale_offset + 2 * rows * sizeof(float);
        bytes = zp_offset + 2 * rows;
    }
    bytes = (bytes + 63) & ~(uint64_t)63;
    if (bytes > SDPA_MAX_PAGE_BYTES) return bytes;
    f->dtype = dtype;
    f->dim = head_dim;
    f->elem_bytes = (size_t)elem;
    f->k_layout = dtype == SDPA_DTYPE_INT8 ? SDPA_LAYOUT_I8_KEYS : SDPA_LAYOUT_KEY_GROUPS;
    f->v_layout = dtype == SDPA_DTYPE_INT8 ? SDPA_LAYOUT_I8_PAIRS : SDPA_LAYOUT_ROWS;
    f->k_pairs = (int32_t)((D + 1) / 2);
    f->v_offset = (size_t)k_block;
    f->scale_offset = (size_t)scale_offset;
    f->zp_offset = (size_t)zp_offset;
    f->page_bytes = (size_t)bytes;
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

_Static_assert(SDPA_PAGE_ROWS % SDPA_PAGE_KEY_GROUP == 0 && SDPA_PAGE_ROWS % SDPA_I8_KEY_GROUP == 0,
               "a page holds whole key groups");

const void * sdpa_kv_raw_row(const sdpa_page_format * f, const void * page, int32_t row, int value) {
    return (const char *)sdpa_kv_block(f, page, value) + (size_t)row * (size_t)f->dim * f->elem_bytes;
}

void sdpa_kv_copy_raw_row(const sdpa_page_format * f, const void * page, int32_t row, int value, void * out) {
    const size_t eb = f->elem_bytes;
    if (sdpa_kv_layout(f, value) == SDPA_LAYOUT_ROWS) {
        memcpy(out, sdpa_kv_raw_row(f, page, row, value), (size_t)f->dim * eb);
        return;
    }
    const char * block = sdpa_kv_block(f, page, value);
    for (int32_t d = 0; d < f->dim; d++)
        memcpy((char *)out + (size_t)d * eb, block + sdpa_kv_elem_index(f, row, value, d) * eb, eb);
}

void sdpa_kv_clear_rows(const sdpa_page_format * f, void * page, int32_t first) {
    const size_t rows = (size_t)(SDPA_PAGE_ROWS - first), eb = f->elem_bytes;
    char * base = page;
    for (int value = 0; value < 2; value++) {
        char * block = (char *)(uintptr_t)sdpa_kv_block(f, page, value);
        if (sdpa_kv_layout(f, value) == SDPA_LAYOUT_ROWS) {
            memset(block + (size_t)first * (size_t)f->dim * eb, 0, rows * (size_t)f->dim * eb);
        } else {
            for (int32_t t = first; t < SDPA_PAGE_ROWS; t++)
                for (int32_t d = 0; d < f->dim; d++) memset(block + sdpa_kv_elem_index(f, t, value, d) * eb, 0, eb);
        }
        if (f->dtype == SDPA_DTYPE_INT8) {
            memset(base + f->scale_offset + ((value ? SDPA_PAGE_ROWS : 0) + (size_t)first) * sizeof(float), 0, rows * sizeof(float));
            memset(base + f->zp_offset + (value ? SDPA_PAGE_ROWS : 0) + (size_t)first, 0, rows);
        }
    }
}

float sdpa_kv_row_scale(const sdpa_page_format * f, const void * page, int32_t row, int value) {
    float s;
    memcpy(&s, sdpa_kv_scales(f, page, value) + row, sizeof s);
    return s;
}

int8_t sdpa_kv_row_zero_point(const sdpa_page_format * f, const void * page, int32_t row, int value) {
    return sdpa_kv_zero_points(f, page, value)[row];
}

bool sdpa_kv_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x) {
    const int32_t D = f->dim;
    void * block = (void *)(uintptr_t)sdpa_kv_block(f, page, value);
    uint32_t special = 0;
    switch (f->dtype) {
        case SDPA_DTYPE_FLOAT32:
            if (sdpa_kv_layout(f, value) == SDPA_LAYOUT_ROWS) {  /* V: one contiguous row (a decode step's write) */
                memcpy((float *)block + (size_t)row * (size_t)D, x, (size_t)D * sizeof(float));
                break;
            }
            for (int32_t d = 0; d < D; d++) ((float *)block)[sdpa_kv_elem_index(f, row, value, d)] = x[d];
            break;
        case SDPA_DTYPE_FLOAT16:
            for (int32_t d = 0; d < D; d++) {
                const uint16_t h = sdpa_f32_to_f16(x[d]);
                ((uint16_t *)block)[sdpa_kv_elem_index(f, row, value, d)] = h;
                special |= (h & 0x7c00u) == 0x7c00u;  /* Inf or NaN */
            }
            break;
        default: {
            float scale;
            int8_t zp;
            sdpa_quantize_params(x, D, &scale, &zp);
            const float inv = 1.0f / scale;
            for (int32_t d = 0; d < D; d++)
                ((int8_t *)block)[sdpa_kv_elem_index(f, row, value, d)] = sdpa_quantize_value(x[d], inv, zp);
            memcpy((float *)(uintptr_t)sdpa_kv_scales(f, page, value) + row, &scale, sizeof scale);
            ((int8_t *)(uintptr_t)sdpa_kv_zero_points(f, page, value))[row] = zp;
            break;
        }
    }
    return special != 0;
}

float sdpa_kv_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d) {
    const void * block = sdpa_kv_block(f, page, value);
    const size_t at = sdpa_kv_elem_index(f, row, value, d);
    switch (f->dtype) {
        case SDPA_DTYPE_FLOAT32: return ((const float *)block)[at];
        case SDPA_DTYPE_FLOAT16: return sdpa_f16_to_f32(((const uint16_t *)block)[at]);
        default: {
            const float scale = sdpa_kv_row_scale(f, page, row, value);
            const int32_t zp = sdpa_kv_row_zero_point(f, page, row, value);
            return (float)(((const int8_t *)block)[at] - zp) * scale;
        }
    }
}

void sdpa_kv_decode_row(const sdpa_page_format * f, const void * page, int32_t row, int value, float * out) {
    if (f->dtype == SDPA_DTYPE_FLOAT32 && sdpa_kv_layout(f, value) == SDPA_LAYOUT_ROWS) {
        memcpy(out, sdpa_kv_raw_row(f, page, row, value), (size_t)f->dim * sizeof(float));
        return;
    }
    for (int32_t d = 0; d < f->dim; d++) out[d] = sdpa_kv_decode(f, page, row, value, d);
}
