// rotary.test.js: rotary embeddings through the public API
// (KVCache.update / attend / step and attendMany / stepMany with
// `rotary: { cos, sin, interleaved, positions }`).
//
// - Equals applying the rotation outside the op: the same calls without
//   rotary on q and k rotated in float32 (reference.js refRotate: Math.fround after every
//   product: the contract's formula) give the same bits, outputs and stored
//   rows, for NeoX and GPT-J pairs, partial rotary, every cache dtype,
//   explicit positions, windowed caches, heap-tensor tables, 1 and 2 threads.
// - Within the float32 tolerance of the float64 reference (reference.js) fed
//   q rotated in double and the rows the cache stores.
// - The rules, with nothing written. (ONNX Runtime's GroupQueryAttention with
//   do_rotary is the cross-check in rotary-ort.test.js.)
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import { createSdpa, INTERNALS } from '../../js/index.js';
import { rng, randTensor, assertClose, expectError, sameBits } from './helpers.js';
import { refCustomSdpa, refRotate } from './reference.js';

let one, two;
test.before(async () => {
  one = await createSdpa({ threads: 1 });
  two = await createSdpa({ threads: 2 });
  const { M, core } = two[INTERNALS];
  M._sdpa_ctx_set_parallel_min_macs(core.ctx, 0);  // (small shapes on both threads too)
});
test.after(() => { one.dispose(); two.dispose(); });

/** cos / sin tables [P, R] (theta = p * base^(-2j / 2R)), float32. */
function tables(P, R, base = 10000) {
  const cos = new Float32Array(P * R), sin = new Float32Array(P * R);
  for (let p = 0; p < P; p++) {
    for (let j = 0; j < R; j++) {
      const th = p * Math.pow(base, -2 * j / (2 * R));
      cos[p * R + j] = Math.cos(th);
      sin[p * R + j] = Math.sin(th);
    }
  }
  return { cos: { data: cos, dims: [P, R] }, sin: { data: sin, dims: [P, R] } };
}

const range = (a, n) => Array.from({ length: n }, (_, i) => a + i);

/**
 * A run of steps on a rotary cache and on a plain one fed the rotated rows:
 * outputs and stored rows the same bits, output within tolerance of float64.
 */
function runSteps(sdpa, { dtype = 'float32', keyDtype, valueDtype, R = 8, D = 16, interleaved = false, window, sinkTokens, positions = false, heap = false, steps = [6, 1, 1, 3], seed = 1 }) {
  const rand = rng(seed), B = 2, Hq = 4, Hkv = 2, P = 300;
  const T = tables(P, R);
  const geo = { batch: B, maxSeqLen: P, numKvHeads: Hkv, headDim: D, dtype, keyDtype, valueDtype, window, sinkTokens };
  const a = sdpa.createKVCache(geo), b = sdpa.createKVCache(geo);
  let tabs = T, heapTabs = [];
  if (heap) {  // tables in wasm memory: passed by address, not copied
    heapTabs = [sdpa.allocTensor('float32', T.cos.dims), sdpa.allocTensor('float32', T.sin.dims)];
    heapTabs[0].set(T.cos.data); heapTabs[1].set(T.sin.data);
    tabs = { cos: heapTabs[0], sin: heapTabs[1] };
  }
  const integer = [dtype, keyDtype, valueDtype].some((d) => d === 'int8' || d === 'int4');
  for (const n of steps) {
    const sp = a.length;
    const q = randTensor(rand, [B, n, Hq, D]), k = randTensor(rand, [B, n, Hkv, D]), v = randTensor(rand, [B, n, Hkv, D]);
    const pos = positions ? range(0, n).map((i) => sp + ((i + 1) >> 1)) : range(sp, n);  // a tree's depths
    const rotary = { ...tabs, interleaved, ...(positions ? { positions: Int32Array.from(pos) } : {}) };
    const got = a.step(q, k, v, { rotary });
    const want = b.step(refRotate(q, pos, T, interleaved), refRotate(k, pos, T, interleaved), v);
    assert.ok(sameBits(got.data, want.data), `step of ${n} at ${sp}: the bits of the rotation applied outside`);
    // the float64 reference over the stored rows (a windowed cache: the rows it still holds)
    const total = a.length, ws = a.windowStart, S = a.sinkTokens;
    const K = new Float32Array(B * total * Hkv * D), V = new Float32Array(B * total * Hkv * D);
    const spans = window ? [[0, Math.min(S, total)], [Math.max(ws, S), total]] : [[0, total]];
    for (const [s0, s1] of spans) {
      if (s1 <= s0) continue;
      const r1 = a.read(s0, s1 - s0), r2 = b.read(s0, s1 - s0);
      assert.ok(sameBits(r1.k.data, r2.k.data), 'stored K: the rotated rows, stored');
      for (let bb = 0; bb < B; bb++) {
        K.set(r1.k.data.subarray(bb * (s1 - s0) * Hkv * D, (bb + 1) * (s1 - s0) * Hkv * D), (bb * total + s0) * Hkv * D);
        V.set(r1.v.data.subarray(bb * (s1 - s0) * Hkv * D, (bb + 1) * (s1 - s0) * Hkv * D), (bb * total + s0) * Hkv * D);
      }
    }
    let attnMask;
    if (window) {  // causal, the window and the sink rows, as a bool mask
      const m = new Uint8Array(n * total);
      for (let i = 0; i < n; i++) for (let t = 0; t < total; t++) m[i * total + t] = t <= sp + i && (t > sp + i - window || t < S) ? 1 : 0;
      attnMask = { data: m, dims: [n, total] };
    }
    const ref = refCustomSdpa(refRotate(q, pos, T, interleaved, true), { data: K, dims: [B, total, Hkv, D] }, { data: V, dims: [B, total, Hkv, D] },
      attnMask ? { attnMask } : { startPos: sp, isCausal: true });
    if (integer) {  // (the integer kernels quantize q and the weights to int16: CONTRACT.md's int8 tolerance)
      let mx = 0, worst = 0;
      for (let i = 0; i < ref.length; i++) { mx = Math.max(mx, Math.abs(ref[i])); worst = Math.max(worst, Math.abs(got.data[i] - ref[i])); }
      assert.ok(worst <= 2e-3 * (1 + mx), `int: ${worst}`);
    } else {
      assertClose(got.data, ref, `step of ${n} at ${sp}`);
    }
  }
  a.dispose(); b.dispose();
  for (const t of heapTabs) t.dispose();
}

test('step with rotary = the rotation applied outside the op (NeoX, GPT-J, partial, every dtype)', () => {
  for (const sdpa of [one, two]) {
    for (const interleaved of [false, true]) {
      for (const dtype of ['float32', 'float16', 'int8', 'int4']) runSteps(sdpa, { dtype, interleaved, D: 32, R: 16 });
      runSteps(sdpa, { interleaved, R: 3 });          // partial rotary, odd R: elements 6 .. 15 pass through
      runSteps(sdpa, { keyDtype: 'int8', valueDtype: 'int4', interleaved, D: 32, R: 12 });
    }
  }
});

test('explicit positions (a draft tree at its depths), heap-tensor tables, windowed caches over pages', () => {
  for (const sdpa of [one, two]) {
    runSteps(sdpa, { positions: true });
    runSteps(sdpa, { positions: true, interleaved: true, dtype: 'int8', heap: true, D: 32, R: 16 });
    runSteps(sdpa, { window: 20, steps: [70, 1, 2, 66] });
    runSteps(sdpa, { window: 16, sinkTokens: 4, positions: true, steps: [70, 1, 3, 64], dtype: 'float16', heap: true });
  }
});

test('update(k, v, { rotary }) then attend(q, { rotary }) = step(q, k, v, { rotary })', () => {
  const rand = rng(5), T = tables(64, 8), geo = { maxSeqLen: 64, numKvHeads: 2, headDim: 16 };
  const a = one.createKVCache(geo), b = one.createKVCache(geo);
  for (const n of [5, 1, 2]) {
    const q = randTensor(rand, [1, n, 4, 16]), k = randTensor(rand, [1, n, 2, 16]), v = randTensor(rand, [1, n, 2, 16]);
    const rotary = { cos: T.cos, sin: T.sin };
    const s = a.step(q, k, v, { rotary });
    if (n === 2) b.update(k, v, b.length, { rotary });  // both signatures
    else b.update(k, v, { rotary });
    const o = b.attend(q, { rotary });
    assert.ok(sameBits(s.data, o.data), `n ${n}`);
    assert.ok(sameBits(a.read(0, a.length).k.data, b.read(0, b.length).k.data), 'stored K');
  }
  a.dispose(); b.dispose();
});

test('attendMany / stepMany with rotary items: each item its own call, bit for bit', () => {
  const rand = rng(9), T = tables(128, 8), geo = { maxSeqLen: 128, numKvHeads: 2, headDim: 16 };
  const xs = [two.createKVCache(geo), two.createKVCache({ ...geo, dtype: 'int8' })];
  const ys = [two.createKVCache(geo), two.createKVCache({ ...geo, dtype: 'int8' })];
  for (let step = 0; step < 3; step++) {
    const n = step === 0 ? 7 : 2;
    const items = xs.map((cache, i) => ({
      cache, q: randTensor(rand, [1, n, 4, 16]), k: randTensor(rand, [1, n, 2, 16]), v: randTensor(rand, [1, n, 2, 16]),
      rotary: { ...T, interleaved: i === 1, ...(i === 1 ? { positions: range(cache.length, n).map((p) => p + 3) } : {}) },
    }));
    const many = two.stepMany(items);
    items.forEach((it, i) => {
      const solo = ys[i].step(it.q, it.k, it.v, { rotary: it.rotary });
      assert.ok(sameBits(many[i].data, solo.data), `stepMany item ${i}`);
    });
    const q = items.map(() => randTensor(rand, [1, 1, 4, 16]));
    const att = two.attendMany(xs.map((cache, i) => ({ cache, q: q[i], rotary: items[i].rotary.positions ? { ...T, positions: [cache.length + 2] } : T })));
    xs.forEach((cache, i) => {
      const solo = ys[i].attend(q[i], { rotary: items[i].rotary.positions ? { ...T, positions: [cache.length + 2] } : T });
      assert.ok(sameBits(att[i].data, solo.data), `attendMany item ${i}`);
    });
  }
  for (const c of [...xs, ...ys]) c.dispose();
});

test('property: random shapes, dtypes, rotary dims, pairings, positions and call sequences = the rotation applied outside (fast-check)', () => {
  const dtypes = ['float32', 'float16', 'int8', 'int4'];
  const arb = fc.record({
    Hkv: fc.integer({ min: 1, max: 3 }), group: fc.integer({ min: 1, max: 3 }), halfD: fc.integer({ min: 1, max: 20 }),
    rFrac: fc.double({ min: 0.01, max: 1, noNaN: true }), interleaved: fc.boolean(),
    keyDtype: fc.constantFrom(...dtypes), valueDtype: fc.constantFrom(...dtypes), threads2: fc.boolean(),
    window: fc.option(fc.integer({ min: 1, max: 40 }), { nil: undefined }),
    calls: fc.array(fc.record({ kind: fc.constantFrom('step', 'step', 'update', 'attend'), n: fc.integer({ min: 1, max: 70 }), positions: fc.boolean(), seed: fc.integer() }), { minLength: 1, maxLength: 6 }),
  });
  fc.assert(fc.property(arb, (c) => {
    const sdpa = c.threads2 ? two : one, D = 2 * c.halfD, R = Math.max(1, Math.round(c.rFrac * c.halfD)), Hq = c.Hkv * c.group, P = 512;
    const T = tables(P, R), geo = { maxSeqLen: 400, numKvHeads: c.Hkv, headDim: D, keyDtype: c.keyDtype, valueDtype: c.valueDtype, window: c.window };
    const a = sdpa.createKVCache(geo), b = sdpa.createKVCache(geo);
    try {
      for (const call of c.calls) {
        const rand = rng(call.seed), sp = a.length;
        const n = call.kind === 'attend' ? Math.min(call.n, sp) : Math.min(call.n, 400 - sp);
        if (n < 1) continue;
        const first = call.kind === 'attend' ? sp - n : sp;
        const pos = call.positions ? range(0, n).map(() => Math.floor(rand() * P)) : range(first, n);
        const rotary = { ...T, interleaved: c.interleaved, ...(call.positions ? { positions: pos } : {}) };
        const q = randTensor(rand, [1, n, Hq, D]), k = randTensor(rand, [1, n, c.Hkv, D]), v = randTensor(rand, [1, n, c.Hkv, D]);
        if (call.kind === 'update') {
          a.update(k, v, { rotary });
          b.update(refRotate(k, pos, T, c.interleaved), v);
        } else if (call.kind === 'attend') {
          if (c.window && Math.max(0, first - c.window + 1) < a.windowStart) continue;  // (a windowed cache's window must not reach evicted rows)
          const x = a.attend(q, { rotary }), y = b.attend(refRotate(q, pos, T, c.interleaved));
          assert.ok(sameBits(x.data, y.data), 'attend');
        } else {
          const x = a.step(q, k, v, { rotary }), y = b.step(refRotate(q, pos, T, c.interleaved), refRotate(k, pos, T, c.interleaved), v);
          assert.ok(sameBits(x.data, y.data), 'step');
        }
        assert.is(a.length, b.length);
      }
      return true;
    } finally { a.dispose(); b.dispose(); }
  }), { numRuns: 80, seed: 0x2107 });
});

test('rotary follows the snapshot rule: each field and table read once, then no caller code', () => {
  const T = tables(64, 8), geo = { maxSeqLen: 64, numKvHeads: 2, headDim: 16 };
  const c = one.createKVCache(geo), rand = rng(4);
  const reads = {};
  const counted = (obj, name) => new Proxy(obj, { get(t, key, r) { reads[`${name}.${String(key)}`] = (reads[`${name}.${String(key)}`] ?? 0) + 1; return Reflect.get(t, key, r); } });
  const rotary = counted({ cos: counted(T.cos, 'cos'), sin: counted(T.sin, 'sin'), interleaved: true, positions: counted([3, 4], 'positions') }, 'rotary');
  const q = randTensor(rand, [1, 2, 4, 16]), k = randTensor(rand, [1, 2, 2, 16]), v = randTensor(rand, [1, 2, 2, 16]);
  const got = c.step(q, k, v, { rotary });
  for (const key of ['rotary.cos', 'rotary.sin', 'rotary.interleaved', 'rotary.positions', 'cos.data', 'cos.dims', 'sin.data', 'sin.dims', 'positions.length', 'positions.0', 'positions.1']) {
    assert.is(reads[key], 1, `${key} read ${reads[key]} times`);
  }
  const b = one.createKVCache(geo);
  const want = b.step(q, k, v, { rotary: { ...T, interleaved: true, positions: [3, 4] } });
  assert.ok(sameBits(got.data, want.data), 'the values read are the values used');
  // a getter that disposes the cache during the snapshot: E_DISPOSED, nothing written
  const evil = { cos: T.cos, get sin() { c.dispose(); return T.sin; } };
  expectError(() => c.step(q, k, v, { rotary: evil }), 'E_DISPOSED');
  // (an append to a disposed cache has no position: E_DISPOSED, not a capacity or position rule)
  expectError(() => c.step(q, k, v), 'E_DISPOSED');
  expectError(() => c.update(k, v), 'E_DISPOSED');
  b.dispose();
});

test('rotary rules: typed errors, nothing written', () => {
  const T = tables(8, 4), geo = { maxSeqLen: 64, numKvHeads: 2, headDim: 16 };
  const c = one.createKVCache(geo), rand = rng(3);
  c.update(randTensor(rand, [1, 4, 2, 16]), randTensor(rand, [1, 4, 2, 16]));
  const before = c.read(0, 4);
  const q = randTensor(rand, [1, 1, 4, 16]), k = randTensor(rand, [1, 1, 2, 16]), v = randTensor(rand, [1, 1, 2, 16]);
  const out = { data: new Float32Array(64), dims: [1, 1, 4, 16] };
  const cases = [
    [{ rotary: 5 }, 'E_ARG', /rotary must be an object \{ cos, sin, interleaved\?, positions\? \}, got number 5/],
    [{ rotary: { cos: T.cos } }, 'E_ARG', /rotary\.sin is missing/],
    [{ rotary: { ...T, interleave: true } }, 'E_ARG', /rotary: unknown option 'interleave'; the options are cos, sin, interleaved, positions/],
    [{ rotary: { ...T, interleaved: 1 } }, 'E_ARG', /rotary\.interleaved must be a boolean, got number 1/],
    [{ rotary: { ...T, positions: 'x' } }, 'E_ARG', /rotary\.positions must be an Array or Int32Array/],
    [{ rotary: { ...T, positions: [1.5] } }, 'E_ARG', /rotary\.positions\[0\] must be an integer, got number 1\.5/],
    [{ rotary: { cos: { data: out.data.subarray(0, 32), dims: [8, 4] }, sin: T.sin }, out }, 'E_ARG', /out shares memory with rotary\.cos; out must not overlap any input/],
    [{ rotary: { cos: { data: T.cos.data, dims: [2, 4, 4] }, sin: T.sin } }, 'E_RANK', /rotary\.cos has rank 3; expected 2-D \[maxPosition, rotaryDim \/ 2\]/],
    [{ rotary: { cos: T.cos, sin: { data: T.sin.data.subarray(0, 28), dims: [7, 4] } } }, 'E_DIMS', /rotary\.sin has dims \[7, 4\] but rotary\.cos has \[8, 4\]; they must be equal/],
    [{ rotary: { ...T, positions: [1, 2] } }, 'E_DIMS', /rotary\.positions has 2 entries but query has 1 row; one position per new row/],
    [{ rotary: { cos: { data: new Uint8Array(32), dims: [8, 4] }, sin: T.sin } }, 'E_DTYPE', /rotary\.cos is bool \(Uint8Array\); expected float32 \(Float32Array\)/],
    [{ rotary: { cos: { data: new Float32Array(9 * 4), dims: [4, 9] }, sin: { data: new Float32Array(9 * 4), dims: [4, 9] } } }, 'E_HEAD_DIM',
      /rotary\.cos has dims \[4, 9\]: rotaryDim 2 \* 9 = 18 is more than the cache's headDim 16; rotaryDim must be at most the head dim/],
    [{ rotary: { ...T, positions: [8] } }, 'E_START_POS', /rotary\.positions\[0\] is 8; expected a position in 0 \.\. 7 \(the rows of rotary\.cos and rotary\.sin\)/],
    [{ rotary: { cos: { data: T.cos.data.subarray(0, 16), dims: [4, 4] }, sin: { data: T.sin.data.subarray(0, 16), dims: [4, 4] } } }, 'E_START_POS',
      /the new rows sit at positions 4 \.\. 4, but rotary\.cos and rotary\.sin hold positions 0 \.\. 3; pass longer tables or rotary\.positions/],
  ];
  for (const [opts, code, re] of cases) {
    expectError(() => c.step(q, k, v, opts), code, [/^KVCache\.step: /, re], `step ${re}`);
    if (!opts.out) {
      expectError(() => c.update(k, v, opts), code, [/^KVCache\.update: /, code === 'E_DIMS' && opts.rotary.positions ? /but key has 1 row/ : re], `update ${re}`);
      expectError(() => one.stepMany([{ cache: c, q, k, v, ...opts }]), code, [/^sdpa\.stepMany: items\[0\]: /, re], `stepMany ${re}`);
    }
    assert.is(c.length, 4, 'nothing written');
    assert.ok(sameBits(c.read(0, 4).k.data, before.k.data), 'rows unchanged');
  }
  // attend: its own rows' positions; customSdpa has no such option
  expectError(() => c.attend(q, { startPos: 3, rotary: { ...T, positions: [9] } }), 'E_START_POS', [/^KVCache\.attend: rotary\.positions\[0\] is 9/]);
  expectError(() => one.customSdpa(q, randTensor(rand, [1, 4, 2, 16]), randTensor(rand, [1, 4, 2, 16]), { rotary: T }), 'E_ARG', [/unknown option 'rotary'/]);
  // between attendMany items: one item's out over another's cos
  const c2 = one.createKVCache(geo);
  c2.update(randTensor(rand, [1, 4, 2, 16]), randTensor(rand, [1, 4, 2, 16]));
  const shared = new Float32Array(96);
  expectError(() => one.attendMany([
    { cache: c, q, rotary: { cos: { data: shared.subarray(0, 32), dims: [8, 4] }, sin: T.sin } },
    { cache: c2, q, out: { data: shared.subarray(0, 64), dims: [1, 1, 4, 16] } },
  ]), 'E_ARG', [/items\[1\]\.out shares memory with items\[0\]\.rotary\.cos/]);
  c.dispose(); c2.dispose();
});

test.run();
