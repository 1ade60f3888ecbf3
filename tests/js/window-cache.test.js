// window-cache.test.js: the windowed (ring) KV cache through the public API
// (createKVCache({ window, sinkTokens }), CONTRACT.md section 3).
// Every step's output is compared with the float64 reference over the whole
// sequence kept in JS, with the contract's visibility as a bool mask: key t
// is seen by query row p when t <= p and (t > p - W or t < S). Also: flat
// memory however long the sequence, the ring against a plain cache with the
// same window (bit-identical decode), every rule's error with the cache
// unchanged, fork and rollback.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa } from '../../js/index.js';
import { rng, randTensor, assertClose, expectError, sameBits } from './helpers.js';
import { refCustomSdpa, windowVisibility as visibility } from './reference.js';

const B = 1, HQ = 4, H = 2, D = 16;
let sdpa;
test.before(async () => { sdpa = await createSdpa({ threads: 2 }); });
test.after(() => { sdpa.dispose(); });

/** The whole sequence written so far, [B, L, H, D] as growing JS arrays. */
class History {
  constructor() { this.k = []; this.v = []; }
  get length() { return this.k.length; }
  write(k, v, sp) {
    const n = k.dims[1], row = H * D;
    for (let t = 0; t < n; t++) {
      this.k[sp + t] = k.data.slice(t * row, (t + 1) * row);
      this.v[sp + t] = v.data.slice(t * row, (t + 1) * row);
    }
  }
  truncate(n) { this.k.length = n; this.v.length = n; }
  dense(n, which) {
    const out = new Float32Array(n * H * D);
    for (let t = 0; t < n; t++) out.set(this[which][t], t * H * D);
    return { data: out, dims: [B, n, H, D] };
  }
}

/** The reference for q at sp: the window W (and the sink rows) through the mask; softcap and sinks from `extra`. */
function reference(hist, q, sp, W, S, extra = {}) {
  const n = q.dims[1], N = sp + n;
  return refCustomSdpa(q, hist.dense(N, 'k'), hist.dense(N, 'v'),
    { startPos: sp, attnMask: visibility(sp, n, W, S), softcap: extra.softcap, sinks: extra.sinks });
}

/** Replaces rows sp .. sp+n-1 of hist by the cache's stored values where it still keeps them; true when it keeps all. */
function syncStored(cache, hist, sp, n, S) {
  const spans = [[sp, Math.min(sp + n, S)], [Math.max(sp, cache.windowStart), sp + n]];
  let kept = 0;
  for (const [a, b] of spans) {
    if (b <= a) continue;
    const r = cache.read(a, b - a);
    hist.write(r.k, r.v, a);
    kept += b - a;
  }
  return kept === n;
}

test('createKVCache({ window, sinkTokens }): getters, maxSeqLen optional, storage flat over a long decode', () => {
  const W = 100, S = 4;
  const cache = sdpa.createKVCache({ numKvHeads: H, headDim: D, window: W, sinkTokens: S });
  assert.is(cache.window, W);
  assert.is(cache.sinkTokens, S);
  assert.is(cache.windowStart, S);
  assert.is(cache.maxSeqLen, 2 ** 31 - 1 - 65536, 'maxSeqLen defaults to the key index limit');
  const plain = sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: H, headDim: D });
  assert.is(plain.window, 0);
  assert.is(plain.sinkTokens, 0);
  assert.is(plain.windowStart, 0);
  plain.dispose();
  const rand = rng(7);
  const hist = new History();
  let bytesAtWindow = 0;
  for (let p = 0; p < 1200; p++) {
    const q = randTensor(rand, [B, 1, HQ, D]), k = randTensor(rand, [B, 1, H, D]), v = randTensor(rand, [B, 1, H, D]);
    const out = cache.step(q, k, v);
    hist.write(k, v, p);
    if (p % 97 === 0 || p > 1190) assertClose(out.data, reference(hist, q, p, W, S), `decode at ${p}`);
    if (p === W + 200) bytesAtWindow = cache.bytes;
  }
  assert.is(cache.length, 1200);
  assert.ok(cache.windowStart > S && cache.windowStart <= 1200 - W - 64, `windowStart ${cache.windowStart}`);
  assert.is(cache.bytes, bytesAtWindow, 'the bytes held stop growing once the ring is full');
  // kept rows read back exactly; evicted ones are E_CAPACITY
  const sinks = cache.read(0, S), win = cache.read(cache.windowStart, 1200 - cache.windowStart);
  assert.ok(sameBits(sinks.k.data, hist.dense(S, 'k').data), 'sink rows');
  const tail = hist.dense(1200, 'v').data.subarray(cache.windowStart * H * D);
  assert.ok(sameBits(win.v.data, tail), 'window rows');
  expectError(() => cache.read(cache.windowStart - 1, 1), 'E_CAPACITY', [/evicted/]);
  expectError(() => cache.readRaw(S, 1), 'E_CAPACITY', [/evicted/]);
  expectError(() => cache.read(1199, 2), 'E_CAPACITY');
  cache.dispose();
});

test('prefill steps of any length, narrower windows, softcap and sinks, against the reference', () => {
  const rand = rng(11);
  for (const [W, S, dtype] of [[64, 0, 'float32'], [65, 3, 'float32'], [130, 70, 'float32'], [128, 4, 'float16']]) {
    const cache = sdpa.createKVCache({ numKvHeads: H, headDim: D, window: W, sinkTokens: S, dtype });
    const hist = new History();
    const chunks = [150, 1, 1, 64, 1, 200, 1, 2, 1, 1];
    for (let j = 0; j < chunks.length; j++) {
      const n = chunks[j], sp = cache.length;
      const q = randTensor(rand, [B, n, HQ, D]), k = randTensor(rand, [B, n, H, D]), v = randTensor(rand, [B, n, H, D]);
      const opts = {};
      if (j % 3 === 1) opts.softcap = 0.8;
      if (j % 4 === 2) opts.sinks = { data: Float32Array.from([0.3, -2, 1, 0]), dims: [HQ] };
      if (j % 5 === 4) opts.window = W - 7;
      const out = cache.step(q, k, v, opts);
      hist.write(k, v, sp);
      // a float16 cache: the reference must see the stored values, read back where still kept
      if (dtype !== 'float32' && !syncStored(cache, hist, sp, n, S)) continue;  // a row of the step is gone already
      assertClose(out.data, reference(hist, q, sp, opts.window ?? W, S, opts), `W ${W} S ${S} ${dtype}: step ${j} of ${n} rows at ${sp}`);
    }
    // attend alone, for the last rows written
    const q = randTensor(rand, [B, 3, HQ, D]);
    assertClose(cache.attend(q).data, reference(hist, q, cache.length - 3, W, S), `W ${W}: attend`);
    cache.dispose();
  }
});

test('ring vs plain cache with the same window: bit-identical decode, a fraction of the memory', () => {
  const rand = rng(5), W = 200, L = 1500;
  for (const dtype of ['float32', 'int8']) {
    const ring = sdpa.createKVCache({ numKvHeads: H, headDim: D, window: W, dtype });
    const plain = sdpa.createKVCache({ maxSeqLen: L, numKvHeads: H, headDim: D, dtype });
    let differ = 0;
    for (let p = 0; p < L; p++) {
      const q = randTensor(rand, [B, 1, HQ, D]), k = randTensor(rand, [B, 1, H, D]), v = randTensor(rand, [B, 1, H, D]);
      const a = ring.step(q, k, v), b = plain.step(q, k, v, { isCausal: true, window: W });
      if (!sameBits(a.data, b.data)) differ++;
    }
    assert.is(differ, 0, `${dtype}: decode steps that differ`);
    assert.ok(ring.bytes * 3 < plain.bytes, `${dtype}: ring ${ring.bytes} bytes, plain ${plain.bytes}`);
    ring.dispose();
    plain.dispose();
  }
});

test('windowed-cache rules: typed errors, and a rejected call changes nothing', () => {
  expectError(() => sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: H, headDim: D, sinkTokens: 2 }), 'E_ARG', [/sinkTokens/, /window/]);
  expectError(() => sdpa.createKVCache({ numKvHeads: H, headDim: D, window: -3 }), 'E_DIMS', [/window/]);
  expectError(() => sdpa.createKVCache({ numKvHeads: H, headDim: D, window: 8, sinkTokens: 1.5 }), 'E_DIMS', [/sinkTokens/]);
  // a bad window with sinkTokens: the window's rule, in createKVCache's words (not kvCacheSize's, not "no window")
  for (const window of [-1, 0, 1.5, 2 ** 31]) {
    for (const make of [(c) => sdpa.createKVCache(c), (c) => sdpa.createKVCacheGroup([c])]) {
      const e = expectError(() => make({ maxSeqLen: 8, numKvHeads: H, headDim: D, window, sinkTokens: 5 }), 'E_DIMS', [/window is /]);
      assert.not.match(e.message, /kvCacheSize|no window/);
    }
  }
  expectError(() => sdpa.createKVCache({ numKvHeads: H, headDim: D }), 'E_ARG', [/maxSeqLen/]);
  const W = 70, S = 5, rand = rng(3);
  const cache = sdpa.createKVCache({ numKvHeads: H, headDim: D, window: W, sinkTokens: S });
  cache.update(randTensor(rand, [B, 400, H, D]), randTensor(rand, [B, 400, H, D]));
  const ws = cache.windowStart;
  assert.ok(ws > S && ws <= 400 - W - 64, `windowStart ${ws}`);
  const snapshot = () => ({ length: cache.length, ws: cache.windowStart, bytes: cache.bytes,
    sinks: cache.read(0, S), win: cache.read(cache.windowStart, cache.length - cache.windowStart) });
  const before = snapshot();
  const q1 = randTensor(rand, [B, 1, HQ, D]), k1 = randTensor(rand, [B, 1, H, D]), v1 = randTensor(rand, [B, 1, H, D]);
  const mask = { data: new Uint8Array(400).fill(1), dims: [1, 400] };
  expectError(() => cache.attend(q1, { attnMask: mask }), 'E_ARG', [/windowed cache/, /mask/]);
  expectError(() => cache.attend(q1, { isCausal: false }), 'E_ARG', [/isCausal/]);
  expectError(() => cache.attend(q1, { window: W + 1 }), 'E_ARG', [/wider/]);
  expectError(() => cache.attend(q1, { startPos: 400 }), 'E_START_POS', [/written/]);
  expectError(() => cache.attend(q1, { startPos: ws + W - 2 }), 'E_START_POS', [/evicted/]);
  expectError(() => cache.update(k1, v1, ws - 1), 'E_START_POS', [/evicted/]);
  expectError(() => cache.step(q1, k1, v1, ws - 1), 'E_START_POS', [/evicted/]);
  expectError(() => cache.update(randTensor(rand, [B, S + 2, H, D]), randTensor(rand, [B, S + 2, H, D]), 0), 'E_START_POS', [/evicted/]);
  expectError(() => cache.step(q1, k1, v1, { attnMask: { data: new Uint8Array(401).fill(1), dims: [1, 401] } }), 'E_ARG', [/mask/]);
  expectError(() => cache.truncate(ws - 1), 'E_CAPACITY', [/evicted/]);
  const after = snapshot();
  assert.equal([after.length, after.ws, after.bytes], [before.length, before.ws, before.bytes]);
  assert.ok(sameBits(after.sinks.k.data, before.sinks.k.data) && sameBits(after.win.v.data, before.win.v.data), 'rows unchanged');
  // the edges that work: the oldest row whose window is still kept, a narrower window, a sink row
  cache.attend(q1, { startPos: ws + W - 1 });
  cache.attend(q1, { startPos: ws + W - 2, window: W - 1 });
  cache.attend(q1, { startPos: 2 });
  cache.dispose();
});

test('fork, rollback of 64 rows and a reset to the sinks keep decoding right', () => {
  const W = 90, S = 6, rand = rng(9);
  const a = sdpa.createKVCache({ numKvHeads: H, headDim: D, window: W, sinkTokens: S });
  const ha = new History();
  const step = (cache, hist, n, check) => {
    const sp = cache.length;
    const q = randTensor(rand, [B, n, HQ, D]), k = randTensor(rand, [B, n, H, D]), v = randTensor(rand, [B, n, H, D]);
    const out = cache.step(q, k, v);
    hist.write(k, v, sp);
    if (check) assertClose(out.data, reference(hist, q, sp, W, S), `step of ${n} at ${sp}`);
  };
  step(a, ha, 300, true);
  const b = a.fork(), hb = new History();
  hb.k = ha.k.slice(); hb.v = ha.v.slice();
  for (let i = 0; i < 100; i++) { step(a, ha, 1, i % 9 === 0); step(b, hb, i % 10 ? 1 : 5, i % 9 === 0); }
  const keep = a.length - 64;   // always possible: at least window + 64 rows are kept
  a.truncate(keep); ha.truncate(keep);
  b.truncate(3); hb.truncate(3);
  assert.is(b.windowStart, S, 'down to the sinks: the window starts afresh');
  for (let i = 0; i < 120; i++) { step(a, ha, 1, i < 70 || i % 10 === 0); step(b, hb, i % 7 ? 1 : 20, i % 7 === 0); }
  a.dispose();
  b.dispose();
});

test.run();
