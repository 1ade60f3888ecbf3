/* flash_private.h: what flash.c (the tile loop) shares with the
 * microkernels and touch-ahead it includes from files of their own
 * (flash_float.h, flash_touch.h, flash_int8.h, flash_int4.h): the plan
 * of a call and the state of one block of rows (which kernel reads a tile:
 * tile_sources.h). */
#ifndef SDPA_FLASH_PRIVATE_H
#define SDPA_FLASH_PRIVATE_H

#include "internal.h"
#include "kernels/simd.h"
#include "kernels/tile_sources.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define BLOCK_ROWS 8
#define TILE_KEYS 64

#if defined(__GNUC__)
#define FLASH_INLINE inline __attribute__((always_inline))
#else
#define FLASH_INLINE inline
#endif

typedef struct flash_plan {
    const sdpa_problem * p;
    k_source k_src;        /* the Q.K and P.V sources of every tile (but see tile_sources) */
    v_source v_src;
    k_source k_marked;     /* ...of a tile in a page marked SDPA_PAGE_MARK_K_NONFINITE */
    v_source v_marked;     /* ...of one marked SDPA_PAGE_MARK_V_NONFINITE */
    k_source k_f16, k_f16_marked;  /* the same for a float16 page (SDPA_PAGE_MARK_FLOAT16, in kv.f16_format) */
    v_source v_f16, v_f16_marked;
    int32_t rows;          /* R = Sq * r per (b, hk) */
    int32_t blocks;        /* per (b, hk) */
    int32_t chunks;        /* key chunks per block (1 = no split) */
    int64_t chunk_keys;    /* keys per chunk, a multiple of TILE_KEYS (may pass INT32_MAX) */
    int32_t key_begin;     /* keys before it are outside every row's window (a TILE_KEYS multiple) */
    int32_t dim_pad;       /* D rounded up to 4 */
    uint64_t thread_bytes; /* per-thread scratch, a cache-line multiple (saturating) */
    char * scratch;        /* [n_threads][thread_bytes] then partials */
    float * partials;      /* [unit][BLOCK_ROWS][PARTIAL_HEAD + dim_pad] */
    atomic_int * done;     /* [group]: chunks finished; the last one merges */
} flash_plan;

/* One block of rows over one key range; its arrays live in the thread's
 * scratch (flash.c: scratch_areas). */
typedef struct block_state {
    int32_t n;                      /* rows in this block */
    int32_t row0;                   /* first flattened row */
    int32_t limit[BLOCK_ROWS];      /* keys t < limit exist for the row */
    int32_t lower[BLOCK_ROWS];      /* keys t < lower are outside the row's window */
    const float * mask[BLOCK_ROWS]; /* row of a float mask, or NULL */
    const uint8_t * bmask[BLOCK_ROWS];
    const uint8_t * tmask[BLOCK_ROWS]; /* row of a tree mask, or NULL */
    bool suspect[BLOCK_ROWS];       /* a score left float range: recompute the row */
    bool q_scaled;                  /* float16 K: qs holds q * 2^112 (block_setup, q_scalable) */
    float * q;                      /* [BLOCK_ROWS][dim_pad] */
    float * acc;                    /* [BLOCK_ROWS][dim_pad] */
    float * s;                      /* [BLOCK_ROWS][TILE_KEYS] */
    float * m;                      /* running max */
    float * l;                      /* running sum */
    uint32_t * touched;             /* where the touch-ahead loads end up */
    float * ktile;                  /* TILE_KEYS x dim_pad floats: a key-transposed K tile */
    float * vtile;                  /* TILE_KEYS x dim_pad floats: decoded V rows */
    v128_t * qs;                    /* [BLOCK_ROWS / 4][dim_pad][4]: q[x][d] broadcast */
    v128_t * pw;                    /* [BLOCK_ROWS / 4][TILE_KEYS][4]: a tile's weights p[x][t] broadcast */
    /* int8 and int4 pages (flash_int8.h, flash_int4.h) */
    v128_t * qpairs;                /* [BLOCK_ROWS / 4][pairs][4]: (q16[2p], q16[2p+1]) broadcast */
    float * qgroup;                 /* int4 K: [BLOCK_ROWS][groups] sum of a group's q16, as float */
    float qscale[BLOCK_ROWS];       /* q[d] ~ q16[d] * qscale */
    int32_t qsum[BLOCK_ROWS];       /* sum_d q16[d] (for the zero points) */
    int16_t * wq;                   /* int8 V: [BLOCK_ROWS][TILE_KEYS] a tile's weights p * vscale in int16;
                                     * int4 V: [BLOCK_ROWS][groups][TILE_KEYS], per group */
    float * wgroup;                 /* int4 V: [BLOCK_ROWS][groups][2]: wscale, sum_t p * offset */
    float * vside;                  /* int4 V: [groups][2][TILE_KEYS]: a tile's scales, offsets as float32 */
    float * kside;                  /* int4 K: the same for the K block */
    float wscale[BLOCK_ROWS];       /* weight ~ wq * wscale */
    int32_t wzp[BLOCK_ROWS];        /* sum_t wq[t] * zero_point[t] */
} block_state;

/* The touches of a score pass: the pass over keys [t, t + step) touches
 * lines of a and b at t rows in (a_row, b_row bytes per row: the blocks of
 * a tile ahead, each of its own dtype), `lines` lines of each. */
typedef struct touch_rows {
    const char * a, * b;    /* NULL: no touches */
    size_t a_row, b_row;
} touch_rows;

/* The touch pointers of the score pass at key t (see touch_rows), and how
 * many lines each pass touches: its share of the smaller block. */
static FLASH_INLINE int32_t touch_lines(const touch_rows * tr, int32_t step) {
    const size_t row = tr->a_row < tr->b_row ? tr->a_row : tr->b_row;
    return tr->a ? (int32_t)((size_t)step * row / SDPA_CACHE_LINE) : 0;
}
static FLASH_INLINE void touch_pass(const touch_rows * tr, int32_t t, const uint32_t ** ta, const uint32_t ** tb) {
    *ta = tr->a ? (const uint32_t *)(const void *)(tr->a + (size_t)t * tr->a_row) : NULL;
    *tb = tr->b ? (const uint32_t *)(const void *)(tr->b + (size_t)t * tr->b_row) : *ta;
}


#endif
