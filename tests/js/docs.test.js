// docs.test.js: the docs name files that exist, and the file maps name every file.
//
// Read: docs/ARCHITECTURE.md, docs/INSIDE.md and docs/BUILDING.md whole, the README's "Layout" section and
// bench/README.md. A path is taken from every `inline code` span and every fenced code block
// (each word of them), and from the prose when it starts with one of the repository's folders
// (`src/...`, `docs/LLAMA.md`). A word is a path when it has a `/` or ends in a file extension;
// `{h,c}` braces expand, `*` globs must match a file. Then:
//   * a path with a `/` must exist from the repository root, or under one of the folders that
//     docs write paths relative to (`cache/kv_cache.c` is src/cache/kv_cache.c);
//   * a bare file name must exist in a folder its table row, code-block line or paragraph names
//     (`flash_int8.h` in the `src/kernels/` row), else somewhere in the repository's sources;
//   * every file of src/, include/, js/, js/llama/, web/ is named by ARCHITECTURE.md or the
//     README's Layout, and every bench/*.mjs entry point by bench/README.md.
// Not checked: build outputs (dist/, build/, node_modules/), absolute paths, URLs, and the few
// names below that are not paths of this repository.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

const EXT = /\.(c|h|js|mjs|cjs|ts|md|json|html|css|py|sh|txt|bin|png)$/;
// the repository's top-level folders (prose paths start with one of them)
const TOP = ['src', 'include', 'js', 'tests', 'bench', 'docs', 'web', 'scripts', 'models', 'bin', 'examples', '.ci'];
// folders that docs write paths relative to
const BASES = ['', 'src', 'js', 'tests', 'bench'];
const GENERATED = new Set(['dist', 'build', 'node_modules', 'artifacts']);
const NOT_PATHS = new Set([
  'sdpa-wasm/llama',        // the package's export, not a file
  'simde/wasm/simd128.h',   // a system header (libsimde-dev)
  'llama2.c',               // the upstream project, not a file here
  'run.json',               // the file a user saves a run to
]);
const SKIP_DIRS = new Set(['.git', 'node_modules', 'build', 'dist', 'artifacts']);

function walk(dir, out = []) {
  for (const e of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
    if (SKIP_DIRS.has(e.name)) continue;
    const rel = dir ? `${dir}/${e.name}` : e.name;
    if (e.isDirectory()) walk(rel, out);
    else out.push(rel);
  }
  return out;
}
const FILES = walk('');
const BY_BASENAME = new Map();
for (const f of FILES) {
  const b = path.posix.basename(f);
  if (!BY_BASENAME.has(b)) BY_BASENAME.set(b, []);
  BY_BASENAME.get(b).push(f);
}

const exists = (rel) => fs.existsSync(path.join(ROOT, rel));
const isDir = (rel) => exists(rel) && fs.statSync(path.join(ROOT, rel)).isDirectory();

/** `a.{h,c}` -> ['a.h', 'a.c'] (one brace group at a time, nested ones too). */
function expand(word) {
  const m = /\{([^{}]*)\}/.exec(word);
  if (!m) return [word];
  return m[1].split(',').flatMap((alt) => expand(word.slice(0, m.index) + alt + word.slice(m.index + m[0].length)));
}

/** Files matching a relative path with `*` in its last part. */
function glob(rel) {
  const dir = path.posix.dirname(rel), base = path.posix.basename(rel);
  if (dir.includes('*') || !isDir(dir)) return [];
  const re = new RegExp('^' + base.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*') + '$');
  return fs.readdirSync(path.join(ROOT, dir)).filter((n) => re.test(n)).map((n) => `${dir === '.' ? '' : dir + '/'}${n}`);
}

/** The path words of a text: trimmed of punctuation around them; null when not a path. */
function candidate(raw) {
  const w = raw.replace(/^[("'`[<]+/, '').replace(/[)"'`,;:.\]>]+$/, '');
  if (!w || NOT_PATHS.has(w)) return null;
  if (/[=|<>$"'…;:]/.test(w) || w.includes('://') || w.includes('...')) return null;
  if (w.startsWith('-') || w.startsWith('/') || w.startsWith('~') || w.startsWith('*')) return null;
  if (w.startsWith('.') && !w.includes('/')) return null;       // `.mjs`, `.wasm`: extensions
  if (!/^[\w.\-/{},*@+]+$/.test(w)) return null;
  if (!w.includes('/') && !EXT.test(w.replace(/\{[^}]*\}$/, 'x.c'))) return null;
  if (w.includes('/') && !/[A-Za-z]/.test(w.split('/')[0] || 'x')) return null;   // 64/16
  const first = w.replace(/^\.\//, '').split('/')[0];
  if (GENERATED.has(first)) return null;
  return w.replace(/^\.\//, '');
}

/**
 * Checks one word against the tree. ctx: folders named nearby. Returns the files it names
 * (for the completeness check) or throws a message.
 */
function resolve(word, ctx) {
  const out = [];
  for (const w of expand(word)) {
    const clean = w.replace(/\/$/, '');
    let found = null;
    if (w.includes('/')) {
      for (const base of [...BASES, ...ctx]) {
        const rel = base ? `${base}/${clean}` : clean;
        if (rel.includes('*') ? glob(rel).length : exists(rel)) { found = rel; break; }
      }
    } else {
      for (const dir of ctx) {
        const rel = `${dir}/${clean}`;
        if (rel.includes('*') ? glob(rel).length : exists(rel)) { found = rel; break; }
      }
      if (!found && !clean.includes('*') && BY_BASENAME.has(clean)) found = BY_BASENAME.get(clean)[0];
    }
    if (!found) throw new Error(`${w}${ctx.length ? ` (looked in ${ctx.join(', ')} too)` : ''}`);
    out.push(...(found.includes('*') ? glob(found) : [found]));
  }
  return out;
}

/** Folders a chunk of text names (a folder, or the folder of a file path). */
function foldersIn(words) {
  const dirs = [];
  for (const w of words) {
    if (!w || !w.includes('/')) continue;
    for (const x of expand(w)) {
      const clean = x.replace(/\/$/, '');
      for (const base of BASES) {
        const rel = base ? `${base}/${clean}` : clean;
        if (isDir(rel)) { dirs.push(rel); break; }
        if (exists(rel)) { dirs.push(path.posix.dirname(rel)); break; }
      }
    }
  }
  return dirs;
}

/**
 * Every path of a markdown text, each with the folders named around it:
 * [{ word, ctx, where }]. Code blocks go line by line (a line that starts at column 0 sets
 * the folder for the indented lines after it); prose and tables go by paragraph / row.
 */
function pathsOf(md, name) {
  const found = [];
  const lines = md.split('\n');
  let i = 0;
  while (i < lines.length) {
    if (/^\s*```/.test(lines[i])) {
      let lead = [];
      for (i++; i < lines.length && !/^\s*```/.test(lines[i]); i++) {
        const line = lines[i];
        const words = line.split(/[\s─▶◀│]+/).map(candidate).filter(Boolean);
        if (/^\S/.test(line)) lead = foldersIn(line.split(/\s{2,}/)[0].split(/\s+/).map(candidate));
        const ctx = [...new Set([...lead, ...foldersIn(words)])];
        for (const word of words) found.push({ word, ctx, where: `${name}:${i + 1}` });
      }
      i++;
      continue;
    }
    // a paragraph, or one table row
    const start = i;
    const block = [];
    if (lines[i].startsWith('|')) block.push(lines[i++]);
    else while (i < lines.length && lines[i].trim() !== '' && !/^\s*```/.test(lines[i]) && !lines[i].startsWith('|')) block.push(lines[i++]);
    if (!block.length) { i++; continue; }
    const text = block.join('\n');
    const words = [];
    for (const m of text.matchAll(/`([^`]+)`/g)) for (const w of m[1].split(/\s+/)) words.push(candidate(w));
    const prose = text.replace(/`[^`]*`/g, ' ');
    for (const w of prose.split(/\s+/)) {
      const c = candidate(w);
      if (c && c.includes('/') && TOP.includes(c.split('/')[0])) words.push(c);
    }
    const ws = words.filter(Boolean);
    // a table row's first cell names the folder of the rest
    const firstCell = block[0].startsWith('|') ? block[0].split('|')[1] : '';
    const lead = foldersIn([...firstCell.matchAll(/`([^`]+)`/g)].map((m) => candidate(m[1])));
    const ctx = [...new Set([...lead, ...foldersIn(ws)])];
    for (const word of ws) found.push({ word, ctx, where: `${name}:${start + 1}` });
  }
  return found;
}

const read = (rel) => fs.readFileSync(path.join(ROOT, rel), 'utf8');
function readmeLayout() {
  const md = read('README.md');
  const at = md.indexOf('\n## Layout');
  assert.ok(at >= 0, "README.md has a '## Layout' section");
  const end = md.indexOf('\n## ', at + 1);
  return md.slice(at, end < 0 ? md.length : end);
}
const DOCS = () => [
  ['docs/ARCHITECTURE.md', read('docs/ARCHITECTURE.md'), 60],
  ['docs/INSIDE.md', read('docs/INSIDE.md'), 40],
  ['docs/BUILDING.md', read('docs/BUILDING.md'), 20],
  ['README.md (Layout)', readmeLayout(), 40],
  ['bench/README.md', read('bench/README.md'), 20],
];

function check(name, md, min) {
  const paths = pathsOf(md, name);
  assert.ok(paths.length >= min, `${name}: only ${paths.length} paths found (expected >= ${min}): the extraction is broken`);
  const missing = [], named = new Set();
  for (const { word, ctx, where } of paths) {
    try { for (const f of resolve(word, ctx)) named.add(f); } catch (e) { missing.push(`${where}: ${e.message}`); }
  }
  return { missing, named, count: paths.length };
}

test('every file or folder the docs name exists', () => {
  const missing = [];
  for (const [name, md, min] of DOCS()) missing.push(...check(name, md, min).missing);
  assert.equal(missing, [], `paths in the docs that do not exist:\n  ${missing.join('\n  ')}`);
});

test('the file maps name every source file (ARCHITECTURE.md or the README Layout; bench/README.md)', () => {
  const named = new Set([...check('docs/ARCHITECTURE.md', read('docs/ARCHITECTURE.md'), 60).named,
    ...check('README.md (Layout)', readmeLayout(), 40).named]);
  const want = FILES.filter((f) => /^(src\/.*\.[ch]|include\/[^/]+\.h|js\/[^/]+\.js|js\/llama\/[^/]+\.js|web\/[^/]+\.(js|html))$/.test(f));
  assert.ok(want.length > 40, `only ${want.length} source files found`);
  const unnamed = want.filter((f) => !named.has(f));
  assert.equal(unnamed, [], `files no file map names:\n  ${unnamed.join('\n  ')}`);
  const bench = check('bench/README.md', read('bench/README.md'), 20).named;
  const entries = FILES.filter((f) => /^bench\/[^/]+\.mjs$/.test(f)).filter((f) => !bench.has(f));
  assert.equal(entries, [], `bench entry points bench/README.md does not name:\n  ${entries.join('\n  ')}`);
});

test('the extraction: braces, globs, relative paths, bare names, what is not a path', () => {
  assert.equal(expand('kv_format.{h,c}'), ['kv_format.h', 'kv_format.c']);
  assert.equal(candidate('(`kernels/reference.c:'), 'kernels/reference.c');
  for (const w of ['[64/16][D][16]', 'float32', '--only=native', 'dist/sdpa-simd.wasm', 'https://x.org/a.js', '.mjs', 'sdpa-wasm/llama'])
    assert.is(candidate(w), null, w);
  assert.equal(resolve('cache/kv_cache.c', []), ['src/cache/kv_cache.c']);
  assert.equal(resolve('flash_int8.h', ['src/kernels']), ['src/kernels/flash_int8.h']);
  assert.equal(resolve('index.js', ['js/llama']), ['js/llama/index.js']);
  assert.ok(resolve('tests/c/test_*.c', []).length > 5);
  assert.throws(() => resolve('src/kernels/flash_int9.h', []), /flash_int9\.h/);
  assert.throws(() => resolve('no_such_file.c', ['src/kernels']), /no_such_file\.c/);
  // a renamed file fails the check of the doc that names it
  const { missing } = check('t.md', '| `src/kernels/` | `flash.c`, `flash_int8.h`, `flash_i8.h` |\n\nSee `src/cache/kv_cache.c` and src/cache/kv_cachex.c here.\n', 1);
  assert.equal(missing.length, 2, missing.join('\n'));
  assert.ok(missing[0].includes('flash_i8.h') && missing[1].includes('kv_cachex.c'), missing.join('\n'));
});

test.run();
