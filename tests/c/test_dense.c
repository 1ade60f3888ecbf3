/*
 * test_dense.c: the dense room (include/sdpa_dense.h: sdpa_linear,
 * sdpa_rms_norm, sdpa_swiglu, sdpa_embed, sdpa_quantize,
 * sdpa_weight_row_bytes) against the test's own float64 reference, written
 * from the header text and ggml's formulas, independent of src/dense:
 *   - weight values dequantized in double (float16: its exact value; q8_0:
 *     d * q; q4_0: d * (nibble - 8), byte j = value j low nibble, value
 *     j + 16 high nibble), then a double dot product;
 *   - ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref re-written here
 *     (float32 steps as ggml takes them), d stored as the nearest float16
 *     (ties to even, found by a search over the float16 values, not by bit
 *     tricks).
 *
 * Covered:
 *   1. sdpa_linear for every weight dtype, n in {1,2,3,4,5,9,67,130} x rows,
 *      out features 1..37, 64, 130, in features 1..300 (not multiples of 4
 *      too; q8_0 / q4_0: multiples of 32 up to 320), accumulate 0 and 1,
 *      x of rank 1 to 4, weights at every byte offset (any alignment), some
 *      float16 weights and block scales drawn from every finite float16
 *      (subnormals, -0, 65504);
 *   2. bit-identity: 1, 2, 3, 4 threads (the pool forced on small calls with
 *      sdpa_ctx_set_dense_parallel_min_macs(ctx, 0)) and a 4-thread context
 *      at the default threshold give memcmp-identical outputs; row i of an
 *      n-row call is bit-identical to the 1-row call on x row i;
 *   3. sdpa_quantize byte-identical to the re-written ggml reference (q8_0,
 *      q4_0: ties of roundf, the q4_0 clamp at 15, zero blocks, scales that
 *      round to float16 Inf / subnormal / 0), float16 = nearest even
 *      (65520 -> Inf, 2^-25 -> 0, halfway cases), float32 a copy; a block
 *      holding NaN / Inf gets d = NaN and reads back as NaN, the other blocks
 *      of its row unaffected;
 *   4. sdpa_rms_norm (in place too), sdpa_swiglu (out = gate, out = up too),
 *      sdpa_embed (every dtype, exactly the dequantized row);
 *   5. float16 weights holding Inf / NaN (and q8_0 / q4_0 NaN scales): the
 *      outputs they reach are Inf / NaN as the double reference says, the
 *      other outputs unaffected, for 1 and several x rows;
 *   6. each rule of src/contract/check_dense.c broken: the exact status,
 *      a message naming the argument, every buffer byte-for-byte unchanged;
 *      two rules broken at once: the lower status wins;
 *   7. sdpa_weight_row_bytes; no scratch growth on the decode path (1-row
 *      linear calls of every dtype) nor in rms_norm / swiglu / embed /
 *      quantize;
 *   8. SDPA_LINEAR_INT16_ACTIVATIONS (q8_0 / q4_0; n in {1,3,4,5,67},
 *      weight rows 1..40, cols 32..320, accumulate 0 and 1; x blocks of many
 *      kinds: ties of the rounding, zeros, a lone value, 1e-36 and subnormal
 *      blocks, scales 1e-6..1e18 side by side): bit for bit against the
 *      test's scalar model of the computation (plain builds; the relaxed build
 *      within its float32 rounding), and within a derived bound of the
 *      float64 product over the ORIGINAL x (the bound's derivation is at
 *      section 8); 1..4 threads and each x row alone bit-identical; a NaN /
 *      Inf in an x block makes exactly that row's outputs NaN; the scratch
 *      grows on the first call and not for the same or smaller shapes; the
 *      flag changes no bit on float32 / float16 weights; flags outside 0..3
 *      are E_ARG naming "flags is <value>".
 *   9. the k-quants q4_k / q6_k (ggml's block_q4_K / block_q6_K, read here
 *      from ggml-common.h's structs and dequantize_row_q4_K / _q6_K): linear
 *      as in 1 and 2 (cols 256 .. 1024; q4_k's tolerance over |d sc q| +
 *      |dmin m|, its two terms), NaN / Inf scales, embed exactly, their rules
 *      (rows not whole blocks of 256, quantize refused, INT16_ACTIVATIONS no
 *      effect), no scratch on their decode path;
 *  10. q5_0 (block_q5_0: the fifth bits in qh): linear as in 1 and 2, NaN /
 *      Inf scales, int16 activations as in 8, embed exactly, its rules.
 *
 * Buffers are allocated at exactly the bytes a call may touch, so ASan
 * catches any read past them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

#include "sdpa.h"
#include "sdpa_dense.h"
#include "testutil.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

enum { F32 = SDPA_DTYPE_FLOAT32, F16 = SDPA_DTYPE_FLOAT16, Q8 = SDPA_DTYPE_Q8_0, Q4 = SDPA_DTYPE_Q4_0,
       K4 = SDPA_DTYPE_Q4_K, K6 = SDPA_DTYPE_Q6_K, Q5 = SDPA_DTYPE_Q5_0 };
static const int32_t DTYPES[] = {F32, F16, Q8, Q4};  /* sections 1-8; the k-quants: section 9; q5_0: 10 */
static const int32_t K_DTYPES[] = {K4, K6};

static sdpa_ctx * g_ctx[4];  /* 1, 2, 3, 4 threads; the pool forced whenever a call has > 1 unit */
static long g_cases;

static const char * dtype_name(int32_t dt) {
    switch (dt) {
    case F32: return "float32";
    case F16: return "float16";
    case Q8: return "q8_0";
    case Q4: return "q4_0";
    case K4: return "q4_k";
    case K6: return "q6_k";
    case Q5: return "q5_0";
    default: return "?";
    }
}

/* ---- the test's float16 ------------------------------------------------ */

/* The value of binary16 bits h, from the IEEE definition. */
static double ref_half(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp((double)(1024 + m), e - 25);
    return (h & 0x8000) ? -v : v;
}

static int half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

/* The nearest binary16 to x, ties to the even one, |x| >= 65520 -> Inf (the
 * halfway point between 65504 and 2^16, whose "mantissa" is even), NaN ->
 * a NaN. Positive halves are ordered as their bits: a binary search. */
static uint16_t ref_f16_bits(float x) {
    if (isnan(x)) return 0x7e00;
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs((double)x);
    if (a >= 65536.0) return sign | 0x7c00;
    uint32_t lo = 0, hi = 0x7bff;  /* the largest finite half <= a */
    while (lo < hi) {
        const uint32_t mid = (lo + hi + 1) / 2;
        if (ref_half((uint16_t)mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    const double below = ref_half((uint16_t)lo), above = lo == 0x7bff ? 65536.0 : ref_half((uint16_t)(lo + 1));
    uint32_t b;
    if (a - below < above - a) b = lo;
    else if (a - below > above - a) b = lo + 1;
    else b = (lo & 1) ? lo + 1 : lo;
    return (uint16_t)(sign | b);
}

static uint16_t random_finite_half(tu_rng * rng) {
    uint16_t h = (uint16_t)tu_rng_u64(rng);
    if ((h & 0x7c00) == 0x7c00) h ^= 0x4000;
    return h;
}

/* ---- weights: layout and the reference value of element j ------------- */

static size_t ref_row_bytes(int32_t dt, int32_t cols) {
    switch (dt) {
    case F32: return (size_t)cols * 4;
    case F16: return (size_t)cols * 2;
    case Q8: return (size_t)(cols / 32) * 34;
    case K4: return (size_t)(cols / 256) * 144;
    case K6: return (size_t)(cols / 256) * 210;
    case Q5: return (size_t)(cols / 32) * 22;
    default: return (size_t)(cols / 32) * 18;
    }
}

/* The k-quants read from ggml's struct definitions (ggml-common.h) and
 * dequantize_row_q4_K / _q6_K, value by value in double:
 *   block_q4_K (144 bytes per 256): half d @0, half dmin @2, scales[12] @4,
 *     qs[128] @16. Value j: chunk c = j / 64, l = j % 32, q = qs[32 c + l]'s
 *     low nibble for j % 64 < 32, high nibble otherwise; sub-block s = j / 32
 *     has 6-bit scale sc and min m (get_scale_min_k4); value = d sc q - dmin m.
 *   block_q6_K (210 bytes per 256): ql[128] @0, qh[64] @128, int8
 *     scales[16] @192, half d @208. Value j: half n = j / 128, r = j % 128,
 *     l = r % 32, k = r / 32; low 4 bits from ql[64 n + l + 32 (k & 1)]
 *     (low nibble for k < 2, high for k >= 2), 2 high bits (qh[32 n + l] >>
 *     2k) & 3; value = d * scales[j / 16] * (q - 32). */
static void ref_k4_scale_min(const uint8_t * sc12, int s, int * sc, int * m) {
    if (s < 4) {
        *sc = sc12[s] & 63;
        *m = sc12[s + 4] & 63;
    } else {
        *sc = (sc12[s + 4] & 0xF) | ((sc12[s - 4] >> 6) << 4);
        *m = (sc12[s + 4] >> 4) | ((sc12[s] >> 6) << 4);
    }
}
static int ref_k4_q(const uint8_t * blk, int j) {
    const uint8_t byte = blk[16 + 32 * (j / 64) + j % 32];
    return j % 64 < 32 ? (byte & 15) : (byte >> 4);
}
static int ref_k6_q(const uint8_t * blk, int j) {
    const int n = j / 128, r = j % 128, l = r % 32, k = r / 32;
    const uint8_t lb = blk[64 * n + l + 32 * (k & 1)];
    const int low = k < 2 ? (lb & 15) : (lb >> 4);
    const int high = (blk[128 + 32 * n + l] >> (2 * k)) & 3;
    return (low | high << 4) - 32;
}

static uint16_t get_u16(const uint8_t * p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* block_q5_0 (ggml-common.h; dequantize_row_q5_0): per 32 values half d @0,
 * uint32 qh @2 (little-endian), qs[16] @6; value j: low nibble of qs[j] for
 * j < 16, high nibble of qs[j - 16] otherwise, bit j of qh as its bit 4;
 * value = d * (q - 16). */
static int ref_q5_q(const uint8_t * blk, int j) {
    const uint32_t qh = (uint32_t)blk[2] | (uint32_t)blk[3] << 8 | (uint32_t)blk[4] << 16 | (uint32_t)blk[5] << 24;
    const int low = j < 16 ? (blk[6 + j] & 15) : (blk[6 + j - 16] >> 4);
    return (low | (int)((qh >> j) & 1) << 4) - 16;
}

static double ref_wval(int32_t dt, const uint8_t * row, int32_t j) {
    switch (dt) {
    case Q5: {
        const uint8_t * b = row + (size_t)(j / 32) * 22;
        return ref_half(get_u16(b)) * (double)ref_q5_q(b, j % 32);
    }
    case K4: {
        const uint8_t * b = row + (size_t)(j / 256) * 144;
        int sc, m;
        ref_k4_scale_min(b + 4, (j % 256) / 32, &sc, &m);
        return ref_half(get_u16(b)) * sc * ref_k4_q(b, j % 256) - ref_half(get_u16(b + 2)) * m;
    }
    case K6: {
        const uint8_t * b = row + (size_t)(j / 256) * 210;
        return ref_half(get_u16(b + 208)) * (double)(int8_t)b[192 + (j % 256) / 16] * ref_k6_q(b, j % 256);
    }
    case F32: {
        float f;
        memcpy(&f, row + 4 * (size_t)j, 4);
        return f;
    }
    case F16: return ref_half(get_u16(row + 2 * (size_t)j));
    case Q8: {
        const uint8_t * b = row + (size_t)(j / 32) * 34;
        return ref_half(get_u16(b)) * (double)(int8_t)b[2 + j % 32];
    }
    default: {
        const uint8_t * b = row + (size_t)(j / 32) * 18;
        const int k = j % 32;
        const int nib = k < 16 ? (b[2 + k] & 15) : (b[2 + k - 16] >> 4);
        return ref_half(get_u16(b)) * (double)(nib - 8);
    }
    }
}

/* |value j| for the tolerance: q4_k's two terms apart (d sc q and dmin m
 * may cancel in the value, not in the kernel's rounding). */
static double ref_wmag(int32_t dt, const uint8_t * row, int32_t j) {
    if (dt != K4) return fabs(ref_wval(dt, row, j));
    const uint8_t * b = row + (size_t)(j / 256) * 144;
    int sc, m;
    ref_k4_scale_min(b + 4, (j % 256) / 32, &sc, &m);
    return fabs(ref_half(get_u16(b)) * sc * ref_k4_q(b, j % 256)) + fabs(ref_half(get_u16(b + 2)) * m);
}

/* Fills rows x cols of dtype dt. Rows r % 7 == 3 are "wild": every float16
 * value (or block scale) drawn from all finite float16 bits. */
static void fill_weight(tu_rng * rng, int32_t dt, uint8_t * w, int32_t rows, int32_t cols) {
    const size_t rb = ref_row_bytes(dt, cols);
    for (int32_t r = 0; r < rows; r++) {
        uint8_t * row = w + (size_t)r * rb;
        const int wild = r % 7 == 3;
        switch (dt) {
        case F32:
            for (int32_t j = 0; j < cols; j++) {
                const float v = tu_rng_normal(rng);
                memcpy(row + 4 * (size_t)j, &v, 4);
            }
            break;
        case F16:
            for (int32_t j = 0; j < cols; j++) {
                const uint16_t h = wild ? random_finite_half(rng) : ref_f16_bits(tu_rng_normal(rng));
                memcpy(row + 2 * (size_t)j, &h, 2);
            }
            break;
        case K4:  /* d, dmin of sane size (or wild), scales / mins / quants any bytes */
            for (int32_t b = 0; b < cols / 256; b++) {
                uint8_t * blk = row + (size_t)b * 144;
                const uint16_t dh = wild ? random_finite_half(rng) : ref_f16_bits(tu_rng_uniform(rng, 0.0005f, 0.004f));
                const uint16_t mh = wild ? random_finite_half(rng) : ref_f16_bits(tu_rng_uniform(rng, 0.0005f, 0.01f));
                memcpy(blk, &dh, 2);
                memcpy(blk + 2, &mh, 2);
                for (int k = 4; k < 144; k++) blk[k] = (uint8_t)tu_rng_u64(rng);
            }
            break;
        case K6:
            for (int32_t b = 0; b < cols / 256; b++) {
                uint8_t * blk = row + (size_t)b * 210;
                for (int k = 0; k < 208; k++) blk[k] = (uint8_t)tu_rng_u64(rng);
                const float d = tu_rng_uniform(rng, 0.00005f, 0.0005f) * ((tu_rng_u64(rng) & 1) ? -1.0f : 1.0f);
                const uint16_t dh = wild ? random_finite_half(rng) : ref_f16_bits(d);
                memcpy(blk + 208, &dh, 2);
            }
            break;
        default: {
            const size_t bb = dt == Q8 ? 34 : dt == Q5 ? 22 : 18;
            for (int32_t b = 0; b < cols / 32; b++) {
                uint8_t * blk = row + (size_t)b * bb;
                const float d = tu_rng_uniform(rng, 0.002f, 0.05f) * ((tu_rng_u64(rng) & 1) ? -1.0f : 1.0f);
                const uint16_t dh = wild ? random_finite_half(rng) : ref_f16_bits(d);
                memcpy(blk, &dh, 2);
                for (size_t k = 2; k < bb; k++) blk[k] = (uint8_t)tu_rng_u64(rng);
            }
            break;
        }
        }
    }
}

/* ---- activation tensors of n rows ------------------------------------- */

/* [lead..., last] for n rows: shape 0 -> [n, last]; 1 -> [last] (n = 1) or
 * [a, n / a, last]; 2 -> [1, n, 1, last]. */
static sdpa_tensor act_tensor(void * data, int32_t n, int32_t last, int shape) {
    sdpa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = F32;
    t.len = (size_t)n * (size_t)last;
    int a = 0;
    for (int f = 2; f < n; f++)
        if (n % f == 0) { a = f; break; }
    if (shape == 1 && n == 1) {
        t.rank = 1;
        t.dims[0] = last;
    } else if (shape == 1 && a) {
        t.rank = 3;
        t.dims[0] = a; t.dims[1] = n / a; t.dims[2] = last;
    } else if (shape == 2) {
        t.rank = 4;
        t.dims[0] = 1; t.dims[1] = n; t.dims[2] = 1; t.dims[3] = last;
    } else {
        t.rank = 2;
        t.dims[0] = n; t.dims[1] = last;
    }
    return t;
}

static void fill_normal(tu_rng * rng, float * p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = scale * tu_rng_normal(rng);
}

/* ---- 1, 2: sdpa_linear ---------------------------------------------------- */

/* The tolerance of a product (float32 accumulation in 4 lanes over at most
 * 320 values: the rounding error is below about (cols / 4 + 4) * 2^-24 *
 * sum|w x| <= 5e-6 * sum|w x|):
 *     |y - ref| <= 1e-5 * (1 + |y0| + sum_j |w_j x_j|)
 * with y0 the value accumulated onto (0 without accumulate). A term dropped
 * or a value misread moves y by about |w_j x_j|, far above it. */
#define LINEAR_TOL 1e-5

typedef struct product_ref {
    double * ref;  /* [n * rows] */
    double * mag;  /* 1 + |y0| + sum |w x| */
} product_ref;

static product_ref linear_reference(int32_t dt, const uint8_t * w, const float * x, const float * y0, int32_t n,
                                    int32_t rows, int32_t cols) {
    product_ref r;
    const size_t rb = ref_row_bytes(dt, cols);
    r.ref = tu_malloc((size_t)n * rows * sizeof(double));
    r.mag = tu_malloc((size_t)n * rows * sizeof(double));
    double * wrow = tu_malloc((size_t)cols * sizeof(double)), * wmag = tu_malloc((size_t)cols * sizeof(double));
    for (int32_t o = 0; o < rows; o++) {
        for (int32_t j = 0; j < cols; j++) {
            wrow[j] = ref_wval(dt, w + (size_t)o * rb, j);
            wmag[j] = ref_wmag(dt, w + (size_t)o * rb, j);
        }
        for (int32_t i = 0; i < n; i++) {
            const float * xi = x + (size_t)i * cols;
            double s = y0 ? y0[(size_t)i * rows + o] : 0.0, m = 1.0 + fabs(s);
            for (int32_t j = 0; j < cols; j++) {
                const double p = wrow[j] * (double)xi[j];
                s += p;
                m += wmag[j] * fabs((double)xi[j]);
            }
            r.ref[(size_t)i * rows + o] = s;
            r.mag[(size_t)i * rows + o] = m;
        }
    }
    free(wrow);
    free(wmag);
    return r;
}

/* got vs the reference: finite references within the tolerance, Inf
 * references exactly (the same sign), NaN references NaN. One check. */
static int check_product(const char * what, const float * got, const product_ref * r, int32_t n, int32_t rows) {
    for (int32_t i = 0; i < n; i++)
        for (int32_t o = 0; o < rows; o++) {
            const size_t k = (size_t)i * rows + o;
            const double g = got[k], ref = r->ref[k];
            int ok;
            if (isnan(ref)) ok = isnan(g);
            else if (isinf(ref)) ok = g == ref;
            else ok = fabs(g - ref) <= LINEAR_TOL * r->mag[k];
            if (!ok)
                return TU_CHECK(0, "%s: y[%d][%d] = %.9g, reference %.9g (tolerance %.3g)", what, i, o, g, ref,
                                LINEAR_TOL * r->mag[k]);
        }
    return TU_CHECK(1, "ok");
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* a and b bit-identical wherever the reference is finite; elsewhere of the
 * same class (NaN, or the same Inf): a NaN's payload is not promised (the
 * 1-row kernel recomputes a float16 row holding Inf / NaN in scalar code). */
static int same_bits_where_finite(const char * what, const float * a, const float * b, const product_ref * r,
                                  size_t count) {
    for (size_t k = 0; k < count; k++) {
        if (r && !isfinite(r->ref[k])) {
            if (isnan(a[k]) != isnan(b[k]) || (!isnan(a[k]) && a[k] != b[k]))
                return TU_CHECK(0, "%s: element %zu: %.9g vs %.9g", what, k, (double)a[k], (double)b[k]);
            continue;
        }
        if (memcmp(a + k, b + k, 4) != 0)
            return TU_CHECK(0, "%s: element %zu differs: %.9g vs %.9g (bits %08" PRIx32 " vs %08" PRIx32 ")", what, k,
                            (double)a[k], (double)b[k], bits_of(a[k]), bits_of(b[k]));
    }
    return TU_CHECK(1, "ok");
}

/* One product run every way: contexts of 1..4 threads (forced pool) and the
 * default-threshold context, all bit-identical to the 1-thread output, which
 * is held to the reference; then (n > 1) every x row alone, bit-identical to
 * its row of the n-row output. */
static void run_product(const char * label, int32_t dt, const uint8_t * w, int32_t rows, int32_t cols,
                        const float * x, int32_t n, const float * y0, int shape) {
    const size_t ny = (size_t)n * rows;
    product_ref r = linear_reference(dt, w, x, y0, n, rows, cols);
    sdpa_tensor wt = tu_tensor2((void *)(uintptr_t)w, dt, rows, cols);
    sdpa_tensor xt = act_tensor((void *)(uintptr_t)x, n, cols, shape);
    float * out[5];
    char what[160];
    for (int c = 0; c < 5; c++) {
        /* c = 4: the 4-thread context at the default threshold (small calls on the caller alone) */
        sdpa_ctx * ctx = g_ctx[c < 4 ? c : 3];
        sdpa_ctx_set_dense_parallel_min_macs(ctx, c < 4 ? 0.0 : SDPA_DENSE_PARALLEL_MIN_MACS);
        out[c] = tu_malloc(ny * 4);
        if (y0) memcpy(out[c], y0, ny * 4);
        else tu_fill_nan(out[c], ny);
        sdpa_tensor ot = act_tensor(out[c], n, rows, shape);
        snprintf(what, sizeof what, "%s: sdpa_linear on %d threads%s", label, sdpa_ctx_threads(ctx),
                 c == 4 ? " (default threshold)" : "");
        tu_dirty_error(ctx);
        const sdpa_status st = sdpa_linear(ctx, &xt, &wt, &ot, y0 != NULL);
        sdpa_ctx_set_dense_parallel_min_macs(ctx, 0);
        if (!TU_CHECK(st == SDPA_OK, "%s returned %s: %s", what, sdpa_status_code(st), sdpa_ctx_last_error(ctx))) continue;
        TU_CHECK(sdpa_ctx_last_error(ctx)[0] == 0, "%s: last_error not empty after a success", what);
        if (c == 0) check_product(what, out[0], &r, n, rows);
        else same_bits_where_finite(what, out[c], out[0], &r, ny);
    }
    if (n > 1) {
        float * single = tu_malloc(ny * 4);
        int ok = 1;
        for (int32_t i = 0; i < n && ok; i++) {
            sdpa_ctx * ctx = g_ctx[i % 4];
            float * yi = single + (size_t)i * rows;
            if (y0) memcpy(yi, y0 + (size_t)i * rows, (size_t)rows * 4);
            else tu_fill_nan(yi, (size_t)rows);
            sdpa_tensor x1 = act_tensor((void *)(uintptr_t)(x + (size_t)i * cols), 1, cols, i % 3);
            sdpa_tensor o1 = act_tensor(yi, 1, rows, i % 3);
            const sdpa_status st = sdpa_linear(ctx, &x1, &wt, &o1, y0 != NULL);
            ok = TU_CHECK(st == SDPA_OK, "%s: 1-row call on x row %d returned %s: %s", label, i,
                          sdpa_status_code(st), sdpa_ctx_last_error(ctx));
        }
        if (ok) {
            snprintf(what, sizeof what, "%s: each x row alone vs the %d-row call", label, n);
            same_bits_where_finite(what, single, out[0], &r, ny);
        }
        free(single);
    }
    for (int c = 0; c < 5; c++) free(out[c]);
    free(r.ref);
    free(r.mag);
    g_cases++;
}

static void linear_case(tu_rng * rng, int32_t dt, int32_t n, int32_t rows, int32_t cols, int acc, int woff, int shape) {
    char label[160];
    snprintf(label, sizeof label, "linear %s n=%d rows=%d cols=%d accumulate=%d weight offset %d shape %d",
             dtype_name(dt), n, rows, cols, acc, woff, shape);
    snprintf(tu_context, sizeof tu_context, "%s", label);
    const size_t rb = ref_row_bytes(dt, cols), wbytes = rb * (size_t)rows;
    uint8_t * wbase = tu_malloc(wbytes + (size_t)woff);
    uint8_t * w = wbase + woff;
    fill_weight(rng, dt, w, rows, cols);
    float * x = tu_malloc((size_t)n * cols * 4);
    fill_normal(rng, x, (size_t)n * cols, 1.0f);
    float * y0 = NULL;
    if (acc) {
        y0 = tu_malloc((size_t)n * rows * 4);
        fill_normal(rng, y0, (size_t)n * rows, 2.0f);
    }
    run_product(label, dt, w, rows, cols, x, n, y0, shape);
    free(y0);
    free(x);
    free(wbase);
}

static void sweep_linear(void) {
    static const int N_LIST[] = {1, 2, 3, 4, 5, 9, 67, 130};
    static const int COLS_F[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 23, 31,
                                 32, 33, 63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 300};
    static const int COLS_Q[] = {32, 64, 96, 128, 160, 224, 256, 288, 320};
    int rows_list[40];
    int nr = 0;
    for (int r = 1; r <= 37; r++) rows_list[nr++] = r;
    rows_list[nr++] = 64;
    rows_list[nr++] = 130;
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 1);
    for (int d = 0; d < COUNT(DTYPES); d++) {
        const int32_t dt = DTYPES[d];
        const int * cl = dt == F32 || dt == F16 ? COLS_F : COLS_Q;
        const int ncl = dt == F32 || dt == F16 ? COUNT(COLS_F) : COUNT(COLS_Q);
        int k = 0;
        for (int ni = 0; ni < COUNT(N_LIST); ni++)
            for (int ri = 0; ri < nr; ri++, k++) {
                const int32_t n = N_LIST[ni], rows = rows_list[ri];
                const int32_t cols = cl[(k * 5 + ni) % ncl];
                linear_case(&rng, dt, n, rows, cols, (k / 3 + ni) & 1, k % 4, (k + ni) % 3);
            }
        /* the extremes together once: the widest rows at the most x rows */
        linear_case(&rng, dt, 130, 130, cl[ncl - 1], 1, 3, 0);
        linear_case(&rng, dt, 1, 130, cl[ncl - 1], 0, 1, 1);
    }
    tu_context[0] = 0;
}

/* ---- 5: non-finite weights ------------------------------------------------ */

static void put_half(uint8_t * w, size_t rb, int32_t r, int32_t j, uint16_t h) {
    memcpy(w + (size_t)r * rb + 2 * (size_t)j, &h, 2);
}

/* float16 weights with Inf / NaN in chosen rows (in the 8-value body, the
 * 4-value step and the tail of a row), and q8_0 / q4_0 rows with a NaN scale:
 * the rows reached are Inf / NaN as the double reference says; the others
 * are held to the tolerance and bit-identical across threads and x-row
 * counts (run_product). */
static void test_nonfinite_weights(void) {
    static const int COLS[] = {5, 12, 23, 37, 64, 100};
    static const int NS[] = {1, 3, 6, 9};
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 2);
    const int32_t rows = 12;
    for (int ci = 0; ci < COUNT(COLS); ci++)
        for (int ni = 0; ni < COUNT(NS); ni++)
            for (int acc = 0; acc < 2; acc++) {
                const int32_t cols = COLS[ci], n = NS[ni];
                char label[160];
                snprintf(label, sizeof label, "float16 Inf/NaN weights: n=%d rows=%d cols=%d accumulate=%d", n, rows,
                         cols, acc);
                snprintf(tu_context, sizeof tu_context, "%s", label);
                const size_t rb = ref_row_bytes(F16, cols);
                uint8_t * w = tu_malloc(rb * rows);
                for (int32_t r = 0; r < rows; r++)
                    for (int32_t j = 0; j < cols; j++) put_half(w, rb, r, j, ref_f16_bits(tu_rng_normal(&rng)));
                float * x = tu_malloc((size_t)n * cols * 4);
                fill_normal(&rng, x, (size_t)n * cols, 1.0f);
                const int32_t body = cols / 8 * 8;          /* f16 values in 8-value steps */
                const int32_t step4 = cols % 8 >= 4 ? body : -1;  /* a 4-value step */
                const int32_t last = cols - 1;              /* the tail when cols % 4 */
                put_half(w, rb, 1, 2 % cols, 0x7c00);                       /* +Inf */
                put_half(w, rb, 3, step4 >= 0 ? step4 + 1 : 0, 0x7e00);      /* NaN */
                put_half(w, rb, 5, last, 0xfc00);                            /* -Inf */
                put_half(w, rb, 6, 0, 0x7c00);                               /* +Inf - Inf: NaN */
                put_half(w, rb, 6, last, 0xfc00);
                const int32_t jz = cols > 3 ? 3 : last;                      /* Inf * 0: NaN */
                put_half(w, rb, 8, jz, 0x7c00);
                put_half(w, rb, 10, (body > 8 ? 9 : 0) % cols, 0xfd01);      /* a negative signalling NaN */
                put_half(w, rb, 11, 0, 0xfc00);                              /* -Inf twice: -Inf */
                put_half(w, rb, 11, last, 0xfc00);
                for (int32_t i = 0; i < n; i++) {
                    float * xi = x + (size_t)i * cols;
                    xi[0] = fabsf(xi[0]) + 0.5f;  /* row 6's two Infs meet with one sign */
                    xi[last] = fabsf(xi[last]) + 0.5f;
                    if (jz != 0 && jz != last) xi[jz] = 0.0f;
                }
                float * y0 = NULL;
                if (acc) {
                    y0 = tu_malloc((size_t)n * rows * 4);
                    fill_normal(&rng, y0, (size_t)n * rows, 1.0f);
                }
                /* the reference must see what the rows are meant to give */
                product_ref r = linear_reference(F16, w, x, y0, n, rows, cols);
                for (int32_t i = 0; i < n; i++) {
                    const double * ri = r.ref + (size_t)i * rows;
                    TU_CHECK(isinf(ri[1]) && isnan(ri[3]) && ri[5] == -INFINITY && isnan(ri[6]) && isnan(ri[10]) &&
                                 ri[11] == -INFINITY && isfinite(ri[0]) && isfinite(ri[2]),
                             "%s: the test's own setup (row %d)", label, i);
                    if (jz != 0 && jz != last) TU_CHECK(isnan(ri[8]), "%s: setup row 8", label);
                }
                free(r.ref);
                free(r.mag);
                run_product(label, F16, w, rows, cols, x, n, y0, ni % 3);
                free(y0);
                free(x);
                free(w);
            }
    /* q8_0 / q4_0: a NaN scale in one block of row 2, an Inf scale in row 4
     * (its block's q all non-zero with x > 0 there: +-Inf) */
    for (int qi = 0; qi < 2; qi++)
        for (int ni = 0; ni < COUNT(NS); ni++) {
            const int32_t dt = qi ? Q4 : Q8, cols = 96, n = NS[ni];
            char label[160];
            snprintf(label, sizeof label, "%s NaN / Inf scales: n=%d rows=%d cols=%d", dtype_name(dt), n, rows, cols);
            snprintf(tu_context, sizeof tu_context, "%s", label);
            const size_t rb = ref_row_bytes(dt, cols), bb = dt == Q8 ? 34 : 18;
            uint8_t * w = tu_malloc(rb * rows);
            fill_weight(&rng, dt, w, rows, cols);
            const uint16_t nan_h = 0x7e00, inf_h = 0x7c00;
            memcpy(w + 2 * rb + 1 * bb, &nan_h, 2);
            memcpy(w + 4 * rb + 2 * bb, &inf_h, 2);
            for (size_t k = 2; k < bb; k++) w[4 * rb + 2 * bb + k] = dt == Q8 ? 5 : 0xdd; /* q = 5 / nibbles 13 - 8 */
            float * x = tu_malloc((size_t)n * cols * 4);
            fill_normal(&rng, x, (size_t)n * cols, 1.0f);
            for (int32_t i = 0; i < n; i++)
                for (int32_t j = 64; j < 96; j++) x[(size_t)i * cols + j] = fabsf(x[(size_t)i * cols + j]) + 0.25f;
            product_ref r = linear_reference(dt, w, x, NULL, n, rows, cols);
            TU_CHECK(isnan(r.ref[2]) && r.ref[4] == INFINITY && isfinite(r.ref[0]), "%s: the test's own setup", label);
            free(r.ref);
            free(r.mag);
            run_product(label, dt, w, rows, cols, x, n, NULL, ni % 3);
            free(x);
            free(w);
        }
    tu_context[0] = 0;
}

/* ---- 3: sdpa_quantize ------------------------------------------------------ */

/* ggml's quantize_row_q8_0_ref, one block (finite values). */
static void ggml_q8_block(const float * x, uint8_t * out) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = x[j];
        amax = amax > fabsf(v) ? amax : fabsf(v);
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    const uint16_t dh = ref_f16_bits(d);
    memcpy(out, &dh, 2);
    for (int j = 0; j < 32; ++j) {
        const float x0 = x[j] * id;
        out[2 + j] = (uint8_t)(int8_t)roundf(x0);
    }
}

/* ggml's quantize_row_q4_0_ref, one block (finite values). */
static void ggml_q4_block(const float * x, uint8_t * out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = x[j];
        if (amax < fabsf(v)) {
            amax = fabsf(v);
            max = v;
        }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    const uint16_t dh = ref_f16_bits(d);
    memcpy(out, &dh, 2);
    for (int j = 0; j < 16; ++j) {
        const float x0 = x[j] * id;
        const float x1 = x[16 + j] * id;
        const int8_t t0 = (int8_t)(x0 + 8.5f), t1 = (int8_t)(x1 + 8.5f);
        const uint8_t xi0 = (uint8_t)(t0 < 15 ? t0 : 15);
        const uint8_t xi1 = (uint8_t)(t1 < 15 ? t1 : 15);
        out[2 + j] = (uint8_t)(xi0 | (xi1 << 4));
    }
}

static int block_finite(const float * x) {
    for (int j = 0; j < 32; j++)
        if (!isfinite(x[j])) return 0;
    return 1;
}

/* Source rows of many kinds; cols a multiple of 32. */
static void fill_source_row(tu_rng * rng, float * x, int32_t cols, int kind) {
    for (int32_t j = 0; j < cols; j++) {
        switch (kind) {
        case 0: x[j] = tu_rng_normal(rng); break;
        case 1: x[j] = tu_rng_uniform(rng, -1e-3f, 1e-3f); break;
        case 2: x[j] = 1e6f * tu_rng_normal(rng); break;            /* q8 d ~ 4e4: near float16's top */
        case 3: x[j] = 3e7f * tu_rng_normal(rng); break;            /* d beyond 65504: float16 Inf */
        case 4: x[j] = 1e-6f * tu_rng_normal(rng); break;           /* d a float16 subnormal */
        case 5: x[j] = 1e-10f * tu_rng_normal(rng); break;          /* d rounds to float16 0 */
        case 6: {                                                    /* any finite float, 2^-30 .. 2^30 */
            const uint32_t bits = (uint32_t)tu_rng_u64(rng);
            x[j] = ldexpf((float)((bits & 0xffffff) | 0x800000) / 16777216.0f, tu_rng_int(rng, -30, 30)) *
                   ((bits >> 31) ? -1.0f : 1.0f);
            break;
        }
        case 7: x[j] = (float)tu_rng_int(rng, -3, 3); break;         /* integers: exact zeros and ties */
        default: x[j] = 0.0f; break;
        }
    }
    if (kind == 7 && cols >= 64) {
        /* block 0: amax 127 -> q8 d = 1, id = 1: x * id lands exactly on .5
         * (roundf: away from zero); block 1: q4 max = -8 -> d = 1; ties of
         * magnitude (the first of the largest |x| gives q4's sign) */
        static const float t0[] = {127, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.5f, 126.5f, -126.5f, -127, 3.5f, 0};
        for (int j = 0; j < COUNT(t0); j++) x[j] = t0[j];
        static const float t1[] = {-8, 8, 7.5f, -7.5f, 0.5f, -0.5f, 6.5f, -6.49f, 7.49f, 0, 7.99f, -7.99f};
        for (int j = 0; j < COUNT(t1); j++) x[32 + j] = t1[j];
    }
    if (kind == 8 && cols >= 64) {
        x[40] = 5.0f;  /* block 1: a single non-zero; block 0 all zeros */
        for (int j = 64; j < cols; j++) x[j] = (j % 2) ? -4.0f : 4.0f;  /* +4 first: q4 d = -0.5 */
    }
}

/* The expected bytes of one row quantized to dt (finite blocks: ggml; a
 * block with NaN / Inf: only its d is known, a NaN: checked apart). */
static void expected_row(int32_t dt, const float * x, int32_t cols, uint8_t * out) {
    switch (dt) {
    case F32: memcpy(out, x, (size_t)cols * 4); break;
    case F16:
        for (int32_t j = 0; j < cols; j++) {
            const uint16_t h = ref_f16_bits(x[j]);
            memcpy(out + 2 * (size_t)j, &h, 2);
        }
        break;
    default: {
        const size_t bb = dt == Q8 ? 34 : 18;
        for (int32_t b = 0; b < cols / 32; b++) {
            if (!block_finite(x + 32 * b)) memset(out + b * bb, 0, bb);  /* (ggml's steps are undefined there) */
            else if (dt == Q8) ggml_q8_block(x + 32 * b, out + b * bb);
            else ggml_q4_block(x + 32 * b, out + b * bb);
        }
        break;
    }
    }
}

static void test_quantize(void) {
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 3);
    static const int COLS[] = {32, 64, 96, 256};
    const int kinds = 9;
    for (int ci = 0; ci < COUNT(COLS); ci++) {
        const int32_t cols = COLS[ci], rows = kinds + 2;  /* + 2 rows with non-finite blocks */
        float * src = tu_malloc((size_t)rows * cols * 4);
        for (int r = 0; r < kinds; r++) fill_source_row(&rng, src + (size_t)r * cols, cols, r);
        /* row kinds: a NaN in block 0 (and for cols > 32 an Inf in the last
         * block); -Inf alone in the last block */
        float * rn = src + (size_t)kinds * cols, * ri = src + (size_t)(kinds + 1) * cols;
        fill_source_row(&rng, rn, cols, 0);
        fill_source_row(&rng, ri, cols, 0);
        rn[5] = NAN;
        if (cols > 32) rn[cols - 3] = INFINITY;
        ri[cols - 1] = -INFINITY;
        for (int d = 0; d < COUNT(DTYPES); d++) {
            const int32_t dt = DTYPES[d];
            snprintf(tu_context, sizeof tu_context, "quantize to %s: rows=%d cols=%d", dtype_name(dt), rows, cols);
            const size_t rb = ref_row_bytes(dt, cols);
            uint8_t * got = tu_malloc(rb * rows);
            uint8_t * want = tu_malloc(rb * rows);
            memset(got, 0xA5, rb * rows);
            for (int32_t r = 0; r < rows; r++) expected_row(dt, src + (size_t)r * cols, cols, want + (size_t)r * rb);
            sdpa_ctx * ctx = g_ctx[d % 4];
            sdpa_tensor st = tu_tensor2(src, F32, rows, cols), ot = tu_tensor2(got, dt, rows, cols);
            tu_dirty_error(ctx);
            const sdpa_status s = sdpa_quantize(ctx, &st, &ot);
            if (!TU_CHECK(s == SDPA_OK, "sdpa_quantize returned %s: %s", sdpa_status_code(s), sdpa_ctx_last_error(ctx))) {
                free(got);
                free(want);
                continue;
            }
            TU_CHECK(sdpa_ctx_last_error(ctx)[0] == 0, "last_error not empty after a success");
            /* every finite block (float32 / float16: every finite value) byte-identical */
            for (int32_t r = 0; r < rows; r++) {
                const float * x = src + (size_t)r * cols;
                const uint8_t * g = got + (size_t)r * rb, * e = want + (size_t)r * rb;
                if (dt == F32) {
                    TU_CHECK(memcmp(g, e, rb) == 0, "row %d: float32 'quantize' is not a copy", r);
                } else if (dt == F16) {
                    int bad = -1;
                    for (int32_t j = 0; j < cols && bad < 0; j++) {
                        const uint16_t hg = get_u16(g + 2 * j), he = get_u16(e + 2 * j);
                        if (isnan(x[j]) ? !half_is_nan(hg) : hg != he) bad = j;
                    }
                    TU_CHECK(bad < 0, "row %d value %d: %.9g -> float16 %04x, expected %04x", r, bad,
                             bad < 0 ? 0.0 : (double)x[bad], bad < 0 ? 0 : get_u16(g + 2 * bad),
                             bad < 0 ? 0 : get_u16(e + 2 * bad));
                } else {
                    const size_t bb = dt == Q8 ? 34 : 18;
                    for (int32_t b = 0; b < cols / 32; b++) {
                        const uint8_t * gb = g + b * bb, * eb = e + b * bb;
                        if (!block_finite(x + 32 * b)) {
                            TU_CHECK(half_is_nan(get_u16(gb)), "row %d block %d (non-finite values): d = %04x, expected a NaN",
                                     r, b, get_u16(gb));
                            continue;
                        }
                        int bad = -1;
                        for (size_t k = 0; k < bb && bad < 0; k++)
                            if (gb[k] != eb[k]) bad = (int)k;
                        TU_CHECK(bad < 0, "row %d block %d byte %d: %02x, ggml's reference %02x (d %04x vs %04x)", r, b,
                                 bad, bad < 0 ? 0 : gb[bad], bad < 0 ? 0 : eb[bad], get_u16(gb), get_u16(eb));
                    }
                }
            }
            /* read back through sdpa_embed: every value of a non-finite block
             * NaN (q8_0 / q4_0), Inf / NaN as stored (float16), the rest the
             * dequantized value exactly */
            float * back = tu_malloc((size_t)rows * cols * 4);
            int32_t * ids = tu_malloc((size_t)rows * 4);
            for (int32_t r = 0; r < rows; r++) ids[r] = r;
            sdpa_tensor bt = tu_tensor2(back, F32, rows, cols);
            const sdpa_status se = sdpa_embed(ctx, &ot, ids, rows, &bt);
            if (TU_CHECK(se == SDPA_OK, "sdpa_embed (read back) returned %s: %s", sdpa_status_code(se),
                         sdpa_ctx_last_error(ctx))) {
                int bad_r = -1, bad_j = -1;
                for (int32_t r = 0; r < rows && bad_r < 0; r++)
                    for (int32_t j = 0; j < cols && bad_r < 0; j++) {
                        const float * x = src + (size_t)r * cols;
                        const float b = back[(size_t)r * cols + j];
                        int ok;
                        if ((dt == Q8 || dt == Q4) && !block_finite(x + j / 32 * 32)) ok = isnan(b);
                        else if (isnan(x[j])) ok = isnan(b);
                        else {
                            const double ref = ref_wval(dt, want + (size_t)r * rb, j);  /* d * q: exact in float32 */
                            const float v = (float)ref;
                            ok = isnan(ref) ? isnan(b) : memcmp(&v, &b, 4) == 0;
                        }
                        if (!ok) { bad_r = r; bad_j = j; }
                    }
                TU_CHECK(bad_r < 0, "read back row %d value %d: %.9g (source %.9g)", bad_r, bad_j,
                         bad_r < 0 ? 0.0 : (double)back[(size_t)bad_r * cols + bad_j],
                         bad_r < 0 ? 0.0 : (double)src[(size_t)bad_r * cols + bad_j]);
            }
            free(back);
            free(ids);
            free(got);
            free(want);
            g_cases++;
        }
        free(src);
    }

    /* float16 rounding at its edges, against the search above */
    static const float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 65536.0f, 1e10f,
                                 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x3p-26f, 0x3p-25f, 0x1.8p-24f, 0x1p-14f,
                                 0x1.ffcp-15f, 0x1.ff8p-15f, 0x1.002p0f, 0x1.003p0f, 0x1.001p0f, 0x1.0030p1f, 1e-30f,
                                 0x1p-149f, 0.1f, 0.2f, 0.3f, 3.14159265f, 2047.5f, 2048.5f, 4097.0f, 4099.0f, 4100.0f,
                                 INFINITY, -INFINITY, NAN};
    {
        const int32_t n = COUNT(edge) + 64;
        float * src = tu_malloc((size_t)n * 4);
        uint16_t * got = tu_malloc((size_t)n * 2);
        memcpy(src, edge, sizeof edge);
        for (int32_t j = COUNT(edge); j < n; j++) {  /* random bits, any exponent but Inf / NaN */
            uint32_t bits = (uint32_t)tu_rng_u64(&rng);
            if ((bits & 0x7f800000u) == 0x7f800000u) bits ^= 0x40000000u;
            memcpy(src + j, &bits, 4);
        }
        snprintf(tu_context, sizeof tu_context, "quantize to float16: edges");
        sdpa_tensor st = tu_tensor2(src, F32, 1, n), ot = tu_tensor2(got, F16, 1, n);
        const sdpa_status s = sdpa_quantize(g_ctx[0], &st, &ot);
        if (TU_CHECK(s == SDPA_OK, "sdpa_quantize returned %s", sdpa_status_code(s)))
            for (int32_t j = 0; j < n; j++) {
                const uint16_t want = ref_f16_bits(src[j]);
                TU_CHECK(isnan(src[j]) ? half_is_nan(got[j]) : got[j] == want, "%.9g (%a) -> %04x, expected %04x",
                         (double)src[j], (double)src[j], got[j], want);
            }
        free(src);
        free(got);
    }
    /* the reference's own anchors (so that it is not wrong the same way) */
    TU_CHECK(ref_f16_bits(65519.0f) == 0x7bff && ref_f16_bits(65520.0f) == 0x7c00 && ref_f16_bits(0x1p-25f) == 0 &&
                 ref_f16_bits(0x3p-26f) == 1 && ref_f16_bits(0x1.8p-24f) == 2 && ref_f16_bits(1.0f) == 0x3c00 &&
                 ref_f16_bits(-2.0f) == 0xc000 && ref_f16_bits(0x1.002p0f) == 0x3c00 &&
                 ref_f16_bits(0x1.006p0f) == 0x3c02 && ref_f16_bits(0x1p-14f) == 0x0400,
             "the test's float16 rounding");
    tu_context[0] = 0;
}

/* ---- 4: rms_norm, swiglu, embed --------------------------------------------- */

static void test_rms_norm(void) {
    static const int DIMS[] = {1, 3, 4, 5, 7, 8, 16, 17, 64, 100, 257};
    static const int NS[] = {1, 2, 3, 7};
    static const float EPS[] = {0.0f, 1e-6f, 1e-5f, 0.25f};
    static const float SCALES[] = {1e-3f, 1.0f, 1e3f};
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 4);
    int k = 0;
    for (int di = 0; di < COUNT(DIMS); di++)
        for (int ni = 0; ni < COUNT(NS); ni++)
            for (int ei = 0; ei < COUNT(EPS); ei++, k++) {
                const int32_t dim = DIMS[di], n = NS[ni];
                const float eps = EPS[ei], scale = SCALES[k % 3];
                snprintf(tu_context, sizeof tu_context, "rms_norm n=%d dim=%d eps=%g x scale %g", n, dim, (double)eps,
                         (double)scale);
                const size_t len = (size_t)n * dim;
                float * x = tu_malloc(len * 4), * w = tu_malloc((size_t)dim * 4), * y = tu_malloc(len * 4);
                float * xin = tu_malloc(len * 4);
                fill_normal(&rng, x, len, scale);
                fill_normal(&rng, w, (size_t)dim, 1.0f);
                tu_fill_nan(y, len);
                sdpa_ctx * ctx = g_ctx[k % 4];
                const int shape = k % 3;
                sdpa_tensor xt = act_tensor(x, n, dim, shape), yt = act_tensor(y, n, dim, shape);
                sdpa_tensor wt = act_tensor(w, 1, dim, 1);
                tu_dirty_error(ctx);
                sdpa_status s = sdpa_rms_norm(ctx, &xt, &wt, eps, &yt);
                if (TU_CHECK(s == SDPA_OK, "sdpa_rms_norm returned %s: %s", sdpa_status_code(s), sdpa_ctx_last_error(ctx))) {
                    TU_CHECK(sdpa_ctx_last_error(ctx)[0] == 0, "last_error not empty after a success");
                    /* |y - ref| <= 1e-5 |ref|: float32 sum of squares (positive
                     * terms, relative error <= (dim / 4 + 4) 2^-24), a square
                     * root and three products */
                    int bad = -1;
                    double bref = 0;
                    for (int32_t i = 0; i < n && bad < 0; i++) {
                        double ss = 0;
                        for (int32_t j = 0; j < dim; j++) ss += (double)x[i * dim + j] * x[i * dim + j];
                        const double inv = 1.0 / sqrt(ss / dim + (double)eps);
                        for (int32_t j = 0; j < dim && bad < 0; j++) {
                            const double ref = (double)w[j] * x[i * dim + j] * inv;
                            if (!(fabs(y[i * dim + j] - ref) <= 1e-5 * fabs(ref))) { bad = i * dim + j; bref = ref; }
                        }
                    }
                    TU_CHECK(bad < 0, "y[%d] = %.9g, reference %.9g", bad, bad < 0 ? 0.0 : (double)y[bad], bref);
                    /* in place (out = x): the same bits */
                    memcpy(xin, x, len * 4);
                    sdpa_tensor it = act_tensor(xin, n, dim, shape);
                    s = sdpa_rms_norm(ctx, &it, &wt, eps, &it);
                    if (TU_CHECK(s == SDPA_OK, "in place: %s: %s", sdpa_status_code(s), sdpa_ctx_last_error(ctx)))
                        TU_CHECK(memcmp(xin, y, len * 4) == 0, "in place differs from out of place");
                }
                free(x);
                free(w);
                free(y);
                free(xin);
                g_cases++;
            }
    tu_context[0] = 0;
}

static void test_swiglu(void) {
    static const int LENS[] = {1, 2, 3, 4, 5, 7, 8, 9, 31, 33, 100, 1000};
    static const float SPECIAL[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-3f, -1e-3f, 30.0f, -30.0f, 87.0f, -87.0f, 87.5f,
                                    -87.5f, 88.0f, -88.0f, 100.0f, -100.0f, 1e4f, -1e4f, 1e30f, 15.0f, -15.0f, 0.5f};
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 5);
    for (int li = 0; li < COUNT(LENS); li++)
        for (int rep = 0; rep < 3; rep++) {
            const int32_t len = LENS[li];
            snprintf(tu_context, sizeof tu_context, "swiglu len=%d rep %d", len, rep);
            float * g = tu_malloc((size_t)len * 4), * u = tu_malloc((size_t)len * 4), * y = tu_malloc((size_t)len * 4);
            float * t = tu_malloc((size_t)len * 4);
            for (int32_t j = 0; j < len; j++) {
                g[j] = tu_rng_uniform(&rng, -30.0f, 30.0f);
                u[j] = tu_rng_uniform(&rng, -3.0f, 3.0f);
            }
            for (int32_t j = 0; j < len; j++)
                if (rep > 0 || j % 3 == 0) g[j] = SPECIAL[(j + rep * 7) % COUNT(SPECIAL)];
            if (len > 4) u[len - 1] = 0.0f;
            tu_fill_nan(y, (size_t)len);
            /* shape: [len] or [1, len] or a 3-d view when len has a factor */
            const int shape = (li + rep) % 3;
            sdpa_tensor gt = act_tensor(g, 1, len, shape), ut = act_tensor(u, 1, len, shape), yt = act_tensor(y, 1, len, shape);
            if (shape == 1 && len % 4 == 0 && len > 4) {  /* rows of 4 */
                gt = act_tensor(g, len / 4, 4, 1);
                ut = act_tensor(u, len / 4, 4, 1);
                yt = act_tensor(y, len / 4, 4, 1);
            }
            sdpa_ctx * ctx = g_ctx[(li + rep) % 4];
            tu_dirty_error(ctx);
            sdpa_status s = sdpa_swiglu(ctx, &gt, &ut, &yt);
            if (TU_CHECK(s == SDPA_OK, "sdpa_swiglu returned %s: %s", sdpa_status_code(s), sdpa_ctx_last_error(ctx))) {
                TU_CHECK(sdpa_ctx_last_error(ctx)[0] == 0, "last_error not empty after a success");
                /* |y - ref| <= 1e-5 |ref| + 1e-35: an exp of ~2 ulp, a
                 * division and two products; the 1e-35 covers exp(g) below
                 * -87.3, flushed to 0, where |silu(g) u| < 1e-35 */
                int bad = -1;
                double bref = 0;
                for (int32_t j = 0; j < len && bad < 0; j++) {
                    const double gd = g[j], silu = gd / (1.0 + exp(-gd)), ref = silu * (double)u[j];
                    if (!(fabs(y[j] - ref) <= 1e-5 * fabs(ref) + 1e-35)) { bad = j; bref = ref; }
                }
                TU_CHECK(bad < 0, "y[%d] = %.9g for g = %.9g, u = %.9g; reference %.9g", bad,
                         bad < 0 ? 0.0 : (double)y[bad], bad < 0 ? 0.0 : (double)g[bad], bad < 0 ? 0.0 : (double)u[bad],
                         bref);
                /* out = gate, out = up: the same bits */
                for (int which = 0; which < 2; which++) {
                    float * gg = which ? g : t, * uu = which ? t : u;
                    memcpy(t, which ? u : g, (size_t)len * 4);
                    sdpa_tensor g2 = gt, u2 = ut;
                    g2.data = gg;
                    u2.data = uu;
                    s = sdpa_swiglu(ctx, &g2, &u2, which ? &u2 : &g2);
                    if (TU_CHECK(s == SDPA_OK, "out = %s: %s: %s", which ? "up" : "gate", sdpa_status_code(s),
                                 sdpa_ctx_last_error(ctx)))
                        TU_CHECK(memcmp(t, y, (size_t)len * 4) == 0, "out = %s differs from out of place",
                                 which ? "up" : "gate");
                }
            }
            free(g);
            free(u);
            free(y);
            free(t);
            g_cases++;
        }
    tu_context[0] = 0;
}

static void test_embed(void) {
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 6);
    static const int DIM_F[] = {1, 5, 8, 37, 64};
    static const int DIM_Q[] = {32, 96};
    const int32_t vocab = 40;
    for (int d = 0; d < COUNT(DTYPES); d++) {
        const int32_t dt = DTYPES[d];
        const int * dl = dt == F32 || dt == F16 ? DIM_F : DIM_Q;
        const int ndl = dt == F32 || dt == F16 ? COUNT(DIM_F) : COUNT(DIM_Q);
        for (int di = 0; di < ndl; di++) {
            const int32_t dim = dl[di], off = (d + di) % 4;
            snprintf(tu_context, sizeof tu_context, "embed %s vocab=%d dim=%d table offset %d", dtype_name(dt), vocab,
                     dim, off);
            const size_t rb = ref_row_bytes(dt, dim);
            uint8_t * base = tu_malloc(rb * vocab + (size_t)off);
            uint8_t * table = base + off;
            fill_weight(&rng, dt, table, vocab, dim);  /* rows 3, 10, 17, ...: every finite float16 */
            if (dt == F16) {  /* Inf, -Inf, NaN, -0 and a subnormal in row 5 */
                static const uint16_t sp[] = {0x7c00, 0xfc00, 0x7e00, 0x8000, 0x0001, 0x83ff};
                for (int k = 0; k < COUNT(sp) && k < dim; k++) memcpy(table + 5 * rb + 2 * (size_t)k, sp + k, 2);
            }
            if (dt == Q8 || dt == Q4) {  /* a NaN scale in row 5, an Inf scale in row 6 (q = 0 there: NaN) */
                const uint16_t nan_h = 0x7e00, inf_h = 0xfc00;
                memcpy(table + 5 * rb, &nan_h, 2);
                memcpy(table + 6 * rb + (rb - (dt == Q8 ? 34 : 18)), &inf_h, 2);
            }
            static const int32_t IDS[] = {0, 39, 5, 6, 3, 5, 17, 1, 2, 38, 10, 0, 24, 31, 6, 9, 12};
            for (int nn = 1; nn <= COUNT(IDS); nn += 8) {
                float * out = tu_malloc((size_t)nn * dim * 4);
                tu_fill_nan(out, (size_t)nn * dim);
                const int32_t * ids = IDS + (COUNT(IDS) - nn);
                sdpa_tensor tt = tu_tensor2(table, dt, vocab, dim), ot = tu_tensor2(out, F32, nn, dim);
                sdpa_ctx * ctx = g_ctx[(d + nn) % 4];
                tu_dirty_error(ctx);
                const sdpa_status s = sdpa_embed(ctx, &tt, ids, nn, &ot);
                if (TU_CHECK(s == SDPA_OK, "sdpa_embed returned %s: %s", sdpa_status_code(s), sdpa_ctx_last_error(ctx))) {
                    TU_CHECK(sdpa_ctx_last_error(ctx)[0] == 0, "last_error not empty after a success");
                    int bi = -1, bj = -1;
                    for (int32_t i = 0; i < nn && bi < 0; i++)
                        for (int32_t j = 0; j < dim && bi < 0; j++) {
                            const double ref = ref_wval(dt, table + (size_t)ids[i] * rb, j);
                            const float rf = (float)ref, g = out[(size_t)i * dim + j];  /* d * q: exact in float32 */
                            if (isnan(ref) ? !isnan(g) : memcmp(&rf, &g, 4) != 0) { bi = i; bj = j; }
                        }
                    TU_CHECK(bi < 0, "out[%d][%d] (table row %d) = %.9g, expected %.9g", bi, bj, bi < 0 ? 0 : ids[bi],
                             bi < 0 ? 0.0 : (double)out[(size_t)bi * dim + bj],
                             bi < 0 ? 0.0 : ref_wval(dt, table + (size_t)ids[bi] * rb, bj));
                }
                free(out);
                g_cases++;
            }
            free(base);
        }
    }
    tu_context[0] = 0;
}

/* ---- 6: bad input ----------------------------------------------------------- */

#define MAX_GUARD 6
static struct {
    const void * p;
    size_t n;
    unsigned char * snap;
} g_guard[MAX_GUARD];
static int g_nguard;

static void guard(const void * p, size_t n) {
    if (!p || g_nguard >= MAX_GUARD) return;
    g_guard[g_nguard].p = p;
    g_guard[g_nguard].n = n;
    g_guard[g_nguard].snap = tu_malloc(n);
    memcpy(g_guard[g_nguard].snap, p, n);
    g_nguard++;
}

static void pattern(void * p, size_t n) { memset(p, 0xA5, n); }

/* The verdict on a rejected call: the status, a message naming `needle`
 * after the entry's name, every guarded buffer unchanged. */
static void expect_reject(sdpa_ctx * ctx, sdpa_status st, sdpa_status want, const char * needle, const char * desc) {
    const char * msg = sdpa_ctx_last_error(ctx);
    TU_CHECK(st == want, "%s: status %s, expected %s (message '%s')", desc, sdpa_status_code(st), sdpa_status_code(want),
             msg ? msg : "(null)");
    TU_CHECK(msg && msg[0], "%s: empty message", desc);
    TU_CHECK(msg && strstr(msg, needle), "%s: message '%s' does not name '%s'", desc, msg ? msg : "(null)", needle);
    /* the public entry's own name, once, then the rule's words (internal.h, sdpa_named) */
    const char * words = msg && strncmp(msg, "sdpa_", 5) == 0 ? strstr(msg, ": ") : NULL;
    TU_CHECK(words && strspn(msg, "abcdefghijklmnopqrstuvwxyz_") == (size_t)(words - msg) && !strstr(words, "sdpa_"),
             "%s: message '%s' does not start with its entry's name, once", desc, msg ? msg : "(null)");
    for (int i = 0; i < g_nguard; i++) {
        TU_CHECK(memcmp(g_guard[i].p, g_guard[i].snap, g_guard[i].n) == 0, "%s: buffer %d was written", desc, i);
        free(g_guard[i].snap);
    }
    g_nguard = 0;
    g_cases++;
}

static void expect_ok(sdpa_ctx * ctx, sdpa_status st, const char * desc) {
    TU_CHECK(st == SDPA_OK, "%s: status %s: %s", desc, sdpa_status_code(st), sdpa_ctx_last_error(ctx));
    TU_CHECK(sdpa_ctx_last_error(ctx)[0] == 0, "%s: last_error not empty", desc);
    for (int i = 0; i < g_nguard; i++) free(g_guard[i].snap);
    g_nguard = 0;
}

static sdpa_tensor tensor1(void * data, int32_t dtype, int32_t d0) {
    sdpa_tensor t = tu_tensor2(data, dtype, 1, d0);
    t.rank = 1;
    t.dims[0] = d0;
    t.dims[1] = 0;
    return t;
}

/* sdpa_linear's rules, for each weight dtype: x [2, 64], weight [8, 64], out [2, 8]. */
static void bad_linear(sdpa_ctx * ctx, int32_t dt) {
    enum { N = 2, R = 8, C = 64 };
    /* Every buffer holds at least what any case claims (the overlap rules
     * are judged on the claimed bytes, before the dims rules): weight 4
     * bytes a value whatever its dtype, plus a row. */
    const size_t rb = ref_row_bytes(dt, C), wcap = (size_t)(R + 1) * C * 4;
    /* (out: room for the [4, 8] the cols-16 case claims; with only N * R floats its claim ran
     * past the buffer, onto whatever malloc put next: the weight, now and then, E_ARG) */
    float * x = tu_malloc(N * C * 4), * out = tu_malloc(4 * R * 4);
    uint8_t * w = tu_malloc(wcap);
    memset(w, 0, wcap);
    tu_rng rng;
    tu_rng_seed(&rng, 99);
    fill_normal(&rng, x, N * C, 1.0f);
    fill_weight(&rng, dt, w, R, C);
    sdpa_tensor X = tu_tensor2(x, F32, N, C), W = tu_tensor2(w, dt, R, C), O = tu_tensor2(out, F32, N, R);
    char d[200];
#define LIN(desc_, want_, needle_, xp, wp, op, acc)                                         \
    do {                                                                                    \
        snprintf(d, sizeof d, "linear (%s weight): %s", dtype_name(dt), desc_);             \
        pattern(out, N * R * 4);                                                             \
        guard(out, N * R * 4); guard(x, N * C * 4); guard(w, wcap);                       \
        expect_reject(ctx, sdpa_linear(ctx, xp, wp, op, acc), want_, needle_, d);          \
    } while (0)
    sdpa_tensor a, b, c;
    /* E_ARG */
    LIN("x NULL", SDPA_E_ARG, "x is missing", NULL, &W, &O, 0);
    LIN("weight NULL", SDPA_E_ARG, "weight is missing", &X, NULL, &O, 0);
    pattern(out, N * R * 4);
    guard(x, N * C * 4);
    guard(w, wcap);
    expect_reject(ctx, sdpa_linear(ctx, &X, &W, NULL, 0), SDPA_E_ARG, "out is missing", "linear: out NULL");
    a = X; a.data = NULL;
    LIN("x.data NULL", SDPA_E_ARG, "x.data", &a, &W, &O, 0);
    a = W; a.data = NULL;
    LIN("weight.data NULL", SDPA_E_ARG, "weight.data", &X, &a, &O, 0);
    a = O; a.data = NULL;
    LIN("out.data NULL", SDPA_E_ARG, "out.data", &X, &W, &a, 0);
    LIN("flags 4", SDPA_E_ARG, "flags", &X, &W, &O, 4);
    LIN("flags -1", SDPA_E_ARG, "flags", &X, &W, &O, -1);
    /* every bit but ACCUMULATE (1) and INT16_ACTIVATIONS (2) refused, with the value */
    LIN("flags 4 (named)", SDPA_E_ARG, "flags is 4;", &X, &W, &O, 4);
    LIN("flags 6", SDPA_E_ARG, "flags is 6;", &X, &W, &O, 6);
    LIN("flags 7", SDPA_E_ARG, "flags is 7;", &X, &W, &O, 7);
    LIN("flags 8", SDPA_E_ARG, "flags is 8;", &X, &W, &O, 8);
    LIN("flags INT32_MIN", SDPA_E_ARG, "flags is -2147483648;", &X, &W, &O, INT32_MIN);
    LIN("flags -1 (named)", SDPA_E_ARG, "flags is -1;", &X, &W, &O, -1);
    {   /* out overlapping x: one buffer, out starting inside x (and x inside out) */
        float * buf = tu_malloc((N * C + N * R) * 4);
        fill_normal(&rng, buf, N * C + N * R, 1.0f);
        a = X; a.data = buf;
        b = O; b.data = buf + N * C - 1;
        snprintf(d, sizeof d, "linear (%s weight): out's first element on x's last", dtype_name(dt));
        guard(buf, (N * C + N * R) * 4); guard(w, wcap);
        expect_reject(ctx, sdpa_linear(ctx, &a, &W, &b, 0), SDPA_E_ARG, "with x;", d);
        a.data = buf + N * R - 1;
        b.data = buf;
        snprintf(d, sizeof d, "linear (%s weight): x's first element on out's last", dtype_name(dt));
        guard(buf, (N * C + N * R) * 4); guard(w, wcap);
        expect_reject(ctx, sdpa_linear(ctx, &a, &W, &b, 0), SDPA_E_ARG, "with x;", d);
        a.data = buf;
        b.data = buf;
        snprintf(d, sizeof d, "linear (%s weight): out == x", dtype_name(dt));
        guard(buf, (N * C + N * R) * 4); guard(w, wcap);
        expect_reject(ctx, sdpa_linear(ctx, &a, &W, &b, 1), SDPA_E_ARG, "with x;", d);
        /* just apart: accepted */
        a.data = buf;
        b.data = buf + N * C;
        snprintf(d, sizeof d, "linear (%s weight): out right after x", dtype_name(dt));
        expect_ok(ctx, sdpa_linear(ctx, &a, &W, &b, 0), d);
        free(buf);
    }
    {   /* out overlapping weight (its last bytes) */
        const size_t wb = rb * R, ob = N * R * 4;
        uint8_t * buf = tu_malloc(wb + ob);
        memcpy(buf, w, wb);
        pattern(buf + wb, ob);
        a = W; a.data = buf;
        b = O; b.data = buf + wb - 4;
        snprintf(d, sizeof d, "linear (%s weight): out overlapping weight's last 4 bytes", dtype_name(dt));
        guard(buf, wb + ob); guard(x, N * C * 4);
        /* (out's data is not float-aligned for a weight of odd row bytes: never dereferenced) */
        expect_reject(ctx, sdpa_linear(ctx, &X, &a, &b, 0), SDPA_E_ARG, "with weight;", d);
        b.data = buf + wb;
        snprintf(d, sizeof d, "linear (%s weight): out right after weight", dtype_name(dt));
        if (((uintptr_t)b.data & 3) == 0) expect_ok(ctx, sdpa_linear(ctx, &X, &a, &b, 0), d);
        free(buf);
    }
    /* E_RANK */
    a = X; a.rank = 0;
    LIN("x rank 0", SDPA_E_RANK, "x has rank 0", &a, &W, &O, 0);
    a = X; a.rank = 5;
    LIN("x rank 5", SDPA_E_RANK, "x has rank 5", &a, &W, &O, 0);
    a = X; a.rank = -1;
    LIN("x rank -1", SDPA_E_RANK, "x has rank -1", &a, &W, &O, 0);
    a = W; a.rank = 1; a.dims[0] = R * C; a.dims[1] = 0;
    LIN("weight rank 1", SDPA_E_RANK, "weight has rank 1", &X, &a, &O, 0);
    a = W; a.rank = 3; a.dims[0] = 1; a.dims[1] = R; a.dims[2] = C;
    LIN("weight rank 3", SDPA_E_RANK, "weight has rank 3", &X, &a, &O, 0);
    a = O; a.rank = 5;
    LIN("out rank 5", SDPA_E_RANK, "out has rank 5", &X, &W, &a, 0);
    a = O; a.rank = 100;
    LIN("out rank 100", SDPA_E_RANK, "out has rank 100", &X, &W, &a, 0);
    /* E_DIMS */
    a = X; a.len = N * C - 1;
    LIN("x len != product(dims)", SDPA_E_DIMS, "x has 127 elements", &a, &W, &O, 0);
    a = W; a.len = R * C + 1;
    LIN("weight len != product(dims)", SDPA_E_DIMS, "weight has 513 elements", &X, &a, &O, 0);
    a = O; a.len = N * R - 1;
    LIN("out len != product(dims)", SDPA_E_DIMS, "out has 15 elements", &X, &W, &a, 0);
    a = X; a.dims[0] = 0; a.len = 0;
    LIN("x dims[0] 0", SDPA_E_DIMS, "x.dims[0] is 0", &a, &W, &O, 0);
    a = W; a.dims[0] = -8; a.len = 0;
    LIN("weight dims[0] -8", SDPA_E_DIMS, "weight.dims[0] is -8", &X, &a, &O, 0);
    a = X; a.dims[0] = 4; a.dims[1] = C / 2;
    LIN("x cols != weight cols", SDPA_E_DIMS, "x has dims [4, 32]", &a, &W, &O, 0);
    a = O; a.dims[0] = 1; a.dims[1] = N * R;
    LIN("out [1, 16] for 2 x rows", SDPA_E_DIMS, "out has dims [1, 16]", &X, &W, &a, 0);
    a = O; a.dims[0] = N * R / 4; a.dims[1] = 4;
    LIN("out last dim 4 != weight rows 8", SDPA_E_DIMS, "out has dims [4, 4]", &X, &W, &a, 0);
    a = O; a.rank = 3; a.dims[0] = 1; a.dims[1] = N; a.dims[2] = R;
    LIN("out rank 3 for a rank-2 x", SDPA_E_DIMS, "out has dims [1, 2, 8]", &X, &W, &a, 0);
    if (dt == Q8 || dt == Q4) {  /* cols 48: not whole blocks (and 16) */
        a = X; a.dims[0] = 2; a.dims[1] = 48; a.len = 96;
        b = W; b.dims[0] = 4; b.dims[1] = 48; b.len = 192;
        c = O; c.dims[0] = 2; c.dims[1] = 4; c.len = 8;
        const char * blocks = dt == Q8 ? "weight is q8_0 [4, 48] with rows of 48 values"
                                       : "weight is q4_0 [4, 48] with rows of 48 values";
        LIN("weight cols 48", SDPA_E_DIMS, blocks, &a, &b, &c, 0);
        a.dims[1] = 16; a.dims[0] = 4; a.len = 64;
        b.dims[1] = 16; b.dims[0] = 8; b.len = 128;
        c.dims[0] = 4; c.dims[1] = 8; c.len = 32;
        LIN("weight cols 16", SDPA_E_DIMS, "multiple of 32", &a, &b, &c, 0);
    }
    /* E_DTYPE */
    static const int32_t BAD_W[] = {SDPA_DTYPE_BOOL, SDPA_DTYPE_INT8, SDPA_DTYPE_INT4, 0, 50, 99, -1};
    for (int k = 0; k < COUNT(BAD_W); k++) {
        char what[48];
        snprintf(what, sizeof what, "weight dtype %d", BAD_W[k]);
        a = W; a.dtype = BAD_W[k];
        LIN(what, SDPA_E_DTYPE, "weight has dtype", &X, &a, &O, 0);
    }
    a = X; a.dtype = F16;
    LIN("x float16", SDPA_E_DTYPE, "x has dtype float16", &a, &W, &O, 0);
    a = X; a.dtype = Q8;
    LIN("x q8_0", SDPA_E_DTYPE, "x has dtype q8_0", &a, &W, &O, 0);
    a = O; a.dtype = F16;
    LIN("out float16", SDPA_E_DTYPE, "out has dtype float16", &X, &W, &a, 0);
    /* two rules broken: the lower status wins */
    a = X; a.rank = 5;
    b = W; b.dtype = 99;
    LIN("x rank 5 + weight dtype 99", SDPA_E_RANK, "x has rank 5", &a, &b, &O, 0);
    a = X; a.len = 1;
    LIN("x len + weight dtype 99", SDPA_E_DIMS, "x has 1 elements", &a, &b, &O, 0);
    a = X; a.data = NULL;
    c = O; c.rank = 7;
    LIN("x.data NULL + out rank 7 + weight dtype 99", SDPA_E_ARG, "x.data", &a, &b, &c, 0);
    a = X; a.dtype = F16;
    c = O; c.dims[1] = 3;
    LIN("x float16 + out dims", SDPA_E_DIMS, "out has", &a, &W, &c, 0);
    LIN("flags 5 + out dims", SDPA_E_ARG, "flags", &X, &W, &c, 5);
    /* the valid flags pass on to the next rule */
    LIN("flags 2 + out dims", SDPA_E_DIMS, "out has", &X, &W, &c, SDPA_LINEAR_INT16_ACTIVATIONS);
    LIN("flags 3 + out dims", SDPA_E_DIMS, "out has", &X, &W, &c, SDPA_LINEAR_INT16_ACTIVATIONS | SDPA_LINEAR_ACCUMULATE);
    a = X; a.data = NULL;
    LIN("flags 6 + x.data NULL", SDPA_E_ARG, "x.data", &a, &W, &O, 6);
    if (dt == Q8 || dt == Q4) {
        a = X; a.dims[0] = 2; a.dims[1] = 48; a.len = 96; a.dtype = F16;
        b = W; b.dims[0] = 4; b.dims[1] = 48; b.len = 192;
        c = O; c.dims[0] = 2; c.dims[1] = 4; c.len = 8;
        LIN("cols 48 + x float16", SDPA_E_DIMS, "multiple of 32", &a, &b, &c, 0);
    }
#undef LIN
    /* a valid call after all that succeeds and clears the message */
    pattern(out, N * R * 4);
    expect_ok(ctx, sdpa_linear(ctx, &X, &W, &O, 0), "linear after rejections");
    pattern(out, N * R * 4);
    tu_dirty_error(ctx);
    expect_ok(ctx, sdpa_linear(ctx, &X, &W, &O, SDPA_LINEAR_INT16_ACTIVATIONS | SDPA_LINEAR_ACCUMULATE), "linear flags 3 after rejections");
    free(x);
    free(out);
    free(w);
}

static void bad_rms_norm(sdpa_ctx * ctx) {
    enum { N = 3, D = 20 };
    float * x = tu_malloc(N * D * 4), * w = tu_malloc(D * 4), * out = tu_malloc(N * D * 4);
    tu_rng rng;
    tu_rng_seed(&rng, 98);
    fill_normal(&rng, x, N * D, 1.0f);
    fill_normal(&rng, w, D, 1.0f);
    sdpa_tensor X = tu_tensor2(x, F32, N, D), W = tensor1(w, F32, D), O = tu_tensor2(out, F32, N, D);
    sdpa_tensor a, b;
#define RMS(desc_, want_, needle_, xp, wp, eps, op)                                  \
    do {                                                                             \
        pattern(out, N * D * 4);                                                      \
        guard(out, N * D * 4); guard(x, N * D * 4); guard(w, D * 4);                 \
        expect_reject(ctx, sdpa_rms_norm(ctx, xp, wp, eps, op), want_, needle_, "rms_norm: " desc_); \
    } while (0)
    RMS("x NULL", SDPA_E_ARG, "x is missing", NULL, &W, 1e-5f, &O);
    RMS("weight NULL", SDPA_E_ARG, "weight is missing", &X, NULL, 1e-5f, &O);
    RMS("out NULL", SDPA_E_ARG, "out is missing", &X, &W, 1e-5f, NULL);
    a = W; a.data = NULL;
    RMS("weight.data NULL", SDPA_E_ARG, "weight.data", &X, &a, 1e-5f, &O);
    RMS("eps NaN", SDPA_E_ARG, "eps", &X, &W, NAN, &O);
    RMS("eps -1e-6", SDPA_E_ARG, "eps", &X, &W, -1e-6f, &O);
    RMS("eps Inf", SDPA_E_ARG, "eps", &X, &W, INFINITY, &O);
    {   /* out partly on x: rejected; exactly x: accepted */
        float * buf = tu_malloc((N * D + 1) * 4);
        fill_normal(&rng, buf, N * D + 1, 1.0f);
        a = X; a.data = buf;
        b = O; b.data = buf + 1;
        guard(buf, (N * D + 1) * 4); guard(w, D * 4);
        expect_reject(ctx, sdpa_rms_norm(ctx, &a, &W, 1e-5f, &b), SDPA_E_ARG, "with x;", "rms_norm: out = x + 1 element");
        b.data = buf; b.len = N * D - D; b.dims[0] = N - 1;  /* same start, fewer bytes */
        guard(buf, (N * D + 1) * 4); guard(w, D * 4);
        expect_reject(ctx, sdpa_rms_norm(ctx, &a, &W, 1e-5f, &b), SDPA_E_ARG, "with x;", "rms_norm: out a prefix of x");
        b = a;
        expect_ok(ctx, sdpa_rms_norm(ctx, &a, &W, 1e-5f, &b), "rms_norm: out == x");
        free(buf);
    }
    {   /* out overlapping weight */
        float * buf = tu_malloc((N * D + D) * 4);
        memcpy(buf, w, D * 4);
        a = W; a.data = buf;
        b = O; b.data = buf + D - 1;
        guard(buf, (N * D + D) * 4); guard(x, N * D * 4);
        expect_reject(ctx, sdpa_rms_norm(ctx, &X, &a, 1e-5f, &b), SDPA_E_ARG, "with weight;", "rms_norm: out on weight");
        b = a; b.rank = 2; b.dims[0] = 1; b.dims[1] = D;
        a.rank = 1;
        /* weight == out exactly is not allowed either */
        guard(buf, (N * D + D) * 4); guard(x, N * D * 4);
        sdpa_tensor x1 = act_tensor(x, 1, D, 0);
        expect_reject(ctx, sdpa_rms_norm(ctx, &x1, &a, 1e-5f, &b), SDPA_E_ARG, "with weight;", "rms_norm: out == weight");
        free(buf);
    }
    a = X; a.rank = 5;
    RMS("x rank 5", SDPA_E_RANK, "x has rank 5", &a, &W, 1e-5f, &O);
    a = O; a.rank = 0;
    RMS("out rank 0", SDPA_E_RANK, "out has rank 0", &X, &W, 1e-5f, &a);
    a = W; a.rank = 2; a.dims[0] = 1; a.dims[1] = D;
    RMS("weight rank 2", SDPA_E_RANK, "weight has rank 2", &X, &a, 1e-5f, &O);
    a = W; a.len = D - 1;
    RMS("weight len", SDPA_E_DIMS, "weight has 19 elements", &X, &a, 1e-5f, &O);
    a = W; a.dims[0] = D - 1; a.len = D - 1;
    RMS("weight dims [19]", SDPA_E_DIMS, "weight has dims [19]", &X, &a, 1e-5f, &O);
    a = O; a.dims[0] = 1; a.dims[1] = N * D;
    RMS("out [1, 60]", SDPA_E_DIMS, "out has dims [1, 60]", &X, &W, 1e-5f, &a);
    a = X; a.len = 7;
    RMS("x len", SDPA_E_DIMS, "x has 7 elements", &a, &W, 1e-5f, &O);
    a = X; a.dtype = F16;
    RMS("x float16", SDPA_E_DTYPE, "x has dtype float16", &a, &W, 1e-5f, &O);
    a = W; a.dtype = F16;
    RMS("weight float16", SDPA_E_DTYPE, "weight has dtype float16", &X, &a, 1e-5f, &O);
    a = O; a.dtype = SDPA_DTYPE_INT8;
    RMS("out int8", SDPA_E_DTYPE, "out has dtype int8", &X, &W, 1e-5f, &a);
    a = X; a.dtype = F16;
    RMS("eps NaN + x float16", SDPA_E_ARG, "eps", &a, &W, NAN, &O);
    b = W; b.rank = 3;
    RMS("weight rank 3 + x float16", SDPA_E_RANK, "weight has rank 3", &a, &b, 1e-5f, &O);
#undef RMS
    pattern(out, N * D * 4);
    expect_ok(ctx, sdpa_rms_norm(ctx, &X, &W, 0.0f, &O), "rms_norm after rejections");
    free(x);
    free(w);
    free(out);
}

static void bad_swiglu(sdpa_ctx * ctx) {
    enum { N = 2, D = 12 };
    /* (a row more than the tensors: a case claims a longer gate, see bad_linear) */
    float * g = tu_malloc((N + 1) * D * 4), * u = tu_malloc((N + 1) * D * 4), * out = tu_malloc((N + 1) * D * 4);
    tu_rng rng;
    tu_rng_seed(&rng, 97);
    fill_normal(&rng, g, N * D, 1.0f);
    fill_normal(&rng, u, N * D, 1.0f);
    sdpa_tensor G = tu_tensor2(g, F32, N, D), U = tu_tensor2(u, F32, N, D), O = tu_tensor2(out, F32, N, D);
    sdpa_tensor a, b, c;
#define SWI(desc_, want_, needle_, gp, up, op)                                      \
    do {                                                                            \
        pattern(out, N * D * 4);                                                     \
        guard(out, N * D * 4); guard(g, N * D * 4); guard(u, N * D * 4);            \
        expect_reject(ctx, sdpa_swiglu(ctx, gp, up, op), want_, needle_, "swiglu: " desc_); \
    } while (0)
    SWI("gate NULL", SDPA_E_ARG, "gate is missing", NULL, &U, &O);
    SWI("up NULL", SDPA_E_ARG, "up is missing", &G, NULL, &O);
    SWI("out NULL", SDPA_E_ARG, "out is missing", &G, &U, NULL);
    a = U; a.data = NULL;
    SWI("up.data NULL", SDPA_E_ARG, "up.data", &G, &a, &O);
    {
        float * buf = tu_malloc((N * D + 2) * 4);
        fill_normal(&rng, buf, N * D + 2, 1.0f);
        a = G; a.data = buf;
        b = O; b.data = buf + 2;
        guard(buf, (N * D + 2) * 4); guard(u, N * D * 4);
        expect_reject(ctx, sdpa_swiglu(ctx, &a, &U, &b), SDPA_E_ARG, "with gate;", "swiglu: out = gate + 2 elements");
        a = U; a.data = buf + 2;
        b = O; b.data = buf;
        guard(buf, (N * D + 2) * 4); guard(g, N * D * 4);
        expect_reject(ctx, sdpa_swiglu(ctx, &G, &a, &b), SDPA_E_ARG, "with up;", "swiglu: up = out + 2 elements");
        /* gate and up overlapping each other (both read only): accepted */
        a = G; a.data = buf;
        b = U; b.data = buf + 1;
        expect_ok(ctx, sdpa_swiglu(ctx, &a, &b, &O), "swiglu: gate and up overlapping, out apart");
        free(buf);
    }
    a = G; a.rank = 5;
    SWI("gate rank 5", SDPA_E_RANK, "gate has rank 5", &a, &U, &O);
    a = U; a.rank = 0;
    SWI("up rank 0", SDPA_E_RANK, "up has rank 0", &G, &a, &O);
    a = O; a.rank = 6;
    SWI("out rank 6", SDPA_E_RANK, "out has rank 6", &G, &U, &a);
    a = U; a.dims[0] = 1; a.dims[1] = N * D;
    SWI("up [1, 24]", SDPA_E_DIMS, "up has dims [1, 24]", &G, &a, &O);
    a = O; a.dims[0] = N * D / 4; a.dims[1] = 4;
    SWI("out [6, 4]", SDPA_E_DIMS, "out has dims [6, 4]", &G, &U, &a);
    a = G; a.len = N * D + 1;
    SWI("gate len", SDPA_E_DIMS, "gate has 25 elements", &a, &U, &O);
    a = G; a.dtype = F16;
    SWI("gate float16", SDPA_E_DTYPE, "gate has dtype float16", &a, &U, &O);
    a = U; a.dtype = SDPA_DTYPE_BOOL;
    SWI("up bool", SDPA_E_DTYPE, "up has dtype bool", &G, &a, &O);
    a = O; a.dtype = Q4;
    SWI("out q4_0", SDPA_E_DTYPE, "out has dtype q4_0", &G, &U, &a);
    a = G; a.dtype = F16;
    b = U; b.dims[1] = 5;
    c = O; c.rank = 9;
    SWI("out rank 9 + up dims + gate float16", SDPA_E_RANK, "out has rank 9", &a, &b, &c);
    SWI("up len + gate float16", SDPA_E_DIMS, "up has 24 elements", &a, &b, &O);
#undef SWI
    pattern(out, N * D * 4);
    expect_ok(ctx, sdpa_swiglu(ctx, &G, &U, &O), "swiglu after rejections");
    free(g);
    free(u);
    free(out);
}

static void bad_embed(sdpa_ctx * ctx, int32_t dt) {
    enum { V = 10, D = 64, NI = 3 };
    const size_t rb = ref_row_bytes(dt, D), tcap = (size_t)(V + 1) * D * 4;  /* (as in bad_linear) */
    uint8_t * table = tu_malloc(tcap);
    memset(table, 0, tcap);
    float * out = tu_malloc(NI * D * 4);
    int32_t * ids = tu_malloc(NI * 4);
    tu_rng rng;
    tu_rng_seed(&rng, 96);
    fill_weight(&rng, dt, table, V, D);
    ids[0] = 0; ids[1] = 9; ids[2] = 4;
    sdpa_tensor T = tu_tensor2(table, dt, V, D), O = tu_tensor2(out, F32, NI, D);
    sdpa_tensor a, b;
    char d[200];
#define EMB(desc_, want_, needle_, tp, idp, nid, op)                                          \
    do {                                                                                      \
        snprintf(d, sizeof d, "embed (%s table): %s", dtype_name(dt), desc_);                 \
        pattern(out, NI * D * 4);                                                              \
        guard(out, NI * D * 4); guard(table, tcap); guard(ids, NI * 4);                     \
        expect_reject(ctx, sdpa_embed(ctx, tp, idp, nid, op), want_, needle_, d);            \
    } while (0)
    EMB("table NULL", SDPA_E_ARG, "table is missing", NULL, ids, NI, &O);
    EMB("out NULL", SDPA_E_ARG, "out is missing", &T, ids, NI, NULL);
    EMB("ids NULL", SDPA_E_ARG, "ids is missing", &T, NULL, NI, &O);
    a = T; a.data = NULL;
    EMB("table.data NULL", SDPA_E_ARG, "table.data", &a, ids, NI, &O);
    EMB("n_ids 0", SDPA_E_ARG, "ids has 0 entries", &T, ids, 0, &O);
    EMB("n_ids -3", SDPA_E_ARG, "ids has -3 entries", &T, ids, -3, &O);
    ids[1] = V;
    EMB("ids[1] = vocab", SDPA_E_ARG, "ids[1] is 10", &T, ids, NI, &O);
    ids[0] = -1;
    EMB("ids[0] = -1 (and ids[1] = vocab: the first is named)", SDPA_E_ARG, "ids[0] is -1", &T, ids, NI, &O);
    ids[0] = 0;
    ids[1] = 9;
    ids[2] = INT32_MIN;
    EMB("ids[2] = INT32_MIN", SDPA_E_ARG, "ids[2]", &T, ids, NI, &O);
    a = O; a.rank = 7;
    EMB("ids[2] out of range + out rank 7", SDPA_E_ARG, "ids[2]", &T, ids, NI, &a);
    ids[2] = 4;
    {   /* out overlapping table; out overlapping ids */
        const size_t ob = NI * D * 4;
        uint8_t * buf = tu_malloc(rb * V + ob);
        memcpy(buf, table, rb * V);
        pattern(buf + rb * V, ob);
        a = T; a.data = buf;
        b = O; b.data = buf + (rb * V - 4) / 4 * 4;
        snprintf(d, sizeof d, "embed (%s table): out on table's last bytes", dtype_name(dt));
        guard(buf, rb * V + ob); guard(ids, NI * 4);
        expect_reject(ctx, sdpa_embed(ctx, &a, ids, NI, &b), SDPA_E_ARG, "with table;", d);
        free(buf);
        float * obuf = tu_malloc(ob + 4 * 4);
        int32_t * ids2 = (int32_t *)(void *)(obuf + NI * D - 1);  /* ids start on out's last element */
        b = O; b.data = obuf;
        pattern(obuf, ob + 16);
        ids2[0] = 1; ids2[1] = 2; ids2[2] = 3;
        snprintf(d, sizeof d, "embed (%s table): ids on out's last element", dtype_name(dt));
        guard(obuf, ob + 16); guard(table, tcap);
        expect_reject(ctx, sdpa_embed(ctx, &T, ids2, NI, &b), SDPA_E_ARG, "with ids;", d);
        ids2 = (int32_t *)(void *)(obuf + NI * D);
        ids2[0] = 1; ids2[1] = 2; ids2[2] = 3;
        snprintf(d, sizeof d, "embed (%s table): ids right after out", dtype_name(dt));
        expect_ok(ctx, sdpa_embed(ctx, &T, ids2, NI, &b), d);
        free(obuf);
    }
    a = T; a.rank = 3; a.dims[0] = 1; a.dims[1] = V; a.dims[2] = D;
    EMB("table rank 3", SDPA_E_RANK, "table has rank 3", &a, ids, NI, &O);
    a = O; a.rank = 1; a.dims[0] = NI * D;
    EMB("out rank 1", SDPA_E_RANK, "out has rank 1", &T, ids, NI, &a);
    a = O; a.dims[0] = NI - 1; a.len = (NI - 1) * D;
    EMB("out [2, 64] for 3 ids", SDPA_E_DIMS, "out has dims [2, 64]", &T, ids, NI, &a);
    a = O; a.dims[0] = NI * 2; a.dims[1] = D / 2;
    EMB("out [6, 32]", SDPA_E_DIMS, "out has dims [6, 32]", &T, ids, NI, &a);
    a = T; a.len = V * D - 1;
    EMB("table len", SDPA_E_DIMS, "table has 639 elements", &a, ids, NI, &O);
    if (dt == Q8 || dt == Q4) {
        a = T; a.dims[0] = V * 4; a.dims[1] = D / 4; a.len = V * D;
        b = O; b.dims[1] = D / 4; b.len = NI * D / 4;
        EMB("table cols 16", SDPA_E_DIMS, "table is", &a, ids, NI, &b);
    }
    a = T; a.dtype = SDPA_DTYPE_INT8;
    EMB("table int8", SDPA_E_DTYPE, "table has dtype int8", &a, ids, NI, &O);
    a = T; a.dtype = 42;
    EMB("table dtype 42", SDPA_E_DTYPE, "table has dtype unknown (42)", &a, ids, NI, &O);
    a = O; a.dtype = F16;
    EMB("out float16", SDPA_E_DTYPE, "out has dtype float16", &T, ids, NI, &a);
    b = T; b.dtype = SDPA_DTYPE_INT4;
    a = O; a.len = 1;
    EMB("out len + table int4", SDPA_E_DIMS, "out has 1 elements", &b, ids, NI, &a);
#undef EMB
    pattern(out, NI * D * 4);
    expect_ok(ctx, sdpa_embed(ctx, &T, ids, NI, &O), "embed after rejections");
    free(table);
    free(out);
    free(ids);
}

static void bad_quantize(sdpa_ctx * ctx, int32_t dt) {
    enum { R = 3, C = 64 };
    const size_t rb = ref_row_bytes(dt, C), ocap = (size_t)(R + 1) * C * 4;  /* (as in bad_linear) */
    float * src = tu_malloc(R * C * 4);
    uint8_t * out = tu_malloc(ocap);
    tu_rng rng;
    tu_rng_seed(&rng, 95);
    fill_normal(&rng, src, R * C, 1.0f);
    sdpa_tensor S = tu_tensor2(src, F32, R, C), O = tu_tensor2(out, dt, R, C);
    sdpa_tensor a, b;
    char d[200];
#define QNT(desc_, want_, needle_, sp, op)                                         \
    do {                                                                           \
        snprintf(d, sizeof d, "quantize (to %s): %s", dtype_name(dt), desc_);      \
        pattern(out, ocap);                                                         \
        guard(out, ocap); guard(src, R * C * 4);                                 \
        expect_reject(ctx, sdpa_quantize(ctx, sp, op), want_, needle_, d);         \
    } while (0)
    QNT("source NULL", SDPA_E_ARG, "source is missing", NULL, &O);
    QNT("out NULL", SDPA_E_ARG, "out is missing", &S, NULL);
    a = O; a.data = NULL;
    QNT("out.data NULL", SDPA_E_ARG, "out.data", &S, &a);
    {
        float * buf = tu_malloc(R * C * 4 + ocap);
        fill_normal(&rng, buf, R * C, 1.0f);
        a = S; a.data = buf;
        b = O; b.data = buf + R * C - 1;
        snprintf(d, sizeof d, "quantize (to %s): out on source's last element", dtype_name(dt));
        guard(buf, R * C * 4 + ocap);
        expect_reject(ctx, sdpa_quantize(ctx, &a, &b), SDPA_E_ARG, "with source;", d);
        b.data = buf;
        snprintf(d, sizeof d, "quantize (to %s): out == source", dtype_name(dt));
        guard(buf, R * C * 4 + ocap);
        expect_reject(ctx, sdpa_quantize(ctx, &a, &b), SDPA_E_ARG, "with source;", d);
        free(buf);
    }
    a = S; a.rank = 1; a.dims[0] = R * C;
    QNT("source rank 1", SDPA_E_RANK, "source has rank 1", &a, &O);
    a = O; a.rank = 3; a.dims[2] = 1;
    QNT("out rank 3", SDPA_E_RANK, "out has rank 3", &S, &a);
    a = O; a.dims[0] = R + 1; a.len = (R + 1) * C;
    QNT("out rows 4 for 3", SDPA_E_DIMS, "out has dims [4, 64]", &S, &a);
    a = S; a.len = 5;
    QNT("source len", SDPA_E_DIMS, "source has 5 elements", &a, &O);
    if (dt == Q8 || dt == Q4) {
        a = S; a.dims[0] = R * 2; a.dims[1] = C / 2 + 0; a.len = R * C;
        b = O; b.dims[0] = R * 4; b.dims[1] = C / 4; b.len = R * C;
        QNT("out dims [12, 16] for source [6, 32]", SDPA_E_DIMS, "out has dims [12, 16]", &a, &b);
        a = S; a.dims[0] = R * 4; a.dims[1] = C / 4; a.len = R * C;
        QNT("cols 16", SDPA_E_DIMS, "out is", &a, &b);
    }
    a = S; a.dtype = F16;
    QNT("source float16", SDPA_E_DTYPE, "source has dtype float16", &a, &O);
    a = O; a.dtype = SDPA_DTYPE_INT4;
    QNT("out int4", SDPA_E_DTYPE, "out has dtype int4", &S, &a);
    a = O; a.dtype = SDPA_DTYPE_BOOL;
    b = S; b.rank = 0;
    QNT("source rank 0 + out bool", SDPA_E_RANK, "source has rank 0", &b, &a);
#undef QNT
    pattern(out, rb * R);
    expect_ok(ctx, sdpa_quantize(ctx, &S, &O), "quantize after rejections");
    free(src);
    free(out);
}

static void test_bad_input(void) {
    sdpa_ctx * ctx = g_ctx[1];
    for (int d = 0; d < COUNT(DTYPES); d++) {
        snprintf(tu_context, sizeof tu_context, "bad input, %s", dtype_name(DTYPES[d]));
        bad_linear(ctx, DTYPES[d]);
        bad_embed(ctx, DTYPES[d]);
        bad_quantize(ctx, DTYPES[d]);
    }
    snprintf(tu_context, sizeof tu_context, "bad input");
    bad_rms_norm(ctx);
    bad_swiglu(ctx);
    /* no context: E_ARG, nothing else to say it with */
    float v = 1.0f;
    sdpa_tensor t = tensor1(&v, F32, 1), w = tu_tensor2(&v, F32, 1, 1);
    int32_t id = 0;
    TU_CHECK(sdpa_linear(NULL, &t, &w, &t, 0) == SDPA_E_ARG, "sdpa_linear(NULL ctx)");
    TU_CHECK(sdpa_rms_norm(NULL, &t, &t, 0.0f, &t) == SDPA_E_ARG, "sdpa_rms_norm(NULL ctx)");
    TU_CHECK(sdpa_swiglu(NULL, &t, &t, &t) == SDPA_E_ARG, "sdpa_swiglu(NULL ctx)");
    TU_CHECK(sdpa_embed(NULL, &w, &id, 1, &w) == SDPA_E_ARG, "sdpa_embed(NULL ctx)");
    TU_CHECK(sdpa_quantize(NULL, &w, &w) == SDPA_E_ARG, "sdpa_quantize(NULL ctx)");
    sdpa_ctx_set_dense_parallel_min_macs(NULL, 0);  /* a no-op */
    tu_context[0] = 0;
}

/* ---- 7: row bytes, no allocation on the decode path ------------------------- */

static void test_row_bytes(void) {
    static const struct { int32_t dt, cols; size_t bytes; } T[] = {
        {F32, 1, 4}, {F32, 7, 28}, {F32, 4096, 16384}, {F16, 1, 2}, {F16, 7, 14}, {F16, 4096, 8192},
        {Q8, 32, 34}, {Q8, 64, 68}, {Q8, 4096, 4352}, {Q4, 32, 18}, {Q4, 96, 54}, {Q4, 4096, 2304},
        {Q8, 33, 0}, {Q8, 16, 0}, {Q4, 48, 0}, {Q4, 1, 0}, {F32, 0, 0}, {F16, -4, 0}, {Q8, 0, 0}, {Q4, -32, 0},
        {SDPA_DTYPE_BOOL, 32, 0}, {SDPA_DTYPE_INT8, 32, 0}, {SDPA_DTYPE_INT4, 32, 0}, {0, 32, 0}, {50, 32, 0},
        {K4, 256, 144}, {K4, 512, 288}, {K4, 4096, 2304}, {K6, 256, 210}, {K6, 768, 630}, {K6, 4096, 3360},
        {K4, 32, 0}, {K4, 288, 0}, {K6, 128, 0}, {K6, 255, 0}, {K4, 0, 0}, {K6, -256, 0},
        {Q5, 32, 22}, {Q5, 576, 396}, {Q5, 4096, 2816}, {Q5, 48, 0}, {Q5, 1, 0}, {Q5, 0, 0},
        {99, 32, 0}, {-1, 32, 0},
    };
    for (int i = 0; i < COUNT(T); i++) {
        const size_t got = sdpa_weight_row_bytes(T[i].dt, T[i].cols);
        TU_CHECK(got == T[i].bytes, "sdpa_weight_row_bytes(%d, %d) = %zu, expected %zu", T[i].dt, T[i].cols, got,
                 T[i].bytes);
    }
    /* the largest cols: float32 rows of 2^31 - 1 values are 8 GiB: 0 where size_t cannot hold it */
    const size_t big = sdpa_weight_row_bytes(F32, INT32_MAX);
    TU_CHECK(sizeof(size_t) >= 8 ? big == (size_t)INT32_MAX * 4 : big == 0, "sdpa_weight_row_bytes(float32, INT32_MAX) = %zu",
             big);
    TU_CHECK(sdpa_weight_row_bytes(Q4, 0x7fffffe0) == (size_t)(0x7fffffe0 / 32) * 18, "q4_0 row of 2^31 - 32 values");
}

static void test_no_alloc(void) {
    sdpa_status s = SDPA_E_ARG;
    sdpa_ctx * ctx = sdpa_ctx_create(2, &s);  /* a fresh context: its first calls */
    if (!TU_CHECK(ctx && s == SDPA_OK, "sdpa_ctx_create(2): %s", sdpa_status_code(s))) return;
    sdpa_ctx_set_dense_parallel_min_macs(ctx, 0);
    tu_rng rng;
    tu_rng_seed(&rng, 94);
    enum { R = 70, C = 256 };
    float * x = tu_malloc(C * 4), * y = tu_malloc(R * 4), * g = tu_malloc(C * 4), * wn = tu_malloc(C * 4);
    fill_normal(&rng, x, C, 1.0f);
    fill_normal(&rng, g, C, 1.0f);
    fill_normal(&rng, wn, C, 1.0f);
    uint8_t * w[4];
    for (int d = 0; d < 4; d++) {
        w[d] = tu_malloc(ref_row_bytes(DTYPES[d], C) * R);
        fill_weight(&rng, DTYPES[d], w[d], R, C);
    }
    int32_t ids[2] = {3, 69};
    float * e = tu_malloc(2 * C * 4);
    for (int pass = 0; pass < 2; pass++) {
        const size_t before = sdpa_ctx_scratch_bytes(ctx);
        for (int rep = 0; rep < 3; rep++)
            for (int d = 0; d < 4; d++) {
                sdpa_tensor xt = tensor1(x, F32, C), wt = tu_tensor2(w[d], DTYPES[d], R, C), yt = tensor1(y, F32, R);
                TU_CHECK(sdpa_linear(ctx, &xt, &wt, &yt, rep & 1) == SDPA_OK, "decode %s", dtype_name(DTYPES[d]));
                sdpa_tensor tt = tu_tensor2(w[d], DTYPES[d], R, C), et = tu_tensor2(e, F32, 2, C);
                TU_CHECK(sdpa_embed(ctx, &tt, ids, 2, &et) == SDPA_OK, "embed %s", dtype_name(DTYPES[d]));
            }
        sdpa_tensor xt = tensor1(x, F32, C), gt = tensor1(g, F32, C), nt = tensor1(wn, F32, C);
        TU_CHECK(sdpa_rms_norm(ctx, &xt, &nt, 1e-5f, &xt) == SDPA_OK, "rms_norm");
        TU_CHECK(sdpa_swiglu(ctx, &gt, &xt, &gt) == SDPA_OK, "swiglu");
        sdpa_tensor st = tu_tensor2(x, F32, 1, C), qt = tu_tensor2(w[2], Q8, 1, C);
        TU_CHECK(sdpa_quantize(ctx, &st, &qt) == SDPA_OK, "quantize");
        const size_t after = sdpa_ctx_scratch_bytes(ctx);
        TU_CHECK(after == before, "pass %d: scratch %zu -> %zu bytes over decode-path calls", pass, before, after);
        if (pass == 0) {  /* a float16 prefill (which may take scratch), then the decode path again */
            float * xs = tu_malloc(5 * C * 4), * ys = tu_malloc(5 * R * 4);
            fill_normal(&rng, xs, 5 * C, 1.0f);
            sdpa_tensor x5 = tu_tensor2(xs, F32, 5, C), w5 = tu_tensor2(w[1], F16, R, C), y5 = tu_tensor2(ys, F32, 5, R);
            TU_CHECK(sdpa_linear(ctx, &x5, &w5, &y5, 0) == SDPA_OK, "float16 prefill");
            free(xs);
            free(ys);
        }
    }
    for (int d = 0; d < 4; d++) free(w[d]);
    free(x);
    free(y);
    free(g);
    free(wn);
    free(e);
    sdpa_ctx_free(ctx);
}

/* ---- 8: int16 activations (SDPA_LINEAR_INT16_ACTIVATIONS) ------------------ */

/* The test's model of the int16 path, written from sdpa_dense.h and the
 * description of the computation (not from src/dense):
 *   x, per row and block of 32: amax = max |x| (float32); a block holding a
 *   NaN or an Inf gets s = NaN and xq = 0; otherwise s = amax / 32767.0f and
 *   xq = round-to-nearest-even(x * inv) with inv = 32767.0f / amax (0 for an
 *   all-zero block), saturated to int16. A block whose amax is below 2^-64
 *   is scaled by 2^64 first (exact), x * 2^64 * (32767 / (amax * 2^64)):
 *   32767 / amax itself overflows float32 below amax ~ 9.6e-35, and x * Inf
 *   would saturate every non-zero value of the block to +-32767;
 *   weight, per block b: d_b (float16 -> float32) and the integers q;
 *   per output: isum lane l = sum of q_j xq_j over the j of the block with
 *   (j % 8) / 2 == l (exact in int32: what i32x4.dot_i16x8_s adds into lane
 *   l), then per block in order lane[l] = lane[l] + float(isum_l) * (d_b * s_b)
 *   (each a float32 operation, not contracted: separate statements), the
 *   result (lane0 + lane2) + (lane1 + lane3), and with ACCUMULATE y0 + that.
 * Plain builds hold sdpa_linear to it bit for bit; the relaxed-SIMD build
 * (f32x4.relaxed_madd, fused or not depending on the CPU) to the model within
 * the float32 rounding part of the bound below.
 *
 * The bound against the float64 product of the dequantized weights and the
 * ORIGINAL x (u = 2^-24):
 *   x's error per element, xq * s - x: |xq - t| <= 1/2 with t = fl(x inv),
 *   |t - x inv| <= u 32768, and s inv = (1 + e1)(1 + e2) with |e| <= u, so
 *   |xq s - x| <= E_b = s_b / 2 + 4 u amax_b (+ 2^-135 when s_b is a float32
 *   subnormal, amax below ~2^-111: s_b's absolute rounding 2^-150 times
 *   |xq| <= 32767);
 *   float32 evaluation: per block a conversion, d * s and a product, nb
 *   additions per lane, the lane sum (2) and y0: at most (nb + 6) u (1.01)
 *   times (|y0| + sum_j |w_j| (|x_j| + E_b)); and where d * s or the product
 *   underflows, an absolute 2^-150 (|isum_l| + 1) per block and lane;
 *   |y - ref| <= sum_j |w_j| E_b(j) + (nb + 6) 1.01 u (|y0| + sum_j |w_j|
 *   (|x_j| + E_b(j))) + 2^-149 sum_b (sum_j |q_j xq_j| + 4).
 * The first term dominates (x's 2^-16 relative rounding); a dropped or
 * misread term moves y by about |w_j x_j|, hundreds of times the bound. */

typedef struct int16_model {
    int16_t * xq;  /* [n][cols] */
    float * xs;    /* [n][nb] */
    float * y;     /* [n][rows]: the model's output */
    double * ref;  /* [n][rows]: float64 over the original x */
    double * tol;  /* [n][rows]: the bound above */
    double * fmag; /* [n][rows]: |y0| + sum_b sum_l |float(isum_l) d s| (the float32 part's magnitude) */
} int16_model;

static void model_quantize_x(const float * x, int32_t nb, int16_t * xq, float * xs) {
    for (int32_t b = 0; b < nb; b++) {
        const float * xb = x + 32 * b;
        float amax = 0.0f;
        int finite = 1;
        for (int j = 0; j < 32; j++) {
            if (!isfinite(xb[j])) finite = 0;
            else if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]);
        }
        if (!finite) {
            xs[b] = NAN;
            for (int j = 0; j < 32; j++) xq[32 * b + j] = 0;
            continue;
        }
        xs[b] = amax / 32767.0f;
        const float k = amax < 0x1p-64f ? 0x1p64f : 1.0f;
        const float ak = amax * k;
        const float inv = amax > 0.0f ? 32767.0f / ak : 0.0f;
        for (int j = 0; j < 32; j++) {
            const float xk = xb[j] * k;
            const float t = nearbyintf(xk * inv);
            xq[32 * b + j] = (int16_t)(t > 32767.0f ? 32767 : t < -32768.0f ? -32768 : (int)t);
        }
    }
}

/* The integer q of element j of a q8_0 / q4_0 / q5_0 row, and its block's d as float32. */
static int32_t wq_int(int32_t dt, const uint8_t * row, int32_t j) {
    if (dt == Q8) return (int8_t)row[(size_t)(j / 32) * 34 + 2 + j % 32];
    if (dt == Q5) return ref_q5_q(row + (size_t)(j / 32) * 22, j % 32);
    const uint8_t * b = row + (size_t)(j / 32) * 18;
    const int k = j % 32;
    return (k < 16 ? (b[2 + k] & 15) : (b[2 + k - 16] >> 4)) - 8;
}
static float wq_d(int32_t dt, const uint8_t * row, int32_t b) {
    return (float)ref_half(get_u16(row + (size_t)b * (dt == Q8 ? 34 : dt == Q5 ? 22 : 18)));
}

static int16_model int16_reference(int32_t dt, const uint8_t * w, const float * x, const float * y0, int32_t n,
                                   int32_t rows, int32_t cols) {
    const int32_t nb = cols / 32;
    const size_t rb = ref_row_bytes(dt, cols), ny = (size_t)n * rows;
    const double u = 0x1p-24;
    int16_model m;
    m.xq = tu_malloc((size_t)n * cols * 2);
    m.xs = tu_malloc((size_t)n * nb * 4);
    m.y = tu_malloc(ny * 4);
    m.ref = tu_malloc(ny * sizeof(double));
    m.tol = tu_malloc(ny * sizeof(double));
    m.fmag = tu_malloc(ny * sizeof(double));
    for (int32_t i = 0; i < n; i++) model_quantize_x(x + (size_t)i * cols, nb, m.xq + (size_t)i * cols, m.xs + (size_t)i * nb);
    double * eb = tu_malloc((size_t)n * nb * sizeof(double));  /* E_b */
    for (int32_t i = 0; i < n; i++)
        for (int32_t b = 0; b < nb; b++) {
            double amax = 0;
            for (int j = 0; j < 32; j++) amax = fmax(amax, fabs((double)x[(size_t)i * cols + 32 * b + j]));
            const double s = m.xs[(size_t)i * nb + b];
            eb[(size_t)i * nb + b] = 0.5 * s + 4 * u * amax + (s < 0x1p-126 ? 0x1p-135 : 0.0);
        }
    for (int32_t o = 0; o < rows; o++) {
        const uint8_t * row = w + (size_t)o * rb;
        for (int32_t i = 0; i < n; i++) {
            const float * xi = x + (size_t)i * cols;
            const int16_t * qi = m.xq + (size_t)i * cols;
            const float * si = m.xs + (size_t)i * nb;
            const size_t k = (size_t)i * rows + o;
            const double y0k = y0 ? y0[k] : 0.0;
            double ref = y0k, qerr = 0, wmag = fabs(y0k), fmag = fabs(y0k), under = 0;
            float lane[4] = {0, 0, 0, 0};
            for (int32_t b = 0; b < nb; b++) {
                const float d = wq_d(dt, row, b);
                int32_t isum[4] = {0, 0, 0, 0};
                double qx = 0;
                for (int j = 0; j < 32; j++) {
                    const int32_t q = wq_int(dt, row, 32 * b + j), xq = qi[32 * b + j];
                    isum[(j % 8) / 2] += q * xq;
                    qx += fabs((double)q * xq);
                    const double wv = (double)d * q, e = eb[(size_t)i * nb + b];
                    ref += wv * (double)xi[32 * b + j];
                    qerr += fabs(wv) * e;
                    wmag += fabs(wv) * (fabs((double)xi[32 * b + j]) + e);
                }
                under += qx + 4;
                const float ds = d * si[b];
                for (int l = 0; l < 4; l++) {
                    const float fi = (float)isum[l];
                    fmag += fabs((double)fi * ds);
#ifdef __wasm_relaxed_simd__
                    lane[l] = fmaf(fi, ds, lane[l]);  /* (the tolerance, not the bits, is checked there) */
#else
                    const float p = fi * ds;
                    lane[l] = lane[l] + p;
#endif
                }
            }
            const float a02 = lane[0] + lane[2], a13 = lane[1] + lane[3];
            const float s = a02 + a13;
            m.y[k] = y0 ? y0[k] + s : s;
            m.ref[k] = ref;
            m.tol[k] = qerr + (nb + 6) * 1.01 * u * wmag + 0x1p-149 * under;
            m.fmag[k] = fmag;
        }
    }
    free(eb);
    return m;
}

static void int16_model_free(int16_model * m) {
    free(m->xq);
    free(m->xs);
    free(m->y);
    free(m->ref);
    free(m->tol);
    free(m->fmag);
}

/* a == b bit for bit, or both NaN (a NaN's payload is not promised). */
static int same_or_nan(const char * what, const float * a, const float * b, size_t count) {
    for (size_t k = 0; k < count; k++) {
        if (isnan(a[k]) && isnan(b[k])) continue;
        if (memcmp(a + k, b + k, 4) != 0)
            return TU_CHECK(0, "%s: element %zu: %.9g vs %.9g (bits %08" PRIx32 " vs %08" PRIx32 ")", what, k, (double)a[k],
                            (double)b[k], bits_of(a[k]), bits_of(b[k]));
    }
    return TU_CHECK(1, "ok");
}

/* got against the model: plain builds bit for bit (NaN where the model is
 * NaN); relaxed builds within the float32 part of the bound. Returns 1 when it holds. */
static int check_int16_model(const char * what, const float * got, const int16_model * m, size_t count) {
#ifdef __wasm_relaxed_simd__
    const int32_t nb_guess = 10;  /* cols <= 320 */
    for (size_t k = 0; k < count; k++) {
        if (isnan(m->y[k]) ? isnan(got[k]) : fabs((double)got[k] - m->y[k]) <= 2.0 * (nb_guess + 6) * 0x1p-24 * m->fmag[k] + 0x1p-140)
            continue;
        return TU_CHECK(0, "%s: y[%zu] = %.9g, the model %.9g", what, k, (double)got[k], (double)m->y[k]);
    }
    return TU_CHECK(1, "ok");
#else
    return same_or_nan(what, got, m->y, count);
#endif
}

/* got against the float64 product over the original x within the bound;
 * the worst |error| / bound goes to *worst. Outputs whose reference is NaN
 * (a row of x holding NaN / Inf) must be NaN. */
static int check_int16_bound(const char * what, const float * got, const int16_model * m, size_t count, double * worst) {
    for (size_t k = 0; k < count; k++) {
        if (!isfinite(m->ref[k]) || isnan(m->y[k])) {
            if (!isnan(got[k])) return TU_CHECK(0, "%s: y[%zu] = %.9g, expected NaN", what, k, (double)got[k]);
            continue;
        }
        const double e = fabs((double)got[k] - m->ref[k]);
        if (!(e <= m->tol[k]))
            return TU_CHECK(0, "%s: y[%zu] = %.9g, float64 %.9g: |error| %.3g > bound %.3g", what, k, (double)got[k],
                            m->ref[k], e, m->tol[k]);
        if (m->tol[k] > 0 && e / m->tol[k] > *worst) *worst = e / m->tol[k];
    }
    return TU_CHECK(1, "ok");
}

/* x for the int16 path: each block of 32 of its own kind (ties of the
 * rounding, zeros, a lone value, tiny and subnormal blocks, very different
 * scales side by side in one row). */
static void fill_x_int16(tu_rng * rng, float * x, int32_t cols, int32_t row) {
    for (int32_t b = 0; b < cols / 32; b++) {
        float * xb = x + 32 * b;
        const int kind = (int)((row * 5 + b * 3 + (int32_t)(tu_rng_u64(rng) % 3)) % 11);
        switch (kind) {
        case 0: case 1: case 2:
            fill_normal(rng, xb, 32, 1.0f);
            break;
        case 3:
            fill_normal(rng, xb, 32, powf(10.0f, tu_rng_uniform(rng, -6.0f, 6.0f)));
            break;
        case 4:
            memset(xb, 0, 32 * 4);
            if (tu_rng_u64(rng) & 1) xb[tu_rng_int(rng, 0, 31)] = -0.0f;
            break;
        case 5:  /* a lone non-zero: its xq is +-32767 */
            memset(xb, 0, 32 * 4);
            xb[tu_rng_int(rng, 0, 31)] = tu_rng_normal(rng) * 3.0f;
            break;
        case 6: {  /* amax 32767 (inv = 1) or 65534 (inv = 0.5): x inv lands on .5 exactly: ties to even */
            const float big = (tu_rng_u64(rng) & 1) ? 32767.0f : 65534.0f;
            for (int j = 0; j < 32; j++) {
                const float h = (float)tu_rng_int(rng, -40, 40) + (big == 32767.0f ? 0.5f : 1.0f);
                xb[j] = big == 32767.0f ? h : 2.0f * h - 1.0f + (j & 1 ? 0.0f : 2.0f);  /* odd integers / 2 */
            }
            xb[tu_rng_int(rng, 0, 31)] = (tu_rng_u64(rng) & 1) ? big : -big;
            xb[(b * 7 + 3) % 32] = big == 32767.0f ? 32766.5f : 65533.0f;  /* (the tie at the top: 32766.5 -> 32766) */
            break;
        }
        case 7:  /* tiny: amax ~1e-36 (32767 / amax overflows float32) */
            fill_normal(rng, xb, 32, 1e-36f);
            break;
        case 8:  /* subnormals only (and one normal below 2^-113 in half of them) */
            for (int j = 0; j < 32; j++) xb[j] = (float)tu_rng_int(rng, -5000, 5000) * 0x1p-149f;
            if (tu_rng_u64(rng) & 1) xb[tu_rng_int(rng, 0, 31)] = 0x1p-120f;
            break;
        case 9:  /* small integers: exact zeros, repeated values */
            for (int j = 0; j < 32; j++) xb[j] = (float)tu_rng_int(rng, -3, 3);
            break;
        default:  /* large */
            fill_normal(rng, xb, 32, 1e18f);
            break;
        }
    }
}

/* One int16 product run every way: the model (bits), the float64 bound,
 * contexts of 1..4 threads (forced pool) and the default threshold, and each
 * x row alone. */
static void run_int16(const char * label, int32_t dt, const uint8_t * w, int32_t rows, int32_t cols, const float * x,
                      int32_t n, const float * y0, int shape, double * worst) {
    const size_t ny = (size_t)n * rows;
    const int32_t flags = SDPA_LINEAR_INT16_ACTIVATIONS | (y0 ? SDPA_LINEAR_ACCUMULATE : 0);
    int16_model m = int16_reference(dt, w, x, y0, n, rows, cols);
    sdpa_tensor wt = tu_tensor2((void *)(uintptr_t)w, dt, rows, cols);
    sdpa_tensor xt = act_tensor((void *)(uintptr_t)x, n, cols, shape);
    float * out[5];
    char what[200];
    for (int c = 0; c < 5; c++) {
        sdpa_ctx * ctx = g_ctx[c < 4 ? c : 3];
        sdpa_ctx_set_dense_parallel_min_macs(ctx, c < 4 ? 0.0 : SDPA_DENSE_PARALLEL_MIN_MACS);
        out[c] = tu_malloc(ny * 4);
        if (y0) memcpy(out[c], y0, ny * 4);
        else for (size_t k = 0; k < ny; k++) out[c][k] = 12345.0f;  /* (finite: an unwritten output is not taken for a NaN) */
        sdpa_tensor ot = act_tensor(out[c], n, rows, shape);
        snprintf(what, sizeof what, "%s: int16 sdpa_linear on %d threads%s", label, sdpa_ctx_threads(ctx),
                 c == 4 ? " (default threshold)" : "");
        tu_dirty_error(ctx);
        const sdpa_status st = sdpa_linear(ctx, &xt, &wt, &ot, flags);
        sdpa_ctx_set_dense_parallel_min_macs(ctx, 0);
        if (!TU_CHECK(st == SDPA_OK, "%s returned %s: %s", what, sdpa_status_code(st), sdpa_ctx_last_error(ctx))) continue;
        TU_CHECK(sdpa_ctx_last_error(ctx)[0] == 0, "%s: last_error not empty after a success", what);
        if (c == 0) {
            check_int16_model(what, out[0], &m, ny);
            check_int16_bound(what, out[0], &m, ny, worst);
        } else {
            same_or_nan(what, out[c], out[0], ny);
        }
    }
    if (n > 1) {
        float * single = tu_malloc(ny * 4);
        int ok = 1;
        for (int32_t i = 0; i < n && ok; i++) {
            sdpa_ctx * ctx = g_ctx[i % 4];
            float * yi = single + (size_t)i * rows;
            if (y0) memcpy(yi, y0 + (size_t)i * rows, (size_t)rows * 4);
            else tu_fill_nan(yi, (size_t)rows);
            sdpa_tensor x1 = act_tensor((void *)(uintptr_t)(x + (size_t)i * cols), 1, cols, i % 3);
            sdpa_tensor o1 = act_tensor(yi, 1, rows, i % 3);
            const sdpa_status st = sdpa_linear(ctx, &x1, &wt, &o1, flags);
            ok = TU_CHECK(st == SDPA_OK, "%s: 1-row int16 call on x row %d returned %s: %s", label, i,
                          sdpa_status_code(st), sdpa_ctx_last_error(ctx));
        }
        if (ok) {
            snprintf(what, sizeof what, "%s: each x row alone vs the %d-row int16 call", label, n);
            same_or_nan(what, single, out[0], ny);
        }
        free(single);
    }
    for (int c = 0; c < 5; c++) free(out[c]);
    int16_model_free(&m);
    g_cases++;
}

/* (a), (b), (c): q8_0 / q4_0, n = 1, 3, 4, 5, 67 x rows, cols 32 .. 320,
 * weight rows 1 .. 37 (1 and 2 side by side, 16-row units and their tails),
 * accumulate 0 and 1, x of rank 1 to 4, weights at any byte offset. */
static void sweep_int16(void) {
    static const int N_LIST[] = {1, 3, 4, 5, 67};
    static const int ROWS[] = {1, 2, 3, 5, 16, 17, 33, 37};
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 8);
    double worst[2] = {0, 0};
    for (int qi = 0; qi < 2; qi++) {
        const int32_t dt = qi ? Q4 : Q8;
        int k = 0;
        for (int ni = 0; ni < COUNT(N_LIST); ni++)
            for (int acc = 0; acc < 2; acc++)
                for (int ri = 0; ri < 4; ri++, k++) {
                    const int32_t n = N_LIST[ni], rows = ROWS[(k * 3 + ni) % COUNT(ROWS)];
                    const int32_t cols = 32 * (1 + (k * 7 + acc) % 10);
                    const int woff = k % 4, shape = (k + ni) % 3;
                    char label[200];
                    snprintf(label, sizeof label, "int16 %s n=%d rows=%d cols=%d accumulate=%d weight offset %d shape %d",
                             dtype_name(dt), n, rows, cols, acc, woff, shape);
                    snprintf(tu_context, sizeof tu_context, "%s", label);
                    const size_t wbytes = ref_row_bytes(dt, cols) * (size_t)rows;
                    uint8_t * wbase = tu_malloc(wbytes + (size_t)woff);
                    uint8_t * w = wbase + woff;
                    fill_weight(&rng, dt, w, rows, cols);
                    float * x = tu_malloc((size_t)n * cols * 4);
                    for (int32_t i = 0; i < n; i++) fill_x_int16(&rng, x + (size_t)i * cols, cols, i + k);
                    float * y0 = NULL;
                    if (acc) {
                        y0 = tu_malloc((size_t)n * rows * 4);
                        fill_normal(&rng, y0, (size_t)n * rows, 2.0f);
                    }
                    run_int16(label, dt, w, rows, cols, x, n, y0, shape, &worst[qi]);
                    free(y0);
                    free(x);
                    free(wbase);
                }
    }
    /* the extremes once: the widest rows at the most x rows */
    for (int qi = 0; qi < 2; qi++) {
        const int32_t dt = qi ? Q4 : Q8, n = 67, rows = 40, cols = 320;
        snprintf(tu_context, sizeof tu_context, "int16 %s n=%d rows=%d cols=%d accumulate=1", dtype_name(dt), n, rows, cols);
        uint8_t * w = tu_malloc(ref_row_bytes(dt, cols) * rows);
        fill_weight(&rng, dt, w, rows, cols);
        float * x = tu_malloc((size_t)n * cols * 4), * y0 = tu_malloc((size_t)n * rows * 4);
        for (int32_t i = 0; i < n; i++) fill_x_int16(&rng, x + (size_t)i * cols, cols, i);
        fill_normal(&rng, y0, (size_t)n * rows, 1.0f);
        run_int16(tu_context, dt, w, rows, cols, x, n, y0, 0, &worst[qi]);
        free(w);
        free(x);
        free(y0);
    }
    printf("  int16 activations: worst |error| / bound %.3f q8_0, %.3f q4_0\n", worst[0], worst[1]);
    tu_context[0] = 0;
}

/* (d) a NaN / +Inf / -Inf in one block of an x row: that row's outputs all
 * NaN (weight rows with d = 0 or all-zero q in that block too, accumulate
 * or not), the other rows exactly as the model says. */
static void test_int16_nonfinite_x(void) {
    static const float BAD[] = {NAN, INFINITY, -INFINITY};
    static const int NS[] = {1, 3, 5, 9};
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 9);
    const int32_t rows = 19, cols = 128;
    double worst = 0;
    for (int qi = 0; qi < 2; qi++)
        for (int ni = 0; ni < COUNT(NS); ni++)
            for (int acc = 0; acc < 2; acc++) {
                const int32_t dt = qi ? Q4 : Q8, n = NS[ni];
                const float bad = BAD[(ni + acc) % 3];
                const int32_t bad_row = n / 2, bad_j = (ni * 37 + acc * 11) % cols;
                char label[200];
                snprintf(label, sizeof label, "int16 %s: x[%d][%d] = %g, n=%d rows=%d cols=%d accumulate=%d", dtype_name(dt),
                         bad_row, bad_j, (double)bad, n, rows, cols, acc);
                snprintf(tu_context, sizeof tu_context, "%s", label);
                const size_t rb = ref_row_bytes(dt, cols), bb = dt == Q8 ? 34 : 18;
                uint8_t * w = tu_malloc(rb * rows);
                fill_weight(&rng, dt, w, rows, cols);
                const uint16_t zero_h = 0;
                memcpy(w + 2 * rb + (size_t)(bad_j / 32) * bb, &zero_h, 2);  /* row 2: d = 0 in the bad block */
                memset(w + 4 * rb, dt == Q8 ? 0 : 0x88, rb);                /* row 4: q all 0 */
                memcpy(w + 4 * rb + (size_t)(bad_j / 32) * bb, &zero_h, 2);  /* (d = 0 there as well) */
                float * x = tu_malloc((size_t)n * cols * 4);
                fill_normal(&rng, x, (size_t)n * cols, 1.0f);
                x[(size_t)bad_row * cols + bad_j] = bad;
                float * y0 = NULL;
                if (acc) {
                    y0 = tu_malloc((size_t)n * rows * 4);
                    fill_normal(&rng, y0, (size_t)n * rows, 1.0f);
                }
                int16_model m = int16_reference(dt, w, x, y0, n, rows, cols);
                for (int32_t i = 0; i < n; i++)
                    for (int32_t o = 0; o < rows; o++) {
                        const float v = m.y[(size_t)i * rows + o];
                        if (i == bad_row ? !isnan(v) : !isfinite(v)) {
                            TU_CHECK(0, "%s: the test's own model at [%d][%d]: %g", label, i, o, (double)v);
                            i = n;
                            break;
                        }
                    }
                free(m.xq); free(m.xs); free(m.y); free(m.ref); free(m.tol); free(m.fmag);
                run_int16(label, dt, w, rows, cols, x, n, y0, ni % 3, &worst);  /* (NaN rows: NaN, via check_int16_bound) */
                free(y0);
                free(x);
                free(w);
            }
    tu_context[0] = 0;
}

/* (e) the scratch: grows on a fresh context's first int16 call (to at least
 * n (2 cols + 4 cols / 32) bytes, the header's figure), not again for the same
 * or a smaller shape, nor for a call refused by a rule; a larger shape grows it.
 * The flag on float32 / float16 weights changes no bit and takes no scratch. */
static void test_int16_scratch(void) {
    snprintf(tu_context, sizeof tu_context, "int16 scratch");
    sdpa_status s = SDPA_E_ARG;
    sdpa_ctx * ctx = sdpa_ctx_create(2, &s);
    if (!TU_CHECK(ctx && s == SDPA_OK, "sdpa_ctx_create(2): %s", sdpa_status_code(s))) return;
    sdpa_ctx_set_dense_parallel_min_macs(ctx, 0);
    tu_rng rng;
    tu_rng_seed(&rng, 96);
    enum { R = 40, C = 256, N = 9 };
    float * x = tu_malloc((size_t)N * 2 * C * 4), * y = tu_malloc((size_t)N * 2 * R * 4), * y2 = tu_malloc((size_t)N * R * 4);
    fill_normal(&rng, x, (size_t)N * 2 * C, 1.0f);
    uint8_t * w[4];
    for (int d = 0; d < 4; d++) {
        w[d] = tu_malloc(ref_row_bytes(DTYPES[d], 2 * C) * R);
        fill_weight(&rng, DTYPES[d], w[d], R, 2 * C);
    }
    /* float32 / float16 weights: the flag is no-op (bits, scratch) */
    for (int d = 0; d < 2; d++)
        for (int n = 1; n <= 5; n += 4) {
            const size_t before = sdpa_ctx_scratch_bytes(ctx);
            sdpa_tensor xt = tu_tensor2(x, F32, n, C), wt = tu_tensor2(w[d], DTYPES[d], R, C);
            sdpa_tensor yt = tu_tensor2(y, F32, n, R), y2t = tu_tensor2(y2, F32, n, R);
            for (int acc = 0; acc < 2; acc++) {
                fill_normal(&rng, y, (size_t)n * R, 1.0f);
                memcpy(y2, y, (size_t)n * R * 4);
                TU_CHECK(sdpa_linear(ctx, &xt, &wt, &yt, acc) == SDPA_OK, "%s n=%d flags %d", dtype_name(DTYPES[d]), n, acc);
                const size_t mid = sdpa_ctx_scratch_bytes(ctx);
                TU_CHECK(sdpa_linear(ctx, &xt, &wt, &y2t, acc | SDPA_LINEAR_INT16_ACTIVATIONS) == SDPA_OK, "%s n=%d flags %d",
                         dtype_name(DTYPES[d]), n, acc | 2);
                TU_CHECK(memcmp(y, y2, (size_t)n * R * 4) == 0, "%s n=%d accumulate=%d: INT16_ACTIVATIONS changed bits",
                         dtype_name(DTYPES[d]), n, acc);
                TU_CHECK(sdpa_ctx_scratch_bytes(ctx) == mid, "%s n=%d: INT16_ACTIVATIONS took scratch (%zu -> %zu)",
                         dtype_name(DTYPES[d]), n, mid, sdpa_ctx_scratch_bytes(ctx));
            }
            if (d == 0) TU_CHECK(sdpa_ctx_scratch_bytes(ctx) == before, "float32 n=%d: scratch %zu -> %zu", n, before, sdpa_ctx_scratch_bytes(ctx));
        }
    /* q8_0 / q4_0 */
    const size_t base = sdpa_ctx_scratch_bytes(ctx);  /* (the float16 prefill's row buffers: 2 threads x 2 rows of 256) */
    const size_t need = (size_t)N * (2 * C + 4 * C / 32);
    sdpa_tensor xt = tu_tensor2(x, F32, N, C), yt = tu_tensor2(y, F32, N, R);
    sdpa_tensor wq8 = tu_tensor2(w[2], Q8, R, C), wq4 = tu_tensor2(w[3], Q4, R, C);
    {   /* refused by a rule: nothing grows */
        sdpa_tensor bad = yt;
        bad.dims[1] = R - 1;
        bad.len = (size_t)N * (R - 1);
        TU_CHECK(sdpa_linear(ctx, &xt, &wq8, &bad, SDPA_LINEAR_INT16_ACTIVATIONS) == SDPA_E_DIMS, "out dims refused");
        TU_CHECK(sdpa_ctx_scratch_bytes(ctx) == base, "a refused int16 call grew the scratch: %zu -> %zu", base,
                 sdpa_ctx_scratch_bytes(ctx));
    }
    TU_CHECK(base < need, "the float16 buffers (%zu bytes) already hold %zu: the growth is not seen", base, need);
    TU_CHECK(sdpa_linear(ctx, &xt, &wq8, &yt, SDPA_LINEAR_INT16_ACTIVATIONS) == SDPA_OK, "first int16 call: %s",
             sdpa_ctx_last_error(ctx));
    const size_t first = sdpa_ctx_scratch_bytes(ctx);
    TU_CHECK(first >= need && first <= need + 256, "first int16 call (n=%d, cols=%d): scratch %zu -> %zu; expected %zu (+ alignment)",
             N, C, base, first, need);
    for (int rep = 0; rep < 3; rep++)
        for (int n = N; n >= 1; n -= 2)
            for (int32_t cols = C; cols >= 32; cols /= 2) {
                /* (a [R, cols] weight: the first cols of every row of w is not one; rows of cols values from the front) */
                sdpa_tensor x2 = tu_tensor2(x, F32, n, cols), y2t = tu_tensor2(y, F32, n, R);
                sdpa_tensor w2 = tu_tensor2(w[2 + (rep & 1)], rep & 1 ? Q4 : Q8, R, cols);
                TU_CHECK(sdpa_linear(ctx, &x2, &w2, &y2t, SDPA_LINEAR_INT16_ACTIVATIONS | (rep == 2)) == SDPA_OK,
                         "n=%d cols=%d: %s", n, cols, sdpa_ctx_last_error(ctx));
                TU_CHECK(sdpa_ctx_scratch_bytes(ctx) == first, "n=%d cols=%d (%s): scratch %zu -> %zu", n, cols,
                         rep & 1 ? "q4_0" : "q8_0", first, sdpa_ctx_scratch_bytes(ctx));
            }
    TU_CHECK(sdpa_linear(ctx, &xt, &wq4, &yt, SDPA_LINEAR_INT16_ACTIVATIONS) == SDPA_OK, "q4_0 after");
    TU_CHECK(sdpa_ctx_scratch_bytes(ctx) == first, "q4_0, the same shape: scratch %zu -> %zu", first, sdpa_ctx_scratch_bytes(ctx));
    /* a larger shape: 2N rows of 2C */
    sdpa_tensor xb = tu_tensor2(x, F32, N, 2 * C), wb = tu_tensor2(w[3], Q4, R, 2 * C), ybt = tu_tensor2(y, F32, N, R);
    TU_CHECK(sdpa_linear(ctx, &xb, &wb, &ybt, SDPA_LINEAR_INT16_ACTIVATIONS) == SDPA_OK, "larger");
    const size_t larger = sdpa_ctx_scratch_bytes(ctx);
    TU_CHECK(larger >= 2 * need && larger <= 2 * need + 256, "cols %d: scratch %zu -> %zu; expected %zu", 2 * C, first, larger, 2 * need);
    for (int d = 0; d < 4; d++) free(w[d]);
    free(x);
    free(y);
    free(y2);
    sdpa_ctx_free(ctx);
    tu_context[0] = 0;
}

static void test_int16(void) {
    sweep_int16();
    test_int16_nonfinite_x();
    test_int16_scratch();
}

/* ---- 9: the k-quants (q4_k, q6_k) ------------------------------------------ */

/* sdpa_linear on q4_k / q6_k weights: n in {1..5, 8, 9, 67, 130}, out features
 * 1..37, 64, 130 (tails of the far-apart decode streams and of the 4-row
 * prefill), cols 256, 512, 768, 1024, accumulate 0 / 1, any alignment, x of
 * rank 1 to 4; held to the double product over the test's dequantization, 1-4
 * threads and each x row alone bit-identical (run_product). */
static void sweep_k_linear(void) {
    static const int N_LIST[] = {1, 2, 3, 4, 5, 8, 9, 67, 130};
    static const int COLS_K[] = {256, 512, 768, 1024};
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 9);
    for (int d = 0; d < COUNT(K_DTYPES); d++) {
        const int32_t dt = K_DTYPES[d];
        int k = 0;
        for (int ni = 0; ni < COUNT(N_LIST); ni++)
            for (int32_t rows = 1; rows <= 39; rows++, k++) {
                const int32_t r = rows == 38 ? 64 : rows == 39 ? 130 : rows;
                const int32_t n = N_LIST[ni];
                if (n >= 67 && r > 8 && r % 5 != 0) continue;  /* (the big n: a few weight shapes) */
                linear_case(&rng, dt, n, r, COLS_K[(k * 5 + ni) % COUNT(COLS_K)], (k / 3 + ni) & 1, k % 4, (k + ni) % 3);
            }
        linear_case(&rng, dt, 130, 130, 1024, 1, 3, 0);
        linear_case(&rng, dt, 1, 130, 1024, 0, 1, 1);
    }
    tu_context[0] = 0;
}

/* NaN / Inf in a k-quant block's float16 scales: a NaN d (q6_k) or dmin
 * (q4_k) in block 1 of row 2 makes that row NaN; an Inf d in block 1 of row 4,
 * with every q there non-zero, every scale 1 (q4_k: mins 0) and x > 0 over the
 * block, makes it +Inf; the other rows are held to the tolerance and
 * bit-identical across threads and x-row counts. */
static void test_k_nonfinite(void) {
    static const int NS[] = {1, 3, 6, 9};
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 10);
    const int32_t rows = 12, cols = 768;
    for (int d = 0; d < COUNT(K_DTYPES); d++)
        for (int ni = 0; ni < COUNT(NS); ni++) {
            const int32_t dt = K_DTYPES[d], n = NS[ni];
            char label[160];
            snprintf(label, sizeof label, "%s NaN / Inf scales: n=%d rows=%d cols=%d", dtype_name(dt), n, rows, cols);
            snprintf(tu_context, sizeof tu_context, "%s", label);
            const size_t rb = ref_row_bytes(dt, cols), bb = dt == K4 ? 144 : 210;
            uint8_t * w = tu_malloc(rb * rows);
            fill_weight(&rng, dt, w, rows, cols);
            const uint16_t nan_h = 0x7e00, inf_h = 0x7c00, zero_h = 0;
            uint8_t * b2 = w + 2 * rb + bb, * b4 = w + 4 * rb + bb;
            if (dt == K4) {
                static const uint8_t ONES[12] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};  /* sc 1, m 0 (get_scale_min_k4) */
                memcpy(b2 + 2, &nan_h, 2);
                memcpy(b4, &inf_h, 2);
                memcpy(b4 + 2, &zero_h, 2);
                memcpy(b4 + 4, ONES, 12);
                memset(b4 + 16, 0xdd, 128);   /* every nibble 13 */
            } else {
                memcpy(b2 + 208, &nan_h, 2);
                memcpy(b4 + 208, &inf_h, 2);
                memset(b4, 0x11, 128);        /* low 4 bits 1 */
                memset(b4 + 128, 0xaa, 64);   /* high 2 bits 2: q = 33, q - 32 = 1 */
                memset(b4 + 192, 1, 16);
            }
            float * x = tu_malloc((size_t)n * cols * 4);
            fill_normal(&rng, x, (size_t)n * cols, 1.0f);
            for (int32_t i = 0; i < n; i++)
                for (int32_t j = 256; j < 512; j++) x[(size_t)i * cols + j] = fabsf(x[(size_t)i * cols + j]) + 0.25f;
            product_ref r = linear_reference(dt, w, x, NULL, n, rows, cols);
            for (int32_t i = 0; i < n; i++)
                TU_CHECK(isnan(r.ref[i * rows + 2]) && r.ref[i * rows + 4] == INFINITY && isfinite(r.ref[i * rows]),
                         "%s: the test's own setup (x row %d)", label, i);
            free(r.ref);
            free(r.mag);
            run_product(label, dt, w, rows, cols, x, n, NULL, ni % 3);
            free(x);
            free(w);
        }
    tu_context[0] = 0;
}

/* sdpa_embed on k-quant tables: exactly ggml's dequantized values (each is
 * exact in float32 here: d sc q and dmin m are, and q4_k's difference is
 * one float32 rounding, as the double reference rounded once); a NaN d (and
 * q4_k: a NaN dmin) row reads NaN. */
static void test_k_embed(void) {
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 11);
    const int32_t vocab = 40;
    static const int DIMS[] = {256, 768};
    for (int d = 0; d < COUNT(K_DTYPES); d++)
        for (int di = 0; di < COUNT(DIMS); di++) {
            const int32_t dt = K_DTYPES[d], dim = DIMS[di], off = (d + di) % 4;
            snprintf(tu_context, sizeof tu_context, "embed %s vocab=%d dim=%d table offset %d", dtype_name(dt), vocab, dim, off);
            const size_t rb = ref_row_bytes(dt, dim);
            uint8_t * base = tu_malloc(rb * vocab + (size_t)off);
            uint8_t * table = base + off;
            fill_weight(&rng, dt, table, vocab, dim);
            const uint16_t nan_h = 0x7e00;
            memcpy(table + 5 * rb + (dt == K4 ? 0 : 208), &nan_h, 2);
            if (dt == K4) memcpy(table + 6 * rb + 144 + 2, &nan_h, 2);  /* a NaN dmin (dim 768: block 1) */
            static const int32_t IDS[] = {0, 39, 5, 6, 3, 5, 17, 1, 2, 38, 10, 0, 24, 31, 6, 9, 12};
            const int32_t nn = COUNT(IDS);
            float * out = tu_malloc((size_t)nn * dim * 4);
            tu_fill_nan(out, (size_t)nn * dim);
            sdpa_tensor tt = tu_tensor2(table, dt, vocab, dim), ot = tu_tensor2(out, F32, nn, dim);
            sdpa_ctx * ctx = g_ctx[di % 4];
            tu_dirty_error(ctx);
            const sdpa_status st = sdpa_embed(ctx, &tt, IDS, nn, &ot);
            if (TU_CHECK(st == SDPA_OK, "sdpa_embed returned %s: %s", sdpa_status_code(st), sdpa_ctx_last_error(ctx))) {
                int bi = -1, bj = -1, nans = 0;
                for (int32_t i = 0; i < nn && bi < 0; i++)
                    for (int32_t j = 0; j < dim && bi < 0; j++) {
                        const double ref = ref_wval(dt, table + (size_t)IDS[i] * rb, j);
                        const float rf = (float)ref, g = out[(size_t)i * dim + j];
                        nans += isnan(ref);
                        if (isnan(ref) ? !isnan(g) : memcmp(&rf, &g, 4) != 0) { bi = i; bj = j; }
                    }
                TU_CHECK(bi < 0, "out[%d][%d] (table row %d) = %.9g, expected %.9g", bi, bj, bi < 0 ? 0 : IDS[bi],
                         bi < 0 ? 0.0 : (double)out[(size_t)bi * dim + bj], bi < 0 ? 0.0 : ref_wval(dt, table + (size_t)IDS[bi] * rb, bj));
                TU_CHECK(nans > 0, "the test's own setup: no NaN row read");
            }
            free(out);
            free(base);
            g_cases++;
        }
    tu_context[0] = 0;
}

/* The k-quants' own rules (the generic ones are each dtype's in section 6):
 * rows not whole blocks of 256, sdpa_quantize to them refused (E_DTYPE),
 * the overlap rule over their block bytes, and INT16_ACTIVATIONS changes no
 * bit on them. Nothing written on a rejection. */
static void bad_k(sdpa_ctx * ctx, int32_t dt) {
    enum { N = 2, R = 4, C = 512 };
    const size_t rb = ref_row_bytes(dt, C), wcap = (size_t)R * C * 4;
    float * x = tu_malloc(N * C * 4), * out = tu_malloc(N * R * 4), * y0 = tu_malloc(N * R * 4);
    uint8_t * w = tu_malloc(wcap);
    memset(w, 0, wcap);
    tu_rng rng;
    tu_rng_seed(&rng, 98);
    fill_normal(&rng, x, N * C, 1.0f);
    fill_weight(&rng, dt, w, R, C);
    sdpa_tensor X = tu_tensor2(x, F32, N, C), W = tu_tensor2(w, dt, R, C), O = tu_tensor2(out, F32, N, R);
    sdpa_tensor a, b, c;
    char d[200], needle[120];
#define KLIN(desc_, want_, needle_, xp, wp, op)                                             \
    do {                                                                                    \
        snprintf(d, sizeof d, "linear (%s weight): %s", dtype_name(dt), desc_);             \
        pattern(out, N * R * 4);                                                             \
        guard(out, N * R * 4); guard(x, N * C * 4); guard(w, wcap);                       \
        expect_reject(ctx, sdpa_linear(ctx, xp, wp, op, 0), want_, needle_, d);            \
    } while (0)
    static const int BAD_COLS[] = {32, 128, 288, 480};
    for (int k = 0; k < COUNT(BAD_COLS); k++) {
        const int32_t cc = BAD_COLS[k];
        a = X; a.dims[1] = cc; a.len = (size_t)N * cc;
        b = W; b.dims[1] = cc; b.len = (size_t)R * cc;
        snprintf(needle, sizeof needle, "weight is %s [%d, %d] with rows of %d values; expected a multiple of 256", dtype_name(dt), R, cc, cc);
        KLIN("rows not whole blocks", SDPA_E_DIMS, needle, &a, &b, &O);
        /* the dims rule comes before the dtype rule */
        a.dtype = F16;
        KLIN("rows not whole blocks + x float16", SDPA_E_DIMS, "expected a multiple of 256", &a, &b, &O);
    }
    a = X; a.dims[1] = 256; a.len = N * 256;
    KLIN("x cols 256 for weight cols 512", SDPA_E_DIMS, "x has dims [2, 256]", &a, &W, &O);
    {   /* out over weight's last 4 bytes (its block bytes, not 4 a value): E_ARG; right after: accepted */
        const size_t wb = rb * R, ob = N * R * 4;
        uint8_t * buf = tu_malloc(wb + ob);
        memcpy(buf, w, wb);
        a = W; a.data = buf;
        b = O; b.data = buf + wb - 4;
        snprintf(d, sizeof d, "linear (%s weight): out overlapping weight's last 4 bytes", dtype_name(dt));
        guard(buf, wb + ob); guard(x, N * C * 4);
        expect_reject(ctx, sdpa_linear(ctx, &X, &a, &b, 0), SDPA_E_ARG, "with weight;", d);
        b.data = buf + wb;
        snprintf(d, sizeof d, "linear (%s weight): out right after weight", dtype_name(dt));
        expect_ok(ctx, sdpa_linear(ctx, &X, &a, &b, 0), d);
        free(buf);
    }
    /* INT16_ACTIVATIONS: no effect on the k-quants (the same bits, accumulate too) */
    fill_normal(&rng, y0, N * R, 1.0f);
    for (int acc = 0; acc < 2; acc++) {
        float * y1 = tu_malloc(N * R * 4), * y2 = tu_malloc(N * R * 4);
        memcpy(y1, y0, N * R * 4);
        memcpy(y2, y0, N * R * 4);
        b = O; b.data = y1;
        c = O; c.data = y2;
        snprintf(d, sizeof d, "linear (%s weight): accumulate %d", dtype_name(dt), acc);
        expect_ok(ctx, sdpa_linear(ctx, &X, &W, &b, acc), d);
        expect_ok(ctx, sdpa_linear(ctx, &X, &W, &c, acc | SDPA_LINEAR_INT16_ACTIVATIONS), d);
        TU_CHECK(memcmp(y1, y2, N * R * 4) == 0, "%s: INT16_ACTIVATIONS changed bits on %s", d, dtype_name(dt));
        free(y1);
        free(y2);
    }
#undef KLIN
    /* sdpa_quantize to a k-quant: E_DTYPE, nothing written */
    {
        float * src = tu_malloc(R * C * 4);
        fill_normal(&rng, src, R * C, 1.0f);
        uint8_t * q = tu_malloc(rb * R);
        pattern(q, rb * R);
        sdpa_tensor st = tu_tensor2(src, F32, R, C), qt = tu_tensor2(q, dt, R, C);
        guard(q, rb * R); guard(src, R * C * 4);
        snprintf(d, sizeof d, "quantize to %s", dtype_name(dt));
        snprintf(needle, sizeof needle, "out has dtype %s (%d)", dtype_name(dt), dt);
        expect_reject(ctx, sdpa_quantize(ctx, &st, &qt), SDPA_E_DTYPE, needle, d);
        qt.dims[1] = 288; qt.len = R * 288; st.dims[1] = 288; st.len = R * 288;
        guard(q, rb * R); guard(src, R * C * 4);
        snprintf(d, sizeof d, "quantize to %s, cols 288", dtype_name(dt));
        expect_reject(ctx, sdpa_quantize(ctx, &st, &qt), SDPA_E_DIMS, "expected a multiple of 256", d);
        free(q);
        free(src);
    }
    /* sdpa_embed on a table whose rows are not whole blocks */
    {
        const int32_t ids[2] = {0, 1};
        float * e = tu_malloc(2 * 288 * 4);
        pattern(e, 2 * 288 * 4);
        sdpa_tensor tt = tu_tensor2(w, dt, 2, 288), et = tu_tensor2(e, F32, 2, 288);
        guard(e, 2 * 288 * 4);
        snprintf(d, sizeof d, "embed (%s table): dim 288", dtype_name(dt));
        snprintf(needle, sizeof needle, "table is %s [2, 288] with rows of 288 values; expected a multiple of 256", dtype_name(dt));
        expect_reject(ctx, sdpa_embed(ctx, &tt, ids, 2, &et), SDPA_E_DIMS, needle, d);
        free(e);
    }
    free(x);
    free(out);
    free(y0);
    free(w);
}

/* The decode path of the k-quants takes no scratch (q4_k's sums of x are made
 * in the kernel); a q4_k prefill takes its sums' scratch on its first call. */
static void test_k_no_alloc(void) {
    sdpa_status s = SDPA_E_ARG;
    sdpa_ctx * ctx = sdpa_ctx_create(2, &s);
    if (!TU_CHECK(ctx && s == SDPA_OK, "sdpa_ctx_create(2): %s", sdpa_status_code(s))) return;
    sdpa_ctx_set_dense_parallel_min_macs(ctx, 0);
    tu_rng rng;
    tu_rng_seed(&rng, 95);
    enum { R = 70, C = 512 };
    float * x = tu_malloc(5 * C * 4), * y = tu_malloc(5 * R * 4), * e = tu_malloc(2 * C * 4);
    fill_normal(&rng, x, 5 * C, 1.0f);
    uint8_t * w[2];
    for (int d = 0; d < 2; d++) {
        w[d] = tu_malloc(ref_row_bytes(K_DTYPES[d], C) * R);
        fill_weight(&rng, K_DTYPES[d], w[d], R, C);
    }
    const int32_t ids[2] = {3, 69};
    const size_t before = sdpa_ctx_scratch_bytes(ctx);
    for (int rep = 0; rep < 3; rep++)
        for (int d = 0; d < 2; d++) {
            sdpa_tensor xt = tensor1(x, F32, C), wt = tu_tensor2(w[d], K_DTYPES[d], R, C), yt = tensor1(y, F32, R);
            TU_CHECK(sdpa_linear(ctx, &xt, &wt, &yt, rep & 1) == SDPA_OK, "decode %s", dtype_name(K_DTYPES[d]));
            sdpa_tensor et = tu_tensor2(e, F32, 2, C);
            TU_CHECK(sdpa_embed(ctx, &wt, ids, 2, &et) == SDPA_OK, "embed %s", dtype_name(K_DTYPES[d]));
        }
    TU_CHECK(sdpa_ctx_scratch_bytes(ctx) == before, "scratch %zu -> %zu bytes over k-quant decode calls", before,
             sdpa_ctx_scratch_bytes(ctx));
    sdpa_tensor x5 = tu_tensor2(x, F32, 5, C), w5 = tu_tensor2(w[0], K4, R, C), y5 = tu_tensor2(y, F32, 5, R);
    TU_CHECK(sdpa_linear(ctx, &x5, &w5, &y5, 0) == SDPA_OK, "q4_k prefill");
    TU_CHECK(sdpa_ctx_scratch_bytes(ctx) >= 5 * (C / 32) * 4, "q4_k prefill: scratch %zu bytes, expected room for the sums",
             sdpa_ctx_scratch_bytes(ctx));
    for (int d = 0; d < 2; d++) free(w[d]);
    free(x);
    free(y);
    free(e);
    sdpa_ctx_free(ctx);
}

static void test_k_quants(void) {
    sweep_k_linear();
    test_k_nonfinite();
    test_k_embed();
    for (int d = 0; d < COUNT(K_DTYPES); d++) bad_k(g_ctx[d % 4], K_DTYPES[d]);
    test_k_no_alloc();
    tu_context[0] = 0;
}

/* ---- 10: q5_0 ----------------------------------------------------------------- */

/* sdpa_linear on q5_0 weights (ggml's block_q5_0, the fifth bits in qh): the
 * shapes of section 1, then NaN / Inf scales; int16 activations as section
 * 8 holds them (bit for bit against the scalar model, within the bound);
 * embed exactly; its rules (rows not whole blocks, quantize refused). */
static void sweep_q5_linear(void) {
    static const int N_LIST[] = {1, 2, 3, 4, 5, 9, 67, 130};
    static const int COLS_Q[] = {32, 64, 96, 128, 160, 224, 256, 288, 320, 576};
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 12);
    int k = 0;
    for (int ni = 0; ni < COUNT(N_LIST); ni++)
        for (int32_t r = 1; r <= 39; r++, k++) {
            const int32_t rows = r == 38 ? 64 : r == 39 ? 130 : r;
            linear_case(&rng, Q5, N_LIST[ni], rows, COLS_Q[(k * 5 + ni) % COUNT(COLS_Q)], (k / 3 + ni) & 1, k % 4, (k + ni) % 3);
        }
    linear_case(&rng, Q5, 130, 130, 576, 1, 3, 0);
    linear_case(&rng, Q5, 1, 130, 576, 0, 1, 1);
    /* a NaN scale in block 1 of row 2, an Inf scale in block 2 of row 4 (every q there non-zero, x > 0) */
    static const int NS[] = {1, 3, 6, 9};
    for (int ni = 0; ni < COUNT(NS); ni++) {
        const int32_t cols = 96, n = NS[ni], rows = 12;
        char label[160];
        snprintf(label, sizeof label, "q5_0 NaN / Inf scales: n=%d rows=%d cols=%d", n, rows, cols);
        snprintf(tu_context, sizeof tu_context, "%s", label);
        const size_t rb = ref_row_bytes(Q5, cols);
        uint8_t * w = tu_malloc(rb * rows);
        fill_weight(&rng, Q5, w, rows, cols);
        const uint16_t nan_h = 0x7e00, inf_h = 0x7c00;
        memcpy(w + 2 * rb + 22, &nan_h, 2);
        memcpy(w + 4 * rb + 44, &inf_h, 2);
        memset(w + 4 * rb + 44 + 2, 0xff, 4);   /* qh: every fifth bit set */
        memset(w + 4 * rb + 44 + 6, 0x33, 16);  /* nibbles 3: q = 19, q - 16 = 3 */
        float * x = tu_malloc((size_t)n * cols * 4);
        fill_normal(&rng, x, (size_t)n * cols, 1.0f);
        for (int32_t i = 0; i < n; i++)
            for (int32_t j = 64; j < 96; j++) x[(size_t)i * cols + j] = fabsf(x[(size_t)i * cols + j]) + 0.25f;
        product_ref pr = linear_reference(Q5, w, x, NULL, n, rows, cols);
        TU_CHECK(isnan(pr.ref[2]) && pr.ref[4] == INFINITY && isfinite(pr.ref[0]), "%s: the test's own setup", label);
        free(pr.ref);
        free(pr.mag);
        run_product(label, Q5, w, rows, cols, x, n, NULL, ni % 3);
        free(x);
        free(w);
    }
    tu_context[0] = 0;
}

static void sweep_q5_int16(void) {
    static const int N_LIST[] = {1, 3, 4, 5, 67};
    static const int ROWS[] = {1, 2, 3, 5, 16, 17, 33, 37};
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 13);
    double worst = 0;
    int k = 0;
    for (int ni = 0; ni < COUNT(N_LIST); ni++)
        for (int acc = 0; acc < 2; acc++)
            for (int ri = 0; ri < 4; ri++, k++) {
                const int32_t n = N_LIST[ni], rows = ROWS[(k * 3 + ni) % COUNT(ROWS)];
                const int32_t cols = 32 * (1 + (k * 7 + acc) % 10);
                const int woff = k % 4, shape = (k + ni) % 3;
                char label[200];
                snprintf(label, sizeof label, "int16 q5_0 n=%d rows=%d cols=%d accumulate=%d weight offset %d shape %d", n, rows,
                         cols, acc, woff, shape);
                snprintf(tu_context, sizeof tu_context, "%s", label);
                uint8_t * wbase = tu_malloc(ref_row_bytes(Q5, cols) * (size_t)rows + (size_t)woff);
                uint8_t * w = wbase + woff;
                fill_weight(&rng, Q5, w, rows, cols);
                float * x = tu_malloc((size_t)n * cols * 4);
                for (int32_t i = 0; i < n; i++) fill_x_int16(&rng, x + (size_t)i * cols, cols, i + k);
                float * y0 = NULL;
                if (acc) {
                    y0 = tu_malloc((size_t)n * rows * 4);
                    fill_normal(&rng, y0, (size_t)n * rows, 2.0f);
                }
                run_int16(label, Q5, w, rows, cols, x, n, y0, shape, &worst);
                free(y0);
                free(x);
                free(wbase);
            }
    printf("  int16 activations: worst |error| / bound %.3f q5_0\n", worst);
    tu_context[0] = 0;
}

static void test_q5_embed_rules(void) {
    tu_rng rng;
    tu_rng_seed(&rng, tu_base_seed(0) * 7919 + 14);
    const int32_t vocab = 40;
    for (int32_t dim = 32; dim <= 576; dim += 544) {
        snprintf(tu_context, sizeof tu_context, "embed q5_0 vocab=%d dim=%d", vocab, dim);
        const size_t rb = ref_row_bytes(Q5, dim);
        uint8_t * base = tu_malloc(rb * vocab + 1), * table = base + 1;
        fill_weight(&rng, Q5, table, vocab, dim);
        const uint16_t nan_h = 0x7e00;
        memcpy(table + 5 * rb, &nan_h, 2);
        static const int32_t IDS[] = {0, 39, 5, 6, 3, 5, 17, 1, 2, 38, 10, 0, 24, 31, 6, 9, 12};
        const int32_t nn = COUNT(IDS);
        float * out = tu_malloc((size_t)nn * dim * 4);
        tu_fill_nan(out, (size_t)nn * dim);
        sdpa_tensor tt = tu_tensor2(table, Q5, vocab, dim), ot = tu_tensor2(out, F32, nn, dim);
        sdpa_ctx * ctx = g_ctx[dim % 4];
        const sdpa_status st = sdpa_embed(ctx, &tt, IDS, nn, &ot);
        if (TU_CHECK(st == SDPA_OK, "sdpa_embed returned %s: %s", sdpa_status_code(st), sdpa_ctx_last_error(ctx))) {
            int bi = -1, bj = -1;
            for (int32_t i = 0; i < nn && bi < 0; i++)
                for (int32_t j = 0; j < dim && bi < 0; j++) {
                    const double ref = ref_wval(Q5, table + (size_t)IDS[i] * rb, j);
                    const float rf = (float)ref, g = out[(size_t)i * dim + j];  /* d * q: exact in float32 */
                    if (isnan(ref) ? !isnan(g) : memcmp(&rf, &g, 4) != 0) { bi = i; bj = j; }
                }
            TU_CHECK(bi < 0, "out[%d][%d] (table row %d) = %.9g, expected %.9g", bi, bj, bi < 0 ? 0 : IDS[bi],
                     bi < 0 ? 0.0 : (double)out[(size_t)bi * dim + bj], bi < 0 ? 0.0 : ref_wval(Q5, table + (size_t)IDS[bi] * rb, bj));
        }
        free(out);
        free(base);
        g_cases++;
    }
    /* rules: rows of 48 (not whole blocks) for linear and embed; quantize to q5_0 refused; nothing written */
    sdpa_ctx * ctx = g_ctx[1];
    enum { N = 2, R = 4 };
    float * x = tu_malloc(N * 64 * 4), * out = tu_malloc(N * 64 * 4);
    uint8_t * w = tu_malloc(R * 64 * 4);
    fill_normal(&rng, x, N * 64, 1.0f);
    fill_weight(&rng, Q5, w, R, 64);
    sdpa_tensor X = tu_tensor2(x, F32, N, 48), W = tu_tensor2(w, Q5, R, 48), O = tu_tensor2(out, F32, N, R);
    pattern(out, N * 64 * 4);
    guard(out, N * 64 * 4); guard(w, R * 64 * 4);
    expect_reject(ctx, sdpa_linear(ctx, &X, &W, &O, 0), SDPA_E_DIMS, "weight is q5_0 [4, 48] with rows of 48 values; expected a multiple of 32",
                  "linear (q5_0 weight): cols 48");
    guard(out, N * 64 * 4);
    expect_reject(ctx, sdpa_linear(ctx, &X, &W, &O, SDPA_LINEAR_INT16_ACTIVATIONS), SDPA_E_DIMS, "expected a multiple of 32",
                  "linear (q5_0 weight, int16): cols 48");
    const int32_t ids[2] = {0, 1};
    sdpa_tensor E = tu_tensor2(out, F32, 2, 48);
    guard(out, N * 64 * 4);
    expect_reject(ctx, sdpa_embed(ctx, &W, ids, 2, &E), SDPA_E_DIMS, "table is q5_0 [4, 48]", "embed (q5_0 table): dim 48");
    sdpa_tensor S = tu_tensor2(x, F32, 2, 64), Q = tu_tensor2(w, Q5, 2, 64);
    guard(w, R * 64 * 4);
    expect_reject(ctx, sdpa_quantize(ctx, &S, &Q), SDPA_E_DTYPE, "out has dtype q5_0 (10)", "quantize to q5_0");
    /* and a valid call after */
    sdpa_tensor X2 = tu_tensor2(x, F32, N, 64), W2 = tu_tensor2(w, Q5, R, 64);
    expect_ok(ctx, sdpa_linear(ctx, &X2, &W2, &O, 0), "linear (q5_0) after rejections");
    free(x);
    free(out);
    free(w);
    tu_context[0] = 0;
}

static void test_q5(void) {
    sweep_q5_linear();
    sweep_q5_int16();
    test_q5_embed_rules();
}

int main(void) {
    const double t0 = tu_seconds();
    for (int i = 0; i < 4; i++) {
        sdpa_status s = SDPA_E_ARG;
        g_ctx[i] = sdpa_ctx_create(i + 1, &s);
        if (!g_ctx[i] || s != SDPA_OK) {
            printf("FATAL: sdpa_ctx_create(%d) failed (%s)\n", i + 1, sdpa_status_code(s));
            return 1;
        }
        /* natively each context runs the threads asked for (the bit-identity
         * checks over fewer would prove less); the wasm build may get fewer
         * from its pthread pool, which is only noted */
#ifndef __EMSCRIPTEN__
        TU_CHECK(sdpa_ctx_threads(g_ctx[i]) == i + 1, "context of %d threads runs %d", i + 1, sdpa_ctx_threads(g_ctx[i]));
#endif
        if (sdpa_ctx_threads(g_ctx[i]) != i + 1)
            printf("  note: sdpa_ctx_create(%d) runs %d threads here\n", i + 1, sdpa_ctx_threads(g_ctx[i]));
        sdpa_ctx_set_dense_parallel_min_macs(g_ctx[i], 0);
    }

    struct {
        const char * name;
        long cases;
        double secs;
    } sections[16];
    int ns = 0;
#define SECTION(label_, call)                 \
    do {                                      \
        const long c0 = g_cases;              \
        const double s0 = tu_seconds();       \
        call;                                 \
        sections[ns].name = label_;           \
        sections[ns].cases = g_cases - c0;    \
        sections[ns].secs = tu_seconds() - s0; \
        ns++;                                 \
    } while (0)

    SECTION("row bytes", test_row_bytes());
    SECTION("linear", sweep_linear());
    SECTION("non-finite", test_nonfinite_weights());
    SECTION("quantize", test_quantize());
    SECTION("rms_norm", test_rms_norm());
    SECTION("swiglu", test_swiglu());
    SECTION("embed", test_embed());
    SECTION("bad input", test_bad_input());
    SECTION("no allocation", test_no_alloc());
    SECTION("int16 x", test_int16());
    SECTION("k-quants", test_k_quants());
    SECTION("q5_0", test_q5());

    for (int i = 0; i < ns; i++)
        printf("  %-14s %5ld cases  %6.2f s\n", sections[i].name, sections[i].cases, sections[i].secs);
    printf("  total %.2f s\n", tu_seconds() - t0);

    for (int i = 0; i < 4; i++) sdpa_ctx_free(g_ctx[i]);
    return tu_summary("test_dense");
}
