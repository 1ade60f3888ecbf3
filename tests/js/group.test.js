// group.test.js: sdpa.createKVCacheGroup, the caches of all the layers of a
// model as one object (CONTRACT.md section 3, "Cache groups"): its layers are
// ordinary caches; create, fork and truncate check every layer first and
// change all or none; the results equal the same calls made layer by layer.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, KVCacheGroup, KVCache, INTERNALS } from '../../js/index.js';
import { rng, randTensor, assertClose, expectError, sameBits } from './helpers.js';
import { refCustomSdpa } from './reference.js';

let sdpa;
test.before(async () => { sdpa = await createSdpa({ threads: 1 }); });
test.after(() => { sdpa.dispose(); });

const [Hq, Hkv, D] = [4, 2, 8];
// a Gemma-like mix: windowed local layers, a plain global one, compact dtypes
const CONFIGS = [
  { maxSeqLen: 512, numKvHeads: Hkv, headDim: D },
  { window: 16, sinkTokens: 2, numKvHeads: Hkv, headDim: D },
  { maxSeqLen: 512, numKvHeads: Hkv, headDim: D, dtype: 'float16' },
  { maxSeqLen: 512, numKvHeads: Hkv, headDim: D, dtype: 'int8' },
];

/** Every row each layer holds, as read() gives them. */
const contents = (g) => g.layers.map((c) => {
  const keep = c.window ? [...Array(c.length).keys()].filter((t) => t < c.sinkTokens || t >= c.windowStart) : [...Array(c.length).keys()];
  return keep.map((t) => c.read(t, 1));
});
const sameContents = (a, b) => a.length === b.length && a.every((rows, i) => rows.length === b[i].length &&
  rows.every((r, t) => sameBits(r.k.data, b[i][t].k.data) && sameBits(r.v.data, b[i][t].v.data)));

test('a group is its layers: create, length, bytes, steps per layer equal separate caches', () => {
  const rand = rng(21);
  const group = sdpa.createKVCacheGroup(CONFIGS);
  assert.ok(group instanceof KVCacheGroup);
  assert.is(group.layers.length, 4);
  assert.ok(group.layers.every((c) => c instanceof KVCache));
  assert.ok(Object.isFrozen(group.layers));
  assert.equal([...group].map((c) => c.dtype), ['float32', 'float32', 'float16', 'int8']);
  assert.is(group.layers[1].window, 16);
  const alone = CONFIGS.map((c) => sdpa.createKVCache(c));
  assert.is(group.length, 0);
  for (let t = 0; t < 40; t += 5) {
    const q = randTensor(rand, [1, 5, Hq, D]), k = randTensor(rand, [1, 5, Hkv, D]), v = randTensor(rand, [1, 5, Hkv, D]);
    group.layers.forEach((c, i) => {
      const a = c.step(q, k, v), b = alone[i].step(q, k, v);
      assert.ok(sameBits(a.data, b.data), `layer ${i} at ${t}: same as a separate cache`);
    });
  }
  assert.is(group.length, 40);
  assert.is(group.bytes, alone.reduce((s, c) => s + c.bytes, 0));
  // length: the rows every layer holds
  group.layers[0].update(randTensor(rand, [1, 1, Hkv, D]), randTensor(rand, [1, 1, Hkv, D]));
  assert.is(group.length, 40);
  group.dispose();
  assert.is(group.disposed, true);
  assert.ok(group.layers.every((c) => c.disposed));
  for (const c of alone) c.dispose();
});

test('fork and truncate apply to every layer: a shared prompt, two conversations, a rollback', () => {
  const rand = rng(22);
  const group = sdpa.createKVCacheGroup(CONFIGS);
  const kv = (n) => [randTensor(rand, [1, n, Hkv, D]), randTensor(rand, [1, n, Hkv, D])];
  const prompt = kv(30);
  for (const c of group) c.update(...prompt);
  const before = contents(group);
  const twin = group.fork();
  assert.ok(twin instanceof KVCacheGroup && twin.layers.length === 4);
  assert.ok(sameContents(contents(twin), before), 'a fork holds the same rows');
  const mine = kv(20);
  for (const c of twin) c.update(...mine);
  assert.ok(sameContents(contents(group), before), 'writing the fork leaves the original unchanged');
  assert.is(twin.length, 50);
  // rollback of the fork's last 10 rows, in every layer
  twin.truncate(40);
  assert.is(twin.length, 40);
  assert.ok(twin.layers.every((c) => c.length === 40));
  // and attention over a layer is that of a cache holding the same rows
  const q = randTensor(rand, [1, 1, Hq, D]);
  const all = twin.layers[0].read(0, 40);
  assertClose(twin.layers[0].attend(q).data, refCustomSdpa(q, all.k, all.v, { startPos: 39, isCausal: true }), 'layer 0 after truncate');
  twin.dispose();
  group.dispose();
});

test('a rejected group call changes no layer, and names the layer', () => {
  const rand = rng(23);
  const group = sdpa.createKVCacheGroup(CONFIGS);
  for (const c of group) c.update(randTensor(rand, [1, 300, Hkv, D]), randTensor(rand, [1, 300, Hkv, D]));
  group.layers[2].truncate(260);  // layer 2 now holds fewer rows
  const before = contents(group);
  // layer 1 (window 16, sinks 2) evicted rows 2 .. windowStart-1; layer 2 holds 260 rows
  assert.ok(group.layers[1].windowStart > 70 && group.layers[1].windowStart < 260, `windowStart ${group.layers[1].windowStart}`);
  expectError(() => group.truncate(70), 'E_CAPACITY', [/^KVCacheGroup\.truncate: layer 1: /, /evicted/]);
  expectError(() => group.truncate(280), 'E_CAPACITY', [/layer 2: length 280 is past the 260 rows written/]);
  expectError(() => group.truncate(-1), 'E_START_POS', [/layer 0: /]);
  assert.ok(sameContents(contents(group), before), 'no layer changed');
  group.truncate(1);   // every layer: row 0 (a sink row of layer 1)
  assert.ok(group.layers.every((c) => c.length === 1));
  group.layers[3].dispose();
  expectError(() => group.fork(), 'E_DISPOSED', [/layer 3: /]);
  expectError(() => group.truncate(0), 'E_DISPOSED', [/layer 3: /]);
  group.dispose();
});

test('createKVCacheGroup: every layer is checked first; nothing is made for a rejected group', () => {
  const count = () => sdpa[INTERNALS].core.caches.size;
  const n0 = count();
  expectError(() => sdpa.createKVCacheGroup([CONFIGS[0], { maxSeqLen: 8, numKvHeads: 2, headDim: 8, dtype: 'int3' }]), 'E_DTYPE', [/^createKVCacheGroup: layers\[1\]: /, /int3/]);
  expectError(() => sdpa.createKVCacheGroup([CONFIGS[0], { numKvHeads: 2, headDim: 0, maxSeqLen: 8 }, { numKvHeads: 2 }]), 'E_ARG', [/layers\[2\]: /]);
  expectError(() => sdpa.createKVCacheGroup([]), 'E_ARG', [/empty/]);
  expectError(() => sdpa.createKVCacheGroup(CONFIGS[0]), 'E_ARG', [/array/]);
  expectError(() => sdpa.createKVCacheGroup(), 'E_ARG', [/missing/]);
  expectError(() => sdpa.createKVCacheGroup([CONFIGS[0], { numKvHeads: 2, headDim: 1 << 24, maxSeqLen: 64 }]), 'E_OOM', [/layers\[1\]: /]);
  assert.is(count(), n0, 'no cache was made');
  // E_OOM while making the layers (C's 3rd cache table fails: the tests' allocation fault): the two made are freed again
  const { M, core } = sdpa[INTERNALS];
  M._sdpa_ctx_fail_cache_alloc(core.ctx, 3);
  expectError(() => sdpa.createKVCacheGroup(CONFIGS), 'E_OOM', [/^createKVCacheGroup: layer 2: /, /cannot allocate/]);
  assert.is(count(), n0, 'all or nothing');
  // E_OOM while forking the layers (the 2nd fails): the fork made is freed again; the message names the call and the layer once
  const g = sdpa.createKVCacheGroup(CONFIGS);
  const n1 = count(), pages1 = sdpa.memory().pagesInUse;
  for (const c of g) c.update(randTensor(rng(24), [1, 3, Hkv, D]), randTensor(rng(25), [1, 3, Hkv, D]));
  M._sdpa_ctx_fail_cache_alloc(core.ctx, 2);
  const e = expectError(() => g.fork(), 'E_OOM', [/^KVCacheGroup\.fork: layer 1: /, /cannot allocate/]);
  assert.not.match(e.message, /KVCache\.fork/, 'the layer call is not named as well');
  assert.is(count(), n1, 'a fork is all or nothing');
  // no page reference was left behind by the fork freed: a write into layer 0's own last page takes no page
  const pages2 = sdpa.memory().pagesInUse;
  assert.ok(pages2 > pages1);
  g.layers[0].update(randTensor(rng(26), [1, 1, Hkv, D]), randTensor(rng(27), [1, 1, Hkv, D]));
  assert.is(sdpa.memory().pagesInUse, pages2, 'layer 0\'s last page was not shared');
  g.dispose();
  assert.is(sdpa.memory().pagesInUse, 0);
});

test('sdpa.dispose() disposes a group\'s layers', async () => {
  const one = await createSdpa({ threads: 1 });
  const g = one.createKVCacheGroup(CONFIGS.slice(0, 2));
  one.dispose();
  assert.is(g.disposed, true);
  g.dispose();  // a no-op
});

test.run();
