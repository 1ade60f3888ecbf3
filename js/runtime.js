// runtime.js: the boundary with wasm memory for one instance.
//
// - Views are re-derived from the memory's CURRENT buffer (growth replaces it).
// - All per-call argument structs live in ONE scratch block malloc'ed at
//   creation (never per call): 5 sdpa_tensor, 1 sdpa_options, an out-pointer.
// - Plain typed arrays are copied into temporary heap buffers (freed in
//   `finally`); heap tensors are passed by pointer, without a copy.
// - A status returned by a wasm entry (src/wasm/api.h) becomes an SdpaError:
//   the call's name, then C's message (the rule's words alone).

import { SdpaError, codeOfStatus } from './errors.js';
import { HeapTensor, DTYPE_BYTES, tensorBytes, heapState, heapView, noteMemoryBuffer, memoryOwner, staleInputWarning } from './heap.js';
import { prod, fmtDims, INT32_MAX } from './shape.js';
import { typedArraySet } from './intrinsics.js';
import {
  LAYOUT, TENSOR_DTYPES, WEIGHT_DTYPES, CACHE_DTYPES, TENSOR_MAX_RANK, POINTER_BYTES, MANY_MAX, GEOMETRY_FIELDS,
} from './abi.js';

// Every size and offset of a C struct comes from js/abi.js (generated from the C
// headers by scripts/abi.c); what is JS's own is how it arranges those structs
// in its blocks (regions below).
const TENSOR = LAYOUT.sdpa_tensor, OPTIONS = LAYOUT.sdpa_options, ROTARY = LAYOUT.sdpa_rotary;
const ITEM = LAYOUT.sdpa_attend_item;
/** A struct's field offsets in 32-bit words (JS writes them through Int32 / Uint32 / Float32 views). */
const words = (s) => Object.freeze(Object.fromEntries(Object.entries(s).filter(([k]) => k !== 'size' && k !== 'align').map(([k, v]) => [k, v >>> 2])));
const TW = words(TENSOR), OW = words(OPTIONS), RW = words(ROTARY), IW = words(ITEM);
const OPTIONS_WORDS = OPTIONS.size >>> 2;
/** sdpa_dtype numbers of the tensor dtypes (undefined, written as 0, for any other name). */
const DTYPE_ID = Object.freeze({
  ...Object.fromEntries(Object.entries(WEIGHT_DTYPES).map(([name, d]) => [name, d.id])),
  ...Object.fromEntries(Object.entries(TENSOR_DTYPES).map(([name, d]) => [name, d.id])),
});
const F32_BYTES = TENSOR_DTYPES.float32.bytes, I32_BYTES = Int32Array.BYTES_PER_ELEMENT;
/** Every region of a block starts this aligned: the strictest C struct's alignment (sdpa_options' int64). */
const ALIGN = Math.max(...Object.values(LAYOUT).map((s) => s.align));
const alignUp = (n) => Math.ceil(n / ALIGN) * ALIGN;

/** Named regions of the given byte sizes, one after another, each ALIGN-aligned: { at: name -> offset, bytes }. */
function regions(sizes) {
  const at = {};
  let end = 0;
  for (const [name, bytes] of Object.entries(sizes)) {
    at[name] = alignUp(end);
    end = at[name] + bytes;
  }
  return { at: Object.freeze(at), bytes: alignUp(end) };
}

/** Positions a rotary block holds inline (more go to a temporary). */
export const ROTARY_INLINE_POSITIONS = 64;
/** A rotary block (putRotary): sdpa_rotary, its cos and sin tensors, room for the positions. */
const ROTARY_BLOCK = regions({
  rotary: ROTARY.size, cos: TENSOR.size, sin: TENSOR.size, positions: ROTARY_INLINE_POSITIONS * I32_BYTES,
});
/**
 * The scratch block, malloc'ed once per instance: the argument structs of one
 * call (5 tensors, sinks, options), an out pointer or status (ptr), the
 * out-structs sdpa_memory_stats / sdpa_kv_cache_size (stats), a cache's
 * geometry (putGeometry), the tree mask's tensor and a rotary block.
 */
const SCRATCH = regions({
  q: TENSOR.size, k: TENSOR.size, v: TENSOR.size, mask: TENSOR.size, out: TENSOR.size, sinks: TENSOR.size,
  opts: OPTIONS.size, ptr: POINTER_BYTES, stats: Math.max(LAYOUT.sdpa_memory_stats.size, LAYOUT.sdpa_kv_cache_size.size),
  geometry: GEOMETRY_FIELDS * 8, tree: TENSOR.size, rotary: ROTARY_BLOCK.bytes,
});
/** Byte offsets of the scratch block's regions. */
export const SLOT = SCRATCH.at;
export const SCRATCH_BYTES = SCRATCH.bytes;
/**
 * attendMany's / stepMany's block: the sdpa_attend_item array (MANY_MAX of
 * them: ITEMS_BYTES), then per item an ITEM_BLOCK holding its tensors,
 * options and rotary block.
 */
const ITEMS_BYTES = alignUp(ITEM.size * MANY_MAX);
const ITEM_BLOCK = regions({
  query: TENSOR.size, mask: TENSOR.size, out: TENSOR.size, sinks: TENSOR.size, treeMask: TENSOR.size,
  options: OPTIONS.size, key: TENSOR.size, value: TENSOR.size, rotary: ROTARY_BLOCK.bytes,
});

/** tensorHolding's bucket sizes: small tensors' and large (>= 1 MiB) ones'. */
const BUCKET_BYTES = Object.freeze([4096, 1 << 20]);

export function formatBytes(n) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${Number.isInteger(n) ? n : n.toFixed(2)} ${u[i]}`;
}

/** Writes an sdpa_tensor at byte address `at` through the views `v`. */
export function putTensor(v, at, ptr, len, dtype, dims) {
  const w = at >>> 2;
  v.u32[w + TW.data] = ptr >>> 0;
  v.u32[w + TW.len] = len >>> 0;
  v.i32[w + TW.dtype] = DTYPE_ID[dtype];
  v.i32[w + TW.rank] = dims.length;
  for (let i = 0; i < TENSOR_MAX_RANK; i++) v.i32[w + TW.dims + i] = i < dims.length ? dims[i] : 0;
}

/**
 * Writes an sdpa_options at byte address `at` (dropout_p is always 0: JS
 * rejects any other). window / softcap: 0 for none; sinksAt: the address of
 * the sinks tensor struct, or 0.
 */
function putOptions(v, at, startPos, isCausal, scale, window = 0, softcap = 0, sinksAt = 0, treeAt = 0, rotaryAt = 0) {
  const w = at >>> 2;
  const hasScale = scale !== null && scale !== undefined;
  v.u32.fill(0, w, w + OPTIONS_WORDS); // (the padding too: every byte written)
  v.u32[w + OW.start_pos] = startPos % 0x100000000; // an int64: low word, then high word
  v.u32[w + OW.start_pos + 1] = Math.floor(startPos / 0x100000000);
  v.i32[w + OW.is_causal] = isCausal ? 1 : 0;
  v.i32[w + OW.has_scale] = hasScale ? 1 : 0;
  v.f32[w + OW.scale] = hasScale ? scale : 0;
  v.f32[w + OW.dropout_p] = 0;
  v.i32[w + OW.window] = window;
  v.f32[w + OW.softcap] = softcap;
  v.u32[w + OW.sinks] = sinksAt >>> 0;
  v.u32[w + OW.tree_mask] = treeAt >>> 0;
  v.u32[w + OW.rotary] = rotaryAt >>> 0;
}

const decoder = new TextDecoder();

/** staleInputWarning for a tensor descriptor (null: none, or not a heap tensor). */
const staleOf = (d, buffer) => (d && d.heap ? staleInputWarning(d.heap, d.name, buffer) : null);

export class Core {
  constructor(M) {
    this.M = M;
    this.ctx = 0;
    this.scratch = 0;
    this.disposed = false;
    this.tensors = new Set();
    /**
     * tensorHolding's index: address buckets -> the live heap tensors overlapping them, 4 KiB
     * buckets for tensors below 1 MiB and 1 MiB buckets for larger ones, so that finding the
     * tensor under a view, making one and freeing one each cost a few bucket visits
     * (a walk over every tensor cost a model's step 17% with a few hundred of them live).
     */
    this.buckets = [new Map(), new Map()];
    this.caches = new Set();
    /** Live prepared dense calls (dense.js PreparedCall): their blocks are freed by sdpa.dispose(). */
    this.prepared = new Set();
    /** Savers and loaders of saved KV state under way (kv-state.js): freed first by sdpa.dispose(). */
    this.states = new Set();
    this._buf = null;
    this._seen = null; // the last buffer recorded by noteMemoryBuffer
    this.staleWarned = false;
    this.manyBlock = 0; // attendMany's items block (runMany), made at its first call
    this.idsAt = 0;     // sdpa.embed's ids (idsBlock)
    this.idsCapacity = 0;
  }

  /**
   * One console.warn per instance when an input heap tensor's last handed-out
   * view predates memory growth (heap.js: a saved view may have lost writes).
   * Runs after validation, before the call computes; descriptors may be null.
   */
  warnStaleInputs(a, b, c) {
    if (this.staleWarned) return;
    const buffer = this.currentBuffer();
    const msg = staleOf(a, buffer) ?? staleOf(b, buffer) ?? staleOf(c, buffer);
    if (msg !== null) {
      this.staleWarned = true;
      console.warn(msg);
    }
  }

  /** E_DISPOSED once the instance was disposed. */
  checkAlive(ck) {
    if (this.disposed) ck.add('E_DISPOSED', 'this sdpa instance was disposed');
  }

  // -- memory views -------------------------------------------------------

  /**
   * The memory's buffer now (for a shared memory, reading it is not free:
   * read it once per use). Every buffer the package hands out comes from
   * here, and is recorded as this memory's (memoryOwner) for good.
   */
  currentBuffer() {
    const M = this.M;
    const b = M.wasmMemory ? M.wasmMemory.buffer : M.HEAPU8.buffer;
    if (b !== this._seen) {
      this._seen = b;
      noteMemoryBuffer(b, this);
    }
    return b;
  }

  /** The live heap tensor of this instance whose bytes hold [start, end), or null. */
  tensorHolding(start, end) {
    for (let k = 0; k < 2; k++) {
      const list = this.buckets[k].get(Math.floor(start / BUCKET_BYTES[k]));
      if (list === undefined) continue;
      for (let i = 0; i < list.length; i++) {
        const r = heapState(list[i]).region;
        if (r.start <= start && end <= r.end) return list[i];
      }
    }
    return null;
  }

  /** Adds (add true) or removes a live tensor's region in tensorHolding's buckets. */
  index(t, add) {
    const { start, end } = heapState(t).region;
    const k = end - start >= BUCKET_BYTES[1] ? 1 : 0, size = BUCKET_BYTES[k], map = this.buckets[k];
    for (let b = Math.floor(start / size), last = Math.floor((end - 1) / size); b <= last; b++) {
      const list = map.get(b);
      if (add) {
        if (list === undefined) map.set(b, [t]);
        else list.push(t);
      } else if (list !== undefined) {
        const i = list.indexOf(t);
        if (i >= 0) list.splice(i, 1);
        if (list.length === 0) map.delete(b);
      }
    }
  }

  /** 'its pages' when [start, end) overlaps the memory of this instance's KV cache pages, else null. */
  cacheHolding(start, end) {
    return end > start && this.M._sdpa_ctx_owns_pages(this.ctx, start, end - start) ? 'its pages' : null;
  }

  /** Typed views over the current buffer, rebuilt only when it changed. */
  views() {
    const b = this.currentBuffer();
    if (b !== this._buf) {
      this._buf = b;
      this.u8 = new Uint8Array(b);
      this.i32 = new Int32Array(b);
      this.u32 = new Uint32Array(b);
      this.f32 = new Float32Array(b);
    }
    return this;
  }

  heapBytes() { return this.currentBuffer().byteLength; }

  /** The int64 at byte address `at` (a field of a C struct: non-negative, exact below 2^53). */
  int64At(at) {
    const u32 = this.views().u32, w = at >>> 2;
    return u32[w] + u32[w + 1] * 0x100000000;
  }

  /** malloc or E_OOM; returns the unsigned address. */
  malloc(bytes, fn, what) {
    const p = bytes > 0xffffffff ? 0 : this.M._malloc(bytes) >>> 0;
    if (p === 0) {
      throw new SdpaError('E_OOM', `${fn}: the wasm heap cannot hold ${what} (${formatBytes(bytes)}; heap now ${formatBytes(this.heapBytes())}, at most 4 GiB)`);
    }
    return p;
  }

  free(p) { if (p) this.M._free(p); }

  readCString(p) {
    p >>>= 0;
    if (!p) return '';
    const u8 = this.views().u8;
    let end = p;
    while (end < u8.length && u8[end] !== 0) end++;
    return decoder.decode(u8.slice(p, end));
  }

  /**
   * Throws the SdpaError for a non-zero status of a wasm entry
   * (src/wasm/api.h), whose message is the rule's words alone: the call's
   * name goes first, once.
   */
  checkEntry(status, fn) {
    if (status === 0) return;
    const code = codeOfStatus(status), msg = this.lastError();
    throw new SdpaError(code, `${fn}: ${msg || `the C core returned ${code} (status ${status})`}`, { status });
  }

  /** The context's last message: a wasm entry's failure (src/wasm/api.h), the rule's words alone. */
  lastError() {
    return this.readCString(this.M._sdpa_ctx_last_error(this.ctx));
  }

  // -- argument structs ---------------------------------------------------

  writeTensor(slot, ptr, len, dtype, dims) {
    putTensor(this.views(), this.scratch + slot, ptr, len, dtype, dims);
  }

  writeOptions(startPos, isCausal, scale) {
    putOptions(this.views(), this.scratch + SLOT.opts, startPos, isCausal, scale);
  }

  slot(name) { return this.scratch + SLOT[name]; }

  /**
   * A cache geometry JS read (rules.js readCacheConfig) as the numbers
   * sdpa_wasm_kv_cache_create / _group_create take (GEOMETRY_FIELDS doubles
   * at byte address `at`, 8-aligned; default: its slot). Returns `at`.
   */
  putGeometry(geo, at = this.scratch + SLOT.geometry) {
    new Float64Array(this.views().u8.buffer, at, GEOMETRY_FIELDS).set([geo.batch, geo.maxSeqLen, geo.numKvHeads, geo.headDim,
      CACHE_DTYPES[geo.keyDtype], CACHE_DTYPES[geo.valueDtype], geo.window, geo.sinkTokens, geo.float16NewestPage ? 1 : 0]);
    return at;
  }

  /**
   * A checked rotary ({ C, S, interleaved, positions }: kv-cache.js #rules) as a rotary block at `at`
   * (ROTARY_BLOCK); its tables by address when they live in this memory,
   * else copied in, and more than ROTARY_INLINE_POSITIONS positions, as
   * temporaries pushed onto `temps` (the caller frees them). Returns the
   * address of its sdpa_rotary, or 0 for no rotary.
   */
  putRotary(fn, rot, at, temps) {
    if (rot === null) return 0;
    let c = this.addressOf(rot.C), s = this.addressOf(rot.S);
    if (c === -1) temps.push(c = this.copyIn(rot.C, fn));
    if (s === -1) temps.push(s = this.copyIn(rot.S, fn));
    const n = rot.positions === null ? 0 : rot.positions.length;
    const B = ROTARY_BLOCK.at, r = at + B.rotary;
    let p = n ? at + B.positions : 0;
    if (n > ROTARY_INLINE_POSITIONS) temps.push(p = this.malloc(n * I32_BYTES, fn, 'a temporary copy of rotary.positions'));
    const h = this.views(), w = r >>> 2;
    if (n) typedArraySet(h.i32, rot.positions, p >>> 2);
    putTensor(h, at + B.cos, c, rot.C.len, 'float32', rot.C.dims);
    putTensor(h, at + B.sin, s, rot.S.len, 'float32', rot.S.dims);
    h.u32[w + RW.cos] = at + B.cos;
    h.u32[w + RW.sin] = at + B.sin;
    h.i32[w + RW.interleaved] = rot.interleaved ? 1 : 0;
    h.i32[w + RW.n_positions] = n;
    h.u32[w + RW.positions] = p;
    return r;
  }

  // -- placing tensors in wasm memory --------------------------------------

  /**
   * The address of a tensor that already lives in this instance's memory (a
   * heap tensor of this instance, or a view of its current buffer), else -1.
   * Resolve it before any malloc: growth replaces the buffer, and in the
   * single-thread build it DETACHES views of the old one.
   */
  addressOf(d) {
    if (d.heap) return d.heap.rt === this ? d.heap.ptr : -1;
    // (a view of this memory, now or before growth: checkLive put it inside a live heap tensor)
    return memoryOwner(d.buffer) === this ? d.byteOffset : -1;
  }

  /** A temporary copy of a tensor that is not in this memory (the caller frees it). */
  copyIn(d, fn) {
    // (a heap tensor of another instance or a plain array: never detached by our growth)
    const buffer = d.heap ? d.heap.rt.currentBuffer() : d.buffer;
    const offset = d.heap ? d.heap.ptr : d.byteOffset;
    const bytes = d.heap ? d.heap.region.end - d.heap.region.start : d.byteLength;
    const p = this.malloc(bytes, fn, `a temporary copy of ${d.name}`);
    typedArraySet(this.views().u8, new Uint8Array(buffer, offset, bytes), p);
    return p;
  }

  /**
   * One attention call: places the inputs, writes the structs, invokes C's
   * entry (which checks every rule of the call before it writes anything),
   * copies the output back. `P` the plan of JS's own rules (checkCustom,
   * kv-cache.js #plan: its Q, M, O and scalar options); `K`, `V` the key/value
   * descriptors (null for a cache attend); `invoke(maskSlot)` calls the entry
   * with the slot addresses and returns a status. An input copied in is its
   * typed array's own bytes (checkDimsFit held them to their dims' product
   * before this: a rejected call copies no more than its dims say); the output goes to `out` in place when it lives
   * in wasm memory, else to a temporary of out's own size copied into `out`
   * (or a new Float32Array) after success. With every tensor a heap tensor
   * of this instance nothing is malloc'ed or copied.
   */
  runAttention(fn, P, startPos, K, V, invoke) {
    const { Q, M, O, S, T } = P;
    const n = Q.len;
    this.warnStaleInputs(Q, K, V);
    // Every address inside wasm memory first (out included), then temporaries.
    let o = O ? this.addressOf(O) : -1;
    let m = M ? this.addressOf(M) : 0;
    let q = this.addressOf(Q);
    let k = K ? this.addressOf(K) : 0;
    let v = V ? this.addressOf(V) : 0;
    let sk = S ? this.addressOf(S) : 0;
    let tr = T ? this.addressOf(T) : 0;
    let tm = 0, tq = 0, tk = 0, tv = 0, to = 0, ts = 0, tt = 0;
    const temps = [];
    try {
      const s = this.scratch;
      const ra = this.putRotary(fn, P.rot ?? null, s + SLOT.rotary, temps);
      if (sk === -1) sk = ts = this.copyIn(S, fn);
      if (tr === -1) tr = tt = this.copyIn(T, fn);
      if (m === -1) m = tm = this.copyIn(M, fn);
      if (q === -1) q = tq = this.copyIn(Q, fn);
      if (k === -1) k = tk = this.copyIn(K, fn);
      if (v === -1) v = tv = this.copyIn(V, fn);
      if (o === -1) o = to = this.malloc((O ? O.len : n) * F32_BYTES, fn, 'a temporary output');
      const h = this.views();
      putTensor(h, s + SLOT.q, q, n, Q.dtype, Q.dims);
      if (K) putTensor(h, s + SLOT.k, k, K.len, K.dtype, K.dims);
      if (V) putTensor(h, s + SLOT.v, v, V.len, V.dtype, V.dims);
      if (M) putTensor(h, s + SLOT.mask, m, M.len, M.dtype, M.dims);
      // (out as given: the entry checks its dims; none given: the output's, a temporary of the query's size)
      if (O) putTensor(h, s + SLOT.out, o, O.len, O.dtype, O.dims);
      else putTensor(h, s + SLOT.out, o, n, 'float32', Q.dims);
      if (S) putTensor(h, s + SLOT.sinks, sk, S.len, 'float32', S.dims);
      if (T) putTensor(h, s + SLOT.tree, tr, T.len, T.dtype, T.dims);
      putOptions(h, s + SLOT.opts, startPos, P.isCausal, P.scale, P.window, P.softcap, S ? s + SLOT.sinks : 0, T ? s + SLOT.tree : 0, ra);
      this.checkEntry(invoke(M ? s + SLOT.mask : 0), fn);
      if (to === 0) return O.t;
      const f32 = this.views().f32, w = to >>> 2;
      const result = O ? (O.heap ? heapView(O.heap) : O.data) : new Float32Array(n);
      typedArraySet(result, f32.subarray(w, w + n));
      return O ? O.t : { data: result, dims: Q.dims.slice(), dtype: 'float32' };
    } finally {
      this.free(tm); this.free(tq); this.free(tk); this.free(tv); this.free(to); this.free(ts); this.free(tt);
      for (const p of temps) this.free(p);
    }
  }

  /**
   * attendMany's / stepMany's items ({ P, sp, ptr, K, V }: JS's rules held)
   * as sdpa_attend_item structs in one block made at the first call
   * (ITEM_BLOCK per item, for MANY_MAX items: a decode loop allocates
   * nothing), one call of C's entry, which checks every item and the rules
   * between them before it writes anything; returns the outputs in item order.
   */
  runMany(fn, items, step = false) {
    const n = items.length;
    const addr = items.map(({ P, K, V }) => ({
      o: P.O ? this.addressOf(P.O) : -1, q: this.addressOf(P.Q), m: P.M ? this.addressOf(P.M) : 0,
      s: P.S ? this.addressOf(P.S) : 0, t: P.T ? this.addressOf(P.T) : 0,
      k: K ? this.addressOf(K) : 0, v: V ? this.addressOf(V) : 0,
    }));
    const temps = [], outs = new Array(n).fill(0);
    if (!this.manyBlock) this.manyBlock = this.malloc(ITEMS_BYTES + ITEM_BLOCK.bytes * MANY_MAX, fn, 'the items block'); // (once per instance)
    const B = ITEM_BLOCK.at, blockAt = (i) => this.manyBlock + ITEMS_BYTES + i * ITEM_BLOCK.bytes;
    for (const { P, K, V } of items) this.warnStaleInputs(P.Q, K, V);
    try {
      for (let i = 0; i < n; i++) {
        const P = items[i].P, a = addr[i];
        a.r = this.putRotary(fn, P.rot ?? null, blockAt(i) + B.rotary, temps);
        if (a.s === -1) temps.push(a.s = this.copyIn(P.S, fn));
        if (a.m === -1) temps.push(a.m = this.copyIn(P.M, fn));
        if (a.t === -1) temps.push(a.t = this.copyIn(P.T, fn));
        if (a.q === -1) temps.push(a.q = this.copyIn(P.Q, fn));
        if (a.k === -1) temps.push(a.k = this.copyIn(items[i].K, fn));
        if (a.v === -1) temps.push(a.v = this.copyIn(items[i].V, fn));
        if (a.o === -1) temps.push(a.o = outs[i] = this.malloc((P.O ? P.O.len : P.Q.len) * F32_BYTES, fn, 'a temporary output'));
      }
      const h = this.views();
      for (let i = 0; i < n; i++) {
        // (the sdpa_attend_item array first; then each item's tensors and options)
        const { P, sp, ptr } = items[i], a = addr[i], at = blockAt(i), w = (this.manyBlock + ITEM.size * i) >>> 2;
        putTensor(h, at + B.query, a.q, P.Q.len, P.Q.dtype, P.Q.dims);
        if (P.M) putTensor(h, at + B.mask, a.m, P.M.len, P.M.dtype, P.M.dims);
        if (P.O) putTensor(h, at + B.out, a.o, P.O.len, P.O.dtype, P.O.dims);
        else putTensor(h, at + B.out, a.o, P.Q.len, 'float32', P.Q.dims);
        if (P.S) putTensor(h, at + B.sinks, a.s, P.S.len, 'float32', P.S.dims);
        if (P.T) putTensor(h, at + B.treeMask, a.t, P.T.len, P.T.dtype, P.T.dims);
        putOptions(h, at + B.options, sp, P.isCausal, P.scale, P.window, P.softcap, P.S ? at + B.sinks : 0, P.T ? at + B.treeMask : 0, a.r);
        h.u32[w + IW.cache] = ptr >>> 0;
        h.u32[w + IW.query] = at + B.query;
        h.u32[w + IW.mask] = P.M ? at + B.mask : 0;
        h.u32[w + IW.options] = at + B.options;
        h.u32[w + IW.out] = at + B.out;
        const { K, V } = items[i];
        if (K) putTensor(h, at + B.key, a.k, K.len, K.dtype, K.dims);
        if (V) putTensor(h, at + B.value, a.v, V.len, V.dtype, V.dims);
        h.u32[w + IW.key] = K ? at + B.key : 0;
        h.u32[w + IW.value] = V ? at + B.value : 0;
      }
      this.checkEntry((step ? this.M._sdpa_wasm_kv_cache_step_many : this.M._sdpa_wasm_kv_cache_attend_many)(this.ctx, this.manyBlock, n), fn);
      const f32 = this.views().f32;
      return items.map(({ P }, i) => {
        if (outs[i] === 0) return P.O.t;
        const w = outs[i] >>> 2, len = P.Q.len;
        const result = P.O ? (P.O.heap ? heapView(P.O.heap) : P.O.data) : new Float32Array(len);
        typedArraySet(result, f32.subarray(w, w + len));
        return P.O ? P.O.t : { data: result, dims: P.Q.dims.slice(), dtype: 'float32' };
      });
    } finally {
      for (const p of temps) this.free(p);
    }
  }

  // -- heap tensors -------------------------------------------------------

  allocTensor(fn, dtype, dims) {
    const n = prod(dims), bytes = tensorBytes(dtype, dims);
    const p = this.malloc(bytes, fn, `a ${dtype} tensor ${fmtDims(dims)}`);
    this.views().u8.fill(0, p, p + bytes);
    const t = new HeapTensor(this, p, dims, dtype, n, bytes);
    this.tensors.add(t);
    this.index(t, true);
    return t;
  }

  /**
   * The address of a block of at least n int32 (sdpa.embed's ids, a group's
   * layer pointers), grown as needed and kept for the next call (so a decode
   * loop, a group's truncate, allocates nothing). `what` names the n values
   * in an E_OOM message.
   */
  idsBlock(fn, n, what = `${n} ids`) {
    if (n > this.idsCapacity) {
      const p = this.malloc(Math.max(n, 64) * I32_BYTES, fn, what);
      this.free(this.idsAt);
      this.idsAt = p;
      this.idsCapacity = Math.max(n, 64);
    }
    return this.idsAt;
  }

  /** Called by HeapTensor.dispose(). */
  releaseTensor(t, ptr) {
    if (this.tensors.delete(t)) {
      this.index(t, false);
      if (!this.disposed) this.M._free(ptr);
    }
  }
}
