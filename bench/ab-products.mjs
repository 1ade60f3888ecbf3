// A/B of two wasm builds' weight products in one process: one token's products of a model
// shape (every layer's matrices, x one row), the two builds' calls alternating round by
// round (the order swapped every round), so that a load change on a shared machine hits
// both alike. Prints the median ms of each and the ratio base / this (> 1: this build is
// faster). --bits first checks that the two builds give the same output bits for `linear`
// and `embed` over random weights of every block dtype (for a change meant to keep them):
// normal float16 scales (2^-12 .. 2^-4 in magnitude; of either sign where ggml's quantizers make them so), |x| up to 500, 1, 3 and 5 x rows, the
// `simd` build on one thread; the tests hold the edges (non-finite scales, large x).
// Both builds run under this checkout's js/: a base from across an ABI change cannot load.
//
// Usage: node bench/ab-products.mjs --base=<a dist/ directory> [--this=<dist/ directory; default: ./dist>]
//          [--dtypes=q8_0,q4_0,q4_k] [--activations=float32] [--threads=1] [--rounds=11]
//          [--shape=135m|768] [--bits]
// A base build: a worktree at the older commit (`git worktree add`, then
// `node scripts/build.mjs --wasm` there), its dist/ given as --base.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createSdpa } from '../js/index.js';

const arg = (k, d) => (process.argv.find((a) => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const base = arg('base', '');
if (!base) {
  console.error('usage: node bench/ab-products.mjs --base=<dist dir> [--this=<dist dir>] [--dtypes=q8_0,q4_0,q4_k] [--activations=float32] [--threads=1] [--rounds=11] [--shape=135m|768] [--bits]');
  process.exit(2);
}
const here = arg('this', path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', 'dist'));
const threads = Number(arg('threads', 1)), rounds = Number(arg('rounds', 11));
const dtypes = arg('dtypes', 'q8_0,q4_0,q4_k').split(',');
const activations = arg('activations', 'float32');

// A block dtype's bytes per block, values per block, and where its float16 scales sit.
// The last entry: whether the scales take either sign, as ggml's quantizers make them (q4_0 / q5_0 / q6_k: d = max / -8,
// -16, -32 from the value of largest magnitude; q8_0: amax / 127, q4_k: d and dmin of maxima: positive).
const BLOCK = { q8_0: [34, 32, [0], false], q4_0: [18, 32, [0], true], q5_0: [22, 32, [0], true], q4_k: [144, 256, [0, 2], false], q6_k: [210, 256, [208], true] };
// [out, in] of one layer's matrices: q, k, v, o, gate, up, down
const LAYER = {
  '135m': { layers: 30, m: [[576, 576], [192, 576], [192, 576], [576, 576], [1536, 576], [1536, 576], [576, 1536]] },  // SmolLM2-135M (576: not whole q4_k blocks)
  768: { layers: 16, m: [[768, 768], [256, 768], [256, 768], [768, 768], [2048, 768], [2048, 768], [768, 2048]] },
};

const url = (dir) => pathToFileURL(path.resolve(dir) + '/').href;
const make = (dir) => createSdpa({ threads, build: threads > 1 ? 'simd-threads' : 'simd', wasmPaths: url(dir) });

/** A deterministic generator of bytes 0..255. */
function byteGen(seed) {
  return () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 255;
}

/** Random block bytes with float16 scales of magnitude 2^-12 .. 2^-4 (finite, normal), signed as the dtype's are. */
function blockBytes(dtype, n, rnd) {
  const [bb, , scales, signed] = BLOCK[dtype];
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = rnd();
  for (let k = 0; k < n; k += bb) {
    for (const off of scales) {
      const h = ((3 + (rnd() % 9)) << 10) | (rnd() << 2) | (signed && rnd() & 1 ? 0x8000 : 0);
      b[k + off] = h & 255; b[k + off + 1] = h >> 8;
    }
  }
  return b;
}

async function sameBits(a, b) {
  let total = 0, differ = 0;
  const rnd = byteGen(12345);
  for (const dtype of Object.keys(BLOCK)) {
    const bv = BLOCK[dtype][1];
    for (const [rows, cols, n] of [[37, 512, 1], [64, 768, 3], [16, 256, 5]]) {
      const bytes = blockBytes(dtype, rows * cols / bv * BLOCK[dtype][0], rnd);
      const xs = Float32Array.from({ length: n * cols }, (_, i) => ((rnd() / 255) - 0.5) * (i % 7 === 0 ? 1000 : 3));
      const outs = [a, b].map((s) => {
        const w = s.allocTensor(dtype, [rows, cols]); w.setBytes(bytes, 0);
        const x = s.allocTensor('float32', [n, cols]); x.data.set(xs);
        const o = s.linear(x, w, { activations });
        const e = s.embed(w, [0, 5 % rows, rows - 1]);
        const bits = [new Uint32Array(o.data.slice().buffer), new Uint32Array(e.data.slice().buffer)];
        for (const t of [w, x, o, e]) t.dispose();
        return bits;
      });
      for (let k = 0; k < 2; k++) for (let i = 0; i < outs[0][k].length; i++) { total++; if (outs[0][k][i] !== outs[1][k][i]) differ++; }
    }
  }
  console.log(`bits: ${total} outputs of linear and embed (${Object.keys(BLOCK).join(', ')}; activations ${activations}), ${differ} differ`);
}

/** One token's products of the shape in `s`: run() times them once. */
function token(s, dtype, shape) {
  const { layers, m } = LAYER[shape];
  const rnd = byteGen(7);
  const xs = new Map(), calls = [];
  for (let l = 0; l < layers; l++) {
    for (const [o, i] of m) {
      const w = s.allocTensor(dtype, [o, i]);
      w.setBytes(blockBytes(dtype, w.byteLength, rnd), 0);
      if (!xs.has(i)) { const x = s.allocTensor('float32', [1, i]); for (let k = 0; k < i; k++) x.data[k] = Math.sin(k * 0.37); xs.set(i, x); }
      calls.push([xs.get(i), w, { out: s.allocTensor('float32', [1, o]), activations }]);
    }
  }
  const bytes = calls.reduce((t, [, w]) => t + w.byteLength, 0);
  return {
    bytes,
    run() { const t0 = performance.now(); for (const [x, w, o] of calls) s.linear(x, w, o); return performance.now() - t0; },
    dispose() { for (const [, w, o] of calls) { w.dispose(); o.out.dispose(); } for (const x of xs.values()) x.dispose(); },
  };
}

for (const d of dtypes) if (!BLOCK[d]) { console.error(`--dtypes: ${d} is not a block dtype (${Object.keys(BLOCK).join(', ')})`); process.exit(2); }
const median = (v) => { const s = [...v].sort((x, y) => x - y); return s[s.length >> 1]; };
const A = await make(base), B = await make(here);
if (process.argv.includes('--bits')) await sameBits(A, B);
const shape = arg('shape', dtypes.some((d) => BLOCK[d]?.[1] === 256) ? '768' : '135m');
console.log(`one token's products of the ${shape} shape, ${threads} thread(s), activations ${activations}, ${rounds} rounds: median ms, base / this`);
for (const dtype of dtypes) {
  const a = token(A, dtype, shape), b = token(B, dtype, shape);
  for (let i = 0; i < 3; i++) { a.run(); b.run(); }
  const ta = [], tb = [];
  for (let r = 0; r < rounds; r++) {
    if (r & 1) { tb.push(b.run()); ta.push(a.run()); } else { ta.push(a.run()); tb.push(b.run()); }
  }
  const ma = median(ta), mb = median(tb);
  a.dispose(); b.dispose();
  console.log(`${dtype}: base ${ma.toFixed(2)} ms | this ${mb.toFixed(2)} ms (${(b.bytes / mb / 1e6).toFixed(2)} GB/s of weights) | base / this ${(ma / mb).toFixed(3)}`);
}
A.dispose(); B.dispose();
