// state-fuzz.test.js: fast-check mutates valid saves of KV state (docs/FORMAT.md) and
// loads them through sdpa.loadKVCache in every source form and chunking:
// truncations, bit flips, byte writes, header fields written (with the header CRC
// resealed, and sometimes the payload CRC too), trailing bytes; and group saves (the
// container is streamed by JS and checked by C), with the group header's fields written and resealed. The property:
//   - the load resolves to a cache, or rejects with an SdpaError E_FORMAT (E_OOM
//     for a resealed header asking for too much) naming sdpa.loadKVCache; never
//     another error, never a trap or a hang;
//   - a rejected load makes no cache and leaves the pool's bytes in use unchanged;
//   - an unchanged save loads to the same stored rows;
//   - whatever loads saves again and loads again to the same stored rows.
// Budget: SDPA_STATE_FUZZ_RUNS (default 1000) runs, at most SDPA_STATE_FUZZ_TIME_MS
// (default 30000) ms, seed SDPA_STATE_FUZZ_SEED.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import { createSdpa, SdpaError, INTERNALS } from '../../js/index.js';
import { fillCache, rawBytes, keptRanges, bytesEqual, resealHeader, crc32c } from '../fixtures/state-helpers.js';

const env = process.env;
const RUNS = Number(env.SDPA_STATE_FUZZ_RUNS) || 1000;
const TIME_MS = env.SDPA_STATE_FUZZ_TIME_MS === undefined ? 30000 : Number(env.SDPA_STATE_FUZZ_TIME_MS);
const SEED = env.SDPA_STATE_FUZZ_SEED !== undefined ? Number(env.SDPA_STATE_FUZZ_SEED) : 0x57a7e;

let sdpa;
test.before(async () => { sdpa = await createSdpa({ threads: 1 }); });
test.after(() => sdpa.dispose());

const geometry = fc.record({
  dtype: fc.constantFrom('float32', 'float16', 'int8', 'int4'),
  valueDtype: fc.constantFrom(null, 'float32', 'float16', 'int8', 'int4'),   // null: the same as dtype
  batch: fc.integer({ min: 1, max: 2 }),
  numKvHeads: fc.integer({ min: 1, max: 3 }),
  headDim: fc.integer({ min: 1, max: 40 }),
  windowed: fc.boolean(),
  window: fc.integer({ min: 1, max: 80 }),
  sinkTokens: fc.integer({ min: 0, max: 6 }),
  rows: fc.integer({ min: 0, max: 220 }),
  seed: fc.integer({ min: 1, max: 1000 }),
});
const mutation = fc.oneof(
  fc.record({ kind: fc.constant('flip'), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant('byte'), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constant('truncate'), at: fc.nat() }),
  fc.record({ kind: fc.constant('append'), n: fc.integer({ min: 1, max: 9 }) }),
  fc.record({ kind: fc.constant('field'), field: fc.integer({ min: 0, max: 23 }), value: fc.oneof(fc.nat(), fc.integer({ min: 0, max: 300 }), fc.constant(0xffffffff)), payloadToo: fc.boolean() }),
);
const delivery = fc.record({
  form: fc.constantFrom('bytes', 'array', 'async', 'stream', 'blob'),
  chunk: fc.integer({ min: 1, max: 5000 }),
});

function mutate(save, muts) {
  let s = save.slice();
  for (const m of muts) {
    if (s.length === 0) break;
    if (m.kind === 'flip') s[m.at % s.length] ^= 1 << m.bit;
    else if (m.kind === 'byte') s[m.at % s.length] = m.value;
    else if (m.kind === 'truncate') s = s.slice(0, m.at % (s.length + 1));
    else if (m.kind === 'append') { const t = new Uint8Array(s.length + m.n); t.set(s); s = t; }
    else if (m.kind === 'field' && s.length >= 100) {
      const dv = new DataView(s.buffer);
      dv.setUint32(4 * m.field, m.value >>> 0, true);
      const hb = dv.getUint32(12, true);
      if (hb >= 100 && hb <= s.length) {
        resealHeader(s);
        if (m.payloadToo && s.length >= hb + 4) dv.setUint32(s.length - 4, crc32c(s.subarray(hb, s.length - 4)), true);
      }
    }
  }
  return s;
}

function sourceOf(bytes, d) {
  const chunks = [];
  for (let i = 0; i < bytes.length; i += d.chunk) chunks.push(bytes.subarray(i, i + d.chunk));
  switch (d.form) {
    case 'bytes': return bytes;
    case 'array': return chunks;
    case 'async': return (async function* () { for (const c of chunks) yield c; })();
    case 'stream': { let i = 0; return new ReadableStream({ pull(ctl) { if (i < chunks.length) ctl.enqueue(chunks[i++]); else ctl.close(); } }); }
    default: return new Blob(chunks);
  }
}

const allRows = (c) => keptRanges(c).map(([s, n]) => rawBytes(c, s, n));
const sameRows = (a, b) => a.length === b.length && a.every((x, i) => bytesEqual(x, b[i]));

/** A rejected load: E_FORMAT (or E_OOM) from `fn`, only for changed bytes, the pool and the caches as they were. */
function rejected(err, fn, changed, pool, count, core) {
  if (!(err instanceof SdpaError)) throw err;
  assert.ok(err.code === 'E_FORMAT' || err.code === 'E_OOM', `${err.code}: ${err.message}`);
  assert.ok(err.message.startsWith(`${fn}: `), err.message);
  assert.ok(changed, `an unchanged save failed (${fn}): ${err.message}`);
  assert.is(sdpa.memory().bytesInUse, pool, 'pool unchanged');
  assert.is(core.caches.size, count, 'no cache made');
}

test(`mutated saves: a cache or E_FORMAT / E_OOM, nothing made on failure, the pool unchanged (${RUNS} runs)`, async () => {
  const core = sdpa[INTERNALS].core;
  const started = Date.now();
  await fc.assert(fc.asyncProperty(geometry, fc.array(mutation, { minLength: 0, maxLength: 4 }), delivery, async (g, muts, d) => {
    if (TIME_MS && Date.now() - started > TIME_MS) return;
    const dtypes = { keyDtype: g.dtype, valueDtype: g.valueDtype ?? g.dtype };
    const config = g.windowed
      ? { batch: g.batch, numKvHeads: g.numKvHeads, headDim: g.headDim, ...dtypes, window: g.window, sinkTokens: g.sinkTokens }
      : { batch: g.batch, numKvHeads: g.numKvHeads, headDim: g.headDim, ...dtypes, maxSeqLen: Math.max(1, g.rows + 10) };
    const orig = sdpa.createKVCache(config);
    try {
      fillCache(orig, g.seed, g.rows);
      const save = orig.save({ meta: { seed: g.seed } });
      const bytes = mutate(save, muts);
      const changed = !bytesEqual(bytes, save);
      const pool = sdpa.memory().bytesInUse, count = core.caches.size;
      let result = null, err = null;
      try { result = await sdpa.loadKVCache(sourceOf(bytes, d)); } catch (e) { err = e; }
      if (err !== null) {
        rejected(err, 'sdpa.loadKVCache', changed, pool, count, core);
        return;
      }
      const { cache } = result;
      try {
        if (!changed) assert.ok(sameRows(allRows(orig), allRows(cache)), 'an unchanged save loads the same rows');
        const again = cache.save();
        const { cache: twice } = await sdpa.loadKVCache(again);
        assert.ok(sameRows(allRows(cache), allRows(twice)), 'a re-save loads the same rows');
        assert.is(twice.length, cache.length);
        twice.dispose();
      } finally {
        cache.dispose();
      }
    } finally {
      orig.dispose();
    }
  }), { numRuns: RUNS, seed: SEED, endOnFailure: true });
});

// The group container (streamed by kv-state.js GroupSink, its header checked by C's sdpa_kv_group_header_check): mutated group saves.
const groupMutation = fc.oneof(
  fc.record({ kind: fc.constant('flip'), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant('byte'), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constant('truncate'), at: fc.nat() }),
  fc.record({ kind: fc.constant('append'), n: fc.integer({ min: 1, max: 9 }) }),
  fc.record({ kind: fc.constant('groupField'), field: fc.integer({ min: 2, max: 5 }), value: fc.oneof(fc.integer({ min: 0, max: 5 }), fc.nat(), fc.constant(0xffffffff)) }),
);

function mutateGroup(save, muts) {
  let s = save.slice();
  for (const m of muts) {
    if (s.length === 0) break;
    if (m.kind === 'groupField') {
      if (s.length < 28) continue;
      const dv = new DataView(s.buffer);
      dv.setUint32(4 * m.field, m.value >>> 0, true);
      const meta = dv.getUint32(16, true);
      if (28 + meta <= s.length) dv.setUint32(24 + meta, crc32c(s.subarray(0, 24 + meta)), true);   // resealed
    } else {
      s = mutate(s, [m]);
    }
  }
  return s;
}

test(`mutated group saves: a group or E_FORMAT / E_OOM naming loadKVCacheGroup, nothing made on failure (${Math.ceil(RUNS / 4)} runs)`, async () => {
  const core = sdpa[INTERNALS].core;
  const started = Date.now();
  await fc.assert(fc.asyncProperty(fc.array(geometry, { minLength: 1, maxLength: 3 }), fc.array(groupMutation, { minLength: 0, maxLength: 3 }), delivery, async (gs, muts, d) => {
    if (TIME_MS && Date.now() - started > TIME_MS) return;
    const configs = gs.map((g) => (g.windowed
      ? { numKvHeads: g.numKvHeads, headDim: g.headDim, keyDtype: g.dtype, valueDtype: g.valueDtype ?? g.dtype, window: g.window, sinkTokens: g.sinkTokens }
      : { numKvHeads: g.numKvHeads, headDim: g.headDim, keyDtype: g.dtype, valueDtype: g.valueDtype ?? g.dtype, maxSeqLen: 230 }));
    const orig = sdpa.createKVCacheGroup(configs);
    try {
      orig.layers.forEach((c, i) => fillCache(c, gs[i].seed, gs[0].rows));
      const save = orig.save({ meta: { n: gs.length } });
      const bytes = mutateGroup(save, muts);
      const changed = !bytesEqual(bytes, save);
      const pool = sdpa.memory().bytesInUse, count = core.caches.size;
      let result = null, err = null;
      try { result = await sdpa.loadKVCacheGroup(sourceOf(bytes, d)); } catch (e) { err = e; }
      if (err !== null) {
        rejected(err, 'sdpa.loadKVCacheGroup', changed, pool, count, core);
        return;
      }
      const { group } = result;
      try {
        if (!changed) group.layers.forEach((c, i) => assert.ok(sameRows(allRows(orig.layers[i]), allRows(c)), `layer ${i}: the same rows`));
        const { group: twice } = await sdpa.loadKVCacheGroup(group.save());
        twice.layers.forEach((c, i) => assert.ok(sameRows(allRows(group.layers[i]), allRows(c)), `layer ${i}: a re-save loads the same rows`));
        twice.dispose();
      } finally {
        group.dispose();
      }
    } finally {
      orig.dispose();
    }
  }), { numRuns: Math.ceil(RUNS / 4), seed: SEED + 1, endOnFailure: true });
});

test.run();
