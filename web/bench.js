// Bench page (bench.html): controls, stats, plot. The attention itself runs in bench-worker.js.
import { drawPlot } from './plot.js';
import { watchLoad, restartWarning, MAX_RESTARTS } from './worker-watch.js';

const PRESETS = {
  'llama3-8b': { name: 'Llama-3-8B', hq: 32, hkv: 8, d: 128, layers: 32 },
  'llama3.2-1b': { name: 'Llama-3.2-1B', hq: 32, hkv: 8, d: 64, layers: 16 },
  'qwen2-0.5b': { name: 'Qwen2-0.5B', hq: 14, hkv: 2, d: 64, layers: 24 },
  // Sliding-window layers on a windowed (ring) cache: its memory stays flat however long the decode.
  // gpt-oss-20B: 24 layers, every other one local (window 128, a learned sink logit per head).
  'gpt-oss-20b': { name: 'gpt-oss-20B (sliding layers)', hq: 64, hkv: 8, d: 64, layers: 12, window: 128, sinks: true },
  // Gemma-2-2B: 26 layers, every other one local (window 4096), logits capped at 50.
  'gemma2-2b': { name: 'Gemma-2-2B (local layers)', hq: 8, hkv: 4, d: 256, layers: 13, window: 4096, softcap: 50 },
};

const $ = (id) => document.getElementById(id);
const el = {
  form: $('controls'), preset: $('preset'), hq: $('hq'), hkv: $('hkv'), d: $('d'),
  layers: $('layers'), ctx: $('ctx'), prompt: $('prompt'), threads: $('threads'), dtype: $('dtype'), rotary: $('rotary'),
  start: $('start'), stop: $('stop'), error: $('error'), status: $('status'),
  progress: $('progress'), buildBadge: $('build-badge'), buildReason: $('build-reason'),
  len: $('s-len'), ms: $('s-ms'), tps: $('s-tps'), mem: $('s-mem'), rate: $('s-rate'),
  prefill: $('s-prefill'), checkBadge: $('check-badge'), plot: $('plot'),
};

// Test hook and live state. status: idle | loading | running | stopping | done | stopped | error
const demo = {
  status: 'idle',
  build: null,
  threads: null,
  version: null,
  crossOriginIsolated: !!self.crossOriginIsolated,
  reason: null,
  config: null,
  length: 0,
  target: 0,
  points: [],
  prefillMs: null,
  kvBytes: null,
  kvFullBytes: null,
  maxError: null,
  checks: 0,
  error: null,
  runs: 0,
  restarts: 0, // workers ended because they fell silent while loading (worker-watch.js)
  saved: null,      // { length, bytes, storage, ms } once the caches were saved (?saveAt=N)
  restored: null,   // the same once they were restored (?restore=1)
  next: null,       // { length, bits }: the step after the save or the restore (bits per layer)
};
window.__demo = demo;

const CHECK_TOLERANCE = 1e-4;

// ---------- package URL for the worker (workers don't see the page's import map) ----------
function packageUrl() {
  try {
    return import.meta.resolve('sdpa-wasm');
  } catch {
    return new URL('/js/index.js', location.href).href;
  }
}

// ---------- controls ----------
function fillThreadOptions() {
  const hc = navigator.hardwareConcurrency || 4;
  for (let n = 1; n <= Math.min(16, Math.max(4, hc)); n++) {
    const o = document.createElement('option');
    o.value = String(n);
    o.textContent = n === hc ? `${n} (all cores)` : String(n);
    el.threads.append(o);
  }
}

function applyPreset(key, keepLayers = false) {
  const p = PRESETS[key];
  const custom = !p;
  for (const f of [el.hq, el.hkv, el.d]) f.disabled = !custom;
  if (p) {
    el.hq.value = p.hq;
    el.hkv.value = p.hkv;
    el.d.value = p.d;
    if (!keepLayers) el.layers.value = p.layers;
  }
}

function readConfig() {
  const num = (f) => (f.value.trim() === '' ? NaN : Number(f.value));
  const cfg = {
    preset: el.preset.value,
    hq: num(el.hq),
    hkv: num(el.hkv),
    d: num(el.d),
    layers: num(el.layers),
    ctx: num(el.ctx),
    prompt: num(el.prompt),
    threads: el.threads.value === 'auto' ? 'auto' : Number(el.threads.value),
    dtype: el.dtype.value,
    rotary: el.rotary.checked,  // rotary embeddings inside the op (cache.step's rotary option)
    // a sliding-window preset's window, sink logits and softcap (none for the others)
    window: PRESETS[el.preset.value]?.window ?? 0,
    sinks: PRESETS[el.preset.value]?.sinks ?? false,
    softcap: PRESETS[el.preset.value]?.softcap ?? 0,
    seed: Number.isInteger(urlSeed) ? urlSeed : 1234,
    checkEvery: urlCheck,
    pkgUrl: packageUrl(),
    build: urlBuild, // ?build=simd-threads etc. forces a build (default: feature detection)
    // ?saveAt=N: save every layer's cache (OPFS / IndexedDB) once they hold N rows;
    // ?restore=1: restore them instead of prefilling, and go on decoding (after a reload)
    saveAt: params.has('saveAt') ? Number(params.get('saveAt')) : 0,
    restore: params.get('restore') === '1',
    // ?hangAtLoad=1 (a test): the first worker blocks its thread while it loads, as Firefox's hang does (worker-watch.js)
    hangAtLoad: params.get('hangAtLoad') === '1',
  };
  // Only the page's own knobs are checked here; shapes and sizes are the library's to judge
  // (its SdpaError is what the page shows for an impossible shape or a too-large cache).
  const bad = [];
  if (!(Number.isInteger(cfg.layers) && cfg.layers >= 1 && cfg.layers <= 512)) bad.push(`layers must be an integer 1..512 (got ${el.layers.value || 'nothing'})`);
  if (!(Number.isInteger(cfg.prompt) && cfg.prompt >= 1)) bad.push(`prompt must be an integer ≥ 1 (got ${el.prompt.value || 'nothing'})`);
  for (const [k, f] of [['Hq', el.hq], ['Hkv', el.hkv], ['D', el.d], ['context length', el.ctx]]) {
    if (f.value.trim() === '' || !Number.isFinite(Number(f.value))) bad.push(`${k} must be a number (got ${f.value || 'nothing'})`);
  }
  return { cfg, bad };
}

// ---------- formatting ----------
function fmtBytes(b) {
  if (b == null || !Number.isFinite(b)) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) (b /= 1024), i++;
  return `${b >= 100 || i === 0 ? b.toFixed(0) : b.toFixed(1)} ${u[i]}`;
}
function fmtMs(ms) {
  if (ms == null || !Number.isFinite(ms)) return '–';
  return ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms >= 1 ? ms.toFixed(2) : ms.toFixed(3);
}
function median(a) {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[s.length >> 1];
}

// ---------- rendering ----------
let drawQueued = false;
function scheduleDraw() {
  if (drawQueued) return;
  drawQueued = true;
  requestAnimationFrame(() => {
    drawQueued = false;
    render();
  });
}

function setBuild(badgeText, cls, reason) {
  el.buildBadge.textContent = badgeText;
  el.buildBadge.className = `badge ${cls}`;
  el.buildReason.textContent = reason;
}

function showError(err) {
  demo.error = err;
  if (!err) {
    el.error.hidden = true;
    el.error.textContent = '';
    return;
  }
  el.error.hidden = false;
  el.error.textContent = '';
  const head = document.createElement('b');
  head.textContent = err.code ? `${err.name} ${err.code}` : err.name || 'Error';
  el.error.append(head, err.stage ? ` (during ${err.stage}): ` : ': ', err.message);
}

function render() {
  const cfg = demo.config;
  const run = demo.status;
  el.status.textContent =
    run === 'running' ? `decoding… ${demo.length} / ${demo.target}`
    : run === 'loading' ? 'loading sdpa-wasm…'
    : run === 'stopping' ? 'stopping…'
    : run === 'done' ? `done: ${demo.length} tokens`
    : run === 'stopped' ? `stopped at ${demo.length} tokens`
    : run === 'error' ? 'failed (see the message above)'
    : 'idle';
  el.progress.max = Math.max(1, demo.target || 1);
  el.progress.value = demo.length || 0;
  el.len.textContent = demo.target ? `${demo.length} / ${demo.target}` : '–';
  el.mem.textContent = demo.kvBytes != null
    ? `${fmtBytes(demo.kvBytes)} held (${cfg.layers} layer${cfg.layers === 1 ? '' : 's'} × K+V, ${cfg.dtype}, pages of 64 tokens${cfg.window ? `, a ring for the last ${cfg.window} tokens: flat from here on` : ''})${demo.kvFullBytes ? `; ${fmtBytes(demo.kvFullBytes)} at the full context in float32` : ''}`
    : '–';
  const kept = (what, x) => (x ? ` · ${what} ${x.length} rows (${fmtBytes(x.bytes)}, ${x.storage}) in ${fmtMs(x.ms)} ms` : '');
  el.prefill.textContent = (demo.prefillMs != null ? `${fmtMs(demo.prefillMs)} ms for ${Math.min(cfg.prompt, cfg.ctx)} tokens` : demo.restored ? 'none (restored)' : '–') +
    kept('saved', demo.saved) + kept('restored', demo.restored);

  // Last 32 tokens: the median when timers are fine-grained; the mean (minus the largest) when
  // they are coarse (100 µs without cross-origin isolation), where a median would stick to a tick.
  const recent = demo.points.slice(-32).map((p) => p[1]);
  let ms = median(recent);
  if (!demo.crossOriginIsolated && recent.length > 2) {
    ms = (recent.reduce((a, b) => a + b, 0) - Math.max(...recent)) / (recent.length - 1);
  }
  el.ms.textContent = Number.isFinite(ms) ? `${fmtMs(ms)} ms` : '–';
  const sumRecent = recent.reduce((a, b) => a + b, 0);
  el.tps.textContent = recent.length && sumRecent > 0 ? `${(1000 * recent.length / sumRecent).toFixed(sumRecent > 1000 ? 1 : 0)}` : '–';
  if (Number.isFinite(ms) && ms > 0 && cfg) {
    const L = demo.length;
    const gflops = (cfg.layers * cfg.hq * L * cfg.d * 4) / (ms * 1e6);
    const gbs = (cfg.layers * 2 * L * cfg.hkv * cfg.d * 4) / (ms * 1e6);
    el.rate.textContent = `${gflops.toFixed(1)} GFLOP/s · KV ${gbs.toFixed(1)} GB/s`;
  } else {
    el.rate.textContent = '–';
  }

  if (demo.maxError == null) {
    el.checkBadge.textContent = 'not checked yet';
    el.checkBadge.className = 'badge';
  } else {
    const ok = demo.maxError < CHECK_TOLERANCE;
    el.checkBadge.textContent = `${ok ? '✓' : '✗'} max |err| ${demo.maxError.toExponential(1)} over ${demo.checks} checks`;
    el.checkBadge.className = `badge ${ok ? 'ok' : 'bad'}`;
  }

  drawPlot(el.plot, demo.points, {
    xMin: cfg ? Math.min(cfg.prompt, cfg.ctx) : 0,
    xMax: cfg ? Math.max(cfg.ctx, 2) : 2048,
  });
  const busy = run === 'loading' || run === 'running' || run === 'stopping';
  el.start.disabled = busy;
  el.stop.disabled = !busy || run === 'stopping';
}

function setStatus(s) {
  demo.status = s;
  scheduleDraw();
}

// ---------- the run ----------
let worker = null;
let stopTimer = null;
let loadWatch = null;

function endWorker() {
  clearTimeout(stopTimer);
  stopTimer = null;
  loadWatch?.done();
  loadWatch = null;
  if (worker) worker.terminate();
  worker = null;
}

function start() {
  if (worker) return;
  const { cfg, bad } = readConfig();
  showError(null);
  Object.assign(demo, { config: cfg, length: 0, target: cfg.ctx, points: [], prefillMs: null, kvBytes: null, kvFullBytes: null, maxError: null, checks: 0, build: null, threads: null, saved: null, restored: null, next: null });
  demo.runs++;
  if (bad.length) {
    showError({ name: 'Invalid input', code: null, message: bad.join('; '), stage: null });
    setStatus('error');
    return;
  }
  setStatus('loading');
  launch(cfg, 0);
}

/** Starts the run's worker; one that falls silent while it loads is ended and started again (worker-watch.js). */
function launch(cfg, restarts) {
  worker = new Worker(new URL('./bench-worker.js', import.meta.url), { type: 'module', name: 'sdpa-bench' });
  const w = worker;
  loadWatch = watchLoad(() => {
    if (w !== worker) return;
    if (restarts >= MAX_RESTARTS) {
      showError({ name: 'Worker error', code: null, message: `the worker did not answer while loading, ${restarts + 1} times`, stage: 'load' });
      endWorker();
      setStatus('error');
      return;
    }
    console.warn(restartWarning('bench page', restarts + 1));
    demo.restarts++;
    endWorker();
    launch(cfg, restarts + 1);
  });
  w.onmessage = (ev) => {
    if (w !== worker) return;
    const type = ev.data && ev.data.type;
    if (type === 'alive') {
      loadWatch?.heard();
      return;
    }
    if (['ready', 'error', 'stopped', 'done'].includes(type)) loadWatch?.done();
    onWorkerMessage(ev.data);
  };
  w.onerror = (ev) => {
    if (w !== worker) return;
    ev.preventDefault?.();
    showError({ name: 'Worker error', code: null, message: ev.message || 'the worker script failed to load or crashed (see the console)', stage: null });
    endWorker();
    setStatus('error');
  };
  w.onmessageerror = () => {
    showError({ name: 'Worker error', code: null, message: 'a message from the worker could not be read', stage: null });
    endWorker();
    setStatus('error');
  };
  w.postMessage({ type: 'start', config: { ...cfg, attempt: restarts } });
}

function stop() {
  if (!worker) return;
  setStatus('stopping');
  worker.postMessage({ type: 'stop' });
  // A step in progress finishes first; if the worker does not answer, end it.
  stopTimer = setTimeout(() => {
    endWorker();
    setStatus('stopped');
  }, 5000);
}

function onWorkerMessage(m) {
  switch (m.type) {
    case 'ready': {
      Object.assign(demo, {
        build: m.info.build,
        threads: m.info.threads,
        version: m.info.version,
        crossOriginIsolated: m.crossOriginIsolated,
        reason: m.reason,
        warnings: m.warnings,
      });
      const threaded = m.info.build.endsWith('-threads');
      setBuild(
        threaded ? `build: ${m.info.build} · ${m.info.threads} threads` : `build: ${m.info.build} · single-thread`,
        threaded ? 'ok' : 'warn',
        m.reason,
      );
      setStatus('running');
      break;
    }
    case 'alloc':
      demo.kvBytes = m.kvBytes;
      demo.kvFullBytes = m.kvFullBytes;
      break;
    case 'prefill':
      demo.prefillMs = m.ms;
      break;
    case 'progress':
      demo.length = m.length;
      demo.target = m.target;
      if (m.kvBytes != null) demo.kvBytes = m.kvBytes;
      for (const p of m.points) demo.points.push(p);
      break;
    case 'check':
      demo.maxError = m.maxError;
      demo.checks = m.checks;
      break;
    case 'saved':
    case 'restored':
      demo[m.type] = { length: m.length, bytes: m.bytes, storage: m.storage, ms: m.ms };
      break;
    case 'next':
      demo.next = { length: m.length, bits: m.bits };
      break;
    case 'done':
    case 'stopped':
      demo.length = m.length;
      endWorker();
      demo.status = m.type;
      break;
    case 'error':
      showError(m.error);
      endWorker();
      demo.status = 'error';
      break;
  }
  scheduleDraw();
}

// ---------- wiring ----------
const params = new URLSearchParams(location.search);
const urlSeed = params.has('seed') ? Number(params.get('seed')) : undefined;
const urlCheck = params.has('check') ? Number(params.get('check')) : undefined;
const urlBuild = params.get('build') || undefined;

fillThreadOptions();
{
  const p = params.get('preset');
  if (p && (PRESETS[p] || p === 'custom')) el.preset.value = p;
  applyPreset(el.preset.value);
  // explicit shape parameters imply a custom shape unless they match the preset
  for (const k of ['hq', 'hkv', 'd']) {
    if (params.has(k)) {
      el[k].value = params.get(k);
      if (PRESETS[el.preset.value] && Number(params.get(k)) !== PRESETS[el.preset.value][k]) {
        el.preset.value = 'custom';
        applyPreset('custom');
      }
    }
  }
  for (const k of ['layers', 'ctx', 'prompt']) if (params.has(k)) el[k].value = params.get(k);
  if (['float32', 'float16', 'int8', 'int4', 'int8/int4'].includes(params.get('dtype'))) el.dtype.value = params.get('dtype');
  if (params.get('rotary') === '1') el.rotary.checked = true;
  if (params.has('threads')) {
    const t = params.get('threads');
    if (![...el.threads.options].some((o) => o.value === t)) {
      const o = document.createElement('option');
      o.value = o.textContent = t;
      el.threads.append(o);
    }
    el.threads.value = t;
  } else {
    // a sensible default: half the cores, at least 2 when there are 2 (tfjs-style clamp)
    const hc = navigator.hardwareConcurrency || 2;
    el.threads.value = String(Math.max(1, Math.min(4, hc >= 4 ? hc >> 1 : hc)));
  }
}

el.preset.addEventListener('change', () => applyPreset(el.preset.value));
el.form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  start();
});
el.stop.addEventListener('click', stop);
window.addEventListener('resize', scheduleDraw);

if (self.crossOriginIsolated) {
  setBuild('build: relaxed-threads or simd-threads (expected)', 'info', 'cross-origin isolated (COOP/COEP headers) → SharedArrayBuffer available → the pthreads build will run (relaxed SIMD where this browser has it)');
} else {
  setBuild('build: relaxed or simd (expected)', 'warn', 'not cross-origin isolated (no COOP/COEP headers) → no SharedArrayBuffer → the single-thread build will run (serve with `npm start` for threads)');
  // Only one thread can run here: say so in the control instead of offering more.
  const one = document.createElement('option');
  one.value = '1';
  one.textContent = '1 (single-thread build)';
  el.threads.replaceChildren(one);
  el.threads.value = '1';
  el.threads.disabled = true;
}
render();
if (params.get('autostart') === '1') start();
