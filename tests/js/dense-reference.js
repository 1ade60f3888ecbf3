// dense-reference.js: float64 references of the dense calls (include/
// sdpa_dense.h) and of the weight dtypes, written from ggml's definitions
// independently of js/ and src/: plain loops, no shortcuts.
//   - float16: bits <-> numbers (round to nearest even);
//   - q8_0 / q4_0: ggml's block layouts, read byte by byte, and ggml's
//     quantize_row_q8_0_ref / quantize_row_q4_0_ref re-done in JS with
//     Math.fround at every float32 step (d and 1/d are float32; d is stored
//     as float16);
//   - linear / rmsNorm / swiglu in doubles (from the plain-JS dense layer
//     js/llama/dense.js the package used before the dense calls were wasm).

const f32 = Math.fround;

/** 2^k for k in -40 .. 40 (POW2[k + 40]): Math.pow is slow, and these are exact. */
const POW2 = Array.from({ length: 81 }, (_, i) => 2 ** (i - 40));
const pow2 = (k) => POW2[k + 40];

/** A float16's bits (0 .. 0xffff) as the number they are, exactly. */
export function halfToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1, e = (h >>> 10) & 31, m = h & 1023;
  if (e === 31) return m === 0 ? sign * Infinity : NaN;
  if (e === 0) return sign * m * pow2(-24);           // subnormal (and zero)
  return sign * (1024 + m) * pow2(e - 25);            // (1 + m / 1024) * 2^(e - 15)
}

/** q rounded to an integer, ties to even (q >= 0, exact in a double). */
function roundHalfEven(q) {
  const f = Math.floor(q), r = q - f;
  if (r > 0.5) return f + 1;
  if (r < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** The float16 bits of x (a number, read as is: pass float32 values), round to nearest even; NaN -> 0x7e00. */
export function numberToHalf(x) {
  if (x !== x) return 0x7e00;                          // NaN
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a >= 65520) return sign | 0x7c00;               // 65520 is half way from 65504 to 2^16: the tie goes to even, Inf
  if (a < pow2(-14)) return sign | roundHalfEven(a * pow2(24));   // subnormals in units of 2^-24 (1024 units: the least normal)
  let e = 15;
  while (pow2(e) > a) e--;                            // 2^e <= a < 2^(e+1), e in -14 .. 15
  const q = roundHalfEven(a * pow2(10 - e));          // 1024 .. 2048 (2048: the next binade, the bits carry over)
  return sign | (((e + 15) << 10) + (q - 1024));
}

/** Blocks of the quantized dtypes: values per block, bytes per block. */
export const BLOCK = Object.freeze({ q8_0: { values: 32, bytes: 34 }, q4_0: { values: 32, bytes: 18 } });

/** Bytes of a [rows, cols] weight. */
export function weightBytes(dtype, rows, cols) {
  if (dtype === 'float32') return rows * cols * 4;
  if (dtype === 'float16') return rows * cols * 2;
  return rows * (cols / 32) * BLOCK[dtype].bytes;
}

/**
 * The values of a [rows, cols] weight from its bytes (a Uint8Array, the
 * layout of include/sdpa_dense.h / ggml), as a Float64Array:
 *   float32: little-endian floats; float16: little-endian halves;
 *   q8_0: per 32 values, f16 d then 32 int8 q: value j = d * q[j];
 *   q4_0: per 32 values, f16 d then 16 bytes, byte j's low nibble value j,
 *         its high nibble value j + 16: value = d * (nibble - 8).
 * `nibbles: 'swapped'` reads q4_0 the wrong way round (a test of the tests).
 */
export function dequantize(dtype, bytes, rows, cols, { nibbles = 'ggml' } = {}) {
  const out = new Float64Array(rows * cols);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === 'float32') {
    for (let i = 0; i < rows * cols; i++) out[i] = dv.getFloat32(4 * i, true);
    return out;
  }
  if (dtype === 'float16') {
    for (let i = 0; i < rows * cols; i++) out[i] = halfToNumber(dv.getUint16(2 * i, true));
    return out;
  }
  const bb = BLOCK[dtype].bytes, nb = cols / 32;
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const at = (r * nb + b) * bb;
      const d = halfToNumber(dv.getUint16(at, true));
      const o = r * cols + b * 32;
      if (dtype === 'q8_0') {
        for (let j = 0; j < 32; j++) out[o + j] = d * dv.getInt8(at + 2 + j);
      } else {
        for (let j = 0; j < 16; j++) {
          const byte = bytes[at + 2 + j];
          const lo = byte & 15, hi = byte >>> 4;
          out[o + j] = d * ((nibbles === 'swapped' ? hi : lo) - 8);
          out[o + j + 16] = d * ((nibbles === 'swapped' ? lo : hi) - 8);
        }
      }
    }
  }
  return out;
}

/** C's roundf: half away from zero (v a float32 value). */
const roundAway = (v) => (v < 0 ? -Math.floor(-v + 0.5) : Math.floor(v + 0.5));

/**
 * ggml's quantize_row_q8_0_ref / quantize_row_q4_0_ref / a float16 or
 * float32 conversion of float32 values x ([rows, cols] row-major) into the
 * dtype's bytes (a Uint8Array).
 */
export function quantize(dtype, x, rows, cols) {
  const bytes = new Uint8Array(weightBytes(dtype, rows, cols));
  const dv = new DataView(bytes.buffer);
  if (dtype === 'float32') {
    for (let i = 0; i < rows * cols; i++) dv.setFloat32(4 * i, x[i], true);
    return bytes;
  }
  if (dtype === 'float16') {
    for (let i = 0; i < rows * cols; i++) dv.setUint16(2 * i, numberToHalf(f32(x[i])), true);
    return bytes;
  }
  const bb = BLOCK[dtype].bytes, nb = cols / 32;
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const at = (r * nb + b) * bb, v = (j) => f32(x[r * cols + b * 32 + j]);
      if (dtype === 'q8_0') {
        let amax = 0;
        for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(v(j)));
        const d = f32(amax / 127);
        const id = d !== 0 ? f32(1 / d) : 0;
        dv.setUint16(at, numberToHalf(d), true);
        for (let j = 0; j < 32; j++) dv.setInt8(at + 2 + j, roundAway(f32(v(j) * id)));
      } else {
        let amax = 0, max = 0;
        for (let j = 0; j < 32; j++) if (amax < Math.abs(v(j))) { amax = Math.abs(v(j)); max = v(j); }
        const d = f32(max / -8);
        const id = d !== 0 ? f32(1 / d) : 0;
        dv.setUint16(at, numberToHalf(d), true);
        for (let j = 0; j < 16; j++) {
          const x0 = f32(f32(v(j) * id) + 8.5), x1 = f32(f32(v(j + 16) * id) + 8.5);
          const q0 = Math.min(15, Math.trunc(x0)), q1 = Math.min(15, Math.trunc(x1));
          bytes[at + 2 + j] = q0 | (q1 << 4);
        }
      }
    }
  }
  return bytes;
}

/**
 * y[i*dout + o] = (acc ? acc[i*dout + o] : 0) + sum_j w[o*din + j] * x[i*din + j]
 * for n rows i, in doubles; also returns the magnitude sum_j |w x| of each
 * output (what bounds a float32 sum's rounding error).
 */
export function linearRef(x, w, n, din, dout, acc = null) {
  const y = new Float64Array(n * dout), mag = new Float64Array(n * dout);
  for (let i = 0; i < n; i++) {
    for (let o = 0; o < dout; o++) {
      let s = 0, m = 0;
      for (let j = 0; j < din; j++) {
        const p = w[o * din + j] * x[i * din + j];
        s += p;
        m += Math.abs(p);
      }
      y[i * dout + o] = acc ? acc[i * dout + o] + s : s;
      mag[i * dout + o] = m + (acc ? Math.abs(acc[i * dout + o]) : 0);
    }
  }
  return { y, mag };
}

/** out[i] = w * x[i] / sqrt(mean(x[i]^2) + eps) for n rows of dim (llama2.c's rmsnorm), in doubles. */
export function rmsNormRef(x, w, n, dim, eps = 1e-5) {
  const out = new Float64Array(n * dim);
  for (let i = 0; i < n; i++) {
    let ss = 0;
    for (let j = 0; j < dim; j++) ss += x[i * dim + j] * x[i * dim + j];
    const scale = 1 / Math.sqrt(ss / dim + eps);
    for (let j = 0; j < dim; j++) out[i * dim + j] = w[j] * x[i * dim + j] * scale;
  }
  return out;
}

/** silu(g) * u = g / (1 + e^-g) * u, elementwise, in doubles. */
export function swigluRef(g, u) {
  const out = new Float64Array(g.length);
  for (let i = 0; i < g.length; i++) out[i] = (g[i] / (1 + Math.exp(-g[i]))) * u[i];
  return out;
}
