// many.js: sdpa.attendMany(items): several caches' attention in
// one call, on one dispatch of the thread pool (C: sdpa_kv_cache_attend_many).
// Each item is { cache, q, ...KVCache.attend's options } and gets exactly the
// bits of cache.attend(q, opts). The snapshot rule holds over all items: each
// item is read once, then every item is checked (messages 'items[i]: ...'),
// then the rules between items, before anything is written.
import { SdpaError } from './errors.js';
import { Checks, MANY_ITEM_OPTIONS, STEP_MANY_ITEM_OPTIONS, checkManyItems } from './rules.js';
import { readOptions, inspectTensor, describeValue } from './snapshot.js';
import { MANY_MAX } from './abi.js';
import { cacheHooks } from './kv-cache.js';
import { isArray } from './intrinsics.js';

/** attendMany for the instance of `core`; returns the outputs, in item order. */
export function attendMany(core, items) {
  return many(core, items, false);
}

/**
 * stepMany: each item { cache, q, k, v, startPos, ...step's options } is
 * cache.step(q, k, v, startPos, opts) of its own (C: sdpa_kv_cache_step_many).
 */
export function stepMany(core, items) {
  return many(core, items, true);
}

function many(core, items, step) {
  const fn = step ? 'sdpa.stepMany' : 'sdpa.attendMany';
  const ck = new Checks(fn);
  if (!isArray(items)) {
    ck.add('E_ARG', `items must be an Array of { cache, q, ...options }, got ${describeValue(items)}`);
    ck.done();
  }
  // snapshot: the length once, then each item once
  const n = items.length;
  if (n < 1) ck.add('E_ARG', `items is empty; expected 1 .. ${MANY_MAX} items`);
  else if (n > MANY_MAX) ck.add('E_ARG', `${n} items; at most ${MANY_MAX} in one call`);
  ck.done();
  const snaps = [];
  for (let i = 0; i < n; i++) {
    ck.prefix = `items[${i}]: `;
    const item = items[i];
    const o = readOptions(ck, item, step ? STEP_MANY_ITEM_OPTIONS : MANY_ITEM_OPTIONS);
    const Q = inspectTensor(ck, 'query', o.q, 'input');
    const K = step ? inspectTensor(ck, 'key', o.k, 'input') : null;
    const V = step ? inspectTensor(ck, 'value', o.v, 'input') : null;
    snaps.push({ o, Q, K, V, cache: o.cache ?? null });
  }
  // state and rules, item by item, then between items
  core.checkAlive(ck);
  const checked = [];
  for (let i = 0; i < n; i++) {
    ck.prefix = `items[${i}]: `;
    const { o, Q, K, V, cache } = snaps[i];
    if (cache === null || typeof cache !== 'object' || !cacheHooks.isCacheOf(cache, core)) {
      ck.add('E_ARG', `cache must be a KVCache of this instance, got ${describeValue(cache)}`);
      checked.push({ cache: null, P: null });
      continue;
    }
    if (step) {
      const r = cacheHooks.checkStepItem(cache, ck, Q, K, V, o.startPos, o);
      r.P.K = r.K; // (the rules between items count key and value as inputs)
      r.P.V = r.V;
      checked.push({ cache, P: r.P, sp: r.sp, ptr: r.ptr, K: r.K, V: r.V });
      continue;
    }
    const r = cacheHooks.checkAttendItem(cache, ck, Q, o);
    checked.push({ cache, P: r.P, sp: r.sp, ptr: r.ptr, K: null, V: null });
  }
  ck.prefix = '';
  checkManyItems(ck, checked);
  ck.done();
  return core.runMany(fn, checked, step);
}

