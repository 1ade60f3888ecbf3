/*
 * probes.c: where decode time goes. Standalone wasm probes, timed
 * by bench/roofline.mjs in the same process as the decode rows:
 *
 *  - probe_read: read bandwidth (a streaming sum, as bench/lib/limits.c's).
 *  - probe_peak_madd: f32x4 mul+add register peak, 12 independent chains
 *    acc = acc * m + a (8 FLOP per step), 1 thread.
 *  - probe_peak_idot: the integer-dot peak, 12 independent chains
 *    acc = i32x4.dot_i16x8_s(acc, m) + a (8 int16 multiply-adds = 16 op per
 *    step, counted like FLOPs: a multiply-add is 2), 1 thread.
 *  - probe_tiles: one microkernel of the decode over `visits` tiles of 64
 *    keys, tile i at buf + (i % tiles) * probe_tile_bytes(kind, D): with few
 *    tiles (a working set in L1/L2) it is HOT, over a 128 MiB buffer it is
 *    COLD (each tile streamed once, nothing touched ahead: a reference for
 *    what waiting on memory costs, not a limit). Kinds (all 4 query rows):
 *      PROBE_QK_F32  Q.K over a key-transposed float32 tile ([4][D][16], a
 *                    float32 page's K block): per head-dim element d, two K
 *                    vectors (8 keys) times 4 broadcast q: 8 accumulators,
 *                    passes of 8 keys (flash_float.h qk_rows_of, R 4, NV 2)
 *      PROBE_PV_F32  P.V over float32 V rows ([64][D]): 4 rows x 2 vectors
 *                    of D = 8 accumulators, keys in groups of 16 (flash_float.h
 *                    pv_rows_of, 4 rows)
 *      PROBE_QK_I8   Q.K over an int8 K block ([8][D/2][8][2] + scales and
 *                    zero points): dot_i16x8_s of 4 keys' (k[d], k[d+1]) with
 *                    4 rows' broadcast int16 q pairs, then the scores' zero
 *                    point and scales (flash_int8.h i8_qk_rows R 4 NG 1 +
 *                    i8_qk_dequant)
 *      PROBE_PV_I8   P.V over an int8 V block ([32][D][2]): dot_i16x8_s of
 *                    2 keys' values for 8 elements with 4 rows' broadcast
 *                    int16 weight pairs (flash_int8.h i8_pv_rows R 4 NDV 1)
 *      PROBE_QK_F16  Q.K over a float16 page's key-transposed K block: each
 *                    group of 16 keys converted (f16x4_finite_scaled) into
 *                    an L1 buffer, then PROBE_QK_F32's passes over it
 *                    (flash.c tile_scores_f16)
 *      PROBE_PV_F16  P.V over float16 V rows: each 16 rows converted, then
 *                    PROBE_PV_F32's loop over them (flash.c tile_values_f16)
 *    FLOP (or int op) per tile: 4 rows x 64 keys x D x 2, as the bound counts.
 *
 * These are copies of the shapes of src/kernels/flash.c and flash_int8.h
 * (as of the commit that added this file), not the library's code: no
 * softmax, no masks, no touch-ahead, no merges. Built by
 * bench/lib/build-limits.mjs with emcc -O3 -msimd128 (no threads).
 */
#include <emscripten.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <wasm_simd128.h>

#include "probe_loops.h"

#define TILE 64   /* keys per tile (TILE_KEYS) */
#define KG 16     /* keys per group of a float key-transposed block (SDPA_PAGE_KEY_GROUP) */
#define MAX_D 256

enum { PROBE_QK_F32, PROBE_PV_F32, PROBE_QK_I8, PROBE_PV_I8, PROBE_QK_F16, PROBE_PV_F16, PROBE_KINDS };

/* ---------------------------------------------------------------- memory */

EMSCRIPTEN_KEEPALIVE void * probe_alloc(size_t bytes) { return aligned_alloc(64, (bytes + 63) & ~(size_t)63); }
EMSCRIPTEN_KEEPALIVE void probe_free(void * p) { free(p); }

/* 32-bit words of two float16 halves in [0.5, 2) (0x3800 .. 0x3fff): finite
 * normal halves for the float16 probes, normal float32 values in [3e-5, 1)
 * for the float32 ones (no subnormals, which some CPUs compute slowly), any
 * int8 for the int8 ones. n a multiple of 4. Every page is committed before
 * timing. */
EMSCRIPTEN_KEEPALIVE void probe_fill(uint32_t * p, size_t n) {
    uint32_t x = 0x9e3779b9u;
    for (size_t i = 0; i < n / 4; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        p[i] = 0x38003800u | (x & 0x07ff07ffu);
    }
}

/* int8 tiles carry their scales / zero points (as the page does after its block). */
EMSCRIPTEN_KEEPALIVE size_t probe_tile_bytes(int kind, int D) {
    size_t b;
    switch (kind) {
        case PROBE_QK_F32: case PROBE_PV_F32: b = (size_t)TILE * D * 4; break;
        case PROBE_QK_F16: case PROBE_PV_F16: b = (size_t)TILE * D * 2; break;
        case PROBE_QK_I8: b = (size_t)TILE * D + TILE * 4 + TILE; break;
        default: b = (size_t)TILE * D; break;
    }
    return (b + 63) & ~(size_t)63;
}

/* ------------------------------------------------------------ read bandwidth */

/* The sum of n bytes (a multiple of 128) of floats with SIMD128 loads into 8
 * independent accumulators (bench/lib/limits.c's read, 1 thread): the read
 * bandwidth, sampled between the other probes and the decode rounds. */
EMSCRIPTEN_KEEPALIVE double probe_read(const float * p, size_t bytes) { return read_sum(p, bytes / 4); }

/* ------------------------------------------------------------ register peaks */

/* mul+add: limits.c's 12-chain peak (probe_loops.h; this file is built without relaxed SIMD) */
EMSCRIPTEN_KEEPALIVE double probe_peak_madd(int iters, float seed) { return madd12(iters, seed); }

/* The chain goes through the dot and the add (as mul+add's does): acc's i32
 * lanes are read as int16 pairs; wrap-around is defined and harmless. */
#define IDOT_STEP(v) v = wasm_i32x4_add(wasm_i32x4_dot_i16x8(v, vm), va)

EMSCRIPTEN_KEEPALIVE double probe_peak_idot(int iters, int seed) {
    const v128_t vm = wasm_i16x8_splat((int16_t)(3 + (seed & 7)));
    const v128_t va = wasm_i32x4_splat(0x00010001);
    v128_t v0 = wasm_i32x4_splat(seed), v1 = wasm_i32x4_splat(seed + 1), v2 = wasm_i32x4_splat(seed + 2),
           v3 = wasm_i32x4_splat(seed + 3), v4 = wasm_i32x4_splat(seed + 4), v5 = wasm_i32x4_splat(seed + 5),
           v6 = wasm_i32x4_splat(seed + 6), v7 = wasm_i32x4_splat(seed + 7), v8 = wasm_i32x4_splat(seed + 8),
           v9 = wasm_i32x4_splat(seed + 9), v10 = wasm_i32x4_splat(seed + 10), v11 = wasm_i32x4_splat(seed + 11);
    for (int i = 0; i < iters; i++) {
        IDOT_STEP(v0); IDOT_STEP(v1); IDOT_STEP(v2); IDOT_STEP(v3);
        IDOT_STEP(v4); IDOT_STEP(v5); IDOT_STEP(v6); IDOT_STEP(v7);
        IDOT_STEP(v8); IDOT_STEP(v9); IDOT_STEP(v10); IDOT_STEP(v11);
    }
    v0 = wasm_i32x4_add(wasm_i32x4_add(wasm_i32x4_add(v0, v1), wasm_i32x4_add(v2, v3)),
                        wasm_i32x4_add(wasm_i32x4_add(v4, v5), wasm_i32x4_add(v6, v7)));
    v8 = wasm_i32x4_add(wasm_i32x4_add(v8, v9), wasm_i32x4_add(v10, v11));
    v0 = wasm_i32x4_add(v0, v8);
    return (double)wasm_i32x4_extract_lane(v0, 0) + (double)wasm_i32x4_extract_lane(v0, 3);
}

/* --------------------------------------------------------------- state */

/* What the microkernels read besides the tiles (L1-resident, as in the kernel's
 * per-thread scratch): 4 query rows broadcast per element (float) or per
 * element pair (int16), the tile's scores / weights, 4 accumulator rows. */
static v128_t qb[MAX_D * 4];               /* [D][4] f32 splats, or [D/2][4] int16-pair splats */
static float scores[4 * TILE];             /* Q.K output; P.V's float weights */
static int16_t wq[4 * TILE];               /* P.V's int16 weights */
static float acc[4 * MAX_D];
static float qscale[4] = { 1e-3f, 2e-3f, 3e-3f, 4e-3f };
static int32_t qsum[4] = { 11, 12, 13, 14 }, wzp[4] = { 5, 6, 7, 8 };
static float wscale[4] = { 1e-5f, 2e-5f, 3e-5f, 4e-5f };

static void setup_state(int kind, int D) {
    for (int d = 0; d < D; d++)
        for (int r = 0; r < 4; r++) {
            if (kind == PROBE_QK_I8) qb[d * 4 + r] = wasm_i16x8_make(d + r, d - r, d + r, d - r, d + r, d - r, d + r, d - r);
            else qb[d * 4 + r] = wasm_f32x4_splat(0.01f * (float)((d * 7 + r) % 13) - 0.06f);
        }
    for (int i = 0; i < 4 * TILE; i++) {
        scores[i] = 1.0f / (float)(1 + i % 17);
        wq[i] = (int16_t)(i * 37 % 32767);
    }
    for (int i = 0; i < 4 * MAX_D; i++) acc[i] = 0.0f;
}

/* ------------------------------------------------------------- float Q.K */

/* float16: finite halves times 2^-112, exactly (the kernel's
 * f16x4_finite_scaled: its other factor, q or the weights, carries 2^112),
 * n halves at a time into a float32 buffer that stays in L1 */
static float f16buf[MAX_D * 16];
static inline void convert_f16(const uint16_t * h, size_t n) {
    for (size_t i = 0; i < n; i += 4)
        wasm_v128_store(f16buf + i, wasm_v128_and(wasm_i32x4_shl(wasm_i32x4_load16x4(h + i), 13),
                                                  wasm_i32x4_splat((int32_t)0x8FFFE000u)));
}

#define FMADD(acc, a, b) wasm_f32x4_add(acc, wasm_f32x4_mul(a, b))

/* s[r][0 .. 8) = q_r . k for 4 rows and 8 keys of a key-transposed group pass */
static inline __attribute__((always_inline)) void qk_pass(const v128_t * qs, const float * k, int D, float * s) {
    v128_t a[4][2];
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < 2; v++) a[r][v] = wasm_f32x4_splat(0.0f);
    for (int d = 0; d < D; d++, qs += 4) {
        v128_t vk[2];
        for (int v = 0; v < 2; v++) vk[v] = wasm_v128_load(k + (size_t)d * KG + 4 * (size_t)v);
        for (int r = 0; r < 4; r++) {
            const v128_t w = qs[r];
            for (int v = 0; v < 2; v++) a[r][v] = FMADD(a[r][v], w, vk[v]);
        }
    }
    for (int r = 0; r < 4; r++)
        for (int v = 0; v < 2; v++) wasm_v128_store(s + (size_t)r * TILE + 4 * v, a[r][v]);
}

/* float32: passes of 8 keys in place; float16: each group of KG keys converted, then its passes */
static inline __attribute__((always_inline)) void qk_tile(const void * tile, int D, const int F16) {
    const size_t ldg = (size_t)D * KG;
    for (int t = 0; t < TILE; t += 8) {
        const float * kt;
        if (F16) {
            if (t % KG == 0) convert_f16((const uint16_t *)tile + (size_t)(t / KG) * ldg, ldg);
            kt = f16buf + t % KG;
        } else {
            kt = (const float *)tile + (size_t)(t / KG) * ldg + t % KG;
        }
        qk_pass(qb, kt, D, scores + t);
    }
}

/* ------------------------------------------------------------- float P.V */

/* acc[r] += sum_t p[r][t0 + t] v_t for 4 rows and 16 float32 rows v (D apart) */
static inline __attribute__((always_inline)) void pv_group(const float * v, int t0, int D) {
    const float * p = scores;
    const size_t ldv = (size_t)D, ldp = TILE, lda = (size_t)D;
    for (int d = 0; d + 8 <= D; d += 8) {
        v128_t c00 = wasm_v128_load(acc + d), c01 = wasm_v128_load(acc + d + 4);
        v128_t c10 = wasm_v128_load(acc + lda + d), c11 = wasm_v128_load(acc + lda + d + 4);
        v128_t c20 = wasm_v128_load(acc + 2 * lda + d), c21 = wasm_v128_load(acc + 2 * lda + d + 4);
        v128_t c30 = wasm_v128_load(acc + 3 * lda + d), c31 = wasm_v128_load(acc + 3 * lda + d + 4);
        size_t vt = (size_t)d;
        for (int t = t0; t < t0 + 16; t++, vt += ldv) {
            const v128_t v0 = wasm_v128_load(v + vt), v1 = wasm_v128_load(v + vt + 4);
            v128_t w = wasm_v128_load32_splat(p + t);
            c00 = FMADD(c00, w, v0); c01 = FMADD(c01, w, v1);
            w = wasm_v128_load32_splat(p + ldp + t);
            c10 = FMADD(c10, w, v0); c11 = FMADD(c11, w, v1);
            w = wasm_v128_load32_splat(p + 2 * ldp + t);
            c20 = FMADD(c20, w, v0); c21 = FMADD(c21, w, v1);
            w = wasm_v128_load32_splat(p + 3 * ldp + t);
            c30 = FMADD(c30, w, v0); c31 = FMADD(c31, w, v1);
        }
        wasm_v128_store(acc + d, c00); wasm_v128_store(acc + d + 4, c01);
        wasm_v128_store(acc + lda + d, c10); wasm_v128_store(acc + lda + d + 4, c11);
        wasm_v128_store(acc + 2 * lda + d, c20); wasm_v128_store(acc + 2 * lda + d + 4, c21);
        wasm_v128_store(acc + 3 * lda + d, c30); wasm_v128_store(acc + 3 * lda + d + 4, c31);
    }
}

/* float32: V rows in place; float16: each 16 rows converted, then the same */
static inline __attribute__((always_inline)) void pv_tile(const void * v, int D, const int F16) {
    for (int t0 = 0; t0 < TILE; t0 += 16) {
        if (F16) {
            convert_f16((const uint16_t *)v + (size_t)t0 * D, (size_t)16 * D);
            pv_group(f16buf, t0, D);
        } else {
            pv_group((const float *)v + (size_t)t0 * D, t0, D);
        }
    }
}

/* -------------------------------------------------------------- int8 Q.K */

/* One pass of 8 keys: 4 rows x (keys 0-3, 4-7) accumulators over P element pairs,
 * then the scores: (acc - zp * qsum) * (qscale * kscale). */
static void i8_qk_tile(const int8_t * tile, int D) {
    const int P = D / 2;
    const size_t ldk = (size_t)P * 16;
    const float * ks = (const float *)(const void *)(tile + (size_t)TILE * D);
    const int8_t * zps = tile + (size_t)TILE * D + TILE * 4;
    for (int t = 0; t < TILE; t += 8) {
        const int8_t * k = tile + (size_t)(t / 8) * ldk;
        const v128_t * q = qb;
        v128_t a[4][2];
        for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = wasm_i32x4_splat(0);
        for (int i = 0; i < P; i++, q += 4, k += 16) {
            const v128_t kv = wasm_v128_load(k);
            const v128_t lo = wasm_i16x8_extend_low_i8x16(kv), hi = wasm_i16x8_extend_high_i8x16(kv);
            for (int r = 0; r < 4; r++) {
                a[r][0] = wasm_i32x4_add(a[r][0], wasm_i32x4_dot_i16x8(lo, q[r]));
                a[r][1] = wasm_i32x4_add(a[r][1], wasm_i32x4_dot_i16x8(hi, q[r]));
            }
        }
        const v128_t z16 = wasm_i16x8_load8x8(zps + t);
        const v128_t zp[2] = { wasm_i32x4_extend_low_i16x8(z16), wasm_i32x4_extend_high_i16x8(z16) };
        const v128_t sc[2] = { wasm_v128_load(ks + t), wasm_v128_load(ks + t + 4) };
        for (int r = 0; r < 4; r++) {
            const v128_t vqsum = wasm_i32x4_splat(qsum[r]), vqs = wasm_f32x4_splat(qscale[r]);
            for (int h = 0; h < 2; h++) {
                const v128_t dot = wasm_i32x4_sub(a[r][h], wasm_i32x4_mul(zp[h], vqsum));
                wasm_v128_store(scores + (size_t)r * TILE + t + 4 * h,
                                wasm_f32x4_mul(wasm_f32x4_convert_i32x4(dot), wasm_f32x4_mul(vqs, sc[h])));
            }
        }
    }
}

/* -------------------------------------------------------------- int8 P.V */

/* acc[r][d .. d+8) += (sum_t wq[r][t] v_t - wzp_r) * wscale_r, 8 elements per pass. */
static void i8_pv_tile(const int8_t * vb, int D) {
    const size_t ldv = 2 * (size_t)D, lda = (size_t)D;
    const int np = TILE / 2;
    for (int d = 0; d + 8 <= D; d += 8) {
        const int8_t * v = vb + 2 * (size_t)d;
        v128_t s[4][2];
        for (int r = 0; r < 4; r++) s[r][0] = s[r][1] = wasm_i32x4_splat(0);
        for (int i = 0; i < np; i++, v += ldv) {
            const v128_t vv = wasm_v128_load(v);
            const v128_t lo = wasm_i16x8_extend_low_i8x16(vv), hi = wasm_i16x8_extend_high_i8x16(vv);
            for (int r = 0; r < 4; r++) {
                const v128_t w = wasm_v128_load32_splat(wq + (size_t)r * TILE + 2 * i);
                s[r][0] = wasm_i32x4_add(s[r][0], wasm_i32x4_dot_i16x8(lo, w));
                s[r][1] = wasm_i32x4_add(s[r][1], wasm_i32x4_dot_i16x8(hi, w));
            }
        }
        for (int r = 0; r < 4; r++) {
            const v128_t vzp = wasm_i32x4_splat(wzp[r]), ws = wasm_f32x4_splat(wscale[r]);
            float * a = acc + (size_t)r * lda + d;
            for (int j = 0; j < 2; j++)
                wasm_v128_store(a + 4 * j, FMADD(wasm_v128_load(a + 4 * j), wasm_f32x4_convert_i32x4(wasm_i32x4_sub(s[r][j], vzp)), ws));
        }
    }
}

/* ---------------------------------------------------------------- driver */

static __attribute__((noinline)) void run_qk_f32(const uint8_t * buf, size_t tb, size_t tiles, int visits, int D) {
    for (int i = 0; i < visits; i++) qk_tile(buf + (size_t)(i % tiles) * tb, D, 0);
}
static __attribute__((noinline)) void run_qk_f16(const uint8_t * buf, size_t tb, size_t tiles, int visits, int D) {
    for (int i = 0; i < visits; i++) qk_tile(buf + (size_t)(i % tiles) * tb, D, 1);
}
static __attribute__((noinline)) void run_pv_f32(const uint8_t * buf, size_t tb, size_t tiles, int visits, int D) {
    for (int i = 0; i < visits; i++) pv_tile(buf + (size_t)(i % tiles) * tb, D, 0);
}
static __attribute__((noinline)) void run_pv_f16(const uint8_t * buf, size_t tb, size_t tiles, int visits, int D) {
    for (int i = 0; i < visits; i++) pv_tile(buf + (size_t)(i % tiles) * tb, D, 1);
}
static __attribute__((noinline)) void run_qk_i8(const uint8_t * buf, size_t tb, size_t tiles, int visits, int D) {
    for (int i = 0; i < visits; i++) i8_qk_tile((const int8_t *)(buf + (size_t)(i % tiles) * tb), D);
}
static __attribute__((noinline)) void run_pv_i8(const uint8_t * buf, size_t tb, size_t tiles, int visits, int D) {
    for (int i = 0; i < visits; i++) i8_pv_tile((const int8_t *)(buf + (size_t)(i % tiles) * tb), D);
}

/* Runs microkernel `kind` over `visits` tiles (tile i % tiles of buf, tiles
 * probe_tile_bytes apart); D a multiple of 16, at most MAX_D. Returns a
 * checksum of the scores and accumulators (so nothing is optimised away), or
 * -1 for an unknown kind or D. */
EMSCRIPTEN_KEEPALIVE double probe_tiles(int kind, const uint8_t * buf, size_t tiles, int visits, int D) {
    if (kind < 0 || kind >= PROBE_KINDS || D < 16 || D > MAX_D || D % 16 || tiles < 1) return -1.0;
    const size_t tb = probe_tile_bytes(kind, D);
    setup_state(kind, D);
    switch (kind) {
        case PROBE_QK_F32: run_qk_f32(buf, tb, tiles, visits, D); break;
        case PROBE_PV_F32: run_pv_f32(buf, tb, tiles, visits, D); break;
        case PROBE_QK_I8: run_qk_i8(buf, tb, tiles, visits, D); break;
        case PROBE_PV_I8: run_pv_i8(buf, tb, tiles, visits, D); break;
        case PROBE_QK_F16: run_qk_f16(buf, tb, tiles, visits, D); break;
        default: run_pv_f16(buf, tb, tiles, visits, D); break;
    }
    double sum = 0.0;
    for (int i = 0; i < 4 * TILE; i++) sum += scores[i];
    for (int i = 0; i < 4 * D; i++) sum += acc[i];
    return sum;
}
