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

#ifdef __cplusplus
}
#endif
#endif /* SDPA_WASM_API_H */
