import { createSdpa, SdpaError } from 'sdpa-wasm';

const sdpa = await createSdpa();                  // { threads: 'auto' }
const [Hq, Hkv, D, maxSeqLen] = [8, 2, 64, 256];
const cache = sdpa.createKVCache({ maxSeqLen, numKvHeads: Hkv, headDim: D });

// Heap tensors live in wasm memory: a step with them copies and allocates nothing.
const q = sdpa.allocTensor('float32', [1, 1, Hq, D]);
const k = sdpa.allocTensor('float32', [1, 1, Hkv, D]);
const v = sdpa.allocTensor('float32', [1, 1, Hkv, D]);
const out = sdpa.allocTensor('float32', [1, 1, Hq, D]);

// Take the pages the loop will write before it starts: then no step grows wasm
// memory, and no view of it goes stale. (Growth replaces the memory's buffer; in
// the single-thread build a saved `const d = q.data` is then detached and writes
// through it are lost. Read t.data again after growth, or write with t.set().)
sdpa.reserve(sdpa.kvCacheSize({ maxSeqLen, numKvHeads: Hkv, headDim: D }).poolBytes);

for (let pos = 0; pos < 16; pos++) {
  // (your model writes this token's q, k, v projections here)
  q.data.fill(Math.sin(pos)); k.data.fill(Math.cos(pos)); v.data.fill(pos);
  cache.step(q, k, v, { out });                   // append row pos, attend rows 0..pos (causal)
}
console.log(sdpa.info, out.data.slice(0, 4));

try {
  cache.attend(q, { startPos: 15, is_causal: true });
} catch (e) {
  console.log(e instanceof SdpaError, e.code, e.message);
}
sdpa.dispose();                                    // frees cache + tensors, ends the threads
