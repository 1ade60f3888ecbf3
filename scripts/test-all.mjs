#!/usr/bin/env node
// npm test [-- options]: builds what is missing, runs every test suite with a
// timeout, and ends with ONE line `N passed, N failed` over all suites.
//
// Suites (in order):      counts
//   native   ctest build/native                  ctest's tests
//   asan     ctest build/asan (ASan + UBSan)     ctest's tests
//   fuzz     build/fuzz/fuzz_sdpa 30 s, fuzz_state and fuzz_dense 10 s each   3
//   tsan     ctest build/tsan (ThreadSanitizer)  ctest's tests (cache, hotpath: 1-4 threads; threadpool)
//   wasm     ctest build/wasm (Node, pthreads)   ctest's tests
//   wasm-relaxed ctest build/wasm-relaxed (the same C tests compiled with relaxed SIMD,
//            node --experimental-wasm-relaxed-simd)   ctest's tests
//   wasm-asan ctest build/wasm-asan (wasm32 ASan + UBSan: tests/c + random_driver, ~2 min)  ctest's tests
//   uvu      node scripts/run-uvu.mjs tests/js   uvu's tests
//   uvu-relaxed  the build-agnostic tests/js suites + relaxed.test.js under
//            node --experimental-wasm-relaxed-simd: createSdpa() loads relaxed-threads  uvu's tests
//   browser  node tests/browser/run.mjs          the demo pages in Chromium: its own `N passed, N failed` line
//   bundlers node tests/bundlers/run.mjs         the packed tarball under Vite, webpack, esbuild,
//                                                an import map and a CDN, in Chromium: its own line
//   browser-firefox, bundlers-firefox            the same two with --browser firefox (Firefox ESR,
//                                                WebDriver BiDi)
//   bench    npm run bench -- --quick            1
// A suite whose files do not exist yet is skipped with a note. A build that
// fails, or a suite that crashes or times out, counts as at least 1 failed.
// Before the first suite runs, every prerequisite of the selected suites is
// checked and, when missing, installed (apt-get as root, npm ci): so that a
// fresh machine passes first time whatever the order (uvu needs Chromium too).
//
// Options: --only=a,b  --skip=a,b  --no-build (use what is built)  --force
// (rebuild from scratch)  --no-install  --fuzz-time=S  --list
// Env: SDPA_TEST_TIMEOUT_SCALE=2 multiplies every timeout.
import fs from 'node:fs';
import path from 'node:path';
import {
  ROOT, log, run, buildEnv, buildOne, ensureTools, ensureNodeModules, hasCSources,
} from './build.mjs';

const FUZZ_ASAN_OPTIONS = ['allocator_may_return_null=1', 'detect_leaks=1', process.env.ASAN_OPTIONS].filter(Boolean).join(':');
const SUITES = ['native', 'asan', 'fuzz', 'tsan', 'wasm', 'wasm-relaxed', 'wasm-asan', 'uvu', 'uvu-relaxed', 'browser', 'bundlers', 'browser-firefox', 'bundlers-firefox', 'bench'];
// Node 20 runs relaxed SIMD only with this flag (on by default from Node 21).
const RELAXED_NODE_FLAG = '--experimental-wasm-relaxed-simd';
// tests/js files that use the default build (threads, loader, pack and hostile assert plain build names).
const RELAXED_UVU_PATTERN = '(cache|dense|dtypes|fuzz|int4|llama-weights|memory|numerics|options|paged|relaxed|rotary|runtime|state|state-fuzz|torch|validation)\.test';
const SCALE = Number(process.env.SDPA_TEST_TIMEOUT_SCALE) || 1;
const MIN = 60e3;
const TIMEOUT = { native: 10 * MIN, asan: 20 * MIN, fuzz: 3 * MIN, tsan: 15 * MIN, wasm: 20 * MIN, 'wasm-relaxed': 20 * MIN, 'wasm-asan': 10 * MIN, uvu: 10 * MIN, 'uvu-relaxed': 10 * MIN, browser: 8 * MIN, bundlers: 5 * MIN, 'browser-firefox': 8 * MIN, 'bundlers-firefox': 5 * MIN, bench: 10 * MIN };

const opts = { only: null, skip: new Set(), build: true, force: false, install: true, fuzzTime: 30 };
for (const a of process.argv.slice(2)) {
  const [k, v = ''] = a.split('=');
  if (k === '--only') opts.only = new Set(v.split(',').filter(Boolean));
  else if (k === '--skip') v.split(',').filter(Boolean).forEach(s => opts.skip.add(s));
  else if (k === '--no-build') opts.build = false;
  else if (k === '--force') opts.force = true;
  else if (k === '--no-install') opts.install = false;
  else if (k === '--fuzz-time') opts.fuzzTime = Number(v) || 30;
  else if (k === '--list') { log(SUITES.join('\n')); process.exit(0); }
  else if (k === '-h' || k === '--help') {
    log('usage: npm test -- [--only=native,asan,fuzz,tsan,wasm,wasm-relaxed,wasm-asan,uvu,uvu-relaxed,browser,bundlers,browser-firefox,bundlers-firefox,bench] [--skip=...] [--no-build] [--force] [--no-install] [--fuzz-time=S]');
    process.exit(0);
  } else if (SUITES.includes(k.replace(/^--/, ''))) {
    opts.only ??= new Set(); opts.only.add(k.replace(/^--/, ''));
  } else { log(`test-all: unknown option ${a}`); process.exit(2); }
}
for (const s of [...(opts.only || []), ...opts.skip]) {
  if (!SUITES.includes(s)) { log(`test-all: unknown suite ${s} (have: ${SUITES.join(', ')})`); process.exit(2); }
}
const selected = SUITES.filter(s => (!opts.only || opts.only.has(s)) && !opts.skip.has(s));

const exists = (p) => fs.existsSync(path.join(ROOT, p));
const listFiles = (dir, re) => {
  const abs = path.join(ROOT, dir);
  if (!fs.existsSync(abs)) return [];
  const out = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) { if (e.name !== 'node_modules') walk(path.join(d, e.name)); }
      else if (re.test(e.name)) out.push(path.join(d, e.name));
    }
  };
  walk(abs);
  return out;
};
const hasCTests = () => listFiles('tests/c', /^test_.*\.c$/).length > 0;
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));

// ------------------------------------------------------------------ parsing
function parseCtest(out) {
  const m = [...out.matchAll(/(\d+)% tests passed, (\d+) tests? failed out of (\d+)/g)].pop();
  if (!m) return null;
  const failed = Number(m[2]), total = Number(m[3]);
  return { passed: total - failed, failed };
}
function parsePlain(out) {   // last `N passed, N failed` line, with an optional "word:" or "word (Engine):" prefix
  const m = [...out.matchAll(/^(?:[\w-]+(?: \([\w ]+\))?:\s*)?(\d+) passed, (\d+) failed\b/gm)].pop();
  return m ? { passed: Number(m[1]), failed: Number(m[2]) } : null;
}

// ------------------------------------------------------------------ builds (once each)
const builds = {};
async function needBuild(name) {
  if (!opts.build) return { status: 'ok' };
  if (!builds[name]) {
    log(`\n--- build ${name}`);
    builds[name] = await buildOne(name, { force: opts.force, quiet: true, install: opts.install });
    const r = builds[name];
    log(`build ${name}: ${r.status}${r.reason ? `: ${r.reason}` : ''} (${r.seconds.toFixed(1)} s)`);
  }
  return builds[name];
}

// ------------------------------------------------------------------ suites
// Each returns {passed, failed, note} or {skip: 'reason'}.
async function ctestSuite(name, dir, extra = [], buildName = name) {
  if (!hasCSources()) return { skip: 'no C sources under src/ yet' };
  const b = await needBuild(buildName);
  if (b.status === 'skipped') return { skip: b.reason };
  if (b.status !== 'ok') return { passed: 0, failed: 1, note: `build failed: ${b.reason}` };
  if (!hasCTests()) return { skip: 'no tests/c/test_*.c yet (library built)' };
  if (!exists(`${dir}/CTestTestfile.cmake`)) return { passed: 0, failed: 1, note: `${dir} is not built (drop --no-build)` };
  const perTest = Math.round(TIMEOUT[name] * SCALE / 1000 / 2);
  const r = await run('ctest', ['--test-dir', path.join(ROOT, dir), '--output-on-failure', '-j2', '--timeout', String(perTest), ...extra],
    { timeoutMs: TIMEOUT[name] * SCALE });
  return fromResult(r, parseCtest(r.out));
}

function fromResult(r, counts) {
  let { passed = 0, failed = 0 } = counts || {};
  let note = '';
  if (r.timedOut) note = `timed out, killed`;
  else if (r.signal) note = `killed by ${r.signal}`;
  else if (r.code !== 0) note = `exit code ${r.code}`;
  if (!counts && !note) note = 'printed no counts';
  if ((r.code !== 0 || r.timedOut || !counts) && failed === 0) failed = 1;
  return { passed, failed, note };
}


async function uvuSuite(name, args) {
  if (listFiles('tests/js', /\.[mc]?js$/).length === 0) return { skip: 'no tests/js/*.js yet' };
  if (!(await ensureNodeModules({ install: opts.install }))) return { passed: 0, failed: 1, note: 'node_modules missing' };
  if (hasCSources()) {
    const b = await needBuild('wasm');
    if (b.status === 'failed') return { passed: 0, failed: 1, note: `wasm build failed: ${b.reason}` };
  }
  const r = await run(process.execPath, [path.join(ROOT, 'scripts/run-uvu.mjs'), ...args], { timeoutMs: TIMEOUT[name] * SCALE });
  return fromResult(r, parsePlain(r.out));
}

// The suites that drive a headless browser (Chromium or Firefox) over tests/<dir>/run.mjs.
async function browserSuite(name, dir, engine) {
  const script = `tests/${dir}/run.mjs`;
  if (!exists(script)) return { skip: `${script} does not exist yet` };
  if (!(await ensureNodeModules({ install: opts.install }))) return { passed: 0, failed: 1, note: 'node_modules missing' };
  const missing = await ensureTools([engine], { install: opts.install });
  if (missing.length) return { passed: 0, failed: 1, note: `${engine} missing` };
  if (hasCSources()) {
    const b = await needBuild('wasm');
    if (b.status === 'failed') return { passed: 0, failed: 1, note: `wasm build failed: ${b.reason}` };
  }
  const r = await run(process.execPath, [path.join(ROOT, script), '--browser', engine], { timeoutMs: TIMEOUT[name] * SCALE });
  return fromResult(r, parsePlain(r.out));
}

const SUITE_FN = {
  native: () => ctestSuite('native', 'build/native'),
  asan: () => ctestSuite('asan', 'build/asan'),
  // ThreadSanitizer on the tests that run many threaded calls (the pool, the
  // split-KV merge by the last chunk, 1-4 threads); the rest add only time.
  tsan: () => ctestSuite('tsan', 'build/tsan', ['-R', 'test_(hotpath|cache|threadpool)']),

  async fuzz() {
    if (!exists('tests/fuzz/fuzz_sdpa.c')) return { skip: 'tests/fuzz/fuzz_sdpa.c does not exist yet' };
    if (!hasCSources()) return { skip: 'no C sources under src/ yet' };
    const b = await needBuild('fuzz');
    if (b.status === 'skipped') return { skip: b.reason };
    if (b.status !== 'ok') return { passed: 0, failed: 1, note: `build failed: ${b.reason}` };
    const exe = path.join(ROOT, 'build/fuzz/fuzz_sdpa');
    if (!fs.existsSync(exe)) return { passed: 0, failed: 1, note: 'build/fuzz/fuzz_sdpa missing' };
    // allocator_may_return_null: an absurd size must make the library return
    // E_OOM (CONTRACT), not make ASan abort with allocation-size-too-big.
    // New inputs go to build/fuzz/corpus (first dir); the checked-in seeds are read only.
    const work = path.join(ROOT, 'build/fuzz/corpus');
    const artifacts = path.join(ROOT, 'build/fuzz/artifacts');
    fs.mkdirSync(work, { recursive: true });
    fs.mkdirSync(artifacts, { recursive: true });
    const dirs = [work];
    if (exists('tests/fuzz/corpus')) dirs.push(path.join(ROOT, 'tests/fuzz/corpus'));
    const r = await run(exe, [`-max_total_time=${opts.fuzzTime}`, '-seed=1', '-timeout=25', '-rss_limit_mb=4096',
      '-print_final_stats=1', `-artifact_prefix=${artifacts}/`, ...dirs],
    { timeoutMs: TIMEOUT.fuzz * SCALE, quiet: true, env: buildEnv({ ASAN_OPTIONS: FUZZ_ASAN_OPTIONS }) });
    // libFuzzer is chatty (one line per new unit): print the head and the tail.
    const lines = r.out.split('\n');
    log(lines.length > 60 ? [...lines.slice(0, 15), `... (${lines.length - 55} lines) ...`, ...lines.slice(-40)].join('\n') : r.out);
    const ok = r.code === 0 && !r.timedOut;
    // the loader of saved KV state (tests/fuzz/fuzz_state.c): a third of the time, its own corpus
    const stateExe = path.join(ROOT, 'build/fuzz/fuzz_state');
    let okState = true, noteState = '';
    if (fs.existsSync(stateExe)) {
      const stateWork = path.join(ROOT, 'build/fuzz/corpus-state');
      fs.mkdirSync(stateWork, { recursive: true });
      const stateDirs = [stateWork, ...(exists('tests/fuzz/corpus-state') ? [path.join(ROOT, 'tests/fuzz/corpus-state')] : [])];
      const rs = await run(stateExe, [`-max_total_time=${Math.max(10, Math.round(opts.fuzzTime / 3))}`, '-seed=1', '-timeout=25', '-rss_limit_mb=4096',
        '-print_final_stats=1', `-artifact_prefix=${artifacts}/state-`, ...stateDirs],
      { timeoutMs: TIMEOUT.fuzz * SCALE, quiet: true, env: buildEnv({ ASAN_OPTIONS: FUZZ_ASAN_OPTIONS }) });
      log(rs.out.split('\n').slice(-12).join('\n'));
      okState = rs.code === 0 && !rs.timedOut;
      if (!okState) noteState = `fuzz_state exit ${rs.code}${rs.timedOut ? ', timed out' : ''}; artifacts in build/fuzz/artifacts/state-*`;
    } else {
      okState = false;
      noteState = 'build/fuzz/fuzz_state missing';
    }
    // the dense calls (tests/fuzz/fuzz_dense.c): a third of the time, a corpus of its own
    const denseExe = path.join(ROOT, 'build/fuzz/fuzz_dense');
    let okDense = true, noteDense = '';
    if (fs.existsSync(denseExe)) {
      const denseWork = path.join(ROOT, 'build/fuzz/corpus-dense');
      fs.mkdirSync(denseWork, { recursive: true });
      const rd = await run(denseExe, [`-max_total_time=${Math.max(10, Math.round(opts.fuzzTime / 3))}`, '-seed=1', '-timeout=25', '-rss_limit_mb=4096',
        '-print_final_stats=1', `-artifact_prefix=${artifacts}/dense-`, denseWork],
      { timeoutMs: TIMEOUT.fuzz * SCALE, quiet: true, env: buildEnv({ ASAN_OPTIONS: FUZZ_ASAN_OPTIONS }) });
      log(rd.out.split('\n').slice(-12).join('\n'));
      okDense = rd.code === 0 && !rd.timedOut;
      if (!okDense) noteDense = `fuzz_dense exit ${rd.code}${rd.timedOut ? ', timed out' : ''}; artifacts in build/fuzz/artifacts/dense-*`;
    } else {
      okDense = false;
      noteDense = 'build/fuzz/fuzz_dense missing';
    }
    const notes = [ok ? '' : `fuzzer exit ${r.code}${r.timedOut ? ', timed out' : ''}; artifacts in build/fuzz/artifacts`, noteState, noteDense].filter(Boolean).join('; ');
    return { passed: (ok ? 1 : 0) + (okState ? 1 : 0) + (okDense ? 1 : 0), failed: (ok ? 0 : 1) + (okState ? 0 : 1) + (okDense ? 0 : 1), note: notes };
  },

  wasm: () => ctestSuite('wasm', 'build/wasm'),
  // built by the 'wasm' build (which makes both trees)
  'wasm-relaxed': () => ctestSuite('wasm-relaxed', 'build/wasm-relaxed', [], 'wasm'),
  // The same C tests inside wasm32 under emscripten's ASan + UBSan, where
  // size_t is 32 bits, plus the fuzzer's body on seeded random inputs and
  // large head dims x 1..8 threads (tests/fuzz/random_driver.c).
  'wasm-asan': () => ctestSuite('wasm-asan', 'build/wasm-asan'),

  uvu: () => uvuSuite('uvu', ['tests/js']),
  'uvu-relaxed': () => uvuSuite('uvu-relaxed', [`--node-flag=${RELAXED_NODE_FLAG}`, 'tests/js', RELAXED_UVU_PATTERN]),

  browser: () => browserSuite('browser', 'browser', 'chromium'),
  bundlers: () => browserSuite('bundlers', 'bundlers', 'chromium'),
  'browser-firefox': () => browserSuite('browser-firefox', 'browser', 'firefox'),
  'bundlers-firefox': () => browserSuite('bundlers-firefox', 'bundlers', 'firefox'),

  async bench() {
    if (!pkg.scripts || !pkg.scripts.bench) return { skip: 'no "bench" script in package.json yet' };
    if (hasCSources()) {
      const b = await needBuild('wasm');
      if (b.status === 'failed') return { passed: 0, failed: 1, note: `wasm build failed: ${b.reason}` };
    }
    const r = await run('npm', ['run', '--silent', 'bench', '--', '--quick'], { timeoutMs: TIMEOUT.bench * SCALE });
    const ok = r.code === 0 && !r.timedOut;
    return { passed: ok ? 1 : 0, failed: ok ? 0 : 1, note: ok ? '' : (r.timedOut ? 'timed out, killed' : `exit code ${r.code}`) };
  },
};

// ------------------------------------------------------------------ main
const t0 = Date.now();
const results = [];
log(`test-all: suites ${selected.join(', ')}`);

// Prerequisites of every selected suite, before the first one runs.
const BUILD_OF = { native: 'native', asan: 'asan', fuzz: 'fuzz', tsan: 'tsan', wasm: 'wasm', 'wasm-relaxed': 'wasm', 'wasm-asan': 'wasm-asan', uvu: 'wasm', 'uvu-relaxed': 'wasm', browser: 'wasm', bundlers: 'wasm', 'browser-firefox': 'wasm', 'bundlers-firefox': 'wasm', bench: 'wasm' };
// the browser each suite drives (uvu: tests/js/threads.test.js opens Chromium too)
const ENGINE_OF = { uvu: 'chromium', browser: 'chromium', bundlers: 'chromium', 'browser-firefox': 'firefox', 'bundlers-firefox': 'firefox' };
// (the wasm build needs node_modules too: npm's binaryen optimises the relaxed modules)
const NODE_SUITES = new Set(['wasm', 'wasm-relaxed', 'uvu', 'uvu-relaxed', 'browser', 'bundlers', 'browser-firefox', 'bundlers-firefox', 'bench']);
{
  const s0 = Date.now();
  const tools = new Set();
  for (const s of selected) {
    if (opts.build && hasCSources() && BUILD_OF[s]) tools.add(BUILD_OF[s]);
    if (ENGINE_OF[s]) tools.add(ENGINE_OF[s]);
  }
  const needNode = selected.some((s) => NODE_SUITES.has(s));
  log(`\n=== setup: checking ${[...tools, ...(needNode ? ['node_modules'] : [])].join(', ') || 'nothing'}`);
  const missing = tools.size ? await ensureTools([...tools], { install: opts.install }) : [];
  const nodeOk = needNode ? await ensureNodeModules({ install: opts.install }) : true;
  log(`=== setup: ${missing.length || !nodeOk ? `still missing ${[...missing, ...(nodeOk ? [] : ['node_modules'])].join(', ')} (the suites that need them will fail)` : 'everything is there'} (${((Date.now() - s0) / 1000).toFixed(1)} s)`);
}
for (const name of selected) {
  log(`\n=== ${name}`);
  const s0 = Date.now();
  let res;
  try {
    res = await SUITE_FN[name]();
  } catch (err) {
    res = { passed: 0, failed: 1, note: `runner error: ${err && err.stack ? err.stack : err}` };
  }
  res.seconds = (Date.now() - s0) / 1000;
  results.push({ name, ...res });
  if (res.skip) log(`=== ${name}: skipped (${res.skip})`);
  else log(`=== ${name}: ${res.passed} passed, ${res.failed} failed${res.note ? ` [${res.note}]` : ''} (${res.seconds.toFixed(1)} s)`);
}

let passed = 0, failed = 0;
log('\n=== summary');
for (const r of results) {
  const what = r.skip ? `skipped: ${r.skip}` : `${r.passed} passed, ${r.failed} failed${r.note ? ` [${r.note}]` : ''}`;
  log(`  ${r.name.padEnd(16)} ${what}`);
  if (!r.skip) { passed += r.passed; failed += r.failed; }
}
log(`  total time ${((Date.now() - t0) / 1000).toFixed(0)} s`);
if (results.every(r => r.skip)) log('  (every suite was skipped: nothing to test yet)');
log(`${passed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;
