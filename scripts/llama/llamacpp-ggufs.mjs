#!/usr/bin/env node
// llamacpp-ggufs.mjs: regenerates tests/data/gguf/ — the shipped model as GGUF
// files that llama.cpp wrote (not our converter), and the logits a float64
// forward gives over llama.cpp's own dequantization of each. A tool for
// regenerating committed test data (as scripts/llama/*.py are), never a
// dependency of npm test: it needs a native llama.cpp build
// (docs/BUILDING.md, "llama.cpp for test data").
//
//   node scripts/llama/llamacpp-ggufs.mjs --llama-cpp /path/to/llama.cpp/build/bin
//
// For each type: llama-convert-llama2c-to-ggml (models/fortunes/model.bin with
// its tokenizer.bin as the vocab) -> F32 GGUF; llama-quantize -> the type
// (Q4_0 keeps output.weight in Q6_K; Q4_K_M mixes Q4_K, Q6_K and, for the
// 640-wide rows that are no multiple of 256, Q5_0 and Q8_0); llama-quantize
// --allow-requantize back to F32 = llama.cpp's dequantization; then
// tests/js/llama-reference.js's forward over those weights, in doubles.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parseGguf } from '../../js/llama/gguf.js';
import { loadTokenizer } from '../../js/llama/tokenizer.js';
import { referenceForward } from '../../tests/js/llama-reference.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const OUT = path.join(ROOT, 'tests', 'data', 'gguf');
const TYPES = ['Q8_0', 'Q4_0', 'Q4_K_M'];
const TEXT = 'You will find a way, my friend. It is 42 times better!';

const { values: a } = parseArgs({ options: { 'llama-cpp': { type: 'string' } } });
if (!a['llama-cpp']) { console.error('usage: node scripts/llama/llamacpp-ggufs.mjs --llama-cpp DIR (its build/bin)'); process.exit(2); }
const BIN = path.resolve(a['llama-cpp']);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'llamacpp-ggufs-'));
const run = (tool, args) => {
  const r = spawnSync(path.join(BIN, tool), args, { env: { ...process.env, LD_LIBRARY_PATH: BIN }, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${tool} ${args.join(' ')}: exit ${r.status}\n${r.stderr.slice(-2000)}`);
};

/** The reference's { config, w } from an F32 GGUF (llama.cpp's names; ne = [cols, rows]). */
function weightsOf(file) {
  const bytes = fs.readFileSync(file);
  const h = parseGguf(bytes, 'llamacpp-ggufs', bytes.length);
  const m = h.metadata, t = new Map(h.tensors.map((x) => [x.name, x]));
  const f32 = (name) => {
    const x = t.get(name);
    if (x.type !== 'F32') throw new Error(`${name} is ${x.type}; expected F32`);
    const at = h.dataOffset + x.offset;
    return new Float64Array(new Float32Array(bytes.buffer.slice(bytes.byteOffset + at, bytes.byteOffset + at + x.bytes)));
  };
  const dim = m.get('llama.embedding_length'), L = m.get('llama.block_count'), nHeads = m.get('llama.attention.head_count');
  const nKv = m.get('llama.attention.head_count_kv'), hidden = m.get('llama.feed_forward_length');
  const vocab = t.get('token_embd.weight').ne[1], hs = dim / nHeads, seqLen = m.get('llama.context_length');
  const layers = (g) => Array.from({ length: L }, (_, l) => f32(`blk.${l}.${g}.weight`));
  const cos = new Float64Array(seqLen * hs / 2), sin = new Float64Array(seqLen * hs / 2);
  for (let p = 0; p < seqLen; p++) {
    for (let j = 0; j < hs / 2; j++) {
      const angle = p * 10000 ** (-2 * j / hs);
      cos[p * hs / 2 + j] = Math.cos(angle);
      sin[p * hs / 2 + j] = Math.sin(angle);
    }
  }
  const w = {
    embedding: f32('token_embd.weight'), wq: layers('attn_q'), wk: layers('attn_k'), wv: layers('attn_v'), wo: layers('attn_output'),
    w1: layers('ffn_gate'), w2: layers('ffn_down'), w3: layers('ffn_up'), rmsAtt: layers('attn_norm'), rmsFfn: layers('ffn_norm'),
    rmsFinal: f32('output_norm.weight'), cos, sin,
  };
  w.classifier = t.has('output.weight') ? f32('output.weight') : w.embedding;
  return { config: { dim, hidden, L, nHeads, nKv, vocab, seqLen, hs, kvDim: nKv * hs }, w };
}

const model = path.join(ROOT, 'models', 'fortunes', 'model.bin'), vocab = path.join(ROOT, 'models', 'fortunes', 'tokenizer.bin');
const f32 = path.join(tmp, 'f32.gguf');
run('llama-convert-llama2c-to-ggml', ['--llama2c-model', model, '--copy-vocab-from-model', vocab, '--llama2c-output-model', f32]);
const tokenizer = loadTokenizer(fs.readFileSync(vocab), { vocabSize: 512 });
const tokens = Array.from(tokenizer.encode(TEXT, { bos: true }));
fs.mkdirSync(OUT, { recursive: true });
const reference = { text: TEXT, tokens, made: 'scripts/llama/llamacpp-ggufs.mjs with llama.cpp c392e50 (Feb 2025)', files: {} };
for (const type of TYPES) {
  const q = path.join(OUT, `fortunes-${type}.gguf`), back = path.join(tmp, `${type}-f32.gguf`);
  run('llama-quantize', [f32, q, type]);
  run('llama-quantize', ['--allow-requantize', q, back, 'F32']);
  const logits = Float32Array.from(referenceForward(weightsOf(back), tokens));
  const h = parseGguf(fs.readFileSync(q), 'llamacpp-ggufs');
  const types = {};
  for (const x of h.tensors) types[x.type] = (types[x.type] ?? 0) + 1;
  reference.files[type] = {
    file: path.basename(q), sha256: crypto.createHash('sha256').update(fs.readFileSync(q)).digest('hex'), tensorTypes: types,
    logits: Buffer.from(logits.buffer).toString('base64'),
  };
  console.log(`${path.relative(ROOT, q)}: ${fs.statSync(q).size} bytes, ${JSON.stringify(types)}`);
}
fs.writeFileSync(path.join(OUT, 'reference.json'), JSON.stringify(reference, null, 1) + '\n');
fs.rmSync(tmp, { recursive: true, force: true });
