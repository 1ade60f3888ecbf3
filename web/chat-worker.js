// Module Web Worker of the chat page: the package's model (models/fortunes) on
// sdpa-wasm/llama. One conversation: its tokens, the model at its end, a fork at
// the end of the last prompt (Regenerate samples again from there, no prefill),
// and, when the cache is not float32, a float32 model fed the same tokens, whose
// logits give the top-1 agreement of the chosen dtype.
//
// Protocol (page → worker):
//   { type: 'init', pkgUrl, modelUrl, tokenizerUrl, threads, build, dtype }
//   { type: 'generate', text, sampling: { temperature, topP, seed }, maxNewTokens }
//   { type: 'regenerate', sampling, maxNewTokens }      the last reply again (new seed)
//   { type: 'undo' }                                    drops the last reply (truncates the cache)
//   { type: 'dtype', dtype }                            the conversation re-run on another cache dtype
//   { type: 'stop' }                                    ends the reply being generated
// (worker → page):
//   { type: 'ready', info, config, crossOriginIsolated, warnings }
//   { type: 'turn', prompt: ids, promptText, ms }       the prompt appended (one forward)
//   { type: 'token', id, text, length, attentionMs, denseMs }
//   { type: 'reply', tokens, stop, promptTps, decodeTps }
//   { type: 'state', length, dtype, bytes, agree: { same, total } | null, tokens }
//   { type: 'error', error: { name, code, message } }

const DTYPE_PAIRS = { 'int8/int4': ['int8', 'int4'] };
let sdpa = null, lib = null, tokenizer = null, checkpoint = null;
let conv = null;       // { model, shadow, tokens: [...], pending, promptEnd, promptFork, shadowFork, dtype }
let stopRequested = false;
let busy = Promise.resolve();

const post = (m) => self.postMessage(m);
const fail = (e) => post({ type: 'error', error: { name: e?.name ?? 'Error', code: e?.code ?? null, message: String(e?.message ?? e) } });

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

function argmaxRows(logits, V) {
  const out = [];
  for (let r = 0; r < logits.length / V; r++) {
    let best = 0;
    for (let j = 1; j < V; j++) if (logits[r * V + j] > logits[r * V + best]) best = j;
    out.push(best);
  }
  return out;
}

/** Appends ids to the model (and the shadow); counts top-1 agreement over the rows. */
function feed(ids) {
  const V = conv.model.config.vocabSize;
  const logits = conv.model.forward(ids);
  if (conv.shadow) {
    const a = argmaxRows(logits, V), b = argmaxRows(conv.shadow.forward(ids), V);
    for (let i = 0; i < a.length; i++) { conv.agree.total++; if (a[i] === b[i]) conv.agree.same++; }
  }
  conv.tokens.push(...ids);
}

function state() {
  post({
    type: 'state', length: conv.model.length, dtype: conv.dtype, bytes: conv.model.bytes,
    agree: conv.shadow ? { ...conv.agree } : null, tokens: conv.tokens.slice(), pending: conv.pending,
  });
}

/** Samples a reply from the model's last logits, token by token, appending each but the last. */
async function reply(sampling, maxNewTokens) {
  stopRequested = false;
  const decoder = tokenizer.decoder(conv.tokens.at(-1) ?? 1);
  const sampler = lib.createSampler(conv.model.config.vocabSize, sampling);
  const V = conv.model.config.vocabSize;
  const logits = new Float32Array(V), shadowLogits = new Float32Array(V), one = new Int32Array(1);
  // the first token comes from the logits of the prompt's last row (the model holds them)
  let next = sampler.sample(conv.model.lastLogits(logits));
  const out = [];
  const t0 = performance.now();
  let stop = 'maxNewTokens';
  for (let k = 0; ; k++) {
    out.push(next);
    post({ type: 'token', id: next, text: decoder.push(next), length: conv.model.length, ...conv.model.timing });
    if (next === lib.EOS || next === lib.BOS) { stop = 'stop'; break; }
    if (k + 1 >= maxNewTokens) break;
    if (conv.model.length >= conv.model.maxSeqLen) { stop = 'length'; break; }
    await yieldToEvents();
    if (stopRequested) { stop = 'stopped'; break; }
    one[0] = next;
    conv.model.forward(one, { out: logits });
    if (conv.shadow) {
      conv.shadow.forward(one, { out: shadowLogits });
      conv.agree.total++;
      if (lib.argmax(logits) === lib.argmax(shadowLogits)) conv.agree.same++;
    }
    conv.tokens.push(next);
    next = sampler.sample(logits);
  }
  conv.pending = out.at(-1);       // sampled, not appended: the next turn starts with it
  const s = (performance.now() - t0) / 1000;
  post({ type: 'reply', tokens: out, stop, decodeTps: out.length > 1 ? (out.length - 1) / s : null });
  state();
}

const handlers = {
  async init(m) {
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
    post({ type: 'ready', info: sdpa.info, config: conv.model.config, crossOriginIsolated: self.crossOriginIsolated, warnings });
    state();
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
  async dtype(m) {
    const tokens = conv.tokens.slice(), pending = conv.pending, promptEnd = conv.promptEnd;
    disposeConversation(conv);
    conv = newConversation(m.dtype);
    if (tokens.length) {
      feed(tokens.slice(0, promptEnd));
      conv.promptFork = conv.model.fork();
      conv.shadowFork = conv.shadow?.fork() ?? null;
      conv.promptEnd = promptEnd;
      if (tokens.length > promptEnd) feed(tokens.slice(promptEnd));
    }
    conv.pending = pending;
    state();
  },
};

self.onmessage = (e) => {
  const m = e.data;
  if (m.type === 'stop') { stopRequested = true; return; }
  busy = busy.then(() => handlers[m.type](m)).catch(fail);
};
