#!/usr/bin/env node
// Development aid for the llama peers (not a test; times never fail anything): builds
// llama2.c's run.c to wasm (bench/lib/runc.mjs), runs it on the shipped model
// (models/fortunes) and on a random-weight model of SmolLM2-135M's shape
// (bench/lib/random-llama.mjs, written to a temp dir in os.tmpdir(), deleted after), and
// prints run.c's tok/s (its "achieved tok/s") and our decode-only tok/s, medians over --runs.
// With --js, the same greedy runs on this package's loader (js/llama): its tok/s, and whether
// its text is run.c's (both printable-filtered: run.c skips unprintable bytes).
// usage: node bench/peer-smoke.mjs --runc=/path/to/llama2.c/run.c
//          [--runs=3 --steps=511 --big-steps=64 --prompt="You will" --js --threads=1 --no-big]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildRunC, runRunC, defaultRunCDir } from './lib/runc.mjs';
import { SHIPPED, SMOLLM2_135M, writeRandomCheckpoint, writeTokenizer } from './lib/random-llama.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (k, d) => { const a = process.argv.find((x) => x.startsWith(`--${k}=`)); return a ? a.slice(k.length + 3) : d; };
const flag = (k) => process.argv.includes(`--${k}`);
const RUNC = arg('runc');
const RUNS = Number(arg('runs', 3));
const STEPS = Number(arg('steps', 511));
const BIG_STEPS = Number(arg('big-steps', 64));
const PROMPT = arg('prompt', 'You will');
const THREADS = Number(arg('threads', 1));
if (!RUNC) {
  console.error('usage: node bench/peer-smoke.mjs --runc=/path/to/llama2.c/run.c [--runs=3 --steps=511 --big-steps=64 --prompt="You will" --js --threads=1 --no-big]');
  process.exit(2);
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const fmt = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
const printable = (s) => s.replace(/<\/?s>|<unk>/g, '').replace(/[^\x20-\x7e\t\n\r]/g, '');

const { jsPath, built } = await buildRunC(RUNC, defaultRunCDir);
console.log(`run.c: ${built ? 'built' : 'up to date'}: ${path.relative(ROOT, jsPath)} (emcc -O3 -msimd128 -ffast-math, 1 thread)`);

let sdpa = null;
async function jsRun(modelPath, tokenizerPath, { vocabSize, seqLen }, steps, runcText) {
  try {
    const { createSdpa } = await import('../js/index.js');
    const { loadLlama, loadTokenizer } = await import('../js/llama/index.js');
    sdpa ??= await createSdpa({ threads: THREADS });
    const model = loadLlama(sdpa, fs.readFileSync(modelPath), { maxSeqLen: Math.min(steps + 1, seqLen) });
    const tok = loadTokenizer(fs.readFileSync(tokenizerPath), { vocabSize });
    const ids = tok.encode(PROMPT);
    const rates = [];
    let text = '';
    for (let r = 0; r < RUNS; r++) {
      model.truncate(0);
      model.forward(ids, { logits: 'last' });
      const t0 = performance.now();
      const g = model.generate([], { temperature: 0, maxNewTokens: steps - ids.length + 1, stop: [] });
      rates.push(g.tokens.length / (performance.now() - t0) * 1000);
      text = tok.decode([...ids, ...g.tokens]);
    }
    model.dispose();
    const a = printable(text), b = printable(runcText);
    let k = 0;
    while (k < Math.min(a.length, b.length) && a[k] === b[k]) k++;
    const same = k === a.length && k === b.length;
    console.log(`  js/llama (${THREADS} thread${THREADS > 1 ? 's' : ''}): decode ${fmt(median(rates))} tok/s (runs: ${rates.map(fmt).join(', ')});` +
      ` text ${same ? "is run.c's" : `agrees with run.c's for ${k} of ${b.length} characters`}`);
  } catch (e) {
    console.log(`  js/llama: failed: ${e.message.split('\n')[0]}`);
  }
}

function peer(label, modelPath, tokenizerPath, steps) {
  const rs = [];
  for (let r = 0; r < RUNS; r++) rs.push(runRunC(jsPath, modelPath, tokenizerPath, { prompt: PROMPT, steps, temperature: 0 }));
  const { promptTokens, decodeForwards, decodeFrom, text } = rs[0];
  console.log(`${label}: prompt ${JSON.stringify(PROMPT)} (${promptTokens} tokens with BOS), ${steps} steps, greedy, ${RUNS} runs`);
  console.log(`  run.c: achieved ${fmt(median(rs.map((r) => r.tokS)))} tok/s (runs: ${rs.map((r) => fmt(r.tokS)).join(', ')});` +
    ` decode-only ${fmt(median(rs.map((r) => r.decodeTokS)))} tok/s (${decodeForwards} forwards from pos ${decodeFrom})`);
  console.log(`  text: ${JSON.stringify(text.length > 100 ? text.slice(0, 100) + '…' : text)}`);
  return text;
}

const fortunes = path.join(ROOT, 'models', 'fortunes');
const fText = peer(`models/fortunes (dim ${SHIPPED.dim}, ${SHIPPED.nLayers} layers, vocab ${SHIPPED.vocabSize})`,
  path.join(fortunes, 'model.bin'), path.join(fortunes, 'tokenizer.bin'), STEPS);
if (flag('js')) await jsRun(path.join(fortunes, 'model.bin'), path.join(fortunes, 'tokenizer.bin'), SHIPPED, STEPS, fText);

if (!flag('no-big')) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-peer-smoke-'));
  const cleanup = () => fs.rmSync(dir, { recursive: true, force: true });
  for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { cleanup(); process.exit(130); });
  try {
    const m = path.join(dir, 'model.bin'), t = path.join(dir, 'tokenizer.bin');
    const t0 = performance.now();
    const { bytes } = writeRandomCheckpoint(m, { ...SMOLLM2_135M, seed: 1 });
    writeTokenizer(t, SMOLLM2_135M.vocabSize);
    console.log(`random SmolLM2-135M shape: ${(bytes / 1e6).toFixed(0)} MB written in ${((performance.now() - t0) / 1e3).toFixed(1)} s`);
    const s = SMOLLM2_135M;
    const bText = peer(`random model (dim ${s.dim}, ${s.nLayers} layers, ${s.nHeads}/${s.nKvHeads} heads, hidden ${s.hiddenDim}, vocab ${s.vocabSize})`, m, t, BIG_STEPS);
    if (flag('js')) await jsRun(m, t, s, BIG_STEPS, bText);
  } finally {
    cleanup();
  }
}
