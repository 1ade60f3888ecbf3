// snapshot.js: reading what a caller passes, once (CONTRACT.md section 2, the
// snapshot rule).
//
// An entry point first reads every value it takes from the caller exactly once
// (readOptions, inspectTensor, readDims, readInt32List, readSaveMeta: the only
// functions of the package that touch caller objects), then checks liveness
// and state (checkLive), then hands the snapshot to the rules (rules.js). From
// the first check until the call returns no caller code runs: getters, Proxy
// traps and patched prototypes are never reached again, typed arrays are read
// through the intrinsics captured at load (intrinsics.js).
//
// What only JS can see is checked here as it is read: a value's JS type, a
// typed array's type, unknown option names, a detached or resized buffer, a
// view of wasm memory outside a heap tensor, a disposed heap tensor. Each
// violation goes to the call's Checks (rules.js), which reports the first in
// the contract table's order.

import { heapState, heapView, memoryOwner } from './heap.js';
import { INT32_MAX } from './shape.js';
import {
  typedArrayTag, typedArrayLength, typedArrayBuffer, typedArrayByteOffset, typedArrayByteLength,
  isView, isArray, hasOwn, getPrototypeOf, objectToString, ObjectPrototype, isDetached,
} from './intrinsics.js';
import { STATE_MAX_META } from './abi.js';

// ---------------------------------------------------------------------------
// Small helpers

/** 'a Float32Array', 'an Int32Array'. */
const article = (word) => `${/^[AEIOU]/.test(word) ? 'an' : 'a'} ${word}`;

/** Entries of a dims array read at most (no tensor here has rank > 4; allocTensor allows up to this). */
export const MAX_RANK = 16;

/** The type of a view from its internal slots: 'Float32Array', ..., 'DataView'; undefined for a non-view. */
const viewTag = (x) => typedArrayTag(x) ?? (isView(x) ? 'DataView' : undefined);

/**
 * Short description of a JS value for messages. Runs no caller code (no
 * property of an object is read), so it is safe after the snapshot.
 */
export function describeValue(x) {
  if (x === null) return 'null';
  if (x === undefined) return 'undefined';
  if (typeof x === 'string') return `the string ${JSON.stringify(x.length > 20 ? x.slice(0, 20) + '…' : x)}`;
  if (typeof x === 'number' || typeof x === 'boolean' || typeof x === 'bigint') return `${typeof x} ${String(x)}${typeof x === 'bigint' ? 'n' : ''}`;
  if (typeof x === 'symbol') return 'a symbol';
  if (isArray(x)) return 'an Array';
  const tag = viewTag(x);
  if (tag) return article(tag);
  if (typeof x === 'function') return 'a function';
  return 'an object';
}

/** describeValue naming the built-in class of an object too ('a Map object'); snapshot phase only (it reads Symbol.toStringTag). */
function describeObject(x) {
  const d = describeValue(x);
  if (d !== 'an object') return d;
  const tag = objectToString(x).slice(8, -1);
  return tag === 'Object' ? d : `${article(tag)} object`;
}

function suggest(name, allowed) {
  const norm = (s) => s.toLowerCase().replace(/[_\-\s]/g, '');
  const hit = allowed.find((a) => norm(a) === norm(name));
  return hit ? ` (did you mean '${hit}'?)` : '';
}

/**
 * Whether `key`, found by `for...in` on an options object, is one of its
 * names: an own name, or an inherited one (as `opts.key` would read it)
 * unless it sits on Object.prototype itself (enumerable junk some script
 * added there is not an option).
 */
function countsAsOption(opts, key) {
  return hasOwn(opts, key) || !(key in ObjectPrototype);
}

/**
 * `opts[name]` as WebIDL reads a dictionary member ([[Get]]: own, inherited,
 * accessor, enumerable or not), except a value that comes from
 * Object.prototype itself (a polluted prototype is not an option).
 */
function getOption(opts, name) {
  const value = opts[name];
  if (value === undefined || !hasOwn(ObjectPrototype, name)) return value;
  for (let o = opts; o !== null; o = getPrototypeOf(o)) {
    if (o === ObjectPrototype) return undefined;
    if (hasOwn(o, name)) return value;
  }
  return value;
}

/** Prototype of readOptions' results: no Object.prototype in the chain, so nothing is read from it. */
const NO_PROTO = Object.freeze(Object.create(null));

/** An empty options result; the attention options are declared up front so every result has one shape. */
function blankOptions() {
  const o = Object.create(NO_PROTO);
  o.startPos = undefined;
  o.attnMask = undefined;
  o.dropoutP = undefined;
  o.isCausal = undefined;
  o.scale = undefined;
  o.out = undefined;
  o.enableGqa = undefined;
  o.window = undefined;
  o.softcap = undefined;
  o.sinks = undefined;
  o.treeMask = undefined;
  o.rotary = undefined;
  o.T = null; // treeMask's descriptor
  o.R = null; // rotary's snapshot (readRotary)
  o.M = null; // attnMask's descriptor (inspectTensor), read with the options
  o.O = null; // out's descriptor
  o.S = null; // sinks' descriptor
  return o;
}

/**
 * Options whose value is a tensor: inspected (snapshotted) as they are read.
 * CONTRACT.md section 2: tensors inside options are read with the options.
 */
const TENSOR_OPTIONS = Object.freeze(Object.assign(Object.create(null), { attnMask: ['M', 'mask'], out: ['O', 'out'], sinks: ['S', 'input'], treeMask: ['T', 'mask'] }));

/**
 * Names that are not options of this call but of another argument: read
 * like options so that an accessor or non-enumerable one is caught too.
 */
const MISPLACED = Object.freeze(Object.assign(Object.create(null), {
  startPos: `startPos is step's 4th argument, not an option (step(q, k, v, startPos, opts))`,
}));

/**
 * Reads an options object the way WebIDL reads a dictionary: undefined/null
 * = {}; each allowed name once, through [[Get]] (inherited and accessor
 * properties count, enumerable or not), in the order of `allowed`; then any
 * other enumerable name (own, or inherited but not from Object.prototype) is
 * E_ARG. `undefined` values count as absent. A Map, Date, ... (whose entries
 * are not properties) is E_ARG. Tensor options (attnMask, out) are inspected
 * here, so their `o.M` / `o.O` descriptors are part of the snapshot.
 * `misplaced`: names to reject with their own message (MISPLACED). `tensors` false: no
 * name is a tensor option (callers outside attention, whose `out` is a plain array).
 */
export function readOptions(ck, opts, allowed, misplaced = null, tensors = true) {
  const out = blankOptions();
  if (opts === undefined || opts === null) return out;
  if (typeof opts !== 'object' || isArray(opts) || isView(opts) || objectToString(opts) !== '[object Object]') {
    ck.add('E_ARG', `options must be a plain object, got ${describeObject(opts)}`);
    return out;
  }
  for (let i = 0; i < allowed.length; i++) {
    const name = allowed[i];
    const value = getOption(opts, name);
    if (value === undefined) continue;
    out[name] = value;
    if (!tensors || value === null) continue;
    const tensor = TENSOR_OPTIONS[name];
    if (tensor !== undefined) out[tensor[0]] = inspectTensor(ck, name, value, tensor[1]);
    else if (name === 'rotary') out.R = readRotary(ck, value);
  }
  if (misplaced !== null) {
    for (let i = 0; i < misplaced.length; i++) {
      if (getOption(opts, misplaced[i]) !== undefined) ck.add('E_ARG', MISPLACED[misplaced[i]]);
    }
  }
  for (const key in opts) {
    if (allowed.includes(key) || (misplaced !== null && misplaced.includes(key)) || !countsAsOption(opts, key)) continue;
    ck.add('E_ARG', `unknown option '${key}'${suggest(key, allowed)}; the options are ${allowed.join(', ')}`);
  }
  return out;
}

/**
 * readOptions for calls whose options hold no tensor to inspect (the dense
 * calls): the same rules (a plain object; each name read once, inherited
 * ones from a prototype other than Object.prototype included; an unknown
 * name is E_ARG), into an object of the `allowed` names alone, made without
 * readOptions' blank (a decode step calls these dozens of times).
 */
export function readPlainOptions(ck, opts, allowed) {
  if (opts !== undefined && opts !== null && getPrototypeOf(opts) === ObjectPrototype) {
    // an object literal (the common case): own names only, no getter of Object.prototype's to skip
    let known = true;
    for (const key in opts) if (!allowed.includes(key)) { known = false; break; }
    if (known) {
      const out = {};
      // (getOption: a name some script put on Object.prototype is not an option)
      for (let i = 0; i < allowed.length; i++) out[allowed[i]] = getOption(opts, allowed[i]);
      return out;
    }
  }
  const out = {};
  for (let i = 0; i < allowed.length; i++) out[allowed[i]] = undefined;
  if (opts === undefined || opts === null) return out;
  if (typeof opts !== 'object' || isArray(opts) || isView(opts) || objectToString(opts) !== '[object Object]') {
    ck.add('E_ARG', `options must be a plain object, got ${describeObject(opts)}`);
    return out;
  }
  for (let i = 0; i < allowed.length; i++) out[allowed[i]] = getOption(opts, allowed[i]);
  for (const key in opts) {
    if (allowed.includes(key) || !countsAsOption(opts, key)) continue;
    ck.add('E_ARG', `unknown option '${key}'${suggest(key, allowed)}; the options are ${allowed.join(', ')}`);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Dims

/** How messages name a dims array: `query.dims`, or `dims` for allocTensor's own argument (name null). */
export const dimsLabel = (name) => (name === null ? 'dims' : `${name}.dims`);

/**
 * Reads a dims argument (snapshot phase): `length` once, then each entry
 * once (a typed array through its internal slots). Returns a copy as
 * number[], or null after adding E_ARG (missing, not an array or a typed
 * array other than DataView, an entry that is not a number) or E_RANK (more
 * than MAX_RANK entries: none is read). `name`: the tensor's, or null (see dimsLabel).
 */
export function readDims(ck, dims, name) {
  if (dims === undefined || dims === null) {
    ck.add('E_ARG', `${dimsLabel(name)} is missing; expected an array of positive integers`);
    return null;
  }
  const typed = typedArrayTag(dims) !== undefined;
  if (!typed && !isArray(dims)) {
    ck.add('E_ARG', `${dimsLabel(name)} must be an array of integers, got ${describeValue(dims)}`);
    return null;
  }
  const n = typed ? typedArrayLength(dims) : dims.length;
  if (!(Number.isSafeInteger(n) && n >= 0 && n <= MAX_RANK)) {
    ck.add('E_RANK', `${dimsLabel(name)} has ${typeof n === 'number' ? n : describeValue(n)} entries; a tensor has at most ${MAX_RANK} dims`);
    return null;
  }
  const arr = new Array(n);
  for (let i = 0; i < n; i++) {
    const x = dims[i];
    if (typeof x !== 'number') {
      ck.add('E_ARG', `${dimsLabel(name)}[${i}] must be a number, got ${describeValue(x)}`);
      return null;
    }
    arr[i] = x;
  }
  return arr;
}

// ---------------------------------------------------------------------------
// Tensors

/**
 * Looks at a tensor argument. Roles:
 *   'input' - query/key/value (float32), 'out' (float32), 'mask' (float32 | bool).
 * Returns a descriptor or null when the argument is missing / not a tensor:
 *   { name, t, heap (internal heap state or null), data (typed array or null),
 *     dims (number[] or null; a heap tensor's own frozen dims), dtype
 *     ('float32'|'bool'|null), len, rank, whole (every dim a non-negative integer) }
 */
export function inspectTensor(ck, name, t, role) {
  if (t === undefined || t === null) {
    ck.add('E_ARG', `${name} is missing; expected a tensor { data, dims }`);
    return null;
  }
  if (typeof t !== 'object' || isArray(t) || isView(t)) {
    ck.add('E_ARG', `${name} must be a tensor object { data, dims, dtype? }, got ${describeValue(t)}`);
    return null;
  }
  const d = {
    name, t, heap: null, data: null, buffer: null, byteOffset: 0, byteLength: 0,
    dims: null, dtype: null, len: -1, rank: -1, whole: false,
  };
  const hs = heapState(t);
  if (hs) {
    // Dims, dtype and length were checked by allocTensor; no property of t is read.
    d.heap = hs;
    d.dims = hs.dims;
    d.rank = hs.dims.length;
    d.dtype = hs.dtype;
    d.len = hs.n;
    d.whole = true;
  } else {
    inspectPlain(ck, d, t, role);
  }
  if (d.dtype === 'bool' && role !== 'mask') {
    ck.add('E_DTYPE', `${name} is bool (Uint8Array); expected float32 (Float32Array)`);
  }
  return d;
}

/**
 * inspectTensor for a plain { data, dims, dtype? } object: reads `data`,
 * `dims` and `dtype` once each, the typed array's geometry through its
 * internal slots, and fills `d`.
 */
function inspectPlain(ck, d, t, role) {
  const name = d.name;
  const data = t.data;
  const rawDims = t.dims;
  const dt = t.dtype;
  const dtypeCode = role === 'mask' ? 'E_MASK_DTYPE' : 'E_DTYPE';
  const wanted = role === 'mask' ? `float32 (Float32Array) or bool (Uint8Array)` : `float32 (Float32Array)`;
  const dims = readDims(ck, rawDims, name);
  if (dims) {
    d.dims = dims;
    d.rank = dims.length;
    d.whole = dims.every((x) => Number.isSafeInteger(x) && x >= 0);
  }
  let inferred = null;
  const tag = data === undefined || data === null ? undefined : typedArrayTag(data);
  if (data === undefined || data === null) {
    ck.add('E_ARG', `${name}.data is missing; expected a ${role === 'mask' ? 'Float32Array or Uint8Array' : 'Float32Array'}`);
  } else if (isArray(data)) {
    ck.add(dtypeCode, `${name}.data is a plain Array; expected ${wanted}`);
  } else if (tag !== undefined) {
    if (tag === 'Float32Array') inferred = 'float32';
    else if (tag === 'Uint8Array') inferred = 'bool';
    else ck.add(dtypeCode, `${name}.data is ${article(tag)}; expected ${wanted}`);
    if (inferred) {
      d.data = data;
      d.buffer = typedArrayBuffer(data);
      d.byteOffset = typedArrayByteOffset(data);
      d.byteLength = typedArrayByteLength(data);
      d.len = typedArrayLength(data);
      if (d.len === 0 && isDetached(d.buffer)) {
        ck.add('E_ARG', `${name}.data is a view of a detached ArrayBuffer (transferred, or replaced by memory growth); pass a live typed array`);
      }
    }
  } else {
    ck.add('E_ARG', `${name}.data must be a typed array, got ${describeValue(data)}`);
  }
  if (dt !== undefined && dt !== null) {
    if (typeof dt !== 'string') ck.add('E_ARG', `${name}.dtype must be a string, got ${describeValue(dt)}`);
    else if (inferred && dt !== inferred) {
      ck.add('E_DTYPE', `${name}.dtype is '${dt}' but its data is ${article(tag)} ('${inferred}')`);
      inferred = null;
    }
  }
  d.dtype = inferred;
}

/** checkLive over the tensors readOptions snapshotted: the mask, the output, the sinks, the tree mask, rotary's tables. */
export function checkLiveOptions(ck, o) {
  checkLive(ck, o.M);
  checkLive(ck, o.O);
  checkLive(ck, o.S);
  checkLive(ck, o.T);
  if (o.R !== null) {
    checkLive(ck, o.R.C);
    checkLive(ck, o.R.S);
  }
}

/** The typed array a descriptor computes on: the snapshot's, or a heap tensor's view made from its state. */
export function dataOf(d) {
  return d.heap ? heapView(d.heap) : d.data;
}

/**
 * The state half of the snapshot rule, run after every read of a call and
 * before validation: a disposed heap tensor is E_DISPOSED; a typed array
 * detached or resized since it was read is E_ARG; a view of an instance's
 * wasm memory (its buffer now or before growth) must lie inside one live heap
 * tensor of that instance and outside every KV cache's storage (E_ARG):
 * anywhere else it would alias the allocator's or the C core's own memory.
 */
export function checkLive(ck, d) {
  if (d === null || d === undefined) return;
  if (d.heap) {
    if (d.heap.disposed) ck.add('E_DISPOSED', `${d.name} is a disposed heap tensor`);
    return;
  }
  if (d.data === null) return;
  if (d.byteLength !== 0 && typedArrayByteLength(d.data) !== d.byteLength) {
    ck.add('E_ARG', isDetached(d.buffer)
      ? `${d.name}.data was detached while the call read its arguments; pass a live typed array`
      : `${d.name}.data changed size while the call read its arguments (a resizable buffer); pass a fixed typed array`);
    return;
  }
  const rt = memoryOwner(d.buffer);
  if (rt === undefined) return;
  if (rt.disposed) {
    ck.add('E_DISPOSED', `${d.name}.data is a view of the memory of a disposed sdpa instance`);
    return;
  }
  const start = d.byteOffset, end = start + d.byteLength;
  if (rt.cacheHolding(start, end)) {
    ck.add('E_ARG', `${d.name} overlaps the storage of a KV cache; pass a separate buffer`);
    return;
  }
  if (d.byteLength === 0 || rt.tensorHolding(start, end) !== null) return;
  ck.add('E_ARG', `${d.name}.data is a view of wasm memory (bytes ${start} .. ${end}) outside every heap tensor of its instance; pass a heap tensor or a view inside one`);
}

// ---------------------------------------------------------------------------
// Rotary embeddings ({ cos, sin, interleaved, positions }) and integer lists

const ROTARY_FIELDS = Object.freeze(['cos', 'sin', 'interleaved', 'positions']);

/**
 * The snapshot of a rotary option: its fields read once, as an options
 * object's (unknown names are E_ARG), cos and sin inspected as tensors,
 * positions (an Array or Int32Array) copied into an Int32Array.
 * Returns { C, S, interleaved, positions } (positions null when absent).
 */
function readRotary(ck, value) {
  const R = { C: null, S: null, interleaved: undefined, positions: null };
  if (typeof value !== 'object' || isArray(value) || isView(value) || objectToString(value) !== '[object Object]') {
    ck.add('E_ARG', `rotary must be an object { cos, sin, interleaved?, positions? }, got ${describeObject(value)}`);
    return R;
  }
  const prefix = ck.prefix;
  ck.prefix = `${prefix}rotary: `;  // (its unknown names: 'rotary: unknown option ...')
  const f = readOptions(ck, value, ROTARY_FIELDS);
  ck.prefix = prefix;
  R.interleaved = f.interleaved;
  R.C = inspectTensor(ck, 'rotary.cos', f.cos, 'input');
  R.S = inspectTensor(ck, 'rotary.sin', f.sin, 'input');
  if (f.positions !== undefined && f.positions !== null) R.positions = readInt32List(ck, f.positions, 'rotary.positions', 'positions, one per new row');
  return R;
}

/**
 * An Array or Int32Array of integers (keepRows' rows, rotary.positions),
 * read once (its length, then each entry) into an Int32Array; null after
 * E_ARG. `what`: what the entries are, for the message.
 */
export function readInt32List(ck, value, name, what) {
  if (!isArray(value) && typedArrayTag(value) !== 'Int32Array') {
    ck.add('E_ARG', `${name} must be an Array or Int32Array of ${what}, got ${describeValue(value)}`);
    return null;
  }
  const n = isArray(value) ? value.length : typedArrayLength(value);
  const list = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    const x = value[i];
    if (typeof x !== 'number' || !Number.isInteger(x) || Math.abs(x) > INT32_MAX) {
      ck.add('E_ARG', `${name}[${i}] must be an integer, got ${describeValue(x)}`);
      return null;
    }
    list[i] = x;
  }
  return list;
}

// ---------------------------------------------------------------------------
// createKVCacheGroup's configs

/** createKVCacheGroup's configs: a non-empty array, read once (the snapshot); null after E_ARG. */
export function readLayerConfigs(ck, configs) {
  if (configs === undefined || configs === null) ck.add('E_ARG', 'the layer configs are missing; expected an array of createKVCache options, one per layer');
  else if (!isArray(configs)) ck.add('E_ARG', `configs must be an array of createKVCache options (one per layer), got ${describeValue(configs)}`);
  else if (configs.length === 0) ck.add('E_ARG', 'configs is empty; expected one createKVCache options object per layer');
  else return configs.slice();  // each entry read once
  return null;
}

// ---------------------------------------------------------------------------
// Saved KV state (js/kv-state.js, docs/FORMAT.md): save's into and meta, the loads' signal

/** The largest meta a save carries, as UTF-8 JSON (SDPA_STATE_MAX_META, js/abi.js). */
export const MAX_META_BYTES = STATE_MAX_META;

/**
 * save's `into`: a Uint8Array of the caller's to write the save into (its size is checked
 * against the save's once that is known), or null when absent. Not a view of an instance's
 * wasm memory (the save is staged there); E_ARG otherwise.
 */
export function checkSaveInto(ck, value) {
  if (value === undefined || value === null) return null;
  if (typedArrayTag(value) !== 'Uint8Array') {
    ck.add('E_ARG', `into must be a Uint8Array, got ${describeValue(value)}`);
    return null;
  }
  if (memoryOwner(typedArrayBuffer(value)) !== undefined) {
    ck.add('E_ARG', 'into is a view of wasm memory; pass a Uint8Array of your own');
    return null;
  }
  return value;
}

/** An AbortSignal option (saveStream, the loads), or null when absent; E_ARG for anything else. */
export function checkSignal(ck, value) {
  if (value === undefined || value === null) return null;
  if (typeof AbortSignal !== 'undefined' && value instanceof AbortSignal) return value;
  ck.add('E_ARG', `signal must be an AbortSignal (an AbortController's .signal), got ${describeValue(value)}`);
  return null;
}
const utf8 = new TextEncoder();

/**
 * A save's meta as UTF-8 JSON bytes (the snapshot of `meta`: JSON.stringify
 * runs its toJSON methods and getters once, here); null when absent.
 */
export function readSaveMeta(ck, meta) {
  if (meta === undefined) return null;
  let json;
  try {
    json = JSON.stringify(meta);
  } catch (e) {
    if (!(e instanceof TypeError)) throw e;  // the caller's own toJSON or getter: propagates unchanged
    ck.add('E_ARG', `meta must be a JSON value (JSON.stringify failed: ${e.message})`);
    return null;
  }
  if (json === undefined) { ck.add('E_ARG', `meta must be a JSON value, got ${describeValue(meta)}`); return null; }
  const bytes = utf8.encode(json);
  // Written in both languages, one wording (kv_state.c check_save is C callers' check): the bytes
  // are JS's own snapshot of meta, refused before the save makes anything.
  if (bytes.length > MAX_META_BYTES) { ck.add('E_ARG', `meta is ${bytes.length} bytes as JSON; at most ${MAX_META_BYTES}`); return null; }
  return bytes;
}
