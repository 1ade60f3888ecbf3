/* golden_outputs.c: one FNV-1a hash of the output bytes per fixed, seeded
 * case, for proving that a refactor of the kernels changed no output bit.
 *
 * The cases cover every cache dtype (caller tensors, float32, float16 with
 * and without non-finite pages, int8 including D > 1024 where K is decoded),
 * odd and tiny head dims, plain and windowed (ring) caches with sink rows,
 * float and bool masks, window, sink logits, softcap, custom scales (one
 * that overflows to the reference fallback), decode and prefill, split-KV
 * lengths, GQA groups of 1..8, each run with 1 and 2 threads. The output is
 * one line per case and thread count: "<case> t<threads> <hash>".
 *
 * Run it at two commits and diff the outputs (native, then wasm):
 *   cmake -S . -B build/native -G Ninja && cmake --build build/native --target golden_outputs
 *   build/native/golden_outputs > /tmp/golden-native.txt
 *   NODE_PATH=/usr/share/nodejs emcmake cmake -S . -B build/wasm -G Ninja
 *   cmake --build build/wasm --target golden_outputs
 *   node build/wasm/golden_outputs.js > /tmp/golden-wasm.txt
 * (the target is not part of `all`: it builds only when asked for). Each
 * build must match itself across the two commits; native and wasm need not
 * match each other (SIMDe, libm), though they did when this tool was added.
 */
#include "sdpa.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- seeded data ----------------------------------------------------------- */

typedef struct rng { uint64_t s; } rng;
static uint64_t rng_u64(rng * r) {  /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(rng * r, float lo, float hi) {
    return lo + (hi - lo) * (float)((double)(rng_u64(r) >> 11) * 0x1p-53);
}
static void fill(rng * r, float * x, size_t n, float amp) {
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(r, -amp, amp);
}
/* rows of D with a per-row magnitude (int8 scales and zero points vary) */
static void fill_rows(rng * r, float * x, size_t rows, int32_t D, float amp) {
    for (size_t i = 0; i < rows; i++) {
        const float a = amp * rng_uniform(r, 0.05f, 1.0f), off = rng_uniform(r, -0.5f, 0.5f) * a;
        for (int32_t d = 0; d < D; d++) x[i * (size_t)D + (size_t)d] = off + rng_uniform(r, -a, a);
    }
}

static uint64_t fnv1a(uint64_t h, const void * data, size_t n) {
    const unsigned char * p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}
#define FNV_BASIS 0xCBF29CE484222325ull

static void * xmalloc(size_t n) {
    void * p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "golden_outputs: out of memory\n"); exit(2); }
    return p;
}

static sdpa_tensor tensor4(void * data, int32_t dtype, int32_t a, int32_t b, int32_t c, int32_t d) {
    sdpa_tensor t = { data, (size_t)a * b * c * d, dtype, 4, { a, b, c, d } };
    return t;
}
static sdpa_tensor tensor2(void * data, int32_t dtype, int32_t a, int32_t b) {
    sdpa_tensor t = { data, (size_t)a * b, dtype, 2, { a, b, 0, 0 } };
    return t;
}

/* ---- cases ------------------------------------------------------------------ */

enum { CUSTOM, CACHE, RING };       /* caller tensors; a plain cache's attend; a windowed cache's steps */
enum { NO_MASK, FLOAT_MASK, BOOL_MASK };
#define F32 SDPA_DTYPE_FLOAT32
#define F16 SDPA_DTYPE_FLOAT16
#define I8 SDPA_DTYPE_INT8

typedef struct golden_case {
    const char * name;
    int kind, dtype;                /* dtype: the cache's (CUSTOM: float32 tensors) */
    int32_t B, Sq, Hq, Hkv, D;
    int32_t keys;                   /* CUSTOM: Skv; CACHE: rows written (max_seq_len = keys + 37); RING: rows stepped */
    int32_t start_pos;              /* CUSTOM / CACHE: the query's start_pos */
    int causal, mask;
    int32_t window, sink_tokens;    /* options window; RING: the cache's window and sink rows */
    int sinks;                      /* sink logits per head */
    float softcap, scale;           /* scale 0: the default */
    int nonfinite;                  /* 1: Inf / NaN / huge values in K and V rows; 2: only rows no query sees;
                                     * 3: rows holding +-3e38 (float16 Inf, an int8 scale of Inf) */
    int32_t step;                   /* RING: rows per step after the first `Sq` (decode: 1) */
} golden_case;

static const golden_case CASES[] = {
    /* caller tensors (float32, transposed into tiles) */
    { "custom prefill causal", CUSTOM, F32, 1, 70, 4, 2, 64, 70, 0, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },
    { "custom prefill odd D", CUSTOM, F32, 2, 19, 3, 1, 37, 150, 100, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },
    { "custom D=1", CUSTOM, F32, 1, 9, 2, 2, 1, 77, 0, 0, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },
    { "custom D=3 gqa8", CUSTOM, F32, 1, 5, 8, 1, 3, 200, 0, 0, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },
    { "custom float mask", CUSTOM, F32, 1, 13, 4, 2, 20, 130, 0, 0, FLOAT_MASK, 0, 0, 0, 0, 0, 0, 0 },
    { "custom bool mask", CUSTOM, F32, 2, 6, 6, 3, 48, 90, 0, 0, BOOL_MASK, 0, 0, 0, 0, 0, 0, 0 },
    { "custom window sinks softcap", CUSTOM, F32, 1, 33, 4, 1, 32, 300, 200, 1, NO_MASK, 50, 0, 1, 30.0f, 0, 0, 0 },
    { "custom scale", CUSTOM, F32, 1, 7, 2, 1, 16, 64, 57, 1, NO_MASK, 0, 0, 0, 0, 0.37f, 0, 0 },
    { "custom scale overflow", CUSTOM, F32, 1, 4, 2, 2, 8, 40, 0, 0, NO_MASK, 0, 0, 0, 0, 1e30f, 0, 0 },
    { "custom decode split", CUSTOM, F32, 1, 1, 8, 2, 128, 3000, 2999, 1, NO_MASK, 0, 0, 1, 0, 0, 0, 0 },
    { "custom decode split bool", CUSTOM, F32, 1, 1, 4, 1, 67, 1300, 0, 0, BOOL_MASK, 0, 0, 0, 0, 0, 0, 0 },
    { "custom decode window", CUSTOM, F32, 1, 1, 2, 1, 64, 5000, 4999, 1, NO_MASK, 700, 0, 0, 0, 0, 0, 0 },
    { "custom nonfinite", CUSTOM, F32, 1, 11, 2, 1, 24, 80, 69, 1, NO_MASK, 0, 0, 0, 0, 0, 1, 0 },
    { "custom D=1100", CUSTOM, F32, 1, 3, 2, 1, 1100, 150, 147, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },

    /* plain caches, every dtype: float32, float16 (finite in place; non-finite decoded), int8 */
#define CACHE_CASES(tag, dt)                                                                                         \
    { tag " prefill causal", CACHE, dt, 1, 70, 4, 2, 64, 200, 130, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },              \
    { tag " prefill gqa odd D", CACHE, dt, 2, 9, 6, 2, 33, 150, 141, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },            \
    { tag " D=1", CACHE, dt, 1, 5, 2, 1, 1, 100, 95, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },                            \
    { tag " D=5 single row", CACHE, dt, 1, 1, 1, 1, 5, 300, 299, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },                \
    { tag " mha decode", CACHE, dt, 1, 1, 4, 4, 64, 500, 499, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },                   \
    { tag " float mask", CACHE, dt, 1, 12, 4, 2, 40, 130, 0, 0, FLOAT_MASK, 0, 0, 0, 0, 0, 0, 0 },                 \
    { tag " bool mask", CACHE, dt, 1, 3, 8, 2, 128, 260, 0, 0, BOOL_MASK, 0, 0, 0, 0, 0, 0, 0 },                  \
    { tag " window sinks softcap", CACHE, dt, 1, 17, 4, 1, 64, 600, 583, 1, NO_MASK, 150, 0, 1, 20.0f, 0, 0, 0 },  \
    { tag " scale", CACHE, dt, 1, 6, 4, 2, 32, 100, 94, 1, NO_MASK, 0, 0, 0, 0, 0.05f, 0, 0 },                      \
    { tag " decode split gqa4", CACHE, dt, 1, 1, 8, 2, 128, 3000, 2999, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },         \
    { tag " decode split mqa", CACHE, dt, 1, 1, 8, 1, 64, 4100, 4099, 1, NO_MASK, 0, 0, 1, 0, 0, 0, 0 },           \
    { tag " decode split odd D", CACHE, dt, 1, 1, 3, 1, 17, 2049, 2048, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },         \
    { tag " decode window", CACHE, dt, 1, 1, 4, 2, 64, 5000, 4999, 1, NO_MASK, 1000, 0, 0, 0, 0, 0, 0 },           \
    { tag " not causal", CACHE, dt, 2, 4, 2, 1, 24, 90, 0, 0, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },                      \
    { tag " nonfinite", CACHE, dt, 1, 8, 4, 2, 32, 200, 192, 1, NO_MASK, 0, 0, 0, 0, 0, 1, 0 },                    \
    { tag " nonfinite unseen", CACHE, dt, 1, 8, 4, 2, 32, 250, 100, 1, NO_MASK, 0, 0, 0, 0, 0, 2, 0 },             \
    { tag " nonfinite decode split", CACHE, dt, 1, 1, 4, 1, 48, 2000, 1900, 1, NO_MASK, 0, 0, 0, 0, 0, 2, 0 },     \
    { tag " D=300", CACHE, dt, 1, 5, 4, 1, 300, 140, 135, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },                       \
    { tag " D=1030", CACHE, dt, 1, 4, 4, 2, 1030, 140, 136, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },                     \
    { tag " D=1030 decode", CACHE, dt, 1, 1, 2, 1, 1030, 1500, 1499, 1, NO_MASK, 0, 0, 1, 0, 0, 0, 0 },             \
    { tag " 5 rows", CACHE, dt, 1, 5, 2, 2, 40, 160, 155, 1, NO_MASK, 0, 0, 0, 0, 0, 0, 0 },                       \
    { tag " 13 rows float mask", CACHE, dt, 1, 13, 1, 1, 12, 100, 0, 0, FLOAT_MASK, 0, 0, 0, 0, 0, 0, 0 },         \
    { tag " nonfinite decode split seen", CACHE, dt, 1, 1, 4, 1, 48, 2000, 1999, 1, NO_MASK, 0, 0, 0, 0, 0, 1, 0 }, \
    { tag " huge rows", CACHE, dt, 1, 9, 2, 1, 16, 150, 141, 1, NO_MASK, 0, 0, 0, 0, 0, 3, 0 },                    \
    { tag " huge rows decode split", CACHE, dt, 1, 1, 2, 1, 16, 1800, 1799, 1, NO_MASK, 0, 0, 0, 0, 0, 3, 0 },

    CACHE_CASES("f32", F32)
    CACHE_CASES("f16", F16)
    CACHE_CASES("i8", I8)

    /* windowed caches: a prefill of Sq rows, then steps of `step` rows (decode: 1) */
#define RING_CASES(tag, dt)                                                                                          \
    { tag " ring sinks decode", RING, dt, 1, 40, 4, 2, 64, 400, 0, 1, NO_MASK, 128, 4, 0, 0, 0, 0, 1 },            \
    { tag " ring sinks prefill", RING, dt, 1, 200, 8, 2, 32, 700, 0, 1, NO_MASK, 100, 70, 1, 0, 0, 0, 64 },        \
    { tag " ring narrow window", RING, dt, 2, 10, 2, 1, 48, 500, 0, 1, NO_MASK, 300, 1, 0, 10.0f, 0, 0, 7 },        \
    { tag " ring odd D", RING, dt, 1, 65, 3, 1, 19, 330, 0, 1, NO_MASK, 64, 0, 0, 0, 0, 0, 1 },                    \
    { tag " ring nonfinite", RING, dt, 1, 30, 4, 1, 16, 300, 0, 1, NO_MASK, 96, 3, 0, 0, 0, 1, 5 },

    RING_CASES("f32", F32)
    RING_CASES("f16", F16)
    RING_CASES("i8", I8)
};

/* Plants non-finite or huge values in K and V rows [0, rows) (D each):
 * every 37th row gets one Inf, NaN, -Inf or 1e6 (float16 Inf) element.
 * `unseen_from` >= 0: only rows >= it (keys no causal query row sees).
 * `huge`: the rows get +3e38 and -3e38 instead (last two elements). */
static void plant_nonfinite(float * k, float * v, size_t rows, int32_t D, int64_t unseen_from, int huge, rng * r) {
    const float bad[4] = { INFINITY, NAN, -INFINITY, 1e6f };
    for (size_t t = 0; t < rows; t++) {
        if (unseen_from >= 0 ? (int64_t)t < unseen_from : t % 37 != 5) continue;
        if (unseen_from >= 0 && t % 7 != 0) continue;
        const size_t d = (size_t)(rng_u64(r) % (uint64_t)D);
        if (huge) {
            float * row = (t % 2 ? k : v) + t * (size_t)D;
            row[D - 1] = 3e38f;
            row[D > 1 ? D - 2 : 0] = -3e38f;
            continue;
        }
        k[t * (size_t)D + d] = bad[t % 4];
        v[t * (size_t)D + (d * 7) % (size_t)D] = bad[(t + 1) % 4];
    }
}

static void make_options(const golden_case * c, sdpa_options * o, sdpa_tensor * sinks_t, float * sinks,
                         int64_t start_pos) {
    memset(o, 0, sizeof *o);
    o->start_pos = start_pos;
    o->is_causal = c->causal;
    o->has_scale = c->scale != 0.0f;
    o->scale = c->scale;
    o->window = c->kind == RING ? 0 : c->window;
    o->softcap = c->softcap;
    if (c->sinks) {
        *sinks_t = tensor4(sinks, F32, 1, 1, 1, c->Hq);
        sinks_t->rank = 1;
        sinks_t->dims[0] = c->Hq;
        o->sinks = sinks_t;
    }
}

static int fail(const golden_case * c, const char * what, sdpa_status st, sdpa_ctx * ctx) {
    fprintf(stderr, "golden_outputs: %s: %s failed: %s (%s)\n", c->name, what, sdpa_status_code(st), sdpa_ctx_last_error(ctx));
    return 1;
}

/* Runs one case on ctx; *hash gets the FNV-1a of every output byte. */
static int run_case(const golden_case * c, sdpa_ctx * ctx, uint64_t seed, uint64_t * hash) {
    rng r = { seed };
    const int32_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    float sinks[64];
    for (int32_t h = 0; h < Hq; h++) sinks[h] = rng_uniform(&r, -2.0f, 3.0f);
    sdpa_tensor sinks_t;
    sdpa_options o;
    sdpa_status st;
    *hash = FNV_BASIS;

    if (c->kind == RING) {
        sdpa_kv_cache * cache = NULL;
        const int32_t L = c->keys;
        st = sdpa_kv_cache_create_windowed(ctx, B, L + 8, Hkv, D, c->dtype, c->window, c->sink_tokens, &cache);
        if (st != SDPA_OK) return fail(c, "create_windowed", st, ctx);
        const int32_t most = c->Sq > c->step ? c->Sq : c->step;
        float * q = xmalloc(sizeof(float) * (size_t)B * most * Hq * D);
        float * k = xmalloc(sizeof(float) * (size_t)B * most * Hkv * D);
        float * v = xmalloc(sizeof(float) * (size_t)B * most * Hkv * D);
        float * out = xmalloc(sizeof(float) * (size_t)B * most * Hq * D);
        int err = 0;
        for (int32_t pos = 0; pos < L && !err;) {
            const int32_t n = pos == 0 ? c->Sq : (L - pos < c->step ? L - pos : c->step);
            fill(&r, q, (size_t)B * n * Hq * D, 1.5f);
            fill_rows(&r, k, (size_t)B * n * Hkv, D, 2.0f);
            fill_rows(&r, v, (size_t)B * n * Hkv, D, 2.0f);
            if (c->nonfinite && pos > 0 && pos % 3 == 0) plant_nonfinite(k, v, (size_t)B * n * Hkv, D, -1, 0, &r);
            const sdpa_tensor tq = tensor4(q, F32, B, n, Hq, D), tk = tensor4(k, F32, B, n, Hkv, D);
            const sdpa_tensor tv = tensor4(v, F32, B, n, Hkv, D);
            sdpa_tensor to = tensor4(out, F32, B, n, Hq, D);
            make_options(c, &o, &sinks_t, sinks, pos);
            o.window = c->softcap ? c->window / 2 : 0;  /* a narrower window than the cache's, sometimes */
            st = sdpa_kv_cache_step(ctx, cache, &tq, &tk, &tv, NULL, &o, &to);
            if (st != SDPA_OK) err = fail(c, "step", st, ctx);
            *hash = fnv1a(*hash, out, sizeof(float) * to.len);
            pos += n;
        }
        sdpa_kv_cache_free(cache);
        free(q); free(k); free(v); free(out);
        return err;
    }

    const int32_t Sq = c->Sq, keys = c->keys;
    const size_t nq = (size_t)B * Sq * Hq * D, nkv = (size_t)B * keys * Hkv * D;
    float * q = xmalloc(sizeof(float) * nq), * out = xmalloc(sizeof(float) * nq);
    float * k = xmalloc(sizeof(float) * nkv), * v = xmalloc(sizeof(float) * nkv);
    fill(&r, q, nq, 1.5f);
    fill_rows(&r, k, (size_t)B * keys * Hkv, D, 2.0f);
    fill_rows(&r, v, (size_t)B * keys * Hkv, D, 2.0f);
    if (c->nonfinite) {
        /* rows are [B, keys, Hkv]; "unseen": keys past every causal query row's limit */
        const int64_t unseen = c->nonfinite == 2 ? (int64_t)(c->start_pos + Sq) * Hkv : -1;
        if (B == 1) plant_nonfinite(k, v, (size_t)keys * Hkv, D, unseen, c->nonfinite == 3, &r);
    }
    const int32_t n_mask = c->kind == CACHE ? keys + 37 : keys;
    void * mask = NULL;
    sdpa_tensor tm = { 0 };
    if (c->mask == FLOAT_MASK) {
        float * m = xmalloc(sizeof(float) * (size_t)Sq * n_mask);
        for (size_t i = 0; i < (size_t)Sq * n_mask; i++) {
            const uint64_t u = rng_u64(&r) % 8;
            m[i] = u == 0 ? -INFINITY : u == 1 ? -30.0f : rng_uniform(&r, -1.0f, 1.0f);
        }
        if (Sq > 1) for (int32_t t = 0; t < n_mask; t++) m[t] = -INFINITY;  /* a fully masked row */
        mask = m;
        tm = tensor2(m, F32, Sq, n_mask);
    } else if (c->mask == BOOL_MASK) {
        uint8_t * m = xmalloc((size_t)Sq * n_mask);
        for (size_t i = 0; i < (size_t)Sq * n_mask; i++) m[i] = rng_u64(&r) % 4 != 0;
        if (Sq > 1) memset(m, 0, (size_t)n_mask);  /* a fully masked row */
        mask = m;
        tm = tensor2(m, SDPA_DTYPE_BOOL, Sq, n_mask);
    }
    make_options(c, &o, &sinks_t, sinks, c->start_pos);
    const sdpa_tensor tq = tensor4(q, F32, B, Sq, Hq, D);
    sdpa_tensor to = tensor4(out, F32, B, Sq, Hq, D);
    int err = 0;
    if (c->kind == CUSTOM) {
        const sdpa_tensor tk = tensor4(k, F32, B, keys, Hkv, D), tv = tensor4(v, F32, B, keys, Hkv, D);
        st = sdpa_custom(ctx, &tq, &tk, &tv, mask ? &tm : NULL, &o, &to);
        if (st != SDPA_OK) err = fail(c, "custom", st, ctx);
    } else {
        sdpa_kv_cache * cache = NULL;
        st = sdpa_kv_cache_create(ctx, B, keys + 37, Hkv, D, c->dtype, &cache);
        if (st != SDPA_OK) return fail(c, "create", st, ctx);
        const sdpa_tensor tk = tensor4(k, F32, B, keys, Hkv, D), tv = tensor4(v, F32, B, keys, Hkv, D);
        st = sdpa_kv_cache_update(ctx, cache, &tk, &tv, 0);
        if (st != SDPA_OK) err = fail(c, "update", st, ctx);
        if (!err) {
            st = sdpa_kv_cache_attend(ctx, cache, &tq, mask ? &tm : NULL, &o, &to);
            if (st != SDPA_OK) err = fail(c, "attend", st, ctx);
        }
        sdpa_kv_cache_free(cache);
    }
    *hash = fnv1a(*hash, out, sizeof(float) * nq);
    free(q); free(out); free(k); free(v); free(mask);
    return err;
}

int main(int argc, char ** argv) {
    const char * only = argc > 1 ? argv[1] : NULL;  /* optional: cases whose name contains this */
    int failures = 0, ran = 0;
    for (int32_t threads = 1; threads <= 2; threads++) {
        sdpa_status st;
        sdpa_ctx * ctx = sdpa_ctx_create(threads, &st);
        if (!ctx || sdpa_ctx_threads(ctx) != threads) {
            fprintf(stderr, "golden_outputs: no context with %d threads\n", (int)threads);
            return 2;
        }
        for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
            if (only && !strstr(CASES[i].name, only)) continue;
            uint64_t hash = 0;
            const int err = run_case(&CASES[i], ctx, 1000 + i, &hash);
            failures += err;
            ran++;
            printf("%-36s t%d %016llx%s\n", CASES[i].name, (int)threads, (unsigned long long)hash, err ? " FAILED" : "");
        }
        sdpa_ctx_free(ctx);
    }
    fprintf(stderr, "golden_outputs: %d runs, %d failed\n", ran, failures);
    return failures != 0;
}
