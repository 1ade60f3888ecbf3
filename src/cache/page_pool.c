/* page_pool.c: an arena of chunks, carved into pages of a few sizes, with a
 * free list per size (see page_pool.h). */
#include "cache/page_pool.h"

#include <stdlib.h>
#include <string.h>

/* Every page starts PAGE_ALIGN bytes after its header, on a PAGE_ALIGN
 * boundary: a page is aligned for SIMD loads as a 64-byte-aligned buffer is. */
#define PAGE_ALIGN 64
#define CHUNK_MIN ((size_t)1 << 20)          /* 1 MiB: small pages come in bunches */
#define CHUNK_MAX ((size_t)256 << 20)         /* wasm32 malloc cannot take 2 GiB at once */

typedef struct page_header {
    int32_t refs;                /* holders; ZERO_REFS for a zero page */
    uint32_t marks;              /* the cache's notes on the contents (page_pool.h) */
    struct page_header * next;   /* free list */
    struct page_class * cls;
} page_header;
_Static_assert(sizeof(page_header) <= PAGE_ALIGN, "page header fits its slot");
#define ZERO_REFS (-1)

typedef struct page_class {
    size_t bytes;                /* page bytes, a multiple of PAGE_ALIGN */
    page_header * free;
    int64_t n_free;
    void * zero;
    struct page_class * next;
} page_class;

typedef struct chunk {
    char * mem;                  /* what malloc returned */
    char * base;                 /* mem aligned up to PAGE_ALIGN */
    size_t size, used;           /* usable bytes from base, carved so far */
} chunk;

struct sdpa_page_pool {
    chunk * chunks;
    int32_t n_chunks, cap_chunks;
    page_class * classes;
    uint64_t bytes_reserved;
    int64_t pages_in_use;
    uint64_t bytes_in_use;
};

static size_t slot_bytes(size_t page_bytes) { return PAGE_ALIGN + page_bytes; }
uint64_t sdpa_page_pool_slot_bytes(uint64_t page_bytes) { return PAGE_ALIGN + page_bytes; }  /* (64-bit: a planned page may pass 4 GiB) */
static page_header * header_of(const void * page) { return (page_header *)((char *)page - PAGE_ALIGN); }

sdpa_page_pool * sdpa_page_pool_create(void) { return calloc(1, sizeof(sdpa_page_pool)); }

void sdpa_page_pool_free(sdpa_page_pool * pool) {
    if (!pool) return;
    for (int32_t i = 0; i < pool->n_chunks; i++) free(pool->chunks[i].mem);
    free(pool->chunks);
    for (page_class * c = pool->classes, * next; c; c = next) { next = c->next; free(c); }
    free(pool);
}

static page_class * find_class(const sdpa_page_pool * pool, size_t bytes) {
    for (page_class * c = pool->classes; c; c = c->next) if (c->bytes == bytes) return c;
    return NULL;
}

/* Adds a chunk with at least `bytes` usable (bytes <= CHUNK_MAX). */
static bool add_chunk(sdpa_page_pool * pool, size_t bytes) {
    if (pool->n_chunks == pool->cap_chunks) {
        int32_t cap = pool->cap_chunks ? 2 * pool->cap_chunks : 8;
        chunk * grown = realloc(pool->chunks, (size_t)cap * sizeof *grown);
        if (!grown) return false;
        pool->chunks = grown;
        pool->cap_chunks = cap;
    }
    char * mem = malloc(bytes + PAGE_ALIGN);
    if (!mem) return false;
    chunk * c = &pool->chunks[pool->n_chunks++];
    c->mem = mem;
    c->base = (char *)(((uintptr_t)mem + PAGE_ALIGN - 1) & ~(uintptr_t)(PAGE_ALIGN - 1));
    c->size = bytes;
    c->used = 0;
    pool->bytes_reserved += bytes;
    return true;
}

/* Pages of `slot` bytes that the arena can still carve. */
static uint64_t carvable(const sdpa_page_pool * pool, size_t slot) {
    uint64_t n = 0;
    for (int32_t i = 0; i < pool->n_chunks; i++) n += (pool->chunks[i].size - pool->chunks[i].used) / slot;
    return n;
}

static page_header * carve(sdpa_page_pool * pool, page_class * cls) {
    const size_t slot = slot_bytes(cls->bytes);
    for (int32_t i = pool->n_chunks - 1; i >= 0; i--) {
        chunk * c = &pool->chunks[i];
        if (c->size - c->used < slot) continue;
        page_header * h = (page_header *)(c->base + c->used);
        c->used += slot;
        h->cls = cls;
        h->next = NULL;
        return h;
    }
    return NULL;
}

bool sdpa_page_pool_add_size(sdpa_page_pool * pool, size_t bytes) {
    if (find_class(pool, bytes)) return true;
    page_class * cls = calloc(1, sizeof *cls);
    if (!cls) return false;
    cls->bytes = bytes;
    const size_t slot = slot_bytes(bytes);
    if (carvable(pool, slot) < 1 && !add_chunk(pool, slot > CHUNK_MIN ? slot : CHUNK_MIN)) {
        free(cls);
        return false;
    }
    page_header * h = carve(pool, cls);
    h->refs = ZERO_REFS;
    h->marks = 0;
    cls->zero = (char *)h + PAGE_ALIGN;
    memset(cls->zero, 0, bytes);
    cls->next = pool->classes;
    pool->classes = cls;
    return true;
}

void * sdpa_page_pool_zero(const sdpa_page_pool * pool, size_t bytes) {
    const page_class * cls = find_class(pool, bytes);
    return cls ? cls->zero : NULL;
}

bool sdpa_page_pool_ensure(sdpa_page_pool * pool, size_t bytes, uint64_t count) {
    const page_class * cls = find_class(pool, bytes);
    if (!cls) return false;
    const size_t slot = slot_bytes(bytes);
    uint64_t have = (uint64_t)cls->n_free + carvable(pool, slot);
    while (have < count) {
        /* a chunk of whole slots: the shortfall, at least CHUNK_MIN, at most CHUNK_MAX */
        uint64_t want = (count - have) * (uint64_t)slot;
        if (want < CHUNK_MIN) want = CHUNK_MIN;
        if (want > CHUNK_MAX) want = CHUNK_MAX > slot ? CHUNK_MAX - CHUNK_MAX % slot : slot;
        if (want > SIZE_MAX - PAGE_ALIGN) return false;
        if (!add_chunk(pool, (size_t)want)) {
            /* near the heap's end: try just the shortfall (or one page) before giving up */
            const uint64_t just = (count - have) * (uint64_t)slot < want ? (count - have) * (uint64_t)slot : slot;
            if (just >= want || !add_chunk(pool, (size_t)just)) return false;
            want = just;
        }
        have += want / slot;
    }
    return true;
}

bool sdpa_page_pool_ensure_pools(sdpa_page_pool * const * pools, const size_t * bytes, const uint64_t * count, int32_t n,
                                 size_t * tmp_bytes, uint64_t * tmp_count) {
    for (int32_t i = 0; i < n; i++) {
        bool seen = false;
        for (int32_t j = 0; j < i && !seen; j++) seen = pools[j] == pools[i];
        if (seen) continue;  /* (ensured with the first entry of its pool) */
        int32_t m = 0;
        for (int32_t j = i; j < n; j++) {
            if (pools[j] != pools[i]) continue;
            tmp_bytes[m] = bytes[j];
            tmp_count[m++] = count[j];
        }
        if (!sdpa_page_pool_ensure_sizes(pools[i], tmp_bytes, tmp_count, m)) return false;
    }
    return true;
}

bool sdpa_page_pool_ensure_sizes(sdpa_page_pool * pool, const size_t * bytes, const uint64_t * count, int32_t n) {
    uint64_t need = 0;
    size_t slot = 0;
    int32_t only = -1, sizes = 0;
    for (int32_t i = 0; i < n; i++) {
        const page_class * cls = find_class(pool, bytes[i]);
        if (!cls) return false;
        /* entries of one class (equal page bytes: a float16 page raised to its encoded page's size)
           draw on the same free pages: counted together, at the first of them, once */
        bool seen = false;
        uint64_t total = 0;
        for (int32_t j = 0; j < n; j++) {
            if (find_class(pool, bytes[j]) != cls) continue;
            if (j < i) { seen = true; break; }
            if (count[j] > UINT64_MAX - total) return false;
            total += count[j];
        }
        if (seen || total <= (uint64_t)cls->n_free) continue;
        need += total - (uint64_t)cls->n_free;
        if (slot_bytes(bytes[i]) > slot) slot = slot_bytes(bytes[i]);
        only = i;
        sizes++;
    }
    if (need == 0) return true;
    if (sizes == 1) {                                  /* (exact for one size) */
        uint64_t total = 0;
        for (int32_t j = 0; j < n; j++) if (find_class(pool, bytes[j]) == find_class(pool, bytes[only])) total += count[j];
        return sdpa_page_pool_ensure(pool, bytes[only], total);
    }
    uint64_t have = carvable(pool, slot);
    while (have < need) {
        uint64_t want = (need - have) * (uint64_t)slot;
        if (want < CHUNK_MIN) want = CHUNK_MIN;
        if (want > CHUNK_MAX) want = CHUNK_MAX > slot ? CHUNK_MAX - CHUNK_MAX % slot : slot;
        if (want > SIZE_MAX - PAGE_ALIGN) return false;
        if (!add_chunk(pool, (size_t)want)) {
            const uint64_t just = (need - have) * (uint64_t)slot < want ? (need - have) * (uint64_t)slot : slot;
            if (just >= want || !add_chunk(pool, (size_t)just)) return false;
            want = just;
        }
        have += want / slot;
    }
    return true;
}

void * sdpa_page_pool_take(sdpa_page_pool * pool, size_t bytes) {
    page_class * cls = find_class(pool, bytes);
    if (!cls) return NULL;
    page_header * h = cls->free;
    if (h) {
        cls->free = h->next;
        cls->n_free--;
    } else {
        h = carve(pool, cls);
        if (!h) return NULL;
    }
    h->refs = 1;
    h->marks = 0;
    h->next = NULL;
    pool->pages_in_use++;
    pool->bytes_in_use += slot_bytes(bytes);
    return (char *)h + PAGE_ALIGN;
}

void sdpa_page_retain(void * page) {
    page_header * h = header_of(page);
    if (h->refs != ZERO_REFS) h->refs++;
}

void sdpa_page_release(sdpa_page_pool * pool, void * page) {
    page_header * h = header_of(page);
    if (h->refs == ZERO_REFS || --h->refs > 0) return;
    page_class * cls = h->cls;
    h->next = cls->free;
    cls->free = h;
    cls->n_free++;
    pool->pages_in_use--;
    pool->bytes_in_use -= slot_bytes(cls->bytes);
}

int32_t sdpa_page_refs(const void * page) { return header_of(page)->refs; }
bool sdpa_page_is_zero(const void * page) { return header_of(page)->refs == ZERO_REFS; }
uint32_t sdpa_page_marks(const void * page) { return header_of(page)->marks; }
void sdpa_page_set_marks(void * page, uint32_t marks) {
    page_header * h = header_of(page);
    if (h->refs != ZERO_REFS) h->marks = marks;
}

/* The largest slot of the registered page sizes (0: none yet). */
static size_t max_slot(const sdpa_page_pool * pool) {
    size_t m = 0;
    for (const page_class * c = pool->classes; c; c = c->next)
        if (slot_bytes(c->bytes) > m) m = slot_bytes(c->bytes);
    return m;
}

/* What reserve promises: writes that take at most `bytes` of slots, of any
 * of the registered page sizes, carve them without growth. A chunk's tail
 * shorter than the slot asked for is skipped, so each chunk is counted
 * less its largest possible tail (< max_slot): then a slot that fits
 * nowhere would mean every chunk already gave more than it was counted
 * for. Free-listed pages serve only their own size and are not counted. */
bool sdpa_page_pool_reserve(sdpa_page_pool * pool, uint64_t bytes) {
    const uint64_t tail = max_slot(pool);
    uint64_t free_now = 0;
    for (int32_t i = 0; i < pool->n_chunks; i++) {
        const uint64_t rem = pool->chunks[i].size - pool->chunks[i].used;
        free_now += rem > tail ? rem - tail : 0;
    }
    while (free_now < bytes) {
        uint64_t want = bytes - free_now + tail;
        if (want < CHUNK_MIN) want = CHUNK_MIN;
        if (want > CHUNK_MAX) want = CHUNK_MAX;
        if (!add_chunk(pool, (size_t)want)) return false;
        free_now += want - tail;
    }
    return true;
}

bool sdpa_page_pool_overlaps(const sdpa_page_pool * pool, const void * p, uint64_t bytes) {
    if (!pool || !p || bytes == 0) return false;
    /* distances, not ends: a claimed size near UINT64_MAX must not wrap p + bytes */
    const uint64_t a0 = (uintptr_t)p;
    for (int32_t i = 0; i < pool->n_chunks; i++) {
        const uint64_t b0 = (uintptr_t)pool->chunks[i].base, b_bytes = pool->chunks[i].size;
        if (a0 >= b0 ? a0 - b0 < b_bytes : b0 - a0 < bytes) return true;
    }
    return false;
}

void sdpa_page_pool_stats(const sdpa_page_pool * pool, sdpa_page_stats * out) {
    memset(out, 0, sizeof *out);
    if (!pool) return;
    uint64_t uncarved = 0, free_pages = 0;
    for (int32_t i = 0; i < pool->n_chunks; i++) uncarved += pool->chunks[i].size - pool->chunks[i].used;
    for (const page_class * c = pool->classes; c; c = c->next) {
        out->pages_free += c->n_free;
        free_pages += (uint64_t)c->n_free * slot_bytes(c->bytes);
    }
    out->bytes_reserved = pool->bytes_reserved;
    out->bytes_in_use = pool->bytes_in_use;
    out->bytes_free = uncarved + free_pages;
    out->pages_in_use = pool->pages_in_use;
}
