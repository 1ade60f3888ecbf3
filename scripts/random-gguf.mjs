#!/usr/bin/env node
// random-gguf.mjs: random-weight GGUF files (architecture `llama`) of real
// models' shapes, made here (nothing downloaded), streamed to a path: for
// load and decode measurements (bench/gguf.mjs) and the tests. Only the shapes,
// the file layout and the arithmetic are real; the weights are noise.
//
//   node scripts/random-gguf.mjs out.gguf --shape smollm2-135m|tinyllama-1.1b|tiny
//        [--type F32|F16|Q8_0|Q4_0|Q4_K|Q6_K] [--seed N] [--no-tokenizer (a weights-only file)]
//   import { writeRandomGguf, randomGguf, SHAPES } from './scripts/random-gguf.mjs';
//
// Shapes (SHAPES): smollm2-135m (HuggingFaceTB/SmolLM2-135M: dim 576, 30 layers,
// 9 query / 3 KV heads of 64, SwiGLU 1536, vocab 49152, tied embeddings,
// context 8192, RoPE base 100000, ChatML template), tinyllama-1.1b
// (TinyLlama-1.1B-Chat: dim 2048, 22 layers, 32 / 4 heads of 64, 5632, vocab
// 32000, a separate output.weight, context 2048, RoPE base 10000, its Zephyr-style
// template), and tiny (dim 64, 2 layers, 4 / 2 heads of 16, 160, vocab 512) for tests.
// Tensors as llama.cpp names them (scripts/llama2c-to-gguf.mjs's list): the
// token embedding, the seven matrices of every layer and output.weight in
// --type; the norms F32 (all 1.0). A K type falls back per tensor as
// llama-quantize does when a row is not a multiple of 256: Q4_K -> Q5_0,
// Q6_K -> Q8_0 (SmolLM2's 576-wide rows). (A real "Q4_0" file from
// llama-quantize keeps output.weight in Q6_K; here it is Q4_0 like the rest.)
//
// Weights (bench/lib/random-llama.mjs's scales): the embedding and output
// uniform with RMS 0.5/sqrt(3) (±0.5), a matrix of input width n with RMS
// gain/sqrt(3n), gain 3: a unit-RMS input gives outputs of RMS ~1.7 and the
// logits stay finite. Each type gets its own valid blocks of that RMS, drawn
// directly (no float weights are made and quantized: the TinyLlama Q4_0 file
// is 34 M blocks):
//   F32   uniform floats;  F16   uniform over 65536 float16 levels (a table);
//   Q8_0  d = float16 of rms/73.3, q uniform in -127..127 (std 73.3);
//   Q4_0  d = rms/4.18, nibbles uniform with 0 mapped to 8: values d*(-7..7), 0 twice
//         as likely (std 4.18, no mean: ggml's -8 would bias every product);
//   Q5_0  d = rms/8.80, 5-bit q uniform with 0 mapped to 16: values d*(-15..15), 0 twice as likely (std 8.80);
//   Q4_K  every sub-block scale 2 and min 15 (6-bit packed), dmin = d: values
//         d*(2q - 15), q uniform 0..15 (std 9.22), d = rms/9.22;
//   Q6_K  every scale 1, q uniform 0..63: values d*(q - 32) (std 18.5, a mean of -d/2).
// Every tensor has its own seeded mulberry32 stream (seed, tensor index), so
// files of one seed and shape share their weights' pattern across types.
// Tokenizer: an SPM vocab (tokenizer.ggml.model "llama") of exactly the shape's
// vocab size: <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF> (BYTE), the
// 95 printable ASCII characters, then strings over " etaoinshrdlcumwfgypbvkjxqz"
// (bench/lib/random-llama.mjs's tokenizerPieces), spaces written as U+2581,
// made-up pieces scored -index (shorter ones merge first); the chat template's
// special tokens (CONTROL) last. bos 1, eos 2, add_bos_token true, and the
// template's end-of-turn token as tokenizer.ggml.eot_token_id.

import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { planGguf, writeGgufFile, fillGguf } from './lib/gguf-layout.mjs';
import { tokenizerPieces } from '../bench/lib/random-llama.mjs';
import { TOKEN_TYPE, spmTokenizerKeys } from './llama2c-to-gguf.mjs';

const CHATML = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const ZEPHYR = "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

export const SHAPES = Object.freeze({
  'smollm2-135m': Object.freeze({ name: 'SmolLM2-135M (random weights)', dim: 576, nLayers: 30, nHeads: 9, nKvHeads: 3, hiddenDim: 1536, vocabSize: 49152, tied: true, contextLength: 8192, ropeBase: 100000, template: CHATML, specials: ['<|im_start|>', '<|im_end|>'], eot: '<|im_end|>' }),
  'tinyllama-1.1b': Object.freeze({ name: 'TinyLlama-1.1B (random weights)', dim: 2048, nLayers: 22, nHeads: 32, nKvHeads: 4, hiddenDim: 5632, vocabSize: 32000, tied: false, contextLength: 2048, ropeBase: 10000, template: ZEPHYR, specials: ['<|user|>', '<|assistant|>', '<|system|>'], eot: null }),
  tiny: Object.freeze({ name: 'tiny (random weights)', dim: 64, nLayers: 2, nHeads: 4, nKvHeads: 2, hiddenDim: 160, vocabSize: 512, tied: true, contextLength: 256, ropeBase: 10000, template: CHATML, specials: ['<|im_start|>', '<|im_end|>'], eot: '<|im_end|>' }),
});

/** --type -> general.file_type (llama_ftype: pure Q4_K is closest to Q4_K_S). */
export const FILE_TYPES = Object.freeze({ F32: 0, F16: 1, Q4_0: 2, Q8_0: 7, Q4_K: 14, Q6_K: 18 });
const FALLBACK = { Q4_K: 'Q5_0', Q6_K: 'Q8_0' };
const GAIN = 3;
const CHUNK = 4 << 20;

/** The type a tensor of row length `cols` gets for --type `type` (llama-quantize's per-tensor fallback). */
export const tensorType = (type, cols) => (FALLBACK[type] && cols % 256 !== 0 ? FALLBACK[type] : type);

/** The file's tensors: [{ name, ne, type, rms }] (rms: the weights' RMS; null for a norm, all 1.0). */
export function randomTensors(shape, type) {
  const { dim, nLayers, nHeads, nKvHeads, hiddenDim, vocabSize } = shape;
  const kvDim = nKvHeads * (dim / nHeads);
  const t = [];
  const matrix = (name, rows, cols, rms) => t.push({ name, ne: [cols, rows], type: tensorType(type, cols), rms });
  const norm = (name) => t.push({ name, ne: [dim], type: 'F32', rms: null });
  const inRms = (n) => GAIN / Math.sqrt(3 * n);
  matrix('token_embd.weight', vocabSize, dim, 0.5 / Math.sqrt(3));
  for (let l = 0; l < nLayers; l++) {
    norm(`blk.${l}.attn_norm.weight`);
    matrix(`blk.${l}.attn_q.weight`, dim, dim, inRms(dim));
    matrix(`blk.${l}.attn_k.weight`, kvDim, dim, inRms(dim));
    matrix(`blk.${l}.attn_v.weight`, kvDim, dim, inRms(dim));
    matrix(`blk.${l}.attn_output.weight`, dim, dim, inRms(dim));
    norm(`blk.${l}.ffn_norm.weight`);
    matrix(`blk.${l}.ffn_gate.weight`, hiddenDim, dim, inRms(dim));
    matrix(`blk.${l}.ffn_down.weight`, dim, hiddenDim, inRms(hiddenDim));
    matrix(`blk.${l}.ffn_up.weight`, hiddenDim, dim, inRms(dim));
  }
  norm('output_norm.weight');
  if (!shape.tied) matrix('output.weight', vocabSize, dim, 0.5 / Math.sqrt(3));
  return t;
}

/** The synthetic SPM vocabulary of a shape: { tokens, scores, types, eot }. */
export function randomVocab(shape) {
  const specials = shape.specials ?? [];
  const pieces = tokenizerPieces(shape.vocabSize - specials.length);
  const tokens = pieces.map((p) => p.replaceAll(' ', '\u2581')).concat(specials);
  const n = tokens.length;
  const types = new Int32Array(n).fill(TOKEN_TYPE.NORMAL), scores = new Float32Array(n);
  types[0] = TOKEN_TYPE.UNKNOWN;
  types[1] = types[2] = TOKEN_TYPE.CONTROL;
  for (let i = 3; i < 259; i++) types[i] = TOKEN_TYPE.BYTE;
  for (let i = 259; i < pieces.length; i++) scores[i] = -(i - 259);
  for (let i = pieces.length; i < n; i++) types[i] = TOKEN_TYPE.CONTROL;
  return { tokens, scores, types, eot: shape.eot ? tokens.indexOf(shape.eot) : -1 };
}

/** The metadata of a random file of `shape` and `type` (tokenizer false: no tokenizer.* keys, a weights-only file). */
export function randomMetadata(shape, type, { tokenizer = true } = {}) {
  const m = [
    ['general.architecture', 'STRING', 'llama'],
    ['general.name', 'STRING', shape.name],
    ['general.file_type', 'UINT32', FILE_TYPES[type]],
    ['general.quantization_version', 'UINT32', 2],
    ['llama.vocab_size', 'UINT32', shape.vocabSize],
    ['llama.context_length', 'UINT32', shape.contextLength],
    ['llama.embedding_length', 'UINT32', shape.dim],
    ['llama.block_count', 'UINT32', shape.nLayers],
    ['llama.feed_forward_length', 'UINT32', shape.hiddenDim],
    ['llama.rope.dimension_count', 'UINT32', shape.dim / shape.nHeads],
    ['llama.rope.freq_base', 'FLOAT32', shape.ropeBase],
    ['llama.attention.head_count', 'UINT32', shape.nHeads],
    ['llama.attention.head_count_kv', 'UINT32', shape.nKvHeads],
    ['llama.attention.layer_norm_rms_epsilon', 'FLOAT32', 1e-5],
  ];
  if (!tokenizer) return m;
  const v = randomVocab(shape);
  m.push(...spmTokenizerKeys(v));
  if (v.eot >= 0) m.push(['tokenizer.ggml.eot_token_id', 'UINT32', v.eot]);
  if (shape.template) m.push(['tokenizer.chat_template', 'STRING', shape.template]);
  return m;
}

/** mulberry32: a seeded uint32 stream. */
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
}

const f32buf = new Float32Array(1), u32buf = new Uint32Array(f32buf.buffer);
/** float16 bits of x (round to nearest even; normal and subnormal range, no overflow: our scales are small). */
export function halfBits(x) {
  f32buf[0] = x;
  const b = u32buf[0], sign = (b >>> 16) & 0x8000, e = ((b >>> 23) & 255) - 127, m = b & 0x7FFFFF;
  if (e < -25) return sign;
  if (e < -14) {                                  // subnormal half: units of 2^-24
    const v = (m | 0x800000) * 2 ** (e + 1);      // |x| / 2^-24 = 1.m * 2^e * 2^24
    const f = Math.floor(v), r = v - f;
    return sign | (r > 0.5 || (r === 0.5 && (f & 1)) ? f + 1 : f);
  }
  let q = m >>> 13;
  const rest = m & 0x1FFF;
  if (rest > 0x1000 || (rest === 0x1000 && (q & 1))) q++;
  return sign | (((e + 15) << 10) + q);           // (a carry out of q bumps the exponent: still right)
}

/**
 * The bytes of tensor t (randomTensors' entry) in chunks of about 4 MiB, whole
 * blocks each; the yielded buffer is reused. stream: a mulberry32 of its own.
 */
export function* tensorChunks(t, seed) {
  const values = t.ne.reduce((a, b) => a * b, 1);
  const next = mulberry32(seed);
  if (t.rms === null) { yield new Uint8Array(new Float32Array(values).fill(1).buffer); return; }
  const bound = t.rms * Math.sqrt(3);
  const spec = {
    F32: [1, 4], F16: [1, 2], Q8_0: [32, 34], Q4_0: [32, 18], Q5_0: [32, 22], Q4_K: [256, 144], Q6_K: [256, 210],
  }[t.type];
  if (!spec) throw new Error(`random-gguf: no random blocks for type ${t.type}`);
  const [perBlock, blockBytes] = spec;
  const blocks = values / perBlock;
  const chunkBlocks = Math.max(1, Math.floor(CHUNK / blockBytes));
  const buf = new Uint8Array(Math.min(blocks, chunkBlocks) * blockBytes);
  const dv = new DataView(buf.buffer);
  let fill;
  if (t.type === 'F32') {
    const f = new Float32Array(buf.buffer), scale = bound / 2147483648;
    fill = (n) => { for (let i = 0; i < n; i++) f[i] = (next() - 2147483648) * scale; };
  } else if (t.type === 'F16') {
    const table = new Uint16Array(65536);
    for (let k = 0; k < 65536; k++) table[k] = halfBits(((k + 0.5) / 32768 - 1) * bound);
    const h = new Uint16Array(buf.buffer);
    fill = (n) => { for (let i = 0; i < n; i += 2) { const r = next(); h[i] = table[r & 0xFFFF]; if (i + 1 < n) h[i + 1] = table[r >>> 16]; } };
  } else if (t.type === 'Q8_0') {
    const d = halfBits(t.rms / 73.3);
    fill = (n) => {
      for (let b = 0, at = 0; b < n; b++, at += 34) {
        dv.setUint16(at, d, true);
        for (let j = 0; j < 32; j += 4) {
          const r = next();
          for (let k = 0; k < 4; k++) { const q = (r >>> (8 * k)) & 255; buf[at + 2 + j + k] = q === 128 ? 129 : q; }   // -128 -> -127
        }
      }
    };
  } else if (t.type === 'Q4_0') {
    const d = halfBits(t.rms / 4.18);
    const fix = Uint8Array.from({ length: 256 }, (_, x) => ((x & 15) || 8) | (((x >>> 4) || 8) << 4));
    fill = (n) => {
      for (let b = 0, at = 0; b < n; b++, at += 18) {
        dv.setUint16(at, d, true);
        for (let j = 0; j < 16; j += 4) {
          const r = next();
          buf[at + 2 + j] = fix[r & 255]; buf[at + 3 + j] = fix[(r >>> 8) & 255];
          buf[at + 4 + j] = fix[(r >>> 16) & 255]; buf[at + 5 + j] = fix[r >>> 24];
        }
      }
    };
  } else if (t.type === 'Q5_0') {
    // value j: d * (((qs nibble) | (qh bit j) << 4) - 16); a 0 is drawn as 16
    const d = halfBits(t.rms / 8.80);
    fill = (n) => {
      for (let b = 0, at = 0; b < n; b++, at += 22) {
        dv.setUint16(at, d, true);
        let qh = 0;
        const qs = new Array(16).fill(0);
        for (let j = 0; j < 32; j += 6) {
          const r = next();
          for (let k = 0; k < 6 && j + k < 32; k++) {
            let q = (r >>> (5 * k)) & 31;
            if (q === 0) q = 16;
            const at2 = (j + k) % 16, hi = (j + k) >= 16;
            qs[at2] |= (q & 15) << (hi ? 4 : 0);
            qh |= (q >>> 4) << (j + k);
          }
        }
        dv.setUint32(at + 2, qh >>> 0, true);
        for (let j = 0; j < 16; j++) buf[at + 6 + j] = qs[j];
      }
    };
  } else if (t.type === 'Q4_K') {
    // d, dmin (float16), scales[12] (sub-block scale 2, min 15 for all 8), qs[128] random nibbles
    const d = halfBits(t.rms / 9.22);
    const scales = [2, 2, 2, 2, 15, 15, 15, 15, 2 | (15 << 4), 2 | (15 << 4), 2 | (15 << 4), 2 | (15 << 4)];
    fill = (n) => {
      for (let b = 0, at = 0; b < n; b++, at += 144) {
        dv.setUint16(at, d, true);
        dv.setUint16(at + 2, d, true);
        for (let j = 0; j < 12; j++) buf[at + 4 + j] = scales[j];
        for (let j = 0; j < 128; j += 4) dv.setUint32(at + 16 + j, next(), true);
      }
    };
  } else {
    // Q6_K: ql[128], qh[64] (random: q = low 4 | high 2 << 4, values q - 32), scales[16] = 1, d
    const d = halfBits(t.rms / 18.5);
    fill = (n) => {
      for (let b = 0, at = 0; b < n; b++, at += 210) {
        for (let j = 0; j < 192; j += 4) dv.setUint32(at + j, next(), true);
        for (let j = 0; j < 16; j++) buf[at + 192 + j] = 1;
        dv.setUint16(at + 208, d, true);
      }
    };
  }
  for (let done = 0; done < blocks; done += chunkBlocks) {
    const n = Math.min(chunkBlocks, blocks - done);
    fill(n);
    yield buf.subarray(0, n * blockBytes);
  }
}

function resolve(shape, type) {
  const s = typeof shape === 'string' ? SHAPES[shape] : shape;
  if (!s) throw new Error(`random-gguf: unknown shape ${shape}; expected one of ${Object.keys(SHAPES).join(', ')}`);
  if (!(type in FILE_TYPES)) throw new Error(`random-gguf: type ${type}; expected one of ${Object.keys(FILE_TYPES).join(', ')}`);
  return s;
}

/** The plan (gguf-layout.mjs) and tensors of a random file. */
export function randomPlan(shape, type = 'Q4_0', { alignment = 32, tokenizer = true } = {}) {
  const s = resolve(shape, type);
  const tensors = randomTensors(s, type);
  return { shape: s, tensors, plan: planGguf({ metadata: randomMetadata(s, type, { tokenizer }), tensors, alignment }) };
}

const tensorSeed = (seed, i) => (Math.imul(seed >>> 0, 0x9E3779B1) + i * 0x85EBCA77) >>> 0;

/** Writes a random GGUF to `path`, streaming. Returns { bytes, tensors }. */
export function writeRandomGguf(path, { shape = 'smollm2-135m', type = 'Q4_0', seed = 1, alignment = 32, tokenizer = true } = {}) {
  const { tensors, plan } = randomPlan(shape, type, { alignment, tokenizer });
  const bytes = writeGgufFile(path, plan, (i) => tensorChunks(tensors[i], tensorSeed(seed, i)));
  return { bytes, tensors };
}

/** A random GGUF in memory (for small shapes): the file's bytes. */
export function randomGguf({ shape = 'tiny', type = 'Q4_0', seed = 1, alignment = 32, tokenizer = true } = {}) {
  const { tensors, plan } = randomPlan(shape, type, { alignment, tokenizer });
  return fillGguf(plan, (i) => {
    const parts = [...tensorChunks(tensors[i], tensorSeed(seed, i))].map((c) => c.slice());
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    return out;
  });
}

async function main() {
  const { values: o, positionals: p } = parseArgs({
    allowPositionals: true,
    options: { shape: { type: 'string', default: 'smollm2-135m' }, type: { type: 'string', default: 'Q4_0' }, seed: { type: 'string', default: '1' }, 'no-tokenizer': { type: 'boolean' }, help: { type: 'boolean' } },
  });
  if (o.help || p.length !== 1) {
    console.error(`usage: node scripts/random-gguf.mjs out.gguf [--shape ${Object.keys(SHAPES).join('|')}] [--type ${Object.keys(FILE_TYPES).join('|')}] [--seed N] [--no-tokenizer]`);
    process.exit(o.help ? 0 : 2);
  }
  const t0 = performance.now();
  const { bytes } = writeRandomGguf(p[0], { shape: o.shape, type: o.type.toUpperCase(), seed: Number(o.seed), tokenizer: !o['no-tokenizer'] });
  const s = (performance.now() - t0) / 1000;
  console.log(`${p[0]}: ${o.shape} ${o.type.toUpperCase()}, ${bytes} bytes (${(bytes / 2 ** 20).toFixed(1)} MiB) in ${s.toFixed(1)} s (${(bytes / 2 ** 20 / s).toFixed(0)} MiB/s)`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1])) {
  main().catch((e) => { console.error(e?.message ?? e); process.exit(1); });
}
