// relaxed.test.js: the relaxed-SIMD builds (relaxed, relaxed-threads) and how
// createSdpa picks a build.
//
// Run twice by npm test: in the plain uvu run (Node 20 without relaxed SIMD),
// where the selection tests spawn child processes with and without
// --experimental-wasm-relaxed-simd; and in the uvu-relaxed run (node
// --experimental-wasm-relaxed-simd, scripts/test-all.mjs), where the relaxed
// builds' results are checked against the float64 reference in this process
// and the other suites of that run (numerics, cache, ...) use the
// relaxed-threads build by default (asserted here).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createSdpa } from '../../js/index.js';
import { rng, randTensor, assertClose, expectReject } from './helpers.js';
import { refCustomSdpa } from './reference.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (f) => fs.readFileSync(path.join(ROOT, 'dist', f));
const RELAXED_FLAG = '--experimental-wasm-relaxed-simd';
// (a module with f32x4.relaxed_madd, the same opcode js/loader.js probes with)
const relaxedHere = WebAssembly.validate(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 123, 3, 2, 1, 0, 10, 28, 1, 26, 0,
  67, 0, 0, 0, 0, 253, 19, 67, 0, 0, 0, 0, 253, 19, 67, 0, 0, 0, 0, 253, 19, 253, 133, 2, 11]));

test('build: an unknown value is E_ARG naming the option, the accepted values and the value given', async () => {
  for (const [build, got] of [['relaxed-simd', 'the string "relaxed-simd"'], ['auto', 'the string "auto"'], [4, 'number 4'], [true, 'true']]) {
    const e = await expectReject(createSdpa({ build }), 'E_ARG');
    assert.ok(e.message.startsWith("createSdpa: build must be one of 'relaxed-threads', 'relaxed', 'simd-threads', 'simd' (or unset: chosen by feature detection), got "), e.message);
    assert.ok(e.message.includes(got), `${e.message} names ${got}`);
  }
  await expectReject(createSdpa({ build: 'relaxed', threads: 2 }), 'E_ARG', [/threads is 2 but build 'relaxed' is single-threaded; use build 'relaxed-threads' or threads: 1/]);
});

// ------------------------------------------------------------------ selection (child processes)

/** createSdpa(options) in a child Node, with or without relaxed SIMD: { ok: info } or { code, message }. */
function inChild(relaxed, optionsSource) {
  const url = pathToFileURL(path.join(ROOT, 'js', 'index.js')).href;
  const code = `
    import fs from 'node:fs';
    import { createSdpa } from ${JSON.stringify(url)};
    const read = (f) => fs.readFileSync(${JSON.stringify(path.join(ROOT, 'dist'))} + '/' + f);
    try { const s = await createSdpa(${optionsSource}); console.log(JSON.stringify({ ok: s.info })); s.dispose(); }
    catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }`;
  const r = spawnSync(process.execPath, [...(relaxed ? [RELAXED_FLAG] : []), '--input-type=module', '-e', code], { cwd: ROOT, encoding: 'utf8', timeout: 30000 });
  assert.is(r.error, undefined, `${r.error && r.error.message} (hung?)`);
  assert.is(r.status, 0, r.stderr.slice(-400));
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

const builtIn = (r) => (r.ok ? `${r.ok.build}/${r.ok.relaxedSimd}/${r.ok.threads}` : `${r.code}: ${r.message}`);

if (!relaxedHere) {
  test('feature detection: with relaxed SIMD the relaxed builds are picked, without it the plain ones', () => {
    const cases = [
      // [relaxed SIMD in the child, options, build/relaxedSimd/threads]
      [true, '{ threads: 2 }', 'relaxed-threads/true/2'],
      [true, '{ threads: 1 }', 'relaxed-threads/true/1'],
      [false, '{ threads: 2 }', 'simd-threads/false/2'],
      [false, '{ threads: 1 }', 'simd-threads/false/1'],
      // forcing any build where it runs
      [true, "{ build: 'relaxed' }", 'relaxed/true/1'],
      [true, "{ build: 'simd-threads', threads: 2 }", 'simd-threads/false/2'],
      [true, "{ build: 'simd' }", 'simd/false/1'],
      [false, "{ build: 'simd' }", 'simd/false/1'],
      // the caller's binary decides the build
      [true, "{ wasmBinary: read('sdpa-relaxed.wasm') }", 'relaxed/true/1'],
      [true, "{ wasmModule: new WebAssembly.Module(read('sdpa-relaxed-threads.wasm')), threads: 2 }", 'relaxed-threads/true/2'],
      [true, "{ wasmBinary: read('sdpa-simd-threads.wasm'), threads: 2 }", 'simd-threads/false/2'],
    ];
    for (const [relaxed, opts, want] of cases) assert.is(builtIn(inChild(relaxed, opts)), want, `${relaxed ? 'with' : 'without'} relaxed SIMD, ${opts}`);
  });

  test('forcing a relaxed build where relaxed SIMD does not validate is E_LOAD with advice, never a silent fallback', () => {
    for (const opts of ["{ build: 'relaxed' }", "{ build: 'relaxed-threads' }", "{ wasmBinary: read('sdpa-relaxed.wasm') }"]) {
      const r = inChild(false, opts);
      assert.is(r.code, 'E_LOAD', `${opts}: ${builtIn(r)}`);
      assert.match(r.message, /needs WebAssembly relaxed SIMD, which this runtime does not validate/, opts);
      assert.match(r.message, /run node with --experimental-wasm-relaxed-simd \(Node 20\), or use Node 21 or later/, opts);
      assert.match(r.message, /or use the '(simd|simd-threads)' build/, opts);
    }
    // a build forced against the caller's module: E_ARG naming both
    const m = inChild(true, "{ wasmBinary: read('sdpa-relaxed.wasm'), build: 'simd' }");
    assert.is(m.code, 'E_ARG', builtIn(m));
    assert.match(m.message, /wasmBinary is the 'relaxed' build's module \(sdpa-relaxed\.wasm\) but build is 'simd'/);
  });

  test('the relaxed .wasm files really hold relaxed opcodes: they do not validate without relaxed SIMD, the plain ones do', () => {
    for (const f of ['sdpa-relaxed.wasm', 'sdpa-relaxed-threads.wasm']) assert.is(WebAssembly.validate(read(f)), false, f);
    for (const f of ['sdpa-simd.wasm', 'sdpa-simd-threads.wasm']) assert.is(WebAssembly.validate(read(f)), true, f);
  });
}

// ------------------------------------------------------------------ numerics (relaxed SIMD in this process)

/** Shapes that reach every kernel path: decode (GQA, MQA), prefill, masks, odd head dims (SIMD tails), windows. */
function workloads() {
  const rand = rng(2027);
  const mask = { data: new Float32Array(24 * 90), dims: [24, 90] };
  for (let i = 0; i < mask.data.length; i++) mask.data[i] = rand() < 0.15 ? -Infinity : rand() - 0.5;
  const t = (dims, amp) => randTensor(rand, dims, amp);
  return [
    ['decode GQA 8/2, D 64, 300 keys', t([1, 1, 8, 64]), t([1, 300, 2, 64]), t([1, 300, 2, 64]), { startPos: 299, isCausal: true }],
    ['decode MQA 8/1, D 128, batch 2', t([2, 1, 8, 128]), t([2, 200, 1, 128]), t([2, 200, 1, 128]), { startPos: 199 }],
    ['prefill 96, 4/4, D 80, causal', t([1, 96, 4, 80]), t([1, 96, 4, 80]), t([1, 96, 4, 80]), { isCausal: true }],
    ['prefill 33 after 40, D 7 (tails), large scores', t([1, 33, 2, 7], 4), t([1, 73, 1, 7], 4), t([1, 73, 1, 7]), { startPos: 40, isCausal: true }],
    ['masked 24 x 90, D 20', t([1, 24, 4, 20]), t([1, 90, 2, 20]), t([1, 90, 2, 20]), { attnMask: mask }],
    ['sliding window 16, softcap 30, D 64', t([1, 48, 4, 64], 3), t([1, 48, 2, 64], 3), t([1, 48, 2, 64]), { isCausal: true, window: 16, softcap: 30 }],
  ];
}

if (relaxedHere) {
  let relaxed1, relaxed2, relaxedSingle, plain;
  test.before(async () => {
    relaxed1 = await createSdpa({ build: 'relaxed-threads', threads: 1 });
    relaxed2 = await createSdpa({ build: 'relaxed-threads', threads: 2 });
    relaxedSingle = await createSdpa({ build: 'relaxed' });
    plain = await createSdpa({ build: 'simd-threads', threads: 1 });
  });
  test.after(() => { for (const s of [relaxed1, relaxed2, relaxedSingle, plain]) s && s.dispose(); });

  test('with relaxed SIMD, createSdpa() picks relaxed-threads (so every suite of this run tests it)', async () => {
    const s = await createSdpa();
    try { assert.equal([s.info.build, s.info.relaxedSimd], ['relaxed-threads', true]); } finally { s.dispose(); }
    assert.equal([relaxedSingle.info.build, relaxedSingle.info.relaxedSimd, relaxedSingle.info.threads], ['relaxed', true, 1]);
    assert.equal([relaxed2.info.build, relaxed2.info.threads], ['relaxed-threads', 2]);
    assert.equal([plain.info.build, plain.info.relaxedSimd], ['simd-threads', false]);
  });

  test('relaxed builds (1 and 2 threads, single-thread build) match the float64 reference within the float32 tolerance', () => {
    for (const [label, q, k, v, opts] of workloads()) {
      const ref = refCustomSdpa(q, k, v, opts);
      for (const s of [relaxed1, relaxed2, relaxedSingle, plain]) {
        assertClose(s.customSdpa(q, k, v, opts).data, ref, `${label}, ${s.info.build} ${s.info.threads}t`);
      }
    }
  });

  test('KV cache steps (float32, float16, int8) on the relaxed build match the reference over the stored values', () => {
    const [Hq, Hkv, D, S] = [8, 2, 64, 40];
    for (const dtype of ['float32', 'float16', 'int8']) {
      const rand = rng(dtype.length * 101);
      for (const s of [relaxed2, relaxedSingle]) {
        const cache = s.createKVCache({ maxSeqLen: 64, numKvHeads: Hkv, headDim: D, dtype });
        const K = randTensor(rand, [1, S, Hkv, D]), V = randTensor(rand, [1, S, Hkv, D]);
        cache.update(K, V, 0);
        const q = randTensor(rand, [1, 1, Hq, D]);
        const out = cache.attend(q, { startPos: S - 1, isCausal: true });
        // the reference reads the cache's own (rounded / quantised) values
        const stored = cache.read(0, S);
        const ref = refCustomSdpa(q, stored.k, stored.v, { startPos: S - 1, isCausal: true });
        if (dtype === 'int8') {
          // the int8 path's own tolerance (docs/CONTRACT.md): q is quantised to int16 for Q.K
          let maxRef = 0, worst = 0;
          for (let i = 0; i < ref.length; i++) { maxRef = Math.max(maxRef, Math.abs(ref[i])); worst = Math.max(worst, Math.abs(out.data[i] - ref[i])); }
          assert.ok(worst <= 2e-3 * (1 + maxRef), `int8 ${s.info.build}: ${worst}`);
        } else {
          assertClose(out.data, ref, `${dtype} ${s.info.build}`);
        }
        cache.dispose();
      }
    }
  });

  test('relaxed and plain builds differ by FMA rounding only (<= 1e-5 relative), and 1 vs 2 threads agree', () => {
    for (const [label, q, k, v, opts] of workloads()) {
      const a = relaxed1.customSdpa(q, k, v, opts).data, b = plain.customSdpa(q, k, v, opts).data, c = relaxed2.customSdpa(q, k, v, opts).data;
      let scale = 0, d = 0, t = 0;
      for (let i = 0; i < a.length; i++) { scale = Math.max(scale, Math.abs(b[i])); d = Math.max(d, Math.abs(a[i] - b[i])); t = Math.max(t, Math.abs(a[i] - c[i])); }
      assert.ok(d <= 1e-5 * (1 + scale), `${label}: relaxed vs plain ${d}`);
      assert.ok(t <= 1e-6 * (1 + scale), `${label}: relaxed 1 vs 2 threads ${t}`);
    }
  });
}

test.run();
