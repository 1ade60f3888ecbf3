// state.test.js: saved KV state through the public API (cache.save / saveChunks /
// saveStream, sdpa.loadKVCache, the group forms; docs/FORMAT.md, CONTRACT.md
// section 3 "Saved state"): exact round trips for every dtype, plain and windowed
// caches, every source form; bit-identical attention and further steps after a
// restore, in this build and across builds (tests/fixtures/state-cross.mjs in a
// child Node with relaxed SIMD); a prefix forked per request; the save's rules in
// JS and C with the same words; E_FORMAT for every kind of bad input with no cache
// made and the pool unchanged; E_OOM from a header asking for too much; a save
// never changes the cache; sdpa.dispose() during a streaming save or load.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createSdpa, SdpaError, STATUS_CODES, INTERNALS } from '../../js/index.js';
import { expectError, expectReject } from './helpers.js';
import { fillCache, rawBytes, keptRanges, bytesEqual, attentionBytes, resealHeader } from '../fixtures/state-helpers.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let sdpa;
const PLAIN = { maxSeqLen: 256, numKvHeads: 2, headDim: 24 };
const WIN = { numKvHeads: 2, headDim: 16, window: 40, sinkTokens: 5 };

test.before(async () => { sdpa = await createSdpa({ threads: 2 }); });
test.after(() => sdpa.dispose());

const inUse = () => sdpa.memory().bytesInUse;
const cacheCount = () => sdpa[INTERNALS].core.caches.size;

function sameCache(a, b, label) {
  assert.is(b.length, a.length, `${label}: length`);
  assert.is(b.windowStart, a.windowStart, `${label}: windowStart`);
  assert.is(b.dtype, a.dtype, `${label}: dtype`);
  assert.is(b.keyDtype, a.keyDtype, `${label}: keyDtype`);
  assert.is(b.valueDtype, a.valueDtype, `${label}: valueDtype`);
  assert.equal([b.batch, b.numKvHeads, b.headDim, b.window, b.sinkTokens], [a.batch, a.numKvHeads, a.headDim, a.window, a.sinkTokens], `${label}: geometry`);
  for (const [s, n] of keptRanges(a)) assert.ok(bytesEqual(rawBytes(a, s, n), rawBytes(b, s, n)), `${label}: rows ${s} .. ${s + n - 1} identical`);
}

/** Attention of the original (a fork of it) and of the restored cache, then a step each: the same bits. */
function sameAttention(orig, restored, label) {
  const twin = orig.fork();
  const [a1, s1] = attentionBytes(twin, 5), [a2, s2] = attentionBytes(restored, 5);
  twin.dispose();
  assert.ok(bytesEqual(a1, a2), `${label}: attend bit-identical`);
  assert.ok(bytesEqual(s1, s2), `${label}: next step bit-identical`);
}

test('E_FORMAT is status 18, after E_OOM', () => {
  assert.is(STATUS_CODES[18], 'E_FORMAT');
  assert.is(STATUS_CODES.indexOf('E_OOM'), 17);
});

// every dtype, and K and V each a dtype of its own (the header keeps both)
for (const dtype of ['float32', 'float16', 'int8', 'int4', 'int8/int4', 'int4/float16']) {
  const [keyDtype, valueDtype = keyDtype] = dtype.split('/');
  for (const [name, config, rows] of [['plain', PLAIN, 150], ['windowed', WIN, 333]]) {
    test(`${dtype} ${name}: save -> loadKVCache is exact, attention and the next step bit-identical`, async () => {
      const c = sdpa.createKVCache({ ...config, keyDtype, valueDtype });
      fillCache(c, 3, rows);
      const before = rawBytes(c, ...keptRanges(c)[keptRanges(c).length - 1]);
      const bytesBefore = c.bytes;
      const save = c.save({ meta: { model: 'llama', tokens: [1, 2, 3] } });
      assert.ok(save instanceof Uint8Array);
      assert.ok(bytesEqual(rawBytes(c, ...keptRanges(c)[keptRanges(c).length - 1]), before), 'saving changed nothing');
      assert.is(c.bytes, bytesBefore);
      const { cache, meta } = await sdpa.loadKVCache(save);
      assert.equal(meta, { model: 'llama', tokens: [1, 2, 3] });
      assert.equal([cache.keyDtype, cache.valueDtype, cache.dtype], [keyDtype, valueDtype, keyDtype === valueDtype ? keyDtype : null]);
      assert.is(cache.maxSeqLen, c.maxSeqLen);
      assert.is(cache.bytes, c.bytes, 'the same pages');
      sameCache(c, cache, 'restored');
      sameAttention(c, cache, 'restored');
      // chunked, every chunk size the same bytes
      const plainSave = c.save();
      for (const chunkBytes of [1, 100, 4096, 1 << 22]) {
        const chunks = [...c.saveChunks({ chunkBytes })];
        assert.ok(chunks.slice(0, -1).every((x) => x.length === chunkBytes), 'chunks of chunkBytes');
        const joined = new Uint8Array(chunks.reduce((a, x) => a + x.length, 0));
        let o = 0;
        for (const x of chunks) { joined.set(x, o); o += x.length; }
        assert.ok(bytesEqual(joined, plainSave), `saveChunks(${chunkBytes}) = save()`);
        if (chunkBytes === 100) {
          const { cache: r2 } = await sdpa.loadKVCache(chunks);
          sameCache(c, r2, 'from an array of chunks');
          r2.dispose();
        }
      }
      cache.dispose();
      c.dispose();
    });
  }
}

test('every source form: Uint8Array (with an offset), ArrayBuffer, DataView, Blob, Response, ReadableStream, saveStream, async generator', async () => {
  const c = sdpa.createKVCache({ ...PLAIN, dtype: 'float16' });
  fillCache(c, 9, 90);
  const save = c.save({ meta: 'm' });
  const padded = new Uint8Array(save.length + 10);
  padded.set(save, 3);
  const stream = () => new ReadableStream({ start(ctl) { for (let i = 0; i < save.length; i += 999) ctl.enqueue(save.slice(i, i + 999)); ctl.close(); } });
  const sources = {
    'Uint8Array at an offset': padded.subarray(3, 3 + save.length),
    ArrayBuffer: save.slice().buffer,
    DataView: new DataView(save.slice().buffer),
    Blob: new Blob([save.subarray(0, 10), save.subarray(10)]),
    Response: new Response(new Blob([save])),
    ReadableStream: stream(),
    saveStream: c.saveStream({ chunkBytes: 777, meta: 'm' }),
    'async generator': (async function* () { for (let i = 0; i < save.length; i += 500) yield save.subarray(i, i + 500); })(),
    'Set of chunks': new Set([save.subarray(0, 7), save.subarray(7)]),
  };
  for (const [what, source] of Object.entries(sources)) {
    const { cache, meta } = await sdpa.loadKVCache(source);
    assert.is(meta, 'm', what);
    sameCache(c, cache, what);
    cache.dispose();
  }
  c.dispose();
});

test('a prefix saved once, forked per request: each fork goes on on its own', async () => {
  const c = sdpa.createKVCache(PLAIN);
  fillCache(c, 11, 120);
  const prefix = c.save({ length: 64, meta: { prompt: 'system' } });
  const { cache: base } = await sdpa.loadKVCache(prefix, { maxSeqLen: 200 });
  assert.is(base.length, 64);
  assert.is(base.maxSeqLen, 200);
  const ref = c.fork();
  ref.truncate(64);
  const outs = [];
  for (let r = 0; r < 3; r++) {
    const a = base.fork(), b = ref.fork();
    const [x1, y1] = attentionBytes(a, 100 + r), [x2, y2] = attentionBytes(b, 100 + r);
    assert.ok(bytesEqual(x1, x2) && bytesEqual(y1, y2), `request ${r}`);
    outs.push(y1);
    a.dispose(); b.dispose();
  }
  assert.not.ok(bytesEqual(outs[0], outs[1]), 'requests differ');
  assert.is(base.length, 64, 'the prefix is unchanged');
  // a save from a start: rows before it read as zeros
  const { cache: tail } = await sdpa.loadKVCache(c.save({ start: 64, length: 20 }));
  assert.is(tail.length, 84);
  assert.ok(bytesEqual(rawBytes(tail, 64, 20), rawBytes(c, 64, 20)));
  assert.ok(tail.read(0, 64).k.data.every((x) => x === 0), 'rows before start: zeros');
  for (const x of [c, base, ref, tail]) x.dispose();
});

test('a streaming save is a snapshot: writes after saveChunks() do not reach it; saving never changes the cache', async () => {
  const c = sdpa.createKVCache(PLAIN);
  fillCache(c, 12, 70);
  const expect = c.save();
  const it = c.saveChunks({ chunkBytes: 1000 });
  const first = it.next().value;
  fillCache(c, 99, 130);        // appends
  c.truncate(10);               // and rolls back
  fillCache(c, 98, 100);
  const chunks = [first, ...it];
  const { cache } = await sdpa.loadKVCache(chunks);
  const { cache: want } = await sdpa.loadKVCache(expect);
  sameCache(want, cache, 'snapshot');
  assert.is(cache.length, 70);
  for (const x of [c, cache, want]) x.dispose();
});

test('save rules: JS and C give the same code and words', () => {
  const { M, core } = sdpa[INTERNALS];
  const c = sdpa.createKVCache(PLAIN);
  fillCache(c, 1, 20);
  const w = sdpa.createKVCache({ numKvHeads: 1, headDim: 8, window: 16, sinkTokens: 3 });
  fillCache(w, 2, 300);
  const cases = [
    [c, { start: -1 }, 'E_START_POS', 'start is -1; expected a non-negative integer', -1, 0],
    [c, { length: -2 }, 'E_DIMS', 'length is -2; expected a non-negative integer', 0, -2],
    [c, { start: 10, length: 11 }, 'E_CAPACITY', 'rows 10 .. 20 are past the 20 rows written (cache.length); a save holds written rows only', 10, 11],
    [c, { start: 25 }, 'E_CAPACITY', 'rows 25 .. 25 are past the 20 rows written (cache.length); a save holds written rows only', 25, 0],
    [w, { length: w.windowStart - 1 }, 'E_CAPACITY', `the saved rows would end at row ${w.windowStart - 1}, inside the evicted rows 3 .. ${w.windowStart - 1} of the windowed cache; expected an end <= 3 (sink rows only) or >= ${w.windowStart}`, 0, w.windowStart - 1],
  ];
  // The same cases in C (sdpa_kv_save_begin, no JS validation): a C cache of the same geometry with as many
  // rows written (the rules read only its length and windowStart).
  for (const [cache, opts, code, words, start, length] of cases) {
    const e = expectError(() => cache.save(opts), code);
    assert.is(e.message, `KVCache.save: ${words}`);
    expectError(() => cache.saveChunks(opts), code, [new RegExp(`^KVCache\\.saveChunks: ${words.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`)]);
    const geo = cache === c ? [1, 256, 2, 24, 1, 0, 0] : [1, 2147418111, 1, 8, 1, 16, 3];
    const at = core.slot('ptr');
    core.views().u32[at >>> 2] = 0;
    assert.is(M._sdpa_kv_cache_create_windowed(core.ctx, ...geo, at), 0);
    const cp = core.views().u32[at >>> 2];
    const n = cache.length;
    for (let t = 0; t < n; t += 64) {
      const m = Math.min(64, n - t), len = m * geo[2] * geo[3];
      const p = M._malloc(len * 4) >>> 0;
      core.writeTensor(0, p, len, 'float32', [1, m, geo[2], geo[3]]);
      core.writeTensor(32, p, len, 'float32', [1, m, geo[2], geo[3]]);
      assert.is(M._sdpa_kv_cache_update(core.ctx, cp, core.slot('q'), core.slot('k'), t), 0);
      M._free(p);
    }
    assert.is(M._sdpa_kv_cache_window_start(cp), cache.windowStart);
    const out = core.slot('stats');
    const st = M._sdpa_kv_save_begin(core.ctx, cp, start, length, 0, 0, out);
    assert.is(STATUS_CODES[st], code, `C: ${words}`);
    assert.is(core.readCString(M._sdpa_ctx_last_error(core.ctx)), `sdpa_kv_save_begin: ${words}`);  // (C's entry: its own C name)
    M._sdpa_kv_cache_free(cp);
  }
  expectError(() => c.save({ meta: 1n }), 'E_ARG', [/meta must be a JSON value/]);
  expectError(() => c.save({ meta: () => 1 }), 'E_ARG', [/meta must be a JSON value, got a function/]);
  expectError(() => c.save({ meta: 'x'.repeat((1 << 20) + 1) }), 'E_ARG', [/meta is 1048579 bytes as JSON; at most 1048576/]);
  expectError(() => c.save({ metas: 1 }), 'E_ARG', [/metas/]);
  expectError(() => c.saveChunks({ chunkBytes: 0 }), 'E_DIMS', [/chunkBytes is 0/]);
  const boom = new Error('mine');
  try { c.save({ meta: { toJSON() { throw boom; } } }); assert.unreachable(); } catch (e) { assert.is(e, boom, 'the caller\'s own exception propagates'); }
  c.dispose(); w.dispose();
  expectError(() => c.save(), 'E_DISPOSED');
});

test('bad input is E_FORMAT naming what is wrong; no cache made, the pool unchanged', async () => {
  const c = sdpa.createKVCache({ ...PLAIN, dtype: 'int8' });
  fillCache(c, 4, 70);
  const save = c.save({ meta: { a: 1 } });
  c.dispose();
  const pool = inUse(), count = cacheCount();
  const bad = async (source, re, code = 'E_FORMAT', opts) => {
    await expectReject(sdpa.loadKVCache(source, opts), code, [/^sdpa\.loadKVCache: /, re]);
    assert.is(inUse(), pool, `pool unchanged (${re})`);
    assert.is(cacheCount(), count, 'no cache made');
  };
  for (const n of [0, 1, 8, 15, 16, 50, 100, 127, 128, 129, save.length >> 1, save.length - 4, save.length - 1]) await bad(save.subarray(0, n), /the data ends after \d+ bytes/);
  const flip = (i, bit = 1) => { const s = save.slice(); s[i] ^= bit; return s; };
  await bad(flip(0), /this is not saved KV state: byte 0 is 0x88, expected 0x89/);
  await bad(flip(30), /the header's CRC-32C is 0x[0-9a-f]{8} but the data says 0x[0-9a-f]{8}/);
  await bad(flip(save.length - 30), /the payload's CRC-32C/);
  await bad(flip(save.length - 2), /the payload's CRC-32C/);
  const v4 = save.slice(); v4[8] = 4;
  await bad(v4, /format version 4 is newer than this build; this build reads versions 1 to 3/);
  const v0 = save.slice(); v0[8] = 0;
  await bad(v0, /format version 0 is unknown/);
  const dt = (k, v) => { const s = save.slice(); s[20] = k; s[24] = v; return resealHeader(s); };
  await bad(dt(9, 9), /the key dtype is 9, which is no cache dtype/);
  await bad(dt(2, 4), /the key dtype is 2, which is no cache dtype/);
  await bad(dt(4, 0), /the value dtype is 0, which is no cache dtype/);
  // another (supported) dtype than the records were made for: the sizes no longer agree
  await bad(dt(5, 5), /the header's record sizes are 29 \(K\) and 29 \(V\) bytes; K int4 \/ V int4 at head dim 24 have 16 and 16/);
  await bad(dt(4, 3), /the header's record sizes are 29 \(K\) and 29 \(V\) bytes; K int8 \/ V float16 at head dim 24 have 29 and 48/);
  const field = (at, v) => { const s = save.slice(); new DataView(s.buffer).setUint32(at, v, true); return resealHeader(s); };
  await bad(field(36, 0), /the saved geometry is not a cache's: headDim is 0; expected a positive integer/);
  await bad(field(36, 2 ** 31), /the header's headDim is 2147483648; at most 2147418111/);
  await bad(field(72, 5), /the header says 5 payload bytes/);
  await bad(field(56, 300), /the header's length 300 is past its maxSeqLen 256/);
  await bad(save, /maxSeqLen is 69 but the saved cache has length 70; expected maxSeqLen >= 70/, 'E_FORMAT', { maxSeqLen: 69 });
  // an int8 scale no encoder makes (payload CRC resealed)
  const s8 = save.slice(), dv = new DataView(s8.buffer);
  const hb = dv.getUint32(12, true);
  dv.setFloat32(hb + 24, -1, true);
  const { crc32c } = await import('../fixtures/state-helpers.js');
  dv.setUint32(s8.length - 4, crc32c(s8.subarray(hb, s8.length - 4)), true);
  await bad(s8, /the K record of batch row 0, head 0, row 0 \(byte \d+\) is invalid: its int8 scale is -1/);
  // trailing bytes, in one buffer and in chunks
  const longer = new Uint8Array(save.length + 3); longer.set(save);
  await bad(longer, new RegExp(`3 bytes follow the end of the saved cache \\(byte ${save.length}\\); expected none`));
  await bad([save, new Uint8Array(2)], new RegExp(`2 bytes follow the end of the saved cache \\(byte ${save.length}\\)`));
  // sources that fail or end early
  await bad((async function* () { yield save.subarray(0, 100); throw new Error('disk on fire'); })(), /the async iterable failed after 100 bytes: disk on fire/);
  let pulls = 0;
  await bad(new ReadableStream({ pull(ctl) { if (pulls++ === 0) ctl.enqueue(save.subarray(0, 10)); else ctl.error(new Error('reset')); } }), /the ReadableStream failed after 10 bytes: reset/);
  await bad(new ReadableStream({ start(ctl) { ctl.enqueue(save.subarray(0, 200)); ctl.close(); } }), /the data ends after 200 bytes, inside the rows/);
  await bad(new Response('nope', { status: 404 }), /the Response has status 404/);
  await bad([save.subarray(0, 10), 'text'], /the iterable gave the string "text" after 10 bytes; expected Uint8Array chunks/, 'E_ARG');
  await bad('a string', /source must be a Uint8Array/, 'E_ARG');
  await bad(save, /maxSeqLen is 0; expected a positive integer/, 'E_DIMS', { maxSeqLen: 0 });
  await bad(save, /maxSeq/, 'E_ARG', { maxSeq: 10 });
  // a header asking for more pages than the heap has: E_OOM, the pool as it was
  const huge = field(28, 1000000);   // batch 1e6 x 2 heads x 70 rows: 20 GB of pages
  new DataView(huge.buffer).setBigUint64(72, BigInt(1000000 * 2 * 70 * 2 * (24 + 5)), true);
  resealHeader(huge);
  await bad(huge, /bytes of pages; more than this build's address space/, 'E_OOM');
});

test('E_OOM while loading: the pages taken go back, and a smaller load still works', async () => {
  const c = sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: 1024 });
  fillCache(c, 1, 64);
  const s = c.save();
  const pool = inUse();
  const { cache } = await sdpa.loadKVCache(s);
  assert.is(inUse(), pool + c.bytes - sdpa.kvCacheSize({ maxSeqLen: 64, numKvHeads: 1, headDim: 1024 }, 0).bytes);
  cache.dispose(); c.dispose();
});

test('E_OOM when the pool runs out while a load takes its pages: the pool as it was, no cache, the instance goes on', async () => {
  const s2 = await createSdpa({ threads: 1 });
  try {
    const c = s2.createKVCache({ maxSeqLen: 64, numKvHeads: 2, headDim: 24, dtype: 'int8' });
    fillCache(c, 1, 10);
    const before = s2.memory().bytesInUse, caches = s2[INTERNALS].core.caches.size;
    // 1.5 GiB of the heap taken (malloc'ed, never touched), then a consistent header (CRC resealed) for
    // 7946 heads x 100 pages of int8 rows: 3 GB of pages, within the address space (so the pool really
    // tries to grow) and more than the heap has left
    const { M } = s2[INTERNALS];
    const hog = M._malloc(1.5 * 2 ** 30) >>> 0;
    assert.ok(hog !== 0, 'the heap gave 1.5 GiB');
    const h = c.save().slice();
    const dv = new DataView(h.buffer);
    dv.setUint32(28, 3973, true);      // batch
    dv.setUint32(40, 6400, true);      // maxSeqLen
    dv.setUint32(56, 6400, true);      // length
    dv.setUint32(80, 6400, true);      // rows per head
    dv.setBigUint64(72, BigInt(3973 * 2 * 6400 * 2 * 29), true);
    resealHeader(h);
    const hb = dv.getUint32(12, true);
    await expectReject(s2.loadKVCache(h.subarray(0, hb)), 'E_OOM', [/^sdpa\.loadKVCache: the page pool cannot grow by \d+ pages/]);
    assert.is(s2.memory().bytesInUse, before, 'pages in use as before');
    assert.is(s2[INTERNALS].core.caches.size, caches, 'no cache made');
    M._free(hog);
    const { cache } = await s2.loadKVCache(c.save());
    assert.ok(bytesEqual(rawBytes(cache, 0, 10), rawBytes(c, 0, 10)), 'a load still works');
  } finally {
    s2.dispose();
  }
});

test('KVCacheGroup: save / saveChunks / saveStream and loadKVCacheGroup, all layers, meta; a bad layer names it', async () => {
  const configs = [PLAIN, { ...WIN, dtype: 'int8' }, { ...PLAIN, dtype: 'float16' }];
  const g = sdpa.createKVCacheGroup(configs);
  g.layers.forEach((l, i) => fillCache(l, 20 + i, 100));
  const save = g.save({ meta: { model: 'm', layers: 3 } });
  const { group, meta } = await sdpa.loadKVCacheGroup(save);
  assert.equal(meta, { model: 'm', layers: 3 });
  assert.is(group.layers.length, 3);
  group.layers.forEach((l, i) => { sameCache(g.layers[i], l, `layer ${i}`); sameAttention(g.layers[i], l, `layer ${i}`); });
  const { group: g2 } = await sdpa.loadKVCacheGroup(g.saveStream({ chunkBytes: 333 }));
  g2.layers.forEach((l, i) => sameCache(g.layers[i], l, `stream layer ${i}`));
  const chunks = [...g.saveChunks({ chunkBytes: 50, meta: { model: 'm', layers: 3 } })];
  assert.ok(bytesEqual(new Uint8Array(await new Blob(chunks).arrayBuffer()), save), 'saveChunks = save');
  // prefix of every layer
  const { group: g3 } = await sdpa.loadKVCacheGroup(g.save({ length: 64 }));
  assert.is(g3.length, 64);
  expectError(() => g.save({ length: 101 }), 'E_CAPACITY', [/^KVCacheGroup\.save: layer 0: rows 0 \.\. 100 are past the 100 rows written/]);
  const pool = inUse(), count = cacheCount();
  await expectReject(sdpa.loadKVCacheGroup(save.subarray(0, save.length - 100)), 'E_FORMAT', [/^sdpa\.loadKVCacheGroup: layer 2: the data ends after/]);
  const flipped = save.slice(); flipped[save.length - 3000] ^= 4;
  const e = await expectReject(sdpa.loadKVCacheGroup(flipped), 'E_FORMAT', [/^sdpa\.loadKVCacheGroup: layer \d: /]);
  assert.not.match(e.message, /loadKVCache:/, `the layer's load is not named as well: ${e.message}`);
  await expectReject(sdpa.loadKVCacheGroup(g.layers[0].save()), 'E_FORMAT', [/not a saved KV cache group: byte 6 is 0x56, expected 0x47/]);
  await expectReject(sdpa.loadKVCache(save), 'E_FORMAT', [/not saved KV state: byte 6 is 0x47, expected 0x56/]);
  assert.is(inUse(), pool); assert.is(cacheCount(), count, 'failed group loads dispose the layers they made');
  for (const x of [g, group, g2, g3]) x.dispose();
});

test('save({ into }): the same bytes written into the caller\'s buffer (a view of it returned); a buffer too small or not the caller\'s is E_ARG, nothing written', () => {
  const c = sdpa.createKVCache(PLAIN);
  fillCache(c, 5, 90);
  const want = c.save({ meta: { a: 1 } });
  const buf = new Uint8Array(want.length + 100).fill(7);
  const got = c.save({ meta: { a: 1 }, into: buf });
  assert.ok(got.buffer === buf.buffer && got.byteOffset === 0 && got.length === want.length, 'a view of the caller\'s buffer');
  assert.equal(Buffer.from(got), Buffer.from(want));
  assert.ok(buf.subarray(want.length).every((x) => x === 7), 'nothing past the save is written');
  const small = new Uint8Array(want.length - 1).fill(9);
  expectError(() => c.save({ into: small, meta: { a: 1 } }), 'E_ARG', [new RegExp(`into has ${want.length - 1} bytes but the save takes ${want.length}`)]);
  assert.ok(small.every((x) => x === 9), 'nothing written');
  const heap = sdpa.allocTensor('float32', [want.length]);
  expectError(() => c.save({ into: new Uint8Array(heap.data.buffer, heap.data.byteOffset, want.length) }), 'E_ARG', [/view of wasm memory/]);
  expectError(() => c.save({ into: new Float32Array(want.length) }), 'E_ARG', [/into must be a Uint8Array/]);
  expectError(() => c.saveChunks({ into: buf }), 'E_ARG', [/into/]);
  const g = sdpa.createKVCacheGroup([PLAIN, PLAIN]);
  for (const layer of g.layers) fillCache(layer, 6, 40);
  const gwant = g.save();
  assert.equal(Buffer.from(g.save({ into: new Uint8Array(gwant.length) })), Buffer.from(gwant));
  for (const x of [c, heap, g]) x.dispose();
});

test('an unfinished saveChunks / saveStream lets its snapshot go when its cache (or group) is disposed; next() is then E_DISPOSED', async () => {
  const pool = inUse();
  const c = sdpa.createKVCache(PLAIN);
  fillCache(c, 1, 100);
  const it = c.saveChunks({ chunkBytes: 100 });
  it.next();
  c.dispose();
  assert.is(inUse(), pool, 'the snapshot went with the cache');
  expectError(() => it.next(), 'E_DISPOSED', [/its cache was disposed during the save; its snapshot was released/]);
  const d = sdpa.createKVCache(PLAIN);
  fillCache(d, 2, 100);
  d.saveStream({ chunkBytes: 100 });           // never read
  d.dispose();
  assert.is(inUse(), pool, 'an unread stream too');
  const g = sdpa.createKVCacheGroup([PLAIN, PLAIN, PLAIN]);
  for (const layer of g.layers) fillCache(layer, 3, 70);
  const gi = g.saveChunks({ chunkBytes: 64 });
  gi.next();
  const gs = g.saveStream({ chunkBytes: 64 });
  g.dispose();
  assert.is(inUse(), pool, 'a group\'s');
  expectError(() => gi.next(), 'E_DISPOSED');
  await expectReject(gs.getReader().read(), 'E_DISPOSED');
  // a save read to its end is not affected by a later dispose
  const e = sdpa.createKVCache(PLAIN);
  fillCache(e, 4, 100);
  const whole = e.save();
  const chunks = [...e.saveChunks({ chunkBytes: 4096 })];
  e.dispose();
  assert.equal(Buffer.concat(chunks), Buffer.from(whole));
});

test('an unfinished saveChunks / saveStream dropped while its cache lives: the garbage collector frees its snapshot', () => {
  const r = spawnSync(process.execPath, ['--expose-gc', path.join(ROOT, 'tests/fixtures/save-gc.mjs')], { cwd: ROOT, encoding: 'utf8', timeout: 60000 });
  assert.is(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  for (const kind of ['saveChunks', 'saveStream']) {
    const m = out[kind];
    assert.ok(m.heldBeforeGc > m.empty, `${kind}: the dropped snapshot held pages (${JSON.stringify(m)})`);
    assert.is(m.afterGc, m.empty, `${kind}: back to the baseline after GC (${JSON.stringify(m)})`);
  }
});

test('AbortSignal: a load from a stream that never ends, aborts at every chunk boundary, an aborted signal, a stream save: the abort reason, nothing kept', async () => {
  const pool = inUse(), caches = sdpa[INTERNALS].core.caches.size;
  const c = sdpa.createKVCache(PLAIN);
  fillCache(c, 1, 100);
  const save = c.save();
  const after = () => { assert.is(inUse(), pool + c.bytes - sdpa.kvCacheSize(PLAIN, 0).bytes, 'the pool as before the load'); assert.is(sdpa[INTERNALS].core.caches.size, caches + 1, 'no cache made'); };
  // a stream that gives its first 1000 bytes, then stalls forever
  const ac = new AbortController();
  let cancelled = false;
  const stalled = new ReadableStream({
    start(ctl) { ctl.enqueue(save.slice(0, 1000)); },
    pull() { return new Promise(() => {}); },
    cancel() { cancelled = true; },
  });
  const pending = sdpa.loadKVCache(stalled, { signal: ac.signal });
  await new Promise((r) => setTimeout(r, 20));
  ac.abort();
  const err = await pending.then(() => null, (e) => e);
  assert.ok(err instanceof Error && err.name === 'AbortError', `rejected with ${err}`);
  assert.ok(cancelled, 'the source was cancelled');
  after();
  // an abort before each chunk in turn (and a reason of the caller's own)
  const chunks = [];
  for (let at = 0; at < save.length; at += 700) chunks.push(save.slice(at, at + 700));
  for (let k = 0; k < chunks.length; k++) {
    const ctl = new AbortController();
    const reason = new Error(`stop before chunk ${k}`);
    const source = (async function* () {
      for (let i = 0; i < chunks.length; i++) {
        if (i === k) ctl.abort(reason);
        await new Promise((r) => setTimeout(r, 0));
        yield chunks[i];
      }
    })();
    const e = await sdpa.loadKVCache(source, { signal: ctl.signal }).then(() => null, (x) => x);
    assert.is(e, reason, `chunk ${k}: rejected with the signal's reason`);
    after();
  }
  // a group load and an already aborted signal: nothing is read
  const g = sdpa.createKVCacheGroup([PLAIN, PLAIN]);
  for (const layer of g.layers) fillCache(layer, 2, 50);
  const gsave = g.save();
  let pulled = 0;
  const gac = new AbortController();
  gac.abort();
  const gerr = await sdpa.loadKVCacheGroup((function* () { pulled++; yield gsave; })(), { signal: gac.signal }).then(() => null, (x) => x);
  assert.ok(gerr?.name === 'AbortError' && pulled === 0, `${gerr}, ${pulled} chunks pulled`);
  const gac2 = new AbortController();
  const gp = sdpa.loadKVCacheGroup(new Blob([gsave.slice(0, 2000)]).stream().pipeThrough(new TransformStream({ async transform(ch, ctl) { ctl.enqueue(ch); await new Promise(() => {}); } })), { signal: gac2.signal });
  setTimeout(() => gac2.abort(), 10);
  assert.is((await gp.then(() => null, (x) => x))?.name, 'AbortError');
  // a stream save: aborted after its first chunk, it errors with the reason and lets the snapshot go
  const pool2 = inUse();
  const sac = new AbortController();
  const stream = g.saveStream({ chunkBytes: 256, signal: sac.signal });
  const reader = stream.getReader();
  assert.ok(!(await reader.read()).done);
  g.layers[0].truncate(0); g.layers[1].truncate(0);    // the snapshot alone holds the pages now
  assert.is(inUse(), pool2, 'the snapshot holds the pages the layers let go');
  sac.abort();
  assert.is((await reader.read().then(() => null, (x) => x))?.name, 'AbortError');
  assert.is(inUse(), pool2 - 2 * sdpa.kvCacheSize(PLAIN, 50).poolBytes, 'the snapshot went with the abort');
  // the instance goes on: the whole save loads
  const { cache } = await sdpa.loadKVCache(save, { signal: new AbortController().signal });
  assert.is(cache.length, 100);
  await expectReject(sdpa.loadKVCache(save, { signal: {} }), 'E_ARG', [/signal must be an AbortSignal/]);
  expectError(() => c.saveChunks({ signal: sac.signal }), 'E_ARG', [/signal/]);
  for (const x of [c, g, cache]) x.dispose();
});

test('sdpa.dispose() during a streaming save or a load: E_DISPOSED, nothing leaks into a dead instance', async () => {
  const s2 = await createSdpa({ threads: 1 });
  const c = s2.createKVCache(PLAIN);
  fillCache(c, 1, 100);
  const save = c.save();
  const it = c.saveChunks({ chunkBytes: 100 });
  it.next();
  const load = s2.loadKVCache((async function* () { yield save.subarray(0, 500); await new Promise((r) => setTimeout(r, 10)); yield save.subarray(500); })());
  await new Promise((r) => setTimeout(r, 1));
  s2.dispose();
  expectError(() => it.next(), 'E_DISPOSED', [/this sdpa instance was disposed during the save/]);
  await expectReject(load, 'E_DISPOSED', [/disposed during the load/]);
  await expectReject(s2.loadKVCache(save), 'E_DISPOSED');
});

test('across builds (simd, simd-threads, relaxed, relaxed-threads): identical rows, bit-identical attention and steps', () => {
  const r = spawnSync(process.execPath, ['--experimental-wasm-relaxed-simd', path.join(ROOT, 'tests/fixtures/state-cross.mjs')], { cwd: ROOT, encoding: 'utf8', timeout: 120000 });
  assert.is(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.equal(out.builds, ['simd', 'simd-threads', 'relaxed', 'relaxed-threads']);
  assert.equal(out.failures, []);
  assert.ok(out.checks > 300, `${out.checks} checks`);
});

test('SdpaError of a load is an SdpaError', async () => {
  const e = await expectReject(sdpa.loadKVCache(new Uint8Array(3)), 'E_FORMAT');
  assert.ok(e instanceof SdpaError);
});

test.run();
