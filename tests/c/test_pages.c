/*
 * test_pages.c: the paged KV cache's own operations in C (include/sdpa.h):
 * length, no-hole writes, fork (copy-on-write), truncate, free order of
 * forks, page counts and the pool's statistics, and random sequences of update / step / truncate / fork / free
 * on several caches of one context, each checked after every operation
 * against a host model of the rows (zeros where never written) and, for
 * steps, against the float64 reference. Under ASan (and the wasm32 ASan
 * build) this is what exercises the pages' reference counting. (A write the
 * pool cannot take, E_OOM with nothing changed, is tested through the wasm
 * heap in tests/js/memory.test.js: natively, overcommit lets malloc succeed.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"
#include "../../src/wasm/api.h"  /* sdpa_ctx_owns_pages: JS's */

enum { B = 2, S = 200, H = 2, HQ = 4, D = 6, MAXC = 6 };

typedef struct slot {
    sdpa_kv_cache * c;
    float * k, * v;   /* host [B, S, H, D] */
    int32_t length;
} slot;

static sdpa_ctx * g_ctx;
static tu_rng g_rng;

static size_t n_floats(void) { return (size_t)B * S * H * D; }

static void slot_new(slot * s) {
    sdpa_status st = sdpa_kv_cache_create(g_ctx, B, S, H, D, SDPA_DTYPE_FLOAT32, &s->c);
    TU_CHECK(st == SDPA_OK, "create: %s", sdpa_status_code(st));
    s->k = calloc(n_floats(), 4);
    s->v = calloc(n_floats(), 4);
    s->length = 0;
}

static void slot_fork(slot * dst, const slot * src) {
    sdpa_status st = sdpa_kv_cache_fork(g_ctx, src->c, &dst->c);
    TU_CHECK(st == SDPA_OK, "fork: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(g_ctx));
    dst->k = malloc(n_floats() * 4);
    dst->v = malloc(n_floats() * 4);
    memcpy(dst->k, src->k, n_floats() * 4);
    memcpy(dst->v, src->v, n_floats() * 4);
    dst->length = src->length;
}

static void slot_free(slot * s) {
    sdpa_kv_cache_free(s->c);
    free(s->k);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static void host_write(slot * s, const float * k, const float * v, int32_t sp, int32_t n) {
    for (int32_t b = 0; b < B; b++)
        for (int32_t t = 0; t < n; t++) {
            memcpy(s->k + (((size_t)b * S + sp + t) * H) * D, k + (((size_t)b * n + t) * H) * D, (size_t)H * D * 4);
            memcpy(s->v + (((size_t)b * S + sp + t) * H) * D, v + (((size_t)b * n + t) * H) * D, (size_t)H * D * 4);
        }
    if (sp + n > s->length) s->length = sp + n;
}

static void host_truncate(slot * s, int32_t n) {
    for (int32_t b = 0; b < B; b++) {
        memset(s->k + ((size_t)b * S + n) * H * D, 0, (size_t)(S - n) * H * D * 4);
        memset(s->v + ((size_t)b * S + n) * H * D, 0, (size_t)(S - n) * H * D * 4);
    }
    s->length = n;
}

/* The cache's rows (sdpa_kv_cache_read of all of them) and length equal the host model. */
static void expect_same(const slot * s, const char * what) {
    float * k = malloc(n_floats() * 4), * v = malloc(n_floats() * 4);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, S, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, S, H, D);
    sdpa_status st = sdpa_kv_cache_read(g_ctx, s->c, 0, S, &tk, &tv);
    TU_CHECK(st == SDPA_OK, "%s: read: %s", what, sdpa_status_code(st));
    TU_CHECK(memcmp(k, s->k, n_floats() * 4) == 0 && memcmp(v, s->v, n_floats() * 4) == 0, "%s: rows differ from the model", what);
    TU_CHECK(sdpa_kv_cache_length(s->c) == s->length, "%s: length %d, model %d", what, sdpa_kv_cache_length(s->c), s->length);
    free(k);
    free(v);
}

static void random_rows(float * x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = tu_rng_uniform(&g_rng, -1.0f, 1.0f);
}

static void test_fork_and_truncate(void) {
    snprintf(tu_context, sizeof tu_context, "fork and truncate");
    sdpa_memory_stats m0, m1;
    sdpa_ctx_memory(g_ctx, &m0);
    TU_CHECK(m0.page_rows == SDPA_PAGE_ROWS, "page_rows %d", m0.page_rows);
    slot base, a;
    slot_new(&base);
    const int32_t n = 150;  /* pages 0, 1, 2 of each of B * H heads */
    float * k = malloc((size_t)B * n * H * D * 4), * v = malloc((size_t)B * n * H * D * 4);
    random_rows(k, (size_t)B * n * H * D);
    random_rows(v, (size_t)B * n * H * D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D);
    TU_CHECK(sdpa_kv_cache_update(g_ctx, base.c, &tk, &tv, 0) == SDPA_OK, "update");
    host_write(&base, k, v, 0, n);
    TU_CHECK(sdpa_kv_cache_pages(base.c) == B * H * 3, "pages held: %d, expected %d", sdpa_kv_cache_pages(base.c), B * H * 3);
    slot_fork(&a, &base);
    sdpa_ctx_memory(g_ctx, &m1);
    TU_CHECK(m1.pages_in_use - m0.pages_in_use == B * H * 3, "fork took pages: %lld", (long long)(m1.pages_in_use - m0.pages_in_use));
    /* one row into page 1 of every head of the fork: B * H pages copied */
    sdpa_tensor t1k = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, 1, H, D), t1v = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, 1, H, D);
    TU_CHECK(sdpa_kv_cache_update(g_ctx, a.c, &t1k, &t1v, 70) == SDPA_OK, "update the fork");
    host_write(&a, k, v, 70, 1);
    sdpa_ctx_memory(g_ctx, &m1);
    TU_CHECK(m1.pages_in_use - m0.pages_in_use == B * H * 4, "copy-on-write copied %lld pages, expected %d",
             (long long)(m1.pages_in_use - m0.pages_in_use - B * H * 3), B * H);
    expect_same(&base, "base after the fork's write");
    expect_same(&a, "fork after its write");
    /* truncate the base into a shared page: that page is copied before its tail is zeroed */
    TU_CHECK(sdpa_kv_cache_truncate(g_ctx, base.c, 10) == SDPA_OK, "truncate");
    host_truncate(&base, 10);
    expect_same(&base, "base truncated to 10");
    expect_same(&a, "fork after the base's truncate");
    TU_CHECK(sdpa_kv_cache_truncate(g_ctx, base.c, 11) == SDPA_E_CAPACITY, "truncate past length");
    TU_CHECK(sdpa_kv_cache_truncate(g_ctx, base.c, -1) == SDPA_E_START_POS, "truncate -1");
    /* a hole is E_START_POS and changes nothing */
    TU_CHECK(sdpa_kv_cache_update(g_ctx, base.c, &t1k, &t1v, 12) == SDPA_E_START_POS, "hole");
    TU_CHECK(strstr(sdpa_ctx_last_error(g_ctx), "hole") != NULL, "hole message: %s", sdpa_ctx_last_error(g_ctx));
    expect_same(&base, "base after a rejected hole");
    slot_free(&base);  /* the fork keeps its pages */
    expect_same(&a, "fork after the base was freed");
    slot_free(&a);
    sdpa_ctx_memory(g_ctx, &m1);
    TU_CHECK(m1.pages_in_use == m0.pages_in_use, "pages in use %lld, expected %lld", (long long)m1.pages_in_use,
             (long long)m0.pages_in_use);
    TU_CHECK(m1.pages_free >= B * H * 4, "freed pages are on the free list: %lld", (long long)m1.pages_free);
    free(k);
    free(v);
}

static void test_random_ops(uint64_t seed) {
    tu_rng_seed(&g_rng, seed);
    slot s[MAXC];
    memset(s, 0, sizeof s);
    int live = 1;
    slot_new(&s[0]);
    const size_t maxq = (size_t)B * 8 * HQ * D, maxkv = (size_t)B * 70 * H * D;
    float * q = malloc(maxq * 4), * k = malloc(maxkv * 4), * v = malloc(maxkv * 4), * o = malloc(maxq * 4);
    double * ref = malloc(maxq * sizeof(double));
    for (int i = 0; i < 120; i++) {
        snprintf(tu_context, sizeof tu_context, "random ops seed %llu, op %d", (unsigned long long)seed, i);
        slot * c = &s[tu_rng_int(&g_rng, 0, live - 1)];
        const double r = tu_rng_unit(&g_rng);
        if (r < 0.45) {
            const int32_t n = tu_rng_int(&g_rng, 1, 8);
            const int32_t sp = tu_rng_unit(&g_rng) < 0.7 ? c->length : tu_rng_int(&g_rng, 0, c->length);
            if (sp + n > S) continue;
            random_rows(q, (size_t)B * n * HQ * D);
            random_rows(k, (size_t)B * n * H * D);
            random_rows(v, (size_t)B * n * H * D);
            sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, n, HQ, D), to = tu_tensor4(o, SDPA_DTYPE_FLOAT32, B, n, HQ, D);
            sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D);
            sdpa_options opt = {.start_pos = sp, .is_causal = 1};
            sdpa_status st = sdpa_kv_cache_step(g_ctx, c->c, &tq, &tk, &tv, NULL, &opt, &to);
            if (!TU_CHECK(st == SDPA_OK, "step at %d: %s %s", sp, sdpa_status_code(st), sdpa_ctx_last_error(g_ctx))) break;
            host_write(c, k, v, sp, n);
            naive_params np = {.B = B, .Sq = n, .Skv = S, .Hq = HQ, .Hkv = H, .D = D, .start_pos = sp, .is_causal = 1};
            TU_CHECK(naive_sdpa(&np, q, c->k, c->v, ref) == 0, "reference");
            tu_close("step vs reference", o, ref, (size_t)B * n * HQ * D, tq.dims);
        } else if (r < 0.6) {
            const int32_t n = tu_rng_int(&g_rng, 1, 70);
            if (c->length + n > S) continue;
            random_rows(k, (size_t)B * n * H * D);
            random_rows(v, (size_t)B * n * H * D);
            sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D);
            TU_CHECK(sdpa_kv_cache_update(g_ctx, c->c, &tk, &tv, c->length) == SDPA_OK, "append %d rows", n);
            host_write(c, k, v, c->length, n);
        } else if (r < 0.72) {
            const int32_t n = tu_rng_int(&g_rng, 0, c->length);
            TU_CHECK(sdpa_kv_cache_truncate(g_ctx, c->c, n) == SDPA_OK, "truncate %d", n);
            host_truncate(c, n);
        } else if (r < 0.86 && live < MAXC) {
            slot_fork(&s[live++], c);
        } else if (live > 1) {
            slot_free(c);
            *c = s[--live];
            memset(&s[live], 0, sizeof s[live]);
        }
        for (int x = 0; x < live; x++) expect_same(&s[x], "after the op");
    }
    for (int x = 0; x < live; x++) slot_free(&s[x]);
    free(q); free(k); free(v); free(o); free(ref);
}

/* The two entry points that take a byte count as a double (from JS): any
 * double, NaN and 1e300 included, gives a defined answer (UBSan flags a
 * double -> uint64 conversion out of range), and the overlap test does not
 * wrap for a span near 2^64. */
static void test_byte_counts(void) {
    snprintf(tu_context, sizeof tu_context, "byte counts as doubles");
    const double bad[] = { -1.0, NAN, -INFINITY };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        TU_CHECK(sdpa_ctx_reserve_pages(g_ctx, bad[i]) == SDPA_E_ARG, "reserve(%g): %s", bad[i], sdpa_ctx_last_error(g_ctx));
    const double huge[] = { INFINITY, 1e300, 0x1p64, (double)SIZE_MAX };
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++)
        TU_CHECK(sdpa_ctx_reserve_pages(g_ctx, huge[i]) == SDPA_E_OOM, "reserve(%g): %s", huge[i], sdpa_ctx_last_error(g_ctx));
    sdpa_kv_cache * c = NULL;
    TU_CHECK(sdpa_kv_cache_create(g_ctx, 1, 64, 1, D, SDPA_DTYPE_FLOAT32, &c) == SDPA_OK, "create");
    float k[D] = { 1.0f }, v[D] = { 2.0f };
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, 1, 1, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
    TU_CHECK(sdpa_kv_cache_update(g_ctx, c, &tk, &tv, 0) == SDPA_OK, "update");
    const char * page = sdpa_kv_cache_page(c, 0, 0, 0, 0);
    TU_CHECK(page != NULL, "the written page");
    if (page) {
        TU_CHECK(sdpa_ctx_owns_pages(g_ctx, page, 4.0) == 1, "a page's first bytes");
        TU_CHECK(sdpa_ctx_owns_pages(g_ctx, page, 1e300) == 1, "a page with a span of 1e300");
        TU_CHECK(sdpa_ctx_owns_pages(g_ctx, page, NAN) == 0 && sdpa_ctx_owns_pages(g_ctx, page, -5.0) == 0, "NaN and negative spans");
        /* below the arena, reaching into it only through a span that wraps past 2^64 if added */
        uintptr_t below = (uintptr_t)page - 4096;
        TU_CHECK(sdpa_ctx_owns_pages(g_ctx, (const void *)below, 0x1p64) == 1, "a span of 2^64 from just below a page");
    }
    sdpa_kv_cache_free(c);
}

/* The page bytes as docs/CONTRACT.md section 3 ("Bytes") states them. */
static int64_t contract_page_bytes(int32_t dtype, int32_t d) {
    int64_t b = dtype == SDPA_DTYPE_FLOAT32 ? 2 * 64 * d * 4
              : dtype == SDPA_DTYPE_FLOAT16 ? 2 * 64 * d * 2
              : 64 * (2 * ((d + 1) / 2) + d) + 2 * 64 * 4 + 2 * 64;
    return (b + 63) / 64 * 64 + 64;
}

/* Fills rows 0 .. rows-1 of a cache of geometry [b, s, h, d], `chunk` rows per update. */
static void fill_rows(sdpa_kv_cache * c, int32_t b, int32_t h, int32_t d, int32_t rows, int32_t chunk) {
    float * x = calloc((size_t)b * chunk * h * d, 4);
    for (int32_t t = 0; t < rows; t += chunk) {
        int32_t n = rows - t < chunk ? rows - t : chunk;
        sdpa_tensor tk = tu_tensor4(x, SDPA_DTYPE_FLOAT32, b, n, h, d);
        sdpa_status st = sdpa_kv_cache_update(g_ctx, c, &tk, &tk, t);
        TU_CHECK(st == SDPA_OK, "fill at %d: %s %s", t, sdpa_status_code(st), sdpa_ctx_last_error(g_ctx));
    }
    free(x);
}

/* sdpa_kv_cache_plan against what caches then hold, and reserve(pool_bytes)
 * enough for caches of two page sizes in a pool whose chunks have tails. */
static void test_plan_and_reserve(void) {
    snprintf(tu_context, sizeof tu_context, "plan and reserve");
    sdpa_status st;
    sdpa_ctx * ctx = sdpa_ctx_create(1, &st);
    sdpa_ctx * saved = g_ctx;
    g_ctx = ctx;
    /* b, s, h, d, dtype, window, sinks, rows */
    const int32_t geo[][8] = {
        { 1, 300, 2, 64, SDPA_DTYPE_FLOAT32, 0, 0, 130 },
        { 2, 300, 3, 7, SDPA_DTYPE_INT8, 0, 0, 65 },
        { 1, 128, 1, 33, SDPA_DTYPE_FLOAT16, 0, 0, 1 },
        { 1, 100000, 2, 16, SDPA_DTYPE_FLOAT32, 100, 4, 1000 },
    };
    sdpa_kv_cache * caches[4] = { 0 };
    sdpa_kv_cache_size sz[4];
    int64_t need = 0;
    for (int i = 0; i < 4; i++) {
        const int32_t * g = geo[i];
        st = sdpa_kv_cache_plan(ctx, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], &sz[i]);
        TU_CHECK(st == SDPA_OK, "plan %d: %s", i, sdpa_ctx_last_error(ctx));
        const int64_t slots = g[5] ? (g[6] + 63) / 64 + (g[5] - 1 + 63) / 64 + 2 : (g[1] + 63) / 64;
        const int64_t per_head = (g[7] + 63) / 64 < slots ? (g[7] + 63) / 64 : slots;
        TU_CHECK(sz[i].pages == per_head * g[0] * g[2], "plan %d: pages %lld", i, (long long)sz[i].pages);
        TU_CHECK(sz[i].page_bytes == contract_page_bytes(g[4], g[3]), "plan %d: page bytes %lld vs %lld", i,
                 (long long)sz[i].page_bytes, (long long)contract_page_bytes(g[4], g[3]));
        TU_CHECK(sz[i].table_bytes == slots * g[0] * g[2] * (int64_t)sizeof(void *), "plan %d: table bytes", i);
        TU_CHECK(sz[i].pool_bytes == sz[i].pages * sz[i].page_bytes && sz[i].bytes == sz[i].pool_bytes + sz[i].table_bytes,
                 "plan %d: sums", i);
        st = sdpa_kv_cache_create_windowed(ctx, g[0], g[1], g[2], g[3], g[4], g[5], g[6], &caches[i]);
        TU_CHECK(st == SDPA_OK, "create %d", i);
        need += sz[i].pool_bytes;
    }
    /* a first write leaves a chunk partly carved (its tail cannot hold every page size) */
    fill_rows(caches[0], 1, 2, 64, 1, 1);
    sdpa_memory_stats m0, m1;
    sdpa_ctx_memory(ctx, &m0);
    TU_CHECK(sdpa_ctx_reserve_pages(ctx, (double)need) == SDPA_OK, "reserve");
    sdpa_ctx_memory(ctx, &m0);
    for (int i = 0; i < 4; i++) fill_rows(caches[i], geo[i][0], geo[i][2], geo[i][3], geo[i][7], 50);
    sdpa_ctx_memory(ctx, &m1);
    TU_CHECK(m1.bytes_reserved == m0.bytes_reserved, "reserve(sum of pool_bytes) was enough: %lld -> %lld",
             (long long)m0.bytes_reserved, (long long)m1.bytes_reserved);
    int64_t in_use = 0;
    for (int i = 0; i < 4; i++) {
        TU_CHECK(sdpa_kv_cache_bytes(caches[i]) == (double)sz[i].bytes, "cache %d: bytes %.0f vs plan %lld", i,
                 sdpa_kv_cache_bytes(caches[i]), (long long)sz[i].bytes);
        in_use += sz[i].pool_bytes;
    }
    TU_CHECK(m1.bytes_in_use == in_use, "bytes_in_use %lld = the plans' pool bytes %lld", (long long)m1.bytes_in_use, (long long)in_use);
    /* the plan's own rules */
    sdpa_kv_cache_size x;
    TU_CHECK(sdpa_kv_cache_plan(ctx, 1, 10, 1, 8, SDPA_DTYPE_FLOAT32, 0, 0, 11, &x) == SDPA_E_CAPACITY, "rows > max_seq_len");
    TU_CHECK(sdpa_kv_cache_plan(ctx, 1, 10, 1, 8, SDPA_DTYPE_FLOAT32, 0, 0, -1, &x) == SDPA_E_DIMS, "rows < 0");
    TU_CHECK(sdpa_kv_cache_plan(ctx, 1, 10, 1, 8, 99, 0, 0, 1, &x) == SDPA_E_DTYPE, "dtype");
    TU_CHECK(sdpa_kv_cache_plan(ctx, 1, 10, 1, 1 << 24, SDPA_DTYPE_FLOAT32, 0, 0, 1, &x) == SDPA_OK &&
             x.page_bytes > ((int64_t)1 << 32), "a page above 4 GiB is planned in 64 bits: %lld", (long long)x.page_bytes);
    for (int i = 0; i < 4; i++) sdpa_kv_cache_free(caches[i]);
    sdpa_ctx_free(ctx);

    /* A chunk whose tail is shorter than a page: reserve must not count it.
     * One page size (float32, D 64); the zero page and 30 pages leave a 1 MiB
     * chunk with a tail of less than a page; then 40 pages are reserved (more
     * than a minimum chunk, so the new chunk is what reserve asks for). */
    ctx = sdpa_ctx_create(1, &st);
    g_ctx = ctx;
    sdpa_kv_cache * c = NULL;
    TU_CHECK(sdpa_kv_cache_create(ctx, 1, 8192, 1, 64, SDPA_DTYPE_FLOAT32, &c) == SDPA_OK, "create");
    fill_rows(c, 1, 1, 64, 30 * 64, 64);
    sdpa_kv_cache_size one;
    TU_CHECK(sdpa_kv_cache_plan(ctx, 1, 8192, 1, 64, SDPA_DTYPE_FLOAT32, 0, 0, 40 * 64, &one) == SDPA_OK, "plan");
    TU_CHECK(sdpa_ctx_reserve_pages(ctx, (double)one.pool_bytes) == SDPA_OK, "reserve 40 pages");
    sdpa_ctx_memory(ctx, &m0);
    {   /* rows 30*64 .. 70*64-1: 40 new pages */
        float * x = calloc(64 * 64, 4);
        for (int32_t t = 30 * 64; t < 70 * 64; t += 64) {
            sdpa_tensor tk = tu_tensor4(x, SDPA_DTYPE_FLOAT32, 1, 64, 1, 64);
            TU_CHECK(sdpa_kv_cache_update(ctx, c, &tk, &tk, t) == SDPA_OK, "write at %d", t);
        }
        free(x);
    }
    sdpa_ctx_memory(ctx, &m1);
    TU_CHECK(m1.bytes_reserved == m0.bytes_reserved, "a chunk's short tail is not counted as free: %lld -> %lld",
             (long long)m0.bytes_reserved, (long long)m1.bytes_reserved);
    sdpa_kv_cache_free(c);
    g_ctx = saved;
    sdpa_ctx_free(ctx);
}

int main(void) {
    double t0 = tu_seconds();
    sdpa_status st;
    g_ctx = sdpa_ctx_create(2, &st);
    if (!TU_CHECK(g_ctx != NULL, "ctx: %s", sdpa_status_code(st))) return tu_summary("test_pages");
    sdpa_ctx_set_parallel_min_macs(g_ctx, 0);
    tu_rng_seed(&g_rng, 7);
    test_fork_and_truncate();
    test_byte_counts();
    test_plan_and_reserve();
    for (uint64_t seed = 1; seed <= 6; seed++) test_random_ops(seed);
    sdpa_memory_stats m;
    sdpa_ctx_memory(g_ctx, &m);
    TU_CHECK(m.pages_in_use == 0, "every page back: %lld in use", (long long)m.pages_in_use);
    sdpa_ctx_free(g_ctx);
    printf("  %.2f s\n", tu_seconds() - t0);
    return tu_summary("test_pages");
}
