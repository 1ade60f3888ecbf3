// kv-cache-group.js: the KV caches of all the layers of a model, as one object
// (CONTRACT.md section 3, "Cache groups"). A model has 16-32 layers; a group
// makes create, fork, truncate and dispose one call each. Its layers are
// ordinary KVCaches for the per-layer calls (update, attend, step, read).
//
// Every group call checks every layer before it changes any (the first rule
// in table order wins, ties to the lowest layer; the message names the
// layer), so a rejected call leaves every layer as it was. fork() is all or
// nothing: on E_OOM the forks made so far are disposed again.

import { Checks } from './rules.js';
import { cacheHooks } from './kv-cache.js';
import { saveGroup, saveGroupChunks, saveGroupStream } from './kv-state.js';

/**
 * make(item, name) for every item, all or nothing: `name` ("KVCacheGroup.fork:
 * layer 3") is what its error starts with; when one throws (E_OOM), the
 * caches made so far are disposed.
 */
export function makeEach(fn, items, make) {
  const made = [];
  try {
    for (const item of items) made.push(make(item, `${fn}: layer ${made.length}`));
  } catch (e) {
    for (const c of made) c.dispose();
    throw e;
  }
  return made;
}

export class KVCacheGroup {
  #layers;
  #core;

  /** Made by sdpa.createKVCacheGroup and group.fork. */
  constructor(core, layers) {
    this.#core = core;
    this.#layers = Object.freeze(layers.slice());
  }

  /** The layers' caches, in order (a frozen array). */
  get layers() { return this.#layers; }

  /** Rows every layer holds: the smallest of the layers' lengths. */
  get length() {
    let n = Infinity;
    for (const c of this.#layers) n = Math.min(n, c.length);
    return n;
  }

  /** The sum of the layers' cache.bytes. */
  get bytes() {
    let b = 0;
    for (const c of this.#layers) b += c.bytes;
    return b;
  }

  /** True once every layer was disposed (by group.dispose(), sdpa.dispose() or one by one). */
  get disposed() { return this.#layers.every((c) => c.disposed); }

  [Symbol.iterator]() { return this.#layers[Symbol.iterator](); }

  /** Every layer's rules for `fn`, each message naming its layer; throws the first in table order. */
  #checkEach(fn, rule) {
    const ck = new Checks(fn);
    this.#core.checkAlive(ck);
    for (let i = 0; i < this.#layers.length; i++) {
      ck.prefix = `layer ${i}: `;
      rule(this.#layers[i], ck);
    }
    ck.prefix = '';
    ck.done();
  }

  /** truncate(n) on every layer (rollback of the same tokens in all of them), or on none. */
  truncate(length) {
    const fn = 'KVCacheGroup.truncate';
    let n = null;
    this.#checkEach(fn, (c, ck) => { n = cacheHooks.checkTruncate(c, ck, length); });
    this.#checkEach(fn, (c, ck) => cacheHooks.truncateRules(c, ck, n));  // (C's, every layer before any changes)
    for (const c of this.#layers) cacheHooks.truncateChecked(c, fn, n);
  }

  /** A new group whose layers fork this group's, copy-on-write (KVCache.fork); all or nothing. */
  fork() {
    const fn = 'KVCacheGroup.fork';
    this.#checkEach(fn, (c, ck) => cacheHooks.checkAlive(c, ck));
    return new KVCacheGroup(this.#core, makeEach(fn, this.#layers, (c, name) => cacheHooks.fork(c, name)));
  }

  /** Every layer saved (KVCache.save's options, for each layer; one meta) as one Uint8Array: sdpa.loadKVCacheGroup reads it. */
  save(opts) { return saveGroup(this, this.#layers, cacheHooks, opts); }

  /** save() as an iterator of Uint8Array chunks (chunkBytes, default 4 MiB) of a snapshot of every layer taken now. */
  saveChunks(opts) { return saveGroupChunks(this, this.#layers, cacheHooks, opts); }

  /** save() as a ReadableStream of Uint8Array chunks. */
  saveStream(opts) { return saveGroupStream(this, this.#layers, cacheHooks, opts); }

  /** Disposes every layer (pages shared with a fork stay with it). A second call is a no-op. */
  dispose() {
    for (const c of this.#layers) c.dispose();
  }

  get [Symbol.toStringTag]() { return 'KVCacheGroup'; }
}
