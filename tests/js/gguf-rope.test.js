// gguf-rope.test.js: what a GGUF file says about its model beyond the weights (llama.rope.freq_base,
// rope_freqs.weight's per-pair divisors: Llama 3.1's, llama.attention.layer_norm_rms_epsilon), held
// to a float64 forward whose rotary tables the test computes itself from the formula
// theta_j(p) = p * base^(-2j / headSize) / factor_j (llama.cpp's rope with freq factors).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa } from '../../js/index.js';
import { loadGguf } from '../../js/llama/index.js';
import { writeGguf } from '../../scripts/lib/gguf-writer.mjs';
import { referenceForward } from './llama-reference.js';

const C = { dim: 64, nHeads: 4, nKv: 2, hidden: 96, L: 2, vocab: 40, ctx: 48 };
const HS = C.dim / C.nHeads, KV = C.nKv * HS;
const TOKENS = [1, 7, 30, 2, 11, 19, 23, 5, 38, 13, 17, 29, 3, 31, 8, 22, 9, 4, 36, 27, 14, 6, 33, 10, 25, 12, 39, 0, 18, 21, 34, 15];

/** A seeded generator of floats in [-scale, scale) (mulberry32). */
function random(seed) {
  let a = seed >>> 0;
  return (n, scale) => Float32Array.from({ length: n }, () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (((t ^ (t >>> 14)) >>> 0) / 2 ** 32 * 2 - 1) * scale;
  });
}

/** A model's float32 weights, the GGUF file of them with `keys` and `factors`, and the reference's weights. */
function model({ base, eps, factors }) {
  const r = random(42);
  const norm = (n) => Float32Array.from(r(n, 0.2), (v) => 1 + v);
  const w = {
    embedding: r(C.vocab * C.dim, 1), classifier: null, rmsFinal: norm(C.dim),
    wq: [], wk: [], wv: [], wo: [], w1: [], w2: [], w3: [], rmsAtt: [], rmsFfn: [],
  };
  w.classifier = r(C.vocab * C.dim, 0.3);
  for (let l = 0; l < C.L; l++) {
    w.rmsAtt.push(norm(C.dim)); w.rmsFfn.push(norm(C.dim));
    w.wq.push(r(C.dim * C.dim, 0.25)); w.wk.push(r(KV * C.dim, 0.25)); w.wv.push(r(KV * C.dim, 0.25)); w.wo.push(r(C.dim * C.dim, 0.25));
    w.w1.push(r(C.hidden * C.dim, 0.25)); w.w2.push(r(C.dim * C.hidden, 0.2)); w.w3.push(r(C.hidden * C.dim, 0.25));
  }
  const t = (name, ne, a) => ({ name, ne, type: 'F32', data: new Uint8Array(a.buffer) });
  const tensors = [t('token_embd.weight', [C.dim, C.vocab], w.embedding), t('output_norm.weight', [C.dim], w.rmsFinal), t('output.weight', [C.dim, C.vocab], w.classifier)];
  for (let l = 0; l < C.L; l++) {
    tensors.push(t(`blk.${l}.attn_norm.weight`, [C.dim], w.rmsAtt[l]), t(`blk.${l}.attn_q.weight`, [C.dim, C.dim], w.wq[l]),
      t(`blk.${l}.attn_k.weight`, [C.dim, KV], w.wk[l]), t(`blk.${l}.attn_v.weight`, [C.dim, KV], w.wv[l]),
      t(`blk.${l}.attn_output.weight`, [C.dim, C.dim], w.wo[l]), t(`blk.${l}.ffn_norm.weight`, [C.dim], w.rmsFfn[l]),
      t(`blk.${l}.ffn_gate.weight`, [C.dim, C.hidden], w.w1[l]), t(`blk.${l}.ffn_down.weight`, [C.hidden, C.dim], w.w2[l]),
      t(`blk.${l}.ffn_up.weight`, [C.dim, C.hidden], w.w3[l]));
  }
  if (factors !== null) tensors.push(t('rope_freqs.weight', [HS / 2], Float32Array.from(factors)));
  const metadata = [
    ['general.architecture', 'STRING', 'llama'], ['llama.context_length', 'UINT32', C.ctx], ['llama.embedding_length', 'UINT32', C.dim],
    ['llama.block_count', 'UINT32', C.L], ['llama.feed_forward_length', 'UINT32', C.hidden], ['llama.attention.head_count', 'UINT32', C.nHeads],
    ['llama.attention.head_count_kv', 'UINT32', C.nKv], ['llama.attention.layer_norm_rms_epsilon', 'FLOAT32', eps],
  ];
  if (base !== null) metadata.push(['llama.rope.freq_base', 'FLOAT32', base]);
  // the reference's tables, from the formula (llama.cpp reads the float32 key: base and eps as float32)
  const b = Math.fround(base ?? 10000), cos = new Float64Array(C.ctx * HS / 2), sin = new Float64Array(C.ctx * HS / 2);
  for (let p = 0; p < C.ctx; p++) {
    for (let j = 0; j < HS / 2; j++) {
      const theta = p * b ** (-2 * j / HS) / (factors === null ? 1 : Math.fround(factors[j]));
      cos[p * HS / 2 + j] = Math.cos(theta);
      sin[p * HS / 2 + j] = Math.sin(theta);
    }
  }
  const f64 = (a) => Float64Array.from(a);
  const ref = {
    config: { dim: C.dim, hidden: C.hidden, L: C.L, nHeads: C.nHeads, nKv: C.nKv, vocab: C.vocab, seqLen: C.ctx, hs: HS, kvDim: KV, eps: Math.fround(eps) },
    w: {
      embedding: f64(w.embedding), classifier: f64(w.classifier), rmsFinal: w.rmsFinal, cos, sin, rmsAtt: w.rmsAtt, rmsFfn: w.rmsFfn,
      ...Object.fromEntries(['wq', 'wk', 'wv', 'wo', 'w1', 'w2', 'w3'].map((k) => [k, w[k].map(f64)])),
    },
  };
  return { file: writeGguf({ metadata, tensors }), ref };
}

async function maxError(file, want) {
  const sdpa = await createSdpa({ threads: 1 });
  try {
    const { model } = await loadGguf(sdpa, file);
    const got = model.forward(TOKENS);
    let err = 0, max = 0;
    for (let i = 0; i < want.length; i++) { err = Math.max(err, Math.abs(got[i] - want[i])); max = Math.max(max, Math.abs(want[i])); }
    return { err, tol: 1e-5 * (1 + max) };
  } finally {
    sdpa.dispose();
  }
}

test('rope.freq_base, rope_freqs.weight and the RMS epsilon of the file: logits within 1e-5 (1 + max|logit|) of the float64 forward', async () => {
  const cases = [
    { base: null, eps: 1e-5, factors: null },                                        // llama2.c's defaults: base 10000 absent from the file
    { base: 500000, eps: 1e-6, factors: null },                                      // Llama 3's base and epsilon
    { base: 500000, eps: 1e-5, factors: [1, 1, 1.5, 2.5, 4, 8, 8, 8] },              // Llama 3.1's divisors (low frequencies slowed)
  ];
  for (const c of cases) {
    const { file, ref } = model(c);
    const want = referenceForward(ref, TOKENS);
    const { err, tol } = await maxError(file, want);
    assert.ok(err <= tol, `${JSON.stringify(c)}: max |logit error| ${err} > ${tol}`);
    // the same weights read as if the file said nothing of base / factors are far off: the test sees them
    if (c.base !== null || c.factors !== null) {
      const plain = referenceForward(model({ base: null, eps: c.eps, factors: null }).ref, TOKENS);
      let d = 0;
      for (let i = 0; i < want.length; i++) d = Math.max(d, Math.abs(want[i] - plain[i]));
      assert.ok(d > 100 * tol, `${JSON.stringify(c)}: the file's RoPE changes the logits by ${d} only`);
    }
  }
});

test('a rope_freqs divisor that is zero, negative or not finite is E_FORMAT naming it', async () => {
  const sdpa = await createSdpa({ threads: 1 });
  try {
    for (const bad of [0, -1, Infinity, NaN]) {
      const { file } = model({ base: 500000, eps: 1e-5, factors: [1, 1, 1, bad, 1, 1, 1, 1] });
      let e = null;
      try { await loadGguf(sdpa, file); } catch (x) { e = x; }
      assert.ok(e !== null && e.code === 'E_FORMAT' && /rope_freqs\.weight\[3\]/.test(e.message), `divisor ${bad}: ${e?.code} ${e?.message}`);
    }
  } finally {
    sdpa.dispose();
  }
});

test.run();
