/* flash_int4.h: the microkernels of flash.c's tile loop for int4 blocks
 * (K_I4_PAGE, V_I4_PAGE): Q.K and P.V as integer dot products on nibbles
 * unpacked in registers (one AND or one shift per 16 bytes), never a decoded
 * tile. Included by flash.c alone (flash_int8.h says why).
 *
 * An int4 element is q * scale_g + offset_g, q = 0..15, with a float16 scale
 * and offset per group g of SDPA_I4_GROUP = 64 elements of D (one group a
 * row at head size 64; cache/kv_format.h).
 *
 * Q.K: q is quantized to int16 as for int8 (flash_int8.h i8_quant_q_block, qmax
 * 32767: a group's sum 64 * 15 * 32767 fits an int32 whatever D), so
 *   q . k ~ qscale * sum_g (scale_g * sum_{d in g} q16[d] q[d] + offset_g * sum_{d in g} q16[d])
 * The inner sums are i32x4.dot_i16x8_s of 4 keys' nibble pairs (an I4_KEYS
 * block's low nibbles are I8_KEYS' pair 2j, its high nibbles pair 2j + 1)
 * with a broadcast q16 pair; per group, the scales and offsets of 4 keys
 * are one float16 load each, and the group's partial scores are added into
 * the tile's score rows in memory (so the accumulators stay as few as
 * int8's: 8 and the data fit V8's 16 SIMD registers).
 *
 * P.V: per group g, the weights w = p * scale_g of a tile's keys differ, so
 * each group gets its own int16 weights, quantized relative to the group's
 * largest |w| (as int8's), and
 *   acc[d] += wscale_g * sum_t wq_g[t] q_t[d] + sum_t p_t offset_g[t]
 * with the dot over pairs of keys (an I4_PAIRS block: the low nibbles of 16
 * bytes are I8_PAIRS' elements d0 .. d0+7 of 2 keys, the high ones d0+8 ..
 * d0+15) and the offset term a float sum per row and group.
 *
 * Errors: a score moves by the int16 rounding of q as for int8 (relative
 * 1 / 65534 of max|q| per element), a value sum by 1 / 65534 of the group's
 * largest weight per key; the contract's int8 bound covers both. A page
 * holding a NaN group (marked on write) is decoded instead (K_DECODED,
 * V_DECODED), so the float16 scales read here are finite. */
#ifndef SDPA_FLASH_INT4_H
#define SDPA_FLASH_INT4_H

#include "kernels/flash_private.h"

#include <string.h>

/* 4 float32 from 4 finite float16 at h (the page is not marked). */
static FLASH_INLINE v128_t half4(const uint16_t * h) {
    return f16x4_finite(wasm_i32x4_load16x4(h));
}

/* acc[r][2g + h] (keys 8g + 4h .. + 3 of the pass) += q16 . nibbles over the
 * quads [j0, j1) of one group, for R rows (quad vectors qb: pair i of row r
 * at qb[i * 4 + r]) and NG groups of 8 keys (k: the first key group's quad 0,
 * ldk bytes between key groups). Quads j < lines also touch a line of ta
 * and tb. */
static FLASH_INLINE uint32_t i4_qk_group(const v128_t * qb, const uint8_t * k, size_t ldk, int32_t j0, int32_t j1,
                                         v128_t acc[4][4], const int R, const int NG,
                                         const uint32_t * ta, const uint32_t * tb, int32_t lines) {
    uint32_t touched = 0;
    const v128_t low = wasm_i8x16_splat(0x0f);
    for (int r = 0; r < R; r++)
        for (int g = 0; g < 2 * NG; g++) acc[r][g] = wasm_i32x4_splat(0);
    for (int32_t j = j0; j < j1; j++) {
        if (j < lines) touched |= ta[(size_t)j * SDPA_CACHE_LINE_WORDS] | tb[(size_t)j * SDPA_CACHE_LINE_WORDS];
        v128_t lo[2][2], hi[2][2];
        for (int g = 0; g < NG; g++) {
            const v128_t kv = wasm_v128_load(k + (size_t)g * ldk + (size_t)j * 16);
            const v128_t n0 = wasm_v128_and(kv, low), n1 = wasm_v128_and(wasm_u16x8_shr(kv, 4), low);
            lo[g][0] = wasm_u16x8_extend_low_u8x16(n0);
            lo[g][1] = wasm_u16x8_extend_high_u8x16(n0);
            hi[g][0] = wasm_u16x8_extend_low_u8x16(n1);
            hi[g][1] = wasm_u16x8_extend_high_u8x16(n1);
        }
        for (int r = 0; r < R; r++) {
            const v128_t w0 = qb[(size_t)(2 * j) * 4 + r], w1 = qb[(size_t)(2 * j + 1) * 4 + r];
            for (int g = 0; g < NG; g++)
                for (int h = 0; h < 2; h++)
                    acc[r][2 * g + h] = wasm_i32x4_add(acc[r][2 * g + h],
                                                       wasm_i32x4_add(wasm_i32x4_dot_i16x8(lo[g][h], w0),
                                                                      wasm_i32x4_dot_i16x8(hi[g][h], w1)));
        }
    }
    return touched;
}

/* Adds group g's part of the scores of R rows and 8 NG keys: s += acc *
 * scale + offset * qgroup; the first group stores, the last multiplies by
 * qscale (qscale, qgroup: the R rows', qgroup G floats a row). sc, off: the
 * group's scales and offsets (float32, converted once per tile) at the
 * pass's first key. */
static FLASH_INLINE void i4_qk_dequant(const float * qscale, const float * qgroup, int32_t G, int32_t g, v128_t acc[4][4],
                                       const float * sc, const float * off, float * s, const int R, const int NG) {
    for (int kg = 0; kg < NG; kg++)
        for (int h = 0; h < 2; h++) {
            const v128_t vs = wasm_v128_load(sc + 8 * kg + 4 * h), vo = wasm_v128_load(off + 8 * kg + 4 * h);
            for (int r = 0; r < R; r++) {
                float * at = s + (size_t)r * TILE_KEYS + 8 * kg + 4 * h;
                const v128_t qg = wasm_f32x4_splat(qgroup[(size_t)r * G + g]);
                v128_t v = wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(acc[r][2 * kg + h]), vs),
                                          wasm_f32x4_mul(vo, qg));
                if (g > 0) v = wasm_f32x4_add(wasm_v128_load(at), v);
                if (g == G - 1) v = wasm_f32x4_mul(v, wasm_f32x4_splat(qscale[r]));
                wasm_v128_store(at, v);
            }
        }
}

/* One pass of R rows (qb, qscale, qgroup: theirs) over 8 NG keys, group by
 * group (side: the tile's scales then offsets per group, TILE_KEYS floats
 * each, at the pass's first key). */
static FLASH_INLINE uint32_t i4_qk_rows(const float * qscale, const float * qgroup, const v128_t * qb, const uint8_t * kt,
                                        size_t ldk, int32_t Q, int32_t G, const float * side, float * s,
                                        const int R, const int NG, const uint32_t * ta, const uint32_t * tb, int32_t lines) {
    uint32_t touched = 0;
    v128_t acc[4][4];
    for (int32_t g = 0; g < G; g++) {
        const int32_t j0 = g * (SDPA_I4_GROUP / 4), j1 = j0 + SDPA_I4_GROUP / 4 < Q ? j0 + SDPA_I4_GROUP / 4 : Q;
        touched |= i4_qk_group(qb, kt, ldk, j0, j1, acc, R, NG, ta, tb, lines);
        const float * sc = side + (size_t)g * 2 * TILE_KEYS;
        i4_qk_dequant(qscale, qgroup, G, g, acc, sc, sc + TILE_KEYS, s, R, NG);
    }
    return touched;
}

/* The float16 scales and offsets of a block's G groups for a tile's first
 * n keys (n a multiple of 4; scales, offsets: group 0's at the tile's first
 * key, ldg halves between groups) as float32, side[g][0][t] scales and
 * side[g][1][t] offsets: converted once per tile, for every row of the block. */
static void i4_side_tile(const uint16_t * scales, const uint16_t * offsets, size_t ldg, int32_t G, int32_t n, float * side) {
    for (int32_t g = 0; g < G; g++) {
        const uint16_t * sc = scales + (size_t)g * ldg, * off = offsets + (size_t)g * ldg;
        float * out = side + (size_t)g * 2 * TILE_KEYS;
        for (int32_t t = 0; t < n; t += 4) {
            wasm_v128_store(out + t, half4(sc + t));
            wasm_v128_store(out + TILE_KEYS + t, half4(off + t));
        }
    }
}

/* Scores s[x][t] = q_x . k_t (unscaled; rows of s TILE_KEYS floats apart)
 * for n rows (qpairs, qscale: i8_quant_q_block's, qgroup its group sums, G
 * a row) and the keys [0, nt) of an I4_KEYS tile: k its first key group (Q
 * quads of 8 keys, ldk bytes between groups), kscale and koffset group 0's
 * float16 scales and offsets at the tile's first key (ldg halves between
 * groups), converted into `side` (2 G TILE_KEYS floats). Passes of 8 keys
 * (16 for a single row), 4 rows at a time; scores past nt, up to the pass,
 * come from the page's rows and are dropped by the caller. Touches as
 * i8_qk_tile. */
static uint32_t i4_qk_tile(const v128_t * qpairs, const float * qscale, const float * qgroup, int32_t n,
                           const uint8_t * k, size_t ldk, int32_t Q, int32_t G, const uint16_t * kscale,
                           const uint16_t * koffset, size_t ldg, float * side_rows, int32_t nt, float * s,
                           const touch_rows * tr) {
    const int32_t P = 2 * Q;
    const int32_t step = n == 1 ? 16 : 8;
    const int32_t lines = touch_lines(tr, step);  /* a cache line per quad */
    i4_side_tile(kscale, koffset, ldg, G, (nt + step - 1) / step * step, side_rows);
    uint32_t touched = 0;
    for (int32_t t = 0; t < nt; t += step) {
        const uint8_t * kt = k + (size_t)(t / SDPA_I8_KEY_GROUP) * ldk;
        const float * side = side_rows + t;
        const uint32_t * ta, * tb;
        touch_pass(tr, t, &ta, &tb);
        if (n == 1) {
            touched |= i4_qk_rows(qscale, qgroup, qpairs, kt, ldk, Q, G, side, s + t, 1, 2, ta, tb, lines);
            continue;
        }
        for (int32_t x = 0; x < n; x += 4) {
            const v128_t * qb = qpairs + (size_t)(x / 4) * P * 4;
            const float * qsx = qscale + x, * qgx = qgroup + (size_t)x * G;
            float * sx = s + (size_t)x * TILE_KEYS + t;
            const int32_t l = x == 0 ? lines : 0;
            switch (n - x) {
                case 1: touched |= i4_qk_rows(qsx, qgx, qb, kt, ldk, Q, G, side, sx, 1, 1, ta, tb, l); break;
                case 2: touched |= i4_qk_rows(qsx, qgx, qb, kt, ldk, Q, G, side, sx, 2, 1, ta, tb, l); break;
                case 3: touched |= i4_qk_rows(qsx, qgx, qb, kt, ldk, Q, G, side, sx, 3, 1, ta, tb, l); break;
                default: touched |= i4_qk_rows(qsx, qgx, qb, kt, ldk, Q, G, side, sx, 4, 1, ta, tb, l); break;
            }
        }
    }
    return touched;
}

/* A tile's weights for the integer P.V over an int4 V block, per row x of
 * n (p_rows: the softmax weights, TILE_KEYS apart) and group g of G: w = p *
 * scale_g over the nt4 keys, quantized to int16 relative to the group's
 * largest |w| (wq_rows[x][g], TILE_KEYS each; wgroup[x][g][0] = its scale),
 * and wgroup[x][g][1] = sum_t p_t offset_g[t]. The tile's float16 scales and
 * offsets (vscale, voffset: group 0's at its first key, ldg halves between
 * groups) are converted once per tile for all rows (into `side`). Weights below 1e-30 are dropped (as
 * i8_quant_p_tile). A NaN p (a NaN score: the row is suspect already) is
 * dropped by the max and quantizes to 0; no mask is needed for the keys
 * past the tile's end (p = 0 there, and the page's scales are finite). */
static void i4_quant_p_tile(const float * p_rows, int32_t n, int32_t nt4, int32_t G, const uint16_t * vscale,
                            const uint16_t * voffset, size_t ldg, float * side, int16_t * wq_rows, float * wgroup) {
    const v128_t zero = wasm_f32x4_splat(0.0f);
    float w[TILE_KEYS] __attribute__((aligned(16)));
    i4_side_tile(vscale, voffset, ldg, G, nt4, side);
    for (int32_t x = 0; x < n; x++) {
        const float * p = p_rows + (size_t)x * TILE_KEYS;
        for (int32_t g = 0; g < G; g++) {
            const float * sc = side + (size_t)g * 2 * TILE_KEYS, * off = sc + TILE_KEYS;
            int16_t * wq = wq_rows + ((size_t)x * G + g) * TILE_KEYS;
            float * wg = wgroup + ((size_t)x * G + g) * 2;
            v128_t vmax = zero, vos = zero;
            for (int32_t t = 0; t < nt4; t += 4) {
                const v128_t pt = wasm_v128_load(p + t);
                const v128_t wt = wasm_f32x4_mul(pt, wasm_v128_load(sc + t));
                wasm_v128_store(w + t, wt);
                vmax = wasm_f32x4_pmax(vmax, wasm_f32x4_abs(wt));
                vos = wasm_f32x4_add(vos, wasm_f32x4_mul(pt, wasm_v128_load(off + t)));
            }
            const float wmax = f32x4_hmax(vmax);
            wg[1] = f32x4_hsum(vos);
            if (wmax < 1e-30f) {
                memset(wq, 0, sizeof(int16_t) * (size_t)TILE_KEYS);
                wg[0] = 0.0f;
                continue;
            }
            const v128_t inv = wasm_f32x4_splat((float)INT16_MAX / wmax);
            for (int32_t t = 0; t < nt4; t += 8) {
                const v128_t a = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(w + t), inv)));
                const v128_t b = t + 4 < nt4 ? wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(w + t + 4), inv)))
                                             : wasm_i32x4_splat(0);
                wasm_v128_store(wq + t, wasm_i16x8_narrow_i32x4(a, b));
            }
            wg[0] = wmax / (float)INT16_MAX;
        }
    }
}

/* acc[r][d0 .. d0 + 8 NDV) += (sum_t wq[r][g][t] q_t) * wscale + osum for R
 * rows (wq, wgroup: theirs, G groups a row) over the key pairs [0, np) of
 * one I4_PAIRS run (v: the run at pair 0; ldv bytes between pairs): NDV = 2
 * both halves (d0 .. d0+15), NDV = 1 the low (high = 0) or high half. */
static FLASH_INLINE void i4_pv_rows(const int16_t * wq, const float * wgroup, int32_t G, int32_t g, float * acc, size_t lda,
                                    const uint8_t * v, size_t ldv, int32_t np, const int R, const int NDV, int high) {
    v128_t sum[4][4];
    const v128_t low = wasm_i8x16_splat(0x0f);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 2 * NDV; j++) sum[r][j] = wasm_i32x4_splat(0);
    for (int32_t i = 0; i < np; i++, v += ldv) {
        const v128_t vv = wasm_v128_load(v);
        v128_t lo[2], hi[2];
        for (int j = 0; j < NDV; j++) {
            const v128_t n = NDV == 2 ? (j ? wasm_v128_and(wasm_u16x8_shr(vv, 4), low) : wasm_v128_and(vv, low))
                                      : (high ? wasm_v128_and(wasm_u16x8_shr(vv, 4), low) : wasm_v128_and(vv, low));
            lo[j] = wasm_u16x8_extend_low_u8x16(n);
            hi[j] = wasm_u16x8_extend_high_u8x16(n);
        }
        for (int r = 0; r < R; r++) {
            const v128_t w = wasm_v128_load32_splat(wq + ((size_t)r * G + g) * TILE_KEYS + 2 * i);
            for (int j = 0; j < NDV; j++) {
                sum[r][2 * j] = wasm_i32x4_add(sum[r][2 * j], wasm_i32x4_dot_i16x8(lo[j], w));
                sum[r][2 * j + 1] = wasm_i32x4_add(sum[r][2 * j + 1], wasm_i32x4_dot_i16x8(hi[j], w));
            }
        }
    }
    for (int r = 0; r < R; r++) {
        const float * wg = wgroup + ((size_t)r * G + g) * 2;
        const v128_t ws = wasm_f32x4_splat(wg[0]), os = wasm_f32x4_splat(wg[1]);
        float * a = acc + (size_t)r * lda;
        for (int j = 0; j < 2 * NDV; j++)
            wasm_v128_store(a + 4 * j, wasm_f32x4_add(wasm_v128_load(a + 4 * j),
                                                      wasm_f32x4_add(wasm_f32x4_mul(wasm_f32x4_convert_i32x4(sum[r][j]), ws), os)));
    }
}

/* acc += p . V for n rows (acc rows lda floats apart) and the keys [0, nt)
 * of an I4_PAIRS tile (vb: its first key pair, U runs of 16 elements of 2
 * keys; D elements, G groups), from the weights i4_quant_p_tile left (wq_rows,
 * wgroup): 4 rows at a time, 16 elements per pass for up to 2 rows, else 8;
 * a D % 8 tail element by element. */
static void i4_pv_tile(float * acc_rows, size_t lda, int32_t n, const uint8_t * vb, int32_t U, int32_t D, int32_t G,
                       int32_t nt, const int16_t * wq_rows, const float * wgroup) {
    const int32_t np = (nt + 1) / 2;
    const size_t Dp = lda, ldv = (size_t)U * 16;
    for (int32_t x = 0; x < n; x += 4) {
        const int32_t R = n - x < 4 ? n - x : 4;
        const int16_t * wqx = wq_rows + (size_t)x * G * TILE_KEYS;
        const float * wgx = wgroup + (size_t)x * G * 2;
        float * acc = acc_rows + (size_t)x * Dp;
        int32_t d = 0;
        if (R <= 2)
            for (; d + 16 <= D; d += 16) {
                const uint8_t * v = vb + (size_t)(d / 16) * 16;
                if (R == 1) i4_pv_rows(wqx, wgx, G, d / SDPA_I4_GROUP, acc + d, Dp, v, ldv, np, 1, 2, 0);
                else i4_pv_rows(wqx, wgx, G, d / SDPA_I4_GROUP, acc + d, Dp, v, ldv, np, 2, 2, 0);
            }
        for (; d + 8 <= D; d += 8) {
            const uint8_t * v = vb + (size_t)(d / 16) * 16;
            const int32_t g = d / SDPA_I4_GROUP, high = d % 16 / 8;
            switch (R) {
                case 1: i4_pv_rows(wqx, wgx, G, g, acc + d, Dp, v, ldv, np, 1, 1, high); break;
                case 2: i4_pv_rows(wqx, wgx, G, g, acc + d, Dp, v, ldv, np, 2, 1, high); break;
                case 3: i4_pv_rows(wqx, wgx, G, g, acc + d, Dp, v, ldv, np, 3, 1, high); break;
                default: i4_pv_rows(wqx, wgx, G, g, acc + d, Dp, v, ldv, np, 4, 1, high); break;
            }
        }
        for (; d < D; d++) {
            const int32_t g = d / SDPA_I4_GROUP;
            const size_t run = (size_t)(d / 16) * 16 + (size_t)(d % 8) * 2;
            const unsigned shift = 4u * (unsigned)(d % 16 / 8);
            for (int32_t r = 0; r < R; r++) {
                const int16_t * wq = wqx + ((size_t)r * G + g) * TILE_KEYS;
                const float * wg = wgx + ((size_t)r * G + g) * 2;
                int32_t sum = 0;
                for (int32_t t = 0; t < 2 * np; t++)
                    sum += wq[t] * (int32_t)((vb[(size_t)(t / 2) * ldv + run + (size_t)(t % 2)] >> shift) & 0xfu);
                acc[(size_t)r * Dp + d] += (float)sum * wg[0] + wg[1];
            }
        }
    }
}

#endif
