/* api.c: the wasm-only entries (api.h). Each checks its call's rules once
 * and runs the body of the public entry it stands for (internal.h, the
 * `_unnamed` ones): a failure leaves the rule's words alone in the context's
 * message, and the JS package puts its call's name first. */
#include "api.h"

#include "../contract/check.h"
#include "../cache/page_pool.h"
#include "../internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An integer held in a double, |x| <= 2^53 (false for NaN, fractions, beyond). */
static bool whole(double x, int64_t * out) {
    const double exact = 9007199254740992.0;  /* 2^53 */
    if (!(x >= -exact && x <= exact) || x != (double)(int64_t)x) return false;
    *out = (int64_t)x;
    return true;
}

/* A geometry of JS numbers: its rules (and with `plan` kvCacheSize's rows),
 * then the desc of the int32 counts they accepted. */
static sdpa_status geometry_desc(sdpa_ctx * ctx, double batch, double max_seq_len, double kv_heads, double head_dim,
                                 int32_t key_dtype, int32_t value_dtype, double window, double sink_tokens,
                                 int32_t float16_newest_page, int32_t plan, double rows, sdpa_kv_cache_desc * desc,
                                 int32_t * rows_out, const void * out) {
    int64_t b, m, h, d, w, s, r = 0;
    if (!whole(batch, &b) || !whole(max_seq_len, &m) || !whole(kv_heads, &h) || !whole(head_dim, &d) ||
        !whole(window, &w) || !whole(sink_tokens, &s) || (plan && !whole(rows, &r)))
        return sdpa_fail(ctx, SDPA_E_ARG, "batch %g, maxSeqLen %g, numKvHeads %g, headDim %g, window %g, sinkTokens %g, rows %g are not integers",
                         batch, max_seq_len, kv_heads, head_dim, window, sink_tokens, rows);
    /* the geometry, then rows; a negative rows (E_DIMS) outranks a geometry's later codes (E_DTYPE, E_HEADS) */
    sdpa_status st = sdpa_check_cache_create(ctx, b, m, h, d, key_dtype, value_dtype, w, s, out);
    if (plan && (st == SDPA_OK || (r < 0 && st > SDPA_E_DIMS)))
        st = sdpa_check_cache_plan_rows(ctx, st == SDPA_OK ? (int32_t)m : 0, r);
    if (st != SDPA_OK) return st;
    /* every count now an int32 the rules accepted */
    const sdpa_kv_cache_desc accepted = { (int32_t)b, (int32_t)m, (int32_t)h, (int32_t)d, key_dtype, value_dtype,
                                          (int32_t)w, (int32_t)s, float16_newest_page };
    *desc = accepted;
    *rows_out = plan ? (int32_t)r : 0;
    return SDPA_OK;
}

sdpa_status sdpa_wasm_kv_cache_plan(sdpa_ctx * ctx, double batch, double max_seq_len, double kv_heads, double head_dim,
                                    int32_t key_dtype, int32_t value_dtype, double window, double sink_tokens,
                                    int32_t float16_newest_page, int32_t plan, double rows, sdpa_kv_cache_size * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_kv_cache_desc desc;
    int32_t r;
    sdpa_status st = geometry_desc(ctx, batch, max_seq_len, kv_heads, head_dim, key_dtype, value_dtype, window, sink_tokens,
                                   float16_newest_page, plan, rows, &desc, &r, out);
    return st != SDPA_OK ? st : sdpa_kv_cache_plan_desc_unnamed(ctx, &desc, r, out);
}

sdpa_status sdpa_wasm_kv_cache_fork(sdpa_ctx * ctx, const sdpa_kv_cache * cache, sdpa_kv_cache ** out_cache) {
    return sdpa_kv_cache_fork_unnamed(ctx, cache, out_cache);
}

sdpa_status sdpa_wasm_kv_cache_truncate(sdpa_ctx * ctx, sdpa_kv_cache * cache, double length, int32_t apply) {
    if (!ctx) return SDPA_E_ARG;
    int64_t n;
    if (!whole(length, &n)) return sdpa_fail(ctx, SDPA_E_ARG, "length %g is not an integer", length);
    sdpa_status st = sdpa_check_cache_truncate(ctx, cache, n);
    if (st != SDPA_OK || !apply) return st;
    return sdpa_kv_cache_truncate_unnamed(ctx, cache, (int32_t)n);
}

sdpa_status sdpa_wasm_kv_cache_read(sdpa_ctx * ctx, const sdpa_kv_cache * cache, double start, double n, int32_t raw,
                                    void ** out) {
    if (!ctx) return SDPA_E_ARG;
    if (!out) return sdpa_fail(ctx, SDPA_E_ARG, "out is missing");
    *out = NULL;
    int64_t s, rows;
    if (!whole(start, &s) || !whole(n, &rows)) return sdpa_fail(ctx, SDPA_E_ARG, "start %g, length %g are not integers", start, n);
    sdpa_status st = sdpa_check_cache_rows(ctx, cache, s, rows);
    if (st != SDPA_OK) return st;
    int32_t batch, max_seq_len, kv_heads, head_dim;
    sdpa_kv_cache_shape(cache, &batch, &max_seq_len, &kv_heads, &head_dim);
    const size_t heads_rows = (size_t)batch * (size_t)rows * (size_t)kv_heads;
    const size_t k_bytes = raw ? heads_rows * sdpa_kv_cache_record_bytes(cache, 0) : heads_rows * (size_t)head_dim * sizeof(float);
    const size_t v_bytes = raw ? heads_rows * sdpa_kv_cache_record_bytes(cache, 1) : k_bytes;
    unsigned char * block = malloc(k_bytes + v_bytes);
    if (!block) return sdpa_fail(ctx, SDPA_E_OOM, "cannot allocate %zu bytes for the rows read", k_bytes + v_bytes);
    if (raw) {
        st = sdpa_kv_cache_read_records_unnamed(ctx, cache, (int32_t)s, (int32_t)rows, 0, block, k_bytes);
        if (st == SDPA_OK) st = sdpa_kv_cache_read_records_unnamed(ctx, cache, (int32_t)s, (int32_t)rows, 1, block + k_bytes, v_bytes);
    } else {
        sdpa_tensor k = { block, heads_rows * (size_t)head_dim, SDPA_DTYPE_FLOAT32, 4, { batch, (int32_t)rows, kv_heads, head_dim } };
        sdpa_tensor v = k;
        v.data = block + k_bytes;
        st = sdpa_kv_cache_read_unnamed(ctx, cache, (int32_t)s, (int32_t)rows, &k, &v);
    }
    if (st != SDPA_OK) {
        free(block);
        return st;
    }
    *out = block;
    return SDPA_OK;
}

sdpa_status sdpa_wasm_kv_cache_keep_rows(sdpa_ctx * ctx, sdpa_kv_cache * cache, double start, const int32_t * rows,
                                         int32_t n) {
    if (!ctx) return SDPA_E_ARG;
    int64_t s;
    if (!whole(start, &s)) return sdpa_fail(ctx, SDPA_E_ARG, "start %g is not an integer", start);
    sdpa_status st = sdpa_check_cache_keep_rows(ctx, cache, s, rows, n);
    if (st != SDPA_OK) return st;
    return sdpa_kv_cache_keep_rows_unnamed(ctx, cache, (int32_t)s, rows, n);
}

sdpa_status sdpa_wasm_kv_save_begin(sdpa_ctx * ctx, const sdpa_kv_cache * cache, double start, double length,
                                    const void * meta, size_t meta_bytes, sdpa_kv_saver ** out_saver) {
    if (!ctx) return SDPA_E_ARG;
    int64_t s, n;
    if (!whole(start, &s) || !whole(length, &n)) return sdpa_fail(ctx, SDPA_E_ARG, "start %g, length %g are not integers", start, length);
    sdpa_status st = sdpa_check_cache_save_rows(ctx, cache, s, n);
    if (st != SDPA_OK) return st;
    return sdpa_kv_save_begin_unnamed(ctx, cache, (int32_t)s, (int32_t)n, meta, meta_bytes, out_saver);
}

sdpa_status sdpa_wasm_kv_load_begin(sdpa_ctx * ctx, int32_t max_seq_len, sdpa_kv_loader ** out_loader) {
    return sdpa_kv_load_begin_unnamed(ctx, max_seq_len, out_loader);
}

sdpa_status sdpa_wasm_kv_load_feed(sdpa_ctx * ctx, sdpa_kv_loader * loader, const void * data, size_t n, size_t * consumed) {
    if (!ctx) return SDPA_E_ARG;
    return sdpa_kv_load_feed_unnamed(loader, data, n, consumed);
}

sdpa_status sdpa_wasm_kv_load_finish(sdpa_ctx * ctx, sdpa_kv_loader * loader, sdpa_kv_cache ** out_cache) {
    if (!ctx) return SDPA_E_ARG;
    return sdpa_kv_load_finish_unnamed(loader, out_cache);
}

sdpa_status sdpa_wasm_kv_group_header_check(sdpa_ctx * ctx, const void * head, size_t have, int32_t ended, uint32_t * need,
                                            uint32_t * layers, uint32_t * meta_at, uint32_t * meta_bytes) {
    return sdpa_kv_group_header_check_unnamed(ctx, head, have, ended, need, layers, meta_at, meta_bytes);
}

sdpa_status sdpa_wasm_ctx_reserve_pages(sdpa_ctx * ctx, double bytes) { return sdpa_ctx_reserve_pages_unnamed(ctx, bytes); }

int32_t sdpa_ctx_owns_pages(const sdpa_ctx * ctx, const void * p, double bytes) {
    if (!ctx || !(bytes > 0)) return 0;  /* (NaN too) */
    const uint64_t span = bytes < 0x1p64 ? (uint64_t)bytes : UINT64_MAX;  /* a larger double does not convert */
    return sdpa_page_pool_overlaps(ctx->pages, p, span);
}

/* ---- the attention calls: the public entries' bodies ---------------------- */

sdpa_status sdpa_wasm_custom(sdpa_ctx * ctx, const sdpa_tensor * query, const sdpa_tensor * key, const sdpa_tensor * value,
                             const sdpa_tensor * mask, const sdpa_options * options, sdpa_tensor * out) {
    return sdpa_custom_unnamed(ctx, query, key, value, mask, options, out);
}

sdpa_status sdpa_wasm_kv_cache_update(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * key,
                                      const sdpa_tensor * value, double start_pos, const sdpa_rotary * rotary) {
    if (!ctx) return SDPA_E_ARG;
    int64_t s;
    if (!whole(start_pos, &s)) return sdpa_fail(ctx, SDPA_E_START_POS, "startPos is %g; expected a non-negative integer", start_pos);
    if (s < INT32_MIN || s > INT32_MAX) {
        /* (no cache holds such a row: the rules on the int64 fail, in their order) */
        sdpa_rope rope;
        const sdpa_status st = sdpa_check_cache_update_rotary(ctx, cache, key, value, s, rotary, &rope);
        if (st != SDPA_OK) return st;
        return sdpa_fail(ctx, SDPA_E_CAPACITY, "startPos %lld is past any cache's rows", (long long)s);
    }
    return sdpa_kv_cache_update_rotary_unnamed(ctx, cache, key, value, (int32_t)s, rotary);
}

sdpa_status sdpa_wasm_kv_cache_attend(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                      const sdpa_tensor * mask, const sdpa_options * options, sdpa_tensor * out) {
    return sdpa_kv_cache_attend_unnamed(ctx, cache, query, mask, options, out);
}

sdpa_status sdpa_wasm_kv_cache_step(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                    const sdpa_tensor * key, const sdpa_tensor * value, const sdpa_tensor * mask,
                                    const sdpa_options * options, sdpa_tensor * out) {
    return sdpa_kv_cache_step_unnamed(ctx, cache, query, key, value, mask, options, out);
}

sdpa_status sdpa_wasm_kv_cache_attend_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n) {
    return sdpa_kv_cache_attend_many_unnamed(ctx, items, n);
}

sdpa_status sdpa_wasm_kv_cache_step_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n) {
    return sdpa_kv_cache_step_many_unnamed(ctx, items, n);
}

/* ---- the dense calls (include/sdpa_dense.h): the public entries' bodies --- */

sdpa_status sdpa_wasm_linear(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, sdpa_tensor * out,
                             int32_t flags) {
    return sdpa_linear_unnamed(ctx, x, weight, out, flags);
}

sdpa_status sdpa_wasm_rms_norm(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, float eps,
                               sdpa_tensor * out) {
    return sdpa_rms_norm_unnamed(ctx, x, weight, eps, out);
}

sdpa_status sdpa_wasm_swiglu(sdpa_ctx * ctx, const sdpa_tensor * gate, const sdpa_tensor * up, sdpa_tensor * out) {
    return sdpa_swiglu_unnamed(ctx, gate, up, out);
}

sdpa_status sdpa_wasm_embed(sdpa_ctx * ctx, const sdpa_tensor * table, const int32_t * ids, int32_t n_ids,
                            sdpa_tensor * out) {
    return sdpa_embed_unnamed(ctx, table, ids, n_ids, out);
}

sdpa_status sdpa_wasm_quantize(sdpa_ctx * ctx, const sdpa_tensor * source, sdpa_tensor * out) {
    return sdpa_quantize_unnamed(ctx, source, out);
}

/* ---- a cache's and a group's create; a group's fork and truncate (src/cache/kv_group.c) ---- */

/* A dtype or flag JS passed as a number: itself, or -1 (no dtype, not 0 or 1). */
static int32_t int32_of(double x) {
    int64_t v;
    return whole(x, &v) && v >= INT32_MIN && v <= INT32_MAX ? (int32_t)v : -1;
}

/* js/runtime.js formatBytes's words for n (JS holds n as a double): B, KiB,
 * MiB, GiB or TiB, whole or with two decimals rounded half up (toFixed). */
static void format_bytes(char * out, size_t cap, uint64_t n) {
    static const char * const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    const double d = (double)n;
    if (d >= 18446744073709551616.0) { snprintf(out, cap, "16777216 TiB"); return; }  /* 2^64 / 2^40 */
    const uint64_t x = (uint64_t)d;
    int i = 0;
    while (i < 4 && (x >> (10 * i)) >= 1024) i++;
    const int s = 10 * i;
    const uint64_t whole_units = x >> s, rest = s ? x & ((1ull << s) - 1) : 0;
    if (rest == 0) {
        snprintf(out, cap, "%llu %s", (unsigned long long)whole_units, unit[i]);
        return;
    }
    const uint64_t hundredths = whole_units * 100 + ((rest * 100 + (1ull << (s - 1))) >> s);
    snprintf(out, cap, "%llu.%02llu %s", (unsigned long long)(hundredths / 100), (unsigned long long)(hundredths % 100), unit[i]);
}

/* The largest single allocation wasm32 malloc can make (< 2 GiB): a little
 * below SDPA_MAX_PAGE_BYTES (2^31 - 1), which leaves no room for malloc's
 * header. A page or page table above it is E_OOM before any layer is made. */
#define WASM_MAX_ALLOC 0x7fff0000ull

/* Layer geometry `g` (SDPA_WASM_GEOMETRY_FIELDS numbers): its rules, then
 * its page and page table against one wasm allocation; its desc. */
static sdpa_status layer_desc(sdpa_ctx * ctx, const double * g, sdpa_kv_cache_desc * desc) {
    sdpa_kv_cache_size size = { 0, 0, 0, 0, 0 };
    int32_t rows;
    sdpa_status st = geometry_desc(ctx, g[0], g[1], g[2], g[3], int32_of(g[4]), int32_of(g[5]), g[6], g[7], int32_of(g[8]),
                                   0, 0, desc, &rows, &size);
    if (st == SDPA_OK) st = sdpa_kv_cache_plan_desc_unnamed(ctx, desc, 0, &size);
    if (st != SDPA_OK) return st;
    if ((uint64_t)size.page_bytes <= WASM_MAX_ALLOC && (uint64_t)size.table_bytes <= WASM_MAX_ALLOC) return SDPA_OK;
    char page[32], table[32];
    format_bytes(page, sizeof page, (uint64_t)size.page_bytes);
    format_bytes(table, sizeof table, (uint64_t)size.table_bytes);
    return sdpa_fail(ctx, SDPA_E_OOM,
                     "a cache of [%d, %d, %d, %d] needs pages of %s (%d rows) and a page table of %s; each must be one wasm allocation (< 2 GiB)",
                     desc->batch, desc->max_seq_len, desc->kv_heads, desc->head_dim, page, SDPA_PAGE_ROWS, table);
}

sdpa_status sdpa_wasm_kv_cache_create(sdpa_ctx * ctx, const double * geometry, sdpa_kv_cache ** out_cache) {
    if (!ctx) return SDPA_E_ARG;
    if (!geometry) return sdpa_fail(ctx, SDPA_E_ARG, "geometry is missing");
    sdpa_kv_cache_desc desc;
    const sdpa_status st = layer_desc(ctx, geometry, &desc);
    return st != SDPA_OK ? st : sdpa_kv_cache_create_desc_unnamed(ctx, &desc, true, out_cache);
}

sdpa_status sdpa_wasm_kv_group_create(sdpa_ctx * ctx, const double * geos, int32_t n, sdpa_kv_cache ** out) {
    if (!ctx) return SDPA_E_ARG;
    if (!geos || n < 1 || !out) return sdpa_fail(ctx, SDPA_E_ARG, "geos, out and n >= 1 (%d) are required", (int)n);
    sdpa_kv_cache_desc * descs = malloc((size_t)n * sizeof *descs);
    if (!descs) return sdpa_fail(ctx, SDPA_E_OOM, "cannot allocate the descs of %d layers", (int)n);
    sdpa_layer_failure f = { SDPA_OK, 0, "" };
    for (int32_t i = 0; i < n; i++)
        sdpa_layer_failure_note(&f, ctx, layer_desc(ctx, geos + (size_t)i * SDPA_WASM_GEOMETRY_FIELDS, &descs[i]), i);
    const sdpa_status st = f.status != SDPA_OK ? sdpa_layer_failure_report(ctx, "layers[%d]", &f)
                                               : sdpa_kv_group_create_unnamed(ctx, descs, n, out);
    free(descs);
    return st;
}

sdpa_status sdpa_wasm_kv_group_fork(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, sdpa_kv_cache ** out) {
    return sdpa_kv_group_fork_unnamed(ctx, layers, n, out);
}

sdpa_status sdpa_wasm_kv_group_truncate(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, double length) {
    if (!ctx) return SDPA_E_ARG;
    int64_t len;
    if (!whole(length, &len)) return sdpa_fail(ctx, SDPA_E_ARG, "length %g is not an integer", length);
    return sdpa_kv_group_truncate_unnamed(ctx, layers, n, len);
}

void sdpa_ctx_fail_cache_alloc(sdpa_ctx * ctx, int32_t n) {
    if (ctx) ctx->alloc_fault = n > 0 ? n : 0;
}
