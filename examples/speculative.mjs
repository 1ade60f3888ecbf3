// Speculative decoding over one layer's cache: a draft model proposes a tree
// of tokens, the target verifies the whole tree in ONE step with a treeMask,
// keeps the accepted branch with keepRows, and decodes on. Rotary embeddings
// are applied inside the op (`rotary`): a draft token sits at its depth in the
// tree (`positions`), not at its row, so the kept branch ends up exactly where
// plain decoding would have put it. Every output is checked against a float64
// attention written out below (no library code).
import { createSdpa } from 'sdpa-wasm';

const sdpa = await createSdpa();
const [Hq, Hkv, D] = [8, 2, 32];
const cache = sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D });

// (your model's q, k, v projections; here a seeded generator)
let seed = 1;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1;
const rows = (n, heads) => ({ data: Float32Array.from({ length: n * heads * D }, rand), dims: [1, n, heads, D] });

// Rotary tables (NeoX halves, rotaryDim = D) for 256 positions, as heap
// tensors: read in place by every call.
const R = D / 2, maxPos = 256;
const cosT = sdpa.allocTensor('float32', [maxPos, R]), sinT = sdpa.allocTensor('float32', [maxPos, R]);
const cosH = new Float32Array(maxPos * R), sinH = new Float32Array(maxPos * R);
for (let p = 0; p < maxPos; p++) for (let j = 0; j < R; j++) { cosH[p * R + j] = Math.cos(p * 10000 ** (-j / R)); sinH[p * R + j] = Math.sin(p * 10000 ** (-j / R)); }
cosT.set(cosH); sinT.set(sinH);
const rotary = { cos: cosT, sin: sinT };

/** One row of `heads` heads rotated at position p, in float64 (the check's own rotation). */
function rope(row, heads, p) {
  const y = Float64Array.from(row);
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < R; j++) {
      const a = row[h * D + j], b = row[h * D + j + R], c = cosH[p * R + j], s = sinH[p * R + j];
      y[h * D + j] = a * c - b * s;
      y[h * D + j + R] = b * c + a * s;
    }
  }
  return y;
}

// The sequence the cache should hold (K rotated at its position), kept on the host for the check.
const hostK = [], hostV = [];
const push = (k, v, i, p) => { hostK.push(rope(k.data.slice(i * Hkv * D, (i + 1) * Hkv * D), Hkv, p)); hostV.push(v.data.slice(i * Hkv * D, (i + 1) * Hkv * D)); };
const qRow = (q, i, p) => rope(q.data.slice(i * Hq * D, (i + 1) * Hq * D), Hq, p);

/** float64 attention of one query row (rotated) over the key rows `visible` ([k, v] rows, K rotated). */
function reference(qr, visible) {
  const out = new Float64Array(Hq * D);
  for (let h = 0; h < Hq; h++) {
    const hk = Math.floor(h / (Hq / Hkv)), scores = [];
    for (const [kr] of visible) {
      let dot = 0;
      for (let d = 0; d < D; d++) dot += qr[h * D + d] * kr[hk * D + d];
      scores.push(dot / Math.sqrt(D));
    }
    const m = Math.max(...scores), w = scores.map((s) => Math.exp(s - m)), sum = w.reduce((a, b) => a + b, 0);
    visible.forEach(([, vr], t) => { for (let d = 0; d < D; d++) out[h * D + d] += (w[t] / sum) * vr[hk * D + d]; });
  }
  return out;
}
let worst = 0;
const check = (got, gi, ref) => { for (let x = 0; x < ref.length; x++) worst = Math.max(worst, Math.abs(got[gi * Hq * D + x] - ref[x])); };

// The prompt (prefill, causal).
const prompt = 20;
{
  const q = rows(prompt, Hq), k = rows(prompt, Hkv), v = rows(prompt, Hkv);
  cache.step(q, k, v, { rotary });  // (rows at positions 0 .. prompt-1)
  for (let i = 0; i < prompt; i++) push(k, v, i, i);
}

// A draft tree of 7 tokens in topological order: parent[i] < i (-1: a child of the last accepted token).
//        ┌ 1 ─ 3
//   0 ───┤      └ 5
//        └ 2 ─ 4 ─ 6
const parent = [-1, 0, 0, 1, 2, 3, 4];
const n = parent.length;
const treeMask = { data: new Uint8Array(n * n), dims: [n, n] };
for (let i = 0; i < n; i++) for (let a = i; a >= 0; a = parent[a]) treeMask.data[i * n + a] = 1;
const depth = parent.map((_, i) => { let d = 0; for (let a = parent[i]; a >= 0; a = parent[a]) d++; return d; });

for (let round = 0; round < 3; round++) {
  const L = cache.length;
  const q = rows(n, Hq), k = rows(n, Hkv), v = rows(n, Hkv);
  // One verify step: every draft token attends the accepted sequence and its own ancestors,
  // q and k rotated at the token's depth (position L + depth).
  const positions = depth.map((d) => L + d);
  const out = cache.step(q, k, v, { treeMask, rotary: { ...rotary, positions } });
  for (let i = 0; i < n; i++) {
    const path = [];
    for (let a = i; a >= 0; a = parent[a]) path.unshift(a);
    const visible = hostK.map((kr, t) => [kr, hostV[t]]);
    for (const a of path) visible.push([rope(k.data.slice(a * Hkv * D, (a + 1) * Hkv * D), Hkv, positions[a]), v.data.slice(a * Hkv * D, (a + 1) * Hkv * D)]);
    check(out.data, i, reference(qRow(q, i, positions[i]), visible));
  }
  // (your sampler compares the target's tokens with the draft's; say it accepts this branch)
  const accepted = [[0, 1, 3], [0, 2, 4, 6], [0]][round];
  cache.keepRows(L, accepted);  // (a branch's k-th token has depth k: row L + k, at position L + k)
  for (const a of accepted) push(k, v, a, positions[a]);
  console.log(`round ${round}: verified ${n} draft tokens in one step, kept ${accepted.length} (rows ${L}..${cache.length - 1})`);
}

// Decoding goes on over exactly the accepted sequence.
const q = rows(1, Hq), k = rows(1, Hkv), v = rows(1, Hkv);
const p = cache.length;
const out = cache.step(q, k, v, { rotary });
push(k, v, 0, p);
check(out.data, 0, reference(qRow(q, 0, p), hostK.map((kr, t) => [kr, hostV[t]])));
console.log(`cache.length ${cache.length}; every output within 1e-5 of the float64 reference: ${worst < 1e-5}`);
if (!(worst < 1e-5)) process.exit(1);
sdpa.dispose();
