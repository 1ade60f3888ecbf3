/*
 * test_nonfinite.c: NaN and Inf in q / k / v are computed through
 * (CONTRACT.md section 5, include/sdpa.h "Semantics"), on every path: the
 * SIMD fast path (1 and 2 threads, split-KV decode and unsplit prefill),
 * sdpa_custom_reference, the sdpa_ctx_use_reference switch, and the KV cache
 * (update + step, attend).
 *
 * The rule, as the tests' float64 reference (naive_ref.c) applies it:
 *   - a NaN score is visible, not masked: a row with any NaN score is NaN in
 *     every element, and so is a row whose every score is NaN (not zeros);
 *   - a +inf score gives inf - inf = NaN: a NaN row; a -inf score is masked;
 *   - a NaN in a V row reaches exactly the rows that give it weight, and only
 *     in that element;
 *   - rows that do not attend the key (causal, bool-masked) stay finite and
 *     accurate; a fully masked row is exactly zero.
 *
 * Regressions covered (review of commit "kernel: V-row touch ..."):
 *   - split-KV decode (Sq = 1, Hq = 8, Hkv = 1, D = 64, N = 778 and 4106, and
 *     N = 20000 at the chunk-count cap) dropped a chunk whose first tile had a
 *     NaN score, or the NaN itself, giving finite outputs;
 *   - a NaN query row was NaN for N > 256 but finite for N <= 256;
 *   - a row whose every score is NaN gave zeros.
 * Every case states how many output rows must be NaN, so a reference that
 * silently lost the NaN would be caught too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

static sdpa_ctx * g_ctx1;  /* 1 thread */
static sdpa_ctx * g_ctx2;  /* 2 threads */
static long g_cases;

enum { IN_Q = 0, IN_K = 1, IN_V = 2 };
enum { MASK_NONE = 0, MASK_BOOL = 1, MASK_FLOAT = 2 };

/* One non-finite value written into q (b, i=t, h, d) or k/v (b, t, h=hk, d);
   d = -1 writes the whole row of D values. */
typedef struct inj {
    int which;
    int32_t b, t, h, d;
    float val;
} inj;

#define MAX_INJ 8
typedef struct ncase {
    const char * label;
    int32_t B, Sq, Hq, Hkv, D, N;  /* Skv = N and start_pos = N - Sq: every key exists */
    int causal;
    int mask;                      /* MASK_*: all keys attended except the two below */
    int32_t masked_row;            /* -1, or a query row whose every key is masked */
    int32_t masked_key;            /* -1, or a key masked for every row */
    int all_k_nan;                 /* every K value NaN: every score NaN */
    inj in[MAX_INJ];
    int n_in;
    long want_nan_rows;            /* output rows [b, i, h] that must be NaN in every element; -1: any */
    long want_partial_rows;        /* rows NaN in some elements only (a NaN in V) */
} ncase;

static ncase base(const char * label, int32_t B, int32_t Sq, int32_t Hq, int32_t Hkv, int32_t D, int32_t N,
                  int causal) {
    ncase c;
    memset(&c, 0, sizeof c);
    c.label = label;
    c.B = B;
    c.Sq = Sq;
    c.Hq = Hq;
    c.Hkv = Hkv;
    c.D = D;
    c.N = N;
    c.causal = causal;
    c.masked_row = -1;
    c.masked_key = -1;
    return c;
}

static void add(ncase * c, int which, int32_t b, int32_t t, int32_t h, int32_t d, float val) {
    if (c->n_in >= MAX_INJ) return;
    inj x = {which, b, t, h, d, val};
    c->in[c->n_in++] = x;
}

static void describe(const ncase * c, uint64_t seed) {
    char inj_text[256] = "";
    size_t at = 0;
    for (int n = 0; n < c->n_in && at < sizeof inj_text; n++) {
        const inj * x = &c->in[n];
        char dtext[16];
        if (x->d < 0) snprintf(dtext, sizeof dtext, "all");
        else snprintf(dtext, sizeof dtext, "%d", x->d);
        int w = snprintf(inj_text + at, sizeof inj_text - at, "%s%s[b=%d,%s=%d,h=%d,d=%s]=%g", n ? " " : "",
                         x->which == IN_Q ? "q" : x->which == IN_K ? "k" : "v", x->b, x->which == IN_Q ? "i" : "t",
                         x->t, x->h, dtext, (double)x->val);
        if (w < 0) break;
        at += (size_t)w;
    }
    snprintf(tu_context, sizeof tu_context,
             "%s: B=%d Sq=%d Hq=%d Hkv=%d D=%d N=%d sp=%d %s mask=%s masked_row=%d masked_key=%d%s %s seed=%" PRIu64,
             c->label, c->B, c->Sq, c->Hq, c->Hkv, c->D, c->N, c->N - c->Sq, c->causal ? "causal" : "non-causal",
             c->mask == MASK_BOOL ? "bool" : c->mask == MASK_FLOAT ? "float" : "none", c->masked_row, c->masked_key,
             c->all_k_nan ? " all-K-NaN" : "", inj_text, seed);
}

/* rows [start, start + n) of a [B, S, H, D] tensor, as a dense [B, n, H, D] copy */
static float * slice_rows(const float * src, int32_t B, int32_t S, size_t row, int32_t start, int32_t n) {
    float * dst = tu_malloc((size_t)B * n * row * sizeof(float) + 1);
    for (int32_t b = 0; b < B; b++)
        memcpy(dst + (size_t)b * n * row, src + ((size_t)b * S + (size_t)start) * row, (size_t)n * row * sizeof(float));
    return dst;
}

/* A fully masked query row is exactly +0 or -0 everywhere, except where the
   reference is NaN (float mask: -inf + NaN = NaN is a visible score).
   (A tu_path_check: arg is the ncase.) */
static void check_masked_row_zero(int path, const char * what, const float * out, const double * ref,
                                  const void * arg) {
    (void)path;
    const ncase * c = arg;
    if (c->mask == MASK_NONE || c->masked_row < 0) return;
    long bad = 0;
    for (int32_t b = 0; b < c->B; b++)
        for (size_t j = 0; j < (size_t)c->Hq * c->D; j++) {
            const size_t at = (((size_t)b * c->Sq + (size_t)c->masked_row) * c->Hq) * c->D + j;
            if (!isnan(ref[at]) && out[at] != 0.0f) bad++;
        }
    TU_CHECK(bad == 0, "%s: fully masked row %d has %ld values that are not exactly 0", what, c->masked_row, bad);
}

/* Status OK with an empty last_error, then every element against the
   reference (NaN where it is NaN), then the fully masked row. */
static void check_out(const ncase * c, sdpa_ctx * ctx, sdpa_status st, const char * what, const float * out,
                      const double * ref, const int32_t * dims) {
    size_t nq = (size_t)c->B * c->Sq * c->Hq * c->D;
    if (tu_check_output(ctx, st, what, out, ref, nq, dims)) check_masked_row_zero(-1, what, out, ref, c);
}

static void run_case(const ncase * c, uint64_t seed) {
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    describe(c, seed);
    g_cases++;
    const int32_t sp = c->N - c->Sq;
    const size_t row_q = (size_t)c->Hq * c->D, row_kv = (size_t)c->Hkv * c->D;
    const size_t nq = (size_t)c->B * c->Sq * row_q, nkv = (size_t)c->B * c->N * row_kv;
    const size_t nm = (size_t)c->Sq * c->N;
    float * q = tu_malloc(nq * 4), * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4);
    void * mask = c->mask ? tu_malloc(nm * (c->mask == MASK_BOOL ? 1 : 4)) : NULL;
    double * ref = tu_malloc(nq * 8);
    float * o1 = tu_malloc(nq * 4), * o2 = tu_malloc(nq * 4), * orf = tu_malloc(nq * 4);

    /* scores with a standard deviation of about 2 (as in test_numerics) */
    for (size_t x = 0; x < nq; x++) q[x] = 2.0f * tu_rng_normal(&rng);
    for (size_t x = 0; x < nkv; x++) {
        k[x] = c->all_k_nan ? NAN : tu_rng_normal(&rng);
        v[x] = tu_rng_uniform(&rng, -3.0f, 3.0f);
    }
    for (int n = 0; n < c->n_in; n++) {
        const inj * x = &c->in[n];
        float * base_ptr = x->which == IN_Q ? q : x->which == IN_K ? k : v;
        const int32_t S = x->which == IN_Q ? c->Sq : c->N, H = x->which == IN_Q ? c->Hq : c->Hkv;
        float * r = base_ptr + (((size_t)x->b * S + (size_t)x->t) * H + (size_t)x->h) * c->D;
        for (int32_t d = 0; d < c->D; d++)
            if (x->d < 0 || x->d == d) r[d] = x->val;
    }
    for (int32_t i = 0; i < c->Sq; i++)
        for (int32_t t = 0; t < c->N; t++) {
            const int off = i == c->masked_row || t == c->masked_key;
            if (c->mask == MASK_BOOL) ((uint8_t *)mask)[(size_t)i * c->N + t] = off ? 0 : 1;
            else if (c->mask == MASK_FLOAT) ((float *)mask)[(size_t)i * c->N + t] = off ? -INFINITY : 0.25f;
        }

    naive_params np = {
        .B = c->B, .Sq = c->Sq, .Skv = c->N, .Hq = c->Hq, .Hkv = c->Hkv, .D = c->D,
        .mask_kind = c->mask == MASK_BOOL ? NAIVE_MASK_BOOL : c->mask == MASK_FLOAT ? NAIVE_MASK_FLOAT : NAIVE_MASK_NONE,
        .mask = mask, .mask_cols = c->N, .start_pos = sp, .is_causal = c->causal,
    };
    if (!TU_CHECK(naive_sdpa(&np, q, k, v, ref) == 0, "test bug: naive reference rejected the case")) goto done;

    /* the reference itself: as many NaN rows as the case says */
    long nan_rows = 0, partial_rows = 0;
    for (size_t r = 0; r < nq / (size_t)c->D; r++) {
        int n_nan = 0;
        for (int32_t d = 0; d < c->D; d++) n_nan += isnan(ref[r * (size_t)c->D + (size_t)d]) != 0;
        if (n_nan == c->D) nan_rows++;
        else if (n_nan) partial_rows++;
    }
    if (c->want_nan_rows >= 0)
        TU_CHECK(nan_rows == c->want_nan_rows, "test bug: reference has %ld all-NaN rows, the case expects %ld", nan_rows,
                 c->want_nan_rows);
    TU_CHECK(partial_rows == c->want_partial_rows, "test bug: reference has %ld partly NaN rows, the case expects %ld",
             partial_rows, c->want_partial_rows);

    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, c->B, c->Sq, c->Hq, c->D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, c->B, c->N, c->Hkv, c->D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, c->B, c->N, c->Hkv, c->D);
    sdpa_tensor tm = tu_tensor2(mask, c->mask == MASK_BOOL ? SDPA_DTYPE_BOOL : SDPA_DTYPE_FLOAT32, c->Sq, c->N);
    const sdpa_tensor * pm = c->mask ? &tm : NULL;
    sdpa_tensor to1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, c->B, c->Sq, c->Hq, c->D);
    sdpa_tensor to2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, c->B, c->Sq, c->Hq, c->D);
    sdpa_options opt = {.start_pos = sp, .is_causal = c->causal};
    const int32_t * dims = tq.dims;

    /* fast path 1 and 2 threads (bit for bit the same), the library
       reference both ways in: each against the float64 reference */
    tu_custom_paths(g_ctx1, g_ctx2, &tq, &tk, &tv, pm, &opt, ref, o1, o2, orf, 1, check_masked_row_zero, c);

    /* KV cache: rows 0..sp-1 by update, the last Sq by step (2 threads), then
       attend over the same cache (1 thread) */
    sdpa_kv_cache * cache = NULL;
    sdpa_status st = sdpa_kv_cache_create(g_ctx2, c->B, c->N, c->Hkv, c->D, SDPA_DTYPE_FLOAT32, &cache);
    if (TU_CHECK(st == SDPA_OK, "kv_cache_create: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(g_ctx2))) {
        if (sp > 0) {
            float * kp = slice_rows(k, c->B, c->N, row_kv, 0, sp), * vp = slice_rows(v, c->B, c->N, row_kv, 0, sp);
            sdpa_tensor a = tu_tensor4(kp, SDPA_DTYPE_FLOAT32, c->B, sp, c->Hkv, c->D);
            sdpa_tensor b = tu_tensor4(vp, SDPA_DTYPE_FLOAT32, c->B, sp, c->Hkv, c->D);
            st = sdpa_kv_cache_update(g_ctx2, cache, &a, &b, 0);
            TU_CHECK(st == SDPA_OK, "kv_cache_update of %d rows: %s %s", sp, sdpa_status_code(st),
                     sdpa_ctx_last_error(g_ctx2));
            free(kp);
            free(vp);
        }
        float * kn = slice_rows(k, c->B, c->N, row_kv, sp, c->Sq), * vn = slice_rows(v, c->B, c->N, row_kv, sp, c->Sq);
        sdpa_tensor a = tu_tensor4(kn, SDPA_DTYPE_FLOAT32, c->B, c->Sq, c->Hkv, c->D);
        sdpa_tensor b = tu_tensor4(vn, SDPA_DTYPE_FLOAT32, c->B, c->Sq, c->Hkv, c->D);
        tu_fill_nan(o2, nq);
        tu_dirty_error(g_ctx2);
        check_out(c, g_ctx2, sdpa_kv_cache_step(g_ctx2, cache, &tq, &a, &b, pm, &opt, &to2), "kv_cache_step (2 threads)",
                  o2, ref, dims);
        tu_fill_nan(o1, nq);
        tu_dirty_error(g_ctx1);
        check_out(c, g_ctx1, sdpa_kv_cache_attend(g_ctx1, cache, &tq, pm, &opt, &to1), "kv_cache_attend (1 thread)", o1,
                  ref, dims);
        free(kn);
        free(vn);
        sdpa_kv_cache_free(cache);
    }

done:
    free(q);
    free(k);
    free(v);
    free(mask);
    free(ref);
    free(o1);
    free(o2);
    free(orf);
    tu_context[0] = 0;
}

static uint64_t g_seed = 5150;

/* A NaN in one key row inside the visible range of a split-KV decode: every
   row (all 8 heads share the one KV head) is NaN. The positions hit the first
   and last key, the first tile of a chunk at different lanes, chunk
   boundaries (chunks of 256 keys for N = 778 and 4106), the last chunk's
   only tile (N = 778: keys 768..777), and the 64-chunk cap (N = 20000). */
static void test_split_decode_key_nan(void) {
    static const int32_t pos778[] = {0, 1, 5, 255, 256, 257, 300, 511, 512, 767, 768, 769, 777};
    static const int32_t pos4106[] = {0, 63, 64, 255, 256, 2047, 3839, 4095, 4096, 4097, 4105};
    static const int32_t pos20000[] = {0, 319, 320, 10000, 19839, 19840, 19999};
    struct {
        int32_t N;
        const int32_t * pos;
        int n;
    } sets[] = {{778, pos778, 13}, {4106, pos4106, 11}, {20000, pos20000, 7}};
    int k = 0;
    for (int s = 0; s < 3; s++)
        for (int a = 0; a < sets[s].n; a++)
            for (int causal = 1; causal >= 0; causal--, k++) {
                if (sets[s].N == 20000 && causal != (a % 2)) continue;  /* cost: one mode per position */
                ncase c = base("split decode, NaN in a key row", 1, 1, 8, 1, 64, sets[s].N, causal);
                /* alternately the whole key row, or one element of it */
                add(&c, IN_K, 0, sets[s].pos[a], 0, k % 2 ? -1 : (int32_t)((a * 7) % 64), NAN);
                c.want_nan_rows = 8;
                run_case(&c, g_seed++);
            }
}

/* A NaN in a query row gives that row NaN, for N <= 256 (one chunk) and
   N > 256 (split) alike; the other heads are unaffected. */
static void test_query_nan(void) {
    static const int32_t Ns[] = {1, 2, 5, 64, 100, 255, 256, 257, 778, 4106};
    for (int a = 0; a < (int)(sizeof Ns / sizeof Ns[0]); a++)
        for (int causal = 1; causal >= 0; causal--) {
            ncase c = base("NaN in one query row", 1, 1, 8, 1, 64, Ns[a], causal);
            add(&c, IN_Q, 0, 0, 3, 17, NAN);
            c.want_nan_rows = 1;
            run_case(&c, g_seed++);

            ncase e = base("NaN in every query row (every score NaN)", 1, 1, 8, 1, 64, Ns[a], causal);
            for (int32_t h = 0; h < 8; h++) add(&e, IN_Q, 0, 0, h, h % 2 ? -1 : h, NAN);
            e.want_nan_rows = 8;
            run_case(&e, g_seed++);
        }
}

/* Every score NaN through K (all of K is NaN): NaN rows, not zeros. */
static void test_all_scores_nan(void) {
    static const int32_t Ns[] = {1, 3, 200, 256, 778, 4106};
    for (int a = 0; a < (int)(sizeof Ns / sizeof Ns[0]); a++)
        for (int causal = 1; causal >= 0; causal--) {
            ncase c = base("every key NaN", 1, 1, 8, 1, 64, Ns[a], causal);
            c.all_k_nan = 1;
            c.want_nan_rows = 8;
            run_case(&c, g_seed++);
        }
    /* prefill: each row sees at least one key, all NaN */
    ncase c = base("every key NaN, prefill", 1, 7, 4, 2, 16, 40, 1);
    c.all_k_nan = 1;
    c.want_nan_rows = 7 * 4;
    run_case(&c, g_seed++);
}

/* Only the rows that attend the key: other batches / KV heads stay finite. */
static void test_gqa_batch(void) {
    static const int32_t Ns[] = {200, 778};
    for (int a = 0; a < 2; a++) {
        ncase c = base("GQA B=2, NaN in key [b=1, hk=0]", 2, 1, 8, 2, 64, Ns[a], 1);
        add(&c, IN_K, 1, Ns[a] / 3, 0, -1, NAN);
        c.want_nan_rows = 4;  /* b = 1, heads 0..3 */
        run_case(&c, g_seed++);

        ncase v = base("GQA B=2, NaN in one value element [b=0, hk=1, d=7]", 2, 1, 8, 2, 64, Ns[a], 0);
        add(&v, IN_V, 0, Ns[a] - 100, 1, 7, NAN);
        v.want_partial_rows = 4;  /* b = 0, heads 4..7, element 7 only */
        run_case(&v, g_seed++);

        ncase w = base("GQA B=2, NaN in a query [b=1, h=6] and a key [b=0, hk=0]", 2, 1, 8, 2, 64, Ns[a], 1);
        add(&w, IN_Q, 1, 0, 6, 0, NAN);
        add(&w, IN_K, 0, 0, 0, 63, NAN);
        w.want_nan_rows = 1 + 4;
        run_case(&w, g_seed++);
    }
}

/* Several query rows (split still: 3 row blocks): causal rows that do not
   reach the NaN key stay finite. */
static void test_multi_row_causal(void) {
    const int32_t N = 1000, sp = N - 3;
    struct {
        int32_t t;
        int causal;
        long want;
    } cases[] = {{sp, 1, 24}, {sp + 1, 1, 16}, {sp + 2, 1, 8}, {sp + 2, 0, 24}, {10, 1, 24}};
    for (int a = 0; a < 5; a++) {
        ncase c = base("Sq=3 split, NaN key near the diagonal", 1, 3, 8, 1, 64, N, cases[a].causal);
        add(&c, IN_K, 0, cases[a].t, 0, -1, NAN);
        c.want_nan_rows = cases[a].want;
        run_case(&c, g_seed++);
    }
    /* prefill, no split (33 row blocks): rows i >= 70 see key 70 */
    ncase p = base("prefill Sq=130, NaN key 70", 1, 130, 2, 1, 16, 130, 1);
    add(&p, IN_K, 0, 70, 0, 3, NAN);
    p.want_nan_rows = 60 * 2;
    run_case(&p, g_seed++);
    ncase pq = base("prefill Sq=130, NaN in query row 5 head 1", 1, 130, 2, 1, 16, 130, 1);
    add(&pq, IN_Q, 0, 5, 1, -1, NAN);
    pq.want_nan_rows = 1;
    run_case(&pq, g_seed++);
    /* a NaN value reaches the rows that give its key weight (all of them for
       key 0). Not tested: a non-finite V row at a key masked for some row
       (causal or by the mask) may or may not reach that row (sdpa.h). */
    ncase pv = base("prefill Sq=130, NaN value at key 0", 1, 130, 2, 1, 16, 130, 1);
    add(&pv, IN_V, 0, 0, 0, 2, NAN);
    pv.want_partial_rows = 260;
    run_case(&pv, g_seed++);
}

/* Masks: fully masked rows stay exact zeros whatever is in the data; a
   bool-masked key's NaN never reaches the output (false replaces the score
   by -inf); a float -inf entry added to a NaN score is NaN (section 1:
   score = s * dot + mask), so that key's NaN does reach the output. */
static void test_masks(void) {
    static const int32_t Ns[] = {100, 778};
    for (int a = 0; a < 2; a++) {
        const int32_t N = Ns[a];
        for (int kind = MASK_BOOL; kind <= MASK_FLOAT; kind++) {
            ncase c = base("fully masked row 0, NaN key seen by row 1", 1, 2, 8, 1, 64, N, 0);
            c.mask = kind;
            c.masked_row = 0;
            add(&c, IN_K, 0, N / 2, 0, -1, NAN);
            c.want_nan_rows = kind == MASK_BOOL ? 8 : 16;  /* float: -inf + NaN = NaN in row 0 too */
            run_case(&c, g_seed++);

            ncase d = base("fully masked row 0 with a NaN query", 1, 2, 8, 1, 64, N, 0);
            d.mask = kind;
            d.masked_row = 0;
            add(&d, IN_Q, 0, 0, 2, -1, NAN);
            d.want_nan_rows = kind == MASK_BOOL ? 0 : 1;  /* float: the other 7 heads of row 0 are zeros */
            run_case(&d, g_seed++);

            ncase e = base("NaN key masked for every row", 1, 2, 8, 1, 64, N, 0);
            e.mask = kind;
            e.masked_key = N / 2;
            add(&e, IN_K, 0, N / 2, 0, -1, NAN);
            e.want_nan_rows = kind == MASK_BOOL ? 0 : 16;
            run_case(&e, g_seed++);
        }
        /* bool mask: fully masked row next to a clean one, NaN only in V of a masked key */
        ncase f = base("fully masked row 0, NaN value at a key masked for row 0 only", 1, 2, 8, 1, 64, N, 0);
        f.mask = MASK_BOOL;
        f.masked_row = 0;
        add(&f, IN_V, 0, 3, 0, 5, NAN);
        f.want_partial_rows = 8;  /* row 1 sees key 3 */
        run_case(&f, g_seed++);
    }
}

/* +inf scores: inf - inf = NaN, so the row is NaN; -inf scores are masked.
   A single +inf element of a key gives +inf or -inf by the query's sign, so
   only the reference knows which rows are NaN. */
static void test_inf(void) {
    static const int32_t Ns[] = {5, 100, 778, 4106};
    for (int a = 0; a < 4; a++) {
        ncase c = base("+inf in one key element (scores +-inf by sign)", 1, 1, 8, 1, 64, Ns[a], 1);
        add(&c, IN_K, 0, Ns[a] / 2, 0, 9, INFINITY);
        c.want_nan_rows = -1;
        run_case(&c, g_seed++);

        ncase q = base("+inf query element against a positive key", 1, 1, 8, 1, 64, Ns[a], 1);
        add(&q, IN_Q, 0, 0, 4, 0, INFINITY);
        add(&q, IN_K, 0, Ns[a] - 1, 0, 0, 1.0f);  /* the last key's score is +inf */
        q.want_nan_rows = 1;  /* head 4 only: its last key's score is +inf */
        run_case(&q, g_seed++);

        ncase v = base("+inf in one value element", 1, 1, 8, 1, 64, Ns[a], 0);
        add(&v, IN_V, 0, 0, 0, 1, INFINITY);
        v.want_partial_rows = 0;  /* inf, not NaN: compared exactly by tu_close */
        run_case(&v, g_seed++);
    }
}

int main(void) {
    double t0 = tu_seconds();
    if (!tu_ctx_pair(&g_ctx1, &g_ctx2)) return 1;
    struct {
        const char * name;
        void (*fn)(void);
    } sections[] = {
        {"split decode, NaN key", test_split_decode_key_nan},
        {"NaN query", test_query_nan},
        {"every score NaN", test_all_scores_nan},
        {"GQA / batch", test_gqa_batch},
        {"multi-row causal", test_multi_row_causal},
        {"masks", test_masks},
        {"inf", test_inf},
    };
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        long c0 = g_cases;
        long f0 = tu_failures;
        double s0 = tu_seconds();
        sections[s].fn();
        printf("  %-24s %3ld cases  %6.2f s%s\n", sections[s].name, g_cases - c0, tu_seconds() - s0,
               tu_failures > f0 ? "  FAILED" : "");
    }
    printf("  total %ld cases, %.2f s\n", g_cases, tu_seconds() - t0);
    sdpa_ctx_free(g_ctx1);
    sdpa_ctx_free(g_ctx2);
    return tu_summary("test_nonfinite");
}
