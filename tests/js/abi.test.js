// abi.test.js: js/abi.js (struct offsets, status codes, dtype numbers, limits,
// row-record parts) is what the C side says. scripts/abi.c, compiled for wasm32
// in build/wasm (`npm run build`), prints it; the build copies it over js/abi.js,
// so these tests fail when the file was edited by hand, when the C side changed
// and was not rebuilt, or when the regenerated file was not committed.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createSdpa, INTERNALS } from '../../js/index.js';
import { cacheHooks } from '../../js/kv-cache.js';
import { RECORD_PARTS, CACHE_DTYPES } from '../../js/abi.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const GENERATOR = path.join(ROOT, 'build/wasm/sdpa_abi.js');
const ABI_JS = path.join(ROOT, 'js/abi.js');

/** What scripts/abi.c prints now (the C side's js/abi.js). */
function generated() {
  assert.ok(fs.existsSync(GENERATOR), `${GENERATOR} is missing: run npm run build (it builds scripts/abi.c)`);
  const r = spawnSync(process.execPath, ['--no-experimental-fetch', GENERATOR], { cwd: ROOT, encoding: 'utf8', timeout: 60000 });
  assert.is(r.status, 0, `node ${GENERATOR} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

/** The first line where two texts differ, for the message. */
function firstDifference(a, b) {
  const x = a.split('\n'), y = b.split('\n');
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] !== y[i]) return `line ${i + 1}: ${JSON.stringify(x[i])} vs C: ${JSON.stringify(y[i])}`;
  }
  return 'none';
}

test('js/abi.js is what scripts/abi.c prints from the C headers (wasm32)', () => {
  const want = generated(), have = fs.readFileSync(ABI_JS, 'utf8');
  assert.ok(have === want, `js/abi.js differs from the C side (${firstDifference(have, want)}): run npm run build, which regenerates it`);
});

test('the js/abi.js in git (staged or committed) is what the C side prints', () => {
  const r = spawnSync('git', ['show', ':js/abi.js'], { cwd: ROOT, encoding: 'utf8' });
  // Only git's answer "not in the index" is a failure here; when git cannot read this tree at all (not a
  // checkout, another user's checkout: "dubious ownership", a read-only .git) there is nothing to compare,
  // and the test above still holds the file on disk to the C side.
  if (r.error || (r.status !== 0 && !/exists on disk, but not in the index|does not exist/.test(r.stderr))) {
    console.log(`  (git cannot read this tree: ${(r.error?.message ?? r.stderr).trim().split('\n')[0]}; the committed js/abi.js is not compared)`);
    return;
  }
  assert.is(r.status, 0, `js/abi.js is not in git: commit it (${r.stderr.trim()})`);
  const want = generated();
  assert.ok(r.stdout === want, `js/abi.js in git differs from the C side (${firstDifference(r.stdout, want)}): commit the regenerated js/abi.js`);
});

test("RECORD_PARTS add up to C's bytes per record, for every cache dtype and head dims 1 .. 70", async () => {
  const sdpa = await createSdpa({ build: 'simd' });
  try {
    const { M } = sdpa[INTERNALS];
    for (const dtype of Object.keys(CACHE_DTYPES)) {
      for (let D = 1; D <= 70; D++) {
        const cache = sdpa.createKVCache({ batch: 1, maxSeqLen: 1, numKvHeads: 1, headDim: D, dtype });
        const parts = RECORD_PARTS[dtype].reduce((sum, p) => sum + p.bytes * (p.span ? Math.ceil(D / p.span) : 1), 0);
        const { ptr } = cacheHooks.state(cache);
        assert.is(parts, M._sdpa_kv_cache_record_bytes(ptr, 0), `${dtype}, D ${D}: K`);
        assert.is(parts, M._sdpa_kv_cache_record_bytes(ptr, 1), `${dtype}, D ${D}: V`);
        // readRaw splits by RECORD_PARTS; its bytes are C's record
        cache.update({ data: new Float32Array(D).fill(0.5), dims: [1, 1, 1, D] }, { data: new Float32Array(D).fill(-0.25), dims: [1, 1, 1, D] }, 0);
        const raw = cache.readRaw(0, 1);
        let bytes = 0;
        for (const p of RECORD_PARTS[dtype]) bytes += raw.k[p.name].byteLength + raw.v[p.name].byteLength;
        assert.is(bytes, 2 * parts, `${dtype}, D ${D}: readRaw's parts`);
        cache.dispose();
      }
    }
  } finally {
    sdpa.dispose();
  }
});

test.run();
