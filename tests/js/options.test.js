// options.test.js: sliding windows, logit softcap and attention sinks
// (CONTRACT.md section 1) through the public API, against the
// float64 reference: customSdpa, cache.step and cache.attend, their
// combinations, and each new rule's error with nothing written.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, checkOptions, SdpaError } from '../../js/index.js';
import { rng, randTensor, assertClose, expectError, sameBits } from './helpers.js';
import { refCustomSdpa } from './reference.js';

let sdpa;
test.before(async () => { sdpa = await createSdpa({ threads: 2 }); });
test.after(() => { sdpa.dispose(); });

test('checkOptions reads options as the package reads its own: each known name once, any other E_ARG', () => {
  let reads = 0;
  const proto = { inherited: 3 };
  const opts = Object.create(proto, { a: { get: () => { reads++; return 1; }, enumerable: false } });
  const o = checkOptions('mine', opts, ['a', 'b', 'inherited']);
  assert.equal([o.a, o.b, o.inherited], [1, undefined, 3]);
  assert.is(reads, 1, 'a getter is read once');
  assert.equal(checkOptions('mine', undefined, ['a']), { a: undefined });
  expectError(() => checkOptions('mine', { a: 1, c: 2 }, ['a', 'b']), 'E_ARG', [/^mine: unknown option 'c'/, /the options are a, b/]);
  expectError(() => checkOptions('mine', 5, ['a']), 'E_ARG', [/^mine: options must be a plain object/]);
  // a name some script put on Object.prototype is no option (sdpa-wasm/llama reads its options here)
  Object.prototype.temperature = 99; // eslint-disable-line no-extend-native
  try {
    assert.equal(checkOptions('mine', {}, ['temperature']), { temperature: undefined });
    assert.equal(checkOptions('mine', { maxNewTokens: 3 }, ['maxNewTokens', 'temperature']), { maxNewTokens: 3, temperature: undefined });
  } finally { delete Object.prototype.temperature; }
  // the same words as the package's own calls
  let own = null;
  try { sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 8, bogus: 1 }); } catch (e) { own = e; }
  let mine = null;
  try { checkOptions('createKVCache', { maxSeqLen: 8, numKvHeads: 1, headDim: 8, bogus: 1 }, ['batch', 'maxSeqLen', 'numKvHeads', 'headDim', 'dtype', 'keyDtype', 'valueDtype', 'window', 'sinkTokens', 'float16NewestPage']); } catch (e) { mine = e; }
  assert.ok(own instanceof SdpaError && mine instanceof SdpaError);
  assert.is(mine.message, own.message);
});

test('window x causal x softcap x sinks, decode (split-KV) and prefill, customSdpa and a cache', () => {
  const rand = rng(61);
  let n = 0;
  for (const [Hq, Hkv, D, Sq, Skv, sp] of [[8, 2, 64, 1, 600, 599], [4, 2, 12, 9, 140, 70]]) {
    const q = randTensor(rand, [1, Sq, Hq, D], 2), k = randTensor(rand, [1, Skv, Hkv, D], 2), v = randTensor(rand, [1, Skv, Hkv, D]);
    const sinks = randTensor(rand, [Hq], 3);
    // (40 and 333 cut the prefill and the decode rows; 1000 covers every key: the same as no window)
    for (const window of [undefined, 1, 7, 40, 128, 333, 1000]) {
      for (const isCausal of [false, true]) {
        for (const softcap of [undefined, 2, 50]) {
          for (const withSinks of [false, true]) {
            const opts = { startPos: sp, isCausal, window, softcap, sinks: withSinks ? sinks : undefined };
            const ref = refCustomSdpa(q, k, v, opts);
            const got = sdpa.customSdpa(q, k, v, opts);
            assertClose(got.data, ref, `customSdpa ${JSON.stringify({ Sq, window, isCausal, softcap, withSinks })}`);
            n++;
          }
        }
      }
    }
    // through a cache: the same answer, bit for bit, as customSdpa over the same rows
    const cache = sdpa.createKVCache({ maxSeqLen: Skv, numKvHeads: Hkv, headDim: D });
    cache.update({ data: k.data.subarray(0, sp * Hkv * D), dims: [1, sp, Hkv, D] }, { data: v.data.subarray(0, sp * Hkv * D), dims: [1, sp, Hkv, D] });
    const opts = { isCausal: true, window: 100, softcap: 30, sinks };
    const stepped = cache.step(q, { data: k.data.subarray(sp * Hkv * D, (sp + Sq) * Hkv * D), dims: [1, Sq, Hkv, D] },
      { data: v.data.subarray(sp * Hkv * D, (sp + Sq) * Hkv * D), dims: [1, Sq, Hkv, D] }, opts);
    const direct = sdpa.customSdpa(q, k, v, { startPos: sp, ...opts });
    assertClose(direct.data, refCustomSdpa(q, k, v, { startPos: sp, ...opts }), `customSdpa ${JSON.stringify({ Sq, window: 100, softcap: 30 })} with sinks`);
    assert.ok(sameBits(stepped.data, direct.data), 'cache.step == customSdpa with the same options');
    assert.ok(sameBits(cache.attend(q, opts).data, direct.data), 'cache.attend (last Sq rows) == customSdpa');
    cache.dispose();
  }
  assert.ok(n >= 100, `${n} combinations`);
});

test('a row outside its window, with a sink, outputs zeros; softcap keeps masked keys masked', () => {
  const rand = rng(62);
  const q = randTensor(rand, [1, 1, 2, 8]), k = randTensor(rand, [1, 50, 1, 8]), v = randTensor(rand, [1, 50, 1, 8]);
  const sinks = { data: new Float32Array([1, -1]), dims: [2] };
  // window 1 + causal: the row sees only its own key
  const one = sdpa.customSdpa(q, k, v, { startPos: 49, isCausal: true, window: 1, sinks });
  assertClose(one.data, refCustomSdpa(q, k, v, { startPos: 49, isCausal: true, window: 1, sinks }), 'window 1 with sinks');
  // every key masked by a bool mask, softcap on: zeros, not NaN (-inf stays -inf)
  const mask = { data: new Uint8Array(50), dims: [1, 50] };
  const masked = sdpa.customSdpa(q, k, v, { attnMask: mask, softcap: 5, sinks });
  assert.ok(masked.data.every((x) => x === 0), 'a fully masked row with a sink is zeros');
});

test('errors: window, softcap and sinks rules; nothing written', () => {
  const rand = rng(63);
  const q = randTensor(rand, [1, 1, 4, 8]), k = randTensor(rand, [1, 6, 2, 8]), v = randTensor(rand, [1, 6, 2, 8]);
  const out = { data: new Float32Array(32).fill(7), dims: [1, 1, 4, 8] };
  const cases = [
    ['window 0', { window: 0 }, 'E_ARG', /window/],
    ['window 1.5', { window: 1.5 }, 'E_ARG', /window/],
    ['window a string', { window: '4' }, 'E_ARG', /window/],
    ['window with a mask', { window: 2, attnMask: { data: new Float32Array(6), dims: [1, 6] } }, 'E_ARG', /window/],
    ['softcap -1', { softcap: -1 }, 'E_SCALE', /softcap/],
    ['softcap Infinity', { softcap: Infinity }, 'E_SCALE', /softcap/],
    ['softcap a string', { softcap: '5' }, 'E_ARG', /softcap/],
    ['sinks of 3 for 4 heads', { sinks: { data: new Float32Array(3), dims: [3] } }, 'E_HEADS', /sinks/],
    ['sinks 2-D', { sinks: { data: new Float32Array(4), dims: [1, 4] } }, 'E_RANK', /sinks/],
    ['sinks length vs dims', { sinks: { data: new Float32Array(3), dims: [4] } }, 'E_DIMS', /sinks/],
    ['sinks Uint8Array', { sinks: { data: new Uint8Array(4), dims: [4] } }, 'E_DTYPE', /sinks/],
    ['sinks not a tensor', { sinks: [0, 0, 0, 0] }, 'E_ARG', /sinks/],
    ['out overlaps sinks', { sinks: { data: out.data.subarray(0, 4), dims: [4] } }, 'E_ARG', /sinks/],
  ];
  for (const [label, extra, code, re] of cases) {
    expectError(() => sdpa.customSdpa(q, k, v, { startPos: 5, out, ...extra }), code, [re], label);
    assert.ok(out.data.every((x) => x === 7), `${label}: out was written`);
  }
  const cache = sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8 });
  expectError(() => cache.step(q, randTensor(rand, [1, 1, 2, 8]), randTensor(rand, [1, 1, 2, 8]), { softcap: 0 }), 'E_SCALE', [/softcap/]);
  assert.is(cache.length, 0, 'the rejected step wrote nothing');
  cache.dispose();
});

test('sinks follow the snapshot rule: a lying subclass, a disposing getter, heap and wasm-memory views', async () => {
  const rand = rng(64);
  const q = randTensor(rand, [1, 1, 4, 8]), k = randTensor(rand, [1, 6, 2, 8]), v = randTensor(rand, [1, 6, 2, 8]);
  const real = new Float32Array([0.5, -1, 2, 0]);
  const ref = refCustomSdpa(q, k, v, { startPos: 5, sinks: { data: real, dims: [4] } });
  // a Float32Array subclass that lies about its length and buffer: the real contents are used
  class Liar extends Float32Array { get length() { return 1e6; } get buffer() { return new ArrayBuffer(4); } get byteOffset() { return 999; } }
  assertClose(sdpa.customSdpa(q, k, v, { startPos: 5, sinks: { data: Liar.from(real), dims: [4] } }).data, ref, 'lying sinks');
  // a heap tensor as sinks: read in place; disposed: E_DISPOSED
  const hs = sdpa.allocTensor('float32', [4]);
  hs.data.set(real);
  assertClose(sdpa.customSdpa(q, k, v, { startPos: 5, sinks: hs }).data, ref, 'heap sinks');
  const out = { data: new Float32Array(32).fill(7), dims: [1, 1, 4, 8] };
  // a view of wasm memory outside every heap tensor: E_ARG
  const stray = new Float32Array(hs.data.buffer, 0, 4);
  expectError(() => sdpa.customSdpa(q, k, v, { startPos: 5, sinks: { data: stray, dims: [4] }, out }), 'E_ARG', [/sinks/, /heap tensor/]);
  hs.dispose();
  expectError(() => sdpa.customSdpa(q, k, v, { startPos: 5, sinks: hs, out }), 'E_DISPOSED', [/sinks/]);
  // a getter that disposes the instance while the call reads its arguments: E_DISPOSED, nothing written
  const other = await createSdpa({ threads: 1 });
  const sneaky = { dims: [4], get data() { other.dispose(); return real; } };
  expectError(() => other.customSdpa(q, k, v, { startPos: 5, sinks: sneaky, out }), 'E_DISPOSED');
  assert.ok(out.data.every((x) => x === 7), 'nothing was written');
});

test.run();
