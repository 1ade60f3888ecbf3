// Several sequences in one call: sdpa.attendMany over N decode
// steps (1 query row each, one cache per sequence) against the same N
// cache.attend calls one by one, in the same run, interleaved; heap tensors
// (nothing allocated); 1 and 2 threads; median µs per round of N steps.
// Usage: node bench/many.mjs [--rounds=60] [--build=simd-threads] [--threads=1,2]
import { createSdpa } from '../js/index.js';
import { now, stats, randomF32 } from './lib/util.mjs';

const arg = (k, d) => (process.argv.find((a) => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const rounds = Number(arg('rounds', 60)), build = arg('build', 'simd-threads');
const threadList = arg('threads', '1,2').split(',').map(Number);
const SHAPES = [
  { name: 'B-1024', Hq: 14, Hkv: 2, D: 64, ctx: 1024 },
  { name: 'A-2048', Hq: 32, Hkv: 8, D: 128, ctx: 2048 },
];

function setup(sdpa, s, n) {
  const seqs = [], caches = [];
  for (let i = 0; i < n; i++) {  // (the caches first: the tensors' views are made after memory grew)
    const cache = sdpa.createKVCache({ maxSeqLen: s.ctx, numKvHeads: s.Hkv, headDim: s.D });
    for (let t = 0; t < s.ctx; t += 256) {
      const kv = { data: randomF32(256 * s.Hkv * s.D, 100 * i + t + 1), dims: [1, 256, s.Hkv, s.D] };
      cache.update(kv, kv);
    }
    caches.push(cache);
  }
  for (let i = 0; i < n; i++) {
    const cache = caches[i];
    const q = sdpa.allocTensor('float32', [1, 1, s.Hq, s.D]);
    q.set(randomF32(s.Hq * s.D, i + 7));
    const out = sdpa.allocTensor('float32', [1, 1, s.Hq, s.D]);
    seqs.push({ cache, q, out, opts: { startPos: s.ctx - 1, out } });
  }
  const items = seqs.map(({ cache, q, out }) => ({ cache, q, out, startPos: s.ctx - 1 }));
  return {
    many: () => sdpa.attendMany(items),
    oneByOne: () => { for (const x of seqs) x.cache.attend(x.q, x.opts); },
    check: () => {
      sdpa.attendMany(items);
      const a = seqs.map((x) => x.out.data.slice());
      for (const x of seqs) x.cache.attend(x.q, x.opts);
      return seqs.every((x, i) => x.out.data.every((v, j) => Object.is(v, a[i][j])));
    },
    dispose: () => { for (const x of seqs) { x.cache.dispose(); x.q.dispose(); x.out.dispose(); } },
  };
}

console.log(`${build}; N decode steps (1 query row each, N caches): attendMany vs N cache.attend calls, median µs per round over ${rounds} interleaved rounds`);
console.log('shape     N  threads  one by one   attendMany   speed-up  bits');
for (const threads of threadList) {
  const sdpa = await createSdpa({ build, threads });
  for (const s of SHAPES) {
    for (const n of [4, 8]) {
      const b = setup(sdpa, s, n);
      const same = b.check();
      const t = { one: [], many: [] };
      for (let r = 0; r < rounds + 5; r++) {
        let a = now(); b.oneByOne(); const x = now() - a;
        a = now(); b.many(); const y = now() - a;
        if (r >= 5) { t.one.push(x); t.many.push(y); }
      }
      const one = stats(t.one).median * 1000, many = stats(t.many).median * 1000;
      console.log(`${s.name.padEnd(8)} ${String(n).padStart(2)}  ${String(threads).padStart(7)}  ${one.toFixed(0).padStart(10)}  ${many.toFixed(0).padStart(11)}  ${(one / many).toFixed(2).padStart(8)}×  ${same ? 'same' : 'DIFFER'}`);
      b.dispose();
    }
  }
  sdpa.dispose();
}
