// gguf-model.js: a LlamaModel (and its tokenizer) from a GGUF file of
// architecture `llama` (llama.cpp's format; gguf.js parses the header).
//
// The file is read once, as a stream of chunks: the header is gathered and
// checked (architecture, hyperparameters, every tensor's name, shape and
// type, the heap it needs), every weight tensor is allocated in the wasm heap
// in its file's type, then each chunk's bytes are copied straight into the
// tensors they belong to. No JS copy of the weights is kept or made (a
// Uint8Array source is read in place). Everything that can be wrong with a
// file but its length is found before any weight is read.
//
// Tensors (ggml's names; ne = [row length, rows]):
//   token_embd.weight [dim, vocab]   output_norm.weight [dim]   output.weight [dim, vocab] (absent: tied)
//   rope_freqs.weight [headSize/2] (optional, F32: Llama 3.1's per-pair frequency divisors)
//   blk.N.attn_norm [dim]  attn_q [dim, dim]  attn_k [dim, kvDim]  attn_v [dim, kvDim]  attn_output [dim, dim]
//   blk.N.ffn_norm [dim]  ffn_gate [dim, hidden]  ffn_up [dim, hidden]  ffn_down [hidden, dim]
// Matrices and the embedding: any ggml type the dense kernels run (GGML_DTYPES
// below, as far as this build's heap dtypes go); norms: F32. GGUF's llama
// files rotate interleaved pairs (llama.cpp's rope type NORM, llama2.c's), as
// the runner does, so the weights are used as they are.

import { SdpaError } from '../errors.js';
import { parseGguf, GgufTruncated, MAX_HEADER_BYTES } from './gguf.js';
import { tokenizerFromGguf } from './gguf-tokenizer.js';
import {
  SharedModel, checkSdpa, checkKnown, readModelOptions, cachePlan, makeModel, ropeTables, fillRope, renamed,
} from './model.js';

const OPTIONS = Object.freeze(['maxSeqLen', 'dtype', 'keyDtype', 'valueDtype', 'float16NewestPage', 'maxChunk', 'reserve', 'activations', 'onProgress', 'signal']);
/** ggml tensor type -> the heap dtype the dense kernels run it as. */
const GGML_DTYPES = Object.freeze({ F32: 'float32', F16: 'float16', Q8_0: 'q8_0', Q4_0: 'q4_0', Q4_K: 'q4_k', Q6_K: 'q6_k', Q5_0: 'q5_0' });
/** The ggml types this build runs as weight matrices (each a heap dtype: tests/js/gguf.test.js holds it). */
export const GGUF_MATRIX_TYPES = Object.freeze(Object.keys(GGML_DTYPES));
export const GGUF_HEAP_DTYPES = GGML_DTYPES;   // (for that test)
/** maxSeqLen's default cap: a file's context_length (131072 for Llama 3.1) would reserve gigabytes of KV pages. */
const DEFAULT_MAX_SEQ_LEN = 4096;
/** A byte stream's reads: one reused buffer of this size. */
const BYOB_BYTES = 1 << 20;
/** The wasm heap's ceiling (CMakeLists.txt: -sMAXIMUM_MEMORY=4GB). */
const HEAP_LIMIT = 4 * 2 ** 30;
const LAYER_TENSORS = Object.freeze([
  // [ggml name, our name, kind]
  ['attn_norm', 'rmsAtt', 'norm'], ['attn_q', 'wq', 'q'], ['attn_k', 'wk', 'kv'], ['attn_v', 'wv', 'kv'],
  ['attn_output', 'wo', 'o'], ['ffn_norm', 'rmsFfn', 'norm'], ['ffn_gate', 'w1', 'up'], ['ffn_down', 'w2', 'down'],
  ['ffn_up', 'w3', 'up'],
]);

const TRAILING_BYTES = 1 << 20;   // bytes after the last tensor read before the source is cancelled
const MB = (n) => `${(n / 2 ** 20).toFixed(1)} MiB`;

/**
 * The model a header describes, checked: { spec, hp, plan (tensor name ->
 * { info, dtype, dims }), weightBytes, parameters }. Throws E_FORMAT (a key
 * or tensor missing or malformed, another architecture) or E_DTYPE (a tensor
 * type this build does not run), naming what.
 */
function planModel(fn, header) {
  const meta = header.metadata;
  const bad = (m) => new SdpaError('E_FORMAT', `${fn}: GGUF: ${m}`);
  const arch = meta.get('general.architecture');
  if (typeof arch !== 'string') throw bad(`general.architecture is ${arch === undefined ? 'missing' : `a ${typeof arch}`}; expected a string ('llama')`);
  if (arch !== 'llama') throw bad(`general.architecture is '${arch}'; this build runs 'llama' (Llama, Mistral, TinyLlama, SmolLM) only`);
  const key = (name, { lo = 1, hi = 2 ** 31 - 1, def, real = false } = {}) => {
    const k = `llama.${name}`;
    let v = meta.get(k);
    if (v === undefined) {
      if (def === undefined) throw bad(`${k} is missing; a llama model needs it`);
      return def;
    }
    if (ArrayBuffer.isView(v) || Array.isArray(v)) {         // a per-layer array: llama runs one value for all
      const all = Array.from(v);
      if (all.length === 0 || all.some((x) => x !== all[0])) throw bad(`${k} is an array of differing values (per-layer ${name}); expected one value for every layer`);
      v = all[0];
    }
    if (typeof v !== 'number' || !(real ? Number.isFinite(v) : Number.isInteger(v)) || v < lo || v > hi) {
      throw bad(`${k} is ${typeof v === 'bigint' ? `${v}n` : JSON.stringify(v) ?? String(v)}; expected ${real ? 'a number' : 'an integer'} in ${lo} .. ${hi}`);
    }
    return v;
  };
  const hp = {
    contextLength: key('context_length', { hi: 1 << 24 }),
    dim: key('embedding_length', { hi: 1 << 16 }),
    nLayers: key('block_count', { hi: 1 << 10 }),
    hidden: key('feed_forward_length', { hi: 1 << 20 }),
    nHeads: key('attention.head_count', { hi: 1 << 12 }),
    rmsEps: key('attention.layer_norm_rms_epsilon', { lo: 0, hi: 1, real: true }),
    ropeBase: key('rope.freq_base', { lo: 1e-3, hi: 1e12, real: true, def: 10000 }),
  };
  hp.nKvHeads = key('attention.head_count_kv', { hi: hp.nHeads, def: hp.nHeads });
  if (hp.dim % hp.nHeads !== 0) throw bad(`llama.embedding_length ${hp.dim} is not a multiple of llama.attention.head_count ${hp.nHeads}`);
  hp.headSize = hp.dim / hp.nHeads;
  if (hp.headSize % 2 !== 0) throw bad(`the head size ${hp.headSize} (embedding_length / head_count) is odd; rotary rotates pairs`);
  if (hp.nHeads % hp.nKvHeads !== 0) throw bad(`llama.attention.head_count ${hp.nHeads} is not a multiple of head_count_kv ${hp.nKvHeads}`);
  for (const k of ['attention.key_length', 'attention.value_length', 'rope.dimension_count']) {
    const v = key(k, { def: hp.headSize });
    if (v !== hp.headSize) throw bad(`llama.${k} is ${v}; this build runs models whose heads are fully rotated and ${hp.headSize} wide (embedding_length / head_count)`);
  }
  if (key('expert_count', { lo: 0, def: 0 }) > 0) throw bad(`llama.expert_count is ${meta.get('llama.expert_count')}: a mixture of experts (Mixtral); this build runs dense llama models`);
  const scaling = meta.get('llama.rope.scaling.type');
  if (scaling !== undefined && scaling !== 'none') throw bad(`llama.rope.scaling.type is ${JSON.stringify(scaling)}; this build runs unscaled RoPE (or Llama 3.1's rope_freqs) only`);
  hp.kvDim = hp.nKvHeads * hp.headSize;

  const byName = new Map(header.tensors.map((t) => [t.name, t]));
  const embd = byName.get('token_embd.weight');
  if (embd === undefined) throw bad(`tensor "token_embd.weight" is missing`);
  hp.vocab = embd.ne[1] ?? 1;
  const tokens = meta.get('tokenizer.ggml.tokens');
  if (Array.isArray(tokens) && tokens.length !== hp.vocab) throw bad(`tokenizer.ggml.tokens holds ${tokens.length} tokens but token_embd.weight has ${hp.vocab} rows; expected the same vocabulary`);
  const vocabKey = meta.get('llama.vocab_size');
  if (vocabKey !== undefined && vocabKey !== hp.vocab) throw bad(`llama.vocab_size is ${String(vocabKey)} but token_embd.weight has ${hp.vocab} rows`);

  const { dim, hidden, kvDim, vocab } = hp;
  const shapes = { norm: [dim], q: [dim, dim], kv: [dim, kvDim], o: [dim, dim], up: [dim, hidden], down: [hidden, dim] };
  const plan = new Map();
  const want = (name, ne, kind, optional = false) => {
    const t = byName.get(name);
    if (t === undefined) {
      if (optional) return null;
      throw bad(`tensor "${name}" is missing; a llama model of ${hp.nLayers} layers has it`);
    }
    const got = t.ne.slice();
    while (got.length > ne.length && got[got.length - 1] === 1) got.pop();
    if (got.length !== ne.length || got.some((n, i) => n !== ne[i])) {
      throw bad(`tensor "${name}" has ne [${t.ne.join(', ')}]; expected [${ne.join(', ')}] (embedding_length ${dim}, feed_forward_length ${hidden}, ${hp.nKvHeads} KV heads of ${hp.headSize}, vocabulary ${vocab})`);
    }
    let dtype;
    if (kind === 'vector') {
      if (t.type !== 'F32') throw new SdpaError('E_DTYPE', `${fn}: GGUF: tensor "${name}" is ${t.type}; this build runs vectors (norms, rope_freqs) in F32 only`);
      dtype = 'float32';
    } else {
      dtype = GGUF_MATRIX_TYPES.includes(t.type) ? GGML_DTYPES[t.type] : null;
      if (dtype === null) throw new SdpaError('E_DTYPE', `${fn}: GGUF: tensor "${name}" is ${t.type}; this build runs weight matrices in ${GGUF_MATRIX_TYPES.join(', ')}`);
    }
    const entry = { info: t, dtype, dims: ne.length === 1 ? ne : [ne[1], ne[0]] };
    plan.set(name, entry);
    return entry;
  };
  want('token_embd.weight', [dim, vocab], 'matrix');
  want('output_norm.weight', [dim], 'vector');
  const output = want('output.weight', [dim, vocab], 'matrix', true);
  want('rope_freqs.weight', [hp.headSize / 2], 'vector', true);
  for (let l = 0; l < hp.nLayers; l++) {
    for (const [g, , kind] of LAYER_TENSORS) want(`blk.${l}.${g}.weight`, shapes[kind], kind === 'norm' ? 'vector' : 'matrix');
  }
  for (const t of header.tensors) {
    if (!plan.has(t.name)) throw bad(`tensor "${t.name}" is not one a llama model of ${hp.nLayers} layers has (an unsupported variant: biases, another block count?)`);
  }
  hp.tied = output === null;
  let weightBytes = 0, parameters = 0;
  for (const { info } of plan.values()) { weightBytes += info.bytes; parameters += info.values; }
  return { hp, plan, weightBytes, parameters };
}

/** The card of a header (and its plan, or why it cannot run). */
function describe(header, fileBytes, planned, problem) {
  // (a key the file holds with another type than the card's is null: the card's types are llama.d.ts's)
  const meta = header.metadata;
  const get = (k) => { const v = meta.get(k); return typeof v === 'number' && Number.isFinite(v) ? v : null; };
  const text = (k) => { const v = meta.get(k); return typeof v === 'string' ? v : null; };
  const tensorTypes = {};
  for (const t of header.tensors) tensorTypes[t.type] = (tensorTypes[t.type] ?? 0) + 1;
  const tokens = get('tokenizer.ggml.tokens');
  const hp = planned?.hp;
  return {
    version: header.version,
    architecture: text('general.architecture'),
    name: text('general.name'),
    fileBytes,
    parameters: planned?.parameters ?? header.tensors.reduce((a, t) => a + t.values, 0),
    weightBytes: planned?.weightBytes ?? header.tensors.reduce((a, t) => a + t.bytes, 0),
    tensorTypes,
    contextLength: hp?.contextLength ?? get('llama.context_length'),
    embeddingLength: hp?.dim ?? get('llama.embedding_length'),
    blockCount: hp?.nLayers ?? get('llama.block_count'),
    headCount: hp?.nHeads ?? get('llama.attention.head_count'),
    headCountKv: hp?.nKvHeads ?? get('llama.attention.head_count_kv'),
    feedForwardLength: hp?.hidden ?? get('llama.feed_forward_length'),
    vocabSize: hp?.vocab ?? (Array.isArray(tokens) ? tokens.length : null),
    ropeFreqBase: hp?.ropeBase ?? get('llama.rope.freq_base'),
    rmsEps: hp?.rmsEps ?? get('llama.attention.layer_norm_rms_epsilon'),
    tokenizerModel: text('tokenizer.ggml.model'),
    chatTemplate: text('tokenizer.chat_template'),
    runnable: problem === null,
    problem,
    keys: meta,
  };
}

/** Bytes of wasm heap a model of `planned` takes besides the weights (activations, rotary tables, KV pages reserved). */
function heapOverhead(hp, o, poolBytes) {
  const C = o.maxChunk;
  const activations = 4 * (C * (5 * hp.dim + 2 * hp.kvDim + 2 * hp.hidden) + hp.vocab);
  const rope = 4 * o.maxSeqLen * hp.headSize;
  return activations + rope + ((o.reserve ?? true) ? poolBytes * hp.nLayers : 0);
}

/**
 * A readable source as { total (bytes or null), whole (the bytes, when the
 * source is in memory), next() -> Promise<Uint8Array | null>, cancel(reason) }.
 */
function openSource(fn, source) {
  const chunkOf = (c, i) => {
    if (c instanceof Uint8Array) return c;
    if (c instanceof ArrayBuffer) return new Uint8Array(c);
    if (ArrayBuffer.isView(c)) return new Uint8Array(c.buffer, c.byteOffset, c.byteLength);
    throw new SdpaError('E_ARG', `${fn}: chunk ${i} of the source is ${c === null ? 'null' : c?.constructor?.name ?? typeof c}; expected a Uint8Array`);
  };
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)
    || (typeof SharedArrayBuffer !== 'undefined' && source instanceof SharedArrayBuffer)) {
    const whole = ArrayBuffer.isView(source) ? new Uint8Array(source.buffer, source.byteOffset, source.byteLength) : new Uint8Array(source);
    let done = false;
    return { total: whole.byteLength, whole, next: async () => (done ? null : ((done = true), whole)), cancel() {} };
  }
  const fromStream = (stream, total) => {
    // A byte stream (a File's, a fetch body's) is read into one reused buffer: each chunk is
    // copied into wasm memory before the next read, and no chunk is allocated (the page's peak
    // memory for a 591 MiB file went from 1.46x the file to 1.03x).
    let byob = null;
    try { byob = stream.getReader({ mode: 'byob' }); } catch { /* not a byte stream */ }
    const reader = byob ?? stream.getReader();
    let buffer = byob === null ? null : new ArrayBuffer(BYOB_BYTES);
    let i = 0;
    const next = byob === null
      ? async () => { const r = await reader.read(); return r.done ? null : chunkOf(r.value, i++); }
      : async () => {
        const r = await reader.read(new Uint8Array(buffer, 0, BYOB_BYTES));
        if (r.done) return null;
        buffer = r.value.buffer;                    // (the read transferred it: the next read takes it back)
        return r.value;
      };
    return { total, whole: null, next, cancel: (reason) => { reader.cancel(reason).catch(() => {}); } };
  };
  if (typeof Blob !== 'undefined' && source instanceof Blob) return fromStream(source.stream(), source.size);
  if (typeof Response !== 'undefined' && source instanceof Response) {
    if (source.bodyUsed) throw new SdpaError('E_ARG', `${fn}: the Response's body was already read`);
    if (source.body === null) throw new SdpaError('E_ARG', `${fn}: the Response has no body (status ${source.status})`);
    if (!source.ok) throw new SdpaError('E_ARG', `${fn}: the Response has status ${source.status} ${source.statusText}; expected a 2xx response with the file`);
    const length = Number(source.headers.get('content-length'));
    const encoded = (source.headers.get('content-encoding') ?? 'identity') !== 'identity';
    return fromStream(source.body, !encoded && Number.isSafeInteger(length) && length > 0 ? length : null);
  }
  if (typeof ReadableStream !== 'undefined' && source instanceof ReadableStream) return fromStream(source, null);
  if (source !== null && typeof source === 'object' && typeof source[Symbol.asyncIterator] === 'function') {
    const it = source[Symbol.asyncIterator]();
    let i = 0;
    return {
      total: null, whole: null,
      next: async () => { const r = await it.next(); return r.done ? null : chunkOf(r.value, i++); },
      cancel: () => { it.return?.().catch?.(() => {}); },
    };
  }
  throw new SdpaError('E_ARG', `${fn}: source must be a Uint8Array, ArrayBuffer, Blob, Response, ReadableStream or async iterable of Uint8Array chunks, got ${source === null ? 'null' : source?.constructor?.name ?? typeof source}`);
}

/** Throws the signal's reason when it is aborted. */
function checkAbort(signal) {
  if (signal?.aborted) throw abortReason(signal);
}
const abortReason = (signal) => signal.reason ?? new DOMException('The operation was aborted.', 'AbortError');

/**
 * The source's next chunk, or the signal's reason as soon as it aborts: a
 * source that never sends again (an async iterator's return() waits behind
 * its pending next()) cannot keep the call, or its heap tensors, alive.
 */
function nextChunk(src, signal) {
  checkAbort(signal);
  if (signal === undefined) return src.next();
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(abortReason(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    src.next().then(
      (chunk) => { signal.removeEventListener('abort', onAbort); if (signal.aborted) onAbort(); else resolve(chunk); },
      (e) => { signal.removeEventListener('abort', onAbort); reject(e); });
  });
}

/** E_ARG unless `signal` is undefined or an AbortSignal-like object. */
function checkSignal(fn, signal) {
  if (signal !== undefined && !(signal !== null && typeof signal === 'object' && typeof signal.aborted === 'boolean' && typeof signal.addEventListener === 'function')) {
    throw new SdpaError('E_ARG', `${fn}: options.signal must be an AbortSignal, got ${signal === null ? 'null' : typeof signal}`);
  }
}

/**
 * Reads chunks until the header parses: { header, head (the bytes read so
 * far), pos (their count), whole (the file, for a source in memory) }.
 */
async function readHeader(fn, src, signal) {
  if (src.whole !== null) return { header: parseGguf(src.whole, fn, src.whole.byteLength), head: null, pos: 0, whole: src.whole };
  let head = new Uint8Array(1 << 16), len = 0, tryAt = 0;
  for (;;) {
    const chunk = await nextChunk(src, signal);
    if (chunk !== null) {
      if (len + chunk.byteLength > head.byteLength) {
        const grown = new Uint8Array(Math.max(2 * head.byteLength, len + chunk.byteLength));
        grown.set(head.subarray(0, len));
        head = grown;
      }
      head.set(chunk, len);
      len += chunk.byteLength;
    }
    if (chunk === null || len >= tryAt) {
      try {
        const header = parseGguf(head.subarray(0, len), fn, chunk === null ? len : src.total);
        return { header, head: head.subarray(0, len), pos: len, whole: null };
      } catch (e) {
        if (!(e instanceof GgufTruncated)) throw e;
        if (e.needed > MAX_HEADER_BYTES) throw new SdpaError('E_FORMAT', `${fn}: GGUF: the header runs past ${MB(MAX_HEADER_BYTES)} (at least ${e.needed} bytes); expected a header (metadata and tensor list) under ${MB(MAX_HEADER_BYTES)}`);
        tryAt = Math.max(e.needed, Math.ceil(len * 1.5));     // re-parse at most ~log(header) times
      }
    }
  }
}

/** Reads a source's header only: the model card, and whether (and why not) this build runs it. */
export async function inspectGguf(source, options) {
  const fn = 'inspectGguf';
  const { signal } = checkKnown(fn, options, ['signal']);
  checkSignal(fn, signal);
  const src = openSource(fn, source);
  const onAbort = () => src.cancel(signal.reason);
  signal?.addEventListener('abort', onAbort);
  try {
    const { header } = await readHeader(fn, src, signal);
    let planned = null, problem = null;
    try {
      planned = planModel(fn, header);
      if (header.metadata.has('tokenizer.ggml.model')) tokenizerFromGguf(header.metadata, fn);   // (loadGguf refuses a tokenizer it cannot build)
      // loadGguf's defaults: maxSeqLen min(context_length, 4096), maxChunk, float32 KV pages reserved
      const { hp } = planned, o = readModelOptions(fn, {}, hp.contextLength, Math.min(hp.contextLength, DEFAULT_MAX_SEQ_LEN));
      const need = planned.weightBytes + heapOverhead(hp, o, 2 * 4 * hp.kvDim * o.maxSeqLen);
      if (need > HEAP_LIMIT) problem = `it needs ${MB(need)} of wasm memory with loadGguf's defaults (weights ${MB(planned.weightBytes)}, the rest activations and float32 KV pages for ${o.maxSeqLen} positions); a wasm32 heap holds at most ${MB(HEAP_LIMIT)}`;
    } catch (e) {
      if (!(e instanceof SdpaError)) throw e;
      problem = e.message.replace(/^inspectGguf: (GGUF: )?/, '');
    }
    return describe(header, src.total, planned, problem);
  } finally {
    signal?.removeEventListener('abort', onAbort);
    src.cancel();
  }
}

/**
 * FNV-1a over 32-bit little-endian words (a last partial word zero-padded), fed in chunks of any
 * length; names a file's bytes up to its tensor data's end (dataEnd: what follows is never read).
 */
class Fingerprint {
  h = 0x811C9DC5; carry = 0; carried = 0; bytes = 0;
  update(b) {
    let i = 0;
    const n = b.byteLength;
    this.bytes += n;
    let h = this.h;
    while (this.carried > 0 && this.carried < 4 && i < n) { this.carry |= b[i++] << (8 * this.carried); this.carried++; }
    if (this.carried === 4) { h = Math.imul(h ^ this.carry, 0x01000193); this.carry = 0; this.carried = 0; }
    const words = (n - i) >>> 2;
    const dv = new DataView(b.buffer, b.byteOffset + i, words * 4);
    for (let k = 0; k < words; k++) h = Math.imul(h ^ dv.getUint32(4 * k, true), 0x01000193);
    i += 4 * words;
    while (i < n) { this.carry |= b[i++] << (8 * this.carried); this.carried++; }
    this.h = h;
  }
  digest() {
    const h = this.carried > 0 ? Math.imul(this.h ^ this.carry, 0x01000193) : this.h;   // (the last 1-3 bytes count too)
    return `gguf-${(h >>> 0).toString(16).padStart(8, '0')}-${this.bytes.toString(16)}`;
  }
}

/**
 * loadGguf(sdpa, source, options): Promise<{ model, tokenizer, metadata }>
 * from a GGUF file of architecture llama. Options: maxSeqLen (default
 * min(context_length, 4096)), dtype / keyDtype / valueDtype (the KV cache),
 * maxChunk, reserve, activations (as loadLlama's), onProgress({ loaded,
 * total }) after each chunk, signal (an AbortSignal: rejects with its reason,
 * nothing kept).
 */
export async function loadGguf(sdpa, source, options) {
  const fn = 'loadGguf';
  checkSdpa(fn, sdpa);
  const o = checkKnown(fn, options, OPTIONS);
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function') throw new SdpaError('E_ARG', `${fn}: options.onProgress must be a function, got ${typeof o.onProgress}`);
  const signal = o.signal;
  checkSignal(fn, signal);
  checkAbort(signal);
  const src = openSource(fn, source);
  let core = null;
  const onAbort = () => src.cancel(signal.reason);
  signal?.addEventListener?.('abort', onAbort);
  try {
    const { header, head, pos: headPos, whole } = await readHeader(fn, src, signal);
    const planned = planModel(fn, header);
    const tokenizer = header.metadata.has('tokenizer.ggml.model') ? tokenizerFromGguf(header.metadata, fn) : null;
    const { hp, plan } = planned;
    readModelOptions(fn, o, hp.contextLength, Math.min(hp.contextLength, DEFAULT_MAX_SEQ_LEN));
    const spec = {
      config: Object.freeze({ dim: hp.dim, hiddenDim: hp.hidden, nLayers: hp.nLayers, nHeads: hp.nHeads, nKvHeads: hp.nKvHeads, vocabSize: hp.vocab, seqLen: hp.contextLength }),
      headSize: hp.headSize, kvDim: hp.kvDim, rmsEps: hp.rmsEps,
    };
    const poolBytes = cachePlan(fn, sdpa, o, spec);
    const need = planned.weightBytes + heapOverhead(hp, o, poolBytes);
    const have = HEAP_LIMIT - sdpa.memory().heapBytes;
    if (need > have) {
      throw new SdpaError('E_CAPACITY', `${fn}: the model needs ${MB(need)} of wasm memory (weights ${MB(planned.weightBytes)}, the rest activations and KV pages for maxSeqLen ${o.maxSeqLen}); this instance can grow by at most ${MB(have)} (a wasm32 heap holds 4 GiB)`);
    }
    // the dtype of most weight bytes names the model's weightDtype
    const byDtype = new Map();
    for (const { info, dtype } of plan.values()) if (info.ne.length > 1) byDtype.set(dtype, (byDtype.get(dtype) ?? 0) + info.bytes);
    o.weightDtype = [...byDtype].sort((a, b) => b[1] - a[1])[0][0];

    // allocate every tensor, then stream the file's bytes into them
    const targets = [];       // { start, end (file offsets), tensor | bytes }
    let ropeFreqs = null;
    const placed = (alloc, name) => {
      const e = plan.get(name);
      const t = alloc(e.dtype, e.dims);
      targets.push({ start: header.dataOffset + e.info.offset, end: header.dataOffset + e.info.offset + e.info.bytes, tensor: t, name });
      return t;
    };
    try {
      core = new SharedModel(sdpa, spec, null, o, (alloc) => {
        const w = { layers: [] };
        w.embedding = placed(alloc, 'token_embd.weight');
        for (let l = 0; l < hp.nLayers; l++) {
          const layer = {};
          for (const [g, ours] of LAYER_TENSORS) layer[ours] = placed(alloc, `blk.${l}.${g}.weight`);
          w.layers.push(layer);
        }
        w.rmsFinal = placed(alloc, 'output_norm.weight');
        w.classifier = hp.tied ? w.embedding : placed(alloc, 'output.weight');
        Object.assign(w, ropeTables(alloc, o.maxSeqLen, hp.headSize, hp.ropeBase, null));
        return w;
      });
    } catch (e) {
      if (e instanceof SdpaError && e.code === 'E_OOM') {
        throw new SdpaError('E_CAPACITY', `${fn}: the wasm heap could not grow to hold the model's ${MB(need)} (${e.message.replace(/^[\w.]+: /, '')})`, { cause: e });
      }
      throw renamed(e, fn);
    }
    const rf = plan.get('rope_freqs.weight');
    const checkFactors = () => {
      const factors = new Float32Array(ropeFreqs.buffer);
      const badAt = factors.findIndex((f) => !(Number.isFinite(f) && f > 0));
      if (badAt >= 0) throw new SdpaError('E_FORMAT', `${fn}: GGUF: rope_freqs.weight[${badAt}] is ${factors[badAt]}; expected a positive finite frequency divisor`);
    };
    if (rf) {
      ropeFreqs = new Uint8Array(rf.info.bytes);
      targets.push({ start: header.dataOffset + rf.info.offset, end: header.dataOffset + rf.info.offset + rf.info.bytes, bytes: ropeFreqs, name: 'rope_freqs.weight', done: checkFactors });
    }
    targets.sort((a, b) => a.start - b.start);
    // The file's bytes that matter end with its last tensor's: the fingerprint covers them. The source
    // is read on to its end (a writer's padding, trailing bytes), but not more than TRAILING_BYTES
    // past them: then it is cancelled (one that never ends would otherwise keep loadGguf reading).
    const dataEnd = header.dataOffset + header.tensors.reduce((m, t) => Math.max(m, t.offset + t.bytes), 0);
    const fp = new Fingerprint();
    const hash = (chunk, at) => { if (at < dataEnd) fp.update(chunk.subarray(0, Math.min(chunk.byteLength, dataEnd - at))); };
    const total = src.total;              // (null: a stream that does not say its length)
    let k = 0;          // the first target not yet filled
    const place = (chunk, at) => {
      const end = at + chunk.byteLength;
      for (let j = k; j < targets.length && targets[j].start < end; j++) {
        const t = targets[j];
        const from = Math.max(at, t.start), to = Math.min(end, t.end);
        if (from < to) {
          const part = chunk.subarray(from - at, to - at);
          if (t.tensor) t.tensor.setBytes(part, from - t.start);
          else t.bytes.set(part, from - t.start);
        }
        if (t.end <= end && from < to) t.done?.();     // (its last bytes are in: checked now, not at the file's end)
        if (t.end <= end && j === k) k++;
      }
    };
    const progress = (loaded) => o.onProgress?.({ loaded, total });
    if (whole !== null) {
      hash(whole, 0);
      place(whole, 0);
      progress(whole.byteLength);
    } else {
      let pos = headPos;
      // the bytes read with the header, then every chunk after them
      hash(head, 0);
      place(head, 0);
      progress(pos);
      for (;;) {
        const chunk = await nextChunk(src, signal);
        if (chunk === null) break;
        if (k < targets.length) place(chunk, pos);
        hash(chunk, pos);
        pos += chunk.byteLength;
        progress(pos);
        if (pos > dataEnd + TRAILING_BYTES) {
          src.cancel();
          break;
        }
      }
      if (k < targets.length) {
        const t = targets[k];
        throw new SdpaError('E_FORMAT', `${fn}: GGUF: the file ends at byte ${pos}, inside tensor "${t.name}" (file bytes ${t.start} .. ${t.end}): truncated`);
      }
    }
    if (ropeFreqs !== null) fillRope(core.w, o.maxSeqLen, hp.headSize, hp.ropeBase, new Float32Array(ropeFreqs.buffer));
    core.fingerprint = fp.digest();
    const model = makeModel(fn, sdpa, core, o, poolBytes);
    core = null;          // (the model owns it now)
    return { model, tokenizer, metadata: describe(header, src.total, planned, null) };
  } catch (e) {
    core?.free();
    src.cancel(e);
    throw e;
  } finally {
    signal?.removeEventListener?.('abort', onAbort);
  }
}
