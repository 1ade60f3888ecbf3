// The bundled page script: runs decode.js in a module Worker with the options
// of the page URL (?opts=<JSON>), and publishes the result as window.__result.
const opts = JSON.parse(new URLSearchParams(location.search).get('opts') || '{}');
const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
worker.onmessage = (e) => { window.__result = e.data; worker.terminate(); };
worker.onerror = (e) => { window.__result = { ok: false, error: { name: 'WorkerError', message: String(e.message) } }; };
worker.postMessage(opts);
