#!/usr/bin/env node
// Post-link step for the emcc 3.1.6 glue (run by CMakeLists.txt after each
// wasm module links; idempotent). Usage: node scripts/wasm-patch.mjs <file>...
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
import fs from 'node:fs';
import path from 'node:path';

const MARK = '/*sdpa-wasm patched*/';
const MODULE_WORKER = 'ENVIRONMENT_IS_NODE?undefined:{type:"module"}';

/** Applies [from, to] edits; each must match once, or already be applied (idempotent). */
function apply(src, edits) {
  for (const [from, to, required = true] of edits) {
    if (src.includes(to)) continue;
    const n = src.split(from).length - 1;
    if (n === 0 && !required) continue;
    if (n !== 1) throw new Error(`expected the pattern ${from} once, found it ${n} times`);
    src = src.replace(from, to);
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

for (const file of process.argv.slice(2)) {
  let src = fs.readFileSync(file, 'utf8');
  const name = path.basename(file);
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
