// parity.test.js: the rules that live in two layers, JS (js/rules.js, snapshot.js;
// so that a JS call is rejected before anything is copied into wasm memory,
// with no caller code run after the snapshot, and E_DISPOSED in table order)
// and src/contract/check.c (so that a C caller and the fuzzer never reach the
// kernels with a bad problem). Two copies of a rule drift unless something
// holds them together: this file runs every rule case through the JS API and
// through the C API directly (the sdpa_tensor / sdpa_options structs written
// here, bypassing JS validation, as js/runtime.js writes them) and wants the
// same code and the same words, word for word, after each layer's name of the
// call (JS's `KVCache.step: `, C's own `sdpa_kv_cache_step: `).
//
// Not here either, because they live in C alone, checked once at the call's
// entry (src/wasm/api.h; test_validation.c holds those entries to the public
// ones word for word): the row rules of read / readRaw, truncate, keepRows
// and save, a cache geometry's rules with kvCacheSize's rows (createKVCache,
// createKVCacheGroup, kvCacheSize), and the relational rules of customSdpa
// and of KVCache.update / attend / step and their attendMany / stepMany
// items: ranks, dims, batch, heads, head dim, key length, the key bound,
// masks, treeMask, window, the rows written, capacity, a windowed cache's
// rules, rotary's tables and positions, a step's rows, a negative startPos.
// Here: what both layers check (the cases below run through the JS API, which
// reaches C's entry for the rules it leaves to C, and through C's public
// entries). Out's aliasing (JS sees foreign buffers, C has addresses); an
// input in cache storage (JS's snapshot rule, C's address rule); a bool
// tensor (E_DTYPE); read's negative start or length; dropoutP, scale and
// softcap (JS prints the JS number, C a float32); a missing rotary table;
// keepRows' list order; the rules between attendMany / stepMany items.
//
// Not here, because only JS can see them (docs/CONTRACT.md section 2, "The C
// layer ..."): JS types and missing arguments, unknown options, dims entries
// that are not int32 integers, a typed array's type (E_DTYPE, E_MASK_DTYPE
// for a Float64Array, ...), the dtype field, detached buffers, views of wasm
// memory outside a heap tensor, absent vs 0 (softcap: 0, window: 0), a scale
// that overflows float32, attend's implied startPos, E_DISPOSED, and E_OOM
// (JS refuses one allocation of 2 GiB first, with its own message).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa, SdpaError, STATUS_CODES, INTERNALS } from '../../js/index.js';
import { heapState, memoryOwner } from '../../js/heap.js';
import { typedArrayTag } from '../../js/intrinsics.js';
import { rng, randTensor, ruleTensors, filled } from './helpers.js';

let sdpa, M, core;
const C = {};        // the C caches: plain, win (pointers)
const J = {};        // the JS caches with the same contents
const { rand, Q, K, V, q, k, v } = ruleTensors(11);  // (validation.test.js's geometry)
const t = filled;
const b8 = (dims) => ({ data: new Uint8Array(dims.reduce((a, b) => a * b, 1)).fill(1), dims });
const cq = (S = 1) => t([1, S, 4, 8], 0.25);
const ckv = (S = 1) => t([1, S, 2, 8], 0.75);
const wq = (S = 1) => t([1, S, 2, 4], 0.25);
const wkv = (S = 1) => t([1, S, 1, 4], 0.75);

const PLAIN = { maxSeqLen: 8, numKvHeads: 2, headDim: 8 };
const WIN = { maxSeqLen: 1024, numKvHeads: 1, headDim: 4, window: 8, sinkTokens: 2 };
const WIN_ROWS = 300;  // evicts rows 2 .. windowStart-1

// ---------------------------------------------------------------------------
// Writing the C structs ourselves (js/runtime.js's layout, src/wasm/exports.c)

const DTYPE = { float32: 1, bool: 2 };
let allocs = [];
const malloc = (n) => { const p = M._malloc(Math.max(n, 16)) >>> 0; allocs.push(p); return p; };
const freeAll = () => { for (const p of allocs) M._free(p); allocs = []; };
const u8 = () => core.views().u8, i32 = () => core.views().i32, u32 = () => core.views().u32, f32 = () => core.views().f32;

/** The address of x's bytes in wasm memory; one copy per foreign ArrayBuffer, so that aliasing stays aliasing. */
function addressOf(x, copies) {
  const hs = heapState(x);
  if (hs) return hs.ptr;
  const buf = x.data.buffer;
  if (memoryOwner(buf) === core) return x.data.byteOffset;
  if (!copies.has(buf)) {
    const p = malloc(buf.byteLength);
    u8().set(new Uint8Array(buf), p);
    copies.set(buf, p);
  }
  return copies.get(buf) + x.data.byteOffset;
}

/** An sdpa_tensor for x (null: none) at a fresh address; returns the address (0 for null). */
function tensor(x, copies) {
  if (x === null || x === undefined) return 0;
  const at = malloc(32);
  const hs = heapState(x);
  const dims = hs ? hs.dims : x.dims;
  const len = hs ? hs.n : x.data.length;
  const dtype = hs ? DTYPE[hs.dtype] : ({ Float32Array: 1, Uint8Array: 2 })[typedArrayTag(x.data)] ?? 0;
  const w = at >>> 2;
  u32()[w] = addressOf(x, copies);
  u32()[w + 1] = len;
  i32()[w + 2] = dtype;
  i32()[w + 3] = dims.length;
  for (let i = 0; i < 4; i++) i32()[w + 4 + i] = i < dims.length ? dims[i] : 0;
  return at;
}

/** An sdpa_options (js/runtime.js putOptions, but with dropoutP written as given). */
/** An sdpa_rotary (include/sdpa.h; js/runtime.js putRotary) for { cos, sin, interleaved, positions }, or 0. */
function rotary(r, copies) {
  if (!r) return 0;
  const at = malloc(20), w = at >>> 2;
  const pos = r.positions ?? null;
  const p = pos ? malloc(4 * pos.length) : 0;
  if (pos) i32().set(pos, p >>> 2);
  u32()[w] = tensor(r.cos, copies);
  u32()[w + 1] = tensor(r.sin, copies);
  i32()[w + 2] = r.interleaved ? 1 : 0;
  i32()[w + 3] = pos ? pos.length : 0;
  u32()[w + 4] = p;
  return at;
}

function options(o, startPos, isCausal, copies) {
  const at = malloc(48), w = at >>> 2;
  u32()[w] = startPos % 0x100000000;
  u32()[w + 1] = startPos < 0 ? 0xffffffff : Math.floor(startPos / 0x100000000);
  i32()[w + 2] = isCausal ? 1 : 0;
  i32()[w + 3] = o.scale === undefined ? 0 : 1;
  f32()[w + 4] = o.scale ?? 0;
  f32()[w + 5] = o.dropoutP ?? 0;
  i32()[w + 6] = o.window ?? 0;
  f32()[w + 7] = o.softcap ?? 0;
  u32()[w + 8] = tensor(o.sinks, copies);
  u32()[w + 9] = tensor(o.treeMask, copies);  // tree_mask
  u32()[w + 10] = rotary(o.rotary, copies);    // rotary
  u32()[w + 11] = 0;
  return at;
}

/** A fresh output for a query (the JS call makes one when no out is given). */
function outFor(o, qx, copies) {
  if (o.out) return tensor(o.out, copies);
  const hs = heapState(qx);
  const dims = hs ? hs.dims : qx.dims;
  return tensor({ data: new Float32Array(dims.reduce((a, b) => a * b, 1)), dims }, copies);
}

/** The C call of a case: { code, message }. */
function viaC(kind, which, args) {
  const copies = new Map();
  const cache = C[which];
  let st;
  try {
    switch (kind) {
      case 'custom': {
        const [qx, kx, vx, o = {}] = args;
        st = M._sdpa_custom(core.ctx, tensor(qx, copies), tensor(kx, copies), tensor(vx, copies), tensor(o.attnMask, copies),
          options(o, o.startPos ?? 0, o.isCausal ?? false, copies), outFor(o, qx, copies));
        break;
      }
      case 'attend': {
        const [qx, o = {}] = args;
        st = M._sdpa_kv_cache_attend(core.ctx, cache, tensor(qx, copies), tensor(o.attnMask, copies),
          options(o, o.startPos, o.isCausal ?? !o.attnMask, copies), outFor(o, qx, copies));
        break;
      }
      case 'step': {
        const [qx, kx, vx, sp, o = {}] = args;
        st = M._sdpa_kv_cache_step(core.ctx, cache, tensor(qx, copies), tensor(kx, copies), tensor(vx, copies), tensor(o.attnMask, copies),
          options(o, sp ?? M._sdpa_kv_cache_length(cache), o.isCausal ?? !o.attnMask, copies), outFor(o, qx, copies));
        break;
      }
      case 'update': {
        const [kx, vx, sp, o = {}] = args;
        st = M._sdpa_kv_cache_update_rotary(core.ctx, cache, tensor(kx, copies), tensor(vx, copies), sp ?? M._sdpa_kv_cache_length(cache),
          rotary(o.rotary, copies));
        break;
      }
      case 'read': {
        const [s, n] = args;
        const geo = which === 'plain' ? PLAIN : WIN;
        const dims = [1, Math.max(n, 1), geo.numKvHeads, geo.headDim];
        const mk = () => tensor({ data: new Float32Array(dims.reduce((a, b) => a * b, 1)), dims }, copies);
        st = M._sdpa_kv_cache_read(core.ctx, cache, s, n, mk(), mk());
        break;
      }
      case 'truncate':
        st = M._sdpa_kv_cache_truncate(core.ctx, cache, args[0]);
        break;
      case 'many': {  // args: [[which, q, opts], ...] (explicit startPos)
        const at = malloc(28 * Math.max(args.length, 1));
        args.forEach(([w, qx, o], i) => {
          const x = (at >>> 2) + 7 * i;
          u32()[x + 5] = 0;
          u32()[x + 6] = 0;
          u32()[x] = C[w];
          u32()[x + 1] = tensor(qx, copies);
          u32()[x + 2] = tensor(o.attnMask, copies);
          u32()[x + 3] = options(o, o.startPos, o.isCausal ?? !o.attnMask, copies);
          u32()[x + 4] = outFor(o, qx, copies);
        });
        st = M._sdpa_kv_cache_attend_many(core.ctx, at, args.length);
        break;
      }
      case 'stepMany': {  // args: [[which, q, k, v, opts], ...] (explicit startPos)
        const at = malloc(28 * Math.max(args.length, 1));
        args.forEach(([w, qx, kx, vx, o], i) => {
          const x = (at >>> 2) + 7 * i;
          u32()[x] = C[w];
          u32()[x + 1] = tensor(qx, copies);
          u32()[x + 2] = tensor(o.attnMask, copies);
          u32()[x + 3] = options(o, o.startPos, o.isCausal ?? !o.attnMask, copies);
          u32()[x + 4] = outFor(o, qx, copies);
          u32()[x + 5] = tensor(kx, copies);
          u32()[x + 6] = tensor(vx, copies);
        });
        st = M._sdpa_kv_cache_step_many(core.ctx, at, args.length);
        break;
      }
      case 'keepRows': {
        const [s, list] = args;
        const p = malloc(4 * list.length);
        i32().set(list, p >>> 2);
        st = M._sdpa_kv_cache_keep_rows(core.ctx, cache, s, p, list.length);
        break;
      }
      default: throw new Error(kind);
    }
  } finally { freeAll(); }
  return { code: STATUS_CODES[st], message: st ? core.readCString(M._sdpa_ctx_last_error(core.ctx)) : '' };
}

/** The JS call of a case: { code, message }. */
function viaJS(kind, which, args) {
  const cache = J[which];
  try {
    switch (kind) {
      case 'custom': sdpa.customSdpa(...args); break;
      case 'attend': cache.attend(...args); break;
      case 'step': cache.step(...args); break;
      case 'update': cache.update(...args); break;
      case 'read': cache.read(...args); break;
      case 'truncate': cache.truncate(...args); break;
      case 'keepRows': cache.keepRows(...args); break;
      case 'stepMany': sdpa.stepMany(args.map(([w, qx, kx, vx, o]) => ({ cache: J[w], q: qx, k: kx, v: vx, ...o }))); break;
      case 'many': sdpa.attendMany(args.map(([w, qx, o]) => ({ cache: J[w], q: qx, ...o }))); break;
      default: throw new Error(kind);
    }
  } catch (e) {
    if (!(e instanceof SdpaError)) throw e;
    return { code: e.code, message: e.message };
  }
  return { code: 'OK', message: '' };
}

/** Each kind's call as each layer names it: JS's call, C's public entry (its own C name). */
const NAMES = {
  custom: ['customSdpa', 'sdpa_custom'], attend: ['KVCache.attend', 'sdpa_kv_cache_attend'],
  step: ['KVCache.step', 'sdpa_kv_cache_step'], update: ['KVCache.update', 'sdpa_kv_cache_update_rotary'],
  read: ['KVCache.read', 'sdpa_kv_cache_read'], truncate: ['KVCache.truncate', 'sdpa_kv_cache_truncate'],
  keepRows: ['KVCache.keepRows', 'sdpa_kv_cache_keep_rows'], many: ['sdpa.attendMany', 'sdpa_kv_cache_attend_many'],
  stepMany: ['sdpa.stepMany', 'sdpa_kv_cache_step_many'],
};

/** A message's words after its call's name (which it must start with, once). */
function wordsAfter(message, name, label) {
  assert.ok(message.startsWith(`${name}: `), `${label}: '${message}' does not start with ${name}`);
  return message.slice(name.length + 2);
}

let cases = 0;
/** [label, kind, which cache, args (a function: fresh tensors for each layer), code] */
function parity(list) {
  for (const [label, kind, which, mk, code] of list) {
    const js = viaJS(kind, which, mk());
    const c = viaC(kind, which, mk());
    assert.is(js.code, code, `${label}: JS gave ${js.code}: ${js.message}`);
    assert.is(c.code, js.code, `${label}: C gave ${c.code} (${c.message}), JS ${js.code} (${js.message})`);
    const [jsName, cName] = NAMES[kind];
    assert.is(wordsAfter(c.message, cName, label), wordsAfter(js.message, jsName, label), `${label}: the words differ`);
    cases++;
  }
}

test.before(async () => {
  sdpa = await createSdpa({ threads: 1 });
  ({ M, core } = sdpa[INTERNALS]);
  const make = (g, rows, seed) => {
    const at = malloc(8);
    assert.is(M._sdpa_kv_cache_create_windowed(core.ctx, 1, g.maxSeqLen, g.numKvHeads, g.headDim, 1, g.window ?? 0, g.sinkTokens ?? 0, at), 0);
    const ptr = u32()[at >>> 2];
    freeAll();
    const js = sdpa.createKVCache(g);
    const r = rng(seed);
    const kk = randTensor(r, [1, rows, g.numKvHeads, g.headDim]), vv = randTensor(r, [1, rows, g.numKvHeads, g.headDim]);
    js.update(kk, vv, 0);
    const copies = new Map();
    assert.is(M._sdpa_kv_cache_update(core.ctx, ptr, tensor(kk, copies), tensor(vv, copies), 0), 0);
    freeAll();
    return [ptr, js];
  };
  [C.plain, J.plain] = make(PLAIN, 4, 1);
  [C.win, J.win] = make(WIN, WIN_ROWS, 2);
  assert.is(M._sdpa_kv_cache_window_start(C.win), J.win.windowStart);
  assert.ok(J.win.windowStart > WIN.sinkTokens, 'the windowed cache evicted rows');
});
test.after(() => {
  M._sdpa_kv_cache_free(C.plain);
  M._sdpa_kv_cache_free(C.win);
  sdpa.dispose();
});

test('E_ARG: aliasing (JS sees the memory, C the addresses)', () => {
  const qq = q();
  const hq = sdpa.allocTensor('float32', [1, 2, 4, 8]);
  const heapOut = sdpa.allocTensor('float32', [1, 1, 4, 8]);
  const kk = k();
  parity([
    ['out aliases query', 'custom', null, () => [qq, k(), v(), { out: { data: qq.data, dims: [1, 2, 4, 8] } }], 'E_ARG'],
    ['out overlaps key', 'custom', null, () => [q(), kk, v(), { out: { data: new Float32Array(kk.data.buffer, 32, 64), dims: [1, 2, 4, 8] } }], 'E_ARG'],
    ['out overlaps value', 'custom', null, () => { const vv = v(); return [q(), k(), vv, { out: { data: vv.data.subarray(0, 64), dims: [1, 2, 4, 8] } }]; }, 'E_ARG'],
    ['out overlaps the mask', 'custom', null, () => { const m = t([2, 6], 0); const big = new Float32Array(64); return [q(), k(), v(), { attnMask: { data: big.subarray(0, 12), dims: [2, 6] }, out: { data: big, dims: [1, 2, 4, 8] } }]; }, 'E_ARG'],
    ['out overlaps sinks', 'custom', null, () => { const big = new Float32Array(64); return [q(), k(), v(), { sinks: { data: big.subarray(60), dims: [4] }, out: { data: big, dims: [1, 2, 4, 8] } }]; }, 'E_ARG'],
    ['heap out is heap query', 'custom', null, () => [hq, k(), v(), { out: hq }], 'E_ARG'],
    ['attend out aliases query', 'attend', 'plain', () => [heapOut, { startPos: 3, out: heapOut }], 'E_ARG'],
    ['step out aliases the new key', 'step', 'plain', () => { const big = new Float32Array(32); return [cq(), { data: big.subarray(0, 16), dims: [1, 1, 2, 8] }, ckv(), 4, { out: { data: big, dims: [1, 1, 4, 8] } }]; }, 'E_ARG'],
  ]);
  hq.dispose(); heapOut.dispose();
});

test('E_ARG: inputs and out inside the cache storage', () => {
  // a view of the JS cache's pages (its value rows): the C cache's pages are in the same pool
  const f32v = new Float32Array(core.currentBuffer());
  const page = M._sdpa_kv_cache_page(C.plain, 0, 0, 0, 1) >>> 2;
  assert.ok(page > 0);
  const view = f32v.subarray(page, page + 32);
  const inCache = (dims) => ({ data: view.subarray(0, dims.reduce((a, b) => a * b, 1)), dims });
  parity([
    ['attend out in the cache', 'attend', 'plain', () => [cq(), { startPos: 3, out: inCache([1, 1, 4, 8]) }], 'E_ARG'],
    ['attend query in the cache', 'attend', 'plain', () => [inCache([1, 1, 4, 8]), { startPos: 3 }], 'E_ARG'],
    ['attend mask in the cache', 'attend', 'plain', () => [cq(), { attnMask: inCache([1, 4]) }], 'E_ARG'],
    ['step query in the cache', 'step', 'plain', () => [inCache([1, 1, 4, 8]), ckv(), ckv(), 4], 'E_ARG'],
    ['step key in the cache', 'step', 'plain', () => [cq(), inCache([1, 1, 2, 8]), ckv(), 4], 'E_ARG'],
    ['step query and key in the cache (query first)', 'step', 'plain', () => [inCache([1, 1, 4, 8]), inCache([1, 1, 2, 8]), ckv(), 4], 'E_ARG'],
    ['update value in the cache', 'update', 'plain', () => [ckv(), inCache([1, 1, 2, 8]), 4], 'E_ARG'],
  ]);
});

test('E_DIMS', () => {
  parity([
    ['read length 0', 'read', 'plain', () => [0, 0], 'E_DIMS'],
  ]);
});

test('E_DTYPE (bool tensors: a dtype both layers know)', () => {
  const boolOut = sdpa.allocTensor('bool', [1, 2, 4, 8]);
  parity([
    ['value bool', 'custom', null, () => [q(), k(), b8([1, 6, 2, 8])], 'E_DTYPE'],
    ['query bool', 'custom', null, () => [b8([1, 2, 4, 8]), k(), v()], 'E_DTYPE'],
    ['sinks bool', 'custom', null, () => [q(), k(), v(), { sinks: b8([4]) }], 'E_DTYPE'],
    ['out bool heap tensor', 'custom', null, () => [q(), k(), v(), { out: boolOut }], 'E_DTYPE'],
    ['update key bool', 'update', 'plain', () => [b8([1, 1, 2, 8]), ckv(), 4], 'E_DTYPE'],
    ['step query and key bool (query first)', 'step', 'plain', () => [b8([1, 1, 4, 8]), b8([1, 1, 2, 8]), ckv(), 4], 'E_DTYPE'],
    ['attend query bool', 'attend', 'plain', () => [b8([1, 1, 4, 8]), { startPos: 3 }], 'E_DTYPE'],
  ]);
  boolOut.dispose();
});

test('E_START_POS', () => {
  parity([
    ['negative', 'custom', null, () => [q(), k(), v(), { startPos: -1 }], 'E_START_POS'],
    ['update negative', 'update', 'plain', () => [ckv(), ckv(), -2], 'E_START_POS'],
    ['read negative start', 'read', 'plain', () => [-1, 1], 'E_START_POS'],
    ['truncate negative', 'truncate', 'plain', () => [-1], 'E_START_POS'],
    ['start pos beats a mask dtype', 'custom', null, () => [q(), k(), v(), { startPos: -1, attnMask: t([2, 6], 0) }], 'E_START_POS'],
  ]);
});

test('E_DROPOUT, E_SCALE', () => {
  parity([
    ['dropoutP 0.5', 'custom', null, () => [q(), k(), v(), { dropoutP: 0.5 }], 'E_DROPOUT'],
    ['dropoutP NaN', 'custom', null, () => [q(), k(), v(), { dropoutP: NaN }], 'E_DROPOUT'],
    ['step dropoutP', 'step', 'plain', () => [cq(), ckv(), ckv(), 4, { dropoutP: 0.5 }], 'E_DROPOUT'],
    ['scale 0', 'custom', null, () => [q(), k(), v(), { scale: 0 }], 'E_SCALE'],
    ['scale -1', 'custom', null, () => [q(), k(), v(), { scale: -1 }], 'E_SCALE'],
    ['scale Infinity', 'custom', null, () => [q(), k(), v(), { scale: Infinity }], 'E_SCALE'],
    ['scale NaN', 'custom', null, () => [q(), k(), v(), { scale: NaN }], 'E_SCALE'],
    ['attend scale 0', 'attend', 'plain', () => [cq(), { startPos: 3, scale: 0 }], 'E_SCALE'],
    ['softcap -2', 'custom', null, () => [q(), k(), v(), { softcap: -2 }], 'E_SCALE'],
    ['softcap NaN', 'attend', 'plain', () => [cq(), { startPos: 3, softcap: NaN }], 'E_SCALE'],
  ]);
});

test('keepRows, attendMany / stepMany', () => {
  parity([
    ['keepRows start -1', 'keepRows', 'plain', () => [-1, [0]], 'E_START_POS'],
    ['keepRows not increasing', 'keepRows', 'plain', () => [1, [1, 1]], 'E_START_POS'],
    ['keepRows negative row', 'keepRows', 'plain', () => [1, [-2]], 'E_START_POS'],
    ['attendMany: the same cache twice', 'many', null, () => [['plain', cq(), { startPos: 3 }], ['plain', cq(), { startPos: 3 }]], 'E_ARG'],
    ['attendMany: an item\'s own rule', 'many', null, () => [['plain', cq(), { startPos: 3 }], ['win', wq(), { startPos: WIN_ROWS - 1, scale: 0 }]], 'E_SCALE'],
    ['attendMany: out over another item\'s query', 'many', null, () => { const q0 = cq(); return [['plain', q0, { startPos: 3 }], ['win', wq(), { startPos: WIN_ROWS - 1, out: { data: q0.data.subarray(0, 8), dims: [1, 1, 2, 4] } }]]; }, 'E_ARG'],
    ['attendMany: no items', 'many', null, () => [], 'E_ARG'],
    ['stepMany: the same cache twice', 'stepMany', null, () => [['plain', cq(), ckv(), ckv(), { startPos: 4 }], ['plain', cq(), ckv(), ckv(), { startPos: 4 }]], 'E_ARG'],
    ['stepMany: out over another item\'s value', 'stepMany', null, () => { const v0 = ckv(); return [['plain', cq(), ckv(), v0, { startPos: 4 }], ['win', wq(), wkv(), wkv(), { startPos: WIN_ROWS, out: { data: v0.data.subarray(0, 8), dims: [1, 1, 2, 4] } }]]; }, 'E_ARG'],
  ]);
});

test('rotary', () => {
  const tab = (P, R, x = 0.5) => t([P, R], x);
  const T = () => ({ cos: tab(8, 4), sin: tab(8, 4) });
  const wT = () => ({ cos: tab(400, 2), sin: tab(400, 2) });
  parity([
    ['step rotary sin missing', 'step', 'plain', () => [cq(), ckv(), ckv(), 4, { rotary: { cos: tab(8, 4) } }], 'E_ARG'],
    ['attend out over rotary.cos', 'attend', 'plain', () => { const o = t([1, 1, 4, 8], 0); return [cq(), { startPos: 3, out: o, rotary: { cos: { data: o.data.subarray(0, 8), dims: [2, 4] }, sin: tab(2, 4) } }]; }, 'E_ARG'],
    ['step rotary cos bool', 'step', 'plain', () => [cq(), ckv(), ckv(), 4, { rotary: { cos: b8([8, 4]), sin: tab(8, 4) } }], 'E_DTYPE'],
    ['step rotary position past the tables', 'step', 'plain', () => [cq(), ckv(), ckv(), 4, { rotary: { ...T(), positions: [8] } }], 'E_START_POS'],
    ['step rotary negative position', 'step', 'plain', () => [cq(), ckv(), ckv(), 4, { rotary: { ...T(), positions: [-3] } }], 'E_START_POS'],
    ['windowed attend rotary interleaved, evicted rows first', 'attend', 'win', () => [wq(), { startPos: 5, rotary: { ...wT(), interleaved: true, positions: [500] } }], 'E_START_POS'],
    ['attendMany: out over another item\'s rotary.sin', 'many', null, () => { const s0 = tab(8, 4); return [['plain', cq(), { startPos: 3, rotary: { cos: tab(8, 4), sin: s0 } }], ['win', wq(), { startPos: WIN_ROWS - 1, out: { data: s0.data.subarray(0, 8), dims: [1, 1, 2, 4] } }]]; }, 'E_ARG'],
  ]);
});

test('every case agreed', () => {
  assert.ok(cases === 54, `${cases} cases`);
  console.log(`  parity: ${cases} rule cases, JS and C agree on code and message`);
});

test.run();
