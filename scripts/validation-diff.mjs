#!/usr/bin/env node
// validation-diff.mjs: the differential harness of issue 40 item 1. Many bad
// calls through the public API (single failures and pairs of them, so that
// the contract's ordering between JS-only rules and C's rules is exercised),
// each recorded as { code, message } (or 'OK' when the call did not throw).
//
//   node scripts/validation-diff.mjs --write   records tests/js/fixtures/validation-diff.json
//   node scripts/validation-diff.mjs [--all]   compares the current build against it: counts, and the differences
//                                              the new ordering does not explain (--all: every difference)
//
// The fixture was recorded from main BEFORE "validate once, at the C entry";
// tests/js/validation-diff.test.js holds the current build to it, the cases
// the new ordering changes listed there.

import { writeFileSync, readFileSync, mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
export const FIXTURE = join(here, '..', 'tests', 'js', 'fixtures', 'validation-diff.json');

const f32 = (dims, x = 0.5) => ({ data: new Float32Array(dims.reduce((a, b) => a * b, 1)).fill(x), dims });

/** Bad values of each cache option: [label, value]. */
const GEOMETRY_BAD = {
  batch: [['0', 0], ['-1', -1], ['1.5', 1.5], ['str', '1'], ['2^31', 2 ** 31], ['1e12', 1e12]],
  maxSeqLen: [['0', 0], ['-4', -4], ['NaN', NaN], ['str', '8'], ['missing', undefined], ['2^31', 2 ** 31], ['limit+1', 2 ** 31 - 65536]],
  numKvHeads: [['0', 0], ['-2', -2], ['2.5', 2.5], ['bool', true], ['missing', undefined], ['2^40', 2 ** 40]],
  headDim: [['0', 0], ['-8', -8], ['Inf', Infinity], ['str', 'x'], ['missing', undefined], ['2^31', 2 ** 31], ['huge', 1 << 30]],
  dtype: [['bf16', 'bfloat16'], ['num', 4]],
  keyDtype: [['q8', 'q8_0'], ['num', 1]],
  window: [['0', 0], ['-1', -1], ['0.5', 0.5], ['str', '4'], ['2^31', 2 ** 31]],
  sinkTokens: [['-1', -1], ['1.5', 1.5], ['str', '1'], ['>window', 9]],
  float16NewestPage: [['num', 1], ['str', 'yes']],
};
const GOOD_GEOMETRY = { maxSeqLen: 8, numKvHeads: 2, headDim: 8 };

function geometryCases() {
  const cases = [];
  const fields = Object.keys(GEOMETRY_BAD);
  const make = (changes) => {
    const o = { ...GOOD_GEOMETRY };
    for (const [f, v] of changes) {
      if (v === undefined) delete o[f];
      else o[f] = v;
      if ((f === 'window' || f === 'sinkTokens') && o.window === undefined && f === 'sinkTokens') o.window = 4;
    }
    return o;
  };
  for (const f of fields) for (const [l, v] of GEOMETRY_BAD[f]) cases.push([`${f}=${l}`, [[f, v]]]);
  for (let a = 0; a < fields.length; a++) {
    for (let b = a + 1; b < fields.length; b++) {
      for (const [la, va] of GEOMETRY_BAD[fields[a]]) {
        for (const [lb, vb] of GEOMETRY_BAD[fields[b]]) cases.push([`${fields[a]}=${la},${fields[b]}=${lb}`, [[fields[a], va], [fields[b], vb]]]);
      }
    }
  }
  const out = [];
  for (const [label, changes] of cases) {
    const o = () => make(changes);
    out.push([`createKVCache ${label}`, (s) => s.createKVCache(o())]);
    out.push([`kvCacheSize ${label}`, (s) => s.kvCacheSize(o())]);
  }
  for (const [l, rows] of [['-1', -1], ['9', 9], ['1.5', 1.5], ['str', '2'], ['2^40', 2 ** 40]]) {
    out.push([`kvCacheSize rows=${l}`, (s) => s.kvCacheSize(GOOD_GEOMETRY, rows)]);
    for (const f of ['headDim', 'maxSeqLen', 'window']) {
      for (const [lb, vb] of GEOMETRY_BAD[f]) out.push([`kvCacheSize rows=${l},${f}=${lb}`, (s) => s.kvCacheSize(make([[f, vb]]), rows)]);
    }
  }
  out.push(['createKVCache no options', (s) => s.createKVCache()]);
  out.push(['createKVCache page too big', (s) => s.createKVCache({ maxSeqLen: 8, numKvHeads: 1, headDim: 1 << 24 })]);
  out.push(['createKVCacheGroup layer 1 bad', (s) => s.createKVCacheGroup([GOOD_GEOMETRY, { ...GOOD_GEOMETRY, headDim: 0 }])]);
  out.push(['createKVCacheGroup layer 0 js, layer 1 c', (s) => s.createKVCacheGroup([{ ...GOOD_GEOMETRY, headDim: 'x' }, { ...GOOD_GEOMETRY, headDim: 0 }])]);
  return out;
}

/** A cache of 8 rows, 2 heads, head dim 8, 4 rows written (`window`: a windowed one with 6 rows written). */
function filledCache(s, window = 0) {
  const c = s.createKVCache({ ...GOOD_GEOMETRY, ...(window ? { window, maxSeqLen: 64 } : {}) });
  const n = window ? 6 : 4;
  c.update(f32([1, n, 2, 8], 0.25), f32([1, n, 2, 8], 0.75), 0);
  return c;
}

const ROW_VALUES = [['-1', -1], ['0', 0], ['3', 3], ['4', 4], ['7', 7], ['9', 9], ['1.5', 1.5], ['str', '1'], ['NaN', NaN], ['2^40', 2 ** 40], ['null', null]];

function rowCases() {
  const out = [];
  for (const win of [0, 4]) {
    const tag = win ? 'windowed ' : '';
    for (const [ls, s0] of ROW_VALUES) {
      out.push([`${tag}truncate ${ls}`, (s) => filledCache(s, win).truncate(s0)]);
      for (const [ln, n] of ROW_VALUES) {
        out.push([`${tag}read ${ls},${ln}`, (s) => filledCache(s, win).read(s0, n)]);
        out.push([`${tag}save start=${ls},length=${ln}`, (s) => filledCache(s, win).save({ start: s0, length: n })]);
      }
      for (const [lr, rows] of [['[]', []], ['[0,2]', [0, 2]], ['[1,1]', [1, 1]], ['[-1]', [-1]], ['[0,9]', [0, 9]], ['[5]', [5]], ['str', 'x']]) {
        out.push([`${tag}keepRows ${ls},${lr}`, (s) => filledCache(s, win).keepRows(s0, rows)]);
      }
    }
  }
  // a disposed cache with row failures
  for (const [ls, s0] of ROW_VALUES) {
    out.push([`disposed truncate ${ls}`, (s) => { const c = filledCache(s); c.dispose(); return c.truncate(s0); }]);
    out.push([`disposed read ${ls},2`, (s) => { const c = filledCache(s); c.dispose(); return c.read(s0, 2); }]);
    out.push([`disposed save start=${ls}`, (s) => { const c = filledCache(s); c.dispose(); return c.save({ start: s0 }); }]);
    out.push([`disposed keepRows ${ls},[0,9]`, (s) => { const c = filledCache(s); c.dispose(); return c.keepRows(s0, [0, 9]); }]);
  }
  return out;
}

/** Attention calls: customSdpa, update, attend, step, with one or two of these faults. */
const ATTN_FAULTS = {
  qRank: (a) => { a.q = f32([2, 4, 8]); },
  qDims: (a) => { a.q = { data: new Float32Array(10), dims: [1, 2, 4, 8] }; },
  qDimZero: (a) => { a.q = f32([1, 0, 4, 8]); },
  qHeadsZero: (a) => { a.q = { data: new Float32Array(0), dims: [1, 2, 0, 8] }; },
  qHeadDim: (a) => { a.q = f32([1, 2, 4, 6]); },
  qFrac: (a) => { a.q = { data: new Float32Array(64), dims: [1, 2.5, 4, 8] }; },
  qBig: (a) => { a.q = { data: new Float32Array(64), dims: [1, 2 ** 33, 4, 8] }; },
  qNotTensor: (a) => { a.q = 5; },
  qInt32: (a) => { a.q = { data: new Int32Array(64), dims: [1, 2, 4, 8] }; },
  kvBatch: (a) => { a.k = f32([2, a.kvLen, 2, 8]); a.v = f32([2, a.kvLen, 2, 8]); },
  kvHeads: (a) => { a.k = f32([1, a.kvLen, 3, 8]); a.v = f32([1, a.kvLen, 3, 8]); },
  kvHeadDim: (a) => { a.k = f32([1, a.kvLen, 2, 4]); a.v = f32([1, a.kvLen, 2, 4]); },
  kvMismatch: (a) => { a.v = f32([1, a.kvLen + 1, 2, 8]); },
  kMissing: (a) => { a.k = undefined; },
  mask: (a) => { a.opts.attnMask = f32([1, 1, 2, 3]); },
  maskDtype: (a) => { a.opts.attnMask = { data: new Int32Array(2 * a.keys), dims: [2, a.keys] }; },
  maskCausal: (a) => { a.opts.attnMask = f32([2, a.keys]); a.opts.isCausal = true; },
  scale: (a) => { a.opts.scale = -1; },
  scaleStr: (a) => { a.opts.scale = 'x'; },
  dropout: (a) => { a.opts.dropoutP = 0.1; },
  window: (a) => { a.opts.window = 0; },
  softcap: (a) => { a.opts.softcap = -2; },
  sinks: (a) => { a.opts.sinks = f32([3]); },
  unknownOpt: (a) => { a.opts.bogus = 1; },
  outDims: (a) => { a.opts.out = f32([1, 2, 4, 7]); },
  outAlias: (a) => { if (a.q && a.q.data) a.opts.out = { data: a.q.data, dims: a.q.dims }; },
  startPos: (a) => { a.startPos = 7; },
  startNeg: (a) => { a.startPos = -1; },
  startFrac: (a) => { a.startPos = 1.5; },
  rotaryDims: (a) => { a.opts.rotary = { cos: f32([16, 3]), sin: f32([16, 4]) }; },
  rotaryPos: (a) => { a.opts.rotary = { cos: f32([16, 4]), sin: f32([16, 4]), positions: [99, 0] }; },
  rotaryInter: (a) => { a.opts.rotary = { cos: f32([16, 4]), sin: f32([16, 4]), interleaved: 1 }; },
  disposedHeap: (a, s) => { const h = s.allocTensor('float32', [1, 2, 4, 8]); h.dispose(); a.q = h; },
  treeMask: (a) => { a.opts.treeMask = f32([2, 3]); },
};
const OP_FAULTS = {
  custom: ['qRank', 'qDims', 'qDimZero', 'qHeadsZero', 'qHeadDim', 'qFrac', 'qBig', 'qNotTensor', 'qInt32', 'kvBatch', 'kvHeads', 'kvHeadDim', 'kvMismatch', 'kMissing', 'mask', 'maskDtype', 'maskCausal', 'scale', 'scaleStr', 'dropout', 'window', 'softcap', 'sinks', 'unknownOpt', 'outDims', 'outAlias', 'startNeg', 'startFrac', 'disposedHeap'],
  update: ['kvBatch', 'kvHeads', 'kvHeadDim', 'kvMismatch', 'kMissing', 'startPos', 'startNeg', 'startFrac', 'unknownOpt', 'rotaryDims', 'rotaryPos', 'rotaryInter'],
  attend: ['qRank', 'qDims', 'qDimZero', 'qHeadDim', 'qFrac', 'qBig', 'qNotTensor', 'mask', 'maskDtype', 'maskCausal', 'scale', 'scaleStr', 'dropout', 'window', 'softcap', 'sinks', 'unknownOpt', 'outDims', 'outAlias', 'startPos', 'startNeg', 'disposedHeap', 'treeMask'],
  step: ['qRank', 'qDims', 'qHeadDim', 'qFrac', 'qNotTensor', 'kvBatch', 'kvHeads', 'kvHeadDim', 'kvMismatch', 'kMissing', 'mask', 'maskCausal', 'scale', 'dropout', 'window', 'softcap', 'sinks', 'unknownOpt', 'outDims', 'outAlias', 'startPos', 'startNeg', 'rotaryDims', 'rotaryPos', 'rotaryInter', 'disposedHeap', 'treeMask'],
};

function attentionArgs(op) {
  // customSdpa: q [1,2,4,8], k/v [1,6,2,8]; cache ops: 8 rows, 4 written, q/k/v of 2 rows at startPos 4
  const kvLen = op === 'custom' ? 6 : 2;
  const keys = op === 'custom' ? 6 : op === 'attend' ? 4 : 6;
  return { q: f32([1, 2, 4, 8]), k: f32([1, kvLen, 2, 8], 0.25), v: f32([1, kvLen, 2, 8], 0.75), kvLen, keys, startPos: op === 'attend' ? 2 : 4, opts: {} };
}

function runOp(op, s, a, disposeCache) {
  if (op === 'custom') return s.customSdpa(a.q, a.k, a.v, { ...a.opts, ...(a.startPos !== 4 ? { startPos: a.startPos } : {}) });
  const c = filledCache(s);
  if (disposeCache) c.dispose();
  if (op === 'update') return c.update(a.k, a.v, a.startPos, a.opts);
  if (op === 'attend') return c.attend(a.q, { startPos: a.startPos, ...a.opts });
  return c.step(a.q, a.k, a.v, a.startPos, a.opts);
}

function attentionCases() {
  const out = [];
  for (const [op, faults] of Object.entries(OP_FAULTS)) {
    const name = op === 'custom' ? 'customSdpa' : `KVCache.${op}`;
    const apply = (list, s) => { const a = attentionArgs(op); for (const f of list) ATTN_FAULTS[f](a, s); return a; };
    for (const f of faults) out.push([`${name} ${f}`, (s) => runOp(op, s, apply([f], s), false)]);
    for (let i = 0; i < faults.length; i++) {
      for (let j = i + 1; j < faults.length; j++) out.push([`${name} ${faults[i]}+${faults[j]}`, (s) => runOp(op, s, apply([faults[i], faults[j]], s), false)]);
    }
    if (op !== 'custom') for (const f of faults) out.push([`disposed ${name} ${f}`, (s) => runOp(op, s, apply([f], s), true)]);
  }
  return out;
}

/**
 * A group's calls (recorded before C made a group's create / fork / truncate
 * one call): each layer's bad geometry, two bad layers, truncate's values on
 * a plain and a windowed layer, a disposed layer.
 */
function groupCases() {
  const out = [];
  const geo = (f, v) => { const o = { ...GOOD_GEOMETRY, [f]: v }; if (v === undefined) delete o[f]; if (f === 'sinkTokens') o.window = 4; return o; };
  for (const [f, bad] of Object.entries(GEOMETRY_BAD)) {
    for (const [l, v] of bad) {
      out.push([`createKVCacheGroup layers[1] ${f}=${l}`, (s) => s.createKVCacheGroup([GOOD_GEOMETRY, geo(f, v)])]);
      out.push([`createKVCacheGroup layers[0] headDim=0, layers[1] ${f}=${l}`, (s) => s.createKVCacheGroup([geo('headDim', 0), geo(f, v)])]);
    }
  }
  out.push(['createKVCacheGroup layers[1] page too big', (s) => s.createKVCacheGroup([GOOD_GEOMETRY, { ...GOOD_GEOMETRY, headDim: 1 << 24 }])]);
  out.push(['createKVCacheGroup layers[0] page too big, layers[1] dtype', (s) => s.createKVCacheGroup([{ ...GOOD_GEOMETRY, headDim: 1 << 24 }, geo('dtype', 'bfloat16')])]);
  out.push(['createKVCacheGroup layers[0] page too big, layers[1] table too big', (s) => s.createKVCacheGroup([{ ...GOOD_GEOMETRY, headDim: 1 << 24 }, { ...GOOD_GEOMETRY, batch: 2 ** 31 - 1, numKvHeads: 2 ** 31 - 1 }])]);
  const filledGroup = (s) => {
    const g = s.createKVCacheGroup([GOOD_GEOMETRY, { ...GOOD_GEOMETRY, window: 4, maxSeqLen: 256 }, GOOD_GEOMETRY]);
    g.layers.forEach((c, i) => { const n = i === 1 ? 70 : i === 2 ? 3 : 4; c.update(f32([1, n, 2, 8], 0.25), f32([1, n, 2, 8], 0.75), 0); });
    return g;
  };
  for (const [l, n] of [...ROW_VALUES, ['2', 2], ['65', 65]]) {
    out.push([`KVCacheGroup.truncate ${l}`, (s) => filledGroup(s).truncate(n)]);
    out.push([`disposed layer KVCacheGroup.truncate ${l}`, (s) => { const g = filledGroup(s); g.layers[2].dispose(); return g.truncate(n); }]);
  }
  out.push(['disposed layer KVCacheGroup.fork', (s) => { const g = filledGroup(s); g.layers[1].dispose(); return g.fork(); }]);
  out.push(['KVCacheGroup.fork', (s) => filledGroup(s).fork()]);
  return out;
}

/** Every case: [name, fn(sdpa)]. */
export function allCases() {
  return [...geometryCases(), ...rowCases(), ...attentionCases(), ...groupCases()];
}

/**
 * Runs every case on a fresh instance per 200 cases; returns { name: 'OK' | [code, message] }.
 * `fromC`, when given, a Set: the names of the cases whose error came back from C (an SdpaError
 * with a `status`); the others were raised by JS.
 */
export async function runCases(createSdpa, fromC = null) {
  const result = {};
  const cases = allCases();
  let s = null;
  for (let i = 0; i < cases.length; i++) {
    if (i % 200 === 0) { if (s) s.dispose(); s = await createSdpa({ threads: 1 }); }
    const [name, fn] = cases[i];
    if (name in result) throw new Error(`two cases named ${name}`);
    try {
      fn(s);
      result[name] = 'OK';
    } catch (e) {
      result[name] = e && e.code ? [e.code, e.message] : ['THROWN', String(e && e.message)];
      if (fromC && e && e.status !== undefined) fromC.add(name);
    }
  }
  s.dispose();
  // the instance-disposed cases: every geometry case on a disposed instance
  const d = await createSdpa({ threads: 1 });
  d.dispose();
  for (const [name, fn] of geometryCases()) {
    try { fn(d); result[`disposed instance ${name}`] = 'OK'; } catch (e) { result[`disposed instance ${name}`] = e && e.code ? [e.code, e.message] : ['THROWN', String(e && e.message)]; }
  }
  return result;
}

/** The cases whose result differs: [[name, before, after]]. */
export function differences(before, after) {
  const out = [];
  for (const name of Object.keys(before)) {
    if (JSON.stringify(before[name]) !== JSON.stringify(after[name])) out.push([name, before[name], after[name]]);
  }
  for (const name of Object.keys(after)) if (!(name in before)) out.push([name, undefined, after[name]]);
  return out;
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** The single-fault cases a pair case is made of, or null when `name` is not a pair. */
function singles(name) {
  const m = /^(.*? )([^ ]+)$/.exec(name);
  if (!m) return null;
  const [, head, faults] = m;
  // (geometry pairs: 'a=x,b=y', whose values may hold a '+'; attention pairs: 'f+g')
  const parts = /^[\w.]+=[^,]*,[\w.]+=/.test(faults) ? faults.split(/,(?=[\w.]+=)/) : faults.includes('+') ? faults.split('+') : null;
  return parts && parts.length === 2 ? parts.map((p) => head + p) : null;
}

/**
 * JS-only failures of the row calls' two values (a case with both values bad, not
 * named as a pair): a non-integer start, JS's own rule, now ranks before C's rule on length.
 */
const JS_ONLY_ROW_RULES = [/^KVCache\.save: start is (NaN|-?\d*\.\d+); expected a non-negative integer$/];

/**
 * Faults only JS sees (a typed array's kind): in a pair whose two faults break
 * a C rule together (treeMask with attnMask), the JS-only one now ranks first.
 */
const JS_ONLY_FAULTS = [/^[\w.]+: [\w.]+\.data is an? \w+; expected /];

/**
 * Why a changed case changed ('pair' / 'disposed' / 'js-first'), or null when the new ordering
 * does not explain it. `afterFromC`: the case's error now comes back from C. A pair whose two
 * faults swapped is explained only when the fault it now reports is JS's (a JS-only failure
 * ranks before every C failure; a swap between two C rules would be a change of C's order).
 */
export function explain(name, before, after, fixture, afterFromC = false) {
  if (after === 'OK' || before === 'OK' || after === undefined) return null;
  const pair = singles(name.replace(/^disposed instance /, ''));
  if (/^disposed /.test(name) && after[0] === 'E_DISPOSED') return 'disposed';
  if (pair) {
    const [a, b] = pair.map((n) => fixture[n]);
    if (!afterFromC && a && b && ((same(after, a) && same(before, b)) || (same(after, b) && same(before, a)))) return 'pair';
    if (a && b && (same(after, a) || same(after, b)) && JS_ONLY_FAULTS.some((r) => r.test(after[1]))) return 'js-first';
  }
  if (JS_ONLY_ROW_RULES.some((r) => r.test(after[1]))) return 'js-first';
  return null;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { createSdpa } = await import('../js/index.js');
  const fromC = new Set();
  const result = await runCases(createSdpa, fromC);
  if (process.argv.includes('--write')) {
    mkdirSync(dirname(FIXTURE), { recursive: true });
    writeFileSync(FIXTURE, JSON.stringify(result, null, 0).replace(/\],"/g, '],\n"') + '\n');
    console.log(`${Object.keys(result).length} cases written to ${FIXTURE}`);
  } else {
    const before = JSON.parse(readFileSync(FIXTURE, 'utf8'));
    const diff = differences(before, result);
    const why = { pair: 0, disposed: 0, 'js-first': 0, unexplained: 0 };
    for (const [name, b, a] of diff) {
      const w = explain(name, b, a, before, fromC.has(name)) ?? 'unexplained';
      why[w]++;
      if (w === 'unexplained' || process.argv.includes('--all')) console.log(`${w}: ${name}\n  before ${JSON.stringify(b)}\n  after  ${JSON.stringify(a)}`);
    }
    console.log(`${Object.keys(result).length} cases: ${Object.keys(result).length - diff.length} same, ${diff.length} changed ` +
      `(${why.pair} pairs now report their JS-only fault, ${why.disposed} disposed now E_DISPOSED, ` +
      `${why['js-first']} a JS-only value rule first, ${why.unexplained} unexplained)`);
  }
}
