#!/usr/bin/env node
// A Hugging Face tokenizer.json (+ tokenizer_config.json beside it, for the chat
// template, bos / eos and add_bos_token) -> a vocab-only GGUF (no tensors, like
// llama.cpp's ggml-vocab-*.gguf), loadable with sdpa-wasm/llama's loadTokenizer.
//
//   node scripts/tokenizer-json-to-gguf.mjs tokenizer.json out.gguf [--config tokenizer_config.json] [--pre NAME]
//
// --config: default tokenizer_config.json in tokenizer.json's directory (when there).
// --pre: the gpt2 pre-tokenizer's llama.cpp name, when it is not recognised from the regex.
// scripts/lib/vocab-gguf.mjs says what is written.

import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { writeGguf } from './lib/gguf-writer.mjs';
import { vocabFromTokenizerJson } from './lib/vocab-gguf.mjs';

const { positionals, values } = parseArgs({ allowPositionals: true, options: { config: { type: 'string' }, pre: { type: 'string' } } });
if (positionals.length !== 2) {
  console.error('usage: node scripts/tokenizer-json-to-gguf.mjs tokenizer.json out.gguf [--config tokenizer_config.json] [--pre NAME]');
  process.exit(2);
}
const [input, output] = positionals;
const json = JSON.parse(fs.readFileSync(input, 'utf8'));
const configPath = values.config ?? path.join(path.dirname(input), 'tokenizer_config.json');
const config = values.config !== undefined || fs.existsSync(configPath) ? JSON.parse(fs.readFileSync(configPath, 'utf8')) : {};
const { entries, model, pre, vocabSize } = vocabFromTokenizerJson(json, config, { pre: values.pre ?? null });
const bytes = writeGguf({ metadata: entries });
fs.writeFileSync(output, bytes);
console.log(`${output}: ${model}${pre ? ` (pre ${pre})` : ''}, ${vocabSize} tokens, ${(bytes.length / 1e6).toFixed(2)} MB`);
