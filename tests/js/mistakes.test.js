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

test.run();
