#!/usr/bin/env node
// Post-link step for the emcc 3.1.6 glue (run by CMakeLists.txt after each
// wasm module links, after wasm-opt for the relaxed builds; idempotent).
// Usage: node scripts/wasm-patch.mjs <file>...
//
// *.mjs        The glue's fallbacks `new URL("<name>", import.meta.url)` (used
//              only when Module.locateFile is unset; js/loader.js always sets
//              it) become `locateFile("<name>")`, the same URL. Otherwise a
//              bundler that parses the glue (someone importing
//              sdpa-wasm/dist/*.mjs) bundles the pthread worker script as a
//              worker entry and fails on its require("worker_threads").
//              Pool workers start as module workers in browsers: Vite's dev
//              server adds an `import` to every .js file it serves, which a
//              classic worker rejects (the script is valid module code).
// *.worker.js  A pthread worker whose glue import fails (404, CORS, syntax)
//              raises no `error` event on the Worker object in browsers (a
//              rejected dynamic import is an unhandled rejection inside the
//              worker): report it to the main thread as
//              { cmd: "sdpaLoadError", text } so createSdpa rejects with E_LOAD
//              at once instead of waiting for its initTimeout.
// *.wasm       A custom section "sdpa.build" holding the build's name (the file
//              name without "sdpa-" and ".wasm": simd, simd-threads, relaxed,
//              relaxed-threads): createSdpa({ wasmBinary / wasmModule }) reads
//              it (WebAssembly.Module.customSections) to pick the matching glue.
import fs from 'node:fs';
import path from 'node:path';

const MARK = '/*sdpa-wasm patched*/';
const MODULE_WORKER = 'ENVIRONMENT_IS_NODE?undefined:{type:"module"}';

/**
 * `from` as a pattern that also matches the unminified glue of an -O0 link
 * (the relaxed-SIMD builds, docs/BUILDING.md section 4): any white space around
 * punctuation, and a `;` before a `}`.
 */
function loosePattern(from) {
  const esc = from.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(esc.replace(/(\\?[(),=;{}:?])/g, (c) => (c === '\\}' ? '\\s*;?\\s*\\}\\s*' : `\\s*${c}\\s*`)), 'g');
}

/** Applies [from, to] edits; each must match once, or already be applied (idempotent). */
function apply(src, edits) {
  for (const [from, to, required = true] of edits) {
    if (src.includes(to)) continue;
    const re = loosePattern(from);
    const n = (src.match(re) || []).length;
    if (n === 0 && !required) continue;
    if (n !== 1) throw new Error(`expected the pattern ${from} once, found it ${n} times`);
    src = src.replace(re, () => to);
  }
  return src;
}

// Glue: no bundler-visible asset URLs; pthread workers are module workers in
// browsers (the worker script is valid module code; a dev server such as
// Vite's turns every served .js file into a module by adding imports).
const glueEdits = (base) => [
  // (a file patched by the first version of this script)
  [`new Worker(locateFile("${base}.worker.js"))`, `new Worker(locateFile("${base}.worker.js"),${MODULE_WORKER})`, false],
  [`new Worker(new URL("${base}.worker.js",import.meta.url))`, `new Worker(locateFile("${base}.worker.js"),${MODULE_WORKER})`, base.endsWith('-threads')],
  ['new Worker(pthreadMainJs)', `new Worker(pthreadMainJs,${MODULE_WORKER})`, base.endsWith('-threads')],
  [`wasmBinaryFile=new URL("${base}.wasm",import.meta.url).toString()`, `wasmBinaryFile=locateFile("${base}.wasm")`],
];

const workerEdits = () => [
  ['.then(function(instance){Module=instance})',
    '.then(function(instance){Module=instance}).catch(function(x){postMessage({cmd:"sdpaLoadError",text:String(x&&x.message||x)})})'],
];

export const BUILD_SECTION = 'sdpa.build';

const leb = (n) => { const out = []; do { let b = n & 0x7f; n >>>= 7; if (n) b |= 0x80; out.push(b); } while (n); return out; };

/** The names of the custom sections of a wasm binary. */
function customSectionNames(bytes) {
  const names = [];
  let i = 8;
  const readLeb = () => { let r = 0, shift = 0, b; do { b = bytes[i++]; r |= (b & 0x7f) << shift; shift += 7; } while (b & 0x80); return r >>> 0; };
  while (i < bytes.length) {
    const id = bytes[i++], size = readLeb(), end = i + size;
    if (id === 0) { const n = readLeb(); names.push(Buffer.from(bytes.subarray(i, i + n)).toString('utf8')); }
    i = end;
  }
  return names;
}

function tagWasm(file) {
  const bytes = fs.readFileSync(file);
  if (bytes.readUInt32LE(0) !== 0x6d736100) throw new Error('not a wasm binary');
  if (customSectionNames(bytes).includes(BUILD_SECTION)) return;
  const build = path.basename(file, '.wasm').replace(/^sdpa-/, '');
  const name = Buffer.from(BUILD_SECTION), payload = Buffer.from(build);
  const body = Buffer.concat([Buffer.from(leb(name.length)), name, payload]);
  fs.writeFileSync(file, Buffer.concat([bytes, Buffer.from([0, ...leb(body.length)]), body]));
}

for (const file of process.argv.slice(2)) {
  const name = path.basename(file);
  if (name.endsWith('.wasm')) {
    try { tagWasm(file); } catch (e) { console.error(`wasm-patch: ${file}: ${e.message}`); process.exit(1); }
    continue;
  }
  let src = fs.readFileSync(file, 'utf8');
  try {
    if (name.endsWith('.worker.js')) src = apply(src, workerEdits());
    else if (name.endsWith('.mjs')) src = apply(src, glueEdits(name.slice(0, -4)));
    else throw new Error('not a .mjs or .worker.js file');
  } catch (e) {
    console.error(`wasm-patch: ${file}: ${e.message} (emcc glue changed? update scripts/wasm-patch.mjs)`);
    process.exit(1);
  }
  if (!src.includes(MARK)) src += `\n${MARK}\n`;
  fs.writeFileSync(file, src);
}
