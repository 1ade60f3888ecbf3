/* kv_many.c: several caches' attention in one call, on one
 * dispatch of the thread pool. Check every item (contract/), reserve the
 * scratch for all, then run them together (kernels/flash.c
 * sdpa_flash_run_many): each item gets the bits of its own call. */
#include "internal.h"
#include "contract/check.h"

sdpa_status sdpa_kv_cache_attend_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n) {
    return sdpa_named(ctx, sdpa_kv_cache_attend_many_unnamed(ctx, items, n), __func__);
}

sdpa_status sdpa_kv_cache_attend_many_unnamed(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_problem ps[SDPA_MANY_MAX];  /* (on the stack: a decode step allocates nothing) */
    sdpa_status s = sdpa_check_attend_many(ctx, items, n, ps);
    if (s == SDPA_OK) s = sdpa_reserve_problems(ctx, ps, n);
    if (s != SDPA_OK) return s;
    sdpa_run_problems(ctx, ps, n);
    return SDPA_OK;
}
