// storage.js: the demo pages' one storage layer, for both workers (bench-worker.js: the saved
// caches; chat-worker.js: the kept chats). A store keeps values by key: a file named `key` in the
// origin's OPFS root where this worker can write one (createWritable), else the same key in
// IndexedDB (database `db`, version 1, one object store `store`, made on first use). A value is a
// saved state, streamed into OPFS chunk by chunk (no second copy in memory; IndexedDB takes the
// whole bytes), or a string. Errors while writing reach the caller (a full disk is shown, not hidden).

/**
 * One IndexedDB request: runs f(objectStore) in a transaction of `mode` and resolves to the request's
 * result once the transaction completes. A blocked open or an aborted transaction rejects.
 */
function idbRequest(db, store, mode, f) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(db, 1);
    open.onupgradeneeded = () => open.result.createObjectStore(store);
    open.onerror = () => reject(open.error);
    open.onblocked = () => reject(new Error('IndexedDB is blocked by another tab holding an older version open'));
    open.onsuccess = () => {
      const tx = open.result.transaction(store, mode);
      const req = f(tx.objectStore(store));
      tx.oncomplete = () => { open.result.close(); resolve(req.result); };
      tx.onerror = () => { open.result.close(); reject(tx.error); };
      tx.onabort = () => { open.result.close(); reject(tx.error ?? new Error('IndexedDB transaction aborted')); };
    };
  });
}

/**
 * The store of `db` / `store`; `opfs: false` skips OPFS (to try the IndexedDB path where OPFS works).
 *   put(key, { stream, bytes }) -> { storage: 'OPFS' | 'IndexedDB', bytes }  stream(): a ReadableStream
 *       of the value's bytes (OPFS only); bytes(): the value as a Uint8Array or a string (IndexedDB, and
 *       OPFS when there is no stream). `bytes` in the answer: the size stored.
 *   get(key) -> { value: File (OPFS) | Uint8Array | string (IndexedDB), storage } or null if none
 *   keys() -> every key in either place; remove(key) removes it from both.
 */
export function openStore({ db, store, opfs = true }) {
  const idb = (mode, f) => idbRequest(db, store, mode, f);
  const root = async () => {
    if (!opfs) return null;
    try { return await navigator.storage.getDirectory(); } catch { return null; }
  };
  return {
    async put(key, { stream = null, bytes }) {
      const dir = await root();
      if (dir) {
        let file = null, writable = null;
        try {
          file = await dir.getFileHandle(key, { create: true });
          writable = await file.createWritable();
        } catch { /* no createWritable here (Safari's workers): IndexedDB */ }
        if (writable) {
          if (stream) await stream().pipeTo(writable);
          else { await writable.write(bytes()); await writable.close(); }
          return { storage: 'OPFS', bytes: (await file.getFile()).size };
        }
      }
      const value = bytes();
      await idb('readwrite', (s) => s.put(value, key));
      return { storage: 'IndexedDB', bytes: typeof value === 'string' ? value.length : value.byteLength };
    },
    async get(key) {
      const dir = await root();
      if (dir) {
        try { return { value: await (await dir.getFileHandle(key)).getFile(), storage: 'OPFS' }; } catch { /* not in OPFS */ }
      }
      let value;
      try { value = await idb('readonly', (s) => s.get(key)); } catch { return null; }
      return value == null ? null : { value, storage: 'IndexedDB' };
    },
    async keys() {
      const all = new Set();
      const dir = await root();
      if (dir) for await (const [name, h] of dir.entries()) if (h.kind === 'file') all.add(name);
      try { for (const k of await idb('readonly', (s) => s.getAllKeys())) all.add(k); } catch { /* no IndexedDB */ }
      return [...all];
    },
    async remove(key) {
      const dir = await root();
      if (dir) { try { await dir.removeEntry(key); } catch { /* not in OPFS */ } }
      try { await idb('readwrite', (s) => s.delete(key)); } catch { /* no IndexedDB */ }
    },
  };
}
