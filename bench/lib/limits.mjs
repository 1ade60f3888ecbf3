// The machine's limits as wasm sees them: streaming-read bandwidth, SIMD f32
// multiply+add peak and (relaxed SIMD) FMA peak (bench/lib/limits.c), measured in
// the benchmark's own run.
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';
import { ensureLimitsBuilt, limitsMjs, limitsWasm, relaxedLimitsMjs, relaxedLimitsWasm } from './build-limits.mjs';
import { now, stats } from './util.mjs';

async function loadModule(mjs, wasm, threads) {
  const { default: createLimitsModule } = await import(pathToFileURL(mjs).href);
  // at least one pool worker: with PTHREAD_POOL_SIZE = 0 the 3.1.6 glue never resolves the factory
  // (receiveInstance only removes the 'wasm-instantiate' run dependency from a worker-loaded callback)
  return createLimitsModule({ wasmBinary: fs.readFileSync(wasm), limitsWorkers: Math.max(1, threads - 1) });
}

/**
 * Measures with `threads` threads. Returns { threads, bwGBs, bw, peakGFLOPs, peak,
 * and with `fma`: fmaGFLOPs, fma }. bytes: size of the streamed array (>= 256 MiB
 * for the full run). With `fma` (relaxed SIMD in this process) the mul+add and
 * the relaxed_madd chains are timed in one loop, alternating, so that their
 * ratio is not the load changing between two measurements.
 */
export async function measureLimits({ threads = 1, bytes = 256 << 20, reps = 7, madReps = 7, madIters = 20_000_000, fma = false, log = () => {} } = {}) {
  ensureLimitsBuilt({ log });
  const M = await loadModule(limitsMjs, limitsWasm, threads);
  const R = fma ? await loadModule(relaxedLimitsMjs, relaxedLimitsWasm, threads) : null;
  try {
    const n = Math.floor(bytes / 4 / (32 * 8)) * 32 * 8; // multiple of 32 floats per thread slice
    const p = M._limits_alloc(n * 4);
    if (!p) throw new Error(`limits: could not allocate ${bytes} bytes in wasm memory`);
    M._limits_fill(p, n);

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

    // The best chain count of each module (mul+add: M; relaxed_madd: R), reps alternating between them.
    const peaks = (nt) => {
      const mods = R ? [M, R] : [M];
      const best = mods.map(() => null);
      for (const chains of [8, 12, 14]) {
        for (const X of mods) for (let i = 0; i < 40; i++) X._limits_madd(chains, 2000, nt, 0.5);   // tier-up
        const iters = madIters; // 20M iters * 12 chains * 8 FLOP: ~40 ms per thread at ~47 GFLOP/s
        const g = mods.map(() => []);
        for (let r = 0; r < madReps; r++) {
          const order = r & 1 ? [...mods.keys()].reverse() : [...mods.keys()];
          for (const k of order) {
            const t = now();
            const s = mods[k]._limits_madd(chains, iters, nt, 0.25 + r);
            const ms = now() - t;
            if (s === -1e30) throw new Error(`limits: could not start ${nt} threads`);
            g[k].push((nt * iters * chains * 8) / (ms * 1e6));
          }
        }
        g.forEach((samples, k) => {
          const st = stats(samples);
          if (!best[k] || st.median > best[k].median) best[k] = { ...st, chains };
        });
      }
      return best;
    };

    const out = { threads, bytes: n * 4 };
    const bw = bandwidth(threads);
    const [pk, fk] = peaks(threads);
    out.bwGBs = bw.median; out.bw = bw;
    out.peakGFLOPs = pk.median; out.peak = pk;
    log(`limits(${threads}t): read ${bw.median.toFixed(1)} GB/s [${bw.min.toFixed(1)}–${bw.max.toFixed(1)}], ` +
        `mul+add ${pk.median.toFixed(1)} GFLOP/s [${pk.min.toFixed(1)}–${pk.max.toFixed(1)}] (${pk.chains} chains)`);
    if (fk) {
      out.fmaGFLOPs = fk.median; out.fma = fk;
      log(`limits(${threads}t): relaxed_madd (FMA) ${fk.median.toFixed(1)} GFLOP/s [${fk.min.toFixed(1)}–${fk.max.toFixed(1)}] (${fk.chains} chains), ` +
          `${(fk.median / pk.median).toFixed(2)}× mul+add`);
    }
    M._limits_free(p);
    return out;
  } finally {
    for (const X of [M, R]) { try { X && X.PThread.terminateAllThreads(); } catch { /* single thread */ } }
  }
}

/**
 * A limits session for probing all through a run (bench/dense.mjs, bench/llama.mjs): one module
 * with threads - 1 workers and a `bytes` array, kept open. sample(nt) takes one read-bandwidth
 * sample (a whole-array sum) and one mul+add sample (`madIters` iterations of the chain count that
 * was fastest for nt at the start) with nt threads, and keeps them; stats(nt) gives
 * { bwGBs, peakGFLOPs, bw, peak, chains } over every sample so far (medians, min, max, n), so that a
 * bound comes from the same minutes as the rows it bounds. close() ends the workers.
 */
export async function openLimits({ threads = 2, bytes = 256 << 20, madIters = 4_000_000, log = () => {} } = {}) {
  ensureLimitsBuilt({ log });
  const M = await loadModule(limitsMjs, limitsWasm, threads);
  const n = Math.floor(bytes / 4 / (32 * 8)) * 32 * 8;
  const p = M._limits_alloc(n * 4);
  if (!p) throw new Error(`limits: could not allocate ${bytes} bytes in wasm memory`);
  M._limits_fill(p, n);
  const check = (s, nt) => { if (s === -1e30) throw new Error(`limits: could not start ${nt} threads`); };
  for (let i = 0; i < 40; i++) M._limits_read(p, 1 << 16, 1);     // tier-up
  const chains = {}, samples = {};
  const madd = (nt, c, iters, r) => {
    const t = now();
    check(M._limits_madd(c, iters, nt, 0.25 + (r % 8)), nt);
    return (nt * iters * c * 8) / ((now() - t) * 1e6);
  };
  let round = 0;
  const session = {
    threads,
    sample(nt) {
      if (!(nt >= 1 && nt <= threads)) throw new Error(`limits: ${nt} threads in a session of ${threads}`);
      if (!chains[nt]) {
        // the chain count: the best of 8 / 12 / 14 (medians of 3 short runs each, after a tier-up)
        let best = null;
        for (const c of [8, 12, 14]) {
          for (let i = 0; i < 40; i++) M._limits_madd(c, 2000, nt, 0.5);
          const g = stats([0, 1, 2].map((r) => madd(nt, c, madIters, r))).median;
          if (!best || g > best.g) best = { c, g };
        }
        chains[nt] = best.c;
        samples[nt] = { bw: [], peak: [] };
      }
      const t = now();
      check(M._limits_read(p, n, nt), nt);
      samples[nt].bw.push((n * 4) / ((now() - t) * 1e6));
      samples[nt].peak.push(madd(nt, chains[nt], madIters, round++));
    },
    stats(nt) {
      const s = samples[nt];
      if (!s) return null;
      const bw = stats(s.bw), peak = stats(s.peak);
      return { threads: nt, bwGBs: bw.median, peakGFLOPs: peak.median, bw, peak, chains: chains[nt], bytes: n * 4 };
    },
    close() {
      M._limits_free(p);
      try { M.PThread.terminateAllThreads(); } catch { /* single thread */ }
    },
  };
  return session;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const threads = Number((process.argv.find((a) => a.startsWith('--threads=')) || '--threads=1').split('=')[1]);
  const fma = process.argv.includes('--fma');
  const r = await measureLimits({ threads, fma, log: (m) => console.log(m) });
  console.log(JSON.stringify({ bwGBs: r.bwGBs, peakGFLOPs: r.peakGFLOPs, chains: r.peak.chains, fmaGFLOPs: r.fmaGFLOPs }));
}
