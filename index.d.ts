// Types for sdpa-wasm: scaled dot-product attention with a KV cache as
// WebAssembly (SIMD128 + pthreads). Semantics: docs/CONTRACT.md; API: README.md.

/** Error codes, in the order that decides which one is reported (CONTRACT.md section 2). */
export type SdpaErrorCode =
  | 'E_ARG' | 'E_RANK' | 'E_DIMS' | 'E_DTYPE' | 'E_BATCH' | 'E_HEADS' | 'E_HEAD_DIM'
  | 'E_KV_LEN' | 'E_START_POS' | 'E_CAPACITY' | 'E_MASK_DTYPE' | 'E_MASK_SHAPE'
  | 'E_MASK_CAUSAL' | 'E_DROPOUT' | 'E_SCALE' | 'E_DISPOSED' | 'E_OOM'
  /** Saved KV state that cannot be read (docs/FORMAT.md): truncated, changed, another version, ... */
  | 'E_FORMAT'
  /** Not a contract rule: the package's wasm/glue files are missing or broken. */
  | 'E_LOAD';

export class SdpaError extends Error {
  constructor(code: SdpaErrorCode, message: string, options?: { cause?: unknown; status?: number });
  readonly name: 'SdpaError';
  readonly code: SdpaErrorCode;
  /** The C status number, present when C decided the failure (a rule checked at its C entry, E_OOM, E_FORMAT); absent when JS decided it (a rule only JS can see, CONTRACT.md section 2). */
  readonly status?: number | undefined;
}

/** `float32` ↔ Float32Array; `bool` ↔ Uint8Array (masks only; non-zero = attend). */
export type DType = 'float32' | 'bool';

/**
 * The dtypes of a weight matrix (sdpa.linear, sdpa.embed; docs/CONTRACT.md section 6):
 * float32, float16 (IEEE binary16 bits), ggml's q8_0 / q4_0 / q5_0 blocks of 32 values and
 * ggml's k-quant q4_k / q6_k blocks of 256 values (block_q4_K, block_q6_K: a GGUF
 * tensor's bytes as they are in the file).
 */
export type WeightDType = 'float32' | 'float16' | 'q8_0' | 'q4_0' | 'q4_k' | 'q6_k' | 'q5_0';

/** What sdpa.allocTensor makes. */
export type HeapDType = DType | WeightDType;

/** The typed array of a dtype: `float32` ↔ Float32Array, `bool` ↔ Uint8Array; `float16` ↔ its bits (Uint16Array); `q8_0` / `q4_0` / `q5_0` / `q4_k` / `q6_k` ↔ their blocks' bytes (Uint8Array). */
export type DataOf<T extends HeapDType> = T extends 'float32' ? Float32Array : T extends 'float16' ? Uint16Array : Uint8Array;

/** A dense row-major tensor. `dtype`, when given, must agree with `data`'s type. */
export interface Tensor<D extends Float32Array | Uint8Array = Float32Array> {
  data: D;
  dims: readonly number[];
  dtype?: DType | undefined;
}
export type FloatTensor = Tensor<Float32Array> | HeapTensor<Float32Array>;
export type MaskTensor = Tensor<Float32Array> | Tensor<Uint8Array> | HeapTensor<Float32Array> | HeapTensor<Uint8Array>;

/** What the attention calls return when no `out` is given. */
export interface OutputTensor {
  data: Float32Array;
  dims: number[];
  dtype: 'float32';
}

/**
 * A tensor whose storage is in the wasm heap. `data` is a live view of wasm
 * memory, re-derived after memory growth: read it again after any call
 * rather than keeping it (a saved view is detached by growth in the
 * single-thread build, and writes through it are lost), or write with
 * set(). Reading `data` after dispose() is E_DISPOSED.
 */
export class HeapTensor<D extends Float32Array | Uint8Array | Uint16Array = Float32Array> {
  private constructor();
  readonly data: D;
  /**
   * Copies `source` into the tensor at element `offset` (default 0) of
   * `data` through the current view: safe across memory growth in every
   * build. E_DIMS when it does not fit.
   */
  set(source: ArrayLike<number>, offset?: number): void;
  /**
   * Copies bytes into the tensor's memory at byte `byteOffset` (default 0):
   * a weight file's bytes as they are, chunk by chunk, no other copy kept.
   * E_ARG for a source that is not a Uint8Array; E_DIMS when it does not fit.
   */
  setBytes(source: Uint8Array, byteOffset?: number): void;
  readonly dims: readonly number[];
  readonly dtype: HeapDType;
  /** Element count (values; a q8_0 / q4_0 / q5_0 / q4_k / q6_k tensor's `data` holds fewer bytes: see byteLength). */
  readonly length: number;
  /** Bytes in wasm memory. */
  readonly byteLength: number;
  readonly disposed: boolean;
  /** Frees the memory; a second call is a no-op. */
  dispose(): void;
}

/** Options are plain objects; an unknown name (a typo such as `is_causal`) is E_ARG. */
export interface CreateSdpaOptions {
  /**
   * Threads in all (the calling thread included). 'auto' (default) = the
   * available cores, at most 8. Only the '*-threads' builds have threads.
   * A number above the cores runs as asked up to 8 (one console.warn); above
   * the larger of the cores and 8 it is clamped to that (one console.warn).
   */
  threads?: number | 'auto' | undefined;
  /**
   * Force a build instead of choosing: 'simd-threads' (SIMD128 + pthreads;
   * needs Node or a crossOriginIsolated page) or 'simd' (one thread), and
   * their relaxed-SIMD twins 'relaxed-threads' / 'relaxed' (f32x4.relaxed_madd;
   * where WebAssembly.validate accepts relaxed SIMD, else E_LOAD with advice).
   * Default: threads in Node and in crossOriginIsolated pages (otherwise one
   * thread, with one console.warn saying why); relaxed where relaxed SIMD
   * validates (Chromium, Node >= 21, Node 20 with --experimental-wasm-relaxed-simd).
   * Any other value is E_ARG.
   */
  build?: SdpaBuild | undefined;
  /**
   * Where the dist/ files are, instead of next to the package: a URL prefix
   * (file names are appended: end it with '/'), or a map from file names to
   * URLs (files not in the map keep their default). Relative URLs resolve
   * against the page (in a worker: its script). In Node: paths or file: URLs.
   */
  wasmPaths?: string | URL | Partial<Record<SdpaDistFile, string | URL>> | undefined;
  /** The bytes of one of the dist/*.wasm files: nothing is fetched for the wasm; the bytes decide the build (plain or relaxed). */
  wasmBinary?: ArrayBuffer | Uint8Array | undefined;
  /** A compiled dist/*.wasm: nothing is fetched or compiled for the wasm; the module decides the build (plain or relaxed). */
  wasmModule?: WebAssembly.Module | undefined;
  /**
   * Milliseconds the whole load may take (default 30000; Infinity: no limit).
   * Past it createSdpa rejects with E_LOAD naming what it was waiting for
   * (e.g. a pthread worker that never starts).
   */
  initTimeout?: number | undefined;
}

/** The file names of dist/ (keys of wasmPaths; also exported as 'sdpa-wasm/dist/<name>'). */
export type SdpaDistFile =
  | 'sdpa-simd-threads.mjs' | 'sdpa-simd-threads.wasm' | 'sdpa-simd-threads.worker.js'
  | 'sdpa-simd.mjs' | 'sdpa-simd.wasm'
  | 'sdpa-relaxed-threads.mjs' | 'sdpa-relaxed-threads.wasm' | 'sdpa-relaxed-threads.worker.js'
  | 'sdpa-relaxed.mjs' | 'sdpa-relaxed.wasm';

/** The wasm builds: SIMD128 or relaxed SIMD (FMA), with pthreads or one thread. */
export type SdpaBuild = 'relaxed-threads' | 'relaxed' | 'simd-threads' | 'simd';

export interface SdpaInfo {
  readonly build: SdpaBuild;
  /** The running build uses relaxed SIMD ('relaxed-threads' or 'relaxed'). */
  readonly relaxedSimd: boolean;
  readonly threads: number;
  readonly version: string;
}

/** Options of customSdpa and KVCache.attend. */
export interface CustomSdpaOptions {
  /** Absolute position of query row 0 (default 0). Without a mask, keys 0 .. startPos+Sq-1 are read. */
  startPos?: number | undefined;
  /** [Sq, N] float32 (additive, not scaled) or bool (true = attend); N ≤ Skv keys are read. */
  attnMask?: MaskTensor | null | undefined;
  /** Must be 0 (there is no dropout). */
  dropoutP?: number | undefined;
  /**
   * Key t is masked for query row i when t > startPos + i. Not together with
   * attnMask. Default: false for customSdpa (ExecuTorch's), true for
   * KVCache.attend / step without attnMask (attention over a cache is causal
   * unless you say otherwise: false for cross-attention).
   */
  isCausal?: boolean | undefined;
  /** Finite and > 0; default 1/sqrt(D). */
  scale?: number | null | undefined;
  /**
   * A positive integer W: query row at position p sees only keys t > p - W
   * (with isCausal the last W keys, its own included). Not with attnMask.
   */
  window?: number | null | undefined;
  /** A finite c > 0: score = c * tanh(score / c) after the scale, before the mask (Gemma 2). */
  softcap?: number | null | undefined;
  /** float32 [Hq]: per-head sink logits added to the softmax denominator, with no value row (gpt-oss). */
  sinks?: FloatTensor | null | undefined;
  /** [B, Sq, Hq, D] float32; written and returned. Heap tensors are written in place. */
  out?: FloatTensor | undefined;
}

/**
 * Rotary position embeddings applied inside a cache call (ONNX Runtime
 * GroupQueryAttention's do_rotary): K rows rotated as update / step write
 * them, q rows before attend / step compute the scores. With R =
 * cos.dims[1] (rotaryDim = 2R <= D; elements 2R.. pass through) and a row
 * at position p, each pair (a, b) = (2j, 2j+1) when interleaved (GPT-J),
 * (j, j + R) otherwise (NeoX), j < R:
 *   y[a] = x[a]·cos[p][j] − x[b]·sin[p][j],  y[b] = x[b]·cos[p][j] + x[a]·sin[p][j]
 * in float32 (each product rounded, no FMA): the bits of the same rotation
 * applied outside the op. Pass the tables as heap tensors in a decode loop
 * (plain arrays are copied in on every call).
 */
export interface RotaryOptions {
  /** float32 [maxPosition, rotaryDim / 2]. */
  cos: FloatTensor;
  /** float32, cos's dims. */
  sin: FloatTensor;
  /** GPT-J pairs (2j, 2j+1) when true; default false: NeoX halves (j, j + rotaryDim/2). */
  interleaved?: boolean | null | undefined;
  /**
   * One position per new row (each in 0 .. maxPosition-1), e.g. a draft
   * tree's tokens at their depth; default: the rows' own positions
   * (startPos + i).
   */
  positions?: Int32Array | readonly number[] | null | undefined;
}

/** KVCache.update options. */
export interface UpdateOptions {
  /** K rows rotated at their positions before they are stored. */
  rotary?: RotaryOptions | null | undefined;
}

/** KVCache.attend options: customSdpa's, treeMask and rotary. */
export interface AttendOptions extends CustomSdpaOptions {
  /** q rows rotated at their positions (attend) and K rows as they are written (step). */
  rotary?: RotaryOptions | null | undefined;
  /**
   * bool [Sq, Sq] over the call's own query rows startPos .. startPos+Sq-1
   * (speculative decoding: a draft chain or tree): query row i sees row
   * startPos + j (j <= i) iff treeMask[i][j]; every row before startPos stays
   * visible (a window still applies). Causal only (isCausal: false is E_ARG),
   * not with attnMask; entries above the diagonal are not read. The cost of a
   * causal step.
   */
  treeMask?: Tensor<Uint8Array> | HeapTensor<Uint8Array> | null | undefined;
}

/** One item of sdpa.attendMany: a cache of this instance, its query and attend's options. */
export interface AttendManyItem extends AttendOptions {
  // (any dtypes: KVCache<K, V> is invariant in them)
  cache: KVCache<any, any>;
  q: FloatTensor;
}

/** One item of sdpa.stepMany: a cache of this instance, its q, k, v, where its rows go (default: its length) and step's options. */
export interface StepManyItem extends StepOptions {
  // (any dtypes: KVCache<K, V> is invariant in them)
  cache: KVCache<any, any>;
  q: FloatTensor;
  k: FloatTensor;
  v: FloatTensor;
  startPos?: number | null | undefined;
}

/** KVCache.step options: attend's options without startPos. */
export type StepOptions = Omit<AttendOptions, 'startPos'>;

export interface ScaledDotProductAttentionOptions {
  /** Rank 1-4, broadcastable to [B, Hq, L, S]; float32 (additive) or bool (true = attend). */
  attnMask?: MaskTensor | null | undefined;
  /** Must be 0. */
  dropoutP?: number | undefined;
  /** Top-left causal: row i sees keys 0..i. Not together with attnMask. */
  isCausal?: boolean | undefined;
  /** Any finite number; default 1/sqrt(E). */
  scale?: number | null | undefined;
  /** Query heads may be a multiple of key/value heads (query head h uses floor(h·Hk/Hq)). */
  enableGqa?: boolean | undefined;
}

export interface AttentionPlan {
  route: 'custom' | 'general';
  /** One human-readable reason per fast-op condition that fails; [] for 'custom'. */
  reasons: string[];
}

/** How a cache stores its rows (CONTRACT.md section 3, "Cache dtypes"). */
export type CacheDType = 'float32' | 'float16' | 'int8' | 'int4';

/** What every cache takes (createKVCache, kvCacheSize, createKVCacheGroup's entries). */
export interface KVCacheBaseOptions {
  /** Default 1. */
  batch?: number | undefined;
  numKvHeads: number;
  headDim: number;
  /**
   * 'float32' (default); 'float16' (IEEE binary16, round to nearest even);
   * 'int8' (ExecuTorch's per-token asymmetric quantization: a float32 scale
   * and an int8 zero point per row; attention runs Q·K and P·V as int16 dot
   * products, error <= 2e-3 (1 + max|ref|) against the stored values);
   * 'int4' (16 levels with a float16 scale and offset per 64 elements of a
   * row: 0.14x the bytes of float32 at head size 128; a group holding an Inf, a NaN or a
   * value beyond float16's range reads back as NaN). Writes take float32
   * and convert. K and V both, unless keyDtype / valueDtype say otherwise.
   */
  dtype?: CacheDType | undefined;
  /** How K rows are stored (overrides dtype): e.g. 'int8' with valueDtype 'int4'. */
  keyDtype?: CacheDType | undefined;
  /** How V rows are stored (overrides dtype). */
  valueDtype?: CacheDType | undefined;
  /**
   * Keep the rows of the page being filled (64 rows) as float16 in an int8 /
   * int4 block, and encode that page to its dtype once, when it fills: a
   * row's stored value changes once, then (CONTRACT.md section 3). Default:
   * true when keyDtype or valueDtype is 'int4', else false; no effect on
   * float32 / float16 blocks. Not a boolean: E_ARG.
   */
  float16NewestPage?: boolean | undefined;
}

/** A plain cache: maxSeqLen rows at most; no window, no sink rows. */
export interface PlainKVCacheOptions extends KVCacheBaseOptions {
  /** The position limit (E_CAPACITY); not an allocation. */
  maxSeqLen: number;
  window?: undefined;
  sinkTokens?: undefined;
}

/**
 * A windowed (ring) cache: it keeps only the first `sinkTokens` rows and
 * the last rows of the sequence (at least window + 64 of them), in a ring
 * of pages, so its memory stays flat however long the sequence grows.
 * Attention over it is causal (isCausal defaults to true; false, or a
 * mask, is E_ARG) and sees, from query row p, the keys t <= p with
 * t > p - window or t < sinkTokens.
 */
export interface WindowedKVCacheOptions extends KVCacheBaseOptions {
  /** A positive integer (E_DIMS). */
  window: number;
  /** Rows kept for good at the start (StreamingLLM's attention sinks); default 0. */
  sinkTokens?: number | undefined;
  /** The position limit; optional here (default 2^31 - 65537). */
  maxSeqLen?: number | undefined;
}

export type KVCacheOptions = PlainKVCacheOptions | WindowedKVCacheOptions;

/** The typed array readRaw gives for a cache dtype. */
export type RawDataOf<T extends CacheDType> =
  T extends 'float32' ? Float32Array : T extends 'float16' ? Uint16Array : T extends 'int8' ? Int8Array : Uint8Array;

/** cache.dtype: the dtype of K and V when they are the same, else null. */
export type CommonDType<K extends CacheDType, V extends CacheDType> =
  [K] extends [V] ? ([V] extends [K] ? ([CacheDType] extends [K] ? CacheDType | null : K) : null) : null;

/** What sdpa.kvCacheSize returns (CONTRACT.md section 3, "Bytes"). */
export interface KVCacheSize {
  /** Pages held: batch x numKvHeads x min(ceil(rows / 64), the table's slots per head). */
  readonly pages: number;
  /** The pool bytes of one page (its 64-byte header included). */
  readonly pageBytes: number;
  /**
   * pages x pageBytes: what sdpa.reserve needs for them. With a float16
   * newest page: the most the pool holds for the cache while the rows are
   * written (the float16 page counted at its size, also when rows ends a page).
   */
  readonly poolBytes: number;
  /** The page table, allocated when the cache is created. */
  readonly tableBytes: number;
  /** That cache's cache.bytes: poolBytes + tableBytes (with a float16 newest page: the pages held, each at its size, + tableBytes). */
  readonly bytes: number;
}

/** One half of KVCache.readRaw: the stored form of some rows. */
export interface RawRows<T extends CacheDType = CacheDType> {
  /**
   * float32 values, float16 bits, int8 values ([B, length, Hkv, D]), or int4
   * levels packed two per byte (ceil(D / 2) bytes per row, element 2i in the
   * low nibble of byte i).
   */
  data: RawDataOf<T>;
  /** [B, length, Hkv, D] */
  dims: number[];
  dtype: T;
  /**
   * int8: one float32 per (batch row, row, head), [B, length, Hkv]; int4:
   * float16 bits, one per 64 elements, [B, length, Hkv, ceil(D / 64)].
   */
  scales: T extends 'int8' ? Float32Array : T extends 'int4' ? Uint16Array : undefined;
  /** int8 only, [B, length, Hkv]: element = (value - zeroPoint) * scale. */
  zeroPoints: T extends 'int8' ? Int8Array : undefined;
  /** int4 only, float16 bits like scales: element = level * scale + offset. */
  offsets: T extends 'int4' ? Uint16Array : undefined;
}

/**
 * A paged KV cache for up to maxSeqLen rows of [batch, numKvHeads, headDim]
 * keys and values. Storage is taken from the instance's page pool as rows
 * are written (pages of 64 rows per batch row and KV head); maxSeqLen is a
 * limit (E_CAPACITY), not an allocation. Rows never written read as zeros.
 * A write may not start past `length` (E_START_POS: no holes). No input or
 * `out` of its calls may lie inside cache storage (E_ARG).
 */
export class KVCache<K extends CacheDType = CacheDType, V extends CacheDType = K> {
  private constructor();
  readonly batch: number;
  readonly maxSeqLen: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  /** The dtype of K and V; null when each has its own (keyDtype, valueDtype). */
  readonly dtype: CommonDType<K, V>;
  readonly keyDtype: K;
  readonly valueDtype: V;
  /** Whether the page being filled holds its int8 / int4 rows as float16 (createKVCache's float16NewestPage; false without an int8 / int4 block). */
  readonly float16NewestPage: boolean;
  /** A windowed cache's window; 0 for a plain cache. */
  readonly window: number;
  /** A windowed cache's sink rows; 0 for a plain cache. */
  readonly sinkTokens: number;
  /**
   * The first row kept after the sink rows: rows sinkTokens .. windowStart-1
   * were evicted (writing one is E_START_POS, reading one E_CAPACITY). 0 for a plain cache.
   */
  readonly windowStart: number;
  readonly disposed: boolean;
  /** Rows written: the highest written row + 1 (truncate lowers it). 0 once disposed. */
  readonly length: number;
  /**
   * Bytes this cache holds: its pages as the pool counts them (a 64-byte
   * header each; shared ones included) and its page table. 0 once disposed.
   */
  readonly bytes: number;
  /**
   * Writes k, v [B, Snew, Hkv, D] at rows startPos .. startPos+Snew-1
   * (default startPos: length, an append); opts.rotary rotates the K rows
   * first. update(k, v, opts) appends.
   */
  update(k: FloatTensor, v: FloatTensor, startPos?: number | null, opts?: UpdateOptions): void;
  update(k: FloatTensor, v: FloatTensor, opts?: UpdateOptions): void;
  /**
   * customSdpa(q, K, V, opts) over the cache (Skv = maxSeqLen), causal by
   * default (isCausal: false for cross-attention; with attnMask the mask
   * decides). Without startPos, q is the last Sq rows written (startPos =
   * length - Sq); without a mask, query rows past length are E_START_POS.
   */
  attend<O extends FloatTensor>(q: FloatTensor, opts: AttendOptions & { out: O }): O;
  attend(q: FloatTensor, opts?: AttendOptions): OutputTensor;
  /**
   * update(k, v, startPos) then attend(q, { startPos, ...opts }), causal by
   * default; q and k have the same length. Without startPos (or
   * step(q, k, v, opts)) it appends at length.
   */
  step<O extends FloatTensor>(q: FloatTensor, k: FloatTensor, v: FloatTensor, startPos: number | null | undefined, opts: StepOptions & { out: O }): O;
  step<O extends FloatTensor>(q: FloatTensor, k: FloatTensor, v: FloatTensor, opts: StepOptions & { out: O }): O;
  step(q: FloatTensor, k: FloatTensor, v: FloatTensor, startPos?: number | null, opts?: StepOptions): OutputTensor;
  step(q: FloatTensor, k: FloatTensor, v: FloatTensor, opts?: StepOptions): OutputTensor;
  /** Copies of rows start .. start+length-1, each [B, length, Hkv, D] (rows never written: zeros). */
  read(start: number, length: number): { k: OutputTensor; v: OutputTensor };
  /** The stored form of rows start .. start+length-1 (float16 bits, int8 values with scales and zero points, int4 nibbles with scales and offsets), K and V each in its dtype. */
  readRaw(start: number, length: number): { k: RawRows<K>; v: RawRows<V> };
  /**
   * Keeps rows 0 .. length-1 (rollback): whole pages past them go back to the
   * pool, rows past `length` read as zeros again. O(pages). E_CAPACITY past `length`.
   */
  truncate(length: number): void;
  /**
   * Keeps the accepted rows of a verified draft: row start + rows[k] becomes
   * row start + k (K and V as stored, bit for bit), then the cache ends at
   * start + rows.length (rows not kept leave nothing behind). rows: strictly
   * increasing offsets from start, each row written (E_START_POS); a
   * windowed cache: only kept rows (E_CAPACITY). keepRows(start, []) is
   * truncate(start).
   */
  keepRows(start: number, rows: readonly number[] | Int32Array): void;
  /**
   * A new cache sharing every page of this one, copy-on-write: the first
   * write into a shared page (by either cache) copies that page only. O(pages).
   */
  fork(): KVCache<K, V>;
  /**
   * Rows start .. start+length-1 (default: every row written; a windowed
   * cache's evicted rows are left out) as saved KV state (docs/FORMAT.md):
   * sdpa.loadKVCache makes the cache again, in any instance or build, with
   * bit-identical attention. Never changes the cache. E_CAPACITY past
   * length (or ending inside a windowed cache's evicted rows).
   */
  save(opts?: SaveIntoOptions): Uint8Array;
  /** save() as Uint8Array chunks of chunkBytes (default 4 MiB; the last shorter), of a snapshot taken now. */
  saveChunks(opts?: SaveChunkOptions): SaveChunks;
  /** save() as a ReadableStream of Uint8Array chunks, pulled one at a time. */
  saveStream(opts?: SaveStreamOptions): ReadableStream<Uint8Array>;
  /** Returns its pages to the pool (pages shared with a fork stay with it); a second call is a no-op. */
  dispose(): void;
}

/** A JSON value (what JSON.stringify writes and JSON.parse gives back). */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** KVCache.save's options. */
export interface SaveOptions {
  /** The first row saved (default 0; rows below it read as zeros after a load). */
  start?: number | null | undefined;
  /** Rows saved (default: every row written from start on). */
  length?: number | null | undefined;
  /** Saved with the rows and returned by the load (a model id, a tokenizer hash, ...); at most 1 MiB as JSON. */
  meta?: unknown;
}

export interface SaveIntoOptions extends SaveOptions {
  /**
   * save() only: write the save into the start of this Uint8Array of yours (at least the save's
   * bytes, else E_ARG and nothing written) and return a view of it. A buffer reused across saves
   * skips the page faults of a fresh one (save() of 256 MiB: 0.3 GB/s fresh, 1.4 GB/s reused).
   */
  into?: Uint8Array | null | undefined;
}

export interface SaveChunkOptions extends SaveOptions {
  /** Bytes per chunk (default 4 MiB, at most 2^30). */
  chunkBytes?: number | null | undefined;
}

/**
 * The chunks of a save (an iterator). Its snapshot's pages go with the last chunk, return() (or a
 * break), the cache's or group's dispose() (next() is then E_DISPOSED), or when the iterator (or
 * the stream holding it) is garbage-collected unfinished.
 */
export interface SaveChunks extends IterableIterator<Uint8Array> {
  /** Bytes of the whole save. */
  readonly bytes: number;
  return(): IteratorResult<Uint8Array, undefined>;
}

/** What sdpa.loadKVCache reads: one buffer, a Blob, a Response, a stream or an (async) iterable of chunks. */
export type KVStateSource =
  | Uint8Array | ArrayBuffer | ArrayBufferView | Blob | Response | ReadableStream<Uint8Array>
  | Iterable<Uint8Array | ArrayBuffer | ArrayBufferView> | AsyncIterable<Uint8Array | ArrayBuffer | ArrayBufferView>;

export interface LoadOptions {
  /** The restored cache's maxSeqLen (default: the saved one; at least the saved length, else E_FORMAT). */
  maxSeqLen?: number | null | undefined;
  /**
   * Aborting it rejects the load with the signal's reason (an AbortError unless you gave another),
   * cancels the source and frees whatever the load had taken; other caches are untouched. A
   * Uint8Array / ArrayBuffer source is read at the call, before any abort can come.
   */
  signal?: AbortSignal | null | undefined;
}

export interface SaveStreamOptions extends SaveChunkOptions {
  /** Aborting it errors the stream with the signal's reason and lets the snapshot's pages go. */
  signal?: AbortSignal | null | undefined;
}

/**
 * The caches of all the layers of a model (sdpa.createKVCacheGroup). Its
 * layers are ordinary caches for the per-layer calls; truncate and fork
 * check every layer first and change all or none.
 */
export class KVCacheGroup {
  private constructor();
  /** The layers' caches, in order. */
  readonly layers: readonly KVCache[];
  /** Rows every layer holds: the smallest of the layers' lengths. */
  readonly length: number;
  /** The sum of the layers' bytes. */
  readonly bytes: number;
  /** Every layer disposed. */
  readonly disposed: boolean;
  /** truncate(length) on every layer, or on none (the error names the layer). */
  truncate(length: number): void;
  /** A group of forks of every layer (copy-on-write), all or nothing. */
  fork(): KVCacheGroup;
  /** Every layer saved (each with KVCache.save's start / length), one meta: sdpa.loadKVCacheGroup reads it. */
  save(opts?: SaveIntoOptions): Uint8Array;
  saveChunks(opts?: SaveChunkOptions): SaveChunks;
  saveStream(opts?: SaveStreamOptions): ReadableStream<Uint8Array>;
  /** Disposes every layer; a second call is a no-op. */
  dispose(): void;
  [Symbol.iterator](): IterableIterator<KVCache>;
}

/** The instance's page pool (sdpa.memory()). */
export interface SdpaMemory {
  /** Token rows per page (per batch row and KV head). */
  readonly pageRows: number;
  /** Bytes taken from the wasm heap for pages (never given back: wasm memory cannot shrink). */
  readonly bytesReserved: number;
  /** Bytes of the pages caches hold (a 64-byte header per page included). */
  readonly bytesInUse: number;
  /** Free pages and reserved bytes not carved into pages yet. */
  readonly bytesFree: number;
  readonly pagesInUse: number;
  readonly pagesFree: number;
  /**
   * The wasm heap's size (its memory's bytes: pages, heap tensors, the C core's scratch and
   * everything else). It only grows (wasm memory cannot shrink): a leak shows as growth that
   * does not stop, while bytesInUse / pagesInUse show pages held.
   */
  readonly heapBytes: number;
}

export interface Sdpa {
  readonly info: SdpaInfo;
  readonly disposed: boolean;
  /** ExecuTorch custom_sdpa on [B, S, H, D] tensors; returns [B, Sq, Hq, D]. */
  /**
   * Several sequences in one call (beam search, parallel sampling, concurrent
   * requests): item i is items[i].cache.attend(items[i].q, options) of its own,
   * with exactly its bits, and all of them run on one dispatch of the thread
   * pool. Every item is checked before anything is written (messages name
   * `items[i]`); two items of one cache, or an item's out overlapping another
   * item's out or inputs, is E_ARG. 1 .. 64 items. Returns the outputs in
   * item order (an item's `out` when given).
   */
  attendMany(items: readonly AttendManyItem[]): Array<OutputTensor | FloatTensor>;
  /**
   * The step form of attendMany: item i is
   * items[i].cache.step(q, k, v, startPos, options) of its own, the same bits
   * (outputs and rows written); every item's rules and the rules between
   * items (key and value count as inputs) before anything is written; the
   * pages of every write are taken first. 1 .. 64 items, one per cache.
   */
  stepMany(items: readonly StepManyItem[]): Array<OutputTensor | FloatTensor>;
  customSdpa<O extends FloatTensor>(query: FloatTensor, key: FloatTensor, value: FloatTensor, opts: CustomSdpaOptions & { out: O }): O;
  customSdpa(query: FloatTensor, key: FloatTensor, value: FloatTensor, opts?: CustomSdpaOptions): OutputTensor;
  createKVCache<Kd extends CacheDType, Vd extends CacheDType>(options: KVCacheOptions & { keyDtype: Kd; valueDtype: Vd }): KVCache<Kd, Vd>;
  createKVCache<T extends CacheDType>(options: KVCacheOptions & { dtype: T; keyDtype?: undefined; valueDtype?: undefined }): KVCache<T, T>;
  createKVCache(options: KVCacheOptions & { dtype?: undefined; keyDtype?: undefined; valueDtype?: undefined }): KVCache<'float32', 'float32'>;
  createKVCache(options: KVCacheOptions): KVCache;
  /** The caches of all the layers of a model: one createKVCache options object per layer; all or nothing. */
  createKVCacheGroup(configs: readonly KVCacheOptions[]): KVCacheGroup;
  /**
   * A new cache of this instance from saved KV state (KVCache.save):
   * E_FORMAT for anything that is not a whole, unchanged save this build
   * reads (nothing is made then); E_OOM when the pool cannot hold it.
   */
  loadKVCache(source: KVStateSource, opts?: LoadOptions): Promise<{ cache: KVCache; meta: JsonValue | undefined }>;
  /** A new group from KVCacheGroup.save's bytes (all layers or none). */
  loadKVCacheGroup(source: KVStateSource, opts?: LoadOptions): Promise<{ group: KVCacheGroup; meta: JsonValue | undefined }>;
  /**
   * What a cache made with `options` holds once rows 0 .. rows-1 are written
   * (default: maxSeqLen): reserve(poolBytes) after creating the caches and
   * a decode loop writing them allocates nothing. E_CAPACITY past maxSeqLen.
   */
  kvCacheSize(options: KVCacheOptions, rows?: number): KVCacheSize;
  /** The page pool of this instance's caches. */
  memory(): SdpaMemory;
  /**
   * Grows the page pool so that writes into the caches that exist now,
   * taking at most `bytes` of pages (kvCacheSize's poolBytes), allocate
   * nothing. E_OOM past the heap.
   */
  reserve(bytes: number): void;
  /**
   * A zero-filled heap tensor. A weight dtype's tensor (float16, q8_0,
   * q4_0, q5_0, q4_k, q6_k) is for the dense calls; q8_0 / q4_0 / q5_0 need
   * a last dim that is a multiple of 32, q4_k / q6_k of 256 (E_DIMS).
   */
  allocTensor<T extends HeapDType>(dtype: T, dims: readonly number[]): HeapTensor<DataOf<T>>;
  /**
   * out = x · weightᵀ (+ out with accumulate). x float32 [..., in], weight
   * [outFeatures, in] in any weight dtype, out float32 [..., outFeatures].
   * Every tensor lives in this instance's wasm memory (a heap tensor or a
   * view of one). Returns out (a new heap tensor when none is given).
   */
  linear<O extends DenseTensor>(x: DenseTensor, weight: HeapTensor<Float32Array | Uint16Array | Uint8Array>, opts: LinearOptions & { out: O }): O;
  linear(x: DenseTensor, weight: HeapTensor<Float32Array | Uint16Array | Uint8Array>, opts?: LinearOptions): HeapTensor<Float32Array>;
  /** out[i] = weight · x[i] / sqrt(mean(x[i]²) + eps); weight float32 [dim]; out may be x. */
  rmsNorm<O extends DenseTensor>(x: DenseTensor, weight: DenseTensor, opts: RmsNormOptions & { out: O }): O;
  rmsNorm(x: DenseTensor, weight: DenseTensor, opts?: RmsNormOptions): HeapTensor<Float32Array>;
  /** out = silu(gate) · up elementwise; out may be gate or up. */
  swiglu<O extends DenseTensor>(gate: DenseTensor, up: DenseTensor, opts: DenseRowsOptions & { out: O }): O;
  swiglu(gate: DenseTensor, up: DenseTensor, opts?: DenseRowsOptions): HeapTensor<Float32Array>;
  /**
   * linear with its arguments fixed once (create / run, as XNNPACK's operators): the plain call's
   * JS checks now (errors named `sdpa.prepareLinear`), its structs written once into a block the
   * returned call owns. `out` is required. Each `run()` checks liveness, then C checks every rule
   * (errors: the plain call's, named `sdpa.linear`). docs/CONTRACT.md section 6, "Prepared calls".
   */
  prepareLinear(x: DenseTensor, weight: HeapTensor<Float32Array | Uint16Array | Uint8Array>, opts: LinearOptions & { out: DenseTensor }): PreparedCall;
  /** rmsNorm with its arguments fixed once (as prepareLinear); `out` required. */
  prepareRmsNorm(x: DenseTensor, weight: DenseTensor, opts: RmsNormOptions & { out: DenseTensor }): PreparedCall;
  /** swiglu with its arguments fixed once (as prepareLinear); `out` required. */
  prepareSwiglu(gate: DenseTensor, up: DenseTensor, opts: DenseRowsOptions & { out: DenseTensor }): PreparedCall;
  /** out[i] = table[ids[i]] as float32, for a table [vocab, dim] in any weight dtype. */
  embed<O extends DenseTensor>(table: HeapTensor<Float32Array | Uint16Array | Uint8Array>, ids: Int32Array | readonly number[], opts: { out: O }): O;
  embed(table: HeapTensor<Float32Array | Uint16Array | Uint8Array>, ids: Int32Array | readonly number[], opts?: { out?: DenseTensor | null | undefined }): HeapTensor<Float32Array>;
  /**
   * out = source [rows, cols] (float32) in out's weight dtype: float16 rounds
   * to nearest even, q8_0 / q4_0 are ggml's reference quantization; q5_0 / q4_k /
   * q6_k are not offered (E_DTYPE). Returns out.
   */
  quantize<O extends HeapTensor<Float32Array | Uint16Array | Uint8Array>>(source: DenseTensor, out: O): O;
  /** torch.nn.functional.scaled_dot_product_attention on [B, H, S, D]; returns [B, Hq, L, Ev]. */
  scaledDotProductAttention(query: FloatTensor, key: FloatTensor, value: FloatTensor, opts?: ScaledDotProductAttentionOptions): OutputTensor;
  /** Throws what scaledDotProductAttention would throw; otherwise the route it takes. */
  planAttention(query: FloatTensor, key: FloatTensor, value: FloatTensor, opts?: ScaledDotProductAttentionOptions): AttentionPlan;
  /** Frees every cache and heap tensor made here, the context, and ends the worker threads. */
  dispose(): void;
}

/** A float32 tensor in an instance's wasm memory: a heap tensor, or a view { data, dims } of one. */
export type DenseTensor = HeapTensor<Float32Array> | Tensor<Float32Array>;

/**
 * A dense call prepared once (sdpa.prepareLinear / prepareRmsNorm / prepareSwiglu) and run many
 * times on its tensors' current values. It holds a small block of wasm memory: dispose() it (the
 * instance's dispose() does too). Disposing it leaves its tensors alone.
 */
export interface PreparedCall {
  /** The plain call it runs, which names its errors: 'sdpa.linear', 'sdpa.rmsNorm' or 'sdpa.swiglu'. */
  readonly name: 'sdpa.linear' | 'sdpa.rmsNorm' | 'sdpa.swiglu';
  /** True after dispose(), its own or the instance's. */
  readonly disposed: boolean;
  /**
   * Computes the call again. E_DISPOSED when the instance, a tensor it was given (a view: the heap
   * tensor holding it) or the call itself was disposed; any other rule is C's, checked on every run,
   * the plain call's error. Nothing is written on an error; no JS object is made on success.
   */
  run(): void;
  /** Frees its block. A second call is a no-op. */
  dispose(): void;
}

/** Options of the dense calls that take activations row by row. */
export interface DenseRowsOptions {
  /** Where the result goes (default: a new heap tensor). */
  out?: DenseTensor | null | undefined;
  /** Compute only the first `rows` rows of every activation argument (E_DIMS past what a tensor holds). */
  rows?: number | undefined;
}
export interface LinearOptions extends DenseRowsOptions {
  /** out += x · weightᵀ (a residual add fused in). Default false. */
  accumulate?: boolean | undefined;
  /**
   * 'int16': with q8_0 / q4_0 / q5_0 weights, x is quantized per row and block of 32 to int16 and the
   * block dots are exact integer arithmetic (about twice as fast; error <= half a step, 1/65534 of a block's
   * largest |x| per value). No effect on float32 / float16 / q4_k / q6_k weights. Default 'float32'.
   */
  activations?: 'float32' | 'int16' | undefined;
}
export interface RmsNormOptions extends DenseRowsOptions {
  /** Default 1e-5 (llama2.c's). Finite and >= 0. */
  eps?: number | undefined;
}

export function createSdpa(options?: CreateSdpaOptions): Promise<Sdpa>;

export function isHeapTensor(x: unknown): x is HeapTensor<Float32Array | Uint8Array | Uint16Array>;

/**
 * Reads an options object as the package's own calls read theirs (CONTRACT.md section 2, the
 * snapshot rule): undefined or null is {}; each name of `known` once (getters, inherited and
 * non-enumerable options count); any other name is E_ARG (`unknown option 'x'; the options are
 * ...`); not a plain object is E_ARG. Returns the values of `known` (absent: undefined). A
 * failure is an SdpaError whose message starts with `fn`. For packages built on this one
 * (sdpa-wasm/llama), so that their options read and word as the package's.
 */
export function checkOptions<K extends string>(fn: string, options: unknown, known: readonly K[]): { [P in K]: unknown };

/** Error codes indexed by C status number (index 0 is 'OK'). */
export const STATUS_CODES: readonly string[];
export const E_LOAD: 'E_LOAD';
export const VERSION: string;

