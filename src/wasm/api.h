/* api.h: the wasm-only entries, the ones only the JS package calls (exported
 * to wasm beside include/sdpa.h's; C callers use sdpa.h). Each is a real
 * entry: it checks every rule of its call once, in C, and on a failure
 * returns the status with the context's message holding the rule's words
 * alone (contract terms, naming no JS function: the JS wrapper puts its
 * call's name first). Their inputs are JS numbers (doubles): a count past
 * int32 is its rule's failure, not a wrapped value. */
#ifndef SDPA_WASM_API_H
#define SDPA_WASM_API_H

#include "sdpa.h"
#include "contract/check.h"  /* sdpa_check_described's SDPA_CHECK_* ops and SDPA_DESCRIBED_* bits */

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

/* KVCache.truncate(length): truncate's rules (length 0 .. cache.length, a
 * windowed cache's evicted rows), then, with `apply`, sdpa_kv_cache_truncate
 * (apply 0: the rules alone, so that a group checks every layer first). */
sdpa_status sdpa_wasm_kv_cache_truncate(sdpa_ctx * ctx, sdpa_kv_cache * cache, double length, int32_t apply);

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

/* ---- descriptor-only checks (what the JS package asks of the attention
 * calls before it copies their tensors; defined in src/contract/check.c) ---- */

/// The rules of a call on tensors described, not given: what a caller that
/// has not yet placed its arguments in this memory (the JS package, which
/// asks before it copies or allocates anything) asks. The tensors are
/// sdpa_tensors as the real call takes them but with data unused (NULL is
/// fine); a NULL tensor (query, key, value, mask, out, options->sinks,
/// ->tree_mask, ->rotary's tables) is one not given. The rules are the real
/// entry's own, in its order, on a cache described by `cache` (its geometry),
/// `length` (rows written) and `window_start`. op:
///   SDPA_CHECK_CUSTOM  sdpa_custom's (cache, length, window_start unused)
///   SDPA_CHECK_UPDATE  sdpa_kv_cache_update_rotary's (key, value,
///                      options->start_pos, options->rotary)
///   SDPA_CHECK_ATTEND  sdpa_kv_cache_attend's
///   SDPA_CHECK_STEP    sdpa_kv_cache_step's
/// What a described tensor cannot say comes in bit sets of SDPA_DESCRIBED_*:
///   judged    a tensor's dims rule the caller decided (failed) in words of its
///             own (a dim that is not an int32 integer, more dims than
///             sdpa_tensor holds; also _INTERLEAVED: rotary.interleaved's
///             type, _POSITIONS: rotary.positions' entries, caller data): it
///             fails with its name ("query", "rotary.positions", ...) as the
///             whole message, in its place in the order, for the caller to put
///             its words there
///   unknown   a tensor whose element count the caller could not read (its
///             data failed a rule of the caller's): len == product(dims) is not
///             asked; _LENGTH: the cache's rows written are unknown (a cache
///             that is gone); _START: options->start_pos is invalid (the
///             caller's failure) or unknown (an append to a cache that is
///             gone): the rules on it are not asked
///   overlaps  the tensors out overlaps, as the caller sees memory: a
///             described tensor has no address, so the address rules (out over
///             an input) take these answers, in their place and words; an
///             input in cache storage is the caller's alone
/// E_ARG for an unknown op, and for a cache op without `cache` or with a
/// description no cache has (its geometry, 0 <= length <= max_seq_len unless
/// _LENGTH, 0 <= window_start <= max_seq_len) before any rule reads it.
/// Needs no context and writes nothing but `message`: a failure's message,
/// naming no function (the caller's name goes first), NUL-terminated in
/// message_bytes (SDPA_CHECK_MESSAGE_BYTES are enough; NULL: none).
sdpa_status sdpa_check_described(int32_t op, const sdpa_kv_cache_desc * cache, int32_t length, int32_t window_start,
                                 const sdpa_tensor * query, const sdpa_tensor * key, const sdpa_tensor * value,
                                 const sdpa_tensor * mask, const sdpa_options * options, const sdpa_tensor * out,
                                 uint32_t judged, uint32_t unknown, uint32_t overlaps, char * message, int32_t message_bytes);

#ifdef __cplusplus
}
#endif
#endif /* SDPA_WASM_API_H */
