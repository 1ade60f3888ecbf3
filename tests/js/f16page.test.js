// f16page.test.js: the float16 newest page of int8 / int4 caches
// (createKVCache's float16NewestPage, CONTRACT.md section 3, "Cache dtypes"),
// through the public API. The rows of the page being filled are stored as
// float16 and encoded to the block's dtype once, when the page fills. Held
// here: what read() gives before the fill (the float16 rounding of the rows,
// computed here with Math.fround-free bit arithmetic) and after it (the
// encoding of those float16 values, which a cache without the page makes of
// the same float16 values); attention before and after against the float64
// reference over the values read() gives at that moment; the same bits
// whatever the writes' cutting; truncate back into an encoded page (its rows
// stay encoded); fork, windowed ring, stepMany / attendMany, a tree verify and
// keepRows across the fill, KVCacheGroup, saved state (round trip, a prefix,
// a state saved before this change: tests/data/state), kvCacheSize and
// reserve, the option's rule and defaults.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { readFileSync } from 'node:fs';
import { createSdpa } from '../../js/index.js';
import { rng, randTensor, expectError, sameBits } from './helpers.js';
import { refCustomSdpa } from './reference.js';

let one, two;
test.before(async () => { one = await createSdpa({ threads: 1 }); two = await createSdpa({ threads: 2 }); });
test.after(() => { one.dispose(); two.dispose(); });

const QUANTIZED = new Set(['int8', 'int4']);
const PAIRS = [['int4', 'int4'], ['int8', 'int8'], ['int8', 'int4'], ['float32', 'int4'], ['int4', 'float16']];

/** x rounded to float16 (nearest even; overflow to ±Inf), as a float64: independent of the library's codec. */
function f16(x) {
  if (!Number.isFinite(x) || x === 0) return x;
  const a = Math.abs(x);
  if (a >= 65520) return Math.sign(x) * Infinity;
  const e = Math.max(Math.floor(Math.log2(a)), -14);
  let step = 2 ** (e - 10);
  if (a / step >= 2048) step *= 2;  // (log2 rounding at a power of two)
  const q = a / step, fl = Math.floor(q), d = q - fl;
  const r = d > 0.5 || (d === 0.5 && fl % 2 === 1) ? fl + 1 : fl;
  return Math.sign(x) * r * step;
}

/** The same bytes (any typed array). */
function sameBytes(a, b) {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}
/** |got - ref| <= tol * (1 + max|ref|). */
function assertWithin(got, ref, tol, label) {
  let maxRef = 0, worst = 0;
  for (let i = 0; i < ref.length; i++) maxRef = Math.max(maxRef, Math.abs(ref[i]));
  for (let i = 0; i < ref.length; i++) worst = Math.max(worst, Math.abs(got[i] - ref[i]));
  assert.ok(worst <= tol * (1 + maxRef), `${label}: |got - ref| = ${worst} > ${tol} * (1 + ${maxRef})`);
}
/** Rows [t0, t1) of a [1, S, H, D] tensor. */
function rows(x, t0, t1) {
  const per = x.dims[2] * x.dims[3];
  return { data: x.data.slice(t0 * per, t1 * per), dims: [1, t1 - t0, x.dims[2], x.dims[3]] };
}
/** The tensor with every value through f16. */
const rounded = (x) => ({ data: Float32Array.from(x.data, f16), dims: x.dims });
/** Causal attention of q (the last q rows ending at row n - 1) over read(0, n), in float64. */
function ref(cache, q, n) {
  const { k, v } = cache.read(0, n);
  return refCustomSdpa(q, k, v, { startPos: n - q.dims[1], isCausal: true });
}

test('rows of the newest page read as their float16 values until it fills, then as the encoding of those; attention holds the reference at each moment', () => {
  const rand = rng(7);
  const [Hq, Hkv, D] = [4, 2, 40];
  for (const [keyDtype, valueDtype] of PAIRS) {
    const label = `K ${keyDtype} V ${valueDtype}`;
    const opts = { maxSeqLen: 256, numKvHeads: Hkv, headDim: D, keyDtype, valueDtype };
    const cache = one.createKVCache({ ...opts, float16NewestPage: true });
    const plain = one.createKVCache({ ...opts, float16NewestPage: false });  // fed the float16 values: what the fill must encode
    assert.ok(cache.float16NewestPage && !plain.float16NewestPage, `${label}: the property`);
    const k = randTensor(rand, [1, 150, Hkv, D], 2), v = randTensor(rand, [1, 150, Hkv, D]);
    plain.update(rounded(k), rounded(v));
    const encoded = plain.read(0, 150);
    const per = Hkv * D;
    for (let t = 0; t < 150; t++) {
      const q = randTensor(rand, [1, 1, Hq, D]);
      const out = cache.step(q, rows(k, t, t + 1), rows(v, t, t + 1));
      assertWithin(out.data, ref(cache, q, t + 1), 2e-3, `${label}: step ${t}`);
      if (t === 62 || t === 63 || t === 100 || t === 149) {
        const got = cache.read(0, t + 1);
        const filled = (t + 1) - (t + 1) % 64;  // rows of encoded pages
        for (const [name, x, dtype] of [['k', k, keyDtype], ['v', v, valueDtype]]) {
          for (let i = 0; i < (t + 1) * per; i++) {
            const row = Math.floor(i / per);
            const float = dtype === 'float16' ? f16(x.data[i]) : Math.fround(x.data[i]);  // (a float block: as it is stored in every page)
            const want = !QUANTIZED.has(dtype) ? float : row < filled ? encoded[name].data[i] : f16(x.data[i]);
            if (!Object.is(got[name].data[i], Math.fround(want))) {
              assert.unreachable(`${label}: after row ${t}, ${name} of row ${row} reads ${got[name].data[i]}, expected ${want}`);
            }
          }
        }
      }
    }
    // readRaw gives a float16 page's int8 / int4 rows as the records their encoding stores
    const rawNow = cache.readRaw(128, 22), rawPlain = plain.readRaw(128, 22);
    for (const [which, dtype] of [['k', keyDtype], ['v', valueDtype]]) {
      if (!QUANTIZED.has(dtype)) continue;
      for (const part of ['data', 'scales', 'offsets', 'zeroPoints']) {
        if (rawNow[which][part] === undefined) continue;
        assert.ok(sameBytes(rawNow[which][part], rawPlain[which][part]), `${label}: readRaw ${which}.${part}`);
      }
    }
    cache.dispose(); plain.dispose();
  }
});

test('the same stored bits and attention however the rows are cut into writes; 1 and 2 threads alike', () => {
  const rand = rng(11);
  const [Hq, Hkv, D] = [8, 2, 64];
  const k = randTensor(rand, [1, 200, Hkv, D]), v = randTensor(rand, [1, 200, Hkv, D]);
  const q = randTensor(rand, [1, 3, Hq, D]);
  for (const [keyDtype, valueDtype] of PAIRS) {
    const label = `K ${keyDtype} V ${valueDtype}`;
    const outs = [];
    for (const [sdpa, cuts] of [[one, [200]], [one, [1]], [one, [7]], [two, [63, 1, 64, 72]], [two, [130, 70]]]) {
      const cache = sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, keyDtype, valueDtype, float16NewestPage: true });
      for (let t = 0, i = 0; t < 200; i++) {
        const n = Math.min(cuts[i % cuts.length], 200 - t);
        cache.update(rows(k, t, t + n), rows(v, t, t + n));
        t += n;
      }
      const r = cache.read(0, 200);
      outs.push([r.k.data, r.v.data, cache.attend(q).data]);
      if (outs.length === 1) assertWithin(outs[0][2], ref(cache, q, 200), 2e-3, label);
      cache.dispose();
    }
    for (let i = 1; i < outs.length; i++) {
      for (let j = 0; j < 3; j++) assert.ok(sameBits(outs[i][j], outs[0][j]), `${label}: cutting ${i}, part ${j}`);
    }
  }
});

test('truncate: back into the float16 page its rows stay float16; back into an encoded page they stay encoded, and new rows there are encoded as written', () => {
  const rand = rng(12);
  const [Hq, Hkv, D] = [2, 1, 32];
  const opts = { maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int4' };
  const k = randTensor(rand, [1, 120, Hkv, D]), v = randTensor(rand, [1, 120, Hkv, D]);
  const more = randTensor(rand, [1, 40, Hkv, D]);
  const cache = one.createKVCache(opts);  // int4: on by default
  assert.ok(cache.float16NewestPage, 'int4 default');
  cache.update(k, v);
  const before = cache.read(0, 120);
  cache.truncate(100);  // inside the float16 page (rows 64 ..)
  assert.ok(sameBits(cache.read(0, 100).k.data, before.k.data.slice(0, 100 * D)), 'float16 page rows kept as they were');
  cache.truncate(40);   // inside the encoded page 0
  assert.ok(sameBits(cache.read(0, 40).k.data, before.k.data.slice(0, 40 * D)), 'encoded rows kept as they were');
  cache.update(more, more);  // rows 40 .. 79: 40 .. 63 into the encoded page, 64 .. 79 a new float16 page
  const noPage = one.createKVCache({ ...opts, float16NewestPage: false });
  noPage.update(more, more, 0);  // the encoding of the rows as written (row-wise: position does not matter)
  const enc = noPage.read(0, 24), got = cache.read(0, 80);
  assert.ok(sameBits(got.k.data.slice(40 * D, 64 * D), enc.k.data), 'rows written into an encoded page: encoded as written');
  for (let i = 64 * D; i < 80 * D; i++) assert.is(got.k.data[i], Math.fround(f16(more.data[i - 40 * D])), `row ${Math.floor(i / D)}: float16`);
  const q = randTensor(rand, [1, 1, Hq, D]);
  assertWithin(cache.attend(q).data, ref(cache, q, 80), 2e-3, 'after truncate and rewrite');
  cache.dispose(); noPage.dispose();
});

test('fork: a shared float16 page is copied on write; the fork filling it leaves the original as it was', () => {
  const rand = rng(13);
  const [Hq, Hkv, D] = [4, 2, 48];
  const cache = one.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, keyDtype: 'int8', valueDtype: 'int4', float16NewestPage: true });
  cache.update(randTensor(rand, [1, 70, Hkv, D]), randTensor(rand, [1, 70, Hkv, D]));
  const fork = cache.fork();
  const q = randTensor(rand, [1, 1, Hq, D]);
  const a0 = cache.attend(q), r0 = cache.read(0, 70);
  fork.update(randTensor(rand, [1, 60, Hkv, D]), randTensor(rand, [1, 60, Hkv, D]));  // fills page 1 in the fork: encoded there
  const r1 = cache.read(0, 70);
  assert.ok(sameBits(r1.k.data, r0.k.data) && sameBits(r1.v.data, r0.v.data), 'the original reads as before');
  assert.ok(sameBits(cache.attend(q).data, a0.data), 'the original attends as before');
  assert.ok(!sameBits(fork.read(64, 6).v.data, r0.v.data.slice(64 * Hkv * D)), 'the fork encoded its page 1');
  assertWithin(fork.attend(q).data, ref(fork, q, 130), 2e-3, 'fork');
  cache.update(randTensor(rand, [1, 10, Hkv, D]), randTensor(rand, [1, 10, Hkv, D]));  // the original's own page 1 now
  assertWithin(cache.attend(q).data, ref(cache, q, 80), 2e-3, 'original');
  cache.dispose(); fork.dispose();
});

test('windowed ring caches: a step at a time stores what a plain cache stores, and attends within the window as the reference over those rows', () => {
  const rand = rng(14);
  const [Hq, Hkv, D] = [4, 2, 32];
  for (const [keyDtype, valueDtype] of [['int4', 'int4'], ['int8', 'int4']]) {
    const label = `K ${keyDtype} V ${valueDtype}`;
    const win = one.createKVCache({ numKvHeads: Hkv, headDim: D, window: 100, sinkTokens: 4, keyDtype, valueDtype, float16NewestPage: true });
    const plain = one.createKVCache({ maxSeqLen: 400, numKvHeads: Hkv, headDim: D, keyDtype, valueDtype, float16NewestPage: true });
    const k = randTensor(rand, [1, 330, Hkv, D]), v = randTensor(rand, [1, 330, Hkv, D]);
    const q = randTensor(rand, [1, 1, Hq, D]);
    for (let t = 0; t < 330; t++) {
      const out = win.step(q, rows(k, t, t + 1), rows(v, t, t + 1));
      plain.update(rows(k, t, t + 1), rows(v, t, t + 1));  // in step: the same rows stored at each moment
      if (t % 37 !== 36 && t !== 329) continue;
      const stored = plain.read(0, t + 1);
      const mask = { data: new Float32Array(t + 1).fill(-Infinity), dims: [1, t + 1] };
      for (let j = 0; j <= t; j++) if (j < 4 || j > t - 100) mask.data[j] = 0;
      const kk = rows(stored.k, 0, t + 1), vv = rows(stored.v, 0, t + 1);
      assertWithin(out.data, refCustomSdpa(q, kk, vv, { attnMask: mask }), 2e-3, `${label}: row ${t}`);
      const kept = win.read(Math.max(win.windowStart, t - 60), t + 1 - Math.max(win.windowStart, t - 60));
      assert.ok(sameBits(kept.k.data, rows(stored.k, Math.max(win.windowStart, t - 60), t + 1).data), `${label}: row ${t}: stored rows`);
    }
    win.dispose(); plain.dispose();
  }
});

test('stepMany / attendMany: each item the bits of its own call, over the fill', () => {
  const rand = rng(15);
  const [Hq, Hkv, D] = [4, 1, 64];
  const mk = (sdpa) => [
    sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int4' }),
    sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, keyDtype: 'int8', valueDtype: 'int4', float16NewestPage: true }),
    sdpa.createKVCache({ numKvHeads: Hkv, headDim: D, dtype: 'int8', window: 70, float16NewestPage: true }),
  ];
  const many = mk(two), own = mk(two);
  for (let t = 0; t < 140; t++) {
    const items = many.map(() => ({ q: randTensor(rand, [1, 1, Hq, D]), k: randTensor(rand, [1, 1, Hkv, D]), v: randTensor(rand, [1, 1, Hkv, D]) }));
    const outs = two.stepMany(items.map((x, i) => ({ cache: many[i], ...x })));
    items.forEach((x, i) => assert.ok(sameBits(outs[i].data, own[i].step(x.q, x.k, x.v).data), `step ${t}, item ${i}`));
  }
  const qs = many.map(() => randTensor(rand, [1, 2, Hq, D]));
  const outs = two.attendMany(qs.map((q, i) => ({ cache: many[i], q })));
  qs.forEach((q, i) => assert.ok(sameBits(outs[i].data, own[i].attend(q).data), `attendMany item ${i}`));
  assertWithin(outs[0].data, ref(many[0], qs[0], 140), 2e-3, 'attendMany vs reference');
  for (const c of [...many, ...own]) c.dispose();
});

test('tree verify across a page fill, then keepRows: a float16 row moved into the encoded page is encoded from its float16 values', () => {
  const rand = rng(16);
  const [Hq, Hkv, D] = [2, 1, 32];
  const cache = one.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int4' });
  cache.update(randTensor(rand, [1, 60, Hkv, D]), randTensor(rand, [1, 60, Hkv, D]));
  const n = 8, q = randTensor(rand, [1, n, Hq, D]), k = randTensor(rand, [1, n, Hkv, D]), v = randTensor(rand, [1, n, Hkv, D]);
  const tree = new Uint8Array(n * n);  // a tree: row i sees itself and its parent (i - 2), and row 0
  for (let i = 0; i < n; i++) { tree[i * n + i] = 1; tree[i * n] = 1; if (i >= 2) tree[i * n + i - 2] = 1; }
  const before = cache.read(0, 60);  // float16: page 0 is not full yet
  const out = cache.step(q, k, v, { treeMask: { data: tree, dims: [n, n] } });  // rows 60 .. 67: page 0 fills at 63
  const { k: K, v: V } = cache.read(0, 68);
  // rows 60 .. 62 attend while page 0 is float16 (the step runs in pieces cut before the fill), the others after
  const cat = (a, b) => { const d = new Float32Array(a.data.length + b.data.length); d.set(a.data); d.set(b.data, a.data.length); return { data: d, dims: [1, a.dims[1] + b.dims[1], Hkv, D] }; };
  for (let i = 0; i < n; i++) {
    const keys = 61 + i;
    const [kk, vv] = i < 3 ? [cat(before.k, rounded(rows(k, 0, i + 1))), cat(before.v, rounded(rows(v, 0, i + 1)))] : [rows(K, 0, keys), rows(V, 0, keys)];
    const mask = { data: new Float32Array(keys), dims: [1, keys] };
    for (let t = 0; t < keys; t++) mask.data[t] = t < 60 || tree[i * n + t - 60] ? 0 : -Infinity;
    const qi = rows(q, i, i + 1);
    assertWithin(out.data.subarray(i * Hq * D, (i + 1) * Hq * D), refCustomSdpa(qi, kk, vv, { attnMask: mask }), 2e-3, `tree verify row ${i}`);
  }
  cache.keepRows(60, [0, 2, 5]);  // row 61 <- 62 (encoded page), row 62 <- 65 (the float16 page)
  const kept = cache.read(0, 63);
  const noPage = one.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int4', float16NewestPage: false });
  noPage.update(rounded(rows(k, 5, 6)), rounded(rows(v, 5, 6)));
  assert.ok(sameBits(kept.k.data.slice(62 * D, 63 * D), noPage.read(0, 1).k.data), 'row 62: the encoding of row 65\'s float16 values');
  assert.ok(sameBits(kept.k.data.slice(61 * D, 62 * D), K.data.slice(62 * D, 63 * D)), 'row 61: row 62 as stored');
  const q2 = randTensor(rand, [1, 1, Hq, D]);
  cache.update(randTensor(rand, [1, 1, Hkv, D]), randTensor(rand, [1, 1, Hkv, D]));
  assertWithin(cache.attend(q2).data, ref(cache, q2, 64), 2e-3, 'after keepRows');
  cache.dispose(); noPage.dispose();
});

test('saved state: a float16 page saves as float16 records and restores bit for bit (whole, a prefix, a group); steps after it agree', async () => {
  const rand = rng(17);
  const [Hq, Hkv, D] = [4, 2, 40];
  for (const [keyDtype, valueDtype] of PAIRS) {
    const label = `K ${keyDtype} V ${valueDtype}`;
    const cache = one.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, keyDtype, valueDtype, float16NewestPage: true });
    cache.update(randTensor(rand, [1, 100, Hkv, D]), randTensor(rand, [1, 100, Hkv, D]));
    for (const [start, length] of [[0, 100], [10, 80], [70, 20], [0, 64], [0, 30]]) {
      const bytes = cache.save({ start, length });
      assert.is(bytes[8], keyDtype === 'int4' || valueDtype === 'int4' ? 3 : 2, `${label}: version 2 (3 with an int4 block)`);
      const { cache: back } = await two.loadKVCache(bytes);
      assert.ok(back.float16NewestPage, `${label}: the option comes back`);
      const a = cache.read(start, length), b = back.read(start, length);
      assert.ok(sameBits(a.k.data, b.k.data) && sameBits(a.v.data, b.v.data), `${label}: [${start}, +${length}) reads the same`);
      if (start === 0 && length === 100) {
        const q = randTensor(rand, [1, 1, Hq, D]);
        assert.ok(sameBits(back.attend(q, { startPos: 99 }).data, cache.attend(q, { startPos: 99 }).data), `${label}: attends the same`);
        const fork = cache.fork();
        for (let t = 0; t < 40; t++) {  // over the fill at row 127
          const x = randTensor(rand, [1, 1, Hkv, D]);
          assert.ok(sameBits(back.step(q, x, x).data, fork.step(q, x, x).data), `${label}: step ${t} after the load`);
        }
        fork.dispose();
      }
      back.dispose();
    }
    cache.dispose();
  }
  // a group: every layer's float16 page
  const group = one.createKVCacheGroup([
    { maxSeqLen: 128, numKvHeads: 1, headDim: 16, dtype: 'int4' },
    { maxSeqLen: 128, numKvHeads: 1, headDim: 16, dtype: 'int8', float16NewestPage: true },
  ]);
  for (const layer of group.layers) layer.update(randTensor(rand, [1, 70, 1, 16]), randTensor(rand, [1, 70, 1, 16]));
  const { group: back } = await one.loadKVCacheGroup(group.save());
  group.layers.forEach((layer, i) => assert.ok(sameBits(layer.read(0, 70).v.data, back.layers[i].read(0, 70).v.data), `group layer ${i}`));
  const forked = group.fork();
  forked.truncate(66);
  assert.is(forked.length, 66);
  group.dispose(); back.dispose(); forked.dispose();
});

test('a state saved before the float16 page and 64-element int4 groups (version 1, K int8 / V int4) still loads: its rows within the two quantizations of the rows it was made from', async () => {
  const bytes = new Uint8Array(readFileSync(new URL('../data/state/v1-kint8-vint4.sdpakv', import.meta.url)));
  assert.is(bytes[8], 1, 'a version 1 state');
  const { cache, meta } = await one.loadKVCache(bytes);
  assert.equal(meta, { fixture: 'v1-int4', rows: 100 });
  assert.ok(!cache.float16NewestPage, 'loaded as it was made: without the float16 page');
  // the fixture's rows: tools' LCG (tests/data/state/v1-kint8-vint4.json)
  let s = 12345;
  const rnd = () => { s = (s * 1103515245 + 12345) % 2147483648; return s / 2147483648 * 2 - 1; };
  const [rowsN, H, D] = [100, 2, 40];
  const k = new Float32Array(rowsN * H * D).map(rnd), v = new Float32Array(rowsN * H * D).map(rnd);
  const got = cache.read(0, 100);
  let ek = 0, ev = 0;
  for (let i = 0; i < k.length; i++) { ek = Math.max(ek, Math.abs(got.k.data[i] - k[i])); ev = Math.max(ev, Math.abs(got.v.data[i] - v[i])); }
  assert.ok(ek <= 2 / 255 / 2 + 1e-6, `K int8 within half a step: ${ek}`);
  assert.ok(ev <= 2 / 15 + 1e-3, `V int4 within half a step of each layout: ${ev}`);  // (re-encoded on load: int4.test.js checks how)
  const q = randTensor(rng(3), [1, 3, 4, D]);
  assertWithin(cache.attend(q, { startPos: 97 }).data, refCustomSdpa(q, got.k, got.v, { startPos: 97, isCausal: true }), 2e-3, 'attention');
  // and saves as version 3 (int4 records of 64-element groups; no float16 page), which loads bit for bit
  const again = cache.save({ meta: { fixture: 'v1-int4', rows: 100 } });
  assert.is(again[8], 3, 'saved again as version 3');
  assert.is(new DataView(again.buffer, again.byteOffset).getUint32(16, true), 0, 'no flags');
  const { cache: back } = await one.loadKVCache(again);
  const b = back.read(0, 100);
  assert.ok(sameBits(b.k.data, got.k.data) && sameBits(b.v.data, got.v.data), 'the version 3 save loads the same rows');
  back.dispose();
  cache.dispose();
});

test('kvCacheSize: bytes = cache.bytes with a float16 page held; reserve(poolBytes) makes a token-by-token decode allocate nothing', () => {
  const rand = rng(18);
  const [Hkv, D] = [2, 64];
  for (const rowsN of [1, 63, 64, 100, 128, 200]) {
    const opts = { maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int4' };
    const plan = one.kvCacheSize(opts, rowsN);
    const sdpa = one;
    const warm = sdpa.createKVCache({ ...opts, dtype: 'float32' });  // (the input block of a one-row update, made once)
    warm.update(randTensor(rand, [1, 1, Hkv, D]), randTensor(rand, [1, 1, Hkv, D]));
    warm.dispose();
    const cache = sdpa.createKVCache(opts);
    sdpa.reserve(plan.poolBytes);
    const before = sdpa.memory();
    for (let t = 0; t < rowsN; t++) cache.update(randTensor(rand, [1, 1, Hkv, D]), randTensor(rand, [1, 1, Hkv, D]));
    const after = sdpa.memory();
    assert.is(cache.bytes, plan.bytes, `rows ${rowsN}: kvCacheSize bytes = cache.bytes`);
    assert.is(after.bytesReserved, before.bytesReserved, `rows ${rowsN}: the pool did not grow`);
    assert.is(after.heapBytes, before.heapBytes, `rows ${rowsN}: the heap did not grow`);
    cache.dispose();
  }
  const off = one.kvCacheSize({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int4', float16NewestPage: false }, 100);
  const on = one.kvCacheSize({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int4' }, 100);
  assert.ok(on.bytes > off.bytes, 'the float16 page costs bytes while held');
  assert.is(one.kvCacheSize({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int4' }, 128).bytes,
    one.kvCacheSize({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int4', float16NewestPage: false }, 128).bytes, 'nothing once the pages are full');
});

test('the option: defaults (int4 on, int8 and float off), no float16 page for float caches, E_ARG for a non-boolean', () => {
  const base = { maxSeqLen: 64, numKvHeads: 1, headDim: 8 };
  const on = (o) => { const c = one.createKVCache({ ...base, ...o }); const f = c.float16NewestPage; c.dispose(); return f; };
  assert.is(on({ dtype: 'int4' }), true);
  assert.is(on({ keyDtype: 'int8', valueDtype: 'int4' }), true);
  assert.is(on({ dtype: 'int8' }), false);
  assert.is(on({ dtype: 'int8', float16NewestPage: true }), true);
  assert.is(on({ dtype: 'int4', float16NewestPage: false }), false);
  assert.is(on({ dtype: 'float32', float16NewestPage: true }), false);
  assert.is(on({ dtype: 'float16', float16NewestPage: true }), false);
  expectError(() => one.createKVCache({ ...base, float16NewestPage: 1 }), 'E_ARG', [/float16NewestPage must be a boolean, got/]);
  expectError(() => one.kvCacheSize({ ...base, float16NewestPage: 'yes' }), 'E_ARG', [/float16NewestPage/]);
  expectError(() => one.createKVCacheGroup([base, { ...base, float16NewestPage: null, dtype: 'int4' }, { ...base, float16NewestPage: {} }]), 'E_ARG', [/layers\[2\]: float16NewestPage/]);
});

test.run();
