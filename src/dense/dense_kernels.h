/* dense_kernels.h: the SIMD128 microkernels of the dense room, included by
 * dense.c alone (one translation unit, as flash.c's are).
 *
 * The one order every output of a product is computed in (include/
 * sdpa_dense.h, "Numerics"), whichever kernel computes it:
 *   float32, float16:  acc (4 lanes) += w[j..j+3] * x[j..j+3] for j = 0, 4, ...
 *                      s = hsum(acc) ((0+2)+(1+3)); then s += w[j] * x[j] for
 *                      the last cols % 4 values, in order.
 *   q8_0, q4_0, q5_0:  per block b in order: p0 (4 lanes) sums the products
 *                      of the block's 4-value groups 0, 2, 4, 6 and p1 those of
 *                      1, 3, 5, 7 (each in that order); acc += (p0 + p1) * d_b;
 *                      s = hsum(acc).
 * The decode kernels (one x row) run 4 (float32) or 2 (the block dtypes) weight
 * rows side by side, taken a quarter (a half) of the matrix apart, and the
 * prefill kernels 4 x rows against 1 or 2 weight rows, all in this order per
 * output: a row's result does not depend on how many rows are computed with
 * it. (Prefill keeps one chain per output so that 4 x 2 outputs share their
 * loads: two chains, 4 x 1, ran 16.8 against 31.4 GFLOP/s at 64 x 640 x 256.) */
#ifndef SDPA_DENSE_KERNELS_H
#define SDPA_DENSE_KERNELS_H

#include "kernels/simd.h"

#include <string.h>

/* ---- float16 ------------------------------------------------------------ */

/* One binary16 -> float32, exactly (Inf, NaN and subnormals included). */
static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t bits;
    float f;
    if (em >= 0x7c00u) {
        bits = sign | 0x7f800000u | (em & 0x3ffu) << 13;
        memcpy(&f, &bits, 4);
        return f;
    }
    /* the sign in the bits, carried through the scaling (exact, subnormals too), not
     * `sign ? -f : f`: V8 turns that float select into a branch, and q4_0 / q5_0 / q6_k
     * scales take either sign at random (ggml's d = max / -8 from the value of largest
     * magnitude), so it mispredicted once per block and row half the time: the 135M
     * shape's q4_0 decode took 1.8x the time of q8_0's (bench/HISTORY.md) */
    bits = sign | em << 13;
    memcpy(&f, &bits, 4);
    return f * 0x1p112f;
}

static inline uint16_t load_u16(const uint8_t * p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Bytes of a block of the 32-value block dtypes (q8_0, q4_0, q5_0). */
static inline size_t qb_bytes(int32_t dt) { return dt == SDPA_DTYPE_Q8_0 ? 34 : dt == SDPA_DTYPE_Q4_0 ? 18 : 22; }

/* 8 halves (sign-extended into 16-bit lanes as loaded) -> two float32x4, assuming
 * finite halves (an Inf or NaN reads as a finite value >= 65536: the callers
 * check for them with f16x8_specials and recompute such rows exactly). */
static inline void f16x8_finite(v128_t h, v128_t * lo, v128_t * hi) {
    /* simd.h's conversion (the attention's float16 pages use it) on each sign-extended half */
    *lo = f16x4_finite(wasm_i32x4_extend_low_i16x8(h));
    *hi = f16x4_finite(wasm_i32x4_extend_high_i16x8(h));
}

/* Lanes of 8 halves that are Inf or NaN (all exponent bits set): non-zero lanes. */
static inline v128_t f16x8_specials(v128_t h) {
    const v128_t e = wasm_i16x8_splat(0x7c00);
    return wasm_i16x8_eq(wasm_v128_and(h, e), e);
}

/* ---- one output, the reference order, any values (the exact slow path) --- */

/* Element j of weight row w (dtype dt) as float32. */
static inline float weight_elem(int32_t dt, const uint8_t * w, int32_t j) {
    switch (dt) {
    case SDPA_DTYPE_FLOAT32: { float f; memcpy(&f, w + 4 * (size_t)j, 4); return f; }
    case SDPA_DTYPE_FLOAT16: return half_to_float(load_u16(w + 2 * (size_t)j));
    case SDPA_DTYPE_Q8_0: {
        const uint8_t * b = w + (size_t)(j / 32) * 34;
        return (float)(int8_t)b[2 + j % 32];  /* (the scale is applied per block) */
    }
    case SDPA_DTYPE_Q5_0: {
        const uint8_t * b = w + (size_t)(j / 32) * 22;
        const int32_t k = j % 32;
        uint32_t qh;
        memcpy(&qh, b + 2, 4);
        const int32_t nib = k < 16 ? (b[6 + k] & 15) : (b[6 + k - 16] >> 4);
        return (float)((nib | (int32_t)((qh >> k) & 1) << 4) - 16);
    }
    default: {  /* q4_0 */
        const uint8_t * b = w + (size_t)(j / 32) * 18;
        const int32_t k = j % 32;
        const int32_t nib = k < 16 ? (b[2 + k] & 15) : (b[2 + k - 16] >> 4);
        return (float)(nib - 8);
    }
    }
}

/* Output s = dot(w row, x) of a float16 (or float32) row in the order above,
 * lane by lane in scalar code: what f16_dot_w1 computes, used for the rows
 * holding a float16 Inf or NaN (dense.c). */
static float dot_exact(int32_t dt, const uint8_t * w, const float * x, int32_t cols) {
    float lane[4] = { 0, 0, 0, 0 };
    int32_t j = 0;
    for (; j + 4 <= cols; j += 4)
        for (int32_t l = 0; l < 4; l++) {
#ifdef __wasm_relaxed_simd__
            lane[l] = fmaf(weight_elem(dt, w, j + l), x[j + l], lane[l]);
#else
            lane[l] = lane[l] + weight_elem(dt, w, j + l) * x[j + l];
#endif
        }
    float s = (lane[0] + lane[2]) + (lane[1] + lane[3]);
    for (; j < cols; j++) s += weight_elem(dt, w, j) * x[j];
    return s;
}

/* ---- float32 weights ---------------------------------------------------- */

/* (Scalar weight reads go through memcpy: a weight's data may have any
 * alignment, sdpa_dense.h.) */
static inline float load_f32(const void * p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

static inline float f32_tail(float s, const float * w, const float * x, int32_t j, int32_t cols) {
    for (; j < cols; j++) s += load_f32(w + j) * x[j];
    return s;
}

/* y[0], y[ys], y[2 ys], y[3 ys] (+)= dot(w rows 0..3, x): 4 weight rows rs floats
 * apart. Decode gives it rows a quarter of the matrix apart (decode_rows):
 * four sequential streams from four regions. (Four adjacent rows, in one
 * page, streamed from the L3 at a third of that: 5.8 against 23.7 GFLOP/s
 * over a 14.4 MB set of a model's matrices, one row at a time 8-9.) */
static inline void f32_dot_w4(const float * w, size_t rs, const float * x, int32_t cols, float * y, size_t ys, bool acc) {
    v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0;
    int32_t j = 0;
    for (; j + 4 <= cols; j += 4) {
        const v128_t xv = wasm_v128_load(x + j);
        a0 = f32x4_fmadd(a0, wasm_v128_load(w + j), xv);
        a1 = f32x4_fmadd(a1, wasm_v128_load(w + rs + j), xv);
        a2 = f32x4_fmadd(a2, wasm_v128_load(w + 2 * rs + j), xv);
        a3 = f32x4_fmadd(a3, wasm_v128_load(w + 3 * rs + j), xv);
    }
    const float s[4] = { f32_tail(f32x4_hsum(a0), w, x, j, cols), f32_tail(f32x4_hsum(a1), w + rs, x, j, cols),
                         f32_tail(f32x4_hsum(a2), w + 2 * rs, x, j, cols), f32_tail(f32x4_hsum(a3), w + 3 * rs, x, j, cols) };
    for (int k = 0; k < 4; k++) y[k * ys] = acc ? y[k * ys] + s[k] : s[k];
}

static inline float f32_dot_w1(const float * w, const float * x, int32_t cols) {
    v128_t a = wasm_f32x4_splat(0);
    int32_t j = 0;
    for (; j + 4 <= cols; j += 4) a = f32x4_fmadd(a, wasm_v128_load(w + j), wasm_v128_load(x + j));
    return f32_tail(f32x4_hsum(a), w, x, j, cols);
}

/* 4 x rows (xs floats apart) against 2 weight rows: y[r * ys + o] (+)=. */
static inline void f32_dot_x4w2(const float * w, size_t rs, const float * x, size_t xs, int32_t cols,
                            float * y, size_t ys, bool acc) {
    v128_t a00 = wasm_f32x4_splat(0), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
    const float * w1 = w + rs;
    int32_t j = 0;
    for (; j + 4 <= cols; j += 4) {
        const v128_t v0 = wasm_v128_load(w + j), v1 = wasm_v128_load(w1 + j);
        v128_t xv = wasm_v128_load(x + j);
        a00 = f32x4_fmadd(a00, v0, xv); a01 = f32x4_fmadd(a01, v1, xv);
        xv = wasm_v128_load(x + xs + j);
        a10 = f32x4_fmadd(a10, v0, xv); a11 = f32x4_fmadd(a11, v1, xv);
        xv = wasm_v128_load(x + 2 * xs + j);
        a20 = f32x4_fmadd(a20, v0, xv); a21 = f32x4_fmadd(a21, v1, xv);
        xv = wasm_v128_load(x + 3 * xs + j);
        a30 = f32x4_fmadd(a30, v0, xv); a31 = f32x4_fmadd(a31, v1, xv);
    }
    const v128_t as[4][2] = { { a00, a01 }, { a10, a11 }, { a20, a21 }, { a30, a31 } };
    for (int r = 0; r < 4; r++)
        for (int o = 0; o < 2; o++) {
            const float s = f32_tail(f32x4_hsum(as[r][o]), o ? w1 : w, x + r * xs, j, cols);
            float * yo = y + r * ys + o;
            *yo = acc ? *yo + s : s;
        }
}

/* ---- float16 weights ---------------------------------------------------- */

static inline float f16_tail(float s, const uint16_t * w, const float * x, int32_t j, int32_t cols) {
    for (; j < cols; j++) s += half_to_float(load_u16((const uint8_t *)(w + j))) * x[j];
    return s;
}

/* dot(w row, x) for one weight row of halves; *special |= lanes holding Inf / NaN. */
static inline float f16_dot_w1(const uint16_t * w, const float * x, int32_t cols, v128_t * special) {
    v128_t a = wasm_f32x4_splat(0), sp = wasm_i32x4_splat(0);
    int32_t j = 0;
    for (; j + 8 <= cols; j += 8) {
        const v128_t h = wasm_v128_load(w + j);
        v128_t lo, hi;
        sp = wasm_v128_or(sp, f16x8_specials(h));
        f16x8_finite(h, &lo, &hi);
        a = f32x4_fmadd(a, lo, wasm_v128_load(x + j));
        a = f32x4_fmadd(a, hi, wasm_v128_load(x + j + 4));
    }
    if (j + 4 <= cols) {
        const v128_t h = wasm_v128_load64_zero(w + j);
        v128_t lo, hi;
        sp = wasm_v128_or(sp, f16x8_specials(h));
        f16x8_finite(h, &lo, &hi);
        a = f32x4_fmadd(a, lo, wasm_v128_load(x + j));
        j += 4;
    }
    *special = wasm_v128_or(*special, sp);
    return f16_tail(f32x4_hsum(a), w, x, j, cols);
}

/* ---- q8_0 / q4_0 / q5_0 weights ----------------------------------------- */

/* Small int32 lanes (|i| < 2^22) -> float32, exactly: the bits of 1.5 * 2^23
 * plus i are the float 1.5 * 2^23 + i. Not f32x4.convert_i32x4: LLVM 14 folds
 * it with the sign extensions before it into a conversion from i16, which
 * wasm lacks, and scalarizes it (16 extract / convert / replace a vector). */
static inline v128_t small_i32x4_to_f32(v128_t i) {
    const v128_t magic = wasm_i32x4_splat(0x4B400000);
    return wasm_f32x4_sub(wasm_i32x4_add(i, magic), magic);
}

/* 16 int8 -> four float32x4 of the values times 2^24 (values 0-3, 4-7, 8-11,
 * 12-15): a byte swizzled into the top byte of its lane, zeros below, is the
 * int32 value·2^24, which f32x4.convert_i32x4 takes exactly. One swizzle and
 * one convert per 4 values, where sign extensions (i8 -> i16 -> i32) and
 * small_i32x4_to_f32 took four: q8_0 products with float activations 1.9-2.0x faster (bench/HISTORY.md).
 * The block's scale carries the 2^-24 (qb_block): products and sums of the
 * scaled values are those of the values times a power of two, so the scaled
 * sum times d·2^-24 has the bits of the plain sum times d, unless a partial
 * sum overflows (|x| above about 1e28; CONTRACT.md section 8). */
static inline void i8x16_to_f32_2p24(v128_t q, v128_t * f) {
    f[0] = wasm_f32x4_convert_i32x4(wasm_i8x16_swizzle(q, wasm_i8x16_const(-128, -128, -128, 0, -128, -128, -128, 1, -128, -128, -128, 2, -128, -128, -128, 3)));
    f[1] = wasm_f32x4_convert_i32x4(wasm_i8x16_swizzle(q, wasm_i8x16_const(-128, -128, -128, 4, -128, -128, -128, 5, -128, -128, -128, 6, -128, -128, -128, 7)));
    f[2] = wasm_f32x4_convert_i32x4(wasm_i8x16_swizzle(q, wasm_i8x16_const(-128, -128, -128, 8, -128, -128, -128, 9, -128, -128, -128, 10, -128, -128, -128, 11)));
    f[3] = wasm_f32x4_convert_i32x4(wasm_i8x16_swizzle(q, wasm_i8x16_const(-128, -128, -128, 12, -128, -128, -128, 13, -128, -128, -128, 14, -128, -128, -128, 15)));
}

/* A block's scale d times 2^-24 (i8x16_to_f32_2p24's values carry 2^24). */
static inline float block_scale_2m24(const uint8_t * b) { return half_to_float(load_u16(b)) * 0x1p-24f; }

/* A block's 32 values as 8 float32x4 times 2^24 (without its scale), and its
 * scale d·2^-24: f[k] · d is the block's value · d. */
static inline float q8_block(const uint8_t * b, v128_t * f) {
    i8x16_to_f32_2p24(wasm_v128_load(b + 2), f);
    i8x16_to_f32_2p24(wasm_v128_load(b + 18), f + 4);
    return block_scale_2m24(b);
}
static inline float q4_block(const uint8_t * b, v128_t * f) {
    const v128_t q = wasm_v128_load(b + 2), eight = wasm_i8x16_splat(8);
    i8x16_to_f32_2p24(wasm_i8x16_sub(wasm_v128_and(q, wasm_i8x16_splat(15)), eight), f);
    i8x16_to_f32_2p24(wasm_i8x16_sub(wasm_u8x16_shr(q, 4), eight), f + 4);
    return block_scale_2m24(b);
}

/* q5_0's fifth bits: 16 bytes, 0x10 where bit (16 half + j) of the block's
 * qh is set (lane j; half 0: values 0-15, half 1: 16-31). */
static inline v128_t q5_high(const uint8_t * b, int half) {
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const v128_t idx = half ? wasm_i8x16_make(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)
                            : wasm_i8x16_make(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const v128_t bit = wasm_i8x16_make(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    const v128_t set = wasm_i8x16_eq(wasm_v128_and(wasm_i8x16_swizzle(wasm_i32x4_splat((int32_t)qh), idx), bit), bit);
    return wasm_v128_and(set, wasm_i8x16_splat(0x10));
}
/* q5_0's 32 values as int8 (-16..15): values 0-15 in *lo, 16-31 in *hi. */
static inline void q5_block_i8(const uint8_t * b, v128_t * lo, v128_t * hi) {
    const v128_t q = wasm_v128_load(b + 6), sixteen = wasm_i8x16_splat(16);
    *lo = wasm_i8x16_sub(wasm_v128_or(wasm_v128_and(q, wasm_i8x16_splat(15)), q5_high(b, 0)), sixteen);
    *hi = wasm_i8x16_sub(wasm_v128_or(wasm_u8x16_shr(q, 4), q5_high(b, 1)), sixteen);
}
static inline float q5_block(const uint8_t * b, v128_t * f) {
    v128_t lo, hi;
    q5_block_i8(b, &lo, &hi);
    i8x16_to_f32_2p24(lo, f);
    i8x16_to_f32_2p24(hi, f + 4);
    return block_scale_2m24(b);
}

/* A 32-value block dtype's values (times 2^24) and scale (times 2^-24). */
static inline float qb_block(int32_t dt, const uint8_t * b, v128_t * f) {
    return dt == SDPA_DTYPE_Q8_0 ? q8_block(b, f) : dt == SDPA_DTYPE_Q4_0 ? q4_block(b, f) : q5_block(b, f);
}

/* acc += (p0 + p1) * vd (d in every lane) for a block's 8 weight vectors and x's 32 values. */
static inline v128_t block_fma_v(v128_t acc, const v128_t * f, const float * x, v128_t vd) {
    v128_t p0 = wasm_f32x4_mul(f[0], wasm_v128_load(x));
    v128_t p1 = wasm_f32x4_mul(f[1], wasm_v128_load(x + 4));
    p0 = f32x4_fmadd(p0, f[2], wasm_v128_load(x + 8));
    p1 = f32x4_fmadd(p1, f[3], wasm_v128_load(x + 12));
    p0 = f32x4_fmadd(p0, f[4], wasm_v128_load(x + 16));
    p1 = f32x4_fmadd(p1, f[5], wasm_v128_load(x + 20));
    p0 = f32x4_fmadd(p0, f[6], wasm_v128_load(x + 24));
    p1 = f32x4_fmadd(p1, f[7], wasm_v128_load(x + 28));
    return f32x4_fmadd(acc, wasm_f32x4_add(p0, p1), vd);
}
static inline v128_t block_fma(v128_t acc, const v128_t * f, const float * x, float d) {
    return block_fma_v(acc, f, x, wasm_f32x4_splat(d));
}

/* dot(w row, x) of a q8_0, q4_0 or q5_0 (dt) row of nb blocks. */
static inline float q_dot_w1_of(const uint8_t * w, int32_t dt, const float * x, int32_t nb) {
    const size_t bb = qb_bytes(dt);
    v128_t acc = wasm_f32x4_splat(0), f[8];
    for (int32_t b = 0; b < nb; b++) {
        const float d = qb_block(dt, w + b * bb, f);
        acc = block_fma(acc, f, x + 32 * b, d);
    }
    return f32x4_hsum(acc);
}

/* 2 weight rows (rs bytes apart) against one x row: y[0], y[ys] (+)=. (Two,
 * not four: four rows' block conversions spill in V8, measured 5.7 against
 * 7.9 GFLOP/s on q8_0 640 x 256.) */
static inline void q_dot_w2_of(const uint8_t * w, size_t rs, int32_t dt, const float * x, int32_t nb, float * y, size_t ys, bool acc) {
    const size_t bb = qb_bytes(dt);
    v128_t a0 = wasm_f32x4_splat(0), a1 = a0, f[8];
    for (int32_t b = 0; b < nb; b++) {
        const uint8_t * p = w + b * bb;
        const float * xb = x + 32 * b;
        float d = qb_block(dt, p, f);
        a0 = block_fma(a0, f, xb, d);
        d = qb_block(dt, p + rs, f);
        a1 = block_fma(a1, f, xb, d);
    }
    const float s0 = f32x4_hsum(a0), s1 = f32x4_hsum(a1);
    y[0] = acc ? y[0] + s0 : s0;
    y[ys] = acc ? y[ys] + s1 : s1;
}

/* One weight row against 4 x rows (xs floats apart): y[r * ys] (+)=; each
 * block converted once for the 4 rows. */
static inline void q_dot_x4w1_of(const uint8_t * w, int32_t dt, const float * x, size_t xs, int32_t nb,
                          float * y, size_t ys, bool acc) {
    const size_t bb = qb_bytes(dt);
    v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0, f[8];
    for (int32_t b = 0; b < nb; b++) {
        const float d = qb_block(dt, w + b * bb, f);
        const float * xb = x + 32 * b;
        a0 = block_fma(a0, f, xb, d);
        a1 = block_fma(a1, f, xb + xs, d);
        a2 = block_fma(a2, f, xb + 2 * xs, d);
        a3 = block_fma(a3, f, xb + 3 * xs, d);
    }
    const float s[4] = { f32x4_hsum(a0), f32x4_hsum(a1), f32x4_hsum(a2), f32x4_hsum(a3) };
    for (int r = 0; r < 4; r++) y[r * ys] = acc ? y[r * ys] + s[r] : s[r];
}

/* ---- q8_0 / q4_0 / q5_0 weights with int16 activations (SDPA_LINEAR_INT16_ACTIVATIONS) --
 *
 * x is quantized once per call, per row and block of 32: s = max|x| / 32767,
 * xq = round(x / s) (int16). A block's dot is then exact integer arithmetic
 * (i32x4.dot_i16x8_s: |w| <= 127, |xq| <= 32767, 32 products fit an int32),
 * and per block in order acc += float(isum) * (d * s); s = hsum(acc). Twice
 * the float path's speed (no int8 -> float conversion per value); x's
 * error <= half a step (max|x| / 65534 of its block) plus float32 rounding. A block of x holding
 * a NaN or an Inf gets s = NaN: every output it reaches is NaN. */

/* Row x (nb blocks of 32) -> xq (int16) and xs (a scale per block). */
static inline void quantize_x_row(const float * x, int32_t nb, int16_t * xq, float * xs) {
    for (int32_t b = 0; b < nb; b++) {
        const float * xb = x + 32 * b;
        v128_t m = wasm_f32x4_abs(wasm_v128_load(xb));
        for (int k = 1; k < 8; k++) m = wasm_f32x4_max(m, wasm_f32x4_abs(wasm_v128_load(xb + 4 * k)));
        const float amax = f32x4_hmax(m);  /* NaN when a lane is NaN */
        if (!(amax <= 3.4e38f)) {          /* NaN or Inf */
            xs[b] = NAN;
            memset(xq + 32 * b, 0, 64);
            continue;
        }
        xs[b] = amax / 32767.0f;
        /* 32767 / amax overflows float32 below amax ~ 9.6e-35 (x * Inf would make
         * every non-zero value +-32767): such a block is scaled by 2^64 first,
         * exactly (a power of two; the products stay normal), the same quotient */
        const float sc = amax < 0x1p-64f ? 0x1p64f : 1.0f;
        const v128_t vsc = wasm_f32x4_splat(sc);
        const v128_t inv = wasm_f32x4_splat(amax > 0.0f ? 32767.0f / (amax * sc) : 0.0f);
        for (int k = 0; k < 4; k++) {
            const v128_t lo = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_f32x4_mul(wasm_v128_load(xb + 8 * k), vsc), inv)));
            const v128_t hi = wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_nearest(wasm_f32x4_mul(wasm_f32x4_mul(wasm_v128_load(xb + 8 * k + 4), vsc), inv)));
            wasm_v128_store(xq + 32 * b + 8 * k, wasm_i16x8_narrow_i32x4(lo, hi));
        }
    }
}

/* A block's 32 weights as four int16x8 (values 0-7, 8-15, 16-23, 24-31). */
static inline void q8_block_i16(const uint8_t * b, v128_t * w) {
    const v128_t qa = wasm_v128_load(b + 2), qb = wasm_v128_load(b + 18);
    w[0] = wasm_i16x8_extend_low_i8x16(qa); w[1] = wasm_i16x8_extend_high_i8x16(qa);
    w[2] = wasm_i16x8_extend_low_i8x16(qb); w[3] = wasm_i16x8_extend_high_i8x16(qb);
}
static inline void q4_block_i16(const uint8_t * b, v128_t * w) {
    const v128_t q = wasm_v128_load(b + 2), eight = wasm_i8x16_splat(8);
    const v128_t lo = wasm_i8x16_sub(wasm_v128_and(q, wasm_i8x16_splat(15)), eight);
    const v128_t hi = wasm_i8x16_sub(wasm_u8x16_shr(q, 4), eight);
    w[0] = wasm_i16x8_extend_low_i8x16(lo); w[1] = wasm_i16x8_extend_high_i8x16(lo);
    w[2] = wasm_i16x8_extend_low_i8x16(hi); w[3] = wasm_i16x8_extend_high_i8x16(hi);
}

static inline void q5_block_i16(const uint8_t * b, v128_t * w) {
    v128_t lo, hi;
    q5_block_i8(b, &lo, &hi);
    w[0] = wasm_i16x8_extend_low_i8x16(lo); w[1] = wasm_i16x8_extend_high_i8x16(lo);
    w[2] = wasm_i16x8_extend_low_i8x16(hi); w[3] = wasm_i16x8_extend_high_i8x16(hi);
}
static inline void qb_block_i16(int32_t dt, const uint8_t * b, v128_t * w) {
    if (dt == SDPA_DTYPE_Q8_0) q8_block_i16(b, w);
    else if (dt == SDPA_DTYPE_Q4_0) q4_block_i16(b, w);
    else q5_block_i16(b, w);
}

/* The block's integer dot with xq's block (4 int32 lanes: exact). */
static inline v128_t block_isum(const v128_t * w, const int16_t * xq) {
    v128_t s = wasm_i32x4_dot_i16x8(w[0], wasm_v128_load(xq));
    s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(w[1], wasm_v128_load(xq + 8)));
    s = wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(w[2], wasm_v128_load(xq + 16)));
    return wasm_i32x4_add(s, wasm_i32x4_dot_i16x8(w[3], wasm_v128_load(xq + 24)));
}

static inline v128_t block_fma_i16(v128_t acc, const v128_t * w, const int16_t * xq, float d, float s) {
    return f32x4_fmadd(acc, wasm_f32x4_convert_i32x4(block_isum(w, xq)), wasm_f32x4_splat(d * s));
}

/* rows weight rows (1 or 2, rs bytes apart) against one quantized x row: y[0] (and y[ys]) (+)=. */
static inline void q_dot_i16x_w2_of(const uint8_t * w, size_t rs, int32_t rows, int32_t dt, const int16_t * xq, const float * xs,
                           int32_t nb, float * y, size_t ys, bool acc) {
    const size_t bb = qb_bytes(dt);
    v128_t a0 = wasm_f32x4_splat(0), a1 = a0, f[4];
    for (int32_t b = 0; b < nb; b++) {
        const uint8_t * p = w + b * bb;
        qb_block_i16(dt, p, f);
        a0 = block_fma_i16(a0, f, xq + 32 * b, half_to_float(load_u16(p)), xs[b]);
        if (rows == 2) {
            p += rs;
            qb_block_i16(dt, p, f);
            a1 = block_fma_i16(a1, f, xq + 32 * b, half_to_float(load_u16(p)), xs[b]);
        }
    }
    const float s0 = f32x4_hsum(a0);
    y[0] = acc ? y[0] + s0 : s0;
    if (rows == 2) { const float s1 = f32x4_hsum(a1); y[ys] = acc ? y[ys] + s1 : s1; }
}

/* One weight row against 4 quantized x rows (xqs int16 / nb scales apart): y[r * ys] (+)=. */
static inline void q_dot_i16x_x4w1_of(const uint8_t * w, int32_t dt, const int16_t * xq, size_t xqs, const float * xs, int32_t nb,
                           float * y, size_t ys, bool acc) {
    const size_t bb = qb_bytes(dt);
    v128_t a0 = wasm_f32x4_splat(0), a1 = a0, a2 = a0, a3 = a0, f[4];
    for (int32_t b = 0; b < nb; b++) {
        const uint8_t * p = w + b * bb;
        qb_block_i16(dt, p, f);
        const float d = half_to_float(load_u16(p));
        const int16_t * xb = xq + 32 * b;
        a0 = block_fma_i16(a0, f, xb, d, xs[b]);
        a1 = block_fma_i16(a1, f, xb + xqs, d, xs[nb + b]);
        a2 = block_fma_i16(a2, f, xb + 2 * xqs, d, xs[2 * nb + b]);
        a3 = block_fma_i16(a3, f, xb + 3 * xqs, d, xs[3 * nb + b]);
    }
    const float s[4] = { f32x4_hsum(a0), f32x4_hsum(a1), f32x4_hsum(a2), f32x4_hsum(a3) };
    for (int r = 0; r < 4; r++) y[r * ys] = acc ? y[r * ys] + s[r] : s[r];
}

/* ---- q4_k / q6_k weights (ggml's k-quants, 256 values a block) ----------
 *
 * The order of one output (include/sdpa_dense.h "Numerics"):
 *   q4_k: per block in order, per sub-block s = 0..7 of 32 values: p0, p1 as
 *         q8_0's block (groups 0, 2, 4, 6 and 1, 3, 5, 7) over the nibbles
 *         q, acc += (p0 + p1) * (d * sc[s]); then per block macc += xs[0..3]
 *         * (dmin * m[0..3]), macc += xs[4..7] * (dmin * m[4..7]), xs[s] =
 *         x's sum over sub-block s (subblock_sum); s = hsum(acc) - hsum(macc).
 *   q6_k: per block in order, per sub-block of 16 values (v / 16 = 0..15):
 *         p0 = groups 0, 2, p1 = groups 1, 3 of q - 32, acc += (p0 + p1) *
 *         (d * sc); s = hsum(acc).
 * d * sc is exact in float32 (11 + 8 bits), as ggml computes it. The float
 * path's quants are converted times 2^24 and the scales carry 2^-24
 * (i8x16_to_f32_2p24): the same bits. */

/* The sum of 32 values of x in one fixed order (a q4_k sub-block's share of its mins). */
static inline float subblock_sum(const float * x) {
    v128_t a = wasm_f32x4_add(wasm_v128_load(x), wasm_v128_load(x + 4));
    v128_t b = wasm_f32x4_add(wasm_v128_load(x + 8), wasm_v128_load(x + 12));
    a = wasm_f32x4_add(a, wasm_v128_load(x + 16));
    b = wasm_f32x4_add(b, wasm_v128_load(x + 20));
    a = wasm_f32x4_add(a, wasm_v128_load(x + 24));
    b = wasm_f32x4_add(b, wasm_v128_load(x + 28));
    return f32x4_hsum(wasm_f32x4_add(a, b));
}

/* x's 8 sub-block sums of a 256-value block. */
static inline void block_sums_k(const float * x, float * xs) {
    for (int s = 0; s < 8; s++) xs[s] = subblock_sum(x + 32 * s);
}

/* A q4_k block's 8 sub-block scales d * sc[s] * 2^-24 (q4k_sub's values carry
 * 2^24) and mins dmin * m[s] (ggml's get_scale_min_k4). */
static inline void q4k_scales(const uint8_t * b, float * ds, float * dm) {
    const float d = half_to_float(load_u16(b)) * 0x1p-24f, dmin = half_to_float(load_u16(b + 2));
    const uint8_t * q = b + 4;
    for (int s = 0; s < 8; s++) {
        int sc, m;
        if (s < 4) { sc = q[s] & 63; m = q[s + 4] & 63; }
        else { sc = (q[s + 4] & 15) | (q[s - 4] >> 6) << 4; m = (q[s + 4] >> 4) | (q[s] >> 6) << 4; }
        ds[s] = d * (float)sc;
        dm[s] = dmin * (float)m;
    }
}

/* The same scales and mins as vectors, unpacked in SIMD (the scalar loop
 * above cost about a fifth of a decode block): ds[0] = d * sc[0..3] * 2^-24
 * (q4k_sub's values carry 2^24), ds[1] = d * sc[4..7] * 2^-24, dm[0], dm[1]
 * the mins likewise (not scaled; the same float32 products). */
static inline void q4k_scales_v(const uint8_t * b, v128_t * ds, v128_t * dm) {
    const v128_t v = wasm_v128_load(b + 4);  /* the 12 scale bytes (and 4 of qs) */
    const v128_t low6 = wasm_v128_and(v, wasm_i8x16_splat(63));  /* bytes 0-3: sc[0..3], 4-7: m[0..3] */
    const v128_t t = wasm_i8x16_shuffle(v, v, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11);
    const v128_t nib = wasm_v128_bitselect(wasm_v128_and(t, wasm_i8x16_splat(15)), wasm_u8x16_shr(t, 4),
                                           wasm_i32x4_make(-1, 0, 0, 0));
    const v128_t high6 = wasm_v128_or(nib, wasm_i8x16_shl(wasm_u8x16_shr(v, 6), 4));  /* sc[4..7], m[4..7] */
    const v128_t a = wasm_u16x8_extend_low_u8x16(low6), c = wasm_u16x8_extend_low_u8x16(high6);
    const v128_t d = wasm_f32x4_splat(half_to_float(load_u16(b)) * 0x1p-24f), dmin = wasm_f32x4_splat(half_to_float(load_u16(b + 2)));
    ds[0] = wasm_f32x4_mul(d, small_i32x4_to_f32(wasm_u32x4_extend_low_u16x8(a)));
    dm[0] = wasm_f32x4_mul(dmin, small_i32x4_to_f32(wasm_u32x4_extend_high_u16x8(a)));
    ds[1] = wasm_f32x4_mul(d, small_i32x4_to_f32(wasm_u32x4_extend_low_u16x8(c)));
    dm[1] = wasm_f32x4_mul(dmin, small_i32x4_to_f32(wasm_u32x4_extend_high_u16x8(c)));
}

/* Lane l of v in every lane (l a constant once inlined). */
static inline v128_t lane_splat(v128_t v, int l) {
    switch (l & 3) {
    case 0: return wasm_i32x4_shuffle(v, v, 0, 0, 0, 0);
    case 1: return wasm_i32x4_shuffle(v, v, 1, 1, 1, 1);
    case 2: return wasm_i32x4_shuffle(v, v, 2, 2, 2, 2);
    default: return wasm_i32x4_shuffle(v, v, 3, 3, 3, 3);
    }
}

/* Sub-block 2c (high: 2c + 1) of a q4_k block, from its 32 bytes of quants at q,
 * as 8 float32x4 (nibbles 0-15, times 2^24: i8x16_to_f32_2p24). (One sub-block at a time: both at once, 16
 * vectors, spill.) */
static inline void q4k_sub(const uint8_t * q, bool high, v128_t * f) {
    const v128_t a = wasm_v128_load(q), b = wasm_v128_load(q + 16), m = wasm_i8x16_splat(15);
    i8x16_to_f32_2p24(high ? wasm_u8x16_shr(a, 4) : wasm_v128_and(a, m), f);
    i8x16_to_f32_2p24(high ? wasm_u8x16_shr(b, 4) : wasm_v128_and(b, m), f + 4);
}

/* acc += a q4_k block's scaled products with x (256 values); macc += its mins times xs. */
static inline void q4k_block(v128_t * acc, v128_t * macc, const uint8_t * b, const float * x, const float * xs) {
    v128_t ds[2], dm[2], f[8];
    q4k_scales_v(b, ds, dm);
    for (int s = 0; s < 8; s++) {
        q4k_sub(b + 16 + 32 * (s / 2), s & 1, f);
        *acc = block_fma_v(*acc, f, x + 32 * s, lane_splat(ds[s >> 2], s));
    }
    *macc = f32x4_fmadd(*macc, wasm_v128_load(xs), dm[0]);
    *macc = f32x4_fmadd(*macc, wasm_v128_load(xs + 4), dm[1]);
}

/* One 16-value q6_k sub-block (q - 32 as int8) against x: acc += (p0 + p1) * ds,
 * ds = d · sc · 2^-24 (the values carry 2^24: i8x16_to_f32_2p24). */
static inline v128_t q6k_sub(v128_t acc, v128_t q, const float * x, float ds) {
    v128_t f[4];
    i8x16_to_f32_2p24(wasm_i8x16_sub(q, wasm_i8x16_splat(32)), f);
    v128_t p0 = wasm_f32x4_mul(f[0], wasm_v128_load(x));
    v128_t p1 = wasm_f32x4_mul(f[1], wasm_v128_load(x + 4));
    p0 = f32x4_fmadd(p0, f[2], wasm_v128_load(x + 8));
    p1 = f32x4_fmadd(p1, f[3], wasm_v128_load(x + 12));
    return f32x4_fmadd(acc, wasm_f32x4_add(p0, p1), wasm_f32x4_splat(ds));
}

/* A q6_k sub-block's scale d · sc times 2^-24 (q6k_sub's values carry 2^24). */
static inline float q6k_scale(float d, const uint8_t * b, int sub) { return d * (float)((const int8_t *)b)[192 + sub] * 0x1p-24f; }

/* Half h of a q6_k block (128 values) as 8 int8x16 quants (0..63, sub-blocks 8h .. 8h + 7 in order). */
static inline void q6k_half(const uint8_t * b, int h, v128_t * q) {
    const uint8_t * ql = b + 64 * h, * qh = b + 128 + 32 * h;
    const v128_t l0 = wasm_v128_load(ql), l1 = wasm_v128_load(ql + 16), l2 = wasm_v128_load(ql + 32), l3 = wasm_v128_load(ql + 48);
    const v128_t h0 = wasm_v128_load(qh), h1 = wasm_v128_load(qh + 16);
    const v128_t m4 = wasm_i8x16_splat(15), m2 = wasm_i8x16_splat(0x30);
    q[0] = wasm_v128_or(wasm_v128_and(l0, m4), wasm_v128_and(wasm_i8x16_shl(h0, 4), m2));
    q[1] = wasm_v128_or(wasm_v128_and(l1, m4), wasm_v128_and(wasm_i8x16_shl(h1, 4), m2));
    q[2] = wasm_v128_or(wasm_v128_and(l2, m4), wasm_v128_and(wasm_i8x16_shl(h0, 2), m2));
    q[3] = wasm_v128_or(wasm_v128_and(l3, m4), wasm_v128_and(wasm_i8x16_shl(h1, 2), m2));
    q[4] = wasm_v128_or(wasm_u8x16_shr(l0, 4), wasm_v128_and(h0, m2));
    q[5] = wasm_v128_or(wasm_u8x16_shr(l1, 4), wasm_v128_and(h1, m2));
    q[6] = wasm_v128_or(wasm_u8x16_shr(l2, 4), wasm_v128_and(wasm_u8x16_shr(h0, 2), m2));
    q[7] = wasm_v128_or(wasm_u8x16_shr(l3, 4), wasm_v128_and(wasm_u8x16_shr(h1, 2), m2));
}

/* acc += a q6_k block's products with x (256 values). */
static inline v128_t q6k_block(v128_t acc, const uint8_t * b, const float * x) {
    const float d = half_to_float(load_u16(b + 208));
    v128_t q[8];
    for (int h = 0; h < 2; h++) {
        q6k_half(b, h, q);
        for (int k = 0; k < 8; k++) acc = q6k_sub(acc, q[k], x + 128 * h + 16 * k, q6k_scale(d, b, 8 * h + k));
    }
    return acc;
}

/* rows weight rows (1 or 2, rs bytes apart) of a q4_k (q4k true) or q6_k
 * matrix against one x row of nb blocks: y[0] (and y[ys]) (+)=. q4_k: sums
 * holds x's sub-block sums (block_sums_k, [nb][8]), or is NULL and they are
 * made here, once for both rows. */
static inline void kq_dot_w2_of(const uint8_t * w, size_t rs, int32_t rows, bool q4k, const float * x, const float * sums,
                          int32_t nb, float * y, size_t ys, bool acc) {
    v128_t a0 = wasm_f32x4_splat(0), a1 = a0, m0 = a0, m1 = a0;
    float own[8];
    for (int32_t b = 0; b < nb; b++) {
        const float * xb = x + 256 * b;
        if (q4k) {
            const uint8_t * p = w + (size_t)b * 144;
            const float * xs = sums ? sums + 8 * b : own;
            if (!sums) block_sums_k(xb, own);
            q4k_block(&a0, &m0, p, xb, xs);
            if (rows == 2) q4k_block(&a1, &m1, p + rs, xb, xs);
        } else {
            const uint8_t * p = w + (size_t)b * 210;
            a0 = q6k_block(a0, p, xb);
            if (rows == 2) a1 = q6k_block(a1, p + rs, xb);
        }
    }
    const float s0 = f32x4_hsum(a0) - f32x4_hsum(m0);
    y[0] = acc ? y[0] + s0 : s0;
    if (rows == 2) { const float s1 = f32x4_hsum(a1) - f32x4_hsum(m1); y[ys] = acc ? y[ys] + s1 : s1; }
}

/* One weight row against 4 x rows (xs floats apart; q4_k: their sub-block
 * sums sums[r * nb * 8 ..], made once a call): y[r * ys] (+)=. */
static inline void kq_dot_x4w1_of(const uint8_t * w, bool q4k, const float * x, size_t xstride, const float * sums, int32_t nb,
                          float * y, size_t ys, bool acc) {
    v128_t a[4], m[4];
    for (int r = 0; r < 4; r++) a[r] = m[r] = wasm_f32x4_splat(0);
    for (int32_t b = 0; b < nb; b++) {
        const float * xb = x + 256 * b;
        if (q4k) {
            const uint8_t * p = w + (size_t)b * 144;
            v128_t ds[2], dmv[2], f[8];
            q4k_scales_v(p, ds, dmv);
            const v128_t dm0 = dmv[0], dm1 = dmv[1];
            for (int s = 0; s < 8; s++) {
                q4k_sub(p + 16 + 32 * (s / 2), s & 1, f);
                const v128_t vd = lane_splat(ds[s >> 2], s);
                for (int r = 0; r < 4; r++) a[r] = block_fma_v(a[r], f, xb + r * xstride + 32 * s, vd);
            }
            for (int r = 0; r < 4; r++) {
                const float * sr = sums + ((size_t)r * nb + b) * 8;
                m[r] = f32x4_fmadd(m[r], wasm_v128_load(sr), dm0);
                m[r] = f32x4_fmadd(m[r], wasm_v128_load(sr + 4), dm1);
            }
        } else {
            const uint8_t * p = w + (size_t)b * 210;
            const float d = half_to_float(load_u16(p + 208));
            v128_t q[8];
            for (int h = 0; h < 2; h++) {
                q6k_half(p, h, q);
                for (int k = 0; k < 8; k++) {
                    const float ds = q6k_scale(d, p, 8 * h + k);
                    for (int r = 0; r < 4; r++) a[r] = q6k_sub(a[r], q[k], xb + r * xstride + 128 * h + 16 * k, ds);
                }
            }
        }
    }
    for (int r = 0; r < 4; r++) {
        const float s = f32x4_hsum(a[r]) - f32x4_hsum(m[r]);
        y[r * ys] = acc ? y[r * ys] + s : s;
    }
}

/* One weight row against one x row (q4_k: its sums made once a call, sums[b * 8 ..]). */
static inline float kq_dot_w1_of(const uint8_t * w, bool q4k, const float * x, const float * sums, int32_t nb) {
    v128_t a = wasm_f32x4_splat(0), m = a;
    for (int32_t b = 0; b < nb; b++) {
        if (q4k) q4k_block(&a, &m, w + (size_t)b * 144, x + 256 * b, sums + (size_t)b * 8);
        else a = q6k_block(a, w + (size_t)b * 210, x + 256 * b);
    }
    return f32x4_hsum(a) - f32x4_hsum(m);
}

/* ---- elementwise -------------------------------------------------------- */

/* silu(g) * u = g * sigmoid(g) * u, with e = exp(-|g|) (<= 1, never overflows):
 * sigmoid(g) = 1 / (1 + e) for g >= 0, e / (1 + e) below. */
static inline v128_t swiglu4(v128_t g, v128_t u) {
    const v128_t one = wasm_f32x4_splat(1.0f);
    const v128_t e = f32x4_exp_nonpositive(wasm_f32x4_neg(wasm_f32x4_abs(g)));
    const v128_t num = wasm_v128_bitselect(one, e, wasm_f32x4_ge(g, wasm_f32x4_splat(0)));
    return wasm_f32x4_mul(wasm_f32x4_mul(g, wasm_f32x4_div(num, wasm_f32x4_add(one, e))), u);
}

#endif
