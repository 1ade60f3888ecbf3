/* kv_record.c: row records, the canonical stored form of a row (see
 * kv_record.h and docs/FORMAT.md). The only place that knows a record's
 * bytes per dtype. Pages are read and written through kv_format.h's
 * element index, so a page layout change needs nothing here; the ROWS and
 * KEY_GROUPS layouts (float32 / float16) get a strided fast path, and a
 * test (tests/c/test_state.c) holds every path to sdpa_kv_copy_raw_row. */
#include "cache/kv_record.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "row records are little-endian and copied as host values: a big-endian build needs byte swaps here"
#endif

int32_t sdpa_kv_record_block_dtype(const sdpa_page_format * f, int value) {
    (void)value;  /* issue 19: K and V blocks get their own dtypes */
    return f->dtype;
}

bool sdpa_kv_record_dtype_known(int32_t dtype) {
    return dtype == SDPA_DTYPE_FLOAT32 || dtype == SDPA_DTYPE_FLOAT16 || dtype == SDPA_DTYPE_INT8 ||
           dtype == 5 /* int4 (issue 19) */;
}

const char * sdpa_kv_record_dtype_name(int32_t dtype) {
    switch (dtype) {
        case SDPA_DTYPE_FLOAT32: return "float32";
        case SDPA_DTYPE_FLOAT16: return "float16";
        case SDPA_DTYPE_INT8: return "int8";
        case 5: return "int4";
        default: return "unknown";
    }
}

uint64_t sdpa_kv_record_bytes(int32_t dtype, int32_t head_dim) {
    if (head_dim < 1) return 0;
    const uint64_t D = (uint64_t)head_dim;
    switch (dtype) {
        case SDPA_DTYPE_FLOAT32: return 4 * D;
        case SDPA_DTYPE_FLOAT16: return 2 * D;
        case SDPA_DTYPE_INT8: return D + 5;
        /* int4 (issue 19): (D + 1) / 2 + 4 * ((D + 31) / 32), once its pages exist */
        default: return 0;
    }
}

/* Element d of row t is at base + d * step for these layouts (kv_format.h);
 * I8_KEYS keeps pairs: base + (d / 2) * pair_step + d % 2. */
static bool affine_layout(sdpa_block_layout l) {
    return l == SDPA_LAYOUT_ROWS || l == SDPA_LAYOUT_KEY_GROUPS || l == SDPA_LAYOUT_I8_PAIRS;
}

/* The loops of move_elems, one per element size and direction (the compiler
 * keeps the element moves as plain loads and stores). */
#define MOVE_AFFINE(TYPE, TO_PAGE)                                                       \
    do {                                                                                 \
        TYPE * e_ = (TYPE *)(void *)(block + base * sizeof(TYPE));                       \
        for (int32_t d = 0; d < D; d++) {                                                \
            TYPE v_;                                                                     \
            if (TO_PAGE) { memcpy(&v_, rec + (size_t)d * sizeof(TYPE), sizeof(TYPE)); e_[(size_t)d * step] = v_; } \
            else { v_ = e_[(size_t)d * step]; memcpy(rec + (size_t)d * sizeof(TYPE), &v_, sizeof(TYPE)); }        \
        }                                                                                \
    } while (0)

/* Copies D elements of `eb` bytes between a page row and a record (to_page: record -> page). */
static void move_elems(const sdpa_page_format * f, unsigned char * block, int32_t row, int value,
                       unsigned char * rec, size_t eb, bool to_page) {
    const int32_t D = f->dim;
    const sdpa_block_layout layout = sdpa_kv_layout(f, value);
    const size_t base = sdpa_kv_elem_index(f, row, value, 0);
    if (layout == SDPA_LAYOUT_ROWS) {
        unsigned char * p = block + base * eb;
        if (to_page) memcpy(p, rec, (size_t)D * eb); else memcpy(rec, p, (size_t)D * eb);
        return;
    }
    if (affine_layout(layout) && D > 1) {
        const size_t step = sdpa_kv_elem_index(f, row, value, 1) - base;
        if (eb == 4) { if (to_page) MOVE_AFFINE(uint32_t, 1); else MOVE_AFFINE(uint32_t, 0); return; }
        if (eb == 2) { if (to_page) MOVE_AFFINE(uint16_t, 1); else MOVE_AFFINE(uint16_t, 0); return; }
        if (eb == 1) { if (to_page) MOVE_AFFINE(uint8_t, 1); else MOVE_AFFINE(uint8_t, 0); return; }
    }
    if (layout == SDPA_LAYOUT_I8_KEYS && eb == 1 && D > 2) {
        const size_t pair_step = sdpa_kv_elem_index(f, row, value, 2) - base;
        unsigned char * e = block + base;
        int32_t d = 0;
        for (; d + 1 < D; d += 2, e += pair_step) {
            if (to_page) memcpy(e, rec + d, 2); else memcpy(rec + d, e, 2);
        }
        if (d < D) { if (to_page) e[0] = rec[d]; else rec[d] = e[0]; }
        return;
    }
    for (int32_t d = 0; d < D; d++) {
        unsigned char * p = block + sdpa_kv_elem_index(f, row, value, d) * eb;
        if (to_page) memcpy(p, rec + (size_t)d * eb, eb); else memcpy(rec + (size_t)d * eb, p, eb);
    }
}

/* I8_PAIRS (int8 V) keeps rows 2k and 2k + 1 interleaved byte by byte: when
 * `row` is even and row + 1 follows it that way, both rows move together,
 * one 16-bit element pair at a time (recs[0] row, recs[1] row + 1). */
static bool paired_rows(const sdpa_page_format * f, int32_t row, int value) {
    return sdpa_kv_layout(f, value) == SDPA_LAYOUT_I8_PAIRS && row % 2 == 0 && row + 1 < SDPA_PAGE_ROWS &&
           sdpa_kv_elem_index(f, row + 1, value, 0) == sdpa_kv_elem_index(f, row, value, 0) + 1 &&
           (f->dim < 2 || sdpa_kv_elem_index(f, row, value, 1) == sdpa_kv_elem_index(f, row, value, 0) + 2);
}
static void move_row_pair(const sdpa_page_format * f, unsigned char * block, int32_t row, int value,
                          unsigned char * a, unsigned char * b, bool to_page) {
    unsigned char * e = block + sdpa_kv_elem_index(f, row, value, 0);
    const int32_t D = f->dim;
    for (int32_t d = 0; d < D; d++, e += 2) {
        if (to_page) { e[0] = a[d]; e[1] = b[d]; } else { a[d] = e[0]; b[d] = e[1]; }
    }
}

static unsigned char * block_of(const sdpa_page_format * f, const void * page, int value) {
    return (unsigned char *)(uintptr_t)sdpa_kv_block(f, page, value);
}

void sdpa_kv_record_export(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                           unsigned char * out, size_t stride) {
    const int32_t dtype = sdpa_kv_record_block_dtype(f, value);
    const size_t D = (size_t)f->dim;
    unsigned char * block = block_of(f, page, value);
    for (int32_t i = 0; i < n; i++, out += stride) {
        const int32_t row = first + i;
        switch (dtype) {
            case SDPA_DTYPE_FLOAT32: move_elems(f, block, row, value, out, 4, false); break;
            case SDPA_DTYPE_FLOAT16: move_elems(f, block, row, value, out, 2, false); break;
            default: {  /* int8 */
                const bool pair = i + 1 < n && paired_rows(f, row, value);
                if (pair) move_row_pair(f, block, row, value, out, out + stride, false);
                else move_elems(f, block, row, value, out, 1, false);
                for (int32_t k = 0; k <= (int32_t)pair; k++) {
                    const float scale = sdpa_kv_row_scale(f, page, row + k, value);
                    memcpy(out + (size_t)k * stride + D, &scale, 4);
                    out[(size_t)k * stride + D + 4] = (unsigned char)sdpa_kv_row_zero_point(f, page, row + k, value);
                }
                if (pair) { i++; out += stride; }
                break;
            }
        }
    }
}

static uint32_t f32_bits(const unsigned char * p) { uint32_t u; memcpy(&u, p, 4); return u; }

/* An int8 record's scale: one an encoder makes (sdpa_quantize_params: finite
 * >= FLT_EPSILON, or +Inf when hi - lo overflows), or the all-zero record
 * of an unwritten row (what the zero page holds). */
static bool int8_record_ok(const unsigned char * rec, size_t D) {
    const uint32_t u = f32_bits(rec + D);
    float eps = FLT_EPSILON;
    uint32_t eps_bits;
    memcpy(&eps_bits, &eps, 4);
    if (u >= eps_bits && u <= 0x7f800000u) return true;  /* positive: bits order as values; up to +Inf */
    if (u != 0 || rec[D + 4] != 0) return false;
    for (size_t d = 0; d < D; d++)
        if (rec[d] != 0) return false;
    return true;
}

sdpa_record_fault sdpa_kv_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                        const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite) {
    const int32_t dtype = sdpa_kv_record_block_dtype(f, value);
    const size_t D = (size_t)f->dim;
    unsigned char * block = block_of(f, page, value);
    for (int32_t i = 0; i < n; i++, in += stride) {
        const int32_t row = first + i;
        unsigned char * rec = (unsigned char *)(uintptr_t)in;  /* read only: move_elems copies to the page */
        switch (dtype) {
            case SDPA_DTYPE_FLOAT32: move_elems(f, block, row, value, rec, 4, true); break;
            case SDPA_DTYPE_FLOAT16: {
                const sdpa_block_layout layout = sdpa_kv_layout(f, value);
                uint32_t special = 0;
                if (affine_layout(layout) && D > 1) {  /* move and look for Inf / NaN (exponent all ones) in one pass */
                    const size_t base = sdpa_kv_elem_index(f, row, value, 0), step = sdpa_kv_elem_index(f, row, value, 1) - base;
                    uint16_t * e = (uint16_t *)(void *)(block + base * 2);
                    for (size_t d = 0; d < D; d++) {
                        uint16_t h;
                        memcpy(&h, in + 2 * d, 2);
                        special |= (uint32_t)((h & 0x7c00u) == 0x7c00u);
                        e[d * step] = h;
                    }
                } else {
                    for (size_t d = 0; d < D; d++) {
                        uint16_t h;
                        memcpy(&h, in + 2 * d, 2);
                        special |= (uint32_t)((h & 0x7c00u) == 0x7c00u);
                    }
                    move_elems(f, block, row, value, rec, 2, true);
                }
                *nonfinite |= special != 0;
                break;
            }
            default: {  /* int8 */
                const bool pair = i + 1 < n && paired_rows(f, row, value);
                for (int32_t k = 0; k <= (int32_t)pair; k++) {
                    if (!int8_record_ok(in + (size_t)k * stride, D)) {
                        *bad_row = i + k;
                        return SDPA_RECORD_BAD_SCALE;
                    }
                }
                if (pair) move_row_pair(f, block, row, value, rec, rec + stride, true);
                else move_elems(f, block, row, value, rec, 1, true);
                for (int32_t k = 0; k <= (int32_t)pair; k++) {
                    const unsigned char * r = in + (size_t)k * stride;
                    memcpy((unsigned char *)(uintptr_t)sdpa_kv_scales(f, page, value) + (size_t)(row + k) * 4, r + D, 4);
                    ((int8_t *)(uintptr_t)sdpa_kv_zero_points(f, page, value))[row + k] = (int8_t)r[D + 4];
                }
                if (pair) { i++; in += stride; }
                break;
            }
        }
    }
    return SDPA_RECORD_OK;
}

void sdpa_kv_record_describe(sdpa_record_fault fault, int32_t dtype, int32_t head_dim, const unsigned char * record,
                             char * buf, size_t cap) {
    if (fault == SDPA_RECORD_BAD_SCALE && dtype == SDPA_DTYPE_INT8 && head_dim > 0) {
        const uint32_t u = f32_bits(record + head_dim);
        float s;
        memcpy(&s, &u, 4);
        snprintf(buf, cap, "its int8 scale is %g (bits 0x%08x); expected a finite scale >= %g (FLT_EPSILON), +Infinity, "
                 "or 0 with a zero point and values of 0 (an unwritten row)", (double)s, (unsigned)u, (double)FLT_EPSILON);
        return;
    }
    snprintf(buf, cap, "it is not a valid %s record", sdpa_kv_record_dtype_name(dtype));
}
