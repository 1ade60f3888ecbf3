// reference.js: the tests' float64 reference attention, written from
// CONTRACT.md (sections 1 and 4), independently of js/. Plain loops, no
// shortcuts. One definition of a row's attention (attendRow); the other
// references are layouts and masks around it.

/**
 * One query row's attention, the definition every reference of the tests uses:
 * for keys t = 0 .. keys-1, a key with seen(t) false gets -Infinity (its dot
 * is not computed); else score = scale * dot(t), softcapped
 * (softcap * tanh(score / softcap)) when softcap is set, plus bias(t). The
 * softmax's sum also counts exp(sink), a logit with no value row. Writes
 * out[o + d] = sum_t p_t * value(t, d) for d < Dv; a row that sees no key
 * (every score -Infinity) is left as it is (zeros in a fresh array).
 */
export function attendRow({ keys, dot, value, Dv, scale, softcap = 0, sink = -Infinity, seen = null, bias = null }, out, o = 0) {
  const score = new Float64Array(keys);
  let mx = -Infinity;
  for (let t = 0; t < keys; t++) {
    if (seen && !seen(t)) { score[t] = -Infinity; continue; }
    let s = scale * dot(t);
    if (softcap) s = softcap * Math.tanh(s / softcap);
    if (bias) s += bias(t);
    score[t] = s;
    mx = Math.max(mx, s);
  }
  if (mx === -Infinity) return;
  mx = Math.max(mx, sink);  // the sink joins the max and the sum
  let sum = Math.exp(sink - mx);
  for (let t = 0; t < keys; t++) { score[t] = Math.exp(score[t] - mx); sum += score[t]; }
  for (let d = 0; d < Dv; d++) {
    let acc = 0;
    for (let t = 0; t < keys; t++) acc += score[t] * value(t, d);
    out[o + d] = acc / sum;
  }
}

/** customSdpa semantics, layout [B, S, H, D]. Returns a Float64Array [B, Sq, Hq, D]. */
export function refCustomSdpa(query, key, value, opts = {}) {
  const [B, Sq, Hq, D] = query.dims;
  const [, Skv, Hkv] = key.dims;
  const sp = opts.startPos ?? 0;
  const mask = opts.attnMask ?? null;
  const r = Hq / Hkv;
  const N = mask ? mask.dims[1] : sp + Sq;
  if (N > Skv) throw new Error('reference: N > Skv');
  const isBool = mask ? mask.data instanceof Uint8Array : false;
  const at = (t, b, s, h, d) => t.data[((b * t.dims[1] + s) * t.dims[2] + h) * t.dims[3] + d];
  const out = new Float64Array(B * Sq * Hq * D);
  for (let b = 0; b < B; b++) {
    for (let i = 0; i < Sq; i++) {
      for (let h = 0; h < Hq; h++) {
        const hk = Math.floor(h / r);
        attendRow({
          keys: N, Dv: D, scale: opts.scale ?? 1 / Math.sqrt(D), softcap: opts.softcap,
          sink: opts.sinks ? opts.sinks.data[h] : -Infinity,
          seen: (t) => !(opts.isCausal && t > sp + i) && !(opts.window && t <= sp + i - opts.window) && !(isBool && !mask.data[i * N + t]),
          bias: mask && !isBool ? (t) => mask.data[i * N + t] : null,
          dot: (t) => { let dot = 0; for (let d = 0; d < D; d++) dot += at(query, b, i, h, d) * at(key, b, t, hk, d); return dot; },
          value: (t, d) => at(value, b, t, hk, d),
        }, out, ((b * Sq + i) * Hq + h) * D);
      }
    }
  }
  return out;
}

/**
 * torch.nn.functional.scaled_dot_product_attention, layout [B, H, S, D],
 * done the "math backend" way: repeat_interleave K/V heads, expand batches,
 * materialize the broadcast mask and the tril causal mask. Fully masked rows
 * are zeros. Returns a Float64Array [B, Hq, L, Ev].
 */
export function refTorchSdpa(query, key, value, opts = {}) {
  const [B, Hq, L, E] = query.dims;
  const [Bk, Hk, S] = key.dims;
  const [Bv, Hv, , Ev] = value.dims;
  const scale = opts.scale ?? 1 / Math.sqrt(E);
  // repeat_interleave: key head of query head h
  const repeatInterleave = (H) => {
    const map = [];
    for (let x = 0; x < H; x++) for (let j = 0; j < Hq / H; j++) map.push(x);
    return map;
  };
  const kHead = repeatInterleave(Hk), vHead = repeatInterleave(Hv);
  const kx = (b, h, t, e) => key.data[(((Bk === 1 ? 0 : b) * Hk + kHead[h]) * S + t) * E + e];
  const vx = (b, h, t, e) => value.data[(((Bv === 1 ? 0 : b) * Hv + vHead[h]) * S + t) * Ev + e];
  // materialized mask [B, Hq, L, S] (additive float64)
  const full = new Float64Array(B * Hq * L * S);
  if (opts.attnMask) {
    const m = opts.attnMask, md = m.dims, isBool = m.data instanceof Uint8Array;
    const idx = [0, 0, 0, 0];
    for (let b = 0; b < B; b++) for (let h = 0; h < Hq; h++) for (let i = 0; i < L; i++) for (let t = 0; t < S; t++) {
      idx[0] = b; idx[1] = h; idx[2] = i; idx[3] = t;
      const src = idx.slice(4 - md.length);
      let flat = 0;
      for (let j = 0; j < md.length; j++) flat = flat * md[j] + (md[j] === 1 ? 0 : src[j]);
      const val = m.data[flat];
      full[((b * Hq + h) * L + i) * S + t] = isBool ? (val ? 0 : -Infinity) : val;
    }
  }
  if (opts.isCausal) {
    for (let x = 0; x < B * Hq; x++) for (let i = 0; i < L; i++) for (let t = i + 1; t < S; t++) full[(x * L + i) * S + t] = -Infinity;
  }
  const out = new Float64Array(B * Hq * L * Ev);
  for (let b = 0; b < B; b++) for (let h = 0; h < Hq; h++) for (let i = 0; i < L; i++) {
    const row = (b * Hq + h) * L + i;
    attendRow({
      keys: S, Dv: Ev, scale,
      bias: (t) => full[row * S + t],
      dot: (t) => { let dot = 0; for (let e = 0; e < E; e++) dot += query.data[row * E + e] * kx(b, h, t, e); return dot; },
      value: (t, e) => vx(b, h, t, e),
    }, out, row * Ev);
  }
  return out;
}

/**
 * A windowed cache's visibility (CONTRACT.md section 3) for query rows
 * sp .. sp+n-1 as a bool mask [n, sp + n]: key t is seen by row p when
 * t <= p and (t > p - W or t < S).
 */
export function windowVisibility(sp, n, W, S) {
  const N = sp + n, m = new Uint8Array(n * N);
  for (let i = 0; i < n; i++) for (let t = 0; t < N; t++) m[i * N + t] = t <= sp + i && (t > sp + i - W || t < S) ? 1 : 0;
  return { data: m, dims: [n, N] };
}

/**
 * Rotary embeddings as CONTRACT.md says: x [B, S, H, D] with row s
 * rotated at position pos[s] by the tables T = { cos, sin } ([P, R] each,
 * R = rotaryDim / 2; interleaved pairs (2j, 2j+1), else (j, j+R)), every
 * product and sum rounded to float32, or not rounded (f64: true; the result
 * is still stored as float32).
 */
export function refRotate(x, pos, T, interleaved, f64 = false) {
  const [B, S, H, D] = x.dims, R = T.cos.dims[1], y = Float32Array.from(x.data);
  const r = f64 ? (v) => v : Math.fround;
  for (let b = 0; b < B; b++) {
    for (let s = 0; s < S; s++) {
      for (let h = 0; h < H; h++) {
        const o = ((b * S + s) * H + h) * D;
        for (let j = 0; j < R; j++) {
          const a = interleaved ? 2 * j : j, c = interleaved ? a + 1 : j + R;
          const cs = T.cos.data[pos[s] * R + j], sn = T.sin.data[pos[s] * R + j];
          const xa = x.data[o + a], xb = x.data[o + c];
          y[o + a] = r(r(xa * cs) - r(xb * sn));
          y[o + c] = r(r(xb * cs) + r(xa * sn));
        }
      }
    }
  }
  return { data: y, dims: x.dims.slice() };
}
