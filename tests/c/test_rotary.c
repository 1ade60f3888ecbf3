/*
 * test_rotary.c: rotary embeddings (sdpa_rotary) in C.
 *
 * A cache stepped with rotary (prefill, decode steps, then update_rotary +
 * attend with rotary) against a cache of the same dtypes fed the same rows
 * rotated here, in float32 by this file's own loop (the contract's formula:
 * each product rounded, no FMA): outputs and stored rows bit-identical, and
 * 1 vs 2 threads bit-identical. Against the float64 reference (naive_ref.c):
 * q rotated in double, attention over the rows the cache stores (read back);
 * a float32 cache's stored K against k rotated in double. NeoX and GPT-J
 * pairs, full and partial (odd R) rotary, every cache dtype for K, explicit
 * positions (a draft tree's depths), windowed caches whose steps span pages,
 * stepMany. Every rule: its code, and the cache unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

enum { B = 2, HQ = 4, H = 2, D = 24, P = 400 };

static sdpa_ctx * g_one, * g_two;
static tu_rng g_rng;
static float g_cos[P * (D / 2)], g_sin[P * (D / 2)];  /* tables for R = D / 2; smaller R reuse the rows' start */

static void fill(float * p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = tu_rng_uniform(&g_rng, -1.0f, 1.0f);
}

/* cos / sin [P, R] of the usual theta = p * 10000^(-2j / rotaryDim), in float. */
static void make_tables(int32_t R, float * c, float * s) {
    for (int32_t p = 0; p < P; p++)
        for (int32_t j = 0; j < R; j++) {
            const double th = p * pow(10000.0, -2.0 * j / (2.0 * R));
            c[p * R + j] = (float)cos(th);
            s[p * R + j] = (float)sin(th);
        }
}

/* The pair of element j: (2j, 2j+1) interleaved, else (j, j + R). */
static void pair_of(int32_t j, int32_t R, int interleaved, int32_t * a, int32_t * b) {
    *a = interleaved ? 2 * j : j;
    *b = interleaved ? 2 * j + 1 : j + R;
}

/* rows [S, Hn, D] of x rotated in place in float32 at pos[s] (the test's own loop). */
static void rotate_f32(float * x, int32_t S, int32_t Hn, const int32_t * pos, int32_t R, int interleaved) {
    for (int32_t b = 0; b < B; b++)
        for (int32_t t = 0; t < S; t++)
            for (int32_t h = 0; h < Hn; h++) {
                float * r = x + (((size_t)b * S + t) * Hn + h) * D;
                for (int32_t j = 0; j < R; j++) {
                    int32_t a, c;
                    pair_of(j, R, interleaved, &a, &c);
                    const float ca = g_cos[pos[t] * R + j], sa = g_sin[pos[t] * R + j];
                    const float xa = r[a], xb = r[c];
                    const float p1 = xa * ca, p2 = xb * sa, p3 = xb * ca, p4 = xa * sa;
                    r[a] = p1 - p2;
                    r[c] = p3 + p4;
                }
            }
}

/* The same rows rotated in double, into doubles then rounded to the float the
 * reference takes (the reference computes in double from float inputs; a
 * float rounding of the double rotation is within an ulp of the op's). */
static void rotate_f64(const float * x, float * y, int32_t S, int32_t Hn, const int32_t * pos, int32_t R, int interleaved) {
    memcpy(y, x, sizeof(float) * (size_t)B * S * Hn * D);
    for (int32_t b = 0; b < B; b++)
        for (int32_t t = 0; t < S; t++)
            for (int32_t h = 0; h < Hn; h++) {
                const size_t o = (((size_t)b * S + t) * Hn + h) * D;
                for (int32_t j = 0; j < R; j++) {
                    int32_t a, c;
                    pair_of(j, R, interleaved, &a, &c);
                    const double ca = g_cos[pos[t] * R + j], sa = g_sin[pos[t] * R + j];
                    y[o + a] = (float)((double)x[o + a] * ca - (double)x[o + c] * sa);
                    y[o + c] = (float)((double)x[o + c] * ca + (double)x[o + a] * sa);
                }
            }
}

typedef struct rope_case {
    int32_t kdt, vdt;      /* cache dtypes */
    int32_t R;             /* rotaryDim / 2 */
    int interleaved;
    int32_t W, S;          /* a windowed cache when W > 0 */
    int explicit_pos;      /* positions given (a tree's depths) instead of the rows' */
} rope_case;

static sdpa_kv_cache * make_cache(sdpa_ctx * ctx, const rope_case * rc, int32_t L) {
    const sdpa_kv_cache_desc d = { B, L, H, D, rc->kdt, rc->vdt, rc->W, rc->S, 0 };
    sdpa_kv_cache * c = NULL;
    sdpa_status s = sdpa_kv_cache_create_desc(ctx, &d, &c);
    TU_CHECK(s == SDPA_OK, "create: %s", sdpa_ctx_last_error(ctx));
    return s == SDPA_OK ? c : NULL;
}

/* One step of n rows at the caches' length on c1 (rotary, 1 thread), c2
 * (rotary, 2 threads) and cr (the rows rotated here, no rotary); `update`:
 * update_rotary then attend with rotary instead. Checks the bits and the
 * float64 reference. */
static void step_rows(const rope_case * rc, sdpa_kv_cache * c1, sdpa_kv_cache * c2, sdpa_kv_cache * cr,
                      int32_t n, int update, const char * what) {
    const int32_t sp = sdpa_kv_cache_length(c1);
    const size_t qn = (size_t)B * n * HQ * D, kn = (size_t)B * n * H * D;
    float * q = tu_malloc(qn * 4), * k = tu_malloc(kn * 4), * v = tu_malloc(kn * 4);
    float * qr = tu_malloc(qn * 4), * kr = tu_malloc(kn * 4);
    float * o1 = tu_malloc(qn * 4), * o2 = tu_malloc(qn * 4), * orr = tu_malloc(qn * 4);
    int32_t pos[128];
    fill(q, qn); fill(k, kn); fill(v, kn);
    for (int32_t i = 0; i < n; i++)  /* a tree's depths: every other row one deeper */
        pos[i] = rc->explicit_pos ? sp + (i + 1) / 2 : sp + i;
    memcpy(qr, q, qn * 4); memcpy(kr, k, kn * 4);
    rotate_f32(qr, n, HQ, pos, rc->R, rc->interleaved);
    rotate_f32(kr, n, H, pos, rc->R, rc->interleaved);

    sdpa_tensor tc = tu_tensor2(g_cos, SDPA_DTYPE_FLOAT32, P, rc->R), ts = tu_tensor2(g_sin, SDPA_DTYPE_FLOAT32, P, rc->R);
    const sdpa_rotary rot = { &tc, &ts, rc->interleaved, rc->explicit_pos ? n : 0, rc->explicit_pos ? pos : NULL };
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, n, HQ, D), tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D);
    sdpa_tensor tqr = tu_tensor4(qr, SDPA_DTYPE_FLOAT32, B, n, HQ, D), tkr = tu_tensor4(kr, SDPA_DTYPE_FLOAT32, B, n, H, D);
    sdpa_tensor t1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, B, n, HQ, D), t2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, B, n, HQ, D);
    sdpa_tensor tr = tu_tensor4(orr, SDPA_DTYPE_FLOAT32, B, n, HQ, D);
    sdpa_options with = { sp, 1, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, &rot }, plain = with;
    plain.rotary = NULL;
    sdpa_status s1, s2, s3;
    tu_fill_nan(o1, qn); tu_fill_nan(o2, qn); tu_fill_nan(orr, qn);
    if (update) {
        s1 = sdpa_kv_cache_update_rotary(g_one, c1, &tk, &tv, sp, &rot);
        s2 = sdpa_kv_cache_update_rotary(g_two, c2, &tk, &tv, sp, &rot);
        s3 = sdpa_kv_cache_update(g_one, cr, &tkr, &tv, sp);
        if (s1 == SDPA_OK) s1 = sdpa_kv_cache_attend(g_one, c1, &tq, NULL, &with, &t1);
        if (s2 == SDPA_OK) s2 = sdpa_kv_cache_attend(g_two, c2, &tq, NULL, &with, &t2);
        if (s3 == SDPA_OK) s3 = sdpa_kv_cache_attend(g_one, cr, &tqr, NULL, &plain, &tr);
    } else {
        s1 = sdpa_kv_cache_step(g_one, c1, &tq, &tk, &tv, NULL, &with, &t1);
        s2 = sdpa_kv_cache_step(g_two, c2, &tq, &tk, &tv, NULL, &with, &t2);
        s3 = sdpa_kv_cache_step(g_one, cr, &tqr, &tkr, &tv, NULL, &plain, &tr);
    }
    if (TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK && s3 == SDPA_OK, "%s: %s / %s", what, sdpa_ctx_last_error(g_one), sdpa_ctx_last_error(g_two))) {
        const int32_t dims[4] = { B, n, HQ, D };
        tu_identical(what, o1, orr, qn, dims);   /* = the rotation applied outside the op */
        tu_identical(what, o1, o2, qn, dims);    /* 1 vs 2 threads */
        /* the float64 reference over what the cache stores, q rotated in double */
        const int32_t total = sp + n, first = rc->W ? sdpa_kv_cache_window_start(c1) : 0;
        float * kall = tu_malloc((size_t)B * total * H * D * 4), * vall = tu_malloc((size_t)B * total * H * D * 4);
        memset(kall, 0, (size_t)B * total * H * D * 4);
        memset(vall, 0, (size_t)B * total * H * D * 4);
        /* the kept rows: all of them, or a windowed cache's sink rows and windowStart .. total - 1
         * (the evicted ones are outside every query row's window) */
        const int32_t spans[2][2] = { { 0, rc->W ? (rc->S < total ? rc->S : total) : total },
                                      { rc->W ? (first > rc->S ? first : rc->S) : total, total } };
        for (int span = 0; span < 2; span++) {
            const int32_t a = spans[span][0], e = spans[span][1];
            if (e <= a) continue;
            const size_t m = (size_t)B * (e - a) * H * D;
            float * kb = tu_malloc(m * 4), * vb = tu_malloc(m * 4), * kb2 = tu_malloc(m * 4), * vb2 = tu_malloc(m * 4);
            sdpa_tensor rk = tu_tensor4(kb, SDPA_DTYPE_FLOAT32, B, e - a, H, D), rv = tu_tensor4(vb, SDPA_DTYPE_FLOAT32, B, e - a, H, D);
            sdpa_tensor rk2 = tu_tensor4(kb2, SDPA_DTYPE_FLOAT32, B, e - a, H, D), rv2 = tu_tensor4(vb2, SDPA_DTYPE_FLOAT32, B, e - a, H, D);
            if (TU_CHECK(sdpa_kv_cache_read(g_one, c1, a, e - a, &rk, &rv) == SDPA_OK &&
                         sdpa_kv_cache_read(g_one, cr, a, e - a, &rk2, &rv2) == SDPA_OK, "%s: read: %s", what, sdpa_ctx_last_error(g_one))) {
                const int32_t rd[4] = { B, e - a, H, D };
                tu_identical("stored K = K rotated outside, then stored", kb, kb2, m, rd);
                for (int32_t b = 0; b < B; b++)
                    for (int32_t t = a; t < e; t++) {
                        memcpy(kall + (((size_t)b * total + t) * H) * D, kb + (((size_t)b * (e - a) + (t - a)) * H) * D, (size_t)H * D * 4);
                        memcpy(vall + (((size_t)b * total + t) * H) * D, vb + (((size_t)b * (e - a) + (t - a)) * H) * D, (size_t)H * D * 4);
                    }
            }
            free(kb); free(vb); free(kb2); free(vb2);
        }
        /* a float32 cache stores k rotated: its new rows against k rotated in double */
        if (rc->kdt == SDPA_DTYPE_FLOAT32) {
            float * k64 = tu_malloc(kn * 4), * knew = tu_malloc(kn * 4);
            rotate_f64(k, k64, n, H, pos, rc->R, rc->interleaved);
            double * kd = tu_malloc(kn * sizeof(double));
            for (size_t i = 0; i < kn; i++) kd[i] = k64[i];
            for (int32_t b = 0; b < B; b++)
                memcpy(knew + (size_t)b * n * H * D, kall + ((size_t)b * total + sp) * H * D, (size_t)n * H * D * 4);
            const int32_t kd4[4] = { B, n, H, D };
            tu_close("stored K vs k rotated in float64", knew, kd, kn, kd4);
            free(k64); free(knew); free(kd);
        }
        float * q64 = tu_malloc(qn * 4);
        rotate_f64(q, q64, n, HQ, pos, rc->R, rc->interleaved);
        double * ref = tu_malloc(qn * sizeof(double));
        naive_params np = { B, n, total, HQ, H, D, NAIVE_MASK_NONE, NULL, 0, sp, 1, 0, 0.0, rc->W, 0.0, NULL };
        if (rc->W && rc->S) {  /* sink rows stay visible: the window as a bool mask [n, total] instead */
            uint8_t * m = tu_malloc((size_t)n * total);
            for (int32_t i = 0; i < n; i++)
                for (int32_t t = 0; t < total; t++) m[(size_t)i * total + t] = t <= sp + i && (t > sp + i - rc->W || t < rc->S);
            np.mask_kind = NAIVE_MASK_BOOL; np.mask = m; np.mask_cols = total; np.is_causal = 0; np.window = 0;
            TU_CHECK(naive_sdpa(&np, q64, kall, vall, ref) == 0, "%s: naive", what);
            free(m);
        } else {
            TU_CHECK(naive_sdpa(&np, q64, kall, vall, ref) == 0, "%s: naive", what);
        }
        /* (the integer kernels quantize q and the weights to int16: the int8 tolerance, testutil.h) */
        const int integer = rc->kdt == SDPA_DTYPE_INT8 || rc->kdt == SDPA_DTYPE_INT4 || rc->vdt == SDPA_DTYPE_INT8 || rc->vdt == SDPA_DTYPE_INT4;
        if (integer) tu_close_tol(what, o1, ref, qn, dims, TU_INT8_TOL);
        else tu_close(what, o1, ref, qn, dims);
        free(q64); free(ref); free(kall); free(vall);
    }
    free(q); free(k); free(v); free(qr); free(kr); free(o1); free(o2); free(orr);
}

static void run_case(const rope_case * rc) {
    char what[200];
    snprintf(what, sizeof what, "rotary K %d V %d R %d %s W %d S %d%s", rc->kdt, rc->vdt, rc->R,
             rc->interleaved ? "GPT-J" : "NeoX", rc->W, rc->S, rc->explicit_pos ? " positions" : "");
    snprintf(tu_context, sizeof tu_context, "%s", what);
    make_tables(rc->R, g_cos, g_sin);
    const int32_t L = P;
    sdpa_kv_cache * c1 = make_cache(g_one, rc, L), * c2 = make_cache(g_two, rc, L), * cr = make_cache(g_one, rc, L);
    if (c1 && c2 && cr) {
        /* a prefill (a windowed one spans pages), decode steps, an update + attend, a step over a page boundary */
        const int32_t steps[][2] = { { rc->W ? 70 : 9, 0 }, { 1, 0 }, { 1, 0 }, { 3, 1 }, { 1, 0 }, { 5, 0 } };
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) step_rows(rc, c1, c2, cr, steps[i][0], steps[i][1], what);
    }
    sdpa_kv_cache_free(c1); sdpa_kv_cache_free(c2); sdpa_kv_cache_free(cr);
    tu_context[0] = 0;
}

static void test_cases(void) {
    const int32_t dts[4] = { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT16, SDPA_DTYPE_INT8, SDPA_DTYPE_INT4 };
    for (int d = 0; d < 4; d++)
        for (int inter = 0; inter < 2; inter++) {
            const rope_case full = { dts[d], dts[(d + 1) % 4], D / 2, inter, 0, 0, 0 };
            run_case(&full);
        }
    const rope_case more[] = {
        { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, 5, 0, 0, 0, 0 },    /* partial rotary, odd R: elements 10 .. 23 pass through */
        { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, 4, 1, 0, 0, 0 },
        { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, D / 2, 0, 0, 0, 1 }, /* explicit positions */
        { SDPA_DTYPE_INT8, SDPA_DTYPE_INT4, 6, 1, 0, 0, 1 },
        { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, D / 2, 0, 20, 0, 0 },   /* windowed: steps span pages */
        { SDPA_DTYPE_FLOAT16, SDPA_DTYPE_INT8, D / 2, 1, 16, 4, 1 },     /* windowed with sink rows, positions */
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) run_case(&more[i]);
}

/* stepMany with rotary items: each item's bits are its own step's. */
static void test_many(void) {
    const rope_case rc = { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_INT8, D / 2, 0, 0, 0, 0 };
    make_tables(rc.R, g_cos, g_sin);
    sdpa_kv_cache * a = make_cache(g_two, &rc, P), * b = make_cache(g_two, &rc, P);
    sdpa_kv_cache * a1 = make_cache(g_two, &rc, P), * b1 = make_cache(g_two, &rc, P);
    enum { N = 3 };
    const size_t qn = (size_t)B * N * HQ * D, kn = (size_t)B * N * H * D;
    float q[2][B * N * HQ * D], k[2][B * N * H * D], v[2][B * N * H * D], om[2][B * N * HQ * D], os[2][B * N * HQ * D];
    int32_t pos[2][N] = { { 7, 8, 8 }, { 2, 3, 4 } };
    for (int i = 0; i < 2; i++) { fill(q[i], qn); fill(k[i], kn); fill(v[i], kn); }
    sdpa_tensor tc = tu_tensor2(g_cos, SDPA_DTYPE_FLOAT32, P, rc.R), ts = tu_tensor2(g_sin, SDPA_DTYPE_FLOAT32, P, rc.R);
    sdpa_rotary rot[2] = { { &tc, &ts, 0, N, pos[0] }, { &tc, &ts, 0, 0, NULL } };
    sdpa_tensor tq[2], tk[2], tv[2], tm[2], tsx[2];
    sdpa_options o[2];
    for (int i = 0; i < 2; i++) {
        tq[i] = tu_tensor4(q[i], SDPA_DTYPE_FLOAT32, B, N, HQ, D);
        tk[i] = tu_tensor4(k[i], SDPA_DTYPE_FLOAT32, B, N, H, D);
        tv[i] = tu_tensor4(v[i], SDPA_DTYPE_FLOAT32, B, N, H, D);
        tm[i] = tu_tensor4(om[i], SDPA_DTYPE_FLOAT32, B, N, HQ, D);
        tsx[i] = tu_tensor4(os[i], SDPA_DTYPE_FLOAT32, B, N, HQ, D);
        o[i] = (sdpa_options){ 0, 1, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, &rot[i] };
    }
    const sdpa_attend_item items[2] = { { a, &tq[0], NULL, &o[0], &tm[0], &tk[0], &tv[0] }, { b, &tq[1], NULL, &o[1], &tm[1], &tk[1], &tv[1] } };
    sdpa_status s = sdpa_kv_cache_step_many(g_two, items, 2);
    sdpa_status s0 = sdpa_kv_cache_step(g_two, a1, &tq[0], &tk[0], &tv[0], NULL, &o[0], &tsx[0]);
    sdpa_status s1 = sdpa_kv_cache_step(g_two, b1, &tq[1], &tk[1], &tv[1], NULL, &o[1], &tsx[1]);
    if (TU_CHECK(s == SDPA_OK && s0 == SDPA_OK && s1 == SDPA_OK, "stepMany rotary: %s", sdpa_ctx_last_error(g_two))) {
        tu_identical("stepMany rotary item 0", om[0], os[0], qn, NULL);
        tu_identical("stepMany rotary item 1", om[1], os[1], qn, NULL);
    }
    sdpa_kv_cache_free(a); sdpa_kv_cache_free(b); sdpa_kv_cache_free(a1); sdpa_kv_cache_free(b1);
}

/* A rejected call: its code, a message naming `needle`, and the cache as it was. */
static void expect_rule(sdpa_kv_cache * c, sdpa_status got, sdpa_status want, const char * needle, const char * what,
                        const float * k_before, int32_t len_before) {
    TU_CHECK(got == want, "%s: status %d (%s), expected %d", what, got, sdpa_ctx_last_error(g_one), want);
    TU_CHECK(tu_contains_ci(sdpa_ctx_last_error(g_one), needle), "%s: message '%s' lacks '%s'", what, sdpa_ctx_last_error(g_one), needle);
    TU_CHECK(sdpa_kv_cache_length(c) == len_before, "%s: length changed", what);
    float kb[B * 4 * H * D], vb[B * 4 * H * D];
    sdpa_tensor rk = tu_tensor4(kb, SDPA_DTYPE_FLOAT32, B, 4, H, D), rv = tu_tensor4(vb, SDPA_DTYPE_FLOAT32, B, 4, H, D);
    TU_CHECK(sdpa_kv_cache_read(g_one, c, 0, 4, &rk, &rv) == SDPA_OK && memcmp(kb, k_before, sizeof kb) == 0, "%s: rows changed", what);
}

static void test_rules(void) {
    const rope_case rc = { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, 4, 0, 0, 0, 0 };
    make_tables(8, g_cos, g_sin);
    sdpa_kv_cache * c = make_cache(g_one, &rc, 64);
    if (!c) return;
    float q[B * 1 * HQ * D], k[B * 2 * H * D], v[B * 2 * H * D], out[B * 1 * HQ * D], kb[B * 4 * H * D], vb[B * 4 * H * D];
    float kv4[B * 4 * H * D];
    fill(q, sizeof q / 4); fill(k, sizeof k / 4); fill(v, sizeof v / 4); fill(kv4, sizeof kv4 / 4);
    sdpa_tensor t4 = tu_tensor4(kv4, SDPA_DTYPE_FLOAT32, B, 4, H, D);
    TU_CHECK(sdpa_kv_cache_update(g_one, c, &t4, &t4, 0) == SDPA_OK, "rules: fill");
    sdpa_tensor rk = tu_tensor4(kb, SDPA_DTYPE_FLOAT32, B, 4, H, D), rv = tu_tensor4(vb, SDPA_DTYPE_FLOAT32, B, 4, H, D);
    TU_CHECK(sdpa_kv_cache_read(g_one, c, 0, 4, &rk, &rv) == SDPA_OK, "rules: read");
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, 1, HQ, D), tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, 1, H, D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, 1, H, D), to = tu_tensor4(out, SDPA_DTYPE_FLOAT32, B, 1, HQ, D);
    sdpa_tensor tc = tu_tensor2(g_cos, SDPA_DTYPE_FLOAT32, 10, 4), ts = tu_tensor2(g_sin, SDPA_DTYPE_FLOAT32, 10, 4);
    sdpa_tensor tc3 = tc, tsbig = tu_tensor2(g_sin, SDPA_DTYPE_FLOAT32, 10, 5), tcwide = tu_tensor2(g_cos, SDPA_DTYPE_FLOAT32, 4, 13);
    sdpa_tensor tswide = tu_tensor2(g_sin, SDPA_DTYPE_FLOAT32, 4, 13), tcbool = tc, tcout = tu_tensor2(out, SDPA_DTYPE_FLOAT32, 4, 4);
    tc3.rank = 3; tc3.dims[2] = 1;
    tcbool.dtype = SDPA_DTYPE_BOOL; tcbool.len = 40;
    const int32_t far[1] = { 10 }, neg[1] = { -1 }, two[2] = { 1, 2 };
    struct { sdpa_rotary r; sdpa_status want; const char * needle; } cases[] = {
        { { NULL, &ts, 0, 0, NULL }, SDPA_E_ARG, "rotary.cos is missing" },
        { { &tc, &ts, 2, 0, NULL }, SDPA_E_ARG, "rotary.interleaved is 2" },
        { { &tc, &ts, 0, 1, NULL }, SDPA_E_ARG, "rotary.positions and its count" },
        { { &tcout, &ts, 0, 0, NULL }, SDPA_E_ARG, "out shares memory with rotary.cos" },
        { { &tc3, &ts, 0, 0, NULL }, SDPA_E_RANK, "rotary.cos has rank 3" },
        { { &tc, &tsbig, 0, 0, NULL }, SDPA_E_DIMS, "rotary.sin has dims [10, 5] but rotary.cos has [10, 4]" },
        { { &tc, &ts, 0, 2, two }, SDPA_E_DIMS, "rotary.positions has 2 entries but query has 1 row" },
        { { &tcbool, &ts, 0, 0, NULL }, SDPA_E_DTYPE, "rotary.cos is bool" },
        { { &tcwide, &tswide, 0, 0, NULL }, SDPA_E_HEAD_DIM, "rotaryDim 2 * 13 = 26 is more than the cache's headDim 24" },
        { { &tc, &ts, 0, 1, far }, SDPA_E_START_POS, "rotary.positions[0] is 10; expected a position in 0 .. 9" },
        { { &tc, &ts, 0, 1, neg }, SDPA_E_START_POS, "rotary.positions[0] is -1" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char what[96];
        snprintf(what, sizeof what, "rule %zu (%s)", i, cases[i].needle);
        sdpa_options o = { 4, 1, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, &cases[i].r };
        expect_rule(c, sdpa_kv_cache_step(g_one, c, &tq, &tk, &tv, NULL, &o, &to), cases[i].want, cases[i].needle, what, kb, 4);
        if (cases[i].want != SDPA_E_ARG || i == 0 || i == 1)  /* (update has no out) */
            expect_rule(c, sdpa_kv_cache_update_rotary(g_one, c, &tk, &tv, 4, &cases[i].r),
                        cases[i].want, i == 6 ? "but key has 1 row" : cases[i].needle, what, kb, 4);
    }
    /* default positions past the tables: rows 4 .. 4 at position 4, tables of 4 positions */
    sdpa_tensor tc4 = tu_tensor2(g_cos, SDPA_DTYPE_FLOAT32, 4, 4), ts4 = tu_tensor2(g_sin, SDPA_DTYPE_FLOAT32, 4, 4);
    const sdpa_rotary short_tables = { &tc4, &ts4, 0, 0, NULL };
    sdpa_options o = { 4, 1, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, &short_tables };
    expect_rule(c, sdpa_kv_cache_step(g_one, c, &tq, &tk, &tv, NULL, &o, &to), SDPA_E_START_POS,
                "the new rows sit at positions 4 .. 4, but rotary.cos and rotary.sin hold positions 0 .. 3", "short tables", kb, 4);
    /* sdpa_custom takes no rotary */
    sdpa_tensor tk4 = tu_tensor4(kv4, SDPA_DTYPE_FLOAT32, B, 4, H, D);
    o.start_pos = 0;
    TU_CHECK(sdpa_custom(g_one, &tq, &tk4, &tk4, NULL, &o, &to) == SDPA_E_ARG &&
             tu_contains_ci(sdpa_ctx_last_error(g_one), "rotary is an option of KVCache.update"), "custom rotary: %s", sdpa_ctx_last_error(g_one));
    /* attend: the query's rows at startPos 3 */
    o.start_pos = 3;
    TU_CHECK(sdpa_kv_cache_attend(g_one, c, &tq, NULL, &o, &to) == SDPA_OK, "attend with short tables at position 3: %s", sdpa_ctx_last_error(g_one));
    sdpa_kv_cache_free(c);
}

int main(void) {
    double t0 = tu_seconds();
    tu_rng_seed(&g_rng, tu_base_seed(0x2107u));
    if (!tu_ctx_pair(&g_one, &g_two)) return 1;
    test_cases();
    test_many();
    test_rules();
    sdpa_ctx_free(g_one);
    sdpa_ctx_free(g_two);
    printf("  %.2f s\n", tu_seconds() - t0);
    return tu_summary("test_rotary");
}
