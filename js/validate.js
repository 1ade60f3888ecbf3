// validate.js: every rule of CONTRACT.md section 2 (and the cache rules of
// section 3), checked in JS before anything touches wasm memory.
//
// All checks of a call are collected; the one reported is the first in the
// contract table's order (ties: the first found, in argument order). Later
// checks that depend on an earlier, failed one (e.g. head counts of a tensor
// whose rank is wrong) are skipped; the earlier failure already outranks them.

import { SdpaError, codeRank } from './errors.js';
import { heapState } from './heap.js';
import { prod, fmtDims } from './shape.js';

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

const isPosInt = (x) => Number.isSafeInteger(x) && x > 0;

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

function suggest(name, allowed) {
  const norm = (s) => s.toLowerCase().replace(/[_\-\s]/g, '');
  const hit = allowed.find((a) => norm(a) === norm(name));
  return hit ? ` (did you mean '${hit}'?)` : '';
}

/**
 * Whether `key`, found by `for...in` on an options object, is one of its
 * options: an own name, or an inherited one (as `opts.key` would read it)
 * unless it sits on Object.prototype itself (enumerable junk some script
 * added there is not an option).
 */
export function countsAsOption(opts, key) {
  return Object.prototype.hasOwnProperty.call(opts, key) || !(key in Object.prototype);
}

/** Prototype of readOptions' results: no Object.prototype in the chain, so nothing is read from it. */
const NO_PROTO = Object.freeze(Object.create(null));

/** An empty options result; the attention options are declared up front so every result has one shape. */
function blankOptions() {
  const o = Object.create(NO_PROTO);
  o.startPos = undefined;
  o.attnMask = undefined;
  o.dropoutP = undefined;
  o.isCausal = undefined;
  o.scale = undefined;
  o.out = undefined;
  o.enableGqa = undefined;
  return o;
}

/**
 * Reads an options object: undefined/null = {}, unknown names are E_ARG.
 * Values that are `undefined` count as absent. Inherited names count too
 * (countsAsOption), so none is dropped silently; a Map, Date, ... (whose
 * entries are not properties) is E_ARG. Absent options read as undefined.
 */
export function readOptions(ck, opts, allowed) {
  const out = blankOptions();
  if (opts === undefined || opts === null) return out;
  if (typeof opts !== 'object' || Object.prototype.toString.call(opts) !== '[object Object]') {
    ck.add('E_ARG', `options must be a plain object, got ${describeValue(opts)}`);
    return out;
  }
  for (const key in opts) {
    if (!countsAsOption(opts, key)) continue;
    if (!allowed.includes(key)) {
      ck.add('E_ARG', `unknown option '${key}'${suggest(key, allowed)}; the options are ${allowed.join(', ')}`);
      continue;
    }
    if (opts[key] !== undefined) out[key] = opts[key];
  }
  return out;
}

/** startPos-like: a non-negative integer (absent: 0, or E_ARG when `required`). Returns the value or null when invalid. */
export function checkStartPos(ck, value, name, required = false) {
  if (value === undefined || value === null) {
    if (required) { ck.add('E_ARG', `${name} is missing; expected a non-negative integer`); return null; }
    return 0;
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

/** The fast op's scale rule: finite and > 0 as a float32 (the kernel's type). */
export function fitsFastScale(x) {
  const f = Math.fround(x);
  return Number.isFinite(f) && f > 0;
}

/**
 * scale: absent (undefined/null) → null. `positive`: the fast op's rule
 * (fitsFastScale); otherwise any finite number (section 4).
 */
export function checkScale(ck, value, positive) {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'number') { ck.add('E_ARG', `scale must be a number, got ${describeValue(value)}`); return null; }
  if (positive) {
    if (!fitsFastScale(value)) {
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
// Dims

/** How messages name a dims array: `query.dims`, or `dims` for allocTensor's own argument (name null). */
const dimsLabel = (name) => (name === null ? 'dims' : `${name}.dims`);

/**
 * Reads a dims argument. Returns a copy as number[], or null after adding
 * E_ARG: missing, not an array (or a typed array other than DataView), an
 * element that is not a number. `name`: the tensor's, or null (see dimsLabel).
 */
export function readDims(ck, dims, name) {
  if (dims === undefined || dims === null) {
    ck.add('E_ARG', `${dimsLabel(name)} is missing; expected an array of positive integers`);
    return null;
  }
  if (!(Array.isArray(dims) || (ArrayBuffer.isView(dims) && tagOf(dims) !== 'DataView'))) {
    ck.add('E_ARG', `${dimsLabel(name)} must be an array of integers, got ${describeValue(dims)}`);
    return null;
  }
  const arr = Array.from(dims);
  for (let i = 0; i < arr.length; i++) {
    if (typeof arr[i] !== 'number') {
      ck.add('E_ARG', `${dimsLabel(name)}[${i}] must be a number, got ${describeValue(arr[i])}`);
      return null;
    }
  }
  return arr;
}

/**
 * E_DIMS for every dim that is not a positive integer; a 0 at `headIndex`
 * is E_HEADS instead. Returns true when every dim is a positive integer.
 */
export function checkDimValues(ck, dims, name, headIndex = -1) {
  let ok = true;
  for (let i = 0; i < dims.length; i++) {
    const x = dims[i];
    if (isPosInt(x)) continue;
    ok = false;
    if (x === 0 && i === headIndex) ck.add('E_HEADS', `${name} has 0 heads (dims ${fmtDims(dims)}); expected at least 1`);
    else ck.add('E_DIMS', `${dimsLabel(name)}[${i}] is ${x}; every dim must be a positive integer`);
  }
  return ok;
}

// ---------------------------------------------------------------------------
// Tensors

/**
 * Looks at a tensor argument. Roles:
 *   'input' - query/key/value (float32), 'out' (float32), 'mask' (float32 | bool).
 * Returns a descriptor or null when the argument is missing / not a tensor:
 *   { name, t, heap (internal heap state or null), data (typed array or null),
 *     dims (number[] or null; a heap tensor's own frozen dims), dtype
 *     ('float32'|'bool'|null), len, rank, whole (every dim a non-negative integer) }
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
  const d = { name, t, heap: null, data: null, dims: null, dtype: null, len: -1, rank: -1, whole: false };
  const hs = heapState(t);
  if (hs) {
    // Dims, dtype and length were checked by allocTensor.
    d.heap = hs;
    d.dims = hs.dims;
    d.rank = hs.dims.length;
    d.dtype = hs.dtype;
    d.len = hs.n;
    d.whole = true;
  } else {
    inspectPlain(ck, d, t, role);
  }
  if (d.dtype === 'bool' && role !== 'mask') {
    ck.add('E_DTYPE', `${name} is bool (Uint8Array); expected float32 (Float32Array)`);
  }
  return d;
}

/** inspectTensor for a plain { data, dims, dtype? } object: fills `d`. */
function inspectPlain(ck, d, t, role) {
  const name = d.name;
  const dtypeCode = role === 'mask' ? 'E_MASK_DTYPE' : 'E_DTYPE';
  const wanted = role === 'mask' ? `float32 (Float32Array) or bool (Uint8Array)` : `float32 (Float32Array)`;
  const dims = readDims(ck, t.dims, name);
  if (dims) {
    d.dims = dims;
    d.rank = dims.length;
    d.whole = dims.every((x) => Number.isSafeInteger(x) && x >= 0);
  }
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

/** E_RANK unless the rank is one of `ranks`. Returns true when the rank fits. */
export function checkRank(ck, d, ranks, what) {
  if (!d || !d.dims) return false;
  if (ranks.includes(d.rank)) return true;
  ck.add('E_RANK', `${d.name} has rank ${d.rank} (dims ${fmtDims(d.dims)}); expected ${what}`);
  return false;
}
export const RANK_4 = Object.freeze([4]);

/**
 * Every dim a positive integer (a 0 at `headIndex` is E_HEADS) and
 * len == product(dims). Returns true when both hold.
 */
export function checkDims(ck, d, headIndex = -1) {
  if (!d || !d.dims) return false;
  if (d.heap) return true; // checked by allocTensor; its length is the product by construction
  if (!checkDimValues(ck, d.dims, d.name, headIndex)) return false;
  const need = prod(d.dims);
  if (d.len >= 0 && d.len !== need) {
    ck.add('E_DIMS', `${d.name}.data has ${d.len} elements but dims ${fmtDims(d.dims)} need ${need}`);
    return false;
  }
  return true;
}

/**
 * True when every dim is a non-negative integer. Relational checks (batch,
 * heads, ...) run on such tensors even when a dim failed checkDims: the only
 * failure then possible is a head count of 0 (E_HEADS), which ranks after
 * E_BATCH, so the relational rules must still be looked at.
 */
export function structural(d) {
  return d !== null && d.whole;
}

/**
 * Memory region of a tensor for aliasing checks: { space, start, end }.
 * `space` is an ArrayBuffer, or a runtime (an instance's wasm memory: heap
 * tensors, cache storage) that stands for its current buffer.
 */
export function regionOf(d) {
  if (!d) return null;
  if (d.heap) return d.heap.disposed ? null : d.heap.region; // (disposed: its memory may be someone else's now; E_DISPOSED says it)
  if (!d.data) return null;
  return { space: d.data.buffer, start: d.data.byteOffset, end: d.data.byteOffset + d.data.byteLength };
}

/** The buffer a region's space stands for (any instance's memory, not just ours). */
const bufferOf = (space) => (space && typeof space.currentBuffer === 'function' ? space.currentBuffer() : space);

/** Whether two regions share bytes (the buffers are looked up only when the ranges meet and the spaces differ). */
export function overlaps(a, b) {
  return !!a && !!b && a.start < b.end && b.start < a.end && (a.space === b.space || bufferOf(a.space) === bufferOf(b.space));
}

/** E_ARG when `out` (a descriptor) shares memory with `x` (a descriptor, or { name, region }). */
export function checkOutAliasing(ck, out, x) {
  if (!out || !x) return;
  if (overlaps(regionOf(out), x.region ? x.region : regionOf(x))) {
    ck.add('E_ARG', `${out.name} shares memory with ${x.name}; out must not overlap any input`);
  }
}

/** E_DISPOSED when `d` is a disposed heap tensor. */
export function checkDisposed(ck, d) {
  if (d && d.heap && d.heap.disposed) ck.add('E_DISPOSED', `${d.name} is a disposed heap tensor`);
}

/** E_MASK_CAUSAL for a mask together with isCausal: true. */
export function checkMaskCausal(ck, M, isCausal) {
  if (M && isCausal === true) ck.add('E_MASK_CAUSAL', `attnMask and isCausal: true were both given; pass one of them`);
}

// ---------------------------------------------------------------------------
// The fast op: customSdpa, and the cache's attend / update / step / read

export const CUSTOM_OPTIONS = Object.freeze(['startPos', 'attnMask', 'dropoutP', 'isCausal', 'scale', 'out']);
export const STEP_OPTIONS = Object.freeze(['attnMask', 'dropoutP', 'isCausal', 'scale', 'out']);

const RANK_2 = Object.freeze([2]);
const BSHD = '4-D [B, S, H, D]';

/**
 * The stand-in descriptor of a cache's whole K (and V) for checkAttention:
 * dims [B, maxSeqLen, Hkv, D]. Made once per cache.
 */
export function cacheDescriptor(geo) {
  return Object.freeze({
    name: 'the cache', dims: Object.freeze([geo.batch, geo.maxSeqLen, geo.numKvHeads, geo.headDim]),
    rank: 4, dtype: 'float32', virtual: true,
  });
}

/**
 * Checks the attention half of a call: query against key/value, the mask,
 * out and the scalar options. Adds violations to `ck`; returns the plan
 * { Q, M, O, isCausal, scale, Sq } (Sq: the query length, -1 when unknown).
 *
 * @param {object} o          options already read with readOptions
 * @param {number|null} startPos  already checked; null (invalid, or a cache step,
 *                            whose write reports the bound as E_CAPACITY) skips
 *                            the bound startPos + Sq <= Skv
 * @param Q, K, V             descriptors from inspectTensor (or null); K and V
 *                            are both the cache's cacheDescriptor for a cache
 */
export function checkAttention(ck, o, startPos, Q, K, V) {
  const cache = K !== null && K.virtual === true;
  const M = o.attnMask !== undefined && o.attnMask !== null ? inspectTensor(ck, 'attnMask', o.attnMask, 'mask') : null;
  const O = o.out !== undefined && o.out !== null ? inspectTensor(ck, 'out', o.out, 'out') : null;
  const isCausal = checkBool(ck, o.isCausal, 'isCausal');
  const scale = checkScale(ck, o.scale, true);
  checkDropout(ck, o.dropoutP);

  // E_RANK
  const qr = checkRank(ck, Q, RANK_4, BSHD);
  const kr = cache || checkRank(ck, K, RANK_4, BSHD);
  const vr = cache || checkRank(ck, V, RANK_4, BSHD);
  const mr = M !== null && checkRank(ck, M, RANK_2, '2-D [Sq, N] (this op does not broadcast masks)');

  // E_DIMS (0 heads: E_HEADS)
  if (qr) checkDims(ck, Q, 2);
  if (!cache && kr) checkDims(ck, K, 2);
  if (!cache && vr) checkDims(ck, V, 2);
  const mok = mr && checkDims(ck, M, -1);
  const qs = qr && structural(Q), ks = cache || (kr && structural(K)), vs = cache || (vr && structural(V));
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

  // E_ARG: out aliasing an input (the first one found is reported)
  checkOutAliasing(ck, O, Q);
  checkOutAliasing(ck, O, M);
  if (!cache) {
    checkOutAliasing(ck, O, K);
    checkOutAliasing(ck, O, V);
  }

  let Sq = -1;
  if (qs && ks && vs) {
    // (indexing, not destructuring: array destructuring allocates an iterator here)
    const qd = Q.dims, kd = K.dims, vd = V.dims;
    const B = qd[0], Hq = qd[2], D = qd[3];
    const Bk = kd[0], Sk = kd[1], Hk = kd[2], Dk = kd[3];
    const Bv = vd[0], Sv = vd[1], Hv = vd[2], Dv = vd[3];
    Sq = qd[1];
    const Skv = Math.min(Sk, Sv);
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
    if (!M && startPos !== null && startPos + Sq > Skv) {
      ck.add('E_START_POS', `startPos ${startPos} + query length ${Sq} = ${startPos + Sq} exceeds the ${cache ? 'cache length maxSeqLen' : 'key/value length'} ${Skv}; without a mask the op reads keys 0 .. startPos+Sq-1`);
    }
    // E_MASK_SHAPE
    if (M && mok && (M.dims[0] !== Sq || M.dims[1] > Skv)) {
      ck.add('E_MASK_SHAPE', `attnMask has dims ${fmtDims(M.dims)} but must be [Sq, N] = [${Sq}, N] with N ≤ ${Skv} (${cache ? 'maxSeqLen' : 'key length'}); this op does not broadcast masks`);
    }
  }
  checkMaskCausal(ck, M, isCausal);

  checkDisposed(ck, Q);
  checkDisposed(ck, K);
  checkDisposed(ck, V);
  checkDisposed(ck, M);
  checkDisposed(ck, O);

  return { Q, M, O, isCausal, scale, Sq };
}

/** checkCacheWrite's geometry rules for one of k, v against the cache. */
function checkWriteGeometry(ck, cache, d) {
  const B = d.dims[0], H = d.dims[2], D = d.dims[3];
  if (B !== cache.batch) ck.add('E_BATCH', `${d.name} has batch ${B} but the cache has batch ${cache.batch}`);
  if (H !== cache.numKvHeads) ck.add('E_HEADS', `${d.name} has ${H} heads but the cache has numKvHeads = ${cache.numKvHeads}`);
  if (D !== cache.headDim) ck.add('E_HEAD_DIM', `${d.name} has head dim ${D} but the cache has headDim = ${cache.headDim}`);
}

/**
 * Checks a cache write: k, v [B, Snew, Hkv, D] at startPos against the
 * cache geometry. Returns { K, V, Snew } (Snew -1 when unknown).
 */
export function checkCacheWrite(ck, cache, k, v, startPos) {
  const K = inspectTensor(ck, 'k', k, 'input');
  const V = inspectTensor(ck, 'v', v, 'input');
  const kr = checkRank(ck, K, RANK_4, '4-D [B, Snew, Hkv, D]');
  const vr = checkRank(ck, V, RANK_4, '4-D [B, Snew, Hkv, D]');
  if (kr) checkDims(ck, K, 2);
  if (vr) checkDims(ck, V, 2);
  const ks = kr && structural(K), vs = vr && structural(V);
  if (ks) checkWriteGeometry(ck, cache, K);
  if (vs) checkWriteGeometry(ck, cache, V);
  if (ks && vs && K.dims[1] !== V.dims[1]) {
    ck.add('E_KV_LEN', `${K.name} has ${K.dims[1]} rows but ${V.name} has ${V.dims[1]}; they must be equal`);
  }
  const Snew = ks ? K.dims[1] : -1;
  if (ks && startPos !== null && startPos + Snew > cache.maxSeqLen) {
    ck.add('E_CAPACITY', `writing ${Snew} rows at startPos ${startPos} needs ${startPos + Snew} rows but the cache holds maxSeqLen = ${cache.maxSeqLen}`);
  }
  checkDisposed(ck, K);
  checkDisposed(ck, V);
  return { K, V, Snew };
}
