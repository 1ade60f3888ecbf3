// loader.js: pick a build, find its files next to this package, instantiate it.
//
// Builds (dist/, made by `npm run build`):
//   simd-threads  SIMD128 + pthreads: Node, or a browser page/worker with crossOriginIsolated
//   simd          SIMD128, one thread: everywhere else (one console.warn says why)
// Node reads the .wasm bytes from disk (the 3.1.6 glue would fetch() a path);
// browsers let the glue fetch new URL('<name>.wasm', import.meta.url).
// A missing or corrupt file and a failed instantiation are SdpaError E_LOAD
// naming the file: never a silent switch to the other build.

import { SdpaError, E_LOAD } from './errors.js';

export const MAX_AUTO_THREADS = 8;
export const MAX_THREADS = 64; // SDPA_MAX_THREADS in include/sdpa.h

const BUILDS = {
  'simd-threads': {
    glue: '../dist/sdpa-simd-threads.mjs',
    wasm: '../dist/sdpa-simd-threads.wasm',
    worker: '../dist/sdpa-simd-threads.worker.js',
    threaded: true,
    // Literal specifiers so that bundlers can see the files.
    importGlue: () => import('../dist/sdpa-simd-threads.mjs'),
  },
  simd: {
    glue: '../dist/sdpa-simd.mjs',
    wasm: '../dist/sdpa-simd.wasm',
    threaded: false,
    importGlue: () => import('../dist/sdpa-simd.mjs'),
  },
};
export const BUILD_NAMES = Object.freeze(Object.keys(BUILDS));

export const isNode = typeof process === 'object' && process !== null &&
  typeof process.versions === 'object' && process.versions !== null && typeof process.versions.node === 'string';

function nodeBuiltin(name) {
  if (typeof process.getBuiltinModule === 'function') return process.getBuiltinModule(name);
  return null;
}

async function nodeModule(name) {
  const m = nodeBuiltin(name);
  if (m) return m;
  return import(/* webpackIgnore: true */ /* @vite-ignore */ 'node:' + name);
}

/** Cores available to this process / page. */
export async function availableCores() {
  if (isNode) {
    const os = await nodeModule('os');
    return typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length;
  }
  const n = typeof navigator === 'object' && navigator ? navigator.hardwareConcurrency : 0;
  return Number.isInteger(n) && n > 0 ? n : 1;
}

let warned = false;
function warnOnce(message) {
  if (warned) return;
  warned = true;
  console.warn(message);
}

/**
 * Which build to use and why (reason is set when falling back to 'simd').
 * @param {string|undefined} forced 'simd-threads' | 'simd' | undefined
 */
export function chooseBuild(forced) {
  if (forced) return { build: forced, reason: null };
  if (isNode) return { build: 'simd-threads', reason: null };
  if (globalThis.crossOriginIsolated === true && typeof SharedArrayBuffer === 'function') {
    return { build: 'simd-threads', reason: null };
  }
  const why = globalThis.crossOriginIsolated === false
    ? 'crossOriginIsolated is false (serve the page with the headers Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp)'
    : 'SharedArrayBuffer is not available';
  return { build: 'simd', reason: `sdpa-wasm: using the single-thread SIMD build because ${why}; threads need SharedArrayBuffer` };
}

function displayPath(url) {
  if (isNode && url.protocol === 'file:') {
    const u = nodeBuiltin('url');
    if (u) return u.fileURLToPath(url);
  }
  return url.href;
}

/**
 * Loads and instantiates a build.
 * @param {{ build: string, threads: number }} a  threads: total threads wanted (>= 1)
 * @returns {Promise<{ M: object, build: string, wasmPath: string }>}
 */
export async function loadBuild({ build, threads, reason }) {
  const spec = BUILDS[build];
  if (reason) warnOnce(reason);
  const glueUrl = new URL(spec.glue, import.meta.url);
  const wasmUrl = new URL(spec.wasm, import.meta.url);
  const gluePath = displayPath(glueUrl), wasmPath = displayPath(wasmUrl);
  const broken = (what, cause) => new SdpaError(E_LOAD,
    `createSdpa: ${what} (the '${build}' build). The sdpa-wasm install looks broken: run \`npm run build\` in a checkout, or reinstall the package.`,
    { cause });

  let factory;
  try {
    factory = (await spec.importGlue()).default;
  } catch (e) {
    throw broken(`cannot load ${gluePath}: ${e && e.message}`, e);
  }
  if (typeof factory !== 'function') throw broken(`${gluePath} does not export the module factory`);

  const logs = [];
  const moduleArg = {
    sdpaWorkers: spec.threaded ? Math.max(0, threads - 1) : 0,
    print: (s) => console.log(s),
    printErr: (s) => { logs.push(String(s)); if (logs.length > 20) logs.shift(); },
  };
  const workerUrl = spec.worker ? new URL(spec.worker, import.meta.url) : null;
  const workerPath = workerUrl ? displayPath(workerUrl) : null;
  if (isNode) {
    const fs = await nodeModule('fs');
    if (workerUrl) {
      try {
        await fs.promises.access(workerUrl, fs.constants.R_OK);
      } catch (e) {
        throw broken(`cannot read ${workerPath}: ${e && (e.code || e.message)}`, e);
      }
    }
    let bytes;
    try {
      bytes = await fs.promises.readFile(wasmUrl);
    } catch (e) {
      throw broken(`cannot read ${wasmPath}: ${e && (e.code || e.message)}`, e);
    }
    if (!WebAssembly.validate(bytes)) {
      throw broken(`${wasmPath} is not a valid WebAssembly module (${bytes.length} bytes; corrupt or truncated file, or a runtime without SIMD${spec.threaded ? '/threads' : ''})`);
    }
    moduleArg.wasmBinary = bytes;
  }

  let M, watch = null;
  try {
    // The 3.1.6 Node glue adds process 'uncaughtException' / 'unhandledRejection'
    // handlers (one pair per instance, never removed; they rethrow and keep the
    // module alive). A library must not change the host's error handling: drop them.
    const added = isNode ? snapshotListeners() : null;
    const pending = factory(moduleArg);
    if (added) added.restore();
    // The pool's workers exist now. If one cannot load (a missing or broken
    // worker file), the glue would throw from its 'error' handler (a crash in
    // Node) and its promise would never settle (a hang): watch them instead.
    if (spec.threaded) watch = watchWorkers(moduleArg);
    M = await (watch ? Promise.race([pending, watch.failed]) : pending);
    if (watch) watch.loaded();
  } catch (e) {
    if (watch) watch.stop();
    try { moduleArg.PThread && moduleArg.PThread.terminateAllThreads(); } catch { /* best effort */ }
    if (watch && watch.failedWith === e) {
      const why = e && e.message ? e.message : (e && e.type) || 'it did not load';
      throw broken(`the worker ${workerPath} failed to load: ${why}`, e);
    }
    const msg = e && e.message ? e.message : String(e);
    const extra = logs.filter((l) => !msg.includes(l) && !/Build with -s ASSERTIONS/.test(l)).slice(-2);
    const detail = extra.length ? ` (${extra.join(' | ')})` : '';
    let hint = '';
    if (!isNode && spec.threaded && typeof SharedArrayBuffer !== 'function') hint = '; this build needs SharedArrayBuffer (a crossOriginIsolated page)';
    throw broken(`instantiating ${wasmPath} failed: ${msg}${detail}${hint}`, e);
  }
  // From now on C stderr goes to the console.
  moduleArg.printErr = M.printErr = (s) => console.error(s);
  return { M, build, wasmPath };
}

/**
 * Watches the pthread pool's workers while the module loads: an 'error' from
 * any of them rejects `failed` instead of reaching the glue's handler (which
 * throws). Once loaded, the glue's own handling is put back.
 */
function watchWorkers(moduleArg) {
  const P = moduleArg.PThread;
  const workers = P && Array.isArray(P.unusedWorkers) ? [...P.unusedWorkers] : [];
  let reject;
  const failed = new Promise((_, rej) => { reject = rej; });
  failed.catch(() => {}); // (settled or not, never an unhandled rejection)
  const w8 = { failed, failedWith: undefined };
  const onError = (e) => {
    if (w8.failedWith !== undefined) return;
    w8.failedWith = e === undefined ? null : e;
    reject(w8.failedWith);
  };
  const glue = new Map();
  for (const w of workers) {
    // The glue assigns worker.onerror (and in Node calls it from an 'error'
    // listener): keep its handler aside while loading.
    Object.defineProperty(w, 'onerror', {
      configurable: true,
      enumerable: true,
      get: () => onError,
      set: (fn) => { glue.set(w, fn); },
    });
    if (typeof w.on === 'function') w.on('error', onError);
    else if (typeof w.addEventListener === 'function') w.addEventListener('error', onError);
  }
  const detach = () => {
    for (const w of workers) {
      delete w.onerror;
      if (typeof w.off === 'function') w.off('error', onError);
      else if (typeof w.removeEventListener === 'function') w.removeEventListener('error', onError);
    }
  };
  w8.loaded = () => {
    detach();
    for (const [w, fn] of glue) w.onerror = fn;
  };
  w8.stop = () => {
    // Keep a listener so that late 'error' events cannot crash a Node process.
    for (const w of workers) {
      try { w.terminate(); } catch { /* gone */ }
    }
  };
  return w8;
}

const GLUE_EVENTS = ['uncaughtException', 'unhandledRejection'];
function snapshotListeners() {
  const before = GLUE_EVENTS.map((ev) => new Set(process.listeners(ev)));
  return {
    restore() {
      GLUE_EVENTS.forEach((ev, i) => {
        for (const l of process.listeners(ev)) if (!before[i].has(l)) process.removeListener(ev, l);
      });
    },
  };
}

/** Lets a Node process exit while pthread workers are idle (dispose() ends them). */
export function unrefWorkers(M) {
  if (!isNode || !M.PThread) return;
  const P = M.PThread;
  const all = [...(P.unusedWorkers || []), ...(P.runningWorkers || [])];
  for (const w of all) if (w && typeof w.unref === 'function') w.unref();
}
