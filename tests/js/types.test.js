// types.test.js: index.d.ts says what the contract says. tsc (strict, with
// exactOptionalPropertyTypes) type-checks tests/types/api.ts, a file of uses
// that must compile and of `@ts-expect-error` lines that must not; and the
// package's runtime exports are the ones index.d.ts declares (INTERNALS, the
// test-only key, is not declared).
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import * as pkg from '../../js/index.js';
import { STATUS_CODES, CACHE_DTYPES, WEIGHT_DTYPES } from '../../js/abi.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

test('tsc --strict --exactOptionalPropertyTypes accepts tests/types/api.ts and every @ts-expect-error in it is an error', () => {
  const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', path.join(ROOT, 'tests', 'types')], { cwd: ROOT, encoding: 'utf8', timeout: 120000 });
  assert.is(r.status, 0, `tsc:\n${r.stdout}${r.stderr}`);
  const src = fs.readFileSync(path.join(ROOT, 'tests', 'types', 'api.ts'), 'utf8');
  assert.ok((src.match(/@ts-expect-error/g) || []).length >= 11, 'the file checks the mistakes it should');
});

test('the runtime exports are the declared ones', () => {
  const dts = fs.readFileSync(path.join(ROOT, 'index.d.ts'), 'utf8');
  const declared = new Set([...dts.matchAll(/^export (?:declare )?(?:async )?(?:class|function|const|let) (\w+)/gm)].map((m) => m[1]));
  const runtime = Object.keys(pkg).filter((k) => k !== 'INTERNALS');
  for (const k of runtime) assert.ok(declared.has(k), `${k} is exported but not in index.d.ts`);
  for (const k of declared) assert.ok(runtime.includes(k), `${k} is in index.d.ts but not exported`);
  assert.not.ok(declared.has('INTERNALS'), 'INTERNALS is not public');
});

test('sdpa-wasm/llama: the runtime exports are the ones llama.d.ts declares', async () => {
  const llama = await import('../../js/llama/index.js');
  const dts = fs.readFileSync(path.join(ROOT, 'llama.d.ts'), 'utf8');
  const declared = new Set([...dts.matchAll(/^export (?:declare )?(?:async )?(?:class|function|const|let) (\w+)/gm)].map((m) => m[1]));
  const runtime = Object.keys(llama);
  for (const k of runtime) assert.ok(declared.has(k), `${k} is exported but not in llama.d.ts`);
  for (const k of declared) assert.ok(runtime.includes(k), `${k} is in llama.d.ts but not exported`);
});

// The code and dtype names are C's (include/sdpa.h, src/cache/kv_dtype.c, reaching JS as
// js/abi.js); index.d.ts and CONTRACT.md's table spell them by hand, so they are held to C here.
const unionOf = (src, name) => {
  const m = src.match(new RegExp(`export type ${name} =([^;]*);`));
  assert.ok(m, `${name} is declared`);
  return [...m[1].replace(/\/\*[\s\S]*?\*\//g, '').matchAll(/'([^']+)'/g)].map((x) => x[1]);
};

test("index.d.ts's SdpaErrorCode and CacheDType, and CONTRACT.md's code table, are C's codes and dtypes in C's order", () => {
  const dts = fs.readFileSync(path.join(ROOT, 'index.d.ts'), 'utf8');
  const codes = STATUS_CODES.filter((c) => c !== 'OK');
  assert.equal(unionOf(dts, 'SdpaErrorCode'), [...codes, 'E_LOAD'], 'SdpaErrorCode: every status code of sdpa.h in table order, then E_LOAD');
  assert.equal(unionOf(dts, 'CacheDType'), Object.keys(CACHE_DTYPES), 'CacheDType: the cache dtypes of kv_dtype.c in sdpa_dtype order');
  assert.equal(unionOf(dts, 'WeightDType'), Object.keys(WEIGHT_DTYPES), "WeightDType: the weight dtypes of sdpa_dense.h (scripts/abi.c's order)");
  const contract = fs.readFileSync(path.join(ROOT, 'docs', 'CONTRACT.md'), 'utf8');
  const section2 = contract.slice(contract.indexOf('\n## 2.'), contract.indexOf('\n## 3.'));
  const table = [...section2.matchAll(/^\| `(E_[A-Z_]+)` \|/gm)].map((m) => m[1]);
  assert.equal(table.filter((c) => c !== 'E_LOAD'), codes, "CONTRACT.md section 2's table: C's codes in C's order");
});

test.run();
