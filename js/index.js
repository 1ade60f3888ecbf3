// sdpa-wasm: scaled dot-product attention with a KV cache, as WebAssembly
// (SIMD128 + pthreads). The behaviour is docs/CONTRACT.md; the API is README.md.
//
//   import { createSdpa, SdpaError } from 'sdpa-wasm';
//   const sdpa = await createSdpa({ threads: 'auto' });
//   const out = sdpa.customSdpa(q, k, v, { startPos, isCausal });
//   sdpa.dispose();

import { SdpaError, STATUS_CODES, E_LOAD, codeOfStatus } from './errors.js';
import {
  Checks, checkStartPos, checkCustom, CUSTOM_OPTIONS, readCacheConfig, readCachePlan, readAllocArgs,
  checkReserveBytes,
} from './rules.js';
import { readOptions, readPlainOptions, inspectTensor, describeValue, checkLive, checkLiveOptions, readLayerConfigs } from './snapshot.js';
import { loadSdpa, checkLoadOptions, unrefWorkers, BUILD_NAMES, isThreadedBuild, isRelaxedBuild, threadedTwin } from './loader.js';
import { Core, SLOT, SCRATCH_BYTES, formatBytes } from './runtime.js';
import { attendMany, stepMany } from './many.js';
import { KVCache } from './kv-cache.js';
import { LAYOUT, CACHE_DTYPES, GEOMETRY_FIELDS } from './abi.js';
import { KVCacheGroup } from './kv-cache-group.js';
import { loadState, CacheSink, GroupSink } from './kv-state.js';
import { HeapTensor, isHeapTensor } from './heap.js';
import { makeTorchEntry } from './torch.js';
import { denseEntries } from './dense.js';
import { VERSION } from './version.js';

export { SdpaError, STATUS_CODES, E_LOAD, KVCache, KVCacheGroup, HeapTensor, isHeapTensor, VERSION };

/**
 * Reads an options object as the package's own calls read theirs (the
 * snapshot rule, CONTRACT.md section 2): undefined or null is {}; each name of
 * `known` is read once (getters, inherited and non-enumerable options count);
 * any other name is E_ARG. Returns { name: value } of `known` (absent:
 * undefined); a failure is an SdpaError whose message starts with `fn`. For
 * packages built on this one (sdpa-wasm/llama): their options read and word
 * as the package's.
 */
export function checkOptions(fn, options, known) {
  const ck = new Checks(String(fn));
  const o = readPlainOptions(ck, options, known);
  ck.done();
  return o;
}

/** Key of the (unstable, test-only) internals: sdpa[INTERNALS] = { M, core }. */
export const INTERNALS = Symbol.for('sdpa-wasm.internals');

/**
 * Loads the wasm build and makes an instance.
 * @param {{ threads?: number | 'auto', build?: 'relaxed-threads' | 'relaxed' | 'simd-threads' | 'simd', wasmPaths?: string | URL | Record<string, string | URL>,
 *   wasmBinary?: ArrayBuffer | Uint8Array, wasmModule?: WebAssembly.Module, initTimeout?: number }} [options]
 */
export async function createSdpa(options) {
  const ck = new Checks('createSdpa');
  const o = readOptions(ck, options, ['threads', 'build', 'wasmPaths', 'wasmBinary', 'wasmModule', 'initTimeout']);
  let threads = o.threads === undefined || o.threads === null ? 'auto' : o.threads;
  if (threads !== 'auto') {
    if (typeof threads !== 'number') ck.add('E_ARG', `threads must be a positive integer or 'auto', got ${describeValue(threads)}`);
    else if (!Number.isSafeInteger(threads) || threads < 1) ck.add('E_ARG', `threads is ${threads}; expected a positive integer or 'auto'`);
  }
  const forced = o.build === undefined || o.build === null ? undefined : o.build;
  if (forced !== undefined && !BUILD_NAMES.includes(forced)) {
    ck.add('E_ARG', `build must be one of ${BUILD_NAMES.map((b) => `'${b}'`).join(', ')} (or unset: chosen by feature detection), got ${describeValue(forced)}`);
  } else if (forced !== undefined && !isThreadedBuild(forced) && typeof threads === 'number' && threads > 1) {
    ck.add('E_ARG', `threads is ${threads} but build '${forced}' is single-threaded; use build '${threadedTwin(forced)}' or threads: 1`);
  }
  const load = checkLoadOptions(ck, o);
  ck.done();

  // The loader picks the build and the thread count (above max(cores, 8): clamped, with one console.warn).
  const { M, build, threads: n } = await loadSdpa({ forced, threads, load });
  const core = new Core(M);
  try {
    core.scratch = core.malloc(SCRATCH_BYTES, 'createSdpa', 'the argument block');
    core.idsBlock('createSdpa', 64);   // sdpa.embed's ids: a model's steps of up to 64 tokens never allocate
    const statusAt = core.scratch + SLOT.ptr;
    core.views().i32[statusAt >>> 2] = 0;
    const ctx = M._sdpa_ctx_create(n, statusAt) >>> 0;
    if (!ctx) {
      const st = core.views().i32[statusAt >>> 2] || STATUS_CODES.indexOf('E_OOM');
      throw new SdpaError(STATUS_CODES[st] || 'E_OOM', `createSdpa: sdpa_ctx_create(${n}) failed with ${STATUS_CODES[st] || st} (could not get memory or ${n - 1} worker threads)`);
    }
    core.ctx = ctx;
  } catch (e) {
    if (core.scratch) M._free(core.scratch);
    if (core.idsAt) M._free(core.idsAt);
    if (M.PThread) M.PThread.terminateAllThreads();
    throw e;
  }
  unrefWorkers(M);
  const info = Object.freeze({ build, relaxedSimd: isRelaxedBuild(build), threads: M._sdpa_ctx_threads(core.ctx), version: VERSION });
  return makeInstance(core, info);
}

/** The instance object: createSdpa's result over a live context. */
function makeInstance(core, info) {
  const { runCustom, customSdpa } = attentionEntries(core);
  const caches = cacheEntries(core);
  const torch = makeTorchEntry(core, runCustom);
  const { allocTensor, memory, reserve } = memoryEntries(core);
  const dense = denseEntries(core);
  const sdpa = {
    info,
    customSdpa,
    createKVCache: caches.createKVCache,
    createKVCacheGroup: caches.createKVCacheGroup,
    loadKVCache: caches.loadKVCache,
    loadKVCacheGroup: caches.loadKVCacheGroup,
    kvCacheSize: caches.kvCacheSize,
    allocTensor,
    linear: dense.linear,
    rmsNorm: dense.rmsNorm,
    swiglu: dense.swiglu,
    embed: dense.embed,
    quantize: dense.quantize,
    prepareLinear: dense.prepareLinear,
    prepareRmsNorm: dense.prepareRmsNorm,
    prepareSwiglu: dense.prepareSwiglu,
    memory,
    reserve,
    scaledDotProductAttention: torch.scaledDotProductAttention,
    planAttention: torch.planAttention,
    /** Several caches' attend in one call (many.js). */
    attendMany: (items) => attendMany(core, items),
    stepMany: (items) => stepMany(core, items),
    dispose: disposer(core),
    get disposed() { return core.disposed; },
  };
  Object.defineProperty(sdpa, INTERNALS, { value: { M: core.M, core }, enumerable: false });
  return Object.freeze(sdpa);
}

/** customSdpa, and runCustom (the same with the public function's name in messages: torch.js's fast path). */
function attentionEntries(core) {
  const M = core.M;
  /** customSdpa's entry (runAttention passes the mask slot, or 0): every rule C's, once. */
  const callCustom = (mask) => {
    const s = core.scratch;
    return M._sdpa_wasm_custom(core.ctx, s + SLOT.q, s + SLOT.k, s + SLOT.v, mask, s + SLOT.opts, s + SLOT.out);
  };

  /** customSdpa, with `fn` naming the public function in messages. */
  function runCustom(fn, query, key, value, opts) {
    const ck = new Checks(fn);
    // snapshot: every caller value read once (snapshot.js, the snapshot rule)
    const Q = inspectTensor(ck, 'query', query, 'input');
    const K = inspectTensor(ck, 'key', key, 'input');
    const V = inspectTensor(ck, 'value', value, 'input');
    const o = readOptions(ck, opts, CUSTOM_OPTIONS);
    // state, then the rules
    core.checkAlive(ck);
    checkLive(ck, Q);
    checkLive(ck, K);
    checkLive(ck, V);
    checkLiveOptions(ck, o);
    const sp = checkStartPos(ck, o.startPos, 'startPos');
    const P = checkCustom(core, ck, o, Q, K, V);
    ck.done();
    return core.runAttention(fn, P, sp, K, V, callCustom);
  }

  function customSdpa(query, key, value, opts) {
    return runCustom('customSdpa', query, key, value, opts);
  }
  return { runCustom, customSdpa };
}

/**
 * kvCacheSize's C entry for a geometry JS read (rules.js readGeometry):
 * sdpa_wasm_kv_cache_plan checks its rules (and with `rows` a number, its
 * rows) and sizes it with `rows` rows written (none: 0). A failure goes into
 * `ck` (C's words); returns the sizes { pages, pageBytes, poolBytes,
 * tableBytes, bytes }, or null.
 */
function planCache(core, ck, geo, rows = null) {
  const at = core.slot('stats');
  const st = core.M._sdpa_wasm_kv_cache_plan(core.ctx, geo.batch, geo.maxSeqLen, geo.numKvHeads, geo.headDim,
    CACHE_DTYPES[geo.keyDtype], CACHE_DTYPES[geo.valueDtype], geo.window, geo.sinkTokens, geo.float16NewestPage ? 1 : 0,
    rows === null ? 0 : 1, rows ?? 0, at);
  if (st !== 0) {
    ck.add(codeOfStatus(st), core.readCString(core.M._sdpa_ctx_last_error(core.ctx)), st);
    return null;
  }
  const f = LAYOUT.sdpa_kv_cache_size, i64 = (offset) => core.int64At(at + offset);
  return { pages: i64(f.pages), pageBytes: i64(f.page_bytes), poolBytes: i64(f.pool_bytes), tableBytes: i64(f.table_bytes), bytes: i64(f.bytes) };
}

/** A cache of a geometry JS read: C's entry checks its rules, its page and page table against one wasm allocation, and makes it. */
function makeCache(core, fn, geo) {
  const outAt = core.slot('ptr');
  core.views().u32[outAt >>> 2] = 0;
  core.checkEntry(core.M._sdpa_wasm_kv_cache_create(core.ctx, core.putGeometry(geo), outAt), fn);
  const ptr = core.views().u32[outAt >>> 2];
  return adoptCache(core, ptr, { ...geo, float16NewestPage: core.M._sdpa_kv_cache_float16_newest_page(ptr) !== 0 });
}

/** A KVCache object for a cache C made (a create or a load). */
function adoptCache(core, ptr, geo) {
  const cache = new KVCache(core, ptr, geo);
  core.caches.add(cache);
  return cache;
}

/** The instance's cache functions: createKVCache, createKVCacheGroup, kvCacheSize, loadKVCache, loadKVCacheGroup. */
function cacheEntries(core) {
  function createKVCache(config) {
    const fn = 'createKVCache';
    const ck = new Checks(fn);
    const geo = readCacheConfig(ck, config);
    core.checkAlive(ck);
    ck.done();  // (JS's rules first: CONTRACT.md section 2's order)
    return makeCache(core, fn, geo);
  }

  /**
   * The bytes a cache of these options holds once rows 0 .. rows-1 are
   * written (default: maxSeqLen, i.e. full; a windowed cache: its full
   * ring): { pages, pageBytes, poolBytes, tableBytes, bytes }. `poolBytes`
   * is what sdpa.reserve() needs for them; `bytes` is cache.bytes then.
   */
  function kvCacheSize(config, rows) {
    const fn = 'sdpa.kvCacheSize';
    const ck = new Checks(fn);
    const geo = readCachePlan(ck, config, rows);
    core.checkAlive(ck);
    ck.done();  // (JS's rules first)
    const plan = planCache(core, ck, geo, geo.rows ?? geo.maxSeqLen);
    ck.done();
    return plan;
  }

  /**
   * The caches of all the layers of a model: `configs` is an array of
   * createKVCache options, one per layer (plain or windowed, any dtype).
   * JS reads every layer's options (JS's rules); then ONE C entry checks
   * every layer and makes them all or none (src/cache/kv_group.c).
   */
  function createKVCacheGroup(configs) {
    const fn = 'createKVCacheGroup';
    const ck = new Checks(fn);
    const list = readLayerConfigs(ck, configs);  // the snapshot
    core.checkAlive(ck);
    const geos = (list ?? []).map((config, i) => {
      ck.prefix = `layers[${i}]: `;
      return readCacheConfig(ck, config);
    });
    ck.done();  // (JS's rules of every layer first)
    // the geometries as JS numbers (GEOMETRY_FIELDS each), then room for the caches
    const n = geos.length, F = GEOMETRY_FIELDS, p = core.malloc(n * (F * 8 + 4), fn, 'a temporary copy of the layers\' options');
    try {
      geos.forEach((geo, i) => core.putGeometry(geo, p + i * F * 8));
      const outAt = p + n * F * 8;
      core.checkEntry(core.M._sdpa_wasm_kv_group_create(core.ctx, p, n, outAt), fn);
      const u32 = core.views().u32;
      return new KVCacheGroup(core, geos.map((geo, i) => {
        const ptr = u32[(outAt >>> 2) + i];
        return adoptCache(core, ptr, { ...geo, float16NewestPage: core.M._sdpa_kv_cache_float16_newest_page(ptr) !== 0 });
      }));
    } finally {
      core.free(p);
    }
  }

  const adopt = (ptr, geo) => adoptCache(core, ptr, geo);

  /**
   * A new cache of this instance from saved KV state (cache.save(),
   * docs/FORMAT.md): `source` a Uint8Array, ArrayBuffer, Blob, Response,
   * ReadableStream or (async) iterable of chunks. Resolves to { cache, meta }.
   */
  function loadKVCache(source, opts) {
    return loadState(core, 'sdpa.loadKVCache', source, opts, CacheSink, adopt);
  }

  /** A new KVCacheGroup from group.save()'s bytes: resolves to { group, meta }. */
  function loadKVCacheGroup(source, opts) {
    return loadState(core, 'sdpa.loadKVCacheGroup', source, opts, GroupSink, adopt)
      .then(({ caches, meta }) => ({ group: new KVCacheGroup(core, caches), meta }));
  }
  return { createKVCache, createKVCacheGroup, kvCacheSize, loadKVCache, loadKVCacheGroup };
}

/** The instance's heap functions: allocTensor, memory, reserve. */
function memoryEntries(core) {
  const M = core.M;
  function allocTensor(dtype, dims) {
    const fn = 'allocTensor';
    const ck = new Checks(fn);
    const arr = readAllocArgs(ck, dtype, dims);  // the snapshot
    core.checkAlive(ck);
    ck.done();
    return core.allocTensor(fn, dtype, arr);
  }

  /** The page pool of this instance's caches (sdpa_memory_stats), and the wasm heap's size. */
  function memory() {
    const ck = new Checks('sdpa.memory');
    core.checkAlive(ck);
    ck.done();
    const at = core.slot('stats');
    M._sdpa_ctx_memory(core.ctx, at);
    const f = LAYOUT.sdpa_memory_stats, i64 = (offset) => core.int64At(at + offset);
    return {
      pageRows: core.views().i32[(at + f.page_rows) >>> 2],
      bytesReserved: i64(f.bytes_reserved),
      bytesInUse: i64(f.bytes_in_use),
      bytesFree: i64(f.bytes_free),
      pagesInUse: i64(f.pages_in_use),
      pagesFree: i64(f.pages_free),
      heapBytes: core.heapBytes(),
    };
  }

  /** Grows the page pool so that writes into the caches that exist now, taking at most `bytes` of pages, allocate nothing. */
  function reserve(bytes) {
    const fn = 'sdpa.reserve';
    const ck = new Checks(fn);
    checkReserveBytes(ck, bytes, formatBytes);
    core.checkAlive(ck);
    ck.done();
    core.checkEntry(M._sdpa_wasm_ctx_reserve_pages(core.ctx, bytes), fn);
  }
  return { allocTensor, memory, reserve };
}

/** sdpa.dispose: frees the saves, caches and heap tensors, then the context and its threads. */
function disposer(core) {
  const M = core.M;
  return function dispose() {
    if (core.disposed) return;
    for (const p of [...core.prepared]) p.dispose();
    for (const s of [...core.states]) s.free();
    for (const c of [...core.caches]) c.dispose();
    for (const t of [...core.tensors]) t.dispose();
    core.disposed = true;
    M._sdpa_ctx_free(core.ctx);
    M._free(core.scratch);
    if (core.manyBlock) M._free(core.manyBlock);
    core.manyBlock = 0;
    if (core.idsAt) M._free(core.idsAt);
    core.idsAt = 0;
    core.idsCapacity = 0;
    core.ctx = 0;
    core.scratch = 0;
    if (M.PThread) M.PThread.terminateAllThreads();
  };
}
