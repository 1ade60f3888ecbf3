// The machine's limits as wasm sees them: streaming-read bandwidth and SIMD
// f32 multiply+add peak (bench/limits.c), measured in the benchmark's own run.
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';
import { ensureLimitsBuilt, limitsMjs, limitsWasm, relaxedLimitsMjs, relaxedLimitsWasm } from './build-limits.mjs';
import { now, stats } from './util.mjs';

/**
 * Measures with `threads` threads (and 1 thread when threads > 1 is asked and
 * `alsoSingle`). Returns { threads, bwGBs, peakGFLOPs, ..., detail }.
 * bytes: size of the streamed array (>= 256 MiB for the full run).
 */
export async function measureLimits({ threads = 1, bytes = 256 << 20, reps = 7, madReps = 7, madIters = 20_000_000, fma = false, log = () => {} } = {}) {
  ensureLimitsBuilt({ log });
  const out = await measure({ mjs: limitsMjs, wasm: limitsWasm, threads, bytes, reps, madReps, madIters, log, read: true });
  if (fma) {
    // relaxed SIMD (needs it in this process): the same chains, each step one f32x4.relaxed_madd
    const f = await measure({ mjs: relaxedLimitsMjs, wasm: relaxedLimitsWasm, threads, bytes: 0, reps, madReps, madIters, log, read: false });
    out.fmaGFLOPs = f.peakGFLOPs; out.fma = f.peak;
    log(`limits(${threads}t): relaxed_madd (FMA) ${f.peak.median.toFixed(1)} GFLOP/s [${f.peak.min.toFixed(1)}–${f.peak.max.toFixed(1)}] (${f.peak.chains} chains), ` +
        `${(f.peak.median / out.peakGFLOPs).toFixed(2)}× mul+add`);
  }
  return out;
}

async function measure({ mjs, wasm, threads, bytes, reps, madReps, madIters, log, read }) {
  const { default: createLimitsModule } = await import(pathToFileURL(mjs).href);
  // at least one pool worker: with PTHREAD_POOL_SIZE = 0 the 3.1.6 glue never resolves the factory
  // (receiveInstance only removes the 'wasm-instantiate' run dependency from a worker-loaded callback)
  const M = await createLimitsModule({ wasmBinary: fs.readFileSync(wasm), limitsWorkers: Math.max(1, threads - 1) });
  try {
    const n = read ? Math.floor(bytes / 4 / (32 * 8)) * 32 * 8 : 0; // multiple of 32 floats per thread slice
    const p = read ? M._limits_alloc(n * 4) : 0;
    if (read && !p) throw new Error(`limits: could not allocate ${bytes} bytes in wasm memory`);
    if (read) M._limits_fill(p, n);

    const bandwidth = (nt) => {
      // warm up the optimizing tier on small slices first, then time whole-array reads
      for (let i = 0; i < 40; i++) M._limits_read(p, 1 << 16, nt);
      M._limits_read(p, n, nt);
      const gbs = [];
      for (let r = 0; r < reps; r++) {
        const t = now();
        const s = M._limits_read(p, n, nt);
        const ms = now() - t;
        if (s === -1e30) throw new Error(`limits: could not start ${nt} threads`);
        gbs.push((n * 4) / (ms * 1e6));
      }
      return stats(gbs);
    };

    const peak = (nt) => {
      let best = null;
      for (const chains of [8, 12, 14]) {
        for (let i = 0; i < 40; i++) M._limits_madd(chains, 2000, nt, 0.5);   // tier-up
        const iters = madIters; // 20M iters * 12 chains * 8 FLOP: ~40 ms per thread at ~47 GFLOP/s
        const g = [];
        for (let r = 0; r < madReps; r++) {
          const t = now();
          const s = M._limits_madd(chains, iters, nt, 0.25 + r);
          const ms = now() - t;
          if (s === -1e30) throw new Error(`limits: could not start ${nt} threads`);
          g.push((nt * iters * chains * 8) / (ms * 1e6));
        }
        const st = stats(g);
        if (!best || st.median > best.median) best = { ...st, chains };
      }
      return best;
    };

    const out = { threads, bytes: n * 4 };
    const bw = read ? bandwidth(threads) : null;
    const pk = peak(threads);
    out.peakGFLOPs = pk.median; out.peak = pk;
    if (!read) return out;
    out.bwGBs = bw.median; out.bw = bw;
    log(`limits(${threads}t): read ${bw.median.toFixed(1)} GB/s [${bw.min.toFixed(1)}–${bw.max.toFixed(1)}], ` +
        `mul+add ${pk.median.toFixed(1)} GFLOP/s [${pk.min.toFixed(1)}–${pk.max.toFixed(1)}] (${pk.chains} chains)`);
    M._limits_free(p);
    return out;
  } finally {
    try { M.PThread.terminateAllThreads(); } catch { /* single thread */ }
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const threads = Number((process.argv.find((a) => a.startsWith('--threads=')) || '--threads=1').split('=')[1]);
  const r = await measureLimits({ threads, log: (m) => console.log(m) });
  console.log(JSON.stringify({ bwGBs: r.bwGBs, peakGFLOPs: r.peakGFLOPs, chains: r.peak.chains }));
}
