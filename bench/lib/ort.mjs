// Peer: onnxruntime-web (wasm backend, SIMD, same thread count) running the
// same shapes through single-node models: GroupQueryAttention (com.microsoft)
// and the standard Attention (opset 23). Reports session.run end-to-end time
// and the op's own time from ORT's profiler.
//
// Notes (measured with onnxruntime-web 1.30.0 in Node 20):
// - env.wasm.numThreads is fixed when the wasm backend first initialises, so
//   one process runs one thread count (bench/run.mjs forks a child per count).
// - With enableProfiling the wasm build prints the profile JSON (Chrome trace
//   format, durations in µs) through the Emscripten stdout hook when
//   session.endProfiling() is called; we capture it by wrapping fs.writeSync.
// - GroupQueryAttention's shape inference makes present_key as long as the
//   past_key buffer, so past_key/past_value are given with capacity
//   past + Sq (the onnxruntime-genai "shared buffer" layout) with rows
//   0 .. past-1 filled, seqlens_k = total - 1, total_sequence_length = total.
// - Attention-23 takes past_key/past_value of exactly `past` rows; is_causal
//   is aligned bottom-right when a past is given (checked against the reference).
// - gqa16 is the same GroupQueryAttention model with T = float16 (query, K/V,
//   past, output: the op has one type T): its feeds are the float16 bits
//   (nearest even) of the same data and its output is decoded to float32.
// - Only `output`/`Y` is fetched; present_* stay inside ORT (but the op still
//   writes them, as a decode loop needs). session.run copies every input from
//   JS into wasm memory on each call: that copy is part of the end-to-end time.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { singleNodeModel } from './onnx-model.mjs';
import { timeIt, stats, toF16Bits, fromF16Bits } from './util.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const ORT_DIST = path.resolve(here, '..', '..', 'node_modules', 'onnxruntime-web', 'dist') + path.sep;

/** BNSH copy of token-major rows [from, from+len) of x [N, H, D] into a [H, cap, D] buffer (same array type). */
function toBNSH(x, H, D, from, len, cap) {
  const o = new x.constructor(H * cap * D);
  for (let h = 0; h < H; h++) {
    for (let t = 0; t < len; t++) {
      const src = ((from + t) * H + h) * D;
      o.set(x.subarray(src, src + D), (h * cap + t) * D);
    }
  }
  return o;
}

function capture(fn) {
  const orig = fs.writeSync;
  let text = '';
  fs.writeSync = function (fd, data, ...rest) {
    if (fd === 1 && typeof data === 'string') { text += data; return Buffer.byteLength(data); }
    return orig.call(this, fd, data, ...rest);
  };
  try { fn(); } finally { fs.writeSync = orig; }
  return text;
}

/** T: 'float32', or 'float16' (feeds are converted to float16 bits, the output back to float32). */
function buildGqa(s, T = 'float32') {
  const { Hq, Hkv, D, Sq, past } = s;
  const cap = past + Sq;
  const cv = T === 'float16' ? toF16Bits : (x) => x;
  return {
    node: 'GroupQueryAttention',
    model: singleNodeModel({
      opType: 'GroupQueryAttention', domain: 'com.microsoft',
      attributes: { num_heads: Hq, kv_num_heads: Hkv },
      inputs: [
        { name: 'query', type: T, dims: [1, Sq, Hq * D] },
        { name: 'key', type: T, dims: [1, Sq, Hkv * D] },
        { name: 'value', type: T, dims: [1, Sq, Hkv * D] },
        { name: 'past_key', type: T, dims: [1, Hkv, cap, D] },
        { name: 'past_value', type: T, dims: [1, Hkv, cap, D] },
        { name: 'seqlens_k', type: 'int32', dims: [1] },
        { name: 'total_sequence_length', type: 'int32', dims: [] },
      ],
      outputs: [
        { name: 'output', type: T, dims: ['b', 's', 'hd'] },
        { name: 'present_key', type: T, dims: ['b', 'hk', 't', 'd'] },
        { name: 'present_value', type: T, dims: ['b', 'hk', 't', 'd'] },
      ],
    }),
    output: 'output',
    feeds: (ort, data) => {
      const d = { q: cv(data.q), k: cv(data.k), v: cv(data.v) };
      return {
        query: new ort.Tensor(T, d.q, [1, Sq, Hq * D]),
        key: new ort.Tensor(T, d.k.subarray(past * Hkv * D, cap * Hkv * D), [1, Sq, Hkv * D]),
        value: new ort.Tensor(T, d.v.subarray(past * Hkv * D, cap * Hkv * D), [1, Sq, Hkv * D]),
        past_key: new ort.Tensor(T, toBNSH(d.k, Hkv, D, 0, past, cap), [1, Hkv, cap, D]),
        past_value: new ort.Tensor(T, toBNSH(d.v, Hkv, D, 0, past, cap), [1, Hkv, cap, D]),
        seqlens_k: new ort.Tensor('int32', Int32Array.from([cap - 1]), [1]),
        total_sequence_length: new ort.Tensor('int32', Int32Array.from([cap]), []),
      };
    },
  };
}

function buildAttention23(s) {
  const { Hq, Hkv, D, Sq, past } = s;
  const hasPast = past > 0;
  const inputs = [
    { name: 'Q', type: 'float32', dims: [1, Sq, Hq * D] },
    { name: 'K', type: 'float32', dims: [1, Sq, Hkv * D] },
    { name: 'V', type: 'float32', dims: [1, Sq, Hkv * D] },
  ];
  if (hasPast) {
    inputs.push({ name: 'past_key', type: 'float32', dims: [1, Hkv, past, D] });
    inputs.push({ name: 'past_value', type: 'float32', dims: [1, Hkv, past, D] });
  }
  const outputs = [{ name: 'Y', type: 'float32', dims: ['b', 's', 'hd'] }];
  if (hasPast) {
    outputs.push({ name: 'present_key', type: 'float32', dims: ['b', 'hk', 't', 'd'] });
    outputs.push({ name: 'present_value', type: 'float32', dims: ['b', 'hk', 't', 'd'] });
  }
  return {
    node: 'Attention',
    model: singleNodeModel({
      opType: 'Attention', opset: 23,
      attributes: { q_num_heads: Hq, kv_num_heads: Hkv, is_causal: s.causal ? 1 : 0 },
      inputs, outputs,
      nodeInputs: hasPast ? ['Q', 'K', 'V', '', 'past_key', 'past_value'] : ['Q', 'K', 'V'],
    }),
    output: 'Y',
    feeds: (ort, d) => {
      const f = {
        Q: new ort.Tensor('float32', d.q, [1, Sq, Hq * D]),
        K: new ort.Tensor('float32', d.k.subarray(past * Hkv * D, (past + Sq) * Hkv * D), [1, Sq, Hkv * D]),
        V: new ort.Tensor('float32', d.v.subarray(past * Hkv * D, (past + Sq) * Hkv * D), [1, Sq, Hkv * D]),
      };
      if (hasPast) {
        f.past_key = new ort.Tensor('float32', toBNSH(d.k, Hkv, D, 0, past, past), [1, Hkv, past, D]);
        f.past_value = new ort.Tensor('float32', toBNSH(d.v, Hkv, D, 0, past, past), [1, Hkv, past, D]);
      }
      return f;
    },
  };
}

export const ORT_OPS = { gqa: buildGqa, gqa16: (s) => buildGqa(s, 'float16'), attn: buildAttention23 };

export async function createOrtPeer({ threads }) {
  const ort = await import('onnxruntime-web');
  ort.env.wasm.numThreads = threads;
  ort.env.wasm.proxy = false;
  ort.env.wasm.wasmPaths = ORT_DIST;
  ort.env.logLevel = 'error';

  /**
   * Runs one op on one shape. check(output Float32Array) is called on the
   * first run's output (decoded to float32 for gqa16). Returns { run, op, output } (ms stats) or throws.
   */
  async function runOp(which, s, data, timing, check) {
    const spec = ORT_OPS[which](s);
    const session = await ort.InferenceSession.create(spec.model, {
      executionProviders: ['wasm'], enableProfiling: true, logSeverityLevel: 3,
    });
    try {
      const feeds = spec.feeds(ort, data);
      const fetches = [spec.output];
      const first = await session.run(feeds, fetches);
      const t = first[spec.output];
      const output = t.type === 'float16' ? fromF16Bits(t.data) : t.data;
      const verdict = check(output);
      const run = await timeIt(async () => { await session.run(feeds, fetches); }, timing);
      const text = capture(() => session.endProfiling());
      let op = null, profileError = null;
      try {
        const events = JSON.parse(text).filter((e) => e.cat === 'Node' && e.name === `${spec.node}_kernel_time`);
        const last = events.slice(-run.samples.length).map((e) => e.dur / 1000);
        if (last.length === run.samples.length) op = stats(last);
        else profileError = `profile has ${events.length} ${spec.node} events, expected ≥ ${run.samples.length}`;
      } catch (e) {
        profileError = `could not parse ORT's profile (${text.length} chars): ${e.message}`;
      }
      delete run.samples;
      return { run, op, profileError, check: verdict, output };
    } finally {
      await session.release();
    }
  }

  return { version: ort.env.versions.web, runOp };
}
