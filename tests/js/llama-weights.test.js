// llama-weights.test.js: sdpa-wasm/llama with its weight dtypes (loadLlama's
// weightDtype: float32, float16, q8_0, q4_0) on the shipped model, against
// the float64 llama2.c forward of tests/js/llama-reference.js over the
// weights as the runner stores them (each matrix quantized by the JS
// reference quantizer, then dequantized). Since the reference holds the same
// quantized values, what is left is float32 arithmetic: the tolerance is
// the float32 model's, 1e-5 * (1 + max |logit|), for every dtype.
//
// Measured (the first 70 tokens of the held-out stream, prefill and token by
// token): max |error| 1.4e-5 float32, 8.7e-6 float16, 1.7e-5 q8_0, 8.9e-6
// q4_0, against a tolerance of 1.7e-4. A wrong block layout is far outside
// it (q4_0 with its nibbles swapped: errors of about 12), and so is the
// quantization itself (the quantized models against the float32 reference:
// 2.9e-3 float16, 6.5e-2 q8_0, 1.7 q4_0).
// activations 'int16' (q8_0 / q4_0 products on x quantized to int16): a
// measured tolerance of its own, 4e-5 (1 + max |logit|), stated at its tests,
// and greedy text equal to float activations'.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa, INTERNALS } from '../../js/index.js';
import { loadLlama, loadTokenizer } from '../../js/llama/index.js';
import { sameBits, expectError } from './helpers.js';
import { referenceWeights, referenceForward } from './llama-reference.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHECKPOINT = new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/model.bin')));
const TOKENIZER = new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/tokenizer.bin')));
const REF = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/data/llama/reference.json'), 'utf8'));
const REF_BIN = fs.readFileSync(path.join(ROOT, 'tests/data/llama/reference.bin'));
const V = REF.vocabSize;
const STREAM = REF.streams['heldout-full'];
const T = 70;           // (prefill: one block of 64 x rows and a tail of 6)
const TOKENS = STREAM.tokens.slice(0, T);
/** PyTorch's float64 logits of the float32 checkpoint (scripts/llama/reference.py), stored as float32. */
const TORCH = new Float32Array(REF_BIN.buffer.slice(REF_BIN.byteOffset + STREAM.offset, REF_BIN.byteOffset + STREAM.offset + T * V * 4));

let sdpa, sdpa2;
const reference = new Map();    // weightDtype -> its float64 logits [T, V]
test.before(async () => {
  sdpa = await createSdpa({ threads: 1 });
  sdpa2 = await createSdpa({ threads: 2 });
});
test.after(() => { sdpa?.dispose(); sdpa2?.dispose(); });

function referenceOf(weightDtype) {
  if (!reference.has(weightDtype)) reference.set(weightDtype, referenceForward(referenceWeights(CHECKPOINT, weightDtype), TOKENS));
  return reference.get(weightDtype);
}

const maxAbs = (a) => a.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
function maxErr(got, want, from = 0) {
  let e = 0;
  for (let i = 0; i < got.length; i++) e = Math.max(e, Math.abs(got[i] - want[from + i]));
  return Number.isNaN(e) ? Infinity : e;
}

test('the float64 reference on float32 weights equals PyTorch\'s reference (to the float32 rounding of its stored logits)', () => {
  const ref = referenceOf('float32');
  for (let i = 0; i < T * V; i++) {
    if (!(Math.abs(ref[i] - TORCH[i]) <= 2 ** -23 * (1 + Math.abs(TORCH[i])))) assert.unreachable(`logit ${i}: ${ref[i]} vs PyTorch's ${TORCH[i]}`);
  }
});

for (const weightDtype of ['float32', 'float16', 'q8_0', 'q4_0']) {
  test(`weightDtype ${weightDtype}: logits equal the float64 forward over the stored weights, prefill and token by token; 1 and 2 threads the same bits`, () => {
    const ref = referenceOf(weightDtype);
    const tol = 1e-5 * (1 + maxAbs(ref));
    const m = loadLlama(sdpa, CHECKPOINT, { weightDtype });
    assert.is(m.weightDtype, weightDtype);
    const all = m.forward(TOKENS);
    const e = maxErr(all, ref);
    assert.ok(e <= tol, `${weightDtype} prefill: max |error| ${e} > ${tol}`);
    m.truncate(0);
    const row = new Float32Array(V);
    let e1 = 0;
    for (let i = 0; i < T; i++) {
      m.forward([TOKENS[i]], { out: row });
      e1 = Math.max(e1, maxErr(row, ref, i * V));
    }
    assert.ok(e1 <= tol, `${weightDtype} token by token: max |error| ${e1} > ${tol}`);
    // the quantization is there: these logits are not the float32 model's
    if (weightDtype !== 'float32') {
      const q = maxErr(all, TORCH);
      assert.ok(q > 10 * tol, `${weightDtype}: logits within ${q} of the float32 model's; expected the quantization to show`);
    }
    const m2 = loadLlama(sdpa2, CHECKPOINT, { weightDtype });
    assert.ok(sameBits(m2.forward(TOKENS), all), `${weightDtype}: 2 threads`);
    m.dispose(); m2.dispose();
  });
}

// activations 'int16' (loadLlama's option, sdpa.linear's: every q8_0 / q4_0
// product on x quantized per row and block of 32 to int16). No bound is
// derived through the layers (norms, softmax, SwiGLU); the tolerance is
// measured against the same float64 forward over the dequantized weights (float
// activations): max |error| 3.4e-4 q8_0, 3.4e-4 q4_0 (2.0e-5 (1 + max |logit|);
// relaxed build 3.2e-4, 3.4e-4), prefill and token by token; held to
// INT16_TOL = 4e-5 (1 + max |logit|), 6.7e-4 here. A broken int16 path is
// outside it (one term of the block dot with its sign flipped: errors of about
// 11; x rounded toward zero instead of to nearest: 1.1e-3 q8_0, 8.1e-4 q4_0).
// Greedy text from the prompt stream: the 48 tokens of int16 activations equal
// those of float activations, for both weight dtypes (measured 60 of 60).
const INT16_TOL = 4e-5;

for (const weightDtype of ['q8_0', 'q4_0']) {
  test(`weightDtype ${weightDtype}, activations int16: logits within ${INT16_TOL} (1 + max |logit|) of the float64 forward, prefill and token by token; other bits than float activations; 1 and 2 threads the same bits`, () => {
    const ref = referenceOf(weightDtype);
    const tol = INT16_TOL * (1 + maxAbs(ref));
    const m = loadLlama(sdpa, CHECKPOINT, { weightDtype, activations: 'int16' });
    assert.is(m.weightDtype, weightDtype);
    const all = m.forward(TOKENS);
    const e = maxErr(all, ref);
    assert.ok(e <= tol, `${weightDtype} int16 prefill: max |error| ${e} > ${tol}`);
    m.truncate(0);
    const row = new Float32Array(V);
    let e1 = 0;
    for (let i = 0; i < T; i++) {
      m.forward([TOKENS[i]], { out: row });
      e1 = Math.max(e1, maxErr(row, ref, i * V));
    }
    assert.ok(e1 <= tol, `${weightDtype} int16 token by token: max |error| ${e1} > ${tol}`);
    // the option is there: the logits leave float activations' tolerance, 1e-5 (1 + max |logit|)
    // (measured 1.9e-5 .. 2.0e-5 (1 + max |logit|) apart)
    const f = loadLlama(sdpa, CHECKPOINT, { weightDtype });
    const flt = f.forward(TOKENS);
    const d = maxErr(all, flt);
    assert.ok(d > 1e-5 * (1 + maxAbs(ref)), `${weightDtype}: int16 logits within ${d} of float activations'; expected the quantization of x to show`);
    const m2 = loadLlama(sdpa2, CHECKPOINT, { weightDtype, activations: 'int16' });
    assert.ok(sameBits(m2.forward(TOKENS), all), `${weightDtype} int16: 2 threads`);
    m.dispose(); m2.dispose(); f.dispose();
  });
}

test('activations int16: greedy text from the prompt equals float activations\' (48 tokens, q8_0 and q4_0); float16 weights: the same bits (no q8_0 / q4_0 product); a bad value is E_ARG', () => {
  const prompt = REF.streams.prompt.tokens;
  const tok = loadTokenizer(TOKENIZER);
  const N = 48;
  for (const weightDtype of ['q8_0', 'q4_0']) {
    const run = (activations) => {
      const m = loadLlama(sdpa, CHECKPOINT, { weightDtype, activations });
      const { tokens, stop } = m.generate(prompt, { temperature: 0, maxNewTokens: N, stop: [] });
      assert.is(stop, 'maxNewTokens');
      m.dispose();
      return Array.from(tokens);
    };
    const a = run('float32'), b = run('int16');
    let same = 0;
    while (same < N && a[same] === b[same]) same++;
    assert.is(same, N, `${weightDtype}: ${same} of ${N} greedy tokens agree:\n  float32: ${JSON.stringify(tok.decode(a))}\n  int16:   ${JSON.stringify(tok.decode(b))}`);
    assert.is(tok.decode(b), tok.decode(a));
  }
  const f = loadLlama(sdpa, CHECKPOINT, { weightDtype: 'float16' });
  const i = loadLlama(sdpa, CHECKPOINT, { weightDtype: 'float16', activations: 'int16' });
  assert.ok(sameBits(i.forward(TOKENS.slice(0, 8)), f.forward(TOKENS.slice(0, 8))), 'float16 weights: activations int16 changed bits');
  f.dispose(); i.dispose();
  // (null and undefined: the default, as for loadLlama's other options)
  for (const v of ['int8', 'INT16', 'float16', 16, true]) {
    expectError(() => loadLlama(sdpa, CHECKPOINT, { weightDtype: 'q8_0', activations: v }), 'E_ARG', [/^loadLlama: /, /options\.activations is /, /expected 'float32' or 'int16'/], `activations ${String(v)}`);
  }
});

test('the tolerance separates a wrong block layout: the weights\' bytes mangled in wasm memory are far outside it', () => {
  // (as if the kernels read the layout wrong: q4_0 nibbles swapped, q8_0 / float16 bytes swapped in pairs)
  const mangle = {
    q4_0: (b) => { for (let k = 0; k < b.length; k += 18) for (let j = 2; j < 18; j++) b[k + j] = (b[k + j] >>> 4) | ((b[k + j] & 15) << 4); },
    q8_0: (b) => { for (let k = 0; k < b.length; k += 34) for (let j = 2; j < 34; j += 2) [b[k + j], b[k + j + 1]] = [b[k + j + 1], b[k + j]]; },
    float16: (b) => { for (let j = 0; j < b.length; j += 2) [b[j], b[j + 1]] = [b[j + 1], b[j]]; },
  };
  for (const [weightDtype, f] of Object.entries(mangle)) {
    const s = sdpa;
    const before = new Set(s[INTERNALS].core.tensors);
    const m = loadLlama(s, CHECKPOINT, { weightDtype });
    const ref = referenceOf(weightDtype);
    const tol = 1e-5 * (1 + maxAbs(ref));
    const weights = [...s[INTERNALS].core.tensors].filter((t) => !before.has(t) && t.dtype === weightDtype);
    assert.is(weights.length, 1 + 7 * m.config.nLayers, `${weightDtype}: the model's matrices (the embedding, shared with the classifier, and 7 a layer)`);
    for (const t of weights) {
      const d = t.data, b = new Uint8Array(d.buffer, d.byteOffset, t.byteLength);
      f(b);
    }
    const e = maxErr(m.forward(TOKENS.slice(0, 8)), ref);
    assert.ok(e > 100 * tol, `${weightDtype} mangled: max |error| ${e}; expected far above ${tol}`);
    m.dispose();
  }
});

test.run();
