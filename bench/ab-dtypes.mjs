// Quick interleaved A/B of the cache dtypes on a few decode shapes: every
// round times 5 calls of each dtype in turn, so a load change hits all alike.
// Usage: node bench/ab-dtypes.mjs [--threads=1] [--shapes=A-8192,MQA-8192,B-4096] [--rounds=30] [--build=simd-threads]
//        [--dtypes=float32,float16,int8,int4,int8/int4,float16/int4]   ('K/V': K and V each a dtype; ratios are against the first)
import { createSdpaPeer } from './lib/sdpa-peer.mjs';
import { SHAPES } from './lib/shapes.mjs';
import { randomF32, now, stats, fmtMs } from './lib/util.mjs';

const arg = (k, d) => (process.argv.find(a => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const threads = Number(arg('threads', 1)), rounds = Number(arg('rounds', 30));
const ids = arg('shapes', 'A-8192,MQA-8192,B-4096').split(',');
const peer = await createSdpaPeer({ threads, build: arg('build', threads > 1 ? 'simd-threads' : 'simd') });
const dtypes = arg('dtypes', 'float32,float16,int8,int4,int8/int4,float16/int4').split(',');
console.log(`${peer.info.build}, ${threads} thread(s), ${rounds} rounds x 5 calls, median ms`);
for (const id of ids) {
  const s = SHAPES.find(x => x.id === id);
  const n = s.keys * s.Hkv * s.D;
  const data = { k: randomF32(n, 1), v: randomF32(n, 2), q: randomF32(s.Sq * s.Hq * s.D, 3) };
  const open = dtypes.map(dtype => peer.openShape(s, data, () => 'skip', { dtype, checkStored: () => 'skip' }));
  const samples = dtypes.map(() => []);
  let i = 0;
  for (let w = 0; w < 20; w++) for (const o of open) o.call(i++);
  for (let r = 0; r < rounds; r++)
    open.forEach((o, j) => {
      for (let c = 0; c < 5; c++) { const t0 = now(); o.call(i++); samples[j].push(now() - t0); }
    });
  const med = samples.map(x => stats(x).median);
  console.log(`${id.padEnd(9)} ` + dtypes.map((d, j) => `${d} ${fmtMs(med[j])}${j ? ` (${(med[0] / med[j]).toFixed(2)}x)` : ''}`).join('  '));
  open.forEach(o => o.dispose());
}
peer.dispose();
