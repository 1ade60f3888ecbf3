// llama.test.js: sdpa-wasm/llama against an independent reference. The shipped
// model (models/fortunes) is run through its whole context and compared with
// the logits of scripts/llama/reference.py (a float64 PyTorch forward of the same
// checkpoint file, committed in tests/data/llama); its tokenizer against the
// Python tokenizer that made the training data; caches that are forked,
// truncated, saved and restored against fresh runs, bit for bit.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { loadLlama, loadTokenizer, createSampler, argmax, BOS, EOS } from '../../js/llama/index.js';
import { expectError, expectReject, sameBits, rng } from './helpers.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHECKPOINT = new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/model.bin')));
const TOKENIZER = new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/tokenizer.bin')));
const REF = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/data/llama/reference.json'), 'utf8'));
const REF_BIN = fs.readFileSync(path.join(ROOT, 'tests/data/llama/reference.bin'));
const HELDOUT = fs.readFileSync(path.join(ROOT, 'tests/data/llama/heldout.txt'), 'utf8').replace(/\n$/, '').split('\n%\n');
const V = REF.vocabSize;

/** The reference logits of a stream, [rows, V]. */
function refLogits(name) {
  const s = REF.streams[name];
  const b = REF_BIN.subarray(s.offset, s.offset + s.rows * V * 4);
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
}
const FULL = REF.streams['heldout-full'].tokens;
const WANT = refLogits('heldout-full');
// The tolerance: float32 products and sums against float64, through every layer.
const TOL = 1e-5 * (1 + REF.streams['heldout-full'].maxAbs);

function maxErr(got, want, rowFrom = 0) {
  let e = 0;
  for (let i = 0; i < got.length; i++) e = Math.max(e, Math.abs(got[i] - want[rowFrom * V + i]));
  return e;
}

let sdpa, sdpa2;
test.before(async () => {
  sdpa = await createSdpa({ threads: 1 });
  sdpa2 = await createSdpa({ threads: 2 });
});
test.after(() => { sdpa?.dispose(); sdpa2?.dispose(); });

test('the shipped model: config, GQA, head size 64, a context of 512', () => {
  const model = loadLlama(sdpa, CHECKPOINT);
  const c = model.config;
  assert.equal(Object.keys(c), ['dim', 'hiddenDim', 'nLayers', 'nHeads', 'nKvHeads', 'vocabSize', 'seqLen']);
  assert.is(c.dim / c.nHeads, 64);
  assert.ok(c.nKvHeads < c.nHeads && c.nHeads % c.nKvHeads === 0, 'GQA');
  assert.ok(c.seqLen >= 512);
  assert.is(c.vocabSize, V);
  assert.is(model.maxSeqLen, c.seqLen);
  assert.is(model.length, 0);
  assert.ok(CHECKPOINT.byteLength <= 16.5e6, `${CHECKPOINT.byteLength} bytes`);
  model.dispose();
});

test('tokenizer: encode equals the Python tokenizer (training data) on the held-out text; decode inverts it', () => {
  const tok = loadTokenizer(TOKENIZER, { vocabSize: V });
  // the reference stream is the held-out fortunes, each BOS text EOS, tokenized by scripts/llama/tok.py
  const ids = [];
  for (const d of HELDOUT) { ids.push(...tok.encode(d, { bos: true, eos: true })); if (ids.length >= FULL.length) break; }
  assert.equal(ids.slice(0, FULL.length), FULL);
  for (const d of HELDOUT.slice(0, 100)) assert.is(tok.decode(tok.encode(d)), d);
  assert.equal(Array.from(tok.encode('')), [BOS]);
  assert.equal(Array.from(tok.encode('', { bos: false })), []);
  assert.equal(Array.from(tok.encode('a', { bos: false, eos: true })).slice(-1), [EOS]);
});

test('tokenizer: characters outside the vocab go through <0xXX> pieces; a streaming decoder never splits one', () => {
  const tok = loadTokenizer(TOKENIZER, { vocabSize: V });
  const text = 'naïve café, 日本語 and 🙂 — “quotes”';
  const ids = tok.encode(text);
  assert.is(tok.decode(ids), text);
  const bytePieces = Array.from(ids).filter((id) => /^<0x[0-9A-F]{2}>$/.test(new TextDecoder().decode(tok.piece(id))));
  assert.ok(bytePieces.length >= 4, 'the CJK and emoji characters are spelled as bytes');
  const d = tok.decoder();
  let streamed = '';
  for (const id of ids) {
    const s = d.push(id);
    assert.not.match(s, /\uFFFD/, 'no partial character is emitted');
    streamed += s;
  }
  assert.is(streamed + d.end(), text);
});

test('logits equal the float64 reference: the whole context at once (one causal step per layer)', () => {
  const model = loadLlama(sdpa, CHECKPOINT);
  const got = model.forward(FULL);
  assert.is(got.length, FULL.length * V);
  const e = maxErr(got, WANT);
  assert.ok(e <= TOL, `max |error| ${e} > ${TOL}`);
  assert.is(model.length, FULL.length);
  model.dispose();
});

// (a one-row decode step is below the pool's threshold and runs on one thread in both; the
// 300-row prefill is split over the pool's units)
test('logits equal the reference token by token, and 1 and 2 threads give the same bits', () => {
  const a = loadLlama(sdpa, CHECKPOINT), b = loadLlama(sdpa2, CHECKPOINT);
  const ra = new Float32Array(V), rb = new Float32Array(V);
  let e = 0;
  for (let i = 0; i < FULL.length; i++) {
    a.forward([FULL[i]], { out: ra });
    b.forward(Int32Array.of(FULL[i]), { out: rb });
    e = Math.max(e, maxErr(ra, WANT, i));
    if (!sameBits(ra, rb)) assert.unreachable(`row ${i}: 1 and 2 threads differ`);
  }
  assert.ok(e <= TOL, `max |error| ${e} > ${TOL}`);
  // a prefill too
  a.truncate(0); b.truncate(0);
  assert.ok(sameBits(a.forward(FULL.slice(0, 300)), b.forward(FULL.slice(0, 300))), 'prefill bits');
  a.dispose(); b.dispose();
});

test('logits equal the reference in chunks up to the full context (also with maxChunk splitting a call)', () => {
  const rand = rng(7);
  for (const maxChunk of [undefined, 48]) {
    const model = loadLlama(sdpa, CHECKPOINT, { maxChunk });
    let pos = 0, e = 0;
    while (pos < FULL.length) {
      const n = Math.min(FULL.length - pos, 1 + Math.floor(rand() * 120));
      const got = model.forward(FULL.slice(pos, pos + n));
      e = Math.max(e, maxErr(got, WANT, pos));
      pos += n;
    }
    assert.ok(e <= TOL, `maxChunk ${maxChunk}: max |error| ${e} > ${TOL}`);
    assert.is(model.length, FULL.length);
    model.dispose();
  }
});

test("options.logits 'last' and options.out", () => {
  const model = loadLlama(sdpa, CHECKPOINT);
  const last = model.forward(FULL.slice(0, 40), { logits: 'last' });
  assert.is(last.length, V);
  assert.ok(maxErr(last, WANT, 39) <= TOL);
  const out = new Float32Array(3 * V);
  assert.is(model.forward(FULL.slice(40, 43), { out }), out);
  assert.ok(maxErr(out, WANT, 40) <= TOL);
  model.dispose();
});

test('greedy generation follows the float64 reference (wherever its top two are not a tie within the tolerance)', () => {
  const prompt = REF.streams.prompt.tokens, want = REF.streams['prompt-greedy'].tokens;
  const wantLogits = refLogits('prompt-greedy');
  const model = loadLlama(sdpa, CHECKPOINT);
  const { tokens, stop } = model.generate(prompt, { temperature: 0, maxNewTokens: want.length - prompt.length, stop: [] });
  assert.is(stop, 'maxNewTokens');
  let same = 0;
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i] === want[prompt.length + i]) { same++; continue; }
    const row = wantLogits.subarray((prompt.length + i - 1) * V, (prompt.length + i) * V);
    const top = Array.from(row).sort((x, y) => y - x);
    assert.ok(top[0] - top[1] <= 2 * TOL, `token ${i}: ${tokens[i]} but the reference's ${want[prompt.length + i]} leads by ${top[0] - top[1]}`);
    break;
  }
  assert.ok(same >= 8, `${same} greedy tokens agree`);
  // every emitted token but the last is in the model
  assert.is(model.length, prompt.length + tokens.length - 1);
  model.dispose();
});

test('truncate + replay and fork continue exactly as a fresh run', () => {
  const fresh = loadLlama(sdpa, CHECKPOINT);
  fresh.forward(FULL.slice(0, 200));
  const want = fresh.forward(FULL.slice(200, 260));
  const wantNext = fresh.forward(FULL.slice(260, 261));

  const m = loadLlama(sdpa, CHECKPOINT);
  m.forward(FULL.slice(0, 200));
  const f = m.fork();
  m.forward(FULL.slice(200, 300));           // then rolled back
  m.truncate(200);
  assert.is(m.length, 200);
  assert.ok(sameBits(m.forward(FULL.slice(200, 260)), want), 'replay after truncate');
  assert.ok(sameBits(m.forward(FULL.slice(260, 261)), wantNext), 'and the step after it');
  // the fork was made at 200, before the parent wrote rows 200..299 (copy-on-write)
  assert.is(f.length, 200);
  assert.ok(sameBits(f.forward(FULL.slice(200, 260)), want), 'fork');
  assert.ok(sameBits(f.forward(FULL.slice(260, 261)), wantNext));
  for (const x of [fresh, m, f]) x.dispose();
});

test('save, restore in a new instance (2 threads), continue exactly; meta round-trips', async () => {
  const m = loadLlama(sdpa, CHECKPOINT, { dtype: 'int8' });
  m.forward(FULL.slice(0, 150));
  const bytes = m.save({ meta: { next: FULL[150], note: 'chat 1' } });
  const want = m.forward(FULL.slice(150, 200));
  const other = loadLlama(sdpa2, CHECKPOINT);      // float32 asked: the saved int8 state wins
  const { model: r, meta } = await other.restore(bytes);
  assert.equal(meta, { next: FULL[150], note: 'chat 1' });
  assert.is(r.length, 150);
  assert.is(r.keyDtype, 'int8');
  assert.ok(sameBits(r.forward(FULL.slice(150, 200)), want), 'restored model continues bit for bit');
  // and from chunks / a stream
  const f = m.fork();
  const { model: s } = await other.restore(f.saveChunks({ chunkBytes: 4096 }));
  assert.is(s.length, 200);
  assert.ok(sameBits(s.forward(FULL.slice(200, 203)), f.forward(FULL.slice(200, 203))), 'restored from chunks: the same next logits');
  for (const x of [m, other, r, s, f]) x.dispose();
});

test('restore rejects a state of other weights or of no model, and keeps nothing', async () => {
  const m = loadLlama(sdpa, CHECKPOINT);
  m.forward(FULL.slice(0, 70));
  const pages0 = sdpa2.memory().pagesInUse;
  const other = loadLlama(sdpa2, CHECKPOINT);
  const pages1 = sdpa2.memory().pagesInUse;
  // the same geometry, one weight changed: another model
  const changed = CHECKPOINT.slice();
  changed[40] ^= 1;
  const stranger = loadLlama(sdpa2, changed);
  await expectReject(stranger.restore(m.save()), 'E_FORMAT', [/other weights/]);
  const group = sdpa.createKVCacheGroup([{ maxSeqLen: 8, numKvHeads: 2, headDim: 64 }]);
  await expectReject(other.restore(group.save()), 'E_FORMAT', [/not saved by LlamaModel\.save/]);
  stranger.dispose();
  assert.is(sdpa2.memory().pagesInUse, pages1, 'no pages kept');
  other.dispose();
  assert.ok(sdpa2.memory().pagesInUse <= pages0);
  group.dispose(); m.dispose();
});

test('generate: seeded sampling repeats; stops at a stop token, at maxNewTokens and at maxSeqLen', () => {
  const prompt = REF.streams.prompt.tokens;
  const run = (opts, load = {}) => {
    const m = loadLlama(sdpa, CHECKPOINT, load);
    const r = m.generate(prompt, opts);
    const len = m.length;
    m.dispose();
    return { ...r, len };
  };
  const a = run({ seed: 42, maxNewTokens: 30, stop: [] }), b = run({ seed: 42, maxNewTokens: 30, stop: [] });
  assert.equal(Array.from(a.tokens), Array.from(b.tokens));
  assert.is(a.stop, 'maxNewTokens');
  assert.is(a.tokens.length, 30);
  assert.is(a.len, prompt.length + 29);
  const c = run({ seed: 43, maxNewTokens: 30, stop: [] });
  assert.not.equal(Array.from(c.tokens), Array.from(a.tokens), 'another seed, other tokens');
  const greedy = run({ temperature: 0, maxNewTokens: 6, stop: [] });
  assert.equal(Array.from(run({ topK: 1, seed: 5, maxNewTokens: 6, stop: [] }).tokens), Array.from(greedy.tokens), 'topK 1 is greedy');
  // a stop token ends it (emitted, not appended)
  const s = run({ temperature: 0, stop: [greedy.tokens[2]], maxNewTokens: 50 });
  assert.is(s.stop, 'stop');
  assert.equal(Array.from(s.tokens), Array.from(greedy.tokens.slice(0, 3)));
  assert.is(s.len, prompt.length + 2);
  const l = run({ temperature: 0, stop: [] }, { maxSeqLen: prompt.length + 5 });
  assert.is(l.stop, 'length');
  assert.is(l.tokens.length, 6);
  assert.is(l.len, prompt.length + 5);
  // continuing with an empty prompt samples from the logits the model holds
  const m = loadLlama(sdpa, CHECKPOINT);
  m.forward(prompt);
  assert.equal(Array.from(m.generate([], { temperature: 0, maxNewTokens: 6, stop: [] }).tokens), Array.from(greedy.tokens));
  const held = m.lastLogits();
  assert.ok(held.length === V && argmax(held) === m.generate([], { temperature: 0, maxNewTokens: 1 }).tokens[0], 'lastLogits: the row generate samples from');
  m.truncate(3);
  assert.is(m.lastLogits(), null);
  expectError(() => m.generate([], { temperature: 0 }), 'E_ARG', [/no logits/]);
  m.dispose();
});

test('sampler: frequencies follow softmax(logits / T); top-k and top-p keep only their candidates', () => {
  const logits = Float32Array.of(2, 1, 0.5, -1, 0, 1.5);
  const T = 0.8, N = 40000;
  const p = Array.from(logits, (x) => Math.exp(x / T));
  const z = p.reduce((s, x) => s + x, 0);
  const count = (opts) => {
    const s = createSampler(logits.length, { temperature: T, seed: 1, ...opts });
    const c = new Array(logits.length).fill(0);
    for (let i = 0; i < N; i++) c[s.sample(logits)]++;
    return c.map((x) => x / N);
  };
  const all = count({ topP: 1 });
  all.forEach((f, i) => assert.ok(Math.abs(f - p[i] / z) < 0.01, `token ${i}: ${f} vs ${p[i] / z}`));
  const k2 = count({ topK: 2, topP: 1 });           // tokens 0 and 5, renormalized
  assert.ok(Math.abs(k2[0] - p[0] / (p[0] + p[5])) < 0.01 && k2[0] + k2[5] === 1, `${k2}`);
  const nucleus = count({ topP: 0.5 });              // the smallest set whose mass exceeds 0.5: tokens 0, 5
  assert.ok(nucleus[0] + nucleus[5] === 1 && nucleus[5] > 0.3, `${nucleus}`);
  assert.is(createSampler(6, { temperature: 0 }).sample(logits), 0);
  assert.is(argmax(Float32Array.of(1, 3, 3)), 1, 'the first of equals');
  expectError(() => createSampler(6, { temperature: -1 }), 'E_ARG', [/temperature/]);
  expectError(() => createSampler(6, { topP: 2 }), 'E_ARG', [/topP/]);
  expectError(() => createSampler(6, { seed: -3 }), 'E_ARG', [/seed/]);
  expectError(() => createSampler(6, {}).sample(new Float32Array(5)), 'E_ARG', [/6 values/]);
});

/** The checkpoint with header field i set to v. */
function withField(i, v, bytes = CHECKPOINT) {
  const b = bytes.slice();
  new DataView(b.buffer, b.byteOffset).setInt32(4 * i, v, true);
  return b;
}

test('bad checkpoints: E_FORMAT naming the field, expected vs actual, before anything is allocated', () => {
  const { M } = sdpa[INTERNALS];
  M._free(M._malloc(8));      // (the glue binds _malloc / _free on their first call, replacing a wrapper put before it)
  const mem0 = sdpa.memory();
  let mallocs = 0;
  const real = M._malloc;
  M._malloc = (n) => { mallocs++; return real(n); };
  try {
    expectError(() => loadLlama(sdpa, CHECKPOINT.subarray(0, CHECKPOINT.length - 4)), 'E_FORMAT', [/truncated/, /14\d+/]);
    expectError(() => loadLlama(sdpa, new Uint8Array([...CHECKPOINT.subarray(0, 64), 0, 0, 0, 0])), 'E_FORMAT', [/truncated/]);
    const longer = new Uint8Array(CHECKPOINT.length + 4); longer.set(CHECKPOINT);
    expectError(() => loadLlama(sdpa, longer), 'E_FORMAT', [/over-long/]);
    expectError(() => loadLlama(sdpa, CHECKPOINT.subarray(0, 20)), 'E_FORMAT', [/at least 28/]);
    expectError(() => loadLlama(sdpa, withField(3, 3)), 'E_FORMAT', [/dim 256 is not a multiple of n_heads 3/]);
    expectError(() => loadLlama(sdpa, withField(4, 3)), 'E_FORMAT', [/n_kv_heads 3/]);
    expectError(() => loadLlama(sdpa, withField(0, 0)), 'E_FORMAT', [/dim is 0; expected a positive integer/]);
    expectError(() => loadLlama(sdpa, withField(2, -2)), 'E_FORMAT', [/n_layers is -2/]);
    expectError(() => loadLlama(sdpa, withField(0, 1 << 30)), 'E_FORMAT', [/dim is 1073741824; expected at most 65536/]);
    expectError(() => loadLlama(sdpa, withField(6, 2 ** 31 - 1)), 'E_FORMAT', [/seq_len/]);
    expectError(() => loadLlama(sdpa, withField(3, 128)), 'E_FORMAT', [/head size dim \/ n_heads = 2/]);
    expectError(() => loadLlama(sdpa, withField(5, -V)), 'E_FORMAT', [/truncated/, /separate classifier/]);
    expectError(() => loadLlama(sdpa, 'model.bin'), 'E_ARG', [/checkpoint must be a Uint8Array/]);
    expectError(() => loadLlama({}, CHECKPOINT), 'E_ARG', [/createSdpa/]);
    expectError(() => loadLlama(sdpa, CHECKPOINT, { maxSeqLen: 4096 }), 'E_ARG', [/maxSeqLen must be an integer in 1 \.\. 512/]);
    expectError(() => loadLlama(sdpa, CHECKPOINT, { maxseqlen: 4 }), 'E_ARG', [/unknown option 'maxseqlen'/]);
    expectError(() => loadLlama(sdpa, CHECKPOINT, { dtype: 'int3' }), 'E_DTYPE', [/^loadLlama: dtype 'int3' is not supported/]);
  } finally { M._malloc = real; }
  assert.is(mallocs, 0, 'nothing allocated in wasm memory');
  assert.equal(sdpa.memory(), mem0);
  // memory running out half way (the third buffer): the buffers made are freed again
  const realFree = M._free;
  const taken = new Set();
  M._malloc = (n) => { if (taken.size >= 2) return 0; const p = real(n); taken.add(p); return p; };
  M._free = (p) => { taken.delete(p); return realFree(p); };
  try {
    expectError(() => loadLlama(sdpa, CHECKPOINT), 'E_OOM', [/^loadLlama: /]);
  } finally { M._malloc = real; M._free = realFree; }
  assert.is(taken.size, 0, 'every buffer made was freed');
  assert.equal(sdpa.memory(), mem0);
});

test('bad tokens: out of range or past maxSeqLen append nothing', () => {
  const m = loadLlama(sdpa, CHECKPOINT, { maxSeqLen: 64 });
  m.forward(FULL.slice(0, 10));
  expectError(() => m.forward([1, V]), 'E_ARG', [new RegExp(`tokens\\[1\\] is ${V}; expected an integer token id in 0 \\.\\. ${V - 1}`)]);
  expectError(() => m.forward([1, -1]), 'E_ARG', [/tokens\[1\] is -1/]);
  expectError(() => m.forward([1.5]), 'E_ARG', [/tokens\[0\] is 1.5/]);
  expectError(() => m.forward(Uint32Array.of(2 ** 32 - 1)), 'E_ARG', [/tokens/]);
  expectError(() => m.forward([]), 'E_ARG', [/empty/]);
  expectError(() => m.forward('hello'), 'E_ARG', [/Int32Array or an array/]);
  expectError(() => m.forward(FULL.slice(0, 55)), 'E_CAPACITY', [/would end at 65; expected at most maxSeqLen 64/]);
  expectError(() => m.forward([1], { out: new Float32Array(3) }), 'E_ARG', [/options.out/]);
  assert.is(m.length, 10);
  assert.ok(maxErr(m.forward(FULL.slice(10, 12)), WANT, 10) <= TOL, 'still right after the rejected calls');
  m.dispose();
  expectError(() => m.forward([1]), 'E_DISPOSED', [/disposed/]);
});

test('bad tokenizer files: E_FORMAT naming the piece and the rule', () => {
  expectError(() => loadTokenizer(TOKENIZER.subarray(0, 2)), 'E_FORMAT', [/at least 4/]);
  expectError(() => loadTokenizer(TOKENIZER.subarray(0, TOKENIZER.length - 1)), 'E_FORMAT', [/runs past the end/]);
  expectError(() => loadTokenizer(TOKENIZER, { vocabSize: V + 1 }), 'E_FORMAT', [new RegExp(`piece ${V} starts at byte`)]);
  expectError(() => loadTokenizer(TOKENIZER, { vocabSize: V - 1 }), 'E_FORMAT', [/bytes follow the 511 pieces/]);
  const b = TOKENIZER.slice();
  new DataView(b.buffer).setInt32(8, 1 << 20, true);          // piece 0's length
  expectError(() => loadTokenizer(b), 'E_FORMAT', [/piece 0 has length 1048576/]);
  expectError(() => loadTokenizer(null), 'E_ARG', [/Uint8Array or an ArrayBuffer/]);
  const tok = loadTokenizer(TOKENIZER);
  assert.is(tok.vocabSize, V);
  expectError(() => tok.decode([V]), 'E_ARG', [/id must be an integer/]);
  expectError(() => tok.encode(5), 'E_ARG', [/text must be a string/]);
});

test('a layer failing half way (E_OOM) leaves every layer as it was, and the model goes on as a fresh one', () => {
  const fresh = loadLlama(sdpa, CHECKPOINT);
  fresh.forward(FULL.slice(0, 20));
  const want = fresh.forward(FULL.slice(20, 24));
  const m = loadLlama(sdpa, CHECKPOINT);
  m.forward(FULL.slice(0, 20));
  const layer = m.cache.layers[2];
  layer.step = () => { throw new SdpaError('E_OOM', 'KVCache.step: (simulated) the pool cannot take a page'); };
  expectError(() => m.forward(FULL.slice(20, 24)), 'E_OOM');
  delete layer.step;
  assert.equal(m.cache.layers.map((c) => c.length), [20, 20, 20, 20, 20], 'every layer rolled back');
  assert.ok(m.lastLogits() !== null, 'the logits of row 19 are still the model\'s');
  assert.ok(sameBits(m.forward(FULL.slice(20, 24)), want));
  fresh.dispose(); m.dispose();
});

test('the last row\'s classifier failing (E_OOM: its prepared call cannot be made) appends nothing and keeps the logits', () => {
  const fresh = loadLlama(sdpa, CHECKPOINT);
  fresh.forward(FULL.slice(0, 3));
  const want = fresh.forward(FULL.slice(3, 8), { logits: 'last' });
  const m = loadLlama(sdpa, CHECKPOINT);
  m.forward(FULL.slice(0, 3));             // (a step of 3 rows and the classifier on row 2: prepared now)
  const before = m.lastLogits();
  const { M } = sdpa[INTERNALS];
  M._free(M._malloc(8));
  const real = M._malloc, L = m.config.nLayers;
  let calls = 0;
  // a step of 5 rows prepares 10 calls a layer and the final norm, then the classifier on row 4: refuse that one
  M._malloc = (n) => (++calls === 10 * L + 2 ? 0 : real(n));
  try {
    expectError(() => m.forward(FULL.slice(3, 8), { logits: 'last' }), 'E_OOM');
  } finally { M._malloc = real; }
  assert.is(calls, 10 * L + 2, 'the classifier\'s block was the one refused');
  assert.equal(m.cache.layers.map((c) => c.length), [3, 3, 3, 3, 3], 'nothing appended');
  assert.ok(sameBits(m.lastLogits(), before), 'the logits of row 2 are still the model\'s');
  assert.ok(sameBits(m.forward(FULL.slice(3, 8), { logits: 'last' }), want), 'and it goes on as a model that never failed');
  fresh.dispose(); m.dispose();
});

test('restore with an AbortSignal: a stalled source aborted rejects with the reason and keeps nothing', async () => {
  const m = loadLlama(sdpa, CHECKPOINT);
  m.forward(FULL.slice(0, 30));
  const bytes = m.save();
  const pages = sdpa.memory().pagesInUse;
  const ac = new AbortController();
  const stalled = new ReadableStream({ start(c) { c.enqueue(bytes.slice(0, 5000)); }, pull() { return new Promise(() => {}); } });
  const p = m.restore(stalled, { signal: ac.signal });
  setTimeout(() => ac.abort(), 10);
  const e = await p.then(() => null, (x) => x);
  assert.is(e?.name, 'AbortError');
  assert.is(sdpa.memory().pagesInUse, pages);
  await expectReject(m.restore(bytes, { sigal: ac.signal }), 'E_ARG', [/unknown option 'sigal'/]);
  const { model: r } = await m.restore(bytes, { signal: new AbortController().signal });
  assert.is(r.length, 30);
  r.dispose(); m.dispose();
});

test('restore: uneven layers are E_FORMAT; disposing the model while a restore is pending leaves the restored one working', async () => {
  const m = loadLlama(sdpa, CHECKPOINT);
  m.forward(FULL.slice(0, 10));
  const good = m.save();
  m.cache.layers[3].truncate(6);               // (the group's layers changed one by one: not a model's state)
  await expectReject(m.restore(m.save()), 'E_FORMAT', [/layer 3 holds 6 rows, layer 0 10/]);
  const pending = m.restore(good);
  m.dispose();
  const { model: r } = await pending;
  assert.is(r.length, 10);
  const fresh = loadLlama(sdpa, CHECKPOINT);
  fresh.forward(FULL.slice(0, 10));
  assert.ok(sameBits(r.forward(FULL.slice(10, 12)), fresh.forward(FULL.slice(10, 12))));
  r.dispose(); fresh.dispose();
});

test('stream checks its arguments and appends the prompt when called; a model changed between steps ends it', () => {
  const m = loadLlama(sdpa, CHECKPOINT);
  expectError(() => m.stream([1, V], {}), 'E_ARG', [/tokens\[1\]/]);
  expectError(() => m.stream([1], { temperature: -1 }), 'E_ARG', [/temperature/]);
  assert.is(m.length, 0);
  const it = m.stream([1, 50], { temperature: 0, stop: [] });
  assert.is(m.length, 2, 'the prompt is appended by the call');
  it.next();
  m.truncate(1);
  expectError(() => it.next(), 'E_ARG', [/changed between two steps/]);
  // top-p below every probability (a flat distribution): a token all the same
  const flat = createSampler(4, { topP: 0.01, seed: 3 });
  for (let i = 0; i < 20; i++) { const t = flat.sample(new Float32Array(4)); assert.ok(t >= 0 && t < 4, `${t}`); }
  m.dispose();
});

test('a decode step of the model allocates nothing in wasm memory', () => {
  const { M, core } = sdpa[INTERNALS];
  const m = loadLlama(sdpa, CHECKPOINT);
  m.forward(FULL.slice(0, 100));
  const out = new Float32Array(V), one = new Int32Array(1);
  const bytes0 = core.heapBytes(), pages0 = sdpa.memory();
  let mallocs = 0;
  const real = M._malloc;
  M._malloc = (n) => { mallocs++; return real(n); };
  try {
    for (let i = 100; i < 164; i++) { one[0] = FULL[i]; m.forward(one, { out }); }   // 64 rows: a new page in every layer
  } finally { M._malloc = real; }
  assert.is(mallocs, 0);
  assert.is(core.heapBytes(), bytes0, 'no memory growth');
  assert.ok(sdpa.memory().pagesInUse > pages0.pagesInUse && sdpa.memory().bytesReserved === pages0.bytesReserved, 'pages came from the reserved pool');
  assert.ok(maxErr(out, WANT, 163) <= TOL);
  m.dispose();
});

test.run();
