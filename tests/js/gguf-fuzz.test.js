// gguf-fuzz.test.js: property-based fuzzer (fast-check) of the GGUF reader:
// parseGguf (js/llama/gguf.js) and loadGguf (js/llama/gguf-model.js), as
// llama-fuzz.test.js fuzzes the llama2.c checkpoint reader.
//
// Files: small valid llama GGUFs from random configs (head size 8 or 16, 2 or 4
// query heads, n_kv_heads dividing them, 1-2 layers, hidden 32 or 64, vocab
// 20..70, tied or a separate output.weight, each matrix F32 / F16 / Q8_0 / Q4_0
// where its rows allow, norms F32, version 2 or 3, alignment 1 / 8 / 32 / 64,
// junk keys of every value type), built with gguf-layout.mjs's planGguf; then
// broken on purpose before writing (a key dropped, retyped or given a wrong
// value, the architecture changed, a tensor dropped / renamed / duplicated /
// reshaped / retyped (Q4_1, BF16, Q4_K, I8 ...), a tensor offset moved) and / or
// mutated as bytes after (a byte set, a hostile uint32 / uint64 written at a
// header position, bytes spliced in or out of the header, the file cut or
// extended, weight bytes overwritten). The property:
//   - parseGguf(bytes, fn, length) returns or throws SdpaError E_FORMAT, nothing else;
//   - loadGguf(sdpa, bytes) resolves or rejects with SdpaError E_FORMAT / E_DTYPE /
//     E_CAPACITY, nothing else, never a hang; E_FORMAT whenever parseGguf rejects
//     the file; a valid file whose weight bytes alone were changed loads;
//   - a model that loads answers forward([0]) with vocab logits; disposed, every
//     wasm malloc of the case is freed and no KV page is held (also after an error);
//   - the same bytes as a stream of random chunks (whenever the header parses and
//     claims under 16 MB of tensors) load exactly when the bytes load, with the same
//     fingerprint; fail with E_DTYPE when they were E_DTYPE, else E_FORMAT / E_DTYPE
//     (a file cut inside its tensors is found only once they are allocated: the
//     path that frees them); nothing leaked either way.
// A watchdog kills the process when a synchronous call blocks (SDPA_FUZZ_HANG_MS),
// and an asynchronous load that does not settle within it fails the property.
//
// Budget: SDPA_FUZZ_RUNS runs (default 1500), at most SDPA_FUZZ_TIME_MS (default
// 8000; 0 = no limit) ms; seed SDPA_FUZZ_SEED (default fixed).
// The long run:   SDPA_FUZZ_RUNS=20000 SDPA_FUZZ_TIME_MS=0 node scripts/run-uvu.mjs tests/js gguf-fuzz
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { loadGguf } from '../../js/llama/index.js';
import { parseGguf } from '../../js/llama/gguf.js';
import { planGguf, fillGguf } from '../../scripts/lib/gguf-layout.mjs';
import { halfBits } from '../../scripts/random-gguf.mjs';
import { rng } from './helpers.js';
import { startWatchdog } from './hostile-helpers.js';

const env = process.env;
const RUNS = Number(env.SDPA_FUZZ_RUNS) || 1500;
const TIME_MS = env.SDPA_FUZZ_TIME_MS === undefined ? 8000 : Number(env.SDPA_FUZZ_TIME_MS);
const SEED = env.SDPA_FUZZ_SEED !== undefined ? Number(env.SDPA_FUZZ_SEED) : 0x66a0f;
const HANG_MS = Number(env.SDPA_FUZZ_HANG_MS) || 30000;
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// the tokenizer keys go in once the tokenizer module (another engineer's) is on main: loadGguf imports it for them
const WITH_TOKENIZER = fs.existsSync(path.join(ROOT, 'js/llama/gguf-tokenizer.js'));

let sdpa, watchdog;
test.before(async () => {
  sdpa = await createSdpa({ threads: 1 });
  watchdog = startWatchdog('gguf-fuzz', HANG_MS);
});
test.after(async () => {
  sdpa?.dispose();
  await watchdog?.end();
});

const count = (tally, k) => tally.set(k, (tally.get(k) || 0) + 1);
const show = (x) => JSON.stringify(x, (k, v) => (typeof v === 'bigint' ? `${v}n` : v));

// ---------------------------------------------------------------------------
// Valid files

const configArb = fc.record({
  headSize: fc.constantFrom(8, 16), nHeads: fc.constantFrom(2, 4), kvDiv: fc.constantFrom(1, 2), nLayers: fc.integer({ min: 1, max: 2 }),
  hidden: fc.constantFrom(32, 64), vocab: fc.integer({ min: 20, max: 70 }), tied: fc.boolean(),
  types: fc.array(fc.constantFrom('F32', 'F16', 'Q8_0', 'Q4_0'), { minLength: 20, maxLength: 20 }),
  version: fc.constantFrom(2, 3, 3), alignment: fc.constantFrom(32, 32, 1, 8, 64), junk: fc.nat(5), seed: fc.nat(),
});

const JUNK = [
  ['junk.u8', 'UINT8', 7], ['junk.i64', 'INT64', -3], ['junk.f64', 'FLOAT64', 0.25], ['junk.str', 'STRING', 'ü▁🙂'],
  ['junk.arr', ['ARRAY', 'STRING'], ['a', 'b']], ['junk.bools', ['ARRAY', 'BOOL'], [true, false, true]], ['junk.f32s', ['ARRAY', 'FLOAT32'], Float32Array.of(1, 2)],
];

/** The metadata and tensors of a config: [key, type, value] entries and [{ name, ne, type }]. */
function describeFile(c) {
  const dim = c.nHeads * c.headSize, nKv = c.nHeads / c.kvDiv, kvDim = nKv * c.headSize;
  let k = 0;
  const typeFor = (cols) => { const t = c.types[k++ % c.types.length]; return t.startsWith('Q') && cols % 32 !== 0 ? 'F32' : t; };
  const tensors = [];
  const matrix = (name, rows, cols) => tensors.push({ name, ne: [cols, rows], type: typeFor(cols) });
  const norm = (name) => tensors.push({ name, ne: [dim], type: 'F32' });
  matrix('token_embd.weight', c.vocab, dim);
  for (let l = 0; l < c.nLayers; l++) {
    norm(`blk.${l}.attn_norm.weight`);
    matrix(`blk.${l}.attn_q.weight`, dim, dim); matrix(`blk.${l}.attn_k.weight`, kvDim, dim);
    matrix(`blk.${l}.attn_v.weight`, kvDim, dim); matrix(`blk.${l}.attn_output.weight`, dim, dim);
    norm(`blk.${l}.ffn_norm.weight`);
    matrix(`blk.${l}.ffn_gate.weight`, c.hidden, dim); matrix(`blk.${l}.ffn_down.weight`, dim, c.hidden); matrix(`blk.${l}.ffn_up.weight`, c.hidden, dim);
  }
  norm('output_norm.weight');
  if (!c.tied) matrix('output.weight', c.vocab, dim);
  const metadata = [
    ['general.architecture', 'STRING', 'llama'], ['general.name', 'STRING', 'fuzz'],
    ['llama.context_length', 'UINT32', 64], ['llama.embedding_length', 'UINT32', dim], ['llama.block_count', 'UINT32', c.nLayers],
    ['llama.feed_forward_length', 'UINT32', c.hidden], ['llama.attention.head_count', 'UINT32', c.nHeads],
    ['llama.attention.head_count_kv', 'UINT32', nKv], ['llama.rope.dimension_count', 'UINT32', c.headSize],
    ['llama.rope.freq_base', 'FLOAT32', 10000], ['llama.attention.layer_norm_rms_epsilon', 'FLOAT32', 1e-5],
    ...JUNK.slice(0, c.junk),
  ];
  if (WITH_TOKENIZER) {
    const tokens = ['<unk>', '<s>', '</s>', ...Array.from({ length: c.vocab - 3 }, (_, i) => `▁t${i}`)];
    metadata.push(['tokenizer.ggml.model', 'STRING', 'llama'], ['tokenizer.ggml.tokens', ['ARRAY', 'STRING'], tokens],
      ['tokenizer.ggml.scores', ['ARRAY', 'FLOAT32'], new Float32Array(c.vocab)],
      ['tokenizer.ggml.token_type', ['ARRAY', 'INT32'], Int32Array.from(tokens, (_, i) => (i === 0 ? 2 : i < 3 ? 3 : 1))],
      ['tokenizer.ggml.bos_token_id', 'UINT32', 1], ['tokenizer.ggml.eos_token_id', 'UINT32', 2]);
  }
  return { metadata, tensors };
}

/** Valid bytes of a tensor: values in [-1, 1] (F32 / F16), blocks with a finite float16 scale. */
function tensorBytes(t, r) {
  const n = t.ne.reduce((a, b) => a * b, 1);
  const b = new Uint8Array({ F32: 4 * n, F16: 2 * n, Q8_0: (n / 32) * 34, Q4_0: (n / 32) * 18 }[t.type] ?? 0);
  const dv = new DataView(b.buffer);
  if (t.type === 'F32') for (let i = 0; i < n; i++) dv.setFloat32(4 * i, r() * 2 - 1, true);
  else if (t.type === 'F16') for (let i = 0; i < n; i++) dv.setUint16(2 * i, halfBits(r() * 2 - 1), true);
  else {
    const bb = t.type === 'Q8_0' ? 34 : 18;
    for (let k = 0; k < b.length; k++) b[k] = (r() * 256) | 0;
    for (let at = 0; at < b.length; at += bb) dv.setUint16(at, halfBits(r() * 0.05), true);
  }
  return b;
}

// ---------------------------------------------------------------------------
// Breaking it

const HOSTILE_U32 = [0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 30, 31, 32, 36, 255, 256, 65535, 65536, 65537, 2 ** 20 + 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1];
const HOSTILE_U64 = [0n, 1n, 31n, 32n, 33n, 64n, 4096n, 65537n, 2n ** 32n, 2n ** 32n + 1n, 2n ** 40n, 2n ** 52n, 2n ** 53n + 1n, 2n ** 62n, 2n ** 64n - 1n];
const structuralArb = fc.oneof(
  fc.record({ kind: fc.constant('dropKey'), i: fc.nat() }),
  fc.record({ kind: fc.constant('retypeKey'), i: fc.nat(), type: fc.constantFrom('UINT8', 'INT32', 'INT64', 'UINT64', 'FLOAT32', 'FLOAT64', 'STRING', 'BOOL') }),
  fc.record({ kind: fc.constant('keyValue'), i: fc.nat(), value: fc.constantFrom(0, 1, 3, 5, 7, 63, 65, 4096, 2 ** 31 - 1, -1, 0.5, NaN) }),
  fc.record({ kind: fc.constant('arch'), value: fc.constantFrom('gpt2', 'mistral', 'LLAMA', '', 'qwen2') }),
  fc.record({ kind: fc.constant('dupKey'), i: fc.nat() }),
  fc.record({ kind: fc.constant('addKey'), key: fc.constantFrom('llama.expert_count', 'llama.rope.scaling.type', 'general.alignment', 'llama.attention.key_length', 'llama.vocab_size'), value: fc.constantFrom(0, 2, 8, 16, 48, 'linear', 'none') }),
  fc.record({ kind: fc.constant('dropTensor'), i: fc.nat() }),
  fc.record({ kind: fc.constant('renameTensor'), i: fc.nat(), name: fc.constantFrom('blk.9.attn_q.weight', 'output.weight', 'rope_freqs.weight', 'blk.0.attn_q.bias', 'x') }),
  fc.record({ kind: fc.constant('dupTensor'), i: fc.nat() }),
  fc.record({ kind: fc.constant('reshape'), i: fc.nat(), d: fc.nat(1), delta: fc.constantFrom(-32, -1, 1, 32, 64) }),
  fc.record({ kind: fc.constant('retype'), i: fc.nat(), type: fc.constantFrom('F32', 'F16', 'Q8_0', 'Q4_0', 'Q4_1', 'Q5_0', 'Q4_K', 'Q6_K', 'BF16', 'I8', 'F64', 'IQ4_NL') }),
);
const byteArb = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('set'), at: fc.nat(), header: fc.boolean(), value: fc.nat(255) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('u32'), at: fc.nat(), value: fc.constantFrom(...HOSTILE_U32) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('u64'), at: fc.nat(), value: fc.constantFrom(...HOSTILE_U64) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('splice'), at: fc.nat(), del: fc.nat(9), ins: fc.uint8Array({ maxLength: 9 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('cut'), at: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('extend'), n: fc.integer({ min: 1, max: 100 }) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('weights'), at: fc.nat(), n: fc.integer({ min: 1, max: 64 }), value: fc.nat(255) }) },
);

function applyStructural(desc, muts) {
  let { metadata, tensors } = desc;
  metadata = metadata.map((e) => e.slice());
  tensors = tensors.map((t) => ({ ...t, ne: t.ne.slice() }));
  for (const m of muts) {
    const ki = metadata.length ? m.i % metadata.length : 0, ti = tensors.length ? m.i % tensors.length : 0;
    switch (m.kind) {
      case 'dropKey': if (metadata.length) metadata.splice(ki, 1); break;
      case 'retypeKey': if (metadata.length) {
        const [k, , v] = metadata[ki];
        const num = typeof v === 'number' ? v : 1;
        metadata[ki] = m.type === 'STRING' ? [k, 'STRING', String(v)] : m.type === 'BOOL' ? [k, 'BOOL', true]
          : [k, m.type, m.type.startsWith('FLOAT') ? num : m.type.includes('64') ? BigInt(Math.trunc(num) & 0xFF) : Math.trunc(num) & 0x7F];
      } break;
      case 'keyValue': if (metadata.length) {
        const [k, type] = metadata[ki];
        if (type === 'FLOAT32' || type === 'FLOAT64') metadata[ki] = [k, type, m.value];
        else if (type === 'UINT32' && Number.isInteger(m.value) && m.value >= 0) metadata[ki] = [k, type, m.value];
        else if (type === 'UINT32') metadata[ki] = [k, 'INT32', Number.isInteger(m.value) ? m.value : -7];
      } break;
      case 'arch': metadata = metadata.map((e) => (e[0] === 'general.architecture' ? [e[0], 'STRING', m.value] : e)); break;
      case 'dupKey': if (metadata.length) metadata.push(metadata[ki].slice()); break;
      case 'addKey': metadata.push([m.key, typeof m.value === 'string' ? 'STRING' : 'UINT32', m.value]); break;
      case 'dropTensor': if (tensors.length) tensors.splice(ti, 1); break;
      case 'renameTensor': if (tensors.length) tensors[ti].name = m.name; break;
      case 'dupTensor': if (tensors.length) tensors.push({ ...tensors[ti], ne: tensors[ti].ne.slice() }); break;
      case 'reshape': if (tensors.length) { const t = tensors[ti]; const d = m.d % t.ne.length; t.ne[d] = Math.max(1, t.ne[d] + m.delta); } break;
      case 'retype': if (tensors.length) tensors[ti].type = m.type; break;
      default: throw new Error(m.kind);
    }
  }
  return { metadata, tensors };
}

/** The file's bytes: planned (gguf-layout) with zero data where a tensor's bytes cannot be made (a block the reader will reject). */
function build(c, structural) {
  const desc = applyStructural(describeFile(c), structural);
  const r = rng(c.seed);
  let plan;
  try {
    plan = planGguf({ ...desc, alignment: c.alignment, version: c.version });
  } catch {
    return null;                // (rows not a whole number of blocks: the writer cannot lay it out; the raw mutations cover those)
  }
  return { plan, bytes: fillGguf(plan, (i) => { const t = desc.tensors[i]; const b = tensorBytes(t, r); return b.length === plan.sizes[i] ? b : new Uint8Array(plan.sizes[i]); }) };
}

/** Applies byte mutations; returns { bytes, weightsOnly: whether every change was to weight bytes }. */
function applyBytes(bytes, dataOffset, muts) {
  let b = bytes.slice(), weightsOnly = true;
  const dv = () => new DataView(b.buffer, b.byteOffset, b.byteLength);
  for (const m of muts) {
    if (b.length === 0) break;
    const inHeader = (at) => at % Math.max(1, Math.min(dataOffset, b.length));
    switch (m.kind) {
      case 'set': { const at = m.header ? inHeader(m.at) : m.at % b.length; if (at < dataOffset) weightsOnly = false; b[at] = m.value; break; }
      case 'u32': { const at = inHeader(m.at); if (at + 4 <= b.length) { dv().setUint32(at, m.value, true); weightsOnly = false; } break; }
      case 'u64': { const at = inHeader(m.at); if (at + 8 <= b.length) { dv().setBigUint64(at, m.value, true); weightsOnly = false; } break; }
      case 'splice': {
        const at = inHeader(m.at);
        const out = new Uint8Array(b.length - Math.min(m.del, b.length - at) + m.ins.length);
        out.set(b.subarray(0, at)); out.set(m.ins, at); out.set(b.subarray(at + m.del), at + m.ins.length);
        b = out; weightsOnly = false; break;
      }
      case 'cut': b = b.slice(0, m.at % (b.length + 1)); weightsOnly = false; break;
      case 'extend': { const out = new Uint8Array(b.length + m.n); out.set(b); b = out; weightsOnly = false; break; }
      case 'weights': {
        if (b.length > dataOffset) { const at = dataOffset + (m.at % (b.length - dataOffset)); b.fill(m.value, at, Math.min(b.length, at + m.n)); }
        break;
      }
      default: throw new Error(m.kind);
    }
  }
  return { bytes: b, weightsOnly };
}

function trackMallocs(M) {
  M._free(M._malloc(8));
  const realMalloc = M._malloc, realFree = M._free;
  const live = new Map();
  M._malloc = (n) => { const p = realMalloc(n); if (p) live.set(p >>> 0, n); return p; };
  M._free = (p) => { live.delete(p >>> 0); return realFree(p); };
  return { live, reset() { live.clear(); }, restore() { M._malloc = realMalloc; M._free = realFree; } };
}

/** The outcome of a load: { ok, code, message, fingerprint }; the model disposed. A load that does not settle in HANG_MS fails. */
async function outcome(load, vocab) {
  let timer;
  const hang = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`loadGguf did not settle within ${HANG_MS} ms`)), HANG_MS); });
  try {
    const { model } = await Promise.race([load(), hang]);
    try {
      const y = model.forward([0]);
      if (!(y instanceof Float32Array) || y.length !== model.config.vocabSize) throw new Error(`forward([0]) gave ${y?.length} logits; expected ${model.config.vocabSize}`);
      if (vocab !== null && model.config.vocabSize !== vocab) throw new Error(`vocabSize ${model.config.vocabSize}; the file's embedding has ${vocab} rows`);
      return { ok: true, fingerprint: model.fingerprint };
    } finally {
      model.dispose();
    }
  } catch (e) {
    if (!(e instanceof SdpaError)) throw new Error(`loadGguf threw a non-SdpaError: ${e?.stack ?? e}`);
    return { ok: false, code: e.code, message: e.message };
  } finally {
    clearTimeout(timer);
  }
}

function chunked(bytes, sizes) {
  return (async function* () {
    for (let at = 0, k = 0; at < bytes.length; k++) { const n = sizes[k % sizes.length]; yield bytes.slice(at, at + n); at += n; }
  })();
}

test(`parseGguf and loadGguf on broken files: only SdpaError (E_FORMAT / E_DTYPE / E_CAPACITY), E_FORMAT whenever the parser says so, nothing leaked, no hang (${RUNS} runs)`, async () => {
  const { M } = sdpa[INTERNALS];
  const tally = new Map();
  const mem0 = sdpa.memory();
  const prop = fc.asyncProperty(
    configArb, fc.array(structuralArb, { maxLength: 2 }), fc.array(byteArb, { maxLength: 3 }),
    fc.array(fc.integer({ min: 1, max: 5000 }), { minLength: 1, maxLength: 4 }),
    async (c, structural, byteMuts, chunkSizes) => {
      const built = build(c, structural);
      if (built === null) { count(tally, 'unbuildable'); return; }
      const { bytes, weightsOnly } = applyBytes(built.bytes, built.plan.dataOffset, byteMuts);
      const what = `config ${show(c)}, structural ${show(structural)}, bytes ${show(byteMuts)}`;
      watchdog.start(`parseGguf: ${what}`);
      let parsed = null, parseErr = null;
      try { parsed = parseGguf(bytes, 'parseGguf', bytes.length); } catch (e) { parseErr = e; }
      watchdog.stop();
      if (parseErr !== null) {
        if (!(parseErr instanceof SdpaError)) throw new Error(`parseGguf threw a non-SdpaError (${what}): ${parseErr?.stack ?? parseErr}`);
        assert.is(parseErr.code, 'E_FORMAT', `parseGguf: ${parseErr.message}`);
        assert.ok(parseErr.message.startsWith('parseGguf: GGUF: '), parseErr.message);
      }
      const tracker = trackMallocs(M);
      let out;
      try {
        watchdog.start(`loadGguf: ${what}`);
        const embd = parsed?.tensors.find((t) => t.name === 'token_embd.weight');
        out = await outcome(() => loadGguf(sdpa, bytes), embd ? embd.ne[1] : null);
        watchdog.stop();
      } finally {
        tracker.restore();
      }
      count(tally, out.ok ? 'loaded' : `${out.code} ${out.message.replace(/^loadGguf: (GGUF: )?/, '').replace(/[\d"'].*$/, '').trim().slice(0, 40)}`);
      assert.is(tracker.live.size, 0, `every malloc freed (${what}; ${out.ok ? 'loaded' : out.message})`);
      assert.is(sdpa.memory().bytesInUse, mem0.bytesInUse, 'no KV page held');
      if (!out.ok) assert.ok(['E_FORMAT', 'E_DTYPE', 'E_CAPACITY'].includes(out.code), `code ${out.code}: ${out.message}`);
      if (parseErr !== null) assert.ok(!out.ok && out.code === 'E_FORMAT', `the parser rejects the file (${parseErr.message}) but loadGguf: ${out.ok ? 'loaded' : out.message}`);
      if (structural.length === 0 && weightsOnly) assert.ok(out.ok, `a valid file with only its weight bytes changed did not load (${what}): ${out.message}`);
      // streamed (the file's length unknown until it ends: a cut file is found once its tensors are
      // allocated), when its header parses and claims little (no E_CAPACITY-sized allocations)
      let header = null;
      try { header = parseGguf(bytes, 'parseGguf', null); } catch { /* (a flaw or a cut header) */ }
      if (header !== null && header.tensors.reduce((n, t) => n + t.bytes, 0) < 16 << 20) {
        const t2 = trackMallocs(M);
        let again;
        try {
          watchdog.start(`loadGguf streamed in chunks of ${chunkSizes}: ${what}`);
          again = await outcome(() => loadGguf(sdpa, chunked(bytes, chunkSizes)), null);
          watchdog.stop();
        } finally { t2.restore(); }
        count(tally, `streamed ${again.ok ? 'loaded' : again.code}`);
        assert.is(t2.live.size, 0, `every malloc of the streamed load freed (${what}; ${again.ok ? 'loaded' : again.message})`);
        assert.is(sdpa.memory().bytesInUse, mem0.bytesInUse, 'no KV page held after the streamed load');
        assert.is(again.ok, out.ok, `streamed in chunks of ${chunkSizes}: ${again.ok ? 'loaded' : again.message}; from bytes: ${out.ok ? 'loaded' : out.message}`);
        if (out.ok) assert.is(again.fingerprint, out.fingerprint, 'the same fingerprint streamed');
        else if (out.code === 'E_DTYPE') assert.is(again.code, 'E_DTYPE', again.message);
        else assert.ok(['E_FORMAT', 'E_DTYPE'].includes(again.code), `streamed: ${again.code} ${again.message}`);
      }
    });
  const params = { seed: SEED, numRuns: RUNS, verbose: 1 };
  if (TIME_MS > 0) params.interruptAfterTimeLimit = TIME_MS;
  const t0 = Date.now();
  const res = await fc.check(prop, params);
  const counts = [...tally.entries()].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${n}`).join(', ');
  console.log(`gguf-fuzz: seed ${SEED}, ${res.numRuns} runs in ${((Date.now() - t0) / 1000).toFixed(1)} s${res.interrupted ? ' (stopped by the time limit)' : ''}${WITH_TOKENIZER ? ' (with tokenizer keys)' : ''}: ${counts}`);
  if (res.failed) {
    const err = res.errorInstance ?? res.error;
    assert.unreachable(`gguf-fuzz: failure after ${res.numRuns} runs (seed ${SEED}, path ${res.counterexamplePath}):\n  ${err instanceof Error ? err.message : String(err)}\n  case: ${show(res.counterexample)}`);
  }
  assert.ok((tally.get('loaded') || 0) > 0, `some files loaded: ${counts}`);
  assert.ok([...tally.keys()].some((k) => k.startsWith('E_FORMAT')), `some were E_FORMAT: ${counts}`);
});

test.run();
