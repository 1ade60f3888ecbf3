// Random-weight llama2.c models of real shapes, made here (nothing downloaded): for speed
// measurements of shapes larger than the shipped model, on our runner and on run.c
// (bench/lib/runc.mjs). The weights are noise; only the shapes and the arithmetic are real.
//
// writeRandomCheckpoint(path, shape) writes a llama2.c version-0 checkpoint (the layout of
// js/llama/checkpoint.js's header comment: seven int32 dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size (negative: a separate classifier), seq_len; then float32 tensors in
// run.c's order), streamed to disk in 4 MiB chunks (the 135M shape is ~540 MB: never held in
// memory). Weights, from one seeded stream (mulberry32) in file order:
//   token embedding (and a separate classifier)  uniform ±0.5
//   wq, wk, wv, wo, w1, w3                       uniform ±gain/sqrt(dim)     (the input width)
//   w2                                           uniform ±gain/sqrt(hidden)
//   rms_att, rms_ffn, rms_final                  1.0
// gain (default 3): a matrix maps a unit-RMS input to outputs of RMS gain/sqrt(3) (1.7). Each
// layer adds a bounded amount to the residual stream (its inputs are normalized), the final
// norm brings it back to RMS 1, and the logits (against the ±0.5 embedding) have a spread of
// ~0.29 sqrt(dim): finite (measured: std 4.7 at the shipped shape, 6.9 at SmolLM2-135M's,
// extremes ±15 / ±30). At gain 1 or 2 the residual stays close to the token's own embedding
// and greedy decoding repeats a token or a short cycle ("atatat..."); at 3 the argmax moves
// with the context. freq_cos / freq_sin: cos / sin(pos * 10000^(-2i/headSize)) for
// pos < seqLen, i < headSize/2, computed in float32 steps as run.c computes its own
// (freq = 1 / powf(10000, 2i / headSize), val = pos * freq, both float), so a runner that reads
// the tables and run.c (which skips them) rotate alike.
//
// writeTokenizer(path, vocabSize) writes a llama2.c tokenizer.bin of exactly vocabSize pieces
// (vocabSize >= 354): int32 max_token_length, then per piece float32 score, int32 byte length,
// the bytes. Pieces: <unk>, <s>, </s> at 0..2 and <0x00>..<0xFF> at 3..258 (score 0, as in
// llama2.c's tokenizer), the 95 printable ASCII characters (" " first: run.c's encode needs
// it, for its dummy prefix), then every string over " etaoinshrdlcumwfgypbvkjxqz" of length
// 2, then 3, then 4 ... in that letter order until vocabSize; synthetic pieces score -index,
// so shorter ones merge first and every multi-letter piece is reachable by merges.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const FIELDS = ['dim', 'hiddenDim', 'nLayers', 'nHeads', 'nKvHeads', 'vocabSize', 'seqLen'];

/** The header of a llama2.c checkpoint as a shape ({ dim, ..., seqLen, shared }). */
export function readShape(checkpointPath) {
  const fd = fs.openSync(checkpointPath, 'r');
  try {
    const b = Buffer.alloc(28);
    if (fs.readSync(fd, b, 0, 28, 0) !== 28) throw new Error(`random-llama: ${checkpointPath} is shorter than a header`);
    const h = Object.fromEntries(FIELDS.map((f, i) => [f, b.readInt32LE(4 * i)]));
    const shared = h.vocabSize > 0;
    return Object.freeze({ ...h, vocabSize: Math.abs(h.vocabSize), shared });
  } finally {
    fs.closeSync(fd);
  }
}

/** The shipped model's shape (models/fortunes/model.bin's header). */
export const SHIPPED = readShape(path.join(ROOT, 'models', 'fortunes', 'model.bin'));

/**
 * SmolLM2-135M's shape (HuggingFaceTB/SmolLM2-135M: 30 layers, dim 576, 9 query / 3 KV heads
 * of 64, SwiGLU 1536, vocab 49152, tied embeddings). seqLen 2048: the RoPE tables are then
 * 2 x 2048 x 32 floats (512 KiB), small either way; the real model's context is 8192 and its
 * RoPE base 100000, which llama2.c's format cannot say (run.c fixes 10000). ~538 MB of float32.
 */
export const SMOLLM2_135M = Object.freeze({ dim: 576, hiddenDim: 1536, nLayers: 30, nHeads: 9, nKvHeads: 3, vocabSize: 49152, seqLen: 2048, shared: true });

const GAIN = 3;

/** The tensors of a shape in file order: [name, floats, init] with init 'embed' | 'one' | 'rope-cos' | 'rope-sin' | a ±bound. */
function tensors(s, gain = 1) {
  const headSize = s.dim / s.nHeads;
  const kvDim = s.nKvHeads * headSize;
  const L = s.nLayers;
  const m = gain / Math.sqrt(s.dim);
  const t = [
    ['tokenEmbedding', s.vocabSize * s.dim, 'embed'],
    ['rmsAtt', L * s.dim, 'one'], ['wq', L * s.dim * s.dim, m], ['wk', L * kvDim * s.dim, m], ['wv', L * kvDim * s.dim, m], ['wo', L * s.dim * s.dim, m],
    ['rmsFfn', L * s.dim, 'one'], ['w1', L * s.hiddenDim * s.dim, m], ['w2', L * s.dim * s.hiddenDim, gain / Math.sqrt(s.hiddenDim)], ['w3', L * s.hiddenDim * s.dim, m],
    ['rmsFinal', s.dim, 'one'], ['freqCos', s.seqLen * headSize / 2, 'rope-cos'], ['freqSin', s.seqLen * headSize / 2, 'rope-sin'],
  ];
  if (s.shared === false) t.push(['wcls', s.vocabSize * s.dim, 'embed']);
  return t;
}

function checkShape(s) {
  for (const f of FIELDS) {
    if (!Number.isInteger(s[f]) || s[f] <= 0) throw new Error(`random-llama: shape.${f} is ${s[f]}; expected a positive integer`);
  }
  if (s.dim % s.nHeads !== 0 || (s.dim / s.nHeads) % 2 !== 0) throw new Error(`random-llama: dim ${s.dim} / nHeads ${s.nHeads} must be an even integer`);
  if (s.nHeads % s.nKvHeads !== 0) throw new Error(`random-llama: nKvHeads ${s.nKvHeads} must divide nHeads ${s.nHeads}`);
}

/** Floats after the header (the file is 28 + 4 x this bytes). */
export function checkpointFloats(shape) {
  checkShape(shape);
  return tensors(shape).reduce((n, [, k]) => n + k, 0);
}

/** mulberry32: a seeded uint32 stream (fast, plenty for noise weights). */
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/**
 * Writes a random llama2.c version-0 checkpoint of `shape` to `file` (see the top of this
 * file). shape: { dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen, shared = true,
 * seed = 1, gain = 3 }. Returns { bytes, floats }.
 */
export function writeRandomCheckpoint(file, { dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen, shared = true, seed = 1, gain = GAIN } = {}) {
  const shape = { dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen, shared };
  checkShape(shape);
  const headSize = dim / nHeads;
  const half = headSize / 2;
  const next = mulberry32(seed);
  const CHUNK = 1 << 20;                                   // floats: 4 MiB per write
  const buf = new Float32Array(CHUNK);
  const bytes = new Uint8Array(buf.buffer);
  const fd = fs.openSync(file, 'w');
  let floats = 0;
  try {
    const header = Buffer.alloc(28);
    [dim, hiddenDim, nLayers, nHeads, nKvHeads, shared ? vocabSize : -vocabSize, seqLen].forEach((v, i) => header.writeInt32LE(v, 4 * i));
    fs.writeSync(fd, header);
    // run.c's own table, in float32 steps: freq = 1 / powf(10000, (2i) / (float)headSize); val = pos * freq
    const f32 = Math.fround;
    const freq = Float64Array.from({ length: half }, (_, i) => f32(1 / f32(Math.pow(10000, f32(2 * i / headSize)))));
    for (const [, n, init] of tensors(shape, gain)) {
      for (let start = 0; start < n; start += CHUNK) {
        const k = Math.min(CHUNK, n - start);
        if (init === 'one') {
          buf.fill(1, 0, k);
        } else if (init === 'rope-cos' || init === 'rope-sin') {
          const fn = init === 'rope-cos' ? Math.cos : Math.sin;
          for (let j = 0; j < k; j++) {
            const e = start + j;
            buf[j] = fn(f32(Math.floor(e / half) * freq[e % half]));
          }
        } else {
          const scale = (init === 'embed' ? 0.5 : init) / 2147483648;   // uint32 - 2^31: [-2^31, 2^31) -> [-bound, bound)
          for (let j = 0; j < k; j++) buf[j] = (next() - 2147483648) * scale;
        }
        fs.writeSync(fd, bytes, 0, 4 * k);
        floats += k;
      }
    }
  } finally {
    fs.closeSync(fd);
  }
  return { bytes: 28 + 4 * floats, floats };
}

const LETTERS = ' etaoinshrdlcumwfgypbvkjxqz';

/** The vocabSize pieces of writeTokenizer, as strings (ASCII; byte pieces as "<0xXX>"). */
export function tokenizerPieces(vocabSize) {
  if (!Number.isInteger(vocabSize) || vocabSize < 3 + 256 + 95) {
    throw new Error(`random-llama: vocabSize ${vocabSize}; expected an integer >= 354 (3 specials, 256 bytes, 95 printable characters)`);
  }
  const pieces = ['<unk>', '<s>', '</s>'];
  for (let b = 0; b < 256; b++) pieces.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
  for (let c = 0x20; c < 0x7f; c++) pieces.push(String.fromCharCode(c));
  let level = [...LETTERS];
  while (pieces.length < vocabSize) {
    const longer = [];
    for (const p of level) {
      for (const c of LETTERS) {
        longer.push(p + c);
        if (pieces.length < vocabSize) pieces.push(p + c);
      }
    }
    level = longer;
  }
  return pieces;
}

/** Writes a llama2.c tokenizer.bin of exactly vocabSize pieces (see the top of this file). Returns { bytes, maxTokenLength }. */
export function writeTokenizer(file, vocabSize) {
  const pieces = tokenizerPieces(vocabSize);
  const maxTokenLength = Math.max(...pieces.map((p) => p.length));
  const total = 4 + pieces.reduce((n, p) => n + 8 + p.length, 0);
  const out = Buffer.alloc(total);
  out.writeInt32LE(maxTokenLength, 0);
  let o = 4;
  pieces.forEach((p, i) => {
    out.writeFloatLE(i < 259 ? 0 : -(i - 259), o);
    out.writeInt32LE(p.length, o + 4);
    out.write(p, o + 8, 'latin1');
    o += 8 + p.length;
  });
  fs.writeFileSync(file, out);
  return { bytes: total, maxTokenLength };
}
