// gguf-tokenizer.js: the tokenizer a GGUF file carries (its tokenizer.* keys),
// encoding and decoding as llama.cpp's llama-vocab.cpp does.
//
// Keys read (llama.cpp's names; n = the number of tokens):
//   tokenizer.ggml.model        'llama' (SentencePiece BPE by scores) | 'gpt2' (byte-level BPE by merge rank)
//   tokenizer.ggml.tokens       n strings (SPM: spaces as U+2581, bytes as <0xXX>; gpt2: GPT-2's byte-to-char map)
//   tokenizer.ggml.scores       n float32 (SPM merge priority; optional, 0 when absent)
//   tokenizer.ggml.token_type   n int32: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
//   tokenizer.ggml.merges       gpt2: "left right" strings, rank = index
//   tokenizer.ggml.pre          gpt2: the pre-tokenizer's name (PRE_TOKENIZERS below; absent: 'default')
//   tokenizer.ggml.{bos,eos,eot,eom,unknown,padding}_token_id, add_bos_token, add_eos_token, add_space_prefix
//   tokenizer.chat_template     a Jinja template (applyChatTemplate)
// Encode (llama.cpp's tokenize): the text is first split at special tokens'
// text (user-defined always, control and unknown too with { special: true }),
// longest first; each text fragment is then
//   SPM: " " prefixed (when add_space_prefix, at the start and after a special
//        token), spaces as U+2581, one symbol per code point, the adjacent pair
//        whose concatenation is a token of the highest score merged (leftmost of
//        equals) until none is; a symbol that is no token becomes its UTF-8
//        bytes' <0xXX> tokens;
//   gpt2: split into words by the pre-tokenizer's regexes (each regex splits
//        the pieces of the one before; the text between matches is a piece too),
//        each word's UTF-8 bytes mapped to GPT-2's printable chars, the pair of
//        lowest merge rank merged (leftmost of equals) until none is (llama-bpe:
//        a word that is a token is that token, merges ignored).
// Decode (llama.cpp's token_to_piece with special = false): control, unknown,
// unused and undefined tokens give nothing; byte tokens their byte; SPM pieces U+2581 as
// spaces (the first piece after a control token or the start loses one
// leading space when add_space_prefix); gpt2 pieces through the inverse byte map.
// The ids that end a generation (stopTokens) are llama.cpp's end-of-generation
// set: EOS, EOT, EOM, the FIM pad / repo / file-separator tokens, and the
// tokens whose text llama.cpp recognises (<|eot_id|>, <|im_end|>, <|end|>, ...).

import { SdpaError } from '../errors.js';

const TYPE = Object.freeze({ UNDEFINED: 0, NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 });
const SPACE = '\u2581';
const BYTE_TOKEN = /^<0x([0-9A-Fa-f]{2})>$/;

// llama.cpp's pre-tokenizer regexes (llama-vocab.cpp, llm_tokenizer_bpe), as JS
// regexes with the u flag ((?i:...) spelled out: V8 before 12.5 lacks inline flags).
const CONTRACTIONS = "'s|'t|'re|'ve|'m|'ll|'d";
const CONTRACTIONS_ANY_CASE = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const GPT2 = `${CONTRACTIONS}| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)`;
const LLAMA3 = `${CONTRACTIONS_ANY_CASE}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const QWEN2 = `${CONTRACTIONS_ANY_CASE}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`;
const PRE_GROUPS = [
  // [names (tokenizer.ggml.pre), regexes, ignore_merges, add_bos default]
  [['default'], ['[\\p{P}\\$\\+<=>\\^~\\|]+', GPT2, '\\p{N}+', '[0-9][0-9][0-9]'], false, false],
  [['gpt-2', 'gpt2', 'mpt', 'olmo', 'jais', 'phi-2', 'roberta-bpe'], [GPT2], false, false],
  [['llama-bpe', 'llama3', 'llama-v3', 'falcon3'], [LLAMA3], true, true],
  [['dbrx', 'smaug-bpe'], [LLAMA3], false, false],
  [['smollm', 'starcoder', 'refact', 'command-r', 'codeshell', 'exaone', 'minerva-7b'], ['\\p{N}', GPT2], false, false],
  [['qwen2', 'deepseek-r1-qwen', 'stablelm2', 'megrez'], [QWEN2], false, false],
];
export const PRE_TOKENIZERS = new Map(PRE_GROUPS.flatMap(([names, regexes, ignoreMerges, addBos]) =>
  names.map((name) => [name, { regexes, ignoreMerges, addBos }])));

// Token texts llama.cpp takes for EOT / EOM / FIM ids when the file names none (its list's order decides here).
const EOT_TEXTS = ['<|eot_id|>', '<|im_end|>', '<|end|>', '<end_of_turn>', '<|endoftext|>', '<EOT>', '<\uFF5Cend\u2581of\u2581sentence\uFF5C>'];
const EOM_TEXTS = ['<|eom_id|>'];
const EOG_TEXTS = ['<|eot_id|>', '<|im_end|>', '<|end|>', '<end_of_turn>', '<|endoftext|>', '<|eom_id|>', '<EOT>'];
const FIM_PAD_TEXTS = ['<|fim_pad|>', '<fim-pad>', '<PAD>'];
const FIM_REP_TEXTS = ['<|fim_repo|>', '<|repo_name|>', '<fim-repo>', '<REPO>'];
const FIM_SEP_TEXTS = ['<|file_sep|>', '<|fim_sep|>', '<fim-sep>', '<SEP>'];

/** GPT-2's bytes_to_unicode: byte -> a printable char (bytes that print stay; others go to U+0100 + k). */
const BYTE_TO_CHAR = (() => {
  const out = new Array(256);
  let k = 0;
  for (let b = 0; b < 256; b++) {
    const keeps = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out[b] = String.fromCharCode(keeps ? b : 256 + k++);
  }
  return out;
})();
const CHAR_TO_BYTE = new Map(BYTE_TO_CHAR.map((c, b) => [c, b]));
const utf8Encoder = new TextEncoder();

/**
 * A tokenizer from a GGUF file's metadata (parseGguf's Map). `fn` prefixes
 * error messages. Malformed keys are E_FORMAT naming the key, the rule,
 * expected vs actual.
 */
export function tokenizerFromGguf(metadata, fn = 'tokenizerFromGguf') {
  if (!(metadata instanceof Map)) {
    throw new SdpaError('E_ARG', `${fn}: metadata must be a Map (parseGguf's metadata), got ${metadata === null ? 'null' : typeof metadata}`);
  }
  const bad = (key, message) => new SdpaError('E_FORMAT', `${fn}: ${key} ${message}`);
  const shown = (v) => { const j = JSON.stringify(typeof v === 'bigint' ? String(v) : v) ?? String(v); return j.length > 80 ? `${j.slice(0, 77)}...` : j; };
  const describe = (v) => (v === undefined ? 'absent' : Array.isArray(v) ? `an array of ${v.length}`
    : ArrayBuffer.isView(v) ? `a ${v.constructor.name} of ${v.length}` : `${typeof v} ${shown(v)}`);

  const modelKey = 'tokenizer.ggml.model';
  const model = metadata.get(modelKey);
  if (model !== 'llama' && model !== 'gpt2') {
    throw bad(modelKey, `is ${describe(model)}; expected "llama" (SentencePiece) or "gpt2" (byte-level BPE), the tokenizers this build has`);
  }

  const tokensKey = 'tokenizer.ggml.tokens';
  const tokens = metadata.get(tokensKey);
  if (!Array.isArray(tokens) || tokens.length === 0 || tokens.length > 1 << 24) {
    throw bad(tokensKey, `is ${describe(tokens)}; expected an array of 1 .. ${1 << 24} strings`);
  }
  const n = tokens.length;
  for (let i = 0; i < n; i++) {
    if (typeof tokens[i] !== 'string') throw bad(`${tokensKey}[${i}]`, `is ${describe(tokens[i])}; expected a string`);
  }

  const numbers = (key, Kind, check) => {
    const v = metadata.get(key);
    if (v === undefined) return null;
    if (!Kind.some((K) => v instanceof K) || v.length !== n) {
      throw bad(key, `is ${describe(v)}; expected ${Kind.map((K) => K.name).join(' or ')} of ${n} (one per token of ${tokensKey})`);
    }
    for (let i = 0; i < n; i++) check(v[i], i);
    return v;
  };
  const scores = numbers('tokenizer.ggml.scores', [Float32Array, Float64Array], (s, i) => {
    if (Number.isNaN(s)) throw bad(`tokenizer.ggml.scores[${i}]`, 'is NaN; expected a number');
  });
  const types = Uint8Array.from(numbers('tokenizer.ggml.token_type', [Int32Array, Uint32Array], (t, i) => {
    if (!(t >= 0 && t <= 6)) throw bad(`tokenizer.ggml.token_type[${i}]`, `is ${t}; expected 0 .. 6 (undefined, normal, unknown, control, user-defined, unused, byte)`);
  }) ?? new Uint8Array(n).fill(TYPE.NORMAL));

  const ids = new Map();
  tokens.forEach((t, i) => ids.set(t, i));   // (llama.cpp: a repeated text maps to its last id)

  const flag = (key, fallback) => {
    const v = metadata.get(key);
    if (v === undefined) return fallback;
    if (typeof v !== 'boolean') throw bad(key, `is ${describe(v)}; expected a boolean`);
    return v;
  };
  const id = (key, fallback) => {
    const v = metadata.get(key);
    // (LLAMA_TOKEN_NULL, -1, written as a uint32 by llama.cpp's converters: "none", llama.cpp keeps its default)
    if (v === undefined || v === 0xFFFFFFFF) return fallback;
    if (!Number.isInteger(v) || v < 0 || v >= n) throw bad(key, `is ${describe(v)}; expected a token id in 0 .. ${n - 1} (or 0xFFFFFFFF: none)`);
    return v;
  };
  const byText = (texts) => {
    for (const t of texts) if (ids.has(t)) return ids.get(t);
    return -1;
  };

  let pre = null, merges = null;
  if (model === 'gpt2') {
    const preKey = 'tokenizer.ggml.pre';
    const name = metadata.get(preKey) ?? 'default';
    if (typeof name !== 'string' || !PRE_TOKENIZERS.has(name)) {
      throw bad(preKey, `is ${describe(name)}; expected one of the pre-tokenizers this build has: ${[...PRE_TOKENIZERS.keys()].join(', ')}`);
    }
    pre = name;
    const mergesKey = 'tokenizer.ggml.merges';
    const list = metadata.get(mergesKey);
    if (!Array.isArray(list)) throw bad(mergesKey, `is ${describe(list)}; expected an array of "left right" strings (a gpt2 tokenizer needs its merges)`);
    merges = new Map();
    for (let r = 0; r < list.length; r++) {
      const m = list[r];
      const cut = typeof m === 'string' ? m.indexOf(' ', 1) : -1;
      if (cut < 0) throw bad(`${mergesKey}[${r}]`, `is ${describe(m)}; expected "left right" (two token texts and one space)`);
      const left = m.slice(0, cut), right = m.slice(cut + 1);
      if (!ids.has(left) || !ids.has(right) || !ids.has(left + right)) {
        const [what, text] = !ids.has(left) ? ['left', left] : !ids.has(right) ? ['right', right] : ['merged', left + right];
        throw bad(`${mergesKey}[${r}]`, `${shown(m)}: its ${what} text ${shown(text)} is not a token of ${tokensKey}; expected every merge to name tokens`);
      }
      if (!merges.has(m)) merges.set(m, r);
    }
  }
  const groupDefaults = pre !== null ? PRE_TOKENIZERS.get(pre) : null;

  const bos = id('tokenizer.ggml.bos_token_id', model === 'llama' && n > 1 ? 1 : -1);
  const eos = id('tokenizer.ggml.eos_token_id', model === 'llama' && n > 2 ? 2 : -1);
  id('tokenizer.ggml.unknown_token_id', -1);          // (checked; encode and decode go by token types)
  id('tokenizer.ggml.padding_token_id', -1);
  const eot = id('tokenizer.ggml.eot_token_id', byText(EOT_TEXTS));
  const eom = id('tokenizer.ggml.eom_token_id', byText(EOM_TEXTS));
  const fimIds = [['tokenizer.ggml.fim_pad_token_id', FIM_PAD_TEXTS], ['tokenizer.ggml.fim_rep_token_id', FIM_REP_TEXTS],
    ['tokenizer.ggml.fim_sep_token_id', FIM_SEP_TEXTS]].map(([key, texts]) => id(key, byText(texts)));
  const addBos = flag('tokenizer.ggml.add_bos_token', model === 'llama' ? true : groupDefaults.addBos);
  const addEos = flag('tokenizer.ggml.add_eos_token', false);
  const addSpacePrefix = flag('tokenizer.ggml.add_space_prefix', model === 'llama');
  if (addBos && bos < 0) throw bad('tokenizer.ggml.add_bos_token', 'is true but the file names no tokenizer.ggml.bos_token_id; expected a BOS id to add');
  if (addEos && eos < 0) throw bad('tokenizer.ggml.add_eos_token', 'is true but the file names no tokenizer.ggml.eos_token_id; expected an EOS id to add');

  const templateKey = 'tokenizer.chat_template';
  const chatTemplate = metadata.get(templateKey) ?? null;
  if (chatTemplate !== null && typeof chatTemplate !== 'string') throw bad(templateKey, `is ${describe(chatTemplate)}; expected a string`);

  // end of generation (llama.cpp: the tokens it recognises by text become control tokens)
  const eog = new Set();
  for (const f of fimIds) if (f >= 0) eog.add(f);
  for (const t of EOG_TEXTS) if (ids.has(t)) eog.add(ids.get(t));
  for (const e of [eos, eot, eom]) if (e >= 0) eog.add(e);
  const controlTexts = new Set([...EOG_TEXTS, ...EOT_TEXTS, ...EOM_TEXTS, ...FIM_PAD_TEXTS, ...FIM_REP_TEXTS, ...FIM_SEP_TEXTS]);
  for (const e of [eot, eom, ...eog]) if (e >= 0 && controlTexts.has(tokens[e])) types[e] = TYPE.CONTROL;

  return new GgufTokenizer({
    model, pre, tokens, scores, types, ids, merges, bos, eos, eot, addBos, addEos, addSpacePrefix, chatTemplate,
    stopTokens: Int32Array.from([...eog].sort((a, b) => a - b)),
  });
}

/** A min-heap of [priority, left index, left length, right length, ...] by priority, then left index. */
class PairHeap {
  constructor() { this.a = []; }
  get size() { return this.a.length; }
  static before(x, y) { return x[0] < y[0] || (x[0] === y[0] && x[1] < y[1]); }
  push(e) {
    const a = this.a;
    a.push(e);
    for (let i = a.length - 1; i > 0;) {
      const p = (i - 1) >> 1;
      if (!PairHeap.before(a[i], a[p])) break;
      [a[i], a[p]] = [a[p], a[i]];
      i = p;
    }
  }
  pop() {
    const a = this.a, top = a[0], last = a.pop();
    if (a.length > 0) {
      a[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1, r = l + 1;
        let m = i;
        if (l < a.length && PairHeap.before(a[l], a[m])) m = l;
        if (r < a.length && PairHeap.before(a[r], a[m])) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m], a[i]];
        i = m;
      }
    }
    return top;
  }
}

/**
 * Merges adjacent symbols (strings) while some pair has a priority (lower
 * first, then leftmost): `priority(left, right)` returns a number or
 * undefined (never merged). Returns the merged symbols in order.
 */
function mergeSymbols(symbols, priority) {
  const n = symbols.length;
  if (n < 2) return symbols;
  const text = symbols.slice();
  const next = new Int32Array(n), prev = new Int32Array(n);
  for (let i = 0; i < n; i++) { next[i] = i + 1 < n ? i + 1 : -1; prev[i] = i - 1; }
  const heap = new PairHeap();
  const candidate = (i) => {
    if (i < 0 || next[i] < 0) return;
    const j = next[i], p = priority(text[i], text[j]);
    if (p !== undefined) heap.push([p, i, text[i].length, text[j].length]);
  };
  for (let i = 0; i < n - 1; i++) candidate(i);
  while (heap.size > 0) {
    const [, i, leftLength, rightLength] = heap.pop();
    const j = next[i];
    // stale: a symbol only grows, so equal lengths mean both are as they were
    if (text[i] === null || j < 0 || text[i].length !== leftLength || text[j].length !== rightLength) continue;
    text[i] += text[j];
    text[j] = null;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    candidate(prev[i]);
    candidate(i);
  }
  const out = [];
  for (let i = 0; i >= 0; i = next[i]) out.push(text[i]);
  return out;
}

/** Splits `text` by each regex in turn (each splits the pieces of the one before; text between matches is a piece too). */
function regexSplit(text, regexes) {
  let pieces = [text];
  for (const re of regexes) {
    const out = [];
    for (const piece of pieces) {
      let last = 0;
      re.lastIndex = 0;
      for (let m; (m = re.exec(piece)) !== null;) {
        if (m[0].length === 0) { re.lastIndex++; continue; }
        if (m.index > last) out.push(piece.slice(last, m.index));
        out.push(m[0]);
        last = m.index + m[0].length;
      }
      if (last < piece.length) out.push(piece.slice(last));
    }
    pieces = out;
  }
  return pieces;
}

export class GgufTokenizer {
  #c;              // the config tokenizerFromGguf read
  #pieces;         // Uint8Array per id: what decoding gives with special = true (llama.cpp's token_to_piece)
  #silent;         // Uint8Array(n): 1 where decoding (special = false) gives nothing
  #byteId;         // Int32Array(256): SPM's <0xXX> token per byte, or -1
  #specials;       // [text, id] split out of the text before tokenizing, longest first: user-defined ...
  #allSpecials;    // ... and with { special: true } control and unknown too
  #regexes;        // gpt2: the pre-tokenizer's RegExps
  #template = null;

  constructor(c) {
    this.#c = c;
    const { tokens, types, model } = c, n = tokens.length;
    this.#byteId = new Int32Array(256).fill(-1);
    this.#silent = new Uint8Array(n);
    this.#pieces = new Array(n);
    for (let i = 0; i < n; i++) {
      const t = types[i], text = tokens[i];
      if (t === TYPE.CONTROL || t === TYPE.UNKNOWN || t === TYPE.UNUSED || t === TYPE.UNDEFINED) this.#silent[i] = 1;   // (llama.cpp prints none of them)
      const byte = t === TYPE.BYTE ? BYTE_TOKEN.exec(text) : null;
      if (byte !== null) {
        const b = parseInt(byte[1], 16);
        this.#pieces[i] = Uint8Array.of(b);
        if (this.#byteId[b] < 0) this.#byteId[b] = i;
      } else if (t === TYPE.CONTROL || t === TYPE.UNKNOWN || t === TYPE.USER_DEFINED || t === TYPE.UNUSED) {
        this.#pieces[i] = t === TYPE.UNUSED ? new Uint8Array(0) : utf8Encoder.encode(text);
      } else if (model === 'llama') {
        this.#pieces[i] = utf8Encoder.encode(text.replaceAll(SPACE, ' '));
      } else {
        this.#pieces[i] = gpt2Bytes(text);
      }
    }
    const specials = [], all = [];
    for (let i = 0; i < n; i++) {
      const t = types[i];
      if (tokens[i].length === 0) continue;
      if (t === TYPE.USER_DEFINED) { specials.push([tokens[i], i]); all.push([tokens[i], i]); }
      if (t === TYPE.CONTROL || t === TYPE.UNKNOWN) all.push([tokens[i], i]);
    }
    const longestFirst = (a, b) => b[0].length - a[0].length || a[1] - b[1];
    this.#specials = specials.sort(longestFirst);
    this.#allSpecials = all.sort(longestFirst);
    this.#regexes = model === 'gpt2' ? PRE_TOKENIZERS.get(c.pre).regexes.map((r) => new RegExp(r, 'gu')) : null;
    Object.freeze(this);
  }

  get vocabSize() { return this.#c.tokens.length; }
  /** BOS id, or -1 when the file names none. */
  get bos() { return this.#c.bos; }
  /** EOS id, or -1. */
  get eos() { return this.#c.eos; }
  /** End-of-turn id (<|eot_id|>, <|im_end|>, ...), or -1. */
  get eot() { return this.#c.eot; }
  /** The ids that end a generation (llama.cpp's end-of-generation set), ascending. */
  get stopTokens() { return this.#c.stopTokens.slice(); }
  get addBos() { return this.#c.addBos; }
  get addEos() { return this.#c.addEos; }
  get model() { return this.#c.model; }
  /** gpt2: the pre-tokenizer's name; llama: null. */
  get pre() { return this.#c.pre; }
  get chatTemplate() { return this.#c.chatTemplate; }

  /** The bytes token `id` stands for (control and user-defined tokens: their text), a copy. */
  piece(id) {
    this.#checkId(id, 'Tokenizer.piece', 'id');
    return this.#pieces[id].slice();
  }

  /** The score of token `id` (0 when the file has no scores). */
  score(id) {
    this.#checkId(id, 'Tokenizer.score', 'id');
    return this.#c.scores === null ? 0 : this.#c.scores[id];
  }

  /** The type of token `id` as llama.cpp names it ('normal', 'control', 'byte', ...). */
  tokenType(id) {
    this.#checkId(id, 'Tokenizer.tokenType', 'id');
    return ['undefined', 'normal', 'unknown', 'control', 'user-defined', 'unused', 'byte'][this.#c.types[id]];
  }

  #checkId(id, fn, name) {
    if (!Number.isInteger(id) || id < 0 || id >= this.#c.tokens.length) {
      throw new SdpaError('E_ARG', `${fn}: ${name} must be an integer in 0 .. ${this.#c.tokens.length - 1}, got ${String(id)}`);
    }
  }

  /**
   * llama.cpp's tokenize: Int32Array of ids. `bos` / `eos` (default: the
   * file's add_bos_token / add_eos_token) add BOS / EOS; `special` (default
   * false) parses control tokens' text as those tokens.
   */
  encode(text, options = {}) {
    if (typeof text !== 'string') throw new SdpaError('E_ARG', `Tokenizer.encode: text must be a string, got ${text === null ? 'null' : typeof text}`);
    const c = this.#c;
    const { bos = c.addBos, eos = c.addEos, special = false } = options ?? {};
    for (const [name, v] of [['bos', bos], ['eos', eos], ['special', special]]) {
      if (typeof v !== 'boolean') throw new SdpaError('E_ARG', `Tokenizer.encode: options.${name} must be a boolean, got ${typeof v}`);
    }
    if (bos && c.bos < 0) throw new SdpaError('E_ARG', 'Tokenizer.encode: options.bos is true but this vocab has no BOS token');
    if (eos && c.eos < 0) throw new SdpaError('E_ARG', 'Tokenizer.encode: options.eos is true but this vocab has no EOS token');
    const out = [];
    if (bos) out.push(c.bos);
    let afterSpecial = true;      // SPM: the space prefix at the start and after a special token
    for (const f of this.#partition(text.toWellFormed?.() ?? text, special ? this.#allSpecials : this.#specials)) {
      if (typeof f === 'number') { out.push(f); afterSpecial = true; continue; }
      if (c.model === 'llama') this.#encodeSpm(c.addSpacePrefix && afterSpecial ? ' ' + f : f, out);
      else this.#encodeBpe(f, out);
      afterSpecial = false;
    }
    if (eos) out.push(c.eos);
    return Int32Array.from(out);
  }

  /** The text split at special tokens' text: strings and ids (llama.cpp's tokenizer_st_partition). */
  #partition(text, specials) {
    let parts = text.length > 0 ? [text] : [];
    for (const [t, id] of specials) {
      if (!text.includes(t)) continue;
      const out = [];
      for (const p of parts) {
        if (typeof p !== 'string') { out.push(p); continue; }
        let from = 0;
        for (let at; (at = p.indexOf(t, from)) >= 0; from = at + t.length) {
          if (at > from) out.push(p.slice(from, at));
          out.push(id);
        }
        if (from < p.length) out.push(from === 0 ? p : p.slice(from));
      }
      parts = out;
    }
    return parts;
  }

  #encodeSpm(text, out) {
    const { ids, scores } = this.#c;
    const symbols = Array.from(text.replaceAll(' ', SPACE));    // one per code point
    const merged = mergeSymbols(symbols, (a, b) => {
      const id = ids.get(a + b);
      return id === undefined ? undefined : -(scores === null ? 0 : scores[id]);
    });
    for (const s of merged) {
      const id = ids.get(s);
      if (id !== undefined) { out.push(id); continue; }
      for (const b of utf8Encoder.encode(s)) {          // byte fallback
        let bid = this.#byteId[b];
        if (bid < 0 && b < 0x80) bid = ids.get(String.fromCharCode(b)) ?? -1;
        if (bid < 0) throw new SdpaError('E_ARG', `Tokenizer.encode: the text has byte 0x${b.toString(16).padStart(2, '0')} (in ${JSON.stringify(s)}), which is neither in a token nor a <0xXX> token of this vocab`);
        out.push(bid);
      }
    }
  }

  #encodeBpe(text, out) {
    const { ids, merges } = this.#c;
    const ignoreMerges = PRE_TOKENIZERS.get(this.#c.pre).ignoreMerges;
    for (const word of regexSplit(text, this.#regexes)) {
      let mapped = '';
      for (const b of utf8Encoder.encode(word)) mapped += BYTE_TO_CHAR[b];
      if (ignoreMerges && ids.has(mapped)) { out.push(ids.get(mapped)); continue; }
      for (const s of mergeSymbols(Array.from(mapped), (a, b) => merges.get(a + ' ' + b))) {
        const id = ids.get(s);
        if (id !== undefined) { out.push(id); continue; }
        for (const ch of s) { const cid = ids.get(ch); if (cid !== undefined) out.push(cid); }   // (llama.cpp drops what has no token)
      }
    }
  }

  /** The text of `ids` (decoder() over them); invalid UTF-8 becomes U+FFFD. */
  decode(ids) {
    const d = this.decoder();
    let s = '';
    for (const id of ids) s += d.push(id);
    return s + d.end();
  }

  /**
   * A streaming decoder: push(id) returns the text complete so far (a
   * character split over tokens waits for its last byte); end() the rest.
   * `prev`: the token before the first pushed one (default BOS, or the start:
   * an SPM vocab's first piece then loses its space prefix).
   */
  decoder(prev = this.#c.bos) {
    const pieces = this.#pieces, silent = this.#silent, n = pieces.length, { types, addSpacePrefix, model } = this.#c;
    if (!Number.isInteger(prev) || prev < -1 || prev >= n) {
      throw new SdpaError('E_ARG', `Tokenizer.decoder: prev must be -1 (the start) or an integer in 0 .. ${n - 1}, got ${String(prev)}`);
    }
    const utf8 = new TextDecoder('utf-8', { fatal: false });
    const startsText = (t) => t < 0 || types[t] === TYPE.CONTROL || types[t] === TYPE.UNKNOWN || types[t] === TYPE.USER_DEFINED;
    let last = prev;
    return {
      push: (id) => {
        if (!Number.isInteger(id) || id < 0 || id >= n) {
          throw new SdpaError('E_ARG', `Tokenizer.decode: id must be an integer in 0 .. ${n - 1}, got ${String(id)}`);
        }
        const before = last;
        last = id;
        if (silent[id]) return '';
        let p = pieces[id];
        if (model === 'llama' && addSpacePrefix && startsText(before) && types[id] === TYPE.NORMAL && p[0] === 0x20) p = p.subarray(1);
        return utf8.decode(p, { stream: true });
      },
      end: () => utf8.decode(),
    };
  }

  /**
   * The chat as the file's template renders it (tokenizer.chat_template, with
   * @huggingface/jinja): `messages` [{ role, content }], `addGenerationPrompt`
   * (default true) ends with the assistant's header; other options are the
   * template's variables (tools, ...). bos_token / eos_token are the vocab's.
   */
  async applyChatTemplate(messages, options = {}) {
    const fn = 'Tokenizer.applyChatTemplate';
    if (this.#c.chatTemplate === null) throw new SdpaError('E_FORMAT', `${fn}: the file has no tokenizer.chat_template; expected one to render a chat with`);
    if (!Array.isArray(messages) || messages.some((m) => m === null || typeof m !== 'object' || typeof m.role !== 'string')) {
      throw new SdpaError('E_ARG', `${fn}: messages must be an array of { role: string, content }`);
    }
    const { addGenerationPrompt = true, ...extra } = options ?? {};
    if (typeof addGenerationPrompt !== 'boolean') throw new SdpaError('E_ARG', `${fn}: options.addGenerationPrompt must be a boolean, got ${typeof addGenerationPrompt}`);
    if (this.#template === null) {
      const jinja = await chatTemplateRenderer(fn);
      try {
        this.#template = new jinja.Template(this.#c.chatTemplate);
      } catch (e) {
        throw new SdpaError('E_FORMAT', `${fn}: tokenizer.chat_template does not parse: ${e?.message ?? e}`);
      }
    }
    const text = (id) => (id >= 0 ? this.#c.tokens[id] : '');
    try {
      return this.#template.render({
        bos_token: text(this.#c.bos), eos_token: text(this.#c.eos), ...extra,
        messages, add_generation_prompt: addGenerationPrompt,
      });
    } catch (e) {
      throw new SdpaError('E_ARG', `${fn}: the chat template failed on these messages: ${e?.message ?? e}`);
    }
  }

  /**
   * The ids of a chat as llama.cpp's chat gives them to its model: the
   * template's rendering (applyChatTemplate's options) with the template's
   * own BOS text at its start and EOS text at its end taken off, encoded
   * with special tokens' text parsed and BOS / EOS added as the file asks
   * (add_bos_token, add_eos_token). So a template that writes bos_token and
   * one that does not both give BOS once.
   */
  async encodeChat(messages, options = {}) {
    let text = await this.applyChatTemplate(messages, options);
    const { bos, eos, tokens } = this.#c;
    if (bos >= 0 && tokens[bos] !== '' && text.startsWith(tokens[bos])) text = text.slice(tokens[bos].length);
    if (eos >= 0 && tokens[eos] !== '' && text.endsWith(tokens[eos])) text = text.slice(0, -tokens[eos].length);
    return this.encode(text, { bos: this.#c.addBos, eos: this.#c.addEos, special: true });
  }

  get [Symbol.toStringTag]() { return 'Tokenizer'; }
}

/** A gpt2 token's bytes: each char through the inverse byte map (a char outside it: its own UTF-8). */
function gpt2Bytes(text) {
  const out = [];
  for (const ch of text) {
    const b = CHAR_TO_BYTE.get(ch);
    if (b !== undefined) out.push(b);
    else out.push(...utf8Encoder.encode(ch));
  }
  return Uint8Array.from(out);
}

// The chat template renderer (@huggingface/jinja): imported on first use,
// unless given with setChatTemplateRenderer (a module Worker that loads this
// package by URL has no import map: it imports the renderer by URL and hands it over).
let renderer = null;

/** Gives the module @huggingface/jinja (its namespace: needs `Template`) to render chat templates with. */
export function setChatTemplateRenderer(jinja) {
  if (jinja === null || (typeof jinja !== 'object' && typeof jinja !== 'function') || typeof jinja.Template !== 'function') {
    throw new SdpaError('E_ARG', 'setChatTemplateRenderer: jinja must be the @huggingface/jinja module (an object with a Template class)');
  }
  renderer = Promise.resolve(jinja);
}

function chatTemplateRenderer(fn) {
  renderer ??= import('@huggingface/jinja').catch((e) => {
    renderer = null;
    throw new SdpaError('E_LOAD', `${fn}: could not import @huggingface/jinja (${e?.message ?? e}); where bare imports do not resolve (a module Worker, a page without an import map entry for it), import it by URL and pass it to setChatTemplateRenderer`);
  });
  return renderer;
}
