// A 4-layer decoder's attention with one KV cache group: a prompt prefilled once,
// forked for two replies, one of them rolled back. (Your model computes q, k, v
// per layer; here they are made-up numbers.)
import { createSdpa } from 'sdpa-wasm';

const sdpa = await createSdpa();
const [Hq, Hkv, D, maxSeqLen] = [8, 2, 64, 512];
// layers 0-2 global, layer 3 a sliding-window layer (as Gemma or Mistral mix them)
const configs = [0, 1, 2, 3].map((i) => (i === 3
  ? { window: 128, numKvHeads: Hkv, headDim: D, maxSeqLen }
  : { maxSeqLen, numKvHeads: Hkv, headDim: D, dtype: 'float16' }));
const prompt = sdpa.createKVCacheGroup(configs);
// all the pages two conversations of maxSeqLen rows can take, before any step
sdpa.reserve(2 * configs.reduce((sum, c) => sum + sdpa.kvCacheSize(c).poolBytes, 0));

const fill = (t, f) => { for (let i = 0; i < t.length; i++) t[i] = f(i); return t; };
const tensor = (S, H, f) => ({ data: fill(new Float32Array(S * H * D), f), dims: [1, S, H, D] });
function layerStep(cache, layer, S, pos) {       // one layer's attention for S new tokens at pos
  const q = tensor(S, Hq, (i) => Math.sin(0.01 * i + layer + pos));
  const k = tensor(S, Hkv, (i) => Math.cos(0.02 * i + layer - pos));
  const v = tensor(S, Hkv, (i) => Math.sin(0.03 * i * (layer + 1) + pos));
  return cache.step(q, k, v);                    // appends at cache.length; causal by default
}

// prefill a 40-token prompt, once
prompt.layers.forEach((cache, layer) => layerStep(cache, layer, 40, 0));
// two replies share the prompt's pages (copy-on-write)
const a = prompt.fork(), b = prompt.fork();
let last;
for (let t = 0; t < 8; t++) a.layers.forEach((cache, layer) => { last = layerStep(cache, layer, 1, 40 + t); });
console.log('reply a:', a.length, 'tokens,', Array.from(last.data.slice(0, 3), (x) => x.toFixed(5)).join(' '));
for (let t = 0; t < 5; t++) b.layers.forEach((cache, layer) => { last = layerStep(cache, layer, 1, 40 + t); });
b.truncate(42);                                  // roll the last 3 tokens of reply b back, in every layer
console.log('reply b:', b.length, 'tokens after a rollback of 3');
console.log('prompt still', prompt.length, 'tokens;', (prompt.bytes / 1024).toFixed(0), 'KiB held by the prompt group');
sdpa.dispose();
