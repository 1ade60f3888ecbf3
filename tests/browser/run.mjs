#!/usr/bin/env node
// Browser tests of the demo pages (web/) in a real headless browser via puppeteer-core:
// Chromium, or Firefox ESR (WebDriver BiDi) with --browser firefox (tests/browser/engines.mjs).
//
//   node tests/browser/run.mjs [--browser chromium|firefox] [--pkg-dir DIR] [--only NAME] [--big]
//
// Starts two in-process servers (scripts/serve.mjs): one with COOP/COEP (cross-origin
// isolated → threads build), one without (→ single-thread build); both engines have relaxed
// SIMD, so the relaxed builds run unless the page's ?build= forces one; drives the page
// through its URL parameters and controls, reads window.__demo, saves screenshots to
// artifacts/, and ends with one line `N passed, N failed` (exit 1 on any failure).
// --big adds the chat page opening a TinyLlama-1.1B-shaped Q4_0 GGUF (591 MiB, random weights, written
// by scripts/random-gguf.mjs): its load's peak memory against the file's size, and a decode.
// Env: CHROMIUM_PATH, FIREFOX_PATH, BROWSER_TEST_TIMEOUT_MS (whole run, default 480000).

import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { serve } from '../../scripts/serve.mjs';
import { ENGINES, engineName, launchEngine } from './engines.mjs';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const ARTIFACTS = path.join(REPO, 'artifacts');
const TOTAL_TIMEOUT = Number(process.env.BROWSER_TEST_TIMEOUT_MS) || 480_000;
const RUN_TIMEOUT = 90_000; // one decode run on a loaded 2-core machine

const args = process.argv.slice(2);
const argVal = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const pkgDir = argVal('--pkg-dir') ? path.resolve(argVal('--pkg-dir')) : REPO;
const only = argVal('--only');
const big = args.includes('--big');
const engine = engineName(args);
const ENGINE = ENGINES[engine].label;
const BUILDS = ENGINES[engine].builds; // what this engine's feature detection must pick
/** A screenshot's path in artifacts/, named for the engine (both engines' runs keep theirs). */
const shot = (name) => path.join(ARTIFACTS, engine === 'chromium' ? `${name}.png` : `${name}-${engine}.png`);

let passed = 0, failed = 0;
// pages that restarted a worker silent while loading (web/worker-watch.js: Firefox's hang in `new Worker()` in a worker)
let restartsSeen = 0;
const RESTART_WARNING = /the worker did not answer for \d+ s while loading/;
let browser = null, userDataDir = null;
const servers = [];

function finish(code) {
  if (restartsSeen) console.log(`(${restartsSeen} page worker(s) fell silent while loading and were restarted by the page: web/worker-watch.js)`);
  console.log(`browser (${ENGINE}): ${passed} passed, ${failed} failed`);
  process.exit(code);
}
async function cleanup() {
  try {
    await Promise.race([browser?.close(), new Promise((r) => setTimeout(r, 5000))]);
  } catch { /* ignore */ }
  try {
    browser?.process()?.kill('SIGKILL');
  } catch { /* ignore */ }
  for (const s of servers) {
    s.close();
    s.closeAllConnections?.();
  }
  if (userDataDir) fs.rmSync(userDataDir, { recursive: true, force: true });
}

// A hang must fail the run, never block CI.
const watchdog = setTimeout(async () => {
  console.error(`browser tests: whole run exceeded ${TOTAL_TIMEOUT} ms; aborting`);
  failed++;
  await cleanup();
  finish(1);
}, TOTAL_TIMEOUT);
watchdog.unref();

/** An error's message and its causes' (puppeteer's "Waiting failed" says what failed only in its cause). */
function withCauses(e) {
  const parts = [];
  for (let c = e, i = 0; c && i < 5; c = c.cause, i++) parts.push(i ? `cause: ${c && c.message ? c.message : String(c)}` : String(c && c.message ? c.message : c));
  return parts.join('\n');
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

/** Opens `url` in a fresh browser context; collects console errors, page errors and failed requests. */
async function openPage(url) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  const problems = [], logs = [];
  page.on('console', (m) => {
    logs.push(`[${m.type()}] ${m.text()}`);
    if (m.type() === 'error') problems.push(`console error: ${m.text()}`);
    if (m.type() === 'warn' && RESTART_WARNING.test(m.text()) && !url.includes('hangAtLoad')) restartsSeen++;
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`);
  });
  // Workers' console output (the library's fallback warning lands there).
  page.on('workercreated', (w) => {
    w.on?.('console', (m) => {
      logs.push(`[worker ${m.type()}] ${m.text()}`);
      if (m.type() === 'error') problems.push(`worker console error: ${m.text()}`);
    });
  });
  await page.setViewport({ width: 1000, height: 900 });
  page.setDefaultTimeout(RUN_TIMEOUT);
  await page.goto(url, { waitUntil: 'load', timeout: 30_000 });
  return { page, context, problems, logs };
}

async function waitForEnd(page, statuses = ['done', 'stopped', 'error']) {
  await page.waitForFunction(
    (s) => window.__demo && s.includes(window.__demo.status),
    { timeout: RUN_TIMEOUT, polling: 100 },
    statuses,
  );
  return page.evaluate(() => {
    const d = window.__demo;
    return { ...d, points: d.points.slice(), nPoints: d.points.length };
  });
}

/** Counts canvas pixels in the plot's line colour: proof that the plot was drawn, not just filled. */
async function plotInk(page) {
  return page.evaluate(() => {
    const c = document.getElementById('plot');
    const g = c.getContext('2d');
    const { data } = g.getImageData(0, 0, c.width, c.height);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      const [r, gg, b, a] = [data[i], data[i + 1], data[i + 2], data[i + 3]];
      if (a > 100 && b > 120 && b > r + 60 && b > gg + 20) n++;
    }
    return n;
  });
}

const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

function checkRun(d, { build, minChecks = 2 }) {
  assert(d.status === 'done', `status ${d.status}${d.error ? `: ${d.error.code} ${d.error.message}` : ''}`);
  assert(d.build === build, `build ${d.build}, expected ${build}`);
  const cfg = d.config;
  const decoded = cfg.ctx - Math.min(cfg.prompt, cfg.ctx);
  assert(d.length === cfg.ctx, `context length ${d.length}, expected ${cfg.ctx}`);
  assert(d.nPoints === decoded, `plot has ${d.nPoints} points, expected ${decoded}`);
  assert(d.points.every(([x, y], i) => x === Math.min(cfg.prompt, cfg.ctx) + i + 1 && Number.isFinite(y) && y >= 0), 'points are not [length, ms] in order');
  assert(typeof d.maxError === 'number' && d.maxError < 1e-4, `max error ${d.maxError} (need < 1e-4)`);
  assert(d.checks >= minChecks, `only ${d.checks} correctness checks`);
  // the paged caches hold ceil(ctx / 64) pages per layer and KV head (K + V, each its dtype's part,
  // rounded up to 64 bytes), plus their page tables; a windowed cache (sliding-window presets) at
  // most its ring: ceil((window - 1) / 64) + 2 pages; a page is counted as the pool counts it, with
  // its 64-byte header (CONTRACT.md section 3, "Bytes")
  const D = cfg.d, up = (a, b) => Math.ceil(a / b);
  const part = (dtype, value) => ({
    float32: 64 * D * 4, float16: 64 * D * 2,
    int8: value ? 64 * D + 320 : 64 * 2 * up(D, 2) + 320,
    int4: (value ? 64 * 8 * up(D, 16) : 64 * 2 * up(D, 4)) + 64 * 4 * up(D, 64),
  })[dtype];
  const [keyDtype, valueDtype = keyDtype] = cfg.dtype.split('/');
  const page = up(part(keyDtype, 0) + part(valueDtype, 1), 64) * 64 + 64;
  const slots = Math.min(Math.ceil(cfg.ctx / 64), cfg.window ? Math.ceil((cfg.window - 1) / 64) + 2 : Infinity);
  // with the float16 newest page (the default when K or V is int4), a partial last page is held as
  // float16 (its int8 / int4 parts as 64 x D halves; at least an encoded page's bytes) until it fills
  const f16 = (keyDtype === 'int4' || valueDtype === 'int4') && !cfg.window && cfg.ctx % 64 !== 0;
  const half = (dtype, value) => (dtype === 'int8' || dtype === 'int4' ? 64 * D * 2 : part(dtype, value));
  const f16Page = Math.max(page, up(half(keyDtype, 0) + half(valueDtype, 1), 64) * 64 + 64);
  const pageBytes = cfg.layers * cfg.hkv * (f16 ? (slots - 1) * page + f16Page : slots * page);
  const tableBytes = cfg.layers * cfg.hkv * slots * 4;
  assert(d.kvBytes === pageBytes + tableBytes, `kvBytes ${d.kvBytes}, expected ${pageBytes} + ${tableBytes}`);
  assert(d.kvFullBytes === 2 * cfg.layers * cfg.ctx * cfg.hkv * cfg.d * 4, `kvFullBytes ${d.kvFullBytes}`);
  assert(d.error === null, `error ${JSON.stringify(d.error)}`);
}

const tests = [];
const test = (name, fn) => tests.push({ name, fn });

let iso, noIso;

test('isolated: relaxed-SIMD threads build (feature detection), correct, plotted', async () => {
  const { page, context, problems } = await openPage(`${iso.url}bench.html?preset=llama3.2-1b&layers=2&ctx=384&prompt=128&threads=2&autostart=1`);
  try {
    const d = await waitForEnd(page);
    await page.screenshot({ path: shot('demo-isolated'), fullPage: true }); // before the asserts: kept for debugging
    assert(d.crossOriginIsolated === true, 'crossOriginIsolated is not true');
    checkRun(d, { build: BUILDS.isolated, minChecks: 5 });
    assert(d.threads >= 2, `threads ${d.threads}, expected >= 2`);
    assert((await text(page, '#build-badge')).includes(BUILDS.isolated), `build badge does not name ${BUILDS.isolated}`);
    assert(/relaxed-SIMD \+ pthreads build \(relaxed SIMD detected\)/.test(await text(page, '#build-reason')), 'build reason does not say relaxed SIMD was detected');
    assert((await text(page, '#check-badge')).includes('✓'), 'correctness badge not green');
    assert(/\d/.test(await text(page, '#s-ms')) && /\d/.test(await text(page, '#s-tps')) && /MiB|KiB/.test(await text(page, '#s-mem')), 'stats not filled');
    const ink = await plotInk(page);
    assert(ink > 200, `plot line barely drawn (${ink} pixels)`);
    assert(problems.length === 0, problems.join('\n'));
    return `${d.build}, ${d.threads} threads, ${d.nPoints} points, ${d.checks} checks, max err ${d.maxError.toExponential(2)}, plot ink ${ink}px`;
  } finally {
    await context.close();
  }
});

test('rotary embeddings in the op (float32 and int8 caches): correct against q and K rotated in float64', async () => {
  const notes = [];
  for (const dtype of ['float32', 'int8']) {
    const { page, context, problems } = await openPage(`${iso.url}bench.html?preset=llama3.2-1b&layers=2&ctx=300&prompt=64&threads=2&dtype=${dtype}&rotary=1&autostart=1`);
    try {
      const d = await waitForEnd(page);
      assert(d.config.rotary === true, `config rotary ${d.config.rotary}`);
      checkRun(d, { build: BUILDS.isolated, minChecks: 5 });
      assert(problems.length === 0, problems.join('\n'));
      notes.push(`${dtype}: max err ${d.maxError.toExponential(2)}`);
    } finally {
      await context.close();
    }
  }
  return notes.join('; ');
});

test('float16, int8, int4 and K int8 / V int4 caches: correct against the values they store, memory shown', async () => {
  const notes = [];
  for (const dtype of ['float16', 'int8', 'int4', 'int8/int4']) {
    const { page, context, problems } = await openPage(`${iso.url}bench.html?preset=llama3.2-1b&layers=2&ctx=300&prompt=64&threads=2&dtype=${dtype}&autostart=1`);
    try {
      const d = await waitForEnd(page);
      assert(d.config.dtype === dtype, `config dtype ${d.config.dtype}`);
      checkRun(d, { build: BUILDS.isolated, minChecks: 5 });
      const mem = await text(page, '#s-mem');
      assert(mem.includes(dtype) && /MiB|KiB/.test(mem), `memory line "${mem}"`);
      assert(problems.length === 0, problems.join('\n'));
      notes.push(`${dtype}: ${d.kvBytes} bytes held, max err ${d.maxError.toExponential(2)}`);
    } finally {
      await context.close();
    }
  }
  return notes.join('; ');
});

test('sliding-window presets (gpt-oss, Gemma 2): windowed caches, correct, memory flat', async () => {
  const notes = [];
  for (const [preset, ctx] of [['gpt-oss-20b', 700], ['gemma2-2b', 300]]) {
    const { page, context, problems } = await openPage(`${iso.url}bench.html?preset=${preset}&layers=2&ctx=${ctx}&prompt=100&threads=2&autostart=1`);
    try {
      const d = await waitForEnd(page);
      assert(d.config.window > 0, `${preset}: config window ${d.config.window}`);
      checkRun(d, { build: BUILDS.isolated, minChecks: 5 });
      const mem = await text(page, '#s-mem');
      assert(/a ring for the last \d+ tokens/.test(mem), `${preset}: memory line "${mem}"`);
      if (preset === 'gpt-oss-20b') assert(d.kvBytes * 2 < d.kvFullBytes, `${preset}: ${d.kvBytes} bytes held, ${d.kvFullBytes} for the full context`);
      assert(problems.length === 0, problems.join('\n'));
      notes.push(`${preset}: ${d.kvBytes} bytes held at ${ctx} tokens (full float32: ${d.kvFullBytes}), max err ${d.maxError.toExponential(2)}`);
    } finally {
      await context.close();
    }
  }
  return notes.join('; ');
});

test('forced plain SIMD (?build=simd-threads, ?build=simd): the build asked runs, correct', async () => {
  const notes = [];
  for (const build of ['simd-threads', 'simd']) {
    const { page, context, problems } = await openPage(`${iso.url}bench.html?preset=qwen2-0.5b&layers=1&ctx=200&prompt=32&threads=${build === 'simd' ? 1 : 2}&build=${build}&autostart=1`);
    try {
      const d = await waitForEnd(page);
      checkRun(d, { build, minChecks: 3 });
      assert(d.reason.includes(`(build: '${build}' asked)`) && d.reason.includes('SIMD128'), `build reason "${d.reason}"`);
      assert(problems.length === 0, problems.join('\n'));
      notes.push(`${d.build}: max err ${d.maxError.toExponential(2)}`);
    } finally {
      await context.close();
    }
  }
  return notes.join('; ');
});

test('caches saved to OPFS / IndexedDB and restored after a reload: the next step equals the uninterrupted run bit for bit', async () => {
  const notes = [];
  for (const [preset, dtype] of [['llama3.2-1b', 'float32'], ['gemma2-2b', 'int8']]) {
    const base = `${iso.url}bench.html?preset=${preset}&layers=2&ctx=200&prompt=64&threads=2&dtype=${dtype}`;
    const { page, context, problems } = await openPage(`${base}&saveAt=130&autostart=1`);
    try {
      const a = await waitForEnd(page);
      assert(a.status === 'done', `first run: ${a.status} ${a.error ? `${a.error.code} ${a.error.message}` : ''}`);
      assert(a.saved && a.saved.length === 130 && a.saved.bytes > 0, `saved ${JSON.stringify(a.saved)}`);
      assert(a.next && a.next.length === 131 && a.next.bits.length === 2, `next ${JSON.stringify(a.next && a.next.length)}`);
      // the page reloads (same browser context: same storage); nothing of the first run survives but the saved bytes
      await page.goto(`${base}&restore=1&autostart=1`, { waitUntil: 'load', timeout: 30_000 });
      const b = await waitForEnd(page);
      assert(b.status === 'done', `restored run: ${b.status} ${b.error ? `${b.error.code} ${b.error.message}` : ''}`);
      assert(b.runs === 1 && b.restored && b.restored.length === 130 && b.restored.storage === a.saved.storage, `restored ${JSON.stringify(b.restored)}`);
      assert(b.prefillMs === null, 'the restored run prefilled');
      assert(b.length === 200 && b.nPoints === 70, `length ${b.length}, ${b.nPoints} points`);
      assert(b.next && b.next.length === 131, 'no next step after the restore');
      for (let l = 0; l < 2; l++) {
        const x = a.next.bits[l], y = b.next.bits[l];
        const i = x.findIndex((v, j) => v !== y[j]);
        assert(x.length === y.length && i < 0, `layer ${l}: the step after the reload differs at element ${i} (bits ${x[i]} vs ${y[i]})`);
      }
      assert(b.build === a.build, `builds ${a.build} / ${b.build}`);
      assert(typeof b.maxError === 'number' && b.maxError < 1e-4 && b.checks >= 2, `restored run: max error ${b.maxError} over ${b.checks} checks`);
      assert(/restored 130 rows/.test(await text(page, '#s-prefill')), 'the page does not say it restored');
      assert(problems.length === 0, problems.join('\n'));
      notes.push(`${preset} ${dtype}: ${a.saved.bytes} bytes to ${a.saved.storage} in ${a.saved.ms.toFixed(1)} ms, restored in ${b.restored.ms.toFixed(1)} ms, next step identical`);
    } finally {
      await context.close();
    }
  }
  return notes.join('; ');
});

test('no COOP/COEP: single-thread build, says so, correct', async () => {
  const { page, context, problems } = await openPage(`${noIso.url}bench.html?preset=qwen2-0.5b&layers=2&ctx=300&prompt=64&autostart=1`);
  try {
    const d = await waitForEnd(page);
    await page.screenshot({ path: shot('demo-no-isolation'), fullPage: true }); // before the asserts: kept for debugging
    assert(d.crossOriginIsolated === false, 'crossOriginIsolated should be false without COOP/COEP');
    checkRun(d, { build: BUILDS.plain, minChecks: 4 });
    const badge = await text(page, '#build-badge');
    const reason = await text(page, '#build-reason');
    assert(/single-thread/.test(badge), `build badge "${badge}" does not say single-thread`);
    assert(/not cross-origin isolated/.test(reason) && /single-thread/.test(reason), `build reason "${reason}" does not explain the fallback`);
    // The page asks for threads: 1 here (its only choice), which is what runs: the package
    // warns nothing (it warns when more was asked, or 'auto': the next test).
    assert(Array.isArray(d.warnings) && d.warnings.length === 0, `expected no console.warn from sdpa-wasm for threads: 1, got ${JSON.stringify(d.warnings)}`);
    assert((await plotInk(page)) > 200, 'plot not drawn');
    assert(problems.length === 0, problems.join('\n'));
    return `${d.build}, ${d.nPoints} points, ${d.checks} checks, max err ${d.maxError.toExponential(2)}; "${reason.slice(0, 70)}…"`;
  } finally {
    await context.close();
  }
});

test('no COOP/COEP: threads: 1 asks for what runs, so nothing is warned; the default warns once', async () => {
  const { page, context, problems } = await openPage(`${noIso.url}bench.html?preset=qwen2-0.5b`);
  try {
    const run = (query, options) => page.evaluate(async (q, o) => {
      const warns = [], real = console.warn;
      console.warn = (...a) => warns.push(a.join(' '));
      try {
        const m = await import(new URL(`/js/index.js?${q}`, location.href).href);  // a fresh module: its own warn-once state
        const s = await m.createSdpa(o);
        const build = s.info.build;
        s.dispose();
        return { build, warns };
      } finally { console.warn = real; }
    }, query, options);
    const one = await run('one', { threads: 1 });
    assert(one.build === BUILDS.plain && one.warns.length === 0, `threads: 1: ${JSON.stringify(one)}`);
    const dflt = await run('default', undefined);
    assert(dflt.build === BUILDS.plain && dflt.warns.length === 1 && /single-thread/.test(dflt.warns[0]), `default: ${JSON.stringify(dflt)}`);
    assert(problems.length === 0, problems.join('\n'));
    return `threads: 1 → ${one.warns.length} warnings; default → ${dflt.warns.length}`;
  } finally {
    await context.close();
  }
});

test('invalid custom shape (Hq=6, Hkv=4) shows the SdpaError; page recovers', async () => {
  const { page, context, problems } = await openPage(`${iso.url}bench.html?preset=custom&hq=6&hkv=4&d=64&layers=2&ctx=256&autostart=1`);
  try {
    const d = await waitForEnd(page);
    await page.screenshot({ path: shot('demo-error'), fullPage: true }); // before the asserts: kept for debugging
    assert(d.status === 'error', `status ${d.status}, expected error`);
    assert(d.error && d.error.name === 'SdpaError' && d.error.code === 'E_HEADS', `error ${JSON.stringify(d.error)}`);
    const shown = await page.$eval('#error', (e) => (e.hidden ? '' : e.textContent));
    assert(shown.includes('SdpaError') && shown.includes('E_HEADS') && shown.includes(d.error.message), `error panel shows "${shown}"`);
    // The page is not stuck: pick a preset with the controls and run again.
    await page.select('#preset', 'qwen2-0.5b');
    for (const [sel, v] of [['#layers', '1'], ['#ctx', '200'], ['#prompt', '32']]) {
      await page.$eval(sel, (e) => (e.value = ''));
      await page.type(sel, v);
    }
    await page.click('#start');
    await page.waitForFunction(() => window.__demo.runs === 2, { timeout: 5000 });
    const d2 = await waitForEnd(page);
    checkRun(d2, { build: BUILDS.isolated, minChecks: 3 });
    assert(d2.config.hq === 14 && d2.config.hkv === 2 && d2.config.layers === 1, `controls not used: ${JSON.stringify(d2.config)}`);
    assert(await page.$eval('#error', (e) => e.hidden), 'old error still shown');
    assert(problems.length === 0, problems.join('\n'));
    return `"${shown.slice(0, 110)}…"; rerun via controls ok (max err ${d2.maxError.toExponential(2)})`;
  } finally {
    await context.close();
  }
});

test('more than the heap holds → E_OOM message, not a frozen page', async () => {
  // A paged cache for 4M tokens is only a page table; the prompt's tensors are not:
  // 4M tokens × 32 heads × 128 × 4 B ≈ 62 GiB of q alone, more than any wasm32 heap.
  const { page, context, problems } = await openPage(`${iso.url}bench.html?preset=llama3-8b&layers=1&ctx=4000000&prompt=4000000&autostart=1`);
  try {
    const d = await waitForEnd(page);
    await page.screenshot({ path: shot('demo-oom'), fullPage: true }); // before the asserts: kept for debugging
    assert(d.status === 'error' && d.error?.code === 'E_OOM', `status ${d.status}, error ${JSON.stringify(d.error)}`);
    const shown = await page.$eval('#error', (e) => (e.hidden ? '' : e.textContent));
    assert(shown.includes('E_OOM'), `error panel shows "${shown}"`);
    const responsive = await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r(true))));
    assert(responsive, 'page not responsive');
    assert(problems.length === 0, problems.join('\n'));
    return `"${shown.slice(0, 110)}…"`;
  } finally {
    await context.close();
  }
});

test('a worker whose thread blocks while it loads (Firefox can hang in `new Worker()` inside a worker) is restarted by its page: bench page and chat page', async () => {
  const notes = [];
  {
    const t0 = Date.now();
    const { page, context, problems, logs } = await openPage(`${iso.url}bench.html?preset=qwen2-0.5b&layers=1&ctx=120&prompt=32&threads=2&hangAtLoad=1&autostart=1`);
    try {
      const d = await waitForEnd(page);
      checkRun(d, { build: BUILDS.isolated, minChecks: 1 });
      assert(d.restarts === 1, `bench page: ${d.restarts} restarts, expected 1`);
      assert(logs.some((l) => l.startsWith('[warn') && RESTART_WARNING.test(l)), `no restart warning in ${logs.join(' | ')}`);
      assert(problems.length === 0, problems.join('\n'));
      notes.push(`bench page: restarted once, done in ${Date.now() - t0} ms, max err ${d.maxError.toExponential(2)}`);
    } finally {
      await context.close();
    }
  }
  {
    const t0 = Date.now();
    const { page, context, problems } = await openPage(`${iso.url}?hangAtLoad=1&threads=2`);
    try {
      const c = await waitChat(page, 'return c.model !== null');
      assert(c.restarts === 1 && c.build === BUILDS.isolated, `chat page: ${c.restarts} restarts, build ${c.build}`);
      assert(problems.length === 0, problems.join('\n'));
      notes.push(`chat page: restarted once, ready in ${Date.now() - t0} ms`);
    } finally {
      await context.close();
    }
  }
  return notes.join('; ');
});

test('Stop ends a long run promptly', async () => {
  const { page, context, problems } = await openPage(`${iso.url}bench.html?preset=qwen2-0.5b&layers=1&ctx=20000&prompt=16&threads=2&autostart=1`);
  try {
    await page.waitForFunction(() => window.__demo.points.length >= 30, { timeout: RUN_TIMEOUT, polling: 100 });
    const t0 = Date.now();
    await page.click('#stop');
    const d = await waitForEnd(page);
    const ms = Date.now() - t0; // < 4 s: the worker honoured 'stop' (the page's own fallback ends it at 5 s)
    await page.screenshot({ path: shot('demo-stopped'), fullPage: true }); // before the asserts: kept for debugging
    assert(d.status === 'stopped', `status ${d.status}`);
    assert(d.length < d.config.ctx, `ran to the end (${d.length})`);
    assert(ms < 4000, `stop took ${ms} ms`);
    assert(d.maxError === null || d.maxError < 1e-4, `max error ${d.maxError}`);
    assert(!(await page.$eval('#start', (e) => e.disabled)), 'Start not re-enabled');
    assert(problems.length === 0, problems.join('\n'));
    return `stopped at ${d.length} tokens after ${ms} ms`;
  } finally {
    await context.close();
  }
});

// ---- the chat page (web/index.html): the package's model in a worker ----

/** sdpa-wasm/llama in Node, from the package the pages are served from: greedy ids after `turns` of text. */
let nodeLlama = null;
async function nodeGreedy(turns, steps, dtype = 'float32') {
  if (!nodeLlama) {
    const [{ createSdpa }, llama] = await Promise.all([import(path.join(pkgDir, 'js/index.js')), import(path.join(pkgDir, 'js/llama/index.js'))]);
    const sdpa = await createSdpa({ threads: 1 });
    const checkpoint = fs.readFileSync(path.join(pkgDir, 'models/fortunes/model.bin'));
    const tokenizer = llama.loadTokenizer(fs.readFileSync(path.join(pkgDir, 'models/fortunes/tokenizer.bin')));
    nodeLlama = { sdpa, llama, checkpoint, tokenizer };
    servers.push({ close: () => sdpa.dispose() });
  }
  const { sdpa, llama, checkpoint, tokenizer } = nodeLlama;
  const [keyDtype, valueDtype = keyDtype] = dtype.split('/');
  const model = llama.loadLlama(sdpa, checkpoint, { keyDtype, valueDtype });
  try {
    const replies = [];
    turns.forEach((t, i) => {
      // a turn: what the page appends (its ids), then a greedy reply
      const ids = t.ids ?? Array.from(tokenizer.encode(t.text, { bos: i === 0 }));
      if (t.append) { model.forward(ids); return; }
      replies.push(Array.from(model.generate(ids, { temperature: 0, maxNewTokens: steps }).tokens));
    });
    return { replies, prompt: Array.from(tokenizer.encode(turns[0].text, { bos: true })) };
  } finally { model.dispose(); }
}

async function waitChat(page, pred, arg) {
  try {
    await page.waitForFunction(
      (src, a) => window.__chat && (window.__chat.status === 'error' || (window.__chat.status === 'ready' && new Function('c', 'a', src)(window.__chat, a))),
      { timeout: RUN_TIMEOUT, polling: 100 }, pred, arg ?? null,
    );
  } catch (e) {
    // where the page was: its status, the last load, replies, the error shown (a wait that never ends says no more)
    const at = await Promise.race([
      page.evaluate(() => { const c = window.__chat; return JSON.stringify({ status: c?.status, load: c?.load, replies: c?.replies?.length, reply: c?.reply?.length, length: c?.length, error: c?.error }); }),
      new Promise((r) => setTimeout(() => r('(the page did not answer in 5 s)'), 5000)),
    ]).catch((e2) => `(${e2.message})`);
    throw new Error(`${e.message} waiting for ${pred}; the page: ${at}`);
  }
  const c = await page.evaluate(() => JSON.parse(JSON.stringify(window.__chat)));
  assert(c.status !== 'error', `chat error: ${JSON.stringify(c.error)}`);
  return c;
}
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

test('chat: a greedy reply on the page is exactly sdpa-wasm/llama\'s in Node; Regenerate and Undo leave the cache as a fresh run', async () => {
  const steps = 24;
  const { page, context, problems } = await openPage(`${iso.url}?prompt=You%20will&steps=${steps}&greedy=1&build=simd-threads&threads=2&autostart=1`);
  try {
    let c = await waitChat(page, 'return c.replies.length === 1');
    await page.screenshot({ path: shot('chat-isolated'), fullPage: true });
    const node = await nodeGreedy([{ text: 'You will' }], steps);
    assert(c.build === 'simd-threads' && c.threads === 2 && c.crossOriginIsolated, `build ${c.build}, ${c.threads} threads`);
    assert(same(c.replies[0], node.replies[0]), `page ${c.replies[0]} vs Node ${node.replies[0]}`);
    assert(c.length === node.prompt.length + steps - 1, `length ${c.length}`);
    assert(/\d/.test(await text(page, '#s-decode')) && /%/.test(await text(page, '#s-share')) && /KiB/.test(await text(page, '#s-bytes')), 'figures not filled');
    assert(c.points.length === steps - 1 && c.points.every(([, a, d]) => a > 0 && d > 0), `plot points ${c.points.length}`);
    // Regenerate: a fork of the prompt's cache samples again (greedy: the same reply)
    await page.click('#regenerate');
    c = await waitChat(page, 'return c.replies.length === 1 && c.reply && c.reply.length === a', steps);
    assert(same(c.replies[0], node.replies[0]), `regenerated ${c.replies[0]}`);
    assert(c.length === node.prompt.length + steps - 1, `length after Regenerate ${c.length}`);
    // Undo: the cache truncated to the prompt; a new turn then continues as a fresh run of prompt + turn
    await page.click('#undo');
    c = await waitChat(page, 'return c.replies.length === 0 && c.length === a', node.prompt.length);
    assert(same(c.tokens, node.prompt), `tokens after Undo ${c.tokens}`);
    await page.type('#prompt', ' and then');
    await page.click('#generate');
    c = await waitChat(page, 'return c.replies.length === 1');
    const fresh = await nodeGreedy([{ text: 'You will', append: true }, { text: ' and then' }], steps);
    assert(same(c.replies[0], fresh.replies[0]), `after Undo: page ${c.replies[0]} vs Node ${fresh.replies[0]}`);
    assert(problems.length === 0, problems.join('\n'));
    return `${steps} greedy ids equal Node's (simd-threads, 2 threads), also after Regenerate and after Undo + a new turn; decode ${c.decodeTps?.toFixed(0)} tokens/s`;
  } finally {
    await context.close();
  }
});

test('chat: every KV dtype generates what Node generates; switching re-runs the conversation (bytes, top-1 agreement with float32)', async () => {
  const notes = [];
  let f32 = null;
  for (const dtype of ['float32', 'float16', 'int8', 'int4', 'int8/int4']) {
    const { page, context, problems } = await openPage(`${iso.url}?prompt=A%20computer&steps=12&greedy=1&build=simd-threads&dtype=${encodeURIComponent(dtype)}&autostart=1`);
    try {
      let c = await waitChat(page, 'return c.replies.length === 1');
      const node = await nodeGreedy([{ text: 'A computer' }], 12, dtype);
      assert(same(c.replies[0], node.replies[0]), `${dtype}: page ${c.replies[0]} vs Node ${node.replies[0]}`);
      const n = c.tokens.length;
      const tps = c.decodeTps;
      if (dtype === 'float32') {
        f32 = c.bytes;
        assert(c.agree === null, 'float32 has nothing to agree with');
        // switching the dtype re-runs the conversation on the new cache, the float32 model beside it
        await page.select('#dtype', 'int8');
        c = await waitChat(page, 'return c.dtype === "int8"');
        assert(c.length === n && c.bytes < f32, `after the switch: length ${c.length}, ${c.bytes} bytes`);
        assert(c.agree && c.agree.total === n, `agreement over the ${n} positions: ${JSON.stringify(c.agree)}`);
        notes.push(`float32 ${tps.toFixed(0)} tokens/s; switch to int8: top-1 ${c.agree.same}/${c.agree.total}`);
      } else {
        assert(c.bytes < f32, `${dtype}: ${c.bytes} bytes, float32 ${f32}`);
        assert(c.agree && c.agree.total === n && c.agree.same > 0, `${dtype}: agreement ${JSON.stringify(c.agree)}`);
        notes.push(`${dtype} ${(c.bytes / 1024).toFixed(0)} KiB, top-1 ${c.agree.same}/${c.agree.total}, ${c.decodeTps.toFixed(0)} tokens/s`);
      }
      assert(problems.length === 0, problems.join('\n'));
    } finally {
      await context.close();
    }
  }
  return notes.join('; ');
});

for (const storage of ['OPFS', 'IndexedDB']) test(`chat: Keep this chat (${storage}), reload, restore (no prefill), go on: the same ids as the uninterrupted run`, async () => {
  const base = `${iso.url}?steps=12&seed=5&build=simd-threads&dtype=int8${storage === 'IndexedDB' ? '&storage=indexeddb' : ''}`;
  const { page, context, problems } = await openPage(`${base}&prompt=You%20will&autostart=1`);
  try {
    let c = await waitChat(page, 'return c.replies.length === 1');
    await page.click('#keep');
    c = await waitChat(page, 'return c.kept !== null && c.chats.length >= 1');
    const kept = c.kept;
    assert(kept.length === c.length && kept.storage === storage, `kept ${JSON.stringify(kept)}`);
    // the uninterrupted run goes on with a second turn
    await page.type('#prompt', ' Then');
    await page.click('#generate');
    c = await waitChat(page, 'return c.replies.length === 2');
    const uninterrupted = c.replies[1];
    // reload (no autostart), restore the kept chat, the same turn
    await page.goto(base, { waitUntil: 'load' });
    c = await waitChat(page, 'return c.chats.some((x) => x.id === a)', kept.id);
    await page.click(`#kept li[data-id="${kept.id}"] button.restore`);
    c = await waitChat(page, 'return c.restored !== null');
    assert(c.restored.prefilled === 0, `the restore ran ${c.restored.prefilled} tokens through the model`);
    assert(c.length === kept.length && c.dtype === 'int8', `restored ${c.length} tokens (${c.dtype}), kept ${kept.length}`);
    assert((await text(page, '#transcript')).startsWith('You will'), 'the transcript is back');
    await page.type('#prompt', ' Then');
    await page.click('#generate');
    c = await waitChat(page, 'return c.replies.length === 1');
    assert(same(c.replies[0], uninterrupted), `after the restore ${c.replies[0]}, uninterrupted ${uninterrupted}`);
    // what a prefill of the same conversation costs: a dtype switch runs it again
    const restoreMs = c.restored.ms;
    await page.select('#dtype', 'int4');
    c = await waitChat(page, 'return c.rerun && c.dtype === "int4"');
    const rerun = c.rerun;
    await page.screenshot({ path: shot('chat-restored'), fullPage: true });
    // delete it
    await page.click(`#kept li[data-id="${kept.id}"] button.delete`);
    c = await waitChat(page, 'return !c.chats.some((x) => x.id === a)', kept.id);
    assert(problems.length === 0, problems.join('\n'));
    return `${kept.length} tokens kept in ${kept.storage} (${(kept.bytes / 1024).toFixed(0)} KiB); restored in ${restoreMs.toFixed(1)} ms with no prefill, ` +
      `a re-run of ${rerun.tokens} tokens took ${rerun.ms.toFixed(1)} ms; the next ${uninterrupted.length} ids equal the uninterrupted run's`;
  } finally {
    await context.close();
  }
});

test('chat: a storage error (a full disk) is shown, and the page goes on', async () => {
  const { page, context, problems } = await openPage(`${iso.url}?prompt=You%20will&steps=6&seed=1&storage=broken&autostart=1`);
  try {
    await waitChat(page, 'return c.replies.length === 1');
    await page.click('#keep');
    await page.waitForFunction(() => window.__chat.status === 'ready' && window.__chat.error !== null, { timeout: RUN_TIMEOUT, polling: 50 });
    const shown = await text(page, '#error');
    assert(/QuotaExceededError: cannot write chat-.*quota is exceeded/.test(shown) && !(await page.$eval('#error', (e) => e.hidden)), `error panel: ${shown}`);
    await page.type('#prompt', ' Then');
    await page.click('#generate');
    const c = await waitChat(page, 'return c.replies.length === 2');
    assert(c.replies[1].length > 0, 'it still writes');
    assert(problems.length === 0, problems.join('\n'));
    return `shown: "${shown.slice(0, 70)}…"`;
  } finally {
    await context.close();
  }
});

test('chat: Stop ends a long reply promptly, and the cache holds what was shown', async () => {
  // greedy: this model's greedy continuation of "It is" runs past 480 tokens with no EOS (that of
  // "You will" ends by EOS after 161, which the model in wasm writes in about 0.3 s, before a click
  // lands); Stop is clicked at the first token, so the reply must end by Stop
  const { page, context, problems } = await openPage(`${iso.url}?prompt=It%20is&steps=480&greedy=1&build=simd-threads&autostart=1`);
  try {
    await page.waitForFunction(() => window.__chat && window.__chat.reply && window.__chat.reply.length >= 1, { timeout: RUN_TIMEOUT, polling: 10 });
    const t0 = Date.now();
    await page.click('#stop');
    const c = await waitChat(page, 'return c.replies.length === 1');
    const ms = Date.now() - t0;
    assert(c.stop === 'stopped', `the reply ended by ${c.stop} after ${c.replies[0].length} tokens, ${ms} ms after the click, not by Stop`);
    assert(c.replies[0].length < 480 && ms < 3000, `${c.replies[0].length} tokens, ${ms} ms after Stop`);
    const { prompt } = await nodeGreedy([{ text: 'It is' }], 1);
    const shown = c.replies[0];
    assert(c.length === prompt.length + shown.length - 1 && same(c.tokens, [...prompt, ...shown.slice(0, -1)]),
      'the cache holds the prompt and every shown token but the last (the next turn starts with it)');
    assert(problems.length === 0, problems.join('\n'));
    return `stopped after ${c.replies[0].length} tokens, ${ms} ms after the click`;
  } finally {
    await context.close();
  }
});

test('chat: not isolated, the single-thread build with 1 thread writes too', async () => {
  const { page, context, problems } = await openPage(`${noIso.url}?prompt=You%20will&steps=8&seed=3&autostart=1`);
  try {
    const c = await waitChat(page, 'return c.replies.length === 1');
    assert(!c.crossOriginIsolated && c.threads === 1 && !c.build.includes('threads'), `build ${c.build}, ${c.threads} threads`);
    assert(/single-thread build, 1 thread/.test(await text(page, '#build-reason')), 'the page says it runs single-threaded');
    assert(c.replies[0].length === 8 || c.stop === 'stop', `reply ${c.replies[0]}`);
    // the package's one console.warn about the fallback is expected here; nothing else
    assert(problems.length === 0, problems.join('\n'));
    return `${c.build}: "${c.text.slice(0, 40)}"`;
  } finally {
    await context.close();
  }
});

// ---- the chat page opens a GGUF file (web/chat-worker.js: inspectGguf, then loadGguf) ----

/**
 * The shipped model converted by scripts/llama2c-to-gguf.mjs, written to a temporary directory:
 * q8: Q8_0 weights, no template; chat: F32 weights and a plain-text chat template (rendered in
 * the test by string concatenation, an independent reference), and two files that must not open.
 */
// (it writes BOS itself, as many templates do: the page must still give it once)
const CHAT_TEMPLATE = "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}Q: {{ m.content }}\n{% else %}A:{{ m.content }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}A:{% endif %}";
const renderChat = (messages) => messages.map((m) => (m.role === 'user' ? `Q: ${m.content}\n` : `A:${m.content}\n`)).join('') + 'A:';
// (the files' directory is served at /gguf/ by the isolated server)
const ggufDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-chat-gguf-'));
let ggufFiles = null;
async function ggufFixtures() {
  if (ggufFiles) return ggufFiles;
  await nodeGreedy([{ text: 'x' }], 1);              // (nodeLlama: the package in Node)
  const { llama2cToGguf } = await import(path.join(REPO, 'scripts/llama2c-to-gguf.mjs'));
  const { writeGguf } = await import(path.join(REPO, 'scripts/lib/gguf-writer.mjs'));
  // (plain Uint8Arrays: the converter's checkpoint.slice(...).buffer takes a Node Buffer's slice for a copy)
  const tokenizerBin = new Uint8Array(fs.readFileSync(path.join(pkgDir, 'models/fortunes/tokenizer.bin')));
  const checkpoint = new Uint8Array(nodeLlama.checkpoint);
  const write = (name, bytes) => { const p = path.join(ggufDir, name); fs.writeFileSync(p, bytes); return p; };
  const q8 = await llama2cToGguf(checkpoint, tokenizerBin, { type: 'Q8_0', name: 'fortunes q8_0', sdpa: nodeLlama.sdpa });
  const chat = await llama2cToGguf(checkpoint, tokenizerBin, { type: 'F32', name: 'fortunes chat', chatTemplate: CHAT_TEMPLATE });
  // another architecture, one tensor of a type no build runs: inspectGguf says so from the header
  const mamba = writeGguf({
    metadata: [['general.architecture', 'STRING', 'mamba'], ['general.name', 'STRING', 'not a llama']],
    tensors: [{ name: 'token_embd.weight', ne: [32, 4], type: 'Q5_1', data: new Uint8Array(4 * 24) }],
  });
  // a header of a llama model whose weights (6.4 GB of F32) a wasm32 heap cannot hold; no data after it
  const big = { dim: 8192, hidden: 16384, heads: 64, kvHeads: 8, vocab: 131072 };
  const kv = big.dim / big.heads * big.kvHeads;
  const bigTensors = [['token_embd.weight', [big.dim, big.vocab]], ['output_norm.weight', [big.dim]],
    ['blk.0.attn_norm.weight', [big.dim]], ['blk.0.attn_q.weight', [big.dim, big.dim]], ['blk.0.attn_k.weight', [big.dim, kv]],
    ['blk.0.attn_v.weight', [big.dim, kv]], ['blk.0.attn_output.weight', [big.dim, big.dim]], ['blk.0.ffn_norm.weight', [big.dim]],
    ['blk.0.ffn_gate.weight', [big.dim, big.hidden]], ['blk.0.ffn_down.weight', [big.hidden, big.dim]], ['blk.0.ffn_up.weight', [big.dim, big.hidden]]];
  let at = 0;
  const tooBig = writeGguf({
    metadata: [['general.architecture', 'STRING', 'llama'], ['general.name', 'STRING', 'too big'],
      ['llama.context_length', 'UINT32', 4096], ['llama.embedding_length', 'UINT32', big.dim], ['llama.block_count', 'UINT32', 1],
      ['llama.feed_forward_length', 'UINT32', big.hidden], ['llama.attention.head_count', 'UINT32', big.heads],
      ['llama.attention.head_count_kv', 'UINT32', big.kvHeads], ['llama.attention.layer_norm_rms_epsilon', 'FLOAT32', 1e-5]],
    tensors: bigTensors.map(([name, ne]) => {
      const t = { name, ne, type: 'F32', data: new Uint8Array(0), offset: at };
      at += ne.reduce((a, b) => a * b, 1) * 4;
      return t;
    }),
  });
  ggufFiles = {
    tooBig: write('too-big.gguf', tooBig), tooBigWeights: at,
    q8: write('fortunes-q8_0.gguf', q8), q8Bytes: q8, chat: write('fortunes-chat.gguf', chat), chatBytes: chat,
    mamba: write('mamba.gguf', mamba), weightsOnly: write('weights-only.gguf', await llama2cToGguf(checkpoint, null, { name: 'no tokenizer' })), text: write('notes.gguf', new TextEncoder().encode('These are notes, not a model.\n'.repeat(40))),
  };
  return ggufFiles;
}

/** Node's greedy reply to `ids` from a GGUF's bytes (loadGguf), the reference of the page's. */
async function nodeGgufGreedy(bytes, ids, steps) {
  const { sdpa, llama } = nodeLlama;
  const { model } = await llama.loadGguf(sdpa, bytes);
  try {
    return Array.from(model.generate(ids, { temperature: 0, maxNewTokens: steps }).tokens);
  } finally { model.dispose(); }
}

/** Opens `file` through the page's file input; resolves once the load ended (the model open, or words why not). */
async function openThroughInput(page, file) {
  const models = await page.evaluate(() => window.__chat.models);
  const input = await page.$('#model-file');
  await input.uploadFile(file);
  await page.waitForFunction((n) => {
    const c = window.__chat;
    return c.status === 'ready' && c.load && (c.models > n || ['refused', 'cancelled', 'failed'].includes(c.load.phase));
  }, { timeout: RUN_TIMEOUT, polling: 50 }, models);
  return page.evaluate(() => JSON.parse(JSON.stringify(window.__chat)));
}

const cardText = (page) => page.$$eval('#model-card div', (ds) => Object.fromEntries(ds.map((d) => [d.dataset.key, d.querySelector('dd').textContent])));

test('chat: a GGUF opened through the file input (the shipped model as Q8_0): its card, its tokenizer, a greedy reply equal to loadGguf\'s in Node', async () => {
  const files = await ggufFixtures();
  const steps = 16;
  const { page, context, problems } = await openPage(`${iso.url}?steps=${steps}&greedy=1&build=simd-threads`);
  try {
    await waitChat(page, 'return c.model !== null');
    const shippedCard = await cardText(page);
    assert(/^3\.\d M$/.test(shippedCard.parameters) && /F32/.test(shippedCard.types), `the shipped model's card ${JSON.stringify(shippedCard)}`);
    let c = await openThroughInput(page, files.q8);
    assert(c.load.phase === 'done' && c.model.name === 'fortunes q8_0' && c.model.card.source === 'file', `load ${JSON.stringify(c.load)}, model ${c.model?.name}`);
    const card = await cardText(page);
    const layers = 5;
    assert(card.architecture.startsWith('llama (GGUF v3)') && card.name === 'fortunes q8_0', `card ${JSON.stringify(card)}`);
    assert(card.types === `F32 × ${2 * layers + 1}, Q8_0 × ${7 * layers + 1}` || card.types === `Q8_0 × ${7 * layers + 1}, F32 × ${2 * layers + 1}`, `tensor types "${card.types}"`);
    assert(/^512 \(llama\)$/.test(card.vocab) && /none/.test(card.template) && /^\d+ tokens \(held here: \d+\)$/.test(card.context), `card ${JSON.stringify(card)}`);
    assert(card.runs.includes(c.model.fingerprint) && /^gguf-[0-9a-f]{8}-[0-9a-f]+$/.test(c.model.fingerprint), `runs "${card.runs}", fingerprint ${c.model.fingerprint}`);
    assert(/fortunes q8_0 \(your file\)/.test(await text(page, '#model-name')) && !(await page.$eval('#model-shipped', (e) => e.hidden)), 'the model line');
    // a reply: the prompt as run.c's tokenizer (tokenizer.bin) encodes it, greedy in Node on the same file
    await page.type('#prompt', 'You will');
    await page.click('#generate');
    c = await waitChat(page, 'return c.replies.length === 1');
    const prompt = Array.from(nodeLlama.tokenizer.encode('You will', { bos: true }));
    const node = await nodeGgufGreedy(files.q8Bytes, prompt, steps);
    assert(same(c.tokens.slice(0, prompt.length), prompt), `the page's prompt ids ${c.tokens.slice(0, prompt.length)}, run.c's ${prompt}`);
    assert(same(c.replies[0], node), `page ${c.replies[0]} vs Node ${node}`);
    assert((await text(page, '#transcript')).startsWith('You will') && c.text.length > 0, 'the transcript');
    await page.screenshot({ path: shot('chat-gguf'), fullPage: true });
    // another KV dtype: the file's weights are held once, so the file is read again, and the conversation re-run on it
    const held = c.length;
    await page.select('#dtype', 'int8');
    c = await waitChat(page, 'return c.dtype === "int8" && c.rerun');
    assert(c.model.name === 'fortunes q8_0' && c.models === 2 && c.length === held && c.rerun.tokens === held && c.load.phase === 'done', `after the switch: ${c.model.name}, ${c.length} tokens, load ${JSON.stringify(c.load)}`);
    await page.type('#prompt', ' Then');
    await page.click('#generate');
    c = await waitChat(page, 'return c.replies.length === 2');
    assert(c.replies[1].length > 0 && (await text(page, '#s-bytes')).includes('int8'), 'the int8 cache writes on');
    assert(c.agree === null && /not measured/.test(await text(page, '#s-agree')), 'no float32 model beside an opened file');
    assert(await page.$eval('#load-row', (e) => getComputedStyle(e).display === 'none'), 'the progress bar is gone after the load');
    // back to the shipped model: a new conversation on it
    await page.click('#model-shipped');
    c = await waitChat(page, 'return c.model.card.source === "shipped"');
    assert(c.replies.length === 0 && c.length === 0 && (await text(page, '#transcript')) === '', 'a new conversation');
    assert(problems.length === 0, problems.join('\n'));
    return `card: ${card.types}, ${card.parameters} parameters, ${card.size}; ${steps} greedy ids equal Node's loadGguf; decode ${c.decodeTps?.toFixed(0) ?? '–'} tokens/s`;
  } finally {
    await context.close();
  }
});

test('chat: a GGUF with a chat template is a chat: each turn the rendered conversation (checked against the template written out), only new ids run, greedy replies equal Node\'s', async () => {
  const files = await ggufFixtures();
  const steps = 10;
  const { page, context, problems } = await openPage(`${iso.url}?steps=${steps}&greedy=1&build=simd-threads`);
  try {
    await waitChat(page, 'return c.model !== null');
    let c = await openThroughInput(page, files.chat);
    assert(c.model?.chat === true, `not a chat: ${JSON.stringify(c.model?.card)} ${JSON.stringify(c.error)}`);
    assert(/yes: each turn/.test((await cardText(page)).template), 'the card says the template is applied');
    const { tokenizer } = nodeLlama;   // tokenizer.bin: run.c's encode, independent of the file's tokenizer
    const messages = [];
    const turns = ['What is a fortune?', 'And a cookie?'];
    const ran = [];
    let prev = 0;
    for (let t = 0; t < turns.length; t++) {
      messages.push({ role: 'user', content: turns[t] });
      const ids = Array.from(tokenizer.encode(renderChat(messages), { bos: true }));
      await page.type('#prompt', turns[t]);
      await page.click('#generate');
      c = await waitChat(page, 'return c.replies.length === a', t + 1);
      assert(same(c.tokens.slice(0, ids.length), ids), `turn ${t + 1}: the cache holds ${c.tokens.slice(0, ids.length)}, the rendered chat is ${ids}`);
      // what ran: the end of the rendering only, past (at least) the whole of the turn before's prompt
      assert(same(c.ran, ids.slice(ids.length - c.ran.length)) && (t === 0 ? c.ran.length === ids.length : ids.length - c.ran.length >= prev), `turn ${t + 1}: ran ${c.ran.length} of ${ids.length} ids`);
      ran.push(c.ran.length);
      prev = ids.length;
      const node = await nodeGgufGreedy(files.chatBytes, ids, steps);
      assert(same(c.replies[t], node), `turn ${t + 1}: page ${c.replies[t]} vs Node ${node}`);
      const decoder = tokenizer.decoder(ids.at(-1));
      const reply = c.stop === 'stop' ? c.replies[t].slice(0, -1) : c.replies[t];
      messages.push({ role: 'assistant', content: reply.map((id) => decoder.push(id)).join('') });
    }
    assert(await page.$eval('#transcript', (e) => e.classList.contains('chat-mode')), 'the transcript shows turns');
    await page.screenshot({ path: shot('chat-gguf-template'), fullPage: true });
    // Undo in a chat drops the whole last turn (user and reply); the next turn follows the first
    await page.click('#undo');
    c = await waitChat(page, 'return c.length < a', c.length);
    const spans = await page.$$eval('#transcript span', (ss) => ss.map((x) => x.className));
    assert(JSON.stringify(spans) === JSON.stringify(['user', 'model']), `the transcript after Undo: ${spans}`);
    messages.splice(2);
    messages.push({ role: 'user', content: 'Again?' });
    const again = Array.from(tokenizer.encode(renderChat(messages), { bos: true }));
    await page.type('#prompt', 'Again?');
    await page.click('#generate');
    c = await waitChat(page, 'return c.replies.length === 2');
    assert(same(c.tokens.slice(0, again.length), again), `after Undo: the cache holds ${c.tokens.slice(0, again.length)}, the rendered chat is ${again}`);
    const nodeAgain = await nodeGgufGreedy(files.chatBytes, again, steps);
    assert(same(c.replies[1], nodeAgain), `after Undo: page ${c.replies[1]} vs Node ${nodeAgain}`);
    // Regenerate (greedy: the same reply), then one more turn: the chat holds the regenerated reply once
    await page.click('#regenerate');
    c = await waitChat(page, 'return c.replies.length === 2 && c.reply && c.reply.length === a.length && c.reply.every((x, i) => x === a[i])', nodeAgain);
    const decoder = tokenizer.decoder(again.at(-1));
    messages.push({ role: 'assistant', content: (c.stop === 'stop' ? nodeAgain.slice(0, -1) : nodeAgain).map((id) => decoder.push(id)).join('') });
    messages.push({ role: 'user', content: 'Bye.' });
    const last = Array.from(tokenizer.encode(renderChat(messages), { bos: true }));
    await page.type('#prompt', 'Bye.');
    await page.click('#generate');
    c = await waitChat(page, 'return c.replies.length === 3');
    assert(same(c.tokens.slice(0, last.length), last), `after Regenerate: the cache holds ${c.tokens.slice(0, last.length)}, the rendered chat is ${last}`);
    assert(problems.length === 0, problems.join('\n'));
    return `${turns.length} turns, the cache holds the rendered conversation (the turns ran ${ran.join(' and ')} ids), replies equal Node's; Undo then a turn, Regenerate then a turn: the same`;
  } finally {
    await context.close();
  }
});

test('chat: the file\'s stop tokens end a reply (tokenizer.ggml.eot_token_id set to a token of the greedy reply)', async () => {
  const files = await ggufFixtures();
  const { parseGguf } = await import(path.join(REPO, 'js/llama/gguf.js'));
  const { writeGguf } = await import(path.join(REPO, 'scripts/lib/gguf-writer.mjs'));
  const prompt = Array.from(nodeLlama.tokenizer.encode('You will', { bos: true }));
  const free = await nodeGgufGreedy(files.q8Bytes, prompt, 16);
  const at = free.findIndex((id, i) => i >= 2 && id > 2 && !free.slice(0, i).includes(id));
  assert(at > 0, `no token to stop at in ${free}`);
  // the same file with one more key: its end-of-turn token
  const h = parseGguf(files.q8Bytes);
  const metadata = new Map(h.metadata).set('tokenizer.ggml.eot_token_id', free[at]);
  const tensors = h.tensors.map((t) => ({ name: t.name, ne: t.ne, type: t.type, data: files.q8Bytes.subarray(h.dataOffset + t.offset, h.dataOffset + t.offset + t.bytes) }));
  const file = path.join(ggufDir, 'eot.gguf');
  fs.writeFileSync(file, writeGguf({ metadata, tensors, alignment: h.alignment }));
  const { page, context, problems } = await openPage(`${iso.url}?steps=16&greedy=1`);
  try {
    await waitChat(page, 'return c.model !== null');
    await openThroughInput(page, file);
    await page.type('#prompt', 'You will');
    await page.click('#generate');
    const c = await waitChat(page, 'return c.replies.length === 1');
    assert(c.stop === 'stop' && same(c.replies[0], free.slice(0, at + 1)), `the reply ${c.replies[0]} (${c.stop}); the free run ${free}, EOT ${free[at]}`);
    assert(problems.length === 0, problems.join('\n'));
    return `the reply ended at token ${free[at]} (EOT), after ${at + 1} of the free run's ${free.length}`;
  } finally {
    await context.close();
  }
});

test('chat: a ChatML file (random tiny weights, scripts/random-gguf.mjs): the template\'s special tokens run as single ids, the text between them as llama.cpp\'s SPM gives it', async () => {
  const { randomGguf, randomVocab, SHAPES } = await import(path.join(REPO, 'scripts/random-gguf.mjs'));
  const file = path.join(ggufDir, 'tiny-chatml.gguf');
  fs.writeFileSync(file, randomGguf({ shape: 'tiny', type: 'Q8_0' }));
  const vocab = randomVocab(SHAPES.tiny).tokens;
  const [start, end] = ['<|im_start|>', '<|im_end|>'].map((t) => vocab.indexOf(t));
  // the file's pieces as text, read from its vocabulary: U+2581 is a space, <0xXX> a byte
  const text = (ids) => new TextDecoder().decode(Uint8Array.from(ids.flatMap((id) => {
    const b = /^<0x([0-9A-F]{2})>$/.exec(vocab[id]);
    return b ? [parseInt(b[1], 16)] : [...new TextEncoder().encode(vocab[id].replaceAll('\u2581', ' '))];
  })));
  const { page, context, problems } = await openPage(`${iso.url}?steps=3&greedy=1`);
  try {
    await waitChat(page, 'return c.model !== null');
    let c = await openThroughInput(page, file);
    assert(c.model.chat === true, `not a chat: ${JSON.stringify(c.error)}`);
    const prompts = ['Hi there', 'And now?'];
    for (let t = 0; t < prompts.length; t++) {
      await page.type('#prompt', prompts[t]);
      await page.click('#generate');
      c = await waitChat(page, 'return c.replies.length === a', t + 1);
    }
    // the second turn's rendering, cut at the special tokens: BOS (add_bos_token), then ChatML's turns
    const ids = c.tokens.slice(0, c.tokens.length - c.replies[1].length + 1);
    assert(ids[0] === 1 && ids.filter((x) => x === 1).length === 1, `BOS once at the start: ${ids.slice(0, 4)}`);
    const parts = [];
    let run = [];
    for (const id of ids.slice(1)) {
      if (id === start || id === end) { parts.push(text(run), id === start ? 'S' : 'E'); run = []; } else run.push(id);
    }
    parts.push(text(run));
    const assistant = await page.evaluate(() => document.querySelectorAll('#transcript .model')[0].textContent);
    const want = ['', 'S', ' system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face', 'E', ' \n', 'S', ` user\n${prompts[0]}`, 'E', ' \n',
      'S', ` assistant\n${assistant}`, 'E', ' \n', 'S', ` user\n${prompts[1]}`, 'E', ' \n', 'S', ' assistant\n'];
    assert(JSON.stringify(parts) === JSON.stringify(want), `the cache's ids read as ${JSON.stringify(parts)}; expected ${JSON.stringify(want)}`);
    assert(c.ran.length < ids.length - 20, `the second turn ran ${c.ran.length} of ${ids.length} ids`);
    assert(problems.length === 0, problems.join('\n'));
    return `${ids.length} ids: ${parts.filter((p) => p === 'S').length} <|im_start|>, ${parts.filter((p) => p === 'E').length} <|im_end|>; the second turn ran ${c.ran.length}`;
  } finally {
    await context.close();
  }
});

test('chat: GGUF files llama.cpp wrote (tests/data/gguf: Q4_0 with a Q6_K classifier; Q4_K_M) open through the file input; greedy replies equal loadGguf\'s in Node', async () => {
  await ggufFixtures();
  const { GGUF_MATRIX_TYPES } = nodeLlama.llama;
  const steps = 12;
  const { page, context, problems } = await openPage(`${iso.url}?steps=${steps}&greedy=1&build=simd-threads`);
  try {
    await waitChat(page, 'return c.model !== null');
    const notes = [];
    for (const name of ['fortunes-Q4_0.gguf', 'fortunes-Q4_K_M.gguf']) {
      const file = path.join(REPO, 'tests/data/gguf', name);
      const bytes = new Uint8Array(fs.readFileSync(file));
      const meta = await nodeLlama.llama.inspectGguf(bytes);
      let c = await openThroughInput(page, file);
      const types = (await cardText(page)).types;
      for (const [t, n] of Object.entries(meta.tensorTypes)) assert(types.includes(`${t} × ${n}`), `${name}: the card's types "${types}" lack ${t} × ${n} (load ${JSON.stringify(c.load)})`);
      if (!Object.keys(meta.tensorTypes).every((t) => t === 'F32' || GGUF_MATRIX_TYPES.includes(t))) {
        // (a build without one of its types: the page must say so, from the header)
        assert(c.load.phase === 'refused' && /cannot run here: .*tensor/.test(await text(page, '#error')), `${name}: ${JSON.stringify(c.load)}`);
        notes.push(`${name}: refused in words (${types})`);
        continue;
      }
      assert(c.load.phase === 'done' && c.model.card.fileName === name, `${name}: ${JSON.stringify(c.load)}`);
      await page.type('#prompt', 'You will');
      await page.click('#generate');
      c = await waitChat(page, 'return c.replies.length === 1');
      const node = await nodeGgufGreedy(bytes, Array.from(nodeLlama.tokenizer.encode('You will', { bos: true })), steps);
      assert(same(c.replies[0], node), `${name}: page ${c.replies[0]} vs Node ${node}`);
      notes.push(`${name} (${types}): "${c.text.slice(0, 30)}…" equal to Node's`);
    }
    assert(problems.length === 0, problems.join('\n'));
    return notes.join('; ');
  } finally {
    await context.close();
  }
});

test('chat: a GGUF dropped on the page opens', async () => {
  await ggufFixtures();
  const { page, context, problems } = await openPage(`${iso.url}?steps=4`);
  try {
    await waitChat(page, 'return c.model !== null');
    await page.evaluate(async () => {
      const file = new File([await (await fetch('/gguf/fortunes-q8_0.gguf')).blob()], 'dropped.gguf');
      const dt = new DataTransfer();
      dt.items.add(file);
      document.body.dispatchEvent(new DragEvent('dragenter', { dataTransfer: dt, bubbles: true, cancelable: true }));
      document.body.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    });
    const c = await waitChat(page, 'return c.models === 2');
    assert(c.model.name === 'fortunes q8_0' && c.model.card.fileName === 'dropped.gguf' && !(await page.$eval('body', (b) => b.classList.contains('dragging'))), `model ${c.model.name} (${c.model.card.fileName})`);
    assert(problems.length === 0, problems.join('\n'));
    return `${c.model.name} from ${c.model.card.fileName}`;
  } finally {
    await context.close();
  }
});

/** A server that sends a file slowly (chunk bytes every `everyMs`), with CORS: a slow download for Cancel. */
async function trickleServer(file, { chunk = 16384, everyMs = 40, length = true, cors = true } = {}) {
  const bytes = fs.readFileSync(file);
  const server = http.createServer((req, res) => {
    res.writeHead(200, {
      'Content-Type': 'application/octet-stream', 'Cache-Control': 'no-store',
      ...(cors ? { 'Access-Control-Allow-Origin': '*', 'Cross-Origin-Resource-Policy': 'cross-origin' } : {}),
      ...(length ? { 'Content-Length': bytes.length } : {}),     // (without: chunked, the size unknown)
    });
    let at = 0;
    const timer = setInterval(() => {
      if (at >= bytes.length) { clearInterval(timer); res.end(); return; }
      res.write(bytes.subarray(at, at += chunk));
    }, everyMs);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  servers.push({ close: () => { server.close(); server.closeAllConnections?.(); } });
  return `http://127.0.0.1:${server.address().port}/`;
}

test('chat: ?model=URL loads with progress (MB, MB/s, time left); Cancel mid-load leaves the shipped model open, and it writes', async () => {
  const files = await ggufFixtures();
  const slow = await trickleServer(files.q8);
  const url = `${slow}fortunes-q8_0.gguf`;
  const { page, context, problems } = await openPage(`${iso.url}?model=${encodeURIComponent(url)}&steps=8&greedy=1&prompt=You%20will&autostart=1`);
  try {
    await page.waitForFunction(() => window.__chat.load?.phase === 'loading' && window.__chat.load.loaded > 200_000, { timeout: RUN_TIMEOUT, polling: 50 });
    const status = await text(page, '#load-status');
    const card = await cardText(page);
    assert(/^[\d.]+ MB of [\d.]+ MB · [\d.]+ MB\/s · (<1|\d+) s left$/.test(status), `progress "${status}"`);
    assert(card.name === 'fortunes q8_0' && /Q8_0/.test(card.types), `the card before the weights: ${JSON.stringify(card)}`);
    const mid = await page.evaluate(() => ({ ...window.__chat.load }));
    await page.click('#load-cancel');
    const c = await waitChat(page, 'return c.load.phase === "cancelled"');
    assert(c.load.loaded < files.q8Bytes.length, `cancelled after ${c.load.loaded} of ${files.q8Bytes.length} bytes`);
    assert(c.model.card.source === 'shipped' && c.models === 1, `the model open: ${c.model.name}`);
    assert(/cancelled/.test(await text(page, '#load-note')) && (await page.$eval('#load-row', (e) => e.hidden)), 'the page says it was cancelled');
    assert(c.replies.length === 0, 'autostart waited for the file');
    // the shipped model still writes
    await page.type('#prompt', 'You will');
    await page.click('#generate');
    const d = await waitChat(page, 'return c.replies.length === 1');
    const node = await nodeGreedy([{ text: 'You will' }], 8);
    assert(same(d.replies[0], node.replies[0]), `after Cancel: page ${d.replies[0]} vs Node ${node.replies[0]}`);
    const real = problems.filter((p) => !p.includes(slow));   // (the cancelled download is a failed request)
    assert(real.length === 0, real.join('\n'));
    return `"${status}"; cancelled at ${(mid.loaded / 1e6).toFixed(2)} MB of ${(files.q8Bytes.length / 1e6).toFixed(2)}; the shipped model then wrote its reply`;
  } finally {
    await context.close();
  }
});

test('chat: ?model=URL&autostart=1 opens the file, then writes', async () => {
  const files = await ggufFixtures();
  const { page, context, problems } = await openPage(`${iso.url}?model=${encodeURIComponent(`/gguf/fortunes-q8_0.gguf`)}&steps=8&greedy=1&prompt=You%20will&autostart=1`);
  try {
    const c = await waitChat(page, 'return c.replies.length === 1');
    assert(c.model.name === 'fortunes q8_0' && c.model.card.source === 'url', `model ${c.model.name} (${c.model.card.source})`);
    const node = await nodeGgufGreedy(files.q8Bytes, Array.from(nodeLlama.tokenizer.encode('You will', { bos: true })), 8);
    assert(same(c.replies[0], node), `page ${c.replies[0]} vs Node ${node}`);
    assert(problems.length === 0, problems.join('\n'));
    return `"${c.text}"`;
  } finally {
    await context.close();
  }
});

test('chat: a file that is not a GGUF, and a GGUF that cannot run here, are said in words; the model open stays', async () => {
  const files = await ggufFixtures();
  const { page, context, problems } = await openPage(`${iso.url}?steps=6&greedy=1`);
  try {
    await waitChat(page, 'return c.model !== null');
    let c = await openThroughInput(page, files.text);
    let shown = await text(page, '#error');
    assert(c.load.phase === 'refused' && c.error?.code === 'E_FORMAT' && /GGUF/.test(shown), `not a GGUF: ${JSON.stringify(c.load)}; "${shown}"`);
    assert(/notes\.gguf was not opened: E_FORMAT: .*models\/fortunes is open/.test(await text(page, '#load-note')), `note "${await text(page, '#load-note')}"`);
    assert(c.model.card.source === 'shipped', 'the shipped model stays');
    c = await openThroughInput(page, files.mamba);
    const card = await cardText(page);
    shown = await text(page, '#error');
    assert(c.load.phase === 'refused' && /^no: .*mamba/.test(card.runs) && /cannot run here: .*mamba/.test(shown), `another architecture: runs "${card.runs}"; "${shown}"`);
    assert(c.load.loaded === 0, `weights read: ${c.load.loaded} bytes`);
    // a file the library runs, but with no tokenizer: the page cannot turn text into its tokens
    c = await openThroughInput(page, files.weightsOnly);
    const card2 = await cardText(page);
    assert(c.load.phase === 'refused' && c.load.loaded === 0 && /^no: it has no tokenizer/.test(card2.runs) && /weights-only\.gguf cannot run here: it has no tokenizer/.test(await text(page, '#error')), `weights only: runs "${card2.runs}"`);
    // the page goes on
    await page.type('#prompt', 'You will');
    await page.click('#generate');
    c = await waitChat(page, 'return c.replies.length === 1');
    assert(c.replies[0].length > 0 && c.model.card.source === 'shipped', 'it still writes');
    assert(problems.length === 0, problems.join('\n'));
    return `"${shown.slice(0, 100)}…"`;
  } finally {
    await context.close();
  }
});

test('chat: a file too big for the wasm heap is said in words from its header, before any weight is read', async () => {
  const files = await ggufFixtures();
  const slow = await trickleServer(files.tooBig, { length: false });     // (no size said: only the header can tell)
  const { page, context, problems } = await openPage(`${iso.url}?model=${encodeURIComponent(`${slow}too-big.gguf`)}`);
  try {
    const c = await waitChat(page, 'return c.load && c.load.phase === "refused"');
    const card = await cardText(page);
    const shown = await text(page, '#error');
    assert(c.load.loaded === 0 && c.model.card.source === 'shipped', `load ${JSON.stringify(c.load)}`);
    assert(card.name === 'too big' && /^no: it needs [\d.,]+ ?[MG]i?B of wasm memory with loadGguf.s defaults \(weights [\d.,]+ ?[MG]i?B.*a wasm32 heap holds at most/.test(card.runs), `runs "${card.runs}"`);
    assert(/too-big\.gguf cannot run here: it needs [\d.,]+ ?[MG]i?B of wasm memory/.test(shown), `error "${shown}"`);
    assert(/weights 6\d{3}\.\d MB/.test(card.size) && files.tooBigWeights > 4 * 2 ** 30, `size "${card.size}"`);
    const real = problems.filter((p) => !p.includes(slow));     // (the download is dropped after the header)
    assert(real.length === 0, real.join('\n'));
    return `"${card.runs}"`;
  } finally {
    await context.close();
  }
});

/** The resident bytes of a process and its descendants (Linux /proc), or null where there is no /proc. */
function treeRss(root) {
  try {
    const parent = new Map();
    for (const d of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue;
      try {
        const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
        parent.set(Number(d), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
      } catch { /* gone */ }
    }
    let rss = 0;
    for (const pid of parent.keys()) {
      let p = pid;
      while (p > 1 && p !== root) p = parent.get(p) ?? 0;
      if (p !== root) continue;
      try { rss += 1024 * Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0); } catch { /* gone */ }
    }
    return rss;
  } catch { return null; }
}

/**
 * Opens the file in a fresh page (by the file input, or by URL) while sampling the browser's resident
 * memory every 50 ms: { grew (peak less the page's before the load), loadS, model, types }, then a reply.
 */
async function openBig(file, how) {
  const pid = browser.process()?.pid;
  const { page, context, problems } = await openPage(`${iso.url}?steps=4&greedy=1&dtype=int8&threads=2`);
  try {
    await waitChat(page, 'return c.model !== null');
    await new Promise((r) => setTimeout(r, 500));
    const base = treeRss(pid);
    let peak = base;
    const sampler = setInterval(() => { const r = treeRss(pid); if (r !== null && r > peak) peak = r; }, 50);
    const t0 = Date.now();
    let c;
    try {
      if (how === 'file') await (await page.$('#model-file')).uploadFile(file);
      else await page.evaluate((u) => window.__chat.open(u), `/gguf/${path.basename(file)}`);
      c = await waitChat(page, 'return c.models === 2');
    } finally { clearInterval(sampler); }
    const loadS = (Date.now() - t0) / 1000;
    const types = (await cardText(page)).types;
    await page.type('#prompt', 'Hello');
    await page.click('#generate');
    const d = await waitChat(page, 'return c.replies.length === 1');
    assert(problems.length === 0, problems.join('\n'));
    return { grew: base === null ? null : peak - base, loadS, model: c.model, types, reply: d.replies[0], stop: d.stop, decodeTps: d.decodeTps };
  } finally {
    await context.close();
  }
}

if (big) test('chat (--big): a TinyLlama-1.1B-shaped Q4_0 GGUF (random weights) through the file input and by URL: peak memory at most 1.15x the file, and it decodes', async () => {
  const { writeRandomGguf } = await import(path.join(REPO, 'scripts/random-gguf.mjs'));
  const file = path.join(ggufDir, 'tinyllama-q4_0.gguf');
  const { bytes } = writeRandomGguf(file, { shape: 'tinyllama-1.1b', type: 'Q4_0' });
  try {
    const notes = [];
    for (const how of ['file', 'url']) {
      const r = await openBig(file, how);
      const { config } = r.model;
      assert(config.dim === 2048 && config.nLayers === 22 && config.nKvHeads === 4 && config.vocabSize === 32000 && /Q4_0 × 15\d/.test(r.types), `${how}: model ${JSON.stringify(config)}, ${r.types}`);
      assert(r.reply.length === 4 || r.stop === 'stop', `${how}: reply ${r.reply}`);
      const note = `${how}: ${(bytes / 2 ** 20).toFixed(0)} MiB (${r.types}) in ${r.loadS.toFixed(1)} s (${(bytes / 1e6 / r.loadS).toFixed(0)} MB/s), wasm heap ${(r.model.heapBytes / 2 ** 20).toFixed(0)} MiB` +
        (r.grew === null ? '' : `, resident memory +${(r.grew / 2 ** 20).toFixed(0)} MiB at the peak (${(r.grew / bytes).toFixed(2)}x)`) + `, decode ${r.decodeTps?.toFixed(1) ?? '–'} tokens/s`;
      notes.push(note);
      // the issue's target: the weights streamed into wasm memory, no JS copy: the peak at most 1.15x the file.
      // (Firefox by URL from this localhost server: its parent process holds the download it gets faster than
      // the worker reads it, ~0.6-1.2x the file more: measured, said, not asserted)
      if (!(how === 'url' && engine === 'firefox')) assert(r.grew === null || r.grew <= 1.15 * bytes, note);
    }
    return notes.join('; ');
  } finally {
    fs.rmSync(file, { force: true });
  }
});

test('chat: a URL on another origin whose server does not allow it is said in words (CORS / CORP)', async () => {
  const files = await ggufFixtures();
  const other = await trickleServer(files.q8, { cors: false });
  const { page, context, problems } = await openPage(`${iso.url}?model=${encodeURIComponent(`${other}fortunes-q8_0.gguf`)}`);
  try {
    const c = await waitChat(page, 'return c.load && c.load.phase === "refused"');
    const shown = await text(page, '#error');
    assert(/could not fetch it .*Access-Control-Allow-Origin and, for this cross-origin isolated page, Cross-Origin-Resource-Policy: cross-origin/.test(shown) && c.model.card.source === 'shipped', `error "${shown}"`);
    // (the browser reports the refused request itself: that is the case under test)
    const real = problems.filter((p) => !p.includes(other) && !/CORS|Cross-Origin|cross-origin|blocked/i.test(p));
    assert(real.length === 0, real.join('\n'));
    return `"${shown.slice(0, 120)}…"`;
  } finally {
    await context.close();
  }
});

test('chat: a kept chat remembers its model: restoring it onto another is refused in words; onto its own file, no prefill', async () => {
  const files = await ggufFixtures();
  const { page, context, problems } = await openPage(`${iso.url}?steps=8&seed=2&build=simd-threads`);
  try {
    await waitChat(page, 'return c.model !== null');
    let c = await openThroughInput(page, files.q8);
    await page.type('#prompt', 'You will');
    await page.click('#generate');
    c = await waitChat(page, 'return c.replies.length === 1');
    await page.click('#keep');
    c = await waitChat(page, 'return c.kept !== null && c.chats.length >= 1');
    const kept = c.kept;
    assert(kept.model.fingerprint === c.model.fingerprint && kept.model.name === 'fortunes q8_0', `kept ${JSON.stringify(kept.model)}`);
    assert((await text(page, `#kept li[data-id="${kept.id}"]`)).includes('fortunes q8_0'), 'the list names the model');
    // the shipped model: the restore is refused, before any state is read
    await page.click('#model-shipped');
    await waitChat(page, 'return c.model.card.source === "shipped"');
    await page.click(`#kept li[data-id="${kept.id}"] button.restore`);
    await page.waitForFunction(() => window.__chat.status === 'ready' && window.__chat.error !== null, { timeout: RUN_TIMEOUT, polling: 50 });
    const shown = await text(page, '#error');
    assert(new RegExp(`kept with fortunes q8_0 \\(fingerprint ${kept.model.fingerprint}\\); the model open is models/fortunes.*Open fortunes q8_0 to restore it`).test(shown), `error "${shown}"`);
    c = await page.evaluate(() => JSON.parse(JSON.stringify(window.__chat)));
    assert(c.restored === null && c.length === 0, 'nothing restored');
    // its own file again: restored with no prefill
    c = await openThroughInput(page, files.q8);
    await page.click(`#kept li[data-id="${kept.id}"] button.restore`);
    c = await waitChat(page, 'return c.restored !== null');
    assert(c.restored.prefilled === 0 && c.length === kept.length, `restored ${c.length} tokens, ${c.restored.prefilled} run`);
    await page.click(`#kept li[data-id="${kept.id}"] button.delete`);
    await waitChat(page, 'return !c.chats.some((x) => x.id === a)', kept.id);
    assert(problems.length === 0, problems.join('\n'));
    return `refused: "${shown.slice(0, 120)}…"; restored onto its file: ${c.length} tokens, no prefill`;
  } finally {
    await context.close();
  }
});

try {
  const need = ['js/index.js', 'dist/sdpa-simd-threads.mjs', 'dist/sdpa-simd.mjs', 'dist/sdpa-relaxed-threads.mjs', 'dist/sdpa-relaxed.mjs'].filter((f) => !fs.existsSync(path.join(pkgDir, f)));
  if (need.length && pkgDir === REPO) throw new Error(`package not built: ${need.join(', ')} missing (run \`npm run build\`)`);
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  iso = await serve({ port: 0, isolation: true, pkgDir, mounts: [['/gguf/', ggufDir]] });
  servers.push({ close: () => fs.rmSync(ggufDir, { recursive: true, force: true }) });
  noIso = await serve({ port: 0, isolation: false, pkgDir });
  servers.push(iso, noIso);
  ({ browser, profile: userDataDir } = await launchEngine(puppeteer, engine));
  console.log(`browser tests: ${await browser.version()}; servers ${iso.url} (COOP/COEP) and ${noIso.url} (none)`);
} catch (e) {
  console.error(`browser tests: setup failed: ${e.message}`);
  failed++;
  await cleanup();
  finish(1);
}

for (const t of tests) {
  if (only && !t.name.includes(only)) continue;
  const t0 = Date.now();
  try {
    const note = await t.fn();
    passed++;
    console.log(`ok   ${t.name} (${Date.now() - t0} ms)${note ? `: ${note}` : ''}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${t.name} (${Date.now() - t0} ms)\n     ${withCauses(e).split('\n').join('\n     ')}`);
  }
}
await cleanup();
finish(failed ? 1 : 0);
