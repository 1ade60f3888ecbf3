// Module Web Worker: runs the decode loop with sdpa-wasm so the page stays responsive.
//
// Protocol (page → worker):
//   { type: 'start', config: { pkgUrl, hq, hkv, d, layers, ctx, prompt, threads, seed, checkEvery, dtype, build,
//                              window, sinks, softcap, rotary, attempt, hangAtLoad } }
// (attempt: how many silent workers the page restarted before this one (worker-watch.js); hangAtLoad, a test's:
// attempt 0 blocks its thread while it loads, as Firefox's hang does)
// (window > 0: a sliding-window layer on a windowed cache, whose memory stays flat;
// sinks: a per-head sink logit as gpt-oss has; softcap: Gemma 2's logit cap;
// rotary: rotary embeddings inside the op (NeoX halves, rotaryDim = d, tables as heap tensors);
// saveAt N: once the caches hold N rows, save all layers (KVCacheGroup.saveStream) to OPFS,
// or to IndexedDB where OPFS cannot be written, then go on; restore: load the saved caches
// instead of prefilling and go on decoding from where they end)
//   { type: 'stop' }
// (worker → page):
//   { type: 'alive' }   every 0.5 s until 'ready' (worker-watch.js: a worker that falls silent while it loads is restarted)
//   { type: 'ready', info, crossOriginIsolated, sharedArrayBuffer, reason, warnings }
//   { type: 'alloc', kvBytes, kvFullBytes }   kvBytes: what the caches hold (pages + page tables)
//   { type: 'prefill', tokens, ms }
//   { type: 'progress', length, target, points: [[length, ms], ...], lastMs, kvBytes }
//   { type: 'check', length, layer, row, error, maxError, checks }
//   { type: 'saved', length, bytes, storage, ms }      the caches were saved (saveAt)
//   { type: 'restored', length, bytes, storage, ms }   the caches were loaded (restore)
//   { type: 'next', length, bits }   the step right after a save or a restore: every layer's
//                                    output as float32 bits (an uninterrupted run and a reload
//                                    must give the same)
//   { type: 'done' | 'stopped', length }
//   { type: 'error', error: { name, code, message, stage } }
// After done/stopped/error the worker has disposed everything; the page terminates it.

import { openStore } from './storage.js';
import { attentionRef64, fillRow } from './reference.js';
import { beatWhileLoading } from './worker-watch.js';

let stopRequested = false;

// ---- saved caches: storage.js (OPFS, or IndexedDB where OPFS cannot be written) ----
const store = openStore({ db: 'sdpa-bench', store: 'caches' });
const KEY = 'bench-caches.kv';

/** Saves the group (every layer) with `meta`; returns { storage, bytes }. */
function saveCaches(group, meta) {
  // streamed chunk by chunk into OPFS: no second copy in memory
  return store.put(KEY, { stream: () => group.saveStream({ meta }), bytes: () => group.save({ meta }) });
}

/** What saveCaches stored: { source (a File or a Uint8Array), storage, bytes }. */
async function savedCaches() {
  const saved = await store.get(KEY);
  if (!saved) throw new Error('nothing was saved yet: run with saveAt first');
  return { source: saved.value, storage: saved.storage, bytes: saved.value.size ?? saved.value.byteLength };
}
let running = false;

self.onmessage = (ev) => {
  const msg = ev.data || {};
  if (msg.type === 'stop') {
    stopRequested = true;
    if (!running) post({ type: 'stopped', length: 0 });
  } else if (msg.type === 'start') {
    if (running) return;
    running = true;
    stopRequested = false;
    run(msg.config).finally(() => {
      running = false;
    });
  }
};

function post(msg) {
  self.postMessage(msg);
}

function errorInfo(e, stage) {
  if (e && typeof e === 'object') {
    return {
      name: e.name || 'Error',
      code: typeof e.code === 'string' ? e.code : null,
      message: String(e.message ?? e),
      stage,
    };
  }
  return { name: 'Error', code: null, message: String(e), stage };
}

// Lets 'stop' messages in between steps (a MessageChannel hop is not throttled like setTimeout).
const yieldChannel = new MessageChannel();
const yieldQueue = [];
yieldChannel.port1.onmessage = () => yieldQueue.shift()?.();
function yieldToEventLoop() {
  return new Promise((resolve) => {
    yieldQueue.push(resolve);
    yieldChannel.port2.postMessage(0);
  });
}

function whyBuild(info, isolated, hasSab, warnings, forced) {
  const warned = warnings.length ? ` (sdpa-wasm: "${warnings[0]}")` : '';
  // relaxed SIMD (FMA) where WebAssembly.validate accepts it, else plain SIMD128
  const simd = info.relaxedSimd ? 'relaxed-SIMD' : 'SIMD128';
  const why = forced ? ` (build: '${forced}' asked)` : info.relaxedSimd ? ' (relaxed SIMD detected)' : '';
  if (info.build.endsWith('-threads')) {
    return `cross-origin isolated (COOP/COEP headers) → SharedArrayBuffer available → ${simd} + pthreads build${why}, ${info.threads} thread${info.threads === 1 ? '' : 's'}`;
  }
  if (!isolated) {
    return `not cross-origin isolated (no COOP/COEP headers) → no SharedArrayBuffer → single-thread ${simd} build${why}${warned}`;
  }
  if (!hasSab) return `SharedArrayBuffer unavailable → single-thread ${simd} build${why}${warned}`;
  return `single-thread ${simd} build${why}${warned}`;
}

/** A test's stand-in for Firefox's hang in `new Worker()` (worker-watch.js): this thread never runs again. */
function blockThread() {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
}

async function run(cfg) {
  // job.stage names the step an error is reported from; job.sdpa is disposed on an error
  const job = { stage: 'load', sdpa: null, stopBeat: beatWhileLoading(post) };
  try {
    if (cfg.hangAtLoad && cfg.attempt === 0) blockThread();
    const s = settings(cfg);
    const sdpa = await startSdpa(cfg, job);
    const r = await openCaches(cfg, s, sdpa, job);
    const { extra, sinks, rope } = stepExtras(cfg, s, sdpa);
    const heldBytes = () => r.caches.reduce((sum, c) => sum + c.bytes, 0);
    post({ type: 'alloc', kvBytes: heldBytes(), kvFullBytes: 2 * s.layers * s.ctx * s.hkv * s.d * 4, dtype: s.dtype });
    const checker = makeChecker(cfg, s, r.caches, sinks, rope);

    job.stage = 'prefill';
    if (r.restoredAt < 0) await prefill(s, sdpa, r.caches, extra, checker);
    const first = r.restoredAt >= 0 ? r.restoredAt : s.prompt;
    post({ type: 'progress', length: first, target: s.ctx, points: [], lastMs: null, kvBytes: heldBytes() });

    job.stage = 'decode';
    const pos = await decode(cfg, s, sdpa, r, { extra, checker, heldBytes, first }, job);
    job.stage = 'dispose';
    sdpa.dispose();
    job.sdpa = null;
    post({ type: stopRequested && pos < s.ctx ? 'stopped' : 'done', length: pos, maxError: checker.maxError, checks: checker.checks });
  } catch (e) {
    job.stopBeat();
    try {
      job.sdpa?.dispose();
    } catch {
      /* already reporting the first error */
    }
    post({ type: 'error', error: errorInfo(e, job.stage) });
  }
}

/** The run's numbers from the page's config (defaults filled in). */
function settings(cfg) {
  const { hq, hkv, d, layers, ctx, seed } = cfg;
  const dtype = cfg.dtype || 'float32';
  const prompt = Math.max(1, Math.min(cfg.prompt, ctx));
  const checkEvery = Math.max(1, cfg.checkEvery || Math.max(64, Math.ceil(ctx / 32)));
  return { hq, hkv, d, layers, ctx, seed, dtype, prompt, checkEvery, window: cfg.window || 0, softcap: cfg.softcap || 0 };
}

/** Imports the package, creates the instance (job.sdpa) and posts 'ready' with why this build runs. */
async function startSdpa(cfg, job) {
  const mod = await import(cfg.pkgUrl);
  job.stage = 'createSdpa';
  // Capture the package's one-time fallback warning so the page can show *why*.
  const warnings = [];
  const origWarn = console.warn;
  console.warn = (...args) => {
    warnings.push(args.map(String).join(' '));
    origWarn.apply(console, args);
  };
  try {
    job.sdpa = await mod.createSdpa(cfg.build ? { threads: cfg.threads, build: cfg.build } : { threads: cfg.threads });
  } finally {
    console.warn = origWarn;
  }
  job.stopBeat();
  const sdpa = job.sdpa;
  const info = { ...sdpa.info };
  const isolated = !!self.crossOriginIsolated;
  const hasSab = typeof SharedArrayBuffer !== 'undefined';
  post({
    type: 'ready',
    info,
    crossOriginIsolated: isolated,
    sharedArrayBuffer: hasSab,
    reason: whyBuild(info, isolated, hasSab, warnings, cfg.build),
    warnings,
  });
  return sdpa;
}

/**
 * One paged cache per layer: it holds pages only for the rows written so far
 * (a windowed cache: only for its window, recycled as the window slides); all
 * layers as one group, saved and restored together. Made, or (cfg.restore)
 * loaded from what saveCaches stored. Returns { group, caches, restoredAt
 * (-1: made), run (what a saved state must have been made with to go on here) }.
 */
async function openCaches(cfg, s, sdpa, job) {
  job.stage = 'createKVCache';
  const { hq, hkv, d, layers, ctx, seed, dtype, window, softcap } = s;
  // 'int8/int4': K int8, V int4
  const [keyDtype, valueDtype = keyDtype] = dtype.split('/');
  const shape = { batch: 1, maxSeqLen: ctx, numKvHeads: hkv, headDim: d, keyDtype, valueDtype };
  const configs = Array.from({ length: layers }, () => (window ? { ...shape, window } : shape));
  const run = { seed, hq, hkv, d, layers, dtype, window, ctx, sinks: !!cfg.sinks, softcap, rotary: !!cfg.rotary };
  let group, restoredAt = -1;
  if (cfg.restore) {
    job.stage = 'restore';
    const t0 = performance.now();
    const saved = await savedCaches();
    const loaded = await sdpa.loadKVCacheGroup(saved.source);
    const same = Object.keys(run).every((k) => loaded.meta?.run?.[k] === run[k]);
    if (!same) {
      loaded.group.dispose();
      throw new Error(`the saved caches were made by another configuration (${JSON.stringify(loaded.meta?.run)}; this one is ${JSON.stringify(run)})`);
    }
    group = loaded.group;
    restoredAt = group.length;
    post({ type: 'restored', length: restoredAt, bytes: saved.bytes, storage: saved.storage, ms: performance.now() - t0 });
    job.stage = 'createKVCache';
  } else {
    group = sdpa.createKVCacheGroup(configs);
  }
  return { group, caches: group.layers, restoredAt, run };
}

/**
 * Each layer's step options beyond out: softcap, the layer's sink logits,
 * rotary tables. Returns { extra(layer), sinks, rope (the tables as float32
 * arrays, for the reference; null without rotary) }.
 */
function stepExtras(cfg, s, sdpa) {
  const { hq, d, layers, ctx, seed, softcap } = s;
  // gpt-oss: one learned sink logit per query head and layer (seeded here)
  const sinks = [];
  for (let l = 0; l < layers && cfg.sinks; l++) {
    const data = new Float32Array(hq);
    fillRow(data, 0, hq, seed, l, 0, 'sink');
    sinks.push({ data, dims: [hq] });
  }
  // rotary embeddings inside the op: cos / sin tables [ctx, d/2] as heap tensors (read in place by every step)
  let rope = null, rotary = null;
  if (cfg.rotary) {
    const R = d >> 1;
    rope = { cos: new Float32Array(ctx * R), sin: new Float32Array(ctx * R), R };
    for (let p = 0; p < ctx; p++) {
      for (let j = 0; j < R; j++) {
        rope.cos[p * R + j] = Math.cos(p * 10000 ** (-j / R));
        rope.sin[p * R + j] = Math.sin(p * 10000 ** (-j / R));
      }
    }
    rotary = { cos: sdpa.allocTensor('float32', [ctx, R]), sin: sdpa.allocTensor('float32', [ctx, R]) };
    rotary.cos.set(rope.cos);
    rotary.sin.set(rope.sin);
  }
  const extra = (l) => ({ ...(softcap ? { softcap } : {}), ...(cfg.sinks ? { sinks: sinks[l] } : {}), ...(rotary ? { rotary } : {}) });
  return { extra, sinks, rope };
}

/**
 * The float64 check of an output row: { check(layer, qRow, outRow, pos,
 * causalRow), maxError, checks }; each check is posted.
 */
function makeChecker(cfg, s, caches, sinks, rope) {
  const { hq, hkv, d, seed, dtype, window, softcap } = s;
  const checker = { maxError: 0, checks: 0, check: null };
  checker.check = (layer, qRow, outRow, pos, causalRow) => {
    // a compact cache is checked against the values it really stores (the rounding is the storage's)
    let stored = null;
    const firstKey = window ? Math.max(0, causalRow - window + 1) : 0;
    if (dtype !== 'float32') {
      const r = caches[layer].read(firstKey, causalRow + 1 - firstKey);
      stored = { k: r.k.data, v: r.v.data };
    }
    const err = attentionRef64({ seed, layer, pos, hq, hkv, d, q: qRow, out: outRow, firstKey, nKeys: causalRow + 1, stored,
      softcap, sinks: cfg.sinks ? sinks[layer].data : null, rope });
    checker.maxError = Math.max(checker.maxError, err);
    checker.checks++;
    post({ type: 'check', length: pos + 1, layer, row: pos, error: err, maxError: checker.maxError, checks: checker.checks });
  };
  return checker;
}

/**
 * The prompt in one causal step per layer. One set of prompt-sized heap
 * tensors, refilled per layer (only the steps are timed); posts 'prefill'.
 */
async function prefill(s, sdpa, caches, extra, checker) {
  const { hq, hkv, d, layers, seed, prompt } = s;
  const q = sdpa.allocTensor('float32', [1, prompt, hq, d]);
  const k = sdpa.allocTensor('float32', [1, prompt, hkv, d]);
  const v = sdpa.allocTensor('float32', [1, prompt, hkv, d]);
  const out = sdpa.allocTensor('float32', [1, prompt, hq, d]);
  let ms = 0;
  for (let l = 0; l < layers; l++) {
    const qd = q.data, kd = k.data, vd = v.data;
    for (let t = 0; t < prompt; t++) {
      fillRow(qd, t * hq * d, hq * d, seed, l, t, 'q');
      fillRow(kd, t * hkv * d, hkv * d, seed, l, t, 'k');
      fillRow(vd, t * hkv * d, hkv * d, seed, l, t, 'v');
    }
    const t0 = performance.now();
    caches[l].step(q, k, v, 0, { isCausal: true, out, ...extra(l) });
    ms += performance.now() - t0;
    if (l === 0) {
      // First and last prompt rows (causal: row t sees keys 0..t), checked against the values the
      // cache stores after the step. With the float16 newest page (int4's default) a row attended
      // over its page's float16 values, which are encoded when the page fills: a row of a page that
      // filled in this step is checked only if it is the page's last row (it saw the encoded values).
      const P = sdpa.memory().pageRows;
      const same = (t) => !caches[l].float16NewestPage || t % P === P - 1 || (Math.floor(t / P) === Math.floor((prompt - 1) / P) && prompt % P !== 0);
      const first = same(0) ? 0 : Math.min(P, prompt) - 1;
      for (const t of prompt > 1 && first !== prompt - 1 ? [first, prompt - 1] : [prompt - 1]) {
        checker.check(0, q.data.subarray(t * hq * d, (t + 1) * hq * d), out.data.subarray(t * hq * d, (t + 1) * hq * d), t, t);
      }
    }
    await yieldToEventLoop(); // lets a 'stop' in
    if (stopRequested) break;
  }
  for (const t of [q, k, v, out]) t.dispose();
  post({ type: 'prefill', tokens: prompt, ms });
}

/**
 * One token at a time from row `first`, cache.step on every layer, until
 * ctx or a stop; saves the caches once at cfg.saveAt. Posts 'progress',
 * 'saved', 'next' and the checks; returns the rows reached.
 */
async function decode(cfg, s, sdpa, r, { extra, checker, heldBytes, first }, job) {
  const { hq, hkv, d, layers, ctx, seed, prompt, checkEvery } = s;
  const { group, caches, restoredAt } = r;
  const qs = [], ks = [], vs = [], outs = [];
  for (let l = 0; l < layers; l++) {
    qs.push(sdpa.allocTensor('float32', [1, 1, hq, d]));
    ks.push(sdpa.allocTensor('float32', [1, 1, hkv, d]));
    vs.push(sdpa.allocTensor('float32', [1, 1, hkv, d]));
    outs.push(sdpa.allocTensor('float32', [1, 1, hq, d]));
  }
  const stepOpts = outs.map((out, l) => ({ out, ...extra(l) })); // made once: the timed loop allocates nothing
  let pending = [];
  let lastPost = performance.now();
  let lastYield = lastPost;
  let lastCheckPos = first - 1;
  let lastMs = null;
  let pos = first;
  let nextAt = restoredAt;   // the step whose outputs a reload must reproduce
  for (; pos < ctx; pos++) {
    if (stopRequested) break;
    if (cfg.saveAt && pos === Math.max(cfg.saveAt, prompt) && restoredAt < 0) {
      job.stage = 'save';
      const t0 = performance.now();
      const { storage, bytes } = await saveCaches(group, { run: r.run, length: pos });
      post({ type: 'saved', length: pos, bytes, storage, ms: performance.now() - t0 });
      nextAt = pos;
      job.stage = 'decode';
    }
    // New token's q/k/v for every layer (not timed).
    for (let l = 0; l < layers; l++) {
      fillRow(qs[l].data, 0, hq * d, seed, l, pos, 'q');
      fillRow(ks[l].data, 0, hkv * d, seed, l, pos, 'k');
      fillRow(vs[l].data, 0, hkv * d, seed, l, pos, 'v');
    }
    const t0 = performance.now();
    for (let l = 0; l < layers; l++) {
      caches[l].step(qs[l], ks[l], vs[l], pos, stepOpts[l]);
    }
    const t1 = performance.now();
    lastMs = t1 - t0;
    pending.push([pos + 1, lastMs]);
    if (pos === nextAt) {
      post({ type: 'next', length: pos + 1, bits: outs.map((o) => Array.from(new Uint32Array(o.data.slice().buffer))) });
    }

    if (pos - lastCheckPos >= checkEvery || pos === ctx - 1) {
      const layer = checker.checks % layers;
      checker.check(layer, qs[layer].data, outs[layer].data, pos, pos);
      lastCheckPos = pos;
    }
    const now = performance.now();
    if (now - lastPost > 50 || pos === ctx - 1) {
      post({ type: 'progress', length: pos + 1, target: ctx, points: pending, lastMs, kvBytes: heldBytes() });
      pending = [];
      lastPost = now;
    }
    if (now - lastYield > 16) {
      await yieldToEventLoop();
      lastYield = performance.now();
    }
  }
  if (pending.length) post({ type: 'progress', length: pos, target: ctx, points: pending, lastMs, kvBytes: heldBytes() });
  return pos;
}

self.addEventListener('unhandledrejection', (ev) => {
  post({ type: 'error', error: errorInfo(ev.reason, 'worker') });
});
