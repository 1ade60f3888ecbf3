// kv-cache.js: the flat-memory KV cache (CONTRACT.md section 3).
//
// K and V are allocated once by the C core, at full capacity, in the wasm
// heap (stored head-major [B, Hkv, maxSeqLen, D]). update / attend / step
// validate everything first, so a rejected call leaves the cache untouched.

import {
  Checks, readOptions, checkStartPos, checkSize, checkAttention, checkCacheWrite,
  CUSTOM_OPTIONS, STEP_OPTIONS, structural, regionOf, overlaps,
} from './validate.js';
import { SLOT } from './runtime.js';

const prod = (dims) => dims.reduce((a, b) => a * b, 1);

export class KVCache {
  #core;
  #ptr;
  #geo;
  #disposed = false;
  #storage;

  /** Made by sdpa.createKVCache. */
  constructor(core, ptr, geo) {
    this.#core = core;
    this.#ptr = ptr;
    this.#geo = Object.freeze({ ...geo });
    const bytes = prod([geo.batch, geo.maxSeqLen, geo.numKvHeads, geo.headDim]) * 4;
    this.#storage = [0, 1].map((which) => {
      const start = core.M._sdpa_kv_cache_data(ptr, which) >>> 0;
      return { name: which ? 'the cache values' : 'the cache keys', region: { space: core, start, end: start + bytes } };
    });
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

  /** The cache's K and V storage as aliasing regions. */
  #regions() {
    return this.#disposed || this.#core.disposed ? [] : this.#storage;
  }

  /**
   * E_ARG for an input inside the cache's own storage (include/sdpa.h): a
   * write would change it before it is read. (`out` there is checked as
   * aliasing by checkAttention.)
   */
  #checkOutside(ck, descs) {
    const regions = this.#regions();
    for (const d of descs) {
      const r = regionOf(d);
      if (r && regions.some((c) => overlaps(r, c.region))) {
        ck.add('E_ARG', `${d.name} lies inside the cache's own storage; pass a separate buffer`);
        return;
      }
    }
  }

  /** Writes k, v [B, Snew, Hkv, D] at rows startPos .. startPos+Snew-1. */
  update(k, v, startPos) {
    const fn = 'KVCache.update';
    const ck = new Checks(fn);
    const sp = checkStartPos(ck, startPos, 'startPos', { required: true });
    const W = checkCacheWrite(ck, this.#geo, k, v, sp);
    this.#checkOutside(ck, [W.K, W.V]);
    this.#checkAlive(ck);
    ck.done();
    const c = this.#core;
    const tmp = [];
    try {
      const [kp, vp] = c.placeAll([W.K, W.V], tmp, fn);
      c.writeTensor(SLOT.k, kp, prod(W.K.dims), 'float32', W.K.dims);
      c.writeTensor(SLOT.v, vp, prod(W.V.dims), 'float32', W.V.dims);
      c.check(c.M._sdpa_kv_cache_update(c.ctx, this.#ptr, c.slot('k'), c.slot('v'), sp), fn);
    } finally {
      for (const p of tmp) c.free(p);
    }
  }

  /** customSdpa(q, K, V, opts) over the whole cache (Skv = maxSeqLen). */
  attend(q, opts) {
    const fn = 'KVCache.attend';
    const ck = new Checks(fn);
    const o = readOptions(ck, opts, CUSTOM_OPTIONS);
    const sp = checkStartPos(ck, o.startPos, 'startPos');
    const P = checkAttention(ck, this.#core, {
      q, names: { q: 'q' }, o, cache: this.#geo, startPos: sp, extraInputs: this.#regions(),
    });
    this.#checkOutside(ck, [P.Q, P.M]);
    this.#checkAlive(ck);
    ck.done();
    const c = this.#core;
    return c.runAttention(fn, P, sp, [['q', P.Q]], (a) =>
      c.M._sdpa_kv_cache_attend(c.ctx, this.#ptr, a.q, a.mask, a.opts, a.out));
  }

  /** update(k, v, startPos) then attend(q, { startPos, ...opts }); checked as one call. */
  step(q, k, v, startPos, opts) {
    const fn = 'KVCache.step';
    const ck = new Checks(fn);
    if (opts && typeof opts === 'object' && 'startPos' in opts &&
        (Object.prototype.hasOwnProperty.call(opts, 'startPos') || !('startPos' in Object.prototype))) {
      ck.add('E_ARG', `startPos is step's 4th argument, not an option (step(q, k, v, startPos, opts))`);
    }
    const o = readOptions(ck, opts, STEP_OPTIONS);
    const sp = checkStartPos(ck, startPos, 'startPos', { required: true });
    const W = checkCacheWrite(ck, this.#geo, k, v, sp);
    const P = checkAttention(ck, this.#core, {
      q, names: { q: 'q' }, o, cache: this.#geo, startPos: sp, skipStartPosBound: true,
      extraInputs: [W.K, W.V, ...this.#regions()],
    });
    if (P.Q && P.Q.rank === 4 && structural(P.Q) && W.K && W.K.rank === 4 && structural(W.K) && P.Q.dims[1] !== W.Snew) {
      ck.add('E_DIMS', `q has ${P.Q.dims[1]} rows but k has ${W.Snew}; a step attends exactly the rows it writes`);
    }
    this.#checkOutside(ck, [P.Q, W.K, W.V, P.M]);
    this.#checkAlive(ck);
    ck.done();
    const c = this.#core;
    return c.runAttention(fn, P, sp, [['q', P.Q], ['k', W.K], ['v', W.V]], (a) =>
      c.M._sdpa_kv_cache_step(c.ctx, this.#ptr, a.q, a.k, a.v, a.mask, a.opts, a.out));
  }

  /** Copies of rows start .. start+length-1: { k, v }, each [B, length, Hkv, D] float32. */
  read(start, length) {
    const fn = 'KVCache.read';
    const ck = new Checks(fn);
    const s = checkStartPos(ck, start, 'start', { required: true });
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
    const tmp = [];
    try {
      const pk = c.malloc(count * 4, fn, 'a temporary copy of the keys'); tmp.push(pk);
      const pv = c.malloc(count * 4, fn, 'a temporary copy of the values'); tmp.push(pv);
      c.writeTensor(SLOT.q, pk, count, 'float32', dims);
      c.writeTensor(SLOT.k, pv, count, 'float32', dims);
      c.check(c.M._sdpa_kv_cache_read(c.ctx, this.#ptr, s, n, c.slot('q'), c.slot('k')), fn);
      const f32 = c.views().f32;
      return {
        k: { data: f32.slice(pk >>> 2, (pk >>> 2) + count), dims: dims.slice(), dtype: 'float32' },
        v: { data: f32.slice(pv >>> 2, (pv >>> 2) + count), dims: dims.slice(), dtype: 'float32' },
      };
    } finally {
      for (const p of tmp) c.free(p);
    }
  }

  /** Frees the storage. A second call is a no-op. */
  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    const c = this.#core;
    if (c.caches.delete(this)) c.M._sdpa_kv_cache_free(this.#ptr);
  }

  get [Symbol.toStringTag]() { return 'KVCache'; }
}
