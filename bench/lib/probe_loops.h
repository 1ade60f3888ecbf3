/*
 * probe_loops.h: the loops the machine-limit probes share, one copy for
 * bench/lib/limits.c (per thread; relaxed_madd in its relaxed-SIMD build) and
 * bench/lib/probes.c: the streaming read (read_sum) and the multiply+add
 * register-peak chains (8, 12 and 14 independent accumulators, acc = acc *
 * m + a, 8 FLOP per chain step).
 */
#ifndef SDPA_BENCH_PROBE_LOOPS_H
#define SDPA_BENCH_PROBE_LOOPS_H

#include <stddef.h>
#include <wasm_simd128.h>

/* n is a multiple of 32 floats (128 bytes). */
static inline float read_sum(const float * p, size_t n) {
    v128_t va0 = wasm_f32x4_splat(0.0f), va1 = va0, va2 = va0, va3 = va0;
    v128_t va4 = va0, va5 = va0, va6 = va0, va7 = va0;
    for (size_t i = 0; i < n; i += 32) {
        va0 = wasm_f32x4_add(va0, wasm_v128_load(p + i));
        va1 = wasm_f32x4_add(va1, wasm_v128_load(p + i + 4));
        va2 = wasm_f32x4_add(va2, wasm_v128_load(p + i + 8));
        va3 = wasm_f32x4_add(va3, wasm_v128_load(p + i + 12));
        va4 = wasm_f32x4_add(va4, wasm_v128_load(p + i + 16));
        va5 = wasm_f32x4_add(va5, wasm_v128_load(p + i + 20));
        va6 = wasm_f32x4_add(va6, wasm_v128_load(p + i + 24));
        va7 = wasm_f32x4_add(va7, wasm_v128_load(p + i + 28));
    }
    va0 = wasm_f32x4_add(wasm_f32x4_add(va0, va1), wasm_f32x4_add(va2, va3));
    va4 = wasm_f32x4_add(wasm_f32x4_add(va4, va5), wasm_f32x4_add(va6, va7));
    va0 = wasm_f32x4_add(va0, va4);
    return wasm_f32x4_extract_lane(va0, 0) + wasm_f32x4_extract_lane(va0, 1) +
           wasm_f32x4_extract_lane(va0, 2) + wasm_f32x4_extract_lane(va0, 3);
}

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
