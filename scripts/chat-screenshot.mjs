#!/usr/bin/env node
// Regenerates docs/chat.png, the README's picture of the chat page: the page
// served as `npm start` serves it (COOP/COEP), opened in headless Chromium
// (tests/browser/engines.mjs), a user's GGUF file opened through the file input
// (the package's model converted to F16 by scripts/llama2c-to-gguf.mjs, written
// to a temporary directory), two sampled replies (seed 3) with an int8 KV cache, then a
// screenshot of the page. A tool for the docs, not a test.
// usage: node scripts/chat-screenshot.mjs [--out=docs/chat.png]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { serve } from './serve.mjs';
import { llama2cToGguf } from './llama2c-to-gguf.mjs';
import { launchEngine } from '../tests/browser/engines.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = (process.argv.find((a) => a.startsWith('--out=')) ?? '--out=docs/chat.png').slice(6);

// (plain Uint8Arrays: the converter reads the checkpoint's floats through .slice(...).buffer)
const read = (f) => new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes', f)));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-chat-shot-'));
const file = path.join(dir, 'fortunes-f16.gguf');
fs.writeFileSync(file, await llama2cToGguf(read('model.bin'), read('tokenizer.bin'), { type: 'F16', name: 'fortunes (F16)' }));

const server = await serve({ port: 0, isolation: true });
const { browser, profile } = await launchEngine(puppeteer, 'chromium');
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 1000, deviceScaleFactor: 1 });
  await page.goto(`${server.url}?steps=40&seed=3&dtype=int8`);
  await page.waitForFunction(() => window.__chat && window.__chat.status === 'ready', { timeout: 120_000 });
  await (await page.$('#model-file')).uploadFile(file);
  await page.waitForFunction(() => window.__chat.models === 2 && window.__chat.status === 'ready', { timeout: 120_000 });
  // two turns, as a user would type them
  for (const [i, prompt] of ['You will', ' Then'].entries()) {
    await page.type('#prompt', prompt);
    await page.click('#generate');
    await page.waitForFunction((n) => window.__chat.replies.length >= n && window.__chat.status === 'ready', { timeout: 120_000 }, i + 1);
  }
  await page.screenshot({ path: path.resolve(ROOT, out), fullPage: true });
  console.log(`wrote ${out}`);
} finally {
  await browser.close();
  server.close();
  server.closeAllConnections?.();
  fs.rmSync(dir, { recursive: true, force: true });
  fs.rmSync(profile, { recursive: true, force: true });
}
