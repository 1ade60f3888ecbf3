// Module Web Worker of the chat page: the package's model (models/fortunes) on
// sdpa-wasm/llama. One conversation: its tokens, the model at its end, a fork at
// the end of the last prompt (Regenerate samples again from there, no prefill),
// and, when the cache is not float32, a float32 model fed the same tokens, whose
// logits give the top-1 agreement of the chosen dtype.
//
// Protocol (page → worker):
//   { type: 'init', pkgUrl, modelUrl, tokenizerUrl, threads, build, dtype, storage }   storage: 'indexeddb' skips OPFS, 'broken' fails every write
//   { type: 'generate', text, sampling: { temperature, topP, seed }, maxNewTokens }
//   { type: 'regenerate', sampling, maxNewTokens }      the last reply again (new seed)
//   { type: 'undo' }                                    drops the last reply (truncates the cache)
//   { type: 'dtype', dtype }                            the conversation re-run on another cache dtype
//   { type: 'stop' }                                    ends the reply being generated
//   { type: 'keep', id?, transcript }                   saves the conversation (OPFS, else IndexedDB)
//   { type: 'list' } | { type: 'restore', id } | { type: 'delete', id }   kept chats
// (worker → page):
//   { type: 'ready', info, config, crossOriginIsolated, warnings }
//   { type: 'turn', prompt: ids, promptText, ms }       the prompt appended (one forward)
//   { type: 'token', id, text, length, attentionMs, productsMs, otherMs, denseMs } (the step's time: model.timing)
//   { type: 'reply', tokens, stop, decodeTps }          decodeTps: the model's own steps (not the float32 one's beside it)
//   { type: 'state', length, dtype, bytes, agree: { same, total } | null, tokens }
//   { type: 'rerun', tokens, ms }                       a dtype switch ran the conversation again (a prefill)
//   { type: 'kept', id, savedAt, length, dtype, storage, bytes, preview, ms }
//   { type: 'chats', chats: [summary, ...] }            the kept chats, newest first
//   { type: 'restored', id, ms, length, prefilled, transcript }   prefilled: tokens run by the restore (0)
//   { type: 'error', error: { name, code, message } }

import { idbRequest } from './idb.js';
const DTYPE_PAIRS = { 'int8/int4': ['int8', 'int4'] };
let sdpa = null, lib = null, tokenizer = null, checkpoint = null;
let conv = null;       // { model, shadow, tokens: [...], pending, promptEnd, promptFork, shadowFork, dtype }
let stopRequested = false;
let busy = Promise.resolve();

const post = (m) => self.postMessage(m);
const fail = (e) => post({ type: 'error', error: { name: e?.name ?? 'Error', code: typeof e?.code === 'string' ? e.code : null, message: String(e?.message ?? e) } });

/** Lets a 'stop' message in between tokens (a macrotask, without setTimeout's clamping). */
const channel = new MessageChannel();
const yieldToEvents = () => new Promise((r) => { channel.port1.onmessage = () => r(); channel.port2.postMessage(0); });

function cacheOptions(dtype) {
  const [keyDtype, valueDtype] = DTYPE_PAIRS[dtype] ?? [dtype, dtype];
  return { keyDtype, valueDtype };
}

function newConversation(dtype, tokens = []) {
  const model = lib.loadLlama(sdpa, checkpoint, cacheOptions(dtype));
  const shadow = dtype === 'float32' ? null : lib.loadLlama(sdpa, checkpoint);
  return { model, shadow, tokens, pending: null, promptEnd: 0, promptFork: null, shadowFork: null, dtype, agree: { same: 0, total: 0 } };
}

function disposeConversation(c) {
  for (const m of [c?.model, c?.shadow, c?.promptFork, c?.shadowFork]) m?.dispose();
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
 */
async function reply(sampling, maxNewTokens) {
  stopRequested = false;
  const decoder = tokenizer.decoder(conv.tokens.at(-1) ?? 1);
  const V = conv.model.config.vocabSize;
  const logits = new Float32Array(V), shadowLogits = new Float32Array(V), one = new Int32Array(1);
  const it = conv.model.stream([], { ...sampling, maxNewTokens });
  const out = [];
  let modelMs = 0, stop, r = it.next();
  for (;;) {
    const id = r.value;
    out.push(id);
    post({ type: 'token', id, text: decoder.push(id), length: conv.model.length, ...conv.model.timing });
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
  post({ type: 'reply', tokens: out, stop, decodeTps: out.length > 1 ? (out.length - 1) / modelMs * 1000 : null });
  state();
}

// ---- kept chats: OPFS, or IndexedDB where OPFS cannot be written ----
// A chat is its model's saved state (LlamaModel.saveStream: the KV cache of every layer) with
// the conversation in its meta, and, for a cache that is not float32, the float32 model's
// state beside it. Names: <id>.kv and <id>.f32.kv in OPFS; the same keys in IndexedDB.
const DB = 'sdpa-chat';

const idb = (mode, f) => idbRequest(DB, 'chats', mode, f);

let useOpfs = true;     // init's storage: 'indexeddb' turns OPFS off (to try the fallback where OPFS works)
let storageBroken = false;   // init's storage: 'broken' makes every write fail as a full disk would (to see the error shown)
async function opfs() {
  if (!useOpfs) return null;
  try { return await navigator.storage.getDirectory(); } catch { return null; }
}

/** Writes `key`: a model's state (streamed to OPFS) or a JSON summary; IndexedDB where OPFS cannot be written. */
async function put(key, { model, meta, json }) {
  if (storageBroken) throw new DOMException(`cannot write ${key}: the storage quota is exceeded (simulated by ?storage=broken)`, 'QuotaExceededError');
  const dir = await opfs();
  if (dir) {
    let writable = null;
    try {
      writable = await (await dir.getFileHandle(key, { create: true })).createWritable();
    } catch { /* no createWritable here (Safari's workers): IndexedDB */ }
    if (writable) {
      if (model) await model.saveStream({ meta }).pipeTo(writable);   // chunk by chunk: no second copy in memory
      else { await writable.write(JSON.stringify(json)); await writable.close(); }
      return 'OPFS';
    }
  }
  await idb('readwrite', (store) => store.put(model ? model.save({ meta }) : JSON.stringify(json), key));
  return 'IndexedDB';
}

/** What put stored under key: a File (OPFS), or bytes / a string (IndexedDB); null if none. */
async function get(key) {
  const dir = await opfs();
  if (dir) {
    try { return await (await dir.getFileHandle(key)).getFile(); } catch { /* not in OPFS */ }
  }
  try { return (await idb('readonly', (store) => store.get(key))) ?? null; } catch { return null; }
}

async function keys() {
  const all = new Set();
  const dir = await opfs();
  if (dir) for await (const [name, h] of dir.entries()) if (h.kind === 'file') all.add(name);
  try { for (const k of await idb('readonly', (store) => store.getAllKeys())) all.add(k); } catch { /* none */ }
  return [...all];
}

async function remove(key) {
  const dir = await opfs();
  if (dir) { try { await dir.removeEntry(key); } catch { /* not in OPFS */ } }
  try { await idb('readwrite', (store) => store.delete(key)); } catch { /* no IndexedDB */ }
}

/** The kept chats' summaries, newest first. */
async function listChats() {
  const out = [];
  for (const k of await keys()) {
    if (!/^chat-[\w-]+\.json$/.test(k)) continue;
    const v = await get(k);
    try { out.push(JSON.parse(typeof v === 'string' ? v : await v.text())); } catch { /* a broken summary: skip it */ }
  }
  return out.sort((a, b) => b.savedAt - a.savedAt);
}

const handlers = {
  async init(m) {
    useOpfs = m.storage !== 'indexeddb';
    storageBroken = m.storage === 'broken';
    lib = await import(m.pkgUrl + 'llama/index.js');
    const { createSdpa } = await import(m.pkgUrl + 'index.js');
    const warnings = [];
    const warn = console.warn;
    console.warn = (...a) => { warnings.push(a.join(' ')); warn(...a); };
    const options = { threads: m.threads ?? 'auto' };
    if (m.build) options.build = m.build;
    try { sdpa = await createSdpa(options); } finally { console.warn = warn; }
    const [c, t] = await Promise.all([m.modelUrl, m.tokenizerUrl].map(async (u) => {
      const r = await fetch(u);
      if (!r.ok) throw new Error(`${u}: HTTP ${r.status}`);
      return new Uint8Array(await r.arrayBuffer());
    }));
    checkpoint = c;
    conv = newConversation(m.dtype ?? 'float32');
    tokenizer = lib.loadTokenizer(t, { vocabSize: conv.model.config.vocabSize });
    // (state first: the page ends a request at 'state', and init's end is 'ready', after which it may autostart)
    state();
    post({ type: 'ready', info: sdpa.info, config: conv.model.config, crossOriginIsolated: self.crossOriginIsolated, warnings });
    try { post({ type: 'chats', chats: await listChats() }); } catch (e) { fail(e); }
  },
  async generate(m) {
    const first = conv.tokens.length === 0 && conv.pending === null;
    const ids = [...(conv.pending !== null ? [conv.pending] : []), ...tokenizer.encode(m.text, { bos: first })];
    if (ids.length === 0) throw new Error('nothing to generate from: type a prompt');
    const t0 = performance.now();
    feed(ids);
    const ms = performance.now() - t0;
    conv.pending = null;
    conv.promptFork?.dispose(); conv.shadowFork?.dispose();
    conv.promptFork = conv.model.fork();
    conv.shadowFork = conv.shadow?.fork() ?? null;
    conv.promptEnd = conv.model.length;
    post({ type: 'turn', prompt: ids, promptText: m.text, ms, promptTps: ids.length / ms * 1000, length: conv.model.length });
    await reply(m.sampling, m.maxNewTokens);
  },
  async regenerate(m) {
    if (!conv.promptFork) throw new Error('nothing to regenerate: generate first');
    conv.model.dispose(); conv.shadow?.dispose();
    conv.model = conv.promptFork.fork();           // the prompt's pages, shared: no prefill
    conv.shadow = conv.shadowFork?.fork() ?? null;
    conv.tokens.length = conv.promptEnd;
    conv.pending = null;
    await reply(m.sampling, m.maxNewTokens);
  },
  async undo() {
    if (!conv.promptFork) throw new Error('nothing to undo');
    conv.model.truncate(conv.promptEnd);
    conv.shadow?.truncate(conv.promptEnd);
    conv.tokens.length = conv.promptEnd;
    conv.pending = null;
    // (the truncated model has no logits of its own: the next prompt brings them; Regenerate forks the prompt again)
    state();
  },
  async keep(m) {
    if (!conv.model.length) throw new Error('nothing to keep: generate first');
    const id = m.id ?? `c${Date.now()}`;
    const meta = { tokens: conv.tokens, pending: conv.pending, promptEnd: conv.promptEnd, dtype: conv.dtype, agree: conv.agree, transcript: m.transcript ?? null };
    const t0 = performance.now();
    const storage = await put(`chat-${id}.kv`, { model: conv.model, meta });
    if (conv.shadow) await put(`chat-${id}.f32.kv`, { model: conv.shadow, meta: null });
    const summary = { id, savedAt: Date.now(), length: conv.model.length, dtype: conv.dtype, storage, bytes: conv.model.bytes, preview: tokenizer.decode(conv.tokens.slice(-24)) };
    await put(`chat-${id}.json`, { json: summary });
    post({ type: 'kept', ...summary, ms: performance.now() - t0 });
    post({ type: 'chats', chats: await listChats() });
  },
  async list() {
    post({ type: 'chats', chats: await listChats() });
  },
  async delete(m) {
    for (const k of [`chat-${m.id}.kv`, `chat-${m.id}.f32.kv`, `chat-${m.id}.json`]) await remove(k);
    post({ type: 'chats', chats: await listChats() });
  },
  async restore(m) {
    const source = await get(`chat-${m.id}.kv`);
    if (!source) throw new Error(`no kept chat ${m.id}`);
    const t0 = performance.now();
    const fed0 = fedTokens;
    // a restore makes a model with the weights of the one it is called on: no second copy of them
    const restored = await conv.model.restore(source);     // a File (OPFS) or bytes (IndexedDB)
    const meta = restored.meta;
    let shadow = null;
    if (meta.dtype !== 'float32') {
      const s2 = await get(`chat-${m.id}.f32.kv`);
      shadow = s2 ? (await conv.model.restore(s2)).model : null;
    }
    const ms = performance.now() - t0;
    disposeConversation(conv);
    conv = {
      model: restored.model, shadow, tokens: meta.tokens, pending: meta.pending, promptEnd: meta.promptEnd,
      promptFork: null, shadowFork: null, dtype: meta.dtype, agree: shadow ? meta.agree : { same: 0, total: 0 },
    };
    post({ type: 'restored', id: m.id, ms, length: conv.model.length, prefilled: fedTokens - fed0, transcript: meta.transcript });
    state();
  },
  async dtype(m) {
    const tokens = conv.tokens.slice(), pending = conv.pending, promptEnd = conv.promptEnd;
    disposeConversation(conv);
    conv = newConversation(m.dtype);
    const t0 = performance.now();
    if (tokens.length) {
      feed(tokens.slice(0, promptEnd));
      conv.promptFork = conv.model.fork();
      conv.shadowFork = conv.shadow?.fork() ?? null;
      conv.promptEnd = promptEnd;
      if (tokens.length > promptEnd) feed(tokens.slice(promptEnd));
    }
    conv.pending = pending;
    post({ type: 'rerun', tokens: tokens.length, ms: performance.now() - t0 });
    state();
  },
};

self.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'stop') { stopRequested = true; return; }
  busy = busy.then(() => handlers[m.type](m)).catch(fail);
};
