// llama-cli.test.js: `sdpa-llama --model file.gguf` (and --chat) as a user runs it, on GGUF files
// made here by the converter (scripts/llama2c-to-gguf.mjs) and scripts/random-gguf.mjs.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'sdpa-llama.mjs');
const DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-llama-cli-'));
const node = (args, input) => spawnSync(process.execPath, args, { cwd: ROOT, encoding: 'utf8', input, timeout: 120000 });

test('--model: the shipped model as a Q8_0 GGUF writes the greedy text of --weight-dtype q8_0 on the checkpoint', () => {
  const file = path.join(DIR, 'fortunes-q8_0.gguf');
  const conv = node([path.join(ROOT, 'scripts', 'llama2c-to-gguf.mjs'), 'models/fortunes/model.bin', 'models/fortunes/tokenizer.bin', file, '--type', 'Q8_0']);
  assert.is(conv.status, 0, conv.stderr);
  const common = ['--prompt', 'You will', '--steps', '40', '--temperature', '0', '--threads', '1'];
  const fromGguf = node([CLI, '--model', file, ...common]);
  const fromBin = node([CLI, '--weight-dtype', 'q8_0', ...common]);
  assert.is(fromGguf.status, 0, fromGguf.stderr);
  assert.is(fromBin.status, 0, fromBin.stderr);
  assert.ok(fromGguf.stdout.startsWith('You will') && fromGguf.stdout.length > 'You will'.length + 20, fromGguf.stdout);
  assert.is(fromGguf.stdout, fromBin.stdout);
  assert.match(fromGguf.stderr, /q8_0 weights/);
});

test('--chat: each stdin line is a turn rendered by the file\'s template; a file without one, and --chat without --model, are errors', () => {
  const file = path.join(DIR, 'tiny.gguf');
  const made = node([path.join(ROOT, 'scripts', 'random-gguf.mjs'), file, '--shape', 'tiny', '--type', 'Q8_0']);
  assert.is(made.status, 0, made.stderr);
  const chat = node([CLI, '--model', file, '--chat', '--steps', '6', '--seed', '1', '--threads', '1'], 'Hello there\nAnd again\n');
  assert.is(chat.status, 0, chat.stderr);
  assert.is(chat.stdout.split('\n').length - 1, 2, `two replies, one per line:\n${chat.stdout}`);
  const bare = path.join(DIR, 'bare.gguf');
  const conv = node([path.join(ROOT, 'scripts', 'llama2c-to-gguf.mjs'), 'models/fortunes/model.bin', 'models/fortunes/tokenizer.bin', bare, '--type', 'F32']);
  assert.is(conv.status, 0, conv.stderr);
  const none = node([CLI, '--model', bare, '--chat'], 'Hi\n');
  assert.is(none.status, 1);
  assert.match(none.stderr, /has no chat template/);
  const noModel = node([CLI, '--chat'], 'Hi\n');
  assert.is(noModel.status, 1);
  assert.match(noModel.stderr, /E_ARG: sdpa-llama: --chat needs --model/);
});

test.after(() => fs.rmSync(DIR, { recursive: true, force: true }));
test.run();
