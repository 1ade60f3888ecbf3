// memory.test.js: heap tensors across memory growth, pointers above 2 GiB,
// a >= 1 GiB cache, E_OOM without leaks, and a zero-allocation decode loop.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, INTERNALS } from '../../js/index.js';
import { heapState } from '../../js/heap.js';
import { rng, randTensor, assertClose, expectError, sameBits } from './helpers.js';
import { refCustomSdpa } from './reference.js';

const GiB = 1024 ** 3, MiB = 1024 ** 2;
let sdpa, M, core;
test.before(async () => {
  sdpa = await createSdpa();
  ({ M, core } = sdpa[INTERNALS]);
});
test.after(() => { sdpa.dispose(); });

/** Where malloc puts a small and a 1 MiB block right now (unchanged state = same answer). */
function probe() {
  const a = M._malloc(64) >>> 0, b = M._malloc(MiB) >>> 0;
  M._free(b); M._free(a);
  return [a, b];
}

/** Counts the JS-side malloc calls made while fn runs. */
function countMallocs(M, fn) {
  const real = M._malloc;
  let n = 0;
  M._malloc = (size) => { n++; return real(size); };
  try { fn(); } finally { M._malloc = real; }
  return n;
}

/**
 * Takes every free byte of the wasm heap (growing it to its 4 GiB maximum;
 * the pages are never touched), so that ANY later malloc, from JS or from C,
 * fails. Returns a function that gives it all back.
 */
function exhaustHeap(M) {
  const held = [];
  for (let size = 1 << 30; size >= 8;) {
    const p = M._malloc(size) >>> 0;
    if (p) held.push(p); else size >>>= 1;
  }
  assert.is(M._malloc(8), 0, 'the heap is exhausted');
  return () => { for (const p of held) M._free(p); };
}

test('a decode step with heap tensors copies and allocates nothing (10,000 steps)', async () => {
  // A fresh instance: the heap is exhausted below, so a step that allocated
  // anything (a JS temporary, or C scratch/malloc, even one freed again
  // within the step) would fail with E_OOM instead of passing unnoticed.
  const lean = await createSdpa({ threads: 2 });
  const { M, core } = lean[INTERNALS];
  try {
    const rand = rng(1);
    const maxSeqLen = 128, Hq = 8, Hkv = 2, D = 64;
    const cache = lean.createKVCache({ maxSeqLen, numKvHeads: Hkv, headDim: D });
    const hq = lean.allocTensor('float32', [1, 1, Hq, D]), ho = lean.allocTensor('float32', [1, 1, Hq, D]);
    const hk = lean.allocTensor('float32', [1, 1, Hkv, D]), hv = lean.allocTensor('float32', [1, 1, Hkv, D]);
    hq.data.set(randTensor(rand, [Hq * D]).data);
    hk.data.set(randTensor(rand, [Hkv * D]).data);
    hv.data.set(randTensor(rand, [Hkv * D]).data);
    cache.step(hq, hk, hv, 0, { isCausal: true, out: ho }); // warm-up
    cache.attend(hq, { startPos: 0, isCausal: true, out: ho });
    const release = exhaustHeap(M);
    const bytes0 = core.heapBytes();
    let calls;
    try {
      // The check works: anything that needs memory now fails.
      expectError(() => lean.customSdpa(hq, randTensor(rand, [1, 4, Hkv, D]), randTensor(rand, [1, 4, Hkv, D]), { out: ho }), 'E_OOM', [/temporary/]);
      calls = countMallocs(M, () => {
        for (let i = 0; i < 10000; i++) {
          const sp = i % maxSeqLen;
          if (i % 2) cache.step(hq, hk, hv, sp, { isCausal: true, out: ho });
          else cache.attend(hq, { startPos: sp, isCausal: true, out: ho });
        }
      });
    } finally { release(); }
    assert.is(calls, 0, 'no malloc from JS');
    assert.is(core.heapBytes(), bytes0, 'heap size unchanged');
    // the last step (sp = 9999 % 128 = 15) computed the right thing
    const got = Float32Array.from(ho.data);
    const all = cache.read(0, 16);
    const want = lean.customSdpa({ data: Float32Array.from(hq.data), dims: hq.dims }, all.k, all.v, { startPos: 15, isCausal: true });
    assert.ok(sameBits(got, want.data), 'the last step equals customSdpa over the cache rows');
    for (const t of [hq, hk, hv, ho]) t.dispose();
    cache.dispose();
  } finally { lean.dispose(); }
});

test('plain views of wasm memory survive growth caused by a temporary (single-thread build)', async () => {
  // In the single-thread build memory growth DETACHES the old buffer, so a
  // view of wasm memory given as a plain tensor must be resolved to its
  // address before any temporary is allocated.
  const single = await createSdpa({ build: 'simd' });
  const { core } = single[INTERNALS];
  try {
    const rand = rng(6);
    const Hq = 2, D = 8, S = 1 << 22; // k and v: 128 MiB each, more than the 64 MiB heap has free
    const q = randTensor(rand, [1, 1, Hq, D]);
    const k = { data: new Float32Array(S * D), dims: [1, S, 1, D] };
    const v = { data: new Float32Array(S * D), dims: [1, S, 1, D] };
    for (let i = 0; i < 8 * D; i++) { k.data[i] = rand() - 0.5; v.data[i] = rand() - 0.5; }
    const N = 6;
    const hm = single.allocTensor('bool', [1, N]);
    hm.data.set([1, 0, 1, 1, 0, 1]);
    const ho = single.allocTensor('float32', [1, 1, Hq, D]);
    ho.data.fill(7);
    const bytes0 = core.heapBytes();
    const mask = { data: hm.data, dims: [1, N] }, out = { data: ho.data, dims: [1, 1, Hq, D] };
    const r = single.customSdpa(q, k, v, { attnMask: mask, out });
    assert.ok(core.heapBytes() > bytes0, 'memory grew during the call');
    assert.ok(r === out, 'out is returned');
    const small = (t) => ({ data: t.data.slice(0, N * D), dims: [1, N, 1, D] });
    const want = refCustomSdpa(q, small(k), small(v), { attnMask: { data: Uint8Array.from(hm.data), dims: [1, N] } });
    assertClose(ho.data, want, 'result written through the view of wasm memory');
    hm.dispose(); ho.dispose();
  } finally { single.dispose(); }
});

test('a failure reported by C frees every temporary and writes nothing', () => {
  const rand = rng(8);
  const q = randTensor(rand, [1, 3, 4, 8]), k = randTensor(rand, [1, 5, 2, 8]), v = randTensor(rand, [1, 5, 2, 8]);
  const mask = { data: new Float32Array(15), dims: [3, 5] };
  const cache = sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8 });
  const kv1 = randTensor(rand, [1, 3, 2, 8]);
  cache.update(kv1, kv1, 0);
  const before = cache.read(0, 8);
  const out = { data: new Float32Array(96).fill(7), dims: [1, 3, 4, 8] };
  const tq = randTensor(rand, [1, 4, 2, 4]), tk = randTensor(rand, [1, 2, 4, 4]); // [B, H, S, E]: a custom-route call
  /** Makes the C entry `name` fail with E_OOM (status 17) for the duration of fn. */
  const failing = (name, fn) => {
    const real = M[name];
    M[name] = () => 17;
    try { return fn(); } finally { M[name] = real; }
  };
  assert.is(sdpa.planAttention(tq, tk, tk, { enableGqa: true, attnMask: { data: new Float32Array(8), dims: [2, 4] } }).route, 'custom');
  const probe0 = probe();
  const cases = [
    ['_sdpa_custom', 'customSdpa', () => sdpa.customSdpa(q, k, v, { attnMask: mask, out })],
    ['_sdpa_custom', 'scaledDotProductAttention', () => sdpa.scaledDotProductAttention(tq, tk, tk, { enableGqa: true, attnMask: { data: new Float32Array(8), dims: [2, 4] } })],
    ['_sdpa_kv_cache_update', 'KVCache.update', () => cache.update(kv1, kv1, 3)],
    ['_sdpa_kv_cache_attend', 'KVCache.attend', () => cache.attend(q, { startPos: 2, isCausal: true, out })],
    ['_sdpa_kv_cache_step', 'KVCache.step', () => cache.step(q, randTensor(rand, [1, 3, 2, 8]), randTensor(rand, [1, 3, 2, 8]), 3, { out })],
    ['_sdpa_kv_cache_read', 'KVCache.read', () => cache.read(1, 4)],
    ['_sdpa_kv_cache_create', 'createKVCache', () => sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8 })],
  ];
  for (const [entry, fn, call] of cases) {
    const err = failing(entry, () => expectError(call, 'E_OOM', [], fn));
    assert.ok(err.message.startsWith(`${fn}: `), `${fn}: message names the public function: ${err.message}`);
    assert.is(err.status, 17);
    assert.equal(probe(), probe0, `${fn}: every temporary freed`);
    assert.ok(out.data.every((x) => x === 7), `${fn}: out unchanged`);
  }
  const after = cache.read(0, 8);
  assert.ok(sameBits(after.k.data, before.k.data) && sameBits(after.v.data, before.v.data), 'cache unchanged');
  cache.dispose();
});

test('memory growth keeps heap tensors and caches valid', () => {
  const rand = rng(2);
  const t = sdpa.allocTensor('float32', [1, 2, 4, 8]);
  const src = randTensor(rand, [1, 2, 4, 8]);
  t.data.set(src.data);
  const cache = sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8 });
  const kv = randTensor(rand, [1, 8, 2, 8]);
  cache.update(kv, kv, 0);
  const before = sdpa.customSdpa(t, kv, kv, { startPos: 0, isCausal: true });
  const oldView = t.data, oldBytes = core.heapBytes();
  const spacer = M._malloc(256 * MiB) >>> 0; // grows memory (64 MiB initial), pages untouched
  assert.ok(spacer !== 0);
  try {
    assert.ok(core.heapBytes() > oldBytes, 'memory grew');
    const view = t.data;
    assert.ok(view.buffer === core.currentBuffer(), 'view re-derived from the current buffer');
    assert.ok(view !== oldView);
    assert.is(view.length, 64);
    assert.ok(sameBits(view, src.data), 'contents kept');
    assert.ok(t.data === view, 'view cached while the buffer is unchanged');
    const after = sdpa.customSdpa(t, kv, kv, { startPos: 0, isCausal: true });
    assert.ok(sameBits(after.data, before.data));
    const r = cache.read(0, 8);
    assert.ok(sameBits(r.k.data, kv.data), 'cache survives growth');
    assert.ok(sameBits(cache.attend(t, { startPos: 0, isCausal: true }).data, before.data));
  } finally { M._free(spacer); }
  t.dispose(); cache.dispose();
});

test('an impossible size is E_OOM, leaks nothing, and the next fitting allocation succeeds', () => {
  const bytes0 = core.heapBytes(), probe0 = probe();
  expectError(() => sdpa.allocTensor('float32', [3, 256 * MiB]), 'E_OOM', [/allocTensor/, /3 GiB/]); // malloc says no
  expectError(() => sdpa.createKVCache({ maxSeqLen: 1 << 20, numKvHeads: 32, headDim: 128 }), 'E_OOM', [/createKVCache/]);
  assert.is(core.heapBytes(), bytes0);
  assert.equal(probe(), probe0, 'malloc state unchanged');
  const t = sdpa.allocTensor('float32', [MiB]);
  assert.is(t.length, MiB);
  assert.is(t.data[MiB - 1], 0, 'zero-filled');
  t.data[MiB - 1] = 1;
  assert.is(t.data[MiB - 1], 1, 'the last element is usable');
  t.dispose();
});

test('a 1 GiB cache works, pointers above 2 GiB work, a half-made cache is not kept', async () => {
  // A fresh instance, so that no free holes below 2 GiB are left by other tests.
  const big = await createSdpa();
  const { M, core } = big[INTERNALS];
  try {
    const sdpa = big;
    const rand = rng(3);
    const maxSeqLen = 262144, Hkv = 8, D = 64, Hq = 8;
    const cache = sdpa.createKVCache({ maxSeqLen, numKvHeads: Hkv, headDim: D }); // 2 x 512 MiB
    assert.ok(core.heapBytes() >= GiB);
    // Everything allocated from now on lies above 2 GiB: a 1.1 GiB spacer (pages untouched).
    const spacer = M._malloc(1.1 * GiB) >>> 0;
    assert.ok(spacer !== 0, 'spacer');
    // A few rows at both ends; their keys align with q so they dominate the softmax.
    const q = { data: new Float32Array(Hq * D).fill(0.5), dims: [1, 1, Hq, D] };
    const rows = [0, 1, 2, maxSeqLen - 3, maxSeqLen - 2, maxSeqLen - 1];
    const written = [];
    for (const r of rows) {
      const k = randTensor(rand, [1, 1, Hkv, D], 0.2), v = randTensor(rand, [1, 1, Hkv, D]);
      for (let i = 0; i < k.data.length; i++) k.data[i] += 1.5 + r % 3 * 0.1;
      cache.update(k, v, r);
      written.push({ k, v });
    }
    const sp = maxSeqLen - 1;
    const got = cache.attend(q, { startPos: sp, isCausal: true });
    // Reference: every other key is zero (score 0, value 0).
    const ref = new Float64Array(Hq * D), s = 1 / Math.sqrt(D);
    for (let h = 0; h < Hq; h++) {
      const sc = written.map(({ k }) => { let d = 0; for (let x = 0; x < D; x++) d += q.data[h * D + x] * k.data[h * D + x]; return s * d; });
      const mx = Math.max(0, ...sc);
      const p = sc.map((x) => Math.exp(x - mx));
      const den = p.reduce((a, b) => a + b, 0) + (maxSeqLen - rows.length) * Math.exp(-mx);
      for (let x = 0; x < D; x++) ref[h * D + x] = p.reduce((a, pi, i) => a + pi * written[i].v.data[h * D + x], 0) / den;
    }
    assertClose(got.data, ref, '1 GiB cache decode');
    const tail = cache.read(maxSeqLen - 3, 3);
    assert.ok(sameBits(tail.k.data.subarray(0, Hkv * D), written[3].k.data), 'read at the end');

    try {
      const hq = sdpa.allocTensor('float32', [1, 1, Hq, D]), ho = sdpa.allocTensor('float32', [1, 1, Hq, D]);
      assert.ok(heapState(hq).ptr >= 2 * GiB && heapState(ho).ptr >= 2 * GiB, `pointers above 2 GiB (${heapState(hq).ptr})`);
      hq.data.set(q.data);
      assert.is(hq.data[Hq * D - 1], 0.5);
      cache.attend(hq, { startPos: sp, isCausal: true, out: ho });
      assert.ok(sameBits(ho.data, got.data), 'heap tensors above 2 GiB');
      const pq = randTensor(rand, [1, 2, 2, 8]), pk = randTensor(rand, [1, 4, 1, 8]), pv = randTensor(rand, [1, 4, 1, 8]);
      const plain = sdpa.customSdpa(pq, pk, pv, { startPos: 1, isCausal: true });
      assertClose(plain.data, refCustomSdpa(pq, pk, pv, { startPos: 1, isCausal: true }), 'temporaries above 2 GiB');
      // 2 x 1 GiB more does not fit under 4 GiB: E_OOM from C (K made, V not), nothing kept.
      const bytes = core.heapBytes();
      expectError(() => sdpa.createKVCache({ maxSeqLen: 1 << 20, numKvHeads: 4, headDim: 64 }), 'E_OOM', [/createKVCache/]);
      assert.ok(core.heapBytes() <= 4 * GiB && core.heapBytes() >= bytes);
      const fit = M._malloc(GiB) >>> 0; // fits only where the half-made K was freed
      assert.ok(fit !== 0, 'the 1 GiB freed by the failed cache is reusable');
      M._free(fit);
      const t = sdpa.allocTensor('float32', [1024]);
      t.dispose();
      hq.dispose(); ho.dispose();
    } finally { M._free(spacer); }
    cache.dispose();
  } finally { big.dispose(); }
});

test.run();
