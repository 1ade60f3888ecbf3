// mistakes.test.js: the mistakes a new user makes give an error or the
// answer they meant, never a wrong answer without a word (CONTRACT.md
// sections 1 and 3): attention over a cache is causal by default, query rows
// past cache.length are E_START_POS, tensors in PyTorch's [B, H, S, D] layout
// are named as such.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa } from '../../js/index.js';
import { rng, randTensor, assertClose, expectError, sameBits } from './helpers.js';
import { refCustomSdpa } from './reference.js';

let sdpa;
test.before(async () => { sdpa = await createSdpa({ threads: 1 }); });
test.after(() => { sdpa.dispose(); });

const [Hq, Hkv, D] = [4, 2, 8];

test('a prefill through cache.step without isCausal is causal (row 0 sees key 0 only)', () => {
  const rand = rng(3);
  const n = 10;
  const q = randTensor(rand, [1, n, Hq, D]), k = randTensor(rand, [1, n, Hkv, D]), v = randTensor(rand, [1, n, Hkv, D]);
  const cache = sdpa.createKVCache({ maxSeqLen: 32, numKvHeads: Hkv, headDim: D });
  const out = cache.step(q, k, v);
  assertClose(out.data, refCustomSdpa(q, k, v, { startPos: 0, isCausal: true }), 'step default = causal reference');
  // row 0 of head 0 is exactly value row 0 of KV head 0 (one visible key)
  for (let d = 0; d < D; d++) assert.ok(Math.abs(out.data[d] - v.data[d]) < 1e-6, `row 0 elem ${d}: ${out.data[d]} vs ${v.data[d]}`);
  const explicit = sdpa.createKVCache({ maxSeqLen: 32, numKvHeads: Hkv, headDim: D });
  assert.ok(sameBits(explicit.step(q, k, v, { isCausal: true }).data, out.data), 'default == isCausal: true, bit for bit');
  // attend over the same rows: causal by default too
  assert.ok(sameBits(cache.attend(q).data, out.data), 'attend default == causal');
  assert.ok(sameBits(cache.attend(q, { startPos: 0, isCausal: undefined }).data, out.data), 'isCausal: undefined counts as absent');
  cache.dispose(); explicit.dispose();
});

test('isCausal: false (cross-attention) and a mask still mean what they say over a cache', () => {
  const rand = rng(4);
  const n = 6;
  const q = randTensor(rand, [1, n, Hq, D]), k = randTensor(rand, [1, n, Hkv, D]), v = randTensor(rand, [1, n, Hkv, D]);
  const cache = sdpa.createKVCache({ maxSeqLen: 16, numKvHeads: Hkv, headDim: D });
  cache.update(k, v);
  const cross = cache.attend(q, { isCausal: false });
  assertClose(cross.data, refCustomSdpa(q, k, v, { startPos: 0, isCausal: false }), 'isCausal: false = every written key');
  const mask = { data: new Float32Array(n * n).map((_, i) => ((i * 7) % 5 === 0 ? -Infinity : (i % 3) * 0.25)), dims: [n, n] };
  const masked = cache.attend(q, { attnMask: mask });   // a mask: no causal default on top (that would be E_MASK_CAUSAL)
  assertClose(masked.data, refCustomSdpa(q, k, v, { attnMask: mask }), 'a mask alone decides');
  expectError(() => cache.attend(q, { attnMask: mask, isCausal: true }), 'E_MASK_CAUSAL', [/attnMask/, /isCausal/]);
  cache.dispose();
});

test('customSdpa keeps ExecuTorch\'s non-causal default', () => {
  const rand = rng(5);
  const q = randTensor(rand, [1, 4, Hq, D]), k = randTensor(rand, [1, 4, Hkv, D]), v = randTensor(rand, [1, 4, Hkv, D]);
  assertClose(sdpa.customSdpa(q, k, v).data, refCustomSdpa(q, k, v, { startPos: 0, isCausal: false }), 'customSdpa default');
});

test('cache.attend with query rows past cache.length is E_START_POS, on plain and windowed caches alike', () => {
  const rand = rng(6);
  const plain = sdpa.createKVCache({ maxSeqLen: 16, numKvHeads: Hkv, headDim: D });
  const windowed = sdpa.createKVCache({ window: 8, numKvHeads: Hkv, headDim: D });
  for (const cache of [plain, windowed]) {
    cache.update(randTensor(rand, [1, 5, Hkv, D]), randTensor(rand, [1, 5, Hkv, D]));
    const before = cache.read(0, 5);
    const out = { data: new Float32Array(Hq * D).fill(7), dims: [1, 1, Hq, D] };
    expectError(() => cache.attend(randTensor(rand, [1, 1, Hq, D]), { startPos: cache.length, out }), 'E_START_POS',
      [/startPos 5/, /5 rows written/, /cache\.length/]);
    assert.ok(out.data.every((x) => x === 7), 'out untouched');
    const after = cache.read(0, 5);
    assert.ok(sameBits(after.k.data, before.k.data) && sameBits(after.v.data, before.v.data), 'cache untouched');
    // the last row written is fine
    cache.attend(randTensor(rand, [1, 1, Hq, D]), { startPos: 4 });
  }
  // with a mask the mask's N columns are what is read: unwritten rows are zeros there, as before
  const q = randTensor(rand, [1, 1, Hq, D]);
  const mask = { data: new Float32Array(8), dims: [1, 8] };
  const all = plain.read(0, 8);
  assertClose(plain.attend(q, { startPos: 9, attnMask: mask }).data, refCustomSdpa(q, all.k, all.v, { attnMask: mask }), 'masked attend over 8 columns');
  plain.dispose(); windowed.dispose();
});

test('tensors in PyTorch\'s [B, H, S, D] layout: the error says so; a real head mismatch does not', () => {
  const rand = rng(8);
  const torchHint = /PyTorch's \[B, H, S, D\]/;
  const cache = sdpa.createKVCache({ maxSeqLen: 16, numKvHeads: Hkv, headDim: D });
  cache.update(randTensor(rand, [1, 3, Hkv, D]), randTensor(rand, [1, 3, Hkv, D]));
  const before = cache.read(0, 16);
  // one decode step, each tensor [B, H, 1, D]
  const qT = randTensor(rand, [1, Hq, 1, D]), kT = randTensor(rand, [1, Hkv, 1, D]), vT = randTensor(rand, [1, Hkv, 1, D]);
  expectError(() => cache.step(qT, kT, vT), 'E_DIMS', [/query has 4 rows but key has 2/, torchHint, /\[B, S, H, D\]/]);
  expectError(() => cache.update(randTensor(rand, [1, Hkv, 3, D]), randTensor(rand, [1, Hkv, 3, D])), 'E_HEADS', [/numKvHeads = 2/, torchHint]);
  expectError(() => cache.attend(qT, { startPos: 0 }), 'E_HEADS', [/heads/, torchHint]);
  expectError(() => sdpa.customSdpa(randTensor(rand, [1, Hq, 6, D]), randTensor(rand, [1, Hkv, 6, D]), randTensor(rand, [1, Hkv, 6, D])), 'E_START_POS',
    [/startPos 0 \+ query length 4/, torchHint]);
  // not transposed: no hint
  const e1 = expectError(() => cache.attend(randTensor(rand, [1, 1, 3, D]), { startPos: 0 }), 'E_HEADS', [/multiple of key heads/]);
  assert.not.match(e1.message, torchHint);
  const e2 = expectError(() => cache.update(randTensor(rand, [1, 1, 3, D]), randTensor(rand, [1, 1, 3, D])), 'E_HEADS', [/numKvHeads = 2/]);
  assert.not.match(e2.message, torchHint);
  const after = cache.read(0, 16);
  assert.ok(sameBits(after.k.data, before.k.data) && sameBits(after.v.data, before.v.data), 'nothing written');
  assert.is(cache.length, 3);
  cache.dispose();
});

test('messages count rows in English ("1 row", "2 rows")', () => {
  const rand = rng(9);
  const cache = sdpa.createKVCache({ maxSeqLen: 2, numKvHeads: Hkv, headDim: D });
  cache.update(randTensor(rand, [1, 1, Hkv, D]), randTensor(rand, [1, 1, Hkv, D]));
  expectError(() => cache.attend(randTensor(rand, [1, 1, Hq, D]), { startPos: 1 }), 'E_START_POS', [/past the 1 row written/]);
  cache.update(randTensor(rand, [1, 1, Hkv, D]), randTensor(rand, [1, 1, Hkv, D]));
  const e = expectError(() => cache.update(randTensor(rand, [1, 1, Hkv, D]), randTensor(rand, [1, 1, Hkv, D]), 2), 'E_CAPACITY', [/writing 1 row at startPos 2 needs 3 rows/]);
  assert.not.match(e.message, /1 rows/);
  cache.dispose();
});

/** The bytes of one page as CONTRACT.md section 3 states them (64 rows; a 64-byte pool header). */
function contractPageBytes(dtype, D) {
  let b = dtype === 'float32' ? 2 * 64 * D * 4 : dtype === 'float16' ? 2 * 64 * D * 2 : 64 * (2 * Math.ceil(D / 2) + D) + 2 * 64 * 4 + 2 * 64;
  return Math.ceil(b / 64) * 64 + 64;
}

test('sdpa.kvCacheSize: the bytes n rows will take, so that reserve() is sized without measuring; cache.bytes and memory() agree', async () => {
  const cases = [
    [{ maxSeqLen: 300, numKvHeads: 2, headDim: 64 }, 130],
    [{ maxSeqLen: 300, numKvHeads: 3, headDim: 7, dtype: 'int8', batch: 2 }, 65],
    [{ maxSeqLen: 128, numKvHeads: 1, headDim: 33, dtype: 'float16' }, 1],
    [{ window: 100, sinkTokens: 4, numKvHeads: 2, headDim: 16 }, 1000],     // the ring: flat however long
    [{ maxSeqLen: 64, numKvHeads: 2, headDim: 8 }, 0],
  ];
  for (const [geo, rows] of cases) {
    const one = await createSdpa({ threads: 1 });   // a fresh pool: its counts are this cache's
    const size = one.kvCacheSize(geo, rows);
    const B = geo.batch ?? 1, H = geo.numKvHeads, dtype = geo.dtype ?? 'float32';
    const slots = geo.window ? Math.ceil(geo.sinkTokens / 64) + Math.ceil((geo.window - 1) / 64) + 2 : Math.ceil(geo.maxSeqLen / 64);
    const pages = B * H * Math.min(Math.ceil(rows / 64), slots);
    const label = JSON.stringify(geo) + ` rows ${rows}`;
    assert.is(size.pages, pages, `${label}: pages`);
    assert.is(size.pageBytes, contractPageBytes(dtype, geo.headDim), `${label}: page bytes`);
    assert.is(size.poolBytes, pages * size.pageBytes, `${label}: pool bytes`);
    assert.is(size.tableBytes, B * H * slots * 4, `${label}: table bytes`);
    assert.is(size.bytes, size.poolBytes + size.tableBytes, `${label}: bytes`);
    const cache = one.createKVCache(geo);   // (its page size's zero page comes from the pool: create, then reserve)
    one.reserve(size.poolBytes);
    const reserved = one.memory().bytesReserved;
    const chunk = 50;
    for (let t = 0; t < rows; t += chunk) {
      const n = Math.min(chunk, rows - t);
      const kv = { data: new Float32Array(B * n * H * geo.headDim).fill(0.25), dims: [B, n, H, geo.headDim] };
      cache.update(kv, kv);
    }
    const mem = one.memory();
    assert.is(mem.bytesReserved, reserved, `${label}: reserve(poolBytes) was enough: no growth while writing`);
    assert.is(mem.bytesInUse, size.poolBytes, `${label}: memory().bytesInUse`);
    assert.is(cache.bytes, size.bytes, `${label}: cache.bytes`);
    assert.is(cache.bytes - size.tableBytes, mem.bytesInUse, `${label}: cache.bytes counts pages as the pool does`);
    one.dispose();
  }
  expectError(() => sdpa.kvCacheSize({ maxSeqLen: 10, numKvHeads: 2, headDim: 8 }, 11), 'E_CAPACITY', [/rows is 11/, /maxSeqLen = 10/]);
  expectError(() => sdpa.kvCacheSize({ maxSeqLen: 10, numKvHeads: 2, headDim: 8 }, -1), 'E_DIMS', [/rows/]);
  expectError(() => sdpa.kvCacheSize({ maxSeqLen: 10, numKvHeads: 2, headDim: 8, dtype: 'int3' }), 'E_DTYPE', [/int3/]);
  expectError(() => sdpa.kvCacheSize({ numKvHeads: 2, headDim: 8 }), 'E_ARG', [/maxSeqLen/]);
  // default rows: the whole cache
  assert.is(sdpa.kvCacheSize({ maxSeqLen: 200, numKvHeads: 2, headDim: 8 }).pages, 2 * 4);
});

test('a disposed cache: length, bytes and windowStart read 0, every method is E_DISPOSED', () => {
  const cache = sdpa.createKVCache({ window: 8, numKvHeads: Hkv, headDim: D });
  const kv = { data: new Float32Array(3 * Hkv * D), dims: [1, 3, Hkv, D] };
  cache.update(kv, kv);
  cache.update(kv, kv);
  assert.ok(cache.bytes > 0 && cache.length === 6);
  cache.dispose();
  assert.is(cache.disposed, true);
  assert.is(cache.length, 0);
  assert.is(cache.bytes, 0);
  assert.is(cache.windowStart, 0);
  expectError(() => cache.update(kv, kv, 0), 'E_DISPOSED', [/disposed/]);
  expectError(() => cache.read(0, 1), 'E_DISPOSED', [/disposed/]);
  expectError(() => cache.fork(), 'E_DISPOSED', [/disposed/]);
  expectError(() => cache.truncate(0), 'E_DISPOSED', [/disposed/]);
});

/** Runs fn with console.warn captured; returns the warnings. */
function warnings(fn) {
  const seen = [], real = console.warn;
  console.warn = (...a) => seen.push(a.join(' '));
  try { fn(); } finally { console.warn = real; }
  return seen;
}

test('a heap-tensor view saved across memory growth: lost writes in the single-thread build, a warning in every build, t.set() safe', async () => {
  for (const build of ['simd', 'simd-threads']) {
    const one = await createSdpa({ build, threads: 1 });
    const cache = one.createKVCache({ maxSeqLen: 8, numKvHeads: Hkv, headDim: D });
    const q = one.allocTensor('float32', [1, 1, Hq, D]), k = one.allocTensor('float32', [1, 1, Hkv, D]), v = one.allocTensor('float32', [1, 1, Hkv, D]);
    const saved = q.data;
    saved.fill(1);
    const big = one.allocTensor('float32', [64 << 20]);   // 256 MiB: memory grows, its buffer is replaced
    assert.ok(big.data.buffer !== saved.buffer, `${build}: the memory grew`);   // (q.data is not read before the step)
    if (build === 'simd') assert.is(saved.length, 0, 'single-thread build: the saved view is detached');
    saved[0] = 2;   // an element write: lost in the single-thread build, silently
    const w = warnings(() => cache.step(q, k, v));
    assert.is(q.data[0], build === 'simd' ? 1 : 2, `${build}: what the saved view's write did`);
    assert.is(w.length, 1, `${build}: one warning: ${w}`);
    assert.match(w[0], /query is a heap tensor whose data was last read before wasm memory grew/);
    assert.match(w[0], /query\.set\(\)/);
    assert.is(warnings(() => cache.step(q, k, v)).length, 0, 'once per instance');
    // t.set writes through the current view: no warning on another instance either
    const two = await createSdpa({ build, threads: 1 });
    const c2 = two.createKVCache({ maxSeqLen: 8, numKvHeads: Hkv, headDim: D });
    const q2 = two.allocTensor('float32', [1, 1, Hq, D]), kv2 = two.allocTensor('float32', [1, 1, Hkv, D]);
    const grown = two.allocTensor('float32', [64 << 20]);
    q2.set(new Float32Array(Hq * D).fill(3));
    kv2.set(Array.from({ length: Hkv * D }, () => 0.5));
    assert.is(q2.data[Hq * D - 1], 3);
    assert.is(warnings(() => c2.step(q2, kv2, kv2)).length, 0, `${build}: t.set() leaves nothing to warn about`);
    expectError(() => q2.set(new Float32Array(Hq * D + 1)), 'E_DIMS', [/HeapTensor\.set/, /do not fit/]);
    expectError(() => q2.set(new Float32Array(2), Hq * D - 1), 'E_DIMS', [/offset/]);
    expectError(() => q2.set('abc'), 'E_ARG', [/source/]);
    expectError(() => q2.set(new Float32Array(1), -1), 'E_ARG', [/offset/]);
    grown.dispose(); big.dispose();
    one.dispose(); two.dispose();
  }
});

test.run();
