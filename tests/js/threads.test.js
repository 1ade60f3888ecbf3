// threads.test.js: builds and thread counts give the same answers; loading
// errors are clear; a Node process exits on its own.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createSdpa, VERSION, INTERNALS } from '../../js/index.js';
import { rng, randTensor, sameBits, expectReject } from './helpers.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
let one, two, single;
test.before(async () => {
  one = await createSdpa({ threads: 1 });
  two = await createSdpa({ threads: 2 });
  single = await createSdpa({ build: 'simd' });
});
test.after(() => { for (const s of [one, two, single]) s && s.dispose(); });

/** Workloads big enough to be split over threads. */
function workloads() {
  const rand = rng(77);
  const mask = { data: new Float32Array(64 * 300), dims: [64, 300] };
  for (let i = 0; i < mask.data.length; i++) mask.data[i] = rand() < 0.1 ? -Infinity : rand();
  return [
    ['prefill 128, 8/8 heads, D 64, causal', randTensor(rand, [1, 128, 8, 64]), randTensor(rand, [1, 128, 8, 64]), randTensor(rand, [1, 128, 8, 64]), { isCausal: true }],
    ['decode over 4096 keys, GQA 32/8, D 128', randTensor(rand, [1, 1, 32, 128]), randTensor(rand, [1, 4096, 8, 128]), randTensor(rand, [1, 4096, 8, 128]), { startPos: 4095, isCausal: true }],
    ['speculative 17 after 130, batch 2, MQA 8/1', randTensor(rand, [2, 17, 8, 64]), randTensor(rand, [2, 160, 1, 64]), randTensor(rand, [2, 160, 1, 64]), { startPos: 130, isCausal: true }],
    ['masked 64 x 300, D 80', randTensor(rand, [1, 64, 4, 80]), randTensor(rand, [1, 300, 2, 80]), randTensor(rand, [1, 300, 2, 80]), { attnMask: mask }],
  ];
}

function maxRelDiff(a, b) {
  let m = 0, s = 0;
  for (let i = 0; i < a.length; i++) { m = Math.max(m, Math.abs(a[i] - b[i])); s = Math.max(s, Math.abs(b[i])); }
  return m / (s || 1);
}

test('info: build, threads, version', () => {
  // (this suite runs without relaxed SIMD: relaxed.test.js covers the relaxed builds)
  assert.equal(one.info, { build: 'simd-threads', relaxedSimd: false, threads: 1, version: VERSION });
  assert.is(two.info.threads, 2);
  assert.equal(single.info, { build: 'simd', relaxedSimd: false, threads: 1, version: VERSION });
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  assert.is(VERSION, pkg.version, 'js/version.js matches package.json');
});

test('after loading, the pool workers have the glue\'s own error handler back', () => {
  const P = two[INTERNALS].M.PThread;
  const workers = [...P.unusedWorkers, ...P.runningWorkers];
  assert.ok(workers.length >= 1);
  for (const w of workers) {
    const d = Object.getOwnPropertyDescriptor(w, 'onerror');
    assert.ok(d && typeof d.value === 'function', 'a plain onerror function (not the load-time watcher)');
    assert.is(w.listenerCount('error'), 1, 'only the glue\'s error listener');
  }
});

test("threads: 'auto' uses the available cores, capped at 8", async () => {
  const s = await createSdpa({ threads: 'auto' });
  try {
    const cores = typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length;
    assert.is(s.info.threads, Math.min(cores, 8));
  } finally { s.dispose(); }
});

test('1 thread and 2 threads give the same answer (bit for bit)', () => {
  for (const [label, q, k, v, opts] of workloads()) {
    const a = one.customSdpa(q, k, v, opts), b = two.customSdpa(q, k, v, opts);
    const rel = maxRelDiff(a.data, b.data);
    assert.ok(rel <= 1e-6, `${label}: 1 vs 2 threads differ by ${rel} (relative)`);
    assert.ok(sameBits(a.data, b.data), `${label}: not bit-identical (max relative difference ${rel})`);
  }
});

test('the single-thread build gives the same answer as the threaded build', () => {
  for (const [label, q, k, v, opts] of workloads()) {
    const a = single.customSdpa(q, k, v, opts), b = two.customSdpa(q, k, v, opts);
    const rel = maxRelDiff(a.data, b.data);
    assert.ok(rel <= 1e-6, `${label}: simd vs simd-threads differ by ${rel} (relative)`);
  }
  // and through a cache
  const results = [single, two].map((s) => {
    const c = s.createKVCache({ maxSeqLen: 64, numKvHeads: 2, headDim: 32 });
    const r = new Float32Array(40 * 4 * 32);
    const rr = rng(9);
    for (let sp = 0; sp < 40; sp++) {
      const o = c.step(randTensor(rr, [1, 1, 4, 32]), randTensor(rr, [1, 1, 2, 32]), randTensor(rr, [1, 1, 2, 32]), sp, { isCausal: true });
      r.set(o.data, sp * 128);
    }
    c.dispose();
    return r;
  });
  assert.ok(maxRelDiff(results[0], results[1]) <= 1e-6, 'cache decode: simd vs simd-threads');
});

/** A copy of the package (js/ + dist/) in a temp dir, with `mutate(distDir)` applied. */
function brokenCopy(mutate) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-broken-'));
  fs.cpSync(path.join(ROOT, 'js'), path.join(dir, 'js'), { recursive: true, dereference: true });
  // dereference: a symlinked dist/ must be copied, never written through
  fs.cpSync(path.join(ROOT, 'dist'), path.join(dir, 'dist'), { recursive: true, dereference: true });
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  mutate(path.join(dir, 'dist'));
  return dir;
}

test('a broken install is E_LOAD naming the file, never a silent fallback', async () => {
  const dirs = [];
  try {
    const cases = [
      ['truncated threaded wasm', (d) => fs.truncateSync(path.join(d, 'sdpa-simd-threads.wasm'), 1000), {}, /sdpa-simd-threads\.wasm/],
      ['missing threaded wasm', (d) => fs.rmSync(path.join(d, 'sdpa-simd-threads.wasm')), {}, /sdpa-simd-threads\.wasm/],
      ['garbage single-thread wasm', (d) => fs.writeFileSync(path.join(d, 'sdpa-simd.wasm'), 'not wasm'), { build: 'simd' }, /sdpa-simd\.wasm/],
      ['valid but wrong wasm (instantiation fails)', (d) => fs.copyFileSync(path.join(d, 'sdpa-simd.wasm'), path.join(d, 'sdpa-simd-threads.wasm')), { threads: 2 }, /sdpa-simd-threads\.wasm/],
      ['missing glue', (d) => fs.rmSync(path.join(d, 'sdpa-simd.mjs')), { build: 'simd' }, /sdpa-simd\.mjs/],
    ];
    for (const [label, mutate, opts, re] of cases) {
      const dir = brokenCopy(mutate);
      dirs.push(dir);
      const mod = await import(path.join(dir, 'js', 'index.js'));
      const err = await expectReject(mod.createSdpa(opts), 'E_LOAD', [re]);
      assert.is(err.name, 'SdpaError', label);
      assert.ok(err.message.includes(dir), `${label}: names the file: ${err.message}`);
    }
  } finally {
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  }
});

test('a missing or broken worker file is E_LOAD naming it: no crash, no hang (child process)', () => {
  const dirs = [];
  try {
    const cases = [
      ['missing worker', (d) => fs.rmSync(path.join(d, 'sdpa-simd-threads.worker.js'))],
      ['worker with a syntax error', (d) => fs.writeFileSync(path.join(d, 'sdpa-simd-threads.worker.js'), 'garbage(')],
      ['worker that throws', (d) => fs.writeFileSync(path.join(d, 'sdpa-simd-threads.worker.js'), 'throw new Error("broken worker")')],
    ];
    for (const [label, mutate] of cases) {
      const dir = brokenCopy(mutate);
      dirs.push(dir);
      const url = new URL(`file://${path.join(dir, 'js', 'index.js')}`).href;
      const r = runNode(`
        import { createSdpa } from ${JSON.stringify(url)};
        try { const s = await createSdpa({ threads: 2 }); console.log(JSON.stringify({ ok: s.info })); s.dispose(); }
        catch (e) { console.log(JSON.stringify({ name: e.name, code: e.code, message: e.message })); }`, 20000);
      assert.is(r.error, undefined, `${label}: ${r.error && r.error.message} (hung?)`);
      assert.is(r.status, 0, `${label}: the process crashed (${r.status}): ${r.stderr.slice(-400)}`);
      const res = JSON.parse(r.stdout.trim().split('\n').pop());
      assert.is(res.code, 'E_LOAD', `${label}: ${r.stdout}`);
      assert.is(res.name, 'SdpaError');
      assert.match(res.message, /sdpa-simd-threads\.worker\.js/, label);
    }
  } finally {
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  }
});

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

test('in a browser too: a missing worker file is E_LOAD, not a page that waits forever', async () => {
  assert.ok(fs.existsSync(CHROMIUM), `no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)`);
  const { default: puppeteer } = await import('puppeteer-core');
  const http = await import('node:http');
  // Chromium has relaxed SIMD: the relaxed-threads build is the one it loads
  const dir = brokenCopy((d) => fs.rmSync(path.join(d, 'sdpa-relaxed-threads.worker.js')));
  fs.writeFileSync(path.join(dir, 'index.html'), `<!doctype html><script type="module">
    import { createSdpa } from './js/index.js';
    createSdpa({ threads: 2 }).then((s) => { window.__r = { ok: s.info }; s.dispose(); },
      (e) => { window.__r = { name: e.name, code: e.code, message: e.message }; });
  </script>`);
  const types = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm' };
  const server = http.createServer((req, res) => {
    const file = path.join(dir, decodeURIComponent(new URL(req.url, 'http://x').pathname));
    res.setHeader('Cross-Origin-Opener-Policy', 'same-origin'); // isolated: the threads build is chosen
    res.setHeader('Cross-Origin-Embedder-Policy', 'require-corp');
    fs.readFile(file, (err, data) => {
      if (err || !file.startsWith(dir)) { res.writeHead(404); res.end(); return; }
      res.writeHead(200, { 'Content-Type': types[path.extname(file)] || 'application/octet-stream' });
      res.end(data);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-quic'],
  });
  try {
    const page = await browser.newPage();
    await page.goto(`http://127.0.0.1:${server.address().port}/index.html`);
    const r = await page.waitForFunction(() => window.__r, { timeout: 20000 }).then((h) => h.jsonValue());
    assert.is(r.code, 'E_LOAD', JSON.stringify(r));
    assert.is(r.name, 'SdpaError');
    assert.match(r.message, /sdpa-relaxed-threads\.worker\.js/);
    assert.match(r.message, /the 'relaxed-threads' build/);
  } finally {
    await browser.close();
    server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

function runNode(code, timeout = 30000) {
  return spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: ROOT, encoding: 'utf8', timeout });
}

test('a Node process exits on its own (with and without dispose)', () => {
  const url = new URL('../../js/index.js', import.meta.url).href;
  const body = `
    import { createSdpa } from ${JSON.stringify(url)};
    const s = await createSdpa({ threads: 2 });
    const t = { data: new Float32Array(2 * 4 * 16).fill(0.5), dims: [1, 2, 4, 16] };
    const c = s.createKVCache({ maxSeqLen: 8, numKvHeads: 4, headDim: 16 });
    c.step(t, t, t, 0, { isCausal: true });
    console.log('done', s.info.threads);`;
  for (const [label, code] of [['dispose', body + '\ns.dispose();'], ['no dispose', body]]) {
    const t0 = Date.now();
    const r = runNode(code);
    assert.is(r.error, undefined, `${label}: ${r.error && r.error.message}`);
    assert.is(r.status, 0, `${label}: exit status ${r.status}, stderr ${r.stderr.slice(-500)}`);
    assert.ok(r.stdout.includes('done 2'), `${label}: ${r.stdout}`);
    assert.ok(Date.now() - t0 < 20000, `${label}: took ${Date.now() - t0} ms`);
  }
});

test.run();
