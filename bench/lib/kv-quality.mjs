// kv-quality.mjs: what a KV cache configuration does to a model's next-token logits, against the
// same model with a float32 cache (bench/int4-layout.mjs, bench/dtype-models.mjs; bench/llama.mjs
// has the same measure inline): over windows of held-out tokens, each window one forward of all its
// positions, top-1 agreement with float32, max and mean |logit - float32 logit|, perplexity, and the
// cache's bytes per token (every layer) amortized at 512 and 4,096 tokens (kvCacheSize's poolBytes,
// a float16 newest page included, + the page table).

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadTokenizer } from '../../js/llama/index.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** tests/data/llama/heldout.txt's documents (never trained on), as strings. */
export function heldoutDocs() {
  return fs.readFileSync(path.join(ROOT, 'tests/data/llama/heldout.txt'), 'utf8').replace(/\n$/, '').split('\n%\n');
}

/** The shipped model: { dir, checkpoint (its bytes), tokenizer, held (the held-out text's ids, each document BOS ... EOS) }. */
export function shippedModel() {
  const dir = path.join(ROOT, 'models', 'fortunes');
  const checkpoint = new Uint8Array(fs.readFileSync(path.join(dir, 'model.bin')));
  const tokenizer = loadTokenizer(fs.readFileSync(path.join(dir, 'tokenizer.bin')));
  const held = [];
  for (const d of heldoutDocs()) held.push(...tokenizer.encode(d, { bos: true, eos: true }));
  return { dir, checkpoint, tokenizer, held };
}

/** 'int8/int4+page' -> { keyDtype, valueDtype, float16NewestPage } ('-page': off; neither: the library's default). */
export function kvOptions(spec) {
  const m = /^([^+-]+)([+-]page)?$/.exec(spec);
  if (!m) throw new Error(`bad KV spec ${spec}`);
  const [keyDtype, valueDtype = keyDtype] = m[1].split('/');
  return m[2] ? { keyDtype, valueDtype, float16NewestPage: m[2] === '+page' } : { keyDtype, valueDtype };
}

/** Consecutive windows of S + 1 tokens (S predictions each) of `ids`, at most `max` of them. */
export function windowsOf(ids, S, max = Infinity) {
  const w = [];
  for (let i = 0; i < max && (i + 1) * S + 1 <= ids.length; i++) w.push(ids.slice(i * S, (i + 1) * S + 1));
  return w;
}

/** Bytes per token of every layer's cache at `rows` tokens: (poolBytes + tableBytes) x layers / rows. */
export function bytesPerToken(sdpa, geometry, nLayers, rows) {
  const z = sdpa.kvCacheSize({ ...geometry, maxSeqLen: rows }, rows);
  return nLayers * (z.poolBytes + z.tableBytes) / rows;
}

/**
 * The logits of every window with `model` (model.forward(ids) -> Float32Array [S, V]), reduced against
 * `ref` (the float32 run's per-window logits; null: this run is the reference and is returned in .logits).
 * vocab: the logits' row length.
 */
export function measure(model, windows, vocab, ref) {
  const S = windows[0].length - 1, V = vocab;
  let nll = 0, n = 0, agree = 0, maxErr = 0, maxAbs = 0, sumErr = 0, nErr = 0;
  const logitsOut = ref ? null : [];
  windows.forEach((win, wi) => {
    model.truncate(0);
    const logits = model.forward(win.slice(0, S));
    if (!ref) logitsOut.push(logits.slice());
    const r = ref ? ref[wi] : logits;
    for (let i = 0; i < S; i++) {
      let m = -Infinity, am = 0, rm = -Infinity, arm = 0;
      const o = i * V;
      for (let j = 0; j < V; j++) {
        const x = logits[o + j], y = r[o + j];
        if (x > m) { m = x; am = j; }
        if (y > rm) { rm = y; arm = j; }
        const e = Math.abs(x - y);
        if (e > maxErr) maxErr = e;
        sumErr += e; nErr++;
        if (Math.abs(y) > maxAbs) maxAbs = Math.abs(y);
      }
      let z = 0;
      for (let j = 0; j < V; j++) z += Math.exp(logits[o + j] - m);
      nll += -(logits[o + win[i + 1]] - m - Math.log(z));
      n++;
      if (am === arm) agree++;
    }
  });
  return { ppl: Math.exp(nll / n), agree: agree / n, maxErr, meanErr: sumErr / nErr, maxAbs, predictions: n, logits: logitsOut };
}
