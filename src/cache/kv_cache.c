/* kv_cache.c: a KV cache at full capacity, stored head-major
 * [B, Hkv, maxSeqLen, D] so that attention streams each KV head's rows
 * contiguously; updates and reads convert from/to [B, S, Hkv, D]. */
#include "internal.h"
#include "contract/check.h"
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>


sdpa_status sdpa_kv_cache_create(sdpa_ctx * ctx, int32_t batch, int32_t max_seq_len,
                                 int32_t kv_heads, int32_t head_dim, int32_t dtype,
                                 sdpa_kv_cache ** out_cache) {
    static const char fn[] = "createKVCache";
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_create(ctx, fn, batch, max_seq_len, kv_heads, head_dim, dtype, out_cache);
    if (s != SDPA_OK) return s;
    /* each factor < 2^31: check after every product so nothing wraps */
    const uint64_t limit = SDPA_MAX_CACHE_BYTES / sizeof(float);
    uint64_t elems = (uint64_t)batch * (uint64_t)kv_heads;
    if (elems <= limit) elems *= (uint64_t)max_seq_len;
    if (elems <= limit) elems *= (uint64_t)head_dim;
    if (elems > limit)
        return sdpa_fail(ctx, SDPA_E_OOM, "%s: the cache needs 2 x %llu x %d x %d x %d floats; each of K and V must fit in %llu bytes",
                         fn, (unsigned long long)batch, max_seq_len, kv_heads, head_dim,
                         (unsigned long long)SDPA_MAX_CACHE_BYTES);
    const size_t bytes = (size_t)elems * sizeof(float);
    sdpa_kv_cache * c = calloc(1, sizeof *c);
    float * k = calloc(1, bytes), * v = NULL;
    if (k) v = calloc(1, bytes);
    if (!c || !k || !v) {
        free(c); free(k); free(v);
        return sdpa_fail(ctx, SDPA_E_OOM, "%s: cannot allocate 2 x %zu bytes for the cache", fn, bytes);
    }
    c->batch = batch; c->max_seq_len = max_seq_len; c->kv_heads = kv_heads; c->head_dim = head_dim;
    c->k = k; c->v = v;
    /* Scratch for any attend over this head_dim, so no step allocates.
     * Failure is not fatal: the first attend would try again and report
     * E_OOM then. */
    (void)sdpa_scratch_reserve(ctx, fn, sdpa_flash_workspace_bound(ctx->n_threads, head_dim));
    sdpa_clear_error(ctx);
    *out_cache = c;
    return SDPA_OK;
}

void sdpa_kv_cache_free(sdpa_kv_cache * cache) {
    if (!cache) return;
    free(cache->k);
    free(cache->v);
    free(cache);
}

void sdpa_kv_cache_shape(const sdpa_kv_cache * cache, int32_t * batch, int32_t * max_seq_len,
                         int32_t * kv_heads, int32_t * head_dim) {
    if (batch) *batch = cache ? cache->batch : 0;
    if (max_seq_len) *max_seq_len = cache ? cache->max_seq_len : 0;
    if (kv_heads) *kv_heads = cache ? cache->kv_heads : 0;
    if (head_dim) *head_dim = cache ? cache->head_dim : 0;
}

float * sdpa_kv_cache_data(sdpa_kv_cache * cache, int32_t which) {
    if (!cache) return NULL;
    return which == 0 ? cache->k : which == 1 ? cache->v : NULL;
}

/* [B, S, Hkv, D] rows <-> cache rows, for rows [start, start + len).
 * size_t cannot wrap here: every cache index is below the cache's element
 * count (<= SDPA_MAX_CACHE_BYTES / 4, checked at creation) and every dense
 * index below the tensor's validated length B * len * Hkv * D (contract/:
 * <= SIZE_MAX / 4, and start + len <= maxSeqLen). */
static void copy_rows(const sdpa_kv_cache * c, float * cache_side, float * dense, int32_t start,
                      int32_t len, int to_cache) {
    const size_t D = (size_t)c->head_dim, S = (size_t)c->max_seq_len, H = (size_t)c->kv_heads;
    for (size_t b = 0; b < (size_t)c->batch; b++)
        for (size_t t = 0; t < (size_t)len; t++)
            for (size_t h = 0; h < H; h++) {
                float * cs = cache_side + ((b * H + h) * S + (size_t)start + t) * D;
                float * ds = dense + ((b * (size_t)len + t) * H + h) * D;
                if (to_cache) memcpy(cs, ds, D * sizeof(float));
                else memcpy(ds, cs, D * sizeof(float));
            }
}

sdpa_status sdpa_kv_cache_update(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * key,
                                 const sdpa_tensor * value, int32_t start_pos) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_update(ctx, "cache.update", cache, key, value, start_pos);
    if (s != SDPA_OK) return s;
    copy_rows(cache, cache->k, key->data, start_pos, key->dims[1], 1);
    copy_rows(cache, cache->v, value->data, start_pos, key->dims[1], 1);
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_attend(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                                 const sdpa_tensor * mask, const sdpa_options * options,
                                 sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_problem p;
    sdpa_status s = sdpa_check_cache_attend(ctx, "cache.attend", cache, query, mask, options, out, true, &p);
    if (s == SDPA_OK) s = sdpa_reserve_problem(ctx, "cache.attend", &p);
    if (s != SDPA_OK) return s;
    sdpa_run_problem(ctx, &p, false);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_step(sdpa_ctx * ctx, sdpa_kv_cache * cache, const sdpa_tensor * query,
                               const sdpa_tensor * key, const sdpa_tensor * value,
                               const sdpa_tensor * mask, const sdpa_options * options,
                               sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_problem p;
    sdpa_status s = sdpa_check_cache_step(ctx, "cache.step", cache, query, key, value, mask, options, out, &p);
    if (s == SDPA_OK) s = sdpa_reserve_problem(ctx, "cache.step", &p);
    if (s != SDPA_OK) return s;  /* nothing written yet */
    const int32_t start_pos = (int32_t)p.start_pos;
    copy_rows(cache, cache->k, key->data, start_pos, key->dims[1], 1);
    copy_rows(cache, cache->v, value->data, start_pos, key->dims[1], 1);
    sdpa_run_problem(ctx, &p, false);
    return SDPA_OK;
}

sdpa_status sdpa_kv_cache_read(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start,
                               int32_t length, sdpa_tensor * key_out, sdpa_tensor * value_out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_check_cache_read(ctx, "cache.read", cache, start, length, key_out, value_out);
    if (s != SDPA_OK) return s;
    copy_rows(cache, cache->k, key_out->data, start, length, 0);
    copy_rows(cache, cache->v, value_out->data, start, length, 0);
    sdpa_clear_error(ctx);
    return SDPA_OK;
}
