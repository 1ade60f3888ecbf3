#!/usr/bin/env node
// sdpa-llama: generate text with a llama2.c checkpoint or a GGUF file on
// sdpa-wasm's attention (the package's own model by default). The text
// streams to stdout; the speed goes to stderr at the end. --chat talks with a
// GGUF file's chat template, a turn per line of stdin. `sdpa-llama --help`
// lists the options.
import fs from 'node:fs';
import readline from 'node:readline';
import { parseArgs } from 'node:util';
import { createSdpa, SdpaError } from '../js/index.js';
import { loadLlama, loadTokenizer, loadGguf } from '../js/llama/index.js';

const SHIPPED = new URL('../models/fortunes/', import.meta.url);
const HELP = `usage: sdpa-llama [options]
  --prompt TEXT        the text to continue (default: none, the model starts a fortune)
  --model FILE         a GGUF file (architecture llama; its tokenizer and chat template come with it)
  --chat               talk with --model's chat template: each line of stdin is your turn
  --system TEXT        --chat's system message (default: none)
  --checkpoint FILE    a llama2.c checkpoint (default: the package's models/fortunes/model.bin)
  --tokenizer FILE     its tokenizer.bin (default: the package's models/fortunes/tokenizer.bin)
  --steps N            tokens to generate at most (default 256; also stops at EOS and at the context's end)
  --temperature T      0 = greedy (default 1)
  --top-p P            nucleus sampling, 0 or 1 = off (default 0.9)
  --top-k K            only the K most likely tokens, 0 = off (default 0)
  --seed N             the sampler's seed (default: random)
  --dtype D            KV cache dtype: float32 (default), float16, int8, int4
  --key-dtype D, --value-dtype D   K and V each in its own dtype
  --weight-dtype D     a checkpoint's weights in wasm memory: float32 (default), float16, q8_0, q4_0
                       (quantized at load; a GGUF file's stay in the file's types)
  --max-seq-len N      the context (default: the checkpoint's seq_len; a GGUF file's context_length, at most 4096)
  --threads N          attention threads (default 'auto')`;

function parseCli(argv) {
  const { values: a } = parseArgs({
    args: argv,
    options: {
      prompt: { type: 'string', default: '' }, checkpoint: { type: 'string' }, tokenizer: { type: 'string' },
      model: { type: 'string' }, chat: { type: 'boolean' }, system: { type: 'string' },
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

/**
 * --chat: each line of stdin is a user turn. The conversation is rendered by
 * the file's template each turn; the model keeps the tokens it shares with
 * the new rendering (truncate) and reads only the rest.
 */
async function chat(model, tokenizer, stop, a) {
  if (tokenizer.chatTemplate === null) throw new SdpaError('E_ARG', `sdpa-llama: --chat: ${a.model} has no chat template (tokenizer.chat_template)`);
  const messages = a.system ? [{ role: 'system', content: a.system }] : [];
  const sampling = {
    maxNewTokens: num('steps', a.steps), temperature: num('temperature', a.temperature),
    topP: num('top-p', a['top-p']), topK: num('top-k', a['top-k']), stop,
  };
  if (a.seed !== undefined) sampling.seed = num('seed', a.seed);
  let held = [];                                     // the tokens the model holds
  if (process.stdin.isTTY) console.error('a message per line; Ctrl-D ends the chat');
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of rl) {
    messages.push({ role: 'user', content: line });
    const ids = Array.from(await tokenizer.encodeChat(messages, { addGenerationPrompt: true }));
    let keep = 0;
    while (keep < held.length && keep < ids.length - 1 && held[keep] === ids[keep]) keep++;
    model.truncate(keep);
    const reply = [];
    const out = tokenizer.decoder(ids[ids.length - 1]);
    for (const id of model.stream(ids.slice(keep), sampling)) {
      if (stop.includes(id)) break;
      reply.push(id);
      process.stdout.write(out.push(id));
    }
    process.stdout.write(out.end() + '\n');
    held = ids.concat(reply).slice(0, model.length);   // (a reply cut by --steps: its last token is not in the model)
    messages.push({ role: 'assistant', content: tokenizer.decode(reply) });
  }
  return 0;
}

async function run() {
  let a;
  try { a = parseCli(process.argv.slice(2)); } catch (e) { console.error(`sdpa-llama: ${e.message}\n${HELP}`); return 2; }
  if (a.help) { console.log(HELP); return 0; }
  if (a.model !== undefined && (a.checkpoint !== undefined || a.tokenizer !== undefined || a['weight-dtype'] !== undefined)) {
    throw new SdpaError('E_ARG', 'sdpa-llama: --model (a GGUF file) brings its own weights and tokenizer; drop --checkpoint, --tokenizer and --weight-dtype');
  }
  if (a.chat && a.model === undefined) throw new SdpaError('E_ARG', 'sdpa-llama: --chat needs --model, a GGUF file with a chat template');
  const sdpa = await createSdpa({ threads: a.threads === 'auto' ? 'auto' : num('threads', a.threads) });
  try {
    const options = {};
    if (a.dtype !== undefined) options.dtype = a.dtype;
    if (a['key-dtype'] !== undefined) options.keyDtype = a['key-dtype'];
    if (a['value-dtype'] !== undefined) options.valueDtype = a['value-dtype'];
    if (a['weight-dtype'] !== undefined) options.weightDtype = a['weight-dtype'];
    if (a['max-seq-len'] !== undefined) options.maxSeqLen = num('max-seq-len', a['max-seq-len']);
    let model, tokenizer, stop;
    if (a.model !== undefined) {
      const t0 = performance.now();
      // streamed from disk into wasm memory: no copy of the file in JS
      ({ model, tokenizer } = await loadGguf(sdpa, fs.createReadStream(a.model, { highWaterMark: 1 << 20 }), options));
      if (tokenizer === null) throw new SdpaError('E_FORMAT', `sdpa-llama: ${a.model} has no tokenizer (tokenizer.ggml.* keys)`);
      stop = Array.from(tokenizer.stopTokens);
      console.error(`loaded ${a.model} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
      if (a.chat) return await chat(model, tokenizer, stop, a);
    } else {
      const checkpoint = fs.readFileSync(a.checkpoint ?? new URL('model.bin', SHIPPED));
      const tokenizerBytes = fs.readFileSync(a.tokenizer ?? new URL('tokenizer.bin', SHIPPED));
      model = loadLlama(sdpa, checkpoint, options);
      tokenizer = loadTokenizer(tokenizerBytes, { vocabSize: model.config.vocabSize });
    }
    let prompt = a.model !== undefined ? tokenizer.encode(a.prompt) : tokenizer.encode(a.prompt, { bos: true });
    if (prompt.length === 0) {        // (a file that adds no BOS, and no --prompt: start from its BOS if it has one)
      if (tokenizer.bos < 0) throw new SdpaError('E_ARG', `sdpa-llama: ${a.model} adds no BOS and has none; give --prompt`);
      prompt = Int32Array.of(tokenizer.bos);
    }
    const sampling = {
      maxNewTokens: num('steps', a.steps), temperature: num('temperature', a.temperature),
      topP: num('top-p', a['top-p']), topK: num('top-k', a['top-k']),
    };
    if (a.seed !== undefined) sampling.seed = num('seed', a.seed);
    if (stop !== undefined) sampling.stop = stop;
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
