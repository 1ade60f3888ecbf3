#!/usr/bin/env node
// usage: node scripts/run-uvu.mjs [--node-flag=F ...] <dir> [pattern] [uvu options]
// (--node-flag: a flag for the Node that runs uvu, e.g. --experimental-wasm-relaxed-simd)
// Runs uvu without colours, passes its output through, and adds the plain line
//   uvu: N passed, N failed, N skipped
// (CI does not read uvu's Total/Passed/Skipped block, and uvu prints no
// "Failed:" line). A run that dies before uvu's summary counts as 1 failed.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const bin = path.join(ROOT, 'node_modules', 'uvu', 'bin.js');
const NODE_FLAG = '--node-flag=';
const nodeFlags = process.argv.slice(2).filter((a) => a.startsWith(NODE_FLAG)).map((a) => a.slice(NODE_FLAG.length));
const args = process.argv.slice(2).filter((a) => !a.startsWith(NODE_FLAG));
const child = spawn(process.execPath, [...nodeFlags, bin, ...args, '--no-color'], {
  cwd: ROOT,
  env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
  stdio: ['ignore', 'pipe', 'pipe'],
});
let out = '';
let hung = false, hangTimer = null;
const HANG_MS = Number(process.env.UVU_EXIT_GRACE_MS) || 15000;
child.stdout.on('data', (c) => {
  out += c;
  process.stdout.write(c);
  // uvu prints "Duration:" last; if Node then stays alive, something (e.g. pthread
  // workers that were not terminated/unref'd) keeps the event loop busy.
  if (!hangTimer && /^\s*Duration:/m.test(out)) {
    hangTimer = setTimeout(() => { hung = true; child.kill('SIGKILL'); }, HANG_MS);
    hangTimer.unref();
  }
});
child.stderr.on('data', (c) => process.stderr.write(c));
const forward = (sig) => () => child.kill(sig);
process.on('SIGTERM', forward('SIGTERM'));
process.on('SIGINT', forward('SIGINT'));
child.on('error', (err) => { console.error(`run-uvu: ${err.message}`); });
child.on('close', (code, signal) => {
  if (hangTimer) clearTimeout(hangTimer);
  if (hung) {
    console.log(`run-uvu: uvu printed its summary but did not exit within ${HANG_MS / 1000} s ` +
      '(open handles: undisposed wasm pthread workers?); killed, counted as 1 failed');
  }
  // eslint-disable-next-line no-control-regex
  const text = out.replace(/\x1b\[[0-9;]*m/g, '');
  const num = (k) => Number((text.match(new RegExp(`^\\s*${k}:\\s+(\\d+)`, 'm')) || [])[1] ?? NaN);
  const total = num('Total'), passed = num('Passed'), skipped = num('Skipped') || 0;
  const status = code ?? (signal ? 1 : 0);
  if (Number.isNaN(total) || Number.isNaN(passed)) {
    console.log(`uvu: 0 passed, 1 failed${signal ? ` (killed by ${signal})` : ''}`);
    process.exit(status || 1);
  }
  let failed = total - passed + (hung ? 1 : 0);
  if (status !== 0 && failed === 0) failed = 1;   // e.g. a suite file that threw on import
  console.log(`uvu: ${passed} passed, ${failed} failed, ${skipped} skipped`);
  process.exit(failed ? (status || 1) : status);
});
