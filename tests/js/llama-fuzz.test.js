// llama-fuzz.test.js: property-based fuzzer (fast-check) of the two parsers of
// sdpa-wasm/llama: loadLlama's llama2.c checkpoint reader (js/llama/checkpoint.js,
// model.js) and loadTokenizer's tokenizer.bin reader (js/llama/tokenizer.js).
//
// Checkpoints: small valid checkpoints from random configs (head size even in
// 4..16, n_kv_heads dividing n_heads, 1-2 layers, vocab 3..40, seq_len 1..16,
// hidden 1..32, shared or separate classifier, weights in [-1, 1]), then
// mutated: a header field set to a hostile int32, the dim / head / kv rules
// broken on purpose, truncated or extended, the vocab sign flipped (with or
// without the classifier that goes with it), the file refitted to the length
// its (mutated) header asks for; delivered as a Uint8Array, a subarray at an
// odd byteOffset, an ArrayBuffer, a DataView, a Buffer, shared memory, or not
// bytes at all; with options (maxSeqLen, dtype / keyDtype / valueDtype,
// maxChunk, reserve, unknown names) valid or not. The property:
//   - loadLlama returns a model or throws an SdpaError E_FORMAT / E_ARG / E_DTYPE,
//     never anything else, never a hang;
//   - E_FORMAT only for a file that breaks the format (an independent check of
//     the header rules and the length), E_ARG / E_DTYPE only for a bad argument;
//     a valid file with valid options loads;
//   - a model that loads has config == the header, maxSeqLen and dtypes as asked,
//     and forward([0]) gives vocabSize finite logits;
//   - after every case (the model disposed) the pages and caches in use are
//     as before, and every wasm malloc of a case that threw was freed.
// Tokenizers: valid random tokenizer.bin files (<unk> <s> </s>, optionally the
// 256 <0xXX> byte pieces at ids 3..258, random pieces of bytes, ASCII or UTF-8,
// pieces cut from the texts to encode (so that merges happen), random scores) and mutated ones (truncated, extra bytes, a piece length
// negative / past maxTokenLength / past the end, maxTokenLength 0 / negative /
// huge / too small, NaN scores, vocabSize wrong or invalid). The property:
//   - loadTokenizer returns a Tokenizer or throws SdpaError E_FORMAT (only for a
//     file an independent reader rejects) / E_ARG (only for a bad argument);
//   - a Tokenizer that loads holds exactly the file's pieces and scores;
//     encode(any string) gives ids in range (or E_ARG, never when every <0xXX>
//     piece is there), decode(encode(s)) == s whenever encode succeeds, decode of
//     any valid ids never throws, the streaming decoder gives what decode gives,
//     and invalid ids are E_ARG.
// A third test sweeps files of 0..31 bytes in every byte form through both
// loaders (E_FORMAT, never another error).
// (The malloc check wraps M._malloc / M._free, as llama.test.js does; see
// trackMallocs for why both are called once before they are wrapped.)
//
// Budget: SDPA_FUZZ_RUNS runs per property (default 3000, about 2 s each),
// at most SDPA_FUZZ_TIME_MS (default 8000; 0 = no limit) ms each;
// seed SDPA_FUZZ_SEED (default fixed, so CI is reproducible).
// The long run:   SDPA_FUZZ_RUNS=20000 SDPA_FUZZ_TIME_MS=0 node scripts/run-uvu.mjs tests/js llama-fuzz
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { loadLlama } from '../../js/llama/model.js';
import { loadTokenizer, BOS, EOS } from '../../js/llama/tokenizer.js';
import { rng } from './helpers.js';
import { startWatchdog } from './hostile-helpers.js';

const env = process.env;
const RUNS = Number(env.SDPA_FUZZ_RUNS) || 0;
const CHECKPOINT_RUNS = RUNS || 3000;
const TOKENIZER_RUNS = RUNS || 3000;
const TIME_MS = env.SDPA_FUZZ_TIME_MS === undefined ? 8000 : Number(env.SDPA_FUZZ_TIME_MS);
const SEED = env.SDPA_FUZZ_SEED !== undefined ? Number(env.SDPA_FUZZ_SEED) : 0x11a3a030;
// A case that does not return within SDPA_FUZZ_HANG_MS (default 30000) is a hang: a watchdog
// thread prints it and kills the process (the main thread cannot run while a call blocks it).
const HANG_MS = Number(env.SDPA_FUZZ_HANG_MS) || 30000;

const show = (x) => JSON.stringify(x, (k, v) => {
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  if (v instanceof Uint8Array) return `Uint8Array(${v.length})[${Array.from(v.subarray(0, 64)).join(',')}${v.length > 64 ? ',...' : ''}]`;
  return v;
});


let sdpa, watchdog;
test.before(async () => {
  sdpa = await createSdpa({ threads: 1 });
  watchdog = startWatchdog('llama-fuzz', HANG_MS);
});
test.after(async () => {
  sdpa?.dispose();
  await watchdog?.end();
});

/** fast-check's parameters: the seed, the runs, the time limit. */
function params(runs, seed) {
  const p = { seed, numRuns: runs, verbose: 1 };
  if (TIME_MS > 0) p.interruptAfterTimeLimit = TIME_MS;
  return p;
}

/** fc.check, then a summary line; a failure reports the (shrunk) case and how to reproduce it. */
function check(name, prop, runs, seed, tally) {
  const t0 = Date.now();
  const out = fc.check(prop, params(runs, seed));
  const secs = ((Date.now() - t0) / 1000).toFixed(1);
  const counts = [...tally.entries()].sort().map(([k, n]) => `${k} ${n}`).join(', ');
  console.log(`llama-fuzz ${name}: seed ${seed}, ${out.numRuns} runs in ${secs} s${out.interrupted ? ' (stopped by the time limit)' : ''}: ${counts}`);
  if (out.failed) {
    const err = out.errorInstance ?? out.error;
    assert.unreachable(`llama-fuzz ${name}: failure after ${out.numRuns} runs (seed ${seed}, path ${out.counterexamplePath}, ${out.numShrinks} shrinks):\n` +
      `  ${err instanceof Error ? err.message : String(err)}\n  case: ${show(out.counterexample)}\n` +
      `  reproduce: SDPA_FUZZ_SEED=${SEED} SDPA_FUZZ_RUNS=${runs} SDPA_FUZZ_TIME_MS=0 node scripts/run-uvu.mjs tests/js llama-fuzz`);
  }
  assert.ok(out.numRuns > 0, 'ran');
}
const count = (tally, k) => tally.set(k, (tally.get(k) || 0) + 1);

// ---------------------------------------------------------------------------
// Delivery: the same bytes in every form loadLlama / loadTokenizer take, and non-bytes.

const BYTE_FORMS = ['u8', 'oddOffset', 'arrayBuffer', 'dataView', 'nodeBuffer', 'sharedView', 'sharedBuffer', 'int8'];
const NON_BYTES = ['string', 'null', 'undefined', 'array', 'number', 'object', 'fakeView'];
const formArb = fc.oneof(
  { weight: 10, arbitrary: fc.constant('u8') },
  { weight: 6, arbitrary: fc.constantFrom(...BYTE_FORMS) },
  { weight: 1, arbitrary: fc.constantFrom(...NON_BYTES) },
);
const isBytesForm = (form) => BYTE_FORMS.includes(form);

function deliver(bytes, form, pad) {
  switch (form) {
    case 'u8': return bytes;
    case 'oddOffset': {          // a subarray at an odd byteOffset of a larger buffer, junk either side
      const off = 2 * (pad % 8) + 1;
      const big = new Uint8Array(off + bytes.length + 5).fill(0xA5);
      big.set(bytes, off);
      return big.subarray(off, off + bytes.length);
    }
    case 'arrayBuffer': return bytes.slice().buffer;
    case 'dataView': {
      const off = 2 * (pad % 4) + 1;
      const big = new Uint8Array(off + bytes.length + 3).fill(0x5A);
      big.set(bytes, off);
      return new DataView(big.buffer, off, bytes.length);
    }
    case 'nodeBuffer': return Buffer.from(bytes);      // (small ones sit in Node's pool at some offset)
    case 'sharedView':
    case 'sharedBuffer': {
      const sab = new SharedArrayBuffer(bytes.length);
      new Uint8Array(sab).set(bytes);
      return form === 'sharedBuffer' ? sab : new Uint8Array(sab);
    }
    case 'int8': return new Int8Array(bytes.slice().buffer);
    case 'string': return 'model.bin';
    case 'null': return null;
    case 'undefined': return undefined;
    case 'array': return Array.from(bytes);
    case 'number': return bytes.length;
    case 'object': return { buffer: bytes.buffer, byteOffset: bytes.byteOffset, byteLength: bytes.byteLength, length: bytes.length };
    case 'fakeView': return Object.create(Uint8Array.prototype);
    default: throw new Error(`deliver: unknown form ${form}`);
  }
}

// ---------------------------------------------------------------------------
// Checkpoints

const HEADER = 28;
const FIELD_NAMES = ['dim', 'hidden_dim', 'n_layers', 'n_heads', 'n_kv_heads', 'vocab_size', 'seq_len'];
// The loader's documented bounds (checkpoint.js LIMITS): part of the format's rules here.
const LIMITS = [1 << 16, 1 << 20, 1 << 10, 1 << 12, 1 << 12, 1 << 24, 1 << 20];
const REFIT_MAX_BYTES = 3 << 20;

/**
 * The number of float32 values the tensors of a header add up to, whatever the
 * rules say (null when that is not a whole number or a field is not positive):
 * an independent statement of the layout (checkpoint.js's comment).
 */
function layoutFloats(h) {
  const [dim, hidden, L, nHeads, nKv, vs, seq] = h;
  const vocab = Math.abs(vs);
  if ([dim, hidden, L, nHeads, nKv, vocab, seq].some((v) => !(v > 0))) return null;
  const hs = dim / nHeads, kvDim = nKv * hs;
  const f = vocab * dim                                   // token embedding
    + L * (dim + dim * dim + 2 * kvDim * dim + dim * dim)  // rms_att, wq, wk, wv, wo
    + L * (dim + 3 * hidden * dim)                         // rms_ffn, w1, w2, w3
    + dim + seq * hs                                       // rms_final, freq_cos + freq_sin (seq_len x headSize/2 each)
    + (vs < 0 ? vocab * dim : 0);                          // wcls
  return Number.isSafeInteger(f) ? f : null;
}

/** The float32 count a header asks for, or null when the header breaks a rule of the format. */
function headerFloats(h) {
  const [dim, hidden, L, nHeads, nKv, vs, seq] = h;
  const vals = [dim, hidden, L, nHeads, nKv, Math.abs(vs), seq];
  if (vals.some((v, i) => !(v > 0) || v > LIMITS[i])) return null;
  if (dim % nHeads !== 0) return null;
  const hs = dim / nHeads;
  if (hs < 4 || hs % 2 !== 0) return null;     // rotary rotates pairs
  if (nHeads % nKv !== 0) return null;         // (so also n_kv_heads <= n_heads)
  return layoutFloats(h);
}
const readHeader = (b) => { const dv = new DataView(b.buffer, b.byteOffset, b.byteLength); return FIELD_NAMES.map((_, i) => dv.getInt32(4 * i, true)); };
const writeField = (b, i, v) => new DataView(b.buffer, b.byteOffset, b.byteLength).setInt32(4 * i, v | 0, true);
const checkpointValid = (b) => b.length >= HEADER && (() => { const f = headerFloats(readHeader(b)); return f !== null && b.length === HEADER + 4 * f; })();

/** Every float32 after the header is in [-1, 1] (the generator's weights, or zero padding). */
function weightsInUnitRange(b) {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  for (let i = HEADER; i + 4 <= b.length; i += 4) if (!(Math.abs(dv.getFloat32(i, true)) <= 1)) return false;
  return true;
}

function resized(b, n) {
  const out = new Uint8Array(n);      // zero-filled: zero weights are finite weights
  out.set(b.subarray(0, Math.min(n, b.length)));
  return out;
}

function buildCheckpoint(c) {
  const nHeads = c.nKvHeads * c.group, dim = nHeads * c.headSize;
  const h = [dim, c.hidden, c.nLayers, nHeads, c.nKvHeads, c.shared ? c.vocab : -c.vocab, c.seqLen];
  const floats = headerFloats(h);
  const b = new Uint8Array(HEADER + 4 * floats);
  h.forEach((v, i) => writeField(b, i, v));
  const w = new Float32Array(b.buffer, HEADER, floats);
  const r = rng(c.seed);
  for (let i = 0; i < floats; i++) w[i] = r() * 2 - 1;
  return b;
}

const HOSTILE_INT32 = [0, -1, 1, 2, 3, 4, 5, 7, 8, 16, 2 ** 31 - 1, -(2 ** 31), 2 ** 30, -(2 ** 30), 2 ** 24, 2 ** 24 + 1, 2 ** 16, 2 ** 16 + 1, 2 ** 20 + 1, 1 << 12, (1 << 12) + 1, 46341, 65535];
const int32Arb = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...HOSTILE_INT32) },
  { weight: 4, arbitrary: fc.integer({ min: -4, max: 48 }) },
  { weight: 1, arbitrary: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }) },
);
const checkpointMutation = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('field'), field: fc.integer({ min: 0, max: 6 }), value: int32Arb }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('fieldDelta'), field: fc.integer({ min: 0, max: 6 }), delta: fc.integer({ min: -3, max: 3 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('rule'), rule: fc.constantFrom('dimNotMultiple', 'headOdd', 'headSmall', 'kvNotDividing', 'kvOverHeads', 'kvZero'), k: fc.nat(100) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('truncate'), n: fc.integer({ min: 1, max: 9 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('cut'), at: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cut'), at: fc.nat(40) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('extend'), n: fc.oneof(fc.integer({ min: 1, max: 9 }), fc.integer({ min: 1, max: 64 }).map((x) => 4 * x)) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('flipVocab') }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('toggleClassifier') }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('headerByte'), at: fc.nat(HEADER - 1), value: fc.nat(255) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('refit') }) },
);

/**
 * The file cut or zero-padded to the length its header's layout adds up to (valid
 * or not: a header that breaks a rule then fails on that rule alone), when that is sane.
 */
function refit(b) {
  if (b.length < HEADER) return b;
  const f = layoutFloats(readHeader(b));
  return f !== null && HEADER + 4 * f <= REFIT_MAX_BYTES ? resized(b, HEADER + 4 * f) : b;
}

/** Applies the mutations in order (each a no-op when it cannot apply). */
function mutateCheckpoint(orig, muts) {
  let b = orig.slice();
  for (const m of muts) {
    const h = b.length >= HEADER ? readHeader(b) : null;
    switch (m.kind) {
      case 'field': if (h) writeField(b, m.field, m.value); break;
      case 'fieldDelta': if (h) writeField(b, m.field, h[m.field] + m.delta); break;
      case 'rule': {
        if (!h) break;
        const [dim, , , nHeads, nKv] = h;
        const k = m.k;
        if (m.rule === 'dimNotMultiple') {
          if (nHeads > 1) writeField(b, 0, nHeads * (1 + (k % 16)) + 1 + (k % (nHeads - 1)));
          else writeField(b, 3, dim + 1 + (k % 3));
        } else if (m.rule === 'headOdd') writeField(b, 0, nHeads * (5 + 2 * (k % 6)));
        else if (m.rule === 'headSmall') writeField(b, 0, nHeads * (1 + (k % 3)));    // head size 1, 2, 3
        else if (m.rule === 'kvNotDividing') writeField(b, 4, nHeads >= 3 ? nHeads - 1 : nHeads + 1 + (k % 3));
        else if (m.rule === 'kvOverHeads') writeField(b, 4, 2 * nHeads);
        else writeField(b, 4, k % 2 ? 0 : -nKv);
        break;
      }
      case 'truncate': b = b.subarray(0, Math.max(0, b.length - m.n)).slice(); break;
      case 'cut': b = b.slice(0, m.at % (b.length + 1)); break;
      case 'extend': b = resized(b, b.length + m.n); break;
      case 'flipVocab': if (h) writeField(b, 5, -h[5]); break;
      case 'toggleClassifier': {     // shared <-> separate with the classifier added / dropped: still valid
        if (!h) break;
        const vocab = Math.abs(h[5]), n = 4 * vocab * h[0];
        if (!(vocab > 0 && h[0] > 0) || n > REFIT_MAX_BYTES) break;
        writeField(b, 5, -h[5]);
        if (h[5] > 0) {
          const w = resized(b, b.length + n);
          w.copyWithin(b.length, HEADER, HEADER + Math.min(n, b.length - HEADER));   // the embedding as the classifier
          b = w;
        } else b = b.slice(0, Math.max(HEADER, b.length - n));
        break;
      }
      case 'headerByte': if (b.length > m.at) b[m.at] = m.value; break;
      case 'refit': b = refit(b); break;
      default: throw new Error(`unknown mutation ${m.kind}`);
    }
  }
  return b;
}

const configArb = fc.record({
  headSize: fc.constantFrom(4, 6, 8, 10, 12, 14, 16),
  nKvHeads: fc.integer({ min: 1, max: 3 }),
  group: fc.integer({ min: 1, max: 3 }),        // nHeads = nKvHeads * group
  nLayers: fc.integer({ min: 1, max: 2 }),
  vocab: fc.integer({ min: 3, max: 40 }),
  seqLen: fc.integer({ min: 1, max: 16 }),
  hidden: fc.integer({ min: 1, max: 32 }),
  shared: fc.boolean(),
  seed: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
});

const DTYPES = ['float32', 'float16', 'int8', 'int4'];
/** `arb` in `percent` % of the cases, else undefined (the option left out). */
const sometimes = (arb, percent) => fc.oneof({ weight: 100 - percent, arbitrary: fc.constant(undefined) }, { weight: percent, arbitrary: arb });
const dtypeArb = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...DTYPES) },
  { weight: 1, arbitrary: fc.constantFrom('int3', 'bfloat16', '', 'FLOAT32', 'float64', 'bool', null, 7, true) },
);
const loadOptionsArb = fc.oneof(
  { weight: 6, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.constantFrom(null, {}, 5, 'options', true) },
  {
    weight: 5,
    arbitrary: fc.record({
      // { within: k }: 1 + k % the checkpoint's seq_len (a valid value); else the value itself
      maxSeqLen: sometimes(fc.oneof(
        { weight: 6, arbitrary: fc.record({ within: fc.nat() }) },
        { weight: 1, arbitrary: fc.integer({ min: 1, max: 16 }) },
        { weight: 1, arbitrary: fc.constantFrom(0, -1, 17, 2 ** 31, 1.5, NaN, Infinity, '4', null) },
      ), 50),
      dtype: sometimes(dtypeArb, 50),
      keyDtype: sometimes(dtypeArb, 15),
      valueDtype: sometimes(dtypeArb, 15),
      maxChunk: sometimes(fc.oneof(
        { weight: 4, arbitrary: fc.record({ within: fc.nat() }) },      // 1 + k % maxSeqLen
        { weight: 1, arbitrary: fc.integer({ min: 1, max: 8 }) },
        { weight: 1, arbitrary: fc.constantFrom(0, -2, 0.5, 100, '2') },
      ), 25),
      reserve: sometimes(fc.constantFrom(true, false, 0, 'yes', null), 20),
      unknown: sometimes(fc.constantFrom('maxseqlen', 'threads', 'seqLen', 'constructor', 'toString', 'dtypes'), 6),
    }),
  },
);

/**
 * The options object of a case (an `unknown` name becomes an own property of that name;
 * { within } a valid maxSeqLen / maxChunk for the unmutated checkpoint's seq_len).
 */
function makeLoadOptions(spec, seqLen) {
  if (spec === null || typeof spec !== 'object') return spec;
  const o = {};
  for (const [k, v] of Object.entries(spec)) {
    if (k === 'unknown') { if (v !== undefined) o[v] = 1; } else if (v !== undefined && (v === null || typeof v !== 'object')) o[k] = v;
  }
  if (spec.maxSeqLen !== undefined && typeof spec.maxSeqLen === 'object' && spec.maxSeqLen !== null) o.maxSeqLen = 1 + (spec.maxSeqLen.within % seqLen);
  const rows = Number.isInteger(o.maxSeqLen) && o.maxSeqLen > 0 ? o.maxSeqLen : seqLen;
  if (spec.maxChunk !== undefined && typeof spec.maxChunk === 'object' && spec.maxChunk !== null) o.maxChunk = 1 + (spec.maxChunk.within % rows);
  return o;
}

/** What the options are: 'ok', 'arg' (E_ARG), 'dtype' (E_ARG or E_DTYPE); maxSeqLen checked against seqLen when known. */
function judgeOptions(o, seqLen) {
  if (o === undefined || o === null) return 'ok';
  if (typeof o !== 'object') return 'arg';
  const known = ['maxSeqLen', 'dtype', 'keyDtype', 'valueDtype', 'maxChunk', 'reserve'];
  if (Object.keys(o).some((k) => !known.includes(k))) return 'arg';
  const count = (v, hi) => v === undefined || v === null || (Number.isInteger(v) && v >= 1 && v <= hi);
  const maxSeqLen = o.maxSeqLen ?? seqLen;
  if (seqLen !== null && !count(o.maxSeqLen, seqLen)) return 'arg';
  if (seqLen !== null && !count(o.maxChunk, maxSeqLen)) return 'arg';
  if (!(o.reserve === undefined || o.reserve === null || typeof o.reserve === 'boolean')) return 'arg';
  for (const k of ['dtype', 'keyDtype', 'valueDtype']) {
    const v = o[k];
    if (v !== undefined && v !== null && !DTYPES.includes(v)) return 'dtype';
  }
  return 'ok';
}

/** Which rule an error of loadLlama names (for the summary line). */
function reason(message) {
  const rules = [['at least 28', 'short'], ['expected a positive', 'not positive'], ['expected at most', 'over a bound'],
    ['not a multiple of n_heads', 'dim % n_heads'], ['head size', 'head size'], ['n_kv_heads to divide', 'n_kv_heads'],
    ['truncated', 'truncated'], ['over-long', 'over-long'], ['checkpoint must be', 'not bytes'], ['unknown option', 'unknown option'],
    ['options must be', 'options not an object'], ['maxSeqLen', 'maxSeqLen'], ['maxChunk', 'maxChunk'], ['reserve', 'reserve'],
    ['dtype', 'dtype'], ['Dtype', 'dtype']];
  const r = rules.find(([needle]) => message.includes(needle));
  return r ? r[1] : 'other';
}

/**
 * Wraps M._malloc / M._free: the blocks made since the last reset() that are not freed yet.
 * (Emscripten's glue binds both lazily: the first call of the stub replaces Module._malloc /
 * Module._free with the wasm export, which would drop a wrapper installed before it. So
 * both are called once first.)
 */
function trackMallocs(M) {
  M._free(M._malloc(8));
  const realMalloc = M._malloc, realFree = M._free;
  const live = new Map();
  M._malloc = (n) => { const p = realMalloc(n); if (p) live.set(p >>> 0, n); return p; };
  M._free = (p) => { live.delete(p >>> 0); return realFree(p); };
  return { live, reset() { live.clear(); }, restore() { M._malloc = realMalloc; M._free = realFree; } };
}

test(`checkpoints: loadLlama returns a working model or throws E_FORMAT / E_ARG / E_DTYPE, and leaks nothing (${CHECKPOINT_RUNS} runs)`, () => {
  const { M, core } = sdpa[INTERNALS];
  const tally = new Map();
  const tracker = trackMallocs(M);
  const refitLast = fc.oneof({ weight: 2, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) });
  const prop = fc.property(configArb, fc.array(checkpointMutation, { maxLength: 3 }), refitLast, formArb, fc.nat(15), loadOptionsArb, (c, muts, fit, form, pad, optSpec) => {
    const orig = buildCheckpoint(c);
    const mutated = mutateCheckpoint(orig, muts);
    const bytes = fit ? refit(mutated) : mutated;
    const source = deliver(bytes, form, pad);
    const options = makeLoadOptions(optSpec, c.seqLen);
    const fileOk = isBytesForm(form) && checkpointValid(bytes);
    const header = bytes.length >= HEADER ? readHeader(bytes) : null;
    const seqLen = fileOk ? header[6] : null;
    const opts = judgeOptions(options, seqLen);
    const what = `form ${form}, ${bytes.length} bytes, header ${header ? FIELD_NAMES.map((f, i) => `${f} ${header[i]}`).join(' ') : '(none)'}, options ${show(options)}`;
    const pages0 = sdpa.memory().pagesInUse, caches0 = core.caches.size;
    tracker.reset();
    let model = null, err = null;
    watchdog.start(`loadLlama: ${show({ c, muts, fit, form, pad, optSpec })}`);
    try {
      try { model = loadLlama(sdpa, source, options); } catch (e) { err = e; }
      if (err !== null) {
        if (!(err instanceof SdpaError)) throw new Error(`loadLlama threw a non-SdpaError (${what}): ${err?.stack ?? err}`);
        count(tally, `${err.code} ${reason(err.message)}`);
        assert.ok(['E_FORMAT', 'E_ARG', 'E_DTYPE'].includes(err.code), `code ${err.code} (${what}): ${err.message}`);
        assert.ok(err.message.startsWith('loadLlama: '), `the message names loadLlama: ${err.message}`);
        if (err.code === 'E_FORMAT') assert.ok(isBytesForm(form) && !fileOk, `E_FORMAT for a valid file (${what}): ${err.message}`);
        if (err.code === 'E_ARG') assert.ok(!isBytesForm(form) || opts !== 'ok', `E_ARG for valid arguments (${what}): ${err.message}`);
        if (err.code === 'E_DTYPE') assert.ok(opts === 'dtype', `E_DTYPE without a bad dtype (${what}): ${err.message}`);
        assert.ok(!(fileOk && opts === 'ok'), `a valid file with valid options was rejected (${what}): ${err.code} ${err.message}`);
        assert.is(tracker.live.size, 0, `a rejected load left ${tracker.live.size} wasm blocks allocated (${what})`);
      } else {
        count(tally, 'loaded');
        try {
          assert.ok(fileOk, `an invalid file or non-bytes loaded (${what})`);
          assert.ok(opts === 'ok', `invalid options were accepted (${what})`);
          const [dim, hiddenDim, nLayers, nHeads, nKvHeads, vs, seq] = header;
          assert.equal({ ...model.config }, { dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize: Math.abs(vs), seqLen: seq }, `config (${what})`);
          assert.is(model.maxSeqLen, options?.maxSeqLen ?? seq, 'maxSeqLen');
          assert.is(model.keyDtype, options?.keyDtype ?? options?.dtype ?? 'float32', 'keyDtype');
          assert.is(model.valueDtype, options?.valueDtype ?? options?.dtype ?? 'float32', 'valueDtype');
          assert.is(model.length, 0);
          const logits = model.forward([0]);
          assert.ok(logits instanceof Float32Array, 'forward returns a Float32Array');
          assert.is(logits.length, Math.abs(vs), 'vocabSize logits');
          // (finite whenever every weight is in [-1, 1]: a mutation that shifted the floats may have made any bit pattern)
          const sane = weightsInUnitRange(bytes);
          if (!sane) count(tally, 'loaded with shifted weights');
          if (sane) assert.ok(logits.every(Number.isFinite), `finite logits (${what}): ${Array.from(logits).slice(0, 8)}`);
          assert.is(model.length, 1);
          if (model.maxSeqLen > 1) {
            const two = model.forward([Math.abs(vs) - 1], { logits: 'last' });
            assert.is(two.length, Math.abs(vs));
            if (sane) assert.ok(two.every(Number.isFinite), `finite logits at position 1 (${what})`);
          }
        } finally {
          model.dispose();
        }
        assert.ok(model.disposed, 'disposed');
      }
    } finally {
      watchdog.stop();
    }
    assert.is(sdpa.memory().pagesInUse, pages0, `pages in use after the case (${what})`);
    assert.is(core.caches.size, caches0, `caches after the case (${what})`);
    assert.is(tracker.live.size, 0, `wasm blocks still allocated after the case (${what}): ${[...tracker.live.values()]}`);
  });
  try {
    check('checkpoints', prop, CHECKPOINT_RUNS, SEED, tally);
  } finally {
    tracker.restore();
  }
  // the fuzzer reached both sides
  assert.ok((tally.get('loaded') || 0) > 0 && [...tally.keys()].some((k) => k.startsWith('E_FORMAT ')), `outcomes: ${show([...tally])}`);
});

// ---------------------------------------------------------------------------
// Tokenizers

const enc = (s) => new TextEncoder().encode(s);
const hex2 = (b, upper) => { const h = b.toString(16).padStart(2, '0'); return upper ? h.toUpperCase() : h; };

const pieceArb = fc.record({
  text: fc.oneof(
    { weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 4 }).map(enc) },                   // printable ASCII
    { weight: 2, arbitrary: fc.string({ minLength: 1, maxLength: 3 }).map((s) => enc(' ' + s)) },   // a word start
    { weight: 2, arbitrary: fc.fullUnicodeString({ minLength: 1, maxLength: 2 }).map(enc) },       // UTF-8
    { weight: 1, arbitrary: fc.constantFrom(' ', 'a', 'e', ' t', 'th', 'he', ' the', 'é', '日', '🙂').map(enc) },
    { weight: 2, arbitrary: fc.uint8Array({ minLength: 0, maxLength: 5 }) },                        // any bytes
  ),
  score: fc.oneof(
    { weight: 4, arbitrary: fc.integer({ min: -1000, max: 0 }).map((x) => x / 4) },
    { weight: 1, arbitrary: fc.float({ noNaN: true }) },
  ),
});

const lengthValueArb = fc.oneof(
  fc.constantFrom(-1, -(2 ** 31), 2 ** 31 - 1, 0, 65537),
  fc.constantFrom('maxPlus1', 'pastEnd', 'plus1', 'minus1'),
);
const tokenizerMutation = fc.oneof(
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('cut'), at: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cut'), at: fc.nat(40) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('truncate'), n: fc.integer({ min: 1, max: 9 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('extra'), bytes: fc.uint8Array({ minLength: 1, maxLength: 12 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('pieceLength'), which: fc.nat(), value: lengthValueArb }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('nanScore'), which: fc.nat(), bits: fc.constantFrom(0x7fc00000, 0xffc00000, 0x7f800001, 0xffffffff, 0x7fffffff) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('score'), which: fc.nat(), value: fc.constantFrom(Infinity, -Infinity, -0, 3.4e38, 1e-45) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('maxTokenLength'), value: fc.oneof(fc.constantFrom(0, -1, -(2 ** 31), 2 ** 31 - 1, 65536, 65537, 1), fc.constantFrom('minus1', 'plus1')) }) },
);

const tokenizerArb = fc.record({
  bytePieces: fc.oneof(
    { weight: 6, arbitrary: fc.constant('upper') },           // llama2.c's <0xXX>, at ids 3..258
    { weight: 3, arbitrary: fc.constant('none') },
    { weight: 1, arbitrary: fc.constantFrom('lower', 'partial') },
  ),
  skip: fc.nat(255),
  pieces: fc.array(pieceArb, { maxLength: 40 }),
  // pieces cut from the texts encoded later (so that merges happen), with or without a leading space
  derived: fc.array(fc.record({ text: fc.nat(), start: fc.nat(), len: fc.integer({ min: 1, max: 6 }), space: fc.boolean(), score: pieceArb.map((p) => p.score) }), { maxLength: 24 }),
  spacePiece: fc.boolean(),
  maxTokenLength: fc.constantFrom('exact', 'exact', 'exact', 'bigger'),
  mutations: fc.oneof({ weight: 3, arbitrary: fc.constant([]) }, { weight: 2, arbitrary: fc.array(tokenizerMutation, { minLength: 1, maxLength: 2 }) }),
  vocabSize: fc.oneof(
    { weight: 6, arbitrary: fc.constant('exact') },
    { weight: 3, arbitrary: fc.constantFrom('omit', 'noOptions', 'null', 'undefined') },
    { weight: 2, arbitrary: fc.integer({ min: -3, max: 3 }).filter((d) => d !== 0) },
    { weight: 1, arbitrary: fc.constantFrom({ bad: 0 }, { bad: 2 }, { bad: -1 }, { bad: 3.5 }, { bad: NaN }, { bad: Infinity }, { bad: '10' }, { bad: 2 ** 24 + 1 }, { bad: true }, { bad: 1e9 }) },
  ),
  form: formArb,
  pad: fc.nat(15),
  texts: fc.array(fc.oneof(
    { weight: 4, arbitrary: fc.fullUnicodeString({ maxLength: 24 }) },
    { weight: 2, arbitrary: fc.string({ maxLength: 24 }) },
    { weight: 1, arbitrary: fc.constantFrom('', ' ', '  ', 'the', ' the', 'a\nb', '\u0000', 'naïve café 日本語 🙂', '<s>', '</s>', '<unk>', '<0x41>') },
  ), { minLength: 1, maxLength: 4 }),
  flags: fc.array(fc.record({ bos: fc.boolean(), eos: fc.boolean() }), { minLength: 4, maxLength: 4 }),
  ids: fc.array(fc.nat(), { maxLength: 24 }),
});

/** The tokenizer file of a spec, and where each piece's score and length sit. */
function buildTokenizer(t) {
  const pieces = [enc('<unk>'), enc('<s>'), enc('</s>')].map((text) => ({ text, score: 0 }));
  if (t.bytePieces !== 'none') {
    for (let b = 0; b < 256; b++) {
      if (t.bytePieces === 'partial' && b % 37 === t.skip % 37) continue;
      pieces.push({ text: enc(`<0x${hex2(b, t.bytePieces !== 'lower')}>`), score: 0 });
    }
  }
  pieces.push(...t.pieces);
  if (t.spacePiece) pieces.push({ text: enc(' '), score: -1 });
  for (const d of t.derived) {
    const cps = Array.from(t.texts[d.text % t.texts.length]);
    if (cps.length === 0) continue;
    const from = d.start % cps.length;
    pieces.push({ text: enc((d.space ? ' ' : '') + cps.slice(from, from + d.len).join('')), score: d.score });
  }
  const longest = Math.max(...pieces.map((p) => p.text.length));
  const maxTokenLength = t.maxTokenLength === 'exact' ? longest : longest + 7;
  const b = new Uint8Array(4 + pieces.reduce((s, p) => s + 8 + p.text.length, 0));
  const dv = new DataView(b.buffer);
  dv.setInt32(0, maxTokenLength, true);
  const at = [];
  let off = 4;
  for (const p of pieces) {
    at.push(off);
    dv.setFloat32(off, p.score, true);
    dv.setInt32(off + 4, p.text.length, true);
    b.set(p.text, off + 8);
    off += 8 + p.text.length;
  }
  return { bytes: b, at, count: pieces.length, maxTokenLength };
}

function mutateTokenizer(built, muts) {
  let b = built.bytes.slice();
  const { at, maxTokenLength } = built;
  for (const m of muts) {
    const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const piece = (which) => { const off = at[which % at.length]; return off + 8 <= b.length ? off : -1; };
    switch (m.kind) {
      case 'cut': b = b.slice(0, m.at % (b.length + 1)); break;
      case 'truncate': b = b.slice(0, Math.max(0, b.length - m.n)); break;
      case 'extra': { const x = new Uint8Array(b.length + m.bytes.length); x.set(b); x.set(m.bytes, b.length); b = x; break; }
      case 'pieceLength': {
        const off = piece(m.which);
        if (off < 0) break;
        const len = dv.getInt32(off + 4, true);
        const v = { maxPlus1: maxTokenLength + 1, pastEnd: b.length - off - 8 + 1, plus1: len + 1, minus1: len - 1 }[m.value] ?? m.value;
        dv.setInt32(off + 4, v, true);
        break;
      }
      case 'nanScore': { const off = piece(m.which); if (off >= 0) dv.setUint32(off, m.bits, true); break; }
      case 'score': { const off = piece(m.which); if (off >= 0) dv.setFloat32(off, m.value, true); break; }
      case 'maxTokenLength': {
        if (b.length < 4) break;
        const v = m.value === 'minus1' ? maxTokenLength - 1 : m.value === 'plus1' ? maxTokenLength + 1 : m.value;
        dv.setInt32(0, v, true);
        break;
      }
      default: throw new Error(`unknown mutation ${m.kind}`);
    }
  }
  return b;
}

/**
 * An independent reader of tokenizer.bin (the format as tokenizer.js's header
 * states it, with its documented bound maxTokenLength <= 65536): { pieces,
 * scores }, or null for a file that breaks the format.
 */
function readTokenizerRef(b, vocabSize) {
  if (b.length < 4) return null;
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const maxLen = dv.getInt32(0, true);
  if (maxLen < 1 || maxLen > 65536) return null;
  const pieces = [], scores = [];
  let off = 4;
  while (vocabSize === null ? off < b.length : pieces.length < vocabSize) {
    if (off + 8 > b.length) return null;
    const score = dv.getFloat32(off, true), len = dv.getInt32(off + 4, true);
    if (Number.isNaN(score) || len < 0 || len > maxLen || off + 8 + len > b.length) return null;
    pieces.push(b.slice(off + 8, off + 8 + len));
    scores.push(score);
    off += 8 + len;
  }
  if (off !== b.length || pieces.length < 3) return null;
  return { pieces, scores };
}

function tokenizerOptions(t, count) {
  const v = t.vocabSize;
  if (v === 'exact') return { opts: { vocabSize: count }, vocab: count, ok: true };
  if (v === 'omit') return { opts: {}, vocab: null, ok: true };
  if (v === 'noOptions') return { opts: undefined, vocab: null, ok: true, none: true };
  if (v === 'null') return { opts: { vocabSize: null }, vocab: null, ok: true };
  if (v === 'undefined') return { opts: { vocabSize: undefined }, vocab: null, ok: true };
  if (typeof v === 'number') {
    const n = count + v;
    return { opts: { vocabSize: n }, vocab: n, ok: n >= 3 };
  }
  return { opts: { vocabSize: v.bad }, vocab: null, ok: false };
}

/** Which rule an error of loadTokenizer names (for the summary line). */
function tokenizerReason(message) {
  const rules = [['at least 4', 'short'], ['maxTokenLength is', 'maxTokenLength'], ['has length', 'piece length'], ['NaN score', 'NaN score'],
    ['runs past the end', 'piece past the end'], ['starts at byte', 'too few pieces'], ['bytes follow', 'too many bytes'],
    ['at least 3', 'under 3 pieces'], ['must be a Uint8Array', 'not bytes'], ['vocabSize', 'vocabSize']];
  const r = rules.find(([needle]) => message.includes(needle));
  return r ? r[1] : 'other';
}

const bytesEqual = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

test(`tokenizers: loadTokenizer returns a Tokenizer or throws E_FORMAT / E_ARG; encode / decode round-trip (${TOKENIZER_RUNS} runs)`, () => {
  const tally = new Map();
  const prop = fc.property(tokenizerArb, (t) => {
    const built = buildTokenizer(t);
    const bytes = mutateTokenizer(built, t.mutations);
    const source = deliver(bytes, t.form, t.pad);
    const o = tokenizerOptions(t, built.count);
    const argsOk = isBytesForm(t.form) && o.ok;
    const ref = argsOk ? readTokenizerRef(bytes, o.vocab) : null;
    const what = `form ${t.form}, ${bytes.length} bytes, options ${show(o.opts)}`;
    let tok = null, err = null;
    watchdog.start(`loadTokenizer: ${show(t)}`);
    try {
      try { tok = o.none ? loadTokenizer(source) : loadTokenizer(source, o.opts); } catch (e) { err = e; }
      if (err !== null) {
        if (!(err instanceof SdpaError)) throw new Error(`loadTokenizer threw a non-SdpaError (${what}): ${err?.stack ?? err}`);
        count(tally, `${err.code} ${tokenizerReason(err.message)}`);
        assert.ok(err.code === 'E_FORMAT' || err.code === 'E_ARG', `code ${err.code} (${what}): ${err.message}`);
        assert.ok(err.message.startsWith('loadTokenizer: '), `the message names loadTokenizer: ${err.message}`);
        if (err.code === 'E_ARG') assert.ok(!argsOk, `E_ARG for valid arguments (${what}): ${err.message}`);
        else assert.ok(argsOk, `E_FORMAT for a bad argument (${what}): ${err.message}`);
        assert.ok(ref === null, `a valid file was rejected (${what}): ${err.code} ${err.message}`);
        return;
      }
      count(tally, 'loaded');
      assert.ok(argsOk, `a bad argument was accepted (${what})`);
      assert.ok(ref !== null, `a file that breaks the format loaded (${what})`);
      // exactly the file's pieces and scores
      assert.is(tok.vocabSize, ref.pieces.length, 'vocabSize');
      for (let i = 0; i < ref.pieces.length; i++) {
        assert.ok(bytesEqual(tok.piece(i), ref.pieces[i]), `piece ${i}`);
        assert.ok(Object.is(tok.score(i), ref.scores[i]), `score ${i}: ${tok.score(i)} vs ${ref.scores[i]}`);
      }
      assert.is(tok.bos, BOS);
      assert.is(tok.eos, EOS);
      const V = tok.vocabSize;
      let allBytes = V >= 259;
      for (let b = 0; allBytes && b < 256; b++) allBytes = bytesEqual(tok.piece(3 + b), enc(`<0x${hex2(b, true)}>`));
      if (allBytes) count(tally, 'all <0xXX>');
      const streamed = (ids) => { const d = tok.decoder(); let s = ''; for (const id of ids) s += d.push(id); return s + d.end(); };
      // encode / decode of any text
      t.texts.forEach((text, k) => {
        const { bos, eos } = t.flags[k];
        let ids = null;
        try { ids = tok.encode(text, { bos, eos }); } catch (e) {
          if (!(e instanceof SdpaError)) throw new Error(`encode(${show(text)}) threw a non-SdpaError: ${e?.stack ?? e}`);
          assert.is(e.code, 'E_ARG', `encode: ${e.message}`);
          assert.ok(!allBytes, `encode(${show(text)}) failed although every <0xXX> piece is at 3..258: ${e.message}`);
          count(tally, 'encode E_ARG');
          return;
        }
        count(tally, 'encoded');
        assert.ok(ids instanceof Int32Array, 'encode returns an Int32Array');
        assert.ok(ids.every((id) => id >= 0 && id < V), `ids in range: ${Array.from(ids)}`);
        if (bos) assert.is(ids[0], BOS, 'BOS first');
        if (eos) assert.is(ids[ids.length - 1], EOS, 'EOS last');
        if (text === '') assert.is(ids.length, (bos ? 1 : 0) + (eos ? 1 : 0), 'nothing for empty text');
        let back;
        try { back = tok.decode(ids); } catch (e) { throw new Error(`decode(encode(${show(text)})) threw: ${e?.stack ?? e}`); }
        if (text !== '') count(tally, 'round trips');
        assert.is(back, text, `decode(encode(text)) (bos ${bos}, eos ${eos}; ids ${Array.from(ids)}; pieces ${show(Array.from(ids, (id) => new TextDecoder().decode(tok.piece(id))))})`);
        assert.is(streamed(ids), back, 'the streaming decoder gives what decode gives');
      });
      // decode of any valid ids
      const ids = t.ids.map((x) => x % V);
      let s;
      try { s = tok.decode(ids); } catch (e) { throw new Error(`decode(${show(ids)}) threw: ${e?.stack ?? e}`); }
      assert.type(s, 'string');
      assert.is(streamed(ids), s, `the streaming decoder gives what decode gives (ids ${ids})`);
      assert.is(tok.decode(Int32Array.from(ids)), s, 'an Int32Array decodes the same');
      // invalid ids: E_ARG
      for (const bad of [V, -1, 1.5, NaN, '1', null]) {
        let e = null;
        try { tok.decode([...ids.slice(0, 2), bad]); } catch (x) { e = x; }
        assert.ok(e instanceof SdpaError && e.code === 'E_ARG', `decode of id ${String(bad)}: ${e?.code ?? 'no error'}`);
      }
    } finally {
      watchdog.stop();
    }
  });
  check('tokenizers', prop, TOKENIZER_RUNS, SEED + 1, tally);
  assert.ok((tally.get('loaded') || 0) > 0 && [...tally.keys()].some((k) => k.startsWith('E_FORMAT ')), `outcomes: ${show([...tally])}`);
});

// Every byte form of the shortest files, both loaders: E_FORMAT, never another error
// (a fixed sweep of the fuzzers' corner: empty buffers and cut headers in every form).
test('short files in every byte form: E_FORMAT from both loaders', () => {
  const { M } = sdpa[INTERNALS];
  const tracker = trackMallocs(M);
  const failures = [];
  try {
    for (const form of BYTE_FORMS) {
      for (let n = 0; n <= 31; n++) {
        const bytes = new Uint8Array(n);
        for (let i = 0; i < n; i++) bytes[i] = i < 28 ? [8, 0, 0, 0][i % 4] : 0;   // a header of 8s, cut at n
        for (const [name, call] of [['loadLlama', (src) => loadLlama(sdpa, src)], ['loadTokenizer', (src) => loadTokenizer(src)]]) {
          let err = null;
          try { call(deliver(bytes, form, n)); } catch (e) { err = e; }
          const got = err === null ? 'no error' : err instanceof SdpaError ? err.code : `${err?.constructor?.name}: ${err?.message}`;
          const want = name === 'loadTokenizer' && n >= 4 ? null : 'E_FORMAT';   // (a tokenizer file of >= 4 bytes may hold pieces)
          if (want !== null ? got !== want : !(got === 'E_FORMAT' || got === 'no error')) failures.push(`${name}(${form} of ${n} bytes): ${got}`);
        }
      }
    }
  } finally {
    tracker.restore();
  }
  assert.is(tracker.live.size, 0, 'nothing left allocated');
  assert.ok(failures.length === 0, `${failures.length} failures:\n  ${failures.slice(0, 12).join('\n  ')}`);
});

test.run();
