#!/usr/bin/env node
// llamacpp-vs-converter.mjs: llama.cpp reads scripts/llama2c-to-gguf.mjs's files of the shipped
// model: its logits (scripts/llama/llamacpp-logits.cpp, float32 KV cache, 1 thread) against
// loadGguf's over the first 64 tokens of the held-out stream, per type. A one-off check with a
// native llama.cpp build (docs/BUILDING.md section 6), never part of npm test.
//   node scripts/llama/llamacpp-vs-converter.mjs --logits /path/to/llamacpp-logits [--types F32,F16,Q8_0,Q4_0]
// (llama.cpp's F16 / Q8_0 / Q4_0 products round the activations to float16 / q8_0 blocks; ours keep
// them float32: only F32 is expected to agree to float32 rounding.)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createSdpa } from '../../js/index.js';
import { loadGguf } from '../../js/llama/index.js';
import { llama2cToGguf } from '../llama2c-to-gguf.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const { values: a } = parseArgs({ options: { logits: { type: 'string' }, types: { type: 'string', default: 'F32,F16,Q8_0,Q4_0' } } });
if (!a.logits) { console.error('usage: node scripts/llama/llamacpp-vs-converter.mjs --logits /path/to/llamacpp-logits [--types F32,...]'); process.exit(2); }
const ck = new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/model.bin')));
const tk = new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/tokenizer.bin')));
const REF = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/data/llama/reference.json'), 'utf8'));
const toks = REF.streams['heldout-full'].tokens.slice(0, 64);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'llamacpp-vs-'));
const sdpa = await createSdpa({ threads: 1 });
try {
  for (const type of a.types.split(',')) {
    const file = await llama2cToGguf(ck, tk, { type, sdpa, name: 'fortunes' });
    const g = path.join(tmp, `${type}.gguf`), out = path.join(tmp, `${type}.bin`);
    fs.writeFileSync(g, file);
    execFileSync(path.resolve(a.logits), [g, out, ...toks.map(String)], { stdio: ['ignore', 'ignore', 'pipe'] });
    const theirs = new Float32Array(fs.readFileSync(out).buffer.slice(0));
    const { model } = await loadGguf(sdpa, file);
    const ours = model.forward(toks), V = model.config.vocabSize;
    model.dispose();
    let e = 0, m = 0, agree = 0;
    for (let i = 0; i < ours.length; i++) { e = Math.max(e, Math.abs(ours[i] - theirs[i])); m = Math.max(m, Math.abs(theirs[i])); }
    for (let r = 0; r < toks.length; r++) {
      let x = 0, y = 0;
      for (let j = 1; j < V; j++) { if (ours[r * V + j] > ours[r * V + x]) x = j; if (theirs[r * V + j] > theirs[r * V + y]) y = j; }
      if (x === y) agree++;
    }
    console.log(`${type}: ${toks.length} positions x ${V}: max |loadGguf - llama.cpp| ${e.toExponential(2)} (max |logit| ${m.toFixed(2)}); the argmax agrees at ${agree} of ${toks.length}`);
  }
} finally {
  sdpa.dispose();
  fs.rmSync(tmp, { recursive: true, force: true });
}
