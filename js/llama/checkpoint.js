// checkpoint.js: llama2.c's version-0 checkpoint (the format llama2.c's run.c
// reads), parsed and checked before anything is allocated.
//
// Layout (little-endian): seven int32 dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len (a negative vocab_size: the classifier is a
// tensor of its own, else it is the token embedding); then float32 tensors in
// run.c's order, each weight matrix [out, in] row-major, every layer's tensor
// of a kind before the next kind:
//   token_embedding [vocab, dim]
//   rms_att [L, dim]; wq [L, dim, dim]; wk [L, kvDim, dim]; wv [L, kvDim, dim]; wo [L, dim, dim]
//   rms_ffn [L, dim]; w1 [L, hidden, dim]; w2 [L, dim, hidden]; w3 [L, hidden, dim]
//   rms_final [dim]; freq_cos [seq_len, headSize/2]; freq_sin [seq_len, headSize/2]
//   wcls [vocab, dim] (only with a negative vocab_size)
// where headSize = dim / n_heads and kvDim = n_kv_heads * headSize. run.c skips
// the two RoPE tables (it computes its own); we read them (rotary on
// interleaved pairs (2j, 2j+1), as llama2.c rotates).

import { SdpaError } from '../errors.js';

const HEADER_BYTES = 28;
export const FIELDS = Object.freeze(['dim', 'hidden_dim', 'n_layers', 'n_heads', 'n_kv_heads', 'vocab_size', 'seq_len']);
// Bounds that keep every size below 2^53 (exact in a double) and far above any model a
// browser runs; the real check is the file's length against the sizes they give.
const LIMITS = Object.freeze({ dim: 1 << 16, hidden_dim: 1 << 20, n_layers: 1 << 10, n_heads: 1 << 12, n_kv_heads: 1 << 12, vocab_size: 1 << 24, seq_len: 1 << 20 });

const bad = (message) => new SdpaError('E_FORMAT', `loadLlama: checkpoint: ${message}`);

/**
 * The header of `bytes` as a config plus the float offset of every tensor.
 * Throws E_FORMAT naming the field, the rule, expected vs actual.
 */
export function parseCheckpoint(bytes) {
  if (bytes.byteLength < HEADER_BYTES) {
    throw bad(`the file has ${bytes.byteLength} bytes; expected at least ${HEADER_BYTES} (the header: seven int32 ${FIELDS.join(', ')})`);
  }
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const h = {};
  FIELDS.forEach((f, i) => { h[f] = dv.getInt32(4 * i, true); });
  const shared = h.vocab_size > 0;
  const vocab = Math.abs(h.vocab_size);
  for (const f of FIELDS) {
    const v = f === 'vocab_size' ? vocab : h[f];
    if (v <= 0) throw bad(`${f} is ${h[f]}; expected a positive integer${f === 'vocab_size' ? ' (or a negative one: a separate classifier)' : ''}`);
    if (v > LIMITS[f]) throw bad(`${f} is ${h[f]}; expected at most ${LIMITS[f]}`);
  }
  if (h.dim % h.n_heads !== 0) throw bad(`dim ${h.dim} is not a multiple of n_heads ${h.n_heads}; expected dim % n_heads == 0`);
  const headSize = h.dim / h.n_heads;
  if (headSize < 4 || headSize % 2 !== 0) throw bad(`the head size dim / n_heads = ${headSize}; expected an even number >= 4 (rotary rotates pairs)`);
  if (h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads !== 0) {
    throw bad(`n_heads ${h.n_heads} is not a multiple of n_kv_heads ${h.n_kv_heads}; expected n_kv_heads to divide n_heads`);
  }
  const { dim, hidden_dim: hidden, n_layers: L, seq_len: seqLen } = h;
  const kvDim = h.n_kv_heads * headSize;
  const sizes = [
    ['tokenEmbedding', vocab * dim],
    ['rmsAtt', L * dim], ['wq', L * dim * dim], ['wk', L * kvDim * dim], ['wv', L * kvDim * dim], ['wo', L * dim * dim],
    ['rmsFfn', L * dim], ['w1', L * hidden * dim], ['w2', L * dim * hidden], ['w3', L * hidden * dim],
    ['rmsFinal', dim], ['freqCos', seqLen * headSize / 2], ['freqSin', seqLen * headSize / 2],
  ];
  if (!shared) sizes.push(['wcls', vocab * dim]);
  const offsets = {};
  let floats = 0;
  for (const [name, n] of sizes) { offsets[name] = floats; floats += n; }
  const want = HEADER_BYTES + 4 * floats;
  if (bytes.byteLength !== want) {
    const what = bytes.byteLength < want ? 'truncated' : 'over-long';
    throw bad(`${what}: the header (${FIELDS.map((f) => `${f} ${h[f]}`).join(', ')}) gives ${want} bytes` +
      ` (${shared ? 'classifier shared with the token embedding' : 'a separate classifier'}), but the file has ${bytes.byteLength}`);
  }
  if (shared) offsets.wcls = offsets.tokenEmbedding;
  const config = Object.freeze({
    dim, hiddenDim: hidden, nLayers: L, nHeads: h.n_heads, nKvHeads: h.n_kv_heads, vocabSize: vocab, seqLen,
  });
  return { config, headSize, kvDim, sharedClassifier: shared, offsets, floats, headerBytes: HEADER_BYTES };
}

/** FNV-1a over the checkpoint's 32-bit words: names the weights a saved state belongs to. */
export function fingerprint(bytes) {
  const words = bytes.byteLength >>> 2;
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let h = 0x811C9DC5;
  for (let i = 0; i < words; i++) h = Math.imul(h ^ dv.getUint32(4 * i, true), 0x01000193);
  return ((h >>> 0).toString(16).padStart(8, '0')) + '-' + bytes.byteLength.toString(16);
}
