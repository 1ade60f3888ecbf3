// Rotary embeddings in the op: what a decode step with
// `rotary: { cos, sin }` costs over the same step without it (the target:
// <= 5% of the step), and over the alternative of rotating q and k in JS
// before the step (what a runtime does without the option). Shapes: a decode
// step per layer of Qwen2-0.5B (14/2/64) at 512 and 2048 keys, Llama-3.2-1B
// (32/8/64) at 2048, A-2048 (32/8/128); heap tensors everywhere (tables
// included: passed by address). Each timed step is followed by
// truncate(ctx) (in every row alike), so every round starts from the same
// cache. Rounds interleave the ways; medians in µs.
// Usage: node bench/rotary.mjs [--threads=1] [--rounds=300] [--build=simd-threads] [--dtype=float32] [--quick]
import { createSdpa } from '../js/index.js';
import { now, stats, randomF32 } from './lib/util.mjs';

const arg = (k, d) => (process.argv.find((a) => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const quick = process.argv.includes('--quick');
const threads = Number(arg('threads', 1)), rounds = Number(arg('rounds', quick ? 20 : 300)), build = arg('build', 'simd-threads');
const dtype = arg('dtype', 'float32');
const SHAPES = quick ? [['Qwen2-0.5B', 14, 2, 64, 512]] : [
  ['Qwen2-0.5B', 14, 2, 64, 512], ['Qwen2-0.5B', 14, 2, 64, 2048], ['Llama-3.2-1B', 32, 8, 64, 2048], ['A-2048', 32, 8, 128, 2048],
];

const sdpa = await createSdpa({ build, threads });
const f = Math.fround;
/** x (a Float32Array of rows of D) rotated in place at position p: the JS way (NeoX halves). */
function rotateJs(x, H, D, p, cos, sin) {
  const R = D / 2;
  for (let h = 0; h < H; h++) {
    const o = h * D;
    for (let j = 0; j < R; j++) {
      const c = cos[p * R + j], s = sin[p * R + j], a = x[o + j], b = x[o + j + R];
      x[o + j] = f(f(a * c) - f(b * s));
      x[o + j + R] = f(f(b * c) + f(a * s));
    }
  }
}

console.log(`${sdpa.info.build}, ${threads} thread(s), ${dtype} cache; one decode step per layer, median µs over ${rounds} interleaved rounds`);
console.log('  shape                      keys   plain    rotary   rotary/plain   JS rotation + plain');
for (const [name, Hq, Hkv, D, ctx] of SHAPES) {
  const maxPos = ctx + 64, R = D / 2;
  const cache = sdpa.createKVCache({ maxSeqLen: maxPos, numKvHeads: Hkv, headDim: D, dtype });
  for (let t = 0; t < ctx; t += 256) {
    const kv = { data: randomF32(256 * Hkv * D, t + 1), dims: [1, 256, Hkv, D] };
    cache.update(kv, kv);
  }
  sdpa.reserve(sdpa.kvCacheSize({ maxSeqLen: maxPos, numKvHeads: Hkv, headDim: D, dtype }).poolBytes);
  const heap = (dims, seed) => { const t = sdpa.allocTensor('float32', dims); t.set(randomF32(t.data.length, seed)); return t; };
  const q = heap([1, 1, Hq, D], 3), k = heap([1, 1, Hkv, D], 4), v = heap([1, 1, Hkv, D], 5), out = sdpa.allocTensor('float32', [1, 1, Hq, D]);
  const cosT = sdpa.allocTensor('float32', [maxPos, R]), sinT = sdpa.allocTensor('float32', [maxPos, R]);
  const cs = new Float32Array(maxPos * R), sn = new Float32Array(maxPos * R);
  for (let p = 0; p < maxPos; p++) for (let j = 0; j < R; j++) { const th = p * Math.pow(10000, -j / R); cs[p * R + j] = Math.cos(th); sn[p * R + j] = Math.sin(th); }
  cosT.set(cs); sinT.set(sn);
  const qs = q.data.slice(), ks = k.data.slice();
  const plainOpts = { out }, rotOpts = { out, rotary: { cos: cosT, sin: sinT } };
  const ways = {
    plain: () => { cache.step(q, k, v, ctx, plainOpts); cache.truncate(ctx); },
    rotary: () => { cache.step(q, k, v, ctx, rotOpts); cache.truncate(ctx); },
    js: () => {  // what a runtime does without the option: rotate copies in JS, then step
      const qd = q.data, kd = k.data;
      qd.set(qs); kd.set(ks);
      rotateJs(qd, Hq, D, ctx, cs, sn);
      rotateJs(kd, Hkv, D, ctx, cs, sn);
      cache.step(q, k, v, ctx, plainOpts);
      cache.truncate(ctx);
    },
  };
  const samples = { plain: [], rotary: [], js: [] };
  for (let r = 0; r < rounds + 10; r++) {
    for (const [w, fn] of Object.entries(ways)) {
      const a = now();
      fn();
      if (r >= 10) samples[w].push(now() - a);
    }
  }
  q.set(qs); k.set(ks);
  const m = Object.fromEntries(Object.entries(samples).map(([w, s]) => [w, stats(s).median * 1000]));
  console.log(`  ${`${name} (${Hq}/${Hkv}/${D})`.padEnd(26)} ${String(ctx).padStart(5)} ${m.plain.toFixed(1).padStart(7)} ${m.rotary.toFixed(1).padStart(8)}   ${(m.rotary / m.plain).toFixed(3).padStart(8)}       ${m.js.toFixed(1).padStart(7)}`);
  if (quick && !(m.rotary > 0 && m.plain > 0)) { console.error('rotary bench: no timings'); process.exitCode = 1; }
  for (const t of [q, k, v, out, cosT, sinT]) t.dispose();
  cache.dispose();
}
sdpa.dispose();
