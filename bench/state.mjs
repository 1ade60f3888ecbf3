// bench/state.mjs: save / load speed of saved KV state (docs/FORMAT.md), 1 thread.
//
//   node bench/state.mjs [--mib=256] [--rounds=5] [--build=simd] [--dtypes=float32,int4,int8/int4]
//
// For each cache dtype (and K int8 / V int4), a cache of Hkv 8 x D 128 whose stored rows take --mib MiB
// (the payload) is filled through update(), then timed (median of --rounds):
//   save        cache.save() -> one Uint8Array
//   saveInto    cache.save({ into }) into the same buffer every round (touched once before)
//   saveChunks  for (const c of cache.saveChunks()) (4 MiB chunks, dropped: a writer's view)
//   load        sdpa.loadKVCache(bytes) -> a new cache (disposed after each round)
//   load chunks sdpa.loadKVCache(the saveChunks chunks, an array)
// GB/s = the save's bytes / time (CRC-32C of header and payload included, both ways).
import { createSdpa } from '../js/index.js';

const arg = (name, dflt) => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a ? a.slice(name.length + 3) : dflt;
};
const MIB = Number(arg('mib', 256)), ROUNDS = Number(arg('rounds', 5)), BUILD = arg('build', 'simd');
const H = 8, D = 128;
const RECORD = { float32: 4 * D, float16: 2 * D, int8: D + 5, int4: D / 2 + 4 * (D / 32) };
const sdpa = await createSdpa({ build: BUILD, threads: 1 });
const median = (xs) => xs.slice().sort((a, b) => a - b)[xs.length >> 1];
const rows = [];
// every cache dtype, and K int8 / V int4 (a cache whose K and V dtypes differ); --dtypes=a,b,k/v picks
for (const dtype of arg('dtypes', 'float32,float16,int8,int4,int8/int4').split(',')) {
  const [keyDtype, valueDtype = keyDtype] = dtype.split('/');
  const n = Math.ceil((MIB * 2 ** 20) / (H * (RECORD[keyDtype] + RECORD[valueDtype])));
  const maxSeqLen = Math.ceil(n / 64) * 64;
  const cache = sdpa.createKVCache({ maxSeqLen, numKvHeads: H, headDim: D, keyDtype, valueDtype });
  const step = 1024, k = new Float32Array(step * H * D), v = new Float32Array(step * H * D);
  for (let at = 0; at < n; at += step) {
    const m = Math.min(step, n - at);
    for (let i = 0; i < m * H * D; i++) { k[i] = Math.sin(at + i); v[i] = Math.cos(at * 3 + i); }
    cache.update({ data: k.subarray(0, m * H * D), dims: [1, m, H, D] }, { data: v.subarray(0, m * H * D), dims: [1, m, H, D] });
  }
  const t = { save: [], saveInto: [], saveChunks: [], load: [], loadChunks: [] };
  let bytes = null, chunks = null, reused = null;
  for (let r = 0; r < ROUNDS + 1; r++) {   // round 0 warms up
    let t0 = performance.now();
    bytes = cache.save({ meta: { dtype } });
    if (r) t.save.push(performance.now() - t0);
    reused ??= new Uint8Array(bytes.length).fill(0);   // the caller's buffer, touched once, reused every round
    t0 = performance.now();
    cache.save({ meta: { dtype }, into: reused });
    if (r) t.saveInto.push(performance.now() - t0);
    t0 = performance.now();
    chunks = [];
    for (const c of cache.saveChunks({ meta: { dtype } })) chunks.push(c);
    if (r) t.saveChunks.push(performance.now() - t0);
    t0 = performance.now();
    const { cache: a } = await sdpa.loadKVCache(bytes);
    if (r) t.load.push(performance.now() - t0);
    a.dispose();
    t0 = performance.now();
    const { cache: b } = await sdpa.loadKVCache(chunks);
    if (r) t.loadChunks.push(performance.now() - t0);
    b.dispose();
  }
  const gbs = (ms) => (bytes.length / 1e9 / (ms / 1000)).toFixed(2);
  rows.push({ dtype, rows: n, MiB: (bytes.length / 2 ** 20).toFixed(1), save: gbs(median(t.save)), saveInto: gbs(median(t.saveInto)), saveChunks: gbs(median(t.saveChunks)), load: gbs(median(t.load)), loadChunks: gbs(median(t.loadChunks)) });
  cache.dispose();
}
console.log(`saved KV state, build ${sdpa.info.build}, 1 thread, Hkv ${H} x D ${D}, median of ${ROUNDS} (GB/s of the save's bytes)`);
console.table(rows);
sdpa.dispose();
