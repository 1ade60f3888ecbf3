// kv-cache.js: the flat-memory KV cache (CONTRACT.md section 3).
//
// K and V are allocated once by the C core, at full capacity, in the wasm
// heap (stored head-major [B, Hkv, maxSeqLen, D]). update / attend / step
// follow the snapshot rule (validate.js): read every argument once, check
// liveness, validate, and only then touch wasm memory, so a rejected call
// leaves the cache untouched. A view of the cache's storage is never a
// valid argument (checkLive).

import {
  Checks, readOptions, checkStartPos, checkSize, inspectTensor, checkAttention, checkLive,
  checkCacheWrite, checkOutAliasing, cacheDescriptor, CUSTOM_OPTIONS, STEP_OPTIONS,
} from './validate.js';
import { SLOT } from './runtime.js';
import { prod } from './shape.js';

/** Bytes of each of K and V for a cache geometry { batch, maxSeqLen, numKvHeads, headDim }. */
export const cacheBytes = (geo) => geo.batch * geo.maxSeqLen * geo.numKvHeads * geo.headDim * 4;

export class KVCache {
  #core;
  #ptr;
  #geo;
  #kv;
  #disposed = false;
  #callAttend;
  #callStep;

  /** Made by sdpa.createKVCache. */
  constructor(core, ptr, geo) {
    this.#core = core;
    this.#ptr = ptr;
    this.#geo = Object.freeze({ ...geo });
    this.#kv = cacheDescriptor(geo);
    const bytes = cacheBytes(geo);
    core.cacheStorage.set(this, Object.freeze([0, 1].map((which) => {
      const start = core.M._sdpa_kv_cache_data(ptr, which) >>> 0;
      return Object.freeze({ name: which ? 'the cache values' : 'the cache keys', region: Object.freeze({ space: core, start, end: start + bytes }) });
    })));
    // The C calls of attend and step, made once (runAttention passes the mask slot, or 0).
    this.#callAttend = (mask) => {
      const s = core.scratch;
      return core.M._sdpa_kv_cache_attend(core.ctx, ptr, s + SLOT.q, mask, s + SLOT.opts, s + SLOT.out);
    };
    this.#callStep = (mask) => {
      const s = core.scratch;
      return core.M._sdpa_kv_cache_step(core.ctx, ptr, s + SLOT.q, s + SLOT.k, s + SLOT.v, mask, s + SLOT.opts, s + SLOT.out);
    };
  }

  get batch() { return this.#geo.batch; }
  get maxSeqLen() { return this.#geo.maxSeqLen; }
  get numKvHeads() { return this.#geo.numKvHeads; }
  get headDim() { return this.#geo.headDim; }
  get dtype() { return 'float32'; }
  get disposed() { return this.#disposed; }

  #checkAlive(ck) {
    this.#core.checkAlive(ck);
    if (this.#disposed) ck.add('E_DISPOSED', 'this KV cache was disposed');
  }

  /** Writes k, v [B, Snew, Hkv, D] at rows startPos .. startPos+Snew-1. */
  update(k, v, startPos) {
    const fn = 'KVCache.update';
    const ck = new Checks(fn);
    // snapshot
    const K = inspectTensor(ck, 'k', k, 'input');
    const V = inspectTensor(ck, 'v', v, 'input');
    // state, then the rules
    this.#checkAlive(ck);
    checkLive(ck, K);
    checkLive(ck, V);
    const sp = checkStartPos(ck, startPos, 'startPos', true);
    const W = checkCacheWrite(ck, this.#geo, K, V, sp);
    ck.done();
    const c = this.#core;
    // Addresses inside wasm memory first, then temporaries (see Core.addressOf).
    let kp = c.addressOf(W.K), vp = c.addressOf(W.V), tk = 0, tv = 0;
    try {
      if (kp === -1) kp = tk = c.copyIn(W.K, fn);
      if (vp === -1) vp = tv = c.copyIn(W.V, fn);
      c.writeTensor(SLOT.k, kp, W.K.len, 'float32', W.K.dims);
      c.writeTensor(SLOT.v, vp, W.V.len, 'float32', W.V.dims);
      c.check(c.M._sdpa_kv_cache_update(c.ctx, this.#ptr, c.slot('k'), c.slot('v'), sp), fn);
    } finally {
      c.free(tk); c.free(tv);
    }
  }

  /** customSdpa(q, K, V, opts) over the whole cache (Skv = maxSeqLen). */
  attend(q, opts) {
    const fn = 'KVCache.attend';
    const ck = new Checks(fn);
    // snapshot
    const Q = inspectTensor(ck, 'q', q, 'input');
    const o = readOptions(ck, opts, CUSTOM_OPTIONS);
    // state, then the rules
    this.#checkAlive(ck);
    checkLive(ck, Q);
    checkLive(ck, o.M);
    checkLive(ck, o.O);
    const sp = checkStartPos(ck, o.startPos, 'startPos');
    const P = checkAttention(ck, o, sp, Q, this.#kv, this.#kv);
    ck.done();
    return this.#core.runAttention(fn, P, sp, null, null, this.#callAttend);
  }

  /** update(k, v, startPos) then attend(q, { startPos, ...opts }); checked as one call. */
  step(q, k, v, startPos, opts) {
    const fn = 'KVCache.step';
    const ck = new Checks(fn);
    // snapshot
    const Q = inspectTensor(ck, 'q', q, 'input');
    const K = inspectTensor(ck, 'k', k, 'input');
    const V = inspectTensor(ck, 'v', v, 'input');
    const o = readOptions(ck, opts, STEP_OPTIONS, STEP_MISPLACED);
    // state, then the rules
    this.#checkAlive(ck);
    checkLive(ck, Q);
    checkLive(ck, K);
    checkLive(ck, V);
    checkLive(ck, o.M);
    checkLive(ck, o.O);
    const sp = checkStartPos(ck, startPos, 'startPos', true);
    const W = checkCacheWrite(ck, this.#geo, K, V, sp);
    // (startPos null: the bound startPos + Sq <= maxSeqLen is the write's E_CAPACITY)
    const P = checkAttention(ck, o, null, Q, this.#kv, this.#kv);
    checkOutAliasing(ck, P.O, W.K);
    checkOutAliasing(ck, P.O, W.V);
    if (P.Sq >= 0 && W.Snew >= 0 && P.Sq !== W.Snew) {
      ck.add('E_DIMS', `q has ${P.Sq} rows but k has ${W.Snew}; a step attends exactly the rows it writes`);
    }
    ck.done();
    return this.#core.runAttention(fn, P, sp, W.K, W.V, this.#callStep);
  }

  /** Copies of rows start .. start+length-1: { k, v }, each [B, length, Hkv, D] float32. */
  read(start, length) {
    const fn = 'KVCache.read';
    const ck = new Checks(fn);
    const s = checkStartPos(ck, start, 'start', true);
    const n = checkSize(ck, length, 'length');
    if (s !== null && n !== null && s + n > this.#geo.maxSeqLen) {
      ck.add('E_CAPACITY', `reading ${n} rows at start ${s} needs ${s + n} rows but the cache holds maxSeqLen = ${this.#geo.maxSeqLen}`);
    }
    this.#checkAlive(ck);
    ck.done();
    const c = this.#core;
    const { batch, numKvHeads, headDim } = this.#geo;
    const dims = [batch, n, numKvHeads, headDim];
    const count = prod(dims);
    let pk = 0, pv = 0;
    try {
      pk = c.malloc(count * 4, fn, 'a temporary copy of the keys');
      pv = c.malloc(count * 4, fn, 'a temporary copy of the values');
      c.writeTensor(SLOT.q, pk, count, 'float32', dims);
      c.writeTensor(SLOT.k, pv, count, 'float32', dims);
      c.check(c.M._sdpa_kv_cache_read(c.ctx, this.#ptr, s, n, c.slot('q'), c.slot('k')), fn);
      const f32 = c.views().f32;
      return {
        k: { data: f32.slice(pk >>> 2, (pk >>> 2) + count), dims: dims.slice(), dtype: 'float32' },
        v: { data: f32.slice(pv >>> 2, (pv >>> 2) + count), dims: dims.slice(), dtype: 'float32' },
      };
    } finally {
      c.free(pk); c.free(pv);
    }
  }

  /** Frees the storage. A second call is a no-op. */
  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    const c = this.#core;
    c.cacheStorage.delete(this);
    if (c.caches.delete(this)) c.M._sdpa_kv_cache_free(this.#ptr);
  }

  get [Symbol.toStringTag]() { return 'KVCache'; }
}

const STEP_MISPLACED = Object.freeze(['startPos']);
