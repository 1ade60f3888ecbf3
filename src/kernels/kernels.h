/* kernels.h: the two ways to compute a validated sdpa_problem. */
#ifndef SDPA_KERNELS_H
#define SDPA_KERNELS_H

#include "internal.h"

/* Scalar reference: per query row three passes (max, sum, weighted values),
 * double accumulation. Deliberately simple; never optimised. */
uint64_t sdpa_reference_workspace(int32_t n_threads, const sdpa_problem * p);
void sdpa_reference_run(sdpa_pool * pool, const sdpa_problem * p, void * scratch);
/* One output row out[b, i, h, :], computed as the reference does; acc: D
 * doubles, then D floats (a rotated q row), of scratch. Exact (to float rounding) for any finite input, and
 * NaN / Inf through as the contract says for non-finite ones. */
void sdpa_reference_row(const sdpa_problem * p, int32_t b, int32_t i, int32_t h, double * acc);

/* Flash attention: key tiles, online softmax, GQA row blocks, split-KV for
 * decode; SIMD128 microkernels. */
/* Workspace bytes (internal.h: saturating; above SIZE_MAX means E_OOM). */
uint64_t sdpa_flash_workspace(int32_t n_threads, const sdpa_problem * p);
/* Upper bound of sdpa_flash_workspace over every problem with this head_dim. */
uint64_t sdpa_flash_workspace_bound(int32_t n_threads, int32_t head_dim);
/* serial: run every unit on the calling thread (thread 0's scratch), the
 * pool left asleep; the units and so the result are the same. */
void sdpa_flash_run(sdpa_pool * pool, const sdpa_problem * p, void * scratch, bool serial);
/* attendMany / stepMany: the problems ps[0 .. n-1] in one dispatch (their units one after
 * another; each unit as in a call of its own: the same bits). */
uint64_t sdpa_flash_many_workspace(int32_t n_threads, const sdpa_problem * ps, int32_t n);
void sdpa_flash_run_many(sdpa_pool * pool, const sdpa_problem * ps, int32_t n, void * scratch, bool serial);

#endif
