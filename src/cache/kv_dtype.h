/* kv_dtype.h: the cache dtypes' storage traits, one table row per dtype
 * (in the style of ggml's type_traits, ggml.c): its name and number, how a
 * page stores it (element bytes, block layouts, block geometry), the exact
 * encode / decode of a row (kv_format.c) and its row record (parts, export,
 * import: kv_record.c). Storage only: which kernels read a dtype's tiles is
 * the kernels' own table (kernels/tile_sources.h, as ggml-cpu.c's
 * type_traits_cpu beside ggml.c's type_traits). The table is in kv_dtype.c;
 * every other file that needs a dtype's facts reads them here instead of
 * switching on the dtype: kv_format.c, kv_record.c, kv_state.c, kv_cache.c,
 * contract/check.c and scripts/abi.c (which carries names, numbers and
 * record parts to js/abi.js). This header includes neither codec (their
 * shared types are kv_types.h), so the codecs read the table without a
 * circle. */
#ifndef SDPA_KV_DTYPE_H
#define SDPA_KV_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/kv_types.h"

/* A block's geometry for head dim D (kv_format.c sdpa_page_format_make). */
typedef struct sdpa_block_geometry {
    int32_t units;        /* sdpa_block_format.units */
    int32_t groups;       /* sdpa_block_format.groups */
    uint64_t row_bytes;   /* bytes per page row */
    uint64_t side_bytes;  /* the block's side data per page (scales, zero points, offsets) */
    uint64_t zp_at;       /* where in the side data the zero points / offsets start */
} sdpa_block_geometry;

typedef struct sdpa_dtype_traits {
    int32_t dtype;                        /* SDPA_DTYPE_* */
    const char * name;                    /* "float32", ...: JS's name too (js/abi.js) */
    /* pages (kv_format.h) */
    size_t elem_bytes;                    /* a stored element's bytes; 0: two elements a byte (nibbles) */
    sdpa_block_layout layout[2];          /* of a K block, of a V block */
    sdpa_block_geometry (*geometry)(int value, uint64_t D);
    /* Encodes a row (kv_format.h sdpa_kv_encode_row), decodes one element (sdpa_kv_decode). */
    bool (*encode_row)(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x);
    float (*decode)(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d);
    /* Zeroes the side data of rows first .. ROWS-1 (NULL: the dtype has none). */
    void (*clear_side)(const sdpa_page_format * f, void * page, int value, int32_t first);
    /* row records (kv_record.h) */
    const sdpa_kv_record_part * record_parts;
    int32_t n_record_parts;
    void (*record_export)(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                          unsigned char * out, size_t stride);
    sdpa_record_fault (*record_import)(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                       const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite);
    /* A sentence for an import fault of this dtype (NULL: the generic one). */
    bool (*record_describe)(sdpa_record_fault fault, int32_t head_dim, const unsigned char * record, char * buf, size_t cap);
    /* a cache with float16_newest_page holds a block of this dtype as float16
     * in its newest page (int8, int4: a quantized block) */
    bool float16_page;
} sdpa_dtype_traits;

/* The cache dtypes, in sdpa_dtype number order. */
extern const sdpa_dtype_traits sdpa_dtype_table[];
extern const int32_t sdpa_dtype_count;

/* The traits of `dtype`; NULL when it is not a cache dtype. */
const sdpa_dtype_traits * sdpa_dtype_traits_of(int32_t dtype);

/* The dtype a block of `dtype` has in a float16 page: float16 for a
 * float16_page dtype, else dtype itself. */
int32_t sdpa_dtype_in_float16_page(int32_t dtype);

/* The table's dtypes as a message lists them, into buf (cap >= 1 bytes):
 * "float32, float16, int8 or int4", or with `numbers` "float32 1, float16 3,
 * int8 4, int4 5". */
void sdpa_dtype_list(char * buf, size_t cap, bool numbers);

/* ---- the entry points the table holds ----------------------------------- */

/* kv_format.c */
sdpa_block_geometry sdpa_float_geometry_f32(int value, uint64_t D);
sdpa_block_geometry sdpa_float_geometry_f16(int value, uint64_t D);
sdpa_block_geometry sdpa_int8_geometry(int value, uint64_t D);
sdpa_block_geometry sdpa_int4_geometry(int value, uint64_t D);
bool sdpa_f32_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x);
bool sdpa_f16_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x);
bool sdpa_int8_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x);
bool sdpa_int4_encode_row(const sdpa_page_format * f, void * page, int32_t row, int value, const float * x);
float sdpa_f32_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d);
float sdpa_f16_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d);
float sdpa_int8_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d);
float sdpa_int4_decode(const sdpa_page_format * f, const void * page, int32_t row, int value, int32_t d);
void sdpa_int8_clear_side(const sdpa_page_format * f, void * page, int value, int32_t first);
void sdpa_int4_clear_side(const sdpa_page_format * f, void * page, int value, int32_t first);

/* kv_record.c */
void sdpa_float_record_export(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                              unsigned char * out, size_t stride);
void sdpa_int8_record_export(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                             unsigned char * out, size_t stride);
void sdpa_int4_record_export(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                             unsigned char * out, size_t stride);
sdpa_record_fault sdpa_f32_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                         const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite);
sdpa_record_fault sdpa_f16_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                         const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite);
sdpa_record_fault sdpa_int8_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                          const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite);
sdpa_record_fault sdpa_int4_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                          const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite);
bool sdpa_int8_record_describe(sdpa_record_fault fault, int32_t head_dim, const unsigned char * record, char * buf, size_t cap);
bool sdpa_int4_record_describe(sdpa_record_fault fault, int32_t head_dim, const unsigned char * record, char * buf, size_t cap);

#endif
