#!/usr/bin/env node
// sdpa-wasm/llama (js/llama: every layer in wasm) on two models, in one run:
//  1. speed: decode and prefill tokens/s, with the share of a step in attention / weight
//     products / the rest (model.timing), per weight dtype (float32, float16, q8_0, q4_0, and
//     q8_0 / q4_0 with activations: 'int16', written q8_0+int16) at 1 and 2 threads, of
//       * the shipped model (models/fortunes), greedy from the same prompt to 511 positions,
//         and per KV cache dtype (float32 weights, --kv-threads); a 512-token prefill;
//       * SmolLM2-135M's shape with random weights (bench/lib/random-llama.mjs, written into
//         os.tmpdir() and deleted after): a short greedy decode (--big-steps tokens), a 64-token
//         prefill, and a 512-token prefill for --big-prefill's weight dtypes (one run: long);
//     against llama2.c's run.c compiled to wasm (-O3 -msimd128 -ffast-math, bench/lib/runc.mjs;
//     float32, 1 thread, the same prompt, greedy, fixed length) when --runc=path/to/run.c is
//     given, with whether the greedy texts are identical; against the read bandwidth and mul+add
//     peak probed all through the run (bench/lib/limits.mjs openLimits); and the issue-38 targets.
//     Every configuration is a model alone in an instance of its own, all loaded first; each
//     round then runs each of them once (and run.c), in an order reversed every round, so a slow
//     phase of the shared host lands in every row.
//  2. what each KV cache dtype does to the shipped model: on held-out text
//     (tests/data/llama/heldout.txt, never trained on) in windows of the full context,
//     perplexity, top-1 agreement with float32 and the largest logit error.
// Medians over rounds; times never fail anything. About 4-5 minutes (--quick: under 1).
// usage: npm run bench:llama [-- --quick --json --runc=/path/to/llama2.c/run.c --rounds=3 --threads=1,2
//          --weights=float32,float16,q8_0,q4_0,q8_0+int16,q4_0+int16 --kv=float32,float16,int8,int4,int8/int4,float16/int4
//            (a KV dtype with +page / -page: float16NewestPage on / off; else the library's default)
//          --kv-threads=1 --big-weights=<--weights> --big-prefill=q8_0,q8_0+int16 --prompt="You will"
//          --steps=511 --big-steps=16
//          --windows=all --kv-quality=float32,int4-page,int4+page,... --no-speed --no-quality --no-big]
//        node bench/llama.mjs --render=llama.json     the tables of a saved --json run
import crypto from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSdpa } from '../js/index.js';
import { loadLlama, loadTokenizer } from '../js/llama/index.js';
import { openLimits } from './lib/limits.mjs';
import { SHIPPED, SMOLLM2_135M, writeRandomCheckpoint, writeTokenizer } from './lib/random-llama.mjs';
import { buildRunC, runRunC, defaultRunCDir } from './lib/runc.mjs';
import { tokenWork } from './lib/dense-shapes.mjs';
import { shippedModel, windowsOf } from './lib/kv-quality.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const arg = (k, d) => { const a = argv.find((x) => x.startsWith(`--${k}=`)); return a ? a.slice(k.length + 3) : d; };
const flag = (k) => argv.includes(`--${k}`);
const list = (s) => (s === '' || s === 'none' ? [] : s.split(','));
if (flag('help')) { console.log(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').slice(1).filter((l, i, a) => a.slice(0, i + 1).every((x) => x.startsWith('//'))).join('\n')); process.exit(0); }
const QUICK = flag('quick');
const JSON_OUT = flag('json');
const ROUNDS = Number(arg('rounds', QUICK ? 1 : 3));
const WINDOWS = arg('windows', QUICK ? '2' : 'all') === 'all' ? Infinity : Number(arg('windows', '2'));  // of the held-out text
const THREADS = list(arg('threads', '1,2')).map(Number);
// a weight dtype, or q8_0+int16 / q4_0+int16: the same weights with loadLlama's activations: 'int16'
const WEIGHTS = list(arg('weights', QUICK ? 'float32,q8_0,q8_0+int16' : 'float32,float16,q8_0,q4_0,q8_0+int16,q4_0+int16'));
const KV_SPEED = list(arg('kv', QUICK ? 'float32,int8' : 'float32,float16,int8,int4,int8/int4,float16/int4'));
const KV_THREADS = list(arg('kv-threads', '1')).map(Number);             // the KV-dtype rows' thread counts
// K[/V] dtypes; '+page' / '-page': float16NewestPage on / off (else the library's default: on with int4)
const KV_QUALITY = list(arg('kv-quality', 'float32,float16,int8-page,int8+page,int4-page,int4+page,int8/int4-page,int8/int4+page,float16/int4-page,float16/int4+page'));
/** A quality configuration's cache options: 'int8/int4+page' -> { keyDtype, valueDtype, float16NewestPage }. */
function kvOptions(spec) {
  const m = /^([^+-]+)([+-]page)?$/.exec(spec);
  const [keyDtype, valueDtype = keyDtype] = m[1].split('/');
  return m[2] ? { keyDtype, valueDtype, float16NewestPage: m[2] === '+page' } : { keyDtype, valueDtype };
}
const PROMPT = arg('prompt', 'You will');
const STEPS = Number(arg('steps', QUICK ? 128 : 511));                    // the shipped model: positions, as run.c's -n
const BIG_STEPS = Number(arg('big-steps', QUICK ? 8 : 16));               // the 135M shape: tokens generated after the prompt
const BIG_WEIGHTS = list(arg('big-weights', QUICK ? 'q8_0,q8_0+int16' : WEIGHTS.join(',')));
const BIG_PREFILL = list(arg('big-prefill', QUICK ? '' : 'q8_0,q8_0+int16'));        // weight dtypes with a 512-token prefill on the 135M shape
const PREFILL = 512, BIG_SHORT_PREFILL = QUICK ? 32 : 64;
const RUNC = arg('runc', null);

const out = (s) => process.stdout.write(s + '\n');
const note = (s) => process.stderr.write(s + '\n');
const now = () => performance.now();
const median = (xs) => { const s = [...xs].filter(Number.isFinite).sort((a, b) => a - b); const n = s.length; return n === 0 ? NaN : n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const fmt = (x) => (!Number.isFinite(x) ? '-' : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
const pct = (x) => (Number.isFinite(x) ? `${(100 * x).toFixed(0)}%` : '-');
const printable = (s) => s.replace(/<\/?s>|<unk>/g, '').replace(/[^\x20-\x7e\t\n\r]/g, '');
const hash = (s) => crypto.createHash('sha256').update(s).digest('hex').slice(0, 12);
function git(...a) {
  try { return execFileSync('git', a, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim(); } catch { return null; }
}
/** How far two texts agree: { same, prefix (characters), length (b's) }. */
function agreement(a, b) {
  let k = 0;
  while (k < Math.min(a.length, b.length) && a[k] === b[k]) k++;
  return { same: k === a.length && k === b.length, prefix: k, length: b.length };
}

if (arg('render')) { out(render(JSON.parse(fs.readFileSync(arg('render'), 'utf8')))); process.exit(0); }

const { dir: fortunes, checkpoint, tokenizer, held } = shippedModel();

const t0 = Date.now();
const commit = git('rev-parse', '--short', 'HEAD');
const dirty = commit ? (git('status', '--porcelain', '--', 'src', 'js', 'include') || '') !== '' : null;
const meta = {
  date: new Date().toISOString(), commit: commit ? commit + (dirty ? '+local changes' : '') : null, quick: QUICK, node: process.version,
  cpu: os.cpus()[0]?.model?.trim() ?? '?', cores: os.cpus().length, loadavgStart: os.loadavg(), rounds: ROUNDS, prompt: PROMPT,
};
const result = { meta, options: { prompt: PROMPT, prefill: PREFILL, bigShortPrefill: BIG_SHORT_PREFILL, bigPrefill: BIG_PREFILL, steps: STEPS, bigSteps: BIG_STEPS, threads: THREADS, kvThreads: KV_THREADS, weights: WEIGHTS, bigWeights: BIG_WEIGHTS, kv: KV_SPEED }, limits: null, shipped: null, big: null, targets: [], quality: null };
note(`sdpa-wasm/llama bench  ${meta.date}  commit ${meta.commit ?? '?'}  ${meta.cpu} (${meta.cores} vCPU)  node ${meta.node}${QUICK ? '  [--quick]' : ''}`);
note(`load average at start ${meta.loadavgStart.map((x) => x.toFixed(2)).join(' ')} (a shared machine: other load moves every number)`);

// ------------------------------------------------------------------------------------- speed

/**
 * One configuration: a model alone in an instance of its own, as a page has it (until f3cd4d5 the
 * JS check of a view argument walked the instance's live heap tensors, and a model loaded after 16
 * others in one instance ran 17% slower), every instance from one compiled module (so V8's
 * tier-up is shared). decodeOnce runs one decode
 * (truncate, the prompt in one forward untimed, then greedy steps to `steps` positions: each
 * appends one token; tok/s = appended tokens / the loop's time, sampling included) or one prefill
 * of n tokens (one forward, logits of the last row), and pushes its figures.
 */
async function makeConfig(wasmModule, bytes, { label, weights, kv, threads, maxSeqLen, promptIds, steps, prefillIds }) {
  const [weightDtype, activations = 'float32'] = weights.split('+');    // q8_0+int16: activations 'int16'
  const sdpa = await createSdpa({ threads, build: 'simd-threads', wasmModule });
  const ta = now();
  const model = loadLlama(sdpa, bytes, { weightDtype, activations, ...kvOptions(kv), maxSeqLen });  // (int4+page / int4-page: kvOptions)
  const loadMs = now() - ta;
  const c = { label, weights, weightDtype, kv, threads, loadMs, model, sdpa, decode: [], prefill: {}, text: null, texts: new Set() };
  c.dispose = () => { model.dispose(); sdpa.dispose(); };
  c.decodeOnce = (tok) => {
    model.truncate(0);
    model.forward(promptIds, { logits: 'last' });
    const it = model.stream([], { temperature: 0, maxNewTokens: steps - promptIds.length + 1, stop: [] });
    const ids = [];
    let a = 0, p = 0, o = 0, first = true;
    const start = now();
    for (;;) {
      const r = it.next();
      if (r.done) break;
      ids.push(r.value);
      if (!first) { const tm = model.timing; a += tm.attentionMs; p += tm.productsMs; o += tm.otherMs; }   // (the first yield comes from the prompt's logits)
      first = false;
    }
    const ms = now() - start;
    model.truncate(0);                                   // (its pages back to the pool, for the next configuration)
    const forwards = ids.length - 1;
    const sum = a + p + o;
    c.decode.push({ tokS: forwards / ms * 1000, msPerToken: ms / forwards, forwards, attention: a / sum, products: p / sum, other: o / sum, stepMs: sum / forwards });
    if (tok) {
      const text = printable(tok.decode([...promptIds, ...ids]));
      c.texts.add(text);
      c.text ??= text;
    }
  };
  c.prefillOnce = (n) => {
    model.truncate(0);
    const start = now();
    model.forward(prefillIds.subarray(0, n), { logits: 'last' });
    const ms = now() - start;
    model.truncate(0);
    const tm = model.timing, sum = tm.attentionMs + tm.productsMs + tm.otherMs;
    (c.prefill[n] ??= []).push({ tokS: n / ms * 1000, ms, attention: tm.attentionMs / sum, products: tm.productsMs / sum, other: tm.otherMs / sum });
  };
  /** Forgets the samples (after a warm-up). */
  c.reset = () => { c.decode = []; c.prefill = {}; c.text = null; c.texts.clear(); };
  return c;
}

/** Medians of a config's samples. */
function summary(c) {
  const d = (k) => median(c.decode.map((x) => x[k]));
  const s = {
    label: c.label, weights: c.weights, kv: c.kv, threads: c.threads, loadMs: c.loadMs,
    decode: c.decode.length ? { tokS: d('tokS'), msPerToken: d('msPerToken'), forwards: c.decode[0].forwards, attention: d('attention'), products: d('products'), other: d('other'), samples: c.decode.map((x) => x.tokS) } : null,
    prefill: {}, textHash: c.text === null ? null : hash(c.text), textsDiffer: c.texts.size > 1,
  };
  for (const [n, xs] of Object.entries(c.prefill)) {
    s.prefill[n] = { tokS: median(xs.map((x) => x.tokS)), attention: median(xs.map((x) => x.attention)), products: median(xs.map((x) => x.products)), other: median(xs.map((x) => x.other)), samples: xs.map((x) => x.tokS) };
  }
  return s;
}

/** run.c on a model: one run, its decode-only tok/s (our patch's line) and the text. */
function runcOnce(jsPath, modelPath, tokenizerPath, steps) {
  const r = runRunC(jsPath, modelPath, tokenizerPath, { prompt: PROMPT, steps, temperature: 0 });
  return { tokS: r.decodeTokS, achievedTokS: r.tokS, forwards: r.decodeForwards, from: r.decodeFrom, promptTokens: r.promptTokens, text: printable(r.text) };
}

/** The table of a model's configs (and run.c's row). */
function speedTable(title, rows, runc, prefillNs) {
  const L = ['', title];
  const pre = prefillNs.map((n) => `prefill ${n} tok/s | ${n}-prefill ÷ decode`).join(' | ');
  L.push(`| weights | KV | threads | decode tok/s | ms/token | attention | products | other | ${pre} | decode ÷ run.c | text = run.c |`);
  L.push(`|---|---|---|---|---|---|---|---|${prefillNs.map(() => '---|---|').join('')}---|---|`);
  for (const s of rows) {
    const d = s.decode;
    const pres = prefillNs.map((n) => {
      const p = s.prefill[n];
      return p ? `${fmt(p.tokS)}${p.samples.length === 1 ? ' (1 run)' : ''} | ${d ? `${(p.tokS / d.tokS).toFixed(2)}×` : '-'}` : '- | -';
    }).join(' | ');
    const vs = runc && d ? `${(d.tokS / runc.tokS).toFixed(2)}×` : '-';
    const same = runc && s.textHash ? (s.textHash === runc.textHash ? 'yes' : 'no') : '-';
    const range = d && d.samples.length > 1 ? ` [${fmt(Math.min(...d.samples))}–${fmt(Math.max(...d.samples))}]` : '';
    L.push(`| ${s.weights} | ${s.kv} | ${s.threads} | ${d ? fmt(d.tokS) + range : '-'} | ${d ? d.msPerToken.toFixed(2) : '-'} | ${d ? pct(d.attention) : '-'} | ${d ? pct(d.products) : '-'} | ${d ? pct(d.other) : '-'} | ${pres} | ${vs} | ${same} |`);
  }
  if (runc) L.push(`| run.c wasm fast-math | float32 | 1 | ${fmt(runc.tokS)}${runc.samples.length > 1 ? ` [${fmt(Math.min(...runc.samples))}–${fmt(Math.max(...runc.samples))}]` : ''} | ${(1000 / runc.tokS).toFixed(2)} | | | | ${prefillNs.map(() => '- | -').join(' | ')} | 1 | |`);
  return L;
}

async function speed() {
  // the machine's read bandwidth and mul+add peak, probed all through the run (one sample per
  // thread count before every configuration's turn); the 135M target is against the 1-thread read
  const probe = await openLimits({ threads: Math.max(...THREADS), bytes: (QUICK ? 64 : 256) << 20, madIters: QUICK ? 2_000_000 : 4_000_000 });
  const sampleLimits = () => { for (const t of THREADS) probe.sample(t); };
  sampleLimits();
  let runc = null;
  if (RUNC) {
    const b = await buildRunC(RUNC, defaultRunCDir, { log: note });
    runc = { jsPath: b.jsPath };
    note(`llama: run.c ${b.built ? 'built' : 'up to date'}: ${path.relative(ROOT, b.jsPath)}`);
  }
  // one compiled module for every configuration's instance (the default build of Node 20: simd-threads)
  const wasmModule = await WebAssembly.compile(fs.readFileSync(path.join(ROOT, 'dist', 'sdpa-simd-threads.wasm')));
  meta.sdpaInfo = [];

  // ---- the shipped model
  const promptIds = tokenizer.encode(PROMPT);
  const prefillIds = Int32Array.from(held.slice(0, PREFILL));
  const shippedConfigs = [];
  const base = { maxSeqLen: SHIPPED.seqLen, promptIds, steps: STEPS, prefillIds };
  for (const t of THREADS) {
    for (const w of WEIGHTS) shippedConfigs.push(await makeConfig(wasmModule, checkpoint, { ...base, label: `${w} ${t}t`, weights: w, kv: 'float32', threads: t }));
    if (KV_THREADS.includes(t)) {
      for (const kv of KV_SPEED.filter((k) => k !== 'float32')) shippedConfigs.push(await makeConfig(wasmModule, checkpoint, { ...base, label: `kv ${kv} ${t}t`, weights: 'float32', kv, threads: t }));
    }
  }
  for (const c of shippedConfigs) if (!meta.sdpaInfo.some((i) => i.threads === c.sdpa.info.threads)) meta.sdpaInfo.push({ ...c.sdpa.info });
  // warm-up: V8 compiles wasm with Liftoff first and tiers hot functions up to TurboFan
  for (const c of shippedConfigs) { c.decodeOnce(null); c.prefillOnce(64); c.reset(); }
  const runcShipped = [];
  for (let r = 0; r < ROUNDS; r++) {
    const order = r & 1 ? [...shippedConfigs].reverse() : shippedConfigs;
    if (runc && !(r & 1)) runcShipped.push(runcOnce(runc.jsPath, path.join(fortunes, 'model.bin'), path.join(fortunes, 'tokenizer.bin'), STEPS));
    for (const c of order) { sampleLimits(); c.decodeOnce(tokenizer); c.prefillOnce(PREFILL); }
    if (runc && r & 1) runcShipped.push(runcOnce(runc.jsPath, path.join(fortunes, 'model.bin'), path.join(fortunes, 'tokenizer.bin'), STEPS));
    note(`llama: shipped round ${r + 1}/${ROUNDS}: ` + shippedConfigs.map((c) => `${c.label} ${fmt(c.decode.at(-1).tokS)}`).join(', ') + (runc ? `; run.c ${fmt(runcShipped.at(-1).tokS)}` : ''));
  }
  const shipped = { shape: SHIPPED, steps: STEPS, promptTokens: promptIds.length, rows: shippedConfigs.map(summary), runc: null };
  if (runc) {
    const text = runcShipped[0].text;
    shipped.runc = { tokS: median(runcShipped.map((x) => x.tokS)), achievedTokS: median(runcShipped.map((x) => x.achievedTokS)), samples: runcShipped.map((x) => x.tokS), forwards: runcShipped[0].forwards, textHash: hash(text), textsDiffer: new Set(runcShipped.map((x) => x.text)).size > 1 };
    const ours = shippedConfigs.find((c) => c.weights === 'float32' && c.kv === 'float32' && c.threads === 1) ?? shippedConfigs[0];
    shipped.textCheck = { config: ours.label, ...agreement(ours.text, text), sample: text.slice(0, 120) };
  }
  for (const c of shippedConfigs) c.dispose();
  result.shipped = shipped;

  // ---- SmolLM2-135M's shape, random weights
  if (!flag('no-big') && BIG_WEIGHTS.length) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sdpa-bench-llama-'));
    const cleanup = () => fs.rmSync(dir, { recursive: true, force: true });
    const onSignal = () => { cleanup(); process.exit(130); };
    process.on('SIGINT', onSignal); process.on('SIGTERM', onSignal);
    const configs = [];
    try {
      const S = SMOLLM2_135M;
      const mPath = path.join(dir, 'model.bin'), tPath = path.join(dir, 'tokenizer.bin');
      let ta = now();
      const { bytes: fileBytes } = writeRandomCheckpoint(mPath, { ...S, seed: 1 });
      writeTokenizer(tPath, S.vocabSize);
      note(`llama: 135M shape: ${(fileBytes / 1e6).toFixed(0)} MB of random weights written in ${((now() - ta) / 1000).toFixed(1)} s`);
      const bigTok = loadTokenizer(fs.readFileSync(tPath), { vocabSize: S.vocabSize });
      const bytes = fs.readFileSync(mPath);
      const bigPrompt = bigTok.encode(PROMPT);
      const steps = bigPrompt.length + BIG_STEPS - 1;      // positions: BIG_STEPS tokens generated, BIG_STEPS - 1 forwards
      const ids = Int32Array.from({ length: PREFILL }, (_, i) => 3 + ((i * 7919) % (S.vocabSize - 3)));
      ta = now();
      for (const t of THREADS) {
        for (const w of BIG_WEIGHTS) {
          configs.push(await makeConfig(wasmModule, bytes, { label: `${w} ${t}t`, weights: w, kv: 'float32', threads: t, maxSeqLen: PREFILL + 8, promptIds: bigPrompt, steps, prefillIds: ids }));
        }
      }
      note(`llama: 135M shape: ${configs.length} models loaded in ${((now() - ta) / 1000).toFixed(1)} s (${configs.map((c) => `${c.label} ${(c.loadMs / 1000).toFixed(1)} s`).join(', ')})`);
      for (const c of configs) { c.model.forward(bigPrompt, { logits: 'last' }); c.model.truncate(0); }   // (the module is warm from the shipped model)
      const runcBig = [];
      for (let r = 0; r < ROUNDS; r++) {
        const order = r & 1 ? [...configs].reverse() : configs;
        if (runc && !(r & 1)) runcBig.push(runcOnce(runc.jsPath, mPath, tPath, steps));
        for (const c of order) { sampleLimits(); c.decodeOnce(bigTok); c.prefillOnce(BIG_SHORT_PREFILL); }
        if (runc && r & 1) runcBig.push(runcOnce(runc.jsPath, mPath, tPath, steps));
        note(`llama: 135M round ${r + 1}/${ROUNDS}: ` + configs.map((c) => `${c.label} ${fmt(c.decode.at(-1).tokS)}`).join(', ') + (runc ? `; run.c ${fmt(runcBig.at(-1).tokS)}` : ''));
      }
      for (const c of configs) {
        if (BIG_PREFILL.includes(c.weights)) {
          c.prefillOnce(PREFILL);
          note(`llama: 135M ${c.label}: ${PREFILL}-token prefill ${fmt(c.prefill[PREFILL][0].tokS)} tok/s`);
        }
      }
      const big = { shape: S, steps, generated: BIG_STEPS, promptTokens: bigPrompt.length, rows: configs.map(summary), runc: null };
      for (const s of big.rows) s.weightBytesPerToken = tokenWork(S, s.weights.split('+')[0]).bytes;
      if (runc) {
        const text = runcBig[0].text;
        big.runc = { tokS: median(runcBig.map((x) => x.tokS)), achievedTokS: median(runcBig.map((x) => x.achievedTokS)), samples: runcBig.map((x) => x.tokS), forwards: runcBig[0].forwards, textHash: hash(text), textsDiffer: new Set(runcBig.map((x) => x.text)).size > 1 };
        const ours = configs.find((c) => c.weights === 'float32' && c.threads === 1) ?? null;
        if (ours) big.textCheck = { config: ours.label, ...agreement(ours.text, text), sample: text.slice(0, 120) };
      }
      result.big = big;
    } finally {
      for (const c of configs) c.dispose();
      cleanup();
      process.off('SIGINT', onSignal); process.off('SIGTERM', onSignal);
    }
  }
  sampleLimits();
  result.limits = Object.fromEntries(THREADS.map((t) => [t, probe.stats(t)]));
  probe.close();
  for (const t of THREADS) note(`llama: limits (${t}t, medians of ${result.limits[t].bw.n} samples): read ${result.limits[t].bwGBs.toFixed(1)} GB/s, mul+add ${result.limits[t].peakGFLOPs.toFixed(1)} GFLOP/s`);
}

// ------------------------------------------------------------------------------------- targets

/** A row's decode ÷ run.c's, round by round (each round ran both). */
const paired = (row, runc) => row.decode.samples.map((x, i) => (x / runc.samples[i]).toFixed(2) + '×').join(', ');

function targets() {
  const T = [];
  const add = (name, value, goal, detail) => T.push({ name, value, goal, met: Number.isFinite(value) ? value >= goal : null, detail });
  const sh = result.shipped;
  const find = (rows, w, kv, t) => rows?.find((s) => s.weights === w && s.kv === kv && s.threads === t);
  if (sh?.runc) {
    const f32 = find(sh.rows, 'float32', 'float32', 1);
    if (f32) add('shipped model, 511 positions, 1 thread: decode ÷ run.c wasm fast-math (float32 weights)', f32.decode.tokS / sh.runc.tokS, 1.5,
      `${fmt(f32.decode.tokS)} vs ${fmt(sh.runc.tokS)} tok/s (per round: ${paired(f32, sh.runc)}); greedy text ${sh.textCheck.same ? 'identical' : `differs after ${sh.textCheck.prefix} of ${sh.textCheck.length} characters`}`);
    const best = sh.rows.filter((s) => s.threads === 1 && s.kv === 'float32').sort((a, b) => b.decode.tokS - a.decode.tokS)[0];
    if (best && best !== f32) add(`the same, the fastest weight dtype (${best.weights})`, best.decode.tokS / sh.runc.tokS, 1.5, `${fmt(best.decode.tokS)} tok/s (per round: ${paired(best, sh.runc)})`);
  }
  const big = result.big;
  for (const w of ['q8_0', 'q8_0+int16']) {
    const one = find(big?.rows, w, 'float32', 1), two = find(big?.rows, w, 'float32', 2);
    const what = w === 'q8_0' ? 'q8_0' : "q8_0 with activations: 'int16'";
    if (one && result.limits?.[1]) {
      const gbs = one.weightBytesPerToken / (one.decode.msPerToken * 1e6);
      add(`135M shape, ${what}, 1 thread: weight bytes per token ÷ decode time, of the 1-thread read bandwidth`, gbs / result.limits[1].bwGBs, 0.5,
        `${(one.weightBytesPerToken / 1e6).toFixed(0)} MB per token in ${one.decode.msPerToken.toFixed(1)} ms = ${gbs.toFixed(2)} GB/s; read ${result.limits[1].bwGBs.toFixed(1)} GB/s`);
    }
    if (one && two) add(`135M shape, ${what}: decode 2 threads ÷ 1 thread`, two.decode.tokS / one.decode.tokS, 1.6,
      `${fmt(two.decode.tokS)} vs ${fmt(one.decode.tokS)} tok/s` + (result.limits?.[2] ? `; the probes 2t ÷ 1t: read ${(result.limits[2].bwGBs / result.limits[1].bwGBs).toFixed(2)}×, mul+add ${(result.limits[2].peakGFLOPs / result.limits[1].peakGFLOPs).toFixed(2)}×` : ''));
  }
  for (const rows of [sh?.rows, big?.rows]) {
    for (const s of rows ?? []) {
      const p = s.prefill[PREFILL];
      if (!p || !s.decode || s.kv !== 'float32') continue;
      add(`${rows === sh.rows ? 'shipped model' : '135M shape'}, ${s.weights}, ${s.threads} thread${s.threads > 1 ? 's' : ''}: ${PREFILL}-token prefill ÷ decode tokens/s`, p.tokS / s.decode.tokS, 4,
        `${fmt(p.tokS)} vs ${fmt(s.decode.tokS)} tok/s`);
    }
  }
  result.targets = T;
}

// ------------------------------------------------------------------------------------- quality

async function quality() {
  const sdpa = await createSdpa({ threads: 2 });
  const V = tokenizer.vocabSize, S = 512;
  const windows = windowsOf(held, S, WINDOWS);
  const base = [];
  const res = [];
  for (const dt of KV_QUALITY) {
    const kv = kvOptions(dt);
    const model = loadLlama(sdpa, checkpoint, kv);
    // bytes per token of every layer's cache, amortized over 512 and 4,096 tokens (the cache's own sizes, kvCacheSize:
    // poolBytes, the most its pages take on the way there, a float16 newest page included, + the page table)
    const geometry = { numKvHeads: model.config.nKvHeads, headDim: model.config.dim / model.config.nHeads, ...kv };
    const perToken = (rows) => { const z = sdpa.kvCacheSize({ ...geometry, maxSeqLen: rows }, rows); return model.config.nLayers * (z.poolBytes + z.tableBytes) / rows; };
    let nll = 0, n = 0, agree = 0, maxErr = 0, maxAbs = 0, sumErr = 0, nErr = 0;
    windows.forEach((win, wi) => {
      model.truncate(0);
      const logits = model.forward(win.slice(0, S));
      if (dt === 'float32') base[wi] = logits;
      const ref = base[wi];
      for (let i = 0; i < S; i++) {
        const row = logits.subarray(i * V, (i + 1) * V), rrow = ref.subarray(i * V, (i + 1) * V);
        let m = -Infinity, am = 0, rm = -Infinity, arm = 0;
        for (let j = 0; j < V; j++) {
          if (row[j] > m) { m = row[j]; am = j; }
          if (rrow[j] > rm) { rm = rrow[j]; arm = j; }
          maxErr = Math.max(maxErr, Math.abs(row[j] - rrow[j]));
          sumErr += Math.abs(row[j] - rrow[j]); nErr++;
          maxAbs = Math.max(maxAbs, Math.abs(rrow[j]));
        }
        let z = 0;
        for (let j = 0; j < V; j++) z += Math.exp(row[j] - m);
        nll += -(row[win[i + 1]] - m - Math.log(z));
        n++;
        if (am === arm) agree++;
      }
    });
    res.push({ dtype: dt, float16NewestPage: model.float16NewestPage, bytesPerToken: model.bytes / model.length, bytes512: perToken(512), bytes4096: perToken(4096),
      ppl: Math.exp(nll / n), agree: agree / n, maxErr, meanErr: sumErr / nErr, maxAbs, tokens: n });
    model.dispose();
  }
  sdpa.dispose();
  result.quality = { windows: windows.length, windowTokens: S, rows: res };
}

// ------------------------------------------------------------------------------------- run, print

if (!flag('no-speed')) { await speed(); targets(); }
if (!flag('no-quality')) await quality();
meta.loadavgEnd = os.loadavg();
meta.seconds = (Date.now() - t0) / 1000;

out(JSON_OUT ? JSON.stringify(result, null, 1) : render(result));

/** The tables of a run (the --json object). */
function render(result) {
  const L = [];
    const { meta, options: o } = result;
    L.push(`sdpa-wasm/llama bench  ${meta.date}  commit ${meta.commit ?? '?'}  ${meta.cpu} (${meta.cores} vCPU)  node ${meta.node}  ${(meta.sdpaInfo ?? []).map((i) => `${i.build} ${i.threads}t`).join(', ')}${meta.quick ? '  [--quick]' : ''}`);
    L.push(`load average at start ${meta.loadavgStart.map((x) => x.toFixed(2)).join(' ')}, at the end ${meta.loadavgEnd.map((x) => x.toFixed(2)).join(' ')} (a shared machine: other load moves every number); ${meta.seconds.toFixed(0)} s; ${meta.rounds} round${meta.rounds > 1 ? 's' : ''}`);
  if (result.limits) {
    L.push('', `Limits (bench/lib/limits.c, one sample before every configuration's turn; medians [min–max]): ${Object.entries(result.limits).map(([t, l]) => `${t} thread${t > 1 ? 's' : ''}: read ${l.bwGBs.toFixed(1)} GB/s [${l.bw.min.toFixed(1)}–${l.bw.max.toFixed(1)}], mul+add ${l.peakGFLOPs.toFixed(1)} GFLOP/s [${l.peak.min.toFixed(1)}–${l.peak.max.toFixed(1)}]`).join('; ')} (${Object.values(result.limits)[0].bw.n} samples).`);
  }
  const sh = result.shipped;
  if (sh) {
    L.push(...speedTable(`## The shipped model (dim ${sh.shape.dim}, ${sh.shape.nLayers} layers, vocab ${sh.shape.vocabSize}): greedy from ${JSON.stringify(o.prompt)} (${sh.promptTokens} tokens with BOS) to ${sh.steps} positions; ${o.prefill}-token prefill of held-out text`,
      sh.rows, sh.runc, [o.prefill]));
    L.push('Decode tok/s: decode forwards (one token appended each, greedy sampling included) ÷ their time, median [min–max] of rounds; attention / products / other: shares of model.timing summed over the decode steps. ' +
      'text = run.c: the row\'s greedy text is run.c\'s (only float32 weights with a float32 KV cache are meant to give it; the others show how soon rounding moves an argmax). ' +
      (sh.runc ? `run.c: its decode-only line (bench/lib/runc.mjs: the forwards from the last prompt token on, ${sh.runc.forwards} of them), median of ${sh.runc.samples.length} runs.` : 'run.c: not run (give --runc=path/to/run.c).'));
    if (sh.textCheck) L.push(`Greedy text, ${sh.textCheck.config} against run.c: ${sh.textCheck.same ? 'identical' : `differs after ${sh.textCheck.prefix} of ${sh.textCheck.length} characters`} (${JSON.stringify(sh.textCheck.sample)}…); rows marked yes produce the same text.`);
  }
  const big = result.big;
  if (big) {
    L.push(...speedTable(`## SmolLM2-135M's shape, random weights (dim ${big.shape.dim}, ${big.shape.nLayers} layers, hidden ${big.shape.hiddenDim}, vocab ${big.shape.vocabSize}): greedy from ${JSON.stringify(o.prompt)} (${big.promptTokens} tokens), ${big.generated} tokens generated (${big.generated - 1} decode forwards); prefill of ${o.bigShortPrefill} tokens${o.bigPrefill.length ? ` and, for ${o.bigPrefill.join(', ')}, of ${o.prefill} (one run)` : ''}`,
      big.rows, big.runc, [o.bigShortPrefill, ...(o.bigPrefill.length ? [o.prefill] : [])]));
    L.push('Weight bytes per token ÷ decode time (all layers and the tied classifier, read once a token):');
    L.push(big.rows.map((s) => `${s.label}: ${(s.weightBytesPerToken / 1e6).toFixed(0)} MB → ${(s.weightBytesPerToken / (s.decode.msPerToken * 1e6)).toFixed(2)} GB/s` +
      (result.limits?.[s.threads] ? ` (${pct(s.weightBytesPerToken / (s.decode.msPerToken * 1e6) / result.limits[s.threads].bwGBs)} of the ${s.threads}-thread read)` : '')).join('; '));
    if (big.textCheck) L.push(`Greedy text, ${big.textCheck.config} against run.c: ${big.textCheck.same ? 'identical' : `differs after ${big.textCheck.prefix} of ${big.textCheck.length} characters`}.`);
    L.push(`Load times: ${big.rows.map((s) => `${s.label} ${(s.loadMs / 1000).toFixed(1)} s`).join(', ')}.`);
  }
  if (result.targets.length) {
    L.push('', `## Targets (issue 38)${meta.quick ? ': --quick, indicative only' : ''}`);
    L.push('| target | measured | goal | met | |');
    L.push('|---|---|---|---|---|');
    for (const t of result.targets) L.push(`| ${t.name} | ${t.value.toFixed(2)} | ≥ ${t.goal} | ${t.met === null ? '-' : t.met ? 'yes' : 'no'} | ${t.detail} |`);
  }
  const q = result.quality;
  if (q) {
    L.push('', `## What a KV cache dtype does to the shipped model (held-out text: ${q.windows} windows of ${q.windowTokens} tokens = ${q.rows[0].tokens} predictions; each window one forward)`);
    L.push('| KV dtype (K / V) | float16 newest page | bytes per token, all layers (512 / 4,096 tokens) | perplexity | top-1 agreement with float32 | max / mean \\|logit − float32 logit\\| |');
    L.push('|---|---|---|---|---|---|');
    for (const r of q.rows) {
      const bytes = r.bytes512 === undefined ? r.bytesPerToken.toFixed(0) : `${r.bytes512.toFixed(0)} / ${r.bytes4096.toFixed(0)}`;
      const page = r.float16NewestPage === undefined ? '' : r.float16NewestPage ? 'yes' : 'no';
      const err = `${r.maxErr.toFixed(3)} / ${r.meanErr === undefined ? '-' : r.meanErr.toExponential(2)} (max \\|logit\\| ${r.maxAbs.toFixed(1)})`;
      L.push(`| ${r.dtype.replace(/[+-]page$/, '')} | ${page} | ${bytes} | ${r.ppl.toFixed(3)} | ${(100 * r.agree).toFixed(2)}% | ${err} |`);
    }
  }
  return L.join('\n');
}
