// kv-cache.js: the paged KV cache (CONTRACT.md section 3).
//
// Storage lives in the C core: pages of PAGE_ROWS rows (per batch row and KV
// head) drawn from the instance's page pool as rows are written; maxSeqLen is
// a limit, not an allocation. `length` is the number of rows written; writes
// may not leave a hole. fork() shares every page copy-on-write; truncate()
// gives whole pages back. update / attend / step follow the snapshot rule
// (snapshot.js, then rules.js): read every argument once, check liveness, validate, and only
// then touch wasm memory, so a rejected call leaves the cache untouched. A
// view of the cache's storage is never a valid argument (checkLive).
//
// A windowed cache (createKVCache({ window, sinkTokens })) keeps the first
// sinkTokens rows and a ring of pages for the last window + 64 rows or more:
// positions keep counting, memory stays flat. Its extra rules (evicted rows,
// causal only) are C's, checked at the call's entry (src/wasm/api.h).

import {
  Checks, checkStartPos, checkBool, readAttentionOptions, checkDimsFit, checkOutApart, STEP_OPTIONS,
  checkWriteStart, checkImpliedStart, checkCacheRows, checkCacheTruncate, ATTEND_OPTIONS, checkKeepRows, UPDATE_OPTIONS,
} from './rules.js';
import { readOptions, inspectTensor, checkLive, checkLiveOptions } from './snapshot.js';
import { SLOT } from './runtime.js';
import { RECORD_PARTS } from './abi.js';
import { prod } from './shape.js';
import { typedArrayTag, isArray } from './intrinsics.js';
import { saveCache, saveCacheChunks, saveCacheStream, releaseSaves } from './kv-state.js';




/** step(q, k, v, opts): an options object in startPos's place (not a number) is the options. */
const isOptionsLike = (x) => x !== null && typeof x === 'object' && !isArray(x) && typedArrayTag(x) === undefined;

/** The group's access to a cache's checks (filled by KVCache's static block; not exported from the package). */
export const cacheHooks = {};

/** A record part's item type (js/abi.js RECORD_PARTS): its typed array and DataView reader. */
const ITEM_TYPES = Object.freeze({
  int8: [Int8Array, 'getInt8'], uint8: [Uint8Array, 'getUint8'], uint16: [Uint16Array, 'getUint16'], float32: [Float32Array, 'getFloat32'],
});

/**
 * readRaw's parts from `rows` records (include/sdpa.h, sdpa_kv_cache_read_records)
 * of one dtype, `rec` bytes each, as C lays them out (RECORD_PARTS, from
 * src/cache/kv_record.c): { data, dims, dtype, ...the other parts }, each part
 * one typed array over all rows. A record of one part is that part, uncopied.
 */
function splitRecords(u8, dtype, rows, D, dims, rec) {
  const parts = RECORD_PARTS[dtype], result = { data: null, dims, dtype };
  if (parts.length === 1) {
    result[parts[0].name] = new ITEM_TYPES[parts[0].type][0](u8.buffer);
    return result;
  }
  const view = new DataView(u8.buffer);
  let offset = 0;  // of the part within a record
  for (const { name, type, bytes, span } of parts) {
    const [Items, get] = ITEM_TYPES[type], n = span ? Math.ceil(D / span) : 1, items = new Items(rows * n);
    for (let r = 0, at = offset; r < rows; r++, at += rec) {
      if (bytes === 1) items.set(new Items(u8.buffer, at, n), r * n);
      else for (let i = 0; i < n; i++) items[r * n + i] = view[get](at + i * bytes, true);
    }
    result[name] = items;
    offset += n * bytes;
  }
  return result;
}

export class KVCache {
  #core;
  #ptr;
  #geo;
  #disposed = false;
  #callAttend;
  #callStep;

  /** Made by sdpa.createKVCache and cache.fork. */
  constructor(core, ptr, geo) {
    this.#core = core;
    this.#ptr = ptr;
    this.#geo = Object.freeze({ ...geo });
    // The entries of attend and step, bound once (runAttention passes the mask slot, or 0).
    this.#callAttend = (mask) => {
      const s = core.scratch;
      return core.M._sdpa_wasm_kv_cache_attend(core.ctx, ptr, s + SLOT.q, mask, s + SLOT.opts, s + SLOT.out);
    };
    this.#callStep = (mask) => {
      const s = core.scratch;
      return core.M._sdpa_wasm_kv_cache_step(core.ctx, ptr, s + SLOT.q, s + SLOT.k, s + SLOT.v, mask, s + SLOT.opts, s + SLOT.out);
    };
  }

  get batch() { return this.#geo.batch; }
  get maxSeqLen() { return this.#geo.maxSeqLen; }
  get numKvHeads() { return this.#geo.numKvHeads; }
  get headDim() { return this.#geo.headDim; }
  /**
   * How rows are stored: 'float32', 'float16', 'int8' or 'int4' (writes
   * convert; reads and attention see the stored values); null when K and V
   * have dtypes of their own (keyDtype, valueDtype).
   */
  get dtype() { return this.#geo.dtype; }
  /** How K rows are stored. */
  get keyDtype() { return this.#geo.keyDtype; }
  /** How V rows are stored. */
  get valueDtype() { return this.#geo.valueDtype; }
  /**
   * Whether the page being filled holds its int8 / int4 rows as float16,
   * encoded once when it fills (createKVCache's float16NewestPage; false when
   * no block is int8 or int4).
   */
  get float16NewestPage() { return this.#geo.float16NewestPage; }
  /** A windowed cache's window (0: a plain cache). */
  get window() { return this.#geo.window; }
  /** A windowed cache's sink rows, kept for good (0 for a plain cache). */
  get sinkTokens() { return this.#geo.sinkTokens; }
  /** The first row kept after the sink rows: rows sinkTokens .. windowStart-1 were evicted (0 for a plain cache and once disposed). */
  get windowStart() {
    return this.#alive() ? this.#core.M._sdpa_kv_cache_window_start(this.#ptr) : 0;
  }
  get disposed() { return this.#disposed; }

  /** Rows written: the highest written row + 1 (0 once disposed). */
  get length() {
    return this.#alive() ? this.#core.M._sdpa_kv_cache_length(this.#ptr) : 0;
  }

  /**
   * Bytes of storage this cache holds: its pages as the pool counts them (a
   * 64-byte header each; shared ones included) and its page table (C's count:
   * sdpa_kv_cache_bytes). 0 once disposed.
   */
  get bytes() {
    return this.#alive() ? this.#core.M._sdpa_kv_cache_bytes(this.#ptr) : 0;
  }

  #alive() { return !this.#disposed && !this.#core.disposed; }

  /** length, or Infinity once disposed (E_DISPOSED is what such a call reports, not a hole). */
  #writtenOrUnknown() { return this.#alive() ? this.length : Infinity; }

  #checkAlive(ck) {
    this.#core.checkAlive(ck);
    if (this.#disposed) ck.add('E_DISPOSED', 'this KV cache was disposed');
  }

  /**
   * Writes k, v [B, Snew, Hkv, D] at rows startPos .. startPos+Snew-1
   * (default startPos: length, i.e. append). opts: { rotary } (K
   * rows rotated at their positions before they are stored); update(k, v,
   * opts) appends.
   */
  update(k, v, startPos, opts) {
    const fn = 'KVCache.update';
    if (opts === undefined && isOptionsLike(startPos)) {
      opts = startPos;
      startPos = undefined;
    }
    const ck = new Checks(fn);
    // snapshot
    const K = inspectTensor(ck, 'key', k, 'input');
    const V = inspectTensor(ck, 'value', v, 'input');
    const o = readOptions(ck, opts, UPDATE_OPTIONS);
    // state, then the rules
    this.#checkAlive(ck);
    checkLive(ck, K);
    checkLive(ck, V);
    checkLiveOptions(ck, o);
    const sp = checkWriteStart(ck, startPos, this.#writtenOrUnknown());
    checkDimsFit(ck, K, this.#core);
    checkDimsFit(ck, V, this.#core);
    const rot = this.#rotary(ck, o.R);
    ck.done();
    const W = { K, V };
    const c = this.#core;
    c.warnStaleInputs(W.K, W.V, null);
    // Addresses inside wasm memory first, then temporaries (see Core.addressOf).
    let kp = c.addressOf(W.K), vp = c.addressOf(W.V), tk = 0, tv = 0;
    const temps = [];
    try {
      const ra = c.putRotary(fn, rot, c.slot('rotary'), temps);
      if (kp === -1) kp = tk = c.copyIn(W.K, fn);
      if (vp === -1) vp = tv = c.copyIn(W.V, fn);
      c.writeTensor(SLOT.k, kp, W.K.len, 'float32', W.K.dims);
      c.writeTensor(SLOT.v, vp, W.V.len, 'float32', W.V.dims);
      c.checkEntry(c.M._sdpa_wasm_kv_cache_update(c.ctx, this.#ptr, c.slot('k'), c.slot('v'), sp, ra), fn);
    } finally {
      c.free(tk); c.free(tv);
      for (const p of temps) c.free(p);
    }
  }

  /**
   * customSdpa(q, K, V, opts) over the cache (Skv = maxSeqLen; rows never
   * written are zeros). Default startPos: length - Sq (q is the last Sq rows written).
   */
  attend(q, opts) {
    const fn = 'KVCache.attend';
    const ck = new Checks(fn);
    // snapshot
    const Q = inspectTensor(ck, 'query', q, 'input');
    const o = readOptions(ck, opts, ATTEND_OPTIONS);
    // state, then the rules (the same as an attendMany item's)
    const { P, sp } = this.#checkAttendItem(ck, Q, o);
    ck.done();
    return this.#core.runAttention(fn, P, sp, null, null, this.#callAttend);
  }

  /**
   * update(k, v, startPos) then attend(q, { startPos, ...opts }); checked as
   * one call. step(q, k, v, opts) or startPos null/undefined: append at length.
   */
  step(q, k, v, startPos, opts) {
    const fn = 'KVCache.step';
    if (opts === undefined && isOptionsLike(startPos)) {
      opts = startPos;
      startPos = undefined;
    }
    const ck = new Checks(fn);
    // snapshot
    const Q = inspectTensor(ck, 'query', q, 'input');
    const K = inspectTensor(ck, 'key', k, 'input');
    const V = inspectTensor(ck, 'value', v, 'input');
    const o = readOptions(ck, opts, STEP_OPTIONS, STEP_MISPLACED);
    // state, then the rules (the same as a stepMany item's)
    const { P, sp, K: Kw, V: Vw } = this.#checkStepItem(ck, Q, K, V, startPos, o);
    ck.done();
    return this.#core.runAttention(fn, P, sp, Kw, Vw, this.#callStep);
  }

  /**
   * read / readRaw: JS's rules, then C's entry (sdpa_wasm_kv_cache_read: the
   * rows' rules, then a block C allocates, `raw` 0: float32 keys then values,
   * 1: key records then value records). Returns [start, length, block address]
   * (the caller frees the block).
   */
  #readRows(fn, start, length, raw) {
    const ck = new Checks(fn);
    const [s, n] = checkCacheRows(ck, start, length);
    this.#checkAlive(ck);
    ck.done();
    const c = this.#core, at = c.slot('ptr');
    c.views().u32[at >>> 2] = 0;
    c.checkEntry(c.M._sdpa_wasm_kv_cache_read(c.ctx, this.#ptr, s, n, raw, at), fn);
    return [s, n, c.views().u32[at >>> 2]];
  }

  /** Copies of rows start .. start+length-1: { k, v }, each [B, length, Hkv, D] float32 (unwritten rows: zeros). */
  read(start, length) {
    const fn = 'KVCache.read';
    const [, n, p] = this.#readRows(fn, start, length, 0);
    const c = this.#core;
    const { batch, numKvHeads, headDim } = this.#geo;
    const dims = [batch, n, numKvHeads, headDim];
    const count = prod(dims);
    try {
      const f32 = c.views().f32, pk = p >>> 2, pv = pk + count;
      return {
        k: { data: f32.slice(pk, pk + count), dims: dims.slice(), dtype: 'float32' },
        v: { data: f32.slice(pv, pv + count), dims: dims.slice(), dtype: 'float32' },
      };
    } finally {
      c.free(p);
    }
  }

  /**
   * The stored form of rows start .. start+length-1: { k, v }, each
   * { data, dims [B, length, Hkv, D], dtype } in the K or V dtype:
   *   float32  data Float32Array;  float16  data Uint16Array (binary16 bits)
   *   int8     data Int8Array, scales Float32Array and zeroPoints Int8Array [B, length, Hkv]
   *   int4     data Uint8Array of ceil(D / 2) bytes per row (element 2i in the
   *            low nibble of byte i), scales and offsets Uint16Array (float16
   *            bits) [B, length, Hkv, ceil(D / 64)]: element = level * scale + offset
   * C writes the rows' records (sdpa_kv_cache_read_records); this splits them.
   */
  readRaw(start, length) {
    const fn = 'KVCache.readRaw';
    const [, n, p] = this.#readRows(fn, start, length, 1);
    const c = this.#core;
    const { batch, numKvHeads, headDim: D } = this.#geo;
    const dims = [batch, n, numKvHeads, D];
    const rows = batch * n * numKvHeads;
    const result = {};
    try {
      let at = p;
      for (const [which, name, dtype] of [[0, 'k', this.#geo.keyDtype], [1, 'v', this.#geo.valueDtype]]) {
        const rec = c.M._sdpa_kv_cache_record_bytes(this.#ptr, which), bytes = rows * rec;
        // (a typed array's slice copies into a fresh, unshared buffer)
        const u8 = c.views().u8.slice(at, at + bytes);
        at += bytes;
        result[name] = splitRecords(u8, dtype, rows, D, dims.slice(), rec);
      }
      return result;
    } finally {
      c.free(p);
    }
  }

  /**
   * Keeps rows 0 .. length-1 (rollback): whole pages past them go back to the
   * pool; the rows past `length` read as zeros again. O(pages).
   */
  truncate(length) {
    const fn = 'KVCache.truncate';
    const ck = new Checks(fn);
    const n = this.#checkTruncate(ck, length);
    ck.done();
    this.#truncateChecked(fn, n);
  }

  /** truncate's JS rules into `ck`; returns the length, or null when invalid. */
  #checkTruncate(ck, length) {
    this.#checkAlive(ck);
    return checkCacheTruncate(ck, length);
  }

  /**
   * Keeps the accepted rows of a verified draft: row
   * start + rows[k] becomes row start + k (as stored, bit for bit), then the
   * cache ends at start + rows.length; the rows not kept leave nothing behind.
   */
  keepRows(start, rows) {
    const fn = 'KVCache.keepRows';
    const ck = new Checks(fn);
    this.#checkAlive(ck);
    const list = checkKeepRows(ck, start, rows);
    ck.done();
    // the list into scratch, then C's entry checks every rule (start, the list's order, the rows written)
    const c = this.#core, n = list.length;
    const p = n ? c.malloc(n * Int32Array.BYTES_PER_ELEMENT, fn, 'a temporary copy of rows') : 0;
    try {
      if (n) c.views().i32.set(list, p >>> 2);
      c.checkEntry(c.M._sdpa_wasm_kv_cache_keep_rows(c.ctx, this.#ptr, start, p, n), fn);
    } finally {
      c.free(p);
    }
  }

  #truncateChecked(fn, n) {
    const c = this.#core;
    c.checkEntry(c.M._sdpa_wasm_kv_cache_truncate(c.ctx, this.#ptr, n, 1), fn);
  }

  static {
    // For KVCacheGroup (kv-cache-group.js): check every layer, then truncate them all.
    cacheHooks.checkTruncate = (cache, ck, length) => cache.#checkTruncate(ck, length);
    cacheHooks.checkAlive = (cache, ck) => cache.#checkAlive(ck);
    cacheHooks.adoptFork = (cache, ptr) => cache.#adoptFork(ptr);
    cacheHooks.ptr = (cache) => cache.#ptr;
    // For kv-state.js (save): what a save reads of a cache.
    cacheHooks.state = (cache) => {
      const alive = cache.#alive();
      return { core: cache.#core, ptr: cache.#ptr, geo: cache.#geo, alive, length: alive ? cache.length : 0 };
    };

    // For attendMany (many.js): is this a cache of `core`; one item's attend rules (as attend's, after the item's snapshot).
    cacheHooks.isCacheOf = (x, core) => #core in x && x.#core === core;
    cacheHooks.checkAttendItem = (cache, ck, Q, o) => cache.#checkAttendItem(ck, Q, o);
    cacheHooks.checkStepItem = (cache, ck, Q, K, V, startPos, o) => cache.#checkStepItem(ck, Q, K, V, startPos, o);
  }

  /** step's state and rules for a snapshot (Q, K, V, startPos, o); returns { P, sp, ptr, K, V }. */
  #checkStepItem(ck, Q, K, V, startPos, o) {
    this.#checkAlive(ck);
    checkLive(ck, Q);
    checkLive(ck, K);
    checkLive(ck, V);
    checkLiveOptions(ck, o);
    const sp = checkWriteStart(ck, startPos, this.#writtenOrUnknown());
    const P = this.#plan(ck, Q, o);
    checkDimsFit(ck, K, this.#core);
    checkDimsFit(ck, V, this.#core);
    checkOutApart(ck, this.#core, P.O, [P.Q, P.M, P.S, P.T, P.RC, P.RS, K, V]);
    return { P, sp, ptr: this.#ptr, K, V };
  }

  /** attend's state and rules for a snapshot (Q, o); returns { P, sp, ptr }. */
  #checkAttendItem(ck, Q, o) {
    this.#checkAlive(ck);
    checkLive(ck, Q);
    checkLiveOptions(ck, o);
    let sp;
    if (o.startPos === undefined || o.startPos === null) sp = checkImpliedStart(ck, Q, o.M !== null, this.#alive() ? this.length : -1);
    else sp = checkStartPos(ck, o.startPos, 'startPos');
    const P = this.#plan(ck, Q, o);
    checkOutApart(ck, this.#core, P.O, [P.Q, P.M, P.S, P.T, P.RC, P.RS]);
    return { P, sp, ptr: this.#ptr };
  }

  /**
   * An attend's or a step's plan: its tensors and the option values C is
   * given (readAttentionOptions: their JS-only rules; attention over a cache
   * is causal by default), dims C cannot be given and an array to be copied
   * of another length than its dims need (checkDimsFit), rotary's
   * tables as P.RC, P.RS (out's rule, the rules between items) and its block
   * as P.rot (putRotary).
   */
  #plan(ck, Q, o) {
    const { isCausal, scale, window, softcap } = readAttentionOptions(ck, o, true);
    for (const d of [Q, o.M, o.S, o.T, o.O]) checkDimsFit(ck, d, this.#core);
    return {
      Q, M: o.M, O: o.O, S: o.S, T: o.T, isCausal, scale, window, softcap,
      RC: o.R === null ? null : o.R.C, RS: o.R === null ? null : o.R.S, rot: this.#rotary(ck, o.R),
    };
  }

  /**
   * rotary's JS-only rules (interleaved's JS type, its tables' dims C cannot
   * be given); returns its block's contents { C, S, interleaved, positions }
   * for putRotary, or null without rotary. Its other rules (the tables'
   * shapes, the positions' entries and count) are C's, at the entry.
   */
  #rotary(ck, R) {
    if (R === null) return null;
    const interleaved = checkBool(ck, R.interleaved, 'rotary.interleaved');
    checkDimsFit(ck, R.C, this.#core);
    checkDimsFit(ck, R.S, this.#core);
    return { C: R.C, S: R.S, interleaved, positions: R.positions };
  }

  /**
   * The rows start .. start+length-1 (default: all rows written) as saved KV
   * state (docs/FORMAT.md): a Uint8Array that sdpa.loadKVCache turns back
   * into a cache, in any instance and build; `meta` (a JSON value) goes with it.
   */
  save(opts) { return saveCache(this, cacheHooks, opts); }

  /** save() as an iterator of Uint8Array chunks of `chunkBytes` (default 4 MiB; the last shorter), of a snapshot taken now. */
  saveChunks(opts) { return saveCacheChunks(this, cacheHooks, opts); }

  /** save() as a ReadableStream of Uint8Array chunks (pulled one at a time). */
  saveStream(opts) { return saveCacheStream(this, cacheHooks, opts); }

  /**
   * A new cache of this instance sharing every page of this one,
   * copy-on-write: the first write into a shared page (by either) copies that
   * page only. O(pages); dispose each cache on its own.
   */
  fork() {
    const fn = 'KVCache.fork';
    const ck = new Checks(fn);
    this.#checkAlive(ck);
    ck.done();
    const c = this.#core;
    const outAt = c.slot('ptr');
    c.views().u32[outAt >>> 2] = 0;
    c.checkEntry(c.M._sdpa_wasm_kv_cache_fork(c.ctx, this.#ptr, outAt), fn);
    return this.#adoptFork(c.views().u32[outAt >>> 2]);
  }

  /** The KVCache of a fork C made of this cache (`ptr`). */
  #adoptFork(ptr) {
    const twin = new KVCache(this.#core, ptr, this.#geo);
    this.#core.caches.add(twin);
    return twin;
  }

  /** Frees the storage (pages still shared with a fork stay with it). A second call is a no-op. */
  dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    const c = this.#core;
    releaseSaves(this);            // an unfinished saveChunks / saveStream of this cache lets its snapshot go
    if (c.caches.delete(this)) c.M._sdpa_kv_cache_free(this.#ptr);
  }

  get [Symbol.toStringTag]() { return 'KVCache'; }
}

const STEP_MISPLACED = Object.freeze(['startPos']);
