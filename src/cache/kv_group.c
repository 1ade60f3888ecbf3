/* kv_group.c: a group, the caches of all the layers of a model, made,
 * forked and truncated as one (include/sdpa.h sdpa_kv_group_*; CONTRACT.md
 * section 3, "Cache groups"). The group's state machine, beside the single
 * cache's (kv_cache.c), on the entries floor:
 *
 *   check every layer   (no change: the lowest status wins, ties to the
 *                         lowest layer, its message names the layer)
 *   take what all need  (create / fork: each layer's cache in turn, the ones
 *                         made freed again on E_OOM; truncate: the pages of
 *                         every layer's copy, from the pool at once)
 *   change every layer  (nothing can fail any more)
 *
 * So a failure of any kind leaves every layer as it was. A group is an array
 * of caches the caller owns (JS: KVCacheGroup's layers); nothing is kept here. */
#include "internal.h"
#include "cache/page_pool.h"
#include "contract/check.h"

#include <stdio.h>
#include <stdlib.h>

void sdpa_layer_failure_note(sdpa_layer_failure * f, const sdpa_ctx * ctx, sdpa_status status, int32_t layer) {
    if (status == SDPA_OK || (f->status != SDPA_OK && status >= f->status)) return;
    f->status = status;
    f->layer = layer;
    snprintf(f->words, sizeof f->words, "%s", ctx->last_error);
}

sdpa_status sdpa_layer_failure_report(sdpa_ctx * ctx, const char * layer_fmt, const sdpa_layer_failure * f) {
    char layer[32];
    snprintf(layer, sizeof layer, layer_fmt, (int)f->layer);
    return sdpa_named(ctx, sdpa_fail(ctx, f->status, "%s", f->words), layer);
}

/* The arrays a group call is given: `in` (descs or layers) of n >= 1, and an out array when it makes caches. */
static sdpa_status check_arrays(sdpa_ctx * ctx, const void * in, const char * in_name, int32_t n, bool makes,
                                const void * out) {
    if (!in) return sdpa_fail(ctx, SDPA_E_ARG, "%s is missing", in_name);
    if (n < 1) return sdpa_fail(ctx, SDPA_E_ARG, "n is %d; expected at least one layer", (int)n);
    if (makes && !out) return sdpa_fail(ctx, SDPA_E_ARG, "out is missing");
    return SDPA_OK;
}

/* The caches out[0 .. made-1] freed again, every out[i] NULL (an E_OOM while making them). */
static void unmake(sdpa_kv_cache ** out, int32_t made, int32_t n) {
    for (int32_t i = 0; i < made; i++) sdpa_kv_cache_free(out[i]);
    for (int32_t i = 0; i < n; i++) out[i] = NULL;
}

/* Makes layer i (create: descs[i]; fork: a fork of layers[i]) into out[i]. */
typedef sdpa_status (*make_layer)(sdpa_ctx * ctx, const void * from, int32_t i, sdpa_kv_cache ** out);

static sdpa_status make_all(sdpa_ctx * ctx, const char * layer_fmt, make_layer make, const void * from, int32_t n,
                            sdpa_kv_cache ** out) {
    for (int32_t i = 0; i < n; i++) {
        const sdpa_status st = make(ctx, from, i, &out[i]);
        if (st != SDPA_OK) {
            sdpa_layer_failure f = { SDPA_OK, 0, "" };
            sdpa_layer_failure_note(&f, ctx, st, i);
            unmake(out, i, n);
            return sdpa_layer_failure_report(ctx, layer_fmt, &f);
        }
    }
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

static sdpa_status create_layer(sdpa_ctx * ctx, const void * from, int32_t i, sdpa_kv_cache ** out) {
    return sdpa_kv_cache_create_desc_unnamed(ctx, (const sdpa_kv_cache_desc *)from + i, true, out);
}

static sdpa_status fork_layer(sdpa_ctx * ctx, const void * from, int32_t i, sdpa_kv_cache ** out) {
    return sdpa_kv_cache_fork_unnamed(ctx, ((sdpa_kv_cache * const *)from)[i], out);
}

sdpa_status sdpa_kv_group_create_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache_desc * descs, int32_t n, sdpa_kv_cache ** out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status st = check_arrays(ctx, descs, "descs", n, true, out);
    if (st != SDPA_OK) return st;
    sdpa_layer_failure f = { SDPA_OK, 0, "" };
    for (int32_t i = 0; i < n; i++) {
        sdpa_kv_cache * unused;
        sdpa_layer_failure_note(&f, ctx, sdpa_kv_cache_create_desc_unnamed(ctx, &descs[i], false, &unused), i);
    }
    if (f.status != SDPA_OK) return sdpa_layer_failure_report(ctx, "layers[%d]", &f);
    return make_all(ctx, "layer %d", create_layer, descs, n, out);
}

sdpa_status sdpa_kv_group_create(sdpa_ctx * ctx, const sdpa_kv_cache_desc * descs, int32_t n, sdpa_kv_cache ** out) {
    return sdpa_named(ctx, sdpa_kv_group_create_unnamed(ctx, descs, n, out), __func__);
}

sdpa_status sdpa_kv_group_fork_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, sdpa_kv_cache ** out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status st = check_arrays(ctx, layers, "layers", n, true, out);
    if (st != SDPA_OK) return st;
    sdpa_layer_failure f = { SDPA_OK, 0, "" };
    for (int32_t i = 0; i < n; i++) sdpa_layer_failure_note(&f, ctx, sdpa_check_cache_fork(ctx, layers[i], out), i);
    if (f.status != SDPA_OK) return sdpa_layer_failure_report(ctx, "layer %d", &f);
    return make_all(ctx, "layer %d", fork_layer, layers, n, out);
}

sdpa_status sdpa_kv_group_fork(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, sdpa_kv_cache ** out) {
    return sdpa_named(ctx, sdpa_kv_group_fork_unnamed(ctx, layers, n, out), __func__);
}

/* The pages every layer's truncate takes, summed per page pool (its creating
 * context's) and page size (layers of one size draw on one free list), made
 * sure of in one ensure per pool. */
static sdpa_status reserve_truncates(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, int32_t length) {
    size_t * sizes = NULL;
    uint64_t * needs = NULL;
    sdpa_page_pool ** pools = NULL;
    int32_t n_sizes = 0;
    for (int32_t i = 0; i < n; i++) {
        uint64_t need[2];
        sdpa_kv_cache_truncate_pages(layers[i], length, &need[0], &need[1]);
        for (int kind = 0; kind < 2; kind++) {
            if (!need[kind]) continue;
            if (!sizes) {  /* (a truncate that copies no page allocates nothing) */
                sizes = malloc(4 * (size_t)n * sizeof *sizes);  /* (and room for the per-pool gather) */
                needs = malloc(4 * (size_t)n * sizeof *needs);
                pools = malloc(2 * (size_t)n * sizeof *pools);
                if (!sizes || !needs || !pools) {
                    free(sizes); free(needs); free(pools);
                    return sdpa_fail(ctx, SDPA_E_OOM, "cannot allocate the list of %d layers' pages", (int)n);
                }
            }
            const size_t bytes = kind ? layers[i]->f16_format.page_bytes : layers[i]->format.page_bytes;
            sdpa_page_pool * pool = layers[i]->ctx->pages;
            int32_t at = 0;
            while (at < n_sizes && (sizes[at] != bytes || pools[at] != pool)) at++;
            if (at == n_sizes) { sizes[n_sizes] = bytes; pools[n_sizes] = pool; needs[n_sizes++] = 0; }
            needs[at] += need[kind];
        }
    }
    sdpa_status st = SDPA_OK;
    if (n_sizes > 0 && !sdpa_page_pool_ensure_pools(pools, sizes, needs, n_sizes, sizes + 2 * n, needs + 2 * n)) {
        uint64_t total = 0;
        for (int32_t at = 0; at < n_sizes; at++) total += needs[at];
        st = sdpa_fail(ctx, SDPA_E_OOM, "the page pool cannot grow by %llu pages (of %d sizes); no layer was truncated",
                       (unsigned long long)total, (int)n_sizes);
    }
    free(sizes);
    free(needs);
    free(pools);
    return st;
}

sdpa_status sdpa_kv_group_truncate_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, int64_t length) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status st = check_arrays(ctx, layers, "layers", n, false, NULL);
    if (st != SDPA_OK) return st;
    sdpa_layer_failure f = { SDPA_OK, 0, "" };
    for (int32_t i = 0; i < n; i++) sdpa_layer_failure_note(&f, ctx, sdpa_check_cache_truncate(ctx, layers[i], length), i);
    if (f.status != SDPA_OK) return sdpa_layer_failure_report(ctx, "layer %d", &f);
    /* every layer accepted length: 0 <= length <= its length, an int32 */
    st = reserve_truncates(ctx, layers, n, (int32_t)length);
    if (st != SDPA_OK) return st;
    for (int32_t i = 0; i < n; i++) {
        /* cannot fail: checked, and the pool holds every page each takes */
        st = sdpa_kv_cache_truncate_unnamed(ctx, layers[i], (int32_t)length);
        if (st != SDPA_OK) {
            sdpa_layer_failure_note(&f, ctx, st, i);
            return sdpa_layer_failure_report(ctx, "layer %d", &f);
        }
    }
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_kv_group_truncate(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, int32_t length) {
    return sdpa_named(ctx, sdpa_kv_group_truncate_unnamed(ctx, layers, n, length), __func__);
}
