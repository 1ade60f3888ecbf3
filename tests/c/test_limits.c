/*
 * test_limits.c: hostile sizes from the C side, the sizes and numbers at the edge
 * of what a build can hold (CONTRACT.md section 2 E_OOM / E_DIMS, section 1).
 *
 * 1. Size arithmetic (class 1). On wasm32 size_t is 32 bits, and the old
 *    scratch size "threads x per-thread bytes" wrapped for huge head dims:
 *    8 threads at D = 2^23 asked for a few KB and the kernel then wrote 4 GiB
 *    past it. Checked here:
 *    - sdpa_workspace_size saturates (SIZE_MAX) instead of wrapping, for the
 *      per-thread part (8 threads) and for the split-KV partials (1 thread,
 *      a decode over 4096 keys);
 *    - customSdpa, cache.attend and cache.step with D in {2^23, 10^7, 2^24}
 *      on an 8-thread context: E_OOM with a message naming the call and the
 *      scratch, output / inputs / cache byte-for-byte unchanged (where size_t
 *      can hold the need, as natively, the call is not run: see below);
 *    - cache creation whose element or byte count wraps 32 bits: E_OOM;
 *    - a key length past the kernels' int32 extents: E_DIMS.
 * 2. Float32 range (class 7): finite inputs whose exact answer is finite get
 *    it, within 1e-5 (1 + max|ref|) of the tests' float64 reference
 *    (naive_ref.c), on every path (1 and 2 threads bit-identical, the library
 *    reference, the switch), one chunk and split-KV decode, prefill, cache:
 *    - scale = 1e30, |q| ~ 1e10, k = 0 (scale * q overflows; exact score 0),
 *      and keys that make the exact scores huge (one-hot softmax);
 *    - |v| near FLT_MAX over many keys (the unnormalised p.V sum overflows);
 *    - a float mask of -FLT_MAX plus scores of -1e35 (the sum overflows to
 *      -inf for every key: old kernel wrote zeros, as if fully masked);
 *    - q.k whose partial sums overflow although the dot does not;
 *    - the recomputation allocates nothing (scratch bytes unchanged on a
 *      cache's context).
 *
 * The huge-D calls run only where size_t is 32 bits (the wasm builds): on a
 * 64-bit host the scratch fits size_t, malloc may overcommit it, and the run
 * would touch gigabytes for no extra coverage.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

static sdpa_ctx * g_ctx1, * g_ctx2, * g_ctx8;
static uint64_t g_seed = 0x8a11u;

static const sdpa_options k_defaults = { 0, 0, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, NULL };

/* ---- 1. sizes ---------------------------------------------------------- */

/* flash.c keeps BLOCK_ROWS (8) query rows and as many accumulator rows of D
 * floats per thread: 64 bytes per head-dim element and thread, at least. */
static uint64_t thread_scratch_lower_bound(int32_t threads, int32_t D) {
    return (uint64_t)threads * 64u * (uint64_t)D;
}

static void test_workspace_saturates(void) {
    static const int32_t dims[] = { 1 << 20, 1 << 23, 10000000, 1 << 24, 1 << 27, 1 << 29, INT32_MAX / 2 };
    const int32_t threads = sdpa_ctx_threads(g_ctx8);
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++) {
        const int32_t D = dims[a];
        snprintf(tu_context, sizeof tu_context, "sdpa_workspace_size, %d threads, D = %d", threads, D);
        const uint64_t lower = thread_scratch_lower_bound(threads, D);
        const size_t ws = sdpa_workspace_size(g_ctx8, 1, 1, 1, 1, D, 1);
        if (lower > SIZE_MAX)
            TU_CHECK(ws == SIZE_MAX, "workspace %zu for >= %llu bytes: expected SIZE_MAX (saturated)", ws,
                     (unsigned long long)lower);
        else
            TU_CHECK((uint64_t)ws >= lower, "workspace %zu < the %llu bytes the threads need", ws,
                     (unsigned long long)lower);
        /* decode over 4096 keys with B = Hkv = 1 splits into 16 chunks of 256
         * keys (flash.c), each keeping 8 rows x D partial floats: 512 D bytes */
        const uint64_t split_lower = 512u * (uint64_t)D;
        const size_t ws1 = sdpa_workspace_size(g_ctx1, 1, 1, 1, 1, D, 4096);
        if (split_lower > SIZE_MAX)
            TU_CHECK(ws1 == SIZE_MAX, "split workspace %zu for >= %llu bytes: expected SIZE_MAX", ws1,
                     (unsigned long long)split_lower);
        else
            TU_CHECK((uint64_t)ws1 >= split_lower, "split workspace %zu < %llu", ws1, (unsigned long long)split_lower);
    }
    tu_context[0] = '\0';
}

/* An E_OOM call: the status, a message that starts with the entry's name
 * and names the scratch, and (checked by the caller) nothing written. */
static void check_oom(sdpa_ctx * ctx, sdpa_status st, const char * fn) {
    const char * msg = sdpa_ctx_last_error(ctx);
    TU_CHECK(st == SDPA_E_OOM, "%s: status %s, expected E_OOM", fn, sdpa_status_code(st));
    const size_t n = strlen(fn);
    TU_CHECK(strncmp(msg, fn, n) == 0 && msg[n] == ':' && tu_contains_ci(msg, "scratch") && tu_contains_ci(msg, "bytes"),
             "%s: message \"%s\" should name the call, the scratch and the bytes", fn, msg);
}

static int bytes_equal(const void * a, const void * b, size_t n) { return memcmp(a, b, n) == 0; }

/* customSdpa, cache.attend and cache.step at head dim D on the 8-thread
 * context, where that much scratch cannot exist (32-bit size_t). */
static void huge_head_dim(int32_t D) {
    const int32_t threads = sdpa_ctx_threads(g_ctx8);
    snprintf(tu_context, sizeof tu_context, "head dim %d, %d threads", D, threads);
    const size_t n = (size_t)D;
    float * in = tu_malloc(n * sizeof(float));       /* query = key = value: inputs may share */
    float * out = tu_malloc(n * sizeof(float));
    float * in_copy = tu_malloc(n * sizeof(float));
    float * out_copy = tu_malloc(n * sizeof(float));
    tu_rng rng;
    tu_rng_seed(&rng, g_seed++);
    for (size_t i = 0; i < n; i++) in[i] = tu_rng_uniform(&rng, -1.0f, 1.0f);
    tu_fill_nan(out, n);
    memcpy(in_copy, in, n * sizeof(float));
    memcpy(out_copy, out, n * sizeof(float));
    const size_t scratch0 = sdpa_ctx_scratch_bytes(g_ctx8);

    sdpa_tensor t = tu_tensor4(in, SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
    sdpa_tensor to = tu_tensor4(out, SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
    tu_dirty_error(g_ctx8);
    check_oom(g_ctx8, sdpa_custom(g_ctx8, &t, &t, &t, NULL, &k_defaults, &to), "sdpa_custom");
    TU_CHECK(bytes_equal(out, out_copy, n * sizeof(float)), "customSdpa E_OOM wrote into out");
    TU_CHECK(bytes_equal(in, in_copy, n * sizeof(float)), "customSdpa E_OOM changed an input");
    TU_CHECK(sdpa_ctx_scratch_bytes(g_ctx8) == scratch0, "customSdpa E_OOM changed the scratch (%zu -> %zu)",
             scratch0, sdpa_ctx_scratch_bytes(g_ctx8));

    sdpa_kv_cache * cache = NULL;
    sdpa_status st = sdpa_kv_cache_create(g_ctx8, 1, 1, 1, D, SDPA_DTYPE_FLOAT32, &cache);
    /* a paged cache's page (2 x 64 rows x D floats) must fit SDPA_MAX_PAGE_BYTES: at
     * these D it does not, so the cache paths (same sdpa_reserve_problem) are covered
     * only where a page fits */
    TU_CHECK(st == SDPA_OK || st == SDPA_E_OOM, "createKVCache(D = %d): %s %s", D, sdpa_status_code(st),
             sdpa_ctx_last_error(g_ctx8));
    if (st == SDPA_OK && TU_CHECK(cache != NULL, "createKVCache(D = %d): OK but no cache", D)) {
        /* the cache's one row holds `in`; the step would write out_copy (NaN) over it */
        st = sdpa_kv_cache_update(g_ctx8, cache, &t, &t, 0);
        TU_CHECK(st == SDPA_OK, "cache.update: %s", sdpa_status_code(st));
        const sdpa_options o = k_defaults;  /* startPos 0: the cache's one row */
        tu_dirty_error(g_ctx8);
        check_oom(g_ctx8, sdpa_kv_cache_attend(g_ctx8, cache, &t, NULL, &o, &to), "sdpa_kv_cache_attend");
        TU_CHECK(bytes_equal(out, out_copy, n * sizeof(float)), "cache.attend E_OOM wrote into out");

        sdpa_tensor t_new = tu_tensor4(out_copy, SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
        tu_dirty_error(g_ctx8);
        check_oom(g_ctx8, sdpa_kv_cache_step(g_ctx8, cache, &t, &t_new, &t_new, NULL, &o, &to), "sdpa_kv_cache_step");
        TU_CHECK(bytes_equal(out, out_copy, n * sizeof(float)), "cache.step E_OOM wrote into out");
        TU_CHECK(bytes_equal(in, in_copy, n * sizeof(float)), "cache calls changed an input");

        float * k_read = tu_malloc(n * sizeof(float)), * v_read = tu_malloc(n * sizeof(float));
        sdpa_tensor tk = tu_tensor4(k_read, SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
        sdpa_tensor tv = tu_tensor4(v_read, SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
        st = sdpa_kv_cache_read(g_ctx8, cache, 0, 1, &tk, &tv);
        TU_CHECK(st == SDPA_OK && bytes_equal(k_read, in, n * sizeof(float)) && bytes_equal(v_read, in, n * sizeof(float)),
                 "cache.step E_OOM changed the cache (read: %s)", sdpa_status_code(st));
        free(k_read);
        free(v_read);
        sdpa_kv_cache_free(cache);
    }
    free(in);
    free(out);
    free(in_copy);
    free(out_copy);
    tu_context[0] = '\0';
}

static void test_huge_head_dim(void) {
    if (SIZE_MAX > UINT32_MAX) {
        printf("  (64-bit size_t: the huge-D calls run in the wasm builds only)\n");
        return;
    }
    /* wrapped sizes of the old code: 2^23 -> ~17 KB, 10^7 -> ~0.8 GB, 2^24 -> ~17 KB */
    static const int32_t dims[] = { 1 << 23, 10000000, 1 << 24 };
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++) {
        if (thread_scratch_lower_bound(sdpa_ctx_threads(g_ctx8), dims[a]) <= SIZE_MAX)
            printf("  note: %d threads at D = %d fit size_t; expecting E_OOM from malloc\n",
                   sdpa_ctx_threads(g_ctx8), dims[a]);
        huge_head_dim(dims[a]);
    }
}

/* A paged cache allocates a page table (one pointer per SDPA_PAGE_ROWS rows
 * of maxSeqLen per batch row and head) at creation and pages of
 * 2 x SDPA_PAGE_ROWS x D floats as rows are written: either is E_OOM when
 * its byte count, computed without wrapping, is above SDPA_MAX_PAGE_BYTES
 * (on wasm32 a size_t product would wrap). A cache whose dense size wraps 32
 * bits but whose page and table fit is fine: it holds nothing yet. */
static void test_cache_create_wraps(void) {
    static const struct { int32_t B, S, H, D; const char * what; } cases[] = {
        { 1, 65536, 1, 65536, "2^32 elements (dense size wraps 32 bits to 0)" },
        { 16, 65536, 16, 256, "2^32 elements over four factors" },
        { 1, 1 << 20, 1, 1024, "2^30 elements: 2^32 bytes (the byte count wraps)" },
        { 1, 64, 1, 1 << 22, "a page of 2 x 64 x 2^22 floats = 2^31 bytes" },
        { 1, 64, 1, INT32_MAX, "a page of 2 x 64 x INT32_MAX floats (wraps 32 bits)" },
        { INT32_MAX, INT32_MAX - 65536, INT32_MAX, 1, "a table of INT32_MAX^2 x 2^25 pointers" },
        { INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, "INT32_MAX^4" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint64_t page = 2ull * SDPA_PAGE_ROWS * 4ull * (uint64_t)cases[c].D;
        const double table = (double)cases[c].B * cases[c].H * (((double)cases[c].S + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS) *
                             (double)sizeof(void *);
        const int too_big = page > SDPA_MAX_PAGE_BYTES || table > (double)SDPA_MAX_PAGE_BYTES;
        const int too_long = cases[c].S > INT32_MAX - 65536;  /* E_DIMS, which ranks before E_OOM */
        sdpa_kv_cache * sentinel = (sdpa_kv_cache *)&g_seed, * cache = sentinel;
        tu_dirty_error(g_ctx8);
        sdpa_status st = sdpa_kv_cache_create(g_ctx8, cases[c].B, cases[c].S, cases[c].H, cases[c].D,
                                              SDPA_DTYPE_FLOAT32, &cache);
        if (too_long) {
            TU_CHECK(st == SDPA_E_DIMS && cache == sentinel, "createKVCache %s: %s, expected E_DIMS (maxSeqLen past the key index)",
                     cases[c].what, sdpa_status_code(st));
            TU_CHECK(tu_contains_ci(sdpa_ctx_last_error(g_ctx8), "maxSeqLen"), "createKVCache %s: message \"%s\"",
                     cases[c].what, sdpa_ctx_last_error(g_ctx8));
        } else if (too_big) {
            TU_CHECK(st == SDPA_E_OOM, "createKVCache %s: %s, expected E_OOM", cases[c].what, sdpa_status_code(st));
            TU_CHECK(cache == sentinel, "createKVCache %s: out_cache written on failure", cases[c].what);
            const char * msg = sdpa_ctx_last_error(g_ctx8);
            TU_CHECK(strncmp(msg, "sdpa_kv_cache_create: a page of", 31) == 0 && tu_contains_ci(msg, "bytes"),
                     "createKVCache %s: message \"%s\"", cases[c].what, msg);
        } else {
            /* fits: holds no page until written (or E_OOM if this machine cannot hold the table) */
            TU_CHECK(st == SDPA_OK || st == SDPA_E_OOM, "createKVCache %s: %s", cases[c].what, sdpa_status_code(st));
            if (st == SDPA_OK)
                TU_CHECK(sdpa_kv_cache_length(cache) == 0 && sdpa_kv_cache_pages(cache) == 0,
                         "createKVCache %s: a new cache holds %d pages", cases[c].what, sdpa_kv_cache_pages(cache));
        }
        if (st == SDPA_OK && cache != sentinel) sdpa_kv_cache_free(cache);
    }
}

/* A key longer than the kernels' int32 extents (internal.h) is E_DIMS. The
 * tensors claim more than they hold, which the library must never read:
 * out sits below key / value in one buffer, so no claimed span overlaps. */
static void test_key_rows_limit(void) {
    float buf[64] = { 0 };
    float q[1] = { 1.0f };
    buf[0] = 42.0f;
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, 1, 1, 1);
    sdpa_tensor to = tu_tensor4(buf, SDPA_DTYPE_FLOAT32, 1, 1, 1, 1);
    sdpa_tensor tk = tu_tensor4(buf + 32, SDPA_DTYPE_FLOAT32, 1, INT32_MAX - 1, 1, 1);
    tu_dirty_error(g_ctx1);
    sdpa_status st = sdpa_custom(g_ctx1, &tq, &tk, &tk, NULL, &k_defaults, &to);
    TU_CHECK(st == SDPA_E_DIMS, "key with INT32_MAX - 1 rows: %s (%s), expected E_DIMS", sdpa_status_code(st),
             sdpa_ctx_last_error(g_ctx1));
    /* which rule: natively the key-length limit; on wasm32 the byte count already passes size_t */
    const char * msg = sdpa_ctx_last_error(g_ctx1);
    if (sizeof(size_t) >= 8)
        TU_CHECK(tu_contains_ci(msg, "key has") && tu_contains_ci(msg, "at most"), "key rows limit: message \"%s\"", msg);
    else
        TU_CHECK(tu_contains_ci(msg, "memory can address"), "key rows on wasm32: message \"%s\"", msg);
    TU_CHECK(buf[0] == 42.0f, "rejected call wrote into out");
}

/* ---- 2. float32 range -------------------------------------------------- */

typedef struct range_case {
    const char * label;
    int32_t B, Sq, Hq, Hkv, D, Skv;
    int32_t causal;
    int64_t start_pos;
    float scale;              /* 0: default */
    float * q, * k, * v;      /* dense, owned */
    float * mask;             /* [Sq, Skv] float, or NULL */
} range_case;

static range_case make_case(const char * label, int32_t B, int32_t Sq, int32_t Hq, int32_t Hkv, int32_t D,
                            int32_t Skv, int32_t causal, float scale) {
    /* startPos Skv - Sq: without a mask every row sees all Skv keys (or, causal, its prefix) */
    range_case c = { label, B, Sq, Hq, Hkv, D, Skv, causal, Skv - Sq, scale, NULL, NULL, NULL, NULL };
    c.q = tu_malloc(sizeof(float) * (size_t)B * Sq * Hq * D);
    c.k = tu_malloc(sizeof(float) * (size_t)B * Skv * Hkv * D);
    c.v = tu_malloc(sizeof(float) * (size_t)B * Skv * Hkv * D);
    return c;
}

static void free_case(range_case * c) {
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->mask);
}

/* Every path against the float64 reference; without a mask also through a
 * cache (update + attend), which reads K/V head-major. */
static void run_range_case(range_case * c) {
    snprintf(tu_context, sizeof tu_context, "%s: B=%d Sq=%d Hq=%d Hkv=%d D=%d Skv=%d causal=%d scale=%g%s", c->label,
             c->B, c->Sq, c->Hq, c->Hkv, c->D, c->Skv, c->causal, (double)c->scale, c->mask ? " float mask" : "");
    const size_t nq = (size_t)c->B * c->Sq * c->Hq * c->D;
    naive_params np = { c->B, c->Sq, c->Skv, c->Hq, c->Hkv, c->D,
                        c->mask ? NAIVE_MASK_FLOAT : NAIVE_MASK_NONE, c->mask, c->mask ? c->Skv : 0,
                        c->start_pos, c->causal, c->scale != 0.0f, (double)c->scale, 0, 0.0, NULL };
    double * ref = tu_malloc(sizeof(double) * nq);
    float * out1 = tu_malloc(sizeof(float) * nq), * out2 = tu_malloc(sizeof(float) * nq);
    float * outr = tu_malloc(sizeof(float) * nq);
    if (!TU_CHECK(naive_sdpa(&np, c->q, c->k, c->v, ref) == 0, "naive_sdpa rejected the case")) goto done;
    int finite = 1;
    for (size_t i = 0; i < nq; i++) finite &= isfinite(ref[i]) != 0;
    TU_CHECK(finite, "the float64 reference itself is not finite (bad case)");

    sdpa_tensor tq = tu_tensor4(c->q, SDPA_DTYPE_FLOAT32, c->B, c->Sq, c->Hq, c->D);
    sdpa_tensor tk = tu_tensor4(c->k, SDPA_DTYPE_FLOAT32, c->B, c->Skv, c->Hkv, c->D);
    sdpa_tensor tv = tu_tensor4(c->v, SDPA_DTYPE_FLOAT32, c->B, c->Skv, c->Hkv, c->D);
    sdpa_tensor tm = tu_tensor2(c->mask, SDPA_DTYPE_FLOAT32, c->Sq, c->Skv);
    sdpa_options o = { c->start_pos, c->causal, c->scale != 0.0f, c->scale, 0.0f, 0, 0.0f, NULL, NULL, NULL };
    tu_custom_paths(g_ctx1, g_ctx2, &tq, &tk, &tv, c->mask ? &tm : NULL, &o, ref, out1, out2, outr, 1, NULL, NULL);

    if (!c->mask && c->start_pos + c->Sq == c->Skv) {
        /* the same through a cache: the first Skv - Sq rows by update, the rest by step */
        sdpa_kv_cache * cache = NULL;
        sdpa_status st = sdpa_kv_cache_create(g_ctx2, c->B, c->Skv, c->Hkv, c->D, SDPA_DTYPE_FLOAT32, &cache);
        if (TU_CHECK(st == SDPA_OK, "createKVCache: %s", sdpa_status_code(st))) {
            const size_t scratch0 = sdpa_ctx_scratch_bytes(g_ctx2);
            const int32_t old = c->Skv - c->Sq;
            const size_t row = (size_t)c->Hkv * c->D;
            float * kb = tu_malloc(sizeof(float) * (size_t)c->B * c->Skv * row);
            float * vb = tu_malloc(sizeof(float) * (size_t)c->B * c->Skv * row);
            float * kn = kb + (size_t)c->B * old * row, * vn = vb + (size_t)c->B * old * row;
            for (int32_t b = 0; b < c->B; b++) {  /* split [B, Skv] into [B, old] and [B, Sq] */
                memcpy(kb + (size_t)b * old * row, c->k + (size_t)b * c->Skv * row, sizeof(float) * old * row);
                memcpy(vb + (size_t)b * old * row, c->v + (size_t)b * c->Skv * row, sizeof(float) * old * row);
                memcpy(kn + (size_t)b * c->Sq * row, c->k + ((size_t)b * c->Skv + old) * row, sizeof(float) * c->Sq * row);
                memcpy(vn + (size_t)b * c->Sq * row, c->v + ((size_t)b * c->Skv + old) * row, sizeof(float) * c->Sq * row);
            }
            if (old > 0) {
                sdpa_tensor ko = tu_tensor4(kb, SDPA_DTYPE_FLOAT32, c->B, old, c->Hkv, c->D);
                sdpa_tensor vo = tu_tensor4(vb, SDPA_DTYPE_FLOAT32, c->B, old, c->Hkv, c->D);
                st = sdpa_kv_cache_update(g_ctx2, cache, &ko, &vo, 0);
                TU_CHECK(st == SDPA_OK, "cache.update: %s", sdpa_status_code(st));
            }
            sdpa_tensor knt = tu_tensor4(kn, SDPA_DTYPE_FLOAT32, c->B, c->Sq, c->Hkv, c->D);
            sdpa_tensor vnt = tu_tensor4(vn, SDPA_DTYPE_FLOAT32, c->B, c->Sq, c->Hkv, c->D);
            sdpa_tensor to = tu_tensor4(out1, SDPA_DTYPE_FLOAT32, c->B, c->Sq, c->Hq, c->D);
            tu_fill_nan(out1, nq);
            tu_dirty_error(g_ctx2);
            st = sdpa_kv_cache_step(g_ctx2, cache, &tq, &knt, &vnt, NULL, &o, &to);
            tu_check_output(g_ctx2, st, "cache.step", out1, ref, nq, tq.dims);
            TU_CHECK(sdpa_ctx_scratch_bytes(g_ctx2) == scratch0,
                     "cache.step allocated: scratch %zu -> %zu bytes", scratch0, sdpa_ctx_scratch_bytes(g_ctx2));
            free(kb);
            free(vb);
            sdpa_kv_cache_free(cache);
        }
    }
done:
    free(ref);
    free(out1);
    free(out2);
    free(outr);
    tu_context[0] = '\0';
}

static void fill(float * p, size_t n, tu_rng * rng, float lo, float hi) {
    for (size_t i = 0; i < n; i++) p[i] = tu_rng_uniform(rng, lo, hi);
}

/* Shapes: decode over one chunk, split-KV decode (> 256 keys, B = Hkv = 1),
 * GQA decode, causal prefill. */
typedef struct shape { int32_t B, Sq, Hq, Hkv, D, Skv, causal; } shape;
static const shape k_shapes[] = {
    { 1, 1, 4, 1, 16, 200, 0 },
    { 1, 1, 8, 1, 64, 1000, 1 },
    { 2, 1, 8, 2, 32, 300, 1 },
    { 1, 16, 2, 1, 16, 16, 1 },
    { 1, 5, 4, 2, 24, 77, 1 },
};
#define N_SHAPES (sizeof k_shapes / sizeof k_shapes[0])

/* scale 1e30 with |q| ~ 1e10: scale * q is inf. Half the keys are exactly 0
 * (exact score 0, old kernel: inf * 0 = NaN); the others are tiny, so that
 * scale * (q . k) is of order 1 and the softmax is not uniform. */
static void test_huge_scale(void) {
    for (size_t s = 0; s < N_SHAPES; s++) {
        const shape * sh = &k_shapes[s];
        range_case c = make_case("scale 1e30, |q| ~ 1e10, half the keys 0", sh->B, sh->Sq, sh->Hq, sh->Hkv, sh->D,
                                 sh->Skv, sh->causal, 1e30f);
        tu_rng rng;
        tu_rng_seed(&rng, g_seed++);
        const size_t nq = (size_t)c.B * c.Sq * c.Hq * c.D, nk = (size_t)c.B * c.Skv * c.Hkv * c.D;
        fill(c.q, nq, &rng, -2e10f, 2e10f);
        fill(c.k, nk, &rng, -1e-40f, 1e-40f);  /* q . k ~ 1e-30 per element (normal floats) */
        for (size_t t = 0; t < nk / (size_t)c.D; t += 2) memset(c.k + t * c.D, 0, sizeof(float) * c.D);
        fill(c.v, nk, &rng, -1.0f, 1.0f);
        run_range_case(&c);
        free_case(&c);
    }
    /* exact scores ~ +-1e41: far beyond float, a one-hot softmax */
    const shape * sh = &k_shapes[1];
    range_case c = make_case("scale 1e30, |q| ~ 1e10, |k| ~ 1 (scores beyond float)", sh->B, sh->Sq, sh->Hq, sh->Hkv,
                             sh->D, sh->Skv, sh->causal, 1e30f);
    tu_rng rng;
    tu_rng_seed(&rng, g_seed++);
    fill(c.q, (size_t)c.B * c.Sq * c.Hq * c.D, &rng, -1e10f, 1e10f);
    fill(c.k, (size_t)c.B * c.Skv * c.Hkv * c.D, &rng, -1.0f, 1.0f);
    fill(c.v, (size_t)c.B * c.Skv * c.Hkv * c.D, &rng, -1.0f, 1.0f);
    run_range_case(&c);
    free_case(&c);
}

/* V near FLT_MAX (both signs, per row one sign) over many keys of similar
 * scores: the answer is a convex combination of V rows, finite; p.V before
 * the division by l is not. */
static void test_huge_values(void) {
    for (size_t s = 0; s < N_SHAPES; s++) {
        const shape * sh = &k_shapes[s];
        for (int sign = 1; sign >= -1; sign -= 2) {
            range_case c = make_case(sign > 0 ? "|v| near FLT_MAX, positive" : "|v| near FLT_MAX, mixed signs",
                                     sh->B, sh->Sq, sh->Hq, sh->Hkv, sh->D, sh->Skv, sh->causal, 0.0f);
            tu_rng rng;
            tu_rng_seed(&rng, g_seed++);
            const size_t nq = (size_t)c.B * c.Sq * c.Hq * c.D, nk = (size_t)c.B * c.Skv * c.Hkv * c.D;
            fill(c.q, nq, &rng, -0.1f, 0.1f);
            fill(c.k, nk, &rng, -0.1f, 0.1f);
            fill(c.v, nk, &rng, 0.5f * FLT_MAX, FLT_MAX);
            if (sign < 0)  /* each element's sign fixed per dim, so sums still overflow */
                for (size_t i = 0; i < nk; i++) if ((i % (size_t)c.D) % 3 == 1) c.v[i] = -c.v[i];
            run_range_case(&c);
            free_case(&c);
        }
    }
}

/* Float mask -FLT_MAX on every key, scores ~ -1e35 (distinct per key): each
 * mask + score overflows to -inf in float, so the old kernel took the row
 * for fully masked and wrote zeros; exactly it is a softmax over finite
 * scores (one-hot at the largest). */
static void test_mask_overflow(void) {
    static const shape shapes[] = { { 1, 1, 2, 1, 16, 40, 0 }, { 1, 1, 2, 1, 16, 700, 0 }, { 1, 3, 2, 2, 8, 33, 0 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape * sh = &shapes[s];
        range_case c = make_case("float mask -FLT_MAX + scores ~ -1e35", sh->B, sh->Sq, sh->Hq, sh->Hkv, sh->D,
                                 sh->Skv, 0, 1.0f);
        tu_rng rng;
        tu_rng_seed(&rng, g_seed++);
        const size_t nq = (size_t)c.B * c.Sq * c.Hq * c.D;
        for (size_t i = 0; i < nq; i++) c.q[i] = 1e17f;
        for (int32_t b = 0; b < c.B; b++)
            for (int32_t t = 0; t < c.Skv; t++)
                for (int32_t h = 0; h < c.Hkv; h++)
                    for (int32_t d = 0; d < c.D; d++) {
                        const size_t at = (((size_t)b * c.Skv + t) * c.Hkv + h) * c.D + d;
                        c.k[at] = -(1.0f + (float)((t * 7 + h) % c.Skv) / (float)c.Skv) * 1e18f;
                    }
        fill(c.v, (size_t)c.B * c.Skv * c.Hkv * c.D, &rng, -1.0f, 1.0f);
        c.mask = tu_malloc(sizeof(float) * (size_t)c.Sq * c.Skv);
        for (size_t i = 0; i < (size_t)c.Sq * c.Skv; i++) c.mask[i] = -FLT_MAX;
        run_range_case(&c);
        free_case(&c);
    }
}

/* q . k whose SIMD partial sums overflow although the dot does not: with
 * scale 1 and D = 8, lane 0 holds d = 0 and d = 4: -2e38 + -2e38 = -inf,
 * while lanes 1 and 2 add +3e38 each, so the exact dot is +2e38, the best
 * key. A kernel that keeps -inf drops it and attends the other keys. */
static void test_partial_sum_overflow(void) {
    static const int32_t lens[] = { 5, 400 };
    for (int a = 0; a < 2; a++) {
        range_case c = make_case("q.k partial sums overflow, the dot does not", 1, 1, 2, 1, 8, lens[a], 0, 1.0f);
        tu_rng rng;
        tu_rng_seed(&rng, g_seed++);
        for (int32_t i = 0; i < 2 * 8; i++) c.q[i] = 1e19f;
        fill(c.k, (size_t)c.Skv * 8, &rng, -1e-19f, 1e-19f);
        static const float k0[8] = { -2e19f, 3e19f, 3e19f, 0.0f, -2e19f, 0.0f, 0.0f, 0.0f };
        memcpy(c.k + (size_t)(c.Skv / 2) * 8, k0, sizeof k0);
        fill(c.v, (size_t)c.Skv * 8, &rng, -1.0f, 1.0f);
        run_range_case(&c);
        free_case(&c);
    }
}

int main(void) {
    double t0 = tu_seconds();
    if (!tu_ctx_pair(&g_ctx1, &g_ctx2)) return 1;
    sdpa_status st = SDPA_E_ARG;
    g_ctx8 = sdpa_ctx_create(8, &st);
    if (!TU_CHECK(g_ctx8 && st == SDPA_OK, "sdpa_ctx_create(8): %s", sdpa_status_code(st))) return tu_summary("test_limits");
#ifndef __EMSCRIPTEN__
    TU_CHECK(sdpa_ctx_threads(g_ctx8) == 8, "sdpa_ctx_create(8) runs %d threads", sdpa_ctx_threads(g_ctx8));
    sdpa_ctx_set_parallel_min_macs(g_ctx8, 0);
#endif
    if (sdpa_ctx_threads(g_ctx8) != 8) printf("  note: sdpa_ctx_create(8) runs %d threads here\n", sdpa_ctx_threads(g_ctx8));
    struct {
        const char * name;
        void (*fn)(void);
    } sections[] = {
        { "workspace saturates", test_workspace_saturates },
        { "huge head dim: E_OOM", test_huge_head_dim },
        { "cache create wraps", test_cache_create_wraps },
        { "key rows limit", test_key_rows_limit },
        { "scale 1e30", test_huge_scale },
        { "|v| near FLT_MAX", test_huge_values },
        { "mask + score overflow", test_mask_overflow },
        { "partial-sum overflow", test_partial_sum_overflow },
    };
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        long f0 = tu_failures;
        double s0 = tu_seconds();
        sections[s].fn();
        printf("  %-24s %6.2f s%s\n", sections[s].name, tu_seconds() - s0, tu_failures > f0 ? "  FAILED" : "");
    }
    printf("  total %.2f s\n", tu_seconds() - t0);
    sdpa_ctx_free(g_ctx1);
    sdpa_ctx_free(g_ctx2);
    sdpa_ctx_free(g_ctx8);
    return tu_summary("test_limits");
}
