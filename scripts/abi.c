/* abi.c: prints js/abi.js, everything the JS wrapper knows of the C side's
 * binary interface: struct sizes and field offsets (offsetof / sizeof),
 * status codes, dtype numbers, limits and the row records' parts, each taken
 * from include/sdpa.h or the library itself, so no number is typed twice.
 *
 * Compiled for wasm32 by emcc (a native build has 8-byte pointers and other
 * offsets) in build/wasm, linked with the library (CMakeLists.txt: target
 * sdpa_abi) and run by node; `npm run build` copies its output over
 * js/abi.js when it differs, and tests/js/abi.test.js fails when the
 * committed js/abi.js is not what this prints. A generated module rather than
 * a report at load: errors.js, rules.js, snapshot.js and loader.js need these numbers
 * before any instance exists.
 *
 * The static_asserts here are what the JS side assumes of the layout (wasm32
 * pointers, 4-byte fields it writes through Int32Array / Float32Array views);
 * src/wasm/exports.c pins the offsets include/sdpa.h documents. Each
 * struct's field list is complete: a field it lacks fails this program, so
 * the build (END_STRUCT below).
 *
 * Usage: node sdpa_abi.js [OUT]   (no OUT: standard output) */
#include "sdpa.h"
#include "sdpa_dense.h"
#include "wasm/api.h"
#include "cache/kv_record.h"
#include "cache/kv_dtype.h"

#include <assert.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static_assert(sizeof(void *) == 4 && sizeof(size_t) == 4, "js/abi.js describes wasm32: build this with emcc");

static FILE * out;

/* A struct's list is complete: END_STRUCT compares the fields listed since
 * STRUCT with every field the compiler sees in the struct (clang's
 * __builtin_dump_struct names them) and a field left out fails the program,
 * so the build, naming it. Layout arithmetic cannot do this: a left-out field
 * that fits in what would otherwise be padding leaves every offset and the
 * size as they are. */
enum { MAX_FIELDS = 32 };
static const char * listed[MAX_FIELDS];  /* the current struct's list */
static int n_listed;
static const char * seen[MAX_FIELDS];    /* its fields as the compiler sees them */
static int n_seen, depth, incomplete;

static void list_field(const char * name) {
    if (n_listed == MAX_FIELDS) {
        fprintf(stderr, "scripts/abi.c: more than %d fields in a struct: raise MAX_FIELDS\n", MAX_FIELDS);
        incomplete = 1;
        return;
    }
    listed[n_listed++] = name;
}

/* __builtin_dump_struct's printer, as clang 14 (emcc 3.1.6) calls it: pieces
 * "T {\n", then per field "type name : " and a value's format, a nested
 * struct's pieces indented, and "}\n". A field of the struct itself is a
 * "... name : " piece at depth 1; its name is the word before " : ". */
__attribute__((format(printf, 1, 2))) static int collect_field(const char * piece, ...) {
    const size_t n = strlen(piece);
    if (n >= 2 && strcmp(piece + n - 2, "{\n") == 0) depth++;
    else if (n >= 2 && strcmp(piece + n - 2, "}\n") == 0) depth--;
    else if (depth == 1 && n > 3 && strcmp(piece + n - 3, " : ") == 0 && n_seen < MAX_FIELDS) {
        static char names[MAX_FIELDS][64];
        const char * end = piece + n - 3, * start = end;
        while (start > piece && start[-1] != ' ' && start[-1] != '*') start--;
        snprintf(names[n_seen], sizeof names[n_seen], "%.*s", (int)(end - start), start);
        seen[n_seen] = names[n_seen];
        n_seen++;
    }
    return 0;
}

static void check_complete(const char * name) {
    if (n_seen == 0) {
        fprintf(stderr, "scripts/abi.c: __builtin_dump_struct named no field of %s (another clang's format?)\n", name);
        incomplete = 1;
    }
    for (int i = 0; i < n_seen; i++) {
        int found = 0;
        for (int j = 0; j < n_listed && !found; j++) found = strcmp(seen[i], listed[j]) == 0;
        if (!found) {
            fprintf(stderr, "scripts/abi.c: %s.%s is not in its list: add FIELD(%s, %s), or UNUSED(%s, %s) for a field JS never touches\n",
                    name, seen[i], name, seen[i], name, seen[i]);
            incomplete = 1;
        }
    }
    n_listed = n_seen = depth = 0;
}

static void begin_struct(const char * name, size_t size, size_t align) {
    fprintf(out, "  %s: Object.freeze({ size: %zu, align: %zu", name, size, align);
}
static void field(const char * name, size_t offset) {
    fprintf(out, ", %s: %zu", name, offset);
    list_field(name);
}
static void end_struct(void) { fprintf(out, " }),\n"); }

/* A field JS reads or writes: its offset, 4-byte aligned (JS uses Int32Array,
 * Uint32Array and Float32Array views; an int64 as two 32-bit words). */
#define STRUCT(S) begin_struct(#S, sizeof(S), alignof(S))
#define FIELD(S, f)                                                                 \
    do {                                                                            \
        static_assert(offsetof(S, f) % 4 == 0, #S "." #f ": JS needs 4-byte fields"); \
        field(#f, offsetof(S, f));                                                  \
    } while (0)
/* A field JS never touches (padding, reserved): listed, not printed. */
#define UNUSED(S, f) list_field(((void)offsetof(S, f), #f))
#define END_STRUCT(S)                                     \
    do {                                                  \
        static S probe;                                   \
        __builtin_dump_struct(&probe, &collect_field);    \
        check_complete(#S);                               \
        end_struct();                                     \
    } while (0)

static void layout(void) {
    fprintf(out, "/** Struct sizes, alignments and field offsets in bytes (include/sdpa.h), on wasm32. */\n");
    fprintf(out, "export const LAYOUT = Object.freeze({\n");
    STRUCT(sdpa_tensor);
    FIELD(sdpa_tensor, data); FIELD(sdpa_tensor, len); FIELD(sdpa_tensor, dtype); FIELD(sdpa_tensor, rank);
    FIELD(sdpa_tensor, dims);
    END_STRUCT(sdpa_tensor);
    STRUCT(sdpa_options);
    FIELD(sdpa_options, start_pos); FIELD(sdpa_options, is_causal); FIELD(sdpa_options, has_scale);
    FIELD(sdpa_options, scale); FIELD(sdpa_options, dropout_p); FIELD(sdpa_options, window);
    FIELD(sdpa_options, softcap); FIELD(sdpa_options, sinks); FIELD(sdpa_options, tree_mask);
    FIELD(sdpa_options, rotary);
    END_STRUCT(sdpa_options);
    STRUCT(sdpa_rotary);
    FIELD(sdpa_rotary, cos); FIELD(sdpa_rotary, sin); FIELD(sdpa_rotary, interleaved);
    FIELD(sdpa_rotary, n_positions); FIELD(sdpa_rotary, positions);
    END_STRUCT(sdpa_rotary);
    STRUCT(sdpa_memory_stats);
    FIELD(sdpa_memory_stats, bytes_reserved); FIELD(sdpa_memory_stats, bytes_in_use);
    FIELD(sdpa_memory_stats, bytes_free); FIELD(sdpa_memory_stats, pages_in_use);
    FIELD(sdpa_memory_stats, pages_free); FIELD(sdpa_memory_stats, page_rows); UNUSED(sdpa_memory_stats, unused);
    END_STRUCT(sdpa_memory_stats);
    STRUCT(sdpa_kv_cache_size);
    FIELD(sdpa_kv_cache_size, pages); FIELD(sdpa_kv_cache_size, page_bytes); FIELD(sdpa_kv_cache_size, pool_bytes);
    FIELD(sdpa_kv_cache_size, table_bytes); FIELD(sdpa_kv_cache_size, bytes);
    END_STRUCT(sdpa_kv_cache_size);
    STRUCT(sdpa_kv_cache_desc);
    FIELD(sdpa_kv_cache_desc, batch); FIELD(sdpa_kv_cache_desc, max_seq_len); FIELD(sdpa_kv_cache_desc, kv_heads);
    FIELD(sdpa_kv_cache_desc, head_dim); FIELD(sdpa_kv_cache_desc, key_dtype); FIELD(sdpa_kv_cache_desc, value_dtype);
    FIELD(sdpa_kv_cache_desc, window); FIELD(sdpa_kv_cache_desc, sink_tokens);
    FIELD(sdpa_kv_cache_desc, float16_newest_page);
    END_STRUCT(sdpa_kv_cache_desc);
    STRUCT(sdpa_attend_item);
    FIELD(sdpa_attend_item, cache); FIELD(sdpa_attend_item, query); FIELD(sdpa_attend_item, mask);
    FIELD(sdpa_attend_item, options); FIELD(sdpa_attend_item, out); FIELD(sdpa_attend_item, key);
    FIELD(sdpa_attend_item, value);
    END_STRUCT(sdpa_attend_item);
    fprintf(out, "});\n");
    fprintf(out, "/** Entries of sdpa_tensor.dims. */\nexport const TENSOR_MAX_RANK = %zu;\n",
            sizeof ((sdpa_tensor *)0)->dims / sizeof ((sdpa_tensor *)0)->dims[0]);
    fprintf(out, "/** Bytes of a pointer or size_t argument (sdpa_kv_cache ** out, size_t * consumed). */\n"
                 "export const POINTER_BYTES = %zu;\n\n", sizeof(void *));
}

static void status_codes(void) {
    fprintf(out, "/** sdpa_status codes by number (sdpa_status_code); the order is CONTRACT.md section 2's table order. */\n");
    fprintf(out, "export const STATUS_CODES = Object.freeze([");
    for (int s = 0; strcmp(sdpa_status_code((sdpa_status)s), "E_UNKNOWN") != 0; s++)
        fprintf(out, "%s'%s'", s ? ", " : "", sdpa_status_code((sdpa_status)s));
    fprintf(out, "]);\n\n");
}

static void dtypes(void) {
    fprintf(out, "/** The dtypes of an sdpa_tensor (inputs, outputs, masks): their sdpa_dtype number and bytes per element. */\n");
    fprintf(out, "export const TENSOR_DTYPES = Object.freeze({\n");
    fprintf(out, "  float32: Object.freeze({ id: %d, bytes: %zu }),\n", SDPA_DTYPE_FLOAT32, sizeof(float));
    fprintf(out, "  bool: Object.freeze({ id: %d, bytes: %zu }),\n", SDPA_DTYPE_BOOL, sizeof(uint8_t));
    fprintf(out, "});\n");
    /* the weight dtypes of include/sdpa_dense.h: a block of `block` values takes `blockBytes` */
    static const struct { const char * name; int32_t dtype; } weights[] = {
        { "float32", SDPA_DTYPE_FLOAT32 }, { "float16", SDPA_DTYPE_FLOAT16 },
        { "q8_0", SDPA_DTYPE_Q8_0 }, { "q4_0", SDPA_DTYPE_Q4_0 },
        { "q4_k", SDPA_DTYPE_Q4_K }, { "q6_k", SDPA_DTYPE_Q6_K },
        { "q5_0", SDPA_DTYPE_Q5_0 },
    };
    fprintf(out, "/**\n * Weight dtypes (include/sdpa_dense.h) by name: their sdpa_dtype number, values per block\n"
                 " * and bytes per block (sdpa_weight_row_bytes).\n */\n");
    fprintf(out, "export const WEIGHT_DTYPES = Object.freeze(Object.assign(Object.create(null), {\n");
    for (size_t i = 0; i < sizeof weights / sizeof weights[0]; i++) {
        const int32_t block = sdpa_weight_row_bytes(weights[i].dtype, 1) ? 1
                              : sdpa_weight_row_bytes(weights[i].dtype, SDPA_WEIGHT_BLOCK) ? SDPA_WEIGHT_BLOCK : SDPA_WEIGHT_BLOCK_K;
        fprintf(out, "  %s: Object.freeze({ id: %d, block: %d, blockBytes: %zu }),\n", weights[i].name, weights[i].dtype,
                block, sdpa_weight_row_bytes(weights[i].dtype, block));
    }
    fprintf(out, "}));\n");
    /* every row of the cache dtype table (src/cache/kv_dtype.c), in its order */
    fprintf(out, "/** Cache dtypes (sdpa_kv_cache_desc key_dtype / value_dtype) by name: their sdpa_dtype number. */\n");
    fprintf(out, "export const CACHE_DTYPES = Object.freeze(Object.assign(Object.create(null), {");
    for (int32_t i = 0; i < sdpa_dtype_count; i++)
        fprintf(out, "%s %s: %d", i ? "," : "", sdpa_dtype_table[i].name, sdpa_dtype_table[i].dtype);
    fprintf(out, " }));\n");
    fprintf(out, "/**\n"
                 " * Each cache dtype's row record (sdpa_kv_cache_read_records, docs/FORMAT.md), part by part in\n"
                 " * record order: for head dim D, ceil(D / span) items (span 0: one item) of `bytes` bytes each,\n"
                 " * little-endian `type`; `name` is what KVCache.readRaw calls the part (src/cache/kv_dtype.c).\n"
                 " */\n");
    fprintf(out, "export const RECORD_PARTS = Object.freeze({\n");
    for (int32_t d = 0; d < sdpa_dtype_count; d++) {
        const sdpa_dtype_traits * t = &sdpa_dtype_table[d];
        const int32_t n = t->n_record_parts;
        const sdpa_kv_record_part * p = t->record_parts;
        fprintf(out, "  %s: Object.freeze([", t->name);
        for (int32_t i = 0; i < n; i++)
            fprintf(out, "%s\n    Object.freeze({ name: '%s', type: '%s', bytes: %d, span: %d })", i ? "," : "",
                    p[i].name, p[i].item_type, p[i].item_bytes, p[i].span);
        fprintf(out, ",\n  ]),\n");
    }
    fprintf(out, "});\n\n");
}

static void limits(void) {
    fprintf(out, "/** Threads of a context at most (SDPA_MAX_THREADS; the calling thread is one of them). */\n");
    fprintf(out, "export const MAX_THREADS = %d;\n", SDPA_MAX_THREADS);
    fprintf(out, "/** Items of one attendMany / stepMany call at most (SDPA_MANY_MAX). */\n");
    fprintf(out, "export const MANY_MAX = %d;\n", SDPA_MANY_MAX);
    fprintf(out, "/** Numbers per layer geometry of createKVCacheGroup's entry (SDPA_WASM_GEOMETRY_FIELDS). */\n");
    fprintf(out, "export const GEOMETRY_FIELDS = %d;\n", SDPA_WASM_GEOMETRY_FIELDS);
    fprintf(out, "/** Token rows per cache page (SDPA_PAGE_ROWS). */\n");
    fprintf(out, "export const PAGE_ROWS = %d;\n", SDPA_PAGE_ROWS);
    fprintf(out, "/** Bytes of meta a save carries at most (SDPA_STATE_MAX_META). */\n");
    fprintf(out, "export const STATE_MAX_META = %d;\n", SDPA_STATE_MAX_META);
}

int main(int argc, char ** argv) {
    out = argc > 1 ? fopen(argv[1], "w") : stdout;
    if (!out) {
        perror(argv[1]);
        return 1;
    }
    fprintf(out, "// js/abi.js: GENERATED by scripts/abi.c (npm run build); do not edit.\n"
                 "// The C side's binary interface as the JS wrapper uses it, from include/sdpa.h and the\n"
                 "// library compiled for wasm32. tests/js/abi.test.js fails when this file is not what\n"
                 "// scripts/abi.c prints.\n\n");
    status_codes();
    dtypes();
    layout();
    limits();
    if (fclose(out) != 0) return 1;
    if (incomplete) {
        /* no output left behind: the build runs this again until the lists are complete */
        if (argc > 1) remove(argv[1]);
        return 1;
    }
    return 0;
}
