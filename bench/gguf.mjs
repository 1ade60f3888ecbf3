#!/usr/bin/env node
// GGUF files in sdpa-wasm/llama (loadGguf): how fast a file loads and decodes, and what memory
// a load takes, per tensor type, on random-weight files of real shapes (scripts/random-gguf.mjs,
// written into os.tmpdir() and deleted after; nothing downloaded):
//   * SmolLM2-135M's shape (dim 576, 30 layers, 9 / 3 heads, vocab 49152, tied) in every type
//     this build runs (F32, F16, Q8_0, Q4_0, and Q4_K / Q6_K when the dense kernels have them:
//     GGUF_MATRIX_TYPES), with its 49152-token SPM vocabulary and chat template;
//   * with --big, TinyLlama-1.1B's shape (dim 2048, 22 layers, 32 / 4 heads, vocab 32000) in Q4_0
//     (~590 MiB).
// Per file:
//   load MB/s from memory: loadGguf(sdpa, the file's bytes already in a Uint8Array), and from a
//     stream: loadGguf(sdpa, a web ReadableStream of fs.createReadStream (1 MiB chunks), the
//     file in the OS page cache after the first read): MiB of file / s, median of --loads runs in
//     one instance (its heap grown by the first);
//   peak memory of a streamed load (loadGguf's default options: the KV pages of maxSeqLen
//     min(context_length, 4096) reserved), in a child process of its own: the process's RSS before
//     the load and its peak (RSS sampled at every chunk, and Linux's VmHWM), the wasm heap
//     (sdpa.memory().heapBytes) and the KV pages in it (bytesReserved), each against the file's size;
//   decode tokens/s at 1 and 2 threads: an 8-token prompt in one forward (untimed), then --steps
//     greedy steps (forward of one token, logits of the last row, argmax), timed as a loop; each
//     thread count a model in an instance of its own, the instances run alternately for --rounds
//     rounds (order reversed every round, so a slow phase of the shared host lands in both);
//     median of the rounds; Q8_0 / Q4_0 also with loadGguf's activations: 'int16' (written Q8_0+int16).
// Times never fail anything; a busy shared host moves every number (the load average is printed).
// usage: node bench/gguf.mjs [--types=F32,F16,Q8_0,Q4_0] [--threads=1,2] [--loads=3] [--rounds=3]
//          [--steps=32] [--activations=float32,int16] [--big] [--no-small] [--no-decode] [--json]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { createSdpa } from '../js/index.js';
import { loadGguf, argmax, GGUF_MATRIX_TYPES } from '../js/llama/index.js';
import { writeRandomGguf } from '../scripts/random-gguf.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SELF = fileURLToPath(import.meta.url);
const argv = process.argv.slice(2);
const arg = (k, d) => { const a = argv.find((x) => x.startsWith(`--${k}=`)); return a ? a.slice(k.length + 3) : d; };
const flag = (k) => argv.includes(`--${k}`);
const list = (s) => (s === '' || s === 'none' ? [] : s.split(','));
const MiB = 2 ** 20;
const now = () => performance.now();
const median = (xs) => { const s = [...xs].filter(Number.isFinite).sort((a, b) => a - b); const n = s.length; return n === 0 ? NaN : n % 2 ? s[n >> 1] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const fmt = (x) => (!Number.isFinite(x) ? '-' : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
const range = (xs) => `[${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))}]`;
const note = (s) => process.stderr.write(s + '\n');
const out = (s) => process.stdout.write(s + '\n');

/** A web ReadableStream of a file, 1 MiB chunks (what a page gets from a File or a fetch). */
const fileStream = (file) => Readable.toWeb(fs.createReadStream(file, { highWaterMark: MiB }));

/**
 * The process's RSS now, and its high-water mark since exec (Linux's VmHWM: getrusage's maxRSS
 * would not do, it keeps the parent's size across fork and exec), or null elsewhere.
 */
const rssNow = () => process.memoryUsage().rss;
function hwm() {
  try { const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8')); return m ? Number(m[1]) * 1024 : null; } catch { return null; }
}

// --child=FILE: one streamed load in a fresh process; prints { baseRss, peakRss, heapBytes, ms } as JSON.
if (arg('child', null) !== null) {
  const file = arg('child');
  const sdpa = await createSdpa({ threads: 1 });
  const baseRss = rssNow();
  let peakRss = baseRss;
  const heap0 = sdpa.memory().heapBytes;
  const t0 = now();
  const { model } = await loadGguf(sdpa, fileStream(file), { onProgress: () => { peakRss = Math.max(peakRss, rssNow()); } });
  const ms = now() - t0;
  peakRss = Math.max(peakRss, rssNow(), hwm() ?? 0);
  const mem = sdpa.memory();
  process.stdout.write(JSON.stringify({ baseRss, peakRss, heap0, heapBytes: mem.heapBytes, kvReserved: mem.bytesReserved, maxSeqLen: model.maxSeqLen ?? null, ms }) + '\n');
  model.dispose();
  sdpa.dispose();
  process.exit(0);
}

const TYPES = list(arg('types', 'F32,F16,Q8_0,Q4_0,Q4_K,Q6_K')).filter((t) => {
  if (GGUF_MATRIX_TYPES.includes(t)) return true;
  note(`(${t}: not run by this build's dense kernels (GGUF_MATRIX_TYPES ${GGUF_MATRIX_TYPES.join(', ')}); skipped)`);
  return false;
});
const THREADS = list(arg('threads', '1,2')).map(Number);
const LOADS = Number(arg('loads', 3));
const ROUNDS = Number(arg('rounds', 3));
const STEPS = Number(arg('steps', 32));
// activations 'int16' (loadGguf's option, as loadLlama's): q8_0 / q4_0 products on activations quantized per block
const ACTIVATIONS = list(arg('activations', 'float32,int16'));
const INT16_TYPES = new Set(['Q8_0', 'Q4_0']);
const PROMPT = Int32Array.of(1, 300, 1234, 77, 4000, 512, 9, 2500);

function git(...a) {
  try { return execFileSync('git', a, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim(); } catch { return null; }
}
const meta = {
  date: new Date().toISOString(), commit: git('rev-parse', '--short', 'HEAD'), cpu: os.cpus()[0]?.model ?? '?', cores: os.cpus().length,
  node: process.version, loadavgStart: os.loadavg(),
};
note(`sdpa-wasm GGUF bench  ${meta.date}  commit ${meta.commit ?? '?'}  ${meta.cpu} (${meta.cores} vCPU)  node ${meta.node}`);
note(`load average at start ${meta.loadavgStart.map((x) => x.toFixed(2)).join(' ')} (a shared machine: other load moves every number)`);

/** Greedy decode of STEPS tokens after the prompt: tok/s of the timed loop. */
function decodeOnce(model, row) {
  model.truncate(0);
  let tok = argmax(model.forward(PROMPT, { logits: 'last', out: row }));
  const t0 = now();
  for (let i = 0; i < STEPS; i++) tok = argmax(model.forward([tok], { logits: 'last', out: row }));
  const ms = now() - t0;
  model.truncate(0);
  return STEPS / ms * 1000;
}

async function benchFile(shape, type, dir) {
  const file = path.join(dir, `${shape}-${type}.gguf`);
  const t0 = now();
  const { bytes: fileBytes } = writeRandomGguf(file, { shape, type });
  note(`${shape} ${type}: ${(fileBytes / MiB).toFixed(1)} MiB written in ${((now() - t0) / 1000).toFixed(1)} s`);
  const r = { shape, type, fileBytes, memoryMBs: [], streamMBs: [], decode: {} };
  try {
    // peak memory of a streamed load, in a fresh process
    const child = JSON.parse(execFileSync(process.execPath, [SELF, `--child=${file}`], { encoding: 'utf8', maxBuffer: 1 << 20 }).trim().split('\n').pop());
    Object.assign(r, { baseRss: child.baseRss, peakRss: child.peakRss, heapBytes: child.heapBytes, heap0: child.heap0, kvReserved: child.kvReserved, maxSeqLen: child.maxSeqLen });
    // load speed, from memory and from a stream
    const bytes = new Uint8Array(fs.readFileSync(file));
    {
      const sdpa = await createSdpa({ threads: 1 });
      try {
        (await loadGguf(sdpa, bytes)).model.dispose();       // (untimed: grows the heap once)
        for (let i = 0; i < LOADS; i++) {
          let a = now();
          const { model: m1 } = await loadGguf(sdpa, bytes);
          r.memoryMBs.push(fileBytes / MiB / ((now() - a) / 1000));
          m1.dispose();
          a = now();
          const { model: m2 } = await loadGguf(sdpa, fileStream(file));
          r.streamMBs.push(fileBytes / MiB / ((now() - a) / 1000));
          m2.dispose();
        }
      } finally {
        sdpa.dispose();
      }
    }
    // decode at each thread count, one instance each, alternating
    const configs = [];
    if (!flag('no-decode')) try {
      for (const activations of ACTIVATIONS) {
        if (activations === 'int16' && !INT16_TYPES.has(type)) continue;    // (the option changes only q8_0 / q4_0 products)
        for (const threads of THREADS) {
          const sdpa = await createSdpa({ threads });
          configs.push({ threads, activations, key: `${activations === 'int16' ? 'int16 ' : ''}${threads}`, sdpa, model: (await loadGguf(sdpa, bytes, { maxSeqLen: 256, activations })).model, tokS: [] });
        }
      }
      for (const c of configs) { c.row = new Float32Array(c.model.config.vocabSize); decodeOnce(c.model, c.row); }   // warm-up
      for (let round = 0; round < ROUNDS; round++) {
        const order = round % 2 ? [...configs].reverse() : configs;
        for (const c of order) c.tokS.push(decodeOnce(c.model, c.row));
      }
      for (const c of configs) {
        if (c.activations === 'int16') (r.decodeInt16 ??= {})[c.threads] = { tokS: median(c.tokS), samples: c.tokS };
        else r.decode[c.threads] = { tokS: median(c.tokS), samples: c.tokS };
      }
    } finally {
      for (const c of configs) { c.model.dispose(); c.sdpa.dispose(); }
    }
  } finally {
    fs.rmSync(file, { force: true });
  }
  note(`  load ${fmt(median(r.memoryMBs))} MiB/s from memory, ${fmt(median(r.streamMBs))} from a stream; decode ${THREADS.map((t) => `${fmt(r.decode[t]?.tokS)} tok/s at ${t}t`).join(', ')}`);
  return r;
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gguf-bench-'));
const results = [];
try {
  const jobs = [];
  if (!flag('no-small')) for (const type of TYPES) jobs.push(['smollm2-135m', type]);
  if (flag('big')) jobs.push(['tinyllama-1.1b', 'Q4_0']);
  for (const [shape, type] of jobs) results.push(await benchFile(shape, type, dir));
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
meta.loadavgEnd = os.loadavg();

if (flag('json')) {
  out(JSON.stringify({ meta, steps: STEPS, rounds: ROUNDS, loads: LOADS, results }, null, 1));
} else {
  out(`\nLoad (loadGguf; MiB of file per second, median of ${LOADS} [min–max]; peak memory of a streamed load in a fresh process)`);
  out('| shape | type | file MiB | from memory MiB/s | from a stream MiB/s | peak RSS MiB (base → peak) | RSS growth / file | wasm heap MiB (of it KV pages) | heap / file | heap less KV pages / file |');
  out('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of results) {
    out(`| ${r.shape} | ${r.type} | ${fmt(r.fileBytes / MiB)} | ${fmt(median(r.memoryMBs))} ${range(r.memoryMBs)} | ${fmt(median(r.streamMBs))} ${range(r.streamMBs)} | ${fmt(r.baseRss / MiB)} → ${fmt(r.peakRss / MiB)} | ${((r.peakRss - r.baseRss) / r.fileBytes).toFixed(2)}× | ${fmt(r.heapBytes / MiB)} (${fmt(r.kvReserved / MiB)}) | ${(r.heapBytes / r.fileBytes).toFixed(2)}× | ${((r.heapBytes - r.kvReserved) / r.fileBytes).toFixed(2)}× |`);
  }
  if (!flag('no-decode')) {
  out(`\nDecode (greedy, ${STEPS} steps after an ${PROMPT.length}-token prompt; tok/s, median of ${ROUNDS} rounds [min–max])`);
  out(`| shape | type | ${THREADS.map((t) => `${t} thread${t > 1 ? 's' : ''}`).join(' | ')} |${THREADS.length > 1 ? ` ${THREADS.at(-1)}t / ${THREADS[0]}t |` : ''}`);
  out(`|---|---|${THREADS.map(() => '---:').join('|')}|${THREADS.length > 1 ? '---:|' : ''}`);
  for (const r of results) {
    for (const [label, d] of [[r.type, r.decode], [`${r.type}+int16`, r.decodeInt16]]) {
      if (!d || !d[THREADS[0]]) continue;
      const cells = THREADS.map((t) => `${fmt(d[t]?.tokS)} ${d[t] ? range(d[t].samples) : ''}`);
      const ratio = THREADS.length > 1 ? ` ${(d[THREADS.at(-1)].tokS / d[THREADS[0]].tokS).toFixed(2)}× |` : '';
      out(`| ${r.shape} | ${label} | ${cells.join(' | ')} |${ratio}`);
    }
  }
  }
  out(`\nload average at end ${meta.loadavgEnd.map((x) => x.toFixed(2)).join(' ')}`);
}
