// dense.js: the parts of a Llama layer that are not attention, in plain JS
// over Float32Arrays (products and sums in double, stored as float32). Every
// function writes into buffers the caller made once: nothing here allocates.
// A matrix is [out, in] row-major at offset `wo` of `w` (llama2.c's layout).

/** y[yo + i*dout + o] = (add ? y[...] : 0) + sum_j w[wo + o*din + j] * x[xo + i*din + j], for n rows i. */
export function matmul(y, yo, x, xo, w, wo, n, din, dout, add) {
  const d4 = din & ~3;
  for (let o = 0; o < dout; o++) {
    const r = wo + o * din;
    for (let i = 0; i < n; i++) {
      const xi = xo + i * din;
      let s0 = 0, s1 = 0, s2 = 0, s3 = 0, j = 0;
      for (; j < d4; j += 4) {
        s0 += w[r + j] * x[xi + j];
        s1 += w[r + j + 1] * x[xi + j + 1];
        s2 += w[r + j + 2] * x[xi + j + 2];
        s3 += w[r + j + 3] * x[xi + j + 3];
      }
      for (; j < din; j++) s0 += w[r + j] * x[xi + j];
      const s = (s0 + s1) + (s2 + s3);
      const at = yo + i * dout + o;
      y[at] = add ? y[at] + s : s;
    }
  }
}

/** out[i] = weight * x[i] / sqrt(mean(x[i]^2) + 1e-5) for n rows of `dim` (llama2.c's rmsnorm). */
export function rmsnorm(out, x, w, wo, n, dim) {
  for (let i = 0; i < n; i++) {
    const xi = i * dim;
    let ss = 0;
    for (let j = 0; j < dim; j++) ss += x[xi + j] * x[xi + j];
    const scale = 1 / Math.sqrt(ss / dim + 1e-5);
    for (let j = 0; j < dim; j++) out[xi + j] = w[wo + j] * (scale * x[xi + j]);
  }
}

/** a[i] = silu(a[i]) * b[i] for the first `len` values (SwiGLU's gate). */
export function swiglu(a, b, len) {
  for (let i = 0; i < len; i++) {
    const g = a[i];
    a[i] = (g / (1 + Math.exp(-g))) * b[i];
  }
}
