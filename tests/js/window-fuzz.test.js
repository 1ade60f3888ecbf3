// window-fuzz.test.js: random operation sequences on windowed (ring) KV caches,
// with fast-check. Each run makes a cache with a random window W and sink
// rows S and applies random steps (decode and prefill, some reaching back
// before the end), updates, attends, reads, truncates and forks. Before each
// call the test predicts, from the contract's rules alone and the cache's
// length and windowStart read just before, whether the call is allowed and
// with which code it is rejected (CONTRACT.md section 3, "Windowed caches").
// The property:
//   - an allowed call succeeds; its output equals the float64 reference over
//     the whole sequence kept in JS (visibility t <= p and (t > p - W or
//     t < S)); reads give back exactly the rows written;
//   - a rejected call throws that code and leaves length, windowStart, bytes
//     and every kept row unchanged;
//   - after every write at least the last W + 64 rows written are kept
//     (windowStart <= highest length - W - 64; a truncate only drops rows),
//     and the bytes held never exceed the sink pages plus the ring.
// Budget: SDPA_WINDOW_FUZZ_RUNS (default 120) runs, seed SDPA_FUZZ_SEED.
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import fc from 'fast-check';
import { createSdpa, SdpaError } from '../../js/index.js';
import { rng, randTensor } from './helpers.js';
import { refCustomSdpa, windowVisibility as visibility } from './reference.js';

const env = process.env;
const RUNS = Number(env.SDPA_WINDOW_FUZZ_RUNS) || 120;
const SEED = env.SDPA_FUZZ_SEED !== undefined ? Number(env.SDPA_FUZZ_SEED) : 0x5d9a0012;
const HQ = 2, H = 1, D = 4, ROW = H * D, PAGE = 64;

let sdpa;
test.before(async () => { sdpa = await createSdpa({ threads: 2 }); });
test.after(() => { sdpa.dispose(); });

const opArb = fc.record({
  kind: fc.constantFrom('step', 'step', 'step', 'update', 'attend', 'read', 'truncate', 'fork'),
  n: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 20 }), fc.integer({ min: 1, max: 200 })),
  back: fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 0, max: 80 }), fc.integer({ min: 0, max: 400 })),
  narrow: fc.oneof(fc.constant(0), fc.constant(0), fc.integer({ min: 1, max: 40 })),
});
const caseArb = fc.record({
  W: fc.oneof(fc.integer({ min: 1, max: 8 }), fc.integer({ min: 1, max: 150 })),
  S: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 70 })),
  ops: fc.array(opArb, { minLength: 1, maxLength: 25 }),
  seed: fc.integer(),
});

function dense(hist, n) {
  const k = new Float32Array(n * ROW), v = new Float32Array(n * ROW);
  for (let t = 0; t < n; t++) { if (hist.k[t]) { k.set(hist.k[t], t * ROW); v.set(hist.v[t], t * ROW); } }
  return [{ data: k, dims: [1, n, H, D] }, { data: v, dims: [1, n, H, D] }];
}

function worst(got, want) {
  let mx = 0, err = 0;
  for (let i = 0; i < want.length; i++) mx = Math.max(mx, Math.abs(want[i]));
  for (let i = 0; i < want.length; i++) { const e = Math.abs(got[i] - want[i]); if (!(e <= err)) err = Number.isNaN(e) ? Infinity : e; }
  return err <= 1e-5 * (1 + mx) ? null : `|got - ref| = ${err}`;
}

const code = (fn) => { try { return { ok: true, value: fn() }; } catch (e) { if (e instanceof SdpaError) return { ok: false, code: e.code, message: e.message }; throw e; } };

/** One run; returns null or a description of the first broken property. */
function runCase({ W, S, ops, seed }) {
  const rand = rng(seed);
  let cache = sdpa.createKVCache({ numKvHeads: H, headDim: D, window: W, sinkTokens: S });
  const hist = { k: [], v: [] };
  let high = 0;  // the highest length reached since the cache was last cut to its sink rows
  // a page as the pool counts it (a 64-byte header) and its table slot (CONTRACT.md section 3, "Bytes")
  const ringBytes = (Math.ceil(S / PAGE) + Math.ceil((W - 1) / PAGE) + 2) * (Math.ceil(2 * PAGE * D * 4 / 64) * 64 + 64 + 4);
  const kept = (t) => t < cache.length && (t < S || t >= cache.windowStart);
  // (the kept rows themselves are compared by checkKept)
  const state = () => ({ length: cache.length, ws: cache.windowStart, bytes: cache.bytes });
  const checkKept = (label) => {
    // every kept row reads back exactly what was written
    for (const [a, b] of [[0, Math.min(S, cache.length)], [cache.windowStart, cache.length]]) {
      if (b <= a) continue;
      const r = cache.read(a, b - a);
      for (let t = a; t < b; t++) {
        for (let j = 0; j < ROW; j++) {
          if (r.k.data[(t - a) * ROW + j] !== hist.k[t][j] || r.v.data[(t - a) * ROW + j] !== hist.v[t][j]) return `${label}: row ${t} reads back wrong`;
        }
      }
    }
    return null;
  };
  try {
    for (const [i, op] of ops.entries()) {
      const length = cache.length, ws = cache.windowStart;
      const label = `op ${i} ${op.kind} (W ${W}, S ${S}, length ${length}, windowStart ${ws})`;
      const Wa = op.narrow && op.narrow < W ? W - op.narrow : 0;  // a narrower attention window, or the cache's
      const evictedWrite = (sp, n) => sp + n > S && Math.max(sp, S) < ws;
      const windowGone = (sp) => { const f = Math.max(sp - (Wa || W) + 1, S); return f <= sp && f < ws; };
      let expect = 'OK', call, after;
      const before = state();
      if (op.kind === 'step' || op.kind === 'update') {
        const sp = Math.max(0, length - op.back), n = op.n;
        const k = randTensor(rand, [1, n, H, D]), v = randTensor(rand, [1, n, H, D]), q = randTensor(rand, [1, n, HQ, D]);
        if (evictedWrite(sp, n)) expect = 'E_START_POS';
        else if (op.kind === 'step' && windowGone(sp)) expect = 'E_START_POS';
        call = op.kind === 'step' ? () => cache.step(q, k, v, sp, Wa ? { window: Wa } : undefined) : () => cache.update(k, v, sp);
        after = (res) => {
          for (let t = 0; t < n; t++) { hist.k[sp + t] = k.data.slice(t * ROW, (t + 1) * ROW); hist.v[sp + t] = v.data.slice(t * ROW, (t + 1) * ROW); }
          hist.k.length = Math.max(hist.k.length, sp + n); hist.v.length = hist.k.length;
          high = Math.max(high, cache.length);
          if (cache.windowStart > Math.max(S, high - W - PAGE)) return `${label}: windowStart ${cache.windowStart} keeps fewer than the last W + 64 rows written (up to ${high})`;
          if (cache.bytes > ringBytes) return `${label}: ${cache.bytes} bytes held, the ring has ${ringBytes}`;
          if (op.kind !== 'step') return null;
          const [K, V] = dense(hist, sp + n);
          const m = worst(res.data, refCustomSdpa(q, K, V, { startPos: sp, attnMask: visibility(sp, n, Wa || W, S) }));
          return m && `${label}: step of ${n} rows at ${sp}: ${m}`;
        };
      } else if (op.kind === 'attend') {
        const n = Math.min(op.n, 20), sp = Math.max(0, length - n - op.back);
        const q = randTensor(rand, [1, n, HQ, D]);
        if (sp + n > length) expect = 'E_START_POS';
        else if (windowGone(sp)) expect = 'E_START_POS';
        call = () => cache.attend(q, { startPos: sp, ...(Wa ? { window: Wa } : {}) });
        after = (res) => {
          const [K, V] = dense(hist, sp + n);
          const m = worst(res.data, refCustomSdpa(q, K, V, { startPos: sp, attnMask: visibility(sp, n, Wa || W, S) }));
          return m && `${label}: attend of ${n} rows at ${sp}: ${m}`;
        };
      } else if (op.kind === 'read') {
        const n = Math.min(op.n, 40), start = Math.max(0, length - n - op.back + 5);
        let allKept = true;
        for (let t = start; t < start + n; t++) allKept &&= kept(t);
        if (!allKept) expect = 'E_CAPACITY';
        call = () => cache.read(start, n);
        after = (res) => {
          for (let t = 0; t < n; t++) for (let j = 0; j < ROW; j++) if (res.k.data[t * ROW + j] !== hist.k[start + t][j]) return `${label}: read row ${start + t}`;
          return null;
        };
      } else if (op.kind === 'truncate') {
        const to = Math.max(0, length - op.back);
        if (to > S && to < ws) expect = 'E_CAPACITY';
        call = () => cache.truncate(to);
        after = () => { hist.k.length = to; hist.v.length = to; if (to <= S) high = to; return cache.length === to ? null : `${label}: length ${cache.length} after truncate(${to})`; };
      } else {
        call = () => cache.fork();
        after = (twin) => {
          const old = cache;
          cache = twin;
          old.dispose();  // the fork keeps every page it shares
          return twin.windowStart === ws && twin.length === length ? null : `${label}: the fork has length ${twin.length}, windowStart ${twin.windowStart}`;
        };
      }
      const r = code(call);
      if (expect === 'OK') {
        if (!r.ok) return `${label}: rejected with ${r.code}: ${r.message}`;
        const m = after(r.value) || checkKept(label);
        if (m) return m;
      } else {
        if (r.ok) return `${label}: accepted, expected ${expect}`;
        if (r.code !== expect) return `${label}: ${r.code}, expected ${expect}: ${r.message}`;
        const now = state();
        if (now.length !== before.length || now.ws !== before.ws || now.bytes !== before.bytes) return `${label}: the rejected call changed the cache`;
        const m = checkKept(`${label} (rejected)`);
        if (m) return m;
      }
    }
    return null;
  } finally {
    cache.dispose();
  }
}

test(`windowed caches: random operation sequences follow the contract's rules and the reference (seed ${SEED}, ${RUNS} runs)`, () => {
  let failure = null;
  const out = fc.check(fc.property(caseArb, (c) => {
    try { failure = runCase(c); } catch (e) { failure = `threw ${e && e.stack}`; }
    return failure === null;
  }), { seed: SEED, numRuns: RUNS });
  if (out.failed && out.counterexample) { try { failure = runCase(out.counterexample[0]); } catch (e) { failure = `threw ${e && e.stack}`; } }
  if (out.failed) assert.unreachable(`${failure}\ncounterexample: ${JSON.stringify(out.counterexample)}\n(seed ${SEED}, path ${out.counterexample ? out.counterexamplePath : ''})`);
  assert.is(out.numRuns, RUNS);
  console.log(`window fuzz: ${out.numRuns} runs`);
});

test.run();
