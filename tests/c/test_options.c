/*
 * test_options.c: sliding windows, logit softcap and attention sinks
 * (CONTRACT.md section 1) against the tests' float64 reference
 * (naive_ref.c), over their combinations: window x causal x sinks x softcap x
 * GQA x split-KV chunk boundaries x tile boundaries, through every path of
 * customSdpa (fast 1 and 2 threads bit-identical, the scalar reference, the
 * switch) and through a cache (step); then each new rule's error, with
 * nothing written.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

static sdpa_ctx * g_one, * g_two;

typedef struct ocase {
    int32_t Hq, Hkv, D, Sq, Skv, window, causal, sinks;
    float softcap;
    int64_t sp;
} ocase;

static void run_case(const ocase * c, uint64_t seed) {
    snprintf(tu_context, sizeof tu_context, "Hq=%d Hkv=%d D=%d Sq=%d Skv=%d sp=%lld window=%d causal=%d sinks=%d softcap=%g",
             c->Hq, c->Hkv, c->D, c->Sq, c->Skv, (long long)c->sp, c->window, c->causal, c->sinks, (double)c->softcap);
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    const size_t nq = (size_t)c->Sq * c->Hq * c->D, nkv = (size_t)c->Skv * c->Hkv * c->D;
    float * q = tu_malloc(nq * 4), * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4), * sinks = tu_malloc((size_t)c->Hq * 4);
    const float amp = c->softcap > 0 ? 3.0f : 1.0f;  /* with a softcap, scores large enough for tanh to bend */
    for (size_t i = 0; i < nq; i++) q[i] = amp * tu_rng_normal(&rng);
    for (size_t i = 0; i < nkv; i++) { k[i] = amp * tu_rng_normal(&rng); v[i] = tu_rng_normal(&rng); }
    for (int32_t h = 0; h < c->Hq; h++) sinks[h] = tu_rng_uniform(&rng, -2.0f, 4.0f);
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, c->Sq, c->Hq, c->D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, c->Skv, c->Hkv, c->D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, c->Skv, c->Hkv, c->D);
    sdpa_tensor ts = { sinks, (size_t)c->Hq, SDPA_DTYPE_FLOAT32, 1, { c->Hq, 0, 0, 0 } };
    sdpa_options o = { .start_pos = c->sp, .is_causal = c->causal, .window = c->window, .softcap = c->softcap,
                       .sinks = c->sinks ? &ts : NULL };
    naive_params np = { .B = 1, .Sq = c->Sq, .Skv = c->Skv, .Hq = c->Hq, .Hkv = c->Hkv, .D = c->D, .start_pos = c->sp,
                        .is_causal = c->causal, .window = c->window, .softcap = c->softcap, .sinks = c->sinks ? sinks : NULL };
    double * ref = tu_malloc(nq * sizeof(double));
    float * o1 = tu_malloc(nq * 4), * o2 = tu_malloc(nq * 4), * orr = tu_malloc(nq * 4);
    if (TU_CHECK(naive_sdpa(&np, q, k, v, ref) == 0, "reference"))
        tu_custom_paths(g_one, g_two, &tq, &tk, &tv, NULL, &o, ref, o1, o2, orr, 1, NULL, NULL);
    /* the same through a cache: rows 0..sp-1 by update, the query rows by step */
    if (c->Hq % c->Hkv == 0 && c->sp + c->Sq <= c->Skv) {
        sdpa_kv_cache * cache = NULL;
        if (TU_CHECK(sdpa_kv_cache_create(g_two, 1, c->Skv, c->Hkv, c->D, SDPA_DTYPE_FLOAT32, &cache) == SDPA_OK, "cache")) {
            sdpa_status st = SDPA_OK;
            if (c->sp > 0) {
                sdpa_tensor pk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, (int32_t)c->sp, c->Hkv, c->D);
                sdpa_tensor pv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, (int32_t)c->sp, c->Hkv, c->D);
                st = sdpa_kv_cache_update(g_two, cache, &pk, &pv, 0);
            }
            sdpa_tensor nk = tu_tensor4(k + (size_t)c->sp * c->Hkv * c->D, SDPA_DTYPE_FLOAT32, 1, c->Sq, c->Hkv, c->D);
            sdpa_tensor nv = tu_tensor4(v + (size_t)c->sp * c->Hkv * c->D, SDPA_DTYPE_FLOAT32, 1, c->Sq, c->Hkv, c->D);
            sdpa_tensor to = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, 1, c->Sq, c->Hq, c->D);
            /* (o1 still holds the right answer from tu_custom_paths: a step that writes nothing must not pass) */
            tu_fill_nan(o1, nq);
            if (st == SDPA_OK) {
                tu_dirty_error(g_two);
                st = sdpa_kv_cache_step(g_two, cache, &tq, &nk, &nv, NULL, &o, &to);
            }
            /* the cache holds rows 0..sp+Sq-1 of the same K/V: the same reference */
            tu_check_output(g_two, st, "cache.step", o1, ref, nq, tq.dims);
            sdpa_kv_cache_free(cache);
        }
    }
    free(q); free(k); free(v); free(sinks); free(ref); free(o1); free(o2); free(orr);
}

static void test_combinations(void) {
    long n = 0;
    const int32_t windows[] = { 0, 1, 5, 64, 100, 300 };
    const float softcaps[] = { 0.0f, 1.5f, 50.0f };
    /* decode over 700 keys (split-KV: chunks of 256), GQA 4; prefill rows crossing tiles */
    const ocase shapes[] = {
        { 8, 2, 64, 1, 700, 0, 0, 0, 0.0f, 699 },
        { 6, 3, 20, 7, 200, 0, 0, 0, 0.0f, 130 },
        { 4, 1, 7, 65, 130, 0, 0, 0, 0.0f, 65 },
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
            for (int causal = 0; causal < 2; causal++)
                for (int sinks = 0; sinks < 2; sinks++)
                    for (size_t sc = 0; sc < sizeof softcaps / sizeof softcaps[0]; sc++) {
                        ocase c = shapes[s];
                        c.window = windows[w];
                        c.causal = causal;
                        c.sinks = sinks;
                        c.softcap = softcaps[sc];
                        run_case(&c, 1000 + n++);
                    }
    printf("  %ld option combinations\n", n);
}

/* Every row fully outside its window with a sink: zeros (the sink has no value row). */
static void test_sink_only(void) {
    ocase c = { 2, 1, 8, 1, 100, 1, 1, 1, 0.0f, 99 };
    run_case(&c, 77);  /* window 1, causal: only the row's own key plus the sink */
}

static void test_rules(void) {
    snprintf(tu_context, sizeof tu_context, "rules");
    float q[2 * 4] = {0}, k[3 * 4] = {0}, v[3 * 4] = {0}, out[2 * 4], sinks[3] = {0}, m[2 * 3] = {0};
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, 1, 2, 4), tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, 3, 1, 4);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, 3, 1, 4), to = tu_tensor4(out, SDPA_DTYPE_FLOAT32, 1, 1, 2, 4);
    sdpa_tensor tm = tu_tensor2(m, SDPA_DTYPE_FLOAT32, 1, 3);
    sdpa_tensor ts = { sinks, 2, SDPA_DTYPE_FLOAT32, 1, { 2, 0, 0, 0 } };
    struct { const char * what; sdpa_options o; int mask; sdpa_status want; const char * kw; } cases[] = {
        { "window -1", { .window = -1 }, 0, SDPA_E_ARG, "window" },
        { "window with a mask", { .window = 2 }, 1, SDPA_E_ARG, "window" },
        { "softcap -1", { .softcap = -1.0f }, 0, SDPA_E_SCALE, "softcap" },
        { "softcap NaN", { .softcap = NAN }, 0, SDPA_E_SCALE, "softcap" },
        { "softcap Inf", { .softcap = INFINITY }, 0, SDPA_E_SCALE, "softcap" },
        { "sinks [3] for 2 heads", { .sinks = &(sdpa_tensor){ sinks, 3, SDPA_DTYPE_FLOAT32, 1, { 3, 0, 0, 0 } } }, 0, SDPA_E_HEADS, "sinks" },
        { "sinks rank 2", { .sinks = &(sdpa_tensor){ sinks, 2, SDPA_DTYPE_FLOAT32, 2, { 1, 2, 0, 0 } } }, 0, SDPA_E_RANK, "sinks" },
        { "sinks len 1 for dims [2]", { .sinks = &(sdpa_tensor){ sinks, 1, SDPA_DTYPE_FLOAT32, 1, { 2, 0, 0, 0 } } }, 0, SDPA_E_DIMS, "sinks" },
        { "sinks bool", { .sinks = &(sdpa_tensor){ sinks, 2, SDPA_DTYPE_BOOL, 1, { 2, 0, 0, 0 } } }, 0, SDPA_E_DTYPE, "sinks" },
        { "out = sinks", { .sinks = &(sdpa_tensor){ out, 2, SDPA_DTYPE_FLOAT32, 1, { 2, 0, 0, 0 } } }, 0, SDPA_E_ARG, "sinks" },
    };
    (void)ts;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int j = 0; j < 8; j++) out[j] = 7.0f;
        cases[i].o.start_pos = 2;
        sdpa_status st = sdpa_custom(g_one, &tq, &tk, &tv, cases[i].mask ? &tm : NULL, &cases[i].o, &to);
        if (cases[i].mask) cases[i].o.start_pos = 0;
        TU_CHECK(st == cases[i].want, "%s: %s, expected %s (%s)", cases[i].what, sdpa_status_code(st),
                 sdpa_status_code(cases[i].want), sdpa_ctx_last_error(g_one));
        TU_CHECK(tu_contains_ci(sdpa_ctx_last_error(g_one), cases[i].kw), "%s: message \"%s\"", cases[i].what,
                 sdpa_ctx_last_error(g_one));
        int untouched = 1;
        for (int j = 0; j < 8; j++) untouched &= out[j] == 7.0f;
        TU_CHECK(untouched, "%s: out was written", cases[i].what);
    }
}

int main(void) {
    double t0 = tu_seconds();
    if (!tu_ctx_pair(&g_one, &g_two)) return 1;
    test_combinations();
    test_sink_only();
    test_rules();
    sdpa_ctx_free(g_one);
    sdpa_ctx_free(g_two);
    printf("  %.2f s\n", tu_seconds() - t0);
    return tu_summary("test_options");
}
