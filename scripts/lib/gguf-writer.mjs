// gguf-writer.mjs: writes GGUF files (version 3, little-endian) as llama.cpp's
// gguf.cpp lays them out; js/llama/gguf.js documents the format. A tool for
// the converter scripts and the tests (it makes files, malformed ones too);
// not part of the package.
//
//   writeGguf({ metadata, tensors, alignment, version })
//     metadata: an array of [key, type, value] (type a VALUE name: 'UINT32',
//       'STRING', 'FLOAT32', ..., or ['ARRAY', elementType]) or a Map / object
//       of key -> value whose types are guessed (integer -> UINT32 / INT32,
//       other number -> FLOAT32, string, boolean, typed arrays by kind,
//       string arrays).
//     tensors: [{ name, ne: [cols, rows, ...], type: 'F32' | 'Q8_0' | ..., data: Uint8Array }]
//       (data: the tensor's bytes in ggml's layout, written as given).
//   returns a Uint8Array.

import { VALUE, GGML_TYPES, GGML_TYPE_ID } from '../../js/llama/gguf.js';

const enc = new TextEncoder();

/** [type, value] of a JS value whose GGUF type is not given. */
function guess(v) {
  if (typeof v === 'string') return ['STRING', v];
  if (typeof v === 'boolean') return ['BOOL', v];
  if (typeof v === 'bigint') return ['UINT64', v];
  if (typeof v === 'number') return [Number.isInteger(v) ? (v < 0 ? 'INT32' : 'UINT32') : 'FLOAT32', v];
  const kinds = [[Float32Array, 'FLOAT32'], [Int32Array, 'INT32'], [Uint32Array, 'UINT32'], [Uint8Array, 'UINT8'],
    [Int8Array, 'INT8'], [Uint16Array, 'UINT16'], [Int16Array, 'INT16'], [Float64Array, 'FLOAT64']];
  for (const [T, name] of kinds) if (v instanceof T) return [['ARRAY', name], v];
  if (Array.isArray(v)) {
    const first = v.length > 0 ? guess(v[0])[0] : 'STRING';
    return [['ARRAY', first], v];
  }
  throw new Error(`gguf-writer: cannot guess the GGUF type of ${typeof v}`);
}

class Out {
  constructor() { this.buf = new Uint8Array(1 << 16); this.n = 0; }
  grow(k) {
    if (this.n + k <= this.buf.length) return;
    let cap = this.buf.length;
    while (cap < this.n + k) cap *= 2;
    const b = new Uint8Array(cap);
    b.set(this.buf.subarray(0, this.n));
    this.buf = b;
  }
  dv() { return new DataView(this.buf.buffer); }
  u8(v) { this.grow(1); this.buf[this.n++] = v; }
  u32(v) { this.grow(4); this.dv().setUint32(this.n, v, true); this.n += 4; }
  u64(v) { this.grow(8); this.dv().setBigUint64(this.n, BigInt(v), true); this.n += 8; }
  bytes(b) { this.grow(b.length); this.buf.set(b, this.n); this.n += b.length; }
  string(s) { const b = enc.encode(s); this.u64(b.length); this.bytes(b); }
  pad(alignment) { while (this.n % alignment !== 0) this.u8(0); }
  scalar(type, v) {
    this.grow(8);
    const dv = this.dv(), o = this.n;
    switch (type) {
      case 'UINT8': dv.setUint8(o, v); this.n += 1; break;
      case 'INT8': dv.setInt8(o, v); this.n += 1; break;
      case 'UINT16': dv.setUint16(o, v, true); this.n += 2; break;
      case 'INT16': dv.setInt16(o, v, true); this.n += 2; break;
      case 'UINT32': dv.setUint32(o, v, true); this.n += 4; break;
      case 'INT32': dv.setInt32(o, v, true); this.n += 4; break;
      case 'FLOAT32': dv.setFloat32(o, v, true); this.n += 4; break;
      case 'BOOL': dv.setUint8(o, v ? 1 : 0); this.n += 1; break;
      case 'UINT64': dv.setBigUint64(o, BigInt(v), true); this.n += 8; break;
      case 'INT64': dv.setBigInt64(o, BigInt(v), true); this.n += 8; break;
      case 'FLOAT64': dv.setFloat64(o, v, true); this.n += 8; break;
      case 'STRING': this.string(v); break;
      default: throw new Error(`gguf-writer: unknown scalar type ${type}`);
    }
  }
  value(type, v) {
    if (Array.isArray(type)) {
      this.u32(VALUE[type[0]]);
      this.array(type[1], v);
    } else {
      if (!(type in VALUE)) throw new Error(`gguf-writer: unknown value type ${type}`);
      this.u32(VALUE[type]);
      this.scalar(type, v);
    }
  }
  array(elementType, v) {
    this.u32(VALUE[elementType]);
    this.u64(v.length);
    for (const x of v) this.scalar(elementType, x);
  }
}

/** Bytes of a tensor of `type` with ne = [cols, rows, ...]. */
export function ggmlBytes(type, ne) {
  const [, block, blockBytes] = GGML_TYPES.get(GGML_TYPE_ID.get(type));
  return ne.reduce((a, b) => a * b, 1) / block * blockBytes;
}

export function writeGguf({ metadata = [], tensors = [], alignment = 32, version = 3 } = {}) {
  const entries = Array.isArray(metadata) ? [...metadata]          // (a copy: the caller's list is not changed)
    : [...(metadata instanceof Map ? metadata : Object.entries(metadata))].map(([k, v]) => [k, ...guess(v)]);
  if (alignment !== 32 && !entries.some(([k]) => k === 'general.alignment')) entries.push(['general.alignment', 'UINT32', alignment]);
  const out = new Out();
  out.bytes(enc.encode('GGUF'));
  out.u32(version);
  out.u64(tensors.length);
  out.u64(entries.length);
  for (const [key, type, v] of entries) { out.string(key); out.value(type, v); }
  let offset = 0;
  const offsets = [];
  for (const t of tensors) {
    out.string(t.name);
    out.u32(t.ne.length);
    for (const n of t.ne) out.u64(n);
    const id = GGML_TYPE_ID.get(t.type);
    if (id === undefined) throw new Error(`gguf-writer: unknown ggml type ${t.type}`);
    out.u32(id);
    offsets.push(offset);
    out.u64(t.offset ?? offset);
    offset += Math.ceil(t.data.length / alignment) * alignment;
  }
  out.pad(alignment);
  const dataStart = out.n;
  for (let i = 0; i < tensors.length; i++) {
    while (out.n < dataStart + offsets[i]) out.u8(0);
    out.bytes(tensors[i].data);
  }
  out.pad(alignment);
  return out.buf.slice(0, out.n);
}
