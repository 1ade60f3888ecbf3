// tokenizer.js: llama2.c's tokenizer.bin (a vocab of byte pieces with scores),
// with run.c's encode and decode.
//
// File: int32 maxTokenLength, then per piece: float32 score, int32 byte length,
// the bytes (little-endian). The vocab size is not in the file: it is the
// checkpoint's (run.c reads exactly that many pieces); without one, pieces are
// read to the end of the file.
//
// Encode (run.c): a dummy-prefix " " before non-empty text (when " " is a piece); each UTF-8 code
// point is its piece, or its bytes as <0xXX> pieces (id byte + 3); then the
// adjacent pair whose concatenation is a piece of the highest score is merged,
// the leftmost of equals, until no pair is a piece. Here a heap of candidate
// pairs does that in O(n log n) (run.c rescans: O(n^2)) with the same merges
// in the same order. Decode: a piece after BOS loses its leading space; a
// <0xXX> piece is that byte; BOS and EOS print nothing.

import { SdpaError } from '../errors.js';
import { parseGguf, GgufTruncated, GGUF_MAGIC } from './gguf.js';
import { tokenizerFromGguf } from './gguf-tokenizer.js';

export const UNK = 0, BOS = 1, EOS = 2;
const BYTE_PIECE = /^<0x([0-9A-Fa-f]{2})>$/;
/** The byte a <0xXX> piece (as a latin1 string) stands for, or -1. */
const byteValue = (key) => { const m = BYTE_PIECE.exec(key); return m ? parseInt(m[1], 16) : -1; };
const SINGLE_BYTES = Array.from({ length: 256 }, (_, b) => Uint8Array.of(b));
const MAX_PIECE_BYTES = 1 << 16;

const latin1 = (bytes) => {         // bytes as a string of char codes 0..255 (a Map key)
  let s = '';
  for (let i = 0; i < bytes.length; i += 8192) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
  return s;
};

function bad(message) {
  return new SdpaError('E_FORMAT', `loadTokenizer: ${message}`);
}

/**
 * Reads a tokenizer.bin, or a GGUF file's tokenizer (bytes starting "GGUF": a
 * vocab-only file or a whole model's; gguf-tokenizer.js). `vocabSize`: the
 * checkpoint's (the file must hold exactly that many pieces); omitted, every
 * piece to the end of the file.
 */
export function loadTokenizer(source, options = {}) {
  const bytes = toBytes(source, 'loadTokenizer', 'tokenizer');
  const { vocabSize = null } = options ?? {};
  if (vocabSize !== null && !(Number.isInteger(vocabSize) && vocabSize >= 3 && vocabSize <= 1 << 24)) {
    throw new SdpaError('E_ARG', `loadTokenizer: options.vocabSize must be an integer in 3 .. ${1 << 24}, got ${String(vocabSize)}`);
  }
  if (bytes.byteLength >= 4 && new DataView(bytes.buffer, bytes.byteOffset, 4).getUint32(0, true) === GGUF_MAGIC) {
    let header;
    try {
      header = parseGguf(bytes, 'loadTokenizer', null);    // (only the keys: a model file's header alone is enough)
    } catch (e) {
      if (e instanceof GgufTruncated) throw bad(`GGUF: ${e.message}; the file ends at byte ${bytes.byteLength}`);
      throw e;
    }
    const tokenizer = tokenizerFromGguf(header.metadata, 'loadTokenizer');
    if (vocabSize !== null && tokenizer.vocabSize !== vocabSize) {
      throw bad(`tokenizer.ggml.tokens has ${tokenizer.vocabSize} tokens; expected options.vocabSize ${vocabSize}`);
    }
    return tokenizer;
  }
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.byteLength < 4) throw bad(`the file has ${bytes.byteLength} bytes; expected at least 4 (int32 maxTokenLength)`);
  const maxTokenLength = dv.getInt32(0, true);
  if (maxTokenLength < 1 || maxTokenLength > MAX_PIECE_BYTES) {
    throw bad(`maxTokenLength is ${maxTokenLength}; expected 1 .. ${MAX_PIECE_BYTES}`);
  }
  const pieces = [], scores = [];
  let off = 4, longest = 0;
  while (vocabSize === null ? off < bytes.byteLength : pieces.length < vocabSize) {
    const i = pieces.length;
    if (off + 8 > bytes.byteLength) {
      throw bad(`piece ${i} starts at byte ${off} but the file ends at ${bytes.byteLength}; expected ${vocabSize ?? 'more'} pieces`);
    }
    const score = dv.getFloat32(off, true), len = dv.getInt32(off + 4, true);
    if (len < 0 || len > maxTokenLength) throw bad(`piece ${i} has length ${len}; expected 0 .. maxTokenLength ${maxTokenLength}`);
    if (Number.isNaN(score)) throw bad(`piece ${i} has a NaN score`);
    if (off + 8 + len > bytes.byteLength) throw bad(`piece ${i} (${len} bytes at byte ${off + 8}) runs past the end of the file (${bytes.byteLength} bytes)`);
    pieces.push(bytes.slice(off + 8, off + 8 + len));
    scores.push(score);
    longest = Math.max(longest, len);
    off += 8 + len;
  }
  if (off !== bytes.byteLength) throw bad(`${bytes.byteLength - off} bytes follow the ${pieces.length} pieces; expected the file to end at byte ${off}`);
  if (pieces.length < 3) throw bad(`the file has ${pieces.length} pieces; expected at least 3 (<unk>, <s>, </s>)`);
  return new Tokenizer(pieces, Float32Array.from(scores));
}

/** The bytes of a Uint8Array / ArrayBuffer / ArrayBufferView, copied (later changes by the caller do not reach us), or a view of them (copy false: for a caller that reads them all before it returns). */
export function toBytes(source, fn, what, copy = true) {
  if (source instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && source instanceof SharedArrayBuffer)) {
    const view = new Uint8Array(source);
    return copy ? view.slice() : view;           // (SharedArrayBuffer.prototype.slice(0) of 0 bytes throws on Node 20)
  }
  if (ArrayBuffer.isView(source)) {
    const view = new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
    return copy ? view.slice() : view;
  }
  throw new SdpaError('E_ARG', `${fn}: ${what} must be a Uint8Array or an ArrayBuffer, got ${source === null ? 'null' : typeof source}`);
}

export class Tokenizer {
  #pieces;       // Uint8Array per id
  #scores;       // Float32Array
  #keys;         // each piece as a latin1 string (merging concatenates these)
  #ids;          // Map: piece as a latin1 string -> its first id (run.c's bsearch finds one of equals; ours: the first)
  #byteId;       // Int32Array(256): the id of <0xXX>, or -1
  #byteOf;       // Int16Array(vocab): the byte a <0xXX> piece stands for, or -1 (decode)

  constructor(pieces, scores) {
    this.#pieces = pieces;
    this.#scores = scores;
    this.#keys = pieces.map(latin1);
    this.#ids = new Map();
    this.#keys.forEach((k, i) => { if (!this.#ids.has(k)) this.#ids.set(k, i); });
    this.#byteOf = Int16Array.from(this.#keys, byteValue);
    this.#byteId = new Int32Array(256).fill(-1);
    for (let b = 0; b < 256; b++) {
      const id = this.#ids.get(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
      if (id !== undefined) this.#byteId[b] = id;
    }
    Object.freeze(this);
  }

  get vocabSize() { return this.#pieces.length; }
  get bos() { return BOS; }
  get eos() { return EOS; }

  /** The bytes of piece `id` (a copy). */
  piece(id) {
    this.#checkId(id, 'Tokenizer.piece', 'id');
    return this.#pieces[id].slice();
  }

  /** The score of piece `id`. */
  score(id) {
    this.#checkId(id, 'Tokenizer.score', 'id');
    return this.#scores[id];
  }

  #checkId(id, fn, name) {
    if (!Number.isInteger(id) || id < 0 || id >= this.#pieces.length) {
      throw new SdpaError('E_ARG', `${fn}: ${name} must be an integer in 0 .. ${this.#pieces.length - 1}, got ${String(id)}`);
    }
  }

  /** run.c's encode: Int32Array of ids; `bos` (default true) and `eos` (default false) add <s> / </s>. */
  encode(text, options = {}) {
    if (typeof text !== 'string') throw new SdpaError('E_ARG', `Tokenizer.encode: text must be a string, got ${text === null ? 'null' : typeof text}`);
    const { bos = true, eos = false } = options ?? {};
    if (typeof bos !== 'boolean' || typeof eos !== 'boolean') {
      throw new SdpaError('E_ARG', `Tokenizer.encode: options.bos and options.eos must be booleans, got ${typeof bos} and ${typeof eos}`);
    }
    const ids = [];
    if (text.length > 0) {
      // the dummy prefix, when the vocab has a " " piece (run.c assumes one; without it, a
      // <0x20> prefix would come back from decode, which strips only a piece's own space)
      const bytes = new TextEncoder().encode(this.#ids.has(' ') ? ' ' + text : text);   // lone surrogates become U+FFFD
      for (let i = 0; i < bytes.length;) {
        const b = bytes[i];
        const n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;   // TextEncoder's output is valid UTF-8
        const id = this.#ids.get(latin1(bytes.subarray(i, i + n)));
        if (id !== undefined) ids.push(id);
        else {
          for (let j = i; j < i + n; j++) {
            if (this.#byteId[bytes[j]] < 0) throw new SdpaError('E_ARG', `Tokenizer.encode: the text has byte 0x${bytes[j].toString(16)}, which is neither in a piece nor a <0xXX> piece of this vocab`);
            ids.push(this.#byteId[bytes[j]]);
          }
        }
        i += n;
      }
    }
    const merged = this.#merge(ids);
    const out = new Int32Array(merged.length + (bos ? 1 : 0) + (eos ? 1 : 0));
    if (bos) out[0] = BOS;
    out.set(merged, bos ? 1 : 0);
    if (eos) out[out.length - 1] = EOS;
    return out;
  }

  /** run.c's merge loop with a heap: pop the best pair (score desc, then leftmost); stale entries are skipped. */
  #merge(ids) {
    const n = ids.length;
    if (n < 2) return ids;
    const tok = Int32Array.from(ids);
    const next = new Int32Array(n), prev = new Int32Array(n);
    for (let i = 0; i < n; i++) { next[i] = i + 1 < n ? i + 1 : -1; prev[i] = i - 1; }
    const alive = new Uint8Array(n).fill(1);
    // heap entries: [score, left index, left token, right token, merged id]
    const heap = [];
    const better = (a, b) => a[0] > b[0] || (a[0] === b[0] && a[1] < b[1]);
    const push = (e) => {
      heap.push(e);
      for (let i = heap.length - 1; i > 0;) {
        const p = (i - 1) >> 1;
        if (!better(heap[i], heap[p])) break;
        [heap[i], heap[p]] = [heap[p], heap[i]];
        i = p;
      }
    };
    const pop = () => {
      const top = heap[0], last = heap.pop();
      if (heap.length > 0) {
        heap[0] = last;
        for (let i = 0; ;) {
          const l = 2 * i + 1, r = l + 1;
          let m = i;
          if (l < heap.length && better(heap[l], heap[m])) m = l;
          if (r < heap.length && better(heap[r], heap[m])) m = r;
          if (m === i) break;
          [heap[i], heap[m]] = [heap[m], heap[i]];
          i = m;
        }
      }
      return top;
    };
    const candidate = (i) => {
      const j = next[i];
      if (j < 0) return;
      const id = this.#ids.get(this.#keys[tok[i]] + this.#keys[tok[j]]);
      // (run.c's best score starts at -1e10: a piece scoring no more is never merged)
      if (id !== undefined && this.#scores[id] > -1e10) push([this.#scores[id], i, tok[i], tok[j], id]);
    };
    for (let i = 0; i < n - 1; i++) candidate(i);
    while (heap.length > 0) {
      const [, i, a, b, id] = pop();
      const j = next[i];
      if (!alive[i] || j < 0 || tok[i] !== a || tok[j] !== b) continue;   // stale
      tok[i] = id;
      alive[j] = 0;
      next[i] = next[j];
      if (next[j] >= 0) prev[next[j]] = i;
      if (prev[i] >= 0) candidate(prev[i]);
      candidate(i);
    }
    const out = [];
    for (let i = 0; i >= 0; i = next[i]) out.push(tok[i]);
    return out;
  }

  /** The text of `ids` (run.c's decode, token by token); invalid UTF-8 becomes U+FFFD. */
  decode(ids) {
    const d = this.decoder();
    let s = '';
    for (const id of ids) s += d.push(id);
    return s + d.end();
  }

  /**
   * A streaming decoder: push(id) returns the text that is complete so far (a
   * character split over byte pieces waits for its last byte); end() the rest.
   * `prev`: the token before the first pushed one (BOS by default, so that a
   * first piece loses its dummy-prefix space).
   */
  decoder(prev = BOS) {
    const pieces = this.#pieces, nPieces = pieces.length, byteOf = this.#byteOf;
    const utf8 = new TextDecoder('utf-8', { fatal: false });
    let last = prev;
    return {
      push: (id) => {
        if (!Number.isInteger(id) || id < 0 || id >= nPieces) {
          throw new SdpaError('E_ARG', `Tokenizer.decode: id must be an integer in 0 .. ${nPieces - 1}, got ${String(id)}`);
        }
        const before = last;
        last = id;
        if (id === BOS || id === EOS) return '';
        let p = pieces[id], b = byteOf[id];
        if (before === BOS && p[0] === 0x20) {       // (run.c reads a byte piece after the strip)
          p = p.subarray(1);
          b = byteValue(latin1(p));
        }
        return utf8.decode(b >= 0 ? SINGLE_BYTES[b] : p, { stream: true });
      },
      end: () => utf8.decode(),
    };
  }

  get [Symbol.toStringTag]() { return 'Tokenizer'; }
}
