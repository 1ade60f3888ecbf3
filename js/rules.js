// rules.js: the rules of CONTRACT.md sections 2-3 that only JS can see,
// checked on a call's snapshot (snapshot.js) before anything touches wasm
// memory: JS types, typed-array kinds, dims C cannot be given, a typed array
// to be copied into wasm memory holding other than its dims need, out over an
// input in memory C cannot see, option names and values C cannot hold. Every
// other rule is C's, checked once at the call's entry (src/wasm/api.h).
//
// All checks of a call are collected; the one reported is the first in the
// contract table's order (ties: the first found, in argument order). Later
// checks that depend on an earlier, failed one (e.g. head counts of a tensor
// whose rank is wrong) are skipped; the earlier failure already outranks them.

import { SdpaError, codeRank } from './errors.js';
import { memoryOwner, HEAP_DTYPES } from './heap.js';
import { prod, fmtDims, fmtRows, INT32_MAX } from './shape.js';
import { describeValue, readOptions, readDims, dimsLabel, readInt32List } from './snapshot.js';
import { CACHE_DTYPES, WEIGHT_DTYPES, POINTER_BYTES } from './abi.js';

// ---------------------------------------------------------------------------
// Collecting checks

export class Checks {
  /** @param {string} fn the public function name used as message prefix */
  constructor(fn) {
    this.fn = fn;
    this.first = null;
    /** Put before every message added (a group's 'layer 3: '). */
    this.prefix = '';
  }
  /** `status`: C's status number when C decided this failure (its words), undefined when JS did. */
  add(code, message, status = undefined) {
    if (this.first === null || codeRank(code) < codeRank(this.first.code)) this.first = { code, message: this.prefix + message, status };
  }
  /** Throws the highest-ranked violation, if any (with its C status, when C decided it). */
  done() {
    const f = this.first;
    if (f !== null) throw new SdpaError(f.code, `${this.fn}: ${f.message}`, f.status === undefined ? undefined : { status: f.status });
  }
}

// ---------------------------------------------------------------------------
// Small helpers

const isPosInt = (x) => Number.isSafeInteger(x) && x > 0;

/**
 * startPos-like: a number C can be given, an integer a JS number holds
 * exactly (absent: 0, or E_ARG when `required`). Its range is C's. Returns
 * the value or null when invalid.
 */
export function checkStartPos(ck, value, name, required = false) {
  if (value === undefined || value === null) {
    if (required) { ck.add('E_ARG', `${name} is missing; expected a non-negative integer`); return null; }
    return 0;
  }
  if (typeof value !== 'number') { ck.add('E_ARG', `${name} must be a number, got ${describeValue(value)}`); return null; }
  if (!Number.isSafeInteger(value)) {
    ck.add('E_START_POS', `${name} is ${value}; expected a non-negative integer`);
    return null;
  }
  return value;
}

export function checkBool(ck, value, name, dflt = false) {
  if (value === undefined || value === null) return dflt;
  if (typeof value !== 'boolean') { ck.add('E_ARG', `${name} must be a boolean, got ${describeValue(value)}`); return dflt; }
  return value;
}

/** The fast op's scale rule: finite and > 0 as a float32 (the kernel's type). */
export function fitsFastScale(x) {
  const f = Math.fround(x);
  return Number.isFinite(f) && f > 0;
}

/**
 * scale: absent (undefined/null) → null. `positive`: the fast op's rule
 * (fitsFastScale); otherwise any finite number (section 4).
 */
export function checkScale(ck, value, positive) {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'number') { ck.add('E_ARG', `scale must be a number, got ${describeValue(value)}`); return null; }
  if (positive) {
    if (!fitsFastScale(value)) {
      ck.add('E_SCALE', `scale is ${value}; expected a finite number > 0${Number.isFinite(value) && value > 0 ? ' that fits a float32' : ''}`);
      return null;
    }
  } else if (!Number.isFinite(value)) {
    ck.add('E_SCALE', `scale is ${value}; expected a finite number`);
    return null;
  }
  return value;
}

export function checkDropout(ck, value) {
  if (value === undefined || value === null) return 0;
  if (typeof value !== 'number') { ck.add('E_ARG', `dropoutP must be a number, got ${describeValue(value)}`); return 0; }
  if (value !== 0) ck.add('E_DROPOUT', `dropoutP is ${value}; expected 0 (the kernel has no dropout)`);
  return 0;
}

/** A count-like option (cache sizes): a positive integer (with `allowZero`, non-negative: a windowed cache's sinkTokens). */
export function checkSize(ck, value, name, { required = true, dflt, zeroCode = 'E_DIMS', max = INT32_MAX, allowZero = false } = {}) {
  const expected = allowZero ? 'a non-negative integer' : 'a positive integer';
  if (value === undefined || value === null) {
    if (required) { ck.add('E_ARG', `${name} is missing; expected ${expected}`); return null; }
    return dflt;
  }
  if (typeof value !== 'number') { ck.add('E_ARG', `${name} must be a number, got ${describeValue(value)}`); return null; }
  if (!(isPosInt(value) || (allowZero && value === 0))) {
    ck.add(value === 0 ? zeroCode : 'E_DIMS', `${name} is ${value}; expected ${expected}`);
    return null;
  }
  if (value > max) {
    ck.add('E_DIMS', `${name} is ${value}; at most ${max}${max === INT32_MAX ? ' (2^31 - 1)' : ''}`);
    return null;
  }
  return value;
}

/** SDPA_INDEX_LIMIT (src/internal.h): the kernels walk keys in int32 tiles. */
export const KEY_INDEX_LIMIT = INT32_MAX - 65536;

// ---------------------------------------------------------------------------
// Dims
/**
 * E_DIMS for every dim that is not a positive integer; a 0 at `headIndex`
 * is E_HEADS instead. Returns true when every dim is a positive integer.
 */
export function checkDimValues(ck, dims, name, headIndex = -1) {
  let ok = true;
  for (let i = 0; i < dims.length; i++) {
    const x = dims[i];
    if (isPosInt(x) && x <= INT32_MAX) continue;
    ok = false;
    if (x === 0 && i === headIndex) ck.add('E_HEADS', `${name} has 0 heads (dims ${fmtDims(dims)}); expected at least 1`);
    else if (isPosInt(x)) ck.add('E_DIMS', `${dimsLabel(name)}[${i}] is ${x}; a dim must be at most ${INT32_MAX} (2^31 - 1)`);
    else ck.add('E_DIMS', `${dimsLabel(name)}[${i}] is ${x}; every dim must be a positive integer`);
  }
  return ok;
}

/** E_RANK unless the rank is one of `ranks`. Returns true when the rank fits. */
export function checkRank(ck, d, ranks, what) {
  if (!d || !d.dims) return false;
  if (ranks.includes(d.rank)) return true;
  ck.add('E_RANK', `${d.name} has rank ${d.rank}; expected ${what}`);
  return false;
}
export const RANK_4 = Object.freeze([4]);

/**
 * Every dim a positive integer (a 0 at `headIndex` is E_HEADS) and
 * len == product(dims). Returns true when both hold.
 */
export function checkDims(ck, d, headIndex = -1) {
  if (!d || !d.dims) return false;
  if (d.heap) return true; // checked by allocTensor; its length is the product by construction
  if (!checkDimValues(ck, d.dims, d.name, headIndex)) return false;
  const need = prod(d.dims);
  if (d.len >= 0 && d.len !== need) {
    ck.add('E_DIMS', `${d.name}.data has ${d.len} elements but dims ${fmtDims(d.dims)} need ${need}`);
    return false;
  }
  return true;
}

/**
 * True when every dim is a non-negative integer. Relational checks (batch,
 * heads, ...) run on such tensors even when a dim failed checkDims: the only
 * failure then possible is a head count of 0 (E_HEADS), which ranks after
 * E_BATCH, so the relational rules must still be looked at.
 */
export function structural(d) {
  return d !== null && d.whole;
}

/**
 * Memory region of a tensor for aliasing checks: { space, start, end }.
 * `space` is an ArrayBuffer, or a runtime standing for its wasm memory
 * (heap tensors, cache storage, and views of any buffer that memory ever
 * had: see memoryOwner).
 */
export function regionOf(d) {
  if (!d) return null;
  if (d.heap) return d.heap.disposed ? null : d.heap.region; // (disposed: its memory may be someone else's now; E_DISPOSED says it)
  if (!d.data) return null;
  const space = memoryOwner(d.buffer) ?? d.buffer;
  return { space, start: d.byteOffset, end: d.byteOffset + d.byteLength };
}

/** Whether two regions share bytes. */
export function overlaps(a, b) {
  return !!a && !!b && a.space === b.space && a.start < b.end && b.start < a.end;
}


/** The largest element count C's size_t holds. */
const SIZE_MAX = 2 ** (8 * POINTER_BYTES) - 1;
/** The heads axis of each tensor of an attention call (checkDims: a 0 there is E_HEADS). */
const HEADS_AXIS = Object.freeze({ query: 2, key: 2, value: 2, attnMask: -1, sinks: 0, treeMask: -1, out: 2, 'rotary.cos': -1, 'rotary.sin': -1 });
const isInt32 = (x) => Number.isInteger(x) && x >= -0x80000000 && x <= INT32_MAX;

/**
 * The dims rules JS checks before any copy (`d`: a descriptor, null: not
 * given; `core`: the instance's runtime):
 * - dims C cannot be given as JS has them (a dim that is not an int32
 *   integer, a length or a product past C's count): E_DIMS in JS's words (a
 *   dim of 2.5 or 2^40 printed as JS prints it);
 * - a typed array that will be copied into wasm memory (neither a heap tensor
 *   nor a view of this instance's memory) holding other than what its dims
 *   need: C's check_dims words for it (checkDims). JS's, because the copy (and
 *   an out temporary of out's own length) is made before C's entry checks
 *   anything: a longer array would grow the heap for a call that is then
 *   rejected (wasm memory never shrinks), or fail as E_OOM where E_DIMS is due.
 * Every other dims rule is C's (a view of this memory: checked in place).
 */
export function checkDimsFit(ck, d, core) {
  if (d === null || d.heap || d.dims === null) return;
  const dims = d.dims;
  let p = 1, positive = true, fits = d.len <= SIZE_MAX;
  for (let i = 0; i < dims.length && fits; i++) {
    if (!isInt32(dims[i])) fits = false;
    else if (dims[i] <= 0) positive = false;
    p *= dims[i];
  }
  const copied = d.data !== null && memoryOwner(d.buffer) !== core;
  if (fits && !(d.len >= 0 && positive && p > Math.floor(SIZE_MAX / (d.dtype === 'bool' ? 1 : 4))) && !(copied && d.len !== p)) return;
  const tmp = new Checks('');
  checkDims(tmp, d, HEADS_AXIS[d.name] ?? -1);
  // (a copied array of a 0-heads tensor: C's E_HEADS, as it says for that tensor alone)
  if (tmp.first !== null && (tmp.first.code === 'E_DIMS' || copied)) ck.add(tmp.first.code, tmp.first.message);
}

/**
 * out over an input in memory C cannot see (a foreign ArrayBuffer, another
 * instance's heap): E_ARG in C's words. Over this instance's memory, the
 * addresses are C's to compare at the entry. `inputs`: descriptors in C's
 * order (null: not given).
 */
export function checkOutApart(ck, core, out, inputs) {
  const ro = out ? regionOf(out) : null;
  if (ro === null || ro.space === core) return;
  for (const x of inputs) {
    if (x && overlaps(ro, regionOf(x))) {
      ck.add('E_ARG', `out shares memory with ${x.name}; out must not overlap any input`);
      return;
    }
  }
}

/** E_MASK_CAUSAL for a mask together with isCausal: true. */
/** E_MASK_CAUSAL for a mask together with isCausal: true. */
export function checkMaskCausal(ck, M, isCausal) {
  if (M && isCausal === true) ck.add('E_MASK_CAUSAL', `attnMask and isCausal: true were both given; pass one of them`);
}

// ---------------------------------------------------------------------------
// The fast op's options: customSdpa, and the cache's attend / update / step

export const CUSTOM_OPTIONS = Object.freeze(['startPos', 'attnMask', 'dropoutP', 'isCausal', 'scale', 'window', 'softcap', 'sinks', 'out']);
export const STEP_OPTIONS = Object.freeze(['attnMask', 'dropoutP', 'isCausal', 'scale', 'window', 'softcap', 'sinks', 'treeMask', 'rotary', 'out']);
/** KVCache.attend's: customSdpa's, treeMask and rotary. */
export const ATTEND_OPTIONS = Object.freeze(['startPos', 'attnMask', 'dropoutP', 'isCausal', 'scale', 'window', 'softcap', 'sinks', 'treeMask', 'rotary', 'out']);
/** KVCache.update's. */
export const UPDATE_OPTIONS = Object.freeze(['rotary']);

/** window: absent → 0 (none); a positive integer up to 2^31 - 1 (E_ARG otherwise: it is a count, not a size). */
function checkWindow(ck, value) {
  if (value === undefined || value === null) return 0;
  if (typeof value !== 'number') { ck.add('E_ARG', `window must be a number, got ${describeValue(value)}`); return 0; }
  if (!isPosInt(value) || value > INT32_MAX) { ck.add('E_ARG', `window is ${value}; expected a positive integer (the number of keys a row sees, its own included)`); return 0; }
  return value;
}

/** softcap: absent → 0 (none); a finite number > 0 as a float32 (E_SCALE). */
function checkSoftcap(ck, value) {
  if (value === undefined || value === null) return 0;
  if (typeof value !== 'number') { ck.add('E_ARG', `softcap must be a number, got ${describeValue(value)}`); return 0; }
  if (!fitsFastScale(value)) { ck.add('E_SCALE', `softcap is ${value}; expected a finite number > 0`); return 0; }
  return Math.fround(value);
}

/**
 * The JS-only rules of an attention call's scalar options (their JS types,
 * absent vs 0, a value that does not fit the float32 C takes; C's own
 * E_DROPOUT / E_SCALE words print a float32 with printf, not a JS number):
 * { isCausal, scale, window, softcap }, each the value C is given (an invalid
 * one: the absent value, its failure already in `ck`). `cache`: attention
 * over a cache, causal by default (a decoder's prefill and decode) unless a
 * mask says what is visible; customSdpa keeps ExecuTorch's non-causal default.
 */
export function readAttentionOptions(ck, o, cache) {
  const isCausal = checkBool(ck, o.isCausal, 'isCausal', cache && o.M === null);
  const scale = checkScale(ck, o.scale, true);
  checkDropout(ck, o.dropoutP);
  const window = checkWindow(ck, o.window);
  const softcap = checkSoftcap(ck, o.softcap);
  return { isCausal, scale, window, softcap };
}

/**
 * customSdpa's JS-only rules (the option types and values C cannot hold,
 * dims C cannot be given, out over an input in memory C cannot see); every
 * other rule is C's, at its entry (sdpa_wasm_custom). Returns the plan
 * { Q, M, O, S, T, isCausal, scale, window, softcap } for runAttention.
 */
export function checkCustom(core, ck, o, Q, K, V) {
  const opts = readAttentionOptions(ck, o, false);
  for (const d of [Q, K, V, o.M, o.S, o.O]) checkDimsFit(ck, d, core);
  checkOutApart(ck, core, o.O, [Q, o.M, o.S, K, V]);
  return { Q, M: o.M, O: o.O, S: o.S, T: null, isCausal: opts.isCausal, scale: opts.scale, window: opts.window, softcap: opts.softcap };
}

// ---------------------------------------------------------------------------
// The cache calls (CONTRACT.md section 3).// ---------------------------------------------------------------------------
// The cache calls (CONTRACT.md section 3). Their relational rules (the write
// against the cache, the attention against it, a windowed cache's, rotary's,
// a step's own) are C's alone, at the call's entry (src/wasm/api.h). What JS
// checks of them is what only JS sees: the option types (readAttentionOptions),
// where a write starts when none is given, attend's implied startPos.

/**
 * Where update / step write: startPos, or length (append) when none is given;
 * null (no position rule applies) for an append to a disposed cache (length
 * Infinity: E_DISPOSED is what such a call reports, not E_CAPACITY).
 */
export function checkWriteStart(ck, startPos, length) {
  if (startPos === undefined || startPos === null) return length === Infinity ? null : Math.min(length, INT32_MAX);
  return checkStartPos(ck, startPos, 'startPos');
}

/**
 * attend's startPos when none is given (JS only: C has no absent startPos):
 * the query holds the last Sq rows written (with a mask startPos has no
 * effect: 0 when fewer rows are written). `length`: the cache's, -1 once disposed.
 */
export function checkImpliedStart(ck, Q, masked, length) {
  if (!Q || !Q.dims || Q.rank !== 4 || !Number.isSafeInteger(Q.dims[1])) return 0;
  if (length < 0) return 0;
  const Sq = Q.dims[1];
  if (Sq <= length) return length - Sq;
  if (!masked) {
    ck.add('E_START_POS', `${Q.name} has ${fmtRows(Sq)} but the cache holds only ${length} (cache.length); without startPos, ${Q.name} is taken as the last Sq rows written`);
  }
  return 0;
}

// The cache's row rules (read / readRaw's rows, truncate's length, keepRows'
// span and list order, save's rows: capacity, rows written, a windowed cache's
// evicted rows) are C's alone, checked at the call's entry (src/wasm/api.h)
// after JS's. What JS checks of those calls is what only JS sees: the values'
// JS types and that they are integers (C takes integers), read's length a
// positive one (it sizes the copy).

/**
 * read / readRaw's arguments: start an integer (C's entry rejects a negative
 * one), length a positive one (it sizes the copy). Returns [start, length] (null when invalid; the row rules then do not apply).
 */
export function checkCacheRows(ck, start, length) {
  return [checkStartPos(ck, start, 'start', true), checkSize(ck, length, 'length')];
}

/** truncate(length)'s argument: an integer (its range is C's). Returns it, or null when invalid. */
export function checkCacheTruncate(ck, length) {
  if (length === undefined || length === null) { ck.add('E_ARG', 'length is missing; expected a non-negative integer'); return null; }
  if (typeof length !== 'number') { ck.add('E_ARG', `length must be a number, got ${describeValue(length)}`); return null; }
  if (!Number.isSafeInteger(length)) { ck.add('E_START_POS', `length is ${length}; expected a non-negative integer`); return null; }
  return length;
}

// ---------------------------------------------------------------------------
// createKVCache's options, kvCacheSize's rows, allocTensor, reserve

export const CACHE_OPTIONS = Object.freeze(['batch', 'maxSeqLen', 'numKvHeads', 'headDim', 'dtype', 'keyDtype', 'valueDtype', 'window', 'sinkTokens', 'float16NewestPage']);
/** The cache dtypes (js/abi.js, in sdpa_dtype order) for messages: "'float32', 'float16', 'int8' or 'int4'". */
const CACHE_DTYPE_LIST = Object.keys(CACHE_DTYPES).map((n) => `'${n}'`).join(', ').replace(/, ([^,]*)$/, ' or $1');

/** A cache dtype option (`name`: dtype, keyDtype or valueDtype), `dflt` when absent; null after a failed rule. */
function readCacheDtype(ck, name, value, dflt) {
  if (value === undefined || value === null) return dflt;
  if (typeof value !== 'string') ck.add('E_ARG', `${name} must be a string, got ${describeValue(value)}`);
  else if (CACHE_DTYPES[value] === undefined) ck.add('E_DTYPE', `${name} '${value}' is not supported; caches are ${CACHE_DTYPE_LIST}`);
  else return value;
  return null;
}

/*
 * A geometry's rules (and kvCacheSize's rows) are C's alone, checked at its
 * entry (sdpa_wasm_kv_cache_plan, src/wasm/api.h). What JS checks of them is
 * what only JS sees: the options' JS types, the ones missing, unknown names,
 * that a count is an integer C can be given (a fraction, NaN, ±Infinity or a
 * number past 2^53 is not), `window: 0` (to C, 0 is no window: JS alone knows
 * it was given), and the dtypes' names (C sees numbers; JS names the option a
 * bad one came from). These rank before every C rule (CONTRACT.md section 2).
 */

const POSITIVE = 'a positive integer', NON_NEGATIVE = 'a non-negative integer';

/**
 * A count option's JS-only rules into `ck`: absent (`dflt`, or E_ARG when
 * `required`), its JS type, an integer (E_DIMS). Its range is C's. Returns
 * the value (undefined when there is none for C).
 */
function readCount(ck, value, name, required, dflt, expected) {
  if (value === undefined || value === null) {
    if (required) ck.add('E_ARG', `${name} is missing; expected ${expected}`);
    return required ? undefined : dflt;
  }
  if (typeof value !== 'number') ck.add('E_ARG', `${name} must be a number, got ${describeValue(value)}`);
  else if (!Number.isSafeInteger(value)) ck.add('E_DIMS', `${name} is ${value}; expected ${expected}`);
  else return value;
  return undefined;
}

/**
 * createKVCache's options (and, `plan`, kvCacheSize's rows): JS's own rules
 * into `ck`. Returns the geometry as C is given it (counts as JS numbers,
 * `rows` undefined when none was given), or null when a rule failed; C's
 * rules come at its entry (Core.planCache).
 */
function readGeometry(into, config, plan, rowsValue) {
  const ck = new Checks('');  // (this geometry's own: a group reads several into one)
  const given = config !== undefined && config !== null;
  if (!given) ck.add('E_ARG', 'the options { maxSeqLen, numKvHeads, headDim } are missing');
  const o = readOptions(ck, config, CACHE_OPTIONS);  // the snapshot
  const batch = readCount(ck, o.batch, 'batch', false, 1, POSITIVE);
  let window;
  if (o.window === 0) ck.add('E_DIMS', `window is ${o.window}; expected ${POSITIVE}`);  // (JS only: to C, window 0 is no window)
  else window = readCount(ck, o.window, 'window', false, 0, POSITIVE);  // a windowed cache: maxSeqLen may be left out
  const sinkTokens = readCount(ck, o.sinkTokens, 'sinkTokens', false, 0, NON_NEGATIVE);
  const maxSeqLen = readCount(ck, o.maxSeqLen, 'maxSeqLen', given && window === 0, KEY_INDEX_LIMIT, POSITIVE);
  const numKvHeads = readCount(ck, o.numKvHeads, 'numKvHeads', given, undefined, POSITIVE);
  const headDim = readCount(ck, o.headDim, 'headDim', given, undefined, POSITIVE);
  // dtype for both, keyDtype / valueDtype for one of them (each overrides dtype)
  const dtype = readCacheDtype(ck, 'dtype', o.dtype, 'float32');
  const keyDtype = readCacheDtype(ck, 'keyDtype', o.keyDtype, dtype);
  const valueDtype = readCacheDtype(ck, 'valueDtype', o.valueDtype, dtype);
  // float16NewestPage: a boolean; by default on when K or V is int4 (its quality table: README, "Choosing a cache dtype")
  const float16NewestPage = o.float16NewestPage ?? (keyDtype === 'int4' || valueDtype === 'int4');
  if (typeof float16NewestPage !== 'boolean') ck.add('E_ARG', `float16NewestPage must be a boolean, got ${describeValue(o.float16NewestPage)}`);
  const rows = plan && rowsValue !== undefined && rowsValue !== null ? readCount(ck, rowsValue, 'rows', true, undefined, NON_NEGATIVE) : undefined;
  if (ck.first !== null) {
    into.add(ck.first.code, ck.first.message);
    return null;
  }
  return {
    batch, maxSeqLen, numKvHeads, headDim, dtype: keyDtype === valueDtype ? keyDtype : null, keyDtype, valueDtype,
    window, sinkTokens: sinkTokens || 0,  // (-0: 0)
    float16NewestPage,  // (as asked: a cache has one only for an int8 / int4 block, KVCache.float16NewestPage)
    rows,
  };
}

/**
 * Reads createKVCache's options into `ck` (JS's own rules); returns the
 * geometry for C's entry, or null when a rule failed.
 */
export function readCacheConfig(ck, config) {
  return readGeometry(ck, config, false, undefined);
}

/**
 * kvCacheSize's options and rows (default: maxSeqLen) into `ck` (JS's own
 * rules; the range of rows, 0 .. maxSeqLen, is C's). Returns the geometry
 * with its `rows` (undefined: none given), or null when a rule failed.
 */
export function readCachePlan(ck, config, rows) {
  return readGeometry(ck, config, true, rows);
}

/** allocTensor's dtype and dims (the dims read once); returns the dims array, or null. */
export function readAllocArgs(ck, dtype, dims) {
  const known = HEAP_DTYPES.map((d) => `'${d}'`).join(', ');
  if (dtype === undefined || dtype === null) ck.add('E_ARG', `dtype is missing; expected one of ${known}`);
  else if (typeof dtype !== 'string') ck.add('E_ARG', `dtype must be a string, got ${describeValue(dtype)}`);
  else if (!HEAP_DTYPES.includes(dtype)) ck.add('E_DTYPE', `dtype '${dtype}' is not supported; expected one of ${known}`);
  const arr = readDims(ck, dims, null);  // the snapshot
  if (arr && arr.length === 0) ck.add('E_RANK', 'dims is empty; expected rank 1 or more');
  else if (arr && checkDimValues(ck, arr, null)) {
    const block = WEIGHT_DTYPES[dtype]?.block ?? 1;
    if (arr.at(-1) % block !== 0) {
      ck.add('E_DIMS', `dims ${fmtDims(arr)}: a ${dtype} tensor's rows hold whole blocks of ${block} values; expected the last dim to be a multiple of ${block}, got ${arr.at(-1)}`);
    }
  }
  return arr;
}

/** sdpa.reserve's bytes: a finite non-negative number below 4 GiB (E_OOM above: the wasm heap's limit). */
export function checkReserveBytes(ck, bytes, fmtBytes) {
  if (bytes === undefined || bytes === null) ck.add('E_ARG', 'bytes is missing; expected a non-negative number');
  else if (typeof bytes !== 'number') ck.add('E_ARG', `bytes must be a number, got ${describeValue(bytes)}`);
  else if (!(bytes >= 0) || !Number.isFinite(bytes)) ck.add('E_ARG', `bytes is ${bytes}; expected a finite non-negative number`);
  else if (bytes > 0xffffffff) ck.add('E_OOM', `bytes is ${fmtBytes(bytes)}; the wasm heap holds at most 4 GiB`);
}

// ---------------------------------------------------------------------------
// Saved KV state (js/kv-state.js, docs/FORMAT.md): save's rows, load's options

export const SAVE_OPTIONS = Object.freeze(['start', 'length', 'meta', 'into']);
export const SAVE_CHUNK_OPTIONS = Object.freeze(['start', 'length', 'meta', 'chunkBytes']);
export const LOAD_OPTIONS = Object.freeze(['maxSeqLen', 'signal']);
export const SAVE_STREAM_OPTIONS = Object.freeze([...SAVE_CHUNK_OPTIONS, 'signal']);

/** chunkBytes of saveChunks / saveStream: a positive integer up to 2^30 (default 4 MiB). */
export function checkChunkBytes(ck, value) {
  return checkSize(ck, value, 'chunkBytes', { required: false, dflt: 4 << 20, max: 1 << 30 });
}

/**
 * save's rows (save, saveChunks, saveStream and the group's, for each
 * layer): start (default 0), length (default: the rest of the rows written).
 * JS checks what only it sees: the values' JS types and that they are
 * integers; their ranges and the rows written (a windowed cache's evicted
 * rows too) are C's, at the entry (sdpa_wasm_kv_save_begin). `st`:
 * hooks.state's { alive, length }. Returns [start, length] (nulls when JS
 * rejected them).
 */
export function checkSaveRows(ck, st, start, length) {
  let s = null, n = null;
  if (start === undefined || start === null) s = 0;
  else if (typeof start !== 'number') ck.add('E_ARG', `start must be a number, got ${describeValue(start)}`);
  else if (!Number.isSafeInteger(start)) ck.add('E_START_POS', `start is ${start}; expected a non-negative integer`);
  else s = start;
  // (the default: the rest of the rows written from start, when start is a row)
  if (length === undefined || length === null) n = s !== null && s >= 0 && st.alive ? Math.max(st.length - s, 0) : 0;
  else if (typeof length !== 'number') ck.add('E_ARG', `length must be a number, got ${describeValue(length)}`);
  else if (!Number.isSafeInteger(length)) ck.add('E_DIMS', `length is ${length}; expected a non-negative integer`);
  else n = length;
  return [s, n];
}

/**
 * loadKVCache's maxSeqLen: absent (0: the saved one) or a positive integer up
 * to the key index limit. Written in both languages, one wording (kv_state.c
 * sdpa_kv_load_begin is C callers' check): one number's range, refused before
 * any source byte is read, where C's check comes with a loader JS does not
 * make for a rejected call; 0 is JS's own E_DIMS (to C it is "the saved one").
 */
export function checkLoadMaxSeqLen(ck, value) {
  return checkSize(ck, value, 'maxSeqLen', { required: false, dflt: 0, max: KEY_INDEX_LIMIT });
}

// keepRows(start, rows)

/**
 * KVCache.keepRows(start, rows): row start + rows[k] becomes row start + k,
 * then the cache ends at start + rows.length. Snapshot: `rows` (an Array or
 * an Int32Array) is read once into an Int32Array. Checked here: the JS types
 * and start an integer; the list's order and the span's rules (the rows
 * written, truncate's for an empty list, a windowed cache's evicted rows) are
 * C's, at the entry. Returns the Int32Array when every rule here held, else null.
 */
export function checkKeepRows(ck, start, rows) {
  let list = null;
  if (typeof start !== 'number') ck.add('E_ARG', `start must be a number, got ${describeValue(start)}`);
  if (rows === undefined || rows === null) ck.add('E_ARG', 'rows is missing; expected an Array or Int32Array of row offsets from start');
  else list = readInt32List(ck, rows, 'rows', 'row offsets from start');
  if (typeof start !== 'number' || list === null) return null;
  if (!Number.isInteger(start) || start > INT32_MAX) {  // (C takes an int32; a negative one is C's rule)
    ck.add('E_START_POS', `start is ${start}; expected a non-negative integer`);
    return null;
  }
  return list;
}

// ---------------------------------------------------------------------------
// attendMany(items)

/** An item of attendMany: its cache, its query and attend's options. */
export const MANY_ITEM_OPTIONS = Object.freeze(['cache', 'q', ...ATTEND_OPTIONS]);
/** An item of stepMany: its cache, q, k, v, startPos (where its rows are written; default: its length) and step's options. */
export const STEP_MANY_ITEM_OPTIONS = Object.freeze(['cache', 'q', 'k', 'v', 'startPos', ...STEP_OPTIONS]);

const ITEM_INPUTS = Object.freeze([['Q', 'query'], ['M', 'attnMask'], ['S', 'sinks'], ['T', 'treeMask'], ['K', 'key'], ['V', 'value'], ['RC', 'rotary.cos'], ['RS', 'rotary.sin']]);

/**
 * The rules between checked items (C's sdpa_check_attend_many, in its
 * order): one item per cache; an item's out overlapping another's out or
 * inputs. `items`: [{ cache, P }] (P: the item's checked plan, kv-cache.js #plan, or null).
 */
export function checkManyItems(ck, items) {
  // each item's out and inputs as regions, once (an item without out gets a temporary one: it overlaps nothing)
  const regions = items.map(({ P }) => {
    if (!P) return null;
    const inputs = [];
    for (let w = 0; w < ITEM_INPUTS.length; w++) {
      const x = P[ITEM_INPUTS[w][0]];
      if (x) inputs.push(w, regionOf(x));
    }
    return { out: P.O ? regionOf(P.O) : null, inputs };
  });
  const tail = "; out must not overlap any input or another item's out";
  /** The first input of item `of` (in ITEM_INPUTS order) that `out` overlaps, or -1. */
  const hit = (out, of) => {
    if (out === null) return -1;
    for (let x = 0; x < of.inputs.length; x += 2) if (overlaps(out, of.inputs[x + 1])) return of.inputs[x];
    return -1;
  };
  for (let j = 1; j < items.length; j++) {
    for (let i = 0; i < j; i++) {
      const a = items[i], b = items[j];
      if (a.cache !== null && a.cache === b.cache) {
        ck.add('E_ARG', `items[${j}] uses the same cache as items[${i}]; one item per cache`);
        return;
      }
      const ra = regions[i], rb = regions[j];
      if (ra === null || rb === null) continue;
      if (ra.out && rb.out && overlaps(rb.out, ra.out)) { ck.add('E_ARG', `items[${j}].out shares memory with items[${i}].out${tail}`); return; }
      // (the first input in ITEM_INPUTS order, j's out before i's: C's order)
      const wb = hit(rb.out, ra), wa = hit(ra.out, rb);
      if (wb >= 0 && (wa < 0 || wb <= wa)) { ck.add('E_ARG', `items[${j}].out shares memory with items[${i}].${ITEM_INPUTS[wb][1]}${tail}`); return; }
      if (wa >= 0) { ck.add('E_ARG', `items[${i}].out shares memory with items[${j}].${ITEM_INPUTS[wa][1]}${tail}`); return; }
    }
  }
}
