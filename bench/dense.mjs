#!/usr/bin/env node
// The weight products (sdpa.linear) per weight dtype (float32, float16, q8_0, q4_0, q5_0, q4_k,
// q6_k; and q8_0 / q4_0 with activations: 'int16', the option that quantizes x per block), against the
// machine's limits probed all through the same run (bench/lib/limits.mjs openLimits: read
// bandwidth and f32x4 mul+add peak, 1 and 2 threads, one sample of each before every row):
//   * one matrix at a time: every distinct [out, in] of one token of the shipped model
//     (models/fortunes: dim 256, kv 128, hidden 640, vocab 512) and of SmolLM2-135M's shape
//     (dim 576, kv 192, hidden 1536, vocab 49152), decode (1 row) and prefill (64, 512 rows; the
//     classifier runs on the rows asked for, so decode only), COLD (weights rotated over copies of
//     >= 96 MiB, 3x the L3: from DRAM) and HOT (the same copy again: in L2 / L3 when it fits);
//   * one token's whole set of products (every layer's matrices, in the model's order, wo and w2
//     accumulating): cold (copies of the set rotated over >= 96 MiB) and the one set again and
//     again, which is how a decoding model reads it (the shipped model's 2-14 MB fit the L3);
//   * where the pool starts to pay (2 threads): small decode products forced onto the calling
//     thread against forced onto the pool (sdpa_ctx_set_dense_parallel_min_macs).
// Each row: GFLOP/s, weight GB/s, the bound max(bytes / read bandwidth, FLOPs / mul+add peak), which
// side it is on (bytes per FLOP against the machine balance) and its % of the bound. 1 and 2
// threads are timed interleaved in one 2-thread instance (1 thread: the products forced onto the
// calling thread, which is what a 1-thread instance runs). The simd-threads build (the mul+add
// probe is its bound). Every kernel path is warmed up first (V8 runs wasm in Liftoff until it has
// tiered the hot functions up to TurboFan). Medians; times never fail anything. About 2 minutes
// (--quick: under 1).
//
//   node bench/dense.mjs [--quick] [--json] [--threads=1,2] [--models=shipped,135m]
//                        [--dtypes=float32,float16,q8_0,q4_0,q8_0+int16,q4_0+int16,q5_0,q4_k,q6_k] [--rows=1,64,512] [--budget=300]
//                        [--no-matrices] [--no-token] [--no-pool]
//   node bench/dense.mjs --render=dense.json     the tables of a saved --json run
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa, INTERNALS } from '../js/index.js';
import { openLimits } from './lib/limits.mjs';
import { SHIPPED, SMOLLM2_135M } from './lib/random-llama.mjs';
import { rowBytes, blockOf, distinctShapes, tokenProducts } from './lib/dense-shapes.mjs';
import { now, stats, rngSigned } from './lib/util.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const arg = (k, d) => { const a = argv.find((x) => x.startsWith(`--${k}=`)); return a ? a.slice(k.length + 3) : d; };
const flag = (k) => argv.includes(`--${k}`);
if (flag('help')) { console.log(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1).filter((l, i, a) => a.slice(0, i + 1).every((x) => x.startsWith('//'))).join('\n')); process.exit(0); }
const QUICK = flag('quick');
const JSON_OUT = flag('json');
const THREADS = arg('threads', '1,2').split(',').map(Number);
const MODEL_IDS = arg('models', 'shipped,135m').split(',');
// a weight dtype, or q8_0+int16 / q4_0+int16: the same weights with sdpa.linear's activations: 'int16'
// (q5_0 / q4_k / q6_k: random block bytes with sane scales, since sdpa.quantize does not make them;
// q4_k / q6_k only the matrices whose in features are whole blocks of 256, and no token row:
// neither model has every in features a multiple of 256)
const DTYPES = arg('dtypes', 'float32,float16,q8_0,q4_0,q8_0+int16,q4_0+int16,q5_0,q4_k,q6_k').split(',');
/** { dtype, act, opts(o) }: a --dtypes entry (act: the activations option, or undefined). */
const variantOf = (v) => { const [dtype, act] = v.split('+'); return { dtype, act, opts: (o) => (act ? { ...o, activations: act } : o) }; };
const ROWS = arg('rows', QUICK ? '1,64' : '1,64,512').split(',').map(Number);
const BUDGET_MS = Number(arg('budget', QUICK ? 60 : 300));      // per matrix row, all four variants together
const MIN_SAMPLES = QUICK ? 3 : 5;
const MAX_SAMPLES = 60;
const SAMPLE_MS = 0.5;                                            // calls per sample: enough for this long
const COLD_BYTES = (QUICK ? 64 : 96) << 20;
const MAX_COPIES = 4096;                                          // (the smallest shipped matrix, 18 KB: 75 MB)
const WARMUP_MS = QUICK ? 120 : 300;                              // per kernel path, before anything is timed
const LIMIT_BYTES = (QUICK ? 64 : 256) << 20;

const out = (s) => process.stdout.write(s + '\n');
const note = (s) => process.stderr.write(s + '\n');

// The header's default pool threshold (1-thread mode sets it to Infinity, 2-thread mode back to this).
const DEFAULT_MIN_MACS = Number(/#define SDPA_DENSE_PARALLEL_MIN_MACS ([0-9.e+]+)/.exec(fs.readFileSync(path.join(ROOT, 'include', 'sdpa_dense.h'), 'utf8'))[1]);

const MODELS = {
  shipped: { name: 'shipped model (models/fortunes)', shape: SHIPPED },
  '135m': { name: "SmolLM2-135M's shape", shape: SMOLLM2_135M },
};
for (const m of MODEL_IDS) if (!MODELS[m]) throw new Error(`dense: unknown model ${m}; expected shipped, 135m`);

const fmt = (x, d = 3) => (!Number.isFinite(x) ? '-' : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x >= 1 ? x.toFixed(2) : x.toPrecision(d));
const pct = (x) => (Number.isFinite(x) ? `${(100 * x).toFixed(0)}%` : '-');
const shortMB = (b) => (b >= 1e6 ? `${(b / 1e6).toFixed(b >= 1e7 ? 0 : 1)}` : `${(b / 1e6).toFixed(2)}`);

if (arg('render')) { out(render(JSON.parse(fs.readFileSync(arg('render'), 'utf8')))); process.exit(0); }

function git(...a) {
  try { return execFileSync('git', a, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim(); } catch { return null; }
}

// ---------------------------------------------------------------------------------------------

const t0 = Date.now();
const loadStart = os.loadavg();
const commit = git('rev-parse', '--short', 'HEAD');
const dirty = commit ? (git('status', '--porcelain', '--', 'src', 'js', 'include') || '') !== '' : null;
const meta = {
  date: new Date().toISOString(), commit: commit ? commit + (dirty ? '+local changes' : '') : null, quick: QUICK,
  node: process.version, cpu: os.cpus()[0]?.model?.trim() ?? '?', cores: os.cpus().length, loadavgStart: loadStart,
};
note(`sdpa-wasm dense products  ${meta.date}  commit ${meta.commit ?? '?'}  ${meta.cpu} (${meta.cores} vCPU)  node ${meta.node}${QUICK ? '  [--quick]' : ''}`);
note(`load average at start ${loadStart.map((x) => x.toFixed(2)).join(' ')} (a shared machine: other load moves every number)`);

// The limits, probed all through the run: one sample of each (read, mul+add) per thread count
// before every row; the bound uses their medians (bench/lib/limits.mjs, openLimits).
const probe = await openLimits({ threads: Math.max(...THREADS), bytes: LIMIT_BYTES, madIters: QUICK ? 2_000_000 : 4_000_000 });
function sampleLimits() { for (const t of THREADS) probe.sample(t); }
sampleLimits();
note(`dense: limits at start: ${THREADS.map((t) => `${t}t read ${probe.stats(t).bwGBs.toFixed(1)} GB/s, mul+add ${probe.stats(t).peakGFLOPs.toFixed(1)} GFLOP/s`).join('; ')}`);

const sdpa = await createSdpa({ threads: Math.max(...THREADS), build: 'simd-threads' });
const { M, core } = sdpa[INTERNALS];
/** 1: every product on the calling thread; 2: the pool above the header's threshold; or a threshold. */
function setThreads(t, minMacs) {
  M._sdpa_ctx_set_dense_parallel_min_macs(core.ctx, minMacs ?? (t === 1 ? Infinity : DEFAULT_MIN_MACS));
}
meta.sdpaInfo = { ...sdpa.info };

const rng = rngSigned(12345);
/** A float32 heap tensor of random values in [-scale, scale). */
function randomTensor(dims, scale = 1) {
  const t = sdpa.allocTensor('float32', dims);
  const d = t.data;
  for (let i = 0; i < d.length; i++) d[i] = rng() * scale;
  return t;
}
const bytesOf = (t) => { const d = t.data; return new Uint8Array(d.buffer, d.byteOffset, d.byteLength); };

/** ggml's k-quant (and q5_0) block bytes and where their float16 scales sit (d, dmin) with sane values for them. */
const K_BLOCKS = { q4_k: { bytes: 144, halves: [[0, 0x1400], [2, 0x1800]] }, q6_k: { bytes: 210, halves: [[208, 0x0c00]] }, q5_0: { bytes: 22, halves: [[0, 0x1c00]] } };

/** A weight [rows, cols] of dtype made from random values (quantized through a float32 staging tensor; the k-quants: random block bytes, sane scales). */
function makeWeight(dtype, rows, cols) {
  if (K_BLOCKS[dtype]) {
    const w = sdpa.allocTensor(dtype, [rows, cols]);
    const b = new Uint8Array(w.byteLength);
    for (let i = 0; i < b.length; i++) b[i] = (rng() * 128 + 128) & 255;
    const { bytes, halves } = K_BLOCKS[dtype];
    for (let at = 0; at < b.length; at += bytes) for (const [o, h] of halves) { b[at + o] = h & 255; b[at + o + 1] = h >> 8; }
    w.setBytes(b);
    return w;
  }
  const st = randomTensor([rows, cols], 1 / Math.sqrt(cols));
  if (dtype === 'float32') return st;
  const w = sdpa.allocTensor(dtype, [rows, cols]);
  sdpa.quantize(st, w);
  st.dispose();
  return w;
}
/** n copies of a weight (byte copies: the bytes of each are the master's). */
function copiesOf(master, n) {
  const list = [master];
  for (let i = 1; i < n; i++) {
    const c = sdpa.allocTensor(master.dtype, master.dims);
    bytesOf(c).set(bytesOf(master));
    list.push(c);
  }
  return list;
}

/** Disposes tensors newest first (the instance keeps its tensors sorted by address: freeing from the end is cheapest). */
function disposeAll(list) { for (let i = list.length - 1; i >= 0; i--) list[i].dispose(); }

/** V8 compiles wasm with Liftoff first and tiers hot functions up to TurboFan: run every kernel path long enough first. */
function warmUp() {
  const ta = now();
  for (const variant of DTYPES) {
    const { dtype, opts } = variantOf(variant);
    const w = makeWeight(dtype, 256, 256);
    for (const n of [1, 8]) {
      const x = randomTensor([n, 256]), y = sdpa.allocTensor('float32', [n, 256]), o = opts({ out: y });
      for (const t of THREADS) {
        setThreads(t);
        const s = now();
        for (let i = 0; now() - s < WARMUP_MS / THREADS.length || i < 50; i++) sdpa.linear(x, w, o);
      }
      x.dispose(); y.dispose();
    }
    w.dispose();
  }
  note(`dense: warm-up ${((now() - ta) / 1000).toFixed(1)} s (every dtype, decode and prefill kernels, each thread mode)`);
}
warmUp();

/**
 * Times variants (each { key, threads, minMacs?, hot?, call(i) }) interleaved: per round one sample of each, the
 * order reversed every other round; a sample is k calls (k from a first estimate, so that a sample
 * lasts >= SAMPLE_MS), and `before` (if any) is one untimed call before a variant's sample (hot:
 * bring the copy back into the cache). Returns { [key]: stats of ms per call, k }.
 */
function timeVariants(variants, budgetMs = BUDGET_MS) {
  // a few calls each first (and the k estimate)
  const ks = {};
  for (const v of variants) {
    setThreads(v.threads, v.minMacs);
    v.call(0);
    const s = now();
    let n = 0;
    do { v.call(n++); } while (n < 3 && now() - s < 50);
    const per = (now() - s) / n;
    ks[v.key] = Math.max(1, Math.min(1000, Math.ceil(SAMPLE_MS / Math.max(per, 1e-4))));
  }
  const samples = Object.fromEntries(variants.map((v) => [v.key, []]));
  const idx = Object.fromEntries(variants.map((v) => [v.key, 0]));
  const start = now();
  for (let r = 0; r < MAX_SAMPLES; r++) {
    const order = r & 1 ? [...variants].reverse() : variants;
    for (const v of order) {
      setThreads(v.threads, v.minMacs);
      const k = ks[v.key];
      if (v.hot) v.call(idx[v.key]);
      const a = now();
      for (let i = 0; i < k; i++) v.call(idx[v.key]++);
      samples[v.key].push((now() - a) / k);
    }
    if (r + 1 >= MIN_SAMPLES && now() - start > budgetMs) break;
  }
  return Object.fromEntries(variants.map((v) => [v.key, { ...stats(samples[v.key]), k: ks[v.key] }]));
}

/** The bound of a row at `threads` with the limits `lim`: { ms, side, bytesPerFlop, balance }. */
function boundOf(bytes, flops, lim) {
  const mem = bytes / (lim.bwGBs * 1e6), cmp = flops / (lim.peakGFLOPs * 1e6);
  return { ms: Math.max(mem, cmp), memMs: mem, cmpMs: cmp, side: mem >= cmp ? 'memory' : 'compute', bytesPerFlop: bytes / flops, balance: lim.bwGBs / lim.peakGFLOPs };
}

// The limits the rows are held to: per thread count, the better median of the start and end
// measurements (filled in at the end; rows keep their raw times).
const results = { matrices: [], tokens: [], pool: [] };

// ---------------------------------------------------------------------------- one matrix at a time

function matrixRows(modelId, variant) {
  const s = MODELS[modelId].shape;
  const { dtype, opts } = variantOf(variant);
  for (const sh of distinctShapes(s)) {
    if (sh.cols % blockOf(dtype) !== 0) continue;  // (a k-quant needs in features of whole blocks of 256)
    const wb = sh.rows * rowBytes(dtype, sh.cols);
    const nCopies = Math.min(MAX_COPIES, Math.max(2, Math.ceil(COLD_BYTES / wb)));
    const master = makeWeight(dtype, sh.rows, sh.cols);
    const ws = copiesOf(master, nCopies);
    for (const n of ROWS) {
      if (sh.decodeOnly && n > 1) continue;
      const x = randomTensor([n, sh.cols]);
      const y = sdpa.allocTensor('float32', [n, sh.rows]);
      const o = opts({ out: y });
      const variants = [];
      for (const t of THREADS) {
        variants.push({ key: `cold${t}`, threads: t, call: (i) => sdpa.linear(x, ws[i % nCopies], o) });
        variants.push({ key: `hot${t}`, threads: t, hot: true, call: () => sdpa.linear(x, master, o) });
      }
      sampleLimits();
      const st = timeVariants(variants);
      const row = {
        model: modelId, matrix: sh.name, rows: sh.rows, cols: sh.cols, n, dtype: variant, weightBytes: wb, copies: nCopies,
        flops: 2 * n * sh.rows * sh.cols, bytes: wb + 4 * n * (sh.cols + sh.rows), per: {},
      };
      for (const t of THREADS) row.per[t] = { cold: st[`cold${t}`], hot: st[`hot${t}`] };
      results.matrices.push(row);
      note(`dense: ${modelId} ${sh.name} [${sh.rows}x${sh.cols}] ${variant} n=${n}: ` + THREADS.map((t) => `${t}t cold ${fmt(row.per[t].cold.median * 1e3)} us, hot ${fmt(row.per[t].hot.median * 1e3)} us`).join('; '));
      x.dispose(); y.dispose();
    }
    disposeAll(ws);
  }
}

// ---------------------------------------------------------------------------- one token's products

function tokenRows(modelId, variant) {
  const s = MODELS[modelId].shape;
  const { dtype, opts } = variantOf(variant);
  const list = tokenProducts(s);
  if (list.some((p) => p.cols % blockOf(dtype) !== 0)) {
    note(`dense: ${modelId} token ${variant}: skipped (in features not all whole blocks of ${blockOf(dtype)})`);
    return;
  }
  const setBytes = list.reduce((b, p) => b + p.rows * rowBytes(dtype, p.cols), 0);
  const flops = list.reduce((f, p) => f + 2 * p.rows * p.cols, 0);
  const sets = Math.max(1, Math.ceil(COLD_BYTES / setBytes));
  // one master per distinct shape, then every product its own copy (sets x the model's matrices)
  const masters = new Map();
  const key = (p) => `${p.rows}x${p.cols}`;
  for (const p of list) if (!masters.has(key(p))) masters.set(key(p), makeWeight(dtype, p.rows, p.cols));
  const all = [];
  for (let c = 0; c < sets; c++) {
    all.push(list.map((p) => {
      const w = sdpa.allocTensor(dtype, [p.rows, p.cols]);
      bytesOf(w).set(bytesOf(masters.get(key(p))));
      return w;
    }));
  }
  for (const w of masters.values()) w.dispose();
  // x and out: one heap tensor [1, n] per width (as the model's activations are heap tensors: a
  // view argument would cost a search of every live heap tensor, and this run holds thousands)
  const xs = new Map(), ys = new Map();
  for (const p of list) {
    if (!xs.has(p.cols)) xs.set(p.cols, randomTensor([1, p.cols]));
    if (!ys.has(p.rows)) ys.set(p.rows, sdpa.allocTensor('float32', [1, p.rows]));
  }
  const calls = list.map((p) => ({ x: xs.get(p.cols), o: opts({ out: ys.get(p.rows), accumulate: !!p.acc }) }));
  const token = (set) => { for (let j = 0; j < list.length; j++) sdpa.linear(calls[j].x, set[j], calls[j].o); };
  const variants = [];
  for (const t of THREADS) {
    variants.push({ key: `cold${t}`, threads: t, call: (i) => token(all[i % sets]) });
    // the one set again and again (a decoding model): only different from cold when the set is smaller than COLD_BYTES
    if (sets > 1) variants.push({ key: `set${t}`, threads: t, call: () => token(all[0]) });
  }
  sampleLimits();
  const st = timeVariants(variants, QUICK ? 150 : 1200);
  sampleLimits();
  const row = { model: modelId, dtype: variant, products: list.length, setBytes, sets, flops, bytes: setBytes, per: {} };
  for (const t of THREADS) row.per[t] = { cold: st[`cold${t}`], set: st[`set${t}`] ?? null };
  results.tokens.push(row);
  note(`dense: ${modelId} token ${variant}: ` + THREADS.map((t) => `${t}t cold ${fmt(row.per[t].cold.median)} ms` + (row.per[t].set ? `, one set ${fmt(row.per[t].set.median)} ms` : '')).join('; '));
  for (let c = all.length - 1; c >= 0; c--) disposeAll(all[c]);
  for (const t of [...xs.values(), ...ys.values()]) t.dispose();
}

// ---------------------------------------------------------------------------- where the pool pays

function poolRows() {
  if (!THREADS.includes(2) && Math.max(...THREADS) < 2) return;
  const T = Math.max(...THREADS);
  const shapes = [[4, 32], [64, 256], [128, 256], [256, 256], [512, 256], [640, 256], [576, 576], [1536, 576]];
  for (const dtype of ['float32', 'q8_0'].filter((d) => DTYPES.includes(d))) {
    for (const [rows, cols] of shapes) {
      const wb = rows * rowBytes(dtype, cols);
      const nCopies = Math.min(MAX_COPIES, Math.max(2, Math.ceil(COLD_BYTES / wb)));
      const master = makeWeight(dtype, rows, cols);
      const ws = copiesOf(master, nCopies);
      const x = randomTensor([1, cols]), y = sdpa.allocTensor('float32', [1, rows]), o = { out: y };
      const mk = (key, minMacs, hot) => ({
        key, threads: T, minMacs, hot, call: hot ? () => sdpa.linear(x, master, o) : (i) => sdpa.linear(x, ws[i % nCopies], o),
      });
      sampleLimits();
      // serial: a threshold no call reaches; pool: 0 (every call of more than one unit of 16 rows)
      const st = timeVariants([mk('coldSerial', Infinity, false), mk('coldPool', 0, false), mk('hotSerial', Infinity, true), mk('hotPool', 0, true)], QUICK ? 40 : 150);
      results.pool.push({ dtype, rows, cols, macs: rows * cols, weightBytes: wb, threads: T, ...st });
      disposeAll(ws);
      x.dispose(); y.dispose();
    }
  }
  setThreads(T);
}

// ---------------------------------------------------------------------------- run

for (const m of MODEL_IDS) {
  for (const dtype of DTYPES) {
    if (!flag('no-matrices')) matrixRows(m, dtype);
    if (!flag('no-token')) tokenRows(m, dtype);
  }
}
if (!flag('no-pool')) poolRows();
sdpa.dispose();

sampleLimits();
const limits = Object.fromEntries(THREADS.map((t) => [t, probe.stats(t)]));
probe.close();

// derived figures
for (const r of results.matrices) {
  for (const t of THREADS) {
    const p = r.per[t], b = boundOf(r.bytes, r.flops, limits[t]);
    p.bound = b;
    p.gflops = r.flops / (p.cold.median * 1e6);
    p.weightGBs = r.weightBytes / (p.cold.median * 1e6);
    p.ofBound = b.ms / p.cold.median;
    p.hotGflops = r.flops / (p.hot.median * 1e6);
    p.hotOfPeak = p.hotGflops / limits[t].peakGFLOPs;
  }
}
for (const r of results.tokens) {
  for (const t of THREADS) {
    const p = r.per[t], b = boundOf(r.bytes, r.flops, limits[t]);
    p.bound = b;
    for (const k of ['cold', 'set']) {
      if (!p[k]) continue;
      p[k].gflops = r.flops / (p[k].median * 1e6);
      p[k].weightGBs = r.setBytes / (p[k].median * 1e6);
      p[k].ofBound = b.ms / p[k].median;
      p[k].ofPeak = p[k].gflops / limits[t].peakGFLOPs;
    }
  }
}

meta.loadavgEnd = os.loadavg();
meta.seconds = (Date.now() - t0) / 1000;
const res = { meta, limits, options: { rows: ROWS, dtypes: DTYPES, models: MODEL_IDS, threads: THREADS, coldBytes: COLD_BYTES, budgetMs: BUDGET_MS, defaultMinMacs: DEFAULT_MIN_MACS }, ...results };
out(JSON_OUT ? JSON.stringify(res, null, 1) : render(res));

// ---------------------------------------------------------------------------- print

/** The tables of a run (the --json object). */
function render(res) {
  const L = [];
    const m0 = res.meta;
    L.push(`sdpa-wasm dense products  ${m0.date}  commit ${m0.commit ?? '?'}  ${m0.cpu} (${m0.cores} vCPU)  node ${m0.node}  ${m0.sdpaInfo?.build ?? ''}${m0.quick ? '  [--quick]' : ''}`);
    L.push(`load average at start ${m0.loadavgStart.map((x) => x.toFixed(2)).join(' ')}, at the end ${m0.loadavgEnd.map((x) => x.toFixed(2)).join(' ')} (a shared machine: other load moves every number); ${m0.seconds.toFixed(0)} s`);
  L.push('');
  L.push(`## Limits (bench/lib/limits.c: a ${(res.limits[res.options.threads[0]].bytes / 2 ** 20).toFixed(0)} MiB sum, f32x4 mul+add chains; one sample of each before every row; medians [min–max] of the run's samples)`);
  L.push('| threads | read GB/s | mul+add GFLOP/s | samples | machine balance (bytes per FLOP) |');
  L.push('|---|---|---|---|---|');
  for (const t of res.options.threads) {
    const l = res.limits[t];
    L.push(`| ${t} | ${l.bwGBs.toFixed(1)} [${l.bw.min.toFixed(1)}–${l.bw.max.toFixed(1)}] | ${l.peakGFLOPs.toFixed(1)} [${l.peak.min.toFixed(1)}–${l.peak.max.toFixed(1)}] (${l.chains} chains) | ${l.bw.n} | ${(l.bwGBs / l.peakGFLOPs).toFixed(3)} |`);
  }
  const TT = res.options.threads;
  if (res.matrices.length) {
    // the digest: per model, rows of x and dtype, the range over the layer matrices (not the classifier)
    const TT0 = res.options.threads, one = TT0[0], two = TT0[1];
    const span = (xs, f) => `${f(Math.min(...xs))}–${f(Math.max(...xs))}`;
    const p0 = (x) => `${Math.round(100 * x)}`;
    L.push('');
    L.push(`## Digest: per model, rows of x and dtype, the range over the layer matrices (wq/wo, wk/wv, w1/w3, w2; the tables below have each)`);
    L.push(`| model | rows | dtype | side | ${one}t GFLOP/s | ${one}t weight GB/s | ${one}t % bound | ${one}t hot % peak${two ? ` | ${two}t % bound | ${two}t ÷ ${one}t` : ''} |`);
    L.push(`|---|---|---|---|---|---|---|---|${two ? '---|---|' : ''}`);
    for (const m of res.options.models) for (const n of res.options.rows) for (const d of res.options.dtypes) {
      const rows = res.matrices.filter((x) => x.model === m && x.n === n && x.dtype === d && x.matrix !== 'classifier');
      if (!rows.length) continue;
      const a = rows.map((x) => x.per[one]);
      const side = [...new Set(a.map((p) => p.bound.side[0]))].join('/');
      const cells = [side, span(a.map((p) => p.gflops), fmt), n === 1 ? span(a.map((p) => p.weightGBs), fmt) : '-', span(a.map((p) => p.ofBound), p0) + '%', span(a.map((p) => p.hotOfPeak), p0) + '%'];
      if (two) cells.push(span(rows.map((x) => x.per[two].ofBound), p0) + '%', span(rows.map((x) => x.per[one].cold.median / x.per[two].cold.median), (x) => x.toFixed(2)) + '×');
      L.push(`| ${m} | ${n} | ${d} | ${cells.join(' | ')} |`);
    }
  }
  if (res.matrices.length) {
    L.push('');
    L.push('## One matrix at a time (sdpa.linear, x float32 [rows, in], out float32)');
    L.push(`Cold: the weight rotated over copies of >= ${res.options.coldBytes >> 20} MiB (from DRAM). Hot: the same copy again (L2 / L3 when it fits). ` +
      'GFLOP/s and weight GB/s are cold; bound = max(bytes / read bandwidth, FLOPs / mul+add peak) at that thread count, side m (memory) or c (compute) by bytes per FLOP against the balance; ' +
      '% bound = bound / cold time; hot % peak = hot GFLOP/s / mul+add peak. Medians.');
    for (const m of res.options.models) {
      const rows = res.matrices.filter((r) => r.model === m);
      if (!rows.length) continue;
      const s = MODELS[m].shape;
      L.push('');
      L.push(`### ${MODELS[m].name}: dim ${s.dim}, kv ${(s.dim / s.nHeads) * s.nKvHeads}, hidden ${s.hiddenDim}, vocab ${s.vocabSize}`);
      L.push(`| matrix [out×in] | rows | dtype | weight MB | B/FLOP | ${TT.map((t) => `${t}t µs | ${t}t GFLOP/s | ${t}t GB/s | ${t}t side | ${t}t % bound | ${t}t hot % peak`).join(' | ')}${TT.length > 1 ? ` | ${TT[1]}t ÷ ${TT[0]}t |` : ' |'}`);
      L.push(`|---|---|---|---|---|${TT.map(() => '---|---|---|---|---|---|').join('')}${TT.length > 1 ? '---|' : ''}`);
      for (const r of rows) {
        const cells = TT.map((t) => {
          const p = r.per[t];
          return `${fmt(p.cold.median * 1e3)} | ${fmt(p.gflops)} | ${fmt(p.weightGBs)} | ${p.bound.side[0]} | ${pct(p.ofBound)} | ${pct(p.hotOfPeak)}`;
        });
        const sp = TT.length > 1 ? ` | ${(r.per[TT[0]].cold.median / r.per[TT[1]].cold.median).toFixed(2)}×` : '';
        L.push(`| ${r.matrix} [${r.rows}×${r.cols}] | ${r.n} | ${r.dtype} | ${shortMB(r.weightBytes)} | ${(r.bytes / r.flops).toFixed(3)} | ${cells.join(' | ')}${sp} |`);
      }
    }
  }
  if (res.tokens.length) {
    L.push('');
    L.push("## One token's products (every layer's matrices and the classifier, in the model's order; x one row)");
    L.push(`Cold: copies of the whole set rotated over >= ${res.options.coldBytes >> 20} MiB (a set that large is cold by itself: 1 set). One set: the same set again and again, as a decoding model reads it (the shipped model's 3.6-14 MB stay in the L3). % bound against the cold time.`);
    L.push(`| model | dtype | products | set MB | GFLOP | ${TT.map((t) => `${t}t ms cold | ${t}t GFLOP/s | ${t}t weight GB/s | ${t}t side | ${t}t % bound | ${t}t ms one set | ${t}t one set GFLOP/s (% peak)`).join(' | ')}${TT.length > 1 ? ` | ${TT[1]}t ÷ ${TT[0]}t cold |` : ' |'}`);
    L.push(`|---|---|---|---|---|${TT.map(() => '---|---|---|---|---|---|---|').join('')}${TT.length > 1 ? '---|' : ''}`);
    for (const r of res.tokens) {
      const cells = TT.map((t) => {
        const p = r.per[t];
        return `${fmt(p.cold.median)} | ${fmt(p.cold.gflops)} | ${fmt(p.cold.weightGBs)} | ${p.bound.side[0]} | ${pct(p.cold.ofBound)} | ${p.set ? fmt(p.set.median) : '='} | ${p.set ? `${fmt(p.set.gflops)} (${pct(p.set.ofPeak)})` : '='}`;
      });
      const sp = TT.length > 1 ? ` | ${(r.per[TT[0]].cold.median / r.per[TT[1]].cold.median).toFixed(2)}×` : '';
      L.push(`| ${r.model} | ${r.dtype} | ${r.products} | ${shortMB(r.setBytes)}${r.sets > 1 ? ` (×${r.sets})` : ''} | ${(r.flops / 1e9).toFixed(3)} | ${cells.join(' | ')}${sp} |`);
    }
  }
  if (res.pool.length) {
    const T = res.pool[0].threads;
    L.push('');
    L.push(`## Where the pool pays (${T} threads, decode: one x row): forced onto the calling thread vs forced onto the pool (the header's threshold: ${res.options.defaultMinMacs} multiply-adds)`);
    L.push('| dtype | [out×in] | multiply-adds | cold serial µs | cold pool µs | serial ÷ pool | hot serial µs | hot pool µs | serial ÷ pool |');
    L.push('|---|---|---|---|---|---|---|---|---|');
    for (const r of res.pool) {
      L.push(`| ${r.dtype} | [${r.rows}×${r.cols}] | ${r.macs} | ${fmt(r.coldSerial.median * 1e3)} | ${fmt(r.coldPool.median * 1e3)} | ${(r.coldSerial.median / r.coldPool.median).toFixed(2)}× | ` +
        `${fmt(r.hotSerial.median * 1e3)} | ${fmt(r.hotPool.median * 1e3)} | ${(r.hotSerial.median / r.hotPool.median).toFixed(2)}× |`);
    }
  }
  return L.join('\n');
}
