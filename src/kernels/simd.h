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

#endif
