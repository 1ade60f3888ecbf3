// intrinsics.js: the built-ins the wrapper uses on caller values, captured
// when the module loads (CONTRACT.md section 2, "the snapshot rule").
//
// A caller's typed array may be a subclass, or carry own properties, that lie
// about `length`, `buffer`, `byteOffset`, `byteLength` or Symbol.toStringTag;
// a later script may replace ArrayBuffer.isView or %TypedArray%.prototype.set.
// The getters below read the internal slots instead, so none of that reaches
// a size or an address, and none of it runs caller code.

const callOf = Function.prototype.call;
/** `uncurry(fn)(self, ...args)` is `fn.call(self, ...args)` with the call fixed now. */
const uncurry = (fn) => callOf.bind(fn);
const getterOf = (proto, key) => uncurry(Object.getOwnPropertyDescriptor(proto, key).get);

const TypedArrayPrototype = Object.getPrototypeOf(Uint8Array.prototype);

/** 'Float32Array', 'Uint8Array', ... for a real typed array (subclasses included); undefined for anything else (DataView, Proxy, plain object). */
export const typedArrayTag = getterOf(TypedArrayPrototype, Symbol.toStringTag);
export const typedArrayLength = getterOf(TypedArrayPrototype, 'length');
export const typedArrayBuffer = getterOf(TypedArrayPrototype, 'buffer');
export const typedArrayByteOffset = getterOf(TypedArrayPrototype, 'byteOffset');
export const typedArrayByteLength = getterOf(TypedArrayPrototype, 'byteLength');
/** `typedArraySet(target, source, offset?)`: %TypedArray%.prototype.set. */
export const typedArraySet = uncurry(TypedArrayPrototype.set);

export const isView = ArrayBuffer.isView;
export const isArray = Array.isArray;
export const hasOwn = uncurry(Object.prototype.hasOwnProperty);
export const getPrototypeOf = Object.getPrototypeOf;
export const objectToString = uncurry(Object.prototype.toString);
export const ObjectPrototype = Object.prototype;
const arrayBufferByteLength = getterOf(ArrayBuffer.prototype, 'byteLength');
const detachedGetter = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, 'detached');
const isDetachedSlot = detachedGetter && detachedGetter.get ? uncurry(detachedGetter.get) : null;
const Uint8ArrayCtor = Uint8Array;
/**
 * Whether an ArrayBuffer was detached (transferred, or replaced by wasm
 * memory growth). A SharedArrayBuffer never is. For slow paths only (a
 * shared buffer costs a caught exception).
 */
export function isDetached(buffer) {
  let bytes;
  try { bytes = arrayBufferByteLength(buffer); } catch { return false; } // shared
  if (bytes !== 0) return false;
  if (isDetachedSlot) return isDetachedSlot(buffer);
  try { new Uint8ArrayCtor(buffer); return false; } catch { return true; }
}
