// rotary-ort.test.js: the rotary option against ONNX Runtime's
// GroupQueryAttention with do_rotary = 1 (onnxruntime-web's wasm build, the
// CPU kernel; its head_size must be a multiple of 16), on the same data:
// a cache holding `past` rows (K as stored: already rotated, which is what
// ORT's past_key holds too) and a step of Sq new rows at positions past ..
// past + Sq - 1 (ORT's positions for seqlens_k = past + Sq - 1).
// - ORT's present_key rows for the new tokens are bit-identical to the K rows
//   the cache stores: both compute the contract's float32 products.
// - The outputs agree within the float32 tolerance (two kernels' summation
//   orders; rotary.test.js holds ours to the float64 reference).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa } from '../../js/index.js';
import { singleNodeModel } from '../../bench/lib/onnx-model.mjs';
import { rng, randTensor, assertClose, sameBits } from './helpers.js';

const ORT_DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'node_modules', 'onnxruntime-web', 'dist') + path.sep;

let ort, sdpa;
test.before(async () => {
  ort = await import('onnxruntime-web');
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  ort.env.wasm.wasmPaths = ORT_DIST;
  ort.env.logLevel = 'error';
  sdpa = await createSdpa({ threads: 1 });
});
test.after(() => sdpa.dispose());

function tables(P, R) {
  const cos = new Float32Array(P * R), sin = new Float32Array(P * R);
  for (let p = 0; p < P; p++) {
    for (let j = 0; j < R; j++) {
      const th = p * Math.pow(10000, -j / R);
      cos[p * R + j] = Math.cos(th);
      sin[p * R + j] = Math.sin(th);
    }
  }
  return { cos: { data: cos, dims: [P, R] }, sin: { data: sin, dims: [P, R] } };
}

/** [1, S, H, D] token-major rows -> [1, H, cap, D] (BNSH) with the first S of cap rows filled. */
function toBNSH(x, H, D, S, cap) {
  const o = new Float32Array(H * cap * D);
  for (let h = 0; h < H; h++) for (let t = 0; t < S; t++) o.set(x.subarray((t * H + h) * D, (t * H + h + 1) * D), (h * cap + t) * D);
  return o;
}

async function gqa({ Hq, Hkv, D, past, Sq, P, interleaved }, data, T) {
  const cap = past + Sq, R = T.cos.dims[1];
  const model = singleNodeModel({
    opType: 'GroupQueryAttention', domain: 'com.microsoft',
    attributes: { num_heads: Hq, kv_num_heads: Hkv, do_rotary: 1, rotary_interleaved: interleaved ? 1 : 0 },
    inputs: [
      { name: 'query', type: 'float32', dims: [1, Sq, Hq * D] },
      { name: 'key', type: 'float32', dims: [1, Sq, Hkv * D] },
      { name: 'value', type: 'float32', dims: [1, Sq, Hkv * D] },
      { name: 'past_key', type: 'float32', dims: [1, Hkv, cap, D] },
      { name: 'past_value', type: 'float32', dims: [1, Hkv, cap, D] },
      { name: 'seqlens_k', type: 'int32', dims: [1] },
      { name: 'total_sequence_length', type: 'int32', dims: [] },
      { name: 'cos_cache', type: 'float32', dims: [P, R] },
      { name: 'sin_cache', type: 'float32', dims: [P, R] },
    ],
    outputs: [
      { name: 'output', type: 'float32', dims: ['b', 's', 'hd'] },
      { name: 'present_key', type: 'float32', dims: ['b', 'hk', 't', 'd'] },
      { name: 'present_value', type: 'float32', dims: ['b', 'hk', 't', 'd'] },
    ],
  });
  const session = await ort.InferenceSession.create(model, { executionProviders: ['wasm'], logSeverityLevel: 3 });
  try {
    const r = await session.run({
      query: new ort.Tensor('float32', data.q, [1, Sq, Hq * D]),
      key: new ort.Tensor('float32', data.k, [1, Sq, Hkv * D]),
      value: new ort.Tensor('float32', data.v, [1, Sq, Hkv * D]),
      past_key: new ort.Tensor('float32', toBNSH(data.pastK, Hkv, D, past, cap), [1, Hkv, cap, D]),
      past_value: new ort.Tensor('float32', toBNSH(data.pastV, Hkv, D, past, cap), [1, Hkv, cap, D]),
      seqlens_k: new ort.Tensor('int32', Int32Array.from([cap - 1]), [1]),
      total_sequence_length: new ort.Tensor('int32', Int32Array.from([cap]), []),
      cos_cache: new ort.Tensor('float32', T.cos.data, [P, R]),
      sin_cache: new ort.Tensor('float32', T.sin.data, [P, R]),
    });
    return { out: r.output.data, presentK: r.present_key.data, cap };
  } finally {
    await session.release();
  }
}

for (const s of [
  { Hq: 8, Hkv: 2, D: 64, past: 37, Sq: 1, P: 256, interleaved: false, label: 'decode, NeoX' },
  { Hq: 8, Hkv: 2, D: 64, past: 20, Sq: 5, P: 256, interleaved: true, label: 'chunk of 5, GPT-J' },
  { Hq: 4, Hkv: 4, D: 32, past: 0, Sq: 9, P: 64, interleaved: false, label: 'first prompt, MHA' },
]) {
  test(`rotary = ORT GroupQueryAttention do_rotary (${s.label})`, async () => {
    const { Hq, Hkv, D, past, Sq, P, interleaved } = s;
    const rand = rng(past + Sq), T = tables(P, D / 2);
    const cache = sdpa.createKVCache({ maxSeqLen: P, numKvHeads: Hkv, headDim: D });
    const rotary = { ...T, interleaved };
    if (past) cache.update(randTensor(rand, [1, past, Hkv, D]), randTensor(rand, [1, past, Hkv, D]), { rotary });
    const pastRows = past ? cache.read(0, past) : { k: { data: new Float32Array(0) }, v: { data: new Float32Array(0) } };
    const q = randTensor(rand, [1, Sq, Hq, D]), k = randTensor(rand, [1, Sq, Hkv, D]), v = randTensor(rand, [1, Sq, Hkv, D]);
    const ours = cache.step(q, k, v, { rotary });
    const theirs = await gqa(s, { q: q.data, k: k.data, v: v.data, pastK: pastRows.k.data, pastV: pastRows.v.data }, T);
    // the new K rows: ORT's present_key (BNSH) against the rows the cache stores
    const stored = cache.read(past, Sq).k.data, fromOrt = new Float32Array(Sq * Hkv * D);
    for (let t = 0; t < Sq; t++) for (let h = 0; h < Hkv; h++) fromOrt.set(theirs.presentK.subarray((h * theirs.cap + past + t) * D, (h * theirs.cap + past + t + 1) * D), (t * Hkv + h) * D);
    assert.ok(sameBits(stored, fromOrt), 'rotated K rows: the bits of ORT\'s present_key');
    assertClose(ours.data, Float64Array.from(theirs.out), 'output vs ORT');
    cache.dispose();
  });
}

test.run();
