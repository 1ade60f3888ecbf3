// Moving a conversation's KV cache from one worker to another: the first worker
// saves it, the bytes are transferred with postMessage (no copy), and the second
// loads it and goes on decoding exactly where the first stopped. (In a browser the
// same code moves a cache between Web Workers, or to IndexedDB / OPFS.)
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { createSdpa } from 'sdpa-wasm';

const [Hq, Hkv, D] = [4, 2, 32];
const tensor = (S, H, f) => ({ data: new Float32Array(S * H * D).map((_, i) => f(i)), dims: [1, S, H, D] });
const step = (cache, seed) => cache.step(
  tensor(1, Hq, (i) => Math.sin(0.1 * i + seed)), tensor(1, Hkv, (i) => Math.cos(0.2 * i - seed)), tensor(1, Hkv, (i) => Math.sin(0.3 * i + seed)));
const show = (out) => Array.from(out.data.slice(0, 3), (x) => x.toFixed(4)).join(', ');

if (isMainThread) {
  const run = (role, extra) => new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: { role } });
    w.once('message', resolve);
    w.once('error', reject);
    if (extra) w.postMessage(extra, [extra.bytes.buffer]);   // transfer: the buffer moves, nothing is copied
  });
  const first = await run('first');
  console.log(`worker 1 decoded ${first.length} tokens and saved ${first.bytes.length} bytes`);
  const sdpa = await createSdpa();                           // (the bytes are a portable value: any instance reads them)
  const { cache } = await sdpa.loadKVCache(first.bytes);
  console.log(`the main thread reads them too: ${cache.length} rows, ${cache.dtype}`);
  sdpa.dispose();
  const second = await run('second', { bytes: first.bytes });
  console.log(`worker 2 restored ${second.restored} rows; its next step equals worker 1's own: ${second.next === first.next}`);
  console.log(`next step out[0..2] = ${second.next}`);
} else if (workerData.role === 'first') {
  const sdpa = await createSdpa();
  const cache = sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: Hkv, headDim: D, dtype: 'int8' });
  for (let t = 0; t < 20; t++) step(cache, t);
  const bytes = cache.save();
  const next = show(step(cache.fork(), 20));                 // what the 21st step gives here, for comparison
  parentPort.postMessage({ length: cache.length, bytes, next }, [bytes.buffer]);
  sdpa.dispose();
} else {
  parentPort.once('message', async ({ bytes }) => {
    const sdpa = await createSdpa();
    const { cache } = await sdpa.loadKVCache(bytes);
    parentPort.postMessage({ restored: cache.length, next: show(step(cache, 20)) });
    sdpa.dispose();
  });
}
