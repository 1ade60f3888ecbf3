// loader.test.js: createSdpa's loading options in Node: wasmPaths (prefix and
// per-file map), wasmBinary, wasmModule, initTimeout, and thread counts above
// the cores. Browsers, bundlers and CDNs: tests/bundlers/run.mjs.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createSdpa } from '../../js/index.js';
import { rng, randTensor, assertClose, expectReject } from './helpers.js';
import { refCustomSdpa } from './reference.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const DIST = path.join(ROOT, 'dist');
const read = (f) => fs.readFileSync(path.join(DIST, f));
let tmp;
test.before(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-loader-'));
  // a copy of dist/ elsewhere (dereference: never write through a symlink)
  fs.cpSync(DIST, path.join(tmp, 'files'), { recursive: true, dereference: true });
});
test.after(() => { if (tmp) fs.rmSync(tmp, { recursive: true, force: true }); });

/** Three causal decode steps through a cache, checked against the float64 reference. */
function decodeChecks(sdpa, label) {
  const [Hq, Hkv, D, S] = [4, 2, 16, 3];
  const rand = rng(11);
  const cache = sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: Hkv, headDim: D });
  const K = randTensor(rand, [1, S, Hkv, D]), V = randTensor(rand, [1, S, Hkv, D]);
  for (let pos = 0; pos < S; pos++) {
    const q = randTensor(rand, [1, 1, Hq, D]);
    const row = (t) => ({ data: t.data.slice(pos * Hkv * D, (pos + 1) * Hkv * D), dims: [1, 1, Hkv, D] });
    const out = cache.step(q, row(K), row(V), pos, { isCausal: true });
    const kk = { data: K.data.slice(0, (pos + 1) * Hkv * D), dims: [1, pos + 1, Hkv, D] };
    const vv = { data: V.data.slice(0, (pos + 1) * Hkv * D), dims: [1, pos + 1, Hkv, D] };
    assertClose(out.data, refCustomSdpa(q, kk, vv, { startPos: pos, isCausal: true }), `${label}, step ${pos}`);
  }
}

test('every loading option is checked: E_ARG naming it, expected vs actual', async () => {
  const bad = [
    [{ wasmPaths: 5 }, /wasmPaths must be a URL prefix .* got number 5/],
    [{ wasmPaths: '' }, /wasmPaths must be a URL or a non-empty string/],
    [{ wasmPaths: ['a/'] }, /wasmPaths must be .* got an Array/],
    [{ wasmPaths: { 'sdpa.wasm': 'x' } }, /wasmPaths has the key 'sdpa\.wasm'; the keys are the file names sdpa-simd-threads\.mjs/],
    [{ wasmPaths: { 'sdpa-simd.wasm': 3 } }, /wasmPaths\['sdpa-simd\.wasm'\] must be a URL or a non-empty string, got number 3/],
    [{ wasmBinary: 'bytes' }, /wasmBinary must be an ArrayBuffer or a Uint8Array .* got the string/],
    [{ wasmBinary: new DataView(new ArrayBuffer(8)) }, /wasmBinary must be .* got a DataView/],
    [{ wasmBinary: new Uint8Array(0) }, /wasmBinary is empty/],
    [{ wasmModule: {} }, /wasmModule must be a WebAssembly\.Module .* got an object/],
    [{ wasmModule: new WebAssembly.Module(read('sdpa-simd.wasm')), wasmBinary: read('sdpa-simd.wasm') }, /wasmBinary and wasmModule are both given/],
    [{ initTimeout: '1000' }, /initTimeout must be a number of milliseconds, got the string/],
    [{ initTimeout: 0 }, /initTimeout is 0; expected milliseconds > 0 \(Infinity: no limit\)/],
    [{ initTimeout: NaN }, /initTimeout is NaN/],
    [{ initTimeOut: 10 }, /unknown option 'initTimeOut' \(did you mean 'initTimeout'\?\)/],
    [{ wasmPaths: 'https://cdn.example/sdpa/' }, /in Node the files are read from disk: use a file: URL or a path/],
  ];
  for (const [opts, re] of bad) {
    const e = await expectReject(createSdpa(opts), 'E_ARG');
    assert.match(e.message, re, JSON.stringify(Object.keys(opts)));
    assert.match(e.message, /^createSdpa: /);
  }
});

test('wasmBinary: the bytes decide the build, no file is read for the wasm', async () => {
  for (const [file, build] of [['sdpa-simd.wasm', 'simd'], ['sdpa-simd-threads.wasm', 'simd-threads']]) {
    for (const bin of [read(file), new Uint8Array(read(file)).buffer]) {
      // the packaged .wasm files are out of the way: only the glue (and worker) are used
      const s = await createSdpa({ wasmBinary: bin, wasmPaths: { [file]: path.join(tmp, 'nowhere', file) } });
      try {
        assert.is(s.info.build, build);
        decodeChecks(s, `wasmBinary ${file}`);
      } finally { s.dispose(); }
    }
  }
  await expectReject(createSdpa({ wasmBinary: read('sdpa-simd.wasm'), build: 'simd-threads' }), 'E_ARG', [/wasmBinary is the 'simd' build's module .* build is 'simd-threads'/]);
  await expectReject(createSdpa({ wasmBinary: read('sdpa-simd.wasm'), threads: 2 }), 'E_ARG', [/threads is 2 but wasmBinary is the single-thread 'simd' build/]);
  await expectReject(createSdpa({ wasmBinary: new Uint8Array([0, 97, 115, 109, 9]) }), 'E_LOAD', [/wasmBinary \(5 bytes\) is not a valid WebAssembly module/]);
});

test('wasmModule: a compiled module is used as is (threads build: shared with the pool workers)', async () => {
  const mod = await WebAssembly.compile(read('sdpa-simd-threads.wasm'));
  const s = await createSdpa({ wasmModule: mod, threads: 2 });
  try {
    assert.equal([s.info.build, s.info.threads], ['simd-threads', 2]);
    decodeChecks(s, 'wasmModule');
  } finally { s.dispose(); }
});

test('wasmPaths: a prefix (path, file: URL) or a per-file map; a missing file is E_LOAD naming it and the option', async () => {
  const dir = path.join(tmp, 'files') + path.sep;
  for (const wasmPaths of [dir, pathToFileURL(dir).href, pathToFileURL(dir)]) {
    const s = await createSdpa({ wasmPaths, threads: 2 });
    try { decodeChecks(s, `wasmPaths ${wasmPaths}`); } finally { s.dispose(); }
  }
  const s = await createSdpa({ build: 'simd', wasmPaths: { 'sdpa-simd.wasm': path.join(dir, 'sdpa-simd.wasm') } });
  try { decodeChecks(s, 'wasmPaths map'); } finally { s.dispose(); }

  const gone = path.join(tmp, 'gone', 'sdpa-simd.wasm');
  const e = await expectReject(createSdpa({ build: 'simd', wasmPaths: { 'sdpa-simd.wasm': gone } }), 'E_LOAD');
  assert.ok(e.message.includes(gone), e.message);
  assert.match(e.message, /ENOENT/);
  assert.match(e.message, /check wasmPaths\['sdpa-simd\.wasm'\]/);
  const g = await expectReject(createSdpa({ wasmPaths: path.join(tmp, 'gone') + path.sep }), 'E_LOAD');
  assert.ok(g.message.includes(path.join(tmp, 'gone', 'sdpa-simd-threads.wasm')), g.message);
});

test('threads above the cores: clamped to max(cores, 8), one console.warn says what was asked and what runs', async () => {
  const cores = os.availableParallelism();
  const cap = Math.min(64, Math.max(cores, 8));
  const warns = [];
  const warn = console.warn;
  console.warn = (...a) => warns.push(a.join(' '));
  let s;
  try {
    s = await createSdpa({ threads: 997 });
  } finally { console.warn = warn; }
  try {
    assert.is(s.info.threads, cap);
    assert.is(warns.length, 1, JSON.stringify(warns));
    assert.match(warns[0], /threads: 997 was asked/);
    assert.ok(warns[0].includes(`this machine has ${cores} cores; using ${cap} threads`), warns[0]);
    decodeChecks(s, 'clamped');
  } finally { s.dispose(); }
  if (cores < 8) {
    // more threads than cores but at most 8: run as asked, with a warning that they share the cores
    const w2 = [];
    console.warn = (...a) => w2.push(a.join(' '));
    let t;
    try { t = await createSdpa({ threads: cores + 1 }); } finally { console.warn = warn; }
    try {
      assert.is(t.info.threads, cores + 1);
      assert.equal(w2, [`sdpa-wasm: threads: ${cores + 1} was asked on ${cores} cores: the threads share the cores, which is slower than threads: ${cores}`]);
    } finally { t.dispose(); }
  }
});

function runNode(code, timeout = 30000) {
  return spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: ROOT, encoding: 'utf8', timeout });
}

// createSdpa(options) in a child process: its outcome ({ ok } or { code, message, ms }) and
// that the child neither hung nor stayed alive on a leftover worker.
function createSdpaInChild(optionsSource) {
  const url = pathToFileURL(path.join(ROOT, 'js', 'index.js')).href;
  const r = runNode(`
    import { createSdpa } from ${JSON.stringify(url)};
    const t0 = Date.now();
    try { const s = await createSdpa(${optionsSource});
      console.log(JSON.stringify({ ok: s.info })); s.dispose(); }
    catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message, ms: Date.now() - t0 })); }`, 20000);
  assert.is(r.error, undefined, `${r.error && r.error.message} (hung?)`);
  assert.is(r.status, 0, r.stderr.slice(-400));
  const res = JSON.parse(r.stdout.trim().split('\n').pop());
  res.stdout = r.stdout;
  return res;
}

test('initTimeout: a pthread worker that never answers is E_LOAD naming it, in bounded time, and the process exits', () => {
  const silent = path.join(tmp, 'files', 'silent.worker.js'); // dist/package.json there says commonjs
  fs.writeFileSync(silent, "require('worker_threads').parentPort.on('message', () => {});\n");
  const res = createSdpaInChild(`{ threads: 2, initTimeout: 800, wasmPaths: { 'sdpa-simd-threads.worker.js': ${JSON.stringify(silent)} } }`);
  assert.is(res.code, 'E_LOAD', res.stdout);
  assert.match(res.message, /did not load within 800 ms \(initTimeout\)/);
  assert.ok(res.message.includes(silent), res.message);
  assert.ok(res.ms >= 750 && res.ms < 5000, `rejected after ${res.ms} ms`);
});

test('a pool worker whose glue import fails is E_LOAD at once (no initTimeout wait), and the process exits', () => {
  const real = fs.readFileSync(path.join(DIST, 'sdpa-simd-threads.worker.js'), 'utf8');
  const broken = real.replace('e.data.urlOrBlob?import(e.data.urlOrBlob)', 'e.data.urlOrBlob?import("./missing-glue.mjs")');
  assert.is.not(broken, real, 'the worker script changed: update this test');
  const file = path.join(tmp, 'files', 'bad-import.worker.js');
  fs.writeFileSync(file, broken);
  const res = createSdpaInChild(`{ threads: 2, wasmPaths: { 'sdpa-simd-threads.worker.js': ${JSON.stringify(file)} } }`);
  assert.is(res.code, 'E_LOAD', res.stdout);
  assert.ok(res.message.includes(file), res.message);
  assert.match(res.message, /missing-glue\.mjs/);
  assert.ok(res.ms < 5000, `rejected after ${res.ms} ms`);
});

test.run();
