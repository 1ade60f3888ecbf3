// validation.test.js: one test per rule of CONTRACT.md section 2 (plus the
// cache rules of section 3 and the section-4 variants). Every case checks
// the code, that the message names the argument, and that nothing was
// written: `out` and the cache are unchanged.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { rng, randTensor, ruleTensors, filled, expectError, expectReject, sameBits, assertClose } from './helpers.js';
import { refCustomSdpa } from './reference.js';

let sdpa, cache, cacheSnapshot, heapOut;
// customSdpa geometry: B=1 Sq=2 Hq=4 Skv=6 Hkv=2 D=8
const { rand, Q, K, V, q, k, v } = ruleTensors(7);
const t = filled;
let sentinelOut;
const freshOut = () => { sentinelOut = { data: new Float32Array(64).fill(7), dims: [1, 2, 4, 8] }; return sentinelOut; };
// cache geometry: B=1 maxSeqLen=8 Hkv=2 D=8, rows 0..3 filled
const CK = randTensor(rand, [1, 4, 2, 8]);
const CV = randTensor(rand, [1, 4, 2, 8]);
const cq = (S = 1) => t([1, S, 4, 8], 0.25);
const ckv = (S = 1) => t([1, S, 2, 8], 0.75);

test.before(async () => {
  sdpa = await createSdpa({ threads: 1 });
  cache = sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8 });
  cache.update(CK, CV, 0);
  cacheSnapshot = cache.read(0, 8);
  heapOut = sdpa.allocTensor('float32', [1, 1, 4, 8]);
  heapOut.data.fill(9);
});
test.after(() => { sdpa.dispose(); });

/** The public function names a message may start with. */
const FN_PREFIX = /^(customSdpa|scaledDotProductAttention|planAttention|createKVCache|allocTensor|createSdpa|sdpa\.(memory|reserve)|KVCache\.(update|attend|step|read|truncate|fork)|HeapTensor\.data): \S/;

/**
 * Calls fn() while counting every call into wasm that could write memory or
 * compute (the sdpa_* entry points, malloc). A JS-only rule is caught before
 * anything is copied; every other rule is C's, at the call's one entry
 * (src/wasm/api.h), after the inputs were copied into temporaries.
 */
function countWasmCalls(fn) {
  const { M } = sdpa[INTERNALS];
  const names = Object.keys(M).filter((n) => /^_sdpa_(wasm_)?(custom|kv_cache_(create|update|attend|step|read))/.test(n) || n === '_malloc');
  const real = new Map(names.map((n) => [n, M[n]]));
  const called = [];
  for (const n of names) M[n] = (...a) => { called.push(n); return real.get(n)(...a); };
  try { fn(); } finally { for (const [n, f] of real) M[n] = f; }
  return called;
}

/** Runs each case: [label, fn, code, [regex...]]; then checks that nothing was written. */
function runCases(code, cases) {
  for (const [label, fn, names] of cases) {
    freshOut();
    let err;
    const called = countWasmCalls(() => { err = expectError(fn, code, names, label); });
    assert.ok(FN_PREFIX.test(err.message), `${label}: the message starts with the function's name: ${err.message}`);
    assert.not.match(err.message, /^([\w.]+): \1:/, `${label}: the function is named once: ${err.message}`);
    if (code !== 'E_OOM') {
      const entries = called.filter((n) => n !== '_malloc');  // (temporaries, freed again)
      assert.ok(entries.length <= 1, `${label}: rejected by JS or by the call's one entry: ${called}`);
    }
    assert.ok(sentinelOut.data.every((x) => x === 7), `${label}: out was written`);
    assert.ok(heapOut.data.every((x) => x === 9), `${label}: heap out was written`);
    const now = cache.read(0, 8);
    assert.equal(now.k.data, cacheSnapshot.k.data, `${label}: cache keys changed`);
    assert.equal(now.v.data, cacheSnapshot.v.data, `${label}: cache values changed`);
  }
}

test('SdpaError: subclass of Error, name, code; C status for what JS missed', () => {
  const e = new SdpaError('E_ARG', 'x');
  assert.ok(e instanceof Error);
  assert.is(e.name, 'SdpaError');
  assert.is(e.code, 'E_ARG');
  // A call that reaches C with a wrong element count (bypassing JS checks):
  const { M, core } = sdpa[INTERNALS];
  const qp = M._malloc(64 * 4), kp = M._malloc(96 * 4), op = M._malloc(64 * 4);
  try {
    core.writeTensor(0, qp, 63, 'float32', [1, 2, 4, 8]); // len lies
    core.writeTensor(32, kp, 96, 'float32', [1, 6, 2, 8]);
    core.writeTensor(64, kp, 96, 'float32', [1, 6, 2, 8]);
    core.writeTensor(128, op, 64, 'float32', [1, 2, 4, 8]);
    core.writeOptions(0, false, null);
    // the public C entry names itself (its C name), once; its wasm entry gives the words alone, and JS its call's name
    const pub = M._sdpa_custom(core.ctx, core.slot('q'), core.slot('k'), core.slot('v'), 0, core.slot('opts'), core.slot('out'));
    const words = core.lastError().slice('sdpa_custom: '.length);
    assert.is(pub, 3);
    assert.is(core.lastError(), `sdpa_custom: ${words}`);
    const st = M._sdpa_wasm_custom(core.ctx, core.slot('q'), core.slot('k'), core.slot('v'), 0, core.slot('opts'), core.slot('out'));
    assert.is(st, 3);
    assert.is(core.lastError(), words);
    const err = expectError(() => core.checkEntry(st, 'customSdpa'), 'E_DIMS', [/^customSdpa: query\.data has 63 elements/, /64/]);
    assert.is(err.message, `customSdpa: ${words}`);
    assert.not.match(err.message, /sdpa_custom/, `the call is named once, in JS words: ${err.message}`);
    assert.is(err.status, 3);
  } finally { M._free(qp); M._free(kp); M._free(op); }
});

test('err.status: present when C decided the failure (kvCacheSize, createKVCache), absent when JS did', () => {
  const cC = [
    () => sdpa.kvCacheSize({ maxSeqLen: 0, numKvHeads: 2, headDim: 8 }),       // C's plan rules
    () => sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 0, headDim: 8 }),             // C's create rules
  ];
  for (const f of cC) {
    let err = null;
    try { f(); } catch (e) { err = e; }
    assert.ok(err instanceof SdpaError, String(err));
    assert.type(err.status, 'number', `${err.message}: a status`);
  }
  const cJS = [
    () => sdpa.kvCacheSize({ maxSeqLen: 'eight', numKvHeads: 2, headDim: 8 }), // a JS type
    () => sdpa.customSdpa(new Float64Array(64), k(), v(), { out: sentinelOut }),
  ];
  for (const f of cJS) {
    let err = null;
    try { f(); } catch (e) { err = e; }
    assert.ok(err instanceof SdpaError, String(err));
    assert.is(err.status, undefined, `${err.message}: no status`);
  }
});

test('E_ARG: missing arguments, wrong JS types, unknown options, out aliasing an input', async () => {
  const qq = q();
  const hq = sdpa.allocTensor('float32', [1, 2, 4, 8]);
  runCases('E_ARG', [
    ['missing query', () => sdpa.customSdpa(undefined, k(), v(), { out: sentinelOut }), [/query/]],
    ['missing key', () => sdpa.customSdpa(q(), undefined, v(), { out: sentinelOut }), [/key/]],
    ['missing value', () => sdpa.customSdpa(q(), k(), null, { out: sentinelOut }), [/value/]],
    ['unknown option', () => sdpa.customSdpa(q(), k(), v(), { is_causal: true, out: sentinelOut }), [/is_causal/, /isCausal/]],
    ['startPos string', () => sdpa.customSdpa(q(), k(), v(), { startPos: '1', out: sentinelOut }), [/startPos/]],
    ['isCausal non-boolean', () => sdpa.customSdpa(q(), k(), v(), { isCausal: 1, out: sentinelOut }), [/isCausal/]],
    ['scale string', () => sdpa.customSdpa(q(), k(), v(), { scale: '0.5', out: sentinelOut }), [/scale/]],
    ['dropoutP string', () => sdpa.customSdpa(q(), k(), v(), { dropoutP: '0', out: sentinelOut }), [/dropoutP/]],
    ['options not an object', () => sdpa.customSdpa(q(), k(), v(), 5), [/options/]],
    ['data a string', () => sdpa.customSdpa({ data: 'abc', dims: [1, 2, 4, 8] }, k(), v(), { out: sentinelOut }), [/query\.data/]],
    ['dims missing', () => sdpa.customSdpa({ data: Q.data }, k(), v(), { out: sentinelOut }), [/query\.dims/]],
    ['dims with a string', () => sdpa.customSdpa(q(), { data: K.data, dims: ['1', 6, 2, 8] }, v(), { out: sentinelOut }), [/key\.dims\[0\]/]],
    ['bare typed array as tensor', () => sdpa.customSdpa(Q.data, k(), v(), { out: sentinelOut }), [/query/]],
    ['dtype not a string', () => sdpa.customSdpa({ ...q(), dtype: 1 }, k(), v(), { out: sentinelOut }), [/query\.dtype/]],
    ['out aliases query', () => sdpa.customSdpa(qq, k(), v(), { out: { data: qq.data, dims: [1, 2, 4, 8] } }), [/out/, /query/]],
    ['out overlaps key', () => { const kk = k(); return sdpa.customSdpa(q(), kk, v(), { out: { data: new Float32Array(kk.data.buffer, 32, 64), dims: [1, 2, 4, 8] } }); }, [/out/, /key/]],
    ['heap out is heap query', () => sdpa.customSdpa(hq, k(), v(), { out: hq }), [/out/, /query/]],
    ['update startPos string', () => cache.update(ckv(), ckv(), '4'), [/startPos/]],
    ['step with startPos option', () => cache.step(cq(), ckv(), ckv(), 4, { startPos: 4, out: heapOut }), [/startPos/, /4th argument/]],
    ['options a Map', () => sdpa.customSdpa(q(), k(), v(), new Map([['isCausal', true]])), [/options/, /Map/]],
    ['inherited unknown option', () => sdpa.customSdpa(q(), k(), v(), Object.assign(Object.create({ is_causal: true }), { out: sentinelOut })), [/is_causal/]],
    ['createKVCache options a Map', () => sdpa.createKVCache(new Map([['maxSeqLen', 8], ['numKvHeads', 2], ['headDim', 8]])), [/Map/]],
    ['step unknown option', () => cache.step(cq(), ckv(), ckv(), 4, { causal: true, out: heapOut }), [/causal/]],
    ['attend unknown option', () => cache.attend(cq(), { startPos: 3, enableGqa: true, out: heapOut }), [/enableGqa/]],
    ['attend out aliases query', () => { const hq1 = heapOut; return cache.attend(hq1, { startPos: 3, out: hq1 }); }, [/out/, /query/]],
    ['read start string', () => cache.read('0', 1), [/start/]],
    ['read without length', () => cache.read(0), [/length/]],
    ['createKVCache without options', () => sdpa.createKVCache(), [/maxSeqLen/]],
    ['createKVCache missing headDim', () => sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2 }), [/headDim/]],
    ['createKVCache string size', () => sdpa.createKVCache({ maxSeqLen: '8', numKvHeads: 2, headDim: 8 }), [/maxSeqLen/]],
    ['createKVCache unknown field', () => sdpa.createKVCache({ max_seq_len: 8, maxSeqLen: 8, numKvHeads: 2, headDim: 8 }), [/max_seq_len/]],
    ['allocTensor without dtype', () => sdpa.allocTensor(undefined, [2]), [/dtype/]],
    ['allocTensor dims not an array', () => sdpa.allocTensor('float32', 4), [/dims/]],
    ['allocTensor dims a DataView', () => sdpa.allocTensor('float32', new DataView(new ArrayBuffer(8))), [/dims must be an array/, /DataView/]],
    ['torch unknown option', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { enable_gqa: true }), [/enable_gqa/, /enableGqa/]],
    ['torch enableGqa non-boolean', () => sdpa.planAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { enableGqa: 'yes' }), [/enableGqa/]],
  ]);
  assert.equal(qq.data, Q.data, 'aliased query unchanged');
  hq.dispose();
  await expectReject(createSdpa({ threds: 2 }), 'E_ARG', [/threds/]);
  await expectReject(createSdpa(new Map([['threads', 1]])), 'E_ARG', [/options/]);
  await expectReject(createSdpa({ threads: 0 }), 'E_ARG', [/threads/]);
  await expectReject(createSdpa({ build: 'wasm64' }), 'E_ARG', [/build/]);
  await expectReject(createSdpa({ build: 'simd', threads: 2 }), 'E_ARG', [/threads/]);
});

test('options: inherited names count (not Object.prototype junk); a heap tensor of another instance aliasing out is E_ARG', async () => {
  // An option inherited from a prototype is read, not silently dropped.
  const a = sdpa.customSdpa(q(), k(), v(), Object.create({ isCausal: true }));
  const b = sdpa.customSdpa(q(), k(), v(), { isCausal: true });
  const c = sdpa.customSdpa(q(), k(), v(), {});
  assert.equal(a.data, b.data);
  assert.not.equal(a.data, c.data);
  // Enumerable properties some script put on Object.prototype are neither options nor unknown names.
  Object.prototype.polluted = 1; // eslint-disable-line no-extend-native
  Object.prototype.isCausal = true; // eslint-disable-line no-extend-native
  try {
    assert.equal(sdpa.customSdpa(q(), k(), v(), {}).data, c.data);
    assert.equal(sdpa.customSdpa(q(), k(), v(), { isCausal: true }).data, b.data);
  } finally { delete Object.prototype.polluted; delete Object.prototype.isCausal; }
  const other = await createSdpa({ threads: 1 });
  try {
    const ot = other.allocTensor('float32', [1, 2, 4, 8]);
    ot.data.set(Q.data);
    runCases('E_ARG', [
      ['heap tensor of another instance as query, its view as out', () => sdpa.customSdpa(ot, k(), v(), { out: { data: ot.data, dims: [1, 2, 4, 8] } }), [/out/, /query/]],
      ['view of another instance as query, the heap tensor as out', () => sdpa.customSdpa({ data: ot.data, dims: [1, 2, 4, 8] }, k(), v(), { out: ot }), [/out/, /query/]],
    ]);
    assert.equal(ot.data, Q.data, 'unchanged');
  } finally { other.dispose(); }
});

/** A Float32Array over the cache's value storage, rows of D (found by its contents: row 0 then row 1 of head 0;
 * values, because a float32 page keeps its V rows as rows while its K block is key-transposed, include/sdpa.h). */
function cacheValueView(n) {
  const { core } = sdpa[INTERNALS];
  const f32 = new Float32Array(core.currentBuffer());
  const first = CV.data.subarray(0, 8);
  for (let i = 0; i + 8 <= f32.length; i++) {
    if (f32[i] !== first[0]) continue;
    let j = 1;
    while (j < 8 && f32[i + j] === first[j]) j++;
    if (j === 8 && f32[i + 8] === CV.data[16]) return new Float32Array(core.currentBuffer(), i * 4, n); // row 1, head 0
  }
  throw new Error('cache storage not found');
}

test('E_ARG: out, or an input, inside the cache storage (caught in JS, cache unchanged)', () => {
  const view = cacheValueView(32);
  const inCache = (dims) => ({ data: view.subarray(0, dims.reduce((a, b) => a * b, 1)), dims });
  runCases('E_ARG', [
    ['attend out overlaps the cache', () => cache.attend(cq(), { startPos: 3, out: { data: view, dims: [1, 1, 4, 8] } }), [/out/, /cache/]],
    ['step out overlaps the cache', () => cache.step(cq(), ckv(), ckv(), 4, { out: { data: view, dims: [1, 1, 4, 8] } }), [/out/, /cache/]],
    // include/sdpa.h: inputs must not lie inside the cache's own storage either
    ['attend q inside the cache', () => cache.attend(inCache([1, 1, 4, 8]), { startPos: 3, out: heapOut }), [/\bquery\b/, /cache/]],
    ['step q inside the cache', () => cache.step(inCache([1, 1, 4, 8]), ckv(), ckv(), 4, { out: heapOut }), [/\bquery\b/, /cache/]],
    ['step k inside the cache', () => cache.step(cq(), inCache([1, 1, 2, 8]), ckv(), 4, { out: heapOut }), [/\bkey\b/, /cache/]],
    ['update v inside the cache', () => cache.update(ckv(), inCache([1, 1, 2, 8]), 4), [/\bvalue\b/, /cache/]],
    ['attend mask inside the cache', () => cache.attend(cq(), { attnMask: inCache([1, 4]), out: heapOut }), [/attnMask/, /cache/]],
  ]);
});

test('E_RANK: q/k/v not 4-D, mask not 2-D (section 4: ranks 1-4)', () => {
  const h1 = sdpa.allocTensor('float32', [64]), h3 = sdpa.allocTensor('float32', [1, 4, 8]);
  runCases('E_RANK', [
    ['heap query 1-D', () => sdpa.customSdpa(h1, k(), v(), { out: sentinelOut }), [/query/, /rank 1/]],
    ['heap q 3-D through the cache', () => cache.step(h3, ckv(), ckv(), 4, { out: heapOut }), [/\bquery\b/, /rank 3/]],
    ['query 3-D', () => sdpa.customSdpa({ data: Q.data, dims: [2, 4, 8] }, k(), v(), { out: sentinelOut }), [/query/, /rank 3/]],
    ['key 5-D', () => sdpa.customSdpa(q(), { data: K.data, dims: [1, 1, 6, 2, 8] }, v(), { out: sentinelOut }), [/key/]],
    ['value 2-D', () => sdpa.customSdpa(q(), k(), { data: V.data, dims: [12, 8] }, { out: sentinelOut }), [/value/]],
    ['mask 3-D', () => sdpa.customSdpa(q(), k(), v(), { attnMask: t([1, 2, 6], 0), out: sentinelOut }), [/attnMask/]],
    ['mask 1-D', () => sdpa.customSdpa(q(), k(), v(), { attnMask: t([12], 0), out: sentinelOut }), [/attnMask/]],
    ['update k 3-D', () => cache.update({ data: new Float32Array(16), dims: [1, 2, 8] }, ckv(), 4), [/\bkey\b/]],
    ['attend q 3-D', () => cache.attend({ data: new Float32Array(32), dims: [1, 4, 8] }, { startPos: 3, out: heapOut }), [/\bquery\b/]],
    ['torch query 3-D', () => sdpa.scaledDotProductAttention(t([2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4])), [/query/]],
    ['torch mask 5-D', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { attnMask: t([1, 1, 1, 2, 2], 0) }), [/attnMask/]],
    ['allocTensor rank 0', () => sdpa.allocTensor('float32', []), [/dims/]],
  ]);
  h1.dispose(); h3.dispose();
});

test('E_DIMS: non-positive or non-integer dims, data length, out dims, step lengths', () => {
  const heapOut2 = sdpa.allocTensor('float32', [1, 1, 4, 8]);
  runCases('E_DIMS', [
    ['Sq = 0', () => sdpa.customSdpa({ data: new Float32Array(0), dims: [1, 0, 4, 8] }, k(), v(), { out: sentinelOut }), [/query\.dims\[1\]/]],
    ['D = 1.5', () => sdpa.customSdpa(q(), { data: K.data, dims: [1, 6, 2, 1.5] }, v(), { out: sentinelOut }), [/key\.dims\[3\]/]],
    ['negative batch', () => sdpa.customSdpa(q(), k(), { data: V.data, dims: [-1, 6, 2, 8] }, { out: sentinelOut }), [/value\.dims\[0\]/]],
    ['data length', () => sdpa.customSdpa({ data: Q.data.subarray(1), dims: [1, 2, 4, 8] }, k(), v(), { out: sentinelOut }), [/query\.data/, /63/, /64/]],
    ['out dims', () => sdpa.customSdpa(q(), k(), v(), { out: { data: new Float32Array(64).fill(7), dims: [1, 4, 2, 8] } }), [/out/]],
    ['out rank', () => sdpa.customSdpa(q(), k(), v(), { out: { data: new Float32Array(64), dims: [2, 4, 8] } }), [/out/]],
    ['heap out of another shape', () => sdpa.customSdpa(q(), k(), v(), { out: heapOut }), [/out/, /\[1, 1, 4, 8\]/, /\[1, 2, 4, 8\]/]],
    ['heap q and heap out: q rows vs k rows in a step', () => cache.step(heapOut, ckv(2), ckv(2), 4, { out: heapOut2 }), [/\bquery has 1 row\b/, /\bkey has 2\b/]],
    ['mask length', () => sdpa.customSdpa(q(), k(), v(), { attnMask: { data: new Float32Array(11), dims: [2, 6] }, out: sentinelOut }), [/attnMask/]],
    ['mask dim 0', () => sdpa.customSdpa(q(), k(), v(), { attnMask: { data: new Float32Array(0), dims: [2, 0] }, out: sentinelOut }), [/attnMask/]],
    ['update length', () => cache.update({ data: new Float32Array(15), dims: [1, 1, 2, 8] }, ckv(), 4), [/\bkey\.data/]],
    ['step q and k lengths differ', () => cache.step(cq(2), ckv(1), ckv(1), 4), [/\bquery\b/, /\bkey\b/]],
    ['read length 0', () => cache.read(0, 0), [/length/]],
    ['read length 1.5', () => cache.read(0, 1.5), [/length/]],
    ['createKVCache maxSeqLen 0', () => sdpa.createKVCache({ maxSeqLen: 0, numKvHeads: 2, headDim: 8 }), [/maxSeqLen/]],
    ['createKVCache headDim 2.5', () => sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 2.5 }), [/headDim/]],
    ['createKVCache batch -1', () => sdpa.createKVCache({ batch: -1, maxSeqLen: 8, numKvHeads: 2, headDim: 8 }), [/batch/]],
    ['allocTensor dim 0', () => sdpa.allocTensor('float32', [2, 0]), [/dims\[1\]/]],
    ['torch L = 0', () => sdpa.scaledDotProductAttention({ data: new Float32Array(0), dims: [1, 2, 0, 4] }, t([1, 2, 2, 4]), t([1, 2, 2, 4])), [/query/]],
  ]);
  heapOut2.dispose();
});

test('E_DIMS before any copy: a typed array JS copies into wasm memory holds what its dims need; a rejected call never grows the heap', async () => {
  // Each case on a fresh instance (a 64 MiB heap, part of it free): an array of
  // 64 MiB and a little, copied (or an out temporary of its size made) before
  // C's entry checks it, would grow the heap for good.
  const BIG_BYTES = 64 * 2 ** 20 + 256;
  const rand = rng(41);
  const r = (dims) => randTensor(rand, dims);
  const bool = (dims) => ({ data: new Uint8Array(dims.reduce((a, b) => a * b, 1)).fill(1), dims });
  const rot = () => ({ cos: r([16, 4]), sin: r([16, 4]) });
  const long = (x) => { const a = new x.data.constructor(BIG_BYTES / x.data.BYTES_PER_ELEMENT); a.set(x.data); return { data: a, dims: x.dims }; };
  const same = (x) => x;
  // [label, the argument's name in the message, call(s, cache, wrap): wrap is applied to that one argument]
  const cases = [
    ['customSdpa query', 'query', (s, c, w) => s.customSdpa(w(q()), k(), v())],
    ['customSdpa key', 'key', (s, c, w) => s.customSdpa(q(), w(k()), v())],
    ['customSdpa value', 'value', (s, c, w) => s.customSdpa(q(), k(), w(v()))],
    ['customSdpa float32 attnMask', 'attnMask', (s, c, w) => s.customSdpa(q(), k(), v(), { attnMask: w(r([2, 6])) })],
    ['customSdpa bool attnMask', 'attnMask', (s, c, w) => s.customSdpa(q(), k(), v(), { attnMask: w(bool([2, 6])) })],
    ['customSdpa sinks', 'sinks', (s, c, w) => s.customSdpa(q(), k(), v(), { sinks: w(r([4])) })],
    ['customSdpa out', 'out', (s, c, w) => s.customSdpa(q(), k(), v(), { out: w({ data: new Float32Array(64), dims: [1, 2, 4, 8] }) })],
    ['update key', 'key', (s, c, w) => c.update(w(ckv()), ckv())],
    ['update value', 'value', (s, c, w) => c.update(ckv(), w(ckv()))],
    ['update rotary.cos', 'rotary.cos', (s, c, w) => { const o = rot(); c.update(ckv(), ckv(), { rotary: { cos: w(o.cos), sin: o.sin } }); }],
    ['update rotary.sin', 'rotary.sin', (s, c, w) => { const o = rot(); c.update(ckv(), ckv(), { rotary: { cos: o.cos, sin: w(o.sin) } }); }],
    ['step query', 'query', (s, c, w) => c.step(w(cq()), ckv(), ckv())],
    ['step key', 'key', (s, c, w) => c.step(cq(), w(ckv()), ckv())],
    ['step value', 'value', (s, c, w) => c.step(cq(), ckv(), w(ckv()))],
    ['step out', 'out', (s, c, w) => c.step(cq(), ckv(), ckv(), { out: w({ data: new Float32Array(32), dims: [1, 1, 4, 8] }) })],
    ['step treeMask', 'treeMask', (s, c, w) => c.step(cq(), ckv(), ckv(), { treeMask: w(bool([1, 1])) })],
    ['step rotary.cos', 'rotary.cos', (s, c, w) => { const o = rot(); c.step(cq(), ckv(), ckv(), { rotary: { cos: w(o.cos), sin: o.sin } }); }],
    ['attend query', 'query', (s, c, w) => c.attend(w(cq()))],
    ['attend out', 'out', (s, c, w) => c.attend(cq(), { out: w({ data: new Float32Array(32), dims: [1, 1, 4, 8] }) })],
    ['attend sinks', 'sinks', (s, c, w) => c.attend(cq(), { sinks: w(r([4])) })],
    ['attendMany query', 'items[0]: query', (s, c, w) => s.attendMany([{ cache: c, q: w(cq()) }])],
    ['attendMany out', 'items[0]: out', (s, c, w) => s.attendMany([{ cache: c, q: cq(), out: w({ data: new Float32Array(32), dims: [1, 1, 4, 8] }) }])],
    ['stepMany key', 'items[0]: key', (s, c, w) => s.stepMany([{ cache: c, q: cq(), k: w(ckv()), v: ckv() }])],
    ['stepMany out', 'items[0]: out', (s, c, w) => s.stepMany([{ cache: c, q: cq(), k: ckv(), v: ckv(), out: w({ data: new Float32Array(32), dims: [1, 1, 4, 8] }) }])],
  ];
  for (const [label, name, call] of cases) {
    const s = await createSdpa({ threads: 1 });
    try {
      const c = s.createKVCache({ maxSeqLen: 16, numKvHeads: 2, headDim: 8 });
      c.update(ckv(4), ckv(4), 0);
      call(s, c, same);  // (the call with every array as its dims need works: the long one is its only fault)
      const heap0 = s.memory().heapBytes, rows0 = c.length, before = c.read(0, rows0);
      let n = 0, dims = null;
      const wrap = (x) => { const y = long(x); n = y.data.length; dims = x.dims; return y; };
      const fn = label.split(' ')[0].replace(/^(update|step|attend)$/, 'KVCache.$1').replace(/^(attendMany|stepMany)$/, 'sdpa.$1');
      const err = expectError(() => call(s, c, wrap), 'E_DIMS', [], label);
      const need = dims.reduce((a, b) => a * b, 1);
      assert.is(err.message, `${fn}: ${name}.data has ${n} elements but dims [${dims.join(', ')}] need ${need}`, `${label}: C's words`);
      assert.is(s.memory().heapBytes, heap0, `${label}: the heap did not grow (${heap0} -> ${s.memory().heapBytes})`);
      assert.is(c.length, rows0, `${label}: no row written`);
      const after = c.read(0, rows0);
      assert.ok(sameBits(after.k.data, before.k.data) && sameBits(after.v.data, before.v.data), `${label}: the cache is unchanged`);
    } finally { s.dispose(); }
  }
});

test('E_DIMS, not E_OOM: an array of 2^30 + 8 floats for dims of 64 (its copy, 4 GiB, cannot fit the heap)', async () => {
  const huge = new Float32Array(2 ** 30 + 8);  // (4 GiB never written: its pages are never touched)
  const s = await createSdpa({ threads: 1 });
  try {
    const c = s.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8 });
    const heap0 = s.memory().heapBytes;
    const words = (name, dims, need) => `${name}.data has ${huge.length} elements but dims [${dims.join(', ')}] need ${need}`;
    let e = expectError(() => s.customSdpa({ data: huge, dims: [1, 2, 4, 8] }, k(), v()), 'E_DIMS');
    assert.is(e.message, `customSdpa: ${words('query', [1, 2, 4, 8], 64)}`);
    e = expectError(() => s.customSdpa(q(), k(), v(), { out: { data: huge, dims: [1, 2, 4, 8] } }), 'E_DIMS');
    assert.is(e.message, `customSdpa: ${words('out', [1, 2, 4, 8], 64)}`);
    e = expectError(() => c.update({ data: huge, dims: [1, 1, 2, 8] }, ckv()), 'E_DIMS');
    assert.is(e.message, `KVCache.update: ${words('key', [1, 1, 2, 8], 16)}`);
    e = expectError(() => s.stepMany([{ cache: c, q: cq(), k: ckv(), v: ckv(), out: { data: huge, dims: [1, 1, 4, 8] } }]), 'E_DIMS');
    assert.is(e.message, `sdpa.stepMany: items[0]: ${words('out', [1, 1, 4, 8], 32)}`);
    // a 0-heads query needs no element: C's E_HEADS for it, before any copy
    e = expectError(() => s.customSdpa({ data: huge, dims: [1, 2, 0, 8] }, k(), v()), 'E_HEADS');
    assert.is(e.message, 'customSdpa: query has 0 heads (dims [1, 2, 0, 8]); expected at least 1');
    assert.is(s.memory().heapBytes, heap0, 'the heap did not grow');
    assert.is(c.length, 0, 'no row written');
  } finally { s.dispose(); }
});

test('E_DTYPE: q/k/v/out not float32, dtype field contradicting data, cache/alloc dtype', () => {
  const boolOut = sdpa.allocTensor('bool', [1, 2, 4, 8]);
  runCases('E_DTYPE', [
    ['query Float64Array', () => sdpa.customSdpa({ data: new Float64Array(64), dims: [1, 2, 4, 8] }, k(), v(), { out: sentinelOut }), [/query/, /Float64Array/]],
    ['key plain Array', () => sdpa.customSdpa(q(), { data: Array.from(K.data), dims: [1, 6, 2, 8] }, v(), { out: sentinelOut }), [/key/, /Array/]],
    ['value bool', () => sdpa.customSdpa(q(), k(), { data: new Uint8Array(96), dims: [1, 6, 2, 8] }, { out: sentinelOut }), [/value/]],
    ['dtype contradicts data', () => sdpa.customSdpa({ ...q(), dtype: 'float16' }, k(), v(), { out: sentinelOut }), [/query\.dtype/, /float16/]],
    ['out Float64Array', () => sdpa.customSdpa(q(), k(), v(), { out: { data: new Float64Array(64), dims: [1, 2, 4, 8] } }), [/out/]],
    ['out bool heap tensor', () => sdpa.customSdpa(q(), k(), v(), { out: boolOut }), [/out/]],
    ['update k Int32Array', () => cache.update({ data: new Int32Array(16), dims: [1, 1, 2, 8] }, ckv(), 4), [/\bkey\b/]],
    ['cache dtype bfloat16', () => sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8, dtype: 'bfloat16' }), [/dtype/, /bfloat16/, /int8/]],
    ['allocTensor int8', () => sdpa.allocTensor('int8', [4]), [/dtype/, /q8_0/]],
    ['torch key Int16Array', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), { data: new Int16Array(16), dims: [1, 2, 2, 4] }, t([1, 2, 2, 4])), [/key/]],
    ['mask dtype field contradicts its data', () => sdpa.customSdpa(q(), k(), v(), { attnMask: { data: new Float32Array(12), dims: [2, 6], dtype: 'bool' }, out: sentinelOut }), [/attnMask\.dtype/]],
  ]);
  boolOut.dispose();
});

test('E_BATCH: key/value/out batch differs from query (no broadcast in the fast op)', () => {
  runCases('E_BATCH', [
    ['key batch', () => sdpa.customSdpa(q(), t([2, 6, 2, 8]), v(), { out: sentinelOut }), [/key/, /batch/]],
    ['value batch', () => sdpa.customSdpa(q(), k(), t([2, 6, 2, 8]), { out: sentinelOut }), [/value/, /batch/]],
    ['out batch', () => sdpa.customSdpa(q(), k(), v(), { out: { data: new Float32Array(128), dims: [2, 2, 4, 8] } }), [/out/, /batch/]],
    ['update k batch', () => cache.update(t([2, 1, 2, 8]), t([2, 1, 2, 8]), 4), [/\bkey\b/, /batch/]],
    ['attend q batch', () => cache.attend(t([2, 1, 4, 8]), { startPos: 3 }), [/\bquery\b/, /batch/]],
    ['torch key batch 3 vs 2', () => sdpa.scaledDotProductAttention(t([2, 2, 2, 4]), t([3, 2, 2, 4]), t([2, 2, 2, 4])), [/key/, /batch/]],
  ]);
});

test('E_HEADS: zero heads, Hkv > Hq, Hq % Hkv, key heads != value heads', () => {
  const e = expectError(() => sdpa.customSdpa(t([1, 2, 8, 8]), t([1, 6, 3, 8]), t([1, 6, 3, 8]), { out: { data: new Float32Array(128), dims: [1, 2, 8, 8] } }), 'E_HEADS');
  assert.is(e.message, 'customSdpa: key has 3 heads but query has 8; query heads must be a multiple of key heads (GQA)');
  runCases('E_HEADS', [
    ['GQA 8/3', () => sdpa.customSdpa(t([1, 2, 8, 8]), t([1, 6, 3, 8]), t([1, 6, 3, 8])), [/key has 3 heads/]],
    ['Hkv > Hq', () => sdpa.customSdpa(q(), t([1, 6, 8, 8]), t([1, 6, 8, 8]), { out: sentinelOut }), [/key/]],
    ['key heads != value heads', () => sdpa.customSdpa(q(), k(), t([1, 6, 4, 8]), { out: sentinelOut }), [/value/]],
    ['query with 0 heads', () => sdpa.customSdpa({ data: new Float32Array(0), dims: [1, 2, 0, 8] }, k(), v()), [/query/, /0 heads/]],
    ['query and out with 0 heads', () => sdpa.customSdpa({ data: new Float32Array(0), dims: [1, 2, 0, 8] }, k(), v(), { out: { data: new Float32Array(0), dims: [1, 2, 0, 8] } }), [/0 heads/]],
    ['key with 0 heads', () => sdpa.customSdpa(q(), { data: new Float32Array(0), dims: [1, 6, 0, 8] }, v(), { out: sentinelOut }), [/key/]],
    ['cache numKvHeads 0', () => sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 0, headDim: 8 }), [/numKvHeads/]],
    ['update k heads', () => cache.update(t([1, 1, 4, 8]), t([1, 1, 4, 8]), 4), [/\bkey\b/, /numKvHeads/]],
    ['attend q 3 heads over 2', () => cache.attend(t([1, 1, 3, 8]), { startPos: 3 }), [/\bquery\b/]],
    ['torch 4 over 2 without enableGqa', () => sdpa.scaledDotProductAttention(t([1, 4, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4])), [/key/, /enableGqa/]],
    ['torch 4 over 3 with enableGqa', () => sdpa.scaledDotProductAttention(t([1, 4, 2, 4]), t([1, 3, 2, 4]), t([1, 3, 2, 4]), { enableGqa: true }), [/key/]],
  ]);
});

test('E_HEAD_DIM: query, key and value head dims differ', () => {
  runCases('E_HEAD_DIM', [
    ['key D', () => sdpa.customSdpa(q(), t([1, 6, 2, 4]), v(), { out: sentinelOut }), [/key/, /head dim/]],
    ['value D', () => sdpa.customSdpa(q(), k(), t([1, 6, 2, 16]), { out: sentinelOut }), [/value/]],
    ['update k D', () => cache.update(t([1, 1, 2, 4]), t([1, 1, 2, 4]), 4), [/\bkey\b/, /headDim/]],
    ['attend q D', () => cache.attend(t([1, 1, 4, 4]), { startPos: 3 }), [/\bquery\b/]],
    ['torch key E', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 8]), t([1, 2, 2, 4])), [/key/]],
  ]);
});

test('E_KV_LEN: key and value sequence lengths differ', () => {
  runCases('E_KV_LEN', [
    ['customSdpa', () => sdpa.customSdpa(q(), k(), t([1, 5, 2, 8]), { out: sentinelOut }), [/value/, /5/]],
    ['update', () => cache.update(ckv(2), ckv(1), 4), [/\bvalue\b/]],
    ['step', () => cache.step(cq(1), ckv(1), ckv(2), 4, { out: heapOut }), [/\bvalue\b/]],
    ['torch', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 3, 4]), t([1, 2, 2, 4])), [/value/]],
  ]);
});

test('E_START_POS: not a non-negative integer; startPos + Sq > Skv without a mask', () => {
  runCases('E_START_POS', [
    ['negative', () => sdpa.customSdpa(q(), k(), v(), { startPos: -1, out: sentinelOut }), [/startPos/]],
    ['fractional', () => sdpa.customSdpa(q(), k(), v(), { startPos: 1.5, out: sentinelOut }), [/startPos/]],
    ['NaN', () => sdpa.customSdpa(q(), k(), v(), { startPos: NaN, out: sentinelOut }), [/startPos/]],
    ['past the keys', () => sdpa.customSdpa(q(), k(), v(), { startPos: 5, out: sentinelOut }), [/startPos/, /6/]],
    ['update negative', () => cache.update(ckv(), ckv(), -2), [/startPos/]],
    ['attend past maxSeqLen', () => cache.attend(cq(2), { startPos: 7 }), [/startPos/]],
    ['step fractional', () => cache.step(cq(), ckv(), ckv(), 0.5, { out: heapOut }), [/startPos/]],
    ['read negative start', () => cache.read(-1, 1), [/start/]],
    // the cache holds rows 0..3: a write may not leave a hole (CONTRACT.md section 3)
    ['update leaving a hole', () => cache.update(ckv(), ckv(), 5), [/startPos 5/, /hole/, /length/]],
    ['step leaving a hole', () => cache.step(cq(), ckv(), ckv(), 6, { isCausal: true, out: heapOut }), [/startPos 6/, /hole/]],
    ['attend without startPos, q longer than the rows written', () => cache.attend(cq(5), { isCausal: true }), [/5 rows/, /cache\.length/]],
    // rows 4.. were never written: without a mask a query row may not sit there (a mask's N columns may reach them)
    ['attend a row past the rows written', () => cache.attend(cq(1), { startPos: 4 }), [/startPos 4/, /4 rows written/, /cache\.length/]],
    ['attend two rows, the last past the rows written', () => cache.attend(cq(2), { startPos: 3, isCausal: false }), [/= 5/, /4 rows written/]],
    ['truncate negative', () => cache.truncate(-1), [/length/]],
  ]);
  // With a mask startPos has no effect, so it may exceed Skv.
  const mask = t([2, 6], 0);
  for (let i = 0; i < 12; i++) mask.data[i] = i % 5 === 1 ? -Infinity : (i % 3) * 0.5;
  const out = sdpa.customSdpa(q(), k(), v(), { startPos: 100, attnMask: mask });
  assert.equal(out.dims, [1, 2, 4, 8]);
  assert.ok(sameBits(out.data, sdpa.customSdpa(q(), k(), v(), { startPos: 0, attnMask: mask }).data), 'the same as at startPos 0');
  assertClose(out.data, refCustomSdpa(q(), k(), v(), { attnMask: mask }), 'startPos 100 with a mask');
});

test('E_CAPACITY: cache writes and reads past maxSeqLen', () => {
  runCases('E_CAPACITY', [
    ['update past the end', () => cache.update(ckv(5), ckv(5), 4), [/startPos/, /maxSeqLen/]],
    ['append past the end', () => cache.update(ckv(5), ckv(5)), [/startPos/, /maxSeqLen/]],
    ['step past the end', () => cache.step(cq(5), ckv(5), ckv(5), 4, { isCausal: true }), [/maxSeqLen/]],
    ['step past the end with a mask', () => cache.step(cq(5), ckv(5), ckv(5), 4, { attnMask: t([5, 8], 0) }), [/maxSeqLen/]],
    ['truncate past the rows written', () => cache.truncate(5), [/length/, /4 rows written/]],
    ['read past the end', () => cache.read(6, 3), [/start/, /maxSeqLen/]],
  ]);
});

test('E_MASK_DTYPE: mask not float32 or bool', () => {
  runCases('E_MASK_DTYPE', [
    ['Float64Array', () => sdpa.customSdpa(q(), k(), v(), { attnMask: { data: new Float64Array(12), dims: [2, 6] }, out: sentinelOut }), [/attnMask/]],
    ['Int32Array', () => sdpa.customSdpa(q(), k(), v(), { attnMask: { data: new Int32Array(12), dims: [2, 6] }, out: sentinelOut }), [/attnMask/]],
    ['plain Array', () => sdpa.customSdpa(q(), k(), v(), { attnMask: { data: new Array(12).fill(0), dims: [2, 6] }, out: sentinelOut }), [/attnMask/]],
    ['attend Int8Array', () => cache.attend(cq(), { attnMask: { data: new Int8Array(4), dims: [1, 4] }, out: heapOut }), [/attnMask/]],
    ['torch Uint16Array', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { attnMask: { data: new Uint16Array(4), dims: [2, 2] } }), [/attnMask/]],
  ]);
});

test('E_MASK_SHAPE: mask not exactly [Sq, N] with N <= Skv; section 4: not broadcastable', () => {
  runCases('E_MASK_SHAPE', [
    ['rows != Sq', () => sdpa.customSdpa(q(), k(), v(), { attnMask: t([3, 6], 0), out: sentinelOut }), [/attnMask/]],
    ['N > Skv', () => sdpa.customSdpa(q(), k(), v(), { attnMask: t([2, 7], 0), out: sentinelOut }), [/attnMask/]],
    ['broadcast row', () => sdpa.customSdpa(q(), k(), v(), { attnMask: t([1, 6], 0), out: sentinelOut }), [/attnMask/]],
    ['attend N > maxSeqLen', () => cache.attend(cq(), { attnMask: t([1, 9], 0), out: heapOut }), [/attnMask/]],
    ['step rows != Sq', () => cache.step(cq(), ckv(), ckv(), 4, { attnMask: t([2, 5], 0), out: heapOut }), [/attnMask/]],
    ['torch [3, S] vs L = 2', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { attnMask: t([3, 2], 0) }), [/attnMask/]],
    ['torch heads 3 vs 2', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { attnMask: t([3, 2, 2], 0) }), [/attnMask/]],
  ]);
});

test('E_MASK_CAUSAL: a mask together with isCausal', () => {
  runCases('E_MASK_CAUSAL', [
    ['customSdpa', () => sdpa.customSdpa(q(), k(), v(), { attnMask: t([2, 6], 0), isCausal: true, out: sentinelOut }), [/attnMask/, /isCausal/]],
    ['attend', () => cache.attend(cq(), { attnMask: t([1, 4], 0), isCausal: true, out: heapOut }), [/isCausal/]],
    ['step', () => cache.step(cq(), ckv(), ckv(), 4, { attnMask: t([1, 5], 0), isCausal: true, out: heapOut }), [/isCausal/]],
    ['torch', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { attnMask: t([2, 2], 0), isCausal: true }), [/isCausal/]],
  ]);
});

test('E_DROPOUT: dropoutP not 0', () => {
  runCases('E_DROPOUT', [
    ['0.1', () => sdpa.customSdpa(q(), k(), v(), { dropoutP: 0.1, out: sentinelOut }), [/dropoutP/]],
    ['NaN', () => sdpa.customSdpa(q(), k(), v(), { dropoutP: NaN, out: sentinelOut }), [/dropoutP/]],
    ['step', () => cache.step(cq(), ckv(), ckv(), 4, { dropoutP: 0.5, out: heapOut }), [/dropoutP/]],
    ['torch 0.5', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { dropoutP: 0.5 }), [/dropoutP/]],
  ]);
  const zero = sdpa.customSdpa(q(), k(), v(), { dropoutP: 0, isCausal: true });
  assert.ok(sameBits(zero.data, sdpa.customSdpa(q(), k(), v(), { isCausal: true }).data), 'dropoutP: 0 is accepted and changes nothing');
});

test('E_SCALE: not finite > 0 (section 4: not finite)', () => {
  runCases('E_SCALE', [
    ['0', () => sdpa.customSdpa(q(), k(), v(), { scale: 0, out: sentinelOut }), [/scale/]],
    ['negative', () => sdpa.customSdpa(q(), k(), v(), { scale: -1, out: sentinelOut }), [/scale/]],
    ['Infinity', () => sdpa.customSdpa(q(), k(), v(), { scale: Infinity, out: sentinelOut }), [/scale/]],
    ['NaN', () => sdpa.customSdpa(q(), k(), v(), { scale: NaN, out: sentinelOut }), [/scale/]],
    ['float32 overflow', () => sdpa.customSdpa(q(), k(), v(), { scale: 1e39, out: sentinelOut }), [/scale/]],
    ['attend 0', () => cache.attend(cq(), { startPos: 3, scale: 0, out: heapOut }), [/scale/]],
    ['torch Infinity', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { scale: Infinity }), [/scale/]],
    ['torch NaN', () => sdpa.planAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { scale: NaN }), [/scale/]],
  ]);
});

test('E_DISPOSED: heap tensors, caches and instances; second dispose is a no-op', async () => {
  const ht = sdpa.allocTensor('float32', [1, 1, 4, 8]);
  ht.dispose();
  ht.dispose();
  assert.ok(ht.disposed);
  const c2 = sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8 });
  c2.dispose();
  c2.dispose();
  const tk = sdpa.allocTensor('float32', [1, 2, 2, 4]), tm = sdpa.allocTensor('bool', [2, 2]), tv = sdpa.allocTensor('float32', [1, 1, 2, 8]);
  tk.dispose(); tm.dispose(); tv.dispose();
  runCases('E_DISPOSED', [
    ['reading .data', () => ht.data, [/disposed/]],
    ['disposed q', () => cache.attend(ht, { startPos: 3, out: heapOut }), [/\bquery\b/, /disposed/]],
    ['disposed out', () => sdpa.customSdpa(t([1, 1, 4, 8]), k(), v(), { out: ht }), [/out/]],
    ['cache update', () => c2.update(ckv(), ckv(), 0), [/cache/]],
    ['cache attend', () => c2.attend(cq(), { startPos: 0 }), [/cache/]],
    ['cache step', () => c2.step(cq(), ckv(), ckv(), 0), [/cache/]],
    ['cache read', () => c2.read(0, 1), [/cache/]],
    ['disposed mask', () => sdpa.customSdpa(q(), k(), v(), { attnMask: tm, out: sentinelOut }), [/attnMask/]],
    ['torch disposed key', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), tk, t([1, 2, 2, 4])), [/^scaledDotProductAttention: key/]],
    ['torch disposed value', () => sdpa.scaledDotProductAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), tk), [/value/]],
    ['plan with a disposed mask', () => sdpa.planAttention(t([1, 2, 2, 4]), t([1, 2, 2, 4]), t([1, 2, 2, 4]), { attnMask: tm }), [/attnMask/]],
    ['update disposed v', () => cache.update(ckv(), tv, 4), [/\bvalue\b/]],
  ]);
  const other = await createSdpa({ threads: 1 });
  const oc = other.createKVCache({ maxSeqLen: 4, numKvHeads: 1, headDim: 4 });
  const ot = other.allocTensor('float32', [4]);
  other.dispose();
  other.dispose();
  assert.ok(other.disposed && oc.disposed && ot.disposed, 'dispose() disposes caches and heap tensors');
  expectError(() => other.customSdpa(t([1, 1, 1, 4]), t([1, 1, 1, 4]), t([1, 1, 1, 4])), 'E_DISPOSED', [/instance/]);
  expectError(() => other.createKVCache({ maxSeqLen: 4, numKvHeads: 1, headDim: 4 }), 'E_DISPOSED');
  expectError(() => other.allocTensor('float32', [4]), 'E_DISPOSED');
  expectError(() => other.scaledDotProductAttention(t([1, 1, 1, 4]), t([1, 1, 1, 4]), t([1, 1, 1, 4])), 'E_DISPOSED');
  expectError(() => other.planAttention(t([1, 1, 1, 4]), t([1, 1, 1, 4]), t([1, 1, 1, 4])), 'E_DISPOSED');
  expectError(() => oc.step(t([1, 1, 1, 4]), t([1, 1, 1, 4]), t([1, 1, 1, 4]), 0), 'E_DISPOSED');
  expectError(() => ot.data, 'E_DISPOSED');
});

test('E_OOM: more than the heap can hold; nothing half-made is left', () => {
  runCases('E_OOM', [
    ['cache whose page (2 x 64 rows x 2^22 floats) is 2 GiB', () => sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: 1 << 22 }), [/cache/, /page/]],
    ['cache whose page table is 2 GiB', () => sdpa.createKVCache({ batch: 1 << 10, maxSeqLen: 1 << 30, numKvHeads: 1, headDim: 1 }), [/cache/, /table/]],
    ['reserve more than the heap', () => sdpa.reserve(8 * 1024 ** 3), [/reserve/, /4 GiB/]],
    ['tensor of 16 GiB', () => sdpa.allocTensor('float32', [1 << 22, 1024]), [/allocTensor/]],
  ]);
});

test('several broken rules: the first in table order is reported (JS-only rules first)', () => {
  const causalMask = () => ({ attnMask: t([2, 6], 0), isCausal: true });  // (E_MASK_CAUSAL: C's)
  expectError(() => sdpa.customSdpa({ data: Q.data, dims: [2, 4, 8] }, k(), v(), causalMask()), 'E_RANK');
  expectError(() => sdpa.customSdpa(q(), t([1, 6, 3, 8]), t([1, 6, 3, 8]), { scale: 0, is_causal: 1 }), 'E_ARG');
  expectError(() => sdpa.customSdpa(q(), t([1, 6, 3, 8]), t([1, 6, 3, 8]), causalMask()), 'E_HEADS');
  expectError(() => sdpa.customSdpa(q(), t([2, 6, 2, 4]), v(), causalMask()), 'E_BATCH');
  // a JS-only rule (an option value C cannot be given as JS has it: dropoutP, scale as a float32) ranks before every C rule
  expectError(() => sdpa.customSdpa({ data: Q.data, dims: [2, 4, 8] }, k(), v(), { dropoutP: 0.5 }), 'E_DROPOUT');
  expectError(() => sdpa.customSdpa(q(), t([2, 6, 2, 4]), v(), { scale: 0 }), 'E_SCALE');
  expectError(() => sdpa.customSdpa(q(), k(), v(), { startPos: 5, attnMask: t([2, 7], 0), isCausal: true }), 'E_MASK_SHAPE');
  expectError(() => sdpa.customSdpa(q(), k(), v(), { startPos: -1, attnMask: t([2, 6], 0) }), 'E_START_POS');
  // (a typed array's kind is JS's: it ranks before C's startPos rule)
  expectError(() => sdpa.customSdpa(q(), k(), v(), { startPos: -1, attnMask: { data: new Int8Array(12), dims: [2, 6] } }), 'E_MASK_DTYPE');
  expectError(() => cache.step(cq(2), ckv(1), ckv(1), 9, {}), 'E_DIMS');
  expectError(() => cache.update(t([1, 1, 3, 8]), t([1, 1, 3, 4]), 8), 'E_HEADS');
  expectError(() => sdpa.customSdpa({ data: new Float32Array(0), dims: [1, 2, 0, 8] }, k(), v(), { out: freshOut() }), 'E_DIMS', [/out/]);
  expectError(() => sdpa.customSdpa(q(), { data: new Float32Array(0), dims: [1, 6, 0, 8] }, t([2, 6, 2, 8])), 'E_BATCH', [/value/]);
  // a typed array JS copies into wasm memory holding other than its dims need is JS's (E_DIMS before C's E_RANK
  // of the key); a view of wasm memory is checked in place by C, in table order (E_RANK); the words are the same
  const h = sdpa.allocTensor('float32', [128]);
  const key3 = () => ({ data: K.data, dims: [6, 2, 8] });
  expectError(() => sdpa.customSdpa({ data: new Float32Array(128), dims: [1, 2, 4, 8] }, key3(), v()), 'E_DIMS', [/query\.data has 128 elements/]);
  expectError(() => sdpa.customSdpa({ data: h.data, dims: [1, 2, 4, 8] }, key3(), v()), 'E_RANK', [/key has rank 3/]);
  const byC = expectError(() => sdpa.customSdpa({ data: h.data, dims: [1, 2, 4, 8] }, k(), v()), 'E_DIMS');
  const byJs = expectError(() => sdpa.customSdpa({ data: new Float32Array(128), dims: [1, 2, 4, 8] }, k(), v()), 'E_DIMS');
  assert.is(byJs.message, byC.message, "JS's words are C's");
  h.dispose();
});

test.run();
