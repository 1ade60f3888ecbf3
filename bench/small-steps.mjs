// Small decode steps: does the thread pool pay? One layer's decode attention
// (1 query row over a cache of `ctx` rows, heap tensors, nothing allocated) of
// small browser models, timed interleaved on a 1-thread and a 2-thread
// instance of the same build, median over many rounds; and the first calls of
// a fresh instance (V8 tiers the glue up as it runs).
// Usage: node bench/small-steps.mjs [--rounds=200] [--build=simd-threads] [--first=12]
import { createSdpa } from '../js/index.js';
import { now, stats, fmtMs, randomF32 } from './lib/util.mjs';

const arg = (k, d) => (process.argv.find((a) => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const rounds = Number(arg('rounds', 200)), build = arg('build', 'simd-threads'), firstN = Number(arg('first', 12));

const MODELS = [
  { name: 'Qwen2-0.5B', Hq: 14, Hkv: 2, D: 64 },
  { name: 'Llama-3.2-1B', Hq: 32, Hkv: 8, D: 64 },
];
const CONTEXTS = [128, 512, 2048];

/** A cache of ctx rows and heap tensors for one decode step on `sdpa`. */
function open(sdpa, m, ctx) {
  const cache = sdpa.createKVCache({ maxSeqLen: ctx, numKvHeads: m.Hkv, headDim: m.D });
  const chunk = 256;
  for (let t = 0; t < ctx; t += chunk) {
    const n = Math.min(chunk, ctx - t);
    const kv = { data: randomF32(n * m.Hkv * m.D, t + 1), dims: [1, n, m.Hkv, m.D] };
    cache.update(kv, kv);
  }
  const q = sdpa.allocTensor('float32', [1, 1, m.Hq, m.D]);
  q.set(randomF32(m.Hq * m.D, 7));
  const out = sdpa.allocTensor('float32', [1, 1, m.Hq, m.D]);
  const opts = { startPos: ctx - 1, out };
  return { call: () => cache.attend(q, opts), dispose: () => { cache.dispose(); q.dispose(); out.dispose(); } };
}

const one = await createSdpa({ build, threads: 1 });
const two = await createSdpa({ build, threads: 2 });
console.log(`${build}; one layer's decode attention (1 query row), median µs over ${rounds} interleaved rounds`);
console.log('model          ctx    1 thread   2 threads   2t/1t');
const rows = [];
for (const m of MODELS) {
  for (const ctx of CONTEXTS) {
    const a = open(one, m, ctx), b = open(two, m, ctx);
    for (let w = 0; w < 50; w++) { a.call(); b.call(); }
    const ta = [], tb = [];
    for (let r = 0; r < rounds; r++) {
      let t0 = now(); a.call(); ta.push(now() - t0);
      t0 = now(); b.call(); tb.push(now() - t0);
    }
    const ma = stats(ta).median * 1000, mb = stats(tb).median * 1000;
    rows.push({ model: m.name, ctx, one: ma, two: mb });
    console.log(`${m.name.padEnd(14)} ${String(ctx).padStart(5)}  ${ma.toFixed(1).padStart(8)}  ${mb.toFixed(1).padStart(9)}   ${(mb / ma).toFixed(2)}×`);
    a.dispose(); b.dispose();
  }
}
one.dispose(); two.dispose();

// The first calls of a fresh instance (a 4-layer loop's first token, then later ones).
{
  const m = MODELS[0], ctx = 512;
  const sdpa = await createSdpa({ build, threads: 1 });
  const s = open(sdpa, m, ctx);
  const t = [];
  for (let i = 0; i < firstN; i++) { const t0 = now(); s.call(); t.push(now() - t0); }
  console.log(`first ${firstN} calls of a fresh instance (${m.name}, ctx ${ctx}, 1 thread), ms: ${t.map((x) => fmtMs(x)).join(' ')}`);
  s.dispose(); sdpa.dispose();
}
