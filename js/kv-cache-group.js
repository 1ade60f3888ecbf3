// kv-cache-group.js: the KV caches of all the layers of a model, as one object
// (CONTRACT.md section 3, "Cache groups"). A model has 16-32 layers; a group
// makes create, fork, truncate and dispose one call each. Its layers are
// ordinary KVCaches for the per-layer calls (update, attend, step, read).
//
// The group's state machine is C's (src/cache/kv_group.c): JS checks what
// only JS sees (liveness, length's JS type), writes the layers' pointers into
// the instance's int32 block and calls ONE entry, which checks every layer
// before it changes any (the first rule in table order wins, ties to the
// lowest layer; the message names the layer) and is all or nothing (E_OOM
// while forking: the forks made are freed again).

import { Checks } from './rules.js';
import { cacheHooks } from './kv-cache.js';
import { saveGroup, saveGroupChunks, saveGroupStream } from './kv-state.js';

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

  /** The layers' cache pointers in the instance's int32 block, room for as many after them (a fork's); its address. */
  #putLayers(fn) {
    const core = this.#core, n = this.#layers.length, at = core.idsBlock(fn, 2 * n, `${n} layers' cache pointers and room for ${n} more`);
    const u32 = core.views().u32;
    this.#layers.forEach((c, i) => { u32[(at >>> 2) + i] = cacheHooks.ptr(c); });
    return at;
  }

  /** truncate(n) on every layer (rollback of the same tokens in all of them), or on none. */
  truncate(length) {
    const fn = 'KVCacheGroup.truncate';
    let n = null;
    this.#checkEach(fn, (c, ck) => { n = cacheHooks.checkTruncate(c, ck, length); });
    const core = this.#core;
    core.checkEntry(core.M._sdpa_wasm_kv_group_truncate(core.ctx, this.#putLayers(fn), this.#layers.length, n), fn);
  }

  /** A new group whose layers fork this group's, copy-on-write (KVCache.fork); all or nothing. */
  fork() {
    const fn = 'KVCacheGroup.fork';
    this.#checkEach(fn, (c, ck) => cacheHooks.checkAlive(c, ck));
    const core = this.#core, n = this.#layers.length, at = this.#putLayers(fn), outAt = at + 4 * n;
    core.checkEntry(core.M._sdpa_wasm_kv_group_fork(core.ctx, at, n, outAt), fn);
    const u32 = core.views().u32;
    return new KVCacheGroup(core, this.#layers.map((c, i) => cacheHooks.adoptFork(c, u32[(outAt >>> 2) + i])));
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
