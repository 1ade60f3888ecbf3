/*
 * test_runtime.c: tree masks, keepRows, attendMany and stepMany in C.
 *
 * treeMask (options->tree_mask) on sdpa_kv_cache_attend and _step, plain
 * and windowed caches, float32 and int8, GQA, against the tests' float64
 * reference (naive_ref.c) fed the equivalent full bool mask [Sq, N] (key t
 * visible to row i: t < sp, or t = sp + j with j <= i and tree[i][j]; a
 * window's and sink rows' rule on top), 1 vs 2 threads bit-identical; a chain
 * (lower-triangular) tree is bit-identical to isCausal alone. The rules.
 *
 * sdpa_kv_cache_keep_rows: the kept rows are the source rows bit for bit
 * (read back against the host's copy, float32; int8 against a read before),
 * length and the rows past it (zeros), a fork keeps its own rows, windowed
 * caches, every rule with the cache unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

enum { B = 2, HQ = 4, H = 2, D = 24 };

static sdpa_ctx * g_one, * g_two;
static tu_rng g_rng;

static void fill(float * p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = tu_rng_uniform(&g_rng, -1.0f, 1.0f);
}

/* A random tree over n nodes in topological order: each node's parent is an
 * earlier node (or none: the root of a forest); the mask row is the node's
 * ancestors and itself. chain: the lower triangle. */
static void make_tree(uint8_t * tree, int32_t n, int chain) {
    int32_t parent[64];
    memset(tree, 0, (size_t)n * n);
    for (int32_t i = 0; i < n; i++) {
        parent[i] = chain ? i - 1 : (i == 0 ? -1 : tu_rng_int(&g_rng, -1, i - 1));
        for (int32_t a = i; a >= 0; a = parent[a]) tree[(size_t)i * n + a] = 1;
    }
}

/* One case: a cache holding `past` rows, then a step (or update + attend) of
 * n rows with a tree mask; windowed when W > 0. */
static void tree_case(int32_t dtype, int32_t W, int32_t S, int32_t past, int32_t n, int use_step, int chain) {
    const int32_t L = past + n + 8 + (W ? 1000 : 0), total = past + n;  /* (windowed: long enough for a ring) */
    char what[160];
    snprintf(what, sizeof what, "tree dtype %d W %d S %d past %d n %d %s%s", dtype, W, S, past, n,
             use_step ? "step" : "attend", chain ? " chain" : "");
    sdpa_kv_cache * c1 = NULL, * c2 = NULL;
    sdpa_status s1 = sdpa_kv_cache_create_windowed(g_one, B, L, H, D, dtype, W, S, &c1);
    sdpa_status s2 = sdpa_kv_cache_create_windowed(g_two, B, L, H, D, dtype, W, S, &c2);
    if (!TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "%s: create: %s", what, sdpa_ctx_last_error(g_one))) return;
    const size_t kv_n = (size_t)B * total * H * D, q_n = (size_t)B * n * HQ * D;
    float * k = tu_malloc(kv_n * 4), * v = tu_malloc(kv_n * 4), * q = tu_malloc(q_n * 4);
    float * o1 = tu_malloc(q_n * 4), * o2 = tu_malloc(q_n * 4), * oc = tu_malloc(q_n * 4);
    float * kn = tu_malloc((size_t)B * n * H * D * 4), * vn = tu_malloc((size_t)B * n * H * D * 4);
    double * ref = tu_malloc(q_n * 8);
    uint8_t * tree = tu_malloc((size_t)n * n), * full = tu_malloc((size_t)n * total);
    fill(k, kv_n); fill(v, kv_n); fill(q, q_n);
    make_tree(tree, n, chain);
    /* the past rows, then the new ones (the new ones: a copy in [B, n, H, D]) */
    for (int32_t b = 0; b < B; b++)
        for (int32_t t = 0; t < n; t++) {
            memcpy(kn + ((size_t)b * n + t) * H * D, k + ((size_t)b * total + past + t) * H * D, (size_t)H * D * 4);
            memcpy(vn + ((size_t)b * n + t) * H * D, v + ((size_t)b * total + past + t) * H * D, (size_t)H * D * 4);
        }
    if (past > 0) {
        float * kp = tu_malloc((size_t)B * past * H * D * 4), * vp = tu_malloc((size_t)B * past * H * D * 4);
        for (int32_t b = 0; b < B; b++) {
            memcpy(kp + (size_t)b * past * H * D, k + (size_t)b * total * H * D, (size_t)past * H * D * 4);
            memcpy(vp + (size_t)b * past * H * D, v + (size_t)b * total * H * D, (size_t)past * H * D * 4);
        }
        sdpa_tensor tk = tu_tensor4(kp, SDPA_DTYPE_FLOAT32, B, past, H, D), tv = tu_tensor4(vp, SDPA_DTYPE_FLOAT32, B, past, H, D);
        TU_CHECK(sdpa_kv_cache_update(g_one, c1, &tk, &tv, 0) == SDPA_OK && sdpa_kv_cache_update(g_two, c2, &tk, &tv, 0) == SDPA_OK,
                 "%s: past update: %s", what, sdpa_ctx_last_error(g_one));
        free(kp); free(vp);
    }
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, n, HQ, D);
    sdpa_tensor tk = tu_tensor4(kn, SDPA_DTYPE_FLOAT32, B, n, H, D), tv = tu_tensor4(vn, SDPA_DTYPE_FLOAT32, B, n, H, D);
    sdpa_tensor tt = tu_tensor2(tree, SDPA_DTYPE_BOOL, n, n);
    sdpa_tensor to1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, B, n, HQ, D), to2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, B, n, HQ, D);
    sdpa_tensor toc = tu_tensor4(oc, SDPA_DTYPE_FLOAT32, B, n, HQ, D);
    sdpa_options o = {.start_pos = past, .is_causal = 1, .tree_mask = &tt};
    sdpa_options oplain = {.start_pos = past, .is_causal = 1};
    tu_fill_nan(o1, q_n); tu_fill_nan(o2, q_n);
    tu_dirty_error(g_one);
    if (use_step) {
        s1 = sdpa_kv_cache_step(g_one, c1, &tq, &tk, &tv, NULL, &o, &to1);
        s2 = sdpa_kv_cache_step(g_two, c2, &tq, &tk, &tv, NULL, &o, &to2);
    } else {
        s1 = sdpa_kv_cache_update(g_one, c1, &tk, &tv, past);
        s2 = sdpa_kv_cache_update(g_two, c2, &tk, &tv, past);
        TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "%s: update: %s", what, sdpa_ctx_last_error(g_one));
        tu_dirty_error(g_one);
        s1 = sdpa_kv_cache_attend(g_one, c1, &tq, NULL, &o, &to1);
        s2 = sdpa_kv_cache_attend(g_two, c2, &tq, NULL, &o, &to2);
    }
    TU_CHECK(s2 == SDPA_OK, "%s: 2 threads: %s", what, sdpa_ctx_last_error(g_two));
    /* the reference over the stored values (a float32 cache stores k, v exactly; int8: read them back) */
    float * kd = k, * vd = v;
    if (dtype != SDPA_DTYPE_FLOAT32 && W == 0) {
        kd = tu_malloc(kv_n * 4); vd = tu_malloc(kv_n * 4);
        sdpa_tensor rk = tu_tensor4(kd, SDPA_DTYPE_FLOAT32, B, total, H, D), rv = tu_tensor4(vd, SDPA_DTYPE_FLOAT32, B, total, H, D);
        TU_CHECK(sdpa_kv_cache_read(g_one, c1, 0, total, &rk, &rv) == SDPA_OK, "%s: read", what);
    }
    for (int32_t i = 0; i < n; i++)
        for (int32_t t = 0; t < total; t++) {
            const int64_t p = past + i;
            int vis = t < past ? 1 : (t - past <= i && tree[(size_t)i * n + (t - past)]);
            if (W && t <= p - W && t >= S) vis = 0;
            full[(size_t)i * total + t] = (uint8_t)vis;
        }
    naive_params np = { B, n, total, HQ, H, D, NAIVE_MASK_BOOL, full, total, 0, 0, 0, 0.0, 0, 0.0, NULL };
    naive_sdpa(&np, q, kd, vd, ref);
    const int32_t dims[4] = { B, n, HQ, D };
    if (dtype == SDPA_DTYPE_FLOAT32) tu_check_output(g_one, s1, what, o1, ref, q_n, dims);
    else {
        TU_CHECK(s1 == SDPA_OK, "%s: %s", what, sdpa_ctx_last_error(g_one));
        tu_close_tol(what, o1, ref, q_n, dims, 2e-3);
    }
    tu_identical(what, o1, o2, q_n, dims);
    if (chain && use_step == 0) {  /* a chain is isCausal's lower triangle: the same bits */
        s1 = sdpa_kv_cache_attend(g_one, c1, &tq, NULL, &oplain, &toc);
        TU_CHECK(s1 == SDPA_OK, "%s: causal", what);
        tu_identical("chain tree vs isCausal", o1, oc, q_n, dims);
    }
    if (kd != k) { free(kd); free(vd); }
    free(k); free(v); free(q); free(o1); free(o2); free(oc); free(kn); free(vn); free(ref); free(tree); free(full);
    sdpa_kv_cache_free(c1);
    sdpa_kv_cache_free(c2);
}

static void test_tree(void) {
    const int32_t pasts[] = { 0, 5, 64, 130 }, ns[] = { 1, 3, 8, 17 };
    for (int pi = 0; pi < 4; pi++)
        for (int ni = 0; ni < 4; ni++) {
            tree_case(SDPA_DTYPE_FLOAT32, 0, 0, pasts[pi], ns[ni], (pi + ni) % 2, 0);
            tree_case(SDPA_DTYPE_FLOAT32, 0, 0, pasts[pi], ns[ni], 0, 1);
        }
    tree_case(SDPA_DTYPE_INT8, 0, 0, 70, 8, 1, 0);
    tree_case(SDPA_DTYPE_INT4, 0, 0, 70, 8, 0, 0);
    /* windowed: a step of n rows is cut into page-sized pieces inside */
    tree_case(SDPA_DTYPE_FLOAT32, 40, 0, 100, 9, 1, 0);
    tree_case(SDPA_DTYPE_FLOAT32, 40, 4, 60, 12, 1, 0);  /* crosses a page boundary (64) */
    tree_case(SDPA_DTYPE_FLOAT32, 16, 2, 120, 8, 0, 0);
}

static void expect(sdpa_ctx * ctx, sdpa_status got, sdpa_status want, const char * needle, const char * what) {
    TU_CHECK(got == want, "%s: got %s, want %s (%s)", what, sdpa_status_code(got), sdpa_status_code(want), sdpa_ctx_last_error(ctx));
    TU_CHECK(tu_contains_ci(sdpa_ctx_last_error(ctx), needle), "%s: message '%s' lacks '%s'", what, sdpa_ctx_last_error(ctx), needle);
}

static void test_tree_rules(void) {
    sdpa_kv_cache * c = NULL;
    TU_CHECK(sdpa_kv_cache_create(g_one, 1, 32, 1, 4, SDPA_DTYPE_FLOAT32, &c) == SDPA_OK, "create");
    float q[2 * 4] = { 0 }, kv[2 * 4] = { 0 }, out[2 * 4], sentinel[2 * 4];
    uint8_t tree[9] = { 1, 0, 0, 1, 1, 0, 1, 1, 1 };
    float ftree[4] = { 0 };
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, 2, 1, 4), tk = tu_tensor4(kv, SDPA_DTYPE_FLOAT32, 1, 2, 1, 4);
    sdpa_tensor to = tu_tensor4(out, SDPA_DTYPE_FLOAT32, 1, 2, 1, 4);
    sdpa_tensor t22 = tu_tensor2(tree, SDPA_DTYPE_BOOL, 2, 2), t33 = tu_tensor2(tree, SDPA_DTYPE_BOOL, 3, 3);
    sdpa_tensor tf = tu_tensor2(ftree, SDPA_DTYPE_FLOAT32, 2, 2), t1 = tu_tensor4(tree, SDPA_DTYPE_BOOL, 1, 2, 2, 1);
    t1.rank = 3;
    sdpa_tensor mask = tu_tensor2(ftree, SDPA_DTYPE_FLOAT32, 2, 2);
    sdpa_tensor talias = tu_tensor2(out, SDPA_DTYPE_BOOL, 2, 2);
    tu_fill_nan(out, 8);
    memcpy(sentinel, out, sizeof out);
    sdpa_options o = {.start_pos = 0, .is_causal = 1, .tree_mask = &t22};
    o.is_causal = 0;
    expect(g_one, sdpa_kv_cache_step(g_one, c, &tq, &tk, &tk, NULL, &o, &to), SDPA_E_ARG, "sdpa_kv_cache_step: treeMask was given with isCausal: false", "not causal");
    o.is_causal = 0;
    expect(g_one, sdpa_kv_cache_step(g_one, c, &tq, &tk, &tk, &mask, &o, &to), SDPA_E_ARG, "treeMask and attnMask were both given", "with a mask");
    o.is_causal = 1;
    o.tree_mask = &talias;
    expect(g_one, sdpa_kv_cache_step(g_one, c, &tq, &tk, &tk, NULL, &o, &to), SDPA_E_ARG, "out shares memory with treeMask", "alias");
    o.tree_mask = &t1;
    expect(g_one, sdpa_kv_cache_step(g_one, c, &tq, &tk, &tk, NULL, &o, &to), SDPA_E_RANK, "treeMask has rank 3", "rank");
    o.tree_mask = &tf;
    expect(g_one, sdpa_kv_cache_step(g_one, c, &tq, &tk, &tk, NULL, &o, &to), SDPA_E_MASK_DTYPE, "sdpa_kv_cache_step: treeMask has dtype float32 (1); expected bool", "dtype");
    o.tree_mask = &t33;
    expect(g_one, sdpa_kv_cache_step(g_one, c, &tq, &tk, &tk, NULL, &o, &to), SDPA_E_MASK_SHAPE,
           "sdpa_kv_cache_step: treeMask has dims [3, 3] but must be [Sq, Sq] = [2, 2] (the new rows over the new rows)", "shape");
    TU_CHECK(sdpa_kv_cache_length(c) == 0 && memcmp(out, sentinel, sizeof out) == 0, "rejected steps wrote nothing");
    /* customSdpa has no treeMask */
    o.tree_mask = &t22;
    expect(g_one, sdpa_custom(g_one, &tq, &tk, &tk, NULL, &o, &to), SDPA_E_ARG, "sdpa_custom: treeMask is an option of KVCache.attend and KVCache.step", "custom");
    sdpa_kv_cache_free(c);
}

/* ---- keep_rows ---------------------------------------------------------- */

static void keep_case(int32_t dtype, int32_t W, int32_t S, int32_t start, int32_t extra, const int32_t * rows, int32_t n, int with_fork) {
    char what[128];
    snprintf(what, sizeof what, "keepRows dtype %d W %d S %d start %d extra %d n %d%s", dtype, W, S, start, extra, n, with_fork ? " fork" : "");
    const int32_t total = start + extra, L = total + 70;
    sdpa_kv_cache * c = NULL, * f = NULL;
    if (!TU_CHECK(sdpa_kv_cache_create_windowed(g_one, B, L, H, D, dtype, W, S, &c) == SDPA_OK, "%s: create", what)) return;
    const size_t rn = (size_t)B * total * H * D;
    float * k = tu_malloc(rn * 4), * v = tu_malloc(rn * 4);
    fill(k, rn); fill(v, rn);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, total, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, total, H, D);
    TU_CHECK(sdpa_kv_cache_update(g_one, c, &tk, &tv, 0) == SDPA_OK, "%s: write: %s", what, sdpa_ctx_last_error(g_one));
    /* what the cache stores, before (float32: k, v themselves), from row `from` on (a windowed cache: its kept rows) */
    const int32_t from = W ? start : 0, span = total - from;
    const size_t sn = (size_t)B * span * H * D;
    float * bk = tu_malloc(sn * 4), * bv = tu_malloc(sn * 4);
    sdpa_tensor rk = tu_tensor4(bk, SDPA_DTYPE_FLOAT32, B, span, H, D), rv = tu_tensor4(bv, SDPA_DTYPE_FLOAT32, B, span, H, D);
    TU_CHECK(sdpa_kv_cache_read(g_one, c, from, span, &rk, &rv) == SDPA_OK, "%s: read before: %s", what, sdpa_ctx_last_error(g_one));
    if (with_fork) TU_CHECK(sdpa_kv_cache_fork(g_one, c, &f) == SDPA_OK, "%s: fork", what);
    tu_dirty_error(g_one);
    sdpa_status s = sdpa_kv_cache_keep_rows(g_one, c, start, rows, n);
    TU_CHECK(s == SDPA_OK && sdpa_ctx_last_error(g_one)[0] == 0, "%s: %s", what, sdpa_ctx_last_error(g_one));
    TU_CHECK(sdpa_kv_cache_length(c) == start + n, "%s: length %d, want %d", what, sdpa_kv_cache_length(c), start + n);
    /* rows from .. start+n-1 and the row after (zeros), read back */
    const int32_t got_span = start + n - from + 1;
    const size_t gn = (size_t)B * got_span * H * D;
    float * gk = tu_malloc(gn * 4), * gv = tu_malloc(gn * 4);
    sdpa_tensor gtk = tu_tensor4(gk, SDPA_DTYPE_FLOAT32, B, got_span, H, D), gtv = tu_tensor4(gv, SDPA_DTYPE_FLOAT32, B, got_span, H, D);
    if (W == 0 || got_span > 1) {
        int32_t read_span = W ? got_span - 1 : got_span;  /* a windowed cache reads kept (written) rows only */
        gtk.dims[1] = gtv.dims[1] = read_span;
        gtk.len = gtv.len = (int32_t)((size_t)B * read_span * H * D);
        TU_CHECK(sdpa_kv_cache_read(g_one, c, from, read_span, &gtk, &gtv) == SDPA_OK, "%s: read after: %s", what, sdpa_ctx_last_error(g_one));
        int bad = 0;
        for (int32_t b = 0; b < B; b++)
            for (int32_t t = 0; t < read_span; t++) {
                const int32_t row = from + t;  /* its source row */
                int32_t src = row < start ? row : row < start + n ? start + rows[row - start] : -1;
                const float * gkr = gk + ((size_t)b * read_span + t) * H * D, * gvr = gv + ((size_t)b * read_span + t) * H * D;
                for (int32_t e = 0; e < H * D; e++) {
                    const float wk = src < 0 ? 0.0f : bk[((size_t)b * span + (src - from)) * H * D + e];
                    const float wv = src < 0 ? 0.0f : bv[((size_t)b * span + (src - from)) * H * D + e];
                    if (memcmp(&wk, &gkr[e], 4) || memcmp(&wv, &gvr[e], 4)) bad++;
                }
            }
        TU_CHECK(bad == 0, "%s: %d elements differ from the source rows", what, bad);
        if (dtype == SDPA_DTYPE_FLOAT32 && W == 0) {  /* and those are the values written */
            int diff = 0;
            for (int32_t b = 0; b < B; b++)
                for (int32_t x = 0; x < n; x++)
                    diff += memcmp(gk + ((size_t)b * read_span + start + x) * H * D, k + ((size_t)b * total + start + rows[x]) * H * D, (size_t)H * D * 4) != 0;
            TU_CHECK(diff == 0, "%s: float32 rows differ from the host's", what);
        }
    }
    if (f) {  /* the fork still holds every row as written */
        float * fk = tu_malloc(sn * 4), * fv = tu_malloc(sn * 4);
        sdpa_tensor ftk = tu_tensor4(fk, SDPA_DTYPE_FLOAT32, B, span, H, D), ftv = tu_tensor4(fv, SDPA_DTYPE_FLOAT32, B, span, H, D);
        TU_CHECK(sdpa_kv_cache_read(g_one, f, from, span, &ftk, &ftv) == SDPA_OK, "%s: fork read", what);
        TU_CHECK(memcmp(fk, bk, sn * 4) == 0 && memcmp(fv, bv, sn * 4) == 0 && sdpa_kv_cache_length(f) == total, "%s: the fork changed", what);
        free(fk); free(fv);
        sdpa_kv_cache_free(f);
    }
    free(k); free(v); free(bk); free(bv); free(gk); free(gv);
    sdpa_kv_cache_free(c);
}

static void test_keep(void) {
    const int32_t a[] = { 0, 2, 5, 6 }, b[] = { 3 }, chain[] = { 0, 1, 2 }, wide[] = { 1, 4, 9, 30, 61, 62, 70 };
    keep_case(SDPA_DTYPE_FLOAT32, 0, 0, 10, 8, a, 4, 0);
    keep_case(SDPA_DTYPE_FLOAT32, 0, 0, 10, 8, a, 4, 1);
    keep_case(SDPA_DTYPE_FLOAT32, 0, 0, 60, 8, b, 1, 1);       /* across a page boundary */
    keep_case(SDPA_DTYPE_FLOAT32, 0, 0, 20, 8, chain, 3, 0);   /* nothing moves: truncate */
    keep_case(SDPA_DTYPE_FLOAT32, 0, 0, 20, 8, NULL, 0, 0);    /* nothing kept */
    keep_case(SDPA_DTYPE_FLOAT32, 0, 0, 3, 75, wide, 7, 1);    /* rows from two pages into one */
    keep_case(SDPA_DTYPE_INT8, 0, 0, 10, 8, a, 4, 1);
    keep_case(SDPA_DTYPE_INT4, 0, 0, 60, 8, a, 4, 0);
    keep_case(SDPA_DTYPE_FLOAT16, 0, 0, 60, 8, a, 4, 1);
    keep_case(SDPA_DTYPE_FLOAT32, 40, 0, 200, 8, a, 4, 0);     /* windowed: within the rollback bound */
    keep_case(SDPA_DTYPE_FLOAT32, 40, 4, 250, 8, a, 4, 1);
}

static void test_keep_rules(void) {
    sdpa_kv_cache * c = NULL, * w = NULL;
    TU_CHECK(sdpa_kv_cache_create(g_one, 1, 400, 1, 4, SDPA_DTYPE_FLOAT32, &c) == SDPA_OK, "create");
    TU_CHECK(sdpa_kv_cache_create_windowed(g_one, 1, 400, 1, 4, SDPA_DTYPE_FLOAT32, 8, 0, &w) == SDPA_OK, "create windowed");
    float kv[300 * 4];
    fill(kv, 300 * 4);
    sdpa_tensor t = tu_tensor4(kv, SDPA_DTYPE_FLOAT32, 1, 20, 1, 4), t3 = tu_tensor4(kv, SDPA_DTYPE_FLOAT32, 1, 300, 1, 4);
    sdpa_kv_cache_update(g_one, c, &t, &t, 0);
    sdpa_kv_cache_update(g_one, w, &t3, &t3, 0);
    const int32_t neg[] = { -1 }, dup[] = { 1, 1 }, past[] = { 0, 5 }, ok[] = { 0, 2 };
    expect(g_one, sdpa_kv_cache_keep_rows(g_one, c, -1, ok, 2), SDPA_E_START_POS, "sdpa_kv_cache_keep_rows: start is -1; expected a non-negative integer", "negative start");
    expect(g_one, sdpa_kv_cache_keep_rows(g_one, c, 10, neg, 1), SDPA_E_START_POS, "sdpa_kv_cache_keep_rows: rows[0] is -1; expected non-negative offsets from start in increasing order", "negative row");
    expect(g_one, sdpa_kv_cache_keep_rows(g_one, c, 10, dup, 2), SDPA_E_START_POS, "rows[1] is 1; expected non-negative offsets from start in increasing order (after 1)", "not increasing");
    expect(g_one, sdpa_kv_cache_keep_rows(g_one, c, 15, past, 2), SDPA_E_START_POS, "sdpa_kv_cache_keep_rows: rows[1] = 5 is row 20, past the 20 rows written (cache.length)", "past length");
    expect(g_one, sdpa_kv_cache_keep_rows(g_one, c, 21, NULL, 0), SDPA_E_CAPACITY, "sdpa_kv_cache_keep_rows: length 21 is past the 20 rows written", "start past length");
    TU_CHECK(sdpa_kv_cache_length(c) == 20, "rejected keepRows left the length");
    /* windowed: 300 rows written with W = 8: rows before windowStart were evicted */
    const int32_t ws = sdpa_kv_cache_window_start(w);
    TU_CHECK(ws > 100, "window start %d", ws);
    expect(g_one, sdpa_kv_cache_keep_rows(g_one, w, ws - 1, ok, 2), SDPA_E_CAPACITY, "evicted from the windowed cache", "evicted");
    expect(g_one, sdpa_kv_cache_keep_rows(g_one, w, ws - 1, NULL, 0), SDPA_E_CAPACITY, "would end inside the evicted rows", "evicted truncate");
    TU_CHECK(sdpa_kv_cache_length(w) == 300, "rejected keepRows left the windowed length");
    sdpa_kv_cache_free(c);
    sdpa_kv_cache_free(w);
}

/* ---- attend_many ------------------------------------------------------- */

typedef struct many_item {
    int32_t B, Hq, Hkv, D, len, Sq, dtype, W;
    sdpa_kv_cache * c;
    float * q, * out, * solo;
} many_item;

static void test_many_on(sdpa_ctx * ctx, const char * label) {
    many_item it[5] = {
        { 1, 14, 2, 64, 1024, 1, SDPA_DTYPE_FLOAT32, 0 , NULL, NULL, NULL, NULL },
        { 2, 8, 2, 24, 70, 3, SDPA_DTYPE_FLOAT32, 0 , NULL, NULL, NULL, NULL },
        { 1, 4, 4, 16, 300, 1, SDPA_DTYPE_INT8, 0 , NULL, NULL, NULL, NULL },
        { 1, 8, 2, 32, 200, 2, SDPA_DTYPE_FLOAT32, 40 , NULL, NULL, NULL, NULL },
        { 1, 14, 2, 64, 17, 1, SDPA_DTYPE_INT4, 0 , NULL, NULL, NULL, NULL },
    };
    sdpa_attend_item items[5];
    sdpa_tensor tq[5], to[5];
    sdpa_options o[5];
    for (int i = 0; i < 5; i++) {
        many_item * m = &it[i];
        if (!TU_CHECK(sdpa_kv_cache_create_windowed(ctx, m->B, 4096, m->Hkv, m->D, m->dtype, m->W, 0, &m->c) == SDPA_OK, "%s: create %d", label, i)) return;
        const size_t kn = (size_t)m->B * m->len * m->Hkv * m->D, qn = (size_t)m->B * m->Sq * m->Hq * m->D;
        float * k = tu_malloc(kn * 4), * v = tu_malloc(kn * 4);
        fill(k, kn); fill(v, kn);
        sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, m->B, m->len, m->Hkv, m->D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, m->B, m->len, m->Hkv, m->D);
        TU_CHECK(sdpa_kv_cache_update(ctx, m->c, &tk, &tv, 0) == SDPA_OK, "%s: write %d", label, i);
        free(k); free(v);
        m->q = tu_malloc(qn * 4); m->out = tu_malloc(qn * 4); m->solo = tu_malloc(qn * 4);
        fill(m->q, qn);
        tu_fill_nan(m->out, qn);
        tq[i] = tu_tensor4(m->q, SDPA_DTYPE_FLOAT32, m->B, m->Sq, m->Hq, m->D);
        to[i] = tu_tensor4(m->out, SDPA_DTYPE_FLOAT32, m->B, m->Sq, m->Hq, m->D);
        o[i] = (sdpa_options){ .start_pos = m->len - m->Sq, .is_causal = 1 };
        items[i] = (sdpa_attend_item){ m->c, &tq[i], NULL, &o[i], &to[i], NULL, NULL };
    }
    tu_dirty_error(ctx);
    sdpa_status s = sdpa_kv_cache_attend_many(ctx, items, 5);
    TU_CHECK(s == SDPA_OK && sdpa_ctx_last_error(ctx)[0] == 0, "%s: attend_many: %s", label, sdpa_ctx_last_error(ctx));
    for (int i = 0; i < 5; i++) {
        many_item * m = &it[i];
        const size_t qn = (size_t)m->B * m->Sq * m->Hq * m->D;
        sdpa_tensor ts = tu_tensor4(m->solo, SDPA_DTYPE_FLOAT32, m->B, m->Sq, m->Hq, m->D);
        TU_CHECK(sdpa_kv_cache_attend(ctx, m->c, &tq[i], NULL, &o[i], &ts) == SDPA_OK, "%s: solo %d", label, i);
        char what[64];
        snprintf(what, sizeof what, "%s: item %d = its own call", label, i);
        const int32_t dims[4] = { m->B, m->Sq, m->Hq, m->D };
        tu_identical(what, m->out, m->solo, qn, dims);
        if (m->dtype == SDPA_DTYPE_FLOAT32 && m->W == 0) {  /* and the float64 reference over what the cache holds */
            const size_t kn = (size_t)m->B * m->len * m->Hkv * m->D;
            float * kd = tu_malloc(kn * 4), * vd = tu_malloc(kn * 4);
            double * ref = tu_malloc(qn * 8);
            sdpa_tensor rk = tu_tensor4(kd, SDPA_DTYPE_FLOAT32, m->B, m->len, m->Hkv, m->D), rv = tu_tensor4(vd, SDPA_DTYPE_FLOAT32, m->B, m->len, m->Hkv, m->D);
            sdpa_kv_cache_read(ctx, m->c, 0, m->len, &rk, &rv);
            naive_params np = { m->B, m->Sq, m->len, m->Hq, m->Hkv, m->D, NAIVE_MASK_NONE, NULL, 0, m->len - m->Sq, 1, 0, 0.0, 0, 0.0, NULL };
            naive_sdpa(&np, m->q, kd, vd, ref);
            snprintf(what, sizeof what, "%s: item %d vs reference", label, i);
            tu_close(what, m->out, ref, qn, dims);
            free(kd); free(vd); free(ref);
        }
    }
    /* the rules: nothing written */
    for (int i = 0; i < 5; i++) tu_fill_nan(it[i].out, (size_t)it[i].B * it[i].Sq * it[i].Hq * it[i].D);
    items[3].cache = items[1].cache;  /* (item 3's own rules fail there too, E_BATCH: the E_ARG between items ranks first) */
    expect(ctx, sdpa_kv_cache_attend_many(ctx, items, 5), SDPA_E_ARG, "sdpa_kv_cache_attend_many: items[3] uses the same cache as items[1]; one item per cache", "same cache");
    items[3].cache = it[3].c;
    sdpa_tensor alias = to[0];  /* item 4's out over item 0's query */
    alias.data = it[0].q;
    items[4].out = &alias;
    expect(ctx, sdpa_kv_cache_attend_many(ctx, items, 5), SDPA_E_ARG, "sdpa_kv_cache_attend_many: items[4].out shares memory with items[0].query", "out over another item's query");
    items[4].out = &to[4];
    sdpa_options bad = o[2];
    bad.has_scale = 1; bad.scale = -1.0f;
    items[2].options = &bad;
    expect(ctx, sdpa_kv_cache_attend_many(ctx, items, 5), SDPA_E_SCALE, "sdpa_kv_cache_attend_many: items[2]: scale is -1", "an item's own rule");
    items[2].options = &o[2];
    expect(ctx, sdpa_kv_cache_attend_many(ctx, items, 0), SDPA_E_ARG, "sdpa_kv_cache_attend_many: items is empty; expected 1 .. 64 items", "empty");
    expect(ctx, sdpa_kv_cache_attend_many(ctx, items, 65), SDPA_E_ARG, "sdpa_kv_cache_attend_many: 65 items; at most 64 in one call", "too many");
    int untouched = 1;
    for (int i = 0; i < 5; i++) untouched &= isnan(it[i].out[0]);
    TU_CHECK(untouched, "%s: rejected calls wrote nothing", label);
    for (int i = 0; i < 5; i++) { sdpa_kv_cache_free(it[i].c); free(it[i].q); free(it[i].out); free(it[i].solo); }
}

/* step_many: twin caches (same writes), one side by step_many, the other by separate steps */
static void test_step_many_on(sdpa_ctx * ctx, const char * label) {
    enum { N = 5 };
    const struct { int32_t B, Hq, Hkv, D, len, Sn, dtype, W, tree; } sh[N] = {
        { 1, 14, 2, 64, 1000, 1, SDPA_DTYPE_FLOAT32, 0, 0 },
        { 2, 8, 2, 24, 70, 3, SDPA_DTYPE_FLOAT32, 0, 1 },
        { 1, 4, 4, 16, 300, 1, SDPA_DTYPE_INT8, 0, 0 },
        { 1, 8, 2, 32, 250, 1, SDPA_DTYPE_FLOAT32, 40, 0 },
        { 1, 8, 2, 32, 250, 20, SDPA_DTYPE_FLOAT32, 40, 0 },  /* rows 250 .. 269: two pieces */
    };
    sdpa_kv_cache * a[N], * b[N];
    float * q[N], * k[N], * v[N], * oa[N], * ob[N];
    uint8_t tree[9] = { 1, 0, 0, 1, 1, 0, 1, 0, 1 };
    sdpa_tensor tq[N], tk[N], tv[N], toa[N], tob[N], tt = tu_tensor2(tree, SDPA_DTYPE_BOOL, 3, 3);
    sdpa_options o[N];
    sdpa_attend_item items[N];
    for (int i = 0; i < N; i++) {
        TU_CHECK(sdpa_kv_cache_create_windowed(ctx, sh[i].B, 4096, sh[i].Hkv, sh[i].D, sh[i].dtype, sh[i].W, 0, &a[i]) == SDPA_OK &&
                 sdpa_kv_cache_create_windowed(ctx, sh[i].B, 4096, sh[i].Hkv, sh[i].D, sh[i].dtype, sh[i].W, 0, &b[i]) == SDPA_OK, "%s: create", label);
        const size_t pn = (size_t)sh[i].B * sh[i].len * sh[i].Hkv * sh[i].D;
        float * pk = tu_malloc(pn * 4), * pv = tu_malloc(pn * 4);
        fill(pk, pn); fill(pv, pn);
        sdpa_tensor ptk = tu_tensor4(pk, SDPA_DTYPE_FLOAT32, sh[i].B, sh[i].len, sh[i].Hkv, sh[i].D), ptv = tu_tensor4(pv, SDPA_DTYPE_FLOAT32, sh[i].B, sh[i].len, sh[i].Hkv, sh[i].D);
        sdpa_kv_cache_update(ctx, a[i], &ptk, &ptv, 0);
        sdpa_kv_cache_update(ctx, b[i], &ptk, &ptv, 0);
        free(pk); free(pv);
        const size_t qn = (size_t)sh[i].B * sh[i].Sn * sh[i].Hq * sh[i].D, kn = (size_t)sh[i].B * sh[i].Sn * sh[i].Hkv * sh[i].D;
        q[i] = tu_malloc(qn * 4); k[i] = tu_malloc(kn * 4); v[i] = tu_malloc(kn * 4); oa[i] = tu_malloc(qn * 4); ob[i] = tu_malloc(qn * 4);
        fill(q[i], qn); fill(k[i], kn); fill(v[i], kn);
        tu_fill_nan(oa[i], qn); tu_fill_nan(ob[i], qn);
        tq[i] = tu_tensor4(q[i], SDPA_DTYPE_FLOAT32, sh[i].B, sh[i].Sn, sh[i].Hq, sh[i].D);
        tk[i] = tu_tensor4(k[i], SDPA_DTYPE_FLOAT32, sh[i].B, sh[i].Sn, sh[i].Hkv, sh[i].D);
        tv[i] = tu_tensor4(v[i], SDPA_DTYPE_FLOAT32, sh[i].B, sh[i].Sn, sh[i].Hkv, sh[i].D);
        toa[i] = tu_tensor4(oa[i], SDPA_DTYPE_FLOAT32, sh[i].B, sh[i].Sn, sh[i].Hq, sh[i].D);
        tob[i] = tu_tensor4(ob[i], SDPA_DTYPE_FLOAT32, sh[i].B, sh[i].Sn, sh[i].Hq, sh[i].D);
        o[i] = (sdpa_options){ .start_pos = sh[i].len, .is_causal = 1, .tree_mask = sh[i].tree ? &tt : NULL };
        items[i] = (sdpa_attend_item){ a[i], &tq[i], NULL, &o[i], &toa[i], &tk[i], &tv[i] };
    }
    /* the rules first: nothing written */
    items[2].cache = a[0];
    expect(ctx, sdpa_kv_cache_step_many(ctx, items, N), SDPA_E_ARG, "sdpa_kv_cache_step_many: items[2] uses the same cache as items[0]; one item per cache", "same cache");
    items[2].cache = a[2];
    sdpa_tensor alias = tob[1];  /* item 1's out over item 0's key */
    float * big = tu_malloc(sizeof(float) * (size_t)2 * 3 * 8 * 24);
    alias.data = big;
    items[1].out = &alias;
    items[0].key = &(sdpa_tensor){ big, (size_t)14 * 0 + 128, SDPA_DTYPE_FLOAT32, 4, { 1, 1, 2, 64 } };
    expect(ctx, sdpa_kv_cache_step_many(ctx, items, N), SDPA_E_ARG, "sdpa_kv_cache_step_many: items[1].out shares memory with items[0].key", "out over another item's key");
    free(big);
    items[0].key = &tk[0];
    items[1].out = &toa[1];
    for (int i = 0; i < N; i++)
        TU_CHECK(sdpa_kv_cache_length(a[i]) == sh[i].len && isnan(oa[i][0]), "%s: rejected stepMany wrote nothing (item %d)", label, i);
    tu_dirty_error(ctx);
    sdpa_status s = sdpa_kv_cache_step_many(ctx, items, N);
    TU_CHECK(s == SDPA_OK && sdpa_ctx_last_error(ctx)[0] == 0, "%s: step_many: %s", label, sdpa_ctx_last_error(ctx));
    for (int i = 0; i < N; i++) {
        TU_CHECK(sdpa_kv_cache_step(ctx, b[i], &tq[i], &tk[i], &tv[i], NULL, &o[i], &tob[i]) == SDPA_OK, "%s: solo step %d: %s", label, i, sdpa_ctx_last_error(ctx));
        const int32_t dims[4] = { sh[i].B, sh[i].Sn, sh[i].Hq, sh[i].D };
        char what[80];
        snprintf(what, sizeof what, "%s: stepMany item %d = its own step", label, i);
        tu_identical(what, oa[i], ob[i], (size_t)sh[i].B * sh[i].Sn * sh[i].Hq * sh[i].D, dims);
        TU_CHECK(sdpa_kv_cache_length(a[i]) == sdpa_kv_cache_length(b[i]) && sdpa_kv_cache_window_start(a[i]) == sdpa_kv_cache_window_start(b[i]), "%s: item %d length", label, i);
        /* the rows written are the same */
        const int32_t from = sh[i].len, n = sh[i].Sn;
        const size_t rn = (size_t)sh[i].B * n * sh[i].Hkv * sh[i].D;
        float * ra = tu_malloc(rn * 8), * rb = tu_malloc(rn * 8);
        sdpa_tensor rak = tu_tensor4(ra, SDPA_DTYPE_FLOAT32, sh[i].B, n, sh[i].Hkv, sh[i].D), rav = tu_tensor4(ra + rn, SDPA_DTYPE_FLOAT32, sh[i].B, n, sh[i].Hkv, sh[i].D);
        sdpa_tensor rbk = tu_tensor4(rb, SDPA_DTYPE_FLOAT32, sh[i].B, n, sh[i].Hkv, sh[i].D), rbv = tu_tensor4(rb + rn, SDPA_DTYPE_FLOAT32, sh[i].B, n, sh[i].Hkv, sh[i].D);
        TU_CHECK(sdpa_kv_cache_read(ctx, a[i], from, n, &rak, &rav) == SDPA_OK && sdpa_kv_cache_read(ctx, b[i], from, n, &rbk, &rbv) == SDPA_OK &&
                 memcmp(ra, rb, rn * 8) == 0, "%s: item %d rows written", label, i);
        free(ra); free(rb);
        sdpa_kv_cache_free(a[i]); sdpa_kv_cache_free(b[i]);
        free(q[i]); free(k[i]); free(v[i]); free(oa[i]); free(ob[i]);
    }
}

/* stepMany through a context other than the caches' maker (sdpa.h: a cache's
 * calls may come from any context; its writes take pages from its maker's
 * pool): the pages the items' writes take are reserved in the makers' pools.
 * (They were reserved in the calling context's, whose pool knew no such page
 * size: E_OOM. Review 4, finding 1.) Each item's output and rows are those of
 * the same step run through the maker. */
static void test_step_many_other_context(void) {
    enum { H = 2, D = 8, L = 64 };  /* 64 rows: a page full, so the step takes a new one */
    sdpa_status st;
    sdpa_ctx * maker = sdpa_ctx_create(1, &st), * caller = sdpa_ctx_create(1, &st);
    if (!TU_CHECK(maker && caller, "contexts")) return;
    sdpa_kv_cache * a[2], * b[2];
    float pk[L * H * D], pv[L * H * D], q[H * D], k[H * D], v[H * D], oa[2][H * D], ob[2][H * D];
    fill(pk, L * H * D); fill(pv, L * H * D); fill(q, H * D); fill(k, H * D); fill(v, H * D);
    sdpa_tensor tpk = tu_tensor4(pk, SDPA_DTYPE_FLOAT32, 1, L, H, D), tpv = tu_tensor4(pv, SDPA_DTYPE_FLOAT32, 1, L, H, D);
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, 1, H, D), tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, 1, H, D),
                tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, 1, H, D);
    sdpa_tensor toa[2], tob[2];
    sdpa_options o = { .start_pos = L, .is_causal = 1 };
    sdpa_attend_item items[2];
    for (int i = 0; i < 2; i++) {
        TU_CHECK(sdpa_kv_cache_create(maker, 1, 256, H, D, SDPA_DTYPE_FLOAT32, &a[i]) == SDPA_OK &&
                 sdpa_kv_cache_create(maker, 1, 256, H, D, SDPA_DTYPE_FLOAT32, &b[i]) == SDPA_OK, "create %d", i);
        TU_CHECK(sdpa_kv_cache_update(maker, a[i], &tpk, &tpv, 0) == SDPA_OK && sdpa_kv_cache_update(maker, b[i], &tpk, &tpv, 0) == SDPA_OK, "fill %d", i);
        toa[i] = tu_tensor4(oa[i], SDPA_DTYPE_FLOAT32, 1, 1, H, D);
        tob[i] = tu_tensor4(ob[i], SDPA_DTYPE_FLOAT32, 1, 1, H, D);
        items[i] = (sdpa_attend_item){ a[i], &tq, NULL, &o, &toa[i], &tk, &tv };
    }
    st = sdpa_kv_cache_step_many(caller, items, 2);
    TU_CHECK(st == SDPA_OK, "stepMany through another context: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(caller));
    for (int i = 0; i < 2; i++) {
        TU_CHECK(sdpa_kv_cache_step(maker, b[i], &tq, &tk, &tv, NULL, &o, &tob[i]) == SDPA_OK, "solo step %d", i);
        TU_CHECK(sdpa_kv_cache_length(a[i]) == L + 1, "item %d length %d, expected %d", i, sdpa_kv_cache_length(a[i]), L + 1);
        TU_CHECK(st != SDPA_OK || memcmp(oa[i], ob[i], sizeof oa[i]) == 0, "item %d's output differs from its own step", i);
        sdpa_kv_cache_free(a[i]);
        sdpa_kv_cache_free(b[i]);
    }
    sdpa_ctx_free(caller);
    sdpa_ctx_free(maker);
}

static void test_many(void) {
    test_many_on(g_one, "1 thread");
    test_many_on(g_two, "2 threads");
    test_step_many_on(g_one, "1 thread");
    test_step_many_on(g_two, "2 threads");
    test_step_many_other_context();
}

int main(void) {
    double t0 = tu_seconds();
    tu_rng_seed(&g_rng, tu_base_seed(0x21u));
    if (!tu_ctx_pair(&g_one, &g_two)) return 1;
    test_tree();
    test_tree_rules();
    test_keep();
    test_keep_rules();
    test_many();
    sdpa_ctx_free(g_one);
    sdpa_ctx_free(g_two);
    printf("  %.2f s\n", tu_seconds() - t0);
    return tu_summary("test_runtime");
}
