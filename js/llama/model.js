// model.js: a Llama-architecture model (llama2.c's) run in wasm: every layer's
// attention and KV cache are sdpa-wasm's (one KVCacheGroup, K rows and q
// rotated inside the op, interleaved pairs), and its dense parts are the
// package's dense calls (sdpa.embed, sdpa.rmsNorm, sdpa.linear, sdpa.swiglu)
// on heap tensors made at load. The weights live in the wasm heap once, in
// the dtype asked for (float32, or float16 / q8_0 / q4_0 quantized at load);
// no JS copy of the checkpoint is kept. A decode step is wasm calls only (no
// JS loop over a hidden-size vector) and allocates nothing.
//
// Shared by a model and its forks (a SharedModel; runtime.js's Core is the instance's): the weights, the heap tensors of
// the activations (calls are synchronous, so one set serves every fork). Each
// model has its own cache group and its last row of logits.

import { SdpaError } from '../errors.js';
import { checkOptions } from '../index.js';
import { parseCheckpoint, fingerprint } from './checkpoint.js';
import { createSampler, samplingOptions } from './sampler.js';
import { toBytes, BOS, EOS } from './tokenizer.js';

/** The key of the model's own entry in a saved state's meta. */
const STATE_KEY = 'sdpa-wasm/llama';
const LOAD_OPTIONS = Object.freeze(['maxSeqLen', 'dtype', 'keyDtype', 'valueDtype', 'float16NewestPage', 'maxChunk', 'reserve', 'weightDtype', 'activations']);
/** The dtypes loadLlama stores the weight matrices in (include/sdpa_dense.h). */
export const WEIGHT_DTYPES = Object.freeze(['float32', 'float16', 'q8_0', 'q4_0']);
/** llama2.c's RMSNorm epsilon and RoPE base (its checkpoints record neither). */
export const RMS_EPS = 1e-5;
const ROPE_BASE = 10000;
const now = () => performance.now();

/** The options `known` of `fn`, read once as the package reads its own (checkOptions: unknown names, getters, inherited options). */
export function checkKnown(fn, options, known) {
  return checkOptions(fn, options, known);
}

function checkCount(fn, name, v, lo, hi) {
  if (!Number.isInteger(v) || v < lo || v > hi) throw new SdpaError('E_ARG', `${fn}: ${name} must be an integer in ${lo} .. ${hi}, got ${String(v)}`);
  return v;
}

/** Token ids as an Int32Array copy, each an integer in 0 .. vocabSize-1 (E_ARG naming the first that is not). */
function readTokens(fn, tokens, vocabSize) {
  let ids = null;
  if (Array.isArray(tokens)) {
    ids = new Int32Array(tokens.length);
    for (let i = 0; i < tokens.length; i++) {
      const t = tokens[i];
      if (!Number.isInteger(t) || t < 0 || t >= vocabSize) {
        throw new SdpaError('E_ARG', `${fn}: tokens[${i}] is ${String(t)}; expected an integer token id in 0 .. ${vocabSize - 1}`);
      }
      ids[i] = t;
    }
    return ids;
  }
  // an integer typed array: a Uint32 id above 2^31 wraps negative in the copy, so the range check below catches it
  if (INTEGER_ARRAYS.some((T) => tokens instanceof T)) ids = Int32Array.from(tokens);
  if (ids === null) throw new SdpaError('E_ARG', `${fn}: tokens must be an Int32Array or an array of token ids, got ${tokens === null ? 'null' : tokens?.constructor?.name ?? typeof tokens}`);
  for (let i = 0; i < ids.length; i++) {
    if (ids[i] < 0 || ids[i] >= vocabSize) {
      throw new SdpaError('E_ARG', `${fn}: tokens[${i}] is ${ids[i]}; expected an integer token id in 0 .. ${vocabSize - 1}`);
    }
  }
  return ids;
}
const INTEGER_ARRAYS = [Int32Array, Uint32Array, Uint16Array, Int16Array, Uint8Array, Int8Array, Uint8ClampedArray];

/** An SdpaError of a call made for `fn` ('sdpa.kvCacheSize: ...'), as fn's own. */
export function renamed(e, fn) {
  return e instanceof SdpaError ? new SdpaError(e.code, e.message.replace(/^[\w.]+: /, `${fn}: `), { cause: e }) : e;
}

/**
 * The checkpoint's tensors as heap tensors: `weightDtype` for the matrices
 * (and the token embedding / classifier), float32 for the norms and the RoPE
 * tables. Each float32 tensor is copied from the checkpoint's bytes straight
 * into wasm memory; a quantized one goes through one float32 staging tensor
 * (the largest matrix), freed at the end. `alloc` records every tensor made.
 */
function loadWeights(sdpa, bytes, layout, weightDtype, maxSeqLen, alloc) {
  const { config: c, offsets: at, headSize: hs, kvDim, headerBytes } = layout;
  const { dim, hiddenDim: hidden, nLayers: L, vocabSize: V } = c;
  let staging = null;
  const floats = (offset, n) => bytes.subarray(headerBytes + 4 * offset, headerBytes + 4 * (offset + n));
  const plain = (offset, dims) => {
    const t = alloc('float32', dims);
    t.setBytes(floats(offset, dims.reduce((a, b) => a * b, 1)));
    return t;
  };
  const matrix = (offset, rows, cols) => {
    if (weightDtype === 'float32') return plain(offset, [rows, cols]);
    const n = rows * cols;
    if (staging === null || staging.length < n) {
      staging?.dispose();
      staging = sdpa.allocTensor('float32', [maxMatrix(c, kvDim)]);
    }
    staging.setBytes(floats(offset, n));
    const t = alloc(weightDtype, [rows, cols]);
    sdpa.quantize({ data: staging.data.subarray(0, n), dims: [rows, cols] }, t);
    return t;
  };
  try {
    const w = { layers: [] };
    w.embedding = matrix(at.tokenEmbedding, V, dim);
    for (let l = 0; l < L; l++) {
      w.layers.push({
        rmsAtt: plain(at.rmsAtt + l * dim, [dim]),
        wq: matrix(at.wq + l * dim * dim, dim, dim),
        wk: matrix(at.wk + l * kvDim * dim, kvDim, dim),
        wv: matrix(at.wv + l * kvDim * dim, kvDim, dim),
        wo: matrix(at.wo + l * dim * dim, dim, dim),
        rmsFfn: plain(at.rmsFfn + l * dim, [dim]),
        w1: matrix(at.w1 + l * hidden * dim, hidden, dim),
        w2: matrix(at.w2 + l * dim * hidden, dim, hidden),
        w3: matrix(at.w3 + l * hidden * dim, hidden, dim),
      });
    }
    w.rmsFinal = plain(at.rmsFinal, [dim]);
    w.classifier = layout.sharedClassifier ? w.embedding : matrix(at.wcls, V, dim);
    // the checkpoint's own freq_cos / freq_sin are not read: the tables are computed as a GGUF
    // file's are (run.c computes its own too), so a checkpoint and its GGUF give the same bits
    Object.assign(w, ropeTables(alloc, maxSeqLen, hs, ROPE_BASE, null));
    return w;
  } finally {
    staging?.dispose();
  }
}

/** Values of the largest weight matrix. */
function maxMatrix(c, kvDim) {
  return Math.max(c.vocabSize * c.dim, c.dim * c.dim, kvDim * c.dim, c.hiddenDim * c.dim);
}

/**
 * The rotary tables cos / sin [maxSeqLen, headSize / 2] as heap tensors:
 * pair j of position p turns by p * base^(-2j / headSize) / factors[j]
 * (factors: a GGUF file's rope_freqs, Llama 3.1's; null: 1), computed in
 * float64 and rounded once to float32.
 */
export function ropeTables(alloc, maxSeqLen, headSize, base, factors) {
  const half = headSize / 2;
  const tables = { cos: alloc('float32', [maxSeqLen, half]), sin: alloc('float32', [maxSeqLen, half]) };
  fillRope(tables, maxSeqLen, headSize, base, factors);
  return tables;
}

/** Writes ropeTables' values into its tensors { cos, sin }. */
export function fillRope({ cos, sin }, maxSeqLen, headSize, base, factors) {
  const half = headSize / 2;
  const c = new Float32Array(maxSeqLen * half), s = new Float32Array(maxSeqLen * half);
  for (let j = 0; j < half; j++) {
    const theta = base ** (-2 * j / headSize) / (factors === null ? 1 : factors[j]);
    for (let p = 0; p < maxSeqLen; p++) {
      c[p * half + j] = Math.cos(p * theta);
      s[p * half + j] = Math.sin(p * theta);
    }
  }
  cos.data.set(c);
  sin.data.set(s);
}

/** Disposes the prepared calls of a step (SharedModel.step), those made so far. */
function disposeStep(s) {
  for (const calls of s.layers) for (const c of Object.values(calls)) c.dispose();
  s.finalNorm?.dispose();
}

/** What a model and its forks share; freed when the last of them is disposed. */
export class SharedModel {
  /**
   * spec: { config, headSize, kvDim, rmsEps }; makeWeights(alloc) makes the
   * weight tensors (every one through alloc, so that free() frees them).
   */
  constructor(sdpa, spec, fp, o, makeWeights) {
    const layout = spec, { config } = spec;
    this.rmsEps = spec.rmsEps;
    this.sdpa = sdpa;
    this.config = config;
    this.headSize = layout.headSize;
    this.kvDim = layout.kvDim;
    this.fingerprint = fp;
    this.maxSeqLen = o.maxSeqLen;
    this.chunk = o.maxChunk;
    this.cacheConfig = o.cacheConfig;
    this.weightDtype = o.weightDtype;
    this.activations = o.activations;
    this.refs = 0;
    this.tensors = [];
    this.steps = new Map();     // rows -> the prepared calls and attention views of a step of that many rows (step)
    this.classifiers = [];      // row i -> the classifier's prepared call on it (classifier)
    const { dim, hiddenDim, nHeads, vocabSize } = config;
    const C = this.chunk;
    try {
      const alloc = (dtype, dims) => { const t = sdpa.allocTensor(dtype, dims); this.tensors.push(t); return t; };
      this.w = makeWeights(alloc);
      // activations: rows of the residual stream x, its normed copy xb, the FFN's hb / hb2,
      // q / k / v / the attention's output (views of them are the attention's [1, m, H, hs])
      this.X = alloc('float32', [C, dim]);
      this.XB = alloc('float32', [C, dim]);
      this.HB = alloc('float32', [C, hiddenDim]);
      this.HB2 = alloc('float32', [C, hiddenDim]);
      this.Q = alloc('float32', [C, dim]);
      this.K = alloc('float32', [C, layout.kvDim]);
      this.V = alloc('float32', [C, layout.kvDim]);
      this.O = alloc('float32', [C, dim]);
      this.LOGITS = alloc('float32', [1, vocabSize]);
    } catch (e) {
      this.free();
      throw e;
    }
    this.nHeads = nHeads;
    this.rotary = Object.freeze({ cos: this.w.cos, sin: this.w.sin, interleaved: true });
    try {
      // a decode step's calls (one row; the classifier on row 0) are made at load and never evicted:
      // no decode step, the first included, allocates
      this.step(1);
      this.classifier(0);
    } catch (e) {
      this.free();
      throw e;
    }
  }

  /**
   * A step of m rows: every layer's dense calls prepared once per m
   * (sdpa.prepareLinear ...: a decode step makes no JS object and checks no
   * argument in JS but liveness), the embed's options, and the attention's
   * views of q / k / v / out as [1, m, H, hs], re-made when memory grew
   * (their buffer changed). At most 9 sizes are kept; an evicted size's calls
   * are disposed (never those of one row, made at load: decode steps).
   */
  step(m) {
    let s = this.steps.get(m);
    if (s === undefined) {
      if (this.steps.size > 8) this.dropSteps(false);
      s = { buffer: null, q: null, k: null, v: null, o: null, attend: null, embed: { out: this.X }, layers: [], finalNorm: null };
      try {
        this.prepareStep(s, m);
      } catch (e) {
        disposeStep(s);           // (an E_OOM part way: nothing of this size is kept)
        throw e;
      }
      this.steps.set(m, s);
    }
    const buffer = this.Q.data.buffer;   // (after the prepares: their blocks may have grown memory)
    if (s.buffer !== buffer) {
      const { nHeads, headSize: hs } = this, nKv = this.config.nKvHeads;
      const view = (t, h) => ({ data: t.data.subarray(0, m * h * hs), dims: [1, m, h, hs] });
      s.q = view(this.Q, nHeads); s.k = view(this.K, nKv); s.v = view(this.V, nKv); s.o = view(this.O, nHeads);
      s.attend = { out: s.o, rotary: this.rotary };
      s.buffer = buffer;
    }
    return s;
  }

  /** Prepares step s's dense calls for m rows: every layer's, then the final norm. */
  prepareStep(s, m) {
    const { sdpa, X, XB, HB, HB2, Q, K, V, O, w } = this, a = this.activations;
    const norm = { out: XB, rows: m, eps: this.rmsEps };
    const proj = (out) => ({ out, rows: m, activations: a });
    const residual = { out: X, rows: m, accumulate: true, activations: a };
    for (const lw of w.layers) {
      const calls = {};
      s.layers.push(calls);       // (filled as made: disposeStep finds every one made)
      calls.attNorm = sdpa.prepareRmsNorm(X, lw.rmsAtt, norm);
      calls.wq = sdpa.prepareLinear(XB, lw.wq, proj(Q));
      calls.wk = sdpa.prepareLinear(XB, lw.wk, proj(K));
      calls.wv = sdpa.prepareLinear(XB, lw.wv, proj(V));
      calls.wo = sdpa.prepareLinear(O, lw.wo, residual);        // x += attention · woᵀ
      calls.ffnNorm = sdpa.prepareRmsNorm(X, lw.rmsFfn, norm);
      calls.w1 = sdpa.prepareLinear(XB, lw.w1, proj(HB));
      calls.w3 = sdpa.prepareLinear(XB, lw.w3, proj(HB2));
      calls.gate = sdpa.prepareSwiglu(HB, HB2, { out: HB, rows: m });
      calls.w2 = sdpa.prepareLinear(HB, lw.w2, residual);       // x += ffn · w2ᵀ
    }
    s.finalNorm = sdpa.prepareRmsNorm(X, w.rmsFinal, norm);
  }

  /** Disposes the kept steps' prepared calls and forgets them (all: also a decode step's, of one row). */
  dropSteps(all = true) {
    for (const [m, s] of this.steps) {
      if (m === 1 && !all) continue;
      disposeStep(s);
      this.steps.delete(m);
    }
  }

  /**
   * Appends m tokens (ids[i0 ..]) to `group` at its length, one step per layer,
   * leaves the rows' final normed states in XB, writes every row's logits into
   * out (row-major, at outOffset) unless out is null, and adds the time to `timing`.
   */
  run(group, ids, i0, m, out, outOffset, timing) {
    const { sdpa, w } = this;
    const layers = group.layers;
    const t0 = now();
    let attention = 0, products = 0, t;
    let s = this.step(m);
    sdpa.embed(w.embedding, ids.subarray(i0, i0 + m), s.embed);
    for (let l = 0; l < layers.length; l++) {
      const c = s.layers[l];
      c.attNorm.run();
      t = now();
      c.wq.run();
      c.wk.run();
      c.wv.run();
      const ta = now();
      products += ta - t;
      layers[l].step(s.q, s.k, s.v, s.attend);      // append at the cache's length, causal, rotary in the op
      t = now();
      attention += t - ta;
      s = this.step(m);                             // (a step that took pages may have grown memory: the views)
      c.wo.run();                                   // x += attention · woᵀ
      products += now() - t;
      c.ffnNorm.run();
      t = now();
      c.w1.run();
      c.w3.run();
      products += now() - t;
      c.gate.run();
      t = now();
      c.w2.run();                                   // x += ffn · w2ᵀ
      products += now() - t;
    }
    s.finalNorm.run();
    if (out !== null) {
      t = now();
      const V = this.config.vocabSize, logits = this.LOGITS;
      for (let i = 0; i < m; i++) {                 // the classifier row by row, through one row of heap memory
        this.classifier(i).run();
        out.set(logits.data, outOffset + i * V);
      }
      products += now() - t;
    }
    const total = now() - t0;
    timing.attentionMs += attention;
    timing.productsMs += products;
    timing.otherMs += total - attention - products;
    timing.tokens += m;
  }

  /** The classifier on row i of XB (a [1, dim] view) into LOGITS, prepared at its first use. */
  classifier(i) {
    let c = this.classifiers[i];
    if (c === undefined) {
      const dim = this.config.dim;
      const row = { data: this.XB.data.subarray(i * dim, (i + 1) * dim), dims: [1, dim] };
      c = this.classifiers[i] = this.sdpa.prepareLinear(row, this.w.classifier, { out: this.LOGITS, activations: this.activations });
    }
    return c;
  }

  /** The classifier on row i of XB into `logits` (a Float32Array of vocabSize). */
  lastLogits(i, logits) {
    this.classifier(i).run();
    logits.set(this.LOGITS.data);
  }

  /** Drops one reference; the last frees the heap tensors. */
  release() {
    if (--this.refs === 0) this.free();
  }

  free() {
    this.dropSteps();
    for (const c of this.classifiers) c?.dispose();
    this.classifiers.length = 0;
    for (const t of this.tensors) t.dispose();
    this.tensors.length = 0;
  }
}

/**
 * loadLlama(sdpa, checkpoint, options): a LlamaModel from a llama2.c version-0
 * checkpoint (Uint8Array / ArrayBuffer). Synchronous. Options: maxSeqLen
 * (default and at most the checkpoint's seq_len: its RoPE tables end there),
 * dtype / keyDtype / valueDtype / float16NewestPage of the KV cache (default
 * float32; createKVCache's options), weightDtype
 * (the weight matrices' dtype in wasm memory: float32, or float16 / q8_0 /
 * q4_0 quantized at load; default float32), activations ('int16': the q8_0 /
 * q4_0 products on activations quantized per block, sdpa.linear's option;
 * default 'float32'), maxChunk (rows per step of a long
 * forward; default min(maxSeqLen, 512)), reserve (default true: the page pool
 * made to have one full context's pages free, so that this model's decode
 * steps allocate nothing; several models on one instance: reserve their sum
 * with sdpa.reserve).
 */
export function loadLlama(sdpa, checkpoint, options) {
  const fn = 'loadLlama';
  checkSdpa(fn, sdpa);
  const o = checkKnown(fn, options, LOAD_OPTIONS);
  // a view, not a copy: every byte is read into wasm memory before this call returns
  const bytes = toBytes(checkpoint, fn, 'checkpoint', false);
  const layout = parseCheckpoint(bytes);
  const { seqLen } = layout.config;
  readModelOptions(fn, o, seqLen, seqLen);
  o.weightDtype = o.weightDtype ?? 'float32';
  if (!WEIGHT_DTYPES.includes(o.weightDtype)) {
    throw new SdpaError('E_ARG', `${fn}: options.weightDtype is ${JSON.stringify(o.weightDtype) ?? String(o.weightDtype)}; expected one of ${WEIGHT_DTYPES.map((d) => `'${d}'`).join(', ')}`);
  }
  const block = o.weightDtype === 'q8_0' || o.weightDtype === 'q4_0' ? 32 : 1;
  const { dim, hiddenDim } = layout.config;
  if (dim % block !== 0 || hiddenDim % block !== 0) {
    throw new SdpaError('E_ARG', `${fn}: options.weightDtype '${o.weightDtype}' stores rows in blocks of ${block} values, but this checkpoint's rows hold ${dim} (dim) and ${hiddenDim} (hidden_dim) values; expected multiples of ${block}`);
  }
  const spec = { config: layout.config, headSize: layout.headSize, kvDim: layout.kvDim, rmsEps: RMS_EPS };
  const poolBytes = cachePlan(fn, sdpa, o, spec);
  if (!LITTLE_ENDIAN) throw new SdpaError('E_ARG', `${fn}: a big-endian host cannot read float32 checkpoints in place`);
  let core;
  try {
    core = new SharedModel(sdpa, spec, fingerprint(bytes), o, (alloc) => loadWeights(sdpa, bytes, layout, o.weightDtype, o.maxSeqLen, alloc));
  } catch (e) {
    throw renamed(e, fn);
  }
  return makeModel(fn, sdpa, core, o, poolBytes);
}

/** E_ARG / E_DISPOSED unless sdpa is a live instance from createSdpa(). */
export function checkSdpa(fn, sdpa) {
  if (sdpa === null || typeof sdpa !== 'object' || typeof sdpa.createKVCacheGroup !== 'function') {
    throw new SdpaError('E_ARG', `${fn}: sdpa must be an instance from createSdpa(), got ${sdpa === null ? 'null' : typeof sdpa}`);
  }
  if (sdpa.disposed) throw new SdpaError('E_DISPOSED', `${fn}: sdpa was disposed`);
}

/**
 * The options every loader shares, checked and defaulted in place: maxSeqLen
 * (default defaultSeqLen, at most seqLen), maxChunk, reserve, activations.
 */
export function readModelOptions(fn, o, seqLen, defaultSeqLen) {
  o.maxSeqLen = checkCount(fn, 'options.maxSeqLen', o.maxSeqLen ?? defaultSeqLen, 1, seqLen);
  o.maxChunk = checkCount(fn, 'options.maxChunk', o.maxChunk ?? Math.min(o.maxSeqLen, 512), 1, o.maxSeqLen);
  if (typeof (o.reserve ?? true) !== 'boolean') throw new SdpaError('E_ARG', `${fn}: options.reserve must be a boolean, got ${typeof o.reserve}`);
  o.activations = o.activations ?? 'float32';
  if (o.activations !== 'float32' && o.activations !== 'int16') {
    throw new SdpaError('E_ARG', `${fn}: options.activations is ${JSON.stringify(o.activations) ?? String(o.activations)}; expected 'float32' or 'int16' (quantized weights' products on activations quantized per block, sdpa.linear's option)`);
  }
  return o;
}

/** The cache options' rules (before any allocation): sets o.cacheConfig, returns one layer's pool bytes. */
export function cachePlan(fn, sdpa, o, spec) {
  o.cacheConfig = { maxSeqLen: o.maxSeqLen, numKvHeads: spec.config.nKvHeads, headDim: spec.headSize };
  for (const k of ['dtype', 'keyDtype', 'valueDtype', 'float16NewestPage']) if (o[k] !== undefined) o.cacheConfig[k] = o[k];
  try {
    return sdpa.kvCacheSize(o.cacheConfig).poolBytes;
  } catch (e) {
    throw renamed(e, fn);
  }
}

/** A LlamaModel on `core` with a new cache group (and the pool reserved); frees core on failure. */
export function makeModel(fn, sdpa, core, o, poolBytes) {
  const nLayers = core.config.nLayers;
  let group = null;
  try {
    group = sdpa.createKVCacheGroup(Array.from({ length: nLayers }, () => ({ ...core.cacheConfig })));
    if (o.reserve ?? true) sdpa.reserve(poolBytes * nLayers);
  } catch (e) {
    group?.dispose();
    core.free();
    throw renamed(e, fn);
  }
  return new LlamaModel(core, group, null);
}
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export class LlamaModel {
  #core;
  #group;
  #logits;          // the last appended row's logits (valid when #hasLogits)
  #hasLogits = false;
  #disposed = false;
  #timing = { tokens: 0, attentionMs: 0, productsMs: 0, otherMs: 0 };

  /** Made by loadLlama, fork and restore. */
  constructor(core, group, logits) {
    this.#core = core;
    this.#group = group;
    this.#logits = new Float32Array(core.config.vocabSize);
    if (logits) { this.#logits.set(logits); this.#hasLogits = true; }
    core.refs++;
  }

  /** { dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen } of the checkpoint. */
  get config() { return this.#core.config; }
  /** The most tokens this model holds (loadLlama's maxSeqLen). */
  get maxSeqLen() { return this.#core.maxSeqLen; }
  /** Tokens held (every layer's cache length). */
  get length() { return this.#group.length; }
  /** The KV cache's bytes (all layers; pages shared with forks counted in each). */
  get bytes() { return this.#group.bytes; }
  /** The KV cache group (its layers are ordinary KVCaches; use the model's methods to change it). */
  get cache() { return this.#group; }
  /** The KV cache's key and value dtypes. */
  get keyDtype() { return this.#group.layers[0].keyDtype; }
  /** Whether the KV cache keeps its newest page in float16 (createKVCache's float16NewestPage). */
  get float16NewestPage() { return this.#group.layers[0].float16NewestPage; }
  get valueDtype() { return this.#group.layers[0].valueDtype; }
  get disposed() { return this.#disposed || this.#group.disposed; }
  /**
   * Time of the last forward (or generate step): tokens, attentionMs (our
   * attention steps), productsMs (the weight products, classifier included),
   * otherMs (embedding, norms, SwiGLU, JS), denseMs (productsMs + otherMs).
   */
  get timing() { const t = this.#timing; return { ...t, denseMs: t.productsMs + t.otherMs }; }
  /** The dtype the weight matrices are stored in (loadLlama's weightDtype; a GGUF file's: the dtype of most weight bytes). */
  get weightDtype() { return this.#core.weightDtype; }
  /** Names the weights (a checkpoint's or GGUF file's bytes): saved states and kept chats refuse other weights. */
  get fingerprint() { return this.#core.fingerprint; }

  #alive(fn) {
    if (this.#core.sdpa.disposed) throw new SdpaError('E_DISPOSED', `${fn}: the sdpa instance was disposed`);
    if (this.disposed) throw new SdpaError('E_DISPOSED', `${fn}: the model was disposed`);
    return this.#group;
  }

  /**
   * Appends `tokens` at this.length and returns the logits of every appended
   * position, row-major [n, vocabSize] (options.logits: 'last' returns only
   * the last row; options.out: a Float32Array to write them into, returned).
   * One causal step per layer for up to maxChunk tokens (a prompt is one call).
   * Nothing is appended on an error.
   */
  forward(tokens, options) {
    const fn = 'LlamaModel.forward';
    const o = checkKnown(fn, options, ['out', 'logits']);
    const group = this.#alive(fn);
    const { vocabSize } = this.#core.config;
    const ids = readTokens(fn, tokens, vocabSize);
    const n = ids.length;
    if (n === 0) throw new SdpaError('E_ARG', `${fn}: tokens is empty; expected at least one token id`);
    const mode = o.logits ?? 'all';
    if (mode !== 'all' && mode !== 'last') throw new SdpaError('E_ARG', `${fn}: options.logits must be 'all' or 'last', got ${String(mode)}`);
    const rows = mode === 'all' ? n : 1;
    let out = o.out;
    if (out === undefined || out === null) out = new Float32Array(rows * vocabSize);
    else if (!(out instanceof Float32Array) || out.length !== rows * vocabSize) {
      throw new SdpaError('E_ARG', `${fn}: options.out must be a Float32Array of ${rows} x ${vocabSize} = ${rows * vocabSize} values, got ${out?.constructor?.name ?? typeof out} of ${out?.length}`);
    }
    this.#append(fn, group, ids, n, mode === 'all' ? out : null);
    if (mode === 'last') out.set(this.#logits);
    return out;
  }

  /** Appends ids[0..n) and keeps the last row's logits; `out` (or null) gets every row's. All or nothing. */
  #append(fn, group, ids, n, out) {
    const core = this.#core, { vocabSize } = core.config;
    const start = group.length;   // (n >= 1)
    if (start + n > core.maxSeqLen) {
      throw new SdpaError('E_CAPACITY', `${fn}: ${n} tokens at position ${start} would end at ${start + n}; expected at most maxSeqLen ${core.maxSeqLen}`);
    }
    const timing = this.#timing;
    timing.tokens = 0; timing.attentionMs = 0; timing.productsMs = 0; timing.otherMs = 0;
    const V = core.config.vocabSize;
    try {
      for (let i = 0; i < n; i += core.chunk) {
        const m = Math.min(core.chunk, n - i);
        core.run(group, ids, i, m, out, i * vocabSize, timing);
      }
      if (out === null) {
        // the last row's classifier, inside the try: its prepared call may be made now (E_OOM),
        // and its run writes this.#logits only when it succeeds
        const t = now();
        core.lastLogits((n - 1) % core.chunk, this.#logits);
        timing.productsMs += now() - t;
      }
    } catch (e) {
      // a layer or the classifier failed (E_OOM): undo the layers before it (group.length is the
      // shortest layer's, so every layer is truncated); the logits of row start-1 are still the model's
      group.truncate(start);
      throw e;
    }
    // the last row's logits, once per call (only now: a failed call leaves the model's as they were)
    if (out !== null) this.#logits.set(out.subarray((n - 1) * V, n * V));
    this.#hasLogits = true;
  }

  /**
   * The logits of the last token appended (by forward, generate or stream; a fork's
   * are its parent's), copied into `out` (a Float32Array of vocabSize) or a new array;
   * null when the model holds none (new, truncated, restored).
   */
  lastLogits(out) {
    const fn = 'LlamaModel.lastLogits';
    this.#alive(fn);
    const V = this.#core.config.vocabSize;
    if (out !== undefined && !(out instanceof Float32Array && out.length === V)) {
      throw new SdpaError('E_ARG', `${fn}: out must be a Float32Array of ${V} values, got ${out?.constructor?.name ?? typeof out} of ${out?.length}`);
    }
    if (!this.#hasLogits) return null;
    const dst = out ?? new Float32Array(V);
    dst.set(this.#logits);
    return dst;
  }

  /** Keeps the first n tokens (rollback, all layers); O(pages). */
  truncate(n) {
    const fn = 'LlamaModel.truncate';
    const group = this.#alive(fn);
    const had = group.length;
    group.truncate(n);
    if (n !== had) this.#hasLogits = false;
  }

  /** A model sharing this one's weights and, copy-on-write, its cache (and its last logits). */
  fork() {
    const group = this.#alive('LlamaModel.fork');
    return new LlamaModel(this.#core, group.fork(), this.#hasLogits ? this.#logits : null);
  }

  #stateMeta(fn, options, known) {
    const o = checkKnown(fn, options, known);
    this.#alive(fn);
    const { config, fingerprint: checkpoint } = this.#core;
    const out = { meta: { [STATE_KEY]: { config, checkpoint }, meta: o.meta ?? null } };
    if (o.chunkBytes !== undefined) out.chunkBytes = o.chunkBytes;
    if (o.signal !== undefined) out.signal = o.signal;
    if (o.into !== undefined) out.into = o.into;
    return out;
  }

  /**
   * The model's state (every layer's KV cache, with `meta`: your JSON, e.g. the
   * next token to feed) in the portable KV state format (docs/FORMAT.md).
   */
  save(options) { return this.#group.save(this.#stateMeta('LlamaModel.save', options, ['meta', 'into'])); }
  saveChunks(options) { return this.#group.saveChunks(this.#stateMeta('LlamaModel.saveChunks', options, ['meta', 'chunkBytes'])); }
  /** save() as a ReadableStream; options.signal (an AbortSignal) ends it and lets its snapshot go. */
  saveStream(options) { return this.#group.saveStream(this.#stateMeta('LlamaModel.saveStream', options, ['meta', 'chunkBytes', 'signal'])); }

  /**
   * A new model with this one's weights and the state saved by save() (any
   * source sdpa.loadKVCacheGroup reads). Resolves to { model, meta }. A state
   * of other weights or another geometry is E_FORMAT, and nothing is kept.
   * options.signal (an AbortSignal): aborting rejects with its reason, nothing kept.
   */
  async restore(source, options) {
    const fn = 'LlamaModel.restore';
    const { signal } = checkKnown(fn, options, ['signal']);
    this.#alive(fn);
    const core = this.#core;
    core.refs++;           // held across the await: disposing this model meanwhile must not free the weights
    let loaded;
    try {
      loaded = await core.sdpa.loadKVCacheGroup(source, signal === undefined ? { maxSeqLen: core.maxSeqLen } : { maxSeqLen: core.maxSeqLen, signal });
    } catch (e) {
      core.release();
      throw e;
    }
    const { group, meta } = loaded;
    const mine = meta && typeof meta === 'object' ? meta[STATE_KEY] : undefined;
    let why = null;
    if (!mine) why = 'it was not saved by LlamaModel.save (its meta has no model entry)';
    else if (mine.checkpoint !== core.fingerprint) why = `it was saved with other weights (checkpoint ${mine.checkpoint}; this model's is ${core.fingerprint})`;
    else if (group.layers.length !== core.config.nLayers) why = `it has ${group.layers.length} layers; expected ${core.config.nLayers}`;
    else {
      const n = group.layers[0].length;
      const bad = group.layers.findIndex((c) => c.batch !== 1 || c.numKvHeads !== core.config.nKvHeads || c.headDim !== core.headSize || c.window !== 0);
      const uneven = group.layers.findIndex((c) => c.length !== n);
      if (bad >= 0) why = `its layer ${bad} is not a plain cache of batch 1 and ${core.config.nKvHeads} KV heads of ${core.headSize}`;
      else if (uneven >= 0) why = `its layer ${uneven} holds ${group.layers[uneven].length} rows, layer 0 ${n}; a model's layers hold the same tokens`;
    }
    if (why === null && core.sdpa.disposed) why = 'the sdpa instance was disposed';
    if (why !== null) {
      group.dispose();
      core.release();
      throw new SdpaError(core.sdpa.disposed ? 'E_DISPOSED' : 'E_FORMAT', `${fn}: the state cannot be restored into this model: ${why}`);
    }
    const model = new LlamaModel(core, group, null);
    core.release();        // (the new model holds its own reference)
    return { model, meta: meta.meta ?? null };
  }

  /**
   * Generates tokens one at a time: returns a generator of ids. The call itself
   * checks every argument and appends `prompt` (ids; may be empty when the model
   * holds logits from its last forward) in one forward; then each step of the
   * generator samples a token from the last logits, yields it, and appends it
   * unless generation stops there. So every yielded token but the last is in the
   * model: feed the last one first when you continue. Stops at a stop token
   * (options.stop, default [EOS, BOS]: llama2.c's models end a text with BOS),
   * after maxNewTokens, or when the model holds maxSeqLen tokens. Sampling:
   * temperature (1; 0 = greedy), topP (0.9), topK (0 = off), seed. The
   * generator returns why it stopped: 'stop', 'maxNewTokens' or 'length'. A
   * model changed between steps (truncate, forward) ends it with E_ARG.
   */
  stream(prompt, options) { return this.#start('LlamaModel.stream', prompt, options); }

  #start(fn, prompt, options) {
    const o = checkKnown(fn, options, ['maxNewTokens', 'temperature', 'topP', 'topK', 'seed', 'stop']);
    const group = this.#alive(fn);
    const core = this.#core, { vocabSize } = core.config;
    const ids = readTokens(fn, prompt ?? [], vocabSize);
    const maxNew = o.maxNewTokens ?? Infinity;
    if (maxNew !== Infinity) checkCount(fn, 'options.maxNewTokens', maxNew, 1, 2 ** 31 - 1);
    const stop = new Set(readTokens(`${fn}: options.stop`, o.stop ?? [EOS, BOS], vocabSize));
    const sampler = createSampler(vocabSize, samplingOptions(fn, o));
    if (ids.length > 0) this.#append(fn, group, ids, ids.length, null);
    else if (!this.#hasLogits) throw new SdpaError('E_ARG', `${fn}: prompt is empty and the model holds no logits to sample from (a new, truncated or restored model); pass at least one token`);
    return this.#steps(fn, sampler, stop, maxNew);
  }

  * #steps(fn, sampler, stop, maxNew) {
    const core = this.#core, one = new Int32Array(1);
    for (let k = 1; ; k++) {
      const group = this.#alive(fn), at = group.length;
      const t = sampler.sample(this.#logits);
      yield t;
      if (this.#alive(fn).length !== at || !this.#hasLogits) {
        throw new SdpaError('E_ARG', `${fn}: the model was changed between two steps of the generator (it held ${at} tokens, now ${group.length}); start a new stream`);
      }
      if (stop.has(t)) return 'stop';
      if (k >= maxNew) return 'maxNewTokens';
      if (at >= core.maxSeqLen) return 'length';
      one[0] = t;
      this.#append(fn, group, one, 1, null);
    }
  }

  /** stream() run to its end: { tokens: Int32Array, stop: 'stop' | 'maxNewTokens' | 'length' }. */
  generate(prompt, options) {
    const it = this.#start('LlamaModel.generate', prompt, options);
    const tokens = [];
    for (;;) {
      const r = it.next();
      if (r.done) return { tokens: Int32Array.from(tokens), stop: r.value };
      tokens.push(r.value);
    }
  }

  /** Frees this model's cache; the weights and buffers go with the last of a model and its forks. */
  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#group.dispose();
    this.#core.release();
  }

  get [Symbol.toStringTag]() { return 'LlamaModel'; }
}
