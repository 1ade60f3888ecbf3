/*
 * test_f16page.c: the float16 newest page of int8 / int4 caches
 * (sdpa_kv_cache_desc.float16_newest_page, docs/CONTRACT.md section 3) through
 * the C API, natively and under the sanitizers: rows of the newest page read
 * as their float16 values (naive_f16_value, the tests' own codec) until a
 * write fills the page, then as what a cache without the page stores for
 * those float16 values; attention after every step against the float64
 * reference (naive_ref.c) over the rows read at that moment; a prefill of
 * many pages in one step (written in pieces) stores the same bits as steps
 * of one row; save / load round trips; stepMany over caches of several page
 * sizes at once (the pool's joint ensure); tiny head dims (a float16 page
 * smaller than an int8 one). The JS side: tests/js/f16page.test.js.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdpa.h"
#include "testutil.h"
#include "naive_ref.h"
#include "cache/page_pool.h"

static sdpa_ctx * g_ctx;
static tu_rng g_rng;

static sdpa_kv_cache * make(int32_t L, int32_t H, int32_t D, int32_t kd, int32_t vd, int32_t f16) {
    const sdpa_kv_cache_desc d = { 1, L, H, D, kd, vd, 0, 0, f16 };
    sdpa_kv_cache * c = NULL;
    if (sdpa_kv_cache_create_desc(g_ctx, &d, &c) != SDPA_OK) return NULL;
    return c;
}

static void fill(float * x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = tu_rng_normal(&g_rng);
}

/* rows 0 .. n-1 read from c: k, v [n, H, D] */
static void read_rows(sdpa_kv_cache * c, int32_t n, int32_t H, int32_t D, float * k, float * v) {
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, n, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, n, H, D);
    TU_CHECK(sdpa_kv_cache_read(g_ctx, c, 0, n, &tk, &tv) == SDPA_OK, "read: %s", sdpa_ctx_last_error(g_ctx));
}

/* a block whose rows read as float16 in the newest page: int8 / int4 (float16: always) */
static bool quantized(int32_t d) { return d == SDPA_DTYPE_INT8 || d == SDPA_DTYPE_INT4 || d == SDPA_DTYPE_FLOAT16; }

/* One row at a time: stored values before and after each fill, attention against the reference. */
static void test_steps(int32_t kd, int32_t vd, int32_t D) {
    const int32_t H = 2, Hq = 4, N = 140, L = 160;
    sdpa_kv_cache * c = make(L, H, D, kd, vd, 1), * plain = make(L, H, D, kd, vd, 0);
    if (!TU_CHECK(c && plain, "create K %d V %d D %d", kd, vd, D)) return;
    TU_CHECK(sdpa_kv_cache_float16_newest_page(c) == 1 && sdpa_kv_cache_float16_newest_page(plain) == 0, "the flag");
    const size_t row = (size_t)H * D;
    float * k = tu_malloc(N * row * 4), * v = tu_malloc(N * row * 4), * k16 = tu_malloc(N * row * 4), * v16 = tu_malloc(N * row * 4);
    float * rk = tu_malloc(N * row * 4), * rv = tu_malloc(N * row * 4), * pk = tu_malloc(N * row * 4), * pv = tu_malloc(N * row * 4);
    float q[4 * 64], out[4 * 64];
    double ref[4 * 64];
    fill(k, N * row);
    fill(v, N * row);
    for (size_t i = 0; i < N * row; i++) { k16[i] = quantized(kd) ? naive_f16_value(k[i]) : k[i]; v16[i] = quantized(vd) ? naive_f16_value(v[i]) : v[i]; }
    /* what the fills must store: a cache without the page fed the float16 values of its int8 / int4 blocks */
    sdpa_tensor tk = tu_tensor4(k16, SDPA_DTYPE_FLOAT32, 1, N, H, D), tv = tu_tensor4(v16, SDPA_DTYPE_FLOAT32, 1, N, H, D);
    TU_CHECK(sdpa_kv_cache_update(g_ctx, plain, &tk, &tv, 0) == SDPA_OK, "plain update");
    read_rows(plain, N, H, D, pk, pv);
    int bad_rows = 0, bad_out = 0;
    for (int32_t t = 0; t < N; t++) {
        fill(q, (size_t)Hq * D);
        sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, 1, Hq, D), to = tu_tensor4(out, SDPA_DTYPE_FLOAT32, 1, 1, Hq, D);
        sdpa_tensor sk = tu_tensor4(k + t * row, SDPA_DTYPE_FLOAT32, 1, 1, H, D), sv = tu_tensor4(v + t * row, SDPA_DTYPE_FLOAT32, 1, 1, H, D);
        sdpa_options o = { 0 };
        o.start_pos = t;
        o.is_causal = 1;
        if (!TU_CHECK(sdpa_kv_cache_step(g_ctx, c, &tq, &sk, &sv, NULL, &o, &to) == SDPA_OK, "step %d: %s", t, sdpa_ctx_last_error(g_ctx))) break;
        read_rows(c, t + 1, H, D, rk, rv);
        const int32_t filled = (t + 1) / 64 * 64;
        for (size_t i = 0; i < (size_t)(t + 1) * row; i++) {
            const bool enc = (int32_t)(i / row) < filled;
            const float wk = enc ? pk[i] : k16[i], wv = enc ? pv[i] : v16[i];
            if (memcmp(&rk[i], &wk, 4) != 0 || memcmp(&rv[i], &wv, 4) != 0) { bad_rows++; break; }
        }
        naive_params np = { 1, 1, t + 1, Hq, H, D, NAIVE_MASK_NONE, NULL, 0, t, 1, 0, 0, 0, 0, NULL };
        naive_sdpa(&np, q, rk, rv, ref);
        double m = 0, e = 0;
        for (int32_t i = 0; i < Hq * D; i++) { m = fmax(m, fabs(ref[i])); e = fmax(e, fabs(out[i] - ref[i])); }
        if (!(e <= 2e-3 * (1 + m))) bad_out++;
    }
    TU_CHECK(bad_rows == 0, "K %d V %d D %d: %d steps with stored rows not float16 before the fill / the encoding of those after", kd, vd, D, bad_rows);
    TU_CHECK(bad_out == 0, "K %d V %d D %d: %d steps beyond 2e-3 of the reference over the rows read", kd, vd, D, bad_out);
    /* a prefill of every row in one step (written in pieces cut before each fill) stores the same bits */
    sdpa_kv_cache * one = make(L, H, D, kd, vd, 1);
    float * qa = tu_malloc((size_t)N * Hq * D * 4), * oa = tu_malloc((size_t)N * Hq * D * 4);
    fill(qa, (size_t)N * Hq * D);
    sdpa_tensor tq = tu_tensor4(qa, SDPA_DTYPE_FLOAT32, 1, N, Hq, D), to = tu_tensor4(oa, SDPA_DTYPE_FLOAT32, 1, N, Hq, D);
    sdpa_tensor ak = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, N, H, D), av = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, N, H, D);
    sdpa_options o = { 0 };
    o.is_causal = 1;
    TU_CHECK(sdpa_kv_cache_step(g_ctx, one, &tq, &ak, &av, NULL, &o, &to) == SDPA_OK, "prefill: %s", sdpa_ctx_last_error(g_ctx));
    float * ok = tu_malloc(N * row * 4), * ov = tu_malloc(N * row * 4);
    read_rows(one, N, H, D, ok, ov);
    TU_CHECK(memcmp(ok, rk, N * row * 4) == 0 && memcmp(ov, rv, N * row * 4) == 0, "K %d V %d D %d: a prefill stores what steps store", kd, vd, D);
    /* row 100 of the prefill (page 1, float16 then) against the reference over the rows as they were then:
     * rows 0 .. 63 encoded, 64 .. 100 float16 */
    {
        const int32_t i = 100;
        float * ck = tu_malloc((size_t)(i + 1) * row * 4), * cv = tu_malloc((size_t)(i + 1) * row * 4);
        for (size_t x = 0; x < (size_t)(i + 1) * row; x++) {
            const bool enc = x / row < 64;
            ck[x] = enc ? pk[x] : k16[x];
            cv[x] = enc ? pv[x] : v16[x];
        }
        naive_params np = { 1, 1, i + 1, Hq, H, D, NAIVE_MASK_NONE, NULL, 0, i, 1, 0, 0, 0, 0, NULL };
        double r1[4 * 64];
        naive_sdpa(&np, qa + (size_t)i * Hq * D, ck, cv, r1);
        double m = 0, e = 0;
        for (int32_t x = 0; x < Hq * D; x++) { m = fmax(m, fabs(r1[x])); e = fmax(e, fabs(oa[(size_t)i * Hq * D + x] - r1[x])); }
        TU_CHECK(e <= 2e-3 * (1 + m), "K %d V %d D %d: prefill row 100 sees its page in float16 (%g)", kd, vd, D, e);
        free(ck); free(cv);
    }
    /* a save with the float16 rows, loaded: the same rows */
    sdpa_kv_saver * sv = NULL;
    if (TU_CHECK(sdpa_kv_save_begin(g_ctx, one, 0, N, NULL, 0, &sv) == SDPA_OK, "save")) {
        const size_t n = (size_t)sdpa_kv_save_bytes(sv);
        unsigned char * bytes = tu_malloc(n);
        size_t got = 0;
        while (got < n) got += sdpa_kv_save_read(sv, bytes + got, 97 < n - got ? 97 : n - got);
        sdpa_kv_save_free(sv);
        TU_CHECK(bytes[8] == (kd == SDPA_DTYPE_INT4 || vd == SDPA_DTYPE_INT4 ? 3 : 2), "version 2 (3 with an int4 block)");
        sdpa_kv_cache * back = NULL;
        if (TU_CHECK(sdpa_kv_cache_load(g_ctx, bytes, n, 0, &back) == SDPA_OK, "load: %s", sdpa_ctx_last_error(g_ctx))) {
            read_rows(back, N, H, D, pk, pv);
            TU_CHECK(memcmp(ok, pk, N * row * 4) == 0 && memcmp(ov, pv, N * row * 4) == 0, "K %d V %d D %d: loaded rows", kd, vd, D);
            TU_CHECK(sdpa_kv_cache_float16_newest_page(back) == 1, "the flag comes back");
            sdpa_kv_cache_free(back);
        }
        free(bytes);
    }
    sdpa_kv_cache_free(one);
    free(qa); free(oa); free(ok); free(ov);
    free(k); free(v); free(k16); free(v16); free(rk); free(rv); free(pk); free(pv);
    sdpa_kv_cache_free(c);
    sdpa_kv_cache_free(plain);
}

/* stepMany over caches of four page sizes (two of them with float16 pages): the pool's joint ensure. */
static void test_step_many(void) {
    const int32_t H = 1, Hq = 2, D = 24;
    sdpa_kv_cache * cs[4] = { make(400, H, D, SDPA_DTYPE_INT4, SDPA_DTYPE_INT4, 1), make(400, H, D, SDPA_DTYPE_INT8, SDPA_DTYPE_INT4, 1),
                              make(400, H, D, SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, 0), make(400, H, 40, SDPA_DTYPE_INT8, SDPA_DTYPE_INT8, 1) };
    for (int i = 0; i < 4; i++) if (!TU_CHECK(cs[i] != NULL, "create %d", i)) return;
    float q[4][2 * 40], k[4][40], v[4][40], out[4][2 * 40];
    sdpa_tensor tq[4], tk[4], tv[4], to[4];
    sdpa_options o[4];
    sdpa_attend_item items[4];
    int failed = 0;
    for (int32_t t = 0; t < 300 && !failed; t++) {
        for (int i = 0; i < 4; i++) {
            const int32_t d = i == 3 ? 40 : D;
            fill(q[i], (size_t)Hq * d); fill(k[i], (size_t)H * d); fill(v[i], (size_t)H * d);
            tq[i] = tu_tensor4(q[i], SDPA_DTYPE_FLOAT32, 1, 1, Hq, d);
            tk[i] = tu_tensor4(k[i], SDPA_DTYPE_FLOAT32, 1, 1, H, d);
            tv[i] = tu_tensor4(v[i], SDPA_DTYPE_FLOAT32, 1, 1, H, d);
            to[i] = tu_tensor4(out[i], SDPA_DTYPE_FLOAT32, 1, 1, Hq, d);
            memset(&o[i], 0, sizeof o[i]);
            o[i].start_pos = t;
            o[i].is_causal = 1;
            items[i] = (sdpa_attend_item){ cs[i], &tq[i], NULL, &o[i], &to[i], &tk[i], &tv[i] };
        }
        failed = !TU_CHECK(sdpa_kv_cache_step_many(g_ctx, items, 4) == SDPA_OK, "stepMany %d: %s", t, sdpa_ctx_last_error(g_ctx));
    }
    for (int i = 0; i < 4; i++) sdpa_kv_cache_free(cs[i]);
}

/* The joint ensure with two entries of one page size (a float16 page raised to its encoded page's
 * size: int8 / int8 at a head size of 4): both draw on the same free pages, so they are counted
 * together. With one free page and nothing left to carve, ensuring 1 + 1 must leave room for two
 * takes (it once passed each entry alone against the one free page: the second take got NULL). */
static void test_pool_equal_sizes(void) {
    sdpa_page_pool * pool = sdpa_page_pool_create();
    const size_t B = 1024;
    const uint64_t slot = sdpa_page_pool_slot_bytes(B);
    if (!TU_CHECK(pool && sdpa_page_pool_add_size(pool, B) && sdpa_page_pool_ensure(pool, B, 1), "pool")) { sdpa_page_pool_free(pool); return; }
    sdpa_page_stats st;
    sdpa_page_pool_stats(pool, &st);
    const uint64_t n = st.bytes_free / slot;           /* every page the arena holds now */
    void ** pages = calloc((size_t)n, sizeof *pages);
    for (uint64_t i = 0; i < n; i++) pages[i] = sdpa_page_pool_take(pool, B);
    sdpa_page_release(pool, pages[n - 1]);             /* one free page, nothing carvable */
    sdpa_page_pool_stats(pool, &st);
    TU_CHECK(st.bytes_free / slot == 1, "room for one page before the ensure: %llu bytes free, slot %llu", (unsigned long long)st.bytes_free, (unsigned long long)slot);
    const size_t bytes[2] = { B, B };
    const uint64_t count[2] = { 1, 1 };
    TU_CHECK(sdpa_page_pool_ensure_sizes(pool, bytes, count, 2), "ensure 1 + 1 pages of one size");
    sdpa_page_pool_stats(pool, &st);
    TU_CHECK(st.bytes_free / slot >= 2, "after ensuring 1 + 1 pages of one size, room for %llu pages; expected 2", (unsigned long long)(st.bytes_free / slot));
    void * a = sdpa_page_pool_take(pool, B), * b = sdpa_page_pool_take(pool, B);
    TU_CHECK(a != NULL && b != NULL && a != b, "two takes after the joint ensure");
    free(pages);
    sdpa_page_pool_free(pool);
}

int main(void) {
    tu_rng_seed(&g_rng, tu_base_seed(41));
    sdpa_status s;
    g_ctx = sdpa_ctx_create(2, &s);
    if (!g_ctx) return 1;
    static const int32_t pairs[][2] = {
        { SDPA_DTYPE_INT4, SDPA_DTYPE_INT4 }, { SDPA_DTYPE_INT8, SDPA_DTYPE_INT8 },
        { SDPA_DTYPE_INT8, SDPA_DTYPE_INT4 }, { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_INT4 }, { SDPA_DTYPE_INT4, SDPA_DTYPE_FLOAT16 },
    };
    static const int32_t dims[] = { 40, 3, 64 };
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) test_steps(pairs[p][0], pairs[p][1], dims[d]);
    test_step_many();
    test_pool_equal_sizes();
    sdpa_ctx_free(g_ctx);
    return tu_summary("test_f16page");
}
