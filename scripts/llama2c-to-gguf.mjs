#!/usr/bin/env node
// llama2c-to-gguf.mjs: a llama2.c version-0 checkpoint (model.bin) and its
// tokenizer.bin -> a GGUF file of architecture `llama` (version 3, alignment 32).
//
//   node scripts/llama2c-to-gguf.mjs model.bin tokenizer.bin out.gguf [--type F32|F16|Q8_0|Q4_0]
//        [--name NAME] [--chat-template FILE]
//   import { llama2cToGguf } from './scripts/llama2c-to-gguf.mjs';
//   const bytes = await llama2cToGguf(checkpointBytes, tokenizerBytes, { type: 'Q8_0', sdpa });
//
// Tensors (ggml's names; a matrix [out, in] has ne = [in, out], row-major, the
// layout llama2.c already uses: F32 weights are the checkpoint's bytes as they
// are, and there is no Q/K permutation, since llama.cpp's `llama` architecture
// rotates interleaved pairs (2j, 2j+1) as run.c does):
//   token_embd.weight [dim, vocab]                        in --type
//   blk.N.attn_norm.weight [dim]                          F32
//   blk.N.attn_q / attn_k / attn_v / attn_output.weight   in --type (wq wk wv wo)
//   blk.N.ffn_norm.weight [dim]                           F32
//   blk.N.ffn_gate / ffn_down / ffn_up.weight             in --type (w1 w2 w3)
//   output_norm.weight [dim]                              F32
//   output.weight [dim, vocab]                            in --type, only when the checkpoint
//                                                         has a classifier of its own (vocab_size < 0)
// The checkpoint's freq_cos / freq_sin tables are not written: GGUF says
// llama.rope.freq_base (10000, what run.c and llama2.c's model.py use), and the
// conversion checks that the tables are that base's.
// Keys: general.architecture / name / file_type / quantization_version;
// llama.vocab_size, context_length (= seq_len), embedding_length, block_count,
// feed_forward_length, rope.dimension_count (= head size), rope.freq_base 10000,
// attention.head_count / head_count_kv, attention.layer_norm_rms_epsilon 1e-5;
// tokenizer.ggml.model "llama" (SentencePiece), tokens (tokenizer.bin's pieces
// with U+2581 put back where llama2.c's export wrote spaces), scores, token_type
// (UNKNOWN <unk>, CONTROL <s> </s>, BYTE <0xXX>, NORMAL the rest),
// bos_token_id 1, eos_token_id 2, unknown_token_id 0 (run.c's fixed ids),
// add_bos_token true, add_eos_token false, add_space_prefix true (run.c's dummy
// prefix); tokenizer.chat_template when --chat-template is given.
// Quantization: the package's own sdpa.quantize (ggml's reference quantizers
// quantize_row_q8_0_ref / _q4_0_ref; float16 round to nearest even), run in
// wasm one matrix at a time. The file is built in memory (a llama2.c
// checkpoint, its float32 copy and the GGUF fit easily for the models that format holds).

import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { createSdpa } from '../js/index.js';
import { parseCheckpoint } from '../js/llama/checkpoint.js';
import { loadTokenizer } from '../js/llama/tokenizer.js';
import { planGguf, fillGguf } from './lib/gguf-layout.mjs';

/** --type -> [the package's weight dtype, llama.cpp's general.file_type (llama_ftype)]. */
export const TYPES = Object.freeze({ F32: ['float32', 0], F16: ['float16', 1], Q4_0: ['q4_0', 2], Q8_0: ['q8_0', 7] });
/** llama.cpp's llama_token_type. */
export const TOKEN_TYPE = Object.freeze({ NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 });
const ROPE_BASE = 10000;
const RMS_EPS = 1e-5;
const SPM_SPACE = '\u2581';

/** The SPM vocabulary of a tokenizer.bin: { tokens, scores, types } (llama2.c's pieces, U+2581 restored). */
export function spmVocab(tokenizerBytes, vocabSize) {
  const tok = loadTokenizer(tokenizerBytes, { vocabSize });
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  const tokens = [], types = new Int32Array(vocabSize), scores = new Float32Array(vocabSize);
  for (let i = 0; i < vocabSize; i++) {
    let s;
    try { s = utf8.decode(tok.piece(i)); } catch {
      throw new Error(`llama2c-to-gguf: piece ${i} of the tokenizer is not valid UTF-8 (GGUF's tokens are strings)`);
    }
    tokens.push(s.replaceAll(' ', SPM_SPACE));
    scores[i] = tok.score(i);
    types[i] = s === '<unk>' ? TOKEN_TYPE.UNKNOWN : s === '<s>' || s === '</s>' ? TOKEN_TYPE.CONTROL
      : /^<0x[0-9A-F]{2}>$/.test(s) ? TOKEN_TYPE.BYTE : TOKEN_TYPE.NORMAL;
  }
  return { tokens, scores, types };
}

/** The largest |table - cos/sin(pos * base^(-2i/hs))| of the checkpoint's RoPE tables. */
function ropeDeviation(f32, offsets, seqLen, headSize) {
  const half = headSize / 2;
  let worst = 0;
  for (let pos = 0; pos < seqLen; pos++) {
    for (let i = 0; i < half; i++) {
      const angle = pos * Math.pow(ROPE_BASE, -2 * i / headSize);
      worst = Math.max(worst, Math.abs(f32[offsets.freqCos + pos * half + i] - Math.cos(angle)), Math.abs(f32[offsets.freqSin + pos * half + i] - Math.sin(angle)));
    }
  }
  return worst;
}

/**
 * The GGUF bytes of a llama2.c checkpoint and tokenizer.bin (Uint8Arrays).
 * options: type ('F32' | 'F16' | 'Q8_0' | 'Q4_0'), name (general.name),
 * chatTemplate (string or null), sdpa (an instance for the quantization; one
 * is made and disposed when omitted and type is not F32). tokenizer null:
 * no tokenizer.* keys (a weights-only file, for tests of the loader alone).
 */
/** The tokenizer.ggml.* keys of an SPM vocab { tokens, scores, types } with llama2.c's ids (unk 0, BOS 1, EOS 2, BOS added). */
export function spmTokenizerKeys(vocab) {
  return [
    ['tokenizer.ggml.model', 'STRING', 'llama'],
    ['tokenizer.ggml.tokens', ['ARRAY', 'STRING'], vocab.tokens],
    ['tokenizer.ggml.scores', ['ARRAY', 'FLOAT32'], vocab.scores],
    ['tokenizer.ggml.token_type', ['ARRAY', 'INT32'], vocab.types],
    ['tokenizer.ggml.bos_token_id', 'UINT32', 1],
    ['tokenizer.ggml.eos_token_id', 'UINT32', 2],
    ['tokenizer.ggml.unknown_token_id', 'UINT32', 0],
    ['tokenizer.ggml.add_bos_token', 'BOOL', true],
    ['tokenizer.ggml.add_eos_token', 'BOOL', false],
    ['tokenizer.ggml.add_space_prefix', 'BOOL', true],
  ];
}

export async function llama2cToGguf(checkpoint, tokenizer, { type = 'F32', name = 'llama2.c model', chatTemplate = null, sdpa = null } = {}) {
  if (!(type in TYPES)) throw new Error(`llama2c-to-gguf: type ${type}; expected one of ${Object.keys(TYPES).join(', ')}`);
  const [dtype, fileType] = TYPES[type];
  const ck = parseCheckpoint(checkpoint);
  const { config: c, headSize, kvDim, sharedClassifier, offsets } = ck;
  // the checkpoint's floats, aligned (a Uint8Array from a file may sit at any offset)
  // (Uint8Array.prototype.slice copies: a Node Buffer's own slice would be a view of its whole pool)
  const f32 = new Float32Array(Uint8Array.prototype.slice.call(checkpoint, ck.headerBytes).buffer);
  const dev = ropeDeviation(f32, offsets, c.seqLen, headSize);
  if (!(dev <= 1e-4)) throw new Error(`llama2c-to-gguf: the checkpoint's freq_cos / freq_sin tables differ from RoPE base ${ROPE_BASE}'s by up to ${dev}; GGUF cannot say other tables`);
  const vocab = tokenizer === null ? null : spmVocab(tokenizer, c.vocabSize);

  const L = c.nLayers;
  const tensors = [];        // { name, ne, type, at (float offset), rows, cols }
  const matrix = (tname, at, rows, cols) => tensors.push({ name: tname, ne: [cols, rows], type, at, rows, cols });
  const norm = (tname, at) => tensors.push({ name: tname, ne: [c.dim], type: 'F32', at, rows: 1, cols: c.dim });
  matrix('token_embd.weight', offsets.tokenEmbedding, c.vocabSize, c.dim);
  for (let l = 0; l < L; l++) {
    norm(`blk.${l}.attn_norm.weight`, offsets.rmsAtt + l * c.dim);
    matrix(`blk.${l}.attn_q.weight`, offsets.wq + l * c.dim * c.dim, c.dim, c.dim);
    matrix(`blk.${l}.attn_k.weight`, offsets.wk + l * kvDim * c.dim, kvDim, c.dim);
    matrix(`blk.${l}.attn_v.weight`, offsets.wv + l * kvDim * c.dim, kvDim, c.dim);
    matrix(`blk.${l}.attn_output.weight`, offsets.wo + l * c.dim * c.dim, c.dim, c.dim);
    norm(`blk.${l}.ffn_norm.weight`, offsets.rmsFfn + l * c.dim);
    matrix(`blk.${l}.ffn_gate.weight`, offsets.w1 + l * c.hiddenDim * c.dim, c.hiddenDim, c.dim);
    matrix(`blk.${l}.ffn_down.weight`, offsets.w2 + l * c.dim * c.hiddenDim, c.dim, c.hiddenDim);
    matrix(`blk.${l}.ffn_up.weight`, offsets.w3 + l * c.hiddenDim * c.dim, c.hiddenDim, c.dim);
  }
  norm('output_norm.weight', offsets.rmsFinal);
  if (!sharedClassifier) matrix('output.weight', offsets.wcls, c.vocabSize, c.dim);
  for (const t of tensors) {
    if (t.type !== 'F32' && t.type !== 'F16' && t.cols % 32 !== 0) {
      throw new Error(`llama2c-to-gguf: ${t.name} has rows of ${t.cols} values; ${type} needs a multiple of 32`);
    }
  }

  const metadata = [
    ['general.architecture', 'STRING', 'llama'],
    ['general.name', 'STRING', name],
    ['general.file_type', 'UINT32', fileType],
    ['general.quantization_version', 'UINT32', 2],
    ['llama.vocab_size', 'UINT32', c.vocabSize],
    ['llama.context_length', 'UINT32', c.seqLen],
    ['llama.embedding_length', 'UINT32', c.dim],
    ['llama.block_count', 'UINT32', L],
    ['llama.feed_forward_length', 'UINT32', c.hiddenDim],
    ['llama.rope.dimension_count', 'UINT32', headSize],
    ['llama.rope.freq_base', 'FLOAT32', ROPE_BASE],
    ['llama.attention.head_count', 'UINT32', c.nHeads],
    ['llama.attention.head_count_kv', 'UINT32', c.nKvHeads],
    ['llama.attention.layer_norm_rms_epsilon', 'FLOAT32', RMS_EPS],
  ];
  if (vocab !== null) metadata.push(...spmTokenizerKeys(vocab));
  if (chatTemplate !== null) metadata.push(['tokenizer.chat_template', 'STRING', chatTemplate]);
  const plan = planGguf({ metadata, tensors });

  const own = sdpa === null && dtype !== 'float32';
  if (own) sdpa = await createSdpa({ threads: 1 });
  try {
    return fillGguf(plan, (i) => {
      const t = tensors[i];
      const values = f32.subarray(t.at, t.at + t.rows * t.cols);
      if (t.type === 'F32') return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
      const src = sdpa.allocTensor('float32', [t.rows, t.cols]);
      const out = sdpa.allocTensor(dtype, [t.rows, t.cols]);
      try {
        src.set(values);
        sdpa.quantize(src, out);
        const d = out.data;
        return new Uint8Array(d.buffer, d.byteOffset, out.byteLength).slice();
      } finally {
        src.dispose();
        out.dispose();
      }
    });
  } finally {
    if (own) sdpa.dispose();
  }
}

/** The model's name from its path: the file's base name, or its folder's for a plain model.bin. */
function defaultName(file) {
  const parts = path.resolve(file).split(path.sep);
  const base = parts.at(-1).replace(/\.bin$/, '');
  return base === 'model' && parts.length > 1 ? parts.at(-2) : base;
}

async function main() {
  const { values: o, positionals: p } = parseArgs({
    allowPositionals: true,
    options: { type: { type: 'string', default: 'F32' }, name: { type: 'string' }, 'chat-template': { type: 'string' }, help: { type: 'boolean' } },
  });
  if (o.help || p.length !== 3) {
    console.error('usage: node scripts/llama2c-to-gguf.mjs model.bin tokenizer.bin out.gguf [--type F32|F16|Q8_0|Q4_0] [--name NAME] [--chat-template FILE]');
    process.exit(o.help ? 0 : 2);
  }
  const [modelPath, tokenizerPath, outPath] = p;
  const t0 = performance.now();
  const bytes = await llama2cToGguf(new Uint8Array(fs.readFileSync(modelPath)), new Uint8Array(fs.readFileSync(tokenizerPath)), {
    type: o.type.toUpperCase(),
    name: o.name ?? defaultName(modelPath),
    chatTemplate: o['chat-template'] ? fs.readFileSync(o['chat-template'], 'utf8') : null,
  });
  fs.writeFileSync(outPath, bytes);
  console.log(`${outPath}: ${bytes.length} bytes, ${o.type.toUpperCase()}, in ${((performance.now() - t0) / 1000).toFixed(2)} s`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === fs.realpathSync(process.argv[1])) {
  main().catch((e) => { console.error(e?.message ?? e); process.exit(1); });
}
