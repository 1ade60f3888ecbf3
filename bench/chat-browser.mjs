#!/usr/bin/env node
// The chat page (web/index.html) in headless Chromium and Firefox ESR: decode tokens/s of
// the shipped model for each KV cache dtype (the model's own steps; the float32 model the
// page runs beside a compact cache for the top-1 agreement is not counted), the engines
// measured in turn within each round, and the time to restore a kept chat against a re-run
// (prefill) of the same conversation.
// usage: node bench/chat-browser.mjs [--rounds=3] [--steps=200] [--browser=chromium,firefox]
//   (needs the engines (tests/browser/engines.mjs) and dist/ built; about 2 minutes per engine)
import fs from 'node:fs';
import os from 'node:os';
import puppeteer from 'puppeteer-core';
import { serve } from '../scripts/serve.mjs';
import { ENGINES, launchEngine } from '../tests/browser/engines.mjs';

const arg = (k, d) => Number((process.argv.find((a) => a.startsWith(`--${k}=`)) ?? `=${d}`).split('=')[1]);
const ROUNDS = arg('rounds', 3), STEPS = arg('steps', 200);
const NAMES = (process.argv.find((a) => a.startsWith('--browser='))?.slice(10) || 'chromium,firefox').split(',');
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const srv = await serve({ port: 0, isolation: true, quiet: true });
const engines = [];
for (const name of NAMES) engines.push({ name, ...(await launchEngine(puppeteer, name, { protocolTimeout: 240_000 })) });
const ready = (page, pred) => page.waitForFunction(`window.__chat && window.__chat.status === 'ready' && (${pred})`, { timeout: 120000, polling: 50 });
const state = (page) => page.evaluate(() => JSON.parse(JSON.stringify(window.__chat)));

try {
  const versions = await Promise.all(engines.map((e) => e.browser.version()));
  console.log(`chat page, ${versions.join(' and ')}, ${os.cpus()[0]?.model?.trim()} (${os.cpus().length} vCPU), ${new Date().toISOString()}`);
  console.log(`\nDecode tokens/s: the median of ${ROUNDS} rounds, each the second of two greedy replies of ${STEPS} tokens (context ${STEPS} to ${2 * STEPS}); the engines in turn in each round.\n`);
  console.log(`| KV dtype | ${engines.map((e) => ENGINES[e.name].label).join(' | ')} | build |`);
  console.log(`|---|${engines.map(() => '---|').join('')}---|`);
  for (const dtype of ['float32', 'float16', 'int8', 'int4', 'int8/int4']) {
    const tps = engines.map(() => []);
    const builds = new Set();
    for (let r = 0; r < ROUNDS; r++) for (const [i, { browser }] of engines.entries()) {
      const page = await browser.newPage();
      // greedy, so each round times the same tokens: a first reply warms the JIT up, the second is timed
      await page.goto(`${srv.url}?prompt=You%20will&steps=${STEPS}&greedy=1&dtype=${encodeURIComponent(dtype)}&autostart=1`);
      await ready(page, 'window.__chat.replies.length === 1');
      await page.type('#prompt', ' Then');
      await page.click('#generate');
      await ready(page, 'window.__chat.replies.length === 2');
      const c = await state(page);
      tps[i].push(c.decodeTps);
      builds.add(`${c.build}, ${c.threads} threads`);
      await page.close();
    }
    console.log(`| ${dtype} | ${tps.map((t) => median(t).toFixed(0)).join(' | ')} | ${[...builds].join('; ')} |`);
  }
  for (const { name, browser } of engines) await restoreRow(ENGINES[name].label, browser);
} finally {
  for (const e of engines) {
    await e.browser.close();
    fs.rmSync(e.profile, { recursive: true, force: true });
  }
  srv.close();
}

// restore against a re-run: a conversation of about 400 tokens, kept, the page reloaded
async function restoreRow(label, browser) {
  const page = await browser.newPage();
  await page.goto(`${srv.url}?prompt=You%20will&steps=400&greedy=1&autostart=1`);
  await ready(page, 'window.__chat.replies.length === 1');
  await page.click('#keep');
  await ready(page, 'window.__chat.kept !== null');
  const kept = (await state(page)).kept;
  const restores = [];
  for (let r = 0; r < ROUNDS; r++) {
    await page.goto(`${srv.url}?steps=8`);
    await ready(page, `window.__chat.chats.some((x) => x.id === '${kept.id}')`);
    await page.click(`#kept li[data-id="${kept.id}"] button.restore`);
    await ready(page, 'window.__chat.restored !== null');
    restores.push((await state(page)).restored);
  }
  // a re-run: switch the dtype to float16 and back (the second switch, float32: one model, all tokens)
  await page.select('#dtype', 'float16');
  await ready(page, 'window.__chat.dtype === "float16"');
  await page.select('#dtype', 'float32');
  await ready(page, 'window.__chat.dtype === "float32" && window.__chat.rerun');
  const rerun = (await state(page)).rerun;
  console.log(`\n${label}: restore of a kept chat of ${kept.length} tokens (float32, ${(kept.bytes / 1024).toFixed(0)} KiB in ${kept.storage}): ` +
    `${median(restores.map((x) => x.ms)).toFixed(1)} ms (median of ${ROUNDS}; ${restores[0].prefilled} tokens run), ` +
    `against ${rerun.ms.toFixed(0)} ms to run the ${rerun.tokens} tokens through the model again.`);
  await page.close();
}
