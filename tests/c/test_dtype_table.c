/*
 * test_dtype_table.c: the cache dtype table (src/cache/kv_dtype.c) against
 * what the rest of the tree states of each dtype:
 *   - rows in sdpa_dtype number order, each found by sdpa_dtype_traits_of,
 *     named as sdpa_kv_record_dtype_name says, every column filled (the
 *     integer dtypes with side data, the others without);
 *   - the record bytes its parts sum to are kv_record.h's formulas (4 D, 2 D,
 *     D + 5, ceil(D / 2) + 4 ceil(D / 64)) for head dims 1 .. 300;
 *   - the page format made for each K / V pair takes its layouts and element
 *     bytes from the rows;
 *   - the lists messages print ("float32, float16, int8 or int4",
 *     "float32 1, float16 3, int8 4, int4 5");
 *   - numbers outside the table are no cache dtype (bool included);
 *   - the kernel table (src/kernels/tile_sources.c): rows in number order,
 *     each of a cache dtype, each naming only sources that read its own
 *     dtype (or decode), small tiles for the integer dtypes, and the decoded
 *     sources for a dtype without a row.
 */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "cache/kv_dtype.h"
#include "cache/kv_format.h"
#include "cache/kv_record.h"
#include "kernels/tile_sources.h"

static uint64_t expected_record_bytes(int32_t dtype, uint64_t D) {
    switch (dtype) {
        case SDPA_DTYPE_FLOAT32: return 4 * D;
        case SDPA_DTYPE_FLOAT16: return 2 * D;
        case SDPA_DTYPE_INT8: return D + 5;
        case SDPA_DTYPE_INT4: return (D + 1) / 2 + 4 * ((D + 63) / 64);
        default: return 0;
    }
}

static void test_rows(void) {
    TU_CHECK(sdpa_dtype_count == 4, "the table has %d rows; expected 4", sdpa_dtype_count);
    for (int32_t i = 0; i < sdpa_dtype_count; i++) {
        const sdpa_dtype_traits * t = &sdpa_dtype_table[i];
        TU_CHECK(i == 0 || sdpa_dtype_table[i - 1].dtype < t->dtype, "row %d (%s) is out of number order", i, t->name);
        TU_CHECK(sdpa_dtype_traits_of(t->dtype) == t, "sdpa_dtype_traits_of(%d) does not find row %d", t->dtype, i);
        TU_CHECK(strcmp(sdpa_kv_record_dtype_name(t->dtype), t->name) == 0, "%s: record name %s", t->name,
                 sdpa_kv_record_dtype_name(t->dtype));
        TU_CHECK(t->geometry && t->encode_row && t->decode && t->record_parts && t->n_record_parts > 0 &&
                 t->record_export && t->record_import, "%s: a column is empty", t->name);
        const bool integer = t->dtype == SDPA_DTYPE_INT8 || t->dtype == SDPA_DTYPE_INT4;
        TU_CHECK((t->clear_side != NULL) == integer && sdpa_dtype_kernels_of(t->dtype)->small_tiles == integer,
                 "%s: side data / small tiles", t->name);
        TU_CHECK(sdpa_is_cache_dtype(t->dtype) && sdpa_kv_record_dtype_known(t->dtype), "%s: not a cache dtype", t->name);
        for (int32_t D = 1; D <= 300; D++) {
            const uint64_t got = sdpa_kv_record_bytes(t->dtype, D), want = expected_record_bytes(t->dtype, (uint64_t)D);
            if (!TU_CHECK(got == want, "%s D=%d: record bytes %llu; expected %llu", t->name, D, (unsigned long long)got,
                          (unsigned long long)want)) break;
        }
    }
    const int32_t others[] = { 0, SDPA_DTYPE_BOOL, 2, 6, 7, -1, 255 };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        if (others[i] == SDPA_DTYPE_FLOAT32 || others[i] == SDPA_DTYPE_FLOAT16 || others[i] == SDPA_DTYPE_INT8 ||
            others[i] == SDPA_DTYPE_INT4) continue;
        TU_CHECK(!sdpa_dtype_traits_of(others[i]) && !sdpa_is_cache_dtype(others[i]) &&
                 sdpa_kv_record_bytes(others[i], 64) == 0 && strcmp(sdpa_kv_record_dtype_name(others[i]), "unknown") == 0,
                 "dtype %d is no cache dtype", others[i]);
    }
}

static void test_formats(void) {
    for (int32_t k = 0; k < sdpa_dtype_count; k++)
        for (int32_t v = 0; v < sdpa_dtype_count; v++)
            for (int32_t D = 1; D <= 130; D += 43) {
                const sdpa_dtype_traits * kt = &sdpa_dtype_table[k], * vt = &sdpa_dtype_table[v];
                sdpa_page_format f;
                TU_CHECK(sdpa_page_format_make(&f, kt->dtype, vt->dtype, D) > 0, "%s/%s D=%d: no format", kt->name, vt->name, D);
                TU_CHECK(f.block[0].dtype == kt->dtype && f.block[0].layout == kt->layout[0] &&
                         f.block[0].elem_bytes == kt->elem_bytes && f.block[1].dtype == vt->dtype &&
                         f.block[1].layout == vt->layout[1] && f.block[1].elem_bytes == vt->elem_bytes,
                         "%s/%s D=%d: the blocks are not the rows'", kt->name, vt->name, D);
                TU_CHECK(f.page_bytes % 64 == 0, "%s/%s D=%d: page bytes %zu", kt->name, vt->name, D, f.page_bytes);
            }
}

/* The dtype whose stored blocks a source reads in place (0: a decoded tile,
 * any dtype's; -1: caller rows, which no page is read as). */
static int32_t k_source_dtype(k_source k) {
    switch (k) {
        case K_F32_TRANSPOSED: return -1;
        case K_F32_PAGE: return SDPA_DTYPE_FLOAT32;
        case K_F16_PAGE: return SDPA_DTYPE_FLOAT16;
        case K_I8_PAGE: return SDPA_DTYPE_INT8;
        case K_I4_PAGE: return SDPA_DTYPE_INT4;
        default: return 0;
    }
}
static int32_t v_source_dtype(v_source v) {
    switch (v) {
        case V_F32_ROWS: return SDPA_DTYPE_FLOAT32;
        case V_F16_PAGE: return SDPA_DTYPE_FLOAT16;
        case V_I8_PAGE: return SDPA_DTYPE_INT8;
        case V_I4_PAGE: return SDPA_DTYPE_INT4;
        default: return 0;
    }
}

static void test_kernel_table(void) {
    for (int32_t i = 0; i < sdpa_dtype_kernel_count; i++) {
        const sdpa_dtype_kernels * k = &sdpa_dtype_kernel_table[i];
        const int32_t d = k->dtype;
        TU_CHECK(i == 0 || sdpa_dtype_kernel_table[i - 1].dtype < d, "kernel row %d (dtype %d) is out of number order", i, d);
        TU_CHECK(sdpa_dtype_traits_of(d) != NULL, "kernel row %d: dtype %d has no storage row", i, d);
        TU_CHECK(sdpa_dtype_kernels_of(d) == k, "sdpa_dtype_kernels_of(%d) does not find row %d", d, i);
        const k_source ks[2] = { k->k_tile, k->k_tile_marked };
        const v_source vs[2] = { k->v_tile, k->v_tile_marked };
        for (int m = 0; m < 2; m++) {
            TU_CHECK(k_source_dtype(ks[m]) == 0 || k_source_dtype(ks[m]) == d, "dtype %d: K source %d reads another dtype", d, (int)ks[m]);
            TU_CHECK(v_source_dtype(vs[m]) == 0 || v_source_dtype(vs[m]) == d, "dtype %d: V source %d reads another dtype", d, (int)vs[m]);
        }
        /* a marked page (a float16 Inf / NaN, an int4 NaN group) is never read by the in-place half converters */
        TU_CHECK(k->k_tile_marked != K_F16_PAGE && k->k_tile_marked != K_I4_PAGE && k->v_tile_marked != V_F16_PAGE &&
                 k->v_tile_marked != V_I4_PAGE, "dtype %d: a marked page read in place", d);
    }
    const int32_t others[] = { 0, SDPA_DTYPE_BOOL, 2, 6, -1 };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        const sdpa_dtype_kernels * k = sdpa_dtype_kernels_of(others[i]);
        TU_CHECK(k && k->k_tile == K_DECODED && k->k_tile_marked == K_DECODED && k->v_tile == V_DECODED &&
                 k->v_tile_marked == V_DECODED && !k->small_tiles, "dtype %d: not the decoded row", others[i]);
    }
}

static void test_lists(void) {
    char buf[128];
    sdpa_dtype_list(buf, sizeof buf, false);
    TU_CHECK(strcmp(buf, "float32, float16, int8 or int4") == 0, "names: %s", buf);
    sdpa_dtype_list(buf, sizeof buf, true);
    TU_CHECK(strcmp(buf, "float32 1, float16 3, int8 4, int4 5") == 0, "numbers: %s", buf);
    char small[8];
    sdpa_dtype_list(small, sizeof small, false);
    TU_CHECK(strlen(small) < sizeof small, "a short buffer is cut, not overrun: %s", small);
}

int main(void) {
    double t0 = tu_seconds();
    test_rows();
    test_formats();
    test_kernel_table();
    test_lists();
    printf("  %.2f s\n", tu_seconds() - t0);
    return tu_summary("test_dtype_table");
}
