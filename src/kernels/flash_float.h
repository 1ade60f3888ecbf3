/* flash_float.h: the microkernels of flash.c's tile loop for float32 and
 * float16 keys and values: Q.K against a key-transposed tile (f32_qk_tile,
 * K_F32_TRANSPOSED, K_F32_PAGE, K_F16_PAGE and the decoded sources), P.V
 * over value rows (f32_pv_tile, V_F32_ROWS, V_F16_PAGE and the decoded ones), and
 * the float16 conversions that feed them. Included by flash.c alone, like
 * flash_int8.h and flash_int4.h, so that they compile into its translation
 * unit and inline into the tile loop. */
#ifndef SDPA_FLASH_FLOAT_H
#define SDPA_FLASH_FLOAT_H

#include "kernels/flash_private.h"

#include <stddef.h>
#include <stdint.h>

/* Scores against a key-transposed tile (cache/kv_format.h: groups of KG
 * keys, element d of key j of a group at [d * KG + j]). Per d, NV vectors of
 * 4 keys are loaded once and serve R query rows, each through a broadcast
 * q[x][d]: R * NV independent multiply-add chains, no horizontal sums, no
 * shuffles. A score is the sum over d in order, whichever rows or keys
 * share its pass. R <= 4, NV <= 4 (R * NV <= 8 accumulators: they stay in
 * registers next to the NV key vectors). qs: q[x][d] already broadcast,
 * [D][4] vectors for the 4 rows of a quad, so that a step's loads all sit at
 * constant offsets from two pointers. Steps d < lines also touch one cache
 * line of each of two regions, ta and tb (see touch_bytes): memory the tile
 * needs next, whose DRAM reads then overlap with this compute, spread out
 * so that they never pile up behind one another. F16: the keys are a float16
 * page's, converted as they are loaded (load4): a single row's (R = 1);
 * several rows convert each group into L1 once instead (tile_scores_f16). */
#define KG SDPA_PAGE_KEY_GROUP
/* 4 float32 values from element i of a float32 (F16 = 0) or float16 (F16 =
 * 1: finite halves only, see f16x4_finite; F16_SCALED: the same times
 * 2^-112, f16x4_finite_scaled) array. */
#define F16_SCALED 2
static FLASH_INLINE v128_t load4(const void * base, size_t i, const int F16) {
    if (F16 == F16_SCALED) return f16x4_finite_scaled(wasm_i32x4_load16x4((const uint16_t *)base + i));
    if (F16) return f16x4_finite(wasm_i32x4_load16x4((const uint16_t *)base + i));
    return wasm_v128_load((const float *)base + i);
}
/* The same for one element (the scalar tails). */
static FLASH_INLINE float load1(const void * base, size_t i, const int F16) {
    if (F16 == F16_SCALED) return sdpa_f16_to_f32(((const uint16_t *)base)[i]) * 0x1p-112f;
    if (F16) return sdpa_f16_to_f32(((const uint16_t *)base)[i]);
    return ((const float *)base)[i];
}

/* acc[r][v] += q[r][d] * k[d][4v .. 4v+4) for one head-dim element d */
static FLASH_INLINE void qk_step_of(v128_t acc[4][4], const v128_t * qs, const void * k, int32_t d, const int R,
                                 const int NV, const int F16) {
    v128_t vk[4];
    for (int v = 0; v < NV; v++) vk[v] = load4(k, (size_t)d * KG + 4 * (size_t)v, F16);
    for (int r = 0; r < R; r++) {
        const v128_t w = qs[r];
        for (int v = 0; v < NV; v++) acc[r][v] = f32x4_fmadd(acc[r][v], w, vk[v]);
    }
}

static FLASH_INLINE uint32_t qk_rows_of(const v128_t * qs, const void * k, int32_t D,
                                        float * s, size_t lds, const int R, const int NV, const int F16,
                                        const uint32_t * ta, const uint32_t * tb, int32_t lines) {
    v128_t acc[4][4];
    uint32_t touched = 0;
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = wasm_f32x4_splat(0.0f);
    /* the steps that touch, then the rest: one loop with a branch per step
     * measured slower (V8 kept the touch word in memory across the loop) */
    int32_t d = 0;
    for (const int32_t touching = lines < D ? lines : D; d < touching; d++, qs += 4) {
        touched |= ta[(size_t)d * SDPA_CACHE_LINE_WORDS] | tb[(size_t)d * SDPA_CACHE_LINE_WORDS];
        qk_step_of(acc, qs, k, d, R, NV, F16);
    }
    for (; d < D; d++, qs += 4) qk_step_of(acc, qs, k, d, R, NV, F16);
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++) wasm_v128_store(s + (size_t)r * lds + 4 * v, acc[r][v]);
    return touched;
}

/* s[x][t] = q_x . k_t for n rows (broadcast q, quads ldqs vectors apart)
 * and keys [0, nt) of a key-transposed tile, float32 or (F16) a float16
 * page's (group g at k + g * ldg elements); s rows are TILE_KEYS apart. Keys
 * go in passes of 8 (16 for a single row), all rows per pass (4
 * at a time), so a pass's K stays in L1 for every row. Scores are computed
 * up to nt rounded up to the pass: those keys exist in the page (or the
 * decoded tile) and their lanes are independent (dropped by the caller's
 * limits). While a pass runs, it touches its share (the same keys) of two
 * blocks of rows, tr->a and tr->b (NULL, or the V and K of the tile
 * TOUCH_AHEAD tiles on: see "touch-ahead"), so that their DRAM reads
 * overlap with this compute. */
static FLASH_INLINE uint32_t qk_tile_of(const v128_t * qs, size_t ldqs, int32_t n, const void * k, size_t ldg,
                                        int32_t nt, int32_t D, float * s, const touch_rows * tr, const int F16) {
    const int32_t step = n == 1 ? 16 : 8;
    const int32_t lines = touch_lines(tr, step);
    uint32_t touched = 0;
    for (int32_t t = 0; t < nt; t += step) {
        const size_t at = (size_t)(t / KG) * ldg + t % KG;
        const void * kt = F16 ? (const void *)((const uint16_t *)k + at) : (const void *)((const float *)k + at);
        const uint32_t * ta, * tb;
        touch_pass(tr, t, &ta, &tb);
        if (n == 1) {
            touched |= qk_rows_of(qs, kt, D, s + t, TILE_KEYS, 1, 4, F16, ta, tb, lines);
            continue;
        }
        for (int32_t x = 0; x < n; x += 4) {
            const v128_t * qx = qs + (size_t)(x / 4) * ldqs;
            float * sx = s + (size_t)x * TILE_KEYS + t;
            const int32_t l = x == 0 ? lines : 0;
            switch (n - x) {
                case 1: touched |= qk_rows_of(qx, kt, D, sx, TILE_KEYS, 1, 2, F16, ta, tb, l); break;
                case 2: touched |= qk_rows_of(qx, kt, D, sx, TILE_KEYS, 2, 2, F16, ta, tb, l); break;
                case 3: touched |= qk_rows_of(qx, kt, D, sx, TILE_KEYS, 3, 2, F16, ta, tb, l); break;
                default: touched |= qk_rows_of(qx, kt, D, sx, TILE_KEYS, 4, 2, F16, ta, tb, l); break;
            }
        }
    }
    return touched;
}

/* over a float32 tile, or a float16 page's K block in place (finite halves) */
static uint32_t f32_qk_tile(const v128_t * qs, size_t ldqs, int32_t n, const float * k, size_t ldg, int32_t nt,
                            int32_t D, float * s, const touch_rows * tr) {
    return qk_tile_of(qs, ldqs, n, k, ldg, nt, D, s, tr, 0);
}
static uint32_t f16_qk_tile(const v128_t * qs, size_t ldqs, int32_t n, const uint16_t * k, size_t ldg, int32_t nt,
                            int32_t D, float * s, const touch_rows * tr, bool scaled) {
    return scaled ? qk_tile_of(qs, ldqs, n, k, ldg, nt, D, s, tr, F16_SCALED)
                  : qk_tile_of(qs, ldqs, n, k, ldg, nt, D, s, tr, 1);
}

/* acc[r][:] += sum_t p[r][t] * v_t[:] for n_rows (<= 4) rows, nt keys, V
 * rows float32 or (F16) a float16 page's, finite halves, in place (a single
 * row's: several rows convert each PV_KEYS rows once, tile_values_f16). pw: the
 * 4 rows' weights broadcast, [t][4] from p's key 0 (broadcast_weights), read
 * when n_rows == 4 (else unused, may be NULL).
 * Keys go in groups of PV_KEYS, D innermost within a group, so V is read
 * front to back rather than down whole-tile columns. */
#define PV_KEYS 16
static FLASH_INLINE void pv_rows_of(float * acc, size_t lda, const float * p, size_t ldp, const v128_t * pw,
                                    int32_t n_rows, const void * v, size_t ldv, int32_t nt, int32_t D, const int F16) {
    for (int32_t t0 = 0; t0 < nt; t0 += PV_KEYS) {
        const int32_t t1 = nt - t0 < PV_KEYS ? nt : t0 + PV_KEYS;
        const size_t vg = (size_t)t0 * ldv;  /* element offsets into v */
        if (n_rows == 4) {
            int32_t d = 0;
            for (; d + 8 <= D; d += 8) {
                v128_t c00 = wasm_v128_load(acc + d), c01 = wasm_v128_load(acc + d + 4);
                v128_t c10 = wasm_v128_load(acc + lda + d), c11 = wasm_v128_load(acc + lda + d + 4);
                v128_t c20 = wasm_v128_load(acc + 2 * lda + d), c21 = wasm_v128_load(acc + 2 * lda + d + 4);
                v128_t c30 = wasm_v128_load(acc + 3 * lda + d), c31 = wasm_v128_load(acc + 3 * lda + d + 4);
                size_t vt = vg + (size_t)d;
                const v128_t * w = pw + (size_t)t0 * 4;
                for (int32_t t = t0; t < t1; t++, vt += ldv, w += 4) {
                    const v128_t v0 = load4(v, vt, F16), v1 = load4(v, vt + 4, F16);
                    c00 = f32x4_fmadd(c00, w[0], v0); c01 = f32x4_fmadd(c01, w[0], v1);
                    c10 = f32x4_fmadd(c10, w[1], v0); c11 = f32x4_fmadd(c11, w[1], v1);
                    c20 = f32x4_fmadd(c20, w[2], v0); c21 = f32x4_fmadd(c21, w[2], v1);
                    c30 = f32x4_fmadd(c30, w[3], v0); c31 = f32x4_fmadd(c31, w[3], v1);
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
            int32_t d = n_rows == 4 ? D - D % 8 : 0;
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
                    c += pr[t] * load1(v, vt, F16);
                a[d] = c;
            }
        }
    }
}

static void f32_pv_tile(float * acc, size_t lda, const float * p, size_t ldp, const v128_t * pw, int32_t n_rows,
                        const float * v, size_t ldv, int32_t nt, int32_t D) {
    pv_rows_of(acc, lda, p, ldp, pw, n_rows, v, ldv, nt, D, 0);
}
static void f16_pv_tile(float * acc, size_t lda, const float * p, size_t ldp, int32_t n_rows,
                        const uint16_t * v, size_t ldv, int32_t nt, int32_t D) {
    pv_rows_of(acc, lda, p, ldp, NULL, n_rows, v, ldv, nt, D, F16_SCALED);
}

/* ---- float16 rows converted to float32 --------------------------------- */

/* D halves (any: Inf and NaN exact) -> float32. */
static void decode_f16_row(const uint16_t * h, int32_t D, float * out) {
    int32_t d = 0;
    for (; d + 8 <= D; d += 8) {
        const v128_t x = wasm_v128_load(h + d);
        wasm_v128_store(out + d, f16x4_to_f32x4(wasm_u32x4_extend_low_u16x8(x)));
        wasm_v128_store(out + d + 4, f16x4_to_f32x4(wasm_u32x4_extend_high_u16x8(x)));
    }
    for (; d < D; d++) out[d] = sdpa_f16_to_f32(h[d]);
}

/* n finite halves (a block marked as holding no Inf / NaN) -> float32, as
 * load4 / load1 convert them (F16_SCALED: times 2^-112, the other factor of
 * each product carrying the 2^112). */
static FLASH_INLINE void convert_halves(const uint16_t * h, size_t n, float * out, const int F16) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const v128_t a = load4(h, i, F16), b = load4(h, i + 4, F16);
        wasm_v128_store(out + i, a);
        wasm_v128_store(out + i + 4, b);
    }
    for (; i < n; i++) out[i] = load1(h, i, F16);
}

#endif
