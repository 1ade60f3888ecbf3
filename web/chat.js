// Chat page: controls, transcript, figures. The model runs in chat-worker.js.
const $ = (id) => document.getElementById(id);
const el = {
  transcript: $('transcript'), form: $('chat'), prompt: $('prompt'), generate: $('generate'), stop: $('stop'),
  regenerate: $('regenerate'), undo: $('undo'), keep: $('keep'), kept: $('kept'), keptPanel: $('kept-panel'), temperature: $('temperature'), topP: $('topP'), seed: $('seed'),
  greedy: $('greedy'), steps: $('steps'), dtype: $('dtype'), error: $('error'), plot: $('plot'),
  buildBadge: $('build-badge'), buildReason: $('build-reason'),
  len: $('s-len'), promptTps: $('s-prompt'), decodeTps: $('s-decode'), share: $('s-share'), bytes: $('s-bytes'), agree: $('s-agree'),
};

// Test hook and live state. status: loading | ready | busy | error
const chat = {
  status: 'loading', build: null, threads: null, crossOriginIsolated: !!self.crossOriginIsolated, warnings: [],
  dtype: 'float32', tokens: [], pending: null, replies: [], reply: null, stop: null, length: 0, bytes: null, agree: null,
  promptTps: null, decodeTps: null, points: [], error: null, text: '',
  chats: [], kept: null, restored: null,
};
window.__chat = chat;

const params = new URLSearchParams(location.search);
for (const [k, input] of [['temperature', el.temperature], ['topP', el.topP], ['seed', el.seed], ['steps', el.steps], ['dtype', el.dtype]]) {
  if (params.has(k)) input.value = params.get(k);
}
if (params.get('greedy') === '1') el.greedy.checked = true;
if (params.has('prompt')) el.prompt.value = params.get('prompt');
chat.dtype = el.dtype.value;

const worker = new Worker(new URL('./chat-worker.js', import.meta.url), { type: 'module' });
const send = (m) => worker.postMessage(m);
let replyNode = null;

function setBusy(busy) {
  chat.status = busy ? 'busy' : 'ready';
  el.generate.disabled = busy;
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

function showError(e) {
  chat.error = e;
  el.error.hidden = false;
  el.error.textContent = `${e.code ? e.code + ': ' : e.name && e.name !== 'Error' ? e.name + ': ' : ''}${e.message}`;
}

worker.onmessage = ({ data: m }) => {
  switch (m.type) {
    case 'ready':
      chat.build = m.info.build; chat.threads = m.info.threads; chat.warnings = m.warnings;
      el.buildBadge.textContent = `build: ${m.info.build}, ${m.info.threads} thread${m.info.threads > 1 ? 's' : ''}`;
      el.buildReason.textContent = m.crossOriginIsolated
        ? 'cross-origin isolated: the threads build'
        : 'not cross-origin isolated (no SharedArrayBuffer): the single-thread build, 1 thread';
      setBusy(false);
      if (params.get('autostart') === '1') el.form.requestSubmit();
      break;
    case 'turn':
      span('user', m.promptText);
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
      el.agree.textContent = m.agree ? `${m.agree.same} / ${m.agree.total}` + (m.agree.total ? ` (${(100 * m.agree.same / m.agree.total).toFixed(1)}%)` : '') : 'float32 itself';
      setBusy(false);
      break;
    case 'kept':
      chat.kept = m;
      el.buildReason.textContent = `kept: ${m.length} tokens, ${(m.bytes / 1024).toFixed(0)} KiB of KV cache in ${m.storage} (${m.ms.toFixed(0)} ms)`;
      break;
    case 'rerun':
      chat.rerun = m;
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
};
worker.onerror = (e) => { showError({ message: e.message }); chat.status = 'error'; };

const threads = params.get('threads');
send({
  type: 'init', pkgUrl: new URL('/js/', location.href).href, modelUrl: new URL('/models/fortunes/model.bin', location.href).href,
  tokenizerUrl: new URL('/models/fortunes/tokenizer.bin', location.href).href,
  threads: threads === null || threads === 'auto' ? 'auto' : Number(threads), build: params.get('build') || undefined, dtype: el.dtype.value,
  storage: params.get('storage') || undefined,
});

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
    label.textContent = ` ${new Date(c.savedAt).toLocaleString()}: ${c.length} tokens, ${c.dtype}, ${c.storage} — "…${c.preview}" `;
    li.append(restore, ' ', del, label);
    el.kept.append(li);
  }
}

el.keep.addEventListener('click', () => {
  const transcript = [...el.transcript.children].map((n) => [n.className, n.textContent]);
  send({ type: 'keep', transcript });
});

el.dtype.addEventListener('change', () => {
  setBusy(true);
  send({ type: 'dtype', dtype: el.dtype.value });
});
