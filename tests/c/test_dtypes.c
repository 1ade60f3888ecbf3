/*
 * test_dtypes.c: float16 and int8 KV caches (CONTRACT.md section 3, "Cache
 * dtypes"), against independent implementations written here:
 *
 * - float16: every one of the 65536 bit patterns decodes to the value the
 *   IEEE formula gives (computed in double with ldexp); encoding a float32
 *   picks the nearest half, ties to the even mantissa, overflow to Inf (checked
 *   against the decoded neighbours in double) at every midpoint between
 *   consecutive halves, next to it, at the subnormal and overflow edges and
 *   for random values; NaN stays NaN.
 * - int8: ExecuTorch's choose_qparams_per_token_asymmetric + quantize_per_token,
 *   re-derived here step by step in float32 (a tie-to-even of our own), on
 *   ties, all-zero rows, constant rows, rows of one sign, +-large values and
 *   non-finite ones; what the cache stores (sdpa_kv_cache_read_records) must equal it.
 * - int4: the contract's group formula re-derived here (naive_int4_quantize:
 *   float16 offset and scale found by search over every half), on groups that
 *   are constant, tiny, wide, short (D % 32), non-finite or beyond float16;
 *   records, read() values, the half-step bound and [min, max] checked.
 * - K and V of different dtypes (every pair of float32, float16, int8, int4).
 * - attention over a float16 / int8 cache equals the float64 reference fed the
 *   dequantized cache (sdpa_kv_cache_read) within the float32 tolerance, for
 *   decode, prefill, masks, GQA, split-KV and D with SIMD tails; 1 and 2
 *   threads give identical bits. The error against the original float32 K/V
 *   is printed (it is the storage's, not the kernel's).
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

/* the library's codecs (src/cache/kv_format.h), tested here as a unit */
uint16_t sdpa_f32_to_f16(float x);
float sdpa_f16_to_f32(uint16_t h);

static sdpa_ctx * g_ctx1, * g_ctx2;

/* ---- float16 ----------------------------------------------------------- */

static double half_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -v : v;
}

static void test_f16_decode(void) {
    long bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const double want = half_value((uint16_t)h);
        const float got = sdpa_f16_to_f32((uint16_t)h);
        if (isnan(want) ? !isnan(got) : ((double)got != want || !signbit(got) != !signbit(want))) {
            if (!bad++) TU_CHECK(0, "f16 0x%04x decodes to %.9g, expected %.9g", h, (double)got, want);
        }
    }
    TU_CHECK(bad == 0, "%ld of 65536 halves decode wrong", bad);
}

/* Is h the correctly rounded half of x (nearest, ties to even, |x| >= 65520 -> Inf)? */
static int is_rounded(float x, uint16_t h) {
    if (isnan(x)) return ((h >> 10) & 31) == 31 && (h & 1023) != 0;
    const double ax = fabs((double)x);
    if ((h >> 15) != (signbit(x) ? 1 : 0) && ax != 0.0) return 0;
    const uint16_t mag = h & 0x7fff;
    if (ax >= 65520.0) return mag == 0x7c00;
    if (mag >= 0x7c00) return 0;
    const double v = half_value(mag), up = half_value((uint16_t)(mag + 1));
    const double down = mag ? half_value((uint16_t)(mag - 1)) : -1.0;
    const double e = fabs(v - ax);
    if (e > fabs(up - ax)) return 0;
    if (mag && e > fabs(down - ax)) return 0;
    if (e == fabs(up - ax) && (mag & 1)) return 0;               /* a tie goes to the even one */
    if (mag && e == fabs(down - ax) && (mag & 1)) return 0;
    return 1;
}

/* The tests' own codec (naive_ref.c, used by the fuzzer's cache model) gives
 * the value of the half that sdpa_f32_to_f16 picks (checked nearest-even by
 * is_rounded): counted in `bad` like the library's own roundings. */
static long naive_differs(float x, uint16_t h) {
    return !isnan(x) && (double)naive_f16_value(x) != half_value(h);
}

static void test_f16_encode(void) {
    long bad = 0, n = 0;
    float probes[8];
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const double a = half_value((uint16_t)h), b = half_value((uint16_t)(h + 1));
        const float mid = (float)((a + b) / 2);  /* exact in float32: halves have 11-bit mantissas */
        probes[0] = mid;
        probes[1] = nextafterf(mid, 0.0f);
        probes[2] = nextafterf(mid, INFINITY);
        probes[3] = (float)a;
        probes[4] = -mid;
        probes[5] = -nextafterf(mid, INFINITY);
        for (int i = 0; i < 6; i++, n++) {
            const uint16_t got = sdpa_f32_to_f16(probes[i]);
            bad += naive_differs(probes[i], got);
            if (!is_rounded(probes[i], got) && !bad++)
                TU_CHECK(0, "f16(%.9g) = 0x%04x is not the nearest-even half", (double)probes[i], got);
        }
    }
    const float edges[] = { 0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e10f, -1e10f, INFINITY, -INFINITY, FLT_MAX,
                            FLT_MIN, 1e-8f, 2.9802322e-8f /* 2^-25 */, 2.9802326e-8f, 5.9604645e-8f /* 2^-24 */, 6.1035156e-5f };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++, n++) {
        const uint16_t got = sdpa_f32_to_f16(edges[i]);
        bad += naive_differs(edges[i], got);
        if (!is_rounded(edges[i], got) && !bad++) TU_CHECK(0, "f16(%.9g) = 0x%04x", (double)edges[i], got);
    }
    TU_CHECK((sdpa_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (sdpa_f32_to_f16(NAN) & 0x3ff), "NaN stays NaN");
    tu_rng rng;
    tu_rng_seed(&rng, 5);
    for (int i = 0; i < 200000; i++, n++) {
        uint32_t u = (uint32_t)tu_rng_u64(&rng);
        float x;
        memcpy(&x, &u, 4);
        if (isnan(x)) continue;
        const uint16_t got = sdpa_f32_to_f16(x);
        bad += naive_differs(x, got);
        if (!is_rounded(x, got) && !bad++) TU_CHECK(0, "f16(%.9g) = 0x%04x", (double)x, got);
    }
    TU_CHECK(isnan(naive_f16_value(NAN)), "the tests' codec: NaN stays NaN");
    TU_CHECK(bad == 0, "%ld of %ld float32 -> float16 roundings wrong (the library's or the tests' codec)", bad, n);
}

/* ---- int8 (ExecuTorch's per-token asymmetric quantization) --------------- */

typedef struct qrow { int8_t q[64]; float scale; int8_t zp; } qrow;

static void test_int8_rows(void) {
    enum { D = 24 };
    sdpa_kv_cache * c = NULL;
    sdpa_status st = sdpa_kv_cache_create(g_ctx1, 1, 64, 1, D, SDPA_DTYPE_INT8, &c);
    if (!TU_CHECK(st == SDPA_OK, "int8 cache: %s", sdpa_status_code(st))) return;
    TU_CHECK(sdpa_kv_cache_dtype(c) == SDPA_DTYPE_INT8, "dtype");
    float rows[40][D];
    tu_rng rng;
    tu_rng_seed(&rng, 9);
    int nr = 0;
    for (int d = 0; d < D; d++) rows[nr][d] = 0.0f;                                 /* all zero */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = 0.75f;                                /* constant > 0 */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = -3.0f;                                /* constant < 0 */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = (float)(d + 1);                       /* one sign */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = -(float)(d * d) * 0.01f;              /* one sign, negative */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = d % 2 ? 3e38f : -3e38f;               /* +-large */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = (d - 12) * (255.0f / 24.0f) / 10.0f;  /* near ties */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = (float)(d - 8) * 0.5f;                /* x * inv exactly .5 */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = d == 3 ? NAN : d == 5 ? INFINITY : d == 7 ? -INFINITY : (float)d - 10.0f;
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = d == 0 ? 1e-30f : 0.0f;              /* tiny: scale = FLT_EPSILON */
    nr++;
    while (nr < 40) {
        const float amp = (float)pow(10.0, tu_rng_uniform(&rng, -6.0f, 6.0f));
        for (int d = 0; d < D; d++) rows[nr][d] = tu_rng_uniform(&rng, -amp, amp * tu_rng_uniform(&rng, 0.0f, 2.0f));
        nr++;
    }
    long bad = 0;
    for (int i = 0; i < nr; i++) {
        sdpa_tensor t = tu_tensor4(rows[i], SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
        TU_CHECK(sdpa_kv_cache_update(g_ctx1, c, &t, &t, i) == SDPA_OK, "write row %d", i);
        uint8_t rec[D + 5];  /* the record: D int8, the float32 scale, the int8 zero point */
        TU_CHECK(sdpa_kv_cache_record_bytes(c, 0) == sizeof rec, "int8 record bytes");
        TU_CHECK(sdpa_kv_cache_read_records(g_ctx1, c, i, 1, 0, rec, sizeof rec) == SDPA_OK, "read_records: %s",
                 sdpa_ctx_last_error(g_ctx1));
        int8_t q[D], zp = (int8_t)rec[D + 4];
        float scale;
        memcpy(q, rec, D);
        memcpy(&scale, rec + D, 4);
        qrow want;
        naive_int8_quantize(rows[i], D, want.q, &want.scale, &want.zp);
        int same = memcmp(&scale, &want.scale, 4) == 0 && zp == want.zp && memcmp(q, want.q, D) == 0;
        if (!same && !bad++)
            TU_CHECK(0, "row %d: scale %.9g zp %d q[0..3] %d %d %d %d; expected %.9g %d %d %d %d %d", i, (double)scale, zp,
                     q[0], q[1], q[2], q[3], (double)want.scale, want.zp, want.q[0], want.q[1], want.q[2], want.q[3]);
        /* read() returns (q - zp) * scale */
        float kd[D], vd[D];
        sdpa_tensor tk = tu_tensor4(kd, SDPA_DTYPE_FLOAT32, 1, 1, 1, D), tv = tu_tensor4(vd, SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
        TU_CHECK(sdpa_kv_cache_read(g_ctx1, c, i, 1, &tk, &tv) == SDPA_OK, "read");
        for (int d = 0; d < D; d++) {
            const float deq = (float)(want.q[d] - want.zp) * want.scale;
            if (memcmp(&kd[d], &deq, 4) != 0 && !bad++) TU_CHECK(0, "row %d: read[%d] = %g, expected %g", i, d, (double)kd[d], (double)deq);
        }
    }
    TU_CHECK(bad == 0, "%ld int8 rows quantized differently from ExecuTorch's formula", bad);
    sdpa_kv_cache_free(c);
}

/* ---- int4 (a float16 scale and offset per group of 64 elements) -------- */

static uint16_t rd16(const uint8_t * p) { uint16_t h; memcpy(&h, p, 2); return h; }
static int same_value(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

static void test_int4_rows(void) {
    enum { D = 136, G = 3, REC = (D + 1) / 2 + 4 * G };  /* groups of 64, 64 and 8 elements */
    sdpa_kv_cache * c = NULL;
    const sdpa_kv_cache_desc desc = { 1, 64, 1, D, SDPA_DTYPE_INT4, SDPA_DTYPE_INT4, 0, 0, 0 };
    sdpa_status st = sdpa_kv_cache_create_desc(g_ctx1, &desc, &c);
    if (!TU_CHECK(st == SDPA_OK, "int4 cache: %s", sdpa_status_code(st))) return;
    TU_CHECK(sdpa_kv_cache_dtype(c) == SDPA_DTYPE_INT4 && sdpa_kv_cache_key_dtype(c) == SDPA_DTYPE_INT4, "dtype");
    TU_CHECK(sdpa_kv_cache_record_bytes(c, 0) == REC && sdpa_kv_cache_record_bytes(c, 1) == REC, "int4 record bytes %zu",
             sdpa_kv_cache_record_bytes(c, 0));
    static float rows[60][D];
    tu_rng rng;
    tu_rng_seed(&rng, 19);
    int nr = 0;
    for (int d = 0; d < D; d++) rows[nr][d] = 0.0f;                                   /* all zero */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = 0.7f;                                   /* constant, not a half */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = 1.00012f + 1e-5f * (float)(d % 5);      /* no half in [min, max] */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = (float)(d % 16) * 0.25f - 1.0f;         /* exactly 16 levels */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = 1e-6f * (float)(d % 7);                 /* subnormal scales */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = d % 2 ? 65504.0f : -65504.0f;           /* float16's range */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = d == 70 ? NAN : (float)d;               /* group 1 NaN */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = d == 130 ? INFINITY : (float)d;         /* the short group +Inf */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = d == 3 ? -70000.0f : 0.5f * (float)d;   /* beyond float16 */
    nr++;
    for (int d = 0; d < D; d++) rows[nr][d] = 100.0f + 0.01f * (float)d;              /* offset rounding > half a step */
    nr++;
    while (nr < 60) {
        const float amp = (float)pow(10.0, tu_rng_uniform(&rng, -4.0f, 3.0f));
        for (int d = 0; d < D; d++) rows[nr][d] = tu_rng_uniform(&rng, -amp, amp * tu_rng_uniform(&rng, 0.0f, 2.0f));
        nr++;
    }
    long bad = 0, bound_bad = 0, range_bad = 0;
    for (int i = 0; i < nr; i++) {
        sdpa_tensor t = tu_tensor4(rows[i], SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
        TU_CHECK(sdpa_kv_cache_update(g_ctx1, c, &t, &t, i) == SDPA_OK, "write row %d", i);
        uint8_t rec[REC];
        TU_CHECK(sdpa_kv_cache_read_records(g_ctx1, c, i, 1, 1, rec, sizeof rec) == SDPA_OK, "read_records: %s",
                 sdpa_ctx_last_error(g_ctx1));
        float kd[D], vd[D];
        sdpa_tensor tk = tu_tensor4(kd, SDPA_DTYPE_FLOAT32, 1, 1, 1, D), tv = tu_tensor4(vd, SDPA_DTYPE_FLOAT32, 1, 1, 1, D);
        TU_CHECK(sdpa_kv_cache_read(g_ctx1, c, i, 1, &tk, &tv) == SDPA_OK, "read");
        for (int g = 0; g < G; g++) {
            const int d0 = 64 * g, n = D - d0 < 64 ? D - d0 : 64;
            uint8_t lv[64];
            float scale, offset;
            naive_int4_quantize(rows[i] + d0, n, lv, &scale, &offset);
            const float got_scale = sdpa_f16_to_f32(rd16(rec + (D + 1) / 2 + 2 * g));
            const float got_offset = sdpa_f16_to_f32(rd16(rec + (D + 1) / 2 + 2 * (G + g)));
            if ((!same_value(got_scale, scale) || !same_value(got_offset, offset)) && !bad++)
                TU_CHECK(0, "row %d group %d: scale %.9g offset %.9g; expected %.9g %.9g", i, g, (double)got_scale,
                         (double)got_offset, (double)scale, (double)offset);
            double lo = INFINITY, hi = -INFINITY;
            for (int e = 0; e < n; e++) { lo = fmin(lo, rows[i][d0 + e]); hi = fmax(hi, rows[i][d0 + e]); }
            for (int e = 0; e < n; e++) {
                const int d = d0 + e;
                const uint8_t got = (uint8_t)((rec[d / 2] >> (4 * (d % 2))) & 15);
                if (got != lv[e] && !bad++) TU_CHECK(0, "row %d element %d: level %d, expected %d", i, d, got, lv[e]);
                volatile float deq = (float)lv[e] * scale;
                deq = deq + offset;
                if (!same_value(vd[d], deq) || !same_value(kd[d], deq))
                    if (!bad++) TU_CHECK(0, "row %d: read[%d] = %g, expected %g", i, d, (double)vd[d], (double)deq);
                if (isnan(scale)) {  /* a group that cannot be stored reads NaN, never a finite number */
                    if (!isnan(vd[d]) && !bad++) TU_CHECK(0, "row %d element %d: %g, expected NaN", i, d, (double)vd[d]);
                    continue;
                }
                /* half a step, or the distance to the nearest end level (the float16 rounding of
                 * offset and scale), plus float32 rounding */
                const double top = (double)(15.0f * scale + offset), x = rows[i][d];
                const double allow = fmax(fmax(scale / 2.0, (double)offset - lo), hi - top) * (1 + 1e-6) + 1e-7 * fabs(x);
                if (fabs(x - (double)vd[d]) > allow && !bound_bad++)
                    TU_CHECK(0, "row %d element %d: %.9g stored as %.9g (allowed %.3g)", i, d, x, (double)vd[d], allow);
                const bool representable = (double)offset >= lo && (double)offset <= hi;  /* a half in [lo, hi] */
                if (representable && ((double)vd[d] < lo || (double)vd[d] > hi) && !range_bad++)
                    TU_CHECK(0, "row %d element %d: %.9g outside the group's [%.9g, %.9g]", i, d, (double)vd[d], lo, hi);
            }
        }
        if (D % 2 && (rec[D / 2] >> 4)) TU_CHECK(0, "the unused nibble is not 0");
    }
    TU_CHECK(bad == 0 && bound_bad == 0 && range_bad == 0, "int4 rows: %ld differ from the formula, %ld out of bound, %ld out of range",
             bad, bound_bad, range_bad);
    sdpa_kv_cache_free(c);
}

/* ---- attention over compact caches ------------------------------------- */

typedef struct shape { int32_t B, Hq, Hkv, D, keys, Sq; int causal, mask; float v_shift, q_mul; } shape;
/* v_shift: values of one sign (an int8 zero point far from 0: -128 for all-positive rows);
 * q_mul: q times this (0: 1), the scale divided by it (a float16 cache's q * 2^112 overflows
 * above 65536: the kernel keeps q unscaled then) */

static const char * dtype_str(int32_t d) {
    return d == SDPA_DTYPE_FLOAT32 ? "float32" : d == SDPA_DTYPE_FLOAT16 ? "float16" : d == SDPA_DTYPE_INT8 ? "int8" : "int4";
}
static bool is_int(int32_t d) { return d == SDPA_DTYPE_INT8 || d == SDPA_DTYPE_INT4; }

/* The errors seen, per (K dtype, V dtype), for the printout. */
static double g_err_stored[6][6], g_err_orig[6][6];

static void attention_case(int32_t kdt, int32_t vdt, const shape * s, uint64_t seed) {
    snprintf(tu_context, sizeof tu_context, "K %s V %s cache B=%d Hq=%d Hkv=%d D=%d keys=%d Sq=%d causal=%d mask=%d v_shift=%g q_mul=%g",
             dtype_str(kdt), dtype_str(vdt), s->B, s->Hq, s->Hkv, s->D, s->keys, s->Sq, s->causal, s->mask, (double)s->v_shift,
             (double)s->q_mul);
    const float q_mul = s->q_mul ? s->q_mul : 1.0f;
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    const int32_t S = s->keys;
    const size_t nkv = (size_t)s->B * S * s->Hkv * s->D, nq = (size_t)s->B * s->Sq * s->Hq * s->D;
    float * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4), * q = tu_malloc(nq * 4);
    for (size_t i = 0; i < nkv; i++) { k[i] = tu_rng_normal(&rng); v[i] = tu_rng_normal(&rng) + s->v_shift; }
    for (size_t i = 0; i < nq; i++) q[i] = tu_rng_normal(&rng) * q_mul;
    sdpa_kv_cache * c1 = NULL, * c2 = NULL;
    const sdpa_kv_cache_desc desc = { s->B, S, s->Hkv, s->D, kdt, vdt, 0, 0, 0 };
    sdpa_status st1 = sdpa_kv_cache_create_desc(g_ctx1, &desc, &c1);
    sdpa_status st2 = sdpa_kv_cache_create_desc(g_ctx2, &desc, &c2);
    if (!TU_CHECK(st1 == SDPA_OK && st2 == SDPA_OK, "create")) return;
    /* rows 0 .. S-Sq-1 by update, the last Sq by step */
    const int32_t past = S - s->Sq;
    if (past > 0) {
        sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, s->B, past, s->Hkv, s->D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, s->B, past, s->Hkv, s->D);
        /* (B > 1: the dense [B, past] prefix is not contiguous in [B, S]; write batch rows one by one via a copy) */
        float * kp = tu_malloc((size_t)s->B * past * s->Hkv * s->D * 4), * vp = tu_malloc((size_t)s->B * past * s->Hkv * s->D * 4);
        for (int32_t b = 0; b < s->B; b++) {
            memcpy(kp + (size_t)b * past * s->Hkv * s->D, k + (size_t)b * S * s->Hkv * s->D, (size_t)past * s->Hkv * s->D * 4);
            memcpy(vp + (size_t)b * past * s->Hkv * s->D, v + (size_t)b * S * s->Hkv * s->D, (size_t)past * s->Hkv * s->D * 4);
        }
        tk.data = kp; tv.data = vp;
        TU_CHECK(sdpa_kv_cache_update(g_ctx1, c1, &tk, &tv, 0) == SDPA_OK && sdpa_kv_cache_update(g_ctx2, c2, &tk, &tv, 0) == SDPA_OK, "update");
        free(kp); free(vp);
    }
    float * kl = tu_malloc((size_t)s->B * s->Sq * s->Hkv * s->D * 4), * vl = tu_malloc((size_t)s->B * s->Sq * s->Hkv * s->D * 4);
    for (int32_t b = 0; b < s->B; b++) {
        memcpy(kl + (size_t)b * s->Sq * s->Hkv * s->D, k + ((size_t)b * S + past) * s->Hkv * s->D, (size_t)s->Sq * s->Hkv * s->D * 4);
        memcpy(vl + (size_t)b * s->Sq * s->Hkv * s->D, v + ((size_t)b * S + past) * s->Hkv * s->D, (size_t)s->Sq * s->Hkv * s->D * 4);
    }
    float * mask = NULL;
    sdpa_tensor tm;
    if (s->mask) {
        mask = tu_malloc((size_t)s->Sq * S * 4);
        for (size_t i = 0; i < (size_t)s->Sq * S; i++) mask[i] = tu_rng_unit(&rng) < 0.2 ? -INFINITY : tu_rng_uniform(&rng, -1.0f, 1.0f);
        tm = tu_tensor2(mask, SDPA_DTYPE_FLOAT32, s->Sq, S);
    }
    float * o1 = tu_malloc(nq * 4), * o2 = tu_malloc(nq * 4);
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, s->B, s->Sq, s->Hq, s->D);
    sdpa_tensor tk = tu_tensor4(kl, SDPA_DTYPE_FLOAT32, s->B, s->Sq, s->Hkv, s->D), tv = tu_tensor4(vl, SDPA_DTYPE_FLOAT32, s->B, s->Sq, s->Hkv, s->D);
    sdpa_tensor to1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, s->B, s->Sq, s->Hq, s->D), to2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, s->B, s->Sq, s->Hq, s->D);
    sdpa_options opt = {.start_pos = past, .is_causal = s->causal && !s->mask, .has_scale = q_mul != 1.0f,
                        .scale = (float)(1.0 / (sqrt((double)s->D) * q_mul))};
    st1 = sdpa_kv_cache_step(g_ctx1, c1, &tq, &tk, &tv, s->mask ? &tm : NULL, &opt, &to1);
    st2 = sdpa_kv_cache_step(g_ctx2, c2, &tq, &tk, &tv, s->mask ? &tm : NULL, &opt, &to2);
    TU_CHECK(st1 == SDPA_OK && st2 == SDPA_OK, "step: %s %s", sdpa_status_code(st1), sdpa_ctx_last_error(g_ctx1));
    tu_identical("1 vs 2 threads", o1, o2, nq, tq.dims);
    /* the reference over the stored values (read back dequantized) */
    float * kd = tu_malloc(nkv * 4), * vd = tu_malloc(nkv * 4);
    sdpa_tensor tkd = tu_tensor4(kd, SDPA_DTYPE_FLOAT32, s->B, S, s->Hkv, s->D), tvd = tu_tensor4(vd, SDPA_DTYPE_FLOAT32, s->B, S, s->Hkv, s->D);
    TU_CHECK(sdpa_kv_cache_read(g_ctx1, c1, 0, S, &tkd, &tvd) == SDPA_OK, "read");
    double * ref = tu_malloc(nq * sizeof(double)), * orig = tu_malloc(nq * sizeof(double));
    naive_params np = {.B = s->B, .Sq = s->Sq, .Skv = S, .Hq = s->Hq, .Hkv = s->Hkv, .D = s->D, .start_pos = past,
                       .is_causal = opt.is_causal, .mask_kind = s->mask ? NAIVE_MASK_FLOAT : NAIVE_MASK_NONE,
                       .mask = mask, .mask_cols = S, .has_scale = opt.has_scale, .scale = opt.scale};
    TU_CHECK(naive_sdpa(&np, q, kd, vd, ref) == 0 && naive_sdpa(&np, q, k, v, orig) == 0, "reference");
    /* float caches: the same bits as customSdpa over the rows they store (the contract's "every key's
     * score is the same sum in the same order whatever its source"; float16's 2^112 scaling included) */
    if (!is_int(kdt) && !is_int(vdt)) {
        float * oc = tu_malloc(nq * 4);
        sdpa_tensor toc = tu_tensor4(oc, SDPA_DTYPE_FLOAT32, s->B, s->Sq, s->Hq, s->D);
        sdpa_status stc = sdpa_custom(g_ctx2, &tq, &tkd, &tvd, s->mask ? &tm : NULL, &opt, &toc);
        if (TU_CHECK(stc == SDPA_OK, "sdpa_custom: %s %s", sdpa_status_code(stc), sdpa_ctx_last_error(g_ctx2)))
            tu_identical("cache vs sdpa_custom over the stored rows", o1, oc, nq, tq.dims);
        free(oc);
    }
    /* int8: q and the softmax weights are quantized to int16 (the contract's int8 bound) */
    tu_close_tol("vs the float64 reference over the stored values", o1, ref, nq, tq.dims,
                 is_int(kdt) || is_int(vdt) ? TU_INT8_TOL : TU_TOL);
    double worst_stored = 0, mref_stored = 0;
    for (size_t i = 0; i < nq; i++) { worst_stored = fmax(worst_stored, fabs(o1[i] - ref[i])); mref_stored = fmax(mref_stored, fabs(ref[i])); }
    g_err_stored[kdt][vdt] = fmax(g_err_stored[kdt][vdt], worst_stored / (1 + mref_stored));
    double worst = 0, mref = 0;
    for (size_t i = 0; i < nq; i++) { worst = fmax(worst, fabs(o1[i] - orig[i])); mref = fmax(mref, fabs(orig[i])); }
    g_err_orig[kdt][vdt] = fmax(g_err_orig[kdt][vdt], worst / (1 + mref));
    /* the reference above reads the cache back; this one does not: a format that stores and decodes wrongly
       in the same way is caught here (bounds ~10x the errors measured; the coarser of K's and V's) */
    const int32_t coarse = (kdt == SDPA_DTYPE_INT4 || vdt == SDPA_DTYPE_INT4) ? SDPA_DTYPE_INT4
                         : (kdt == SDPA_DTYPE_INT8 || vdt == SDPA_DTYPE_INT8) ? SDPA_DTYPE_INT8 : SDPA_DTYPE_FLOAT16;
    const double bound = coarse == SDPA_DTYPE_FLOAT16 ? 2e-3 : coarse == SDPA_DTYPE_INT8 ? 2e-2 : 0.4;
    TU_CHECK(worst / (1 + mref) < bound, "error against the original float32 K/V %.2e (/ (1 + max|ref| %.2e)) exceeds %.0e",
             worst / (1 + mref), mref, bound);
    /* each of K and V holds its own dtype: K's (V's) error against the written rows is that dtype's */
    for (int which = 0; which < 2; which++) {
        const int32_t dt = which ? vdt : kdt;
        const float * stored = which ? vd : kd, * written = which ? v : k;
        double e = 0, m = 0;
        for (size_t i = 0; i < nkv; i++) { e = fmax(e, fabs((double)stored[i] - written[i])); m = fmax(m, fabs(written[i])); }
        /* float32 exact; float16 2^-11 relative; int8 half a step of 255 over the row range; int4 of 15 */
        const double allow = dt == SDPA_DTYPE_FLOAT32 ? 0 : dt == SDPA_DTYPE_FLOAT16 ? m * 0x1p-11
                           : dt == SDPA_DTYPE_INT8 ? 2 * m / 255 : 2 * m / 15 + m * 0x1p-10;
        TU_CHECK(e <= allow * 1.0001, "%s (%s) read back within %.3g of what was written: %.3g",
                 which ? "V" : "K", dtype_str(dt), allow, e);
    }
    sdpa_kv_cache_free(c1);
    sdpa_kv_cache_free(c2);
    free(k); free(v); free(q); free(kl); free(vl); free(mask); free(o1); free(o2); free(kd); free(vd); free(ref); free(orig);
}

/* A [1, S, 1, D] int8 cache holding k, v (rows 0 .. S-1), and the values it
 * stores read back into kd, vd. NULL when it cannot be made (a check fails). */
static sdpa_kv_cache * int8_cache_of(int32_t S, int32_t D, float * k, float * v, float * kd, float * vd) {
    sdpa_kv_cache * c = NULL;
    if (!TU_CHECK(sdpa_kv_cache_create(g_ctx1, 1, S, 1, D, SDPA_DTYPE_INT8, &c) == SDPA_OK, "int8 cache")) return NULL;
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, S, 1, D), tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, S, 1, D);
    TU_CHECK(sdpa_kv_cache_update(g_ctx1, c, &tk, &tv, 0) == SDPA_OK, "update");
    sdpa_tensor tkd = tu_tensor4(kd, SDPA_DTYPE_FLOAT32, 1, S, 1, D), tvd = tu_tensor4(vd, SDPA_DTYPE_FLOAT32, 1, S, 1, D);
    TU_CHECK(sdpa_kv_cache_read(g_ctx1, c, 0, S, &tkd, &tvd) == SDPA_OK, "read");
    return c;
}

/* A query row so small that its int16 quantization scale is subnormal (1/scale
 * overflows): the int8 cache must still give the reference answer over its
 * stored values (a custom scale large enough that the scores matter). */
static void test_int8_tiny_query(void) {
    enum { S = 40, D = 16, H = 2 };
    tu_rng rng;
    tu_rng_seed(&rng, 7);
    float k[S * D], v[S * D], q[H * D], out[H * D], kd[S * D], vd[S * D];
    for (int i = 0; i < S * D; i++) { k[i] = tu_rng_uniform(&rng, -1.0f, 1.0f); v[i] = tu_rng_uniform(&rng, -1.0f, 1.0f); }
    for (int i = 0; i < H * D; i++) q[i] = (i % 3 == 0) ? 0.0f : tu_rng_uniform(&rng, -1.0f, 1.0f) * 1e-36f;
    sdpa_kv_cache * c = int8_cache_of(S, D, k, v, kd, vd);
    if (!c) return;
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, 1, H, D), to = tu_tensor4(out, SDPA_DTYPE_FLOAT32, 1, 1, H, D);
    const float scale = 3e36f;
    sdpa_options o = { .start_pos = S - 1, .has_scale = 1, .scale = scale };
    naive_params np = { .B = 1, .Sq = 1, .Skv = S, .Hq = H, .Hkv = 1, .D = D, .start_pos = S - 1,
                        .has_scale = 1, .scale = scale };
    double ref[H * D];
    TU_CHECK(naive_sdpa(&np, q, kd, vd, ref) == 0, "reference");
    for (sdpa_ctx * ctx = g_ctx1; ctx; ctx = ctx == g_ctx1 ? g_ctx2 : NULL) {
        tu_fill_nan(out, H * D);
        tu_dirty_error(ctx);
        sdpa_status st = sdpa_kv_cache_attend(ctx, c, &tq, NULL, &o, &to);
        tu_check_output(ctx, st, "int8 cache, a query row of ~1e-36", out, ref, H * D, tq.dims);
    }
    sdpa_kv_cache_free(c);
}

static void test_attention(void) {
    static const shape shapes[] = {
        {1, 8, 2, 64, 300, 1, 1, 0, 0.0f, 0},     /* decode, GQA 4, split-KV */
        {1, 32, 8, 128, 2048, 1, 1, 0, 0.0f, 0},  /* decode of a real model shape (split-KV, chunks) */
        {1, 8, 1, 128, 700, 1, 1, 0, 0.0f, 0},    /* MQA */
        {2, 4, 2, 20, 130, 3, 1, 0, 0.0f, 0},     /* B = 2, D with SIMD tails (16 + 4 for int8, 16 + 4 for float16) */
        {1, 6, 3, 7, 90, 5, 0, 1, 0.0f, 0},       /* D = 7, float mask */
        {1, 4, 4, 33, 200, 64, 1, 0, 0.0f, 0},    /* prefill-like, D = 33 */
        {1, 14, 2, 64, 513, 1, 1, 0, 0.0f, 0},    /* 513 keys: a partial tile and page */
        {1, 8, 2, 64, 300, 1, 1, 0, 4.0f, 0},   /* GQA 4 over values of one sign: zero points near -128 */
        {1, 8, 1, 128, 200, 1, 1, 0, -2.0f, 0}, /* MQA (8 rows) over negative values: zero points near 127 */
        {1, 6, 3, 16, 150, 3, 1, 0, 5.0f, 0},   /* 6 rows (a quad and a pair), same data kind */
        {1, 4, 2, 1030, 140, 2, 1, 0, 0.0f, 0}, /* D > 1024: an int8 cache decodes K for Q.K (INT_Q_MAX_DIM) */
        {1, 2, 1, 1, 70, 2, 1, 0, 0.0f, 0},     /* D = 1: one element pair, padded; no SIMD element loop */
        {1, 4, 2, 2, 100, 1, 1, 0, 0.0f, 0},    /* D = 2 */
        {1, 4, 2, 300, 200, 1, 1, 0, 1.0f, 0},  /* D = 300: int8 q16 below 32767 (a key's sum must fit an int32) */
        {1, 8, 2, 64, 300, 1, 1, 0, 0.0f, 3e4f},  /* |q| up to ~1e5: some blocks' q * 2^112 would overflow */
        {1, 1, 1, 40, 150, 1, 1, 0, 0.0f, 3e4f},  /* the same for a single row (float16 converted as loaded) */
        {1, 1, 1, 40, 150, 1, 1, 0, 0.0f, 0},        /* a single row, D with a tail */
    };
    const int32_t same[] = {SDPA_DTYPE_FLOAT16, SDPA_DTYPE_INT8, SDPA_DTYPE_INT4};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) attention_case(same[d], same[d], &shapes[i], 100 + i);
    /* K and V each their own dtype: every other pair on a few shapes (decode GQA, MQA, tails, prefill) */
    static const int32_t all[] = {SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT16, SDPA_DTYPE_INT8, SDPA_DTYPE_INT4};
    static const size_t mixed_shapes[] = {0, 2, 3, 5, 13};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            if (a == b) continue;
            for (size_t i = 0; i < sizeof mixed_shapes / sizeof mixed_shapes[0]; i++)
                attention_case(all[a], all[b], &shapes[mixed_shapes[i]], 200 + mixed_shapes[i]);
        }
    printf("  error / (1 + max|ref|), K dtype x V dtype: against the float64 reference over the stored values | against the float32 K/V written\n");
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            if (a || b)
                printf("    K %-7s V %-7s %.2e | %.2e\n", dtype_str(all[a]), dtype_str(all[b]), g_err_stored[all[a]][all[b]],
                       g_err_orig[all[a]][all[b]]);
}

static void test_bytes(void) {
    sdpa_kv_cache * f32 = NULL, * f16 = NULL, * i8 = NULL, * i4 = NULL, * i8i4 = NULL, * f16i4 = NULL;
    sdpa_kv_cache_create(g_ctx1, 1, 64, 8, 128, SDPA_DTYPE_FLOAT32, &f32);
    sdpa_kv_cache_create(g_ctx1, 1, 64, 8, 128, SDPA_DTYPE_FLOAT16, &f16);
    sdpa_kv_cache_create(g_ctx1, 1, 64, 8, 128, SDPA_DTYPE_INT8, &i8);
    sdpa_kv_cache_create(g_ctx1, 1, 64, 8, 128, SDPA_DTYPE_INT4, &i4);
    const sdpa_kv_cache_desc d84 = { 1, 64, 8, 128, SDPA_DTYPE_INT8, SDPA_DTYPE_INT4, 0, 0, 0 };
    const sdpa_kv_cache_desc d164 = { 1, 64, 8, 128, SDPA_DTYPE_FLOAT16, SDPA_DTYPE_INT4, 0, 0, 0 };
    sdpa_kv_cache_create_desc(g_ctx1, &d84, &i8i4);
    sdpa_kv_cache_create_desc(g_ctx1, &d164, &f16i4);
    float * x = calloc((size_t)64 * 8 * 128, 4);
    sdpa_tensor t = tu_tensor4(x, SDPA_DTYPE_FLOAT32, 1, 64, 8, 128);
    sdpa_memory_stats m0, m1, m2, m3;
    sdpa_ctx_memory(g_ctx1, &m0);
    sdpa_kv_cache_update(g_ctx1, f32, &t, &t, 0);
    sdpa_ctx_memory(g_ctx1, &m1);
    sdpa_kv_cache_update(g_ctx1, f16, &t, &t, 0);
    sdpa_ctx_memory(g_ctx1, &m2);
    sdpa_kv_cache_update(g_ctx1, i8, &t, &t, 0);
    sdpa_ctx_memory(g_ctx1, &m3);
    /* the others by cache.bytes (pages as the pool counts them + table), against float32's */
    sdpa_kv_cache_update(g_ctx1, i4, &t, &t, 0);
    sdpa_kv_cache_update(g_ctx1, i8i4, &t, &t, 0);
    sdpa_kv_cache_update(g_ctx1, f16i4, &t, &t, 0);
    const double c32 = sdpa_kv_cache_bytes(f32), c4 = sdpa_kv_cache_bytes(i4), c84 = sdpa_kv_cache_bytes(i8i4),
                 c164 = sdpa_kv_cache_bytes(f16i4);
    printf("  cache.bytes of 64 rows x 8 heads x D 128: int4 %.3f x, K int8 V int4 %.3f x, K float16 V int4 %.3f x of float32\n",
           c4 / c32, c84 / c32, c164 / c32);
    TU_CHECK(c4 / c32 <= 0.17 && c84 / c32 <= 0.22, "int4 %.3f x (at most 0.17), K int8 V int4 %.3f x (at most 0.22)",
             c4 / c32, c84 / c32);
    const double b32 = (double)(m1.bytes_in_use - m0.bytes_in_use), b16 = (double)(m2.bytes_in_use - m1.bytes_in_use),
                 b8 = (double)(m3.bytes_in_use - m2.bytes_in_use);
    printf("  pages of 64 rows x 8 heads x D 128: float32 %.0f, float16 %.0f (%.3f x), int8 %.0f (%.3f x) bytes\n", b32, b16,
           b16 / b32, b8, b8 / b32);
    TU_CHECK(b16 / b32 <= 0.501 && b8 / b32 <= 0.27, "compact pages: float16 %.3f x, int8 %.3f x of float32", b16 / b32, b8 / b32);
    free(x);
    sdpa_kv_cache_free(f32);
    sdpa_kv_cache_free(f16);
    sdpa_kv_cache_free(i8);
    sdpa_kv_cache_free(i4);
    sdpa_kv_cache_free(i8i4);
    sdpa_kv_cache_free(f16i4);
}

/* A query row with a NaN or an Inf in an int8 cache (q cannot be quantized:
 * the row is the reference's, NaN). Found by the fuzzer: with D = 1 the SIMD
 * max over the padded row dropped the NaN and the row came out as zeros. */
static void test_int8_nonfinite_query(void) {
    static const int32_t dims[] = {1, 5, 16};
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int di = 0; di < 3; di++)
        for (int bi = 0; bi < 3; bi++) {
            const int32_t D = dims[di], S = 3, H = 2;
            snprintf(tu_context, sizeof tu_context, "int8 cache, D=%d, a query element %g", D, (double)bad[bi]);
            float k[S * D], v[S * D], q[H * D], out[H * D], kd[S * D], vd[S * D];
            for (int i = 0; i < S * D; i++) { k[i] = 0.25f * (float)(i % 7) - 0.5f; v[i] = 0.125f * (float)(i % 5); }
            for (int i = 0; i < H * D; i++) q[i] = 0.5f - 0.1f * (float)i;
            q[D - 1] = bad[bi];  /* head 0's last element (D = 1: its only one) */
            sdpa_kv_cache * c = int8_cache_of(S, D, k, v, kd, vd);
            if (!c) return;
            naive_params np = {.B = 1, .Sq = 1, .Skv = S, .Hq = H, .Hkv = 1, .D = D, .start_pos = S - 1, .is_causal = 1};
            double ref[H * D];
            TU_CHECK(naive_sdpa(&np, q, kd, vd, ref) == 0, "reference");
            sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, 1, H, D), to = tu_tensor4(out, SDPA_DTYPE_FLOAT32, 1, 1, H, D);
            sdpa_options o = {.start_pos = S - 1, .is_causal = 1};
            for (sdpa_ctx * ctx = g_ctx1; ctx; ctx = ctx == g_ctx1 ? g_ctx2 : NULL) {
                for (int i = 0; i < H * D; i++) out[i] = 7.0f;  /* not NaN: a row left unwritten would pass */
                tu_dirty_error(ctx);
                sdpa_status st = sdpa_kv_cache_attend(ctx, c, &tq, NULL, &o, &to);
                tu_check_output(ctx, st, "attend", out, ref, H * D, tq.dims);
                TU_CHECK(isnan(out[0]), "head 0 is NaN (the reference: %g)", ref[0]);
            }
            sdpa_kv_cache_free(c);
        }
}

/* A cache of `d` (batch 1, rows 0 .. S-1 of k, v [S, H, D], S = max_seq_len
 * - 64) and a fork of it that rewrites row 71 (page 1, shared: copied first,
 * its marks with it) with the same values; kd, vd get the cache's read-back.
 * NULL when it cannot be made (a check fails). */
static sdpa_kv_cache * nonfinite_cache(const sdpa_kv_cache_desc * d, const float * k, const float * v, float * kd, float * vd,
                                       sdpa_kv_cache ** fork) {
    const int32_t S = d->max_seq_len - 64, H = d->kv_heads, D = d->head_dim;
    sdpa_kv_cache * c = NULL;
    if (!TU_CHECK(sdpa_kv_cache_create_desc(g_ctx1, d, &c) == SDPA_OK, "create")) return NULL;
    sdpa_tensor tk = tu_tensor4((float *)(uintptr_t)k, SDPA_DTYPE_FLOAT32, 1, S, H, D), tv = tu_tensor4((float *)(uintptr_t)v, SDPA_DTYPE_FLOAT32, 1, S, H, D);
    TU_CHECK(sdpa_kv_cache_update(g_ctx1, c, &tk, &tv, 0) == SDPA_OK, "update");
    TU_CHECK(sdpa_kv_cache_fork(g_ctx1, c, fork) == SDPA_OK, "fork");
    const size_t row71 = (size_t)71 * H * D;
    sdpa_tensor tk1 = tu_tensor4((float *)(uintptr_t)(k + row71), SDPA_DTYPE_FLOAT32, 1, 1, H, D);
    sdpa_tensor tv1 = tu_tensor4((float *)(uintptr_t)(v + row71), SDPA_DTYPE_FLOAT32, 1, 1, H, D);
    TU_CHECK(sdpa_kv_cache_update(g_ctx1, *fork, &tk1, &tv1, 71) == SDPA_OK, "fork update");
    sdpa_tensor tkd = tu_tensor4(kd, SDPA_DTYPE_FLOAT32, 1, S, H, D), tvd = tu_tensor4(vd, SDPA_DTYPE_FLOAT32, 1, S, H, D);
    TU_CHECK(sdpa_kv_cache_read(g_ctx1, c, 0, S, &tkd, &tvd) == SDPA_OK, "read");
    return c;
}

/* Decode steps over the keys up to 60, 140 and S of `c` and of its fork,
 * on 1 and 2 threads, each against the float64 reference over that cache's
 * own read-back (kd, vd: [S, H, D] scratch): the NaN / Inf the caches hold
 * reach the output where the reference says, and only there. tol: the
 * dtypes' bound (TU_TOL, or TU_INT8_TOL for quantized caches). */
static void nonfinite_attends(sdpa_kv_cache * c, sdpa_kv_cache * fork, const float * q, float * kd, float * vd,
                              int32_t S, int32_t H, int32_t Hq, int32_t D, double tol) {
    float * out = tu_malloc((size_t)Hq * D * 4);
    double * ref = tu_malloc((size_t)Hq * D * sizeof(double));
    sdpa_tensor tq = tu_tensor4((float *)(uintptr_t)q, SDPA_DTYPE_FLOAT32, 1, 1, Hq, D), to = tu_tensor4(out, SDPA_DTYPE_FLOAT32, 1, 1, Hq, D);
    sdpa_tensor tkd = tu_tensor4(kd, SDPA_DTYPE_FLOAT32, 1, S, H, D), tvd = tu_tensor4(vd, SDPA_DTYPE_FLOAT32, 1, S, H, D);
    const int32_t lens[] = { 60, 140, S };
    for (sdpa_kv_cache * cc = c; cc; cc = cc == c ? fork : NULL) {
        TU_CHECK(sdpa_kv_cache_read(g_ctx1, cc, 0, S, &tkd, &tvd) == SDPA_OK, "read");
        for (int li = 0; li < 3; li++) {
            const int32_t n = lens[li];
            /* the reference reads the first n rows of the [S, H, D] read-back */
            naive_params np = {.B = 1, .Sq = 1, .Skv = n, .Hq = Hq, .Hkv = H, .D = D, .start_pos = n - 1, .is_causal = 1};
            TU_CHECK(naive_sdpa(&np, q, kd, vd, ref) == 0, "reference");
            sdpa_options o = {.start_pos = n - 1, .is_causal = 1};
            for (sdpa_ctx * ctx = g_ctx1; ctx; ctx = ctx == g_ctx1 ? g_ctx2 : NULL) {
                tu_fill_nan(out, Hq * D);
                tu_dirty_error(ctx);
                sdpa_status st = sdpa_kv_cache_attend(ctx, cc, &tq, NULL, &o, &to);
                char what[96];
                snprintf(what, sizeof what, "%s, %d keys", cc == c ? "cache" : "fork", n);
                if (!TU_CHECK(st == SDPA_OK, "%s returned %s: %s", what, sdpa_status_code(st), sdpa_ctx_last_error(ctx))) continue;
                TU_CHECK(sdpa_ctx_last_error(ctx)[0] == 0, "%s: last_error not empty after a success", what);
                tu_close_tol(what, out, ref, (size_t)Hq * D, tq.dims, tol);
            }
        }
    }
    free(out);
    free(ref);
}

/* A float16 cache whose values overflow to Inf (|x| >= 65520) or are NaN: the
 * kernel reads unmarked pages with a conversion that is exact for finite
 * halves only, so the pages that hold an Inf or NaN must take the exact
 * decoding and give the reference's NaN / Inf. Also through a fork whose
 * write copies such a page (the copy keeps the page's mark). */
static void test_f16_nonfinite(void) {
    enum { S = 200, H = 2, Hq = 4, D = 16 };
    snprintf(tu_context, sizeof tu_context, "float16 cache with Inf / NaN values");
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    static float k[S * H * D], v[S * H * D], q[Hq * D], kd[S * H * D], vd[S * H * D];
    for (int i = 0; i < S * H * D; i++) { k[i] = tu_rng_normal(&rng); v[i] = tu_rng_normal(&rng); }
    for (int i = 0; i < Hq * D; i++) q[i] = tu_rng_normal(&rng);
    for (int h = 0; h < Hq; h++) q[h * D + 3] = 0.5f + fabsf(q[h * D + 3]);  /* so the Inf key's score is +Inf */
    k[(70 * H + 0) * D + 3] = 1e5f;      /* page 1, head 0: K overflows to +Inf */
    v[(150 * H + 0) * D + 5] = NAN;      /* page 2, head 0: a NaN value */
    v[(10 * H + 1) * D + 9] = -7e4f;     /* page 0, head 1: V overflows to -Inf */
    const sdpa_kv_cache_desc desc = { 1, S + 64, H, D, SDPA_DTYPE_FLOAT16, SDPA_DTYPE_FLOAT16, 0, 0, 0 };
    sdpa_kv_cache * fork = NULL, * c = nonfinite_cache(&desc, k, v, kd, vd, &fork);
    if (!c) return;
    TU_CHECK(isinf(kd[(70 * H + 0) * D + 3]) && isnan(vd[(150 * H + 0) * D + 5]) && isinf(vd[(10 * H + 1) * D + 9]),
             "the stored values are Inf, NaN, -Inf");
    /* keys up to 60: only head 1's -Inf value is seen; up to S all three */
    nonfinite_attends(c, fork, q, kd, vd, S, H, Hq, D, TU_TOL);
    sdpa_kv_cache_free(fork);
    sdpa_kv_cache_free(c);
}

/* An int4 cache (and K int8 / V int4) whose groups hold an Inf, a NaN or a
 * value beyond float16: those groups read back as NaN, the pages that hold
 * one are marked and decoded exactly, and attention gives the reference's
 * NaN where such a key or value is seen (and not where it is not: the keys
 * up to 60 see only page 0). Also through a fork that copies such a page. */
static void test_int4_nonfinite(int32_t kdt) {
    enum { S = 200, H = 2, Hq = 4, D = 80 };
    snprintf(tu_context, sizeof tu_context, "K %s V int4 cache with Inf / NaN / huge values", dtype_str(kdt));
    tu_rng rng;
    tu_rng_seed(&rng, 12);
    static float k[S * H * D], v[S * H * D], q[Hq * D], kd[S * H * D], vd[S * H * D];
    for (int i = 0; i < S * H * D; i++) { k[i] = tu_rng_normal(&rng); v[i] = tu_rng_normal(&rng); }
    for (int i = 0; i < Hq * D; i++) q[i] = tu_rng_normal(&rng);
    k[(70 * H + 0) * D + 3] = INFINITY;  /* page 1, head 0: a K group NaN (int4 K) */
    v[(150 * H + 0) * D + 70] = NAN;     /* page 2, head 0: V's short group NaN */
    v[(10 * H + 1) * D + 9] = 7e4f;      /* page 0, head 1: beyond float16 */
    const sdpa_kv_cache_desc desc = { 1, S + 64, H, D, kdt, SDPA_DTYPE_INT4, 0, 0, 0 };
    sdpa_kv_cache * fork = NULL, * c = nonfinite_cache(&desc, k, v, kd, vd, &fork);
    if (!c) return;
    TU_CHECK(isnan(vd[(150 * H + 0) * D + 64]) && isnan(vd[(10 * H + 1) * D + 0]) &&
             (kdt != SDPA_DTYPE_INT4 || isnan(kd[(70 * H + 0) * D + 63])), "the groups read back as NaN");
    TU_CHECK(!isnan(vd[(150 * H + 0) * D + 63]), "the group before it does not");
    nonfinite_attends(c, fork, q, kd, vd, S, H, Hq, D, TU_INT8_TOL);  /* the quantized kernels' bound */
    sdpa_kv_cache_free(fork);
    sdpa_kv_cache_free(c);
}

/* Random compact-cache attention: what the fixed cases do not reach. Any D
 * from 1 to 300, 1-70 query rows, GQA groups 1-8, B 1-2, float and bool
 * masks, windows, softcap, sinks, custom scales, value scales 1e-3 to 1e3
 * and now and then extreme elements (1e30, +-Inf, NaN; float16: values that
 * overflow to Inf), through cache.step on 1 and 2 threads (bit-identical),
 * against the float64 reference over the values the cache stores. int8 keeps
 * |scale * q * k| ordinary (CONTRACT.md section 3: the int16 q rounding). */
static void random_case(uint64_t seed) {
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    /* half the cases one dtype for both (float16, int8, int4), the others any pair */
    static const int32_t all[] = {SDPA_DTYPE_FLOAT32, SDPA_DTYPE_FLOAT16, SDPA_DTYPE_INT8, SDPA_DTYPE_INT4};
    const bool one = tu_rng_unit(&rng) < 0.5;
    const int32_t kdt = one ? all[tu_rng_int(&rng, 1, 3)] : all[tu_rng_int(&rng, 0, 3)];
    const int32_t vdt = one ? kdt : all[tu_rng_int(&rng, 0, 3)];
    static const int groups[] = {1, 2, 3, 4, 7, 8};
    static const int dims[] = {64, 80, 96, 128, 160, 256, 300};
    const int32_t B = tu_rng_unit(&rng) < 0.2 ? 2 : 1, Hkv = tu_rng_int(&rng, 1, 4), Hq = Hkv * tu_rng_pick(&rng, groups, 6);
    const int32_t D = tu_rng_unit(&rng) < 0.5 ? tu_rng_int(&rng, 1, 40) : tu_rng_pick(&rng, dims, 7);
    const int32_t S = tu_rng_int(&rng, 1, 400);
    const int32_t Sq = tu_rng_unit(&rng) < 0.6 ? 1 : tu_rng_int(&rng, 1, S < 70 ? S : 70), past = S - Sq;
    const int mode = tu_rng_int(&rng, 0, 3);  /* 0 causal, 1 float mask, 2 bool mask, 3 causal + window */
    const int32_t window = mode == 3 ? tu_rng_int(&rng, 1, S) : 0;
    const float softcap = tu_rng_unit(&rng) < 0.3 ? tu_rng_uniform(&rng, 5.0f, 50.0f) : 0.0f;
    const bool with_sinks = tu_rng_unit(&rng) < 0.3, with_scale = tu_rng_unit(&rng) < 0.3;
    /* scales and K scales that keep scores of ordinary size: with |scale * q.k| in the hundreds,
     * float32 rounding alone passes 1e-5 (1 + max|ref|), a float32 cache's too */
    const float scale = with_scale ? tu_rng_uniform(&rng, 0.01f, 0.3f) : 0.0f;
    static const float kscales_i8[] = {1e-3f, 0.1f, 1.0f}, kscales_f16[] = {1e-3f, 1.0f, 3.0f}, vscales[] = {1e-3f, 1.0f, 1e3f};
    const float ks = is_int(kdt) ? kscales_i8[tu_rng_int(&rng, 0, 2)] : kscales_f16[tu_rng_int(&rng, 0, 2)];
    const float vs = vscales[tu_rng_int(&rng, 0, 2)], vshift = tu_rng_unit(&rng) < 0.2 ? 3.0f * vs : 0.0f;
    const bool extremes = tu_rng_unit(&rng) < 0.15;
    snprintf(tu_context, sizeof tu_context,
             "random K %s V %s case %llu: B=%d Hq=%d Hkv=%d D=%d S=%d Sq=%d mode=%d window=%d softcap=%g sinks=%d scale=%g ks=%g vs=%g extremes=%d",
             dtype_str(kdt), dtype_str(vdt), (unsigned long long)seed, B, Hq, Hkv, D, S, Sq, mode, window,
             (double)softcap, with_sinks, (double)scale, (double)ks, (double)vs, extremes);
    const size_t row = (size_t)Hkv * D, nq = (size_t)B * Sq * Hq * D;
    float * k = tu_malloc((size_t)B * S * row * 4), * v = tu_malloc((size_t)B * S * row * 4), * q = tu_malloc(nq * 4);
    for (size_t i = 0; i < (size_t)B * S * row; i++) { k[i] = ks * tu_rng_normal(&rng); v[i] = vs * tu_rng_normal(&rng) + vshift; }
    for (size_t i = 0; i < nq; i++) q[i] = tu_rng_normal(&rng);
    if (extremes) {
        static const float special[] = {1e30f, -1e30f, INFINITY, -INFINITY, NAN, 1e5f};
        for (int e = 0; e < 3; e++) {
            const size_t at = (size_t)tu_rng_int(&rng, 0, (int)((size_t)B * S * row - 1));
            (tu_rng_unit(&rng) < 0.5 ? k : v)[at] = special[tu_rng_int(&rng, 0, 5)];
        }
    }
    float * kd = tu_malloc((size_t)B * S * row * 4), * vd = tu_malloc((size_t)B * S * row * 4);
    float * o1 = tu_malloc(nq * 4), * o2 = tu_malloc(nq * 4), * sinks = tu_malloc((size_t)Hq * 4);
    double * ref = tu_malloc(nq * sizeof(double));
    void * mask = mode == 1 || mode == 2 ? tu_malloc((size_t)Sq * S * 4) : NULL;
    for (int32_t h = 0; h < Hq; h++) sinks[h] = tu_rng_uniform(&rng, -2.0f, 4.0f);
    for (size_t i = 0; mask && i < (size_t)Sq * S; i++) {
        if (mode == 1) ((float *)mask)[i] = tu_rng_unit(&rng) < 0.2 ? -INFINITY : tu_rng_uniform(&rng, -1.0f, 1.0f);
        else ((uint8_t *)mask)[i] = tu_rng_unit(&rng) < 0.7;
    }
    sdpa_kv_cache * c[2] = {NULL, NULL};
    sdpa_ctx * ctx[2] = {g_ctx1, g_ctx2};
    bool ok = true;
    const sdpa_kv_cache_desc desc = { B, S, Hkv, D, kdt, vdt, 0, 0, 0 };
    for (int j = 0; j < 2; j++) ok &= sdpa_kv_cache_create_desc(ctx[j], &desc, &c[j]) == SDPA_OK;
    /* rows 0 .. past-1 by update, the last Sq by step: dense copies of the [B, past] and [B, Sq] parts */
    float * kp = tu_malloc((size_t)B * (past + 1) * row * 4), * vp = tu_malloc((size_t)B * (past + 1) * row * 4);
    float * kl = tu_malloc((size_t)B * Sq * row * 4), * vl = tu_malloc((size_t)B * Sq * row * 4);
    for (int32_t b = 0; b < B; b++) {
        memcpy(kp + (size_t)b * past * row, k + (size_t)b * S * row, (size_t)past * row * 4);
        memcpy(vp + (size_t)b * past * row, v + (size_t)b * S * row, (size_t)past * row * 4);
        memcpy(kl + (size_t)b * Sq * row, k + ((size_t)b * S + past) * row, (size_t)Sq * row * 4);
        memcpy(vl + (size_t)b * Sq * row, v + ((size_t)b * S + past) * row, (size_t)Sq * row * 4);
    }
    sdpa_tensor tkp = tu_tensor4(kp, SDPA_DTYPE_FLOAT32, B, past, Hkv, D), tvp = tu_tensor4(vp, SDPA_DTYPE_FLOAT32, B, past, Hkv, D);
    for (int j = 0; ok && past > 0 && j < 2; j++) ok &= sdpa_kv_cache_update(ctx[j], c[j], &tkp, &tvp, 0) == SDPA_OK;
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, B, Sq, Hq, D);
    sdpa_tensor tkl = tu_tensor4(kl, SDPA_DTYPE_FLOAT32, B, Sq, Hkv, D), tvl = tu_tensor4(vl, SDPA_DTYPE_FLOAT32, B, Sq, Hkv, D);
    sdpa_tensor tm = tu_tensor2(mask, mode == 1 ? SDPA_DTYPE_FLOAT32 : SDPA_DTYPE_BOOL, Sq, S);
    sdpa_tensor ts = { sinks, (size_t)Hq, SDPA_DTYPE_FLOAT32, 1, { Hq, 0, 0, 0 } };
    sdpa_options o = {.start_pos = past, .is_causal = !mask, .has_scale = with_scale, .scale = scale, .window = window,
                      .softcap = softcap, .sinks = with_sinks ? &ts : NULL};
    float * outs[2] = {o1, o2};
    for (int j = 0; ok && j < 2; j++) {
        sdpa_tensor to = tu_tensor4(outs[j], SDPA_DTYPE_FLOAT32, B, Sq, Hq, D);
        const sdpa_status st = sdpa_kv_cache_step(ctx[j], c[j], &tq, &tkl, &tvl, mask ? &tm : NULL, &o, &to);
        ok &= TU_CHECK(st == SDPA_OK, "step: %s %s", sdpa_status_code(st), sdpa_ctx_last_error(ctx[j]));
    }
    if (TU_CHECK(ok, "create / update / step")) {
        tu_identical("1 vs 2 threads", o1, o2, nq, tq.dims);
        sdpa_tensor tkd = tu_tensor4(kd, SDPA_DTYPE_FLOAT32, B, S, Hkv, D), tvd = tu_tensor4(vd, SDPA_DTYPE_FLOAT32, B, S, Hkv, D);
        TU_CHECK(sdpa_kv_cache_read(g_ctx1, c[0], 0, S, &tkd, &tvd) == SDPA_OK, "read");
        naive_params np = {.B = B, .Sq = Sq, .Skv = S, .Hq = Hq, .Hkv = Hkv, .D = D, .start_pos = past, .is_causal = !mask,
                           .mask_kind = mode == 1 ? NAIVE_MASK_FLOAT : mode == 2 ? NAIVE_MASK_BOOL : NAIVE_MASK_NONE,
                           .mask = mask, .mask_cols = S, .has_scale = with_scale, .scale = scale, .window = window,
                           .softcap = softcap, .sinks = with_sinks ? sinks : NULL};
        TU_CHECK(naive_sdpa(&np, q, kd, vd, ref) == 0, "reference");
        /* int8: the contract's bound (sharper softmaxes than the fixed cases amplify the int16 q rounding) */
        tu_close_tol("vs the float64 reference over the stored values", o1, ref, nq, tq.dims,
                     is_int(kdt) || is_int(vdt) ? 2e-3 : TU_TOL);
    }
    for (int j = 0; j < 2; j++) sdpa_kv_cache_free(c[j]);
    free(k); free(v); free(q); free(kd); free(vd); free(o1); free(o2); free(sinks); free(ref); free(mask);
    free(kp); free(vp); free(kl); free(vl);
}

static void test_random_cases(void) {
    const char * env = getenv("SDPA_RANDOM_CASES");  /* more for a soak run */
    const uint64_t n = env ? strtoull(env, NULL, 10) : 300;
    for (uint64_t seed = 1; seed <= n; seed++) random_case(seed);
}

int main(void) {
    double t0 = tu_seconds();
    if (!tu_ctx_pair(&g_ctx1, &g_ctx2)) return 1;
    test_f16_decode();
    test_f16_encode();
    test_int8_rows();
    test_int4_rows();
    test_int8_tiny_query();
    test_int8_nonfinite_query();
    test_f16_nonfinite();
    test_int4_nonfinite(SDPA_DTYPE_INT4);
    test_int4_nonfinite(SDPA_DTYPE_INT8);
    test_attention();
    test_random_cases();
    test_bytes();
    sdpa_ctx_free(g_ctx1);
    sdpa_ctx_free(g_ctx2);
    printf("  %.2f s\n", tu_seconds() - t0);
    return tu_summary("test_dtypes");
}
