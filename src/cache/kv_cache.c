/* kv_cache.c: the paged KV cache (see internal.h for the layout).
 *
 * Storage is drawn from the context's page pool (cache/page_pool.c) as rows
 * are written: a cache holds ceil(length / SDPA_PAGE_ROWS) pages per batch
 * row and KV head, growth never copies a written row, and maxSeqLen is only a
 * limit. Pages are shared after fork() and copied on the first write into a
 * shared one. Every write first counts the pages it must take (fresh ones,
 * copies of shared ones) and makes sure the pool has them: after that
 * nothing can fail, so a rejected write (E_OOM included) changes nothing.
 * Rows never written read as zeros (the pool's zero page).
 *
 * A windowed cache keeps its sink pages and a ring of pages (internal.h,
 * sdpa_page_slot): the first write into a ring page past the written rows
 * clears the slot it takes over and moves window_start past the page that
 * slot held. Everything else (fork, copy-on-write, the pool) is the same. */
#include "internal.h"
#include "cache/page_pool.h"
#include "cache/kv_record.h"
#include "contract/check.h"
#include "kernels/kernels.h"
#include "cache/kv_dtype.h"

#include <stdlib.h>
#include <string.h>

static size_t head_count(const sdpa_kv_cache * c) { return (size_t)c->batch * (size_t)c->kv_heads; }
static void ** head_pages(const sdpa_kv_cache * c, size_t head) { return c->table + head * (size_t)c->pages_per_head; }
static int32_t page_slot(const sdpa_kv_cache * c, int32_t page) { return sdpa_page_slot(page, c->sink_pages, c->ring_pages); }
/* A float16 page (the newest page of a cache with float16_newest_page,
 * internal.h), and the format and bytes of any page of the cache. */
static bool is_f16_page(const void * page) { return (sdpa_page_marks(page) & SDPA_PAGE_MARK_FLOAT16) != 0; }
static const sdpa_page_format * page_format(const sdpa_kv_cache * c, const void * page) {
    return is_f16_page(page) ? &c->f16_format : &c->format;
}
/* The page holding row pos of a head's table. */
static void * row_page(const sdpa_kv_cache * c, void ** pages, size_t pos) {
    return pages[page_slot(c, (int32_t)(pos / SDPA_PAGE_ROWS))];
}

/* Where a cache's pages go: a page holds K and V blocks of SDPA_PAGE_ROWS
 * rows in the dtype's format (cache/kv_format.h); the table has one pointer
 * per page of maxSeqLen, or for a windowed cache per sink page and ring slot.
 * The ring holds the window's W rows wherever a page boundary falls, the page
 * being written, and one page more, so that at least W + 64 rows are kept
 * and a rollback (truncate) of up to 64 rows can go on decoding:
 * ceil((W - 1) / ROWS) + 2 slots. (sink_pages, ring_pages: 0 when
 * maxSeqLen fits without a ring.) Arguments already checked. */
/* Bytes of a page table: one pointer per slot of every (batch row, KV head). */
static uint64_t table_bytes_of(uint64_t heads, uint64_t pages_per_head) {
    return sdpa_size_mul(sdpa_size_mul(heads, pages_per_head), sizeof(void *));
}

typedef struct cache_layout {
    uint64_t page_bytes, pages_per_head, sink_pages, ring_pages, table_bytes;
    uint64_t f16_page_bytes;  /* a float16 page's (0: the cache has none), at least page_bytes */
} cache_layout;

/* `f16`: a float16 page's format, made when the desc asks for one and a
 * block is int8 / int4; its page_bytes at least the encoded page's, so that
 * every reader of a page's first page_bytes (touches, copies) stays inside
 * whichever kind it reads. */
static void layout_of(cache_layout * L, sdpa_page_format * format, sdpa_page_format * f16, const sdpa_kv_cache_desc * d) {
    L->page_bytes = sdpa_page_format_make(format, d->key_dtype, d->value_dtype, d->head_dim);
    L->f16_page_bytes = 0;
    memset(f16, 0, sizeof *f16);
    const int32_t kd = sdpa_dtype_in_float16_page(d->key_dtype), vd = sdpa_dtype_in_float16_page(d->value_dtype);
    if (d->float16_newest_page == 1 && (kd != d->key_dtype || vd != d->value_dtype)) {
        uint64_t bytes = sdpa_page_format_make(f16, kd, vd, d->head_dim);
        if (bytes < L->page_bytes) bytes = L->page_bytes;
        if (bytes <= SDPA_MAX_PAGE_BYTES) f16->page_bytes = (size_t)bytes;
        L->f16_page_bytes = bytes;
    }
    L->pages_per_head = ((uint64_t)d->max_seq_len + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS;
    const uint64_t sink_pages = ((uint64_t)d->sink_tokens + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS;
    const uint64_t ring = d->window ? ((uint64_t)d->window - 1 + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS + 2 : 0;
    const bool ring_wraps = d->window && sink_pages + ring < L->pages_per_head;  /* else maxSeqLen fits: no ring */
    if (ring_wraps) L->pages_per_head = sink_pages + ring;
    L->sink_pages = ring_wraps ? sink_pages : 0;
    L->ring_pages = ring_wraps ? ring : 0;
    L->table_bytes = table_bytes_of((uint64_t)d->batch * (uint64_t)d->kv_heads, L->pages_per_head);
}

/* A geometry's rules and, with `plan`, kvCacheSize's rows, first in the
 * table's order (a negative rows, E_DIMS, outranks a geometry's E_DTYPE or
 * E_HEADS; rows past maxSeqLen, E_CAPACITY, is asked of a sound geometry
 * only). What sdpa_kv_cache_create_desc and _plan_desc run (the wasm entry
 * sdpa_wasm_kv_cache_plan runs the same two checks on JS numbers). */
static sdpa_status check_geometry(sdpa_ctx * ctx, int64_t batch, int64_t max_seq_len, int64_t kv_heads,
                                  int64_t head_dim, int32_t key_dtype, int32_t value_dtype, int64_t window,
                                  int64_t sink_tokens, bool plan, int64_t rows, const void * out) {
    const sdpa_status st = sdpa_check_cache_create(ctx, batch, max_seq_len, kv_heads, head_dim, key_dtype, value_dtype,
                                                   window, sink_tokens, out);
    if (!plan || (st != SDPA_OK && (rows >= 0 || st <= SDPA_E_DIMS))) return st;
    return sdpa_check_cache_plan_rows(ctx, st == SDPA_OK ? (int32_t)max_seq_len : 0, rows);
}

static sdpa_status check_desc(sdpa_ctx * ctx, const sdpa_kv_cache_desc * d, bool plan, int32_t rows,
                              const void * out) {
    if (!d) return sdpa_fail(ctx, SDPA_E_ARG, "desc is missing");
    if (d->float16_newest_page != 0 && d->float16_newest_page != 1)
        return sdpa_fail(ctx, SDPA_E_ARG, "float16_newest_page is %d; expected 0 or 1", d->float16_newest_page);
    return check_geometry(ctx, d->batch, d->max_seq_len, d->kv_heads, d->head_dim, d->key_dtype, d->value_dtype,
                          d->window, d->sink_tokens, plan, rows, out);
}

sdpa_status sdpa_kv_cache_create(sdpa_ctx * ctx, int32_t batch, int32_t max_seq_len,
                                 int32_t kv_heads, int32_t head_dim, int32_t dtype,
                                 sdpa_kv_cache ** out_cache) {
    const sdpa_kv_cache_desc d = { batch, max_seq_len, kv_heads, head_dim, dtype, dtype, 0, 0, 0 };
    return sdpa_named(ctx, sdpa_kv_cache_create_desc_unnamed(ctx, &d, true, out_cache), __func__);
}

sdpa_status sdpa_kv_cache_create_windowed(sdpa_ctx * ctx, int32_t batch, int32_t max_seq_len,
                                          int32_t kv_heads, int32_t head_dim, int32_t dtype,
                                          int32_t window, int32_t sink_tokens,
                                          sdpa_kv_cache ** out_cache) {
    const sdpa_kv_cache_desc d = { batch, max_seq_len, kv_heads, head_dim, dtype, dtype, window, sink_tokens, 0 };
    return sdpa_named(ctx, sdpa_kv_cache_create_desc_unnamed(ctx, &d, true, out_cache), __func__);
}

sdpa_status sdpa_kv_cache_create_desc(sdpa_ctx * ctx, const sdpa_kv_cache_desc * desc, sdpa_kv_cache ** out_cache) {
    return sdpa_named(ctx, sdpa_kv_cache_create_desc_unnamed(ctx, desc, true, out_cache), __func__);
}

sdpa_status sdpa_kv_cache_create_desc_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache_desc * desc, bool make,
                                              sdpa_kv_cache ** out_cache) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = check_desc(ctx, desc, false, 0, out_cache);
    if (s != SDPA_OK) return s;
    const int32_t batch = desc->batch, max_seq_len = desc->max_seq_len, kv_heads = desc->kv_heads;
    const int32_t head_dim = desc->head_dim, window = desc->window, sink_tokens = desc->sink_tokens;
    sdpa_page_format format, f16_format;
    cache_layout L;
    layout_of(&L, &format, &f16_format, desc);
    const uint64_t page_bytes = L.page_bytes > L.f16_page_bytes ? L.page_bytes : L.f16_page_bytes;
    const uint64_t table_bytes = L.table_bytes, pages_per_head = L.pages_per_head;
    if (L.page_bytes == 0 || page_bytes > SDPA_MAX_PAGE_BYTES || table_bytes > SDPA_MAX_PAGE_BYTES)
        return sdpa_fail(ctx, SDPA_E_OOM,
                         "a page of %d rows x head dim %d needs %llu bytes and the page table %llu bytes; each must fit in %llu bytes",
                         SDPA_PAGE_ROWS, head_dim, (unsigned long long)page_bytes, (unsigned long long)table_bytes,
                         (unsigned long long)SDPA_MAX_PAGE_BYTES);
    if (!make) return SDPA_OK;
    sdpa_kv_cache * c = calloc(1, sizeof *c);
    void ** table = sdpa_alloc_fault(ctx) ? NULL : malloc((size_t)table_bytes);
    if (!c || !table || !sdpa_page_pool_add_size(ctx->pages, (size_t)L.page_bytes) ||
        (L.f16_page_bytes && !sdpa_page_pool_add_size(ctx->pages, (size_t)L.f16_page_bytes))) {
        free(c); free(table);
        return sdpa_fail(ctx, SDPA_E_OOM, "cannot allocate the page table (%llu bytes) or the first page of %llu bytes",
                         (unsigned long long)table_bytes, (unsigned long long)page_bytes);
    }
    c->ctx = ctx;
    c->batch = batch; c->max_seq_len = max_seq_len; c->kv_heads = kv_heads; c->head_dim = head_dim;
    c->length = 0;
    c->pages_per_head = (int32_t)pages_per_head;
    c->window = window;
    c->sink_tokens = sink_tokens;
    c->sink_pages = (int32_t)L.sink_pages;
    c->ring_pages = (int32_t)L.ring_pages;
    c->window_start = window ? sink_tokens : 0;
    c->format = format;
    c->float16_newest_page = L.f16_page_bytes != 0;
    c->f16_format = f16_format;
    c->table = table;
    void * zero = sdpa_page_pool_zero(ctx->pages, c->format.page_bytes);
    for (size_t i = 0; i < head_count(c) * (size_t)c->pages_per_head; i++) table[i] = zero;
    /* Scratch for any attend over this head_dim, so no step allocates.
     * Failure is not fatal: the first attend would try again and report
     * E_OOM then. */
    (void)sdpa_scratch_reserve(ctx, sdpa_flash_workspace_bound(ctx->n_threads, head_dim));
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

double sdpa_kv_cache_bytes(const sdpa_kv_cache * cache) {
    if (!cache) return 0;
    double pool = 0;
    for (size_t i = 0; i < head_count(cache) * (size_t)cache->pages_per_head; i++)
        if (!sdpa_page_is_zero(cache->table[i]))
            pool += (double)sdpa_page_pool_slot_bytes(page_format(cache, cache->table[i])->page_bytes);
    return pool + (double)table_bytes_of(head_count(cache), (uint64_t)cache->pages_per_head);
}

sdpa_status sdpa_kv_cache_plan(sdpa_ctx * ctx, int32_t batch, int32_t max_seq_len, int32_t kv_heads,
                               int32_t head_dim, int32_t dtype, int32_t window, int32_t sink_tokens,
                               int32_t rows, sdpa_kv_cache_size * out) {
    const sdpa_kv_cache_desc d = { batch, max_seq_len, kv_heads, head_dim, dtype, dtype, window, sink_tokens, 0 };
    return sdpa_named(ctx, sdpa_kv_cache_plan_desc_unnamed(ctx, &d, rows, out), __func__);
}

sdpa_status sdpa_kv_cache_plan_desc(sdpa_ctx * ctx, const sdpa_kv_cache_desc * desc, int32_t rows,
                                    sdpa_kv_cache_size * out) {
    return sdpa_named(ctx, sdpa_kv_cache_plan_desc_unnamed(ctx, desc, rows, out), __func__);
}

sdpa_status sdpa_kv_cache_plan_desc_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache_desc * desc, int32_t rows,
                                            sdpa_kv_cache_size * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = check_desc(ctx, desc, true, rows, out);
    if (s != SDPA_OK) return s;
    const int32_t batch = desc->batch, kv_heads = desc->kv_heads;
    sdpa_page_format format, f16_format;
    cache_layout L;
    layout_of(&L, &format, &f16_format, desc);
    /* rows 0 .. rows-1 fill the table's slots in order; a ring's slots are reused */
    uint64_t per_head = ((uint64_t)rows + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS;
    if (per_head > L.pages_per_head) per_head = L.pages_per_head;
    const uint64_t heads = (uint64_t)batch * (uint64_t)kv_heads;
    out->pages = (int64_t)(per_head * heads);
    out->page_bytes = (int64_t)sdpa_page_pool_slot_bytes(L.page_bytes);
    uint64_t held = sdpa_size_mul((uint64_t)out->pages, (uint64_t)out->page_bytes), passing = 0;
    if (L.f16_page_bytes && rows > 0) {
        /* a float16 newest page: held while rows % 64 != 0, else the last page
         * filled in it (taken before it was encoded, then let go) */
        const uint64_t f16 = sdpa_size_mul(heads, sdpa_page_pool_slot_bytes(L.f16_page_bytes));
        if (rows % SDPA_PAGE_ROWS != 0) held = held - sdpa_size_mul(heads, (uint64_t)out->page_bytes) + f16;
        else passing = f16;
    }
    out->pool_bytes = (int64_t)(held + passing);
    out->table_bytes = (int64_t)L.table_bytes;
    out->bytes = (int64_t)held + out->table_bytes;
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

const void * sdpa_kv_cache_page(const sdpa_kv_cache * cache, int32_t b, int32_t h, int32_t page, int32_t which) {
    if (!cache || b < 0 || b >= cache->batch || h < 0 || h >= cache->kv_heads || page < 0 ||
        page >= (cache->max_seq_len + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS || (which != 0 && which != 1))
        return NULL;
    /* a windowed cache: only pages that still hold a kept row (their slot is theirs) */
    if (cache->ring_pages && page >= cache->sink_pages &&
        ((int64_t)page * SDPA_PAGE_ROWS >= cache->length || (int64_t)(page + 1) * SDPA_PAGE_ROWS <= cache->window_start))
        return NULL;
    const void * p = head_pages(cache, (size_t)b * cache->kv_heads + h)[page_slot(cache, page)];
    if (sdpa_page_is_zero(p)) return NULL;
    return sdpa_kv_block(page_format(cache, p), p, which);
}

int32_t sdpa_kv_cache_float16_newest_page(const sdpa_kv_cache * cache) { return cache && cache->float16_newest_page; }

int32_t sdpa_kv_cache_key_dtype(const sdpa_kv_cache * cache) { return cache ? sdpa_kv_dtype(&cache->format, 0) : 0; }
int32_t sdpa_kv_cache_value_dtype(const sdpa_kv_cache * cache) { return cache ? sdpa_kv_dtype(&cache->format, 1) : 0; }
int32_t sdpa_kv_cache_dtype(const sdpa_kv_cache * cache) {
    const int32_t k = sdpa_kv_cache_key_dtype(cache);
    return k == sdpa_kv_cache_value_dtype(cache) ? k : 0;
}
/* Bytes of a row record of the K (which = 0) or V block (cache/kv_record.h). */
static size_t record_bytes(const sdpa_page_format * f, int32_t which) {
    return (size_t)sdpa_kv_record_bytes(sdpa_kv_dtype(f, which), f->dim);
}
size_t sdpa_kv_cache_record_bytes(const sdpa_kv_cache * cache, int32_t which) {
    return cache && (which == 0 || which == 1) ? record_bytes(&cache->format, which) : 0;
}
int32_t sdpa_kv_cache_window(const sdpa_kv_cache * cache) { return cache ? cache->window : 0; }
int32_t sdpa_kv_cache_sink_tokens(const sdpa_kv_cache * cache) { return cache ? cache->sink_tokens : 0; }
int32_t sdpa_kv_cache_window_start(const sdpa_kv_cache * cache) { return cache ? cache->window_start : 0; }

/* The last of the logical pages [first, last] a write touches that does not
 * repeat a slot (a write longer than a windowed cache's ring goes round it;
 * each slot counts once). */
static int32_t distinct_last(const sdpa_kv_cache * c, int32_t first, int32_t last) {
    if (!c->ring_pages) return last;
    const int64_t ring_first = first > c->sink_pages ? first : c->sink_pages;
    const int64_t cap = ring_first + c->ring_pages - 1;
    return last > cap ? (int32_t)cap : last;
}

/* ---- the write path ----------------------------------------------------
 * A write runs a page of rows at a time (a segment: rows [at, end) of one
 * page). What each head's slot becomes depends on what it holds and on the
 * cache's float16_newest_page:
 *   SEG_ENCODED   an encoded page (a page of `format`, private: a shared one
 *                 copied) whose rows are encoded as written: every page of a
 *                 cache without float16 pages, and a page a truncate went
 *                 back into (its rows stay encoded, so do the new ones);
 *   SEG_FLOAT16   a float16 page (private; a fresh one zeroed): the segment
 *                 does not fill the page;
 *   SEG_FILL_NEW  the segment fills a page that held nothing (unwritten, or a
 *                 ring page taken over): a fresh encoded page, the rows
 *                 encoded from their float16 values, as if they had passed
 *                 through a float16 page;
 *   SEG_FILL_F16  the segment fills the float16 page: a fresh encoded page
 *                 takes the page's earlier rows (their float16 values) and the
 *                 segment's, encoded in one batch; the float16 page goes.
 * So a row's stored value changes once, when its page is encoded, and the
 * bits do not depend on how the rows were cut into writes. A load (k NULL)
 * takes the kinds its save recorded: float16 pages from row f16_from on. */
typedef enum seg_kind { SEG_ENCODED, SEG_FLOAT16, SEG_FILL_NEW, SEG_FILL_F16 } seg_kind;

/* f16_from: -1 for a write; a load's first row of a float16 page (INT32_MAX: none). */
static seg_kind seg_kind_of(const sdpa_kv_cache * c, const void * old, int32_t page, bool fills, bool clear,
                            int64_t f16_from) {
    if (!c->float16_newest_page) return SEG_ENCODED;
    if (f16_from >= 0) return (int64_t)page * SDPA_PAGE_ROWS >= f16_from ? SEG_FLOAT16 : SEG_FILL_NEW;
    if (clear || sdpa_page_is_zero(old)) return fills ? SEG_FILL_NEW : SEG_FLOAT16;
    if (is_f16_page(old)) return fills ? SEG_FILL_F16 : SEG_FLOAT16;
    return SEG_ENCODED;
}

/* Pages a segment of this kind takes from the pool over `old`: *enc encoded
 * ones, *f16 float16 ones (a float16 page let go by an earlier segment of
 * the same write is not counted as free: at most one page more than needed). */
static void seg_need(const sdpa_kv_cache * c, const void * old, seg_kind kind, bool clear, uint64_t * enc, uint64_t * f16) {
    const bool fresh = sdpa_page_is_zero(old), shared = !fresh && sdpa_page_refs(old) > 1;
    switch (kind) {
        case SEG_ENCODED: *enc += fresh || shared; break;  /* (clear: a private page is cleared in place) */
        case SEG_FLOAT16: *f16 += fresh || shared || clear || !is_f16_page(old); break;
        case SEG_FILL_NEW: *enc += fresh || shared || is_f16_page(old); break;
        case SEG_FILL_F16: *enc += 1; break;
    }
    (void)c;
}

/* The pages a write of rows [start, start + len) takes, of each kind. A
 * write longer than a windowed cache's ring (it goes round) counts every
 * slot once as an encoded page and one float16 page per head. */
static void write_need(const sdpa_kv_cache * c, int32_t start, int32_t len, int64_t f16_from, uint64_t * enc, uint64_t * f16) {
    *enc = *f16 = 0;
    const int32_t first = start / SDPA_PAGE_ROWS, last_page = (start + len - 1) / SDPA_PAGE_ROWS;
    const int32_t last = distinct_last(c, first, last_page);
    if (last != last_page) {
        *enc = (uint64_t)head_count(c) * (uint64_t)(last - first + 1);
        *f16 = c->float16_newest_page ? (uint64_t)head_count(c) : 0;
        return;
    }
    for (int32_t p = first; p <= last; p++) {
        const int64_t page_end = (int64_t)(p + 1) * SDPA_PAGE_ROWS;
        const bool fills = (int64_t)start + len >= page_end;
        const bool clear = c->ring_pages && p >= c->sink_pages && (int64_t)p * SDPA_PAGE_ROWS >= c->length;
        for (size_t head = 0; head < head_count(c); head++) {
            const void * old = head_pages(c, head)[page_slot(c, p)];
            seg_need(c, old, seg_kind_of(c, old, p, fills, clear, f16_from), clear, enc, f16);
        }
    }
}

/* Makes sure the pool can supply every page a write takes (write_need).
 * E_OOM, with nothing changed, when it cannot. */
static sdpa_status ensure_pages(sdpa_ctx * ctx, const sdpa_kv_cache * c, uint64_t enc, uint64_t f16,
                                const char * what) {
    const size_t bytes[2] = { c->format.page_bytes, c->f16_format.page_bytes };
    const uint64_t count[2] = { enc, f16 };
    if (sdpa_page_pool_ensure_sizes(c->ctx->pages, bytes, count, f16 ? 2 : 1)) return SDPA_OK;
    if (!f16)
        return sdpa_fail(ctx, SDPA_E_OOM, "the page pool cannot grow by %llu pages of %zu bytes; %s",
                         (unsigned long long)enc, c->format.page_bytes, what);
    return sdpa_fail(ctx, SDPA_E_OOM, "the page pool cannot grow by %llu pages of %zu bytes and %llu float16 pages of %zu bytes; %s",
                     (unsigned long long)enc, c->format.page_bytes, (unsigned long long)f16, c->f16_format.page_bytes, what);
}

/* A step written in pieces (step_piece) cut before each page's fill: the rows
 * before it take a float16 page that the fill lets go again (the next page's
 * piece takes it back): one float16 page per head more than the write's. */
static uint64_t pieces_need(const sdpa_kv_cache * c, bool pieces) {
    return pieces && c->float16_newest_page ? (uint64_t)head_count(c) : 0;
}

static sdpa_status reserve_write_as(sdpa_ctx * ctx, const sdpa_kv_cache * c, int32_t start, int32_t len,
                                    int64_t f16_from, bool pieces) {
    uint64_t enc, f16;
    write_need(c, start, len, f16_from, &enc, &f16);
    return ensure_pages(ctx, c, enc, f16 + pieces_need(c, pieces), "the cache is unchanged");
}
static sdpa_status reserve_write(sdpa_ctx * ctx, const sdpa_kv_cache * c, int32_t start, int32_t len) {
    return reserve_write_as(ctx, c, start, len, -1, false);
}

/* A page of `format` (f16: the float16 one) taken from the pool, all bytes 0. */
static void * fresh_page(sdpa_kv_cache * c, bool f16) {
    const size_t bytes = f16 ? c->f16_format.page_bytes : c->format.page_bytes;
    void * fresh = sdpa_page_pool_take(c->ctx->pages, bytes);  /* marks 0 */
    memset(fresh, 0, bytes);
    if (f16) sdpa_page_set_marks(fresh, SDPA_PAGE_MARK_FLOAT16);
    return fresh;
}

/* Makes the page in *slot private to this cache, of the kind it is (a copy
 * of a shared one, marks along; a fresh encoded page for the zero page);
 * `clear`: the slot takes over a new ring page, so what it held is dropped.
 * Cannot fail after reserve_write covered it. */
static void own_page(sdpa_kv_cache * c, void ** slot, bool clear) {
    void * old = *slot;
    const bool zero = sdpa_page_is_zero(old);
    if (!zero && sdpa_page_refs(old) == 1) {
        if (clear) {
            memset(old, 0, page_format(c, old)->page_bytes);
            sdpa_page_set_marks(old, sdpa_page_marks(old) & SDPA_PAGE_MARK_FLOAT16);
        }
        return;
    }
    void * fresh = fresh_page(c, !zero && is_f16_page(old));
    if (!zero && !clear) {
        memcpy(fresh, old, page_format(c, old)->page_bytes);
        sdpa_page_set_marks(fresh, sdpa_page_marks(old));
    }
    sdpa_page_release(c->ctx->pages, old);
    *slot = fresh;
}

/* Makes slot `slot` of every head private (own_page), for truncate and keepRows. */
static void own_slot(sdpa_kv_cache * c, int32_t slot, bool clear) {
    for (size_t head = 0; head < head_count(c); head++) own_page(c, &head_pages(c, head)[slot], clear);
}

/* Encodes x [D] as row `row` of `page` (its kind's format), K or V; with
 * `via_f16` each int8 / int4 block is given x's float16 values (the ones a
 * float16 page would have held: through buf, D floats). Returns the page's
 * new mark bits. */
static uint32_t encode_one(const sdpa_kv_cache * c, void * page, int32_t row, int value, const float * x, bool via_f16,
                           float * buf) {
    const sdpa_page_format * f = page_format(c, page);
    if (via_f16 && sdpa_dtype_in_float16_page(sdpa_kv_dtype(f, value)) != sdpa_kv_dtype(f, value)) {
        for (int32_t d = 0; d < f->dim; d++) buf[d] = sdpa_f16_to_f32(sdpa_f32_to_f16(x[d]));
        x = buf;
    }
    return sdpa_kv_encode_row(f, page, row, value, x) ? (value ? SDPA_PAGE_MARK_V_NONFINITE : SDPA_PAGE_MARK_K_NONFINITE) : 0;
}

/* A write that rotates its K rows (rotary) rotates each into the
 * context's scratch, D floats, then encodes it; a cache with float16 pages
 * also takes D floats after them (a row's float16 values on its way into an
 * encoded page): reserved before any row is written (E_OOM leaves the cache
 * as it was); the kernels use the scratch only after the rows are written.
 * rope NULL or half 0: no rotation. */
static sdpa_status reserve_rotation(sdpa_ctx * ctx, const sdpa_kv_cache * c, const sdpa_rope * rope) {
    const bool rotates = rope && rope->half;
    if (!rotates && !c->float16_newest_page) return SDPA_OK;
    return sdpa_scratch_reserve(ctx, 2 * (uint64_t)c->head_dim * sizeof(float));
}

/* Rows [from, from + n) of the [B, src_len, Hkv, D] float32 k, v, encoded
 * into rows pos .. pos + n - 1 of one head's page (made ready by put_rows),
 * each K row rotated first when rope says so: source row j at rope->pos[j],
 * or at its cache row. size_t cannot wrap: every dense index is below the
 * tensor's validated length (contract/: <= SIZE_MAX / 4). */
static void encode_rows(const sdpa_kv_cache * c, void * page, size_t b, size_t h, const float * k, const float * v,
                        int32_t src_len, int32_t from, int32_t pos, int32_t n, const sdpa_rope * rope, bool via_f16) {
    const size_t D = (size_t)c->head_dim, H = (size_t)c->kv_heads;
    float * rotated = c->ctx->scratch, * buf = rotated ? rotated + D : NULL;
    uint32_t marks = 0;
    for (int32_t t = 0; t < n; t++) {
        const size_t dense = ((b * (size_t)src_len + (size_t)(from + t)) * H + h) * D;
        const int32_t row = (pos + t) % SDPA_PAGE_ROWS;
        const float * key = k + dense;
        if (rope && rope->half) {
            sdpa_rope_row(rope, rope->pos ? rope->pos[from + t] : pos + t, key, rotated, (int32_t)D);
            key = rotated;
        }
        marks |= encode_one(c, page, row, 0, key, via_f16, buf) | encode_one(c, page, row, 1, v + dense, via_f16, buf);
    }
    if (marks) sdpa_page_set_marks(page, sdpa_page_marks(page) | marks);
}

/* SEG_FILL_F16: rows 0 .. n-1 of the float16 page `from`, their float16
 * values encoded into the encoded page `to`. */
static void encode_f16_rows(const sdpa_kv_cache * c, const void * from, void * to, int32_t n) {
    float * buf = (float *)c->ctx->scratch + c->head_dim;
    uint32_t marks = 0;
    for (int32_t row = 0; row < n; row++)
        for (int value = 0; value < 2; value++) {
            sdpa_kv_decode_row(&c->f16_format, from, row, value, buf);
            if (sdpa_kv_encode_row(&c->format, to, row, value, buf))
                marks |= value ? SDPA_PAGE_MARK_V_NONFINITE : SDPA_PAGE_MARK_K_NONFINITE;
        }
    if (marks) sdpa_page_set_marks(to, sdpa_page_marks(to) | marks);
}

/* Writes rows [from, from + n) of k, v [B, src_len, Hkv, D] at cache row
 * pos, a segment (a page of rows) at a time, each head's slot made what
 * seg_kind_of says. The first write into a ring page past the written rows
 * clears the slot it takes over, and the page that slot held is evicted
 * (window_start moves past it). k = v = NULL: the pages are taken and the
 * rows counted, nothing encoded (a load: sdpa_kv_cache_take_rows, float16
 * pages from row f16_from on). Cannot fail after reserve_write. */
static void put_rows(sdpa_kv_cache * c, const float * k, const float * v, int32_t src_len, int32_t from,
                     int32_t pos, int32_t n, const sdpa_rope * rope, int64_t f16_from) {
    const size_t H = (size_t)c->kv_heads;
    for (int32_t done = 0; done < n;) {
        const int32_t at = pos + done, page = at / SDPA_PAGE_ROWS;
        const int64_t page_end = (int64_t)(page + 1) * SDPA_PAGE_ROWS;
        const int32_t end = (int64_t)pos + n < page_end ? pos + n : (int32_t)page_end;
        const bool new_ring_page = c->ring_pages && page >= c->sink_pages && (int64_t)page * SDPA_PAGE_ROWS >= c->length;
        const bool fills = end == page_end;
        const int32_t slot = page_slot(c, page);
        for (size_t head = 0; head < head_count(c); head++) {
            void ** at_slot = &head_pages(c, head)[slot];
            void * old = *at_slot;
            const seg_kind kind = seg_kind_of(c, old, page, fills, new_ring_page, k ? -1 : f16_from);
            switch (kind) {
                case SEG_ENCODED: own_page(c, at_slot, new_ring_page); break;
                case SEG_FLOAT16:
                    if (!new_ring_page && is_f16_page(old)) own_page(c, at_slot, false);
                    else if (!sdpa_page_is_zero(old) && sdpa_page_refs(old) == 1 && is_f16_page(old)) own_page(c, at_slot, true);
                    else { *at_slot = fresh_page(c, true); sdpa_page_release(c->ctx->pages, old); }
                    break;
                case SEG_FILL_NEW:
                    if (!sdpa_page_is_zero(old) && sdpa_page_refs(old) == 1 && !is_f16_page(old)) own_page(c, at_slot, true);
                    else { *at_slot = fresh_page(c, false); sdpa_page_release(c->ctx->pages, old); }
                    break;
                case SEG_FILL_F16:
                    *at_slot = fresh_page(c, false);
                    encode_f16_rows(c, old, *at_slot, at % SDPA_PAGE_ROWS);
                    sdpa_page_release(c->ctx->pages, old);
                    break;
            }
            if (k)
                encode_rows(c, *at_slot, head / H, head % H, k, v, src_len, from + done, at, end - at, rope,
                            kind == SEG_FILL_NEW || kind == SEG_FILL_F16);
        }
        if (new_ring_page) {
            const int64_t kept = ((int64_t)page - c->ring_pages + 1) * SDPA_PAGE_ROWS;
            if (kept > c->window_start) c->window_start = (int32_t)kept;
        }
        if (end > c->length) c->length = end;
        done = end - pos;
    }
}

/* Writes validated k, v at start (K rotated by rope): takes the pages and
 * the scratch first (E_OOM: unchanged). */
static sdpa_status write_rows(sdpa_ctx * ctx, sdpa_kv_cache * c, const sdpa_tensor * key,
                              const sdpa_tensor * value, int32_t start, const sdpa_rope * rope) {
    const int32_t len = key->dims[1];
    sdpa_status s = reserve_write(ctx, c, start, len);
    if (s == SDPA_OK) s = reserve_rotation(ctx, c, rope);
    if (s != SDPA_OK) return s;
    put_rows(c, key->data, value->data, len, 0, start, len, rope, -1);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_update_rotary(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * key,
                                        const sdpa_tensor * value, int32_t start_pos, const sdpa_rotary * rotary) {
    return sdpa_named(ctx, sdpa_kv_cache_update_rotary_unnamed(ctx, cache, key, value, start_pos, rotary), __func__);
}

sdpa_status sdpa_kv_cache_update_rotary_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * key,
                                                const sdpa_tensor * value, int32_t start_pos, const sdpa_rotary * rotary) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_rope rope;
    sdpa_status s = sdpa_check_cache_update_rotary(ctx, cache, key, value, start_pos, rotary, &rope);
    if (s == SDPA_OK) s = write_rows(ctx, cache, key, value, start_pos, &rope);
    if (s != SDPA_OK) return s;
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_update(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * key,
                                 const sdpa_tensor * value, int32_t start_pos) {
    return sdpa_named(ctx, sdpa_kv_cache_update_rotary_unnamed(ctx, cache, key, value, start_pos, NULL), __func__);
}

sdpa_status sdpa_kv_cache_attend(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                 const sdpa_tensor * mask, const sdpa_options * options,
                                 sdpa_tensor * out) {
    return sdpa_named(ctx, sdpa_kv_cache_attend_unnamed(ctx, cache, query, mask, options, out), __func__);
}

sdpa_status sdpa_kv_cache_attend_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                         const sdpa_tensor * mask, const sdpa_options * options, sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_problem p;
    sdpa_status s = sdpa_check_cache_attend(ctx, cache, query, mask, options, out, true, &p);
    if (s == SDPA_OK) s = sdpa_reserve_problem(ctx, &p);
    if (s != SDPA_OK) return s;
    sdpa_run_problem(ctx, &p, false);
    return SDPA_OK;
}

/* The piece of a windowed step's problem p (rows start_pos .. + q_len) that
 * starts at row `at` and ends at the end of its page or of p: *next. */
/* Whether a step runs in pieces (step_piece): on a windowed cache when it
 * spans pages; on a cache with float16 pages when it is causal without a mask
 * (its rows attend keys written before them only) and a page fills at a row
 * after its first. */
static bool step_in_pieces(const sdpa_kv_cache * c, const sdpa_problem * p) {
    const int64_t sp = p->start_pos, last = sp + p->q_len - 1;
    if (c->ring_pages && sp / SDPA_PAGE_ROWS != last / SDPA_PAGE_ROWS) return true;
    if (!c->float16_newest_page || !p->is_causal || p->mask) return false;
    const int64_t first_fill = sp - sp % SDPA_PAGE_ROWS + SDPA_PAGE_ROWS - 1;  /* the fill of sp's page */
    return first_fill <= last && (first_fill > sp || first_fill + SDPA_PAGE_ROWS <= last);
}

static sdpa_problem step_piece(const sdpa_kv_cache * c, const sdpa_problem * p, int32_t at, int32_t * next) {
    int64_t page_end = ((int64_t)at / SDPA_PAGE_ROWS + 1) * SDPA_PAGE_ROWS;
    const int64_t end = p->start_pos + p->q_len;
    /* a cache with float16 pages also cuts before a page's last row: the rows
     * before it attend while their page is float16, the row that fills it after
     * the fill (each row as a step of it alone would see the stored values) */
    if (c->float16_newest_page) page_end = at % SDPA_PAGE_ROWS == SDPA_PAGE_ROWS - 1 ? at + 1 : page_end - 1;
    *next = (int32_t)(end < page_end ? end : page_end);
    const size_t skip = (size_t)(at - p->start_pos) * (size_t)p->q_heads * (size_t)p->head_dim;
    sdpa_problem piece = *p;
    piece.q = p->q + skip;
    piece.out = p->out + skip;  /* q_stride_b stays p's: the batch rows of the whole q */
    piece.q_len = *next - at;
    piece.start_pos = at;
    piece.n_keys = *next;
    if (p->tree) piece.tree = p->tree + (size_t)(at - p->start_pos) * (size_t)p->tree_stride;  /* tree_pos stays */
    if (p->rope.pos) piece.rope.pos = p->rope.pos + (at - p->start_pos);  /* (default positions: the piece's start_pos + i) */
    return piece;
}

sdpa_status sdpa_kv_cache_step(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                               const sdpa_tensor * key, const sdpa_tensor * value,
                               const sdpa_tensor * mask, const sdpa_options * options,
                               sdpa_tensor * out) {
    return sdpa_named(ctx, sdpa_kv_cache_step_unnamed(ctx, cache, query, key, value, mask, options, out), __func__);
}

sdpa_status sdpa_kv_cache_step_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                       const sdpa_tensor * key, const sdpa_tensor * value, const sdpa_tensor * mask,
                                       const sdpa_options * options, sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_problem p;
    sdpa_status s = sdpa_check_cache_step(ctx, cache, query, key, value, mask, options, out, &p);
    if (s != SDPA_OK) return s;
    const int32_t sp = (int32_t)p.start_pos, n = key->dims[1];
    if (!step_in_pieces(cache, &p)) {
        s = sdpa_reserve_problem(ctx, &p);
        if (s == SDPA_OK) s = write_rows(ctx, cache, key, value, sp, &p.rope);  /* (K rows where the q rows are) */
        if (s != SDPA_OK) return s;  /* nothing written */
        sdpa_run_problem(ctx, &p, false);
        return SDPA_OK;
    }
    /* A windowed cache: write and attend a page of rows at a time, so the
     * ring only ever needs the window and the page being written; a cache with
     * float16 pages: also cut before each page's fill (step_piece). Scratch
     * and pages for every piece first: after that nothing can fail. */
    int32_t next;
    for (int32_t at = sp; at < sp + n; at = next) {
        const sdpa_problem piece = step_piece(cache, &p, at, &next);
        s = sdpa_reserve_problem(ctx, &piece);
        if (s != SDPA_OK) return s;
    }
    s = reserve_write_as(ctx, cache, sp, n, -1, true);
    if (s == SDPA_OK) s = reserve_rotation(ctx, cache, &p.rope);
    if (s != SDPA_OK) return s;
    for (int32_t at = sp; at < sp + n; at = next) {
        const sdpa_problem piece = step_piece(cache, &p, at, &next);
        put_rows(cache, key->data, value->data, n, at - sp, at, next - at, &p.rope, -1);  /* (p's: positions of the whole key) */
        sdpa_run_problem(ctx, &piece, false);
    }
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_read(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start,
                               int32_t length, sdpa_tensor * key_out, sdpa_tensor * value_out) {
    return sdpa_named(ctx, sdpa_kv_cache_read_unnamed(ctx, cache, start, length, key_out, value_out), __func__);
}

sdpa_status sdpa_kv_cache_read_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start, int32_t length,
                                       sdpa_tensor * key_out, sdpa_tensor * value_out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_read(ctx, cache, start, length, key_out, value_out);
    if (s != SDPA_OK) return s;
    const size_t D = (size_t)cache->head_dim, H = (size_t)cache->kv_heads;
    for (size_t b = 0; b < (size_t)cache->batch; b++)
        for (size_t h = 0; h < H; h++) {
            void ** pages = head_pages(cache, b * H + h);
            for (size_t t = 0; t < (size_t)length; t++) {
                const size_t pos = (size_t)start + t, dense = ((b * (size_t)length + t) * H + h) * D;
                const void * page = row_page(cache, pages, pos);
                const int32_t row = (int32_t)(pos % SDPA_PAGE_ROWS);
                sdpa_kv_decode_row(page_format(cache, page), page, row, 0, (float *)key_out->data + dense);
                sdpa_kv_decode_row(page_format(cache, page), page, row, 1, (float *)value_out->data + dense);
            }
        }
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_read_records(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start,
                                       int32_t length, int32_t which, void * out, size_t out_bytes) {
    return sdpa_named(ctx, sdpa_kv_cache_read_records_unnamed(ctx, cache, start, length, which, out, out_bytes), __func__);
}

sdpa_status sdpa_kv_cache_read_records_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start,
                                               int32_t length, int32_t which, void * out, size_t out_bytes) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_read_records(ctx, cache, start, length, which, out, out_bytes);
    if (s != SDPA_OK) return s;
    const sdpa_page_format * fmt = &cache->format;
    const size_t H = (size_t)cache->kv_heads, record = record_bytes(fmt, which);
    /* a float16 page's int8 / int4 rows are given as the records their
     * encoding will store (a row's encoding is its own): each encoded into a
     * zeroed page of the cache's format in the scratch, D floats after it */
    const bool as_encoded = cache->float16_newest_page &&
                            sdpa_kv_dtype(&cache->f16_format, which) != sdpa_kv_dtype(fmt, which);
    if (as_encoded) {
        s = sdpa_scratch_reserve(ctx, (uint64_t)fmt->page_bytes + (uint64_t)cache->head_dim * sizeof(float));
        if (s != SDPA_OK) return s;
        memset(ctx->scratch, 0, fmt->page_bytes);
    }
    /* a head's rows, a page's run at a time, records H apart in [B, length, Hkv] */
    for (size_t b = 0; b < (size_t)cache->batch; b++)
        for (size_t h = 0; h < H; h++) {
            void ** pages = head_pages(cache, b * H + h);
            for (size_t t = 0; t < (size_t)length;) {
                const size_t pos = (size_t)start + t, row = pos % SDPA_PAGE_ROWS;
                const size_t n = SDPA_PAGE_ROWS - row < (size_t)length - t ? SDPA_PAGE_ROWS - row : (size_t)length - t;
                const void * page = row_page(cache, pages, pos);
                uint8_t * dst = (uint8_t *)out + ((b * (size_t)length + t) * H + h) * record;
                if (as_encoded && is_f16_page(page)) {
                    void * tmp = ctx->scratch;
                    float * x = (float *)(void *)((char *)ctx->scratch + fmt->page_bytes);
                    for (size_t r = row; r < row + n; r++) {
                        sdpa_kv_decode_row(&cache->f16_format, page, (int32_t)r, which, x);
                        (void)sdpa_kv_encode_row(fmt, tmp, (int32_t)r, which, x);
                    }
                    sdpa_kv_record_export(fmt, tmp, (int32_t)row, (int32_t)n, which, dst, H * record);
                } else {
                    sdpa_kv_record_export(page_format(cache, page), page, (int32_t)row, (int32_t)n, which, dst, H * record);
                }
                t += n;
            }
        }
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

/* The pages truncate(length) takes: a private copy of the last kept page of
 * each head when it is shared (write_need of its last kept row). */
void sdpa_kv_cache_truncate_pages(const sdpa_kv_cache * c, int32_t length, uint64_t * enc, uint64_t * f16) {
    *enc = *f16 = 0;
    if (length % SDPA_PAGE_ROWS != 0) write_need(c, length - 1, 1, -1, enc, f16);
}

/* truncate (keepRows ends with one) */
sdpa_status sdpa_kv_cache_truncate_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, int32_t length) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_truncate(ctx, cache, length);
    if (s != SDPA_OK) return s;
    const int32_t keep = (length + SDPA_PAGE_ROWS - 1) / SDPA_PAGE_ROWS;  /* pages with a kept row */
    const int32_t tail = length % SDPA_PAGE_ROWS;  /* kept rows of the last kept page (0: it is full) */
    /* the last kept page's rows past `length` become unwritten (zeros): make it private first */
    if (tail != 0) {
        s = reserve_write(ctx, cache, length - 1, 1);
        if (s != SDPA_OK) return s;
        own_slot(cache, page_slot(cache, keep - 1), false);
    }
    sdpa_page_pool * pool = cache->ctx->pages;
    void * zero = sdpa_page_pool_zero(pool, cache->format.page_bytes);
    /* the written pages past the kept ones; a windowed cache's evicted pages
     * are skipped (their slots hold live pages, released as those) */
    const int32_t last = cache->length > 0 ? (cache->length - 1) / SDPA_PAGE_ROWS : -1;
    const int32_t live = cache->window_start / SDPA_PAGE_ROWS;
    for (size_t head = 0; head < head_count(cache); head++) {
        void ** pages = head_pages(cache, head);
        for (int32_t p = keep; p <= last; p++) {
            if (cache->ring_pages && p >= cache->sink_pages && p < live) p = live;
            void ** slot = &pages[page_slot(cache, p)];
            if (*slot == zero) continue;
            sdpa_page_release(pool, *slot);
            *slot = zero;
        }
        /* rows tail .. ROWS-1 of K and V (and their int8 scales, zero points): all bytes 0 decode to 0.0 */
        if (tail != 0) {
            void * last_kept = pages[page_slot(cache, keep - 1)];
            if (!sdpa_page_is_zero(last_kept)) sdpa_kv_clear_rows(page_format(cache, last_kept), last_kept, tail);
        }
    }
    /* down to the sink rows: the window starts afresh */
    if (cache->window && length <= cache->sink_tokens) cache->window_start = cache->sink_tokens;
    cache->length = length;
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_truncate(sdpa_ctx * ctx, sdpa_kv_cache * cache, int32_t length) {
    return sdpa_named(ctx, sdpa_kv_cache_truncate_unnamed(ctx, cache, length), __func__);
}

sdpa_status sdpa_kv_cache_fork(sdpa_ctx * ctx, const sdpa_kv_cache * cache, sdpa_kv_cache ** out_cache) {
    return sdpa_named(ctx, sdpa_kv_cache_fork_unnamed(ctx, cache, out_cache), __func__);
}

sdpa_status sdpa_kv_cache_fork_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache * cache, sdpa_kv_cache ** out_cache) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_fork(ctx, cache, out_cache);
    if (s != SDPA_OK) return s;
    const size_t entries = head_count(cache) * (size_t)cache->pages_per_head;
    sdpa_kv_cache * c = malloc(sizeof *c);
    void ** table = sdpa_alloc_fault(ctx) ? NULL : malloc(entries * sizeof *table);
    if (!c || !table) {
        free(c); free(table);
        return sdpa_fail(ctx, SDPA_E_OOM, "cannot allocate a page table of %zu bytes", entries * sizeof *table);
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

/* ---- the write path of a load of saved state (cache/kv_state.c) ----
 * put_rows for rows [start, start + len) without encoding: every
 * page the rows need is taken (a fresh, zeroed page; reserve_write first, so
 * E_OOM changes nothing), a ring page taken over is cleared, window_start
 * and length move as for a write. kv_state.c then imports the records into
 * those pages (sdpa_kv_cache_row_page). */
sdpa_status sdpa_kv_cache_take_rows(sdpa_ctx * ctx, sdpa_kv_cache * c, int32_t start, int32_t len, int32_t f16_from) {
    if (len <= 0) return SDPA_OK;
    sdpa_status s = reserve_write_as(ctx, c, start, len, f16_from, false);
    if (s == SDPA_OK) put_rows(c, NULL, NULL, 0, 0, start, len, NULL, f16_from);
    return s;
}

bool sdpa_kv_cache_f16_page(const void * page) { return is_f16_page(page); }

void * sdpa_kv_cache_row_page(const sdpa_kv_cache * c, int32_t b, int32_t h, int32_t t) {
    return row_page(c, head_pages(c, (size_t)b * (size_t)c->kv_heads + (size_t)h), (size_t)t);
}

/* ---- keepRows: keep the accepted rows of a verified draft ---------------
 * Row start + rows[k] moves to start + k as stored (a record out of its
 * page and into the other: bit for bit, marks carried), in increasing k, so
 * a row is read before anything overwrites it (start + k <= start +
 * rows[k] < start + rows[k+1]). Pages (a fork's shared ones) and the
 * record buffer (scratch) are taken first: E_OOM changes nothing. */
sdpa_status sdpa_kv_cache_keep_rows(sdpa_ctx * ctx, sdpa_kv_cache * cache, int32_t start,
                                    const int32_t * rows, int32_t n) {
    return sdpa_named(ctx, sdpa_kv_cache_keep_rows_unnamed(ctx, cache, start, rows, n), __func__);
}

sdpa_status sdpa_kv_cache_keep_rows_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, int32_t start, const int32_t * rows,
                                            int32_t n) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_keep_rows(ctx, cache, start, rows, n);
    if (s != SDPA_OK) return s;
    int32_t first = 0;  /* the first row that moves */
    while (first < n && rows[first] == first) first++;
    if (first < n) {
        /* records of either kind of page, and D floats (a float16 page's row into an encoded page) first */
        size_t kb = record_bytes(&cache->format, 0), vb = record_bytes(&cache->format, 1);
        if (cache->float16_newest_page) {
            if (record_bytes(&cache->f16_format, 0) > kb) kb = record_bytes(&cache->f16_format, 0);
            if (record_bytes(&cache->f16_format, 1) > vb) vb = record_bytes(&cache->f16_format, 1);
        }
        const size_t floats = (size_t)cache->head_dim * sizeof(float);
        s = sdpa_scratch_reserve(ctx, (uint64_t)floats + kb + vb);
        if (s == SDPA_OK) s = reserve_write(ctx, cache, start + first, n - first);
        if (s != SDPA_OK) return s;
        for (int32_t page = (start + first) / SDPA_PAGE_ROWS; page <= (start + n - 1) / SDPA_PAGE_ROWS; page++)
            own_slot(cache, page_slot(cache, page), false);
        float * x = ctx->scratch;
        uint8_t * rec = (uint8_t *)ctx->scratch + floats;
        for (size_t head = 0; head < head_count(cache); head++) {
            void ** pages = head_pages(cache, head);
            for (int32_t k = first; k < n; k++) {
                const size_t from = (size_t)start + (size_t)rows[k], to = (size_t)start + (size_t)k;
                const void * src = row_page(cache, pages, from);
                void * dst = row_page(cache, pages, to);
                const int32_t rf = (int32_t)(from % SDPA_PAGE_ROWS), rt = (int32_t)(to % SDPA_PAGE_ROWS);
                uint32_t marks = 0;
                for (int value = 0; value < 2; value++) {  /* the records of a stored row import as they were */
                    uint8_t * r = rec + (value ? kb : 0);
                    int32_t bad = 0;
                    bool nonfinite = false;
                    if (is_f16_page(src) != is_f16_page(dst)) {
                        /* a float16 page's row into an encoded page (the float16 page is the
                         * last: a row moves down only): encoded, as its page's fill would */
                        sdpa_kv_decode_row(&cache->f16_format, src, rf, value, x);
                        nonfinite = sdpa_kv_encode_row(&cache->format, dst, rt, value, x);
                    } else {
                        sdpa_kv_record_export(page_format(cache, src), src, rf, 1, value, r, 0);
                        (void)sdpa_kv_record_import(page_format(cache, dst), dst, rt, 1, value, r, 0, &bad, &nonfinite);
                    }
                    if (nonfinite) marks |= value ? SDPA_PAGE_MARK_V_NONFINITE : SDPA_PAGE_MARK_K_NONFINITE;
                }
                if (marks) sdpa_page_set_marks(dst, sdpa_page_marks(dst) | marks);
            }
        }
    }
    /* the pages past start + n go; the last kept page is private already when a row moved */
    return sdpa_kv_cache_truncate_unnamed(ctx, cache, start + n);
}

/* ---- stepMany: several caches' steps in one call -------------------------
 * Every item checked (contract/), then everything that can fail: the scratch
 * for all problems (and for the pieces of a windowed step that spans pages),
 * the pages of every write, summed per page size (two caches of one size
 * draw on one free list). Then the writes, one dispatch for the attention of
 * every single-piece item, and the pieces of the others, each as its own
 * step would run them: every item has the bits of its own call. */
sdpa_status sdpa_kv_cache_step_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n) {
    return sdpa_named(ctx, sdpa_kv_cache_step_many_unnamed(ctx, items, n), __func__);
}

sdpa_status sdpa_kv_cache_step_many_unnamed(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_problem ps[SDPA_MANY_MAX], batch[SDPA_MANY_MAX];
    bool pieces[SDPA_MANY_MAX];
    sdpa_status s = sdpa_check_step_many(ctx, items, n, ps);
    if (s != SDPA_OK) return s;
    int32_t nb = 0;
    for (int32_t i = 0; i < n; i++) {
        pieces[i] = step_in_pieces(items[i].cache, &ps[i]);
        if (!pieces[i]) batch[nb++] = ps[i];
    }
    if (nb > 0) s = sdpa_reserve_problems(ctx, batch, nb);
    for (int32_t i = 0; i < n && s == SDPA_OK; i++) {
        if (!pieces[i]) continue;
        const int32_t sp = (int32_t)ps[i].start_pos, len = items[i].key->dims[1];
        int32_t next;
        for (int32_t at = sp; at < sp + len && s == SDPA_OK; at = next) {
            const sdpa_problem piece = step_piece(items[i].cache, &ps[i], at, &next);
            s = sdpa_reserve_problem(ctx, &piece);
        }
    }
    for (int32_t i = 0; i < n && s == SDPA_OK; i++) s = reserve_rotation(ctx, items[i].cache, &ps[i].rope);
    if (s != SDPA_OK) return s;
    /* the pages, per page pool (an item's creating context's) and page size (an
       item's encoded and float16 pages each of their own size) */
    size_t sizes[2 * SDPA_MANY_MAX], gather_sizes[2 * SDPA_MANY_MAX];
    uint64_t needs[2 * SDPA_MANY_MAX], gather_needs[2 * SDPA_MANY_MAX];
    sdpa_page_pool * pools[2 * SDPA_MANY_MAX];
    int32_t n_sizes = 0;
    for (int32_t i = 0; i < n; i++) {
        const sdpa_kv_cache * c = items[i].cache;
        uint64_t need[2];
        write_need(c, (int32_t)ps[i].start_pos, items[i].key->dims[1], -1, &need[0], &need[1]);
        need[1] += pieces_need(c, pieces[i]);
        for (int kind = 0; kind < 2; kind++) {
            if (!need[kind]) continue;
            const size_t bytes = kind ? c->f16_format.page_bytes : c->format.page_bytes;
            int32_t at = 0;
            while (at < n_sizes && (sizes[at] != bytes || pools[at] != c->ctx->pages)) at++;
            if (at == n_sizes) { sizes[n_sizes] = bytes; pools[n_sizes] = c->ctx->pages; needs[n_sizes++] = 0; }
            needs[at] += need[kind];
        }
    }
    if (n_sizes > 0 && !sdpa_page_pool_ensure_pools(pools, sizes, needs, n_sizes, gather_sizes, gather_needs)) {
        uint64_t total = 0;
        for (int32_t at = 0; at < n_sizes; at++) total += needs[at];
        return sdpa_fail(ctx, SDPA_E_OOM, "the page pool cannot grow by %llu pages (of %d sizes); no cache was written",
                         (unsigned long long)total, (int)n_sizes);
    }
    for (int32_t i = 0; i < n; i++) {
        if (pieces[i]) continue;
        const int32_t len = items[i].key->dims[1];
        put_rows(items[i].cache, items[i].key->data, items[i].value->data, len, 0, (int32_t)ps[i].start_pos, len, &ps[i].rope, -1);
    }
    if (nb > 0) sdpa_run_problems(ctx, batch, nb);
    for (int32_t i = 0; i < n; i++) {
        if (!pieces[i]) continue;
        const int32_t sp = (int32_t)ps[i].start_pos, len = items[i].key->dims[1];
        int32_t next;
        for (int32_t at = sp; at < sp + len; at = next) {
            const sdpa_problem piece = step_piece(items[i].cache, &ps[i], at, &next);
            put_rows(items[i].cache, items[i].key->data, items[i].value->data, len, at - sp, at, next - at, &ps[i].rope, -1);
            sdpa_run_problem(ctx, &piece, false);
        }
    }
    sdpa_clear_error(ctx);
    return SDPA_OK;
}
