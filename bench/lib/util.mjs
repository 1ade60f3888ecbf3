// Shared helpers for the benchmark: timing, statistics, seeded data, float64 reference.
import { performance } from 'node:perf_hooks';

export const now = () => performance.now();

export function stats(samples) {
  const s = Float64Array.from(samples).sort();
  const n = s.length;
  const median = n === 0 ? NaN : n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  return { median, min: s[0], max: s[n - 1], n };
}

/**
 * Times fn() (sync or async). Warm-up: at least `warmup` calls and `warmupMs`
 * milliseconds (so that V8's optimizing tier has compiled the hot code), but
 * for slow calls (≥ 2 calls taking over 4× warmupMs) no more than that. Then up
 * to `iters` timed calls, stopping after `budgetMs` once `minIters` samples are
 * in, and after 4× budgetMs once 3 are in. Returns { median, min, max, n,
 * warmup, samples } in ms.
 */
export async function timeIt(fn, { warmup = 10, warmupMs = 300, iters = 50, minIters = 5, budgetMs = 2000 } = {}) {
  const isAsync = fn.constructor.name === 'AsyncFunction';
  let t0 = now();
  let w = 0;
  for (; w < warmup || now() - t0 < warmupMs; w++) {
    if (w >= 2 && now() - t0 > 4 * warmupMs) break;
    if (isAsync) await fn(w); else fn(w);
  }
  const samples = [];
  t0 = now();
  for (let i = 0; i < iters; i++) {
    const a = now();
    if (isAsync) await fn(w + i); else fn(w + i);
    samples.push(now() - a);
    const el = now() - t0;
    if ((samples.length >= minIters && el > budgetMs) || (samples.length >= 3 && el > 4 * budgetMs)) break;
  }
  return { ...stats(samples), warmup: w, samples };
}

// mulberry32: small seeded PRNG; uniform floats in [-1, 1) (tests/js/helpers.js rng: the same generator in [0, 1)).
export function rngSigned(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2147483648 - 1;
  };
}

export function randomF32(n, seed) {
  const r = rngSigned(seed);
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = r();
  return a;
}

const f32b = new Float32Array(1), u32b = new Uint32Array(f32b.buffer);

/** float32 values -> binary16 bits (Uint16Array), rounded to nearest, ties to even; NaN stays NaN. */
export function toF16Bits(x) {
  const o = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) {
    f32b[0] = x[i];
    const b = u32b[0], sign = (b >>> 16) & 0x8000, e = ((b >>> 23) & 0xff) - 112, m = b & 0x7fffff;
    let h, rem, half;
    if (e === 143) { o[i] = sign | 0x7c00 | (m ? 0x200 : 0); continue; }   // Inf, NaN
    if (e >= 31) { o[i] = sign | 0x7c00; continue; }                       // overflow
    if (e <= 0) {                                                          // subnormal half (or 0)
      if (e < -10) { o[i] = sign; continue; }
      const sh = 14 - e, mm = m | 0x800000;
      h = mm >>> sh; rem = mm & ((1 << sh) - 1); half = 1 << (sh - 1);
    } else {
      h = (e << 10) | (m >>> 13); rem = m & 0x1fff; half = 0x1000;
    }
    if (rem > half || (rem === half && (h & 1))) h++;                      // a carry may reach Inf: correct
    o[i] = sign | h;
  }
  return o;
}

/** binary16 bits -> float32 values. */
export function fromF16Bits(h) {
  const o = new Float32Array(h.length);
  for (let i = 0; i < h.length; i++) {
    const e = (h[i] >> 10) & 31, m = h[i] & 1023;
    const v = e === 31 ? (m ? NaN : Infinity) : e === 0 ? m * 2 ** -24 : (1024 + m) * 2 ** (e - 25);
    o[i] = h[i] & 0x8000 ? -v : v;
  }
  return o;
}

/**
 * Float64 reference of attention for selected query rows.
 * q: [Sq, Hq, D] (batch 1), k/v: [N, Hkv, D] (token-major, as fed to cache.update);
 * query row i sits at position sp + i; causal: keys t <= sp + i; keys < nKeys.
 * Returns Float64Array [rows.length, Hq, D].
 */
export function referenceRows({ q, k, v, Hq, Hkv, D, sp, causal, nKeys, rows }) {
  const r = Hq / Hkv;
  const scale = 1 / Math.sqrt(D);
  const out = new Float64Array(rows.length * Hq * D);
  const s = new Float64Array(nKeys);
  rows.forEach((i, ri) => {
    const last = causal ? Math.min(nKeys - 1, sp + i) : nKeys - 1;
    for (let h = 0; h < Hq; h++) {
      const hk = Math.floor(h / r);
      const qo = (i * Hq + h) * D;
      let m = -Infinity;
      for (let t = 0; t <= last; t++) {
        const ko = (t * Hkv + hk) * D;
        let dot = 0;
        for (let d = 0; d < D; d++) dot += q[qo + d] * k[ko + d];
        s[t] = dot * scale;
        if (s[t] > m) m = s[t];
      }
      let sum = 0;
      for (let t = 0; t <= last; t++) { s[t] = Math.exp(s[t] - m); sum += s[t]; }
      const oo = (ri * Hq + h) * D;
      for (let t = 0; t <= last; t++) {
        const w = s[t] / sum, vo = (t * Hkv + hk) * D;
        for (let d = 0; d < D; d++) out[oo + d] += w * v[vo + d];
      }
    }
  });
  return out;
}

/**
 * Compares `got` ([Sq, Hq, D] float32, full output) on the reference rows.
 * Returns { ok, maxAbs, relErr } with relErr = maxAbs / max|ref|.
 */
export function compareRows(got, ref, rows, rowLen, tol = 2e-4) {
  let maxAbs = 0, maxRef = 0;
  let bad = !got || got.length < (Math.max(...rows) + 1) * rowLen;
  if (!bad) {
    rows.forEach((i, ri) => {
      for (let j = 0; j < rowLen; j++) {
        const a = got[i * rowLen + j], b = ref[ri * rowLen + j];
        const d = Math.abs(a - b);
        if (!(d <= maxAbs)) maxAbs = Number.isNaN(d) ? Infinity : Math.max(maxAbs, d);
        if (Math.abs(b) > maxRef) maxRef = Math.abs(b);
      }
    });
  }
  const relErr = bad ? Infinity : maxAbs / (maxRef || 1);
  return { ok: relErr <= tol, maxAbs: bad ? Infinity : maxAbs, relErr };
}

export const fmtMs = (x) => (x == null || !Number.isFinite(x) ? '-' : x < 1 ? x.toFixed(3) : x < 10 ? x.toFixed(2) : x < 100 ? x.toFixed(1) : x.toFixed(0));
export const fmtX = (x) => (x == null || !Number.isFinite(x) ? '-' : x < 10 ? x.toFixed(2) + '×' : x.toFixed(1) + '×');
