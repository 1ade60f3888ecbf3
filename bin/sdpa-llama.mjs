#!/usr/bin/env node
// sdpa-llama: generate text with a llama2.c checkpoint on sdpa-wasm's attention
// (the package's own model by default). The text streams to stdout; the speed
// goes to stderr at the end. `sdpa-llama --help` lists the options.
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { createSdpa, SdpaError } from '../js/index.js';
import { loadLlama, loadTokenizer } from '../js/llama/index.js';

const SHIPPED = new URL('../models/fortunes/', import.meta.url);
const HELP = `usage: sdpa-llama [options]
  --prompt TEXT        the text to continue (default: none, the model starts a fortune)
  --checkpoint FILE    a llama2.c checkpoint (default: the package's models/fortunes/model.bin)
  --tokenizer FILE     its tokenizer.bin (default: the package's models/fortunes/tokenizer.bin)
  --steps N            tokens to generate at most (default 256; also stops at EOS and at the context's end)
  --temperature T      0 = greedy (default 1)
  --top-p P            nucleus sampling, 0 or 1 = off (default 0.9)
  --top-k K            only the K most likely tokens, 0 = off (default 0)
  --seed N             the sampler's seed (default: random)
  --dtype D            KV cache dtype: float32 (default), float16, int8, int4
  --key-dtype D, --value-dtype D   K and V each in its own dtype
  --weight-dtype D     the weights in wasm memory: float32 (default), float16, q8_0, q4_0 (quantized at load)
  --max-seq-len N      the context (default: the checkpoint's seq_len)
  --threads N          attention threads (default 'auto')`;

function parseCli(argv) {
  const { values: a } = parseArgs({
    args: argv,
    options: {
      prompt: { type: 'string', default: '' }, checkpoint: { type: 'string' }, tokenizer: { type: 'string' },
      steps: { type: 'string', default: '256' }, temperature: { type: 'string', default: '1' },
      'top-p': { type: 'string', default: '0.9' }, 'top-k': { type: 'string', default: '0' }, seed: { type: 'string' },
      dtype: { type: 'string' }, 'key-dtype': { type: 'string' }, 'value-dtype': { type: 'string' }, 'weight-dtype': { type: 'string' },
      'max-seq-len': { type: 'string' }, threads: { type: 'string', default: 'auto' }, help: { type: 'boolean', short: 'h' },
    },
  });
  return a;
}

const num = (name, s) => {
  const v = Number(s);
  if (s === undefined || s === '' || !Number.isFinite(v)) throw new SdpaError('E_ARG', `sdpa-llama: --${name} must be a number, got '${s}'`);
  return v;
};

async function run() {
  let a;
  try { a = parseCli(process.argv.slice(2)); } catch (e) { console.error(`sdpa-llama: ${e.message}\n${HELP}`); return 2; }
  if (a.help) { console.log(HELP); return 0; }
  const checkpoint = fs.readFileSync(a.checkpoint ?? new URL('model.bin', SHIPPED));
  const tokenizerBytes = fs.readFileSync(a.tokenizer ?? new URL('tokenizer.bin', SHIPPED));
  const sdpa = await createSdpa({ threads: a.threads === 'auto' ? 'auto' : num('threads', a.threads) });
  try {
    const options = {};
    if (a.dtype !== undefined) options.dtype = a.dtype;
    if (a['key-dtype'] !== undefined) options.keyDtype = a['key-dtype'];
    if (a['value-dtype'] !== undefined) options.valueDtype = a['value-dtype'];
    if (a['weight-dtype'] !== undefined) options.weightDtype = a['weight-dtype'];
    if (a['max-seq-len'] !== undefined) options.maxSeqLen = num('max-seq-len', a['max-seq-len']);
    const model = loadLlama(sdpa, checkpoint, options);
    const tokenizer = loadTokenizer(tokenizerBytes, { vocabSize: model.config.vocabSize });
    const prompt = tokenizer.encode(a.prompt, { bos: true });
    const sampling = {
      maxNewTokens: num('steps', a.steps), temperature: num('temperature', a.temperature),
      topP: num('top-p', a['top-p']), topK: num('top-k', a['top-k']),
    };
    if (a.seed !== undefined) sampling.seed = num('seed', a.seed);
    const t0 = performance.now();
    const it = model.stream(prompt, sampling);       // checks the options and appends the prompt
    const out = tokenizer.decoder();
    let text = '';
    for (const id of prompt) text += out.push(id);
    process.stdout.write(text);
    let first = 0, n = 0, attention = 0, products = 0, other = 0;
    for (let r = it.next(); !r.done; r = it.next()) {
      if (n === 0) first = performance.now();
      else { const t = model.timing; attention += t.attentionMs; products += t.productsMs; other += t.otherMs; }
      n++;
      process.stdout.write(out.push(r.value));
    }
    process.stdout.write(out.end() + '\n');
    const end = performance.now();
    const prefill = (first - t0) / 1000, decode = (end - first) / 1000;
    const info = sdpa.info;
    const pct = (x) => `${(100 * x / (attention + products + other)).toFixed(0)}%`;
    console.error(`${prompt.length} prompt tokens at ${(prompt.length / prefill).toFixed(1)} tokens/s, ` +
      `${n} generated at ${n > 1 ? ((n - 1) / decode).toFixed(1) : '-'} tokens/s` +
      `${n > 1 ? ` (a step: attention ${pct(attention)}, weight products ${pct(products)}, the rest ${pct(other)})` : ''}; ` +
      `${model.weightDtype} weights, ` +
      `${model.keyDtype === model.valueDtype ? model.keyDtype : `K ${model.keyDtype} + V ${model.valueDtype}`} KV cache, ` +
      `${info.build} build, ${info.threads} thread${info.threads > 1 ? 's' : ''}`);
    return 0;
  } finally {
    sdpa.dispose();
  }
}

run().then((code) => { process.exitCode = code; }, (e) => {
  console.error(e instanceof SdpaError ? `sdpa-llama: ${e.code}: ${e.message}` : e);
  process.exitCode = 1;
});
