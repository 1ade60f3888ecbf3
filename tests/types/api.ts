// The public types say what the contract says: `tsc -p tests/types` (strict, with
// exactOptionalPropertyTypes) must accept every use here and reject each line
// after a `@ts-expect-error` (an unused one is itself an error). types.test.js runs it.
import {
  createSdpa, SdpaError, KVCache, KVCacheGroup, HeapTensor, checkOptions,
  type CacheDType, type DType, type WeightDType, type KVCacheOptions, type RawRows, type KVCacheSize, type OutputTensor, type FloatTensor, type RotaryOptions, type PreparedCall,
} from 'sdpa-wasm';
import * as pkg from 'sdpa-wasm';

const sdpa = await createSdpa({ threads: 'auto', build: undefined });   // undefined counts as absent

// checkOptions: the values of the known names
const read: { steps: unknown; seed: unknown } = checkOptions('myCall', { steps: 2 }, ['steps', 'seed'] as const);
void read;

// createKVCache: a plain cache needs maxSeqLen; sinkTokens only with a window
const plain = sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: 2, headDim: 64 });
const windowed = sdpa.createKVCache({ window: 128, sinkTokens: 4, numKvHeads: 2, headDim: 64 });
const explicitUndefined = sdpa.createKVCache({ maxSeqLen: 8, numKvHeads: 2, headDim: 8, dtype: undefined, batch: undefined });
// @ts-expect-error: a plain cache without maxSeqLen
sdpa.createKVCache({ numKvHeads: 2, headDim: 64 });
// @ts-expect-error: sinkTokens without a window
sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: 2, headDim: 64, sinkTokens: 4 });
// @ts-expect-error: not a cache dtype
sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: 2, headDim: 64, dtype: 'int3' });
// int4, and K and V each a dtype of its own
const i4 = sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: 8, dtype: 'int4' });
const i4dtype: 'int4' = i4.dtype;
const nibbles: Uint8Array = i4.readRaw(0, 1).k.data;
const i4scales: Uint16Array = i4.readRaw(0, 1).k.scales;
const i4offsets: Uint16Array = i4.readRaw(0, 1).v.offsets;
const mixed = sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: 8, keyDtype: 'int8', valueDtype: 'int4' });
const mixedDtype: null = mixed.dtype;
const mixedK: Int8Array = mixed.readRaw(0, 1).k.data;
const mixedV: Uint8Array = mixed.readRaw(0, 1).v.data;
const mixedFork: KVCache<'int8', 'int4'> = mixed.fork();
// @ts-expect-error: a mixed cache's dtype is null, not a string
const mixedString: string = mixed.dtype;
void [i4dtype, nibbles, i4scales, i4offsets, mixedDtype, mixedK, mixedV, mixedFork, mixedString];
// @ts-expect-error: a typo is not an option
sdpa.createKVCache({ maxSeqLen: 256, numKvHeads: 2, headDim: 64, max_seq_len: 9 });

// readRaw is typed by the cache's dtype
const f32: Float32Array = plain.readRaw(0, 1).k.data;
const i8cache = sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: 8, dtype: 'int8' });
const raw8 = i8cache.readRaw(0, 1).v;
const i8: Int8Array = raw8.data;
const scales: Float32Array = raw8.scales;
const zps: Int8Array = raw8.zeroPoints;
const f16: Uint16Array = sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: 8, dtype: 'float16' }).readRaw(0, 1).k.data;
// @ts-expect-error: a float32 cache's raw data is not float16 bits
const wrong: Uint16Array = plain.readRaw(0, 1).k.data;
// @ts-expect-error: only int8 has scales
const noScales: Float32Array = plain.readRaw(0, 1).k.scales;
const anyDtype: CacheDType = Math.random() < 0.5 ? 'float16' : 'int8';
const some = sdpa.createKVCache({ maxSeqLen: 64, numKvHeads: 1, headDim: 8, dtype: anyDtype });
const someRaw: RawRows = some.readRaw(0, 1).k;
const forked: KVCache<'int8'> = i8cache.fork();
const options: KVCacheOptions = { window: 4, numKvHeads: 1, headDim: 8 };
const fromVar: KVCache = sdpa.createKVCache(options);

// allocTensor takes a DType variable
const dt: DType = Math.random() < 0.5 ? 'float32' : 'bool';
const t = sdpa.allocTensor(dt, [2, 3]);
const td: Float32Array | Uint8Array = t.data;
const q: HeapTensor<Float32Array> = sdpa.allocTensor('float32', [1, 1, 8, 64]);
const m: HeapTensor<Uint8Array> = sdpa.allocTensor('bool', [1, 4]);
q.set(new Float32Array(8 * 64));
q.set([1, 2, 3], 5);
// @ts-expect-error: not a HeapDType
sdpa.allocTensor('int8', [2]);

// weights and the dense calls
const w16: HeapTensor<Uint16Array> = sdpa.allocTensor('float16', [8, 64]);
const w4: HeapTensor<Uint8Array> = sdpa.allocTensor('q4_0', [8, 64]);
w4.setBytes(new Uint8Array(w4.byteLength));
const wk4: HeapTensor<Uint8Array> = sdpa.allocTensor('q4_k', [8, 256]);
const wk6: HeapTensor<Uint8Array> = sdpa.allocTensor('q6_k', [8, 256]);
wk6.setBytes(new Uint8Array(wk6.byteLength));
sdpa.linear(sdpa.allocTensor('float32', [256]), wk4);
sdpa.embed(wk6, [0]);
const w5: HeapTensor<Uint8Array> = sdpa.allocTensor('q5_0', [8, 64]);
sdpa.linear(q, w5, { activations: 'int16' });
sdpa.quantize(q, w16);
const y: HeapTensor<Float32Array> = sdpa.linear(q, w4, { accumulate: false, rows: 1, activations: 'int16' });
sdpa.linear({ data: q.data.subarray(0, 64), dims: [1, 64] }, w16, { out: y, accumulate: true });
sdpa.rmsNorm(y, sdpa.allocTensor('float32', [8]), { out: y, eps: 1e-6 });
sdpa.swiglu(y, y, { out: y });
const e: HeapTensor<Float32Array> = sdpa.embed(w4, [0, 1], {});
sdpa.embed(w4, Int32Array.of(3), { out: e });
// @ts-expect-error: accumulate is a boolean
sdpa.linear(q, w4, { accumulate: 1 });
const wd: WeightDType = 'q8_0';
void [wd];
// prepared dense calls: out is required; run() returns nothing
const pl: PreparedCall = sdpa.prepareLinear(q, w4, { out: y, accumulate: true, rows: 1, activations: 'int16' });
const pr = sdpa.prepareRmsNorm(y, sdpa.allocTensor('float32', [8]), { out: y, eps: 1e-6 });
const ps = sdpa.prepareSwiglu(y, y, { out: { data: y.data, dims: [1, 8] } });
const runs: void = pl.run();
const callName: 'sdpa.linear' | 'sdpa.rmsNorm' | 'sdpa.swiglu' = pr.name;
void [runs, callName, ps.disposed];
ps.dispose();
// @ts-expect-error: a prepared call needs out
sdpa.prepareLinear(q, w4, { accumulate: true });
// @ts-expect-error: disposed is read-only
ps.disposed = true;

// attention options accept undefined explicitly; the cache is causal by default
const out = plain.step(q, sdpa.allocTensor('float32', [1, 1, 2, 64]), sdpa.allocTensor('float32', [1, 1, 2, 64]), { isCausal: undefined, out: q });
const same: HeapTensor<Float32Array> = out;
plain.attend(q, { startPos: undefined, attnMask: undefined, scale: null });
// @ts-expect-error: isCausal is a boolean
plain.attend(q, { isCausal: 1 });
// a tree mask over the new rows, and keeping the accepted ones
plain.attend(q, { treeMask: { data: new Uint8Array(1), dims: [1, 1] } });
plain.step(q, sdpa.allocTensor('float32', [1, 1, 2, 64]), sdpa.allocTensor('float32', [1, 1, 2, 64]), { treeMask: m });
// @ts-expect-error: a tree mask is bool
plain.attend(q, { treeMask: { data: new Float32Array(1), dims: [1, 1] } });
// @ts-expect-error: customSdpa has no treeMask
sdpa.customSdpa(q, q, q, { treeMask: m });
plain.keepRows(0, [0, 2]);
plain.keepRows(0, new Int32Array([1]));
const many: Array<OutputTensor | FloatTensor> = sdpa.attendMany([{ cache: plain, q }, { cache: plain, q, startPos: 0, treeMask: m, out: q }]);
// @ts-expect-error: an item needs its query
sdpa.attendMany([{ cache: plain }]);
// rotary embeddings on update / attend / step and the items
const cosT: HeapTensor<Float32Array> = sdpa.allocTensor('float32', [256, 32]);
const rot: RotaryOptions = { cos: cosT, sin: cosT, interleaved: true, positions: [3] };
plain.update(q, q, { rotary: rot });
plain.update(q, q, 4, { rotary: { cos: cosT, sin: cosT } });
plain.attend(q, { rotary: { cos: cosT, sin: cosT, positions: new Int32Array([2]) } });
plain.step(q, q, q, { rotary: rot, treeMask: m });
sdpa.stepMany([{ cache: plain, q, k: q, v: q, rotary: rot }]);
// @ts-expect-error: rotary needs sin
plain.attend(q, { rotary: { cos: cosT } });
// @ts-expect-error: positions are integers
plain.attend(q, { rotary: { cos: cosT, sin: cosT, positions: ['1'] } });
// @ts-expect-error: customSdpa has no rotary
sdpa.customSdpa(q, q, q, { rotary: rot });
void many;
const stepped: Array<OutputTensor | FloatTensor> = sdpa.stepMany([{ cache: plain, q, k: q, v: q }, { cache: plain, q, k: q, v: q, startPos: 3, out: q }]);
// @ts-expect-error: a step item needs k and v
sdpa.stepMany([{ cache: plain, q }]);
void stepped;

// sizes and groups
const size: KVCacheSize = sdpa.kvCacheSize({ maxSeqLen: 256, numKvHeads: 2, headDim: 64 }, 100);
sdpa.reserve(size.poolBytes);
const group: KVCacheGroup = sdpa.createKVCacheGroup([{ maxSeqLen: 256, numKvHeads: 2, headDim: 64 }, { window: 16, numKvHeads: 2, headDim: 64 }]);
const layer0: KVCache = group.layers[0]!;
for (const layer of group) layer.length;
group.truncate(0);
const twin: KVCacheGroup = group.fork();
// @ts-expect-error: a group's entry is a cache's options
sdpa.createKVCacheGroup([{ numKvHeads: 2 }]);

// saved state
const saved: Uint8Array = plain.save({ meta: { model: 'x' }, start: 0, length: undefined });
const chunks = plain.saveChunks({ chunkBytes: 1 << 20 });
const total: number = chunks.bytes;
for (const chunk of chunks) { const c: Uint8Array = chunk; void c; }
const stream: ReadableStream<Uint8Array> = group.saveStream();
const loaded = await sdpa.loadKVCache(saved, { maxSeqLen: 512 });
const restored: KVCache = loaded.cache;
const meta = loaded.meta;
await sdpa.loadKVCache(stream);
await sdpa.loadKVCache([saved.subarray(0, 10), saved.subarray(10)]);
await sdpa.loadKVCache(new Blob([saved.slice()]));
const { group: g2 } = await sdpa.loadKVCacheGroup(group.save());
// @ts-expect-error: not a source
await sdpa.loadKVCache('bytes');
// @ts-expect-error: a typo is not an option
plain.save({ metadata: 1 });
const code: pkg.SdpaErrorCode = 'E_FORMAT';

// the test-only internals key is not public
// @ts-expect-error
pkg.INTERNALS;

try { plain.attend(q); } catch (e) { if (e instanceof SdpaError) { const code: string = e.code; void code; } }
void [saved, total, restored, meta, g2, code];
void [windowed, explicitUndefined, f32, i8, scales, zps, f16, wrong, noScales, someRaw, forked, fromVar, td, m, same, layer0, twin];
sdpa.dispose();

// sdpa-wasm/llama
import { loadLlama, loadTokenizer, createSampler, argmax, BOS, EOS, type LlamaModel, type StopReason, type LlamaConfig } from 'sdpa-wasm/llama';
declare const checkpointBytes: Uint8Array, tokenizerBytes: Uint8Array;
const model: LlamaModel = loadLlama(sdpa, checkpointBytes, { maxSeqLen: 256, keyDtype: 'int8', valueDtype: 'int4', maxChunk: 64, reserve: true, weightDtype: 'q8_0', activations: 'int16' });
const productsMs: number = model.timing.productsMs + model.timing.otherMs; void productsMs;
const cfg: LlamaConfig = model.config;
const tokenizer = loadTokenizer(tokenizerBytes, { vocabSize: cfg.vocabSize });
const ids: Int32Array = tokenizer.encode('Hello', { bos: true, eos: false });
const logits: Float32Array = model.forward(ids, { logits: 'last' });
model.forward([BOS, EOS], { out: new Float32Array(2 * cfg.vocabSize) });
const next: number = createSampler(cfg.vocabSize, { temperature: 0.8, topP: 0.9, topK: 40, seed: 1n }).sample(logits) + argmax(logits);
const r: { tokens: Int32Array; stop: StopReason } = model.generate([next], { maxNewTokens: 8, stop: [EOS] });
for (const id of model.stream([], { temperature: 0 })) tokenizer.decoder().push(id);
const { model: restoredModel, meta: restoredMeta } = await model.fork().restore(model.save({ meta: { next: r.tokens[0] ?? 0 } }));
restoredModel.truncate(restoredMeta === null ? 0 : 1);
// @ts-expect-error: not a cache dtype
loadLlama(sdpa, checkpointBytes, { dtype: 'int3' });
// @ts-expect-error: logits is 'all' or 'last'
model.forward(ids, { logits: 'first' });
// @ts-expect-error: a stop reason is one of three
const bad: StopReason = 'eos';

// sdpa-wasm/llama: GGUF files
import { loadGguf, inspectGguf, GGUF_MATRIX_TYPES, type GgufMetadata } from 'sdpa-wasm/llama';
declare const ggufFile: Blob;
const card: GgufMetadata = await inspectGguf(ggufFile, { signal: new AbortController().signal });
const fits: boolean = card.runnable && card.problem === null && GGUF_MATRIX_TYPES.includes('Q4_0');
const fromGguf = await loadGguf(sdpa, await fetch('model.gguf'), {
  maxSeqLen: 1024, dtype: 'float16', onProgress: ({ loaded, total }) => void (total === null ? loaded : loaded / total), signal: AbortSignal.timeout(60000),
});
const fingerprint: string = fromGguf.model.fingerprint; void fingerprint; void fits;
const types: Readonly<Record<string, number>> = fromGguf.metadata.tensorTypes; void types;
// @ts-expect-error: loadGguf has no weightDtype (the file's types are used as they are)
await loadGguf(sdpa, ggufFile, { weightDtype: 'q8_0' });

// sdpa-wasm/llama: GGUF tokenizers and chat templates
import { setChatTemplateRenderer, type GgufTokenizer } from 'sdpa-wasm/llama';
declare const jinjaModule: { Template: new (template: string) => { render(context: Record<string, unknown>): string } };
setChatTemplateRenderer(jinjaModule);
if (fromGguf.tokenizer !== null) {
  const gt: GgufTokenizer = fromGguf.tokenizer;
  const stop: Int32Array = gt.stopTokens;
  const chat: string = await gt.applyChatTemplate([{ role: 'user', content: 'Hi' }], { addGenerationPrompt: true, tools: [] });
  const chatIds: Int32Array = await gt.encodeChat([{ role: 'user', content: 'Hi' }], { addGenerationPrompt: true }); void chatIds;
  const turn: Int32Array = gt.encode(chat, { bos: false, special: true });
  const kind: 'llama' | 'gpt2' = gt.model;
  const pre: string | null = gt.pre;
  void stop; void turn; void kind; void pre; void gt.tokenType(turn[0] ?? 0); void (gt.eot + Number(gt.addBos));
  // @ts-expect-error: applyChatTemplate's messages need a role
  await gt.applyChatTemplate([{ content: 'Hi' }]);
}
const either = loadTokenizer(tokenizerBytes);
const eitherIds: Int32Array = either.encode('Hello', { bos: true });
const maybeStops: Int32Array | undefined = 'stopTokens' in either ? either.stopTokens : undefined; void eitherIds; void maybeStops;
