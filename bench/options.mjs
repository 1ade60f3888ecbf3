#!/usr/bin/env node
// The options' rows: what window, softcap and sinks cost on the fast path, and
// two model-shaped layers, in one run per thread count. Decode through
// cache.attend with heap tensors; medians over many calls; every output is
// checked against a float64 reference (the same options, written out here).
//
//   node bench/options.mjs [--threads=1,2] [--quick]
import { createSdpa } from '../js/index.js';
import { timeIt, randomF32, fmtMs } from './lib/util.mjs';

const argv = process.argv.slice(2);
const opt = (n) => { const a = argv.find((x) => x.startsWith(`--${n}=`)); return a ? a.slice(n.length + 3) : undefined; };
const quick = argv.includes('--quick');
const threadList = (opt('threads') || '1,2').split(',').map(Number);
// warm-up (so TurboFan's code, not Liftoff's, is what gets timed); the timed calls are interleaved below
const warmup = quick ? { warmup: 3, warmupMs: 50 } : { warmup: 10, warmupMs: 300 };

// [label, Hq, Hkv, D, keys, options]
const ROWS = [
  ['A-4096 plain', 32, 8, 128, 4096, {}],
  ['A-4096 softcap 50', 32, 8, 128, 4096, { softcap: 50 }],
  ['A-4096 sinks', 32, 8, 128, 4096, { sinks: true }],
  ['A-4096 window 4096', 32, 8, 128, 4096, { window: 4096 }],
  ['A-32768 window 4096', 32, 8, 128, 32768, { window: 4096 }],
  // windowed (ring) caches: storage for the window only, whatever the length
  ['A-4096 ring 4096', 32, 8, 128, 4096, { window: 4096, ring: true }],
  ['A-32768 ring 4096', 32, 8, 128, 32768, { window: 4096, ring: true }],
  ['gpt-oss-20B 64/8/64 w128 sinks', 64, 8, 64, 4096, { window: 128, sinks: true }],
  ['Gemma-2-2B 8/4/256 w4096 cap50', 8, 4, 256, 8192, { window: 4096, softcap: 50 }],
  ['gpt-oss-20B ring w128 sinks', 64, 8, 64, 4096, { window: 128, sinks: true, ring: true }],
  ['Gemma-2-2B ring w4096 cap50', 8, 4, 256, 8192, { window: 4096, softcap: 50, ring: true }],
];

/** float64 attention of the last query row (position keys-1, causal), with the options. */
function reference(q, k, v, Hq, Hkv, D, keys, o, sinks) {
  const out = new Float64Array(Hq * D), r = Hq / Hkv, s = 1 / Math.sqrt(D), p = keys - 1;
  const sc = new Float64Array(keys);
  for (let h = 0; h < Hq; h++) {
    const hk = Math.floor(h / r);
    let mx = -Infinity;
    for (let t = 0; t < keys; t++) {
      if (o.window && t <= p - o.window) { sc[t] = -Infinity; continue; }
      let d = 0;
      for (let j = 0; j < D; j++) d += q[h * D + j] * k[(t * Hkv + hk) * D + j];
      let x = s * d;
      if (o.softcap) x = o.softcap * Math.tanh(x / o.softcap);
      sc[t] = x;
      if (x > mx) mx = x;
    }
    const sink = sinks ? sinks[h] : -Infinity;
    mx = Math.max(mx, sink);
    let den = Math.exp(sink - mx);
    for (let t = 0; t < keys; t++) den += Math.exp(sc[t] - mx);
    for (let t = 0; t < keys; t++) {
      const w = Math.exp(sc[t] - mx) / den;
      if (w) for (let j = 0; j < D; j++) out[h * D + j] += w * v[(t * Hkv + hk) * D + j];
    }
  }
  return out;
}

const lines = [];
// Rows are timed interleaved (a few calls of each row, round after round), so
// that a change of machine load between rows does not show up as a ratio.
const rounds = quick ? 4 : 40, perRound = quick ? 3 : 5;
for (const T of threadList) {
  const sdpa = await createSdpa({ threads: T });
  lines.push(`== ${T} thread${T > 1 ? 's' : ''} (${sdpa.info.build})`);
  lines.push(['row'.padEnd(32), 'keys'.padStart(6), 'ms'.padStart(7), '(min–max)'.padStart(13), '× plain', 'max |Δ| vs float64', 'cache MiB'].join('  '));
  const rows = [];
  for (const [label, Hq, Hkv, D, keys, o] of ROWS) {
    const cache = o.ring ? sdpa.createKVCache({ numKvHeads: Hkv, headDim: D, window: o.window })
      : sdpa.createKVCache({ maxSeqLen: keys, numKvHeads: Hkv, headDim: D });
    const k = randomF32(keys * Hkv * D, keys + 1), v = randomF32(keys * Hkv * D, keys + 2);
    const chunk = 2048;
    for (let t = 0; t < keys; t += chunk) {
      const n = Math.min(chunk, keys - t);
      cache.update({ data: k.subarray(t * Hkv * D, (t + n) * Hkv * D), dims: [1, n, Hkv, D] }, { data: v.subarray(t * Hkv * D, (t + n) * Hkv * D), dims: [1, n, Hkv, D] });
    }
    const q = sdpa.allocTensor('float32', [1, 1, Hq, D]), out = sdpa.allocTensor('float32', [1, 1, Hq, D]);
    q.data.set(randomF32(Hq * D, 7));
    const sinks = o.sinks ? sdpa.allocTensor('float32', [Hq]) : null;
    if (sinks) sinks.data.set(randomF32(Hq, 9).map((x) => x * 4));
    const opts = { isCausal: true, out, window: o.ring ? undefined : o.window, softcap: o.softcap, sinks: sinks || undefined };
    cache.attend(q, opts);
    const ref = reference(q.data, k, v, Hq, Hkv, D, keys, o, sinks && sinks.data);
    let err = 0;
    for (let i = 0; i < ref.length; i++) err = Math.max(err, Math.abs(out.data[i] - ref[i]));
    if (err > 1e-4) { console.error(`bench/options: ${label}: output differs from the float64 reference by ${err}`); process.exitCode = 1; }
    await timeIt(() => cache.attend(q, opts), { ...warmup, iters: 1, minIters: 1 });
    rows.push({ label, keys, cache, q, out, sinks, opts, err, samples: [] });
  }
  for (let r = 0; r < rounds; r++) {
    for (const row of rows) {
      for (let i = 0; i < perRound; i++) {
        const t0 = performance.now();
        row.cache.attend(row.q, row.opts);
        row.samples.push(performance.now() - t0);
      }
    }
  }
  const median = (a) => { const x = [...a].sort((p, q) => p - q); return x[x.length >> 1]; };
  const plain = median(rows[0].samples);
  for (const row of rows) {
    const m = median(row.samples);
    const rel = row.label.startsWith('A-') ? (m / plain).toFixed(2) + '×' : '-';
    lines.push([row.label.padEnd(32), String(row.keys).padStart(6), fmtMs(m).padStart(7), `${fmtMs(Math.min(...row.samples))}–${fmtMs(Math.max(...row.samples))}`.padStart(13), rel.padStart(7), row.err.toExponential(2).padStart(18), (row.cache.bytes / 2 ** 20).toFixed(1).padStart(9)].join('  '));
    row.cache.dispose(); row.q.dispose(); row.out.dispose(); if (row.sinks) row.sinks.dispose();
  }
  sdpa.dispose();
}
console.log(lines.join('\n'));
console.log(`medians of ${rounds * perRound} calls per row, rows interleaved (${perRound} calls each, ${rounds} rounds). × plain: time / A-4096 plain in the same run.`);
console.log('"A-32768 window 4096" should equal "A-4096 window 4096" (flat in the sequence length); the ring rows hold only the window (cache MiB) and should take the window rows\' time.');
