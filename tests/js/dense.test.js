// dense.test.js: the dense calls (sdpa.linear, rmsNorm, swiglu, embed,
// quantize) and heap tensors of the weight dtypes, through the public API,
// against the float64 references of dense-reference.js: each weight's values
// are read back from the tensor's own bytes by the reference's dequantizer
// (ggml's block layouts, float16 decoded in JS), never by the code under test.
//
// Tolerances (stated in units of u = 2^-24, float32's rounding unit):
//   linear: a float32 sum, whose rounding error is at most depth * u *
//     sum_j |w_j x_j| (+ |out| with accumulate), the depth below cols / 4 + 10
//     in the order of include/sdpa_dense.h (4 lanes of cols / 4 adds, a
//     block's partial sums and its scale, the lane sum, the tail): every
//     output is held to that bound (10 to 82 u here). Measured worst: 2.4 u
//     float32, 3.5 u float16, 1.7 u q8_0, 1.4 u q4_0 (times sum |w x|).
//   rmsNorm: (dim / 4 + 10) u |ref| (the sum of squares' depth, sqrt halves
//     it); measured 3.4 u.
//   swiglu: 8 u |ref| (exp, a division, two products); measured 2.6 u. And
//     e^g below 2^-126 (g < -87.34) is flushed to 0: silu(g) = g e^g, below
//     2^-119 in size down to g = -104 where float32's e^g ends, may come out 0
//     (an absolute 2^-119 |up| allowed; the library's exp, as its softmax's).
//   embed, quantize: exact (the bytes / values themselves).
//   linear with activations 'int16' (q8_0 / q4_0): x's quantization bound
//     derived at its section, against the product over the ORIGINAL x.
// Relaxed builds (fused multiply-adds) round less and meet the same bounds
// (measured: the same worst errors within 0.2 u). Bit-for-bit comparisons are
// made only between two runs of the library (1 vs 2 threads, one row vs many),
// which the header promises on every build.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { rng, expectError, sameBits } from './helpers.js';
import {
  dequantize, quantize, numberToHalf, halfToNumber, weightBytes, linearRef, rmsNormRef, swigluRef,
} from './dense-reference.js';

const U = 2 ** -24;
const DTYPES = ['float32', 'float16', 'q8_0', 'q4_0'];
const SENTINEL = -12345.5;

let sdpa, sdpa2;
test.before(async () => {
  sdpa = await createSdpa({ threads: 1 });
  sdpa2 = await createSdpa({ threads: 2 });
});
test.after(() => { sdpa?.dispose(); sdpa2?.dispose(); });

/** A copy of a heap tensor's bytes. */
function bytesOf(t) {
  const d = t.data;
  return new Uint8Array(d.buffer, d.byteOffset, t.byteLength).slice();
}

/**
 * Random bytes of a valid [rows, cols] weight of `dtype`: float32 values in
 * [-1, 1); float16 finite bits of any sign below 4 (subnormals included);
 * q8_0 / q4_0 random scales (finite float16 in about 2^-10 .. 2^1, either
 * sign) and fully random quants (int8 -128 too, every nibble).
 */
function randomWeightBytes(rand, dtype, rows, cols) {
  const b = new Uint8Array(weightBytes(dtype, rows, cols));
  const dv = new DataView(b.buffer);
  const half = (maxExp) => (rand() < 0.5 ? 0x8000 : 0) | (Math.floor(rand() * (maxExp + 1)) << 10) | Math.floor(rand() * 1024);
  if (dtype === 'float32') {
    for (let i = 0; i < rows * cols; i++) dv.setFloat32(4 * i, rand() * 2 - 1, true);
  } else if (dtype === 'float16') {
    for (let i = 0; i < rows * cols; i++) dv.setUint16(2 * i, half(16), true);
  } else {
    const bb = dtype === 'q8_0' ? 34 : 18;
    for (let i = 0; i < b.length; i++) b[i] = Math.floor(rand() * 256);
    for (let k = 0; k < b.length / bb; k++) dv.setUint16(k * bb, (half(1) & 0x83ff) | ((5 + Math.floor(rand() * 11)) << 10), true);
  }
  return b;
}

/** A heap tensor of `dtype` [rows, cols] in `s` holding `bytes`. */
function weightTensor(s, dtype, rows, cols, bytes) {
  const t = s.allocTensor(dtype, [rows, cols]);
  assert.is(t.byteLength, bytes.length);
  t.setBytes(bytes);
  return t;
}

/** A float32 heap tensor with `values`. */
function floats(s, dims, values) {
  const t = s.allocTensor('float32', dims);
  t.set(values);
  return t;
}

function randomFloats(rand, n, amp = 1) {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (rand() * 2 - 1) * amp;
  return a;
}

/** |got - ref| <= (cols / 4 + 10) * 2^-24 * mag elementwise; returns the worst error / (2^-24 * mag). */
function assertProduct(got, ref, mag, cols, label) {
  assert.is(got.length, ref.length, `${label}: length`);
  const depth = cols / 4 + 10;
  let worst = 0;
  for (let i = 0; i < ref.length; i++) {
    const e = Math.abs(got[i] - ref[i]);
    if (!(e <= depth * U * mag[i] + 1e-300)) {
      assert.unreachable(`${label}: [${i}] got ${got[i]}, want ${ref[i]}: |error| ${e} > ${depth} * 2^-24 * ${mag[i]}`);
    }
    if (mag[i] > 0) worst = Math.max(worst, e / (U * mag[i]));
  }
  return worst;
}

/** Every element of a Float32Array equals SENTINEL (nothing was written). */
function untouched(a, label) {
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], SENTINEL)) assert.unreachable(`${label}: element ${i} was written (${a[i]})`);
}

// ---- heap tensors of the weight dtypes ------------------------------------

test('allocTensor of the weight dtypes: data is the bits / block bytes, byteLength, setBytes round-trips', () => {
  const rand = rng(1);
  const cases = [['float32', 3, 5, Float32Array, 60], ['float16', 3, 5, Uint16Array, 30], ['q8_0', 3, 64, Uint8Array, 3 * 2 * 34], ['q4_0', 3, 64, Uint8Array, 3 * 2 * 18]];
  for (const [dtype, rows, cols, View, bytes] of cases) {
    const t = sdpa.allocTensor(dtype, [rows, cols]);
    assert.is(t.dtype, dtype);
    assert.equal(t.dims, [rows, cols]);
    assert.is(t.length, rows * cols);
    assert.is(t.byteLength, bytes);
    assert.ok(t.data instanceof View, `${dtype}: data is a ${View.name}`);
    assert.is(t.data.byteLength, bytes);
    const b = randomWeightBytes(rand, dtype, rows, cols);
    t.setBytes(b.subarray(0, 7));
    t.setBytes(b.subarray(7), 7);
    assert.equal(bytesOf(t), b, `${dtype}: setBytes in two pieces`);
    expectError(() => t.setBytes(b, 1), 'E_DIMS', [/^HeapTensor\.setBytes: /, new RegExp(`${bytes} bytes at byte 1 do not fit the tensor's ${bytes}`)]);
    expectError(() => t.setBytes(Array.from(b)), 'E_ARG', [/source must be a Uint8Array/]);
    t.dispose();
  }
  expectError(() => sdpa.allocTensor('q8_0', [4, 48]), 'E_DIMS', [/^allocTensor: /, /q8_0/, /multiple of 32, got 48/]);
  expectError(() => sdpa.allocTensor('q4_0', [2, 33]), 'E_DIMS', [/^allocTensor: /, /q4_0/, /multiple of 32, got 33/]);
});

// ---- linear --------------------------------------------------------------

/**
 * One linear case: weight [rows, cols] of dtype (random bytes), x of
 * dims xDims (last dim cols), against linearRef over the tensor's bytes.
 */
function linearCase(rand, dtype, rows, cols, xDims, { accumulate = false } = {}) {
  const n = xDims.slice(0, -1).reduce((a, b) => a * b, 1);
  const wb = randomWeightBytes(rand, dtype, rows, cols);
  const W = weightTensor(sdpa, dtype, rows, cols, wb);
  const xs = randomFloats(rand, n * cols, 2);
  const X = floats(sdpa, xDims, xs);
  const outDims = [...xDims.slice(0, -1), rows];
  const prior = randomFloats(rand, n * rows, 3);
  const O = floats(sdpa, outDims, prior);
  const r = sdpa.linear(X, W, { out: O, accumulate });
  assert.is(r, O, 'returns out');
  const { y, mag } = linearRef(xs, dequantize(dtype, wb, rows, cols), n, cols, rows, accumulate ? prior : null);
  const worst = assertProduct(O.data, y, mag, cols, `${dtype} [${rows}, ${cols}] x ${JSON.stringify(xDims)}${accumulate ? ' accumulate' : ''}`);
  // the out made by the call when none is given: the same bits
  if (!accumulate) {
    const made = sdpa.linear(X, W);
    assert.equal(made.dims, outDims);
    assert.ok(sameBits(made.data, O.data), 'an out made by the call');
    made.dispose();
  }
  for (const t of [W, X, O]) t.dispose();
  return worst;
}

test('linear, every weight dtype: n = 1 and n > 1, column tails, ranks 1 to 3, accumulate (float64 reference over the bytes)', () => {
  const rand = rng(2024);
  const worst = {};
  for (const dtype of DTYPES) {
    const block = dtype === 'q8_0' || dtype === 'q4_0';
    const colsList = block ? [32, 64, 96, 160, 288] : [1, 3, 4, 5, 7, 8, 9, 13, 37, 64, 100];
    let w = 0;
    for (const cols of colsList) {
      for (const rows of [1, 3, 4, 5, 17, 33]) {
        for (const n of [1, 2, 5, 67]) {
          w = Math.max(w, linearCase(rand, dtype, rows, cols, [n, cols]));
        }
      }
      w = Math.max(w, linearCase(rand, dtype, 7, cols, [cols]));                 // rank 1: one row
      w = Math.max(w, linearCase(rand, dtype, 6, cols, [2, 3, cols]));           // rank 3
      w = Math.max(w, linearCase(rand, dtype, 9, cols, [1, cols], { accumulate: true }));
      w = Math.max(w, linearCase(rand, dtype, 18, cols, [70, cols], { accumulate: true }));
    }
    worst[dtype] = w;
  }
  // (the measured worst error in units of 2^-24 * sum |w x|: far below the bound cols / 4 + 10)
  for (const d of DTYPES) assert.ok(worst[d] < 8, `${d}: worst ${worst[d]}`);
});

test('linear, float activations on q8_0 / q4_0: activations of magnitude 2^90 stay finite and within the bound (block sums are taken times 2^24 inside: CONTRACT.md, non-finite values)', () => {
  const rand = rng(2090);
  for (const dtype of ['q8_0', 'q4_0']) {
    const rows = 9, cols = 96, n = 3;
    const wb = randomWeightBytes(rand, dtype, rows, cols);
    const W = weightTensor(sdpa, dtype, rows, cols, wb);
    const xs = randomFloats(rand, n * cols, 2 ** 90);
    const X = floats(sdpa, [n, cols], xs);
    const O = sdpa.linear(X, W);
    const { y, mag } = linearRef(xs, dequantize(dtype, wb, rows, cols), n, cols, rows, null);
    for (let i = 0; i < y.length; i++) assert.ok(Number.isFinite(O.data[i]), `${dtype}: [${i}] ${O.data[i]} is not finite`);
    assertProduct(O.data, y, mag, cols, `${dtype}, |x| up to 2^90`);
    for (const t of [W, X, O]) t.dispose();
  }
});

test('linear: `rows` computes the first rows only (the rest of out untouched); views of heap tensors as x and out', () => {
  const rand = rng(7);
  for (const dtype of DTYPES) {
    const rows = 19, cols = 64, N = 9;
    const wb = randomWeightBytes(rand, dtype, rows, cols);
    const W = weightTensor(sdpa, dtype, rows, cols, wb);
    const wv = dequantize(dtype, wb, rows, cols);
    const xs = randomFloats(rand, N * cols);
    const X = floats(sdpa, [N, cols], xs);
    for (const m of [1, 4, 8]) {
      const O = floats(sdpa, [N, rows], new Float32Array(N * rows).fill(SENTINEL));
      assert.is(sdpa.linear(X, W, { out: O, rows: m }), O);
      const { y, mag } = linearRef(xs, wv, m, cols, rows);
      assertProduct(O.data.subarray(0, m * rows), y, mag, cols, `${dtype} rows ${m}`);
      untouched(O.data.subarray(m * rows), `${dtype} rows ${m}: the rows after`);
      // accumulate with rows
      const before = O.data.slice();
      sdpa.linear(X, W, { out: O, rows: m, accumulate: true });
      const acc = linearRef(xs, wv, m, cols, rows, before);
      assertProduct(O.data.subarray(0, m * rows), acc.y, acc.mag, cols, `${dtype} rows ${m} accumulate`);
      untouched(O.data.subarray(m * rows), `${dtype} rows ${m} accumulate: the rows after`);
      // without out: the made out has `rows` rows
      const made = sdpa.linear(X, W, { rows: m });
      assert.equal(made.dims, [m, rows]);
      assert.ok(sameBits(made.data, before.subarray(0, m * rows)), 'made out, rows');
      made.dispose();
      O.dispose();
    }
    // views: x rows 2 .. 6 of a heap tensor at an offset, out a window of another heap tensor
    const big = sdpa.allocTensor('float32', [3 + 5 * cols + 1]);
    big.data.fill(SENTINEL);
    big.set(xs.subarray(2 * cols, 7 * cols), 3);
    const x = { data: big.data.subarray(3, 3 + 5 * cols), dims: [5, cols] };
    const outHeap = sdpa.allocTensor('float32', [5 * rows + 10]);
    outHeap.data.fill(SENTINEL);
    const out = { data: outHeap.data.subarray(5, 5 + 5 * rows), dims: [5, rows] };
    assert.is(sdpa.linear(x, W, { out }), out, 'returns the out view');
    const { y, mag } = linearRef(xs.subarray(2 * cols), wv, 5, cols, rows);
    assertProduct(outHeap.data.subarray(5, 5 + 5 * rows), y, mag, cols, `${dtype} views`);
    untouched(outHeap.data.subarray(0, 5), 'before the out view');
    untouched(outHeap.data.subarray(5 + 5 * rows), 'after the out view');
    const whole = sdpa.linear({ data: X.data.subarray(2 * cols, 7 * cols), dims: [5, cols] }, W);
    assert.ok(sameBits(whole.data, out.data), 'a view equals the same rows of a heap tensor');
    for (const t of [W, X, big, outHeap, whole]) t.dispose();
  }
});

test('linear: 1 and 2 threads give the same bits (1536x576, n = 1 and 70); row i of 70 equals a one-row call', () => {
  assert.is(sdpa2.info.threads, 2);
  const rand = rng(99);
  const rows = 1536, cols = 576, n = 70;
  const xs = randomFloats(rand, n * cols);
  for (const dtype of DTYPES) {
    const wb = randomWeightBytes(rand, dtype, rows, cols);
    const got = [sdpa, sdpa2].map((s) => {
      const W = weightTensor(s, dtype, rows, cols, wb);
      const X = floats(s, [n, cols], xs);
      const many = s.linear(X, W);
      const one = s.linear({ data: X.data.subarray(0, cols), dims: [1, cols] }, W);
      // every row of the 70-row call as a call of its own
      const row = s.allocTensor('float32', [1, rows]);
      for (let i = 0; i < n; i++) {
        s.linear({ data: X.data.subarray(i * cols, (i + 1) * cols), dims: [1, cols] }, W, { out: row });
        if (!sameBits(row.data, many.data.subarray(i * rows, (i + 1) * rows))) assert.unreachable(`${dtype}, ${s.info.threads} threads: row ${i} of ${n} differs from a one-row call`);
      }
      const r = { many: many.data.slice(), one: one.data.slice() };
      for (const t of [W, X, many, one, row]) t.dispose();
      return r;
    });
    assert.ok(sameBits(got[0].one, got[1].one), `${dtype}: n = 1, 1 vs 2 threads`);
    assert.ok(sameBits(got[0].many, got[1].many), `${dtype}: n = ${n}, 1 vs 2 threads`);
    // and right: rows 0, 37 and 69 against the reference
    const wv = dequantize(dtype, wb, rows, cols);
    for (const i of [0, 37, 69]) {
      const { y, mag } = linearRef(xs.subarray(i * cols, (i + 1) * cols), wv, 1, cols, rows);
      assertProduct(got[1].many.subarray(i * rows, (i + 1) * rows), y, mag, cols, `${dtype} 1536x576 row ${i}`);
    }
  }
});

test('linear: a float16 Inf / NaN or a q8_0 / q4_0 scale Inf / NaN reaches its own output only', () => {
  const rand = rng(5);
  const rows = 8, cols = 64;
  for (const dtype of ['float16', 'q8_0', 'q4_0']) {
    const wb = randomWeightBytes(rand, dtype, rows, cols);
    const dv = new DataView(wb.buffer);
    const bb = dtype === 'q8_0' ? 34 : 18;
    // row 2: +Inf, row 5: NaN (float16: element 9; q8_0 / q4_0: block 1's scale)
    const at = (r) => (dtype === 'float16' ? 2 * (r * cols + 9) : (r * 2 + 1) * bb);
    dv.setUint16(at(2), 0x7c00, true);
    dv.setUint16(at(5), 0x7e01, true);
    const W = weightTensor(sdpa, dtype, rows, cols, wb);
    const xs = randomFloats(rand, 3 * cols).map((v) => v || 0.5);
    const X = floats(sdpa, [3, cols], xs);
    for (const m of [1, 3]) {
      const out = sdpa.linear({ data: X.data.subarray(0, m * cols), dims: [m, cols] }, W);
      const { y, mag } = linearRef(xs, dequantize(dtype, wb, rows, cols), m, cols, rows);
      for (let i = 0; i < m; i++) {
        for (let r = 0; r < rows; r++) {
          const g = out.data[i * rows + r], want = y[i * rows + r];
          // (NaN or Inf: the reference's d * q per value and the kernel's block sum times d may meet Inf * 0 in different places)
          if (r === 2 || r === 5) assert.ok(!Number.isFinite(g) && !Number.isFinite(want), `${dtype} n=${m} x row ${i}, weight row ${r}: ${g} (reference ${want})`);
          else assert.ok(Math.abs(g - want) <= (cols / 4 + 10) * U * mag[i * rows + r], `${dtype} n=${m} x row ${i}, weight row ${r}: ${g} vs ${want}`);
        }
      }
      out.dispose();
    }
    W.dispose(); X.dispose();
  }
});

// ---- linear, activations: 'int16' ----------------------------------------
//
// With activations 'int16' and a q8_0 / q4_0 weight (include/sdpa_dense.h,
// CONTRACT section 6), x is quantized per row and block b of 32 values:
// step s_b = amax_b / 32767 (amax_b = the block's largest |x|), xq = x / s_b
// rounded to the nearest int16; the block dots are exact integers, then per
// block and lane float(isum) * (d * s_b) is added in float32. Against the
// float64 product over the weight's values and the ORIGINAL x:
//   each x value is off by at most E_b = amax_b / 65534 + 4u amax_b (half a
//   step, plus float32's rounding of 32767 / amax, of x times it and of s_b);
//   the float32 part is nb + 6 roundings deep (nb = cols / 32 adds a lane, the
//   conversion of isum, d * s, the product, the lane sum, y0 with accumulate);
//   |y - ref| <= sum_j |w_j| E_b(j) + 1.01 (nb + 6) u (|y0| + sum_j |w_j| (|x_j| + E_b(j)))
//              + nb 2^-120 (d * s or the product below float32's normal range:
//                 an absolute 2^-150 times |isum| <= 2^27 a block and lane).
// The first term, the quantization's, dominates. Measured worst: 0.51 of the
// bound q8_0, 0.43 q4_0, plain and relaxed builds (x blocks of very different
// scales, zeros, lone values, ties); a dropped or misread term moves an output
// by about |w_j x_j|, hundreds of times the bound. Rows of 1e-36 blocks and of
// subnormals are held to it too (and to 2^-12 of sum |w x|): 32767 / amax
// overflows float32 below amax ~ 9.6e-35.

/** The float64 product over the original x and the bound above, for n rows. */
function int16Ref(xs, wv, n, cols, rows, prior = null) {
  const nb = cols / 32, y = new Float64Array(n * rows), tol = new Float64Array(n * rows);
  const E = new Float64Array(n * nb);
  for (let i = 0; i < n; i++) {
    for (let b = 0; b < nb; b++) {
      let amax = 0;
      for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(xs[i * cols + 32 * b + j]));
      E[i * nb + b] = amax / 65534 + 4 * U * amax;
    }
  }
  for (let i = 0; i < n; i++) {
    for (let o = 0; o < rows; o++) {
      const y0 = prior ? prior[i * rows + o] : 0;
      let s = y0, q = 0, m = Math.abs(y0);
      for (let j = 0; j < cols; j++) {
        const w = wv[o * cols + j], x = xs[i * cols + j], e = E[i * nb + (j >> 5)];
        s += w * x;
        q += Math.abs(w) * e;
        m += Math.abs(w) * (Math.abs(x) + e);
      }
      y[i * rows + o] = s;
      tol[i * rows + o] = q + 1.01 * (nb + 6) * U * m + nb * 2 ** -120;
    }
  }
  return { y, tol };
}

/** got within the bound; returns the worst |error| / bound. */
function assertInt16(got, { y, tol }, label) {
  assert.is(got.length, y.length, `${label}: length`);
  let worst = 0;
  for (let i = 0; i < y.length; i++) {
    const e = Math.abs(got[i] - y[i]);
    if (!(e <= tol[i])) assert.unreachable(`${label}: [${i}] got ${got[i]}, float64 ${y[i]}: |error| ${e} > bound ${tol[i]}`);
    worst = Math.max(worst, e / tol[i]);
  }
  return worst;
}

/**
 * n rows of cols values, each block of 32 of its own kind: uniform in
 * [-1, 1), amplitudes 1e-4 .. 1e4, all zero, one lone value, integers and
 * halves up to 40 beside a 32767 (x * 32767 / amax lands on .5: ties).
 */
function blockyFloats(rand, n, cols) {
  const a = new Float32Array(n * cols);
  for (let b = 0; b < (n * cols) / 32; b++) {
    const at = 32 * b, kind = Math.floor(rand() * 6);
    const amp = kind === 1 ? 10 ** (rand() * 8 - 4) : 1;
    for (let j = 0; j < 32; j++) a[at + j] = (rand() * 2 - 1) * amp;
    if (kind === 2) a.fill(0, at, at + 32);
    if (kind === 3) { a.fill(0, at, at + 32); a[at + Math.floor(rand() * 32)] = rand() * 4 - 2; }
    if (kind === 4) {
      for (let j = 0; j < 32; j++) a[at + j] = Math.floor(rand() * 81) - 40 + (j & 1 ? 0.5 : 0);
      a[at + Math.floor(rand() * 32)] = rand() < 0.5 ? 32767 : -32767;
    }
  }
  return a;
}

test('linear, activations int16 (q8_0 / q4_0): within the derived bound of the float64 product over the original x; n = 1 and n > 1, accumulate, ranks 1 to 3, rows; other bits than the float path', () => {
  const rand = rng(1616);
  const worst = {};
  for (const dtype of ['q8_0', 'q4_0']) {
    let w = 0, differ = 0, total = 0;
    const one = (rows, cols, xDims, { accumulate = false, m } = {}) => {
      const n = xDims.slice(0, -1).reduce((a, b) => a * b, 1), k = m ?? n;
      const wb = randomWeightBytes(rand, dtype, rows, cols);
      const W = weightTensor(sdpa, dtype, rows, cols, wb);
      const xs = blockyFloats(rand, n, cols);
      const X = floats(sdpa, xDims, xs);
      const outDims = [...xDims.slice(0, -1), rows];
      const prior = randomFloats(rand, n * rows, 3);
      const O = floats(sdpa, outDims, prior), F = floats(sdpa, outDims, prior);
      assert.is(sdpa.linear(X, W, { out: O, accumulate, activations: 'int16', rows: m }), O, 'returns out');
      sdpa.linear(X, W, { out: F, accumulate, activations: 'float32', rows: m });
      const label = `${dtype} int16 [${rows}, ${cols}] x ${JSON.stringify(xDims)}${accumulate ? ' accumulate' : ''}${m ? ` rows ${m}` : ''}`;
      w = Math.max(w, assertInt16(O.data.subarray(0, k * rows), int16Ref(xs, dequantize(dtype, wb, rows, cols), k, cols, rows, accumulate ? prior : null), label));
      if (m !== undefined) untouched(O.data.subarray(k * rows).map((v, i) => (v === prior[k * rows + i] ? SENTINEL : v)), `${label}: the rows after`);
      for (let i = 0; i < k * rows; i++) { total++; if (O.data[i] !== F.data[i]) differ++; }
      if (!accumulate && m === undefined) {
        const made = sdpa.linear(X, W, { activations: 'int16' });
        assert.ok(sameBits(made.data, O.data), `${label}: an out made by the call`);
        made.dispose();
      }
      for (const t of [W, X, O, F]) t.dispose();
    };
    for (const cols of [32, 96, 288]) {
      for (const rows of [1, 3, 17]) {
        for (const n of [1, 5, 67]) one(rows, cols, [n, cols], { accumulate: (rows + n) % 2 === 1 });
      }
      one(7, cols, [cols]);
      one(6, cols, [2, 3, cols], { accumulate: true });
      one(9, cols, [8, cols], { m: 3 });
    }
    worst[dtype] = w;
    // (the option is there: the quantized x gives other bits than the float path, almost everywhere)
    assert.ok(differ > total / 2, `${dtype}: only ${differ} of ${total} outputs differ from the float path`);
  }
  for (const d of ['q8_0', 'q4_0']) assert.ok(worst[d] < 1, `${d}: worst ${worst[d]}`);
});

test('linear, activations int16: x / step rounds to the nearest int16, ties to even (blocks whose largest |x| is 32767: the step is 1, x = k + 1/4, 1/2, 3/4)', () => {
  // With amax = 32767 the step s = amax / 32767 and 32767 / amax are 1 exactly, so xq is x
  // rounded to an integer and the output is sum_j w_j xq_j up to float32's rounding alone
  // ((nb + 6) u of sum |w_j xq_j|): rounding toward zero (3/4 -> 0) or ties away from
  // zero would be off by whole |w_j|, far beyond it (the bound of the tests above allows
  // a step's half of every value, so it cannot tell).
  const rand = rng(99);
  const rne = (v) => { const f = Math.floor(v), r = v - f; return r > 0.5 ? f + 1 : r < 0.5 ? f : (f % 2 === 0 ? f : f + 1); };
  const rows = 12, cols = 128, n = 3, nb = cols / 32;
  for (const dtype of ['q8_0', 'q4_0']) {
    const wb = randomWeightBytes(rand, dtype, rows, cols);
    const wv = dequantize(dtype, wb, rows, cols);
    const W = weightTensor(sdpa, dtype, rows, cols, wb);
    const xs = new Float32Array(n * cols);
    for (let i = 0; i < n * cols; i++) xs[i] = (rand() < 0.5 ? -1 : 1) * (Math.floor(rand() * 200) + [0.25, 0.5, 0.75][i % 3]);
    for (let b = 0; b < n * nb; b++) xs[32 * b + (b * 7) % 32] = b % 2 ? 32767 : -32767;
    const X = floats(sdpa, [n, cols], xs);
    const O = sdpa.linear(X, W, { activations: 'int16' });
    for (let i = 0; i < n; i++) {
      for (let o = 0; o < rows; o++) {
        let s = 0, m = 0;
        for (let j = 0; j < cols; j++) { const p = wv[o * cols + j] * rne(xs[i * cols + j]); s += p; m += Math.abs(p); }
        const g = O.data[i * rows + o];
        assert.ok(Math.abs(g - s) <= 1.01 * (nb + 6) * U * m, `${dtype} row ${i} out ${o}: ${g}, with x rounded to nearest even ${s} (sum |w xq| ${m})`);
      }
    }
    for (const t of [W, X, O]) t.dispose();
  }
});

test('linear, activations int16: 1 and 2 threads the same bits (512x576, n = 1 and 70); row i of 70 equals a one-row call; float32 / float16 weights: the bits of the float path', () => {
  assert.is(sdpa2.info.threads, 2);
  const rand = rng(4242);
  const rows = 512, cols = 576, n = 70;
  const xs = blockyFloats(rand, n, cols);
  for (const dtype of DTYPES) {
    const wb = randomWeightBytes(rand, dtype, rows, cols);
    const got = [sdpa, sdpa2].map((s) => {
      const W = weightTensor(s, dtype, rows, cols, wb);
      const X = floats(s, [n, cols], xs);
      const many = s.linear(X, W, { activations: 'int16' });
      const one = s.linear({ data: X.data.subarray(0, cols), dims: [1, cols] }, W, { activations: 'int16' });
      const row = s.allocTensor('float32', [1, rows]);
      for (let i = 0; i < n; i++) {
        s.linear({ data: X.data.subarray(i * cols, (i + 1) * cols), dims: [1, cols] }, W, { out: row, activations: 'int16' });
        if (!sameBits(row.data, many.data.subarray(i * rows, (i + 1) * rows))) assert.unreachable(`${dtype} int16, ${s.info.threads} threads: row ${i} of ${n} differs from a one-row call`);
      }
      const flt = s.linear(X, W);
      const r = { many: many.data.slice(), one: one.data.slice(), flt: flt.data.slice() };
      for (const t of [W, X, many, one, row, flt]) t.dispose();
      return r;
    });
    assert.ok(sameBits(got[0].one, got[1].one), `${dtype} int16: n = 1, 1 vs 2 threads`);
    assert.ok(sameBits(got[0].many, got[1].many), `${dtype} int16: n = ${n}, 1 vs 2 threads`);
    if (dtype === 'float32' || dtype === 'float16') {
      assert.ok(sameBits(got[0].many, got[0].flt), `${dtype}: activations 'int16' changed bits of a float weight's product`);
    } else {
      const wv = dequantize(dtype, wb, rows, cols);
      for (const i of [0, 33, 69]) {
        assertInt16(got[1].many.subarray(i * rows, (i + 1) * rows), int16Ref(xs.subarray(i * cols, (i + 1) * cols), wv, 1, cols, rows), `${dtype} int16 512x576 row ${i}`);
      }
    }
  }
});

test('linear, activations int16: a NaN / Inf in a block of x makes exactly its row\'s outputs NaN; a row of tiny blocks (1e-36, subnormals) keeps the bound', () => {
  const rand = rng(77);
  const rows = 10, cols = 96, n = 4;
  for (const dtype of ['q8_0', 'q4_0']) {
    const wb = randomWeightBytes(rand, dtype, rows, cols);
    const wv = dequantize(dtype, wb, rows, cols);
    const W = weightTensor(sdpa, dtype, rows, cols, wb);
    for (const bad of [NaN, Infinity, -Infinity]) {
      const xs = randomFloats(rand, n * cols);
      xs[2 * cols + 40] = bad;                     // row 2, block 1
      const X = floats(sdpa, [n, cols], xs);
      for (const accumulate of [false, true]) {
        const prior = randomFloats(rand, n * rows);
        const O = floats(sdpa, [n, rows], prior);
        sdpa.linear(X, W, { out: O, accumulate, activations: 'int16' });
        assert.ok(O.data.subarray(2 * rows, 3 * rows).every(Number.isNaN), `${dtype} x = ${bad}${accumulate ? ' accumulate' : ''}: row 2 all NaN (${Array.from(O.data.subarray(2 * rows, 3 * rows))})`);
        // the other rows: the bits of the same rows computed without row 2
        const rest = [0, 1, 3];
        const Xr = floats(sdpa, [3, cols], Float32Array.from(rest.flatMap((i) => Array.from(xs.subarray(i * cols, (i + 1) * cols)))));
        const Or = floats(sdpa, [3, rows], Float32Array.from(rest.flatMap((i) => Array.from(prior.subarray(i * rows, (i + 1) * rows)))));
        sdpa.linear(Xr, W, { out: Or, accumulate, activations: 'int16' });
        rest.forEach((i, k) => assert.ok(sameBits(O.data.subarray(i * rows, (i + 1) * rows), Or.data.subarray(k * rows, (k + 1) * rows)), `${dtype} x = ${bad}: row ${i} touched`));
        for (const t of [O, Xr, Or]) t.dispose();
      }
      X.dispose();
    }
    // a row whose every block is tiny: 32767 / amax overflows float32 below amax ~ 9.6e-35
    const xs = new Float32Array(2 * cols);
    for (let j = 0; j < cols; j++) {
      xs[j] = (rand() * 2 - 1) * 1e-36;
      xs[cols + j] = Math.round((rand() * 2 - 1) * 3000) * 2 ** -149;  // subnormals only (s_b, d * s_b subnormal too)
    }
    const X = floats(sdpa, [2, cols], xs);
    const O = sdpa.linear(X, W, { activations: 'int16' });
    const ref = int16Ref(xs, wv, 2, cols, rows);
    assertInt16(O.data.subarray(0, rows), { y: ref.y.subarray(0, rows), tol: ref.tol.subarray(0, rows) }, `${dtype}: x of 1e-36`);
    assertInt16(O.data.subarray(rows), { y: ref.y.subarray(rows), tol: ref.tol.subarray(rows) }, `${dtype}: x of subnormals`);
    // (and relative to the outputs' size: the 1e-36 row within 2^-12 of sum |w x|)
    for (let o = 0; o < rows; o++) {
      let m = 0;
      for (let j = 0; j < cols; j++) m += Math.abs(wv[o * cols + j] * xs[j]);
      assert.ok(Math.abs(O.data[o] - ref.y[o]) <= 2 ** -12 * m, `${dtype}: x of 1e-36, output ${o}: ${O.data[o]} vs ${ref.y[o]} (sum |w x| ${m})`);
    }
    for (const t of [W, X, O]) t.dispose();
  }
});

// ---- quantize ------------------------------------------------------------

/** Blocks of 32 that exercise ggml's rules: ties, signs of the max, zeros, tiny and huge scales. */
function quantizeSource(rand, dtype, rows, cols) {
  const x = randomFloats(rand, rows * cols);
  const block = (r, b, values) => x.set(Float32Array.from({ length: 32 }, (_, j) => values[j % values.length]), r * cols + 32 * b);
  // (amax 127: q8_0's d = 1 and 1/d = 1, so x * id is x: exact ties, rounded away from zero)
  block(0, 0, [127, 2.5, -2.5, 0.5, -0.5, 126.5, -126.5, 1.5, -1.5, 0, -0]);
  // (max -8: q4_0's d = 1; x + 8.5 lands on integers and halves; max +8: d = -1)
  block(0, 1, [-8, -7.5, 0.5, 6.5, 7, 7.4999, 8, -0.5, 3.25]);
  block(1, 0, [8, -8, 7.5, -7.5, 0.5, -0.5, 2, -3]);
  block(1, 1, [0]);                                              // d = 0: 1/d taken as 0
  block(2, 0, [0, 0, 0, 1e-3]);                                  // one value sets the scale
  block(2, 1, [3, -3, 1, 2]);                                    // equal magnitudes: the first one is max
  block(3, 0, [-3, 3, 1, 2]);
  block(3, 1, [1e-6, -2e-7, 3e-8, 0]);                           // d a float16 subnormal
  block(4, 0, [1e-9, -1e-10]);                                   // d rounds to float16 zero
  block(4, 1, [1e7, -3e6, 5]);                                   // d above 65504: float16 Inf (as ggml)
  for (let b = 0; b < cols / 32; b++) block(5, b, [Math.fround(1 + 2 ** -11), 3, -1.25, Math.fround(0.1)]);
  return x;
}

test('quantize: q8_0 and q4_0 bytes equal ggml\'s reference quantizers (JS, float32 steps); float16 rounds to nearest even; float32 copies', () => {
  const rand = rng(31);
  const rows = 9, cols = 96;
  for (const dtype of DTYPES) {
    const x = quantizeSource(rand, dtype, rows, cols);
    const S = floats(sdpa, [rows, cols], x);
    const O = sdpa.allocTensor(dtype, [rows, cols]);
    assert.is(sdpa.quantize(S, O), O);
    const want = quantize(dtype, x, rows, cols);
    const got = bytesOf(O);
    for (let i = 0; i < want.length; i++) if (got[i] !== want[i]) assert.unreachable(`${dtype}: byte ${i} is ${got[i]}, ggml's reference gives ${want[i]}`);
    // a view of a heap tensor as source: the same bytes
    const O2 = sdpa.allocTensor(dtype, [2, cols]);
    sdpa.quantize({ data: S.data.subarray(3 * cols, 5 * cols), dims: [2, cols] }, O2);
    assert.equal(bytesOf(O2), want.subarray(3 * want.length / rows, 5 * want.length / rows));
    for (const t of [S, O, O2]) t.dispose();
  }
  // a block holding a NaN or an Inf: its d is NaN and every value of it reads NaN (CONTRACT section 6); the block before it as ggml's
  for (const dtype of ['q8_0', 'q4_0']) {
    for (const v of [NaN, Infinity, -Infinity]) {
      const x = randomFloats(rand, 64);
      x[45] = v;
      const S = floats(sdpa, [1, 64], x), O = sdpa.allocTensor(dtype, [1, 64]);
      sdpa.quantize(S, O);
      const bb = dtype === 'q8_0' ? 34 : 18;
      assert.equal(bytesOf(O).subarray(0, bb), quantize(dtype, x.subarray(0, 32), 1, 32), `${dtype} ${v}: the finite block`);
      const e = sdpa.embed(O, [0]);
      assert.ok(e.data.subarray(32).every(Number.isNaN), `${dtype} ${v}: the block holding it reads NaN`);
      for (const t of [S, O, e]) t.dispose();
    }
  }
  // float16 at its edges: ties to even (normal and subnormal), the largest finite, overflow, underflow, signed zero
  const f = Math.fround;
  const edges = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 - 2 ** -12, 2 ** -25, 3 * 2 ** -25, 2 ** -24, 2 ** -26, 5 * 2 ** -26, 2 ** -14 - 2 ** -25,
    65504, 65519, 65520, 65536, 1e30, 6e-8, f(0.1), f(1 / 3), 0, -0, Infinity, -Infinity, 2048 + 1, 2048 + 3, 4097, 4099];
  const vals = Float32Array.from([...edges, ...edges.map((v) => -v)]);
  const S = floats(sdpa, [1, vals.length], vals);
  const O = sdpa.allocTensor('float16', [1, vals.length]);
  sdpa.quantize(S, O);
  vals.forEach((v, i) => assert.is(O.data[i], numberToHalf(v), `float16 of ${v}: got 0x${O.data[i].toString(16)}, want 0x${numberToHalf(v).toString(16)}`));
  S.dispose(); O.dispose();
});

// ---- rmsNorm, swiglu, embed ----------------------------------------------

test('rmsNorm: out of place and in place, rows of very different scales, eps, `rows`', () => {
  const rand = rng(3);
  for (const dim of [1, 3, 4, 7, 64, 100, 256]) {
    const n = 5;
    const xs = new Float32Array(n * dim);
    for (let i = 0; i < n; i++) for (let j = 0; j < dim; j++) xs[i * dim + j] = (rand() * 2 - 1) * 10 ** (i - 2);
    const ws = randomFloats(rand, dim, 2);
    const X = floats(sdpa, [n, dim], xs), Wt = floats(sdpa, [dim], ws);
    const check = (got, eps, m, label) => {
      const ref = rmsNormRef(xs, ws, m, dim, eps);
      for (let i = 0; i < ref.length; i++) {
        if (!(Math.abs(got[i] - ref[i]) <= (dim / 4 + 10) * U * Math.abs(ref[i]))) assert.unreachable(`${label} dim ${dim}: [${i}] ${got[i]} vs ${ref[i]}`);
      }
    };
    for (const eps of [undefined, 0, 1e-6, 0.5]) {
      const out = sdpa.rmsNorm(X, Wt, eps === undefined ? undefined : { eps });
      check(out.data, eps ?? 1e-5, n, `eps ${eps}`);
      out.dispose();
    }
    // rows: the first 2 rows of a sentinel-filled out
    const O = floats(sdpa, [n, dim], new Float32Array(n * dim).fill(SENTINEL));
    sdpa.rmsNorm(X, Wt, { out: O, rows: 2 });
    check(O.data.subarray(0, 2 * dim), 1e-5, 2, 'rows 2');
    untouched(O.data.subarray(2 * dim), 'rmsNorm rows 2: the rows after');
    // in place
    assert.is(sdpa.rmsNorm(X, Wt, { out: X }), X);
    check(X.data, 1e-5, n, 'in place');
    for (const t of [X, Wt, O]) t.dispose();
  }
});

test('swiglu: silu(gate) * up, large |gate| included; in place on gate or up; length tails; `rows`', () => {
  const rand = rng(4);
  const big = [0, -0, 1e-30, -1e-30, 20, -20, 50, -50, 87, -87, 88.7, -88.7, 89, -89, 100, -100, 104, -104, 500, -500, 1e4, -1e4, 3e38, -3e38];
  for (const dims of [[1, 1], [3, 7], [2, 64], [5, 37], [1, 2, big.length]]) {
    const n = dims.reduce((a, b) => a * b, 1);
    const gs = randomFloats(rand, n, 12);
    if (dims[2] === big.length) gs.set(big);
    const us = randomFloats(rand, n, 3);
    const ref = swigluRef(gs, us);
    const check = (got, label, len = n) => {
      for (let i = 0; i < len; i++) {
        // float32 rounding of the exp, the division and two products: a few ulps; and e^g below
        // 2^-126 (g < -87.34) is flushed to 0, so silu(g) = g e^g (|.| < 104 * 2^-126 < 2^-119 down to
        // g = -104, where float32 ends) may come out 0
        const overflow = !Number.isFinite(Math.fround(ref[i]));   // (beyond float32: its Inf)
        if (overflow ? got[i] !== Math.fround(ref[i]) : !(Math.abs(got[i] - ref[i]) <= 8 * U * Math.abs(ref[i]) + 2 ** -119 * Math.abs(us[i]))) assert.unreachable(`${label} ${JSON.stringify(dims)}: [${i}] silu(${gs[i]}) * ${us[i]}: got ${got[i]}, want ${ref[i]}`);
      }
    };
    const G = floats(sdpa, dims, gs), Up = floats(sdpa, dims, us);
    const out = sdpa.swiglu(G, Up);
    assert.equal(out.dims, dims);
    check(out.data, 'out of place');
    const O = floats(sdpa, dims, new Float32Array(n).fill(SENTINEL));
    const rowLen = dims[dims.length - 1];
    if (n / rowLen > 1) {
      sdpa.swiglu(G, Up, { out: O, rows: 1 });
      check(O.data, 'rows 1', rowLen);
      untouched(O.data.subarray(rowLen), 'swiglu rows 1: the rows after');
    }
    assert.is(sdpa.swiglu(G, Up, { out: Up }), Up);
    check(Up.data, 'in place on up');
    Up.set(us);
    assert.is(sdpa.swiglu(G, Up, { out: G }), G);
    check(G.data, 'in place on gate');
    for (const t of [G, Up, O, out]) t.dispose();
  }
});

test('embed, every dtype: rows are the exact dequantized table rows; ids as Int32Array or array; a longer out gets its first rows', () => {
  const rand = rng(6);
  for (const dtype of DTYPES) {
    for (const dim of dtype.startsWith('q') ? [32, 96] : [1, 5, 8, 13, 64]) {
      const vocab = 11;
      const tb = randomWeightBytes(rand, dtype, vocab, dim);
      const T = weightTensor(sdpa, dtype, vocab, dim, tb);
      const values = dequantize(dtype, tb, vocab, dim);
      const ids = [0, 10, 3, 3, 7, 10, 1];
      const expectRows = (got, label) => {
        ids.forEach((id, i) => {
          for (let j = 0; j < dim; j++) {
            if (!Object.is(got[i * dim + j], values[id * dim + j])) assert.unreachable(`${dtype} ${label} dim ${dim}: row ${i} (id ${id}) [${j}] ${got[i * dim + j]} vs ${values[id * dim + j]}`);
          }
        });
      };
      const a = sdpa.embed(T, ids);
      assert.equal(a.dims, [ids.length, dim]);
      expectRows(a.data, 'array');
      const O = floats(sdpa, [ids.length + 3, dim], new Float32Array((ids.length + 3) * dim).fill(SENTINEL));
      assert.is(sdpa.embed(T, Int32Array.from(ids), { out: O }), O);
      expectRows(O.data, 'Int32Array into a longer out');
      untouched(O.data.subarray(ids.length * dim), 'embed: the rows after');
      for (const t of [T, a, O]) t.dispose();
    }
  }
});

// ---- bad input -----------------------------------------------------------

test('bad input: a typed SdpaError naming the call and the argument, and nothing written', () => {
  const rand = rng(8);
  const cols = 64, rows = 6;
  const W = weightTensor(sdpa, 'q8_0', rows, cols, randomWeightBytes(rand, 'q8_0', rows, cols));
  const X = floats(sdpa, [2, cols], randomFloats(rand, 2 * cols));
  const O = sdpa.allocTensor('float32', [2, rows]);
  const G = floats(sdpa, [2, cols], randomFloats(rand, 2 * cols)), Up = floats(sdpa, [2, cols], randomFloats(rand, 2 * cols));
  const GO = sdpa.allocTensor('float32', [2, cols]);
  const N = floats(sdpa, [cols], randomFloats(rand, cols));
  const T = weightTensor(sdpa, 'q4_0', 5, cols, randomWeightBytes(rand, 'q4_0', 5, cols));
  const EO = sdpa.allocTensor('float32', [2, cols]);
  const S = floats(sdpa, [rows, cols], randomFloats(rand, rows * cols));
  const Q = sdpa.allocTensor('q8_0', [rows, cols]);
  const outs = [O, GO, EO];
  const qBytes = bytesOf(Q);
  const xBytes = bytesOf(X);
  /** fn must throw code with a message starting with the call's name and matching `names`; no out changed. */
  const bad = (fn, code, call, names, label) => {
    for (const o of outs) o.data.fill(SENTINEL);
    const e = expectError(fn, code, [new RegExp(`^sdpa\\.${call}: `), ...names], label);
    assert.ok(e instanceof SdpaError);
    for (const o of outs) untouched(o.data, `${label}: out`);
    assert.equal(bytesOf(Q), qBytes, `${label}: quantize's out`);
    assert.equal(bytesOf(X), xBytes, `${label}: x`);
  };
  const plain = { data: new Float32Array(2 * cols), dims: [2, cols] };
  const x33 = floats(sdpa, [2, 33], new Float32Array(66));
  const f16x = sdpa.allocTensor('float16', [2, cols]);
  const gone = sdpa.allocTensor('float32', [2, cols]); gone.dispose();
  const goneW = sdpa.allocTensor('q8_0', [rows, cols]); goneW.dispose();

  // linear
  bad(() => sdpa.linear(x33, W, { out: O }), 'E_DIMS', 'linear', [/x has dims \[2, 33\]/, /weight \[6, 64\] takes rows of 64/], 'x cols != weight cols');
  bad(() => sdpa.linear(X, W, { out: EO }), 'E_DIMS', 'linear', [/out has dims \[2, 64\]/, /then 6/], 'out of the wrong size');
  bad(() => sdpa.linear(plain, W, { out: O }), 'E_ARG', 'linear', [/x must be a heap tensor/, /Float32Array/], 'x a plain Float32Array');
  bad(() => sdpa.linear(new Float32Array(cols), W, { out: O }), 'E_ARG', 'linear', [/x must be a tensor object/], 'x a bare Float32Array');
  bad(() => sdpa.linear(X, W, { out: plain }), 'E_ARG', 'linear', [/out must be a heap tensor/], 'out a plain Float32Array');
  bad(() => sdpa.linear(gone, W, { out: O }), 'E_DISPOSED', 'linear', [/x is a disposed heap tensor/], 'x disposed');
  bad(() => sdpa.linear(X, goneW, { out: O }), 'E_DISPOSED', 'linear', [/weight is a disposed heap tensor/], 'weight disposed');
  bad(() => sdpa.linear(X, W, { out: { data: X.data.subarray(cols, cols + 2 * rows), dims: [2, rows] } }), 'E_ARG', 'linear', [/out shares memory with x/], 'out overlapping x');
  bad(() => sdpa.linear(X, W, { out: O, acumulate: true }), 'E_ARG', 'linear', [/unknown option 'acumulate'/], 'unknown option');
  bad(() => sdpa.linear(X, W, { out: O, rows: 3 }), 'E_DIMS', 'linear', [/options\.rows is 3 but x holds 2 rows/], 'rows > x rows');
  bad(() => sdpa.linear(X, W, { out: { data: O.data.subarray(0, rows), dims: [1, rows] }, rows: 2 }), 'E_DIMS', 'linear', [/options\.rows is 2 but out holds 1 rows/], 'rows > out rows');
  bad(() => sdpa.linear(X, W, { out: O, rows: 0 }), 'E_ARG', 'linear', [/options\.rows is (number )?0; expected a positive integer/], 'rows 0');
  bad(() => sdpa.linear(X, W, { out: O, accumulate: 1 }), 'E_ARG', 'linear', [/options\.accumulate must be a boolean/], 'accumulate 1');
  for (const [v, shown] of [['int8', /the string "int8"/], ['INT16', /the string "INT16"/], ['float16', /the string "float16"/], [16, /number 16/], [null, /null/], [true, /boolean true/]]) {
    bad(() => sdpa.linear(X, W, { out: O, activations: v }), 'E_ARG', 'linear', [/options\.activations must be 'float32' or 'int16', got /, shown], `activations ${String(v)}`);
  }
  bad(() => sdpa.linear(x33, W, { out: O, activations: 'int16' }), 'E_DIMS', 'linear', [/x has dims \[2, 33\]/], 'int16: x cols != weight cols');
  bad(() => sdpa.linear(f16x, W, { out: O }), 'E_DTYPE', 'linear', [/x has dtype float16 \(\d+\); expected float32/], 'x float16');
  bad(() => sdpa.linear(X, W, { out: Q }), 'E_DIMS', 'linear', [/out has dims \[6, 64\]/], 'out q8_0 of the wrong dims');
  bad(() => sdpa.linear(X, N, { out: O }), 'E_RANK', 'linear', [/weight has rank 1/], 'weight rank 1');
  // rmsNorm
  bad(() => sdpa.rmsNorm(G, floats(sdpa, [cols - 1], new Float32Array(cols - 1)), { out: GO }), 'E_DIMS', 'rmsNorm', [/weight has dims \[63\]; expected \[64\]/], 'rmsNorm weight dims');
  bad(() => sdpa.rmsNorm(G, N, { out: GO, eps: -1 }), 'E_ARG', 'rmsNorm', [/eps is -1/], 'eps < 0');
  bad(() => sdpa.rmsNorm(G, N, { out: GO, eps: '1e-5' }), 'E_ARG', 'rmsNorm', [/options\.eps must be a number/], 'eps a string');
  bad(() => sdpa.rmsNorm(G, N, { out: { data: G.data.subarray(1, 1 + 2 * cols), dims: [2, cols] } }), 'E_ARG', 'rmsNorm', [/out shares memory with x; expected out to be that tensor itself/], 'rmsNorm out overlapping x');
  bad(() => sdpa.rmsNorm(G, N, { out: GO, epsilon: 1 }), 'E_ARG', 'rmsNorm', [/unknown option 'epsilon'/], 'rmsNorm unknown option');
  bad(() => sdpa.rmsNorm(G, N, { out: GO, rows: 5 }), 'E_DIMS', 'rmsNorm', [/options\.rows is 5 but x holds 2 rows/], 'rmsNorm rows');
  bad(() => sdpa.rmsNorm(G, W, { out: GO }), 'E_RANK', 'rmsNorm', [/weight has rank 2/], 'rmsNorm weight q8_0 [6, 64]');
  // swiglu
  bad(() => sdpa.swiglu(G, x33, { out: GO }), 'E_DIMS', 'swiglu', [/up has dims \[2, 33\]/], 'swiglu up dims');
  bad(() => sdpa.swiglu(G, Up, { out: { data: Up.data.subarray(3, 3 + 2 * cols), dims: [2, cols] } }), 'E_ARG', 'swiglu', [/out shares memory with up/], 'swiglu out overlapping up');
  bad(() => sdpa.swiglu(G, gone, { out: GO }), 'E_DISPOSED', 'swiglu', [/up is a disposed heap tensor/], 'swiglu up disposed');
  bad(() => sdpa.swiglu(G, Up, { out: GO, in_place: true }), 'E_ARG', 'swiglu', [/unknown option 'in_place'/], 'swiglu unknown option');
  bad(() => sdpa.swiglu(plain, Up, { out: GO }), 'E_ARG', 'swiglu', [/gate must be a heap tensor/], 'swiglu gate plain');
  // embed
  bad(() => sdpa.embed(T, [0, 5], { out: EO }), 'E_ARG', 'embed', [/ids\[1\] is 5; expected a row of table, 0 \.\. 4/], 'id = vocab');
  bad(() => sdpa.embed(T, Int32Array.of(-1, 0), { out: EO }), 'E_ARG', 'embed', [/ids\[0\] is -1/], 'id -1');
  bad(() => sdpa.embed(T, [0, 1.5], { out: EO }), 'E_ARG', 'embed', [/ids\[1\] is (number )?1\.5/], 'id 1.5');
  bad(() => sdpa.embed(T, 'ab', { out: EO }), 'E_ARG', 'embed', [/ids must be an Int32Array or an array/], 'ids a string');
  bad(() => sdpa.embed(T, [0, 1, 2], { out: EO }), 'E_DIMS', 'embed', [/out has dims \[2, 64\]; expected \[3, 64\]/], 'more ids than out rows');
  bad(() => sdpa.embed(T, [0], { out: EO, rows: 1 }), 'E_ARG', 'embed', [/unknown option 'rows'/], 'embed unknown option');
  bad(() => sdpa.embed(x33, [0], { out: EO }), 'E_DIMS', 'embed', [/out has dims/], 'embed table dims vs out');
  bad(() => sdpa.embed(T, [0], { out: f16x }), 'E_DTYPE', 'embed', [/out has dtype float16 \(\d+\); expected float32/], 'embed out float16');
  // quantize
  bad(() => sdpa.quantize(S, sdpa.allocTensor('q8_0', [rows - 1, cols])), 'E_DIMS', 'quantize', [/out has dims \[5, 64\]; expected source's \[6, 64\]/], 'quantize dims');
  bad(() => sdpa.quantize(S), 'E_ARG', 'quantize', [/out is missing/], 'quantize no out');
  bad(() => sdpa.quantize(f16x, sdpa.allocTensor('q8_0', [2, cols])), 'E_DTYPE', 'quantize', [/source has dtype float16 \(\d+\); expected float32/], 'quantize source float16');
  bad(() => sdpa.quantize(S, goneW), 'E_DISPOSED', 'quantize', [/out is a disposed heap tensor/], 'quantize out disposed');
  bad(() => sdpa.quantize({ data: new Float32Array(rows * cols), dims: [rows, cols] }, Q), 'E_ARG', 'quantize', [/source must be a heap tensor/], 'quantize source plain');
  // another instance's tensor
  const other = sdpa2.allocTensor('float32', [2, cols]);
  bad(() => sdpa.linear(other, W, { out: O }), 'E_ARG', 'linear', [/x is a heap tensor of another sdpa instance/], 'x of another instance');
  other.dispose();
});

test('options some script put on Object.prototype are not options of the dense calls', () => {
  const W = floats(sdpa, [2, 32], Float32Array.from({ length: 64 }, (_, i) => (i % 7) - 3));
  const X = floats(sdpa, [2, 32], Float32Array.from({ length: 64 }, (_, i) => (i % 5) - 2));
  const want = new Float64Array(4);
  for (let r = 0; r < 2; r++) for (let o = 0; o < 2; o++) for (let j = 0; j < 32; j++) want[r * 2 + o] += W.data[o * 32 + j] * X.data[r * 32 + j];
  const O = floats(sdpa, [2, 2], [100, 100, 100, 100]), N = floats(sdpa, [2, 32], new Float32Array(64).fill(7));
  const ones = floats(sdpa, [32], new Float32Array(32).fill(1));
  /** Runs f with the names of `names` on Object.prototype (each call's own names: the options it reads). */
  const polluted = (names, f) => {
    for (const [k, v] of Object.entries(names)) Object.prototype[k] = v; // eslint-disable-line no-extend-native
    try { f(); } finally { for (const k of Object.keys(names)) delete Object.prototype[k]; }
  };
  polluted({ accumulate: true, rows: 1 }, () => {
    assert.is(sdpa.linear(X, W, { out: O }), O);
    assert.equal(Array.from(O.data), Array.from(want), 'linear: not accumulated, both rows written');
  });
  polluted({ eps: 1e6, rows: 1 }, () => sdpa.rmsNorm(X, ones, { out: N }));
  for (const i of [1, 33]) {
    let ss = 0;
    for (let j = 0; j < 32; j++) ss += X.data[(i >> 5) * 32 + j] ** 2;
    const ref = X.data[i] / Math.sqrt(ss / 32 + 1e-5);
    assert.ok(Math.abs(N.data[i] - ref) <= 1e-5 * (1 + Math.abs(ref)), `rmsNorm: element ${i} is ${N.data[i]}, expected ${ref} (the default eps, every row)`);
  }
  for (const t of [W, X, O, N, ones]) t.dispose();
});

test('a disposed instance: E_DISPOSED from every dense call', async () => {
  const s = await createSdpa({ threads: 1 });
  const X = s.allocTensor('float32', [1, 32]), W = s.allocTensor('q4_0', [2, 32]), Nw = s.allocTensor('float32', [32]);
  s.dispose();
  expectError(() => s.linear(X, W), 'E_DISPOSED', [/^sdpa\.linear: /, /disposed/]);
  expectError(() => s.rmsNorm(X, Nw), 'E_DISPOSED', [/^sdpa\.rmsNorm: /, /disposed/]);
  expectError(() => s.swiglu(X, X), 'E_DISPOSED', [/^sdpa\.swiglu: /, /disposed/]);
  expectError(() => s.embed(W, [0]), 'E_DISPOSED', [/^sdpa\.embed: /, /disposed/]);
  expectError(() => s.quantize(X, W), 'E_DISPOSED', [/^sdpa\.quantize: /, /disposed/]);
  expectError(() => s.allocTensor('q8_0', [1, 32]), 'E_DISPOSED', [/^allocTensor: /, /disposed/]);
});

// ---- allocation ------------------------------------------------------------

test('a decode-shaped embed / rmsNorm / linear / swiglu loop allocates nothing in wasm memory', async () => {
  // A fresh instance whose heap is exhausted after the first step: a later step that allocated
  // anything (from JS or from C, even freed again within the step) would fail with E_OOM
  const s = await createSdpa({ threads: 2 });
  const { M, core } = s[INTERNALS];
  const rand = rng(12);
  const dim = 256, hidden = 640, vocab = 96;
  const emb = weightTensor(s, 'q8_0', vocab, dim, randomWeightBytes(rand, 'q8_0', vocab, dim));
  const norm = floats(s, [dim], randomFloats(rand, dim));
  const w1 = weightTensor(s, 'q4_0', hidden, dim, randomWeightBytes(rand, 'q4_0', hidden, dim));
  const w3 = weightTensor(s, 'float16', hidden, dim, randomWeightBytes(rand, 'float16', hidden, dim));
  const w2 = weightTensor(s, 'float32', dim, hidden, randomWeightBytes(rand, 'float32', dim, hidden));
  const x = s.allocTensor('float32', [4, dim]), xb = s.allocTensor('float32', [4, dim]);
  const hb = s.allocTensor('float32', [4, hidden]), hb2 = s.allocTensor('float32', [4, hidden]);
  const ids = new Int32Array(1);
  // (the options objects made once, as a model makes them once per row count)
  const o = {
    embed: { out: x }, norm: { out: xb, eps: 1e-5, rows: 1 }, h1: { out: hb, rows: 1 }, h3: { out: hb2, rows: 1 },
    gate: { out: hb, rows: 1 }, res: { out: x, accumulate: true, rows: 1 },
  };
  const step = (i) => {
    ids[0] = i % vocab;
    s.embed(emb, ids, o.embed);
    s.rmsNorm(x, norm, o.norm);
    s.linear(xb, w1, o.h1);
    s.linear(xb, w3, o.h3);
    s.swiglu(hb, hb2, o.gate);
    s.linear(hb, w2, o.res);
  };
  step(0);                      // (the first embed makes the ids block)
  const held = [];
  for (let size = 1 << 30; size >= 8;) {
    const p = M._malloc(size) >>> 0;
    if (p) held.push(p); else size >>>= 1;
  }
  assert.is(M._malloc(8), 0, 'the heap is exhausted');
  const bytes0 = core.heapBytes();
  let mallocs = 0;
  const real = M._malloc;
  M._malloc = (n) => { mallocs++; return real(n); };
  try {
    for (let i = 1; i <= 200; i++) step(i);
  } finally {
    M._malloc = real;
    for (const p of held) M._free(p);
  }
  assert.is(mallocs, 0, 'no malloc');
  assert.is(core.heapBytes(), bytes0, 'no memory growth');
  assert.ok(x.data.subarray(0, dim).every(Number.isFinite), 'finite results');
  s.dispose();
});

// ---- the k-quants: q4_k, q6_k ------------------------------------------------
//
// Their float64 dequantizer, written here from ggml's block_q4_K / block_q6_K
// (ggml-common.h) and dequantize_row_q4_K / _q6_K (ggml-quants.c), value by
// value. Tolerance as linear's (cols / 4 + 10) u, against q4_k's magnitude
// |d sc q| + |dmin m| per value (the kernel scales a sub-block's products and
// subtracts its mins apart: the two terms, not their difference, round).

const K_DTYPES = ['q4_k', 'q6_k'];
const K_BYTES = { q4_k: 144, q6_k: 210 };

/** ggml's get_scale_min_k4: sub-block s's 6-bit scale and min from the 12 bytes at `at`. */
function scaleMinK4(bytes, at, s) {
  if (s < 4) return [bytes[at + s] & 63, bytes[at + s + 4] & 63];
  return [(bytes[at + s + 4] & 15) | ((bytes[at + s - 4] >> 6) << 4), (bytes[at + s + 4] >> 4) | ((bytes[at + s] >> 6) << 4)];
}

/**
 * { values, mags } of a [rows, cols] k-quant weight, Float64Arrays. `wrong`
 * misreads the layout (a test of the tests): 'nibbles' takes q4_k's high
 * nibble for the low one, 'high' q6_k's two high bits from the wrong pair.
 */
function kDequantize(dtype, bytes, rows, cols, wrong = null) {
  const values = new Float64Array(rows * cols), mags = new Float64Array(rows * cols);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const nb = cols / 256, bb = K_BYTES[dtype];
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const at = (r * nb + b) * bb, o = r * cols + b * 256;
      if (dtype === 'q4_k') {
        const d = halfToNumber(dv.getUint16(at, true)), dmin = halfToNumber(dv.getUint16(at + 2, true));
        for (let j = 0; j < 256; j++) {
          const [sc, m] = scaleMinK4(bytes, at + 4, j >> 5);
          const byte = bytes[at + 16 + 32 * (j >> 6) + (j & 31)];
          const high = (j & 63) >= 32;
          const q = (wrong === 'nibbles' ? !high : high) ? byte >> 4 : byte & 15;
          values[o + j] = d * sc * q - dmin * m;
          mags[o + j] = Math.abs(d * sc * q) + Math.abs(dmin * m);
        }
      } else {
        const d = halfToNumber(dv.getUint16(at + 208, true));
        for (let j = 0; j < 256; j++) {
          const h = j >> 7, l = j & 31, k = (j & 127) >> 5;
          const lb = bytes[at + 64 * h + l + 32 * (k & 1)];
          const low = k < 2 ? lb & 15 : lb >> 4;
          const shift = wrong === 'high' ? 2 * (3 - k) : 2 * k;
          const hi = (bytes[at + 128 + 32 * h + l] >> shift) & 3;
          const sc = dv.getInt8(at + 192 + (j >> 4));
          values[o + j] = d * sc * ((low | (hi << 4)) - 32);
          mags[o + j] = Math.abs(values[o + j]);
        }
      }
    }
  }
  return { values, mags };
}

/** Random bytes of a valid k-quant weight: sane float16 scales, every other byte random. */
function randomKBytes(rand, dtype, rows, cols) {
  const b = new Uint8Array(rows * (cols / 256) * K_BYTES[dtype]);
  for (let i = 0; i < b.length; i++) b[i] = Math.floor(rand() * 256);
  const dv = new DataView(b.buffer);
  for (let k = 0; k < b.length / K_BYTES[dtype]; k++) {
    const at = k * K_BYTES[dtype];
    if (dtype === 'q4_k') {
      dv.setUint16(at, numberToHalf(Math.fround(0.0005 + rand() * 0.004)), true);
      dv.setUint16(at + 2, numberToHalf(Math.fround(0.0005 + rand() * 0.01)), true);
    } else {
      dv.setUint16(at + 208, numberToHalf(Math.fround((rand() < 0.5 ? -1 : 1) * (0.00005 + rand() * 0.0005))), true);
    }
  }
  return b;
}

/** The float64 product over values, with |w| |x| magnitudes from mags: { y, mag }. */
function kLinearRef(xs, { values, mags }, n, cols, rows, prior = null) {
  const y = new Float64Array(n * rows), mag = new Float64Array(n * rows);
  for (let i = 0; i < n; i++) {
    for (let o = 0; o < rows; o++) {
      let s = prior ? prior[i * rows + o] : 0, m = Math.abs(s);
      for (let j = 0; j < cols; j++) {
        const x = xs[i * cols + j];
        s += values[o * cols + j] * x;
        m += mags[o * cols + j] * Math.abs(x);
      }
      y[i * rows + o] = s;
      mag[i * rows + o] = m;
    }
  }
  return { y, mag };
}

test('q4_k / q6_k heap tensors: block bytes (144 / 210 per 256 values), setBytes round-trips; rows not whole blocks of 256: E_DIMS', () => {
  const rand = rng(31);
  for (const dtype of K_DTYPES) {
    const t = sdpa.allocTensor(dtype, [3, 512]);
    assert.is(t.dtype, dtype);
    assert.is(t.length, 3 * 512);
    assert.is(t.byteLength, 3 * 2 * K_BYTES[dtype]);
    assert.ok(t.data instanceof Uint8Array);
    const b = randomKBytes(rand, dtype, 3, 512);
    t.setBytes(b.subarray(0, 100));
    t.setBytes(b.subarray(100), 100);
    assert.equal(bytesOf(t), b, `${dtype}: setBytes in two pieces`);
    t.dispose();
    for (const cols of [32, 288, 100]) {
      expectError(() => sdpa.allocTensor(dtype, [2, cols]), 'E_DIMS', [/^allocTensor: /, new RegExp(dtype), new RegExp(`multiple of 256, got ${cols}`)]);
    }
  }
});

test('linear, q4_k / q6_k: n = 1 and n > 1, ranks 1 to 3, accumulate, rows (float64 dequantization written here); a misread layout is far outside the bound', () => {
  const rand = rng(4242);
  const worst = {};
  for (const dtype of K_DTYPES) {
    let w = 0;
    for (const cols of [256, 512, 768]) {
      for (const rows of [1, 3, 4, 5, 17, 33]) {
        for (const xDims of [[cols], [1, cols], [2, cols], [5, cols], [2, 3, cols], [67, cols]]) {
          const n = xDims.slice(0, -1).reduce((a, b) => a * b, 1);
          const wb = randomKBytes(rand, dtype, rows, cols);
          const W = weightTensor(sdpa, dtype, rows, cols, wb);
          const xs = randomFloats(rand, n * cols, 2);
          const X = floats(sdpa, xDims, xs);
          const prior = randomFloats(rand, n * rows, 3);
          const accumulate = (rows + n) % 2 === 1;
          const O = floats(sdpa, [...xDims.slice(0, -1), rows], prior);
          assert.is(sdpa.linear(X, W, { out: O, accumulate }), O);
          const deq = kDequantize(dtype, wb, rows, cols);
          const { y, mag } = kLinearRef(xs, deq, n, cols, rows, accumulate ? prior : null);
          w = Math.max(w, assertProduct(O.data, y, mag, cols, `${dtype} [${rows}, ${cols}] x ${JSON.stringify(xDims)}${accumulate ? ' accumulate' : ''}`));
          if (n >= 5) {  // rows: the first 2 only, the rest untouched
            const P = floats(sdpa, [n, rows], new Float32Array(n * rows).fill(SENTINEL));
            sdpa.linear({ data: X.data, dims: [n, cols] }, W, { out: P, rows: 2 });
            const r2 = kLinearRef(xs, deq, 2, cols, rows);
            assertProduct(P.data.subarray(0, 2 * rows), r2.y, r2.mag, cols, `${dtype} rows 2`);
            untouched(P.data.subarray(2 * rows), `${dtype} rows 2: the rows after`);
            P.dispose();
          }
          for (const t of [W, X, O]) t.dispose();
        }
      }
    }
    worst[dtype] = w;
  }
  for (const d of K_DTYPES) assert.ok(worst[d] < 8, `${d}: worst ${worst[d]}`);
  // the tests' own check: the layout misread gives errors far outside the bound
  for (const [dtype, wrong] of [['q4_k', 'nibbles'], ['q6_k', 'high']]) {
    const rows = 8, cols = 512;
    const wb = randomKBytes(rand, dtype, rows, cols);
    const W = weightTensor(sdpa, dtype, rows, cols, wb);
    const xs = randomFloats(rand, cols, 2);
    const X = floats(sdpa, [cols], xs);
    const got = sdpa.linear(X, W);
    const { y, mag } = kLinearRef(xs, kDequantize(dtype, wb, rows, cols, wrong), 1, cols, rows);
    let far = 0;
    for (let o = 0; o < rows; o++) far = Math.max(far, Math.abs(got.data[o] - y[o]) / (U * mag[o]));
    assert.ok(far > 1000, `${dtype} read with ${wrong} wrong: ${far} u from the library's result (expected far outside cols / 4 + 10)`);
    for (const t of [W, X, got]) t.dispose();
  }
});

test('linear, q4_k / q6_k: 1 and 2 threads the same bits (1536x768, n = 1 and 70); row i of 70 equals a one-row call; activations int16 changes no bit', () => {
  assert.is(sdpa2.info.threads, 2);
  const rand = rng(77);
  const rows = 1536, cols = 768, n = 70;
  const xs = randomFloats(rand, n * cols);
  for (const dtype of K_DTYPES) {
    const wb = randomKBytes(rand, dtype, rows, cols);
    const got = [sdpa, sdpa2].map((s) => {
      const W = weightTensor(s, dtype, rows, cols, wb);
      const X = floats(s, [n, cols], xs);
      const many = s.linear(X, W);
      const manyInt16 = s.linear(X, W, { activations: 'int16' });
      assert.ok(sameBits(many.data, manyInt16.data), `${dtype}: activations int16 has no effect`);
      const one = s.linear({ data: X.data.subarray(0, cols), dims: [1, cols] }, W);
      const row = s.allocTensor('float32', [1, rows]);
      for (let i = 0; i < n; i += 3) {
        s.linear({ data: X.data.subarray(i * cols, (i + 1) * cols), dims: [1, cols] }, W, { out: row });
        if (!sameBits(row.data, many.data.subarray(i * rows, (i + 1) * rows))) assert.unreachable(`${dtype}, ${s.info.threads} threads: row ${i} of ${n} differs from a one-row call`);
      }
      const r = { many: many.data.slice(), one: one.data.slice() };
      for (const t of [W, X, many, manyInt16, one, row]) t.dispose();
      return r;
    });
    assert.ok(sameBits(got[0].one, got[1].one), `${dtype}: n = 1, 1 vs 2 threads`);
    assert.ok(sameBits(got[0].many, got[1].many), `${dtype}: n = ${n}, 1 vs 2 threads`);
    const deq = kDequantize(dtype, wb, rows, cols);
    for (const i of [0, 69]) {
      const { y, mag } = kLinearRef(xs.subarray(i * cols, (i + 1) * cols), deq, 1, cols, rows);
      assertProduct(got[1].many.subarray(i * rows, (i + 1) * rows), y, mag, cols, `${dtype} 1536x768 row ${i}`);
    }
  }
});

test('embed, q4_k / q6_k: the exact dequantized rows; a NaN scale reaches its own row only', () => {
  const rand = rng(15);
  for (const dtype of K_DTYPES) {
    const vocab = 12, dim = 512;
    const wb = randomKBytes(rand, dtype, vocab, dim);
    new DataView(wb.buffer).setUint16(5 * 2 * K_BYTES[dtype] + (dtype === 'q4_k' ? 2 : 208), 0x7e00, true);  // row 5, block 0: NaN dmin / d
    const T = weightTensor(sdpa, dtype, vocab, dim, wb);
    const ids = [0, 11, 5, 3, 5, 7];
    const O = sdpa.embed(T, ids);
    assert.equal(O.dims, [ids.length, dim]);
    const { values } = kDequantize(dtype, wb, vocab, dim);
    for (let i = 0; i < ids.length; i++) {
      for (let j = 0; j < dim; j++) {
        const want = Math.fround(values[ids[i] * dim + j]), got = O.data[i * dim + j];
        if (ids[i] === 5 && j < 256) {
          if (!Number.isNaN(got)) assert.unreachable(`${dtype}: row 5 value ${j} = ${got}, expected NaN`);
        } else if (!Object.is(got, want)) {
          assert.unreachable(`${dtype}: out[${i}][${j}] (table row ${ids[i]}) = ${got}, expected ${want}`);
        }
      }
    }
    // the NaN reaches only outputs of row 5 in a product too
    const xs = randomFloats(rand, dim);
    const X = floats(sdpa, [dim], xs);
    const Y = sdpa.linear(X, T);
    for (let o = 0; o < vocab; o++) assert.is(Number.isNaN(Y.data[o]), o === 5, `${dtype}: linear output ${o}`);
    for (const t of [T, O, X, Y]) t.dispose();
  }
});

test('bad input, q4_k / q6_k: quantize to them (E_DTYPE), x of the wrong cols, embed out dims and ids; nothing written', () => {
  const rand = rng(16);
  for (const dtype of K_DTYPES) {
    const W = weightTensor(sdpa, dtype, 4, 512, randomKBytes(rand, dtype, 4, 512));
    const X = floats(sdpa, [2, 256], randomFloats(rand, 512));
    const O = floats(sdpa, [2, 4], new Float32Array(8).fill(SENTINEL));
    const S = floats(sdpa, [4, 512], randomFloats(rand, 2048));
    const before = bytesOf(W);
    expectError(() => sdpa.linear(X, W, { out: O }), 'E_DIMS', [/^sdpa\.linear: /, /x has dims \[2, 256\]/, new RegExp(`weight \\[4, 512\\] takes rows of 512`)]);
    untouched(O.data, `${dtype}: linear's out`);
    expectError(() => sdpa.quantize(S, W), 'E_DTYPE', [/^sdpa\.quantize: /, new RegExp(`out has dtype ${dtype} \\(\\d+\\)`), /not offered/]);
    assert.equal(bytesOf(W), before, `${dtype}: quantize wrote nothing`);
    const E = floats(sdpa, [1, 256], new Float32Array(256).fill(SENTINEL));
    expectError(() => sdpa.embed(W, [0], { out: E }), 'E_DIMS', [/^sdpa\.embed: /, /out has dims \[1, 256\]; expected \[1, 512\]/]);
    expectError(() => sdpa.embed(W, [4], { out: E }), 'E_ARG', [/^sdpa\.embed: /, /ids\[0\] is 4; expected a row of table, 0 \.\. 3/]);
    untouched(E.data, `${dtype}: embed's out`);
    for (const t of [W, X, O, S, E]) t.dispose();
  }
});

// ---- q5_0 ---------------------------------------------------------------------
//
// Its float64 dequantizer, written here from ggml's block_q5_0 (ggml-common.h)
// and dequantize_row_q5_0: per 32 values a float16 d, a little-endian uint32
// qh (bit j: value j's fifth bit), 16 bytes of nibbles as q4_0's; value
// d (q - 16). `wrong` reads the fifth bits of values 16-31 from qh's low half
// (a test of the tests).

function q5Dequantize(bytes, rows, cols, wrong = false) {
  const out = new Float64Array(rows * cols);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const nb = cols / 32;
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const at = (r * nb + b) * 22, o = r * cols + b * 32;
      const d = halfToNumber(dv.getUint16(at, true)), qh = dv.getUint32(at + 2, true);
      for (let j = 0; j < 32; j++) {
        const low = j < 16 ? bytes[at + 6 + j] & 15 : bytes[at + 6 + j - 16] >> 4;
        const bit = (qh >>> (wrong ? j & 15 : j)) & 1;
        out[o + j] = d * ((low | (bit << 4)) - 16);
      }
    }
  }
  return out;
}

/** Random q5_0 bytes: every byte random, then sane float16 scales (about 2^-10 .. 2^1, either sign). */
function randomQ5Bytes(rand, rows, cols) {
  const b = new Uint8Array(rows * (cols / 32) * 22);
  for (let i = 0; i < b.length; i++) b[i] = Math.floor(rand() * 256);
  const dv = new DataView(b.buffer);
  for (let k = 0; k < b.length / 22; k++) dv.setUint16(k * 22, (rand() < 0.5 ? 0x8000 : 0) | ((5 + Math.floor(rand() * 11)) << 10) | Math.floor(rand() * 1024), true);
  return b;
}

test('q5_0: heap tensors (22 bytes per 32 values); linear (n = 1 and n > 1, ranks, accumulate) and int16 activations within their bounds; embed exact; quantize to it E_DTYPE; a misread layout far outside the bound', () => {
  const rand = rng(5050);
  const t = sdpa.allocTensor('q5_0', [3, 64]);
  assert.is(t.byteLength, 3 * 2 * 22);
  assert.ok(t.data instanceof Uint8Array);
  t.dispose();
  expectError(() => sdpa.allocTensor('q5_0', [2, 48]), 'E_DIMS', [/^allocTensor: /, /q5_0/, /multiple of 32, got 48/]);
  let worst = 0, worstInt16 = 0;
  for (const cols of [32, 96, 576]) {
    for (const rows of [1, 3, 4, 17, 33]) {
      for (const xDims of [[cols], [2, cols], [5, cols], [2, 3, cols], [67, cols]]) {
        const n = xDims.slice(0, -1).reduce((a, b) => a * b, 1);
        const wb = randomQ5Bytes(rand, rows, cols);
        const W = weightTensor(sdpa, 'q5_0', rows, cols, wb);
        const wv = q5Dequantize(wb, rows, cols);
        const xs = blockyFloats(rand, n, cols);
        const X = floats(sdpa, xDims, xs);
        const prior = randomFloats(rand, n * rows, 3);
        const accumulate = (rows + n) % 2 === 1;
        const outDims = [...xDims.slice(0, -1), rows];
        const O = floats(sdpa, outDims, prior), Q = floats(sdpa, outDims, prior);
        sdpa.linear(X, W, { out: O, accumulate });
        const { y, mag } = linearRef(xs, wv, n, cols, rows, accumulate ? prior : null);
        const label = `q5_0 [${rows}, ${cols}] x ${JSON.stringify(xDims)}${accumulate ? ' accumulate' : ''}`;
        worst = Math.max(worst, assertProduct(O.data, y, mag, cols, label));
        sdpa.linear(X, W, { out: Q, accumulate, activations: 'int16' });
        worstInt16 = Math.max(worstInt16, assertInt16(Q.data, int16Ref(xs, wv, n, cols, rows, accumulate ? prior : null), `${label} int16`));
        for (const x of [W, X, O, Q]) x.dispose();
      }
    }
  }
  assert.ok(worst < 8, `q5_0: worst ${worst} u`);
  assert.ok(worstInt16 < 1, `q5_0 int16: worst ${worstInt16} of the bound`);
  // the test's own check: the fifth bits misread are far outside the bound
  {
    const rows = 8, cols = 96, wb = randomQ5Bytes(rand, rows, cols);
    const W = weightTensor(sdpa, 'q5_0', rows, cols, wb), xs = randomFloats(rand, cols, 2), X = floats(sdpa, [cols], xs);
    const got = sdpa.linear(X, W);
    const { y, mag } = linearRef(xs, q5Dequantize(wb, rows, cols, true), 1, cols, rows);
    let far = 0;
    for (let o = 0; o < rows; o++) far = Math.max(far, Math.abs(got.data[o] - y[o]) / (U * mag[o]));
    assert.ok(far > 1000, `q5_0 read with the fifth bits wrong: ${far} u from the library's result`);
    for (const x of [W, X, got]) x.dispose();
  }
  // embed: the exact dequantized rows
  const vocab = 9, dim = 96, tb = randomQ5Bytes(rand, vocab, dim);
  const T = weightTensor(sdpa, 'q5_0', vocab, dim, tb), ids = [0, 8, 3, 3, 5];
  const E = sdpa.embed(T, ids), tv = q5Dequantize(tb, vocab, dim);
  for (let i = 0; i < ids.length; i++) {
    for (let j = 0; j < dim; j++) {
      if (!Object.is(E.data[i * dim + j], Math.fround(tv[ids[i] * dim + j]))) assert.unreachable(`q5_0 embed out[${i}][${j}] = ${E.data[i * dim + j]}, expected ${tv[ids[i] * dim + j]}`);
    }
  }
  // quantize to q5_0: refused, nothing written
  const S = floats(sdpa, [vocab, dim], randomFloats(rand, vocab * dim));
  expectError(() => sdpa.quantize(S, T), 'E_DTYPE', [/^sdpa\.quantize: /, /out has dtype q5_0 \(\d+\)/, /not offered/]);
  assert.equal(bytesOf(T), tb, 'quantize wrote nothing');
  for (const x of [T, E, S]) x.dispose();
});

test('linear, q5_0: 1 and 2 threads the same bits (1536x576, n = 1 and 70, float32 and int16 activations); row i of 70 equals a one-row call', () => {
  const rand = rng(55);
  const rows = 1536, cols = 576, n = 70;
  const xs = randomFloats(rand, n * cols), wb = randomQ5Bytes(rand, rows, cols);
  for (const activations of ['float32', 'int16']) {
    const got = [sdpa, sdpa2].map((s) => {
      const W = weightTensor(s, 'q5_0', rows, cols, wb), X = floats(s, [n, cols], xs);
      const many = s.linear(X, W, { activations });
      const row = s.allocTensor('float32', [1, rows]);
      for (let i = 0; i < n; i += 3) {
        s.linear({ data: X.data.subarray(i * cols, (i + 1) * cols), dims: [1, cols] }, W, { out: row, activations });
        if (!sameBits(row.data, many.data.subarray(i * rows, (i + 1) * rows))) assert.unreachable(`q5_0 ${activations}, ${s.info.threads} threads: row ${i} differs from a one-row call`);
      }
      const r = many.data.slice();
      for (const x of [W, X, many, row]) x.dispose();
      return r;
    });
    assert.ok(sameBits(got[0], got[1]), `q5_0 ${activations}: 1 vs 2 threads`);
  }
});

test.run();
