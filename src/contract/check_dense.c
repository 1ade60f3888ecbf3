/* check_dense.c: the rules of the dense calls (docs/CONTRACT.md section 6),
 * each checked once, here, before anything is written. Within a call the
 * rules are checked in status order (E_ARG, E_RANK, E_DIMS, E_DTYPE), so
 * the first broken one in that order is reported. Messages name the
 * argument, the rule and expected vs actual, and no function: the entry
 * puts its name first (sdpa_linear's own, or JS's call through
 * sdpa_wasm_linear: internal.h, sdpa_named). */
#include "dense/dense.h"

#include <math.h>
#include <stdio.h>

#define TRY(expr) do { sdpa_status s_ = (expr); if (s_ != SDPA_OK) return s_; } while (0)

static const char * dtype_label(int32_t dtype) {
    switch (dtype) {
    case SDPA_DTYPE_FLOAT32: return "float32";
    case SDPA_DTYPE_BOOL: return "bool";
    case SDPA_DTYPE_FLOAT16: return "float16";
    case SDPA_DTYPE_INT8: return "int8";
    case SDPA_DTYPE_INT4: return "int4";
    case SDPA_DTYPE_Q8_0: return "q8_0";
    case SDPA_DTYPE_Q4_0: return "q4_0";
    case SDPA_DTYPE_Q4_K: return "q4_k";
    case SDPA_DTYPE_Q6_K: return "q6_k";
    case SDPA_DTYPE_Q5_0: return "q5_0";
    default: return "unknown";
    }
}

static bool is_weight_dtype(int32_t dtype) {
    return dtype == SDPA_DTYPE_FLOAT32 || dtype == SDPA_DTYPE_FLOAT16 || dtype == SDPA_DTYPE_Q8_0 ||
           dtype == SDPA_DTYPE_Q4_0 || dtype == SDPA_DTYPE_Q4_K || dtype == SDPA_DTYPE_Q6_K || dtype == SDPA_DTYPE_Q5_0;
}

/* Values per block of a weight dtype (1: not a block dtype). */
static int32_t weight_block(int32_t dtype) {
    switch (dtype) {
    case SDPA_DTYPE_Q8_0: case SDPA_DTYPE_Q4_0: case SDPA_DTYPE_Q5_0: return SDPA_WEIGHT_BLOCK;
    case SDPA_DTYPE_Q4_K: case SDPA_DTYPE_Q6_K: return SDPA_WEIGHT_BLOCK_K;
    default: return 1;
    }
}

size_t sdpa_weight_row_bytes(int32_t dtype, int32_t cols) {
    if (!is_weight_dtype(dtype) || cols <= 0 || cols % weight_block(dtype) != 0) return 0;
    const uint64_t bytes = sdpa_weight_bytes(dtype, (uint64_t)cols, cols);
    return bytes > SIZE_MAX ? 0 : (size_t)bytes;
}

uint64_t sdpa_weight_bytes(int32_t dtype, uint64_t len, int32_t cols) {
    (void)cols;
    switch (dtype) {
    case SDPA_DTYPE_Q8_0: return sdpa_size_mul((len + 31) / 32, 34);
    case SDPA_DTYPE_Q4_0: return sdpa_size_mul((len + 31) / 32, 18);
    case SDPA_DTYPE_Q5_0: return sdpa_size_mul((len + 31) / 32, 22);
    case SDPA_DTYPE_Q4_K: return sdpa_size_mul((len + 255) / 256, 144);
    case SDPA_DTYPE_Q6_K: return sdpa_size_mul((len + 255) / 256, 210);
    case SDPA_DTYPE_FLOAT16: return sdpa_size_mul(len, 2);
    case SDPA_DTYPE_BOOL: return len;
    default: return sdpa_size_mul(len, 4);
    }
}

/* "[1, 2, 4]" of a tensor of rank 0..4. */
typedef struct dims_text { char s[64]; } dims_text;
static dims_text dims_of(const sdpa_tensor * t) {
    dims_text d;
    size_t n = 0;
    d.s[n++] = '[';
    for (int i = 0; i < t->rank && i < 4; i++) n += (size_t)snprintf(d.s + n, sizeof d.s - n, i ? ", %d" : "%d", t->dims[i]);
    snprintf(d.s + n, sizeof d.s - n, "]");
    return d;
}
#define DIMS(t) (dims_of(t).s)

/* ---- one tensor's own rules, pass by pass --------------------------------- */

static sdpa_status need(sdpa_ctx * ctx, const char * name, const void * t) {
    if (t) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_ARG, "%s is missing (NULL)", name);
}
static sdpa_status need_data(sdpa_ctx * ctx, const char * name, const sdpa_tensor * t) {
    if (t->data) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_ARG, "%s.data is NULL; expected a buffer of %s", name, DIMS(t));
}

static sdpa_status rank_in(sdpa_ctx * ctx, const char * name, const sdpa_tensor * t, int lo, int hi, const char * what) {
    if (t->rank >= lo && t->rank <= hi) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_RANK, "%s has rank %d; expected %s", name, t->rank, what);
}

/* Every dim positive (int32: at most SDPA_INDEX_LIMIT) and len their product. */
static sdpa_status dims_ok(sdpa_ctx * ctx, const char * name, const sdpa_tensor * t) {
    uint64_t p = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->dims[i] <= 0)
            return sdpa_fail(ctx, SDPA_E_DIMS, "%s.dims[%d] is %d; expected a positive size (dims %s)", name, i, t->dims[i], DIMS(t));
        p = sdpa_size_mul(p, (uint64_t)t->dims[i]);
    }
    if (p > (uint64_t)SIZE_MAX / 4)
        return sdpa_fail(ctx, SDPA_E_DIMS, "%s dims %s hold %llu elements; more than this build can address", name, DIMS(t),
                         (unsigned long long)p);
    if (p != (uint64_t)t->len)
        return sdpa_fail(ctx, SDPA_E_DIMS, "%s has %llu elements but dims %s need %llu", name,
                         (unsigned long long)t->len, DIMS(t), (unsigned long long)p);
    return SDPA_OK;
}

static sdpa_status float32_ok(sdpa_ctx * ctx, const char * name, const sdpa_tensor * t) {
    if (t->dtype == SDPA_DTYPE_FLOAT32) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_DTYPE, "%s has dtype %s (%d); expected float32", name, dtype_label(t->dtype), t->dtype);
}

static sdpa_status weight_dtype_ok(sdpa_ctx * ctx, const char * name, const sdpa_tensor * t) {
    if (is_weight_dtype(t->dtype)) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_DTYPE, "%s has dtype %s (%d); expected a weight dtype: float32, float16, q8_0, q4_0, q5_0, q4_k or q6_k",
                     name, dtype_label(t->dtype), t->dtype);
}

/* A block dtype's rows hold whole blocks (checked after dims_ok, before the dtype rule). */
static sdpa_status blocks_ok(sdpa_ctx * ctx, const char * name, const sdpa_tensor * t) {
    const int32_t cols = t->dims[t->rank - 1], block = weight_block(t->dtype);
    if (cols % block == 0) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_DIMS, "%s is %s %s with rows of %d values; expected a multiple of %d (its block)",
                     name, dtype_label(t->dtype), DIMS(t), cols, block);
}

/* ---- memory -------------------------------------------------------------- */

/* (Checked before the rank rules: a rank outside 1 .. 4 names no dim to read.) */
static uint64_t span_of(const sdpa_tensor * t) {
    const int32_t cols = t->rank > 0 && t->rank <= 4 ? t->dims[t->rank - 1] : 1;
    return sdpa_weight_bytes(t->dtype, (uint64_t)t->len, cols);
}

static bool overlap(const void * a, uint64_t a_bytes, const void * b, uint64_t b_bytes) {
    const uint64_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    if (a_bytes == 0 || b_bytes == 0) return false;
    return a0 >= b0 ? a0 - b0 < b_bytes : b0 - a0 < a_bytes;
}

/* out apart from `in`, or (same_ok) exactly on it: same start, same bytes. */
static sdpa_status apart(sdpa_ctx * ctx, const sdpa_tensor * out, const char * in_name, const sdpa_tensor * in,
                         bool same_ok) {
    const uint64_t ob = span_of(out), ib = span_of(in);
    if (!overlap(out->data, ob, in->data, ib)) return SDPA_OK;
    if (same_ok && out->data == in->data && ob == ib) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_ARG, "out shares memory with %s; expected %s", in_name,
                     same_ok ? "out to be that tensor itself (in place) or not to overlap it" : "out not to overlap it");
}

/* ---- the calls ----------------------------------------------------------- */

/* Rows of a [..., cols] activation tensor: every dim but the last. */
static int64_t leading(const sdpa_tensor * t) { return (int64_t)(t->len / (size_t)t->dims[t->rank - 1]); }

/* The same leading dims as ref, then `last`. */
static sdpa_status rows_match(sdpa_ctx * ctx, const char * name, const sdpa_tensor * t, const char * ref_name,
                              const sdpa_tensor * ref, int32_t last, const char * what) {
    bool same = t->rank == ref->rank && t->dims[t->rank - 1] == last;
    for (int i = 0; same && i + 1 < t->rank; i++) same = t->dims[i] == ref->dims[i];
    if (same) return SDPA_OK;
    return sdpa_fail(ctx, SDPA_E_DIMS, "%s has dims %s; expected %s's leading dims (%s %s) then %d (%s)", name, DIMS(t),
                     ref_name, ref_name, DIMS(ref), last, what);
}

sdpa_status sdpa_check_linear(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * w,
                              const sdpa_tensor * out, int32_t flags, sdpa_dense_product * p) {
    TRY(need(ctx, "x", x)); TRY(need(ctx, "weight", w)); TRY(need(ctx, "out", out));
    TRY(need_data(ctx, "x", x)); TRY(need_data(ctx, "weight", w)); TRY(need_data(ctx, "out", out));
    if (flags & ~(SDPA_LINEAR_ACCUMULATE | SDPA_LINEAR_INT16_ACTIVATIONS))
        return sdpa_fail(ctx, SDPA_E_ARG, "flags is %d; expected SDPA_LINEAR_ACCUMULATE (1), SDPA_LINEAR_INT16_ACTIVATIONS (2), both or 0", flags);
    TRY(apart(ctx, out, "x", x, false));
    TRY(apart(ctx, out, "weight", w, false));
    TRY(rank_in(ctx, "x", x, 1, 4, "1 to 4 ([..., inFeatures])"));
    TRY(rank_in(ctx, "weight", w, 2, 2, "2 ([outFeatures, inFeatures])"));
    TRY(rank_in(ctx, "out", out, 1, 4, "1 to 4 ([..., outFeatures])"));
    TRY(dims_ok(ctx, "x", x)); TRY(dims_ok(ctx, "weight", w)); TRY(dims_ok(ctx, "out", out));
    const int32_t rows = w->dims[0], cols = w->dims[1];
    if (x->dims[x->rank - 1] != cols)
        return sdpa_fail(ctx, SDPA_E_DIMS, "x has dims %s: rows of %d values, but weight %s takes rows of %d (its dims[1], inFeatures)",
                         DIMS(x), x->dims[x->rank - 1], DIMS(w), cols);
    TRY(rows_match(ctx, "out", out, "x", x, rows, "weight.dims[0], outFeatures"));
    TRY(blocks_ok(ctx, "weight", w));
    TRY(float32_ok(ctx, "x", x)); TRY(weight_dtype_ok(ctx, "weight", w)); TRY(float32_ok(ctx, "out", out));
    p->x = x->data; p->y = out->data; p->w = w->data;
    p->n = (int32_t)leading(x); p->rows = rows; p->cols = cols; p->dtype = w->dtype;
    p->row_bytes = sdpa_weight_row_bytes(w->dtype, cols);
    p->accumulate = (flags & SDPA_LINEAR_ACCUMULATE) != 0;
    p->int16_x = (flags & SDPA_LINEAR_INT16_ACTIVATIONS) && weight_block(w->dtype) == SDPA_WEIGHT_BLOCK;
    p->xq = NULL;
    p->xs = NULL;
    if (p->row_bytes == 0 || leading(x) > SDPA_INDEX_LIMIT)
        return sdpa_fail(ctx, SDPA_E_DIMS, "x dims %s and weight dims %s are larger than this build computes", DIMS(x), DIMS(w));
    return SDPA_OK;
}

static sdpa_status check_rows(sdpa_ctx * ctx, const char * xn, const sdpa_tensor * x, const sdpa_tensor * out) {
    TRY(rank_in(ctx, xn, x, 1, 4, "1 to 4"));
    TRY(rank_in(ctx, "out", out, 1, 4, "1 to 4"));
    TRY(dims_ok(ctx, xn, x)); TRY(dims_ok(ctx, "out", out));
    return SDPA_OK;
}

sdpa_status sdpa_check_rms_norm(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * w, float eps,
                                const sdpa_tensor * out, sdpa_dense_rows * p) {
    TRY(need(ctx, "x", x)); TRY(need(ctx, "weight", w)); TRY(need(ctx, "out", out));
    TRY(need_data(ctx, "x", x)); TRY(need_data(ctx, "weight", w)); TRY(need_data(ctx, "out", out));
    if (!(isfinite(eps) && eps >= 0.0f))
        return sdpa_fail(ctx, SDPA_E_ARG, "eps is %g; expected a finite number >= 0", (double)eps);
    TRY(apart(ctx, out, "x", x, true));
    TRY(apart(ctx, out, "weight", w, false));
    TRY(check_rows(ctx, "x", x, out));
    TRY(rank_in(ctx, "weight", w, 1, 1, "1 ([dim])"));
    TRY(dims_ok(ctx, "weight", w));
    const int32_t dim = x->dims[x->rank - 1];
    if (w->dims[0] != dim)
        return sdpa_fail(ctx, SDPA_E_DIMS, "weight has dims %s; expected [%d] (x's last dim)", DIMS(w), dim);
    TRY(rows_match(ctx, "out", out, "x", x, dim, "the same last dim"));
    TRY(float32_ok(ctx, "x", x)); TRY(float32_ok(ctx, "weight", w)); TRY(float32_ok(ctx, "out", out));
    p->x = x->data; p->b = w->data; p->y = out->data; p->n = leading(x); p->dim = dim; p->eps = eps;
    return SDPA_OK;
}

sdpa_status sdpa_check_swiglu(sdpa_ctx * ctx, const sdpa_tensor * gate, const sdpa_tensor * up,
                              const sdpa_tensor * out, sdpa_dense_rows * p) {
    TRY(need(ctx, "gate", gate)); TRY(need(ctx, "up", up)); TRY(need(ctx, "out", out));
    TRY(need_data(ctx, "gate", gate)); TRY(need_data(ctx, "up", up)); TRY(need_data(ctx, "out", out));
    TRY(apart(ctx, out, "gate", gate, true));
    TRY(apart(ctx, out, "up", up, true));
    TRY(check_rows(ctx, "gate", gate, out));
    TRY(rank_in(ctx, "up", up, 1, 4, "1 to 4"));
    TRY(dims_ok(ctx, "up", up));
    const int32_t dim = gate->dims[gate->rank - 1];
    TRY(rows_match(ctx, "up", up, "gate", gate, dim, "the same last dim"));
    TRY(rows_match(ctx, "out", out, "gate", gate, dim, "the same last dim"));
    TRY(float32_ok(ctx, "gate", gate)); TRY(float32_ok(ctx, "up", up)); TRY(float32_ok(ctx, "out", out));
    p->x = gate->data; p->b = up->data; p->y = out->data; p->n = leading(gate); p->dim = dim; p->eps = 0;
    return SDPA_OK;
}

sdpa_status sdpa_check_embed(sdpa_ctx * ctx, const sdpa_tensor * table, const int32_t * ids, int32_t n_ids,
                             const sdpa_tensor * out, sdpa_dense_rowcopy * p) {
    TRY(need(ctx, "table", table)); TRY(need(ctx, "out", out));
    TRY(need_data(ctx, "table", table)); TRY(need_data(ctx, "out", out));
    if (!ids) return sdpa_fail(ctx, SDPA_E_ARG, "ids is missing (NULL)");
    if (n_ids < 1) return sdpa_fail(ctx, SDPA_E_ARG, "ids has %d entries; expected at least 1", n_ids);
    TRY(apart(ctx, out, "table", table, false));
    if (overlap(out->data, span_of(out), ids, (uint64_t)n_ids * 4))
        return sdpa_fail(ctx, SDPA_E_ARG, "out shares memory with ids; expected out not to overlap it");
    if (table->rank == 2 && table->dims[0] > 0)
        for (int32_t i = 0; i < n_ids; i++)
            if (ids[i] < 0 || ids[i] >= table->dims[0])
                return sdpa_fail(ctx, SDPA_E_ARG, "ids[%d] is %d; expected a row of table, 0 .. %d", i, ids[i], table->dims[0] - 1);
    TRY(rank_in(ctx, "table", table, 2, 2, "2 ([vocab, dim])"));
    TRY(rank_in(ctx, "out", out, 2, 2, "2 ([ids, dim])"));
    TRY(dims_ok(ctx, "table", table)); TRY(dims_ok(ctx, "out", out));
    const int32_t dim = table->dims[1];
    if (out->dims[0] != n_ids || out->dims[1] != dim)
        return sdpa_fail(ctx, SDPA_E_DIMS, "out has dims %s; expected [%d, %d] (one row of table's %d values per id)",
                         DIMS(out), n_ids, dim, dim);
    TRY(blocks_ok(ctx, "table", table));
    TRY(weight_dtype_ok(ctx, "table", table)); TRY(float32_ok(ctx, "out", out));
    p->src = table->data; p->dst = out->data; p->ids = ids; p->n = n_ids; p->cols = dim; p->dtype = table->dtype;
    p->row_bytes = sdpa_weight_row_bytes(table->dtype, dim);
    return SDPA_OK;
}

sdpa_status sdpa_check_quantize(sdpa_ctx * ctx, const sdpa_tensor * source, const sdpa_tensor * out,
                                sdpa_dense_rowcopy * p) {
    TRY(need(ctx, "source", source)); TRY(need(ctx, "out", out));
    TRY(need_data(ctx, "source", source)); TRY(need_data(ctx, "out", out));
    TRY(apart(ctx, out, "source", source, false));
    TRY(rank_in(ctx, "source", source, 2, 2, "2 ([rows, cols])"));
    TRY(rank_in(ctx, "out", out, 2, 2, "2 ([rows, cols])"));
    TRY(dims_ok(ctx, "source", source)); TRY(dims_ok(ctx, "out", out));
    if (out->dims[0] != source->dims[0] || out->dims[1] != source->dims[1])
        return sdpa_fail(ctx, SDPA_E_DIMS, "out has dims %s; expected source's %s", DIMS(out), DIMS(source));
    TRY(blocks_ok(ctx, "out", out));
    TRY(float32_ok(ctx, "source", source)); TRY(weight_dtype_ok(ctx, "out", out));
    if (out->dtype == SDPA_DTYPE_Q4_K || out->dtype == SDPA_DTYPE_Q6_K || out->dtype == SDPA_DTYPE_Q5_0)
        return sdpa_fail(ctx, SDPA_E_DTYPE, "out has dtype %s (%d); expected float32, float16, q8_0 or q4_0 (quantizing to %s is not "
                         "offered: a GGUF file's %s tensors are used as they are)", dtype_label(out->dtype), out->dtype,
                         dtype_label(out->dtype), dtype_label(out->dtype));
    p->src = source->data; p->dst = out->data; p->ids = NULL; p->n = source->dims[0]; p->cols = source->dims[1];
    p->dtype = out->dtype; p->row_bytes = sdpa_weight_row_bytes(out->dtype, p->cols);
    return SDPA_OK;
}
