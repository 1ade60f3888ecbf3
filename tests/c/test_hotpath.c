/*
 * test_hotpath.c: the two promises of a decode loop that are not about the
 * numbers themselves.
 *
 * 1. No allocation in the hot path (include/sdpa.h "Allocation"): after
 *    sdpa_kv_cache_create, sdpa_ctx_scratch_bytes(ctx) stays the same over
 *    every attend / step on that cache (the compute calls allocate only by
 *    growing the scratch). Each scenario uses a fresh context, so the cache's
 *    own reservation is all there is. Covered: decode (Sq = 1) with Hq/Hkv in
 *    {32/8, 14/2, 8/1, 32/2, 64/1}, multi-token steps (Sq = 2, 3 with r = 4,
 *    7, 8), prefill (Sq = 128), B = 2, maxSeqLen values that are not powers
 *    of two above 16384 (20000, 40001), 1 and 2 threads; causal, non-causal,
 *    float mask, and the reference switch. The start positions include the
 *    key count for which sdpa_workspace_size is largest (a decode over fewer
 *    keys than maxSeqLen can need more scratch than one over all of them).
 *
 * 2. Determinism (CONTRACT.md section 1): 1, 2, 3 and 4 threads give
 *    bit-identical outputs (memcmp) for split-KV decode, multi-row decode,
 *    masked decode, prefill, and KV-cache steps; the 1-thread result is also
 *    checked against the float64 reference.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

/* Thread counts 1..N_CTX. One context at a time is alive (the wasm test
   build has a pool of 4 pthreads, one of them running main). */
#define N_CTX 4
static long g_calls;
static int g_fewer;  /* contexts that got fewer threads than asked (wasm pool) */
static int g_verbose;  /* SDPA_TEST_VERBOSE=1: time of every scenario */

/* A context of `threads` threads. Natively it must run that many (a 1 vs N
   threads bit-identity check over fewer threads would prove nothing); the
   wasm build may get fewer from its pthread pool, which is only noted. */
static sdpa_ctx * make_ctx(int32_t threads) {
    sdpa_status st = SDPA_E_ARG;
    sdpa_ctx * ctx = sdpa_ctx_create(threads, &st);
    if (!TU_CHECK(ctx && st == SDPA_OK, "sdpa_ctx_create(%d): %s", threads, sdpa_status_code(st))) {
        sdpa_ctx_free(ctx);
        return NULL;
    }
#ifndef __EMSCRIPTEN__
    TU_CHECK(sdpa_ctx_threads(ctx) == threads, "sdpa_ctx_create(%d) runs %d threads", threads, sdpa_ctx_threads(ctx));
    sdpa_ctx_set_parallel_min_macs(ctx, 0);  /* the workers run even the small steps here */
#endif
    if (sdpa_ctx_threads(ctx) != threads && g_fewer++ == 0)
        printf("  note: sdpa_ctx_create(%d) runs %d threads here\n", threads, sdpa_ctx_threads(ctx));
    return ctx;
}

static void fill_normal(float * p, size_t n, tu_rng * rng, float a) {
    for (size_t i = 0; i < n; i++) p[i] = a * tu_rng_normal(rng);
}

/* ---- 1. no allocation -------------------------------------------------- */

typedef struct hp_case {
    const char * label;
    int32_t threads, B, M, Hq, Hkv, D, Sq;
} hp_case;

/* Adds sp to the list when it is valid and new. */
static int add_sp(int32_t * list, int n, int cap, int64_t sp, int32_t M, int32_t Sq) {
    if (sp < 0 || sp + Sq > M || n >= cap) return n;
    for (int i = 0; i < n; i++)
        if (list[i] == sp) return n;
    list[n] = (int32_t)sp;
    return n + 1;
}

static void hp_run(const hp_case * hc, uint64_t seed) {
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    snprintf(tu_context, sizeof tu_context, "no-alloc %s: threads=%d B=%d maxSeqLen=%d Hq=%d Hkv=%d D=%d Sq=%d",
             hc->label, hc->threads, hc->B, hc->M, hc->Hq, hc->Hkv, hc->D, hc->Sq);
    sdpa_ctx * ctx = make_ctx(hc->threads);
    if (!ctx) return;
    sdpa_status st;
    sdpa_kv_cache * cache = NULL;
    st = sdpa_kv_cache_create(ctx, hc->B, hc->M, hc->Hkv, hc->D, SDPA_DTYPE_FLOAT32, &cache);
    if (!TU_CHECK(st == SDPA_OK, "kv_cache_create: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(ctx))) {
        sdpa_ctx_free(ctx);
        return;
    }
    const size_t reserved = sdpa_ctx_scratch_bytes(ctx);
    TU_CHECK(reserved > 0, "kv_cache_create reserved no scratch");
    {   /* write every row once (a write may not leave a hole, and the loop
           below jumps around): the cache then holds all its pages, and the
           page pool must not grow below */
        const int32_t rows = SDPA_PAGE_ROWS;
        const size_t nfill = (size_t)hc->B * rows * hc->Hkv * hc->D;
        float * fk = tu_malloc(nfill * 4), * fv = tu_malloc(nfill * 4);
        fill_normal(fk, nfill, &rng, 1.0f);
        fill_normal(fv, nfill, &rng, 1.0f);
        for (int32_t t = 0; t < hc->M && st == SDPA_OK; t += rows) {
            const int32_t n = hc->M - t < rows ? hc->M - t : rows;
            sdpa_tensor a = tu_tensor4(fk, SDPA_DTYPE_FLOAT32, hc->B, n, hc->Hkv, hc->D);
            sdpa_tensor b = tu_tensor4(fv, SDPA_DTYPE_FLOAT32, hc->B, n, hc->Hkv, hc->D);
            st = sdpa_kv_cache_update(ctx, cache, &a, &b, t);
        }
        TU_CHECK(st == SDPA_OK && sdpa_kv_cache_length(cache) == hc->M, "filling the cache: %s %s (length %d)",
                 sdpa_status_code(st), sdpa_ctx_last_error(ctx), sdpa_kv_cache_length(cache));
        free(fk);
        free(fv);
    }
    sdpa_memory_stats pool_before;
    sdpa_ctx_memory(ctx, &pool_before);

    /* start positions: fixed edges, the argmax of the workspace, a few random */
    int32_t sps[32];
    int n = 0;
    static const int64_t fixed[] = {0, 1, 2, 63, 64, 255, 256, 257, 511, 1000, 2047, 4095, 8191, 16383, 16384, 16385};
    static const int64_t fixed_prefill[] = {0, 128};  /* a prefill never splits: few positions (cost) */
    const int prefill = hc->Sq >= 64;
    const int64_t * fx = prefill ? fixed_prefill : fixed;
    const size_t nfx = prefill ? sizeof fixed_prefill / sizeof fixed_prefill[0] : sizeof fixed / sizeof fixed[0];
    for (size_t i = 0; i < nfx; i++) n = add_sp(sps, n, 32, fx[i], hc->M, hc->Sq);
    n = add_sp(sps, n, 32, hc->M - hc->Sq, hc->M, hc->Sq);
    size_t best = 0;
    int32_t best_keys = hc->Sq;
    for (int32_t keys = hc->Sq; keys <= hc->M; keys++) {
        size_t w = sdpa_workspace_size(ctx, hc->B, hc->Sq, hc->Hq, hc->Hkv, hc->D, keys);
        if (w > best) {
            best = w;
            best_keys = keys;
        }
    }
    n = add_sp(sps, n, 32, best_keys - hc->Sq, hc->M, hc->Sq);
    for (int i = 0; i < (prefill ? 0 : 2); i++) n = add_sp(sps, n, 32, tu_rng_int(&rng, 0, hc->M - hc->Sq), hc->M, hc->Sq);
    TU_CHECK(best <= reserved, "sdpa_workspace_size(keys = %d) = %zu > the %zu bytes the cache reserved", best_keys, best,
             reserved);

    const size_t nq = (size_t)hc->B * hc->Sq * hc->Hq * hc->D, nkv = (size_t)hc->B * hc->Sq * hc->Hkv * hc->D;
    float * q = tu_malloc(nq * 4), * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4), * o = tu_malloc(nq * 4);
    fill_normal(q, nq, &rng, 1.0f);
    fill_normal(k, nkv, &rng, 1.0f);
    fill_normal(v, nkv, &rng, 1.0f);
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, hc->B, hc->Sq, hc->Hq, hc->D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, hc->B, hc->Sq, hc->Hkv, hc->D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, hc->B, hc->Sq, hc->Hkv, hc->D);
    sdpa_tensor to = tu_tensor4(o, SDPA_DTYPE_FLOAT32, hc->B, hc->Sq, hc->Hq, hc->D);
    long grown = 0;
    for (int i = 0; i < n; i++) {
        const int32_t sp = sps[i];
        const int32_t keys = sp + hc->Sq;
        /* every kind of call a decode loop makes, one after another */
        for (int call = 0; call < 6; call++) {
            sdpa_options opt = {.start_pos = sp, .is_causal = call != 2 && call != 3};
            float * m = NULL;
            sdpa_tensor tm;
            const char * what;
            if (call == 0) {
                what = "step (causal)";
                st = sdpa_kv_cache_step(ctx, cache, &tq, &tk, &tv, NULL, &opt, &to);
            } else if (call == 1) {
                what = "attend (causal)";
                st = sdpa_kv_cache_attend(ctx, cache, &tq, NULL, &opt, &to);
            } else if (call == 2) {
                if (i % 2 != 0) continue;  /* cost: every other position */
                what = "attend (non-causal)";
                st = sdpa_kv_cache_attend(ctx, cache, &tq, NULL, &opt, &to);
            } else if (call == 3) {
                if (i % 3 != 0) continue;  /* cost of building masks */
                what = "step (float mask)";
                m = tu_malloc((size_t)hc->Sq * keys * 4);
                for (size_t x = 0; x < (size_t)hc->Sq * keys; x++) m[x] = x % 5 == 0 ? -INFINITY : 0.5f;
                tm = tu_tensor2(m, SDPA_DTYPE_FLOAT32, hc->Sq, keys);
                st = sdpa_kv_cache_step(ctx, cache, &tq, &tk, &tv, &tm, &opt, &to);
            } else if (call == 4) {
                if (i % 4 != 1) continue;  /* the scalar reference is slow */
                what = "attend (reference switch)";
                sdpa_ctx_use_reference(ctx, 1);
                st = sdpa_kv_cache_attend(ctx, cache, &tq, NULL, &opt, &to);
                sdpa_ctx_use_reference(ctx, 0);
            } else {
                if (i % 2 != 1) continue;
                what = "update + attend";
                st = sdpa_kv_cache_update(ctx, cache, &tk, &tv, sp);
                if (st == SDPA_OK) st = sdpa_kv_cache_attend(ctx, cache, &tq, NULL, &opt, &to);
            }
            free(m);
            g_calls++;
            TU_CHECK(st == SDPA_OK, "%s at sp=%d: %s %s", what, sp, sdpa_status_code(st), sdpa_ctx_last_error(ctx));
            const size_t now = sdpa_ctx_scratch_bytes(ctx);
            if (now != reserved) {
                if (grown++ == 0)
                    TU_CHECK(0, "%s at sp=%d (%d keys) grew the scratch from %zu to %zu bytes (it allocated)", what, sp,
                             keys, reserved, now);
                break;
            }
        }
        if (grown) break;
    }
    if (!grown) TU_CHECK(1, "no allocation");
    sdpa_memory_stats pool_after;
    sdpa_ctx_memory(ctx, &pool_after);
    TU_CHECK(pool_after.bytes_reserved == pool_before.bytes_reserved && pool_after.pages_in_use == pool_before.pages_in_use,
             "the page pool changed during the loop: reserved %lld -> %lld bytes, %lld -> %lld pages in use",
             (long long)pool_before.bytes_reserved, (long long)pool_after.bytes_reserved,
             (long long)pool_before.pages_in_use, (long long)pool_after.pages_in_use);
    free(q);
    free(k);
    free(v);
    free(o);
    sdpa_kv_cache_free(cache);
    sdpa_ctx_free(ctx);
    tu_context[0] = 0;
}

static void test_no_alloc(int quick) {
    static const hp_case cases[] = {
        /* decode, Llama-like GQA ratios */
        {"decode 32/8", 0, 1, 4096, 32, 8, 128, 1},
        {"decode 14/2", 0, 1, 4096, 14, 2, 64, 1},
        {"decode 8/1 (MQA)", 0, 1, 4096, 8, 1, 64, 1},
        {"decode 32/2", 0, 1, 4096, 32, 2, 64, 1},
        {"decode 64/1", 0, 1, 4096, 64, 1, 64, 1},
        {"decode 8/1, odd D", 0, 1, 3000, 8, 1, 17, 1},
        /* maxSeqLen not a power of two, above 16384 */
        {"decode 8/1, maxSeqLen 20000", 0, 1, 20000, 8, 1, 64, 1},
        {"decode 8/2, maxSeqLen 40001", 0, 1, 40001, 8, 2, 64, 1},
        {"decode 14/2, maxSeqLen 16385", 0, 1, 16385, 14, 2, 32, 1},
        /* multi-token steps */
        {"3-token step r=4", 0, 1, 4096, 32, 8, 64, 3},
        {"2-token step r=7", 0, 1, 4096, 14, 2, 64, 2},
        {"2-token step r=8", 0, 1, 4096, 8, 1, 64, 2},
        {"3-token step r=7, maxSeqLen 20000", 0, 1, 20000, 7, 1, 32, 3},
        {"2-token step r=4, maxSeqLen 40001", 0, 1, 40001, 4, 1, 64, 2},
        /* batch, prefill */
        {"decode B=2 16/2", 0, 2, 5000, 16, 2, 64, 1},
        {"prefill Sq=128 8/2", 0, 1, 2048, 8, 2, 64, 128},
    };
    uint64_t seed = 777;
    for (int threads = 1; threads <= 2; threads++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (quick && i % 2) continue;
            hp_case hc = cases[i];
            hc.threads = threads;
            /* the largest shapes once only (cost) */
            if (threads == 2 && (hc.M > 20000 || hc.Sq == 128) && i % 2 == 0) continue;
            double t0 = tu_seconds();
            hp_run(&hc, seed++);
            if (g_verbose) printf("    %-36s %d thread(s) %6.2f s\n", hc.label, hc.threads, tu_seconds() - t0);
        }
    /* 3 and 4 threads, decode and a multi-token step */
    static const hp_case more[] = {
        {"decode 32/8", 3, 1, 4096, 32, 8, 64, 1},
        {"2-token step r=8, maxSeqLen 20000", 4, 1, 20000, 8, 1, 64, 2},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        double t0 = tu_seconds();
        hp_run(&more[i], seed++);
        if (g_verbose) printf("    %-36s %d thread(s) %6.2f s\n", more[i].label, more[i].threads, tu_seconds() - t0);
    }
}

/* ---- 2. determinism across thread counts ------------------------------- */

typedef struct det_case {
    const char * label;
    int32_t B, Sq, Hq, Hkv, D, N;  /* Skv = N */
    int64_t sp;
    int causal;
    int mask;                      /* 0 none, 1 float, 2 bool: [Sq, N] */
    int reference;                 /* sdpa_ctx_use_reference */
} det_case;

static void det_run(const det_case * dc, uint64_t seed) {
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    snprintf(tu_context, sizeof tu_context,
             "determinism %s: B=%d Sq=%d Hq=%d Hkv=%d D=%d N=%d sp=%" PRId64 " causal=%d mask=%d seed=%" PRIu64,
             dc->label, dc->B, dc->Sq, dc->Hq, dc->Hkv, dc->D, dc->N, dc->sp, dc->causal, dc->mask, seed);
    const size_t nq = (size_t)dc->B * dc->Sq * dc->Hq * dc->D, nkv = (size_t)dc->B * dc->N * dc->Hkv * dc->D;
    const size_t nm = (size_t)dc->Sq * dc->N;
    float * q = tu_malloc(nq * 4), * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4);
    void * mask = dc->mask ? tu_malloc(nm * 4) : NULL;
    float * out[N_CTX];
    double * ref = tu_malloc(nq * 8);
    fill_normal(q, nq, &rng, 2.0f);
    fill_normal(k, nkv, &rng, 1.0f);
    fill_normal(v, nkv, &rng, 1.0f);
    for (size_t x = 0; x < nm; x++) {
        if (dc->mask == 1) ((float *)mask)[x] = tu_rng_unit(&rng) < 0.2 ? -INFINITY : tu_rng_normal(&rng);
        else if (dc->mask == 2) ((uint8_t *)mask)[x] = tu_rng_unit(&rng) < 0.3 ? 0 : 1;
    }
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, dc->B, dc->Sq, dc->Hq, dc->D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, dc->B, dc->N, dc->Hkv, dc->D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, dc->B, dc->N, dc->Hkv, dc->D);
    sdpa_tensor tm = tu_tensor2(mask, dc->mask == 2 ? SDPA_DTYPE_BOOL : SDPA_DTYPE_FLOAT32, dc->Sq, dc->N);
    sdpa_options opt = {.start_pos = dc->sp, .is_causal = dc->causal};
    for (int c = 0; c < N_CTX; c++) {
        out[c] = tu_malloc(nq * 4);
        for (size_t x = 0; x < nq; x++) out[c][x] = NAN;
        sdpa_tensor to = tu_tensor4(out[c], SDPA_DTYPE_FLOAT32, dc->B, dc->Sq, dc->Hq, dc->D);
        sdpa_ctx * ctx = make_ctx(c + 1);
        if (!ctx) continue;
        sdpa_ctx_use_reference(ctx, dc->reference);
        sdpa_status st = sdpa_custom(ctx, &tq, &tk, &tv, dc->mask ? &tm : NULL, &opt, &to);
        g_calls++;
        TU_CHECK(st == SDPA_OK, "sdpa_custom (%d threads): %s %s", c + 1, sdpa_status_code(st),
                 sdpa_ctx_last_error(ctx));
        sdpa_ctx_free(ctx);
        if (c > 0) {
            char what[64];
            snprintf(what, sizeof what, "sdpa_custom 1 vs %d threads (bit-identical)", c + 1);
            tu_identical(what, out[0], out[c], nq, tq.dims);
        }
    }
    naive_params np = {
        .B = dc->B, .Sq = dc->Sq, .Skv = dc->N, .Hq = dc->Hq, .Hkv = dc->Hkv, .D = dc->D,
        .mask_kind = dc->mask == 1 ? NAIVE_MASK_FLOAT : dc->mask == 2 ? NAIVE_MASK_BOOL : NAIVE_MASK_NONE,
        .mask = mask, .mask_cols = dc->N, .start_pos = dc->sp, .is_causal = dc->causal,
    };
    if (TU_CHECK(naive_sdpa(&np, q, k, v, ref) == 0, "test bug: naive rejected the case"))
        tu_close("sdpa_custom (1 thread) vs naive", out[0], ref, nq, tq.dims);
    free(q);
    free(k);
    free(v);
    free(mask);
    free(ref);
    for (int c = 0; c < N_CTX; c++) free(out[c]);
    tu_context[0] = 0;
}

/* The same decode loop (prefill, then 1- and 3-token steps) on a cache per
   thread count: every step's output is bit-identical to the 1-thread run's. */
static void det_cache(int32_t B, int32_t M, int32_t Hkv, int32_t Hq, int32_t D, int32_t prefill, int32_t until,
                      uint64_t seed) {
    snprintf(tu_context, sizeof tu_context, "determinism cache: B=%d maxSeqLen=%d Hkv=%d Hq=%d D=%d prefill=%d to %d",
             B, M, Hkv, Hq, D, prefill, until);
    /* total output floats of the loop */
    size_t total = 0;
    for (int32_t sp = 0; sp < until;) {
        const int32_t n = sp == 0 ? prefill : (sp % 5 == 0 ? 3 : 1);
        total += (size_t)B * n * Hq * D;
        sp += n;
    }
    float * first = tu_malloc(total * 4), * outs = tu_malloc(total * 4);
    const size_t maxq = (size_t)B * prefill * Hq * D, maxkv = (size_t)B * prefill * Hkv * D;
    float * q = tu_malloc(maxq * 4), * k = tu_malloc(maxkv * 4), * v = tu_malloc(maxkv * 4);
    for (int c = 0; c < N_CTX; c++) {
        sdpa_ctx * ctx = make_ctx(c + 1);
        if (!ctx) continue;
        sdpa_kv_cache * cache = NULL;
        sdpa_status st = sdpa_kv_cache_create(ctx, B, M, Hkv, D, SDPA_DTYPE_FLOAT32, &cache);
        int ok = TU_CHECK(st == SDPA_OK, "kv_cache_create: %s", sdpa_status_code(st));
        float * dst = c == 0 ? first : outs;
        tu_rng rng;
        tu_rng_seed(&rng, seed);  /* the same inputs for every thread count */
        size_t at = 0;
        for (int32_t sp = 0; ok && sp < until;) {
            const int32_t n = sp == 0 ? prefill : (sp % 5 == 0 ? 3 : 1);
            const size_t nq = (size_t)B * n * Hq * D, nkv = (size_t)B * n * Hkv * D;
            fill_normal(q, nq, &rng, 2.0f);
            fill_normal(k, nkv, &rng, 1.0f);
            fill_normal(v, nkv, &rng, 1.0f);
            sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, n, Hq, D);
            sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, Hkv, D);
            sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, Hkv, D);
            sdpa_tensor to = tu_tensor4(dst + at, SDPA_DTYPE_FLOAT32, B, n, Hq, D);
            sdpa_options opt = {.start_pos = sp, .is_causal = 1};
            st = sdpa_kv_cache_step(ctx, cache, &tq, &tk, &tv, NULL, &opt, &to);
            g_calls++;
            ok = TU_CHECK(st == SDPA_OK, "step sp=%d (%d threads): %s %s", sp, c + 1, sdpa_status_code(st),
                          sdpa_ctx_last_error(ctx));
            if (ok && c > 0) {
                char what[96];
                snprintf(what, sizeof what, "cache step sp=%d n=%d: 1 vs %d threads (bit-identical)", sp, n, c + 1);
                ok = tu_identical(what, first + at, dst + at, nq, tq.dims);
            }
            at += nq;
            sp += n;
        }
        sdpa_kv_cache_free(cache);
        sdpa_ctx_free(ctx);
    }
    free(first);
    free(outs);
    free(q);
    free(k);
    free(v);
    tu_context[0] = 0;
}

static void test_determinism(int quick) {
    static const det_case cases[] = {
        /* split-KV decode */
        {"split decode MQA", 1, 1, 8, 1, 64, 778, 777, 1, 0, 0},
        {"split decode MQA", 1, 1, 8, 1, 64, 4106, 4105, 1, 0, 0},
        {"split decode MQA, 64-chunk cap", 1, 1, 8, 1, 64, 20000, 19999, 0, 0, 0},
        {"split decode 32/8, D=128", 1, 1, 32, 8, 128, 3000, 2999, 1, 0, 0},
        {"split decode B=2 GQA", 2, 1, 8, 2, 64, 1500, 1499, 1, 0, 0},
        {"split decode odd D", 1, 1, 7, 1, 17, 2049, 2048, 1, 0, 0},
        {"split decode, float mask", 1, 1, 8, 1, 64, 2000, 0, 0, 1, 0},
        {"split decode, bool mask", 1, 1, 14, 2, 64, 1025, 0, 0, 2, 0},
        {"split multi-row (Sq=3)", 1, 3, 8, 1, 64, 1000, 997, 1, 0, 0},
        {"split multi-row (Sq=2, r=7)", 1, 2, 14, 2, 64, 3000, 2998, 1, 0, 0},
        /* prefill (no split) */
        {"prefill Sq=128", 1, 128, 8, 2, 64, 128, 0, 1, 0, 0},
        {"chunked prefill Sq=130 at 170", 1, 130, 4, 1, 16, 300, 170, 1, 0, 0},
        {"prefill Sq=64, bool mask", 1, 64, 8, 8, 32, 64, 0, 0, 2, 0},
        {"prefill B=3 non-causal", 3, 33, 4, 2, 8, 33, 0, 0, 0, 0},
    };
    uint64_t seed = 4242;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (quick && i % 2) continue;
        det_run(&cases[i], seed++);
    }
    det_cache(1, 1200, 2, 8, 64, 300, quick ? 320 : 340, seed++);
    det_cache(2, 600, 1, 7, 17, 270, quick ? 280 : 300, seed++);

    /* the reference is deterministic too */
    det_case rc = {"reference switch", 1, 2, 8, 2, 32, 700, 698, 1, 0, 1};
    det_run(&rc, seed++);
}

/* The default SDPA_PARALLEL_MIN_MACS: a decode step below it runs on the
 * calling thread, one above it on the pool; both give the 1-thread bits
 * (and the pool's, with the threshold off). Qwen2-0.5B's layer (14/2/64)
 * at 128 keys is 0.23 M multiply-adds, at 2048 keys 3.7 M. */
static void test_parallel_threshold(void) {
    static const int32_t lens[] = { 128, 2048 };
    for (int li = 0; li < 2; li++) {
        const int32_t N = lens[li], Hq = 14, Hkv = 2, D = 64;
        snprintf(tu_context, sizeof tu_context, "parallel threshold: decode 14/2/64 over %d keys", N);
        tu_rng rng;
        tu_rng_seed(&rng, 77 + (uint64_t)li);
        const size_t nq = (size_t)Hq * D, nkv = (size_t)N * Hkv * D;
        float * q = tu_malloc(nq * 4), * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4), * out[3];
        fill_normal(q, nq, &rng, 1.0f);
        fill_normal(k, nkv, &rng, 1.0f);
        fill_normal(v, nkv, &rng, 1.0f);
        sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, 1, Hq, D);
        sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, N, Hkv, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, N, Hkv, D);
        sdpa_options opt = {.start_pos = N - 1, .is_causal = 1};
        for (int c = 0; c < 3; c++) {  /* 1 thread; 2 threads at the default; 2 threads, the pool always */
            out[c] = tu_malloc(nq * 4);
            sdpa_status st = SDPA_E_ARG;
            sdpa_ctx * ctx = sdpa_ctx_create(c ? 2 : 1, &st);
            if (!TU_CHECK(ctx != NULL, "create")) return;
            if (c == 2) sdpa_ctx_set_parallel_min_macs(ctx, 0);
            sdpa_tensor to = tu_tensor4(out[c], SDPA_DTYPE_FLOAT32, 1, 1, Hq, D);
            TU_CHECK(sdpa_custom(ctx, &tq, &tk, &tv, NULL, &opt, &to) == SDPA_OK, "sdpa_custom: %s", sdpa_ctx_last_error(ctx));
            g_calls++;
            sdpa_ctx_free(ctx);
        }
        tu_identical("2 threads at the default threshold vs 1 thread", out[0], out[1], nq, tq.dims);
        tu_identical("2 threads, pool always, vs 1 thread", out[0], out[2], nq, tq.dims);
        for (int c = 0; c < 3; c++) free(out[c]);
        free(q); free(k); free(v);
    }
}

int main(void) {
    double t0 = tu_seconds();
    const int quick = tu_quick();
    const char * vb = getenv("SDPA_TEST_VERBOSE");
    g_verbose = vb && vb[0] && strcmp(vb, "0") != 0;
    double s0 = tu_seconds();
    test_no_alloc(quick);
    printf("  no allocation   %6.2f s\n", tu_seconds() - s0);
    s0 = tu_seconds();
    test_determinism(quick);
    test_parallel_threshold();
    printf("  determinism     %6.2f s\n", tu_seconds() - s0);
    printf("  %ld calls, %.2f s%s\n", g_calls, tu_seconds() - t0, quick ? " (quick)" : "");
    return tu_summary("test_hotpath");
}
