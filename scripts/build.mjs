#!/usr/bin/env node
// npm run build [-- options]: builds whatever is missing or stale, with CMake.
//
//   native  build/native  static lib + tests/c (gcc/cc, -O2 -Werror)
//   asan    build/asan    the same with clang ASan + UBSan (SDPA_SANITIZE=ON)
//   fuzz    build/fuzz    tests/fuzz/fuzz_sdpa.c as a libFuzzer target (clang, SDPA_FUZZ=ON)
//   wasm    build/wasm    emcmake: dist/sdpa-simd{,-threads}.* + Node-run wasm tests, then
//           build/wasm-relaxed  the same with relaxed SIMD: dist/sdpa-relaxed{,-threads}.* (clang 16
//           + npm's binaryen, docs/BUILDING.md section 4; a missing tool fails the build, never skips it)
//   wasm-asan build/wasm-asan  the Node-run wasm tests + tests/fuzz/random_driver.c under
//           emscripten ASan + UBSan (SDPA_WASM_SANITIZE=ON; builds no modules, leaves dist/ alone)
//
// Options: --native --asan --fuzz --tsan --wasm --wasm-asan (subset; default all), --force (wipe
// and rebuild), --quiet (one line per step, output only on failure),
// --no-install (never apt-get/npm install what is missing), -jN, --if-stale (wasm:
// do nothing when every dist/ file is newer than everything it is built from;
// what `npm pack`'s prepack runs, with --no-install: a lifecycle script never
// installs system packages).
// Up-to-date trees cost one no-op `cmake --build` each (< 1 s).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { DIST_FILES as BUILD_FILES } from '../js/loader.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const TARGETS = ['native', 'asan', 'fuzz', 'tsan', 'wasm', 'wasm-asan'];
const EMSDK_NODE_PATH = '/usr/share/nodejs';   // Debian's acorn, needed by emcc -O1+ (docs/BUILDING.md, section 3)

export function log(msg) { process.stdout.write(`${msg}\n`); }

/** Environment for every build/test child: NODE_PATH for emcc, no colour noise. */
export function buildEnv(extra = {}) {
  const env = { ...process.env, ...extra };
  const parts = (env.NODE_PATH || '').split(path.delimiter).filter(Boolean);
  if (!parts.includes(EMSDK_NODE_PATH)) parts.push(EMSDK_NODE_PATH);
  env.NODE_PATH = parts.join(path.delimiter);
  // npm puts node_modules/.bin first on PATH; Debian's emcc runs `wasm-opt` by
  // bare name, and npm's binaryen (a newer wasm-opt, there for the relaxed
  // builds) renames the import module to "a", which 3.1.6's glue cannot load.
  env.PATH = (env.PATH || '').split(path.delimiter).filter((p) => !/node_modules[\\/]\.bin/.test(p)).join(path.delimiter);
  env.CLICOLOR_FORCE = '0';
  return env;
}

// Children run in their own process group (so a timeout can kill the whole
// tree); forward Ctrl-C / SIGTERM to them so nothing is left running.
const active = new Set();
let handlersInstalled = false;
function installSignalHandlers() {
  if (handlersInstalled) return;
  handlersInstalled = true;
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(sig, () => {
      for (const pid of active) { try { process.kill(-pid, 'SIGKILL'); } catch { /* gone */ } }
      process.exit(130);
    });
  }
}

/**
 * Runs a command; streams its output (or captures it when quiet). Kills the
 * whole process group on timeout. Resolves {code, signal, timedOut, out}.
 */
export function run(cmd, args, { cwd = ROOT, env = buildEnv(), quiet = false, timeoutMs = 0, echo = true } = {}) {
  if (echo) log(`$ ${[cmd, ...args].map(a => (/[\s"'|&;<>()$]/.test(a) ? JSON.stringify(a) : a)).join(' ')}`);
  return new Promise((resolve) => {
    let out = '';
    let timedOut = false;
    installSignalHandlers();
    const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    if (child.pid) active.add(child.pid);
    const onData = (stream) => (chunk) => {
      const s = chunk.toString();
      out += s;
      if (out.length > 4e6) out = out.slice(-2e6);   // keep the tail only
      if (!quiet) stream.write(s);
    };
    child.stdout.on('data', onData(process.stdout));
    child.stderr.on('data', onData(process.stderr));
    let timer = null;
    if (timeoutMs > 0) {
      timer = setTimeout(() => {
        timedOut = true;
        try { process.kill(-child.pid, 'SIGKILL'); } catch { /* already gone */ }
      }, timeoutMs);
    }
    child.on('error', (err) => {
      if (timer) clearTimeout(timer);
      active.delete(child.pid);
      resolve({ code: 127, signal: null, timedOut, out: `${out}\n${cmd}: ${err.message}\n` });
    });
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      active.delete(child.pid);
      resolve({ code: code ?? 1, signal, timedOut, out });
    });
  });
}

export function which(cmd) {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : null;
}

export function tail(text, lines = 60) {
  return text.split('\n').slice(-lines).join('\n');
}

// ------------------------------------------------------------------ prerequisites
// What each build needs, as [check, Debian package]. `npm test` and
// `npm run build` install missing ones when running as root (as CI does).
const CLANG_RT = () => fs.existsSync('/usr/lib/llvm-14/lib/clang') &&
  spawnSync('sh', ['-c', 'ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a'], { stdio: 'ignore' }).status === 0;
const TOOLS = {
  cmake: [() => which('cmake'), 'cmake'],
  ninja: [() => which('ninja'), 'ninja-build'],
  cc: [() => which('cc') || which('gcc'), 'gcc'],
  clang: [() => which('clang'), 'clang'],
  lld: [() => which('ld.lld') || which('lld'), 'lld'],
  simde: [() => fs.existsSync('/usr/include/simde/wasm/simd128.h'), 'libsimde-dev'],
  clangrt: [CLANG_RT, 'libclang-rt-14-dev'],
  emcc: [() => which('emcc') && which('emcmake'), 'emscripten'],
  clang16: [() => fs.existsSync('/usr/lib/llvm-16/bin/clang'), 'clang-16'],
  lld16: [() => fs.existsSync('/usr/lib/llvm-16/bin/wasm-ld'), 'lld-16'],
  chromium: [() => which('chromium') || fs.existsSync('/usr/bin/chromium'), 'chromium'],
  firefox: [() => which('firefox-esr') || fs.existsSync('/usr/bin/firefox-esr'), 'firefox-esr'],
};
const NEEDS = {
  native: ['cmake', 'ninja', 'cc', 'simde'],
  asan: ['cmake', 'ninja', 'clang', 'simde', 'clangrt'],
  fuzz: ['cmake', 'ninja', 'clang', 'simde', 'clangrt'],
  tsan: ['cmake', 'ninja', 'clang', 'simde', 'clangrt'],
  wasm: ['cmake', 'ninja', 'emcc', 'clang16', 'lld16'],
  'wasm-asan': ['cmake', 'ninja', 'emcc'],
  browser: ['chromium'],
};
const OPTIONAL = new Set(['ninja']);
let aptUpdated = false;

/** Installs the Debian packages `names` needs (root only). Returns the tools still missing. */
export async function ensureTools(names, { install = true, quiet = false } = {}) {
  const want = [...new Set(names.flatMap(n => NEEDS[n] || [n]))];
  const missing = want.filter(t => !TOOLS[t][0]());
  if (!missing.length) return [];
  const pkgs = [...new Set(missing.map(t => TOOLS[t][1]))];
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (install && isRoot && which('apt-get')) {
    log(`setup: installing missing ${pkgs.join(' ')} (apt-get)`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    if (!aptUpdated) {
      const u = await run('apt-get', ['update', '-qq'], { env, quiet: true, echo: !quiet, timeoutMs: 300e3 });
      if (u.code !== 0) log(tail(u.out, 20));
      aptUpdated = true;
    }
    const r = await run('apt-get', ['install', '-y', '-qq', ...pkgs], { env, quiet: true, echo: !quiet, timeoutMs: 900e3 });
    if (r.code !== 0) log(tail(r.out, 30));
  }
  const still = want.filter(t => !TOOLS[t][0]() && !OPTIONAL.has(t));
  if (still.length) {
    const hint = [...new Set(still.map(t => TOOLS[t][1]))].join(' ');
    log(`setup: missing ${still.join(', ')}: install with  sudo apt-get install -y ${hint}`);
  }
  return still;
}

/** The devDependencies not installed in node_modules/ (by name). */
function missingDevDeps() {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  return Object.keys(pkg.devDependencies || {}).filter((n) => !fs.existsSync(path.join(ROOT, 'node_modules', n, 'package.json')));
}

/** Runs `npm ci` when a devDependency is not installed (the JS, browser and bundler suites need them). */
export async function ensureNodeModules({ install = true } = {}) {
  const gone = missingDevDeps();
  if (!gone.length) return true;
  if (!install) { log(`setup: node_modules lacks ${gone.join(', ')}: run  npm ci`); return false; }
  log(`setup: node_modules lacks ${gone.join(', ')}, running npm ci`);
  const cmd = fs.existsSync(path.join(ROOT, 'package-lock.json')) ? 'ci' : 'install';
  const r = await run('npm', [cmd, '--no-audit', '--no-fund'], { quiet: true, timeoutMs: 600e3 });
  if (r.code !== 0) { log(tail(r.out, 30)); return false; }
  return true;
}

// ------------------------------------------------------------------ builds
function hasFiles(dir, re) {
  const abs = path.join(ROOT, dir);
  if (!fs.existsSync(abs)) return false;
  const walk = (d) => fs.readdirSync(d, { withFileTypes: true }).some(e =>
    e.isDirectory() ? walk(path.join(d, e.name)) : re.test(e.name));
  return walk(abs);
}
export const hasCSources = () => hasFiles('src', /\.c$/);

function cacheValue(dir, key) {
  const f = path.join(dir, 'CMakeCache.txt');
  if (!fs.existsSync(f)) return null;
  const m = fs.readFileSync(f, 'utf8').match(new RegExp(`^${key}:[A-Z]+=(.*)$`, 'm'));
  return m ? m[1] : null;
}

const CONFIG = {
  native: { dir: 'build/native', cc: null, defs: [] },
  asan: { dir: 'build/asan', cc: 'clang', defs: ['-DSDPA_SANITIZE=ON'] },
  fuzz: { dir: 'build/fuzz', cc: 'clang', defs: ['-DSDPA_FUZZ=ON', '-DSDPA_BUILD_TESTS=OFF'] },
  tsan: { dir: 'build/tsan', cc: 'clang', defs: ['-DSDPA_TSAN=ON'] },
  wasm: { dir: 'build/wasm', cc: null, defs: [], emcmake: true, then: 'wasm-relaxed' },
  // (built by 'wasm', after it: the same sources with relaxed SIMD)
  'wasm-relaxed': { dir: 'build/wasm-relaxed', cc: null, defs: ['-DSDPA_WASM_RELAXED=ON'], emcmake: true, needsNodeModules: true },
  'wasm-asan': { dir: 'build/wasm-asan', cc: null, defs: ['-DSDPA_WASM_SANITIZE=ON'], emcmake: true },
};

/**
 * Builds one target. Returns {name, status: 'ok'|'skipped'|'failed', reason, seconds}.
 */
export async function buildOne(name, { force = false, quiet = false, install = true, jobs = 2 } = {}) {
  const t0 = Date.now();
  const done = (status, reason = '') => ({ name, status, reason, seconds: (Date.now() - t0) / 1000 });
  const cfg = CONFIG[name];
  if (!cfg) return done('failed', `unknown build target ${name}`);
  if (!hasCSources()) return done('skipped', 'no C sources under src/ yet');
  if (name === 'fuzz' && !fs.existsSync(path.join(ROOT, 'tests/fuzz/fuzz_sdpa.c')))
    return done('skipped', 'tests/fuzz/fuzz_sdpa.c does not exist yet');
  const missing = await ensureTools([name === 'wasm-relaxed' ? 'wasm' : name], { install, quiet });
  if (missing.length) return done('failed', `missing tools: ${missing.join(', ')}`);
  // npm's binaryen (wasm-opt) for the relaxed build
  if (cfg.needsNodeModules && !(await ensureNodeModules({ install }))) return done('failed', 'node_modules lacks a devDependency (binaryen\'s wasm-opt): run npm ci');

  const dir = path.join(ROOT, cfg.dir);
  const generator = which('ninja') ? 'Ninja' : 'Unix Makefiles';
  const cachedGen = cacheValue(dir, 'CMAKE_GENERATOR');
  if (force || (cachedGen && cachedGen !== generator)) {
    log(`build ${name}: removing ${cfg.dir}`);
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const env = buildEnv(cfg.cc ? { CC: which(cfg.cc) || cfg.cc } : {});
  const step = async (what, cmd, args, timeoutMs) => {
    if (quiet) log(`build ${name}: ${what}`);
    const r = await run(cmd, args, { env, quiet, timeoutMs, echo: !quiet });
    if (r.code !== 0 || r.timedOut) {
      if (quiet) log(tail(r.out, 80));
      return `${what} failed${r.timedOut ? ' (timeout)' : ''}`;
    }
    return null;
  };
  if (!fs.existsSync(path.join(dir, 'CMakeCache.txt'))) {
    const args = ['-S', ROOT, '-B', dir, '-G', generator, ...cfg.defs];
    const err = cfg.emcmake
      ? await step('configure (emcmake cmake)', 'emcmake', ['cmake', ...args], 300e3)
      : await step('configure (cmake)', 'cmake', args, 300e3);
    if (err) {
      fs.rmSync(path.join(dir, 'CMakeCache.txt'), { force: true });   // reconfigure next time
      return done('failed', err);
    }
  }
  const err = await step(`cmake --build ${cfg.dir}`, 'cmake', ['--build', dir, '-j', String(jobs)], 1800e3);
  if (err) return done('failed', err);
  if (cfg.then) {
    const next = await buildOne(cfg.then, { force, quiet, install, jobs });
    if (next.status !== 'ok') return done('failed', `${cfg.then}: ${next.reason}`);
  }
  return done('ok');
}

// ------------------------------------------------------------------ dist/ staleness
/** What dist/ is built from (a change to any of them makes it stale). */
const WASM_INPUTS = ['src', 'include', 'CMakeLists.txt', 'scripts/node-esm-shim.js', 'scripts/wasm-post.js', 'scripts/wasm-patch.mjs'];
/** Every file of dist/: each build's (js/loader.js, from its list of builds) and the CommonJS marker. */
export const DIST_FILES = [...BUILD_FILES, 'package.json'];

function newestFile(rel) {
  const abs = path.join(ROOT, rel);
  if (!fs.existsSync(abs)) return null;
  const st = fs.statSync(abs);
  if (!st.isDirectory()) return { file: rel, mtime: st.mtimeMs };
  let best = null;
  for (const e of fs.readdirSync(abs)) {
    const b = newestFile(path.join(rel, e));
    if (b && (!best || b.mtime > best.mtime)) best = b;
  }
  return best;
}

/** { stale, reason }: is dist/ missing a file, or older than one of its inputs? */
export function distStatus() {
  let oldest = null;
  for (const f of DIST_FILES) {
    const abs = path.join(ROOT, 'dist', f);
    if (!fs.existsSync(abs)) return { stale: true, reason: `dist/${f} is missing` };
    const m = fs.statSync(abs).mtimeMs;
    if (!oldest || m < oldest.mtime) oldest = { file: `dist/${f}`, mtime: m };
  }
  for (const rel of WASM_INPUTS) {
    const n = newestFile(rel);
    if (n && n.mtime > oldest.mtime) return { stale: true, reason: `${n.file} is newer than ${oldest.file}` };
  }
  return { stale: false, reason: `every dist/ file is newer than ${WASM_INPUTS.join(', ')}` };
}

/** Builds several targets in order; returns a map name -> result. */
export async function build(names, opts = {}) {
  const results = {};
  for (const n of names) {
    const r = await buildOne(n, opts);
    results[n] = r;
    const why = r.reason ? `: ${r.reason}` : '';
    log(`build ${n}: ${r.status}${why} (${r.seconds.toFixed(1)} s)`);
  }
  return results;
}

async function main(argv) {
  const opts = { force: false, quiet: false, install: true, ifStale: false, jobs: Number(process.env.SDPA_BUILD_JOBS) || 2 };
  const names = [];
  for (const a of argv) {
    if (a === '--force') opts.force = true;
    else if (a === '--quiet' || a === '-q') opts.quiet = true;
    else if (a === '--no-install') opts.install = false;
    else if (a === '--if-stale') opts.ifStale = true;
    else if (/^-j\d+$/.test(a)) opts.jobs = Number(a.slice(2));
    else if (a.startsWith('--') && TARGETS.includes(a.slice(2))) names.push(a.slice(2));
    else if (a === '--all') names.push(...TARGETS);
    else if (a === '-h' || a === '--help') {
      log('usage: node scripts/build.mjs [--native] [--asan] [--fuzz] [--tsan] [--wasm] [--wasm-asan] [--force] [--quiet] [--no-install] [--if-stale] [-jN]');
      return 0;
    } else { log(`build: unknown option ${a}`); return 2; }
  }
  let list = names.length ? [...new Set(names)] : TARGETS;
  if (opts.ifStale && list.includes('wasm') && !opts.force) {
    const st = distStatus();
    if (!st.stale) {
      log(`build wasm: dist/ is up to date (${st.reason}); not rebuilding`);
      list = list.filter((n) => n !== 'wasm');
      if (!list.length) return 0;
    } else log(`build wasm: dist/ is stale (${st.reason})`);
  }
  log(`build: ${list.join(', ')}${opts.force ? ' (forced)' : ''}`);
  const results = await build(list, opts);
  const failed = Object.values(results).filter(r => r.status === 'failed');
  if (results.wasm && results.wasm.status === 'ok') log(`build: wasm modules in ${path.join(ROOT, 'dist')}`);
  return failed.length ? 1 : 0;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2));
}
