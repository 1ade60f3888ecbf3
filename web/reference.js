// Seeded data and the plain float64 reference used by the demo's correctness badge.
// Pure functions, no dependencies: importable from the worker and from Node.

const KIND = { q: 1, k: 2, v: 3, sink: 4 };

/** 32-bit mix of (seed, layer, pos, kind): every row has its own reproducible stream. */
function rowSeed(seed, layer, pos, kind) {
  let h = (seed ^ 0x9e3779b9) >>> 0;
  for (const x of [layer, pos, KIND[kind]]) {
    h = Math.imul(h ^ x, 0x85ebca6b) >>> 0;
    h = (h ^ (h >>> 13)) >>> 0;
    h = Math.imul(h, 0xc2b2ae35) >>> 0;
    h = (h ^ (h >>> 16)) >>> 0;
  }
  return h;
}

/**
 * Fills dst[offset .. offset+n-1] with the row of `kind` ('q' | 'k' | 'v') at
 * position `pos` of `layer`: uniform in [-1, 1) for k and v, [-2, 2) for q
 * (so that the softmax is not flat). Deterministic: the same arguments give the
 * same float32 values, which is how the reference rebuilds what the cache holds.
 */
export function fillRow(dst, offset, n, seed, layer, pos, kind) {
  let a = rowSeed(seed, layer, pos, kind);
  const amp = kind === 'q' ? 4 : 2;
  for (let i = 0; i < n; i++) {
    // mulberry32
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    const u = ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    dst[offset + i] = (u - 0.5) * amp;
  }
}

/** Rows of `heads` heads of d rotated at position p in float64 (NeoX halves, rope: { cos, sin, R } float32 tables). */
function rotate64(x, heads, d, p, rope) {
  const y = Float64Array.from(x), R = rope.R;
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < R; j++) {
      const a = x[h * d + j], b = x[h * d + j + R], c = rope.cos[p * R + j], s = rope.sin[p * R + j];
      y[h * d + j] = a * c - b * s;
      y[h * d + j + R] = b * c + a * s;
    }
  }
  return y;
}

/**
 * Plain three-pass attention in float64 for one query row of one layer:
 * q [Hq*D] at position `pos`, keys/values firstKey .. nKeys-1 (a sliding
 * window: firstKey = pos - window + 1) regenerated with fillRow (or, for a
 * float16 / int8 cache, `stored`: { k, v } [(nKeys - firstKey)*Hkv*D], the
 * values the cache really holds, from cache.read), GQA head mapping
 * hk = floor(h / (Hq/Hkv)), scale 1/sqrt(D); `softcap` c: c * tanh(s / c);
 * `sinks` [Hq]: a sink logit per head joins the softmax denominator.
 * `rope` ({ cos, sin, R }, the op's float32 tables): rotary in the op, so q
 * is rotated at `pos` and each regenerated K row at its own position, in
 * float64 (a `stored` K is what the cache holds: rotated already).
 * Returns max |out - reference| over the row (Infinity if `out` holds NaN).
 */
export function attentionRef64({ seed, layer, pos, hq, hkv, d, q, out, firstKey = 0, nKeys, stored = null, softcap = 0, sinks = null, rope = null }) {
  const r = hq / hkv;
  const scale = 1 / Math.sqrt(d);
  const row = new Float32Array(hkv * d);
  if (rope) q = rotate64(q, hq, d, pos, rope);  // (rotary in the op: q at its position; K below at each key's)
  const scores = new Float64Array(nKeys * hq).fill(-Infinity);
  // pass 1: scores
  for (let t = firstKey; t < nKeys; t++) {
    const at = t - firstKey;
    if (stored) row.set(stored.k.subarray(at * hkv * d, (at + 1) * hkv * d));  // (stored K is stored rotated)
    else fillRow(row, 0, hkv * d, seed, layer, t, 'k');
    const kr = rope && !stored ? rotate64(row, hkv, d, t, rope) : row;
    for (let h = 0; h < hq; h++) {
      const kOff = Math.floor(h / r) * d;
      const qOff = h * d;
      let s = 0;
      for (let j = 0; j < d; j++) s += q[qOff + j] * kr[kOff + j];
      scores[t * hq + h] = softcap ? softcap * Math.tanh((s * scale) / softcap) : s * scale;
    }
  }
  // pass 2: softmax weights
  const max = new Float64Array(hq).fill(-Infinity);
  for (let t = firstKey; t < nKeys; t++) for (let h = 0; h < hq; h++) max[h] = Math.max(max[h], scores[t * hq + h]);
  if (sinks) for (let h = 0; h < hq; h++) max[h] = Math.max(max[h], sinks[h]);
  const sum = new Float64Array(hq);
  if (sinks) for (let h = 0; h < hq; h++) sum[h] = Math.exp(sinks[h] - max[h]);
  for (let t = firstKey; t < nKeys; t++) {
    for (let h = 0; h < hq; h++) {
      const p = Math.exp(scores[t * hq + h] - max[h]);
      scores[t * hq + h] = p;
      sum[h] += p;
    }
  }
  // pass 3: weighted values
  const acc = new Float64Array(hq * d);
  for (let t = firstKey; t < nKeys; t++) {
    const at = t - firstKey;
    if (stored) row.set(stored.v.subarray(at * hkv * d, (at + 1) * hkv * d));
    else fillRow(row, 0, hkv * d, seed, layer, t, 'v');
    for (let h = 0; h < hq; h++) {
      const p = scores[t * hq + h] / sum[h];
      const vOff = Math.floor(h / r) * d;
      const aOff = h * d;
      for (let j = 0; j < d; j++) acc[aOff + j] += p * row[vOff + j];
    }
  }
  let err = 0;
  for (let i = 0; i < hq * d; i++) {
    const e = Math.abs(out[i] - acc[i]);
    if (!(e <= err)) err = Number.isNaN(e) ? Infinity : e;
  }
  return err;
}
