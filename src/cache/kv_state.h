/* kv_state.h: what cache/kv_state.c (saved KV state, docs/FORMAT.md) needs
 * from cache/kv_cache.c: the write path of a load. */
#ifndef SDPA_KV_STATE_H
#define SDPA_KV_STATE_H

#include "internal.h"

/* Takes every page rows [start, start + len) of every (batch row, KV head)
 * need (a cache with float16 pages: float16 ones for the pages from row
 * f16_from on, encoded ones before; INT32_MAX: none), as a write of those rows would (fresh zeroed pages; a ring page
 * taken over is cleared; window_start and length move as for a write).
 * E_OOM, with the cache and the pool's pages in use unchanged, when the
 * pool cannot supply them. */
sdpa_status sdpa_kv_cache_take_rows(sdpa_ctx * ctx, sdpa_kv_cache * c, int32_t start, int32_t len, int32_t f16_from);
/* Whether a page of a cache is a float16 page (internal.h sdpa_kv_cache). */
bool sdpa_kv_cache_f16_page(const void * page);

/* The page holding row t of batch row b, KV head h (the zero page when that
 * row's page was never taken). */
void * sdpa_kv_cache_row_page(const sdpa_kv_cache * c, int32_t b, int32_t h, int32_t t);

#endif
