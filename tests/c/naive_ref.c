/* naive_ref.c: see naive_ref.h. Straight from CONTRACT.md section 1 (attention) and section 3 (cache storage). */
#include "naive_ref.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

static int naive_check(const naive_params * p, int64_t * n_keys) {
    if (p->B <= 0 || p->Sq <= 0 || p->Skv <= 0 || p->Hq <= 0 || p->Hkv <= 0 || p->D <= 0) return -1;
    if (p->Hq % p->Hkv != 0) return -1;
    if (p->start_pos < 0) return -1;
    int64_t n;
    if (p->mask_kind != NAIVE_MASK_NONE) {
        if (!p->mask || p->mask_cols <= 0) return -1;
        n = p->mask_cols;
    } else {
        n = p->start_pos + (int64_t)p->Sq;
    }
    if (n > p->Skv) return -1;
    *n_keys = n;
    return 0;
}

/* One row: pass 1 scores and max, pass 2 exp and sum, pass 3 weighted V. */
static void naive_row(const naive_params * p, const float * q, const float * k, const float * v,
                      int32_t b, int32_t i, int32_t h, int64_t n_keys, double * score,
                      double * out_row) {
    const int32_t D = p->D;
    const int32_t r = p->Hq / p->Hkv;
    const int32_t hk = h / r;
    const double s = p->has_scale ? p->scale : 1.0 / sqrt((double)D);
    const float * qrow = q + (((size_t)b * p->Sq + (size_t)i) * p->Hq + (size_t)h) * D;

    /* pass 1: scores */
    double maxs = -INFINITY;
    for (int64_t t = 0; t < n_keys; t++) {
        const float * krow = k + (((size_t)b * p->Skv + (size_t)t) * p->Hkv + (size_t)hk) * D;
        double dot = 0.0;
        for (int32_t d = 0; d < D; d++) dot += (double)qrow[d] * (double)krow[d];
        double sc = s * dot;
        if (p->softcap > 0) sc = p->softcap * tanh(sc / p->softcap);
        if (p->mask_kind == NAIVE_MASK_FLOAT) {
            sc += (double)((const float *)p->mask)[(size_t)i * p->mask_cols + (size_t)t];
        } else if (p->mask_kind == NAIVE_MASK_BOOL) {
            if (((const uint8_t *)p->mask)[(size_t)i * p->mask_cols + (size_t)t] == 0) sc = -INFINITY;
        }
        if (p->is_causal && t > p->start_pos + i) sc = -INFINITY;
        if (p->window > 0 && t <= p->start_pos + i - p->window) sc = -INFINITY;
        score[t] = sc;
        /* a NaN score is visible (CONTRACT.md section 5: computed through):
           it becomes the max and stays there, so the whole row is NaN */
        if (isnan(sc) || (!isnan(maxs) && sc > maxs)) maxs = sc;
    }
    for (int32_t d = 0; d < D; d++) out_row[d] = 0.0;
    if (maxs == -INFINITY) return; /* fully masked row (every score -inf): zeros */

    /* the sink logit takes part in the max and the sum, not in the values */
    const double sink = p->sinks ? (double)p->sinks[h] : -INFINITY;
    if (p->sinks && (isnan(sink) || (!isnan(maxs) && sink > maxs))) maxs = sink;

    /* pass 2: exp and sum */
    double sum = p->sinks ? exp(sink - maxs) : 0.0;
    for (int64_t t = 0; t < n_keys; t++) {
        double e = (score[t] == -INFINITY) ? 0.0 : exp(score[t] - maxs);
        score[t] = e;
        sum += e;
    }

    /* pass 3: weighted sum of V (a weight that is exactly 0 skips its V row,
       so a non-finite V row at a masked key never reaches the output) */
    for (int64_t t = 0; t < n_keys; t++) {
        if (score[t] == 0.0) continue;
        const double w = score[t] / sum;
        const float * vrow = v + (((size_t)b * p->Skv + (size_t)t) * p->Hkv + (size_t)hk) * D;
        for (int32_t d = 0; d < D; d++) out_row[d] += w * (double)vrow[d];
    }
}

int naive_sdpa_row(const naive_params * p, const float * q, const float * k, const float * v,
                   int32_t b, int32_t i, int32_t h, double * out_row) {
    int64_t n_keys;
    if (naive_check(p, &n_keys) != 0) return -1;
    if (b < 0 || b >= p->B || i < 0 || i >= p->Sq || h < 0 || h >= p->Hq) return -1;
    double * score = malloc(sizeof(double) * (size_t)(n_keys > 0 ? n_keys : 1));
    if (!score) return -1;
    naive_row(p, q, k, v, b, i, h, n_keys, score, out_row);
    free(score);
    return 0;
}

int naive_sdpa(const naive_params * p, const float * q, const float * k, const float * v,
               double * out) {
    int64_t n_keys;
    if (naive_check(p, &n_keys) != 0) return -1;
    double * score = malloc(sizeof(double) * (size_t)(n_keys > 0 ? n_keys : 1));
    if (!score) return -1;
    for (int32_t b = 0; b < p->B; b++)
        for (int32_t i = 0; i < p->Sq; i++)
            for (int32_t h = 0; h < p->Hq; h++)
                naive_row(p, q, k, v, b, i, h, n_keys, score,
                          out + (((size_t)b * p->Sq + (size_t)i) * p->Hq + (size_t)h) * p->D);
    free(score);
    return 0;
}

/* ---- cache storage (CONTRACT.md section 3) ------------------------------ */

float naive_f16_value(float x) {
    if (isnan(x)) return x;
    const double a = fabs((double)x);
    if (a >= 65520.0) return x < 0 ? -INFINITY : INFINITY;
    int e;
    frexp(a, &e);                       /* a = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1) */
    const int lead = e - 1 < -14 ? -14 : e - 1;  /* below 2^-14: subnormal halves, quantum 2^-24 */
    const double quantum = ldexp(1.0, lead - 10);
    const double r = nearbyint(a / quantum) * quantum;  /* exact division; ties to even */
    return (float)copysign(r, (double)x);
}

/* round half to even, written without rint/nearbyint */
static float round_half_even(float v) {
    const float f = floorf(v), d = v - f;
    if (d > 0.5f) return f + 1.0f;
    if (d < 0.5f) return f;
    return fmodf(f, 2.0f) == 0.0f ? f : f + 1.0f;
}

/* torch.ao.quantization.fx._decomposed: choose_qparams_per_token_asymmetric
 * then quantize_per_token, every step a float32 operation. Non-finite values
 * as the contract says: min/max over the finite ones, NaN -> zero point. */
void naive_int8_quantize(const float * x, int n, int8_t * q, float * scale_out, int8_t * zp_out) {
    float mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < n; i++) if (isfinite(x[i])) { mn = fminf(mn, x[i]); mx = fmaxf(mx, x[i]); }
    const float min_neg = fminf(mn, 0.0f), max_pos = fmaxf(mx, 0.0f);  /* (all non-finite: 0, 0) */
    volatile float scale = (max_pos - min_neg) / (float)(127 - (-128));
    if (scale < FLT_EPSILON) scale = FLT_EPSILON;
    volatile float descaled_min = min_neg / scale, descaled_max = max_pos / scale;
    volatile float err_min = -128.0f + descaled_min, err_max = 127.0f + descaled_max;
    volatile float zp = (err_min + err_max > 0.0f) ? (-128.0f - descaled_min) : (127.0f - descaled_max);
    zp = round_half_even(fminf(fmaxf(zp, -128.0f), 127.0f));
    volatile float inv = 1.0f / scale;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) { q[i] = (int8_t)zp; continue; }
        volatile float t = x[i] * inv;
        t = t + zp;
        q[i] = (int8_t)fminf(fmaxf(round_half_even(t), -128.0f), 127.0f);
    }
    *scale_out = scale;
    *zp_out = (int8_t)zp;
}


/* Every finite binary16 value, ascending (the positive ones from their bits,
 * by the IEEE formula; the negative ones mirrored), built once. */
static double g_halves[2 * 31744 - 1];
static int g_halves_n;
static void build_halves(void) {
    if (g_halves_n) return;
    int n = 0;
    for (int m = 31743; m >= 1; m--) {  /* negative: -65504 .. -2^-24 */
        const int e = m >> 10, f = m & 1023;
        g_halves[n++] = -(e ? ldexp(1.0 + f / 1024.0, e - 15) : ldexp((double)f, -24));
    }
    for (int m = 0; m <= 31743; m++) {  /* 0 .. 65504 */
        const int e = m >> 10, f = m & 1023;
        g_halves[n++] = e ? ldexp(1.0 + f / 1024.0, e - 15) : ldexp((double)f, -24);
    }
    g_halves_n = n;
}

void naive_int4_quantize(const float * x, int n, uint8_t * level, float * scale_out, float * offset_out) {
    build_halves();
    double lo = INFINITY, hi = -INFINITY;
    int storable = 1;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i]) || fabs((double)x[i]) > 65504.0) storable = 0;
        lo = fmin(lo, (double)x[i]);
        hi = fmax(hi, (double)x[i]);
    }
    for (int i = 0; i < n; i++) level[i] = 0;
    if (!storable) { *scale_out = *offset_out = NAN; return; }
    int a = 0, b = g_halves_n - 1;  /* the least half >= lo (binary search; g_halves[last] = 65504 >= lo) */
    while (a < b) {
        const int m = (a + b) / 2;
        if (g_halves[m] >= lo) b = m; else a = m + 1;
    }
    const float offset = (float)g_halves[a];
    if ((double)offset > hi) {  /* none in [lo, hi] */
        *scale_out = 0.0f;
        *offset_out = naive_f16_value((float)lo);
        return;
    }
    /* the greatest half s >= 0 with fl(fl(15 s) + offset) <= hi */
    const int zero = 31743;  /* g_halves[zero] == 0 */
    int best = zero, top = g_halves_n - 1;  /* fits(best), and every j > top does not (fits is monotone in s) */
    while (best < top) {
        const int m = (best + top + 1) / 2;
        volatile float t = 15.0f * (float)g_halves[m];
        t = t + offset;
        if ((double)t <= hi) best = m; else top = m - 1;
    }
    const float scale = (float)g_halves[best];
    for (int i = 0; i < n && scale > 0.0f; i++) {
        volatile float t = x[i] - offset;
        t = t / scale;
        const float r = round_half_even(t);
        level[i] = (uint8_t)fminf(fmaxf(r, 0.0f), 15.0f);
    }
    *scale_out = scale;
    *offset_out = offset;
}
