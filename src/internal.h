/* internal.h: what the rooms of src/ share. Data flows one way:
 *   sdpa.c / cache/kv_cache.c (entry points)
 *     -> contract/check.c   (every rule, before anything is written)
 *     -> sdpa_problem        (validated geometry, strides, pointers)
 *     -> kernels/reference.c or kernels/flash.c (run on threadpool/)
 */
#ifndef SDPA_INTERNAL_H
#define SDPA_INTERNAL_H

#include "sdpa.h"
#include "threadpool/threadpool.h"
#include "cache/kv_format.h"
#include "cache/page_pool.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#define SDPA_ERROR_CAP 512

/* Byte counts computed from user dims are uint64_t and saturate at
 * UINT64_MAX instead of wrapping (on wasm32 a size_t product of two dims
 * wraps at 4 GiB). A count above SIZE_MAX does not fit this build's address
 * space: callers turn it into E_OOM before anything is allocated or written. */
static inline uint64_t sdpa_size_mul(uint64_t a, uint64_t b) {
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}
static inline uint64_t sdpa_size_add(uint64_t a, uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The kernels index rows, keys and head-dim elements in int32 and step past
 * a bound by less than this margin (SIMD strides, key tiles, chunk
 * rounding), so contract/ keeps every such extent <= SDPA_INDEX_LIMIT. Only
 * a native caller with > 8 GiB tensors can reach it: on wasm32 a 4 GiB
 * address space keeps every extent below 2^30. */
#define SDPA_INDEX_LIMIT (INT32_MAX - 65536)

struct sdpa_ctx {
    sdpa_pool * pool;
    int32_t     n_threads;
    int32_t     use_reference;
    double      parallel_min_macs;  /* calls with less work run on the calling thread */
    double      dense_min_macs;     /* dense calls (dense/dense.c) with less work likewise */
    void *      scratch;        /* owned; kernels align inside it */
    size_t      scratch_bytes;
    struct sdpa_page_pool * pages;  /* every page of every cache of this context */
    int32_t     alloc_fault;    /* tests only (sdpa_ctx_fail_cache_alloc): the n-th cache table allocation from now fails */
    char        last_error[SDPA_ERROR_CAP];
};

/* True when this cache table allocation is to fail as a NULL malloc would
 * (a create's or a fork's): how the tests reach the E_OOM of a group's
 * later layer, all or nothing, where a real heap would need gigabytes. */
static inline bool sdpa_alloc_fault(sdpa_ctx * ctx) { return ctx->alloc_fault > 0 && --ctx->alloc_fault == 0; }

/* The table slot of logical page `page` (rows page * SDPA_PAGE_ROWS ..):
 * itself in a plain cache (ring_pages = 0) and for a windowed cache's sink
 * pages; the pages after those take turns in a ring of ring_pages slots. */
static inline int32_t sdpa_page_slot(int32_t page, int32_t sink_pages, int32_t ring_pages) {
    return ring_pages && page >= sink_pages ? sink_pages + (page - sink_pages) % ring_pages : page;
}

/* A paged KV cache (cache/kv_cache.c). Row t of batch row b and KV head h
 * lives in page table[b * Hkv + h][slot(t / SDPA_PAGE_ROWS)], at row
 * t % SDPA_PAGE_ROWS, stored as `format` says (cache/kv_format.h: K block,
 * V block, int8 scales and zero points). Unwritten pages are the pool's zero
 * page (all bytes 0: every format decodes it to 0.0). A windowed cache
 * (window > 0) keeps the rows t < sink_tokens in its sink pages and the
 * rows window_start .. length-1 in a ring (sdpa_page_slot); the rows in
 * between were evicted. */
struct sdpa_kv_cache {
    sdpa_ctx * ctx;             /* owns the pages; outlives the cache */
    int32_t batch, max_seq_len, kv_heads, head_dim;
    int32_t length;             /* rows written: the highest written row + 1 */
    int32_t pages_per_head;     /* table slots per head: ceil(max_seq_len / ROWS), or sink + ring pages */
    int32_t window;             /* 0: a plain cache */
    int32_t sink_tokens;
    int32_t sink_pages;         /* ceil(sink_tokens / ROWS) */
    int32_t ring_pages;         /* 0: no ring (plain, or the ring would cover maxSeqLen) */
    int32_t window_start;       /* rows sink_tokens .. window_start-1 were evicted */
    sdpa_page_format format;
    /* float16_newest_page (sdpa.h): the page being filled is a "float16 page"
     * (marked SDPA_PAGE_MARK_FLOAT16, in this format: each int8 / int4
     * block as float16, float blocks as they are; its page_bytes at least
     * format's), encoded into a page of `format` when it fills (kv_cache.c
     * put_rows). Only the last written page can be one. */
    bool float16_newest_page;
    sdpa_page_format f16_format;
    void ** table;              /* [B * Hkv][pages_per_head] */
};

/* Key/value source of an attention call: either caller tensors in
 * [B, Skv, Hkv, D] (pages == NULL; strides in floats), or a paged cache
 * (pages != NULL). D is always contiguous. Kernels find rows through
 * sdpa_kv_key / sdpa_kv_value, and the rows of one key tile through the
 * same calls at the tile's first key: a tile never spans two pages. */
typedef struct sdpa_kv_view {
    const float * k;
    const float * v;
    int32_t batch, len, heads, dim;
    size_t stride_b, stride_t, stride_h;
    void * const * pages;              /* the cache's table, or NULL */
    int32_t pages_per_head;
    int32_t sink_pages, ring_pages;    /* a windowed cache's slot map (sdpa_page_slot) */
    const sdpa_page_format * format;   /* the cache's page format, or NULL */
    const sdpa_page_format * f16_format;  /* a float16 page's (SDPA_PAGE_MARK_FLOAT16), or NULL */
} sdpa_kv_view;

/* The format of one page of a cache view: a float16 page's or the cache's. */
static inline const sdpa_page_format * sdpa_kv_page_format(const sdpa_kv_view * kv, const void * page) {
    return kv->f16_format && (sdpa_page_marks(page) & SDPA_PAGE_MARK_FLOAT16) ? kv->f16_format : kv->format;
}

/* Floats between consecutive float32 key (or value) rows. */
static inline size_t sdpa_kv_row_stride(const sdpa_kv_view * kv) {
    return kv->pages ? (size_t)kv->dim : kv->stride_t;
}

static inline const void * sdpa_kv_page(const sdpa_kv_view * kv, int32_t b, int32_t hk, int32_t t) {
    return kv->pages[((size_t)b * kv->heads + hk) * kv->pages_per_head +
                     sdpa_page_slot(t / SDPA_PAGE_ROWS, kv->sink_pages, kv->ring_pages)];
}

/* Row t of a float32 view (caller tensors, or a float32 cache) stored as a
 * plain row: any row of caller tensors, a V row of a cache page (a float32
 * page's K block is key-transposed, cache/kv_format.h: the kernels read its
 * tiles in place, sdpa_kv_elem its elements). */
static inline const float * sdpa_kv_row(const sdpa_kv_view * kv, int32_t b, int32_t hk, int32_t t, bool value) {
    if (kv->pages) {
        const void * page = sdpa_kv_page(kv, b, hk, t);
        return (const float *)sdpa_kv_raw_row(sdpa_kv_page_format(kv, page), page, t % SDPA_PAGE_ROWS, value);
    }
    return (value ? kv->v : kv->k) + (size_t)b * kv->stride_b + (size_t)t * kv->stride_t + (size_t)hk * kv->stride_h;
}
static inline const float * sdpa_kv_key(const sdpa_kv_view * kv, int32_t b, int32_t hk, int32_t t) {
    return sdpa_kv_row(kv, b, hk, t, false);
}
static inline const float * sdpa_kv_value(const sdpa_kv_view * kv, int32_t b, int32_t hk, int32_t t) {
    return sdpa_kv_row(kv, b, hk, t, true);
}

/* Element d of row t, decoded to the float32 every reader sees (any format). */
static inline float sdpa_kv_elem(const sdpa_kv_view * kv, int32_t b, int32_t hk, int32_t t, bool value, int32_t d) {
    if (!kv->pages) return sdpa_kv_row(kv, b, hk, t, value)[d];
    const void * page = sdpa_kv_page(kv, b, hk, t);
    return sdpa_kv_decode(sdpa_kv_page_format(kv, page), page, t % SDPA_PAGE_ROWS, value, d);
}

/* A validated attention problem: everything a kernel needs, nothing to check. */
/* Rotary embeddings of a validated call (include/sdpa.h's
 * sdpa_rotary): row i of the call at position pos ? pos[i] : start + i. */
typedef struct sdpa_rope {
    const float * cos, * sin;  /* [max_position][half] */
    int32_t half;              /* rotaryDim / 2; 0: no rotation */
    int32_t interleaved;       /* pairs (2j, 2j+1), else (j, j + half) */
    const int32_t * pos;       /* NULL: row i at start_pos + i */
} sdpa_rope;

/* y = x [D] rotated at `position` (kernels/rotary.c); y != x. */
void sdpa_rope_row(const sdpa_rope * r, int64_t position, const float * x, float * y, int32_t D);

typedef struct sdpa_problem {
    int32_t batch, q_len, q_heads, kv_heads, head_dim, group;  /* group = r */
    int32_t n_keys;        /* N: keys t < N exist */
    int64_t start_pos;     /* causal anchor: row i sees t <= start_pos + i */
    int32_t is_causal;
    int32_t window;        /* 0: none; else row i sees t > start_pos + i - window... */
    int32_t sink_tokens;   /* ...or t < sink_tokens (a windowed cache's sink rows) */
    float   softcap;       /* 0: none; else score = softcap * tanh(score / softcap) */
    const float * sinks;   /* NULL, or [Hq] sink logits */
    float   scale;
    const float * q;       /* [B, Sq, Hq, D]: dense but for the batch stride */
    float *       out;     /* [B, Sq, Hq, D]: likewise */
    size_t        q_stride_b;  /* floats between batch rows of q and of out (Sq * Hq * D, or
                                * more for a windowed step's page-sized pieces of a longer q) */
    sdpa_kv_view  kv;
    const void *  mask;    /* NULL, or [Sq, n_keys_mask] with row stride mask_stride */
    int32_t       mask_dtype;
    int32_t       mask_stride;
    /* a tree mask: NULL, or bool rows tree_stride bytes apart, row
     * i of this problem at tree + i * tree_stride; key t >= tree_pos (and
     * t <= start_pos + i: causal) is visible iff its entry t - tree_pos is
     * non-zero. (A windowed step's pieces keep the whole step's tree_pos.) */
    const uint8_t * tree;
    int32_t       tree_stride;
    int64_t       tree_pos;
    sdpa_rope     rope;    /* q row i rotated at rope.pos[i] or start_pos + i (half 0: none) */
} sdpa_problem;

/* Records a failure on the context: the rule's words alone, in contract
 * terms, naming no call (a rule or an internal function knows no caller).
 * Returns `status` for tail calls. */
sdpa_status sdpa_fail(sdpa_ctx * ctx, sdpa_status status, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void sdpa_clear_error(sdpa_ctx * ctx);

/* When `status` is a failure, puts "name: " before the context's message
 * (cut to SDPA_ERROR_CAP, never past it); returns `status`. Each public
 * entry of include/ names itself once, at its return:
 * `return sdpa_named(ctx, body(...), __func__);`; a part of a call names
 * where a failure is (check.c: "items[3]"). */
sdpa_status sdpa_named(sdpa_ctx * ctx, sdpa_status status, const char * name);

/* Ensures the context's scratch holds `bytes` (grows, never shrinks); E_OOM
 * when it cannot (bytes > SIZE_MAX included). */
sdpa_status sdpa_scratch_reserve(sdpa_ctx * ctx, uint64_t bytes);

/* Grows the scratch to what a validated problem needs (E_OOM). Entry points
 * call it before writing anything, so a failure leaves every buffer as it was. */
sdpa_status sdpa_reserve_problem(sdpa_ctx * ctx, const sdpa_problem * p);

/* Runs a reserved problem: the scalar reference when `reference` or the
 * context's switch says so, else the flash kernel (on the calling thread
 * alone when its work is below ctx->parallel_min_macs). Clears the last
 * error. */
void sdpa_run_problem(sdpa_ctx * ctx, const sdpa_problem * p, bool reference);

/* attendMany / stepMany: n problems: the scratch for all of them at once (E_OOM), and
 * their run on one pool dispatch (each problem's bits as on its own; the
 * reference switch runs them one by one). */
sdpa_status sdpa_reserve_problems(sdpa_ctx * ctx, const sdpa_problem * ps, int32_t n);
void sdpa_run_problems(sdpa_ctx * ctx, const sdpa_problem * ps, int32_t n);

/* The public entries of include/sdpa.h that other entries call (the wasm
 * entries of src/wasm/api.c, a load's cache, a save's fork), as bodies: the
 * same arguments, and a failure's message is the rule's words alone; the
 * public entry of the same name without `_unnamed` is
 * sdpa_named(ctx, body, its name). Defined in sdpa.c, cache/kv_cache.c,
 * cache/kv_many.c, cache/kv_group.c, cache/kv_state.c, dense/dense.c. */
sdpa_status sdpa_custom_unnamed(sdpa_ctx * ctx, const sdpa_tensor * query, const sdpa_tensor * key,
                                const sdpa_tensor * value, const sdpa_tensor * mask, const sdpa_options * options,
                                sdpa_tensor * out);
sdpa_status sdpa_ctx_reserve_pages_unnamed(sdpa_ctx * ctx, double bytes);
/* (create: `make` false runs the checks alone, the rules then the page and
 * table sizes' E_OOM, and makes nothing: a group's check of every layer) */
sdpa_status sdpa_kv_cache_create_desc_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache_desc * desc, bool make,
                                              sdpa_kv_cache ** out_cache);
sdpa_status sdpa_kv_cache_plan_desc_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache_desc * desc, int32_t rows,
                                            sdpa_kv_cache_size * out);
sdpa_status sdpa_kv_cache_fork_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache * cache, sdpa_kv_cache ** out_cache);
sdpa_status sdpa_kv_cache_truncate_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, int32_t length);
sdpa_status sdpa_kv_cache_read_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start, int32_t length,
                                       sdpa_tensor * key_out, sdpa_tensor * value_out);
sdpa_status sdpa_kv_cache_read_records_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start,
                                               int32_t length, int32_t which, void * out, size_t out_bytes);
sdpa_status sdpa_kv_cache_keep_rows_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, int32_t start, const int32_t * rows,
                                            int32_t n);
sdpa_status sdpa_kv_cache_update_rotary_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * key,
                                                const sdpa_tensor * value, int32_t start_pos, const sdpa_rotary * rotary);
sdpa_status sdpa_kv_cache_attend_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                         const sdpa_tensor * mask, const sdpa_options * options, sdpa_tensor * out);
sdpa_status sdpa_kv_cache_step_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                       const sdpa_tensor * key, const sdpa_tensor * value, const sdpa_tensor * mask,
                                       const sdpa_options * options, sdpa_tensor * out);
sdpa_status sdpa_kv_cache_attend_many_unnamed(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n);
sdpa_status sdpa_kv_cache_step_many_unnamed(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n);
/* (cache/kv_group.c; truncate's length an int64: the wasm entry's JS number, checked per layer) */
sdpa_status sdpa_kv_group_create_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache_desc * descs, int32_t n, sdpa_kv_cache ** out);
sdpa_status sdpa_kv_group_fork_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, sdpa_kv_cache ** out);
sdpa_status sdpa_kv_group_truncate_unnamed(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, int64_t length);
sdpa_status sdpa_kv_save_begin_unnamed(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start, int32_t length,
                                       const void * meta, size_t meta_bytes, sdpa_kv_saver ** out_saver);
sdpa_status sdpa_kv_load_begin_unnamed(sdpa_ctx * ctx, int32_t max_seq_len, sdpa_kv_loader ** out_loader);
sdpa_status sdpa_kv_load_feed_unnamed(sdpa_kv_loader * loader, const void * data, size_t n, size_t * consumed);
sdpa_status sdpa_kv_load_finish_unnamed(sdpa_kv_loader * loader, sdpa_kv_cache ** out_cache);
sdpa_status sdpa_kv_group_header_check_unnamed(sdpa_ctx * ctx, const void * head, size_t have, int32_t ended,
                                               uint32_t * need, uint32_t * layers, uint32_t * meta_at,
                                               uint32_t * meta_bytes);
/* include/sdpa_dense.h's (dense/dense.c) */
sdpa_status sdpa_linear_unnamed(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, sdpa_tensor * out,
                                int32_t flags);
sdpa_status sdpa_rms_norm_unnamed(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, float eps,
                                  sdpa_tensor * out);
sdpa_status sdpa_swiglu_unnamed(sdpa_ctx * ctx, const sdpa_tensor * gate, const sdpa_tensor * up, sdpa_tensor * out);
sdpa_status sdpa_embed_unnamed(sdpa_ctx * ctx, const sdpa_tensor * table, const int32_t * ids, int32_t n_ids,
                               sdpa_tensor * out);
sdpa_status sdpa_quantize_unnamed(sdpa_ctx * ctx, const sdpa_tensor * source, sdpa_tensor * out);

/* The encoded and float16 pages truncate(length) takes (a shared last page's copies). */
void sdpa_kv_cache_truncate_pages(const sdpa_kv_cache * cache, int32_t length, uint64_t * enc, uint64_t * f16);

/* A group's failures (cache/kv_group.c, wasm/api.c): every layer is checked;
 * the lowest status wins (the contract's table order), ties to the lowest
 * layer; its words are kept while the other layers are checked. */
typedef struct sdpa_layer_failure {
    sdpa_status status;
    int32_t layer;
    char words[SDPA_ERROR_CAP];
} sdpa_layer_failure;
/* Notes layer `layer`'s status (its words: the context's message). */
void sdpa_layer_failure_note(sdpa_layer_failure * f, const sdpa_ctx * ctx, sdpa_status status, int32_t layer);
/* The kept failure as the context's message: the layer as `layer_fmt` puts
 * it ("layer %d"), ": ", the words (sdpa_named). */
sdpa_status sdpa_layer_failure_report(sdpa_ctx * ctx, const char * layer_fmt, const sdpa_layer_failure * f);

#endif
