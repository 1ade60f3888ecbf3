// llama-reference.js: a plain llama2.c forward pass in doubles, for the tests
// of sdpa-wasm/llama's weight dtypes. Reads the version-0 checkpoint itself
// (the layout in js/llama/checkpoint.js's header comment, not its code) and
// takes the weight matrices as loadLlama stores them: each matrix (the token
// embedding, wq, wk, wv, wo, w1, w2, w3, a separate classifier) quantized to
// the weight dtype by the JS reference quantizer of dense-reference.js and
// dequantized again; the norms and the RoPE tables stay float32. Then, per
// token: embedding row, per layer RMSNorm (eps 1e-5), q / k / v products,
// rotary on interleaved pairs (2j, 2j+1) from the checkpoint's freq_cos /
// freq_sin rows, causal attention with grouped KV heads (reference.js's
// attendRow), wo added to the residual, RMSNorm, SwiGLU FFN
// (w2(silu(w1 x) * w3 x)) added; final RMSNorm, classifier. One token at a
// time, no shortcuts.

import { quantize, dequantize } from './dense-reference.js';
import { attendRow } from './reference.js';

const EPS = 1e-5;

/**
 * The checkpoint's config and tensors, the matrices as the values a model
 * of `weightDtype` holds (Float64Arrays). `nibbles` goes to dequantize (a
 * test of the tests).
 */
export function referenceWeights(bytes, weightDtype = 'float32', { nibbles } = {}) {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const [dim, hidden, L, nHeads, nKv, vocabField, seqLen] = Array.from({ length: 7 }, (_, i) => dv.getInt32(4 * i, true));
  const vocab = Math.abs(vocabField), hs = dim / nHeads, kvDim = nKv * hs;
  let at = 28;
  const take = (n) => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = dv.getFloat32(at + 4 * i, true);
    at += 4 * n;
    return a;
  };
  const matrix = (values, rows, cols) => dequantize(weightDtype, quantize(weightDtype, values, rows, cols), rows, cols, { nibbles });
  const layersOf = (rows, cols) => {
    const all = take(L * rows * cols);
    return Array.from({ length: L }, (_, l) => matrix(all.subarray(l * rows * cols, (l + 1) * rows * cols), rows, cols));
  };
  const embRaw = take(vocab * dim);
  const w = { embedding: matrix(embRaw, vocab, dim) };
  const rmsAtt = take(L * dim);
  w.wq = layersOf(dim, dim); w.wk = layersOf(kvDim, dim); w.wv = layersOf(kvDim, dim); w.wo = layersOf(dim, dim);
  const rmsFfn = take(L * dim);
  w.w1 = layersOf(hidden, dim); w.w2 = layersOf(dim, hidden); w.w3 = layersOf(hidden, dim);
  w.rmsAtt = Array.from({ length: L }, (_, l) => rmsAtt.subarray(l * dim, (l + 1) * dim));
  w.rmsFfn = Array.from({ length: L }, (_, l) => rmsFfn.subarray(l * dim, (l + 1) * dim));
  w.rmsFinal = take(dim);
  w.cos = take(seqLen * hs / 2);
  w.sin = take(seqLen * hs / 2);
  w.classifier = vocabField > 0 ? w.embedding : matrix(take(vocab * dim), vocab, dim);
  if (at !== bytes.byteLength) throw new Error(`reference: the checkpoint has ${bytes.byteLength} bytes, its header gives ${at}`);
  return { config: { dim, hidden, L, nHeads, nKv, vocab, seqLen, hs, kvDim }, w };
}

/** y = W x for W [rows, cols] (doubles). */
function matvec(W, x, rows, cols) {
  const y = new Float64Array(rows);
  for (let o = 0; o < rows; o++) {
    let s = 0;
    const r = o * cols;
    for (let j = 0; j < cols; j++) s += W[r + j] * x[j];
    y[o] = s;
  }
  return y;
}

function rmsnorm(x, g, eps) {
  let ss = 0;
  for (let j = 0; j < x.length; j++) ss += x[j] * x[j];
  const scale = 1 / Math.sqrt(ss / x.length + eps);
  return Float64Array.from(x, (v, j) => g[j] * v * scale);
}

/** Rotates pairs (2j, 2j+1) of each head of v in place by position pos's angles. */
function rope(v, heads, hs, cos, sin, pos) {
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < hs / 2; j++) {
      const c = cos[pos * hs / 2 + j], s = sin[pos * hs / 2 + j];
      const i = h * hs + 2 * j, a = v[i], b = v[i + 1];
      v[i] = a * c - b * s;
      v[i + 1] = a * s + b * c;
    }
  }
}

/** The logits of every position of `tokens` (a fresh sequence from position 0), [tokens.length, vocab] as a Float64Array. config.eps: the RMSNorm epsilon (default llama2.c's 1e-5). */
export function referenceForward({ config: c, w }, tokens) {
  const { dim, hidden, L, nHeads, nKv, vocab, hs, kvDim } = c;
  const eps = c.eps ?? EPS;
  const keys = Array.from({ length: L }, () => []), values = Array.from({ length: L }, () => []);
  const logits = new Float64Array(tokens.length * vocab);
  const group = nHeads / nKv;
  for (let pos = 0; pos < tokens.length; pos++) {
    let x = Float64Array.from(w.embedding.subarray(tokens[pos] * dim, (tokens[pos] + 1) * dim));
    for (let l = 0; l < L; l++) {
      let xb = rmsnorm(x, w.rmsAtt[l], eps);
      const q = matvec(w.wq[l], xb, dim, dim), k = matvec(w.wk[l], xb, kvDim, dim), v = matvec(w.wv[l], xb, kvDim, dim);
      rope(q, nHeads, hs, w.cos, w.sin, pos);
      rope(k, nKv, hs, w.cos, w.sin, pos);
      keys[l].push(k); values[l].push(v);
      const att = new Float64Array(dim);
      for (let h = 0; h < nHeads; h++) {
        const kh = Math.floor(h / group) * hs;
        attendRow({
          keys: pos + 1, Dv: hs, scale: 1 / Math.sqrt(hs),
          dot: (t) => { let s = 0; for (let d = 0; d < hs; d++) s += q[h * hs + d] * keys[l][t][kh + d]; return s; },
          value: (t, d) => values[l][t][kh + d],
        }, att, h * hs);
      }
      const o = matvec(w.wo[l], att, dim, dim);
      for (let j = 0; j < dim; j++) x[j] += o[j];
      xb = rmsnorm(x, w.rmsFfn[l], eps);
      const h1 = matvec(w.w1[l], xb, hidden, dim), h3 = matvec(w.w3[l], xb, hidden, dim);
      for (let j = 0; j < hidden; j++) h1[j] = (h1[j] / (1 + Math.exp(-h1[j]))) * h3[j];
      const f = matvec(w.w2[l], h1, dim, hidden);
      for (let j = 0; j < dim; j++) x[j] += f[j];
    }
    x = rmsnorm(x, w.rmsFinal, eps);
    logits.set(matvec(w.classifier, x, vocab, dim), pos * vocab);
  }
  return logits;
}
