// sampler.js: choosing the next token from a row of logits, as llama2.c's
// run.c does (argmax at temperature 0; else softmax(logits / temperature) and
// one coin from xorshift64*: plain multinomial, or top-p), plus top-k.
// Seeded: the same seed and logits give the same tokens.

import { SdpaError } from '../errors.js';

const MASK64 = (1n << 64n) - 1n;

/** run.c's xorshift64* generator: u32() and f32() in [0, 1). */
export class Rng {
  #state;
  constructor(seed) {
    // run.c seeds 0 with the time; here 0 is a fixed non-zero state (xorshift never leaves 0)
    this.#state = BigInt(seed) & MASK64 || 0x9E3779B97F4A7C15n;
  }
  u32() {
    let s = this.#state;
    s ^= s >> 12n; s ^= (s << 25n) & MASK64; s ^= s >> 27n;
    this.#state = s;
    return Number(((s * 0x2545F4914F6CDD1Dn) & MASK64) >> 32n);
  }
  f32() { return (this.u32() >>> 8) / 16777216; }
}

/** The index of the largest value of row (the first of equals), as run.c's sample_argmax. */
export function argmax(row) {
  let best = 0, max = row[0];
  for (let i = 1; i < row.length; i++) if (row[i] > max) { max = row[i]; best = i; }
  return best;
}

function checkNumber(fn, name, v, lo, hi, integer = false) {
  if (typeof v !== 'number' || Number.isNaN(v) || v < lo || v > hi || (integer && !Number.isInteger(v))) {
    throw new SdpaError('E_ARG', `${fn}: ${name} must be ${integer ? 'an integer' : 'a number'} in ${lo} .. ${hi}, got ${String(v)}`);
  }
  return v;
}

/** The sampling options, checked: { temperature, topP, topK, seed }. */
export function samplingOptions(fn, o = {}) {
  if (o === null || typeof o !== 'object') throw new SdpaError('E_ARG', `${fn}: options must be an object, got ${String(o)}`);
  const temperature = checkNumber(fn, 'temperature', o.temperature ?? 1, 0, 1e6);
  const topP = checkNumber(fn, 'topP', o.topP ?? 0.9, 0, 1);
  const topK = checkNumber(fn, 'topK', o.topK ?? 0, 0, 2 ** 31 - 1, true);
  let seed = o.seed;
  if (seed === undefined) {
    const r = new Uint32Array(2);
    globalThis.crypto.getRandomValues(r);
    seed = BigInt(r[0]) << 32n | BigInt(r[1]);
  } else if (!(typeof seed === 'bigint' ? seed >= 0n : Number.isSafeInteger(seed) && seed >= 0)) {
    throw new SdpaError('E_ARG', `${fn}: seed must be a non-negative safe integer or BigInt, got ${String(seed)}`);
  }
  return { temperature, topP, topK, seed };
}

/**
 * A sampler for rows of `vocabSize` logits. temperature 0: greedy (argmax).
 * topP in (0, 1): nucleus sampling (run.c's sample_topp); topK > 0: only the
 * topK most likely tokens. Buffers are made once: sample() allocates nothing
 * (top-k / top-p sort an index array in place).
 */
export function createSampler(vocabSize, options) {
  const fn = 'createSampler';
  checkNumber(fn, 'vocabSize', vocabSize, 1, 1 << 24, true);
  const { temperature, topP, topK, seed } = samplingOptions(fn, options);
  const rng = new Rng(seed);
  const probs = new Float32Array(vocabSize);
  const order = new Int32Array(vocabSize);
  const byProb = (a, b) => probs[b] - probs[a] || a - b;
  const limitK = topK > 0 && topK < vocabSize;
  const limitP = topP > 0 && topP < 1;

  function sample(logits) {
    if (!(logits instanceof Float32Array) || logits.length !== vocabSize) {
      throw new SdpaError('E_ARG', `sampler.sample: logits must be a Float32Array of ${vocabSize} values, got ${logits?.constructor?.name} of ${logits?.length}`);
    }
    if (temperature === 0) return argmax(logits);
    let max = -Infinity;
    for (let i = 0; i < vocabSize; i++) { probs[i] = logits[i] / temperature; if (probs[i] > max) max = probs[i]; }
    let sum = 0;
    for (let i = 0; i < vocabSize; i++) { probs[i] = Math.exp(probs[i] - max); sum += probs[i]; }
    for (let i = 0; i < vocabSize; i++) probs[i] /= sum;
    const coin = rng.f32();
    if (!limitK && !limitP) {                  // run.c's sample_mult
      let cdf = 0;
      for (let i = 0; i < vocabSize; i++) { cdf += probs[i]; if (coin < cdf) return i; }
      return vocabSize - 1;
    }
    // candidates: run.c drops those below (1 - topP) / (n - 1), which cannot be in the nucleus
    const cutoff = limitP && !limitK ? (1 - topP) / (vocabSize - 1) : 0;
    let n = 0;
    for (let i = 0; i < vocabSize; i++) if (probs[i] >= cutoff) order[n++] = i;
    if (n === 0) for (let i = 0; i < vocabSize; i++) order[n++] = i;   // (all below the cutoff: run.c would read probindex[-1])
    const cand = order.subarray(0, n).sort(byProb);
    if (limitK) n = Math.min(n, topK);
    let total = 0, last = n - 1;
    for (let i = 0; i < n; i++) {
      total += probs[cand[i]];
      if (limitP && total > topP) { last = i; break; }
    }
    const r = coin * total;
    let cdf = 0;
    for (let i = 0; i <= last; i++) { cdf += probs[cand[i]]; if (r < cdf) return cand[i]; }
    return cand[last];
  }
  return Object.freeze({ sample, temperature, topP, topK });
}
