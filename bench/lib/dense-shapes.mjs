// The weight products of a llama2.c-shaped model (bench/dense.mjs, bench/llama.mjs): the bytes
// of a weight row per dtype (include/sdpa_dense.h), the distinct [out, in] of one token, and
// one token's products in the order js/llama/model.js runs them.

/** Values per block of a weight dtype (1: not a block dtype). */
export function blockOf(dtype) {
  return dtype === 'q4_k' || dtype === 'q6_k' ? 256 : dtype === 'q8_0' || dtype === 'q4_0' || dtype === 'q5_0' ? 32 : 1;
}

/** Bytes of one row of `cols` values in a weight dtype (q8_0 / q4_0 / q5_0: 34 / 18 / 22 bytes per 32 values; q4_k / q6_k: 144 / 210 per 256). */
export function rowBytes(dtype, cols) {
  switch (dtype) {
    case 'float32': return 4 * cols;
    case 'float16': return 2 * cols;
    case 'q8_0': return (cols / 32) * 34;
    case 'q4_0': return (cols / 32) * 18;
    case 'q5_0': return (cols / 32) * 22;
    case 'q4_k': return (cols / 256) * 144;
    case 'q6_k': return (cols / 256) * 210;
    default: throw new Error(`dense-shapes: unknown weight dtype ${dtype}`);
  }
}

/** K / V width: nKvHeads heads of dim / nHeads. */
export const kvDimOf = (s) => (s.dim / s.nHeads) * s.nKvHeads;

/** The distinct [out, in] of one token (names as in llama2.c); the classifier runs on the rows asked for (decodeOnly). */
export function distinctShapes(s) {
  const kv = kvDimOf(s);
  return [
    { name: 'wq, wo', rows: s.dim, cols: s.dim },
    { name: 'wk, wv', rows: kv, cols: s.dim },
    { name: 'w1, w3', rows: s.hiddenDim, cols: s.dim },
    { name: 'w2', rows: s.dim, cols: s.hiddenDim },
    { name: 'classifier', rows: s.vocabSize, cols: s.dim, decodeOnly: true },
  ];
}

/** One token's products in the model's order: per layer wq wk wv wo w1 w3 w2 (wo, w2 accumulate into the residual), then the classifier. */
export function tokenProducts(s) {
  const kv = kvDimOf(s), h = s.hiddenDim, d = s.dim;
  const list = [];
  for (let l = 0; l < s.nLayers; l++) {
    list.push({ rows: d, cols: d }, { rows: kv, cols: d }, { rows: kv, cols: d }, { rows: d, cols: d, acc: true },
      { rows: h, cols: d }, { rows: h, cols: d }, { rows: d, cols: h, acc: true });
  }
  list.push({ rows: s.vocabSize, cols: d });
  return list;
}

/** { bytes, flops } of one token's products (weights read once each; 2 FLOP per multiply-add). */
export function tokenWork(s, dtype) {
  const list = tokenProducts(s);
  return {
    bytes: list.reduce((b, p) => b + p.rows * rowBytes(dtype, p.cols), 0),
    flops: list.reduce((f, p) => f + 2 * p.rows * p.cols, 0),
  };
}
