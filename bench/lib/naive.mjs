// The baseline a web developer would write: plain float32 JS attention for one
// decode step, K/V kept as token-major Float32Arrays [N, Hkv, D].

/**
 * q: Float32Array [Hq * D] (one token), K, V: Float32Array [N * Hkv * D].
 * Returns a new Float32Array [Hq * D].
 */
export function naiveDecode(q, K, V, N, Hq, Hkv, D) {
  const out = new Float32Array(Hq * D);
  const scale = 1 / Math.sqrt(D);
  const group = Hq / Hkv;
  const scores = new Float32Array(N);
  for (let h = 0; h < Hq; h++) {
    const kvHead = Math.floor(h / group);
    // scores = q · k / sqrt(D)
    let max = -Infinity;
    for (let t = 0; t < N; t++) {
      let dot = 0;
      const kOff = (t * Hkv + kvHead) * D;
      for (let d = 0; d < D; d++) dot += q[h * D + d] * K[kOff + d];
      scores[t] = dot * scale;
      if (scores[t] > max) max = scores[t];
    }
    // softmax
    let sum = 0;
    for (let t = 0; t < N; t++) {
      scores[t] = Math.exp(scores[t] - max);
      sum += scores[t];
    }
    // weighted sum of values
    for (let t = 0; t < N; t++) {
      const w = scores[t] / sum;
      const vOff = (t * Hkv + kvHead) * D;
      for (let d = 0; d < D; d++) out[h * D + d] += w * V[vOff + d];
    }
  }
  return out;
}
