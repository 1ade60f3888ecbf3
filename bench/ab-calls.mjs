// A/B of the JS call path: small attention calls through the public API (where
// the snapshot, the JS-only rules, the copies and the entry's check weigh, not
// the kernels) of this checkout against another's, interleaved in one process
// (the order alternating each round), on the single-thread simd build. Per
// call: median microseconds of each and the ratio this / base (< 1: this tree
// is faster). Calls: a decode step of heap tensors (a model's step), a step,
// an attend and a customSdpa of typed arrays (copied in each call).
// Usage: node bench/ab-calls.mjs --base=/path/to/other/checkout [--rounds=60] [--per=50]
// Both trees need dist/ built (node scripts/build.mjs --wasm).
import path from 'node:path';
import { pathToFileURL, fileURLToPath } from 'node:url';

const arg = (k, d) => (process.argv.find((a) => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const base = arg('base', '');
if (!base) {
  console.error('usage: node bench/ab-calls.mjs --base=/path/to/other/checkout [--rounds=60] [--per=50]');
  process.exit(2);
}
const rounds = Number(arg('rounds', 60)), per = Number(arg('per', 50));
const here = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The calls of one tree's package, on an instance of its own. */
async function callsOf(dir) {
  const pkg = await import(pathToFileURL(path.join(dir, 'js', 'index.js')).href);
  const s = await pkg.createSdpa({ threads: 1, build: 'simd' });
  const H = 8, Hkv = 2, D = 64, ctx = 256;  // a small model's layer: 256 rows written
  const c = s.createKVCache({ maxSeqLen: 4096, numKvHeads: Hkv, headDim: D });
  const fill = new Float32Array(ctx * Hkv * D).fill(0.01);
  c.update({ data: fill, dims: [1, ctx, Hkv, D] }, { data: fill, dims: [1, ctx, Hkv, D] }, 0);
  const hq = s.allocTensor('float32', [1, 1, H, D]), hk = s.allocTensor('float32', [1, 1, Hkv, D]);
  const hv = s.allocTensor('float32', [1, 1, Hkv, D]), ho = s.allocTensor('float32', [1, 1, H, D]);
  const tq = { data: new Float32Array(H * D).fill(0.1), dims: [1, 1, H, D] };
  const tk = { data: new Float32Array(Hkv * D).fill(0.1), dims: [1, 1, Hkv, D] };
  const to = { data: new Float32Array(H * D), dims: [1, 1, H, D] };
  const q2 = { data: new Float32Array(4 * 16 * 64).fill(0.1), dims: [1, 4, 16, 64] };
  const k2 = { data: new Float32Array(64 * 4 * 64).fill(0.1), dims: [1, 64, 4, 64] };
  // (each step writes row `ctx` again: the cache stays as it is)
  return {
    'step, heap tensors': () => { c.step(hq, hk, hv, ctx, { out: ho }); },
    'step, typed arrays': () => { c.step(tq, tk, tk, ctx, { out: to }); },
    'attend, typed arrays': () => { c.attend(tq, { startPos: ctx - 1, out: to }); },
    'customSdpa, typed arrays': () => { s.customSdpa(q2, k2, k2, { isCausal: true, startPos: 60 }); },
  };
}

const peers = [await callsOf(path.resolve(base)), await callsOf(here)];
console.log(`simd, 1 thread, ${rounds} rounds x ${per} calls, median us per call: base (${base}) | this tree | this / base`);
for (const name of Object.keys(peers[1])) {
  const samples = [[], []];
  for (let w = 0; w < 200; w++) { peers[0][name](); peers[1][name](); }
  for (let r = 0; r < rounds; r++) {
    for (const j of r % 2 ? [1, 0] : [0, 1]) {
      const t0 = performance.now();
      for (let i = 0; i < per; i++) peers[j][name]();
      samples[j].push(((performance.now() - t0) / per) * 1000);
    }
  }
  const med = samples.map((x) => x.slice().sort((a, b) => a - b)[x.length >> 1]);
  console.log(`${name.padEnd(26)} ${med[0].toFixed(1).padStart(7)} | ${med[1].toFixed(1).padStart(7)} | ${(med[1] / med[0]).toFixed(3)}`);
}
process.exit(0);
