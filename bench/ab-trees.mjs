// A/B of two checkouts' wasm builds in one process: this tree's dist/ against
// another tree's (e.g. a git worktree at main), every round timing 5 calls of
// each in turn (the order alternating), so that a load change on a shared
// machine hits both alike. Per shape and cache dtype: median ms of each and
// the ratio this / base (< 1: this tree is faster).
// Usage: node bench/ab-trees.mjs --base=/path/to/other/checkout [--threads=1]
//          [--shapes=A-8192,MQA-8192,B-4096] [--dtypes=float32,float16,int8] [--rounds=40] [--build=simd]
// Both trees need dist/ built (npm run build -- --wasm); the other tree is
// imported through its own bench/lib/sdpa-peer.mjs (bench/sdpa-peer.mjs in a
// checkout from before bench/lib/) and js/.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createSdpaPeer } from './lib/sdpa-peer.mjs';
import { SHAPES } from './lib/shapes.mjs';
import { randomF32, now, stats, fmtMs } from './lib/util.mjs';

const arg = (k, d) => (process.argv.find(a => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const base = arg('base', '');
if (!base) {
  console.error('usage: node bench/ab-trees.mjs --base=/path/to/other/checkout [--threads=1] [--shapes=...] [--dtypes=...] [--rounds=40]');
  process.exit(2);
}
const threads = Number(arg('threads', 1)), rounds = Number(arg('rounds', 40));
const build = arg('build', threads > 1 ? 'simd-threads' : 'simd');
const ids = arg('shapes', 'A-8192,MQA-8192,B-4096').split(',');
const dtypes = arg('dtypes', 'float32,float16,int8').split(',');

const basePeer = ['bench/lib/sdpa-peer.mjs', 'bench/sdpa-peer.mjs'].map((p) => path.resolve(base, p)).find((p) => fs.existsSync(p)) ?? path.resolve(base, 'bench/lib/sdpa-peer.mjs');
const basePeerModule = await import(pathToFileURL(basePeer).href);
const peers = [await basePeerModule.createSdpaPeer({ threads, build }), await createSdpaPeer({ threads, build })];
console.log(`${build}, ${threads} thread(s), ${rounds} rounds x 5 calls each, median ms: base (${base}) | this tree | this / base`);
for (const id of ids) {
  const s = SHAPES.find(x => x.id === id);
  const n = s.keys * s.Hkv * s.D;
  const data = { k: randomF32(n, 1), v: randomF32(n, 2), q: randomF32(s.Sq * s.Hq * s.D, 3) };
  for (const dtype of dtypes) {
    const open = peers.map(peer => peer.openShape(s, data, () => 'skip', { dtype, checkStored: () => 'skip' }));
    const samples = open.map(() => []);
    let i = 0;
    for (let w = 0; w < 20; w++) for (const o of open) o.call(i++);
    for (let r = 0; r < rounds; r++)
      for (const j of r % 2 ? [1, 0] : [0, 1])
        for (let c = 0; c < 5; c++) { const t0 = now(); open[j].call(i++); samples[j].push(now() - t0); }
    const med = samples.map(x => stats(x).median);
    console.log(`${id.padEnd(9)} ${dtype.padEnd(8)} ${fmtMs(med[0]).padStart(6)} | ${fmtMs(med[1]).padStart(6)} | ${(med[1] / med[0]).toFixed(3)}`);
    open.forEach(o => o.dispose());
  }
}
peers.forEach(p => p.dispose());
