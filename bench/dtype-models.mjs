#!/usr/bin/env node
// The KV cache dtype table (issue 41, item 4) on every model the runner loads in its tests, not only
// the shipped one: every dtype and K/V pair with and without the float16 newest page, against the
// same model with a float32 cache: top-1 agreement, max and mean |logit - float32 logit|, perplexity,
// bytes per token (all layers) amortized at 512 and 4,096 tokens (kvCacheSize's poolBytes, the
// float16 page included, + the page table; at the model's context when it is shorter, marked).
// The models:
//   * the shipped model (models/fortunes, float32 weights; also bench/llama.mjs's table)
//   * tests/data/gguf/fortunes-{Q8_0,Q4_0,Q4_K_M}.gguf (the shipped model quantized: tests/js/gguf*.test.js)
//   * random weights as tests/js/gguf.test.js makes them (scripts/random-gguf.mjs): 'tiny' (head size
//     16, Q8_0) and its 'wide' variant (dim 256, head size 64, Q4_K)
// The text: tests/data/llama/heldout.txt (never trained on) in the model's own tokenizer (the random
// models' vocabularies are random, so their perplexity means nothing; their agreement and logit error
// do: how far each cache moves the same computation).
// usage: node bench/dtype-models.mjs [--windows=8] [--models=shipped,q8_0,q4_0,q4_k_m,tiny,wide]
//          [--kv=float16,int8-page,int8+page,...] [--json]
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa } from '../js/index.js';
import { loadLlama, loadGguf } from '../js/llama/index.js';
import { randomGguf, SHAPES } from '../scripts/random-gguf.mjs';
import { kvOptions, windowsOf, bytesPerToken, measure, heldoutDocs, shippedModel } from './lib/kv-quality.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const arg = (k, d) => { const a = argv.find((x) => x.startsWith(`--${k}=`)); return a ? a.slice(k.length + 3) : d; };
const WINDOWS = Number(arg('windows', 8));
const MODELS = arg('models', 'shipped,q8_0,q4_0,q4_k_m,tiny,wide').split(',');
const KV = ['float32', ...arg('kv', 'float16,int8-page,int8+page,int4-page,int4+page,int8/int4-page,int8/int4+page,float16/int4-page,float16/int4+page').split(',')];
const note = (s) => process.stderr.write(s + '\n');
const text = heldoutDocs();

const sdpa = await createSdpa({ threads: 2 });
const wide = { ...SHAPES.tiny, dim: 256, nHeads: 4, nKvHeads: 2, hiddenDim: 512 };   // (tests/js/gguf.test.js's)

/** name -> { label, load(kv) -> model, encode(doc) -> ids } */
function source(name) {
  if (name === 'shipped') {
    const { checkpoint, tokenizer } = shippedModel();
    return { label: 'shipped model (models/fortunes, float32 weights)', load: async (kv) => loadLlama(sdpa, checkpoint, kv), encode: (d) => tokenizer.encode(d, { bos: true, eos: true }) };
  }
  const gguf = { q8_0: 'fortunes-Q8_0.gguf', q4_0: 'fortunes-Q4_0.gguf', q4_k_m: 'fortunes-Q4_K_M.gguf' }[name];
  const bytes = gguf ? new Uint8Array(fs.readFileSync(path.join(ROOT, 'tests/data/gguf', gguf)))
    : name === 'tiny' ? randomGguf({ shape: 'tiny', type: 'Q8_0', seed: 3 })
      : name === 'wide' ? randomGguf({ shape: wide, type: 'Q4_K', seed: 3 }) : null;
  if (!bytes) throw new Error(`unknown model ${name}`);
  const label = gguf ? `tests/data/gguf/${gguf}` : name === 'tiny' ? "random weights, scripts/random-gguf.mjs 'tiny' Q8_0" : "random weights, 'tiny' widened to dim 256 (tests/js/gguf.test.js), Q4_K";
  let tok = null;
  return {
    label,
    load: async (kv) => { const r = await loadGguf(sdpa, bytes, kv); tok ??= r.tokenizer; return r.model; },
    encode: (d) => tok.encode(d, { bos: true }),
  };
}

const out = [];
for (const name of MODELS) {
  const src = source(name);
  let ref = null, windows = null;
  const rows = [];
  const t0 = Date.now();
  for (const spec of KV) {
    const kv = kvOptions(spec);
    const model = await src.load(kv);
    const c = model.config, D = c.dim / c.nHeads, S = Math.min(512, model.maxSeqLen);
    if (!windows) {
      const ids = [];
      for (const d of text) { ids.push(...src.encode(d)); if (ids.length > (WINDOWS + 1) * S + 1) break; }
      windows = windowsOf(ids, S, WINDOWS);
    }
    const r = measure(model, windows, c.vocabSize, ref);
    if (!ref) ref = r.logits;
    const geometry = { numKvHeads: c.nKvHeads, headDim: D, ...kv };
    rows.push({ kv: spec, float16NewestPage: model.float16NewestPage, bytes512: bytesPerToken(sdpa, geometry, c.nLayers, 512),
      bytes4096: bytesPerToken(sdpa, geometry, c.nLayers, 4096), ...r, logits: undefined });
    model.dispose();
    note(`dtype-models: ${name} ${spec}: ${(100 * r.agree).toFixed(2)}%, max ${r.maxErr.toFixed(3)} (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  }
  const m = await src.load({});
  const c = m.config;
  out.push({ name, label: src.label, shape: { dim: c.dim, nLayers: c.nLayers, nHeads: c.nHeads, nKvHeads: c.nKvHeads, headDim: c.dim / c.nHeads, vocab: c.vocabSize }, windows: windows.length, windowTokens: windows[0].length - 1, rows });
  m.dispose();
}
sdpa.dispose();

if (argv.includes('--json')) console.log(JSON.stringify(out, null, 1));
else {
  for (const m of out) {
    const s = m.shape;
    console.log(`\n#### ${m.label}: ${s.nLayers} layers, ${s.nHeads} / ${s.nKvHeads} heads of ${s.headDim}, vocab ${s.vocab}; ${m.windows} windows of ${m.windowTokens} tokens = ${m.rows[0].predictions} predictions\n`);
    console.log('| K / V | float16 newest page | bytes per token, all layers (512 / 4,096) | perplexity | top-1 agreement with float32 | max / mean \\|logit − float32\\| |');
    console.log('|---|---|---|---|---|---|');
    for (const r of m.rows) {
      const page = r.kv === 'float32' || r.kv === 'float16' ? '-' : r.float16NewestPage ? 'yes' : 'no';
      console.log(`| ${r.kv.replace(/[+-]page$/, '')} | ${page} | ${r.bytes512.toFixed(0)} / ${r.bytes4096.toFixed(0)} | ${r.ppl.toFixed(3)} | ${(100 * r.agree).toFixed(2)}% | ${r.maxErr.toFixed(3)} / ${r.meanErr.toExponential(2)} |`);
    }
  }
}
