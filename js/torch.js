// torch.js: the PyTorch-style entry (CONTRACT.md section 4).
//
// scaledDotProductAttention(q, k, v, opts) has the meaning of
// torch.nn.functional.scaled_dot_product_attention on [B, H, S, D] tensors.
// planAttention decides whether a call provably fits the fast op ('custom':
// transpose to [B, S, H, D] and run customSdpa) or not ('general': computed
// here in JS with float64 accumulation). Both routes give PyTorch's answer,
// with fully masked rows giving zeros.

import {
  Checks, checkRank, checkDims, checkBool, checkScale, fitsFastScale, checkDropout, checkMaskCausal,
  structural, RANK_4,
} from './rules.js';
import { readOptions, inspectTensor, checkLive, dataOf } from './snapshot.js';
import { fmtDims } from './shape.js';

export const TORCH_OPTIONS = Object.freeze(['attnMask', 'dropoutP', 'isCausal', 'scale', 'enableGqa']);
const MASK_RANKS = Object.freeze([1, 2, 3, 4]);

/**
 * Every section-4 rule; adds violations to `ck`. Returns the call's geometry
 * (meaningful only when nothing was added), with the descriptors Q, K, V, M
 * of the snapshot: the data the call computes on.
 * `isAlive(ck)` adds the instance's own liveness check, after the snapshot.
 */
export function checkTorchCall(ck, q, k, v, opts, isAlive) {
  // snapshot
  const Q = inspectTensor(ck, 'query', q, 'input');
  const K = inspectTensor(ck, 'key', k, 'input');
  const V = inspectTensor(ck, 'value', v, 'input');
  const o = readOptions(ck, opts, TORCH_OPTIONS);
  const M = o.M;
  // state, then the rules
  isAlive(ck);
  checkLive(ck, Q);
  checkLive(ck, K);
  checkLive(ck, V);
  checkLive(ck, M);
  const isCausal = checkBool(ck, o.isCausal, 'isCausal');
  const enableGqa = checkBool(ck, o.enableGqa, 'enableGqa');
  const scale = checkScale(ck, o.scale, false);
  checkDropout(ck, o.dropoutP);

  const shape = '4-D [B, H, S, E] (PyTorch layout)';
  const qr = checkRank(ck, Q, RANK_4, shape);
  const kr = checkRank(ck, K, RANK_4, shape);
  const vr = checkRank(ck, V, RANK_4, shape);
  const mr = M ? checkRank(ck, M, MASK_RANKS, 'rank 1 to 4, broadcastable to [B, Hq, L, S]') : false;
  if (qr) checkDims(ck, Q, 1);
  if (kr) checkDims(ck, K, 1);
  if (vr) checkDims(ck, V, 1);
  const mok = mr && checkDims(ck, M, -1);

  const g = { Q, K, V, M, isCausal, enableGqa, scale };
  if (qr && kr && vr && structural(Q) && structural(K) && structural(V)) {
    const [B, Hq, L, E] = Q.dims;
    const [Bk, Hk, S, Ek] = K.dims;
    const [Bv, Hv, Sv, Ev] = V.dims;
    Object.assign(g, { B, Hq, L, E, Bk, Hk, S, Bv, Hv, Ev });
    if (Bk !== B && Bk !== 1) ck.add('E_BATCH', `key has batch ${Bk} but query has batch ${B}; key batch must be ${B} or 1`);
    if (Bv !== B && Bv !== 1) ck.add('E_BATCH', `value has batch ${Bv} but query has batch ${B}; value batch must be ${B} or 1`);
    for (const [name, H] of [['key', Hk], ['value', Hv]]) {
      if (enableGqa) {
        if (Hq % H !== 0) ck.add('E_HEADS', `${name} has ${H} heads but query has ${Hq}; with enableGqa query heads must be a multiple of ${name} heads`);
      } else if (H !== Hq && H !== 1) {
        ck.add('E_HEADS', `${name} has ${H} heads but query has ${Hq}; without enableGqa ${name} heads must be ${Hq} or 1 (pass enableGqa: true for grouped-query attention)`);
      }
    }
    if (Ek !== E) ck.add('E_HEAD_DIM', `key has head dim ${Ek} but query has ${E}; they must be equal (the value head dim may differ)`);
    if (S !== Sv) ck.add('E_KV_LEN', `key has sequence length ${S} but value has ${Sv}; they must be equal`);
    if (M && mok) {
      const target = [B, Hq, L, S];
      const off = 4 - M.rank;
      const bad = M.dims.some((m, i) => m !== 1 && m !== target[off + i]);
      if (bad) ck.add('E_MASK_SHAPE', `attnMask has dims ${fmtDims(M.dims)}, which does not broadcast (right-aligned) to [B, Hq, L, S] = ${fmtDims(target)}`);
    }
  }
  checkMaskCausal(ck, M, isCausal);
  return g;
}

/** One human-readable reason per condition of the fast op that fails ([] = custom). */
export function routeReasons(g) {
  const r = [];
  const { B, Hq, L, E, Bk, Hk, S, Bv, Hv, Ev, M, isCausal, enableGqa, scale } = g;
  if (Hk !== Hv) {
    r.push(`key has ${Hk} heads and value has ${Hv}; the fast op needs equal key and value heads`);
  } else if (!(Hq === Hk || Hk === 1 || (enableGqa && Hq % Hk === 0))) {
    r.push(`query has ${Hq} heads and key has ${Hk}; the fast op needs Hq == Hk, a single key head, or enableGqa`);
  }
  if (Bk !== B) r.push(`key batch ${Bk} is broadcast to query batch ${B}; the fast op needs equal batches`);
  if (Bv !== B) r.push(`value batch ${Bv} is broadcast to query batch ${B}; the fast op needs equal batches`);
  if (Ev !== E) r.push(`value head dim ${Ev} differs from the query/key head dim ${E}; the fast op needs them equal`);
  if (M) {
    const d = M.dims;
    if (d.length < 2) {
      r.push(`attnMask has rank ${d.length} (dims ${fmtDims(d)}); the fast op needs a mask of rank 2 to 4 ending in [L, S] = [${L}, ${S}]`);
    } else {
      const lead = d.slice(0, -2);
      if (lead.some((x) => x !== 1)) {
        r.push(`attnMask dims ${fmtDims(d)} differ per batch or head; the fast op needs every leading dim to be 1`);
      }
      if (d[d.length - 2] !== L || d[d.length - 1] !== S) {
        r.push(`attnMask's last two dims [${d.slice(-2).join(', ')}] are broadcast; the fast op needs exactly [L, S] = [${L}, ${S}]`);
      }
    }
  }
  if (isCausal && L > S) r.push(`isCausal with L = ${L} > S = ${S}; the fast op's causal mask needs L ≤ S`);
  if (!M && !isCausal && L !== S) r.push(`no mask and not causal with L = ${L} ≠ S = ${S}; without a mask the fast op reads only the first L keys`);
  if (scale !== null && scale !== undefined && !fitsFastScale(scale)) {
    r.push(`scale ${scale} is not a float32 > 0; the fast op needs a positive scale`);
  }
  return r;
}

/** dst[b, y, x, d] = src[b, x, y, d] for src dims [B, X, Y, D]. */
export function swapAxes12(src, B, X, Y, D) {
  const dst = new Float32Array(B * X * Y * D);
  for (let b = 0; b < B; b++) {
    for (let x = 0; x < X; x++) {
      for (let y = 0; y < Y; y++) {
        const s = ((b * X + x) * Y + y) * D;
        const t = ((b * Y + y) * X + x) * D;
        for (let d = 0; d < D; d++) dst[t + d] = src[s + d];
      }
    }
  }
  return dst;
}

/** The general route: float64 accumulation, PyTorch semantics, zeros for fully masked rows. */
export function generalAttention(g, q, k, v, mask) {
  const { B, Hq, L, E, Bk, Hk, S, Bv, Hv, Ev, isCausal } = g;
  const s = g.scale === null || g.scale === undefined ? 1 / Math.sqrt(E) : g.scale;
  const out = new Float32Array(B * Hq * L * Ev);
  // Mask strides over [B, Hq, L, S] (0 along broadcast dims).
  let ms = null, isBool = false;
  if (mask) {
    const md = g.M.dims, off = 4 - md.length;
    const full = [1, 1, 1, 1];
    md.forEach((x, i) => { full[off + i] = x; });
    ms = [0, 0, 0, 0];
    let acc = 1;
    for (let i = 3; i >= 0; i--) { ms[i] = full[i] === 1 ? 0 : acc; acc *= full[i]; }
    isBool = g.M.dtype === 'bool';
  }
  const scores = new Float64Array(S);
  const accv = new Float64Array(Ev);
  for (let b = 0; b < B; b++) {
    const kb = Bk === 1 ? 0 : b, vb = Bv === 1 ? 0 : b;
    for (let h = 0; h < Hq; h++) {
      const hk = Math.floor((h * Hk) / Hq), hv = Math.floor((h * Hv) / Hq);
      const kBase = (kb * Hk + hk) * S * E;
      const vBase = (vb * Hv + hv) * S * Ev;
      for (let i = 0; i < L; i++) {
        const qBase = ((b * Hq + h) * L + i) * E;
        const mBase = ms ? b * ms[0] + h * ms[1] + i * ms[2] : 0;
        let mx = -Infinity, nan = false;
        for (let t = 0; t < S; t++) {
          let sc;
          if (isCausal && t > i) sc = -Infinity;
          else {
            let dot = 0;
            const kr = kBase + t * E;
            for (let d = 0; d < E; d++) dot += q[qBase + d] * k[kr + d];
            sc = s * dot;
            if (ms) {
              const m = mask[mBase + t * ms[3]];
              if (isBool) { if (!m) sc = -Infinity; } else sc += m;
            }
          }
          scores[t] = sc;
          if (sc > mx) mx = sc;
          else if (sc !== sc) nan = true; // (a later -inf must not hide it)
        }
        const oBase = ((b * Hq + h) * L + i) * Ev;
        if (nan) { out.fill(NaN, oBase, oBase + Ev); continue; } // NaN is computed through: softmax of a NaN row
        if (mx === -Infinity) continue; // fully masked row: zeros
        accv.fill(0);
        let sum = 0;
        for (let t = 0; t < S; t++) {
          const p = Math.exp(scores[t] - mx);
          if (p === 0) continue;
          sum += p;
          const vr = vBase + t * Ev;
          for (let d = 0; d < Ev; d++) accv[d] += p * v[vr + d];
        }
        for (let d = 0; d < Ev; d++) out[oBase + d] = accv[d] / sum;
      }
    }
  }
  return out;
}

/**
 * The two public entries, bound to an instance.
 * @param {object} core the instance's runtime (checkAlive)
 * @param {Function} runCustom (fn, q, k, v, opts) => customSdpa's result, messages naming fn
 */
export function makeTorchEntry(core, runCustom) {
  const isAlive = (ck) => core.checkAlive(ck);
  function check(fn, q, k, v, opts) {
    const ck = new Checks(fn);
    const g = checkTorchCall(ck, q, k, v, opts, isAlive);
    ck.done();
    return g;
  }

  function planAttention(q, k, v, opts) {
    const g = check('planAttention', q, k, v, opts);
    const reasons = routeReasons(g);
    return { route: reasons.length === 0 ? 'custom' : 'general', reasons };
  }

  function scaledDotProductAttention(q, k, v, opts) {
    const g = check('scaledDotProductAttention', q, k, v, opts);
    const reasons = routeReasons(g);
    // (the snapshot's data: the caller's objects are not read again)
    const qd = dataOf(g.Q), kd = dataOf(g.K), vd = dataOf(g.V);
    const md = g.M ? dataOf(g.M) : null;
    const dims = [g.B, g.Hq, g.L, g.Ev];
    if (reasons.length === 0) {
      const { B, Hq, L, E, Hk, S } = g;
      const q2 = swapAxes12(qd, B, Hq, L, E);
      const k2 = swapAxes12(kd, B, Hk, S, E);
      const v2 = swapAxes12(vd, B, Hk, S, E);
      const opts2 = { isCausal: g.isCausal };
      if (g.scale !== null && g.scale !== undefined) opts2.scale = g.scale;
      if (md) opts2.attnMask = { data: md, dims: [L, S] };
      const r = runCustom('scaledDotProductAttention',
        { data: q2, dims: [B, L, Hq, E] }, { data: k2, dims: [B, S, Hk, E] }, { data: v2, dims: [B, S, Hk, E] }, opts2,
      );
      return { data: swapAxes12(r.data, B, L, Hq, E), dims, dtype: 'float32' };
    }
    return { data: generalAttention(g, qd, kd, vd, md), dims, dtype: 'float32' };
  }

  return { planAttention, scaledDotProductAttention };
}
