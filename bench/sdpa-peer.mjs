// sdpa-wasm measured the way a decode loop uses it: cache.attend with heap
// tensors (sdpa.allocTensor) for q and out, over a KV cache filled with seeded
// random data. The timed call is attend only (the cache already holds the new
// token's K/V, as after cache.update).
//
// Several caches of the same shape are used in rotation so that the KV data of
// one call is not still in the last-level cache from the previous call (as in a
// model, where every layer has its own cache): at least ROTATE_BYTES in all.
import { createSdpa } from '../js/index.js';
import { timeIt, compareRows } from './util.mjs';
import { work } from './shapes.mjs';

export const ROTATE_BYTES = 96 << 20;  // 3× the 32 MiB L3 of the reference machine

/** build: which sdpa-wasm build (run.mjs forces simd-threads for the plain rows, relaxed-threads for the relaxed ones). */
export async function createSdpaPeer({ threads, build }) {
  const sdpa = await createSdpa({ threads, build });

  /**
   * One shape through cache.attend. dtype 'float16' / 'int8': the caches store
   * compact rows; the output is checked (checkStored) against the float64
   * reference over the values they store (cache.read), and `vsFloat32` reports
   * its distance to the reference over the original float32 data (`check`).
   */
  async function runShape(s, data, timing, check, opts = {}) {
    const shape = openShape(s, data, check, opts);
    try {
      const memBefore = shape.heapBytes();
      const r = await timeIt(shape.call, timing);
      const memAfter = shape.heapBytes();
      delete r.samples;
      return { ...shape.result, time: r, heapGrewDuringTiming: memAfter !== memBefore };
    } finally {
      shape.dispose();
    }
  }

  /**
   * The caches, q and out of one shape, checked once: { call(i), result, heapBytes(), dispose() }.
   * (bench/child.mjs times two builds' shapes interleaved through this.)
   */
  function openShape(s, data, check, { dtype = 'float32', checkStored = null } = {}) {
    const { Hq, Hkv, D, Sq, keys } = s;
    // 'int8/int4': K int8, V int4
    const [keyDtype, valueDtype = keyDtype] = dtype.split('/');
    const share = { float32: 1, float16: 0.5, int8: 0.26, int4: 0.16 };
    const bytes = work(s).kvBytes * (share[keyDtype] + share[valueDtype]) / 2;
    const nCaches = Math.max(1, Math.min(64, Math.ceil(ROTATE_BYTES / bytes)));
    const caches = [];
    let q, out;
    try {
      const k = { data: data.k, dims: [1, keys, Hkv, D] };
      const v = { data: data.v, dims: [1, keys, Hkv, D] };
      for (let i = 0; i < nCaches; i++) {
        const c = sdpa.createKVCache({ batch: 1, maxSeqLen: keys, numKvHeads: Hkv, headDim: D, keyDtype, valueDtype });
        caches.push(c);
        c.update(k, v, 0);
      }
      q = sdpa.allocTensor('float32', [1, Sq, Hq, D]);
      out = sdpa.allocTensor('float32', [1, Sq, Hq, D]);
      q.data.set(data.q);
      const opts = { startPos: s.past, isCausal: s.causal, out };
      caches[0].attend(q, opts);
      const output = Float32Array.from(out.data);
      let verdict, vsFloat32 = null;
      if (dtype === 'float32') verdict = check(output);
      else {
        const stored = caches[0].read(0, keys);
        verdict = checkStored(output, stored.k.data, stored.v.data);
        vsFloat32 = check(output);
      }
      // every rotated cache must give the same answer (they hold the same data)
      caches[nCaches - 1].attend(q, opts);
      const same = compareRows(out.data, output, [...Array(Sq).keys()], Hq * D, 0);
      const cacheBytes = caches[0].bytes;
      const dispose = () => {
        for (const c of caches) c.dispose();
        if (q) q.dispose();
        if (out) out.dispose();
      };
      return {
        call: (i) => { caches[i % nCaches].attend(q, opts); },
        heapBytes: () => q.data.buffer.byteLength,
        result: { check: verdict, vsFloat32, dtype, cacheBytes, rotationConsistent: same.ok, caches: nCaches, output },
        dispose,
      };
    } catch (e) {
      for (const c of caches) c.dispose();
      if (q) q.dispose();
      if (out) out.dispose();
      throw e;
    }
  }

  return { info: sdpa.info, runShape, openShape, dispose: () => sdpa.dispose() };
}
