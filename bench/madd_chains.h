/*
 * madd_chains.h: the multiply+add register-peak chains (8, 12 and 14
 * independent accumulators, acc = acc * m + a, 8 FLOP per chain step), one
 * copy for the probes that measure the peak: bench/limits.c (per thread,
 * and as relaxed_madd in its relaxed-SIMD build) and bench/probes.c.
 */
#ifndef SDPA_BENCH_MADD_CHAINS_H
#define SDPA_BENCH_MADD_CHAINS_H

#include <wasm_simd128.h>

#ifdef __wasm_relaxed_simd__
#define MADD_STEP(v) v = __builtin_wasm_relaxed_madd_f32x4(v, vm, va)
#else
#define MADD_STEP(v) v = wasm_f32x4_add(wasm_f32x4_mul(v, vm), va)
#endif

static inline float madd8(int iters, float seed) {
    const v128_t vm = wasm_f32x4_splat(0.999f + seed * 0x1p-30f);
    const v128_t va = wasm_f32x4_splat(1e-3f);
    v128_t v0 = wasm_f32x4_splat(seed), v1 = wasm_f32x4_splat(seed + 1), v2 = wasm_f32x4_splat(seed + 2),
           v3 = wasm_f32x4_splat(seed + 3), v4 = wasm_f32x4_splat(seed + 4), v5 = wasm_f32x4_splat(seed + 5),
           v6 = wasm_f32x4_splat(seed + 6), v7 = wasm_f32x4_splat(seed + 7);
    for (int i = 0; i < iters; i++) {
        MADD_STEP(v0); MADD_STEP(v1); MADD_STEP(v2); MADD_STEP(v3);
        MADD_STEP(v4); MADD_STEP(v5); MADD_STEP(v6); MADD_STEP(v7);
    }
    v0 = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_add(v0, v1), wasm_f32x4_add(v2, v3)),
                        wasm_f32x4_add(wasm_f32x4_add(v4, v5), wasm_f32x4_add(v6, v7)));
    return wasm_f32x4_extract_lane(v0, 0) + wasm_f32x4_extract_lane(v0, 3);
}

static inline float madd12(int iters, float seed) {
    const v128_t vm = wasm_f32x4_splat(0.999f + seed * 0x1p-30f);
    const v128_t va = wasm_f32x4_splat(1e-3f);
    v128_t v0 = wasm_f32x4_splat(seed), v1 = wasm_f32x4_splat(seed + 1), v2 = wasm_f32x4_splat(seed + 2),
           v3 = wasm_f32x4_splat(seed + 3), v4 = wasm_f32x4_splat(seed + 4), v5 = wasm_f32x4_splat(seed + 5),
           v6 = wasm_f32x4_splat(seed + 6), v7 = wasm_f32x4_splat(seed + 7), v8 = wasm_f32x4_splat(seed + 8),
           v9 = wasm_f32x4_splat(seed + 9), v10 = wasm_f32x4_splat(seed + 10), v11 = wasm_f32x4_splat(seed + 11);
    for (int i = 0; i < iters; i++) {
        MADD_STEP(v0); MADD_STEP(v1); MADD_STEP(v2); MADD_STEP(v3);
        MADD_STEP(v4); MADD_STEP(v5); MADD_STEP(v6); MADD_STEP(v7);
        MADD_STEP(v8); MADD_STEP(v9); MADD_STEP(v10); MADD_STEP(v11);
    }
    v0 = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_add(v0, v1), wasm_f32x4_add(v2, v3)),
                        wasm_f32x4_add(wasm_f32x4_add(v4, v5), wasm_f32x4_add(v6, v7)));
    v8 = wasm_f32x4_add(wasm_f32x4_add(v8, v9), wasm_f32x4_add(v10, v11));
    v0 = wasm_f32x4_add(v0, v8);
    return wasm_f32x4_extract_lane(v0, 0) + wasm_f32x4_extract_lane(v0, 3);
}

static inline float madd14(int iters, float seed) {
    const v128_t vm = wasm_f32x4_splat(0.999f + seed * 0x1p-30f);
    const v128_t va = wasm_f32x4_splat(1e-3f);
    v128_t v0 = wasm_f32x4_splat(seed), v1 = wasm_f32x4_splat(seed + 1), v2 = wasm_f32x4_splat(seed + 2),
           v3 = wasm_f32x4_splat(seed + 3), v4 = wasm_f32x4_splat(seed + 4), v5 = wasm_f32x4_splat(seed + 5),
           v6 = wasm_f32x4_splat(seed + 6), v7 = wasm_f32x4_splat(seed + 7), v8 = wasm_f32x4_splat(seed + 8),
           v9 = wasm_f32x4_splat(seed + 9), v10 = wasm_f32x4_splat(seed + 10), v11 = wasm_f32x4_splat(seed + 11),
           v12 = wasm_f32x4_splat(seed + 12), v13 = wasm_f32x4_splat(seed + 13);
    for (int i = 0; i < iters; i++) {
        MADD_STEP(v0); MADD_STEP(v1); MADD_STEP(v2); MADD_STEP(v3);
        MADD_STEP(v4); MADD_STEP(v5); MADD_STEP(v6); MADD_STEP(v7);
        MADD_STEP(v8); MADD_STEP(v9); MADD_STEP(v10); MADD_STEP(v11);
        MADD_STEP(v12); MADD_STEP(v13);
    }
    v0 = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_add(v0, v1), wasm_f32x4_add(v2, v3)),
                        wasm_f32x4_add(wasm_f32x4_add(v4, v5), wasm_f32x4_add(v6, v7)));
    v8 = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_add(v8, v9), wasm_f32x4_add(v10, v11)),
                        wasm_f32x4_add(v12, v13));
    v0 = wasm_f32x4_add(v0, v8);
    return wasm_f32x4_extract_lane(v0, 0) + wasm_f32x4_extract_lane(v0, 3);
}

#endif
