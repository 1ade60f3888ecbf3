/* flash.c: flash attention on SIMD128 (https://arxiv.org/abs/2205.14135,
 * decode split as in flash-decoding). Shape of the work:
 *
 * For each (b, hk) the query rows that share KV head hk are flattened into
 * R = Sq * r rows (row = i * r + j, head h = hk * r + j), cut into blocks of
 * BLOCK_ROWS rows. A block walks its keys in tiles of TILE_KEYS: scores for
 * all its rows, online softmax (running max m and sum l, rescale on a new
 * max), then acc += p * V (each V row loaded once per 4 rows). Scores come
 * from one kernel over a key-transposed K tile (qk_groups: per head-dim
 * element d, a broadcast q[x][d] times 4 keys per vector, each K vector
 * loaded once for 4 query rows, no horizontal sums): a float32 page's K
 * block is stored that way (cache/kv_format.h), float16 pages are decoded
 * into it, caller tensors transposed into it; int8 pages run Q.K and P.V
 * as integer dot products on their own layouts (int8_scores, int8_values:
 * the same tile loop, other microkernels). Every key's score is the same sum in the same
 * order whatever its source, so cache.attend and customSdpa over the same
 * rows agree bit for bit. When there are few blocks in all (decode), the
 * keys are also cut into chunks so that threads share even B = Hkv = 1; each
 * chunk leaves a partial (m, l, acc), and the last chunk of a block to finish
 * merges them in chunk order. Chunking depends only on the problem, never on
 * the thread count, so the result is bit-identical for any number of threads.
 * While a tile's scores are computed, memory it needs soon is touched so
 * that DRAM reads overlap with compute (see touch_bytes, TOUCH_AHEAD).
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
#include "kernels/simd.h"
#include "cache/page_pool.h"

#include <float.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#define BLOCK_ROWS 8
#define TILE_KEYS 64
#define SPLIT_MAX_UNITS 16    /* split keys only when B * Hkv * blocks is this small */
#define CHUNK_MIN_KEYS 256    /* ...into chunks of at least this many keys */
#define CHUNK_MIN_KEYS_INT8 1024  /* an int8 tile is 4x smaller: longer chunks (measured: MQA-8192 and
                                   * B-4096 5-6% faster, A-8192 the same), fewer first-tile touches */
#define CHUNK_MAX_COUNT 64    /* ...and at most this many chunks */
#define ALIGN 64
_Static_assert(SDPA_PAGE_ROWS % TILE_KEYS == 0, "a key tile never spans two cache pages");

typedef struct flash_plan {
    const sdpa_problem * p;
    int32_t rows;          /* R = Sq * r per (b, hk) */
    int32_t blocks;        /* per (b, hk) */
    int32_t chunks;        /* key chunks per block (1 = no split) */
    int64_t chunk_keys;    /* keys per chunk, a multiple of TILE_KEYS (may pass INT32_MAX) */
    int32_t key_begin;     /* keys before it are outside every row's window (a TILE_KEYS multiple) */
    int32_t dim_pad;       /* D rounded up to 4 */
    uint64_t thread_bytes; /* per-thread scratch, ALIGN multiple (saturating) */
    char * scratch;        /* [n_threads][thread_bytes] then partials */
    float * partials;      /* [unit][BLOCK_ROWS][PARTIAL_HEAD + dim_pad] */
    atomic_int * done;     /* [group]: chunks finished; the last one merges */
} flash_plan;

/* Byte counts are uint64_t and saturate (internal.h): on wasm32 the size_t
 * product of a thread count and a huge head dim would wrap. */
static uint64_t align_up(uint64_t n) {
    return n > UINT64_MAX - (ALIGN - 1) ? UINT64_MAX : (n + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
}

/* q, acc: BLOCK_ROWS x dim_pad; scores: BLOCK_ROWS x TILE_KEYS; m, l; sink;
 * then the K and V tiles a float16 cache is decoded into (an int8 cache's
 * int16 q and weights), each
 * TILE_KEYS x dim_pad; then q broadcast for the key-transposed kernels,
 * BLOCK_ROWS x dim_pad vectors of 4. The q area also holds the reference
 * row's D doubles (see the header). */
_Static_assert(BLOCK_ROWS * sizeof(float) >= sizeof(double), "a reference row fits in the q area");
static uint64_t thread_bytes(int32_t dim_pad) {
    const uint64_t floats = sdpa_size_add(sdpa_size_mul((uint64_t)BLOCK_ROWS * 6 + 2 * TILE_KEYS, (uint64_t)dim_pad),
                                          (uint64_t)BLOCK_ROWS * TILE_KEYS + 2 * BLOCK_ROWS + 4);
    return align_up(sdpa_size_mul(floats, sizeof(float)));
}

static int32_t ceil_div(int32_t a, int32_t b) { return a / b + (a % b != 0); }
static int32_t pad4(int32_t d) { return ceil_div(d, 4) * 4; }

/* A row's partial: m, l, suspect (0 or 1: fall back to the reference), acc. */
#define PARTIAL_HEAD 3
static uint64_t partial_floats_for(int32_t dim_pad) {
    return (uint64_t)BLOCK_ROWS * (PARTIAL_HEAD + (uint64_t)dim_pad);
}

/* Validated problems have n_keys >= 1, B * Sq * Hq * D <= SIZE_MAX / 4 and,
 * by the checks in contract/, B * Sq * Hq and D <= SDPA_INDEX_LIMIT, so these
 * int32 values hold and every count below is >= 1. Key positions may reach
 * INT32_MAX (a paged cache's maxSeqLen costs only its page table): the key
 * arithmetic that rounds or steps past n_keys is int64. */
static void make_plan(flash_plan * f, const sdpa_problem * p) {
    f->p = p;
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
        chunks = ceil_div(keys, (p->kv.pages && p->kv.format->dtype == SDPA_DTYPE_INT8) ? CHUNK_MIN_KEYS_INT8 : CHUNK_MIN_KEYS);
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
    uint64_t bytes = sdpa_size_add(ALIGN, sdpa_size_mul((uint64_t)n_threads, f->thread_bytes));
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
    return sdpa_size_add(sdpa_size_add(ALIGN, sdpa_size_mul((uint64_t)n_threads, thread_bytes(dim_pad))),
                         split_bytes((uint64_t)SPLIT_MAX_UNITS * CHUNK_MAX_COUNT, dim_pad));
}

/* ---- microkernels ------------------------------------------------------ */

/* Scores against a key-transposed tile (cache/kv_format.h: groups of KG
 * keys, element d of key j of a group at [d * KG + j]). Per d, NV vectors of
 * 4 keys are loaded once and serve R query rows, each through a broadcast
 * q[x][d]: R * NV independent multiply-add chains, no horizontal sums, no
 * shuffles. A score is the sum over d in order, whichever rows or keys
 * share its pass. R <= 4, NV <= 4 (R * NV <= 8 accumulators: they stay in
 * registers next to the NV key vectors). qs: q[x][d] already broadcast,
 * [D][4] vectors for the 4 rows of a quad, so that a step's loads all sit at
 * constant offsets from two pointers. Steps d < lines also touch one 64-byte
 * line of each of two regions, ta and tb (see touch_bytes): memory the tile
 * needs next, whose DRAM reads then overlap with this compute, spread out
 * so that they never pile up behind one another. F16: the keys are a float16
 * page's, converted as they are loaded (load4; its registers are why a
 * float16 pass takes NV = 1 for several rows: 8 accumulators spill). */
#define KG SDPA_PAGE_KEY_GROUP
#if defined(__GNUC__)
#define FLASH_INLINE inline __attribute__((always_inline))
#else
#define FLASH_INLINE inline
#endif
/* binary16 -> float32 for finite halves, sign-extended into i32 lanes: sign,
 * exponent and mantissa shifted into place (the sign's copies above the
 * exponent masked off) and scaled by 2^112, normals and subnormals alike, in
 * 3 operations after the widening load. An Inf or NaN would come out as a
 * finite value >= 65536: pages that may hold one are marked
 * (SDPA_PAGE_MARK_NONFINITE) and decoded by f16x4_to_f32x4 instead. */
static inline v128_t f16x4_finite(v128_t h) {
    const v128_t bits = wasm_v128_and(wasm_i32x4_shl(h, 13), wasm_i32x4_splat((int32_t)0x8FFFE000u));
    return wasm_f32x4_mul(bits, wasm_f32x4_splat(0x1p112f));
}

/* 4 float32 values from element i of a float32 (F16 = 0) or float16 (F16 =
 * 1: finite halves only, see f16x4_finite) array. */
static FLASH_INLINE v128_t load4(const void * base, size_t i, const int F16) {
    if (F16) return f16x4_finite(wasm_i32x4_load16x4((const uint16_t *)base + i));
    return wasm_v128_load((const float *)base + i);
}

static FLASH_INLINE uint32_t qk_group_rows(const v128_t * qs, const void * k, int32_t D,
                                           float * s, size_t lds, const int R, const int NV, const int F16,
                                           const uint32_t * ta, const uint32_t * tb, int32_t lines) {
    v128_t acc[4][4];
    uint32_t sink = 0;
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = wasm_f32x4_splat(0.0f);
    for (int32_t d = 0; d < D; d++, qs += 4) {
        if (d < lines) sink |= ta[(size_t)d * 16] | tb[(size_t)d * 16];
        v128_t vk[4];
        for (int v = 0; v < NV; v++) vk[v] = load4(k, (size_t)d * KG + 4 * (size_t)v, F16);
        for (int r = 0; r < R; r++) {
            const v128_t w = qs[r];
            for (int v = 0; v < NV; v++) acc[r][v] = f32x4_fmadd(acc[r][v], w, vk[v]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) wasm_v128_store(s + (size_t)r * lds + 4 * v, acc[r][v]);
    return sink;
}

/* Loads one word of every 64-byte line of n bytes. Run on the V rows of a
 * tile while its scores are computed, it starts their DRAM reads early, so
 * the value pass finds V in cache (wasm has no prefetch instruction;
 * measured: decode over a 64 MiB cache ~35% faster in V8). */
static inline uint32_t touch_bytes(const void * x, size_t n) {
    const uint32_t * w = (const uint32_t *)x;
    uint32_t sink = 0;
    for (size_t i = 0; i < n / 4; i += 16) sink |= w[i];
    return sink;
}

/* The K (value = 0) or V block of the tile at key ts of a page; its bytes. */
static const void * page_tile(const sdpa_kv_view * kv, int32_t b, int32_t hk, int64_t ts, int value) {
    return (const char *)sdpa_kv_block(kv->format, sdpa_kv_page(kv, b, hk, (int32_t)ts), value) +
           (size_t)(ts % SDPA_PAGE_ROWS) * sdpa_kv_row_bytes(kv->format, value);
}
static size_t tile_bytes(const sdpa_kv_view * kv, int value) {
    return (size_t)TILE_KEYS * sdpa_kv_row_bytes(kv->format, value);
}

/* How far ahead (in tiles) a page's K and V are touched. Measured
 * on decode (1 thread, caches cold, chunks of 4 tiles), median ms against
 * touching V of the tile itself and K of the next: 2 tiles ahead 1.10-1.20x
 * faster, 3 tiles 1.17-1.28x, 4 or 6 (the whole chunk at once) 0.75-0.8x.
 * Touching nothing is 1.3-1.5x slower, except with a single row (MHA), where
 * the kernel's own loads stream faster than with touches in between: those
 * touch nothing (float16 too: C-2048 1.80 -> 2.02 ms with touches). int8
 * pages touch even then (C-2048 1.29 -> 1.19 ms, 2 threads 0.79 -> 0.65),
 * at the same distance (1 or 2 tiles measured slower or the same). */
#define TOUCH_AHEAD 3

/* s[x][t] = q_x . k_t for n rows (broadcast q, quads ldqs vectors apart)
 * and keys [0, nt) of a key-transposed tile, float32 or (F16) a float16
 * page's (group g at k + g * ldg elements); s rows are TILE_KEYS apart. Keys
 * go in passes of 8 (float16: 4; 16 for a single row), all rows per pass (4
 * at a time), so a pass's K stays in L1 for every row. Scores are computed
 * up to nt rounded up to the pass: those keys exist in the page (or the
 * decoded tile) and their lanes are independent (dropped by the caller's
 * limits). While a pass runs, it touches its share (the same keys) of two
 * blocks of rows of the same element type, ta_block and tb_block (NULL, or
 * the V and K of the tile TOUCH_AHEAD tiles on), so that their DRAM reads
 * overlap with this compute. */
static FLASH_INLINE uint32_t qk_groups_of(const v128_t * qs, size_t ldqs, int32_t n, const void * k, size_t ldg,
                                          int32_t nt, int32_t D, float * s, const void * ta_block,
                                          const void * tb_block, const int F16) {
    const int32_t step = n == 1 ? 16 : F16 ? 4 : 8;
    const size_t row_bytes = (size_t)D * (F16 ? 2 : 4);
    /* a pass's share of a region: step rows, row_bytes each, a 64-byte line per d */
    const int32_t lines = ta_block ? (int32_t)((size_t)step * row_bytes / 64) : 0;
    uint32_t sink = 0;
    for (int32_t t = 0; t < nt; t += step) {
        const size_t at = (size_t)(t / KG) * ldg + t % KG;
        const void * kt = F16 ? (const void *)((const uint16_t *)k + at) : (const void *)((const float *)k + at);
        const uint32_t * ta = ta_block ? (const uint32_t *)(const void *)((const char *)ta_block + (size_t)t * row_bytes) : NULL;
        const uint32_t * tb = tb_block ? (const uint32_t *)(const void *)((const char *)tb_block + (size_t)t * row_bytes) : ta;
        if (n == 1) {
            sink |= qk_group_rows(qs, kt, D, s + t, TILE_KEYS, 1, 4, F16, ta, tb, lines);
            continue;
        }
        for (int32_t x = 0; x < n; x += 4) {
            const v128_t * qx = qs + (size_t)(x / 4) * ldqs;
            float * sx = s + (size_t)x * TILE_KEYS + t;
            const int32_t l = x == 0 ? lines : 0;
            switch (n - x) {
                case 1: sink |= qk_group_rows(qx, kt, D, sx, TILE_KEYS, 1, F16 ? 1 : 2, F16, ta, tb, l); break;
                case 2: sink |= qk_group_rows(qx, kt, D, sx, TILE_KEYS, 2, F16 ? 1 : 2, F16, ta, tb, l); break;
                case 3: sink |= qk_group_rows(qx, kt, D, sx, TILE_KEYS, 3, F16 ? 1 : 2, F16, ta, tb, l); break;
                default: sink |= qk_group_rows(qx, kt, D, sx, TILE_KEYS, 4, F16 ? 1 : 2, F16, ta, tb, l); break;
            }
        }
    }
    return sink;
}

/* over a float32 tile, or a float16 page's K block in place (finite halves) */
static uint32_t qk_groups(const v128_t * qs, size_t ldqs, int32_t n, const float * k, size_t ldg, int32_t nt,
                          int32_t D, float * s, const void * ta_block, const void * tb_block) {
    return qk_groups_of(qs, ldqs, n, k, ldg, nt, D, s, ta_block, tb_block, 0);
}
static uint32_t qk_groups_f16(const v128_t * qs, size_t ldqs, int32_t n, const uint16_t * k, size_t ldg, int32_t nt,
                              int32_t D, float * s, const void * ta_block, const void * tb_block) {
    return qk_groups_of(qs, ldqs, n, k, ldg, nt, D, s, ta_block, tb_block, 1);
}

/* acc[r][:] += sum_t p[r][t] * v_t[:] for n_rows (<= 4) rows, nt keys, V
 * rows float32 or (F16) a float16 page's, finite halves, in place.
 * Keys go in groups of PV_KEYS, D innermost within a group, so V is read
 * front to back rather than down whole-tile columns. */
#define PV_KEYS 16
static FLASH_INLINE void pv_rows_of(float * acc, size_t lda, const float * p, size_t ldp, int32_t n_rows,
                                    const void * v, size_t ldv, int32_t nt, int32_t D, const int F16) {
    for (int32_t t0 = 0; t0 < nt; t0 += PV_KEYS) {
        const int32_t t1 = nt - t0 < PV_KEYS ? nt : t0 + PV_KEYS;
        const size_t vg = (size_t)t0 * ldv;  /* element offsets into v */
        /* float16: 4 elements per pass (8 accumulators and the conversion's registers spill) */
        if (n_rows == 4 && F16) {
            int32_t d = 0;
            for (; d + 4 <= D; d += 4) {
                v128_t c0 = wasm_v128_load(acc + d), c1 = wasm_v128_load(acc + lda + d);
                v128_t c2 = wasm_v128_load(acc + 2 * lda + d), c3 = wasm_v128_load(acc + 3 * lda + d);
                size_t vt = vg + (size_t)d;
                for (int32_t t = t0; t < t1; t++, vt += ldv) {
                    const v128_t v0 = load4(v, vt, F16);
                    c0 = f32x4_fmadd(c0, wasm_v128_load32_splat(p + t), v0);
                    c1 = f32x4_fmadd(c1, wasm_v128_load32_splat(p + ldp + t), v0);
                    c2 = f32x4_fmadd(c2, wasm_v128_load32_splat(p + 2 * ldp + t), v0);
                    c3 = f32x4_fmadd(c3, wasm_v128_load32_splat(p + 3 * ldp + t), v0);
                }
                wasm_v128_store(acc + d, c0); wasm_v128_store(acc + lda + d, c1);
                wasm_v128_store(acc + 2 * lda + d, c2); wasm_v128_store(acc + 3 * lda + d, c3);
            }
            if (d == D) continue;
        } else if (n_rows == 4) {
            int32_t d = 0;
            for (; d + 8 <= D; d += 8) {
                v128_t c00 = wasm_v128_load(acc + d), c01 = wasm_v128_load(acc + d + 4);
                v128_t c10 = wasm_v128_load(acc + lda + d), c11 = wasm_v128_load(acc + lda + d + 4);
                v128_t c20 = wasm_v128_load(acc + 2 * lda + d), c21 = wasm_v128_load(acc + 2 * lda + d + 4);
                v128_t c30 = wasm_v128_load(acc + 3 * lda + d), c31 = wasm_v128_load(acc + 3 * lda + d + 4);
                size_t vt = vg + (size_t)d;
                for (int32_t t = t0; t < t1; t++, vt += ldv) {
                    const v128_t v0 = load4(v, vt, F16), v1 = load4(v, vt + 4, F16);
                    v128_t w = wasm_v128_load32_splat(p + t);
                    c00 = f32x4_fmadd(c00, w, v0); c01 = f32x4_fmadd(c01, w, v1);
                    w = wasm_v128_load32_splat(p + ldp + t);
                    c10 = f32x4_fmadd(c10, w, v0); c11 = f32x4_fmadd(c11, w, v1);
                    w = wasm_v128_load32_splat(p + 2 * ldp + t);
                    c20 = f32x4_fmadd(c20, w, v0); c21 = f32x4_fmadd(c21, w, v1);
                    w = wasm_v128_load32_splat(p + 3 * ldp + t);
                    c30 = f32x4_fmadd(c30, w, v0); c31 = f32x4_fmadd(c31, w, v1);
                }
                wasm_v128_store(acc + d, c00); wasm_v128_store(acc + d + 4, c01);
                wasm_v128_store(acc + lda + d, c10); wasm_v128_store(acc + lda + d + 4, c11);
                wasm_v128_store(acc + 2 * lda + d, c20); wasm_v128_store(acc + 2 * lda + d + 4, c21);
                wasm_v128_store(acc + 3 * lda + d, c30); wasm_v128_store(acc + 3 * lda + d + 4, c31);
            }
            if (d == D) continue;
        }
        /* one row at a time (fewer than 4 rows, or D % 8 != 0): four chains over 16 dims */
        for (int32_t r = 0; r < n_rows; r++) {
            float * a = acc + r * lda;
            const float * pr = p + r * ldp;
            int32_t d = n_rows == 4 ? D - D % (F16 ? 4 : 8) : 0;
            for (; d + 16 <= D; d += 16) {
                v128_t c0 = wasm_v128_load(a + d), c1 = wasm_v128_load(a + d + 4);
                v128_t c2 = wasm_v128_load(a + d + 8), c3 = wasm_v128_load(a + d + 12);
                size_t vt = vg + (size_t)d;
                for (int32_t t = t0; t < t1; t++, vt += ldv) {
                    const v128_t w = wasm_v128_load32_splat(pr + t);
                    c0 = f32x4_fmadd(c0, w, load4(v, vt, F16));
                    c1 = f32x4_fmadd(c1, w, load4(v, vt + 4, F16));
                    c2 = f32x4_fmadd(c2, w, load4(v, vt + 8, F16));
                    c3 = f32x4_fmadd(c3, w, load4(v, vt + 12, F16));
                }
                wasm_v128_store(a + d, c0); wasm_v128_store(a + d + 4, c1);
                wasm_v128_store(a + d + 8, c2); wasm_v128_store(a + d + 12, c3);
            }
            for (; d + 4 <= D; d += 4) {
                v128_t c = wasm_v128_load(a + d);
                size_t vt = vg + (size_t)d;
                for (int32_t t = t0; t < t1; t++, vt += ldv) c = f32x4_fmadd(c, wasm_v128_load32_splat(pr + t), load4(v, vt, F16));
                wasm_v128_store(a + d, c);
            }
            for (; d < D; d++) {
                float c = a[d];
                size_t vt = vg + (size_t)d;
                for (int32_t t = t0; t < t1; t++, vt += ldv)
                    c += pr[t] * (F16 ? sdpa_f16_to_f32(((const uint16_t *)v)[vt]) : ((const float *)v)[vt]);
                a[d] = c;
            }
        }
    }
}

static void pv_rows(float * acc, size_t lda, const float * p, size_t ldp, int32_t n_rows,
                    const float * v, size_t ldv, int32_t nt, int32_t D) {
    pv_rows_of(acc, lda, p, ldp, n_rows, v, ldv, nt, D, 0);
}
static void pv_rows_f16(float * acc, size_t lda, const float * p, size_t ldp, int32_t n_rows,
                        const uint16_t * v, size_t ldv, int32_t nt, int32_t D) {
    pv_rows_of(acc, lda, p, ldp, n_rows, v, ldv, nt, D, 1);
}

/* ---- one block of rows over one key range ------------------------------ */

typedef struct block_state {
    int32_t n;                      /* rows in this block */
    int32_t row0;                   /* first flattened row */
    int32_t limit[BLOCK_ROWS];      /* keys t < limit exist for the row */
    int32_t lower[BLOCK_ROWS];      /* keys t < lower are outside the row's window */
    const float * mask[BLOCK_ROWS]; /* row of a float mask, or NULL */
    const uint8_t * bmask[BLOCK_ROWS];
    bool suspect[BLOCK_ROWS];       /* a score left float range: recompute the row */
    float * q;                      /* [BLOCK_ROWS][dim_pad] */
    float * acc;                    /* [BLOCK_ROWS][dim_pad] */
    float * s;                      /* [BLOCK_ROWS][TILE_KEYS] */
    float * m;                      /* running max */
    float * l;                      /* running sum */
    uint32_t * sink;                /* where the V-touch loads end up */
    float * ktile;                  /* TILE_KEYS x dim_pad floats: a key-transposed K tile (load_k_groups) */
    float * vtile;
    v128_t * qs;                    /* [BLOCK_ROWS / 4][dim_pad][4]: q[x][d] broadcast */
    /* int8 caches (see "int8 caches" below) */
    bool int_q;                     /* Q.K as integer dot products (else K is decoded) */
    v128_t * qpairs;                /* [BLOCK_ROWS / 4][k_pairs][4]: (q16[2p], q16[2p+1]) broadcast */
    float qscale[BLOCK_ROWS];       /* q[d] ~ q16[d] * qscale */
    int32_t qsum[BLOCK_ROWS];       /* sum_d q16[d] (for the zero points) */
    int16_t * wq;                   /* [BLOCK_ROWS][TILE_KEYS]: a tile's weights p * vscale in int16 */
    float wscale[BLOCK_ROWS];       /* weight ~ wq * wscale */
    int32_t wzp[BLOCK_ROWS];        /* sum_t wq[t] * zero_point[t] */
} block_state;

/* ---- int8 caches: Q.K and P.V as integer dot products -------------------
 *
 * Q.K: each q row is quantized symmetrically to int16, q ~ q16 * qscale with
 * qscale = max|q| / qmax, and multiplied with the keys' int8 values (an
 * I8_KEYS block, cache/kv_format.h): per element pair, i32x4.dot_i16x8_s of
 * 4 keys' (k[d], k[d+1]) with a broadcast (q16[d], q16[d+1]). A lane holds
 * one key's whole sum; the zero point comes off through sum(q16) and the two
 * scales are applied once per score. qmax = 32767 up to D = 257, lower above
 * so that sum q16 * (k - zp) (|k - zp| <= 255) fits an int32 lane; D > 1024
 * (qmax < 8224) decodes K instead. The relative error of q16 is ~1 / (2 qmax).
 *
 * P.V: after the softmax, a row's weights times the value rows' scales, w =
 * p * vscale, are quantized per tile to int16, w ~ wq * wscale with wscale =
 * max(w) / 32767, and multiplied with the values' int8 (an I8_PAIRS block):
 * i32x4.dot_i16x8_s of 2 keys' (v[t][d], v[t+1][d]) for 4 elements with a
 * broadcast (wq[t], wq[t+1]). The zero points come off through sum wq * zp
 * (|wq * (v - zp)| summed over a tile < 2^30), then acc += sum * wscale.
 * The contract's int8 error bound (2e-3 (1 + max|ref|)) covers both. */
#define INT_Q_MAX_DIM 1024
static int32_t int_q_max(int32_t D) {
    const int64_t m = INT32_MAX / (255 * (int64_t)D);
    return m < 32767 ? (int32_t)m : 32767;
}

/* Fills st->qpairs, qscale, qsum for the block's rows (rows past st->n of
 * the last quad are never read); a row whose q cannot be quantized (a
 * non-finite element, or so small that 1 / qscale overflows) gets zeros and
 * is recomputed by the reference (suspect). */
static void quantize_q(const flash_plan * f, block_state * st) {
    const sdpa_problem * p = f->p;
    const int32_t D = p->head_dim;
    st->int_q = false;
    if (!p->kv.pages || p->kv.format->dtype != SDPA_DTYPE_INT8 || D > INT_Q_MAX_DIM) return;
    const int32_t P = p->kv.format->k_pairs, qmax = int_q_max(D);
    /* q rows are zero-padded to dim_pad (a multiple of 4 >= 2P): 4 elements, 2 pairs, per vector */
    for (int32_t x = 0; x < st->n; x++) {
        const float * q = st->q + (size_t)x * f->dim_pad;
        v128_t vbig = wasm_f32x4_splat(0.0f);
        for (int32_t d = 0; d < D; d += 4) vbig = wasm_f32x4_max(vbig, wasm_f32x4_abs(wasm_v128_load(q + d)));
        const float big = f32x4_hmax(vbig);  /* NaN or Inf for a non-finite q */
        const float scale = big > 0.0f ? big / (float)qmax : 1.0f, inv = 1.0f / scale;
        const bool ok = big <= FLT_MAX && inv <= FLT_MAX;
        if (!ok) st->suspect[x] = true;
        const v128_t vinv = wasm_f32x4_splat(ok ? inv : 0.0f);
        v128_t vsum = wasm_i32x4_splat(0);
        v128_t * out = st->qpairs + (size_t)(x / 4) * P * 4 + x % 4;
        for (int32_t i = 0; i < P; i += 2) {
            /* |q * inv| <= qmax (1 + 2^-23): nearest never passes qmax */
            const v128_t q32 = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(q + 2 * i), vinv)));
            vsum = wasm_i32x4_add(vsum, q32);
            const v128_t q16 = wasm_i16x8_narrow_i32x4(q32, q32);  /* pairs (q[2i], q[2i+1]) in i32 lanes 0, 1 */
            out[(size_t)i * 4] = wasm_i32x4_shuffle(q16, q16, 0, 0, 0, 0);
            if (i + 1 < P) out[(size_t)(i + 1) * 4] = wasm_i32x4_shuffle(q16, q16, 1, 1, 1, 1);
        }
        st->qscale[x] = scale;
        st->qsum[x] = wasm_i32x4_extract_lane(vsum, 0) + wasm_i32x4_extract_lane(vsum, 1) +
                      wasm_i32x4_extract_lane(vsum, 2) + wasm_i32x4_extract_lane(vsum, 3);
    }
    st->int_q = true;
}

/* acc[r][2g + h] (keys 8g + 4h .. +3 of the pass) = sum over element pairs
 * of q16 . k for R rows (quad vectors qb, [P][4]) and NG groups of 8 keys
 * (k: the first group's pairs, ldk bytes between groups). */
static FLASH_INLINE uint32_t i8_key_rows(const v128_t * qb, const int8_t * k, size_t ldk, int32_t P,
                                         v128_t acc[4][4], const int R, const int NG,
                                         const uint32_t * ta, const uint32_t * tb, int32_t lines) {
    uint32_t sink = 0;
    for (int r = 0; r < R; r++)
        for (int g = 0; g < 2 * NG; g++) acc[r][g] = wasm_i32x4_splat(0);
    for (int32_t i = 0; i < P; i++, qb += 4, k += 16) {
        if (i < lines) sink |= ta[(size_t)i * 16] | tb[(size_t)i * 16];
        v128_t lo[2], hi[2];
        for (int g = 0; g < NG; g++) {
            const v128_t kv = wasm_v128_load(k + (size_t)g * ldk);
            lo[g] = wasm_i16x8_extend_low_i8x16(kv);
            hi[g] = wasm_i16x8_extend_high_i8x16(kv);
        }
        for (int r = 0; r < R; r++) {
            const v128_t w = qb[r];
            for (int g = 0; g < NG; g++) {
                acc[r][2 * g] = wasm_i32x4_add(acc[r][2 * g], wasm_i32x4_dot_i16x8(lo[g], w));
                acc[r][2 * g + 1] = wasm_i32x4_add(acc[r][2 * g + 1], wasm_i32x4_dot_i16x8(hi[g], w));
            }
        }
    }
    return sink;
}

/* s[x][t] = (acc - zp_t * qsum_x) * (qscale_x * kscale_t) for R rows and
 * 8 NG keys from key t0 (zps, ks: the page's K zero points and scales at t0). */
static FLASH_INLINE void i8_key_scores(const block_state * st, int32_t x0, v128_t acc[4][4], const int8_t * zps,
                                       const float * ks, float * s, const int R, const int NG) {
    for (int g = 0; g < NG; g++) {
        const v128_t z16 = wasm_i16x8_load8x8(zps + 8 * g);
        const v128_t zp[2] = { wasm_i32x4_extend_low_i16x8(z16), wasm_i32x4_extend_high_i16x8(z16) };
        const v128_t sc[2] = { wasm_v128_load(ks + 8 * g), wasm_v128_load(ks + 8 * g + 4) };
        for (int r = 0; r < R; r++) {
            const v128_t qsum = wasm_i32x4_splat(st->qsum[x0 + r]), qs = wasm_f32x4_splat(st->qscale[x0 + r]);
            for (int h = 0; h < 2; h++) {
                const v128_t dot = wasm_i32x4_sub(acc[r][2 * g + h], wasm_i32x4_mul(zp[h], qsum));
                wasm_v128_store(s + (size_t)r * TILE_KEYS + 8 * g + 4 * h,
                                wasm_f32x4_mul(wasm_f32x4_convert_i32x4(dot), wasm_f32x4_mul(qs, sc[h])));
            }
        }
    }
}

/* Scores s[x][t] = q_x . k_t (unscaled, like the float path) for the keys
 * [r0, r0 + nt) of an int8 page (r0 a TILE_KEYS multiple). Keys go in passes
 * of 8 (16 for a single row), 4 rows at a time; scores past nt, up to the
 * pass, are computed from the page's rows and dropped by the caller. A pass
 * touches its share of the blocks ta_block and tb_block (NULL, or the V and
 * K of a tile ahead), as qk_groups does. */
static uint32_t int8_scores(const flash_plan * f, block_state * st, const void * page, int32_t r0, int32_t nt,
                            const void * ta_block, const void * tb_block) {
    const sdpa_page_format * fmt = f->p->kv.format;
    const int32_t P = fmt->k_pairs, n = st->n, D = fmt->dim;
    const size_t ldk = (size_t)P * 2 * SDPA_I8_KEY_GROUP;
    const int8_t * kblock = (const int8_t *)sdpa_kv_block(fmt, page, 0) + (size_t)(r0 / SDPA_I8_KEY_GROUP) * ldk;
    const int8_t * zps = sdpa_kv_zero_points(fmt, page, 0) + r0;
    const float * ks = sdpa_kv_scales(fmt, page, 0) + r0;
    const int32_t step = n == 1 ? 16 : 8;
    /* a pass's share: step rows of D (V) or 2P (K) bytes; a 64-byte line per element pair */
    const int32_t lines = ta_block ? step * D / 64 : 0;
    uint32_t sink = 0;
    v128_t acc[4][4];
    for (int32_t t = 0; t < nt; t += step) {
        const int8_t * kt = kblock + (size_t)(t / SDPA_I8_KEY_GROUP) * ldk;
        const uint32_t * ta = ta_block ? (const uint32_t *)(const void *)((const char *)ta_block + (size_t)t * D) : NULL;
        const uint32_t * tb = tb_block ? (const uint32_t *)(const void *)((const char *)tb_block + (size_t)t * 2 * P) : ta;
        if (n == 1) {
            sink |= i8_key_rows(st->qpairs, kt, ldk, P, acc, 1, 2, ta, tb, lines);
            i8_key_scores(st, 0, acc, zps + t, ks + t, st->s + t, 1, 2);
            continue;
        }
        for (int32_t x = 0; x < n; x += 4) {
            const v128_t * qb = st->qpairs + (size_t)(x / 4) * P * 4;
            float * sx = st->s + (size_t)x * TILE_KEYS + t;
            const int32_t l = x == 0 ? lines : 0;
            switch (n - x) {
                case 1: sink |= i8_key_rows(qb, kt, ldk, P, acc, 1, 1, ta, tb, l); i8_key_scores(st, x, acc, zps + t, ks + t, sx, 1, 1); break;
                case 2: sink |= i8_key_rows(qb, kt, ldk, P, acc, 2, 1, ta, tb, l); i8_key_scores(st, x, acc, zps + t, ks + t, sx, 2, 1); break;
                case 3: sink |= i8_key_rows(qb, kt, ldk, P, acc, 3, 1, ta, tb, l); i8_key_scores(st, x, acc, zps + t, ks + t, sx, 3, 1); break;
                default: sink |= i8_key_rows(qb, kt, ldk, P, acc, 4, 1, ta, tb, l); i8_key_scores(st, x, acc, zps + t, ks + t, sx, 4, 1); break;
            }
        }
    }
    return sink;
}

/* A tile's weights for the integer P.V: per row, w = p * vscale (0 where p
 * is 0: a row past the tile's keys may have an Inf scale) over the nt4
 * scores, quantized to st->wq with its wscale and wzp. A row with an
 * infinite weight (an overflowed value row with scale Inf) is recomputed by
 * the reference; weights below 1e-30 (a tile far below the row's max) add
 * nothing a float32 accumulator would keep: they are dropped. */
static void int8_weights(const flash_plan * f, block_state * st, const void * page, int32_t r0, int32_t nt4) {
    const sdpa_page_format * fmt = f->p->kv.format;
    const float * vs = sdpa_kv_scales(fmt, page, 1) + r0;
    const int8_t * zps = sdpa_kv_zero_points(fmt, page, 1) + r0;
    const v128_t zero = wasm_f32x4_splat(0.0f);
    for (int32_t x = 0; x < st->n; x++) {
        float * w = st->s + (size_t)x * TILE_KEYS;
        int16_t * wq = st->wq + (size_t)x * TILE_KEYS;
        v128_t vmax = zero;
        for (int32_t t = 0; t < nt4; t += 4) {
            /* (p > 0) also drops a NaN p: it comes from a NaN score, whose row is suspect already */
            const v128_t pt = wasm_v128_load(w + t);
            const v128_t wt = wasm_v128_and(wasm_f32x4_mul(pt, wasm_v128_load(vs + t)), wasm_f32x4_gt(pt, zero));
            wasm_v128_store(w + t, wt);
            vmax = wasm_f32x4_pmax(vmax, wt);
        }
        float wmax = f32x4_hmax(vmax);
        if (!(wmax <= FLT_MAX)) {  /* Inf: a value row whose scale is Inf */
            st->suspect[x] = true;
            wmax = 0.0f;
        }
        if (wmax < 1e-30f) {
            memset(wq, 0, sizeof(int16_t) * (size_t)TILE_KEYS);
            st->wscale[x] = 0.0f;
            st->wzp[x] = 0;
            continue;
        }
        const v128_t inv = wasm_f32x4_splat(32767.0f / wmax);
        v128_t zsum = wasm_i32x4_splat(0);
        for (int32_t t = 0; t < nt4; t += 8) {
            const v128_t a = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(w + t), inv)));
            const v128_t b = t + 4 < nt4 ? wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(w + t + 4), inv)))
                                         : wasm_i32x4_splat(0);
            const v128_t q = wasm_i16x8_narrow_i32x4(a, b);
            wasm_v128_store(wq + t, q);
            zsum = wasm_i32x4_add(zsum, wasm_i32x4_dot_i16x8(q, wasm_i16x8_load8x8(zps + t)));
        }
        st->wscale[x] = wmax / 32767.0f;
        st->wzp[x] = wasm_i32x4_extract_lane(zsum, 0) + wasm_i32x4_extract_lane(zsum, 1) +
                     wasm_i32x4_extract_lane(zsum, 2) + wasm_i32x4_extract_lane(zsum, 3);
    }
}

/* acc[r][d .. d + 8 NDV) += (sum_t wq[r][t] v_t - wzp_r) * wscale_r for R
 * rows, keys [0, 2 np) of an I8_PAIRS block (v: pair 0, element d; 2 D
 * bytes between pairs). */
static FLASH_INLINE void i8_value_rows(const block_state * st, int32_t x0, float * acc, size_t lda, const int8_t * v,
                                       size_t ldv, int32_t np, const int R, const int NDV) {
    v128_t sum[4][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 2 * NDV; j++) sum[r][j] = wasm_i32x4_splat(0);
    const int16_t * wq = st->wq + (size_t)x0 * TILE_KEYS;
    for (int32_t i = 0; i < np; i++, v += ldv) {
        v128_t lo[2], hi[2];
        for (int j = 0; j < NDV; j++) {
            const v128_t vv = wasm_v128_load(v + 16 * j);
            lo[j] = wasm_i16x8_extend_low_i8x16(vv);
            hi[j] = wasm_i16x8_extend_high_i8x16(vv);
        }
        for (int r = 0; r < R; r++) {
            const v128_t w = wasm_v128_load32_splat(wq + (size_t)r * TILE_KEYS + 2 * i);
            for (int j = 0; j < NDV; j++) {
                sum[r][2 * j] = wasm_i32x4_add(sum[r][2 * j], wasm_i32x4_dot_i16x8(lo[j], w));
                sum[r][2 * j + 1] = wasm_i32x4_add(sum[r][2 * j + 1], wasm_i32x4_dot_i16x8(hi[j], w));
            }
        }
    }
    for (int r = 0; r < R; r++) {
        const v128_t wzp = wasm_i32x4_splat(st->wzp[x0 + r]), ws = wasm_f32x4_splat(st->wscale[x0 + r]);
        float * a = acc + (size_t)r * lda;
        for (int j = 0; j < 2 * NDV; j++)
            wasm_v128_store(a + 4 * j, f32x4_fmadd(wasm_v128_load(a + 4 * j),
                                                   wasm_f32x4_convert_i32x4(wasm_i32x4_sub(sum[r][j], wzp)), ws));
    }
}

/* acc += p . V for the keys [r0, r0 + nt) of an int8 page, from the weights
 * int8_weights left: 4 rows at a time, 8 elements per pass (16 for a single
 * row); a D % 8 tail element by element. */
static void int8_values(const flash_plan * f, block_state * st, const void * page, int32_t r0, int32_t nt) {
    const sdpa_page_format * fmt = f->p->kv.format;
    const int32_t D = fmt->dim, n = st->n, np = (nt + 1) / 2;
    const size_t Dp = (size_t)f->dim_pad, ldv = 2 * (size_t)D;
    const int8_t * vb = (const int8_t *)sdpa_kv_block(fmt, page, 1) + (size_t)(r0 / 2) * ldv;
    for (int32_t x = 0; x < n; x += 4) {
        const int32_t R = n - x < 4 ? n - x : 4;
        float * acc = st->acc + (size_t)x * Dp;
        int32_t d = 0;
        if (R == 1)
            for (; d + 16 <= D; d += 16) i8_value_rows(st, x, acc + d, Dp, vb + 2 * d, ldv, np, 1, 2);
        for (; d + 8 <= D; d += 8) {
            switch (R) {
                case 1: i8_value_rows(st, x, acc + d, Dp, vb + 2 * d, ldv, np, 1, 1); break;
                case 2: i8_value_rows(st, x, acc + d, Dp, vb + 2 * d, ldv, np, 2, 1); break;
                case 3: i8_value_rows(st, x, acc + d, Dp, vb + 2 * d, ldv, np, 3, 1); break;
                default: i8_value_rows(st, x, acc + d, Dp, vb + 2 * d, ldv, np, 4, 1); break;
            }
        }
        for (; d < D; d++)
            for (int32_t r = 0; r < R; r++) {
                const int16_t * wq = st->wq + (size_t)(x + r) * TILE_KEYS;
                int32_t sum = 0;
                for (int32_t t = 0; t < 2 * np; t++) sum += wq[t] * vb[(size_t)(t / 2) * ldv + 2 * (size_t)d + t % 2];
                acc[(size_t)r * Dp + d] += (float)(sum - st->wzp[x + r]) * st->wscale[x + r];
            }
    }
}

static void block_setup(const flash_plan * f, block_state * st, char * scratch, int32_t b,
                        int32_t hk, int32_t blk) {
    const sdpa_problem * p = f->p;
    const int32_t D = p->head_dim, Dp = f->dim_pad, r = p->group;
    float * base = (float *)scratch;
    st->q = base;
    st->acc = st->q + (size_t)BLOCK_ROWS * Dp;
    st->s = st->acc + (size_t)BLOCK_ROWS * Dp;
    st->m = st->s + (size_t)BLOCK_ROWS * TILE_KEYS;
    st->l = st->m + BLOCK_ROWS;
    st->sink = (uint32_t *)(st->l + BLOCK_ROWS);
    st->ktile = st->l + BLOCK_ROWS + 4;
    st->vtile = st->ktile + (size_t)TILE_KEYS * Dp;
    st->qs = (v128_t *)(void *)(st->vtile + (size_t)TILE_KEYS * Dp);  /* 16-byte aligned */
    /* an int8 cache uses neither decoded tile: they hold its int16 q and weights
     * (8 rows x ceil(D / 2) vectors and 8 x TILE_KEYS int16 <= TILE_KEYS x dim_pad floats) */
    st->qpairs = (v128_t *)(void *)st->ktile;
    st->wq = (int16_t *)(void *)st->vtile;
    st->row0 = blk * BLOCK_ROWS;
    st->n = f->rows - st->row0 < BLOCK_ROWS ? f->rows - st->row0 : BLOCK_ROWS;
    memset(st->q, 0, sizeof(float) * (size_t)BLOCK_ROWS * Dp * 2);  /* q pad + acc */
    for (int32_t x = 0; x < BLOCK_ROWS; x++) {
        st->m[x] = -INFINITY;
        st->l[x] = 0.0f;
        st->limit[x] = 0;
        st->lower[x] = 0;
        st->mask[x] = NULL;
        st->bmask[x] = NULL;
        st->suspect[x] = false;
    }
    for (int32_t x = 0; x < st->n; x++) {
        const int32_t row = st->row0 + x, i = row / r, h = hk * r + row % r;
        const float * q = p->q + (size_t)b * p->q_stride_b + ((size_t)i * p->q_heads + h) * D;
        /* unscaled: scale * q could overflow (or underflow) where scale * (q . k) does not */
        memcpy(st->q + (size_t)x * Dp, q, sizeof(float) * (size_t)D);
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
    }
    quantize_q(f, st);
    if (st->int_q) return;  /* the float kernels' broadcast q is not needed */
    for (int32_t x = 0; x < st->n; x++)
        for (int32_t d = 0; d < D; d++)
            st->qs[((size_t)(x / 4) * Dp + d) * 4 + x % 4] = wasm_f32x4_splat(st->q[(size_t)x * Dp + d]);
}

/* ---- the tile loader: float32 rows in place, other cache dtypes decoded -- */

/* binary16 bits in u32 lanes -> float32, exactly: shifted into a float's
 * exponent/mantissa field and scaled by 2^112 (normals and subnormals alike),
 * Inf/NaN given an all-ones exponent. No per-lane scalar conversion. */
static inline v128_t f16x4_to_f32x4(v128_t h) {
    const v128_t em = wasm_v128_and(h, wasm_i32x4_splat(0x7fff));
    const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
    const v128_t shifted = wasm_i32x4_shl(em, 13);
    const v128_t finite = wasm_f32x4_mul(shifted, wasm_f32x4_splat(0x1p112f));
    const v128_t special = wasm_v128_or(shifted, wasm_i32x4_splat(0x7f800000));
    const v128_t is_special = wasm_i32x4_ge(em, wasm_i32x4_splat(0x7c00));
    return wasm_v128_or(wasm_v128_bitselect(special, finite, is_special), sign);
}

static void decode_f16_row(const uint16_t * h, int32_t D, float * out) {
    int32_t d = 0;
    for (; d + 8 <= D; d += 8) {
        const v128_t x = wasm_v128_load(h + d);
        wasm_v128_store(out + d, f16x4_to_f32x4(wasm_u32x4_extend_low_u16x8(x)));
        wasm_v128_store(out + d + 4, f16x4_to_f32x4(wasm_u32x4_extend_high_u16x8(x)));
    }
    for (; d < D; d++) out[d] = sdpa_f16_to_f32(h[d]);
}

/* V rows [ts, ts + nt) of head (b, hk): float32 rows in place, or a
 * float16 page's rows decoded into the block's V tile (row stride
 * dim_pad; decoded only before the value pass, so the tile being used is the
 * one in L1). *ld: the row stride. */
static const float * load_v_tile(const flash_plan * f, block_state * st, int32_t b, int32_t hk, int32_t ts,
                                 int32_t nt, size_t * ld) {
    const int value = 1;
    const sdpa_kv_view * kv = &f->p->kv;
    if (sdpa_kv_is_f32(kv)) {
        *ld = sdpa_kv_row_stride(kv);
        return sdpa_kv_value(kv, b, hk, ts);
    }
    const sdpa_page_format * fmt = kv->format;
    const void * page = sdpa_kv_page(kv, b, hk, ts);
    const int32_t D = fmt->dim, r0 = ts % SDPA_PAGE_ROWS;
    const size_t Dp = (size_t)f->dim_pad;
    float * tile = st->vtile;
    for (int32_t t = 0; t < nt; t++) decode_f16_row(sdpa_kv_raw_row(fmt, page, r0 + t, value), D, tile + (size_t)t * Dp);
    *ld = Dp;
    return tile;
}

/* Rows [t0, t0 + nt) of a [.., D] row-major float32 K (row stride ldk) into
 * the key-transposed layout at `out` (groups of KG keys, D * KG floats
 * apart), keys nt .. the group's end zero. 4 x 4 blocks go through
 * registers (4 loads, 8 shuffles, 4 stores). The V rows of the same keys
 * (v, stride ldv) are touched meanwhile (see touch_bytes). */
static uint32_t transpose_k_rows(const float * k, size_t ldk, int32_t nt, int32_t D, float * out,
                                 const float * v, size_t ldv) {
    uint32_t sink = 0;
    const int32_t end = ceil_div(nt, KG) * KG;
    int32_t t = 0;
    for (; t + 4 <= nt; t += 4) {
        const float * r0 = k + (size_t)t * ldk, * r1 = r0 + ldk, * r2 = r1 + ldk, * r3 = r2 + ldk;
        float * dst = out + (size_t)(t / KG) * D * KG + t % KG;
        for (int32_t y = 0; y < 4; y++) sink |= touch_bytes(v + (size_t)(t + y) * ldv, (size_t)D * sizeof(float));
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
        if (t < nt) sink |= touch_bytes(v + (size_t)t * ldv, (size_t)D * sizeof(float));
        for (int32_t d = 0; d < D; d++) dst[(size_t)d * KG] = t < nt ? row[d] : 0.0f;
    }
    return sink;
}

/* Keys [ts, ts + nt) of head (b, hk) as a key-transposed tile (groups of KG
 * keys, *ldg floats apart; the score kernels' one layout):
 *   float32 page   its K block, in place;
 *   float16 page   decoded into the block's K tile (whole groups, the same
 *                  layout: one linear pass);
 *   caller tensors transposed into the K tile (their V rows touched meanwhile);
 *   int8 page      (only for D > INT_Q_MAX_DIM, see quantize_q) decoded
 *                  into the K tile.
 * The tile may hold keys past nt up to the group's end (the page's rows, or
 * zeros): their lanes are independent and dropped. */
static const float * load_k_groups(const flash_plan * f, block_state * st, int32_t b, int32_t hk, int32_t ts,
                                   int32_t nt, size_t * ldg, uint32_t * touch) {
    const sdpa_kv_view * kv = &f->p->kv;
    const int32_t D = f->p->head_dim, groups = ceil_div(nt, KG);
    *ldg = (size_t)D * KG;
    if (!kv->pages) {
        *touch |= transpose_k_rows(sdpa_kv_key(kv, b, hk, ts), kv->stride_t, nt, D, st->ktile,
                                   sdpa_kv_value(kv, b, hk, ts), kv->stride_t);
        return st->ktile;
    }
    const sdpa_page_format * fmt = kv->format;
    const void * page = sdpa_kv_page(kv, b, hk, ts);
    const int32_t r0 = ts % SDPA_PAGE_ROWS;  /* a TILE_KEYS multiple, so a KG multiple */
    const void * block = sdpa_kv_block(fmt, page, 0);
    switch (fmt->dtype) {
        case SDPA_DTYPE_FLOAT32: return (const float *)block + (size_t)(r0 / KG) * *ldg;
        case SDPA_DTYPE_FLOAT16:
            decode_f16_row((const uint16_t *)block + (size_t)(r0 / KG) * *ldg, groups * D * KG, st->ktile);
            return st->ktile;
        default: {
            float * row = st->vtile;  /* free: an int8 cache's value pass holds only its weights there */
            for (int32_t t = 0; t < groups * KG; t++) {
                sdpa_kv_decode_row(fmt, page, r0 + t, 0, row);
                float * dst = st->ktile + (size_t)(t / KG) * *ldg + t % KG;
                for (int32_t d = 0; d < D; d++) dst[(size_t)d * KG] = row[d];
            }
            return st->ktile;
        }
    }
}

/* out[d] = acc[d] * inv for d < D (out may be acc); false when an element is
 * not finite. Scales a tile's scores and finishes a row's output. */
static bool scale_finite(float * out, const float * acc, float inv, int32_t D) {
    const v128_t vinv = wasm_f32x4_splat(inv), vinf = wasm_f32x4_splat(INFINITY);
    v128_t finite = wasm_i32x4_splat(-1);
    int32_t d = 0;
    for (; d + 4 <= D; d += 4) {
        const v128_t o = wasm_f32x4_mul(wasm_v128_load(acc + d), vinv);
        wasm_v128_store(out + d, o);
        finite = wasm_v128_and(finite, wasm_f32x4_lt(wasm_f32x4_abs(o), vinf));
    }
    bool all_finite = wasm_i32x4_all_true(finite);
    for (; d < D; d++) {
        out[d] = acc[d] * inv;
        all_finite &= isfinite(out[d]) != 0;
    }
    return all_finite;
}

/* ---- score transforms --------------------------------------------------- */

/* s = c * tanh(s / c) for n scores (n a multiple of 4: a tile's padded
 * scores, whose pad is masked later, so there is no scalar tail). tanh(y) =
 * sign(y) (1 - e) / (1 + e) with e = exp(-2|y|) where that is accurate
 * (|y| >= 1/4), its Taylor series to y^9 below (truncation < 1e-8
 * relative); +-Inf gives +-c, NaN stays NaN. About 2 ulp: a cheaper
 * rational approximation (Eigen's, 7 ulp near 1) was tried and failed the
 * fuzzer, since with c = 50 its error of 4e-7 becomes 2e-5 in a score. */
static void softcap_scores(float * s, int32_t n, float c) {
    const v128_t vc = wasm_f32x4_splat(c), vinv = wasm_f32x4_splat(1.0f / c);
    const v128_t one = wasm_f32x4_splat(1.0f), quarter = wasm_f32x4_splat(0.25f);
    for (int32_t t = 0; t < n; t += 4) {
        const v128_t y = wasm_f32x4_mul(wasm_v128_load(s + t), vinv);
        const v128_t a = wasm_f32x4_abs(y);
        const v128_t e = f32x4_exp_nonpositive(wasm_f32x4_mul(a, wasm_f32x4_splat(-2.0f)));
        const v128_t big = wasm_f32x4_div(wasm_f32x4_sub(one, e), wasm_f32x4_add(one, e));
        const v128_t y2 = wasm_f32x4_mul(a, a);
        v128_t poly = wasm_f32x4_splat(62.0f / 2835.0f);
        poly = f32x4_fmadd(wasm_f32x4_splat(-17.0f / 315.0f), poly, y2);
        poly = f32x4_fmadd(wasm_f32x4_splat(2.0f / 15.0f), poly, y2);
        poly = f32x4_fmadd(wasm_f32x4_splat(-1.0f / 3.0f), poly, y2);
        const v128_t small = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_f32x4_mul(a, y2), poly));
        v128_t th = wasm_v128_bitselect(small, big, wasm_f32x4_lt(a, quarter));
        /* sign of y back (a NaN y stays NaN: its |y| gives NaN in both branches) */
        th = wasm_v128_or(th, wasm_v128_and(y, wasm_i32x4_splat((int32_t)0x80000000u)));
        wasm_v128_store(s + t, wasm_f32x4_mul(th, vc));
    }
}

/* Runs the nt keys of the tile at ts (a multiple of TILE_KEYS, so the tile
 * lies inside one cache page) of KV head (b, hk) through the block's online
 * softmax; the tile is one of the range [t0, t1) being run (which tiles to
 * touch ahead). Returns the touches (see touch_bytes). */
static uint32_t block_tile(const flash_plan * f, block_state * st, int32_t b, int32_t hk, int32_t ts, int32_t nt,
                           int32_t t0, int32_t t1) {
    const sdpa_problem * p = f->p;
    const int32_t D = p->head_dim, Dp = f->dim_pad, n = st->n;
    const int32_t nt4 = (nt + 3) & ~3;
    uint32_t touch = 0;
    size_t ldg = 0, ldv = 0;
    /* The tile's source: float32 rows (caller tensors, float32 pages) are read
     * in place, V touched while the scores run (see touch_bytes); a float16
     * page in place too (f16x4_finite) unless it may hold an Inf or NaN, when
     * it is decoded (K before the scores, V before the value pass); an int8
     * page by integer dot products (int8_scores, int8_values). */
    const sdpa_page_format * fmt = p->kv.format;
    const void * page = p->kv.pages ? sdpa_kv_page(&p->kv, b, hk, ts) : NULL;
    const int32_t r0 = ts % SDPA_PAGE_ROWS;
    const bool int8 = page && fmt->dtype == SDPA_DTYPE_INT8;
    const bool f16 = page && fmt->dtype == SDPA_DTYPE_FLOAT16 && !(sdpa_page_marks(page) & SDPA_PAGE_MARK_NONFINITE);
    const bool f32 = sdpa_kv_is_f32(&p->kv);
    const bool decoded = !f32 && !int8 && !f16;
    const float * v = f32 ? load_v_tile(f, st, b, hk, ts, nt, &ldv) : NULL;
    /* pages read in place (float32, float16, int8), more than one row (int8:
     * any): the K and V of the tile TOUCH_AHEAD tiles on are touched during
     * this tile's scores; the first tile of the range touches its own V and
     * the tiles before that distance at once */
    const bool ahead = page && !decoded && (n > 1 || int8);
    const void * kn = NULL, * vn = NULL;
    if (ahead) {
        if (ts == t0) {
            touch |= touch_bytes(page_tile(&p->kv, b, hk, ts, 1), tile_bytes(&p->kv, 1));
            for (int64_t tj = (int64_t)ts + TILE_KEYS; tj < t1 && tj < (int64_t)ts + TOUCH_AHEAD * TILE_KEYS; tj += TILE_KEYS)
                touch |= touch_bytes(page_tile(&p->kv, b, hk, tj, 0), tile_bytes(&p->kv, 0)) |
                         touch_bytes(page_tile(&p->kv, b, hk, tj, 1), tile_bytes(&p->kv, 1));
        }
        if ((int64_t)ts + TOUCH_AHEAD * TILE_KEYS < t1) {
            kn = page_tile(&p->kv, b, hk, ts + TOUCH_AHEAD * TILE_KEYS, 0);
            vn = page_tile(&p->kv, b, hk, ts + TOUCH_AHEAD * TILE_KEYS, 1);
        }
    }
    /* 1. scores s[x][t] = q_x . k_t */
    if (st->int_q) {
        touch |= int8_scores(f, st, page, r0, nt, vn, kn);
    } else if (f16) {
        ldg = (size_t)D * KG;
        touch |= qk_groups_f16(st->qs, (size_t)Dp * 4, n, (const uint16_t *)sdpa_kv_block(fmt, page, 0) + (size_t)(r0 / KG) * ldg,
                               ldg, nt, D, st->s, vn, kn);
    } else {
        const float * kg = load_k_groups(f, st, b, hk, ts, nt, &ldg, &touch);
        /* (the touches assume float32 rows: an int8 page decoded here touches nothing) */
        touch |= qk_groups(st->qs, (size_t)Dp * 4, n, kg, ldg, nt, D, st->s, f32 ? vn : NULL, f32 ? kn : NULL);
    }
    /* 2. scale, mask, then online softmax per row */
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
        v128_t vsum = wasm_f32x4_splat(0.0f);
        for (int32_t t = 0; t < nt4; t += 4) {
            const v128_t e = f32x4_exp_nonpositive(wasm_f32x4_sub(wasm_v128_load(s + t), vm));
            wasm_v128_store(s + t, e);
            vsum = wasm_f32x4_add(vsum, e);
        }
        st->l[x] += f32x4_hsum(vsum);
    }
    /* 3. acc += p . V */
    if (int8) {
        int8_weights(f, st, page, r0, nt4);
        int8_values(f, st, page, r0, nt);
        return touch;
    }
    if (f16) {
        const uint16_t * vh = sdpa_kv_raw_row(fmt, page, r0, 1);
        for (int32_t x = 0; x < n; x += 4)
            pv_rows_f16(st->acc + (size_t)x * Dp, (size_t)Dp, st->s + (size_t)x * TILE_KEYS, TILE_KEYS,
                        n - x < 4 ? n - x : 4, vh, (size_t)D, nt, D);
        return touch;
    }
    if (decoded) v = load_v_tile(f, st, b, hk, ts, nt, &ldv);
    for (int32_t x = 0; x < n; x += 4) {
        const int32_t rows = n - x < 4 ? n - x : 4;
        pv_rows(st->acc + (size_t)x * Dp, (size_t)Dp, st->s + (size_t)x * TILE_KEYS, TILE_KEYS, rows, v, ldv, nt, D);
    }
    return touch;
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
    uint32_t touch = 0;
    if (with_sinks && f->p->sink_tokens > 0) {
        /* the tiles [0, sink_t1) holding a sink row, up to the range below (t0 is a tile
         * multiple, so no tile is run twice) and the causal end */
        int64_t sink_t1 = ((int64_t)f->p->sink_tokens + TILE_KEYS - 1) / TILE_KEYS * TILE_KEYS;
        if (sink_t1 > t0) sink_t1 = t0;
        if (sink_t1 > end) sink_t1 = end;
        for (int32_t ts = 0; ts < sink_t1; ts += TILE_KEYS)
            touch |= block_tile(f, st, b, hk, ts, sink_t1 - ts < TILE_KEYS ? (int32_t)sink_t1 - ts : TILE_KEYS, 0, (int32_t)sink_t1);
    }
    for (int64_t ts = t0; ts < t1; ts += TILE_KEYS)  /* int64: t1 may be near INT32_MAX */
        touch |= block_tile(f, st, b, hk, (int32_t)ts, t1 - ts < TILE_KEYS ? (int32_t)(t1 - ts) : TILE_KEYS, t0, t1);
    *st->sink |= touch;  /* a store the compiler must keep, so the touches stay */
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

void sdpa_flash_run(sdpa_pool * pool, const sdpa_problem * p, void * scratch) {
    flash_plan f;
    make_plan(&f, p);
    f.scratch = (char *)(((uintptr_t)scratch + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
    /* the reserved workspace (workspace_bytes) fits in size_t, so these offsets do */
    f.partials = (float *)(f.scratch + (size_t)sdpa_pool_threads(pool) * (size_t)f.thread_bytes);
    f.done = (atomic_int *)(f.partials + (f.chunks > 1 ? (size_t)compute_units(&f) * partial_floats(&f) : 0));
    if (f.chunks > 1)
        for (int32_t g = 0; g < p->batch * p->kv_heads * f.blocks; g++) atomic_init(&f.done[g], 0);
    sdpa_pool_run(pool, compute_unit, &f, compute_units(&f));
}
