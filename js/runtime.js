// runtime.js: the boundary with wasm memory for one instance.
//
// - Views are re-derived from the memory's CURRENT buffer (growth replaces it).
// - All per-call argument structs live in ONE scratch block malloc'ed at
//   creation (never per call): 5 sdpa_tensor, 1 sdpa_options, an out-pointer.
// - Plain typed arrays are copied into temporary heap buffers (freed in
//   `finally`); heap tensors are passed by pointer, without a copy.
// - A status returned by C becomes an SdpaError carrying the C message.

import { SdpaError, codeOfStatus } from './errors.js';
import { HeapTensor, DTYPE_BYTES, heapState, heapView, noteMemoryBuffer, memoryOwner, staleInputWarning } from './heap.js';
import { prod, fmtDims } from './shape.js';
import { typedArraySet } from './intrinsics.js';
import { CACHE_DTYPES } from './validate.js';

// Scratch layout (bytes). sdpa_tensor is 32 bytes on wasm32:
// data@0 len@4 dtype@8 rank@12 dims@16..31; sdpa_options is 48 bytes:
// start_pos@0 (int64) is_causal@8 has_scale@12 scale@16 dropout_p@20
// window@24 softcap@28 sinks@32 (a pointer: 0 or the sinks slot)
// tree_mask@36 rotary@40; sdpa_memory_stats is 48 bytes: five int64 then
// page_rows@40; sdpa_kv_cache_desc is 32 bytes: eight int32 (batch,
// maxSeqLen, Hkv, D, key dtype, value dtype, window, sinkTokens); a rotary
// block is ROTARY_BYTES (putRotary).
export const SLOT = Object.freeze({ q: 0, k: 32, v: 64, mask: 96, out: 128, sinks: 160, opts: 192, ptr: 240, stats: 248, desc: 296, tree: 328, rotary: 360 });
/**
 * A rotary block: sdpa_rotary (20 bytes: cos@0 sin@4
 * interleaved@8 n_positions@12 positions@16), cos's tensor@24, sin's@56,
 * then room for 64 positions@88 (more go to a temporary).
 */
const ROTARY_BYTES = 344, ROTARY_INLINE_POSITIONS = 64;
export const SCRATCH_BYTES = 360 + ROTARY_BYTES;
/**
 * attendMany's / stepMany's block: the sdpa_attend_item array (28 bytes
 * each, 64 of them: ITEMS_BYTES), then per item ITEM_BYTES holding its
 * tensors and options: query@0, mask@32, out@64, sinks@96, treeMask@128,
 * options@160 (48 bytes), key@208, value@240, rotary@272 (ROTARY_BYTES).
 */
const ITEMS_BYTES = 1792, ITEM_BYTES = 272 + ROTARY_BYTES;
const DTYPE_ENUM = Object.freeze({ float32: 1, bool: 2 });

export function formatBytes(n) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${Number.isInteger(n) ? n : n.toFixed(2)} ${u[i]}`;
}

/** Writes an sdpa_tensor at byte address `at` through the views `v`. */
function putTensor(v, at, ptr, len, dtype, dims) {
  const w = at >>> 2;
  v.u32[w] = ptr >>> 0;
  v.u32[w + 1] = len >>> 0;
  v.i32[w + 2] = DTYPE_ENUM[dtype];
  v.i32[w + 3] = dims.length;
  for (let i = 0; i < 4; i++) v.i32[w + 4 + i] = i < dims.length ? dims[i] : 0;
}

/**
 * Writes an sdpa_options at byte address `at` (dropout_p is always 0: JS
 * rejects any other). window / softcap: 0 for none; sinksAt: the address of
 * the sinks tensor struct, or 0.
 */
function putOptions(v, at, startPos, isCausal, scale, window = 0, softcap = 0, sinksAt = 0, treeAt = 0, rotaryAt = 0) {
  const w = at >>> 2;
  const hasScale = scale !== null && scale !== undefined;
  v.u32[w] = startPos % 0x100000000;
  v.u32[w + 1] = Math.floor(startPos / 0x100000000);
  v.i32[w + 2] = isCausal ? 1 : 0;
  v.i32[w + 3] = hasScale ? 1 : 0;
  v.f32[w + 4] = hasScale ? scale : 0;
  v.f32[w + 5] = 0;
  v.i32[w + 6] = window;
  v.f32[w + 7] = softcap;
  v.u32[w + 8] = sinksAt >>> 0;
  v.u32[w + 9] = treeAt >>> 0; // tree_mask (issue 21)
  v.u32[w + 10] = rotaryAt >>> 0; // rotary (issue 21)
  v.u32[w + 11] = 0;
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
    this.caches = new Set();
    /** Savers and loaders of saved KV state under way (kv-state.js): freed first by sdpa.dispose(). */
    this.states = new Set();
    this._buf = null;
    this._seen = null; // the last buffer recorded by noteMemoryBuffer
    this.staleWarned = false;
    this.manyBlock = 0; // attendMany's items block (runMany), made at its first call
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
    for (const t of this.tensors) {
      const r = heapState(t).region;
      if (r.start <= start && end <= r.end) return t;
    }
    return null;
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

  /** The i-th int64 of a C struct at byte address `at` (non-negative, exact below 2^53). */
  int64At(at, i) {
    const u32 = this.views().u32, w = (at >>> 2) + 2 * i;
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

  /** Throws the SdpaError for a non-zero C status. */
  check(status, fn) {
    if (status === 0) return;
    const code = codeOfStatus(status);
    // C's message is the message: it names the public function (src/contract/check.c). Only
    // where another public function ran it (scaledDotProductAttention's fast path is
    // customSdpa) is the caller's name put first.
    const msg = this.ctx ? this.readCString(this.M._sdpa_ctx_last_error(this.ctx)) : '';
    if (!msg) throw new SdpaError(code, `${fn}: the C core returned ${code} (status ${status})`, { status });
    throw new SdpaError(code, msg.startsWith(`${fn}: `) ? msg : `${fn}: ${msg}`, { status });
  }

  // -- argument structs ---------------------------------------------------

  writeTensor(slot, ptr, len, dtype, dims) {
    putTensor(this.views(), this.scratch + slot, ptr, len, dtype, dims);
  }

  writeOptions(startPos, isCausal, scale) {
    putOptions(this.views(), this.scratch + SLOT.opts, startPos, isCausal, scale);
  }

  slot(name) { return this.scratch + SLOT[name]; }

  /** A checked cache geometry as sdpa_kv_cache_desc in its slot (its address). */
  cacheDesc(geo) {
    const at = this.scratch + SLOT.desc, i32 = this.views().i32, w = at >>> 2;
    const fields = [geo.batch, geo.maxSeqLen, geo.numKvHeads, geo.headDim, CACHE_DTYPES[geo.keyDtype],
      CACHE_DTYPES[geo.valueDtype], geo.window, geo.sinkTokens];
    for (let i = 0; i < 8; i++) i32[w + i] = fields[i];
    return at;
  }

  /**
   * A checked rotary (validate.js checkRotary) as a rotary block at
   * `at` (ROTARY_BYTES); its tables by address when they live in this memory,
   * else copied in, and more than 64 positions, as temporaries pushed onto
   * `temps` (the caller frees them). Returns `at`, or 0 for no rotary.
   */
  putRotary(fn, rot, at, temps) {
    if (rot === null) return 0;
    let c = this.addressOf(rot.C), s = this.addressOf(rot.S);
    if (c === -1) temps.push(c = this.copyIn(rot.C, fn));
    if (s === -1) temps.push(s = this.copyIn(rot.S, fn));
    const n = rot.positions === null ? 0 : rot.positions.length;
    let p = n ? at + 88 : 0;
    if (n > ROTARY_INLINE_POSITIONS) temps.push(p = this.malloc(n * 4, fn, 'a temporary copy of rotary.positions'));
    const h = this.views(), w = at >>> 2;
    if (n) typedArraySet(h.i32, rot.positions, p >>> 2);
    putTensor(h, at + 24, c, rot.C.len, 'float32', rot.C.dims);
    putTensor(h, at + 56, s, rot.S.len, 'float32', rot.S.dims);
    h.u32[w] = at + 24;
    h.u32[w + 1] = at + 56;
    h.i32[w + 2] = rot.interleaved ? 1 : 0;
    h.i32[w + 3] = n;
    h.u32[w + 4] = p;
    return at;
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
   * One attention call: places the inputs, writes the structs, invokes C,
   * copies the output back. `P` from checkAttention (its Q, M, O and scalar
   * options); `K`, `V` the key/value descriptors (null for a cache attend);
   * `invoke(maskSlot)` calls C with the slot addresses and returns a status.
   * The output goes to `out` in place when it lives in wasm memory, else to a
   * temporary copied into `out` (or a new Float32Array) after success.
   * With every tensor a heap tensor of this instance nothing is malloc'ed or copied.
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
      if (o === -1) o = to = this.malloc(n * 4, fn, 'a temporary output');
      const h = this.views();
      putTensor(h, s + SLOT.q, q, n, Q.dtype, Q.dims);
      if (K) putTensor(h, s + SLOT.k, k, K.len, K.dtype, K.dims);
      if (V) putTensor(h, s + SLOT.v, v, V.len, V.dtype, V.dims);
      if (M) putTensor(h, s + SLOT.mask, m, M.len, M.dtype, M.dims);
      putTensor(h, s + SLOT.out, o, n, 'float32', Q.dims);
      if (S) putTensor(h, s + SLOT.sinks, sk, S.len, 'float32', S.dims);
      if (T) putTensor(h, s + SLOT.tree, tr, T.len, T.dtype, T.dims);
      putOptions(h, s + SLOT.opts, startPos, P.isCausal, P.scale, P.window, P.softcap, S ? s + SLOT.sinks : 0, T ? s + SLOT.tree : 0, ra);
      this.check(invoke(M ? s + SLOT.mask : 0), fn);
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
   * attendMany's checked items ({ P, sp, ptr }) as sdpa_attend_item
   * structs in one block made at the first call (ITEM_BYTES per item, for
   * MANY_MAX items: a decode loop allocates nothing), one C call; returns the
   * outputs in item order.
   */
  runMany(fn, items, step = false) {
    const n = items.length;
    const addr = items.map(({ P, K, V }) => ({
      o: P.O ? this.addressOf(P.O) : -1, q: this.addressOf(P.Q), m: P.M ? this.addressOf(P.M) : 0,
      s: P.S ? this.addressOf(P.S) : 0, t: P.T ? this.addressOf(P.T) : 0,
      k: K ? this.addressOf(K) : 0, v: V ? this.addressOf(V) : 0,
    }));
    const temps = [], outs = new Array(n).fill(0);
    if (!this.manyBlock) this.manyBlock = this.malloc(ITEMS_BYTES + ITEM_BYTES * 64, fn, 'the items block'); // (once per instance)
    for (const { P, K, V } of items) this.warnStaleInputs(P.Q, K, V);
    try {
      for (let i = 0; i < n; i++) {
        const P = items[i].P, a = addr[i];
        a.r = this.putRotary(fn, P.rot ?? null, this.manyBlock + ITEMS_BYTES + i * ITEM_BYTES + 272, temps);
        if (a.s === -1) temps.push(a.s = this.copyIn(P.S, fn));
        if (a.m === -1) temps.push(a.m = this.copyIn(P.M, fn));
        if (a.t === -1) temps.push(a.t = this.copyIn(P.T, fn));
        if (a.q === -1) temps.push(a.q = this.copyIn(P.Q, fn));
        if (a.k === -1) temps.push(a.k = this.copyIn(items[i].K, fn));
        if (a.v === -1) temps.push(a.v = this.copyIn(items[i].V, fn));
        if (a.o === -1) temps.push(a.o = outs[i] = this.malloc(P.Q.len * 4, fn, 'a temporary output'));
      }
      const h = this.views();
      for (let i = 0; i < n; i++) {
        // (the sdpa_attend_item array first, 28 bytes apart; then each item's tensors and options)
        const { P, sp, ptr } = items[i], a = addr[i], at = this.manyBlock + ITEMS_BYTES + i * ITEM_BYTES, w = (this.manyBlock + 28 * i) >>> 2;
        putTensor(h, at, a.q, P.Q.len, P.Q.dtype, P.Q.dims);
        if (P.M) putTensor(h, at + 32, a.m, P.M.len, P.M.dtype, P.M.dims);
        putTensor(h, at + 64, a.o, P.Q.len, 'float32', P.Q.dims);
        if (P.S) putTensor(h, at + 96, a.s, P.S.len, 'float32', P.S.dims);
        if (P.T) putTensor(h, at + 128, a.t, P.T.len, P.T.dtype, P.T.dims);
        putOptions(h, at + 160, sp, P.isCausal, P.scale, P.window, P.softcap, P.S ? at + 96 : 0, P.T ? at + 128 : 0, a.r);
        h.u32[w] = ptr >>> 0;
        h.u32[w + 1] = at;
        h.u32[w + 2] = P.M ? at + 32 : 0;
        h.u32[w + 3] = at + 160;
        h.u32[w + 4] = at + 64;
        const { K, V } = items[i];
        if (K) putTensor(h, at + 208, a.k, K.len, K.dtype, K.dims);
        if (V) putTensor(h, at + 240, a.v, V.len, V.dtype, V.dims);
        h.u32[w + 5] = K ? at + 208 : 0;
        h.u32[w + 6] = V ? at + 240 : 0;
      }
      this.check((step ? this.M._sdpa_kv_cache_step_many : this.M._sdpa_kv_cache_attend_many)(this.ctx, this.manyBlock, n), fn);
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
    const n = prod(dims), bytes = n * DTYPE_BYTES[dtype];
    const p = this.malloc(bytes, fn, `a ${dtype} tensor ${fmtDims(dims)}`);
    this.views().u8.fill(0, p, p + bytes);
    const t = new HeapTensor(this, p, dims, dtype, n);
    this.tensors.add(t);
    return t;
  }

  /** Called by HeapTensor.dispose(). */
  releaseTensor(t, ptr) {
    if (this.tensors.delete(t) && !this.disposed) this.M._free(ptr);
  }
}
