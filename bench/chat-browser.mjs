#!/usr/bin/env node
// The chat page (web/index.html) in headless Chromium: decode tokens/s of the shipped
// model for each KV cache dtype (the model's own steps; the float32 model the page runs
// beside a compact cache for the top-1 agreement is not counted), and the time to restore
// a kept chat against a re-run (prefill) of the same conversation.
// usage: node bench/chat-browser.mjs [--rounds=3] [--steps=200]  (needs /usr/bin/chromium, dist/ built; about 2 minutes)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';
import { serve } from '../scripts/serve.mjs';

const arg = (k, d) => Number((process.argv.find((a) => a.startsWith(`--${k}=`)) ?? `=${d}`).split('=')[1]);
const ROUNDS = arg('rounds', 3), STEPS = arg('steps', 200);
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const srv = await serve({ port: 0, isolation: true, quiet: true });
const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-bench-chromium-'));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium', headless: true, userDataDir,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-quic'],
});
const ready = (page, pred) => page.waitForFunction(`window.__chat && window.__chat.status === 'ready' && (${pred})`, { timeout: 120000, polling: 50 });
const state = (page) => page.evaluate(() => JSON.parse(JSON.stringify(window.__chat)));

try {
  console.log(`chat page, ${await browser.version()}, ${os.cpus()[0]?.model?.trim()} (${os.cpus().length} vCPU), ${new Date().toISOString()}`);
  console.log(`\n| KV dtype | decode tokens/s (median of ${ROUNDS}; the second of two greedy replies of ${STEPS} tokens, context ${STEPS} to ${2 * STEPS}) | build |`);
  console.log('|---|---|---|');
  for (const dtype of ['float32', 'float16', 'int8', 'int4', 'int8/int4']) {
    const tps = [];
    let build = '';
    for (let r = 0; r < ROUNDS; r++) {
      const page = await browser.newPage();
      // greedy (this model's greedy text never ends early): a first reply warms the JIT up, the second is timed
      await page.goto(`${srv.url}?prompt=You%20will&steps=${STEPS}&greedy=1&dtype=${encodeURIComponent(dtype)}&autostart=1`);
      await ready(page, 'window.__chat.replies.length === 1');
      await page.type('#prompt', ' Then');
      await page.click('#generate');
      await ready(page, 'window.__chat.replies.length === 2');
      const c = await state(page);
      tps.push(c.decodeTps);
      build = `${c.build}, ${c.threads} threads`;
      await page.close();
    }
    console.log(`| ${dtype} | ${median(tps).toFixed(0)} | ${build} |`);
  }
  // restore against a re-run: a conversation of about 400 tokens, kept, the page reloaded
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
  console.log(`\nRestore of a kept chat of ${kept.length} tokens (float32, ${(kept.bytes / 1024).toFixed(0)} KiB in ${kept.storage}): ` +
    `${median(restores.map((x) => x.ms)).toFixed(1)} ms (median of ${ROUNDS}; ${restores[0].prefilled} tokens run), ` +
    `against ${rerun.ms.toFixed(0)} ms to run the ${rerun.tokens} tokens through the model again.`);
  await page.close();
} finally {
  await browser.close();
  srv.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
