#!/usr/bin/env node
// sdpa-wasm benchmark: sdpa-wasm vs onnxruntime-web vs naive JS vs
// the machine's limits, in one run, per thread count.
//
//   npm run bench                 full run, table on stdout (about 3–4 min on 2 vCPU)
//   npm run -s bench -- --json    one JSON object on stdout (progress on stderr; -s keeps npm's banner off stdout)
//   npm run bench -- --quick      smoke run for CI (< 1 min): few shapes, few calls
//   options: --threads=1,2  --shapes=A-2048,D-0+128  --no-naive  --no-dtypes (no float16/int8 cache rows)  --no-build
//            --no-relaxed (no relaxed-SIMD rows / FMA peak; they run in the child with --experimental-wasm-relaxed-simd on Node 20)
//            --render=run.json  prints the table of a saved --json run
//            --no-roofline (no bench/roofline.mjs section: probes, hot/cold decode rows against the bound, 1 thread)
//
// Exit status: 0 unless something crashed or an output did not match the
// float64 reference (or sdpa-wasm's output, for ORT). Times never fail the run.
import { fork, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SHAPES, QUICK_IDS, bound } from './lib/shapes.mjs';
import { render as renderRoofline } from './roofline.mjs';
import { ensureLimitsBuilt } from './lib/build-limits.mjs';
import { fmtMs, fmtX } from './lib/util.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');

const argv = process.argv.slice(2);
const flag = (name) => argv.includes(`--${name}`);
const opt = (name) => { const a = argv.find((x) => x.startsWith(`--${name}=`)); return a ? a.slice(name.length + 3) : undefined; };
const known = ['json', 'quick', 'no-naive', 'no-dtypes', 'no-relaxed', 'no-build', 'no-roofline', 'help', 'threads', 'shapes', 'render'];
for (const a of argv) {
  const name = a.replace(/^--/, '').split('=')[0];
  if (!a.startsWith('--') || !known.includes(name)) { console.error(`bench: unknown argument ${a} (known: ${known.map((k) => '--' + k).join(' ')})`); process.exit(2); }
}
if (flag('help')) { console.log(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1, 14).join('\n')); process.exit(0); }

const quick = flag('quick');
const json = flag('json');
const threadList = (opt('threads') || '1,2').split(',').map(Number);
const shapeIds = opt('shapes') ? opt('shapes').split(',') : quick ? QUICK_IDS : SHAPES.map((s) => s.id);
for (const id of shapeIds) if (!SHAPES.some((s) => s.id === id)) { console.error(`bench: unknown shape ${id} (known: ${SHAPES.map((s) => s.id).join(' ')})`); process.exit(2); }
if (threadList.some((t) => !Number.isInteger(t) || t < 1 || t > 16)) { console.error('bench: --threads takes positive integers, e.g. --threads=1,2'); process.exit(2); }

const err = (m) => process.stderr.write(m + '\n');

function ensureWasmBuilt() {
  const need = ['dist/sdpa-simd-threads.mjs', 'dist/sdpa-simd-threads.wasm'].map((f) => path.join(root, f));
  if (need.every((f) => fs.existsSync(f)) || flag('no-build')) return;
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
  const script = pkg.scripts?.['build:wasm'] ? 'build:wasm' : pkg.scripts?.build ? 'build' : null;
  if (!script) return;
  err(`bench: dist/ is missing, running npm run ${script}`);
  const r = spawnSync('npm', ['run', script], { cwd: root, stdio: ['ignore', 2, 2] });
  if (r.status !== 0) err(`bench: npm run ${script} failed (exit ${r.status}); sdpa-wasm will be reported as unavailable`);
}

// Relaxed SIMD in the child: Node 20 needs the flag (Node 21+ has it on, and may not know the flag).
const RELAXED_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 28, 1, 26, 0,
  67, 0, 0, 0, 0, 253, 19, 67, 0, 0, 0, 0, 253, 19, 67, 0, 0, 0, 0, 253, 19, 253, 133, 2, 11]);
const relaxedRows = !flag('no-relaxed');
const childExecArgv = relaxedRows && !WebAssembly.validate(RELAXED_PROBE) ? ['--experimental-wasm-relaxed-simd'] : [];

function runChild(threads) {
  return new Promise((resolve) => {
    const cfg = { threads, quick, shapes: shapeIds, naive: !flag('no-naive') && threads === Math.min(...threadList), dtypes: !flag('no-dtypes'), relaxed: relaxedRows };
    const child = fork(path.join(here, 'lib', 'child.mjs'), [JSON.stringify(cfg)], { cwd: root, stdio: ['ignore', 'pipe', 'pipe', 'ipc'], execArgv: childExecArgv });
    // ORT prints through the child's stdout: keep it off ours (our stdout is the table / JSON)
    child.stdout.on('data', (d) => process.stderr.write(d));
    child.stderr.on('data', (d) => process.stderr.write(String(d).slice(0, 4000)));
    let result = null, fatal = null;
    child.on('message', (m) => {
      if (m.type === 'log') err(m.text);
      else if (m.type === 'result') result = m.data;
      else if (m.type === 'fatal') fatal = m.text;
    });
    child.on('exit', (code, signal) => {
      if (!result) result = { threads, rows: [], errors: [`child process for ${threads} thread(s) crashed (exit ${code}${signal ? ', ' + signal : ''})${fatal ? ': ' + fatal : ''}`] };
      resolve(result);
    });
  });
}

// bench/roofline.mjs in a process of its own, after the thread counts' children (1 thread;
// its decode rows are the decode shapes of this run): { data, error }
function runRooflineChild() {
  const ids = shapeIds.filter((id) => SHAPES.find((s) => s.id === id).kind === 'decode');
  const args = ['--json', ...(quick ? ['--quick'] : []), ...(ids.length ? [`--shapes=${ids.join(',')}`] : ['--no-decode']),
    ...(flag('no-dtypes') ? ['--dtypes=float32'] : [])];
  return new Promise((resolve) => {
    const child = fork(path.join(here, 'roofline.mjs'), args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    let pending = '';
    child.stderr.on('data', (d) => {
      const lines = (pending + d).split('\n');
      pending = lines.pop();
      for (const l of lines) err(`[roofline] ${l.slice(0, 4000)}`);
    });
    child.on('close', (code, signal) => {   // (after its stdout is read to the end)
      if (pending) err(`[roofline] ${pending.slice(0, 4000)}`);
      let data = null;
      try { data = JSON.parse(out); } catch { /* crashed before its JSON */ }
      const error = data && code === 0 ? null : `roofline (bench/roofline.mjs): exit ${code}${signal ? ', ' + signal : ''}${data?.errors?.length ? ': ' + data.errors.join('; ') : ''}`;
      resolve({ data, error });
    });
  });
}

// ------------------------------------------------------------------ ratios
const med = (x) => (x && Number.isFinite(x.median) ? x.median : null);
function enrich(row, limits, naiveRow) {
  const t = med(row.sdpa?.time);
  row.bound = limits ? bound(row.shape, limits) : null;
  const naive = med((row.naive || naiveRow)?.time);
  const gqaOp = med(row.gqa?.op), attnOp = med(row.attn?.op);
  const gqaRun = med(row.gqa?.run), attnRun = med(row.attn?.run);
  const ortBestOp = [gqaOp, attnOp].filter((x) => x != null).reduce((a, b) => Math.min(a, b), Infinity);
  const div = (a, b) => (a != null && b != null && Number.isFinite(a) && Number.isFinite(b) && b > 0 ? a / b : null);
  row.ratios = {
    toBound: div(t, row.bound?.ms),                 // sdpa / bound (≥ 1 unless caches help)
    toComputeBound: div(t, row.bound?.flopMs),
    gqaOpOverSdpa: div(gqaOp, t), gqaRunOverSdpa: div(gqaRun, t),   // > 1: sdpa faster
    attnOpOverSdpa: div(attnOp, t), attnRunOverSdpa: div(attnRun, t),
    ortBestOpOverSdpa: div(ortBestOp, t),
    naiveOverSdpa: div(naive, t),
    gqa16OpOverF16: div(med(row.gqa16?.op), med(row.sdpaF16?.time)),   // ORT float16 GQA / our float16 cache
  };
  if (t != null) {
    row.sdpa.GBs = row.work.kvBytes / (t * 1e6);
    row.sdpa.GFLOPs = row.work.flops / (t * 1e6);
  }
  row.naiveFromThreads = row.naive ? row.threads : naiveRow ? naiveRow.threads : null;
  // relaxed SIMD: its bound takes the FMA peak (same bandwidth)
  const tr = med(row.sdpaRelaxed?.time);
  row.boundFma = limits && limits.fmaGFLOPs ? bound(row.shape, { bwGBs: limits.bwGBs, peakGFLOPs: limits.fmaGFLOPs }) : null;
  // (against the plain build timed in the same interleaved loop; else its own row)
  row.ratios.relaxedSpeedup = div(med(row.sdpaInterleaved?.time) ?? t, tr);   // > 1: relaxed faster than plain
  row.ratios.relaxedToFmaBound = div(tr, row.boundFma?.ms);
  row.ratios.relaxedToFmaComputeBound = div(tr, row.boundFma?.flopMs);
}

/** The rows bound by compute (the relaxed-SIMD target): B, MQA and the prefills. */
const COMPUTE_BOUND_FAMILIES = new Set(['B', 'MQA', 'D']);

function targets(byThreads) {
  const out = [];
  const rowsOf = (T) => byThreads.get(T)?.rows || [];
  for (const [T] of byThreads) {
    for (const r of rowsOf(T)) {
      const s = r.shape;
      if (s.kind === 'decode' && s.keys >= 2048) {
        out.push({ target: `decode ${r.id} ${T}t: ≤ 1.5× bound`, value: r.ratios.toBound, limit: 1.5, met: r.ratios.toBound != null && r.ratios.toBound <= 1.5 });
        out.push({ target: `decode ${r.id} ${T}t: ≥ 5× faster than ORT's fastest op`, value: r.ratios.ortBestOpOverSdpa, limit: 5, met: r.ratios.ortBestOpOverSdpa != null && r.ratios.ortBestOpOverSdpa >= 5 });
      }
      if (s.kind === 'prefill') {
        out.push({ target: `prefill ${r.id} ${T}t: ≤ 2× compute bound`, value: r.ratios.toComputeBound, limit: 2, met: r.ratios.toComputeBound != null && r.ratios.toComputeBound <= 2 });
        out.push({ target: `prefill ${r.id} ${T}t: ≥ 1.3× faster than ORT's fastest op`, value: r.ratios.ortBestOpOverSdpa, limit: 1.3, met: r.ratios.ortBestOpOverSdpa != null && r.ratios.ortBestOpOverSdpa >= 1.3 });
      }
    }
  }
  // compact caches faster than float32 in the same run
  for (const [T] of byThreads) {
    for (const r of rowsOf(T)) {
      const f32 = med(r.sdpa?.time), f16 = med(r.sdpaF16?.time), i8 = med(r.sdpaI8?.time);
      if (!f32) continue;
      if (r.id === 'A-8192') {
        if (f16) out.push({ target: `A-8192 (${T}t): float16 cache ≥ 1.5× faster than float32`, value: f32 / f16, limit: 1.5, met: f32 / f16 >= 1.5 });
        if (i8) out.push({ target: `A-8192 (${T}t): int8 cache ≥ 2.5× faster than float32`, value: f32 / i8, limit: 2.5, met: f32 / i8 >= 2.5 });
      }
      if ((r.id === 'MQA-8192' || r.id === 'B-4096') && i8) {
        out.push({ target: `${r.id} (${T}t): int8 cache ≥ 1.3× faster than float32`, value: f32 / i8, limit: 1.3, met: f32 / i8 >= 1.3 });
      }
      // int4 (1 thread): int4 >= 1.4x float32 and >= 0.85x int8; K int8 + V int4 >= 0.9x int8
      const i4 = med(r.sdpaI4?.time), i84 = med(r.sdpaI8I4?.time);
      if (T === 1 && (r.id === 'A-8192' || r.id === 'MQA-8192') && i4 && i8) {
        out.push({ target: `${r.id} (1t): int4 cache ≥ 1.4× faster than float32`, value: f32 / i4, limit: 1.4, met: f32 / i4 >= 1.4 });
        out.push({ target: `${r.id} (1t): int4 cache ≥ 0.85× the speed of int8`, value: i8 / i4, limit: 0.85, met: i8 / i4 >= 0.85 });
        if (i84) out.push({ target: `${r.id} (1t): K int8 + V int4 ≥ 0.9× the speed of int8`, value: i8 / i84, limit: 0.9, met: i8 / i84 >= 0.9 });
      }
    }
  }
  // the relaxed-SIMD build on the compute-bound rows, in the same run
  for (const [T] of byThreads) {
    for (const r of rowsOf(T)) {
      if (!COMPUTE_BOUND_FAMILIES.has(r.shape.family) || !r.sdpaRelaxed) continue;
      const v = r.ratios.relaxedSpeedup;
      out.push({ target: `${r.id} (${T}t): relaxed SIMD ≥ 1.3× faster than plain SIMD128`, value: v, limit: 1.3, met: v != null && v >= 1.3 });
    }
  }
  if (byThreads.has(1) && byThreads.has(2)) {
    for (const id of ['A-8192', 'MQA-8192']) {
      const a = rowsOf(1).find((r) => r.id === id), b = rowsOf(2).find((r) => r.id === id);
      if (!a || !b) continue;
      const v = med(a.sdpa?.time) && med(b.sdpa?.time) ? med(a.sdpa.time) / med(b.sdpa.time) : null;
      out.push({ target: `${id}: 2 threads ≥ 1.6× faster than 1`, value: v, limit: 1.6, met: v != null && v >= 1.6 });
    }
  }
  return out;
}

// ------------------------------------------------------------------ output
function table(res) {
  const L = [];
  L.push(`sdpa-wasm benchmark  ${res.meta.date}  commit ${res.meta.commit ?? '?'}  ${res.meta.cpu} (${res.meta.cores} vCPU)  node ${res.meta.node}  onnxruntime-web ${res.meta.ortVersion ?? '-'}${res.meta.quick ? '  [--quick]' : ''}`);
  L.push(`load average at start ${res.meta.loadavgStart.map((x) => x.toFixed(2)).join(' ')}, end ${res.meta.loadavgEnd.map((x) => x.toFixed(2)).join(' ')} (the machine is shared: other load skews everything)`);
  for (const c of res.runs) {
    const lim = c.limits;
    L.push('');
    L.push(`== ${c.threads} thread${c.threads > 1 ? 's' : ''}  sdpa-wasm ${c.sdpaInfo ? `${c.sdpaInfo.build}, ${c.sdpaInfo.threads}t` : 'unavailable'}` +
      (lim ? `  limits: read ${lim.bwGBs.toFixed(1)} GB/s (${lim.bw.min.toFixed(1)}–${lim.bw.max.toFixed(1)}), mul+add ${lim.peakGFLOPs.toFixed(1)} GFLOP/s (${lim.peak.min.toFixed(1)}–${lim.peak.max.toFixed(1)})` : '  limits: -'));
    const head = ['shape', 'Hq/Hkv/D', 'keys', 'sdpa ms', '(min–max)', 'GB/s', 'GFLOP/s', 'bound', '×bnd', 'GQA op', 'GQA run', 'Attn op', 'Attn run', 'naive', '÷GQA', '÷Attn', '÷naive', 'check'];
    const rows = [head];
    for (const r of c.rows) {
      const s = r.shape, t = r.sdpa?.time;
      const okAll = ['sdpa', 'gqa', 'attn', 'naive'].every((p) => !r[p] || (!r[p].error && (!r[p].check || r[p].check.ok))) &&
        ['gqa', 'attn'].every((p) => !r[p]?.vsSdpa || r[p].vsSdpa.ok);
      const naiveT = r.naive?.time ?? r.naiveShared?.time;
      rows.push([
        r.id, `${s.Hq}/${s.Hkv}/${s.D}`, String(s.kind === 'prefill' ? `${s.past}+${s.Sq}` : s.keys),
        r.sdpa?.error ? 'ERROR' : fmtMs(t?.median), t ? `${fmtMs(t.min)}–${fmtMs(t.max)}` : '',
        r.sdpa?.GBs ? r.sdpa.GBs.toFixed(1) : '-', r.sdpa?.GFLOPs ? r.sdpa.GFLOPs.toFixed(1) : '-',
        r.bound ? `${fmtMs(r.bound.ms)}${r.bound.by === 'memory' ? 'm' : 'c'}` : '-', fmtX(r.ratios.toBound),
        r.gqa?.error ? 'ERROR' : fmtMs(r.gqa?.op?.median), r.gqa?.error ? '' : fmtMs(r.gqa?.run?.median),
        r.attn?.error ? 'ERROR' : fmtMs(r.attn?.op?.median), r.attn?.error ? '' : fmtMs(r.attn?.run?.median),
        fmtMs(naiveT?.median),
        fmtX(r.ratios.gqaOpOverSdpa), fmtX(r.ratios.attnOpOverSdpa), fmtX(r.ratios.naiveOverSdpa),
        okAll ? 'ok' : 'MISMATCH',
      ]);
    }
    const w = head.map((_, i) => Math.max(...rows.map((r) => r[i].length)));
    for (const r of rows) L.push(r.map((x, i) => (i < 1 ? x.padEnd(w[i]) : x.padStart(w[i]))).join('  '));
  }
  const div = (a, b) => (a != null && b != null && b > 0 ? a / b : null);
  for (const c of res.runs) {
    const rows = c.rows.filter((r) => r.sdpaRelaxed);
    if (!rows.length) continue;
    const lim = c.limits;
    L.push('');
    L.push(`== relaxed SIMD, ${c.threads} thread${c.threads > 1 ? 's' : ''}: ${c.sdpaRelaxedInfo ? c.sdpaRelaxedInfo.build : '-'} vs ${c.sdpaInfo ? c.sdpaInfo.build : '-'}, float32 cache; ` +
      (lim && lim.fmaGFLOPs ? `FMA (relaxed_madd) ${lim.fmaGFLOPs.toFixed(1)} GFLOP/s (${lim.fma.min.toFixed(1)}–${lim.fma.max.toFixed(1)}) = ${(lim.fmaGFLOPs / lim.peakGFLOPs).toFixed(2)}× mul+add ${lim.peakGFLOPs.toFixed(1)}` : 'FMA peak: -'));
    const head = ['shape', 'plain ms', 'relaxed ms', '(min–max)', '×plain', 'GFLOP/s', 'bound', 'plain ×bnd', 'FMA bound', '×FMA bnd', 'check'];
    const tab = [head];
    for (const r of rows) {
      const x = r.sdpaRelaxed, t = x?.time, plain = med(r.sdpaInterleaved?.time) ?? med(r.sdpa?.time);
      tab.push([r.id, fmtMs(plain), x?.error ? 'ERROR' : fmtMs(t?.median), t ? `${fmtMs(t.min)}–${fmtMs(t.max)}` : '',
        fmtX(r.ratios.relaxedSpeedup), t ? (r.work.flops / (t.median * 1e6)).toFixed(1) : '-',
        r.bound ? `${fmtMs(r.bound.ms)}${r.bound.by === 'memory' ? 'm' : 'c'}` : '-', fmtX(div(plain, r.bound?.ms)),
        r.boundFma ? `${fmtMs(r.boundFma.ms)}${r.boundFma.by === 'memory' ? 'm' : 'c'}` : '-', fmtX(r.ratios.relaxedToFmaBound),
        x && !x.error && x.check?.ok ? 'ok' : 'MISMATCH']);
    }
    const w = head.map((_, i) => Math.max(...tab.map((t) => t[i].length)));
    for (const t of tab) L.push(t.map((x, i) => (i < 1 ? x.padEnd(w[i]) : x.padStart(w[i]))).join('  '));
    L.push('plain / relaxed ms: medians of the two builds timed in one loop, calls interleaved (same data, same load); ×plain = plain ms / relaxed ms (> 1: relaxed faster);');
    L.push('bound / plain ×bnd: the plain build against the mul+add peak; FMA bound / ×FMA bnd: the relaxed build against the FMA (relaxed_madd) peak, same bandwidth.');
  }
  for (const c of res.runs) {
    const rows = c.rows.filter((r) => r.sdpaF16 || r.sdpaI8);
    if (!rows.length) continue;
    L.push('');
    L.push(`== cache dtypes, ${c.threads} thread${c.threads > 1 ? 's' : ''}: ms per call, ×f32 = float32 time / this time (> 1: faster), bytes = cache bytes / float32 cache bytes, ÷ORT16 = ORT float16 GQA op / f16 ms`);
    const head = ['shape', 'f32 ms', 'f16 ms', '×f32', 'f16 bytes', 'f16 |Δ| vs f32 data', 'ORT GQA f16 op ms', 'run ms', '÷ORT16', 'ORT16 |Δ|', 'int8 ms', '×f32', 'int8 bytes', 'int8 |Δ| vs f32 data',
      'int4 ms', '×f32', 'int4 bytes', 'int4 |Δ| vs f32 data', 'K8/V4 ms', '×f32', 'K8/V4 bytes', 'K8/V4 |Δ| vs f32 data', 'check'];
    const tab = [head];
    for (const r of rows) {
      const f32 = med(r.sdpa?.time);
      const cell = (x) => (x?.error ? ['ERROR', '', '', ''] : [fmtMs(med(x?.time)), fmtX(div(f32, med(x?.time))),
        x?.cacheBytes && r.sdpa?.cacheBytes ? (x.cacheBytes / r.sdpa.cacheBytes).toFixed(3) : '-',
        x?.vsFloat32 ? x.vsFloat32.maxAbs.toExponential(2) : '-']);
      const g = r.gqa16;
      const ort16 = g?.error ? ['ERROR', '', '', ''] : [fmtMs(med(g?.op)), fmtMs(med(g?.run)), fmtX(r.ratios.gqa16OpOverF16), g?.check ? g.check.maxAbs.toExponential(2) : '-'];
      const ok = [r.sdpaF16, r.sdpaI8, r.sdpaI4, r.sdpaI8I4, g].every((x) => !x || (!x.error && x.check?.ok));
      tab.push([r.id, fmtMs(f32), ...cell(r.sdpaF16), ...ort16, ...cell(r.sdpaI8), ...cell(r.sdpaI4), ...cell(r.sdpaI8I4), ok ? 'ok' : 'MISMATCH']);
    }
    const w = head.map((_, i) => Math.max(...tab.map((t) => t[i].length)));
    for (const t of tab) L.push(t.map((x, i) => (i < 1 ? x.padEnd(w[i]) : x.padStart(w[i]))).join('  '));
    L.push('check: each compact cache\'s output equals the float64 reference over the values it stores (cache.read); |Δ| vs f32 data is the storage\'s rounding.');
    L.push('ORT GQA f16: GroupQueryAttention with float16 q, K/V and output (profiler op time, session.run time); ORT16 |Δ| = max |Δ| to the float64 reference over the float16-rounded q/K/V (check: relative ≤ 2e-3).');
  }
  L.push('');
  L.push('Columns: times are the median over many calls after warm-up (min–max for sdpa-wasm), in ms. GB/s = KV bytes / time, GFLOP/s = FLOPs / time.');
  L.push('bound = max(KV bytes / read bandwidth, FLOPs / mul+add peak) with the same thread count (m: memory-bound, c: compute-bound); ×bnd = sdpa / bound.');
  L.push('GQA/Attn op = ORT profiler kernel time of GroupQueryAttention / Attention-23; run = session.run end to end. ÷X = X time / sdpa time (> 1: sdpa faster; ORT by op time).');
  L.push('naive = plain float32 JS, single thread, decode shapes only. check = every peer equals the float64 reference and ORT equals sdpa-wasm.');
  if (res.roofline) {
    L.push('');
    L.push('== ' + renderRoofline(res.roofline));
  }
  if (res.targets.length) {
    L.push('');
    L.push(res.meta.quick ? 'Targets — --quick: few calls, short limit probes; indicative only, not a verdict:' : 'Targets:');
    for (const t of res.targets) L.push(`  ${t.met ? 'MET    ' : 'NOT MET'}  ${t.target}: ${t.value == null ? 'n/a' : t.value.toFixed(2) + '×'}`);
  }
  if (res.errors.length) {
    L.push('');
    L.push('Errors:');
    for (const e of res.errors) L.push(`  ${e}`);
  }
  return L.join('\n');
}

// ------------------------------------------------------------------ main
if (opt('render')) {
  console.log(table(JSON.parse(fs.readFileSync(opt('render'), 'utf8'))));
  process.exit(0);
}
const t0 = Date.now();
const startDate = new Date().toISOString();
const git = (...a) => { const r = spawnSync('git', a, { cwd: root, encoding: 'utf8' }); return r.status === 0 ? r.stdout.trim() : null; };
const commit = git('rev-parse', '--short', 'HEAD');
const dirty = commit ? (git('status', '--porcelain', '--', 'src', 'js', 'include', 'CMakeLists.txt') || '') !== '' : null;
const loadavgStart = os.loadavg();
const errors = [];
try { ensureLimitsBuilt({ log: err }); } catch (e) { errors.push(`limits build: ${e.message.split('\n')[0]}`); }
ensureWasmBuilt();

const runs = [];
for (const T of threadList) {
  err(`bench: ${T} thread(s), shapes ${shapeIds.join(' ')}${quick ? ' (quick)' : ''}`);
  runs.push(await runChild(T));
}
const naiveRows = new Map();
for (const c of runs) for (const r of c.rows) if (r.naive) naiveRows.set(r.id, r);
for (const c of runs) {
  for (const r of c.rows) {
    const nr = r.naive ? null : naiveRows.get(r.id);
    if (nr) r.naiveShared = { time: nr.naive.time, fromThreads: nr.threads };
    enrich(r, c.limits, nr ? nr.naive && nr : null);
    if (nr) r.ratios.naiveOverSdpa = med(r.sdpa?.time) ? med(nr.naive.time) / med(r.sdpa.time) : null;
  }
  errors.push(...c.errors);
}
let roofline = null;
if (!flag('no-roofline')) {
  err('bench: roofline (bench/roofline.mjs, 1 thread)');
  const r = await runRooflineChild();
  roofline = r.data;
  if (r.error) errors.push(r.error);
}
const byThreads = new Map(runs.map((c) => [c.threads, c]));
const res = {
  meta: {
    date: startDate, commit: commit ? commit + (dirty ? '+local changes' : '') : null, quick, node: process.version, cpu: os.cpus()[0]?.model?.trim() ?? '?', cores: os.cpus().length,
    memGiB: +(os.totalmem() / 2 ** 30).toFixed(1), ortVersion: runs.find((c) => c.ortVersion)?.ortVersion ?? null,
    sdpaInfo: runs.map((c) => c.sdpaInfo), loadavgStart, loadavgEnd: os.loadavg(), seconds: (Date.now() - t0) / 1000,
  },
  runs,
  roofline,
  targets: targets(byThreads),
  errors,
};
if (json) process.stdout.write(JSON.stringify(res) + '\n');
else console.log(table(res));
err(`bench: done in ${res.meta.seconds.toFixed(0)} s, ${errors.length} error(s)`);
process.exit(errors.length ? 1 : 0);
