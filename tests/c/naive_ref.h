/*
 * naive_ref.h: the tests' own float64 implementation of CONTRACT.md section 1
 * (customSdpa), written from the contract text, independent of src/.
 *
 *   hk = floor(h / r)                       r = Hq / Hkv
 *   N  = mask ? mask cols : sp + Sq         only keys t < N exist
 *   score[t] = s * dot(q[b,i,h,:], k[b,t,hk,:])   s = scale or 1/sqrt(D)
 *   score[t] += mask[i, t]   (float: additive, unscaled; bool: 0 -> -inf)
 *   score[t] = -inf if causal and t > sp + i, or window W and t <= sp + i - W
 *   (softcap c: score = c * tanh(s * dot / c) before the mask; sinks: the
 *   head's sink logit joins the max and the denominator, with no value row)
 *   out[b,i,h,:] = sum_t softmax(score)[t] * v[b,t,hk,:]; all -inf -> zeros
 *
 * Non-finite data is computed through (CONTRACT.md section 5): a NaN score
 * counts as visible, not masked, so a row with any NaN score is NaN in every
 * element (a row whose every score is NaN too: NaN, not zeros); a +inf score
 * gives inf - inf = NaN, also a NaN row. Only a row whose every score is -inf
 * outputs zeros. (A float mask entry of -inf added to a NaN score is NaN.)
 *
 * Three passes per row (scores + max, exp + sum, weighted sum of V), all in
 * double. Deliberately simple and slow. No validation beyond what is needed
 * not to read out of bounds (returns -1 then).
 */
#ifndef SDPA_NAIVE_REF_H
#define SDPA_NAIVE_REF_H

#include <stddef.h>
#include <stdint.h>

enum { NAIVE_MASK_NONE = 0, NAIVE_MASK_FLOAT = 1, NAIVE_MASK_BOOL = 2 };

typedef struct naive_params {
    int32_t B, Sq, Skv, Hq, Hkv, D;  ///< q/out [B,Sq,Hq,D], k/v [B,Skv,Hkv,D]
    int32_t mask_kind;               ///< NAIVE_MASK_*
    const void * mask;               ///< [Sq, mask_cols] float or uint8
    int32_t mask_cols;               ///< N when a mask is given
    int64_t start_pos;
    int32_t is_causal;
    int32_t has_scale;
    double scale;
    int32_t window;        ///< 0: none; else row i sees only keys t > start_pos + i - window
    double softcap;        ///< 0: none; else score = softcap * tanh(score / softcap), before the mask
    const float * sinks;   ///< NULL, or [Hq]: exp(sinks[h] - max) joins head h's denominator
} naive_params;

/// out: [B, Sq, Hq, D] doubles; q dense [B, Sq, Hq, D], k and v dense
/// [B, Skv, Hkv, D]. Returns 0, or -1 if the parameters would make it read out
/// of bounds (N > Skv, Hq % Hkv != 0, non-positive sizes, negative start_pos).
int naive_sdpa(const naive_params * p, const float * q, const float * k, const float * v,
               double * out);

/// Computes a single output row out[b, i, h, :] (D doubles); same rules.
int naive_sdpa_row(const naive_params * p, const float * q, const float * k, const float * v,
                   int32_t b, int32_t i, int32_t h, double * out_row);

/* The cache dtypes' storage (CONTRACT.md section 3), written from the
 * contract text, independent of src/cache/kv_format.c. */

/// The value a float16 cache stores for x: the nearest binary16 (ties to
/// even), |x| >= 65520 -> +-Inf, NaN stays NaN.
float naive_f16_value(float x);

/// torch's choose_qparams_per_token_asymmetric + quantize_per_token over one
/// row of n values, every step a float32 operation: q[0..n-1], *scale, *zp
/// (non-finite values: min / max over the finite ones, NaN -> the zero point,
/// +-Inf -> 127 / -128). The stored value of element i is (q[i] - zp) * scale.
void naive_int8_quantize(const float * x, int n, int8_t * q, float * scale, int8_t * zp);

/// The int4 storage of one group of n (1..32) values, as the contract states
/// it: offset = the least float16 >= min, scale = the greatest float16 >= 0
/// with fl(fl(15 scale) + offset) <= max (scale 0 and offset = the nearest
/// float16 to min when no float16 lies in [min, max]); level = round half to
/// even of fl(fl(x - offset) / scale) clamped to 0..15 (0 when scale = 0);
/// a group with a NaN, an Inf or |x| > 65504 stores scale = offset = NaN and
/// levels 0. *scale, *offset: the float16 values as floats. The stored value
/// of element i is fl(fl(level[i] * scale) + offset).
void naive_int4_quantize(const float * x, int n, uint8_t * level, float * scale, float * offset);

#endif /* SDPA_NAIVE_REF_H */
