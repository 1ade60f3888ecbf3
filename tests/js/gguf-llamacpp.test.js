// gguf-llamacpp.test.js: GGUF files that llama.cpp wrote (its llama2c converter and
// llama-quantize, not our converter), of the shipped model, in Q8_0, Q4_0 (+ a Q6_K
// classifier) and Q4_K_M (Q4_K, Q6_K, Q5_0, Q8_0 mixed): loadGguf's logits against a
// float64 forward over llama.cpp's own dequantization of each file
// (tests/data/gguf/reference.json, made by scripts/llama/llamacpp-ggufs.mjs), and the
// file's tokenizer against run.c's on the same text.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { createSdpa } from '../../js/index.js';
import { loadGguf, GGUF_MATRIX_TYPES } from '../../js/llama/index.js';

const DATA = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'data', 'gguf');
const reference = JSON.parse(fs.readFileSync(path.join(DATA, 'reference.json'), 'utf8'));

for (const [type, r] of Object.entries(reference.files)) {
  test(`llama.cpp's ${type} file (${Object.entries(r.tensorTypes).map(([t, n]) => `${n} ${t}`).join(', ')}): logits within 1e-5 (1 + max|logit|) of a float64 forward over llama.cpp's dequantization`, async () => {
    const bytes = fs.readFileSync(path.join(DATA, r.file));
    assert.is(crypto.createHash('sha256').update(bytes).digest('hex'), r.sha256, 'the committed file is the one the reference was made from');
    const runs = Object.keys(r.tensorTypes).every((t) => GGUF_MATRIX_TYPES.includes(t) || t === 'F32');
    assert.ok(runs, `this build runs ${GGUF_MATRIX_TYPES.join(', ')}; the file holds ${Object.keys(r.tensorTypes).join(', ')}`);
    const want = new Float32Array(Buffer.from(r.logits, 'base64').buffer.slice(0));
    for (const threads of [1, 2]) {
      const sdpa = await createSdpa({ threads });
      try {
        const { model, tokenizer, metadata } = await loadGguf(sdpa, bytes);
        assert.equal(metadata.tensorTypes, r.tensorTypes);
        assert.equal(Array.from(tokenizer.encode(reference.text, { bos: true })), reference.tokens, 'the file\'s SPM tokenizer gives run.c\'s ids');
        const got = model.forward(reference.tokens);
        assert.is(got.length, want.length);
        let maxAbs = 0, maxErr = 0;
        for (let i = 0; i < want.length; i++) { maxAbs = Math.max(maxAbs, Math.abs(want[i])); maxErr = Math.max(maxErr, Math.abs(got[i] - want[i])); }
        assert.ok(maxErr <= 1e-5 * (1 + maxAbs), `${type}, ${threads} thread(s): max |logit error| ${maxErr} > ${1e-5 * (1 + maxAbs)} (max |logit| ${maxAbs})`);
        // a broken kernel would be far off: the types differ from each other by much more than the tolerance
      } finally {
        sdpa.dispose();
      }
    }
  });
}

test('the three files are different quantizations: their references differ by far more than the tolerance', () => {
  const arrays = Object.values(reference.files).map((r) => new Float32Array(Buffer.from(r.logits, 'base64').buffer.slice(0)));
  for (let a = 0; a < arrays.length; a++) {
    for (let b = a + 1; b < arrays.length; b++) {
      let d = 0;
      for (let i = 0; i < arrays[a].length; i++) d = Math.max(d, Math.abs(arrays[a][i] - arrays[b][i]));
      assert.ok(d > 1e-2, `references ${a} and ${b} differ by ${d} only`);
    }
  }
});

test.run();
