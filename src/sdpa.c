/* sdpa.c: the context (error message, scratch, thread pool, and its page
 * pool: memory stats, reserve, ownership) and the customSdpa entry points:
 * check (contract/) -> reserve scratch -> run a kernel (kernels/) on the pool. */
#include "internal.h"
#include "contract/check.h"
#include "kernels/kernels.h"
#include "cache/page_pool.h"
#include "sdpa_dense.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char * const status_codes[] = {
    "OK", "E_ARG", "E_RANK", "E_DIMS", "E_DTYPE", "E_BATCH", "E_HEADS", "E_HEAD_DIM",
    "E_KV_LEN", "E_START_POS", "E_CAPACITY", "E_MASK_DTYPE", "E_MASK_SHAPE",
    "E_MASK_CAUSAL", "E_DROPOUT", "E_SCALE", "E_DISPOSED", "E_OOM", "E_FORMAT",
};

const char * sdpa_status_code(sdpa_status status) {
    if ((unsigned)status < sizeof status_codes / sizeof status_codes[0]) return status_codes[status];
    return "E_UNKNOWN";
}

sdpa_status sdpa_fail(sdpa_ctx * ctx, sdpa_status status, const char * fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
        va_end(ap);
    }
    return status;
}

void sdpa_clear_error(sdpa_ctx * ctx) { ctx->last_error[0] = '\0'; }

sdpa_status sdpa_named(sdpa_ctx * ctx, sdpa_status status, const char * name) {
    if (!ctx || status == SDPA_OK) return status;
    char * m = ctx->last_error;
    const size_t room = sizeof ctx->last_error - 1;  /* characters before the terminator */
    size_t n = strlen(name), len = strlen(m);
    if (n > room - 2) n = room - 2;
    if (len > room - n - 2) len = room - n - 2;  /* the words' end is cut, never the buffer's */
    memmove(m + n + 2, m, len);
    memcpy(m, name, n);
    m[n] = ':';
    m[n + 1] = ' ';
    m[n + 2 + len] = '\0';
    return status;
}

sdpa_ctx * sdpa_ctx_create(int32_t n_threads, sdpa_status * status) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > SDPA_MAX_THREADS) n_threads = SDPA_MAX_THREADS;
    sdpa_ctx * ctx = calloc(1, sizeof *ctx);
    if (ctx) ctx->pages = sdpa_page_pool_create();
    if (ctx && ctx->pages) ctx->pool = sdpa_pool_create(n_threads);
    if (!ctx || !ctx->pool) {
        if (ctx) sdpa_page_pool_free(ctx->pages);
        free(ctx);
        if (status) *status = SDPA_E_OOM;
        return NULL;
    }
    ctx->n_threads = sdpa_pool_threads(ctx->pool);
    ctx->parallel_min_macs = SDPA_PARALLEL_MIN_MACS;
    ctx->dense_min_macs = SDPA_DENSE_PARALLEL_MIN_MACS;
    if (status) *status = SDPA_OK;
    return ctx;
}

void sdpa_ctx_free(sdpa_ctx * ctx) {
    if (!ctx) return;
    sdpa_pool_free(ctx->pool);
    sdpa_page_pool_free(ctx->pages);
    free(ctx->scratch);
    free(ctx);
}

int32_t sdpa_ctx_threads(const sdpa_ctx * ctx) { return ctx ? ctx->n_threads : 0; }

const char * sdpa_ctx_last_error(const sdpa_ctx * ctx) {
    return ctx ? ctx->last_error : "sdpa: the context is NULL";
}

void sdpa_ctx_set_parallel_min_macs(sdpa_ctx * ctx, double macs) {
    if (ctx) ctx->parallel_min_macs = macs > 0 ? macs : 0;  /* (NaN: 0) */
}

void sdpa_ctx_use_reference(sdpa_ctx * ctx, int32_t on) {
    if (ctx) ctx->use_reference = on != 0;
}

sdpa_status sdpa_scratch_reserve(sdpa_ctx * ctx, uint64_t bytes) {
    if (bytes <= ctx->scratch_bytes) return SDPA_OK;
    if (bytes > SIZE_MAX)
        return sdpa_fail(ctx, SDPA_E_OOM, "needs %llu bytes of scratch memory (%d threads); more than this build can address (%llu bytes)",
                         (unsigned long long)bytes, ctx->n_threads, (unsigned long long)SIZE_MAX);
    void * grown = malloc((size_t)bytes);  /* contents need not survive: scratch only */
    if (!grown)
        return sdpa_fail(ctx, SDPA_E_OOM, "cannot allocate %llu bytes of scratch memory (%d threads)",
                         (unsigned long long)bytes, ctx->n_threads);
    free(ctx->scratch);
    ctx->scratch = grown;
    ctx->scratch_bytes = (size_t)bytes;
    return SDPA_OK;
}

sdpa_status sdpa_ctx_reserve(sdpa_ctx * ctx, size_t bytes) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_status s = sdpa_scratch_reserve(ctx, bytes);
    if (s == SDPA_OK) sdpa_clear_error(ctx);
    return sdpa_named(ctx, s, __func__);
}

size_t sdpa_ctx_scratch_bytes(const sdpa_ctx * ctx) { return ctx ? ctx->scratch_bytes : 0; }

/* ---- the context's page pool (the pages of every cache of the context) */

void sdpa_ctx_memory(const sdpa_ctx * ctx, sdpa_memory_stats * out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!ctx) return;
    sdpa_page_stats st;
    sdpa_page_pool_stats(ctx->pages, &st);
    out->bytes_reserved = (int64_t)st.bytes_reserved;
    out->bytes_in_use = (int64_t)st.bytes_in_use;
    out->bytes_free = (int64_t)st.bytes_free;
    out->pages_in_use = st.pages_in_use;
    out->pages_free = st.pages_free;
    out->page_rows = SDPA_PAGE_ROWS;
}

sdpa_status sdpa_ctx_reserve_pages_unnamed(sdpa_ctx * ctx, double bytes) {
    if (!ctx) return SDPA_E_ARG;
    /* '<': natively (double)SIZE_MAX rounds up to 2^64, which would not convert to uint64_t */
    if (!(bytes >= 0) || !(bytes < (double)SIZE_MAX))
        return sdpa_fail(ctx, bytes >= 0 ? SDPA_E_OOM : SDPA_E_ARG,
                         "%g bytes; expected a non-negative number that fits this build's address space", bytes);
    if (!sdpa_page_pool_reserve(ctx->pages, (uint64_t)bytes))
        return sdpa_fail(ctx, SDPA_E_OOM, "the heap cannot give the page pool %.0f more free bytes", bytes);
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_ctx_reserve_pages(sdpa_ctx * ctx, double bytes) {
    return sdpa_named(ctx, sdpa_ctx_reserve_pages_unnamed(ctx, bytes), __func__);
}

/* Either kernel may run a reserved problem (the reference switch), so the
 * scratch holds the larger of the two. Saturating, see sdpa_size_mul. */
static uint64_t problem_workspace(int32_t n_threads, const sdpa_problem * p) {
    uint64_t flash = sdpa_flash_workspace(n_threads, p);
    uint64_t ref = sdpa_reference_workspace(n_threads, p);
    return flash > ref ? flash : ref;
}

sdpa_status sdpa_reserve_problem(sdpa_ctx * ctx, const sdpa_problem * p) {
    const uint64_t need = problem_workspace(ctx->n_threads, p);
    if (need > SIZE_MAX)  /* say which shape asked for it */
        return sdpa_fail(ctx, SDPA_E_OOM,
                         "head dim %d with %d threads needs %llu bytes of scratch memory; more than this build can address (%llu bytes)",
                         p->head_dim, ctx->n_threads, (unsigned long long)need, (unsigned long long)SIZE_MAX);
    return sdpa_scratch_reserve(ctx, need);
}

size_t sdpa_workspace_size(const sdpa_ctx * ctx, int32_t batch, int32_t q_len, int32_t q_heads,
                           int32_t kv_heads, int32_t head_dim, int32_t n_keys) {
    if (!ctx || batch <= 0 || q_len <= 0 || q_heads <= 0 || kv_heads <= 0 || head_dim <= 0 ||
        n_keys <= 0 || q_heads % kv_heads != 0)
        return 0;
    /* shapes every call rejects (E_DIMS: the kernels' int32 extents) */
    const int64_t bq = (int64_t)batch * q_len;  /* < 2^62; times q_heads only once <= the limit */
    if (bq > SDPA_INDEX_LIMIT || bq * q_heads > SDPA_INDEX_LIMIT || head_dim > SDPA_INDEX_LIMIT ||
        n_keys > SDPA_INDEX_LIMIT)
        return 0;
    sdpa_problem p;
    memset(&p, 0, sizeof p);
    p.batch = batch; p.q_len = q_len; p.q_heads = q_heads; p.kv_heads = kv_heads;
    p.head_dim = head_dim; p.group = q_heads / kv_heads; p.n_keys = n_keys;
    const uint64_t need = problem_workspace(ctx->n_threads, &p);
    return need > SIZE_MAX ? SIZE_MAX : (size_t)need;  /* saturates: reserving SIZE_MAX is E_OOM */
}

/* Multiply-adds of a problem's Q.K and P.V, counting the keys a row can
 * see: a windowed one its window and sink rows, else n_keys (causal
 * prefill: about twice what it does; a bound is all the decision needs). */
static double problem_macs(const sdpa_problem * p) {
    double keys = p->n_keys;
    if (p->window && (double)p->window + p->q_len + p->sink_tokens < keys) keys = (double)p->window + p->q_len + p->sink_tokens;
    return 2.0 * p->batch * p->q_len * p->q_heads * keys * p->head_dim;
}

void sdpa_run_problem(sdpa_ctx * ctx, const sdpa_problem * p, bool reference) {
    if (reference || ctx->use_reference) sdpa_reference_run(ctx->pool, p, ctx->scratch);
    else sdpa_flash_run(ctx->pool, p, ctx->scratch, problem_macs(p) < ctx->parallel_min_macs);
    sdpa_clear_error(ctx);
}

sdpa_status sdpa_reserve_problems(sdpa_ctx * ctx, const sdpa_problem * ps, int32_t n) {
    uint64_t need = sdpa_flash_many_workspace(ctx->n_threads, ps, n);
    for (int32_t i = 0; i < n; i++) {
        const uint64_t one = problem_workspace(ctx->n_threads, &ps[i]);
        if (one > need) need = one;
    }
    if (need > SIZE_MAX)
        return sdpa_fail(ctx, SDPA_E_OOM, "%d items with %d threads need %llu bytes of scratch memory; more than this build can address (%llu bytes)",
                         n, ctx->n_threads, (unsigned long long)need, (unsigned long long)SIZE_MAX);
    return sdpa_scratch_reserve(ctx, need);
}

void sdpa_run_problems(sdpa_ctx * ctx, const sdpa_problem * ps, int32_t n) {
    if (ctx->use_reference) {
        for (int32_t i = 0; i < n; i++) sdpa_reference_run(ctx->pool, &ps[i], ctx->scratch);
    } else {
        double macs = 0.0;
        for (int32_t i = 0; i < n; i++) macs += problem_macs(&ps[i]);
        if (ctx->n_threads == 1 || macs < ctx->parallel_min_macs) {
            /* on the calling thread alone: one problem after the other, as their own calls run
             * (measured: interleaving the plans of 8 B-1024 items cost 3-5% on 1 thread) */
            for (int32_t i = 0; i < n; i++) sdpa_flash_run(ctx->pool, &ps[i], ctx->scratch, true);
        } else {
            sdpa_flash_run_many(ctx->pool, ps, n, ctx->scratch, false);
        }
    }
    sdpa_clear_error(ctx);
}

static sdpa_status custom(sdpa_ctx * ctx, bool reference, const sdpa_tensor * query, const sdpa_tensor * key,
                          const sdpa_tensor * value, const sdpa_tensor * mask, const sdpa_options * options,
                          sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_problem p;
    sdpa_status s = sdpa_check_custom(ctx, query, key, value, mask, options, out, &p);
    if (s == SDPA_OK) s = sdpa_reserve_problem(ctx, &p);
    if (s != SDPA_OK) return s;
    sdpa_run_problem(ctx, &p, reference);
    return SDPA_OK;
}

sdpa_status sdpa_custom_unnamed(sdpa_ctx * ctx, const sdpa_tensor * query, const sdpa_tensor * key,
                                const sdpa_tensor * value, const sdpa_tensor * mask, const sdpa_options * options,
                                sdpa_tensor * out) {
    return custom(ctx, false, query, key, value, mask, options, out);
}

sdpa_status sdpa_custom(sdpa_ctx * ctx, const sdpa_tensor * query, const sdpa_tensor * key,
                        const sdpa_tensor * value, const sdpa_tensor * mask,
                        const sdpa_options * options, sdpa_tensor * out) {
    return sdpa_named(ctx, custom(ctx, false, query, key, value, mask, options, out), __func__);
}

sdpa_status sdpa_custom_reference(sdpa_ctx * ctx, const sdpa_tensor * query,
                                  const sdpa_tensor * key, const sdpa_tensor * value,
                                  const sdpa_tensor * mask, const sdpa_options * options,
                                  sdpa_tensor * out) {
    return sdpa_named(ctx, custom(ctx, true, query, key, value, mask, options, out), __func__);
}
