// gguf-abort.test.js: an abort ends loadGguf and inspectGguf at once, even while the source sends
// nothing (a stalled download, an async iterator whose return() waits behind its pending next()),
// and leaves no heap tensor; inspectGguf refuses what loadGguf refuses (its tokenizer, its memory).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, INTERNALS } from '../../js/index.js';
import { loadGguf, inspectGguf } from '../../js/llama/index.js';
import { randomGguf } from '../../scripts/random-gguf.mjs';
import { parseGguf } from '../../js/llama/gguf.js';
import { writeGguf } from '../../scripts/lib/gguf-writer.mjs';

const FILE = randomGguf({ shape: 'tiny', type: 'Q8_0' });
const header = parseGguf(FILE, 'test', FILE.length);

/** The file's first `n` bytes, then nothing, ever. */
function stalledIterable(n) {
  return (async function* () { yield FILE.slice(0, n); await new Promise(() => {}); })();
}
function stalledStream(n) {
  return new ReadableStream({ start(c) { c.enqueue(FILE.slice(0, n)); } });     // never closes
}
const settleWithin = (p, ms) => Promise.race([p.then(() => 'resolved', (e) => e), new Promise((r) => setTimeout(() => r('pending'), ms))]);

test('an abort rejects loadGguf / inspectGguf at once with the signal\'s reason while the source is stalled, before or after the header; no heap tensor is left', async () => {
  const sdpa = await createSdpa({ threads: 1 });
  const tensors = () => sdpa[INTERNALS].core.tensors.size;
  try {
    const before = tensors();
    const cases = [
      ['loadGguf, async iterable, stalled in the weights', (s) => loadGguf(sdpa, stalledIterable(header.dataOffset + 100), { signal: s })],
      ['loadGguf, async iterable, stalled in the header', (s) => loadGguf(sdpa, stalledIterable(20), { signal: s })],
      ['loadGguf, ReadableStream, stalled in the weights', (s) => loadGguf(sdpa, stalledStream(header.dataOffset + 100), { signal: s })],
      ['inspectGguf, ReadableStream, stalled in the header', (s) => inspectGguf(stalledStream(20), { signal: s })],
      ['inspectGguf, async iterable, stalled in the header', (s) => inspectGguf(stalledIterable(20), { signal: s })],
    ];
    for (const [what, start] of cases) {
      const ac = new AbortController(), reason = new Error(`stop: ${what}`);
      const p = start(ac.signal);
      await new Promise((r) => setTimeout(r, 50));
      ac.abort(reason);
      const got = await settleWithin(p, 2000);
      assert.is(got, reason, `${what}: ${got === 'pending' ? 'still pending 2 s after the abort' : `settled with ${got?.message ?? got}`}`);
      assert.is(tensors(), before, `${what}: heap tensors left`);
    }
  } finally {
    sdpa.dispose();
  }
});

test('inspectGguf is not runnable where loadGguf refuses: a tokenizer this build cannot build', async () => {
  const metadata = [...header.metadata].map(([k, v]) => [k, v]);
  const tensors = header.tensors.map((t) => ({ name: t.name, ne: t.ne, type: t.type, data: FILE.subarray(header.dataOffset + t.offset, header.dataOffset + t.offset + t.bytes) }));
  const withModel = (model) => writeGguf({
    metadata: metadata.map(([k, v]) => (k === 'tokenizer.ggml.model' ? [k, 'STRING', model] : [k, ...typed(v)])), tensors,
  });
  const good = await inspectGguf(FILE);
  assert.ok(good.runnable && good.problem === null, `the file itself runs: ${good.problem}`);
  const card = await inspectGguf(withModel('t5'));
  assert.is(card.runnable, false);
  assert.match(card.problem, /tokenizer\.ggml\.model/);
  const sdpa = await createSdpa({ threads: 1 });
  try {
    let e = null;
    try { await loadGguf(sdpa, withModel('t5')); } catch (x) { e = x; }
    assert.is(e?.code, 'E_FORMAT');
    assert.match(e.message, /tokenizer\.ggml\.model/);
  } finally {
    sdpa.dispose();
  }
});

/** [GGUF type, value] of a parsed metadata value (the writer's explicit form). */
function typed(v) {
  if (typeof v === 'string') return ['STRING', v];
  if (typeof v === 'boolean') return ['BOOL', v];
  if (typeof v === 'number') return [Number.isInteger(v) ? 'UINT32' : 'FLOAT32', v];
  if (v instanceof Float32Array) return [['ARRAY', 'FLOAT32'], v];
  if (v instanceof Int32Array) return [['ARRAY', 'INT32'], v];
  if (Array.isArray(v)) return [['ARRAY', 'STRING'], v];
  throw new Error(`test: no writer type for ${v?.constructor?.name}`);
}

test.run();
