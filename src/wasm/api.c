/* api.c: the wasm-only entries (api.h). */
#include "api.h"

#include "../contract/check.h"
#include "../internal.h"

#include <string.h>

/* An integer held in a double, |x| <= 2^53 (false for NaN, fractions, beyond). */
static bool whole(double x, int64_t * out) {
    const double exact = 9007199254740992.0;  /* 2^53 */
    if (!(x >= -exact && x <= exact) || x != (double)(int64_t)x) return false;
    *out = (int64_t)x;
    return true;
}

/* The rules ran with fn "": their message starts ": "; the rule's words alone stay. */
static sdpa_status words_only(sdpa_ctx * ctx, sdpa_status st) {
    const size_t len = strlen(ctx->last_error);
    if (st != SDPA_OK && len >= 2 && ctx->last_error[0] == ':') memmove(ctx->last_error, ctx->last_error + 2, len - 1);
    return st;
}

sdpa_status sdpa_wasm_kv_cache_plan(sdpa_ctx * ctx, double batch, double max_seq_len, double kv_heads, double head_dim,
                                    int32_t key_dtype, int32_t value_dtype, double window, double sink_tokens,
                                    int32_t float16_newest_page, int32_t plan, double rows, sdpa_kv_cache_size * out) {
    if (!ctx) return SDPA_E_ARG;
    int64_t b, m, h, d, w, s, r = 0;
    if (!whole(batch, &b) || !whole(max_seq_len, &m) || !whole(kv_heads, &h) || !whole(head_dim, &d) ||
        !whole(window, &w) || !whole(sink_tokens, &s) || (plan && !whole(rows, &r)))
        return sdpa_fail(ctx, SDPA_E_ARG, "batch %g, maxSeqLen %g, numKvHeads %g, headDim %g, window %g, sinkTokens %g, rows %g are not integers",
                         batch, max_seq_len, kv_heads, head_dim, window, sink_tokens, rows);
    /* the geometry, then rows; a negative rows (E_DIMS) outranks a geometry's later codes (E_DTYPE, E_HEADS) */
    sdpa_status st = sdpa_check_cache_create(ctx, "", b, m, h, d, key_dtype, value_dtype, w, s, out);
    if (plan && (st == SDPA_OK || (r < 0 && st > SDPA_E_DIMS)))
        st = sdpa_check_cache_plan_rows(ctx, "", st == SDPA_OK ? (int32_t)m : 0, r);
    if (st != SDPA_OK) return words_only(ctx, st);
    /* every count now an int32 the rules accepted */
    const sdpa_kv_cache_desc desc = { (int32_t)b, (int32_t)m, (int32_t)h, (int32_t)d, key_dtype, value_dtype,
                                      (int32_t)w, (int32_t)s, float16_newest_page };
    return sdpa_kv_cache_plan_desc(ctx, &desc, plan ? (int32_t)r : 0, out);
}
