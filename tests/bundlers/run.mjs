#!/usr/bin/env node
// Bundler matrix: the package as a web developer gets it (the `npm pack`
// tarball installed into a fresh project), built by Vite, webpack 5 and
// esbuild, loaded through a same-origin import map and from a cross-origin
// "CDN" (a second local server on another port, with CORS). Every page runs
// decode steps in a module Worker in headless Chromium or Firefox ESR (--browser,
// tests/browser/engines.mjs), once cross-origin isolated (threads build) and once
// not (single-thread fallback), relaxed SIMD by feature detection (both engines
// have it; the plain builds forced or given), and is
// checked against a float64 reference, with no console errors. Then pages
// whose files are missing (404 wasm, 404 worker, missing glue, a worker that
// never answers, an HTML page instead of wasm) must reject with E_LOAD naming
// the URL really fetched, its HTTP status and the advice that fits, in bounded
// time.
//
// The recipes are the README's: each fenced block after a `<!-- recipe: NAME -->`
// line is read from README.md and run as written (the esbuild commands in the
// project, the Vite config as the dev server's config file, the import map in
// the page, the CDN URLs and the wasmBinary / wasmModule code), so what the
// README tells users to do is what this suite does.
//
//   node tests/bundlers/run.mjs [--browser chromium|firefox] [--only=<substring>] [--keep]
//
// Ends with one line `bundlers (ENGINE): N passed, N failed` (exit 1 on any failure).
// Needs dist/ built, node_modules (vite, webpack, esbuild, puppeteer-core) and the
// engine (CHROMIUM_PATH, default /usr/bin/chromium; FIREFOX_PATH, default
// /usr/bin/firefox-esr). --keep leaves the temp project (its path is printed) for debugging.

import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { serve } from '../../scripts/serve.mjs';
import { ENGINES, engineName, launchEngine } from '../browser/engines.mjs';
import { writeGguf } from '../../scripts/lib/gguf-writer.mjs';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const SRC = path.join(REPO, 'tests/bundlers/app');
const CHAT_SRC = path.join(REPO, 'tests/bundlers/chat-app');
const TOTAL_TIMEOUT = Number(process.env.BUNDLER_TEST_TIMEOUT_MS) || 240_000;
const PAGE_TIMEOUT = Number(process.env.BUNDLER_PAGE_TIMEOUT_MS) || 45_000;
const args = process.argv.slice(2);
const only = (args.find((a) => a.startsWith('--only=')) || '').slice(7);
const keep = args.includes('--keep');
const engine = engineName(args);

let passed = 0, failed = 0;
let browser = null, tmp = null, profile = null;
const servers = [];
const devServers = [];
const t0 = Date.now();
const since = () => `${((Date.now() - t0) / 1000).toFixed(1)} s`;

async function cleanup() {
  try { await Promise.race([browser?.close(), new Promise((r) => setTimeout(r, 5000))]); } catch { /* ignore */ }
  try { browser?.process()?.kill('SIGKILL'); } catch { /* ignore */ }
  for (const s of servers) { s.close(); s.closeAllConnections?.(); }
  for (const d of devServers) { try { await Promise.race([d.close(), new Promise((r) => setTimeout(r, 3000))]); } catch { /* ignore */ } }
  if (tmp && !keep) fs.rmSync(tmp, { recursive: true, force: true });
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
}
function finish(code) {
  console.log(`bundlers (${ENGINES[engine].label}): ${passed} passed, ${failed} failed`);
  process.exit(code);
}
const watchdog = setTimeout(async () => {
  console.error(`bundler tests: whole run exceeded ${TOTAL_TIMEOUT} ms; aborting`);
  failed++;
  await cleanup();
  finish(1);
}, TOTAL_TIMEOUT);
watchdog.unref();

function sh(cmd, argv, cwd, timeout = 180_000) {
  const r = spawnSync(cmd, argv, { cwd, encoding: 'utf8', timeout, env: { ...process.env, npm_config_update_notifier: 'false' } });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${cmd} ${argv.join(' ')} failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

// ------------------------------------------------------------------ the README's recipes
const README = path.join(REPO, 'README.md');
/** { name: { lang, code } }: the fenced block after each `<!-- recipe: name -->` of the README. */
function readRecipes(text) {
  const found = {};
  for (const m of text.matchAll(/^<!-- recipe: ([\w-]+) -->\n```(\w*)\n([\s\S]*?)\n```$/gm)) found[m[1]] = { lang: m[2], code: m[3] };
  return found;
}
const recipes = readRecipes(fs.readFileSync(README, 'utf8'));
function recipe(name) {
  assert(recipes[name], `README.md has no <!-- recipe: ${name} --> block (it has: ${Object.keys(recipes).join(', ') || 'none'})`);
  return recipes[name].code;
}
const AsyncFunction = (async () => {}).constructor;
/** Runs a recipe's code with createSdpa stubbed, and returns the options it passed. */
async function recipeOptions(name, scope = {}) {
  let given;
  await new AsyncFunction('createSdpa', ...Object.keys(scope), recipe(name))((o) => { given = o; return {}; }, ...Object.values(scope));
  assert(given && typeof given === 'object', `the ${name} recipe does not call createSdpa with options`);
  return given;
}
/** The README's CDN URLs (jsDelivr, this version) on the local "CDN" server. */
function onLocalCdn(url, S) {
  const prefix = `https://cdn.jsdelivr.net/npm/sdpa-wasm@${S.version}/`;
  assert(url.startsWith(prefix), `the README's CDN URL ${url} does not start with ${prefix} (the package's version)`);
  return `${S.cdn}sdpa-wasm/${url.slice(prefix.length)}`;
}

// ------------------------------------------------------------------ the project and its bundles
const bundles = {};
async function setup() {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-bundlers-'));
  if (keep) console.log(`project: ${tmp}`);
  const out = sh('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', tmp], REPO);
  const tgz = path.join(tmp, JSON.parse(out.slice(out.indexOf('[')))[0].filename);
  const app = path.join(tmp, 'app');
  fs.mkdirSync(app);
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }));
  sh('npm', ['install', '--no-audit', '--no-fund', '--offline', '--ignore-scripts', tgz], app);
  const src = path.join(app, 'src');
  fs.cpSync(SRC, src, { recursive: true });
  console.log(`setup: packed and installed ${path.basename(tgz)} (${since()})`);

  // Vite: the recipe is nothing at all.
  let t = Date.now();
  const vite = await import('vite');
  await vite.build({
    configFile: false, root: src, base: './', logLevel: 'warn',
    build: { outDir: path.join(app, 'out/vite'), emptyOutDir: true, rollupOptions: { input: path.join(src, 'index.html') } },
  });
  bundles.vite = Date.now() - t;

  // webpack 5: the recipe is nothing at all (new URL(..., import.meta.url) assets are on by default).
  t = Date.now();
  const { default: webpack } = await import('webpack');
  const stats = await new Promise((resolve, reject) => webpack({
    mode: 'production', context: src, entry: './main.js', devtool: false, performance: { hints: false },
    output: { path: path.join(app, 'out/webpack'), clean: true },
  }, (err, s) => (err ? reject(err) : resolve(s))));
  if (stats.hasErrors() || stats.hasWarnings()) {
    throw new Error(`webpack: ${stats.toString({ all: false, errors: true, warnings: true })}`);
  }
  fs.writeFileSync(path.join(app, 'out/webpack/index.html'), fs.readFileSync(path.join(src, 'index.html'), 'utf8')
    .replace('<script type="module" src="./main.js"></script>', '<script src="./main.js"></script>'));
  bundles.webpack = Date.now() - t;

  // esbuild: no asset handling for new URL(..., import.meta.url) (evanw/esbuild#795), and no
  // Worker bundling: the README's commands, run as written in the project (with esbuild
  // installed there, as `npm install -D esbuild` would), then the page copied to public/.
  t = Date.now();
  fs.mkdirSync(path.join(app, 'node_modules/.bin'), { recursive: true });
  fs.symlinkSync(path.join(REPO, 'node_modules/esbuild'), path.join(app, 'node_modules/esbuild'));
  fs.symlinkSync('../esbuild/bin/esbuild', path.join(app, 'node_modules/.bin/esbuild'));
  sh('sh', ['-e', '-x', '-c', recipe('esbuild')], app);
  fs.copyFileSync(path.join(src, 'index.html'), path.join(app, 'public/index.html'));
  bundles.esbuild = Date.now() - t;

  // Chat templates (sdpa-wasm/llama): a vocab-only GGUF with a template; the package imports
  // @huggingface/jinja (its dependency) on first use, which each bundler must resolve and emit.
  // (in a folder of their own: under src/ the Vite dev server rows would find them and re-optimize)
  t = Date.now();
  const chatSrc = path.join(app, 'chat-src');
  fs.cpSync(CHAT_SRC, chatSrc, { recursive: true });
  fs.writeFileSync(path.join(chatSrc, 'vocab.gguf'), writeGguf({ metadata: CHAT_VOCAB }));
  await vite.build({
    configFile: false, root: chatSrc, base: './', logLevel: 'warn',
    build: { outDir: path.join(app, 'out/vite-chat'), emptyOutDir: true, rollupOptions: { input: path.join(chatSrc, 'chat.html') } },
  });
  const chatStats = await new Promise((resolve, reject) => webpack({
    mode: 'production', context: chatSrc, entry: './chat.js', devtool: false, performance: { hints: false },
    output: { path: path.join(app, 'out/webpack-chat'), clean: true },
  }, (err, s) => (err ? reject(err) : resolve(s))));
  if (chatStats.hasErrors() || chatStats.hasWarnings()) {
    throw new Error(`webpack (chat): ${chatStats.toString({ all: false, errors: true, warnings: true })}`);
  }
  fs.writeFileSync(path.join(app, 'out/webpack-chat/chat.html'), fs.readFileSync(path.join(chatSrc, 'chat.html'), 'utf8')
    .replace('<script type="module" src="./chat.js"></script>', '<script src="./main.js"></script>'));
  // esbuild as its recipe bundles (no asset handling: the vocab is copied beside the bundle)
  sh('node_modules/.bin/esbuild', ['chat-src/chat.js', '--bundle', '--format=esm', '--outdir=out/esbuild-chat'], app);
  for (const f of ['chat.html', 'vocab.gguf']) fs.copyFileSync(path.join(chatSrc, f), path.join(app, 'out/esbuild-chat', f));
  bundles.chat = Date.now() - t;

  // Import map (no build): the page maps 'sdpa-wasm' to the installed package.
  const im = path.join(app, 'importmap');
  fs.mkdirSync(im);
  // (the chat pages: sdpa-wasm/llama and @huggingface/jinja mapped, on the page and for a Worker)
  for (const f of ['chat.js', 'chat-check.js', 'chat-worker.js', 'chat-worker.html', 'vocab.gguf']) fs.copyFileSync(path.join(chatSrc, f), path.join(im, f));
  const chatMap = /<script type="importmap">.*<\/script>/.exec(fs.readFileSync(path.join(chatSrc, 'chat-worker.html'), 'utf8'))[0];
  fs.writeFileSync(path.join(im, 'chat.html'), fs.readFileSync(path.join(chatSrc, 'chat.html'), 'utf8').replace('</head>', `${chatMap}\n</head>`));
  for (const f of ['worker-url.js', 'decode.js']) fs.copyFileSync(path.join(src, f), path.join(im, f));
  const page = fs.readFileSync(path.join(src, 'importmap.html'), 'utf8');
  const mapLine = /<script type="importmap">.*<\/script>/;
  assert(mapLine.test(page), 'importmap.html has no import map line to replace with the README\'s');
  fs.writeFileSync(path.join(im, 'importmap.html'), page.replace(mapLine, () => recipe('importmap')));
  // the README's Vite config, as the isolated dev server's config file
  fs.writeFileSync(path.join(src, 'vite.config.js'), `${recipe('vite-config')}\n`);
  fs.writeFileSync(path.join(im, 'silent-worker.js'), '// a pthread worker script that never answers\nself.onmessage = () => {};\n');
  // the real worker script, but its glue import fails (in a worker that raises no 'error' event)
  // (both engines have relaxed SIMD: the relaxed-threads build, whose -O0 glue is not minified)
  const real = fs.readFileSync(path.join(app, 'node_modules/sdpa-wasm/dist/sdpa-relaxed-threads.worker.js'), 'utf8');
  const broken = real.replace(/e\.data\.urlOrBlob\s*\?\s*import\(e\.data\.urlOrBlob\)/, 'e.data.urlOrBlob?import("/missing/glue-for-workers.mjs")');
  assert(broken !== real, 'the worker script changed: update the bad-import worker');
  fs.writeFileSync(path.join(im, 'bad-import.worker.js'), broken);

  // A Vite build whose wasm assets went missing (a deploy that forgot them).
  fs.cpSync(path.join(app, 'out/vite'), path.join(app, 'out/vite-broken'), { recursive: true });
  for (const f of fs.readdirSync(path.join(app, 'out/vite-broken/assets'))) {
    if (f.endsWith('.wasm')) fs.rmSync(path.join(app, 'out/vite-broken/assets', f));
  }
  console.log(`setup: bundles built: vite ${bundles.vite} ms, webpack ${bundles.webpack} ms, esbuild ${bundles.esbuild} ms, chat pages ${bundles.chat} ms (${since()})`);
  return app;
}

// ------------------------------------------------------------------ pages
async function openAndWait(url) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  const problems = [], logs = [];
  const onConsole = (where) => (m) => {
    logs.push(`[${where}${m.type()}] ${m.text()}`);
    if (m.type() === 'error') problems.push(`${where}console error: ${m.text()}`);
  };
  page.on('console', onConsole(''));
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`); });
  // network downloads of the glue and the wasm (page and workers; blob:/data: are not downloads)
  const fetched = { mjs: [], wasm: [] };
  const onRequest = (r) => {
    const u = r.url();
    if (!/^https?:/.test(u)) return;
    const ext = new URL(u).pathname.split('.').pop();
    if (ext in fetched) fetched[ext].push(u);
  };
  page.on('request', onRequest);
  page.on('workercreated', (w) => w.on?.('console', onConsole('worker ')));
  try {
    const start = Date.now();
    await page.goto(url, { waitUntil: 'load', timeout: 30_000 });
    let r;
    try {
      r = await page.waitForFunction(() => window.__result, { timeout: PAGE_TIMEOUT, polling: 50 }).then((h) => h.jsonValue());
    } catch (e) {
      const silent = new Error(`${e.message}; page log:\n${[...logs, ...problems].join('\n')}`);
      silent.silent = true; // the page never published a result
      throw silent;
    }
    return { r, problems, logs, fetched, ms: Date.now() - start };
  } finally {
    await context.close();
  }
}

const rows = [];
const row = (name, fn) => rows.push({ name, fn });
const q = (opts) => (opts ? `opts=${encodeURIComponent(JSON.stringify(opts))}` : '');

/** A page that must decode correctly, on the isolated or the plain site. */
// build: what must run (default: what feature detection picks; both engines have relaxed SIMD)
// opts: createSdpa's options, or a function of S giving them; site: the servers S[site + 'Iso' | 'Plain']
function decodeRow(label, pagePath, { opts: optsOf = null, extra = '', iso, dev = false, csp = false, site = null, given = null, build = iso ? ENGINES[engine].builds.isolated : ENGINES[engine].builds.plain }) {
  row(`${label} | ${iso ? 'isolated: threads build' : 'not isolated: single-thread fallback'}`, async (S) => {
    const opts = typeof optsOf === 'function' ? await optsOf(S) : optsOf;
    const base = site ? S[`${site}${iso ? 'Iso' : 'Plain'}`] : dev ? (iso ? S.viteDevIso : S.viteDevPlain) : csp ? S.csp : iso ? S.iso : S.plain;
    const query = [q(opts), extra(S)].filter(Boolean).join('&');
    const { r, problems, logs, fetched, ms } = await openAndWait(`${base}${pagePath.slice(1)}${query ? `?${query}` : ''}`);
    const say = () => `${JSON.stringify(r)}\n${logs.join('\n')}`;
    // each file downloaded once: the glue is never both bundled and fetched, pool workers share it
    // (with wasmBinary/wasmModule the one wasm download is the app's)
    if (!dev && !csp) {
      assert(fetched.wasm.length === 1, `the wasm was downloaded ${fetched.wasm.length} times: ${fetched.wasm.join(', ')}`);
      if (given) assert(fetched.wasm[0].includes('/given/'), `the wasm was fetched by createSdpa although ${given} was given: ${fetched.wasm[0]}`);
      assert(fetched.mjs.length === 1, `the glue was downloaded ${fetched.mjs.length} times: ${fetched.mjs.join(', ')}`);
    }
    assert(r.ok === true, `decode failed: ${say()}`);
    assert(r.crossOriginIsolated === iso, `crossOriginIsolated ${r.crossOriginIsolated}`);
    assert(r.info.build === build, `build ${r.info.build}, expected ${build}: ${say()}`);
    if (iso) assert(r.info.threads >= Math.min(2, S.cores), `threads ${r.info.threads} on ${S.cores} cores`);
    else assert(r.info.threads === 1, `threads ${r.info.threads}`);
    assert(r.steps > 0 && r.maxErr < 1e-5, `max error ${r.maxErr} vs the float64 reference`);
    // (the app that hands over the single-thread wasm chose that build: nothing to warn about)
    // (nor does one that forces a build)
    if (iso || given || (opts && opts.build)) assert(r.warnings.length === 0, `warnings ${JSON.stringify(r.warnings)}`);
    else {
      assert(r.warnings.length === 1 && /single-thread/.test(r.warnings[0]) && /crossOriginIsolated is false/.test(r.warnings[0]),
        `expected one fallback console.warn, got ${JSON.stringify(r.warnings)}`);
      if (opts && typeof opts.threads === 'number') {
        assert(r.warnings[0].includes(`threads: ${opts.threads} was asked; 1 thread runs`), `warning does not say what was asked: ${r.warnings[0]}`);
      }
    }
    // (a CSP that forbids blob: logs the refused blob: import, then the glue loads by URL)
    const left = csp ? problems.filter((p) => !/Refused to load the script 'blob:|^request failed: blob:/.test(p)) : problems;
    assert(left.length === 0, left.join('\n'));
    return `${r.info.build} x${r.info.threads}, ${r.steps} steps, max err ${r.maxErr.toExponential(1)}, load ${r.loadMs.toFixed(0)} ms, page ${ms} ms`;
  });
}

/** A page that must fail with E_LOAD whose message matches every regex, within `bound` ms. */
function failRow(label, pagePath, { opts, iso = true, must, bound = 10_000, extra = () => '', minMs = 0 }) {
  row(`load failure: ${label}`, async (S) => {
    const base = iso ? S.iso : S.plain;
    const o = typeof opts === 'function' ? opts(S) : opts;
    const query = [q(o), extra(S)].filter(Boolean).join('&');
    const { r, logs, ms } = await openAndWait(`${base}${pagePath.slice(1)}${query ? `?${query}` : ''}`);
    assert(r.ok === false, `expected a failure, got ${JSON.stringify(r)}`);
    assert(r.error.name === 'SdpaError' && r.error.code === 'E_LOAD', `expected SdpaError E_LOAD, got ${JSON.stringify(r.error)}\n${logs.join('\n')}`);
    for (const re of must(S)) assert(re.test(r.error.message), `message does not match ${re}: ${r.error.message}`);
    assert(!/npm run build/.test(r.error.message), `browser advice should not say npm run build: ${r.error.message}`);
    assert(r.ms <= bound && r.ms >= minMs, `rejected after ${r.ms.toFixed(0)} ms (expected ${minMs}..${bound})`);
    return `${r.ms.toFixed(0)} ms: ${r.error.message.slice(0, 150)}…`;
  });
}

const IM = '/importmap/importmap.html';
const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const noExtra = () => '';

for (const iso of [true, false]) {
  decodeRow('vite', '/out/vite/index.html', { iso, extra: noExtra });
  decodeRow('vite dev server', '/index.html', { iso, extra: noExtra, dev: true });
  decodeRow('webpack 5', '/out/webpack/index.html', { iso, extra: noExtra });
  decodeRow('esbuild (the README\'s commands, public/ served at the root)', '/index.html', { iso, site: 'esbuild', opts: () => recipeOptions('esbuild-worker'), extra: noExtra });
  decodeRow('import map (same origin)', '/importmap/importmap.html', { iso, extra: noExtra });
  decodeRow('CDN files via wasmPaths (cross-origin)', '/importmap/importmap.html', {
    iso, extra: noExtra, opts: async (S) => {
      const o = await recipeOptions('cdn-files');
      return { ...o, wasmPaths: onLocalCdn(o.wasmPaths, S) };
    },
  });
  decodeRow('CDN: package and files from another origin', '/importmap/importmap.html', {
    iso, extra: (S) => {
      const m = recipe('cdn').match(/^import \{ createSdpa \} from '([^']+)';$/);
      assert(m, `the README's cdn recipe is not one import of createSdpa: ${recipe('cdn')}`);
      return `module=${encodeURIComponent(onLocalCdn(m[1], S))}`;
    },
  });
}
// the caller's wasm decides the build, plain or relaxed (the README's wasmBinary / wasmModule code)
for (const iso of [true, false]) {
  for (const build of iso ? ['simd-threads', 'relaxed-threads'] : ['simd', 'relaxed']) {
    const file = `sdpa-${build}.wasm`;
    for (const as of ['wasmModule', 'wasmBinary']) {
      const name = as === 'wasmModule' ? 'wasm-module' : 'wasm-binary';
      decodeRow(`import map, ${as} ${file} from the app`, IM, {
        iso, build, given: as, extra: () => `wasm=${encodeURIComponent(`/given/${file}`)}&recipe=${encodeURIComponent(recipe(name))}`,
      });
    }
  }
}
// a plain build forced where relaxed SIMD exists
decodeRow("import map, build: 'simd-threads' forced", IM, { iso: true, build: 'simd-threads', opts: { build: 'simd-threads' }, extra: noExtra });
decodeRow("import map, build: 'simd' forced", IM, { iso: false, build: 'simd', opts: { build: 'simd' }, extra: noExtra });
decodeRow('vite, threads: 4 asked', '/out/vite/index.html', { iso: false, opts: { threads: 4 }, extra: noExtra });
decodeRow("import map, CSP script-src 'self' (no blob:)", '/importmap/importmap.html', { iso: true, csp: true, extra: noExtra });

failRow('404 wasm (wasmPaths map, threads build)', IM, {
  opts: { wasmPaths: { 'sdpa-relaxed-threads.wasm': '/missing/sdpa-relaxed-threads.wasm' } },
  must: (S) => [new RegExp(`GET ${esc(S.iso)}missing/sdpa-relaxed-threads\\.wasm`), /HTTP 404/, /check wasmPaths\['sdpa-relaxed-threads\.wasm'\]/],
});
failRow("404 wasm (wasmPaths map, build: 'simd-threads' forced)", IM, {
  opts: { build: 'simd-threads', wasmPaths: { 'sdpa-simd-threads.wasm': '/missing/sdpa-simd-threads.wasm' } },
  must: (S) => [new RegExp(`GET ${esc(S.iso)}missing/sdpa-simd-threads\\.wasm`), /HTTP 404/, /'simd-threads' build/, /check wasmPaths\['sdpa-simd-threads\.wasm'\]/],
});
failRow('404 wasm (single-thread build, not isolated)', IM, {
  iso: false, opts: { wasmPaths: { 'sdpa-relaxed.wasm': '/missing/sdpa-relaxed.wasm' } },
  must: (S) => [new RegExp(`GET ${esc(S.plain)}missing/sdpa-relaxed\\.wasm`), /HTTP 404/, /'relaxed' build/],
});
failRow('404 wasm: a Vite build deployed without its hashed .wasm asset', '/out/vite-broken/index.html', {
  opts: null,
  must: (S) => [new RegExp(`GET ${esc(S.iso)}out/vite-broken/assets/sdpa-relaxed-threads-[^ ]+\\.wasm`), /HTTP 404/, /serve the files of node_modules\/sdpa-wasm\/dist\//, /wasmPaths/],
});
failRow('an HTML page instead of the wasm (SPA fallback)', IM, {
  opts: { wasmPaths: { 'sdpa-relaxed-threads.wasm': '/importmap/importmap.html' } },
  must: () => [/importmap\.html is not a valid WebAssembly module/, /HTML page/],
});
failRow('404 worker script (same origin)', IM, {
  opts: { wasmPaths: { 'sdpa-relaxed-threads.worker.js': '/missing/sdpa-relaxed-threads.worker.js' } },
  must: (S) => [new RegExp(`pthread worker ${esc(S.iso)}missing/sdpa-relaxed-threads\\.worker\\.js failed to load`), /HTTP 404/],
});
failRow('404 worker script (cross-origin CDN)', IM, {
  opts: (S) => ({ wasmPaths: { 'sdpa-relaxed-threads.worker.js': `${S.cdn}missing/sdpa-relaxed-threads.worker.js` } }),
  must: (S) => [new RegExp(`GET ${esc(S.cdn)}missing/sdpa-relaxed-threads\\.worker\\.js`), /HTTP 404/],
});
failRow('missing glue', IM, {
  opts: { wasmPaths: { 'sdpa-relaxed-threads.mjs': '/missing/sdpa-relaxed-threads.mjs' } },
  must: (S) => [new RegExp(`GET ${esc(S.iso)}missing/sdpa-relaxed-threads\\.mjs \\(the JS glue\\) returned HTTP 404`), /check wasmPaths\['sdpa-relaxed-threads\.mjs'\]/],
});
failRow('missing glue (single-thread build, imported by URL)', IM, {
  iso: false, opts: { wasmPaths: { 'sdpa-relaxed.mjs': '/missing/sdpa-relaxed.mjs' } },
  must: (S) => [new RegExp(`cannot load ${esc(S.plain)}missing/sdpa-relaxed\\.mjs \\(GET: HTTP 404 Not Found\\)`), /check wasmPaths\['sdpa-relaxed\.mjs'\]/],
});
failRow('missing glue (cross-origin CDN)', IM, {
  iso: false, opts: (S) => ({ wasmPaths: { 'sdpa-relaxed.mjs': `${S.cdn}missing/sdpa-relaxed.mjs` } }),
  must: (S) => [new RegExp(`GET ${esc(S.cdn)}missing/sdpa-relaxed\\.mjs`), /HTTP 404/],
});
failRow('a CDN without CORS headers', IM, {
  opts: (S) => ({ wasmPaths: `${S.nocors}sdpa-wasm/dist/` }),
  must: (S) => [new RegExp(`GET ${esc(S.nocors)}sdpa-wasm/dist/sdpa-relaxed-threads\\.wasm`), /Access-Control-Allow-Origin/],
});
failRow('a pthread worker that never answers: initTimeout', IM, {
  opts: { initTimeout: 1500, wasmPaths: { 'sdpa-relaxed-threads.worker.js': '/importmap/silent-worker.js' } },
  must: (S) => [/within 1500 ms \(initTimeout\)/, new RegExp(`${esc(S.iso)}importmap/silent-worker\\.js`)],
  minMs: 1400, bound: 5000,
});
failRow('a pthread worker whose glue import fails (no error event): reported at once', IM, {
  opts: { wasmPaths: { 'sdpa-relaxed-threads.worker.js': '/importmap/bad-import.worker.js' } },
  must: (S) => [new RegExp(`pthread worker ${esc(S.iso)}importmap/bad-import\\.worker\\.js failed to load: .*missing/glue-for-workers\\.mjs`), /could not import the glue/],
  bound: 5000,
});
failRow("build: 'simd-threads' on a page without isolation", IM, {
  iso: false, opts: { build: 'simd-threads' },
  must: () => [/needs SharedArrayBuffer/, /Cross-Origin-Opener-Policy/],
  bound: 2000,
});

// sdpa-wasm/llama's chat templates: rendered with @huggingface/jinja, which the package imports
// on first use (bundlers resolve it, an import map maps it) or is given (setChatTemplateRenderer:
// a module Worker has no import map). A small SPM vocab with a template written out here.
const CHAT_VOCAB = [
  ['general.architecture', 'STRING', 'llama'], ['tokenizer.ggml.model', 'STRING', 'llama'],
  ['tokenizer.ggml.tokens', ['ARRAY', 'STRING'], ['<unk>', '<s>', '</s>', '[', ']', 'a', 'e', 'h', 'i', 'n', 'r', 's', 't', 'u', '\u2581']],
  ['tokenizer.ggml.token_type', ['ARRAY', 'INT32'], Int32Array.of(2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)],
  ['tokenizer.ggml.bos_token_id', 'UINT32', 1], ['tokenizer.ggml.eos_token_id', 'UINT32', 2],
  ['tokenizer.chat_template', 'STRING', '{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}'],
];
// '<s>' '[user] hi' '</s>' '[assistant]' with the space prefix after each special token: ▁ [ u s e r ] ▁ h i, ...
const CHAT_TEXT = '<s>[user] hi</s>[assistant]';
const CHAT_IDS = [1, 14, 3, 13, 11, 6, 10, 4, 14, 7, 8, 2, 14, 3, 5, 11, 11, 8, 11, 12, 5, 9, 12, 4];
function chatRow(label, pagePath, { extra = () => '', error = null } = {}) {
  row(`chat template: ${label}`, async (S) => {
    const query = extra(S);
    const { r, problems, logs, ms } = await openAndWait(`${S.plain}${pagePath.slice(1)}${query ? `?${query}` : ''}`);
    if (error) {
      assert(r.ok === false && r.error.name === 'SdpaError' && r.error.code === 'E_LOAD', `expected E_LOAD, got ${JSON.stringify(r)}`);
      for (const re of error) assert(re.test(r.error.message), `message does not match ${re}: ${r.error.message}`);
      return `${ms} ms: ${r.error.message.slice(0, 120)}…`;
    }
    assert(r.ok === true, `failed: ${JSON.stringify(r)}\n${logs.join('\n')}`);
    assert(r.text === CHAT_TEXT, `rendered ${JSON.stringify(r.text)}, expected ${JSON.stringify(CHAT_TEXT)}`);
    assert(JSON.stringify(r.ids) === JSON.stringify(CHAT_IDS), `ids ${r.ids}, expected ${CHAT_IDS}`);
    assert(problems.length === 0, problems.join('\n'));
    return `${ms} ms: ${JSON.stringify(r.text)}`;
  });
}
chatRow('vite (the package imports @huggingface/jinja on first use)', '/out/vite-chat/chat.html');
chatRow('webpack 5', '/out/webpack-chat/chat.html');
chatRow('esbuild --bundle', '/out/esbuild-chat/chat.html');
chatRow('import map mapping sdpa-wasm/llama and @huggingface/jinja', '/importmap/chat.html');
chatRow('import map, module Worker (setChatTemplateRenderer with the URL)', '/importmap/chat-worker.html');
chatRow('CDN: package and renderer from another origin, module Worker', '/importmap/chat-worker.html', {
  extra: (S) => `module=${encodeURIComponent(`${S.cdn}sdpa-wasm/js/llama/index.js`)}&jinja=${encodeURIComponent(`${S.cdn}@huggingface/jinja/dist/index.js`)}`,
});
chatRow('CDN package in a module Worker without the renderer: E_LOAD with the way out', '/importmap/chat-worker.html', {
  extra: (S) => `module=${encodeURIComponent(`${S.cdn}sdpa-wasm/js/llama/index.js`)}&jinja=none`,
  error: [/could not import @huggingface\/jinja/, /setChatTemplateRenderer/],
});

// ------------------------------------------------------------------ main
try {
  assert(fs.existsSync(path.join(REPO, 'dist/sdpa-simd-threads.wasm')), 'dist/ is not built (npm run build -- --wasm)');
  const app = await setup();
  const given = [['/given/', path.join(app, 'node_modules/sdpa-wasm/dist')]]; // the app's own copy of the wasm
  const iso = await serve({ port: 0, webDir: app, pkgDir: path.join(app, 'node_modules/sdpa-wasm'), isolation: true, mounts: given });
  const plain = await serve({ port: 0, webDir: app, pkgDir: path.join(app, 'node_modules/sdpa-wasm'), isolation: false, mounts: given });
  const cdn = await serve({ port: 0, webDir: path.join(app, 'node_modules'), pkgDir: path.join(app, 'node_modules/sdpa-wasm'), isolation: false, cors: true });
  const nocors = await serve({ port: 0, webDir: path.join(app, 'node_modules'), pkgDir: path.join(app, 'node_modules/sdpa-wasm'), isolation: false });
  // A strict CSP: no blob:, no inline script but the import map page's own two (by hash).
  const inline = [...fs.readFileSync(path.join(app, 'importmap/importmap.html'), 'utf8').matchAll(/<script[^>]*>([\s\S]*?)<\/script>/g)]
    .map((m) => `'sha256-${crypto.createHash('sha256').update(m[1]).digest('base64')}'`).join(' ');
  const csp = await serve({ port: 0, webDir: app, pkgDir: path.join(app, 'node_modules/sdpa-wasm'), isolation: true,
    headers: { 'Content-Security-Policy': `default-src 'self'; script-src 'self' 'wasm-unsafe-eval' ${inline}; worker-src 'self'; img-src 'self' data:` } });
  // the esbuild recipe's site: public/ at the root
  const esbuildIso = await serve({ port: 0, webDir: path.join(app, 'public'), pkgDir: path.join(app, 'node_modules/sdpa-wasm'), isolation: true });
  const esbuildPlain = await serve({ port: 0, webDir: path.join(app, 'public'), pkgDir: path.join(app, 'node_modules/sdpa-wasm'), isolation: false });
  servers.push(iso, plain, cdn, nocors, csp, esbuildIso, esbuildPlain);
  const { default: puppeteer } = await import('puppeteer-core');
  ({ browser, profile } = await launchEngine(puppeteer, engine));
  const cores = await (async () => {
    const p = await browser.newPage();
    try { return await p.evaluate(() => navigator.hardwareConcurrency); } finally { await p.close(); }
  })();
  // Vite's dev server: with the README's vite.config.js (COOP/COEP in server.headers for threads), and without a config
  const vite = await import('vite');
  const devServer = async (configFile) => {
    const d = await vite.createServer({ configFile, root: path.join(app, 'src'), logLevel: 'warn', server: { port: 0, host: '127.0.0.1' } });
    await d.listen();
    devServers.push(d);
    return d.resolvedUrls.local[0];
  };
  const viteDevIso = await devServer(path.join(app, 'src/vite.config.js'));
  const viteDevPlain = await devServer(false);
  const { version } = JSON.parse(fs.readFileSync(path.join(app, 'node_modules/sdpa-wasm/package.json'), 'utf8'));
  const S = { iso: iso.url, plain: plain.url, cdn: cdn.url, nocors: nocors.url, csp: csp.url, cores, viteDevIso, viteDevPlain,
    esbuildIso: esbuildIso.url, esbuildPlain: esbuildPlain.url, version };
  console.log(`servers: site ${iso.url} (COOP/COEP), ${plain.url} (none), CDN ${cdn.url} (CORS), ${nocors.url} (no CORS); ${(await browser.version())}`);
  for (const { name, fn } of rows) {
    if (only && !name.includes(only)) continue;
    const s = Date.now();
    try {
      let note;
      try {
        note = await fn(S);
      } catch (e) {
        // Firefox ESR 153 sometimes never returns from `new Worker()` inside a worker (the app's module
        // Worker starting its pthread pool): the page then never answers. Such a row runs once more, and
        // says so; any other failure, or a second silence, fails it. (Our own pages restart such a
        // worker themselves: web/worker-watch.js.)
        if (!(engine === 'firefox' && e && e.silent)) throw e;
        console.log(`     (${name}: the page never answered in ${PAGE_TIMEOUT} ms; run once more: Firefox's hang in new Worker() inside a worker)`);
        note = `${await fn(S)} (the second run: the first never answered)`;
      }
      passed++;
      console.log(`ok   ${name} (${Date.now() - s} ms): ${note}`);
    } catch (e) {
      failed++;
      let said = e && e.message;
      for (let c = e && e.cause, i = 0; c && i < 4; c = c.cause, i++) said += ` (cause: ${c.message || c})`;
      console.log(`FAIL ${name} (${Date.now() - s} ms): ${said}`);
    }
  }
} catch (e) {
  failed++;
  console.log(`FAIL setup: ${e && e.stack ? e.stack : e}`);
}
console.log(`total ${since()}`);
await cleanup();
finish(failed ? 1 : 0);
