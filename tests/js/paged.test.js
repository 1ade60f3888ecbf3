// paged.test.js: the paged KV cache (CONTRACT.md section 3) through
// the public API: length, appends, implied positions, truncate, fork
// (copy-on-write), the memory a cache really holds, and random sequences of
// operations on several caches of one instance checked after every operation
// against a plain model of the contents (JS arrays) and the float64 reference.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa } from '../../js/index.js';
import { rng, randTensor, randInt, assertClose, expectError, sameBits } from './helpers.js';
import { refCustomSdpa } from './reference.js';

const PAGE = 64;
let sdpa;
test.before(async () => { sdpa = await createSdpa({ threads: 2 }); });
test.after(() => { sdpa.dispose(); });

/** A plain model of a cache: rows[b][t] = { k: Float32Array(Hkv * D), v } (absent = zeros), and its length. */
class Model {
  constructor(B, S, H, D) { Object.assign(this, { B, S, H, D, length: 0 }); this.rows = Array.from({ length: B }, () => new Map()); }
  clone() { const m = new Model(this.B, this.S, this.H, this.D); m.length = this.length; m.rows = this.rows.map((r) => new Map(r)); return m; }
  write(k, v, sp) {
    const n = k.dims[1], row = this.H * this.D;
    for (let b = 0; b < this.B; b++) for (let t = 0; t < n; t++) {
      const at = (b * n + t) * row;
      this.rows[b].set(sp + t, { k: k.data.slice(at, at + row), v: v.data.slice(at, at + row) });
    }
    this.length = Math.max(this.length, sp + n);
  }
  truncate(n) { for (const r of this.rows) for (const t of [...r.keys()]) if (t >= n) r.delete(t); this.length = n; }
  /** { k, v } [B, n, H, D] of rows 0..n-1 (zeros where never written). */
  dense(n) {
    const row = this.H * this.D, k = new Float32Array(this.B * n * row), v = new Float32Array(this.B * n * row);
    for (let b = 0; b < this.B; b++) for (const [t, r] of this.rows[b]) if (t < n) { k.set(r.k, (b * n + t) * row); v.set(r.v, (b * n + t) * row); }
    return { k: { data: k, dims: [this.B, n, this.H, this.D] }, v: { data: v, dims: [this.B, n, this.H, this.D] } };
  }
}

function expectSame(cache, model, label) {
  assert.is(cache.length, model.length, `${label}: length`);
  const got = cache.read(0, model.S), want = model.dense(model.S);
  assert.ok(sameBits(got.k.data, want.k.data), `${label}: keys differ from the model`);
  assert.ok(sameBits(got.v.data, want.v.data), `${label}: values differ from the model`);
  const pages = model.B * model.H * Math.ceil(model.length / PAGE);
  assert.ok(cache.bytes >= pages * 2 * PAGE * model.D * 4, `${label}: cache.bytes ${cache.bytes} below ${pages} pages`);
}

test('length, append without startPos, attend without startPos = the last Sq rows written', () => {
  const rand = rng(11);
  const [Hq, Hkv, D] = [4, 2, 8];
  const cache = sdpa.createKVCache({ maxSeqLen: 200, numKvHeads: Hkv, headDim: D });
  const twin = sdpa.createKVCache({ maxSeqLen: 200, numKvHeads: Hkv, headDim: D });
  assert.is(cache.length, 0);
  const model = new Model(1, 200, Hkv, D);
  for (let n = 0; n < 150;) {
    const rows = randInt(rand, 1, 9);
    const q = randTensor(rand, [1, rows, Hq, D]), k = randTensor(rand, [1, rows, Hkv, D]), v = randTensor(rand, [1, rows, Hkv, D]);
    const implicit = cache.step(q, k, v, { isCausal: true });      // appends at cache.length
    const explicit = twin.step(q, k, v, n, { isCausal: true });    // the old call, same meaning
    assert.ok(sameBits(implicit.data, explicit.data), `step at ${n}: implicit == explicit position, bit for bit`);
    model.write(k, v, n);
    n += rows;
    assert.is(cache.length, n);
    const all = model.dense(n);
    assertClose(implicit.data, refCustomSdpa(q, all.k, all.v, { startPos: n - rows, isCausal: true }), `step at ${n - rows}`);
    const again = cache.attend(q, { isCausal: true });              // q = the last `rows` rows
    assert.ok(sameBits(again.data, implicit.data), 'attend without startPos = attend at length - Sq');
  }
  expectSame(cache, model, 'after appends');
  const n0 = cache.length;
  cache.update(randTensor(rand, [1, 2, Hkv, D]), randTensor(rand, [1, 2, Hkv, D]));  // update appends too
  assert.is(cache.length, n0 + 2);
  cache.dispose(); twin.dispose();
});

test('truncate gives whole pages back, and the rows past it read as zeros (rollback)', () => {
  const rand = rng(12);
  const D = 16, Hkv = 2, Hq = 4;
  const before = sdpa.memory();
  const cache = sdpa.createKVCache({ maxSeqLen: 1000, numKvHeads: Hkv, headDim: D });
  const model = new Model(1, 1000, Hkv, D);
  const k = randTensor(rand, [1, 300, Hkv, D]), v = randTensor(rand, [1, 300, Hkv, D]);
  cache.update(k, v);
  model.write(k, v, 0);
  const held = sdpa.memory().pagesInUse - before.pagesInUse;
  assert.is(held, Hkv * Math.ceil(300 / PAGE), 'pages held: ceil(300 / 64) per head');
  const q = randTensor(rand, [1, 1, Hq, D]);
  const at100 = cache.attend(q, { startPos: 99, isCausal: true });
  cache.truncate(100);
  model.truncate(100);
  expectSame(cache, model, 'after truncate(100)');
  assert.is(sdpa.memory().pagesInUse - before.pagesInUse, Hkv * 2, 'pages past row 99 went back to the pool');
  assert.ok(sameBits(cache.attend(q, { startPos: 99, isCausal: true }).data, at100.data), 'rows kept are unchanged');
  // regenerate: write again from 100
  const k2 = randTensor(rand, [1, 40, Hkv, D]), v2 = randTensor(rand, [1, 40, Hkv, D]);
  cache.update(k2, v2);
  model.write(k2, v2, 100);
  expectSame(cache, model, 'after regenerating');
  cache.truncate(0);
  model.truncate(0);
  expectSame(cache, model, 'after truncate(0)');
  assert.is(sdpa.memory().pagesInUse, before.pagesInUse, 'an empty cache holds no page');
  cache.dispose();
});

test('fork shares every page; the first write into a shared page copies that page only; the other cache never changes', () => {
  const rand = rng(13);
  const D = 8, Hkv = 1, Hq = 2;
  const base = sdpa.createKVCache({ maxSeqLen: 512, numKvHeads: Hkv, headDim: D });
  const model = new Model(1, 512, Hkv, D);
  const k = randTensor(rand, [1, 200, Hkv, D]), v = randTensor(rand, [1, 200, Hkv, D]);  // a system prompt: 4 pages
  base.update(k, v);
  model.write(k, v, 0);
  const m0 = sdpa.memory().pagesInUse;
  const a = base.fork(), b = base.fork();
  assert.is(sdpa.memory().pagesInUse, m0, 'fork takes no page');
  assert.is(a.length, 200);
  const ma = model.clone(), mb = model.clone();
  // a continues the prompt (row 200 is in page 3, shared): one page copied
  const ka = randTensor(rand, [1, 1, Hkv, D]), va = randTensor(rand, [1, 1, Hkv, D]);
  const qa = randTensor(rand, [1, 1, Hq, D]);
  const outA = a.step(qa, ka, va, { isCausal: true });
  ma.write(ka, va, 200);
  assert.is(sdpa.memory().pagesInUse, m0 + 1, 'the first write into a shared page copies that page only');
  assertClose(outA.data, refCustomSdpa(qa, ma.dense(201).k, ma.dense(201).v, { startPos: 200, isCausal: true }), 'fork a');
  // b rewrites row 10 (page 0): another copy, of page 0
  const kb = randTensor(rand, [1, 1, Hkv, D]), vb = randTensor(rand, [1, 1, Hkv, D]);
  b.update(kb, vb, 10);
  mb.write(kb, vb, 10);
  assert.is(sdpa.memory().pagesInUse, m0 + 2);
  expectSame(base, model, 'the base cache is unchanged');
  expectSame(a, ma, 'fork a');
  expectSame(b, mb, 'fork b');
  // truncating a fork releases only its own references
  a.truncate(50);
  ma.truncate(50);
  expectSame(a, ma, 'fork a truncated');
  expectSame(base, model, 'the base cache is unchanged by a fork\'s truncate');
  base.dispose();
  expectSame(b, mb, 'fork b outlives the base cache');
  a.dispose(); b.dispose();
  assert.is(sdpa.memory().pagesInUse, m0 - 4, 'every page back once all holders are gone');
});

test('memory held is ceil(length / page) pages: 16 layers for maxSeqLen 32768 holding 512 tokens cost 512 tokens', () => {
  const layers = 16, Hkv = 8, D = 64;
  const m0 = sdpa.memory();
  const caches = [];
  for (let l = 0; l < layers; l++) caches.push(sdpa.createKVCache({ maxSeqLen: 32768, numKvHeads: Hkv, headDim: D }));
  const k = { data: new Float32Array(512 * Hkv * D).fill(0.25), dims: [1, 512, Hkv, D] };
  for (const c of caches) c.update(k, k);
  const m1 = sdpa.memory();
  const tokenBytes = 512 * Hkv * D * 4 * 2 * layers;  // what 512 tokens of K and V cost
  const held = m1.bytesInUse - m0.bytesInUse;
  assert.is(m1.pagesInUse - m0.pagesInUse, layers * Hkv * 512 / PAGE);
  assert.ok(held >= tokenBytes && held <= tokenBytes * 1.01, `pages hold ${held} bytes for ${tokenBytes} bytes of tokens`);
  // cache.bytes: the pages as the pool counts them, plus the page table
  const tables = caches.reduce((a, c) => a + c.bytes, 0) - held;
  assert.is(tables, layers * Hkv * (32768 / PAGE) * 4, `page tables: ${tables} bytes`);
  for (const c of caches) c.dispose();
});

test('reserve grows the pool ahead, so that filling a cache takes no heap memory', () => {
  const fresh = sdpa.memory();
  sdpa.reserve(fresh.bytesFree + 4 * 1024 * 1024);
  const reserved = sdpa.memory();
  assert.ok(reserved.bytesFree >= fresh.bytesFree + 4 * 1024 * 1024, 'reserve: bytesFree grew');
  const cache = sdpa.createKVCache({ maxSeqLen: 4096, numKvHeads: 2, headDim: 64 });
  const k = { data: new Float32Array(2048 * 2 * 64), dims: [1, 2048, 2, 64] };  // 2 MiB of pages
  cache.update(k, k);
  assert.is(sdpa.memory().bytesReserved, reserved.bytesReserved, 'no pool growth after reserve');
  cache.dispose();
  expectError(() => sdpa.reserve(-1), 'E_ARG', [/reserve/]);
  expectError(() => sdpa.reserve('1'), 'E_ARG', [/reserve/]);
});

test('random step / update / truncate / fork / dispose sequences on several caches match the model and the reference', () => {
  const rand = rng(14);
  const [B, S, Hkv, Hq, D] = [2, 300, 2, 4, 12];
  let live = [{ cache: sdpa.createKVCache({ batch: B, maxSeqLen: S, numKvHeads: Hkv, headDim: D }), model: new Model(B, S, Hkv, D) }];
  const pool0 = sdpa.memory().pagesInUse;
  let ops = 0;
  for (let i = 0; i < 160; i++) {
    const c = live[randInt(rand, 0, live.length - 1)];
    const r = rand();
    const len = c.model.length;
    if (r < 0.45) {
      // a step: append, or rewrite an earlier position (speculative decoding)
      const rows = randInt(rand, 1, 6);
      const sp = rand() < 0.7 ? len : randInt(rand, 0, len);
      if (sp + rows > S) continue;
      const q = randTensor(rand, [B, rows, Hq, D]), k = randTensor(rand, [B, rows, Hkv, D]), v = randTensor(rand, [B, rows, Hkv, D]);
      const out = c.cache.step(q, k, v, sp, { isCausal: true });
      c.model.write(k, v, sp);
      const all = c.model.dense(sp + rows);
      assertClose(out.data, refCustomSdpa(q, all.k, all.v, { startPos: sp, isCausal: true }), `op ${i}: step at ${sp}`);
    } else if (r < 0.6) {
      const rows = randInt(rand, 1, 70);
      if (len + rows > S) continue;
      const k = randTensor(rand, [B, rows, Hkv, D]), v = randTensor(rand, [B, rows, Hkv, D]);
      c.cache.update(k, v);
      c.model.write(k, v, len);
    } else if (r < 0.72) {
      const n = randInt(rand, 0, len);
      c.cache.truncate(n);
      c.model.truncate(n);
    } else if (r < 0.85 && live.length < 5) {
      live.push({ cache: c.cache.fork(), model: c.model.clone() });
    } else if (r < 0.92 && live.length > 1) {
      c.cache.dispose();
      live = live.filter((x) => x !== c);
    } else {
      // a rejected write (a hole) changes nothing
      const k = randTensor(rand, [B, 1, Hkv, D]);
      if (len + 1 < S) expectError(() => c.cache.update(k, k, len + 1), 'E_START_POS', [/hole/]);
    }
    ops++;
    for (const x of live) expectSame(x.cache, x.model, `op ${i}`);
  }
  assert.ok(ops > 100, `${ops} operations ran`);
  for (const x of live) x.cache.dispose();
  assert.is(sdpa.memory().pagesInUse, pool0 - 0, 'every page is back in the pool');
});

test('errors: truncate and fork of a disposed cache, truncate arguments', () => {
  const cache = sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 4 });
  expectError(() => cache.truncate('1'), 'E_ARG', [/length/]);
  expectError(() => cache.truncate(1.5), 'E_START_POS', [/length/]);
  expectError(() => cache.truncate(1), 'E_CAPACITY', [/0 rows written/]);
  cache.dispose();
  expectError(() => cache.truncate(0), 'E_DISPOSED');
  expectError(() => cache.fork(), 'E_DISPOSED');
  assert.is(cache.length, 0);
});

test.run();
