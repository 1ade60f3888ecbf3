/*
 * test_numerics.c: sdpa_custom (SIMD fast path, 1 and 2 threads) and the
 * library's scalar reference (sdpa_custom_reference and
 * sdpa_ctx_use_reference) against the tests' own float64 reference
 * (naive_ref.c), at sizes around the SIMD width.
 *
 * Matrix: D in {1,3,4,5,8,15,16,17,64,80,128,256},
 * Skv in {1,3,4,5,31,33,113,512,1000}, Sq in {1,2,7,64,130}, GQA ratios
 * {1,2,4,7,8} incl. MQA (Hkv = 1), B in {1,3}; causal with many startPos,
 * non-causal, additive masks with -inf, bool masks, fully masked rows,
 * large logits (+-1e4, exact integer data so f32 and f64 agree), custom scale.
 * Every value of every list is covered by a sweep; the remaining
 * combinations are sampled with a seeded RNG (more with SDPA_TEST_FULL=1,
 * fewer with SDPA_TEST_QUICK=1).
 *
 * Every case checks (tu_custom_paths in testutil.c):
 *   - status SDPA_OK and an empty sdpa_ctx_last_error, on every path;
 *   - fast path, 1 thread and 2 threads, within 1e-5 * (1 + max|ref|);
 *   - 1-thread and 2-thread fast results bit-identical;
 *   - library reference within the same tolerance: sdpa_custom_reference
 *     always, the sdpa_ctx_use_reference switch every other case (cost);
 *   - every output element written (out starts as a NaN sentinel);
 *   - fully masked rows exactly zero, on every path;
 *   - K/V rows >= N are never read (they hold NaN).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

#include "naive_ref.h"
#include "sdpa.h"
#include "testutil.h"

enum { MODE_PLAIN = 0, MODE_CAUSAL = 1, MODE_FMASK = 2, MODE_BMASK = 3 };
static const char * const mode_name[] = {"plain", "causal", "float-mask", "bool-mask"};

enum { DATA_NORMAL = 0, DATA_LARGE = 1 };

typedef struct tcase {
    int32_t B, Sq, Skv, Hq, Hkv, D;
    int mode;
    int64_t sp;
    int32_t mask_cols;    ///< N for masked modes
    double p_inf;         ///< probability of a -inf / false mask entry
    double p_row;         ///< probability of a fully masked row
    int data;             ///< DATA_*
    double mask_offset;   ///< added to every finite float mask entry (large logits)
    int has_scale;
    float scale;
    const char * label;
} tcase;

static const int D_LIST[] = {1, 3, 4, 5, 8, 15, 16, 17, 64, 80, 128, 256};
static const int SKV_LIST[] = {1, 3, 4, 5, 31, 33, 113, 512, 1000};
static const int SQ_LIST[] = {1, 2, 7, 64, 130};
static const int R_LIST[] = {1, 2, 4, 7, 8};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static sdpa_ctx * g_ctx1;  /* 1 thread */
static sdpa_ctx * g_ctx2;  /* 2 threads */
static long g_cases;
static double g_macs;

static int32_t n_keys_of(const tcase * tc) {
    return (tc->mode == MODE_FMASK || tc->mode == MODE_BMASK) ? tc->mask_cols
                                                                : (int32_t)(tc->sp + tc->Sq);
}

static double case_macs(const tcase * tc) {
    return (double)tc->B * tc->Sq * tc->Hq * (double)n_keys_of(tc) * tc->D;
}

static void describe(const tcase * tc, uint64_t seed) {
    snprintf(tu_context, sizeof tu_context,
             "%s: B=%d Sq=%d Skv=%d Hq=%d Hkv=%d D=%d mode=%s sp=%" PRId64
             " N=%d p_inf=%.2f p_row=%.2f data=%s offset=%g scale=%s%g seed=%" PRIu64,
             tc->label, tc->B, tc->Sq, tc->Skv, tc->Hq, tc->Hkv, tc->D, mode_name[tc->mode], tc->sp,
             n_keys_of(tc), tc->p_inf, tc->p_row, tc->data == DATA_LARGE ? "large" : "normal",
             tc->mask_offset, tc->has_scale ? "" : "default/", tc->has_scale ? (double)tc->scale
                                                                            : 1.0 / sqrt((double)tc->D),
             seed);
}

/* Integer range for "large logit" data so that |score| ~ 1e4 with exact f32 sums. */
static int large_int_range(const tcase * tc) {
    return tc->has_scale ? 40 : 170;
}

static void fill_qkv(const tcase * tc, tu_rng * rng, float * q, float * k, float * v, int32_t n_keys) {
    const size_t nq = (size_t)tc->B * tc->Sq * tc->Hq * tc->D;
    const size_t row = (size_t)tc->Hkv * tc->D;
    const int K = large_int_range(tc);
    /* normal data: scores have a standard deviation of about 2 whatever the
       scale (f32 logits much larger than that are not accurate to 1e-5) */
    const double s = tc->has_scale ? (double)tc->scale : 1.0 / sqrt((double)tc->D);
    double a = 2.0 / (s * sqrt((double)tc->D));
    if (a > 1e3) a = 1e3;
    for (size_t i = 0; i < nq; i++)
        q[i] = tc->data == DATA_LARGE ? (float)tu_rng_int(rng, -K, K) : (float)(a * tu_rng_normal(rng));
    for (int32_t b = 0; b < tc->B; b++) {
        for (int32_t t = 0; t < tc->Skv; t++) {
            float * kr = k + ((size_t)b * tc->Skv + (size_t)t) * row;
            float * vr = v + ((size_t)b * tc->Skv + (size_t)t) * row;
            for (size_t j = 0; j < row; j++) {
                if (t >= n_keys) {  /* not part of the op: must never be read */
                    kr[j] = NAN;
                    vr[j] = NAN;
                } else {
                    kr[j] = tc->data == DATA_LARGE ? (float)tu_rng_int(rng, -K, K) : tu_rng_normal(rng);
                    vr[j] = tu_rng_uniform(rng, -3.0f, 3.0f);
                }
            }
        }
    }
}

static void fill_mask(const tcase * tc, tu_rng * rng, void * mask) {
    const int32_t N = tc->mask_cols;
    for (int32_t i = 0; i < tc->Sq; i++) {
        int full = tu_rng_unit(rng) < tc->p_row;
        for (int32_t t = 0; t < N; t++) {
            size_t at = (size_t)i * N + (size_t)t;
            int off = full || tu_rng_unit(rng) < tc->p_inf;
            if (tc->mode == MODE_BMASK) {
                ((uint8_t *)mask)[at] = off ? 0 : (uint8_t)tu_rng_int(rng, 1, 255);
            } else {
                float val;
                if (off) val = -INFINITY;
                else if (tc->data == DATA_LARGE) val = (float)(tc->mask_offset + tu_rng_int(rng, -3, 3));
                else val = (float)(tc->mask_offset + tu_rng_normal(rng));
                ((float *)mask)[at] = val;
            }
        }
    }
}

/* A fully masked row of one output is exactly zero (not merely close to it):
   one check per such row. */
typedef struct masked_rows {
    const tcase * tc;
    const void * mask;
} masked_rows;

static void check_masked_rows(int path, const char * what, const float * out, const double * ref,
                              const void * arg) {
    (void)path;
    (void)ref;
    const masked_rows * mr = arg;
    const tcase * tc = mr->tc;
    const int32_t N = tc->mask_cols;
    long bad = 0;
    for (int32_t i = 0; i < tc->Sq && !bad; i++) {
        int full = 1;
        for (int32_t t = 0; t < N && full; t++) {
            size_t at = (size_t)i * N + (size_t)t;
            full = tc->mode == MODE_BMASK ? ((const uint8_t *)mr->mask)[at] == 0
                                          : ((const float *)mr->mask)[at] == -INFINITY;
        }
        if (!full) continue;
        for (int32_t b = 0; b < tc->B; b++)
            for (size_t j = 0; j < (size_t)tc->Hq * tc->D; j++) {
                size_t at = (((size_t)b * tc->Sq + (size_t)i) * tc->Hq) * tc->D + j;
                if (out[at] != 0.0f) bad++;
            }
        TU_CHECK(bad == 0, "%s: fully masked row %d: %ld outputs not exactly 0", what, i, bad);
    }
}

static void run_case(const tcase * tc, uint64_t seed) {
    tu_rng rng;
    tu_rng_seed(&rng, seed);
    describe(tc, seed);
    g_cases++;
    g_macs += case_macs(tc);

    const int masked = tc->mode == MODE_FMASK || tc->mode == MODE_BMASK;
    const int32_t N = n_keys_of(tc);
    const size_t nq = (size_t)tc->B * tc->Sq * tc->Hq * tc->D;
    const size_t nkv = (size_t)tc->B * tc->Skv * tc->Hkv * tc->D;
    const size_t nm = masked ? (size_t)tc->Sq * (size_t)N : 0;

    float * q = tu_malloc(nq * sizeof(float));
    float * k = tu_malloc(nkv * sizeof(float));
    float * v = tu_malloc(nkv * sizeof(float));
    void * mask = masked ? tu_malloc(nm * (tc->mode == MODE_BMASK ? 1 : sizeof(float))) : NULL;
    double * ref = tu_malloc(nq * sizeof(double));
    float * out1 = tu_malloc(nq * sizeof(float));
    float * out2 = tu_malloc(nq * sizeof(float));
    float * outr = tu_malloc(nq * sizeof(float));

    fill_qkv(tc, &rng, q, k, v, N);
    if (masked) fill_mask(tc, &rng, mask);

    naive_params np = {
        .B = tc->B, .Sq = tc->Sq, .Skv = tc->Skv, .Hq = tc->Hq, .Hkv = tc->Hkv, .D = tc->D,
        .mask_kind = tc->mode == MODE_FMASK ? NAIVE_MASK_FLOAT : tc->mode == MODE_BMASK ? NAIVE_MASK_BOOL
                                                                                        : NAIVE_MASK_NONE,
        .mask = mask, .mask_cols = N, .start_pos = tc->sp, .is_causal = tc->mode == MODE_CAUSAL,
        .has_scale = tc->has_scale, .scale = (double)tc->scale,
    };
    int nrc = naive_sdpa(&np, q, k, v, ref);
    if (!TU_CHECK(nrc == 0, "test bug: naive reference rejected the case")) goto done;
    for (size_t i = 0; i < nq; i++) {
        if (!isfinite(ref[i])) {
            TU_CHECK(0, "test bug: naive reference is not finite at %zu", i);
            goto done;
        }
    }

    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, tc->B, tc->Sq, tc->Hq, tc->D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, tc->B, tc->Skv, tc->Hkv, tc->D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, tc->B, tc->Skv, tc->Hkv, tc->D);
    sdpa_tensor tm = tu_tensor2(mask, tc->mode == MODE_BMASK ? SDPA_DTYPE_BOOL : SDPA_DTYPE_FLOAT32, tc->Sq, N);
    sdpa_options opt = {
        .start_pos = tc->sp, .is_causal = tc->mode == MODE_CAUSAL, .has_scale = tc->has_scale,
        .scale = tc->scale, .dropout_p = 0.0f,
    };
    /* fast path 1 and 2 threads, sdpa_custom_reference, and (every other
       case: cost) the reference switch; fully masked rows exactly zero */
    masked_rows mr = {tc, mask};
    tu_custom_paths(g_ctx1, g_ctx2, &tq, &tk, &tv, masked ? &tm : NULL, &opt, ref, out1, out2, outr,
                    g_cases % 2 == 0, masked ? check_masked_rows : NULL, &mr);

done:
    free(q);
    free(k);
    free(v);
    free(mask);
    free(ref);
    free(out1);
    free(out2);
    free(outr);
    tu_context[0] = 0;
}

/* ---- case builders ---------------------------------------------------- */

static tcase base_case(const char * label) {
    tcase tc;
    memset(&tc, 0, sizeof tc);
    tc.label = label;
    tc.B = 1;
    tc.Hkv = 1;
    tc.Hq = 1;
    tc.mode = MODE_PLAIN;
    return tc;
}

/* Picks a mode and a start position valid for (Sq, Skv); masked modes get N. */
static void pick_mode(tcase * tc, tu_rng * rng, int mode) {
    if (mode < 0) mode = tu_rng_int(rng, 0, 3);
    if (tc->Sq > tc->Skv && (mode == MODE_PLAIN || mode == MODE_CAUSAL)) mode = tu_rng_int(rng, 2, 3);
    tc->mode = mode;
    if (mode == MODE_PLAIN || mode == MODE_CAUSAL) {
        int64_t room = tc->Skv - tc->Sq;
        /* half the time close to the end, so many keys are attended */
        tc->sp = tu_rng_int(rng, 0, 1) ? tu_rng_int(rng, 0, (int)room)
                                       : room - tu_rng_int(rng, 0, (int)(room < 3 ? room : 3));
    } else {
        /* N: usually all of Skv, sometimes fewer; startPos is ignored with a mask */
        tc->mask_cols = tu_rng_int(rng, 0, 2) ? tc->Skv : tu_rng_int(rng, 1, tc->Skv);
        int which = tu_rng_int(rng, 0, 3);
        tc->sp = which == 0 ? 0 : which == 1 ? tu_rng_int(rng, 0, 1000)
                                            : which == 2 ? (int64_t)tc->Skv : ((int64_t)1 << 40);
        double pinf[] = {0.0, 0.1, 0.5, 0.9};
        tc->p_inf = pinf[tu_rng_int(rng, 0, 3)];
        tc->p_row = tu_rng_int(rng, 0, 2) == 0 ? 0.25 : 0.0;
    }
}

static void pick_heads(tcase * tc, tu_rng * rng, int r, int max_hkv) {
    if (r <= 0) r = tu_rng_pick(rng, R_LIST, COUNT(R_LIST));
    tc->Hkv = tu_rng_int(rng, 1, max_hkv);
    tc->Hq = tc->Hkv * r;
}

/* Shrinks B, heads, Sq until the case costs at most max_macs (keeps "fixed" fields). */
enum { FIX_B = 1, FIX_HEADS = 2, FIX_SQ = 4 };
static void fit_budget(tcase * tc, double max_macs, int fixed) {
    while (case_macs(tc) > max_macs) {
        if (!(fixed & FIX_B) && tc->B > 1) tc->B = 1;
        else if (!(fixed & FIX_HEADS) && tc->Hkv > 1) {
            tc->Hq /= tc->Hkv;
            tc->Hkv = 1;
        } else if (!(fixed & FIX_HEADS) && tc->Hq > 1) tc->Hq = tc->Hkv = 1;
        else if (!(fixed & FIX_SQ) && tc->Sq > 1 && (tc->mode == MODE_FMASK || tc->mode == MODE_BMASK)) {
            tc->Sq = tc->Sq / 2;
        } else break;
    }
}

static uint64_t g_base = 0;  /* SDPA_TEST_SEED */
static uint64_t g_seed = 20240601;

static void sweep_d_skv(double budget) {
    /* every D with every Skv */
    tu_rng rng;
    tu_rng_seed(&rng, 1 + g_base);
    for (int a = 0; a < COUNT(D_LIST); a++) {
        for (int b = 0; b < COUNT(SKV_LIST); b++) {
            tcase tc = base_case("D x Skv sweep");
            tc.D = D_LIST[a];
            tc.Skv = SKV_LIST[b];
            static const int small_sq[] = {1, 2, 7};
            tc.Sq = tu_rng_pick(&rng, small_sq, 3);
            pick_heads(&tc, &rng, 0, 2);
            tc.B = tu_rng_int(&rng, 0, 4) == 0 ? 3 : 1;
            pick_mode(&tc, &rng, -1);
            if (tu_rng_int(&rng, 0, 3) == 0) {
                tc.has_scale = 1;
                tc.scale = tu_rng_uniform(&rng, 0.05f, 1.5f);
            }
            fit_budget(&tc, budget, 0);
            run_case(&tc, g_seed++);
        }
    }
}

static void sweep_sq(double budget) {
    tu_rng rng;
    tu_rng_seed(&rng, 2 + g_base);
    for (int a = 0; a < COUNT(SQ_LIST); a++) {
        for (int mode = 0; mode < 4; mode++) {
            for (int rep = 0; rep < 2; rep++) {
                tcase tc = base_case("Sq x mode sweep");
                tc.Sq = SQ_LIST[a];
                tc.Skv = tu_rng_pick(&rng, SKV_LIST, COUNT(SKV_LIST));
                if ((mode == MODE_PLAIN || mode == MODE_CAUSAL) && tc.Skv < tc.Sq) tc.Skv = rep ? tc.Sq : 1000;
                static const int d_small[] = {1, 3, 4, 5, 8, 15, 16, 17, 64};
                tc.D = tu_rng_pick(&rng, d_small, COUNT(d_small));
                pick_heads(&tc, &rng, 0, 2);
                pick_mode(&tc, &rng, mode);
                fit_budget(&tc, budget, FIX_SQ);
                run_case(&tc, g_seed++);
            }
        }
    }
}

static void sweep_gqa(double budget) {
    tu_rng rng;
    tu_rng_seed(&rng, 3 + g_base);
    static const int d_dec[] = {4, 16, 17, 64, 80, 128};
    for (int a = 0; a < COUNT(R_LIST); a++) {
        for (int hkv = 1; hkv <= 2; hkv++) {  /* hkv == 1: MQA */
            const int r = R_LIST[a];
            /* decode, causal, hundreds of attended keys */
            for (int mode = 0; mode < 4; mode++) {
                tcase tc = base_case("GQA decode");
                tc.Sq = 1;
                tc.Skv = tu_rng_int(&rng, 0, 1) ? 512 : 1000;
                tc.Hkv = hkv;
                tc.Hq = hkv * r;
                tc.D = tu_rng_pick(&rng, d_dec, COUNT(d_dec));
                tc.B = tu_rng_int(&rng, 0, 2) == 0 ? 3 : 1;
                tc.mode = mode;
                if (mode == MODE_PLAIN || mode == MODE_CAUSAL) {
                    tc.sp = tu_rng_int(&rng, 300, tc.Skv - 1);
                } else {
                    tc.mask_cols = tu_rng_int(&rng, 300, tc.Skv);
                    tc.sp = tu_rng_int(&rng, 0, tc.mask_cols - 1);
                    tc.p_inf = 0.3;
                }
                fit_budget(&tc, budget, FIX_HEADS);
                run_case(&tc, g_seed++);
            }
            /* prefill, Sq == Skv > 1 */
            static const int pre_len[] = {2, 7, 31, 33, 64, 113, 130};
            static const int d_pre[] = {3, 4, 8, 16, 17, 64};
            for (int mode = 0; mode < 4; mode++) {
                tcase tc = base_case("GQA prefill Sq=Skv");
                tc.Sq = tc.Skv = tu_rng_pick(&rng, pre_len, COUNT(pre_len));
                tc.Hkv = hkv;
                tc.Hq = hkv * r;
                tc.D = tu_rng_pick(&rng, d_pre, COUNT(d_pre));
                tc.mode = mode;
                tc.sp = 0;
                if (mode == MODE_FMASK || mode == MODE_BMASK) {
                    tc.mask_cols = tc.Skv;
                    tc.p_inf = 0.2;
                }
                fit_budget(&tc, budget, FIX_HEADS | FIX_SQ);
                run_case(&tc, g_seed++);
            }
        }
    }
}

static void sweep_batch(double budget) {
    tu_rng rng;
    tu_rng_seed(&rng, 4 + g_base);
    for (int mode = 0; mode < 4; mode++) {
        for (int rep = 0; rep < 3; rep++) {
            tcase tc = base_case("B=3");
            tc.B = 3;
            tc.Sq = tu_rng_pick(&rng, SQ_LIST, 3);
            tc.Skv = tu_rng_pick(&rng, SKV_LIST + 4, 4);
            tc.D = tu_rng_pick(&rng, D_LIST, 9);
            pick_heads(&tc, &rng, 0, 2);
            pick_mode(&tc, &rng, mode);
            fit_budget(&tc, budget, FIX_B);
            run_case(&tc, g_seed++);
        }
    }
}

static void sweep_causal_start_pos(int step) {
    tu_rng rng;
    tu_rng_seed(&rng, 5 + g_base);
    static const int sqs[] = {1, 2, 7};
    for (int a = 0; a < 3; a++) {
        for (int sp = 0; sp + sqs[a] <= 113; sp += step) {
            tcase tc = base_case("causal startPos sweep");
            tc.Sq = sqs[a];
            tc.Skv = 113;
            tc.D = (sp / step) % 2 ? 5 : 16;
            pick_heads(&tc, &rng, 0, 2);
            tc.mode = MODE_CAUSAL;
            tc.sp = sp;
            run_case(&tc, g_seed++);
        }
        /* the last possible position */
        tcase tc = base_case("causal startPos = Skv - Sq");
        tc.Sq = sqs[a];
        tc.Skv = 113;
        tc.D = 17;
        tc.Hkv = 2;
        tc.Hq = 8;
        tc.mode = MODE_CAUSAL;
        tc.sp = 113 - sqs[a];
        run_case(&tc, g_seed++);
    }
    /* prefill after a prefix: Sq = 64 starting at 100 of 1000 (causal) */
    tcase tc = base_case("causal chunked prefill");
    tc.Sq = 64;
    tc.Skv = 1000;
    tc.sp = 100;
    tc.D = 16;
    tc.Hkv = 1;
    tc.Hq = 2;
    tc.mode = MODE_CAUSAL;
    run_case(&tc, g_seed++);
}

static void sweep_masks(void) {
    tu_rng rng;
    tu_rng_seed(&rng, 6 + g_base);
    /* fully masked rows, float and bool, with partially masked rows around them */
    for (int mode = MODE_FMASK; mode <= MODE_BMASK; mode++) {
        for (int rep = 0; rep < 4; rep++) {
            tcase tc = base_case("fully masked rows");
            tc.Sq = tu_rng_pick(&rng, SQ_LIST, 3);
            tc.Skv = tu_rng_pick(&rng, SKV_LIST, 7);
            tc.D = tu_rng_pick(&rng, D_LIST, 9);
            pick_heads(&tc, &rng, 0, 2);
            tc.mode = mode;
            tc.mask_cols = tu_rng_int(&rng, 1, tc.Skv);
            tc.p_row = 0.5;
            tc.p_inf = rep * 0.3;
            run_case(&tc, g_seed++);
        }
        /* every row masked */
        tcase tc = base_case("all rows fully masked");
        tc.Sq = 7;
        tc.Skv = 33;
        tc.D = 17;
        tc.Hkv = 2;
        tc.Hq = 4;
        tc.mode = mode;
        tc.mask_cols = 33;
        tc.p_row = 1.0;
        run_case(&tc, g_seed++);
        /* a single attended key per row, far in the row */
        tcase t2 = base_case("one attended key per row");
        t2.Sq = 2;
        t2.Skv = 1000;
        t2.D = 8;
        t2.Hkv = 1;
        t2.Hq = 7;
        t2.mode = mode;
        t2.mask_cols = 1000;
        t2.p_inf = 0.999;
        run_case(&t2, g_seed++);
    }
    /* mask with fewer columns than Skv; startPos huge but ignored */
    for (int mode = MODE_FMASK; mode <= MODE_BMASK; mode++) {
        tcase tc = base_case("mask N < Skv, huge startPos");
        tc.Sq = 7;
        tc.Skv = 512;
        tc.mask_cols = 300;
        tc.D = 64;
        tc.Hkv = 2;
        tc.Hq = 8;
        tc.mode = mode;
        tc.sp = INT64_C(1) << 40;
        tc.p_inf = 0.1;
        run_case(&tc, g_seed++);
    }
    /* Sq > Skv is fine with a mask */
    for (int mode = MODE_FMASK; mode <= MODE_BMASK; mode++) {
        tcase tc = base_case("mask, Sq > Skv");
        tc.Sq = 130;
        tc.Skv = 5;
        tc.mask_cols = 5;
        tc.D = 15;
        tc.Hkv = 1;
        tc.Hq = 4;
        tc.mode = mode;
        tc.p_inf = 0.3;
        tc.p_row = 0.1;
        run_case(&tc, g_seed++);
    }
}

static void sweep_large_logits(void) {
    tu_rng rng;
    tu_rng_seed(&rng, 7 + g_base);
    for (int a = 0; a < COUNT(D_LIST); a++) {
        const int D = D_LIST[a];
        /* 1/sqrt(D) is exact for powers of 4; otherwise a power-of-two custom scale */
        int pow4 = (D == 1 || D == 4 || D == 16 || D == 64 || D == 256);
        for (int mode = 0; mode < 3; mode++) {
            tcase tc = base_case("large logits");
            tc.data = DATA_LARGE;
            tc.D = D;
            tc.Skv = tu_rng_pick(&rng, SKV_LIST + 3, 5);
            tc.Sq = tu_rng_int(&rng, 1, 3);
            pick_heads(&tc, &rng, 0, 2);
            pick_mode(&tc, &rng, mode);
            if (mode == MODE_FMASK) {
                /* all scores pushed to about +-3e4 */
                tc.mask_offset = tu_rng_int(&rng, 0, 1) ? 30000.0 : -30000.0;
                tc.p_inf = 0.2;
                tc.p_row = 0.0;
            }
            if (!pow4 || tu_rng_int(&rng, 0, 1)) {
                tc.has_scale = 1;
                double want = 1e4 / (sqrt((double)D) * 533.0);
                tc.scale = (float)pow(2.0, floor(log2(want) + 0.5));
            }
            run_case(&tc, g_seed++);
        }
    }
}

static void sweep_scale(void) {
    tu_rng rng;
    tu_rng_seed(&rng, 8 + g_base);
    static const float scales[] = {1.0f, 0.5f, 0.01f, 1e-30f, 0.3f, 2.0f, 0.125f};
    for (int a = 0; a < COUNT(scales); a++) {
        tcase tc = base_case("custom scale");
        tc.has_scale = 1;
        tc.scale = scales[a];
        tc.D = tu_rng_pick(&rng, D_LIST, COUNT(D_LIST));
        tc.Skv = tu_rng_pick(&rng, SKV_LIST, COUNT(SKV_LIST) - 1);
        tc.Sq = 1;
        pick_heads(&tc, &rng, 0, 2);
        pick_mode(&tc, &rng, a % 4);
        run_case(&tc, g_seed++);
    }
    /* the smallest positive normal float and a subnormal as scale */
    tcase tc = base_case("tiny scale");
    tc.has_scale = 1;
    tc.scale = 1e-40f;
    tc.D = 16;
    tc.Skv = 33;
    tc.Sq = 2;
    tc.Hq = tc.Hkv = 1;
    tc.mode = MODE_CAUSAL;
    tc.sp = 10;
    run_case(&tc, g_seed++);
}

static void sweep_random(int count, double budget) {
    tu_rng rng;
    tu_rng_seed(&rng, 9 + g_base);
    for (int n = 0; n < count; n++) {
        tcase tc = base_case("random");
        tc.D = tu_rng_pick(&rng, D_LIST, COUNT(D_LIST));
        tc.Skv = tu_rng_pick(&rng, SKV_LIST, COUNT(SKV_LIST));
        tc.Sq = tu_rng_pick(&rng, SQ_LIST, COUNT(SQ_LIST));
        tc.B = tu_rng_int(&rng, 0, 3) == 0 ? 3 : 1;
        pick_heads(&tc, &rng, 0, 3);
        pick_mode(&tc, &rng, -1);
        if (tu_rng_int(&rng, 0, 4) == 0) {
            tc.has_scale = 1;
            tc.scale = tu_rng_uniform(&rng, 0.01f, 2.0f);
        }
        fit_budget(&tc, budget, 0);
        run_case(&tc, g_seed++);
    }
}

/* Options NULL means start_pos 0, not causal, default scale: attends keys 0..Sq-1. */
static void test_null_options(void) {
    tcase tc = base_case("options = NULL");
    tc.Sq = 7;
    tc.Skv = 33;
    tc.D = 16;
    tc.Hkv = 2;
    tc.Hq = 4;
    tu_rng rng;
    tu_rng_seed(&rng, 10);
    describe(&tc, 10);
    size_t nq = (size_t)tc.Sq * tc.Hq * tc.D, nkv = (size_t)tc.Skv * tc.Hkv * tc.D;
    float * q = tu_malloc(nq * 4), * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4), * o = tu_malloc(nq * 4);
    double * ref = tu_malloc(nq * 8);
    fill_qkv(&tc, &rng, q, k, v, tc.Sq);
    naive_params np = {.B = 1, .Sq = tc.Sq, .Skv = tc.Skv, .Hq = tc.Hq, .Hkv = tc.Hkv, .D = tc.D};
    const int nrc = naive_sdpa(&np, q, k, v, ref);
    TU_CHECK(nrc == 0, "test bug: naive reference rejected the case");
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, tc.Sq, tc.Hq, tc.D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, tc.Skv, tc.Hkv, tc.D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, tc.Skv, tc.Hkv, tc.D);
    sdpa_tensor to = tu_tensor4(o, SDPA_DTYPE_FLOAT32, 1, tc.Sq, tc.Hq, tc.D);
    /* a mask tensor whose data is NULL also means "no mask" */
    sdpa_tensor none = tu_tensor2(NULL, SDPA_DTYPE_FLOAT32, 0, 0);
    for (int variant = 0; variant < 2 && nrc == 0; variant++) {
        tu_fill_nan(o, nq);
        sdpa_status st = sdpa_custom(g_ctx2, &tq, &tk, &tv, variant ? &none : NULL, NULL, &to);
        if (TU_CHECK(st == SDPA_OK, "options NULL (mask %s) returned %s: %s", variant ? "data NULL" : "NULL",
                     sdpa_status_code(st), sdpa_ctx_last_error(g_ctx2)))
            tu_close("options NULL vs naive", o, ref, nq, tq.dims);
    }
    free(q);
    free(k);
    free(v);
    free(o);
    free(ref);
    tu_context[0] = 0;
}

/* The same call twice gives bit-identical results (no hidden state). */
static void test_repeatable(void) {
    tcase tc = base_case("repeatability");
    tc.Sq = 7;
    tc.Skv = 1000;
    tc.D = 80;
    tc.Hkv = 2;
    tc.Hq = 14;
    tc.mode = MODE_CAUSAL;
    tc.sp = 900;
    tu_rng rng;
    tu_rng_seed(&rng, 11);
    describe(&tc, 11);
    size_t nq = (size_t)tc.Sq * tc.Hq * tc.D, nkv = (size_t)tc.Skv * tc.Hkv * tc.D;
    float * q = tu_malloc(nq * 4), * k = tu_malloc(nkv * 4), * v = tu_malloc(nkv * 4);
    float * o1 = tu_malloc(nq * 4), * o2 = tu_malloc(nq * 4);
    fill_qkv(&tc, &rng, q, k, v, (int32_t)(tc.sp + tc.Sq));
    sdpa_tensor tq = tu_tensor4(q, SDPA_DTYPE_FLOAT32, 1, tc.Sq, tc.Hq, tc.D);
    sdpa_tensor tk = tu_tensor4(k, SDPA_DTYPE_FLOAT32, 1, tc.Skv, tc.Hkv, tc.D);
    sdpa_tensor tv = tu_tensor4(v, SDPA_DTYPE_FLOAT32, 1, tc.Skv, tc.Hkv, tc.D);
    sdpa_tensor t1 = tu_tensor4(o1, SDPA_DTYPE_FLOAT32, 1, tc.Sq, tc.Hq, tc.D);
    sdpa_tensor t2 = tu_tensor4(o2, SDPA_DTYPE_FLOAT32, 1, tc.Sq, tc.Hq, tc.D);
    sdpa_options opt = {.start_pos = tc.sp, .is_causal = 1};
    /* different fills: two calls that wrote nothing are not "identical" */
    tu_fill_nan(o1, nq);
    memset(o2, 0, nq * 4);
    sdpa_status s1 = sdpa_custom(g_ctx2, &tq, &tk, &tv, NULL, &opt, &t1);
    sdpa_status s2 = sdpa_custom(g_ctx2, &tq, &tk, &tv, NULL, &opt, &t2);
    if (TU_CHECK(s1 == SDPA_OK && s2 == SDPA_OK, "repeat: %s / %s", sdpa_status_code(s1), sdpa_status_code(s2)))
        tu_identical("same call twice", o1, o2, nq, tq.dims);
    free(q);
    free(k);
    free(v);
    free(o1);
    free(o2);
    tu_context[0] = 0;
}

int main(void) {
    double t0 = tu_seconds();
    const int quick = tu_quick(), full = tu_full();
    g_base = tu_base_seed(0) * 1000;
    g_seed += g_base * 100;
    if (!tu_ctx_pair(&g_ctx1, &g_ctx2)) return 1;

    /* Per-case cost caps (multiply-adds of one evaluation). */
    const double budget = quick ? 4e5 : full ? 3e7 : 3e6;
    struct {
        const char * name;
        long cases;
        double secs;
    } sections[16];
    int ns = 0;
#define SECTION(label_, call)                                    \
    do {                                                       \
        long c0 = g_cases;                                     \
        double s0 = tu_seconds();                              \
        call;                                                  \
        sections[ns].name = label_;                            \
        sections[ns].cases = g_cases - c0;                     \
        sections[ns].secs = tu_seconds() - s0;                 \
        ns++;                                                  \
    } while (0)

    SECTION("D x Skv", sweep_d_skv(budget));
    SECTION("Sq x mode", sweep_sq(budget));
    SECTION("GQA/MQA", sweep_gqa(budget * 4));
    SECTION("B=3", sweep_batch(budget));
    SECTION("causal startPos", sweep_causal_start_pos(quick ? 16 : 4));
    SECTION("masks", sweep_masks());
    SECTION("large logits", sweep_large_logits());
    SECTION("scale", sweep_scale());
    SECTION("random", sweep_random(quick ? 20 : full ? 600 : 120, budget));
    SECTION("null options", test_null_options());
    SECTION("repeatable", test_repeatable());

    for (int i = 0; i < ns; i++)
        printf("  %-16s %4ld cases  %6.2f s\n", sections[i].name, sections[i].cases, sections[i].secs);
    printf("  total %ld cases, %.3g multiply-adds per evaluation, %.2f s%s\n", g_cases, g_macs,
           tu_seconds() - t0, quick ? " (quick)" : full ? " (full)" : "");

    sdpa_ctx_free(g_ctx1);
    sdpa_ctx_free(g_ctx2);
    return tu_summary("test_numerics");
}
