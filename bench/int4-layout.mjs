#!/usr/bin/env node
// int4's layout (issue 41, item 2): one float16 scale and offset per 64 elements of a row (4.5 bits
// a value at head size 64) against one per 32 (5.0 bits), both with and without the float16 newest
// page, on the shipped model's held-out text (tests/data/llama/heldout.txt, never trained on): top-1
// agreement with float32, max and mean |logit - float32 logit|, perplexity, bytes per token (all
// layers) amortized at 512 and 4,096 tokens, and bits per stored value at 4,096.
//
// No simulation: both layouts are kv_format.c's codec and flash_int4.h's kernels, built with
// SDPA_I4_GROUP = 64 (this tree's dist/, whatever it was built with: the script reads which) and
// with SDPA_I4_GROUP = 32 (built here into build/wasm-i4g32, its modules in build/wasm-i4g32/dist;
// --dist32=DIR takes modules built elsewhere). The float32 reference runs on this tree's build.
// usage: node bench/int4-layout.mjs [--windows=all|N] [--kv=int4+page,int8/int4+page,...] [--dist32=DIR] [--json]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa } from '../js/index.js';
import { loadLlama } from '../js/llama/index.js';
import { buildEnv } from '../scripts/build.mjs';
import { kvOptions, windowsOf, bytesPerToken, measure, shippedModel } from './lib/kv-quality.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const arg = (k, d) => { const a = argv.find((x) => x.startsWith(`--${k}=`)); return a ? a.slice(k.length + 3) : d; };
const WINDOWS = arg('windows', 'all') === 'all' ? Infinity : Number(arg('windows'));
const KV = arg('kv', 'int4+page,int8/int4+page,int4-page').split(',');
const note = (s) => process.stderr.write(s + '\n');

/** This build's int4 elements per scale and offset, from an int4 page's bytes at head size 128: 64 rows
 * of K and V nibbles (8,192 bytes), 2 float16 (scale, offset) x 64 rows x G groups a block (512 G), the
 * page's 64-byte header. (readRaw's parts are js/abi.js's, not the build's.) */
function groupOf(sdpa) {
  const z = sdpa.kvCacheSize({ maxSeqLen: 64, numKvHeads: 1, headDim: 128, dtype: 'int4', float16NewestPage: false });
  const G = (z.pageBytes - 64 - 8192) / 512;
  if (![2, 4].includes(G)) throw new Error(`an int4 page of head size 128 takes ${z.pageBytes} bytes: neither 2 nor 4 groups`);
  return 128 / G;
}

function build32() {
  const dir = path.join(ROOT, 'build/wasm-i4g32');
  const dist = path.join(dir, 'dist');
  const env = buildEnv();
  if (!fs.existsSync(path.join(dir, 'CMakeCache.txt'))) {
    execFileSync('emcmake', ['cmake', '-S', ROOT, '-B', dir, '-G', 'Ninja', '-DCMAKE_BUILD_TYPE=Release',
      '-DSDPA_BUILD_TESTS=OFF', '-DCMAKE_C_FLAGS=-DSDPA_I4_GROUP=32', `-DSDPA_DIST_DIR=${dist}`], { env, stdio: ['ignore', 'ignore', 'inherit'] });
  }
  execFileSync('cmake', ['--build', dir, '--target', 'dist'], { env, stdio: ['ignore', 'ignore', 'inherit'] });
  return dist;
}

const dist32 = arg('dist32', null) ?? build32();
const { checkpoint, held } = shippedModel();
const windows = windowsOf(held, 512, WINDOWS);

const builds = [
  { sdpa: await createSdpa({ threads: 2, build: 'simd-threads' }) },
  { sdpa: await createSdpa({ threads: 2, build: 'simd-threads', wasmPaths: dist32.endsWith('/') ? dist32 : dist32 + '/' }) },
];
for (const b of builds) b.group = groupOf(b.sdpa);
if (builds[0].group === builds[1].group) throw new Error(`both builds store int4 in groups of ${builds[0].group}`);
note(`int4-layout: groups of ${builds.map((b) => b.group).join(' and ')}; ${windows.length} windows of 512 tokens`);

const rows = [];
let ref = null;
const t0 = Date.now();
for (const [spec, b] of [['float32', builds[0]], ...KV.flatMap((s) => builds.map((b) => [s, b]))]) {
  const kv = kvOptions(spec);
  const model = loadLlama(b.sdpa, checkpoint, kv);
  const c = model.config, D = c.dim / c.nHeads;
  const geometry = { numKvHeads: c.nKvHeads, headDim: D, ...kv };
  const r = measure(model, windows, c.vocabSize, ref);
  if (!ref) ref = r.logits;
  const b4096 = bytesPerToken(b.sdpa, geometry, c.nLayers, 4096);
  rows.push({ kv: spec, group: spec === 'float32' ? null : b.group, float16NewestPage: model.float16NewestPage,
    bytes512: bytesPerToken(b.sdpa, geometry, c.nLayers, 512), bytes4096: b4096,
    bitsPerValue4096: b4096 * 8 / (2 * c.nLayers * c.nKvHeads * D), ...r, logits: undefined });
  model.dispose();
  note(`int4-layout: ${spec} (groups of ${b.group}): ${(100 * r.agree).toFixed(2)}%, max ${r.maxErr.toFixed(3)}, ${((Date.now() - t0) / 1000).toFixed(0)} s`);
}
for (const b of builds) b.sdpa.dispose();

if (argv.includes('--json')) {
  console.log(JSON.stringify({ date: new Date().toISOString(), windows: windows.length, rows }, null, 1));
} else {
  console.log(`held-out text: ${windows.length} windows of 512 tokens = ${rows[0].predictions} predictions; bits per value: K and V bytes per token at 4,096 ÷ (2 · layers · KV heads · head size), the float16 page and the page table included`);
  console.log('| K / V | int4 elements per scale + offset | float16 newest page | bytes per token, all layers (512 / 4,096) | bits per value at 4,096 | perplexity | top-1 agreement with float32 | max / mean \\|logit − float32\\| |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(`| ${r.kv.replace(/[+-]page$/, '')} | ${r.group ?? '-'} | ${r.kv === 'float32' ? '-' : r.float16NewestPage ? 'yes' : 'no'} | ${r.bytes512.toFixed(0)} / ${r.bytes4096.toFixed(0)} | ${r.bitsPerValue4096.toFixed(2)} | ${r.ppl.toFixed(3)} | ${(100 * r.agree).toFixed(2)}% | ${r.maxErr.toFixed(3)} / ${r.meanErr.toExponential(2)} |`);
  }
}
