/* dense.c: the dense room's entry points (include/sdpa_dense.h): check
 * (contract/check_dense.c) -> run the weight dtype's row loops (dtype_kernels:
 * one table per dtype, its loops inlining the microkernels of dense_kernels.h)
 * over units of output rows on the context's pool.
 *
 * A product's units: weight rows in tiles of UNIT_ROWS, times (for several
 * x rows) blocks of UNIT_XROWS x rows. Every output element is computed
 * whole inside one unit, in the one order of dense_kernels.h, so neither the
 * units nor the thread that runs them change a bit. */
#include "dense/dense.h"
#include "dense/dense_kernels.h"

#include <math.h>
#include <string.h>

#define UNIT_ROWS 16   /* weight rows per unit */
#define UNIT_XROWS 64  /* x rows per unit (several x rows: prefill) */
#define DECODE_SUMS_COLS 16384  /* q4_k decode: x's sub-block sums on the stack up to this many cols (2 KiB) */

void sdpa_ctx_set_dense_parallel_min_macs(sdpa_ctx * ctx, double macs) {
    if (ctx) ctx->dense_min_macs = macs > 0 ? macs : 0;  /* (NaN: 0) */
}

/* Runs fn over n units: on the pool, or on the calling thread alone when the
 * work is small (or there is one unit). */
static void run_units(sdpa_ctx * ctx, sdpa_task_fn fn, void * arg, int32_t n_units, double macs) {
    if (n_units <= 1 || ctx->n_threads == 1 || macs < ctx->dense_min_macs) {
        for (int32_t u = 0; u < n_units; u++) fn(arg, u, 0);
    } else {
        sdpa_pool_run(ctx->pool, fn, arg, n_units);
    }
}

/* ---- y = x · wᵀ --------------------------------------------------------- */

typedef struct product_job product_job;

/* A weight dtype's row loops (XNNPACK's microkernel per variant): decode runs
 * stream groups g0 .. g1-1 of one x row (decode_streams), prefill x rows
 * i0 .. i1-1 against weight rows r0 .. r1-1. Each is a function of its own,
 * reached only through dtype_kernels' table: binaryen inlines every function
 * with one caller, and V8 then allocated registers over one product function
 * holding every dtype's loops, spilling accumulators and constants to the
 * stack in the hot loops (block dtypes' decode 1.2-1.5x slower; bench/HISTORY.md). */
typedef void (*decode_fn)(const sdpa_dense_product * p, int32_t g0, int32_t g1);
typedef void (*prefill_fn)(const product_job * job, int32_t thread, int32_t i0, int32_t i1, int32_t r0, int32_t r1);
typedef struct dtype_kernels {
    decode_fn decode, decode_i16;    /* _i16: SDPA_LINEAR_INT16_ACTIVATIONS (block dtypes; else NULL) */
    prefill_fn prefill, prefill_i16;
} dtype_kernels;

struct product_job {
    const sdpa_dense_product * p;
    const dtype_kernels * k;   /* the weight dtype's loops */
    int32_t w_tiles;           /* units per x block */
    int32_t decode_groups;     /* decode: stream groups per unit */
    float * scratch;           /* float16 prefill: per thread 2 * cols floats */
    size_t scratch_floats;
    float * sums;              /* q4_k prefill: x's sub-block sums, [n][cols / 32] */
};

/* Decode (one x row) walks the weight matrix in `far` streams: group g holds
 * rows g, g + q, ..., g + (far - 1) q, q = ceil(rows / far), each a
 * sequential stream from its own region of the matrix (rows side by side in
 * one page stream badly from the L3: dense_kernels.h, f32_dot_w4). */
static int32_t decode_streams(int32_t dtype) {
    return dtype == SDPA_DTYPE_FLOAT32 ? 4 : dtype == SDPA_DTYPE_FLOAT16 ? 1 : 2;
}

/* Whether group g has a row in every stream (g + (far - 1) q < rows). */
static inline bool decode_whole(const sdpa_dense_product * p, int32_t g, int32_t far, int32_t q) {
    return g + (far - 1) * q < p->rows;
}

/* ---- float32, float16 ---- */

static void decode_f32(const sdpa_dense_product * p, int32_t g0, int32_t g1) {
    const bool acc = p->accumulate != 0;
    const int32_t q = (p->rows + 3) / 4;
    const float * w = (const float *)p->w;
    const size_t rs = (size_t)p->cols;
    for (int32_t g = g0; g < g1; g++) {
        if (decode_whole(p, g, 4, q)) {
            f32_dot_w4(w + g * rs, (size_t)q * rs, p->x, p->cols, p->y + g, (size_t)q, acc);
        } else {
            for (int32_t r = g; r < p->rows; r += q) { const float s = f32_dot_w1(w + r * rs, p->x, p->cols); p->y[r] = acc ? p->y[r] + s : s; }
        }
    }
}

static void decode_f16(const sdpa_dense_product * p, int32_t g0, int32_t g1) {
    const bool acc = p->accumulate != 0;
    for (int32_t g = g0; g < g1; g++) {
        const uint8_t * w = p->w + g * p->row_bytes;
        v128_t special = wasm_i32x4_splat(0);
        float s = f16_dot_w1((const uint16_t *)w, p->x, p->cols, &special);
        if (wasm_v128_any_true(special)) s = dot_exact(p->dtype, w, p->x, p->cols);
        p->y[g] = acc ? p->y[g] + s : s;
    }
}

/* float32 weight rows w (n_w of them, rs floats apart) against x rows i0 .. i1-1. */
static inline void f32_block(const sdpa_dense_product * p, const float * w, size_t rs, int32_t o, int32_t n_w,
                             int32_t i0, int32_t i1) {
    const bool acc = p->accumulate != 0;
    const size_t cols = (size_t)p->cols, ys = (size_t)p->rows;
    int32_t i = i0;
    if (n_w == 2)
        for (; i + 4 <= i1; i += 4) f32_dot_x4w2(w, rs, p->x + i * cols, cols, p->cols, p->y + i * ys + o, ys, acc);
    for (; i < i1; i++)
        for (int32_t k = 0; k < n_w; k++) {
            const float s = f32_dot_w1(w + k * rs, p->x + i * cols, p->cols);
            float * yo = p->y + i * ys + o + k;
            *yo = acc ? *yo + s : s;
        }
}

static void prefill_f32(const product_job * job, int32_t thread, int32_t i0, int32_t i1, int32_t r0, int32_t r1) {
    (void)thread;
    const sdpa_dense_product * p = job->p;
    for (int32_t o = r0; o < r1; o += 2) f32_block(p, (const float *)p->w + o * (size_t)p->cols, (size_t)p->cols, o, r1 - o >= 2 ? 2 : 1, i0, i1);
}

static void prefill_f16(const product_job * job, int32_t thread, int32_t i0, int32_t i1, int32_t r0, int32_t r1) {
    /* two rows at a time converted exactly (Inf and NaN too) into this
     * thread's scratch, then the float32 kernels: the same order, the same bits */
    const sdpa_dense_product * p = job->p;
    const size_t cols = (size_t)p->cols;
    float * tile = job->scratch + (size_t)thread * job->scratch_floats;
    for (int32_t o = r0; o < r1; o += 2) {
        const int32_t n_w = r1 - o >= 2 ? 2 : 1;
        for (int32_t k = 0; k < n_w; k++) {
            const uint16_t * h = (const uint16_t *)(p->w + (o + k) * p->row_bytes);
            float * t = tile + k * cols;
            int32_t j = 0;
            for (; j + 8 <= p->cols; j += 8) {
                const v128_t v = wasm_v128_load(h + j);
                wasm_v128_store(t + j, f16x4_to_f32x4(wasm_u32x4_extend_low_u16x8(v)));
                wasm_v128_store(t + j + 4, f16x4_to_f32x4(wasm_u32x4_extend_high_u16x8(v)));
            }
            for (; j < p->cols; j++) t[j] = half_to_float(load_u16((const uint8_t *)(h + j)));
        }
        f32_block(p, tile, cols, o, n_w, i0, i1);
    }
}

/* ---- q8_0, q4_0, q5_0 (32-value blocks) ----
 * Each loop below is inlined with dt a constant, so that every dtype has loops of its own. */

/* Decode groups g0 .. g1-1 of dtype dt; i16: on x quantized to int16 (SDPA_LINEAR_INT16_ACTIVATIONS). */
static inline __attribute__((always_inline)) void block_decode(const sdpa_dense_product * p, int32_t dt, bool i16, int32_t g0,
                                                               int32_t g1) {
    const bool acc = p->accumulate != 0;
    const size_t rb = p->row_bytes;
    const int32_t nb = p->cols / 32, q = (p->rows + 1) / 2;
    for (int32_t g = g0; g < g1; g++) {
        const bool whole = decode_whole(p, g, 2, q);
        if (i16) q_dot_i16x_w2_of(p->w + g * rb, (size_t)q * rb, whole ? 2 : 1, dt, p->xq, p->xs, nb, p->y + g, (size_t)q, acc);
        else if (whole) q_dot_w2_of(p->w + g * rb, (size_t)q * rb, dt, p->x, nb, p->y + g, (size_t)q, acc);
        else { const float s = q_dot_w1_of(p->w + g * rb, dt, p->x, nb); p->y[g] = acc ? p->y[g] + s : s; }
    }
}

/* x rows i0 .. i1-1 against weight rows r0 .. r1-1 of dtype dt: 4 x rows at a time, then one by one. */
static inline __attribute__((always_inline)) void block_prefill(const product_job * job, int32_t dt, bool i16, int32_t i0,
                                                                int32_t i1, int32_t r0, int32_t r1) {
    const sdpa_dense_product * p = job->p;
    const bool acc = p->accumulate != 0;
    const size_t cols = (size_t)p->cols, ys = (size_t)p->rows;
    const int32_t nb = p->cols / 32;
    for (int32_t o = r0; o < r1; o++) {
        const uint8_t * w = p->w + o * p->row_bytes;
        float * y = p->y + o;
        int32_t i = i0;
        for (; i + 4 <= i1; i += 4) {
            if (i16) q_dot_i16x_x4w1_of(w, dt, p->xq + i * cols, cols, p->xs + (size_t)i * nb, nb, y + i * ys, ys, acc);
            else q_dot_x4w1_of(w, dt, p->x + i * cols, cols, nb, y + i * ys, ys, acc);
        }
        for (; i < i1; i++) {
            if (i16) { q_dot_i16x_w2_of(w, 0, 1, dt, p->xq + i * cols, p->xs + (size_t)i * nb, nb, y + i * ys, 0, acc); continue; }
            const float s = q_dot_w1_of(w, dt, p->x + i * cols, nb);
            y[i * ys] = acc ? y[i * ys] + s : s;
        }
    }
}

/* The four loops of block dtype DT as functions NAME_decode ... NAME_prefill_i16. */
#define BLOCK_DTYPE_LOOPS(NAME, DT)                                                                              \
    static void NAME##_decode(const sdpa_dense_product * p, int32_t g0, int32_t g1) { block_decode(p, DT, false, g0, g1); } \
    static void NAME##_decode_i16(const sdpa_dense_product * p, int32_t g0, int32_t g1) { block_decode(p, DT, true, g0, g1); } \
    static void NAME##_prefill(const product_job * job, int32_t thread, int32_t i0, int32_t i1, int32_t r0, int32_t r1) { \
        (void)thread;                                                                                             \
        block_prefill(job, DT, false, i0, i1, r0, r1);                                                           \
    }                                                                                                             \
    static void NAME##_prefill_i16(const product_job * job, int32_t thread, int32_t i0, int32_t i1, int32_t r0, int32_t r1) { \
        (void)thread;                                                                                             \
        block_prefill(job, DT, true, i0, i1, r0, r1);                                                             \
    }
BLOCK_DTYPE_LOOPS(q8_0, SDPA_DTYPE_Q8_0)
BLOCK_DTYPE_LOOPS(q4_0, SDPA_DTYPE_Q4_0)
BLOCK_DTYPE_LOOPS(q5_0, SDPA_DTYPE_Q5_0)

/* ---- q4_k, q6_k (256-value blocks) ---- */

static inline __attribute__((always_inline)) void kq_decode(const sdpa_dense_product * p, bool q4k, int32_t g0, int32_t g1) {
    const bool acc = p->accumulate != 0;
    const size_t rb = p->row_bytes;
    const int32_t q = (p->rows + 1) / 2;
    /* q4_k: x's sub-block sums made once for the unit's rows (not once per
     * two rows), on the stack when x is at most DECODE_SUMS_COLS long (the
     * same values: block_sums_k's order) */
    float sum_buf[DECODE_SUMS_COLS / 32];
    const float * sums = NULL;
    if (q4k && p->cols <= DECODE_SUMS_COLS && g1 - g0 > 1) {
        for (int32_t b = 0; b < p->cols / 256; b++) block_sums_k(p->x + 256 * b, sum_buf + 8 * b);
        sums = sum_buf;
    }
    for (int32_t g = g0; g < g1; g++)
        kq_dot_w2_of(p->w + g * rb, (size_t)q * rb, decode_whole(p, g, 2, q) ? 2 : 1, q4k, p->x, sums, p->cols / 256, p->y + g, (size_t)q, acc);
}

static inline __attribute__((always_inline)) void kq_prefill(const product_job * job, bool q4k, int32_t i0, int32_t i1,
                                                             int32_t r0, int32_t r1) {
    const sdpa_dense_product * p = job->p;
    const bool acc = p->accumulate != 0;
    const size_t cols = (size_t)p->cols, ys = (size_t)p->rows;
    const int32_t nb = p->cols / 256;
    const size_t ss = (size_t)nb * 8;  /* sums per x row */
    for (int32_t o = r0; o < r1; o++) {
        const uint8_t * w = p->w + o * p->row_bytes;
        int32_t i = i0;
        for (; i + 4 <= i1; i += 4)
            kq_dot_x4w1_of(w, q4k, p->x + i * cols, cols, q4k ? job->sums + i * ss : NULL, nb, p->y + i * ys + o, ys, acc);
        for (; i < i1; i++) {
            const float s = kq_dot_w1_of(w, q4k, p->x + i * cols, q4k ? job->sums + i * ss : NULL, nb);
            float * yo = p->y + i * ys + o;
            *yo = acc ? *yo + s : s;
        }
    }
}

static void q4_k_decode(const sdpa_dense_product * p, int32_t g0, int32_t g1) { kq_decode(p, true, g0, g1); }
static void q6_k_decode(const sdpa_dense_product * p, int32_t g0, int32_t g1) { kq_decode(p, false, g0, g1); }
static void q4_k_prefill(const product_job * job, int32_t thread, int32_t i0, int32_t i1, int32_t r0, int32_t r1) {
    (void)thread;
    kq_prefill(job, true, i0, i1, r0, r1);
}
static void q6_k_prefill(const product_job * job, int32_t thread, int32_t i0, int32_t i1, int32_t r0, int32_t r1) {
    (void)thread;
    kq_prefill(job, false, i0, i1, r0, r1);
}

/* The table, by weight dtype (sdpa_check_linear admits only these). */
static const dtype_kernels KERNELS_F32 = { decode_f32, NULL, prefill_f32, NULL };
static const dtype_kernels KERNELS_F16 = { decode_f16, NULL, prefill_f16, NULL };
static const dtype_kernels KERNELS_Q8_0 = { q8_0_decode, q8_0_decode_i16, q8_0_prefill, q8_0_prefill_i16 };
static const dtype_kernels KERNELS_Q4_0 = { q4_0_decode, q4_0_decode_i16, q4_0_prefill, q4_0_prefill_i16 };
static const dtype_kernels KERNELS_Q5_0 = { q5_0_decode, q5_0_decode_i16, q5_0_prefill, q5_0_prefill_i16 };
static const dtype_kernels KERNELS_Q4_K = { q4_k_decode, NULL, q4_k_prefill, NULL };
static const dtype_kernels KERNELS_Q6_K = { q6_k_decode, NULL, q6_k_prefill, NULL };

static const dtype_kernels * kernels_of(int32_t dtype) {
    switch (dtype) {
    case SDPA_DTYPE_FLOAT32: return &KERNELS_F32;
    case SDPA_DTYPE_FLOAT16: return &KERNELS_F16;
    case SDPA_DTYPE_Q8_0: return &KERNELS_Q8_0;
    case SDPA_DTYPE_Q4_0: return &KERNELS_Q4_0;
    case SDPA_DTYPE_Q5_0: return &KERNELS_Q5_0;
    case SDPA_DTYPE_Q4_K: return &KERNELS_Q4_K;
    case SDPA_DTYPE_Q6_K: return &KERNELS_Q6_K;
    default: return NULL;  /* (a dtype sdpa_check_linear admits without loops here: E_DTYPE at the entry) */
    }
}

static void product_unit(void * arg, int32_t unit, int32_t thread) {
    const product_job * job = arg;
    const sdpa_dense_product * p = job->p;
    if (p->n == 1) {
        const int32_t far = decode_streams(p->dtype), q = (p->rows + far - 1) / far, per = job->decode_groups;
        const int32_t g0 = unit * per, g1 = g0 + per < q ? g0 + per : q;
        (p->int16_x ? job->k->decode_i16 : job->k->decode)(p, g0, g1);
        return;
    }
    const int32_t xb = unit / job->w_tiles, wt = unit % job->w_tiles;
    const int32_t r0 = wt * UNIT_ROWS, r1 = r0 + UNIT_ROWS < p->rows ? r0 + UNIT_ROWS : p->rows;
    const int32_t i0 = xb * UNIT_XROWS, i1 = i0 + UNIT_XROWS < p->n ? i0 + UNIT_XROWS : p->n;
    (p->int16_x ? job->k->prefill_i16 : job->k->prefill)(job, thread, i0, i1, r0, r1);
}

sdpa_status sdpa_linear_unnamed(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, sdpa_tensor * out,
                                int32_t flags) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_dense_product p;
    sdpa_status s = sdpa_check_linear(ctx, x, weight, out, flags, &p);
    if (s != SDPA_OK) return s;
    product_job job = { &p, kernels_of(p.dtype), (p.rows + UNIT_ROWS - 1) / UNIT_ROWS, 0, NULL, 0, NULL };
    if (!job.k) return sdpa_fail(ctx, SDPA_E_DTYPE, "weight dtype %d has no products in this build", (int)p.dtype);
    if (p.int16_x) {  /* x quantized once, on this thread, into the scratch: [n][cols] int16, then [n][nb] scales */
        const int32_t nb = p.cols / 32;
        const uint64_t q_bytes = sdpa_size_mul((uint64_t)p.n * (uint64_t)p.cols, 2);
        s = sdpa_scratch_reserve(ctx, sdpa_size_add(sdpa_size_add(q_bytes, sdpa_size_mul((uint64_t)p.n * (uint64_t)nb, 4)), 64));
        s = sdpa_named(ctx, s, "x quantized to int16");  /* (what the scratch was for) */
        if (s != SDPA_OK) return s;
        p.xq = (int16_t *)(((uintptr_t)ctx->scratch + 15) & ~(uintptr_t)15);
        p.xs = (float *)((uint8_t *)p.xq + q_bytes);
        for (int32_t i = 0; i < p.n; i++)
            quantize_x_row(p.x + (size_t)i * p.cols, nb, p.xq + (size_t)i * p.cols, p.xs + (size_t)i * nb);
    }
    if (p.dtype == SDPA_DTYPE_FLOAT16 && p.n > 1) {
        job.scratch_floats = ((size_t)2 * p.cols + 15) & ~(size_t)15;
        s = sdpa_scratch_reserve(ctx, sdpa_size_mul((uint64_t)ctx->n_threads * job.scratch_floats, 4) + 64);
        s = sdpa_named(ctx, s, "the float16 prefill's row buffers");  /* (what the scratch was for) */
        if (s != SDPA_OK) return s;
        job.scratch = (float *)(((uintptr_t)ctx->scratch + 63) & ~(uintptr_t)63);
    }
    if (p.dtype == SDPA_DTYPE_Q4_K && p.n > 1) {  /* x's sub-block sums once, on this thread (decode makes its own) */
        const uint64_t n_sums = (uint64_t)p.n * (uint64_t)(p.cols / 32);
        s = sdpa_scratch_reserve(ctx, sdpa_size_add(sdpa_size_mul(n_sums, 4), 64));
        s = sdpa_named(ctx, s, "the q4_k prefill's sums of x");  /* (what the scratch was for) */
        if (s != SDPA_OK) return s;
        job.sums = (float *)(((uintptr_t)ctx->scratch + 15) & ~(uintptr_t)15);
        for (uint64_t k = 0; k < n_sums; k++) job.sums[k] = subblock_sum(p.x + 32 * k);
    }
    int32_t n_units;
    if (p.n == 1) {
        /* about 4 units a thread, each a run of consecutive groups: a thread's streams stay
         * sequential (units of a few groups each, taken by the threads in turn, interleaved
         * two threads' rows in the same pages: 2 threads ran the 135M shape at 0.83x of one) */
        const int32_t far = decode_streams(p.dtype), q = (p.rows + far - 1) / far;
        const int32_t spread = (q + 4 * ctx->n_threads - 1) / (4 * ctx->n_threads);
        job.decode_groups = spread > UNIT_ROWS / far ? spread : UNIT_ROWS / far;
        n_units = (q + job.decode_groups - 1) / job.decode_groups;
    } else {
        n_units = job.w_tiles * ((p.n + UNIT_XROWS - 1) / UNIT_XROWS);
    }
    run_units(ctx, product_unit, &job, n_units, (double)p.n * p.rows * p.cols);
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_linear(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, sdpa_tensor * out,
                        int32_t flags) {
    return sdpa_named(ctx, sdpa_linear_unnamed(ctx, x, weight, out, flags), __func__);
}

/* ---- RMSNorm, SwiGLU ---------------------------------------------------- */

static void rms_norm_row(const float * x, const float * w, float * y, int32_t dim, float eps) {
    v128_t a = wasm_f32x4_splat(0);
    int32_t j = 0;
    for (; j + 4 <= dim; j += 4) { const v128_t v = wasm_v128_load(x + j); a = f32x4_fmadd(a, v, v); }
    float ss = f32x4_hsum(a);
    for (int32_t k = j; k < dim; k++) ss += x[k] * x[k];
    const float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    const v128_t vs = wasm_f32x4_splat(scale);
    for (j = 0; j + 4 <= dim; j += 4)
        wasm_v128_store(y + j, wasm_f32x4_mul(wasm_v128_load(w + j), wasm_f32x4_mul(vs, wasm_v128_load(x + j))));
    for (; j < dim; j++) y[j] = w[j] * (scale * x[j]);
}

sdpa_status sdpa_rms_norm_unnamed(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, float eps,
                                  sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_dense_rows p;
    sdpa_status s = sdpa_check_rms_norm(ctx, x, weight, eps, out, &p);
    if (s != SDPA_OK) return s;
    for (int64_t i = 0; i < p.n; i++) rms_norm_row(p.x + i * p.dim, p.b, p.y + i * p.dim, p.dim, p.eps);
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_rms_norm(sdpa_ctx * ctx, const sdpa_tensor * x, const sdpa_tensor * weight, float eps,
                          sdpa_tensor * out) {
    return sdpa_named(ctx, sdpa_rms_norm_unnamed(ctx, x, weight, eps, out), __func__);
}

sdpa_status sdpa_swiglu_unnamed(sdpa_ctx * ctx, const sdpa_tensor * gate, const sdpa_tensor * up, sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_dense_rows p;
    sdpa_status s = sdpa_check_swiglu(ctx, gate, up, out, &p);
    if (s != SDPA_OK) return s;
    const size_t len = (size_t)p.n * (size_t)p.dim;
    size_t j = 0;
    for (; j + 4 <= len; j += 4) wasm_v128_store(p.y + j, swiglu4(wasm_v128_load(p.x + j), wasm_v128_load(p.b + j)));
    if (j < len) {  /* the tail through the same vector code, lane by lane */
        float g[4] = { 0, 0, 0, 0 }, u[4] = { 0, 0, 0, 0 }, r[4];
        memcpy(g, p.x + j, (len - j) * 4);
        memcpy(u, p.b + j, (len - j) * 4);
        wasm_v128_store(r, swiglu4(wasm_v128_load(g), wasm_v128_load(u)));
        memcpy(p.y + j, r, (len - j) * 4);
    }
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_swiglu(sdpa_ctx * ctx, const sdpa_tensor * gate, const sdpa_tensor * up, sdpa_tensor * out) {
    return sdpa_named(ctx, sdpa_swiglu_unnamed(ctx, gate, up, out), __func__);
}

/* ---- embedding rows, quantization ---------------------------------------- */

/* Row `row` of a weight (row_bytes apart) as cols float32 values. */
static void decode_weight_row(int32_t dtype, const uint8_t * w, int32_t cols, float * y) {
    switch (dtype) {
    case SDPA_DTYPE_FLOAT32: memcpy(y, w, (size_t)cols * 4); break;
    case SDPA_DTYPE_FLOAT16: {
        int32_t j = 0;
        for (; j + 8 <= cols; j += 8) {
            const v128_t v = wasm_v128_load(w + 2 * j);
            wasm_v128_store(y + j, f16x4_to_f32x4(wasm_u32x4_extend_low_u16x8(v)));
            wasm_v128_store(y + j + 4, f16x4_to_f32x4(wasm_u32x4_extend_high_u16x8(v)));
        }
        for (; j < cols; j++) y[j] = half_to_float(load_u16(w + 2 * j));
        break;
    }
    case SDPA_DTYPE_Q4_K:  /* (d * sc) * q - dmin * m, float32 steps, as dequantize_row_q4_K */
        for (int32_t b = 0; b < cols / 256; b++) {
            const uint8_t * p = w + (size_t)b * 144;
            float ds[8], dm[8];
            q4k_scales(p, ds, dm);
            v128_t f[8];
            for (int s = 0; s < 8; s++) {
                q4k_sub(p + 16 + 32 * (s / 2), s & 1, f);
                const v128_t vd = wasm_f32x4_splat(ds[s]), vm = wasm_f32x4_splat(dm[s]);
                for (int k = 0; k < 8; k++) wasm_v128_store(y + 256 * b + 32 * s + 4 * k, wasm_f32x4_sub(wasm_f32x4_mul(f[k], vd), vm));
            }
        }
        break;
    case SDPA_DTYPE_Q6_K:  /* (d * sc) * (q - 32), as dequantize_row_q6_K */
        for (int32_t b = 0; b < cols / 256; b++) {
            const uint8_t * p = w + (size_t)b * 210;
            const float d = half_to_float(load_u16(p + 208));
            v128_t q[8], f[4];
            for (int h = 0; h < 2; h++) {
                q6k_half(p, h, q);
                for (int k = 0; k < 8; k++) {
                    i8x16_to_f32_2p24(wasm_i8x16_sub(q[k], wasm_i8x16_splat(32)), f);
                    const v128_t vd = wasm_f32x4_splat(q6k_scale(d, p, 8 * h + k));
                    for (int j = 0; j < 4; j++) wasm_v128_store(y + 256 * b + 128 * h + 16 * k + 4 * j, wasm_f32x4_mul(f[j], vd));
                }
            }
        }
        break;
    default: {
        v128_t f[8];
        for (int32_t b = 0; b < cols / 32; b++) {
            const float d = qb_block(dtype, w + b * qb_bytes(dtype), f);
            const v128_t vd = wasm_f32x4_splat(d);
            for (int k = 0; k < 8; k++) wasm_v128_store(y + 32 * b + 4 * k, wasm_f32x4_mul(f[k], vd));
        }
        break;
    }
    }
}

sdpa_status sdpa_embed_unnamed(sdpa_ctx * ctx, const sdpa_tensor * table, const int32_t * ids, int32_t n_ids,
                               sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_dense_rowcopy p;
    sdpa_status s = sdpa_check_embed(ctx, table, ids, n_ids, out, &p);
    if (s != SDPA_OK) return s;
    for (int32_t i = 0; i < p.n; i++)
        decode_weight_row(p.dtype, (const uint8_t *)p.src + (size_t)p.ids[i] * p.row_bytes, p.cols,
                          (float *)p.dst + (size_t)i * p.cols);
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_embed(sdpa_ctx * ctx, const sdpa_tensor * table, const int32_t * ids, int32_t n_ids,
                       sdpa_tensor * out) {
    return sdpa_named(ctx, sdpa_embed_unnamed(ctx, table, ids, n_ids, out), __func__);
}

/* ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref for one block of 32
 * (d computed in float32, stored rounded to float16). A block holding a NaN
 * or an Inf gets d = NaN and zero values: every value of it reads as NaN. */
static void quantize_block(int32_t dtype, const float * x, uint8_t * b) {
    float amax = 0.0f, max = 0.0f;
    bool finite = true;
    for (int j = 0; j < 32; j++) {
        finite &= isfinite(x[j]) != 0;
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    }
    const bool q8 = dtype == SDPA_DTYPE_Q8_0;
    const float d = !finite ? NAN : q8 ? amax / 127.0f : max / -8.0f;
    const float id = finite && d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = sdpa_f32_to_f16(d);
    memcpy(b, &dh, 2);
    if (q8) {
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(finite ? roundf(x[j] * id) : 0.0f);
    } else {
        for (int j = 0; j < 16; j++) {
            const float x0 = x[j] * id + 8.5f, x1 = x[16 + j] * id + 8.5f;
            const int q0 = finite ? (x0 < 15.0f ? (int)x0 : 15) : 8, q1 = finite ? (x1 < 15.0f ? (int)x1 : 15) : 8;
            b[2 + j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

sdpa_status sdpa_quantize_unnamed(sdpa_ctx * ctx, const sdpa_tensor * source, sdpa_tensor * out) {
    if (!ctx) return SDPA_E_ARG;
    sdpa_dense_rowcopy p;
    sdpa_status s = sdpa_check_quantize(ctx, source, out, &p);
    if (s != SDPA_OK) return s;
    for (int32_t i = 0; i < p.n; i++) {
        const float * x = (const float *)p.src + (size_t)i * p.cols;
        uint8_t * y = (uint8_t *)p.dst + (size_t)i * p.row_bytes;
        switch (p.dtype) {
        case SDPA_DTYPE_FLOAT32: memcpy(y, x, (size_t)p.cols * 4); break;
        case SDPA_DTYPE_FLOAT16:
            for (int32_t j = 0; j < p.cols; j++) { const uint16_t h = sdpa_f32_to_f16(x[j]); memcpy(y + 2 * j, &h, 2); }
            break;
        default:
            for (int32_t b = 0; b < p.cols / 32; b++)
                quantize_block(p.dtype, x + 32 * b, y + (size_t)b * (p.dtype == SDPA_DTYPE_Q8_0 ? 34 : 18));
            break;
        }
    }
    sdpa_clear_error(ctx);
    return SDPA_OK;
}

sdpa_status sdpa_quantize(sdpa_ctx * ctx, const sdpa_tensor * source, sdpa_tensor * out) {
    return sdpa_named(ctx, sdpa_quantize_unnamed(ctx, source, out), __func__);
}
