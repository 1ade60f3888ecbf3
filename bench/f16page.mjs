// The float16 newest page's decode cost (issue 41, CONTRACT.md section 3): a
// decode step's attention (cache.attend of one query row at the last position)
// on int8 / int4 caches with and without float16NewestPage, where the last
// page is half full (the page then is float16: its tile goes through the
// float16 kernels) and where it is full (no float16 page: the same work), and
// a decode of 64 steps (cache.step: writes, the encode of the page when it
// fills, attention). Interleaved rounds (every configuration once per round, in
// turn), medians, ratios with / without the page. 1 thread by default.
// Usage: node bench/f16page.mjs [--threads=1] [--rounds=15] [--dtypes=int4,int8,int8/int4]
import { createSdpa } from '../js/index.js';
import { randomF32, now, stats, fmtMs } from './lib/util.mjs';

const arg = (k, d) => (process.argv.find((a) => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const threads = Number(arg('threads', 1)), rounds = Number(arg('rounds', 15));
const dtypes = arg('dtypes', 'int4,int8,int8/int4').split(',');
const sdpa = await createSdpa({ threads });
// the shipped model's attention (4 / 2 heads of 64, a context of 512) and a Llama-3-8B-like layer
const SHAPES = [
  { id: 'shipped-480', Hq: 4, Hkv: 2, D: 64, keys: 480 }, { id: 'shipped-512', Hq: 4, Hkv: 2, D: 64, keys: 512 },
  { id: 'A-8160', Hq: 32, Hkv: 8, D: 128, keys: 8160 }, { id: 'A-8192', Hq: 32, Hkv: 8, D: 128, keys: 8192 },
];
console.log(`${sdpa.info.build}, ${threads} thread(s), ${rounds} rounds, median per call (attend: x 20; decode: 64 steps)`);
console.log('| shape | K / V | attend, no page | attend, float16 page | ratio (no page / page) | 64-step decode, no page | with page | ratio |');
console.log('|---|---|---|---|---|---|---|---|');
for (const s of SHAPES) {
  for (const dtype of dtypes) {
    const [keyDtype, valueDtype = keyDtype] = dtype.split('/');
    const n = s.keys * s.Hkv * s.D;
    const k = { data: randomF32(n, 1), dims: [1, s.keys, s.Hkv, s.D] }, v = { data: randomF32(n, 2), dims: [1, s.keys, s.Hkv, s.D] };
    const q = sdpa.allocTensor('float32', [1, 1, s.Hq, s.D]);
    q.set(randomF32(s.Hq * s.D, 3));
    const out = sdpa.allocTensor('float32', [1, 1, s.Hq, s.D]);
    const kr = sdpa.allocTensor('float32', [1, 1, s.Hkv, s.D]), vr = sdpa.allocTensor('float32', [1, 1, s.Hkv, s.D]);
    kr.set(randomF32(s.Hkv * s.D, 4)); vr.set(randomF32(s.Hkv * s.D, 5));
    const configs = [false, true].map((page) => {
      const cache = sdpa.createKVCache({ maxSeqLen: s.keys + 64, numKvHeads: s.Hkv, headDim: s.D, keyDtype, valueDtype, float16NewestPage: page });
      cache.update(k, v);
      sdpa.reserve(sdpa.kvCacheSize({ maxSeqLen: s.keys + 64, numKvHeads: s.Hkv, headDim: s.D, keyDtype, valueDtype, float16NewestPage: page }).poolBytes);
      return { cache, attend: [], decode: [] };
    });
    for (let w = 0; w < 3; w++) for (const c of configs) c.cache.attend(q, { startPos: s.keys - 1, out });
    for (let r = 0; r < rounds; r++) {
      for (const c of configs) {
        const t0 = now();
        for (let i = 0; i < 20; i++) c.cache.attend(q, { startPos: s.keys - 1, out });
        c.attend.push((now() - t0) / 20);
        const t1 = now();
        for (let i = 0; i < 64; i++) c.cache.step(q, kr, vr, { out });
        c.decode.push(now() - t1);
        c.cache.truncate(s.keys);
      }
    }
    const [a, b] = configs.map((c) => ({ attend: stats(c.attend).median, decode: stats(c.decode).median }));
    console.log(`| ${s.id} | ${dtype} | ${fmtMs(a.attend)} | ${fmtMs(b.attend)} | ${(a.attend / b.attend).toFixed(2)} | ${fmtMs(a.decode)} | ${fmtMs(b.decode)} | ${(a.decode / b.decode).toFixed(2)} |`);
    for (const c of configs) c.cache.dispose();
    for (const t of [q, out, kr, vr]) t.dispose();
  }
}
sdpa.dispose();
