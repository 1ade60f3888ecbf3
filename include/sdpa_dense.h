/*
 * sdpa_dense.h: the dense parts of a transformer layer beside the attention
 * (a Llama-family decode step: weight products, RMSNorm, SwiGLU, the
 * embedding lookup), on the same context and thread pool as sdpa.h. The
 * contract is docs/CONTRACT.md section 6; this header states how it maps
 * onto C.
 *
 * Tensors are sdpa_tensor (sdpa.h): `len` is the element count and must
 * equal the product of dims (E_DIMS); activations are float32, row-major.
 *
 * Weights: a weight matrix is a rank-2 sdpa_tensor [rows, cols] (out
 * features x in features, llama2.c's and GGUF's layout: row o is output o's
 * weights), row-major in one of these dtypes, so that the bytes of a GGUF
 * tensor are used as they are in the file:
 *   SDPA_DTYPE_FLOAT32  4 bytes a value
 *   SDPA_DTYPE_FLOAT16  2 bytes a value (IEEE binary16)
 *   SDPA_DTYPE_Q8_0     ggml's block_q8_0: per 32 values of a row, a float16
 *                       scale d then 32 int8 q (34 bytes); value j = d * q[j]
 *   SDPA_DTYPE_Q4_0     ggml's block_q4_0: per 32 values of a row, a float16
 *                       scale d then 16 bytes; byte j holds value j in its low
 *                       nibble and value j + 16 in its high nibble (18 bytes);
 *                       value = d * (nibble - 8)
 *   SDPA_DTYPE_Q5_0     ggml's block_q5_0: per 32 values of a row, a float16
 *                       d, 4 bytes qh (a little-endian uint32: bit j is
 *                       value j's fifth bit), then 16 bytes qs as q4_0's
 *                       (value j's low 4 bits) (22 bytes); value = d * (q - 16)
 *   SDPA_DTYPE_Q4_K     ggml's block_q4_K: per 256 values of a row (8
 *                       sub-blocks of 32), float16 d, float16 dmin, 12 bytes
 *                       of 6-bit scales sc[s] and mins m[s] (ggml's
 *                       get_scale_min_k4: for s < 4 sc = b[s] & 63,
 *                       m = b[s + 4] & 63; else sc = (b[s + 4] & 15) |
 *                       (b[s - 4] >> 6) << 4, m = (b[s + 4] >> 4) |
 *                       (b[s] >> 6) << 4), then 128 bytes qs: byte 32 c + l
 *                       holds value 64 c + l in its low nibble and value
 *                       64 c + 32 + l in its high nibble (c = 0..3, l =
 *                       0..31) (144 bytes); value = (d * sc[s]) * q -
 *                       dmin * m[s], s = value / 32 (float32 steps, as
 *                       ggml's dequantize_row_q4_K)
 *   SDPA_DTYPE_Q6_K     ggml's block_q6_K: per 256 values of a row (16
 *                       sub-blocks of 16), 128 bytes ql, 64 bytes qh, 16
 *                       int8 scales sc, float16 d (210 bytes). In half
 *                       h = 0, 1 (values 128 h ..), with L = ql + 64 h,
 *                       H = qh + 32 h, l = 0..31: value 128 h + l is
 *                       L[l] & 15 | (H[l] & 3) << 4, + 32 + l is L[32 + l]
 *                       & 15 | (H[l] >> 2 & 3) << 4, + 64 + l is L[l] >> 4
 *                       | (H[l] >> 4 & 3) << 4, + 96 + l is L[32 + l] >> 4
 *                       | (H[l] >> 6) << 4; value = (d * sc[v / 16]) *
 *                       (q - 32) (ggml's dequantize_row_q6_K)
 * (q8_0, q4_0 and q5_0: cols must be a multiple of 32, q4_k and q6_k of
 * 256, E_DIMS). A weight's bytes
 * are rows * sdpa_weight_row_bytes(dtype, cols); `data` may have any
 * alignment. NaN or Inf in a weight (a float16 scale included) is computed
 * through, not scanned for: the outputs it reaches are NaN or Inf. With
 * float activations, a block dtype's quants enter a block's sum times 2^24
 * and its scale times 2^-24 (the same bits: powers of two), so an x of
 * magnitude 2^94 (about 2e28) or more can overflow a partial sum to +-Inf.
 *
 * Numerics: every output element is one dot product computed by one thread
 * in one fixed order (float32 accumulation, 4 lanes, then a fixed lane sum;
 * q8_0 / q4_0 / q5_0 scale each block's partial sum by its d, q4_k / q6_k each
 * sub-block's by its d * sc, and q4_k subtracts its mins times x's
 * sub-block sums in a second accumulator), so results are
 * bit-identical for every thread count, and a row's result does not depend
 * on how many rows are computed with it. The relaxed-SIMD builds fuse
 * multiply-adds (other bits, the same tolerance).
 *
 * Errors: each entry checks every rule before writing anything and returns
 * an sdpa_status; on failure no output byte is written and
 * sdpa_ctx_last_error(ctx) starts with the function's name, once, then
 * names the argument (x, weight, out, gate, up, table, ids, source), the
 * rule, and expected vs actual ("sdpa_linear: x is missing (NULL)", as
 * sdpa.h's). Rules, in status order: E_ARG (a
 * NULL tensor or data pointer, out overlapping an input it may not, an id
 * outside the table, a bad eps), E_RANK, E_DIMS (len != product of dims,
 * mismatched sizes, cols not a multiple of a block), E_DTYPE.
 *
 * Threads: output rows are split among the context's threads; a call whose
 * work is below SDPA_DENSE_PARALLEL_MIN_MACS multiply-adds stays on the
 * calling thread (waking the pool costs more). Nothing here allocates, but
 * a float16 product of several x rows takes a row buffer per thread, and
 * a q4_k product of several x rows x's sub-block sums (n * cols / 32
 * floats), from the context's scratch (sdpa.h: the first call of a shape
 * may grow it).
 */
#ifndef SDPA_DENSE_H
#define SDPA_DENSE_H

#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/// Values per block of the quantized weight dtypes (ggml's QK8_0, QK4_0, QK5_0).
#define SDPA_WEIGHT_BLOCK 32
/// Values per block of the k-quant weight dtypes q4_k, q6_k (ggml's QK_K).
#define SDPA_WEIGHT_BLOCK_K 256

/// Multiply-adds below which a dense call runs on the calling thread alone
/// (bench/dense.mjs measures where the pool starts to pay: on a quiet host
/// from 16 K, on a busy one not below 330 K; 2^18 keeps a small model's
/// products, the shipped one's, off the pool, where 2 threads decoded it at
/// 0.67x of one on a busy host).
#define SDPA_DENSE_PARALLEL_MIN_MACS 262144.0
/// Sets that threshold for this context (0: every call with more than one
/// unit of work uses the pool; tests use it on small shapes).
void sdpa_ctx_set_dense_parallel_min_macs(sdpa_ctx * ctx, double macs);

/// Bytes of one row of `cols` values in a weight dtype; 0 for a dtype that is
/// not a weight dtype, or cols not positive or not a multiple of the dtype's
/// block.
size_t sdpa_weight_row_bytes(int32_t dtype, int32_t cols);

/// sdpa_linear's flags.
/// ACCUMULATE: out += x · weightᵀ (a residual add fused in).
/// INT16_ACTIVATIONS: with q8_0 / q4_0 / q5_0 weights (no effect on the
/// others, q4_k / q6_k included), x is quantized per row and
/// block of 32 to int16 (scale max|x| / 32767, round to nearest) and each
/// block's dot is exact integer arithmetic (about twice as fast; x's error
/// <= half a step, max|x| / 65534 of its block, plus float32 rounding; a block of x holding a NaN or an
/// Inf makes the outputs it reaches NaN). Takes n * (2 * cols + 4 * cols / 32)
/// bytes of the context's scratch. No effect on float32 / float16 weights.
#define SDPA_LINEAR_ACCUMULATE 1
#define SDPA_LINEAR_INT16_ACTIVATIONS 2

/// out = x · weightᵀ (flags: SDPA_LINEAR_*, else 0).
///   x       float32 [..., cols]   (rank 1 to 4; n = len / cols rows)
///   weight  [rows, cols]          any weight dtype
///   out     float32 [..., rows]   x's leading dims
/// out must not overlap x or weight (E_ARG); other flag bits are E_ARG.
sdpa_status sdpa_linear(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight,
                        sdpa_tensor * out, int32_t flags);

/// out[i, :] = weight * x[i, :] / sqrt(mean(x[i, :]^2) + eps) (RMSNorm).
///   x, out  float32 [..., dim] (the same dims); out may be x itself, or
///           disjoint from it (E_ARG otherwise)
///   weight  float32 [dim]
///   eps     finite and >= 0 (E_ARG)
sdpa_status sdpa_rms_norm(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight,
                          float eps, sdpa_tensor * out);

/// out = silu(gate) * up, elementwise (SwiGLU's gate; silu(g) = g / (1 + e^-g)).
///   gate, up, out  float32, the same dims; out may be gate or up itself, or
///                  disjoint from both (E_ARG otherwise)
sdpa_status sdpa_swiglu(sdpa_ctx * ctx, const sdpa_tensor * gate, const sdpa_tensor * up,
                        sdpa_tensor * out);

/// out[i, :] = table[ids[i], :] as float32 (an embedding lookup).
///   table  [vocab, dim]  any weight dtype
///   ids    n_ids int32, each in 0 .. vocab - 1 (E_ARG names the first that is not)
///   out    float32 [n_ids, dim]; must not overlap table or ids (E_ARG)
sdpa_status sdpa_embed(sdpa_ctx * ctx, const sdpa_tensor * table, const int32_t * ids,
                       int32_t n_ids, sdpa_tensor * out);

/// out = source quantized to out's dtype (float16: round to nearest even;
/// q8_0 / q4_0: ggml's reference quantize_row_q8_0 / quantize_row_q4_0, d
/// rounded to float16). source float32 [rows, cols]; out [rows, cols] in a
/// weight dtype (float32: a copy), not q5_0 / q4_k / q6_k (E_DTYPE: not
/// offered).
/// Must not overlap (E_ARG).
sdpa_status sdpa_quantize(sdpa_ctx * ctx, const sdpa_tensor * source, sdpa_tensor * out);

#ifdef __cplusplus
}
#endif

#endif
