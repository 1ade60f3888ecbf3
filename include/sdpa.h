/*
 * sdpa.h: scaled dot-product attention with a KV cache (ExecuTorch
 * `llama::custom_sdpa` semantics, hardened). The contract is
 * docs/CONTRACT.md; this header states how it maps onto C.
 *
 * Notation: B batch, Sq query length, Skv key/value length, Hq query heads,
 * Hkv key/value heads, D head dim, sp start position, r = Hq / Hkv.
 *
 * Layouts (all dense, row-major, innermost last, float32 unless stated):
 *   query, output            [B, Sq,  Hq,  D]
 *   key, value               [B, Skv, Hkv, D]
 *   mask (optional)          [Sq, N]   float32 (additive) or uint8 bool
 *                                      (non-zero = attend, 0 = -inf); N <= Skv
 *   KV-cache update input    [B, Snew, Hkv, D]
 *   KV-cache storage         paged (internal): pages of SDPA_PAGE_ROWS rows of
 *                            one batch row and one KV head, K block then V
 *                            block, drawn from the context's page pool as rows
 *                            are written; float32 / float16: V is
 *                            [SDPA_PAGE_ROWS, D], K [SDPA_PAGE_ROWS / G, D, G]
 *                            (G = SDPA_PAGE_KEY_GROUP); int8: K
 *                            [SDPA_PAGE_ROWS / 8, ceil(D / 2), 8, 2], V
 *                            [SDPA_PAGE_ROWS / 2, D, 2]; int4: nibbles, K
 *                            [SDPA_PAGE_ROWS / 8, ceil(D / 4), 8, 2] bytes, V
 *                            [SDPA_PAGE_ROWS / 2, ceil(D / 16), 8, 2] bytes;
 *                            K and V may each have their own dtype
 *                            (src/cache/kv_format.h)
 *
 * Semantics, for every b, h, i (query row i sits at absolute position sp + i):
 *   hk = h / r;  N = mask ? mask.dims[1] : sp + Sq   (only keys t < N exist)
 *   score[t] = scale * dot(q[b,i,h,:], k[b,t,hk,:])               (t < N)
 *   score[t] = softcap * tanh(score[t] / softcap)   when softcap > 0
 *   score[t] += mask[i,t]
 *   score[t] = -inf if is_causal and t > sp + i, or window and t <= sp + i - window
 *   m = max(max_t score[t], sinks[h]);  w[t] = exp(score[t] - m)
 *   out[b,i,h,:] = sum_t w[t] v[b,t,hk,:] / (sum_t w[t] + exp(sinks[h] - m))
 *   (without sinks the last term is absent: a plain softmax)
 *   A row whose every score is -inf writes zeros (never NaN). NaN or Inf in
 *   the data is computed through, not scanned for (a NaN score makes its row
 *   NaN; a non-finite V row at a masked key may or may not reach the output).
 *   scale defaults to 1/sqrt(D). The mask is added unscaled.
 *
 * Ownership: every buffer is owned by the caller; no function keeps a pointer
 * to a caller buffer after it returns. A context owns its thread pool, its
 * scratch memory and the page pool of the caches it creates; a KV cache
 * holds pages of that pool (shared with its forks; writes always take pages
 * from it, whichever context runs the call) and must be freed before it.
 * Neither is thread-safe: one call at a time per context and per cache (the
 * context's pool runs the call's work), and, since a cache write takes pages
 * from the creating context's page pool, no write to a cache concurrent with
 * any call of its creating context or write to another of its caches.
 *
 * Errors: every entry point checks every rule of CONTRACT.md section 2
 * *before* writing anything and returns an sdpa_status; on failure the output
 * buffer and the cache are byte-for-byte unchanged, and
 * sdpa_ctx_last_error(ctx) holds a message that starts with the function's
 * own name, once, then names the argument (as CONTRACT.md does: query,
 * attnMask, startPos, ...), the rule, and expected vs actual value:
 * "sdpa_kv_cache_step: startPos 9 + query length 1 = 10 exceeds the cache
 * length maxSeqLen 8; ...". Nothing aborts on user input. When several rules
 * are broken, the first in sdpa_status order is reported.
 *
 * Allocation: sdpa_ctx_create and sdpa_kv_cache_create allocate. The compute
 * calls allocate only when the context's scratch is smaller than the call
 * needs (the first call of a new shape); sdpa_ctx_reserve() grows it ahead of
 * time so that the hot path never allocates. sdpa_kv_cache_create reserves
 * the scratch a decode/prefill over that cache needs.
 */
#ifndef SDPA_H
#define SDPA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Status codes, in CONTRACT.md section 2 order (the order decides which
/// rule is reported when several are broken). Values are stable ABI: the JS
/// wrapper maps them to SdpaError codes by number.
typedef enum sdpa_status {
    SDPA_OK = 0,
    SDPA_E_ARG = 1,         ///< missing argument, bad option, aliasing out
    SDPA_E_RANK = 2,        ///< q/k/v not 4-D, mask not 2-D
    SDPA_E_DIMS = 3,        ///< dim not positive, len != product(dims), out dims
    SDPA_E_DTYPE = 4,       ///< q/k/v/out/cache dtype unsupported or mixed
    SDPA_E_BATCH = 5,       ///< key/value/out batch != query batch
    SDPA_E_HEADS = 6,       ///< head count 0, Hkv > Hq, Hq % Hkv, Hk != Hv
    SDPA_E_HEAD_DIM = 7,    ///< q/k/v head dims differ
    SDPA_E_KV_LEN = 8,      ///< key/value sequence lengths differ
    SDPA_E_START_POS = 9,   ///< start_pos < 0, or sp + Sq > Skv without mask
    SDPA_E_CAPACITY = 10,   ///< cache write/read past max_seq_len
    SDPA_E_MASK_DTYPE = 11, ///< mask not float32 or bool
    SDPA_E_MASK_SHAPE = 12, ///< mask not exactly [Sq, N], N <= Skv
    SDPA_E_MASK_CAUSAL = 13,///< mask together with is_causal
    SDPA_E_DROPOUT = 14,    ///< dropout_p != 0
    SDPA_E_SCALE = 15,      ///< scale given and not finite > 0
    SDPA_E_DISPOSED = 16,   ///< (JS only) use of a disposed object
    SDPA_E_OOM = 17,        ///< allocation failed; nothing half-made is kept
    SDPA_E_FORMAT = 18,     ///< saved KV state that cannot be read (docs/FORMAT.md); nothing is made
} sdpa_status;

/// "E_ARG", "E_RANK", ... (the JS error code); "OK" for 0, "E_UNKNOWN" otherwise.
const char * sdpa_status_code(sdpa_status status);

typedef enum sdpa_dtype {
    SDPA_DTYPE_FLOAT32 = 1,  ///< float
    SDPA_DTYPE_BOOL = 2,     ///< uint8_t, masks only: non-zero = attend
    SDPA_DTYPE_FLOAT16 = 3,  ///< caches and weights: IEEE binary16, round to nearest even on write
    SDPA_DTYPE_INT8 = 4,     ///< caches only: ExecuTorch's per-token asymmetric int8 (scale + zero point per row)
    SDPA_DTYPE_INT4 = 5,     ///< caches only: 4-bit levels with a float16 scale + offset per 64 elements (q4_1-like)
    SDPA_DTYPE_Q8_0 = 6,     ///< weights only (include/sdpa_dense.h): ggml's block_q8_0, 32 values a block
    SDPA_DTYPE_Q4_0 = 7,     ///< weights only (include/sdpa_dense.h): ggml's block_q4_0, 32 values a block
    SDPA_DTYPE_Q4_K = 8,     ///< weights only (include/sdpa_dense.h): ggml's block_q4_K, 256 values a block
    SDPA_DTYPE_Q6_K = 9,     ///< weights only (include/sdpa_dense.h): ggml's block_q6_K, 256 values a block
    SDPA_DTYPE_Q5_0 = 10,    ///< weights only (include/sdpa_dense.h): ggml's block_q5_0, 32 values a block
} sdpa_dtype;

/// A caller-owned dense tensor. `len` is the element count the buffer really
/// holds; it must equal the product of dims (E_DIMS), which is how a caller
/// that lies about dims is caught before any access. `data` is only read for
/// inputs. On wasm32 this struct is 32 bytes: data@0 len@4 dtype@8 rank@12
/// dims@16 (the JS wrapper writes it at these offsets).
typedef struct sdpa_tensor {
    void *   data;
    size_t   len;
    int32_t  dtype;    ///< sdpa_dtype
    int32_t  rank;
    int32_t  dims[4];  ///< first `rank` entries used
} sdpa_tensor;

/// Rotary position embeddings applied inside a cache call (ONNX Runtime
/// GroupQueryAttention's do_rotary): K rows are rotated as they are written
/// (update, step), q rows before the scores (attend, step). With R =
/// cos->dims[1] (rotaryDim = 2R <= D; elements 2R .. D-1 pass through) and a
/// row at position p, pair (a, b) = (2i, 2i+1) when interleaved (GPT-J),
/// (i, i + R) otherwise (NeoX), for i < R:
///   y[a] = x[a] * cos[p][i] - x[b] * sin[p][i]
///   y[b] = x[b] * cos[p][i] + x[a] * sin[p][i]
/// in float32, each product rounded, no FMA (every build): the bits of the
/// same rotation applied outside the op. A row's position is start_pos + i,
/// or positions[i] when positions is given (a draft tree's tokens sit at
/// their depth). On wasm32 this struct is 20 bytes: cos@0 sin@4
/// interleaved@8 n_positions@12 positions@16. Not for sdpa_custom (E_ARG).
typedef struct sdpa_rotary {
    const struct sdpa_tensor * cos;  ///< float32 [max_position, rotary_dim / 2]
    const struct sdpa_tensor * sin;  ///< float32, the same dims
    int32_t interleaved;             ///< 0: NeoX halves (i, i + R); 1: GPT-J pairs (2i, 2i+1)
    int32_t n_positions;             ///< entries of positions (0 with positions NULL)
    const int32_t * positions;       ///< NULL, or one position per new row (0 <= p < max_position)
} sdpa_rotary;

/// Per-call options. On wasm32 this struct is 48 bytes: start_pos@0 (int64)
/// is_causal@8 has_scale@12 scale@16 dropout_p@20 window@24 softcap@28
/// sinks@32 (a pointer) tree_mask@36 (a pointer; see "What an LLM runtime
/// calls per layer" at the end of this header) rotary@40 (a pointer), 4 bytes of padding.
typedef struct sdpa_options {
    int64_t start_pos;  ///< >= 0; no effect on attention when a mask is given
    int32_t is_causal;  ///< 0 or 1
    int32_t has_scale;  ///< 0: scale = 1/sqrt(D)
    float   scale;      ///< used when has_scale; must be finite and > 0
    float   dropout_p;  ///< must be 0
    /// 0: none. W > 0: query row at position p sees only keys t > p - W (with
    /// is_causal also t <= p: the last W keys, its own included). Not with a mask.
    int32_t window;
    /// 0: none. c > 0 (finite): score = c * tanh(score / c) after the scale,
    /// before the mask.
    float   softcap;
    /// NULL: none. A float32 [Hq] tensor of per-head sink logits: head h's
    /// softmax denominator gets exp(sinks[h] - m) (the sink has no value row).
    const struct sdpa_tensor * sinks;
    /// NULL: none. Cache attend / step only ("What an LLM runtime calls per layer" below).
    const struct sdpa_tensor * tree_mask;
    /// NULL: none. Cache attend / step only: q (and in a step K) rotated (sdpa_rotary).
    const struct sdpa_rotary * rotary;
} sdpa_options;

typedef struct sdpa_ctx sdpa_ctx;
typedef struct sdpa_kv_cache sdpa_kv_cache;

/// Creates a context with `n_threads` threads in all (the calling thread is
/// one of them; n_threads - 1 workers are started now and live until
/// sdpa_ctx_free). n_threads is clamped to [1, SDPA_MAX_THREADS]. If the
/// platform refuses some threads (wasm: the pthread pool is exhausted), the
/// context runs with fewer: sdpa_ctx_threads() says how many. Returns NULL
/// (and *status = SDPA_E_OOM when status is non-NULL) only when memory runs out.
#define SDPA_MAX_THREADS 64
sdpa_ctx * sdpa_ctx_create(int32_t n_threads, sdpa_status * status);

/// Stops the workers, frees the scratch. NULL is a no-op. Caches made with
/// this context must be freed first (or are leaked).
void sdpa_ctx_free(sdpa_ctx * ctx);

int32_t sdpa_ctx_threads(const sdpa_ctx * ctx);

/// Message of the last failed call on this context ("" after a success).
const char * sdpa_ctx_last_error(const sdpa_ctx * ctx);

/// Non-zero: every compute call runs the scalar double-accumulation
/// reference instead of the SIMD kernels (for tests and debugging).
void sdpa_ctx_use_reference(sdpa_ctx * ctx, int32_t on);

/// A compute call whose work (2 x B x Sq x Hq x keys read x D multiply-adds)
/// is below this runs on the calling thread alone: waking the pool costs more
/// than it saves there (bench/HISTORY.md, "Small decode steps"). The work is
/// cut into the same units either way, so the result is bit-identical. Default
/// SDPA_PARALLEL_MIN_MACS; 0: every call that has more than one unit uses the
/// pool (tests use it to exercise the workers on small shapes).
#define SDPA_PARALLEL_MIN_MACS 1000000.0
void sdpa_ctx_set_parallel_min_macs(sdpa_ctx * ctx, double macs);

/// Scratch bytes a customSdpa-shaped call needs (q_len rows of q_heads over
/// kv_heads, head_dim, attending up to n_keys keys). 0 on invalid sizes;
/// SIZE_MAX when the need does not fit this build's address space (computed
/// without wrapping; such a call, or sdpa_ctx_reserve of it, is E_OOM).
size_t sdpa_workspace_size(const sdpa_ctx * ctx, int32_t batch, int32_t q_len,
                           int32_t q_heads, int32_t kv_heads, int32_t head_dim,
                           int32_t n_keys);

/// Grows the context's scratch to at least `bytes` (never shrinks).
sdpa_status sdpa_ctx_reserve(sdpa_ctx * ctx, size_t bytes);

/// Bytes of scratch the context holds now. The compute calls allocate only
/// by growing this, so an unchanged value across calls means they allocated
/// nothing (the no-allocation guarantee of a decode loop is tested this way).
size_t sdpa_ctx_scratch_bytes(const sdpa_ctx * ctx);

/// customSdpa on caller buffers. q/k/v/out: float32 rank 4 as above. mask:
/// NULL or a tensor with data == NULL for none. options: NULL = defaults
/// (start_pos 0, not causal, default scale, no dropout). `out` must not
/// overlap any input (E_ARG).
sdpa_status sdpa_custom(sdpa_ctx * ctx, const sdpa_tensor * query,
                        const sdpa_tensor * key, const sdpa_tensor * value,
                        const sdpa_tensor * mask, const sdpa_options * options,
                        sdpa_tensor * out);

/// The scalar reference (three passes, double accumulation), with the same
/// validation. Equivalent to sdpa_custom with sdpa_ctx_use_reference(ctx, 1).
sdpa_status sdpa_custom_reference(sdpa_ctx * ctx, const sdpa_tensor * query,
                                  const sdpa_tensor * key, const sdpa_tensor * value,
                                  const sdpa_tensor * mask, const sdpa_options * options,
                                  sdpa_tensor * out);

/// Token rows per cache page (per batch row and KV head). A multiple of the
/// kernels' key tile, so a tile never spans two pages.
#define SDPA_PAGE_ROWS 64

/// float32 and float16 pages store their K rows transposed in groups of this
/// many rows: element d of page row t is at ((t / G) * D + d) * G + t % G
/// (in elements, from the K block's start), so that the kernels multiply a
/// broadcast query element by G keys at a time. Their V rows are plain rows:
/// element d of row t at t * D + d. int8 pages interleave pairs for integer
/// dot products: K element d of row t at ((t / 8 * ceil(D / 2) + d / 2) * 8 +
/// t % 8) * 2 + d % 2, V element d of row t at (t / 2 * D + d) * 2 + t % 2.
/// int4 blocks hold nibbles in the same spirit (src/cache/kv_format.h states
/// the index of each).
#define SDPA_PAGE_KEY_GROUP 16

/// Largest single allocation of a cache, in bytes, on every build (a page,
/// the page table): wasm32 cannot make one allocation of 2 GiB, and native
/// builds keep the same limit so that both behave alike. Larger is E_OOM.
/// A cache in all may be larger: pages are separate allocations.
#define SDPA_MAX_PAGE_BYTES ((uint64_t)0x7FFFFFFF)

/// Makes an empty cache for up to max_seq_len rows of (batch, kv_heads,
/// head_dim) keys and as many values: a page table (one pointer per
/// SDPA_PAGE_ROWS rows of max_seq_len, batch row and head) and no pages yet;
/// reserves scratch for attending over it. Unwritten rows read as zeros.
/// dtype: SDPA_DTYPE_FLOAT32, _FLOAT16, _INT8 or _INT4 (how rows are stored; writes
/// convert float32 input, reads and attention see the stored values decoded
/// to float32, see docs/CONTRACT.md). E_ARG (NULL out), E_DIMS, E_HEADS,
/// E_DTYPE, E_OOM.
sdpa_status sdpa_kv_cache_create(sdpa_ctx * ctx, int32_t batch, int32_t max_seq_len,
                                 int32_t kv_heads, int32_t head_dim, int32_t dtype,
                                 sdpa_kv_cache ** out_cache);

/// Everything a cache is made from. On wasm32 this struct is 36 bytes: nine
/// int32 in this order. key_dtype and value_dtype: SDPA_DTYPE_FLOAT32,
/// _FLOAT16, _INT8 or _INT4 each (any of the 16 pairs). window = 0 (and
/// sink_tokens = 0) for a plain cache. float16_newest_page: 1 keeps the rows
/// of the page being filled as float16 in an int8 / int4 block (K, V or
/// both) and encodes that page to its dtype once, when it fills (a row's
/// stored value changes once then; docs/CONTRACT.md section 3); 0 (what a
/// positional initializer of the first eight fields leaves) encodes each row
/// as it is written. No effect on float32 / float16 blocks. Else E_ARG.
typedef struct sdpa_kv_cache_desc {
    int32_t batch, max_seq_len, kv_heads, head_dim;
    int32_t key_dtype, value_dtype;
    int32_t window, sink_tokens;
    int32_t float16_newest_page;
} sdpa_kv_cache_desc;

/// The general create: sdpa_kv_cache_create and _create_windowed are this
/// with key_dtype = value_dtype. Their errors.
sdpa_status sdpa_kv_cache_create_desc(sdpa_ctx * ctx, const sdpa_kv_cache_desc * desc, sdpa_kv_cache ** out_cache);

/// A windowed (ring) cache, for sliding-window layers and StreamingLLM-style
/// chats: it keeps only the first `sink_tokens` rows ("sink" rows) and the
/// last rows of the sequence, so its memory stays flat however long the
/// sequence grows. Positions keep counting (length grows up to max_seq_len,
/// which may be as large as the key index allows); storage is
/// ceil(sink_tokens / SDPA_PAGE_ROWS) sink pages plus a ring of
/// ceil((window - 1) / SDPA_PAGE_ROWS) + 2 pages per batch row and head,
/// recycled as the window slides (a recycled page is cleared first): at
/// least the last window + 64 rows are kept, so a rollback (truncate) of up
/// to 64 rows can go on decoding. Rows t with sink_tokens <= t <
/// sdpa_kv_cache_window_start() have been evicted.
/// Attention over it (attend, step) is causal and applies the cache's
/// window: query row p sees keys t <= p with t > p - window or
/// t < sink_tokens (options->window may narrow the window, not widen it).
/// Rules, on top of the plain cache's (docs/CONTRACT.md section 3):
/// is_causal required and no mask (E_ARG), options->window <= window
/// (E_ARG); a write, or the first row of an attend, must not need an
/// evicted row (E_START_POS); read of an evicted or unwritten
/// row is E_CAPACITY; truncate below window_start (but above sink_tokens)
/// is E_CAPACITY. A step of any length works: it writes and attends one
/// page of rows at a time. window = 0 makes a plain cache (sink_tokens must
/// then be 0: E_ARG). E_DIMS (window or sink_tokens negative or above
/// SDPA_INDEX_LIMIT), and create's errors.
sdpa_status sdpa_kv_cache_create_windowed(sdpa_ctx * ctx, int32_t batch, int32_t max_seq_len,
                                          int32_t kv_heads, int32_t head_dim, int32_t dtype,
                                          int32_t window, int32_t sink_tokens,
                                          sdpa_kv_cache ** out_cache);

/// A windowed cache's window and sink rows (both 0 for a plain cache).
int32_t sdpa_kv_cache_window(const sdpa_kv_cache * cache);
int32_t sdpa_kv_cache_sink_tokens(const sdpa_kv_cache * cache);
/// The first stored row after the sink rows: rows sink_tokens ..
/// window_start - 1 were evicted (0 for a plain cache: none).
int32_t sdpa_kv_cache_window_start(const sdpa_kv_cache * cache);

/// Returns its pages to the context's pool (those still shared with a fork
/// stay with the fork). NULL is a no-op.
void sdpa_kv_cache_free(sdpa_kv_cache * cache);

/// Geometry of a cache (any pointer may be NULL).
void sdpa_kv_cache_shape(const sdpa_kv_cache * cache, int32_t * batch, int32_t * max_seq_len,
                         int32_t * kv_heads, int32_t * head_dim);

/// Rows written: the highest written row + 1 (0 for a new cache; truncate
/// lowers it). Writes may not start past it (no holes).
int32_t sdpa_kv_cache_length(const sdpa_kv_cache * cache);

/// Pages the cache holds (batch rows x heads x written pages), shared ones included.
int32_t sdpa_kv_cache_pages(const sdpa_kv_cache * cache);

/// Bytes the cache holds: its pages as the pool counts them (a 64-byte
/// header each; shared ones included) plus its page table. A double (exact
/// below 2^53), so that JS reads it without BigInt.
double sdpa_kv_cache_bytes(const sdpa_kv_cache * cache);

/// What a cache of this geometry holds once rows 0 .. rows-1 are written,
/// so that sdpa_ctx_reserve_pages can be sized without measuring. On wasm32
/// this struct is 40 bytes: five int64.
typedef struct sdpa_kv_cache_size {
    int64_t pages;        ///< pages held: batch x kv_heads x min(ceil(rows / 64), table slots per head)
    int64_t page_bytes;   ///< the pool bytes of one page (its 64-byte header included)
    int64_t pool_bytes;   ///< pages x page_bytes: what sdpa_ctx_reserve_pages needs for them
    int64_t table_bytes;  ///< the page table, malloc'ed when the cache is created
    int64_t bytes;        ///< pool_bytes + table_bytes: sdpa_kv_cache_bytes() of that cache
} sdpa_kv_cache_size;

/// sdpa_kv_cache_size of a cache made by sdpa_kv_cache_create_windowed with
/// these arguments once `rows` rows are written. Its errors; E_DIMS (rows < 0),
/// E_CAPACITY (rows > max_seq_len); the first in the table's order.
sdpa_status sdpa_kv_cache_plan(sdpa_ctx * ctx, int32_t batch, int32_t max_seq_len, int32_t kv_heads,
                               int32_t head_dim, int32_t dtype, int32_t window, int32_t sink_tokens,
                               int32_t rows, sdpa_kv_cache_size * out);
/// The same for any desc (K and V dtypes of their own).
sdpa_status sdpa_kv_cache_plan_desc(sdpa_ctx * ctx, const sdpa_kv_cache_desc * desc, int32_t rows,
                                    sdpa_kv_cache_size * out);

/// The K (which = 0) or V (which = 1) block (SDPA_PAGE_ROWS rows of D
/// elements of that block's dtype, laid out as SDPA_PAGE_KEY_GROUP says; an
/// int8 or int4 block's scales and zero points or offsets follow both
/// blocks, see src/cache/kv_format.h) of page
/// `page` (rows page*SDPA_PAGE_ROWS ..) of batch row b, KV head h; NULL when
/// that page was never written (it reads as zeros) or out of range. For
/// zero-copy readers and tests; owned by the pool, valid until the next
/// write, truncate or free of this cache or of a fork sharing it. In a cache
/// with sdpa_kv_cache_float16_newest_page, the page being filled (the one
/// holding row length - 1, until it fills) is a float16 page: an int8 or int4
/// block held as float16 values, with no scales or offsets after it.
const void * sdpa_kv_cache_page(const sdpa_kv_cache * cache, int32_t b, int32_t h, int32_t page,
                                int32_t which);

/// How the cache stores its rows: the dtype of K and V when they are the
/// same, else 0; the K and V dtypes each.
int32_t sdpa_kv_cache_dtype(const sdpa_kv_cache * cache);
int32_t sdpa_kv_cache_key_dtype(const sdpa_kv_cache * cache);
int32_t sdpa_kv_cache_value_dtype(const sdpa_kv_cache * cache);
/// 1 when the cache keeps its newest page in float16 (desc float16_newest_page
/// on an int8 / int4 block), else 0.
int32_t sdpa_kv_cache_float16_newest_page(const sdpa_kv_cache * cache);

/// Writes k, v [B, Snew, Hkv, D] at rows start_pos .. start_pos+Snew-1
/// (ExecuTorch update_cache), taking pages as needed (a shared page is
/// copied first). E_START_POS when start_pos > length (a hole), E_CAPACITY
/// when start_pos + Snew > maxSeqLen, E_OOM when the pool cannot grow (the
/// cache is then unchanged).
sdpa_status sdpa_kv_cache_update(sdpa_ctx * ctx, sdpa_kv_cache * cache,
                                 const sdpa_tensor * key, const sdpa_tensor * value,
                                 int32_t start_pos);

/// update with rotary embeddings: every K row rotated at its position
/// (sdpa_rotary) before it is stored; V rows as given. NULL rotary: update.
/// Also E_RANK, E_DIMS, E_DTYPE, E_HEAD_DIM, E_START_POS for rotary's tables
/// and positions, and E_OOM for a row of scratch.
sdpa_status sdpa_kv_cache_update_rotary(sdpa_ctx * ctx, sdpa_kv_cache * cache,
                                        const sdpa_tensor * key, const sdpa_tensor * value,
                                        int32_t start_pos, const sdpa_rotary * rotary);

/// customSdpa(query, K, V, ...) with K, V the whole cache (Skv = maxSeqLen).
/// Without a mask the query rows must have been written: start_pos + Sq <=
/// length (E_START_POS); with one, its N columns are the keys read (rows
/// never written are zeros). options->is_causal is explicit here (the JS
/// wrapper defaults it to 1 for attention over a cache without a mask).
sdpa_status sdpa_kv_cache_attend(sdpa_ctx * ctx, sdpa_kv_cache * cache,
                                 const sdpa_tensor * query, const sdpa_tensor * mask,
                                 const sdpa_options * options, sdpa_tensor * out);

/// update(key, value, options->start_pos) then attend (ExecuTorch
/// sdpa_with_kv_cache). Both halves are checked before anything is written,
/// and the lowest status among all their rules is reported; query and key
/// lengths must match (E_DIMS); writing past maxSeqLen is E_CAPACITY.
/// Inputs and outputs must not lie inside the cache's own storage (E_ARG).
sdpa_status sdpa_kv_cache_step(sdpa_ctx * ctx, sdpa_kv_cache * cache,
                               const sdpa_tensor * query, const sdpa_tensor * key,
                               const sdpa_tensor * value, const sdpa_tensor * mask,
                               const sdpa_options * options, sdpa_tensor * out);

/// Copies rows start .. start+length-1 into key_out, value_out, each
/// [B, length, Hkv, D] float32 (rows never written are zeros).
sdpa_status sdpa_kv_cache_read(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                               int32_t start, int32_t length,
                               sdpa_tensor * key_out, sdpa_tensor * value_out);

/// The stored form of rows start .. start+length-1 of K (which = 0) or V
/// (which = 1): one record per (batch row, row, head), in that order, each
/// the row's stored bytes in row order (docs/FORMAT.md, "records"):
///   float32  D float32          float16  D uint16 (binary16 bits)
///   int8     D int8, then its float32 scale and int8 zero point (D + 5 bytes)
///   int4     ceil(D/2) bytes (element 2i in the low nibble of byte i, 2i+1 in
///            the high one), then G = ceil(D/64) float16 scales, then G float16
///            offsets (element = level * scale + offset)
/// `out` must hold exactly batch * length * kv_heads records (E_DIMS) and not
/// lie in cache storage (E_ARG). E_ARG, E_DIMS, E_START_POS, E_CAPACITY.
sdpa_status sdpa_kv_cache_read_records(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start,
                                       int32_t length, int32_t which, void * out, size_t out_bytes);

/// Bytes of one record of K (which = 0) or V (which = 1); 0 for a bad argument.
size_t sdpa_kv_cache_record_bytes(const sdpa_kv_cache * cache, int32_t which);

/// Keeps rows 0 .. length-1: whole pages past them go back to the pool, the
/// rows past `length` in the last kept page become zeros (that page is
/// copied first if shared). O(pages). E_START_POS (length < 0), E_CAPACITY
/// (length > sdpa_kv_cache_length), E_OOM (a shared page could not be copied).
sdpa_status sdpa_kv_cache_truncate(sdpa_ctx * ctx, sdpa_kv_cache * cache, int32_t length);

/// A new cache sharing every page of `cache`, copy-on-write: the first write
/// into a shared page (by either cache) copies that page only. O(pages).
sdpa_status sdpa_kv_cache_fork(sdpa_ctx * ctx, const sdpa_kv_cache * cache,
                               sdpa_kv_cache ** out_cache);

/// A group: the caches of all the layers of a model, made, forked and
/// truncated as one (docs/CONTRACT.md section 3, "Cache groups"); n >= 1
/// layers. Each call checks every layer before it changes any: the failure
/// reported is the first rule in the contract's table order over all
/// layers, ties to the lowest layer, its message naming that layer
/// ("sdpa_kv_group_create: layers[3]: ...", "sdpa_kv_group_truncate: layer
/// 3: ..."). All or nothing: on any failure no layer has changed and nothing
/// made is kept.
///
/// create: out[i] a new cache of descs[i] (sdpa_kv_cache_create_desc), each
/// the caller's to free with sdpa_kv_cache_free. E_OOM while making them:
/// the caches made are freed and every out[i] is NULL; any other failure
/// leaves out as it was. Per layer create_desc's errors; E_ARG (descs or
/// out NULL, n < 1).
sdpa_status sdpa_kv_group_create(sdpa_ctx * ctx, const sdpa_kv_cache_desc * descs, int32_t n, sdpa_kv_cache ** out);

/// fork: out[i] a fork of layers[i] (sdpa_kv_cache_fork: copy-on-write),
/// the caller's to free; E_OOM as create's. E_ARG (a layer, layers or out NULL, n < 1).
sdpa_status sdpa_kv_group_fork(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, sdpa_kv_cache ** out);

/// truncate: sdpa_kv_cache_truncate(layers[i], length) on every layer. The
/// copies of shared last pages every layer needs are taken from the pool
/// first, so E_OOM too leaves every layer as it was. Per layer truncate's
/// errors; E_ARG (a layer or layers NULL, n < 1).
sdpa_status sdpa_kv_group_truncate(sdpa_ctx * ctx, sdpa_kv_cache * const * layers, int32_t n, int32_t length);

/// The context's page pool. On wasm32 this struct is 48 bytes: five int64
/// at 0, 8, 16, 24, 32, then page_rows@40.
typedef struct sdpa_memory_stats {
    int64_t bytes_reserved;  ///< taken from the heap for pages (never given back)
    int64_t bytes_in_use;    ///< pages held by caches (a 64-byte header each included)
    int64_t bytes_free;      ///< free pages + reserved bytes not carved into pages yet
    int64_t pages_in_use;
    int64_t pages_free;      ///< on the free lists
    int32_t page_rows;       ///< SDPA_PAGE_ROWS
    int32_t unused;
} sdpa_memory_stats;
void sdpa_ctx_memory(const sdpa_ctx * ctx, sdpa_memory_stats * out);

/// Grows the page pool until `bytes` are free for pages, so that writes up
/// to that much allocate nothing. A double, so that JS passes any size.
/// E_ARG (negative or NaN), E_OOM.
sdpa_status sdpa_ctx_reserve_pages(sdpa_ctx * ctx, double bytes);

/* ==================================================================
 * Saved KV state: a cache as portable bytes (docs/FORMAT.md)
 * ==================================================================
 *
 * A save holds a header (geometry, dtypes, length, window_start, a caller's
 * meta bytes, a CRC-32C), the row records of the saved rows (their stored
 * form, no requantization: a load is exact) and a CRC-32C of those. It is
 * produced and consumed in pieces of any size, so neither side needs the
 * whole save in memory. A load makes a new cache of the loading context
 * that attends bit-identically to the saved one, in any build. Bad input
 * is SDPA_E_FORMAT with a message naming what is wrong; no cache is made
 * and every page taken goes back to the pool. */

/// Largest meta a save carries, in bytes.
#define SDPA_STATE_MAX_META (1 << 20)

typedef struct sdpa_kv_saver sdpa_kv_saver;

/// Starts a save of rows start .. start+length-1 of `cache` (a windowed
/// cache: the evicted rows among them are left out) with `meta_bytes`
/// bytes of meta (copied). The saver holds a copy-on-write fork of the
/// cache, so writes to the cache while the save is read change nothing
/// in it; free it with sdpa_kv_save_free before the cache's context.
/// E_ARG (NULL, meta above SDPA_STATE_MAX_META), E_START_POS (start < 0),
/// E_DIMS (length < 0), E_CAPACITY (rows past cache length, or an end
/// inside a windowed cache's evicted rows), E_OOM.
sdpa_status sdpa_kv_save_begin(sdpa_ctx * ctx, const sdpa_kv_cache * cache, int32_t start, int32_t length,
                               const void * meta, size_t meta_bytes, sdpa_kv_saver ** out_saver);
/// Bytes of the whole save (a double, exact below 2^53, for JS).
double sdpa_kv_save_bytes(const sdpa_kv_saver * saver);
/// Writes the next min(cap, bytes left) bytes of the save to `out`; returns
/// how many (0 once all were read).
size_t sdpa_kv_save_read(sdpa_kv_saver * saver, void * out, size_t cap);
/// NULL is a no-op.
void sdpa_kv_save_free(sdpa_kv_saver * saver);

typedef struct sdpa_kv_loader sdpa_kv_loader;

/// Starts a load into a new cache of `ctx` whose max_seq_len is
/// `max_seq_len` (0: the saved one; E_DIMS when negative or above the key
/// index limit).
sdpa_status sdpa_kv_load_begin(sdpa_ctx * ctx, int32_t max_seq_len, sdpa_kv_loader ** out_loader);
/// Feeds the next n bytes. *consumed (may be NULL) gets how many were taken:
/// all of them, or fewer when the save ended inside them (the rest is
/// another save's, or trailing bytes). Any failure is sticky: later feeds
/// and sdpa_kv_load_finish return it again. E_FORMAT, E_OOM (when the
/// header asks for pages the pool cannot supply).
sdpa_status sdpa_kv_load_feed(sdpa_kv_loader * loader, const void * data, size_t n, size_t * consumed);
/// 1 once the whole save was fed (its last CRC checked).
int32_t sdpa_kv_load_done(const sdpa_kv_loader * loader);
/// The saved meta (NULL and 0 bytes until the header was read).
const void * sdpa_kv_load_meta(const sdpa_kv_loader * loader);
double sdpa_kv_load_meta_bytes(const sdpa_kv_loader * loader);
/// The cache, once done (E_FORMAT: the data ended early, saying where).
/// The cache is the caller's from then on.
sdpa_status sdpa_kv_load_finish(sdpa_kv_loader * loader, sdpa_kv_cache ** out_cache);
/// Frees the loader and a cache it has not handed out. NULL is a no-op.
void sdpa_kv_load_free(sdpa_kv_loader * loader);

/// A whole save in one buffer (trailing bytes are E_FORMAT).
sdpa_status sdpa_kv_cache_load(sdpa_ctx * ctx, const void * data, size_t n, int32_t max_seq_len,
                               sdpa_kv_cache ** out_cache);

/// CRC-32C (Castagnoli) of n bytes, extending `crc` (0 to start).
uint32_t sdpa_crc32c(uint32_t crc, const void * data, size_t n);

/* A group of caches (the JS KVCacheGroup's save, docs/FORMAT.md section 5):
 * a container header (magic, version, layer count, meta, a CRC-32C), then one
 * save per layer, each read by its own sdpa_kv_loader. */

/// Writes a group header for `layers` saves with `meta_bytes` bytes of meta
/// to `out` when `cap` holds it; returns the header's bytes either way (0
/// when meta_bytes is above SDPA_STATE_MAX_META, or meta is NULL with bytes).
size_t sdpa_kv_group_header_write(uint32_t layers, const void * meta, size_t meta_bytes, void * out, size_t cap);
/// Checks the first `have` bytes of a group header as they arrive: the magic
/// so far; from 24 bytes on the version and the meta size; once the whole
/// header is there its CRC-32C, the layer count (1 .. 65536) and the reserved
/// field. *need gets the header's bytes as far as known (24, then the whole
/// header's); once have == *need, *layers gets the layer count and the meta
/// is *meta_bytes bytes at *meta_at (else all three are 0). `ended` non-zero:
/// no more bytes come, so a header not whole is E_FORMAT too, saying where.
/// E_FORMAT names what is wrong (as sdpa.loadKVCacheGroup).
sdpa_status sdpa_kv_group_header_check(sdpa_ctx * ctx, const void * head, size_t have, int32_t ended,
                                       uint32_t * need, uint32_t * layers, uint32_t * meta_at, uint32_t * meta_bytes);
/* ---- What an LLM runtime calls per layer -------------------------------
 *
 * Tree masks (speculative decoding). options->tree_mask, for
 * sdpa_kv_cache_attend and sdpa_kv_cache_step only (sdpa_custom: E_ARG):
 * a bool (uint8, non-zero = visible) tensor [Sq, Sq] over the call's own
 * query rows start_pos .. start_pos+Sq-1. Query row i sees key
 * start_pos + j (j <= i) iff tree_mask[i][j]; every key before start_pos
 * stays visible (a window still applies). is_causal must be 1 and no mask
 * given (E_ARG); entries above the diagonal are not read (causal). Rank 2
 * (E_RANK), bool (E_MASK_DTYPE), exactly [Sq, Sq] (E_MASK_SHAPE). The cost
 * is that of a causal step.
 */

/// Keeps the accepted rows of a verified draft: for k = 0 .. n-1 row
/// start + rows[k] becomes row start + k (K and V as stored, bit for bit),
/// then the cache is truncated to start + n. rows must be strictly
/// increasing, non-negative, with start + rows[n-1] < length (E_START_POS);
/// start <= length (E_CAPACITY, as truncate); a windowed cache: the rows
/// read and written must be kept rows and start + n a valid truncate length
/// (E_CAPACITY). n = 0 is truncate(start). E_OOM when a shared page
/// (fork) cannot be copied: the cache is then unchanged.
/// JS: KVCache.keepRows(start, rows).
sdpa_status sdpa_kv_cache_keep_rows(sdpa_ctx * ctx, sdpa_kv_cache * cache, int32_t start,
                                    const int32_t * rows, int32_t n);

/// Several sequences in one call: item i is sdpa_kv_cache_attend(ctx,
/// cache, query, mask, options, out) of its own, and all of them run on one
/// dispatch of the thread pool (their work scheduled together), each with
/// the bits of its own call. Every item is checked before anything is
/// written (messages "sdpa_kv_cache_attend_many: items[i]: ..."; the first rule in
/// table order over all items wins, ties to the lowest item); then: two
/// items of one cache, or an item's out overlapping another item's out or
/// inputs, is E_ARG. 1 .. SDPA_MANY_MAX items (E_ARG). On wasm32 an item is
/// 28 bytes: cache@0 query@4 mask@8 options@12 out@16 key@20 value@24 (key,
/// value: stepMany's; attendMany does not read them).
/// JS: sdpa.attendMany(items).
#define SDPA_MANY_MAX 64
typedef struct sdpa_attend_item {
    sdpa_kv_cache * cache;
    const sdpa_tensor * query;
    const sdpa_tensor * mask;
    const sdpa_options * options;
    sdpa_tensor * out;
    const sdpa_tensor * key;
    const sdpa_tensor * value;
} sdpa_attend_item;
sdpa_status sdpa_kv_cache_attend_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n);

/// The step form: item i is sdpa_kv_cache_step(ctx, cache, query, key, value,
/// mask, options, out) (options->start_pos: where its rows are written) of
/// its own, the same bits; every item's rules (messages
/// "sdpa_kv_cache_step_many: items[i]: ...") and the rules between items (as attend_many's, key and
/// value counting as inputs) before anything is written; the pages of all
/// writes are taken first (E_OOM: nothing written). The attention of all
/// items runs on one dispatch (a windowed cache's step that spans pages runs
/// its pieces after it). JS: sdpa.stepMany(items).
sdpa_status sdpa_kv_cache_step_many(sdpa_ctx * ctx, const sdpa_attend_item * items, int32_t n);

#ifdef __cplusplus
}
#endif
#endif /* SDPA_H */
