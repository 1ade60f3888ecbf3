// gguf.js: the header of a GGUF file (llama.cpp's model format, versions 2
// and 3), parsed and checked before any weight is read.
//
// Layout (little-endian; ggml's gguf.cpp):
//   "GGUF", uint32 version, uint64 tensor_count, uint64 kv_count
//   kv_count x { string key, uint32 value_type, value }
//   tensor_count x { string name, uint32 n_dims, uint64 ne[n_dims], uint32 ggml_type, uint64 offset }
//   padding to general.alignment (default 32), then the tensor data; each
//   tensor's offset is relative to the data's start and a multiple of the alignment.
// A string is uint64 length + UTF-8 bytes (no NUL). A value is one of the
// types below; an array is uint32 element type, uint64 count, the elements.
// A tensor's ne[0] is its row length (values), ne[1] its rows: a weight
// matrix [out, in] has ne = [in, out], row-major as sdpa_dense.h's weights.
//
// parseGguf(bytes) returns { version, alignment, metadata (Map: key -> value),
// tensors, dataOffset, headerBytes }: numbers for every scalar (a 64-bit
// integer beyond 2^53 as a BigInt), booleans, strings, and arrays as typed
// arrays (numeric elements) or plain arrays (strings, booleans, arrays).
// Bytes that end inside the header throw GgufTruncated (the loader reads on
// and tries again); any other flaw is E_FORMAT naming what and where.

import { SdpaError } from '../errors.js';

export const GGUF_MAGIC = 0x46554747;                    // "GGUF" read as a little-endian uint32
const DEFAULT_ALIGNMENT = 32;
const MAX_TENSORS = 1 << 16;
const MAX_KEYS = 1 << 20;
const MAX_DIMS = 4;
const MAX_ARRAY_DEPTH = 2;
// A metadata array or string of more than these is refused (E_FORMAT), never built: a vocabulary has
// well under 2^24 tokens (the tokenizer's own cap), a chat template a few KB. Without them a header of a
// few hundred MB could ask for an array past the JS engine's limit, which ends the process.
export const MAX_ARRAY_ELEMENTS = 1 << 24;
export const MAX_STRING_BYTES = 1 << 26;
// The fewest bytes an element of each non-numeric type takes: a bool 1, a string its 8-byte length, an
// array its type and count.
const MIN_ELEMENT_BYTES = { [7]: 1, [8]: 8, [9]: 12, [10]: 8, [11]: 8 };
// The header (metadata and tensor list) of any file, read from a stream or held whole.
export const MAX_HEADER_BYTES = 256 << 20;

/** ggml's tensor types: id -> [name, values per block, bytes per block] (ggml.c's type_traits). */
export const GGML_TYPES = new Map([
  [0, ['F32', 1, 4]], [1, ['F16', 1, 2]], [2, ['Q4_0', 32, 18]], [3, ['Q4_1', 32, 20]],
  [6, ['Q5_0', 32, 22]], [7, ['Q5_1', 32, 24]], [8, ['Q8_0', 32, 34]], [9, ['Q8_1', 32, 36]],
  [10, ['Q2_K', 256, 84]], [11, ['Q3_K', 256, 110]], [12, ['Q4_K', 256, 144]], [13, ['Q5_K', 256, 176]],
  [14, ['Q6_K', 256, 210]], [15, ['Q8_K', 256, 292]], [16, ['IQ2_XXS', 256, 66]], [17, ['IQ2_XS', 256, 74]],
  [18, ['IQ3_XXS', 256, 98]], [19, ['IQ1_S', 256, 50]], [20, ['IQ4_NL', 32, 18]], [21, ['IQ3_S', 256, 110]],
  [22, ['IQ2_S', 256, 82]], [23, ['IQ4_XS', 256, 136]], [24, ['I8', 1, 1]], [25, ['I16', 1, 2]],
  [26, ['I32', 1, 4]], [27, ['I64', 1, 8]], [28, ['F64', 1, 8]], [29, ['IQ1_M', 256, 56]],
  [30, ['BF16', 1, 2]], [34, ['TQ1_0', 256, 54]], [35, ['TQ2_0', 256, 66]],
]);
export const GGML_TYPE_ID = new Map([...GGML_TYPES].map(([id, [name]]) => [name, id]));

/** GGUF's metadata value types. */
export const VALUE = Object.freeze({
  UINT8: 0, INT8: 1, UINT16: 2, INT16: 3, UINT32: 4, INT32: 5, FLOAT32: 6, BOOL: 7,
  STRING: 8, ARRAY: 9, UINT64: 10, INT64: 11, FLOAT64: 12,
});
const VALUE_NAMES = Object.keys(VALUE);
const SCALAR = [
  // [bytes, read(dv, offset), typed array]
  [1, (dv, o) => dv.getUint8(o), Uint8Array], [1, (dv, o) => dv.getInt8(o), Int8Array],
  [2, (dv, o) => dv.getUint16(o, true), Uint16Array], [2, (dv, o) => dv.getInt16(o, true), Int16Array],
  [4, (dv, o) => dv.getUint32(o, true), Uint32Array], [4, (dv, o) => dv.getInt32(o, true), Int32Array],
  [4, (dv, o) => dv.getFloat32(o, true), Float32Array], [1, null, null],
  [0, null, null], [0, null, null],
  [8, (dv, o) => exact(dv.getBigUint64(o, true)), null], [8, (dv, o) => exact(dv.getBigInt64(o, true)), null],
  [8, (dv, o) => dv.getFloat64(o, true), Float64Array],
];
const exact = (b) => (b >= -(2n ** 53n) && b <= 2n ** 53n ? Number(b) : b);

/** Thrown when the bytes end inside the header: `needed` is a lower bound on the bytes that would let parsing go on. */
export class GgufTruncated extends Error {
  constructor(needed) { super(`the GGUF header needs more than the bytes given (at least ${needed})`); this.needed = needed; }
}

const utf8 = new TextDecoder('utf-8');

/**
 * The header of a GGUF file from its first bytes (the whole file, or a
 * prefix that holds the header). `fn` prefixes error messages; `fileBytes`
 * (the file's length when known) bounds every tensor's extent.
 */
export function parseGguf(bytes, fn = 'parseGguf', fileBytes = null) {
  const bad = (message) => new SdpaError('E_FORMAT', `${fn}: GGUF: ${message}`);
  const named = (what) => (typeof what === 'function' ? what() : what);   // (an array's element names: built only for a message)
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.byteLength;
  let off = 0;
  const need = (n, what) => {
    if (off + n > MAX_HEADER_BYTES) {
      throw bad(`the header runs past ${MAX_HEADER_BYTES / 2 ** 20} MiB (${named(what)} at byte ${off} needs ${n} bytes); expected a header (metadata and tensor list) under ${MAX_HEADER_BYTES / 2 ** 20} MiB`);
    }
    if (off + n > end) {
      if (fileBytes !== null && off + n > fileBytes) throw bad(`${named(what)} at byte ${off} needs ${n} bytes, but the file ends at byte ${fileBytes}`);
      throw new GgufTruncated(off + n);
    }
  };
  const u32 = (what) => { need(4, what); const v = dv.getUint32(off, true); off += 4; return v; };
  const u64 = (what) => { need(8, what); const v = dv.getBigUint64(off, true); off += 8; return v; };
  const count = (what, max) => {
    const v = u64(what);
    if (v > BigInt(max)) throw bad(`${named(what)} is ${v}; expected at most ${max}`);
    return Number(v);
  };
  const string = (what) => {
    const n = u64(() => `the length of ${named(what)}`);
    if (n > BigInt(MAX_STRING_BYTES)) throw bad(`${named(what)} has length ${n} at byte ${off - 8}; expected at most ${MAX_STRING_BYTES} bytes`);
    if (n > BigInt(fileBytes ?? Number.MAX_SAFE_INTEGER)) throw bad(`${named(what)} has length ${n} at byte ${off - 8}; expected at most the file's ${fileBytes} bytes`);
    need(Number(n), what);
    const s = utf8.decode(bytes.subarray(off, off + Number(n)));
    off += Number(n);
    return s;
  };
  const value = (type, what, depth) => {
    if (type === VALUE.STRING) return string(what);
    if (type === VALUE.BOOL) {
      need(1, what);
      const b = bytes[off++];
      if (b > 1) throw bad(`${named(what)} is a bool of byte ${b} at byte ${off - 1}; expected 0 or 1`);
      return b === 1;
    }
    if (type === VALUE.ARRAY) {
      if (depth >= MAX_ARRAY_DEPTH) throw bad(`${named(what)} nests arrays ${depth + 1} deep; expected at most ${MAX_ARRAY_DEPTH}`);
      const et = u32(() => `the element type of ${named(what)}`);
      if (!(et in SCALAR) ) throw bad(`${named(what)} has element type ${et}; expected one of 0 .. ${SCALAR.length - 1} (${VALUE_NAMES.join(', ')})`);
      const n = count(() => `the length of ${named(what)}`, MAX_ARRAY_ELEMENTS);
      const [size, , Typed] = SCALAR[et];
      if (Typed !== null) {
        need(n * size, what);
        const out = new Typed(n);
        new Uint8Array(out.buffer).set(bytes.subarray(off, off + n * size));   // (little-endian host; copied: aligned)
        off += n * size;
        return out;
      }
      // every element takes at least MIN_ELEMENT_BYTES: a count beyond the bytes left is a lie, not a reason to wait
      if (fileBytes !== null && off + n * MIN_ELEMENT_BYTES[et] > fileBytes) {
        throw bad(`${named(what)} claims ${n} elements of ${VALUE_NAMES[et]} (at least ${MIN_ELEMENT_BYTES[et]} bytes each) at byte ${off}, but the file ends at byte ${fileBytes}`);
      }
      const out = [];
      for (let i = 0; i < n; i++) out.push(value(et, () => `${named(what)}[${i}]`, depth + 1));
      return out;
    }
    if (!(type in SCALAR) || SCALAR[type][1] === null) throw bad(`${named(what)} has value type ${type}; expected one of 0 .. ${SCALAR.length - 1} (${VALUE_NAMES.join(', ')})`);
    const [size, read] = SCALAR[type];
    need(size, what);
    const v = read(dv, off);
    off += size;
    return v;
  };

  need(4, 'the magic');
  const magic = dv.getUint32(0, true);
  if (magic !== GGUF_MAGIC) {
    throw bad(`the file starts with bytes ${[...bytes.subarray(0, 4)].map((b) => b.toString(16).padStart(2, '0')).join(' ')}; expected "GGUF" (47 47 55 46)`);
  }
  off = 4;
  const version = u32('the version');
  if (version !== 2 && version !== 3) {
    const hint = version === 1 ? ' (version 1 files, from 2023, are not read: convert them again)'
      : (version & 0xFFFF) === 0 ? ' (a big-endian file?)' : '';
    throw bad(`version ${version}; expected 2 or 3${hint}`);
  }
  const nTensors = count('tensor_count', MAX_TENSORS);
  const nKeys = count('kv_count', MAX_KEYS);
  const metadata = new Map();
  for (let i = 0; i < nKeys; i++) {
    const key = string(`key ${i}`);
    if (key.length === 0) throw bad(`key ${i} is empty`);
    if (metadata.has(key)) throw bad(`key "${key}" appears twice`);
    const type = u32(`the value type of "${key}"`);
    metadata.set(key, value(type, `"${key}"`, 0));
  }
  let alignment = DEFAULT_ALIGNMENT;
  if (metadata.has('general.alignment')) {
    alignment = metadata.get('general.alignment');
    if (!Number.isInteger(alignment) || alignment < 1 || alignment > 1 << 20 || (alignment & (alignment - 1)) !== 0) {
      throw bad(`general.alignment is ${String(alignment)}; expected a power of two in 1 .. ${1 << 20}`);
    }
  }
  const tensors = [];
  const names = new Set();
  for (let i = 0; i < nTensors; i++) {
    const name = string(`the name of tensor ${i}`);
    if (names.has(name)) throw bad(`tensor "${name}" appears twice`);
    names.add(name);
    const nDims = u32(`the n_dims of tensor "${name}"`);
    if (nDims < 1 || nDims > MAX_DIMS) throw bad(`tensor "${name}" has ${nDims} dimensions; expected 1 .. ${MAX_DIMS}`);
    const ne = [];
    let values = 1;
    for (let d = 0; d < nDims; d++) {
      const n = u64(`ne[${d}] of tensor "${name}"`);
      if (n < 1n || n > 2n ** 32n) throw bad(`tensor "${name}" has ne[${d}] = ${n}; expected 1 .. 2^32`);
      ne.push(Number(n));
      values *= Number(n);
    }
    if (values > 2 ** 40) throw bad(`tensor "${name}" has ${values} values (ne ${ne.join(' x ')}); expected at most 2^40`);
    const typeId = u32(`the type of tensor "${name}"`);
    const traits = GGML_TYPES.get(typeId);
    if (traits === undefined) throw bad(`tensor "${name}" has ggml type ${typeId}, which no ggml release defines`);
    const [typeName, block, blockBytes] = traits;
    if (ne[0] % block !== 0) throw bad(`tensor "${name}" (${typeName}) has rows of ne[0] = ${ne[0]} values; expected a multiple of ${typeName}'s block of ${block}`);
    const offset = u64(`the offset of tensor "${name}"`);
    if (offset % BigInt(alignment) !== 0n) throw bad(`tensor "${name}" starts at data offset ${offset}; expected a multiple of general.alignment ${alignment}`);
    if (offset > 2n ** 52n) throw bad(`tensor "${name}" starts at data offset ${offset}; expected at most 2^52`);
    tensors.push({ name, ne, type: typeName, typeId, offset: Number(offset), bytes: (values / block) * blockBytes, values });
  }
  const headerBytes = off;
  const dataOffset = Math.ceil(off / alignment) * alignment;
  // extents: within the file (when its length is known) and disjoint
  const sorted = [...tensors].sort((a, b) => a.offset - b.offset);
  for (let i = 0; i < sorted.length; i++) {
    const t = sorted[i], endAt = t.offset + t.bytes;
    if (i + 1 < sorted.length && endAt > sorted[i + 1].offset) {
      throw bad(`tensor "${t.name}" (data bytes ${t.offset} .. ${endAt}) overlaps tensor "${sorted[i + 1].name}" (from ${sorted[i + 1].offset})`);
    }
    if (fileBytes !== null && dataOffset + endAt > fileBytes) {
      throw bad(`tensor "${t.name}" (${t.type}, ne ${t.ne.join(' x ')}: ${t.bytes} bytes at file byte ${dataOffset + t.offset}) runs past the end of the file (${fileBytes} bytes): truncated?`);
    }
  }
  return { version, alignment, metadata, tensors, dataOffset, headerBytes };
}
