// One benchmark process for one thread count (forked by bench/run.mjs, which
// passes a JSON config as argv[2] and gets the results back over IPC).
// Everything measured here shares the thread count: the limits, sdpa-wasm and
// onnxruntime-web (whose thread count is fixed per process).
import os from 'node:os';
import { measureLimits } from './limits.mjs';
import { SHAPES, work, checkRows } from './shapes.mjs';
import { randomF32, referenceRows, compareRows, timeIt, fmtMs, stats, now, toF16Bits, fromF16Bits } from './util.mjs';
import { naiveDecode } from './naive.mjs';

const cfg = JSON.parse(process.argv[2]);
const T = cfg.threads;
const log = (m) => process.send({ type: 'log', text: `[${T}t] ${m}` });
const errMsg = (e) => (e && e.stack ? String(e.message || e).split('\n')[0].slice(0, 400) : String(e));

const TIMING = cfg.quick
  ? {
      sdpa: { warmup: 5, warmupMs: 100, iters: 30, minIters: 5, budgetMs: 250 },
      ort: { warmup: 2, warmupMs: 50, iters: 10, minIters: 3, budgetMs: 400 },
      naive: { warmup: 1, warmupMs: 0, iters: 5, minIters: 2, budgetMs: 300 },
    }
  : {
      sdpa: { warmup: 20, warmupMs: 600, iters: 400, minIters: 30, budgetMs: 1500 },
      ort: { warmup: 5, warmupMs: 400, iters: 100, minIters: 10, budgetMs: 2000 },
      naive: { warmup: 3, warmupMs: 300, iters: 30, minIters: 5, budgetMs: 1500 },
    };

async function main() {
  const result = { threads: T, limits: null, sdpaInfo: null, sdpaRelaxedInfo: null, ortVersion: null, rows: [], errors: [], loadavg: [os.loadavg()] };
  const fail = (where, e) => { const text = `${where}: ${errMsg(e)}`; result.errors.push(text); log(`ERROR ${text}`); };

  try {
    result.limits = await measureLimits({ threads: T, bytes: cfg.quick ? 64 << 20 : 256 << 20, reps: cfg.quick ? 3 : 11, madReps: cfg.quick ? 3 : 7, madIters: cfg.quick ? 5_000_000 : 20_000_000, fma: cfg.relaxed, log });
  } catch (e) { fail('limits', e); }

  let sdpa = null, relaxed = null, ort = null;
  try {
    const { createSdpaPeer } = await import('./sdpa-peer.mjs');
    // the plain SIMD128 build, forced: this process may have relaxed SIMD (the relaxed rows below)
    sdpa = await createSdpaPeer({ threads: T, build: 'simd-threads' });
    result.sdpaInfo = sdpa.info;
    if (sdpa.info.threads !== T) fail('sdpa-wasm', new Error(`asked for ${T} threads, got ${JSON.stringify(sdpa.info)}`));
    if (cfg.relaxed) {
      relaxed = await createSdpaPeer({ threads: T, build: 'relaxed-threads' });
      result.sdpaRelaxedInfo = relaxed.info;
    }
  } catch (e) { fail('sdpa-wasm (createSdpa)', e); }
  try {
    const { createOrtPeer } = await import('./ort.mjs');
    ort = await createOrtPeer({ threads: T });
    result.ortVersion = ort.version;
  } catch (e) { fail('onnxruntime-web (init)', e); }

  const shapes = SHAPES.filter((s) => cfg.shapes.includes(s.id));
  for (const s of shapes) {
    const seed = [...s.id].reduce((a, c) => (a * 31 + c.charCodeAt(0)) >>> 0, 7);
    const data = {
      q: randomF32(s.Sq * s.Hq * s.D, seed + 1),
      k: randomF32(s.keys * s.Hkv * s.D, seed + 2),
      v: randomF32(s.keys * s.Hkv * s.D, seed + 3),
    };
    const rows = checkRows(s);
    const ref = referenceRows({ q: data.q, k: data.k, v: data.v, Hq: s.Hq, Hkv: s.Hkv, D: s.D, sp: s.past, causal: s.causal, nKeys: s.keys, rows });
    const check = (got) => compareRows(got, ref, rows, s.Hq * s.D);
    const row = { id: s.id, threads: T, shape: s, work: work(s) };
    const outputs = {};
    const mismatch = (peer, c) => { if (!c.ok) fail(`${peer} ${s.id}`, new Error(`output differs from the float64 reference: max |Δ| ${c.maxAbs.toExponential(2)}, relative ${c.relErr.toExponential(2)}`)); };

    if (sdpa) {
      try {
        const r = await sdpa.runShape(s, data, TIMING.sdpa, check);
        outputs.sdpa = r.output; delete r.output;
        row.sdpa = r;
        mismatch('sdpa-wasm', r.check);
        if (!r.rotationConsistent) fail(`sdpa-wasm ${s.id}`, new Error('two caches with the same data gave different outputs'));
        log(`${s.id.padEnd(10)} sdpa-wasm  ${fmtMs(r.time.median)} ms (${r.time.n} calls, ${r.caches} caches)`);
      } catch (e) { fail(`sdpa-wasm ${s.id}`, e); row.sdpa = { error: errMsg(e) }; }
    }

    // the relaxed-SIMD build against the plain one, calls interleaved
    // (plain, relaxed, relaxed, plain, ...): on a shared machine both see the same load
    if (relaxed && sdpa) {
      let a = null, b = null;
      try {
        a = sdpa.openShape(s, data, check);
        b = relaxed.openShape(s, data, check);
        mismatch('sdpa-wasm relaxed', b.result.check);
        const { warmup, warmupMs, iters, minIters, budgetMs } = TIMING.sdpa;
        for (let w = 0, t0 = now(); w < warmup || now() - t0 < 2 * warmupMs; w++) { a.call(w); b.call(w); if (w >= 2 && now() - t0 > 8 * warmupMs) break; }
        const pa = [], pb = [];
        const timed = (x, i, into) => { const t = now(); x.call(i); into.push(now() - t); };
        for (let i = 0, t0 = now(); i < iters; i++) {
          if (i & 1) { timed(b, i, pb); timed(a, i, pa); } else { timed(a, i, pa); timed(b, i, pb); }
          const el = now() - t0;
          if ((pa.length >= minIters && el > 2 * budgetMs) || (pa.length >= 3 && el > 8 * budgetMs)) break;
        }
        delete b.result.output;
        row.sdpaRelaxed = { ...b.result, time: stats(pb) };
        row.sdpaInterleaved = { time: stats(pa) };   // the plain build, timed in the same loop
        log(`${s.id.padEnd(10)} interleaved: plain ${fmtMs(row.sdpaInterleaved.time.median)} ms, relaxed ${fmtMs(row.sdpaRelaxed.time.median)} ms (${pa.length} calls each)`);
      } catch (e) { fail(`sdpa-wasm relaxed ${s.id}`, e); row.sdpaRelaxed = { error: errMsg(e) }; }
      finally { if (a) a.dispose(); if (b) b.dispose(); }
    }

    // the compact cache dtypes, checked against the values they store
    if (sdpa && cfg.dtypes) {
      const checkStored = (got, k, v) => compareRows(got, referenceRows({ q: data.q, k, v, Hq: s.Hq, Hkv: s.Hkv, D: s.D, sp: s.past, causal: s.causal, nKeys: s.keys, rows }), rows, s.Hq * s.D);
      const KEYS = { float16: 'sdpaF16', int8: 'sdpaI8', int4: 'sdpaI4', 'int8/int4': 'sdpaI8I4' };  // 'K/V': K int8, V int4
      for (const dtype of Object.keys(KEYS)) {
        const key = KEYS[dtype];
        try {
          const r = await sdpa.runShape(s, data, TIMING.sdpa, check, { dtype, checkStored });
          delete r.output;
          row[key] = r;
          mismatch(`sdpa-wasm ${dtype}`, r.check);
          log(`${s.id.padEnd(10)} sdpa-wasm ${dtype.padEnd(8)} ${fmtMs(r.time.median)} ms (${r.time.n} calls); vs float32 data max |Δ| ${r.vsFloat32.maxAbs.toExponential(2)}`);
        } catch (e) { fail(`sdpa-wasm ${dtype} ${s.id}`, e); row[key] = { error: errMsg(e) }; }
      }
    }

    if (cfg.naive && s.kind === 'decode') {
      try {
        const qv = data.q;
        let output = null;
        output = naiveDecode(qv, data.k, data.v, s.keys, s.Hq, s.Hkv, s.D);
        const c = check(output);
        mismatch('naive-js', c);
        const t = await timeIt(() => { output = naiveDecode(qv, data.k, data.v, s.keys, s.Hq, s.Hkv, s.D); }, TIMING.naive);
        delete t.samples;
        row.naive = { time: t, check: c };
        log(`${s.id.padEnd(10)} naive-js   ${fmtMs(t.median)} ms (${t.n} calls)`);
      } catch (e) { fail(`naive-js ${s.id}`, e); row.naive = { error: errMsg(e) }; }
    }

    if (ort) {
      // gqa16 (with the cache dtypes): GroupQueryAttention in float16, checked against the
      // float64 reference over the float16-rounded q/K/V, relative tolerance 2e-3 (its output is float16)
      const h = (x) => fromF16Bits(toF16Bits(x));
      const check16 = (got) => compareRows(got, referenceRows({ q: h(data.q), k: h(data.k), v: h(data.v), Hq: s.Hq, Hkv: s.Hkv, D: s.D, sp: s.past, causal: s.causal, nKeys: s.keys, rows }), rows, s.Hq * s.D, 2e-3);
      for (const op of cfg.dtypes ? ['gqa', 'attn', 'gqa16'] : ['gqa', 'attn']) {
        const name = { gqa: 'ort GroupQueryAttention', attn: 'ort Attention-23', gqa16: 'ort GQA float16' }[op];
        try {
          const r = await ort.runOp(op, s, data, TIMING.ort, op === 'gqa16' ? check16 : check);
          outputs[op] = r.output; delete r.output;
          mismatch(name, r.check);
          if (r.profileError) fail(`${name} ${s.id} (profile)`, new Error(r.profileError));
          row[op] = r;
          log(`${s.id.padEnd(10)} ${name.padEnd(24)} op ${fmtMs(r.op?.median)} ms, run ${fmtMs(r.run.median)} ms`);
        } catch (e) { fail(`${name} ${s.id}`, e); row[op] = { error: errMsg(e) }; }
      }
    }

    // ORT's output against ours, on every row (not only the reference rows)
    const all = [...Array(s.Sq).keys()];
    for (const op of ['gqa', 'attn']) {
      if (!outputs.sdpa || !outputs[op]) continue;
      row[op].vsSdpa = compareRows(outputs[op], outputs.sdpa, all, s.Hq * s.D);
      if (!row[op].vsSdpa.ok) fail(`ort ${op} ${s.id}`, new Error(`output differs from sdpa-wasm's: max |Δ| ${row[op].vsSdpa.maxAbs.toExponential(2)}, relative ${row[op].vsSdpa.relErr.toExponential(2)}`));
    }
    result.rows.push(row);
  }

  if (sdpa) sdpa.dispose();
  if (relaxed) relaxed.dispose();
  result.loadavg.push(os.loadavg());
  return result;
}

main().then(
  (r) => { process.send({ type: 'result', data: r }, () => process.exit(0)); },
  (e) => { process.send({ type: 'fatal', text: e && e.stack ? e.stack : String(e) }, () => process.exit(1)); },
);
