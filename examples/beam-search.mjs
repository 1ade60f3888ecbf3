// Beam search over forked caches (Whisper-like decoder layer): one shared,
// read-only cross-attention cache holding the encoder's K/V, and one
// self-attention cache per beam, forked (copy-on-write) when beams are
// reordered. Per step: every beam's self-attention step in ONE stepMany call
// (one dispatch of the thread pool for all beams), and the cross-attention of
// all beams as the rows of one non-causal attend over the encoder cache.
// Every output is checked against a float64 attention written out below.
import { createSdpa } from 'sdpa-wasm';

const sdpa = await createSdpa();
const [H, D, encLen, beams, steps] = [6, 64, 1500, 4, 6];  // whisper-tiny: 6 heads of 64, 1500 encoder frames

let seed = 3;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) * 2 - 1;
const rows = (n) => ({ data: Float32Array.from({ length: n * H * D }, rand), dims: [1, n, H, D] });
const rowOf = (t, i) => t.data.slice(i * H * D, (i + 1) * H * D);

/** float64 attention of one query row (H heads) over key/value rows. */
function reference(q, keys, values) {
  const out = new Float64Array(H * D);
  for (let h = 0; h < H; h++) {
    const s = keys.map((k) => { let d = 0; for (let x = 0; x < D; x++) d += q[h * D + x] * k[h * D + x]; return d / Math.sqrt(D); });
    const m = Math.max(...s), w = s.map((x) => Math.exp(x - m)), sum = w.reduce((a, b) => a + b, 0);
    values.forEach((v, t) => { for (let x = 0; x < D; x++) out[h * D + x] += (w[t] / sum) * v[h * D + x]; });
  }
  return out;
}
let worst = 0;
const check = (got, at, ref) => { for (let x = 0; x < ref.length; x++) worst = Math.max(worst, Math.abs(got[at + x] - ref[x])); };

// The encoder's K/V, written once; cross-attention reads it (isCausal: false), nobody writes it again.
const encoder = sdpa.createKVCache({ maxSeqLen: encLen, numKvHeads: H, headDim: D });
const ek = rows(encLen), ev = rows(encLen);
encoder.update(ek, ev);
const encK = Array.from({ length: encLen }, (_, t) => rowOf(ek, t)), encV = Array.from({ length: encLen }, (_, t) => rowOf(ev, t));

// The prompt (start-of-transcript tokens) once, then a fork per beam: the prompt's pages are shared.
const prompt = sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: H, headDim: D });
const pk = rows(3), pv = rows(3);
prompt.step(rows(3), pk, pv);
let beam = Array.from({ length: beams }, () => ({ cache: prompt.fork(), k: [0, 1, 2].map((i) => rowOf(pk, i)), v: [0, 1, 2].map((i) => rowOf(pv, i)), score: 0 }));

for (let step = 0; step < steps; step++) {
  // self-attention: every beam's step (write its token's K/V, attend) in one call
  const qs = beam.map(() => rows(1)), ks = beam.map(() => rows(1)), vs = beam.map(() => rows(1));
  const self = sdpa.stepMany(beam.map((b, i) => ({ cache: b.cache, q: qs[i], k: ks[i], v: vs[i] })));
  beam.forEach((b, i) => { b.k.push(rowOf(ks[i], 0)); b.v.push(rowOf(vs[i], 0)); });
  beam.forEach((b, i) => check(self[i].data, 0, reference(rowOf(qs[i], 0), b.k, b.v)));

  // cross-attention: the beams' queries are the rows of one query; non-causal, so each row is one
  // beam, and every row sees the keys 0 .. startPos + Sq - 1: all encLen of them
  const cq = rows(beams);
  const cross = encoder.attend(cq, { startPos: encLen - beams, isCausal: false });
  for (let i = 0; i < beams; i++) check(cross.data, i * H * D, reference(rowOf(cq, i), encK, encV));

  // (your model scores the next tokens; here: a made-up score from the outputs) and keeps the best `beams`
  const scored = beam.flatMap((b, i) => [0, 1].map((c) => ({ parent: i, score: b.score + self[i].data[c] + cross.data[i * H * D + c] })));
  scored.sort((a, b) => b.score - a.score);
  const next = scored.slice(0, beams).map(({ parent, score }) => {
    const p = beam[parent];
    return { cache: p.cache.fork(), k: p.k.slice(), v: p.v.slice(), score };  // a fork: O(pages), copy-on-write
  });
  for (const b of beam) b.cache.dispose();
  beam = next;
  console.log(`step ${step}: ${beams} beams, self-attention in one stepMany call, parents ${scored.slice(0, beams).map((s) => s.parent).join(',')}`);
}
console.log(`beams hold ${beam[0].cache.length} rows each; every output within 1e-5 of the float64 reference: ${worst < 1e-5}`);
if (!(worst < 1e-5)) process.exit(1);
sdpa.dispose();
