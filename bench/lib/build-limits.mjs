// Builds bench/lib/limits.c into build/bench/limits.{mjs,wasm,worker.js} with emcc
// (-O3 -msimd128 -pthread, ES module glue), and into build/bench/limits-relaxed.*
// with relaxed SIMD (the FMA peak): clang 16 through EM_LLVM_ROOT, linked at -O0,
// optimised by npm's wasm-opt (docs/BUILDING.md section 4, as CMakeLists.txt does for
// dist/sdpa-relaxed*); and bench/lib/probes.c (the microkernel probes of bench/roofline.mjs)
// into build/bench/probes.{mjs,wasm} (-O3 -msimd128, no threads). Run directly (`node bench/lib/build-limits.mjs`) or let
// bench/run.mjs call ensureLimitsBuilt() when the files are missing or stale.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { buildEnv } from '../../scripts/build.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
export const outDir = path.join(root, 'build', 'bench');
export const limitsMjs = path.join(outDir, 'limits.mjs');
export const limitsWasm = path.join(outDir, 'limits.wasm');
export const relaxedLimitsMjs = path.join(outDir, 'limits-relaxed.mjs');
export const relaxedLimitsWasm = path.join(outDir, 'limits-relaxed.wasm');
export const probesMjs = path.join(outDir, 'probes.mjs');
export const probesWasm = path.join(outDir, 'probes.wasm');
const LLVM16_BIN = '/usr/lib/llvm-16/bin';

// The package's own shim (docs/BUILDING.md section 3): lets the ES6 glue use require/__dirname in Node.
const shim = path.join(root, 'scripts', 'node-esm-shim.js');

const sources = [path.join(here, 'limits.c'), path.join(here, 'probes.c'), path.join(here, 'probe_loops.h'), fileURLToPath(import.meta.url), shim];

function upToDate() {
  const outs = [limitsMjs, limitsWasm, path.join(outDir, 'limits.worker.js'), path.join(outDir, 'package.json'),
    relaxedLimitsMjs, relaxedLimitsWasm, path.join(outDir, 'limits-relaxed.worker.js'), probesMjs, probesWasm];
  if (!outs.every((f) => fs.existsSync(f))) return false;
  const newestSrc = Math.max(...sources.map((f) => fs.statSync(f).mtimeMs));
  return outs.every((f) => fs.statSync(f).mtimeMs >= newestSrc);
}

export function ensureLimitsBuilt({ force = false, log = (m) => process.stderr.write(m + '\n') } = {}) {
  if (!force && upToDate()) return;
  fs.mkdirSync(outDir, { recursive: true });
  // the pthread worker file is CommonJS (docs/BUILDING.md section 3)
  fs.writeFileSync(path.join(outDir, 'package.json'), '{"type":"commonjs"}\n');
  const link = [
    '-sMODULARIZE', '-sEXPORT_ES6', '-sEXPORT_NAME=createLimitsModule', '-sENVIRONMENT=web,worker,node',
    `-sPTHREAD_POOL_SIZE=Module["limitsWorkers"]||0`, '-sPTHREAD_POOL_SIZE_STRICT=2',
    '-sALLOW_MEMORY_GROWTH', '-sINITIAL_MEMORY=64MB', '-sMAXIMUM_MEMORY=2GB',
    '--extern-pre-js', shim,
  ];
  const env = buildEnv();  // NODE_PATH for emcc, and Debian's wasm-opt rather than npm's (scripts/build.mjs)
  const sh = (cmd, args, what, extraEnv = {}) => {
    log(`bench: ${what} (${cmd} ${args.join(' ')})`);
    const r = spawnSync(cmd, args, { env: { ...env, ...extraEnv }, encoding: 'utf8' });
    if (r.error || r.status !== 0) throw new Error(`${what} failed (${r.error ? r.error.message : 'exit ' + r.status}):\n${r.stderr}`);
  };
  sh('emcc', [path.join(here, 'limits.c'), '-O3', '-msimd128', '-pthread', ...link, '-o', limitsMjs], 'building limits');
  // the microkernel probes: one thread, no pthreads (their 128 MiB buffer needs memory growth)
  sh('emcc', [path.join(here, 'probes.c'), '-O3', '-msimd128', '-sMODULARIZE', '-sEXPORT_ES6', '-sEXPORT_NAME=createProbesModule',
    '-sENVIRONMENT=web,worker,node', '-sALLOW_MEMORY_GROWTH', '-sINITIAL_MEMORY=16MB', '-sMAXIMUM_MEMORY=2GB',
    '--extern-pre-js', shim, '-o', probesMjs], 'building probes');

  // relaxed SIMD: the FMA peak
  if (!fs.existsSync(path.join(LLVM16_BIN, 'clang'))) throw new Error(`the FMA limits need clang 16 (${LLVM16_BIN}/clang): apt-get install -y clang-16 lld-16`);
  const wasmOpt = path.join(root, 'node_modules', '.bin', 'wasm-opt');
  if (!fs.existsSync(wasmOpt)) throw new Error(`the FMA limits need npm's binaryen (${wasmOpt}): run npm ci`);
  const llvmRoot = path.join(outDir, 'llvm16');   // emcc calls clang-14 etc. by name (docs/BUILDING.md section 4)
  fs.mkdirSync(llvmRoot, { recursive: true });
  for (const f of fs.readdirSync(LLVM16_BIN)) {
    for (const name of [f, `${f}-14`]) {
      const to = path.join(llvmRoot, name);
      if (!fs.existsSync(to)) fs.symlinkSync(path.join(LLVM16_BIN, f), to);
    }
  }
  const relaxedEnv = { EM_LLVM_ROOT: llvmRoot, PATH: `${path.dirname(wasmOpt)}:${process.env.PATH}` };
  const obj = path.join(outDir, 'limits-relaxed.o');
  sh('emcc', [path.join(here, 'limits.c'), '-c', '-O3', '-msimd128', '-mrelaxed-simd', '-pthread', '-o', obj], 'compiling limits with relaxed SIMD', relaxedEnv);
  sh('emcc', [obj, '-O0', '-sWASM_BIGINT', '-sASSERTIONS=0', '-pthread', ...link, '-o', relaxedLimitsMjs], 'linking limits-relaxed', relaxedEnv);
  sh(wasmOpt, ['-O3', '--enable-simd', '--enable-relaxed-simd', '--enable-sign-ext', '--enable-mutable-globals', '--enable-threads', '--enable-bulk-memory',
    relaxedLimitsWasm, '-o', relaxedLimitsWasm], 'optimising limits-relaxed');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  ensureLimitsBuilt({ force: process.argv.includes('--force') });
  console.log(`built ${path.relative(root, limitsMjs)}`);
}
