// heap.js: heap tensors, i.e. tensors whose storage lives in the wasm heap.
//
// A heap tensor's `data` is a live view of wasm memory. Memory growth replaces
// the memory's buffer object, so the view is re-derived whenever the buffer
// object changed since the last access, and is never handed out stale.
// Pointers at or above 2 GiB come back from wasm as negative i32 and are kept
// here as unsigned numbers (`>>> 0`).
//
// A view the caller SAVED (`const d = t.data`) is not re-derived: after growth
// it is a view of the old buffer, which in the single-thread build is detached
// (writes through it are silently lost; the threads build's shared buffer keeps
// them). So each tensor remembers the buffer of the last view it handed out
// (`handedOut`), and a call that takes it as an input after the memory grew
// since then warns once per instance (staleInputWarning). `t.set()` writes
// through the current view and is always safe.

import { fail } from './errors.js';
import { fmtDims } from './shape.js';
import { typedArrayTag, typedArrayLength, typedArraySet, isArray } from './intrinsics.js';
import { describeValue } from './snapshot.js';  // (a cycle: used at call time only)
import { TENSOR_DTYPES, WEIGHT_DTYPES } from './abi.js';

/** Internal state of every live or disposed heap tensor, keyed by the tensor. */
const STATE = new WeakMap();

/**
 * Every buffer object that has ever backed an instance's memory -> that
 * instance's runtime. Growth replaces the buffer (a shared one stays valid
 * with its old length, a plain one is detached), so a view made before growth
 * is still recognised as wasm memory, with the same aliasing rules. Filled by
 * the runtime each time it reads its memory's buffer: every buffer a caller
 * can get from this package passes through there first.
 */
const MEMORY_OWNER = new WeakMap();

export function noteMemoryBuffer(buffer, rt) {
  MEMORY_OWNER.set(buffer, rt);
}

/** The runtime whose wasm memory `buffer` is (or was), or undefined. */
export function memoryOwner(buffer) {
  return MEMORY_OWNER.get(buffer);
}

/** State of `t`, or E_ARG when a HeapTensor getter is called on something else (a Proxy, a copy). */
function stateOf(t, what) {
  const s = STATE.get(t);
  if (s === undefined) throw fail('E_ARG', `HeapTensor.${what}: called on an object that is not a heap tensor`);
  return s;
}

/** State of a live `t`; E_DISPOSED once disposed. */
function liveState(t, what) {
  const s = stateOf(t, what);
  if (s.disposed) throw fail('E_DISPOSED', `HeapTensor.${what}: this heap tensor (${s.dtype} ${fmtDims(s.dims)}) was disposed`);
  return s;
}

/** The current view, for the caller: remembered as the last one handed out (staleInputWarning). */
function handOut(s) {
  const view = heapView(s);
  s.handedOut = s.buffer;
  return view;
}

/** A fresh view of a live heap tensor's memory, from its state alone (no property of the tensor is read). */
export function heapView(s) {
  const buffer = s.rt.currentBuffer();
  if (buffer !== s.buffer) {
    const View = VIEW_TYPE[s.dtype];
    s.view = new View(buffer, s.ptr, s.bytes / View.BYTES_PER_ELEMENT);
    s.buffer = buffer;
  }
  return s.view;
}

/**
 * @returns the internal state or undefined: { rt, ptr, n (element count),
 *   dtype, dims (frozen), region (its bytes, for aliasing checks), disposed }
 */
export function heapState(t) {
  return t !== null && typeof t === 'object' ? STATE.get(t) : undefined;
}

/**
 * The warning for a heap tensor passed as an input after the memory grew
 * since its `data` was last read (a saved view may have missed writes), or
 * null. `buffer`: the memory's buffer now.
 */
export function staleInputWarning(s, name, buffer) {
  if (s.handedOut === null || s.handedOut === buffer) return null;
  return `sdpa-wasm: ${name} is a heap tensor whose data was last read before wasm memory grew; ` +
    `writes through a saved view (const d = ${name}.data) since then are lost in the single-thread build ` +
    `(non-isolated pages). Read ${name}.data again after any call that may grow memory, write with ${name}.set(), ` +
    `or sdpa.reserve() the pages before the loop (this warning is shown once per instance)`;
}

export function isHeapTensor(t) {
  return heapState(t) !== undefined;
}

/** Bytes per element of a tensor dtype (js/abi.js, from C). */
export const DTYPE_BYTES = Object.freeze({ float32: TENSOR_DTYPES.float32.bytes, bool: TENSOR_DTYPES.bool.bytes });

/**
 * The typed array `data` is, per dtype: float32 and bool as before; the weight
 * dtypes (include/sdpa_dense.h) float16 as its bits (Uint16Array), q8_0,
 * q4_0, q5_0, q4_k and q6_k as their blocks' bytes (Uint8Array, ggml's layout).
 */
const VIEW_TYPE = Object.freeze({
  float32: Float32Array, bool: Uint8Array, float16: Uint16Array,
  q8_0: Uint8Array, q4_0: Uint8Array, q5_0: Uint8Array, q4_k: Uint8Array, q6_k: Uint8Array,
});

/** The dtypes allocTensor makes. */
export const HEAP_DTYPES = Object.freeze(['float32', 'bool', 'float16', 'q8_0', 'q4_0', 'q4_k', 'q6_k', 'q5_0']);

/** Bytes of a heap tensor of `dtype` and `dims` (a weight dtype: whole blocks of its last dim; checked by readAllocArgs). */
export function tensorBytes(dtype, dims) {
  const n = dims.reduce((a, b) => a * b, 1);
  if (dtype === 'bool' || dtype === 'float32') return n * DTYPE_BYTES[dtype];
  const w = WEIGHT_DTYPES[dtype];
  return (n / w.block) * w.blockBytes;
}

export class HeapTensor {
  /**
   * Made by sdpa.allocTensor; not meant to be constructed directly.
   * @param {object} rt the runtime that owns the memory (currentBuffer(), releaseTensor())
   * @param {number} ptr unsigned byte address in wasm memory
   * @param {number[]} dims positive integers (checked by allocTensor)
   * @param {'float32'|'bool'|'float16'|'q8_0'|'q4_0'|'q4_k'|'q6_k'|'q5_0'} dtype
   * @param {number} n element count, product(dims)
   * @param {number} bytes its bytes (tensorBytes)
   */
  constructor(rt, ptr, dims, dtype, n, bytes) {
    const start = ptr >>> 0;
    STATE.set(this, {
      rt, ptr: start, n, bytes, dtype, dims: Object.freeze(dims.slice()), disposed: false, view: null, buffer: null, handedOut: null,
      region: Object.freeze({ space: rt, start, end: start + bytes }),
    });
  }

  /**
   * A typed array over the tensor's wasm memory: Float32Array (float32), Uint8Array
   * (bool; q8_0, q4_0, q5_0, q4_k, q6_k: the blocks' bytes), Uint16Array (float16: the bits).
   */
  get data() {
    return handOut(liveState(this, 'data'));
  }

  /**
   * Copies `source` (a typed array or an Array of numbers) into the tensor at
   * element `offset` (default 0), through the current view: safe across memory
   * growth in every build. E_ARG for another source, E_DIMS when it does not fit.
   */
  set(source, offset = 0) {
    const s = liveState(this, 'set');
    const n = typedArrayTag(source) !== undefined ? typedArrayLength(source) : isArray(source) ? source.length : -1;
    if (n < 0) throw fail('E_ARG', `HeapTensor.set: source must be a typed array or an Array of numbers, got ${describeValue(source)}`);
    if (!Number.isSafeInteger(offset) || offset < 0) throw fail('E_ARG', `HeapTensor.set: offset is ${describeValue(offset)}; expected a non-negative integer`);
    if (offset + n > s.n) throw fail('E_DIMS', `HeapTensor.set: ${n} elements at offset ${offset} do not fit the tensor's ${s.n} (${s.dtype} ${fmtDims(s.dims)})`);
    typedArraySet(handOut(s), source, offset);
  }

  /**
   * Copies bytes (a Uint8Array) into the tensor's memory at byte `byteOffset`
   * (default 0): how a weight's file bytes (a GGUF tensor's blocks, a
   * checkpoint's float32s) go into wasm memory chunk by chunk, with no other
   * copy kept. E_ARG for another source, E_DIMS when it does not fit.
   */
  setBytes(source, byteOffset = 0) {
    const s = liveState(this, 'setBytes');
    if (typedArrayTag(source) !== 'Uint8Array') throw fail('E_ARG', `HeapTensor.setBytes: source must be a Uint8Array, got ${describeValue(source)}`);
    if (!Number.isSafeInteger(byteOffset) || byteOffset < 0) throw fail('E_ARG', `HeapTensor.setBytes: byteOffset is ${describeValue(byteOffset)}; expected a non-negative integer`);
    const n = typedArrayLength(source);
    if (byteOffset + n > s.bytes) throw fail('E_DIMS', `HeapTensor.setBytes: ${n} bytes at byte ${byteOffset} do not fit the tensor's ${s.bytes} (${s.dtype} ${fmtDims(s.dims)})`);
    heapView(s);
    typedArraySet(new Uint8Array(s.buffer, s.ptr, s.bytes), source, byteOffset);
  }

  get dims() { return stateOf(this, 'dims').dims; }
  get dtype() { return stateOf(this, 'dtype').dtype; }
  /** Element count (values: a q8_0 / q4_0 / q5_0 / q4_k / q6_k tensor's data holds fewer bytes). */
  get length() { return stateOf(this, 'length').n; }
  /** Bytes in wasm memory. */
  get byteLength() { return stateOf(this, 'byteLength').bytes; }
  get disposed() { return stateOf(this, 'disposed').disposed; }

  /** Frees the wasm memory. A second call is a no-op. */
  dispose() {
    const s = stateOf(this, 'dispose');
    if (s.disposed) return;
    s.disposed = true;
    s.view = null;
    s.buffer = null;
    s.rt.releaseTensor(this, s.ptr);
  }

  get [Symbol.toStringTag]() { return 'HeapTensor'; }
}
