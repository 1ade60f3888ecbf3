/* kv_state.c: saved KV state (docs/FORMAT.md): a cache as portable bytes,
 * and the container of a group of them. The one owner of both formats.
 *
 *   header   96 fixed bytes (magic, version, sizes, geometry, dtypes, rows),
 *            the caller's meta, a CRC-32C of both
 *   payload  for b, for h, for t in the saved rows: K record, V record
 *            (cache/kv_record.h: the stored form, no page layout)
 *   trailer  a CRC-32C of the payload
 *
 * A group's save (FORMAT.md section 5, the end of this file) is a container
 * header (magic, version, layer count, meta, a CRC-32C) and then one save as
 * above per layer. The group object is JS's, so JS streams the container
 * (js/kv-state.js: it gathers the header bytes sdpa_kv_group_header_check
 * asks for, then feeds each layer to a loader), but its bytes are written and
 * checked here only.
 *
 * Both directions stream: a saver hands out the bytes in pieces of any
 * size (exporting whole records straight into the caller's buffer, and a
 * record that straddles two pieces through a small buffer), and a loader
 * takes pieces of any size. A loader parses the header completely (its CRC
 * first) before it makes anything; then it makes the cache and takes every
 * page the saved rows need (E_OOM before any record is read), imports
 * records as they arrive (each checked: kv_record.c), and checks the
 * payload's CRC at the end. Any failure frees the cache it made, so every
 * page it took goes back to the pool. Nothing is read outside the bytes
 * fed, and no size read from the data is trusted before the header's CRC
 * and every consistency rule hold. */
#include "cache/kv_state.h"
#include "cache/kv_record.h"
#include "cache/kv_dtype.h"
#include "cache/crc32c.h"
#include "cache/page_pool.h"
#include "contract/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Version 2: a cache with a float16 newest page (flags bit 0), whose saved
 * rows in that page come last in each head as float16 records (their count
 * at byte 84). Version 3: version 2's header, int4 records of 64-element
 * groups (a cache with an int4 block; versions 1 and 2 hold 32-element
 * ones, re-encoded on load: kv_record.h). Other caches are saved as
 * version 1 or 2, as before. */
#define STATE_VERSION 3u
#define FLAG_FLOAT16_NEWEST_PAGE 1u
#define FIXED_BYTES 96u
#define HEADER_MIN (FIXED_BYTES + 4u)
static const unsigned char MAGIC[8] = { 0x89, 'S', 'D', 'P', 'A', 'K', 'V', '\n' };


uint32_t sdpa_crc32c(uint32_t crc, const void * data, size_t n) { return sdpa_crc32c_update(crc, data, n); }

static void put32(unsigned char * p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}
static void put64(unsigned char * p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }
static uint32_t get32(const unsigned char * p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char * p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* The rows a save holds per (batch row, KV head): [a0, a1) (sink rows) then
 * [b0, b1) (the rest; a plain cache has S = WS = 0, so all of it). */
typedef struct saved_rows {
    int32_t a0, a1, b0, b1;
} saved_rows;

static saved_rows rows_of(int32_t start, int32_t end, int32_t sink_tokens, int32_t window_start) {
    saved_rows r;
    r.a0 = start < sink_tokens ? start : sink_tokens;
    r.a1 = end < sink_tokens ? end : sink_tokens;
    if (r.a1 < r.a0) r.a1 = r.a0;
    int32_t from = start;
    if (from < sink_tokens) from = sink_tokens;
    if (from < window_start) from = window_start;
    r.b0 = from < end ? from : end;
    r.b1 = end;
    return r;
}
static int32_t rows_count(const saved_rows * r) { return (r->a1 - r->a0) + (r->b1 - r->b0); }
/* The i-th saved row of a head. */
static int32_t row_at(const saved_rows * r, int32_t i) { return i < r->a1 - r->a0 ? r->a0 + i : r->b0 + (i - (r->a1 - r->a0)); }
/* Saved rows after row index i that are consecutive and on its page (i's included). */
static int32_t run_at(const saved_rows * r, int32_t i) {
    const int32_t nA = r->a1 - r->a0, t = row_at(r, i);
    const int32_t left = i < nA ? nA - i : rows_count(r) - i;
    const int32_t in_page = SDPA_PAGE_ROWS - t % SDPA_PAGE_ROWS;
    return left < in_page ? left : in_page;
}

static void * page_of(const sdpa_kv_cache * c, int32_t b, int32_t h, int32_t t) {
    return c->table[((size_t)b * (size_t)c->kv_heads + (size_t)h) * (size_t)c->pages_per_head +
                    (size_t)sdpa_page_slot(t / SDPA_PAGE_ROWS, c->sink_pages, c->ring_pages)];
}

/* A save's record sizes: K and V of an encoded page's rows, of a float16
 * page's rows, and which of the saved rows of a head are float16 records
 * (the last f16_rows: a float16 page is the last page written, so its rows
 * are the last saved, and no run of rows on one page mixes the two). */
typedef struct record_sizes {
    size_t krec, vrec, k16, v16;
    int32_t per_head, f16_rows;
} record_sizes;
static bool f16_row(const record_sizes * z, int32_t i) { return i >= z->per_head - z->f16_rows; }
static size_t pair_at(const record_sizes * z, int32_t i) { return f16_row(z, i) ? z->k16 + z->v16 : z->krec + z->vrec; }
static size_t krec_at(const record_sizes * z, int32_t i) { return f16_row(z, i) ? z->k16 : z->krec; }
/* Payload bytes of one head's records before its saved row i. */
static uint64_t head_offset(const record_sizes * z, int32_t i) {
    const int32_t enc = z->per_head - z->f16_rows;
    return i <= enc ? (uint64_t)i * (z->krec + z->vrec)
                    : (uint64_t)enc * (z->krec + z->vrec) + (uint64_t)(i - enc) * (z->k16 + z->v16);
}
static uint64_t head_bytes_of(const record_sizes * z) { return head_offset(z, z->per_head); }
/* The first row of the float16 page of a cache of `length` rows whose last
 * page is one, else INT32_MAX. */
static int32_t f16_page_start(const sdpa_kv_cache * c) {
    if (!c->float16_newest_page || c->length == 0 || c->batch == 0 || c->kv_heads == 0) return INT32_MAX;
    const int32_t t = c->length - 1;
    return sdpa_kv_cache_f16_page(page_of(c, 0, 0, t)) ? t - t % SDPA_PAGE_ROWS : INT32_MAX;
}
static int32_t rows_from(const saved_rows * r, int32_t from) {
    int32_t n = 0;
    for (int32_t t = r->a0 > from ? r->a0 : from; t < r->a1; t++) n++;
    n += r->b1 - (r->b0 > from ? r->b0 : from) > 0 ? r->b1 - (r->b0 > from ? r->b0 : from) : 0;
    return n;
}

/* ------------------------------------------------------------------ save */

struct sdpa_kv_saver {
    sdpa_ctx * ctx;
    sdpa_kv_cache * fork;      /* a copy-on-write snapshot of the cache */
    unsigned char * head;      /* the header, CRC included */
    size_t head_bytes;
    uint64_t total, pos;       /* bytes of the save; bytes handed out */
    saved_rows rows;
    int32_t per_head;          /* saved rows per head */
    record_sizes z;
    int32_t b, h, i;           /* the next record pair: batch row, head, row index */
    unsigned char * pend;      /* one record pair straddling two pieces */
    size_t pend_off, pend_len;
    uint32_t crc;              /* of the payload so far */
    unsigned char trailer[4];
};

/* The save's rules, in the table's order. Its rows are check.c's
 * sdpa_check_cache_save_rows, which the JS package's entry runs first
 * (sdpa_wasm_kv_save_begin, src/wasm/api.h), so they are written there only. The
 * meta's size is also JS's (snapshot.js readSaveMeta, the same words): JS
 * makes the bytes (JSON.stringify, its snapshot of meta) and rejects them
 * before it makes anything; C callers hand their own bytes here. */
static sdpa_status check_save(sdpa_ctx * ctx, const sdpa_kv_cache * c, int32_t start, int32_t length, size_t meta_bytes) {
    if (!c) return sdpa_fail(ctx, SDPA_E_ARG, "cache is missing");
    if (meta_bytes > SDPA_STATE_MAX_META)
        return sdpa_fail(ctx, SDPA_E_ARG, "meta is %zu bytes as JSON; at most %d", meta_bytes, SDPA_STATE_MAX_META);
    return sdpa_check_cache_save_rows(ctx, c, start, length);
}

sdpa_status sdpa_kv_save_begin(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start, int32_t length,
                               const void * meta, size_t meta_bytes, sdpa_kv_saver ** out_saver) {
    return sdpa_named(ctx, sdpa_kv_save_begin_unnamed(ctx, cache, start, length, meta, meta_bytes, out_saver), __func__);
}

sdpa_status sdpa_kv_save_begin_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start, int32_t length,
                                       const void * meta, size_t meta_bytes, sdpa_kv_saver ** out_saver) {
    if (!ctx) return SDPA_E_ARG;
    if (!out_saver) return sdpa_fail(ctx, SDPA_E_ARG, "out_saver is missing");
    *out_saver = NULL;
    if (meta_bytes > 0 && !meta) return sdpa_fail(ctx, SDPA_E_ARG, "meta is missing");
    sdpa_status s = check_save(ctx, cache, start, length, meta_bytes);
    if (s != SDPA_OK) return s;
    const sdpa_page_format * f = &cache->format;
    const int32_t kd = sdpa_kv_record_block_dtype(f, 0), vd = sdpa_kv_record_block_dtype(f, 1);
    const uint64_t krec = sdpa_kv_record_bytes(kd, f->dim), vrec = sdpa_kv_record_bytes(vd, f->dim);
    const int32_t end = start + length;
    const int32_t ws = cache->window ? (end <= cache->sink_tokens ? cache->sink_tokens : cache->window_start) : 0;
    const saved_rows rows = rows_of(start, end, cache->window ? cache->sink_tokens : 0, ws);
    const int32_t per_head = rows_count(&rows);
    record_sizes z = { (size_t)krec, (size_t)vrec, (size_t)krec, (size_t)vrec, per_head, 0 };
    const int32_t f16_from = f16_page_start(cache);
    if (f16_from != INT32_MAX) {
        z.k16 = (size_t)sdpa_kv_record_bytes(sdpa_dtype_in_float16_page(kd), f->dim);
        z.v16 = (size_t)sdpa_kv_record_bytes(sdpa_dtype_in_float16_page(vd), f->dim);
        z.f16_rows = rows_from(&rows, f16_from);
    }
    const uint64_t heads = (uint64_t)cache->batch * (uint64_t)cache->kv_heads;
    const uint64_t payload = sdpa_size_mul(heads, head_bytes_of(&z));
    const size_t head_bytes = FIXED_BYTES + meta_bytes + 4;
    const size_t max_pair = z.krec + z.vrec > z.k16 + z.v16 ? z.krec + z.vrec : z.k16 + z.v16;

    sdpa_kv_saver * sv = calloc(1, sizeof *sv);
    unsigned char * head = sv ? calloc(1, head_bytes) : NULL;
    unsigned char * pend = head ? malloc(max_pair) : NULL;
    sdpa_kv_cache * fork = NULL;
    if (!pend) {
        free(sv); free(head);
        return sdpa_fail(ctx, SDPA_E_OOM, "cannot allocate the header (%zu bytes)", head_bytes);
    }
    s = sdpa_kv_cache_fork_unnamed(ctx, cache, &fork);
    if (s != SDPA_OK) {
        free(sv); free(head); free(pend);
        return sdpa_fail(ctx, SDPA_E_OOM, "cannot allocate a snapshot of the page table");
    }
    memcpy(head, MAGIC, 8);
    put32(head + 8, kd == SDPA_DTYPE_INT4 || vd == SDPA_DTYPE_INT4 ? STATE_VERSION : cache->float16_newest_page ? 2u : 1u);
    put32(head + 12, (uint32_t)head_bytes);
    put32(head + 16, cache->float16_newest_page ? FLAG_FLOAT16_NEWEST_PAGE : 0u);  /* flags */
    put32(head + 20, (uint32_t)kd);
    put32(head + 24, (uint32_t)vd);
    put32(head + 28, (uint32_t)cache->batch);
    put32(head + 32, (uint32_t)cache->kv_heads);
    put32(head + 36, (uint32_t)cache->head_dim);
    put32(head + 40, (uint32_t)cache->max_seq_len);
    put32(head + 44, (uint32_t)cache->window);
    put32(head + 48, (uint32_t)cache->sink_tokens);
    put32(head + 52, (uint32_t)start);
    put32(head + 56, (uint32_t)end);
    put32(head + 60, (uint32_t)ws);
    put32(head + 64, (uint32_t)krec);
    put32(head + 68, (uint32_t)vrec);
    put64(head + 72, payload);
    put32(head + 80, (uint32_t)per_head);
    put32(head + 84, (uint32_t)z.f16_rows);    /* version 2: float16 rows per head (version 1: reserved, 0) */
    put32(head + 88, (uint32_t)meta_bytes);
    put32(head + 92, 0);                        /* reserved */
    if (meta_bytes) memcpy(head + FIXED_BYTES, meta, meta_bytes);
    put32(head + FIXED_BYTES + meta_bytes, sdpa_crc32c_update(0, head, FIXED_BYTES + meta_bytes));

    sv->ctx = ctx;
    sv->fork = fork;
    sv->head = head;
    sv->head_bytes = head_bytes;
    sv->total = (uint64_t)head_bytes + payload + 4;
    sv->rows = rows;
    sv->per_head = per_head;
    sv->z = z;
    sv->pend = pend;
    *out_saver = sv;
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

double sdpa_kv_save_bytes(const sdpa_kv_saver * sv) { return sv ? (double)sv->total : 0; }

/* Exports up to `max` record pairs from the cursor on (one run: one page of
 * one head) to out; returns how many. */
static int32_t save_run(sdpa_kv_saver * sv, unsigned char * out, size_t max) {
    const int32_t t = row_at(&sv->rows, sv->i);
    int32_t n = run_at(&sv->rows, sv->i);
    if ((size_t)n > max) n = (int32_t)max;
    const sdpa_kv_cache * c = sv->fork;
    const void * page = page_of(c, sv->b, sv->h, t);
    const int32_t row = t % SDPA_PAGE_ROWS;
    /* (a run is one page's: all float16 records or none) */
    const sdpa_page_format * f = f16_row(&sv->z, sv->i) ? &c->f16_format : &c->format;
    const size_t pair = pair_at(&sv->z, sv->i);
    sdpa_kv_record_export(f, page, row, n, 0, out, pair);
    sdpa_kv_record_export(f, page, row, n, 1, out + krec_at(&sv->z, sv->i), pair);
    sv->i += n;
    if (sv->i == sv->per_head) {
        sv->i = 0;
        if (++sv->h == c->kv_heads) { sv->h = 0; sv->b++; }
    }
    return n;
}

size_t sdpa_kv_save_read(sdpa_kv_saver * sv, void * out_, size_t cap) {
    if (!sv || !out_) return 0;
    unsigned char * out = out_;
    size_t done = 0, pay_from = 0, pay_len = 0;  /* the payload bytes of this call: one run of out, CRC'ed at once */
    const uint64_t payload_end = sv->total - 4;
    while (done < cap && sv->pos < sv->total) {
        const size_t room = cap - done;
        size_t n;
        if (sv->pos < sv->head_bytes) {                      /* the header */
            n = sv->head_bytes - (size_t)sv->pos;
            if (n > room) n = room;
            memcpy(out + done, sv->head + sv->pos, n);
        } else if (sv->pos < payload_end) {                  /* records */
            if (pay_len == 0) pay_from = done;
            if (sv->pend_off < sv->pend_len) {               /* the rest of a straddling pair */
                n = sv->pend_len - sv->pend_off;
                if (n > room) n = room;
                memcpy(out + done, sv->pend + sv->pend_off, n);
                sv->pend_off += n;
            } else if (room >= pair_at(&sv->z, sv->i)) {
                const size_t pair = pair_at(&sv->z, sv->i);
                n = (size_t)save_run(sv, out + done, room / pair) * pair;
            } else {
                const size_t pair = pair_at(&sv->z, sv->i);
                save_run(sv, sv->pend, 1);
                sv->pend_off = 0;
                sv->pend_len = pair;
                continue;
            }
            pay_len += n;
        } else {                                             /* the payload's CRC */
            if (pay_len) { sv->crc = sdpa_crc32c_update(sv->crc, out + pay_from, pay_len); pay_len = 0; }
            if (sv->pos == payload_end) put32(sv->trailer, sv->crc);
            const size_t at = (size_t)(sv->pos - payload_end);
            n = 4 - at;
            if (n > room) n = room;
            memcpy(out + done, sv->trailer + at, n);
        }
        done += n;
        sv->pos += n;
    }
    if (pay_len) sv->crc = sdpa_crc32c_update(sv->crc, out + pay_from, pay_len);
    return done;
}

void sdpa_kv_save_free(sdpa_kv_saver * sv) {
    if (!sv) return;
    sdpa_kv_cache_free(sv->fork);
    free(sv->head);
    free(sv->pend);
    free(sv);
}

/* ------------------------------------------------------------------ load */

enum { PHASE_START, PHASE_HEADER, PHASE_PAYLOAD, PHASE_TRAILER, PHASE_DONE };

struct sdpa_kv_loader {
    sdpa_ctx * ctx;
    int32_t max_seq_len;       /* 0: the saved one */
    sdpa_status failed;        /* sticky */
    char message[SDPA_ERROR_CAP];
    int phase;
    unsigned char start[16];   /* magic, version, header bytes */
    unsigned char * head;
    size_t head_bytes, have;   /* bytes of the current part gathered */
    uint64_t fed;              /* bytes taken so far */
    uint64_t total;            /* bytes of the save, once the header was read */
    sdpa_kv_cache * cache;
    int32_t window, sink_tokens;
    saved_rows rows;
    int32_t per_head;
    record_sizes z;
    uint32_t version;
    int32_t b, h, i;           /* the next record pair */
    unsigned char * pend;      /* a record pair split between two pieces */
    uint32_t crc;
    unsigned char trailer[4];
};

static sdpa_status load_fail(sdpa_kv_loader * L, sdpa_status s, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static sdpa_status load_fail(sdpa_kv_loader * L, sdpa_status s, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->message, sizeof L->message, fmt, ap);
    va_end(ap);
    L->failed = s;
    return sdpa_fail(L->ctx, s, "%s", L->message);
}

/* A failure of ctx (E_OOM from the cache) made sticky with its message. */
static sdpa_status load_keep(sdpa_kv_loader * L, sdpa_status s) {
    snprintf(L->message, sizeof L->message, "%s", sdpa_ctx_last_error(L->ctx));
    L->failed = s;
    return s;
}

sdpa_status sdpa_kv_load_begin(sdpa_ctx * ctx, int32_t max_seq_len, sdpa_kv_loader ** out_loader) {
    return sdpa_named(ctx, sdpa_kv_load_begin_unnamed(ctx, max_seq_len, out_loader), __func__);
}

sdpa_status sdpa_kv_load_begin_unnamed(sdpa_ctx * ctx, int32_t max_seq_len, sdpa_kv_loader ** out_loader) {
    if (!ctx) return SDPA_E_ARG;
    if (!out_loader) return sdpa_fail(ctx, SDPA_E_ARG, "out_loader is missing");
    *out_loader = NULL;
    /* (also js/rules.js checkLoadMaxSeqLen, one wording: JS refuses the number before it reads a byte) */
    if (max_seq_len < 0) return sdpa_fail(ctx, SDPA_E_DIMS, "maxSeqLen is %d; expected a positive integer", max_seq_len);
    if (max_seq_len > SDPA_INDEX_LIMIT)
        return sdpa_fail(ctx, SDPA_E_DIMS, "maxSeqLen is %d; at most %d", max_seq_len, SDPA_INDEX_LIMIT);
    sdpa_kv_loader * L = calloc(1, sizeof *L);
    if (!L) return sdpa_fail(ctx, SDPA_E_OOM, "cannot allocate a loader");
    L->ctx = ctx;
    L->max_seq_len = max_seq_len;
    *out_loader = L;
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

/* The header, whole and CRC-checked: every rule, then the cache and its pages. */
static sdpa_status parse_header(sdpa_kv_loader * L) {
    const unsigned char * p = L->head;
    const size_t hb = L->head_bytes;
    const uint32_t want = get32(p + hb - 4), got = sdpa_crc32c_update(0, p, hb - 4);
    if (want != got)
        return load_fail(L, SDPA_E_FORMAT, "the header's CRC-32C is 0x%08x but the data says 0x%08x; the header was changed or damaged",
                         (unsigned)got, (unsigned)want);
    const uint32_t flags = get32(p + 16);
    if (L->version == 1 && flags != 0)
        return load_fail(L, SDPA_E_FORMAT, "the header's flags are 0x%08x; version 1 defines none (expected 0)", (unsigned)flags);
    if (flags & ~FLAG_FLOAT16_NEWEST_PAGE)
        return load_fail(L, SDPA_E_FORMAT, "the header's flags are 0x%08x; version %u defines only bit 0 (a float16 newest page)", (unsigned)flags,
                         (unsigned)L->version);
    if ((L->version == 1 && get32(p + 84) != 0) || get32(p + 92) != 0)
        return load_fail(L, SDPA_E_FORMAT, "the header's reserved fields (bytes %s) are not 0", L->version == 1 ? "84 and 92" : "92");
    const uint32_t meta = get32(p + 88);
    if ((uint64_t)meta + HEADER_MIN != hb)
        return load_fail(L, SDPA_E_FORMAT, "the header is %zu bytes but its meta is %u bytes; expected %llu header bytes",
                         hb, (unsigned)meta, (unsigned long long)meta + HEADER_MIN);
    const int32_t kd = (int32_t)get32(p + 20), vd = (int32_t)get32(p + 24);
    for (int value = 0; value < 2; value++) {
        const int32_t d = value ? vd : kd;
        const char * which = value ? "value" : "key";
        if (!sdpa_kv_record_dtype_known(d)) {
            char dtypes[128];
            sdpa_dtype_list(dtypes, sizeof dtypes, true);
            return load_fail(L, SDPA_E_FORMAT, "the %s dtype is %u, which is no cache dtype (%s)", which, (unsigned)(uint32_t)d, dtypes);
        }
        if (sdpa_kv_record_bytes(d, 1) == 0)
            return load_fail(L, SDPA_E_FORMAT, "the %s dtype is %s, which this build does not support", which, sdpa_kv_record_dtype_name(d));
    }
    const uint32_t u_batch = get32(p + 28), u_heads = get32(p + 32), u_dim = get32(p + 36), u_max = get32(p + 40);
    const uint32_t u_window = get32(p + 44), u_sinks = get32(p + 48), u_start = get32(p + 52), u_end = get32(p + 56), u_ws = get32(p + 60);
    const uint32_t fields[] = { u_batch, u_heads, u_dim, u_max, u_window, u_sinks, u_start, u_end, u_ws };
    static const char * const names[] = { "batch", "numKvHeads", "headDim", "maxSeqLen", "window", "sinkTokens", "start", "length", "windowStart" };
    for (int k = 0; k < 9; k++)
        if (fields[k] > (uint32_t)SDPA_INDEX_LIMIT)
            return load_fail(L, SDPA_E_FORMAT, "the header's %s is %u; at most %d", names[k], (unsigned)fields[k], SDPA_INDEX_LIMIT);
    const int32_t batch = (int32_t)u_batch, heads = (int32_t)u_heads, dim = (int32_t)u_dim, max_seq = (int32_t)u_max;
    const int32_t window = (int32_t)u_window, sinks = (int32_t)u_sinks, start = (int32_t)u_start, end = (int32_t)u_end, ws = (int32_t)u_ws;
    /* the geometry: what createKVCache accepts */
    sdpa_kv_cache * probe = NULL;
    sdpa_status s = sdpa_check_cache_create(L->ctx, batch, max_seq, heads, dim, kd, vd, window, sinks, &probe);
    if (s != SDPA_OK) {
        char why[SDPA_ERROR_CAP];
        snprintf(why, sizeof why, "%s", sdpa_ctx_last_error(L->ctx));
        return load_fail(L, SDPA_E_FORMAT, "the saved geometry is not a cache's: %s", why);
    }
    sdpa_page_format fmt;
    const uint64_t page_bytes = sdpa_page_format_make(&fmt, kd, vd, dim);
    if (page_bytes == 0 || page_bytes > SDPA_MAX_PAGE_BYTES)
        return load_fail(L, SDPA_E_FORMAT, "a page of head dim %d needs %llu bytes; no cache of this build has pages above %llu bytes",
                         dim, (unsigned long long)page_bytes, (unsigned long long)SDPA_MAX_PAGE_BYTES);
    const uint64_t krec = sdpa_kv_record_bytes_of_version(L->version, kd, dim), vrec = sdpa_kv_record_bytes_of_version(L->version, vd, dim);
    if (get32(p + 64) != krec || get32(p + 68) != vrec)
        return load_fail(L, SDPA_E_FORMAT, "the header's record sizes are %u (K) and %u (V) bytes; K %s / V %s at head dim %d have %llu and %llu",
                         (unsigned)get32(p + 64), (unsigned)get32(p + 68), sdpa_kv_record_dtype_name(kd), sdpa_kv_record_dtype_name(vd), dim,
                         (unsigned long long)krec, (unsigned long long)vrec);
    if (start > end) return load_fail(L, SDPA_E_FORMAT, "the header's start %d is past its length %d", start, end);
    if (end > max_seq) return load_fail(L, SDPA_E_FORMAT, "the header's length %d is past its maxSeqLen %d", end, max_seq);
    if (window == 0 && ws != 0)
        return load_fail(L, SDPA_E_FORMAT, "the header's windowStart is %d but the cache is not windowed; expected 0", ws);
    if (window != 0 && end <= sinks && ws != sinks)
        return load_fail(L, SDPA_E_FORMAT, "the header's windowStart is %d; a windowed cache of length %d <= sinkTokens %d has windowStart %d",
                         ws, end, sinks, sinks);
    if (window != 0 && end > sinks && (ws < sinks || ws > end))
        return load_fail(L, SDPA_E_FORMAT, "the header's windowStart is %d; expected sinkTokens %d <= windowStart <= length %d",
                         ws, sinks, end);
    const saved_rows rows = rows_of(start, end, window ? sinks : 0, ws);
    const int32_t per_head = rows_count(&rows);
    if (get32(p + 80) != (uint32_t)per_head)
        return load_fail(L, SDPA_E_FORMAT, "the header says %u rows per head; start %d, length %d and windowStart %d give %d",
                         (unsigned)get32(p + 80), start, end, ws, per_head);
    /* version 2: the saved rows of the float16 page (the page of row length - 1,
     * not a full one) as float16 records, last in each head */
    const bool f16_page = (flags & FLAG_FLOAT16_NEWEST_PAGE) != 0;
    const uint32_t f16_rows = get32(p + 84);
    const bool quantized = sdpa_dtype_in_float16_page(kd) != kd || sdpa_dtype_in_float16_page(vd) != vd;
    const int32_t f16_from = f16_rows ? (end - 1) - (end - 1) % SDPA_PAGE_ROWS : INT32_MAX;
    if (f16_rows && (!f16_page || !quantized || end % SDPA_PAGE_ROWS == 0 || f16_rows != (uint32_t)rows_from(&rows, f16_from)))
        return load_fail(L, SDPA_E_FORMAT, "the header says %u float16 rows per head; a %s cache of length %d saved from row %d has %d",
                         (unsigned)f16_rows, f16_page && quantized ? "float16-newest-page" : "such",
                         end, start, f16_page && quantized && end % SDPA_PAGE_ROWS ? rows_from(&rows, (end - 1) - (end - 1) % SDPA_PAGE_ROWS) : 0);
    record_sizes z = { (size_t)krec, (size_t)vrec, (size_t)krec, (size_t)vrec, per_head, (int32_t)f16_rows };
    if (f16_rows) {
        z.k16 = (size_t)sdpa_kv_record_bytes(sdpa_dtype_in_float16_page(kd), dim);
        z.v16 = (size_t)sdpa_kv_record_bytes(sdpa_dtype_in_float16_page(vd), dim);
    }
    const uint64_t payload = sdpa_size_mul((uint64_t)batch * (uint64_t)heads, head_bytes_of(&z));
    if (get64(p + 72) != payload)
        return load_fail(L, SDPA_E_FORMAT, "the header says %llu payload bytes; %d x %d heads x %d rows (%d of them float16) are %llu",
                         (unsigned long long)get64(p + 72), batch, heads, per_head, (int)f16_rows, (unsigned long long)payload);
    const int32_t max_len = L->max_seq_len ? L->max_seq_len : max_seq;
    if (max_len < end)
        return load_fail(L, SDPA_E_FORMAT, "maxSeqLen is %d but the saved cache has length %d; expected maxSeqLen >= %d", max_len, end, end);
    /* pages beyond the address space: E_OOM now, before the pool grows towards it */
    const uint64_t pages_per_head = (uint64_t)(rows.a1 - rows.a0 + rows.b1 - rows.b0) / SDPA_PAGE_ROWS + 2;
    const uint64_t need = sdpa_size_mul(sdpa_size_mul((uint64_t)batch * (uint64_t)heads, pages_per_head), page_bytes);
    if (need > SIZE_MAX)
        return load_fail(L, SDPA_E_OOM, "the saved rows need about %llu bytes of pages; more than this build's address space",
                         (unsigned long long)need);
    /* make it: a new cache, and every page of its saved rows */
    sdpa_kv_cache * c = NULL;
    const sdpa_kv_cache_desc desc = { batch, max_len, heads, dim, kd, vd, window, sinks, f16_page ? 1 : 0 };
    s = sdpa_kv_cache_create_desc_unnamed(L->ctx, &desc, true, &c);
    if (s != SDPA_OK) return load_keep(L, s);
    L->cache = c;
    s = sdpa_kv_cache_take_rows(L->ctx, c, rows.a0, rows.a1 - rows.a0, f16_from);
    if (s == SDPA_OK) s = sdpa_kv_cache_take_rows(L->ctx, c, rows.b0, rows.b1 - rows.b0, f16_from);
    if (s != SDPA_OK) return load_keep(L, s);
    if (window && ws > c->window_start) c->window_start = ws;
    c->length = end;
    const size_t max_pair = z.krec + z.vrec > z.k16 + z.v16 ? z.krec + z.vrec : z.k16 + z.v16;
    L->pend = malloc(max_pair);
    if (!L->pend) return load_fail(L, SDPA_E_OOM, "cannot allocate %zu bytes for a record", max_pair);
    L->window = window;
    L->sink_tokens = sinks;
    L->rows = rows;
    L->per_head = per_head;
    L->z = z;
    L->total = (uint64_t)hb + payload + 4;
    L->phase = per_head && batch && heads ? PHASE_PAYLOAD : PHASE_TRAILER;
    return SDPA_OK;
}

/* Imports n record pairs from `in` at the cursor (one run); E_FORMAT for a bad record. */
static sdpa_status load_run(sdpa_kv_loader * L, const unsigned char * in, int32_t n) {
    sdpa_kv_cache * c = L->cache;
    const int32_t t = row_at(&L->rows, L->i);
    const bool evicted = c->window && t >= c->sink_tokens && t < c->window_start;  /* a smaller ring than the saved one */
    const size_t pair = pair_at(&L->z, L->i), krec = krec_at(&L->z, L->i);
    if (!evicted) {
        void * page = page_of(c, L->b, L->h, t);
        const int32_t row = t % SDPA_PAGE_ROWS;
        /* float16 records go into the float16 page take_rows made for them (a run is one page's) */
        const sdpa_page_format * f = f16_row(&L->z, L->i) ? &c->f16_format : &c->format;
        uint32_t marks = 0;
        for (int value = 0; value < 2; value++) {
            int32_t bad = 0;
            bool nonfinite = false;
            const unsigned char * first = in + (value ? krec : 0);
            const sdpa_record_fault fault = sdpa_kv_record_import_of_version(L->version, f, page, row, n, value, first, pair, &bad, &nonfinite);
            if (fault != SDPA_RECORD_OK) {
                char why[200];
                const int32_t d = sdpa_kv_record_block_dtype(f, value);
                sdpa_kv_record_describe(fault, d, c->head_dim, first + (size_t)bad * pair, why, sizeof why);
                const uint64_t at = (uint64_t)L->head_bytes +
                                    ((uint64_t)L->b * (uint64_t)c->kv_heads + (uint64_t)L->h) * head_bytes_of(&L->z) +
                                    head_offset(&L->z, L->i + bad) + (value ? krec : 0);
                return load_fail(L, SDPA_E_FORMAT, "the %s record of batch row %d, head %d, row %d (byte %llu) is invalid: %s",
                                 value ? "V" : "K", L->b, L->h, t + bad, (unsigned long long)at, why);
            }
            if (nonfinite) marks |= value ? SDPA_PAGE_MARK_V_NONFINITE : SDPA_PAGE_MARK_K_NONFINITE;
        }
        if (marks) sdpa_page_set_marks(page, sdpa_page_marks(page) | marks);
    }
    L->i += n;
    if (L->i == L->per_head) {
        L->i = 0;
        if (++L->h == c->kv_heads) {
            L->h = 0;
            if (++L->b == c->batch) L->phase = PHASE_TRAILER;
        }
    }
    return SDPA_OK;
}

sdpa_status sdpa_kv_load_feed(sdpa_kv_loader * L, const void * data, size_t n, size_t * consumed) {
    const sdpa_status s = sdpa_kv_load_feed_unnamed(L, data, n, consumed);
    return L ? sdpa_named(L->ctx, s, __func__) : s;
}

sdpa_status sdpa_kv_load_feed_unnamed(sdpa_kv_loader * L, const void * data, size_t n, size_t * consumed) {
    if (consumed) *consumed = 0;
    if (!L) return SDPA_E_ARG;
    if (L->failed) return sdpa_fail(L->ctx, L->failed, "%s", L->message);
    if (n > 0 && !data) return load_fail(L, SDPA_E_ARG, "data is missing");
    const unsigned char * in = data;
    size_t used = 0, pay_from = 0, pay_len = 0;  /* the payload bytes of this call: one run of `in`, CRC'ed at once */
    while (used < n && L->phase != PHASE_DONE) {
        const size_t avail = n - used;
        if (L->phase == PHASE_START) {
            size_t k = 16 - L->have;
            if (k > avail) k = avail;
            memcpy(L->start + L->have, in + used, k);
            L->have += k;
            used += k;
            for (size_t j = 0; j < L->have && j < 8; j++)
                if (L->start[j] != MAGIC[j])
                    return load_fail(L, SDPA_E_FORMAT, "this is not saved KV state: byte %zu is 0x%02x, expected 0x%02x (the magic \"\\x89SDPAKV\\n\")",
                                     j, L->start[j], MAGIC[j]);
            if (L->have < 16) continue;
            const uint32_t version = get32(L->start + 8), hb = get32(L->start + 12);
            L->version = version;
            if (version < 1 || version > STATE_VERSION)
                return load_fail(L, SDPA_E_FORMAT, "format version %u %s; this build reads versions 1 to %u",
                                 (unsigned)version, version > STATE_VERSION ? "is newer than this build" : "is unknown", STATE_VERSION);
            if (hb < HEADER_MIN || hb > HEADER_MIN + (uint32_t)SDPA_STATE_MAX_META)
                return load_fail(L, SDPA_E_FORMAT, "the header is %u bytes; expected %u .. %u (96 fixed bytes, at most %d of meta, a CRC)",
                                 (unsigned)hb, HEADER_MIN, HEADER_MIN + (unsigned)SDPA_STATE_MAX_META, SDPA_STATE_MAX_META);
            L->head = malloc(hb);
            if (!L->head) return load_fail(L, SDPA_E_OOM, "cannot allocate the header (%u bytes)", (unsigned)hb);
            memcpy(L->head, L->start, 16);
            L->head_bytes = hb;
            L->phase = PHASE_HEADER;
        } else if (L->phase == PHASE_HEADER) {
            size_t k = L->head_bytes - L->have;
            if (k > avail) k = avail;
            memcpy(L->head + L->have, in + used, k);
            L->have += k;
            used += k;
            if (L->have < L->head_bytes) continue;
            L->have = 0;
            sdpa_status s = parse_header(L);
            if (s != SDPA_OK) { L->fed += used; return s; }
        } else if (L->phase == PHASE_PAYLOAD) {
            if (pay_len == 0) pay_from = used;
            const size_t pair = pair_at(&L->z, L->i);
            if (L->have > 0 || avail < pair) {               /* a pair split between pieces */
                size_t k = pair - L->have;
                if (k > avail) k = avail;
                memcpy(L->pend + L->have, in + used, k);
                L->have += k;
                used += k;
                pay_len += k;
                if (L->have < pair) continue;
                L->have = 0;
                sdpa_status s = load_run(L, L->pend, 1);
                if (s != SDPA_OK) { L->fed += used; return s; }
                continue;
            }
            int32_t k = run_at(&L->rows, L->i);
            if ((size_t)k > avail / pair) k = (int32_t)(avail / pair);
            sdpa_status s = load_run(L, in + used, k);
            used += (size_t)k * pair;
            pay_len += (size_t)k * pair;
            if (s != SDPA_OK) { L->fed += used; return s; }
        } else {                                             /* PHASE_TRAILER */
            if (pay_len) { L->crc = sdpa_crc32c_update(L->crc, in + pay_from, pay_len); pay_len = 0; }
            size_t k = 4 - L->have;
            if (k > avail) k = avail;
            memcpy(L->trailer + L->have, in + used, k);
            L->have += k;
            used += k;
            if (L->have < 4) continue;
            const uint32_t want = get32(L->trailer);
            if (want != L->crc) {
                L->fed += used;
                return load_fail(L, SDPA_E_FORMAT, "the payload's CRC-32C is 0x%08x but the data says 0x%08x; the data was changed or damaged",
                                 (unsigned)L->crc, (unsigned)want);
            }
            L->phase = PHASE_DONE;
        }
    }
    if (pay_len) L->crc = sdpa_crc32c_update(L->crc, in + pay_from, pay_len);
    L->fed += used;
    if (consumed) *consumed = used;
    sdpa_clear_error(L->ctx);
    return SDPA_OK;
}

int32_t sdpa_kv_load_done(const sdpa_kv_loader * L) { return L && !L->failed && L->phase == PHASE_DONE; }

/* the header was read whole and passed every rule */
static bool header_read(const sdpa_kv_loader * L) { return L && L->head && L->phase >= PHASE_PAYLOAD && L->pend; }

const void * sdpa_kv_load_meta(const sdpa_kv_loader * L) {
    return header_read(L) ? L->head + FIXED_BYTES : NULL;
}
double sdpa_kv_load_meta_bytes(const sdpa_kv_loader * L) {
    return header_read(L) ? (double)(L->head_bytes - HEADER_MIN) : 0;
}

sdpa_status sdpa_kv_load_finish(sdpa_kv_loader * L, sdpa_kv_cache ** out_cache) {
    const sdpa_status s = sdpa_kv_load_finish_unnamed(L, out_cache);
    return L ? sdpa_named(L->ctx, s, __func__) : s;
}

sdpa_status sdpa_kv_load_finish_unnamed(sdpa_kv_loader * L, sdpa_kv_cache ** out_cache) {
    if (!L) return SDPA_E_ARG;
    if (!out_cache) return sdpa_fail(L->ctx, SDPA_E_ARG, "out_cache is missing");
    *out_cache = NULL;
    if (L->failed) return sdpa_fail(L->ctx, L->failed, "%s", L->message);
    if (L->phase != PHASE_DONE) {
        static const char * const where[] = { "inside the first 16 bytes", "inside the header", "inside the rows", "inside the payload's CRC" };
        if (L->total)
            return load_fail(L, SDPA_E_FORMAT, "the data ends after %llu bytes, %s; the saved cache is %llu bytes",
                             (unsigned long long)L->fed, where[L->phase], (unsigned long long)L->total);
        return load_fail(L, SDPA_E_FORMAT, "the data ends after %llu bytes, %s; the header alone is %zu bytes",
                         (unsigned long long)L->fed, where[L->phase], L->head_bytes ? L->head_bytes : (size_t)HEADER_MIN);
    }
    *out_cache = L->cache;
    L->cache = NULL;
    sdpa_clear_error(L->ctx);
    return SDPA_OK;
}

void sdpa_kv_load_free(sdpa_kv_loader * L) {
    if (!L) return;
    sdpa_kv_cache_free(L->cache);
    free(L->head);
    free(L->pend);
    free(L);
}

static sdpa_status load_whole(sdpa_ctx * ctx, const void * data, size_t n, int32_t max_seq_len, sdpa_kv_cache ** out_cache) {
    if (!ctx) return SDPA_E_ARG;
    if (!out_cache) return sdpa_fail(ctx, SDPA_E_ARG, "out_cache is missing");
    *out_cache = NULL;
    sdpa_kv_loader * L = NULL;
    sdpa_status s = sdpa_kv_load_begin_unnamed(ctx, max_seq_len, &L);
    if (s != SDPA_OK) return s;
    size_t used = 0;
    s = sdpa_kv_load_feed_unnamed(L, data, n, &used);
    if (s == SDPA_OK && used < n)
        s = load_fail(L, SDPA_E_FORMAT, "%zu bytes follow the end of the saved cache (byte %zu); expected none", n - used, used);
    if (s == SDPA_OK) s = sdpa_kv_load_finish_unnamed(L, out_cache);
    sdpa_kv_load_free(L);
    return s;
}

sdpa_status sdpa_kv_cache_load(sdpa_ctx * ctx, const void * data, size_t n, int32_t max_seq_len, sdpa_kv_cache ** out_cache) {
    return sdpa_named(ctx, load_whole(ctx, data, n, max_seq_len, out_cache), __func__);
}

/* ------------------------------------------------------------------ group container */

/* A group's save (docs/FORMAT.md section 5): this header, then one save per
 * layer (each as above, parsed by its own loader). The group object is JS's
 * (js/kv-cache-group.js); its container is written and checked here, beside
 * the cache format, and js/kv-state.js streams it: it gathers the bytes
 * sdpa_kv_group_header_check asks for, then feeds each layer's save to a
 * loader. */
#define GROUP_VERSION 1u
#define GROUP_FIXED 24u
#define GROUP_MAX_LAYERS 65536u
static const unsigned char GROUP_MAGIC[8] = { 0x89, 'S', 'D', 'P', 'A', 'K', 'G', '\n' };

size_t sdpa_kv_group_header_write(uint32_t layers, const void * meta, size_t meta_bytes, void * out, size_t cap) {
    if (meta_bytes > (size_t)SDPA_STATE_MAX_META) return 0;
    const size_t n = GROUP_FIXED + meta_bytes + 4;
    if (!out || cap < n) return n;
    if (meta_bytes && !meta) return 0;
    unsigned char * h = out;
    memcpy(h, GROUP_MAGIC, sizeof GROUP_MAGIC);
    put32(h + 8, GROUP_VERSION);
    put32(h + 12, layers);
    put32(h + 16, (uint32_t)meta_bytes);
    put32(h + 20, 0);
    if (meta_bytes) memcpy(h + GROUP_FIXED, meta, meta_bytes);
    put32(h + GROUP_FIXED + meta_bytes, sdpa_crc32c_update(0, h, GROUP_FIXED + meta_bytes));
    return n;
}

sdpa_status sdpa_kv_group_header_check(sdpa_ctx * ctx, const void * head, size_t have, int32_t ended,
                                       uint32_t * need, uint32_t * layers, uint32_t * meta_at, uint32_t * meta_bytes) {
    return sdpa_named(ctx, sdpa_kv_group_header_check_unnamed(ctx, head, have, ended, need, layers, meta_at, meta_bytes),
                      __func__);
}

sdpa_status sdpa_kv_group_header_check_unnamed(sdpa_ctx * ctx, const void * head_, size_t have, int32_t ended,
                                               uint32_t * need, uint32_t * layers, uint32_t * meta_at,
                                               uint32_t * meta_bytes) {
    if (!ctx) return SDPA_E_ARG;
    if (!need || !layers || !meta_at || !meta_bytes || (have && !head_))
        return sdpa_fail(ctx, SDPA_E_ARG, "need, layers, meta_at or meta_bytes is missing, or head with have %zu", have);
    const unsigned char * p = head_;
    *need = GROUP_FIXED;
    *layers = *meta_at = *meta_bytes = 0;
    for (size_t i = 0; i < have && i < sizeof GROUP_MAGIC; i++)
        if (p[i] != GROUP_MAGIC[i])
            return sdpa_fail(ctx, SDPA_E_FORMAT, "this is not a saved KV cache group: byte %zu is 0x%02x, expected 0x%x (the magic \"\\x89SDPAKG\\n\")",
                             i, p[i], GROUP_MAGIC[i]);
    if (have >= GROUP_FIXED) {
        const uint32_t version = get32(p + 8), m = get32(p + 16);
        if (version != GROUP_VERSION)
            return sdpa_fail(ctx, SDPA_E_FORMAT, "group format version %u %s; this build reads version %u",
                             (unsigned)version, version > GROUP_VERSION ? "is newer than this build" : "is unknown", GROUP_VERSION);
        if (m > (uint32_t)SDPA_STATE_MAX_META)
            return sdpa_fail(ctx, SDPA_E_FORMAT, "the group header's meta is %u bytes; at most %d", (unsigned)m,
                             SDPA_STATE_MAX_META);
        *need = GROUP_FIXED + m + 4;
    }
    if (have < *need) {
        if (ended)
            return sdpa_fail(ctx, SDPA_E_FORMAT, "the data ends after %zu bytes, inside the group header (%s%u bytes)",
                             have, have < GROUP_FIXED ? "at least " : "", have < GROUP_FIXED ? GROUP_FIXED + 4 : (unsigned)*need);
        sdpa_clear_error(ctx);
        return SDPA_OK;
    }
    const size_t m = *need - GROUP_FIXED - 4;
    const uint32_t want = get32(p + GROUP_FIXED + m), got = sdpa_crc32c_update(0, p, GROUP_FIXED + m);
    if (got != want)
        return sdpa_fail(ctx, SDPA_E_FORMAT, "the group header's CRC-32C is 0x%08x but the data says 0x%08x; the header was changed or damaged",
                         (unsigned)got, (unsigned)want);
    const uint32_t n = get32(p + 12);
    if (n < 1 || n > GROUP_MAX_LAYERS)
        return sdpa_fail(ctx, SDPA_E_FORMAT, "the group header says %u layers; expected 1 .. %u", (unsigned)n, GROUP_MAX_LAYERS);
    if (get32(p + 20) != 0) return sdpa_fail(ctx, SDPA_E_FORMAT, "the group header's reserved field (byte 20) is not 0");
    *layers = n;
    *meta_at = GROUP_FIXED;
    *meta_bytes = (uint32_t)m;
    sdpa_clear_error(ctx);
    return SDPA_OK;
}
