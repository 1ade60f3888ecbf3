/* tile_sources.h: where flash.c's tile loop gets a tile's keys and values
 * (its K source and V source), and so which microkernels run it; and the
 * kernel table, the kernels' row per cache dtype (tile_sources.c): the
 * sources the plan takes for a block of that dtype (flash.c plan_sources).
 * The dtype's storage row (bytes, layouts, codec, records) is the storage
 * floor's (cache/kv_dtype.h): the split of ggml's type_traits (ggml.c) and
 * type_traits_cpu (ggml-cpu.c). */
#ifndef SDPA_TILE_SOURCES_H
#define SDPA_TILE_SOURCES_H

#include <stdbool.h>
#include <stdint.h>

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
    K_F16_PAGE,        /* a float16 page's K block, finite halves converted per key group into L1 (tile_scores_f16) */
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
    V_F16_PAGE,        /* a float16 page's V rows, finite halves converted per PV_KEYS rows into L1 (tile_values_f16) */
    V_F16_DECODED,     /* a float16 page's V rows decoded into the V tile */
    V_I8_PAGE,         /* an int8 page's V block: int16 weights times int8 values */
    V_I4_PAGE,         /* an int4 page's V block: per-group int16 weights times nibbles */
    V_DECODED,         /* any page's V rows decoded into the V tile (a marked int4 page) */
} v_source;

/* The kernels' row of a cache dtype. */
typedef struct sdpa_dtype_kernels {
    int32_t dtype;                  /* SDPA_DTYPE_* */
    k_source k_tile;                /* the plan's K source for a block of this dtype... */
    int32_t k_tile_max_dim;         /* ...up to this head dim (0: any), K_DECODED above */
    k_source k_tile_marked;         /* a page marked SDPA_PAGE_MARK_K_NONFINITE */
    v_source v_tile, v_tile_marked; /* the same for V (SDPA_PAGE_MARK_V_NONFINITE) */
    bool small_tiles;               /* K tiles of a few bytes a key: longer split-KV chunks */
} sdpa_dtype_kernels;

/* The kernel table: the cache dtypes with kernels of their own, in
 * sdpa_dtype number order. */
extern const sdpa_dtype_kernels sdpa_dtype_kernel_table[];
extern const int32_t sdpa_dtype_kernel_count;

/* The kernels' row of `dtype`; for a dtype without one, a row whose tiles
 * are decoded into float32 (K_DECODED, V_DECODED: through the dtype's
 * decode, cache/kv_format.h), so a dtype may have a storage row alone. */
const sdpa_dtype_kernels * sdpa_dtype_kernels_of(int32_t dtype);

#endif
