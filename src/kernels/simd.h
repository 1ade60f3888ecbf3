/* simd.h: the SIMD128 vocabulary of the kernels. The wasm build uses the
 * real <wasm_simd128.h>; native builds map the same intrinsics onto SSE/NEON
 * through SIMDe, so native tests, sanitizers and the fuzzer run this code. */
#ifndef SDPA_SIMD_H
#define SDPA_SIMD_H

#ifdef __wasm_simd128__
#include <wasm_simd128.h>
#else
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/wasm/simd128.h>
#endif

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The line size that touches step by and per-thread scratch is aligned to;
 * a touch loads one uint32 word per line. */
#define SDPA_CACHE_LINE 64
#define SDPA_CACHE_LINE_WORDS (SDPA_CACHE_LINE / 4)

/* acc + a*b. The relaxed-SIMD build (clang 16, -mrelaxed-simd) uses
 * f32x4.relaxed_madd: fused where the CPU has FMA (one rounding instead of
 * two), mul+add elsewhere; either is within the float32 tolerance. */
static inline v128_t f32x4_fmadd(v128_t acc, v128_t a, v128_t b) {
#ifdef __wasm_relaxed_simd__
    return __builtin_wasm_relaxed_madd_f32x4(a, b, acc);
#else
    return wasm_f32x4_add(acc, wasm_f32x4_mul(a, b));
#endif
}

/* Lanes summed in a fixed order ((0+2)+(1+3)) so results are reproducible. */
static inline float f32x4_hsum(v128_t v) {
    v128_t s = wasm_f32x4_add(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
    return wasm_f32x4_extract_lane(s, 0) + wasm_f32x4_extract_lane(s, 1);
}

/* The largest lane; NaN when a lane is NaN (f32x4.max propagates it). */
static inline float f32x4_hmax(v128_t v) {
    v128_t s = wasm_f32x4_max(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
    s = wasm_f32x4_max(s, wasm_i32x4_shuffle(s, s, 1, 0, 3, 2));
    return wasm_f32x4_extract_lane(s, 0);
}

/* exp(x) for x <= 0 (softmax after subtracting the max), -inf -> 0.
 * Cephes expf: x = n*ln2 + r with |r| <= ln2/2, degree-6 polynomial, times
 * 2^n built in the exponent bits. n is rounded with the 1.5*2^23 "magic"
 * add, whose low mantissa bits then hold n as an integer (cheaper in V8
 * than nearest + trunc_sat). Relative error ~2 ulp; inputs below -87.33
 * (where 2^n would be subnormal) give 0. NaN stays NaN. */
static inline v128_t f32x4_exp_nonpositive(v128_t x) {
    const v128_t lowest = wasm_f32x4_splat(-87.3365478515625f);  /* -126 ln 2 */
    const v128_t magic = wasm_f32x4_splat(12582912.0f);            /* 1.5 * 2^23 */
    const v128_t underflow = wasm_f32x4_lt(x, lowest);
    x = wasm_f32x4_pmax(x, lowest);  /* pmax(a, b) = a < b ? b : a: a NaN x stays NaN */
    const v128_t biased = wasm_f32x4_add(wasm_f32x4_mul(x, wasm_f32x4_splat(1.44269504088896341f)), magic);
    const v128_t n = wasm_f32x4_sub(biased, magic);
    v128_t r = wasm_f32x4_sub(x, wasm_f32x4_mul(n, wasm_f32x4_splat(0.693359375f)));
    r = wasm_f32x4_sub(r, wasm_f32x4_mul(n, wasm_f32x4_splat(-2.12194440e-4f)));
    v128_t p = wasm_f32x4_splat(1.9875691500e-4f);
    p = f32x4_fmadd(wasm_f32x4_splat(1.3981999507e-3f), p, r);
    p = f32x4_fmadd(wasm_f32x4_splat(8.3334519073e-3f), p, r);
    p = f32x4_fmadd(wasm_f32x4_splat(4.1665795894e-2f), p, r);
    p = f32x4_fmadd(wasm_f32x4_splat(1.6666665459e-1f), p, r);
    p = f32x4_fmadd(wasm_f32x4_splat(5.0000001201e-1f), p, r);
    const v128_t r2 = wasm_f32x4_mul(r, r);
    v128_t y = wasm_f32x4_add(f32x4_fmadd(r, p, r2), wasm_f32x4_splat(1.0f));
    /* biased's bits are 0x4B400000 + n; shifting by 23 drops the 0x4B4 part */
    const v128_t two_n = wasm_i32x4_add(wasm_i32x4_shl(biased, 23), wasm_i32x4_splat(127 << 23));
    y = wasm_f32x4_mul(y, two_n);
    return wasm_v128_andnot(y, underflow);
}

/* binary16 -> float32 for finite halves, sign-extended into i32 lanes: sign,
 * exponent and mantissa shifted into place (the sign's copies above the
 * exponent masked off) and scaled by 2^112, normals and subnormals alike, in
 * 3 operations after the widening load (2 for f16x4_finite_scaled, which
 * leaves the value times 2^-112: exact, subnormals included, so that a
 * product with a factor scaled by 2^112 is the same real number, rounded
 * the same, as the unscaled one). An Inf or NaN would come out as a
 * finite value >= 65536: pages that may hold one are marked
 * (SDPA_PAGE_MARK_NONFINITE) and decoded by f16x4_to_f32x4 instead. */
static inline v128_t f16x4_finite_scaled(v128_t h) {  /* the halves times 2^-112, exactly */
    return wasm_v128_and(wasm_i32x4_shl(h, 13), wasm_i32x4_splat((int32_t)0x8FFFE000u));
}
static inline v128_t f16x4_finite(v128_t h) {
    return wasm_f32x4_mul(f16x4_finite_scaled(h), wasm_f32x4_splat(0x1p112f));
}

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

/* Loads one word of every cache line of n bytes and returns their OR, which
 * the caller must store somewhere the compiler has to keep (else the loads
 * go). Run on memory needed soon while other work computes, it starts its
 * DRAM reads early: wasm has no prefetch instruction (measured: decode over
 * a 64 MiB cache ~35% faster in V8). */
static inline uint32_t touch_bytes(const void * x, size_t n) {
    const uint32_t * w = (const uint32_t *)x;
    uint32_t touched = 0;
    for (size_t i = 0; i < n / 4; i += SDPA_CACHE_LINE_WORDS) touched |= w[i];
    return touched;
}

/* out[d] = acc[d] * inv for d < D (out may be acc); false when an element is
 * not finite. Scales a tile's scores and finishes a row's output. */
static inline bool scale_finite(float * out, const float * acc, float inv, int32_t D) {
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

/* s = c * tanh(s / c) for n scores (n a multiple of 4: a tile's padded
 * scores, whose pad is masked later, so there is no scalar tail). tanh(y) =
 * sign(y) (1 - e) / (1 + e) with e = exp(-2|y|) where that is accurate
 * (|y| >= 1/4), its Taylor series to y^9 below (truncation < 1e-8
 * relative); +-Inf gives +-c, NaN stays NaN. About 2 ulp: a cheaper
 * rational approximation (Eigen's, 7 ulp near 1) was tried and failed the
 * fuzzer, since with c = 50 its error of 4e-7 becomes 2e-5 in a score. */
static inline void softcap_scores(float * s, int32_t n, float c) {
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

#endif
