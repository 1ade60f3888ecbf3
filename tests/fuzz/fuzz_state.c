/*
 * fuzz_state.c: libFuzzer target over the loader of saved KV state
 * (include/sdpa.h "Saved KV state", docs/FORMAT.md).
 *
 * Each input is either (first byte even) raw bytes handed to the loader as a
 * save, or (odd) a recipe: a small cache (geometry, dtype, window from the
 * input; any K and V dtypes) is filled and saved, then the save is mutated by the input (bit
 * flips, byte writes, a truncation, header fields written with the header
 * CRC resealed, or the payload CRC resealed too) and loaded, in one buffer
 * and in pieces of an input-chosen size.
 *
 * Oracles (abort() on violation):
 *   - the status is OK, E_FORMAT or E_OOM; a failure makes no cache and
 *     leaves the pool's bytes in use as they were, with a message naming
 *     sdpa.loadKVCache;
 *   - the one-buffer and the piecewise load agree on the status;
 *   - an unmutated save loads, and its stored rows equal the original's;
 *   - whatever loads saves again and loads again to the same stored rows
 *     (and the same bytes, for a save without a start).
 * ASan: no read outside the input, no leak.
 *
 * Build: CMake with -DSDPA_FUZZ=ON builds it next to fuzz_sdpa; without
 * libFuzzer, -DSDPA_FUZZ_STANDALONE gives `fuzz_state -random N [SEED]`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdpa.h"

static sdpa_ctx * g_ctx;

static int64_t in_use(void) {
    sdpa_memory_stats st;
    sdpa_ctx_memory(g_ctx, &st);
    return st.bytes_in_use;
}

#define CHECK(cond, ...)                                        \
    do {                                                        \
        if (!(cond)) {                                          \
            fprintf(stderr, "fuzz_state: " __VA_ARGS__);        \
            fprintf(stderr, " (%s)\n", sdpa_ctx_last_error(g_ctx)); \
            abort();                                            \
        }                                                       \
    } while (0)

typedef struct rd { const uint8_t * p; size_t n, at; } rd;
static uint32_t take(rd * r, uint32_t mod) {
    uint32_t v = 0;
    for (int i = 0; i < 4 && r->at < r->n; i++) v = v << 8 | r->p[r->at++];
    return mod ? v % mod : v;
}

static unsigned char * save_of(const sdpa_kv_cache * c, int32_t start, int32_t len, size_t * n) {
    sdpa_kv_saver * sv = NULL;
    if (sdpa_kv_save_begin(g_ctx, c, start, len, "{\"f\":1}", 7, &sv) != SDPA_OK) return NULL;
    *n = (size_t)sdpa_kv_save_bytes(sv);
    unsigned char * out = malloc(*n ? *n : 1);
    size_t at = 0, k;
    while ((k = sdpa_kv_save_read(sv, out + at, 977)) > 0) at += k;
    CHECK(at == *n, "save read %zu of %zu", at, *n);
    sdpa_kv_save_free(sv);
    return out;
}

/* the stored rows of a cache, all kept ranges, K and V, as row records (malloc'ed) */
static unsigned char * raw_of(const sdpa_kv_cache * c, size_t * n) {
    int32_t B, H, D;
    sdpa_kv_cache_shape(c, &B, NULL, &H, &D);
    (void)D;
    const int32_t len = sdpa_kv_cache_length(c), S = sdpa_kv_cache_sink_tokens(c), ws = sdpa_kv_cache_window_start(c);
    int32_t ranges[2][2] = { { 0, len }, { 0, 0 } };
    if (sdpa_kv_cache_window(c)) {
        ranges[0][1] = len < S ? len : S;
        ranges[1][0] = ws > S ? ws : S;
        ranges[1][1] = len - ranges[1][0];
    }
    size_t total = 0;
    for (int r = 0; r < 2; r++)
        if (ranges[r][1] > 0)
            for (int which = 0; which < 2; which++)
                total += (size_t)B * (size_t)ranges[r][1] * (size_t)H * sdpa_kv_cache_record_bytes(c, which);
    unsigned char * out = calloc(1, total + 1), * p = out;
    for (int r = 0; r < 2; r++) {
        if (ranges[r][1] <= 0) continue;
        for (int which = 0; which < 2; which++) {
            const size_t bytes = (size_t)B * (size_t)ranges[r][1] * (size_t)H * sdpa_kv_cache_record_bytes(c, which);
            CHECK(sdpa_kv_cache_read_records(g_ctx, c, ranges[r][0], ranges[r][1], which, p, bytes) == SDPA_OK, "read_records");
            p += bytes;
        }
    }
    *n = total;
    return out;
}

static sdpa_status load_pieces(const unsigned char * d, size_t n, size_t piece, sdpa_kv_cache ** out) {
    sdpa_kv_loader * L = NULL;
    sdpa_status s = sdpa_kv_load_begin(g_ctx, 0, &L);
    for (size_t at = 0; s == SDPA_OK && at < n; at += piece) {
        size_t k = piece < n - at ? piece : n - at, used = 0;
        s = sdpa_kv_load_feed(L, d + at, k, &used);
        if (s == SDPA_OK && used < k) s = SDPA_E_FORMAT;  /* trailing bytes */
    }
    if (s == SDPA_OK) s = sdpa_kv_load_finish(L, out);
    sdpa_kv_load_free(L);
    return s;
}

/* A header whose geometry is valid but whose page table alone would be huge
 * (maxSeqLen near 2^31 of a plain cache): the library makes it, as
 * createKVCache would (natively: gigabytes), so the harness skips it to stay
 * inside libFuzzer's RSS limit. Anything smaller is loaded. */
static int huge_table(const unsigned char * d, size_t n) {
    if (n < 100) return 0;
    uint32_t b, h, msl, w;
    memcpy(&b, d + 28, 4); memcpy(&h, d + 32, 4); memcpy(&msl, d + 40, 4); memcpy(&w, d + 44, 4);
    const uint64_t slots = (uint64_t)(w && w < msl ? w : msl) / 64 + 3;
    return (uint64_t)b * h * slots * sizeof(void *) > ((uint64_t)64 << 20);
}

/* Loads d both ways; checks the oracles; returns the loaded cache (or NULL). */
static sdpa_kv_cache * load_checked(const unsigned char * d, size_t n, size_t piece) {
    if (huge_table(d, n)) return NULL;
    const int64_t before = in_use();
    sdpa_kv_cache * a = NULL, * b = NULL;
    const sdpa_status s1 = sdpa_kv_cache_load(g_ctx, d, n, 0, &a);
    CHECK(s1 == SDPA_OK || s1 == SDPA_E_FORMAT || s1 == SDPA_E_OOM, "status %s", sdpa_status_code(s1));
    if (s1 != SDPA_OK) {
        CHECK(!a && in_use() == before, "a failed load left a cache or pages");
        CHECK(strncmp(sdpa_ctx_last_error(g_ctx), "sdpa_kv_cache_load: ", 20) == 0 &&
              !strstr(sdpa_ctx_last_error(g_ctx) + 20, "sdpa_"), "message: the entry's name, once");
    }
    const int64_t mid = in_use();
    const sdpa_status s2 = load_pieces(d, n, piece, &b);
    CHECK(s1 == s2 || (s1 == SDPA_E_FORMAT && s2 == SDPA_E_FORMAT), "one buffer %s, pieces of %zu %s", sdpa_status_code(s1), piece,
          sdpa_status_code(s2));
    if (s2 != SDPA_OK) CHECK(!b && in_use() == mid, "a failed piecewise load left a cache or pages");
    sdpa_kv_cache_free(b);
    return a;
}

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (!g_ctx) {
        sdpa_status s;
        g_ctx = sdpa_ctx_create(1, &s);
        if (!g_ctx) return 0;
    }
    if (size == 0) return 0;
    if ((data[0] & 1) == 0) {  /* raw bytes as a save */
        sdpa_kv_cache * c = load_checked(data + 1, size - 1, 1 + (size % 13));
        sdpa_kv_cache_free(c);
        return 0;
    }
    rd r = { data, size, 1 };
    static const int32_t dtypes[] = { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT16, SDPA_DTYPE_INT8, SDPA_DTYPE_INT4 };
    const int32_t dtype = dtypes[take(&r, 4)], B = 1 + (int32_t)take(&r, 2), H = 1 + (int32_t)take(&r, 2), D = 1 + (int32_t)take(&r, 40);
    const uint32_t vpick = take(&r, 6);   /* 4, 5: the same as K */
    const int32_t vdtype = vpick < 4 ? dtypes[vpick] : dtype;
    const int windowed = (int)take(&r, 2);
    const int32_t W = windowed ? 1 + (int32_t)take(&r, 70) : 0, S = windowed ? (int32_t)take(&r, 5) : 0;
    const int32_t L = windowed ? 1000 : 1 + (int32_t)take(&r, 200), rows = (int32_t)take(&r, (uint32_t)(windowed ? 300 : L) + 1);
    const int32_t f16_page = (int32_t)take(&r, 2);  /* a float16 newest page (int8 / int4 blocks) */
    sdpa_kv_cache * c = NULL;
    const sdpa_kv_cache_desc desc = { B, L, H, D, dtype, vdtype, W, S, f16_page };
    if (sdpa_kv_cache_create_desc(g_ctx, &desc, &c) != SDPA_OK) return 0;
    float * kv = malloc((size_t)B * 64 * H * D * 4);
    for (int32_t at = 0; at < rows; at += 64) {
        const int32_t m = rows - at < 64 ? rows - at : 64;
        for (size_t i = 0; i < (size_t)B * m * H * D; i++) kv[i] = (float)(int32_t)take(&r, 0) * 1e-9f;
        sdpa_tensor t = { kv, (size_t)B * m * H * D, SDPA_DTYPE_FLOAT32, 4, { B, m, H, D } };
        CHECK(sdpa_kv_cache_update(g_ctx, c, &t, &t, at) == SDPA_OK, "update");
    }
    free(kv);
    size_t n = 0;
    unsigned char * save = save_of(c, 0, rows, &n);
    CHECK(save != NULL, "save");
    const size_t piece = 1 + take(&r, 300);
    /* unmutated: loads, same rows */
    sdpa_kv_cache * back = load_checked(save, n, piece);
    CHECK(back != NULL, "an unmutated save did not load");
    size_t n1, n2;
    unsigned char * r1 = raw_of(c, &n1), * r2 = raw_of(back, &n2);
    CHECK(n1 == n2 && memcmp(r1, r2, n1) == 0, "rows differ after a round trip");
    free(r1); free(r2);
    sdpa_kv_cache_free(back);
    /* mutate */
    unsigned char * m = malloc(n);
    memcpy(m, save, n);
    size_t len = n;
    const uint32_t hb = (uint32_t)m[12] | (uint32_t)m[13] << 8 | (uint32_t)m[14] << 16 | (uint32_t)m[15] << 24;
    const uint32_t kinds = take(&r, 6);
    for (uint32_t i = 0, k = 1 + take(&r, 4); i < k; i++) {
        const size_t at = take(&r, (uint32_t)n);
        if (kinds == 0) m[at] ^= (unsigned char)(1u << take(&r, 8));
        else if (kinds == 1) m[at] = (unsigned char)take(&r, 256);
        else if (kinds == 2) len = take(&r, (uint32_t)n + 1);
        else if (kinds >= 3) {  /* a header field, resealed */
            const size_t field = 4 * take(&r, 24);
            const uint32_t v = take(&r, 0) >> (take(&r, 4) * 8);
            memcpy(m + field, &v, 4);
        }
    }
    if (kinds >= 3 && hb >= 100 && hb <= n) {
        uint32_t crc = sdpa_crc32c(0, m, hb - 4);
        memcpy(m + hb - 4, &crc, 4);
        if (kinds == 5 && n >= hb + 4) {
            crc = sdpa_crc32c(0, m + hb, n - hb - 4);
            memcpy(m + n - 4, &crc, 4);
        }
    }
    sdpa_kv_cache * got = load_checked(m, len, piece);
    if (got) {  /* whatever loaded saves and loads again to the same rows */
        size_t n3 = 0;
        unsigned char * again = save_of(got, 0, sdpa_kv_cache_length(got), &n3);
        if (again) {
            sdpa_kv_cache * twice = load_checked(again, n3, piece);
            CHECK(twice != NULL, "a re-save did not load");
            unsigned char * x = raw_of(got, &n1), * y = raw_of(twice, &n2);
            CHECK(n1 == n2 && memcmp(x, y, n1) == 0, "rows differ after a re-save");
            free(x); free(y);
            sdpa_kv_cache_free(twice);
            free(again);
        }
        sdpa_kv_cache_free(got);
    }
    free(m);
    free(save);
    sdpa_kv_cache_free(c);
    return 0;
}

#ifdef SDPA_FUZZ_STANDALONE
int main(int argc, char ** argv) {
    long n = argc >= 3 && strcmp(argv[1], "-random") == 0 ? atol(argv[2]) : 1000;
    uint64_t s = argc >= 4 ? strtoull(argv[3], NULL, 10) : 1;
    static uint8_t buf[4096];
    for (long i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const size_t len = (size_t)((s >> 33) % sizeof buf);
        for (size_t j = 0; j < len; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            buf[j] = (uint8_t)(s >> 56);
        }
        LLVMFuzzerTestOneInput(buf, len);
    }
    printf("fuzz_state: %ld random inputs ok\n", n);
    sdpa_ctx_free(g_ctx);
    return 0;
}
#endif
