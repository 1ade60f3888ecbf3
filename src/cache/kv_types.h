/* kv_types.h: the storage floor's types that the cache dtype table
 * (kv_dtype.h) and the two codecs it points at (kv_format.h: pages and a
 * row's encode / decode; kv_record.h: a row's stored form) all name. They
 * live here, below the three, so that the table includes neither codec and
 * no two of them include each other. What the types mean is told where they
 * are used: a page's layouts in kv_format.h, a record in kv_record.h. */
#ifndef SDPA_KV_TYPES_H
#define SDPA_KV_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

/* A block's layout (kv_format.h says each one's element order). */
typedef enum sdpa_block_layout {
    SDPA_LAYOUT_ROWS,
    SDPA_LAYOUT_KEY_GROUPS,
    SDPA_LAYOUT_I8_KEYS,
    SDPA_LAYOUT_I8_PAIRS,
    SDPA_LAYOUT_I4_KEYS,
    SDPA_LAYOUT_I4_PAIRS,
} sdpa_block_layout;

#define SDPA_I8_KEY_GROUP 8   /* keys per group of an I8_KEYS / I4_KEYS block */
/* Elements of D per int4 scale and offset: 64 (4.5 bits a value), one
 * group a row at head size 64 (issue 41: at the same float16 newest page,
 * 32-element groups cost 0.5 bit a value more for little quality; the
 * measurement: bench/int4-layout.mjs, bench/HISTORY.md). Saved states of
 * format versions 1 and 2 hold 32-element groups (kv_record.c,
 * sdpa_int4_v2_record_import). A build may set it (to 32 or a multiple
 * of 32) only to measure: bench/int4-layout.mjs builds the 32 one. */
#ifndef SDPA_I4_GROUP
#define SDPA_I4_GROUP 64
#endif
#if SDPA_I4_GROUP % 32 != 0
#error "SDPA_I4_GROUP: a multiple of 32 (the kernels unpack 16 elements at a time; i8_quant_q_block sums 4)"
#endif

/* One block (K or V) of a page. */
typedef struct sdpa_block_format {
    int32_t dtype;            /* SDPA_DTYPE_FLOAT32, _FLOAT16, _INT8 or _INT4 */
    sdpa_block_layout layout;
    size_t elem_bytes;        /* 4, 2, 1; 0 for int4 (two elements per byte) */
    int32_t units;            /* I8_KEYS: ceil(D/2) element pairs; I4_KEYS: ceil(D/4) quads;
                               * I4_PAIRS: ceil(D/16) runs of 16 elements; else D */
    int32_t groups;           /* int4: ceil(D / SDPA_I4_GROUP); else 0 */
    size_t offset;            /* bytes from the page start to the block */
    size_t row_bytes;         /* bytes per page row: a tile at row r0 (a multiple of
                               * every layout's key group) starts r0 * row_bytes in */
    size_t scale_offset;      /* int8: [ROWS] f32 scales; int4: [groups][ROWS] f16 scales */
    size_t zp_offset;         /* int8: [ROWS] i8 zero points; int4: [groups][ROWS] f16 offsets */
} sdpa_block_format;

typedef struct sdpa_page_format {
    int32_t dim;                    /* D */
    sdpa_block_format block[2];     /* [0] K, [1] V */
    size_t page_bytes;              /* a multiple of 64 */
} sdpa_page_format;

/* One part of a row record, in record order: ceil(D / span) items (span 0:
 * one item per record) of item_bytes bytes each, little-endian item_type.
 * `name` is what KVCache.readRaw calls the part; scripts/abi.c carries the
 * dtype table's parts to JS (js/abi.js RECORD_PARTS), so JS splits a record
 * without knowing its bytes. */
typedef struct sdpa_kv_record_part {
    const char * name;       /* "data", "scales", "zeroPoints", "offsets" */
    const char * item_type;  /* "float32", "uint16", "uint8", "int8" */
    int32_t item_bytes;
    int32_t span;            /* elements of the row one item covers; 0: one item per record */
} sdpa_kv_record_part;

/* Why a record cannot be imported (SDPA_RECORD_OK: it can). */
typedef enum sdpa_record_fault {
    SDPA_RECORD_OK = 0,
    SDPA_RECORD_BAD_SCALE,   /* int8: a scale no encoder makes (NaN, negative, -0, 0 < s < FLT_EPSILON,
                              * or 0 outside the all-zero record of an unwritten row) */
    SDPA_RECORD_BAD_PAD,     /* int4: an odd head dim's unused nibble is not 0 */
} sdpa_record_fault;

#endif
