/* reference.c: CONTRACT.md section 1 written out literally, in double. */
#include "kernels/kernels.h"

#include <math.h>

typedef struct reference_job {
    const sdpa_problem * p;
    double * acc;  /* [n_threads][2 D]: acc's D doubles, then a rotated q's D floats */
} reference_job;

/* score of key t for query row (b, i, h) whose q (rotated by rotary) is
 * `q`, or -inf when t is masked out. */
static double score(const sdpa_problem * p, const float * q, int32_t b, int32_t i, int32_t h, int32_t t) {
    const int32_t D = p->head_dim, hk = h / p->group;
    if (p->is_causal && (int64_t)t > p->start_pos + i) return -INFINITY;
    if (p->window && (int64_t)t <= p->start_pos + i - p->window && t >= p->sink_tokens) return -INFINITY;
    if (p->tree && (int64_t)t >= p->tree_pos && !p->tree[(size_t)i * p->tree_stride + (size_t)(t - p->tree_pos)]) return -INFINITY;
    double dot = 0.0;  /* (each stored key element decoded to its float32 value, any cache dtype) */
    for (int32_t d = 0; d < D; d++) dot += (double)q[d] * (double)sdpa_kv_elem(&p->kv, b, hk, t, false, d);
    double s = (double)p->scale * dot;
    if (p->softcap) s = (double)p->softcap * tanh(s / (double)p->softcap);
    if (p->mask) {
        size_t m = (size_t)i * p->mask_stride + t;
        if (p->mask_dtype == SDPA_DTYPE_BOOL) {
            if (!((const uint8_t *)p->mask)[m]) return -INFINITY;
        } else {
            s += (double)((const float *)p->mask)[m];
        }
    }
    return s;
}

void sdpa_reference_row(const sdpa_problem * p, int32_t b, int32_t i, int32_t h, double * acc) {
    const int32_t D = p->head_dim, N = p->n_keys;
    float * out = p->out + (size_t)b * p->q_stride_b + ((size_t)i * p->q_heads + h) * D;
    const float * q = p->q + (size_t)b * p->q_stride_b + ((size_t)i * p->q_heads + h) * D;
    if (p->rope.half) {  /* the row rotated at its position, into the D floats after acc's D doubles */
        float * rotated = (float *)(void *)(acc + D);
        sdpa_rope_row(&p->rope, p->rope.pos ? p->rope.pos[i] : p->start_pos + i, q, rotated, D);
        q = rotated;
    }

    double max = -INFINITY;
    int32_t visible = 0;  /* scores that are not -inf (NaN counts: it is computed through) */
    for (int32_t t = 0; t < N; t++) {
        double s = score(p, q, b, i, h, t);
        if (s != -INFINITY) visible++;
        if (s > max || isnan(s)) max = s;
    }
    if (!visible) {  /* fully masked row: zeros, not NaN (a sink only adds to the denominator) */
        for (int32_t d = 0; d < D; d++) out[d] = 0.0f;
        return;
    }
    /* a sink logit joins the max and the denominator, with no value row */
    const double sink = p->sinks ? (double)p->sinks[h] : -INFINITY;
    if (p->sinks && (sink > max || isnan(sink))) max = sink;
    double sum = p->sinks ? exp(sink - max) : 0.0;
    for (int32_t t = 0; t < N; t++) sum += exp(score(p, q, b, i, h, t) - max);
    for (int32_t d = 0; d < D; d++) acc[d] = 0.0;
    const int32_t hk = h / p->group;
    for (int32_t t = 0; t < N; t++) {
        double w = exp(score(p, q, b, i, h, t) - max) / sum;
        if (w == 0.0) continue;  /* weight 0 (masked, or exp underflowed): the row adds nothing, not 0 * inf */
        for (int32_t d = 0; d < D; d++) acc[d] += w * (double)sdpa_kv_elem(&p->kv, b, hk, t, true, d);
    }
    for (int32_t d = 0; d < D; d++) out[d] = (float)acc[d];
}

static void reference_unit(void * arg, int32_t unit, int32_t thread) {
    const reference_job * job = arg;
    const sdpa_problem * p = job->p;
    const int32_t h = unit % p->q_heads, i = (unit / p->q_heads) % p->q_len;
    const int32_t b = unit / p->q_heads / p->q_len;
    sdpa_reference_row(p, b, i, h, job->acc + (size_t)thread * 2 * (size_t)p->head_dim);
}

/* per thread: acc's D doubles, then a rotated q row's D floats */
uint64_t sdpa_reference_workspace(int32_t n_threads, const sdpa_problem * p) {
    return sdpa_size_mul(sdpa_size_mul((uint64_t)n_threads, (uint64_t)p->head_dim), 2 * sizeof(double));
}

void sdpa_reference_run(sdpa_pool * pool, const sdpa_problem * p, void * scratch) {
    reference_job job = { p, scratch };
    sdpa_pool_run(pool, reference_unit, &job, p->batch * p->q_len * p->q_heads);
}
