/* kv_cache.c: the paged KV cache (see internal.h for the layout).
 *
 * Storage is drawn from the context's page pool (cache/page_pool.c) as rows
 * are written: a cache holds ceil(length / SDPA_PAGE_ROWS) pages per batch
 * row and KV head, growth never copies a written row, and maxSeqLen is only a
 * limit. Pages are shared after fork() and copied on the first write into a
 * shared one. Every write first counts the pages it must take (fresh ones,
 * copies of shared ones) and makes sure the pool has them: after that
 * nothing can fail, so a rejected write (E_OOM included) changes nothing.
 * Rows never written read as zeros (the pool's zero page), as the old
 * zero-filled cache did. */
#include "internal.h"
#include "cache/page_pool.h"
#include "contract/check.h"
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

static size_t head_count(const sdpa_kv_cache * c) { return (size_t)c->batch * (size_t)c->kv_heads; }
static void ** head_pages(const sdpa_kv_cache * c, size_t head) { return c->table + head * (size_t)c->pages_per_head; }

sdpa_status sdpa_kv_cache_create(sdpa_ctx * ctx, int32_t batch, int32_t max_seq_len,
                                 int32_t kv_heads, int32_t head_dim, int32_t dtype,
                                 sdpa_kv_cache ** out_cache) {
    static const char fn[] = "createKVCache";
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_create(ctx, fn, batch, max_seq_len, kv_heads, head_dim, dtype, out_cache);
    if (s != SDPA_OK) return s;
    /* a page: K and V blocks of SDPA_PAGE_ROWS rows in the dtype's format
     * (cache/kv_format.h); the table: one pointer per page of maxSeqLen */
    sdpa_page_format format;
    const uint64_t page_bytes = sdpa_page_format_make(&format, dtype, head_dim);
    const uint64_t pages_per_head = ((uint64_t)max_seq_len + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS;
    const uint64_t table_bytes = sdpa_size_mul(sdpa_size_mul((uint64_t)batch * (uint64_t)kv_heads, pages_per_head), sizeof(void *));
    if (page_bytes == 0 || page_bytes > SDPA_MAX_PAGE_BYTES || table_bytes > SDPA_MAX_PAGE_BYTES)
        return sdpa_fail(ctx, SDPA_E_OOM,
                         "%s: a page of %d rows x head dim %d needs %llu bytes and the page table %llu bytes; each must fit in %llu bytes",
                         fn, SDPA_PAGE_ROWS, head_dim, (unsigned long long)page_bytes, (unsigned long long)table_bytes,
                         (unsigned long long)SDPA_MAX_PAGE_BYTES);
    sdpa_kv_cache * c = calloc(1, sizeof *c);
    void ** table = malloc((size_t)table_bytes);
    if (!c || !table || !sdpa_page_pool_add_size(ctx->pages, (size_t)page_bytes)) {
        free(c); free(table);
        return sdpa_fail(ctx, SDPA_E_OOM, "%s: cannot allocate the page table (%llu bytes) or the first page of %llu bytes",
                         fn, (unsigned long long)table_bytes, (unsigned long long)page_bytes);
    }
    c->ctx = ctx;
    c->batch = batch; c->max_seq_len = max_seq_len; c->kv_heads = kv_heads; c->head_dim = head_dim;
    c->length = 0;
    c->pages_per_head = (int32_t)pages_per_head;
    c->format = format;
    c->table = table;
    void * zero = sdpa_page_pool_zero(ctx->pages, c->format.page_bytes);
    for (size_t i = 0; i < head_count(c) * (size_t)c->pages_per_head; i++) table[i] = zero;
    /* Scratch for any attend over this head_dim, so no step allocates.
     * Failure is not fatal: the first attend would try again and report
     * E_OOM then. */
    (void)sdpa_scratch_reserve(ctx, fn, sdpa_flash_workspace_bound(ctx->n_threads, head_dim));
    sdpa_clear_error(ctx);
    *out_cache = c;
    return SDPA_OK;
}

void sdpa_kv_cache_free(sdpa_kv_cache * cache) {
    if (!cache) return;
    for (size_t i = 0; i < head_count(cache) * (size_t)cache->pages_per_head; i++)
        sdpa_page_release(cache->ctx->pages, cache->table[i]);
    free(cache->table);
    free(cache);
}

void sdpa_kv_cache_shape(const sdpa_kv_cache * cache, int32_t * batch, int32_t * max_seq_len,
                         int32_t * kv_heads, int32_t * head_dim) {
    if (batch) *batch = cache ? cache->batch : 0;
    if (max_seq_len) *max_seq_len = cache ? cache->max_seq_len : 0;
    if (kv_heads) *kv_heads = cache ? cache->kv_heads : 0;
    if (head_dim) *head_dim = cache ? cache->head_dim : 0;
}

int32_t sdpa_kv_cache_length(const sdpa_kv_cache * cache) { return cache ? cache->length : 0; }

int32_t sdpa_kv_cache_pages(const sdpa_kv_cache * cache) {
    if (!cache) return 0;
    int32_t held = 0;
    for (size_t i = 0; i < head_count(cache) * (size_t)cache->pages_per_head; i++)
        held += !sdpa_page_is_zero(cache->table[i]);
    return held;
}

const void * sdpa_kv_cache_page(const sdpa_kv_cache * cache, int32_t b, int32_t h, int32_t page, int32_t which) {
    if (!cache || b < 0 || b >= cache->batch || h < 0 || h >= cache->kv_heads || page < 0 ||
        page >= cache->pages_per_head || (which != 0 && which != 1))
        return NULL;
    const void * p = head_pages(cache, (size_t)b * cache->kv_heads + h)[page];
    if (sdpa_page_is_zero(p)) return NULL;
    return sdpa_kv_block(&cache->format, p, which);
}

int32_t sdpa_kv_cache_dtype(const sdpa_kv_cache * cache) { return cache ? cache->format.dtype : 0; }

/* Pages [first, last] of every head that a write into them must replace:
 * the zero page (unwritten) or a page shared with a fork. */
static uint64_t pages_to_replace(const sdpa_kv_cache * c, int32_t first, int32_t last) {
    uint64_t n = 0;
    for (size_t head = 0; head < head_count(c); head++) {
        void ** pages = head_pages(c, head);
        for (int32_t p = first; p <= last; p++) n += sdpa_page_is_zero(pages[p]) || sdpa_page_refs(pages[p]) > 1;
    }
    return n;
}

/* Makes pages [first, last] of every head private to this cache (a fresh
 * zeroed page for an unwritten one, a copy for a shared one): E_OOM, with
 * nothing changed, when the pool cannot supply them. */
static sdpa_status own_pages(sdpa_ctx * ctx, const char * fn, sdpa_kv_cache * c, int32_t first, int32_t last) {
    if (first > last) return SDPA_OK;
    sdpa_page_pool * pool = c->ctx->pages;
    const uint64_t need = pages_to_replace(c, first, last);
    if (need == 0) return SDPA_OK;
    if (!sdpa_page_pool_ensure(pool, c->format.page_bytes, need))
        return sdpa_fail(ctx, SDPA_E_OOM, "%s: the page pool cannot grow by %llu pages of %zu bytes; the cache is unchanged",
                         fn, (unsigned long long)need, c->format.page_bytes);
    for (size_t head = 0; head < head_count(c); head++) {
        void ** pages = head_pages(c, head);
        for (int32_t p = first; p <= last; p++) {
            void * old = pages[p];
            const bool zero = sdpa_page_is_zero(old);
            if (!zero && sdpa_page_refs(old) == 1) continue;
            void * fresh = sdpa_page_pool_take(pool, c->format.page_bytes);  /* cannot fail after ensure */
            if (zero) memset(fresh, 0, c->format.page_bytes);
            else memcpy(fresh, old, c->format.page_bytes);
            sdpa_page_release(pool, old);
            pages[p] = fresh;
        }
    }
    return SDPA_OK;
}

/* [B, S, Hkv, D] float32 rows <-> cache rows (encoded in the cache's
 * format), for rows [start, start + len). size_t cannot wrap: every dense
 * index is below the tensor's validated length B * len * Hkv * D (contract/:
 * <= SIZE_MAX / 4), every page index below pages_per_head (start + len <=
 * maxSeqLen). */
static void copy_rows(const sdpa_kv_cache * c, const float * in_k, const float * in_v,
                      float * out_k, float * out_v, int32_t start, int32_t len) {
    const size_t D = (size_t)c->head_dim, H = (size_t)c->kv_heads;
    const bool to_cache = in_k != NULL;
    for (size_t b = 0; b < (size_t)c->batch; b++)
        for (size_t h = 0; h < H; h++) {
            void ** pages = head_pages(c, b * H + h);
            for (size_t t = 0; t < (size_t)len; t++) {
                const size_t pos = (size_t)start + t, dense = ((b * (size_t)len + t) * H + h) * D;
                void * page = pages[pos / SDPA_PAGE_ROWS];
                const int32_t row = (int32_t)(pos % SDPA_PAGE_ROWS);
                if (to_cache) {
                    sdpa_kv_encode_row(&c->format, page, row, 0, in_k + dense);
                    sdpa_kv_encode_row(&c->format, page, row, 1, in_v + dense);
                } else {
                    sdpa_kv_decode_row(&c->format, page, row, 0, out_k + dense);
                    sdpa_kv_decode_row(&c->format, page, row, 1, out_v + dense);
                }
            }
        }
}

/* Writes validated k, v at start: takes the pages first (E_OOM: unchanged). */
static sdpa_status write_rows(sdpa_ctx * ctx, const char * fn, sdpa_kv_cache * c, const sdpa_tensor * key,
                              const sdpa_tensor * value, int32_t start) {
    const int32_t len = key->dims[1];
    sdpa_status s = own_pages(ctx, fn, c, start / SDPA_PAGE_ROWS, (start + len - 1) / SDPA_PAGE_ROWS);
    if (s != SDPA_OK) return s;
    copy_rows(c, key->data, value->data, NULL, NULL, start, len);
    if (start + len > c->length) c->length = start + len;
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_update(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * key,
                                 const sdpa_tensor * value, int32_t start_pos) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_update(ctx, "cache.update", cache, key, value, start_pos);
    if (s == SDPA_OK) s = write_rows(ctx, "cache.update", cache, key, value, start_pos);
    if (s != SDPA_OK) return s;
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_attend(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                 const sdpa_tensor * mask, const sdpa_options * options,
                                 sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_problem p;
    sdpa_status s = sdpa_check_cache_attend(ctx, "cache.attend", cache, query, mask, options, out, true, &p);
    if (s == SDPA_OK) s = sdpa_reserve_problem(ctx, "cache.attend", &p);
    if (s != SDPA_OK) return s;
    sdpa_run_problem(ctx, &p, false);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_step(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                               const sdpa_tensor * key, const sdpa_tensor * value,
                               const sdpa_tensor * mask, const sdpa_options * options,
                               sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_problem p;
    sdpa_status s = sdpa_check_cache_step(ctx, "cache.step", cache, query, key, value, mask, options, out, &p);
    if (s == SDPA_OK) s = sdpa_reserve_problem(ctx, "cache.step", &p);
    if (s == SDPA_OK) s = write_rows(ctx, "cache.step", cache, key, value, (int32_t)p.start_pos);
    if (s != SDPA_OK) return s;  /* nothing written */
    sdpa_run_problem(ctx, &p, false);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_read(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start,
                               int32_t length, sdpa_tensor * key_out, sdpa_tensor * value_out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_read(ctx, "cache.read", cache, start, length, key_out, value_out);
    if (s != SDPA_OK) return s;
    copy_rows(cache, NULL, NULL, key_out->data, value_out->data, start, length);
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_read_raw(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start, int32_t length,
                                   int32_t which, void * data, size_t data_bytes, float * scales,
                                   int8_t * zero_points) {
    static const char fn[] = "cache.readRaw";
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_read_raw(ctx, fn, cache, start, length, which, data, data_bytes, scales, zero_points);
    if (s != SDPA_OK) return s;
    const sdpa_page_format * fmt = &cache->format;
    const size_t H = (size_t)cache->kv_heads, row_bytes = (size_t)fmt->dim * fmt->elem_bytes;
    for (size_t b = 0; b < (size_t)cache->batch; b++)
        for (size_t h = 0; h < H; h++) {
            void ** pages = head_pages(cache, b * H + h);
            for (size_t t = 0; t < (size_t)length; t++) {
                const size_t pos = (size_t)start + t, at = (b * (size_t)length + t) * H + h;
                const void * page = pages[pos / SDPA_PAGE_ROWS];
                const int32_t row = (int32_t)(pos % SDPA_PAGE_ROWS);
                sdpa_kv_copy_raw_row(fmt, page, row, which, (char *)data + at * row_bytes);
                if (fmt->dtype == SDPA_DTYPE_INT8) {
                    scales[at] = sdpa_kv_row_scale(fmt, page, row, which);
                    zero_points[at] = sdpa_kv_row_zero_point(fmt, page, row, which);
                }
            }
        }
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_truncate(sdpa_ctx * ctx, sdpa_kv_cache * cache, int32_t length) {
    static const char fn[] = "cache.truncate";
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_truncate(ctx, fn, cache, length);
    if (s != SDPA_OK) return s;
    const int32_t keep = (length + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS;  /* pages with a kept row */
    const int32_t tail = length % SDPA_PAGE_ROWS;  /* kept rows of the last kept page (0: it is full) */
    /* the last kept page's rows past `length` become unwritten (zeros): make it private first */
    if (tail != 0) {
        s = own_pages(ctx, fn, cache, keep - 1, keep - 1);
        if (s != SDPA_OK) return s;
    }
    sdpa_page_pool * pool = cache->ctx->pages;
    void * zero = sdpa_page_pool_zero(pool, cache->format.page_bytes);
    const sdpa_page_format * fmt = &cache->format;
    for (size_t head = 0; head < head_count(cache); head++) {
        void ** pages = head_pages(cache, head);
        for (int32_t p = keep; p < cache->pages_per_head; p++) {
            if (pages[p] == zero) continue;
            sdpa_page_release(pool, pages[p]);
            pages[p] = zero;
        }
        /* rows tail .. ROWS-1 of K and V (and their int8 scales, zero points): all bytes 0 decode to 0.0 */
        if (tail != 0 && !sdpa_page_is_zero(pages[keep - 1])) sdpa_kv_clear_rows(fmt, pages[keep - 1], tail);
    }
    cache->length = length;
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_fork(sdpa_ctx * ctx, const sdpa_kv_cache * cache, sdpa_kv_cache ** out_cache) {
    static const char fn[] = "cache.fork";
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_fork(ctx, fn, cache, out_cache);
    if (s != SDPA_OK) return s;
    const size_t entries = head_count(cache) * (size_t)cache->pages_per_head;
    sdpa_kv_cache * c = malloc(sizeof *c);
    void ** table = malloc(entries * sizeof *table);
    if (!c || !table) {
        free(c); free(table);
        return sdpa_fail(ctx, SDPA_E_OOM, "%s: cannot allocate a page table of %zu bytes", fn, entries * sizeof *table);
    }
    *c = *cache;
    c->table = table;
    for (size_t i = 0; i < entries; i++) {
        table[i] = cache->table[i];
        sdpa_page_retain(table[i]);  /* shared: the first write into it copies it */
    }
    *out_cache = c;
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

void sdpa_ctx_memory(const sdpa_ctx * ctx, sdpa_memory_stats * out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!ctx) return;
    sdpa_page_stats st;
    sdpa_page_pool_stats(ctx->pages, &st);
    out->bytes_reserved = (int64_t)st.bytes_reserved;
    out->bytes_in_use = (int64_t)st.bytes_in_use;
    out->bytes_free = (int64_t)st.bytes_free;
    out->pages_in_use = st.pages_in_use;
    out->pages_free = st.pages_free;
    out->page_rows = SDPA_PAGE_ROWS;
}

sdpa_status sdpa_ctx_reserve_pages(sdpa_ctx * ctx, double bytes) {
    if (!ctx) return SDPA_E_ARG;
    if (!(bytes >= 0) || bytes > (double)SIZE_MAX)
        return sdpa_fail(ctx, bytes >= 0 ? SDPA_E_OOM : SDPA_E_ARG,
                         "sdpa.reserve: %g bytes; expected a non-negative number that fits this build's address space", bytes);
    if (!sdpa_page_pool_reserve(ctx->pages, (uint64_t)bytes))
        return sdpa_fail(ctx, SDPA_E_OOM, "sdpa.reserve: the heap cannot give the page pool %.0f more free bytes", bytes);
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

int32_t sdpa_ctx_owns_pages(const sdpa_ctx * ctx, const void * p, double bytes) {
    return ctx && bytes > 0 && sdpa_page_pool_overlaps(ctx->pages, p, (uint64_t)bytes);
}
