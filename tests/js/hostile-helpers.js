// hostile-helpers.js: tools shared by hostile.test.js and the fuzzers (fuzz.test.js, llama-fuzz.test.js)
// (hostile arguments: CONTRACT.md section 2, the snapshot rule).
//
// - The real properties of a typed array, read through the built-in
//   %TypedArray%.prototype getters (a subclass or an own property cannot lie to them).
// - Lying typed arrays, counting getters, Proxies.
// - A Watch: snapshots of every byte the library must not write on a
//   rejected call (caller arrays, every row of every cache, every heap tensor).
// - Outcome checks: "the reference answer, or an SdpaError with a documented code".
import * as assert from 'uvu/assert';
import { SdpaError } from '../../js/index.js';
import { Worker } from 'node:worker_threads';

// ---------------------------------------------------------------------------
// Real typed-array properties

const TA = Object.getPrototypeOf(Int8Array.prototype);
const getter = (name) => Object.getOwnPropertyDescriptor(TA, name).get;
const G = {
  length: getter('length'),
  buffer: getter('buffer'),
  byteOffset: getter('byteOffset'),
  byteLength: getter('byteLength'),
  tag: Object.getOwnPropertyDescriptor(TA, Symbol.toStringTag).get,
};
const taSet = TA.set;
export const real = {
  length: (a) => G.length.call(a),
  buffer: (a) => G.buffer.call(a),
  byteOffset: (a) => G.byteOffset.call(a),
  byteLength: (a) => G.byteLength.call(a),
  tag: (a) => G.tag.call(a),
};

/** A copy of the bytes a typed array really covers. */
export function realBytes(a) {
  return new Uint8Array(real.buffer(a), real.byteOffset(a), real.byteLength(a)).slice();
}

/** A plain Float32Array / Uint8Array with a typed array's real contents. */
export function plainCopy(a) {
  const tag = real.tag(a);
  const C = tag === 'Uint8Array' ? Uint8Array : tag === 'Float32Array' ? Float32Array : null;
  if (!C) throw new Error(`plainCopy: ${tag}`);
  const c = new C(real.length(a));
  taSet.call(c, new C(real.buffer(a), real.byteOffset(a), real.length(a)));
  return c;
}

export const ALL_CODES = Object.freeze([
  'E_ARG', 'E_RANK', 'E_DIMS', 'E_DTYPE', 'E_BATCH', 'E_HEADS', 'E_HEAD_DIM', 'E_KV_LEN',
  'E_START_POS', 'E_CAPACITY', 'E_MASK_DTYPE', 'E_MASK_SHAPE', 'E_MASK_CAUSAL', 'E_DROPOUT',
  'E_SCALE', 'E_DISPOSED', 'E_OOM',
]);

// ---------------------------------------------------------------------------
// Lying typed arrays

/**
 * A subclass instance sharing `a`'s memory whose `length`, `buffer`,
 * `byteOffset`, `byteLength` or `Symbol.toStringTag` say what `lies` says
 * (values, or functions called with the real array). `how`: 'subclass'
 * (getters on the subclass prototype) or 'own' (own properties of an
 * instance of the plain class). Reads are counted in `.reads`.
 */
export function liar(a, lies, how = 'subclass') {
  const tag = real.tag(a);
  const Base = tag === 'Uint8Array' ? Uint8Array : Float32Array;
  const reads = {};
  const val = (k, self) => {
    reads[k] = (reads[k] || 0) + 1;
    const l = lies[k];
    return typeof l === 'function' ? l(self) : l;
  };
  const keys = Object.keys(lies);
  if (lies[Symbol.toStringTag] !== undefined) keys.push(Symbol.toStringTag);
  let obj;
  if (how === 'subclass') {
    class Liar extends Base {}
    for (const k of keys) Object.defineProperty(Liar.prototype, k, { get() { return val(k, this); }, configurable: true });
    obj = new Liar(real.buffer(a), real.byteOffset(a), real.length(a));
  } else {
    obj = new Base(real.buffer(a), real.byteOffset(a), real.length(a));
    for (const k of keys) Object.defineProperty(obj, k, { get() { return val(k, this); }, configurable: true, enumerable: false });
  }
  return { arr: obj, reads };
}

// ---------------------------------------------------------------------------
// Counting getters

/**
 * A tensor object whose data/dims/dtype are getters that count reads and
 * run `hooks[name](readNumber)` first (side effects: dispose, re-entrant calls).
 * `values[name]` may be a function of the read number (a getter that lies on
 * the second read).
 */
export function countingTensor(values, hooks = {}) {
  const reads = { data: 0, dims: 0, dtype: 0 };
  const t = {};
  for (const k of ['data', 'dims', 'dtype']) {
    if (!(k in values)) continue;
    Object.defineProperty(t, k, {
      enumerable: true,
      get() {
        const n = ++reads[k];
        if (hooks[k]) hooks[k](n);
        const v = values[k];
        return typeof v === 'function' ? v(n) : v;
      },
    });
  }
  return { t, reads };
}

/** A Proxy over a dims array that counts reads of each string key. */
export function countingDims(dims, hook) {
  const reads = {};
  const p = new Proxy(dims.slice(), {
    get(target, key, recv) {
      if (typeof key === 'string') {
        reads[key] = (reads[key] || 0) + 1;
        if (hook) hook(key, reads[key]);
      }
      return Reflect.get(target, key, recv);
    },
  });
  return { dims: p, reads };
}

// ---------------------------------------------------------------------------
// What must not change on a rejected call

/**
 * A snapshot of `arrays` (typed arrays, by their real bytes), every row of
 * every live `caches` and every live `heaps` tensor. `check(label)` asserts
 * that nothing changed (objects disposed meanwhile are skipped: their memory
 * is no longer theirs).
 */
export function watch({ arrays = [], caches = [], heaps = [] }) {
  const a = arrays.map((x) => ({ x, bytes: realBytes(x) }));
  const c = caches.filter((x) => !x.disposed).map((x) => {
    const r = x.read(0, x.maxSeqLen);
    return { x, k: new Uint8Array(r.k.data.buffer).slice(), v: new Uint8Array(r.v.data.buffer).slice() };
  });
  const h = heaps.filter((x) => !x.disposed).map((x) => ({ x, bytes: realBytes(x.data) }));
  return {
    changes() {
      const bad = [];
      a.forEach(({ x, bytes }, i) => { const d = firstDiff(realBytes(x), bytes); if (d >= 0) bad.push(`array ${i} byte ${d}`); });
      c.forEach(({ x, k, v }, i) => {
        if (x.disposed) return;
        const r = x.read(0, x.maxSeqLen);
        const dk = firstDiff(new Uint8Array(r.k.data.buffer), k), dv = firstDiff(new Uint8Array(r.v.data.buffer), v);
        if (dk >= 0) bad.push(`cache ${i} keys byte ${dk}`);
        if (dv >= 0) bad.push(`cache ${i} values byte ${dv}`);
      });
      h.forEach(({ x, bytes }, i) => {
        if (x.disposed) return;
        const d = firstDiff(realBytes(x.data), bytes);
        if (d >= 0) bad.push(`heap tensor ${i} (${x.dtype} [${x.dims}]) byte ${d}`);
      });
      return bad;
    },
    check(label) {
      const bad = this.changes();
      assert.ok(bad.length === 0, `${label}: written although the call was rejected: ${bad.slice(0, 4).join('; ')}`);
    },
  };
}

function firstDiff(x, y) {
  if (x.length !== y.length) return Math.min(x.length, y.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return i;
  return -1;
}

// ---------------------------------------------------------------------------
// Outcomes

/** Runs fn: { ok: true, value } or { ok: false, err }. */
export function attempt(fn) {
  try { return { ok: true, value: fn() }; } catch (err) { return { ok: false, err }; }
}

/** A one-line description of a thrown value. */
export function describeErr(e) {
  if (e instanceof SdpaError) return `SdpaError ${e.code}: ${e.message}`;
  if (e instanceof Error) return `${e.constructor.name}: ${e.message}`;
  return `non-Error ${String(e)}`;
}

/** Asserts that fn throws an SdpaError of `code` (or one of `code`s); returns it. */
export function expectCode(fn, code, label, names = []) {
  const r = attempt(fn);
  const codes = [].concat(code);
  if (r.ok) assert.unreachable(`${label}: expected ${codes.join(' or ')}, the call succeeded`);
  assert.ok(r.err instanceof SdpaError, `${label}: expected SdpaError ${codes.join('/')}, got ${describeErr(r.err)}`);
  assert.ok(codes.includes(r.err.code), `${label}: expected ${codes.join(' or ')}, got ${describeErr(r.err)}`);
  for (const re of names) assert.ok(re.test(r.err.message), `${label}: message should match ${re}: ${r.err.message}`);
  return r.err;
}

/** Worst |got - ref| against the tolerance 1e-5 (1 + max|ref|): null when close, else a message. */
export function closeness(got, ref) {
  if (!got || typeof got.length !== 'number') return 'no result array';
  if (got.length !== ref.length) return `length ${got.length}, expected ${ref.length}`;
  let maxRef = 0;
  for (let i = 0; i < ref.length; i++) maxRef = Math.max(maxRef, Math.abs(ref[i]));
  const tol = 1e-5 * (1 + maxRef);
  for (let i = 0; i < ref.length; i++) {
    const e = Math.abs(got[i] - ref[i]);
    if (!(e <= tol)) return `|got - ref| = ${e} > ${tol} at [${i}] (got ${got[i]}, ref ${ref[i]})`;
  }
  return null;
}

export function assertCloseTo(got, ref, label) {
  const m = closeness(got, ref);
  assert.ok(m === null, `${label}: ${m}`);
}

// ---------------------------------------------------------------------------
// A view over a cache's storage, made with the public API only

/**
 * Makes a cache of `geo` (numKvHeads >= 1, headDim 4, maxSeqLen >= 2) whose
 * storage lies where a freed heap tensor was, and returns { cache, view, at,
 * restore }: `view` is that tensor's old view, covering the cache's values from
 * element `at` (head 0, rows 0 and 1: -1000.. and -2000..; keys are the same
 * rows not negated, other heads +100 each; values are searched because a
 * float32 page's K block is key-transposed while V stays in rows). `restore()` writes rows 0 and 1 again. Tries a few block
 * sizes (malloc, or the cache's page arena, reuses the freed block); null if none works.
 */
export function cacheOverFreedTensor(s, geo) {
  const H = geo.numKvHeads;
  const rowOf = (base, sign = 1) => ({ data: Float32Array.from({ length: 4 * H }, (_, i) => sign * (base + (i >> 2) * 100 + (i & 3))), dims: [1, 1, H, 4] });
  // the V rows of head 0 (rows 0 and 1): a float32 page keeps V as rows (its K block is key-transposed, include/sdpa.h)
  const pattern = [-1000, -1001, -1002, -1003, -2000, -2001, -2002, -2003];
  for (const floats of [1024, 65536, 1 << 20, 1 << 22]) {
    const t = s.allocTensor('float32', [floats]);
    const view = t.data;
    t.dispose();
    const cache = s.createKVCache(geo);
    const restore = () => { cache.update(rowOf(1000), rowOf(1000, -1), 0); cache.update(rowOf(2000), rowOf(2000, -1), 1); };
    restore();
    let at = -1;
    for (let i = 0; i + 8 <= view.length && at < 0; i++) {
      if (view[i] === -1000 && pattern.every((x, j) => view[i + j] === x)) at = i;
    }
    if (at >= 0) return { cache, view, at, restore };
    cache.dispose();
  }
  return null;
}

/**
 * A hang watchdog for fuzzers: start(case) stores Date.now() in shared memory before a call
 * (stop() clears it); a worker thread checks it every 500 ms and, when a call has run longer
 * than hangMs, writes `label: HANG ... the case` straight to stdout (the main thread is
 * blocked) and kills the process.
 */
export function startWatchdog(label, hangMs) {
  const beat = new Float64Array(new SharedArrayBuffer(8));
  const code = `
    const { workerData, parentPort } = require('node:worker_threads');
    const beat = new Float64Array(workerData.sab);
    let current = '';
    parentPort.on('message', (m) => { current = m; });
    setInterval(() => {
      const t = beat[0];
      if (t && Date.now() - t > workerData.hangMs) {
        require('node:fs').writeSync(1, workerData.label + ': HANG, a call did not return within ' + workerData.hangMs + ' ms; the case: ' + current + '\\n');
        process.kill(process.pid, 'SIGKILL');
      }
    }, 500).unref();
  `;
  const w = new Worker(code, { eval: true, workerData: { sab: beat.buffer, hangMs, label } });
  w.unref();
  return { start(c) { w.postMessage(c); beat[0] = Date.now(); }, stop() { beat[0] = 0; }, end() { return w.terminate(); } };
}

