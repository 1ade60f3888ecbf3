/* flash_int8.h: the microkernels of flash.c's tile loop for int8 pages,
 * Q.K and P.V as integer dot products (K_I8_PAGE, V_I8_PAGE). Included by
 * flash.c alone, so that they compile into its translation unit: as an
 * object file of their own (calls across files into the tile loop) int8
 * decode measured 5-10% slower (bench/ab-trees.mjs, 1 thread).
 *
 * Q.K: each q row is quantized symmetrically to int16, q ~ q16 * qscale with
 * qscale = max|q| / qmax, and multiplied with the keys' int8 values (an
 * I8_KEYS block, cache/kv_format.h): per element pair, i32x4.dot_i16x8_s of
 * 4 keys' (k[d], k[d+1]) with a broadcast (q16[d], q16[d+1]). A lane holds
 * one key's whole sum; the zero point comes off through sum(q16) and the two
 * scales are applied once per score. qmax = 32767 up to D = 257, lower above
 * so that sum q16 * (k - zp) (|k - zp| <= 255) fits an int32 lane; D >
 * INT_Q_MAX_DIM = 1024 (qmax < 8224) decodes K instead (K_DECODED, in
 * flash.c). The relative error of q16 is ~1 / (2 qmax).
 *
 * P.V: after the softmax, a row's weights times the value rows' scales, w =
 * p * vscale, are quantized per tile to int16, w ~ wq * wscale with wscale =
 * max(w) / 32767, and multiplied with the values' int8 (an I8_PAIRS block):
 * i32x4.dot_i16x8_s of 2 keys' (v[t][d], v[t+1][d]) for 4 elements with a
 * broadcast (wq[t], wq[t+1]). The zero points come off through sum wq * zp
 * (|wq * (v - zp)| summed over a tile < 2^30), then acc += sum * wscale.
 * The contract's int8 error bound (2e-3 (1 + max|ref|)) covers both. */
#ifndef SDPA_FLASH_INT8_H
#define SDPA_FLASH_INT8_H

#include "kernels/flash_private.h"

#include <float.h>
#include <string.h>

static int32_t i8_quant_q_max(int32_t D) {
    const int64_t m = INT32_MAX / (255 * (int64_t)D);
    return m < INT16_MAX ? (int32_t)m : INT16_MAX;
}

/* Quantizes n q rows (D floats each, ldq floats apart, zero-padded to a
 * multiple of 4 >= 2P) to |q16| <= qmax: qpairs[x / 4][i][x % 4] = the
 * broadcast pair (q16[2i], q16[2i+1]) of row x, i < P (rows past n of the
 * last quad are never read), qscale[x] (q ~ q16 * qscale), qsum[x] = sum of
 * q16; with `group` (int4 K) also group[x * G + g] = the sum of q16 over
 * group g's elements (G = ceil(2P / SDPA_I4_GROUP) groups). A row whose q
 * cannot be quantized (a non-finite element, or so small that 1 / qscale
 * overflows) gets zeros and suspect[x] = true (the reference recomputes it). */
static void i8_quant_q_block(const float * q_rows, size_t ldq, int32_t n, int32_t D, int32_t P, int32_t qmax,
                             v128_t * qpairs, float * qscale, int32_t * qsum, float * group, bool * suspect) {
    const int32_t G = (2 * P + SDPA_I4_GROUP - 1) / SDPA_I4_GROUP;
    /* 4 elements, 2 pairs, per vector */
    for (int32_t x = 0; x < n; x++) {
        const float * q = q_rows + (size_t)x * ldq;
        v128_t vbig = wasm_f32x4_splat(0.0f);
        for (int32_t d = 0; d < D; d += 4) vbig = wasm_f32x4_max(vbig, wasm_f32x4_abs(wasm_v128_load(q + d)));
        const float big = f32x4_hmax(vbig);  /* NaN or Inf for a non-finite q */
        const float scale = big > 0.0f ? big / (float)qmax : 1.0f, inv = 1.0f / scale;
        const bool ok = big <= FLT_MAX && inv <= FLT_MAX;
        if (!ok) suspect[x] = true;
        const v128_t vinv = wasm_f32x4_splat(ok ? inv : 0.0f);
        v128_t vsum = wasm_i32x4_splat(0), gsum = wasm_i32x4_splat(0);
        v128_t * out = qpairs + (size_t)(x / 4) * P * 4 + x % 4;
        for (int32_t i = 0; i < P; i += 2) {
            /* |q * inv| <= qmax (1 + 2^-23): nearest never passes qmax */
            const v128_t q32 = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(q + 2 * i), vinv)));
            vsum = wasm_i32x4_add(vsum, q32);
            const v128_t q16 = wasm_i16x8_narrow_i32x4(q32, q32);  /* pairs (q[2i], q[2i+1]) in i32 lanes 0, 1 */
            out[(size_t)i * 4] = wasm_i32x4_shuffle(q16, q16, 0, 0, 0, 0);
            if (i + 1 < P) out[(size_t)(i + 1) * 4] = wasm_i32x4_shuffle(q16, q16, 1, 1, 1, 1);
            if (group) {  /* elements 2i .. 2i+3 lie in one group (a multiple of 32) */
                gsum = wasm_i32x4_add(gsum, q32);
                if ((2 * i + 4) % SDPA_I4_GROUP == 0 || i + 2 >= P) {
                    group[(size_t)x * G + (size_t)(2 * i / SDPA_I4_GROUP)] =
                        (float)(wasm_i32x4_extract_lane(gsum, 0) + wasm_i32x4_extract_lane(gsum, 1) +
                                wasm_i32x4_extract_lane(gsum, 2) + wasm_i32x4_extract_lane(gsum, 3));
                    gsum = wasm_i32x4_splat(0);
                }
            }
        }
        qscale[x] = scale;
        qsum[x] = wasm_i32x4_extract_lane(vsum, 0) + wasm_i32x4_extract_lane(vsum, 1) +
                      wasm_i32x4_extract_lane(vsum, 2) + wasm_i32x4_extract_lane(vsum, 3);
    }
}

/* acc[r][2g + h] += q16 . k over element pair i (one step of i8_qk_rows) */
static FLASH_INLINE void i8_qk_step(const v128_t * qb, const int8_t * k, size_t ldk, v128_t acc[4][4], const int R,
                                    const int NG) {
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

/* acc[r][2g + h] (keys 8g + 4h .. +3 of the pass) = sum over element pairs
 * of q16 . k for R rows (quad vectors qb, [P][4]) and NG groups of 8 keys
 * (k: the first group's pairs, ldk bytes between groups). The steps that
 * touch run in a loop of their own (as flash_float.h's qk_rows_of). */
static FLASH_INLINE uint32_t i8_qk_rows(const v128_t * qb, const int8_t * k, size_t ldk, int32_t P,
                                        v128_t acc[4][4], const int R, const int NG,
                                        const uint32_t * ta, const uint32_t * tb, int32_t lines) {
    uint32_t touched = 0;
    for (int r = 0; r < R; r++)
        for (int g = 0; g < 2 * NG; g++) acc[r][g] = wasm_i32x4_splat(0);
    int32_t i = 0;
    for (const int32_t touching = lines < P ? lines : P; i < touching; i++, qb += 4, k += 16) {
        touched |= ta[(size_t)i * SDPA_CACHE_LINE_WORDS] | tb[(size_t)i * SDPA_CACHE_LINE_WORDS];
        i8_qk_step(qb, k, ldk, acc, R, NG);
    }
    for (; i < P; i++, qb += 4, k += 16) i8_qk_step(qb, k, ldk, acc, R, NG);
    return touched;
}

/* s[r][t] = (acc - zp_t * qsum_r) * (qscale_r * kscale_t) for R rows (qsum,
 * qscale: theirs) and 8 NG keys from key t0 (zps, ks: the K zero points and
 * scales at t0). */
static FLASH_INLINE void i8_qk_dequant(const int32_t * qsum, const float * qscale, v128_t acc[4][4], const int8_t * zps,
                                       const float * ks, float * s, const int R, const int NG) {
    for (int g = 0; g < NG; g++) {
        const v128_t z16 = wasm_i16x8_load8x8(zps + 8 * g);
        const v128_t zp[2] = { wasm_i32x4_extend_low_i16x8(z16), wasm_i32x4_extend_high_i16x8(z16) };
        const v128_t sc[2] = { wasm_v128_load(ks + 8 * g), wasm_v128_load(ks + 8 * g + 4) };
        for (int r = 0; r < R; r++) {
            const v128_t qs16 = wasm_i32x4_splat(qsum[r]), qs = wasm_f32x4_splat(qscale[r]);
            for (int h = 0; h < 2; h++) {
                const v128_t dot = wasm_i32x4_sub(acc[r][2 * g + h], wasm_i32x4_mul(zp[h], qs16));
                wasm_v128_store(s + (size_t)r * TILE_KEYS + 8 * g + 4 * h,
                                wasm_f32x4_mul(wasm_f32x4_convert_i32x4(dot), wasm_f32x4_mul(qs, sc[h])));
            }
        }
    }
}

/* Scores s[x][t] = q_x . k_t (unscaled, like the float path; rows of s
 * TILE_KEYS floats apart) for n rows (qpairs, qscale, qsum: i8_quant_q_block's)
 * and the keys [0, nt) of an I8_KEYS tile: k its first key group (P element
 * pairs of 8 keys, ldk bytes between groups), kzp and kscale the keys' zero
 * points and scales. Keys go in passes of 8 (16 for a single row), 4 rows at
 * a time; scores past nt, up to the pass, are computed from the page's rows
 * and dropped by the caller. A pass touches its share of the blocks of a
 * tile ahead (tr), as flash_float.h's f32_qk_tile does. */
static uint32_t i8_qk_tile(const v128_t * qpairs, const float * qscale, const int32_t * qsum, int32_t n,
                           const int8_t * k, size_t ldk, int32_t P, const int8_t * kzp, const float * kscale,
                           int32_t nt, float * s, const touch_rows * tr) {
    const int32_t step = n == 1 ? 16 : 8;
    const int32_t lines = touch_lines(tr, step);  /* a cache line per element pair */
    uint32_t touched = 0;
    v128_t acc[4][4];
    for (int32_t t = 0; t < nt; t += step) {
        const int8_t * kt = k + (size_t)(t / SDPA_I8_KEY_GROUP) * ldk;
        const uint32_t * ta, * tb;
        touch_pass(tr, t, &ta, &tb);
        if (n == 1) {
            touched |= i8_qk_rows(qpairs, kt, ldk, P, acc, 1, 2, ta, tb, lines);
            i8_qk_dequant(qsum, qscale, acc, kzp + t, kscale + t, s + t, 1, 2);
            continue;
        }
        for (int32_t x = 0; x < n; x += 4) {
            const v128_t * qb = qpairs + (size_t)(x / 4) * P * 4;
            float * sx = s + (size_t)x * TILE_KEYS + t;
            const int32_t l = x == 0 ? lines : 0;
            switch (n - x) {
                case 1: touched |= i8_qk_rows(qb, kt, ldk, P, acc, 1, 1, ta, tb, l); i8_qk_dequant(qsum + x, qscale + x, acc, kzp + t, kscale + t, sx, 1, 1); break;
                case 2: touched |= i8_qk_rows(qb, kt, ldk, P, acc, 2, 1, ta, tb, l); i8_qk_dequant(qsum + x, qscale + x, acc, kzp + t, kscale + t, sx, 2, 1); break;
                case 3: touched |= i8_qk_rows(qb, kt, ldk, P, acc, 3, 1, ta, tb, l); i8_qk_dequant(qsum + x, qscale + x, acc, kzp + t, kscale + t, sx, 3, 1); break;
                default: touched |= i8_qk_rows(qb, kt, ldk, P, acc, 4, 1, ta, tb, l); i8_qk_dequant(qsum + x, qscale + x, acc, kzp + t, kscale + t, sx, 4, 1); break;
            }
        }
    }
    return touched;
}

/* A tile's weights for the integer P.V: per row x of n (p: the softmax
 * weights, rows TILE_KEYS apart, overwritten), w = p * vscale (0 where p is
 * 0: a row past the tile's keys may have an Inf scale) over the nt4 keys
 * (vscale, vzp: the V rows' scales and zero points), quantized to wq_rows
 * (TILE_KEYS apart) with its wscale[x] and wzp[x] = sum_t wq * zero point. A
 * row with an infinite weight (an overflowed value row with scale Inf) gets
 * suspect[x] = true (the reference recomputes it); weights below 1e-30 (a tile far below the row's max) add
 * nothing a float32 accumulator would keep: they are dropped. */
static void i8_quant_p_tile(float * p, int32_t n, int32_t nt4, const float * vscale, const int8_t * vzp,
                            int16_t * wq_rows, float * wscale, int32_t * wzp, bool * suspect) {
    const v128_t zero = wasm_f32x4_splat(0.0f);
    for (int32_t x = 0; x < n; x++) {
        float * w = p + (size_t)x * TILE_KEYS;
        int16_t * wq = wq_rows + (size_t)x * TILE_KEYS;
        v128_t vmax = zero;
        for (int32_t t = 0; t < nt4; t += 4) {
            /* (p > 0) also drops a NaN p: it comes from a NaN score, whose row is suspect already */
            const v128_t pt = wasm_v128_load(w + t);
            const v128_t wt = wasm_v128_and(wasm_f32x4_mul(pt, wasm_v128_load(vscale + t)), wasm_f32x4_gt(pt, zero));
            wasm_v128_store(w + t, wt);
            vmax = wasm_f32x4_pmax(vmax, wt);
        }
        float wmax = f32x4_hmax(vmax);
        if (!(wmax <= FLT_MAX)) {  /* Inf: a value row whose scale is Inf */
            suspect[x] = true;
            wmax = 0.0f;
        }
        if (wmax < 1e-30f) {
            memset(wq, 0, sizeof(int16_t) * (size_t)TILE_KEYS);
            wscale[x] = 0.0f;
            wzp[x] = 0;
            continue;
        }
        const v128_t inv = wasm_f32x4_splat((float)INT16_MAX / wmax);
        v128_t zsum = wasm_i32x4_splat(0);
        for (int32_t t = 0; t < nt4; t += 8) {
            const v128_t a = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(w + t), inv)));
            const v128_t b = t + 4 < nt4 ? wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(w + t + 4), inv)))
                                         : wasm_i32x4_splat(0);
            const v128_t q = wasm_i16x8_narrow_i32x4(a, b);
            wasm_v128_store(wq + t, q);
            zsum = wasm_i32x4_add(zsum, wasm_i32x4_dot_i16x8(q, wasm_i16x8_load8x8(vzp + t)));
        }
        wscale[x] = wmax / (float)INT16_MAX;
        wzp[x] = wasm_i32x4_extract_lane(zsum, 0) + wasm_i32x4_extract_lane(zsum, 1) +
                 wasm_i32x4_extract_lane(zsum, 2) + wasm_i32x4_extract_lane(zsum, 3);
    }
}

/* acc[r][d .. d + 8 NDV) += (sum_t wq[r][t] v_t - wzp_r) * wscale_r for R
 * rows (wq: theirs, TILE_KEYS apart; wscale, wzp: theirs), keys [0, 2 np) of
 * an I8_PAIRS block (v: pair 0, element d; 2 D bytes between pairs). */
static FLASH_INLINE void i8_pv_rows(const int16_t * wq, const float * wscale, const int32_t * wzp, float * acc,
                                    size_t lda, const int8_t * v, size_t ldv, int32_t np, const int R, const int NDV) {
    v128_t sum[4][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 2 * NDV; j++) sum[r][j] = wasm_i32x4_splat(0);
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
        const v128_t zp = wasm_i32x4_splat(wzp[r]), ws = wasm_f32x4_splat(wscale[r]);
        float * a = acc + (size_t)r * lda;
        for (int j = 0; j < 2 * NDV; j++)
            wasm_v128_store(a + 4 * j, f32x4_fmadd(wasm_v128_load(a + 4 * j),
                                                   wasm_f32x4_convert_i32x4(wasm_i32x4_sub(sum[r][j], zp)), ws));
    }
}

/* acc += p . V for n rows (acc rows lda floats apart) and the keys [0, nt)
 * of an I8_PAIRS tile (vb: its first key pair, D elements of 2 keys), from
 * the weights i8_quant_p_tile left (wq rows TILE_KEYS apart, wscale, wzp):
 * 4 rows at a time, 8 elements per pass (16 for a single row); a D % 8 tail
 * element by element. */
static void i8_pv_tile(float * acc_rows, size_t lda, int32_t n, const int8_t * vb, int32_t D, int32_t nt,
                       const int16_t * wq_rows, const float * wscale, const int32_t * wzp) {
    const int32_t np = (nt + 1) / 2;
    const size_t Dp = lda, ldv = 2 * (size_t)D;
    for (int32_t x = 0; x < n; x += 4) {
        const int32_t R = n - x < 4 ? n - x : 4;
        const int16_t * wq = wq_rows + (size_t)x * TILE_KEYS;
        float * acc = acc_rows + (size_t)x * Dp;
        int32_t d = 0;
        if (R == 1)
            for (; d + 16 <= D; d += 16) i8_pv_rows(wq, wscale + x, wzp + x, acc + d, Dp, vb + 2 * d, ldv, np, 1, 2);
        for (; d + 8 <= D; d += 8) {
            switch (R) {
                case 1: i8_pv_rows(wq, wscale + x, wzp + x, acc + d, Dp, vb + 2 * d, ldv, np, 1, 1); break;
                case 2: i8_pv_rows(wq, wscale + x, wzp + x, acc + d, Dp, vb + 2 * d, ldv, np, 2, 1); break;
                case 3: i8_pv_rows(wq, wscale + x, wzp + x, acc + d, Dp, vb + 2 * d, ldv, np, 3, 1); break;
                default: i8_pv_rows(wq, wscale + x, wzp + x, acc + d, Dp, vb + 2 * d, ldv, np, 4, 1); break;
            }
        }
        for (; d < D; d++)
            for (int32_t r = 0; r < R; r++) {
                const int16_t * wr = wq + (size_t)r * TILE_KEYS;
                int32_t sum = 0;
                for (int32_t t = 0; t < 2 * np; t++) sum += wr[t] * vb[(size_t)(t / 2) * ldv + 2 * (size_t)d + t % 2];
                acc[(size_t)r * Dp + d] += (float)(sum - wzp[x + r]) * wscale[x + r];
            }
    }
}

#endif
