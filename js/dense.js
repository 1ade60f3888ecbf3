// dense.js: the dense calls beside the attention (include/sdpa_dense.h):
// linear, rmsNorm, swiglu, embed, quantize, on tensors in wasm memory.
//
// Validated once, in C: JS reads what only JS can see (each argument is a
// live heap tensor, or a view of one; the options' JS types; `rows`, the
// prefix of rows JS describes), writes the sdpa_tensor structs into the
// instance's scratch block and calls its wasm entry (src/wasm/api.h,
// sdpa_wasm_linear ...), which checks every rule of CONTRACT.md section 6
// before it writes anything. C's message names the argument and the rule;
// JS puts the call's name first. Nothing is copied:
// the kernels read and write the tensors' memory in place.
//
// Prepared calls (prepareLinear / prepareRmsNorm / prepareSwiglu): the same
// JS checks once, at prepare; the three sdpa_tensor structs (x / gate, weight
// / up, out: in that order, TENSOR_BYTES apart) written once into a block the
// PreparedCall owns (malloc'ed at prepare, freed by its dispose() or the
// instance's). Views are kept as addresses, which memory growth does not
// move; the heap tensor holding each is remembered so that run() can check it
// is alive. run() checks liveness only, then calls the same wasm entry, which
// checks every C rule on every run; it makes no JS object on success.

import { Checks } from './rules.js';
import { SdpaError } from './errors.js';
import { heapState } from './heap.js';
import { LAYOUT } from './abi.js';
import { readPlainOptions, describeValue, inspectTensor, checkLive } from './snapshot.js';
import { putTensor, SLOT } from './runtime.js';
import { INT32_MAX } from './shape.js';

const LINEAR_OPTIONS = Object.freeze(['out', 'accumulate', 'rows', 'activations']);
/** sdpa_linear's flags (include/sdpa_dense.h). */
const ACCUMULATE = 1, INT16_ACTIVATIONS = 2;
const RMS_OPTIONS = Object.freeze(['out', 'eps', 'rows']);
const SWIGLU_OPTIONS = Object.freeze(['out', 'rows']);
const EMBED_OPTIONS = Object.freeze(['out']);
const DEFAULT_EPS = 1e-5;
/** A prepared call's block: its three sdpa_tensor structs, one after another. */
const TENSOR_BYTES = LAYOUT.sdpa_tensor.size;
/** Which wasm entry a PreparedCall runs. */
const LINEAR = 0, RMS_NORM = 1, SWIGLU = 2;

/**
 * A tensor argument as C is given it: { ptr, len, dtype, dims, t }, or null
 * (its failure in ck). A heap tensor is read from its state (no property of
 * it is read); any other tensor object must be a view of a live heap tensor
 * of this instance (snapshot.js checkLive): the dense calls work in place.
 */
function tensorArg(ck, core, name, t) {
  const s = heapState(t);
  if (s !== undefined) {
    if (s.disposed) { ck.add('E_DISPOSED', `${name} is a disposed heap tensor`); return null; }
    if (s.rt !== core) { ck.add('E_ARG', `${name} is a heap tensor of another sdpa instance; expected one of this instance`); return null; }
    return { ptr: s.ptr, len: s.n, dtype: s.dtype, dims: s.dims, t, held: s, view: false };
  }
  const d = inspectTensor(ck, name, t, 'input');
  if (d === null || d.data === null) return null;
  checkLive(ck, d);
  const holder = core.tensorHolding(d.byteOffset, d.byteOffset + d.byteLength);
  if (holder === null || d.buffer !== core.currentBuffer()) {
    ck.add('E_ARG', `${name} must be a heap tensor (sdpa.allocTensor) or a view of one in this instance's wasm memory; got ${describeValue(d.data)} elsewhere (the dense calls read and write wasm memory in place)`);
    return null;
  }
  return { ptr: d.byteOffset, len: d.len, dtype: d.dtype, dims: d.dims, t, held: heapState(holder), view: true };
}

/** `rows` (an option): undefined, or an integer >= 1 (C checks it against the tensors' rows: E_DIMS). */
function readRows(ck, rows) {
  if (rows === undefined || rows === null) return null;
  if (!Number.isSafeInteger(rows) || rows < 1 || rows > INT32_MAX) {
    ck.add('E_ARG', `options.rows is ${describeValue(rows)}; expected a positive integer (the first rows of the activations)`);
    return null;
  }
  return rows;
}

/**
 * An activation descriptor cut to its first `rows` rows (every dim but the
 * last, flattened): [rows, last]. JS makes this view, so JS checks it fits.
 */
function firstRows(ck, a, rows) {
  if (a === null || rows === null) return a;
  const last = a.dims[a.dims.length - 1], have = a.len / last;
  if (!(rows <= have)) {
    ck.add('E_DIMS', `options.rows is ${rows} but ${a.name} holds ${have} rows of ${last}; expected at most ${have}`);
    return null;
  }
  return { ptr: a.ptr, len: rows * last, dtype: a.dtype, dims: [rows, last], t: a.t, name: a.name, held: a.held, view: a.view };
}

export function denseEntries(core) {
  const M = core.M;

  const SLOT_AT = (name) => SLOT[name];
  /** Writes a descriptor into a scratch slot (views: core.views() of this call) and returns its address. */
  function put(views, slot, a) {
    const at = core.scratch + SLOT_AT(slot);
    putTensor(views, at, a.ptr, a.len, a.dtype, a.dims);
    return at;
  }

  /** options.out as C is given it, or null when none was given (run() then makes one). */
  function outArg(ck, o) {
    if (o.out !== undefined && o.out !== null) return tensorArg(ck, core, 'out', o.out);
    return null;
  }

  /** Runs C's entry with a fresh out when none was given; returns the out tensor. */
  function run(fn, ck, given, makeDims, call) {
    core.checkAlive(ck);
    ck.done();
    let out = given, made = null;
    if (out === null) {
      const dims = makeDims();
      if (dims.every((x) => Number.isInteger(x) && x >= 1 && x <= INT32_MAX)) {
        made = core.allocTensor(fn, 'float32', dims);
        out = { ptr: heapState(made).ptr, len: made.length, dtype: 'float32', dims: made.dims, t: made };
      } else {
        // the inputs' dims cannot give an out: C reports why (a rule of x, weight or ids), on a stand-in it never writes
        out = { ptr: core.slot('stats'), len: 1, dtype: 'float32', dims: [1], t: null };
      }
    }
    try {
      const views = core.views();
      core.checkEntry(call(views, put(views, 'out', out)), fn);
    } catch (e) {
      made?.dispose();
      throw e;
    }
    return out.t;
  }

  /** linear's arguments as C is given them: { X, W, O, flags } (each descriptor null on its failure in ck). */
  function linearArgs(ck, x, weight, options) {
    const o = readPlainOptions(ck, options, LINEAR_OPTIONS);
    const rows = readRows(ck, o.rows);
    if (o.accumulate !== undefined && typeof o.accumulate !== 'boolean') ck.add('E_ARG', `options.accumulate must be a boolean, got ${describeValue(o.accumulate)}`);
    if (o.activations !== undefined && o.activations !== 'float32' && o.activations !== 'int16') {
      ck.add('E_ARG', `options.activations must be 'float32' or 'int16', got ${describeValue(o.activations)}`);
    }
    const flags = (o.accumulate ? ACCUMULATE : 0) | (o.activations === 'int16' ? INT16_ACTIVATIONS : 0);
    const X = firstRows(ck, named(tensorArg(ck, core, 'x', x), 'x'), rows);
    const W = named(tensorArg(ck, core, 'weight', weight), 'weight');
    const O = firstRows(ck, named(outArg(ck, o), 'out'), rows);
    return { X, W, O, flags, hasOut: o.out !== undefined && o.out !== null };
  }

  /** rmsNorm's arguments as C is given them: { X, W, O, eps }. */
  function rmsNormArgs(ck, x, weight, options) {
    const o = readPlainOptions(ck, options, RMS_OPTIONS);
    const rows = readRows(ck, o.rows);
    const eps = o.eps ?? DEFAULT_EPS;
    if (typeof eps !== 'number') ck.add('E_ARG', `options.eps must be a number, got ${describeValue(eps)}`);
    const X = firstRows(ck, named(tensorArg(ck, core, 'x', x), 'x'), rows);
    const W = named(tensorArg(ck, core, 'weight', weight), 'weight');
    const O = firstRows(ck, named(outArg(ck, o), 'out'), rows);
    return { X, W, O, eps, hasOut: o.out !== undefined && o.out !== null };
  }

  /** swiglu's arguments as C is given them: { G, U, O }. */
  function swigluArgs(ck, gate, up, options) {
    const o = readPlainOptions(ck, options, SWIGLU_OPTIONS);
    const rows = readRows(ck, o.rows);
    const G = firstRows(ck, named(tensorArg(ck, core, 'gate', gate), 'gate'), rows);
    const U = firstRows(ck, named(tensorArg(ck, core, 'up', up), 'up'), rows);
    const O = firstRows(ck, named(outArg(ck, o), 'out'), rows);
    return { G, U, O, hasOut: o.out !== undefined && o.out !== null };
  }

  /**
   * out = x · weightᵀ (+ out with accumulate). x float32 [..., in], weight
   * [outF, in] in any weight dtype, out float32 [..., outF]. activations:
   * 'int16' quantizes x per row and block of 32 for q8_0 / q4_0 / q5_0 weights
   * (integer block dots, about twice as fast; error <= half a step, 1/65534 of a block's
   * largest |x|).
   */
  function linear(x, weight, options) {
    const fn = 'sdpa.linear';
    const ck = new Checks(fn);
    const { X, W, O, flags } = linearArgs(ck, x, weight, options);
    return run(fn, ck, O, () => [...X.dims.slice(0, -1), W.dims[0]],
      (v, outAt) => M._sdpa_wasm_linear(core.ctx, put(v, 'q', X), put(v, 'k', W), outAt, flags));
  }

  /** out = weight * x / sqrt(mean(x^2) + eps), row by row; out may be x. */
  function rmsNorm(x, weight, options) {
    const fn = 'sdpa.rmsNorm';
    const ck = new Checks(fn);
    const { X, W, O, eps } = rmsNormArgs(ck, x, weight, options);
    return run(fn, ck, O, () => X.dims.slice(), (v, outAt) => M._sdpa_wasm_rms_norm(core.ctx, put(v, 'q', X), put(v, 'k', W), eps, outAt));
  }

  /** out = silu(gate) * up; out may be gate or up. */
  function swiglu(gate, up, options) {
    const fn = 'sdpa.swiglu';
    const ck = new Checks(fn);
    const { G, U, O } = swigluArgs(ck, gate, up, options);
    return run(fn, ck, O, () => G.dims.slice(), (v, outAt) => M._sdpa_wasm_swiglu(core.ctx, put(v, 'q', G), put(v, 'k', U), outAt));
  }

  /**
   * A PreparedCall of `call` (the plain call's name) on the checked
   * descriptors a, b, out (C's argument order). `out` is required: a prepared
   * call never allocates its output.
   */
  function prepare(fn, call, ck, kind, { hasOut }, a, b, O, flags, eps) {
    if (!hasOut) ck.add('E_ARG', 'options.out is missing; expected a heap tensor or a view of one (a prepared call never allocates its output)');
    core.checkAlive(ck);
    ck.done();
    const at = core.malloc(3 * TENSOR_BYTES, fn, "the prepared call's argument block");
    const v = core.views();
    putTensor(v, at, a.ptr, a.len, a.dtype, a.dims);
    putTensor(v, at + TENSOR_BYTES, b.ptr, b.len, b.dtype, b.dims);
    putTensor(v, at + 2 * TENSOR_BYTES, O.ptr, O.len, O.dtype, O.dims);
    const p = new PreparedCall(core, call, kind, at, [a, b, O], flags, eps);
    core.prepared.add(p);
    return p;
  }

  /** linear with its arguments fixed once: run() computes it again on the tensors' current values. */
  function prepareLinear(x, weight, options) {
    const fn = 'sdpa.prepareLinear';
    const ck = new Checks(fn);
    const args = linearArgs(ck, x, weight, options);
    return prepare(fn, 'sdpa.linear', ck, LINEAR, args, args.X, args.W, args.O, args.flags, 0);
  }

  /** rmsNorm with its arguments fixed once. */
  function prepareRmsNorm(x, weight, options) {
    const fn = 'sdpa.prepareRmsNorm';
    const ck = new Checks(fn);
    const args = rmsNormArgs(ck, x, weight, options);
    return prepare(fn, 'sdpa.rmsNorm', ck, RMS_NORM, args, args.X, args.W, args.O, 0, args.eps);
  }

  /** swiglu with its arguments fixed once. */
  function prepareSwiglu(gate, up, options) {
    const fn = 'sdpa.prepareSwiglu';
    const ck = new Checks(fn);
    const args = swigluArgs(ck, gate, up, options);
    return prepare(fn, 'sdpa.swiglu', ck, SWIGLU, args, args.G, args.U, args.O, 0, 0);
  }

  /** out[i] = table[ids[i]] as float32. ids: an Int32Array or an array of integers. */
  function embed(table, ids, options) {
    const fn = 'sdpa.embed';
    const ck = new Checks(fn);
    const o = readPlainOptions(ck, options, EMBED_OPTIONS);
    const T = tensorArg(ck, core, 'table', table);
    const list = readIds(ck, ids);
    const n = list === null ? 0 : list.length;
    // out: [n, dim], or a tensor whose first n rows are written
    let O = named(outArg(ck, o), 'out');
    if (O !== null && n > 0 && O.len / O.dims[O.dims.length - 1] > n) O = firstRows(ck, O, n);
    if (list !== null) core.idsBlock(fn, n);   // (grows before any view is taken below)
    return run(fn, ck, O, () => [n, T.dims[T.dims.length - 1]], (v, outAt) => {
      const at = core.idsBlock(fn, n);
      v.i32.set(list, at >>> 2);
      return M._sdpa_wasm_embed(core.ctx, put(v, 'k', T), at, n, outAt);
    });
  }

  /**
   * out = source converted to out's dtype (float16: nearest even; q8_0 / q4_0:
   * ggml's reference quantization). source float32 [rows, cols], out a heap
   * tensor of the same dims in a weight dtype. Returns out.
   */
  function quantize(source, out) {
    const fn = 'sdpa.quantize';
    const ck = new Checks(fn);
    const S = tensorArg(ck, core, 'source', source);
    const O = out === undefined || out === null ? (ck.add('E_ARG', 'out is missing; expected a heap tensor of float32, float16, q8_0 or q4_0 (the dtypes it quantizes to)'), null) : tensorArg(ck, core, 'out', out);
    core.checkAlive(ck);
    ck.done();
    const v = core.views();
    core.checkEntry(M._sdpa_wasm_quantize(core.ctx, put(v, 'q', S), put(v, 'out', O)), fn);
    return O.t;
  }

  return { linear, rmsNorm, swiglu, embed, quantize, prepareLinear, prepareRmsNorm, prepareSwiglu };
}

/**
 * A dense call with its arguments fixed (sdpa.prepareLinear ...). run()
 * checks that the instance, each tensor it was given (a view's holding heap
 * tensor) and the call itself are alive, then runs the wasm entry on the
 * stored structs; C checks every rule on every run and writes nothing on an
 * error. Errors of run() are the plain call's: its name, code and words.
 */
export class PreparedCall {
  #core; #name; #kind; #at; #flags; #eps;
  /** Heap states of the tensors it reads and writes (a view: its holder's), and their E_DISPOSED words. */
  #held; #gone;

  /** Made by sdpa.prepareLinear / prepareRmsNorm / prepareSwiglu; `args` the checked descriptors. */
  constructor(core, name, kind, at, args, flags, eps) {
    this.#core = core;
    this.#name = name;
    this.#kind = kind;
    this.#at = at;
    this.#flags = flags;
    this.#eps = eps;
    this.#held = args.map((a) => a.held);
    this.#gone = args.map((a) => `${name}: ${a.name} is ${a.view ? 'a view of ' : ''}a disposed heap tensor`);
  }

  /** The plain call it runs ('sdpa.linear', 'sdpa.rmsNorm', 'sdpa.swiglu'): its errors' prefix. */
  get name() { return this.#name; }
  /** True after dispose(), its own or the instance's. */
  get disposed() { return this.#at === 0; }

  /** Computes the call on the tensors' current values; throws the plain call's SdpaError. */
  run() {
    const core = this.#core;
    if (core.disposed) throw new SdpaError('E_DISPOSED', `${this.#name}: this sdpa instance was disposed`);
    const at = this.#at;
    if (at === 0) throw new SdpaError('E_DISPOSED', `${this.#name}: this prepared call was disposed`);
    const held = this.#held;
    for (let i = 0; i < held.length; i++) if (held[i].disposed) throw new SdpaError('E_DISPOSED', this.#gone[i]);
    const M = core.M, kind = this.#kind;
    const status = kind === LINEAR ? M._sdpa_wasm_linear(core.ctx, at, at + TENSOR_BYTES, at + 2 * TENSOR_BYTES, this.#flags)
      : kind === RMS_NORM ? M._sdpa_wasm_rms_norm(core.ctx, at, at + TENSOR_BYTES, this.#eps, at + 2 * TENSOR_BYTES)
        : M._sdpa_wasm_swiglu(core.ctx, at, at + TENSOR_BYTES, at + 2 * TENSOR_BYTES);
    if (status !== 0) core.checkEntry(status, this.#name);
  }

  /** Frees its block; the tensors stay yours. A second call is a no-op. */
  dispose() {
    if (this.#at === 0) return;
    const core = this.#core;
    core.free(this.#at);
    this.#at = 0;
    core.prepared.delete(this);
  }

  get [Symbol.toStringTag]() { return 'PreparedCall'; }
}

/** The descriptor with its argument name (firstRows' messages). */
function named(a, name) {
  if (a !== null) a.name = name;
  return a;
}

/** ids as an Int32Array (E_ARG naming the first entry that is not an int32 integer). */
function readIds(ck, ids) {
  if (ids instanceof Int32Array) return ids;
  if (!Array.isArray(ids) && !(ArrayBuffer.isView(ids) && !(ids instanceof DataView))) {
    ck.add('E_ARG', `ids must be an Int32Array or an array of integers, got ${describeValue(ids)}`);
    return null;
  }
  const out = new Int32Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const v = ids[i];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < -0x80000000 || v > INT32_MAX) {
      ck.add('E_ARG', `ids[${i}] is ${describeValue(v)}; expected an integer row of table`);
      return null;
    }
    out[i] = v;
  }
  return out;
}

