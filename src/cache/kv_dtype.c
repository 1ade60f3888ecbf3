/* kv_dtype.c: the cache dtype table, storage only (kv_dtype.h says what
 * each column is and who reads it). One row per dtype, in sdpa_dtype number
 * order; adding a dtype adds a row here, its codec (kv_format.c) and record
 * functions (kv_record.c), and, if it has kernels of its own, its row of the
 * kernel table (kernels/tile_sources.c). */
#include "cache/kv_dtype.h"

#include <stdio.h>
#include <string.h>

/* Each dtype's row record, part by part in record order (kv_record.h). */
static const sdpa_kv_record_part F32_PARTS[] = { { "data", "float32", sizeof(float), 1 } };
static const sdpa_kv_record_part F16_PARTS[] = { { "data", "uint16", sizeof(uint16_t), 1 } };
static const sdpa_kv_record_part I8_PARTS[] = {
    { "data", "int8", sizeof(int8_t), 1 },
    { "scales", "float32", sizeof(float), 0 },
    { "zeroPoints", "int8", sizeof(int8_t), 0 },
};
static const sdpa_kv_record_part I4_PARTS[] = {
    { "data", "uint8", sizeof(uint8_t), 2 },  /* two nibbles a byte */
    { "scales", "uint16", sizeof(uint16_t), SDPA_I4_GROUP },
    { "offsets", "uint16", sizeof(uint16_t), SDPA_I4_GROUP },
};
#define PARTS(a) a, (int32_t)(sizeof a / sizeof a[0])

const sdpa_dtype_traits sdpa_dtype_table[] = {
    {
        .dtype = SDPA_DTYPE_FLOAT32, .name = "float32",
        .elem_bytes = 4, .layout = { SDPA_LAYOUT_KEY_GROUPS, SDPA_LAYOUT_ROWS },
        .geometry = sdpa_float_geometry_f32, .encode_row = sdpa_f32_encode_row, .decode = sdpa_f32_decode,
        .clear_side = NULL,
        .record_parts = PARTS(F32_PARTS),
        .record_export = sdpa_float_record_export, .record_import = sdpa_f32_record_import, .record_describe = NULL,
    },
    {
        .dtype = SDPA_DTYPE_FLOAT16, .name = "float16",
        .elem_bytes = 2, .layout = { SDPA_LAYOUT_KEY_GROUPS, SDPA_LAYOUT_ROWS },
        .geometry = sdpa_float_geometry_f16, .encode_row = sdpa_f16_encode_row, .decode = sdpa_f16_decode,
        .clear_side = NULL,
        .record_parts = PARTS(F16_PARTS),
        .record_export = sdpa_float_record_export, .record_import = sdpa_f16_record_import, .record_describe = NULL,
    },
    {
        .dtype = SDPA_DTYPE_INT8, .name = "int8",
        .elem_bytes = 1, .layout = { SDPA_LAYOUT_I8_KEYS, SDPA_LAYOUT_I8_PAIRS },
        .geometry = sdpa_int8_geometry, .encode_row = sdpa_int8_encode_row, .decode = sdpa_int8_decode,
        .clear_side = sdpa_int8_clear_side,
        .record_parts = PARTS(I8_PARTS),
        .record_export = sdpa_int8_record_export, .record_import = sdpa_int8_record_import,
        .record_describe = sdpa_int8_record_describe,
        .float16_page = true,
    },
    {
        .dtype = SDPA_DTYPE_INT4, .name = "int4",
        .elem_bytes = 0, .layout = { SDPA_LAYOUT_I4_KEYS, SDPA_LAYOUT_I4_PAIRS },
        .geometry = sdpa_int4_geometry, .encode_row = sdpa_int4_encode_row, .decode = sdpa_int4_decode,
        .clear_side = sdpa_int4_clear_side,
        .record_parts = PARTS(I4_PARTS),
        .record_export = sdpa_int4_record_export, .record_import = sdpa_int4_record_import,
        .record_describe = sdpa_int4_record_describe,
        .float16_page = true,
    },
};
#undef PARTS
const int32_t sdpa_dtype_count = (int32_t)(sizeof sdpa_dtype_table / sizeof sdpa_dtype_table[0]);

const sdpa_dtype_traits * sdpa_dtype_traits_of(int32_t dtype) {
    for (int32_t i = 0; i < sdpa_dtype_count; i++)
        if (sdpa_dtype_table[i].dtype == dtype) return &sdpa_dtype_table[i];
    return NULL;
}

int32_t sdpa_dtype_in_float16_page(int32_t dtype) {
    const sdpa_dtype_traits * t = sdpa_dtype_traits_of(dtype);
    return t && t->float16_page ? SDPA_DTYPE_FLOAT16 : dtype;
}

void sdpa_dtype_list(char * buf, size_t cap, bool numbers) {
    size_t at = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < sdpa_dtype_count && at < cap; i++) {
        const sdpa_dtype_traits * t = &sdpa_dtype_table[i];
        const char * sep = i == 0 ? "" : i == sdpa_dtype_count - 1 && !numbers ? " or " : ", ";
        const int n = numbers ? snprintf(buf + at, cap - at, "%s%s %d", sep, t->name, t->dtype)
                              : snprintf(buf + at, cap - at, "%s%s", sep, t->name);
        if (n < 0) break;
        at += (size_t)n;
    }
}
