// Builds bench/limits.c into build/bench/limits.{mjs,wasm,worker.js} with emcc
// (-O3 -msimd128 -pthread, ES module glue). Run directly (`node bench/build-limits.mjs`)
// or let bench/run.mjs call ensureLimitsBuilt() when the files are missing or stale.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
export const outDir = path.join(root, 'build', 'bench');
export const limitsMjs = path.join(outDir, 'limits.mjs');
export const limitsWasm = path.join(outDir, 'limits.wasm');

// TOOLCHAIN.md 2.1: lets the ES6 glue use require/__dirname in Node (inert in browsers).
const SHIM = `const __em_isNode = typeof process == 'object' && typeof process.versions == 'object' && typeof process.versions.node == 'string';
const require = __em_isNode ? process.getBuiltinModule('module').createRequire(import.meta.url) : undefined;
const __filename = __em_isNode ? process.getBuiltinModule('url').fileURLToPath(import.meta.url) : undefined;
const __dirname = __em_isNode ? process.getBuiltinModule('path').dirname(__filename) : undefined;
`;

const sources = [path.join(here, 'limits.c'), fileURLToPath(import.meta.url)];

function upToDate() {
  const outs = [limitsMjs, limitsWasm, path.join(outDir, 'limits.worker.js'), path.join(outDir, 'package.json')];
  if (!outs.every((f) => fs.existsSync(f))) return false;
  const newestSrc = Math.max(...sources.map((f) => fs.statSync(f).mtimeMs));
  return outs.every((f) => fs.statSync(f).mtimeMs >= newestSrc);
}

export function ensureLimitsBuilt({ force = false, log = (m) => process.stderr.write(m + '\n') } = {}) {
  if (!force && upToDate()) return;
  fs.mkdirSync(outDir, { recursive: true });
  const shim = path.join(outDir, 'node-esm-shim.js');
  fs.writeFileSync(shim, SHIM);
  // the pthread worker file is CommonJS (TOOLCHAIN.md 2.3)
  fs.writeFileSync(path.join(outDir, 'package.json'), '{"type":"commonjs"}\n');
  const args = [
    path.join(here, 'limits.c'),
    '-O3', '-msimd128', '-pthread',
    '-sMODULARIZE', '-sEXPORT_ES6', '-sEXPORT_NAME=createLimitsModule', '-sENVIRONMENT=web,worker,node',
    `-sPTHREAD_POOL_SIZE=Module["limitsWorkers"]||0`, '-sPTHREAD_POOL_SIZE_STRICT=2',
    '-sALLOW_MEMORY_GROWTH', '-sINITIAL_MEMORY=64MB', '-sMAXIMUM_MEMORY=2GB',
    '--extern-pre-js', shim,
    '-o', limitsMjs,
  ];
  log(`bench: building limits (emcc ${args.slice(1).join(' ')})`);
  const env = { ...process.env, NODE_PATH: [process.env.NODE_PATH, '/usr/share/nodejs'].filter(Boolean).join(':') };
  // without node_modules/.bin (npm run puts it first): npm's binaryen wasm-opt breaks emcc 3.1.6's links (scripts/build.mjs buildEnv)
  if (env.PATH) env.PATH = env.PATH.split(path.delimiter).filter((d) => !/node_modules[\\/]\.bin[\\/]?$/.test(d)).join(path.delimiter);
  const r = spawnSync('emcc', args, { env, encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    throw new Error(`emcc failed for bench/limits.c (${r.error ? r.error.message : 'exit ' + r.status}):\n${r.stderr}`);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  ensureLimitsBuilt({ force: process.argv.includes('--force') });
  console.log(`built ${path.relative(root, limitsMjs)}`);
}
