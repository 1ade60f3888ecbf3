// gguf-limits.test.js: GGUF headers that once escaped the typed-error contract (found by a review;
// each test failed on 083b475): a metadata array past the JS engine's limit (the process died), a string
// past the engine's, a card with a key of another type, a fingerprint blind to the file's last bytes, and a
// source that never ends.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { spawnSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { inspectGguf, loadGguf } from '../../js/llama/index.js';
import { MAX_ARRAY_ELEMENTS, MAX_STRING_BYTES } from '../../js/llama/gguf.js';
import { createSdpa } from '../../js/index.js';
import { randomGguf } from '../../scripts/random-gguf.mjs';

const GGUF_JS = pathToFileURL(new URL('../../js/llama/gguf.js', import.meta.url).pathname).href;

/** A GGUF (v3, no tensors) with the given key/value records (each a Buffer after the key). */
function gguf(records, tail = 0) {
  const parts = [];
  const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); parts.push(b); };
  const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); parts.push(b); };
  parts.push(Buffer.from('GGUF')); u32(3); u64(0); u64(records.length);
  for (const [key, write] of records) { u64(Buffer.byteLength(key)); parts.push(Buffer.from(key)); write(u32, u64, parts); }
  const head = Buffer.concat(parts);
  const out = new Uint8Array(head.length + tail);
  out.set(head);
  return out;
}

test('a metadata array of 2^27 + 16 bools is E_FORMAT, not a dead process (V8 invalid size)', () => {
  // in a child: on main the process dies with SIGTRAP ("Fatal JavaScript invalid size error")
  const script = `
    import { parseGguf } from '${GGUF_JS}';
    const N = 2 ** 27 + 16;
    const h = Buffer.concat([Buffer.from('GGUF'), Buffer.from([3,0,0,0]), Buffer.alloc(8), Buffer.from([1,0,0,0,0,0,0,0]),
      Buffer.from([1,0,0,0,0,0,0,0]), Buffer.from('x'), Buffer.from([9,0,0,0]), Buffer.from([7,0,0,0]),
      (() => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(N)); return b; })()]);
    const bytes = new Uint8Array(h.length + N); bytes.set(h);
    try { parseGguf(bytes, 'parseGguf', bytes.length); console.log('PARSED'); }
    catch (e) { console.log('CODE', e.code); }`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 120000 });
  assert.is(r.signal, null, `the child died by ${r.signal}: ${r.stderr.split('\n').find((l) => /Fatal/.test(l))}`);
  assert.match(r.stdout, /CODE E_FORMAT/);
});

test('an array count past MAX_ARRAY_ELEMENTS is E_FORMAT before anything is read, with or without the file\'s length', async () => {
  const bytes = gguf([['tokens', (u32, u64) => { u32(9); u32(8); u64(MAX_ARRAY_ELEMENTS + 1); }]]);
  for (const source of [bytes, new Blob([bytes]).stream()]) {
    let err = null;
    try { await inspectGguf(source); } catch (e) { err = e; }
    assert.ok(err && err.code === 'E_FORMAT' && /the length of "tokens" is \d+; expected at most 16777216/.test(err.message), String(err && err.message));
  }
  // strings take at least their 8-byte length: 100 of them do not fit in 400 bytes
  const short = gguf([['names', (u32, u64) => { u32(9); u32(8); u64(100); }]], 400);
  let err = null;
  try { await inspectGguf(short); } catch (e) { err = e; }
  assert.ok(err && err.code === 'E_FORMAT' && /claims 100 elements of STRING \(at least 8 bytes each\)/.test(err.message), String(err && err.message));
});

test('a string value past MAX_STRING_BYTES is E_FORMAT (a longer one was Node\'s ERR_STRING_TOO_LONG)', async () => {
  const N = MAX_STRING_BYTES + 1;
  const bytes = gguf([['x', (u32, u64) => { u32(8); u64(N); }]], N);
  bytes.fill(0x61, bytes.length - N);
  let err = null;
  try { await inspectGguf(bytes); } catch (e) { err = e; }
  assert.ok(err !== null, 'resolved');
  assert.is(err.name, 'SdpaError', `${err.code}: ${err.message}`);
  assert.is(err.code, 'E_FORMAT');
  assert.match(err.message, /"x" has length 67108865 at byte \d+; expected at most 67108864 bytes/);
});

test("inspectGguf's card: name / architecture / chatTemplate are string | null as llama.d.ts says", async () => {
  const bytes = gguf([
    ['general.architecture', (u32) => { u32(4); u32(7); }],
    ['general.name', (u32) => { u32(4); u32(42); }],
    ['tokenizer.chat_template', (u32) => { u32(4); u32(1); }],
  ]);
  const card = await inspectGguf(bytes);
  assert.is(card.runnable, false);
  for (const k of ['architecture', 'name', 'chatTemplate', 'tokenizerModel']) {
    assert.ok(card[k] === null || typeof card[k] === 'string', `card.${k} is ${typeof card[k]} ${String(card[k])}`);
  }
});

test('model.fingerprint tells apart two files that differ in their last byte (length % 4 != 0)', async () => {
  const sdpa = await createSdpa({ threads: 1 });
  try {
    const a = randomGguf({ shape: 'tiny', type: 'F32', alignment: 1 });
    assert.ok(a.length % 4 !== 0, 'this shape gives a length % 4 == 0 file; pick another');
    const b = a.slice(); b[b.length - 1] ^= 0x40;
    const ma = (await loadGguf(sdpa, a)).model, mb = (await loadGguf(sdpa, b)).model;
    const la = ma.forward([1, 2, 3], { logits: 'last' }), lb = mb.forward([1, 2, 3], { logits: 'last' });
    assert.ok(la.some((x, i) => x !== lb[i]), 'the byte changed no logit: not a different model');
    assert.is.not(ma.fingerprint, mb.fingerprint);
  } finally { sdpa.dispose(); }
});

test('loadGguf settles once every tensor is in, though the source goes on (an endless chunked body)', async () => {
  const sdpa = await createSdpa({ threads: 1 });
  try {
    const file = randomGguf({ shape: 'tiny', type: 'Q8_0' });
    async function* endless() { yield file; const z = new Uint8Array(1 << 16); for (;;) { await new Promise((r) => setImmediate(r)); yield z; } }
    const ac = new AbortController();
    const settled = loadGguf(sdpa, endless(), { signal: ac.signal }).then((r) => { r.model.dispose(); return 'settled'; }, (e) => `rejected ${e.code}`);
    const r = await Promise.race([settled, new Promise((res) => setTimeout(() => res('pending after 5 s'), 5000))]);
    ac.abort();
    await settled;
    assert.is.not(r, 'pending after 5 s');
  } finally { sdpa.dispose(); }
});

test.run();
