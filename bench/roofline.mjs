#!/usr/bin/env node
// Where decode time goes, 1 thread, everything in one process:
//   * the machine's limits (bench/lib/limits.mjs: read bandwidth, mul+add peak);
//   * the probes of bench/lib/probes.c: register peaks (f32x4 mul+add, i32x4.dot_i16x8_s + add,
//     12 chains) and the decode's Q.K and P.V microkernels for float32, float16 and int8,
//     HOT (a 256 KiB working set of tiles) and COLD (streaming tiles from a 128 MiB buffer),
//     all timed interleaved;
//   * every decode shape of bench/lib/shapes.mjs per cache dtype, COLD (caches rotated over
//     >= 96 MiB, as bench/run.mjs times them) and HOT (the same call on a cache whose every
//     page but the last is the pool's zero page: bench/lib/sdpa-peer.mjs, openHotShape), timed
//     interleaved, against the bound max(bytes / read bandwidth, FLOPs / peak).
//
//   node bench/roofline.mjs [--quick] [--json] [--shapes=A-8192,MQA-8192] [--dtypes=float32,float16,int8]
//                           [--rounds=20] [--dim=128] [--build=simd-threads] [--no-decode]
//   node bench/roofline.mjs --render=roofline.json [--markdown]   the tables of a saved --json run
//
// Exit status 0 unless an output differs from its float64 reference or a measured figure is
// not a finite positive number (never because of a time). bench/run.mjs runs it (--quick in CI).
import fs from 'node:fs';
import os from 'node:os';
import { pathToFileURL } from 'node:url';
import { ensureLimitsBuilt, probesMjs, probesWasm } from './lib/build-limits.mjs';
import { measureLimits } from './lib/limits.mjs';
import { SHAPES, QUICK_IDS, work, checkRows } from './lib/shapes.mjs';
import { randomF32, referenceRows, compareRows, now, stats, fmtMs, fmtX } from './lib/util.mjs';

const PROBES = [   // kind = the enum of bench/lib/probes.c
  { kind: 0, stage: 'Q·K', dtype: 'float32', what: '4 rows × 2 key vectors = 8 accumulators, key-transposed tile, passes of 8 keys' },
  { kind: 1, stage: 'P·V', dtype: 'float32', what: '4 rows × 2 vectors of D = 8 accumulators, keys in groups of 16' },
  { kind: 4, stage: 'Q·K', dtype: 'float16', what: 'groups of 16 keys converted into L1, then the float32 passes' },
  { kind: 5, stage: 'P·V', dtype: 'float16', what: '16 rows converted into L1, then the float32 loop' },
  { kind: 2, stage: 'Q·K', dtype: 'int8', what: 'dot_i16x8 of 4 keys × 4 rows (8 accumulators), passes of 8 keys, + zero point and scales' },
  { kind: 3, stage: 'P·V', dtype: 'int8', what: 'dot_i16x8 of 2 keys × 8 elements × 4 rows (8 accumulators), + zero point and scale' },
];
const TILE = 64;
const HOT_BYTES = 256 << 10;

/**
 * The probes, 1 thread: { result, session }. result: { peaks: { read (GB/s), madd, idot }, probes:
 * [{ stage, dtype, tileBytes, hot, cold, coldGBs }] }, rates in GFLOP/s (int: Gop/s, a multiply-add
 * = 2 op), each the stats of `reps` samples, all probes interleaved (one sample of each per rep, the
 * order reversed every other rep). session.sample() takes one more sample of the read bandwidth and
 * the two peaks (bench/roofline.mjs calls it between decode rounds), session.finish() puts the stats
 * of all their samples into result.peaks, so that the bound comes from the same minutes as the rows.
 */
export async function measureProbes({ quick = false, D = 128, reps = quick ? 3 : 9, bufBytes = quick ? 64 << 20 : 128 << 20, log = () => {} } = {}) {
  ensureLimitsBuilt({ log });
  const { default: create } = await import(pathToFileURL(probesMjs).href);
  const M = await create({ wasmBinary: fs.readFileSync(probesWasm) });
  const buf = M._probe_alloc(bufBytes);
  if (!buf) throw new Error(`probes: could not allocate ${bufBytes} bytes`);
  M._probe_fill(buf, bufBytes);
  const peakIters = quick ? 1_000_000 : 8_000_000;   // 8M x 12 chains x 8 FLOP: ~15-20 ms at 50 GFLOP/s
  const limitJobs = [
    { name: 'read', run: () => M._probe_read(buf, bufBytes), ops: bufBytes },   // GB/s
    { name: 'madd', run: (r) => M._probe_peak_madd(peakIters, 0.25 + (r % 8)), ops: peakIters * 12 * 8 },
    { name: 'idot', run: (r) => M._probe_peak_idot(peakIters, 3 + (r % 8)), ops: peakIters * 12 * 16 },
  ];
  const jobs = [...limitJobs];
  const out = { D, bufBytes, reps, peaks: {}, probes: [] };
  for (const p of PROBES) {
    const tb = M._probe_tile_bytes(p.kind, D);
    const tiles = Math.floor(bufBytes / tb), hot = Math.max(1, Math.floor(HOT_BYTES / tb));
    const ops = tiles * 4 * TILE * D * 2;   // every call visits `tiles` tiles, hot or cold
    const row = { ...p, tileBytes: tb, hotTiles: hot, coldTiles: tiles };
    out.probes.push(row);
    jobs.push({ name: `${p.dtype} ${p.stage} hot`, row, key: 'hot', run: () => M._probe_tiles(p.kind, buf, hot, tiles, D), ops });
    jobs.push({ name: `${p.dtype} ${p.stage} cold`, row, key: 'cold', run: () => M._probe_tiles(p.kind, buf, tiles, tiles, D), ops, bytes: tiles * tb });
  }
  // tier-up: small calls of everything first (TurboFan's code is what gets timed)
  for (let i = 0; i < 40; i++) {
    M._probe_peak_madd(2000, 0.5); M._probe_peak_idot(2000, 1); M._probe_read(buf, 1 << 16);
    for (const p of PROBES) M._probe_tiles(p.kind, buf, 2, 8, D);
  }
  const samples = new Map(jobs.map((j) => [j, []])), bad = new Map(jobs.map((j) => [j, null]));
  let r = 0;
  const time = (j) => {
    const t = now();
    const sum = j.run(r);
    const ms = now() - t;
    samples.get(j).push(ms);
    if (!Number.isFinite(sum) || sum === -1) bad.set(j, `checksum ${sum}`);
  };
  for (; r < reps; r++) for (const j of r & 1 ? [...jobs].reverse() : jobs) time(j);
  const rate = (j) => { const st = stats(samples.get(j).map((ms) => j.ops / (ms * 1e6))); if (bad.get(j)) st.error = bad.get(j); return st; };
  for (const j of jobs) {
    if (!j.row) continue;
    j.row[j.key] = rate(j);
    if (j.bytes) j.row.coldGBs = stats(samples.get(j).map((ms) => j.bytes / (ms * 1e6)));
  }
  const session = {
    sample() { for (const j of r & 1 ? [...limitJobs].reverse() : limitJobs) time(j); r++; },
    finish() {
      for (const j of limitJobs) out.peaks[j.name] = rate(j);
      M._probe_free(buf);
      log(`probes: read ${out.peaks.read.median.toFixed(1)} GB/s, mul+add 12 chains ${out.peaks.madd.median.toFixed(1)} GFLOP/s, int dot 12 chains ${out.peaks.idot.median.toFixed(1)} Gop/s ` +
          `(${out.peaks.read.n} samples each); ` + out.probes.map((p) => `${p.dtype} ${p.stage} hot ${p.hot.median.toFixed(1)} cold ${p.cold.median.toFixed(1)}`).join(', '));
      return out;
    },
  };
  return { result: out, session };
}

/** The bound of one decode call: max(bytes / bw, ops / peak), and its side. */
export function roofBound(bytes, ops, bwGBs, peakG) {
  const memMs = bytes / (bwGBs * 1e6), computeMs = ops / (peakG * 1e6);
  return { ms: Math.max(memMs, computeMs), memMs, computeMs, by: memMs >= computeMs ? 'memory' : 'compute' };
}

/**
 * Decode rows, 1 thread: per shape, every dtype's cold and hot calls timed interleaved
 * (per round, per handle: one untimed call, so a hot cache is back in L2 after the others
 * ran, then `perRound` timed calls; the handle order reversed every other round).
 */
export async function measureDecode({ shapes, dtypes, rounds, perRound, build = 'simd-threads', between = () => {}, log = () => {} }) {
  const { createSdpaPeer } = await import('./lib/sdpa-peer.mjs');
  const peer = await createSdpaPeer({ threads: 1, build });
  const rows = [], errors = [];
  try {
    for (const s of shapes) {
      const seed = [...s.id].reduce((a, c) => (a * 31 + c.charCodeAt(0)) >>> 0, 7);
      const data = { q: randomF32(s.Sq * s.Hq * s.D, seed + 1), k: randomF32(s.keys * s.Hkv * s.D, seed + 2), v: randomF32(s.keys * s.Hkv * s.D, seed + 3) };
      const cr = checkRows(s);
      const refOf = (k, v) => referenceRows({ q: data.q, k, v, Hq: s.Hq, Hkv: s.Hkv, D: s.D, sp: s.past, causal: s.causal, nKeys: s.keys, rows: cr });
      const ref = refOf(data.k, data.v);
      const check = (got) => compareRows(got, ref, cr, s.Hq * s.D);
      const checkStored = (got, k, v) => compareRows(got, refOf(k, v), cr, s.Hq * s.D);
      const handles = [];
      try {
        for (const dtype of dtypes) {
          for (const hot of [false, true]) {
            const h = hot ? await peer.openHotShape(s, data, checkStored, { dtype }) : peer.openShape(s, data, check, { dtype, checkStored });
            delete h.result.output;
            handles.push({ dtype, hot, h, samples: [], i: 0 });
            if (!h.result.check.ok) errors.push(`${s.id} ${dtype} ${hot ? 'hot' : 'cold'}: output differs from the float64 reference (relative ${h.result.check.relErr.toExponential(2)})`);
            if (!h.result.rotationConsistent) errors.push(`${s.id} ${dtype}: two caches with the same data gave different outputs`);
          }
        }
        for (const x of handles) for (let w = 0, t0 = now(); w < 5 || now() - t0 < 100; w++) { x.h.call(x.i++); if (w >= 2 && now() - t0 > 400) break; }
        for (let r = 0; r < rounds; r++) {
          between();   // a sample of the read bandwidth and the peaks (measureProbes' session)
          const order = r & 1 ? [...handles].reverse() : handles;
          for (const x of order) {
            x.h.call(x.i++);
            for (let c = 0; c < perRound; c++) { const t = now(); x.h.call(x.i++); x.samples.push(now() - t); }
          }
        }
        for (const dtype of dtypes) {
          const cold = handles.find((x) => x.dtype === dtype && !x.hot), hot = handles.find((x) => x.dtype === dtype && x.hot);
          rows.push({ id: s.id, shape: s, dtype, work: work(s), bytes: cold.h.result.cacheBytes, hotBytes: hot.h.result.cacheBytes,
            caches: cold.h.result.caches, cold: stats(cold.samples), hot: stats(hot.samples),
            check: { cold: cold.h.result.check, hot: hot.h.result.check } });
          const r = rows[rows.length - 1];
          log(`${s.id.padEnd(9)} ${dtype.padEnd(8)} cold ${fmtMs(r.cold.median)} ms, hot ${fmtMs(r.hot.median)} ms (${r.cold.n} calls each)`);
        }
      } finally {
        for (const x of handles) x.h.dispose();
      }
    }
  } finally {
    peer.dispose();
  }
  return { rows, errors, info: peer.info };
}

/**
 * Adds each row's bound, from the probes' read bandwidth and peaks (sampled between the decode
 * rounds): float32 / float16 the f32x4 mul+add peak, int8 the integer-dot peak.
 */
export function addBounds(res) {
  const { probes } = res;
  for (const r of res.decode?.rows || []) {
    const peak = r.dtype === 'int8' ? probes.peaks.idot.median : probes.peaks.madd.median;
    r.peakG = peak;
    r.bound = roofBound(r.bytes, r.work.flops, probes.peaks.read.median, peak);
    r.coldToBound = r.cold.median / r.bound.ms;
    r.hotToCompute = r.hot.median / r.bound.computeMs;
    r.coldToHot = r.cold.median / r.hot.median;
  }
}

/** Every figure a finite positive number: the list of those that are not. */
export function badFigures(res) {
  const bad = [];
  const need = (what, x) => { if (!(Number.isFinite(x) && x > 0)) bad.push(`${what} = ${x}`); };
  need('read bandwidth (limits)', res.limits?.bwGBs);
  need('mul+add peak', res.limits?.peakGFLOPs);
  for (const [k, v] of Object.entries(res.probes?.peaks || {})) { need(`${k} peak`, v.median); if (v.error) bad.push(`${k} peak: ${v.error}`); }
  for (const p of res.probes?.probes || []) {
    for (const k of ['hot', 'cold']) { need(`${p.dtype} ${p.stage} ${k}`, p[k]?.median); if (p[k]?.error) bad.push(`${p.dtype} ${p.stage} ${k}: ${p[k].error}`); }
  }
  for (const r of res.decode?.rows || []) { need(`${r.id} ${r.dtype} cold`, r.cold.median); need(`${r.id} ${r.dtype} hot`, r.hot.median); need(`${r.id} ${r.dtype} bound`, r.bound?.ms); }
  return bad;
}

const pad = (rows) => {
  const w = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i]).length)));
  return rows.map((r) => r.map((x, i) => (i < 2 ? String(x).padEnd(w[i]) : String(x).padStart(w[i]))).join('  '));
};

export function render(res) {
  const L = [], m = res.meta, lim = res.limits, pr = res.probes;
  L.push(`roofline, 1 thread  ${m.date}  commit ${m.commit ?? '?'}  ${m.cpu}  node ${m.node}${m.quick ? '  [--quick]' : ''}`);
  L.push(`load average at start ${m.loadavgStart.map((x) => x.toFixed(2)).join(' ')}, end ${m.loadavgEnd.map((x) => x.toFixed(2)).join(' ')}`);
  L.push(`limits (bench/lib/limits.c, once at the start, as bench/run.mjs's bound): read ${lim.bwGBs.toFixed(1)} GB/s (${lim.bw.min.toFixed(1)}–${lim.bw.max.toFixed(1)}), ` +
    `mul+add ${lim.peakGFLOPs.toFixed(1)} GFLOP/s (${lim.peak.chains} chains, ${lim.peak.min.toFixed(1)}–${lim.peak.max.toFixed(1)})`);
  L.push('');
  L.push(`probes (bench/lib/probes.c, D = ${pr.D}, medians of ${pr.reps} interleaved samples; HOT: ${HOT_BYTES >> 10} KiB of tiles, COLD: tiles streamed from ${pr.bufBytes >> 20} MiB)`);
  const pk = pr.peaks, rows = [['probe', 'dtype', 'tile', 'hot G/s', '% peak', 'cold G/s', '% peak', 'cold GB/s']];
  const range = (x) => `${x.median.toFixed(1)} (${x.min.toFixed(1)}–${x.max.toFixed(1)}, ${x.n} samples)`;
  rows.push([`read bandwidth, a ${pr.bufBytes >> 20} MiB sum`, '-', '-', '-', '-', '-', '-', range(pk.read)]);
  rows.push(['register peak f32x4 mul+add, 12 chains', 'float32', '-', range(pk.madd), '100%', '-', '-', '-']);
  rows.push(['register peak i32x4.dot_i16x8_s + add, 12 chains', 'int8', '-', range(pk.idot), '100%', '-', '-', '-']);
  for (const p of pr.probes) {
    const peak = p.dtype === 'int8' ? pk.idot.median : pk.madd.median;
    rows.push([`${p.stage} microkernel (${p.what})`, p.dtype, `${(p.tileBytes / 1024).toFixed(1)} KiB`, p.hot.median.toFixed(1), `${(100 * p.hot.median / peak).toFixed(0)}%`,
      p.cold.median.toFixed(1), `${(100 * p.cold.median / peak).toFixed(0)}%`, p.coldGBs.median.toFixed(1)]);
  }
  L.push(...pad(rows));
  L.push('G/s: GFLOP/s (int8: Gop/s, an int16 multiply-add = 2 op) of 4 rows × 64 keys × D × 2 per tile; % peak: of the 12-chain register peak of its kind (int8: the integer dot).');
  L.push('The read bandwidth and the peaks are sampled with the probes and again before every decode round: their medians over the whole run make the bound below.');
  if (res.decode?.rows?.length) {
    L.push('');
    L.push(`decode, 1 thread (${res.decode.info?.build ?? '?'}), medians of ${res.decode.rounds} rounds × ${res.decode.perRound} calls, every dtype's cold and hot calls interleaved`);
    const t = [['shape', 'dtype', 'MB', 'cold ms', 'hot ms', 'cold/hot', 'bytes/bw', 'ops/peak', 'bound', 'side', 'cold ×bnd', 'hot ×ops/peak']];
    for (const r of res.decode.rows) {
      t.push([r.id, r.dtype, (r.bytes / 1e6).toFixed(1), fmtMs(r.cold.median), fmtMs(r.hot.median), fmtX(r.coldToHot),
        fmtMs(r.bound.memMs), fmtMs(r.bound.computeMs), fmtMs(r.bound.ms), r.bound.by, fmtX(r.coldToBound), fmtX(r.hotToCompute)]);
    }
    L.push(...pad(t));
    L.push('MB: the cache pages one call reads (pool bytes). cold: caches rotated over >= 96 MiB (as bench/run.mjs); hot: the same call on a cache whose pages but the last');
    L.push('of each KV head are the pool\'s zero page (the data stays in L2). bound = max(bytes / read bandwidth, FLOPs / peak), from the probes\' read bandwidth and peaks:');
    L.push('float32 and float16 the f32x4 mul+add peak, int8 the integer-dot peak (FLOPs counted as int ops). side: the larger term. hot ×ops/peak: hot ms / the compute term.');
  }
  if (res.errors?.length) { L.push(''); L.push('Errors:'); for (const e of res.errors) L.push(`  ${e}`); }
  return L.join('\n');
}

/** The two tables as markdown (as in bench/HISTORY.md's roofline entries): `--render=run.json --markdown`. */
export function renderMarkdown(res) {
  const L = [], pr = res.probes, pk = pr.peaks, lim = res.limits;
  L.push(`| probe (1 thread, D = ${pr.D}) | dtype | hot G/s | of peak | cold G/s | of peak | cold GB/s |`);
  L.push('|---|---|---|---|---|---|---|');
  L.push(`| read bandwidth, a ${pr.bufBytes >> 20} MiB sum (${pk.read.n} samples) | - | - | - | - | - | ${pk.read.median.toFixed(1)} (${pk.read.min.toFixed(1)}–${pk.read.max.toFixed(1)}) |`);
  L.push(`| register peak, f32x4 mul+add, 12 chains | float32 | ${pk.madd.median.toFixed(1)} | 100% | - | - | - |`);
  L.push(`| register peak, i32x4.dot_i16x8_s + add, 12 chains | int8 | ${pk.idot.median.toFixed(1)} | 100% | - | - | - |`);
  for (const p of pr.probes) {
    const peak = p.dtype === 'int8' ? pk.idot.median : pk.madd.median;
    L.push(`| ${p.stage} microkernel (${p.what}) | ${p.dtype} | ${p.hot.median.toFixed(1)} | ${(100 * p.hot.median / peak).toFixed(0)}% | ` +
      `${p.cold.median.toFixed(1)} | ${(100 * p.cold.median / peak).toFixed(0)}% | ${p.coldGBs.median.toFixed(1)} |`);
  }
  L.push(`| bench/lib/limits.c once at the start: mul+add peak (best of 8/12/14 chains), read of 256 MiB | float32 | ${lim.peakGFLOPs.toFixed(1)} | - | - | - | ${lim.bwGBs.toFixed(1)} |`);
  if (res.decode?.rows?.length) {
    L.push('');
    L.push('| shape | dtype | MB read | cold ms | hot ms | cold / hot | bytes / bw ms | ops / peak ms | bound ms | side | cold / bound | hot / (ops / peak) |');
    L.push('|---|---|---|---|---|---|---|---|---|---|---|---|');
    for (const r of res.decode.rows) {
      L.push(`| ${r.id} | ${r.dtype} | ${(r.bytes / 1e6).toFixed(1)} | ${fmtMs(r.cold.median)} | ${fmtMs(r.hot.median)} | ${fmtX(r.coldToHot)} | ${fmtMs(r.bound.memMs)} | ` +
        `${fmtMs(r.bound.computeMs)} | ${fmtMs(r.bound.ms)} | ${r.bound.by} | ${fmtX(r.coldToBound)} | ${fmtX(r.hotToCompute)} |`);
    }
  }
  return L.join('\n');
}

export async function runRoofline({ quick = false, shapes, dtypes = ['float32', 'float16', 'int8'], rounds, perRound, dim = 128, build = 'simd-threads', decode = true, log = () => {} } = {}) {
  const git = await import('node:child_process').then(({ spawnSync }) => (...a) => { const r = spawnSync('git', a, { encoding: 'utf8' }); return r.status === 0 ? r.stdout.trim() : null; });
  const meta = { date: new Date().toISOString(), commit: git('rev-parse', '--short', 'HEAD'), quick, node: process.version, cpu: os.cpus()[0]?.model?.trim() ?? '?', cores: os.cpus().length, loadavgStart: os.loadavg() };
  const errors = [];
  const limits = await measureLimits({ threads: 1, bytes: quick ? 64 << 20 : 256 << 20, reps: quick ? 3 : 11, madReps: quick ? 3 : 7, madIters: quick ? 5_000_000 : 20_000_000, log });
  const { result: probes, session } = await measureProbes({ quick, D: dim, log });
  const res = { meta, limits, probes, decode: null, errors };
  if (decode) {
    const ids = shapes || (quick ? QUICK_IDS : SHAPES.map((s) => s.id));
    const list = SHAPES.filter((s) => ids.includes(s.id) && s.kind === 'decode');
    const rr = rounds ?? (quick ? 3 : 20), pp = perRound ?? (quick ? 2 : 5);
    const d = await measureDecode({ shapes: list, dtypes, rounds: rr, perRound: pp, build, between: () => session.sample(), log });
    res.decode = { ...d, rounds: rr, perRound: pp };
    errors.push(...d.errors);
  }
  session.finish();
  addBounds(res);
  errors.push(...badFigures(res).map((b) => `not a finite positive figure: ${b}`));
  meta.loadavgEnd = os.loadavg();
  return res;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const argv = process.argv.slice(2);
  const opt = (n) => { const a = argv.find((x) => x.startsWith(`--${n}=`)); return a ? a.slice(n.length + 3) : undefined; };
  const known = ['quick', 'json', 'shapes', 'dtypes', 'rounds', 'per-round', 'dim', 'build', 'no-decode', 'render', 'markdown', 'help'];
  for (const a of argv) {
    if (!a.startsWith('--') || !known.includes(a.slice(2).split('=')[0])) { console.error(`roofline: unknown argument ${a} (known: ${known.map((k) => '--' + k).join(' ')})`); process.exit(2); }
  }
  if (argv.includes('--help')) { console.log(fs.readFileSync(new URL(import.meta.url), 'utf8').split('\n').slice(1, 18).join('\n')); process.exit(0); }
  if (opt('render')) { const r = JSON.parse(fs.readFileSync(opt('render'), 'utf8')); console.log(argv.includes('--markdown') ? renderMarkdown(r) : render(r)); process.exit(0); }
  const shapes = opt('shapes')?.split(',');
  for (const id of shapes || []) if (!SHAPES.some((s) => s.id === id && s.kind === 'decode')) { console.error(`roofline: ${id} is not a decode shape of bench/lib/shapes.mjs`); process.exit(2); }
  const num = (n) => (opt(n) ? Number(opt(n)) : undefined);
  const res = await runRoofline({ quick: argv.includes('--quick'), shapes, dtypes: opt('dtypes')?.split(','), rounds: num('rounds'), perRound: num('per-round'),
    dim: num('dim') ?? 128, build: opt('build') ?? 'simd-threads', decode: !argv.includes('--no-decode'), log: (m) => process.stderr.write(m + '\n') });
  if (argv.includes('--json')) process.stdout.write(JSON.stringify(res) + '\n');
  else console.log(render(res));
  process.exit(res.errors.length ? 1 : 0);
}
