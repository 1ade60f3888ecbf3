// Speculative decoding over one layer's cache: a draft model proposes a tree
// of tokens, the target verifies the whole tree in ONE step with a treeMask,
// keeps the accepted branch with keepRows, and decodes on. Every output is
// checked against a float64 attention written out below (no library code).
import { createSdpa } from 'sdpa-wasm';

const sdpa = await createSdpa();
const [Hq, Hkv, D] = [8, 2, 32];
const cache = sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D });

// (your model's q, k, v projections; here a seeded generator)
let seed = 1;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1;
const rows = (n, heads) => ({ data: Float32Array.from({ length: n * heads * D }, rand), dims: [1, n, heads, D] });

// The sequence the cache should hold, kept on the host for the check.
const hostK = [], hostV = [];
const push = (k, v, i) => { hostK.push(k.data.slice(i * Hkv * D, (i + 1) * Hkv * D)); hostV.push(v.data.slice(i * Hkv * D, (i + 1) * Hkv * D)); };

/** float64 attention of query row `qi` of q over the key rows `visible` (indices into hostK/hostV, or [k, v, i] for a draft row). */
function reference(q, qi, visible) {
  const out = new Float64Array(Hq * D);
  for (let h = 0; h < Hq; h++) {
    const hk = Math.floor(h / (Hq / Hkv)), scores = [];
    for (const [kr] of visible) {
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q.data[(qi * Hq + h) * D + d] * kr[hk * D + d];
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
  cache.step(q, k, v);
  for (let i = 0; i < prompt; i++) push(k, v, i);
}

// A draft tree of 7 tokens in topological order: parent[i] < i (-1: a child of the last accepted token).
//        ┌ 1 ─ 3
//   0 ───┤      └ 5
//        └ 2 ─ 4 ─ 6
const parent = [-1, 0, 0, 1, 2, 3, 4];
const n = parent.length;
const treeMask = { data: new Uint8Array(n * n), dims: [n, n] };
for (let i = 0; i < n; i++) for (let a = i; a >= 0; a = parent[a]) treeMask.data[i * n + a] = 1;

for (let round = 0; round < 3; round++) {
  const L = cache.length;
  const q = rows(n, Hq), k = rows(n, Hkv), v = rows(n, Hkv);
  // One verify step: every draft token attends the accepted sequence and its own ancestors.
  const out = cache.step(q, k, v, { treeMask });
  for (let i = 0; i < n; i++) {
    const path = [];
    for (let a = i; a >= 0; a = parent[a]) path.unshift(a);
    const visible = hostK.map((kr, t) => [kr, hostV[t]]);
    for (const a of path) visible.push([k.data.slice(a * Hkv * D, (a + 1) * Hkv * D), v.data.slice(a * Hkv * D, (a + 1) * Hkv * D)]);
    check(out.data, i, reference(q, i, visible));
  }
  // (your sampler compares the target's tokens with the draft's; say it accepts this branch)
  const accepted = [[0, 1, 3], [0, 2, 4, 6], [0]][round];
  cache.keepRows(L, accepted);
  for (const a of accepted) push(k, v, a);
  console.log(`round ${round}: verified ${n} draft tokens in one step, kept ${accepted.length} (rows ${L}..${cache.length - 1})`);
}

// Decoding goes on over exactly the accepted sequence.
const q = rows(1, Hq), k = rows(1, Hkv), v = rows(1, Hkv);
const out = cache.step(q, k, v);
push(k, v, 0);
check(out.data, 0, reference(q, 0, hostK.map((kr, t) => [kr, hostV[t]])));
console.log(`cache.length ${cache.length}; every output within 1e-5 of the float64 reference: ${worst < 1e-5}`);
if (!(worst < 1e-5)) process.exit(1);
sdpa.dispose();
