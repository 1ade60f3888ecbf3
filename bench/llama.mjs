#!/usr/bin/env node
// The shipped model (models/fortunes) on sdpa-wasm/llama, in one run:
//  1. speed: prompt and decode tokens/s at a short, middle and full context, on 1
//     and 2 threads, with the share of a step in our attention vs the dense parts
//     (JS), against what bounds the dense part: the same JS matrix-vector product
//     over the model's weights, timed alone in this run;
//  2. what each KV cache dtype does to the model: on held-out text
//     (tests/data/llama/heldout.txt, never trained on) in windows of the full
//     context, perplexity, top-1 agreement with float32 and the largest logit error.
// Medians over rounds; times never fail anything.
// usage: npm run bench:llama [-- --rounds=7 --windows=8 --threads=1,2 --no-speed --no-quality]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa } from '../js/index.js';
import { loadLlama, loadTokenizer } from '../js/llama/index.js';
import { matmul } from '../js/llama/dense.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (k, d) => (process.argv.find((a) => a.startsWith(`--${k}=`)) ?? `=${d}`).split('=')[1];
const flag = (k) => process.argv.includes(`--${k}`);
const ROUNDS = Number(arg('rounds', 7));
const WINDOWS = Number(arg('windows', 8));
const THREADS = arg('threads', '1,2').split(',').map(Number);
const DTYPES = ['float32', 'float16', 'int8', 'int4', 'int8/int4', 'float16/int4'];

const checkpoint = new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/model.bin')));
const tokenizer = loadTokenizer(fs.readFileSync(path.join(ROOT, 'models/fortunes/tokenizer.bin')));
const docs = fs.readFileSync(path.join(ROOT, 'tests/data/llama/heldout.txt'), 'utf8').replace(/\n$/, '').split('\n%\n');
const held = [];
for (const d of docs) held.push(...tokenizer.encode(d, { bos: true, eos: true }));

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const log = (s) => process.stdout.write(s + '\n');

log(`sdpa-wasm/llama bench  ${new Date().toISOString()}  ${os.cpus()[0]?.model?.trim()} (${os.cpus().length} vCPU)  node ${process.version}  load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);

/** The dense part's bound: the JS matmul over matrices of the model's shapes, one token, timed alone (median of 5). */
function makeDenseAlone(c) {
  const hs = c.dim / c.nHeads, kv = c.nKvHeads * hs;
  const shapes = [];
  for (let l = 0; l < c.nLayers; l++) shapes.push([c.dim, c.dim], [c.dim, kv], [c.dim, kv], [c.dim, c.dim], [c.dim, c.hiddenDim], [c.dim, c.hiddenDim], [c.hiddenDim, c.dim]);
  shapes.push([c.dim, c.vocabSize]);
  const macs = shapes.reduce((n, [i, o]) => n + i * o, 0);
  const w = new Float32Array(macs).map((_, i) => Math.sin(i));   // the model's size: read from memory as the model's are
  const x = new Float32Array(Math.max(c.dim, c.hiddenDim)).fill(0.5), y = new Float32Array(Math.max(c.dim, c.hiddenDim, c.vocabSize));
  return () => {
    const times = [];
    for (let r = 0; r < 5; r++) {
      const t0 = performance.now();
      let off = 0;
      for (const [din, dout] of shapes) { matmul(y, 0, x, 0, w, off, 1, din, dout, false); off += din * dout; }
      times.push(performance.now() - t0);
    }
    return { ms: median(times), macs };
  };
}

async function speed() {
  const contexts = [['short', 32], ['middle', 256], ['full', 512 - 17]];
  log(`\n## Speed (float32 KV cache; ${ROUNDS} rounds, every row of a round measured in turn, so a slow phase of the host lands in all rows; medians)`);
  log('Prompt: one forward of P held-out tokens; decode: the 16 steps after it. Dense bound: the same JS matrix-vector products over the model\'s matrix shapes, timed alone in each round.');
  log('| threads | context | prompt tokens/s (P tokens) | decode tokens/s | decode ms/token | attention share of a decode step | dense part / dense bound (same round) |');
  log('|---|---|---|---|---|---|---|');
  const runs = [];
  for (const threads of THREADS) {
    const sdpa = await createSdpa({ threads });
    const model = loadLlama(sdpa, checkpoint);
    const out = new Float32Array(model.config.vocabSize), one = new Int32Array(1);
    model.forward(held.slice(0, 64));                  // warm-up: the JIT compiles the dense loops
    for (let i = 64; i < 128; i++) { one[0] = held[i]; model.forward(one, { out }); }
    runs.push({ threads, sdpa, model, out, one, rows: contexts.map(([name, P]) => ({ name, P, prompt: [], decode: [], share: [], ratio: [] })) });
  }
  const denseAlone = makeDenseAlone(runs[0].model.config);
  denseAlone();
  const bound = [];
  for (let r = 0; r < ROUNDS; r++) {
    const b = denseAlone();
    bound.push(b.ms);
    for (const run of runs) {
      for (const row of run.rows) {
        const { model, out, one } = run;
        model.truncate(0);
        const t0 = performance.now();
        model.forward(held.slice(0, row.P), { logits: 'last' });
        row.prompt.push(performance.now() - t0);
        for (let i = 0; i < 16; i++) {
          one[0] = held[row.P + i];
          const t = performance.now();
          model.forward(one, { out });
          const ms = performance.now() - t;
          row.decode.push(ms);
          const tm = model.timing;
          row.share.push(tm.attentionMs / (tm.attentionMs + tm.denseMs));
          row.ratio.push(tm.denseMs / b.ms);
        }
      }
    }
  }
  for (const run of runs) {
    for (const row of run.rows) {
      const ms = median(row.decode);
      log(`| ${run.threads} | ${row.name} (${row.P}..${row.P + 16}) | ${(row.P / median(row.prompt) * 1000).toFixed(0)} | ${(1000 / ms).toFixed(0)} | ${ms.toFixed(2)} | ${(100 * median(row.share)).toFixed(1)}% | ${median(row.ratio).toFixed(2)}x |`);
    }
    run.model.dispose();
    run.sdpa.dispose();
  }
  const b = median(bound), macs = denseAlone().macs;
  log(`\nThe dense bound: ${b.toFixed(2)} ms per token (median; ${(bound.length)} rounds from ${Math.min(...bound).toFixed(2)} to ${Math.max(...bound).toFixed(2)} ms) for ` +
    `${(macs / 1e6).toFixed(2)} M multiply-adds: scalar JS (double arithmetic on float32 loads). A decode step reads the ${(checkpoint.byteLength / 1e6).toFixed(1)} MB of weights once: ` +
    `at ${(checkpoint.byteLength / b / 1e6).toFixed(1)} GB/s, far below memory bandwidth, so the step is compute-bound in JS, not memory-bound.`);
}

async function quality() {
  const sdpa = await createSdpa({ threads: 2 });
  const V = tokenizer.vocabSize, S = 512;
  const windows = [];
  for (let w = 0; w < WINDOWS && (w + 1) * S + 1 <= held.length; w++) windows.push(held.slice(w * S, (w + 1) * S + 1));
  const base = [];
  const res = [];
  for (const dt of DTYPES) {
    const [keyDtype, valueDtype = keyDtype] = dt.split('/');
    const model = loadLlama(sdpa, checkpoint, { keyDtype, valueDtype });
    let nll = 0, n = 0, agree = 0, maxErr = 0, maxAbs = 0;
    windows.forEach((win, wi) => {
      model.truncate(0);
      const logits = model.forward(win.slice(0, S));
      if (dt === 'float32') base[wi] = logits;
      const ref = base[wi];
      for (let i = 0; i < S; i++) {
        const row = logits.subarray(i * V, (i + 1) * V), rrow = ref.subarray(i * V, (i + 1) * V);
        let m = -Infinity, am = 0, rm = -Infinity, arm = 0;
        for (let j = 0; j < V; j++) {
          if (row[j] > m) { m = row[j]; am = j; }
          if (rrow[j] > rm) { rm = rrow[j]; arm = j; }
          maxErr = Math.max(maxErr, Math.abs(row[j] - rrow[j]));
          maxAbs = Math.max(maxAbs, Math.abs(rrow[j]));
        }
        let z = 0;
        for (let j = 0; j < V; j++) z += Math.exp(row[j] - m);
        nll += -(row[win[i + 1]] - m - Math.log(z));
        n++;
        if (am === arm) agree++;
      }
    });
    const r = { dtype: dt, bytesPerToken: model.bytes / model.length, ppl: Math.exp(nll / n), agree: agree / n, maxErr, maxAbs, tokens: n };
    res.push(r);
    model.dispose();
  }
  sdpa.dispose();
  log(`\n## What a KV cache dtype does to the model (held-out text: ${windows.length} windows of ${S} tokens = ${res[0].tokens} predictions; each window one forward)`);
  log('| KV dtype (K / V) | cache bytes per token (all layers) | perplexity | top-1 agreement with float32 | max \\|logit − float32 logit\\| |');
  log('|---|---|---|---|---|');
  for (const r of res) {
    log(`| ${r.dtype} | ${r.bytesPerToken.toFixed(0)} | ${r.ppl.toFixed(3)} | ${(100 * r.agree).toFixed(2)}% | ${r.maxErr.toExponential(2)} (max \\|logit\\| ${r.maxAbs.toFixed(1)}) |`);
  }
  return res;
}

if (!flag('no-speed')) await speed();
if (!flag('no-quality')) await quality();
