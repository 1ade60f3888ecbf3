// helpers.js: seeded random tensors, tolerance checks, error expectations.
import * as assert from 'uvu/assert';
import { SdpaError } from '../../js/index.js';

/** mulberry32: a small seeded PRNG returning floats in [0, 1). */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A float32 tensor { data, dims } with uniform values in [-amp, amp). */
export function randTensor(rand, dims, amp = 1) {
  const n = dims.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = (rand() * 2 - 1) * amp;
  return { data, dims: dims.slice() };
}

export const randInt = (rand, lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

/** A float32 tensor { data, dims } with every element `fill`. */
export const filled = (dims, fill = 0.5) => ({ data: new Float32Array(dims.reduce((a, b) => a * b, 1)).fill(fill), dims });

/**
 * The rule tests' customSdpa geometry (B=1 Sq=2 Hq=4 Skv=6 Hkv=2 D=8), seeded:
 * { Q, K, V } and q(), k(), v() making a fresh copy of each per call.
 */
export function ruleTensors(seed) {
  const rand = rng(seed);
  const Q = randTensor(rand, [1, 2, 4, 8]), K = randTensor(rand, [1, 6, 2, 8]), V = randTensor(rand, [1, 6, 2, 8]);
  const copy = (x) => () => ({ data: x.data.slice(), dims: x.dims.slice() });
  return { rand, Q, K, V, q: copy(Q), k: copy(K), v: copy(V) };
}

/** |got - ref| <= 1e-5 * (1 + max|ref|) everywhere; reports the worst element. */
export function assertClose(got, ref, label = 'result') {
  assert.is(got.length, ref.length, `${label}: length`);
  let maxRef = 0;
  for (let i = 0; i < ref.length; i++) maxRef = Math.max(maxRef, Math.abs(ref[i]));
  const tol = 1e-5 * (1 + maxRef);
  let worst = -1, worstErr = -1;
  for (let i = 0; i < ref.length; i++) {
    const e = Math.abs(got[i] - ref[i]);
    if (!(e <= tol) && (e > worstErr || Number.isNaN(e))) { worst = i; worstErr = Number.isNaN(e) ? Infinity : e; }
  }
  if (worst >= 0) {
    assert.unreachable(`${label}: |got - ref| = ${worstErr} > ${tol} at [${worst}] (got ${got[worst]}, ref ${ref[worst]})`);
  }
}

/** fn() must throw an SdpaError with `code` whose message matches every regex in `names`. */
export function expectError(fn, code, names = [], label = '') {
  let err = null;
  try { fn(); } catch (e) { err = e; }
  const where = label ? `${label}: ` : '';
  if (err === null) assert.unreachable(`${where}expected ${code}, nothing was thrown`);
  if (!(err instanceof SdpaError)) throw err;
  assert.ok(err instanceof Error, `${where}SdpaError is an Error`);
  assert.is(err.name, 'SdpaError');
  assert.is(err.code, code, `${where}expected ${code}, got ${err.code}: ${err.message}`);
  for (const re of [].concat(names)) {
    assert.ok(re.test(err.message), `${where}message should match ${re}: ${err.message}`);
  }
  return err;
}

export async function expectReject(promise, code, names = []) {
  let err = null;
  try { await promise; } catch (e) { err = e; }
  if (err === null) assert.unreachable(`expected ${code}, nothing was thrown`);
  // (an SdpaError from another copy of the package is another class)
  if (!(err instanceof SdpaError) && !(err instanceof Error && err.name === 'SdpaError')) throw err;
  assert.is(err.code, code, `expected ${code}, got ${err.code}: ${err.message}`);
  for (const re of [].concat(names)) assert.ok(re.test(err.message), `message should match ${re}: ${err.message}`);
  return err;
}

/** Float32Array equality, bit for bit (NaN == NaN). */
export function sameBits(a, b) {
  if (a.length !== b.length) return false;
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}

/** BSHD → BHSD (and back: the same swap). */
export function swap12(t) {
  const [B, X, Y, D] = t.dims;
  const data = new Float32Array(t.data.length);
  for (let b = 0; b < B; b++) for (let x = 0; x < X; x++) for (let y = 0; y < Y; y++) for (let d = 0; d < D; d++) {
    data[((b * Y + y) * X + x) * D + d] = t.data[((b * X + x) * Y + y) * D + d];
  }
  return { data, dims: [B, Y, X, D] };
}
