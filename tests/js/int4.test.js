// int4.test.js: int4 caches and caches whose K and V have dtypes of their own
// (CONTRACT.md section 3, "Cache dtypes"), through the public API: what an
// int4 row stores (readRaw) against an independent JS implementation of the
// contract's formula (the float16 offset and scale found by search over
// every half), read() as level * scale + offset, the half-step bound, NaN
// groups; every one of the 16 K/V dtype pairs attends like the float64
// reference over the stored values, 1 and 2 threads bit for bit, on plain,
// windowed and forked caches; bytes; option errors.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { createSdpa } from '../../js/index.js';
import { rng, randTensor, expectError, sameBits } from './helpers.js';
import { refCustomSdpa } from './reference.js';

let one, two;
test.before(async () => { one = await createSdpa({ threads: 1 }); two = await createSdpa({ threads: 2 }); });
test.after(() => { one.dispose(); two.dispose(); });

const f = Math.fround;
const DTYPES = ['float32', 'float16', 'int8', 'int4'];

function halfValue(h) {
  const s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const v = e === 31 ? (m ? NaN : Infinity) : e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15);
  return s ? -v : v;
}
/** Every finite half, ascending. */
const HALVES = (() => {
  const pos = [];
  for (let m = 0; m < 0x7c00; m++) pos.push(halfValue(m));
  return [...pos.slice(1).reverse().map((x) => -x), ...pos];
})();
function nearestHalf(x) {  // ties to the even bit pattern
  let best = 0;
  for (let i = 1; i < HALVES.length; i++) if (Math.abs(HALVES[i] - x) < Math.abs(HALVES[best] - x)) best = i;
  return HALVES[best];
}
function roundHalfEven(v) {
  const fl = Math.floor(v), d = v - fl;
  return d > 0.5 ? fl + 1 : d < 0.5 ? fl : (fl % 2 === 0 ? fl : fl + 1);
}

/** The contract's int4 group: { levels, scale, offset } (scale, offset as numbers; NaN for a group it cannot store). */
function int4Group(x) {
  const n = x.length;
  if (x.some((v) => !(Math.abs(v) <= 65504))) return { levels: new Array(n).fill(0), scale: NaN, offset: NaN };
  const lo = Math.min(...x), hi = Math.max(...x);
  const offset = HALVES.find((h) => h >= lo);
  if (offset > hi) return { levels: new Array(n).fill(0), scale: 0, offset: nearestHalf(lo) };
  let scale = 0;
  for (const h of HALVES) if (h >= 0 && f(f(15 * h) + offset) <= hi) scale = h;
  const levels = x.map((v) => (scale > 0 ? Math.min(15, Math.max(0, roundHalfEven(f(f(v - offset) / scale)))) : 0));
  return { levels, scale, offset };
}

test('int4: levels, float16 scales and offsets follow the contract; read() = level * scale + offset; NaN groups', () => {
  const rand = rng(41);
  const D = 80, G = 2, rows = 10;  // groups of 64 and 16
  // (the codec itself: rows encoded as written, no float16 newest page, f16page.test.js)
  const cache = one.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: D, dtype: 'int4', float16NewestPage: false });
  assert.is(cache.dtype, 'int4');
  assert.is(cache.keyDtype, 'int4');
  const k = randTensor(rand, [1, rows, 1, D], 3);
  k.data.fill(0.7, 0, D);                                           // constant, not a half
  for (let d = 0; d < D; d++) k.data[D + d] = (d % 16) * 0.25 - 1;  // exactly 16 levels
  k.data[2 * D + 70] = NaN;                                         // the short group: NaN
  k.data[3 * D + 4] = Infinity;                                     // group 0: Inf
  k.data[4 * D + 7] = 70000;                                        // beyond float16
  for (let d = 0; d < D; d++) k.data[5 * D + d] = 1e-6 * (d % 7);   // subnormal scales
  for (let d = 0; d < D; d++) k.data[6 * D + d] = 100 + 0.01 * d;   // offset rounding beyond half a step
  cache.update(k, k);
  const raw = cache.readRaw(0, rows);
  const back = cache.read(0, rows).v.data;
  assert.ok(raw.v.data instanceof Uint8Array && raw.v.scales instanceof Uint16Array && raw.v.offsets instanceof Uint16Array);
  assert.is(raw.v.data.length, rows * D / 2);
  assert.is(raw.v.scales.length, rows * G);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < G; g++) {
      const d0 = 64 * g, n = Math.min(64, D - d0);
      const x = Array.from(k.data.subarray(r * D + d0, r * D + d0 + n));
      const want = int4Group(x);
      const scale = halfValue(raw.v.scales[r * G + g]), offset = halfValue(raw.v.offsets[r * G + g]);
      assert.ok(Object.is(scale, want.scale) || (Number.isNaN(want.scale) && Number.isNaN(scale)), `row ${r} group ${g}: scale ${scale}, expected ${want.scale}`);
      assert.ok(Object.is(offset, want.offset) || (Number.isNaN(want.offset) && Number.isNaN(offset)), `row ${r} group ${g}: offset ${offset}, expected ${want.offset}`);
      const lo = Math.min(...x), hi = Math.max(...x);
      for (let e = 0; e < n; e++) {
        const d = d0 + e, byte = raw.v.data[r * D / 2 + (d >> 1)];
        const level = d % 2 ? byte >> 4 : byte & 15;
        assert.is(level, want.levels[e], `row ${r} element ${d}: level`);
        const got = back[r * D + d];
        if (Number.isNaN(want.scale)) { assert.ok(Number.isNaN(got), `row ${r} element ${d}: a group that cannot be stored reads NaN`); continue; }
        assert.ok(Object.is(got, f(f(level * scale) + offset)), `row ${r} read()[${d}] = ${got}`);
        const top = f(f(15 * scale) + offset);
        const allow = Math.max(scale / 2, offset - lo, hi - top) * (1 + 1e-6) + 1e-7 * Math.abs(x[e]);
        assert.ok(Math.abs(got - x[e]) <= allow, `row ${r} element ${d}: ${x[e]} stored as ${got} (allowed ${allow})`);
        if (offset >= lo && offset <= hi) assert.ok(got >= lo && got <= hi, `row ${r} element ${d}: ${got} outside [${lo}, ${hi}]`);
      }
    }
  }
  cache.dispose();
});

/** Tolerance of the quantized kernels (the contract's int8 bound). */
function assertWithin(got, ref, rel, label) {
  let m = 0, e = 0, at = -1;
  for (let i = 0; i < ref.length; i++) {
    m = Math.max(m, Math.abs(ref[i]));
    const d = Math.abs(got[i] - ref[i]);
    if (!(d <= e)) { e = d; at = i; }
  }
  assert.ok(e <= rel * (1 + m), `${label}: |got - ref| = ${e} at ${at} (got ${got[at]}, ref ${ref[at]}) > ${rel} (1 + ${m})`);
  return e / (1 + m);
}

test('every K/V dtype pair: attention over the stored values equals the float64 reference; 1 and 2 threads agree', () => {
  const rand = rng(42);
  const shapes = [
    { Hq: 8, Hkv: 2, D: 64, keys: 600, Sq: 1 },     // decode, GQA, split-KV
    { Hq: 4, Hkv: 4, D: 80, keys: 130, Sq: 5 },     // a short int4 group (64 + 16), a few rows
    { Hq: 6, Hkv: 3, D: 7, keys: 70, Sq: 3, mask: true },
  ];
  for (const keyDtype of DTYPES) for (const valueDtype of DTYPES) {
    for (const c of shapes) {
      const label = `K ${keyDtype} V ${valueDtype} ${JSON.stringify(c)}`;
      // (rows encoded as written: a step over a float16 newest page's fill is f16page.test.js's)
      const caches = [one, two].map((s) => s.createKVCache({ maxSeqLen: c.keys, numKvHeads: c.Hkv, headDim: c.D, keyDtype, valueDtype, float16NewestPage: false }));
      assert.is(caches[0].keyDtype, keyDtype);
      assert.is(caches[0].valueDtype, valueDtype);
      assert.is(caches[0].dtype, keyDtype === valueDtype ? keyDtype : null, `${label}: cache.dtype`);
      const past = c.keys - c.Sq;
      const kp = randTensor(rand, [1, past, c.Hkv, c.D]), vp = randTensor(rand, [1, past, c.Hkv, c.D], 2);
      const q = randTensor(rand, [1, c.Sq, c.Hq, c.D]), k = randTensor(rand, [1, c.Sq, c.Hkv, c.D]), v = randTensor(rand, [1, c.Sq, c.Hkv, c.D], 2);
      let opts = {};
      if (c.mask) {
        const m = { data: new Float32Array(c.Sq * c.keys), dims: [c.Sq, c.keys] };
        for (let i = 0; i < m.data.length; i++) m.data[i] = rand() < 0.2 ? -Infinity : rand() - 0.5;
        opts = { attnMask: m };
      }
      const outs = caches.map((cache) => { cache.update(kp, vp); return cache.step(q, k, v, opts); });
      assert.ok(sameBits(outs[0].data, outs[1].data), `${label}: 1 and 2 threads differ`);
      const stored = caches[0].read(0, c.keys);
      const ref = refCustomSdpa(q, stored.k, stored.v, { startPos: past, isCausal: !c.mask, ...opts });
      const quantized = keyDtype.startsWith('int') || valueDtype.startsWith('int');
      assertWithin(outs[0].data, ref, quantized ? 2e-3 : 1e-5, label);
      // readRaw: each part in its own dtype
      const raw = caches[0].readRaw(0, 2);
      assert.is(raw.k.dtype, keyDtype);
      assert.is(raw.v.dtype, valueDtype);
      for (const cache of caches) cache.dispose();
    }
  }
});

test('int4 and mixed caches through a window ring, a fork (copy-on-write) and truncate', () => {
  const rand = rng(43);
  const [Hq, Hkv, D] = [4, 2, 48];
  for (const [keyDtype, valueDtype] of [['int4', 'int4'], ['int8', 'int4'], ['float16', 'int4'], ['int4', 'float32']]) {
    const label = `K ${keyDtype} V ${valueDtype}`;
    const win = one.createKVCache({ numKvHeads: Hkv, headDim: D, window: 100, sinkTokens: 4, keyDtype, valueDtype });
    const plain = one.createKVCache({ maxSeqLen: 400, numKvHeads: Hkv, headDim: D, keyDtype, valueDtype });
    const ks = randTensor(rand, [1, 300, Hkv, D]), vs = randTensor(rand, [1, 300, Hkv, D]);
    plain.update(ks, vs);
    const fork = plain.fork();
    const q = randTensor(rand, [1, 1, Hq, D]);
    // the windowed cache, written a row at a time, against the reference over its stored window and sinks
    let out;
    for (let t = 0; t < 300; t++) {
      const row = (x) => ({ data: x.data.slice(t * Hkv * D, (t + 1) * Hkv * D), dims: [1, 1, Hkv, D] });
      out = win.step(q, row(ks), row(vs));
    }
    const kept = plain.read(0, 300);  // the same rows, stored the same way
    const mask = { data: new Float32Array(300).fill(-Infinity), dims: [1, 300] };
    for (let t = 0; t < 300; t++) if (t < 4 || t > 299 - 100) mask.data[t] = 0;
    assertWithin(out.data, refCustomSdpa(q, kept.k, kept.v, { attnMask: mask }), 2e-3, `${label}: windowed`);
    // the fork rewrites row 10 (a shared page: copied first), the original keeps its own
    const row10 = randTensor(rand, [1, 1, Hkv, D]);
    fork.update(row10, row10, 10);
    const a = plain.attend(q, { startPos: 299 }), b = fork.attend(q, { startPos: 299 });
    const fk = fork.read(0, 300);
    assertWithin(a.data, refCustomSdpa(q, kept.k, kept.v, { startPos: 299, isCausal: true }), 2e-3, `${label}: original`);
    assertWithin(b.data, refCustomSdpa(q, fk.k, fk.v, { startPos: 299, isCausal: true }), 2e-3, `${label}: fork`);
    assert.ok(sameBits(plain.read(0, 300).k.data, kept.k.data), `${label}: the original is unchanged`);
    assert.ok(!sameBits(kept.k.data.slice(10 * Hkv * D, 11 * Hkv * D), fk.k.data.slice(10 * Hkv * D, 11 * Hkv * D)), `${label}: the fork's row 10 is its own`);
    // truncate mid-page, then new rows there: attention sees the new rows only
    plain.truncate(70);
    const more = randTensor(rand, [1, 30, Hkv, D]);
    plain.update(more, more);
    const after = plain.read(0, 100);
    assertWithin(plain.attend(q, { startPos: 99 }).data, refCustomSdpa(q, after.k, after.v, { startPos: 99, isCausal: true }), 2e-3, `${label}: truncated`);
    for (const c of [win, plain, fork]) c.dispose();
  }
});

test('bytes: int4 at most 0.17x of float32, K int8 + V int4 at most 0.22x; kvCacheSize agrees; option errors', () => {
  const sizes = {};
  const pairs = [['float32', 'float32'], ['int4', 'int4'], ['int8', 'int4'], ['float16', 'int4'], ['int8', 'int8']];
  for (const [keyDtype, valueDtype] of pairs) {
    const opts = { maxSeqLen: 1024, numKvHeads: 8, headDim: 128, keyDtype, valueDtype };
    const cache = one.createKVCache(opts);
    const x = { data: new Float32Array(1024 * 8 * 128).fill(0.25), dims: [1, 1024, 8, 128] };
    cache.update(x, x);
    sizes[`${keyDtype}/${valueDtype}`] = cache.bytes;
    assert.is(one.kvCacheSize(opts).bytes, cache.bytes, `${keyDtype}/${valueDtype}: kvCacheSize = cache.bytes`);
    cache.dispose();
  }
  const f32 = sizes['float32/float32'];
  assert.ok(sizes['int4/int4'] / f32 <= 0.17, `int4 ${sizes['int4/int4'] / f32}`);
  assert.ok(sizes['int8/int4'] / f32 <= 0.22, `int8/int4 ${sizes['int8/int4'] / f32}`);
  // dtype sets both; keyDtype / valueDtype override it
  const c = one.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 4, dtype: 'int8', valueDtype: 'int4' });
  assert.equal([c.dtype, c.keyDtype, c.valueDtype], [null, 'int8', 'int4']);
  c.dispose();
  expectError(() => one.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 4, keyDtype: 'int3' }), 'E_DTYPE', [/keyDtype 'int3'/, /int4/]);
  expectError(() => one.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 4, valueDtype: 'q4_0' }), 'E_DTYPE', [/valueDtype 'q4_0'/]);
  expectError(() => one.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 4, valueDtype: 4 }), 'E_ARG', [/valueDtype must be a string/]);
  expectError(() => one.kvCacheSize({ maxSeqLen: 8, numKvHeads: 1, headDim: 4, keyDtype: 'bf16' }), 'E_DTYPE', [/keyDtype/]);
});

test('a version 1 state (int4 in 32-element groups) loads with each int4 row decoded as that layout reads it and encoded again in 64-element groups; other records as saved', async () => {
  // tests/data/state/v1-kint8-vint4.sdpakv: K int8 / V int4, 100 rows x 2 heads x D 40, one 96-byte header
  // + meta + CRC, then per head and row a K record (D + 5 bytes) and a V record (20 nibble bytes, then 2
  // float16 scales and 2 offsets of groups of 32 and 8: docs/FORMAT.md, version 1), read here by hand
  const bytes = new Uint8Array(readFileSync(new URL('../data/state/v1-kint8-vint4.sdpakv', import.meta.url)));
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  assert.is(dv.getUint32(8, true), 1, 'a version 1 state');
  const [rowsN, H, D] = [100, 2, 40];
  const krec = D + 5, vrec = D / 2 + 4 * 2;
  assert.is(dv.getUint32(68, true), vrec, 'the V record of version 1: 2 groups');
  const payload = 100 + dv.getUint32(88, true);
  const { cache } = await one.loadKVCache(bytes);
  const got = cache.read(0, rowsN), raw = cache.readRaw(0, rowsN);
  assert.is(raw.v.scales.length, rowsN * H, 'one scale per V row now (a 64-element group)');
  for (let h = 0; h < H; h++) {
    for (let t = 0; t < rowsN; t++) {
      const at = payload + (h * rowsN + t) * (krec + vrec);
      // K int8: the saved record, as it was
      for (let d = 0; d < D; d++) assert.is(raw.k.data[(t * H + h) * D + d], dv.getInt8(at + d), `K row ${t} head ${h}`);
      // V int4: the old layout's values, then the contract's 64-element group over them
      const v = at + krec, x = [];
      for (let d = 0; d < D; d++) {
        const q = (bytes[v + (d >> 1)] >> (4 * (d & 1))) & 15, g = d >> 5;
        const scale = halfValue(dv.getUint16(v + D / 2 + 2 * g, true)), offset = halfValue(dv.getUint16(v + D / 2 + 4 + 2 * g, true));
        x.push(f(f(q * scale) + offset));
      }
      const want = int4Group(x);
      for (let d = 0; d < D; d++) {
        const expect = f(f(want.levels[d] * want.scale) + want.offset);
        assert.ok(Object.is(got.v.data[(t * H + h) * D + d], expect), `V row ${t} head ${h} element ${d}: ${got.v.data[(t * H + h) * D + d]}, expected ${expect}`);
      }
    }
  }
  cache.dispose();
});

test.run();
