/* tile_sources.h: where flash.c's tile loop gets a tile's keys and values
 * (its K source and V source), and so which microkernels run it. Each cache
 * dtype names its sources in the dtype table (cache/kv_dtype.c), and the
 * plan takes them from there (flash.c plan_sources). */
#ifndef SDPA_TILE_SOURCES_H
#define SDPA_TILE_SOURCES_H

/* An int8 cache's Q.K quantizes q to int16 up to this head dim and decodes
 * K above it (flash_int8.h says why). */
#define INT_Q_MAX_DIM 1024

/* Where the Q.K stage of a tile gets its keys, and so which kernel computes
 * the scores. Chosen per plan from the K block's dtype (its row of the dtype table, plan_sources); a
 * page marked as holding a value the in-place readers cannot convert turns
 * K_F16_PAGE into K_F16_DECODED and K_I4_PAGE into K_DECODED (tile_sources). */
typedef enum k_source {
    K_F32_TRANSPOSED,  /* caller tensors: rows transposed into the K tile */
    K_F32_PAGE,        /* a float32 page's key-transposed K block, read in place */
    K_F16_PAGE,        /* a float16 page's K block, finite halves converted per key group into L1 (scores_f16) */
    K_F16_DECODED,     /* a float16 page's K block decoded into the K tile (Inf / NaN exact) */
    K_I8_PAGE,         /* an int8 page's K block: integer dot products with the int16 q */
    K_I4_PAGE,         /* an int4 page's K block: nibbles unpacked in registers, int16 q */
    K_DECODED,         /* any page's K rows decoded into the K tile (int8 above INT_Q_MAX_DIM, marked int4) */
} k_source;

/* Where the P.V stage of a tile gets its values (likewise per plan from the
 * V block's dtype, then V_F16_PAGE -> V_F16_DECODED, V_I4_PAGE -> V_DECODED
 * per marked page). */
typedef enum v_source {
    V_F32_ROWS,        /* float32 rows in place: caller tensors or a float32 page's V block */
    V_F16_PAGE,        /* a float16 page's V rows, finite halves converted per PV_KEYS rows into L1 (values_f16) */
    V_F16_DECODED,     /* a float16 page's V rows decoded into the V tile */
    V_I8_PAGE,         /* an int8 page's V block: int16 weights times int8 values */
    V_I4_PAGE,         /* an int4 page's V block: per-group int16 weights times nibbles */
    V_DECODED,         /* any page's V rows decoded into the V tile (a marked int4 page) */
} v_source;

#endif
