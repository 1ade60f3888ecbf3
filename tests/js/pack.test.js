// pack.test.js: the published package works. `npm pack`, install the
// tarball into a temporary project, import 'sdpa-wasm' there and run a decode
// step (in a child Node process, which must also exit on its own).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { DIST_FILES } from '../../js/loader.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
let tmp;
test.before(() => { tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-pack-')); });
test.after(() => { if (tmp) fs.rmSync(tmp, { recursive: true, force: true }); });

function sh(cmd, args, cwd, timeout = 120000) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout, env: { ...process.env, npm_config_update_notifier: 'false' } });
  if (r.error) throw r.error;
  assert.is(r.status, 0, `${cmd} ${args.join(' ')} failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

test('npm pack ships js/, index.d.ts and dist/ (and nothing from tests/ or src/)', () => {
  const out = sh(npm, ['pack', '--json', '--ignore-scripts', '--pack-destination', tmp], ROOT);
  const info = JSON.parse(out.slice(out.indexOf('[')))[0];
  const files = info.files.map((f) => f.path);
  for (const f of ['package.json', 'index.d.ts', 'js/index.js', 'js/loader.js', 'js/abi.js', 'dist/package.json', ...DIST_FILES.map((d) => `dist/${d}`)]) {
    assert.ok(files.includes(f), `${f} is in the tarball (${files.join(', ')})`);
  }
  assert.ok(!files.some((f) => /^(tests|src|include|build)\//.test(f)), `no tests/src/build in ${files.join(', ')}`);
  assert.ok(fs.existsSync(path.join(tmp, info.filename)));
});

test('every relative link in a shipped Markdown file points at a shipped file', () => {
  const out = sh(npm, ['pack', '--json', '--dry-run', '--ignore-scripts'], ROOT);
  const files = new Set(JSON.parse(out.slice(out.indexOf('[')))[0].files.map((f) => f.path));
  const broken = [];
  let links = 0;
  for (const md of [...files].filter((f) => f.endsWith('.md'))) {
    const text = fs.readFileSync(path.join(ROOT, md), 'utf8').replace(/```[\s\S]*?```/g, '');
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:|^#/.test(target)) continue; // a URL or an anchor in the same file
      links++;
      const file = path.posix.normalize(path.posix.join(path.posix.dirname(md), target.split('#')[0]));
      if (!files.has(file)) broken.push(`${md} links ${target} (${file}), which the tarball lacks`);
    }
  }
  assert.ok(links >= 5, `only ${links} relative links found: is the pattern broken?`);
  assert.equal(broken, []);
});

test("package.json exports every build's files (js/loader.js's list of builds) and nothing else of dist/", () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  const dist = Object.keys(pkg.exports).filter((k) => k.startsWith('./dist/'));
  assert.equal(dist.sort(), DIST_FILES.map((f) => `./dist/${f}`).sort());
  for (const k of dist) assert.is(pkg.exports[k], k, `exports['${k}']`);
});

test('the README sections that js/ messages cite exist', () => {
  const headings = new Set([...fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8').matchAll(/^#{2,4} (.+)$/gm)].map((m) => m[1].trim()));
  let cited = 0;
  for (const f of fs.readdirSync(path.join(ROOT, 'js'), { recursive: true }).filter((f) => f.endsWith('.js'))) {
    for (const m of fs.readFileSync(path.join(ROOT, 'js', f), 'utf8').matchAll(/README, "([^"]+)"/g)) {
      cited++;
      assert.ok(headings.has(m[1]), `js/${f} cites the README section "${m[1]}", which is not a heading of README.md`);
    }
  }
  assert.ok(cited > 0, 'no README section cited (the pattern changed?)');
});

test("the README's Node example is examples/decode-loop.mjs, which the next test runs from the tarball", () => {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const m = readme.match(/^## Using the package\n[\s\S]*?^```js\n([\s\S]*?)^```$/m);
  assert.ok(m, 'README.md has a js block under "## Using the package"');
  assert.fixture(m[1], fs.readFileSync(path.join(ROOT, 'examples/decode-loop.mjs'), 'utf8'));
});

test("the README's prepared dense calls example is examples/prepared-calls.mjs (examples.test.js runs it)", () => {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const m = readme.match(/^### Prepared dense calls\n[\s\S]*?^```js\n([\s\S]*?)^```$/m);
  assert.ok(m, 'README.md has a js block under "### Prepared dense calls"');
  assert.fixture(m[1], fs.readFileSync(path.join(ROOT, 'examples/prepared-calls.mjs'), 'utf8'));
});

test("the README's llama example is examples/llama-resume.mjs, which the next test runs from the tarball", () => {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const m = readme.match(/^## A language model on it: `sdpa-wasm\/llama`\n[\s\S]*?^```js\n([\s\S]*?)^```$/m);
  assert.ok(m, 'README.md has a js block under its sdpa-wasm/llama section');
  assert.fixture(m[1], fs.readFileSync(path.join(ROOT, 'examples/llama-resume.mjs'), 'utf8'));
});

test('install the tarball in a temporary project, import it, run a decode step', () => {
  const tgz = fs.readdirSync(tmp).find((f) => f.endsWith('.tgz'));
  assert.ok(tgz, 'tarball from the previous test');
  const app = path.join(tmp, 'app');
  fs.mkdirSync(app);
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }));
  sh(npm, ['install', '--no-audit', '--no-fund', '--offline', '--ignore-scripts', path.join(tmp, tgz)], app);
  fs.writeFileSync(path.join(app, 'smoke.mjs'), `
import { createSdpa, SdpaError } from 'sdpa-wasm';
import { attendRow } from ${JSON.stringify(pathToFileURL(path.join(ROOT, 'tests/js/reference.js')).href)};
const sdpa = await createSdpa();
const H = 4, Hkv = 2, D = 8;
const cache = sdpa.createKVCache({ maxSeqLen: 16, numKvHeads: Hkv, headDim: D });
const q = { data: new Float32Array(H * D).fill(0.1), dims: [1, 1, H, D] };
let out;
for (let pos = 0; pos < 3; pos++) {
  const k = { data: new Float32Array(Hkv * D).fill(pos), dims: [1, 1, Hkv, D] };
  const v = { data: new Float32Array(Hkv * D).fill(pos + 1), dims: [1, 1, Hkv, D] };
  out = cache.step(q, k, v, pos, { isCausal: true });
}
// reference: every head's dot with key row p is 0.1 * p * D, its values p + 1
const want = new Float64Array(1);
attendRow({ keys: 3, Dv: 1, scale: 1 / Math.sqrt(D), dot: (p) => 0.1 * p * D, value: (p) => p + 1 }, want);
const err = Math.max(...out.data.map((x) => Math.abs(x - want[0])));
let typed = false;
try { cache.step(q, q, q, 3); } catch (e) { typed = e instanceof SdpaError && e.code === 'E_HEADS'; }
console.log(JSON.stringify({ build: sdpa.info.build, threads: sdpa.info.threads, err, typed, dims: out.dims }));
sdpa.dispose();
`);
  const r = spawnSync(process.execPath, ['smoke.mjs'], { cwd: app, encoding: 'utf8', timeout: 60000 });
  assert.is(r.error, undefined, r.error && r.error.message);
  assert.is(r.status, 0, `smoke.mjs: ${r.stdout}\n${r.stderr}`);
  const res = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.is(res.build, 'simd-threads');
  assert.equal(res.dims, [1, 1, 4, 8]);
  assert.ok(res.err <= 1e-5 * 4, `decode step error ${res.err}`);
  assert.ok(res.typed, 'SdpaError from the installed package');
  // with relaxed SIMD the installed package loads its relaxed-threads build
  const rr = spawnSync(process.execPath, ['--experimental-wasm-relaxed-simd', 'smoke.mjs'], { cwd: app, encoding: 'utf8', timeout: 60000 });
  assert.is(rr.status, 0, `smoke.mjs (relaxed SIMD): ${rr.stdout}\n${rr.stderr}`);
  const rres = JSON.parse(rr.stdout.trim().split('\n').pop());
  assert.is(rres.build, 'relaxed-threads');
  assert.ok(rres.err <= 1e-5 * 4, `relaxed decode step error ${rres.err}`);
  assert.ok(fs.existsSync(path.join(app, 'node_modules', 'sdpa-wasm', 'index.d.ts')));
  // the exports map is enforced: the dist/ files are exported by name (for
  // wasmPaths / wasmBinary recipes), nothing else is
  const probe = (spec) => spawnSync(process.execPath, ['--input-type=module', '-e',
    `try { console.log(import.meta.resolve(${JSON.stringify(spec)})); } catch (e) { console.log(e.code); }`], { cwd: app, encoding: 'utf8', timeout: 30000 }).stdout.trim();
  for (const f of DIST_FILES) {
    const u = probe(`sdpa-wasm/dist/${f}`);
    assert.ok(u.endsWith(`/node_modules/sdpa-wasm/dist/${f}`), `sdpa-wasm/dist/${f} resolves: ${u}`);
  }
  for (const spec of ['sdpa-wasm/js/loader.js', 'sdpa-wasm/dist/package.json', 'sdpa-wasm/dist/other.wasm']) {
    assert.is(probe(spec), 'ERR_PACKAGE_PATH_NOT_EXPORTED', spec);
  }
  // what ships reads right for someone who ran npm install
  const pkgDir = path.join(app, 'node_modules', 'sdpa-wasm');
  const readme = fs.readFileSync(path.join(pkgDir, 'README.md'), 'utf8');
  for (const m of readme.matchAll(/\]\((?!https?:|#)([^)#\s]+)/g)) {
    assert.ok(fs.existsSync(path.join(pkgDir, m[1])), `README links to ${m[1]}, which is not in the package`);
  }
  const shipped = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8'));
  assert.ok(Array.isArray(shipped.keywords) && shipped.keywords.length >= 5, 'package.json has keywords');
  const ex = spawnSync(process.execPath, [path.join(pkgDir, 'examples', 'decode-loop.mjs')], { cwd: app, encoding: 'utf8', timeout: 60000 });
  assert.is(ex.status, 0, `the shipped example runs: ${ex.stdout}\n${ex.stderr}`);
  // sdpa-wasm/llama: the shipped model, its example, and the README's npx command, as written
  const resume = spawnSync(process.execPath, [path.join(pkgDir, 'examples', 'llama-resume.mjs')], { cwd: app, encoding: 'utf8', timeout: 60000 });
  assert.is(resume.status, 0, `examples/llama-resume.mjs: ${resume.stdout}\n${resume.stderr}`);
  assert.match(resume.stdout, /the same continuation as without the save: true/);
  const cmd = readme.match(/^## A language model on it[\s\S]*?^```bash\n(npx sdpa-llama [^\n]*)\n```$/m);
  assert.ok(cmd, "the README's npx sdpa-llama command");
  const cli = spawnSync('sh', ['-c', cmd[1]], { cwd: app, encoding: 'utf8', timeout: 60000, env: { ...process.env, npm_config_offline: 'true', npm_config_update_notifier: 'false' } });
  assert.is(cli.status, 0, `${cmd[1]}: ${cli.stdout}\n${cli.stderr}`);
  assert.ok(cli.stdout.trim().length > 20, `it wrote text: ${cli.stdout}`);
  assert.match(cli.stderr, /prompt tokens at [\d.]+ tokens\/s, \d+ generated at [\d.]+ tokens\/s/);
});

test('prepack: no rebuild while dist/ is fresh, and a stale dist/ without emcc fails without installing anything', () => {
  // a copy of what the wasm build reads (js/: its list of dist/ files), with a PATH that has sh and node but no emcc or apt-get
  const tree = path.join(tmp, 'tree');
  for (const d of ['src', 'include', 'scripts', 'js', 'dist']) fs.cpSync(path.join(ROOT, d), path.join(tree, d), { recursive: true, dereference: true });
  for (const f of ['CMakeLists.txt', 'package.json']) fs.copyFileSync(path.join(ROOT, f), path.join(tree, f));
  const later = new Date(Date.now() + 60_000);
  for (const f of fs.readdirSync(path.join(tree, 'dist'))) fs.utimesSync(path.join(tree, 'dist', f), later, later);
  const bin = path.join(tmp, 'bin');
  fs.mkdirSync(bin);
  fs.symlinkSync(process.execPath, path.join(bin, 'node'));
  fs.symlinkSync('/bin/sh', path.join(bin, 'sh'));
  const prepack = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts.prepack;
  assert.match(prepack, /--if-stale/);
  assert.match(prepack, /--no-install/);
  const run = () => spawnSync(process.execPath, ['scripts/build.mjs', ...prepack.split(/\s+/).slice(2)],
    { cwd: tree, encoding: 'utf8', timeout: 60000, env: { PATH: bin, HOME: tmp } });
  const t0 = Date.now();
  const fresh = run();
  assert.is(fresh.status, 0, fresh.stdout + fresh.stderr);
  assert.match(fresh.stdout, /dist\/ is up to date/);
  assert.ok(Date.now() - t0 < 10000, `took ${Date.now() - t0} ms`);
  const touched = path.join(tree, 'src', 'sdpa.c');
  const evenLater = new Date(Date.now() + 120_000);
  fs.utimesSync(touched, evenLater, evenLater);
  const stale = run();
  assert.is.not(stale.status, 0, 'a stale dist/ without emcc cannot be packed');
  assert.match(stale.stdout, /dist\/ is stale \(src\/sdpa\.c is newer than dist\//);
  assert.match(stale.stdout, /missing tools: [^\n]*emcc/);
  assert.not.match(stale.stdout, /installing|apt-get update/);
});

test.run();
