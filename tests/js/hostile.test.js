// hostile.test.js: regressions for "Hostile JavaScript can reach
// wasm memory". The promise: no input from JS makes the C code read or write
// out of bounds; a rejected call writes nothing; the answer is the float64
// reference's (within 1e-5 (1 + max|ref|)) or a typed SdpaError with the
// documented code. One or more tests per class of defect:
//   1 size arithmetic that wraps on wasm32     5 torch reads data again after validating it
//   2 typed-array properties are trusted       6 options silently ignored
//   3 user code runs after validation          7 numeric edges (C side)
//   4 views made before memory growth          8 detached buffers
// plus what was found while writing them (N: ...).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { rng, randTensor } from './helpers.js';
import { refCustomSdpa, refTorchSdpa } from './reference.js';
import {
  real, realBytes, plainCopy, liar, countingTensor, countingDims, watch, attempt, describeErr,
  expectCode, assertCloseTo, cacheOverFreedTensor,
} from './hostile-helpers.js';

const MiB = 1024 * 1024;
let s1, s2; // threads: 1 and threads: 2 (both the simd-threads build in Node)
const extra = []; // instances made by tests (disposed in test.after even when a test failed)
async function fresh(opts = { threads: 1 }) {
  const s = await createSdpa(opts);
  extra.push(s);
  return s;
}

test.before(async () => {
  s1 = await createSdpa({ threads: 1 });
  s2 = await createSdpa({ threads: 2 });
});
test.after(() => {
  for (const s of extra) s.dispose();
  s1.dispose();
  s2.dispose();
});

// customSdpa geometry: B=1 Sq=2 Hq=2 Skv=4 Hkv=1 D=4
const rand = rng(808);
const Q0 = randTensor(rand, [1, 2, 2, 4]);
const K0 = randTensor(rand, [1, 4, 1, 4]);
const V0 = randTensor(rand, [1, 4, 1, 4]);
const copy = (t) => ({ data: t.data.slice(), dims: t.dims.slice() });
const q = () => copy(Q0), k = () => copy(K0), v = () => copy(V0);
const REF = refCustomSdpa(Q0, K0, V0);
const REF_CAUSAL = refCustomSdpa(Q0, K0, V0, { isCausal: true });
const ref = (qq, kk, vv, o) => refCustomSdpa(qq, kk, vv, o);
/** A plain out [1, 2, 2, 4] filled with 7. */
const sentinelOut = () => ({ data: new Float32Array(16).fill(7), dims: [1, 2, 2, 4] });

/** A cache (maxSeqLen 8, Hkv 1, D 4) with rows 0..3 = K0, V0. */
function filledCache(s) {
  const c = s.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 4 });
  c.update(K0, V0, 0);
  return c;
}
/** The reference of cache.attend(q, opts) over a cache filled by filledCache (+ rows written later). */
const cacheRef = (c, qq, o) => {
  const r = c.read(0, 8);
  return refCustomSdpa(qq, r.k, r.v, o);
};

/** fn must throw exactly `err` (the caller's own exception, unchanged). */
function expectOwn(fn, err, label) {
  const r = attempt(fn);
  if (r.ok) assert.unreachable(`${label}: expected the getter's own exception, the call succeeded`);
  assert.ok(r.err === err, `${label}: expected the getter's own exception unchanged, got ${describeErr(r.err)}`);
}

/** fn must return a tensor whose data is close to `want`; returns it. */
function expectRef(fn, want, label) {
  const r = attempt(fn);
  if (!r.ok) assert.unreachable(`${label}: expected the reference answer, got ${describeErr(r.err)}`);
  assertCloseTo(r.value.data, want, label);
  return r.value;
}

// ===========================================================================
// 1. Size arithmetic that wraps on wasm32

test('1: 8 threads and head dim 2^23: E_OOM or the reference answer, and a heap tensor allocated afterwards is not overwritten', async () => {
  const s8 = await fresh({ threads: 8 });
  try {
    assert.is(s8.info.threads, 8);
    const D = 1 << 23, dims = [1, 1, 1, D];
    const r2 = rng(1);
    const hq = s8.allocTensor('float32', dims), hk = s8.allocTensor('float32', dims);
    const hv = s8.allocTensor('float32', dims), ho = s8.allocTensor('float32', dims);
    hq.data.fill(1e-3); hk.data.fill(1e-3);
    const vd = hv.data;
    for (let i = 0; i < D; i++) vd[i] = r2() * 2 - 1;
    // One key: the answer is v itself.
    const want = refCustomSdpa({ data: hq.data, dims }, { data: hk.data, dims }, { data: Float32Array.from(hv.data), dims });
    const call = (label, fn) => {
      ho.data.fill(NaN); // (a call that returns without writing must not pass on the previous answer)
      const r = attempt(fn);
      if (r.ok) assertCloseTo(ho.data, want, label);
      else assert.ok(r.err instanceof SdpaError && r.err.code === 'E_OOM', `${label}: expected E_OOM or the answer, got ${describeErr(r.err)}`);
    };
    call('first call', () => s8.customSdpa(hq, hk, hv, { out: ho }));
    // A tensor allocated after the first call (after the scratch was reserved) ...
    const after = s8.allocTensor('float32', [64 * MiB]);
    after.data.fill(3);
    call('second call', () => s8.customSdpa(hq, hk, hv, { out: ho }));
    call('plain tensors', () => { const r = s8.customSdpa({ data: Float32Array.from(hq.data), dims }, hk, hv); ho.data.set(r.data); return r; });
    // ... must not be written by the kernel's scratch of a wrapped size.
    const a = after.data;
    let bad = 0, first = -1;
    for (let i = 0; i < a.length; i++) if (a[i] !== 3) { bad++; if (first < 0) first = i; }
    assert.is(bad, 0, `a heap tensor allocated after the first call was overwritten (${bad} elements, first at ${first})`);
  } finally { s8.dispose(); }
});

test('1: boundary and huge dims, products beyond 2^32 and 2^53, cache sizes whose byte count wraps: typed errors, no trap', () => {
  const s = s1;
  const cache = filledCache(s);
  const hout = s.allocTensor('float32', [1, 2, 2, 4]);
  hout.data.fill(9);
  const out = sentinelOut();
  const w = watch({ arrays: [out.data], caches: [cache], heaps: [hout] });
  const t4 = (dims, n = 4) => ({ data: new Float32Array(n), dims });
  const cases = [
    ['allocTensor [2^31-1]', () => s.allocTensor('float32', [2 ** 31 - 1]), 'E_OOM'],
    ['allocTensor [2^30] (4 GiB: wraps to 0)', () => s.allocTensor('float32', [2 ** 30]), 'E_OOM'],
    ['allocTensor [2^30 + 4] (wraps to 16 bytes)', () => s.allocTensor('float32', [2 ** 30 + 4]), 'E_OOM'],
    ['allocTensor bool [2^32 + 16]', () => s.allocTensor('bool', [2 ** 32 + 16]), 'E_DIMS'], // (a dim above 2^31 - 1)
    ['allocTensor [2^16, 2^16] (product 2^32)', () => s.allocTensor('float32', [2 ** 16, 2 ** 16]), 'E_OOM'],
    ['allocTensor [2^16, 2^16 + 1] bool (product wraps to 2^16)', () => s.allocTensor('bool', [2 ** 16, 2 ** 16 + 1]), 'E_OOM'],
    ['allocTensor [2^27, 2^27] (product 2^54)', () => s.allocTensor('float32', [2 ** 27, 2 ** 27]), 'E_OOM'],
    ['allocTensor [3, 2^52 + 1] (product not exact in a double)', () => s.allocTensor('float32', [3, 2 ** 52 + 1]), 'E_DIMS'],
    ['allocTensor [2^31] (above int32)', () => s.allocTensor('bool', [2 ** 31]), 'E_DIMS'],
    ['allocTensor with 17 dims', () => s.allocTensor('float32', new Array(17).fill(1)), 'E_RANK'],
    ['allocTensor [2^53]', () => s.allocTensor('float32', [2 ** 53]), 'E_DIMS'],
    ['allocTensor [1e300]', () => s.allocTensor('float32', [1e300]), 'E_DIMS'],
    ['allocTensor [Infinity]', () => s.allocTensor('float32', [Infinity]), 'E_DIMS'],
    ['createKVCache maxSeqLen 2^53', () => s.createKVCache({ maxSeqLen: 2 ** 53, numKvHeads: 1, headDim: 1 }), 'E_DIMS'],
    ['query dim 2^32 + 1 (int32 1), 4 elements', () => s.customSdpa(t4([2 ** 32 + 1, 1, 1, 4]), t4([1, 1, 1, 4]), t4([1, 1, 1, 4])), 'E_DIMS'],
    ['query heads 2^32 + 2, key heads 2', () => s.customSdpa(t4([1, 1, 2 ** 32 + 2, 2]), t4([1, 1, 2, 2]), t4([1, 1, 2, 2])), 'E_DIMS'],
    ['key length 2^31 (int32 negative)', () => s.customSdpa(t4([1, 1, 1, 4]), t4([1, 2 ** 31, 1, 4]), t4([1, 2 ** 31, 1, 4])), 'E_DIMS'],
    ['dims whose product is 2^64', () => s.customSdpa(t4([2 ** 16, 2 ** 16, 2 ** 16, 2 ** 16]), k(), v()), 'E_DIMS'],
    ['out dims wrapping to the query dims', () => s.customSdpa(q(), k(), v(), { out: { data: out.data, dims: [1, 2 ** 32 + 2, 2, 4] } }), 'E_DIMS'],
    ['mask [2, 2^32 + 4] (int32 4)', () => s.customSdpa(q(), k(), v(), { attnMask: { data: new Float32Array(8), dims: [2, 2 ** 32 + 4] }, out }), 'E_DIMS'],
    ['startPos 2^32 - 1 (int32 -1) without a mask', () => s.customSdpa(q(), k(), v(), { startPos: 2 ** 32 - 1, out }), 'E_START_POS'],
    ['startPos 2^53 - 1 without a mask', () => s.customSdpa(q(), k(), v(), { startPos: 2 ** 53 - 1, out }), 'E_START_POS'],
    ['startPos 2^53', () => s.customSdpa(q(), k(), v(), { startPos: 2 ** 53, out }), 'E_START_POS'],
    ['update at 2^32 (low word 0)', () => cache.update(K0, V0, 2 ** 32), ['E_CAPACITY', 'E_START_POS', 'E_DIMS']],
    ['update at 2^32 - 1', () => cache.update(K0, V0, 2 ** 32 - 1), ['E_CAPACITY', 'E_START_POS', 'E_DIMS']],
    ['update at 2^53 - 1', () => cache.update(K0, V0, 2 ** 53 - 1), ['E_CAPACITY', 'E_START_POS', 'E_DIMS']],
    ['step at 2^32', () => cache.step(t4([1, 1, 2, 4], 8), t4([1, 1, 1, 4]), t4([1, 1, 1, 4]), 2 ** 32, { out: hout }), 'E_DIMS'],
    ['step at 2^32 (row counts agree)', () => cache.step(t4([1, 4, 2, 4], 32), K0, V0, 2 ** 32), ['E_CAPACITY', 'E_START_POS', 'E_DIMS']],
    ['attend at 2^32 without a mask', () => cache.attend(t4([1, 2, 2, 4], 16), { startPos: 2 ** 32, out: hout }), ['E_DIMS', 'E_START_POS']],
    ['attend at 2^32 - 2 without a mask', () => cache.attend(t4([1, 2, 2, 4], 16), { startPos: 2 ** 32 - 2 }), 'E_START_POS'],
    ['read at 2^32', () => cache.read(2 ** 32, 1), ['E_CAPACITY', 'E_START_POS', 'E_DIMS']],
    ['read 2^32 + 1 rows', () => cache.read(0, 2 ** 32 + 1), ['E_CAPACITY', 'E_START_POS', 'E_DIMS']],
    ['read 2 rows at 2^32 - 1', () => cache.read(2 ** 32 - 1, 2), ['E_CAPACITY', 'E_START_POS', 'E_DIMS']],
    ['read 2^53 rows', () => cache.read(0, 2 ** 53), ['E_DIMS', 'E_CAPACITY']],
    ['torch query E = 2^32 + 4 (int32 4)', () => s.scaledDotProductAttention(t4([1, 1, 1, 2 ** 32 + 4]), t4([1, 1, 1, 4]), t4([1, 1, 1, 4])), 'E_DIMS'],
    ['torch key length 2^32 + 1', () => s.scaledDotProductAttention(t4([1, 1, 1, 4]), t4([1, 1, 2 ** 32 + 1, 4]), t4([1, 1, 2 ** 32 + 1, 4])), 'E_DIMS'],
    ['plan mask [2^32 + 1, 1]', () => s.planAttention(t4([1, 1, 1, 4]), t4([1, 1, 1, 4]), t4([1, 1, 1, 4]), { attnMask: { data: new Float32Array(1), dims: [2 ** 32 + 1, 1] } }), 'E_DIMS'],
  ];
  for (const [label, fn, code] of cases) {
    expectCode(fn, code, label);
    w.check(label);
  }
  // Cache sizes whose byte count wraps (or passes 2^53): E_OOM / E_DIMS, or (a paged cache pays for
  // the rows it holds) a cache that works at both ends.
  const bigCaches = [
    // [label, geometry, the outcomes the contract allows: 'ok' (a cache), or a code]
    ['createKVCache 4 GiB per tensor (wraps to 0)', { maxSeqLen: 2 ** 20, numKvHeads: 2 ** 10, headDim: 1 }, ['ok']],  // a 64 MiB page table
    ['createKVCache byte count wraps to 16', { maxSeqLen: 2 ** 30 + 1, numKvHeads: 4, headDim: 1 }, ['ok', 'E_OOM']],  // a 256 MiB table: the heap may refuse
    ['createKVCache batch 2^31 (not an int32)', { batch: 2 ** 31, maxSeqLen: 2, numKvHeads: 1, headDim: 1 }, ['E_DIMS']],
    ['createKVCache headDim 2^32 + 1 (int32 1)', { maxSeqLen: 1, numKvHeads: 1, headDim: 2 ** 32 + 1 }, ['E_DIMS']],
    ['createKVCache maxSeqLen 2^31 - 1', { maxSeqLen: 2 ** 31 - 1, numKvHeads: 1, headDim: 1 }, ['E_DIMS']],  // above the key index limit
    ['createKVCache product beyond 2^53', { batch: 2 ** 20, maxSeqLen: 2 ** 20, numKvHeads: 2 ** 20, headDim: 2 ** 20 }, ['E_OOM']],  // the table cannot be one allocation
    ['createKVCache window 2^31 - 1', { numKvHeads: 1, headDim: 1, window: 2 ** 31 - 1 }, ['E_DIMS']],
    ['createKVCache window near the limit', { numKvHeads: 1, headDim: 1, window: 2 ** 31 - 65537, sinkTokens: 2 ** 31 - 65537 }, ['ok', 'E_OOM']],  // no ring: a 128 MiB table
  ];
  for (const [label, geo, allowed] of bigCaches) {
    const r = attempt(() => s.createKVCache(geo));
    const got = r.ok ? 'ok' : r.err instanceof SdpaError ? r.err.code : describeErr(r.err);
    assert.ok(allowed.includes(got), `${label}: expected ${allowed.join(' or ')}, got ${r.ok ? 'a cache' : describeErr(r.err)}`);
    if (r.ok) {
      const c = r.value, H = c.numKvHeads, D = c.headDim, B = c.batch, n = B * H * D;
      assert.is(c.maxSeqLen, geo.maxSeqLen ?? 2 ** 31 - 65537, `${label}: maxSeqLen`);
      if (n <= 4096) {
        const kk = { data: Float32Array.from({ length: n }, (_, i) => i + 1), dims: [B, 1, H, D] };
        const wrote = attempt(() => c.update(kk, kk, 0));
        assert.ok(wrote.ok || (wrote.err instanceof SdpaError && wrote.err.code === 'E_OOM'), `${label}: update row 0: ${wrote.ok || describeErr(wrote.err)}`);
        if (wrote.ok) assertCloseTo(c.read(0, 1).k.data, kk.data, `${label}: row 0 read back`);
        const end = attempt(() => c.read(geo.maxSeqLen - 1, 1));
        assert.ok(end.ok ? end.value.k.data.every((x) => x === 0) : end.err instanceof SdpaError, `${label}: the last row: ${end.ok ? 'not zeros' : describeErr(end.err)}`);
      }
      c.dispose();
    }
    w.check(label);
  }
  // With a mask startPos has no effect: a huge one gives the answer.
  const mask = { data: new Float32Array(8).map((_, i) => (i % 3) * 0.25), dims: [2, 4] };
  expectRef(() => s.customSdpa(q(), k(), v(), { startPos: 2 ** 53 - 1, attnMask: mask }), ref(Q0, K0, V0, { attnMask: mask }), 'startPos 2^53 - 1 with a mask');
  expectRef(() => s.customSdpa(q(), k(), v(), { startPos: 2 ** 32 - 1, attnMask: mask }), ref(Q0, K0, V0, { attnMask: mask }), 'startPos 2^32 - 1 with a mask');
  const cmask = { data: new Float32Array(8).fill(0.5), dims: [2, 4] };
  expectRef(() => cache.attend(q(), { startPos: 2 ** 32, attnMask: cmask }), cacheRef(cache, Q0, { attnMask: cmask }), 'attend at 2^32 with a mask');
  cache.dispose(); hout.dispose();
});

test('1 (N): cache maxSeqLen at and above 2^31 - 1: JS and C agree on it, and attending its unwritten rows does not trap', () => {
  const s = s1;
  const failures = [];
  const row = (x) => ({ data: new Float32Array(4).fill(x), dims: [1, 1, 1, 4] });
  for (const maxSeqLen of [2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32 + 1, 2 ** 32 + 8, 2 ** 40 + 3]) {
    const label = `maxSeqLen ${maxSeqLen}`;
    const r = attempt(() => s.createKVCache({ maxSeqLen, numKvHeads: 1, headDim: 4 }));
    if (!r.ok) {
      if (!(r.err instanceof SdpaError) || !['E_DIMS', 'E_OOM'].includes(r.err.code)) failures.push(`${label}: ${describeErr(r.err)}`);
      // the message names the value given, not its int32 wrap
      else if (/-\d/.test(r.err.message) || (r.err.code === 'E_DIMS' && !r.err.message.includes(String(maxSeqLen)))) failures.push(`${label}: the message shows another value: ${r.err.message}`);
      continue;
    }
    const c = r.value;
    try {
      if (c.maxSeqLen !== maxSeqLen) failures.push(`${label}: cache.maxSeqLen is ${c.maxSeqLen}`);
      // Rows 0 and 1, then row 1 read back: C must hold at least as many rows as JS says.
      for (const [i, x] of [[0, 1], [1, 2]]) {
        const u = attempt(() => c.update(row(x), row(-x), i));
        if (!u.ok) failures.push(`${label}: update row ${i}: ${describeErr(u.err)}`);
      }
      const back = attempt(() => c.read(1, 1));
      if (!back.ok || back.value.k.data[0] !== 2) failures.push(`${label}: row 1 read back: ${back.ok ? back.value.k.data[0] : describeErr(back.err)}`);
      // The last rows (never written: zeros), and attending all of them from the last position.
      const last = attempt(() => c.read(maxSeqLen - 1, 1));
      if (!last.ok && !(last.err instanceof SdpaError)) failures.push(`${label}: read the last row: ${describeErr(last.err)}`);
      else if (last.ok && last.value.k.data.some((x) => x !== 0)) failures.push(`${label}: the last row is not zeros`);
      const sp = Math.min(maxSeqLen, 2 ** 31 - 1) - 1;
      const a = attempt(() => c.attend({ data: new Float32Array(4).fill(1), dims: [1, 1, 1, 4] }, { startPos: sp }));
      if (!a.ok && !(a.err instanceof SdpaError)) failures.push(`${label}: attend at ${sp} over unwritten rows: ${describeErr(a.err)}`);
      else if (a.ok) {
        // keys: row 0 (1s), row 1 (2s), sp - 1 zero rows; values -1, -2, 0
        const N = sp + 1, s0 = 4 * 1 / 2, s1 = 4 * 2 / 2, mx = s1;
        const w0 = Math.exp(s0 - mx), w1 = 1, wz = (N - 2) * Math.exp(-mx);
        const want = (-1 * w0 - 2 * w1) / (w0 + w1 + wz);
        const m = attempt(() => assertCloseTo(a.value.data, new Float64Array(4).fill(want), ''));
        if (!m.ok) failures.push(`${label}: attend at ${sp}: ${a.value.data[0]}, expected ${want}`);
      }
    } finally { c.dispose(); }
  }
  assert.ok(failures.length === 0, `${failures.length} problems:\n  ${failures.join('\n  ')}`);
});

// ===========================================================================
// 2. Typed-array properties are trusted

/** A Float32Array holding `values` at element offset `at` of a buffer of `total` elements filled with `fill`. */
function embedded(values, at, total, fill) {
  const buf = new Float32Array(total).fill(fill);
  buf.set(values, at);
  return { whole: buf, view: new Float32Array(buf.buffer, at * 4, values.length) };
}

test('2: input data lying about length / buffer / byteOffset / byteLength: computed on the real contents, or the real shape\'s error', () => {
  const s = s1;
  const out = sentinelOut();
  const w = watch({ arrays: [out.data] });
  // A lying length that matches bigger dims: the real 16 elements are not [1, 4, 2, 4].
  for (const how of ['subclass', 'own']) {
    const L = liar(Q0.data.slice(), { length: 32 }, how);
    expectCode(() => s.customSdpa({ data: L.arr, dims: [1, 4, 2, 4] }, k(), v(), { out: { data: new Float32Array(32), dims: [1, 4, 2, 4] } }), 'E_DIMS', `${how}: length 32 over 16 real elements`);
    const Ks = liar(K0.data.slice(0, 8), { length: 16, byteLength: 64 }, how);
    expectCode(() => s.customSdpa(q(), { data: Ks.arr, dims: [1, 4, 1, 4] }, v(), { out }), 'E_DIMS', `${how}: key length 16 over 8 real elements`);
    w.check(`${how}: lying length`);
    // A lying length that matches nothing: the real length fits the dims.
    const L2 = liar(Q0.data.slice(), { length: 3 }, how);
    expectRef(() => s.customSdpa({ data: L2.arr, dims: [1, 2, 2, 4] }, k(), v()), REF, `${how}: length 3 over 16 real elements`);
  }
  // Secrets next to the real contents in a shared ArrayBuffer: a lie that points at them has no effect.
  const lies = {
    'byteOffset 0': (e) => ({ byteOffset: 0 }),
    'byteOffset past the end': (e) => ({ byteOffset: 64 * 4 }),
    'byteLength of the whole buffer': (e) => ({ byteLength: e.whole.byteLength, length: e.whole.length }),
    'another buffer': () => ({ buffer: new Float32Array(64).fill(1e6).buffer }),
    'buffer, byteOffset and length all lie': () => ({ buffer: new Float32Array(64).fill(-3).buffer, byteOffset: 8, byteLength: 64, length: 16 }),
  };
  for (const how of ['subclass', 'own']) {
    for (const [name, mk] of Object.entries(lies)) {
      for (const which of ['query', 'key', 'value']) {
        const src = { query: Q0, key: K0, value: V0 }[which];
        const e = embedded(src.data, 20, 64, 100);
        const L = liar(e.view, mk(e), how);
        const args = [q(), k(), v()];
        args[['query', 'key', 'value'].indexOf(which)] = { data: L.arr, dims: src.dims.slice() };
        expectRef(() => s.customSdpa(...args), REF, `${how} ${which}: ${name}`);
      }
      const m = { data: new Float32Array([0, -1, 0.5, -Infinity, 0.25, 0, 0, -2]), dims: [2, 4] };
      const em = embedded(m.data, 8, 64, -1e30);
      const LM = liar(em.view, mk(em), how);
      expectRef(() => s.customSdpa(q(), k(), v(), { attnMask: { data: LM.arr, dims: [2, 4] } }), ref(Q0, K0, V0, { attnMask: m }), `${how} mask: ${name}`);
    }
  }
});

test('2: a lying Symbol.toStringTag: the real type decides', () => {
  const s = s1;
  const out = sentinelOut();
  const w = watch({ arrays: [out.data] });
  const tagged = (a, tag, how = 'subclass') => liar(a, { [Symbol.toStringTag]: tag }, how).arr;
  // Real Uint8Array claiming to be a Float32Array: bytes, not floats (C would read 4x the bytes).
  for (const how of ['subclass', 'own']) {
    const u8 = new Uint8Array(16).fill(1);
    expectCode(() => s.customSdpa({ data: tagged(u8, 'Float32Array', how), dims: [1, 2, 2, 4] }, k(), v(), { out }), 'E_DTYPE', `${how}: Uint8Array tagged Float32Array as query`);
    expectCode(() => s.customSdpa(q(), { data: tagged(new Uint8Array(16), 'Float32Array', how), dims: [1, 4, 1, 4] }, v(), { out }), 'E_DTYPE', `${how}: Uint8Array tagged Float32Array as key`);
    expectCode(() => s.customSdpa(q(), k(), v(), { out: { data: tagged(new Uint8Array(16), 'Float32Array', how), dims: [1, 2, 2, 4] } }), 'E_DTYPE', `${how}: Uint8Array tagged Float32Array as out`);
    w.check(`${how}: tagged Uint8Array`);
    // Real Float32Array claiming another type: it is a Float32Array.
    expectRef(() => s.customSdpa({ data: tagged(Q0.data.slice(), 'Uint8Array', how), dims: [1, 2, 2, 4] }, k(), v()), REF, `${how}: Float32Array tagged Uint8Array as query`);
    expectRef(() => s.customSdpa(q(), { data: tagged(K0.data.slice(), 'Int32Array', how), dims: [1, 4, 1, 4] }, v()), REF, `${how}: Float32Array tagged Int32Array as key`);
    // A float mask tagged Uint8Array is still additive (not bool).
    const fm = { data: new Float32Array([0, -1, 0.5, -Infinity, 0.25, 0, 0, -2]), dims: [2, 4] };
    expectRef(() => s.customSdpa(q(), k(), v(), { attnMask: { data: tagged(fm.data.slice(), 'Uint8Array', how), dims: [2, 4] } }), ref(Q0, K0, V0, { attnMask: fm }), `${how}: float mask tagged Uint8Array`);
    // A bool mask tagged Float32Array is bool (1 byte per element).
    const bm = { data: new Uint8Array([1, 0, 1, 1, 0, 1, 1, 0]), dims: [2, 4] };
    expectRef(() => s.customSdpa(q(), k(), v(), { attnMask: { data: tagged(bm.data.slice(), 'Float32Array', how), dims: [2, 4] } }), ref(Q0, K0, V0, { attnMask: bm }), `${how}: bool mask tagged Float32Array`);
  }
});

test('2: out as a lying typed array receives exactly the real output in its real memory; nothing around it changes', () => {
  const s = s1;
  for (const how of ['subclass', 'own']) {
    // (a) In a shared ArrayBuffer whose neighbours must stay 7.
    const variants = {
      'byteOffset 0': { byteOffset: 0 },
      'byteOffset of the next element': { byteOffset: 84 },
      'byteLength of the whole buffer': { byteLength: 64 * 4, length: 64 },
      'another buffer': { buffer: new ArrayBuffer(256) },
      'length 4': { length: 4, byteLength: 16 },
    };
    for (const [name, lies] of Object.entries(variants)) {
      const e = embedded(new Float32Array(16).fill(7), 20, 64, 7);
      const L = liar(e.view, lies, how);
      const neighbours = () => [...e.whole.subarray(0, 20), ...e.whole.subarray(36)];
      const r = attempt(() => s.customSdpa(q(), k(), v(), { out: { data: L.arr, dims: [1, 2, 2, 4] } }));
      assert.ok(r.ok, `${how} out (${name}): expected success, got ${r.ok || describeErr(r.err)}`);
      assertCloseTo(plainCopy(e.view), REF, `${how} out (${name}): its real memory`);
      assert.ok(neighbours().every((x) => x === 7), `${how} out (${name}): bytes around out were written`);
      if (lies.buffer) assert.ok(new Float32Array(lies.buffer).every((x) => x === 0), `${how} out (${name}): the buffer it named was written`);
    }
    // (b) A plain array claiming to be wasm memory at a heap tensor's address.
    const victim = s.allocTensor('float32', [1, 2, 2, 4]);
    victim.data.fill(5);
    const target = new Float32Array(16).fill(7);
    const L = liar(target, { buffer: () => real.buffer(victim.data), byteOffset: () => real.byteOffset(victim.data) }, how);
    const r = attempt(() => s.customSdpa(q(), k(), v(), { out: { data: L.arr, dims: [1, 2, 2, 4] } }));
    assert.ok(victim.data.every((x) => x === 5), `${how}: out claiming wasm memory wrote a heap tensor`);
    if (r.ok) assertCloseTo(target, REF, `${how}: out claiming wasm memory: its real memory`);
    else assert.ok(r.err instanceof SdpaError, `${how}: ${describeErr(r.err)}`);
    // ... and claiming to be the cache storage's buffer as an input: computed on its real contents.
    const Lq = liar(Q0.data.slice(), { buffer: () => real.buffer(victim.data), byteOffset: () => real.byteOffset(victim.data) }, how);
    expectRef(() => s.customSdpa({ data: Lq.arr, dims: [1, 2, 2, 4] }, k(), v()), REF, `${how}: query claiming wasm memory`);
    victim.dispose();
  }
  // (c) out whose own `set` / `subarray` methods are the caller's: not called, out written.
  const called = [];
  const o = new Float32Array(16).fill(7);
  o.set = () => { called.push('set'); };
  o.subarray = () => { called.push('subarray'); return new Float32Array(16); };
  o.fill = () => { called.push('fill'); };
  const r = attempt(() => s.customSdpa(q(), k(), v(), { out: { data: o, dims: [1, 2, 2, 4] } }));
  assert.ok(r.ok, `out with own methods: ${r.ok || describeErr(r.err)}`);
  assert.equal(called, [], 'the library called methods of the caller\'s out array');
  assertCloseTo(plainCopy(o), REF, 'out with own methods');
});

test('2: a plain array claiming to be wasm memory at an address beyond it: no trap, the real contents', () => {
  const s = s1;
  const wasmBuffer = () => s[INTERNALS].M.wasmMemory.buffer; // (what a hostile caller can get: any view of a heap tensor has it)
  const cache = filledCache(s);
  const failures = [];
  for (const how of ['subclass', 'own']) {
    for (const at of [0xfffff000, 0x7ffffff0, 2 ** 32 - 4]) {
      const lies = { buffer: wasmBuffer, byteOffset: at };
      const cases = [
        ['customSdpa query', () => s.customSdpa({ data: liar(Q0.data.slice(), lies, how).arr, dims: [1, 2, 2, 4] }, k(), v()), REF],
        ['customSdpa out', () => s.customSdpa(q(), k(), v(), { out: { data: liar(new Float32Array(16), lies, how).arr, dims: [1, 2, 2, 4] } }), REF],
        ['cache.attend q', () => cache.attend({ data: liar(Q0.data.slice(0, 8), lies, how).arr, dims: [1, 1, 2, 4] }, { startPos: 3 }), cacheRef(cache, { data: Q0.data.slice(0, 8), dims: [1, 1, 2, 4] }, { startPos: 3 })],
        ['cache.update k', () => { cache.update({ data: liar(K0.data.slice(0, 4), lies, how).arr, dims: [1, 1, 1, 4] }, { data: V0.data.slice(0, 4), dims: [1, 1, 1, 4] }, 4); return { data: cache.read(4, 1).k.data }; }, K0.data.slice(0, 4)],
      ];
      for (const [label, fn, want] of cases) {
        const r = attempt(fn);
        const name = `${how}, byteOffset 0x${at.toString(16)}: ${label}`;
        if (!r.ok) failures.push(`${name}: ${describeErr(r.err)}`);
        else {
          const m = attempt(() => assertCloseTo(r.value.data, want, ''));
          if (!m.ok) failures.push(`${name}: wrong answer`);
        }
      }
    }
  }
  cache.dispose();
  assert.ok(failures.length === 0, `${failures.length} cases:\n  ${failures.join('\n  ')}`);
});

test('2: cache.update / step with lying k, v: the cache receives the real contents', () => {
  const s = s1;
  for (const how of ['subclass', 'own']) {
    const cache = filledCache(s);
    const nk = randTensor(rand, [1, 1, 1, 4]), nv = randTensor(rand, [1, 1, 1, 4]);
    const ek = embedded(nk.data, 8, 32, 50), ev = embedded(nv.data, 4, 32, -50);
    const Lk = liar(ek.view, { byteOffset: 0, byteLength: 128, length: 32 }, how);
    const Lv = liar(ev.view, { buffer: new Float32Array(32).fill(9).buffer }, how);
    const r = attempt(() => cache.update({ data: Lk.arr, dims: [1, 1, 1, 4] }, { data: Lv.arr, dims: [1, 1, 1, 4] }, 4));
    assert.ok(r.ok, `${how}: update: ${r.ok || describeErr(r.err)}`);
    const row = cache.read(4, 1);
    assertCloseTo(row.k.data, nk.data, `${how}: cached k is the real contents`);
    assertCloseTo(row.v.data, nv.data, `${how}: cached v is the real contents`);
    const sq = randTensor(rand, [1, 1, 2, 4]);
    const eq = embedded(sq.data, 16, 64, 1e3);
    const Lq = liar(eq.view, { byteOffset: 0 }, how);
    const Lk2 = liar(embedded(nk.data, 8, 32, 50).view, { byteOffset: 0 }, how);
    const got = attempt(() => cache.step({ data: Lq.arr, dims: [1, 1, 2, 4] }, { data: Lk2.arr, dims: [1, 1, 1, 4] }, nv, 5, { isCausal: true }));
    assert.ok(got.ok, `${how}: step: ${got.ok || describeErr(got.err)}`);
    assertCloseTo(cache.read(5, 1).k.data, nk.data, `${how}: step wrote the real k`);
    assertCloseTo(got.value.data, cacheRef(cache, sq, { startPos: 5, isCausal: true }), `${how}: step's answer on the real q`);
    cache.dispose();
  }
});

// ===========================================================================
// 3. User code runs after validation (the snapshot rule)

/** A tensor [1, 1, 2, 4] (q of a cache call) or `dims` whose `prop` getter runs `effect`. */
function trapped(prop, effect, dims = [1, 1, 2, 4]) {
  const data = new Float32Array(dims.reduce((a, b) => a * b, 1)).fill(0.25);
  if (prop === 'dims[0]') {
    const d = countingDims(dims, (key) => { if (key === '0') effect(); });
    return { data, dims: d.dims };
  }
  if (prop === 'buffer' || prop === 'byteOffset' || prop === 'length' || prop === 'byteLength') {
    return { data: liar(data, { [prop]: (a) => { effect(); return G(a, prop); } }).arr, dims };
  }
  return countingTensor({ data, dims, dtype: 'float32' }, { [prop]: () => effect() }).t;
}
const G = (a, prop) => real[prop](a);
const GETTERS = ['data', 'dims', 'dtype', 'dims[0]', 'buffer', 'byteOffset', 'length', 'byteLength'];
/**
 * Getters of the typed array itself. After the fix the library reads these
 * through the built-in %TypedArray%.prototype getters, so the caller's
 * getter may never run: then the call must simply succeed. When it does run
 * it must run in the snapshot, before the liveness checks.
 */
const TA_PROPS = new Set(['buffer', 'byteOffset', 'length', 'byteLength']);
/** Checks one outcome of a call whose getter disposes something: null when fine, else what is wrong. */
function disposedOutcome(prop, disposed, r) {
  if (!disposed) {
    if (!TA_PROPS.has(prop)) return 'the getter did not run';
    return r.ok ? null : `the getter did not run, yet the call failed: ${describeErr(r.err)}`;
  }
  if (r.ok) return 'succeeded after the getter disposed it (expected E_DISPOSED)';
  if (!(r.err instanceof SdpaError) || r.err.code !== 'E_DISPOSED') return `expected E_DISPOSED, got ${describeErr(r.err)}`;
  return null;
}

test('3: cache.dispose() or heapTensor.dispose() inside a getter: E_DISPOSED, nothing written, no crash', async () => {
  const s = await fresh();
  // [victim, call, the argument whose getter disposes it]
  const combos = [
    ['cache', 'cache.attend', 'q'], ['cache', 'cache.step', 'q'], ['cache', 'cache.step', 'k'], ['cache', 'cache.update', 'k'],
    ['heap q', 'cache.attend', 'out'], ['heap q', 'cache.step', 'k'], ['heap q', 'customSdpa', 'k'],
    ['heap out', 'cache.attend', 'q'], ['heap out', 'cache.step', 'v'], ['heap out', 'customSdpa', 'q'],
    ['heap k', 'cache.update', 'v'], ['heap k', 'customSdpa', 'v'],
  ];
  const failures = [];
  for (const prop of GETTERS) {
    for (const [victimName, site, role] of combos) {
      const cache = filledCache(s);
      const hq = s.allocTensor('float32', [1, 1, 2, 4]);
      const hk = s.allocTensor('float32', site === 'customSdpa' ? [1, 4, 1, 4] : [1, 1, 1, 4]);
      const ho = s.allocTensor('float32', [1, 1, 2, 4]);
      hq.data.fill(0.5); hk.data.fill(0.25); ho.data.fill(7);
      const victim = { cache, 'heap q': hq, 'heap out': ho, 'heap k': hk }[victimName];
      const w = watch({ caches: [cache], heaps: [hq, hk, ho] });
      const kill = () => victim.dispose();
      const kv = (r) => (role === r ? trapped(prop, kill, site === 'customSdpa' ? [1, 4, 1, 4] : [1, 1, 1, 4]) : null);
      const plainKV = (fill) => ({ data: new Float32Array(4).fill(fill), dims: [1, 1, 1, 4] });
      const call = {
        'cache.attend': () => cache.attend(role === 'q' ? trapped(prop, kill) : hq, { startPos: 3, out: role === 'out' ? trapped(prop, kill) : ho }),
        'cache.step': () => cache.step(role === 'q' ? trapped(prop, kill) : hq, kv('k') ?? (victimName === 'heap k' ? hk : plainKV(0.5)), kv('v') ?? plainKV(-0.5), 4, { out: ho }),
        'cache.update': () => cache.update(kv('k') ?? (victimName === 'heap k' ? hk : plainKV(0.5)), kv('v') ?? plainKV(-0.5), 4),
        'customSdpa': () => s.customSdpa(role === 'q' ? trapped(prop, kill) : hq, kv('k') ?? hk, kv('v') ?? hk, { out: ho }),
      }[site];
      const label = `${victimName}.dispose() in ${role}.${prop} of ${site}`;
      const r = attempt(call);
      const bad = disposedOutcome(prop, victim.disposed, r);
      if (bad) failures.push(`${label}: ${bad}`);
      const changed = r.ok ? [] : w.changes();
      if (changed.length) failures.push(`${label}: rejected, but written: ${changed[0]}`);
      for (const x of [cache, hq, hk, ho]) x.dispose();
    }
  }
  assert.ok(failures.length === 0, `${failures.length} cases:\n  ${failures.join('\n  ')}`);
});

test('3: sdpa.dispose() inside a getter: E_DISPOSED, nothing written, no crash', async () => {
  const tk = () => ({ data: K0.data.slice(), dims: [1, 1, 4, 4] }); // [B, H, S, E]
  const cases = [
    ['customSdpa q.data', (t) => t.s.customSdpa(trapped('data', t.kill, [1, 2, 2, 4]), k(), v(), { out: t.out })],
    ['customSdpa q.data.buffer', (t) => t.s.customSdpa(trapped('buffer', t.kill, [1, 2, 2, 4]), k(), v(), { out: t.out })],
    ['customSdpa k.data.byteLength', (t) => t.s.customSdpa(q(), trapped('byteLength', t.kill, [1, 4, 1, 4]), v(), { out: t.out })],
    ['customSdpa out.dims[0]', (t) => t.s.customSdpa(q(), k(), v(), { out: { data: t.out.data, dims: countingDims([1, 2, 2, 4], (key) => { if (key === '0') t.kill(); }).dims } })],
    ['customSdpa options.scale', (t) => t.s.customSdpa(q(), k(), v(), { get scale() { t.kill(); return 0.5; }, out: t.out })],
    ['cache.attend q.data.byteOffset', (t) => t.cache.attend(trapped('byteOffset', t.kill), { startPos: 3 })],
    ['cache.attend heap q, out.data.buffer', (t) => t.cache.attend(t.hq, { startPos: 3, out: { data: liar(t.out.data.subarray(0, 8), { buffer: (a) => { t.kill(); return real.buffer(a); } }).arr, dims: [1, 1, 2, 4] } })],
    ['cache.step k.dims', (t) => t.cache.step(t.hq, trapped('dims', t.kill, [1, 1, 1, 4]), { data: new Float32Array(4), dims: [1, 1, 1, 4] }, 4)],
    ['cache.step heap tensors, v.data.buffer', (t) => t.cache.step(t.hq, t.hk, trapped('buffer', t.kill, [1, 1, 1, 4]), 4, { out: t.ho })],
    ['cache.update v.data.buffer', (t) => t.cache.update({ data: new Float32Array(4), dims: [1, 1, 1, 4] }, trapped('buffer', t.kill, [1, 1, 1, 4]), 4)],
    ['scaledDotProductAttention key.data', (t) => t.s.scaledDotProductAttention(q(), trapped('data', t.kill, [1, 1, 4, 4]), trapped('data', () => {}, [1, 1, 4, 4]))],
    ['scaledDotProductAttention value.data.buffer', (t) => t.s.scaledDotProductAttention(q(), trapped('data', () => {}, [1, 1, 4, 4]), trapped('buffer', t.kill, [1, 1, 4, 4]))],
    ['planAttention options.isCausal', (t) => t.s.planAttention(q(), tk(), tk(), { get isCausal() { t.kill(); return true; } })],
    ['scaledDotProductAttention (custom route) query.dims', (t) => t.s.scaledDotProductAttention(trapped('dims', t.kill, [1, 1, 4, 4]), tk(), tk())],
    ['allocTensor dims[0]', (t) => t.s.allocTensor('float32', countingDims([2, 2], (key) => { if (key === '0') t.kill(); }).dims)],
    ['createKVCache options.headDim', (t) => t.s.createKVCache({ maxSeqLen: 4, numKvHeads: 1, get headDim() { t.kill(); return 4; } })],
  ];
  const failures = [];
  for (const [label, call] of cases) {
    const f = await fresh();
    const cache = filledCache(f);
    const hq = f.allocTensor('float32', [1, 1, 2, 4]), hk = f.allocTensor('float32', [1, 1, 1, 4]), ho = f.allocTensor('float32', [1, 1, 2, 4]);
    const out = sentinelOut();
    const t = { s: f, cache, hq, hk, ho, out, kill: () => f.dispose() };
    const r = attempt(() => call(t));
    const prop = /\.(buffer|byteOffset|byteLength|length)\b/.exec(label)?.[1] ?? 'data';
    const bad = disposedOutcome(prop, f.disposed, r);
    if (bad) failures.push(`${label}: ${bad}`);
    if (!r.ok && !out.data.every((x) => x === 7)) failures.push(`${label}: rejected, but out was written`);
  }
  assert.ok(failures.length === 0, `${failures.length} cases:\n  ${failures.join('\n  ')}`);
});

test('3: a re-entrant call from a getter completes first; the outer call proceeds on its snapshot', async () => {
  const s = await fresh();
  const cache = filledCache(s);
  const hq = s.allocTensor('float32', [1, 1, 2, 4]);
  hq.data.set(randTensor(rand, [8]).data);
  const hqCopy = { data: Float32Array.from(hq.data), dims: [1, 1, 2, 4] };
  const iq = randTensor(rand, [1, 2, 2, 4]);
  const inner = [];
  // the inner calls: customSdpa, cache.attend (reads what the outer reads), read
  const reenter = () => {
    inner.push(s.customSdpa(copy(iq), k(), v(), { isCausal: true }));
    inner.push(cache.attend(hqCopy, { startPos: 3 }));
    inner.push(cache.read(0, 4).k);
  };
  const wantInner = [refCustomSdpa(iq, K0, V0, { isCausal: true }), cacheRef(cache, hqCopy, { startPos: 3 })];
  for (const prop of ['data', 'dims', 'dtype', 'dims[0]', 'buffer', 'byteOffset', 'byteLength', 'length']) {
    for (const site of ['customSdpa', 'cache.attend', 'scaledDotProductAttention']) {
      inner.length = 0;
      const label = `re-entrant calls from q.${prop} of ${site}`;
      let r;
      if (site === 'customSdpa') {
        const t = trapped(prop, reenter, [1, 2, 2, 4]);
        const want = refCustomSdpa({ data: new Float32Array(16).fill(0.25), dims: [1, 2, 2, 4] }, K0, V0, { startPos: 1 });
        r = attempt(() => s.customSdpa(t, k(), v(), { startPos: 1 }));
        if (r.ok) assertCloseTo(r.value.data, want, label);
      } else if (site === 'cache.attend') {
        const t = trapped(prop, reenter);
        const want = cacheRef(cache, { data: new Float32Array(8).fill(0.25), dims: [1, 1, 2, 4] }, { startPos: 3 });
        r = attempt(() => cache.attend(t, { startPos: 3 }));
        if (r.ok) assertCloseTo(r.value.data, want, label);
      } else {
        const t = trapped(prop, reenter, [1, 1, 2, 4]);
        const kk = { data: K0.data.slice(0, 8), dims: [1, 1, 2, 4] };
        const want = refTorchSdpa({ data: new Float32Array(8).fill(0.25), dims: [1, 1, 2, 4] }, kk, kk);
        r = attempt(() => s.scaledDotProductAttention(t, copy(kk), copy(kk)));
        if (r.ok) assertCloseTo(r.value.data, want, label);
      }
      assert.ok(r.ok, `${label}: expected the outer answer, got ${r.ok || describeErr(r.err)}`);
      if (TA_PROPS.has(prop) && inner.length === 0) continue; // (read through the built-in getter: fine)
      assert.ok(inner.length >= 3, `${label}: the getter ran (${inner.length})`);
      assertCloseTo(inner[0].data, wantInner[0], `${label}: inner customSdpa`);
      assertCloseTo(inner[1].data, wantInner[1], `${label}: inner attend`);
    }
  }
  cache.dispose(); hq.dispose();
});

test('3 (N): a re-entrant call that grows memory, from a typed-array getter, in the single-thread build (growth detaches views)', async () => {
  const s = await fresh({ build: 'simd' });
  const big = { data: new Float32Array(24 * MiB), dims: [1, 6 * MiB, 1, 4] }; // 96 MiB temporaries: growth
  const grow = () => { s.customSdpa({ data: new Float32Array(4).fill(1), dims: [1, 1, 1, 4] }, big, big); };
  for (const prop of ['buffer', 'byteOffset', 'byteLength', 'length']) {
    let grew = false;
    const Lq = liar(Q0.data.slice(), { [prop]: (a) => { if (!grew) { grew = true; grow(); } return G(a, prop); } });
    const r = attempt(() => s.customSdpa({ data: Lq.arr, dims: [1, 2, 2, 4] }, k(), v()));
    assert.ok(r.ok || r.err instanceof SdpaError, `q.data.${prop} growing memory: ${r.ok || describeErr(r.err)}`);
    if (r.ok) assertCloseTo(r.value.data, REF, `q.data.${prop} growing memory`);
  }
});

test('3: every value is read exactly once (tensor fields, dims indices, options)', async () => {
  const s = s1;
  const cache = filledCache(s);
  const failures = [];
  const counted = (dims, fill = 0.25) => {
    const d = countingDims(dims);
    const c = countingTensor({ data: new Float32Array(dims.reduce((a, b) => a * b, 1)).fill(fill), dims: d.dims, dtype: 'float32' });
    return { t: c.t, reads: () => ({ ...c.reads, ...Object.fromEntries(Object.entries(d.reads).map(([key, n]) => [`dims.${key}`, n])) }), dimKeys: ['length', ...dims.map((_, i) => String(i))] };
  };
  const countedOpts = (vals) => {
    const reads = {};
    const o = {};
    for (const [key, val] of Object.entries(vals)) {
      Object.defineProperty(o, key, { enumerable: true, get() { reads[key] = (reads[key] || 0) + 1; return val; } });
    }
    return { o, reads, keys: Object.keys(vals) };
  };
  const check = (label, tensors, opts) => {
    for (const [name, x] of Object.entries(tensors)) {
      const r = x.reads();
      for (const key of ['data', 'dims', 'dtype', ...x.dimKeys.map((d) => `dims.${d}`)]) {
        if (r[key] !== 1) failures.push(`${label}: ${name}.${key} read ${r[key] || 0} times`);
      }
    }
    if (opts) for (const key of opts.keys) if (opts.reads[key] !== 1) failures.push(`${label}: options.${key} read ${opts.reads[key] || 0} times`);
  };
  {
    const T = { q: counted([1, 2, 2, 4]), k: counted([1, 4, 1, 4]), v: counted([1, 4, 1, 4]), out: counted([1, 2, 2, 4], 7), mask: counted([2, 4], 0) };
    const O = countedOpts({ startPos: 0, attnMask: T.mask.t, dropoutP: 0, isCausal: false, scale: 0.5, out: T.out.t });
    s.customSdpa(T.q.t, T.k.t, T.v.t, O.o);
    check('customSdpa', T, O);
  }
  {
    const T = { q: counted([1, 1, 2, 4]), out: counted([1, 1, 2, 4], 7) };
    const O = countedOpts({ startPos: 3, isCausal: true, dropoutP: 0, scale: 0.5, out: T.out.t });
    cache.attend(T.q.t, O.o);
    check('cache.attend', T, O);
  }
  {
    const T = { q: counted([1, 1, 2, 4]), k: counted([1, 1, 1, 4]), v: counted([1, 1, 1, 4]), mask: counted([1, 5], 0) };
    const O = countedOpts({ attnMask: T.mask.t, scale: 0.5 });
    cache.step(T.q.t, T.k.t, T.v.t, 4, O.o);
    check('cache.step', T, O);
  }
  {
    const T = { k: counted([1, 1, 1, 4]), v: counted([1, 1, 1, 4]) };
    cache.update(T.k.t, T.v.t, 5);
    check('cache.update', T, null);
  }
  for (const fn of ['scaledDotProductAttention', 'planAttention']) {
    const T = { q: counted([1, 2, 2, 4]), k: counted([1, 1, 4, 4]), v: counted([1, 1, 4, 4]), mask: counted([2, 4], 0) };
    const O = countedOpts({ attnMask: T.mask.t, dropoutP: 0, isCausal: false, scale: 0.5, enableGqa: false });
    s[fn](T.q.t, T.k.t, T.v.t, O.o);
    check(fn, T, O);
  }
  {
    const d = countingDims([2, 3]);
    s.allocTensor('float32', d.dims).dispose();
    for (const key of ['length', '0', '1']) if (d.reads[key] !== 1) failures.push(`allocTensor: dims.${key} read ${d.reads[key] || 0} times`);
    const O = countedOpts({ batch: 1, maxSeqLen: 4, numKvHeads: 1, headDim: 4, dtype: 'float32' });
    s.createKVCache(O.o).dispose();
    check('createKVCache', {}, O);
  }
  cache.dispose();
  assert.ok(failures.length === 0, `values read more than once (or never):\n  ${failures.join('\n  ')}`);
});

test('3: an exception thrown by the caller\'s getter propagates unchanged; nothing is written', () => {
  const s = s1;
  const cache = filledCache(s);
  const ho = s.allocTensor('float32', [1, 1, 2, 4]);
  ho.data.fill(7);
  const out = sentinelOut();
  const mine = new (class MyError extends Error {})('mine');
  const values = [mine, { notAnError: true }, Symbol('thrown'), 'a string', new SdpaError('E_HEADS', 'a fake SdpaError')];
  for (const thrown of values) {
    const boom = () => { throw thrown; };
    const cases = [
      ['q.data', () => s.customSdpa(trapped('data', boom, [1, 2, 2, 4]), k(), v(), { out })],
      ['q.dims', () => s.customSdpa(trapped('dims', boom, [1, 2, 2, 4]), k(), v(), { out })],
      ['k.dims[0]', () => s.customSdpa(q(), trapped('dims[0]', boom, [1, 4, 1, 4]), v(), { out })],
      ['v.data.buffer', () => s.customSdpa(q(), k(), trapped('buffer', boom, [1, 4, 1, 4]), { out })],
      ['out.data.byteOffset', () => s.customSdpa(q(), k(), v(), { out: { data: liar(out.data, { byteOffset: boom }).arr, dims: [1, 2, 2, 4] } })],
      ['options.scale', () => s.customSdpa(q(), k(), v(), { get scale() { return boom(); }, out })],
      ['options as a Proxy (ownKeys)', () => s.customSdpa(q(), k(), v(), new Proxy({ out }, { ownKeys: boom }))],
      ['attend q.dtype', () => cache.attend(trapped('dtype', boom), { startPos: 3, out: ho })],
      ['step k.data.length', () => cache.step(trapped('data', () => {}), trapped('length', boom, [1, 1, 1, 4]), trapped('data', () => {}, [1, 1, 1, 4]), 4, { out: ho })],
      ['update v.data', () => cache.update(trapped('data', () => {}, [1, 1, 1, 4]), trapped('data', boom, [1, 1, 1, 4]), 4)],
      ['torch mask.dims', () => s.scaledDotProductAttention(q(), k(), v(), { attnMask: trapped('dims', boom, [2, 4]) })],
      ['allocTensor dims[1]', () => s.allocTensor('float32', countingDims([2, 2], (key) => { if (key === '1') boom(); }).dims)],
      ['createKVCache options.maxSeqLen', () => s.createKVCache({ get maxSeqLen() { return boom(); }, numKvHeads: 1, headDim: 4 })],
    ];
    for (const [label, fn] of cases) {
      out.data.fill(7); ho.data.fill(7);
      const w = watch({ arrays: [out.data], caches: [cache], heaps: [ho] });
      const what = `${label} throwing ${typeof thrown === 'symbol' ? 'a symbol' : describeErr(thrown)}`;
      if (/\.(buffer|byteOffset|byteLength|length)$/.test(label)) {
        // A getter of the typed array itself: read through the built-in getter (no throw), or thrown unchanged.
        const r = attempt(fn);
        assert.ok(r.ok || r.err === thrown, `${what}: expected success or the getter's own exception, got ${describeErr(r.err)}`);
        if (r.ok) continue;
      } else expectOwn(fn, thrown, what);
      w.check(label);
    }
  }
  cache.dispose(); ho.dispose();
});

// ===========================================================================
// 4. Views made before memory growth escape the overlap checks

/** Grows s's memory (allocating a heap tensor bigger than what is left); returns it. */
function growMemory(s, label) {
  const { M } = s[INTERNALS];
  const before = M.wasmMemory.buffer;
  const bytes = before.byteLength;
  const t = s.allocTensor('float32', [Math.ceil(bytes / 4) + 16 * MiB]);
  assert.ok(M.wasmMemory.buffer !== before && M.wasmMemory.buffer.byteLength > bytes, `${label}: memory grew`);
  return t;
}

test('4: a view of a heap tensor made before memory growth, as out overlapping an input: E_ARG, nothing written', () => {
  const s = s2;
  assert.is(s.info.build, 'simd-threads');
  const hq = s.allocTensor('float32', [1, 2, 2, 4]);
  hq.data.set(Q0.data);
  const hk = s.allocTensor('float32', [1, 4, 1, 4]);
  hk.data.set(K0.data);
  const oldQ = hq.data, oldK = hk.data, oldKPart = hk.data.subarray(0, 16);
  // Before growth, the same views are caught (control).
  expectCode(() => s.customSdpa(hq, hk, v(), { out: { data: oldQ, dims: [1, 2, 2, 4] } }), 'E_ARG', 'control: out is q');
  const g = growMemory(s, '4a');
  let g2 = null, ho = null;
  try {
  const w = watch({ heaps: [hq, hk] });
  expectCode(() => s.customSdpa(hq, hk, v(), { out: { data: oldQ, dims: [1, 2, 2, 4] } }), 'E_ARG', 'stale view of heap q as out', [/out/]);
  w.check('stale view of heap q as out');
  expectCode(() => s.customSdpa(hq, hk, v(), { out: { data: oldKPart, dims: [1, 2, 2, 4] } }), 'E_ARG', 'stale subarray of heap k as out', [/out/]);
  w.check('stale subarray of heap k as out');
  expectCode(() => s.customSdpa({ data: oldQ, dims: [1, 2, 2, 4] }, hk, v(), { out: hq }), 'E_ARG', 'stale view of heap q as query, heap q as out');
  w.check('stale view as query');
  // Two stale views of the same memory: out and key.
  expectCode(() => s.customSdpa(q(), { data: oldK, dims: [1, 4, 1, 4] }, v(), { out: { data: oldKPart, dims: [1, 2, 2, 4] } }), 'E_ARG', 'two stale views');
  w.check('two stale views');
  // A stale view that does not overlap anything still works and is written in place.
  ho = s.allocTensor('float32', [1, 2, 2, 4]);
  const oldO = ho.data;
  g2 = growMemory(s, '4a (2)');
  expectRef(() => s.customSdpa(hq, hk, v(), { out: { data: oldO, dims: [1, 2, 2, 4] } }), REF, 'stale view as out, no overlap');
  assertCloseTo(ho.data, REF, 'stale view as out writes the heap tensor\'s memory');
  } finally { for (const x of [hq, hk, ho, g, g2]) if (x) x.dispose(); }
});

test('4: a view made before growth over what is now cache storage, as out or input of the cache: E_ARG, the cache unchanged', () => {
  const s = s2;
  const made = cacheOverFreedTensor(s, { maxSeqLen: 8, numKvHeads: 2, headDim: 4 });
  assert.ok(made, 'setup: a freed heap tensor\'s view covers the cache values (malloc reused the block)');
  const { cache, view: old, at, restore } = made;
  const inCache = old.subarray(at, at + 8);
  const cq = () => ({ data: new Float32Array(8).fill(0.5), dims: [1, 1, 2, 4] });
  const ckv = () => ({ data: new Float32Array(8).fill(-1), dims: [1, 1, 2, 4] });
  // Control: while the view is not stale, it is caught (skipped if the setup's small allocations grew memory already).
  if (real.buffer(old) === s[INTERNALS].M.wasmMemory.buffer) {
    expectCode(() => cache.attend(cq(), { startPos: 0, out: { data: inCache, dims: [1, 1, 2, 4] } }), 'E_ARG', 'control: out in the cache before growth');
  }
  const g = growMemory(s, '4b');
  try {
  const w = watch({ caches: [cache] });
  const cases = [
    ['attend out', () => cache.attend(cq(), { startPos: 0, out: { data: inCache, dims: [1, 1, 2, 4] } })],
    ['step out', () => cache.step(cq(), ckv(), ckv(), 1, { out: { data: inCache, dims: [1, 1, 2, 4] } })],
    ['attend q', () => cache.attend({ data: inCache, dims: [1, 1, 2, 4] }, { startPos: 0 })],
    ['step q', () => cache.step({ data: inCache, dims: [1, 1, 2, 4] }, ckv(), ckv(), 1)],
    ['step k', () => cache.step(cq(), { data: inCache, dims: [1, 1, 2, 4] }, ckv(), 1)],
    ['update v', () => cache.update(ckv(), { data: inCache, dims: [1, 1, 2, 4] }, 1)],
    ['attend mask', () => cache.attend(cq(), { attnMask: { data: old.subarray(at, at + 2), dims: [1, 2] } })],
  ];
  const failures = [];
  for (const [label, fn] of cases) {
    const r = attempt(fn);
    const changed = w.changes();
    if (r.ok) failures.push(`${label}: succeeded (expected E_ARG)${changed.length ? `, and wrote the cache (${changed[0]})` : ''}`);
    else if (!(r.err instanceof SdpaError) || r.err.code !== 'E_ARG') failures.push(`${label}: ${describeErr(r.err)}`);
    if (changed.length) {
      failures.push(`${label}: the cache changed: ${changed[0]}`);
      restore(); // for the next case
    }
  }
  assert.ok(failures.length === 0, `stale views over the cache:\n  ${failures.join('\n  ')}`);
  } finally { cache.dispose(); g.dispose(); }
});

// ===========================================================================
// 5. scaledDotProductAttention reads data again after validating it

test('5: a data getter that returns another array on a second read: the answer for the first read', () => {
  const s = s1;
  const A = { q: randTensor(rand, [1, 2, 3, 4]), k: randTensor(rand, [1, 2, 5, 4]), v: randTensor(rand, [1, 2, 5, 4]) };
  const routes = [
    ['custom route (non-causal, L == S)', { q: [1, 2, 5, 4] }, {}],
    ['custom route (causal)', {}, { isCausal: true }],
    ['general route (Ev != E)', { v: [1, 2, 5, 3] }, {}],
    ['general route (batch broadcast)', { k: [1, 2, 5, 4] , q: [2, 2, 3, 4] }, { isCausal: true }],
  ];
  for (const [route, dimsOver, opts] of routes) {
    for (const which of ['q', 'k', 'v', 'mask']) {
      for (const second of ['different values', 'shorter', 'longer', 'an Int32Array', 'undefined']) {
        const dims = { q: dimsOver.q ?? A.q.dims, k: dimsOver.k ?? A.k.dims, v: dimsOver.v ?? A.v.dims };
        const first = {
          q: randTensor(rand, dims.q), k: randTensor(rand, dims.k), v: randTensor(rand, dims.v),
          mask: { data: Float32Array.from({ length: dims.q[2] * dims.k[2] }, () => rand() - 0.5), dims: [dims.q[2], dims.k[2]] },
        };
        const o = { ...opts };
        if (which === 'mask') { if (o.isCausal) continue; o.attnMask = first.mask; }
        const want = refTorchSdpa(first.q, first.k, first.v, o);
        const n = first[which].data.length;
        const other = second === 'different values' ? new Float32Array(n).fill(1e3)
          : second === 'shorter' ? new Float32Array(Math.max(1, n >> 1)).fill(-2)
            : second === 'longer' ? new Float32Array(2 * n).fill(3)
              : second === 'an Int32Array' ? new Int32Array(n) : undefined;
        const tensor = countingTensor({ data: (i) => (i === 1 ? first[which].data : other), dims: first[which].dims.slice() }).t;
        const args = { q: first.q, k: first.k, v: first.v };
        if (which === 'mask') o.attnMask = tensor; else args[which] = tensor;
        const label = `${route}: ${which}.data is ${second} on the second read`;
        // (data is read once, on the first read: whatever a second read would return never matters)
        const r = attempt(() => s.scaledDotProductAttention(args.q, args.k, args.v, o));
        assert.ok(r.ok, `${label}: ${r.ok ? '' : describeErr(r.err)}`);
        assertCloseTo(r.value.data, want, label);
      }
    }
  }
});

// ===========================================================================
// 6. Options silently ignored

test('6: isCausal given non-enumerable, inherited, as a class getter, through a Proxy: honoured', async () => {
  const s = s1;
  const cache = filledCache(s);
  class Opts { get isCausal() { return true; } }
  class WithField { constructor() { this.isCausal = true; } }
  const shapes = {
    'own enumerable': () => ({ isCausal: true }),
    'own non-enumerable': () => Object.defineProperty({}, 'isCausal', { value: true, enumerable: false }),
    'own non-enumerable getter': () => Object.defineProperty({}, 'isCausal', { get: () => true, enumerable: false }),
    'inherited (Object.create)': () => Object.create({ isCausal: true }),
    'inherited non-enumerable': () => Object.create(Object.defineProperty({}, 'isCausal', { value: true })),
    'class getter': () => new Opts(),
    'class field': () => new WithField(),
    'null prototype': () => Object.assign(Object.create(null), { isCausal: true }),
    'Proxy': () => new Proxy({}, { get: (t, key, r) => (key === 'isCausal' ? true : Reflect.get(t, key, r)) }),
    'Proxy over an object': () => new Proxy({ isCausal: true }, {}),
  };
  const hq = randTensor(rand, [1, 2, 2, 4]);
  const cacheWant = cacheRef(cache, hq, { startPos: 2, isCausal: true });
  const torchQ = randTensor(rand, [1, 2, 3, 4]), torchK = randTensor(rand, [1, 2, 3, 4]);
  const torchWant = refTorchSdpa(torchQ, torchK, torchK, { isCausal: true });
  const failures = [];
  for (const [shape, mk] of Object.entries(shapes)) {
    const calls = [
      ['customSdpa', () => s.customSdpa(q(), k(), v(), mk()), REF_CAUSAL],
      ['cache.attend', () => cache.attend(copy(hq), Object.assign(mk(), { startPos: 2 })), cacheWant],
      ['scaledDotProductAttention', () => s.scaledDotProductAttention(copy(torchQ), copy(torchK), copy(torchK), mk()), torchWant],
    ];
    for (const [fn, call, want] of calls) {
      const r = attempt(call);
      if (!r.ok) { failures.push(`${fn} with ${shape} isCausal: ${describeErr(r.err)}`); continue; }
      let e = null;
      try { assertCloseTo(r.value.data, want, ''); } catch (x) { e = x; }
      if (e) failures.push(`${fn} with ${shape} isCausal: not causal (${e.message})`);
    }
    const p = attempt(() => s.planAttention(copy(torchQ), { data: new Float32Array(40), dims: [1, 2, 5, 4] }, { data: new Float32Array(40), dims: [1, 2, 5, 4] }, mk()));
    if (!p.ok || p.value.route !== 'custom') failures.push(`planAttention with ${shape} isCausal: ${p.ok ? `route ${p.value.route} (${p.value.reasons})` : describeErr(p.err)}`);
  }
  // step: isCausal honoured (a row written and attended causally)
  for (const [shape, mk] of Object.entries(shapes)) {
    const c = filledCache(s);
    const sq = randTensor(rand, [1, 2, 2, 4]), sk = randTensor(rand, [1, 2, 1, 4]), sv = randTensor(rand, [1, 2, 1, 4]);
    const r = attempt(() => c.step(copy(sq), sk, sv, 4, mk()));
    if (!r.ok) failures.push(`step with ${shape} isCausal: ${describeErr(r.err)}`);
    else {
      let e = null;
      try { assertCloseTo(r.value.data, cacheRef(c, sq, { startPos: 4, isCausal: true }), ''); } catch (x) { e = x; }
      if (e) failures.push(`step with ${shape} isCausal: not causal`);
    }
    c.dispose();
  }
  // Other options, other objects: createKVCache sizes as class getters; scale / enableGqa non-enumerable.
  class Geo { get maxSeqLen() { return 4; } get numKvHeads() { return 2; } get headDim() { return 4; } }
  const g = attempt(() => s.createKVCache(new Geo()));
  if (!g.ok) failures.push(`createKVCache with class getters: ${describeErr(g.err)}`);
  else { if (g.value.numKvHeads !== 2 || g.value.maxSeqLen !== 4) failures.push('createKVCache with class getters: wrong geometry'); g.value.dispose(); }
  const sc = attempt(() => s.customSdpa(q(), k(), v(), Object.defineProperty({}, 'scale', { value: 2 })));
  if (!sc.ok || attempt(() => assertCloseTo(sc.value.data, refCustomSdpa(Q0, K0, V0, { scale: 2 }), '')).ok === false) failures.push('customSdpa with a non-enumerable scale: ignored');
  for (const [shape, o] of [['inherited', Object.create({ enableGqa: true })], ['non-enumerable', Object.defineProperty({}, 'enableGqa', { value: true })]]) {
    const gq = attempt(() => s.planAttention(randTensor(rand, [1, 4, 2, 4]), randTensor(rand, [1, 2, 2, 4]), randTensor(rand, [1, 2, 2, 4]), o));
    if (!gq.ok) failures.push(`planAttention with ${shape} enableGqa: ${describeErr(gq.err)}`);
  }
  const ob = sentinelOut();
  const so = attempt(() => s.customSdpa(q(), k(), v(), Object.defineProperty({}, 'out', { value: ob })));
  if (!so.ok || so.value !== ob) failures.push('customSdpa with a non-enumerable out: ignored (out not written / not returned)');
  // createSdpa: threads as a class getter (the default on this machine is 'auto' = 2 cores)
  class Threads { get threads() { return 1; } }
  const one = await fresh(new Threads());
  if (one.info.threads !== 1) failures.push(`createSdpa with a class getter threads: 1 gave ${one.info.threads} threads`);
  one.dispose();
  cache.dispose();
  assert.ok(failures.length === 0, `options ignored:\n  ${failures.join('\n  ')}`);
});

test('6: unknown own enumerable names stay E_ARG in every object shape; each known option is read once through [[Get]]', () => {
  const s = s1;
  const out = sentinelOut();
  const w = watch({ arrays: [out.data] });
  class Typo { constructor() { this.is_causal = true; this.out = out; } }
  const shapes = [
    ['plain', () => ({ is_causal: true, out })],
    ['class instance with a typo field', () => new Typo()],
    ['null prototype', () => Object.assign(Object.create(null), { is_causal: true, out })],
    ['Proxy', () => new Proxy({ is_causal: true, out }, {})],
  ];
  for (const [shape, mk] of shapes) {
    expectCode(() => s.customSdpa(q(), k(), v(), mk()), 'E_ARG', `customSdpa, ${shape}`, [/is_causal/]);
    w.check(shape);
  }
  // [[Get]] once per known name, whatever the shape (a class with counting getters).
  const reads = {};
  class Counting {}
  for (const key of ['startPos', 'attnMask', 'dropoutP', 'isCausal', 'scale', 'out']) {
    Object.defineProperty(Counting.prototype, key, { get() { reads[key] = (reads[key] || 0) + 1; return key === 'isCausal' ? true : key === 'out' ? out : undefined; } });
  }
  const r = attempt(() => s.customSdpa(q(), k(), v(), new Counting()));
  assert.ok(r.ok, `class options: ${r.ok || describeErr(r.err)}`);
  assert.equal(reads, { startPos: 1, attnMask: 1, dropoutP: 1, isCausal: 1, scale: 1, out: 1 }, 'each known option read exactly once');
  assertCloseTo(out.data, REF_CAUSAL, 'class options: causal, written to out');
});

// ===========================================================================
// 7. Numeric edges (C side)

test('7: scale 1e30 with |q| ~ 1e10 and k = 0: the reference answer, not NaN', () => {
  const s = s1;
  const qq = { data: Float32Array.from({ length: 16 }, (_, i) => (i % 2 ? -1 : 1) * 1e10 * (1 + i / 16)), dims: [1, 2, 2, 4] };
  const kk = { data: new Float32Array(16), dims: [1, 4, 1, 4] };
  const want = refCustomSdpa(qq, kk, V0, { startPos: 2, scale: 1e30 });
  expectRef(() => s.customSdpa(copy(qq), copy(kk), copy(V0), { startPos: 2, scale: 1e30 }), want, 'customSdpa');
  const c = s.createKVCache({ maxSeqLen: 4, numKvHeads: 1, headDim: 4 });
  c.update(kk, V0, 0);
  expectRef(() => c.attend(copy(qq), { startPos: 2, scale: 1e30, isCausal: false }), want, 'cache.attend (non-causal, as customSdpa)');
  c.dispose();
  const tq = { data: qq.data.slice(0, 8), dims: [1, 1, 2, 4] }, tk = { data: new Float32Array(8), dims: [1, 1, 2, 4] }, tv = randTensor(rand, [1, 1, 2, 4]);
  expectRef(() => s.scaledDotProductAttention(tq, tk, tv, { scale: 1e30 }), refTorchSdpa(tq, tk, tv, { scale: 1e30 }), 'scaledDotProductAttention (custom route)');
});

test('7: |v| near FLT_MAX with many keys: the representable answer, not Inf/NaN', () => {
  const s = s1;
  const S = 300, D = 4;
  const r = rng(77);
  const qq = randTensor(r, [1, 2, 2, D], 0.1);
  const kk = randTensor(r, [1, S, 1, D], 0.1);
  const vv = { data: Float32Array.from({ length: S * D }, () => (r() < 0.5 ? 3e38 : 3.3e38) * (r() < 0.5 ? 1 : 0.999)), dims: [1, S, 1, D] };
  const o = { startPos: S - 2 };
  const want = refCustomSdpa(qq, kk, vv, o);
  assert.ok(want.every(Number.isFinite) && Math.max(...want) < 3.4e38, 'the exact answer is representable');
  expectRef(() => s.customSdpa(copy(qq), copy(kk), copy(vv), o), want, 'customSdpa');
  expectRef(() => s2.customSdpa(copy(qq), copy(kk), copy(vv), o), want, 'customSdpa, 2 threads');
  const neg = { data: vv.data.map((x, i) => (i % 3 ? x : -x)), dims: vv.dims };
  expectRef(() => s.customSdpa(copy(qq), copy(kk), neg, o), refCustomSdpa(qq, kk, neg, o), 'mixed signs');
  const c = s.createKVCache({ maxSeqLen: S, numKvHeads: 1, headDim: D });
  c.update(kk, vv, 0);
  expectRef(() => c.attend(copy(qq), { startPos: S - 2, isCausal: false }), want, 'cache.attend (non-causal, as customSdpa)');
  c.dispose();
});

test('7: finite inputs whose exact answer is finite: q.k beyond FLT_MAX with a tiny scale', () => {
  const s = s1;
  const D = 4, S = 6;
  const qq = { data: new Float32Array(1 * 1 * 1 * D).fill(1e20), dims: [1, 1, 1, D] };
  const kk = { data: Float32Array.from({ length: S * D }, (_, i) => 1e20 * (1 + (i >> 2) * 0.25)), dims: [1, S, 1, D] };
  const vv = randTensor(rand, [1, S, 1, D]);
  const scale = 2 ** -133; // exact in float32 (subnormal); scale * q.k = 3.7..8.3: a finite, well-spread softmax
  const want = refCustomSdpa(qq, kk, vv, { startPos: S - 1, scale });
  assert.ok(want.every(Number.isFinite));
  expectRef(() => s.customSdpa(copy(qq), copy(kk), copy(vv), { startPos: S - 1, scale }), want, 'q.k = 4e40, scale 2^-133');
  // |q| near FLT_MAX, tiny k, scale 4: scale * q overflows float32, the scores (2..10) do not.
  const bq = { data: Float32Array.from({ length: D }, (_, i) => 3e38 * (1 - i / 8)), dims: [1, 1, 1, D] };
  const sk = { data: Float32Array.from({ length: S * D }, (_, i) => 2e-38 * (1 + ((i * 7) % 5) / 4)), dims: [1, S, 1, D] };
  const want2 = refCustomSdpa(bq, sk, vv, { startPos: S - 1, scale: 4 });
  assert.ok(want2.every(Number.isFinite));
  expectRef(() => s.customSdpa(copy(bq), copy(sk), copy(vv), { startPos: S - 1, scale: 4 }), want2, '|q| 3e38, k 2e-38, scale 4');
  expectRef(() => s2.customSdpa(copy(bq), copy(sk), copy(vv), { startPos: S - 1, scale: 4 }), want2, '|q| 3e38, k 2e-38, scale 4 (2 threads)');
});

// ===========================================================================
// 8. Detached buffers

test('8: a detached buffer is reported as detached (E_ARG), not as "0 elements"', () => {
  const s = s1;
  const cache = filledCache(s);
  const detached = (n, C = Float32Array) => {
    const a = new C(n);
    structuredClone(a.buffer, { transfer: [a.buffer] });
    assert.is(real.byteLength(a), 0, 'setup: detached');
    return a;
  };
  const out = sentinelOut();
  const w = watch({ arrays: [out.data], caches: [cache] });
  const cases = [
    ['query', () => s.customSdpa({ data: detached(16), dims: [1, 2, 2, 4] }, k(), v(), { out }), /query/],
    ['value', () => s.customSdpa(q(), k(), { data: detached(16), dims: [1, 4, 1, 4] }, { out }), /value/],
    ['out', () => s.customSdpa(q(), k(), v(), { out: { data: detached(16), dims: [1, 2, 2, 4] } }), /out/],
    ['mask (bool)', () => s.customSdpa(q(), k(), v(), { attnMask: { data: detached(8, Uint8Array), dims: [2, 4] }, out }), /attnMask/],
    ['update k', () => cache.update({ data: detached(4), dims: [1, 1, 1, 4] }, { data: new Float32Array(4), dims: [1, 1, 1, 4] }, 4), /\bkey\b/],
    ['attend q', () => cache.attend({ data: detached(8), dims: [1, 1, 2, 4] }, { startPos: 3 }), /\bquery\b/],
    ['torch key', () => s.scaledDotProductAttention(q(), { data: detached(16), dims: [1, 1, 4, 4] }, { data: new Float32Array(16), dims: [1, 1, 4, 4] }), /key/],
    ['plan query', () => s.planAttention({ data: detached(16), dims: [1, 2, 2, 4] }, k(), v()), /query/],
    ['transferred with ArrayBuffer.prototype.transfer', () => { const a = new Float32Array(16); if (a.buffer.transfer) a.buffer.transfer(); else structuredClone(a.buffer, { transfer: [a.buffer] }); return s.customSdpa({ data: a, dims: [1, 2, 2, 4] }, k(), v(), { out }); }, /query/],
  ];
  for (const [label, fn, name] of cases) {
    const e = expectCode(fn, 'E_ARG', `detached ${label}`, [/detached/i, name]);
    assert.not.match(e.message, /0 elements/, `detached ${label}: ${e.message}`);
    w.check(label);
  }
  cache.dispose();
});

// ===========================================================================
// Found while writing these (N)

test('N: a Proxy around a heap tensor, or an object inheriting from one: a tensor or an SdpaError, never a TypeError', () => {
  const s = s1;
  const ht = s.allocTensor('float32', [1, 2, 2, 4]);
  ht.data.set(Q0.data);
  const shapes = [
    ['new Proxy(heapTensor, {})', () => new Proxy(ht, {})],
    ['Object.create(heapTensor)', () => Object.create(ht)],
  ];
  const failures = [];
  for (const [shape, mk] of shapes) {
    for (const [role, call] of [
      ['query', (t) => s.customSdpa(t, k(), v())],
      ['out', (t) => s.customSdpa(q(), k(), v(), { out: t })],
      ['torch query', (t) => s.scaledDotProductAttention(t, { data: K0.data.slice(), dims: [1, 2, 2, 4] }, { data: V0.data.slice(), dims: [1, 2, 2, 4] })],
    ]) {
      const r = attempt(() => call(mk()));
      if (!r.ok && !(r.err instanceof SdpaError)) failures.push(`${shape} as ${role}: ${describeErr(r.err)}`);
      else if (r.ok && role === 'query') {
        const m = attempt(() => assertCloseTo(r.value.data, REF, ''));
        if (!m.ok) failures.push(`${shape} as query: wrong answer`);
      }
    }
  }
  ht.dispose();
  assert.ok(failures.length === 0, `non-SdpaErrors from the library:\n  ${failures.join('\n  ')}`);
});

test.run();
