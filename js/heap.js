// heap.js: heap tensors, i.e. tensors whose storage lives in the wasm heap.
//
// A heap tensor's `data` is a live view of wasm memory. Memory growth replaces
// the memory's buffer object, so the view is re-derived whenever the buffer
// object changed since the last access, and is never handed out stale.
// Pointers at or above 2 GiB come back from wasm as negative i32 and are kept
// here as unsigned numbers (`>>> 0`).

import { fail } from './errors.js';
import { fmtDims } from './shape.js';

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

/** A fresh view of a live heap tensor's memory, from its state alone (no property of the tensor is read). */
export function heapView(s) {
  const buffer = s.rt.currentBuffer();
  if (buffer !== s.buffer) {
    s.view = s.dtype === 'bool' ? new Uint8Array(buffer, s.ptr, s.n) : new Float32Array(buffer, s.ptr, s.n);
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

export function isHeapTensor(t) {
  return heapState(t) !== undefined;
}

export const DTYPE_BYTES = Object.freeze({ float32: 4, bool: 1 });

export class HeapTensor {
  /**
   * Made by sdpa.allocTensor; not meant to be constructed directly.
   * @param {object} rt the runtime that owns the memory (currentBuffer(), releaseTensor())
   * @param {number} ptr unsigned byte address in wasm memory
   * @param {number[]} dims positive integers (checked by allocTensor)
   * @param {'float32'|'bool'} dtype
   * @param {number} n element count, product(dims)
   */
  constructor(rt, ptr, dims, dtype, n) {
    const start = ptr >>> 0;
    STATE.set(this, {
      rt, ptr: start, n, dtype, dims: Object.freeze(dims.slice()), disposed: false, view: null, buffer: null,
      region: Object.freeze({ space: rt, start, end: start + n * DTYPE_BYTES[dtype] }),
    });
  }

  /** A typed array over the tensor's wasm memory (Float32Array, or Uint8Array for 'bool'). */
  get data() {
    const s = stateOf(this, 'data');
    if (s.disposed) {
      throw fail('E_DISPOSED', `HeapTensor.data: this heap tensor (${s.dtype} ${fmtDims(s.dims)}) was disposed`);
    }
    return heapView(s);
  }

  get dims() { return stateOf(this, 'dims').dims; }
  get dtype() { return stateOf(this, 'dtype').dtype; }
  /** Element count. */
  get length() { return stateOf(this, 'length').n; }
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
