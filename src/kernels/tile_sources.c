/* tile_sources.c: the kernel table (tile_sources.h says what each column is):
 * per cache dtype, the K and V sources flash.c's plan takes for a block of
 * it. A dtype with a storage row (cache/kv_dtype.c) but none here has its
 * tiles decoded into float32. */
#include "kernels/tile_sources.h"

#include "sdpa.h"

const sdpa_dtype_kernels sdpa_dtype_kernel_table[] = {
    {
        .dtype = SDPA_DTYPE_FLOAT32,
        .k_tile = K_F32_PAGE, .k_tile_max_dim = 0, .k_tile_marked = K_F32_PAGE,
        .v_tile = V_F32_ROWS, .v_tile_marked = V_F32_ROWS,
        .small_tiles = false,
    },
    {
        .dtype = SDPA_DTYPE_FLOAT16,
        .k_tile = K_F16_PAGE, .k_tile_max_dim = 0, .k_tile_marked = K_F16_DECODED,
        .v_tile = V_F16_PAGE, .v_tile_marked = V_F16_DECODED,
        .small_tiles = false,
    },
    {
        .dtype = SDPA_DTYPE_INT8,
        .k_tile = K_I8_PAGE, .k_tile_max_dim = INT_Q_MAX_DIM, .k_tile_marked = K_I8_PAGE,
        .v_tile = V_I8_PAGE, .v_tile_marked = V_I8_PAGE,
        .small_tiles = true,
    },
    {
        .dtype = SDPA_DTYPE_INT4,
        .k_tile = K_I4_PAGE, .k_tile_max_dim = 0, .k_tile_marked = K_DECODED,
        .v_tile = V_I4_PAGE, .v_tile_marked = V_DECODED,
        .small_tiles = true,
    },
};
const int32_t sdpa_dtype_kernel_count = (int32_t)(sizeof sdpa_dtype_kernel_table / sizeof sdpa_dtype_kernel_table[0]);

static const sdpa_dtype_kernels DECODED = {
    .dtype = 0,
    .k_tile = K_DECODED, .k_tile_max_dim = 0, .k_tile_marked = K_DECODED,
    .v_tile = V_DECODED, .v_tile_marked = V_DECODED,
    .small_tiles = false,
};

const sdpa_dtype_kernels * sdpa_dtype_kernels_of(int32_t dtype) {
    for (int32_t i = 0; i < sdpa_dtype_kernel_count; i++)
        if (sdpa_dtype_kernel_table[i].dtype == dtype) return &sdpa_dtype_kernel_table[i];
    return &DECODED;
}
