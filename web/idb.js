// One IndexedDB request for the demo pages' workers (kept chats, saved caches): opens
// database `db` (version 1, one object store `store`, made on first use), runs f(store)
// in a transaction of `mode`, and resolves to the request's result once the transaction
// completes. A blocked open or an aborted transaction rejects: storage errors reach the page.
export function idbRequest(db, store, mode, f) {
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
