// vocab-gguf.mjs: a Hugging Face tokenizer (tokenizer.json + tokenizer_config.json)
// as GGUF tokenizer.* metadata, the keys llama.cpp's convert_hf_to_gguf.py writes.
// For scripts/tokenizer-json-to-gguf.mjs and the tests; not part of the package.
//
//   vocabFromTokenizerJson(tokenizerJson, tokenizerConfig = {}, { pre } = {})
//     -> { entries: [[key, type, value], ...] (gguf-writer's metadata), model, pre, vocabSize }
//   vocabFromTokenizerBin(tokenizer) -> entries: a llama2.c tokenizer.bin (loadTokenizer's) as an SPM vocab
//
// What it takes (a BPE model; other HF models are an Error naming what was found):
//   - byte-level BPE (a ByteLevel pre-tokenizer or decoder) -> tokenizer.ggml.model "gpt2": the vocab, its
//     merges, and tokenizer.ggml.pre named from the pre-tokenizer's regex (llama-bpe, qwen2, smollm, gpt-2;
//     `pre` overrides);
//   - SentencePiece-style BPE (byte_fallback, spaces as U+2581) -> "llama": the vocab with scores made from
//     the merges (a token's score is minus the rank of the first merge that makes it: SPM's merge by highest
//     score then follows the HF merge order; llama.cpp's own converter writes -1000 for every token of such
//     a file, which leaves SPM merging to position alone).
//   - ids without a token (a vocab with gaps) become "[PAD<id>]", type unused (as convert_hf_to_gguf.py).
//   - token types: added tokens that are special, or look special (<|...|>), control; other added tokens
//     user-defined; <0xXX> byte; the unk token unknown; the rest normal.
//   - bos / eos / unk / pad ids from tokenizer_config's *_token; add_bos_token / add_eos_token from it, or
//     from the post-processor's template; tokenizer.chat_template from it (a named list: its "default").

const SPACE = '\u2581';
const TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 };

// Pre-tokenizer regexes as tokenizer.json spells them -> llama.cpp's tokenizer.ggml.pre
const LLAMA3_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const flat = (node, key) => (node == null ? [] : node.type === 'Sequence' ? (node[key] ?? []).flatMap((x) => flat(x, key)) : [node]);
const tokenText = (t) => (t == null ? null : typeof t === 'string' ? t : typeof t.content === 'string' ? t.content : null);

function detectPre(json) {
  const pres = flat(json.pre_tokenizer, 'pretokenizers');
  const regexes = pres.filter((p) => p.type === 'Split').map((p) => p.pattern?.Regex);
  const byteLevel = pres.find((p) => p.type === 'ByteLevel');
  const digits = pres.find((p) => p.type === 'Digits');
  if (regexes.length === 1 && regexes[0] === LLAMA3_REGEX) return 'llama-bpe';
  if (regexes.length === 1 && regexes[0] === QWEN2_REGEX) return 'qwen2';
  if (regexes.length === 0 && byteLevel?.use_regex !== false && digits?.individual_digits === true && pres.length === 2) return 'smollm';
  if (regexes.length === 0 && byteLevel?.use_regex !== false && pres.length === 1) return 'gpt-2';
  throw new Error(`vocab-gguf: no llama.cpp pre-tokenizer name for this pre_tokenizer (${JSON.stringify(json.pre_tokenizer).slice(0, 300)}); give one with --pre`);
}

export function vocabFromTokenizerJson(json, config = {}, { pre = null } = {}) {
  const m = json?.model;
  if (m?.type !== 'BPE' || typeof m.vocab !== 'object' || !Array.isArray(m.merges)) {
    throw new Error(`vocab-gguf: expected a BPE model with a vocab and merges, got model.type ${JSON.stringify(m?.type)}`);
  }
  const byteLevel = [...flat(json.pre_tokenizer, 'pretokenizers'), ...flat(json.decoder, 'decoders')].some((x) => x.type === 'ByteLevel');
  const spm = !byteLevel && (m.byte_fallback === true || JSON.stringify(json.normalizer ?? json.pre_tokenizer ?? '').includes(SPACE));
  if (!byteLevel && !spm) throw new Error('vocab-gguf: the BPE model is neither byte-level (ByteLevel) nor SentencePiece-style (byte_fallback / U+2581)');
  const model = byteLevel ? 'gpt2' : 'llama';

  const byId = new Map();
  for (const [text, id] of Object.entries(m.vocab)) byId.set(id, text);
  const added = new Map();
  for (const a of json.added_tokens ?? []) { byId.set(a.id, a.content); added.set(a.id, a); }
  let n = 0;
  for (const i of byId.keys()) n = Math.max(n, i + 1);
  const tokens = [], types = new Int32Array(n);
  const unkText = tokenText(config.unk_token) ?? m.unk_token ?? null;
  const looksSpecial = (t) => ['<pad>', '<mask>'].includes(t) || (t.startsWith('<|') && t.endsWith('|>'));
  for (let i = 0; i < n; i++) {
    const t = byId.get(i);
    if (t === undefined) { tokens.push(`[PAD${i}]`); types[i] = TYPE.UNUSED; continue; }
    tokens.push(t);
    if (added.has(i)) types[i] = t === unkText ? TYPE.UNKNOWN : added.get(i).special || looksSpecial(t) ? TYPE.CONTROL : TYPE.USER_DEFINED;
    else if (spm && /^<0x[0-9A-F]{2}>$/.test(t)) types[i] = TYPE.BYTE;
    else types[i] = t === unkText ? TYPE.UNKNOWN : TYPE.NORMAL;
  }
  const merges = m.merges.map((x) => (Array.isArray(x) ? x.join(' ') : x));

  const entries = [
    ['general.architecture', 'STRING', 'llama'],
    ['general.name', 'STRING', config.name_or_path ?? config.tokenizer_class ?? 'vocab'],
    ['tokenizer.ggml.model', 'STRING', model],
  ];
  if (model === 'gpt2') {
    pre ??= detectPre(json);
    entries.push(['tokenizer.ggml.pre', 'STRING', pre]);
    entries.push(['tokenizer.ggml.tokens', ['ARRAY', 'STRING'], tokens]);
    entries.push(['tokenizer.ggml.token_type', ['ARRAY', 'INT32'], types]);
    entries.push(['tokenizer.ggml.merges', ['ARRAY', 'STRING'], merges]);
  } else {
    const ids = new Map(tokens.map((t, i) => [t, i]));
    const scores = new Float32Array(n);
    const made = new Set();
    merges.forEach((x, rank) => {
      const id = ids.get(x.replace(' ', ''));
      if (id !== undefined && !made.has(id)) { made.add(id); scores[id] = -rank; }
    });
    // tokens no merge makes (single chars, control, bytes) keep 0 as SentencePiece gives them;
    // a normal multi-char token no merge makes (HF never produces it) goes below every merge
    for (let i = 0; i < n; i++) if (!made.has(i) && types[i] === TYPE.NORMAL && [...tokens[i]].length > 1) scores[i] = -(merges.length + i);
    const normalizer = JSON.stringify(json.normalizer ?? null), preTok = JSON.stringify(json.pre_tokenizer ?? null);
    const prepends = normalizer.includes('"Prepend"') || (preTok.includes('Metaspace') && !preTok.includes('"never"'));
    entries.push(['tokenizer.ggml.pre', 'STRING', 'default']);
    entries.push(['tokenizer.ggml.tokens', ['ARRAY', 'STRING'], tokens]);
    entries.push(['tokenizer.ggml.scores', ['ARRAY', 'FLOAT32'], scores]);
    entries.push(['tokenizer.ggml.token_type', ['ARRAY', 'INT32'], types]);
    entries.push(['tokenizer.ggml.add_space_prefix', 'BOOL', prepends]);
  }

  const idOf = (t) => { const text = tokenText(t); if (text === null) return null; const i = tokens.indexOf(text); return i >= 0 ? i : null; };
  for (const [key, field] of [['bos', 'bos_token'], ['eos', 'eos_token'], ['unknown', 'unk_token'], ['padding', 'pad_token']]) {
    const id = idOf(config[field]);
    if (id !== null) entries.push([`tokenizer.ggml.${key}_token_id`, 'UINT32', id]);
  }
  // add_bos / add_eos: tokenizer_config's, else the post-processor's template (a special token first / last)
  const single = flat(json.post_processor, 'processors').find((p) => p.type === 'TemplateProcessing')?.single ?? [];
  const bosText = tokenText(config.bos_token), eosText = tokenText(config.eos_token);
  const addBos = config.add_bos_token ?? (single.length > 0 && single[0].SpecialToken !== undefined && (bosText === null || single[0].SpecialToken.id === bosText));
  const addEos = config.add_eos_token ?? (single.length > 1 && single.at(-1).SpecialToken !== undefined && single.at(-1).SpecialToken.id === eosText);
  if (addBos && idOf(config.bos_token) === null && single[0]?.SpecialToken) {
    const id = tokens.indexOf(single[0].SpecialToken.id);
    if (id >= 0) entries.push(['tokenizer.ggml.bos_token_id', 'UINT32', id]);
  }
  entries.push(['tokenizer.ggml.add_bos_token', 'BOOL', Boolean(addBos)]);
  entries.push(['tokenizer.ggml.add_eos_token', 'BOOL', Boolean(addEos)]);
  let template = config.chat_template ?? null;
  if (Array.isArray(template)) template = template.find((t) => t.name === 'default')?.template ?? template[0]?.template ?? null;
  if (typeof template === 'string') entries.push(['tokenizer.chat_template', 'STRING', template]);
  return { entries, model, pre: model === 'gpt2' ? pre : null, vocabSize: n };
}

/**
 * A llama2.c tokenizer (loadTokenizer of a tokenizer.bin) as an SPM vocab, as llama.cpp's
 * convert-llama2c-to-ggml writes it: ids 0 1 2 as <unk> (unknown) <s> </s> (control), <0xXX> pieces
 * byte, the rest normal, spaces as U+2581, the scores as they are; BOS 1, EOS 2.
 */
export function vocabFromTokenizerBin(tokenizer) {
  const n = tokenizer.vocabSize, tokens = [], scores = new Float32Array(n), types = new Int32Array(n);
  const dec = new TextDecoder();
  for (let i = 0; i < n; i++) {
    let text = dec.decode(tokenizer.piece(i));
    let type = /^<0x[0-9A-Fa-f]{2}>$/.test(text) ? TYPE.BYTE : TYPE.NORMAL;
    if (i === 0) { text = '<unk>'; type = TYPE.UNKNOWN; } else if (i === 1) { text = '<s>'; type = TYPE.CONTROL; } else if (i === 2) { text = '</s>'; type = TYPE.CONTROL; }
    tokens.push(text.replaceAll(' ', SPACE));
    scores[i] = tokenizer.score(i);
    types[i] = type;
  }
  return [
    ['general.architecture', 'STRING', 'llama'], ['tokenizer.ggml.model', 'STRING', 'llama'],
    ['tokenizer.ggml.tokens', ['ARRAY', 'STRING'], tokens], ['tokenizer.ggml.scores', ['ARRAY', 'FLOAT32'], scores],
    ['tokenizer.ggml.token_type', ['ARRAY', 'INT32'], types],
    ['tokenizer.ggml.bos_token_id', 'UINT32', 1], ['tokenizer.ggml.eos_token_id', 'UINT32', 2],
  ];
}
