// sdpa-wasm measured the way a decode loop uses it: cache.attend with heap
// tensors (sdpa.allocTensor) for q and out, over a KV cache filled with seeded
// random data. The timed call is attend only (the cache already holds the new
// token's K/V, as after cache.update).
//
// Several caches of the same shape are used in rotation so that the KV data of
// one call is not still in the last-level cache from the previous call (as in a
// model, where every layer has its own cache): at least ROTATE_BYTES in all.
import { createSdpa } from '../../js/index.js';
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
   * (bench/lib/child.mjs times two builds' shapes interleaved through this.)
   * hotCache: the one cache of a hot row (openHotShape), instead of rotated caches.
   */
  function openShape(s, data, check, { dtype = 'float32', checkStored = null, hotCache = null } = {}) {
    const { Hq, Hkv, D, Sq, keys } = s;
    // 'int8/int4': K int8, V int4
    const [keyDtype, valueDtype = keyDtype] = dtype.split('/');
    const share = { float32: 1, float16: 0.5, int8: 0.26, int4: 0.16 };
    const bytes = work(s).kvBytes * (share[keyDtype] + share[valueDtype]) / 2;
    const nCaches = hotCache ? 1 : Math.max(1, Math.min(64, Math.ceil(ROTATE_BYTES / bytes)));
    const caches = hotCache ? [hotCache] : [];
    let q, out;
    try {
      const k = { data: data.k, dims: [1, keys, Hkv, D] };
      const v = { data: data.v, dims: [1, keys, Hkv, D] };
      for (let i = caches.length; i < nCaches; i++) {
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
      if (dtype === 'float32' && !hotCache) verdict = check(output);
      else {
        const stored = caches[0].read(0, keys);
        verdict = checkStored(output, stored.k.data, stored.v.data);
        vsFloat32 = hotCache ? null : check(output);
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
        result: { check: verdict, vsFloat32, dtype, cacheBytes, rotationConsistent: same.ok, caches: nCaches, hot: !!hotCache, output },
        dispose,
      };
    } catch (e) {
      for (const c of caches) c.dispose();
      if (q) q.dispose();
      if (out) out.dispose();
      throw e;
    }
  }

  /**
   * A hot row (bench/roofline.mjs): the same call as openShape's, on one cache
   * whose data stays in L2. The cache is the saved state of the shape's last page (rows
   * from the last multiple of 64 below `keys` on, KVCache.save's `start`) loaded back:
   * its rows below that were never written, so every page of its table but the last of
   * each KV head is the pool's zero page (all bytes 0, which every dtype decodes to 0.0).
   * The call (same q, startPos, keys, options) walks the same tiles, chunks and code as
   * the cold one, but reads Hkv + 1 distinct pages. Its output is checked (checkStored)
   * against the float64 reference over what the cache holds (cache.read: zeros, then the
   * last page's rows). What differs from cold data: zero keys give equal scores (no
   * softmax rescale before the last page), and an int8 tile whose values are all zero
   * (scale 0, so weights below 1e-30) skips their int16 quantization (flash_int8.h
   * i8_quant_p_tile). Resolves to openShape's handle; result.cacheBytes counts the pages the
   * cache holds (the zero page is not one of them).
   */
  async function openHotShape(s, data, checkStored, { dtype = 'float32' } = {}) {
    const { Hkv, D, keys } = s;
    const [keyDtype, valueDtype = keyDtype] = dtype.split('/');
    const from = Math.floor((keys - 1) / 64) * 64;
    const full = sdpa.createKVCache({ batch: 1, maxSeqLen: keys, numKvHeads: Hkv, headDim: D, keyDtype, valueDtype });
    let saved;
    try {
      full.update({ data: data.k, dims: [1, keys, Hkv, D] }, { data: data.v, dims: [1, keys, Hkv, D] }, 0);
      saved = full.save({ start: from });
    } finally {
      full.dispose();
    }
    const { cache } = await sdpa.loadKVCache(saved, { maxSeqLen: keys });
    try {
      if (cache.length !== keys) throw new Error(`openHotShape: the loaded cache has length ${cache.length}, not ${keys}`);
      return openShape(s, data, null, { dtype, checkStored, hotCache: cache });
    } catch (e) {
      cache.dispose();
      throw e;
    }
  }

  return { info: sdpa.info, runShape, openShape, openHotShape, dispose: () => sdpa.dispose() };
}
