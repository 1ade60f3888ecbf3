// cache.test.js: the flat-memory KV cache (CONTRACT.md section 3).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa } from '../../js/index.js';
import { refCustomSdpa } from './reference.js';
import { rng, randTensor, assertClose, expectError, sameBits } from './helpers.js';

let sdpa;
test.before(async () => { sdpa = await createSdpa(); });
test.after(() => { sdpa.dispose(); });

/** Rows [from, to) of a [B, S, H, D] tensor written into `dst` at the same rows. */
function writeRows(dst, src, at) {
  const [B, S, H, D] = src.dims;
  const [, Sd] = dst.dims;
  for (let b = 0; b < B; b++) {
    for (let s = 0; s < S; s++) {
      const from = ((b * S + s) * H) * D, to = ((b * Sd + at + s) * H) * D;
      dst.data.set(src.data.subarray(from, from + H * D), to);
    }
  }
}

test('prefill then many decode steps equal customSdpa over the same data', () => {
  const rand = rng(101);
  const B = 2, maxSeqLen = 64, Hq = 8, Hkv = 2, D = 32, prefill = 20;
  const cache = sdpa.createKVCache({ batch: B, maxSeqLen, numKvHeads: Hkv, headDim: D });
  assert.equal([cache.batch, cache.maxSeqLen, cache.numKvHeads, cache.headDim, cache.dtype], [B, maxSeqLen, Hkv, D, 'float32']);
  const K = { data: new Float32Array(B * maxSeqLen * Hkv * D), dims: [B, maxSeqLen, Hkv, D] };
  const V = { data: new Float32Array(K.data.length), dims: K.dims };
  let bitwise = true;
  const stepAndCompare = (sp, S) => {
    const q = randTensor(rand, [B, S, Hq, D]), k = randTensor(rand, [B, S, Hkv, D]), v = randTensor(rand, [B, S, Hkv, D]);
    writeRows(K, k, sp); writeRows(V, v, sp);
    const got = cache.step(q, k, v, sp, { isCausal: true });
    const want = sdpa.customSdpa(q, K, V, { startPos: sp, isCausal: true });
    assertClose(got.data, want.data, `step at ${sp}: cache vs customSdpa`);
    assertClose(got.data, refCustomSdpa(q, K, V, { startPos: sp, isCausal: true }), `step at ${sp}: cache vs reference`);
    if (!sameBits(got.data, want.data)) bitwise = false;
  };
  stepAndCompare(0, prefill);
  for (let sp = prefill; sp < maxSeqLen; sp++) stepAndCompare(sp, 1);
  const all = cache.read(0, maxSeqLen);
  assert.ok(sameBits(all.k.data, K.data) && sameBits(all.v.data, V.data), 'read returns every written row');
  if (!bitwise) console.log('  note: cache steps match customSdpa within tolerance but not bit for bit');
  cache.dispose();
});

test('update + attend equals step; attend with a mask of N columns sees N keys', () => {
  const rand = rng(202);
  const c1 = sdpa.createKVCache({ maxSeqLen: 32, numKvHeads: 4, headDim: 16 });
  const c2 = sdpa.createKVCache({ maxSeqLen: 32, numKvHeads: 4, headDim: 16 });
  const k = randTensor(rand, [1, 10, 4, 16]), v = randTensor(rand, [1, 10, 4, 16]), q = randTensor(rand, [1, 10, 8, 16]);
  // rows 0..2 written as zeros first: a write may not leave a hole (CONTRACT.md section 3)
  const z = { data: new Float32Array(3 * 4 * 16), dims: [1, 3, 4, 16] };
  c1.update(z, z, 0); c2.update(z, z, 0);
  c1.update(k, v, 3);
  const a = c1.attend(q, { startPos: 3, isCausal: true });
  const b = c2.step(q, k, v, 3, { isCausal: true });
  assert.ok(sameBits(a.data, b.data), 'update+attend == step');
  // mask [Sq, 13]: rows 0..12 exist (0..2 are the zero rows before startPos)
  const mask = { data: new Float32Array(10 * 13), dims: [10, 13] };
  for (let i = 0; i < 10; i++) for (let t = 0; t < 13; t++) mask.data[i * 13 + t] = t > 3 + i ? -Infinity : 0;
  const m = c1.attend(q, { attnMask: mask });
  const full = c1.read(0, 32);
  assertClose(m.data, refCustomSdpa(q, full.k, full.v, { attnMask: mask }), 'masked attend');
  assertClose(m.data, a.data, 'causal mask == isCausal at startPos 3');
  c1.dispose(); c2.dispose();
});

test('read returns what was written (ranges, batches, heap inputs)', () => {
  const rand = rng(303);
  const cache = sdpa.createKVCache({ batch: 3, maxSeqLen: 16, numKvHeads: 2, headDim: 5 });
  const fresh = cache.read(0, 16);
  assert.ok(fresh.k.data.every((x) => x === 0) && fresh.v.data.every((x) => x === 0), 'a new cache is zero-filled');
  const k = randTensor(rand, [3, 4, 2, 5]), v = randTensor(rand, [3, 4, 2, 5]);
  const zeros = (n) => ({ data: new Float32Array(3 * n * 2 * 5), dims: [3, n, 2, 5] });
  cache.update(zeros(6), zeros(6), 0);  // (no holes: rows 0..5 first)
  cache.update(k, v, 6);
  const r = cache.read(6, 4);
  assert.equal(r.k.dims, [3, 4, 2, 5]);
  assert.is(r.k.dtype, 'float32');
  assert.ok(sameBits(r.k.data, k.data) && sameBits(r.v.data, v.data), 'same bits back');
  const part = cache.read(7, 2);
  const want = { data: new Float32Array(3 * 2 * 2 * 5), dims: [3, 2, 2, 5] };
  for (let b = 0; b < 3; b++) want.data.set(k.data.subarray((b * 4 + 1) * 10, (b * 4 + 3) * 10), b * 20);
  assert.ok(sameBits(part.k.data, want.data), 'sub-range');
  // heap tensors as update inputs
  const hk = sdpa.allocTensor('float32', [3, 1, 2, 5]), hv = sdpa.allocTensor('float32', [3, 1, 2, 5]);
  hk.data.fill(1.5); hv.data.fill(-2.5);
  cache.update(zeros(5), zeros(5), 10);
  cache.update(hk, hv, 15);
  const last = cache.read(15, 1);
  assert.ok(last.k.data.every((x) => x === 1.5) && last.v.data.every((x) => x === -2.5));
  // the copies are not views of the cache
  last.k.data[0] = 99;
  assert.is(cache.read(15, 1).k.data[0], 1.5);
  hk.dispose(); hv.dispose(); cache.dispose();
});

test('rejected updates and steps leave the cache untouched', () => {
  const rand = rng(404);
  const cache = sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 4 });
  cache.update(randTensor(rand, [1, 8, 2, 4]), randTensor(rand, [1, 8, 2, 4]), 0);
  const before = cache.read(0, 8);
  const k1 = randTensor(rand, [1, 1, 2, 4]), q1 = randTensor(rand, [1, 1, 4, 4]);
  const cases = [
    ['update past capacity', () => cache.update(randTensor(rand, [1, 2, 2, 4]), randTensor(rand, [1, 2, 2, 4]), 7), 'E_CAPACITY'],
    ['update bad value dims', () => cache.update(k1, randTensor(rand, [1, 1, 2, 3]), 2), 'E_HEAD_DIM'],
    ['step: valid write, invalid attend (mask + causal)', () => cache.step(q1, k1, k1, 2, { isCausal: true, attnMask: { data: new Float32Array(3), dims: [1, 3] } }), 'E_MASK_CAUSAL'],
    ['step: valid write, bad scale', () => cache.step(q1, k1, k1, 2, { scale: -1 }), 'E_SCALE'],
    ['step: valid write, bad out', () => cache.step(q1, k1, k1, 2, { out: { data: new Float32Array(3), dims: [1, 1, 1, 3] } }), 'E_DIMS'],
    ['step: q heads not a multiple', () => cache.step(randTensor(rand, [1, 1, 3, 4]), k1, k1, 2), 'E_HEADS'],
  ];
  for (const [label, fn, code] of cases) {
    expectError(fn, code, [], label);
    const now = cache.read(0, 8);
    assert.ok(sameBits(now.k.data, before.k.data) && sameBits(now.v.data, before.v.data), `${label}: cache unchanged`);
  }
  cache.dispose();
});

test('use after dispose is E_DISPOSED; dispose twice is a no-op', () => {
  const cache = sdpa.createKVCache({ maxSeqLen: 4, numKvHeads: 1, headDim: 4 });
  cache.dispose();
  cache.dispose();
  assert.ok(cache.disposed);
  const t = { data: new Float32Array(4), dims: [1, 1, 1, 4] };
  expectError(() => cache.update(t, t, 0), 'E_DISPOSED', [/KVCache\.update/]);
  expectError(() => cache.attend(t, { startPos: 0 }), 'E_DISPOSED', [/KVCache\.attend/]);
  expectError(() => cache.step(t, t, t, 0), 'E_DISPOSED', [/KVCache\.step/]);
  expectError(() => cache.read(0, 1), 'E_DISPOSED', [/KVCache\.read/]);
});

test.run();
