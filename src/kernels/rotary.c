/* rotary.c: rotary position embeddings of one row (issue 21; the formula is
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

#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

void sdpa_rope_row(const sdpa_rope * r, int64_t position, const float * x, float * y, int32_t D) {
    const int32_t R = r->half;
    const float * c = r->cos + (size_t)position * (size_t)R;
    const float * s = r->sin + (size_t)position * (size_t)R;
    const size_t stride = r->interleaved ? 2 : 1;     /* a pair's first element: 2j, or j */
    const size_t other = r->interleaved ? 1 : (size_t)R;  /* its second: + 1, or + R */
    for (int32_t j = 0; j < R; j++) {
        const size_t a = (size_t)j * stride, b = a + other;
        const float xa = x[a], xb = x[b];
        y[a] = xa * c[j] - xb * s[j];
        y[b] = xb * c[j] + xa * s[j];
    }
    if (D > 2 * R) memcpy(y + 2 * (size_t)R, x + 2 * (size_t)R, sizeof(float) * (size_t)(D - 2 * R));
}
