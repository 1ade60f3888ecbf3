// llama2.c's run.c (github.com/karpathy/llama2.c) compiled to wasm: a speed peer for the
// llama runner. The user gives the path of a run.c (it is never committed here, never
// downloaded at test time); buildRunC copies it into outDir with two patches and compiles it
// with emcc -O3 -msimd128 -ffast-math (Node, synchronous compilation, memory growth, the
// host's files through NODERAWFS); runRunC runs it with node and parses what it prints.
//
// The patches (both in generate(); nothing else in run.c changes):
//  1. the BOS stop `if (next == 1) { break; }` is removed, so a run is exactly `steps`
//     forward passes (a random or small model may sample BOS early);
//  2. one stderr line of our own after run.c's: "runc-bench decode: <n> forwards from pos
//     <p> in <ms> ms (<k> prompt tokens)", timed with CLOCK_MONOTONIC (performance.now()).
//
// What run.c's "achieved tok/s" measures (read from run.c, generate()): run.c has no batched
// prefill; every position, prompt or not, is one forward(token, pos). Its timer starts after
// the first loop iteration (the forward at pos 0 of BOS, untimed as a warm-up) and stops
// after the last; the number is (steps - 1) / that time, where each of the steps - 1 timed
// iterations is one forward at pos 1..steps-1 plus either forcing the next prompt token
// (pos < promptTokens - 1) or sampling (argmax at temperature 0), then decoding and printing
// the piece with fflush(stdout) (a write to the pipe). So it includes the prompt's forward
// passes after the first (promptTokens - 2 of them), and its clock is CLOCK_REALTIME in whole
// milliseconds (time_in_ms(); in wasm32 its `long` is 32 bits, so the value wraps, but the
// difference end - start stays right). steps is clamped to the model's seq_len by run.c.
//
// Decode-only (our line, returned as decodeTokS): the forwards at pos >= p, p = max(promptTokens
// - 1, 1): every forward whose logits are sampled (pos promptTokens - 1 gives the first
// generated token), without the untimed pos-0 warm-up; same per-iteration work as above,
// ending just after run.c's own report. With a one- or two-token prompt (BOS + one piece) it
// times exactly the iterations run.c times. The prompt's forwards cost what decode forwards cost at the same positions
// (single-token forwards either way), so the two numbers differ only by which positions count.
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildEnv } from '../../scripts/build.mjs';

const tail = (s) => (s.length > 3000 ? '…' + s.slice(-3000) : s);   // emcc glue errors print the whole minified line

export const RUNC_FLAGS = Object.freeze(['-O3', '-msimd128', '-ffast-math', '-sENVIRONMENT=node', '-sWASM_ASYNC_COMPILATION=0',
  '-sALLOW_MEMORY_GROWTH=1', '-sNODERAWFS=1']);

const BOS_STOP = 'if (next == 1) { break; }';
const LOOP_HEAD = '        float* logits = forward(transformer, token, pos);';
const LOOP_START = '    int pos = 0;     // position in the sequence\n    while (pos < steps) {';
const REPORT = '    free(prompt_tokens);\n}';
const CLOCK = `
// runc-bench (bench/lib/runc.mjs): a sub-millisecond clock for the decode-only line
static double runc_bench_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000.0 + t.tv_nsec / 1e6;
}
`;

/** run.c's text with the two patches (throws when run.c is not the generate() this expects). */
export function patchRunC(src) {
  const count = (text, s) => text.split(s).length - 1;
  const expect = (text, s, what) => {
    const n = count(text, s);
    if (n !== 1) throw new Error(`runc: run.c has ${n} copies of ${what} (${JSON.stringify(s)}); expected exactly 1 (llama2.c's run.c, e.g. commit 350e04f of 2024)`);
  };
  expect(src, 'void generate(', 'generate()');
  const gen = src.indexOf('void generate(');
  const end = src.indexOf(REPORT, gen);
  if (end < 0) throw new Error("runc: generate() of run.c does not end with free(prompt_tokens); expected llama2.c's run.c");
  let body = src.slice(gen, end);           // generate() up to its free(prompt_tokens): every patch stays inside
  expect(body, BOS_STOP, 'the BOS stop in generate()');
  expect(body, LOOP_HEAD, "generate()'s forward call");
  expect(body, LOOP_START, "generate()'s `int pos = 0; while (pos < steps)`");
  body = body.replace(BOS_STOP, '/* runc-bench: BOS stop removed, runs are fixed-length */')
    .replace(LOOP_HEAD, '        if (pos == runc_bench_from) { runc_bench_start = runc_bench_ms(); }   // runc-bench\n' + LOOP_HEAD)
    .replace(LOOP_START, '    int runc_bench_from = num_prompt_tokens - 1 > 1 ? num_prompt_tokens - 1 : 1;   // runc-bench\n' +
      '    double runc_bench_start = 0.0;   // runc-bench\n' + LOOP_START);
  return src.slice(0, gen) + CLOCK + '\n' + body +
    '    {   // runc-bench: decode-only timing\n' +
    '        double runc_bench_end = runc_bench_ms();\n' +
    '        if (runc_bench_start > 0.0) fprintf(stderr, "runc-bench decode: %d forwards from pos %d in %.3f ms (%d prompt tokens)\\n",\n' +
    '            pos - runc_bench_from, runc_bench_from, runc_bench_end - runc_bench_start, num_prompt_tokens);\n' +
    '    }\n' + src.slice(end);
}

/**
 * Copies run.c (runcPath) into outDir (patched: see the top of this file) and compiles
 * <outDir>/run_fast.js (+ .wasm) with emcc; skips when a stamp (the patched source's and
 * the flags' hash) says the outputs are up to date. Returns { jsPath, built } (built: false
 * when skipped). Needs /usr/bin/emcc (Debian's 3.1.6); scripts/build.mjs's buildEnv gives it
 * NODE_PATH and a PATH without node_modules/.bin.
 */
export async function buildRunC(runcPath, outDir, { log = (m) => process.stderr.write(m + '\n') } = {}) {
  if (!runcPath || !fs.existsSync(runcPath)) throw new Error(`runc: no run.c at ${runcPath} (pass llama2.c's run.c, e.g. --runc=/path/to/llama2.c/run.c)`);
  const patched = patchRunC(fs.readFileSync(runcPath, 'utf8'));
  fs.mkdirSync(outDir, { recursive: true });
  const src = path.join(outDir, 'run.c');
  const jsPath = path.join(outDir, 'run_fast.js');
  const wasmPath = path.join(outDir, 'run_fast.wasm');
  const stampPath = path.join(outDir, 'run_fast.stamp');
  const stamp = crypto.createHash('sha256').update(patched).update('\0' + RUNC_FLAGS.join(' ')).digest('hex');
  if (fs.existsSync(jsPath) && fs.existsSync(wasmPath) && fs.existsSync(path.join(outDir, 'package.json')) && fs.existsSync(stampPath) && fs.readFileSync(stampPath, 'utf8') === stamp) {
    return { jsPath, built: false };
  }
  fs.writeFileSync(src, patched);
  // the glue is CommonJS (require, __dirname); the repository's package.json says "type": "module"
  fs.writeFileSync(path.join(outDir, 'package.json'), '{"type":"commonjs"}\n');
  const args = [...RUNC_FLAGS, '-o', jsPath, src, '-lm'];
  log(`runc: building (emcc ${args.join(' ')})`);
  const r = spawnSync('emcc', args, { env: buildEnv(), encoding: 'utf8', cwd: outDir });
  if (r.error || r.status !== 0) throw new Error(`runc: emcc failed (${r.error ? r.error.message : 'exit ' + r.status}):\n${r.stderr}`);
  fs.writeFileSync(stampPath, stamp);
  return { jsPath, built: true };
}

/**
 * Runs <jsPath> (from buildRunC) on a llama2.c checkpoint + tokenizer.bin:
 * `node jsPath model -z tokenizer -t temperature -i prompt -n steps` (-s seed when given).
 * Returns { tokS, decodeTokS, decodeForwards, decodeFrom, decodeMs, promptTokens, text, stderr }:
 * tokS is run.c's "achieved tok/s" (see the top of this file for what it counts), decodeTokS
 * ours (decode forwards only; NaN when the run had none), text what run.c printed to stdout
 * without its final newline: the prompt's pieces (as run.c decodes them) then the generated
 * ones. steps above the checkpoint's seq_len is clamped by run.c.
 */
export function runRunC(jsPath, modelPath, tokenizerPath, { prompt = '', steps = 256, temperature = 0, seed, nodeArgs = [], timeoutMs = 30 * 60e3 } = {}) {
  const args = [...nodeArgs, jsPath, modelPath, '-z', tokenizerPath, '-t', String(temperature), '-i', prompt, '-n', String(steps)];
  if (seed !== undefined) args.push('-s', String(seed));
  const r = spawnSync(process.execPath, args, { encoding: 'utf8', maxBuffer: 256 << 20, timeout: timeoutMs });
  if (r.error || r.status !== 0) {
    throw new Error(`runc: ${path.basename(jsPath)} failed (${r.error ? r.error.message : r.signal ? 'signal ' + r.signal : 'exit ' + r.status}):\n${tail(r.stderr)}`);
  }
  const m = /achieved tok\/s: ([0-9.eE+-]+|inf|nan)/.exec(r.stderr);
  if (!m) throw new Error(`runc: no "achieved tok/s" line in run.c's stderr:\n${tail(r.stderr)}`);
  const d = /runc-bench decode: (\d+) forwards from pos (\d+) in ([0-9.]+) ms \((\d+) prompt tokens\)/.exec(r.stderr);
  const decodeForwards = d ? Number(d[1]) : 0;
  const decodeMs = d ? Number(d[3]) : NaN;
  return {
    tokS: Number(m[1]),
    decodeTokS: decodeForwards > 0 && decodeMs > 0 ? decodeForwards / decodeMs * 1000 : NaN,
    decodeForwards,
    decodeFrom: d ? Number(d[2]) : NaN,
    decodeMs,
    promptTokens: d ? Number(d[4]) : NaN,
    text: r.stdout.replace(/\n$/, ''),
    stderr: r.stderr,
  };
}

/** Where bench scripts keep the build: build/bench/runc/ under the repository root. */
export const defaultRunCDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'build', 'bench', 'runc');
