// layers.test.js: the floors of docs/ARCHITECTURE.md ("The floors"), held: every `#include "..."` of
// src/ goes down a floor or stays on its own, no two units include each other, and sdpa-wasm/llama
// (js/llama/) imports the package through its public entry. The arrows up that remain are listed
// below as debts, each with why: a new one fails here, and so does a debt that was paid but is
// still listed (delete its line).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function walk(dir, out = []) {
  for (const e of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory()) walk(rel, out);
    else out.push(rel);
  }
  return out;
}

// The C floors, top to bottom. `include/` (the C API's types) is below them all: any file may include it.
const FLOORS = ['interface', 'shared', 'storage', 'kernels', 'entries'];
/** A src/ file's floor (by path: the map's rooms). */
function floorOf(file) {
  if (file.startsWith('include/')) return 'interface';
  if (/^src\/(threadpool\/|kernels\/simd\.h$)/.test(file)) return 'shared';
  if (/^src\/cache\/(page_pool|kv_types|kv_format|kv_dtype|kv_record|crc32c)/.test(file)) return 'storage';
  if (/^src\/(kernels\/|dense\/dense_kernels\.h$|internal\.h$)/.test(file)) return 'kernels';
  if (/^src\/(sdpa\.c|wasm\/|contract\/|dense\/|cache\/(kv_cache|kv_many|kv_state|kv_group))/.test(file)) return 'entries';
  return null;
}

// Arrows up that remain (from -> to), and why they are not paid yet (none today).
const DEBTS = new Map([
]);

const C_FILES = [...walk('src'), ...walk('include')].filter((f) => /\.[ch]$/.test(f));

/** `#include "x"` of a C file, resolved as the build's include path does (the file's folder, src/, include/). */
function includesOf(file) {
  const out = [];
  for (const m of fs.readFileSync(path.join(ROOT, file), 'utf8').matchAll(/^\s*#\s*include\s+"([^"]+)"/gm)) {
    const name = m[1];
    const hit = [path.posix.join(path.posix.dirname(file), name), `src/${name}`, `include/${name}`].find((p) => fs.existsSync(path.join(ROOT, p)));
    if (hit) out.push(hit);
    else if (!/^(crc32c_table\.h)$/.test(name)) out.push(`?${name}`);
  }
  return out;
}

test('every src/ and include/ file has a floor', () => {
  const none = C_FILES.filter((f) => floorOf(f) === null);
  assert.equal(none, [], `files on no floor (add their room to floorOf and to ARCHITECTURE's floors):\n  ${none.join('\n  ')}`);
});

test('#includes go down a floor or stay on it; the arrows up are the listed debts', () => {
  const up = [], unresolved = [];
  for (const f of C_FILES) {
    for (const inc of includesOf(f)) {
      if (inc.startsWith('?')) { unresolved.push(`${f} -> ${inc.slice(1)}`); continue; }
      if (FLOORS.indexOf(floorOf(inc)) > FLOORS.indexOf(floorOf(f))) up.push(`${f} -> ${inc}`);
    }
  }
  assert.equal(unresolved, [], `includes that resolve to no file:\n  ${unresolved.join('\n  ')}`);
  const fresh = up.filter((a) => !DEBTS.has(a));
  assert.equal(fresh, [], `#includes up a floor (${FLOORS.slice().reverse().join(' > ')}):\n  ${fresh.join('\n  ')}`);
  const paid = [...DEBTS.keys()].filter((a) => !up.includes(a));
  assert.equal(paid, [], `debts paid: delete them from DEBTS:\n  ${paid.join('\n  ')}`);
});

// Units that include each other still, and why (none today).
const CIRCLE_DEBTS = new Map([
]);

test('no two units (a .c and its .h) include each other but the listed debts', () => {
  const unit = (f) => f.replace(/\.[ch]$/, '');
  const edges = new Map();
  for (const f of C_FILES) {
    for (const inc of includesOf(f)) {
      if (inc.startsWith('?') || unit(inc) === unit(f)) continue;
      if (!edges.has(unit(f))) edges.set(unit(f), new Set());
      edges.get(unit(f)).add(unit(inc));
    }
  }
  const circles = [];
  for (const [a, tos] of edges) for (const b of tos) if (a < b && edges.get(b)?.has(a)) circles.push(`${a} <-> ${b}`);
  const fresh = circles.filter((c) => !CIRCLE_DEBTS.has(c));
  assert.equal(fresh, [], `units that include each other:\n  ${fresh.join('\n  ')}`);
  const paid = [...CIRCLE_DEBTS.keys()].filter((c) => !circles.includes(c));
  assert.equal(paid, [], `debts paid: delete them from CIRCLE_DEBTS:\n  ${paid.join('\n  ')}`);
});

// sdpa-wasm/llama is a client of the package: it imports the public entry (js/index.js, whose
// SdpaError is errors.js's). What it still takes from inside the package, and why:
const LLAMA_DEBTS = new Map([
]);
const PUBLIC = new Set(['js/index.js', 'js/errors.js']);

test('js/llama imports the package through its public entry; js/ never imports js/llama', () => {
  const inside = [];
  for (const f of walk('js/llama').filter((x) => x.endsWith('.js'))) {
    for (const m of fs.readFileSync(path.join(ROOT, f), 'utf8').matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]/gm)) {
      if (!m[1].startsWith('.')) continue;
      const to = path.posix.join(path.posix.dirname(f), m[1]);
      if (to.startsWith('js/llama/') || PUBLIC.has(to)) continue;
      inside.push(`${f} -> ${to}`);
    }
  }
  const fresh = inside.filter((a) => !LLAMA_DEBTS.has(a));
  assert.equal(fresh, [], `js/llama imports from inside the package:\n  ${fresh.join('\n  ')}`);
  const paid = [...LLAMA_DEBTS.keys()].filter((a) => !inside.includes(a));
  assert.equal(paid, [], `debts paid: delete them from LLAMA_DEBTS:\n  ${paid.join('\n  ')}`);
  for (const f of fs.readdirSync(path.join(ROOT, 'js')).filter((x) => x.endsWith('.js'))) {
    assert.not.match(fs.readFileSync(path.join(ROOT, 'js', f), 'utf8'), /from\s+['"]\.\/llama\//, `js/${f} imports js/llama`);
  }
});

test.run();
