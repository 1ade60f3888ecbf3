/* flash.c: flash attention on SIMD128 (https://arxiv.org/abs/2205.14135,
 * decode split as in flash-decoding). Shape of the work:
 *
 * For each (b, hk) the query rows that share KV head hk are flattened into
 * R = Sq * r rows (row = i * r + j, head h = hk * r + j), cut into blocks of
 * BLOCK_ROWS rows. A block walks its keys in tiles of TILE_KEYS (block_tile):
 * scores for all its rows, online softmax (running max m and sum l, rescale
 * on a new max), then acc += p * V (each V row loaded once per 4 rows).
 *
 * Which kernel runs each of those stages depends on where the tile's keys
 * and values come from: its K source and its V source (k_source, v_source
 * in flash_private.h), chosen once per plan (plan_sources; a float16 page
 * that may hold an Inf or NaN is decoded instead, tile_sources). Each stage
 * switches on its own source and calls one microkernel per variant. Float
 * scores come from one kernel (flash_float.h) over a key-transposed K tile (f32_qk_tile: per
 * head-dim element d, a broadcast q[x][d] times 4 keys per vector, each K
 * vector loaded once for 4 query rows, no horizontal sums): a float32 page's
 * K block is stored that way (cache/kv_format.h) and read in place, a
 * float16 page's too (each group of keys converted into L1 for all the
 * rows, q scaled by 2^112 so that a half converts in 2 operations:
 * tile_scores_f16) or decoded into it, caller
 * tensors are transposed into it; int8 pages run Q.K and P.V as integer dot
 * products on their own layouts (flash_int8.h). Every key's score is the
 * same sum in the same order whatever its source, so cache.attend and
 * customSdpa over the same rows agree bit for bit.
 *
 * When there are few blocks in all (decode), the keys are also cut into
 * chunks so that threads share even B = Hkv = 1; each chunk leaves a partial
 * (m, l, acc), and the last chunk of a block to finish merges them in chunk
 * order. Chunking depends only on the problem, never on the thread count, so
 * the result is bit-identical for any number of threads. While a tile's
 * scores are computed, memory it needs soon is touched so that DRAM reads
 * overlap with compute (flash_touch.h).
 *
 * Non-finite inputs are computed through: a NaN score makes its row NaN. A
 * row "sees nothing" (and outputs zeros) exactly when its sum l is 0.
 *
 * Float32 range: a finished row is recomputed by the double-precision
 * reference row (kernels.h) when the fast path may have left float range on
 * the way to a finite answer: a score that is not finite before the mask
 * (q.k overflowed, or inf * 0: scale = 1e30 with k = 0 is exactly 0), an
 * output element that is not finite (the unnormalised p.V sum overflows for
 * |v| near FLT_MAX although the convex combination does not), or l = 0 on a
 * row whose float mask admits a key (mask + score overflowed to -inf). The
 * test depends only on the data, so results stay bit-identical for any
 * thread count; non-finite data ends up there too and gets the reference's
 * NaN / Inf, as the contract asks. The reference row's D doubles live in the
 * thread's q area, which is free once a block's keys are done.
 */
#include "kernels/kernels.h"
#include "kernels/flash_private.h"
#include "kernels/flash_float.h"
#include "kernels/flash_touch.h"
#include "kernels/flash_int8.h"
#include "kernels/flash_int4.h"
#include "cache/page_pool.h"

#include <float.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#define SPLIT_MAX_UNITS 16    /* split keys only when B * Hkv * blocks is this small */
#define CHUNK_MIN_KEYS 256    /* ...into chunks of at least this many keys */
#define CHUNK_MIN_KEYS_INT8 1024  /* an int8 tile is 4x smaller: longer chunks (measured: MQA-8192 and
                                   * B-4096 5-6% faster, A-8192 the same), fewer first-tile touches */
#define CHUNK_MAX_COUNT 64    /* ...and at most this many chunks */
#define SCRATCH_ALIGN SDPA_CACHE_LINE  /* threads never share a line of scratch */
_Static_assert(SDPA_PAGE_ROWS % TILE_KEYS == 0, "a key tile never spans two cache pages");

/* Byte counts are uint64_t and saturate (internal.h): on wasm32 the size_t
 * product of a thread count and a huge head dim would wrap. */
static uint64_t align_up(uint64_t n) {
    return n > UINT64_MAX - (SCRATCH_ALIGN - 1) ? UINT64_MAX : (n + SCRATCH_ALIGN - 1) & ~(uint64_t)(SCRATCH_ALIGN - 1);
}

/* ---- per-thread scratch ------------------------------------------------ */

/* One table that both sizes a thread's scratch (thread_bytes) and carves it
 * (block_setup): area i holds per_dim * dim_pad + fixed floats, in this
 * order. Every area is a whole number of 4-float vectors (dim_pad is a
 * multiple of 4), so the vector areas stay 16-byte aligned. */
typedef enum scratch_area {
    AREA_Q, AREA_ACC, AREA_SCORES, AREA_MAX, AREA_SUM, AREA_TOUCHED, AREA_Q_INT, AREA_W_INT,
    AREA_K_TILE, AREA_V_TILE, AREA_Q_BROADCAST, AREA_W_BROADCAST, AREA_COUNT
} scratch_area;
static const struct { uint32_t per_dim, fixed; } scratch_areas[AREA_COUNT] = {
    [AREA_Q]           = { BLOCK_ROWS, 0 },              /* q rows, zero-padded; later the reference row's D doubles + D floats */
    [AREA_ACC]         = { BLOCK_ROWS, 0 },              /* the rows' p . V accumulators */
    [AREA_SCORES]      = { 0, BLOCK_ROWS * TILE_KEYS },  /* a tile's scores, then its weights */
    [AREA_MAX]         = { 0, BLOCK_ROWS },              /* running max m */
    [AREA_SUM]         = { 0, BLOCK_ROWS },              /* running sum l */
    [AREA_TOUCHED]     = { 0, 4 },                       /* the touch-ahead loads' OR (one word) */
    [AREA_K_TILE]      = { TILE_KEYS, 0 },               /* a transposed or decoded K tile */
    [AREA_V_TILE]      = { TILE_KEYS, 0 },               /* a decoded V tile, or a decoded K row */
    [AREA_Q_BROADCAST] = { BLOCK_ROWS * 4, 0 },          /* q[x][d] broadcast to vectors */
    [AREA_W_BROADCAST] = { 0, BLOCK_ROWS * TILE_KEYS * 4 }, /* a tile's weights broadcast (broadcast_weights) */
    /* int8 / int4 K: q16 pairs, 8 rows x (ceil(D/4) * 2 <= D/2 + 2) x 4 lanes, then int4's
     * group sums, 8 rows x ceil(D/32) floats, then a tile's scales and offsets as float32,
     * ceil(D/32) x 2 x TILE_KEYS (ceil(D/32) >= ceil(D/SDPA_I4_GROUP): a group is a multiple of 32) */
    [AREA_Q_INT]       = { 21, 224 },
    /* int8 / int4 V: a tile's int16 weights, 8 rows x groups x TILE_KEYS (int8: one group),
     * then int4's wscale and offset sums, 8 rows x groups x 2 floats, then its scales and
     * offsets as float32, groups x 2 x TILE_KEYS: 400 groups floats, groups <= ceil(D / 32) */
    [AREA_W_INT]       = { 13, 416 },
};
_Static_assert(BLOCK_ROWS % 4 == 0 && (BLOCK_ROWS * TILE_KEYS) % 4 == 0, "scratch areas are whole vectors");
_Static_assert(BLOCK_ROWS * sizeof(float) >= sizeof(double) + sizeof(float), "a reference row (and its rotated q) fits in the q area");

/* Floats before area `a` (AREA_COUNT: all of them), saturating. */
static uint64_t area_offset(scratch_area a, int32_t dim_pad) {
    uint64_t floats = 0;
    for (int i = 0; i < (int)a; i++)
        floats = sdpa_size_add(floats, sdpa_size_add(sdpa_size_mul(scratch_areas[i].per_dim, (uint64_t)dim_pad),
                                                     scratch_areas[i].fixed));
    return floats;
}
static uint64_t thread_bytes(int32_t dim_pad) {
    return align_up(sdpa_size_mul(area_offset(AREA_COUNT, dim_pad), sizeof(float)));
}
/* Run time only: a reserved workspace fits in size_t. */
static void * scratch_area_at(char * thread_scratch, scratch_area a, int32_t dim_pad) {
    return (float *)(void *)thread_scratch + (size_t)area_offset(a, dim_pad);
}

static int32_t ceil_div(int32_t a, int32_t b) { return a / b + (a % b != 0); }
static int32_t pad4(int32_t d) { return ceil_div(d, 4) * 4; }

/* A row's partial: m, l, suspect (0 or 1: fall back to the reference), acc. */
#define PARTIAL_HEAD 3
static uint64_t partial_floats_for(int32_t dim_pad) {
    return (uint64_t)BLOCK_ROWS * (PARTIAL_HEAD + (uint64_t)dim_pad);
}

/* The K and V sources of every tile of the plan (tile_sources refines them
 * per page), each from its own block's dtype: its row of the kernel table
 * (tile_sources.c) names them, and those of a page marked as holding what
 * the in-place readers cannot convert. */
static void plan_sources(flash_plan * f) {
    const sdpa_kv_view * kv = &f->p->kv;
    f->k_src = f->k_marked = K_F32_TRANSPOSED;
    f->v_src = f->v_marked = V_F32_ROWS;
    if (!kv->pages) return;
    const sdpa_dtype_kernels * kt = sdpa_dtype_kernels_of(sdpa_kv_dtype(kv->format, 0));
    const sdpa_dtype_kernels * vt = sdpa_dtype_kernels_of(sdpa_kv_dtype(kv->format, 1));
    const bool k_wide = kt->k_tile_max_dim && f->p->head_dim > kt->k_tile_max_dim;
    f->k_src = k_wide ? K_DECODED : kt->k_tile;
    f->k_marked = k_wide ? K_DECODED : kt->k_tile_marked;
    f->v_src = vt->v_tile;
    f->v_marked = vt->v_tile_marked;
    /* a float16 page's blocks: float16 for an int8 / int4 block, else the block's own
     * dtype (its tiles in that page's format: tile_sources, page_format) */
    f->k_f16 = f->k_f16_marked = f->k_src;
    f->v_f16 = f->v_f16_marked = f->v_src;
    if (kv->f16_format) {
        const sdpa_dtype_kernels * kf = sdpa_dtype_kernels_of(sdpa_kv_dtype(kv->f16_format, 0));
        const sdpa_dtype_kernels * vf = sdpa_dtype_kernels_of(sdpa_kv_dtype(kv->f16_format, 1));
        f->k_f16 = kf->k_tile;
        f->k_f16_marked = kf->k_tile_marked;
        f->v_f16 = vf->v_tile;
        f->v_f16_marked = vf->v_tile_marked;
    }
}

/* Validated problems have n_keys >= 1, B * Sq * Hq * D <= SIZE_MAX / 4 and,
 * by the checks in contract/, B * Sq * Hq and D <= SDPA_INDEX_LIMIT, so these
 * int32 values hold and every count below is >= 1. Key positions may reach
 * INT32_MAX (a paged cache's maxSeqLen costs only its page table): the key
 * arithmetic that rounds or steps past n_keys is int64. */
static void make_plan(flash_plan * f, const sdpa_problem * p) {
    f->p = p;
    plan_sources(f);
    f->rows = p->q_len * p->group;
    f->blocks = ceil_div(f->rows, BLOCK_ROWS);
    f->dim_pad = pad4(p->head_dim);
    /* a window (never with a mask) hides keys t <= start_pos - window from every
     * row: the chunks cover only the keys after that, so windowed decode costs
     * the window, however long the sequence */
    f->key_begin = 0;
    if (p->window) {
        const int64_t lo = p->start_pos - p->window + 1;  /* < n_keys */
        if (lo > 0) f->key_begin = (int32_t)(lo - lo % TILE_KEYS);
    }
    const int32_t keys = p->n_keys - f->key_begin;
    int32_t chunks = 1;
    if ((int64_t)p->batch * p->kv_heads * f->blocks <= SPLIT_MAX_UNITS) {
        const bool small_tiles = p->kv.pages && sdpa_dtype_kernels_of(sdpa_kv_dtype(p->kv.format, 0))->small_tiles;
        chunks = ceil_div(keys, small_tiles ? CHUNK_MIN_KEYS_INT8 : CHUNK_MIN_KEYS);
        if (chunks > CHUNK_MAX_COUNT) chunks = CHUNK_MAX_COUNT;
    }
    /* a cache's maxSeqLen may be near INT32_MAX: rounding up to a tile must not wrap */
    f->chunk_keys = (int64_t)ceil_div(ceil_div(keys, chunks), TILE_KEYS) * TILE_KEYS;
    f->chunks = (int32_t)(((int64_t)keys + f->chunk_keys - 1) / f->chunk_keys);
    f->thread_bytes = thread_bytes(f->dim_pad);
}

/* Run time only (the reserved workspace fits in size_t, so these do too). */
static size_t partial_floats(const flash_plan * f) { return (size_t)partial_floats_for(f->dim_pad); }

/* <= INT32_MAX: (B * Hkv * blocks) <= B * Sq * Hq unsplit, <= 16 * 64 split */
static int32_t compute_units(const flash_plan * f) {
    const sdpa_problem * p = f->p;
    return p->batch * p->kv_heads * f->blocks * f->chunks;
}

static uint64_t split_bytes(uint64_t units, int32_t dim_pad) {
    return sdpa_size_add(sdpa_size_mul(sdpa_size_mul(units, partial_floats_for(dim_pad)), sizeof(float)),
                         SPLIT_MAX_UNITS * sizeof(atomic_int));
}

static uint64_t workspace_bytes(const flash_plan * f, int32_t n_threads) {
    uint64_t bytes = sdpa_size_add(SCRATCH_ALIGN, sdpa_size_mul((uint64_t)n_threads, f->thread_bytes));
    if (f->chunks > 1) bytes = sdpa_size_add(bytes, split_bytes((uint64_t)compute_units(f), f->dim_pad));
    return bytes;
}

uint64_t sdpa_flash_workspace(int32_t n_threads, const sdpa_problem * p) {
    flash_plan f;
    make_plan(&f, p);
    return workspace_bytes(&f, n_threads);
}

/* Splits happen only for <= SPLIT_MAX_UNITS units of <= CHUNK_MAX_COUNT
 * chunks, so this bounds the workspace of every problem with this D. */
uint64_t sdpa_flash_workspace_bound(int32_t n_threads, int32_t head_dim) {
    const int32_t dim_pad = pad4(head_dim);
    return sdpa_size_add(sdpa_size_add(SCRATCH_ALIGN, sdpa_size_mul((uint64_t)n_threads, thread_bytes(dim_pad))),
                         split_bytes((uint64_t)SPLIT_MAX_UNITS * CHUNK_MAX_COUNT, dim_pad));
}

/* ---- one block of rows over one key range ------------------------------ */

/* x[i] *= c (a power of two here: exact but for overflow and underflow,
 * which the callers rule out). */
static void scale_floats(float * x, size_t n, float c) {
    const v128_t vc = wasm_f32x4_splat(c);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) wasm_v128_store(x + i, wasm_f32x4_mul(wasm_v128_load(x + i), vc));
    for (; i < n; i++) x[i] *= c;
}

/* Whether every q element times 2^112 stays finite (|q| < 2^16; NaN and
 * Inf are not). */
static bool q_scalable(const float * q, size_t n) {
    const v128_t limit = wasm_f32x4_splat(65536.0f);
    v128_t ok = wasm_i32x4_splat(-1);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) ok = wasm_v128_and(ok, wasm_f32x4_lt(wasm_f32x4_abs(wasm_v128_load(q + i)), limit));
    bool all = wasm_i32x4_all_true(ok);
    for (; i < n; i++) all &= fabsf(q[i]) < 65536.0f;
    return all;
}

/* The block's q rows quantized to int16 for an integer Q.K (P element
 * pairs, |q16| <= qmax; group: int4's group sums, or NULL). */
static void block_quant_q(const flash_plan * f, block_state * st, int32_t P, int32_t qmax, float * group) {
    i8_quant_q_block(st->q, (size_t)f->dim_pad, st->n, f->p->head_dim, P, qmax, st->qpairs, st->qscale, st->qsum, group,
                     st->suspect);
}

static void block_setup(const flash_plan * f, block_state * st, char * scratch, int32_t b,
                        int32_t hk, int32_t blk) {
    const sdpa_problem * p = f->p;
    const int32_t D = p->head_dim, Dp = f->dim_pad, r = p->group;
    st->q = scratch_area_at(scratch, AREA_Q, Dp);
    st->acc = scratch_area_at(scratch, AREA_ACC, Dp);
    st->s = scratch_area_at(scratch, AREA_SCORES, Dp);
    st->m = scratch_area_at(scratch, AREA_MAX, Dp);
    st->l = scratch_area_at(scratch, AREA_SUM, Dp);
    st->touched = scratch_area_at(scratch, AREA_TOUCHED, Dp);
    st->ktile = scratch_area_at(scratch, AREA_K_TILE, Dp);
    st->vtile = scratch_area_at(scratch, AREA_V_TILE, Dp);
    st->qs = scratch_area_at(scratch, AREA_Q_BROADCAST, Dp);
    st->pw = scratch_area_at(scratch, AREA_W_BROADCAST, Dp);
    st->qpairs = scratch_area_at(scratch, AREA_Q_INT, Dp);
    st->qgroup = (float *)(void *)(st->qpairs + (size_t)BLOCK_ROWS * (size_t)(ceil_div(D, 4) * 2));
    st->kside = st->qgroup + (size_t)BLOCK_ROWS * (size_t)ceil_div(D, SDPA_I4_GROUP);
    st->wq = scratch_area_at(scratch, AREA_W_INT, Dp);
    st->wgroup = (float *)(void *)(st->wq + (size_t)BLOCK_ROWS * TILE_KEYS * (size_t)ceil_div(D, SDPA_I4_GROUP));
    st->vside = st->wgroup + (size_t)BLOCK_ROWS * 2 * (size_t)ceil_div(D, SDPA_I4_GROUP);
    st->row0 = blk * BLOCK_ROWS;
    st->n = f->rows - st->row0 < BLOCK_ROWS ? f->rows - st->row0 : BLOCK_ROWS;
    memset(st->q, 0, sizeof(float) * (size_t)BLOCK_ROWS * Dp);  /* q rows are zero-padded to dim_pad */
    memset(st->acc, 0, sizeof(float) * (size_t)BLOCK_ROWS * Dp);
    for (int32_t x = 0; x < BLOCK_ROWS; x++) {
        st->m[x] = -INFINITY;
        st->l[x] = 0.0f;
        st->limit[x] = 0;
        st->lower[x] = 0;
        st->mask[x] = NULL;
        st->bmask[x] = NULL;
        st->tmask[x] = NULL;
        st->suspect[x] = false;
    }
    for (int32_t x = 0; x < st->n; x++) {
        const int32_t row = st->row0 + x, i = row / r, h = hk * r + row % r;
        const float * q = p->q + (size_t)b * p->q_stride_b + ((size_t)i * p->q_heads + h) * D;
        /* unscaled: scale * q could overflow (or underflow) where scale * (q . k) does not */
        if (p->rope.half) sdpa_rope_row(&p->rope, p->rope.pos ? p->rope.pos[i] : p->start_pos + i, q, st->q + (size_t)x * Dp, D);
        else memcpy(st->q + (size_t)x * Dp, q, sizeof(float) * (size_t)D);
        int64_t limit = p->n_keys;
        if (p->is_causal && p->start_pos + i + 1 < limit) limit = p->start_pos + i + 1;
        st->limit[x] = (int32_t)limit;
        if (p->window) {  /* (a windowed cache's sink rows below it are let through in block_keys) */
            const int64_t lower = p->start_pos + i - p->window + 1;
            st->lower[x] = lower <= 0 ? 0 : lower >= limit ? (int32_t)limit : (int32_t)lower;
        }
        if (p->mask && p->mask_dtype == SDPA_DTYPE_FLOAT32)
            st->mask[x] = (const float *)p->mask + (size_t)i * p->mask_stride;
        else if (p->mask)
            st->bmask[x] = (const uint8_t *)p->mask + (size_t)i * p->mask_stride;
        if (p->tree) st->tmask[x] = p->tree + (size_t)i * p->tree_stride;
    }
    if (f->k_src == K_I8_PAGE && !f->p->kv.f16_format) {  /* integer Q.K: the float kernels' broadcast q is not needed */
        block_quant_q(f, st, f->p->kv.format->block[0].units, i8_quant_q_max(D), NULL);
        return;
    }
    if (f->k_src == K_I8_PAGE)  /* integer Q.K, and the broadcast q for a float16 page */
        block_quant_q(f, st, f->p->kv.format->block[0].units, i8_quant_q_max(D), NULL);
    if (f->k_src == K_I4_PAGE)  /* integer Q.K, and the broadcast q for a page decoded instead or a float16 page */
        block_quant_q(f, st, 2 * f->p->kv.format->block[0].units, INT16_MAX, st->qgroup);
    /* float16 K in place: q * 2^112 (exact) when no element overflows, so its
     * halves convert in 2 operations, not 3 (f16x4_finite_scaled) */
    st->q_scaled = f->k_src == K_F16_PAGE && q_scalable(st->q, (size_t)st->n * Dp);
    const float q_factor = st->q_scaled ? 0x1p112f : 1.0f;
    for (int32_t x = 0; x < st->n; x++)
        for (int32_t d = 0; d < D; d++)
            st->qs[((size_t)(x / 4) * Dp + d) * 4 + x % 4] = wasm_f32x4_splat(st->q[(size_t)x * Dp + d] * q_factor);
}

/* ---- K and V tiles loaded into scratch ---------------------------------
 *
 * The sources not read in place fill the block's K tile (key-transposed:
 * groups of KG keys, D * KG floats apart, f32_qk_tile's layout) or V tile (rows
 * dim_pad floats apart). A K tile may hold keys past nt up to the group's
 * end (the page's rows, or zeros): their lanes are independent and dropped.
 * V is decoded only before the value pass, so the tile being used is the
 * one in L1. */

/* Rows [t0, t0 + nt) of a [.., D] row-major float32 K (row stride ldk) into
 * the key-transposed layout at `out` (groups of KG keys, D * KG floats
 * apart), keys nt .. the group's end zero. 4 x 4 blocks go through
 * registers (4 loads, 8 shuffles, 4 stores). The V rows of the same keys
 * (v, stride ldv) are touched meanwhile (see touch_bytes). */
static uint32_t transpose_k_rows(const float * k, size_t ldk, int32_t nt, int32_t D, float * out,
                                 const float * v, size_t ldv) {
    uint32_t touched = 0;
    const int32_t end = ceil_div(nt, KG) * KG;
    int32_t t = 0;
    for (; t + 4 <= nt; t += 4) {
        const float * r0 = k + (size_t)t * ldk, * r1 = r0 + ldk, * r2 = r1 + ldk, * r3 = r2 + ldk;
        float * dst = out + (size_t)(t / KG) * D * KG + t % KG;
        for (int32_t y = 0; y < 4; y++) touched |= touch_bytes(v + (size_t)(t + y) * ldv, (size_t)D * sizeof(float));
        int32_t d = 0;
        for (; d + 4 <= D; d += 4) {
            const v128_t a = wasm_v128_load(r0 + d), b = wasm_v128_load(r1 + d);
            const v128_t c = wasm_v128_load(r2 + d), e = wasm_v128_load(r3 + d);
            const v128_t ab_lo = wasm_i32x4_shuffle(a, b, 0, 4, 1, 5), ce_lo = wasm_i32x4_shuffle(c, e, 0, 4, 1, 5);
            const v128_t ab_hi = wasm_i32x4_shuffle(a, b, 2, 6, 3, 7), ce_hi = wasm_i32x4_shuffle(c, e, 2, 6, 3, 7);
            wasm_v128_store(dst + (size_t)d * KG, wasm_i32x4_shuffle(ab_lo, ce_lo, 0, 1, 4, 5));
            wasm_v128_store(dst + (size_t)(d + 1) * KG, wasm_i32x4_shuffle(ab_lo, ce_lo, 2, 3, 6, 7));
            wasm_v128_store(dst + (size_t)(d + 2) * KG, wasm_i32x4_shuffle(ab_hi, ce_hi, 0, 1, 4, 5));
            wasm_v128_store(dst + (size_t)(d + 3) * KG, wasm_i32x4_shuffle(ab_hi, ce_hi, 2, 3, 6, 7));
        }
        for (; d < D; d++) {
            dst[(size_t)d * KG] = r0[d]; dst[(size_t)d * KG + 1] = r1[d];
            dst[(size_t)d * KG + 2] = r2[d]; dst[(size_t)d * KG + 3] = r3[d];
        }
    }
    for (; t < end; t++) {
        const float * row = k + (size_t)t * ldk;
        float * dst = out + (size_t)(t / KG) * D * KG + t % KG;
        if (t < nt) touched |= touch_bytes(v + (size_t)t * ldv, (size_t)D * sizeof(float));
        for (int32_t d = 0; d < D; d++) dst[(size_t)d * KG] = t < nt ? row[d] : 0.0f;
    }
    return touched;
}

/* K_F16_DECODED: a float16 page's K block has the K tile's layout: whole
 * groups decoded in one linear pass. */
static void decode_f16_k_tile(const flash_plan * f, block_state * st, const sdpa_page_format * fmt, const void * page,
                              int32_t r0, int32_t nt) {
    const int32_t D = f->p->head_dim, groups = ceil_div(nt, KG);
    decode_f16_row(tile_block(fmt, page, r0, 0), groups * D * KG, st->ktile);
}

/* K_DECODED: a page's K rows decoded one at a time (through the V tile,
 * free until the value pass) and scattered into groups. */
static void decode_k_tile(const flash_plan * f, block_state * st, const sdpa_page_format * fmt, const void * page,
                          int32_t r0, int32_t nt) {
    const int32_t D = f->p->head_dim, groups = ceil_div(nt, KG);
    const size_t ldg = (size_t)D * KG;
    float * row = st->vtile;
    for (int32_t t = 0; t < groups * KG; t++) {
        sdpa_kv_decode_row(fmt, page, r0 + t, 0, row);
        float * dst = st->ktile + (size_t)(t / KG) * ldg + t % KG;
        for (int32_t d = 0; d < D; d++) dst[(size_t)d * KG] = row[d];
    }
}

/* V_F16_DECODED / V_DECODED: a page's V rows [r0, r0 + nt) decoded into the V tile. */
static const float * decode_v_tile(const flash_plan * f, block_state * st, v_source vs, const sdpa_page_format * fmt,
                                   const void * page, int32_t r0, int32_t nt) {
    const size_t Dp = (size_t)f->dim_pad;
    const bool f16 = vs == V_F16_DECODED;
    for (int32_t t = 0; t < nt; t++) {
        if (f16) decode_f16_row(sdpa_kv_raw_row(fmt, page, r0 + t, 1), fmt->dim, st->vtile + (size_t)t * Dp);
        else sdpa_kv_decode_row(fmt, page, r0 + t, 1, st->vtile + (size_t)t * Dp);
    }
    return st->vtile;
}

/* The int4 stages are called through these pointers, which no optimizer
 * can see through, so that they stay functions of their own: inlined into
 * block_tile (binaryen inlines a function with one caller whatever C says)
 * they made it so large that V8 compiled the other dtypes' paths in it
 * 1.3-1.9x slower, and int4's own 1.6x slower (measured: MQA-8192 decode,
 * 1 thread). int8's stages measured 10-15% slower as functions of their
 * own, so they stay inlined. (Not in a header: nothing else calls them.) */
uint32_t (*sdpa_flash_i4_qk_tile)(const v128_t *, const float *, const float *, int32_t, const uint8_t *, size_t, int32_t,
                                  int32_t, const uint16_t *, const uint16_t *, size_t, float *, int32_t, float *,
                                  const touch_rows *) = i4_qk_tile;
void (*sdpa_flash_i4_quant_p_tile)(const float *, int32_t, int32_t, int32_t, const uint16_t *, const uint16_t *, size_t,
                                   float *, int16_t *, float *) = i4_quant_p_tile;
void (*sdpa_flash_i4_pv_tile)(float *, size_t, int32_t, const uint8_t *, int32_t, int32_t, int32_t, int32_t,
                              const int16_t *, const float *) = i4_pv_tile;

/* ---- one tile: scores, online softmax, values -------------------------- */

/* The sources of the tile in `page` (NULL: caller tensors): the plan's, or
 * a float16 page's (its int8 / int4 blocks read as float16 ones), but a
 * block marked as holding what the in-place readers cannot convert (a
 * float16 Inf or NaN: f16x4_finite converts finite halves only; an int4
 * NaN group) is decoded. */
static void tile_sources(const flash_plan * f, const void * page, k_source * ks, v_source * vs) {
    *ks = f->k_src;
    *vs = f->v_src;
    if (!page) return;
    const uint32_t marks = sdpa_page_marks(page);
    if (marks & SDPA_PAGE_MARK_FLOAT16) {
        *ks = marks & SDPA_PAGE_MARK_K_NONFINITE ? f->k_f16_marked : f->k_f16;
        *vs = marks & SDPA_PAGE_MARK_V_NONFINITE ? f->v_f16_marked : f->v_f16;
        return;
    }
    if (marks & SDPA_PAGE_MARK_K_NONFINITE) *ks = f->k_marked;
    if (marks & SDPA_PAGE_MARK_V_NONFINITE) *vs = f->v_marked;
}

/* The float32 scores of a tile loaded into the K tile (no touches: they
 * assume the page's own element type). */
static void tile_scores_decoded(const flash_plan * f, block_state * st, int32_t nt) {
    const int32_t D = f->p->head_dim;
    const touch_rows none = { NULL, NULL, 0, 0 };
    f32_qk_tile(st->qs, (size_t)f->dim_pad * 4, st->n, st->ktile, (size_t)D * KG, nt, D, st->s, &none);
}

/* K_F16_PAGE: each group of KG keys converted (finite halves, scaled with q
 * when st->q_scaled) into the K tile's first group, which stays in L1 while
 * every row's passes read it at float32 speed; the passes touch the rows
 * of `tr` at the group's keys. */
static uint32_t tile_scores_f16(block_state * st, const uint16_t * k, int32_t nt, int32_t D, size_t ldqs,
                                const touch_rows * tr) {
    const size_t ldg = (size_t)D * KG;
    if (st->n == 1) return f16_qk_tile(st->qs, ldqs, 1, k, ldg, nt, D, st->s, tr, st->q_scaled);
    uint32_t touched = 0;
    for (int32_t g0 = 0; g0 < nt; g0 += KG) {
        if (st->q_scaled) convert_halves(k + (size_t)(g0 / KG) * ldg, ldg, st->ktile, F16_SCALED);
        else convert_halves(k + (size_t)(g0 / KG) * ldg, ldg, st->ktile, 1);
        const touch_rows at = { tr->a ? tr->a + (size_t)g0 * tr->a_row : NULL, tr->b ? tr->b + (size_t)g0 * tr->b_row : NULL,
                                tr->a_row, tr->b_row };
        touched |= f32_qk_tile(st->qs, ldqs, st->n, st->ktile, ldg, nt - g0 < KG ? nt - g0 : KG, D, st->s + g0, &at);
    }
    return touched;
}

/* K_I8_PAGE: the tile's K block, zero points and scales in its page. */
static uint32_t tile_scores_i8(block_state * st, const sdpa_page_format * fmt, const void * page, int32_t r0, int32_t nt,
                               const touch_rows * tr) {
    const int32_t P = fmt->block[0].units;
    const size_t ldk = (size_t)P * 2 * SDPA_I8_KEY_GROUP;
    const int8_t * k = (const int8_t *)sdpa_kv_block(fmt, page, 0) + (size_t)(r0 / SDPA_I8_KEY_GROUP) * ldk;
    return i8_qk_tile(st->qpairs, st->qscale, st->qsum, st->n, k, ldk, P, sdpa_kv_zero_points(fmt, page, 0) + r0,
                      sdpa_kv_scales(fmt, page, 0) + r0, nt, st->s, tr);
}
/* K_I4_PAGE: the tile's K block, scales and offsets in its page. */
static uint32_t tile_scores_i4(block_state * st, const sdpa_page_format * fmt, const void * page, int32_t r0, int32_t nt,
                               const touch_rows * tr) {
    const int32_t Q = fmt->block[0].units;
    const size_t ldk = (size_t)Q * 2 * SDPA_I8_KEY_GROUP;
    const uint8_t * k = (const uint8_t *)sdpa_kv_block(fmt, page, 0) + (size_t)(r0 / SDPA_I8_KEY_GROUP) * ldk;
    return sdpa_flash_i4_qk_tile(st->qpairs, st->qscale, st->qgroup, st->n, k, ldk, Q, fmt->block[0].groups,
                                 sdpa_kv_i4_scales(fmt, page, 0, 0) + r0, sdpa_kv_i4_offsets(fmt, page, 0, 0) + r0,
                                 SDPA_PAGE_ROWS, st->kside, nt, st->s, tr);
}

/* 1. st->s[x][t] = q_x . k_t (unscaled) for the tile's nt keys at ts, page
 * row r0; the score pass touches `ahead`. Returns the touches. */
static uint32_t tile_scores(const flash_plan * f, block_state * st, k_source ks, int32_t b, int32_t hk, int32_t ts,
                            const sdpa_page_format * fmt, const void * page, int32_t nt, const tile_ahead * ahead) {
    const sdpa_kv_view * kv = &f->p->kv;
    const int32_t D = f->p->head_dim, n = st->n, r0 = ts % SDPA_PAGE_ROWS;
    const size_t ldqs = (size_t)f->dim_pad * 4, ldg = (size_t)D * KG;
    const touch_rows tr = { ahead->v, ahead->k, kv->pages ? sdpa_kv_row_bytes(kv->format, 1) : 0,
                            kv->pages ? sdpa_kv_row_bytes(kv->format, 0) : 0 };
    switch (ks) {
        case K_F32_PAGE:
            return f32_qk_tile(st->qs, ldqs, n, tile_block(fmt, page, r0, 0), ldg, nt, D, st->s, &tr);
        case K_F16_PAGE:
            return tile_scores_f16(st, tile_block(fmt, page, r0, 0), nt, D, ldqs, &tr);
        case K_I8_PAGE:
            return tile_scores_i8(st, fmt, page, r0, nt, &tr);
        case K_I4_PAGE:
            return tile_scores_i4(st, fmt, page, r0, nt, &tr);
        case K_F32_TRANSPOSED: {
            const uint32_t touched = transpose_k_rows(sdpa_kv_key(kv, b, hk, ts), kv->stride_t, nt, D, st->ktile,
                                                      sdpa_kv_value(kv, b, hk, ts), kv->stride_t);
            tile_scores_decoded(f, st, nt);
            return touched;
        }
        case K_F16_DECODED:
            decode_f16_k_tile(f, st, fmt, page, r0, nt);
            if (st->q_scaled) scale_floats(st->ktile, (size_t)ceil_div(nt, KG) * ldg, 0x1p-112f);
            tile_scores_decoded(f, st, nt);
            return 0;
        case K_DECODED:
            decode_k_tile(f, st, fmt, page, r0, nt);
            tile_scores_decoded(f, st, nt);
            return 0;
    }
    return 0;
}

/* 2. Scale, softcap and mask the tile's scores, then the online softmax per
 * row: st->s becomes the weights exp(s - m), m and l are updated and acc
 * rescaled on a new max. */
static void tile_softmax(const flash_plan * f, block_state * st, int32_t ts, int32_t nt) {
    const sdpa_problem * p = f->p;
    const int32_t Dp = f->dim_pad, n = st->n;
    const int32_t nt4 = (nt + 3) & ~3;
    for (int32_t x = 0; x < n; x++) {
        float * s = st->s + (size_t)x * TILE_KEYS;
        const int32_t valid = st->limit[x] - ts < nt ? st->limit[x] - ts : nt;
        /* scores [0, nt): those past a causal limit are checked too (harmless: a false
         * alarm costs a reference row, never a wrong one) */
        if (!scale_finite(s, s, p->scale, nt)) st->suspect[x] = true;
        if (p->softcap) softcap_scores(s, nt4, p->softcap);
        if (st->mask[x]) for (int32_t t = 0; t < valid; t++) s[t] += st->mask[x][ts + t];
        /* before the window (a windowed cache's sink rows stay) */
        for (int32_t t = p->sink_tokens > ts ? p->sink_tokens - ts : 0, lo = st->lower[x] - ts; t < lo && t < nt4; t++)
            s[t] = -INFINITY;
        if (st->bmask[x]) for (int32_t t = 0; t < valid; t++) if (!st->bmask[x][ts + t]) s[t] = -INFINITY;
        if (st->tmask[x]) {  /* a tree mask: keys tree_pos .. limit-1 as its row says */
            const uint8_t * tm = st->tmask[x] - p->tree_pos;  /* (indexed by key; only keys >= tree_pos read) */
            for (int64_t t = p->tree_pos > ts ? p->tree_pos - ts : 0; t < valid; t++) if (!tm[ts + t]) s[t] = -INFINITY;
        }
        for (int32_t t = valid < 0 ? 0 : valid; t < nt4; t++) s[t] = -INFINITY;
        v128_t vmax = wasm_f32x4_splat(-INFINITY), vnan = wasm_i32x4_splat(0);
        for (int32_t t = 0; t < nt4; t += 4) {
            const v128_t vs = wasm_v128_load(s + t);
            vmax = wasm_f32x4_pmax(vmax, vs);  /* never NaN: a NaN vs is dropped... */
            vnan = wasm_v128_or(vnan, wasm_f32x4_ne(vs, vs));  /* ...and remembered here */
        }
        const float tile_max = f32x4_hmax(vmax);
        if (tile_max == -INFINITY && !wasm_v128_any_true(vnan)) {  /* nothing visible here */
            memset(s, 0, sizeof(float) * (size_t)nt4);
            continue;
        }
        const float m_old = st->m[x];
        const float m_new = tile_max > m_old ? tile_max : m_old;
        if (m_new != m_old && st->l[x] != 0.0f) {
            const float alpha = expf(m_old - m_new);
            float * acc = st->acc + (size_t)x * Dp;
            const v128_t va = wasm_f32x4_splat(alpha);
            for (int32_t d = 0; d < Dp; d += 4) wasm_v128_store(acc + d, wasm_f32x4_mul(wasm_v128_load(acc + d), va));
            st->l[x] *= alpha;
        }
        st->m[x] = m_new;
        const v128_t vm = wasm_f32x4_splat(m_new);
        for (int32_t t = 0; t < nt4; t += 4)
            wasm_v128_store(s + t, f32x4_exp_nonpositive(wasm_f32x4_sub(wasm_v128_load(s + t), vm)));
        /* summed in a pass of its own: in the exp loop V8 spilled the sum, a chain through memory */
        v128_t vsum = wasm_f32x4_splat(0.0f);
        for (int32_t t = 0; t < nt4; t += 4) vsum = wasm_f32x4_add(vsum, wasm_v128_load(s + t));
        st->l[x] += f32x4_hsum(vsum);
    }
}

/* The weights of each whole quad of rows broadcast, [quad][t][4] (f32_pv_tile's
 * 4-row loop then loads them at constant offsets from one pointer: V8
 * computes every splat's address on its own, measured slower). */
static void broadcast_weights(block_state * st, int32_t nt) {
    for (int32_t x = 0; x + 4 <= st->n; x += 4) {
        v128_t * w = st->pw + (size_t)(x / 4) * TILE_KEYS * 4;
        const float * p = st->s + (size_t)x * TILE_KEYS;
        for (int32_t t = 0; t < nt; t++, w += 4) {
            w[0] = wasm_v128_load32_splat(p + t);
            w[1] = wasm_v128_load32_splat(p + TILE_KEYS + t);
            w[2] = wasm_v128_load32_splat(p + 2 * TILE_KEYS + t);
            w[3] = wasm_v128_load32_splat(p + 3 * TILE_KEYS + t);
        }
    }
}
static const v128_t * quad_weights(const block_state * st, int32_t x, int32_t t0) {
    return st->pw + ((size_t)(x / 4) * TILE_KEYS + (size_t)t0) * 4;
}

/* acc += p . V over float32 value rows (ldv floats apart), 4 rows at a time. */
static void tile_values_f32(const flash_plan * f, block_state * st, const float * v, size_t ldv, int32_t nt) {
    broadcast_weights(st, nt);
    for (int32_t x = 0; x < st->n; x += 4)
        f32_pv_tile(st->acc + (size_t)x * f->dim_pad, (size_t)f->dim_pad, st->s + (size_t)x * TILE_KEYS, TILE_KEYS,
                quad_weights(st, x, 0), st->n - x < 4 ? st->n - x : 4, v, ldv, nt, f->p->head_dim);
}
/* V_F16_PAGE: the weights times 2^112 and the values (finite halves)
 * times 2^-112, the same products; each PV_KEYS rows converted into the V
 * tile, where they stay in L1 while every row's pass reads them (the same
 * sums in the same order as one pass over the tile). */
static void tile_values_f16(const flash_plan * f, block_state * st, const uint16_t * v, int32_t nt) {
    const int32_t D = f->p->head_dim;
    scale_floats(st->s, (size_t)st->n * TILE_KEYS, 0x1p112f);
    if (st->n == 1) {
        f16_pv_tile(st->acc, (size_t)f->dim_pad, st->s, TILE_KEYS, 1, v, (size_t)D, nt, D);
        return;
    }
    broadcast_weights(st, nt);
    for (int32_t t0 = 0; t0 < nt; t0 += PV_KEYS) {
        const int32_t kt = nt - t0 < PV_KEYS ? nt - t0 : PV_KEYS;
        convert_halves(v + (size_t)t0 * D, (size_t)kt * D, st->vtile, F16_SCALED);
        for (int32_t x = 0; x < st->n; x += 4)
            f32_pv_tile(st->acc + (size_t)x * f->dim_pad, (size_t)f->dim_pad, st->s + (size_t)x * TILE_KEYS + t0, TILE_KEYS,
                    quad_weights(st, x, t0), st->n - x < 4 ? st->n - x : 4, st->vtile, (size_t)D, kt, D);
    }
}

/* V_I8_PAGE: the weights quantized with the V rows' scales and zero points
 * (nt4: nt rounded up to 4), then the values of the tile's V block. */
static void tile_values_i8(const flash_plan * f, block_state * st, const sdpa_page_format * fmt, const void * page,
                           int32_t r0, int32_t nt, int32_t nt4) {
    const int32_t D = fmt->dim;
    i8_quant_p_tile(st->s, st->n, nt4, sdpa_kv_scales(fmt, page, 1) + r0, sdpa_kv_zero_points(fmt, page, 1) + r0, st->wq,
                    st->wscale, st->wzp, st->suspect);
    i8_pv_tile(st->acc, (size_t)f->dim_pad, st->n, (const int8_t *)sdpa_kv_block(fmt, page, 1) + (size_t)(r0 / 2) * 2 * (size_t)D,
               D, nt, st->wq, st->wscale, st->wzp);
}
/* V_I4_PAGE: the same per group, with the groups' scales and offsets. */
static void tile_values_i4(const flash_plan * f, block_state * st, const sdpa_page_format * fmt, const void * page,
                           int32_t r0, int32_t nt, int32_t nt4) {
    const int32_t U = fmt->block[1].units, G = fmt->block[1].groups;
    sdpa_flash_i4_quant_p_tile(st->s, st->n, nt4, G, sdpa_kv_i4_scales(fmt, page, 1, 0) + r0,
                               sdpa_kv_i4_offsets(fmt, page, 1, 0) + r0, SDPA_PAGE_ROWS, st->vside, st->wq, st->wgroup);
    sdpa_flash_i4_pv_tile(st->acc, (size_t)f->dim_pad, st->n,
                          (const uint8_t *)sdpa_kv_block(fmt, page, 1) + (size_t)(r0 / 2) * (size_t)U * 16, U, fmt->dim, G,
                          nt, st->wq, st->wgroup);
}

/* 3. acc += p . V for the tile's nt keys at ts. */
static void tile_values(const flash_plan * f, block_state * st, v_source vs, int32_t b, int32_t hk, int32_t ts,
                        const sdpa_page_format * fmt, const void * page, int32_t nt) {
    const sdpa_kv_view * kv = &f->p->kv;
    const int32_t r0 = ts % SDPA_PAGE_ROWS, nt4 = (nt + 3) & ~3;
    switch (vs) {
        case V_F32_ROWS: tile_values_f32(f, st, sdpa_kv_value(kv, b, hk, ts), sdpa_kv_row_stride(kv), nt); break;
        case V_F16_PAGE: tile_values_f16(f, st, tile_block(fmt, page, r0, 1), nt); break;
        case V_F16_DECODED:
        case V_DECODED: tile_values_f32(f, st, decode_v_tile(f, st, vs, fmt, page, r0, nt), (size_t)f->dim_pad, nt); break;
        case V_I8_PAGE: tile_values_i8(f, st, fmt, page, r0, nt, nt4); break;
        case V_I4_PAGE: tile_values_i4(f, st, fmt, page, r0, nt, nt4); break;
    }
}

/* Runs the nt keys of the tile at ts (a multiple of TILE_KEYS, so the tile
 * lies inside one cache page) of KV head (b, hk) through the block's online
 * softmax; the tile is one of the range [t0, t1) being run (which tiles to
 * touch ahead). Returns the touches. */
static uint32_t block_tile(const flash_plan * f, block_state * st, int32_t b, int32_t hk, int32_t ts, int32_t nt,
                           int32_t t0, int32_t t1) {
    const void * page = f->p->kv.pages ? sdpa_kv_page(&f->p->kv, b, hk, ts) : NULL;
    k_source ks;
    v_source vs;
    tile_sources(f, page, &ks, &vs);
    const sdpa_page_format * fmt = page ? sdpa_kv_page_format(&f->p->kv, page) : NULL;
    tile_ahead ahead = { NULL, NULL };
    uint32_t touched = touches_ahead(f, ks, st->n) ? touch_tiles_ahead(f, b, hk, ts, t0, t1, &ahead) : 0;
    touched |= tile_scores(f, st, ks, b, hk, ts, fmt, page, nt, &ahead);
    tile_softmax(f, st, ts, nt);
    tile_values(f, st, vs, b, hk, ts, fmt, page, nt);
    return touched;
}

/* Runs keys [t0, t1) (t0 a multiple of TILE_KEYS) of KV head (b, hk)
 * through the block's online softmax, skipping the tiles no row sees; with
 * `with_sinks` (the first chunk) also a windowed cache's sink tiles before
 * t0. */
static void block_keys(const flash_plan * f, block_state * st, int32_t b, int32_t hk,
                       int32_t t0, int32_t t1, bool with_sinks) {
    int32_t end = 0, begin = INT32_MAX;
    for (int32_t x = 0; x < st->n; x++) {
        if (st->limit[x] > end) end = st->limit[x];
        if (st->lower[x] < begin) begin = st->lower[x];
    }
    if (t1 > end) t1 = end;  /* causal: tiles above the diagonal are skipped */
    begin -= begin % TILE_KEYS;
    if (t0 < begin) t0 = begin;  /* window: tiles wholly before every row's window too */
    uint32_t touched = 0;
    if (with_sinks && f->p->sink_tokens > 0) {
        /* the tiles [0, sink_t1) holding a sink row, up to the range below (t0 is a tile
         * multiple, so no tile is run twice) and the causal end */
        int64_t sink_t1 = ((int64_t)f->p->sink_tokens + TILE_KEYS - 1) / TILE_KEYS * TILE_KEYS;
        if (sink_t1 > t0) sink_t1 = t0;
        if (sink_t1 > end) sink_t1 = end;
        for (int32_t ts = 0; ts < sink_t1; ts += TILE_KEYS)
            touched |= block_tile(f, st, b, hk, ts, sink_t1 - ts < TILE_KEYS ? (int32_t)sink_t1 - ts : TILE_KEYS, 0, (int32_t)sink_t1);
    }
    for (int64_t ts = t0; ts < t1; ts += TILE_KEYS)  /* int64: t1 may be near INT32_MAX */
        touched |= block_tile(f, st, b, hk, (int32_t)ts, t1 - ts < TILE_KEYS ? (int32_t)(t1 - ts) : TILE_KEYS, t0, t1);
    *st->touched |= touched;  /* a store the compiler must keep, so the touches stay */
}

static float * row_out(const sdpa_problem * p, int32_t b, int32_t hk, int32_t row) {
    const int32_t i = row / p->group, h = hk * p->group + row % p->group;
    return p->out + (size_t)b * p->q_stride_b + ((size_t)i * p->q_heads + h) * p->head_dim;
}

/* ---- finishing a row --------------------------------------------------- */

/* The factor a row's accumulator (running max m, sum l > 0) is scaled by:
 * 1 / l, or with a sink logit for the row's head, which joins the max and
 * the denominator but has no value row: exp(m - m') / (l exp(m - m') +
 * exp(sink - m')), m' = max(m, sink). (A NaN sink gives NaN, which sends the
 * row to the reference, as a NaN score would.) */
static float finish_scale(const sdpa_problem * p, int32_t hk, int32_t row, float m, float l) {
    if (!p->sinks) return 1.0f / l;
    const float sink = p->sinks[hk * p->group + row % p->group];
    const float top = sink > m ? sink : m;
    const float alpha = expf(m - top);
    return alpha / (l * alpha + expf(sink - top));
}

/* l = 0 means "fully masked" unless a float mask admits a key (an entry that
 * is not -inf) of query row i: then mask + score overflowed to -inf. Without
 * a mask or with a bool mask, an admitted key has a finite score (else the
 * row is suspect already), so l = 0 is real masking. */
static bool float_mask_admits(const sdpa_problem * p, int32_t i) {
    if (!p->mask || p->mask_dtype != SDPA_DTYPE_FLOAT32) return false;
    const float * m = (const float *)p->mask + (size_t)i * p->mask_stride;
    for (int32_t t = 0; t < p->n_keys; t++)
        if (m[t] != -INFINITY) return true;
    return false;
}

/* The double-precision reference for one flattened row, its D doubles in the
 * thread's q area (free once the block's keys are done; see the header). */
static void reference_fallback(const flash_plan * f, char * thread_scratch, int32_t b, int32_t hk, int32_t row) {
    const sdpa_problem * p = f->p;
    sdpa_reference_row(p, b, row / p->group, hk * p->group + row % p->group, (double *)thread_scratch);
}

/* group (= unit / chunks) -> (b, hk, block). Blocks go last-first: under a
 * causal mask the late rows see the most keys, and handing out the biggest
 * work first balances the threads. */
static void group_coords(const flash_plan * f, int32_t group, int32_t * b, int32_t * hk, int32_t * blk) {
    *blk = f->blocks - 1 - group % f->blocks;
    *hk = (group / f->blocks) % f->p->kv_heads;
    *b = group / f->blocks / f->p->kv_heads;
}

static void merge_group(const flash_plan * f, int32_t group, char * thread_scratch);

/* unit -> (group, chunk), chunk fastest */
static void compute_unit(void * arg, int32_t unit, int32_t thread) {
    const flash_plan * f = arg;
    const sdpa_problem * p = f->p;
    const int32_t chunk = unit % f->chunks, group = unit / f->chunks;
    int32_t b, hk, blk;
    group_coords(f, group, &b, &hk, &blk);
    char * scratch = f->scratch + (size_t)thread * (size_t)f->thread_bytes;
    block_state st;
    block_setup(f, &st, scratch, b, hk, blk);
    const int64_t t0 = f->key_begin + chunk * f->chunk_keys;  /* < n_keys */
    const int32_t t1 = (int32_t)(f->chunk_keys < p->n_keys - t0 ? t0 + f->chunk_keys : p->n_keys);
    block_keys(f, &st, b, hk, (int32_t)t0, t1, chunk == 0);
    const int32_t D = p->head_dim, Dp = f->dim_pad;
    if (f->chunks == 1) {
        for (int32_t x = 0; x < st.n; x++) {
            const int32_t row = st.row0 + x;
            float * out = row_out(p, b, hk, row);
            bool exact;
            if (st.suspect[x]) {
                exact = false;
            } else if (st.l[x] == 0.0f) {  /* fully masked: zeros, not NaN */
                exact = !float_mask_admits(p, row / p->group);
                if (exact) memset(out, 0, sizeof(float) * (size_t)D);
            } else {
                exact = scale_finite(out, st.acc + (size_t)x * Dp, finish_scale(p, hk, row, st.m[x], st.l[x]), D);
            }
            if (!exact) reference_fallback(f, scratch, b, hk, row);
        }
        return;
    }
    float * part = f->partials + (size_t)unit * partial_floats(f);
    for (int32_t x = 0; x < st.n; x++) {
        float * px = part + (size_t)x * (PARTIAL_HEAD + Dp);
        px[0] = st.m[x];
        px[1] = st.l[x];
        px[2] = st.suspect[x] ? 1.0f : 0.0f;
        memcpy(px + PARTIAL_HEAD, st.acc + (size_t)x * Dp, sizeof(float) * (size_t)Dp);
    }
    /* The last chunk of the group to finish merges it (acq_rel: it sees every
     * other chunk's partials). No second pass over the pool is needed. */
    if (atomic_fetch_add_explicit(&f->done[group], 1, memory_order_acq_rel) == f->chunks - 1)
        merge_group(f, group, scratch);
}

/* Merges a group's chunk partials in chunk order (so the result does not
 * depend on which thread merges). */
static void merge_group(const flash_plan * f, int32_t group, char * thread_scratch) {
    const sdpa_problem * p = f->p;
    int32_t b, hk, blk;
    group_coords(f, group, &b, &hk, &blk);
    const int32_t D = p->head_dim, Dp = f->dim_pad;
    const int32_t row0 = blk * BLOCK_ROWS;
    const int32_t n = f->rows - row0 < BLOCK_ROWS ? f->rows - row0 : BLOCK_ROWS;
    const float * parts = f->partials + (size_t)group * f->chunks * partial_floats(f);
    for (int32_t x = 0; x < n; x++) {
        /* chunks with l == 0 saw nothing; the others are combined at their common max */
        float m = -INFINITY;
        int32_t seen = 0;
        bool suspect = false;
        for (int32_t c = 0; c < f->chunks; c++) {
            const float * pc = parts + (size_t)c * partial_floats(f) + (size_t)x * (PARTIAL_HEAD + Dp);
            if (pc[2] != 0.0f) suspect = true;
            if (pc[1] == 0.0f) continue;
            seen++;
            if (pc[0] > m) m = pc[0];
        }
        const int32_t row = row0 + x;
        float * out = row_out(p, b, hk, row);
        if (!suspect && !seen && !float_mask_admits(p, row / p->group)) {
            memset(out, 0, sizeof(float) * (size_t)D);  /* fully masked row: zeros */
            continue;
        }
        if (!suspect && seen) {
            for (int32_t d = 0; d < D; d++) out[d] = 0.0f;
            float l = 0.0f;
            for (int32_t c = 0; c < f->chunks; c++) {
                const float * pc = parts + (size_t)c * partial_floats(f) + (size_t)x * (PARTIAL_HEAD + Dp);
                if (pc[1] == 0.0f) continue;
                const float w = expf(pc[0] - m);
                l += pc[1] * w;
                for (int32_t d = 0; d < D; d++) out[d] += pc[PARTIAL_HEAD + d] * w;
            }
            if (scale_finite(out, out, finish_scale(p, hk, row, m, l), D)) continue;
        }
        reference_fallback(f, thread_scratch, b, hk, row);
    }
}

void sdpa_flash_run(sdpa_pool * pool, const sdpa_problem * p, void * scratch, bool serial) {
    flash_plan f;
    make_plan(&f, p);
    f.scratch = (char *)(((uintptr_t)scratch + SCRATCH_ALIGN - 1) & ~(uintptr_t)(SCRATCH_ALIGN - 1));
    /* the reserved workspace (workspace_bytes) fits in size_t, so these offsets do */
    f.partials = (float *)(f.scratch + (size_t)sdpa_pool_threads(pool) * (size_t)f.thread_bytes);
    f.done = (atomic_int *)(f.partials + (f.chunks > 1 ? (size_t)compute_units(&f) * partial_floats(&f) : 0));
    if (f.chunks > 1)
        for (int32_t g = 0; g < p->batch * p->kv_heads * f.blocks; g++) atomic_init(&f.done[g], 0);
    if (serial) {
        for (int32_t u = 0; u < compute_units(&f); u++) compute_unit(&f, u, 0);
        return;
    }
    sdpa_pool_run(pool, compute_unit, &f, compute_units(&f));
}

/* ---- many problems in one dispatch (attendMany, stepMany) ---------------
 * The units of every problem, numbered one after another, on one pool run:
 * each unit is its own problem's (same plan, same units, so the same bits as
 * a call of its own). Threads' scratch is strided by the largest
 * thread_bytes of the plans (a plan reads its areas from dim_pad, so a wider
 * stride changes nothing but where they are); after it the plans, their
 * first units, and each split plan's partials and done counters. */
typedef struct flash_many {
    flash_plan * plans;
    int32_t * first;  /* [n + 1]: plan i owns units first[i] .. first[i+1]-1 */
    int32_t n;
} flash_many;

static uint64_t many_layout(int32_t n_threads, const sdpa_problem * ps, int32_t n, uint64_t * stride) {
    uint64_t tb = 0, split = 0;
    for (int32_t i = 0; i < n; i++) {
        flash_plan f;
        make_plan(&f, &ps[i]);
        if (f.thread_bytes > tb) tb = f.thread_bytes;
        if (f.chunks > 1) split = sdpa_size_add(split, align_up(split_bytes((uint64_t)compute_units(&f), f.dim_pad)));
    }
    *stride = tb;
    uint64_t bytes = sdpa_size_add(SCRATCH_ALIGN, sdpa_size_mul((uint64_t)n_threads, tb));
    bytes = sdpa_size_add(bytes, align_up(sdpa_size_mul((uint64_t)n, sizeof(flash_plan))));
    bytes = sdpa_size_add(bytes, align_up(sdpa_size_mul((uint64_t)n + 1, sizeof(int32_t))));
    return sdpa_size_add(bytes, split);
}

uint64_t sdpa_flash_many_workspace(int32_t n_threads, const sdpa_problem * ps, int32_t n) {
    uint64_t stride;
    return many_layout(n_threads, ps, n, &stride);
}

static void many_unit(void * arg, int32_t unit, int32_t thread) {
    const flash_many * m = arg;
    int32_t lo = 0, hi = m->n - 1;  /* the last plan whose first unit is <= unit */
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) / 2;
        if (m->first[mid] <= unit) lo = mid;
        else hi = mid - 1;
    }
    compute_unit(&m->plans[lo], unit - m->first[lo], thread);
}

void sdpa_flash_run_many(sdpa_pool * pool, const sdpa_problem * ps, int32_t n, void * scratch, bool serial) {
    int64_t total = 0;  /* units are int32: more than that runs problem by problem (the same bits) */
    for (int32_t i = 0; i < n; i++) {
        flash_plan f;
        make_plan(&f, &ps[i]);
        total += compute_units(&f);
    }
    if (total > INT32_MAX) {
        for (int32_t i = 0; i < n; i++) sdpa_flash_run(pool, &ps[i], scratch, serial);
        return;
    }
    uint64_t stride;
    (void)many_layout(sdpa_pool_threads(pool), ps, n, &stride);
    char * base = (char *)(((uintptr_t)scratch + SCRATCH_ALIGN - 1) & ~(uintptr_t)(SCRATCH_ALIGN - 1));
    char * at = base + (size_t)sdpa_pool_threads(pool) * (size_t)stride;
    flash_many m;
    m.n = n;
    m.plans = (flash_plan *)(void *)at;
    at += (size_t)align_up((uint64_t)n * sizeof(flash_plan));
    m.first = (int32_t *)(void *)at;
    at += (size_t)align_up(((uint64_t)n + 1) * sizeof(int32_t));
    int32_t units = 0;
    for (int32_t i = 0; i < n; i++) {
        flash_plan * f = &m.plans[i];
        make_plan(f, &ps[i]);
        f->thread_bytes = stride;
        f->scratch = base;
        f->partials = (float *)(void *)at;
        f->done = (atomic_int *)(f->partials + (f->chunks > 1 ? (size_t)compute_units(f) * partial_floats(f) : 0));
        if (f->chunks > 1) {
            for (int32_t g = 0; g < ps[i].batch * ps[i].kv_heads * f->blocks; g++) atomic_init(&f->done[g], 0);
            at += (size_t)align_up(split_bytes((uint64_t)compute_units(f), f->dim_pad));  /* each plan's partials on a line of their own */
        }
        m.first[i] = units;
        units += compute_units(f);
    }
    m.first[n] = units;
    if (serial) {
        for (int32_t u = 0; u < units; u++) many_unit(&m, u, 0);
        return;
    }
    sdpa_pool_run(pool, many_unit, &m, units);
}
