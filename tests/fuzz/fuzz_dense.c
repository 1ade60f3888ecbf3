/*
 * fuzz_dense.c: libFuzzer target over the dense calls (include/sdpa_dense.h).
 *
 * The input picks a call (linear, rms_norm, swiglu, embed, quantize), its
 * tensors' dtypes (weight dtypes, and others no call takes), ranks, dims and
 * claimed lengths (sometimes not the product of the dims), whether out
 * overlaps an input, linear's flags (0..3: ACCUMULATE, INT16_ACTIVATIONS,
 * both; rarely 7, an invalid bit) / eps / ids, and the bytes of the weights
 * and activations. Every choice of shape is read first, then the tensors'
 * contents: the input's bytes while they last, then a generator seeded by the
 * whole input (without it a short input could not make a q8_0 linear, whose
 * x and weight take hundreds of bytes: 60 s from an empty corpus reached none).
 * Every buffer is allocated with exactly the bytes its descriptor claims, so
 * ASan sees any access outside what a call was told.
 *
 * Oracles (abort() on violation):
 *   - the status is OK or one of the rule codes (E_ARG, E_RANK, E_DIMS, E_DTYPE);
 *   - a failure writes no byte of out and leaves a message;
 *   - a linear that succeeds equals a float64 product over the dequantized
 *     weights (ggml's layouts, decoded here: q4_k / q6_k too, whose |w| in
 *     the bound is q4_k's |d sc q| + |dmin m|) and the original x within float32
 *     rounding, 1e-5 (|y0| + sum_j |w_j x_j|) + 1e-30, where every value is
 *     finite (over the dims the call was given, which need not be the ones
 *     the input first asked for); and is bit-identical on 1 and 3 threads;
 *   - with SDPA_LINEAR_INT16_ACTIVATIONS and a q8_0 / q4_0 / q5_0 weight, x is
 *     quantized per row and block of 32 (s_b = amax_b / 32767, xq = x / s_b
 *     rounded to an int16), so each x value is off by at most
 *     E_b = s_b / 2 + 4 * 2^-24 amax_b (the rounding to an integer, plus
 *     float32's rounding of 32767 / amax, of x times it and of s_b); the
 *     tolerance widens by sum_j |w_j| E_b(j) (and 1e-5 of that for the
 *     float32 sums). (x here is multiples of 1/256 below 4: no block is tiny
 *     enough for s_b or d * s_b to underflow.)
 *
 * Build: CMake with -DSDPA_FUZZ=ON builds it next to fuzz_sdpa.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdpa_dense.h"

static sdpa_ctx * g_ctx1, * g_ctx3;

#define CHECK(cond, ...)                                        \
    do {                                                        \
        if (!(cond)) {                                          \
            fprintf(stderr, "fuzz_dense: " __VA_ARGS__);        \
            fprintf(stderr, "\n");                              \
            abort();                                            \
        }                                                       \
    } while (0)

typedef struct reader { const uint8_t * p; size_t n; uint64_t rng; } reader;
static uint32_t take(reader * r, uint32_t mod) {
    uint32_t v = 0;
    for (int i = 0; i < 2 && r->n; i++, r->p++, r->n--) v = v << 8 | *r->p;
    return mod ? v % mod : v;
}
/* Tensor contents: the input's bytes while they last, then a generator seeded
 * by the whole input (so that a short input still makes whole weights and
 * activations: a q8_0 linear needs hundreds of bytes of them). */
static uint32_t take_data(reader * r, uint32_t mod) {
    if (r->n) return take(r, mod);
    uint64_t z = (r->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return mod ? (uint32_t)(z % mod) : (uint32_t)z;
}

static const int32_t DTYPES[] = { SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT16, SDPA_DTYPE_Q8_0, SDPA_DTYPE_Q4_0,
                                  SDPA_DTYPE_FLOAT32, SDPA_DTYPE_BOOL, SDPA_DTYPE_INT8, 99,
                                  SDPA_DTYPE_Q4_K, SDPA_DTYPE_Q6_K, SDPA_DTYPE_Q5_0 };
#define N_DTYPES ((uint32_t)(sizeof DTYPES / sizeof DTYPES[0]))
static int is_k(int32_t dt) { return dt == SDPA_DTYPE_Q4_K || dt == SDPA_DTYPE_Q6_K; }
static int is_q32(int32_t dt) { return dt == SDPA_DTYPE_Q8_0 || dt == SDPA_DTYPE_Q4_0 || dt == SDPA_DTYPE_Q5_0; }

static size_t bytes_of(int32_t dtype, size_t len) {
    switch (dtype) {
    case SDPA_DTYPE_Q8_0: return (len + 31) / 32 * 34;
    case SDPA_DTYPE_Q4_0: return (len + 31) / 32 * 18;
    case SDPA_DTYPE_Q5_0: return (len + 31) / 32 * 22;
    case SDPA_DTYPE_Q4_K: return (len + 255) / 256 * 144;
    case SDPA_DTYPE_Q6_K: return (len + 255) / 256 * 210;
    case SDPA_DTYPE_FLOAT16: return len * 2;
    case SDPA_DTYPE_BOOL: case SDPA_DTYPE_INT8: return len;
    default: return len * 4;
    }
}

static float half(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

/* Element j of row r of a float32 / float16 / q8_0 / q4_0 / q5_0 weight of `cols`
 * (q5_0: ggml's block_q5_0, d, a little-endian uint32 of fifth bits, q4_0's nibbles; d (q - 16)). */
static double weight_at1(int32_t dtype, const uint8_t * w, int32_t cols, int32_t r, int32_t j) {
    if (dtype == SDPA_DTYPE_FLOAT32) { float f; memcpy(&f, w + ((size_t)r * cols + j) * 4, 4); return f; }
    if (dtype == SDPA_DTYPE_FLOAT16) { uint16_t h; memcpy(&h, w + ((size_t)r * cols + j) * 2, 2); return half(h); }
    if (dtype == SDPA_DTYPE_Q5_0) {
        const uint8_t * b = w + (size_t)r * (cols / 32) * 22 + (size_t)(j / 32) * 22;
        uint16_t h; memcpy(&h, b, 2);
        const uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
        const int k = j % 32, low = k < 16 ? b[6 + k] & 15 : b[6 + k - 16] >> 4;
        return (double)half(h) * ((low | (int)((qh >> k) & 1) << 4) - 16);
    }
    const size_t bb = dtype == SDPA_DTYPE_Q8_0 ? 34 : 18;
    const uint8_t * b = w + (size_t)r * (cols / 32) * bb + (size_t)(j / 32) * bb;
    uint16_t h; memcpy(&h, b, 2);
    const int k = j % 32;
    if (dtype == SDPA_DTYPE_Q8_0) return (double)half(h) * (int8_t)b[2 + k];
    return (double)half(h) * ((k < 16 ? b[2 + k] & 15 : b[2 + k - 16] >> 4) - 8);
}

/* The k-quants' element j of a block (ggml's block_q4_K / block_q6_K and
 * dequantize_row_q4_K / _q6_K); *mag: |d sc q| + |dmin m| (q4_k's two terms). */
static double k_value(int32_t dtype, const uint8_t * b, int j, double * mag) {
    if (dtype == SDPA_DTYPE_Q4_K) {
        uint16_t hd, hm;
        memcpy(&hd, b, 2);
        memcpy(&hm, b + 2, 2);
        const int s = j / 32;
        const uint8_t * q = b + 4;
        const int sc = s < 4 ? q[s] & 63 : (q[s + 4] & 0xF) | ((q[s - 4] >> 6) << 4);
        const int m = s < 4 ? q[s + 4] & 63 : (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
        const uint8_t byte = b[16 + 32 * (j / 64) + j % 32];
        const int v = j % 64 < 32 ? byte & 15 : byte >> 4;
        const double a = (double)half(hd) * sc * v, c = (double)half(hm) * m;
        *mag = fabs(a) + fabs(c);
        return a - c;
    }
    uint16_t hd;
    memcpy(&hd, b + 208, 2);
    const int n = j / 128, l = j % 32, k = (j % 128) / 32;
    const uint8_t lb = b[64 * n + l + 32 * (k & 1)];
    const int v = ((k < 2 ? lb & 15 : lb >> 4) | ((b[128 + 32 * n + l] >> (2 * k)) & 3) << 4) - 32;
    const double a = (double)half(hd) * (int8_t)b[192 + j / 16] * v;
    *mag = fabs(a);
    return a;
}

/* Element j of row r of a weight of `cols` (independent of src/dense); *mag its magnitude for the tolerance. */
static double weight_at(int32_t dtype, const uint8_t * w, int32_t cols, int32_t r, int32_t j, double * mag) {
    if (is_k(dtype)) {
        const size_t bb = dtype == SDPA_DTYPE_Q4_K ? 144 : 210;
        return k_value(dtype, w + (size_t)r * (cols / 256) * bb + (size_t)(j / 256) * bb, j % 256, mag);
    }
    const double v = weight_at1(dtype, w, cols, r, j);
    *mag = fabs(v);
    return v;
}
/* A tensor of the input's choosing: dims (rank 0..5, each 1..40 or 0 / -1 rarely), a claimed len;
 * its buffer allocated, filled later (fill): every choice of shape is read first. */
static sdpa_tensor make(reader * r, int32_t dtype, int want_rank, const int32_t * want) {
    sdpa_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    const uint32_t shape = take(r, 16);
    t.rank = shape == 0 ? (int32_t)take(r, 6) : want_rank;
    size_t len = 1;
    for (int i = 0; i < t.rank && i < 4; i++) {
        const uint32_t c = take(r, 32);
        t.dims[i] = c == 0 ? -1 : c == 1 ? 0 : (want && i < want_rank && c < 24) ? want[i] : (int32_t)(c % 40 + 1);
        len *= t.dims[i] > 0 ? (size_t)t.dims[i] : 1;
    }
    if (take(r, 16) == 0) len += take(r, 3) + 1;  /* a length that is not the product */
    t.len = len;
    const size_t bytes = bytes_of(dtype, len);
    t.data = malloc(bytes ? bytes : 1);
    return t;
}

static void fill(reader * r, sdpa_tensor * t) {
    uint8_t * p = t->data;
    const size_t bytes = bytes_of(t->dtype, t->len);
    if (t->dtype == SDPA_DTYPE_FLOAT32) {  /* finite values: tame the bytes */
        for (size_t i = 0; i < t->len; i++) ((float *)p)[i] = ((int)take_data(r, 2001) - 1000) / 256.0f;
    } else {
        for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)take_data(r, 256);
    }
}

static int known_status(sdpa_status s) {
    return s == SDPA_OK || s == SDPA_E_ARG || s == SDPA_E_RANK || s == SDPA_E_DIMS || s == SDPA_E_DTYPE;
}

int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (!g_ctx1) {
        sdpa_status st;
        g_ctx1 = sdpa_ctx_create(1, &st);
        g_ctx3 = sdpa_ctx_create(3, &st);
        sdpa_ctx_set_dense_parallel_min_macs(g_ctx3, 0);
    }
    reader r = { data, size, 0x2545F4914F6CDD1Dull };
    for (size_t i = 0; i < size; i++) r.rng = (r.rng ^ data[i]) * 0x100000001B3ull;
    const uint32_t op = take(&r, 5);
    const int32_t wdt = DTYPES[take(&r, N_DTYPES)];
    const int32_t n = (int32_t)take(&r, 6) + 1, rows = (int32_t)take(&r, 37) + 1;
    const int32_t cols = is_k(wdt) ? 256 * ((int32_t)take(&r, 2) + 1)
                         : is_q32(wdt) ? 32 * ((int32_t)take(&r, 4) + 1) : (int32_t)take(&r, 70) + 1;
    const int32_t xd[2] = { n, cols }, wd[2] = { rows, cols }, od[2] = { n, rows }, vd[1] = { cols };
    const int32_t act = take(&r, 8) == 0 ? DTYPES[take(&r, N_DTYPES)] : SDPA_DTYPE_FLOAT32;
    sdpa_tensor x = make(&r, act, 2, xd), w, out, aux;
    memset(&aux, 0, sizeof aux);
    switch (op) {
    case 0: w = make(&r, wdt, 2, wd); out = make(&r, SDPA_DTYPE_FLOAT32, 2, od); break;
    case 1: w = make(&r, SDPA_DTYPE_FLOAT32, 1, vd); out = make(&r, SDPA_DTYPE_FLOAT32, 2, xd); break;
    case 2: w = make(&r, SDPA_DTYPE_FLOAT32, 2, xd); out = make(&r, SDPA_DTYPE_FLOAT32, 2, xd); break;
    case 3: w = make(&r, wdt, 2, wd); out = make(&r, SDPA_DTYPE_FLOAT32, 2, (int32_t[]){ n, cols }); break;
    default: w = make(&r, SDPA_DTYPE_FLOAT32, 2, wd); out = make(&r, wdt, 2, wd); break;  /* quantize(w -> out) */
    }
    /* out on an input's memory now and then (the call must refuse it, or take it in place where allowed) */
    sdpa_tensor * out_t = &out;
    sdpa_tensor aliased;
    if (take(&r, 12) == 0) {
        aliased = out;
        aliased.data = op == 3 || op == 4 ? w.data : x.data;
        if (bytes_of(aliased.dtype, aliased.len) > bytes_of(op == 3 || op == 4 ? w.dtype : x.dtype, op == 3 || op == 4 ? w.len : x.len))
            aliased.len = 0;  /* (keep the claim inside the buffer: a refusal is what is fuzzed, not a lie ASan would see) */
        out_t = &aliased;
    }
    int32_t ids[8];
    const int32_t n_ids = (int32_t)take(&r, 9);
    for (int i = 0; i < 8; i++) ids[i] = (int32_t)take(&r, 45) - 2;
    const int32_t acc = take(&r, 16) == 0 ? 7 : (int32_t)take(&r, 4);  /* linear's flags */
    const float eps = take(&r, 16) == 0 ? NAN : 1e-5f;
    fill(&r, &x);
    fill(&r, &w);
    fill(&r, &out);

    const size_t out_bytes = bytes_of(out_t->dtype, out_t->len);
    uint8_t * before = malloc(out_bytes ? out_bytes : 1);
    if (out_t->data) memcpy(before, out_t->data, out_bytes);
    sdpa_status s;
    switch (op) {
    case 0: s = sdpa_linear(g_ctx1, &x, &w, out_t, acc); break;
    case 1: s = sdpa_rms_norm(g_ctx1, &x, &w, eps, out_t); break;
    case 2: s = sdpa_swiglu(g_ctx1, &x, &w, out_t); break;
    case 3: s = sdpa_embed(g_ctx1, &w, ids, n_ids, out_t); break;
    default: s = sdpa_quantize(g_ctx1, &w, out_t); break;
    }
    CHECK(known_status(s), "op %u: status %d", op, (int)s);
    if (s != SDPA_OK) {
        CHECK(memcmp(before, out_t->data, out_bytes) == 0, "op %u: a failed call (%s) wrote out", op, sdpa_status_code(s));
        CHECK(sdpa_ctx_last_error(g_ctx1)[0] != '\0', "op %u: a failure without a message", op);
    } else if (op == 0) {
        /* the float64 product, then the same call on 3 threads (the pool at any size);
         * over the dims the call took (make may pick others than asked for, and
         * they may still agree: x [32, 32] with weight [32, 32] for cols 8) */
        const int32_t rows = w.dims[0], cols = w.dims[1];
        const int32_t nr = (int32_t)(x.len / (size_t)cols);
        float * y3 = malloc(out_bytes);
        memcpy(y3, before, out_bytes);
        sdpa_tensor o3 = *out_t;
        o3.data = y3;
        CHECK(sdpa_linear(g_ctx3, &x, &w, &o3, acc) == SDPA_OK, "3 threads refused what 1 took");
        CHECK(memcmp(y3, out_t->data, out_bytes) == 0, "1 and 3 threads differ");
        free(y3);
        for (int32_t i = 0; i < nr; i++)
            for (int32_t o = 0; o < rows; o++) {
                const float * xi = (const float *)x.data + (size_t)i * cols;
                const int int16_x = (acc & SDPA_LINEAR_INT16_ACTIVATIONS) && is_q32(wdt);
                double ref = (acc & SDPA_LINEAR_ACCUMULATE) ? ((const float *)before)[(size_t)i * rows + o] : 0.0, mag = fabs(ref);
                double qerr = 0, eb = 0;  /* int16: sum_j |w_j| E_b(j); E_b of the current block */
                for (int32_t j = 0; j < cols; j++) {
                    if (int16_x && j % 32 == 0) {
                        double amax = 0;
                        for (int k = 0; k < 32; k++) amax = fmax(amax, fabs((double)xi[j + k]));
                        eb = 0.5 * (amax / 32767.0) * (1 + 0x1p-23) + 4 * 0x1p-24 * amax;
                    }
                    double wm;
                    const double wv = weight_at(wdt, w.data, cols, o, j, &wm), p = wv * xi[j];
                    ref += p;
                    mag += wm * fabs((double)xi[j]);
                    qerr += fabs(wv) * eb;
                }
                const double got = ((const float *)out_t->data)[(size_t)i * rows + o];
                if (!isfinite(mag) || mag > 1e30 || !isfinite(qerr)) continue;
                CHECK(fabs(got - ref) <= 1e-5 * (mag + qerr) + qerr + 1e-30, "linear dtype %d flags %d row %d out %d: %g, float64 %g (bound %g)",
                      wdt, acc, i, o, got, ref, 1e-5 * (mag + qerr) + qerr + 1e-30);
            }
    }
    free(before);
    free(x.data);
    free(w.data);
    free(out.data);
    return 0;
}
