/* check.c: CONTRACT.md section 2, rule by rule, in the table's order.
 *
 * Every rule runs once, at the entry, and writes its words alone, naming
 * the argument as the contract names it (query, key, value, attnMask,
 * sinks, out) and no call: the entry that ran it puts its own name first
 * (internal.h, sdpa_named; the JS package its call's). Within one code the
 * arguments are checked in the order the JS layer reads them. */
#include "contract/check.h"
#include "cache/page_pool.h"
#include "cache/kv_record.h"
#include "cache/kv_dtype.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Rule order of the table; each pass below checks one rule for every argument. */

/* A tensor dtype's name, or a cache dtype's (its row of the dtype table). */
static const char * dtype_name(int32_t dtype) {
    if (dtype == SDPA_DTYPE_BOOL) return "bool";
    return sdpa_kv_record_dtype_name(dtype);  /* "unknown" for other numbers */
}

/* Appended where dims read as PyTorch's [B, H, S, D] would fit (layout_hint). */
static const char torch_layout[] =
    "; the dims look like PyTorch's [B, H, S, D] layout (heads in dim 1): this op takes [B, S, H, D] (in PyTorch: x.transpose(1, 2).contiguous())";

/* "[1, 2, 4, 8]" of a tensor of rank 0..4 (as js/shape.js fmtDims). */
typedef struct dims_text { char s[64]; } dims_text;
static dims_text dims_of(const int32_t * dims, int rank) {
    dims_text t;
    size_t n = 0;
    t.s[n++] = '[';
    for (int i = 0; i < rank && i < 4; i++)
        n += (size_t)snprintf(t.s + n, sizeof t.s - n, i ? ", %d" : "%d", dims[i]);
    snprintf(t.s + n, sizeof t.s - n, "]");
    return t;
}
#define DIMS(t) (dims_of((t)->dims, (t)->rank).s)

/* "1 row", "3 rows" (js/shape.js fmtRows). */
typedef struct rows_text { char s[32]; } rows_text;
static rows_text rows_of(int64_t n) {
    rows_text t;
    snprintf(t.s, sizeof t.s, "%lld %s", (long long)n, n == 1 ? "row" : "rows");
    return t;
}
#define ROWS(n) (rows_of(n).s)

/* A float as JS's String(x) shows the simple values: NaN, Infinity, 0.5. */
typedef struct num_text { char s[32]; } num_text;
static num_text num_of(float x) {
    num_text t;
    if (isnan(x)) snprintf(t.s, sizeof t.s, "NaN");
    else if (isinf(x)) snprintf(t.s, sizeof t.s, x > 0 ? "Infinity" : "-Infinity");
    else snprintf(t.s, sizeof t.s, "%g", (double)x);
    return t;
}
#define NUM(x) (num_of(x).s)

/* start + n + d (start, n >= 0; d 0 or -1) as JS's String(start + n + d)
 * shows it: exact up to 2^53, past it the doubles JS's additions round to,
 * left to right (what a JS caller's message says). */
typedef struct sum_text { char s[32]; } sum_text;
static sum_text sum_of(int64_t start, int64_t n, int64_t d) {
    sum_text t;
    const uint64_t sum = (uint64_t)start + (uint64_t)n;
    if (sum <= (UINT64_C(1) << 53)) snprintf(t.s, sizeof t.s, "%llu", (unsigned long long)(sum + (uint64_t)d));
    else snprintf(t.s, sizeof t.s, "%.0f", ((double)start + (double)n) + (double)d);
    return t;
}
#define SUM(a, b) (sum_of(a, b, 0).s)

static uint64_t elem_bytes(int32_t dtype) {
    switch (dtype) {
        case SDPA_DTYPE_BOOL: return 1;
        case SDPA_DTYPE_FLOAT16: return 2;
        default: return 4;
    }
}

static bool present(const sdpa_tensor * t) { return t && t->data; }

/* Distances, not ends: a claimed size near UINT64_MAX must not wrap a0 + a_bytes. */
static bool ranges_overlap(const void * a, uint64_t a_bytes, const void * b, uint64_t b_bytes) {
    const uint64_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    if (a_bytes == 0 || b_bytes == 0) return false;
    return a0 >= b0 ? a0 - b0 < b_bytes : b0 - a0 < a_bytes;
}

static uint64_t claimed_bytes(const sdpa_tensor * t) {
    uint64_t len = (uint64_t)t->len, e = elem_bytes(t->dtype);
    return len > UINT64_MAX / e ? UINT64_MAX : len * e;
}

static bool overlaps(const sdpa_tensor * out, const sdpa_tensor * in) {
    if (!present(in)) return false;
    return ranges_overlap(out->data, claimed_bytes(out), in->data, claimed_bytes(in));
}

/* Does t's claimed span overlap cache storage: any page of any cache of the
 * context (a write may copy or take pages anywhere in the arena), or this
 * cache's page table? */
static bool in_cache(const sdpa_kv_cache * c, const sdpa_tensor * t) {
    if (!present(t)) return false;
    const uint64_t table_bytes = (uint64_t)c->batch * (uint64_t)c->kv_heads * (uint64_t)c->pages_per_head * sizeof(float *);
    return sdpa_page_pool_overlaps(c->ctx->pages, t->data, claimed_bytes(t)) ||
           ranges_overlap(t->data, claimed_bytes(t), c->table, table_bytes);
}

static sdpa_status fail_in_cache(sdpa_ctx * ctx, const char * name) {
    return sdpa_fail(ctx, SDPA_E_ARG, "%s overlaps the storage of a KV cache; pass a separate buffer", name);
}

static sdpa_status fail_shares(sdpa_ctx * ctx, const char * name) {
    return sdpa_fail(ctx, SDPA_E_ARG, "out shares memory with %s; out must not overlap any input", name);
}

/* Product of dims as an element count, or 0 when it overflows what a buffer
 * of this dtype can hold in this address space. dims must be >= 0. */
static bool dims_product(const sdpa_tensor * t, uint64_t * product) {
    uint64_t p = 1, limit = (uint64_t)SIZE_MAX / elem_bytes(t->dtype);
    for (int i = 0; i < t->rank; i++) {
        uint64_t d = (uint64_t)t->dims[i];
        if (d != 0 && p > limit / d) return false;
        p *= d;
    }
    *product = p;
    return true;
}

/* E_DIMS for one tensor: positive dims (a 0 at `heads_axis` is left for
 * E_HEADS), and len == product(dims). */
static sdpa_status check_dims(sdpa_ctx * ctx, const char * name,
                              const sdpa_tensor * t, int heads_axis) {
    for (int i = 0; i < t->rank; i++) {
        if (t->dims[i] > 0 || (i == heads_axis && t->dims[i] == 0)) continue;
        return sdpa_fail(ctx, SDPA_E_DIMS, "%s.dims[%d] is %d; every dim must be a positive integer", name, i, t->dims[i]);
    }
    uint64_t product;
    if (!dims_product(t, &product))
        return sdpa_fail(ctx, SDPA_E_DIMS, "%s dims multiply to more elements than memory can address", name);
    if (product != 0 && product != (uint64_t)t->len)
        return sdpa_fail(ctx, SDPA_E_DIMS, "%s.data has %llu elements but dims %s need %llu",
                         name, (unsigned long long)t->len, DIMS(t), (unsigned long long)product);
    return SDPA_OK;
}

/* `what`: the expected rank as the message says it ("4-D [B, S, H, D]"). */
static sdpa_status check_rank(sdpa_ctx * ctx, const char * name,
                              const sdpa_tensor * t, int want, const char * what) {
    if (t->rank == want) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_RANK, "%s has rank %d; expected %s", name, t->rank, what);
}
#define BSHD "4-D [B, S, H, D]"
#define BSHD_WRITE "4-D [B, Snew, Hkv, D]"

static sdpa_status check_float32(sdpa_ctx * ctx, const char * name,
                                 const sdpa_tensor * t) {
    if (t->dtype == SDPA_DTYPE_FLOAT32) return SDPA_OK;
    if (t->dtype == SDPA_DTYPE_BOOL)  /* (what the JS package calls a Uint8Array) */
        return sdpa_fail(ctx, SDPA_E_DTYPE, "%s is bool (Uint8Array); expected float32 (Float32Array)", name);
    return sdpa_fail(ctx, SDPA_E_DTYPE, "%s has dtype %s (%d); expected float32", name, dtype_name(t->dtype), t->dtype);
}

/* E_HEADS for a 0 at a tensor's heads axis (check_dims left it). */
static sdpa_status check_heads_zero(sdpa_ctx * ctx, const char * name,
                                    const sdpa_tensor * t, int heads_axis) {
    if (t->dims[heads_axis] != 0) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_HEADS, "%s has 0 heads (dims %s); expected at least 1", name, DIMS(t));
}

/* Option values only a C caller can get wrong (JS writes 0/1 and a window >= 0). */
static sdpa_status check_options_arg(sdpa_ctx * ctx, const sdpa_options * o) {
    if (o->is_causal != 0 && o->is_causal != 1)
        return sdpa_fail(ctx, SDPA_E_ARG, "isCausal is %d; expected 0 or 1", o->is_causal);
    if (o->has_scale != 0 && o->has_scale != 1)
        return sdpa_fail(ctx, SDPA_E_ARG, "has_scale is %d; expected 0 or 1", o->has_scale);
    if (o->window < 0)
        return sdpa_fail(ctx, SDPA_E_ARG, "window is %d; expected a positive integer (the number of keys a row sees, its own included)", o->window);
    return SDPA_OK;
}

static sdpa_status check_tail_options(sdpa_ctx * ctx, const sdpa_tensor * mask,
                                      const sdpa_options * o) {
    if (present(mask) && o->is_causal)
        return sdpa_fail(ctx, SDPA_E_MASK_CAUSAL, "attnMask and isCausal: true were both given; pass one of them");
    if (o->dropout_p != 0.0f)
        return sdpa_fail(ctx, SDPA_E_DROPOUT, "dropoutP is %s; expected 0 (the kernel has no dropout)", NUM(o->dropout_p));
    if (o->has_scale && !(isfinite(o->scale) && o->scale > 0.0f))
        return sdpa_fail(ctx, SDPA_E_SCALE, "scale is %s; expected a finite number > 0", NUM(o->scale));
    if (o->softcap != 0.0f && !(isfinite(o->softcap) && o->softcap > 0.0f))
        return sdpa_fail(ctx, SDPA_E_SCALE, "softcap is %s; expected a finite number > 0", NUM(o->softcap));
    return SDPA_OK;
}

#define TRY(expr) do { sdpa_status s_ = (expr); if (s_ != SDPA_OK) return s_; } while (0)

static const sdpa_options default_options = { 0, 0, 0, 0.0f, 0.0f, 0, 0.0f, NULL, NULL, NULL };

/* torch_layout when reading dims 1 and 2 of the query (and of the key, unless
 * it is a cache, whose heads are known) the other way round would satisfy the
 * heads rule and, without a mask, the key bound (start_pos < 0: not checked);
 * "" otherwise. */
static const char * layout_hint(const int32_t * qd, const int32_t * kd, bool cache, int64_t start_pos, bool masked) {
    if (qd[1] == qd[2] && (cache || kd[1] == kd[2])) return "";
    const int64_t Hq = qd[1], Sq = qd[2];
    const int64_t Hk = cache ? kd[2] : kd[1], Skv = cache ? kd[1] : kd[2];
    const bool fits = Hk >= 1 && Hk <= Hq && Hq % Hk == 0 && (masked || start_pos < 0 || start_pos <= Skv - Sq);  /* (no overflow: start_pos may be near INT64_MAX) */
    return fits ? torch_layout : "";
}

/* One attention call's arguments, as check_attention's steps read them:
 * either key/value are given, or cache. */
typedef struct attention_args {
    sdpa_ctx * ctx;
    const sdpa_tensor * q, * k, * v, * mask, * out, * sinks, * tree;
    const sdpa_kv_cache * cache;
    const sdpa_options * o;
    bool has_mask, has_sinks, has_tree;
    bool check_room;
} attention_args;

/* The key/value geometry, from tensors or the cache. */
typedef struct kv_geometry {
    int32_t kb, kh, kd, kt, vb, vh, vd, vt;
} kv_geometry;

/* E_ARG: what is missing, what lies in the cache, the options, what out
 * shares, a windowed cache's own rules. */
static sdpa_status check_attention_args(const attention_args * a) {
    sdpa_ctx * ctx = a->ctx;
    const sdpa_tensor * q = a->q, * k = a->k, * v = a->v, * mask = a->mask, * out = a->out;
    const sdpa_tensor * sinks = a->sinks, * tree = a->tree;
    const sdpa_kv_cache * cache = a->cache;
    const sdpa_options * o = a->o;
    const bool has_mask = a->has_mask, has_sinks = a->has_sinks, has_tree = a->has_tree;
    if (!present(q)) return sdpa_fail(ctx, SDPA_E_ARG, "query is missing");
    if (!cache) {
        if (!present(k)) return sdpa_fail(ctx, SDPA_E_ARG, "key is missing");
        if (!present(v)) return sdpa_fail(ctx, SDPA_E_ARG, "value is missing");
    }
    if (!present(out)) return sdpa_fail(ctx, SDPA_E_ARG, "out is missing");
    if (cache) {  /* (a step would overwrite an input before reading it) */
        if (in_cache(cache, q)) return fail_in_cache(ctx, "query");
        if (in_cache(cache, mask)) return fail_in_cache(ctx, "attnMask");
        if (in_cache(cache, out)) return fail_in_cache(ctx, "out");
        if (in_cache(cache, sinks)) return fail_in_cache(ctx, "sinks");
        if (in_cache(cache, tree)) return fail_in_cache(ctx, "treeMask");
    }
    TRY(check_options_arg(ctx, o));
    if (o->window && has_mask)
        return sdpa_fail(ctx, SDPA_E_ARG, "window and attnMask were both given; put the window in the mask");
    if (o->rotary && !cache)
        return sdpa_fail(ctx, SDPA_E_ARG, "rotary is an option of KVCache.update, KVCache.attend and KVCache.step");
    if (has_tree) {  /* treeMask: a mask over the new rows of a cache's causal step */
        if (!cache)
            return sdpa_fail(ctx, SDPA_E_ARG, "treeMask is an option of KVCache.attend and KVCache.step (a mask over a cache's new rows)");
        if (has_mask)
            return sdpa_fail(ctx, SDPA_E_ARG, "treeMask and attnMask were both given; pass one of them");
        if (!o->is_causal)
            return sdpa_fail(ctx, SDPA_E_ARG, "treeMask was given with isCausal: false; a tree mask refines a causal step (leave isCausal out or pass true)");
    }
    if (overlaps(out, q)) return fail_shares(ctx, "query");
    if (overlaps(out, mask)) return fail_shares(ctx, "attnMask");
    if (has_sinks && overlaps(out, sinks)) return fail_shares(ctx, "sinks");
    if (has_tree && overlaps(out, tree)) return fail_shares(ctx, "treeMask");
    if (!cache && overlaps(out, k)) return fail_shares(ctx, "key");
    if (!cache && overlaps(out, v)) return fail_shares(ctx, "value");
    if (cache && cache->window) {  /* a windowed cache attends through its own causal window */
        if (has_mask)
            return sdpa_fail(ctx, SDPA_E_ARG, "attnMask was given but a windowed cache (window %d) applies its own causal window; pass no mask", cache->window);
        if (!o->is_causal)
            return sdpa_fail(ctx, SDPA_E_ARG, "isCausal is false but a windowed cache (window %d) attends causally; leave it out or pass true", cache->window);
        if (o->window > cache->window)
            return sdpa_fail(ctx, SDPA_E_ARG, "window %d is wider than the cache's window %d; it may narrow the window, not widen it", o->window, cache->window);
    }
    return SDPA_OK;
}

/* E_RANK */
static sdpa_status check_attention_ranks(const attention_args * a) {
    sdpa_ctx * ctx = a->ctx;
    TRY(check_rank(ctx, "query", a->q, 4, BSHD));
    if (!a->cache) {
        TRY(check_rank(ctx, "key", a->k, 4, BSHD));
        TRY(check_rank(ctx, "value", a->v, 4, BSHD));
    }
    if (a->has_mask) TRY(check_rank(ctx, "attnMask", a->mask, 2, "2-D [Sq, N] (this op does not broadcast masks)"));
    if (a->has_sinks) TRY(check_rank(ctx, "sinks", a->sinks, 1, "1-D [Hq] (one sink logit per query head)"));
    if (a->has_tree) TRY(check_rank(ctx, "treeMask", a->tree, 2, "2-D [Sq, Sq] (the new rows over the new rows)"));
    return SDPA_OK;
}

/* E_DIMS: every dim, out's dims, and the kernels' int32 extents. */
static sdpa_status check_attention_dims(const attention_args * a) {
    sdpa_ctx * ctx = a->ctx;
    const sdpa_tensor * q = a->q, * k = a->k, * out = a->out;
    const sdpa_kv_cache * cache = a->cache;
    TRY(check_dims(ctx, "query", q, 2));
    if (!cache) {
        TRY(check_dims(ctx, "key", k, 2));
        TRY(check_dims(ctx, "value", a->v, 2));
    }
    if (a->has_mask) TRY(check_dims(ctx, "attnMask", a->mask, -1));
    if (a->has_sinks) TRY(check_dims(ctx, "sinks", a->sinks, 0));
    if (a->has_tree) TRY(check_dims(ctx, "treeMask", a->tree, -1));
    if (out->rank >= 0 && out->rank <= 4) TRY(check_dims(ctx, "out", out, 2));
    if (out->rank != 4)
        return sdpa_fail(ctx, SDPA_E_DIMS, "out has rank %d; expected the output dims %s [B, Sq, Hq, D]", out->rank, DIMS(q));
    for (int i = 1; i < 4; i++)
        if (out->dims[i] != q->dims[i])
            return sdpa_fail(ctx, SDPA_E_DIMS, "out has dims %s but the output is %s [B, Sq, Hq, D]", DIMS(out), DIMS(q));

    /* the kernels' int32 extents (internal.h; only reachable natively: > 8 GiB) */
    int64_t rows = (int64_t)q->dims[0] * q->dims[1];  /* < 2^62 */
    if (rows > SDPA_INDEX_LIMIT || rows * (q->dims[2] > 0 ? q->dims[2] : 1) > SDPA_INDEX_LIMIT)
        return sdpa_fail(ctx, SDPA_E_DIMS, "query [%d, %d, %d, %d] has more than %d rows (B * Sq * Hq)",
                         q->dims[0], q->dims[1], q->dims[2], q->dims[3], SDPA_INDEX_LIMIT);
    if (q->dims[3] > SDPA_INDEX_LIMIT)
        return sdpa_fail(ctx, SDPA_E_DIMS, "query head dim is %d; at most %d is supported", q->dims[3], SDPA_INDEX_LIMIT);
    if (!cache && k->dims[1] > SDPA_INDEX_LIMIT)  /* a cache's maxSeqLen is checked at creation */
        return sdpa_fail(ctx, SDPA_E_DIMS, "key has %d rows; at most %d are supported", k->dims[1], SDPA_INDEX_LIMIT);
    return SDPA_OK;
}

/* E_DTYPE */
static sdpa_status check_attention_dtypes(const attention_args * a) {
    sdpa_ctx * ctx = a->ctx;
    TRY(check_float32(ctx, "query", a->q));
    if (!a->cache) {
        TRY(check_float32(ctx, "key", a->k));
        TRY(check_float32(ctx, "value", a->v));
    }
    if (a->has_sinks) TRY(check_float32(ctx, "sinks", a->sinks));
    TRY(check_float32(ctx, "out", a->out));
    return SDPA_OK;
}

static kv_geometry kv_geometry_of(const attention_args * a) {
    kv_geometry g;
    if (a->cache) {
        g.kb = g.vb = a->cache->batch;
        g.kt = g.vt = a->cache->max_seq_len;
        g.kh = g.vh = a->cache->kv_heads;
        g.kd = g.vd = a->cache->head_dim;
    } else {
        g.kb = a->k->dims[0]; g.kt = a->k->dims[1]; g.kh = a->k->dims[2]; g.kd = a->k->dims[3];
        g.vb = a->v->dims[0]; g.vt = a->v->dims[1]; g.vh = a->v->dims[2]; g.vd = a->v->dims[3];
    }
    return g;
}

/* E_BATCH, E_HEADS, E_HEAD_DIM, E_KV_LEN: the query against the key/value
 * geometry g. */
static sdpa_status check_attention_geometry(const attention_args * a, const kv_geometry * g) {
    sdpa_ctx * ctx = a->ctx;
    const sdpa_tensor * q = a->q, * sinks = a->sinks;
    const sdpa_kv_cache * cache = a->cache;
    const int32_t B = q->dims[0], Hq = q->dims[2], D = q->dims[3];
    const int32_t kb = g->kb, kh = g->kh, kd = g->kd, kt = g->kt, vb = g->vb, vh = g->vh, vd = g->vd, vt = g->vt;
    const int32_t kdims[4] = { kb, kt, kh, kd };
    const char * kname = cache ? "the cache" : "key";
    /* the key bound's start (-1: not checked) */
    const int64_t hint_start = a->check_room && a->o->start_pos >= 0 ? a->o->start_pos : -1;

    /* E_BATCH */
    if (kb != B) return sdpa_fail(ctx, SDPA_E_BATCH, "%s has batch %d but query has batch %d; batches must match (no broadcasting)", kname, kb, B);
    if (vb != B) return sdpa_fail(ctx, SDPA_E_BATCH, "value has batch %d but query has batch %d; batches must match (no broadcasting)", vb, B);
    if (a->out->dims[0] != B) return sdpa_fail(ctx, SDPA_E_BATCH, "out has batch %d but query has batch %d", a->out->dims[0], B);

    /* E_HEADS */
    TRY(check_heads_zero(ctx, "query", q, 2));
    if (!cache) {
        TRY(check_heads_zero(ctx, "key", a->k, 2));
        TRY(check_heads_zero(ctx, "value", a->v, 2));
    }
    if (a->has_sinks) TRY(check_heads_zero(ctx, "sinks", sinks, 0));
    if (kh != vh) return sdpa_fail(ctx, SDPA_E_HEADS, "key has %d heads but value has %d; key and value heads must be equal", kh, vh);
    if (kh > Hq)
        return sdpa_fail(ctx, SDPA_E_HEADS, "%s has %d heads but query has %d; key heads must not exceed query heads%s",
                         kname, kh, Hq, layout_hint(q->dims, kdims, cache, hint_start, a->has_mask));
    if (Hq % kh != 0)
        return sdpa_fail(ctx, SDPA_E_HEADS, "%s has %d heads but query has %d; query heads must be a multiple of key heads (GQA)%s",
                         kname, kh, Hq, layout_hint(q->dims, kdims, cache, hint_start, a->has_mask));
    if (a->has_sinks && sinks->dims[0] != Hq)
        return sdpa_fail(ctx, SDPA_E_HEADS, "sinks has %d entries but query has %d heads; one sink logit per query head", sinks->dims[0], Hq);

    /* E_HEAD_DIM */
    if (kd != D) return sdpa_fail(ctx, SDPA_E_HEAD_DIM, "%s has head dim %d but query has %d; head dims must be equal", kname, kd, D);
    if (vd != D) return sdpa_fail(ctx, SDPA_E_HEAD_DIM, "value has head dim %d but query has %d; head dims must be equal", vd, D);

    /* E_KV_LEN */
    if (vt != kt) return sdpa_fail(ctx, SDPA_E_KV_LEN, "key has sequence length %d but value has %d; they must be equal", kt, vt);
    return SDPA_OK;
}

/* E_START_POS: non-negative, room for the query rows (check_room), a cache's
 * written rows, a windowed cache's evicted rows. */
static sdpa_status check_attention_start(const attention_args * a, const kv_geometry * g) {
    sdpa_ctx * ctx = a->ctx;
    const sdpa_kv_cache * cache = a->cache;
    const sdpa_options * o = a->o;
    const int32_t Sq = a->q->dims[1];
    const int32_t kdims[4] = { g->kb, g->kt, g->kh, g->kd };
    const int32_t Skv = g->kt < g->vt ? g->kt : g->vt;
    if (o->start_pos < 0)
        return sdpa_fail(ctx, SDPA_E_START_POS, "startPos is %lld; expected a non-negative integer", (long long)o->start_pos);
    if (a->check_room && !a->has_mask && o->start_pos > (int64_t)Skv - Sq)
        return sdpa_fail(ctx, SDPA_E_START_POS,
                         "startPos %lld + query length %d = %s exceeds the %s %d; without a mask the op reads keys 0 .. startPos+Sq-1%s",
                         (long long)o->start_pos, Sq, SUM(o->start_pos, Sq),
                         cache ? "cache length maxSeqLen" : "key/value length", Skv,
                         layout_hint(a->q->dims, kdims, cache, o->start_pos, false));
    /* attend (check_room): without a mask, a cache's rows past its length were never written */
    if (cache && a->check_room && !a->has_mask && o->start_pos > (int64_t)cache->length - Sq)
        return sdpa_fail(ctx, SDPA_E_START_POS,
                         "startPos %lld + query length %d = %s is past the %s written (cache.length); attention over a cache reads written rows only",
                         (long long)o->start_pos, Sq, SUM(o->start_pos, Sq), ROWS(cache->length));
    if (cache && cache->window) {
        const int32_t window = o->window ? o->window : cache->window;
        int64_t first = o->start_pos - window + 1;  /* the first row's oldest key after the sink rows */
        if (first < cache->sink_tokens) first = cache->sink_tokens;
        if (first <= o->start_pos && first < cache->window_start)
            return sdpa_fail(ctx, SDPA_E_START_POS,
                             "the query row at startPos %lld sees keys from row %lld, but rows %d .. %d of the windowed cache were evicted; startPos must be >= %lld",
                             (long long)o->start_pos, (long long)first, cache->sink_tokens, cache->window_start - 1,
                             (long long)cache->window_start + window - 1);
    }
    return SDPA_OK;
}

/* E_MASK_DTYPE, E_MASK_SHAPE: attnMask, then treeMask. */
static sdpa_status check_attention_masks(const attention_args * a, const kv_geometry * g) {
    sdpa_ctx * ctx = a->ctx;
    const sdpa_tensor * mask = a->mask, * tree = a->tree;
    const int32_t Sq = a->q->dims[1], kt = g->kt;
    if (a->has_mask) {
        if (mask->dtype != SDPA_DTYPE_FLOAT32 && mask->dtype != SDPA_DTYPE_BOOL)
            return sdpa_fail(ctx, SDPA_E_MASK_DTYPE, "attnMask has dtype %s (%d); expected float32 or bool", dtype_name(mask->dtype), mask->dtype);
        if (mask->dims[0] != Sq || mask->dims[1] > kt)
            return sdpa_fail(ctx, SDPA_E_MASK_SHAPE,
                             "attnMask has dims %s but must be [Sq, N] = [%d, N] with N \u2264 %d (%s); this op does not broadcast masks",
                             DIMS(mask), Sq, kt, a->cache ? "maxSeqLen" : "key length");
    }
    if (a->has_tree) {
        if (tree->dtype != SDPA_DTYPE_BOOL)
            return sdpa_fail(ctx, SDPA_E_MASK_DTYPE, "treeMask has dtype %s (%d); expected bool", dtype_name(tree->dtype), tree->dtype);
        if (tree->dims[0] != Sq || tree->dims[1] != Sq)
            return sdpa_fail(ctx, SDPA_E_MASK_SHAPE, "treeMask has dims %s but must be [Sq, Sq] = [%d, %d] (the new rows over the new rows)",
                             DIMS(tree), Sq, Sq);
    }
    return SDPA_OK;
}

/* valid: describe the problem */
static void describe_attention(const attention_args * a, const kv_geometry * g, sdpa_problem * p) {
    const sdpa_tensor * q = a->q, * mask = a->mask;
    const sdpa_kv_cache * cache = a->cache;
    const sdpa_options * o = a->o;
    const bool has_mask = a->has_mask, has_tree = a->has_tree;
    const int32_t B = q->dims[0], Sq = q->dims[1], Hq = q->dims[2], D = q->dims[3];
    const int32_t kh = g->kh, kt = g->kt;
    p->batch = B; p->q_len = Sq; p->q_heads = Hq; p->kv_heads = kh; p->head_dim = D;
    p->group = Hq / kh;
    /* (in a step, startPos may still be out of room here: the update half
     * reports it; keep the arithmetic defined either way) */
    p->n_keys = has_mask ? mask->dims[1] : o->start_pos > (int64_t)kt - Sq ? kt : (int32_t)(o->start_pos + Sq);
    p->start_pos = o->start_pos;
    p->is_causal = o->is_causal;
    p->window = o->window ? o->window : cache ? cache->window : 0;
    p->sink_tokens = cache ? cache->sink_tokens : 0;
    p->softcap = o->softcap;
    p->sinks = a->has_sinks ? a->sinks->data : NULL;
    p->scale = o->has_scale ? o->scale : (float)(1.0 / sqrt((double)D));
    p->q = q->data;
    p->out = a->out->data;
    p->q_stride_b = (size_t)Sq * (size_t)Hq * (size_t)D;
    p->mask = has_mask ? mask->data : NULL;
    p->mask_dtype = has_mask ? mask->dtype : 0;
    p->mask_stride = has_mask ? mask->dims[1] : 0;
    p->tree = has_tree ? (const uint8_t *)a->tree->data : NULL;
    p->tree_stride = has_tree ? Sq : 0;
    p->tree_pos = o->start_pos;
    memset(&p->rope, 0, sizeof p->rope);  /* (a cache call's rotary: check_rotary) */
    sdpa_kv_view * kv = &p->kv;
    kv->batch = B; kv->len = kt; kv->heads = kh; kv->dim = D;
    if (cache) {
        kv->k = kv->v = NULL;
        kv->stride_t = kv->stride_h = kv->stride_b = 0;
        kv->pages = cache->table;
        kv->pages_per_head = cache->pages_per_head;
        kv->sink_pages = cache->sink_pages;
        kv->ring_pages = cache->ring_pages;
        kv->format = &cache->format;
        kv->f16_format = cache->float16_newest_page ? &cache->f16_format : NULL;
    } else {
        kv->pages = NULL;
        kv->pages_per_head = kv->sink_pages = kv->ring_pages = 0;
        kv->format = kv->f16_format = NULL;
        kv->k = a->k->data; kv->v = a->v->data;
        kv->stride_h = (size_t)D;
        kv->stride_t = (size_t)kh * (size_t)D;
        kv->stride_b = (size_t)kt * kv->stride_t;
    }
}

/* Shared by customSdpa and cache attend. Either key/value are given, or
 * cache. The rules' steps in the table's order (the first failure wins),
 * then the problem. */
static sdpa_status check_attention(sdpa_ctx * ctx, const sdpa_tensor * q,
                                   const sdpa_tensor * k, const sdpa_tensor * v,
                                   const sdpa_kv_cache * cache, const sdpa_tensor * mask,
                                   const sdpa_options * o, const sdpa_tensor * out,
                                   bool check_room, sdpa_problem * p) {
    if (!o) o = &default_options;
    const attention_args a = {
        .ctx = ctx, .q = q, .k = k, .v = v, .mask = mask, .out = out,
        .sinks = o->sinks, .tree = o->tree_mask, .cache = cache, .o = o,
        .has_mask = present(mask), .has_sinks = present(o->sinks), .has_tree = present(o->tree_mask),
        .check_room = check_room,
    };
    TRY(check_attention_args(&a));
    TRY(check_attention_ranks(&a));
    TRY(check_attention_dims(&a));
    TRY(check_attention_dtypes(&a));
    const kv_geometry g = kv_geometry_of(&a);
    TRY(check_attention_geometry(&a, &g));
    TRY(check_attention_start(&a, &g));
    TRY(check_attention_masks(&a, &g));
    TRY(check_tail_options(ctx, mask, o));  /* E_MASK_CAUSAL, E_DROPOUT, E_SCALE */
    describe_attention(&a, &g, p);
    return SDPA_OK;
}

sdpa_status sdpa_check_custom(sdpa_ctx * ctx, const sdpa_tensor * query,
                              const sdpa_tensor * key, const sdpa_tensor * value,
                              const sdpa_tensor * mask, const sdpa_options * options,
                              const sdpa_tensor * out, sdpa_problem * problem) {
    return check_attention(ctx, query, key, value, NULL, mask, options, out, true, problem);
}

/* The lowest status among the candidates wins (the first rule in the table's
 * order), with its message; ties go to the first one found. */
typedef struct first_failure {
    sdpa_status status;
    char message[SDPA_ERROR_CAP];
} first_failure;

static void keep_first(first_failure * f, const sdpa_ctx * ctx, sdpa_status s) {
    if (s == SDPA_OK || (f->status != SDPA_OK && f->status <= s)) return;
    f->status = s;
    memcpy(f->message, ctx->last_error, sizeof f->message);
}

static sdpa_status report_first(sdpa_ctx * ctx, const first_failure * f) {
    if (f->status != SDPA_OK) memcpy(ctx->last_error, f->message, sizeof f->message);
    return f->status;
}

/* ---- rotary embeddings --------------------------------------------------
 * The rules of a call's rotary option, in the table's order, for `rows` new
 * rows (-1: unknown, the rules that need them are left to the call's own,
 * which fail first) whose default positions are start .. start + rows - 1,
 * `rows_name` the tensor that has them; out (NULL for an update) must not
 * overlap the tables or the positions. Fills *rope (half 0 without rotary). */
static sdpa_status check_rotary(sdpa_ctx * ctx, const sdpa_kv_cache * cache, const sdpa_rotary * ro,
                                const sdpa_tensor * out, int64_t start, int32_t rows, const char * rows_name,
                                sdpa_rope * rope) {
    memset(rope, 0, sizeof *rope);
    if (!ro) return SDPA_OK;
    const sdpa_tensor * c = ro->cos, * s = ro->sin;
    const uint64_t pos_bytes = ro->n_positions > 0 ? (uint64_t)ro->n_positions * sizeof(int32_t) : 0;
    /* E_ARG */
    if (!present(c)) return sdpa_fail(ctx, SDPA_E_ARG, "rotary.cos is missing; expected a tensor { data, dims }");
    if (!present(s)) return sdpa_fail(ctx, SDPA_E_ARG, "rotary.sin is missing; expected a tensor { data, dims }");
    if (ro->interleaved != 0 && ro->interleaved != 1)
        return sdpa_fail(ctx, SDPA_E_ARG, "rotary.interleaved is %d; expected 0 or 1", ro->interleaved);
    if (ro->n_positions < 0 || (ro->n_positions > 0) != (ro->positions != NULL))
        return sdpa_fail(ctx, SDPA_E_ARG, "rotary.positions and its count %d disagree; pass both or neither", ro->n_positions);
    if (in_cache(cache, c)) return fail_in_cache(ctx, "rotary.cos");
    if (in_cache(cache, s)) return fail_in_cache(ctx, "rotary.sin");
    if (pos_bytes && sdpa_page_pool_overlaps(cache->ctx->pages, ro->positions, pos_bytes)) return fail_in_cache(ctx, "rotary.positions");
    if (out && overlaps(out, c)) return fail_shares(ctx, "rotary.cos");
    if (out && overlaps(out, s)) return fail_shares(ctx, "rotary.sin");
    if (out && pos_bytes && ranges_overlap(out->data, claimed_bytes(out), ro->positions, pos_bytes))
        return fail_shares(ctx, "rotary.positions");
    /* E_RANK */
    TRY(check_rank(ctx, "rotary.cos", c, 2, "2-D [maxPosition, rotaryDim / 2]"));
    TRY(check_rank(ctx, "rotary.sin", s, 2, "2-D [maxPosition, rotaryDim / 2]"));
    /* E_DIMS */
    TRY(check_dims(ctx, "rotary.cos", c, -1));
    TRY(check_dims(ctx, "rotary.sin", s, -1));
    if (s->dims[0] != c->dims[0] || s->dims[1] != c->dims[1])
        return sdpa_fail(ctx, SDPA_E_DIMS, "rotary.sin has dims %s but rotary.cos has %s; they must be equal", DIMS(s), DIMS(c));
    if (ro->positions && rows >= 0 && ro->n_positions != rows)
        return sdpa_fail(ctx, SDPA_E_DIMS, "rotary.positions has %d entries but %s has %s; one position per new row",
                         ro->n_positions, rows_name, ROWS(rows));
    /* E_DTYPE */
    TRY(check_float32(ctx, "rotary.cos", c));
    TRY(check_float32(ctx, "rotary.sin", s));
    /* E_HEAD_DIM */
    if (2 * (int64_t)c->dims[1] > cache->head_dim)
        return sdpa_fail(ctx, SDPA_E_HEAD_DIM, "rotary.cos has dims %s: rotaryDim 2 * %d = %lld is more than the cache's headDim %d; rotaryDim must be at most the head dim",
                         DIMS(c), c->dims[1], 2 * (long long)c->dims[1], cache->head_dim);
    /* E_START_POS */
    const int32_t P = c->dims[0];
    for (int32_t k = 0; k < ro->n_positions; k++)
        if (ro->positions[k] < 0 || ro->positions[k] >= P)
            return sdpa_fail(ctx, SDPA_E_START_POS, "rotary.positions[%d] is %d; expected a position in 0 .. %d (the rows of rotary.cos and rotary.sin)",
                             k, ro->positions[k], P - 1);
    if (!ro->positions && rows > 0 && start >= 0 && start > (int64_t)P - rows)
        return sdpa_fail(ctx, SDPA_E_START_POS, "the new rows sit at positions %lld .. %s, but rotary.cos and rotary.sin hold positions 0 .. %d; pass longer tables or rotary.positions",
                         (long long)start, sum_of(start, rows, -1).s, P - 1);  /* (no overflow: start may be near INT64_MAX) */
    rope->cos = c->data;
    rope->sin = s->data;
    rope->half = c->dims[1];
    rope->interleaved = ro->interleaved;
    rope->pos = ro->positions;
    return SDPA_OK;
}

/* The rows of a query-like tensor, or -1 when its dims say nothing yet. */
static int32_t rows_of_input(const sdpa_tensor * t) {
    return present(t) && t->rank == 4 && t->dims[1] > 0 ? t->dims[1] : -1;
}

sdpa_status sdpa_check_cache_attend(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                    const sdpa_tensor * query, const sdpa_tensor * mask,
                                    const sdpa_options * options, const sdpa_tensor * out,
                                    bool check_room, sdpa_problem * problem) {
    if (!cache) return sdpa_fail(ctx, SDPA_E_ARG, "cache is missing");
    first_failure first = { SDPA_OK, "" };
    keep_first(&first, ctx, check_attention(ctx, query, NULL, NULL, cache, mask, options, out, check_room, problem));
    if (options && options->rotary)  /* (q rows at startPos + i, or rotary.positions[i]) */
        keep_first(&first, ctx, check_rotary(ctx, cache, options->rotary, present(out) ? out : NULL, options->start_pos,
                                             rows_of_input(query), "query", &problem->rope));
    else
        memset(&problem->rope, 0, sizeof problem->rope);
    return report_first(ctx, &first);
}

sdpa_status sdpa_check_cache_truncate(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int64_t length) {
    if (!cache) return sdpa_fail(ctx, SDPA_E_ARG, "cache is missing");
    if (length < 0)
        return sdpa_fail(ctx, SDPA_E_START_POS, "length is %lld; expected a non-negative integer", (long long)length);
    if (length > cache->length)
        return sdpa_fail(ctx, SDPA_E_CAPACITY, "length %lld is past the %s written (cache.length); truncate keeps rows 0 .. length-1 of those",
                         (long long)length, ROWS(cache->length));
    if (length > cache->sink_tokens && length < cache->window_start)
        return sdpa_fail(ctx, SDPA_E_CAPACITY,
                         "length %lld would end inside the evicted rows %d .. %d of the windowed cache; expected <= %d (sink rows only) or >= %d",
                         (long long)length, cache->sink_tokens, cache->window_start - 1, cache->sink_tokens, cache->window_start);
    return SDPA_OK;
}

/* keepRows. E_START_POS: start, then each rows[k] (strictly
 * increasing offsets), then the last row read must be written; E_CAPACITY:
 * n = 0 is truncate(start); a windowed cache's rows start .. start + last
 * must all be kept rows. */
sdpa_status sdpa_check_cache_keep_rows(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                       int64_t start, const int32_t * rows, int32_t n) {
    if (!cache) return sdpa_fail(ctx, SDPA_E_ARG, "cache is missing");
    if (n < 0 || (n > 0 && !rows)) return sdpa_fail(ctx, SDPA_E_ARG, "rows is missing");
    if (start < 0)
        return sdpa_fail(ctx, SDPA_E_START_POS, "start is %lld; expected a non-negative integer", (long long)start);
    for (int32_t k = 0; k < n; k++)
        if (rows[k] < 0 || (k > 0 && rows[k] <= rows[k - 1]))
            return sdpa_fail(ctx, SDPA_E_START_POS,
                             "rows[%d] is %d; expected non-negative offsets from start in increasing order (after %d)",
                             k, rows[k], k > 0 ? rows[k - 1] : -1);
    return sdpa_check_cache_keep_span(ctx, cache, start, n, n > 0 ? rows[n - 1] : 0);
}

sdpa_status sdpa_check_cache_keep_span(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                       int64_t start, int32_t n, int64_t last_offset) {
    if (n > 0 && start + last_offset >= cache->length)
        return sdpa_fail(ctx, SDPA_E_START_POS, "rows[%d] = %lld is row %lld, past the %s written (cache.length)",
                         n - 1, (long long)last_offset, (long long)(start + last_offset), ROWS(cache->length));
    if (n == 0) return sdpa_check_cache_truncate(ctx, cache, start);
    const int64_t last = start + last_offset;
    if (cache->window && last >= cache->sink_tokens && start < cache->window_start)
        return sdpa_fail(ctx, SDPA_E_CAPACITY,
                         "rows %lld .. %lld include rows %d .. %d, evicted from the windowed cache; keep rows from %d on",
                         (long long)start, (long long)last, cache->sink_tokens, cache->window_start - 1, cache->window_start);
    return SDPA_OK;
}

sdpa_status sdpa_check_cache_fork(sdpa_ctx * ctx, const sdpa_kv_cache * cache, const void * out_cache) {
    if (!cache) return sdpa_fail(ctx, SDPA_E_ARG, "cache is missing");
    if (!out_cache) return sdpa_fail(ctx, SDPA_E_ARG, "out_cache is missing");
    return SDPA_OK;
}

/* Rows [start, start+length) of a cache: shared by update (write: no hole
 * may be left, start <= length) and read. */
static sdpa_status check_rows(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                              int64_t start, int64_t length, const char * what, bool write) {
    if (start < 0)
        return sdpa_fail(ctx, SDPA_E_START_POS, "%s is %lld; expected a non-negative integer", what, (long long)start);
    if (write && start > cache->length)
        return sdpa_fail(ctx, SDPA_E_START_POS,
                         "%s %lld is past the %s written (cache.length); a write must start at or before length (rows %d .. %lld would be a hole)",
                         what, (long long)start, ROWS(cache->length), cache->length, (long long)start - 1);
    /* a windowed cache: rows sink_tokens .. window_start-1 are gone */
    const int64_t S = cache->sink_tokens, first = start > S ? start : S;
    const bool evicted = cache->window && start + length > S && first < cache->window_start;
    if (write && evicted)
        return sdpa_fail(ctx, SDPA_E_START_POS,
                         "rows %lld .. %lld include row %lld, but rows %d .. %d of the windowed cache were evicted; a write must not reach back into evicted rows",
                         (long long)start, (long long)(start + length - 1), (long long)first, cache->sink_tokens, cache->window_start - 1);
    if (start > (int64_t)cache->max_seq_len - length)
        return sdpa_fail(ctx, SDPA_E_CAPACITY,
                         "%s %s at %s %lld needs %s %s but the cache holds maxSeqLen = %d",
                         write ? "writing" : "reading", ROWS(length), what, (long long)start, SUM(start, length),
                         start + length == 1 ? "row" : "rows", cache->max_seq_len);
    if (evicted)
        return sdpa_fail(ctx, SDPA_E_CAPACITY,
                         "rows %lld .. %lld include row %lld, but rows %d .. %d of the windowed cache were evicted; only the sink rows and the rows from windowStart on are kept",
                         (long long)start, (long long)(start + length - 1), (long long)first, cache->sink_tokens, cache->window_start - 1);
    if (!write && cache->window && start + length > cache->length)
        return sdpa_fail(ctx, SDPA_E_CAPACITY,
                         "rows %lld .. %lld are past the %s written (cache.length); a windowed cache holds written rows only",
                         (long long)start, (long long)(start + length - 1), ROWS(cache->length));
    return SDPA_OK;
}

/* key/value-shaped tensors against the cache geometry. want_rows >= 0: both
 * must have exactly that many rows (E_DIMS; cache.read's outputs). */
static sdpa_status check_kv_pair(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                 const sdpa_tensor * k, const char * kname,
                                 const sdpa_tensor * v, const char * vname, int64_t want_rows) {
    TRY(check_rank(ctx, kname, k, 4, BSHD_WRITE));
    TRY(check_rank(ctx, vname, v, 4, BSHD_WRITE));
    TRY(check_dims(ctx, kname, k, 2));
    TRY(check_dims(ctx, vname, v, 2));
    if (want_rows >= 0) {
        if (k->dims[1] != want_rows)
            return sdpa_fail(ctx, SDPA_E_DIMS, "%s has %d rows but %lld were asked for", kname, k->dims[1], (long long)want_rows);
        if (v->dims[1] != want_rows)
            return sdpa_fail(ctx, SDPA_E_DIMS, "%s has %d rows but %lld were asked for", vname, v->dims[1], (long long)want_rows);
    }
    TRY(check_float32(ctx, kname, k));
    TRY(check_float32(ctx, vname, v));
    const sdpa_tensor * both[2] = { k, v };
    const char * names[2] = { kname, vname };
    for (int i = 0; i < 2; i++)
        if (both[i]->dims[0] != cache->batch)
            return sdpa_fail(ctx, SDPA_E_BATCH, "%s has batch %d but the cache has batch %d", names[i], both[i]->dims[0], cache->batch);
    for (int i = 0; i < 2; i++) TRY(check_heads_zero(ctx, names[i], both[i], 2));
    for (int i = 0; i < 2; i++)
        if (both[i]->dims[2] != cache->kv_heads)
            return sdpa_fail(ctx, SDPA_E_HEADS, "%s has %d heads but the cache has numKvHeads = %d%s", names[i], both[i]->dims[2],
                             cache->kv_heads, both[i]->dims[1] == cache->kv_heads ? torch_layout : "");
    for (int i = 0; i < 2; i++)
        if (both[i]->dims[3] != cache->head_dim)
            return sdpa_fail(ctx, SDPA_E_HEAD_DIM, "%s has head dim %d but the cache has headDim = %d", names[i], both[i]->dims[3], cache->head_dim);
    if (k->dims[1] != v->dims[1])
        return sdpa_fail(ctx, SDPA_E_KV_LEN, "%s has %d rows but %s has %d; they must be equal", kname, k->dims[1], vname, v->dims[1]);
    return SDPA_OK;
}

static sdpa_status check_update(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                const sdpa_tensor * key, const sdpa_tensor * value,
                                int64_t start_pos) {
    if (!cache) return sdpa_fail(ctx, SDPA_E_ARG, "cache is missing");
    if (!present(key)) return sdpa_fail(ctx, SDPA_E_ARG, "key is missing");
    if (!present(value)) return sdpa_fail(ctx, SDPA_E_ARG, "value is missing");
    if (in_cache(cache, key)) return fail_in_cache(ctx, "key");
    if (in_cache(cache, value)) return fail_in_cache(ctx, "value");
    TRY(check_kv_pair(ctx, cache, key, "key", value, "value", -1));
    return check_rows(ctx, cache, start_pos, key->dims[1], "startPos", true);
}

sdpa_status sdpa_check_cache_update_rotary(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                           const sdpa_tensor * key, const sdpa_tensor * value,
                                           int64_t start_pos, const sdpa_rotary * rotary, sdpa_rope * rope) {
    first_failure first = { SDPA_OK, "" };
    keep_first(&first, ctx, check_update(ctx, cache, key, value, start_pos));
    memset(rope, 0, sizeof *rope);
    if (cache && rotary)  /* (K rows at startPos + i, or rotary.positions[i]) */
        keep_first(&first, ctx, check_rotary(ctx, cache, rotary, NULL, start_pos, rows_of_input(key), "key", rope));
    return report_first(ctx, &first);
}

sdpa_status sdpa_check_cache_read(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                  int64_t start, int64_t length, const sdpa_tensor * key_out,
                                  const sdpa_tensor * value_out) {
    if (!cache) return sdpa_fail(ctx, SDPA_E_ARG, "cache is missing");
    if (!present(key_out)) return sdpa_fail(ctx, SDPA_E_ARG, "key_out is missing");
    if (!present(value_out)) return sdpa_fail(ctx, SDPA_E_ARG, "value_out is missing");
    if (overlaps(key_out, value_out) || in_cache(cache, key_out) || in_cache(cache, value_out))
        return sdpa_fail(ctx, SDPA_E_ARG, "key_out and value_out must not overlap each other or the cache");
    TRY(check_rank(ctx, "key_out", key_out, 4, BSHD_WRITE));
    TRY(check_rank(ctx, "value_out", value_out, 4, BSHD_WRITE));
    if (length <= 0)
        return sdpa_fail(ctx, SDPA_E_DIMS, "length is %lld; expected a positive integer", (long long)length);
    TRY(check_kv_pair(ctx, cache, key_out, "key_out", value_out, "value_out", length));
    return check_rows(ctx, cache, start, length, "start", false);
}

sdpa_status sdpa_check_cache_rows(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                  int64_t start, int64_t length) {
    return check_rows(ctx, cache, start, length, "start", false);
}

sdpa_status sdpa_check_cache_read_records(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                          int64_t start, int64_t length, int32_t which, const void * out,
                                          uint64_t out_bytes) {
    if (!cache) return sdpa_fail(ctx, SDPA_E_ARG, "cache is missing");
    if (!out) return sdpa_fail(ctx, SDPA_E_ARG, "out is missing");
    if (which != 0 && which != 1) return sdpa_fail(ctx, SDPA_E_ARG, "which is %d; expected 0 (keys) or 1 (values)", which);
    if (length <= 0)
        return sdpa_fail(ctx, SDPA_E_DIMS, "length is %lld; expected a positive integer", (long long)length);
    TRY(check_rows(ctx, cache, start, length, "start", false));
    const uint64_t rows = (uint64_t)cache->batch * (uint64_t)length * (uint64_t)cache->kv_heads;
    const uint64_t want = sdpa_size_mul(rows, sdpa_kv_record_bytes(sdpa_kv_dtype(&cache->format, which), cache->head_dim));
    if (out_bytes != want)
        return sdpa_fail(ctx, SDPA_E_DIMS, "out holds %llu bytes but [%d, %lld, %d] %s records of head dim %d take %llu",
                         (unsigned long long)out_bytes, cache->batch, (long long)length, cache->kv_heads,
                         dtype_name(sdpa_kv_dtype(&cache->format, which)), cache->head_dim, (unsigned long long)want);
    if (sdpa_page_pool_overlaps(cache->ctx->pages, out, want))
        return sdpa_fail(ctx, SDPA_E_ARG, "out lies inside cache storage; pass a separate buffer");
    return SDPA_OK;
}

sdpa_status sdpa_check_cache_create(sdpa_ctx * ctx, int64_t batch,
                                    int64_t max_seq_len, int64_t kv_heads, int64_t head_dim,
                                    int32_t key_dtype, int32_t value_dtype, int64_t window, int64_t sink_tokens,
                                    const void * out_cache) {
    if (!out_cache) return sdpa_fail(ctx, SDPA_E_ARG, "out_cache is missing");
    /* (a sinkTokens past the limit is its own E_DIMS, whatever the window) */
    if (sink_tokens > 0 && sink_tokens <= SDPA_INDEX_LIMIT && window == 0)
        return sdpa_fail(ctx, SDPA_E_ARG, "sinkTokens is %lld but no window was given; sink rows belong to a windowed cache",
                         (long long)sink_tokens);
    /* E_DIMS in the order createKVCache reads its options; the int32 bounds
     * are reached only through sdpa_wasm_kv_cache_plan (a JS number) */
    if (batch <= 0) return sdpa_fail(ctx, SDPA_E_DIMS, "batch is %lld; expected a positive integer", (long long)batch);
    if (batch > INT32_MAX) return sdpa_fail(ctx, SDPA_E_DIMS, "batch is %lld; at most %d (2^31 - 1)", (long long)batch, INT32_MAX);
    if (window < 0) return sdpa_fail(ctx, SDPA_E_DIMS, "window is %lld; expected a positive integer", (long long)window);
    if (window > SDPA_INDEX_LIMIT) return sdpa_fail(ctx, SDPA_E_DIMS, "window is %lld; at most %d", (long long)window, SDPA_INDEX_LIMIT);
    if (sink_tokens < 0) return sdpa_fail(ctx, SDPA_E_DIMS, "sinkTokens is %lld; expected a non-negative integer", (long long)sink_tokens);
    if (sink_tokens > SDPA_INDEX_LIMIT) return sdpa_fail(ctx, SDPA_E_DIMS, "sinkTokens is %lld; at most %d", (long long)sink_tokens, SDPA_INDEX_LIMIT);
    if (max_seq_len <= 0) return sdpa_fail(ctx, SDPA_E_DIMS, "maxSeqLen is %lld; expected a positive integer", (long long)max_seq_len);
    /* the kernels walk keys in int32 tiles (internal.h) */
    if (max_seq_len > SDPA_INDEX_LIMIT) return sdpa_fail(ctx, SDPA_E_DIMS, "maxSeqLen is %lld; at most %d", (long long)max_seq_len, SDPA_INDEX_LIMIT);
    if (kv_heads < 0) return sdpa_fail(ctx, SDPA_E_DIMS, "numKvHeads is %lld; expected a positive integer", (long long)kv_heads);
    if (kv_heads > INT32_MAX) return sdpa_fail(ctx, SDPA_E_DIMS, "numKvHeads is %lld; at most %d (2^31 - 1)", (long long)kv_heads, INT32_MAX);
    if (head_dim <= 0) return sdpa_fail(ctx, SDPA_E_DIMS, "headDim is %lld; expected a positive integer", (long long)head_dim);
    if (head_dim > INT32_MAX) return sdpa_fail(ctx, SDPA_E_DIMS, "headDim is %lld; at most %d (2^31 - 1)", (long long)head_dim, INT32_MAX);
    /* K then V (C sees two dtypes; JS names the option a bad value came from: dtype, keyDtype or valueDtype) */
    for (int value = 0; value < 2; value++) {
        const int32_t dtype = value ? value_dtype : key_dtype;
        if (!sdpa_dtype_traits_of(dtype)) {
            char names[128];
            sdpa_dtype_list(names, sizeof names, false);
            return sdpa_fail(ctx, SDPA_E_DTYPE, "%s %s (%d) is not supported for a cache; expected %s",
                             value ? "valueDtype" : "keyDtype", dtype_name(dtype), dtype, names);
        }
    }
    if (kv_heads == 0)
        return sdpa_fail(ctx, SDPA_E_HEADS, "numKvHeads is 0; expected a positive integer");
    return SDPA_OK;
}

sdpa_status sdpa_check_cache_save_rows(sdpa_ctx * ctx, const sdpa_kv_cache * c,
                                       int64_t start, int64_t length) {
    if (length < 0 || length > INT32_MAX)
        return sdpa_fail(ctx, SDPA_E_DIMS, "length is %lld; expected a non-negative integer", (long long)length);
    if (start < 0) return sdpa_fail(ctx, SDPA_E_START_POS, "start is %lld; expected a non-negative integer", (long long)start);
    if (!c) return SDPA_OK;
    const int64_t end = start + length;
    if (end > c->length) {
        /* the last row as JS prints it: past 2^53 its sums round (exact for C's int32 callers) */
        const double after = (double)start + (double)length, next = (double)start + 1.0;
        return sdpa_fail(ctx, SDPA_E_CAPACITY, "rows %lld .. %.0f are past the %s written (cache.length); a save holds written rows only",
                         (long long)start, (after > next ? after : next) - 1.0, ROWS(c->length));
    }
    if (c->window && end > c->sink_tokens && end < c->window_start)
        return sdpa_fail(ctx, SDPA_E_CAPACITY,
                         "the saved rows would end at row %lld, inside the evicted rows %d .. %d of the windowed cache; expected an end <= %d (sink rows only) or >= %d",
                         (long long)end, c->sink_tokens, c->window_start - 1, c->sink_tokens, c->window_start);
    return SDPA_OK;
}

sdpa_status sdpa_check_cache_plan_rows(sdpa_ctx * ctx, int32_t max_seq_len, int64_t rows) {
    if (rows < 0) return sdpa_fail(ctx, SDPA_E_DIMS, "rows is %lld; expected a non-negative integer", (long long)rows);
    if (rows > max_seq_len)
        return sdpa_fail(ctx, SDPA_E_CAPACITY, "rows is %lld but the cache holds maxSeqLen = %d", (long long)rows, max_seq_len);
    return SDPA_OK;
}

sdpa_status sdpa_check_cache_step(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                                  const sdpa_tensor * query, const sdpa_tensor * key,
                                  const sdpa_tensor * value, const sdpa_tensor * mask,
                                  const sdpa_options * options, const sdpa_tensor * out,
                                  sdpa_problem * problem) {
    const int64_t start_pos = options ? options->start_pos : 0;
    first_failure first = { SDPA_OK, "" };
    /* every rule of both halves and the step's own, before anything is written */
    /* (the query's E_ARG and E_DTYPE first: within one code the JS layer names the query first) */
    if (cache && in_cache(cache, query)) keep_first(&first, ctx, fail_in_cache(ctx, "query"));
    if (present(query) && query->dtype != SDPA_DTYPE_FLOAT32) keep_first(&first, ctx, check_float32(ctx, "query", query));
    keep_first(&first, ctx, check_update(ctx, cache, key, value, start_pos));
    keep_first(&first, ctx, sdpa_check_cache_attend(ctx, cache, query, mask, options, out, false, problem));
    const bool have = present(query) && present(key) && present(value) && present(out);
    const bool over_key = have && overlaps(out, key);
    if (over_key || (have && overlaps(out, value)))
        keep_first(&first, ctx, fail_shares(ctx, over_key ? "key" : "value"));
    if (have && query->rank == 4 && key->rank == 4 && query->dims[1] != key->dims[1])
        keep_first(&first, ctx, sdpa_fail(ctx, SDPA_E_DIMS, "query has %s but key has %d; a step attends exactly the rows it writes%s",
                                          ROWS(query->dims[1]), key->dims[1],
                                          /* (query [B, Hq, S, D] and key [B, Hkv, S, D]: the rows differ because the heads do) */
                                          cache && query->dims[2] == key->dims[2] && key->dims[1] == cache->kv_heads ? torch_layout : ""));
    if (first.status != SDPA_OK) memcpy(ctx->last_error, first.message, sizeof first.message);
    return first.status;
}


/* ---- attendMany --------------------------------------------------------- */

#define ITEM_INPUTS 8
static const sdpa_tensor * item_input(const sdpa_attend_item * it, int which, const char ** name, bool step) {
    static const char * const names[ITEM_INPUTS] = { "query", "attnMask", "sinks", "treeMask", "key", "value", "rotary.cos", "rotary.sin" };
    const sdpa_rotary * ro = it->options ? it->options->rotary : NULL;
    *name = names[which];
    switch (which) {
    case 0: return it->query;
    case 1: return it->mask;
    case 2: return it->options ? it->options->sinks : NULL;
    case 3: return it->options ? it->options->tree_mask : NULL;
    case 4: return step ? it->key : NULL;
    case 5: return step ? it->value : NULL;
    case 6: return ro ? ro->cos : NULL;
    default: return ro ? ro->sin : NULL;
    }
}

/* An item's out over another item's rotary.positions (C callers only: JS
 * passes a private copy of them). */
static bool out_over_positions(const sdpa_attend_item * a, const sdpa_attend_item * b) {
    const sdpa_rotary * ro = b->options ? b->options->rotary : NULL;
    return present(a->out) && ro && ro->positions && ro->n_positions > 0 &&
           ranges_overlap(a->out->data, claimed_bytes(a->out), ro->positions, (uint64_t)ro->n_positions * sizeof(int32_t));
}

static sdpa_status check_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n,
                              sdpa_problem * problems, bool step) {
    if (!items || n < 1)
        return sdpa_fail(ctx, SDPA_E_ARG, "items is empty; expected 1 .. %d items", SDPA_MANY_MAX);
    if (n > SDPA_MANY_MAX)
        return sdpa_fail(ctx, SDPA_E_ARG, "%d items; at most %d in one call", n, SDPA_MANY_MAX);
    first_failure first = { SDPA_OK, "" };
    for (int32_t i = 0; i < n; i++) {
        const sdpa_attend_item * it = &items[i];
        const sdpa_status s = step ? sdpa_check_cache_step(ctx, it->cache, it->query, it->key, it->value, it->mask, it->options,
                                                           it->out, &problems[i])
                                   : sdpa_check_cache_attend(ctx, it->cache, it->query, it->mask, it->options, it->out, true,
                                                             &problems[i]);
        if (s != SDPA_OK) {  /* the item's words, after where they are */
            char name[32];
            snprintf(name, sizeof name, "items[%d]", i);
            keep_first(&first, ctx, sdpa_named(ctx, s, name));
        }
    }
    if (first.status != SDPA_E_ARG) {  /* the rules between items (E_ARG: they rank after an item's own E_ARG) */
        sdpa_status s = SDPA_OK;
        for (int32_t j = 1; j < n && s == SDPA_OK; j++)
            for (int32_t i = 0; i < j && s == SDPA_OK; i++) {
                const sdpa_attend_item * a = &items[i], * b = &items[j];
                const char * what;
                if (a->cache && a->cache == b->cache) {
                    s = sdpa_fail(ctx, SDPA_E_ARG, "items[%d] uses the same cache as items[%d]; one item per cache", j, i);
                    break;
                }
                if (present(a->out) && present(b->out) && overlaps(b->out, a->out)) {
                    s = sdpa_fail(ctx, SDPA_E_ARG, "items[%d].out shares memory with items[%d].out; out must not overlap any input or another item's out", j, i);
                    break;
                }
                for (int w = 0; w < ITEM_INPUTS && s == SDPA_OK; w++) {
                    const sdpa_tensor * x = item_input(a, w, &what, step);
                    if (present(x) && present(b->out) && overlaps(b->out, x))
                        s = sdpa_fail(ctx, SDPA_E_ARG, "items[%d].out shares memory with items[%d].%s; out must not overlap any input or another item's out", j, i, what);
                    x = item_input(b, w, &what, step);
                    if (s == SDPA_OK && present(x) && present(a->out) && overlaps(a->out, x))
                        s = sdpa_fail(ctx, SDPA_E_ARG, "items[%d].out shares memory with items[%d].%s; out must not overlap any input or another item's out", i, j, what);
                }
                if (s == SDPA_OK && out_over_positions(b, a))
                    s = sdpa_fail(ctx, SDPA_E_ARG, "items[%d].out shares memory with items[%d].rotary.positions; out must not overlap any input or another item's out", j, i);
                else if (s == SDPA_OK && out_over_positions(a, b))
                    s = sdpa_fail(ctx, SDPA_E_ARG, "items[%d].out shares memory with items[%d].rotary.positions; out must not overlap any input or another item's out", i, j);
            }
        if (s != SDPA_OK) return s;
    }
    if (first.status != SDPA_OK) memcpy(ctx->last_error, first.message, sizeof first.message);
    return first.status;
}

sdpa_status sdpa_check_attend_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n,
                                   sdpa_problem * problems) {
    return check_many(ctx, items, n, problems, false);
}

sdpa_status sdpa_check_step_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n,
                                 sdpa_problem * problems) {
    return check_many(ctx, items, n, problems, true);
}
