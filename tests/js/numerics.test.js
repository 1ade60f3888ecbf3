// numerics.test.js: customSdpa against the float64 reference of
// tests/js/reference.js, over random seeded shapes and cases modelled on
// ExecuTorch's custom_sdpa / sdpa_with_kv_cache tests.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa } from '../../js/index.js';
import { refCustomSdpa } from './reference.js';
import { rng, randTensor, randInt, assertClose, sameBits } from './helpers.js';

let sdpa;
test.before(async () => { sdpa = await createSdpa(); });
test.after(() => { sdpa.dispose(); });

const pick = (rand, xs) => xs[Math.floor(rand() * xs.length)];

function check(label, q, k, v, opts = {}) {
  const got = sdpa.customSdpa(q, k, v, opts);
  assert.equal(got.dims, q.dims, `${label}: dims`);
  assertClose(got.data, refCustomSdpa(q, k, v, opts), label);
  return got;
}

/** A float mask [Sq, N] with some -inf entries (and every row keeping one key open). */
function floatMask(rand, Sq, N) {
  const data = new Float32Array(Sq * N);
  for (let i = 0; i < Sq; i++) {
    for (let t = 0; t < N; t++) data[i * N + t] = rand() < 0.25 ? -Infinity : (rand() * 2 - 1) * 2;
  }
  return { data, dims: [Sq, N] };
}

test('random shapes, options and masks (seeded)', () => {
  const rand = rng(20240601);
  for (let n = 0; n < 60; n++) {
    const B = randInt(rand, 1, 2), Hkv = randInt(rand, 1, 3), r = pick(rand, [1, 2, 3, 4]);
    const Hq = Hkv * r, D = pick(rand, [1, 3, 4, 5, 8, 15, 16, 17, 33, 64]);
    const Sq = randInt(rand, 1, 9), sp = randInt(rand, 0, 12), Skv = sp + Sq + randInt(rand, 0, 6);
    const q = randTensor(rand, [B, Sq, Hq, D], 2);
    const k = randTensor(rand, [B, Skv, Hkv, D], 2);
    const v = randTensor(rand, [B, Skv, Hkv, D]);
    const opts = { startPos: sp };
    const kind = pick(rand, ['none', 'causal', 'float', 'bool']);
    if (kind === 'causal') opts.isCausal = true;
    if (kind === 'float') opts.attnMask = floatMask(rand, Sq, randInt(rand, 1, Skv));
    if (kind === 'bool') {
      const N = randInt(rand, 1, Skv);
      opts.attnMask = { data: Uint8Array.from({ length: Sq * N }, () => (rand() < 0.7 ? 1 : 0)), dims: [Sq, N] };
    }
    if (rand() < 0.3) opts.scale = 0.05 + rand();
    check(`case ${n} B${B} Sq${Sq} Hq${Hq}/${Hkv} D${D} sp${sp} Skv${Skv} ${kind}`, q, k, v, opts);
  }
});

test('decode with startPos 0..3 (ExecuTorch sdpa_with_kv_cache style)', () => {
  const rand = rng(11);
  const maxSeqLen = 10, Hq = 8, Hkv = 8, D = 16;
  const k = randTensor(rand, [1, maxSeqLen, Hkv, D]);
  const v = randTensor(rand, [1, maxSeqLen, Hkv, D]);
  for (let sp = 0; sp <= 3; sp++) {
    const q = randTensor(rand, [1, 1, Hq, D]);
    check(`decode sp=${sp} causal`, q, k, v, { startPos: sp, isCausal: true });
    check(`decode sp=${sp} non-causal`, q, k, v, { startPos: sp });
  }
});

test('sliding-window float mask at startPos 575', () => {
  const rand = rng(575);
  const Skv = 1024, Hq = 8, Hkv = 4, D = 32, sp = 575, window = 256;
  const q = randTensor(rand, [1, 1, Hq, D]);
  const k = randTensor(rand, [1, Skv, Hkv, D]);
  const v = randTensor(rand, [1, Skv, Hkv, D]);
  const N = sp + 1;
  const mask = { data: new Float32Array(N), dims: [1, N] };
  for (let t = 0; t < N; t++) mask.data[t] = t <= sp - window ? -Infinity : 0;
  const a = check('sliding window', q, k, v, { startPos: sp, attnMask: mask });
  const b = sdpa.customSdpa(q, k, v, { startPos: 0, attnMask: mask });
  assert.ok(sameBits(a.data, b.data), 'startPos has no effect with a mask');
});

test('speculative decode: 17 tokens after 130 cached', () => {
  const rand = rng(130);
  const Skv = 256, Hq = 8, Hkv = 4, D = 64;
  const q = randTensor(rand, [1, 17, Hq, D]);
  const k = randTensor(rand, [1, Skv, Hkv, D]);
  const v = randTensor(rand, [1, Skv, Hkv, D]);
  check('speculative causal', q, k, v, { startPos: 130, isCausal: true });
  check('speculative non-causal', q, k, v, { startPos: 130 });
});

test('GQA 8/4, 14/7, 32/8 and MQA 8/1 (prefill and decode)', () => {
  const rand = rng(32);
  for (const [Hq, Hkv] of [[8, 4], [14, 7], [32, 8], [8, 1]]) {
    const D = 32, Skv = 40;
    const k = randTensor(rand, [2, Skv, Hkv, D]);
    const v = randTensor(rand, [2, Skv, Hkv, D]);
    check(`${Hq}/${Hkv} prefill`, randTensor(rand, [2, 12, Hq, D]), k, v, { startPos: 0, isCausal: true });
    check(`${Hq}/${Hkv} decode`, randTensor(rand, [2, 1, Hq, D]), k, v, { startPos: 33, isCausal: true });
  }
});

test('Llama-3-8B decode step: Hq 32, Hkv 8, D 128 over 4096 cached tokens, through the cache', () => {
  // The first acceptance case: a real decode step from the built dist/ files.
  const rand = rng(4096);
  const Hq = 32, Hkv = 8, D = 128, cached = 4096;
  const k = randTensor(rand, [1, cached + 1, Hkv, D]);
  const v = randTensor(rand, [1, cached + 1, Hkv, D]);
  const cache = sdpa.createKVCache({ maxSeqLen: cached + 1, numKvHeads: Hkv, headDim: D });
  try {
    const rows = (t, a, b) => ({ data: t.data.subarray(a * Hkv * D, b * Hkv * D), dims: [1, b - a, Hkv, D] });
    cache.update(rows(k, 0, cached), rows(v, 0, cached), 0);           // the prompt, already cached
    const q = sdpa.allocTensor('float32', [1, 1, Hq, D]);
    const out = sdpa.allocTensor('float32', [1, 1, Hq, D]);
    q.data.set(randTensor(rand, [1, 1, Hq, D]).data);
    cache.step(q, rows(k, cached, cached + 1), rows(v, cached, cached + 1), cached, { isCausal: true, out });
    assertClose(out.data, refCustomSdpa({ data: q.data.slice(), dims: q.dims }, k, v, { startPos: cached, isCausal: true }), 'decode 32/8/128 @4096');
    q.dispose(); out.dispose();
  } finally {
    cache.dispose();
  }
});

test('634-token prefill with D = 128', () => {
  const rand = rng(634);
  const S = 634, Hq = 4, Hkv = 2, D = 128;
  const q = randTensor(rand, [1, S, Hq, D]);
  const k = randTensor(rand, [1, S, Hkv, D]);
  const v = randTensor(rand, [1, S, Hkv, D]);
  check('prefill 634', q, k, v, { startPos: 0, isCausal: true });
});

test('fully masked rows give zeros, never NaN', () => {
  const rand = rng(3);
  const q = randTensor(rand, [1, 3, 2, 8]), k = randTensor(rand, [1, 5, 2, 8]), v = randTensor(rand, [1, 5, 2, 8]);
  const fm = { data: new Float32Array(15).fill(0), dims: [3, 5] };
  fm.data.fill(-Infinity, 5, 10); // row 1 fully masked
  const a = check('float -inf row', q, k, v, { attnMask: fm });
  assert.ok(a.data.subarray(16, 32).every((x) => x === 0), 'row 1 is zeros');
  const bm = { data: new Uint8Array(15).fill(1), dims: [3, 5] };
  bm.data.fill(0, 10, 15); // row 2 fully masked
  const b = check('bool all-false row', q, k, v, { attnMask: bm });
  assert.ok(b.data.subarray(32, 48).every((x) => x === 0), 'row 2 is zeros');
  assert.ok(!b.data.some(Number.isNaN));
});

/** Like check(), where NaN in the reference must be NaN in the result (and only there). */
function checkNonFinite(label, q, k, v, opts) {
  const got = sdpa.customSdpa(q, k, v, opts).data;
  const ref = refCustomSdpa(q, k, v, opts);
  const nanAt = [];
  for (let i = 0; i < ref.length; i++) {
    assert.is(Number.isNaN(got[i]), Number.isNaN(ref[i]), `${label}: [${i}] got ${got[i]}, reference ${ref[i]}`);
    if (Number.isNaN(ref[i])) { nanAt.push(i); got[i] = 0; ref[i] = 0; }
  }
  assertClose(got, ref, label);
  return nanAt.length;
}

test('NaN or Inf in q or k is computed through (a NaN score makes its row NaN), as in the reference', () => {
  const rand = rng(13);
  const q = randTensor(rand, [1, 3, 2, 8]), k = randTensor(rand, [1, 5, 1, 8]), v = randTensor(rand, [1, 5, 1, 8]);
  const with_ = (t, at, x) => { const c = { data: t.data.slice(), dims: t.dims }; c.data[at] = x; return c; };
  let nans = 0;
  nans += checkNonFinite('NaN in key row 1', q, with_(k, 8, NaN), v, { startPos: 2 });
  nans += checkNonFinite('NaN in key row 4, causal (only row 2 sees it)', q, with_(k, 32, NaN), v, { startPos: 2, isCausal: true });
  nans += checkNonFinite('NaN in query row 1, head 0', with_(q, 16, NaN), k, v, { startPos: 2 });
  nans += checkNonFinite('+Inf in key row 0', q, with_(k, 3, Infinity), v, { startPos: 2 });
  nans += checkNonFinite('-Inf in key row 3', q, with_(k, 25, -Infinity), v, { startPos: 2 });
  assert.ok(nans > 0, 'some rows are NaN');
});

test('large logits stay finite (stable softmax)', () => {
  const rand = rng(99);
  const q = randTensor(rand, [1, 4, 2, 16], 30), k = randTensor(rand, [1, 9, 2, 16], 30), v = randTensor(rand, [1, 9, 2, 16]);
  check('large logits', q, k, v, { startPos: 5, isCausal: true });
});

test('allocTensor gives zero-filled memory, also where a disposed tensor was', () => {
  for (let i = 0; i < 3; i++) {
    const a = sdpa.allocTensor('float32', [1, 3, 4, 16]);
    assert.ok(a.data.every((x) => x === 0), 'float32 zeros');
    a.data.fill(5);
    a.dispose();
    const b = sdpa.allocTensor('bool', [3, 7]);
    assert.ok(b.data.every((x) => x === 0), 'bool zeros');
    b.data.fill(1);
    b.dispose();
  }
});

test('heap tensors, plain arrays and `out` give the same bits', () => {
  const rand = rng(5);
  const q = randTensor(rand, [1, 3, 4, 16]), k = randTensor(rand, [1, 7, 2, 16]), v = randTensor(rand, [1, 7, 2, 16]);
  const plain = sdpa.customSdpa(q, k, v, { startPos: 2, isCausal: true });
  assertClose(plain.data, refCustomSdpa(q, k, v, { startPos: 2, isCausal: true }), 'plain vs reference');
  const hq = sdpa.allocTensor('float32', q.dims), hk = sdpa.allocTensor('float32', k.dims);
  const hv = sdpa.allocTensor('float32', v.dims), ho = sdpa.allocTensor('float32', q.dims);
  hq.data.set(q.data); hk.data.set(k.data); hv.data.set(v.data);
  const r = sdpa.customSdpa(hq, hk, hv, { startPos: 2, isCausal: true, out: ho });
  assert.ok(r === ho, 'out is returned');
  assert.ok(sameBits(plain.data, ho.data), 'heap == plain');
  const po = { data: new Float32Array(q.data.length), dims: q.dims };
  assert.ok(sdpa.customSdpa(q, hk, v, { startPos: 2, isCausal: true, out: po }) === po);
  assert.ok(sameBits(plain.data, po.data), 'plain out == plain');
  for (const t of [hq, hk, hv, ho]) t.dispose();
});

test.run();
