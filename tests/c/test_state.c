/*
 * test_state.c: saved KV state (include/sdpa.h "Saved KV state",
 * docs/FORMAT.md). Row records against sdpa_kv_copy_raw_row for every dtype
 * and layout; save -> load round trips (plain and windowed caches, every
 * dtype, pieces of many sizes on both sides) give the same stored rows,
 * length and windowStart, bit-identical attention and bit-identical further
 * steps; prefix saves; the save's rules; every truncation and every bit flip
 * of a small save is E_FORMAT with no cache made and the pool's pages in use
 * unchanged; crafted headers (valid CRC) for each header rule; a header
 * asking for more pages than the heap has is E_OOM with the pool unchanged;
 * the group container's header (written, checked as it arrives, its rules).
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdpa.h"
#include "testutil.h"
#include "cache/kv_format.h"
#include "cache/kv_record.h"

static sdpa_ctx * g_ctx;
static tu_rng g_rng;

static const int32_t DTYPES[] = { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT16, SDPA_DTYPE_INT8, SDPA_DTYPE_INT4 };
enum { N_DTYPES = 4 };

static int64_t in_use(void) {
    sdpa_memory_stats st;
    sdpa_ctx_memory(g_ctx, &st);
    return st.bytes_in_use;
}

static void fill(float * x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = tu_rng_normal(&g_rng);
}

/* A row's record read element by element through kv_format.h's index (the
 * page layouts' one definition) and the record format of kv_record.h: what
 * kv_record.c's block-at-a-time paths must produce. */
static void oracle_record(const sdpa_page_format * f, const void * page, int32_t row, int value, unsigned char * out) {
    const int32_t D = f->dim, dtype = sdpa_kv_dtype(f, value);
    const unsigned char * block = sdpa_kv_block(f, page, value);
    if (dtype == SDPA_DTYPE_INT4) {
        const int32_t G = f->block[value].groups;
        memset(out, 0, ((size_t)D + 1) / 2);
        for (int32_t d = 0; d < D; d++) {
            const size_t at = sdpa_kv_elem_index(f, row, value, d);
            const unsigned q = (block[at / 2] >> (4 * (at % 2))) & 15u;
            out[d / 2] |= (unsigned char)(q << (4 * (d % 2)));
        }
        unsigned char * side = out + ((size_t)D + 1) / 2;
        for (int32_t g = 0; g < G; g++) {
            memcpy(side + 2 * (size_t)g, sdpa_kv_i4_scales(f, page, value, g) + row, 2);
            memcpy(side + 2 * ((size_t)G + (size_t)g), sdpa_kv_i4_offsets(f, page, value, g) + row, 2);
        }
        return;
    }
    const size_t eb = dtype == SDPA_DTYPE_FLOAT32 ? 4 : dtype == SDPA_DTYPE_FLOAT16 ? 2 : 1;
    for (int32_t d = 0; d < D; d++) memcpy(out + (size_t)d * eb, block + sdpa_kv_elem_index(f, row, value, d) * eb, eb);
    if (dtype == SDPA_DTYPE_INT8) {
        memcpy(out + D, sdpa_kv_scales(f, page, value) + row, 4);
        out[D + 4] = (unsigned char)sdpa_kv_zero_points(f, page, value)[row];
    }
}

/* ---- records vs the page's raw rows ---- */
static void test_records(void) {
    const int32_t dims[] = { 1, 2, 3, 7, 16, 33, 128 };
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t ti = 0; ti < N_DTYPES * N_DTYPES; ti++) {
            /* K in one dtype, V in another (every pair); `dtype` below: K's */
            const int32_t D = dims[di], dtype = DTYPES[ti / N_DTYPES], vdtype = DTYPES[ti % N_DTYPES];
            sdpa_page_format f;
            sdpa_page_format_make(&f, dtype, vdtype, D);
            void * page = calloc(1, f.page_bytes), * page2 = calloc(1, f.page_bytes);
            float * x = tu_malloc((size_t)D * 4);
            for (int32_t r = 0; r < SDPA_PAGE_ROWS; r++)
                for (int value = 0; value < 2; value++) {
                    fill(x, (size_t)D);
                    sdpa_kv_encode_row(&f, page, r, value, x);
                }
            const size_t kb = (size_t)sdpa_kv_record_bytes(dtype, D), vb = (size_t)sdpa_kv_record_bytes(vdtype, D);
            const size_t rb = kb, pair = kb + vb;  /* a row's K record, then its V record */
            unsigned char * rec = tu_malloc(pair * SDPA_PAGE_ROWS), * raw = tu_malloc((size_t)D * 4 + 8);
            sdpa_kv_record_export(&f, page, 0, SDPA_PAGE_ROWS, 0, rec, pair);
            sdpa_kv_record_export(&f, page, 0, SDPA_PAGE_ROWS, 1, rec + kb, pair);
            /* the fast paths against the element-at-a-time reading of the page (oracle_record) */
            int bad = 0;
            for (int32_t r = 0; r < SDPA_PAGE_ROWS; r++)
                for (int value = 0; value < 2; value++) {
                    const unsigned char * p = rec + (size_t)r * pair + (value ? kb : 0);
                    oracle_record(&f, page, r, value, raw);
                    bad |= memcmp(p, raw, value ? vb : kb) != 0;
                }
            TU_CHECK(!bad, "export = the oracle, K dtype %d V dtype %d D %d", dtype, vdtype, D);
            /* import into an empty page: the same bytes */
            int32_t badrow = -1;
            bool nonfinite = false;
            sdpa_record_fault f1 = sdpa_kv_record_import(&f, page2, 0, SDPA_PAGE_ROWS, 0, rec, pair, &badrow, &nonfinite);
            sdpa_record_fault f2 = sdpa_kv_record_import(&f, page2, 0, SDPA_PAGE_ROWS, 1, rec + kb, pair, &badrow, &nonfinite);
            TU_CHECK(f1 == SDPA_RECORD_OK && f2 == SDPA_RECORD_OK && !nonfinite, "import ok, K dtype %d V dtype %d D %d", dtype, vdtype, D);
            TU_CHECK(memcmp(page, page2, f.page_bytes) == 0, "import(export(page)) == page, K dtype %d V dtype %d D %d", dtype, vdtype, D);
            if (vdtype != dtype) {  /* the dtype-specific checks below run on the K = V pages */
                free(page); free(page2); free(x); free(rec); free(raw);
                continue;
            }
            if (dtype == SDPA_DTYPE_INT4) {  /* a NaN or Inf scale or offset is reported; an odd D's pad nibble must be 0 */
                unsigned char * side = rec + 5 * pair + (size_t)(D + 1) / 2;   /* K record of row 5: its first scale */
                side[0] = 0x00; side[1] = 0x7e;                                /* NaN */
                nonfinite = false;
                TU_CHECK(sdpa_kv_record_import(&f, page2, 0, SDPA_PAGE_ROWS, 0, rec, pair, &badrow, &nonfinite) == SDPA_RECORD_OK &&
                         nonfinite, "int4 NaN scale in K row 5 sets nonfinite (D %d)", D);
                if (D % 2) {
                    rec[9 * pair + (size_t)D / 2] |= 0x30;                      /* row 9's pad nibble */
                    badrow = -1;
                    TU_CHECK(sdpa_kv_record_import(&f, page2, 0, SDPA_PAGE_ROWS, 0, rec, pair, &badrow, &nonfinite) == SDPA_RECORD_BAD_PAD &&
                             badrow == 9, "int4: a pad nibble that is not 0 is refused (D %d, row %d)", D, badrow);
                }
            }
            if (dtype == SDPA_DTYPE_FLOAT16) {  /* an Inf or NaN element is reported, by every path */
                unsigned char * r13 = rec + (2 * 13 + 1) * rb + 2 * (size_t)(D - 1);   /* V record of row 13, last element */
                r13[0] = 0x01; r13[1] = 0xfe;                                           /* a NaN */
                nonfinite = false;
                sdpa_kv_record_import(&f, page2, 0, SDPA_PAGE_ROWS, 1, rec + rb, 2 * rb, &badrow, &nonfinite);
                TU_CHECK(nonfinite, "float16 NaN in V row 13 sets nonfinite (D %d)", D);
                unsigned char * k13 = rec + (2 * 13) * rb + 2 * (size_t)(D - 1);
                k13[0] = 0x00; k13[1] = 0x7c;                                           /* +Inf in K row 13 */
                nonfinite = false;
                sdpa_kv_record_import(&f, page2, 0, SDPA_PAGE_ROWS, 0, rec, 2 * rb, &badrow, &nonfinite);
                TU_CHECK(nonfinite, "float16 Inf in K row 13 sets nonfinite (D %d)", D);
                rec[0] = 0x00; rec[1] = 0x7c;
                nonfinite = false;
                sdpa_kv_record_import(&f, page2, 0, 1, 0, rec, 2 * rb, &badrow, &nonfinite);
                TU_CHECK(nonfinite, "float16 Inf sets nonfinite");
            }
            if (dtype == SDPA_DTYPE_INT8) {  /* scales */
                const float bad_scales[] = { -1.0f, NAN, FLT_EPSILON / 2, -0.0f, -INFINITY, 1e-40f };
                for (size_t k = 0; k < sizeof bad_scales / sizeof bad_scales[0]; k++) {
                    memcpy(rec + D, &bad_scales[k], 4);
                    badrow = -1;
                    TU_CHECK(sdpa_kv_record_import(&f, page2, 0, 1, 0, rec, 2 * rb, &badrow, &nonfinite) == SDPA_RECORD_BAD_SCALE &&
                             badrow == 0, "int8 scale %g refused", (double)bad_scales[k]);
                }
                const float good[] = { FLT_EPSILON, 1.0f, INFINITY, 3e38f };
                for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
                    memcpy(rec + D, &good[k], 4);
                    TU_CHECK(sdpa_kv_record_import(&f, page2, 0, 1, 0, rec, 2 * rb, &badrow, &nonfinite) == SDPA_RECORD_OK,
                             "int8 scale %g accepted", (double)good[k]);
                }
                memset(rec, 0, rb);  /* the all-zero record of an unwritten row */
                TU_CHECK(sdpa_kv_record_import(&f, page2, 0, 1, 0, rec, 2 * rb, &badrow, &nonfinite) == SDPA_RECORD_OK, "zero record ok");
                rec[D + 4] = 1;      /* scale 0 with a zero point: refused */
                TU_CHECK(sdpa_kv_record_import(&f, page2, 0, 1, 0, rec, 2 * rb, &badrow, &nonfinite) == SDPA_RECORD_BAD_SCALE, "zero scale, zp 1 refused");
            }
            free(page); free(page2); free(x); free(rec); free(raw);
        }
    TU_CHECK(sdpa_crc32c(0, "123456789", 9) == 0xE3069283u, "CRC-32C check value");
    {   /* the wasm build's 16-lane path (inputs of 64 KiB and more) against a bitwise CRC, split anywhere */
        const size_t n = 3 * 65536 + 777;
        unsigned char * b = tu_malloc(n);
        for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(tu_rng_u64(&g_rng) >> 56);
        uint32_t c = ~0u;
        for (size_t i = 0; i < n; i++) {
            c ^= b[i];
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        c = ~c;
        const size_t cut = 65536 + 3;
        TU_CHECK(sdpa_crc32c(0, b, n) == c && sdpa_crc32c(sdpa_crc32c(0, b, cut), b + cut, n - cut) == c, "CRC-32C of %zu bytes", n);
        free(b);
    }
    TU_CHECK(sdpa_kv_record_bytes(SDPA_DTYPE_INT4, 64) == 32 + 4 && sdpa_kv_record_bytes(SDPA_DTYPE_INT4, 33) == 17 + 4 &&
             sdpa_kv_record_bytes(SDPA_DTYPE_INT4, 65) == 33 + 8 && sdpa_kv_record_dtype_known(SDPA_DTYPE_INT4),
             "int4 record bytes: ceil(D/2) + 4 ceil(D/64)");
    /* format versions 1 and 2: 32-element groups */
    TU_CHECK(sdpa_kv_record_bytes_of_version(2, SDPA_DTYPE_INT4, 64) == 32 + 8 && sdpa_kv_record_bytes_of_version(1, SDPA_DTYPE_INT4, 33) == 17 + 8 &&
             sdpa_kv_record_bytes_of_version(2, SDPA_DTYPE_INT4, 32) == 16 + 4 && sdpa_kv_record_bytes_of_version(3, SDPA_DTYPE_INT4, 64) == 32 + 4 &&
             sdpa_kv_record_bytes_of_version(2, SDPA_DTYPE_INT8, 64) == 64 + 5, "int4 record bytes of versions 1 and 2: ceil(D/2) + 4 ceil(D/32)");
}

/* ---- save / load ---- */

/* The whole save of rows start .. start+len-1, read in pieces of `piece` bytes. */
static unsigned char * save_all(const sdpa_kv_cache * c, int32_t start, int32_t len, const char * meta, size_t piece, size_t * bytes) {
    sdpa_kv_saver * sv = NULL;
    sdpa_status s = sdpa_kv_save_begin(g_ctx, c, start, len, meta, meta ? strlen(meta) : 0, &sv);
    if (!TU_CHECK(s == SDPA_OK, "save_begin: %s", sdpa_ctx_last_error(g_ctx))) return NULL;
    const size_t total = (size_t)sdpa_kv_save_bytes(sv);
    unsigned char * out = tu_malloc(total + 1);
    size_t at = 0, n;
    while ((n = sdpa_kv_save_read(sv, out + at, piece < total + 1 - at ? piece : total + 1 - at)) > 0) at += n;
    TU_CHECK(at == total, "save read %zu of %zu bytes", at, total);
    sdpa_kv_save_free(sv);
    *bytes = total;
    return out;
}

static sdpa_status load_pieces(const unsigned char * data, size_t n, size_t piece, int32_t max_seq_len, sdpa_kv_cache ** out) {
    sdpa_kv_loader * L = NULL;
    sdpa_status s = sdpa_kv_load_begin(g_ctx, max_seq_len, &L);
    for (size_t at = 0; s == SDPA_OK && at < n; at += piece) {
        size_t used = 0, k = piece < n - at ? piece : n - at;
        s = sdpa_kv_load_feed(L, data + at, k, &used);
        if (s == SDPA_OK && used != k) s = SDPA_E_FORMAT;
    }
    if (s == SDPA_OK) s = sdpa_kv_load_finish(L, out);
    sdpa_kv_load_free(L);
    return s;
}

static int same_raw(const sdpa_kv_cache * a, const sdpa_kv_cache * b, int32_t start, int32_t len) {
    if (len == 0) return 1;
    int32_t B, H, D;
    sdpa_kv_cache_shape(a, &B, NULL, &H, &D);
    int ok = 1;
    for (int which = 0; which < 2; which++) {
        const size_t bytes = (size_t)B * (size_t)len * (size_t)H * sdpa_kv_cache_record_bytes(a, which);
        unsigned char * x = tu_malloc(bytes), * y = tu_malloc(bytes);
        sdpa_status s1 = sdpa_kv_cache_read_records(g_ctx, a, start, len, which, x, bytes);
        sdpa_status s2 = sdpa_kv_cache_read_records(g_ctx, b, start, len, which, y, bytes);
        ok &= s1 == SDPA_OK && s2 == SDPA_OK && memcmp(x, y, bytes) == 0 &&
              sdpa_kv_cache_record_bytes(a, which) == sdpa_kv_cache_record_bytes(b, which);
        free(x); free(y);
    }
    return ok;
}

enum { B = 2, HQ = 4, H = 2, D = 12 };

/* attend then one decode step on both caches: bit-identical outputs */
static void same_attention(sdpa_kv_cache * a, sdpa_kv_cache * b, const char * what) {
    const int32_t len = sdpa_kv_cache_length(a);
    float q[B * HQ * D], k[B * H * D], v[B * H * D], o1[B * HQ * D], o2[B * HQ * D];
    fill(q, sizeof q / 4); fill(k, sizeof k / 4); fill(v, sizeof v / 4);
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, 1, HQ, D), tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, 1, H, D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, 1, H, D);
    sdpa_tensor t1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, B, 1, HQ, D), t2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, B, 1, HQ, D);
    sdpa_options opt = { .start_pos = len - 1, .is_causal = 1 };
    if (len > 0) {
        sdpa_status s1 = sdpa_kv_cache_attend(g_ctx, a, &tq, NULL, &opt, &t1);
        sdpa_status s2 = sdpa_kv_cache_attend(g_ctx, b, &tq, NULL, &opt, &t2);
        TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "%s: attend %s / %s", what, sdpa_status_code(s1), sdpa_status_code(s2));
        tu_identical(what, o1, o2, sizeof o1 / 4, NULL);
    }
    opt.start_pos = len;
    sdpa_status s1 = sdpa_kv_cache_step(g_ctx, a, &tq, &tk, &tv, NULL, &opt, &t1);
    sdpa_status s2 = sdpa_kv_cache_step(g_ctx, b, &tq, &tk, &tv, NULL, &opt, &t2);
    TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "%s: step %s / %s: %s", what, sdpa_status_code(s1), sdpa_status_code(s2), sdpa_ctx_last_error(g_ctx));
    tu_identical(what, o1, o2, sizeof o1 / 4, NULL);
    TU_CHECK(sdpa_kv_cache_window_start(a) == sdpa_kv_cache_window_start(b), "%s: windowStart after a step", what);
}

static sdpa_kv_cache * filled_cache2(int32_t kdt, int32_t vdt, int32_t W, int32_t S, int32_t L, int32_t rows) {
    sdpa_kv_cache * c = NULL;
    const sdpa_kv_cache_desc desc = { B, L, H, D, kdt, vdt, W, S, 0 };
    sdpa_status s = sdpa_kv_cache_create_desc(g_ctx, &desc, &c);
    if (!TU_CHECK(s == SDPA_OK, "create: %s", sdpa_ctx_last_error(g_ctx))) return NULL;
    for (int32_t at = 0; at < rows;) {
        int32_t n = tu_rng_int(&g_rng, 1, 70);
        if (n > rows - at) n = rows - at;
        float * k = tu_malloc((size_t)B * n * H * D * 4), * v = tu_malloc((size_t)B * n * H * D * 4);
        fill(k, (size_t)B * n * H * D); fill(v, (size_t)B * n * H * D);
        sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, B, n, H, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, B, n, H, D);
        s = sdpa_kv_cache_update(g_ctx, c, &tk, &tv, at);
        TU_CHECK(s == SDPA_OK, "update: %s", sdpa_ctx_last_error(g_ctx));
        free(k); free(v);
        at += n;
    }
    return c;
}
static sdpa_kv_cache * filled_cache(int32_t dtype, int32_t W, int32_t S, int32_t L, int32_t rows) {
    return filled_cache2(dtype, dtype, W, S, L, rows);
}

static void test_round_trips(void) {
    const size_t pieces[] = { 1, 7, 64, 4096, (size_t)1 << 30 };
    for (size_t ti = 0; ti < N_DTYPES + 2; ti++)  /* every dtype, then K int8 / V int4 and K int4 / V float16 */
        for (int windowed = 0; windowed < 2; windowed++) {
            const int32_t dtype = ti < N_DTYPES ? DTYPES[ti] : ti == N_DTYPES ? SDPA_DTYPE_INT8 : SDPA_DTYPE_INT4;
            const int32_t vdtype = ti < N_DTYPES ? dtype : ti == N_DTYPES ? SDPA_DTYPE_INT4 : SDPA_DTYPE_FLOAT16;
            const int32_t W = windowed ? 40 : 0, S = windowed ? 5 : 0, L = windowed ? 4096 : 400;
            const int32_t rows = windowed ? 333 : 150;
            sdpa_kv_cache * c = filled_cache2(dtype, vdtype, W, S, L, rows);
            if (!c) continue;
            for (size_t pi = 0; pi < sizeof pieces / sizeof pieces[0]; pi++) {
                snprintf(tu_context, sizeof tu_context, "K dtype %d V dtype %d windowed %d piece %zu", dtype, vdtype, windowed, pieces[pi]);
                size_t n = 0;
                unsigned char * data = save_all(c, 0, rows, "{\"model\":\"x\"}", pieces[pi], &n);
                if (!data) continue;
                sdpa_kv_cache * r = NULL;
                sdpa_status s = load_pieces(data, n, pieces[(pi + 2) % 5], 0, &r);
                if (TU_CHECK(s == SDPA_OK, "load: %s", sdpa_ctx_last_error(g_ctx))) {
                    int32_t ws = sdpa_kv_cache_window_start(c);
                    TU_CHECK(sdpa_kv_cache_length(r) == rows && sdpa_kv_cache_window_start(r) == ws, "length %d windowStart %d (%d)",
                             sdpa_kv_cache_length(r), sdpa_kv_cache_window_start(r), ws);
                    TU_CHECK(sdpa_kv_cache_key_dtype(r) == dtype && sdpa_kv_cache_value_dtype(r) == vdtype && sdpa_kv_cache_window(r) == W &&
                             sdpa_kv_cache_sink_tokens(r) == S, "geometry");
                    TU_CHECK(sdpa_kv_cache_bytes(r) == sdpa_kv_cache_bytes(c), "bytes %g vs %g", sdpa_kv_cache_bytes(r), sdpa_kv_cache_bytes(c));
                    if (windowed) {
                        TU_CHECK(same_raw(c, r, 0, S), "sink rows");
                        TU_CHECK(same_raw(c, r, ws, rows - ws), "kept rows");
                    } else {
                        TU_CHECK(same_raw(c, r, 0, rows), "rows");
                    }
                    if (pi == 0) {
                        sdpa_kv_cache * twin = NULL;
                        sdpa_kv_cache_fork(g_ctx, c, &twin);
                        same_attention(twin, r, tu_context);
                        sdpa_kv_cache_free(twin);
                    }
                    /* the one-buffer form; one trailing byte is refused */
                    sdpa_kv_cache * r2 = NULL;
                    TU_CHECK(sdpa_kv_cache_load(g_ctx, data, n, 0, &r2) == SDPA_OK && r2, "one-buffer load");
                    sdpa_kv_cache_free(r2);
                    const int64_t before = in_use();
                    unsigned char * longer = tu_malloc(n + 1);
                    memcpy(longer, data, n);
                    longer[n] = 0;
                    r2 = NULL;
                    s = sdpa_kv_cache_load(g_ctx, longer, n + 1, 0, &r2);
                    TU_CHECK(s == SDPA_E_FORMAT && !r2 && tu_contains_ci(sdpa_ctx_last_error(g_ctx), "1 bytes follow"), "trailing: %s",
                             sdpa_ctx_last_error(g_ctx));
                    TU_CHECK(in_use() == before, "trailing byte: pool unchanged");
                    free(longer);
                }
                sdpa_kv_cache_free(r);
                free(data);
            }
            /* a prefix of a plain cache; a save starting after 0 */
            if (!windowed) {
                tu_context[0] = 0;
                size_t n = 0;
                unsigned char * data = save_all(c, 0, 70, NULL, 4096, &n);
                sdpa_kv_cache * r = NULL;
                if (data && TU_CHECK(sdpa_kv_cache_load(g_ctx, data, n, 100, &r) == SDPA_OK, "prefix load")) {
                    int32_t msl;
                    sdpa_kv_cache_shape(r, NULL, &msl, NULL, NULL);
                    TU_CHECK(sdpa_kv_cache_length(r) == 70 && msl == 100 && same_raw(c, r, 0, 70), "prefix rows, maxSeqLen 100");
                    sdpa_kv_cache_free(r);
                }
                r = NULL;
                TU_CHECK(data && sdpa_kv_cache_load(g_ctx, data, n, 69, &r) == SDPA_E_FORMAT && !r &&
                         tu_contains_ci(sdpa_ctx_last_error(g_ctx), "maxSeqLen is 69"), "maxSeqLen below the length: %s", sdpa_ctx_last_error(g_ctx));
                free(data);
                data = save_all(c, 64, 30, NULL, 100, &n);
                if (data && TU_CHECK(sdpa_kv_cache_load(g_ctx, data, n, 0, &r) == SDPA_OK, "offset load")) {
                    TU_CHECK(sdpa_kv_cache_length(r) == 94 && same_raw(c, r, 64, 30), "rows 64 .. 93");
                    sdpa_kv_cache_free(r);
                }
                free(data);
            }
            sdpa_kv_cache_free(c);
        }
    tu_context[0] = 0;
}

static void test_save_rules(void) {
    sdpa_kv_cache * c = filled_cache(SDPA_DTYPE_FLOAT32, 0, 0, 100, 20);
    sdpa_kv_saver * sv = NULL;
    TU_CHECK(sdpa_kv_save_begin(g_ctx, c, -1, 5, NULL, 0, &sv) == SDPA_E_START_POS && !sv, "start -1");
    TU_CHECK(sdpa_kv_save_begin(g_ctx, c, 0, -1, NULL, 0, &sv) == SDPA_E_DIMS, "length -1");
    TU_CHECK(sdpa_kv_save_begin(g_ctx, c, 10, 11, NULL, 0, &sv) == SDPA_E_CAPACITY &&
             tu_contains_ci(sdpa_ctx_last_error(g_ctx), "sdpa_kv_save_begin: rows 10 .. 20 are past the 20 rows written"), "%s", sdpa_ctx_last_error(g_ctx));
    TU_CHECK(sdpa_kv_save_begin(g_ctx, c, 0, 1, "x", SDPA_STATE_MAX_META + 1, &sv) == SDPA_E_ARG, "meta too big");
    TU_CHECK(sdpa_kv_save_begin(g_ctx, c, 20, 0, NULL, 0, &sv) == SDPA_OK, "an empty save");
    sdpa_kv_save_free(sv);
    sdpa_kv_cache_free(c);
    c = filled_cache(SDPA_DTYPE_FLOAT32, 16, 3, 4096, 300);
    const int32_t ws = sdpa_kv_cache_window_start(c);
    TU_CHECK(ws > 3, "evicted rows exist (%d)", ws);
    TU_CHECK(sdpa_kv_save_begin(g_ctx, c, 0, ws - 1, NULL, 0, &sv) == SDPA_E_CAPACITY &&
             tu_contains_ci(sdpa_ctx_last_error(g_ctx), "inside the evicted rows"), "%s", sdpa_ctx_last_error(g_ctx));
    TU_CHECK(sdpa_kv_save_begin(g_ctx, c, 0, 3, NULL, 0, &sv) == SDPA_OK, "sink rows only");
    sdpa_kv_save_free(sv);
    sdpa_kv_cache_free(c);
}

/* A small save, then every prefix and every bit flip of it: E_FORMAT, nothing made. */
static void test_bad_input(void) {
    for (size_t ti = 0; ti < N_DTYPES; ti++) {
        sdpa_kv_cache * c = filled_cache(DTYPES[ti], 0, 0, 16, 3);
        size_t n = 0;
        unsigned char * data = save_all(c, 0, 3, "{}", 1 << 20, &n);
        sdpa_kv_cache_free(c);
        if (!data) continue;
        const int64_t before = in_use();
        int bad_prefix = 0, bad_flip = 0;
        for (size_t k = 0; k < n; k++) {
            sdpa_kv_cache * r = NULL;
            sdpa_status s = sdpa_kv_cache_load(g_ctx, data, k, 0, &r);
            bad_prefix += s != SDPA_E_FORMAT || r || in_use() != before;
            if (k == n / 2) TU_CHECK(tu_contains_ci(sdpa_ctx_last_error(g_ctx), "the data ends after"), "%s", sdpa_ctx_last_error(g_ctx));
        }
        for (size_t bit = 0; bit < n * 8; bit++) {
            data[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            sdpa_kv_cache * r = NULL;
            sdpa_status s = sdpa_kv_cache_load(g_ctx, data, n, 0, &r);
            bad_flip += s != SDPA_E_FORMAT || r || in_use() != before;
            if (bad_flip == 1 && (s != SDPA_E_FORMAT || r)) printf("bit %zu: %s %s\n", bit, sdpa_status_code(s), sdpa_ctx_last_error(g_ctx));
            data[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        }
        TU_CHECK(bad_prefix == 0 && bad_flip == 0, "dtype %d: %d prefixes and %d bit flips not E_FORMAT (of %zu bytes)", DTYPES[ti], bad_prefix,
                 bad_flip, n);
        free(data);
    }
}

/* Header fields changed with the CRC recomputed: each rule of the header. */
static void set32(unsigned char * p, uint32_t v) { memcpy(p, &v, 4); }
static void reseal(unsigned char * d) {
    uint32_t hb;
    memcpy(&hb, d + 12, 4);
    set32(d + hb - 4, sdpa_crc32c(0, d, hb - 4));
}

static void test_crafted_headers(void) {
    sdpa_kv_cache * c = filled_cache(SDPA_DTYPE_INT8, 0, 0, 64, 2);
    size_t n = 0;
    unsigned char * data = save_all(c, 0, 2, NULL, 1 << 20, &n);
    sdpa_kv_cache_free(c);
    if (!data) return;
    unsigned char * d = tu_malloc(n);
    const int64_t before = in_use();
    struct { size_t at; uint32_t v; sdpa_status want; const char * text; } cases[] = {
        { 8, 4, SDPA_E_FORMAT, "format version 4 is newer" },
        { 16, 1, SDPA_E_FORMAT, "flags" },
        { 20, 9, SDPA_E_FORMAT, "no cache dtype" },
        { 20, 2, SDPA_E_FORMAT, "no cache dtype" },
        { 20, 5, SDPA_E_FORMAT, "record sizes are 17 (K) and 17 (V) bytes; K int4 / V int8 at head dim 12 have" },  /* (K int4, V int8: a cache, but not these records) */
        { 20, 3, SDPA_E_FORMAT, "record sizes" },
        { 28, 0, SDPA_E_FORMAT, "the saved geometry is not a cache's: batch is 0" },
        { 32, 0, SDPA_E_FORMAT, "numKvHeads is 0" },
        { 36, 0x80000000u, SDPA_E_FORMAT, "headDim is 2147483648" },
        { 40, 1, SDPA_E_FORMAT, "length 2 is past its maxSeqLen 1" },
        { 44, 0, SDPA_E_FORMAT, "" },  /* unchanged: window already 0 -> passes; replaced below */
        { 48, 4, SDPA_E_FORMAT, "sinkTokens is 4 but no window" },
        { 52, 3, SDPA_E_FORMAT, "start 3 is past its length 2" },
        { 60, 1, SDPA_E_FORMAT, "windowStart is 1 but the cache is not windowed" },
        { 64, 11, SDPA_E_FORMAT, "record sizes" },
        { 72, 1, SDPA_E_FORMAT, "payload bytes" },
        { 80, 3, SDPA_E_FORMAT, "rows per head" },
        { 84, 1, SDPA_E_FORMAT, "reserved" },
        { 88, 1, SDPA_E_FORMAT, "meta is 1 bytes" },
        { 28, 1000000, SDPA_E_FORMAT, "payload bytes" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].at == 44) continue;
        memcpy(d, data, n);
        set32(d + cases[i].at, cases[i].v);
        if (cases[i].at != 8) reseal(d);
        sdpa_kv_cache * r = NULL;
        sdpa_status s = sdpa_kv_cache_load(g_ctx, d, n, 0, &r);
        TU_CHECK(s == cases[i].want && !r && tu_contains_ci(sdpa_ctx_last_error(g_ctx), cases[i].text) && in_use() == before,
                 "field @%zu = %u: %s %s", cases[i].at, cases[i].v, sdpa_status_code(s), sdpa_ctx_last_error(g_ctx));
        TU_CHECK(strncmp(sdpa_ctx_last_error(g_ctx), "sdpa_kv_cache_load: ", 20) == 0 &&
                 !strstr(sdpa_ctx_last_error(g_ctx) + 20, "sdpa_"), "message names the function, once: %s", sdpa_ctx_last_error(g_ctx));
    }
    /* a magic byte; a bad int8 scale in the payload (CRC resealed): E_FORMAT naming the record */
    memcpy(d, data, n);
    d[1] = 'X';
    TU_CHECK(sdpa_kv_cache_load(g_ctx, d, n, 0, &(sdpa_kv_cache *){ NULL }) == SDPA_E_FORMAT &&
             tu_contains_ci(sdpa_ctx_last_error(g_ctx), "not saved KV state"), "%s", sdpa_ctx_last_error(g_ctx));
    memcpy(d, data, n);
    uint32_t hb;
    memcpy(&hb, d + 12, 4);
    const float neg = -2.0f;
    memcpy(d + hb + 12, &neg, 4);  /* first K record's scale (D = 12) */
    set32(d + n - 4, sdpa_crc32c(0, d + hb, n - 4 - hb));
    sdpa_kv_cache * r = NULL;
    TU_CHECK(sdpa_kv_cache_load(g_ctx, d, n, 0, &r) == SDPA_E_FORMAT && !r &&
             tu_contains_ci(sdpa_ctx_last_error(g_ctx), "the K record of batch row 0, head 0, row 0") && in_use() == before,
             "bad scale: %s", sdpa_ctx_last_error(g_ctx));
    /* a consistent header for far more pages than the heap holds: E_OOM, pool unchanged */
    memcpy(d, data, n);
    set32(d + 28, 60000);   /* batch */
    set32(d + 40, 1 << 20); /* maxSeqLen */
    set32(d + 56, 1 << 20); /* length */
    set32(d + 80, 1 << 20); /* rows per head */
    uint64_t payload = (uint64_t)60000 * H * (1 << 20) * (2 * (D + 5));
    memcpy(d + 72, &payload, 8);
    reseal(d);
    r = NULL;
    sdpa_status s = sdpa_kv_cache_load(g_ctx, d, hb, 0, &r);
    TU_CHECK(s == SDPA_E_OOM && !r && in_use() == before, "huge: %s %s", sdpa_status_code(s), sdpa_ctx_last_error(g_ctx));
    free(d);
    free(data);
}

/* The group container's header (FORMAT.md section 5): written, then checked
 * as it arrives (the fixed part, then the whole), every prefix, every bit
 * flip and each rule with the CRC recomputed. */
static void test_group_header(void) {
    static const char meta[] = "{\"run\":1}";
    const size_t m = sizeof meta - 1;
    const size_t n = sdpa_kv_group_header_write(3, meta, m, NULL, 0);
    TU_CHECK(n == 24 + m + 4, "header bytes %zu", n);
    TU_CHECK(sdpa_kv_group_header_write(3, NULL, (size_t)SDPA_STATE_MAX_META + 1, NULL, 0) == 0, "meta above the limit");
    unsigned char * h = tu_malloc(n);
    TU_CHECK(sdpa_kv_group_header_write(3, meta, m, h, n - 1) == n, "a short buffer is not written");
    TU_CHECK(sdpa_kv_group_header_write(3, meta, m, h, n) == n, "written");
    TU_CHECK(memcmp(h, "\x89SDPAKG\n", 8) == 0 && memcmp(h + 24, meta, m) == 0, "magic and meta");
    uint32_t need = 0, layers = 0, at = 0, mb = 0;
    sdpa_status s = sdpa_kv_group_header_check(g_ctx, NULL, 0, 0, &need, &layers, &at, &mb);
    TU_CHECK(s == SDPA_OK && need == 24 && layers == 0, "no bytes: need %u", need);
    s = sdpa_kv_group_header_check(g_ctx, h, 24, 0, &need, &layers, &at, &mb);
    TU_CHECK(s == SDPA_OK && need == n && layers == 0, "fixed part: need %u", need);
    s = sdpa_kv_group_header_check(g_ctx, h, n, 0, &need, &layers, &at, &mb);
    TU_CHECK(s == SDPA_OK && layers == 3 && at == 24 && mb == m, "whole: %s layers %u meta %u at %u", sdpa_status_code(s), layers, mb, at);
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        s = sdpa_kv_group_header_check(g_ctx, h, k, 1, &need, &layers, &at, &mb);
        bad += s != SDPA_E_FORMAT || !tu_contains_ci(sdpa_ctx_last_error(g_ctx), "inside the group header");
    }
    TU_CHECK(bad == 0, "%d prefixes not E_FORMAT", bad);
    TU_CHECK(tu_contains_ci(sdpa_ctx_last_error(g_ctx), "sdpa_kv_group_header_check: the data ends after"), "%s", sdpa_ctx_last_error(g_ctx));
    for (size_t bit = 0; bit < n * 8; bit++) {
        h[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        const bool size = bit / 8 >= 16 && bit / 8 < 20;  /* a flipped meta size asks for other bytes: the fixed part tells */
        const size_t have = size ? 24 : n;
        s = sdpa_kv_group_header_check(g_ctx, h, have, 0, &need, &layers, &at, &mb);
        const bool ok = s == SDPA_E_FORMAT || (have == 24 && s == SDPA_OK && need != n && layers == 0);
        if (!ok && bad++ == 0) printf("bit %zu: %s %s\n", bit, sdpa_status_code(s), sdpa_ctx_last_error(g_ctx));
        h[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    TU_CHECK(bad == 0, "%d bit flips accepted", bad);
    /* each rule, the CRC recomputed */
    static const struct { size_t at; uint32_t v; const char * says; } rules[] = {
        { 8, 2, "group format version 2 is newer than this build" }, { 12, 0, "says 0 layers" },
        { 12, 65537, "says 65537 layers" }, { 20, 1, "reserved field (byte 20) is not 0" },
    };
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        unsigned char * d = tu_malloc(n);
        memcpy(d, h, n);
        set32(d + rules[r].at, rules[r].v);
        set32(d + n - 4, sdpa_crc32c(0, d, n - 4));
        s = sdpa_kv_group_header_check(g_ctx, d, n, 0, &need, &layers, &at, &mb);
        TU_CHECK(s == SDPA_E_FORMAT && tu_contains_ci(sdpa_ctx_last_error(g_ctx), rules[r].says), "rule %zu: %s", r, sdpa_ctx_last_error(g_ctx));
        free(d);
    }
    free(h);
}

int main(void) {
    tu_rng_seed(&g_rng, tu_base_seed(20));
    sdpa_status s;
    g_ctx = sdpa_ctx_create(2, &s);
    if (!g_ctx) return 1;
    test_records();
    test_round_trips();
    test_save_rules();
    test_bad_input();
    test_crafted_headers();
    test_group_header();
    sdpa_ctx_free(g_ctx);
    return tu_summary("test_state");
}
