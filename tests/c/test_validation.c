/*
 * test_validation.c: every rule of CONTRACT.md section 2 that applies to the
 * C API, for sdpa_custom, sdpa_custom_reference and the KV-cache entry points.
 *
 * For each broken rule the call must
 *   - return the rule's status (the first in table order when several are broken),
 *   - leave a non-empty sdpa_ctx_last_error naming the argument,
 *   - leave every buffer it was given (output, inputs, the cache storage)
 *     byte-for-byte unchanged (sentinel pattern + memcmp),
 *   - never read past a buffer (buffers are allocated at exactly the claimed
 *     length, so ASan catches over-reads).
 * A later valid call must succeed and clear the message.
 *
 * Where the contract leaves two codes plausible (e.g. out batch: E_DIMS "out
 * dims" or E_BATCH "out batch"), both are accepted and the one returned is
 * printed with SDPA_TEST_VERBOSE=1.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

#include "sdpa.h"
#include "sdpa_dense.h"
#include "testutil.h"
#include "internal.h"  /* sdpa_fail, sdpa_named: the naming's bounds */
#include "../../src/wasm/api.h"

static sdpa_ctx * g_ctx;
static int g_verbose;
static long g_cases;

/* ---- tracked buffers: snapshot before a call, memcmp after ------------- */

#define MAX_TRACK 12
typedef struct tracked {
    void * ptr;
    size_t bytes;
    unsigned char * snap;
    const char * name;
} tracked;

typedef struct tracker {
    tracked t[MAX_TRACK];
    int n;
} tracker;

static void track(tracker * tr, void * ptr, size_t bytes, const char * name) {
    if (!ptr || tr->n >= MAX_TRACK) return;
    tr->t[tr->n].ptr = ptr;
    tr->t[tr->n].bytes = bytes;
    tr->t[tr->n].snap = NULL;
    tr->t[tr->n].name = name;
    tr->n++;
}

static void snapshot(tracker * tr) {
    for (int i = 0; i < tr->n; i++) {
        free(tr->t[i].snap);
        tr->t[i].snap = tu_malloc(tr->t[i].bytes);
        memcpy(tr->t[i].snap, tr->t[i].ptr, tr->t[i].bytes);
    }
}

static void check_unchanged(tracker * tr, const char * desc) {
    for (int i = 0; i < tr->n; i++) {
        int same = memcmp(tr->t[i].snap, tr->t[i].ptr, tr->t[i].bytes) == 0;
        TU_CHECK(same, "%s: buffer '%s' was modified by a rejected call", desc, tr->t[i].name);
    }
}

static void tracker_free(tracker * tr) {
    for (int i = 0; i < tr->n; i++) free(tr->t[i].snap);
    tr->n = 0;
}

static void fill_pattern(void * p, size_t bytes, unsigned seed) {
    unsigned char * c = p;
    for (size_t i = 0; i < bytes; i++) c[i] = (unsigned char)(0xA5u ^ (seed * 31u + (unsigned)i * 7u));
}

static void fill_random(float * p, size_t n, tu_rng * rng) {
    for (size_t i = 0; i < n; i++) p[i] = tu_rng_uniform(rng, -1.0f, 1.0f);
}

/* Any of the '|'-separated keywords occurs in msg (case-insensitive). */
static int names_any(const char * msg, const char * keywords) {
    if (!keywords || !keywords[0]) return 1;
    char buf[256];
    const char * p = keywords;
    while (*p) {
        const char * bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (tu_contains_ci(msg, buf)) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

/* Checks status (want, or alt when alt != SDPA_OK), message and buffers. */
static void verify(sdpa_ctx * ctx, tracker * tr, const char * desc, sdpa_status got, sdpa_status want,
                   sdpa_status alt, const char * keywords) {
    g_cases++;
    int ok = got == want || (alt != SDPA_OK && got == alt);
    if (alt != SDPA_OK)
        TU_CHECK(ok, "%s: expected %s (or %s), got %s ('%s')", desc, sdpa_status_code(want),
                 sdpa_status_code(alt), sdpa_status_code(got), ctx ? sdpa_ctx_last_error(ctx) : "");
    else
        TU_CHECK(ok, "%s: expected %s, got %s ('%s')", desc, sdpa_status_code(want), sdpa_status_code(got),
                 ctx ? sdpa_ctx_last_error(ctx) : "");
    if (ctx && got == SDPA_OK) {
        const char * msg = sdpa_ctx_last_error(ctx);
        TU_CHECK(msg && !msg[0], "%s: last_error not empty after a success: '%s'", desc, msg ? msg : "(null)");
    }
    if (ctx && got != SDPA_OK) {
        const char * msg = sdpa_ctx_last_error(ctx);
        TU_CHECK(msg && msg[0], "%s: empty last_error after %s", desc, sdpa_status_code(got));
        if (msg && msg[0] && ok)
            TU_CHECK(names_any(msg, keywords), "%s: message does not name '%s': '%s'", desc, keywords, msg);
        if (g_verbose) printf("  %-58s %-14s %s\n", desc, sdpa_status_code(got), msg ? msg : "(null)");
    } else if (g_verbose) {
        printf("  %-58s %-14s\n", desc, sdpa_status_code(got));
    }
    check_unchanged(tr, desc);
}

/* ---- sdpa_custom fixture ---------------------------------------------- */

enum { FB = 2, FSQ = 3, FSKV = 8, FHQ = 4, FHKV = 2, FD = 5, FSP = 2, FN = 6 };

typedef struct fx {
    float * q, * k, * v, * out, * fmask, * extra;
    uint8_t * bmask;
    sdpa_tensor tq, tk, tv, tm, to;
    sdpa_options opt;
    const sdpa_tensor * pq, * pk, * pv, * pm;
    const sdpa_options * popt;
    sdpa_tensor * po;
    tracker tr;
} fx;

static void fx_init(fx * f, int mask_kind /* 0 none, 1 float, 2 bool */) {
    memset(f, 0, sizeof *f);
    tu_rng rng;
    tu_rng_seed(&rng, 42);
    size_t nq = (size_t)FB * FSQ * FHQ * FD, nkv = (size_t)FB * FSKV * FHKV * FD;
    f->q = tu_malloc(nq * 4);
    f->k = tu_malloc(nkv * 4);
    f->v = tu_malloc(nkv * 4);
    f->out = tu_malloc(nq * 4);
    f->fmask = tu_malloc((size_t)FSQ * FN * 4);
    f->bmask = tu_malloc((size_t)FSQ * FN);
    fill_random(f->q, nq, &rng);
    fill_random(f->k, nkv, &rng);
    fill_random(f->v, nkv, &rng);
    fill_random(f->fmask, (size_t)FSQ * FN, &rng);
    for (int i = 0; i < FSQ * FN; i++) f->bmask[i] = (uint8_t)(i % 3 != 0);
    fill_pattern(f->out, nq * 4, 1);
    f->tq = tu_tensor4(f->q, SDPA_DTYPE_FLOAT32, FB, FSQ, FHQ, FD);
    f->tk = tu_tensor4(f->k, SDPA_DTYPE_FLOAT32, FB, FSKV, FHKV, FD);
    f->tv = tu_tensor4(f->v, SDPA_DTYPE_FLOAT32, FB, FSKV, FHKV, FD);
    f->to = tu_tensor4(f->out, SDPA_DTYPE_FLOAT32, FB, FSQ, FHQ, FD);
    if (mask_kind == 2) f->tm = tu_tensor2(f->bmask, SDPA_DTYPE_BOOL, FSQ, FN);
    else f->tm = tu_tensor2(f->fmask, SDPA_DTYPE_FLOAT32, FSQ, FN);
    f->opt.start_pos = FSP;
    f->pq = &f->tq;
    f->pk = &f->tk;
    f->pv = &f->tv;
    f->pm = mask_kind ? &f->tm : NULL;
    f->popt = &f->opt;
    f->po = &f->to;
    track(&f->tr, f->q, nq * 4, "query");
    track(&f->tr, f->k, nkv * 4, "key");
    track(&f->tr, f->v, nkv * 4, "value");
    track(&f->tr, f->out, nq * 4, "out");
    track(&f->tr, f->fmask, (size_t)FSQ * FN * 4, "mask(float)");
    track(&f->tr, f->bmask, (size_t)FSQ * FN, "mask(bool)");
}

static void fx_free(fx * f) {
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->out);
    free(f->fmask);
    free(f->bmask);
    free(f->extra);
    tracker_free(&f->tr);
}

/* Replaces a tensor's buffer by one of exactly `len` elements (so a library
   that trusts dims over len reads out of bounds under ASan). */
static void fx_resize(fx * f, sdpa_tensor * t, size_t len, const char * name) {
    free(f->extra);
    size_t esz = t->dtype == SDPA_DTYPE_BOOL ? 1 : 4;
    f->extra = tu_malloc(len * esz + 1);
    fill_pattern(f->extra, len * esz, 7);
    t->data = f->extra;
    t->len = len;
    track(&f->tr, f->extra, len * esz, name);
}

/* A call expected to succeed follows a rejected one (tu_dirty_error), so that
   verify's "last_error empty after a success" means the call cleared it. */
static void fx_expect(fx * f, const char * desc, sdpa_status want, sdpa_status alt, const char * kw) {
    char d2[200];
    snapshot(&f->tr);
    if (want == SDPA_OK) tu_dirty_error(g_ctx);
    sdpa_status st = sdpa_custom(g_ctx, f->pq, f->pk, f->pv, f->pm, f->popt, f->po);
    snprintf(d2, sizeof d2, "sdpa_custom: %s", desc);
    verify(g_ctx, &f->tr, d2, st, want, alt, kw);
    snapshot(&f->tr);
    if (want == SDPA_OK) tu_dirty_error(g_ctx);
    st = sdpa_custom_reference(g_ctx, f->pq, f->pk, f->pv, f->pm, f->popt, f->po);
    snprintf(d2, sizeof d2, "sdpa_custom_reference: %s", desc);
    verify(g_ctx, &f->tr, d2, st, want, alt, kw);
}

/* V(desc, mask_kind, want, alt, keywords, mutation...) */
#define V(desc, mk, want, alt, kw, ...) \
    do {                                \
        fx f;                           \
        fx_init(&f, mk);                \
        __VA_ARGS__;                    \
        fx_expect(&f, desc, want, alt, kw); \
        fx_free(&f);                    \
    } while (0)

#define OK_ SDPA_OK

static void test_custom_baseline(void) {
    /* the fixture itself is valid (all three mask kinds) */
    for (int mk = 0; mk < 3; mk++) {
        fx f;
        fx_init(&f, mk);
        tu_dirty_error(g_ctx);
        sdpa_status st = sdpa_custom(g_ctx, f.pq, f.pk, f.pv, f.pm, f.popt, f.po);
        TU_CHECK(st == SDPA_OK, "baseline (mask kind %d) rejected: %s %s", mk, sdpa_status_code(st),
                 sdpa_ctx_last_error(g_ctx));
        TU_CHECK(sdpa_ctx_last_error(g_ctx)[0] == 0, "last_error not empty after success");
        fx_free(&f);
    }
}

static void test_custom_rules(void) {
    const size_t nq = (size_t)FB * FSQ * FHQ * FD, nkv = (size_t)FB * FSKV * FHKV * FD;

    /* E_ARG: missing required pointers, out aliasing an input */
    V("query NULL", 0, SDPA_E_ARG, OK_, "query", f.pq = NULL);
    V("key NULL", 0, SDPA_E_ARG, OK_, "key", f.pk = NULL);
    V("value NULL", 0, SDPA_E_ARG, OK_, "value", f.pv = NULL);
    V("out NULL", 0, SDPA_E_ARG, OK_, "out", f.po = NULL);
    V("query data NULL", 0, SDPA_E_ARG, OK_, "query", f.tq.data = NULL);
    V("key data NULL", 0, SDPA_E_ARG, OK_, "key", f.tk.data = NULL);
    V("value data NULL", 0, SDPA_E_ARG, OK_, "value", f.tv.data = NULL);
    V("out data NULL", 0, SDPA_E_ARG, OK_, "out", f.to.data = NULL);
    V("out == query", 0, SDPA_E_ARG, OK_, "out", f.to.data = f.q);
    V("out == key (same size view)", 0, SDPA_E_ARG, OK_, "out", f.to.data = f.k);
    V("out == value", 0, SDPA_E_ARG, OK_, "out", f.to.data = f.v);
    V("out overlaps the end of key", 0, SDPA_E_ARG, OK_, "out", {
        free(f.extra);
        size_t nk = (size_t)FB * FSKV * FHKV * FD;
        f.extra = tu_malloc((nk + nq) * 4);
        fill_pattern(f.extra, (nk + nq) * 4, 3);
        memcpy(f.extra, f.k, nk * 4);
        f.tk.data = f.extra;
        f.to.data = f.extra + nk - 1;
        track(&f.tr, f.extra, (nk + nq) * 4, "key+out region");
    });
    V("out overlaps the start of value", 0, SDPA_E_ARG, OK_, "out", {
        free(f.extra);
        size_t nv = (size_t)FB * FSKV * FHKV * FD;
        f.extra = tu_malloc((nv + nq) * 4);
        fill_pattern(f.extra, (nv + nq) * 4, 4);
        f.to.data = f.extra;
        f.tv.data = f.extra + nq - 1;
        track(&f.tr, f.extra, (nv + nq) * 4, "out+value region");
    });
    V("out overlaps the float mask", 1, SDPA_E_ARG, OK_, "out|mask", {
        free(f.extra);
        size_t nm = (size_t)FSQ * FN;
        f.extra = tu_malloc((nm + nq) * 4);
        fill_pattern(f.extra, (nm + nq) * 4, 5);
        f.tm.data = f.extra;
        f.to.data = f.extra + 2;
        track(&f.tr, f.extra, (nm + nq) * 4, "mask+out region");
    });
    V("out overlaps the bool mask", 2, SDPA_E_ARG, OK_, "out|mask", {
        free(f.extra);
        size_t nm = (size_t)FSQ * FN;
        f.extra = tu_malloc(nm + nq * 4);
        fill_pattern(f.extra, nm + nq * 4, 6);
        f.tm.data = f.extra;
        f.to.data = (float *)(void *)((unsigned char *)f.extra + 4);
        track(&f.tr, f.extra, nm + nq * 4, "mask+out region");
    });

    /* E_RANK */
    V("query rank 3", 0, SDPA_E_RANK, OK_, "query", f.tq.rank = 3; f.tq.len = FB * FSQ * FHQ);
    V("query rank 5", 0, SDPA_E_RANK, OK_, "query", f.tq.rank = 5);
    V("query rank 0", 0, SDPA_E_RANK, OK_, "query", f.tq.rank = 0; f.tq.len = 1);
    V("query rank -1", 0, SDPA_E_RANK, OK_, "query", f.tq.rank = -1);
    V("key rank 3", 0, SDPA_E_RANK, OK_, "key", f.tk.rank = 3);
    V("value rank 2", 0, SDPA_E_RANK, OK_, "value", f.tv.rank = 2);
    V("value rank 1000000", 0, SDPA_E_RANK, OK_, "value", f.tv.rank = 1000000);
    V("out rank 3", 0, SDPA_E_RANK, SDPA_E_DIMS, "out", f.to.rank = 3);
    V("float mask rank 1", 1, SDPA_E_RANK, OK_, "mask", f.tm.rank = 1; f.tm.dims[0] = FSQ * FN);
    V("float mask rank 3", 1, SDPA_E_RANK, OK_, "mask", f.tm.rank = 3; f.tm.dims[2] = 1);
    V("bool mask rank 4", 2, SDPA_E_RANK, OK_, "mask", f.tm.rank = 4; f.tm.dims[2] = 1; f.tm.dims[3] = 1);

    /* E_DIMS: non-positive dims, len != product, out dims */
    V("query Sq = 0", 0, SDPA_E_DIMS, OK_, "query", f.tq.dims[1] = 0; f.tq.len = 0);
    V("query B = 0", 0, SDPA_E_DIMS, OK_, "query", f.tq.dims[0] = 0; f.tq.len = 0);
    V("query D = 0 (k, v too)", 0, SDPA_E_DIMS, OK_, "query", f.tq.dims[3] = 0; f.tq.len = 0;
      f.tk.dims[3] = 0; f.tk.len = 0; f.tv.dims[3] = 0; f.tv.len = 0);
    V("query Sq = -1", 0, SDPA_E_DIMS, OK_, "query", f.tq.dims[1] = -1);
    V("key Skv = 0 (value too)", 0, SDPA_E_DIMS, OK_, "key", f.tk.dims[1] = 0; f.tk.len = 0;
      f.tv.dims[1] = 0; f.tv.len = 0);
    V("key Skv = INT32_MIN", 0, SDPA_E_DIMS, OK_, "key", f.tk.dims[1] = INT32_MIN);
    V("query len = product - 1", 0, SDPA_E_DIMS, OK_, "query", fx_resize(&f, &f.tq, nq - 1, "query(short)"));
    V("query len = product + 1", 0, SDPA_E_DIMS, OK_, "query", fx_resize(&f, &f.tq, nq + 1, "query(long)"));
    V("key len = product - 1", 0, SDPA_E_DIMS, OK_, "key", fx_resize(&f, &f.tk, nkv - 1, "key(short)"));
    V("value len = 1", 0, SDPA_E_DIMS, OK_, "value", fx_resize(&f, &f.tv, 1, "value(short)"));
    V("out len = product - 1", 0, SDPA_E_DIMS, OK_, "out", fx_resize(&f, &f.to, nq - 1, "out(short)"));
    V("float mask len = product - 1", 1, SDPA_E_DIMS, OK_, "mask",
      fx_resize(&f, &f.tm, (size_t)FSQ * FN - 1, "mask(short)"));
    V("bool mask len = product + 5", 2, SDPA_E_DIMS, OK_, "mask",
      fx_resize(&f, &f.tm, (size_t)FSQ * FN + 5, "mask(long)"));
    V("query dims 65536^4 (product wraps to 0 in 64 bits), len 0", 0, SDPA_E_DIMS, OK_, "query",
      f.tq.dims[0] = 65536; f.tq.dims[1] = 65536; f.tq.dims[2] = 65536; f.tq.dims[3] = 65536; f.tq.len = 0);
    V("key dims 65536^4, len 0", 0, SDPA_E_DIMS, OK_, "key",
      f.tk.dims[0] = 65536; f.tk.dims[1] = 65536; f.tk.dims[2] = 65536; f.tk.dims[3] = 65536; f.tk.len = 0);
    V("query dims INT32_MAX^4, len 1", 0, SDPA_E_DIMS, OK_, "query",
      f.tq.dims[0] = INT32_MAX; f.tq.dims[1] = INT32_MAX; f.tq.dims[2] = INT32_MAX; f.tq.dims[3] = INT32_MAX;
      fx_resize(&f, &f.tq, 1, "query(tiny)"));
    V("query dims 2^16 x 2^16 x 1 x 1 (product 2^32, len 0)", 0, SDPA_E_DIMS, OK_, "query",
      f.tq.dims[0] = 65536; f.tq.dims[1] = 65536; f.tq.dims[2] = 1; f.tq.dims[3] = 1; f.tq.len = 0);
    V("out Sq + 1", 0, SDPA_E_DIMS, OK_, "out", f.to.dims[1] = FSQ + 1; fx_resize(&f, &f.to, nq / FSQ * (FSQ + 1), "out(big)"));
    V("out D - 1", 0, SDPA_E_DIMS, OK_, "out", f.to.dims[3] = FD - 1; fx_resize(&f, &f.to, nq / FD * (FD - 1), "out(small)"));
    V("out heads = Hkv (not Hq)", 0, SDPA_E_DIMS, OK_, "out", f.to.dims[2] = FHKV; fx_resize(&f, &f.to, nq / FHQ * FHKV, "out(small)"));
    V("out batch 1", 0, SDPA_E_DIMS, SDPA_E_BATCH, "out", f.to.dims[0] = 1; fx_resize(&f, &f.to, nq / FB, "out(small)"));
    V("mask cols 0", 1, SDPA_E_DIMS, SDPA_E_MASK_SHAPE, "mask", f.tm.dims[1] = 0; f.tm.len = 0);
    V("mask rows -3", 1, SDPA_E_DIMS, SDPA_E_MASK_SHAPE, "mask", f.tm.dims[0] = -3; f.tm.dims[1] = -FN);

    /* E_DTYPE */
    V("query dtype float16", 0, SDPA_E_DTYPE, OK_, "query|dtype", f.tq.dtype = SDPA_DTYPE_FLOAT16);
    V("query dtype bool", 0, SDPA_E_DTYPE, OK_, "query|dtype", f.tq.dtype = SDPA_DTYPE_BOOL);
    V("query dtype 0", 0, SDPA_E_DTYPE, OK_, "query|dtype", f.tq.dtype = 0);
    V("key dtype 99", 0, SDPA_E_DTYPE, OK_, "key|dtype", f.tk.dtype = 99);
    V("value dtype float16", 0, SDPA_E_DTYPE, OK_, "value|dtype", f.tv.dtype = SDPA_DTYPE_FLOAT16);
    V("out dtype bool", 0, SDPA_E_DTYPE, OK_, "out|dtype", f.to.dtype = SDPA_DTYPE_BOOL);
    V("out dtype -1", 0, SDPA_E_DTYPE, OK_, "out|dtype", f.to.dtype = -1);

    /* E_BATCH */
    V("key batch 1", 0, SDPA_E_BATCH, OK_, "key|batch", f.tk.dims[0] = 1; f.tk.len = nkv / FB);
    V("value batch 1", 0, SDPA_E_BATCH, OK_, "value|batch", f.tv.dims[0] = 1; f.tv.len = nkv / FB);
    V("key and value batch 1", 0, SDPA_E_BATCH, OK_, "key|value|batch", f.tk.dims[0] = 1; f.tk.len = nkv / FB;
      f.tv.dims[0] = 1; f.tv.len = nkv / FB);

    /* E_HEADS */
    V("Hkv 3 does not divide Hq 4", 0, SDPA_E_HEADS, OK_, "head",
      fx_resize(&f, &f.tk, (size_t)FB * FSKV * 3 * FD, "key(3 heads)"); f.tk.dims[2] = 3;
      f.tv.dims[2] = 3; f.tv.data = f.extra; f.tv.len = f.tk.len);
    V("Hkv 8 > Hq 4", 0, SDPA_E_HEADS, OK_, "head",
      fx_resize(&f, &f.tk, (size_t)FB * FSKV * 8 * FD, "key(8 heads)"); f.tk.dims[2] = 8;
      f.tv.dims[2] = 8; f.tv.data = f.extra; f.tv.len = f.tk.len);
    V("key heads 2, value heads 1", 0, SDPA_E_HEADS, OK_, "head|value",
      f.tv.dims[2] = 1; f.tv.len = nkv / 2);
    V("query heads 0", 0, SDPA_E_HEADS, OK_, "head", f.tq.dims[2] = 0; f.tq.len = 0; f.to.dims[2] = 0; f.to.len = 0);
    V("key and value heads 0", 0, SDPA_E_HEADS, OK_, "head", f.tk.dims[2] = 0; f.tk.len = 0; f.tv.dims[2] = 0;
      f.tv.len = 0);

    /* E_HEAD_DIM */
    V("key D 4, value D 5", 0, SDPA_E_HEAD_DIM, OK_, "head|dim|key", f.tk.dims[3] = 4; f.tk.len = nkv / 5 * 4);
    V("value D 4", 0, SDPA_E_HEAD_DIM, OK_, "head|dim|value", f.tv.dims[3] = 4; f.tv.len = nkv / 5 * 4);
    V("key and value D 4, query 5", 0, SDPA_E_HEAD_DIM, OK_, "head|dim", f.tk.dims[3] = 4; f.tk.len = nkv / 5 * 4;
      f.tv.dims[3] = 4; f.tv.len = nkv / 5 * 4);

    /* E_KV_LEN */
    V("value Skv 4 vs key 8", 0, SDPA_E_KV_LEN, OK_, "value|key|length|len", f.tv.dims[1] = 4; f.tv.len = nkv / 2);
    V("key Skv 4 vs value 8 (mask)", 1, SDPA_E_KV_LEN, OK_, "value|key|length|len", f.tk.dims[1] = 4;
      f.tk.len = nkv / 2; f.tm.dims[1] = 4; f.tm.len = FSQ * 4);

    /* E_START_POS */
    V("start_pos -1", 0, SDPA_E_START_POS, OK_, "start", f.opt.start_pos = -1);
    V("start_pos INT64_MIN", 0, SDPA_E_START_POS, OK_, "start", f.opt.start_pos = INT64_MIN);
    V("start_pos -1 with a mask", 1, SDPA_E_START_POS, OK_, "start", f.opt.start_pos = -1);
    V("start_pos + Sq = Skv + 1", 0, SDPA_E_START_POS, OK_, "start", f.opt.start_pos = FSKV - FSQ + 1);
    V("start_pos + Sq > Skv, causal", 0, SDPA_E_START_POS, OK_, "start", f.opt.start_pos = FSKV;
      f.opt.is_causal = 1);
    V("start_pos INT64_MAX (sp + Sq overflows)", 0, SDPA_E_START_POS, OK_, "start", f.opt.start_pos = INT64_MAX);
    V("start_pos 2^32 + 1 (truncates to 1 in 32 bits)", 0, SDPA_E_START_POS, OK_, "start",
      f.opt.start_pos = (INT64_C(1) << 32) + 1);
    V("start_pos 2^31 (negative in 32 bits)", 0, SDPA_E_START_POS, OK_, "start", f.opt.start_pos = INT64_C(1) << 31);
    V("Sq > Skv without a mask", 0, SDPA_E_START_POS, OK_, "start", {
        /* query and out [B, 9, Hq, D] over Skv 8, start_pos 0 */
        free(f.extra);
        size_t n9 = (size_t)FB * 9 * FHQ * FD;
        f.extra = tu_malloc(n9 * 2 * 4);
        fill_pattern(f.extra, n9 * 2 * 4, 8);
        f.opt.start_pos = 0;
        f.tq = tu_tensor4(f.extra, SDPA_DTYPE_FLOAT32, FB, 9, FHQ, FD);
        f.to = tu_tensor4(f.extra + n9, SDPA_DTYPE_FLOAT32, FB, 9, FHQ, FD);
        track(&f.tr, f.extra, n9 * 2 * 4, "query+out (Sq 9)");
    });

    /* E_MASK_DTYPE */
    V("mask dtype float16", 1, SDPA_E_MASK_DTYPE, OK_, "mask", f.tm.dtype = SDPA_DTYPE_FLOAT16);
    V("mask dtype 0", 1, SDPA_E_MASK_DTYPE, OK_, "mask", f.tm.dtype = 0);
    V("mask dtype 77", 2, SDPA_E_MASK_DTYPE, OK_, "mask", f.tm.dtype = 77);

    /* E_MASK_SHAPE */
    V("mask rows Sq + 1", 1, SDPA_E_MASK_SHAPE, OK_, "mask", fx_resize(&f, &f.tm, (size_t)(FSQ + 1) * FN, "mask");
      f.tm.dims[0] = FSQ + 1);
    V("mask rows 1 (no broadcasting)", 1, SDPA_E_MASK_SHAPE, OK_, "mask", f.tm.dims[0] = 1; f.tm.len = FN);
    V("mask cols Skv + 1", 1, SDPA_E_MASK_SHAPE, OK_, "mask", fx_resize(&f, &f.tm, (size_t)FSQ * (FSKV + 1), "mask");
      f.tm.dims[1] = FSKV + 1);
    V("bool mask cols Skv + 1", 2, SDPA_E_MASK_SHAPE, OK_, "mask",
      fx_resize(&f, &f.tm, (size_t)FSQ * (FSKV + 1), "mask"); f.tm.dims[1] = FSKV + 1);
    V("mask [Sq*N, 1]", 1, SDPA_E_MASK_SHAPE, OK_, "mask", f.tm.dims[0] = FSQ * FN; f.tm.dims[1] = 1);

    /* E_MASK_CAUSAL */
    V("float mask with is_causal", 1, SDPA_E_MASK_CAUSAL, OK_, "causal|mask", f.opt.is_causal = 1);
    V("bool mask with is_causal", 2, SDPA_E_MASK_CAUSAL, OK_, "causal|mask", f.opt.is_causal = 1);

    /* E_DROPOUT */
    V("dropout 0.1", 0, SDPA_E_DROPOUT, OK_, "dropout", f.opt.dropout_p = 0.1f);
    V("dropout 1", 0, SDPA_E_DROPOUT, OK_, "dropout", f.opt.dropout_p = 1.0f);
    V("dropout -0.5", 0, SDPA_E_DROPOUT, OK_, "dropout", f.opt.dropout_p = -0.5f);
    V("dropout NaN", 0, SDPA_E_DROPOUT, OK_, "dropout", f.opt.dropout_p = NAN);
    V("dropout denormal", 0, SDPA_E_DROPOUT, OK_, "dropout", f.opt.dropout_p = 1e-45f);

    /* E_SCALE */
    V("scale NaN", 0, SDPA_E_SCALE, OK_, "scale", f.opt.has_scale = 1; f.opt.scale = NAN);
    V("scale +inf", 0, SDPA_E_SCALE, OK_, "scale", f.opt.has_scale = 1; f.opt.scale = INFINITY);
    V("scale -inf", 0, SDPA_E_SCALE, OK_, "scale", f.opt.has_scale = 1; f.opt.scale = -INFINITY);
    V("scale 0", 0, SDPA_E_SCALE, OK_, "scale", f.opt.has_scale = 1; f.opt.scale = 0.0f);
    V("scale -0", 0, SDPA_E_SCALE, OK_, "scale", f.opt.has_scale = 1; f.opt.scale = -0.0f);
    V("scale -1", 0, SDPA_E_SCALE, OK_, "scale", f.opt.has_scale = 1; f.opt.scale = -1.0f);
    V("scale -FLT_MIN", 1, SDPA_E_SCALE, OK_, "scale", f.opt.has_scale = 1; f.opt.scale = -FLT_MIN);

    /* first rule in table order wins */
    V("order: query NULL + scale NaN", 0, SDPA_E_ARG, OK_, "query", f.pq = NULL; f.opt.has_scale = 1;
      f.opt.scale = NAN);
    V("order: out aliases query + query rank 3", 0, SDPA_E_ARG, OK_, "out", f.to.data = f.q; f.tq.rank = 3);
    V("order: rank (key 3) + dims (query len)", 0, SDPA_E_RANK, OK_, "key", f.tk.rank = 3; f.tq.len = 1);
    V("order: dims (value len) + dtype (key)", 0, SDPA_E_DIMS, OK_, "value", f.tv.len = 1; f.tk.dtype = 99);
    V("order: dims (out D) + batch (key)", 0, SDPA_E_DIMS, OK_, "out", f.to.dims[3] = 1;
      f.to.len = nq / FD; f.tk.dims[0] = 1; f.tk.len = nkv / FB);
    V("order: dtype (value) + batch (key)", 0, SDPA_E_DTYPE, OK_, "value|dtype", f.tv.dtype = 3;
      f.tk.dims[0] = 1; f.tk.len = nkv / FB);
    V("order: batch (value) + heads (key 3)", 0, SDPA_E_BATCH, OK_, "value|batch", f.tv.dims[0] = 1;
      f.tv.len = nkv / FB; f.tk.dims[2] = 1; f.tk.len = nkv / 2);
    V("order: heads (k 1 != v 2) + head dim (v)", 0, SDPA_E_HEADS, OK_, "head", f.tk.dims[2] = 1;
      f.tk.len = nkv / 2; f.tv.dims[3] = 1; f.tv.len = nkv / 5);
    V("order: head dim (k) + kv len (v)", 0, SDPA_E_HEAD_DIM, OK_, "head|dim", f.tk.dims[3] = 1;
      f.tk.len = nkv / 5; f.tv.dims[1] = 4; f.tv.len = nkv / 2);
    V("order: kv len + start_pos -1", 0, SDPA_E_KV_LEN, OK_, "value|key|len", f.tv.dims[1] = 4;
      f.tv.len = nkv / 2; f.opt.start_pos = -1);
    V("order: start_pos -1 + mask dtype", 1, SDPA_E_START_POS, OK_, "start", f.opt.start_pos = -1;
      f.tm.dtype = 0);
    V("order: start_pos > Skv + mask causal? (no mask) + dropout", 0, SDPA_E_START_POS, OK_, "start",
      f.opt.start_pos = 100; f.opt.dropout_p = 0.5f);
    V("order: mask dtype + mask shape", 1, SDPA_E_MASK_DTYPE, OK_, "mask", f.tm.dtype = 9; f.tm.dims[0] = 1;
      f.tm.len = FN);
    V("order: mask shape + causal", 1, SDPA_E_MASK_SHAPE, OK_, "mask", f.tm.dims[0] = 1; f.tm.len = FN;
      f.opt.is_causal = 1);
    V("order: mask causal + dropout", 2, SDPA_E_MASK_CAUSAL, OK_, "causal|mask", f.opt.is_causal = 1;
      f.opt.dropout_p = 0.5f);
    V("order: dropout + scale", 0, SDPA_E_DROPOUT, OK_, "dropout", f.opt.dropout_p = 0.5f; f.opt.has_scale = 1;
      f.opt.scale = -1.0f);
    V("order: everything broken", 1, SDPA_E_ARG, OK_, "value", f.tv.data = NULL; f.tq.rank = 7; f.tk.dtype = 0;
      f.opt.start_pos = -5; f.opt.dropout_p = NAN; f.opt.has_scale = 1; f.opt.scale = 0; f.opt.is_causal = 1);

    /* NULL context: E_ARG, nothing touched */
    {
        fx f;
        fx_init(&f, 0);
        snapshot(&f.tr);
        sdpa_status st = sdpa_custom(NULL, f.pq, f.pk, f.pv, f.pm, f.popt, f.po);
        verify(NULL, &f.tr, "sdpa_custom: ctx NULL", st, SDPA_E_ARG, OK_, "");
        st = sdpa_custom_reference(NULL, f.pq, f.pk, f.pv, f.pm, f.popt, f.po);
        verify(NULL, &f.tr, "sdpa_custom_reference: ctx NULL", st, SDPA_E_ARG, OK_, "");
        fx_free(&f);
    }

    /* Things that are NOT errors */
    V("scale given but has_scale 0 (ignored)", 0, SDPA_OK, OK_, "", f.opt.scale = NAN; f.tr.n = 3);
    V("mask: startPos far beyond Skv (ignored)", 1, SDPA_OK, OK_, "", f.opt.start_pos = INT64_C(1) << 40; f.tr.n = 3);
    V("mask: Sq > Skv", 1, SDPA_OK, OK_, "", {
        /* query Sq 9 > Skv 8 is fine with a [9, N] mask */
        free(f.extra);
        f.extra = tu_malloc((size_t)FB * 9 * FHQ * FD * 4 * 2 + (size_t)9 * FN * 4);
        float * q9 = f.extra;
        float * o9 = q9 + (size_t)FB * 9 * FHQ * FD;
        float * m9 = o9 + (size_t)FB * 9 * FHQ * FD;
        for (size_t i = 0; i < (size_t)FB * 9 * FHQ * FD; i++) q9[i] = 0.25f;
        for (size_t i = 0; i < (size_t)9 * FN; i++) m9[i] = 0.0f;
        f.tq = tu_tensor4(q9, SDPA_DTYPE_FLOAT32, FB, 9, FHQ, FD);
        f.to = tu_tensor4(o9, SDPA_DTYPE_FLOAT32, FB, 9, FHQ, FD);
        f.tm = tu_tensor2(m9, SDPA_DTYPE_FLOAT32, 9, FN);
        f.tr.n = 0; /* output is written on success: nothing to compare */
    });
    V("dropout -0.0 equals 0", 0, SDPA_OK, OK_, "", f.opt.dropout_p = -0.0f; f.tr.n = 3);
    V("smallest positive scale", 0, SDPA_OK, OK_, "", f.opt.has_scale = 1; f.opt.scale = 1e-45f; f.tr.n = 3);
    V("largest finite scale", 0, SDPA_OK, OK_, "", f.opt.has_scale = 1; f.opt.scale = FLT_MAX; f.tr.n = 3);
    V("start_pos + Sq == Skv exactly", 0, SDPA_OK, OK_, "", f.opt.start_pos = FSKV - FSQ; f.tr.n = 3);
    V("mask N == Skv", 1, SDPA_OK, OK_, "", fx_resize(&f, &f.tm, (size_t)FSQ * FSKV, "mask");
      memset(f.extra, 0, (size_t)FSQ * FSKV * 4); f.tm.dims[1] = FSKV; f.tr.n = 3);
    V("MQA: key/value heads 1", 0, SDPA_OK, OK_, "", f.tk.dims[2] = 1; f.tk.len = nkv / 2; f.tv.dims[2] = 1;
      f.tv.len = nkv / 2; f.tr.n = 3);
}

/* ---- KV cache ---------------------------------------------------------- */

enum { CB = 2, CMAX = 16, CHKV = 2, CD = 5, CHQ = 4, CFILL = 10 };

typedef struct cx {
    sdpa_kv_cache * cache;
    float * q, * k, * v, * out, * mask, * kout, * vout, * extra;
    sdpa_tensor tq, tk, tv, tm, to, tko, tvo;
    sdpa_options opt;
    const sdpa_tensor * pq, * pk, * pv, * pm;
    const sdpa_options * popt;
    sdpa_tensor * po, * pko, * pvo;
    int32_t read_start, read_len, upd_pos;
    tracker tr;
} cx;

/* A cache with rows 0..CFILL-1 written; a step of S rows at start_pos CFILL. */
static int cx_init(cx * c, int S, int with_mask) {
    memset(c, 0, sizeof *c);
    tu_rng rng;
    tu_rng_seed(&rng, 99);
    sdpa_status st = sdpa_kv_cache_create(g_ctx, CB, CMAX, CHKV, CD, SDPA_DTYPE_FLOAT32, &c->cache);
    if (!TU_CHECK(st == SDPA_OK && c->cache, "cache create: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(g_ctx)))
        return 0;
    /* fill all of it (also rows past CFILL) so that any write shows */
    size_t nfill = (size_t)CB * CMAX * CHKV * CD;
    float * kf = tu_malloc(nfill * 4), * vf = tu_malloc(nfill * 4);
    fill_random(kf, nfill, &rng);
    fill_random(vf, nfill, &rng);
    sdpa_tensor a = tu_tensor4(kf, SDPA_DTYPE_FLOAT32, CB, CMAX, CHKV, CD);
    sdpa_tensor b = tu_tensor4(vf, SDPA_DTYPE_FLOAT32, CB, CMAX, CHKV, CD);
    st = sdpa_kv_cache_update(g_ctx, c->cache, &a, &b, 0);
    TU_CHECK(st == SDPA_OK, "cache fill: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(g_ctx));
    free(kf);
    free(vf);

    size_t nq = (size_t)CB * S * CHQ * CD, nkv = (size_t)CB * S * CHKV * CD;
    c->q = tu_malloc(nq * 4);
    c->out = tu_malloc(nq * 4);
    c->k = tu_malloc(nkv * 4);
    c->v = tu_malloc(nkv * 4);
    c->mask = tu_malloc((size_t)S * (CFILL + S) * 4);
    size_t nr = (size_t)CB * 3 * CHKV * CD;
    c->kout = tu_malloc(nr * 4);
    c->vout = tu_malloc(nr * 4);
    fill_random(c->q, nq, &rng);
    fill_random(c->k, nkv, &rng);
    fill_random(c->v, nkv, &rng);
    for (size_t i = 0; i < (size_t)S * (CFILL + S); i++) c->mask[i] = 0.0f;
    fill_pattern(c->out, nq * 4, 11);
    fill_pattern(c->kout, nr * 4, 12);
    fill_pattern(c->vout, nr * 4, 13);
    c->tq = tu_tensor4(c->q, SDPA_DTYPE_FLOAT32, CB, S, CHQ, CD);
    c->to = tu_tensor4(c->out, SDPA_DTYPE_FLOAT32, CB, S, CHQ, CD);
    c->tk = tu_tensor4(c->k, SDPA_DTYPE_FLOAT32, CB, S, CHKV, CD);
    c->tv = tu_tensor4(c->v, SDPA_DTYPE_FLOAT32, CB, S, CHKV, CD);
    c->tm = tu_tensor2(c->mask, SDPA_DTYPE_FLOAT32, S, CFILL + S);
    c->tko = tu_tensor4(c->kout, SDPA_DTYPE_FLOAT32, CB, 3, CHKV, CD);
    c->tvo = tu_tensor4(c->vout, SDPA_DTYPE_FLOAT32, CB, 3, CHKV, CD);
    c->opt.start_pos = CFILL;
    c->opt.is_causal = with_mask ? 0 : 1;
    c->pq = &c->tq;
    c->pk = &c->tk;
    c->pv = &c->tv;
    c->pm = with_mask ? &c->tm : NULL;
    c->popt = &c->opt;
    c->po = &c->to;
    c->pko = &c->tko;
    c->pvo = &c->tvo;
    c->read_start = 4;
    c->read_len = 3;
    c->upd_pos = CFILL;
    /* every page of the (full) cache: its K block and V block, contiguous */
    for (int32_t b = 0; b < CB; b++)
        for (int32_t h = 0; h < CHKV; h++)
            track(&c->tr, (void *)(uintptr_t)sdpa_kv_cache_page(c->cache, b, h, 0, 0),
                  (size_t)2 * SDPA_PAGE_ROWS * CD * 4, "cache page");
    track(&c->tr, c->q, nq * 4, "query");
    track(&c->tr, c->out, nq * 4, "out");
    track(&c->tr, c->k, nkv * 4, "key");
    track(&c->tr, c->v, nkv * 4, "value");
    track(&c->tr, c->kout, nr * 4, "key_out");
    track(&c->tr, c->vout, nr * 4, "value_out");
    track(&c->tr, c->mask, (size_t)S * (CFILL + S) * 4, "mask");
    return 1;
}

static void cx_free(cx * c) {
    sdpa_kv_cache_free(c->cache);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->out);
    free(c->mask);
    free(c->kout);
    free(c->vout);
    free(c->extra);
    tracker_free(&c->tr);
}

enum { OP_UPDATE = 1, OP_ATTEND = 2, OP_STEP = 4, OP_READ = 8 };
static const char * op_name(int op) {
    return op == OP_UPDATE ? "update" : op == OP_ATTEND ? "attend" : op == OP_STEP ? "step" : "read";
}

static void cx_expect(cx * c, int ops, const char * desc, sdpa_status want, sdpa_status alt, const char * kw) {
    for (int op = 1; op <= OP_READ; op <<= 1) {
        if (!(ops & op)) continue;
        char d2[200];
        snprintf(d2, sizeof d2, "kv_cache_%s: %s", op_name(op), desc);
        snapshot(&c->tr);
        if (want == SDPA_OK) tu_dirty_error(g_ctx);  /* as in fx_expect */
        sdpa_status st = SDPA_OK;
        switch (op) {
        case OP_UPDATE: st = sdpa_kv_cache_update(g_ctx, c->cache, c->pk, c->pv, c->upd_pos); break;
        case OP_ATTEND: st = sdpa_kv_cache_attend(g_ctx, c->cache, c->pq, c->pm, c->popt, c->po); break;
        case OP_STEP: st = sdpa_kv_cache_step(g_ctx, c->cache, c->pq, c->pk, c->pv, c->pm, c->popt, c->po); break;
        default: st = sdpa_kv_cache_read(g_ctx, c->cache, c->read_start, c->read_len, c->pko, c->pvo); break;
        }
        verify(g_ctx, &c->tr, d2, st, want, alt, kw);
    }
}

#define C(ops, desc, S, mk, want, alt, kw, ...) \
    do {                                        \
        cx c;                                   \
        if (cx_init(&c, S, mk)) {               \
            __VA_ARGS__;                        \
            cx_expect(&c, ops, desc, want, alt, kw); \
        }                                       \
        cx_free(&c);                            \
    } while (0)

static void test_cache_create(void) {
    struct {
        const char * desc;
        int32_t b, s, h, d, dt;
        sdpa_status want, alt;
        const char * kw;
    } cases[] = {
        {"batch 0", 0, 16, 2, 5, 1, SDPA_E_DIMS, OK_, "batch"},
        {"batch -1", -1, 16, 2, 5, 1, SDPA_E_DIMS, OK_, "batch"},
        {"max_seq_len 0", 1, 0, 2, 5, 1, SDPA_E_DIMS, OK_, "seq|len"},
        {"max_seq_len INT32_MIN", 1, INT32_MIN, 2, 5, 1, SDPA_E_DIMS, OK_, "seq|len"},
        {"head_dim 0", 1, 16, 2, 0, 1, SDPA_E_DIMS, OK_, "dim"},
        {"kv_heads 0", 1, 16, 0, 5, 1, SDPA_E_HEADS, OK_, "head"},
        {"kv_heads -2", 1, 16, -2, 5, 1, SDPA_E_DIMS, SDPA_E_HEADS, "head"},
        {"dtype 6 (not a cache dtype)", 1, 16, 2, 5, 6, SDPA_E_DTYPE, OK_, "dtype|type"},
        {"dtype bool", 1, 16, 2, 5, SDPA_DTYPE_BOOL, SDPA_E_DTYPE, OK_, "dtype|type"},
        {"dtype 0", 1, 16, 2, 5, 0, SDPA_E_DTYPE, OK_, "dtype|type"},
        {"order: batch 0 + dtype 0", 0, 16, 2, 5, 0, SDPA_E_DIMS, OK_, "batch"},
        {"order: dtype 0 + kv_heads 0", 1, 16, 0, 5, 0, SDPA_E_DTYPE, OK_, "dtype|type"},
        {"a page of 2 x 64 x 2^23 floats (> 2 GiB)", 1, 64, 1, 1 << 23, 1, SDPA_E_OOM, OK_, "cache|memory|bytes|alloc|large|big|page"},
        {"INT32_MAX^4 floats: maxSeqLen past the key index", INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, 1, SDPA_E_DIMS, OK_,
         "maxSeqLen"},
        {"2^16 x 2^16 x 2^16 x 2^14 floats (x4 bytes wraps to 0)", 65536, 65536, 65536, 16384, 1, SDPA_E_OOM, OK_,
         "cache|memory|bytes|alloc|large|big"},
        {"2^62 bytes per tensor", 1 << 30, 1 << 30, 1, 1, 1, SDPA_E_OOM, OK_, "cache|memory|bytes|alloc|large|big"},
    };
    tracker none = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char d2[160];
        snprintf(d2, sizeof d2, "kv_cache_create: %s", cases[i].desc);
        sdpa_kv_cache * kc = NULL;
        sdpa_status st = sdpa_kv_cache_create(g_ctx, cases[i].b, cases[i].s, cases[i].h, cases[i].d, cases[i].dt, &kc);
        verify(g_ctx, &none, d2, st, cases[i].want, cases[i].alt, cases[i].kw);
        TU_CHECK(kc == NULL, "%s: *out_cache set on failure", d2);
        if (kc) sdpa_kv_cache_free(kc);
    }
    sdpa_status st = sdpa_kv_cache_create(g_ctx, 1, 4, 1, 4, SDPA_DTYPE_FLOAT32, NULL);
    verify(g_ctx, &none, "kv_cache_create: out_cache NULL", st, SDPA_E_ARG, OK_, "cache|out");
    sdpa_kv_cache * kc = NULL;
    st = sdpa_kv_cache_create(NULL, 1, 4, 1, 4, SDPA_DTYPE_FLOAT32, &kc);
    verify(NULL, &none, "kv_cache_create: ctx NULL", st, SDPA_E_ARG, OK_, "");
    TU_CHECK(kc == NULL, "kv_cache_create with ctx NULL set *out_cache");
    if (kc) sdpa_kv_cache_free(kc);

    /* a valid cache: zero-filled, shape reported */
    st = sdpa_kv_cache_create(g_ctx, 2, 7, 3, 5, SDPA_DTYPE_FLOAT32, &kc);
    if (TU_CHECK(st == SDPA_OK && kc, "kv_cache_create 2x7x3x5: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(g_ctx))) {
        TU_CHECK(sdpa_ctx_last_error(g_ctx)[0] == 0, "last_error not empty after cache create");
        int32_t b = 0, s = 0, h = 0, d = 0;
        sdpa_kv_cache_shape(kc, &b, &s, &h, &d);
        TU_CHECK(b == 2 && s == 7 && h == 3 && d == 5, "kv_cache_shape = %d %d %d %d", b, s, h, d);
        sdpa_kv_cache_shape(kc, NULL, NULL, NULL, NULL);
        float * kd = tu_cache_dense(kc, 0), * vd = tu_cache_dense(kc, 1);
        int zero = 1;
        for (size_t i = 0; zero && i < (size_t)2 * 7 * 3 * 5; i++) zero = kd[i] == 0.0f && vd[i] == 0.0f;
        TU_CHECK(zero, "new cache does not read as zeros");
        TU_CHECK(sdpa_kv_cache_length(kc) == 0 && sdpa_kv_cache_pages(kc) == 0, "new cache: length %d, pages %d",
                 sdpa_kv_cache_length(kc), sdpa_kv_cache_pages(kc));
        free(kd);
        free(vd);
        sdpa_kv_cache_free(kc);
    }
    sdpa_kv_cache_free(NULL);
}

static void test_cache_rules(void) {
    const int S = 2;
    const size_t nkv = (size_t)CB * S * CHKV * CD;
    const int UPD = OP_UPDATE | OP_STEP, ATT = OP_ATTEND | OP_STEP, ALL3 = OP_UPDATE | OP_ATTEND | OP_STEP;

    /* baseline valid for every op (update, attend, step, read in this order),
       with and without a mask; the calls write, so no buffer is compared */
    for (int mk = 0; mk < 2; mk++)
        C(ALL3 | OP_READ, mk ? "baseline (valid, mask)" : "baseline (valid, causal)", S, mk, SDPA_OK, OK_, "",
          c.tr.n = 0);

    /* E_ARG */
    C(ALL3 | OP_READ, "cache NULL", S, 0, SDPA_E_ARG, OK_, "cache", {
        sdpa_kv_cache_free(c.cache);
        c.cache = NULL;
        /* the first two tracked buffers were the cache storage */
        memmove(&c.tr.t[0], &c.tr.t[2], (size_t)(c.tr.n - 2) * sizeof(tracked));
        c.tr.n -= 2;
    });
    C(UPD, "key NULL", S, 0, SDPA_E_ARG, OK_, "key", c.pk = NULL);
    C(UPD, "value NULL", S, 0, SDPA_E_ARG, OK_, "value", c.pv = NULL);
    C(UPD, "key data NULL", S, 0, SDPA_E_ARG, OK_, "key", c.tk.data = NULL);
    C(ATT, "query NULL", S, 0, SDPA_E_ARG, OK_, "query", c.pq = NULL);
    C(ATT, "out NULL", S, 0, SDPA_E_ARG, OK_, "out", c.po = NULL);
    C(ATT, "out data NULL", S, 1, SDPA_E_ARG, OK_, "out", c.to.data = NULL);
    C(ATT, "out == query", S, 0, SDPA_E_ARG, OK_, "out", c.to.data = c.q);
    C(OP_STEP, "out == key", S, 0, SDPA_E_ARG, SDPA_E_DIMS, "out", {
        /* key is smaller than out: give key a buffer as large as out */
        free(c.extra);
        size_t n = (size_t)CB * S * CHQ * CD;
        c.extra = tu_malloc(n * 4);
        fill_random(c.extra, n, &(tu_rng){7});
        c.tk.data = c.extra;
        c.to.data = c.extra;
        track(&c.tr, c.extra, n * 4, "key/out");
    });
    /* inputs / outputs inside the cache's own storage (its pages,
       sdpa_kv_cache_page): E_ARG, nothing written (the pages are tracked).
       A page's K or V block holds SDPA_PAGE_ROWS * CD = 320 floats; key/value
       are 40, query/out 80. */
#define KDATA(c_) ((float *)(uintptr_t)sdpa_kv_cache_page((c_).cache, 0, 0, 0, 0))
#define VDATA(c_) ((float *)(uintptr_t)sdpa_kv_cache_page((c_).cache, 1, 1, 0, 1))
    C(UPD, "key = cache K storage", S, 0, SDPA_E_ARG, OK_, "storage|cache", c.tk.data = KDATA(c));
    C(UPD, "key inside cache K (offset 17 floats)", S, 0, SDPA_E_ARG, OK_, "storage|cache", c.tk.data = KDATA(c) + 17);
    C(UPD, "key = last 40 floats of cache V", S, 0, SDPA_E_ARG, OK_, "storage|cache", c.tk.data = VDATA(c) + 280);
    C(UPD, "value = cache K storage", S, 0, SDPA_E_ARG, OK_, "storage|cache", c.tv.data = KDATA(c));
    C(UPD, "value inside cache V (offset 3 floats)", S, 0, SDPA_E_ARG, OK_, "storage|cache", c.tv.data = VDATA(c) + 3);
    C(UPD, "value = cache V rows being written (start_pos row)", S, 0, SDPA_E_ARG, OK_, "storage|cache",
      c.tv.data = VDATA(c) + (size_t)CFILL * CD);
    C(UPD, "key and value both inside the cache", S, 1, SDPA_E_ARG, OK_, "storage|cache", c.tk.data = KDATA(c) + 40;
      c.tv.data = VDATA(c) + 40);
    C(ATT, "query = cache K storage", S, 0, SDPA_E_ARG, OK_, "storage|cache", c.tq.data = KDATA(c));
    C(ATT, "query = last 80 floats of cache V", S, 1, SDPA_E_ARG, OK_, "storage|cache", c.tq.data = VDATA(c) + 240);
    C(ATT, "out = cache V storage", S, 0, SDPA_E_ARG, OK_, "storage|cache|out", c.to.data = VDATA(c));
    C(ATT, "out inside cache K (offset 1 float)", S, 1, SDPA_E_ARG, OK_, "storage|cache|out", c.to.data = KDATA(c) + 1);
    C(OP_STEP, "step: query and out inside the cache, key and value too", S, 0, SDPA_E_ARG, OK_, "storage|cache",
      c.tq.data = KDATA(c); c.to.data = KDATA(c) + 80; c.tk.data = VDATA(c); c.tv.data = VDATA(c) + 40);
    C(UPD, "order: key inside cache + key rank 3", S, 0, SDPA_E_ARG, OK_, "storage|cache", c.tk.data = KDATA(c);
      c.tk.rank = 3);
    C(OP_STEP, "order: value inside cache + scale NaN", S, 0, SDPA_E_ARG, OK_, "storage|cache",
      c.tv.data = VDATA(c) + 8; c.opt.has_scale = 1; c.opt.scale = NAN);
    C(OP_STEP, "order: query inside cache + key dtype float16", S, 0, SDPA_E_ARG, OK_, "storage|cache",
      c.tq.data = VDATA(c) + 100; c.tk.dtype = SDPA_DTYPE_FLOAT16);
    C(OP_READ, "key_out inside cache K", S, 0, SDPA_E_ARG, OK_, "cache|storage|overlap", c.tko.data = KDATA(c) + 5);
    C(OP_READ, "value_out = cache V storage", S, 0, SDPA_E_ARG, OK_, "cache|storage|overlap", c.tvo.data = VDATA(c));
#undef KDATA
#undef VDATA
    C(OP_READ, "key_out NULL", S, 0, SDPA_E_ARG, OK_, "key", c.pko = NULL);
    C(OP_READ, "value_out data NULL", S, 0, SDPA_E_ARG, OK_, "value", c.tvo.data = NULL);
    C(OP_READ, "key_out == value_out", S, 0, SDPA_E_ARG, OK_, "out|key|value", c.tvo.data = c.kout);

    /* E_RANK */
    C(UPD, "key rank 3", S, 0, SDPA_E_RANK, OK_, "key", c.tk.rank = 3);
    C(ATT, "query rank 5", S, 0, SDPA_E_RANK, OK_, "query", c.tq.rank = 5);
    C(ATT, "mask rank 1", S, 1, SDPA_E_RANK, OK_, "mask", c.tm.rank = 1; c.tm.dims[0] = (int32_t)c.tm.len);
    C(OP_READ, "key_out rank 3", S, 0, SDPA_E_RANK, SDPA_E_DIMS, "key", c.tko.rank = 3);

    /* E_DIMS */
    C(UPD, "key Snew 0", S, 0, SDPA_E_DIMS, OK_, "key", c.tk.dims[1] = 0; c.tk.len = 0; c.tv.dims[1] = 0; c.tv.len = 0);
    C(UPD, "key len = product - 1", S, 0, SDPA_E_DIMS, OK_, "key", {
        free(c.extra);
        c.extra = tu_malloc((nkv - 1) * 4);
        fill_random(c.extra, nkv - 1, &(tu_rng){8});
        c.tk.data = c.extra;
        c.tk.len = nkv - 1;
    });
    C(UPD, "value len = product + 1", S, 0, SDPA_E_DIMS, OK_, "value", {
        free(c.extra);
        c.extra = tu_malloc((nkv + 1) * 4);
        fill_random(c.extra, nkv + 1, &(tu_rng){9});
        c.tv.data = c.extra;
        c.tv.len = nkv + 1;
    });
    C(UPD, "key dims 65536^4, len 0", S, 0, SDPA_E_DIMS, OK_, "key", c.tk.dims[0] = 65536; c.tk.dims[1] = 65536;
      c.tk.dims[2] = 65536; c.tk.dims[3] = 65536; c.tk.len = 0);
    C(ATT, "query Sq 0", S, 0, SDPA_E_DIMS, OK_, "query", c.tq.dims[1] = 0; c.tq.len = 0);
    C(ATT, "out D 4", S, 0, SDPA_E_DIMS, OK_, "out", c.to.dims[3] = 4; c.to.len = c.to.len / 5 * 4);
    C(OP_STEP, "query length 1, key length 2", S, 0, SDPA_E_DIMS, OK_, "query|key|length|len",
      c.tq.dims[1] = 1; c.tq.len /= 2; c.to.dims[1] = 1; c.to.len /= 2);
    C(OP_STEP, "query length 2, key length 1", S, 1, SDPA_E_DIMS, OK_, "query|key|length|len",
      c.tk.dims[1] = 1; c.tk.len /= 2; c.tv.dims[1] = 1; c.tv.len /= 2);
    C(OP_READ, "length 0", S, 0, SDPA_E_DIMS, OK_, "len", c.read_len = 0);
    C(OP_READ, "length -1", S, 0, SDPA_E_DIMS, OK_, "len", c.read_len = -1);
    C(OP_READ, "key_out dims [B, 2, H, D] for length 3", S, 0, SDPA_E_DIMS, OK_, "key|out", c.tko.dims[1] = 2;
      c.tko.len = (size_t)CB * 2 * CHKV * CD);
    C(OP_READ, "value_out len = product - 1", S, 0, SDPA_E_DIMS, OK_, "value|out", {
        free(c.extra);
        size_t n = (size_t)CB * 3 * CHKV * CD - 1;
        c.extra = tu_malloc(n * 4);
        fill_pattern(c.extra, n * 4, 21);
        c.tvo.data = c.extra;
        c.tvo.len = n;
        track(&c.tr, c.extra, n * 4, "value_out(short)");
    });
    C(OP_READ, "key_out heads 1", S, 0, SDPA_E_DIMS, SDPA_E_HEADS, "key|out|head", c.tko.dims[2] = 1;
      c.tko.len /= 2);

    /* E_DTYPE */
    C(UPD, "key dtype float16", S, 0, SDPA_E_DTYPE, OK_, "key|dtype", c.tk.dtype = SDPA_DTYPE_FLOAT16);
    C(UPD, "value dtype bool", S, 0, SDPA_E_DTYPE, OK_, "value|dtype", c.tv.dtype = SDPA_DTYPE_BOOL);
    C(ATT, "query dtype 0", S, 0, SDPA_E_DTYPE, OK_, "query|dtype", c.tq.dtype = 0);
    C(ATT, "out dtype float16", S, 0, SDPA_E_DTYPE, OK_, "out|dtype", c.to.dtype = SDPA_DTYPE_FLOAT16);
    C(OP_READ, "key_out dtype bool", S, 0, SDPA_E_DTYPE, OK_, "key|dtype", c.tko.dtype = SDPA_DTYPE_BOOL);

    /* E_BATCH */
    C(UPD, "key batch 1 (cache batch 2)", S, 0, SDPA_E_BATCH, SDPA_E_DIMS, "key|batch", c.tk.dims[0] = 1;
      c.tk.len /= 2; c.tv.dims[0] = 1; c.tv.len /= 2);
    C(ATT, "query batch 1 (cache batch 2)", S, 0, SDPA_E_BATCH, OK_, "query|batch|cache", c.tq.dims[0] = 1;
      c.tq.len /= 2; c.to.dims[0] = 1; c.to.len /= 2);
    C(OP_READ, "key_out batch 1", S, 0, SDPA_E_DIMS, SDPA_E_BATCH, "key|out|batch", c.tko.dims[0] = 1;
      c.tko.len /= 2);

    /* E_HEADS */
    C(UPD, "key heads 1 (cache 2)", S, 0, SDPA_E_HEADS, SDPA_E_DIMS, "head", c.tk.dims[2] = 1; c.tk.len /= 2;
      c.tv.dims[2] = 1; c.tv.len /= 2);
    C(UPD, "value heads 1, key heads 2", S, 0, SDPA_E_HEADS, SDPA_E_DIMS, "head|value", c.tv.dims[2] = 1;
      c.tv.len /= 2);
    C(ATT, "query heads 3 (not a multiple of 2)", S, 0, SDPA_E_HEADS, OK_, "head", c.tq.dims[2] = 3;
      c.tq.len = c.tq.len / 4 * 3; c.to.dims[2] = 3; c.to.len = c.to.len / 4 * 3);
    C(ATT, "query heads 1 (< cache kv heads 2)", S, 0, SDPA_E_HEADS, OK_, "head", c.tq.dims[2] = 1;
      c.tq.len /= 4; c.to.dims[2] = 1; c.to.len /= 4);

    /* E_HEAD_DIM */
    C(UPD, "key D 4 (cache 5)", S, 0, SDPA_E_HEAD_DIM, SDPA_E_DIMS, "dim|key", c.tk.dims[3] = 4;
      c.tk.len = c.tk.len / 5 * 4; c.tv.dims[3] = 4; c.tv.len = c.tv.len / 5 * 4);
    C(ATT, "query D 4 (cache 5)", S, 0, SDPA_E_HEAD_DIM, OK_, "dim|query", c.tq.dims[3] = 4;
      c.tq.len = c.tq.len / 5 * 4; c.to.dims[3] = 4; c.to.len = c.to.len / 5 * 4);

    /* E_KV_LEN */
    C(UPD, "key Snew 2, value Snew 1", S, 0, SDPA_E_KV_LEN, OK_, "value|key|len", c.tv.dims[1] = 1; c.tv.len /= 2);

    /* E_START_POS */
    C(OP_UPDATE, "update start_pos -1", S, 0, SDPA_E_START_POS, OK_, "start", c.upd_pos = -1);
    C(OP_UPDATE, "update start_pos INT32_MIN", S, 0, SDPA_E_START_POS, OK_, "start", c.upd_pos = INT32_MIN);
    C(ATT, "start_pos -1", S, 0, SDPA_E_START_POS, OK_, "start", c.opt.start_pos = -1);
    C(ATT, "start_pos INT64_MIN (mask)", S, 1, SDPA_E_START_POS, OK_, "start", c.opt.start_pos = INT64_MIN);
    C(OP_ATTEND, "attend start_pos + Sq > max_seq_len", S, 0, SDPA_E_START_POS, OK_, "start",
      c.opt.start_pos = CMAX - S + 1);
    C(OP_ATTEND, "attend start_pos INT64_MAX", S, 0, SDPA_E_START_POS, OK_, "start", c.opt.start_pos = INT64_MAX);
    C(OP_ATTEND, "attend start_pos 2^32 (truncates to 0)", S, 0, SDPA_E_START_POS, OK_, "start",
      c.opt.start_pos = INT64_C(1) << 32);
    /* after truncate(CFILL) rows CFILL.. are unwritten: attend without a mask may not read them; a mask's N columns may */
#define TRUNC_FILL TU_CHECK(sdpa_kv_cache_truncate(g_ctx, c.cache, CFILL) == SDPA_OK, "truncate")
    C(OP_ATTEND, "attend start_pos + Sq past cache.length (no mask)", S, 0, SDPA_E_START_POS, OK_, "written", TRUNC_FILL);
    C(OP_ATTEND, "attend one row past cache.length (no mask)", S, 0, SDPA_E_START_POS, OK_, "written", TRUNC_FILL;
      c.opt.start_pos = CFILL - S + 1);
    C(OP_ATTEND, "attend the last rows written (no mask)", S, 0, SDPA_OK, OK_, "", TRUNC_FILL; c.opt.start_pos = CFILL - S;
      c.tr.n = 0);
    C(OP_ATTEND, "attend past cache.length with a mask", S, 1, SDPA_OK, OK_, "", TRUNC_FILL; c.tr.n = 0);
#undef TRUNC_FILL
    C(OP_READ, "read start -1", S, 0, SDPA_E_START_POS, OK_, "start", c.read_start = -1);
    C(OP_READ, "read start INT32_MIN", S, 0, SDPA_E_START_POS, OK_, "start", c.read_start = INT32_MIN);

    /* E_CAPACITY */
    C(OP_UPDATE, "update start_pos + Snew = max + 1", S, 0, SDPA_E_CAPACITY, OK_, "capacity|max|seq",
      c.upd_pos = CMAX - S + 1);
    C(OP_UPDATE, "update start_pos = max", S, 0, SDPA_E_CAPACITY, OK_, "capacity|max|seq", c.upd_pos = CMAX);
    C(OP_UPDATE, "update start_pos INT32_MAX (a hole; sp + Snew overflows int32)", S, 0, SDPA_E_START_POS, OK_,
      "hole|length", c.upd_pos = INT32_MAX);
    C(OP_STEP, "step start_pos + S = max + 1 (mask)", S, 1, SDPA_E_CAPACITY, OK_, "capacity|max|seq",
      c.opt.start_pos = CMAX - S + 1);
    C(OP_STEP, "step start_pos + S = max + 1 (causal)", S, 0, SDPA_E_START_POS, SDPA_E_CAPACITY,
      "capacity|max|seq|start", c.opt.start_pos = CMAX - S + 1);
    C(OP_STEP, "step start_pos 2^32 (truncates to 0)", S, 0, SDPA_E_START_POS, SDPA_E_CAPACITY,
      "capacity|max|seq|start", c.opt.start_pos = INT64_C(1) << 32);
    C(OP_STEP, "step start_pos INT64_MAX (causal)", S, 0, SDPA_E_START_POS, SDPA_E_CAPACITY,
      "capacity|max|seq|start", c.opt.start_pos = INT64_MAX);
    C(OP_STEP, "step start_pos INT64_MAX with mask", S, 1, SDPA_E_CAPACITY, SDPA_E_START_POS,
      "capacity|max|seq|start", c.opt.start_pos = INT64_MAX);
    C(OP_STEP, "step start_pos 2^32 with mask", S, 1, SDPA_E_CAPACITY, SDPA_E_START_POS,
      "capacity|max|seq|start", c.opt.start_pos = INT64_C(1) << 32);
    C(OP_READ, "read start + length = max + 1", S, 0, SDPA_E_CAPACITY, OK_, "capacity|max|seq",
      c.read_start = CMAX - 2);
    C(OP_READ, "read start INT32_MAX (overflows)", S, 0, SDPA_E_CAPACITY, OK_, "capacity|max|seq",
      c.read_start = INT32_MAX);

    /* E_MASK_DTYPE, E_MASK_SHAPE, E_MASK_CAUSAL */
    C(ATT, "mask dtype float16", S, 1, SDPA_E_MASK_DTYPE, OK_, "mask", c.tm.dtype = SDPA_DTYPE_FLOAT16);
    C(ATT, "mask rows 1 for Sq 2", S, 1, SDPA_E_MASK_SHAPE, OK_, "mask", c.tm.dims[0] = 1;
      c.tm.len = c.tm.len / 2);
    C(ATT, "mask cols max_seq_len + 1", S, 1, SDPA_E_MASK_SHAPE, OK_, "mask", {
        free(c.extra);
        size_t n = (size_t)S * (CMAX + 1);
        c.extra = tu_malloc(n * 4);
        memset(c.extra, 0, n * 4);
        c.tm = tu_tensor2(c.extra, SDPA_DTYPE_FLOAT32, S, CMAX + 1);
    });
    C(ATT, "mask with is_causal", S, 1, SDPA_E_MASK_CAUSAL, OK_, "causal|mask", c.opt.is_causal = 1);

    /* E_DROPOUT, E_SCALE: the attend half fails, so a step must not update */
    C(ATT, "dropout 0.25", S, 0, SDPA_E_DROPOUT, OK_, "dropout", c.opt.dropout_p = 0.25f);
    C(ATT, "scale NaN", S, 0, SDPA_E_SCALE, OK_, "scale", c.opt.has_scale = 1; c.opt.scale = NAN);
    C(ATT, "scale -2", S, 1, SDPA_E_SCALE, OK_, "scale", c.opt.has_scale = 1; c.opt.scale = -2.0f);
    C(ATT, "scale 0", S, 0, SDPA_E_SCALE, OK_, "scale", c.opt.has_scale = 1; c.opt.scale = 0.0f);
    C(ATT, "scale inf", S, 0, SDPA_E_SCALE, OK_, "scale", c.opt.has_scale = 1; c.opt.scale = INFINITY);

    /* step: update half broken, attend half fine -> out untouched */
    C(OP_STEP, "step key dtype float16 (attend half valid)", S, 0, SDPA_E_DTYPE, OK_, "key|dtype",
      c.tk.dtype = SDPA_DTYPE_FLOAT16);
    /* order inside step: rank of key before scale of attend */
    C(OP_STEP, "order: key rank 3 + scale NaN", S, 0, SDPA_E_RANK, OK_, "key", c.tk.rank = 3; c.opt.has_scale = 1;
      c.opt.scale = NAN);
    C(OP_STEP, "order: query dtype + key batch", S, 0, SDPA_E_DTYPE, OK_, "query|dtype", c.tq.dtype = 0;
      c.tk.dims[0] = 1; c.tk.len /= 2);
    C(OP_STEP, "order: value heads + dropout", S, 0, SDPA_E_HEADS, SDPA_E_DIMS, "head|value", c.tv.dims[2] = 1;
      c.tv.len /= 2; c.opt.dropout_p = 1.0f);
    C(OP_STEP, "order: q/k length mismatch (E_DIMS) + dropout", S, 0, SDPA_E_DIMS, OK_, "query|key|length|len",
      c.tq.dims[1] = 1; c.tq.len /= 2; c.to.dims[1] = 1; c.to.len /= 2; c.opt.dropout_p = 0.5f);
    C(OP_STEP, "order: out aliases key (E_ARG) + scale NaN", S, 0, SDPA_E_ARG, OK_, "out", {
        free(c.extra);
        size_t n = (size_t)CB * S * CHQ * CD;
        c.extra = tu_malloc(n * 4);
        fill_random(c.extra, n, &(tu_rng){10});
        c.tk.data = c.extra;
        c.to.data = c.extra;
        track(&c.tr, c.extra, n * 4, "key/out");
        c.opt.has_scale = 1;
        c.opt.scale = NAN;
    });

    /* ctx NULL */
    {
        cx c;
        if (cx_init(&c, S, 0)) {
            snapshot(&c.tr);
            verify(NULL, &c.tr, "kv_cache_update: ctx NULL", sdpa_kv_cache_update(NULL, c.cache, c.pk, c.pv, 0),
                   SDPA_E_ARG, OK_, "");
            verify(NULL, &c.tr, "kv_cache_attend: ctx NULL",
                   sdpa_kv_cache_attend(NULL, c.cache, c.pq, c.pm, c.popt, c.po), SDPA_E_ARG, OK_, "");
            verify(NULL, &c.tr, "kv_cache_step: ctx NULL",
                   sdpa_kv_cache_step(NULL, c.cache, c.pq, c.pk, c.pv, c.pm, c.popt, c.po), SDPA_E_ARG, OK_, "");
            verify(NULL, &c.tr, "kv_cache_read: ctx NULL", sdpa_kv_cache_read(NULL, c.cache, 0, 3, c.pko, c.pvo),
                   SDPA_E_ARG, OK_, "");
        }
        cx_free(&c);
    }
}

static void test_misc(void) {
    /* status codes */
    static const char * const names[] = {"OK", "E_ARG", "E_RANK", "E_DIMS", "E_DTYPE", "E_BATCH", "E_HEADS",
                                         "E_HEAD_DIM", "E_KV_LEN", "E_START_POS", "E_CAPACITY", "E_MASK_DTYPE",
                                         "E_MASK_SHAPE", "E_MASK_CAUSAL", "E_DROPOUT", "E_SCALE", "E_DISPOSED",
                                         "E_OOM", "E_FORMAT"};
    for (int i = 0; i <= 18; i++) {
        const char * s = sdpa_status_code((sdpa_status)i);
        TU_CHECK(s && strcmp(s, names[i]) == 0, "sdpa_status_code(%d) = '%s', want '%s'", i, s ? s : "(null)",
                 names[i]);
    }
    const char * u = sdpa_status_code((sdpa_status)19);
    TU_CHECK(u && strcmp(u, "E_UNKNOWN") == 0, "sdpa_status_code(19) = '%s'", u ? u : "(null)");
    u = sdpa_status_code((sdpa_status)-1);
    TU_CHECK(u && strcmp(u, "E_UNKNOWN") == 0, "sdpa_status_code(-1) = '%s'", u ? u : "(null)");

    /* thread count clamping */
    sdpa_status st = SDPA_E_ARG;
    sdpa_ctx * c0 = sdpa_ctx_create(0, &st);
    TU_CHECK(c0 && st == SDPA_OK && sdpa_ctx_threads(c0) == 1, "ctx_create(0): clamp to 1 thread");
    sdpa_ctx_free(c0);
    c0 = sdpa_ctx_create(-7, NULL);
    TU_CHECK(c0 && sdpa_ctx_threads(c0) == 1, "ctx_create(-7, NULL status): clamp to 1 thread");
    if (c0) TU_CHECK(sdpa_ctx_last_error(c0) && sdpa_ctx_last_error(c0)[0] == 0, "new ctx: last_error not empty");
    sdpa_ctx_free(c0);
    sdpa_ctx_free(NULL);

    /* workspace / reserve */
    TU_CHECK(sdpa_workspace_size(g_ctx, 0, 1, 8, 2, 64, 100) == 0, "workspace_size(batch 0) != 0");
    TU_CHECK(sdpa_workspace_size(g_ctx, 1, 1, 6, 4, 64, 100) == 0, "workspace_size(6 heads over 4) != 0");
    TU_CHECK(sdpa_workspace_size(g_ctx, 1, -1, 8, 2, 64, 100) == 0, "workspace_size(q_len -1) != 0");
    TU_CHECK(sdpa_workspace_size(g_ctx, 1, 1, 8, 2, 0, 100) == 0, "workspace_size(head_dim 0) != 0");
    size_t ws = sdpa_workspace_size(g_ctx, 1, 1, 32, 8, 128, 4096);
    tu_dirty_error(g_ctx);
    st = sdpa_ctx_reserve(g_ctx, ws);
    TU_CHECK(st == SDPA_OK, "ctx_reserve(%zu) = %s", ws, sdpa_status_code(st));
    TU_CHECK(sdpa_ctx_last_error(g_ctx)[0] == 0, "ctx_reserve: last_error not empty after a success: '%s'",
             sdpa_ctx_last_error(g_ctx));
    st = sdpa_ctx_reserve(g_ctx, 0);
    TU_CHECK(st == SDPA_OK, "ctx_reserve(0) = %s", sdpa_status_code(st));
    tracker none = {0};
    st = sdpa_ctx_reserve(g_ctx, SIZE_MAX);
    verify(g_ctx, &none, "ctx_reserve(SIZE_MAX)", st, SDPA_E_OOM, OK_, "scratch|memory|alloc|bytes");
    st = sdpa_ctx_reserve(g_ctx, SIZE_MAX - 15);
    verify(g_ctx, &none, "ctx_reserve(SIZE_MAX - 15)", st, SDPA_E_OOM, OK_, "scratch|memory|alloc|bytes");
    st = sdpa_ctx_reserve(NULL, 16);
    TU_CHECK(st == SDPA_E_ARG, "ctx_reserve(NULL ctx) = %s", sdpa_status_code(st));

    /* a failure followed by a success clears the message */
    fx f;
    fx_init(&f, 0);
    f.opt.has_scale = 1;
    f.opt.scale = -1.0f;
    st = sdpa_custom(g_ctx, f.pq, f.pk, f.pv, f.pm, f.popt, f.po);
    TU_CHECK(st == SDPA_E_SCALE && sdpa_ctx_last_error(g_ctx)[0], "scale -1 not rejected");
    f.opt.scale = 1.0f;
    st = sdpa_custom(g_ctx, f.pq, f.pk, f.pv, f.pm, f.popt, f.po);
    TU_CHECK(st == SDPA_OK && sdpa_ctx_last_error(g_ctx)[0] == 0, "success after failure: %s, last_error '%s'",
             sdpa_status_code(st), sdpa_ctx_last_error(g_ctx));
    fx_free(&f);

    /* errors are per context */
    sdpa_ctx * other = sdpa_ctx_create(1, NULL);
    fx_init(&f, 0);
    f.opt.dropout_p = 0.5f;
    st = sdpa_custom(other, f.pq, f.pk, f.pv, f.pm, f.popt, f.po);
    TU_CHECK(st == SDPA_E_DROPOUT, "dropout on other ctx: %s", sdpa_status_code(st));
    TU_CHECK(sdpa_ctx_last_error(g_ctx)[0] == 0, "an error on one context shows on another: '%s'",
             sdpa_ctx_last_error(g_ctx));
    fx_free(&f);
    sdpa_ctx_free(other);
}

/* The wasm entries of the row calls (sdpa_wasm_kv_cache_truncate, _read,
 * _keep_rows, sdpa_wasm_kv_save_begin: src/wasm/api.h, what JS calls) decide
 * as read, truncate, keep_rows and save_begin do, with the same words: for a
 * plain and a windowed cache, over a grid of starts and counts, their status
 * and message equal the public entry's (its message after "fn: "). */
static int same_as_entry(const char * desc, sdpa_status want, const char * fn, sdpa_status got, const char * msg) {
    const char * full = sdpa_ctx_last_error(g_ctx);
    const size_t fl = strlen(fn);
    int ok = got == want;
    if (ok && want != SDPA_OK) ok = strncmp(full, fn, fl) == 0 && full[fl] == ':' && strcmp(full + fl + 2, msg) == 0;
    g_cases++;
    return TU_CHECK(ok, "%s: entry %s '%s', wasm entry %s '%s'", desc, sdpa_status_code(want), full, sdpa_status_code(got), msg);
}

/* The wasm entry's status, its message copied into msg. */
static sdpa_status noted(sdpa_status st, char * msg, size_t bytes) {
    snprintf(msg, bytes, "%s", st == SDPA_OK ? "" : sdpa_ctx_last_error(g_ctx));
    return st;
}

static void test_wasm_rows(void) {
    enum { D = 4, MAXLEN = 400 };
    for (int windowed = 0; windowed < 2; windowed++) {
        sdpa_kv_cache * c = NULL;
        sdpa_status st = sdpa_kv_cache_create_windowed(g_ctx, 1, MAXLEN, 1, D, SDPA_DTYPE_FLOAT32, windowed ? 64 : 0, windowed ? 3 : 0, &c);
        if (!TU_CHECK(st == SDPA_OK && c, "wasm_rows: create: %s", sdpa_status_code(st))) return;
        const int32_t fill = windowed ? 300 : 100;
        float * rows = tu_malloc((size_t)fill * D * 4), * out = tu_malloc((size_t)MAXLEN * D * 4 * 2);
        memset(rows, 0, (size_t)fill * D * 4);
        sdpa_tensor k = tu_tensor4(rows, SDPA_DTYPE_FLOAT32, 1, 1, 1, D), v = k;
        for (int32_t at = 0; at < fill; at++) {  /* (one row at a time: a windowed cache takes a page at a time) */
            k.data = v.data = rows + (size_t)at * D;
            sdpa_kv_cache_update(g_ctx, c, &k, &v, at);
        }
        const int32_t len = sdpa_kv_cache_length(c);
        static const int32_t grid[] = { 0, 1, 2, 3, 4, 10, 99, 100, 101, 127, 128, 200, 250, 299, 300, 301, 399, 400, 401, 1000 };
        const int G = (int)(sizeof grid / sizeof grid[0]);
        char msg[512], desc[96];
        for (int i = 0; i < G; i++) {
            const int32_t s0 = grid[i];
            snprintf(desc, sizeof desc, "wasm_rows %s truncate(%d)", windowed ? "windowed" : "plain", s0);
            sdpa_status got = noted(sdpa_wasm_kv_cache_truncate(g_ctx, c, s0, 0), msg, sizeof msg);
            if (got != SDPA_OK)  /* (a truncate that passes would change the cache) */
                same_as_entry(desc, sdpa_kv_cache_truncate(g_ctx, c, s0), "sdpa_kv_cache_truncate", got, msg);
            for (int j = 0; j < G; j++) {
                const int32_t n = grid[j];
                if (n == 0) continue;
                snprintf(desc, sizeof desc, "wasm_rows %s read(%d, %d)", windowed ? "windowed" : "plain", s0, n);
                sdpa_tensor ko = tu_tensor4(out, SDPA_DTYPE_FLOAT32, 1, n, 1, D), vo = tu_tensor4(out + (size_t)MAXLEN * D, SDPA_DTYPE_FLOAT32, 1, n, 1, D);
                void * block = NULL;
                got = noted(sdpa_wasm_kv_cache_read(g_ctx, c, s0, n, 0, &block), msg, sizeof msg);
                if (n <= MAXLEN) {
                    same_as_entry(desc, sdpa_kv_cache_read(g_ctx, c, s0, n, &ko, &vo), "sdpa_kv_cache_read", got, msg);
                    if (got == SDPA_OK)  /* (the block holds what the public read wrote: keys, then values) */
                        TU_CHECK(memcmp(block, out, (size_t)n * D * 4) == 0 && memcmp((float *)block + (size_t)n * D, out + (size_t)MAXLEN * D, (size_t)n * D * 4) == 0,
                                 "%s: the block's rows", desc);
                }
                free(block);
                /* keep_rows with offsets 0 .. n-2 and n-1 + 1 (n rows, the last one offset n), on a fork (a keep that passes changes it) */
                int32_t list[8];
                const int32_t m = n < 8 ? n : 8;
                for (int32_t x = 0; x < m; x++) list[x] = x;
                list[m - 1] = n;
                snprintf(desc, sizeof desc, "wasm_rows %s keep(%d, %d rows, last %d)", windowed ? "windowed" : "plain", s0, m, n);
                sdpa_kv_cache * f = NULL;
                sdpa_kv_cache_fork(g_ctx, c, &f);
                got = noted(sdpa_wasm_kv_cache_keep_rows(g_ctx, f, s0, list, m), msg, sizeof msg);
                sdpa_kv_cache_free(f);
                if (got != SDPA_OK) same_as_entry(desc, sdpa_kv_cache_keep_rows(g_ctx, c, s0, list, m), "sdpa_kv_cache_keep_rows", got, msg);
            }
            /* save(start, length): every pair of the grid and a negative start or length */
            for (int j = -1; j < G; j++) {
                const int32_t n = j < 0 ? -1 : grid[j];
                for (int neg = 0; neg < 2; neg++) {
                    const int32_t start = neg ? -1 - s0 : s0;
                    snprintf(desc, sizeof desc, "wasm_rows %s save(%d, %d)", windowed ? "windowed" : "plain", start, n);
                    sdpa_kv_saver * sv = NULL, * sv2 = NULL;
                    got = noted(sdpa_wasm_kv_save_begin(g_ctx, c, start, n, NULL, 0, &sv2), msg, sizeof msg);
                    sdpa_kv_save_free(sv2);
                    same_as_entry(desc, sdpa_kv_save_begin(g_ctx, c, start, n, NULL, 0, &sv), "sdpa_kv_save_begin", got, msg);
                    sdpa_kv_save_free(sv);
                }
            }
            snprintf(desc, sizeof desc, "wasm_rows %s keep(%d, [])", windowed ? "windowed" : "plain", s0);
            sdpa_kv_cache * f = NULL;  /* (on a fork: keep(s0, []) that passes truncates) */
            sdpa_kv_cache_fork(g_ctx, c, &f);
            got = noted(sdpa_wasm_kv_cache_keep_rows(g_ctx, f, s0, NULL, 0), msg, sizeof msg);
            sdpa_kv_cache_free(f);
            if (got != SDPA_OK) same_as_entry(desc, sdpa_kv_cache_keep_rows(g_ctx, c, s0, NULL, 0), "sdpa_kv_cache_keep_rows", got, msg);
        }
        /* values past int32 (a JS number): in words, not wrapped; a fraction is E_ARG */
        void * block = NULL;
        TU_CHECK(noted(sdpa_wasm_kv_cache_read(g_ctx, c, 0.5, 1, 0, &block), msg, sizeof msg) == SDPA_E_ARG && !block, "wasm_rows: read start 0.5");
        TU_CHECK(noted(sdpa_wasm_kv_cache_read(g_ctx, c, 4294967296.0, 1, 0, &block), msg, sizeof msg) == SDPA_E_CAPACITY && !block,
                 "wasm_rows: read start 2^32: '%s'", msg);
        sdpa_kv_saver * sv = NULL;
        TU_CHECK(noted(sdpa_wasm_kv_save_begin(g_ctx, c, 0, 2147483648.0, NULL, 0, &sv), msg, sizeof msg) == SDPA_E_DIMS &&
                 strcmp(msg, "length is 2147483648; expected a non-negative integer") == 0, "wasm_rows: save length 2^31: '%s'", msg);
        TU_CHECK(noted(sdpa_wasm_kv_save_begin(g_ctx, c, 4294967296.0, 0, NULL, 0, &sv), msg, sizeof msg) == SDPA_E_CAPACITY,
                 "wasm_rows: save start 2^32: '%s'", msg);
        TU_CHECK(noted(sdpa_wasm_kv_cache_truncate(g_ctx, c, 1e300, 0), msg, sizeof msg) == SDPA_E_ARG, "wasm_rows: truncate 1e300");
        /* and the passing cases pass (checked last: they change the cache) */
        TU_CHECK(sdpa_kv_cache_length(c) == len, "wasm_rows: the cache unchanged by the rejected and the rules-only calls");
        TU_CHECK(sdpa_wasm_kv_cache_truncate(g_ctx, c, len, 0) == SDPA_OK && sdpa_wasm_kv_cache_truncate(g_ctx, c, len - 1, 1) == SDPA_OK &&
                 sdpa_kv_cache_length(c) == len - 1, "wasm_rows: truncate(length - 1)");
        free(rows);
        free(out);
        sdpa_kv_cache_free(c);
    }
}

/* sdpa_wasm_custom (customSdpa's wasm entry) decides as sdpa_custom does,
 * with the same words: over a grid of ranks, dims, lengths, masks, sinks,
 * outs, startPos and options, its status and message equal the public
 * entry's (its message after "customSdpa: "). */
static uint32_t g_lcg = 12345u;
static uint32_t lcg(uint32_t n) { g_lcg = g_lcg * 1103515245u + 12345u; return (g_lcg >> 8) % n; }

/* A tensor of `rank` dims (dims[0..3]) holding len elements (+ `skew`). */
static sdpa_tensor grid_tensor(float * buf, int32_t dtype, int rank, const int32_t * dims, int skew) {
    sdpa_tensor t = tu_tensor4(buf, dtype, dims[0], dims[1], dims[2], dims[3]);
    t.rank = rank;
    int64_t n = 1;
    for (int i = 0; i < rank && i < 4; i++) n *= dims[i];
    t.len = (size_t)(n < 0 ? 0 : n + skew < 0 ? 0 : n + skew);
    return t;
}

static void test_wasm_custom(void) {
    enum { CAP = 4096 };
    float * bq = tu_malloc(CAP * 4), * bk = tu_malloc(CAP * 4), * bv = tu_malloc(CAP * 4), * bm = tu_malloc(CAP * 4);
    float * bs = tu_malloc(64 * 4), * bo = tu_malloc(CAP * 4);
    memset(bq, 0, CAP * 4); memset(bk, 0, CAP * 4); memset(bv, 0, CAP * 4); memset(bm, 0, CAP * 4);
    memset(bs, 0, 64 * 4); memset(bo, 0, CAP * 4);
    char msg[512], desc[160];
    static const int32_t odd[] = { 0, -1, 3, 5, 9 };
    long passed = 0;
    for (int it = 0; it < 3000; it++) {
        const int32_t B = 1 + (int32_t)lcg(2), Sq = 1 + (int32_t)lcg(4), Hk = 1 + (int32_t)lcg(2), Hq = Hk * (1 + (int32_t)lcg(2));
        const int32_t D = lcg(2) ? 4 : 8, Skv = 1 + (int32_t)lcg(8);
        int32_t qd[4] = { B, Sq, Hq, D }, kd[4] = { B, Skv, Hk, D }, vd[4] = { B, Skv, Hk, D }, od[4] = { B, Sq, Hq, D };
        int32_t md[4] = { Sq, Skv, 0, 0 }, sd[4] = { Hq, 0, 0, 0 };
        int qr = 4, kr = 4, vr = 4, orank = 4, mr = 2, sr = 1;
        int32_t * all[6] = { qd, kd, vd, od, md, sd };
        for (int m = (int)lcg(3); m > 0; m--) {  /* a few mutations */
            int32_t * d = all[lcg(6)];
            switch (lcg(4)) {
                case 0: d[lcg(4)] = odd[lcg(5)]; break;
                case 1: d[lcg(4)] = 1 + (int32_t)lcg(8); break;
                case 2: { int * r = (int *[]){ &qr, &kr, &vr, &orank, &mr, &sr }[lcg(6)]; *r = (int)lcg(5); break; }
                default: { const int32_t x = d[1]; d[1] = d[2]; d[2] = x; break; }
            }
        }
        const int has_mask = lcg(3) == 0, has_sinks = lcg(4) == 0;
        const int skew = lcg(12) == 0 ? (lcg(2) ? 1 : -1) : 0;
        sdpa_tensor q = grid_tensor(bq, lcg(20) == 0 ? SDPA_DTYPE_BOOL : SDPA_DTYPE_FLOAT32, qr, qd, lcg(3) == 0 ? skew : 0);
        sdpa_tensor k = grid_tensor(bk, SDPA_DTYPE_FLOAT32, kr, kd, lcg(3) == 0 ? skew : 0);
        sdpa_tensor v = grid_tensor(bv, SDPA_DTYPE_FLOAT32, vr, vd, 0);
        sdpa_tensor mk = grid_tensor(bm, lcg(2) ? SDPA_DTYPE_BOOL : SDPA_DTYPE_FLOAT32, mr, md, 0);
        sdpa_tensor sk = grid_tensor(bs, SDPA_DTYPE_FLOAT32, sr, sd, 0);
        sdpa_tensor o = grid_tensor(bo, SDPA_DTYPE_FLOAT32, orank, od, lcg(3) == 0 ? skew : 0);
        if (q.len > CAP || k.len > CAP || v.len > CAP || mk.len > CAP || sk.len > 64 || o.len > CAP) continue;
        sdpa_options opt = { 0 };
        static const int64_t starts[] = { 0, 0, 1, 2, 3, 5, 7, 8, -1 };
        opt.start_pos = starts[lcg(9)];
        opt.is_causal = (int32_t)lcg(2);
        opt.window = lcg(4) == 0 ? 1 + (int32_t)lcg(3) : 0;
        if (lcg(5) == 0) { opt.has_scale = 1; opt.scale = lcg(2) ? 0.5f : -1.0f; }
        if (lcg(8) == 0) opt.dropout_p = 0.5f;
        if (lcg(8) == 0) opt.softcap = lcg(2) ? 30.0f : -2.0f;
        opt.sinks = has_sinks ? &sk : NULL;
        const sdpa_status got = noted(sdpa_wasm_custom(g_ctx, &q, &k, &v, has_mask ? &mk : NULL, &opt, &o), msg, sizeof msg);
        const sdpa_status want = sdpa_custom(g_ctx, &q, &k, &v, has_mask ? &mk : NULL, &opt, &o);
        snprintf(desc, sizeof desc, "wasm_custom #%d q[%d:%d,%d,%d,%d] k[%d:%d,%d,%d,%d] out[%d:%d,%d,%d,%d]", it,
                 qr, qd[0], qd[1], qd[2], qd[3], kr, kd[0], kd[1], kd[2], kd[3], orank, od[0], od[1], od[2], od[3]);
        same_as_entry(desc, want, "sdpa_custom", got, msg);
        if (want == SDPA_OK) passed++;
    }
    TU_CHECK(passed > 100, "wasm_custom: only %ld passing calls in the grid", passed);
    {   /* out over an input: the address rule, in the entry's words */
        sdpa_tensor q = tu_tensor4(bq, SDPA_DTYPE_FLOAT32, 1, 2, 4, 8), k = tu_tensor4(bk, SDPA_DTYPE_FLOAT32, 1, 6, 2, 8), v = k, o = q;
        TU_CHECK(noted(sdpa_wasm_custom(g_ctx, &q, &k, &v, NULL, NULL, &o), msg, sizeof msg) == SDPA_E_ARG &&
                 strcmp(msg, "out shares memory with query; out must not overlap any input") == 0, "wasm_custom: out over query: '%s'", msg);
    }
    free(bq); free(bk); free(bv); free(bm); free(bs); free(bo);
}

/* sdpa_wasm_kv_cache_plan (the wasm entry of createKVCache and kvCacheSize:
 * a geometry's rules and kvCacheSize's rows on JS numbers) decides as
 * sdpa_kv_cache_create_desc and sdpa_kv_cache_plan_desc do, with the same
 * words, over a grid of geometries (bad counts, dtypes, windows and sinks
 * together) and rows; and the counts only a JS number can hold. */
static sdpa_status plan_numbers(double batch, double max, double heads, double dim, int32_t kd, int32_t vd, double window,
                                double sinks, int32_t plan, double rows, char * msg, size_t msg_bytes) {
    sdpa_kv_cache_size size;
    const sdpa_status st = sdpa_wasm_kv_cache_plan(g_ctx, batch, max, heads, dim, kd, vd, window, sinks, 0, plan, rows, &size);
    snprintf(msg, msg_bytes, "%s", st == SDPA_OK ? "" : sdpa_ctx_last_error(g_ctx));
    return st;
}

static void test_check_create(void) {
    const int32_t LIM = INT32_MAX - 65536;
    static const int32_t batches[] = { -1, 0, 1, 2 }, heads[] = { -1, 0, 1, 2 }, dims[] = { -1, 0, 1, 8 };
    const int32_t maxes[] = { -1, 0, 1, 8, LIM, LIM + 1 }, windows[] = { -1, 0, 1, 4, LIM + 1 }, sinks[] = { -1, 0, 2, LIM + 1 };
    static const int32_t kds[] = { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT16, 99 }, vds[] = { SDPA_DTYPE_INT4, 0 };
    static const int32_t rowses[] = { -1, 0, 8, 9 };
#define N_OF(a) (int)(sizeof(a) / sizeof((a)[0]))
    char msg[512], desc[160];
    sdpa_kv_cache_size size;
    long before = g_cases;
    for (int a = 0; a < N_OF(batches); a++) for (int b = 0; b < N_OF(maxes); b++) for (int c = 0; c < N_OF(heads); c++)
    for (int d = 0; d < N_OF(dims); d++) for (int e = 0; e < N_OF(kds); e++) for (int f = 0; f < N_OF(vds); f++)
    for (int w = 0; w < N_OF(windows); w++) for (int k = 0; k < N_OF(sinks); k++) {
        const sdpa_kv_cache_desc g = { batches[a], maxes[b], heads[c], dims[d], kds[e], vds[f], windows[w], sinks[k], 0 };
        snprintf(desc, sizeof desc, "check_create [%d, %d, %d, %d] dtypes %d/%d window %d sinks %d", g.batch, g.max_seq_len,
                 g.kv_heads, g.head_dim, g.key_dtype, g.value_dtype, g.window, g.sink_tokens);
        sdpa_status got = plan_numbers(g.batch, g.max_seq_len, g.kv_heads, g.head_dim, g.key_dtype, g.value_dtype,
                                       g.window, g.sink_tokens, 0, 0, msg, sizeof msg);
        if (got != SDPA_OK) {  /* (a create that passes would allocate a page table) */
            sdpa_kv_cache * made = NULL;
            same_as_entry(desc, sdpa_kv_cache_create_desc(g_ctx, &g, &made), "sdpa_kv_cache_create_desc", got, msg);
            sdpa_kv_cache_free(made);
        }
        for (int r = 0; r < N_OF(rowses); r++) {
            got = plan_numbers(g.batch, g.max_seq_len, g.kv_heads, g.head_dim, g.key_dtype, g.value_dtype,
                               g.window, g.sink_tokens, 1, rowses[r], msg, sizeof msg);
            same_as_entry(desc, sdpa_kv_cache_plan_desc(g_ctx, &g, rowses[r], &size), "sdpa_kv_cache_plan_desc", got, msg);
        }
    }
    TU_CHECK(g_cases - before > 10000, "check_create: %ld cases", g_cases - before);
    /* counts only a JS number holds: the int32 bounds, in read order, and sinkTokens past the limit without a window */
    static const struct { double batch, max, heads, dim, window, sinks, rows; sdpa_status want; const char * words; } wide[] = {
        { 2147483648.0, 8, 1, 8, 0, 0, -1, SDPA_E_DIMS, "batch is 2147483648; at most 2147483647 (2^31 - 1)" },
        { 1, 8, 4294967296.0, 8, 0, 0, -1, SDPA_E_DIMS, "numKvHeads is 4294967296; at most 2147483647 (2^31 - 1)" },
        { 1, 8, 1, 9007199254740991.0, 0, 0, -1, SDPA_E_DIMS, "headDim is 9007199254740991; at most 2147483647 (2^31 - 1)" },
        { 1, 4294967296.0, 1, 8, 0, 0, -1, SDPA_E_DIMS, "maxSeqLen is 4294967296; at most 2147418111" },
        { 1, 8, 1, 8, 2147483648.0, 0, -1, SDPA_E_DIMS, "window is 2147483648; at most 2147418111" },
        { 1, 8, 1, 8, 0, 2147483648.0, -1, SDPA_E_DIMS, "sinkTokens is 2147483648; at most 2147418111" },
        { 1, 8, 1, 8, 0, 2147418112.0, -1, SDPA_E_DIMS, "sinkTokens is 2147418112; at most 2147418111" },
        { 1, 8, 1, 8, 0, 0, 4294967296.0, SDPA_E_CAPACITY, "rows is 4294967296 but the cache holds maxSeqLen = 8" },
        { 1, 8, 0, 8, 0, 0, -4294967296.0, SDPA_E_DIMS, "rows is -4294967296; expected a non-negative integer" },
        { 1.5, 8, 1, 8, 0, 0, -1, SDPA_E_ARG, NULL },
        { 1, 8, 1, 8, 0, 0, 0.5, SDPA_E_ARG, NULL },
        { 1, 8, 1, 8, 1e300, 0, -1, SDPA_E_ARG, NULL },
    };
    for (int i = 0; i < N_OF(wide); i++) {
        const int32_t plan = wide[i].rows != -1;
        const sdpa_status got = plan_numbers(wide[i].batch, wide[i].max, wide[i].heads, wide[i].dim, SDPA_DTYPE_FLOAT32,
                                             SDPA_DTYPE_FLOAT32, wide[i].window, wide[i].sinks, plan, wide[i].rows, msg, sizeof msg);
        g_cases++;
        TU_CHECK(got == wide[i].want && (!wide[i].words || strcmp(msg, wide[i].words) == 0),
                 "check_create wide %d: %s '%s', want %s '%s'", i, sdpa_status_code(got), msg, sdpa_status_code(wide[i].want),
                 wide[i].words ? wide[i].words : "");
    }
    TU_CHECK(plan_numbers(1, 8, 1, 8, 1, 1, 0, 0, 0, 0, msg, sizeof msg) == SDPA_OK, "check_create: a sound geometry");
    {   /* sdpa_wasm_kv_cache_create: the geometry's rules, then one wasm allocation per page and table (no call named);
         * _fork: the public entry's words, without its name */
        const double big[SDPA_WASM_GEOMETRY_FIELDS] = { 1, 64, 1, 1 << 24, SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, 0, 0, 0 };
        sdpa_kv_cache * c = NULL;
        sdpa_status got = sdpa_wasm_kv_cache_create(g_ctx, big, &c);
        char want[200];  /* (a page table of one pointer) */
        snprintf(want, sizeof want, "a cache of [1, 64, 1, 16777216] needs pages of 8.00 GiB (64 rows) and a page table of %zu B; "
                                    "each must be one wasm allocation (< 2 GiB)", sizeof(void *));
        TU_CHECK(got == SDPA_E_OOM && c == NULL && strcmp(sdpa_ctx_last_error(g_ctx), want) == 0,
                 "wasm create: a page too big: %s '%s'", sdpa_status_code(got), sdpa_ctx_last_error(g_ctx));
        const double frac[SDPA_WASM_GEOMETRY_FIELDS] = { 1, 64.5, 1, 8, SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, 0, 0, 0 };
        got = sdpa_wasm_kv_cache_create(g_ctx, frac, &c);
        TU_CHECK(got == SDPA_E_ARG && c == NULL && strncmp(sdpa_ctx_last_error(g_ctx), "batch 1, maxSeqLen 64.5,", 24) == 0,
                 "wasm create: a fraction: %s '%s'", sdpa_status_code(got), sdpa_ctx_last_error(g_ctx));
        const double small[SDPA_WASM_GEOMETRY_FIELDS] = { 1, 8, 1, 8, SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, 0, 0, 0 };
        sdpa_kv_cache * f = NULL;
        TU_CHECK(sdpa_wasm_kv_cache_create(g_ctx, small, &c) == SDPA_OK && sdpa_wasm_kv_cache_fork(g_ctx, c, &f) == SDPA_OK,
                 "wasm create and fork: a sound geometry");
        TU_CHECK(sdpa_wasm_kv_cache_fork(g_ctx, c, NULL) == SDPA_E_ARG && strcmp(sdpa_ctx_last_error(g_ctx), "out_cache is missing") == 0,
                 "wasm fork: out_cache missing: '%s'", sdpa_ctx_last_error(g_ctx));
        sdpa_kv_cache_free(f);
        sdpa_kv_cache_free(c);
        /* the loader's entries: its words, no call named */
        sdpa_kv_loader * L = NULL;
        TU_CHECK(sdpa_wasm_kv_load_begin(g_ctx, -1, &L) == SDPA_E_DIMS &&
                 strcmp(sdpa_ctx_last_error(g_ctx), "maxSeqLen is -1; expected a positive integer") == 0,
                 "wasm load_begin: maxSeqLen -1: '%s'", sdpa_ctx_last_error(g_ctx));
        if (TU_CHECK(sdpa_wasm_kv_load_begin(g_ctx, 0, &L) == SDPA_OK, "wasm load_begin")) {
            static const unsigned char junk[16] = "not a save here";
            size_t took = 0;
            TU_CHECK(sdpa_wasm_kv_load_feed(g_ctx, L, junk, sizeof junk, &took) == SDPA_E_FORMAT &&
                         strncmp(sdpa_ctx_last_error(g_ctx), "this is not saved KV state", 26) == 0,
                     "wasm load_feed: junk: '%s'", sdpa_ctx_last_error(g_ctx));
            TU_CHECK(sdpa_wasm_kv_load_finish(g_ctx, L, &c) == SDPA_E_FORMAT &&
                         strncmp(sdpa_ctx_last_error(g_ctx), "this is not saved KV state", 26) == 0,
                     "wasm load_finish after junk: '%s'", sdpa_ctx_last_error(g_ctx));
            sdpa_kv_load_free(L);
        }
    }
#undef N_OF
}

/* The cache calls' wasm entries (sdpa_wasm_kv_cache_update, _attend, _step)
 * against sdpa_kv_cache_update_rotary, _attend and _step (each on a fork of
 * the cache, so a passing write changes nothing here): same code and words
 * over a grid, for a plain and a windowed cache; update's startPos as a JS
 * number; attendMany / stepMany's entries' words. */
static void test_wasm_cache_calls(void) {
    enum { CAP = 8192 };
    float * bq = tu_malloc(CAP * 4), * bk = tu_malloc(CAP * 4), * bv = tu_malloc(CAP * 4), * bm = tu_malloc(CAP * 4);
    float * bo = tu_malloc(CAP * 4), * bc = tu_malloc(CAP * 4), * bs = tu_malloc(CAP * 4), * bsk = tu_malloc(64 * 4);
    memset(bq, 0, CAP * 4); memset(bk, 0, CAP * 4); memset(bv, 0, CAP * 4); memset(bm, 0, CAP * 4);
    memset(bo, 0, CAP * 4); memset(bc, 0, CAP * 4); memset(bs, 0, CAP * 4); memset(bsk, 0, 64 * 4);
    char msg[512], desc[200];
    static const int32_t odd[] = { 0, -1, 3, 5, 9 };
    static const char * const fns[] = { "", "sdpa_kv_cache_update_rotary", "sdpa_kv_cache_attend", "sdpa_kv_cache_step" };
    long passed = 0;
    for (int windowed = 0; windowed < 2; windowed++) {
        const int32_t Hk = windowed ? 1 : 2, D = windowed ? 4 : 8, ML = windowed ? 1024 : 64;
        const int32_t W = windowed ? 8 : 0, SINK = windowed ? 2 : 0, fill = windowed ? 300 : 20;
        sdpa_kv_cache * c = NULL;
        if (!TU_CHECK(sdpa_kv_cache_create_windowed(g_ctx, 1, ML, Hk, D, SDPA_DTYPE_FLOAT32, W, SINK, &c) == SDPA_OK, "create")) return;
        for (int32_t at = 0; at < fill; at++) {
            sdpa_tensor k = tu_tensor4(bk, SDPA_DTYPE_FLOAT32, 1, 1, Hk, D);
            sdpa_kv_cache_update(g_ctx, c, &k, &k, at);
        }
        const int32_t len = sdpa_kv_cache_length(c);
        for (int it = 0; it < 2500; it++) {
            const int op = 1 + (int)lcg(3);
            const int32_t Sq = 1 + (int32_t)lcg(3), Hq = Hk * (1 + (int32_t)lcg(2));
            int32_t qd[4] = { 1, Sq, Hq, D }, kd[4] = { 1, Sq, Hk, D }, vd[4] = { 1, Sq, Hk, D }, od[4] = { 1, Sq, Hq, D };
            int32_t md[4] = { Sq, lcg(2) ? ML : len, 0, 0 }, td[4] = { Sq, Sq, 0, 0 }, sd[4] = { Hq, 0, 0, 0 };
            int32_t cosd[4] = { lcg(3) ? 1100 : 8, lcg(4) ? D / 2 : D / 2 + 1, 0, 0 }, sind[4];
            memcpy(sind, cosd, sizeof sind);
            int qr = 4, kr = 4, vr = 4, orank = 4;
            int32_t * all[6] = { qd, kd, vd, od, md, cosd };
            for (int m = (int)lcg(3); m > 0; m--) {
                int32_t * d = all[lcg(6)];
                switch (lcg(4)) {
                    case 0: d[lcg(4)] = odd[lcg(5)]; break;
                    case 1: d[lcg(4)] = 1 + (int32_t)lcg(8); break;
                    case 2: { int * r = (int *[]){ &qr, &kr, &vr, &orank }[lcg(4)]; *r = (int)lcg(5); break; }
                    default: { const int32_t x = d[1]; d[1] = d[2]; d[2] = x; break; }
                }
            }
            const int has_mask = lcg(5) == 0, has_tree = lcg(8) == 0, has_sinks = lcg(6) == 0, has_rot = lcg(4) == 0;
            sdpa_tensor q = grid_tensor(bq, SDPA_DTYPE_FLOAT32, qr, qd, 0), k = grid_tensor(bk, SDPA_DTYPE_FLOAT32, kr, kd, lcg(10) == 0);
            sdpa_tensor v = grid_tensor(bv, SDPA_DTYPE_FLOAT32, vr, vd, 0), o = grid_tensor(bo, SDPA_DTYPE_FLOAT32, orank, od, 0);
            sdpa_tensor mk = grid_tensor(bm, SDPA_DTYPE_BOOL, 2, md, 0), tr = grid_tensor(bm, SDPA_DTYPE_BOOL, 2, td, 0);
            sdpa_tensor sk = grid_tensor(bsk, SDPA_DTYPE_FLOAT32, 1, sd, 0);
            sdpa_tensor rc = grid_tensor(bc, SDPA_DTYPE_FLOAT32, 2, cosd, 0), rs = grid_tensor(bs, SDPA_DTYPE_FLOAT32, 2, sind, 0);
            if (q.len > CAP || k.len > CAP || v.len > CAP || o.len > CAP || mk.len > CAP || rc.len > CAP) continue;
            int32_t pos[4] = { 0, 1, 2, lcg(6) ? 3 : 5000 };
            sdpa_rotary ro = { &rc, &rs, (int32_t)lcg(2), lcg(3) == 0 ? (lcg(4) ? Sq : Sq + 1) : 0, NULL };
            if (ro.n_positions > 4) ro.n_positions = 4;
            ro.positions = ro.n_positions ? pos : NULL;
            static const int32_t starts[] = { -1, 0, 1, 5, 18, 19, 20, 21, 63, 64, 250, 292, 299, 300, 301, 1023 };
            sdpa_options opt = { 0 };
            opt.start_pos = starts[lcg(16)];
            opt.is_causal = lcg(4) != 0;
            opt.window = lcg(5) == 0 ? (int32_t)(1 + lcg(10)) : 0;
            opt.sinks = has_sinks ? &sk : NULL;
            opt.tree_mask = has_tree ? &tr : NULL;
            opt.rotary = has_rot ? &ro : NULL;
            sdpa_kv_cache * f = NULL, * g = NULL;
            if (!TU_CHECK(sdpa_kv_cache_fork(g_ctx, c, &f) == SDPA_OK && sdpa_kv_cache_fork(g_ctx, c, &g) == SDPA_OK, "fork")) break;
            sdpa_status got, want;
            if (op == 1) got = sdpa_wasm_kv_cache_update(g_ctx, g, &k, &v, (double)opt.start_pos, has_rot ? &ro : NULL);
            else if (op == 2) got = sdpa_wasm_kv_cache_attend(g_ctx, g, &q, has_mask ? &mk : NULL, &opt, &o);
            else got = sdpa_wasm_kv_cache_step(g_ctx, g, &q, &k, &v, has_mask ? &mk : NULL, &opt, &o);
            noted(got, msg, sizeof msg);
            if (op == 1) want = sdpa_kv_cache_update_rotary(g_ctx, f, &k, &v, opt.start_pos, has_rot ? &ro : NULL);
            else if (op == 2) want = sdpa_kv_cache_attend(g_ctx, f, &q, has_mask ? &mk : NULL, &opt, &o);
            else want = sdpa_kv_cache_step(g_ctx, f, &q, &k, &v, has_mask ? &mk : NULL, &opt, &o);
            snprintf(desc, sizeof desc, "wasm cache call %s op %d #%d sp %lld q[%d:%d,%d,%d,%d] k[%d:%d,%d,%d,%d] out[%d:%d,%d,%d,%d]",
                     windowed ? "windowed" : "plain", op, it, (long long)opt.start_pos, qr, qd[0], qd[1], qd[2], qd[3],
                     kr, kd[0], kd[1], kd[2], kd[3], orank, od[0], od[1], od[2], od[3]);
            same_as_entry(desc, want, fns[op], got, msg);
            if (want == SDPA_OK) passed++;
            sdpa_kv_cache_free(f);
            sdpa_kv_cache_free(g);
        }
        {   /* update's startPos as a JS number: past int32 is its rule's failure (not a wrapped row); a fraction */
            sdpa_tensor k = tu_tensor4(bk, SDPA_DTYPE_FLOAT32, 1, 2, Hk, D);
            TU_CHECK(noted(sdpa_wasm_kv_cache_update(g_ctx, c, &k, &k, 4294967296.0 + 3, NULL), msg, sizeof msg) == SDPA_E_START_POS &&
                         strncmp(msg, "startPos 4294967299 is past the", 31) == 0, "wasm update: startPos 2^32 + 3: '%s'", msg);
            TU_CHECK(noted(sdpa_wasm_kv_cache_update(g_ctx, c, &k, &k, 1.5, NULL), msg, sizeof msg) == SDPA_E_START_POS &&
                     strcmp(msg, "startPos is 1.5; expected a non-negative integer") == 0, "wasm update: startPos 1.5: '%s'", msg);
            TU_CHECK(sdpa_kv_cache_length(c) == len, "wasm update: a rejected call writes nothing");
            /* attendMany / stepMany: the items' words, no function named */
            sdpa_tensor q = tu_tensor4(bq, SDPA_DTYPE_FLOAT32, 1, 1, Hk, D), o = tu_tensor4(bo, SDPA_DTYPE_FLOAT32, 1, 1, Hk, D + 1);
            sdpa_options co = { 0 };
            co.is_causal = 1;
            co.start_pos = len - 1;
            sdpa_attend_item items[2] = { { c, &q, NULL, &co, &o, NULL, NULL }, { c, &q, NULL, &co, &o, NULL, NULL } };
            TU_CHECK(noted(sdpa_wasm_kv_cache_attend_many(g_ctx, items, 0), msg, sizeof msg) == SDPA_E_ARG &&
                     strncmp(msg, "items is empty;", 15) == 0, "wasm attendMany: no items: '%s'", msg);
            TU_CHECK(noted(sdpa_wasm_kv_cache_attend_many(g_ctx, items, 1), msg, sizeof msg) == SDPA_E_DIMS &&
                     strncmp(msg, "items[0]: out has dims", 22) == 0, "wasm attendMany: item 0's out: '%s'", msg);
            TU_CHECK(noted(sdpa_wasm_kv_cache_step_many(g_ctx, items, 2), msg, sizeof msg) == SDPA_E_ARG &&
                     strncmp(msg, "items[0]: key is missing", 24) == 0, "wasm stepMany: item 0's key: '%s'", msg);
        }
        sdpa_kv_cache_free(c);
    }
    TU_CHECK(passed > 100, "wasm cache calls: only %ld passing calls in the grid", passed);
    free(bq); free(bk); free(bv); free(bm); free(bo); free(bc); free(bs); free(bsk);
}

/* A public entry names itself once, by its C name, before the words its
 * wasm entry (what JS calls) gives alone; a part of a call (an item) is
 * named where it is; the name never takes the message past its buffer. */
static void named_case(const char * desc, sdpa_status want, const char * fn, sdpa_status got, const char * msg) {
    TU_CHECK(got != SDPA_OK, "%s: the wasm entry accepted the call", desc);
    same_as_entry(desc, want, fn, got, msg);
}

static void test_named_once(void) {
    char msg[SDPA_ERROR_CAP];
    float x[64] = { 0 }, w[2 * 64] = { 0 }, y[2 * 64] = { 0 };
    const sdpa_tensor tx = tu_tensor2(x, SDPA_DTYPE_FLOAT32, 1, 64), tw = tu_tensor2(w, SDPA_DTYPE_FLOAT32, 2, 64);
    sdpa_tensor ty = tu_tensor2(y, SDPA_DTYPE_FLOAT32, 1, 2), tn = tu_tensor2(y, SDPA_DTYPE_FLOAT32, 1, 64);
    sdpa_status got = noted(sdpa_wasm_linear(g_ctx, NULL, &tw, &ty, 0), msg, sizeof msg);
    named_case("named: linear x NULL", sdpa_linear(g_ctx, NULL, &tw, &ty, 0), "sdpa_linear", got, msg);
    TU_CHECK(strcmp(msg, "x is missing (NULL)") == 0, "named: the wasm linear's words: '%s'", msg);
    got = noted(sdpa_wasm_rms_norm(g_ctx, &tx, &tx, NAN, &tn), msg, sizeof msg);
    named_case("named: rms_norm eps NaN", sdpa_rms_norm(g_ctx, &tx, &tx, NAN, &tn), "sdpa_rms_norm", got, msg);
    got = noted(sdpa_wasm_swiglu(g_ctx, &tx, &tw, &tn), msg, sizeof msg);
    named_case("named: swiglu up of other dims", sdpa_swiglu(g_ctx, &tx, &tw, &tn), "sdpa_swiglu", got, msg);
    const int32_t ids[1] = { 5 };
    got = noted(sdpa_wasm_embed(g_ctx, &tw, ids, 1, &tn), msg, sizeof msg);
    named_case("named: embed id past the table", sdpa_embed(g_ctx, &tw, ids, 1, &tn), "sdpa_embed", got, msg);
    got = noted(sdpa_wasm_quantize(g_ctx, &tx, NULL), msg, sizeof msg);
    named_case("named: quantize out NULL", sdpa_quantize(g_ctx, &tx, NULL), "sdpa_quantize", got, msg);
    got = noted(sdpa_wasm_ctx_reserve_pages(g_ctx, -1), msg, sizeof msg);
    named_case("named: reserve_pages -1", sdpa_ctx_reserve_pages(g_ctx, -1), "sdpa_ctx_reserve_pages", got, msg);
    static const unsigned char junk[24] = "not a group header here";
    uint32_t need, layers, at, mb;
    got = noted(sdpa_wasm_kv_group_header_check(g_ctx, junk, sizeof junk, 1, &need, &layers, &at, &mb), msg, sizeof msg);
    named_case("named: group header junk", sdpa_kv_group_header_check(g_ctx, junk, sizeof junk, 1, &need, &layers, &at, &mb),
                  "sdpa_kv_group_header_check", got, msg);
    /* the loader: each entry its own name over the same sticky words */
    sdpa_kv_loader * L = NULL;
    if (TU_CHECK(sdpa_kv_load_begin(g_ctx, 0, &L) == SDPA_OK, "named: load_begin")) {
        size_t took = 0;
        got = noted(sdpa_wasm_kv_load_feed(g_ctx, L, junk, sizeof junk, &took), msg, sizeof msg);
        named_case("named: load_feed junk", sdpa_kv_load_feed(L, junk, sizeof junk, &took), "sdpa_kv_load_feed", got, msg);
        sdpa_kv_cache * c = NULL;
        named_case("named: load_finish after junk", sdpa_kv_load_finish(L, &c), "sdpa_kv_load_finish", got, msg);
        sdpa_kv_load_free(L);
    }
    got = noted(sdpa_kv_cache_load(g_ctx, junk, sizeof junk, 0, &(sdpa_kv_cache *){ NULL }), msg, sizeof msg);
    TU_CHECK(got == SDPA_E_FORMAT && strncmp(msg, "sdpa_kv_cache_load: this is not saved KV state", 46) == 0,
             "named: a whole load of junk: '%s'", msg);
    /* an item of attendMany: "items[0]: " after the call's name */
    sdpa_kv_cache * c = NULL;
    if (TU_CHECK(sdpa_kv_cache_create(g_ctx, 1, 8, 1, 64, SDPA_DTYPE_FLOAT32, &c) == SDPA_OK, "named: create")) {
        sdpa_tensor q = tu_tensor4(x, SDPA_DTYPE_FLOAT32, 1, 1, 1, 64), o = tu_tensor4(y, SDPA_DTYPE_FLOAT32, 1, 1, 1, 64);
        sdpa_options opt = { 0 };
        opt.start_pos = 3;  /* past the 0 rows written */
        const sdpa_attend_item item = { c, &q, NULL, &opt, &o, NULL, NULL };
        got = noted(sdpa_wasm_kv_cache_attend_many(g_ctx, &item, 1), msg, sizeof msg);
        named_case("named: attend_many's item", sdpa_kv_cache_attend_many(g_ctx, &item, 1), "sdpa_kv_cache_attend_many", got, msg);
        TU_CHECK(got == SDPA_E_START_POS && strncmp(msg, "items[0]: startPos 3 + query length 1", 37) == 0, "named: the item's words: '%s'", msg);
        sdpa_kv_cache_free(c);
    }
    /* sdpa_named's bounds: a message at the buffer's cap keeps the name and a terminator, cut at the end */
    char words[2 * SDPA_ERROR_CAP];
    memset(words, 'w', sizeof words - 1);
    words[sizeof words - 1] = '\0';
    TU_CHECK(sdpa_named(g_ctx, sdpa_fail(g_ctx, SDPA_E_ARG, "%s", words), "sdpa_kv_cache_step") == SDPA_E_ARG,
             "named: the status passes through");
    const char * m = sdpa_ctx_last_error(g_ctx);
    TU_CHECK(strlen(m) == SDPA_ERROR_CAP - 1 && strncmp(m, "sdpa_kv_cache_step: www", 23) == 0 && strspn(m + 20, "w") == SDPA_ERROR_CAP - 21,
             "named: a full message: %zu characters, '%.40s...'", strlen(m), m);
    memset(words, 'n', sizeof words - 1);  /* a name longer than the buffer: cut, with ": " kept */
    sdpa_fail(g_ctx, SDPA_E_ARG, "lost");
    sdpa_named(g_ctx, SDPA_E_ARG, words);
    m = sdpa_ctx_last_error(g_ctx);
    TU_CHECK(strlen(m) == SDPA_ERROR_CAP - 1 && strspn(m, "n") == SDPA_ERROR_CAP - 3 && strcmp(m + SDPA_ERROR_CAP - 3, ": ") == 0,
             "named: a name past the buffer: %zu characters", strlen(m));
    sdpa_fail(g_ctx, SDPA_E_ARG, "kept");
    TU_CHECK(sdpa_named(g_ctx, SDPA_OK, "sdpa_custom") == SDPA_OK && strcmp(sdpa_ctx_last_error(g_ctx), "kept") == 0,
             "named: a success names nothing");
    sdpa_clear_error(g_ctx);
}

int main(void) {
    double t0 = tu_seconds();
    const char * vb = getenv("SDPA_TEST_VERBOSE");
    g_verbose = vb && vb[0] && strcmp(vb, "0") != 0;
    sdpa_status st = SDPA_E_ARG;
    g_ctx = sdpa_ctx_create(2, &st);
    if (!g_ctx || st != SDPA_OK) {
        printf("FATAL: sdpa_ctx_create(2) failed: %s\n", sdpa_status_code(st));
        return 1;
    }
    test_misc();
    test_custom_baseline();
    test_custom_rules();
    test_cache_create();
    test_cache_rules();
    test_wasm_rows();
    test_wasm_custom();
    test_check_create();
    test_wasm_cache_calls();
    test_named_once();
    printf("  %ld rejected-call cases, %.2f s\n", g_cases, tu_seconds() - t0);
    sdpa_ctx_free(g_ctx);
    return tu_summary("test_validation");
}
