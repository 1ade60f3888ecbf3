/* rotary.c: rotary position embeddings of one row (the formula is
 * include/sdpa.h's sdpa_rotary). The tile loop rotates each q row as it loads
 * it (flash.c block_load), the reference likewise, and a cache write rotates
 * each K row before it is encoded (cache/kv_cache.c): one function for all
 * three, so their bits agree with each other and with ONNX Runtime's
 * GroupQueryAttention (do_rotary), which computes the same float32 products.
 *
 * Each product is rounded on its own: no FMA may fuse them (the pragmas; the
 * contract promises the bits of the rotation applied outside the op, in
 * every build). */
#include "internal.h"
#include "kernels/simd.h"

#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* Pairs j .. j+3 at once: the same float32 products and sums per lane as
 * the scalar loop (SIMD128 mul / sub / add round like scalar ones), so the
 * bits do not depend on where a row's vector part ends. A row is rotated for
 * every key chunk that loads it (flash.c), so this is worth being fast. */
static int32_t rope_vectors(const float * c, const float * s, int32_t R, bool interleaved, const float * x, float * y) {
    int32_t j = 0;
    for (; j + 4 <= R; j += 4) {
        const v128_t cj = wasm_v128_load(c + j), sj = wasm_v128_load(s + j);
        v128_t xa, xb;
        if (interleaved) {  /* (a0 b0 a1 b1)(a2 b2 a3 b3) -> (a0 a1 a2 a3), (b0 b1 b2 b3) */
            const v128_t lo = wasm_v128_load(x + 2 * j), hi = wasm_v128_load(x + 2 * j + 4);
            xa = wasm_i32x4_shuffle(lo, hi, 0, 2, 4, 6);
            xb = wasm_i32x4_shuffle(lo, hi, 1, 3, 5, 7);
        } else {
            xa = wasm_v128_load(x + j);
            xb = wasm_v128_load(x + j + R);
        }
        const v128_t ya = wasm_f32x4_sub(wasm_f32x4_mul(xa, cj), wasm_f32x4_mul(xb, sj));
        const v128_t yb = wasm_f32x4_add(wasm_f32x4_mul(xb, cj), wasm_f32x4_mul(xa, sj));
        if (interleaved) {
            wasm_v128_store(y + 2 * j, wasm_i32x4_shuffle(ya, yb, 0, 4, 1, 5));
            wasm_v128_store(y + 2 * j + 4, wasm_i32x4_shuffle(ya, yb, 2, 6, 3, 7));
        } else {
            wasm_v128_store(y + j, ya);
            wasm_v128_store(y + j + R, yb);
        }
    }
    return j;
}

void sdpa_rope_row(const sdpa_rope * r, int64_t position, const float * x, float * y, int32_t D) {
    const int32_t R = r->half;
    const float * c = r->cos + (size_t)position * (size_t)R;
    const float * s = r->sin + (size_t)position * (size_t)R;
    const size_t stride = r->interleaved ? 2 : 1;     /* a pair's first element: 2j, or j */
    const size_t other = r->interleaved ? 1 : (size_t)R;  /* its second: + 1, or + R */
    for (int32_t j = rope_vectors(c, s, R, r->interleaved, x, y); j < R; j++) {  /* (the tail) */
        const size_t a = (size_t)j * stride, b = a + other;
        const float xa = x[a], xb = x[b];
        y[a] = xa * c[j] - xb * s[j];
        y[b] = xb * c[j] + xa * s[j];
    }
    if (D > 2 * R) memcpy(y + 2 * (size_t)R, x + 2 * (size_t)R, sizeof(float) * (size_t)(D - 2 * R));
}
