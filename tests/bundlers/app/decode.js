// decode.js: the work every bundler page does inside a module Worker. A few
// GQA decode steps through a KV cache, each compared with a deliberately
// simple float64 reference (below); the page gets a plain summary object.

/** float64 attention of one query token over cache rows 0..len-1, layout [S, H, D]. */
export function reference(q, keys, values, len, Hq, Hkv, D) {
  const out = new Float64Array(Hq * D);
  const r = Hq / Hkv;
  for (let h = 0; h < Hq; h++) {
    const hk = Math.floor(h / r);
    const s = [];
    for (let t = 0; t < len; t++) {
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q[h * D + d] * keys[(t * Hkv + hk) * D + d];
      s.push(dot / Math.sqrt(D));
    }
    const m = Math.max(...s);
    const w = s.map((x) => Math.exp(x - m));
    const z = w.reduce((a, b) => a + b, 0);
    for (let d = 0; d < D; d++) {
      let acc = 0;
      for (let t = 0; t < len; t++) acc += w[t] * values[(t * Hkv + hk) * D + d];
      out[h * D + d] = acc / z;
    }
  }
  return out;
}

function lcgCentered(seed) {
  let x = seed >>> 0;
  return () => { x = (x * 1664525 + 1013904223) >>> 0; return x / 2 ** 32 - 0.5; };
}

/** Runs createSdpa(options) and `steps` decode steps; never throws. */
export async function decode(createSdpa, options, { steps = 24, Hq = 8, Hkv = 2, D = 64 } = {}) {
  const warnings = [];
  const warn = console.warn;
  console.warn = (...a) => { warnings.push(a.join(' ')); warn.apply(console, a); };
  const t0 = performance.now();
  let sdpa = null;
  try {
    sdpa = await createSdpa(options);
    const loadMs = performance.now() - t0;
    const cache = sdpa.createKVCache({ maxSeqLen: steps, numKvHeads: Hkv, headDim: D });
    const rand = lcgCentered(7);
    const keys = new Float64Array(steps * Hkv * D), values = new Float64Array(steps * Hkv * D);
    let maxErr = 0;
    for (let pos = 0; pos < steps; pos++) {
      const q = Float32Array.from({ length: Hq * D }, rand);
      const k = Float32Array.from({ length: Hkv * D }, rand);
      const v = Float32Array.from({ length: Hkv * D }, rand);
      keys.set(k, pos * Hkv * D); values.set(v, pos * Hkv * D);
      const out = cache.step({ data: q, dims: [1, 1, Hq, D] }, { data: k, dims: [1, 1, Hkv, D] },
        { data: v, dims: [1, 1, Hkv, D] }, pos, { isCausal: true });
      const want = reference(q, keys, values, pos + 1, Hq, Hkv, D);
      for (let i = 0; i < want.length; i++) maxErr = Math.max(maxErr, Math.abs(out.data[i] - want[i]));
    }
    const info = { ...sdpa.info };
    return { ok: true, info, maxErr, steps, loadMs, warnings, crossOriginIsolated: globalThis.crossOriginIsolated === true };
  } catch (e) {
    return {
      ok: false, warnings, ms: performance.now() - t0, crossOriginIsolated: globalThis.crossOriginIsolated === true,
      error: { name: e && e.name, code: e && e.code, message: String(e && e.message) },
    };
  } finally {
    console.warn = warn;
    if (sdpa) sdpa.dispose();
  }
}
