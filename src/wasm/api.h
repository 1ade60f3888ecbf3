/* api.h: the wasm-only entries, the ones only the JS package calls (exported
 * to wasm beside include/sdpa.h's; C callers use sdpa.h). Each is a real
 * entry: it checks every rule of its call once, in C, and on a failure
 * returns the status with the context's message holding the rule's words
 * alone (contract terms, naming no function: the JS wrapper puts its call's
 * name first, once; a public entry of sdpa.h its own C name). Their inputs are JS numbers (doubles): a count past
 * int32 is its rule's failure, not a wrapped value. */
#ifndef SDPA_WASM_API_H
#define SDPA_WASM_API_H

#include "sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A cache geometry's rules (createKVCache's options: counts as integers in
 * doubles, key_dtype / value_dtype sdpa_dtype numbers, float16_newest_page
 * 0 or 1) and, with `plan` non-zero, kvCacheSize's `rows` (0 .. max_seq_len);
 * then sdpa_kv_cache_plan_desc's sizes into `out` (rows: `rows` with plan,
 * else 0). E_ARG (a count not an integer JS can hold exactly, sinkTokens
 * without a window), E_DIMS, E_DTYPE, E_HEADS, E_CAPACITY: the first in the
 * table's order (CONTRACT.md section 2). */
sdpa_status sdpa_wasm_kv_cache_plan(sdpa_ctx * ctx, double batch, double max_seq_len, double kv_heads, double head_dim,
                                    int32_t key_dtype, int32_t value_dtype, double window, double sink_tokens,
                                    int32_t float16_newest_page, int32_t plan, double rows, sdpa_kv_cache_size * out);

#define SDPA_WASM_GEOMETRY_FIELDS 9

/* createKVCache: `geometry` is SDPA_WASM_GEOMETRY_FIELDS numbers
 * (sdpa_wasm_kv_group_create's layer, below): its rules (plan's), its page
 * and page table against one wasm allocation (E_OOM), then
 * sdpa_kv_cache_create_desc (E_OOM: the page table or the first pages cannot
 * be had), in words naming no call. */
sdpa_status sdpa_wasm_kv_cache_create(sdpa_ctx * ctx, const double * geometry, sdpa_kv_cache ** out_cache);

/* KVCache.fork (a group: each layer): sdpa_kv_cache_fork, its words naming no call. */
sdpa_status sdpa_wasm_kv_cache_fork(sdpa_ctx * ctx, const sdpa_kv_cache * cache, sdpa_kv_cache ** out_cache);

/* KVCache.truncate(length): truncate's rules (length 0 .. cache.length, a
 * windowed cache's evicted rows), then, with `apply`, sdpa_kv_cache_truncate
 * (apply 0: the rules alone). */
sdpa_status sdpa_wasm_kv_cache_truncate(sdpa_ctx * ctx, sdpa_kv_cache * cache, double length, int32_t apply);

/* createKVCacheGroup: `geos` holds n layers' geometries, each
 * SDPA_WASM_GEOMETRY_FIELDS numbers in sdpa_wasm_kv_cache_plan's order
 * (batch, max_seq_len, kv_heads, head_dim, key_dtype, value_dtype, window,
 * sink_tokens, float16_newest_page). Every layer's rules (plan's), then its
 * page and page table against one wasm allocation (E_OOM), ranked over the
 * layers ("layers[3]: ..."); then sdpa_kv_group_create into out[0 .. n-1]
 * (E_OOM while making them: "layer 3: ...", the layers made freed, out all
 * NULL). */
sdpa_status sdpa_wasm_kv_group_create(sdpa_ctx * ctx, const double * geos, int32_t n, sdpa_kv_cache ** out);

/* KVCacheGroup.fork and .truncate(length): sdpa_kv_group_fork / _truncate
 * over the layers' caches, their words naming the layer ("layer 3: ...")
 * and no call. */
sdpa_status sdpa_wasm_kv_group_fork(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, sdpa_kv_cache ** out);
sdpa_status sdpa_wasm_kv_group_truncate(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, double length);

/* Tests only: the n-th cache table allocation from now (a create's or a
 * fork's, in any call) fails as a NULL malloc would; 0 turns it off. How
 * tests reach a group's E_OOM at a later layer (all or nothing) without
 * gigabytes of heap. */
void sdpa_ctx_fail_cache_alloc(sdpa_ctx * ctx, int32_t n);

/* KVCache.read / readRaw(start, n): the rows' rules (rows written, maxSeqLen,
 * a windowed cache's evicted rows), then a block C allocates into *out (the
 * caller frees it with free): raw 0: float32 keys then values, [B, n, Hkv, D]
 * each (sdpa_kv_cache_read); raw 1: the key records then the value records
 * (sdpa_kv_cache_read_records, sdpa_kv_cache_record_bytes each per row). */
sdpa_status sdpa_wasm_kv_cache_read(sdpa_ctx * ctx, const sdpa_kv_cache * cache, double start, double n, int32_t raw,
                                    void ** out);

/* KVCache.keepRows(start, rows[0 .. n-1]): keep_rows' rules (start, the
 * list's order, the rows written, a windowed cache's), then sdpa_kv_cache_keep_rows. */
sdpa_status sdpa_wasm_kv_cache_keep_rows(sdpa_ctx * ctx, sdpa_kv_cache * cache, double start, const int32_t * rows,
                                         int32_t n);

/* KVCache.save's rows start .. start+length-1 (save's rules: the rows
 * written, a windowed cache's), then sdpa_kv_save_begin. */
sdpa_status sdpa_wasm_kv_save_begin(sdpa_ctx * ctx, const sdpa_kv_cache * cache, double start, double length,
                                    const void * meta, size_t meta_bytes, sdpa_kv_saver ** out_saver);

/* sdpa.loadKVCache / loadKVCacheGroup's layers: sdpa_kv_load_begin, _feed
 * and _finish (the loader of a context `ctx`, the instance's), their words
 * naming no call (a group's layer is named by its caller). */
sdpa_status sdpa_wasm_kv_load_begin(sdpa_ctx * ctx, int32_t max_seq_len, sdpa_kv_loader ** out_loader);
sdpa_status sdpa_wasm_kv_load_feed(sdpa_ctx * ctx, sdpa_kv_loader * loader, const void * data, size_t n, size_t * consumed);
sdpa_status sdpa_wasm_kv_load_finish(sdpa_ctx * ctx, sdpa_kv_loader * loader, sdpa_kv_cache ** out_cache);

/* sdpa.loadKVCacheGroup's container header: sdpa_kv_group_header_check, its
 * words naming no call. */
sdpa_status sdpa_wasm_kv_group_header_check(sdpa_ctx * ctx, const void * head, size_t have, int32_t ended, uint32_t * need,
                                            uint32_t * layers, uint32_t * meta_at, uint32_t * meta_bytes);

/* sdpa.reserve: sdpa_ctx_reserve_pages, its words naming no call. */
sdpa_status sdpa_wasm_ctx_reserve_pages(sdpa_ctx * ctx, double bytes);

/* Non-zero when the `bytes` bytes at p overlap the page pool's memory (any
 * cache's storage): the snapshot rule's view of wasm memory (js/snapshot.js
 * checkLive's messages). A double, so that JS passes any span. */
int32_t sdpa_ctx_owns_pages(const sdpa_ctx * ctx, const void * p, double bytes);

/* The attention calls (customSdpa; KVCache.update, attend, step;
 * attendMany, stepMany): the public entries of include/sdpa.h, every rule
 * checked once as theirs are, in the table's order, before anything is
 * written; a failure's message is the rule's words alone. update's start_pos
 * is a JS number (a double): a value past int32 is its rule's failure, not a
 * wrapped row. */
sdpa_status sdpa_wasm_custom(sdpa_ctx * ctx, const sdpa_tensor * query, const sdpa_tensor * key, const sdpa_tensor * value,
                             const sdpa_tensor * mask, const sdpa_options * options, sdpa_tensor * out);
sdpa_status sdpa_wasm_kv_cache_update(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * key,
                                      const sdpa_tensor * value, double start_pos, const sdpa_rotary * rotary);
sdpa_status sdpa_wasm_kv_cache_attend(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                      const sdpa_tensor * mask, const sdpa_options * options, sdpa_tensor * out);
sdpa_status sdpa_wasm_kv_cache_step(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                    const sdpa_tensor * key, const sdpa_tensor * value, const sdpa_tensor * mask,
                                    const sdpa_options * options, sdpa_tensor * out);
sdpa_status sdpa_wasm_kv_cache_attend_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n);
sdpa_status sdpa_wasm_kv_cache_step_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n);

/* The dense calls (sdpa.linear, rmsNorm, swiglu, embed, quantize): the
 * public entries of include/sdpa_dense.h, every rule checked once as theirs
 * are; a failure's message is the rule's words alone. */
sdpa_status sdpa_wasm_linear(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, sdpa_tensor * out,
                             int32_t flags);
sdpa_status sdpa_wasm_rms_norm(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, float eps,
                               sdpa_tensor * out);
sdpa_status sdpa_wasm_swiglu(sdpa_ctx * ctx, const sdpa_tensor * gate, const sdpa_tensor * up, sdpa_tensor * out);
sdpa_status sdpa_wasm_embed(sdpa_ctx * ctx, const sdpa_tensor * table, const int32_t * ids, int32_t n_ids,
                            sdpa_tensor * out);
sdpa_status sdpa_wasm_quantize(sdpa_ctx * ctx, const sdpa_tensor * source, sdpa_tensor * out);

#ifdef __cplusplus
}
#endif
#endif /* SDPA_WASM_API_H */
