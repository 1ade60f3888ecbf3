// examples.test.js: every file in examples/ runs, in the build Node picks (threads)
// and in the single-thread build a page that is not cross-origin isolated gets
// (tests/fixtures/single-thread.mjs), with the same output and no warning: code
// written in Node must not break on a non-isolated page.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const EXAMPLES = fs.readdirSync(path.join(ROOT, 'examples')).filter((f) => f.endsWith('.mjs'));
// (outside tests/js, whose every file uvu loads as a test: the fixture's exit check would fail it)
const SINGLE = path.join(ROOT, 'tests', 'fixtures', 'single-thread.mjs');

const run = (file, pre) => spawnSync(process.execPath, [...pre, path.join(ROOT, 'examples', file)],
  { cwd: ROOT, encoding: 'utf8', timeout: 60000 });
/** The output without what differs by build by design (sdpa.info). */
const normal = (s) => s.replace(/build: '[\w-]+'/g, 'build').replace(/threads: \d+/g, 'threads').replace(/\s+/g, ' ');

test('examples/ has the README\'s two examples', () => {
  assert.ok(EXAMPLES.includes('decode-loop.mjs') && EXAMPLES.includes('layers.mjs'), EXAMPLES.join(', '));
});

for (const file of EXAMPLES) {
  test(`examples/${file} runs in the threads and the single-thread build alike`, () => {
    const threads = run(file, []);
    assert.is(threads.status, 0, `threads build: ${threads.stdout}\n${threads.stderr}`);
    const single = run(file, ['--import', SINGLE]);
    assert.is(single.status, 0, `single-thread build: ${single.stdout}\n${single.stderr}`);
    // (the fixture exits 3 unless the example created its instances through it, in the 'simd' build)
    assert.is(normal(single.stdout), normal(threads.stdout), 'the same output in both builds');
    for (const r of [threads, single]) assert.not.match(r.stderr, /sdpa-wasm:/, `no warning from the package: ${r.stderr}`);
  });
}

test.run();
