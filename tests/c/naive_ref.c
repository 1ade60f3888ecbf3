/* naive_ref.c: see naive_ref.h. Straight from CONTRACT.md section 1. */
#include "naive_ref.h"

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
