// Chat page: controls, transcript, figures. The model runs in chat-worker.js.
import { watchLoad, restartWarning, MAX_RESTARTS } from './worker-watch.js';

const $ = (id) => document.getElementById(id);
const el = {
  transcript: $('transcript'), form: $('chat'), prompt: $('prompt'), generate: $('generate'), stop: $('stop'),
  regenerate: $('regenerate'), undo: $('undo'), keep: $('keep'), kept: $('kept'), keptPanel: $('kept-panel'), temperature: $('temperature'), topP: $('topP'), seed: $('seed'),
  greedy: $('greedy'), steps: $('steps'), dtype: $('dtype'), error: $('error'), plot: $('plot'),
  buildBadge: $('build-badge'), buildReason: $('build-reason'),
  modelName: $('model-name'), modelFile: $('model-file'), modelShipped: $('model-shipped'), modelCard: $('model-card'),
  loadRow: $('load-row'), loadProgress: $('load-progress'), loadStatus: $('load-status'), loadCancel: $('load-cancel'), loadNote: $('load-note'),
  len: $('s-len'), promptTps: $('s-prompt'), decodeTps: $('s-decode'), share: $('s-share'), bytes: $('s-bytes'), agree: $('s-agree'),
};

// Test hook and live state. status: loading | ready | busy | error
// model: the model open ({ name, card, fingerprint, chat, maxSeqLen, config }); card: the last file inspected;
// load: the last load ({ phase: 'inspecting' | 'loading' | 'done' | 'refused' | 'cancelled' | 'failed', name, loaded, total, mbps, etaS, message })
const chat = {
  status: 'loading', build: null, threads: null, crossOriginIsolated: !!self.crossOriginIsolated, warnings: [],
  dtype: 'float32', tokens: [], pending: null, replies: [], reply: null, stop: null, length: 0, bytes: null, agree: null,
  promptTps: null, decodeTps: null, points: [], error: null, text: '',
  chats: [], kept: null, restored: null, model: null, card: null, load: null, models: 0,
  restarts: 0, // workers ended because they fell silent while loading (worker-watch.js)
};
window.__chat = chat;
chat.open = (source) => openModel(source);     // (a test hook: a File, or a URL)

const params = new URLSearchParams(location.search);
for (const [k, input] of [['temperature', el.temperature], ['topP', el.topP], ['seed', el.seed], ['steps', el.steps], ['dtype', el.dtype]]) {
  if (params.has(k)) input.value = params.get(k);
}
if (params.get('greedy') === '1') el.greedy.checked = true;
if (params.has('prompt')) el.prompt.value = params.get('prompt');
chat.dtype = el.dtype.value;

const modelParam = params.get('model');
let autostart = params.get('autostart') === '1';

let worker = null;   // (startWorker, at the end of the wiring)
const send = (m) => worker.postMessage(m);
let replyNode = null, userNode = null;

function setBusy(busy, status = busy ? 'busy' : 'ready') {
  chat.status = status;
  el.generate.disabled = busy;
  el.modelFile.disabled = busy;
  el.modelShipped.disabled = busy;
  el.loadCancel.disabled = status !== 'loading';
  el.stop.disabled = !busy;
  el.regenerate.disabled = busy || chat.replies.length === 0;
  el.undo.disabled = busy || chat.replies.length === 0;
  el.dtype.disabled = busy;
  el.keep.disabled = busy || chat.length === 0;
  for (const b of el.kept.querySelectorAll('button')) b.disabled = busy;
}

function sampling() {
  const seed = Number(el.seed.value) || 0;
  return { temperature: el.greedy.checked ? 0 : Number(el.temperature.value), topP: Number(el.topP.value), seed };
}

function span(cls, text) {
  const s = document.createElement('span');
  s.className = cls;
  s.textContent = text;
  el.transcript.append(s);
  return s;
}

function drawStack() {
  const c = el.plot, g = c.getContext('2d');
  const dpr = window.devicePixelRatio || 1, W = c.clientWidth || 600, H = c.clientHeight || 200;
  c.width = Math.round(W * dpr); c.height = Math.round(H * dpr);
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, W, H);
  const pts = chat.points, pad = 34;
  // the scale of the steady steps: the first steps (the JIT compiling the dense loops) may be cut off
  const totals = pts.map(([, a, d]) => a + d).sort((p, q) => p - q);
  const xMax = 512, yMax = Math.max(0.5, totals[Math.floor(totals.length * 0.9)] ?? 1) * 1.5;
  g.strokeStyle = '#d9dee5'; g.fillStyle = '#5b6573'; g.font = '11px system-ui';
  g.strokeRect(pad, 6, W - pad - 6, H - pad);
  g.fillText(`${yMax.toFixed(1)} ms`, 2, 14); g.fillText('0', pad - 10, H - pad + 4);
  g.fillText('context (tokens)', W / 2 - 40, H - 6); g.fillText(String(xMax), W - 30, H - pad + 14);
  const x = (v) => pad + (W - pad - 6) * v / xMax, y = (v) => 6 + (H - pad - 6) * (1 - v / yMax);
  const bw = Math.max(1, (W - pad) / xMax);
  for (const [len, a, d] of pts) {
    const top = (v) => y(Math.min(v, yMax));
    g.fillStyle = '#1d5fb4'; g.fillRect(x(len), top(a), bw, y(0) - top(a));
    g.fillStyle = '#b9c2ce'; g.fillRect(x(len), top(a + d), bw, top(a) - top(a + d));
  }
  g.fillStyle = '#1d5fb4'; g.fillRect(W - 230, 10, 10, 10); g.fillStyle = '#1d2430'; g.fillText('our attention', W - 216, 19);
  // (the rest: the weight products, norms and SwiGLU, in wasm too)
  g.fillStyle = '#b9c2ce'; g.fillRect(W - 130, 10, 10, 10); g.fillStyle = '#1d2430'; g.fillText('the rest of a step', W - 116, 19);
}

const MB = (bytes) => `${(bytes / 1e6).toFixed(bytes < 1e7 ? 2 : 1)} MB`;
const count = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)} M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} K` : String(n));

/** The model card: what the file's header says (inspectGguf: before any weight is read), and the model once open. */
function showCard(card, model = null) {
  const rows = [
    ['name', 'Name', card.name],
    ['architecture', 'Architecture', `${card.architecture ?? '—'} (${card.format})`],
    ['parameters', 'Parameters', card.parameters ? count(card.parameters) : '—'],
    ['types', 'Tensor types', Object.entries(card.tensorTypes ?? {}).map(([t, n]) => `${t} × ${n}`).join(', ') || '—'],
    ['shape', 'Shape', card.blockCount ? `${card.blockCount} layers, dim ${card.embeddingLength}, ${card.headCount} query / ${card.headCountKv} KV heads, FFN ${card.feedForwardLength}` : '—'],
    ['context', 'Context', card.contextLength ? `${card.contextLength} tokens${model ? ` (held here: ${model.maxSeqLen})` : ''}` : '—'],
    ['vocab', 'Vocabulary', card.vocabSize ? `${card.vocabSize} (${card.tokenizerModel ?? 'no tokenizer'})` : '—'],
    ['template', 'Chat template', !card.chatTemplate ? 'none: the model continues your text'
      : card.templateProblem ? `present, not applied: ${card.templateProblem}` : model ? 'yes: each turn is rendered by it' : 'yes'],
    ['size', 'File', `${MB(card.fileBytes)}${card.weightBytes ? `, weights ${MB(card.weightBytes)}` : ''}`],
    ['runs', 'Runs here', card.runnable ? (model ? `yes: open${model.fingerprint ? `, fingerprint ${model.fingerprint}` : ''}; wasm heap ${MB(model.heapBytes)}` : 'yes') : `no: ${card.problem}`],
  ];
  el.modelCard.textContent = '';
  for (const [key, label, value] of rows) {
    const div = document.createElement('div');
    div.dataset.key = key;
    const dt = document.createElement('dt'), dd = document.createElement('dd');
    dt.textContent = label; dd.textContent = value;
    if (key === 'runs' && !card.runnable) dd.className = 'bad';
    div.append(dt, dd);
    el.modelCard.append(div);
  }
}

function showLoad() {
  const l = chat.load;
  const loading = l.phase === 'inspecting' || l.phase === 'loading';
  el.loadRow.hidden = !loading;
  el.loadNote.hidden = loading || l.phase === 'done';
  if (l.phase === 'inspecting') {
    el.loadProgress.removeAttribute('value');
    el.loadStatus.textContent = `reading the header of ${l.name}…`;
  } else if (l.phase === 'loading') {
    const total = l.total ?? chat.card?.fileBytes ?? null;
    if (total) el.loadProgress.value = l.loaded / total; else el.loadProgress.removeAttribute('value');
    const left = l.etaS === null ? '' : ` · ${l.etaS < 1 ? '<1' : l.etaS.toFixed(0)} s left`;
    el.loadStatus.textContent = `${MB(l.loaded)}${total ? ` of ${MB(total)}` : ''}${l.mbps ? ` · ${l.mbps.toFixed(1)} MB/s` : ''}${left}`;
  } else {
    el.loadNote.textContent = l.message ?? '';
    el.loadNote.className = `note ${l.phase === 'cancelled' ? '' : 'bad'}`;
  }
}

function showModel(m) {
  chat.model = m;
  chat.models++;
  el.modelName.textContent = m.name + (m.card.source === 'shipped' ? '' : ` (${m.card.source === 'file' ? 'your file' : 'from its URL'})`);
  el.modelShipped.hidden = m.card.source === 'shipped';
  el.transcript.classList.toggle('chat-mode', m.chat);
  el.prompt.placeholder = m.chat ? 'Write to the model…' : m.card.source === 'shipped' ? 'Start a fortune: You will…' : 'Start a text…';
  showCard(m.card, m);
  if (chat.models > 1) {       // another model: a new conversation
    el.transcript.textContent = '';
    chat.replies = []; chat.reply = null; chat.text = ''; chat.points = []; chat.restored = null;
    replyNode = userNode = null;
    drawStack();
  }
}

/** Sends a GGUF (a File, or a URL) to the worker: its card first, then its weights with progress. */
function openModel(source) {
  const name = source instanceof File ? source.name : source;
  chat.error = null; el.error.hidden = true;
  chat.load = { phase: 'inspecting', name, loaded: 0, total: null, mbps: null, etaS: null, message: null };
  showLoad();
  setBusy(true, 'loading');
  send(source instanceof File ? { type: 'open', file: source, dtype: el.dtype.value } : { type: 'open', url: new URL(source, location.href).href, dtype: el.dtype.value });
}

function showError(e) {
  chat.error = e;
  el.error.hidden = false;
  el.error.textContent = `${e.code ? e.code + ': ' : e.name && e.name !== 'Error' ? e.name + ': ' : ''}${e.message}`;
}

function onWorkerMessage(m) {
  switch (m.type) {
    case 'ready':
      chat.build = m.info.build; chat.threads = m.info.threads; chat.warnings = m.warnings;
      el.buildBadge.textContent = `build: ${m.info.build}, ${m.info.threads} thread${m.info.threads > 1 ? 's' : ''}`;
      el.buildReason.textContent = m.crossOriginIsolated
        ? 'cross-origin isolated: the threads build'
        : 'not cross-origin isolated (no SharedArrayBuffer): the single-thread build, 1 thread';
      setBusy(false);
      if (modelParam) openModel(modelParam);                      // (autostart waits for it)
      else if (autostart) { autostart = false; el.form.requestSubmit(); }
      break;
    case 'model':
      showModel(m);
      if (chat.load) { chat.load.phase = 'done'; showLoad(); }
      break;
    case 'card':
      chat.card = m.card;
      showCard(m.card);
      if (chat.load) chat.load.phase = 'loading';
      break;
    case 'progress': {
      const l = chat.load;
      if (!l) break;
      l.phase = 'loading';
      l.loaded = m.loaded;
      l.total = m.total ?? chat.card?.fileBytes ?? null;
      l.mbps = m.ms > 0 ? m.loaded / 1e6 / (m.ms / 1000) : null;
      l.etaS = l.total && m.loaded > 0 ? (l.total - m.loaded) * (m.ms / m.loaded) / 1000 : null;
      showLoad();
      break;
    }
    case 'load':
      // a load that opened nothing: said in words, the model open before stays (or the shipped one)
      chat.load.phase = m.status;
      chat.load.message = m.status === 'cancelled' ? m.error.message
        : `${chat.load.name} was not opened: ${m.error.code ? m.error.code + ': ' : ''}${m.error.message} (${m.kept} is open)`;
      showLoad();
      if (m.status !== 'cancelled') showError(m.error);
      // the card of the model open again, unless the file was refused for what its card says
      if ((m.status !== 'refused' || m.card === null) && chat.model) showCard(chat.model.card, chat.model);
      break;
    case 'undone':
      if (m.turn) { userNode?.remove(); userNode = null; }
      break;
    case 'turn':
      userNode = span('user', m.promptText);
      chat.ran = m.prompt;       // the ids this turn ran (a chat: only those past the cache's shared prefix)
      chat.promptTps = m.promptTps;
      el.promptTps.textContent = `${m.promptTps.toFixed(0)} (${m.prompt.length} tokens)`;
      replyNode = span('model', '');
      chat.reply = [];
      break;
    case 'token':
      chat.reply.push(m.id);
      replyNode.textContent += m.text;
      chat.text += m.text;
      chat.length = m.length;
      el.len.textContent = String(m.length);
      if (m.tokens === 1) {
        chat.points.push([m.length, m.attentionMs, m.denseMs]);
        const pct = (x) => `${(100 * x / (m.attentionMs + m.denseMs)).toFixed(0)}%`;
        el.share.textContent = `${pct(m.attentionMs)} attention · ${pct(m.productsMs)} products · ${pct(m.otherMs)} other`;
        if (chat.points.length % 4 === 0) drawStack();
      }
      break;
    case 'reply':
      chat.replies.push(m.tokens);
      chat.stop = m.stop;
      chat.decodeTps = m.decodeTps;
      if (m.decodeTps) el.decodeTps.textContent = m.decodeTps.toFixed(0);
      drawStack();
      break;
    case 'state':
      Object.assign(chat, { length: m.length, dtype: m.dtype, bytes: m.bytes, agree: m.agree, tokens: m.tokens, pending: m.pending });
      el.len.textContent = String(m.length);
      el.bytes.textContent = `${(m.bytes / 1024).toFixed(0)} KiB (${m.dtype})`;
      el.agree.textContent = m.agree ? `${m.agree.same} / ${m.agree.total}` + (m.agree.total ? ` (${(100 * m.agree.same / m.agree.total).toFixed(1)}%)` : '')
        : m.dtype === 'float32' ? 'float32 itself' : 'not measured: an opened file\'s weights are held once';
      setBusy(false);
      // (?model=URL&autostart=1: the first turn once the file is open; without ?model, 'ready' starts it)
      if (autostart && modelParam && chat.load?.phase === 'done') { autostart = false; el.form.requestSubmit(); }
      break;
    case 'kept':
      chat.kept = m;
      el.buildReason.textContent = `kept: ${m.length} tokens, ${(m.bytes / 1024).toFixed(0)} KiB of KV cache in ${m.storage} (${m.ms.toFixed(0)} ms)`;
      break;
    case 'rerun':
      chat.rerun = m;
      if (chat.load?.phase === 'loading') { chat.load.phase = 'done'; showLoad(); }   // (an opened file loaded again for the new dtype)
      break;
    case 'chats':
      chat.chats = m.chats;
      showChats();
      break;
    case 'restored':
      chat.restored = m;
      chat.replies = [];
      el.transcript.textContent = '';
      for (const [cls, t] of m.transcript ?? []) span(cls, t);
      replyNode = null;
      el.buildReason.textContent = `restored ${m.length} tokens in ${m.ms.toFixed(0)} ms, no prefill (${m.prefilled} tokens run)`;
      break;
    case 'error':
      showError(m.error);
      setBusy(false);
      if (chat.build === null) chat.status = 'error';   // the model never loaded; otherwise the page goes on
      break;
  }
}

const threads = params.get('threads');
const initMessage = {
  type: 'init', pkgUrl: new URL('/js/', location.href).href, modelUrl: new URL('/models/fortunes/model.bin', location.href).href,
  tokenizerUrl: new URL('/models/fortunes/tokenizer.bin', location.href).href, jinjaUrl: new URL('/vendor/jinja/index.js', location.href).href,
  threads: threads === null || threads === 'auto' ? 'auto' : Number(threads), build: params.get('build') || undefined, dtype: el.dtype.value,
  storage: params.get('storage') || undefined,
  hangAtLoad: params.get('hangAtLoad') === '1',   // (a test: the first worker blocks its thread while it loads)
};

/** The model's worker; one that falls silent while it loads is ended and started again (worker-watch.js). */
function startWorker(restarts) {
  const w = worker = new Worker(new URL('./chat-worker.js', import.meta.url), { type: 'module' });
  const watch = watchLoad(() => {
    if (w !== worker) return;
    w.terminate();
    if (restarts >= MAX_RESTARTS) {
      showError({ message: `the model's worker did not answer while loading, ${restarts + 1} times` });
      chat.status = 'error';
      return;
    }
    console.warn(restartWarning('chat page', restarts + 1));
    chat.restarts++;
    startWorker(restarts + 1);
  });
  w.onmessage = ({ data: m }) => {
    if (w !== worker) return;
    if (m.type === 'ready' || m.type === 'error') watch.done();
    else watch.heard();
    if (m.type !== 'alive') onWorkerMessage(m);
  };
  w.onerror = (e) => { watch.done(); showError({ message: e.message }); chat.status = 'error'; };
  send({ ...initMessage, attempt: restarts });
}
startWorker(0);

el.form.addEventListener('submit', (e) => {
  e.preventDefault();
  setBusy(true);
  chat.error = null; el.error.hidden = true;
  send({ type: 'generate', text: el.prompt.value, sampling: sampling(), maxNewTokens: Number(el.steps.value) });
  el.prompt.value = '';
});
el.stop.addEventListener('click', () => send({ type: 'stop' }));
el.regenerate.addEventListener('click', () => {
  setBusy(true);
  replyNode?.remove();
  replyNode = span('model', '');
  chat.reply = [];
  chat.replies.pop();
  el.seed.value = String(Number(el.seed.value) + 1);
  send({ type: 'regenerate', sampling: sampling(), maxNewTokens: Number(el.steps.value) });
});
el.undo.addEventListener('click', () => {
  setBusy(true);
  replyNode?.remove();
  replyNode = null;
  chat.replies.pop();
  send({ type: 'undo' });
});
function showChats() {
  el.kept.textContent = '';
  el.keptPanel.hidden = chat.chats.length === 0;
  for (const c of chat.chats) {
    const li = document.createElement('li');
    li.dataset.id = c.id;
    const restore = document.createElement('button');
    restore.type = 'button'; restore.textContent = 'Restore'; restore.className = 'restore';
    restore.onclick = () => { setBusy(true); send({ type: 'restore', id: c.id }); };
    const del = document.createElement('button');
    del.type = 'button'; del.textContent = 'Delete'; del.className = 'delete';
    del.onclick = () => send({ type: 'delete', id: c.id });
    const label = document.createElement('span');
    label.textContent = ` ${new Date(c.savedAt).toLocaleString()}: ${c.model?.name ?? 'models/fortunes'}, ${c.length} tokens, ${c.dtype}, ${c.storage} — "…${c.preview}" `;
    li.append(restore, ' ', del, label);
    el.kept.append(li);
  }
}

el.keep.addEventListener('click', () => {
  const transcript = [...el.transcript.children].map((n) => [n.className, n.textContent]);
  send({ type: 'keep', transcript });
});

el.modelFile.addEventListener('change', () => {
  const file = el.modelFile.files[0];
  if (file) openModel(file);
  el.modelFile.value = '';           // (the same file again is a change too)
});
el.loadCancel.addEventListener('click', () => send({ type: 'cancel' }));
el.modelShipped.addEventListener('click', () => {
  setBusy(true, 'loading');
  chat.load = null; el.loadNote.hidden = true;
  send({ type: 'shipped' });
});
// drag and drop a file anywhere on the page
let dragDepth = 0;
const dragging = (on) => document.body.classList.toggle('dragging', on);
document.addEventListener('dragenter', (e) => { if (e.dataTransfer?.types.includes('Files')) { dragDepth++; dragging(true); e.preventDefault(); } });
document.addEventListener('dragleave', () => { if (--dragDepth <= 0) { dragDepth = 0; dragging(false); } });
document.addEventListener('dragover', (e) => { if (e.dataTransfer?.types.includes('Files')) e.preventDefault(); });
document.addEventListener('drop', (e) => {
  dragDepth = 0; dragging(false);
  const file = e.dataTransfer?.files?.[0];
  if (!file) return;
  e.preventDefault();
  if (chat.status !== 'ready') { showError({ message: `${file.name}: wait until the ${chat.status === 'busy' ? 'reply ends' : 'load ends'} to open another model` }); return; }
  openModel(file);
});

el.dtype.addEventListener('change', () => {
  // (an opened file's weights are held once: a new dtype loads the file again, with progress and Cancel)
  if (chat.model && chat.model.card.source !== 'shipped') {
    chat.load = { phase: 'loading', name: chat.model.name, loaded: 0, total: null, mbps: null, etaS: null, message: null };
    setBusy(true, 'loading');
  } else setBusy(true);
  send({ type: 'dtype', dtype: el.dtype.value });
});
