// loader.js: pick a build, locate its files, fetch and instantiate it.
//
// Builds (dist/, made by `npm run build`):
//   relaxed-threads  relaxed SIMD + pthreads: as simd-threads, where relaxed SIMD validates
//                    files: sdpa-relaxed-threads.mjs (glue), .wasm, .worker.js
//   relaxed          relaxed SIMD, one thread: as simd, where relaxed SIMD validates
//                    files: sdpa-relaxed.mjs (glue), sdpa-relaxed.wasm
//   simd-threads  SIMD128 + pthreads: Node, or a browser page/worker with crossOriginIsolated
//                 files: sdpa-simd-threads.mjs (glue), .wasm, .worker.js (pthread worker script)
//   simd          SIMD128, one thread: everywhere else (one console.warn says why)
//                 files: sdpa-simd.mjs (glue), sdpa-simd.wasm
// Relaxed SIMD (f32x4.relaxed_madd: FMA) is detected with WebAssembly.validate
// on a tiny module holding that opcode: Chromium has it, Node from 21 (Node 20
// with --experimental-wasm-relaxed-simd), Safari not; the plain SIMD128 builds
// are the fallback, silently (it is the normal case there, not a misconfiguration).
//
// Where the files are: by default next to this package, through literal
// `new URL('../dist/<file>', import.meta.url)` (one per file, so that webpack 5,
// Vite/Rollup and Parcel see each file and emit it as an asset); createSdpa's
// `wasmPaths` (a URL prefix or a per-file map) overrides that, and
// `wasmBinary` / `wasmModule` skip fetching the .wasm.
//
// How they load: the loader reads (Node: fs) or fetches (browsers) the .wasm
// itself, so a failure names the URL really requested and its HTTP status; it
// compiles it and hands the module to the glue (instantiateWasm). The glue is
// loaded at run time, never bundled (bundlers do not parse it), and downloaded
// once: the threads build's glue is fetched into one blob: URL that the main
// thread and every pool worker import. Cross-origin (a CDN) or data: worker
// scripts become blob: URLs too: browsers refuse a cross-origin Worker script.
// Every failure is SdpaError E_LOAD naming the file and the advice that fits
// the cause, never a silent switch to the other build, and never a promise
// left pending: `initTimeout` bounds the whole load.

import { SdpaError, E_LOAD } from './errors.js';
import { describeValue } from './snapshot.js';
import { MAX_THREADS } from './abi.js';

export const MAX_AUTO_THREADS = 8;
const MAX_WORKERS = MAX_THREADS - 1; // pthread workers: the calling thread is the other one (CMakeLists.txt caps the pool alike)
export const DEFAULT_INIT_TIMEOUT_MS = 30_000;

const BUILDS = {
  'relaxed-threads': { glue: 'sdpa-relaxed-threads.mjs', wasm: 'sdpa-relaxed-threads.wasm', worker: 'sdpa-relaxed-threads.worker.js', threaded: true, relaxed: true },
  relaxed: { glue: 'sdpa-relaxed.mjs', wasm: 'sdpa-relaxed.wasm', worker: null, threaded: false, relaxed: true },
  'simd-threads': { glue: 'sdpa-simd-threads.mjs', wasm: 'sdpa-simd-threads.wasm', worker: 'sdpa-simd-threads.worker.js', threaded: true, relaxed: false },
  simd: { glue: 'sdpa-simd.mjs', wasm: 'sdpa-simd.wasm', worker: null, threaded: false, relaxed: false },
};
export const BUILD_NAMES = Object.freeze(Object.keys(BUILDS));
const WASM_FILES = Object.values(BUILDS).map((b) => b.wasm).join(', ');
/** Whether a build is single-threaded / uses relaxed SIMD. */
export const isThreadedBuild = (build) => BUILDS[build].threaded;
export const isRelaxedBuild = (build) => BUILDS[build].relaxed;
/** The threaded build of the same SIMD kind (for messages). */
export const threadedTwin = (build) => (BUILDS[build].relaxed ? 'relaxed-threads' : 'simd-threads');
/** The file names `wasmPaths` maps (also the package's `sdpa-wasm/dist/<name>` exports). */
// (every build's files, plain builds first and threads first: the order messages list them in)
export const DIST_FILES = Object.freeze(Object.values(BUILDS).sort((x, y) => x.relaxed - y.relaxed || y.threaded - x.threaded)
  .flatMap((b) => [b.glue, b.wasm, b.worker].filter(Boolean)));

/** Where the package's own copy of `file` is. Literal URLs: bundlers rewrite each one to the emitted asset. */
function packagedUrl(file) {
  switch (file) {
    case 'sdpa-simd-threads.mjs': return new URL('../dist/sdpa-simd-threads.mjs', import.meta.url);
    case 'sdpa-simd-threads.wasm': return new URL('../dist/sdpa-simd-threads.wasm', import.meta.url);
    case 'sdpa-simd-threads.worker.js': return new URL('../dist/sdpa-simd-threads.worker.js', import.meta.url);
    case 'sdpa-simd.mjs': return new URL('../dist/sdpa-simd.mjs', import.meta.url);
    case 'sdpa-simd.wasm': return new URL('../dist/sdpa-simd.wasm', import.meta.url);
    case 'sdpa-relaxed-threads.mjs': return new URL('../dist/sdpa-relaxed-threads.mjs', import.meta.url);
    case 'sdpa-relaxed-threads.wasm': return new URL('../dist/sdpa-relaxed-threads.wasm', import.meta.url);
    case 'sdpa-relaxed-threads.worker.js': return new URL('../dist/sdpa-relaxed-threads.worker.js', import.meta.url);
    case 'sdpa-relaxed.mjs': return new URL('../dist/sdpa-relaxed.mjs', import.meta.url);
    case 'sdpa-relaxed.wasm': return new URL('../dist/sdpa-relaxed.wasm', import.meta.url);
    default: throw new Error(`unknown file ${file}`);
  }
}

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

const warned = new Set();
function warnOnce(kind, message) {
  if (warned.has(kind)) return;
  warned.add(kind);
  console.warn(message);
}

const canThread = () => isNode || (globalThis.crossOriginIsolated === true && typeof SharedArrayBuffer === 'function');
function noThreadsWhy() {
  return globalThis.crossOriginIsolated === false
    ? 'crossOriginIsolated is false (serve the page with the headers Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp)'
    : 'SharedArrayBuffer is not available';
}

// () -> v128: f32x4.relaxed_madd of three f32x4.splat(0), the opcode the relaxed builds use.
const RELAXED_PROBE = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 28, 1, 26, 0,
  67, 0, 0, 0, 0, 253, 19, 67, 0, 0, 0, 0, 253, 19, 67, 0, 0, 0, 0, 253, 19, 253, 133, 2, 11]);
let relaxedProbe = null;
/** Whether this runtime validates relaxed SIMD (asked once). */
export function hasRelaxedSimd() {
  if (relaxedProbe === null) {
    try { relaxedProbe = typeof WebAssembly === 'object' && WebAssembly.validate(RELAXED_PROBE); } catch { relaxedProbe = false; }
  }
  return relaxedProbe;
}
function noRelaxedAdvice() {
  return isNode
    ? `Node ${process.versions.node} has no relaxed SIMD by default: run node with --experimental-wasm-relaxed-simd (Node 20), or use Node 21 or later`
    : 'this browser has no relaxed SIMD (Chromium-based browsers have it since version 114; Safari has none)';
}

/**
 * Which build to use and why (reason is set when falling back to one thread).
 * Unforced: threads when SharedArrayBuffer works, relaxed SIMD when it validates.
 * @param {string|undefined} forced one of BUILD_NAMES, or undefined
 */
export function chooseBuild(forced) {
  if (forced) return { build: forced, reason: null };
  const relaxed = hasRelaxedSimd();
  if (canThread()) return { build: relaxed ? 'relaxed-threads' : 'simd-threads', reason: null };
  return { build: relaxed ? 'relaxed' : 'simd', reason: `sdpa-wasm: using the single-thread ${relaxed ? 'relaxed-SIMD' : 'SIMD'} build because ${noThreadsWhy()}; threads need SharedArrayBuffer` };
}

// ------------------------------------------------------------------ options

const isUrl = (x) => typeof URL === 'function' && x instanceof URL;

/**
 * Checks createSdpa's loading options (wasmPaths, wasmBinary, wasmModule,
 * initTimeout) into `ck`; returns them normalised.
 */
export function checkLoadOptions(ck, o) {
  const r = { paths: null, binary: null, module: null, initTimeout: DEFAULT_INIT_TIMEOUT_MS };
  const p = o.wasmPaths;
  const pathValue = (v, name) => {
    if (isUrl(v)) return v.href;
    if (typeof v === 'string' && v.length > 0) return v;
    ck.add('E_ARG', `${name} must be a URL or a non-empty string, got ${describeValue(v)}`);
    return null;
  };
  if (p !== undefined && p !== null) {
    if (typeof p === 'string' || isUrl(p)) {
      const prefix = pathValue(p, 'wasmPaths');
      if (prefix !== null) r.paths = { prefix, map: null };
    } else if (typeof p === 'object' && Object.prototype.toString.call(p) === '[object Object]') {
      const map = {};
      for (const key of Object.keys(p)) {
        if (!DIST_FILES.includes(key)) {
          ck.add('E_ARG', `wasmPaths has the key '${key}'; the keys are the file names ${DIST_FILES.join(', ')}`);
          continue;
        }
        if (p[key] === undefined) continue;
        const v = pathValue(p[key], `wasmPaths['${key}']`);
        if (v !== null) map[key] = v;
      }
      r.paths = { prefix: null, map };
    } else {
      ck.add('E_ARG', `wasmPaths must be a URL prefix (a string or URL ending in '/') or an object mapping file names (${DIST_FILES.join(', ')}) to URLs, got ${describeValue(p)}`);
    }
  }
  const b = o.wasmBinary;
  if (b !== undefined && b !== null) {
    if (b instanceof ArrayBuffer) r.binary = new Uint8Array(b);
    else if (ArrayBuffer.isView(b) && !(b instanceof DataView)) r.binary = new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    else ck.add('E_ARG', `wasmBinary must be an ArrayBuffer or a Uint8Array (the bytes of one of ${WASM_FILES}), got ${describeValue(b)}`);
    if (r.binary && r.binary.byteLength === 0) { ck.add('E_ARG', `wasmBinary is empty (0 bytes); expected the bytes of one of ${WASM_FILES}`); r.binary = null; }
  }
  const m = o.wasmModule;
  if (m !== undefined && m !== null) {
    if (typeof WebAssembly === 'object' && m instanceof WebAssembly.Module) r.module = m;
    else ck.add('E_ARG', `wasmModule must be a WebAssembly.Module (compiled from one of ${WASM_FILES}), got ${describeValue(m)}`);
  }
  if (b !== undefined && b !== null && m !== undefined && m !== null) ck.add('E_ARG', 'wasmBinary and wasmModule are both given; pass one of them');
  const t = o.initTimeout;
  if (t !== undefined && t !== null) {
    if (typeof t !== 'number') ck.add('E_ARG', `initTimeout must be a number of milliseconds, got ${describeValue(t)}`);
    else if (!(t > 0)) ck.add('E_ARG', `initTimeout is ${t}; expected milliseconds > 0 (Infinity: no limit)`);
    else r.initTimeout = t;
  }
  return r;
}

// ------------------------------------------------------------------ locations

/** The base that relative wasmPaths resolve against (the document, else the worker script). */
function browserBase() {
  if (typeof document === 'object' && document && typeof document.baseURI === 'string') return document.baseURI;
  if (typeof location === 'object' && location && typeof location.href === 'string') return location.href;
  return undefined;
}

/** The URL of `file`: wasmPaths first, else the package's copy. Throws SdpaError. */
function locate(file, paths, build) {
  let s = null, from = null;
  if (paths && paths.map && paths.map[file] !== undefined) { s = paths.map[file]; from = `wasmPaths['${file}']`; }
  else if (paths && paths.prefix !== null) { s = paths.prefix + file; from = 'wasmPaths'; }
  if (s === null) {
    try {
      return { url: packagedUrl(file), from: null };
    } catch (e) {
      throw new SdpaError(E_LOAD, `createSdpa: cannot locate ${file} (the '${build}' build): this bundle has no usable import.meta.url (${e && e.message}). ` +
        `Serve the files of node_modules/sdpa-wasm/dist/ and pass createSdpa({ wasmPaths: '<their URL prefix>/' }), or bundle as an ES module (README, "Loading: files, bundlers, CDNs").`, { cause: e });
    }
  }
  if (isNode) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(s) && !/^file:/i.test(s) && !/^[a-z]:[\\/]/i.test(s)) {
      throw new SdpaError('E_ARG', `createSdpa: ${from} gives ${JSON.stringify(s)} for ${file}; in Node the files are read from disk: use a file: URL or a path`);
    }
    if (/^file:/i.test(s)) return { url: new URL(s), from };
    const url = nodeBuiltin('url'), path = nodeBuiltin('path');
    return { url: url.pathToFileURL(path.resolve(s)), from };
  }
  try {
    return { url: new URL(s, browserBase()), from };
  } catch (e) {
    throw new SdpaError('E_ARG', `createSdpa: ${from} gives ${JSON.stringify(s)} for ${file}, which is not a valid URL (relative to ${browserBase()})`, { cause: e });
  }
}

function displayPath(url) {
  if (url.protocol === 'data:') return `${url.href.slice(0, url.href.indexOf(',') + 1)}… (a data: URL of ${url.href.length} characters, inlined by a bundler)`;
  if (isNode && url.protocol === 'file:') {
    const u = nodeBuiltin('url');
    if (u) return u.fileURLToPath(url);
  }
  return url.href;
}

// A data: URL (a bundler inlines small assets) counts as foreign: a Worker
// started from one has an opaque origin and cannot import the glue.
const sameOrigin = (url) => {
  if (url.protocol === 'blob:') return true;
  if (url.protocol === 'data:') return false;
  try { return url.origin === globalThis.location.origin; } catch { return false; }
};

// ------------------------------------------------------------------ errors

/** The advice for a file that is not where createSdpa looked. */
function missingAdvice(loc) {
  if (isNode) {
    return loc.from
      ? `check ${loc.from} (it must name the sdpa-wasm dist/ files)`
      : 'the sdpa-wasm install looks broken: run `npm run build` in a checkout, or reinstall the package';
  }
  return loc.from
    ? `check ${loc.from}: it must point at a copy of the files of node_modules/sdpa-wasm/dist/ (README, "Loading: files, bundlers, CDNs")`
    : 'serve the files of node_modules/sdpa-wasm/dist/ at that URL, or tell createSdpa where they are with { wasmPaths: \'<URL prefix>/\' } ' +
      '(a bundler that does not emit `new URL(..., import.meta.url)` assets needs that; README, "Loading: files, bundlers, CDNs")';
}

function networkAdvice(url) {
  if (!sameOrigin(url)) {
    return `the request to ${url.origin} failed without an HTTP response: a cross-origin URL needs CORS, so that server must send ` +
      'Access-Control-Allow-Origin (and, on a cross-origin isolated page, Cross-Origin-Resource-Policy: cross-origin), or it is unreachable';
  }
  return 'the request failed without an HTTP response: the server is unreachable, or the request was blocked (a Content-Security-Policy, an extension)';
}

/** A browser fetch of `url` that turns every failure into E_LOAD naming the URL and the status. */
async function fetchFile(loc, what, build) {
  const href = loc.url.href;
  if (loc.url.protocol === 'data:') return { bytes: decodeDataUrl(href), type: '' }; // (no fetch: a CSP connect-src may forbid data:)
  let res;
  try {
    res = await fetch(href, { credentials: 'same-origin' });
  } catch (e) {
    throw loadError(build, `GET ${href} (${what}) failed`, `${e && e.message}; ${networkAdvice(loc.url)}`, e);
  }
  if (!res.ok) {
    const advice = res.status === 404 || res.status === 410 ? missingAdvice(loc) : 'check that the server serves that URL';
    throw loadError(build, `GET ${href} (${what}) returned HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`, advice);
  }
  return { bytes: new Uint8Array(await res.arrayBuffer()), type: res.headers.get('content-type') || '' };
}

/** The bytes of a data: URL (base64 or percent-encoded). */
function decodeDataUrl(href) {
  const comma = href.indexOf(',');
  const meta = href.slice(5, comma), body = href.slice(comma + 1);
  if (/;base64$/i.test(meta)) return Uint8Array.from(atob(decodeURIComponent(body)), (c) => c.charCodeAt(0));
  return new TextEncoder().encode(decodeURIComponent(body));
}

/** After a browser load failure without a status: what a GET of `url` gives now (diagnosis only). */
async function probe(url) {
  if (isNode || url.protocol === 'blob:') return null;
  try {
    const res = await fetch(url.href, { credentials: 'same-origin' });
    const type = res.headers.get('content-type') || '';
    if (!res.ok) return { status: res.status, text: `HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}` };
    return { status: res.status, text: `HTTP ${res.status}, ${type || 'no content-type'}`, type };
  } catch (e) {
    return { status: 0, text: `no HTTP response (${e && e.message})` };
  }
}

function loadError(build, what, advice, cause) {
  return new SdpaError(E_LOAD, `createSdpa: ${what} (the '${build}' build): ${advice}.`, cause === undefined ? undefined : { cause });
}

// ------------------------------------------------------------------ loading

/** The custom section scripts/wasm-patch.mjs writes into every .wasm: the build's name. */
const BUILD_SECTION = 'sdpa.build';
const isThreadedModule = (mod) => WebAssembly.Module.imports(mod).some((d) => d.kind === 'memory');
/** Which build a compiled module is (its sdpa.build section; else plain SIMD, by its memory import). */
function buildOfModule(mod) {
  const sec = WebAssembly.Module.customSections(mod, BUILD_SECTION);
  if (sec.length) {
    const name = new TextDecoder().decode(sec[0]);
    if (BUILDS[name]) return name;
  }
  return isThreadedModule(mod) ? 'simd-threads' : 'simd';
}
/** The build named by the sdpa.build section of wasm bytes that may not compile here, or null. */
function buildOfBytes(bytes) {
  let i = 8;
  const leb = () => { let r = 0, shift = 0, b; do { b = bytes[i++]; r |= (b & 0x7f) << shift; shift += 7; } while ((b & 0x80) && i < bytes.length); return r >>> 0; };
  try {
    while (i < bytes.length) {
      const id = bytes[i++], size = leb(), end = i + size;
      if (id === 0) {
        const n = leb();
        if (new TextDecoder().decode(bytes.subarray(i, i + n)) === BUILD_SECTION) {
          const name = new TextDecoder().decode(bytes.subarray(i + n, end));
          return BUILDS[name] ? name : null;
        }
      }
      i = end;
    }
  } catch { /* not a wasm binary */ }
  return null;
}
/** E_LOAD for a relaxed build on a runtime without relaxed SIMD. */
function noRelaxedError(what, build) {
  const plain = BUILDS[build].threaded ? 'simd-threads' : 'simd';
  return new SdpaError(E_LOAD, `createSdpa: ${what} needs WebAssembly relaxed SIMD, which this runtime does not validate: ${noRelaxedAdvice()}; ` +
    `or use the '${plain}' build (leave build unset: createSdpa picks the best build this runtime runs).`);
}

/**
 * Loads and instantiates a build.
 * @param {object} a
 *   forced      'simd-threads' | 'simd' | undefined
 *   threads     'auto' or a positive integer (total threads asked)
 *   load        checkLoadOptions' result
 * @returns {Promise<{ M: object, build: string, threads: number }>}
 */
export async function loadSdpa({ forced, threads, load }) {
  const state = { stage: 'starting', moduleArg: null, blobs: [], timer: null, build: forced || '' };
  const cleanup = () => {
    if (state.timer) clearTimeout(state.timer);
    for (const b of state.blobs) URL.revokeObjectURL(b);
  };
  const limit = load.initTimeout;
  const timeout = Number.isFinite(limit) && limit <= 0x7fffffff
    ? new Promise((_, reject) => {
      state.timer = setTimeout(() => {
        state.timedOut = true;
        terminate(state.moduleArg);
        reject(new SdpaError(E_LOAD, `createSdpa: the '${state.build}' build did not load within ${limit} ms (initTimeout): ` +
          `still ${state.stage}. Check that URL (the browser's network panel shows the requests), or raise initTimeout on a slow network.`));
      }, limit);
    })
    : null;
  try {
    const work = loadInner({ forced, threads, load, state });
    if (!timeout) return await work;
    work.catch(() => {}); // (a late failure after the timeout is not an unhandled rejection)
    return await Promise.race([work, timeout]);
  } finally {
    cleanup();
  }
}

function terminate(moduleArg) {
  try { moduleArg && moduleArg.PThread && moduleArg.PThread.terminateAllThreads(); } catch { /* best effort */ }
}

async function loadInner({ forced, threads, load, state }) {
  // 1. The compiled module, when the caller gave one or its bytes: it decides the build.
  const given = await givenModule(load, forced);
  // 2. The build and the thread count.
  const { build, spec, n } = await pickBuild(given.forced, threads, given.name, state);
  // 3. Where the files are.
  const glue = locate(spec.glue, load.paths, build);
  const wasm = given.mod ? null : locate(spec.wasm, load.paths, build);
  const worker = spec.threaded ? locate(spec.worker, load.paths, build) : null;
  // 4. The wasm module (read or fetched here, so failures name the URL and status).
  const mod = given.mod ? given.mod : await fetchModule(wasm, build, spec, state);
  const wasmName = wasm ? displayPath(wasm.url) : given.name;
  // 5. The glue (and, for threads, the worker script).
  const scripts = await fetchScripts(glue, worker, spec, build, state);
  const factory = await importGlue(glue, scripts, build, state);
  if (state.timedOut) throw new Error('timed out'); // (createSdpa has rejected already: start no workers)
  // 6. Instantiate.
  const M = await instantiate({ mod, factory, spec, n, build, wasm, wasmName, given: given.name, glue, worker, scripts, state });
  return { M, build, threads: n };
}

/**
 * loadInner's step 1: the module the caller gave (wasmModule, or wasmBinary
 * compiled here), checked against `forced` and this runtime. Returns { mod,
 * name ('wasmModule' | 'wasmBinary'), forced (the module's build) }, or
 * { mod: null, name: null, forced } when none was given.
 */
async function givenModule(load, forced) {
  let mod = load.module;
  if (!mod && !load.binary) return { mod, name: null, forced };
  const given = mod ? 'wasmModule' : 'wasmBinary';
  if (!mod) {
    const named = buildOfBytes(load.binary);
    if (named && BUILDS[named].relaxed && !hasRelaxedSimd()) throw noRelaxedError(`wasmBinary is the '${named}' build, which`, named);
    if (!WebAssembly.validate(load.binary)) {
      throw new SdpaError(E_LOAD, `createSdpa: wasmBinary (${load.binary.byteLength} bytes) is not a valid WebAssembly module: ` +
        `pass the bytes of one of ${WASM_FILES}${isNode ? '' : ' (and a browser with WebAssembly SIMD)'}.`);
    }
    mod = await WebAssembly.compile(load.binary);
  }
  const kind = buildOfModule(mod);
  if (forced && forced !== kind) {
    throw new SdpaError('E_ARG', `createSdpa: ${given} is the '${kind}' build's module (${BUILDS[kind].wasm}) but build is '${forced}'`);
  }
  if (BUILDS[kind].threaded && !canThread()) {
    const single = BUILDS[kind].relaxed ? 'relaxed' : 'simd';
    throw new SdpaError(E_LOAD, `createSdpa: ${given} is the '${kind}' build, which needs SharedArrayBuffer, and ${noThreadsWhy()}; ` +
      `pass the single-thread build (${BUILDS[single].wasm}) instead, or make the page cross-origin isolated.`);
  }
  return { mod, name: given, forced: kind };
}

/**
 * loadInner's step 2: the build (chooseBuild; `given` the caller's module's
 * name or null) and the thread count `n`, with the console.warn of a clamp or
 * a fallback. Returns { build, spec, n }.
 */
async function pickBuild(forced, threads, given, state) {
  const { build, reason } = chooseBuild(forced);
  state.build = build;
  const spec = BUILDS[build];
  if (spec.threaded && !canThread()) {
    throw new SdpaError(E_LOAD, `createSdpa: build '${build}' needs SharedArrayBuffer, and ${noThreadsWhy()}; ` +
      'leave build unset to fall back to the single-thread build.');
  }
  if (spec.relaxed && !given && !hasRelaxedSimd()) throw noRelaxedError(`build '${build}'`, build);
  const cores = await availableCores();
  let n = 1;
  if (spec.threaded) {
    if (threads === 'auto') n = Math.min(cores, MAX_AUTO_THREADS);
    else {
      // Up to max(cores, 8) run as asked (more threads than cores only share
      // them: slower, still correct); above that, clamped (threads: 1000 must not
      // start 63 workers on 2 cores). Either way one console.warn says so.
      const cap = Math.min(MAX_THREADS, Math.max(cores, MAX_AUTO_THREADS));
      n = Math.min(threads, cap);
      if (n < threads) {
        warnOnce(`clamp:${threads}:${n}`, `sdpa-wasm: threads: ${threads} was asked, but this machine has ${cores} cores; using ${n} threads ` +
          `(at most the larger of the cores and ${MAX_AUTO_THREADS}, and ${MAX_THREADS})`);
      } else if (n > cores) {
        warnOnce(`share:${threads}:${cores}`, `sdpa-wasm: threads: ${threads} was asked on ${cores} cores: the threads share the cores, which is slower than threads: ${cores}`);
      }
    }
  } else if (typeof threads === 'number' && threads > 1 && given) {
    throw new SdpaError('E_ARG', `createSdpa: threads is ${threads} but ${given} is the single-thread '${build}' build; pass the '${threadedTwin(build)}' build or threads: 1`);
  }
  if (reason && threads !== 1) {  // (threads: 1 asked for what runs: nothing to warn about)
    const ask = typeof threads === 'number' && threads > 1 ? ` (threads: ${threads} was asked; 1 thread runs)` : '';
    warnOnce('fallback', reason + ask);
  }
  return { build, spec, n };
}

/** loadInner's step 4: the build's wasm file read (Node) or fetched, checked and compiled. */
async function fetchModule(wasm, build, spec, state) {
  const where = displayPath(wasm.url);
  let bytes;
  state.stage = `fetching ${where}`;
  if (isNode) {
    const fs = await nodeModule('fs');
    try {
      bytes = await fs.promises.readFile(wasm.url);
    } catch (e) {
      throw loadError(build, `cannot read ${where}: ${e && (e.code || e.message)}`, missingAdvice(wasm), e);
    }
  } else {
    bytes = (await fetchFile(wasm, 'the wasm module', build)).bytes;
  }
  if (!WebAssembly.validate(bytes)) {
    const head = new TextDecoder().decode(bytes.subarray(0, 16)).replace(/\s+/g, ' ');
    const html = /^\s*</.test(head) ? `; it starts with ${JSON.stringify(head)}: an HTML page (a server that answers unknown paths with index.html?)` : '';
    throw loadError(build, `${where} is not a valid WebAssembly module (${bytes.length} bytes${html})`,
      html ? missingAdvice(wasm) : `a corrupt or truncated file, or a runtime without WebAssembly SIMD${spec.threaded ? '/threads' : ''}; ${missingAdvice(wasm)}`);
  }
  state.stage = `compiling ${where}`;
  let mod;
  try {
    mod = await WebAssembly.compile(bytes);
  } catch (e) {
    throw loadError(build, `compiling ${where} failed: ${e && e.message}`, missingAdvice(wasm), e);
  }
  const kind = buildOfModule(mod);
  if (kind !== build) {
    throw loadError(build, `${where} is the '${kind}' build's wasm, not the '${build}' build's`, missingAdvice(wasm));
  }
  return mod;
}

/**
 * loadInner's step 5a: the glue and, for threads, the worker script, as the
 * URLs to load them from: cross-origin ones as blob: URLs (kept in
 * state.blobs). The threads build's glue too: the main thread and every pool
 * worker import it, and one blob: URL makes that one download (a
 * Content-Security-Policy without blob: falls back to the URL: importGlue).
 * Returns { glueWhere, glueHref, glueBlob, workerWhere, workerHref }.
 */
async function fetchScripts(glue, worker, spec, build, state) {
  const glueWhere = displayPath(glue.url);
  let glueHref = glue.url.href;
  const glueBlob = !isNode && (spec.threaded || !sameOrigin(glue.url));
  if (glueBlob) {
    state.stage = `fetching ${glueWhere}`;
    const { bytes } = await fetchFile(glue, 'the JS glue', build);
    glueHref = URL.createObjectURL(new Blob([bytes], { type: 'text/javascript' }));
    state.blobs.push(glueHref);
  }
  let workerHref = null;
  const workerWhere = worker ? displayPath(worker.url) : null;
  if (worker) {
    if (isNode) {
      const fs = await nodeModule('fs');
      try {
        await fs.promises.access(worker.url, fs.constants.R_OK);
      } catch (e) {
        throw loadError(build, `cannot read ${workerWhere}: ${e && (e.code || e.message)}`, missingAdvice(worker), e);
      }
      workerHref = workerWhere;
    } else if (!sameOrigin(worker.url)) {
      state.stage = `fetching ${workerWhere}`;
      const { bytes } = await fetchFile(worker, 'the pthread worker script', build);
      workerHref = URL.createObjectURL(new Blob([bytes], { type: 'text/javascript' }));
      state.blobs.push(workerHref);
    } else {
      workerHref = worker.url.href;
    }
  }
  return { glueWhere, glueHref, glueBlob, workerWhere, workerHref };
}

/**
 * loadInner's step 5b: imports the glue and returns its module factory. A
 * refused blob: import (CSP) imports the file itself and sets
 * scripts.glueHref to its URL (the pool workers import that one too).
 */
async function importGlue(glue, scripts, build, state) {
  const { glueWhere, glueBlob } = scripts;
  state.stage = `importing ${glueWhere}`;
  let factory;
  try {
    try {
      factory = (await import(/* webpackIgnore: true */ /* @vite-ignore */ scripts.glueHref)).default;
    } catch (e) {
      if (!glueBlob || !sameOrigin(glue.url)) throw e;
      scripts.glueHref = glue.url.href; // a blob: import refused (CSP): the file itself
      factory = (await import(/* webpackIgnore: true */ /* @vite-ignore */ scripts.glueHref)).default;
    }
  } catch (e) {
    const p = await probe(glue.url);
    const advice = p && p.status !== 200 ? missingAdvice(glue)
      : p && p.type && !/javascript|ecmascript/i.test(p.type) ? `the server sends it as ${p.type}; module scripts need a JavaScript MIME type (text/javascript)`
        : missingAdvice(glue);
    throw loadError(build, `cannot load ${glueWhere}${p ? ` (GET: ${p.text})` : ''}: ${e && e.message}`, advice, e);
  }
  if (typeof factory !== 'function') throw loadError(build, `${glueWhere} does not export the module factory`, missingAdvice(glue));
  return factory;
}

/**
 * loadInner's step 6: instantiates the module through the glue's factory
 * (the glue gets the compiled module; pool workers get the worker URL and the
 * glue URL) and waits for it, and for the pool's workers (watchWorkers).
 * Returns the glue's module object.
 */
async function instantiate(a) {
  const { mod, factory, spec, n, wasm, wasmName, scripts, state } = a;
  const logs = [];
  let failInstantiate;
  const instantiateFailed = new Promise((_, rej) => { failInstantiate = rej; });
  instantiateFailed.catch(() => {});
  const moduleArg = {
    sdpaWorkers: spec.threaded ? Math.max(0, n - 1) : 0,
    print: (s) => console.log(s),
    printErr: (s) => { logs.push(String(s)); if (logs.length > 20) logs.shift(); },
    locateFile: (file) => (file === spec.worker ? scripts.workerHref : file === spec.wasm && wasm ? wasm.url.href : file),
    instantiateWasm: (imports, receive) => {
      WebAssembly.instantiate(mod, imports).then((inst) => receive(inst, mod), failInstantiate);
      return {};
    },
  };
  if (spec.threaded) moduleArg.mainScriptUrlOrBlob = scripts.glueHref;
  state.moduleArg = moduleArg;

  let M, watch = null;
  const nWorkers = spec.threaded ? Math.min(MAX_WORKERS, Math.max(1, n - 1)) : 0;
  state.stage = spec.threaded
    ? `starting ${nWorkers} pthread worker${nWorkers > 1 ? 's' : ''} from ${scripts.workerWhere}, which import${nWorkers > 1 ? '' : 's'} ${scripts.glueWhere}`
    : `instantiating ${wasmName}`;
  try {
    // The 3.1.6 Node glue adds process 'uncaughtException' / 'unhandledRejection'
    // handlers (one pair per instance, never removed; they rethrow and keep the
    // module alive). A library must not change the host's error handling: drop them.
    const added = isNode ? snapshotListeners() : null;
    const pending = factory(moduleArg);
    if (added) added.restore();
    // The pool's workers exist now. If one cannot load (a missing or broken
    // worker file or glue), the glue would throw from its 'error' handler (a
    // crash in Node) or wait forever: watch them instead.
    if (spec.threaded) watch = watchWorkers(moduleArg);
    M = await Promise.race(watch ? [pending, instantiateFailed, watch.failed] : [pending, instantiateFailed]);
    if (state.timedOut) throw new Error('timed out');
    if (watch) watch.loaded();
  } catch (e) {
    if (watch) watch.stop();
    terminate(moduleArg);
    throw await instantiateError(e, watch, logs, a);
  }
  // From now on C stderr goes to the console.
  moduleArg.printErr = M.printErr = (s) => console.error(s);
  return M;
}

/** The E_LOAD of a failed instantiate: a pool worker that did not load, or the instance (with the glue's last stderr lines). */
async function instantiateError(e, watch, logs, { build, wasm, wasmName, given, glue, worker, scripts }) {
  if (watch && watch.failedWith === e) {
    let why = e && (e.text || e.message) ? (e.text || e.message) : (e && e.type) || 'it did not load';
    let advice = missingAdvice(worker);
    if (!e || !e.text) {
      const p = await probe(worker.url);
      if (p) why += ` (GET ${worker.url.href}: ${p.text})`;
    } else {
      advice = `it could not import the glue ${scripts.glueWhere}: ${missingAdvice(glue)}`;
    }
    return loadError(build, `the pthread worker ${scripts.workerWhere} failed to load: ${why}`, advice, e);
  }
  const msg = e && e.message ? e.message : String(e);
  const extra = logs.filter((l) => !msg.includes(l) && !/Build with -s ASSERTIONS/.test(l)).slice(-2);
  const detail = extra.length ? ` (${extra.join(' | ')})` : '';
  return loadError(build, `instantiating ${wasmName} failed: ${msg}${detail}`,
    given ? `check that ${given} comes from this version of sdpa-wasm` : missingAdvice(wasm), e);
}

/**
 * Watches the pthread pool's workers while the module loads: an 'error' from
 * any of them, or a { cmd: 'sdpaLoadError' } message (the patched worker
 * script's report of a failed glue import, scripts/wasm-patch.mjs), rejects
 * `failed` instead of reaching the glue's handler (which throws). Once loaded,
 * the glue's own handling is put back.
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
  const onMessage = (m) => {
    const d = typeof MessageEvent === 'function' && m instanceof MessageEvent ? m.data : m; // (Node passes the data)
    if (d && d.cmd === 'sdpaLoadError') onError({ text: String(d.text) });
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
    if (typeof w.on === 'function') { w.on('error', onError); w.on('message', onMessage); }
    else if (typeof w.addEventListener === 'function') { w.addEventListener('error', onError); w.addEventListener('message', onMessage); }
  }
  const detach = () => {
    for (const w of workers) {
      delete w.onerror;
      if (typeof w.off === 'function') { w.off('error', onError); w.off('message', onMessage); }
      else if (typeof w.removeEventListener === 'function') { w.removeEventListener('error', onError); w.removeEventListener('message', onMessage); }
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
