// validate.js: every rule of CONTRACT.md section 2 (and the cache rules of
// section 3), checked in JS before anything touches wasm memory.
//
// All checks of a call are collected; the one reported is the first in the
// contract table's order (ties: the first found, in argument order). Later
// checks that depend on an earlier, failed one (e.g. head counts of a tensor
// whose rank is wrong) are skipped; the earlier failure already outranks them.

import { SdpaError, codeRank } from './errors.js';
import { heapState } from './heap.js';

// ---------------------------------------------------------------------------
// Collecting checks

export class Checks {
  /** @param {string} fn the public function name used as message prefix */
  constructor(fn) {
    this.fn = fn;
    this.first = null;
  }
  add(code, message) {
    if (this.first === null || codeRank(code) < codeRank(this.first.code)) this.first = { code, message };
  }
  get ok() { return this.first === null; }
  /** Throws the highest-ranked violation, if any. */
  done() {
    if (this.first !== null) throw new SdpaError(this.first.code, `${this.fn}: ${this.first.message}`);
  }
}

// ---------------------------------------------------------------------------
// Small helpers

const tagOf = (x) => Object.prototype.toString.call(x).slice(8, -1);
/** 'a Float32Array', 'an Int32Array'. */
const article = (word) => `${/^[AEIOU]/.test(word) ? 'an' : 'a'} ${word}`;

/** Short description of a JS value for messages. */
export function describeValue(x) {
  if (x === null) return 'null';
  if (x === undefined) return 'undefined';
  if (typeof x === 'string') return `the string ${JSON.stringify(x.length > 20 ? x.slice(0, 20) + '…' : x)}`;
  if (typeof x === 'number' || typeof x === 'boolean' || typeof x === 'bigint') return `${typeof x} ${String(x)}${typeof x === 'bigint' ? 'n' : ''}`;
  if (Array.isArray(x)) return `an Array of length ${x.length}`;
  if (ArrayBuffer.isView(x)) return article(tagOf(x));
  if (typeof x === 'function') return 'a function';
  return tagOf(x) === 'Object' ? 'an object' : `${article(tagOf(x))} object`;
}

const fmtDims = (dims) => `[${dims.join(', ')}]`;
const prod = (dims) => dims.reduce((a, b) => a * b, 1);
const isPosInt = (x) => Number.isSafeInteger(x) && x > 0;

function suggest(name, allowed) {
  const norm = (s) => s.toLowerCase().replace(/[_\-\s]/g, '');
  const hit = allowed.find((a) => norm(a) === norm(name));
  return hit ? ` (did you mean '${hit}'?)` : '';
}

/**
 * Reads an options object: undefined/null = {}, unknown names are E_ARG.
 * Values that are `undefined` count as absent. Inherited enumerable names
 * count too (as `opts.name` would read them), so none is dropped silently,
 * except what sits on Object.prototype itself; a Map, Date, ... (whose
 * entries are not properties) is E_ARG.
 */
export function readOptions(ck, opts, allowed, argName = 'options') {
  if (opts === undefined || opts === null) return Object.create(null);
  if (typeof opts !== 'object' || tagOf(opts) !== 'Object') {
    ck.add('E_ARG', `${argName} must be a plain object, got ${describeValue(opts)}`);
    return Object.create(null);
  }
  const out = Object.create(null); // (so that nothing is read from Object.prototype)
  for (const key in opts) {
    // (enumerable junk that a script added to Object.prototype is not an option)
    if (!Object.prototype.hasOwnProperty.call(opts, key) && key in Object.prototype) continue;
    if (!allowed.includes(key)) {
      ck.add('E_ARG', `unknown option '${key}'${suggest(key, allowed)}; the options are ${allowed.join(', ')}`);
      continue;
    }
    if (opts[key] !== undefined) out[key] = opts[key];
  }
  return out;
}

/** startPos-like: a non-negative integer. Returns the value or null when invalid. */
export function checkStartPos(ck, value, name, { required = false, dflt = 0 } = {}) {
  if (value === undefined || value === null) {
    if (required) { ck.add('E_ARG', `${name} is missing; expected a non-negative integer`); return null; }
    return dflt;
  }
  if (typeof value !== 'number') { ck.add('E_ARG', `${name} must be a number, got ${describeValue(value)}`); return null; }
  if (!Number.isSafeInteger(value) || value < 0) {
    ck.add('E_START_POS', `${name} is ${value}; expected a non-negative integer`);
    return null;
  }
  return value;
}

export function checkBool(ck, value, name, dflt = false) {
  if (value === undefined || value === null) return dflt;
  if (typeof value !== 'boolean') { ck.add('E_ARG', `${name} must be a boolean, got ${describeValue(value)}`); return dflt; }
  return value;
}

/**
 * scale: absent (undefined/null) → null. `positive`: the fast op's rule
 * (finite and > 0 as a float32); otherwise any finite number (section 4).
 */
export function checkScale(ck, value, { positive = true } = {}) {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'number') { ck.add('E_ARG', `scale must be a number, got ${describeValue(value)}`); return null; }
  if (positive) {
    const f = Math.fround(value);
    if (!(Number.isFinite(f) && f > 0)) {
      ck.add('E_SCALE', `scale is ${value}; expected a finite number > 0${Number.isFinite(value) && value > 0 ? ' that fits a float32' : ''}`);
      return null;
    }
  } else if (!Number.isFinite(value)) {
    ck.add('E_SCALE', `scale is ${value}; expected a finite number`);
    return null;
  }
  return value;
}

export function checkDropout(ck, value) {
  if (value === undefined || value === null) return 0;
  if (typeof value !== 'number') { ck.add('E_ARG', `dropoutP must be a number, got ${describeValue(value)}`); return 0; }
  if (value !== 0) ck.add('E_DROPOUT', `dropoutP is ${value}; expected 0 (the kernel has no dropout)`);
  return 0;
}

/** A count-like option (cache sizes): a positive integer. */
export function checkSize(ck, value, name, { required = true, dflt, zeroCode = 'E_DIMS' } = {}) {
  if (value === undefined || value === null) {
    if (required) { ck.add('E_ARG', `${name} is missing; expected a positive integer`); return null; }
    return dflt;
  }
  if (typeof value !== 'number') { ck.add('E_ARG', `${name} must be a number, got ${describeValue(value)}`); return null; }
  if (!isPosInt(value)) {
    ck.add(value === 0 ? zeroCode : 'E_DIMS', `${name} is ${value}; expected a positive integer`);
    return null;
  }
  return value;
}

// ---------------------------------------------------------------------------
// Tensors

/**
 * Looks at a tensor argument. Roles:
 *   'input' - query/key/value (float32), 'out' (float32), 'mask' (float32 | bool).
 * Returns a descriptor or null when the argument is missing / not a tensor:
 *   { name, t, heap (internal heap state or null), data (typed array or null),
 *     dims (number[] or null), dtype ('float32'|'bool'|null), len, rank }
 */
export function inspectTensor(ck, name, t, role) {
  if (t === undefined || t === null) {
    ck.add('E_ARG', `${name} is missing; expected a tensor { data, dims }`);
    return null;
  }
  if (typeof t !== 'object' || Array.isArray(t) || ArrayBuffer.isView(t)) {
    ck.add('E_ARG', `${name} must be a tensor object { data, dims, dtype? }, got ${describeValue(t)}`);
    return null;
  }
  const dtypeCode = role === 'mask' ? 'E_MASK_DTYPE' : 'E_DTYPE';
  const wanted = role === 'mask' ? `float32 (Float32Array) or bool (Uint8Array)` : `float32 (Float32Array)`;
  const d = { name, t, heap: null, data: null, dims: null, dtype: null, len: -1, rank: -1 };

  const hs = heapState(t);
  if (hs) {
    d.heap = hs;
    d.dims = hs.dims.slice();
    d.rank = d.dims.length;
    d.dtype = hs.dtype;
    d.len = hs.n;
  } else {
    // dims
    const dims = t.dims;
    if (dims === undefined || dims === null) {
      ck.add('E_ARG', `${name}.dims is missing; expected an array of positive integers`);
    } else if (!(Array.isArray(dims) || (ArrayBuffer.isView(dims) && tagOf(dims) !== 'DataView'))) {
      ck.add('E_ARG', `${name}.dims must be an array of integers, got ${describeValue(dims)}`);
    } else {
      const arr = Array.from(dims);
      const bad = arr.findIndex((x) => typeof x !== 'number');
      if (bad >= 0) ck.add('E_ARG', `${name}.dims[${bad}] must be a number, got ${describeValue(arr[bad])}`);
      else { d.dims = arr; d.rank = arr.length; }
    }
    // data
    const data = t.data;
    let inferred = null;
    if (data === undefined || data === null) {
      ck.add('E_ARG', `${name}.data is missing; expected a ${role === 'mask' ? 'Float32Array or Uint8Array' : 'Float32Array'}`);
    } else if (Array.isArray(data)) {
      ck.add(dtypeCode, `${name}.data is a plain Array; expected ${wanted}`);
      d.len = data.length;
    } else if (ArrayBuffer.isView(data) && tagOf(data) !== 'DataView') {
      const tag = tagOf(data);
      d.len = data.length;
      if (tag === 'Float32Array') inferred = 'float32';
      else if (tag === 'Uint8Array') inferred = 'bool';
      else ck.add(dtypeCode, `${name}.data is ${article(tag)}; expected ${wanted}`);
      if (inferred) d.data = data;
    } else {
      ck.add('E_ARG', `${name}.data must be a typed array, got ${describeValue(data)}`);
    }
    // dtype field
    const dt = t.dtype;
    if (dt !== undefined && dt !== null) {
      if (typeof dt !== 'string') ck.add('E_ARG', `${name}.dtype must be a string, got ${describeValue(dt)}`);
      else if (inferred && dt !== inferred) {
        ck.add('E_DTYPE', `${name}.dtype is '${dt}' but its data is ${article(tagOf(data))} ('${inferred}')`);
        inferred = null;
      }
    }
    d.dtype = inferred;
  }
  if (d.dtype === 'bool' && role !== 'mask') {
    ck.add('E_DTYPE', `${name} is bool (Uint8Array); expected float32 (Float32Array)`);
  }
  return d;
}

/** E_RANK unless the rank is one of `ranks`. Returns true when the rank fits. */
export function checkRank(ck, d, ranks, what) {
  if (!d || !d.dims) return false;
  if (ranks.includes(d.rank)) return true;
  ck.add('E_RANK', `${d.name} has rank ${d.rank} (dims ${fmtDims(d.dims)}); expected ${what}`);
  return false;
}

/**
 * Every dim a positive integer (a 0 at `headIndex` is E_HEADS) and
 * len == product(dims). Sets and returns d.ok.
 */
export function checkDims(ck, d, headIndex = -1) {
  if (!d || !d.dims) return false;
  let ok = true;
  d.dims.forEach((x, i) => {
    if (isPosInt(x)) return;
    ok = false;
    if (x === 0 && i === headIndex) ck.add('E_HEADS', `${d.name} has 0 heads (dims ${fmtDims(d.dims)}); expected at least 1`);
    else ck.add('E_DIMS', `${d.name}.dims[${i}] is ${x}; every dim must be a positive integer`);
  });
  if (ok && d.len >= 0 && d.len !== prod(d.dims)) {
    ck.add('E_DIMS', `${d.name}.data has ${d.len} elements but dims ${fmtDims(d.dims)} need ${prod(d.dims)}`);
    ok = false;
  }
  d.ok = ok;
  return ok;
}

/**
 * True when every dim is a non-negative integer. Relational checks (batch,
 * heads, ...) run on such tensors even when a dim failed checkDims: the only
 * failure then possible is a head count of 0 (E_HEADS), which ranks after
 * E_BATCH, so the relational rules must still be looked at.
 */
export function structural(d) {
  return !!d && !!d.dims && d.dims.every((x) => Number.isSafeInteger(x) && x >= 0);
}

/**
 * Memory region of a tensor for aliasing checks: { space, start, end }.
 * `space` is an ArrayBuffer, or a runtime (an instance's wasm memory: heap
 * tensors, cache storage) that stands for its current buffer.
 */
export function regionOf(d) {
  if (!d) return null;
  if (d.heap) {
    if (d.heap.disposed) return null; // its memory may belong to someone else now: E_DISPOSED says it
    return { space: d.heap.rt, start: d.heap.ptr, end: d.heap.ptr + d.heap.bytes };
  }
  if (!d.data) return null;
  return { space: d.data.buffer, start: d.data.byteOffset, end: d.data.byteOffset + d.data.byteLength };
}

/** The buffer a region's space stands for (any instance's memory, not just ours). */
const bufferOf = (space) => (space && typeof space.currentBuffer === 'function' ? space.currentBuffer() : space);

export function overlaps(a, b) {
  return !!a && !!b && bufferOf(a.space) === bufferOf(b.space) && a.start < b.end && b.start < a.end;
}

/** E_ARG when `out` shares memory with any of `inputs` (descriptors or raw regions). */
export function checkAliasing(ck, outDesc, inputs) {
  const o = regionOf(outDesc);
  if (!o) return;
  for (const x of inputs) {
    if (!x) continue;
    const r = x.region ? x.region : regionOf(x);
    if (overlaps(o, r)) {
      ck.add('E_ARG', `${outDesc.name} shares memory with ${x.name}; out must not overlap any input`);
      return;
    }
  }
}

/** E_DISPOSED for any disposed heap tensor among `descs`. */
export function checkDisposedTensors(ck, descs) {
  for (const d of descs) {
    if (d && d.heap && d.heap.disposed) {
      ck.add('E_DISPOSED', `${d.name} is a disposed heap tensor`);
      return;
    }
  }
}

// ---------------------------------------------------------------------------
// The fast op: customSdpa, and the cache's attend / update / step / read

export const CUSTOM_OPTIONS = Object.freeze(['startPos', 'attnMask', 'dropoutP', 'isCausal', 'scale', 'out']);
export const STEP_OPTIONS = Object.freeze(['attnMask', 'dropoutP', 'isCausal', 'scale', 'out']);

/**
 * Checks the attention half of a call: query against key/value (real
 * tensors, or the cache's whole K/V when `cache` is given), the mask, out
 * and the scalar options. Adds violations to `ck`; returns the plan.
 *
 * @param {object} a
 *   q, k, v           raw tensor arguments (k, v ignored when `cache`)
 *   names             { q, k, v }
 *   o                 options already read with readOptions
 *   cache             null or { batch, maxSeqLen, numKvHeads, headDim }
 *   startPos          number (already checked) or null when invalid
 *   skipStartPosBound    true in a cache step (the update half reports capacity)
 */
export function checkAttention(ck, rt, a) {
  const { names, o, cache } = a;
  const Q = inspectTensor(ck, names.q, a.q, 'input');
  let K, V;
  if (cache) {
    const dims = [cache.batch, cache.maxSeqLen, cache.numKvHeads, cache.headDim];
    K = { name: 'the cache', dims, rank: 4, dtype: 'float32', ok: true, virtual: true };
    V = K;
  } else {
    K = inspectTensor(ck, names.k, a.k, 'input');
    V = inspectTensor(ck, names.v, a.v, 'input');
  }
  const M = o.attnMask !== undefined && o.attnMask !== null ? inspectTensor(ck, 'attnMask', o.attnMask, 'mask') : null;
  const O = o.out !== undefined && o.out !== null ? inspectTensor(ck, 'out', o.out, 'out') : null;
  const isCausal = checkBool(ck, o.isCausal, 'isCausal');
  const scale = checkScale(ck, o.scale, { positive: true });
  checkDropout(ck, o.dropoutP);

  // E_RANK
  const qr = checkRank(ck, Q, [4], '4-D [B, S, H, D]');
  const kr = cache ? true : checkRank(ck, K, [4], '4-D [B, S, H, D]');
  const vr = cache ? true : checkRank(ck, V, [4], '4-D [B, S, H, D]');
  const mr = M ? checkRank(ck, M, [2], '2-D [Sq, N] (this op does not broadcast masks)') : false;

  // E_DIMS (0 heads: E_HEADS)
  if (qr) checkDims(ck, Q, 2);
  if (!cache && kr) checkDims(ck, K, 2);
  if (!cache && vr) checkDims(ck, V, 2);
  const mok = mr && checkDims(ck, M, -1);
  const qs = qr && structural(Q), ks = cache ? true : kr && structural(K), vs = cache ? true : vr && structural(V);
  let ook = false;
  if (O && O.dims) {
    checkDims(ck, O, 2); // out's head count 0 is E_HEADS, as for query
    ook = structural(O);
    if (ook && qs) {
      const want = Q.dims;
      if (O.rank !== 4 || O.dims[1] !== want[1] || O.dims[2] !== want[2] || O.dims[3] !== want[3]) {
        ck.add('E_DIMS', `out has dims ${fmtDims(O.dims)} but the output is ${fmtDims(want)} [B, Sq, Hq, D]`);
        ook = false;
      }
    }
  }

  // E_ARG: out aliasing an input
  if (O) {
    const inputs = [Q, M];
    if (!cache) inputs.push(K, V);
    if (a.extraInputs) inputs.push(...a.extraInputs);
    checkAliasing(ck, O, inputs);
  }

  let Sq = 0, Skv = 0;
  if (qs && ks && vs) {
    const [B, sq, Hq, D] = Q.dims;
    const [Bk, Sk, Hk, Dk] = K.dims;
    const [Bv, Sv, Hv, Dv] = V.dims;
    Sq = sq; Skv = Math.min(Sk, Sv);
    const kname = K.name, vname = V.name;
    // E_BATCH
    if (Bk !== B) ck.add('E_BATCH', `${kname} has batch ${Bk} but ${Q.name} has batch ${B}; batches must match (no broadcasting)`);
    if (!cache && Bv !== B) ck.add('E_BATCH', `${vname} has batch ${Bv} but ${Q.name} has batch ${B}; batches must match (no broadcasting)`);
    if (O && ook && O.dims[0] !== B) ck.add('E_BATCH', `out has batch ${O.dims[0]} but ${Q.name} has batch ${B}`);
    // E_HEADS
    if (Hk !== Hv) ck.add('E_HEADS', `${kname} has ${Hk} heads but ${vname} has ${Hv}; key and value heads must be equal`);
    else if (Hk > Hq) ck.add('E_HEADS', `${kname} has ${Hk} heads but ${Q.name} has ${Hq}; key heads must not exceed query heads`);
    else if (Hq % Hk !== 0) ck.add('E_HEADS', `${kname} has ${Hk} heads but ${Q.name} has ${Hq}; query heads must be a multiple of key heads (GQA)`);
    // E_HEAD_DIM
    if (Dk !== D) ck.add('E_HEAD_DIM', `${kname} has head dim ${Dk} but ${Q.name} has ${D}; head dims must be equal`);
    else if (!cache && Dv !== D) ck.add('E_HEAD_DIM', `${vname} has head dim ${Dv} but ${Q.name} has ${D}; head dims must be equal`);
    // E_KV_LEN
    if (!cache && Sk !== Sv) ck.add('E_KV_LEN', `${kname} has sequence length ${Sk} but ${vname} has ${Sv}; they must be equal`);
    // E_START_POS (no mask: keys 0 .. sp+Sq-1 must exist)
    if (!M && a.startPos !== null && !a.skipStartPosBound && a.startPos + Sq > Skv) {
      ck.add('E_START_POS', `startPos ${a.startPos} + query length ${Sq} = ${a.startPos + Sq} exceeds the ${cache ? 'cache length maxSeqLen' : 'key/value length'} ${Skv}; without a mask the op reads keys 0 .. startPos+Sq-1`);
    }
    // E_MASK_SHAPE
    if (M && mok && (M.dims[0] !== Sq || M.dims[1] > Skv)) {
      ck.add('E_MASK_SHAPE', `attnMask has dims ${fmtDims(M.dims)} but must be [Sq, N] = [${Sq}, N] with N ≤ ${Skv} (${cache ? 'maxSeqLen' : 'key length'}); this op does not broadcast masks`);
    }
  }
  if (M && isCausal === true) ck.add('E_MASK_CAUSAL', `attnMask and isCausal: true were both given; pass one of them`);

  checkDisposedTensors(ck, [Q, cache ? null : K, cache ? null : V, M, O]);

  return { Q, K, V, M, O, isCausal, scale, Sq, Skv };
}

/**
 * Checks a cache write: k, v [B, Snew, Hkv, D] at startPos against the
 * cache geometry. Returns { K, V, Snew }.
 */
export function checkCacheWrite(ck, cache, k, v, startPos, names = { k: 'k', v: 'v' }) {
  const K = inspectTensor(ck, names.k, k, 'input');
  const V = inspectTensor(ck, names.v, v, 'input');
  const kr = checkRank(ck, K, [4], '4-D [B, Snew, Hkv, D]');
  const vr = checkRank(ck, V, [4], '4-D [B, Snew, Hkv, D]');
  if (kr) checkDims(ck, K, 2);
  if (vr) checkDims(ck, V, 2);
  let Snew = 0;
  const ks = kr && structural(K), vs = vr && structural(V);
  for (const [d, ok] of [[K, ks], [V, vs]]) {
    if (!ok) continue;
    const [B, , H, D] = d.dims;
    if (B !== cache.batch) ck.add('E_BATCH', `${d.name} has batch ${B} but the cache has batch ${cache.batch}`);
    if (H !== cache.numKvHeads) ck.add('E_HEADS', `${d.name} has ${H} heads but the cache has numKvHeads = ${cache.numKvHeads}`);
    if (D !== cache.headDim) ck.add('E_HEAD_DIM', `${d.name} has head dim ${D} but the cache has headDim = ${cache.headDim}`);
  }
  if (ks && vs && K.dims[1] !== V.dims[1]) {
    ck.add('E_KV_LEN', `${K.name} has ${K.dims[1]} rows but ${V.name} has ${V.dims[1]}; they must be equal`);
  }
  if (ks) Snew = K.dims[1];
  if (ks && startPos !== null && startPos + Snew > cache.maxSeqLen) {
    ck.add('E_CAPACITY', `writing ${Snew} rows at startPos ${startPos} needs ${startPos + Snew} rows but the cache holds maxSeqLen = ${cache.maxSeqLen}`);
  }
  checkDisposedTensors(ck, [K, V]);
  return { K, V, Snew };
}
