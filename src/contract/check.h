/* check.h: the rules of CONTRACT.md section 2 for every C entry point.
 * Each function checks all rules in the table's order, so the first broken
 * rule is the one reported; on success it fills the validated problem. None
 * writes anything but the context's error message: the rule's words, naming
 * no call (the entry names itself: internal.h, sdpa_named). */
#ifndef SDPA_CHECK_H
#define SDPA_CHECK_H

#include "internal.h"

/* customSdpa(query, key, value, mask, options) -> out. */
sdpa_status sdpa_check_custom(sdpa_ctx * ctx, const sdpa_tensor * query,
                              const sdpa_tensor * key, const sdpa_tensor * value,
                              const sdpa_tensor * mask, const sdpa_options * options,
                              const sdpa_tensor * out, sdpa_problem * problem);

/* attend over a cache: query, mask, options -> out (Skv = maxSeqLen); with
 * options->rotary also its rules (problem->rope: the q rows' rotation).
 * check_room = false skips `startPos + Sq <= maxSeqLen` (a step checks it as
 * the update's E_CAPACITY instead). */
sdpa_status sdpa_check_cache_attend(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                    const sdpa_tensor * query, const sdpa_tensor * mask,
                                    const sdpa_options * options, const sdpa_tensor * out,
                                    bool check_room, sdpa_problem * problem);

/* sdpa_with_kv_cache: every rule of update and attend plus the step's own
 * (query and key lengths equal, out apart from the new key/value); the lowest
 * status wins. `startPos + Sq <= maxSeqLen` is the update's E_CAPACITY. */
sdpa_status sdpa_check_cache_step(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                  const sdpa_tensor * query, const sdpa_tensor * key,
                                  const sdpa_tensor * value, const sdpa_tensor * mask,
                                  const sdpa_options * options, const sdpa_tensor * out,
                                  sdpa_problem * problem);

/* update_cache: key, value [B, Snew, Hkv, D] at start_pos, with rotary embeddings: update's rules, then rotary's
 * for the key's rows (the lowest status wins); *rope: the K rows' rotation
 * (half 0 when rotary is NULL). */
sdpa_status sdpa_check_cache_update_rotary(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                           const sdpa_tensor * key, const sdpa_tensor * value,
                                           int64_t start_pos, const sdpa_rotary * rotary, sdpa_rope * rope);

/* read rows start .. start+length-1 into key_out, value_out. */
sdpa_status sdpa_check_cache_read(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                  int64_t start, int64_t length, const sdpa_tensor * key_out,
                                  const sdpa_tensor * value_out);

/* truncate to `length` rows: 0 <= length <= cache->length. */
sdpa_status sdpa_check_cache_truncate(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int64_t length);

/* keep_rows: rows start + rows[k] -> start + k, then truncate to start + n. */
sdpa_status sdpa_check_cache_keep_rows(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                       int64_t start, const int32_t * rows, int32_t n);

/* keep_rows' rules that need the cache, after the list's own (start >= 0,
 * offsets increasing): n rows, the last offset `last` (unused when n = 0). */
sdpa_status sdpa_check_cache_keep_span(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                       int64_t start, int32_t n, int64_t last);

/* read's rows start .. start+length-1 (length >= 1; E_START_POS, E_CAPACITY). */
sdpa_status sdpa_check_cache_rows(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                  int64_t start, int64_t length);

/* attend_many: every item as sdpa_check_cache_attend (its words after
 * "items[i]: "), then the rules between items; problems: n. */
sdpa_status sdpa_check_attend_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n,
                                   sdpa_problem * problems);

/* step_many: every item as sdpa_check_cache_step ("items[i]: " first), then the rules between items. */
sdpa_status sdpa_check_step_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n,
                                 sdpa_problem * problems);

/* fork: a cache of this context and a place for the new one. */
sdpa_status sdpa_check_cache_fork(sdpa_ctx * ctx, const sdpa_kv_cache * cache, const void * out_cache);

/* read_records: rows start .. start+length-1 of K or V as row records
 * (cache/kv_format.h) into out (exactly out_bytes). */
sdpa_status sdpa_check_cache_read_records(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                          int64_t start, int64_t length, int32_t which, const void * out,
                                          uint64_t out_bytes);

/* cache geometry at creation (window 0: a plain cache, sink_tokens 0). The
 * counts are int64 so that sdpa_wasm_kv_cache_plan can hand on any integer a JS
 * number holds (C's own callers pass int32: the int32 bounds never fail for
 * them). */
sdpa_status sdpa_check_cache_create(sdpa_ctx * ctx, int64_t batch,
                                    int64_t max_seq_len, int64_t kv_heads, int64_t head_dim,
                                    int32_t key_dtype, int32_t value_dtype, int64_t window, int64_t sink_tokens,
                                    const void * out_cache);

/* save's rows start .. start+length-1 (sdpa_kv_save_begin): the values'
 * own rules, then rows written only, and a windowed cache's save ends at or
 * before its sink rows or at or past window_start. cache NULL: a cache that
 * is gone, whose rows are unknown: the values' own rules only. int64: what
 * sdpa_wasm_kv_save_begin hands on from a JS number. */
sdpa_status sdpa_check_cache_save_rows(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                       int64_t start, int64_t length);

/* kvCacheSize's rows: 0 .. max_seq_len (a geometry already checked). */
sdpa_status sdpa_check_cache_plan_rows(sdpa_ctx * ctx, int32_t max_seq_len, int64_t rows);


#endif
