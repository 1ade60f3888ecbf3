/*
 * test_cache.c: the KV-cache entry points (create / update / attend / step /
 * read / data / shape) against the tests' float64 reference.
 *
 * A host copy of the cache in the op's [B, maxSeqLen, Hkv, D] layout is kept
 * next to the library's cache; after every write the library's storage
 * (its pages gathered into [B, Hkv, maxSeqLen, D], tu_cache_dense) and sdpa_kv_cache_read must
 * equal it exactly, and every attend/step output must match naive_sdpa over
 * the host copy (and sdpa_custom over the same data in [B, S, H, D] layout).
 *
 * Scenarios: causal prefill by step, chunked prefill, long decode (hundreds of
 * keys, GQA and MQA, B = 1 and 3), decode with float / bool masks through
 * update + attend, non-causal attend, rewriting earlier rows, filling the
 * cache to capacity, rejected update/step (capacity, scale, dims, q/k length)
 * leaving the cache unchanged, 1 vs 2 threads bit-identical, reference switch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

static sdpa_ctx * g_ctx1;
static sdpa_ctx * g_ctx2;
static int g_ctx1_is_reference;  /* skip the 1 vs 2 threads bit-identity check */

typedef struct cache_run {
    int32_t B, S, Hkv, Hq, D;   /* S = maxSeqLen */
    sdpa_kv_cache * c1, * c2;   /* same contents, 1-thread and 2-thread contexts */
    float * hk, * hv;           /* host copy [B, S, Hkv, D]; unwritten rows NaN */
    int32_t filled;             /* rows 0..filled-1 written */
    tu_rng rng;
    long identical_custom, steps;
} cache_run;

static size_t row_floats(const cache_run * r) {
    return (size_t)r->Hkv * r->D;
}

static int run_init(cache_run * r, int32_t B, int32_t S, int32_t Hkv, int32_t Hq, int32_t D, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->B = B;
    r->S = S;
    r->Hkv = Hkv;
    r->Hq = Hq;
    r->D = D;
    tu_rng_seed(&r->rng, seed);
    snprintf(tu_context, sizeof tu_context, "cache B=%d maxSeqLen=%d Hkv=%d Hq=%d D=%d seed=%" PRIu64, B, S, Hkv,
             Hq, D, seed);
    sdpa_status s1 = sdpa_kv_cache_create(g_ctx1, B, S, Hkv, D, SDPA_DTYPE_FLOAT32, &r->c1);
    sdpa_status s2 = sdpa_kv_cache_create(g_ctx2, B, S, Hkv, D, SDPA_DTYPE_FLOAT32, &r->c2);
    if (!TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK && r->c1 && r->c2, "kv_cache_create: %s / %s",
                  sdpa_status_code(s1), sdpa_status_code(s2)))
        return 0;
    size_t n = (size_t)B * S * row_floats(r);
    r->hk = tu_malloc(n * 4);
    r->hv = tu_malloc(n * 4);
    for (size_t i = 0; i < n; i++) r->hk[i] = r->hv[i] = NAN;
    int32_t b, s, h, d;
    sdpa_kv_cache_shape(r->c1, &b, &s, &h, &d);
    TU_CHECK(b == B && s == S && h == Hkv && d == D, "kv_cache_shape %d %d %d %d", b, s, h, d);
    return 1;
}

static void run_free(cache_run * r) {
    sdpa_kv_cache_free(r->c1);
    sdpa_kv_cache_free(r->c2);
    free(r->hk);
    free(r->hv);
}

/* Library storage [B, Hkv, S, D] equals the host copy bit for bit on rows
   0..filled-1 (all written: updates are contiguous from row 0), and is still
   zero after them. */
static void check_storage(cache_run * r, const char * when) {
    for (int which = 0; which < 2; which++) {
        sdpa_kv_cache * caches[2] = {r->c1, r->c2};
        for (int ci = 0; ci < 2; ci++) {
            float * st = tu_cache_dense(caches[ci], which);
            const float * host = which ? r->hv : r->hk;
            long bad = 0;
            for (int32_t b = 0; b < r->B && !bad; b++)
                for (int32_t h = 0; h < r->Hkv && !bad; h++)
                    for (int32_t t = 0; t < r->S && !bad; t++) {
                        const float * a = st + (((size_t)b * r->Hkv + h) * r->S + t) * r->D;
                        const float * e = host + (((size_t)b * r->S + t) * r->Hkv + h) * r->D;
                        for (int32_t d = 0; d < r->D; d++) {
                            float want = t < r->filled ? e[d] : 0.0f;
                            if (memcmp(&a[d], &want, 4) != 0) {
                                TU_CHECK(0, "%s: %s storage (ctx %d) [b=%d, h=%d, t=%d, d=%d] = %g, want %g", when,
                                         which ? "V" : "K", ci + 1, b, h, t, d, (double)a[d], (double)want);
                                bad = 1;
                                break;
                            }
                        }
                    }
            if (!bad) TU_CHECK(1, "storage");
            free(st);
        }
    }
}

/* sdpa_kv_cache_read(start, len) equals the host copy bit for bit. */
static void check_read(cache_run * r, int32_t start, int32_t len) {
    size_t n = (size_t)r->B * len * row_floats(r);
    float * ko = tu_malloc(n * 4), * vo = tu_malloc(n * 4);
    sdpa_tensor tko = tu_tensor4(ko, SDPA_DTYPE_FLOAT32, r->B, len, r->Hkv, r->D);
    sdpa_tensor tvo = tu_tensor4(vo, SDPA_DTYPE_FLOAT32, r->B, len, r->Hkv, r->D);
    sdpa_status st = sdpa_kv_cache_read(g_ctx2, r->c2, start, len, &tko, &tvo);
    if (TU_CHECK(st == SDPA_OK, "kv_cache_read(%d, %d): %s %s", start, len, sdpa_status_code(st),
                 sdpa_ctx_last_error(g_ctx2))) {
        int ok = 1;
        for (int32_t b = 0; b < r->B && ok; b++) {
            for (int32_t t = 0; t < len && ok; t++) {
                size_t src = ((size_t)b * r->S + (size_t)(start + t)) * row_floats(r);
                size_t dst = ((size_t)b * len + (size_t)t) * row_floats(r);
                int32_t pos = start + t;
                if (pos < r->filled) {
                    ok = memcmp(ko + dst, r->hk + src, row_floats(r) * 4) == 0 &&
                         memcmp(vo + dst, r->hv + src, row_floats(r) * 4) == 0;
                } else {
                    for (size_t j = 0; j < row_floats(r) && ok; j++) ok = ko[dst + j] == 0.0f && vo[dst + j] == 0.0f;
                }
                if (!ok) TU_CHECK(0, "kv_cache_read(%d, %d): row b=%d t=%d differs from what was written", start, len, b, pos);
            }
        }
        if (ok) TU_CHECK(1, "read");
    }
    free(ko);
    free(vo);
}

static void random_rows(cache_run * r, float * k, float * v, int32_t n) {
    size_t m = (size_t)r->B * n * row_floats(r);
    for (size_t i = 0; i < m; i++) {
        k[i] = tu_rng_normal(&r->rng);
        v[i] = tu_rng_uniform(&r->rng, -2.0f, 2.0f);
    }
}

/* Host copy of an update of n rows [B, n, Hkv, D] at position sp. */
static void host_update(cache_run * r, const float * k, const float * v, int32_t n, int32_t sp) {
    for (int32_t b = 0; b < r->B; b++) {
        memcpy(r->hk + ((size_t)b * r->S + sp) * row_floats(r), k + (size_t)b * n * row_floats(r),
               (size_t)n * row_floats(r) * 4);
        memcpy(r->hv + ((size_t)b * r->S + sp) * row_floats(r), v + (size_t)b * n * row_floats(r),
               (size_t)n * row_floats(r) * 4);
    }
    if (sp + n > r->filled) r->filled = sp + n;
}

enum { ATT_CAUSAL = 0, ATT_PLAIN = 1, ATT_FMASK = 2, ATT_BMASK = 3 };

/*
 * One step of n query rows at sp: new K/V rows written at sp..sp+n-1, then
 * attention. use_step: sdpa_kv_cache_step; otherwise update then attend.
 * For masks, N = sp + n columns (the cached keys), with -inf / false entries.
 */
static void do_step(cache_run * r, int32_t n, int32_t sp, int kind, int use_step) {
    const size_t nq = (size_t)r->B * n * r->Hq * r->D;
    const size_t nkv = (size_t)r->B * n * row_floats(r);
    const int masked = kind == ATT_FMASK || kind == ATT_BMASK;
    const int32_t N = sp + n;
    float * q = tu_malloc(nq * 4), * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4);
    float * o1 = tu_malloc(nq * 4), * o2 = tu_malloc(nq * 4), * oc = tu_malloc(nq * 4);
    double * ref = tu_malloc(nq * 8);
    void * mask = masked ? tu_malloc((size_t)n * N * (kind == ATT_BMASK ? 1 : 4)) : NULL;
    const double a = 2.0;
    for (size_t i = 0; i < nq; i++) q[i] = (float)(a * tu_rng_normal(&r->rng));
    random_rows(r, k, v, n);
    if (masked) {
        for (size_t i = 0; i < (size_t)n * N; i++) {
            int off = tu_rng_unit(&r->rng) < 0.2;
            if (kind == ATT_BMASK) ((uint8_t *)mask)[i] = (uint8_t)!off;
            else ((float *)mask)[i] = off ? -INFINITY : tu_rng_normal(&r->rng);
        }
        /* make one row fully masked now and then */
        if (n > 1 && tu_rng_int(&r->rng, 0, 3) == 0) {
            int32_t row = tu_rng_int(&r->rng, 0, n - 1);
            for (int32_t t = 0; t < N; t++) {
                if (kind == ATT_BMASK) ((uint8_t *)mask)[(size_t)row * N + t] = 0;
                else ((float *)mask)[(size_t)row * N + t] = -INFINITY;
            }
        }
    }
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, r->B, n, r->Hq, r->D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, r->B, n, r->Hkv, r->D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, r->B, n, r->Hkv, r->D);
    sdpa_tensor tm = tu_tensor2(mask, kind == ATT_BMASK ? SDPA_DTYPE_BOOL : SDPA_DTYPE_FLOAT32, n, N);
    sdpa_tensor to1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, r->B, n, r->Hq, r->D);
    sdpa_tensor to2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, r->B, n, r->Hq, r->D);
    sdpa_options opt = {.start_pos = sp, .is_causal = kind == ATT_CAUSAL};
    const sdpa_tensor * pm = masked ? &tm : NULL;
    for (size_t i = 0; i < nq; i++) o1[i] = o2[i] = NAN;

    sdpa_status s1, s2;
    if (use_step) {
        s1 = sdpa_kv_cache_step(g_ctx1, r->c1, &tq, &tk, &tv, pm, &opt, &to1);
        s2 = sdpa_kv_cache_step(g_ctx2, r->c2, &tq, &tk, &tv, pm, &opt, &to2);
    } else {
        s1 = sdpa_kv_cache_update(g_ctx1, r->c1, &tk, &tv, sp);
        s2 = sdpa_kv_cache_update(g_ctx2, r->c2, &tk, &tv, sp);
        TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "kv_cache_update(sp %d, n %d): %s / %s: %s", sp, n,
                 sdpa_status_code(s1), sdpa_status_code(s2), sdpa_ctx_last_error(g_ctx2));
        s1 = sdpa_kv_cache_attend(g_ctx1, r->c1, &tq, pm, &opt, &to1);
        s2 = sdpa_kv_cache_attend(g_ctx2, r->c2, &tq, pm, &opt, &to2);
    }
    r->steps++;
    host_update(r, k, v, n, sp);
    char what[160];
    snprintf(what, sizeof what, "%s sp=%d n=%d kind=%d", use_step ? "step" : "update+attend", sp, n, kind);
    if (TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "%s: %s / %s: %s | %s", what, sdpa_status_code(s1),
                 sdpa_status_code(s2), sdpa_ctx_last_error(g_ctx1), sdpa_ctx_last_error(g_ctx2))) {
        naive_params np = {
            .B = r->B, .Sq = n, .Skv = r->S, .Hq = r->Hq, .Hkv = r->Hkv, .D = r->D,
            .mask_kind = kind == ATT_FMASK ? NAIVE_MASK_FLOAT : kind == ATT_BMASK ? NAIVE_MASK_BOOL : NAIVE_MASK_NONE,
            .mask = mask, .mask_cols = N, .start_pos = sp, .is_causal = kind == ATT_CAUSAL,
        };
        TU_CHECK(naive_sdpa(&np, q, r->hk, r->hv, ref) == 0, "test bug: naive rejected %s", what);
        char w2[200];
        snprintf(w2, sizeof w2, "%s (1 thread) vs naive", what);
        tu_close(w2, o1, ref, nq, tq.dims);
        snprintf(w2, sizeof w2, "%s (2 threads) vs naive", what);
        tu_close(w2, o2, ref, nq, tq.dims);
        if (!g_ctx1_is_reference) {
            snprintf(w2, sizeof w2, "%s: 1 vs 2 threads bit-identical", what);
            tu_identical(w2, o1, o2, nq, tq.dims);
        }

        /* sdpa_custom over the same data in [B, S, H, D] layout (rows >= N are NaN there) */
        sdpa_tensor hk = tu_tensor4(r->hk, SDPA_DTYPE_FLOAT32, r->B, r->S, r->Hkv, r->D);
        sdpa_tensor hv = tu_tensor4(r->hv, SDPA_DTYPE_FLOAT32, r->B, r->S, r->Hkv, r->D);
        sdpa_tensor toc = tu_tensor4(oc, SDPA_DTYPE_FLOAT32, r->B, n, r->Hq, r->D);
        sdpa_status sc = sdpa_custom(g_ctx2, &tq, &hk, &hv, pm, &opt, &toc);
        if (TU_CHECK(sc == SDPA_OK, "%s: sdpa_custom on the host copy: %s %s", what, sdpa_status_code(sc),
                     sdpa_ctx_last_error(g_ctx2))) {
            snprintf(w2, sizeof w2, "%s: cache vs sdpa_custom", what);
            tu_close_ff(w2, o2, oc, nq, tq.dims);
            if (memcmp(o2, oc, nq * 4) == 0) r->identical_custom++;
        }
    }
    free(q);
    free(k);
    free(v);
    free(o1);
    free(o2);
    free(oc);
    free(ref);
    free(mask);
}

/* A rejected call must leave both caches as they were. */
static void snapshot_storage(cache_run * r, float ** snap) {
    size_t n = (size_t)r->B * r->S * row_floats(r);
    for (int w = 0; w < 2; w++) {
        snap[w] = tu_malloc(n * 4);
        float * now = tu_cache_dense(r->c2, w);
        memcpy(snap[w], now, n * 4);
        free(now);
    }
}

static void expect_unchanged(cache_run * r, float ** snap, const char * what) {
    size_t n = (size_t)r->B * r->S * row_floats(r);
    for (int w = 0; w < 2; w++) {
        float * now = tu_cache_dense(r->c2, w);
        TU_CHECK(memcmp(snap[w], now, n * 4) == 0, "%s: cache %s changed", what, w ? "V" : "K");
        free(now);
        free(snap[w]);
    }
}

static void rejected_ops(cache_run * r, int32_t sp) {
    const int32_t n = 2;
    if (sp > r->S - n) sp = r->S - n;  /* only the rule under test is broken */
    size_t nq = (size_t)r->B * n * r->Hq * r->D, nkv = (size_t)r->B * n * row_floats(r);
    float * q = tu_malloc(nq * 4), * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4), * o = tu_malloc(nq * 4);
    random_rows(r, k, v, n);
    for (size_t i = 0; i < nq; i++) q[i] = 1.0f;
    for (size_t i = 0; i < nq; i++) o[i] = 7.0f;
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, r->B, n, r->Hq, r->D);
    sdpa_tensor tq1 = tu_tensor4(q, SDPA_DTYPE_FLOAT32, r->B, 1, r->Hq, r->D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, r->B, n, r->Hkv, r->D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, r->B, n, r->Hkv, r->D);
    sdpa_tensor to = tu_tensor4(o, SDPA_DTYPE_FLOAT32, r->B, n, r->Hq, r->D);
    sdpa_tensor to1 = tu_tensor4(o, SDPA_DTYPE_FLOAT32, r->B, 1, r->Hq, r->D);
    float * snap[2];
    sdpa_status st;

    /* step whose attend half is invalid (scale NaN) must not write K/V */
    snapshot_storage(r, snap);
    sdpa_options bad_scale = {.start_pos = sp, .is_causal = 1, .has_scale = 1, .scale = NAN};
    st = sdpa_kv_cache_step(g_ctx2, r->c2, &tq, &tk, &tv, NULL, &bad_scale, &to);
    TU_CHECK(st == SDPA_E_SCALE, "step with scale NaN: %s", sdpa_status_code(st));
    expect_unchanged(r, snap, "step with scale NaN");

    /* q length 1, k length 2: E_DIMS */
    snapshot_storage(r, snap);
    sdpa_options good = {.start_pos = sp, .is_causal = 1};
    st = sdpa_kv_cache_step(g_ctx2, r->c2, &tq1, &tk, &tv, NULL, &good, &to1);
    TU_CHECK(st == SDPA_E_DIMS, "step with q length 1, k length 2: %s", sdpa_status_code(st));
    expect_unchanged(r, snap, "step with q/k length mismatch");

    /* update past the end: E_CAPACITY (E_START_POS first when it would also leave a hole) */
    const sdpa_status past_end = r->filled >= r->S - 1 ? SDPA_E_CAPACITY : SDPA_E_START_POS;
    snapshot_storage(r, snap);
    st = sdpa_kv_cache_update(g_ctx2, r->c2, &tk, &tv, r->S - 1);
    TU_CHECK(st == past_end, "update at maxSeqLen - 1 with 2 rows: %s, expected %s", sdpa_status_code(st),
             sdpa_status_code(past_end));
    expect_unchanged(r, snap, "update past capacity");

    /* step past the end with a mask (update half: E_CAPACITY) */
    snapshot_storage(r, snap);
    float * m = tu_malloc((size_t)n * 4 * 4);
    for (int i = 0; i < n * 4; i++) m[i] = 0.0f;
    sdpa_tensor tm = tu_tensor2(m, SDPA_DTYPE_FLOAT32, n, 4);
    sdpa_options far = {.start_pos = r->S - 1};
    st = sdpa_kv_cache_step(g_ctx2, r->c2, &tq, &tk, &tv, &tm, &far, &to);
    TU_CHECK(st == past_end, "masked step at maxSeqLen - 1 with 2 rows: %s, expected %s", sdpa_status_code(st),
             sdpa_status_code(past_end));
    expect_unchanged(r, snap, "masked step past capacity");
    free(m);

    /* the output was never written */
    int untouched = 1;
    for (size_t i = 0; i < nq; i++) untouched &= o[i] == 7.0f;
    TU_CHECK(untouched, "a rejected step wrote its output");
    free(q);
    free(k);
    free(v);
    free(o);
}

/* Prefill P rows by a causal step, then decode one row at a time to `until`. */
static void scenario_decode(int32_t B, int32_t S, int32_t Hkv, int32_t Hq, int32_t D, int32_t P, int32_t until,
                            uint64_t seed, int mixed) {
    cache_run r;
    if (run_init(&r, B, S, Hkv, Hq, D, seed)) {
        check_storage(&r, "new cache");
        do_step(&r, P, 0, ATT_CAUSAL, 1);
        check_storage(&r, "after prefill");
        check_read(&r, 0, P);
        int32_t sp = P;
        while (sp < until) {
            int kind = ATT_CAUSAL, use_step = 1;
            int32_t n = 1;
            if (mixed) {
                kind = tu_rng_int(&r.rng, 0, 3);
                use_step = tu_rng_int(&r.rng, 0, 1);
                n = tu_rng_int(&r.rng, 0, 5) == 0 ? tu_rng_int(&r.rng, 2, 7) : 1;
                if (sp + n > until) n = until - sp;
            }
            do_step(&r, n, sp, kind, use_step);
            sp += n;
            if (tu_rng_int(&r.rng, 0, 15) == 0) {
                check_storage(&r, "during decode");
                int32_t a = tu_rng_int(&r.rng, 0, sp - 1);
                check_read(&r, a, tu_rng_int(&r.rng, 1, S - a));
                rejected_ops(&r, sp);
            }
        }
        check_storage(&r, "after decode");
        check_read(&r, 0, S);
        printf("  decode B=%d S=%d Hkv=%d Hq=%d D=%d prefill=%d to %d: %ld steps, %ld bit-identical to sdpa_custom\n",
               B, S, Hkv, Hq, D, P, until, r.steps, r.identical_custom);
    }
    run_free(&r);
    tu_context[0] = 0;
}

/* Fill to capacity, the last decode at maxSeqLen - 1, then one step too many. */
static void scenario_full(void) {
    cache_run r;
    if (run_init(&r, 2, 40, 2, 6, 17, 77)) {
        do_step(&r, 33, 0, ATT_CAUSAL, 1);
        for (int32_t sp = 33; sp < 40; sp++) do_step(&r, 1, sp, ATT_CAUSAL, sp % 2);
        check_storage(&r, "full cache");
        check_read(&r, 0, 40);
        check_read(&r, 39, 1);
        rejected_ops(&r, 40);
        /* attending the full cache non-causally, and with a mask over all 40 keys */
        size_t nq = (size_t)r.B * r.Hq * r.D;
        float * q = tu_malloc(nq * 4), * o = tu_malloc(nq * 4);
        double * ref = tu_malloc(nq * 8);
        for (size_t i = 0; i < nq; i++) q[i] = tu_rng_normal(&r.rng);
        sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, r.B, 1, r.Hq, r.D);
        sdpa_tensor to = tu_tensor4(o, SDPA_DTYPE_FLOAT32, r.B, 1, r.Hq, r.D);
        sdpa_options opt = {.start_pos = 39};
        sdpa_status st = sdpa_kv_cache_attend(g_ctx2, r.c2, &tq, NULL, &opt, &to);
        naive_params np = {.B = r.B, .Sq = 1, .Skv = r.S, .Hq = r.Hq, .Hkv = r.Hkv, .D = r.D, .start_pos = 39};
        const int nrc = naive_sdpa(&np, q, r.hk, r.hv, ref);
        TU_CHECK(nrc == 0, "test bug: naive rejected the full-cache attend");
        if (TU_CHECK(st == SDPA_OK, "attend non-causal on a full cache: %s", sdpa_status_code(st)) && nrc == 0)
            tu_close("attend non-causal on a full cache", o, ref, nq, tq.dims);
        /* step at maxSeqLen: rejected (E_START_POS or E_CAPACITY), nothing written */
        float * snap[2];
        snapshot_storage(&r, snap);
        size_t nkv = (size_t)r.B * row_floats(&r);
        float * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4);
        random_rows(&r, k, v, 1);
        sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, r.B, 1, r.Hkv, r.D);
        sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, r.B, 1, r.Hkv, r.D);
        sdpa_options past = {.start_pos = 40, .is_causal = 1};
        st = sdpa_kv_cache_step(g_ctx2, r.c2, &tq, &tk, &tv, NULL, &past, &to);
        TU_CHECK(st == SDPA_E_CAPACITY || st == SDPA_E_START_POS, "step at maxSeqLen: %s", sdpa_status_code(st));
        expect_unchanged(&r, snap, "step at maxSeqLen");
        free(q);
        free(o);
        free(ref);
        free(k);
        free(v);
    }
    run_free(&r);
    tu_context[0] = 0;
}

/* update rewrites rows: write 0..19, rewrite 5..9, attend and read. */
static void scenario_rewrite(void) {
    cache_run r;
    if (run_init(&r, 3, 24, 1, 7, 8, 88)) {
        size_t n20 = (size_t)r.B * 20 * row_floats(&r);
        float * k = tu_malloc(n20 * 4), * v = tu_malloc(n20 * 4);
        random_rows(&r, k, v, 20);
        sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, r.B, 20, r.Hkv, r.D);
        sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, r.B, 20, r.Hkv, r.D);
        sdpa_status s1 = sdpa_kv_cache_update(g_ctx1, r.c1, &tk, &tv, 0);
        sdpa_status s2 = sdpa_kv_cache_update(g_ctx2, r.c2, &tk, &tv, 0);
        TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "update 20 rows: %s %s", sdpa_status_code(s1), sdpa_status_code(s2));
        host_update(&r, k, v, 20, 0);
        random_rows(&r, k, v, 5);
        tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, r.B, 5, r.Hkv, r.D);
        tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, r.B, 5, r.Hkv, r.D);
        s1 = sdpa_kv_cache_update(g_ctx1, r.c1, &tk, &tv, 5);
        s2 = sdpa_kv_cache_update(g_ctx2, r.c2, &tk, &tv, 5);
        TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "rewrite 5 rows: %s %s", sdpa_status_code(s1), sdpa_status_code(s2));
        host_update(&r, k, v, 5, 5);
        check_storage(&r, "after rewrite");
        check_read(&r, 3, 10);
        check_read(&r, 0, 24);
        do_step(&r, 1, 20, ATT_CAUSAL, 0);
        do_step(&r, 3, 21, ATT_FMASK, 1);
        free(k);
        free(v);
    }
    run_free(&r);
    tu_context[0] = 0;
}

/* The reference switch applies to cache attention too. */
static void scenario_reference_switch(void) {
    cache_run r;
    if (run_init(&r, 1, 300, 2, 8, 64, 99)) {
        sdpa_ctx_use_reference(g_ctx1, 1);
        g_ctx1_is_reference = 1;
        do_step(&r, 250, 0, ATT_CAUSAL, 1);
        for (int32_t sp = 250; sp < 260; sp++) do_step(&r, 1, sp, sp % 4, sp % 2);
        sdpa_ctx_use_reference(g_ctx1, 0);
        g_ctx1_is_reference = 0;
    }
    run_free(&r);
    tu_context[0] = 0;
}

int main(void) {
    double t0 = tu_seconds();
    const int quick = tu_quick();
    if (!tu_ctx_pair(&g_ctx1, &g_ctx2)) return 1;
    /* GQA decode over hundreds of keys (Llama-like shape, scaled down) */
    scenario_decode(1, 600, 2, 8, 64, 400, quick ? 430 : 520, 1, 0);
    /* MQA, B = 3, odd head dim */
    scenario_decode(3, 300, 1, 7, 17, 260, quick ? 270 : 300, 2, 0);
    /* mixed: masks, update+attend, short prefill chunks */
    scenario_decode(2, 160, 2, 4, 5, 33, quick ? 80 : 160, 3, 1);
    scenario_decode(1, 64, 4, 4, 128, 1, 64, 4, 1);
    scenario_decode(1, 40, 1, 1, 1, 3, 40, 5, 1);
    scenario_decode(2, 20, 1, 8, 256, 2, 20, 6, 1);
    scenario_full();
    scenario_rewrite();
    scenario_reference_switch();
    printf("  %.2f s%s\n", tu_seconds() - t0, quick ? " (quick)" : "");
    sdpa_ctx_free(g_ctx1);
    sdpa_ctx_free(g_ctx2);
    return tu_summary("test_cache");
}
