/* kv_record.c: row records, the canonical stored form of a row (see
 * kv_record.h and docs/FORMAT.md): one export and one import per dtype,
 * which the dtype table (kv_dtype.c, with each dtype's record parts) holds. Pages are read and written through kv_format.h's
 * element index, so a page layout change needs nothing here; the ROWS and
 * KEY_GROUPS layouts (float32 / float16) get a strided fast path, and a
 * test (tests/c/test_state.c) holds every path to sdpa_kv_copy_raw_row. */
#include "cache/kv_record.h"
#include "cache/kv_dtype.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

#include "kernels/simd.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "row records are little-endian and copied as host values: a big-endian build needs byte swaps here"
#endif

int32_t sdpa_kv_record_block_dtype(const sdpa_page_format * f, int value) {
    return sdpa_kv_dtype(f, value);
}

static float row_scale(const sdpa_page_format * f, const void * page, int32_t row, int value) {
    float s;
    memcpy(&s, sdpa_kv_scales(f, page, value) + row, sizeof s);
    return s;
}
static int8_t row_zero_point(const sdpa_page_format * f, const void * page, int32_t row, int value) {
    return sdpa_kv_zero_points(f, page, value)[row];
}

bool sdpa_kv_record_dtype_known(int32_t dtype) { return sdpa_dtype_traits_of(dtype) != NULL; }

const char * sdpa_kv_record_dtype_name(int32_t dtype) {
    const sdpa_dtype_traits * t = sdpa_dtype_traits_of(dtype);
    return t ? t->name : "unknown";
}

/* Each dtype's record parts are its row of the dtype table (kv_dtype.c). */
const sdpa_kv_record_part * sdpa_kv_record_parts(int32_t dtype, int32_t * n_parts) {
    const sdpa_dtype_traits * t = sdpa_dtype_traits_of(dtype);
    if (n_parts) *n_parts = t ? t->n_record_parts : 0;
    return t ? t->record_parts : NULL;
}

uint64_t sdpa_kv_record_bytes(int32_t dtype, int32_t head_dim) {
    int32_t n;
    const sdpa_kv_record_part * p = sdpa_kv_record_parts(dtype, &n);
    if (head_dim < 1 || !p) return 0;
    const uint64_t D = (uint64_t)head_dim;
    uint64_t bytes = 0;
    for (int32_t i = 0; i < n; i++)
        bytes += (uint64_t)p[i].item_bytes * (p[i].span ? (D + (uint64_t)p[i].span - 1) / (uint64_t)p[i].span : 1);
    return bytes;
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
    int32_t d = 0;
    for (; d + 8 <= D; d += 8, e += 16) {  /* 8 elements of both rows: one 16-byte (de)interleave */
        if (to_page) {
            const v128_t ab = wasm_i64x2_make((int64_t)0, (int64_t)0);
            v128_t x = wasm_v128_load64_lane(a + d, ab, 0);
            x = wasm_v128_load64_lane(b + d, x, 1);
            wasm_v128_store(e, wasm_i8x16_shuffle(x, x, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15));
        } else {
            const v128_t x = wasm_v128_load(e);
            const v128_t y = wasm_i8x16_shuffle(x, x, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
            wasm_v128_store64_lane(a + d, y, 0);
            wasm_v128_store64_lane(b + d, y, 1);
        }
    }
    for (; d < D; d++, e += 2) {
        if (to_page) { e[0] = a[d]; e[1] = b[d]; } else { a[d] = e[0]; b[d] = e[1]; }
    }
}

/* int8 K (I8_KEYS): 8 rows of one key group, all their whole element pairs
 * at once. The group keeps pair p of its rows 0..7 in 16 bytes (8 x 16
 * bits), so 8 pairs of 8 rows are an 8 x 16-bit matrix to transpose (three
 * rounds of 16-bit interleaves) into 16 bytes of each row's record. True
 * when the layout is that (checked through kv_format.h's index) and it ran;
 * the pairs from (D / 2) / 8 * 8 on, and an odd D's last element, are left
 * to the caller. */
static bool key_group_layout(const sdpa_page_format * f, int32_t row, int value) {
    return sdpa_kv_layout(f, value) == SDPA_LAYOUT_I8_KEYS && row % SDPA_I8_KEY_GROUP == 0 && f->dim >= 16 &&
           sdpa_kv_elem_index(f, row + 1, value, 0) == sdpa_kv_elem_index(f, row, value, 0) + 2 &&
           sdpa_kv_elem_index(f, row, value, 2) == sdpa_kv_elem_index(f, row, value, 0) + 16 &&
           sdpa_kv_elem_index(f, row, value, 1) == sdpa_kv_elem_index(f, row, value, 0) + 1;
}

static void transpose8x16(v128_t v[8]) {
    v128_t t[8];
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 4; k++) {
            t[2 * k] = wasm_i16x8_shuffle(v[k], v[k + 4], 0, 8, 1, 9, 2, 10, 3, 11);
            t[2 * k + 1] = wasm_i16x8_shuffle(v[k], v[k + 4], 4, 12, 5, 13, 6, 14, 7, 15);
        }
        for (int k = 0; k < 8; k++) v[k] = t[k];
    }
}

/* Pairs 0 .. 8 * floor(D / 16) - 1 of rows row .. row + 7 (to_page: records -> page);
 * returns the first element not moved (the caller moves the rest of each row). */
static int32_t move_key_group(const sdpa_page_format * f, unsigned char * block, int32_t row, int value,
                              unsigned char * rec, size_t stride, bool to_page) {
    unsigned char * g = block + sdpa_kv_elem_index(f, row, value, 0);
    const int32_t blocks = f->dim / 16;
    for (int32_t q = 0; q < blocks; q++) {
        v128_t v[8];
        unsigned char * page_part = g + (size_t)q * 8 * 16, * rec_part = rec + (size_t)q * 16;
        if (to_page) {
            for (int r = 0; r < 8; r++) v[r] = wasm_v128_load(rec_part + (size_t)r * stride);
            transpose8x16(v);
            for (int p = 0; p < 8; p++) wasm_v128_store(page_part + (size_t)p * 16, v[p]);
        } else {
            for (int p = 0; p < 8; p++) v[p] = wasm_v128_load(page_part + (size_t)p * 16);
            transpose8x16(v);
            for (int r = 0; r < 8; r++) wasm_v128_store(rec_part + (size_t)r * stride, v[r]);
        }
    }
    return blocks * 16;
}

/* The elements from `from` on of one row (the tail move_key_group leaves). */
static void move_tail(const sdpa_page_format * f, unsigned char * block, int32_t row, int value, unsigned char * rec,
                      int32_t from, bool to_page) {
    for (int32_t d = from; d < f->dim; d++) {
        unsigned char * p = block + sdpa_kv_elem_index(f, row, value, d);
        if (to_page) *p = rec[d]; else rec[d] = *p;
    }
}

/* float32 / float16 K (KEY_GROUPS): R rows of one key group at once (R = 4
 * float32 or 8 float16 elements: one v128), each v128 of the page holding
 * one element of R consecutive rows; R x R blocks are transposed into (or
 * out of) the records. Returns the first element not moved (the caller
 * moves the rest). */
static bool row_group_layout(const sdpa_page_format * f, int32_t row, int value, int32_t rows) {
    return sdpa_kv_layout(f, value) == SDPA_LAYOUT_KEY_GROUPS && row % rows == 0 && f->dim >= rows &&
           SDPA_PAGE_KEY_GROUP % rows == 0 &&
           sdpa_kv_elem_index(f, row + 1, value, 0) == sdpa_kv_elem_index(f, row, value, 0) + 1 &&
           sdpa_kv_elem_index(f, row, value, 1) == sdpa_kv_elem_index(f, row, value, 0) + SDPA_PAGE_KEY_GROUP;
}

static inline void transpose4x32(v128_t v[4]) {
    const v128_t a = wasm_i32x4_shuffle(v[0], v[1], 0, 4, 1, 5), b = wasm_i32x4_shuffle(v[0], v[1], 2, 6, 3, 7);
    const v128_t c = wasm_i32x4_shuffle(v[2], v[3], 0, 4, 1, 5), d = wasm_i32x4_shuffle(v[2], v[3], 2, 6, 3, 7);
    v[0] = wasm_i64x2_shuffle(a, c, 0, 2);
    v[1] = wasm_i64x2_shuffle(a, c, 1, 3);
    v[2] = wasm_i64x2_shuffle(b, d, 0, 2);
    v[3] = wasm_i64x2_shuffle(b, d, 1, 3);
}

static void transpose8x16(v128_t v[8]);

static int32_t move_row_group(const sdpa_page_format * f, unsigned char * block, int32_t row, int value, size_t eb,
                              unsigned char * rec, size_t stride, bool to_page) {
    const int32_t R = (int32_t)(16 / eb), blocks = f->dim / R;
    const size_t G = SDPA_PAGE_KEY_GROUP;
    unsigned char * g = block + sdpa_kv_elem_index(f, row, value, 0) * eb;
    for (int32_t q = 0; q < blocks; q++) {
        v128_t v[8];
        unsigned char * page_part = g + (size_t)q * (size_t)R * G * eb, * rec_part = rec + (size_t)q * 16;
        if (to_page) {
            for (int32_t r = 0; r < R; r++) v[r] = wasm_v128_load(rec_part + (size_t)r * stride);
        } else {
            for (int32_t e = 0; e < R; e++) v[e] = wasm_v128_load(page_part + (size_t)e * G * eb);
        }
        if (R == 4) transpose4x32(v); else transpose8x16(v);
        if (to_page) {
            for (int32_t e = 0; e < R; e++) wasm_v128_store(page_part + (size_t)e * G * eb, v[e]);
        } else {
            for (int32_t r = 0; r < R; r++) wasm_v128_store(rec_part + (size_t)r * stride, v[r]);
        }
    }
    return blocks * R;
}

/* Elements from `from` on of one row, `eb` bytes each. */
static void move_tail_eb(const sdpa_page_format * f, unsigned char * block, int32_t row, int value, unsigned char * rec,
                         int32_t from, size_t eb, bool to_page) {
    for (int32_t d = from; d < f->dim; d++) {
        unsigned char * p = block + sdpa_kv_elem_index(f, row, value, d) * eb;
        if (to_page) memcpy(p, rec + (size_t)d * eb, eb); else memcpy(rec + (size_t)d * eb, p, eb);
    }
}

/* Whether a float16 record holds an Inf or a NaN (exponent all ones). */
static bool f16_record_special(const unsigned char * rec, size_t D) {
    const v128_t mask = wasm_i16x8_splat(0x7c00);
    v128_t any = wasm_i16x8_splat(0);
    size_t d = 0;
    for (; d + 8 <= D; d += 8) any = wasm_v128_or(any, wasm_i16x8_eq(wasm_v128_and(wasm_v128_load(rec + 2 * d), mask), mask));
    bool special = wasm_v128_any_true(any);
    for (; d < D; d++) {
        uint16_t h;
        memcpy(&h, rec + 2 * d, 2);
        special |= (h & 0x7c00u) == 0x7c00u;
    }
    return special;
}

static unsigned char * block_of(const sdpa_page_format * f, const void * page, int value) {
    return (unsigned char *)(uintptr_t)sdpa_kv_block(f, page, value);
}

/* ---- int4 pages: records of ceil(D/2) nibble bytes, then G float16
 * scales and G offsets. The page keeps nibbles in the layouts of kv_format.h
 * (sdpa_kv_elem_index counts nibbles there), checked through that index before
 * a fast path runs; anything else goes element by element. */

static inline uint8_t nib_get(const unsigned char * b, size_t at) { return (uint8_t)((b[at >> 1] >> ((at & 1) * 4)) & 0x0f); }
static inline void nib_put(unsigned char * b, size_t at, uint8_t q) {
    unsigned char * p = b + (at >> 1);
    *p = (unsigned char)((at & 1) ? (*p & 0x0f) | (q << 4) : (*p & 0xf0) | q);
}

/* Elements from..D-1 of one row, nibble by nibble (record element d: byte d / 2, nibble d % 2). */
static void i4_move_tail(const sdpa_page_format * f, unsigned char * block, int32_t row, int value, unsigned char * rec,
                         int32_t from, bool to_page) {
    for (int32_t d = from; d < f->dim; d++) {
        const size_t at = sdpa_kv_elem_index(f, row, value, d);
        if (to_page) nib_put(block, at, nib_get(rec, (size_t)d)); else nib_put(rec, (size_t)d, nib_get(block, at));
    }
}

/* I4_KEYS keeps elements 4k..4k+3 of a key in 2 bytes, e0 | e2 << 4 and e1 | e3 << 4 (16 bits:
 * e0 e2 e1 e3 from the low nibble up); a record has e0 | e1 << 4, e2 | e3 << 4 (e0 e1 e2 e3): the
 * same 16 bits with the middle nibbles swapped, both ways. */
static inline uint16_t swap_mid(uint16_t x) { return (uint16_t)((x & 0xf00fu) | ((x >> 4) & 0x00f0u) | ((x << 4) & 0x0f00u)); }
static inline v128_t swap_mid_v(v128_t x) {
    return wasm_v128_or(wasm_v128_and(x, wasm_i16x8_splat((int16_t)0xf00f)),
                        wasm_v128_or(wasm_v128_and(wasm_u16x8_shr(x, 4), wasm_i16x8_splat(0x00f0)),
                                     wasm_v128_and(wasm_i16x8_shl(x, 4), wasm_i16x8_splat(0x0f00))));
}
/* whether row's units are 16 bytes apart, 2 bytes each, nibbles as above (and, for `group`, the
 * next row's units 2 bytes after this row's: 8 rows of a key group interleaved) */
static bool i4_keys_layout(const sdpa_page_format * f, int32_t row, int value, bool group) {
    if (sdpa_kv_layout(f, value) != SDPA_LAYOUT_I4_KEYS || f->dim < 4) return false;
    const size_t b = sdpa_kv_elem_index(f, row, value, 0);
    if (b % 4 != 0 || sdpa_kv_elem_index(f, row, value, 1) != b + 2 || sdpa_kv_elem_index(f, row, value, 2) != b + 1 ||
        sdpa_kv_elem_index(f, row, value, 3) != b + 3 || (f->dim >= 8 && sdpa_kv_elem_index(f, row, value, 4) != b + 32))
        return false;
    return !group || (row % SDPA_I8_KEY_GROUP == 0 && f->dim >= 32 && sdpa_kv_elem_index(f, row + 1, value, 0) == b + 4);
}
/* One row's whole units (elements 0 .. 4 * floor(D / 4) - 1); returns the first element left. */
static int32_t i4_keys_row(const sdpa_page_format * f, unsigned char * block, int32_t row, int value, unsigned char * rec, bool to_page) {
    unsigned char * e = block + sdpa_kv_elem_index(f, row, value, 0) / 2;
    const int32_t units = f->dim / 4;
    for (int32_t k = 0; k < units; k++, e += 16) {
        uint16_t x;
        if (to_page) { memcpy(&x, rec + 2 * (size_t)k, 2); x = swap_mid(x); memcpy(e, &x, 2); }
        else { memcpy(&x, e, 2); x = swap_mid(x); memcpy(rec + 2 * (size_t)k, &x, 2); }
    }
    return units * 4;
}
/* Rows row .. row + 7 (a key group), 8 units (32 elements) at a time: an 8 x 16-bit transpose
 * (as int8 keys) and the nibble swap; returns the first element left. */
static int32_t i4_keys_group(const sdpa_page_format * f, unsigned char * block, int32_t row, int value, unsigned char * rec,
                             size_t stride, bool to_page) {
    unsigned char * g = block + sdpa_kv_elem_index(f, row, value, 0) / 2;
    const int32_t blocks = f->dim / 32;
    for (int32_t q = 0; q < blocks; q++) {
        v128_t v[8];
        unsigned char * page_part = g + (size_t)q * 8 * 16, * rec_part = rec + (size_t)q * 16;
        if (to_page) {
            for (int r = 0; r < 8; r++) v[r] = swap_mid_v(wasm_v128_load(rec_part + (size_t)r * stride));
            transpose8x16(v);
            for (int k = 0; k < 8; k++) wasm_v128_store(page_part + (size_t)k * 16, v[k]);
        } else {
            for (int k = 0; k < 8; k++) v[k] = wasm_v128_load(page_part + (size_t)k * 16);
            transpose8x16(v);
            for (int r = 0; r < 8; r++) wasm_v128_store(rec_part + (size_t)r * stride, swap_mid_v(v[r]));
        }
    }
    return blocks * 32;
}

/* I4_PAIRS keeps 16 elements of rows 2k and 2k + 1 in 16 bytes: byte 2j + r holds row r's element
 * j (low nibble) and j + 8 (high). Both rows' 16 elements move at once: nibbles split, shuffled
 * into record order (evens, odds), joined. */
static bool i4_pairs_layout(const sdpa_page_format * f, int32_t row, int value) {
    if (sdpa_kv_layout(f, value) != SDPA_LAYOUT_I4_PAIRS || row % 2 != 0 || row + 1 >= SDPA_PAGE_ROWS || f->dim < 16) return false;
    const size_t b = sdpa_kv_elem_index(f, row, value, 0);
    return b % 32 == 0 && sdpa_kv_elem_index(f, row + 1, value, 0) == b + 2 && sdpa_kv_elem_index(f, row, value, 1) == b + 4 &&
           sdpa_kv_elem_index(f, row, value, 8) == b + 1 && (f->dim < 32 || sdpa_kv_elem_index(f, row, value, 16) == b + 32);
}
static int32_t i4_pairs_rows(const sdpa_page_format * f, unsigned char * block, int32_t row, int value, unsigned char * a,
                             unsigned char * b, bool to_page) {
    unsigned char * e = block + sdpa_kv_elem_index(f, row, value, 0) / 2;
    const int32_t blocks = f->dim / 16;
    const v128_t nib = wasm_i8x16_splat(0x0f);
    for (int32_t q = 0; q < blocks; q++, e += 16) {
        if (to_page) {
            v128_t r = wasm_v128_load64_lane(a + 8 * (size_t)q, wasm_i64x2_splat(0), 0);
            r = wasm_v128_load64_lane(b + 8 * (size_t)q, r, 1);
            const v128_t x = wasm_v128_and(r, nib), y = wasm_v128_and(wasm_u16x8_shr(r, 4), nib);   /* evens, odds */
            const v128_t lo = wasm_i8x16_shuffle(x, y, 0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
            const v128_t hi = wasm_i8x16_shuffle(x, y, 4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31);
            wasm_v128_store(e, wasm_v128_or(lo, wasm_i16x8_shl(hi, 4)));
        } else {
            const v128_t v = wasm_v128_load(e);
            const v128_t lo = wasm_v128_and(v, nib), hi = wasm_v128_and(wasm_u16x8_shr(v, 4), nib);
            const v128_t x = wasm_i8x16_shuffle(lo, hi, 0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
            const v128_t y = wasm_i8x16_shuffle(lo, hi, 2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
            const v128_t r = wasm_v128_or(x, wasm_i16x8_shl(y, 4));
            wasm_v128_store64_lane(a + 8 * (size_t)q, r, 0);
            wasm_v128_store64_lane(b + 8 * (size_t)q, r, 1);
        }
    }
    return blocks * 16;
}

/* A row's G float16 scales and G offsets, between page and record (after its ceil(D/2) nibble bytes). */
static void i4_sides(const sdpa_page_format * f, void * page, int32_t row, int value, unsigned char * rec, bool to_page) {
    const int32_t G = sdpa_kv_blockf(f, value)->groups;
    unsigned char * side = rec + ((size_t)f->dim + 1) / 2;
    for (int32_t g = 0; g < G; g++) {
        uint16_t * sc = (uint16_t *)(uintptr_t)sdpa_kv_i4_scales(f, page, value, g) + row;
        uint16_t * of = (uint16_t *)(uintptr_t)sdpa_kv_i4_offsets(f, page, value, g) + row;
        if (to_page) { memcpy(sc, side + 2 * (size_t)g, 2); memcpy(of, side + 2 * ((size_t)G + (size_t)g), 2); }
        else { memcpy(side + 2 * (size_t)g, sc, 2); memcpy(side + 2 * ((size_t)G + (size_t)g), of, 2); }
    }
}

/* Rows first .. first + n - 1 of an int4 block, records `stride` apart (to_page: records -> page;
 * they were checked). */
static void i4_move(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value, unsigned char * rec,
                    size_t stride, bool to_page) {
    unsigned char * block = block_of(f, page, value);
    const size_t nib_bytes = ((size_t)f->dim + 1) / 2;
    for (int32_t i = 0; i < n;) {
        const int32_t row = first + i;
        unsigned char * r = rec + (size_t)i * stride;
        int32_t rows = 1, from;
        if (i + SDPA_I8_KEY_GROUP <= n && i4_keys_layout(f, row, value, true)) {
            rows = SDPA_I8_KEY_GROUP;
            from = i4_keys_group(f, block, row, value, r, stride, to_page);
        } else if (i + 2 <= n && i4_pairs_layout(f, row, value)) {
            rows = 2;
            from = i4_pairs_rows(f, block, row, value, r, r + stride, to_page);
        } else if (i4_keys_layout(f, row, value, false)) {
            from = i4_keys_row(f, block, row, value, r, to_page);
        } else {
            from = 0;
        }
        for (int32_t k = 0; k < rows; k++) {
            unsigned char * rk = r + (size_t)k * stride;
            if (!to_page && (f->dim & 1)) rk[nib_bytes - 1] = 0;   /* the pad nibble of an odd D */
            i4_move_tail(f, block, row + k, value, rk, from, to_page);
            i4_sides(f, page, row + k, value, rk, to_page);
        }
        i += rows;
    }
}

/* ---- each dtype's export (the table's `record_export`) ---------------- */

void sdpa_int4_record_export(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                             unsigned char * out, size_t stride) {
    i4_move(f, (void *)(uintptr_t)page, first, n, value, out, stride, false);  /* nibbles, then float16 scales and offsets */
}

void sdpa_float_record_export(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                              unsigned char * out, size_t stride) {
    unsigned char * block = block_of(f, page, value);
    const size_t eb = sdpa_kv_blockf(f, value)->elem_bytes;  /* float32 4, float16 2 */
    const int32_t R = (int32_t)(16 / eb);
    for (int32_t i = 0; i < n; i++, out += stride) {
        const int32_t row = first + i;
        if (i + R <= n && row_group_layout(f, row, value, R)) {
            const int32_t from = move_row_group(f, block, row, value, eb, out, stride, false);
            for (int32_t k = 0; k < R; k++) move_tail_eb(f, block, row + k, value, out + (size_t)k * stride, from, eb, false);
            i += R - 1;
            out += (size_t)(R - 1) * stride;
        } else {
            move_elems(f, block, row, value, out, eb, false);
        }
    }
}

void sdpa_int8_record_export(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                             unsigned char * out, size_t stride) {
    const size_t D = (size_t)f->dim;
    unsigned char * block = block_of(f, page, value);
    for (int32_t i = 0; i < n; i++, out += stride) {
        const int32_t row = first + i;
        if (i + SDPA_I8_KEY_GROUP <= n && key_group_layout(f, row, value)) {
            const int32_t from = move_key_group(f, block, row, value, out, stride, false);
            for (int32_t k = 0; k < SDPA_I8_KEY_GROUP; k++) {
                unsigned char * o = out + (size_t)k * stride;
                move_tail(f, block, row + k, value, o, from, false);
                const float scale = row_scale(f, page, row + k, value);
                memcpy(o + D, &scale, 4);
                o[D + 4] = (unsigned char)row_zero_point(f, page, row + k, value);
            }
            i += SDPA_I8_KEY_GROUP - 1;
            out += (size_t)(SDPA_I8_KEY_GROUP - 1) * stride;
            continue;
        }
        const bool pair = i + 1 < n && paired_rows(f, row, value);
        if (pair) move_row_pair(f, block, row, value, out, out + stride, false);
        else move_elems(f, block, row, value, out, 1, false);
        for (int32_t k = 0; k <= (int32_t)pair; k++) {
            const float scale = row_scale(f, page, row + k, value);
            memcpy(out + (size_t)k * stride + D, &scale, 4);
            out[(size_t)k * stride + D + 4] = (unsigned char)row_zero_point(f, page, row + k, value);
        }
        if (pair) { i++; out += stride; }
    }
}

void sdpa_kv_record_export(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                           unsigned char * out, size_t stride) {
    sdpa_dtype_traits_of(sdpa_kv_record_block_dtype(f, value))->record_export(f, page, first, n, value, out, stride);
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

/* ---- each dtype's import (the table's `record_import`) ---------------- */

sdpa_record_fault sdpa_int4_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                          const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite) {
    /* any float16 bits (an Inf or NaN marks the page); an odd D's pad nibble 0 */
    const size_t D = (size_t)f->dim;
    const int32_t G = sdpa_kv_blockf(f, value)->groups;
    const size_t nib_bytes = (D + 1) / 2;
    for (int32_t i = 0; i < n; i++) {
        const unsigned char * r = in + (size_t)i * stride;
        if ((D & 1) && (r[nib_bytes - 1] >> 4) != 0) {
            *bad_row = i;
            return SDPA_RECORD_BAD_PAD;
        }
        for (int32_t g = 0; g < 2 * G; g++) {
            uint16_t h;
            memcpy(&h, r + nib_bytes + 2 * (size_t)g, 2);
            *nonfinite |= (h & 0x7c00u) == 0x7c00u;
        }
    }
    i4_move(f, page, first, n, value, (unsigned char *)(uintptr_t)in, stride, true);
    return SDPA_RECORD_OK;
}

sdpa_record_fault sdpa_f32_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                         const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite) {
    (void)bad_row;
    (void)nonfinite;
    unsigned char * block = block_of(f, page, value);
    for (int32_t i = 0; i < n; i++, in += stride) {
        const int32_t row = first + i;
        unsigned char * rec = (unsigned char *)(uintptr_t)in;  /* read only: move_elems copies to the page */
        if (i + 4 <= n && row_group_layout(f, row, value, 4)) {
            const int32_t from = move_row_group(f, block, row, value, 4, rec, stride, true);
            for (int32_t k = 0; k < 4; k++) move_tail_eb(f, block, row + k, value, rec + (size_t)k * stride, from, 4, true);
            i += 3;
            in += 3 * stride;
        } else {
            move_elems(f, block, row, value, rec, 4, true);
        }
    }
    return SDPA_RECORD_OK;
}

sdpa_record_fault sdpa_f16_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                         const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite) {
    (void)bad_row;
    const size_t D = (size_t)f->dim;
    unsigned char * block = block_of(f, page, value);
    for (int32_t i = 0; i < n; i++, in += stride) {
        const int32_t row = first + i;
        unsigned char * rec = (unsigned char *)(uintptr_t)in;  /* read only: move_elems copies to the page */
        if (i + 8 <= n && row_group_layout(f, row, value, 8)) {
            for (int32_t k = 0; k < 8; k++) *nonfinite |= f16_record_special(in + (size_t)k * stride, D);
            const int32_t from = move_row_group(f, block, row, value, 2, rec, stride, true);
            for (int32_t k = 0; k < 8; k++) move_tail_eb(f, block, row + k, value, rec + (size_t)k * stride, from, 2, true);
            i += 7;
            in += 7 * stride;
            continue;
        }
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
            special = f16_record_special(in, D);
            move_elems(f, block, row, value, rec, 2, true);
        }
        *nonfinite |= special != 0;
    }
    return SDPA_RECORD_OK;
}

sdpa_record_fault sdpa_int8_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                          const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite) {
    (void)nonfinite;
    const size_t D = (size_t)f->dim;
    unsigned char * block = block_of(f, page, value);
    for (int32_t i = 0; i < n; i++, in += stride) {
        const int32_t row = first + i;
        unsigned char * rec = (unsigned char *)(uintptr_t)in;  /* read only: move_elems copies to the page */
        if (i + SDPA_I8_KEY_GROUP <= n && key_group_layout(f, row, value)) {
            for (int32_t k = 0; k < SDPA_I8_KEY_GROUP; k++) {
                if (!int8_record_ok(in + (size_t)k * stride, D)) {
                    *bad_row = i + k;
                    return SDPA_RECORD_BAD_SCALE;
                }
            }
            const int32_t from = move_key_group(f, block, row, value, rec, stride, true);
            for (int32_t k = 0; k < SDPA_I8_KEY_GROUP; k++) {
                unsigned char * r = rec + (size_t)k * stride;
                move_tail(f, block, row + k, value, r, from, true);
                memcpy((unsigned char *)(uintptr_t)sdpa_kv_scales(f, page, value) + (size_t)(row + k) * 4, r + D, 4);
                ((int8_t *)(uintptr_t)sdpa_kv_zero_points(f, page, value))[row + k] = (int8_t)r[D + 4];
            }
            i += SDPA_I8_KEY_GROUP - 1;
            in += (size_t)(SDPA_I8_KEY_GROUP - 1) * stride;
            continue;
        }
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
    }
    return SDPA_RECORD_OK;
}

sdpa_record_fault sdpa_kv_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                        const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite) {
    return sdpa_dtype_traits_of(sdpa_kv_record_block_dtype(f, value))->record_import(f, page, first, n, value, in, stride,
                                                                                     bad_row, nonfinite);
}

/* ---- int4 records of format versions 1 and 2 (32-element groups) ------- */

static bool int4_v2_differs(int32_t dtype, int32_t head_dim) {
    return dtype == SDPA_DTYPE_INT4 && (head_dim + SDPA_I4_V2_GROUP - 1) / SDPA_I4_V2_GROUP != (head_dim + SDPA_I4_GROUP - 1) / SDPA_I4_GROUP;
}

uint64_t sdpa_kv_record_bytes_of_version(uint32_t version, int32_t dtype, int32_t head_dim) {
    if (version >= 3 || !int4_v2_differs(dtype, head_dim)) return sdpa_kv_record_bytes(dtype, head_dim);
    const uint64_t D = (uint64_t)head_dim;
    return (D + 1) / 2 + 4 * ((D + SDPA_I4_V2_GROUP - 1) / SDPA_I4_V2_GROUP);
}

static sdpa_record_fault int4_v2_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                               const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite) {
    const int32_t D = f->dim, G2 = (D + SDPA_I4_V2_GROUP - 1) / SDPA_I4_V2_GROUP, G = sdpa_kv_blockf(f, value)->groups;
    const size_t nib_bytes = ((size_t)D + 1) / 2;
    float x[SDPA_I4_GROUP];
    for (int32_t i = 0; i < n; i++) {
        const unsigned char * r = in + (size_t)i * stride;
        if ((D & 1) && (r[nib_bytes - 1] >> 4) != 0) {
            *bad_row = i;
            return SDPA_RECORD_BAD_PAD;
        }
        for (int32_t g = 0; g < G; g++) {
            const int32_t d0 = g * SDPA_I4_GROUP, d1 = d0 + SDPA_I4_GROUP < D ? d0 + SDPA_I4_GROUP : D;
            for (int32_t d = d0; d < d1; d++) {
                const size_t g2 = (size_t)(d / SDPA_I4_V2_GROUP);
                uint16_t sc, off;
                memcpy(&sc, r + nib_bytes + 2 * g2, 2);
                memcpy(&off, r + nib_bytes + 2 * ((size_t)G2 + g2), 2);
                x[d - d0] = sdpa_int4_value(nib_get(r, (size_t)d), sc, off);
            }
            *nonfinite |= sdpa_int4_encode_group(f, page, first + i, value, g, x);
        }
    }
    return SDPA_RECORD_OK;
}

sdpa_record_fault sdpa_kv_record_import_of_version(uint32_t version, const sdpa_page_format * f, void * page, int32_t first,
                                                   int32_t n, int value, const unsigned char * in, size_t stride,
                                                   int32_t * bad_row, bool * nonfinite) {
    if (version < 3 && int4_v2_differs(sdpa_kv_record_block_dtype(f, value), f->dim))
        return int4_v2_record_import(f, page, first, n, value, in, stride, bad_row, nonfinite);
    return sdpa_kv_record_import(f, page, first, n, value, in, stride, bad_row, nonfinite);
}

/* Each dtype's sentence for its faults (the table's `record_describe`): false for another fault. */
bool sdpa_int8_record_describe(sdpa_record_fault fault, int32_t head_dim, const unsigned char * record, char * buf, size_t cap) {
    if (fault != SDPA_RECORD_BAD_SCALE || head_dim <= 0) return false;
    const uint32_t u = f32_bits(record + head_dim);
    float s;
    memcpy(&s, &u, 4);
    snprintf(buf, cap, "its int8 scale is %g (bits 0x%08x); expected a finite scale >= %g (FLT_EPSILON), +Infinity, "
             "or 0 with a zero point and values of 0 (an unwritten row)", (double)s, (unsigned)u, (double)FLT_EPSILON);
    return true;
}
bool sdpa_int4_record_describe(sdpa_record_fault fault, int32_t head_dim, const unsigned char * record, char * buf, size_t cap) {
    if (fault != SDPA_RECORD_BAD_PAD || head_dim <= 0) return false;
    snprintf(buf, cap, "the unused high nibble of its last byte (head dim %d is odd) is %u; expected 0",
             head_dim, (unsigned)(record[head_dim / 2] >> 4));
    return true;
}

void sdpa_kv_record_describe(sdpa_record_fault fault, int32_t dtype, int32_t head_dim, const unsigned char * record,
                             char * buf, size_t cap) {
    const sdpa_dtype_traits * t = sdpa_dtype_traits_of(dtype);
    if (t && t->record_describe && t->record_describe(fault, head_dim, record, buf, cap)) return;
    snprintf(buf, cap, "it is not a valid %s record", sdpa_kv_record_dtype_name(dtype));
}
