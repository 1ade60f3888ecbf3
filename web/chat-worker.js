// Module Web Worker of the chat page: a model on sdpa-wasm/llama, the package's
// own (models/fortunes, a llama2.c checkpoint: the default) or a GGUF file the
// user opens (a File, or a URL: loadGguf streams its weights into the wasm heap,
// no JS copy). One conversation: its tokens, the model at its end, a fork at
// the end of the last prompt (Regenerate samples again from there, no prefill),
// and, for the shipped model when the cache is not float32, a float32 model fed
// the same tokens, whose logits give the top-1 agreement of the chosen dtype (an
// opened file's weights are held once: no second model beside it).
// A file with a chat template (tokenizer.chat_template) is a chat: each turn is
// the whole conversation rendered by tokenizer.applyChatTemplate, of which only
// the tokens past the ones the cache already holds are run.
//
// Protocol (page → worker):
//   { type: 'init', pkgUrl, modelUrl, tokenizerUrl, jinjaUrl, threads, build, dtype, storage, attempt, hangAtLoad }   attempt: restarts so far (worker-watch.js)   storage: 'indexeddb' skips OPFS, 'broken' fails every write
//   { type: 'open', file: File } | { type: 'open', url }   a GGUF: inspected (a card), then loaded (progress)
//   { type: 'cancel' }                                  aborts the load under way (loadGguf's signal)
//   { type: 'shipped' }                                 back to the package's model
//   { type: 'generate', text, sampling: { temperature, topP, seed }, maxNewTokens }
//   { type: 'regenerate', sampling, maxNewTokens }      the last reply again (new seed)
//   { type: 'undo' }                                    drops the last reply (truncates the cache)
//   { type: 'dtype', dtype }                            the conversation re-run on another cache dtype
//   { type: 'stop' }                                    ends the reply being generated
//   { type: 'keep', id?, transcript }                   saves the conversation (OPFS, else IndexedDB)
//   { type: 'list' } | { type: 'restore', id } | { type: 'delete', id }   kept chats
// (worker → page):
//   { type: 'alive' }   every 0.5 s while init runs (worker-watch.js: a worker silent while it loads is restarted)
//   { type: 'ready', info, config, crossOriginIsolated, warnings }
//   { type: 'card', card }                              the file's header (inspectGguf), before any weight is read
//   { type: 'progress', loaded, total, ms }             bytes of the file read so far (total: null when unknown)
//   { type: 'model', card, fingerprint, chat, maxSeqLen, config, heapBytes }   the model now open (chat: it has a template; heapBytes: the wasm heap's size)
//   { type: 'load', status: 'refused' | 'cancelled' | 'failed', message, kept }   a load that opened nothing (kept: the model still open)
//   { type: 'turn', prompt: ids, promptText, ms }       the prompt appended (one forward)
//   { type: 'token', id, text, length, attentionMs, productsMs, otherMs, denseMs } (the step's time: model.timing)
//   { type: 'reply', tokens, stop, decodeTps }          decodeTps: the model's own steps (not the float32 one's beside it)
//   { type: 'state', length, dtype, bytes, agree: { same, total } | null, tokens }
//   { type: 'rerun', tokens, ms }                       a dtype switch ran the conversation again (a prefill)
//   { type: 'kept', id, savedAt, length, dtype, storage, bytes, preview, ms }
//   { type: 'chats', chats: [summary, ...] }            the kept chats, newest first
//   { type: 'restored', id, ms, length, prefilled, transcript }   prefilled: tokens run by the restore (0)
//   { type: 'undone', turn }                            Undo dropped the last reply (and, in a chat, its user turn: turn true)
//   { type: 'error', error: { name, code, message } }

import { openStore } from './storage.js';
import { beatWhileLoading } from './worker-watch.js';
const DTYPE_PAIRS = { 'int8/int4': ['int8', 'int4'] };
let sdpa = null, lib = null;
let checkpoint = null, shippedTokenizer = null;   // the package's model: its bytes stay (a dtype switch or a failed load loads it again)
// The model open: { kind: 'shipped' | 'gguf', name, card, fingerprint, tokenizer, chat, source }
// (source: the File or the URL of an opened GGUF, read again for a KV dtype switch).
let current = null;
let tokenizer = null;
let conv = null;       // { model, shadow, tokens: [...], pending, promptEnd, turnStart, promptFork, shadowFork, dtype, agree, messages }
let stopRequested = false;
let loadAbort = null;  // the AbortController of the load under way ('cancel' aborts it)
let busy = Promise.resolve();
let pkgUrl = null;
let jinjaUrl = null, renderer = null;   // @huggingface/jinja by URL (a module Worker has no import map), handed to the tokenizers
const BIG_FILE = 64 * 2 ** 20;     // weights above this: the shipped model (and its float32 twin) is let go before the load

/** Hands the chat template renderer to the package's GGUF tokenizers, imported on the first file with a template. */
async function chatRenderer() {
  renderer ??= (async () => {
    const set = lib.setChatTemplateRenderer ?? (await import(pkgUrl + 'llama/gguf-tokenizer.js')).setChatTemplateRenderer;
    set(await import(jinjaUrl));
  })().catch((e) => { renderer = null; throw e; });
  return renderer;
}

const post = (m) => self.postMessage(m);
const errorOf = (e) => ({ name: e?.name ?? 'Error', code: typeof e?.code === 'string' ? e.code : null, message: String(e?.message ?? e) });
const fail = (e) => post({ type: 'error', error: errorOf(e) });

/** Lets a 'stop' message in between tokens (a macrotask, without setTimeout's clamping). */
const channel = new MessageChannel();
const yieldToEvents = () => new Promise((r) => { channel.port1.onmessage = () => r(); channel.port2.postMessage(0); });

function cacheOptions(dtype) {
  const [keyDtype, valueDtype] = DTYPE_PAIRS[dtype] ?? [dtype, dtype];
  return { keyDtype, valueDtype };
}

function conversation(model, shadow, dtype) {
  return {
    model, shadow, tokens: [], pending: null, promptEnd: 0, turnStart: 0, promptFork: null, shadowFork: null, dtype,
    agree: { same: 0, total: 0 }, messages: [],
  };
}

/** The package's model on a cache of `dtype`, and the float32 one beside it (its weights are 14 MB: two copies are cheap). */
function shippedConversation(dtype) {
  const model = lib.loadLlama(sdpa, checkpoint, cacheOptions(dtype));
  let shadow = null;
  try { shadow = dtype === 'float32' ? null : lib.loadLlama(sdpa, checkpoint); } catch (e) { model.dispose(); throw e; }
  return conversation(model, shadow, dtype);
}

function disposeConversation(c) {
  for (const m of [c?.model, c?.shadow, c?.promptFork, c?.shadowFork]) m?.dispose();
}

/** A model card of the shipped checkpoint, in GgufMetadata's terms (llama2.c v0: 7 int32, then float32 values). */
function shippedCard(config, bytes) {
  const { dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen } = config;
  const hs = dim / nHeads, kvDim = hs * nKvHeads;
  const perLayer = 2 * dim + 2 * dim * dim + 2 * kvDim * dim + 3 * dim * hiddenDim;
  const tied = vocabSize * dim + nLayers * perLayer + dim;
  const values = (bytes.byteLength - 28) / 4 - seqLen * hs;      // less the file's own RoPE tables (seqLen x hs/2, twice)
  return {
    format: 'llama2.c checkpoint', name: 'models/fortunes (shipped)', architecture: 'llama', parameters: values,
    tensorTypes: { F32: 2 + 9 * nLayers + (values > tied ? 1 : 0) }, contextLength: seqLen, embeddingLength: dim,
    blockCount: nLayers, headCount: nHeads, headCountKv: nKvHeads, feedForwardLength: hiddenDim, vocabSize,
    tokenizerModel: 'llama2.c tokenizer.bin', chatTemplate: false, fileBytes: bytes.byteLength, weightBytes: values * 4,
    runnable: true, problem: null, source: 'shipped',
  };
}

/** The card of a GGUF file (inspectGguf's metadata, without its Map of every key). */
function ggufCard(meta, source, fileName) {
  const types = meta.tensorTypes instanceof Map ? Object.fromEntries(meta.tensorTypes) : { ...meta.tensorTypes };
  return {
    format: `GGUF v${meta.version}`, name: meta.name || fileName, architecture: meta.architecture, parameters: meta.parameters,
    tensorTypes: types, contextLength: meta.contextLength, embeddingLength: meta.embeddingLength, blockCount: meta.blockCount,
    headCount: meta.headCount, headCountKv: meta.headCountKv, feedForwardLength: meta.feedForwardLength,
    vocabSize: meta.vocabSize, tokenizerModel: meta.tokenizerModel, chatTemplate: typeof meta.chatTemplate === 'string',
    fileBytes: meta.fileBytes, weightBytes: meta.weightBytes, runnable: meta.runnable, problem: meta.problem,
    source, fileName,
  };
}

function postModel() {
  post({
    type: 'model', name: current.name, card: current.card, fingerprint: current.fingerprint, chat: current.chat,
    maxSeqLen: conv.model.maxSeqLen, config: conv.model.config, heapBytes: sdpa.memory().heapBytes,
  });
}

/** The shipped model open again (after a load that failed once the file before it was let go). */
function backToShipped(dtype) {
  const c = shippedConversation(dtype);
  conv = c;
  current = shipped();
  tokenizer = current.tokenizer;
  postModel();
}

function shipped() {
  return {
    kind: 'shipped', name: 'models/fortunes', card: shippedCard(conv.model.config, checkpoint),
    fingerprint: conv.model.fingerprint ?? null, tokenizer: shippedTokenizer, chat: false, source: null,
  };
}

async function fetchOk(url, signal) {
  let r;
  try {
    r = await fetch(url, { signal });
  } catch (e) {
    if (signal?.aborted) throw e;
    // (a fetch refused by CORS / CORP says only "failed to fetch": say what such a server needs)
    throw new Error(`${url}: could not fetch it (${e?.message ?? e}); a file on another origin needs its server to send ` +
      `Access-Control-Allow-Origin${self.crossOriginIsolated ? ' and, for this cross-origin isolated page, Cross-Origin-Resource-Policy: cross-origin' : ''}`);
  }
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}${r.statusText ? ' ' + r.statusText : ''}`);
  return r;
}

/**
 * A stream's chunks, read into one reused 1 MiB buffer where it is a byte stream (a BYOB reader:
 * fetch bodies and Blob streams are): loadGguf copies each chunk into the heap before it asks
 * for the next, so a load leaves no file's worth of chunks behind for the garbage collector
 * (the peak memory of a 600 MB load). keep: an array that gets a copy of each chunk, or null.
 */
function chunksOf(stream) {
  let reader, buf = null;
  try { reader = stream.getReader({ mode: 'byob' }); buf = new ArrayBuffer(1 << 20); } catch { reader = stream.getReader(); }
  const it = {
    keep: null,
    async next() {
      const x = buf ? await reader.read(new Uint8Array(buf)) : await reader.read();
      if (x.done) return { done: true, value: undefined };
      if (buf) buf = x.value.buffer;            // (the read's view took the buffer over: it comes back with it)
      it.keep?.push(x.value.slice());
      return x;
    },
    cancel: () => reader.cancel().catch(() => {}),
  };
  return it;
}

/** An async iterable over chunksOf's reads; return() (loadGguf's cancel) cancels the stream unless `hold`. */
function iterable(chunks, { replay = [], hold = false } = {}) {
  return {
    [Symbol.asyncIterator]: () => {
      let i = 0;
      return {
        next: async () => (i < replay.length ? { done: false, value: replay[i++] } : chunks.next()),
        return: async () => { if (!hold) chunks.cancel(); return { done: true, value: undefined }; },
      };
    },
  };
}

const sizeOf = (r) => {
  const length = Number(r.headers.get('content-length'));
  const plain = (r.headers.get('content-encoding') ?? 'identity') === 'identity';
  return plain && Number.isSafeInteger(length) && length > 0 ? length : null;
};

/**
 * A URL's file, downloaded once: `head` gives inspectGguf the chunks it reads (copies kept);
 * `rest` gives loadGguf those again, then the rest of the download. total: the Content-Length
 * (null when not said, or encoded).
 */
async function download(url, signal) {
  const r = await fetchOk(url, signal);
  const chunks = chunksOf(r.body);
  const seen = chunks.keep = [];
  return {
    head: iterable(chunks, { hold: true }),           // (inspectGguf lets go of it: the download goes on for loadGguf)
    rest: () => { chunks.keep = null; return iterable(chunks, { replay: seen }); },
    total: sizeOf(r), cancel: chunks.cancel,
  };
}

/** loadGguf from a File, a URL or a download's rest, its progress posted at most every 100 ms (and at the end). */
async function loadFrom(source, dtype, signal, card, knownTotal = null) {
  const t0 = performance.now();
  let last = -Infinity;
  const onProgress = ({ loaded, total }) => {
    const t = performance.now();
    total ??= knownTotal;
    if (t - last < 100 && loaded !== total) return;
    last = t;
    post({ type: 'progress', loaded, total, ms: t - t0 });
  };
  post({ type: 'progress', loaded: 0, total: null, ms: 0 });
  let body = source;
  if (typeof source === 'string') {
    const r = await fetchOk(source, signal);
    knownTotal ??= sizeOf(r);
    body = iterable(chunksOf(r.body));
  } else if (source instanceof Blob) {
    knownTotal ??= source.size;
    body = iterable(chunksOf(source.stream()));
  }
  // maxChunk 128: a long prompt runs in steps of 128 rows (the activations of 512 would take a
  // 1B model's heap 45 MB more, for a prefill a little faster)
  const maxChunk = Math.min(128, card.contextLength ?? 128);
  const r = await lib.loadGguf(sdpa, body, { ...cacheOptions(dtype), maxChunk, signal, onProgress });
  if (!r.tokenizer) {
    r.model.dispose();
    throw new Error('the file has no tokenizer (tokenizer.ggml.* keys): the page needs one to turn text into tokens');
  }
  return r;
}

/** Appends ids to the model (and the shadow); counts top-1 agreement over the rows. */
let fedTokens = 0;      // tokens run through the model by a prompt or a re-run (not by restore)
function feed(ids) {
  fedTokens += ids.length;
  const V = conv.model.config.vocabSize;
  const logits = conv.model.forward(ids);
  if (conv.shadow) {
    const f32 = conv.shadow.forward(ids);
    for (let i = 0; i < ids.length; i++) {
      const row = (x) => x.subarray(i * V, (i + 1) * V);
      conv.agree.total++;
      if (lib.argmax(row(logits)) === lib.argmax(row(f32))) conv.agree.same++;
    }
  }
  conv.tokens.push(...ids);
}

/** Keeps the first n tokens of the conversation (the model, the float32 one beside it, the ids). */
function truncateTo(n) {
  if (n >= conv.tokens.length) return;
  conv.model.truncate(n);
  conv.shadow?.truncate(n);
  conv.tokens.length = n;
}

/** The ids of the whole chat, rendered by the file's template with the assistant's turn opened, as llama.cpp's chat gives them (tokenizer.encodeChat). */
async function chatIds(messages) {
  return Array.from(await tokenizer.encodeChat(messages, { addGenerationPrompt: true }));
}

function state() {
  post({
    type: 'state', length: conv.model.length, dtype: conv.dtype, bytes: conv.model.bytes,
    agree: conv.shadow ? { ...conv.agree } : null, tokens: conv.tokens.slice(), pending: conv.pending,
  });
}

/**
 * A reply: the model's own generator (model.stream: its sampler, stop tokens, maxNewTokens and
 * maxSeqLen) from the logits of the prompt's last row, a token at a time, with a yield to the
 * event loop between tokens (for Stop) and the float32 model fed each appended token.
 * Stop tokens: the tokenizer's (tokenizer.stopTokens: EOS, EOT ... as llama.cpp ends a turn) where it has them.
 */
async function reply(sampling, maxNewTokens) {
  stopRequested = false;
  const decoder = tokenizer.decoder(conv.tokens.at(-1) ?? tokenizer.bos);
  const V = conv.model.config.vocabSize;
  const logits = new Float32Array(V), shadowLogits = new Float32Array(V), one = new Int32Array(1);
  const options = { ...sampling, maxNewTokens };
  if (tokenizer.stopTokens) options.stop = tokenizer.stopTokens;
  const it = conv.model.stream([], options);
  const out = [], texts = [];
  let modelMs = 0, stop, r = it.next();
  for (;;) {
    const id = r.value;
    out.push(id);
    const text = decoder.push(id);
    texts.push(text);
    post({ type: 'token', id, text, length: conv.model.length, ...conv.model.timing });
    await yieldToEvents();
    if (stopRequested) { it.return(); stop = 'stopped'; break; }
    const t0 = performance.now();
    r = it.next();                        // appends id (unless the reply ends at it) and samples the next
    if (r.done) { stop = r.value; break; }
    modelMs += performance.now() - t0;    // (the float32 model beside it is not counted)
    conv.tokens.push(id);
    if (conv.shadow) {
      one[0] = id;
      conv.shadow.forward(one, { out: shadowLogits });
      conv.agree.total++;
      if (lib.argmax(conv.model.lastLogits(logits)) === lib.argmax(shadowLogits)) conv.agree.same++;
    }
  }
  conv.pending = out.at(-1);       // sampled, not appended: the next turn starts with it
  // a chat remembers the reply's text (the stop token's own text left out); the next turn renders it again
  if (current.chat) conv.messages.push({ role: 'assistant', content: texts.slice(0, stop === 'stop' ? -1 : undefined).join('') });
  post({ type: 'reply', tokens: out, stop, decodeTps: out.length > 1 ? (out.length - 1) / modelMs * 1000 : null });
  state();
}
// ---- kept chats: storage.js (OPFS, or IndexedDB where OPFS cannot be written) ----
// A chat is its model's saved state (LlamaModel.saveStream: the KV cache of every layer) with
// the conversation in its meta, and, for a cache that is not float32, the float32 model's
// state beside it. Names: <id>.kv and <id>.f32.kv in OPFS; the same keys in IndexedDB.
let store = openStore({ db: 'sdpa-chat', store: 'chats' });   // init's storage: 'indexeddb' skips OPFS (to try the fallback where OPFS works)
let storageBroken = false;   // init's storage: 'broken' makes every write fail as a full disk would (to see the error shown)

/** Writes `key`: a model's state (streamed to OPFS) or a JSON summary; returns where: 'OPFS' or 'IndexedDB'. */
async function put(key, { model, meta, json }) {
  if (storageBroken) throw new DOMException(`cannot write ${key}: the storage quota is exceeded (simulated by ?storage=broken)`, 'QuotaExceededError');
  const value = model ? { stream: () => model.saveStream({ meta }), bytes: () => model.save({ meta }) } : { bytes: () => JSON.stringify(json) };
  return (await store.put(key, value)).storage;
}

/** What put stored under key: a File (OPFS), or bytes / a string (IndexedDB); null if none. */
async function get(key) {
  return (await store.get(key))?.value ?? null;
}

/** The kept chats' summaries, newest first. */
async function listChats() {
  const out = [];
  for (const k of await store.keys()) {
    if (!/^chat-[\w-]+\.json$/.test(k)) continue;
    const v = await get(k);
    try { out.push(JSON.parse(typeof v === 'string' ? v : await v.text())); } catch { /* a broken summary: skip it */ }
  }
  return out.sort((a, b) => b.savedAt - a.savedAt);
}

/** The page's first message: the package, the build, the shipped model, the kept chats. */
async function init(m) {
  // a test's stand-in for Firefox's hang in `new Worker()` (worker-watch.js): this thread never runs again
  if (m.hangAtLoad && m.attempt === 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  store = openStore({ db: 'sdpa-chat', store: 'chats', opfs: m.storage !== 'indexeddb' });
  storageBroken = m.storage === 'broken';
  pkgUrl = m.pkgUrl;
  jinjaUrl = m.jinjaUrl ?? null;
  lib = await import(m.pkgUrl + 'llama/index.js');
  const { createSdpa } = await import(m.pkgUrl + 'index.js');
  const warnings = [];
  const warn = console.warn;
  console.warn = (...a) => { warnings.push(a.join(' ')); warn(...a); };
  const options = { threads: m.threads ?? 'auto' };
  if (m.build) options.build = m.build;
  try { sdpa = await createSdpa(options); } finally { console.warn = warn; }
  const [c, t] = await Promise.all([m.modelUrl, m.tokenizerUrl].map(async (u) => new Uint8Array(await (await fetchOk(u)).arrayBuffer())));
  checkpoint = c;
  conv = shippedConversation(m.dtype ?? 'float32');
  shippedTokenizer = lib.loadTokenizer(t, { vocabSize: conv.model.config.vocabSize });
  current = shipped();
  tokenizer = current.tokenizer;
  postModel();
  // (state first: the page ends a request at 'state', and init's end is 'ready', after which it may autostart)
  state();
  post({ type: 'ready', info: sdpa.info, config: conv.model.config, crossOriginIsolated: self.crossOriginIsolated, warnings });
  try { post({ type: 'chats', chats: await listChats() }); } catch (e) { fail(e); }
}

const handlers = {
  async init(m) {
    const stopBeat = beatWhileLoading(post);
    try {
      await init(m);
    } finally {
      stopBeat();
    }
  },
  /**
   * A GGUF file or URL: its header first (a card; a file that cannot run here is said before any
   * weight is read), then loadGguf with the page's KV dtype. The shipped model stays open until the
   * new one is in (a Cancel or a failure leaves it); another opened file is let go first (the heap
   * is the new one's), and a load that fails then goes back to the shipped model.
   */
  async open(m) {
    const ac = new AbortController();
    loadAbort = ac;
    const source = m.file ?? m.url;
    const label = m.file ? m.file.name : m.url;
    const dtype = m.dtype ?? conv.dtype;
    let card = null, dl = null;
    try {
      // the header only (a File is sliced; a URL's download is read as far as the header, and goes on for the load)
      if (m.url) dl = await download(m.url, ac.signal);
      const meta = await lib.inspectGguf(dl ? dl.head : m.file, { signal: ac.signal });
      card = ggufCard(meta, m.file ? 'file' : 'url', label);
      card.fileBytes ??= dl?.total ?? null;
      if (card.runnable && meta.tokenizerModel === null) {       // (the library runs it; the page needs text)
        card.runnable = false;
        card.problem = 'it has no tokenizer (tokenizer.ggml.* keys), and the page needs one to turn text into tokens';
      }
      post({ type: 'card', card });
      if (!card.runnable) {
        dl?.cancel();
        post({ type: 'load', status: 'refused', error: { name: 'Error', code: null, message: `${label} cannot run here: ${card.problem}` }, kept: current.name, card });
        return;
      }
      // the model open is let go first when it is another file, or the new one is big (the heap is the new one's);
      // the shipped model stays for a small file, so that a Cancel leaves it as it was
      if (current.kind !== 'shipped' || card.weightBytes > BIG_FILE) { disposeConversation(conv); conv = null; }
      const r = await loadFrom(dl ? dl.rest() : m.file, dtype, ac.signal, card, card.fileBytes);
      disposeConversation(conv);
      conv = conversation(r.model, null, dtype);
      tokenizer = r.tokenizer;
      // a chat template is a chat once its renderer is here; without it the model continues text, and the card says why
      let chat = typeof r.metadata.chatTemplate === 'string' && typeof tokenizer.applyChatTemplate === 'function';
      if (chat) {
        try { await chatRenderer(); } catch (e) { chat = false; card.templateProblem = `the page could not load its renderer (${e?.message ?? e})`; }
      }
      current = { kind: 'gguf', name: card.name, card, fingerprint: r.model.fingerprint ?? null, tokenizer, chat, source };
      postModel();
    } catch (e) {
      dl?.cancel();
      if (conv === null) backToShipped(dtype);
      const cancelled = ac.signal.aborted;
      post({
        type: 'load', status: cancelled ? 'cancelled' : card ? 'failed' : 'refused', card, kept: current.name,
        error: cancelled ? { name: 'AbortError', code: null, message: `the load of ${label} was cancelled; ${current.name} is open` } : errorOf(e),
      });
    } finally {
      if (loadAbort === ac) loadAbort = null;
      state();
    }
  },
  async shipped() {
    if (current.kind === 'shipped') { state(); return; }
    const dtype = conv.dtype;
    disposeConversation(conv);
    conv = null;
    backToShipped(dtype);
    state();
  },
  async generate(m) {
    let ids;
    const turnStart = conv.tokens.length;
    if (current.chat) {
      // the whole chat rendered again; only the ids past those the cache holds already are run
      conv.messages.push({ role: 'user', content: m.text });
      let full;
      try { full = await chatIds(conv.messages); } catch (e) { conv.messages.pop(); throw e; }
      let keep = 0;
      while (keep < conv.tokens.length && keep < full.length && conv.tokens[keep] === full[keep]) keep++;
      if (keep === full.length) keep--;          // at least one id to run: its logits start the reply
      truncateTo(keep);
      ids = full.slice(keep);
    } else {
      const first = conv.tokens.length === 0 && conv.pending === null;
      ids = [...(conv.pending !== null ? [conv.pending] : []), ...tokenizer.encode(m.text, { bos: first })];
      if (ids.length === 0) throw new Error('nothing to generate from: type a prompt');
    }
    const t0 = performance.now();
    feed(ids);
    const ms = performance.now() - t0;
    conv.pending = null;
    conv.turnStart = Math.min(turnStart, conv.tokens.length - ids.length);
    conv.promptFork?.dispose(); conv.shadowFork?.dispose();
    conv.promptFork = conv.model.fork();
    conv.shadowFork = conv.shadow?.fork() ?? null;
    conv.promptEnd = conv.model.length;
    post({ type: 'turn', prompt: ids, promptText: m.text, ms, promptTps: ids.length / ms * 1000, length: conv.model.length, chat: current.chat });
    await reply(m.sampling, m.maxNewTokens);
  },
  async regenerate(m) {
    if (!conv.promptFork) throw new Error('nothing to regenerate: generate first');
    conv.model.dispose(); conv.shadow?.dispose();
    conv.model = conv.promptFork.fork();           // the prompt's pages, shared: no prefill
    conv.shadow = conv.shadowFork?.fork() ?? null;
    conv.tokens.length = conv.promptEnd;
    conv.pending = null;
    if (current.chat && conv.messages.at(-1)?.role === 'assistant') conv.messages.pop();
    await reply(m.sampling, m.maxNewTokens);
  },
  async undo() {
    if (!conv.promptFork) throw new Error('nothing to undo');
    if (current.chat) {
      // a chat drops the whole turn (a template expects user and assistant turns to alternate)
      truncateTo(conv.turnStart);
      if (conv.messages.at(-1)?.role === 'assistant') conv.messages.pop();
      if (conv.messages.at(-1)?.role === 'user') conv.messages.pop();
      conv.promptFork.dispose(); conv.shadowFork?.dispose();
      conv.promptFork = conv.shadowFork = null;
    } else {
      truncateTo(conv.promptEnd);
    }
    conv.pending = null;
    // (the truncated model has no logits of its own: the next prompt brings them; Regenerate forks the prompt again)
    post({ type: 'undone', turn: current.chat });
    state();
  },
  async keep(m) {
    if (!conv.model.length) throw new Error('nothing to keep: generate first');
    const id = m.id ?? `c${Date.now()}`;
    const model = { name: current.name, fingerprint: current.fingerprint };
    const meta = {
      tokens: conv.tokens, pending: conv.pending, promptEnd: conv.promptEnd, dtype: conv.dtype, agree: conv.agree,
      transcript: m.transcript ?? null, model, messages: current.chat ? conv.messages : null,
    };
    const t0 = performance.now();
    const storage = await put(`chat-${id}.kv`, { model: conv.model, meta });
    if (conv.shadow) await put(`chat-${id}.f32.kv`, { model: conv.shadow, meta: null });
    const summary = {
      id, savedAt: Date.now(), length: conv.model.length, dtype: conv.dtype, storage, bytes: conv.model.bytes,
      preview: tokenizer.decode(conv.tokens.slice(-24)), model,
    };
    await put(`chat-${id}.json`, { json: summary });
    post({ type: 'kept', ...summary, ms: performance.now() - t0 });
    post({ type: 'chats', chats: await listChats() });
  },
  async list() {
    post({ type: 'chats', chats: await listChats() });
  },
  async delete(m) {
    for (const k of [`chat-${m.id}.kv`, `chat-${m.id}.f32.kv`, `chat-${m.id}.json`]) await store.remove(k);
    post({ type: 'chats', chats: await listChats() });
  },
  async restore(m) {
    // a chat is restored only onto the model it was kept with (its fingerprint names the weights' bytes):
    // said before its state is read (model.restore would refuse other weights too, as E_FORMAT)
    const summary = (await listChats()).find((c) => c.id === m.id);
    const keptWith = summary?.model ?? { name: 'models/fortunes', fingerprint: null };
    if (keptWith.fingerprint !== current.fingerprint && (keptWith.fingerprint !== null || current.kind !== 'shipped')) {
      throw Object.assign(new Error(`this chat was kept with ${keptWith.name}` +
        `${keptWith.fingerprint ? ` (fingerprint ${keptWith.fingerprint})` : ''}; the model open is ${current.name}` +
        `${current.fingerprint ? ` (${current.fingerprint})` : ''}. Open ${keptWith.name} to restore it.`), { name: 'ModelMismatch' });
    }
    const source = await get(`chat-${m.id}.kv`);
    if (!source) throw new Error(`no kept chat ${m.id}`);
    const t0 = performance.now();
    const fed0 = fedTokens;
    // a restore makes a model with the weights of the one it is called on: no second copy of them
    const restored = await conv.model.restore(source);     // a File (OPFS) or bytes (IndexedDB)
    const meta = restored.meta;
    let shadow = null;
    if (meta.dtype !== 'float32' && current.kind === 'shipped') {
      const s2 = await get(`chat-${m.id}.f32.kv`);
      shadow = s2 ? (await conv.model.restore(s2)).model : null;
    }
    const ms = performance.now() - t0;
    disposeConversation(conv);
    conv = {
      ...conversation(restored.model, shadow, meta.dtype), tokens: meta.tokens, pending: meta.pending, promptEnd: meta.promptEnd,
      turnStart: meta.promptEnd, agree: shadow ? meta.agree : { same: 0, total: 0 }, messages: meta.messages ?? [],
    };
    post({ type: 'restored', id: m.id, ms, length: conv.model.length, prefilled: fedTokens - fed0, transcript: meta.transcript });
    state();
  },
  async dtype(m) {
    const { tokens, pending, promptEnd, turnStart, messages } = conv;
    disposeConversation(conv);
    conv = null;
    if (current.kind === 'shipped') conv = shippedConversation(m.dtype);
    else {
      // an opened file's weights are held once: the model is loaded again (the File read again, the URL fetched again)
      const ac = new AbortController();
      loadAbort = ac;
      try {
        const r = await loadFrom(current.source, m.dtype, ac.signal, current.card);
        if ((r.model.fingerprint ?? null) !== current.fingerprint) {
          r.model.dispose();
          throw new Error(`${current.name} changed since it was opened (fingerprint ${r.model.fingerprint}, was ${current.fingerprint})`);
        }
        conv = conversation(r.model, null, m.dtype);
      } catch (e) {
        backToShipped(m.dtype);
        throw e;
      } finally {
        if (loadAbort === ac) loadAbort = null;
      }
    }
    conv.messages = messages;
    const t0 = performance.now();
    if (tokens.length) {
      feed(tokens.slice(0, promptEnd));
      conv.promptFork = conv.model.fork();
      conv.shadowFork = conv.shadow?.fork() ?? null;
      conv.promptEnd = promptEnd;
      if (tokens.length > promptEnd) feed(tokens.slice(promptEnd));
    }
    conv.pending = pending;
    conv.turnStart = turnStart;
    post({ type: 'rerun', tokens: tokens.length, ms: performance.now() - t0 });
    state();
  },
};

self.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'stop') { stopRequested = true; return; }
  if (m.type === 'cancel') { loadAbort?.abort(new DOMException('the load was cancelled', 'AbortError')); return; }
  busy = busy.then(() => handlers[m.type](m)).catch((e) => { fail(e); if (conv) state(); });
};
