// gguf.test.js: GGUF files (llama.cpp's format) end to end: the header parser
// (js/llama/gguf.js parseGguf) on files made by scripts/lib/gguf-writer.mjs and
// by a raw byte builder written here; the converters (scripts/llama2c-to-gguf.mjs,
// scripts/random-gguf.mjs); and loadGguf / inspectGguf (js/llama/gguf-model.js)
// on the shipped model converted in the test (nothing converted is committed).
//
// Parser: every flaw is an SdpaError E_FORMAT naming the field (bad magic,
// versions 1 and 4, a big-endian file, a cut inside every field of the header
// (and a cut without the file's length: GgufTruncated, the loader's "read on"),
// lying lengths and counts, duplicate keys and tensors, bad alignment,
// misaligned / overlapping / out-of-file tensors, unknown ggml types, rows not a
// multiple of the block, bad dims, bad bools, value types and nesting);
// versions 2 and 3 read alike; alignments 1 .. 4096; every value type round-trips.
// Models: the shipped model as an F32 GGUF gives loadLlama's logits bit for bit;
// F16 / Q8_0 / Q4_0 files match a float64 forward (tests/js/llama-reference.js)
// over the file's weights dequantized by tests/js/dense-reference.js (ggml's
// layouts read byte by byte, written independently of js/ and src/) within
// 1e-5 (1 + max |logit|), the float32 model's tolerance of llama-weights.test.js;
// the converter's quantized blocks are byte for byte dense-reference.js's port
// of ggml's reference quantizers. Every source kind loads the same bits;
// onProgress; abort (nothing left allocated); every "cannot run" error comes
// before a weight byte is pulled from the source.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { loadLlama, loadGguf, inspectGguf, GGUF_MATRIX_TYPES } from '../../js/llama/index.js';
import { parseGguf, GgufTruncated, GGML_TYPES } from '../../js/llama/gguf.js';
import { writeGguf } from '../../scripts/lib/gguf-writer.mjs';
import { planGguf } from '../../scripts/lib/gguf-layout.mjs';
import { llama2cToGguf, TOKEN_TYPE } from '../../scripts/llama2c-to-gguf.mjs';
import { randomGguf, randomTensors, randomMetadata, randomVocab, SHAPES } from '../../scripts/random-gguf.mjs';
import { expectError, expectReject } from './helpers.js';
import { GGUF_HEAP_DTYPES } from '../../js/llama/gguf-model.js';
import { HEAP_DTYPES } from '../../js/heap.js';
import { dequantize, quantize, halfToNumber } from './dense-reference.js';
import { referenceForward } from './llama-reference.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHECKPOINT = new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/model.bin')));
const TOKENIZER = new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/tokenizer.bin')));
const REF = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/data/llama/reference.json'), 'utf8'));
const TOKENS = REF.streams['heldout-full'].tokens.slice(0, 40);
const enc = new TextEncoder();

let sdpa;
test.before(async () => { sdpa = await createSdpa({ threads: 1 }); });
test.after(() => { sdpa?.dispose(); });

// ---------------------------------------------------------------------------
// A raw GGUF builder, independent of the writer: little-endian pieces.

const u32 = (v) => { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, v, true); return b; };
const u64 = (v) => { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, BigInt(v), true); return b; };
const str = (s) => { const b = enc.encode(s); return cat(u64(b.length), b); };
function cat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}
/** A header: magic, version, counts, then kv and tensor-info pieces as given (bytes), padded to 32. */
function raw({ version = 3, kvs = [], infos = [], data = new Uint8Array(0), nKv = kvs.length, nTensors = infos.length, magic = 'GGUF', pad: padded = true } = {}) {
  const head = cat(enc.encode(magic), u32(version), u64(nTensors), u64(nKv), ...kvs, ...infos);
  if (!padded) return head;
  const pad = new Uint8Array((32 - (head.length % 32)) % 32);
  return cat(head, pad, data);
}
const kv = (key, type, body) => cat(str(key), u32(type), body);
const info = (name, ne, typeId, offset) => cat(str(name), u32(ne.length), ...ne.map(u64), u32(typeId), u64(offset));

const parse = (bytes) => parseGguf(bytes, 'parseGguf', bytes.length);
const formatError = (bytes, names, label) => expectError(() => parse(bytes), 'E_FORMAT', [/^parseGguf: GGUF: /, ...[].concat(names)], label);

/** The writer's small valid file: every value type, three tensors (with their data). */
const ALL_VALUES = [
  ['general.architecture', 'STRING', 'llama'],
  ['t.u8', 'UINT8', 200], ['t.i8', 'INT8', -100], ['t.u16', 'UINT16', 60000], ['t.i16', 'INT16', -30000],
  ['t.u32', 'UINT32', 4000000000], ['t.i32', 'INT32', -2000000000], ['t.f32', 'FLOAT32', 1.5],
  ['t.bool', 'BOOL', true], ['t.str', 'STRING', 'héllo ▁ 🙂'], ['t.u64', 'UINT64', 2n ** 60n], ['t.u64small', 'UINT64', 12345],
  ['t.i64', 'INT64', -5], ['t.f64', 'FLOAT64', Math.PI],
  ['t.af32', ['ARRAY', 'FLOAT32'], Float32Array.of(1, -2.5, 3)], ['t.ai32', ['ARRAY', 'INT32'], Int32Array.of(-1, 2)],
  ['t.au8', ['ARRAY', 'UINT8'], Uint8Array.of(1, 2, 255)], ['t.astr', ['ARRAY', 'STRING'], ['a', '', '▁b']],
  ['t.abool', ['ARRAY', 'BOOL'], [true, false]], ['t.aempty', ['ARRAY', 'INT32'], []],
];
function tensorData(n, seed) { const b = new Uint8Array(n); for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7) & 255; return b; }
const SMALL_TENSORS = [
  { name: 'a', ne: [8, 2], type: 'F32', data: tensorData(64, 1) },
  { name: 'b', ne: [64, 2], type: 'Q8_0', data: tensorData(136, 2) },
  { name: 'c', ne: [5], type: 'F16', data: tensorData(10, 3) },
];
// (copies: writeGguf appends general.alignment to the array it is given when the alignment is not 32)
const small = (o = {}) => writeGguf({ metadata: ALL_VALUES.slice(), tensors: SMALL_TENSORS, ...o });

function checkSmall(g, bytes, alignment) {
  assert.is(g.alignment, alignment);
  assert.is(g.dataOffset % alignment, 0, 'the data starts aligned');
  assert.ok(g.dataOffset >= g.headerBytes && g.dataOffset - g.headerBytes < Math.max(alignment, 1));
  for (const [k, type, v] of ALL_VALUES) {
    const got = g.metadata.get(k);
    if (type === 'FLOAT32') assert.is(got, Math.fround(v), k);
    else if (type === 'UINT64' && typeof v === 'bigint') assert.is(got, v, `${k}: a BigInt beyond 2^53`);
    else if (Array.isArray(type)) {
      if (type[1] === 'STRING' || type[1] === 'BOOL') assert.equal(got, v, k);
      else { assert.is(got.constructor, v.constructor === Array ? Int32Array : v.constructor, `${k}: typed array kind`); assert.equal(Array.from(got), Array.from(v), k); }
    } else assert.is(got, v, k);
  }
  assert.is(g.metadata.size, ALL_VALUES.length + (alignment !== 32 ? 1 : 0));
  assert.equal(g.tensors.map((t) => [t.name, t.ne, t.type, t.values, t.bytes]),
    [['a', [8, 2], 'F32', 16, 64], ['b', [64, 2], 'Q8_0', 128, 136], ['c', [5], 'F16', 5, 10]]);
  for (const [i, t] of g.tensors.entries()) {
    assert.is(t.offset % alignment, 0, `${t.name} aligned`);
    assert.equal(bytes.subarray(g.dataOffset + t.offset, g.dataOffset + t.offset + t.bytes), SMALL_TENSORS[i].data, `${t.name}'s bytes at its offset`);
  }
}

test('parser: versions 2 and 3, every value type, three tensors: what was written reads back', () => {
  const b3 = small(), b2 = small({ version: 2 });
  const g3 = parse(b3), g2 = parse(b2);
  assert.is(g3.version, 3);
  assert.is(g2.version, 2);
  checkSmall(g3, b3, 32);
  checkSmall(g2, b2, 32);
  // the raw builder's file (independent of the writer) reads the same way
  const r = raw({ kvs: [kv('x', 4, u32(7)), kv('y', 8, str('z'))], infos: [info('w', [32], 0, 0)], data: new Uint8Array(128) });
  const g = parse(r);
  assert.equal([...g.metadata], [['x', 7], ['y', 'z']]);
  assert.is(g.tensors[0].bytes, 128);
  assert.is(g.dataOffset, r.length - 128);
});

test('parser: general.alignment 1, 8, 64, 4096: tensors at multiples of it, the data section aligned', () => {
  for (const alignment of [1, 8, 64, 4096]) {
    const b = small({ alignment });
    checkSmall(parse(b), b, alignment);
  }
});

test('parser: bad magic, versions 1 and 4, a big-endian file: E_FORMAT naming them', () => {
  const b = small();
  const bad = b.slice(); bad.set(enc.encode('GGML'), 0);
  formatError(bad, [/starts with bytes 47 47 4d 4c/, /expected "GGUF"/]);
  formatError(raw({ magic: 'FUGG' }), [/expected "GGUF"/]);
  formatError(small({ version: 1 }), [/version 1; expected 2 or 3/, /version 1 files/]);
  formatError(small({ version: 4 }), [/version 4; expected 2 or 3/]);
  const be = b.slice(); be.set([0, 0, 0, 3], 4);              // a big-endian writer's version 3
  formatError(be, [/version 50331648/, /big-endian/]);
  formatError(new Uint8Array(0), [/the magic at byte 0 needs 4 bytes/]);
});

/** The byte ranges of the small file's header fields: [start, end, regex the message must match]. */
function fieldMap() {
  const map = [[0, 4, /magic/], [4, 8, /version/], [8, 16, /tensor_count/], [16, 24, /kv_count/]];
  let at = 24;
  const scalarBytes = { UINT8: 1, INT8: 1, UINT16: 2, INT16: 2, UINT32: 4, INT32: 4, FLOAT32: 4, BOOL: 1, UINT64: 8, INT64: 8, FLOAT64: 8 };
  const valueBytes = (type, v) => {
    if (type === 'STRING') return 8 + enc.encode(v).length;
    if (Array.isArray(type)) return 12 + (type[1] === 'STRING' ? v.reduce((n, s) => n + 8 + enc.encode(s).length, 0) : v.length * scalarBytes[type[1]]);
    return scalarBytes[type];
  };
  ALL_VALUES.forEach(([key, type, v], i) => {
    const end = at + 8 + enc.encode(key).length + 4 + valueBytes(type, v);
    map.push([at, end, new RegExp(`key ${i}\\b|"${key.replace('.', '\\.')}"`)]);
    at = end;
  });
  for (const [j, t] of SMALL_TENSORS.entries()) {
    const end = at + 8 + t.name.length + 4 + 8 * t.ne.length + 4 + 8;
    map.push([at, end, new RegExp(`tensor ${j}\\b|tensor "${t.name}"`)]);
    at = end;
  }
  return { map, headerBytes: at };
}

test('parser: cut at every byte of the header: E_FORMAT naming the field it ends in (GgufTruncated when the file\'s length is unknown)', () => {
  const b = small();
  const { map, headerBytes } = fieldMap();
  assert.is(parse(b).headerBytes, headerBytes, 'the header ends where the format says');
  for (let n = 0; n < headerBytes; n++) {
    const cut = b.subarray(0, n);
    const [, , name] = map.find(([s, e]) => n >= s && n < e);
    formatError(cut, [name, /file ends at byte|expected at most the file's/], `cut at ${n}`);
    let e = null;
    try { parseGguf(cut); } catch (x) { e = x; }
    assert.ok(e instanceof GgufTruncated, `cut at ${n} without a length: GgufTruncated, got ${e}`);
    assert.ok(e.needed > n, `cut at ${n}: needs more (${e.needed})`);
  }
});

test('parser: a file that ends inside the data: E_FORMAT naming the first tensor past the end; the last padding may be missing', () => {
  const b = small();
  const g = parse(b);
  const ends = g.tensors.map((t) => [g.dataOffset + t.offset + t.bytes, t.name]);
  const lastEnd = Math.max(...ends.map(([e]) => e));
  for (let n = g.headerBytes; n < b.length; n++) {
    if (n >= lastEnd) { parse(b.subarray(0, n)); continue; }
    const first = g.tensors.filter((t) => g.dataOffset + t.offset + t.bytes > n).sort((x, y) => x.offset - y.offset)[0];
    formatError(b.subarray(0, n), [new RegExp(`tensor "${first.name}" .*runs past the end of the file \\(${n} bytes\\)`)], `cut at ${n}`);
  }
});

test('parser: lying lengths and counts: E_FORMAT naming them, nothing allocated for the lie', () => {
  formatError(raw({ nTensors: 65537 }), [/tensor_count is 65537; expected at most 65536/]);
  formatError(raw({ nKv: 2 ** 20 + 1 }), [/kv_count is 1048577; expected at most 1048576/]);
  formatError(raw({ nKv: 2 ** 62 }), [/kv_count is 4611686018427387904/]);
  formatError(raw({ kvs: [kv('a', 4, u32(1))], nKv: 3, pad: false }), [/key 1/, /file ends at byte/]);
  formatError(raw({ infos: [info('w', [32], 0, 0)], nTensors: 2, pad: false }), [/tensor 1/, /file ends at byte/]);
  // a key's length beyond the file, and far beyond 2^53
  formatError(raw({ kvs: [cat(u64(1000), enc.encode('abc'))] }), [/key 0 has length 1000 .*expected at most the file's/]);
  formatError(raw({ kvs: [cat(u64(2n ** 63n), enc.encode('abc'))] }), [/key 0 has length 9223372036854775808/]);
  // a string value's length, an array's count (typed, strings, beyond 2^53)
  formatError(raw({ kvs: [kv('s', 8, cat(u64(1 << 30), enc.encode('x')))] }), [/"s" has length 1073741824/]);
  formatError(raw({ kvs: [kv('a', 9, cat(u32(6), u64(1 << 24)))] }), [/"a" at byte \d+ needs 67108864 bytes/]);
  formatError(raw({ kvs: [kv('a', 9, cat(u32(8), u64(1 << 24)))] }), [/"a" claims 16777216 elements of STRING/]);
  formatError(raw({ kvs: [kv('a', 9, cat(u32(8), u64(1 << 28)))] }), [/the length of "a" is 268435456; expected at most 16777216/]);
  formatError(raw({ kvs: [kv('a', 9, cat(u32(6), u64(2n ** 60n)))] }), [/the length of "a" is 1152921504606846976; expected at most 16777216/]);
  // a tensor name's length
  formatError(raw({ infos: [cat(u64(1 << 20), enc.encode('w'))] }), [/the name of tensor 0 has length 1048576/]);
});

test('parser: duplicate keys and tensors, an empty key', () => {
  formatError(writeGguf({ metadata: [['k', 'UINT32', 1], ['j', 'UINT32', 2], ['k', 'STRING', 'x']] }), [/key "k" appears twice/]);
  formatError(writeGguf({ tensors: [SMALL_TENSORS[0], { ...SMALL_TENSORS[2], name: 'a' }] }), [/tensor "a" appears twice/]);
  formatError(writeGguf({ metadata: [['', 'UINT32', 1]] }), [/key 0 is empty/]);
});

test('parser: general.alignment not a power of two in 1 .. 2^20: E_FORMAT naming it', () => {
  for (const [type, v, shown] of [['UINT32', 0, '0'], ['UINT32', 3, '3'], ['UINT32', 48, '48'], ['UINT32', 2 ** 21, '2097152'], ['FLOAT32', 1.5, '1.5'], ['STRING', '32', '32'], ['INT32', -32, '-32']]) {
    formatError(writeGguf({ metadata: [['general.alignment', type, v]] }), [new RegExp(`general.alignment is ${shown.replace('.', '\\.')}; expected a power of two`)], `${type} ${v}`);
  }
  // a UINT64 alignment of a power of two is read as its number
  assert.is(parse(writeGguf({ metadata: [['general.alignment', 'UINT64', 64]], tensors: [SMALL_TENSORS[0]], alignment: 64 })).alignment, 64);
});

test('parser: misaligned, overlapping and far-off tensors', () => {
  const t = SMALL_TENSORS;
  formatError(writeGguf({ tensors: [t[0], { ...t[2], offset: 80 }] }), [/tensor "c" starts at data offset 80; expected a multiple of general.alignment 32/]);
  formatError(writeGguf({ tensors: [t[0], { ...t[2], offset: 56 }], alignment: 8 }), [/tensor "a" \(data bytes 0 \.\. 64\) overlaps tensor "c" \(from 56\)/]);
  formatError(writeGguf({ tensors: [t[0], { ...t[2], offset: 32 }] }), [/tensor "a" \(data bytes 0 \.\. 64\) overlaps tensor "c" \(from 32\)/]);
  formatError(writeGguf({ tensors: [t[0], { ...t[1], offset: 0 }] }), [/overlaps tensor/]);
  formatError(raw({ infos: [info('w', [32], 0, 2 ** 53)] }), [/tensor "w" starts at data offset 9007199254740992; expected at most 2\^52/]);
  formatError(raw({ infos: [info('w', [32], 0, 1 << 20)], data: new Uint8Array(128) }), [/tensor "w" .*runs past the end of the file/]);
});

test('parser: tensor types: unknown ids, rows that are not a multiple of the block, bad dims', () => {
  for (const id of [4, 5, 31, 32, 33, 36, 99, 2 ** 32 - 1]) {
    assert.ok(!GGML_TYPES.has(id));
    formatError(raw({ infos: [info('w', [32], id, 0)] }), [new RegExp(`tensor "w" has ggml type ${id}, which no ggml release defines`)], `type ${id}`);
  }
  formatError(raw({ infos: [info('w', [48, 2], 8, 0)] }), [/tensor "w" \(Q8_0\) has rows of ne\[0\] = 48 values; expected a multiple of Q8_0's block of 32/]);
  formatError(raw({ infos: [info('w', [128], 12, 0)] }), [/tensor "w" \(Q4_K\) has rows of ne\[0\] = 128 values; expected a multiple of Q4_K's block of 256/]);
  formatError(raw({ infos: [info('w', [], 0, 0)] }), [/tensor "w" has 0 dimensions; expected 1 \.\. 4/]);
  formatError(raw({ infos: [info('w', [1, 1, 1, 1, 1], 0, 0)] }), [/tensor "w" has 5 dimensions/]);
  formatError(raw({ infos: [info('w', [4, 0], 0, 0)] }), [/tensor "w" has ne\[1\] = 0; expected 1 \.\. 2\^32/]);
  formatError(raw({ infos: [info('w', [2 ** 32 + 1], 0, 0)] }), [/ne\[0\] = 4294967297/]);
  formatError(raw({ infos: [info('w', [2 ** 21, 2 ** 20], 0, 0)] }), [/tensor "w" has 2199023255552 values .*expected at most 2\^40/]);
  formatError(raw({ infos: [info('w', [2 ** 21, 2 ** 21, 2], 0, 0)] }), [/values/]);
});

test('parser: bad values: a bool byte of 2, unknown value and element types, arrays nested 3 deep', () => {
  formatError(raw({ kvs: [kv('b', 7, Uint8Array.of(2))] }), [/"b" is a bool of byte 2 .*expected 0 or 1/]);
  formatError(raw({ kvs: [kv('a', 9, cat(u32(7), u64(2), Uint8Array.of(1, 5)))] }), [/"a"\[1\] is a bool of byte 5/]);
  formatError(raw({ kvs: [kv('v', 13, u32(0))] }), [/"v" has value type 13; expected one of 0 \.\. 12/]);
  formatError(raw({ kvs: [kv('a', 9, cat(u32(13), u64(1)))] }), [/"a" has element type 13/]);
  const inner = cat(u32(4), u64(1), u32(5));                 // [uint32 5]
  assert.equal(Array.from(parse(raw({ kvs: [kv('a', 9, cat(u32(9), u64(1), inner))] })).metadata.get('a')[0]), [5], 'arrays of arrays (depth 2) read');
  formatError(raw({ kvs: [kv('a', 9, cat(u32(9), u64(1), u32(9), u64(1), inner))] }), [/"a"\[0\]\[0\] nests arrays 3 deep; expected at most 2/]);
});

// ---------------------------------------------------------------------------
// The converters

test('llama2c-to-gguf: F32 keeps the checkpoint\'s bytes; the keys; the SPM vocabulary with U+2581 restored and its token types', async () => {
  const file = await llama2cToGguf(CHECKPOINT, TOKENIZER, { type: 'F32', name: 'fortunes' });
  const g = parse(file);
  const m = g.metadata;
  const dv = new DataView(CHECKPOINT.buffer, CHECKPOINT.byteOffset);
  const [dim, hidden, L, nHeads, nKv, vocab, seqLen] = Array.from({ length: 7 }, (_, i) => dv.getInt32(4 * i, true));
  const expect = {
    'general.architecture': 'llama', 'general.name': 'fortunes', 'general.file_type': 0,
    'llama.context_length': seqLen, 'llama.embedding_length': dim, 'llama.block_count': L, 'llama.feed_forward_length': hidden,
    'llama.attention.head_count': nHeads, 'llama.attention.head_count_kv': nKv, 'llama.rope.dimension_count': dim / nHeads,
    'llama.rope.freq_base': 10000, 'llama.attention.layer_norm_rms_epsilon': Math.fround(1e-5), 'llama.vocab_size': Math.abs(vocab),
    'tokenizer.ggml.model': 'llama', 'tokenizer.ggml.bos_token_id': 1, 'tokenizer.ggml.eos_token_id': 2, 'tokenizer.ggml.unknown_token_id': 0,
    'tokenizer.ggml.add_bos_token': true, 'tokenizer.ggml.add_eos_token': false,
  };
  for (const [k, v] of Object.entries(expect)) assert.is(m.get(k), v, k);
  assert.ok(vocab > 0, 'the shipped model shares its classifier');
  assert.not.ok(g.tensors.some((t) => t.name === 'output.weight'), 'no output.weight for a shared classifier');
  assert.is(g.tensors.length, 2 + 9 * L);
  // every float after the header, in llama2.c's order, is in the file: the matrices and norms at their tensors
  const body = CHECKPOINT.subarray(28);
  const kvDim = nKv * dim / nHeads;
  let at = 0;
  const expectAt = (name, floats) => {
    const t = g.tensors.find((x) => x.name === name);
    assert.is(t.type, 'F32', name);
    assert.equal(file.subarray(g.dataOffset + t.offset, g.dataOffset + t.offset + t.bytes), body.subarray(at, at + 4 * floats), `${name}: the checkpoint's bytes`);
    at += 4 * floats;
  };
  expectAt('token_embd.weight', Math.abs(vocab) * dim);
  const kinds = [['attn_norm', dim], ['attn_q', dim * dim], ['attn_k', kvDim * dim], ['attn_v', kvDim * dim], ['attn_output', dim * dim],
    ['ffn_norm', dim], ['ffn_gate', hidden * dim], ['ffn_down', dim * hidden], ['ffn_up', hidden * dim]];
  for (const [kind, n] of kinds) for (let l = 0; l < L; l++) expectAt(`blk.${l}.${kind}.weight`, n);
  expectAt('output_norm.weight', dim);
  assert.is(body.length - at, 4 * seqLen * dim / nHeads, 'only the two RoPE tables are left out');
  // the vocabulary: tokenizer.bin's pieces (spaces back to U+2581), scores, types
  const tokens = m.get('tokenizer.ggml.tokens'), scores = m.get('tokenizer.ggml.scores'), types = m.get('tokenizer.ggml.token_type');
  assert.is(tokens.length, Math.abs(vocab));
  const tdv = new DataView(TOKENIZER.buffer, TOKENIZER.byteOffset);
  let o = 4;
  for (let i = 0; i < tokens.length; i++) {
    const score = tdv.getFloat32(o, true), len = tdv.getInt32(o + 4, true);
    const piece = new TextDecoder().decode(TOKENIZER.subarray(o + 8, o + 8 + len));
    o += 8 + len;
    assert.is(tokens[i], piece.split(' ').join('\u2581'), `token ${i}`);
    assert.is(scores[i], score, `score ${i}`);
    const want = i === 0 ? TOKEN_TYPE.UNKNOWN : i <= 2 ? TOKEN_TYPE.CONTROL : /^<0x[0-9A-F]{2}>$/.test(piece) ? TOKEN_TYPE.BYTE : TOKEN_TYPE.NORMAL;
    assert.is(types[i], want, `token_type ${i} (${piece})`);
  }
  assert.equal(tokens.slice(0, 3), ['<unk>', '<s>', '</s>']);
  assert.ok(tokens.includes('\u2581'), 'the space piece is U+2581');
  assert.not.ok(tokens.some((s) => s.includes(' ')), 'no token keeps a space');
  // a separate classifier becomes output.weight
  const sep = CHECKPOINT.slice();
  new DataView(sep.buffer).setInt32(20, -Math.abs(vocab), true);
  const withCls = cat(sep, CHECKPOINT.subarray(28, 28 + 4 * Math.abs(vocab) * dim));
  const g2 = parse(await llama2cToGguf(withCls, null));
  const out = g2.tensors.find((t) => t.name === 'output.weight');
  assert.ok(out && out.type === 'F32' && out.ne[0] === dim && out.ne[1] === Math.abs(vocab), 'output.weight [dim, vocab]');
  assert.not.ok(g2.metadata.has('tokenizer.ggml.model'), 'tokenizer null: no tokenizer keys');
});

test('llama2c-to-gguf: F16 / Q8_0 / Q4_0 blocks are byte for byte ggml\'s reference quantizers (dense-reference.js\'s port); norms stay F32', async () => {
  const f32 = parse(await llama2cToGguf(CHECKPOINT, null, { type: 'F32' }));
  const f32File = await llama2cToGguf(CHECKPOINT, null, { type: 'F32' });
  for (const [type, dtype, fileType] of [['F16', 'float16', 1], ['Q8_0', 'q8_0', 7], ['Q4_0', 'q4_0', 2]]) {
    const file = await llama2cToGguf(CHECKPOINT, null, { type, sdpa });
    const g = parse(file);
    assert.is(g.metadata.get('general.file_type'), fileType);
    for (const [i, t] of g.tensors.entries()) {
      const src = f32.tensors[i];
      assert.is(t.name, src.name);
      const srcBytes = f32File.subarray(f32.dataOffset + src.offset, f32.dataOffset + src.offset + src.bytes);
      const got = file.subarray(g.dataOffset + t.offset, g.dataOffset + t.offset + t.bytes);
      if (t.ne.length === 1) { assert.is(t.type, 'F32', t.name); assert.equal(got, srcBytes, t.name); continue; }
      assert.is(t.type, type, t.name);
      const values = new Float32Array(srcBytes.slice().buffer);
      const want = quantize(dtype, values, t.ne[1], t.ne[0]);
      if (!want.every((b, k) => b === got[k])) assert.unreachable(`${type} ${t.name}: the converter's blocks differ from ggml's reference quantization`);
    }
  }
});

test('the command lines: llama2c-to-gguf writes what llama2cToGguf returns; random-gguf streams what randomGguf makes', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gguf-test-'));
  try {
    const out = path.join(dir, 'f.gguf');
    execFileSync(process.execPath, [path.join(ROOT, 'scripts/llama2c-to-gguf.mjs'), path.join(ROOT, 'models/fortunes/model.bin'), path.join(ROOT, 'models/fortunes/tokenizer.bin'), out, '--type', 'q8_0'], { stdio: 'pipe' });
    const want = await llama2cToGguf(CHECKPOINT, TOKENIZER, { type: 'Q8_0', sdpa, name: 'fortunes' });
    assert.ok(Buffer.from(fs.readFileSync(out)).equals(Buffer.from(want)), 'the same bytes (general.name "fortunes": the folder of a model.bin)');
    const r = path.join(dir, 'r.gguf');
    execFileSync(process.execPath, [path.join(ROOT, 'scripts/random-gguf.mjs'), r, '--shape', 'tiny', '--type', 'Q4_0', '--seed', '5'], { stdio: 'pipe' });
    assert.ok(Buffer.from(fs.readFileSync(r)).equals(Buffer.from(randomGguf({ shape: 'tiny', type: 'Q4_0', seed: 5 }))), 'streamed = in memory');
    let e = null;
    try { execFileSync(process.execPath, [path.join(ROOT, 'scripts/llama2c-to-gguf.mjs'), 'a', 'b', out, '--type', 'Q5_1'], { stdio: 'pipe' }); } catch (x) { e = x; }
    assert.ok(e !== null && /ENOENT|type Q5_1/.test(String(e.stderr)), `a bad call fails with a message: ${e?.stderr}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

/** A float64 dequantizer of Q5_0 / Q4_K / Q6_K blocks, from ggml's dequantize_row_* (random-gguf's K-type blocks). */
function dequantizeK(type, bytes, n) {
  const out = new Float64Array(n);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const h = (at) => halfToNumber(dv.getUint16(at, true));
  if (type === 'Q5_0') {
    for (let b = 0; b < n / 32; b++) {
      const at = 22 * b, d = h(at), qh = dv.getUint32(at + 2, true);
      for (let j = 0; j < 16; j++) {
        const q = bytes[at + 6 + j];
        out[32 * b + j] = d * (((q & 15) | (((qh >>> j) & 1) << 4)) - 16);
        out[32 * b + j + 16] = d * (((q >>> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16);
      }
    }
  } else if (type === 'Q4_K') {
    for (let b = 0; b < n / 256; b++) {
      const at = 144 * b, d = h(at), dmin = h(at + 2), sc = (k) => bytes[at + 4 + k];
      const scaleMin = (j) => (j < 4 ? [sc(j) & 63, sc(j + 4) & 63] : [(sc(j + 4) & 15) | ((sc(j - 4) >>> 6) << 4), (sc(j + 4) >>> 4) | ((sc(j) >>> 6) << 4)]);
      for (let g = 0; g < 4; g++) {
        const [s1, m1] = scaleMin(2 * g), [s2, m2] = scaleMin(2 * g + 1);
        for (let l = 0; l < 32; l++) {
          const q = bytes[at + 16 + 32 * g + l];
          out[256 * b + 64 * g + l] = d * s1 * (q & 15) - dmin * m1;
          out[256 * b + 64 * g + 32 + l] = d * s2 * (q >>> 4) - dmin * m2;
        }
      }
    }
  } else {     // Q6_K
    for (let b = 0; b < n / 256; b++) {
      const at = 210 * b, d = h(at + 208);
      for (let half = 0; half < 2; half++) {
        const ql = at + 64 * half, qh = at + 128 + 32 * half, sc = at + 192 + 8 * half, y = 256 * b + 128 * half;
        for (let l = 0; l < 32; l++) {
          const is = l >> 4, s = (k) => dv.getInt8(sc + is + k);
          out[y + l] = d * s(0) * (((bytes[ql + l] & 15) | ((bytes[qh + l] & 3) << 4)) - 32);
          out[y + l + 32] = d * s(2) * (((bytes[ql + l + 32] & 15) | (((bytes[qh + l] >>> 2) & 3) << 4)) - 32);
          out[y + l + 64] = d * s(4) * (((bytes[ql + l] >>> 4) | (((bytes[qh + l] >>> 4) & 3) << 4)) - 32);
          out[y + l + 96] = d * s(6) * (((bytes[ql + l + 32] >>> 4) | (((bytes[qh + l] >>> 6) & 3) << 4)) - 32);
        }
      }
    }
  }
  return out;
}

/** The values of tensor t of a parsed file (float64), whatever its type. */
function tensorValues(file, g, t) {
  const bytes = file.subarray(g.dataOffset + t.offset, g.dataOffset + t.offset + t.bytes);
  const rows = t.ne[1] ?? 1, cols = t.ne[0];
  const dtype = { F32: 'float32', F16: 'float16', Q8_0: 'q8_0', Q4_0: 'q4_0' }[t.type];
  return dtype ? dequantize(dtype, bytes, rows, cols) : dequantizeK(t.type, bytes, rows * cols);
}

test('random-gguf: every type gives valid blocks of the intended RMS (K types fall back per tensor as llama-quantize does); a valid SPM vocab and template', () => {
  const shape = SHAPES.tiny;
  for (const type of ['F32', 'F16', 'Q8_0', 'Q4_0', 'Q4_K', 'Q6_K']) {
    const file = randomGguf({ shape: 'tiny', type, seed: 3 });
    const g = parse(file);
    const want = randomTensors(shape, type);
    assert.equal(g.tensors.map((t) => [t.name, t.ne, t.type]), want.map((t) => [t.name, t.ne, t.type]), `${type}: tensors`);
    const fallback = { Q4_K: 'Q5_0', Q6_K: 'Q8_0' }[type] ?? type;
    for (const [i, t] of g.tensors.entries()) {
      const v = tensorValues(file, g, t);
      if (want[i].rms === null) { assert.ok(v.every((x) => x === 1), `${t.name}: ones`); continue; }
      assert.is(t.type, fallback, `${type} ${t.name}: rows of ${t.ne[0]} are not a multiple of 256`);
      const rms = Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length), mean = v.reduce((s, x) => s + x, 0) / v.length;
      assert.ok(Math.abs(rms / want[i].rms - 1) < 0.035, `${type} ${t.name}: RMS ${rms} vs ${want[i].rms}`);
      assert.ok(Math.abs(mean) < 0.1 * want[i].rms, `${type} ${t.name}: mean ${mean}`);
    }
  }
  // K blocks themselves, at a shape whose rows are multiples of 256
  const wide = { ...SHAPES.tiny, dim: 256, nHeads: 4, nKvHeads: 2, hiddenDim: 512 };
  for (const type of ['Q4_K', 'Q6_K']) {
    const file = randomGguf({ shape: wide, type });
    const g = parse(file);
    const want = randomTensors(wide, type);
    for (const [i, t] of g.tensors.entries()) {
      if (want[i].rms === null) continue;
      assert.is(t.type, type, t.name);
      const v = tensorValues(file, g, t);
      const rms = Math.sqrt(v.reduce((s, x) => s + x * x, 0) / v.length);
      assert.ok(Math.abs(rms / want[i].rms - 1) < 0.035, `${type} ${t.name}: RMS ${rms} vs ${want[i].rms}`);
    }
  }
  for (const name of Object.keys(SHAPES)) {
    const s = SHAPES[name];
    const v = randomVocab(s);
    assert.is(v.tokens.length, s.vocabSize, `${name}: vocab size`);
    assert.is(new Set(v.tokens).size, s.vocabSize, `${name}: tokens unique`);
    for (let b = 0; b < 256; b++) assert.is(v.tokens[3 + b], `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    assert.ok(v.types.slice(3, 259).every((x) => x === TOKEN_TYPE.BYTE));
    assert.ok(v.tokens.includes('\u2581') && !v.tokens.some((t) => t.includes(' ')), `${name}: U+2581 for spaces`);
    for (const sp of s.specials) assert.is(v.types[v.tokens.indexOf(sp)], TOKEN_TYPE.CONTROL, `${name}: ${sp} CONTROL`);
    const m = new Map(randomMetadata(s, 'Q4_0').map(([k, , x]) => [k, x]));
    assert.is(m.get('tokenizer.chat_template'), s.template);
    for (const sp of s.specials) assert.ok(s.template.includes(sp), `${name}: the template's ${sp} is a token`);
  }
  assert.is(randomVocab(SHAPES['smollm2-135m']).tokens[randomVocab(SHAPES['smollm2-135m']).eot], '<|im_end|>');
});

// ---------------------------------------------------------------------------
// loadGguf

/** { config, w } for llama-reference.js's referenceForward from a parsed GGUF file (float64 weights, RoPE tables from freq_base in doubles). */
function referenceFromGguf(file) {
  const g = parse(file), m = g.metadata;
  const byName = new Map(g.tensors.map((t) => [t.name, t]));
  const val = (name) => tensorValues(file, g, byName.get(name));
  const dim = m.get('llama.embedding_length'), L = m.get('llama.block_count'), nHeads = m.get('llama.attention.head_count');
  const nKv = m.get('llama.attention.head_count_kv'), hidden = m.get('llama.feed_forward_length'), hs = dim / nHeads;
  const vocab = byName.get('token_embd.weight').ne[1], seqLen = 64, base = m.get('llama.rope.freq_base');
  const layer = (kind) => Array.from({ length: L }, (_, l) => val(`blk.${l}.${kind}.weight`));
  const w = {
    embedding: val('token_embd.weight'), wq: layer('attn_q'), wk: layer('attn_k'), wv: layer('attn_v'), wo: layer('attn_output'),
    w1: layer('ffn_gate'), w2: layer('ffn_down'), w3: layer('ffn_up'), rmsAtt: layer('attn_norm'), rmsFfn: layer('ffn_norm'),
    rmsFinal: val('output_norm.weight'), cos: new Float64Array(seqLen * hs / 2), sin: new Float64Array(seqLen * hs / 2),
  };
  w.classifier = byName.has('output.weight') ? val('output.weight') : w.embedding;
  for (let p = 0; p < seqLen; p++) {
    for (let j = 0; j < hs / 2; j++) {
      const a = p * Math.pow(base, -2 * j / hs);
      w.cos[p * hs / 2 + j] = Math.cos(a);
      w.sin[p * hs / 2 + j] = Math.sin(a);
    }
  }
  return { config: { dim, hidden, L, nHeads, nKv, vocab, seqLen, hs, kvDim: nKv * hs }, w };
}

const maxAbs = (a) => a.reduce((x, v) => Math.max(x, Math.abs(v)), 0);
function maxErr(got, want) {
  let e = 0;
  for (let i = 0; i < got.length; i++) e = Math.max(e, Math.abs(got[i] - want[i]));
  return Number.isNaN(e) ? Infinity : e;
}

/** Wraps M._malloc / M._free (llama-fuzz.test.js's trackMallocs): every pointer allocated and not yet freed. */
function trackMallocs(M) {
  M._free(M._malloc(8));
  const realMalloc = M._malloc, realFree = M._free;
  const live = new Map();
  M._malloc = (n) => { const p = realMalloc(n); if (p) live.set(p >>> 0, n); return p; };
  M._free = (p) => { live.delete(p >>> 0); return realFree(p); };
  return { live, restore() { M._malloc = realMalloc; M._free = realFree; } };
}

test('loadGguf: the shipped model as an F32 GGUF gives loadLlama\'s logits bit for bit, prefill and token by token', async () => {
  const file = await llama2cToGguf(CHECKPOINT, null, { type: 'F32' });
  const a = loadLlama(sdpa, CHECKPOINT);
  const { model, tokenizer, metadata } = await loadGguf(sdpa, file);
  try {
    assert.is(tokenizer, null, 'no tokenizer keys: no tokenizer');
    assert.equal(model.config, a.config === undefined ? model.config : { ...a.config, seqLen: model.config.seqLen });
    assert.is(model.weightDtype, 'float32');
    assert.is(metadata.fileBytes, file.length);
    assert.equal(metadata.tensorTypes, { F32: 47 });
    const x = a.forward(TOKENS), y = model.forward(TOKENS);
    assert.is(y.length, TOKENS.length * 512);
    for (let i = 0; i < x.length; i++) if (!Object.is(x[i], y[i])) assert.unreachable(`prefill logit ${i}: ${y[i]} vs loadLlama's ${x[i]}`);
    a.truncate(0);
    model.truncate(0);
    for (const t of TOKENS.slice(0, 12)) {
      const p = a.forward([t]), q = model.forward([t]);
      for (let i = 0; i < p.length; i++) if (!Object.is(p[i], q[i])) assert.unreachable(`token-by-token logit ${i}: ${q[i]} vs ${p[i]}`);
    }
  } finally {
    a.dispose();
    model.dispose();
  }
});

for (const type of ['F32', 'F16', 'Q8_0', 'Q4_0']) {
  test(`loadGguf: the shipped model as ${type} GGUF matches a float64 forward over its dequantized weights (1e-5 (1 + max |logit|))`, async () => {
    const file = await llama2cToGguf(CHECKPOINT, null, { type, sdpa });
    const ref = referenceForward(referenceFromGguf(file), TOKENS);
    const tol = 1e-5 * (1 + maxAbs(ref));
    const { model } = await loadGguf(sdpa, file);
    try {
      const e = maxErr(model.forward(TOKENS), ref);
      console.log(`gguf ${type}: max |logit error| ${e.toExponential(2)} (tolerance ${tol.toExponential(2)}, max |logit| ${maxAbs(ref).toFixed(2)})`);
      assert.ok(e <= tol, `${type}: max |error| ${e} > ${tol}`);
    } finally {
      model.dispose();
    }
  });
}

test('loadGguf: random tiny files (GQA, the synthetic shapes\' code path) of every type this build runs match the float64 forward', async () => {
  for (const type of ['F32', 'F16', 'Q8_0', 'Q4_0']) {
    const file = randomGguf({ shape: 'tiny', type, tokenizer: false });
    const toks = [1, 300, 17, 42, 99, 260, 5, 511];
    const ref = referenceForward(referenceFromGguf(file), toks);
    const { model } = await loadGguf(sdpa, file);
    try {
      const e = maxErr(model.forward(toks), ref), tol = 1e-5 * (1 + maxAbs(ref));
      assert.ok(e <= tol, `tiny ${type}: max |error| ${e} > ${tol}`);
    } finally {
      model.dispose();
    }
  }
});

test('every ggml type loadGguf runs as a weight matrix is a heap dtype of this build', () => {
  assert.ok(GGUF_MATRIX_TYPES.length >= 7, GGUF_MATRIX_TYPES.join(', '));
  for (const t of GGUF_MATRIX_TYPES) assert.ok(HEAP_DTYPES.includes(GGUF_HEAP_DTYPES[t]), `${t} runs as '${GGUF_HEAP_DTYPES[t]}', which is not in HEAP_DTYPES (${HEAP_DTYPES.join(', ')})`);
});

test('loadGguf: random K-type files (Q4_K, Q6_K at rows of 256; with Q5_0 / Q8_0 where rows fall back) match the float64 forward over ggml\'s dequantization, when this build runs them', async () => {
  const wide = { ...SHAPES.tiny, dim: 256, nHeads: 4, nKvHeads: 2, hiddenDim: 512 };
  let ran = 0;
  for (const [type, shape] of [['Q4_K', wide], ['Q6_K', wide], ['Q4_K', SHAPES.tiny], ['Q6_K', SHAPES.tiny]]) {
    const file = randomGguf({ shape, type, tokenizer: false });
    const types = [...new Set(parse(file).tensors.map((t) => t.type))];
    const missing = types.filter((t) => !GGUF_MATRIX_TYPES.includes(t));
    if (missing.length) { console.log(`gguf.test.js: ${missing.join(', ')} not in this build's GGUF_MATRIX_TYPES (${GGUF_MATRIX_TYPES.join(', ')}): the ${type} file of dim ${shape.dim} is not loaded`); continue; }
    const toks = [1, 300, 17, 42, 99, 260, 5, 511];
    const ref = referenceForward(referenceFromGguf(file), toks);
    const { model } = await loadGguf(sdpa, file);
    try {
      const e = maxErr(model.forward(toks), ref), tol = 1e-5 * (1 + maxAbs(ref));
      console.log(`gguf ${type} (dim ${shape.dim}: ${types.join(', ')}): max |logit error| ${e.toExponential(2)} (tolerance ${tol.toExponential(2)})`);
      assert.ok(e <= tol, `${type} (${types.join(', ')}): max |error| ${e} > ${tol}`);
      ran++;
    } finally {
      model.dispose();
    }
  }
  if (ran === 0) console.log('gguf.test.js: no K-type file ran (the dense kernels do not have them yet)');
});

/** The same bytes as every source kind loadGguf takes. */
function sources(file, chunk) {
  const chunks = (sizes) => {
    const out = [];
    for (let at = 0, k = 0; at < file.length; k++) { const n = sizes[k % sizes.length]; out.push(file.slice(at, at + n)); at += n; }
    return out;
  };
  return {
    Uint8Array: () => file,
    subarray: () => { const big = new Uint8Array(file.length + 7); big.set(file, 3); return big.subarray(3, 3 + file.length); },
    ArrayBuffer: () => file.slice().buffer,
    Blob: () => new Blob([file]),
    Response: () => new Response(file.slice()),
    'Response with content-length': () => new Response(file.slice(), { headers: { 'content-length': String(file.length) } }),
    ReadableStream: () => { const parts = chunks([chunk]); return new ReadableStream({ pull(c) { const p = parts.shift(); if (p) c.enqueue(p); else c.close(); } }); },
    'async iterable, odd chunks': () => (async function* () { yield* chunks([1, 7, 4093, 65521, 13, 100003]); })(),
  };
}

test('loadGguf: every source kind (bytes, subarray, ArrayBuffer, Blob, Response, ReadableStream, async iterable of odd chunks) loads the same model: same logits, same fingerprint, progress up to the file\'s size', async () => {
  const file = await llama2cToGguf(CHECKPOINT, null, { type: 'Q8_0', sdpa });
  let want = null, fingerprint = null;
  for (const [kind, make] of Object.entries(sources(file, 65536))) {
    const calls = [];
    const { model, metadata } = await loadGguf(sdpa, make(), { onProgress: (p) => calls.push(p) });
    try {
      const y = model.forward(TOKENS.slice(0, 8));
      if (want === null) { want = y; fingerprint = model.fingerprint; } else {
        for (let i = 0; i < y.length; i++) if (!Object.is(y[i], want[i])) assert.unreachable(`${kind}: logit ${i} differs`);
        assert.is(model.fingerprint, fingerprint, `${kind}: fingerprint`);
      }
      assert.ok(calls.length >= 1, `${kind}: onProgress called`);
      for (let i = 1; i < calls.length; i++) assert.ok(calls[i].loaded >= calls[i - 1].loaded, `${kind}: progress never goes back`);
      assert.is(calls.at(-1).loaded, file.length, `${kind}: the last progress is the whole file`);
      const known = !['ReadableStream', 'async iterable, odd chunks', 'Response'].includes(kind);
      if (known) assert.ok(calls.every((c) => c.total === file.length), `${kind}: total is the file's size: ${JSON.stringify(calls.at(-1))}`);
      else if (kind !== 'Response') assert.ok(calls.every((c) => c.total === null), `${kind}: total is null (the source does not say): ${JSON.stringify(calls.at(-1))}`);
      assert.is(metadata.fileBytes === null ? file.length : metadata.fileBytes, file.length, `${kind}: fileBytes`);
      if (kind === 'async iterable, odd chunks') assert.ok(calls.length > 100, `${kind}: a progress call per chunk (${calls.length})`);
    } finally {
      model.dispose();
    }
  }
  // a different file has a different fingerprint
  const other = await llama2cToGguf(CHECKPOINT, null, { type: 'Q4_0', sdpa });
  const { model } = await loadGguf(sdpa, other);
  assert.is.not(model.fingerprint, fingerprint);
  model.dispose();
});

test('loadGguf: a small file in 1-byte chunks loads the bits of the whole', async () => {
  const file = randomGguf({ shape: 'tiny', type: 'Q4_0', tokenizer: false });
  const { model: a } = await loadGguf(sdpa, file);
  const { model: b } = await loadGguf(sdpa, (async function* () { for (let i = 0; i < file.length; i++) yield file.subarray(i, i + 1); })());
  try {
    const x = a.forward([1, 2, 3]), y = b.forward([1, 2, 3]);
    assert.ok(x.every((v, i) => Object.is(v, y[i])), 'same logits');
    assert.is(a.fingerprint, b.fingerprint);
  } finally {
    a.dispose();
    b.dispose();
  }
});

test('loadGguf: abort before, during the header and during the weights rejects with the signal\'s reason and leaves nothing allocated', async () => {
  const { M } = sdpa[INTERNALS];
  const file = await llama2cToGguf(CHECKPOINT, null, { type: 'F32' });
  const mem0 = sdpa.memory();
  const tracker = trackMallocs(M);
  try {
    // already aborted
    const c0 = new AbortController();
    const r0 = new Error('stopped before');
    c0.abort(r0);
    let e = null;
    try { await loadGguf(sdpa, file, { signal: c0.signal }); } catch (x) { e = x; }
    assert.is(e, r0, 'the reason itself');
    for (const [where, at] of [['the header', 100], ['the weights', 4 << 20]]) {
      const c = new AbortController(), reason = new Error(`stopped in ${where}`);
      let pulled = 0, cancelled = false;
      const stream = new ReadableStream({
        pull(ctl) { if (pulled >= file.length) { ctl.close(); return; } const n = Math.min(4096, file.length - pulled); ctl.enqueue(file.slice(pulled, pulled + n)); pulled += n; if (pulled >= at) c.abort(reason); },
        cancel() { cancelled = true; },
      }, { highWaterMark: 0 });
      let err = null;
      try { await loadGguf(sdpa, stream, { signal: c.signal }); } catch (x) { err = x; }
      assert.is(err, reason, `aborted in ${where}: rejects with the reason (got ${err})`);
      assert.ok(pulled < file.length, `aborted in ${where}: the rest of the file is not read (${pulled} of ${file.length})`);
      assert.ok(cancelled, `aborted in ${where}: the stream is cancelled`);
    }
  } finally {
    tracker.restore();
  }
  assert.is(tracker.live.size, 0, `every malloc of the aborted loads freed (${[...tracker.live.values()].join(', ')} bytes left)`);
  const mem1 = sdpa.memory();
  assert.is(mem1.bytesInUse, mem0.bytesInUse, 'no KV pages held');
  assert.is(mem1.pagesInUse, mem0.pagesInUse);
});

/**
 * A source that yields a file's header (its first dataOffset bytes) and then
 * records whether anything after it was pulled.
 */
function headerThenWeights(file, dataOffset) {
  const state = { pulledWeights: false };
  const it = (async function* () {
    yield file.slice(0, dataOffset);
    state.pulledWeights = true;
    yield file.slice(dataOffset);
  })();
  return { it, state };
}

/** A header-only GGUF (planGguf) of random-gguf's tiny shape with `edit` applied to its metadata and tensors, plus zero data. */
function editedFile(edit, shape = SHAPES.tiny, type = 'Q8_0') {
  let metadata = randomMetadata(shape, type, { tokenizer: false });
  let tensors = randomTensors(shape, type).map(({ name, ne, type: t }) => ({ name, ne, type: t }));
  ({ metadata, tensors } = edit({ metadata, tensors }));
  const plan = planGguf({ metadata, tensors });
  const file = new Uint8Array(Math.min(plan.fileBytes, plan.dataOffset + (1 << 20)));
  file.set(plan.header);
  return { file, plan };
}

test('loadGguf: a file that cannot run is a typed error before any weight is read, naming what (and nothing left allocated)', async () => {
  const { M } = sdpa[INTERNALS];
  const cases = [
    ['another architecture', ({ metadata, tensors }) => ({ metadata: metadata.map((e) => (e[0] === 'general.architecture' ? [e[0], e[1], 'gpt2'] : e)), tensors }), 'E_FORMAT', [/general\.architecture is 'gpt2'/]],
    ['no architecture', ({ metadata, tensors }) => ({ metadata: metadata.filter((e) => e[0] !== 'general.architecture'), tensors }), 'E_FORMAT', [/general\.architecture is missing/]],
    ['a missing key', ({ metadata, tensors }) => ({ metadata: metadata.filter((e) => e[0] !== 'llama.block_count'), tensors }), 'E_FORMAT', [/llama\.block_count is missing/]],
    ['a malformed key', ({ metadata, tensors }) => ({ metadata: metadata.map((e) => (e[0] === 'llama.embedding_length' ? [e[0], 'STRING', '64'] : e)), tensors }), 'E_FORMAT', [/llama\.embedding_length is "64"/]],
    ['a missing tensor', ({ metadata, tensors }) => ({ metadata, tensors: tensors.filter((t) => t.name !== 'blk.1.ffn_up.weight') }), 'E_FORMAT', [/tensor "blk\.1\.ffn_up\.weight" is missing/]],
    ['a tensor of the wrong shape', ({ metadata, tensors }) => ({ metadata, tensors: tensors.map((t) => (t.name === 'blk.0.attn_k.weight' ? { ...t, ne: [64, 64] } : t)) }), 'E_FORMAT', [/tensor "blk\.0\.attn_k\.weight" has ne \[64, 64\]; expected \[64, 32\]/]],
    ['an unknown tensor', ({ metadata, tensors }) => ({ metadata, tensors: [...tensors, { name: 'blk.0.attn_q.bias', ne: [64], type: 'F32' }] }), 'E_FORMAT', [/tensor "blk\.0\.attn_q\.bias" is not one a llama model/]],
    ['a Q4_1 matrix', ({ metadata, tensors }) => ({ metadata, tensors: tensors.map((t) => (t.name === 'blk.0.attn_q.weight' ? { ...t, type: 'Q4_1' } : t)) }), 'E_DTYPE', [/tensor "blk\.0\.attn_q\.weight" is Q4_1/, /runs weight matrices in F32, F16, Q8_0, Q4_0/]],
    ['a BF16 embedding', ({ metadata, tensors }) => ({ metadata, tensors: tensors.map((t) => (t.name === 'token_embd.weight' ? { ...t, type: 'BF16' } : t)) }), 'E_DTYPE', [/tensor "token_embd\.weight" is BF16/]],
    ['an F16 norm', ({ metadata, tensors }) => ({ metadata, tensors: tensors.map((t) => (t.name === 'output_norm.weight' ? { ...t, type: 'F16' } : t)) }), 'E_DTYPE', [/tensor "output_norm\.weight" is F16/]],
  ];
  const huge = { ...SHAPES.tiny, dim: 8192, nHeads: 64, nKvHeads: 8, hiddenDim: 8192, vocabSize: 1 << 17, nLayers: 16 };   // ~7.1 GB of Q8_0 (a wasm32 heap holds 4 GiB)
  for (const [label, edit, code, names] of [...cases, ['more than the heap holds', (x) => x, 'E_CAPACITY', [/needs \d+\.\d MiB of wasm memory/]]]) {
    const { file, plan } = label === 'more than the heap holds' ? editedFile(edit, huge, 'Q8_0') : editedFile(edit);
    const { it, state } = headerThenWeights(file, plan.dataOffset);
    const tracker = trackMallocs(M);
    try {
      await expectReject(loadGguf(sdpa, it), code, names);
    } finally {
      tracker.restore();
    }
    assert.not.ok(state.pulledWeights, `${label}: the error came before a weight byte was pulled`);
    assert.is(tracker.live.size, 0, `${label}: nothing left allocated`);
    // inspectGguf says the same in words, without throwing
    const card = await inspectGguf(headerThenWeights(file, plan.dataOffset).it);
    assert.is(card.runnable, false, `${label}: inspectGguf says it does not run`);
    assert.ok(typeof card.problem === 'string' && card.problem.length > 0, `${label}: and says why: ${card.problem}`);
  }
});

test('inspectGguf: the card of a converted file, from its header alone', async () => {
  const file = await llama2cToGguf(CHECKPOINT, TOKENIZER, { type: 'Q8_0', sdpa, name: 'fortunes', chatTemplate: '{{ messages }}' });
  const g = parse(file);
  let pulled = 0;
  const card = await inspectGguf((async function* () { for (let at = 0; at < file.length; at += 4096) { pulled = at + 4096; yield file.slice(at, at + 4096); } })());
  assert.ok(pulled <= g.dataOffset + 2 * 4096 * 2, `only the header was read (${pulled} bytes; data at ${g.dataOffset})`);
  const want = {
    version: 3, architecture: 'llama', name: 'fortunes', contextLength: 512, embeddingLength: 256, blockCount: 5, headCount: 4, headCountKv: 2,
    feedForwardLength: 640, vocabSize: 512, ropeFreqBase: 10000, tokenizerModel: 'llama', chatTemplate: '{{ messages }}', runnable: true, problem: null,
  };
  for (const [k, v] of Object.entries(want)) assert.is(card[k], v, k);
  assert.equal(card.tensorTypes, { Q8_0: 36, F32: 11 });
  assert.is(card.parameters, g.tensors.reduce((n, t) => n + t.values, 0));
  assert.is(card.weightBytes, g.tensors.reduce((n, t) => n + t.bytes, 0));
  assert.ok(card.keys instanceof Map && card.keys.get('tokenizer.ggml.bos_token_id') === 1);
});

// The tokenizer from a converted file, once js/llama/gguf-tokenizer.js (another engineer's) is on main.
const HAVE_GGUF_TOKENIZER = fs.existsSync(path.join(ROOT, 'js/llama/gguf-tokenizer.js'));
test('loadGguf: a converted file with its vocabulary gives a tokenizer that encodes like tokenizer.bin\'s', async () => {
  if (!HAVE_GGUF_TOKENIZER) { console.log('gguf.test.js: js/llama/gguf-tokenizer.js is not on main yet: the tokenizer check is skipped'); return; }
  const { loadTokenizer } = await import('../../js/llama/index.js');
  const bin = loadTokenizer(TOKENIZER, { vocabSize: 512 });
  const file = await llama2cToGguf(CHECKPOINT, TOKENIZER, { type: 'Q4_0', sdpa });
  const { model, tokenizer } = await loadGguf(sdpa, file);
  try {
    assert.ok(tokenizer !== null);
    assert.is(tokenizer.vocabSize, 512);
    assert.is(tokenizer.bos, 1);
    assert.is(tokenizer.eos, 2);
    for (const text of ['You will be happy.', 'A  friend   in need\n\nis a friend indeed!', 'Ünïcödé 🙂 and 1234567890', '']) {
      assert.equal(Array.from(tokenizer.encode(text, { bos: true })), Array.from(bin.encode(text, { bos: true })), JSON.stringify(text));
      assert.is(tokenizer.decode(tokenizer.encode(text, { bos: true })), text);
    }
  } finally {
    model.dispose();
  }
});

test.run();
