// sdpa-wasm: scaled dot-product attention with a KV cache, as WebAssembly
// (SIMD128 + pthreads). The behaviour is CONTRACT.md; the API is issue 3.
//
//   import { createSdpa, SdpaError } from 'sdpa-wasm';
//   const sdpa = await createSdpa({ threads: 'auto' });
//   const out = sdpa.customSdpa(q, k, v, { startPos, isCausal });
//   sdpa.dispose();

import { SdpaError, STATUS_CODES, E_LOAD } from './errors.js';
import {
  Checks, readOptions, checkStartPos, checkAttention, checkSize, describeValue, CUSTOM_OPTIONS,
} from './validate.js';
import { chooseBuild, loadBuild, unrefWorkers, availableCores, BUILD_NAMES, MAX_AUTO_THREADS, MAX_THREADS } from './loader.js';
import { Core, SLOT, formatBytes } from './runtime.js';
import { KVCache } from './kv-cache.js';
import { HeapTensor, isHeapTensor } from './heap.js';
import { makeTorchEntry } from './torch.js';
import { VERSION } from './version.js';

export { SdpaError, STATUS_CODES, E_LOAD, KVCache, HeapTensor, isHeapTensor, VERSION };

/** Key of the (unstable, test-only) internals: sdpa[INTERNALS] = { M, core }. */
export const INTERNALS = Symbol.for('sdpa-wasm.internals');

/** The largest single allocation wasm32 malloc can make (< 2 GiB). A little
 * below C's SDPA_MAX_CACHE_BYTES (2^31 - 1), which leaves no room for malloc's
 * own header: JS refuses first, with the clearer message. */
const MAX_ALLOC = 0x7fff0000;

/**
 * Loads the wasm build and makes an instance.
 * @param {{ threads?: number | 'auto', build?: 'simd-threads' | 'simd' }} [options]
 */
export async function createSdpa(options) {
  const ck = new Checks('createSdpa');
  const o = readOptions(ck, options, ['threads', 'build']);
  let threads = o.threads === undefined || o.threads === null ? 'auto' : o.threads;
  if (threads !== 'auto') {
    if (typeof threads !== 'number') ck.add('E_ARG', `threads must be a positive integer or 'auto', got ${describeValue(threads)}`);
    else if (!Number.isSafeInteger(threads) || threads < 1) ck.add('E_ARG', `threads is ${threads}; expected a positive integer or 'auto'`);
  }
  const forced = o.build === undefined || o.build === null ? undefined : o.build;
  if (forced !== undefined && !BUILD_NAMES.includes(forced)) {
    ck.add('E_ARG', `build must be one of ${BUILD_NAMES.map((b) => `'${b}'`).join(', ')}, got ${describeValue(forced)}`);
  }
  if (forced === 'simd' && typeof threads === 'number' && threads > 1) {
    ck.add('E_ARG', `threads is ${threads} but build 'simd' is single-threaded; use build 'simd-threads' or threads: 1`);
  }
  ck.done();

  const { build, reason } = chooseBuild(forced);
  let n = 1;
  if (build === 'simd-threads') {
    n = threads === 'auto' ? Math.min(await availableCores(), MAX_AUTO_THREADS) : Math.min(threads, MAX_THREADS);
  }
  const { M } = await loadBuild({ build, threads: n, reason });
  const core = new Core(M);
  try {
    core.scratch = core.malloc(256, 'createSdpa', 'the argument block');
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
    if (M.PThread) M.PThread.terminateAllThreads();
    throw e;
  }
  unrefWorkers(M);
  const info = Object.freeze({ build, threads: M._sdpa_ctx_threads(core.ctx), version: VERSION });
  return makeInstance(core, info);
}

function makeInstance(core, info) {
  const M = core.M;
  core.checkAlive = (ck) => {
    if (core.disposed) ck.add('E_DISPOSED', 'this sdpa instance was disposed');
  };

  /** customSdpa, with `fn` naming the public function in messages. */
  function runCustom(fn, query, key, value, opts) {
    const ck = new Checks(fn);
    const o = readOptions(ck, opts, CUSTOM_OPTIONS);
    const sp = checkStartPos(ck, o.startPos, 'startPos');
    const P = checkAttention(ck, core, { q: query, k: key, v: value, names: { q: 'query', k: 'key', v: 'value' }, o, cache: null, startPos: sp });
    core.checkAlive(ck);
    ck.done();
    return core.runAttention(fn, P, sp, [['q', P.Q], ['k', P.K], ['v', P.V]], (a) =>
      M._sdpa_custom(core.ctx, a.q, a.k, a.v, a.mask, a.opts, a.out));
  }

  function customSdpa(query, key, value, opts) {
    return runCustom('customSdpa', query, key, value, opts);
  }

  function createKVCache(config) {
    const fn = 'createKVCache';
    const ck = new Checks(fn);
    if (config === undefined || config === null) {
      ck.add('E_ARG', 'the options { maxSeqLen, numKvHeads, headDim } are missing');
    }
    const o = readOptions(ck, config, ['batch', 'maxSeqLen', 'numKvHeads', 'headDim', 'dtype']);
    const batch = checkSize(ck, o.batch, 'batch', { required: false, dflt: 1 });
    const maxSeqLen = checkSize(ck, o.maxSeqLen, 'maxSeqLen', { required: config !== undefined && config !== null });
    const numKvHeads = checkSize(ck, o.numKvHeads, 'numKvHeads', { zeroCode: 'E_HEADS', required: config !== undefined && config !== null });
    const headDim = checkSize(ck, o.headDim, 'headDim', { required: config !== undefined && config !== null });
    const dtype = o.dtype === undefined || o.dtype === null ? 'float32' : o.dtype;
    if (typeof dtype !== 'string') ck.add('E_ARG', `dtype must be a string, got ${describeValue(dtype)}`);
    else if (dtype !== 'float32') ck.add('E_DTYPE', `dtype '${dtype}' is not supported; caches are 'float32'`);
    if (batch && maxSeqLen && numKvHeads && headDim) {
      const bytes = batch * maxSeqLen * numKvHeads * headDim * 4;
      if (bytes > MAX_ALLOC) {
        ck.add('E_OOM', `a cache of [${batch}, ${maxSeqLen}, ${numKvHeads}, ${headDim}] needs 2 × ${formatBytes(bytes)}, more than the wasm heap can hold (one allocation < 2 GiB, 4 GiB in all)`);
      }
    }
    core.checkAlive(ck);
    ck.done();
    const outAt = core.slot('ptr');
    core.views().u32[outAt >>> 2] = 0;
    const st = M._sdpa_kv_cache_create(core.ctx, batch, maxSeqLen, numKvHeads, headDim, 1, outAt);
    core.check(st, fn);
    const ptr = core.views().u32[outAt >>> 2];
    const cache = new KVCache(core, ptr, { batch, maxSeqLen, numKvHeads, headDim });
    core.caches.add(cache);
    return cache;
  }

  function allocTensor(dtype, dims) {
    const fn = 'allocTensor';
    const ck = new Checks(fn);
    if (dtype === undefined || dtype === null) ck.add('E_ARG', `dtype is missing; expected 'float32' or 'bool'`);
    else if (typeof dtype !== 'string') ck.add('E_ARG', `dtype must be a string, got ${describeValue(dtype)}`);
    else if (dtype !== 'float32' && dtype !== 'bool') ck.add('E_DTYPE', `dtype '${dtype}' is not supported; expected 'float32' or 'bool'`);
    let arr = null;
    if (dims === undefined || dims === null) ck.add('E_ARG', 'dims is missing; expected an array of positive integers');
    else if (!Array.isArray(dims) && !ArrayBuffer.isView(dims)) ck.add('E_ARG', `dims must be an array of integers, got ${describeValue(dims)}`);
    else {
      arr = Array.from(dims);
      const bad = arr.findIndex((x) => typeof x !== 'number');
      if (bad >= 0) { ck.add('E_ARG', `dims[${bad}] must be a number, got ${describeValue(arr[bad])}`); arr = null; }
      else if (arr.length === 0) { ck.add('E_RANK', 'dims is empty; expected rank 1 or more'); arr = null; }
      else {
        arr.forEach((x, i) => {
          if (!(Number.isSafeInteger(x) && x > 0)) ck.add('E_DIMS', `dims[${i}] is ${x}; every dim must be a positive integer`);
        });
      }
    }
    core.checkAlive(ck);
    ck.done();
    return core.allocTensor(fn, dtype, arr);
  }

  const torch = makeTorchEntry({ rt: core, checkAlive: (ck) => core.checkAlive(ck), runCustom });

  function dispose() {
    if (core.disposed) return;
    for (const c of [...core.caches]) c.dispose();
    for (const t of [...core.tensors]) t.dispose();
    core.disposed = true;
    M._sdpa_ctx_free(core.ctx);
    M._free(core.scratch);
    core.ctx = 0;
    core.scratch = 0;
    if (M.PThread) M.PThread.terminateAllThreads();
  }

  const sdpa = {
    info,
    customSdpa,
    createKVCache,
    allocTensor,
    scaledDotProductAttention: torch.scaledDotProductAttention,
    planAttention: torch.planAttention,
    dispose,
    get disposed() { return core.disposed; },
  };
  Object.defineProperty(sdpa, INTERNALS, { value: { M, core }, enumerable: false });
  return Object.freeze(sdpa);
}
