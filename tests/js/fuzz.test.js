// fuzz.test.js: property-based fuzzer for hostile arguments ("Hostile JavaScript can
// reach wasm memory"), with fast-check.
//
// Every run builds one hostile call (customSdpa, cache.update / attend / step /
// read, allocTensor, createKVCache, scaledDotProductAttention, planAttention)
// out of (the cache's calls also with a rotary option, whose tables are such
// tensors too): lying typed-array subclasses and own properties, Proxies, getters
// with side effects (dispose of the cache / a heap tensor / the instance,
// re-entrant calls, the caller's own exception, another array on a second
// read), views made before memory growth, views over a cache's storage and
// overlapping heap tensors, huge and boundary dims, options in every object
// shape. The property:
//   - the call returns the float64 reference's answer (tests/js/reference.js,
//     within 1e-5 (1 + max|ref|)), written to `out` when given, and changes
//     nothing else (caches: only the rows a step/update writes), or
//   - it throws an SdpaError with a documented code, or the caller's own
//     exception unchanged, and then every byte of every caller array, every
//     row of every cache and every heap tensor is unchanged;
//   - a call the contract accepts (all inputs valid) must succeed; a call
//     with an out/input aliasing rule broken must not;
//   - never a WebAssembly.RuntimeError or any other non-SdpaError.
//
// Budget: SDPA_FUZZ_RUNS (default 8000) runs, at most SDPA_FUZZ_TIME_MS
// (default 40000) ms; seed SDPA_FUZZ_SEED (default fixed, so CI is reproducible).
// The long run:   SDPA_FUZZ_RUNS=100000 SDPA_FUZZ_TIME_MS=0 node scripts/run-uvu.mjs tests/js fuzz
// Survey mode (SDPA_FUZZ_SURVEY=1): never stops at a failure, prints a tally of
// the kinds of failure found instead (to see every defect class at once).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import { appendFileSync } from 'node:fs';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { rng } from './helpers.js';
import { refCustomSdpa, refTorchSdpa, refRotate } from './reference.js';
import { real, realBytes, plainCopy, ALL_CODES, closeness, describeErr, cacheOverFreedTensor, startWatchdog } from './hostile-helpers.js';

const env = process.env;
const RUNS = Number(env.SDPA_FUZZ_RUNS) || 8000;
const TIME_MS = env.SDPA_FUZZ_TIME_MS === undefined ? 40000 : Number(env.SDPA_FUZZ_TIME_MS);
const SEED = env.SDPA_FUZZ_SEED !== undefined ? Number(env.SDPA_FUZZ_SEED) : 0x5d9a0008;
const SURVEY = env.SDPA_FUZZ_SURVEY === '1';
// SDPA_FUZZ_LOG=file: every case is appended to the file before it runs (to find the one that crashed a worker thread).
const LOG = env.SDPA_FUZZ_LOG || null;
// A call that does not return within SDPA_FUZZ_HANG_MS (default 60000) is a hang: a watchdog thread
// prints the case and kills the process (nothing in the main thread can run while a call blocks it).
const HANG_MS = Number(env.SDPA_FUZZ_HANG_MS) || 60000;

let watchdog = null;
const MiB = 1024 * 1024;

// ---------------------------------------------------------------------------
// Worlds: an instance with a cache, a few heap tensors, stale views and a
// "ghost" view over the cache's key storage. Killed worlds are remade.

const made = new Set(); // live-or-dead instances not yet replaced (a replaced one is dropped, so its memory can be collected)
const stats = new Map(); // survey mode: how often each kind of argument and outcome occurred
const count = (k) => stats.set(k, (stats.get(k) || 0) + 1);
class World {
  static async make(threads) {
    const w = new World();
    w.threads = threads;
    w.s = await createSdpa({ threads });
    made.add(w.s);
    const s = w.s;
    // The ghost: a freed heap tensor's old view over the cache's storage (its values; null if malloc did not reuse the block).
    const made2 = cacheOverFreedTensor(s, { maxSeqLen: 8, numKvHeads: 2, headDim: 4 });
    if (made2) {
      w.cache = made2.cache; w.ghost = made2.view.subarray(made2.at);
      // Rows 0 and 1 small again (keys of ~1000 make the softmax too ill-conditioned for float32 against huge values).
      const r0 = rng(threads + 11);
      const small = () => ({ data: Float32Array.from({ length: 16 }, () => r0() * 2 - 1), dims: [1, 2, 2, 4] });
      w.cache.update(small(), small(), 0);
    } else { w.cache = s.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 4 }); w.cache.update({ data: new Float32Array(16), dims: [1, 2, 2, 4] }, { data: new Float32Array(16), dims: [1, 2, 2, 4] }, 0); w.ghost = null; }
    const r = rng(threads * 7 + made.size);
    const fillRows = { data: Float32Array.from({ length: 6 * 8 }, () => r() * 2 - 1), dims: [1, 6, 2, 4] };
    w.cache.update(fillRows, { data: fillRows.data.map((x) => -x * 0.5), dims: fillRows.dims }, 2);
    // Heap tensors whose old views go stale when memory grows.
    w.staleOwners = [s.allocTensor('float32', [256]), s.allocTensor('float32', [256])];
    for (const h of w.staleOwners) h.data.set(Float32Array.from({ length: 256 }, () => r() - 0.5));
    w.staleViews = w.staleOwners.map((h) => h.data);
    w.grow();
    return w;
  }
  get alive() { return !this.s.disposed; }
  /** Grows the memory (a heap tensor bigger than the heap, freed again): every earlier view is stale. */
  grow() {
    const { M } = this.s[INTERNALS];
    const before = M.wasmMemory.buffer; // (observed only)
    const g = this.s.allocTensor('float32', [Math.ceil(before.byteLength / 4) + 4 * MiB]);
    g.dispose();
    this.grown = M.wasmMemory.buffer !== before;
  }
  heapBytes() { return this.s[INTERNALS].M.wasmMemory.buffer.byteLength; }
  /** Remakes what a case disposed. */
  repair() {
    if (!this.alive) return;
    if (this.cache.disposed) {
      this.cache = this.s.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 4 });
      const r = rng(made.size * 31 + 5);
      const rows = { data: Float32Array.from({ length: 64 }, () => r() * 2 - 1), dims: [1, 8, 2, 4] };
      this.cache.update(rows, { data: rows.data.map((x) => -x * 0.5), dims: rows.dims }, 0); // (writes may not leave a hole: all 8 rows)
      this.ghost = null;
    }
    if (this.staleOwners.some((h) => h.disposed)) {
      this.staleOwners.forEach((h, i) => { if (h.disposed) { this.staleViews[i] = null; } });
    }
  }
}

let worlds = {};
async function world(threads) {
  let w = worlds[threads];
  if (!w || !w.alive || w.heapBytes() > 256 * MiB) {
    if (w) { if (w.alive) w.s.dispose(); made.delete(w.s); }
    w = worlds[threads] = await World.make(threads);
  }
  w.repair();
  return w;
}

// ---------------------------------------------------------------------------
// Arbitraries

const BOUNDARY = [0, -1, 1.5, NaN, Infinity, 2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 32 + 1, 2 ** 53 - 1, 2 ** 53, 1e300, '1', null];
const weighted = (pairs) => fc.oneof(...pairs.map(([v, weight]) => ({ arbitrary: fc.constant(v), weight })));
// Benign sources are valid arguments (a lying typed array is valid: its lies must have no effect);
// hostile ones break a rule or have side effects.
const BENIGN_SOURCES = [['plain', 10], ['shared', 3], ['liar', 5], ['ownliar', 2], ['heap', 4], ['heapView', 2], ['heapOther', 1], ['stale', 3], ['getter', 4]];
const HOSTILE_SOURCES = [['ghost', 4], ['aliasQ', 2], ['u8', 1], ['f64', 1], ['array', 1], ['detached', 2], ['proxyHeap', 1], ['getter', 6], ['liar', 2], ['stale', 2]];
const LIE_VALUES = {
  length: [undefined, undefined, 0, 1, 3, 1e9, -1],
  byteOffset: [undefined, undefined, 0, 4, 1e9, 'wasm'],
  byteLength: [undefined, undefined, 0, 4, 1 << 30],
  buffer: [undefined, undefined, 'other', 'wasm'],
  tag: [undefined, undefined, 'Float32Array', 'Uint8Array', 'Float64Array', 'Array'],
};
const lieArb = fc.record(Object.fromEntries(Object.entries(LIE_VALUES).map(([k, vals]) => [k, fc.constantFrom(...vals)])));
const PROPS = fc.constantFrom('data', 'dims', 'dtype', 'dimsIndex', 'dimsProxy');
const benignGetter = fc.record({ prop: PROPS, effect: weighted([['none', 6], ['reenter', 2], ['second', 2]]) });
const hostileGetter = fc.record({ prop: PROPS, effect: weighted([['disposeCache', 2], ['disposeHeap', 2], ['disposeSdpa', 1], ['reenter', 1], ['throw', 2], ['second', 1]]) });
const MAGNITUDES = weighted([[1, 12], [1e10, 1], [3e38, 1], [1e-30, 1], [0, 1]]);
const benignTensor = fc.record({
  source: weighted(BENIGN_SOURCES), lies: lieArb, getter: benignGetter, dimMutation: fc.constant(null),
  dtypeField: weighted([[undefined, 4], ['match', 1]]), magnitude: MAGNITUDES,
});
const hostileTensor = fc.record({
  source: weighted(HOSTILE_SOURCES), lies: lieArb, getter: hostileGetter,
  dimMutation: fc.option(fc.record({ at: fc.nat(3), value: fc.constantFrom(...BOUNDARY) }), { freq: 3 }),
  dtypeField: weighted([[undefined, 6], ['match', 1], ['float32', 1], ['bool', 1], [1, 1]]), magnitude: MAGNITUDES,
});
const tensorArb = fc.oneof({ arbitrary: benignTensor, weight: 9 }, { arbitrary: hostileTensor, weight: 1 });
const SHAPES = [['plain', 8], ['nullproto', 1], ['class', 2], ['nonenum', 2], ['inherited', 2], ['proxy', 1], ['getters', 2], ['none', 1]];
const benignOpts = fc.record({
  shape: weighted(SHAPES),
  isCausal: weighted([[undefined, 4], [true, 4], [false, 2]]),
  scale: weighted([[undefined, 12], [null, 1], [0.5, 3], [2 ** 60, 1], [2 ** -60, 1]]),
  dropoutP: weighted([[undefined, 10], [0, 3]]),
  startPos: fc.constant('geo'),
  enableGqa: fc.constantFrom(undefined, true, false),
  unknown: fc.constant(undefined),
  effect: weighted([['none', 6], ['reenter', 1]]),
});
const hostileOpts = fc.record({
  shape: weighted([...SHAPES, ['array', 2]]),
  isCausal: weighted([[undefined, 4], [true, 4], [false, 2], [1, 2]]),
  scale: weighted([[undefined, 4], [null, 1], [0.5, 1], [0, 1], [-1, 1], [NaN, 1], [Infinity, 1], ['0.5', 1], [2 ** -149, 1]]),
  dropoutP: weighted([[undefined, 4], [0, 1], [0.1, 1]]),
  startPos: weighted([['geo', 4], [-1, 1], [1.5, 1], [2 ** 32, 1], [2 ** 53 - 1, 1], ['0', 1], [undefined, 1]]),
  enableGqa: fc.constantFrom(undefined, true, false, 'yes'),
  unknown: weighted([[undefined, 4], ['is_causal', 1], ['startpos', 1]]),
  effect: weighted([['none', 2], ['disposeCache', 1], ['disposeHeap', 1], ['disposeSdpa', 1], ['reenter', 1], ['throw', 1]]),
});
// createKVCache's dtype options: K and V each any cache dtype (or a bad value)
const CACHE_DTYPE = weighted([[undefined, 8], ['float32', 1], ['float16', 1], ['int8', 1], ['int4', 2], ['int3', 1], [4, 1]]);
const cacheDtypes = fc.record({ dtype: CACHE_DTYPE, keyDtype: CACHE_DTYPE, valueDtype: CACHE_DTYPE });
const caseArb = fc.record({
  cacheDtypes,
  op: weighted([['custom', 6], ['attend', 4], ['step', 4], ['update', 3], ['read', 1], ['alloc', 1], ['torch', 3], ['plan', 1], ['createCache', 1]]),
  threads: fc.constantFrom(1, 2),
  geo: fc.record({ B: fc.integer({ min: 1, max: 2 }), Sq: fc.integer({ min: 1, max: 3 }), Hkv: fc.integer({ min: 1, max: 2 }), group: fc.integer({ min: 1, max: 2 }), D: fc.integer({ min: 1, max: 6 }), Skv: fc.integer({ min: 1, max: 6 }), sp: fc.nat(6), Ev: fc.integer({ min: 1, max: 6 }) }),
  q: tensorArb, k: tensorArb, v: tensorArb, mask: tensorArb, out: tensorArb,
  hasMask: weighted([[false, 2], [true, 1]]),
  maskBool: fc.boolean(),
  hasOut: fc.boolean(),
  opts: fc.oneof({ arbitrary: benignOpts, weight: 5 }, { arbitrary: hostileOpts, weight: 1 }),
  seed: fc.integer(),
  growFirst: fc.oneof({ arbitrary: fc.constant(false), weight: 40 }, { arbitrary: fc.constant(true), weight: 1 }),
  // rotary on attend / step / update: tables [P, half] (half 3: rotaryDim 6 > the cache's D 4; P 4: too short
  // for the default positions past 3), interleaved (a non-boolean is E_ARG), positions (fitting, one too many,
  // one out of the tables, not an integer)
  rotary: fc.option(fc.record({
    cos: tensorArb, sin: tensorArb,
    half: weighted([[1, 3], [2, 3], [3, 1]]), P: weighted([[8, 4], [4, 1]]),
    interleaved: weighted([[undefined, 3], [true, 2], [false, 2], ['yes', 1]]),
    positions: weighted([[null, 4], ['fit', 3], ['long', 1], ['outside', 1], ['fraction', 1]]),
  }), { freq: 3 }),
});

// ---------------------------------------------------------------------------
// Building one call

const prod = (d) => d.reduce((a, b) => a * b, 1);
const isGoodDims = (d) => d.every((x) => Number.isSafeInteger(x) && x > 0 && x <= 2 ** 31 - 1);
const OWN = Symbol('the caller\'s own exception');

/**
 * Builds the arguments of one case; records what the library should see
 * (`real`: the first read's contents), what must not change and whether
 * the call is valid as far as the fuzzer knows.
 */
class Builder {
  constructor(c, w, other) {
    this.c = c; this.w = w; this.other = other;
    this.r = rng(c.seed);
    this.valid = true;       // every input is valid and consistent (so the call must succeed)
    this.mustFail = false;   // a rule is broken for sure (aliasing, a view of freed wasm memory)
    this.disposing = false;  // a getter disposes something (E_DISPOSED allowed)
    this.reentered = [];     // failures of re-entrant calls
    this.temps = [];         // heap tensors made for this case (disposed after)
    this.heaps = [];         // every live heap tensor that must not change (but out's)
    this.arrays = [];        // caller memory that must not change: { a (typed array), owner? }
    this.outMem = null;      // { a: the typed array out really is, heap?: owner heap tensor }
    this.own = null;         // the value a getter throws
    this.rejectReasons = []; // rules broken for sure: the call must be rejected
    this.used = [];
  }
  rand() { return this.r(); }
  values(n, magnitude) {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = (this.rand() * 2 - 1) * magnitude;
    return a;
  }
  invalid(reason) { this.valid = false; if (reason) this.rejectReasons.push(reason); }
  heap(dims, dtype = 'float32') {
    const h = this.w.s.allocTensor(dtype, dims);
    this.temps.push(h);
    return h;
  }

  /**
   * One tensor: role 'q' 'k' 'v' 'mask' 'out'; dims as the geometry wants.
   * Returns { t (what the call is given), real (Float32Array/Uint8Array of its first-read contents, or null), dims }.
   */
  tensor(role, spec, dims, { bool = false } = {}) {
    const n = prod(dims);
    const isOut = role === 'out';
    // Large values only where the exact answer is well-conditioned in float32: any |v| (the output
    // is linear in v); a large |q| only against k = 0 (every score 0). A large q.k would make the
    // float32 scores differ from the float64 ones by more than their gaps: no float32 kernel can pass.
    let magnitude = spec.magnitude;
    if ((role === 'q' || role === 'k' || role === 'mask' || role === 'cos' || role === 'sin') && magnitude > 1) {
      const bigQ = role === 'q' && this.c.op === 'custom' && this.c.k.magnitude === 0 && this.c.k.source !== 'aliasQ';
      if (!bigQ) magnitude = 1;
    }
    let vals = bool ? Uint8Array.from({ length: n }, () => (this.rand() < 0.7 ? 1 : 0)) : this.values(n, magnitude);
    if (isOut) vals = bool ? vals : new Float32Array(n).fill(7);
    let data, realArr = vals, heapT = null, t = null;
    let dimsGiven = dims.slice();
    this.viewOwner = null;
    const C = bool ? Uint8Array : Float32Array;
    const src = spec.source;
    this.used.push(`${src}${bool ? ' (bool)' : ''}${isOut ? ' as out' : ''}`);
    switch (src) {
      case 'shared': {
        const at = 3 + Math.floor(this.rand() * 5);
        const whole = new C(n + at + 5).fill(bool ? 1 : 99);
        whole.set(vals, at);
        data = new C(whole.buffer, at * C.BYTES_PER_ELEMENT, n);
        this.arrays.push(new C(whole.buffer, 0, at), new C(whole.buffer, (at + n) * C.BYTES_PER_ELEMENT));
        break;
      }
      case 'liar': case 'ownliar': {
        const base = new C(vals.length); base.set(vals);
        data = this.liar(base, spec.lies, src === 'liar' ? 'subclass' : 'own');
        break;
      }
      case 'heap': case 'heapView': case 'proxyHeap': {
        heapT = this.heap(dims, bool ? 'bool' : 'float32');
        heapT.data.set(vals);
        if (src === 'heap') t = heapT;
        else if (src === 'proxyHeap') { t = this.rand() < 0.5 ? new Proxy(heapT, {}) : Object.create(heapT); this.invalid(); }
        else { data = heapT.data; this.viewOwner = heapT; }
        if (src !== 'heap') { /* a view or a proxy: the heap tensor is what is read */ }
        break;
      }
      case 'heapOther': {
        if (!this.other || !this.other.alive) { data = vals; break; }
        heapT = this.other.s.allocTensor(bool ? 'bool' : 'float32', dims);
        this.temps.push(heapT);
        heapT.data.set(vals);
        t = heapT;
        break;
      }
      case 'stale': {
        // A view made before the memory grew, inside a live heap tensor.
        const i = Math.floor(this.rand() * 2);
        const view = this.w.staleViews[i];
        if (bool || !view || !this.w.grown || n > 200 || this.w.staleOwners[i].disposed) { data = vals; this.used.push('stale -> plain'); break; }
        const off = Math.floor(this.rand() * (256 - n));
        // (two inputs over the same bytes: the second would change the first's contents after they were recorded)
        if (!isOut && (this.staleUse || []).some((u) => u.owner === this.w.staleOwners[i] && u.start < off + n && off < u.end)) { data = vals; this.used.push('stale -> plain (taken)'); break; }
        data = view.subarray(off, off + n);
        if (!isOut) data.set(vals); else vals = plainCopy(data);
        realArr = vals;
        this.staleUse = this.staleUse || [];
        this.staleUse.push({ role, owner: this.w.staleOwners[i], start: off, end: off + n });
        this.viewOwner = this.w.staleOwners[i];
        break;
      }
      case 'ghost': {
        // A stale view over the cache's key storage (E_ARG for the cache's calls and anywhere as wasm memory not in a heap tensor).
        if (bool || !this.w.ghost || !this.w.grown || n > 64) { data = vals; this.used.push(`ghost -> plain (${!!this.w.ghost} ${this.w.grown} ${n})`); break; }
        data = this.w.ghost.subarray(0, n);
        vals = plainCopy(data);
        realArr = vals;
        this.mustFail = true;
        break;
      }
      case 'aliasQ': {
        if (role === 'q' || !this.qArr) { data = vals; break; }
        const q = this.qArr;
        const qn = real.length(q);
        if (qn < n || bool || real.tag(q) !== 'Float32Array') { data = vals; this.used.push('aliasQ -> plain'); break; }
        this.viewOwner = this.qOwner || null; // (q's memory may be a heap tensor's)
        const off = Math.floor(this.rand() * (qn - n + 1)); // (a partial overlap when off > 0 or n < qn)
        data = new Float32Array(real.buffer(q), real.byteOffset(q) + off * 4, n);
        if (isOut) this.mustFail = true; else { vals = plainCopy(data); realArr = vals; }
        break;
      }
      case 'u8':
        // (a Uint8Array mask is a bool mask, valid; for q/k/v/out it is the wrong dtype)
        if (bool) data = vals;
        else if (role === 'mask') { data = new Uint8Array(n); realArr = data; }
        else { data = new Uint8Array(n); realArr = null; this.invalid(`${role} is a Uint8Array`); }
        break;
      case 'f64': data = new Float64Array(n); realArr = null; this.invalid(`${role} is a Float64Array`); break;
      case 'array': data = Array.from(vals); realArr = null; this.invalid(`${role} is a plain Array`); break;
      case 'detached': {
        data = new C(n);
        structuredClone(data.buffer, { transfer: [data.buffer] });
        realArr = null; this.invalid(`${role} is detached`);
        break;
      }
      default: data = vals;
    }
    if (spec.dimMutation && !(t && (src === 'heap' || src === 'heapOther'))) {
      const { at, value } = spec.dimMutation;
      if (at < dimsGiven.length && value !== dimsGiven[at]) { dimsGiven[at] = value; this.invalid(`${role}.dims[${at}] = ${String(value)}`); }
    }
    if (t === null) {
      const actual = bool || (src === 'u8' && role === 'mask') ? 'bool' : 'float32'; // (what the data really is)
      let dtype = spec.dtypeField === 'match' ? actual : spec.dtypeField;
      if (dtype !== undefined && dtype !== actual) this.invalid(`${role}.dtype ${String(dtype)}`);
      const g = spec.getter;
      if (src === 'getter') t = this.getterTensor(role, data, dimsGiven, dtype, g, C);
      else { t = { data, dims: dimsGiven }; if (dtype !== undefined) t.dtype = dtype; }
    }
    if (heapT && heapT.s === undefined) { /* (a heap tensor of this or the other world) */ }
    // Book-keeping: what must not change, where out really is.
    if (isOut) {
      if (heapT) this.outMem = { a: heapT, heap: heapT };
      else if (data && ArrayBuffer.isView(data) && realArr) this.outMem = { a: data, owner: this.viewOwner };
      if (src === 'stale' && this.staleUse) this.outMem.staleOwner = this.staleUse.find((u) => u.role === 'out');
    } else {
      if (heapT) this.heaps.push(heapT);
      if (data && ArrayBuffer.isView(data) && real.byteLength(data) > 0 && src !== 'ghost') this.arrays.push(this.viewOwner ? { view: data, owner: this.viewOwner } : data);
      if (role === 'q' && data && ArrayBuffer.isView(data)) { this.qArr = data; this.qOwner = this.viewOwner; }
      if (role === 'q' && heapT) { this.qArr = heapT.data; this.qOwner = heapT; }
    }
    return { t, real: realArr, dims };
  }

  liar(base, lies, how) {
    const w = this.w;
    const values = {};
    if (lies.length !== undefined) values.length = lies.length;
    if (lies.byteLength !== undefined) values.byteLength = lies.byteLength;
    // 'wasm': the address of a live heap tensor (a lie that would make the library read or write it)
    if (lies.byteOffset !== undefined) values.byteOffset = lies.byteOffset === 'wasm' ? () => (w.staleOwners[0].disposed ? 64 : real.byteOffset(w.staleOwners[0].data)) : lies.byteOffset;
    if (lies.buffer !== undefined) values.buffer = lies.buffer === 'wasm' ? () => w.s[INTERNALS].M.wasmMemory.buffer : new ArrayBuffer(real.byteLength(base) + 64);
    const keys = Object.keys(values);
    const get = (k) => () => { const v = values[k]; return typeof v === 'function' ? v() : v; };
    let obj;
    const Base = real.tag(base) === 'Uint8Array' ? Uint8Array : Float32Array;
    if (how === 'subclass') {
      class Liar extends Base {}
      for (const k of keys) Object.defineProperty(Liar.prototype, k, { get: get(k), configurable: true });
      if (lies.tag) Object.defineProperty(Liar.prototype, Symbol.toStringTag, { get: () => lies.tag, configurable: true });
      obj = new Liar(real.buffer(base), real.byteOffset(base), real.length(base));
    } else {
      obj = base;
      for (const k of keys) Object.defineProperty(obj, k, { get: get(k), configurable: true });
      if (lies.tag) Object.defineProperty(obj, Symbol.toStringTag, { get: () => lies.tag, configurable: true });
    }
    return obj;
  }

  /** A tensor object whose `g.prop` getter has the side effect `g.effect`. */
  getterTensor(role, data, dims, dtype, g, C) {
    const self = this;
    const effect = () => self.runEffect(g.effect, role);
    let second = data;
    if (g.effect === 'second' && ArrayBuffer.isView(data)) {
      // Another array (other values, maybe another length) from the second read on.
      const kind = Math.floor(this.rand() * 3);
      const n = real.length(data);
      second = kind === 0 ? new C(n).fill(C === Uint8Array ? 0 : 1e3) : kind === 1 ? new C(Math.max(1, n >> 1)) : new Int32Array(n);
    }
    let dimsVal = dims;
    if (g.prop === 'dimsProxy' || g.prop === 'dimsIndex') {
      const arr = dims.slice();
      dimsVal = g.prop === 'dimsProxy'
        ? new Proxy(arr, { get(t, key, r) { if (key === '0') effect(); return Reflect.get(t, key, r); } })
        : Object.defineProperty(arr, 0, { get() { effect(); return dims[0]; }, enumerable: true });
    }
    const reads = { data: 0 };
    const t = {};
    Object.defineProperty(t, 'data', { enumerable: true, get() { reads.data++; if (g.prop === 'data') effect(); return reads.data === 1 ? data : second; } });
    Object.defineProperty(t, 'dims', { enumerable: true, get() { if (g.prop === 'dims') effect(); return dimsVal; } });
    if (dtype !== undefined || g.prop === 'dtype') {
      Object.defineProperty(t, 'dtype', { enumerable: true, get() { if (g.prop === 'dtype') effect(); return dtype; } });
    }
    return t;
  }

  runEffect(effect, role) {
    const w = this.w;
    switch (effect) {
      case 'disposeCache': this.disposing = true; w.cache.dispose(); break;
      case 'disposeHeap': {
        this.disposing = true;
        const h = this.temps.find((x) => !x.disposed);
        if (h) h.dispose();
        break;
      }
      case 'disposeSdpa': this.disposing = true; w.s.dispose(); break;
      case 'throw': this.own = this.own || Object.freeze({ [OWN]: role }); throw this.own;
      case 'reenter': this.reenter(); break;
      default:
    }
  }

  /** Re-entrant calls that change nothing the outer call reads; their answers are checked. */
  reenter() {
    const s = this.w.s;
    if (s.disposed) return;
    const r = rng(this.c.seed ^ 0x55);
    const mk = (dims) => ({ data: Float32Array.from({ length: prod(dims) }, () => r() - 0.5), dims });
    const q = mk([1, 2, 2, 3]), k = mk([1, 3, 1, 3]), v = mk([1, 3, 1, 3]);
    try {
      const got = s.customSdpa(q, k, v, { startPos: 1, isCausal: true });
      const m = closeness(got.data, refCustomSdpa(q, k, v, { startPos: 1, isCausal: true }));
      if (m) this.reentered.push(`re-entrant customSdpa: ${m}`);
      if (!this.w.cache.disposed) this.w.cache.read(0, 8);
    } catch (e) {
      if (!(e instanceof SdpaError)) this.reentered.push(`re-entrant call: ${describeErr(e)}`);
    }
  }

  /** Options in the case's object shape. */
  options(vals) {
    const shape = this.c.opts.shape;
    const entries = Object.entries(vals).filter(([, x]) => x !== undefined);
    const unknown = this.c.opts.unknown;
    let o;
    switch (shape) {
      case 'none': if (entries.length === 0 && !unknown) return undefined; o = {}; for (const [k, x] of entries) o[k] = x; break;
      case 'nullproto': o = Object.create(null); for (const [k, x] of entries) o[k] = x; break;
      case 'class': { class Opts {} for (const [k, x] of entries) Object.defineProperty(Opts.prototype, k, { get: () => x }); o = new Opts(); break; }
      case 'nonenum': o = {}; for (const [k, x] of entries) Object.defineProperty(o, k, { value: x, enumerable: false }); break;
      case 'inherited': o = Object.create(Object.fromEntries(entries)); break;
      case 'proxy': { const target = Object.fromEntries(entries); o = new Proxy(target, {}); break; }
      case 'getters': o = {}; for (const [k, x] of entries) Object.defineProperty(o, k, { get: () => x, enumerable: true, configurable: true }); break;
      case 'array': o = Object.assign([], Object.fromEntries(entries)); this.invalid('options is an Array'); break;
      default: o = Object.fromEntries(entries);
    }
    // An option whose getter has a side effect (plain and getters shapes).
    const effect = this.c.opts.effect;
    if (effect && effect !== 'none' && (shape === 'plain' || shape === 'getters') && entries.length) {
      const [key, x] = entries[Math.floor(this.rand() * entries.length)];
      Object.defineProperty(o, key, { enumerable: true, configurable: true, get: () => { this.runEffect(effect, `options.${key}`); return x; } });
    }
    if (unknown) {
      o[unknown] = true;
      this.invalid(`unknown option ${unknown}`);
    }
    return o;
  }
}

// ---------------------------------------------------------------------------
// Option values and geometry validity

function scalarOpts(c, b, { torch = false, custom = true } = {}) {
  const o = c.opts;
  const v = {};
  if (o.isCausal !== undefined) { v.isCausal = o.isCausal; if (typeof o.isCausal !== 'boolean') b.invalid(`isCausal ${o.isCausal}`); }
  if (o.scale !== undefined) {
    v.scale = o.scale;
    const okFast = typeof o.scale === 'number' && Number.isFinite(o.scale) && o.scale > 0;
    const okTorch = typeof o.scale === 'number' && Number.isFinite(o.scale);
    if (o.scale !== null && !(torch ? okTorch : okFast)) b.invalid(`scale ${String(o.scale)}`);
  }
  if (o.dropoutP !== undefined) { v.dropoutP = o.dropoutP; if (o.dropoutP !== 0) b.invalid(`dropoutP ${o.dropoutP}`); }
  if (torch && o.enableGqa !== undefined) { v.enableGqa = o.enableGqa; if (typeof o.enableGqa !== 'boolean') b.invalid(`enableGqa ${o.enableGqa}`); }
  return v;
}
/** What the options mean: `causalDefault` (attention over a cache) makes an absent isCausal true unless there is a mask. */
const semantic = (v, causalDefault = false) => ({
  isCausal: v.isCausal === true || (causalDefault && v.isCausal == null && v.attnMask === undefined),
  scale: typeof v.scale === 'number' ? v.scale : undefined,
});

/**
 * The rotary option of a cache call whose Sq new rows sit at startPos `sp`
 * by default: its value, and what the reference needs (null when the case
 * has none). Marks the case invalid where a rotary rule is broken.
 */
function rotaryOption(c, b, Sq, sp) {
  const r = c.rotary;
  if (!r) return null;
  const cosT = b.tensor('cos', r.cos, [r.P, r.half]), sinT = b.tensor('sin', r.sin, [r.P, r.half]);
  if (2 * r.half > 4) b.invalid(`rotaryDim ${2 * r.half} > headDim 4`);
  if (r.interleaved !== undefined && typeof r.interleaved !== 'boolean') b.invalid(`rotary.interleaved ${r.interleaved}`);
  let positions = null;
  if (r.positions === null) {
    if (Number.isSafeInteger(sp) && sp >= 0 && sp + Sq > r.P) b.invalid(`default positions ${sp} .. ${sp + Sq - 1} past the tables' ${r.P}`);
  } else {
    positions = Array.from({ length: Sq }, () => Math.floor(b.rand() * r.P));
    if (r.positions === 'long') { positions.push(0); b.invalid('rotary.positions: one per new row'); }
    if (r.positions === 'outside') { positions[Sq - 1] = r.P; b.invalid('rotary.positions past the tables'); }
    if (r.positions === 'fraction') { positions[0] = 0.5; b.invalid('rotary.positions not integers'); }
  }
  const value = { cos: cosT.t, sin: sinT.t };
  if (r.interleaved !== undefined) value.interleaved = r.interleaved;
  if (positions) value.positions = positions;
  return { value, cosT, sinT, half: r.half, interleaved: r.interleaved === true, positions };
}

/**
 * x [B, S, H, D] (data, dims) with its S rows rotated by the case's tables
 * (refRotate: float32, as the contract says) at rotary.positions, or at
 * sp, sp + 1, ... without them; null when the tables could not be read.
 */
function rotateRows(x, rot, sp) {
  if (!rot.cosT.real || !rot.sinT.real) return null;
  const T = { cos: { data: rot.cosT.real, dims: rot.cosT.dims }, sin: { data: rot.sinT.real, dims: rot.sinT.dims } };
  const pos = rot.positions ?? Array.from({ length: x.dims[1] }, (_, s) => sp + s);
  return refRotate(x, pos, T, rot.interleaved);
}

// ---------------------------------------------------------------------------
// One case

async function runCase(c) {
  const w = await world(c.threads);
  const other = worlds[3 - c.threads];
  if (c.growFirst && w.alive) w.grow();
  const b = new Builder(c, w, other && other.alive ? other : null);
  const g = c.geo;
  const Hq = g.Hkv * g.group;
  let call, check, label = c.op;
  const cache = w.cache;
  const cacheGeo = { B: 1, maxSeqLen: 8, Hkv: 2, D: 4 };
  try {
    switch (c.op) {
      case 'custom': case 'attend': case 'step': {
        const isCache = c.op !== 'custom';
        const B = isCache ? 1 : g.B, D = isCache ? 4 : g.D, Hkv = isCache ? 2 : g.Hkv, Hqq = isCache ? 2 * g.group : Hq;
        const Skv = isCache ? 8 : Math.max(g.Skv, g.Sq);
        const Sq = g.Sq;
        const qT = b.tensor('q', c.q, [B, Sq, Hqq, D]);
        let kT = null, vT = null;
        if (c.op === 'custom') { kT = b.tensor('k', c.k, [B, Skv, Hkv, D]); vT = b.tensor('v', c.v, [B, Skv, Hkv, D]); }
        if (c.op === 'step') { kT = b.tensor('k', c.k, [1, Sq, 2, 4]); vT = b.tensor('v', c.v, [1, Sq, 2, 4]); }
        const vals = scalarOpts(c, b);
        // startPos: the geometry's (valid) unless the case says otherwise
        const maxSp = Skv - Sq;
        let sp = Math.min(g.sp, Math.max(0, maxSp));
        // (attend without startPos: the last Sq rows written, cache.length - Sq; the world's caches hold 8 rows)
        const cacheLength = !cache.disposed && typeof cache.length === 'number' ? cache.length : 0;
        if (c.opts.startPos === undefined && c.op === 'attend') sp = cacheLength ? cacheLength - Sq : undefined;
        else if (c.opts.startPos !== 'geo') { sp = c.opts.startPos; b.invalid(); }
        if (maxSp < 0) b.invalid();
        let maskT = null;
        const spInt = Number.isSafeInteger(sp) && sp >= 0 && sp < 1e6 ? sp : 0;
        const N = Math.min(Skv, spInt + Sq);
        if (c.hasMask) {
          maskT = b.tensor('mask', c.mask, [Sq, N], { bool: c.maskBool });
          vals.attnMask = maskT.t;
          if (vals.isCausal === true) b.invalid('a mask and isCausal');
        }
        let outT = null;
        if (c.hasOut) { outT = b.tensor('out', c.out, [B, Sq, Hqq, D]); vals.out = outT.t; }
        if (c.op !== 'step') vals.startPos = sp; else if (c.opts.startPos !== 'geo') { /* the invalid value goes as the 4th argument */ }
        const rot = isCache ? rotaryOption(c, b, Sq, sp === undefined ? cacheLength - Sq : sp) : null;
        if (rot) vals.rotary = rot.value;
        // attention over a cache reads written rows only (without a mask)
        if (c.op === 'attend' && !c.hasMask && Number.isSafeInteger(sp) && sp >= 0 && sp + Sq > cacheLength) b.invalid('attend past cache.length');
        const opts = b.options(vals);
        const sem = semantic(vals, isCache);
        const before = cache.disposed ? null : cache.read(0, 8);
        if (c.op === 'custom') call = () => w.s.customSdpa(qT.t, kT.t, vT.t, opts);
        else if (c.op === 'attend') call = () => cache.attend(qT.t, opts);
        else call = () => cache.step(qT.t, kT.t, vT.t, sp, opts);
        check = (res) => {
          if (!qT.real || (kT && !kT.real) || (vT && !vT.real) || (maskT && !maskT.real)) return 'accepted an input the reference cannot read';
          const R = (t) => ({ data: t.real, dims: t.dims });
          const o = { startPos: sp === undefined && c.op === 'attend' ? (cacheLength ? cacheLength - Sq : 0) : sp, isCausal: sem.isCausal, scale: sem.scale };
          if (maskT) o.attnMask = R(maskT);
          // rotary: q rows (and a step's K rows) rotated at their positions, as the library must
          const qRef = rot ? rotateRows(R(qT), rot, o.startPos) : R(qT);
          const kNew = rot && kT ? rotateRows(R(kT), rot, o.startPos) : kT && R(kT);
          if (!qRef || (kT && !kNew)) return 'accepted rotary tables the reference cannot read';
          let want;
          if (c.op === 'custom') want = refCustomSdpa(qRef, R(kT), R(vT), o);
          else {
            if (!before) return 'the cache was disposed, yet the call succeeded';
            const K = before.k.data.slice(), V = before.v.data.slice();
            if (c.op === 'step') {
              K.set(kNew.data, sp * 8); V.set(vT.real, sp * 8);
              const now = cache.read(0, 8);
              const mk = closeness(now.k.data, K), mv = closeness(now.v.data, V);
              if (mk || mv) return `the cache after the step: ${mk || mv}`;
            }
            want = refCustomSdpa(qRef, { data: K, dims: [1, 8, 2, 4] }, { data: V, dims: [1, 8, 2, 4] }, o); if (env.SDPA_FUZZ_DEBUG) console.log('DBG', JSON.stringify({ o, q: Array.from(qT.real), K: Array.from(K), V: Array.from(V), got: Array.from(res.data), want: Array.from(want) }));
          }
          return compareResult(b, res, want, outT);
        };
        if (c.op !== 'custom') b.cacheOp = true;
        if (c.op === 'step') b.cacheWrites = true;
        break;
      }
      case 'update': {
        const Sn = g.Sq;
        const kT = b.tensor('k', c.k, [1, Sn, 2, 4]), vT = b.tensor('v', c.v, [1, Sn, 2, 4]);
        let sp = Math.min(g.sp, 8 - Sn);
        if (c.opts.startPos !== 'geo') { sp = c.opts.startPos; b.invalid(); }
        const rot = rotaryOption(c, b, Sn, sp);
        const opts = rot ? b.options({ rotary: rot.value }) : undefined;
        const before = cache.disposed ? null : cache.read(0, 8);
        call = () => cache.update(kT.t, vT.t, sp, opts);  // (opts undefined: the 3-argument call)
        check = () => {
          if (!kT.real || !vT.real) return 'accepted an input the reference cannot read';
          if (!before) return 'the cache was disposed, yet the call succeeded';
          const kNew = rot ? rotateRows({ data: kT.real, dims: kT.dims }, rot, sp) : { data: kT.real };
          if (!kNew) return 'accepted rotary tables the reference cannot read';
          const K = before.k.data.slice(), V = before.v.data.slice();
          // cache.read gives [B, S, Hkv, D]: rows are contiguous, 8 floats each
          K.set(kNew.data, sp * 8); V.set(vT.real, sp * 8);
          const now = cache.read(0, 8);
          return closeness(now.k.data, K) || closeness(now.v.data, V) || unchangedElse(b, null);
        };
        b.cacheOp = true;
        b.cacheWrites = true;
        break;
      }
      case 'read': {
        const start = c.opts.startPos === 'geo' ? Math.min(g.sp, 7) : c.opts.startPos;
        const len = c.k.dimMutation ? c.k.dimMutation.value : g.Sq;
        if (!(Number.isSafeInteger(start) && start >= 0 && Number.isSafeInteger(len) && len > 0 && start + len <= 8)) b.invalid();
        const before = cache.disposed ? null : cache.read(0, 8);
        call = () => cache.read(start, len);
        check = (res) => {
          if (!before) return 'the cache was disposed, yet the call succeeded';
          return closeness(res.k.data, before.k.data.subarray(start * 8, (start + len) * 8)) || closeness(res.v.data, before.v.data.subarray(start * 8, (start + len) * 8)) || unchangedElse(b, null);
        };
        break;
      }
      case 'alloc': {
        const dims = [g.B, g.Sq, g.D];
        const dimsVals = dims.slice();
        if (c.q.dimMutation && c.q.dimMutation.at < 3) { dimsVals[c.q.dimMutation.at] = c.q.dimMutation.value; b.invalid(); }
        let dimsArg = dimsVals;
        if (c.q.getter.prop === 'dimsProxy' || c.q.getter.prop === 'dimsIndex') dimsArg = b.getterTensor('dims', new Float32Array(1), dimsVals, undefined, c.q.getter, Float32Array).dims;
        const dtype = c.maskBool ? 'bool' : 'float32';
        call = () => w.s.allocTensor(dtype, dimsArg);
        check = (h) => {
          b.temps.push(h);
          const data = h.data, n = real.length(data), want = prod(dimsVals);
          let nonzero = false;
          const step = n > 1e6 ? Math.floor(n / 4096) : 1; // (a 2 GiB tensor: a sample)
          for (let i = 0; i < n && !nonzero; i += step) nonzero = data[i] !== 0;
          if (nonzero || data[n - 1] !== 0) return `allocTensor: not zero-filled`;
          if (h.dtype !== dtype || n !== want) return `allocTensor: ${h.dtype} ${n} elements, expected ${dtype} ${want}`;
          h.dispose();
          return unchangedElse(b, null);
        };
        break;
      }
      case 'createCache': {
        const vals = { maxSeqLen: g.Skv, numKvHeads: g.Hkv, headDim: g.D, ...c.cacheDtypes };
        const known = (x) => x === undefined || ['float32', 'float16', 'int8', 'int4'].includes(x);
        for (const name of ['dtype', 'keyDtype', 'valueDtype']) if (!known(c.cacheDtypes[name])) b.invalid(`${name} ${c.cacheDtypes[name]}`);
        const wantK = c.cacheDtypes.keyDtype ?? c.cacheDtypes.dtype ?? 'float32', wantV = c.cacheDtypes.valueDtype ?? c.cacheDtypes.dtype ?? 'float32';
        if (c.q.dimMutation) { vals[['maxSeqLen', 'numKvHeads', 'headDim', 'batch'][c.q.dimMutation.at]] = c.q.dimMutation.value; b.invalid(); }
        if (c.opts.unknown) b.invalid();
        const opts = b.options(vals);
        call = () => w.s.createKVCache(opts);
        check = (nc) => {
          try {
            const first = nc.read(0, Math.min(nc.maxSeqLen, 8)), last = nc.read(nc.maxSeqLen - 1, 1);
            if (b.valid && (nc.maxSeqLen !== g.Skv || nc.numKvHeads !== g.Hkv || nc.headDim !== g.D)) return 'createKVCache: wrong geometry';
            if (b.valid && (nc.keyDtype !== wantK || nc.valueDtype !== wantV || nc.dtype !== (wantK === wantV ? wantK : null))) return `createKVCache: dtypes ${nc.keyDtype}/${nc.valueDtype}, expected ${wantK}/${wantV}`;
            if (first.k.data.some((x) => x !== 0) || last.v.data.some((x) => x !== 0)) return 'createKVCache: not zero-filled';
          } finally { nc.dispose(); }
          return unchangedElse(b, null);
        };
        break;
      }
      case 'torch': case 'plan': {
        // [B, H, S, E]
        const L = g.Sq, S = g.Skv, E = g.D, Ev = c.op === 'torch' && c.opts.enableGqa === false ? g.Ev : E;
        const Hk = c.opts.enableGqa === true ? g.Hkv : 1; // (broadcast heads without enableGqa)
        const qT = b.tensor('q', c.q, [g.B, Hq, L, E]);
        const kT = b.tensor('k', c.k, [1, Hk, S, E]);
        const vT = b.tensor('v', c.v, [1, Hk, S, Ev]);
        const vals = scalarOpts(c, b, { torch: true });
        let maskT = null;
        if (c.hasMask) {
          maskT = b.tensor('mask', c.mask, [L, S], { bool: c.maskBool });
          vals.attnMask = maskT.t;
          if (vals.isCausal === true) b.invalid('a mask and isCausal');
        }
        if (Hk !== 1 && Hk !== Hq && vals.enableGqa !== true) b.invalid();
        // out is not an option of these calls: E_ARG when enumerable (a non-enumerable unknown name is not read at all)
        if (c.hasOut) { vals.out = {}; if (c.opts.shape !== 'class' && c.opts.shape !== 'nonenum') b.invalid('out is not an option here'); }
        const opts = b.options(vals);
        const sem = semantic(vals);
        if (c.op === 'torch') {
          call = () => w.s.scaledDotProductAttention(qT.t, kT.t, vT.t, opts);
          check = (res) => {
            if (!qT.real || !kT.real || !vT.real || (maskT && !maskT.real)) return 'accepted an input the reference cannot read';
            const R = (t) => ({ data: t.real, dims: t.dims });
            const o = { isCausal: sem.isCausal, scale: sem.scale };
            if (maskT) o.attnMask = R(maskT);
            const want = refTorchSdpa(R(qT), R(kT), R(vT), o);
            const m = closeness(res.data, want);
            return m ? `scaledDotProductAttention: ${m}` : unchangedElse(b, null);
          };
        } else {
          call = () => w.s.planAttention(qT.t, kT.t, vT.t, opts);
          check = (p) => {
            if (!p || (p.route !== 'custom' && p.route !== 'general') || !Array.isArray(p.reasons)) return `planAttention: ${JSON.stringify(p)}`;
            if ((p.route === 'custom') !== (p.reasons.length === 0)) return 'planAttention: route and reasons disagree';
            return unchangedElse(b, null);
          };
        }
        break;
      }
      default: throw new Error(c.op);
    }
    // Stale views of a heap tensor used both as out and as an input: aliasing.
    if (b.staleUse && b.staleUse.length > 1) {
      const o = b.staleUse.find((u) => u.role === 'out');
      if (o && b.staleUse.some((u) => u !== o && u.owner === o.owner && u.start < o.end && o.start < u.end)) b.mustFail = true;
    }
    if (b.mustFail) b.valid = false;
    // Everything that must not change on a throw.
    const snap = snapshot(b, w, other);
    b.snap = snap;
    if (watchdog) watchdog.start(`${c.op} ${JSON.stringify(c, (k, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v))}`);
    const r = (() => { try { return { ok: true, value: call() }; } catch (err) { return { ok: false, err }; } finally { if (watchdog) watchdog.stop(); } })();
    if (env.SDPA_FUZZ_DEBUG) console.log('DBG case', JSON.stringify({ op: c.op, valid: b.valid, mustFail: b.mustFail, ok: r.ok, err: r.ok ? null : describeErr(r.err) }));
    if (SURVEY) {
      count(`op ${c.op}: ${r.ok ? 'ok' : r.err instanceof SdpaError ? r.err.code : 'other throw'}`);
      if (b.valid) count(`valid: ${r.ok ? 'ok' : 'rejected'}`);
      if (b.mustFail) count(`must fail: ${r.ok ? 'ok' : 'rejected'}`);
      if (b.disposing) count('a getter disposed something');
      for (const u of b.used) count(`source ${u}`);
    }
    const problems = [...b.reentered];
    if (r.ok) {
      const argDisposed = b.temps.some((h) => h.disposed);
      if (b.mustFail) problems.push('accepted a call that breaks an aliasing rule (out or an input over a cache / another input, or a view of freed wasm memory)');
      else if (b.rejectReasons.length) problems.push(`accepted an invalid call (${b.rejectReasons.join(', ')})`);
      else if (b.disposing && !w.alive) problems.push('succeeded after a getter disposed the instance');
      else if (b.disposing && b.cacheOp && w.cache.disposed) problems.push('succeeded after a getter disposed the cache');
      else if (b.disposing && argDisposed) problems.push('succeeded after a getter disposed a heap tensor argument');
      else {
        let m;
        try { m = check(r.value); } catch (e) { m = `accepted, but the reference cannot compute this call (${describeErr(e)})`; }
        if (m) problems.push(m);
      }
    } else {
      const e = r.err;
      if (e === b.own && b.own !== null) { /* the caller's own exception */ } else if (!(e instanceof SdpaError)) {
        problems.push(`threw a non-SdpaError: ${describeErr(e)}${e && e.stack ? ` @ ${String(e.stack).split('\n')[1]?.trim()}` : ''}`);
      } else if (!ALL_CODES.includes(e.code)) problems.push(`undocumented code ${e.code}: ${e.message}`);
      else if (b.valid && !b.disposing && !b.own && e.code !== 'E_OOM' && !(e.code === 'E_DISPOSED' && (w.cache.disposed || !w.alive))) {
        problems.push(`rejected a valid call: ${e.code}: ${e.message}`);
      }
      const changed = snap.changes();
      if (changed.length) problems.push(`rejected (${describeErr(e).slice(0, 120)}) but wrote: ${changed.slice(0, 3).join('; ')}`);
    }
    return problems.length ? `${label}: ${problems.join(' | ')}` : null;
  } finally {
    for (const h of b.temps) if (!h.disposed) h.dispose();
  }
}

/** The result of an attention call: out returned and written, its real memory = want, nothing else changed. */
function compareResult(b, res, want, outT) {
  if (outT) {
    if (res !== outT.t) return 'out was not returned';
    const mem = b.outMem;
    if (mem) {
      const got = mem.heap ? plainCopy(mem.heap.data) : plainCopy(mem.a);
      const m = closeness(got, want);
      if (m) return `out's real memory: ${m}`;
    }
  } else {
    const m = closeness(res && res.data, want);
    if (m) return `result: ${m}`;
  }
  return unchangedElse(b, outT);
}

/** After a success: caller arrays and heap tensors other than out's memory unchanged. */
function unchangedElse(b, outT) {
  const changed = b.snap.changes({ exceptOut: true, exceptCache: b.cacheWrites });
  return changed.length ? `succeeded but changed what it must not: ${changed.slice(0, 3).join('; ')}` : null;
}

/** Bytes of caller arrays, heap tensors (all of the worlds'), caches; changes() lists what differs. */
function snapshot(b, w, other) {
  const items = [];
  const add = (name, get, isOut = false, isCache = false) => { const now = get(); if (now) items.push({ name, get, bytes: now, isOut, isCache }); };
  // (a view of a heap tensor's memory is watched while the heap tensor lives: freed memory is malloc's)
  b.arrays.forEach((a, i) => add(`caller array ${i}`, () => (ArrayBuffer.isView(a) ? (real.byteLength(a) ? realBytes(a) : null) : (a.owner.disposed ? null : realBytes(a.view)))));
  if (b.outMem) {
    const m = b.outMem;
    add('out', () => (m.heap ? (m.heap.disposed ? null : realBytes(m.heap.data)) : m.owner && m.owner.disposed ? null : realBytes(m.a)), true);
    if (m.staleOwner) add('the heap tensor out is a view of', () => (m.staleOwner.owner.disposed ? null : realBytes(m.staleOwner.owner.data)), true);
  }
  const heaps = new Set([...b.heaps, ...w.staleOwners]);
  if (other && other.alive) for (const h of other.staleOwners) heaps.add(h);
  if (b.outMem && b.outMem.staleOwner) heaps.delete(b.outMem.staleOwner.owner); // (out's memory: watched as out)
  for (const h of heaps) add(`heap tensor [${h.dims}]`, () => (h.disposed ? null : realBytes(h.data)), false);
  for (const [i, x] of [w, other].entries()) {
    if (!x || !x.alive || x.cache.disposed) continue;
    const c = x.cache;
    add(`cache ${i}`, () => { if (c.disposed) return null; const r = c.read(0, 8); const u = new Uint8Array(r.k.data.length * 8); u.set(new Uint8Array(r.k.data.buffer)); u.set(new Uint8Array(r.v.data.buffer), r.k.data.length * 4); return u; }, false, x === w);
  }
  return {
    changes({ exceptOut = false, exceptCache = false } = {}) {
      const bad = [];
      for (const it of items) {
        if ((exceptOut && it.isOut) || (exceptCache && it.isCache)) continue;
        const now = it.get();
        if (now === null) continue; // disposed meanwhile
        if (now.length !== it.bytes.length) { bad.push(`${it.name}: length`); continue; }
        for (let i = 0; i < now.length; i++) if (now[i] !== it.bytes[i]) { bad.push(`${it.name} byte ${i}`); break; }
      }
      return bad;
    },
  };
}

// ---------------------------------------------------------------------------

test.before(() => { watchdog = startWatchdog('fuzz', HANG_MS); });
test.after(() => {
  if (watchdog) watchdog.end();
  for (const s of made) s.dispose();
});

// SDPA_FUZZ_REPLAY=file: runs the cases logged in that file (SDPA_FUZZ_LOG format, one per line) in order, on fresh worlds.
if (env.SDPA_FUZZ_REPLAY) {
  test('fuzz replay', async () => {
    const { readFileSync } = await import('node:fs');
    const lines = readFileSync(env.SDPA_FUZZ_REPLAY, 'utf8').split('\n').filter(Boolean);
    const revive = (k, v) => (v === 'NaN' ? NaN : v === 'Infinity' ? Infinity : v === '-Infinity' ? -Infinity : v);
    for (const line of lines) {
      const c = JSON.parse(line.slice(line.indexOf(' ') + 1), revive);
      console.log(`replay ${line.slice(0, line.indexOf(' '))}: ${c.op} threads ${c.threads}`);
      const msg = await runCase(c);
      console.log(`  -> ${msg ?? 'ok'}`);
      await new Promise((r) => setTimeout(r, 50)); // (a worker's trap is reported asynchronously)
    }
  });
}

test(`fuzz: hostile arguments give the reference answer or a typed error, and a rejected call writes nothing (seed ${SEED}, up to ${RUNS} runs)`, async () => {
  const tally = new Map();
  let runs = 0;
  // A trap in a worker thread reaches the main thread as an uncaught exception, after the call
  // that caused it returned: it fails the run in progress (the last cases are printed).
  const recent = [];
  let crash = null;
  const onCrash = (err) => {
    crash = crash || err;
    console.log(`fuzz: uncaught ${describeErr(err)} (a wasm trap in a worker thread?) during run ${runs}; the last cases on 2 threads:`);
    for (const x of recent.filter((r) => r.c.threads === 2).slice(-6)) console.log(`  run ${x.n}: ${JSON.stringify(x.c, (k, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v))}`);
  };
  process.on('uncaughtException', onCrash);
  let firstFailure = null;
  const t0 = Date.now();
  const prop = fc.asyncProperty(caseArb, async (c) => {
    runs++;
    if (env.SDPA_FUZZ_MEM && runs % 2000 === 0) console.log(`fuzz: run ${runs}, rss ${(process.memoryUsage().rss / MiB).toFixed(0)} MiB, instances ${made.size}`);
    if (LOG) appendFileSync(LOG, `${runs} ${JSON.stringify(c, (k, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v))}\n`);
    recent.push({ n: runs, c });
    if (recent.length > 40) recent.shift();
    let msg;
    try { msg = await runCase(c); } catch (e) { msg = `${c.op}: the fuzzer itself threw (a library error escaping a setup step?): ${describeErr(e)}${e && e.stack ? ` @ ${String(e.stack).split('\n').slice(1, 3).join(' ').trim()}` : ''}`; }
    await null;
    if (crash && !msg) msg = `an uncaught exception from a worker thread: ${describeErr(crash)}`;
    if (crash && SURVEY) { firstFailure = { msg, c }; return false; } // (the instance is broken: stop)
    if (msg === null) return true;
    if (SURVEY) {
      const kind = msg.replace(/-?\d+(\.\d+)?(e[+-]?\d+)?/g, '#').slice(0, 160);
      const e = tally.get(kind) || { n: 0, example: msg, c };
      e.n++;
      tally.set(kind, e);
      return true;
    }
    firstFailure = { msg, c };
    return false;
  });
  const params = { seed: SEED, numRuns: RUNS, endOnFailure: true, verbose: 0 };
  if (TIME_MS > 0) params.interruptAfterTimeLimit = TIME_MS;
  let out;
  try { out = await fc.check(prop, params); } finally { process.off('uncaughtException', onCrash); }
  const secs = ((Date.now() - t0) / 1000).toFixed(1);
  console.log(`fuzz: seed ${SEED}, ${runs} runs in ${secs} s (asked: ${RUNS} runs${TIME_MS > 0 ? `, at most ${TIME_MS} ms` : ''})${out.interrupted ? ', stopped by the time limit' : ''}`);
  if (SURVEY) {
    console.log([...stats.entries()].sort().map(([k, n]) => `  ${k}: ${n}`).join('\n'));
    const rows = [...tally.entries()].sort((a, b) => b[1].n - a[1].n);
    console.log(`fuzz survey: ${rows.length} kinds of failure`);
    for (const [, e] of rows) console.log(`  ${String(e.n).padStart(5)} x ${e.example.slice(0, 400)}\n          case: ${JSON.stringify(e.c, (k, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v)).slice(0, 4000)}`);
    if (crash) console.log(`fuzz survey stopped by: ${firstFailure && firstFailure.msg}`);
    assert.ok(rows.length === 0 && !crash, `${rows.length} kinds of failure (see the survey above)${crash ? ', and a crash' : ''}`);
    return;
  }
  if (out.failed) {
    const c = firstFailure ? firstFailure.c : out.counterexample && out.counterexample[0];
    assert.unreachable(`fuzz failure after ${out.numRuns} runs (seed ${SEED}, path ${out.counterexamplePath}): ${firstFailure ? firstFailure.msg : out.error}\n  case: ${JSON.stringify(c, (k, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v))}\n  reproduce: SDPA_FUZZ_SEED=${SEED} SDPA_FUZZ_RUNS=${out.numRuns} node scripts/run-uvu.mjs tests/js fuzz`);
  }
  assert.ok(runs > 0, 'ran');
});

test.run();
