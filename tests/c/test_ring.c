/*
 * test_ring.c: the windowed (ring) KV cache of include/sdpa.h
 * (sdpa_kv_cache_create_windowed). Sequences several times longer than the
 * ring are written by decode steps and by prefill steps of any length (a
 * step is cut into page-sized pieces inside), and every output is checked
 * against the tests' float64 reference over the *whole* sequence kept on the
 * host, with a bool mask that spells the contract's visibility out: key t is
 * seen by query row p when t <= p and (t > p - W or t < S). On top:
 * 1 vs 2 threads bit-identical; the ring against a plain cache with the same
 * window (bit-identical for decode steps, S = 0); flat storage (pages held
 * never above the ring's size); reads of kept rows equal the host's, reads
 * of evicted rows are E_CAPACITY; every new rule's error, with the cache
 * byte-for-byte unchanged; fork and truncate; float16 and int8 rings.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

enum { B = 2, HQ = 4, H = 2, D = 12 };

static sdpa_ctx * g_one, * g_two;
static tu_rng g_rng;

/* A ring cache on each context (same writes) and the host's whole sequence. */
typedef struct model {
    sdpa_kv_cache * c1, * c2;
    int32_t W, S, L;      /* window, sink rows, maxSeqLen */
    float * k, * v;       /* host [B, L, H, D] */
    int32_t length;
} model;

static size_t row_floats(void) { return (size_t)H * D; }

static int model_new(model * m, int32_t dtype, int32_t W, int32_t S, int32_t L) {
    memset(m, 0, sizeof *m);
    m->W = W; m->S = S; m->L = L;
    sdpa_status s1 = sdpa_kv_cache_create_windowed(g_one, B, L, H, D, dtype, W, S, &m->c1);
    sdpa_status s2 = sdpa_kv_cache_create_windowed(g_two, B, L, H, D, dtype, W, S, &m->c2);
    if (!TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "create W %d S %d: %s %s", W, S, sdpa_status_code(s1), sdpa_ctx_last_error(g_one)))
        return 0;
    TU_CHECK(sdpa_kv_cache_window(m->c1) == W && sdpa_kv_cache_sink_tokens(m->c1) == S, "window/sink getters");
    m->k = tu_malloc((size_t)B * L * row_floats() * 4);
    m->v = tu_malloc((size_t)B * L * row_floats() * 4);
    return 1;
}

static void model_free(model * m) {
    sdpa_kv_cache_free(m->c1);
    sdpa_kv_cache_free(m->c2);
    free(m->k);
    free(m->v);
}

static void host_write(model * m, const float * k, const float * v, int32_t sp, int32_t n) {
    for (int32_t b = 0; b < B; b++)
        for (int32_t t = 0; t < n; t++) {
            memcpy(m->k + ((size_t)b * m->L + sp + t) * row_floats(), k + ((size_t)b * n + t) * row_floats(), row_floats() * 4);
            memcpy(m->v + ((size_t)b * m->L + sp + t) * row_floats(), v + ((size_t)b * n + t) * row_floats(), row_floats() * 4);
        }
    if (sp + n > m->length) m->length = sp + n;
}

/* The contract's visibility as a bool mask [n, sp + n] for the reference. */
static uint8_t * visibility(int32_t sp, int32_t n, int32_t W, int32_t S) {
    const int32_t N = sp + n;
    uint8_t * mask = tu_malloc((size_t)n * N);
    for (int32_t i = 0; i < n; i++)
        for (int32_t t = 0; t < N; t++) {
            const int32_t p = sp + i;
            mask[(size_t)i * N + t] = t <= p && (t > p - W || t < S);
        }
    return mask;
}

/* float64 reference of n query rows at sp over the host's whole sequence. */
static double * reference(const model * m, const float * q, int32_t sp, int32_t n, int32_t W,
                          double softcap, const float * sinks) {
    uint8_t * mask = visibility(sp, n, W, m->S);
    naive_params np = { B, n, m->L, HQ, H, D, NAIVE_MASK_BOOL, mask, sp + n, sp, 0, 0, 0.0, 0, softcap, sinks };
    double * ref = tu_malloc((size_t)B * n * HQ * D * sizeof(double));
    TU_CHECK(naive_sdpa(&np, q, m->k, m->v, ref) == 0, "naive_sdpa rejected its parameters");
    free(mask);
    return ref;
}

static void random_fill(float * x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = tu_rng_uniform(&g_rng, -1.0f, 1.0f);
}

/* The guarantees a windowed cache states, after any write: the sink rows and
 * at least the last W + 64 rows are kept (window_start <= length - W - 64;
 * not after a truncate), reads of
 * them give back what was written (float32), storage never exceeds the sink
 * pages plus the ring, and an evicted row reads as E_CAPACITY. */
static void check_storage(const model * m, const char * what, bool after_write) {
    const int32_t ws = sdpa_kv_cache_window_start(m->c1);
    const int32_t sink_pages = (m->S + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS, ring = (m->W - 2 + SDPA_PAGE_ROWS) / SDPA_PAGE_ROWS + 2;
    TU_CHECK(sdpa_kv_cache_length(m->c1) == m->length, "%s: length %d, expected %d", what, sdpa_kv_cache_length(m->c1), m->length);
    const int32_t kept_from = m->length - m->W - SDPA_PAGE_ROWS;
    TU_CHECK(ws >= m->S && (!after_write || ws <= (kept_from > m->S ? kept_from : m->S)), "%s: window_start %d with length %d, W %d, S %d",
             what, ws, m->length, m->W, m->S);
    TU_CHECK(sdpa_kv_cache_window_start(m->c2) == ws, "%s: the two contexts' caches disagree on window_start", what);
    TU_CHECK(sdpa_kv_cache_pages(m->c1) <= B * H * (sink_pages + ring), "%s: %d pages held, the ring has %d", what,
             sdpa_kv_cache_pages(m->c1), B * H * (sink_pages + ring));
    if (sdpa_kv_cache_dtype(m->c1) != SDPA_DTYPE_FLOAT32) return;
    /* the kept rows, sink rows and window rows, read back */
    const int32_t spans[2][2] = { { 0, m->S < m->length ? m->S : m->length }, { ws, m->length } };
    for (int j = 0; j < 2; j++) {
        const int32_t start = spans[j][0], n = spans[j][1] - spans[j][0];
        if (n <= 0) continue;
        float * k = tu_malloc((size_t)B * n * row_floats() * 4), * v = tu_malloc((size_t)B * n * row_floats() * 4);
        sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D);
        sdpa_status st = sdpa_kv_cache_read(g_one, m->c1, start, n, &tk, &tv);
        int same = st == SDPA_OK;
        for (int32_t b = 0; same && b < B; b++)
            same = memcmp(k + (size_t)b * n * row_floats(), m->k + ((size_t)b * m->L + start) * row_floats(), (size_t)n * row_floats() * 4) == 0 &&
                   memcmp(v + (size_t)b * n * row_floats(), m->v + ((size_t)b * m->L + start) * row_floats(), (size_t)n * row_floats() * 4) == 0;
        TU_CHECK(same, "%s: rows %d .. %d read back differ from what was written (%s %s)", what, start, start + n - 1,
                 sdpa_status_code(st), sdpa_ctx_last_error(g_one));
        free(k);
        free(v);
    }
    if (ws > m->S) {
        float k[H * D * B], v[H * D * B];
        sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, 1, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, 1, H, D);
        sdpa_status st = sdpa_kv_cache_read(g_one, m->c1, ws - 1, 1, &tk, &tv);
        TU_CHECK(st == SDPA_E_CAPACITY, "%s: read of evicted row %d: %s, expected E_CAPACITY", what, ws - 1, sdpa_status_code(st));
    }
}

typedef struct step_opts {
    int32_t window;    /* 0: the cache's */
    float softcap;
    const float * sinks;  /* [HQ] or NULL */
} step_opts;

/* One step of n rows appended on both caches, checked against the reference
 * when `check` (it costs O(length)); the 2-thread output must always be
 * bit-identical to the 1-thread one. */
static void step_and_check(model * m, int32_t n, const step_opts * so, const char * what, bool check) {
    const int32_t sp = m->length;
    const size_t nq = (size_t)B * n * HQ * D, nk = (size_t)B * n * row_floats();
    float * q = tu_malloc(nq * 4), * k = tu_malloc(nk * 4), * v = tu_malloc(nk * 4);
    float * o1 = tu_malloc(nq * 4), * o2 = tu_malloc(nq * 4);
    random_fill(q, nq); random_fill(k, nk); random_fill(v, nk);
    tu_fill_nan(o1, nq); tu_fill_nan(o2, nq);
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, n, HQ, D), tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D),
                tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D), to1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, B, n, HQ, D),
                to2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, B, n, HQ, D);
    float sink_data[HQ];
    sdpa_tensor tsinks;
    if (so->sinks) { memcpy(sink_data, so->sinks, sizeof sink_data); tsinks = tu_tensor4(sink_data, SDPA_DTYPE_FLOAT32, HQ, 1, 1, 1); tsinks.rank = 1; }
    sdpa_options o = { sp, 1, 0, 0.0f, 0.0f, so->window, so->softcap, so->sinks ? &tsinks : NULL, NULL, NULL };
    tu_dirty_error(g_one);
    sdpa_status s1 = sdpa_kv_cache_step(g_one, m->c1, &tq, &tk, &tv, NULL, &o, &to1);
    sdpa_status s2 = sdpa_kv_cache_step(g_two, m->c2, &tq, &tk, &tv, NULL, &o, &to2);
    host_write(m, k, v, sp, n);
    const int32_t dims[4] = { B, n, HQ, D };
    char label[256];
    snprintf(label, sizeof label, "%s: step of %d rows at %d", what, n, sp);
    if (check) {
        double * ref = reference(m, q, sp, n, so->window ? so->window : m->W, so->softcap, so->sinks);
        tu_check_output(g_one, s1, label, o1, ref, nq, dims);
        free(ref);
    } else {
        TU_CHECK(s1 == SDPA_OK, "%s: %s %s", label, sdpa_status_code(s1), sdpa_ctx_last_error(g_one));
    }
    TU_CHECK(s2 == SDPA_OK, "%s (2 threads): %s", label, sdpa_status_code(s2));
    tu_identical(label, o2, o1, nq, dims);
    free(q); free(k); free(v); free(o1); free(o2);
}

/* Attend alone (no write) for the last n rows written, against the reference. */
static void attend_and_check(model * m, int32_t n, const char * what) {
    const int32_t sp = m->length - n;
    const size_t nq = (size_t)B * n * HQ * D;
    float * q = tu_malloc(nq * 4), * o = tu_malloc(nq * 4);
    random_fill(q, nq);
    tu_fill_nan(o, nq);
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, n, HQ, D), to = tu_tensor4(o, SDPA_DTYPE_FLOAT32, B, n, HQ, D);
    sdpa_options opt = { sp, 1, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, NULL };
    tu_dirty_error(g_one);
    sdpa_status st = sdpa_kv_cache_attend(g_one, m->c1, &tq, NULL, &opt, &to);
    double * ref = reference(m, q, sp, n, m->W, 0.0, NULL);
    const int32_t dims[4] = { B, n, HQ, D };
    char label[256];
    snprintf(label, sizeof label, "%s: attend of %d rows at %d", what, n, sp);
    tu_check_output(g_one, st, label, o, ref, nq, dims);
    free(ref); free(q); free(o);
}

/* Decode and prefill steps over a sequence several rings long. */
static void test_sequences(void) {
    static const struct { int32_t W, S, L; int32_t chunks[6]; } cases[] = {
        { 1, 0, 300, { 1, 1, 1, 1, 1, 1 } },
        { 5, 1, 400, { 1, 3, 1, 7, 1, 1 } },
        { 64, 0, 700, { 1, 1, 64, 1, 1, 1 } },
        { 65, 4, 700, { 1, 50, 1, 129, 1, 2 } },
        { 130, 70, 900, { 200, 1, 1, 63, 1, 1 } },
        { 128, 4, 1100, { 1, 1, 1, 1, 1, 1 } },      /* gpt-oss: window 128, a few sink tokens */
        { 1000, 0, 2400, { 300, 1, 1, 1, 1, 1 } },   /* split-KV decode over the window */
        { 300, 64, 1500, { 700, 1, 1, 1, 1, 1 } },   /* a prefill longer than the ring */
    };
    static const float sinks[HQ] = { 0.5f, -1.0f, 2.0f, -INFINITY };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        model m;
        if (!model_new(&m, SDPA_DTYPE_FLOAT32, cases[c].W, cases[c].S, cases[c].L)) continue;
        char what[128];
        snprintf(what, sizeof what, "W %d S %d", m.W, m.S);
        snprintf(tu_context, sizeof tu_context, "sequence %s", what);
        int32_t j = 0, checks = 0;
        while (m.length < m.L) {
            int32_t n = cases[c].chunks[j++ % 6];
            if (n > m.L - m.length) n = m.L - m.length;
            /* decode steps far from the interesting boundaries are checked less often (the reference is O(length)) */
            const bool check = n > 1 || checks < 40 || m.length % 37 == 0 || m.L - m.length < 70;
            step_opts so = { 0, 0.0f, NULL };
            if (j % 5 == 3) so.softcap = 0.7f;
            if (j % 4 == 1) so.sinks = sinks;
            if (j % 7 == 2 && m.W > 2) so.window = m.W - 2;  /* a narrower window than the cache's */
            step_and_check(&m, n, &so, what, check);
            if (check) {
                check_storage(&m, what, true);
                checks++;
            }
            if (j % 11 == 0 && m.length >= 3) attend_and_check(&m, m.length % 3 + 1, what);
        }
        check_storage(&m, what, true);
        model_free(&m);
    }
}

/* Decode on a ring and on a plain cache of the whole sequence, same rows.
 * S = 0: the plain cache is attended with the same window and the outputs
 * must be bit-identical (same tiles, same chunks), with a fraction of the
 * pages. S > 0 (the compact dtypes): the plain cache is attended with the
 * visibility as a bool mask (the same stored values; other key chunks, so
 * float32 rounding apart: within 1e-5 (1 + max)). */
static void test_ring_against_plain(sdpa_ctx * ctx, int32_t dtype, const char * name, int32_t W, int32_t S, int32_t L) {
    snprintf(tu_context, sizeof tu_context, "ring (W %d, S %d) vs plain%s, %s", W, S, S ? " + mask" : "", name);
    sdpa_kv_cache * ring = NULL, * plain = NULL;
    TU_CHECK(sdpa_kv_cache_create_windowed(ctx, B, L, H, D, dtype, W, S, &ring) == SDPA_OK, "create ring");
    TU_CHECK(sdpa_kv_cache_create(ctx, B, L, H, D, dtype, &plain) == SDPA_OK, "create plain");
    float q[B * HQ * D], k[B * H * D], v[B * H * D], o1[B * HQ * D], o2[B * HQ * D];
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, 1, HQ, D), tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, 1, H, D),
                tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, 1, H, D), t1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, B, 1, HQ, D),
                t2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, B, 1, HQ, D);
    const int32_t dims[4] = { B, 1, HQ, D };
    for (int32_t pos = 0; pos < L; pos++) {
        random_fill(q, sizeof q / 4); random_fill(k, sizeof k / 4); random_fill(v, sizeof v / 4);
        char what[64];
        snprintf(what, sizeof what, "decode at %d", pos);
        const sdpa_options o = { pos, 1, 0, 0.0f, 0.0f, S ? 0 : W, 0.0f, NULL, NULL, NULL };
        const sdpa_status s1 = sdpa_kv_cache_step(ctx, ring, &tq, &tk, &tv, NULL, &o, &t1);
        sdpa_status s2;
        if (S == 0) {
            s2 = sdpa_kv_cache_step(ctx, plain, &tq, &tk, &tv, NULL, &o, &t2);
        } else {
            uint8_t * mask = visibility(pos, 1, W, S);
            sdpa_tensor tm = tu_tensor2(mask, SDPA_DTYPE_BOOL, 1, pos + 1);
            const sdpa_options om = { pos, 0, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, NULL };
            s2 = sdpa_kv_cache_step(ctx, plain, &tq, &tk, &tv, &tm, &om, &t2);
            free(mask);
        }
        if (!TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "%s: %s / %s", what, sdpa_status_code(s1), sdpa_status_code(s2))) continue;
        if (S == 0) tu_identical(what, o1, o2, sizeof o1 / 4, dims);
        else tu_close_ff(what, o1, o2, sizeof o1 / 4, dims);
    }
    if (S == 0)
        TU_CHECK(sdpa_kv_cache_pages(ring) * 3 < sdpa_kv_cache_pages(plain), "ring holds %d pages, plain %d",
                 sdpa_kv_cache_pages(ring), sdpa_kv_cache_pages(plain));
    sdpa_kv_cache_free(ring);
    sdpa_kv_cache_free(plain);
}

/* Everything a caller can see of a cache, to show a rejected call changed nothing. */
typedef struct snapshot {
    int32_t length, window_start, pages;
    float * k, * v;  /* kept rows: sinks then window */
    size_t n;
} snapshot;

static snapshot take_snapshot(sdpa_kv_cache * c) {
    snapshot s = { sdpa_kv_cache_length(c), sdpa_kv_cache_window_start(c), sdpa_kv_cache_pages(c), NULL, NULL, 0 };
    const int32_t S = sdpa_kv_cache_sink_tokens(c);
    const int32_t sinks = S < s.length ? S : s.length, window = s.length > s.window_start ? s.length - s.window_start : 0;
    s.n = (size_t)(sinks + window) * B * row_floats();
    s.k = tu_malloc(s.n * 4 + 4);
    s.v = tu_malloc(s.n * 4 + 4);
    size_t at = 0;
    const int32_t spans[2][2] = { { 0, sinks }, { s.window_start, window } };
    for (int j = 0; j < 2; j++) {
        if (spans[j][1] <= 0) continue;
        sdpa_tensor tk = tu_tensor4(s.k + at, SDPA_DTYPE_FLOAT32, B, spans[j][1], H, D), tv = tu_tensor4(s.v + at, SDPA_DTYPE_FLOAT32, B, spans[j][1], H, D);
        TU_CHECK(sdpa_kv_cache_read(g_one, c, spans[j][0], spans[j][1], &tk, &tv) == SDPA_OK, "snapshot read: %s", sdpa_ctx_last_error(g_one));
        at += (size_t)spans[j][1] * B * row_floats();
    }
    return s;
}

static void expect_unchanged(sdpa_kv_cache * c, snapshot * before, const char * what) {
    snapshot now = take_snapshot(c);
    TU_CHECK(now.length == before->length && now.window_start == before->window_start && now.pages == before->pages &&
             now.n == before->n && memcmp(now.k, before->k, now.n * 4) == 0 && memcmp(now.v, before->v, now.n * 4) == 0,
             "%s: the rejected call changed the cache", what);
    free(now.k); free(now.v);
}

static void expect_status(sdpa_status got, sdpa_status want, const char * needle, const char * what) {
    TU_CHECK(got == want, "%s: %s, expected %s (%s)", what, sdpa_status_code(got), sdpa_status_code(want), sdpa_ctx_last_error(g_one));
    if (needle) TU_CHECK(tu_contains_ci(sdpa_ctx_last_error(g_one), needle), "%s: message '%s' lacks '%s'", what, sdpa_ctx_last_error(g_one), needle);
}

static void test_rules(void) {
    snprintf(tu_context, sizeof tu_context, "windowed-cache rules");
    const int32_t W = 70, S = 5, L = 1000;
    sdpa_kv_cache * c = NULL, * bad = NULL;
    expect_status(sdpa_kv_cache_create_windowed(g_one, B, L, H, D, SDPA_DTYPE_FLOAT32, 0, 3, &bad), SDPA_E_ARG, "sinkTokens", "sinks without a window");
    expect_status(sdpa_kv_cache_create_windowed(g_one, B, L, H, D, SDPA_DTYPE_FLOAT32, -1, 0, &bad), SDPA_E_DIMS, "window", "negative window");
    expect_status(sdpa_kv_cache_create_windowed(g_one, B, L, H, D, SDPA_DTYPE_FLOAT32, 4, -2, &bad), SDPA_E_DIMS, "sinkTokens", "negative sinks");
    TU_CHECK(bad == NULL, "a rejected create made a cache");
    TU_CHECK(sdpa_kv_cache_create_windowed(g_one, B, L, H, D, SDPA_DTYPE_FLOAT32, W, S, &c) == SDPA_OK, "create");
    const int32_t n = 400;
    float * k = tu_malloc((size_t)B * n * row_floats() * 4), * v = tu_malloc((size_t)B * n * row_floats() * 4);
    random_fill(k, (size_t)B * n * row_floats());
    random_fill(v, (size_t)B * n * row_floats());
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D);
    TU_CHECK(sdpa_kv_cache_update(g_one, c, &tk, &tv, 0) == SDPA_OK, "update of %d rows", n);
    const int32_t ws = sdpa_kv_cache_window_start(c);
    TU_CHECK(ws > S && ws <= n - W - SDPA_PAGE_ROWS, "window_start %d after %d rows", ws, n);
    snapshot before = take_snapshot(c);
    float q[B * 2 * HQ * D], o[B * 2 * HQ * D];
    random_fill(q, sizeof q / 4);
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, 1, HQ, D), to = tu_tensor4(o, SDPA_DTYPE_FLOAT32, B, 1, HQ, D);
    sdpa_tensor k1 = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, 1, H, D), v1 = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, 1, H, D);
    sdpa_options causal = { n - 1, 1, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, NULL };
    /* attention rules */
    uint8_t mask[400];
    memset(mask, 1, sizeof mask);
    sdpa_tensor tm = tu_tensor2(mask, SDPA_DTYPE_BOOL, 1, n);
    sdpa_options plain = causal; plain.is_causal = 0;
    expect_status(sdpa_kv_cache_attend(g_one, c, &tq, &tm, &plain, &to), SDPA_E_ARG, "windowed cache", "attend with a mask");
    expect_status(sdpa_kv_cache_attend(g_one, c, &tq, NULL, &plain, &to), SDPA_E_ARG, "isCausal", "attend not causal");
    sdpa_options wide = causal; wide.window = W + 1;
    expect_status(sdpa_kv_cache_attend(g_one, c, &tq, NULL, &wide, &to), SDPA_E_ARG, "wider", "a wider window");
    sdpa_options past = causal; past.start_pos = n;
    expect_status(sdpa_kv_cache_attend(g_one, c, &tq, NULL, &past, &to), SDPA_E_START_POS, "written", "attend past length");
    sdpa_options old = causal; old.start_pos = ws + W - 2;  /* its window reaches row ws - 1, evicted */
    expect_status(sdpa_kv_cache_attend(g_one, c, &tq, NULL, &old, &to), SDPA_E_START_POS, "evicted", "attend of an old row");
    sdpa_options oldest_ok = causal; oldest_ok.start_pos = ws + W - 1;
    expect_status(sdpa_kv_cache_attend(g_one, c, &tq, NULL, &oldest_ok, &to), SDPA_OK, NULL, "attend of the oldest row with its window kept");
    sdpa_options narrow = old; narrow.window = W - 1;  /* the same row with a narrower window: fine */
    expect_status(sdpa_kv_cache_attend(g_one, c, &tq, NULL, &narrow, &to), SDPA_OK, NULL, "narrower window");
    sdpa_options sink_only = causal; sink_only.start_pos = 2;  /* a row inside the sinks sees only sink rows */
    expect_status(sdpa_kv_cache_attend(g_one, c, &tq, NULL, &sink_only, &to), SDPA_OK, NULL, "a sink row");
    /* writes */
    expect_status(sdpa_kv_cache_update(g_one, c, &k1, &v1, ws - 1), SDPA_E_START_POS, "evicted", "write into an evicted row");
    sdpa_options step_old = causal; step_old.start_pos = ws - 1;
    expect_status(sdpa_kv_cache_step(g_one, c, &tq, &k1, &v1, NULL, &step_old, &to), SDPA_E_START_POS, "evicted", "step into an evicted row");
    sdpa_tensor k3 = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, S + 2, H, D), v3 = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, S + 2, H, D);
    expect_status(sdpa_kv_cache_update(g_one, c, &k3, &v3, 0), SDPA_E_START_POS, "evicted", "a sink write running into evicted rows");
    expect_status(sdpa_kv_cache_update(g_one, c, &k1, &v1, n + 1), SDPA_E_START_POS, "hole", "a hole");
    /* reads and truncate */
    float rk[B * 2 * H * D], rv[B * 2 * H * D];
    sdpa_tensor r2k = tu_tensor4(rk, SDPA_DTYPE_FLOAT32, B, 2, H, D), r2v = tu_tensor4(rv, SDPA_DTYPE_FLOAT32, B, 2, H, D);
    expect_status(sdpa_kv_cache_read(g_one, c, ws - 1, 2, &r2k, &r2v), SDPA_E_CAPACITY, "evicted", "read across window_start");
    expect_status(sdpa_kv_cache_read(g_one, c, S - 1, 2, &r2k, &r2v), SDPA_E_CAPACITY, "evicted", "read across the sinks' end");
    expect_status(sdpa_kv_cache_read(g_one, c, n - 1, 2, &r2k, &r2v), SDPA_E_CAPACITY, "written", "read past length");
    int8_t raw[B * 2 * H * D * 4];
    expect_status(sdpa_kv_cache_read_records(g_one, c, ws - 1, 2, 0, raw, sizeof raw), SDPA_E_CAPACITY, "evicted", "readRaw of an evicted row");
    expect_status(sdpa_kv_cache_truncate(g_one, c, ws - 1), SDPA_E_CAPACITY, "evicted", "truncate into evicted rows");
    expect_unchanged(c, &before, "after the rejected calls");
    /* the edges that must work: write at window_start, read of the sinks and of the window */
    TU_CHECK(sdpa_kv_cache_update(g_one, c, &k1, &v1, ws) == SDPA_OK, "rewrite row window_start: %s", sdpa_ctx_last_error(g_one));
    TU_CHECK(sdpa_kv_cache_update(g_one, c, &k1, &v1, S - 1) == SDPA_OK, "rewrite the last sink row: %s", sdpa_ctx_last_error(g_one));
    free(before.k); free(before.v);
    free(k); free(v);
    sdpa_kv_cache_free(c);
}

/* fork, truncate (to the window and to the sinks), then more steps: each
 * cache keeps matching its own history. */
static void test_fork_truncate(void) {
    snprintf(tu_context, sizeof tu_context, "fork and truncate");
    model a, b;
    if (!model_new(&a, SDPA_DTYPE_FLOAT32, 90, 6, 1200)) return;
    step_opts so = { 0, 0.0f, NULL };
    step_and_check(&a, 300, &so, "a", true);
    for (int i = 0; i < 20; i++) step_and_check(&a, 1, &so, "a", i % 5 == 0);
    /* a fork: a model with the same history and forks of both caches */
    b = a;
    TU_CHECK(sdpa_kv_cache_fork(g_one, a.c1, &b.c1) == SDPA_OK && sdpa_kv_cache_fork(g_two, a.c2, &b.c2) == SDPA_OK, "fork");
    b.k = tu_malloc((size_t)B * b.L * row_floats() * 4);
    b.v = tu_malloc((size_t)B * b.L * row_floats() * 4);
    memcpy(b.k, a.k, (size_t)B * b.L * row_floats() * 4);
    memcpy(b.v, a.v, (size_t)B * b.L * row_floats() * 4);
    for (int i = 0; i < 150; i++) {
        step_and_check(&a, 1, &so, "a after fork", i % 10 == 0);
        step_and_check(&b, i % 10 == 0 ? 5 : 1, &so, "fork", i % 10 == 0);
    }
    check_storage(&a, "a after fork", true);
    check_storage(&b, "fork", true);
    /* a rolls back 64 rows (always possible: the ring keeps W + 64 rows), b drops to its sinks */
    const int32_t keep = a.length - 64;
    TU_CHECK(sdpa_kv_cache_truncate(g_one, a.c1, keep) == SDPA_OK && sdpa_kv_cache_truncate(g_two, a.c2, keep) == SDPA_OK,
             "truncate to %d (window_start %d): %s", keep, sdpa_kv_cache_window_start(a.c1), sdpa_ctx_last_error(g_one));
    a.length = keep;
    TU_CHECK(sdpa_kv_cache_truncate(g_one, b.c1, 4) == SDPA_OK && sdpa_kv_cache_truncate(g_two, b.c2, 4) == SDPA_OK,
             "truncate to 4: %s", sdpa_ctx_last_error(g_one));
    b.length = 4;
    TU_CHECK(sdpa_kv_cache_window_start(b.c1) == b.S, "truncate to the sinks resets window_start: %d", sdpa_kv_cache_window_start(b.c1));
    check_storage(&a, "a truncated", false);
    check_storage(&b, "fork truncated", false);
    for (int i = 0; i < 200; i++) {
        step_and_check(&a, 1, &so, "a after truncate", i < 70 || i % 10 == 0);
        step_and_check(&b, i % 7 == 0 ? 30 : 1, &so, "fork after truncate", i % 7 == 0);
    }
    check_storage(&a, "a at the end", true);
    check_storage(&b, "fork at the end", true);
    model_free(&a);
    model_free(&b);
}

/* Random operation sequences on a windowed cache (ASan and the wasm32 ASan
 * build run these: page recycling, fork and truncate together): each call's
 * status is predicted from the contract's rules and the cache's length and
 * window_start just before; a rejected call changes nothing; steps match the
 * reference; both contexts' caches stay in step. */
static long g_ops, g_rejected;
static void test_random_ops(uint64_t seed) {
    tu_rng_seed(&g_rng, seed);
    static const int32_t sinks[] = { 0, 0, 1, 4, 64, 70 };
    model m;
    const int32_t W = tu_rng_int(&g_rng, 0, 1) ? tu_rng_int(&g_rng, 1, 8) : tu_rng_int(&g_rng, 1, 150);
    if (!model_new(&m, SDPA_DTYPE_FLOAT32, W, tu_rng_pick(&g_rng, sinks, 6), 3000)) return;
    snprintf(tu_context, sizeof tu_context, "random ops, seed %llu (W %d S %d)", (unsigned long long)seed, m.W, m.S);
    for (int op = 0; op < 60 && m.length < m.L - 300; op++) {
        const int kind = tu_rng_int(&g_rng, 0, 5);
        const int32_t ws = sdpa_kv_cache_window_start(m.c1), len = m.length;
        const int32_t n = tu_rng_int(&g_rng, 0, 3) == 0 ? tu_rng_int(&g_rng, 1, 200) : tu_rng_int(&g_rng, 1, 4);
        const int32_t back = tu_rng_int(&g_rng, 0, 2) == 0 ? tu_rng_int(&g_rng, 0, 300) : 0;
        const int32_t sp = len - back < 0 ? 0 : len - back;
        char what[96];
        snprintf(what, sizeof what, "op %d kind %d at %d (+%d), length %d, window_start %d", op, kind, sp, n, len, ws);
        snapshot before = take_snapshot(m.c1);
        sdpa_status want = SDPA_OK, s1 = SDPA_OK, s2 = SDPA_OK;
        if (kind <= 2) {  /* 0, 1: step; 2: update */
            const int32_t first = sp - m.W + 1 > m.S ? sp - m.W + 1 : m.S;
            if (sp + n > m.S && (sp > m.S ? sp : m.S) < ws) want = SDPA_E_START_POS;  /* a write into evicted rows */
            else if (kind < 2 && first <= sp && first < ws) want = SDPA_E_START_POS;   /* its window reaches them */
            const size_t nq = (size_t)B * n * HQ * D, nk = (size_t)B * n * row_floats();
            float * q = tu_malloc(nq * 4), * k = tu_malloc(nk * 4), * v = tu_malloc(nk * 4), * o1 = tu_malloc(nq * 4), * o2 = tu_malloc(nq * 4);
            random_fill(q, nq); random_fill(k, nk); random_fill(v, nk);
            sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, n, HQ, D), tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D),
                        tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D), to1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, B, n, HQ, D),
                        to2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, B, n, HQ, D);
            sdpa_options o = { sp, 1, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, NULL };
            if (kind < 2) {
                s1 = sdpa_kv_cache_step(g_one, m.c1, &tq, &tk, &tv, NULL, &o, &to1);
                s2 = sdpa_kv_cache_step(g_two, m.c2, &tq, &tk, &tv, NULL, &o, &to2);
            } else {
                s1 = sdpa_kv_cache_update(g_one, m.c1, &tk, &tv, sp);
                s2 = sdpa_kv_cache_update(g_two, m.c2, &tk, &tv, sp);
            }
            if (s1 == SDPA_OK && want == SDPA_OK) {
                host_write(&m, k, v, sp, n);
                if (kind < 2) {
                    const int32_t dims[4] = { B, n, HQ, D };
                    double * ref = reference(&m, q, sp, n, m.W, 0.0, NULL);
                    tu_close(what, o1, ref, nq, dims);
                    tu_identical(what, o2, o1, nq, dims);
                    free(ref);
                }
            }
            free(q); free(k); free(v); free(o1); free(o2);
        } else if (kind == 3) {
            if (sp > m.S && sp < ws) want = SDPA_E_CAPACITY;
            s1 = sdpa_kv_cache_truncate(g_one, m.c1, sp);
            s2 = sdpa_kv_cache_truncate(g_two, m.c2, sp);
            if (s1 == SDPA_OK) m.length = sp;
        } else if (kind == 4) {
            sdpa_kv_cache * f1 = NULL, * f2 = NULL;
            s1 = sdpa_kv_cache_fork(g_one, m.c1, &f1);
            s2 = sdpa_kv_cache_fork(g_two, m.c2, &f2);
            if (s1 == SDPA_OK && s2 == SDPA_OK) {  /* go on with the forks; the pages they share stay */
                sdpa_kv_cache_free(m.c1); sdpa_kv_cache_free(m.c2);
                m.c1 = f1; m.c2 = f2;
            }
        } else {
            check_storage(&m, what, false);
        }
        TU_CHECK(s1 == want && s2 == want, "%s: %s / %s, expected %s (%s)", what, sdpa_status_code(s1), sdpa_status_code(s2),
                 sdpa_status_code(want), sdpa_ctx_last_error(g_one));
        g_ops++;
        if (want != SDPA_OK) { g_rejected++; expect_unchanged(m.c1, &before, what); }
        free(before.k); free(before.v);
    }
    check_storage(&m, "random ops at the end", false);
    model_free(&m);
}

int main(void) {
    tu_rng_seed(&g_rng, tu_base_seed(0x51d1f00d));
    if (!tu_ctx_pair(&g_one, &g_two)) return tu_summary("test_ring");
    test_rules();
    test_sequences();
    test_ring_against_plain(g_one, SDPA_DTYPE_FLOAT32, "float32", 100, 0, 1000);
    test_ring_against_plain(g_one, SDPA_DTYPE_FLOAT16, "float16", 100, 0, 1000);
    test_ring_against_plain(g_one, SDPA_DTYPE_INT8, "int8", 100, 0, 1000);
    test_ring_against_plain(g_two, SDPA_DTYPE_FLOAT16, "float16", 70, 3, 400);
    test_ring_against_plain(g_two, SDPA_DTYPE_INT8, "int8", 70, 3, 400);
    test_fork_truncate();
    for (uint64_t seed = 1; seed <= (tu_quick() ? 4 : 12); seed++) test_random_ops(tu_base_seed(0x51d1f00d) + seed);
    printf("  random ops: %ld calls, %ld of them rejected as predicted\n", g_ops, g_rejected);
    sdpa_ctx_free(g_one);
    sdpa_ctx_free(g_two);
    return tu_summary("test_ring");
}
