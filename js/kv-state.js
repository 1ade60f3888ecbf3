// kv-state.js: saved KV state (docs/FORMAT.md): a cache, or a group of them,
// as portable bytes, and back.
//
// The bytes are made and read by the C core (src/cache/kv_state.c: header,
// row records, CRC-32C) in pieces through a staging buffer in wasm memory,
// so no form here holds more than the result (save), one chunk (saveChunks,
// saveStream) or the caller's chunk (load) in JS memory. A save begins with a
// copy-on-write snapshot of the cache (a fork inside C), so writes while a
// streaming save is read change nothing in it. A load parses the header in C
// before it makes anything, and on any failure (bad bytes, a source that
// throws or ends early, E_OOM, the instance disposed meanwhile) frees the
// cache it was making: every page taken goes back to the pool.
//
// A group's save is a small container (its own header and CRC) followed by
// one ordinary save per layer. Its header is C's too (kv_state.c,
// sdpa_kv_group_header_write / sdpa_kv_group_header_check: the format's one
// owner); here it is only streamed: GroupSink gathers the bytes C asks for,
// then feeds each layer's save to a C loader.

import { codeOfStatus, SdpaError } from './errors.js';
import {
  Checks, SAVE_OPTIONS, SAVE_CHUNK_OPTIONS, SAVE_STREAM_OPTIONS, LOAD_OPTIONS, checkChunkBytes, checkSaveRows,
  checkLoadMaxSeqLen,
} from './rules.js';
import { readOptions, describeValue, checkSignal, checkSaveInto, readSaveMeta } from './snapshot.js';
import { CACHE_DTYPES } from './abi.js';
import { formatBytes } from './runtime.js';
import { typedArrayTag, typedArrayBuffer, typedArrayByteOffset, typedArrayByteLength, typedArraySet, isView } from './intrinsics.js';

/** The staging buffer in wasm memory: pieces of at most this many bytes cross the boundary. */
const STAGING_BYTES = 4 << 20;
/** Cache dtype names by sdpa_dtype number. */
const CACHE_DTYPE_NAMES = Object.freeze(Object.fromEntries(Object.entries(CACHE_DTYPES).map(([name, id]) => [id, name])));
const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The chunked saves (saveChunks / saveStream) not finished yet, per cache they read:
 * cache.dispose() releases their snapshots (releaseSaves), and so does the garbage
 * collector when the iterator (or the stream holding it) is collected unfinished.
 */
const openSaves = new WeakMap();
const collected = typeof FinalizationRegistry === 'function' ? new FinalizationRegistry((entry) => entry.release(null)) : null;

/** cache.dispose(): every unfinished chunked save of the cache lets its snapshot go; their next() is E_DISPOSED. */
export function releaseSaves(cache) {
  const open = openSaves.get(cache);
  if (!open) return;
  openSaves.delete(cache);
  for (const entry of [...open]) entry.release('its cache was disposed');
}

/** Registers `obj` (with a free()) so that sdpa.dispose() frees it first; returns an unregister function. */
function track(core, obj) {
  core.states.add(obj);
  return () => core.states.delete(obj);
}

// ---------------------------------------------------------------------------
// Save

/**
 * One C saver (sdpa_kv_saver) of a cache and rows JS checked; C's entry
 * (sdpa_wasm_kv_save_begin) checks the rows' rules. Its failure goes into
 * `ck` when given (a group's layer: this.ptr stays 0), else is thrown.
 */
class Saver {
  constructor(core, fn, ptr, start, length, meta, ck = null) {
    this.core = core;
    this.fn = fn;
    const M = core.M;
    let mp = 0;
    try {
      if (meta && meta.length) {
        mp = core.malloc(meta.length, fn, 'a temporary copy of meta');
        typedArraySet(core.views().u8, meta, mp);
      }
      const outAt = core.slot('ptr');
      core.views().u32[outAt >>> 2] = 0;
      const st = M._sdpa_wasm_kv_save_begin(core.ctx, ptr, start, length, mp, meta ? meta.length : 0, outAt);
      this.ptr = 0;
      if (st !== 0 && ck !== null) {
        ck.add(codeOfStatus(st), core.lastError(), st);
        return;
      }
      core.checkEntry(st, fn);
      this.ptr = core.views().u32[outAt >>> 2];
    } finally {
      core.free(mp);
    }
    this.total = M._sdpa_kv_save_bytes(this.ptr);
    this.left = this.total;
    this.untrack = track(core, this);
  }

  /** Reads the next bytes into `out` from `at` (at most out.length - at); returns how many. */
  readInto(out, at, stagingPtr, stagingBytes) {
    const c = this.core;
    let done = 0;
    const want = Math.min(out.length - at, this.left);
    while (done < want) {
      const n = c.M._sdpa_kv_save_read(this.ptr, stagingPtr, Math.min(stagingBytes, want - done)) >>> 0;
      if (n === 0) break;
      typedArraySet(out, c.views().u8.subarray(stagingPtr, stagingPtr + n), at + done);
      done += n;
    }
    this.left -= done;
    return done;
  }

  free() {
    if (!this.ptr) return;
    if (!this.core.disposed) this.core.M._sdpa_kv_save_free(this.ptr);
    this.ptr = 0;
    this.untrack();
  }
}

/** Reads and checks save's options for one cache (rows, meta); throws the first broken rule. */
function readSave(fn, cache, hooks, opts, allowed) {
  const ck = new Checks(fn);
  const o = readOptions(ck, opts, allowed);
  const meta = readSaveMeta(ck, o.meta);
  const chunkBytes = allowed !== SAVE_OPTIONS ? checkChunkBytes(ck, o.chunkBytes) : 0;
  const signal = allowed === SAVE_STREAM_OPTIONS ? checkSignal(ck, o.signal) : null;
  const into = allowed === SAVE_OPTIONS ? checkSaveInto(ck, o.into) : null;
  hooks.checkAlive(cache, ck);
  const st = hooks.state(cache);
  const [start, length] = checkSaveRows(ck, st, o.start, o.length);
  ck.done();
  return { start, length, meta, chunkBytes, signal, into, ptr: st.ptr };
}

/** A staging buffer of min(bytes, STAGING_BYTES) in wasm memory (the caller frees it). */
function staging(core, fn, bytes) {
  const n = Math.max(16, Math.min(bytes, STAGING_BYTES));
  return { ptr: core.malloc(n, fn, 'a staging buffer'), bytes: n };
}

/**
 * The bytes of sources [Saver | Uint8Array] one after another, into one Uint8Array: a new
 * one, or the start of `into` (a buffer the caller reuses: its pages are already touched,
 * where the first writes into a fresh buffer of hundreds of MB cost page faults).
 */
function readAll(core, fn, parts, into = null) {
  const total = parts.reduce((a, p) => a + (p instanceof Saver ? p.total : p.length), 0);
  let out;
  if (into !== null) {
    const have = typedArrayByteLength(into);
    if (have < total) throw new SdpaError('E_ARG', `${fn}: into has ${have} bytes but the save takes ${total}; pass a Uint8Array of at least ${total} bytes`);
    out = new Uint8Array(typedArrayBuffer(into), typedArrayByteOffset(into), total);
  } else {
    if (total > 2 ** 32) throw new SdpaError('E_OOM', `${fn}: the save is ${formatBytes(total)}; one Uint8Array holds at most 4 GiB (use saveChunks or saveStream)`);
    try {
      out = new Uint8Array(total);
    } catch (e) {
      throw new SdpaError('E_OOM', `${fn}: cannot allocate ${formatBytes(total)} for the save (use saveChunks or saveStream)`, { cause: e });
    }
  }
  const st = staging(core, fn, total);
  try {
    let at = 0;
    for (const p of parts) {
      if (p instanceof Saver) at += p.readInto(out, at, st.ptr, st.bytes);
      else { typedArraySet(out, p, at); at += p.length; }
    }
  } finally {
    core.free(st.ptr);
  }
  return out;
}

/**
 * An iterator of chunks of `chunkBytes` (the last one shorter) over the
 * parts; frees its savers when done, on return(), or on an error.
 */
function chunkIterator(core, fn, parts, chunkBytes, owners) {
  const savers = parts.filter((p) => p instanceof Saver);
  let st = null, i = 0, off = 0, finished = false, gone = null;
  const total = parts.reduce((a, p) => a + (p instanceof Saver ? p.total : p.length), 0);
  let left = total;
  const finish = () => {
    if (finished) return;
    finished = true;
    if (st && !core.disposed) core.free(st.ptr);
    st = null;
    for (const s of savers) s.free();
  };
  // (entry and close must not reach `it`: the registry holds entry, and `it` must stay collectable)
  const token = {};
  const close = () => {
    finish();
    untrack();
    for (const o of owners) openSaves.get(o)?.delete(entry);
    collected?.unregister(token);
  };
  const entry = {
    free: finish,                                        // sdpa.dispose()
    // the cache disposed (reason), or `it` collected (null); after sdpa.dispose() (finished first) next() says that
    release(reason) { if (!finished) gone = reason; close(); },
  };
  const untrack = track(core, entry);
  for (const o of owners) {
    if (!openSaves.has(o)) openSaves.set(o, new Set());
    openSaves.get(o).add(entry);
  }
  const it = {
    /** Bytes of the whole save. */
    bytes: total,
    next() {
      if (gone !== null && left > 0) throw new SdpaError('E_DISPOSED', `${fn}: ${gone} during the save; its snapshot was released`);
      if (finished) {
        if (core.disposed && left > 0) throw new SdpaError('E_DISPOSED', `${fn}: this sdpa instance was disposed during the save`);
        return { done: true, value: undefined };
      }
      try {
        if (st === null) st = staging(core, fn, Math.min(chunkBytes, total));
        const out = new Uint8Array(Math.min(chunkBytes, left));
        let at = 0;
        while (at < out.length) {
          const p = parts[i];
          if (p instanceof Saver) {
            const n = p.readInto(out, at, st.ptr, st.bytes);
            at += n;
            if (p.left === 0) { p.free(); i++; }
          } else {
            const n = Math.min(p.length - off, out.length - at);
            typedArraySet(out, p.subarray(off, off + n), at);
            at += n; off += n;
            if (off === p.length) { off = 0; i++; }
          }
        }
        left -= out.length;
        if (left === 0) close();   // the last chunk: the snapshot goes now, not at the next call
        return { done: false, value: out };
      } catch (e) {
        close();
        throw e;
      }
    },
    return() { close(); return { done: true, value: undefined }; },
    [Symbol.iterator]() { return this; },
  };
  collected?.register(it, entry, token);
  return it;
}

/**
 * A ReadableStream of an iterator's chunks (pulled one at a time: at most one chunk queued).
 * `signal` aborted: the snapshot goes and the stream errors with the signal's reason.
 */
function streamOf(it, signal) {
  let onAbort = null;
  const unlisten = () => { if (onAbort) signal.removeEventListener('abort', onAbort); onAbort = null; };
  return new ReadableStream({
    start(controller) {
      if (!signal) return;
      onAbort = () => { unlisten(); it.return(); controller.error(signal.reason); };
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort);
    },
    pull(controller) {
      let r;
      try { r = it.next(); } catch (e) { unlisten(); throw e; }
      if (r.done) { unlisten(); controller.close(); }
      else controller.enqueue(r.value);
    },
    cancel() { unlisten(); it.return(); },
  }, { highWaterMark: 0 });
}

export function saveCache(cache, hooks, opts) {
  const fn = 'KVCache.save';
  const a = readSave(fn, cache, hooks, opts, SAVE_OPTIONS);
  const { core } = hooks.state(cache);
  const s = new Saver(core, fn, a.ptr, a.start, a.length, a.meta);
  try {
    return readAll(core, fn, [s], a.into);
  } finally {
    s.free();
  }
}

function cacheChunks(cache, hooks, opts, fn, allowed) {
  const a = readSave(fn, cache, hooks, opts, allowed);
  const { core } = hooks.state(cache);
  return { it: chunkIterator(core, fn, [new Saver(core, fn, a.ptr, a.start, a.length, a.meta)], a.chunkBytes, [cache]), signal: a.signal };
}

export function saveCacheChunks(cache, hooks, opts) {
  return cacheChunks(cache, hooks, opts, 'KVCache.saveChunks', SAVE_CHUNK_OPTIONS).it;
}

export function saveCacheStream(cache, hooks, opts) {
  const { it, signal } = cacheChunks(cache, hooks, opts, 'KVCache.saveStream', SAVE_STREAM_OPTIONS);
  return streamOf(it, signal);
}

// -- groups

/** The group container's header (docs/FORMAT.md section 5), written by C (sdpa_kv_group_header_write). */
function groupHeader(core, layers, meta) {
  const M = core.M, m = meta ? meta.length : 0;
  const n = M._sdpa_kv_group_header_write(layers, 0, m, 0, 0) >>> 0;
  const p = core.malloc(m + n, 'KVCacheGroup.save', 'a temporary copy of a header');
  try {
    if (m) typedArraySet(core.views().u8, meta, p);
    M._sdpa_kv_group_header_write(layers, p, m, p + m, n);
    return core.views().u8.slice(p + m, p + m + n);
  } finally {
    core.free(p);
  }
}

/**
 * C's check of the first `have` bytes of a group header (sdpa_kv_group_header_check; `ended`:
 * no more bytes come): { need, layers, metaAt, metaBytes }, or its E_FORMAT thrown.
 */
function checkGroupHeader(core, fn, head, have, ended) {
  const p = core.malloc(Math.max(have, 1), fn, 'a temporary copy of a header');
  try {
    typedArraySet(core.views().u8, head.subarray(0, have), p);
    const at = core.slot('stats');
    const U32 = Uint32Array.BYTES_PER_ELEMENT;  // (four uint32 out-arguments, one after another)
    core.checkEntry(core.M._sdpa_wasm_kv_group_header_check(core.ctx, p, have, ended ? 1 : 0, at, at + U32, at + 2 * U32, at + 3 * U32), fn);
    const u32 = core.views().u32, w = at >>> 2;
    return { need: u32[w], layers: u32[w + 1], metaAt: u32[w + 2], metaBytes: u32[w + 3] };
  } finally {
    core.free(p);
  }
}

/** Every layer's save rules (messages name the layer), then a Saver per layer (all or nothing). */
function groupSavers(fn, group, layers, hooks, opts, allowed) {
  const ck = new Checks(fn);
  const o = readOptions(ck, opts, allowed);
  const meta = readSaveMeta(ck, o.meta);
  const chunkBytes = allowed !== SAVE_OPTIONS ? checkChunkBytes(ck, o.chunkBytes) : 0;
  const signal = allowed === SAVE_STREAM_OPTIONS ? checkSignal(ck, o.signal) : null;
  const into = allowed === SAVE_OPTIONS ? checkSaveInto(ck, o.into) : null;
  const rows = layers.map((c, i) => {
    ck.prefix = `layer ${i}: `;
    hooks.checkAlive(c, ck);
    const st = hooks.state(c);
    const [start, length] = checkSaveRows(ck, st, o.start, o.length);
    return { start, length, ptr: st.ptr };
  });
  ck.prefix = '';
  ck.done();
  const core = hooks.state(layers[0]).core;
  const savers = [];
  try {
    // every layer asked (C's rules: the first in table order wins, ties to the lowest layer), then all or nothing
    for (let i = 0; i < layers.length; i++) {
      ck.prefix = `layer ${i}: `;
      savers.push(new Saver(core, fn, rows[i].ptr, rows[i].start, rows[i].length, null, ck));
    }
    ck.prefix = '';
    ck.done();
  } catch (e) {
    for (const s of savers) s.free();
    throw e;
  }
  return { core, parts: [groupHeader(core, layers.length, meta), ...savers], chunkBytes, signal, into };
}

export function saveGroup(group, layers, hooks, opts) {
  const fn = 'KVCacheGroup.save';
  const { core, parts, into } = groupSavers(fn, group, layers, hooks, opts, SAVE_OPTIONS);
  try {
    return readAll(core, fn, parts, into);
  } finally {
    for (const p of parts) if (p instanceof Saver) p.free();
  }
}

export function saveGroupChunks(group, layers, hooks, opts) {
  const fn = 'KVCacheGroup.saveChunks';
  const { core, parts, chunkBytes } = groupSavers(fn, group, layers, hooks, opts, SAVE_CHUNK_OPTIONS);
  return chunkIterator(core, fn, parts, chunkBytes, layers);
}

export function saveGroupStream(group, layers, hooks, opts) {
  const fn = 'KVCacheGroup.saveStream';
  const { core, parts, chunkBytes, signal } = groupSavers(fn, group, layers, hooks, opts, SAVE_STREAM_OPTIONS);
  return streamOf(chunkIterator(core, fn, parts, chunkBytes, layers), signal);
}

// ---------------------------------------------------------------------------
// Load

/** One C loader (sdpa_kv_loader). */
class Loader {
  constructor(core, fn, maxSeqLen) {
    this.core = core;
    this.fn = fn;
    const outAt = core.slot('ptr');
    core.views().u32[outAt >>> 2] = 0;
    core.checkEntry(core.M._sdpa_wasm_kv_load_begin(core.ctx, maxSeqLen, outAt), fn);
    this.ptr = core.views().u32[outAt >>> 2];
    this.untrack = track(core, this);
  }

  get done() { return this.core.M._sdpa_kv_load_done(this.ptr) !== 0; }

  /** Feeds bytes[at ..] through the staging buffer; returns how many it took (fewer: the save ended). */
  feed(bytes, at, st) {
    const c = this.core;
    let used = 0;
    while (at + used < bytes.length) {
      const n = Math.min(st.bytes, bytes.length - at - used);
      typedArraySet(c.views().u8, bytes.subarray(at + used, at + used + n), st.ptr);
      const cAt = c.slot('stats');
      c.views().u32[cAt >>> 2] = 0;
      c.checkEntry(c.M._sdpa_wasm_kv_load_feed(c.ctx, this.ptr, st.ptr, n, cAt), this.fn);
      const took = c.views().u32[cAt >>> 2];
      used += took;
      if (took < n) break;
    }
    return used;
  }

  /** { ptr, geo, meta } of the finished cache (the caller owns ptr from here). */
  finish() {
    const c = this.core, M = c.M;
    const mp = M._sdpa_kv_load_meta(this.ptr) >>> 0, mn = M._sdpa_kv_load_meta_bytes(this.ptr);
    const metaBytes = mn ? c.views().u8.slice(mp, mp + mn) : null;
    const outAt = c.slot('ptr');
    c.views().u32[outAt >>> 2] = 0;
    c.checkEntry(M._sdpa_wasm_kv_load_finish(c.ctx, this.ptr, outAt), this.fn);
    const ptr = c.views().u32[outAt >>> 2];
    const at = c.slot('stats');
    const I32 = Int32Array.BYTES_PER_ELEMENT;  // (four int32 out-arguments, one after another)
    M._sdpa_kv_cache_shape(ptr, at, at + I32, at + 2 * I32, at + 3 * I32);
    const i32 = c.views().i32, w = at >>> 2;
    const geo = {
      batch: i32[w], maxSeqLen: i32[w + 1], numKvHeads: i32[w + 2], headDim: i32[w + 3],
      keyDtype: CACHE_DTYPE_NAMES[M._sdpa_kv_cache_key_dtype(ptr)], valueDtype: CACHE_DTYPE_NAMES[M._sdpa_kv_cache_value_dtype(ptr)],
      window: M._sdpa_kv_cache_window(ptr), sinkTokens: M._sdpa_kv_cache_sink_tokens(ptr),
      float16NewestPage: M._sdpa_kv_cache_float16_newest_page(ptr) !== 0,
    };
    geo.dtype = geo.keyDtype === geo.valueDtype ? geo.keyDtype : null;  // as createKVCache's geometry
    return { ptr, geo, metaBytes };
  }

  free() {
    if (!this.ptr) return;
    if (!this.core.disposed) this.core.M._sdpa_kv_load_free(this.ptr);
    this.ptr = 0;
    this.untrack();
  }
}

/** A chunk as a Uint8Array over its bytes (intrinsic getters: a subclass cannot lie), or null. */
function bytesOf(x) {
  if (x instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && x instanceof SharedArrayBuffer)) return new Uint8Array(x);
  if (typedArrayTag(x) !== undefined) return new Uint8Array(typedArrayBuffer(x), typedArrayByteOffset(x), typedArrayByteLength(x));
  if (isView(x)) return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);  // a DataView
  return null;
}

const isBlob = (x) => typeof Blob !== 'undefined' && x instanceof Blob;
const isResponse = (x) => typeof Response !== 'undefined' && x instanceof Response;
const isStream = (x) => typeof ReadableStream !== 'undefined' && x instanceof ReadableStream;

/**
 * What a load reads: { bytes } for one buffer (read now, synchronously), or
 * { chunks: async iterator of byte chunks, what } for everything else; an
 * E_ARG into ck for anything else.
 */
function sourceOf(ck, source) {
  const b = bytesOf(source);
  if (b !== null) return { bytes: b };
  if (isResponse(source)) {
    if (!source.ok) return { error: `the Response has status ${source.status}${source.url ? ` (${source.url})` : ''}; expected a successful response holding a save` };
    return source.body ? { stream: source.body, what: 'the Response' } : { bytes: new Uint8Array(0) };
  }
  if (isBlob(source)) return { stream: source.stream(), what: 'the Blob' };
  if (isStream(source)) return { stream: source, what: 'the ReadableStream' };
  if (source !== null && typeof source === 'object' && typeof source[Symbol.asyncIterator] === 'function') return { iter: source[Symbol.asyncIterator](), what: 'the async iterable' };
  if (source !== null && typeof source === 'object' && typeof source[Symbol.iterator] === 'function') return { iter: source[Symbol.iterator](), what: 'the iterable' };
  ck.add('E_ARG', `source must be a Uint8Array, an ArrayBuffer, a Blob, a Response, a ReadableStream or an (async) iterable of Uint8Array chunks, got ${describeValue(source)}`);
  return null;
}

/** Pulls chunks from a source: async next() → Uint8Array | null (the end); cancel() on an early exit. */
function chunkReader(src) {
  if (src.stream) {
    const reader = src.stream.getReader();
    return {
      async next() { const r = await reader.read(); return r.done ? null : r.value; },
      cancel() { reader.cancel().catch(() => {}); },
    };
  }
  const it = src.iter;
  return {
    async next() { const r = await it.next(); return r.done ? null : r.value; },
    cancel() { if (typeof it.return === 'function') { try { Promise.resolve(it.return()).catch(() => {}); } catch { /* its own problem */ } } },
  };
}

/**
 * Consumes a single cache's or a group's save: push(bytes) takes chunks,
 * end() returns the result. Throws SdpaErrors; free() undoes everything.
 */
class CacheSink {
  constructor(core, fn, maxSeqLen, makeCache) {
    this.core = core; this.fn = fn; this.fed = 0;
    this.makeCache = makeCache;
    this.st = staging(core, fn, STAGING_BYTES);
    this.loader = new Loader(core, fn, maxSeqLen);
  }
  push(bytes) {
    const used = this.loader.feed(bytes, 0, this.st);
    this.fed += used;
    if (used < bytes.length) trailing(this.fn, bytes.length - used, this.fed);
  }
  end() {
    const { ptr, geo, metaBytes } = this.loader.finish();
    const cache = this.makeCache(ptr, geo);
    return { cache, meta: parseMeta(this.fn, metaBytes) };
  }
  free() {
    if (this.st) { if (!this.core.disposed) this.core.free(this.st.ptr); this.st = null; }
    this.loader.free();
  }
}

function trailing(fn, n, at) {
  throw new SdpaError('E_FORMAT', `${fn}: ${n} bytes follow the end of the saved cache (byte ${at}); expected none`);
}

function parseMeta(fn, bytes) {
  if (bytes === null) return undefined;
  try {
    return JSON.parse(utf8.decode(bytes));
  } catch (e) {
    throw new SdpaError('E_FORMAT', `${fn}: the saved meta is not UTF-8 JSON (${e.message})`, { cause: e });
  }
}

class GroupSink {
  constructor(core, fn, maxSeqLen, makeCache) {
    this.core = core; this.fn = fn; this.maxSeqLen = maxSeqLen; this.makeCache = makeCache;
    // the header's fixed part first (its size: C's answer for no bytes)
    this.head = new Uint8Array(checkGroupHeader(core, fn, new Uint8Array(0), 0, false).need);
    this.fixed = this.head.length;
    this.have = 0;
    this.layers = -1;
    this.meta = undefined;
    this.made = [];
    this.loader = null;
    this.st = staging(core, fn, STAGING_BYTES);
    this.fed = 0;
  }
  #fail(msg) { throw new SdpaError('E_FORMAT', `${this.fn}: ${msg}`); }
  /**
   * Header bytes first, checked by C as they arrive (the magic with every
   * chunk, the fixed part once whole, then meta and CRC once whole), then
   * each layer's save.
   */
  push(bytes) {
    let at = 0;
    while (at < bytes.length) {
      if (this.layers < 0) {
        const before = this.have;
        const n = Math.min(this.head.length - this.have, bytes.length - at);
        this.head.set(bytes.subarray(at, at + n), this.have);
        this.have += n; at += n; this.fed += n;
        if (before >= this.fixed && this.have < this.head.length) continue;  // (inside the meta: nothing new to check)
        const h = checkGroupHeader(this.core, this.fn, this.head, this.have, false);
        if (h.need > this.head.length) {  // the fixed part is whole: gather the meta and the CRC
          const grown = new Uint8Array(h.need);
          grown.set(this.head);
          this.head = grown;
          continue;
        }
        if (h.layers === 0) continue;
        this.meta = parseMeta(this.fn, h.metaBytes ? this.head.slice(h.metaAt, h.metaAt + h.metaBytes) : null);
        this.layers = h.layers;
        continue;
      }
      if (this.made.length === this.layers) trailing(this.fn, bytes.length - at, this.fed);
      if (this.loader === null) this.loader = new Loader(this.core, `${this.fn}: layer ${this.made.length}`, this.maxSeqLen);
      const used = this.loader.feed(bytes, at, this.st);  // (its errors name the group and the layer: the loader's fn)
      at += used; this.fed += used;
      if (this.loader.done) {
        const { ptr, geo } = this.loader.finish();
        this.made.push(this.makeCache(ptr, geo));
        this.loader.free();
        this.loader = null;
      }
    }
  }
  end() {
    if (this.layers < 0) checkGroupHeader(this.core, this.fn, this.head, this.have, true);  // throws where the data ended
    if (this.made.length < this.layers) {
      if (this.loader) this.loader.finish();  // throws where the data ended
      this.#fail(`the data ends after ${this.fed} bytes, after ${this.made.length} of ${this.layers} layers`);
    }
    const made = this.made;
    this.made = [];
    return { caches: made, meta: this.meta };
  }
  free() {
    if (this.st) { if (!this.core.disposed) this.core.free(this.st.ptr); this.st = null; }
    if (this.loader) this.loader.free();
    for (const c of this.made) c.dispose();
    this.made = [];
  }
}

/**
 * sdpa.loadKVCache / loadKVCacheGroup: reads the source into a sink. A
 * Uint8Array or ArrayBuffer is read before this returns (its bytes are the
 * snapshot); other sources chunk by chunk. Resolves to sink.end().
 */
export function loadState(core, fn, source, opts, Sink, makeCache) {
  const ck = new Checks(fn);
  const src = sourceOf(ck, source);
  const o = readOptions(ck, opts, LOAD_OPTIONS);
  const maxSeqLen = checkLoadMaxSeqLen(ck, o.maxSeqLen);
  const signal = checkSignal(ck, o.signal);
  core.checkAlive(ck);
  if (src && src.error) ck.add('E_FORMAT', src.error);
  try {
    ck.done();
  } catch (e) {
    return Promise.reject(e);
  }
  // aborted already: rejects with the signal's reason, as fetch does, before anything is read
  if (signal?.aborted) {
    if (src.stream || src.iter) chunkReader(src).cancel();
    return Promise.reject(signal.reason);
  }
  if (src.bytes) {
    // synchronously, now: the caller may change the bytes once this returns
    try {
      const sink = new Sink(core, fn, maxSeqLen, makeCache);
      try {
        sink.push(src.bytes);
        return Promise.resolve(sink.end());
      } finally {
        sink.free();
      }
    } catch (e) {
      return Promise.reject(e);
    }
  }
  return loadChunks(core, fn, src, maxSeqLen, Sink, makeCache, signal);
}

async function loadChunks(core, fn, src, maxSeqLen, Sink, makeCache, signal) {
  const sink = new Sink(core, fn, maxSeqLen, makeCache);
  const reader = chunkReader(src);
  let fed = 0, ended = false, onAbort = null;
  // an abort ends the wait for the next chunk (a stalled source never answers)
  const aborted = signal ? new Promise((_, reject) => { onAbort = () => reject(signal.reason); signal.addEventListener('abort', onAbort); }) : null;
  aborted?.catch(() => {});
  try {
    for (;;) {
      let chunk;
      try {
        chunk = await (aborted ? Promise.race([reader.next(), aborted]) : reader.next());
      } catch (e) {
        if (signal?.aborted) throw signal.reason;        // frees what was taken (finally), the source cancelled
        ended = true;
        throw new SdpaError('E_FORMAT', `${fn}: ${src.what} failed after ${fed} bytes: ${e && e.message ? e.message : String(e)}`, { cause: e });
      }
      if (signal?.aborted) throw signal.reason;
      if (core.disposed) throw new SdpaError('E_DISPOSED', `${fn}: this sdpa instance was disposed during the load`);
      if (chunk === null) { ended = true; break; }
      const bytes = bytesOf(chunk);
      if (bytes === null) throw new SdpaError('E_ARG', `${fn}: ${src.what} gave ${describeValue(chunk)} after ${fed} bytes; expected Uint8Array chunks`);
      sink.push(bytes);
      fed += bytes.length;
    }
    return sink.end();
  } finally {
    if (onAbort) signal.removeEventListener('abort', onAbort);
    if (!ended) reader.cancel();
    sink.free();
  }
}

export { CacheSink, GroupSink };
