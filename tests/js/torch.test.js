// torch.test.js: scaledDotProductAttention / planAttention (CONTRACT.md
// section 4) against the float64 PyTorch-semantics reference, and the route
// each call must get.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { createSdpa } from '../../js/index.js';
import { refTorchSdpa } from './reference.js';
import { rng, randTensor, assertClose } from './helpers.js';

let sdpa;
test.before(async () => { sdpa = await createSdpa(); });
test.after(() => { sdpa.dispose(); });

const rand = rng(4242);
const T = (dims, amp = 1) => randTensor(rand, dims, amp);
const floatMask = (dims) => {
  const m = T(dims, 2);
  for (let i = 0; i < m.data.length; i++) if (rand() < 0.2) m.data[i] = -Infinity;
  return m;
};
const boolMask = (dims) => {
  const n = dims.reduce((a, b) => a * b, 1);
  return { data: Uint8Array.from({ length: n }, () => (rand() < 0.7 ? 1 : 0)), dims };
};

/**
 * Runs one case: checks the route (and that every failed condition has a
 * reason matching `why`), the output dims, and the numbers.
 */
function run(label, q, k, v, opts, route, why = []) {
  const plan = sdpa.planAttention(q, k, v, opts);
  assert.is(plan.route, route, `${label}: route (reasons: ${plan.reasons.join(' | ')})`);
  if (route === 'custom') assert.equal(plan.reasons, [], `${label}: no reasons`);
  else assert.ok(plan.reasons.length >= 1, `${label}: at least one reason`);
  for (const re of why) assert.ok(plan.reasons.some((r) => re.test(r)), `${label}: a reason matching ${re} in ${JSON.stringify(plan.reasons)}`);
  const out = sdpa.scaledDotProductAttention(q, k, v, opts);
  const [B, Hq, L] = q.dims;
  assert.equal(out.dims, [B, Hq, L, v.dims[3]], `${label}: dims`);
  assert.is(out.dtype, 'float32');
  assertClose(out.data, refTorchSdpa(q, k, v, opts || {}), label);
  return out;
}

test('clean layouts take the custom route', () => {
  run('causal L == S', T([2, 4, 9, 16]), T([2, 4, 9, 16]), T([2, 4, 9, 16]), { isCausal: true }, 'custom');
  run('causal L < S', T([1, 4, 5, 16]), T([1, 4, 12, 16]), T([1, 4, 12, 16]), { isCausal: true }, 'custom');
  run('unmasked L == S', T([1, 2, 7, 8]), T([1, 2, 7, 8]), T([1, 2, 7, 8]), undefined, 'custom');
  run('GQA 8/2 with enableGqa', T([1, 8, 6, 16]), T([1, 2, 6, 16]), T([1, 2, 6, 16]), { enableGqa: true, isCausal: true }, 'custom');
  run('MQA 8/1 broadcast', T([1, 8, 6, 16]), T([1, 1, 6, 16]), T([1, 1, 6, 16]), { isCausal: true }, 'custom');
  run('scale 0.3', T([1, 2, 5, 8]), T([1, 2, 5, 8]), T([1, 2, 5, 8]), { scale: 0.3 }, 'custom');
});

test('masks: [L, S], leading ones (3-D, 4-D), bool [L, S] take the custom route', () => {
  const q = T([2, 4, 5, 8]), k = T([2, 4, 7, 8]), v = T([2, 4, 7, 8]);
  run('2-D [L, S]', q, k, v, { attnMask: floatMask([5, 7]) }, 'custom');
  run('3-D [1, L, S]', q, k, v, { attnMask: floatMask([1, 5, 7]) }, 'custom');
  run('4-D [1, 1, L, S]', q, k, v, { attnMask: floatMask([1, 1, 5, 7]) }, 'custom');
  run('bool [L, S]', q, k, v, { attnMask: boolMask([5, 7]) }, 'custom');
  run('bool 4-D [1, 1, L, S]', q, k, v, { attnMask: boolMask([1, 1, 5, 7]) }, 'custom');
});

test('broadcast masks take the general route', () => {
  const q = T([2, 4, 5, 8]), k = T([2, 4, 7, 8]), v = T([2, 4, 7, 8]);
  run('1-D [S]', q, k, v, { attnMask: floatMask([7]) }, 'general', [/rank 1/]);
  run('row broadcast [1, S]', q, k, v, { attnMask: floatMask([1, 7]) }, 'general', [/last two dims/]);
  run('column broadcast [L, 1]', q, k, v, { attnMask: floatMask([5, 1]) }, 'general', [/last two dims/]);
  run('bool [1, 1, 1, S]', q, k, v, { attnMask: boolMask([1, 1, 1, 7]) }, 'general', [/last two dims/]);
});

test('per-head and per-batch masks take the general route', () => {
  const q = T([2, 4, 5, 8]), k = T([2, 4, 7, 8]), v = T([2, 4, 7, 8]);
  run('per-head [Hq, L, S]', q, k, v, { attnMask: floatMask([4, 5, 7]) }, 'general', [/leading dim/]);
  run('per-batch [B, 1, L, S]', q, k, v, { attnMask: floatMask([2, 1, 5, 7]) }, 'general', [/leading dim/]);
  run('full [B, Hq, L, S] bool', q, k, v, { attnMask: boolMask([2, 4, 5, 7]) }, 'general', [/leading dim/]);
  run('per-head broadcast rows [Hq, 1, S]', q, k, v, { attnMask: floatMask([4, 1, 7]) }, 'general', [/leading dim/, /last two dims/]);
});

test('batch broadcast, Ev != E, Hk != Hv take the general route', () => {
  run('key/value batch 1 vs 3', T([3, 2, 4, 8]), T([1, 2, 4, 8]), T([1, 2, 4, 8]), { isCausal: true }, 'general', [/key batch/, /value batch/]);
  run('value batch only', T([2, 2, 4, 8]), T([2, 2, 4, 8]), T([1, 2, 4, 8]), undefined, 'general', [/value batch/]);
  run('Ev = 12, E = 8', T([1, 2, 4, 8]), T([1, 2, 6, 8]), T([1, 2, 6, 12]), { isCausal: true }, 'general', [/value head dim/]);
  run('Ev = 3, E = 8, mask', T([1, 2, 4, 8]), T([1, 2, 6, 8]), T([1, 2, 6, 3]), { attnMask: floatMask([4, 6]) }, 'general', [/value head dim/]);
  run('Hk = 2, Hv = 4 with enableGqa', T([1, 8, 4, 8]), T([1, 2, 4, 8]), T([1, 4, 4, 8]), { enableGqa: true }, 'general', [/value has 4/]);
  run('Hk = 1, Hv = 4 broadcast', T([1, 4, 4, 8]), T([1, 1, 4, 8]), T([1, 4, 4, 8]), undefined, 'general', [/equal key and value heads/]);
});

test('causal with L > S and unmasked with L != S take the general route', () => {
  const a = run('causal L 9 > S 4', T([1, 2, 9, 8]), T([1, 2, 4, 8]), T([1, 2, 4, 8]), { isCausal: true }, 'general', [/L = 9 > S = 4/]);
  assert.ok(!a.data.some(Number.isNaN), 'no NaN');
  run('unmasked L 3 < S 10', T([1, 2, 3, 8]), T([1, 2, 10, 8]), T([1, 2, 10, 8]), undefined, 'general', [/L = 3 ≠ S = 10/]);
  run('unmasked L 6 > S 2', T([2, 2, 6, 8]), T([2, 2, 2, 8]), T([2, 2, 2, 8]), {}, 'general', [/L = 6 ≠ S = 2/]);
});

test('scale <= 0 takes the general route (any finite scale is PyTorch-valid)', () => {
  run('scale -0.5', T([1, 2, 4, 8]), T([1, 2, 4, 8]), T([1, 2, 4, 8]), { scale: -0.5 }, 'general', [/scale/]);
  run('scale 0', T([1, 2, 4, 8]), T([1, 2, 4, 8]), T([1, 2, 4, 8]), { scale: 0, isCausal: true }, 'general', [/scale/]);
});

test('several failed conditions give one reason each', () => {
  const plan = sdpa.planAttention(T([2, 4, 6, 8]), T([1, 2, 3, 8]), T([1, 2, 3, 5]), { enableGqa: true, isCausal: true, scale: -1 });
  assert.is(plan.route, 'general');
  assert.is(plan.reasons.length, 5, plan.reasons.join(' | ')); // key batch, value batch, Ev, L > S causal, scale
  const expected = [/^key batch 1 /, /^value batch 1 /, /^value head dim 5 /, /^isCausal with L = 6 > S = 3/, /^scale -1 /];
  expected.forEach((re, i) => assert.match(plan.reasons[i], re, `reason ${i}: ${plan.reasons.join(' | ')}`));
});

test('fully masked rows give zeros on both routes', () => {
  const q = T([1, 2, 3, 8]), k = T([1, 2, 3, 8]), v = T([1, 2, 3, 8]);
  const m = { data: new Uint8Array(9).fill(1), dims: [3, 3] };
  m.data.fill(0, 3, 6); // row 1 sees nothing
  const c = run('custom bool', q, k, v, { attnMask: m }, 'custom');
  const mh = { data: new Uint8Array(18).fill(1), dims: [2, 3, 3] };
  mh.data.fill(0, 0, 3);
  const g = run('general per-head bool', q, k, v, { attnMask: mh }, 'general');
  for (let d = 0; d < 8; d++) {
    assert.is(c.data[(0 * 3 + 1) * 8 + d], 0);
    assert.is(c.data[(1 * 3 + 1) * 8 + d], 0);
    assert.is(g.data[(0 * 3 + 0) * 8 + d], 0);
  }
  assert.ok(!c.data.some(Number.isNaN) && !g.data.some(Number.isNaN));
});

test('general route: NaN in the data is computed through (the row is NaN, not dropped)', () => {
  const q = T([1, 2, 3, 4]), k = T([1, 1, 5, 4]), v = T([1, 1, 5, 6]); // Ev != E: general
  k.data[4] = NaN; // key 1 of the only key head
  const plan = sdpa.planAttention(q, k, v, {});
  assert.is(plan.route, 'general');
  const out = sdpa.scaledDotProductAttention(q, k, v, {});
  assert.ok(out.data.every(Number.isNaN), `every row sees key 1: ${out.data.slice(0, 6)}`);
  const c = sdpa.scaledDotProductAttention(q, k, v, { isCausal: true }); // L 3 < S 5: row 0 sees key 0 only
  for (let h = 0; h < 2; h++) {
    const row = (i) => c.data.subarray((h * 3 + i) * 6, (h * 3 + i + 1) * 6);
    assert.ok(row(0).every(Number.isFinite), `head ${h} row 0 does not see key 1: ${row(0)}`);
    // row 1: keys 0, 1 (NaN), then masked keys; a later -inf must not turn it into a fully masked (zero) row
    assert.ok(row(1).every(Number.isNaN) && row(2).every(Number.isNaN), `head ${h} rows 1, 2: ${row(1)} | ${row(2)}`);
  }
  k.data[0] = NaN; // key 0: row 0's only visible key is NaN, which is not "fully masked"
  const d = sdpa.scaledDotProductAttention(q, k, v, { isCausal: true });
  assert.ok(d.data.every(Number.isNaN), `${d.data.slice(0, 6)}`);
});

test('heap tensors work as inputs of the PyTorch-style entry', () => {
  const q = T([1, 2, 4, 8]), k = T([1, 2, 4, 8]), v = T([1, 2, 4, 8]);
  const hq = sdpa.allocTensor('float32', q.dims);
  hq.data.set(q.data);
  const a = sdpa.scaledDotProductAttention(hq, k, v, { isCausal: true });
  const b = sdpa.scaledDotProductAttention(q, k, v, { isCausal: true });
  assert.equal(a.data, b.data);
  assertClose(a.data, refTorchSdpa(q, k, v, { isCausal: true }), 'heap query, custom route');
  // heap key, value and bool mask on both routes
  const hk = sdpa.allocTensor('float32', k.dims), hv = sdpa.allocTensor('float32', [1, 2, 4, 3]), hm = sdpa.allocTensor('bool', [4, 4]);
  hk.data.set(k.data);
  const v3 = T([1, 2, 4, 3]);
  hv.data.set(v3.data);
  hm.data.set([1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1]);
  const m = { data: Uint8Array.from(hm.data), dims: [4, 4] };
  const c = run('heap key + heap mask (custom)', hq, hk, { data: v.data, dims: v.dims }, { attnMask: hm }, 'custom');
  assertClose(c.data, refTorchSdpa(q, k, v, { attnMask: m }), 'heap key + mask vs reference on plain copies');
  const g = run('heap value with Ev 3 (general)', hq, hk, hv, { attnMask: hm }, 'general', [/value head dim 3/]);
  assertClose(g.data, refTorchSdpa(q, k, v3, { attnMask: m }), 'general route with heap inputs vs reference on plain copies');
  for (const t of [hq, hk, hv, hm]) t.dispose();
});

test.run();
