#!/usr/bin/env node
// Regenerates docs/chat.png, the README's picture of the chat page: the page
// served as `npm start` serves it (COOP/COEP), opened in headless Chromium
// (tests/browser/engines.mjs), two greedy replies with an int8 KV cache, then a
// screenshot of the page. A tool for the docs, not a test.
// usage: node scripts/chat-screenshot.mjs [--out=docs/chat.png]
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { serve } from './serve.mjs';
import { launchEngine } from '../tests/browser/engines.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = (process.argv.find((a) => a.startsWith('--out=')) ?? '--out=docs/chat.png').slice(6);

const server = await serve({ port: 0, isolation: true });
const { browser } = await launchEngine(puppeteer, 'chromium');
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 1000, deviceScaleFactor: 1 });
  await page.goto(`${server.url}?prompt=You%20will&steps=48&seed=1&greedy=1&dtype=int8&autostart=1`);
  await page.waitForFunction(() => window.__chat && window.__chat.replies.length >= 1 && window.__chat.status === 'ready', { timeout: 120_000 });
  // a second turn, as a user would type it
  await page.evaluate(() => {
    const input = document.querySelector('#prompt');
    if (input) input.value = 'A computer';
  });
  await page.click('#generate').catch(() => {});
  await page.waitForFunction(() => window.__chat.replies.length >= 2 && window.__chat.status === 'ready', { timeout: 120_000 }).catch(() => {});
  await page.screenshot({ path: path.resolve(ROOT, out), fullPage: true });
  console.log(`wrote ${out}`);
} finally {
  await browser.close();
  server.close();
  server.closeAllConnections?.();
}
