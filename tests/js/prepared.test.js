// prepared.test.js: prepared dense calls (sdpa.prepareLinear, prepareRmsNorm,
// prepareSwiglu; CONTRACT.md section 6, "Prepared calls") through the public
// API. A run's result is held to the float64 references of dense-reference.js
// (weights read back from their own bytes by the reference's dequantizer) with
// dense.test.js's bounds, and compared bit for bit with the plain call on the
// same arguments (the same wasm entry on the same structs: the library promises
// the same bits). Errors: the JS rules at prepare (the plain call's code and
// words, under the prepare call's name), the C rules at every run (the plain
// call's SdpaError: code, status and message), liveness at run; on every error
// nothing is written (out keeps a sentinel).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { rng, expectError, sameBits } from './helpers.js';
import { dequantize, quantize, linearRef, rmsNormRef, swigluRef } from './dense-reference.js';

const U = 2 ** -24;
const SENTINEL = -12345.5;

let sdpa;
test.before(async () => { sdpa = await createSdpa({ threads: 1 }); });
test.after(() => { sdpa?.dispose(); });

const randomFloats = (rand, n, amp = 1) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * amp);
function floats(s, dims, values) {
  const t = s.allocTensor('float32', dims);
  t.set(values);
  return t;
}
/** A weight [rows, cols] of dtype made from random values by the reference quantizer; { W, wv }: the tensor and its dequantized values. */
function weight(s, rand, dtype, rows, cols) {
  const bytes = quantize(dtype, randomFloats(rand, rows * cols), rows, cols);
  const W = s.allocTensor(dtype, [rows, cols]);
  W.setBytes(bytes);
  return { W, wv: dequantize(dtype, bytes, rows, cols) };
}
function assertProduct(got, ref, mag, cols, label) {
  assert.is(got.length, ref.length, `${label}: length`);
  const depth = cols / 4 + 10;
  for (let i = 0; i < ref.length; i++) {
    if (!(Math.abs(got[i] - ref[i]) <= depth * U * mag[i] + 1e-300)) assert.unreachable(`${label}: [${i}] got ${got[i]}, want ${ref[i]}`);
  }
}
function assertClose(got, ref, tol, label) {
  assert.is(got.length, ref.length, `${label}: length`);
  for (let i = 0; i < ref.length; i++) {
    if (!(Math.abs(got[i] - ref[i]) <= tol * Math.abs(ref[i]) + 1e-30)) assert.unreachable(`${label}: [${i}] got ${got[i]}, want ${ref[i]}`);
  }
}
function untouched(a, label) {
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], SENTINEL)) assert.unreachable(`${label}: element ${i} was written (${a[i]})`);
}
/** The error `f` throws (an SdpaError), or a failure. */
function errorOf(f, label) {
  try { f(); } catch (e) {
    assert.ok(e instanceof SdpaError, `${label}: ${e}`);
    return e;
  }
  return assert.unreachable(`${label}: nothing was thrown`);
}
/** run() throws exactly the plain call's error (code, status, message); out (a sentinel-filled float32 tensor) untouched. */
function sameErrorAsPlain(p, plain, out, label) {
  out.data.fill(SENTINEL);
  const want = errorOf(plain, `${label}: the plain call`);
  untouched(out.data, `${label}: the plain call wrote out`);
  const got = errorOf(() => p.run(), `${label}: run`);
  assert.is(got.code, want.code, `${label}: code`);
  assert.is(got.message, want.message, `${label}: message`);
  assert.is(got.status, want.status, `${label}: status`);
  untouched(out.data, `${label}: run wrote out`);
  return got;
}

test('prepareLinear: every weight dtype, n = 1 and 5, rows, accumulate, int16 activations: the plain call\'s bits and the float64 reference, run after run on new x', () => {
  const rand = rng(38);
  for (const dtype of ['float32', 'float16', 'q8_0', 'q4_0']) {
    const rows = 23, cols = 96, N = 5;
    const { W, wv } = weight(sdpa, rand, dtype, rows, cols);
    const X = sdpa.allocTensor('float32', [N, cols]);
    for (const m of [1, N]) {
      for (const accumulate of [false, true]) {
        for (const activations of ['float32', 'int16']) {
          const label = `${dtype} rows ${m} accumulate ${accumulate} ${activations}`;
          const O = sdpa.allocTensor('float32', [N, rows]), P = sdpa.allocTensor('float32', [N, rows]);
          const start = randomFloats(rand, N * rows, 3);
          O.set(start); P.set(start);
          const opts = m === N ? { accumulate, activations } : { accumulate, activations, rows: m };
          const p = sdpa.prepareLinear(X, W, { ...opts, out: O });
          assert.is(p.name, 'sdpa.linear');
          assert.is(p.disposed, false);
          for (let r = 0; r < 3; r++) {          // (each run reads x and, accumulating, out as they are now)
            const xs = randomFloats(rand, N * cols);
            X.set(xs);
            const before = O.data.slice(0, m * rows);
            assert.is(p.run(), undefined);
            sdpa.linear(X, W, { ...opts, out: P });
            assert.ok(sameBits(O.data, P.data), `${label} run ${r}: the plain call's bits`);
            if (activations === 'float32' || dtype === 'float32' || dtype === 'float16') {
              const { y, mag } = linearRef(xs, wv, m, cols, rows, accumulate ? before : null);
              assertProduct(O.data.subarray(0, m * rows), y, mag, cols, `${label} run ${r}`);
            }
            assert.ok(sameBits(O.data.subarray(m * rows), start.subarray(m * rows)), `${label} run ${r}: the rows after m untouched`);
          }
          p.dispose();
          O.dispose(); P.dispose();
        }
      }
    }
    W.dispose(); X.dispose();
  }
});

test('prepareLinear on views: x rows 2..6 of a heap tensor at an offset, out a window of another; the rest untouched', () => {
  const rand = rng(39);
  const rows = 7, cols = 64;
  const { W, wv } = weight(sdpa, rand, 'q8_0', rows, cols);
  const big = sdpa.allocTensor('float32', [3 + 5 * cols + 1]);
  const outHeap = sdpa.allocTensor('float32', [5 * rows + 10]);
  outHeap.data.fill(SENTINEL);
  const x = { data: big.data.subarray(3, 3 + 5 * cols), dims: [5, cols] };
  const out = { data: outHeap.data.subarray(5, 5 + 5 * rows), dims: [5, rows] };
  const p = sdpa.prepareLinear(x, W, { out });
  for (let r = 0; r < 2; r++) {
    const xs = randomFloats(rand, 5 * cols);
    big.set(xs, 3);
    p.run();
    const { y, mag } = linearRef(xs, wv, 5, cols, rows);
    assertProduct(outHeap.data.subarray(5, 5 + 5 * rows), y, mag, cols, `views run ${r}`);
    untouched(outHeap.data.subarray(0, 5), 'before the out view');
    untouched(outHeap.data.subarray(5 + 5 * rows), 'after the out view');
  }
  p.dispose();
  for (const t of [W, big, outHeap]) t.dispose();
});

test('prepareRmsNorm / prepareSwiglu: the plain call\'s bits and the float64 reference; rows; in place (out = x, out = up)', () => {
  const rand = rng(40);
  const n = 4, dim = 100;
  const X = sdpa.allocTensor('float32', [n, dim]), Wt = floats(sdpa, [dim], randomFloats(rand, dim, 2));
  const ws = Wt.data.slice();
  const O = sdpa.allocTensor('float32', [n, dim]), P = sdpa.allocTensor('float32', [n, dim]);
  for (const [m, eps] of [[n, undefined], [2, 0.25]]) {
    O.data.fill(SENTINEL); P.data.fill(SENTINEL);
    const opts = eps === undefined ? {} : { eps, rows: m };
    const p = sdpa.prepareRmsNorm(X, Wt, { ...opts, out: O });
    assert.is(p.name, 'sdpa.rmsNorm');
    for (let r = 0; r < 2; r++) {
      const xs = randomFloats(rand, n * dim, 10);
      X.set(xs);
      p.run();
      sdpa.rmsNorm(X, Wt, { ...opts, out: P });
      assert.ok(sameBits(O.data, P.data), `rmsNorm rows ${m} run ${r}: the plain call's bits`);
      assertClose(O.data.subarray(0, m * dim), rmsNormRef(xs, ws, m, dim, eps ?? 1e-5), (dim / 4 + 10) * U, `rmsNorm rows ${m} run ${r}`);
      untouched(O.data.subarray(m * dim), `rmsNorm rows ${m}: the rows after`);
    }
    p.dispose();
  }
  // in place: each run normalizes x again
  const xs = randomFloats(rand, n * dim, 10);
  X.set(xs);
  const inPlace = sdpa.prepareRmsNorm(X, Wt, { out: X });
  inPlace.run();
  assertClose(X.data, rmsNormRef(xs, ws, n, dim), (dim / 4 + 10) * U, 'rmsNorm in place');
  inPlace.dispose();

  const G = sdpa.allocTensor('float32', [n, dim]), Up = sdpa.allocTensor('float32', [n, dim]);
  for (const m of [n, 3]) {
    O.data.fill(SENTINEL); P.data.fill(SENTINEL);
    const p = sdpa.prepareSwiglu(G, Up, m === n ? { out: O } : { out: O, rows: m });
    assert.is(p.name, 'sdpa.swiglu');
    const gs = randomFloats(rand, n * dim, 12), us = randomFloats(rand, n * dim, 3);
    G.set(gs); Up.set(us);
    p.run();
    sdpa.swiglu(G, Up, m === n ? { out: P } : { out: P, rows: m });
    assert.ok(sameBits(O.data, P.data), `swiglu rows ${m}: the plain call's bits`);
    assertClose(O.data.subarray(0, m * dim), swigluRef(gs.subarray(0, m * dim), us.subarray(0, m * dim)), 8 * U, `swiglu rows ${m}`);
    untouched(O.data.subarray(m * dim), `swiglu rows ${m}: the rows after`);
    p.dispose();
  }
  const gs = randomFloats(rand, n * dim, 12), us = randomFloats(rand, n * dim, 3);
  G.set(gs); Up.set(us);
  const onUp = sdpa.prepareSwiglu(G, Up, { out: Up });
  onUp.run();
  assertClose(Up.data, swigluRef(gs, us), 8 * U, 'swiglu in place on up');
  onUp.dispose();
  for (const t of [X, Wt, O, P, G, Up]) t.dispose();
});

test('memory growth between prepare and run: the views and addresses still hold; results correct', () => {
  const rand = rng(41);
  const rows = 9, cols = 64;
  const { W, wv } = weight(sdpa, rand, 'q4_0', rows, cols);
  const holder = sdpa.allocTensor('float32', [2 * cols + 8]);
  const x = { data: holder.data.subarray(8, 8 + 2 * cols), dims: [2, cols] };
  const O = sdpa.allocTensor('float32', [2, rows]);
  const p = sdpa.prepareLinear(x, W, { out: O });
  const before = sdpa.memory().heapBytes;
  const huge = sdpa.allocTensor('float32', [(before >>> 2) + (16 << 20)]);   // more than the heap held: it grows
  assert.ok(sdpa.memory().heapBytes > before, 'the heap grew');
  assert.ok(x.data.buffer !== holder.data.buffer, 'the view given to prepare is of the old buffer');
  const xs = randomFloats(rand, 2 * cols);
  holder.set(xs, 8);                       // (through the current buffer)
  p.run();
  const { y, mag } = linearRef(xs, wv, 2, cols, rows);
  assertProduct(O.data, y, mag, cols, 'after growth');
  p.dispose();
  for (const t of [W, holder, O, huge]) t.dispose();
});

test('bad arguments at prepare (the JS rules): the plain call\'s code and words under the prepare call\'s name; nothing made', () => {
  const rand = rng(42);
  const { core } = sdpa[INTERNALS];
  const rows = 6, cols = 64;
  const { W } = weight(sdpa, rand, 'q8_0', rows, cols);
  const X = floats(sdpa, [2, cols], randomFloats(rand, 2 * cols));
  const O = sdpa.allocTensor('float32', [2, rows]);
  const N = floats(sdpa, [cols], randomFloats(rand, cols));
  const gone = sdpa.allocTensor('float32', [2, cols]); gone.dispose();
  const plainArray = { data: new Float32Array(2 * cols), dims: [2, cols] };
  const live = core.prepared.size;
  /** prepare must throw what the plain call throws (or `code` / `re` when the plain call accepts it). */
  const like = (prep, plain, name, label) => {
    const want = errorOf(plain, `${label}: plain`);
    const got = errorOf(prep, `${label}: prepare`);
    assert.is(got.code, want.code, `${label}: code`);
    assert.is(got.message, want.message.replace(/^sdpa\.\w+: /, `sdpa.${name}: `), `${label}: message`);
  };
  like(() => sdpa.prepareLinear(plainArray, W, { out: O }), () => sdpa.linear(plainArray, W, { out: O }), 'prepareLinear', 'x a plain array');
  like(() => sdpa.prepareLinear(gone, W, { out: O }), () => sdpa.linear(gone, W, { out: O }), 'prepareLinear', 'x disposed');
  like(() => sdpa.prepareLinear(X, W, { out: O, rows: 3 }), () => sdpa.linear(X, W, { out: O, rows: 3 }), 'prepareLinear', 'rows > x rows');
  like(() => sdpa.prepareLinear(X, W, { out: O, acumulate: true }), () => sdpa.linear(X, W, { out: O, acumulate: true }), 'prepareLinear', 'unknown option');
  like(() => sdpa.prepareLinear(X, W, { out: O, accumulate: 1 }), () => sdpa.linear(X, W, { out: O, accumulate: 1 }), 'prepareLinear', 'accumulate 1');
  like(() => sdpa.prepareLinear(X, W, { out: O, activations: 'int8' }), () => sdpa.linear(X, W, { out: O, activations: 'int8' }), 'prepareLinear', 'activations int8');
  like(() => sdpa.prepareRmsNorm(X, N, { out: X, eps: '1' }), () => sdpa.rmsNorm(X, N, { out: X, eps: '1' }), 'prepareRmsNorm', 'eps a string');
  like(() => sdpa.prepareSwiglu(X, plainArray, { out: X }), () => sdpa.swiglu(X, plainArray, { out: X }), 'prepareSwiglu', 'up a plain array');
  like(() => sdpa.prepareSwiglu(X, X, { out: X, rows: 0 }), () => sdpa.swiglu(X, X, { out: X, rows: 0 }), 'prepareSwiglu', 'rows 0');
  // out is required (a prepared call never allocates)
  expectError(() => sdpa.prepareLinear(X, W), 'E_ARG', [/^sdpa\.prepareLinear: options\.out is missing/], 'linear without out');
  expectError(() => sdpa.prepareRmsNorm(X, N, { eps: 0.1 }), 'E_ARG', [/^sdpa\.prepareRmsNorm: options\.out is missing/], 'rmsNorm without out');
  expectError(() => sdpa.prepareSwiglu(X, X, { out: null }), 'E_ARG', [/^sdpa\.prepareSwiglu: options\.out is missing/], 'swiglu out null');
  assert.is(core.prepared.size, live, 'no prepared call was made');
  for (const t of [W, X, O, N]) t.dispose();
});

test('bad arguments C checks (at every run): run throws the plain call\'s SdpaError (code, status, message) and writes nothing', () => {
  const rand = rng(43);
  const rows = 6, cols = 64;
  const { W } = weight(sdpa, rand, 'q8_0', rows, cols);
  const X = floats(sdpa, [2, cols], randomFloats(rand, 2 * cols));
  const x33 = floats(sdpa, [2, 33], randomFloats(rand, 66));
  const O = sdpa.allocTensor('float32', [2, rows]);
  const wide = sdpa.allocTensor('float32', [2, cols]);
  const N = floats(sdpa, [cols], randomFloats(rand, cols));
  const f16 = sdpa.allocTensor('float16', [2, cols]);
  const cases = [
    ['x cols != weight cols', 'E_DIMS', () => sdpa.prepareLinear(x33, W, { out: O }), () => sdpa.linear(x33, W, { out: O }), O],
    ['out of the wrong dims', 'E_DIMS', () => sdpa.prepareLinear(X, W, { out: wide }), () => sdpa.linear(X, W, { out: wide }), wide],
    ['int16: x cols != weight cols', 'E_DIMS', () => sdpa.prepareLinear(x33, W, { out: O, activations: 'int16' }), () => sdpa.linear(x33, W, { out: O, activations: 'int16' }), O],
    ['weight rank 1', 'E_RANK', () => sdpa.prepareLinear(X, N, { out: O }), () => sdpa.linear(X, N, { out: O }), O],
    ['x float16', 'E_DTYPE', () => sdpa.prepareLinear(f16, W, { out: O }), () => sdpa.linear(f16, W, { out: O }), O],
    ['rmsNorm eps < 0', 'E_ARG', () => sdpa.prepareRmsNorm(X, N, { out: wide, eps: -1 }), () => sdpa.rmsNorm(X, N, { out: wide, eps: -1 }), wide],
    ['rmsNorm eps NaN', 'E_ARG', () => sdpa.prepareRmsNorm(X, N, { out: wide, eps: NaN }), () => sdpa.rmsNorm(X, N, { out: wide, eps: NaN }), wide],
    ['rmsNorm weight [6, 64]', 'E_RANK', () => sdpa.prepareRmsNorm(X, W, { out: wide }), () => sdpa.rmsNorm(X, W, { out: wide }), wide],
    ['swiglu up dims', 'E_DIMS', () => sdpa.prepareSwiglu(X, x33, { out: wide }), () => sdpa.swiglu(X, x33, { out: wide }), wide],
  ];
  for (const [label, code, prep, plain, out] of cases) {
    const p = prep();                          // (JS cannot see these rules: prepare succeeds)
    const e = sameErrorAsPlain(p, plain, out, label);
    assert.is(e.code, code, `${label}: ${e.message}`);
    assert.ok(e.status > 0, `${label}: C's status`);
    sameErrorAsPlain(p, plain, out, `${label}, again`);    // (every run checks)
    p.dispose();
  }
  // out overlapping x: a view of x's memory as out
  const over = { data: X.data.subarray(cols, cols + 2 * rows), dims: [2, rows] };
  const xBytes = X.data.slice();
  const p = sdpa.prepareLinear(X, W, { out: over });
  const want = errorOf(() => sdpa.linear(X, W, { out: over }), 'plain overlap');
  const got = errorOf(() => p.run(), 'prepared overlap');
  assert.equal([got.code, got.message, got.status], [want.code, want.message, want.status]);
  assert.match(got.message, /^sdpa\.linear: .*out shares memory with x/);
  assert.ok(sameBits(X.data, xBytes), 'x (and the out view in it) unchanged');
  p.dispose();
  for (const t of [W, X, x33, O, wide, N, f16]) t.dispose();
});

test('liveness at run: a tensor disposed after prepare (heap tensor or a view\'s holder) is E_DISPOSED naming it, nothing written; dispose twice; run after dispose; the instance disposed', async () => {
  const rand = rng(44);
  const rows = 5, cols = 32;
  const { W } = weight(sdpa, rand, 'float32', rows, cols);
  const O = sdpa.allocTensor('float32', [1, rows]);
  const X = floats(sdpa, [1, cols], randomFloats(rand, cols));
  const holder = floats(sdpa, [cols + 4], randomFloats(rand, cols + 4));
  // the weight disposed: the plain call's error
  const W2 = weight(sdpa, rand, 'float32', rows, cols).W;
  const pw = sdpa.prepareLinear(X, W2, { out: O });
  W2.dispose();
  sameErrorAsPlain(pw, () => sdpa.linear(X, W2, { out: O }), O, 'weight disposed');
  expectError(() => pw.run(), 'E_DISPOSED', [/^sdpa\.linear: weight is a disposed heap tensor$/]);
  pw.dispose();
  // x a view whose heap tensor was disposed
  const px = sdpa.prepareLinear({ data: holder.data.subarray(4), dims: [1, cols] }, W, { out: O });
  px.run();
  holder.dispose();
  O.data.fill(SENTINEL);
  expectError(() => px.run(), 'E_DISPOSED', [/^sdpa\.linear: x is a view of a disposed heap tensor$/]);
  untouched(O.data, 'x view disposed');
  px.dispose();
  // out disposed
  const O2 = sdpa.allocTensor('float32', [2, cols]);
  const po = sdpa.prepareSwiglu(X, X, { out: { data: O2.data.subarray(cols), dims: [1, cols] } });
  O2.dispose();
  expectError(() => po.run(), 'E_DISPOSED', [/^sdpa\.swiglu: out is a view of a disposed heap tensor$/]);
  po.dispose();
  // the prepared call disposed: twice is fine, run is E_DISPOSED
  const p = sdpa.prepareLinear(X, W, { out: O });
  p.run();
  p.dispose();
  assert.is(p.disposed, true);
  p.dispose();
  O.data.fill(SENTINEL);
  expectError(() => p.run(), 'E_DISPOSED', [/^sdpa\.linear: this prepared call was disposed$/]);
  untouched(O.data, 'run after dispose');
  for (const t of [W, O, X]) t.dispose();

  // the instance disposed: its prepared calls are disposed with it
  const s = await createSdpa({ threads: 1 });
  const sx = s.allocTensor('float32', [1, 32]), sw = s.allocTensor('float32', [32]), so = s.allocTensor('float32', [1, 32]);
  const q = s.prepareRmsNorm(sx, sw, { out: so });
  q.run();
  assert.is(s[INTERNALS].core.prepared.size, 1);
  s.dispose();
  assert.is(q.disposed, true);
  expectError(() => q.run(), 'E_DISPOSED', [/^sdpa\.rmsNorm: this sdpa instance was disposed$/]);
  q.dispose();
  expectError(() => s.prepareRmsNorm(sx, sw, { out: so }), 'E_DISPOSED', [/^sdpa\.prepareRmsNorm: /]);
});

test('a prepared call of another instance\'s tensor is E_ARG at prepare; a run loop allocates nothing in wasm memory', async () => {
  const s2 = await createSdpa({ threads: 1 });
  const other = s2.allocTensor('float32', [1, 32]);
  const W = sdpa.allocTensor('float32', [4, 32]), O = sdpa.allocTensor('float32', [1, 4]);
  expectError(() => sdpa.prepareLinear(other, W, { out: O }), 'E_ARG', [/^sdpa\.prepareLinear: x is a heap tensor of another sdpa instance/]);
  s2.dispose();
  const X = sdpa.allocTensor('float32', [1, 32]);
  const p = sdpa.prepareLinear(X, W, { out: O, accumulate: true });
  const heap = sdpa.memory().heapBytes;
  const { M } = sdpa[INTERNALS];
  // (malloc's high-water mark: the next malloc's address does not move across the loop)
  const probe = () => { const a = M._malloc(64); M._free(a); return a; };
  const at = probe();
  for (let i = 0; i < 1000; i++) p.run();
  assert.is(probe(), at, 'no block left allocated');
  assert.is(sdpa.memory().heapBytes, heap, 'no growth');
  p.dispose();
  for (const t of [X, W, O]) t.dispose();
});

test.run();
