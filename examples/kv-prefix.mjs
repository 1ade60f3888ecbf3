// A long system prompt's KV cache, computed once and saved to a file; later (another
// process, another day) it is loaded and forked for each request, instead of
// prefilling the prompt again. The meta says which model the cache belongs to, so a
// cache saved for another model is refused. (Your model computes q, k, v; here they
// are made-up numbers.)
import { createSdpa } from 'sdpa-wasm';
import { writeFile, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [Hq, Hkv, D] = [8, 2, 64];
const MODEL = { model: 'example-8x2x64', tokenizer: 'sha256:0123' };
const file = join(tmpdir(), `sdpa-prefix-${process.pid}.kv`);
const tensor = (S, H, f) => ({ data: new Float32Array(S * H * D).map((_, i) => f(i)), dims: [1, S, H, D] });
const step = (cache, S, seed) => cache.step(
  tensor(S, Hq, (i) => Math.sin(0.01 * i + seed)), tensor(S, Hkv, (i) => Math.cos(0.02 * i - seed)), tensor(S, Hkv, (i) => Math.sin(0.03 * i + seed)));

// 1. prefill the system prompt once, and save it
{
  const sdpa = await createSdpa();
  const prompt = sdpa.createKVCache({ maxSeqLen: 4096, numKvHeads: Hkv, headDim: D, dtype: 'float16' });
  step(prompt, 300, 1);                                       // the 300-token system prompt
  await writeFile(file, prompt.save({ meta: MODEL }));        // (or stream: prompt.saveStream())
  console.log(`saved ${prompt.length} rows`);
  sdpa.dispose();
}

// 2. later: load it once, fork it per request
const sdpa = await createSdpa();
const { cache: prefix, meta } = await sdpa.loadKVCache(await readFile(file));
if (meta.model !== MODEL.model || meta.tokenizer !== MODEL.tokenizer) throw new Error('a cache of another model');
console.log(`loaded ${prefix.length} rows of ${meta.model}`);
for (const request of [1, 2, 3]) {
  const conv = prefix.fork();                                 // shares the prompt's pages, copy-on-write
  let out;
  for (let t = 0; t < 5; t++) out = step(conv, 1, 10 * request + t);   // this request's tokens
  console.log(`request ${request}: ${conv.length} rows, out[0..2] = ${Array.from(out.data.slice(0, 3), (x) => x.toFixed(4)).join(', ')}`);
  conv.dispose();
}
console.log(`the prefix still has ${prefix.length} rows`);
sdpa.dispose();
await rm(file);
