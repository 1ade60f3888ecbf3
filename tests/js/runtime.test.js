// runtime.test.js: the per-layer options through the public API. treeMask on
// KVCache.attend / step (plain and windowed caches, 1 and 2 threads,
// bit-identical) against the float64 reference (reference.js) with the
// equivalent full bool mask; a chain tree gives isCausal's bits; keepRows
// (the kept rows as stored, forks untouched, windowed caches); the rules with
// nothing written.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, INTERNALS } from '../../js/index.js';
import { rng, randTensor, assertClose, expectError, sameBits, filled } from './helpers.js';
import { refCustomSdpa } from './reference.js';

let one, two;
test.before(async () => {
  one = await createSdpa({ threads: 1 });
  two = await createSdpa({ threads: 2 });
  // (the workers run small shapes too: the serial cutoff off)
  const { M, core } = two[INTERNALS];
  M._sdpa_ctx_set_parallel_min_macs(core.ctx, 0);
});
test.after(() => { one.dispose(); two.dispose(); });

/** A random tree over n nodes in topological order (parent earlier, or a root); a row is its ancestors and itself. */
function randomTree(rand, n, chain = false) {
  const parent = [], m = new Uint8Array(n * n);
  for (let i = 0; i < n; i++) {
    parent.push(chain ? i - 1 : i === 0 ? -1 : Math.floor(rand() * (i + 1)) - 1);
    for (let a = i; a >= 0; a = parent[a]) m[i * n + a] = 1;
  }
  return { data: m, dims: [n, n] };
}

/** The full bool mask [n, sp + n] a tree over rows sp .. sp+n-1 means (a window W, S sink rows on top). */
function fullMask(tree, sp, n, W = 0, S = 0) {
  const N = sp + n, m = new Uint8Array(n * N);
  for (let i = 0; i < n; i++) {
    for (let t = 0; t < N; t++) {
      let vis = t < sp ? 1 : (t - sp <= i && tree.data[i * n + (t - sp)]) ? 1 : 0;
      if (W && t <= sp + i - W && t >= S) vis = 0;
      m[i * N + t] = vis;
    }
  }
  return { data: m, dims: [n, N] };
}

/** Rows lo .. hi-1 of a [B, S, H, D] tensor. */
function rows(x, lo, hi) {
  const [B, S, H, D] = x.dims, w = H * D, data = new Float32Array(B * (hi - lo) * w);
  for (let b = 0; b < B; b++) data.set(x.data.subarray((b * S + lo) * w, (b * S + hi) * w), b * (hi - lo) * w);
  return { data, dims: [B, hi - lo, H, D] };
}

const B = 2, HQ = 4, H = 2, D = 16;

for (const [past, n, windowed, use] of [[0, 4, false, 'step'], [7, 8, false, 'attend'], [70, 5, false, 'step'], [130, 17, false, 'attend'],
  [100, 9, true, 'step'], [60, 12, true, 'step'], [120, 8, true, 'attend']]) {
  test(`treeMask: ${use}, ${past} rows then ${n}${windowed ? ', windowed (W 40, 4 sink rows)' : ''}`, () => {
    const rand = rng(past * 31 + n);
    const total = past + n, W = windowed ? 40 : 0, S = windowed ? 4 : 0;
    const k = randTensor(rand, [B, total, H, D]), v = randTensor(rand, [B, total, H, D]), q = randTensor(rand, [B, n, HQ, D]);
    const tree = randomTree(rand, n);
    const opts = windowed ? { maxSeqLen: 2048, numKvHeads: H, headDim: D, batch: B, window: W, sinkTokens: S }
      : { maxSeqLen: total + 8, numKvHeads: H, headDim: D, batch: B };
    const outs = [];
    for (const sdpa of [one, two]) {
      const c = sdpa.createKVCache(opts);
      if (past) c.update(rows(k, 0, past), rows(v, 0, past));
      if (use === 'step') outs.push(c.step(q, rows(k, past, total), rows(v, past, total), { treeMask: tree }).data);
      else {
        c.update(rows(k, past, total), rows(v, past, total));
        outs.push(c.attend(q, { treeMask: tree }).data);
      }
      c.dispose();
    }
    const ref = refCustomSdpa(q, k, v, { attnMask: fullMask(tree, past, n, W, S) });
    assertClose(outs[0], ref, 'tree vs reference');
    assert.ok(sameBits(outs[0], outs[1]), '1 vs 2 threads bit-identical');
  });
}

test('treeMask: a chain is isCausal, bit for bit; explicit startPos', () => {
  const rand = rng(5);
  const c = one.createKVCache({ maxSeqLen: 64, numKvHeads: H, headDim: D, batch: B });
  c.update(randTensor(rand, [B, 20, H, D]), randTensor(rand, [B, 20, H, D]));
  const q = randTensor(rand, [B, 6, HQ, D]);
  const chain = randomTree(rand, 6, true);
  const a = c.attend(q, { startPos: 10, treeMask: chain }).data;
  const b = c.attend(q, { startPos: 10 }).data;
  assert.ok(sameBits(a, b));
  c.dispose();
});

test('treeMask: heap tensors (q, tree, out) and an int8 cache', () => {
  const rand = rng(8);
  const c = one.createKVCache({ maxSeqLen: 128, numKvHeads: H, headDim: D, batch: B, dtype: 'int8' });
  const k = randTensor(rand, [B, 40, H, D]), v = randTensor(rand, [B, 40, H, D]);
  c.update(rows(k, 0, 32), rows(v, 0, 32));
  const q = one.allocTensor('float32', [B, 8, HQ, D]);
  q.set(randTensor(rand, [B, 8, HQ, D]).data);
  const tree = randomTree(rand, 8);
  const ht = one.allocTensor('bool', [8, 8]);
  ht.set(tree.data);
  const out = one.allocTensor('float32', [B, 8, HQ, D]);
  assert.is(c.step(q, rows(k, 32, 40), rows(v, 32, 40), { treeMask: ht, out }), out);
  const stored = c.read(0, 40);
  const ref = refCustomSdpa({ data: q.data.slice(), dims: q.dims }, stored.k, stored.v, { attnMask: fullMask(tree, 32, 8) });
  assertClose(out.data, ref);
  c.dispose(); q.dispose(); ht.dispose(); out.dispose();
});

test('treeMask: the rules, nothing written', () => {
  const c = one.createKVCache({ maxSeqLen: 32, numKvHeads: 1, headDim: 4 });
  const q = filled([1, 2, 1, 4]), kv = filled([1, 2, 1, 4]);
  const tree = { data: new Uint8Array([1, 0, 1, 1]), dims: [2, 2] };
  const out = { data: new Float32Array(8).fill(7), dims: [1, 2, 1, 4] };
  expectError(() => c.step(q, kv, kv, { treeMask: tree, isCausal: false, out }), 'E_ARG', [/^KVCache\.step: treeMask was given with isCausal: false/]);
  expectError(() => c.step(q, kv, kv, { treeMask: tree, attnMask: { data: new Float32Array(4), dims: [2, 2] }, out }), 'E_ARG', [/treeMask and attnMask were both given/]);
  expectError(() => c.step(q, kv, kv, { treeMask: { data: new Uint8Array(4), dims: [4] }, out }), 'E_RANK', [/treeMask has rank 1; expected 2-D \[Sq, Sq\]/]);
  expectError(() => c.step(q, kv, kv, { treeMask: { data: new Float32Array(4), dims: [2, 2] }, out }), 'E_MASK_DTYPE', [/^KVCache\.step: treeMask has dtype float32 \(1\); expected bool$/]);
  expectError(() => c.step(q, kv, kv, { treeMask: { data: new Uint8Array(9), dims: [3, 3] }, out }), 'E_MASK_SHAPE', [/treeMask has dims \[3, 3\] but must be \[Sq, Sq\] = \[2, 2\]/]);
  expectError(() => c.step(q, kv, kv, { treeMask: { data: new Uint8Array(out.data.buffer, 0, 4), dims: [2, 2] }, out }), 'E_ARG', [/out shares memory with treeMask/]);
  expectError(() => one.customSdpa(q, kv, kv, { treeMask: tree }), 'E_ARG', [/unknown option 'treeMask'/]);
  assert.is(c.length, 0);
  assert.ok(out.data.every((x) => x === 7));
  c.dispose();
});

// ---------------------------------------------------------------------------
// keepRows

for (const [label, geo, start, extra, keep, fork] of [
  ['plain', {}, 10, 8, [0, 2, 5, 6], false],
  ['plain, forked', {}, 60, 8, [1, 3, 7], true],
  ['across pages', {}, 3, 75, [1, 4, 9, 30, 61, 62, 70], true],
  ['nothing moves', {}, 20, 8, [0, 1, 2], false],
  ['nothing kept', {}, 20, 8, [], false],
  ['int8', { dtype: 'int8' }, 10, 8, [0, 2, 5, 6], true],
  ['int4 K, float16 V', { keyDtype: 'int4', valueDtype: 'float16' }, 60, 8, [2, 3], false],
  ['windowed', { window: 40, sinkTokens: 4, maxSeqLen: 4096 }, 250, 8, [0, 2, 5, 6], true],
]) {
  test(`keepRows: ${label}`, () => {
    const rand = rng(start + extra);
    const total = start + extra;
    const c = one.createKVCache({ maxSeqLen: total + 70, numKvHeads: H, headDim: D, batch: B, ...geo });
    c.update(randTensor(rand, [B, total, H, D]), randTensor(rand, [B, total, H, D]));
    const from = geo.window ? start : 0;
    const before = c.readRaw(from, total - from);
    const f = fork ? c.fork() : null;
    c.keepRows(start, keep);
    assert.is(c.length, start + keep.length);
    const after = c.readRaw(from, start + keep.length - from);
    // each row's stored record, by (batch row, row): compare rows' raw bytes
    const rowBytes = (raw, b, t, nRows) => {
      const data = new Uint8Array(raw.data.buffer, raw.data.byteOffset, raw.data.byteLength), per = data.length / (B * nRows);
      return data.subarray((b * nRows + t) * per, (b * nRows + t + 1) * per);
    };
    const nb = total - from, na = start + keep.length - from;
    for (const part of ['k', 'v']) {
      for (let b = 0; b < B; b++) {
        for (let t = 0; t < na; t++) {
          const row = from + t, src = row < start ? row : start + keep[row - start];
          const x = rowBytes(after[part], b, t, na), y = rowBytes(before[part], b, src - from, nb);
          assert.equal(Array.from(x), Array.from(y), `${part} row ${row} (batch ${b}) is row ${src}`);
          for (const side of ['scales', 'zeroPoints', 'offsets']) {
            if (!after[part][side]) continue;
            const g = after[part][side].length / (B * na);
            assert.equal(Array.from(after[part][side].subarray((b * na + t) * g, (b * na + t + 1) * g)),
              Array.from(before[part][side].subarray((b * nb + src - from) * g, (b * nb + src - from + 1) * g)), `${part} ${side}`);
          }
        }
      }
    }
    if (!geo.window) { // the row after the kept ones reads as zeros
      const next = c.read(start + keep.length, 1);
      assert.ok(next.k.data.every((x) => x === 0) && next.v.data.every((x) => x === 0));
    }
    if (f) {
      assert.is(f.length, total);
      const fr = f.readRaw(from, total - from);
      assert.equal(Array.from(new Uint8Array(fr.k.data.buffer)), Array.from(new Uint8Array(before.k.data.buffer)), 'the fork is untouched');
      f.dispose();
    }
    c.dispose();
  });
}

test('keepRows: then decoding goes on as over the kept sequence', () => {
  const rand = rng(77);
  const c = one.createKVCache({ maxSeqLen: 64, numKvHeads: H, headDim: D, batch: 1 });
  const k = randTensor(rand, [1, 20, H, D]), v = randTensor(rand, [1, 20, H, D]);
  c.update(k, v);
  c.keepRows(12, [1, 4, 5]);
  const q = randTensor(rand, [1, 1, HQ, D]), k1 = randTensor(rand, [1, 1, H, D]), v1 = randTensor(rand, [1, 1, H, D]);
  const out = c.step(q, k1, v1).data;
  const pick = (x) => {
    const rowsKept = [...Array(12).keys(), 13, 16, 17];
    const w = H * D, data = new Float32Array((rowsKept.length + 1) * w);
    rowsKept.forEach((r, i) => data.set(x.data.subarray(r * w, (r + 1) * w), i * w));
    return { data, dims: [1, rowsKept.length + 1, H, D] };
  };
  const kk = pick(k), vv = pick(v);
  kk.data.set(k1.data, 15 * H * D);
  vv.data.set(v1.data, 15 * H * D);
  assertClose(out, refCustomSdpa(q, kk, vv, { startPos: 15, isCausal: true }));
  c.dispose();
});

test('keepRows: the rules, the cache unchanged', () => {
  const c = one.createKVCache({ maxSeqLen: 400, numKvHeads: 1, headDim: 4 });
  c.update(filled([1, 20, 1, 4]), filled([1, 20, 1, 4]));
  expectError(() => c.keepRows('1', [0]), 'E_ARG', [/^KVCache\.keepRows: start must be a number/]);
  expectError(() => c.keepRows(1), 'E_ARG', [/rows is missing/]);
  expectError(() => c.keepRows(1, [0.5]), 'E_ARG', [/rows\[0\] must be an integer/]);
  expectError(() => c.keepRows(1, new Float32Array(1)), 'E_ARG', [/rows must be an Array or Int32Array/]);
  expectError(() => c.keepRows(-1, [0]), 'E_START_POS', [/^KVCache\.keepRows: start is -1; expected a non-negative integer$/]);
  expectError(() => c.keepRows(10, [1, 1]), 'E_START_POS', [/rows\[1\] is 1; expected non-negative offsets from start in increasing order \(after 1\)/]);
  expectError(() => c.keepRows(15, [0, 5]), 'E_START_POS', [/rows\[1\] = 5 is row 20, past the 20 rows written \(cache\.length\)/]);
  expectError(() => c.keepRows(21, []), 'E_CAPACITY', [/length 21 is past the 20 rows written/]);
  assert.is(c.length, 20);
  const w = one.createKVCache({ maxSeqLen: 400, numKvHeads: 1, headDim: 4, window: 8 });
  w.update(filled([1, 300, 1, 4]), filled([1, 300, 1, 4]));
  const ws = w.windowStart;
  expectError(() => w.keepRows(ws - 1, [0, 2]), 'E_CAPACITY', [/evicted from the windowed cache; keep rows from/]);
  assert.is(w.length, 300);
  c.dispose();
  expectError(() => c.keepRows(0, []), 'E_DISPOSED');
  w.dispose();
});

// ---------------------------------------------------------------------------
// attendMany

/** Caches of several shapes and dtypes, each with its q; the same on both instances. */
function manyCases(sdpa, seed) {
  const rand = rng(seed);
  const shapes = [
    { B: 1, Hq: 14, Hkv: 2, D: 64, len: 1024, Sq: 1 },
    { B: 2, Hq: 8, Hkv: 2, D: 24, len: 70, Sq: 3 },
    { B: 1, Hq: 4, Hkv: 4, D: 16, len: 300, Sq: 1, dtype: 'int8' },
    { B: 1, Hq: 8, Hkv: 2, D: 32, len: 200, Sq: 2, window: 40 },
    { B: 1, Hq: 14, Hkv: 2, D: 64, len: 17, Sq: 4, tree: true },
  ];
  return shapes.map((s) => {
    const cache = sdpa.createKVCache({ batch: s.B, maxSeqLen: 2048, numKvHeads: s.Hkv, headDim: s.D, dtype: s.dtype ?? 'float32', window: s.window });
    const k = randTensor(rand, [s.B, s.len, s.Hkv, s.D]), v = randTensor(rand, [s.B, s.len, s.Hkv, s.D]);
    cache.update(k, v);
    const q = randTensor(rand, [s.B, s.Sq, s.Hq, s.D]);
    const opts = s.tree ? { treeMask: randomTree(rand, s.Sq) } : {};
    return { s, cache, k, v, q, opts };
  });
}

test('attendMany: each item is its own attend, bit for bit, 1 and 2 threads; the reference', () => {
  for (const sdpa of [one, two]) {
    const cases = manyCases(sdpa, 3);
    const outs = sdpa.attendMany(cases.map(({ cache, q, opts }) => ({ cache, q, ...opts })));
    assert.is(outs.length, cases.length);
    cases.forEach(({ s, cache, k, v, q, opts }, i) => {
      const solo = cache.attend(q, opts).data;
      assert.ok(sameBits(outs[i].data, solo), `item ${i} = cache.attend`);
      assert.equal(outs[i].dims, q.dims);
      if (!s.dtype && !s.window) {
        const sp = s.len - s.Sq;
        const ref = refCustomSdpa(q, k, v, opts.treeMask ? { attnMask: fullMask(opts.treeMask, sp, s.Sq) } : { startPos: sp, isCausal: true });
        assertClose(outs[i].data, ref, `item ${i} vs reference`);
      }
    });
    for (const c of cases) c.cache.dispose();
  }
});

test('attendMany: heap tensors as q and out are written in place and returned', () => {
  const cases = manyCases(one, 4);
  const heapQ = cases.map(({ q }) => { const t = one.allocTensor('float32', q.dims); t.set(q.data); return t; });
  const heapO = cases.map(({ q }) => one.allocTensor('float32', q.dims));
  const outs = one.attendMany(cases.map(({ cache, opts }, i) => ({ cache, q: heapQ[i], out: heapO[i], ...opts })));
  cases.forEach(({ cache, q, opts }, i) => {
    assert.is(outs[i], heapO[i]);
    assert.ok(sameBits(heapO[i].data, cache.attend(q, opts).data));
  });
  for (const c of cases) c.cache.dispose();
  for (const t of [...heapQ, ...heapO]) t.dispose();
});

test('attendMany: the rules, nothing written for any item', () => {
  const cases = manyCases(one, 5);
  const outs = cases.map(({ q }) => ({ data: new Float32Array(q.data.length).fill(7), dims: q.dims }));
  const items = () => cases.map(({ cache, q, opts }, i) => ({ cache, q, out: outs[i], ...opts }));
  let it = items();
  it[3] = { ...it[3], cache: cases[1].cache };
  expectError(() => one.attendMany(it), 'E_ARG', [/^sdpa\.attendMany: items\[3\] uses the same cache as items\[1\]; one item per cache$/]);
  it = items();
  it[4] = { ...it[4], out: { data: cases[0].q.data, dims: cases[4].q.dims } };
  expectError(() => one.attendMany(it), 'E_ARG', [/items\[4\]\.out shares memory with items\[0\]\.query/]);
  it = items();
  it[2] = { ...it[2], scale: -1 };
  expectError(() => one.attendMany(it), 'E_SCALE', [/^sdpa\.attendMany: items\[2\]: scale is -1/]);
  it = items();
  it[1] = { ...it[1], is_causal: true };
  expectError(() => one.attendMany(it), 'E_ARG', [/^sdpa\.attendMany: items\[1\]: unknown option 'is_causal'/]);
  it = items();
  it[0] = { ...it[0], cache: {} };
  expectError(() => one.attendMany(it), 'E_ARG', [/items\[0\]: cache must be a KVCache of this instance/]);
  const other = two.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 64 });
  it[0] = { ...it[0], cache: other };
  expectError(() => one.attendMany(it), 'E_ARG', [/items\[0\]: cache must be a KVCache of this instance/]);
  other.dispose();
  expectError(() => one.attendMany([]), 'E_ARG', [/items is empty; expected 1 \.\. 64 items/]);
  expectError(() => one.attendMany(new Array(65).fill(items()[0])), 'E_ARG', [/65 items; at most 64 in one call/]);
  expectError(() => one.attendMany({}), 'E_ARG', [/items must be an Array/]);
  for (const o of outs) assert.ok(o.data.every((x) => x === 7), 'nothing written');
  cases[2].cache.dispose();
  expectError(() => one.attendMany(items()), 'E_DISPOSED', [/items\[2\]: this KV cache was disposed/]);
  for (const c of cases) c.cache.dispose();
});

// ---------------------------------------------------------------------------
// stepMany

test('stepMany: each item is its own step, bit for bit (outputs and rows written), 1 and 2 threads', () => {
  for (const sdpa of [one, two]) {
    const rand = rng(9);
    const shapes = [
      { B: 1, Hq: 14, Hkv: 2, D: 64, len: 1000, Sn: 1 },
      { B: 2, Hq: 8, Hkv: 2, D: 24, len: 70, Sn: 3, tree: true },
      { B: 1, Hq: 4, Hkv: 4, D: 16, len: 300, Sn: 1, dtype: 'int8' },
      { B: 1, Hq: 8, Hkv: 2, D: 32, len: 250, Sn: 1, window: 40 },
      { B: 1, Hq: 8, Hkv: 2, D: 32, len: 250, Sn: 20, window: 40 }, // a step over two pages of the ring
    ];
    const twins = shapes.map((s) => {
      const opts = { batch: s.B, maxSeqLen: 4096, numKvHeads: s.Hkv, headDim: s.D, dtype: s.dtype ?? 'float32', window: s.window };
      const a = sdpa.createKVCache(opts), b = sdpa.createKVCache(opts);
      const k = randTensor(rand, [s.B, s.len, s.Hkv, s.D]), v = randTensor(rand, [s.B, s.len, s.Hkv, s.D]);
      a.update(k, v); b.update(k, v);
      const q = randTensor(rand, [s.B, s.Sn, s.Hq, s.D]), kn = randTensor(rand, [s.B, s.Sn, s.Hkv, s.D]), vn = randTensor(rand, [s.B, s.Sn, s.Hkv, s.D]);
      return { s, a, b, q, kn, vn, opts: s.tree ? { treeMask: randomTree(rand, s.Sn) } : {} };
    });
    const outs = sdpa.stepMany(twins.map(({ a, q, kn, vn, opts }) => ({ cache: a, q, k: kn, v: vn, ...opts })));
    twins.forEach(({ s, a, b, q, kn, vn, opts }, i) => {
      const solo = b.step(q, kn, vn, opts).data;
      assert.ok(sameBits(outs[i].data, solo), `item ${i} = cache.step`);
      assert.is(a.length, b.length);
      const ra = a.read(s.len, s.Sn), rb = b.read(s.len, s.Sn);
      assert.ok(sameBits(ra.k.data, rb.k.data) && sameBits(ra.v.data, rb.v.data), `item ${i}: the rows written`);
      a.dispose(); b.dispose();
    });
  }
});

test('stepMany: the rules, nothing written', () => {
  const rand = rng(10);
  const c1 = one.createKVCache({ maxSeqLen: 64, numKvHeads: 2, headDim: 8 }), c2 = one.createKVCache({ maxSeqLen: 64, numKvHeads: 2, headDim: 8 });
  const q = () => randTensor(rand, [1, 1, 4, 8]), kv = () => randTensor(rand, [1, 1, 2, 8]);
  const shared = new Float32Array(32), k0 = { data: shared.subarray(0, 16), dims: [1, 1, 2, 8] };
  expectError(() => one.stepMany([{ cache: c1, q: q(), k: kv(), v: kv() }, { cache: c1, q: q(), k: kv(), v: kv() }]), 'E_ARG', [/^sdpa\.stepMany: items\[1\] uses the same cache as items\[0\]/]);
  expectError(() => one.stepMany([{ cache: c1, q: q(), k: k0, v: kv() }, { cache: c2, q: q(), k: kv(), v: kv(), out: { data: shared, dims: [1, 1, 4, 8] } }]), 'E_ARG', [/items\[1\]\.out shares memory with items\[0\]\.key/]);
  expectError(() => one.stepMany([{ cache: c1, q: q(), k: kv(), v: kv() }, { cache: c2, q: q(), k: kv(), v: kv(), startPos: 3 }]), 'E_START_POS', [/^sdpa\.stepMany: items\[1\]: startPos 3 is past/]);
  expectError(() => one.stepMany([{ cache: c1, q: q(), k: randTensor(rand, [1, 2, 2, 8]), v: randTensor(rand, [1, 2, 2, 8]) }]), 'E_DIMS', [/items\[0\]: query has 1 row but key has 2/]);
  assert.is(c1.length, 0);
  assert.is(c2.length, 0);
  c1.dispose(); c2.dispose();
});

test.run();
