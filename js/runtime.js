// runtime.js: the boundary with wasm memory for one instance.
//
// - Views are re-derived from the memory's CURRENT buffer (growth replaces it).
// - All per-call argument structs live in ONE scratch block malloc'ed at
//   creation (never per call): 5 sdpa_tensor, 1 sdpa_options, out-pointers.
// - Plain typed arrays are copied into temporary heap buffers (freed in
//   `finally`); heap tensors are passed by pointer, without a copy.
// - A status returned by C becomes an SdpaError carrying the C message.

import { SdpaError, codeOfStatus, fail } from './errors.js';
import { heapState, HeapTensor, DTYPE_BYTES } from './heap.js';

// Scratch layout (bytes). sdpa_tensor is 32 bytes on wasm32:
// data@0 len@4 dtype@8 rank@12 dims@16..31; sdpa_options is 24 bytes:
// start_pos@0 (int64) is_causal@8 has_scale@12 scale@16 dropout_p@20.
export const SLOT = Object.freeze({ q: 0, k: 32, v: 64, mask: 96, out: 128, opts: 160, ptr: 184, shape: 192 });
const SCRATCH_BYTES = 256;
const DTYPE_ENUM = { float32: 1, bool: 2 };

const prod = (dims) => dims.reduce((a, b) => a * b, 1);

export function formatBytes(n) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${Number.isInteger(n) ? n : n.toFixed(2)} ${u[i]}`;
}

export class Core {
  constructor(M) {
    this.M = M;
    this.ctx = 0;
    this.scratch = 0;
    this.disposed = false;
    this.tensors = new Set();
    this.caches = new Set();
    this._buf = null;
  }

  // -- memory views -------------------------------------------------------

  currentBuffer() {
    const M = this.M;
    return M.wasmMemory ? M.wasmMemory.buffer : M.HEAPU8.buffer;
  }
  /** For HeapTensor. */
  buffer() { return this.currentBuffer(); }

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
    return new TextDecoder().decode(u8.slice(p, end));
  }

  /** Throws the SdpaError for a non-zero C status. */
  check(status, fn) {
    if (status === 0) return;
    const code = codeOfStatus(status);
    let msg = this.ctx ? this.readCString(this.M._sdpa_ctx_last_error(this.ctx)) : '';
    // C names its own function ("cache.step: ..."); the message names the public one once.
    msg = msg.replace(/^[A-Za-z_][\w.]*: /, '');
    if (!msg) msg = `the C core returned ${code} (status ${status})`;
    throw new SdpaError(code, `${fn}: ${msg}`, { status });
  }

  // -- argument structs ---------------------------------------------------

  writeTensor(slot, ptr, len, dtype, dims) {
    const v = this.views();
    const w = (this.scratch + slot) >>> 2;
    v.u32[w] = ptr >>> 0;
    v.u32[w + 1] = len >>> 0;
    v.i32[w + 2] = DTYPE_ENUM[dtype];
    v.i32[w + 3] = dims.length;
    for (let i = 0; i < 4; i++) v.i32[w + 4 + i] = i < dims.length ? dims[i] : 0;
  }

  writeOptions(startPos, isCausal, scale, dropoutP = 0) {
    const v = this.views();
    const w = (this.scratch + SLOT.opts) >>> 2;
    v.u32[w] = startPos % 0x100000000;
    v.u32[w + 1] = Math.floor(startPos / 0x100000000);
    v.i32[w + 2] = isCausal ? 1 : 0;
    v.i32[w + 3] = scale === null || scale === undefined ? 0 : 1;
    v.f32[w + 4] = scale === null || scale === undefined ? 0 : scale;
    v.f32[w + 5] = dropoutP;
  }

  slot(name) { return this.scratch + SLOT[name]; }

  // -- placing tensors in wasm memory --------------------------------------

  /**
   * The address of a tensor that already lives in this instance's memory (a
   * heap tensor of this instance, or a view of its current buffer), else -1.
   * Resolve it before any malloc: growth replaces the buffer, and in the
   * single-thread build it DETACHES views of the old one.
   */
  addressOf(d) {
    if (d.heap && d.heap.rt === this) return d.heap.ptr;
    const data = d.heap ? d.t.data : d.data;
    return data.buffer === this.currentBuffer() ? data.byteOffset : -1;
  }

  /**
   * Addresses in wasm memory of `descs` (null → 0): tensors already there are
   * used as they are (all resolved first), everything else is copied into a
   * temporary (pushed on `tmp`).
   */
  placeAll(descs, tmp, fn) {
    const addrs = descs.map((d) => (d ? this.addressOf(d) : 0));
    descs.forEach((d, i) => {
      if (!d || addrs[i] !== -1) return;
      const data = d.heap ? d.t.data : d.data;
      const bytes = data.byteLength;
      const p = this.malloc(bytes, fn, `a temporary copy of ${d.name}`);
      tmp.push(p);
      this.views().u8.set(new Uint8Array(data.buffer, data.byteOffset, bytes), p);
      addrs[i] = p;
    });
    return addrs;
  }

  /**
   * One attention call: places inputs, writes structs, invokes C, copies the
   * output back. `inputs`: [[slotName, descriptor], ...]; `P` from
   * checkAttention; `invoke(addr)` gets slot addresses and returns a status.
   * The output goes to `out` in place when it lives in wasm memory, else to a
   * temporary copied into `out` (or a new Float32Array) after success.
   */
  runAttention(fn, P, startPos, inputs, invoke) {
    const tmp = [];
    try {
      const n = prod(P.Q.dims);
      // Every address inside wasm memory first (out included), then temporaries.
      const outAddr = P.O ? this.addressOf(P.O) : -1;
      const [mp, ...ptrs] = this.placeAll([P.M, ...inputs.map(([, d]) => d)], tmp, fn);
      const out = { ptr: outAddr, target: null, result: null };
      if (outAddr === -1) {
        out.ptr = this.malloc(n * 4, fn, 'a temporary output');
        tmp.push(out.ptr);
        // (a heap tensor of another instance or a plain array: not this memory, never detached by our growth)
        out.target = P.O ? (P.O.heap ? P.O.t.data : P.O.data) : (out.result = new Float32Array(n));
      }
      inputs.forEach(([slot, d], i) => this.writeTensor(SLOT[slot], ptrs[i], prod(d.dims), d.dtype, d.dims));
      if (P.M) this.writeTensor(SLOT.mask, mp, prod(P.M.dims), P.M.dtype, P.M.dims);
      this.writeTensor(SLOT.out, out.ptr, n, 'float32', P.Q.dims);
      this.writeOptions(startPos, P.isCausal, P.scale, 0);
      const status = invoke({
        q: this.slot('q'), k: this.slot('k'), v: this.slot('v'),
        mask: P.M ? this.slot('mask') : 0, opts: this.slot('opts'), out: this.slot('out'),
      });
      this.check(status, fn);
      if (out.target) {
        const f32 = this.views().f32;
        const w = out.ptr >>> 2;
        out.target.set(f32.subarray(w, w + n));
      }
      if (P.O) return P.O.t;
      return { data: out.result, dims: P.Q.dims.slice(), dtype: 'float32' };
    } finally {
      for (const p of tmp) this.M._free(p);
    }
  }

  // -- heap tensors -------------------------------------------------------

  allocTensor(fn, dtype, dims) {
    const bytes = prod(dims) * DTYPE_BYTES[dtype];
    const p = this.malloc(bytes, fn, `a ${dtype} tensor [${dims.join(', ')}]`);
    this.views().u8.fill(0, p, p + bytes);
    const t = new HeapTensor(this, p, dims, dtype);
    this.tensors.add(t);
    return t;
  }

  /** Called by HeapTensor.dispose(). */
  releaseTensor(t, ptr) {
    if (this.tensors.delete(t) && !this.disposed) this.M._free(ptr);
  }
}

export { heapState, fail };
