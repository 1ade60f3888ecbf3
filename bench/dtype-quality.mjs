// What each cache dtype costs in accuracy and bytes (bench/README.md, "Headline
// numbers"; the runs: bench/HISTORY.md, "Choosing a cache dtype"): for every dtype
// (or K/V pair), the bytes a token takes per layer,
// and the decode output's error against the same cache in float32, on (a)
// ordinary data (normal K, V, q) and (b) keys with a few outlier channels (4 of
// D channels 10x larger, as real K projections have). The error is
// max |out - out_f32| / max |out_f32| and the RMS ratio, over 16 decode steps.
// Usage: node bench/dtype-quality.mjs [--keys=2048] [--dtypes=float16,int8,int4,int8/int4,float16/int4]
import { createSdpa } from '../js/index.js';
import { randomF32 } from './lib/util.mjs';

const arg = (k, d) => (process.argv.find(a => a.startsWith(`--${k}=`)) || `=${d}`).split('=')[1];
const keys = Number(arg('keys', 2048));
const dtypes = arg('dtypes', 'float16,int8,int4,int8/int4,float16/int4').split(',');
const [Hq, Hkv, D] = [32, 8, 128];  // Llama-3-8B-like GQA
const sdpa = await createSdpa({ threads: 1 });

function data(outliers) {
  const n = keys * Hkv * D;
  const k = randomF32(n, 11), v = randomF32(n, 12), q = randomF32(16 * Hq * D, 13);
  if (outliers) for (let i = 0; i < n; i++) if ([3, 37, 64, 101].includes(i % D)) k[i] *= 10;
  return { k, v, q };
}

function outputs(dtype, d) {
  const [keyDtype, valueDtype = keyDtype] = dtype.split('/');
  const cache = sdpa.createKVCache({ maxSeqLen: keys + 16, numKvHeads: Hkv, headDim: D, keyDtype, valueDtype });
  cache.update({ data: d.k, dims: [1, keys, Hkv, D] }, { data: d.v, dims: [1, keys, Hkv, D] });
  const outs = [];
  for (let s = 0; s < 16; s++) {
    const q = { data: d.q.subarray(s * Hq * D, (s + 1) * Hq * D), dims: [1, 1, Hq, D] };
    outs.push(cache.attend(q, { startPos: keys - 16 + s }).data);
  }
  const bytesPerToken = sdpa.kvCacheSize({ maxSeqLen: 64, numKvHeads: Hkv, headDim: D, keyDtype, valueDtype }).poolBytes / 64;
  cache.dispose();
  return { outs, bytesPerToken };
}

function error(outs, ref) {
  let maxErr = 0, maxRef = 0, se = 0, sr = 0;
  outs.forEach((o, s) => {
    for (let i = 0; i < o.length; i++) {
      const e = o[i] - ref[s][i];
      maxErr = Math.max(maxErr, Math.abs(e)); maxRef = Math.max(maxRef, Math.abs(ref[s][i]));
      se += e * e; sr += ref[s][i] * ref[s][i];
    }
  });
  return { max: maxErr / maxRef, rms: Math.sqrt(se / sr) };
}

console.log(`decode over ${keys} keys, Hq ${Hq} / Hkv ${Hkv} / D ${D}, 16 steps; error against the float32 cache's output`);
console.log('| K / V | bytes per token per layer | × float32 | ordinary: max | rms | outlier K channels: max | rms |');
console.log('|---|---|---|---|---|---|---|');
const ordinary = data(false), outlier = data(true);
const ref = { ordinary: outputs('float32', ordinary), outlier: outputs('float32', outlier) };
for (const dtype of ['float32', ...dtypes]) {
  const a = outputs(dtype, ordinary), b = outputs(dtype, outlier);
  const ea = error(a.outs, ref.ordinary.outs), eb = error(b.outs, ref.outlier.outs);
  console.log(`| ${dtype} | ${a.bytesPerToken.toFixed(0)} | ${(a.bytesPerToken / ref.ordinary.bytesPerToken).toFixed(3)} | ${ea.max.toExponential(1)} | ${ea.rms.toExponential(1)} | ${eb.max.toExponential(1)} | ${eb.rms.toExponential(1)} |`);
}
sdpa.dispose();
