// dtypes.test.js: float16 and int8 KV caches through the public API
// (CONTRACT.md section 3, "Cache dtypes"): what is stored (readRaw) against
// independent JS implementations of the formulas, read() as the decoded
// stored values, attention over the stored values against the float64
// reference, 1 vs 2 threads, bytes held, errors.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa } from '../../js/index.js';
import { rng, randTensor, assertClose, expectError, sameBits } from './helpers.js';
import { refCustomSdpa } from './reference.js';

let one, two;
test.before(async () => { one = await createSdpa({ threads: 1 }); two = await createSdpa({ threads: 2 }); });
test.after(() => { one.dispose(); two.dispose(); });

const f = Math.fround;

/** binary16 bits -> value, by the IEEE formula. */
function halfValue(h) {
  const s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const v = e === 31 ? (m ? NaN : Infinity) : e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15);
  return s ? -v : v;
}

/** float32 -> nearest binary16 value, ties to even (by search over the neighbours, in double). */
function nearestHalf(x) {
  if (Number.isNaN(x)) return NaN;
  const a = Math.abs(x);
  if (a >= 65520) return Math.sign(x) * Infinity;
  let e = a < 2 ** -14 ? -14 : Math.floor(Math.log2(a));
  if (2 ** e > a) e--;                      // (log2 rounding)
  const ulp = 2 ** (Math.max(e, -14) - 10);
  const lo = Math.floor(a / ulp) * ulp, hi = lo + ulp;
  let r = a - lo < hi - a ? lo : a - lo > hi - a ? hi : ((lo / ulp) % 2 === 0 ? lo : hi);
  if (r === 65536) r = Infinity;
  return x < 0 || Object.is(x, -0) ? -r : r;
}

/** ExecuTorch's per-token asymmetric int8, every step a float32 operation (Math.fround). */
function quantizeRow(x) {
  let lo = 0, hi = 0;
  for (const v of x) if (Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  let scale = f(f(hi - lo) / 255);
  if (scale < 2 ** -23) scale = 2 ** -23;
  const dmin = f(lo / scale), dmax = f(hi / scale);
  let zp = f(f(-128 + dmin) + f(127 + dmax)) > 0 ? f(-128 - dmin) : f(127 - dmax);
  zp = roundHalfEven(Math.min(127, Math.max(-128, zp)));
  const inv = f(1 / scale);
  const q = x.map((v) => (Number.isNaN(v) ? zp : Math.min(127, Math.max(-128, roundHalfEven(f(f(v * inv) + zp))))));
  return { q, scale, zp };
}
function roundHalfEven(v) {
  const fl = Math.floor(v), d = v - fl;
  return d > 0.5 ? fl + 1 : d < 0.5 ? fl : (fl % 2 === 0 ? fl : fl + 1);
}

test('float16: stored bits are the nearest-even half of each value; read() returns their value', () => {
  const rand = rng(21);
  const D = 37, rows = 16;
  const cache = one.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: D, dtype: 'float16' });
  assert.is(cache.dtype, 'float16');
  const k = randTensor(rand, [1, rows, 1, D], 3);
  // edges: ties, overflow, subnormals, signed zero, Inf, NaN
  const edges = [65504, 65519.99, 65520, 1e6, -1e6, 2 ** -25, 2 ** -24, 1.5 * 2 ** -24, 2 ** -14, -0, 0, Infinity, -Infinity, NaN,
    1 + 2 ** -11, 1 + 3 * 2 ** -11, 2048 + 1, 2048 + 3, 0.1, -0.1];
  edges.forEach((x, i) => { k.data[i] = x; });
  cache.update(k, k);
  const raw = cache.readRaw(0, rows);
  assert.ok(raw.k.data instanceof Uint16Array && raw.k.dtype === 'float16');
  const back = cache.read(0, rows).k.data;
  let bad = 0;
  for (let i = 0; i < k.data.length; i++) {
    const want = nearestHalf(f(k.data[i])), got = halfValue(raw.k.data[i]);
    if (!(Object.is(got, want) || (Number.isNaN(want) && Number.isNaN(got)))) { if (!bad++) assert.unreachable(`half of ${k.data[i]}: got ${got}, want ${want}`); }
    if (!(Object.is(back[i], got) || (Number.isNaN(got) && Number.isNaN(back[i])))) { if (!bad++) assert.unreachable(`read() ${back[i]} != stored ${got}`); }
  }
  assert.is(bad, 0);
  cache.dispose();
});

test('int8: stored values, scales and zero points follow ExecuTorch\'s formula; read() = (q - zp) * scale', () => {
  const rand = rng(22);
  const D = 24, rows = 12;
  const cache = one.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: D, dtype: 'int8' });
  const k = randTensor(rand, [1, rows, 1, D], 2);
  k.data.fill(0, 0, D);                                        // an all-zero row
  k.data.fill(0.75, D, 2 * D);                                 // a constant row
  for (let d = 0; d < D; d++) k.data[2 * D + d] = d + 1;       // one sign
  for (let d = 0; d < D; d++) k.data[3 * D + d] = d % 2 ? 3e38 : -3e38;
  for (let d = 0; d < D; d++) k.data[4 * D + d] = (d - 8) * 0.5;
  k.data[5 * D + 3] = NaN; k.data[5 * D + 5] = Infinity; k.data[5 * D + 7] = -Infinity;
  cache.update(k, k);
  const raw = cache.readRaw(0, rows);
  const back = cache.read(0, rows).k.data;
  assert.ok(raw.k.data instanceof Int8Array && raw.k.scales instanceof Float32Array && raw.k.zeroPoints instanceof Int8Array);
  for (let r = 0; r < rows; r++) {
    const want = quantizeRow(Array.from(k.data.subarray(r * D, (r + 1) * D)));
    assert.is(raw.k.scales[r], want.scale, `row ${r} scale`);
    assert.is(raw.k.zeroPoints[r], want.zp, `row ${r} zero point`);
    assert.equal(Array.from(raw.k.data.subarray(r * D, (r + 1) * D)), want.q, `row ${r} values`);
    for (let d = 0; d < D; d++) {
      // (row 3: hi - lo overflows float32, so the scale is Inf and, as in ExecuTorch, the row reads back as NaN)
      const w = f((want.q[d] - want.zp) * want.scale);
      assert.ok(Object.is(back[r * D + d], w), `row ${r} read()[${d}] = ${back[r * D + d]}, expected ${w}`);
    }
    if (r === 3) assert.is(raw.k.scales[r], Infinity, 'row 3: the scale overflows');
  }
  cache.dispose();
});

for (const dtype of ['float16', 'int8']) {
  test(`${dtype}: attention over the stored values (steps, masks, GQA, split-KV) equals the float64 reference; 1 and 2 threads agree`, () => {
    const rand = rng(dtype === 'int8' ? 31 : 32);
    const cases = [
      { Hq: 8, Hkv: 2, D: 64, keys: 700, Sq: 1 },
      { Hq: 4, Hkv: 4, D: 20, keys: 130, Sq: 6 },
      { Hq: 6, Hkv: 3, D: 7, keys: 70, Sq: 3, mask: true },
    ];
    let worst = 0;
    for (const c of cases) {
      const caches = [one, two].map((s) => s.createKVCache({ maxSeqLen: c.keys, numKvHeads: c.Hkv, headDim: c.D, dtype }));
      const past = c.keys - c.Sq;
      const kp = randTensor(rand, [1, past, c.Hkv, c.D]), vp = randTensor(rand, [1, past, c.Hkv, c.D]);
      const q = randTensor(rand, [1, c.Sq, c.Hq, c.D]), k = randTensor(rand, [1, c.Sq, c.Hkv, c.D]), v = randTensor(rand, [1, c.Sq, c.Hkv, c.D]);
      let opts = { isCausal: true };
      if (c.mask) {
        const m = { data: new Float32Array(c.Sq * c.keys), dims: [c.Sq, c.keys] };
        for (let i = 0; i < m.data.length; i++) m.data[i] = rand() < 0.2 ? -Infinity : rand() - 0.5;
        opts = { attnMask: m };
      }
      const outs = caches.map((cache) => { cache.update(kp, vp); return cache.step(q, k, v, opts); });
      assert.ok(sameBits(outs[0].data, outs[1].data), `${dtype} ${JSON.stringify(c)}: 1 and 2 threads differ`);
      const stored = caches[0].read(0, c.keys);
      assertClose(outs[0].data, refCustomSdpa(q, stored.k, stored.v, { startPos: past, ...opts }), `${dtype} ${JSON.stringify(c)}`);
      // (against the original float32 K/V the error is the storage's)
      const fullK = { data: new Float32Array([...kp.data, ...k.data]), dims: [1, c.keys, c.Hkv, c.D] };
      const fullV = { data: new Float32Array([...vp.data, ...v.data]), dims: [1, c.keys, c.Hkv, c.D] };
      const orig = refCustomSdpa(q, fullK, fullV, { startPos: past, ...opts });
      let m = 0, e = 0;
      for (let i = 0; i < orig.length; i++) { m = Math.max(m, Math.abs(orig[i])); e = Math.max(e, Math.abs(orig[i] - outs[0].data[i])); }
      worst = Math.max(worst, e / (1 + m));
      for (const cache of caches) cache.dispose();
    }
    console.log(`  ${dtype}: error against the original float32 K/V ${worst.toExponential(2)} · (1 + max|ref|)`);
    assert.ok(worst < (dtype === 'int8' ? 2e-2 : 2e-3), `${dtype} storage error ${worst}`);
  });
}

test('bytes held: float16 half and int8 about a quarter of float32; an unknown dtype is E_DTYPE', () => {
  const sizes = {};
  for (const dtype of ['float32', 'float16', 'int8']) {
    const cache = one.createKVCache({ maxSeqLen: 1024, numKvHeads: 8, headDim: 128, dtype });
    const x = { data: new Float32Array(1024 * 8 * 128), dims: [1, 1024, 8, 128] };
    cache.update(x, x);
    sizes[dtype] = cache.bytes;
    cache.dispose();
  }
  assert.ok(sizes.float16 / sizes.float32 <= 0.501, `float16 ${sizes.float16 / sizes.float32}`);
  assert.ok(sizes.int8 / sizes.float32 <= 0.27, `int8 ${sizes.int8 / sizes.float32}`);
  expectError(() => one.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 4, dtype: 'bfloat16' }), 'E_DTYPE', [/bfloat16/, /int8/]);
  expectError(() => one.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 4, dtype: 8 }), 'E_ARG', [/dtype/]);
  const c = one.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 4, dtype: 'int8' });
  expectError(() => c.readRaw(4, 5), 'E_CAPACITY', [/readRaw/]);
  c.dispose();
  expectError(() => c.readRaw(0, 1), 'E_DISPOSED');
});

test('cache.bytes grows by what the page pool hands out, for every dtype and odd head dims', () => {
  // cache.bytes counts a page as the pool does (its 64-byte header included)
  for (const dtype of ['float32', 'float16', 'int8'])
    for (const headDim of [1, 7, 33, 64]) {
      const numKvHeads = 3;
      const cache = one.createKVCache({ maxSeqLen: 200, numKvHeads, headDim, dtype });
      const row = (n) => ({ data: new Float32Array(n * numKvHeads * headDim).fill(0.5), dims: [1, n, numKvHeads, headDim] });
      cache.update(row(64), row(64));  // page 0 of every head
      const bytes0 = cache.bytes, pool0 = one.memory().bytesInUse;
      cache.update(row(1), row(1), 64);  // a second page per head
      const grew = cache.bytes - bytes0, poolGrew = one.memory().bytesInUse - pool0;
      assert.is(grew, poolGrew, `${dtype} D=${headDim}: cache.bytes +${grew}, pool +${poolGrew}`);
      cache.dispose();
    }
});

test.run();
