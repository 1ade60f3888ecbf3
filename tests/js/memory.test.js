// memory.test.js: heap tensors across memory growth, pointers above 2 GiB,
// a >= 1 GiB cache, E_OOM without leaks, and a zero-allocation decode loop.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, INTERNALS } from '../../js/index.js';
import { heapState } from '../../js/heap.js';
import { rng, randTensor, assertClose, expectError, sameBits } from './helpers.js';
import { refCustomSdpa, attendRow } from './reference.js';

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
    // warm-up: every row written once (the pool holds the cache's pages; writes never leave a hole)
    for (let sp = 0; sp < maxSeqLen; sp++) cache.step(hq, hk, hv, sp, { isCausal: true, out: ho });
    cache.attend(hq, { startPos: 0, isCausal: true, out: ho });
    const pool0 = lean.memory();
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
    const pool = ({ heapBytes, ...rest }) => rest;    // (the heap was grown to its maximum by exhaustHeap)
    assert.equal(pool(lean.memory()), pool(pool0), 'the page pool is unchanged (no page taken or freed)');
    // the last step (sp = 9999 % 128 = 15) computed the right thing
    const got = Float32Array.from(ho.data);
    const all = cache.read(0, 16);
    const want = lean.customSdpa({ data: Float32Array.from(hq.data), dims: hq.dims }, all.k, all.v, { startPos: 15, isCausal: true });
    assert.ok(sameBits(got, want.data), 'the last step equals customSdpa over the cache rows');
    for (const t of [hq, hk, hv, ho]) t.dispose();
    cache.dispose();
  } finally { lean.dispose(); }
});

test('memory().heapBytes is the wasm memory\'s size and shows growth', async () => {
  const s2 = await createSdpa({ threads: 1 });
  try {
    const { core } = s2[INTERNALS];
    const m0 = s2.memory();
    assert.is(m0.heapBytes, core.heapBytes());
    const t = s2.allocTensor('float32', [m0.heapBytes / 4]);    // more than the heap has free: it grows
    const m1 = s2.memory();
    assert.ok(m1.heapBytes > m0.heapBytes && m1.heapBytes === core.heapBytes(), `${m0.heapBytes} -> ${m1.heapBytes}`);
    assert.is(m1.bytesInUse, m0.bytesInUse, 'no page taken');
    t.dispose();
    assert.is(s2.memory().heapBytes, m1.heapBytes, 'wasm memory does not shrink');
  } finally { s2.dispose(); }
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
    ['_sdpa_wasm_custom', 'customSdpa', () => sdpa.customSdpa(q, k, v, { attnMask: mask, out })],
    ['_sdpa_wasm_custom', 'scaledDotProductAttention', () => sdpa.scaledDotProductAttention(tq, tk, tk, { enableGqa: true, attnMask: { data: new Float32Array(8), dims: [2, 4] } })],
    ['_sdpa_wasm_kv_cache_update', 'KVCache.update', () => cache.update(kv1, kv1, 3)],
    ['_sdpa_wasm_kv_cache_attend', 'KVCache.attend', () => cache.attend(q, { startPos: 0, isCausal: true, out })],
    ['_sdpa_wasm_kv_cache_step', 'KVCache.step', () => cache.step(q, randTensor(rand, [1, 3, 2, 8]), randTensor(rand, [1, 3, 2, 8]), 3, { out })],
    ['_sdpa_wasm_kv_cache_read', 'KVCache.read', () => cache.read(1, 4)],
    ['_sdpa_wasm_kv_cache_create', 'createKVCache', () => sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8 })],
    ['_sdpa_wasm_kv_cache_create', 'createKVCache', () => sdpa.createKVCache({ numKvHeads: 2, headDim: 8, window: 4 })],
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
  // a page of 2 x 64 rows x 2^22 floats is 2 GiB: one allocation cannot hold it
  expectError(() => sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: 1 << 22 }), 'E_OOM', [/createKVCache/, /page/]);
  assert.is(core.heapBytes(), bytes0);
  assert.equal(probe(), probe0, 'malloc state unchanged');
  const t = sdpa.allocTensor('float32', [MiB]);
  assert.is(t.length, MiB);
  assert.is(t.data[MiB - 1], 0, 'zero-filled');
  t.data[MiB - 1] = 1;
  assert.is(t.data[MiB - 1], 1, 'the last element is usable');
  t.dispose();
});

test('a cache of 1 GiB in all works, its pages lie above 2 GiB, and a write the pool cannot take is E_OOM with nothing changed', async () => {
  // A fresh instance, so that no free holes below 2 GiB are left by other tests.
  const big = await createSdpa();
  const { M, core } = big[INTERNALS];
  const spacers = [];
  try {
    const sdpa = big;
    const rand = rng(3);
    const maxSeqLen = 262144, Hkv = 8, D = 64, Hq = 8;
    // Everything allocated from now on lies above 2 GiB: 2 GiB of spacers (pages untouched).
    for (let i = 0; i < 2; i++) { const p = M._malloc(GiB) >>> 0; assert.ok(p !== 0, 'spacer'); spacers.push(p); }
    const cache = sdpa.createKVCache({ maxSeqLen, numKvHeads: Hkv, headDim: D });
    assert.is(cache.length, 0);
    assert.ok(cache.bytes < MiB, `an empty cache holds only its page table (${cache.bytes} bytes)`);
    // Write every row (1 GiB of K and V), in chunks, with a pattern the reference can follow.
    const chunk = 8192;
    const k = { data: new Float32Array(chunk * Hkv * D), dims: [1, chunk, Hkv, D] };
    const v = { data: new Float32Array(chunk * Hkv * D), dims: [1, chunk, Hkv, D] };
    const kAt = (t, h, d) => Math.sin(t * 0.001 + h + d * 0.1) * 0.5;
    const vAt = (t, h, d) => Math.cos(t * 0.002 + h * 0.5 - d * 0.05);
    for (let t0 = 0; t0 < maxSeqLen; t0 += chunk) {
      for (let t = 0; t < chunk; t++) for (let h = 0; h < Hkv; h++) for (let d = 0; d < D; d++) {
        k.data[(t * Hkv + h) * D + d] = kAt(t0 + t, h, d);
        v.data[(t * Hkv + h) * D + d] = vAt(t0 + t, h, d);
      }
      cache.update(k, v);  // appends at cache.length
    }
    assert.is(cache.length, maxSeqLen);
    const pageBytes = 2 * 64 * D * 4 + 64, pages = Hkv * maxSeqLen / 64;  // (a page's 64-byte pool header included)
    assert.is(cache.bytes, pages * pageBytes + Hkv * (maxSeqLen / 64) * 4, 'cache.bytes: every page and the table');
    const mem = sdpa.memory();
    assert.ok(mem.pagesInUse >= pages && mem.bytesInUse >= pages * pageBytes, `memory(): ${JSON.stringify(mem)}`);
    const q = { data: new Float32Array(Hq * D).fill(0.5), dims: [1, 1, Hq, D] };
    const sp = maxSeqLen - 1;
    const got = cache.attend(q, { startPos: sp, isCausal: true });
    // float64 reference over all rows (GQA 1:1 here), the rows from their pattern (1 GiB not copied into JS)
    const ref = new Float64Array(Hq * D);
    for (let h = 0; h < Hq; h++) {
      attendRow({
        keys: maxSeqLen, Dv: D, scale: 1 / Math.sqrt(D),
        dot: (t) => { let dot = 0; for (let d = 0; d < D; d++) dot += 0.5 * Math.fround(kAt(t, h, d)); return dot; },
        value: (t, d) => Math.fround(vAt(t, h, d)),
      }, ref, h * D);
    }
    assertClose(got.data, ref, '1 GiB cache decode');
    const tail = cache.read(maxSeqLen - 3, 3);
    assert.is(tail.k.data[0], Math.fround(kAt(maxSeqLen - 3, 0, 0)), 'read at the end');

    const hq = sdpa.allocTensor('float32', [1, 1, Hq, D]), ho = sdpa.allocTensor('float32', [1, 1, Hq, D]);
    assert.ok(heapState(hq).ptr >= 2 * GiB && heapState(ho).ptr >= 2 * GiB, `pointers above 2 GiB (${heapState(hq).ptr})`);
    hq.data.set(q.data);
    cache.attend(hq, { startPos: sp, isCausal: true, out: ho });
    assert.ok(sameBits(ho.data, got.data), 'heap tensors above 2 GiB');
    // A second cache that cannot get its pages under 4 GiB: E_OOM from the pool, the cache unchanged.
    const other = sdpa.createKVCache({ maxSeqLen: 1 << 20, numKvHeads: 4, headDim: 128 });
    const wide = 1 << 19;  // rows 0 .. 2^19 - 1: 4 x 2^19 x 128 x 4 x 2 = 2 GiB of pages
    const zk = sdpa.allocTensor('float32', [1, wide / 64, 4, 128]);  // (a heap tensor: no temporaries, the pool is what fails)
    let t0 = 0, failed = null;
    for (; t0 < wide && !failed; t0 += wide / 64) {
      try { other.update(zk, zk); } catch (e) { failed = e; }
    }
    assert.ok(failed && failed.code === 'E_OOM', `the pool ran out: ${failed && failed.message}`);
    assert.match(failed.message, /unchanged/);
    const lengthAtFailure = other.length;
    assert.is(lengthAtFailure, t0 - wide / 64, 'the failed write changed nothing: length is that of the writes before it');
    other.dispose();
    zk.dispose();
    const after = sdpa.memory();
    assert.ok(after.pagesFree > 0, 'disposing gave its pages back to the pool');
    // the pages given back are reused: a new cache of the same page size takes them without growing the pool
    const reuse = sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: 4, headDim: 128 });
    reuse.update({ data: new Float32Array(256 * 4 * 128), dims: [1, 256, 4, 128] }, { data: new Float32Array(256 * 4 * 128), dims: [1, 256, 4, 128] });
    assert.is(sdpa.memory().bytesReserved, after.bytesReserved, 'no new pool memory for reused pages');
    reuse.dispose();
    hq.dispose(); ho.dispose();
    cache.dispose();
  } finally {
    for (const p of spacers) M._free(p);
    big.dispose();
  }
});

test.run();
