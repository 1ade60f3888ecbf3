/* exports.c: the wasm-only layer. The public functions of sdpa.h are
 * exported as they are (EXPORTED_FUNCTIONS); this file only pins the wasm32
 * struct layout that include/sdpa.h documents ("On wasm32 this struct is
 * ..."), in every wasm build, so that a layout change is a deliberate ABI
 * change. The JS wrapper takes these offsets from js/abi.js, which
 * scripts/abi.c generates with offsetof (and its own static_asserts: what JS
 * assumes of a field), so a change here needs no edit in js/. */
#include "sdpa.h"

#include <assert.h>
#include <stddef.h>

static_assert(sizeof(void *) == 4, "the JS wrapper assumes wasm32");
static_assert(sizeof(sdpa_tensor) == 32, "sdpa_tensor layout");
static_assert(offsetof(sdpa_tensor, data) == 0, "sdpa_tensor.data");
static_assert(offsetof(sdpa_tensor, len) == 4, "sdpa_tensor.len");
static_assert(offsetof(sdpa_tensor, dtype) == 8, "sdpa_tensor.dtype");
static_assert(offsetof(sdpa_tensor, rank) == 12, "sdpa_tensor.rank");
static_assert(offsetof(sdpa_tensor, dims) == 16, "sdpa_tensor.dims");
static_assert(sizeof(sdpa_options) == 48, "sdpa_options layout");
static_assert(offsetof(sdpa_options, start_pos) == 0, "sdpa_options.start_pos");
static_assert(offsetof(sdpa_options, is_causal) == 8, "sdpa_options.is_causal");
static_assert(offsetof(sdpa_options, has_scale) == 12, "sdpa_options.has_scale");
static_assert(offsetof(sdpa_options, scale) == 16, "sdpa_options.scale");
static_assert(offsetof(sdpa_options, dropout_p) == 20, "sdpa_options.dropout_p");
static_assert(offsetof(sdpa_options, window) == 24, "sdpa_options.window");
static_assert(offsetof(sdpa_options, softcap) == 28, "sdpa_options.softcap");
static_assert(offsetof(sdpa_options, sinks) == 32, "sdpa_options.sinks");
static_assert(offsetof(sdpa_options, tree_mask) == 36, "sdpa_options.tree_mask");
static_assert(offsetof(sdpa_options, rotary) == 40, "sdpa_options.rotary");
static_assert(sizeof(sdpa_rotary) == 20 && offsetof(sdpa_rotary, sin) == 4 && offsetof(sdpa_rotary, interleaved) == 8 &&
              offsetof(sdpa_rotary, n_positions) == 12 && offsetof(sdpa_rotary, positions) == 16, "sdpa_rotary layout");
static_assert(sizeof(sdpa_memory_stats) == 48, "sdpa_memory_stats layout");
static_assert(sizeof(sdpa_kv_cache_size) == 40, "sdpa_kv_cache_size layout");
static_assert(sizeof(sdpa_kv_cache_desc) == 36, "sdpa_kv_cache_desc layout");
static_assert(offsetof(sdpa_kv_cache_desc, key_dtype) == 16 && offsetof(sdpa_kv_cache_desc, value_dtype) == 20 &&
              offsetof(sdpa_kv_cache_desc, window) == 24 && offsetof(sdpa_kv_cache_desc, sink_tokens) == 28 &&
              offsetof(sdpa_kv_cache_desc, float16_newest_page) == 32,
              "sdpa_kv_cache_desc fields");
static_assert(offsetof(sdpa_kv_cache_size, bytes) == 32, "sdpa_kv_cache_size.bytes");
static_assert(offsetof(sdpa_memory_stats, bytes_reserved) == 0, "sdpa_memory_stats.bytes_reserved");
static_assert(offsetof(sdpa_memory_stats, bytes_in_use) == 8, "sdpa_memory_stats.bytes_in_use");
static_assert(offsetof(sdpa_memory_stats, bytes_free) == 16, "sdpa_memory_stats.bytes_free");
static_assert(offsetof(sdpa_memory_stats, pages_in_use) == 24, "sdpa_memory_stats.pages_in_use");
static_assert(offsetof(sdpa_memory_stats, pages_free) == 32, "sdpa_memory_stats.pages_free");
static_assert(offsetof(sdpa_memory_stats, page_rows) == 40, "sdpa_memory_stats.page_rows");
static_assert(sizeof(sdpa_attend_item) == 28 && offsetof(sdpa_attend_item, query) == 4 && offsetof(sdpa_attend_item, mask) == 8 &&
              offsetof(sdpa_attend_item, options) == 12 && offsetof(sdpa_attend_item, out) == 16 &&
              offsetof(sdpa_attend_item, key) == 20 && offsetof(sdpa_attend_item, value) == 24, "sdpa_attend_item layout");
