/*
 * test_group.c: a group's create, fork and truncate in C (include/sdpa.h
 * sdpa_kv_group_*, src/cache/kv_group.c): every layer is checked before any
 * changes (the lowest status wins, ties to the lowest layer, the message
 * names the layer), and each call is all or nothing: a rejected call and an
 * E_OOM while making the layers (sdpa_ctx_fail_cache_alloc) leave every layer
 * as it was, byte for byte, and keep nothing made. Rows read back are the
 * values written (a formula of position, head and element, exact in float16),
 * not another run of the code under test.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdpa.h"
#include "testutil.h"
#include "../../src/wasm/api.h"  /* sdpa_ctx_fail_cache_alloc: the tests' allocation fault */

enum { B = 1, H = 2, D = 8, NL = 4, ROWS = 300, WINDOW = 16, SINKS = 2 };

static sdpa_ctx * g_ctx;

/* Four layers as a Gemma-like model mixes them: plain, windowed, float16, int8. */
static const sdpa_kv_cache_desc DESCS[NL] = {
    { B, 512, H, D, SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, 0, 0, 0 },
    { B, 4096, H, D, SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT32, WINDOW, SINKS, 0 },
    { B, 512, H, D, SDPA_DTYPE_FLOAT16, SDPA_DTYPE_FLOAT16, 0, 0, 0 },
    { B, 512, H, D, SDPA_DTYPE_INT8, SDPA_DTYPE_INT8, 0, 0, 0 },
};

/* The value written at (layer, K or V, row t, head h, element d): a multiple of 1/8 in [-4, 4), exact in float16. */
static float value_at(int layer, int which, int t, int h, int d) {
    return (float)((t * 7 + h * 3 + d + layer * 5 + which * 11) % 64 - 32) / 8.0f;
}

/* Rows start .. start+n-1 of layer `layer` written into c. */
static sdpa_status write_rows(sdpa_kv_cache * c, int layer, int start, int n) {
    float * k = tu_malloc((size_t)n * H * D * sizeof(float)), * v = tu_malloc((size_t)n * H * D * sizeof(float));
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) {
                k[((size_t)t * H + h) * D + d] = value_at(layer, 0, start + t, h, d);
                v[((size_t)t * H + h) * D + d] = value_at(layer, 1, start + t, h, d);
            }
    sdpa_tensor kt = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D), vt = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D);
    sdpa_status st = sdpa_kv_cache_update(g_ctx, c, &kt, &vt, start);
    free(k);
    free(v);
    return st;
}

/* The rows a cache still holds: all below length, or a windowed cache's sink rows and those from window_start. */
static int kept(const sdpa_kv_cache * c, int t) {
    return !sdpa_kv_cache_window(c) || t < sdpa_kv_cache_sink_tokens(c) || t >= sdpa_kv_cache_window_start(c);
}

/* Every kept row of the float32 and float16 layers reads back as value_at wrote it. */
static int rows_as_written(sdpa_kv_cache * const * layers, int n_layers, const char * what) {
    int ok = 1;
    float k[H * D], v[H * D];
    for (int i = 0; i < n_layers && i < 3; i++) {
        for (int t = 0; t < sdpa_kv_cache_length(layers[i]); t++) {
            if (!kept(layers[i], t)) continue;
            sdpa_tensor kt = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, 1, H, D), vt = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, 1, H, D);
            sdpa_status st = sdpa_kv_cache_read(g_ctx, layers[i], t, 1, &kt, &vt);
            if (!TU_CHECK(st == SDPA_OK, "%s: layer %d read row %d: %s", what, i, t, sdpa_ctx_last_error(g_ctx))) return 0;
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++)
                    if (k[h * D + d] != value_at(i, 0, t, h, d) || v[h * D + d] != value_at(i, 1, t, h, d)) ok = 0;
            if (!ok) return TU_CHECK(0, "%s: layer %d row %d is not what was written", what, i, t);
        }
    }
    return 1;
}

/* A layer as stored: its length, window start, page count and every kept row's K and V records. */
typedef struct layer_state {
    int32_t length, window_start, pages;
    unsigned char * records;
    size_t bytes;
} layer_state;

static layer_state state_of(const sdpa_kv_cache * c) {
    layer_state s = { sdpa_kv_cache_length(c), sdpa_kv_cache_window_start(c), sdpa_kv_cache_pages(c), NULL, 0 };
    const size_t rec[2] = { sdpa_kv_cache_record_bytes(c, 0), sdpa_kv_cache_record_bytes(c, 1) };
    s.records = tu_malloc((size_t)s.length * B * H * (rec[0] + rec[1]) + 1);
    for (int t = 0; t < s.length; t++) {
        if (!kept(c, t)) continue;
        for (int which = 0; which < 2; which++) {
            const size_t n = (size_t)B * H * rec[which];
            sdpa_status st = sdpa_kv_cache_read_records(g_ctx, c, t, 1, which, s.records + s.bytes, n);
            TU_CHECK(st == SDPA_OK, "records of row %d: %s", t, sdpa_ctx_last_error(g_ctx));
            s.bytes += n;
        }
    }
    return s;
}

static int same_state(const layer_state * a, const layer_state * b) {
    return a->length == b->length && a->window_start == b->window_start && a->pages == b->pages && a->bytes == b->bytes &&
           memcmp(a->records, b->records, a->bytes) == 0;
}

/* Every layer's state now against `before` (and the pool's pages in use). */
static void check_unchanged(sdpa_kv_cache * const * layers, const layer_state * before, int64_t pages_before, const char * what) {
    for (int i = 0; i < NL; i++) {
        layer_state now = state_of(layers[i]);
        TU_CHECK(same_state(&now, &before[i]), "%s: layer %d changed (length %d -> %d, window start %d -> %d, pages %d -> %d)",
                 what, i, before[i].length, now.length, before[i].window_start, now.window_start, before[i].pages, now.pages);
        free(now.records);
    }
    sdpa_memory_stats m;
    sdpa_ctx_memory(g_ctx, &m);
    TU_CHECK(m.pages_in_use == pages_before, "%s: pages in use %lld -> %lld", what, (long long)pages_before, (long long)m.pages_in_use);
}

static int64_t pages_in_use(void) {
    sdpa_memory_stats m;
    sdpa_ctx_memory(g_ctx, &m);
    return m.pages_in_use;
}

/* A failed call's status and message: the call, the layer, the rule's words. */
static void check_failure(sdpa_status st, sdpa_status want, const char * prefix, const char * words, const char * what) {
    const char * msg = sdpa_ctx_last_error(g_ctx);
    TU_CHECK(st == want, "%s: %s, expected %s (%s)", what, sdpa_status_code(st), sdpa_status_code(want), msg);
    TU_CHECK(strncmp(msg, prefix, strlen(prefix)) == 0, "%s: message \"%s\" should start \"%s\"", what, msg, prefix);
    TU_CHECK(tu_contains_ci(msg, words), "%s: message \"%s\" should say \"%s\"", what, msg, words);
}

static sdpa_kv_cache * const SENTINEL = (sdpa_kv_cache *)&g_ctx;

static void test_create(void) {
    sdpa_kv_cache * out[NL];
    sdpa_kv_cache_desc bad[NL];
    const int64_t pages0 = pages_in_use();
    /* the lowest status over the layers wins: layer 3's E_DTYPE after layer 2's E_DIMS */
    memcpy(bad, DESCS, sizeof bad);
    bad[2].head_dim = 0;
    bad[3].key_dtype = 99;
    for (int i = 0; i < NL; i++) out[i] = SENTINEL;
    check_failure(sdpa_kv_group_create(g_ctx, bad, NL, out), SDPA_E_DIMS, "sdpa_kv_group_create: layers[2]: ", "headDim is 0",
                  "create, E_DIMS at 2 and E_DTYPE at 3");
    /* ties go to the lowest layer */
    bad[1].head_dim = -1;
    check_failure(sdpa_kv_group_create(g_ctx, bad, NL, out), SDPA_E_DIMS, "sdpa_kv_group_create: layers[1]: ", "headDim is -1",
                  "create, E_DIMS at 1 and 2");
    /* a page too large for one allocation (E_OOM, a size rule) ranks after every other rule of every layer */
    memcpy(bad, DESCS, sizeof bad);
    bad[1].head_dim = 1 << 24;
    bad[3].value_dtype = 99;
    check_failure(sdpa_kv_group_create(g_ctx, bad, NL, out), SDPA_E_DTYPE, "sdpa_kv_group_create: layers[3]: ", "valueDtype",
                  "create, E_OOM at 1 and E_DTYPE at 3");
    bad[3].value_dtype = SDPA_DTYPE_INT8;
    check_failure(sdpa_kv_group_create(g_ctx, bad, NL, out), SDPA_E_OOM, "sdpa_kv_group_create: layers[1]: ", "bytes",
                  "create, E_OOM at 1");
    check_failure(sdpa_kv_group_create(g_ctx, DESCS, 0, out), SDPA_E_ARG, "sdpa_kv_group_create: ", "at least one layer", "create, n = 0");
    check_failure(sdpa_kv_group_create(g_ctx, NULL, NL, out), SDPA_E_ARG, "sdpa_kv_group_create: ", "descs", "create, no descs");
    for (int i = 0; i < NL; i++) TU_CHECK(out[i] == SENTINEL, "a rejected create wrote out[%d]", i);
    /* E_OOM while making them: the 3rd table cannot be had; the two made are freed, out all NULL */
    sdpa_ctx_fail_cache_alloc(g_ctx, 3);
    check_failure(sdpa_kv_group_create(g_ctx, DESCS, NL, out), SDPA_E_OOM, "sdpa_kv_group_create: layer 2: ", "cannot allocate",
                  "create, E_OOM making layer 2");
    for (int i = 0; i < NL; i++) TU_CHECK(out[i] == NULL, "E_OOM while making: out[%d] is %p, expected NULL", i, (void *)out[i]);
    TU_CHECK(pages_in_use() == pages0, "E_OOM while making: pages in use %lld -> %lld", (long long)pages0, (long long)pages_in_use());
    /* and the fault was used up: the same call makes every layer, as asked */
    sdpa_status st = sdpa_kv_group_create(g_ctx, DESCS, NL, out);
    TU_CHECK(st == SDPA_OK, "create: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(g_ctx));
    if (st != SDPA_OK) return;
    for (int i = 0; i < NL; i++) {
        int32_t b, m, h, d;
        sdpa_kv_cache_shape(out[i], &b, &m, &h, &d);
        TU_CHECK(b == B && m == DESCS[i].max_seq_len && h == H && d == D && sdpa_kv_cache_length(out[i]) == 0 &&
                     sdpa_kv_cache_key_dtype(out[i]) == DESCS[i].key_dtype && sdpa_kv_cache_window(out[i]) == DESCS[i].window &&
                     sdpa_kv_cache_sink_tokens(out[i]) == DESCS[i].sink_tokens,
                 "create: layer %d is not the cache its desc asks for", i);
        sdpa_kv_cache_free(out[i]);
    }
}

/* A group of NL layers, ROWS rows written in each, layer 2 truncated to 260 (so the layers differ). */
static int make_filled(sdpa_kv_cache ** layers) {
    if (!TU_CHECK(sdpa_kv_group_create(g_ctx, DESCS, NL, layers) == SDPA_OK, "create: %s", sdpa_ctx_last_error(g_ctx))) return 0;
    for (int i = 0; i < NL; i++) TU_CHECK(write_rows(layers[i], i, 0, ROWS) == SDPA_OK, "write layer %d: %s", i, sdpa_ctx_last_error(g_ctx));
    TU_CHECK(sdpa_kv_cache_truncate(g_ctx, layers[2], 260) == SDPA_OK, "truncate layer 2");
    return 1;
}

static void free_all(sdpa_kv_cache ** layers) {
    for (int i = 0; i < NL; i++) sdpa_kv_cache_free(layers[i]);
}

static void test_truncate(void) {
    sdpa_kv_cache * layers[NL];
    if (!make_filled(layers)) return;
    rows_as_written(layers, NL, "filled");
    layer_state before[NL];
    for (int i = 0; i < NL; i++) before[i] = state_of(layers[i]);
    const int64_t pages0 = pages_in_use();
    const int32_t ws = sdpa_kv_cache_window_start(layers[1]);
    TU_CHECK(ws > 70 && ws < 260, "layer 1's window start %d", ws);
    /* layer 1 evicted rows 2 .. ws-1; layer 2 holds 260 rows; -1 breaks every layer's first rule */
    check_failure(sdpa_kv_group_truncate(g_ctx, layers, NL, 70), SDPA_E_CAPACITY, "sdpa_kv_group_truncate: layer 1: ", "evicted",
                  "truncate 70");
    check_failure(sdpa_kv_group_truncate(g_ctx, layers, NL, 280), SDPA_E_CAPACITY, "sdpa_kv_group_truncate: layer 2: ",
                  "length 280 is past the 260 rows written", "truncate 280");
    check_failure(sdpa_kv_group_truncate(g_ctx, layers, NL, -1), SDPA_E_START_POS, "sdpa_kv_group_truncate: layer 0: ", "length is -1",
                  "truncate -1");
    sdpa_kv_cache * holed[NL] = { layers[0], layers[1], NULL, layers[3] };
    check_failure(sdpa_kv_group_truncate(g_ctx, holed, NL, 1), SDPA_E_ARG, "sdpa_kv_group_truncate: layer 2: ", "missing",
                  "truncate, layer 2 NULL");
    check_failure(sdpa_kv_group_truncate(g_ctx, NULL, NL, 1), SDPA_E_ARG, "sdpa_kv_group_truncate: ", "layers is missing",
                  "truncate, no layers");
    check_failure(sdpa_kv_group_truncate(g_ctx, layers, 0, 1), SDPA_E_ARG, "sdpa_kv_group_truncate: ", "at least one layer",
                  "truncate, n = 0");
    check_unchanged(layers, before, pages0, "rejected truncates");
    /* a fork shares every page: truncating the fork group copies each shared last page first, the original keeps its rows */
    sdpa_kv_cache * twin[NL];
    TU_CHECK(sdpa_kv_group_fork(g_ctx, layers, NL, twin) == SDPA_OK, "fork: %s", sdpa_ctx_last_error(g_ctx));
    sdpa_status st = sdpa_kv_group_truncate(g_ctx, twin, NL, ws + 3);
    TU_CHECK(st == SDPA_OK, "truncate the fork: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(g_ctx));
    for (int i = 0; i < NL; i++) TU_CHECK(sdpa_kv_cache_length(twin[i]) == ws + 3, "fork layer %d length %d", i, sdpa_kv_cache_length(twin[i]));
    rows_as_written(twin, NL, "truncated fork");
    check_unchanged(layers, before, pages_in_use(), "the original after its fork's truncate");
    for (int i = 0; i < NL; i++) {
        if (i == 1) continue;  /* (a windowed cache reads no row past its length) */
        float k[H * D], v[H * D];
        sdpa_tensor kt = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, 1, H, D), vt = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, 1, H, D);
        st = sdpa_kv_cache_read(g_ctx, twin[i], ws + 3, 1, &kt, &vt);
        int zeros = st == SDPA_OK;
        for (int e = 0; e < H * D; e++) zeros &= k[e] == 0 && v[e] == 0;
        TU_CHECK(zeros, "fork layer %d: row %d past the truncate does not read as zeros (%s)", i, ws + 3, sdpa_status_code(st));
    }
    free_all(twin);
    /* down to a sink row of layer 1 in every layer */
    TU_CHECK(sdpa_kv_group_truncate(g_ctx, layers, NL, 1) == SDPA_OK, "truncate 1: %s", sdpa_ctx_last_error(g_ctx));
    for (int i = 0; i < NL; i++) TU_CHECK(sdpa_kv_cache_length(layers[i]) == 1, "layer %d length %d after truncate 1", i, sdpa_kv_cache_length(layers[i]));
    rows_as_written(layers, NL, "truncate 1");
    for (int i = 0; i < NL; i++) free(before[i].records);
    free_all(layers);
}

static void test_fork(void) {
    sdpa_kv_cache * layers[NL], * out[NL];
    if (!make_filled(layers)) return;
    layer_state before[NL];
    for (int i = 0; i < NL; i++) before[i] = state_of(layers[i]);
    const int64_t pages0 = pages_in_use();
    for (int i = 0; i < NL; i++) out[i] = SENTINEL;
    sdpa_kv_cache * holed[NL] = { layers[0], NULL, layers[2], NULL };
    check_failure(sdpa_kv_group_fork(g_ctx, holed, NL, out), SDPA_E_ARG, "sdpa_kv_group_fork: layer 1: ", "cache is missing",
                  "fork, layers 1 and 3 NULL");
    check_failure(sdpa_kv_group_fork(g_ctx, layers, NL, NULL), SDPA_E_ARG, "sdpa_kv_group_fork: ", "out is missing", "fork, no out");
    for (int i = 0; i < NL; i++) TU_CHECK(out[i] == SENTINEL, "a rejected fork wrote out[%d]", i);
    /* E_OOM at the 2nd layer's table: the fork made is freed (its page references dropped), out all NULL */
    sdpa_ctx_fail_cache_alloc(g_ctx, 2);
    check_failure(sdpa_kv_group_fork(g_ctx, layers, NL, out), SDPA_E_OOM, "sdpa_kv_group_fork: layer 1: ", "cannot allocate",
                  "fork, E_OOM at layer 1");
    for (int i = 0; i < NL; i++) TU_CHECK(out[i] == NULL, "E_OOM fork: out[%d] is %p, expected NULL", i, (void *)out[i]);
    check_unchanged(layers, before, pages0, "E_OOM fork");
    /* no reference was left behind: a write into layer 0's last, partly filled page copies nothing */
    TU_CHECK(write_rows(layers[0], 0, ROWS, 1) == SDPA_OK, "write after the E_OOM fork");
    TU_CHECK(pages_in_use() == pages0, "a write into layer 0's own last page took %lld pages: a fork's reference was kept",
             (long long)(pages_in_use() - pages0));
    TU_CHECK(sdpa_kv_cache_truncate(g_ctx, layers[0], ROWS) == SDPA_OK, "truncate layer 0 back");
    /* a fork holds the same rows; writing it leaves the original as it was */
    sdpa_status st = sdpa_kv_group_fork(g_ctx, layers, NL, out);
    TU_CHECK(st == SDPA_OK, "fork: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(g_ctx));
    if (st != SDPA_OK) return;
    for (int i = 0; i < NL; i++) {
        layer_state twin = state_of(out[i]);
        TU_CHECK(same_state(&twin, &before[i]), "fork: layer %d does not hold the original's rows", i);
        free(twin.records);
        TU_CHECK(write_rows(out[i], i + 1, sdpa_kv_cache_length(out[i]) - 5, 5) == SDPA_OK, "write the fork's layer %d", i);
    }
    check_unchanged(layers, before, pages_in_use(), "the original after writes into its fork");
    free_all(out);
    for (int i = 0; i < NL; i++) free(before[i].records);
    free_all(layers);
}

/* Layers made by one context, truncated as a group through another (sdpa.h: a
 * cache's calls may come from any context; a write takes pages from the
 * creating context's pool): the pages a truncate copies come from the makers'
 * pools, so the group's reservation must be made there (review 4 finding 1:
 * it was made in the calling context's pool, and the truncate failed E_OOM). */
static void test_other_context(void) {
    sdpa_status st;
    sdpa_ctx * other = sdpa_ctx_create(1, &st);
    if (!TU_CHECK(other != NULL, "second ctx: %s", sdpa_status_code(st))) return;
    sdpa_kv_cache * layers[2], * forks[2];
    const sdpa_kv_cache_desc descs[2] = { DESCS[0], DESCS[0] };
    if (!TU_CHECK(sdpa_kv_group_create(g_ctx, descs, 2, layers) == SDPA_OK, "create: %s", sdpa_ctx_last_error(g_ctx))) return;
    for (int i = 0; i < 2; i++) TU_CHECK(write_rows(layers[i], i, 0, 20) == SDPA_OK, "write layer %d", i);
    TU_CHECK(sdpa_kv_group_fork(g_ctx, layers, 2, forks) == SDPA_OK, "fork: %s", sdpa_ctx_last_error(g_ctx));
    /* the last page of each layer is shared with its fork: truncating to 18 copies it */
    st = sdpa_kv_group_truncate(other, layers, 2, 18);
    TU_CHECK(st == SDPA_OK, "truncate through another context: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(other));
    for (int i = 0; i < 2; i++) {
        TU_CHECK(sdpa_kv_cache_length(layers[i]) == 18, "layer %d length %d, expected 18", i, sdpa_kv_cache_length(layers[i]));
        TU_CHECK(sdpa_kv_cache_length(forks[i]) == 20, "fork %d length %d, expected 20", i, sdpa_kv_cache_length(forks[i]));
    }
    rows_as_written(layers, 2, "layers after the truncate");
    rows_as_written(forks, 2, "forks after the truncate");
    for (int i = 0; i < 2; i++) { sdpa_kv_cache_free(layers[i]); sdpa_kv_cache_free(forks[i]); }
    sdpa_ctx_free(other);
}

int main(void) {
    double t0 = tu_seconds();
    sdpa_status st;
    g_ctx = sdpa_ctx_create(1, &st);
    if (!TU_CHECK(g_ctx != NULL, "ctx: %s", sdpa_status_code(st))) return tu_summary("test_group");
    test_create();
    test_truncate();
    test_fork();
    test_other_context();
    TU_CHECK(pages_in_use() == 0, "every page back: %lld in use", (long long)pages_in_use());
    sdpa_ctx_free(g_ctx);
    printf("  %.2f s\n", tu_seconds() - t0);
    return tu_summary("test_group");
}
