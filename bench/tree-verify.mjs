// Speculative decoding: verifying 8 draft tokens in one step with a
// treeMask vs 8 single-token steps, and vs a plain causal step of 8 rows (the
// cost a tree mask should have), over A-2048 (Hq 32, Hkv 8, D 128, 2048 rows
// cached), heap tensors, 1 thread by default. Each timed call is followed by
// truncate(2048) (also timed, in every row alike) so every round starts from
// the same cache. Rounds interleave the three ways; medians in ms.
// Usage: node bench/tree-verify.mjs [--threads=1] [--rounds=40] [--build=simd-threads] [--dtype=float32]
import { createSdpa } from '../js/index.js';
import { now, stats, fmtMs, randomF32 } from './lib/util.mjs';

const arg = (k, d) => (process.argv.find((a) => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const threads = Number(arg('threads', 1)), rounds = Number(arg('rounds', 40)), build = arg('build', 'simd-threads');
const dtype = arg('dtype', 'float32');
const [Hq, Hkv, D, ctx, n] = [32, 8, 128, 2048, 8];

const sdpa = await createSdpa({ build, threads });
const cache = sdpa.createKVCache({ maxSeqLen: ctx + 64, numKvHeads: Hkv, headDim: D, dtype });
for (let t = 0; t < ctx; t += 256) {
  const kv = { data: randomF32(256 * Hkv * D, t + 1), dims: [1, 256, Hkv, D] };
  cache.update(kv, kv);
}
sdpa.reserve(sdpa.kvCacheSize({ maxSeqLen: ctx + 64, numKvHeads: Hkv, headDim: D, dtype }).poolBytes);
const heap = (dims, seed) => { const t = sdpa.allocTensor('float32', dims); t.set(randomF32(t.data.length, seed)); return t; };
const q8 = heap([1, n, Hq, D], 3), k8 = heap([1, n, Hkv, D], 4), v8 = heap([1, n, Hkv, D], 5), o8 = sdpa.allocTensor('float32', [1, n, Hq, D]);
const q1 = [], k1 = [], v1 = [], o1 = sdpa.allocTensor('float32', [1, 1, Hq, D]);
for (let i = 0; i < n; i++) { q1.push(heap([1, 1, Hq, D], 10 + i)); k1.push(heap([1, 1, Hkv, D], 20 + i)); v1.push(heap([1, 1, Hkv, D], 30 + i)); }
// a binary-ish draft tree of 8 nodes: parent[i] < i
const parent = [-1, 0, 0, 1, 1, 2, 3, 5];
const tree = sdpa.allocTensor('bool', [n, n]);
const tm = new Uint8Array(n * n);
for (let i = 0; i < n; i++) for (let a = i; a >= 0; a = parent[a]) tm[i * n + a] = 1;
tree.set(tm);
const treeOpts = { treeMask: tree, out: o8 }, causalOpts = { out: o8 }, oneOpts = { out: o1 };

const ways = {
  'tree step (8 rows, treeMask)': () => { cache.step(q8, k8, v8, ctx, treeOpts); cache.truncate(ctx); },
  'causal step (8 rows)': () => { cache.step(q8, k8, v8, ctx, causalOpts); cache.truncate(ctx); },
  '8 single-token steps': () => { for (let i = 0; i < n; i++) cache.step(q1[i], k1[i], v1[i], ctx + i, oneOpts); cache.truncate(ctx); },
};
const samples = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
for (let r = 0; r < rounds + 5; r++) {
  for (const [name, fn] of Object.entries(ways)) {
    const a = now();
    fn();
    if (r >= 5) samples[name].push(now() - a);
  }
}
const med = Object.fromEntries(Object.entries(samples).map(([k, s]) => [k, stats(s).median]));
console.log(`${sdpa.info.build}, ${threads} thread(s), ${dtype} cache; A-2048 (Hq ${Hq}, Hkv ${Hkv}, D ${D}, ${ctx} rows), verify ${n} draft tokens; median ms over ${rounds} interleaved rounds`);
for (const [k, m] of Object.entries(med)) console.log(`  ${k.padEnd(30)} ${fmtMs(m)}`);
const tr = med['tree step (8 rows, treeMask)'];
console.log(`  8 single steps / tree step: ${(med['8 single-token steps'] / tr).toFixed(2)}×; tree / causal step: ${(tr / med['causal step (8 rows)']).toFixed(3)}`);
sdpa.dispose();
