#!/usr/bin/env node
// `npm start`: builds the wasm package (npm run build:wasm, else build) when dist/ is incomplete, then serves the
// demo page (web/) with COOP/COEP on 127.0.0.1 and prints its URL.
// Arguments are passed to scripts/serve.mjs (--port N, --no-isolation, ...).

import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const NEEDED = [
  'dist/sdpa-simd-threads.mjs',
  'dist/sdpa-simd-threads.wasm',
  'dist/sdpa-simd-threads.worker.js',
  'dist/sdpa-simd.mjs',
  'dist/sdpa-simd.wasm',
  'js/index.js',
];

const missing = NEEDED.filter((f) => !fs.existsSync(path.join(REPO, f)));
// With emscripten at hand, always let the build bring dist/ up to date (a
// no-op in about a second when nothing changed), so a C edit is never served stale.
const haveEmcc = spawnSync('sh', ['-c', 'command -v emcc'], { stdio: 'ignore' }).status === 0;
if (missing.some((f) => f.startsWith('dist/')) || haveEmcc) {
  // Only the wasm is needed to serve the page: prefer the wasm-only build script when there is one.
  const scripts = JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8')).scripts || {};
  const script = scripts['build:wasm'] ? 'build:wasm' : 'build';
  console.log(missing.length ? `start: ${missing.join(', ')} missing; running \`npm run ${script}\` first`
    : `start: bringing dist/ up to date (\`npm run ${script}\`)`);
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const r = spawnSync(npm, ['run', script], { cwd: REPO, stdio: 'inherit' });
  if (r.status !== 0) {
    console.error(`start: \`npm run ${script}\` failed (exit ${r.status ?? r.signal}); see the README for the toolchain (emscripten).`);
    process.exit(1);
  }
}
const still = NEEDED.filter((f) => !fs.existsSync(path.join(REPO, f)));
if (still.length) {
  console.error(`start: still missing after the build: ${still.join(', ')}`);
  process.exit(1);
}

const { main } = await import('./serve.mjs');
await main(process.argv.slice(2));
