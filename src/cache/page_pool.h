/* page_pool.h: the pages of every KV cache of one context.
 *
 * A page holds SDPA_PAGE_ROWS token rows of one batch row and one KV head
 * (its K block, then its V block; the layout inside is the cache's, see
 * kv_cache.c). Pages are carved from an arena of a few large chunks malloc'ed
 * on demand (or ahead of time by sdpa_ctx_reserve_pages), so a cache pays for
 * the rows it holds, growth never copies rows, and a warm pool serves a
 * decode loop without touching the heap. Pages are reference counted (a
 * forked cache shares them; copy-on-write is the cache's job). A page freed
 * by every holder goes to the free list of its size; an arena chunk is never
 * given back (wasm memory cannot shrink anyway).
 *
 * Each page size also has one zero page: read-only, never taken, what an
 * unwritten page of the table points to, so kernels read zeros there with no
 * special case. Not thread-safe: only the calling thread takes and releases
 * pages (kernels only read them).
 */
#ifndef SDPA_PAGE_POOL_H
#define SDPA_PAGE_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sdpa_page_pool sdpa_page_pool;

sdpa_page_pool * sdpa_page_pool_create(void);
/* Frees every chunk (pages still held by caches become invalid). NULL is a no-op. */
void sdpa_page_pool_free(sdpa_page_pool * pool);

/* The pool bytes one page of `page_bytes` takes: its header slot included. */
uint64_t sdpa_page_pool_slot_bytes(uint64_t page_bytes);

/* Registers the page size `bytes` (a multiple of 64) and makes its zero
 * page; false when memory runs out. Idempotent. */
bool sdpa_page_pool_add_size(sdpa_page_pool * pool, size_t bytes);

/* The zero page of a registered size. */
void * sdpa_page_pool_zero(const sdpa_page_pool * pool, size_t bytes);

/* Makes sure `count` pages of a registered size can be taken without
 * touching the heap (growing the arena if needed); false, with the pool as
 * it was apart from what free memory it gained, when the heap cannot. */
bool sdpa_page_pool_ensure(sdpa_page_pool * pool, size_t bytes, uint64_t count);

/* The same for pages of several registered sizes taken together (n of
 * them: bytes[i], count[i]): their shortfalls after each size's free list
 * are counted as pages of the largest slot among them, so the takes succeed
 * in any order (a take of any of the sizes leaves at least as many of the
 * largest carvable, minus one). Separate ensures of two sizes would each
 * count the same arena bytes. Entries of equal bytes (one class) are counted
 * together. */
bool sdpa_page_pool_ensure_sizes(sdpa_page_pool * pool, const size_t * bytes, const uint64_t * count, int32_t n);

/* The same over entries of several pools (caches of several contexts: each
 * takes pages from its creating context's pool): entry i is count[i] pages
 * of bytes[i] from pools[i]; one sdpa_page_pool_ensure_sizes per distinct
 * pool over its entries, gathered into tmp_bytes / tmp_count (room for n).
 * False when a pool cannot grow (the pools ensured before it keep their new
 * free pages: nothing is taken). */
bool sdpa_page_pool_ensure_pools(sdpa_page_pool * const * pools, const size_t * bytes, const uint64_t * count, int32_t n,
                                 size_t * tmp_bytes, uint64_t * tmp_count);

/* Takes one page (reference count 1, contents undefined). Only after a
 * successful ensure covering it; never fails then. */
void * sdpa_page_pool_take(sdpa_page_pool * pool, size_t bytes);

/* Reference counting; the zero page ignores both. Releasing the last
 * reference returns the page to its free list. */
void sdpa_page_retain(void * page);
void sdpa_page_release(sdpa_page_pool * pool, void * page);
int32_t sdpa_page_refs(const void * page);
bool sdpa_page_is_zero(const void * page);

/* Bits the cache keeps about a page's contents (SDPA_PAGE_MARK_*): 0 on a
 * page just taken and on the zero page (which ignores set_marks). A copy of
 * a page's bytes takes its marks along. */
/* the K (V) block may hold a value the kernels' in-place readers cannot
 * convert: a float16 Inf or NaN, an int4 group's NaN (or Inf) scale or offset */
#define SDPA_PAGE_MARK_K_NONFINITE 1u
#define SDPA_PAGE_MARK_V_NONFINITE 2u
/* a float16 page: the newest page of a cache with float16_newest_page, in
 * its f16_format (internal.h sdpa_kv_cache), until it fills */
#define SDPA_PAGE_MARK_FLOAT16 4u
uint32_t sdpa_page_marks(const void * page);
void sdpa_page_set_marks(void * page, uint32_t marks);

/* Grows the arena so that `bytes` more are free for pages (E_OOM-style false). */
bool sdpa_page_pool_reserve(sdpa_page_pool * pool, uint64_t bytes);

/* Whether [p, p + bytes) overlaps the arena (any page of any cache). */
bool sdpa_page_pool_overlaps(const sdpa_page_pool * pool, const void * p, uint64_t bytes);

typedef struct sdpa_page_stats {
    uint64_t bytes_reserved;  /* arena bytes taken from the heap */
    uint64_t bytes_in_use;    /* pages held by caches (headers included) */
    uint64_t bytes_free;      /* free pages + arena not carved yet */
    int64_t  pages_in_use;
    int64_t  pages_free;      /* pages on the free lists */
} sdpa_page_stats;
void sdpa_page_pool_stats(const sdpa_page_pool * pool, sdpa_page_stats * out);

#endif
