/* flash_touch.h: the touch-ahead of flash.c's tile loop: which memory a
 * tile touches while its scores are computed, so that DRAM reads overlap
 * with compute (the section below says who touches what), and the page
 * tile addresses it needs (tile_block, which the tile loop reads tiles
 * through too). Included by flash.c alone (one translation unit,
 * as flash_float.h). */
#ifndef SDPA_FLASH_TOUCH_H
#define SDPA_FLASH_TOUCH_H

#include "kernels/flash_private.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- touch-ahead --------------------------------------------------------
 *
 * While a tile's scores are computed, memory the loop needs soon is touched
 * (touch_bytes: one load per cache line), so that its DRAM reads overlap
 * with compute instead of stalling the value pass or the next tile. Who
 * touches what:
 *   pages read in place (touches_ahead): the first tile of a key range
 *     touches its own V and the K and V of the tiles before TOUCH_AHEAD at
 *     once (touch_tiles_ahead); then every tile's score pass touches the K
 *     and V of the tile TOUCH_AHEAD on, a line per step (qk_rows_of,
 *     i8_qk_rows in flash_int8.h; an int8 page whose K is decoded does the
 *     first-tile touches only);
 *     every OS_TOUCH_TILES tiles from the range's first, one word of each
 *     4 KiB OS page of the next OS_TOUCH_TILES tiles' cache pages is
 *     touched, all at once (touch_os_pages);
 *   caller tensors: transpose_k_rows touches the tile's own V rows;
 *   a float16 page decoded for an Inf or NaN: nothing.
 * Every touch's loads are ORed into st->touched, a store the compiler must
 * keep, so the loads stay. */

/* How far ahead (in tiles) a page's K and V are touched: 3 measured fastest
 * on cold decode (2 less so; 4 or 6 slower than touching only the next tile).
 * A single row (MHA) touches nothing, its own loads stream faster without
 * touches in between, except on int8 pages, which touch at the same distance
 * (touches_ahead). The runs: bench/HISTORY.md, "Touch-ahead and OS-page touches". */
#define TOUCH_AHEAD 3

/* One word of every 4 KiB OS page that the n bytes at x reach into, for all
 * the cache pages of a key range at its first tile (a chunk: 16 tiles on int8
 * pages, 4 on float32 / float16 ones). Each OS page's first access costs a TLB
 * walk on top of a DRAM miss, and the stream prefetcher stops at the page's
 * end; touched back to back, those misses overlap (one wait per range, not
 * per page): a few percent faster on cold decode, every dtype. The runs and
 * the variants that did not help: bench/HISTORY.md, "Touch-ahead and OS-page
 * touches". */
#define OS_TOUCH_TILES 16  /* an int8 chunk (CHUNK_MIN_KEYS_INT8): the measured cluster */
static uint32_t touch_os_pages(const void * x, size_t n) {
    uintptr_t a = (uintptr_t)x;
    const uintptr_t end = a + n;
    uint32_t touched = *(const uint32_t *)x;
    for (a = (a | 4095u) + 1; a < end; a += 4096u) touched |= *(const uint32_t *)(const void *)a;
    return touched;
}

/* The K (value = 0) or V block of a page's tile at row r0 (a TILE_KEYS
 * multiple: every layout keeps such a tile's rows contiguous). */
static const void * tile_block(const sdpa_page_format * fmt, const void * page, int32_t r0, int value) {
    return (const char *)sdpa_kv_block(fmt, page, value) + (size_t)r0 * sdpa_kv_row_bytes(fmt, value);
}
/* The same for the tile at key ts of head (b, hk); its bytes. */
static const void * page_tile(const sdpa_kv_view * kv, int32_t b, int32_t hk, int64_t ts, int value) {
    const void * page = sdpa_kv_page(kv, b, hk, (int32_t)ts);
    return tile_block(sdpa_kv_page_format(kv, page), page, (int32_t)(ts % SDPA_PAGE_ROWS), value);
}
static size_t tile_bytes(const sdpa_kv_view * kv, int32_t b, int32_t hk, int64_t ts, int value) {
    return (size_t)TILE_KEYS * sdpa_kv_row_bytes(sdpa_kv_page_format(kv, sdpa_kv_page(kv, b, hk, (int32_t)ts)), value);
}

/* Whether a tile of this K source touches ahead: pages read in place with
 * more than one row (a single row's own loads stream faster without touches
 * in between), int8 pages always (TOUCH_AHEAD), also when the plan decodes
 * their K (above INT_Q_MAX_DIM: the plan's K_DECODED, not a marked page's). */
static bool touches_ahead(const flash_plan * f, k_source ks, int32_t n_rows) {
    switch (ks) {
        case K_F32_PAGE:
        case K_F16_PAGE: return n_rows > 1;
        case K_I8_PAGE:
        case K_I4_PAGE: return true;
        case K_DECODED: return f->k_src == K_DECODED;
        default: return false;
    }
}

/* The K and V blocks of the tile TOUCH_AHEAD tiles on, for a score pass to touch. */
typedef struct tile_ahead {
    const void * k, * v;
} tile_ahead;

/* For the tile at ts of the range [t0, t1) being run: every OS_TOUCH_TILES
 * tiles from t0, touches the OS pages of the cache pages of the next
 * OS_TOUCH_TILES tiles (touch_os_pages); at the range's first tile, its own
 * V and the tiles before TOUCH_AHEAD; sets *ahead to the tile TOUCH_AHEAD on
 * (left NULL past t1). Returns the touches. */
static uint32_t touch_tiles_ahead(const flash_plan * f, int32_t b, int32_t hk, int32_t ts, int32_t t0, int32_t t1,
                                  tile_ahead * ahead) {
    const sdpa_kv_view * kv = &f->p->kv;
    uint32_t touched = 0;
    if ((ts - t0) % (OS_TOUCH_TILES * TILE_KEYS) == 0)  /* a cache page per tile (SDPA_PAGE_ROWS == TILE_KEYS) */
        for (int64_t tj = ts; tj < t1 && tj < (int64_t)ts + OS_TOUCH_TILES * TILE_KEYS; tj += TILE_KEYS)
            touched |= touch_os_pages(sdpa_kv_page(kv, b, hk, (int32_t)tj), kv->format->page_bytes);  /* (a float16 page is no smaller) */
    if (ts == t0) {
        touched |= touch_bytes(page_tile(kv, b, hk, ts, 1), tile_bytes(kv, b, hk, ts, 1));
        for (int64_t tj = (int64_t)ts + TILE_KEYS; tj < t1 && tj < (int64_t)ts + TOUCH_AHEAD * TILE_KEYS; tj += TILE_KEYS)
            touched |= touch_bytes(page_tile(kv, b, hk, tj, 0), tile_bytes(kv, b, hk, tj, 0)) |
                       touch_bytes(page_tile(kv, b, hk, tj, 1), tile_bytes(kv, b, hk, tj, 1));
    }
    if ((int64_t)ts + TOUCH_AHEAD * TILE_KEYS < t1) {
        ahead->k = page_tile(kv, b, hk, ts + TOUCH_AHEAD * TILE_KEYS, 0);
        ahead->v = page_tile(kv, b, hk, ts + TOUCH_AHEAD * TILE_KEYS, 1);
    }
    return touched;
}

#endif
