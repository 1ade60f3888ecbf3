// Types for sdpa-wasm/llama: a Llama-architecture runner (llama2.c's checkpoint
// and tokenizer formats, GGUF files of architecture llama) whose every layer's attention and KV cache are
// sdpa-wasm's. Guide: docs/LLAMA.md.
import type { Sdpa, CacheDType, WeightDType, JsonValue, KVCacheGroup, KVStateSource, SaveChunks } from './index.js';

/** The checkpoint's header, named. */
export interface LlamaConfig {
  readonly dim: number;
  readonly hiddenDim: number;
  readonly nLayers: number;
  readonly nHeads: number;
  /** Divides nHeads (GQA; 1 is MQA). */
  readonly nKvHeads: number;
  readonly vocabSize: number;
  /** The context the model was trained for (the checkpoint's RoPE tables end there). */
  readonly seqLen: number;
}

export interface LoadLlamaOptions {
  /** The most tokens the model holds (default and at most config.seqLen). */
  maxSeqLen?: number | undefined;
  /** KV cache dtype of every layer (default 'float32'); keyDtype / valueDtype give K or V its own. */
  dtype?: CacheDType | undefined;
  keyDtype?: CacheDType | undefined;
  valueDtype?: CacheDType | undefined;
  /** createKVCache's float16NewestPage for every layer (default: on when K or V is 'int4'). */
  float16NewestPage?: boolean | undefined;
  /** Rows per attention step of a long forward (default min(maxSeqLen, 512)); its buffers are made at load. */
  maxChunk?: number | undefined;
  /**
   * Make sure the page pool has the pages of one full context free at load (default true), so that
   * this model's decode steps take pages without allocating. Several models or forks on one instance:
   * sdpa.reserve() the sum of their pages yourself.
   */
  reserve?: boolean | undefined;
  /**
   * The dtype the weight matrices and the embedding are kept in, in wasm memory (default 'float32':
   * the checkpoint's values; 'float16', 'q8_0', 'q4_0': quantized at load with sdpa.quantize, the
   * float32 copy freed). The norms stay float32. q8_0 / q4_0 need dim and hidden_dim multiples of 32.
   */
  weightDtype?: WeightDType | undefined;
  /** 'int16': the q8_0 / q4_0 products on activations quantized per block (sdpa.linear's option; about twice as fast). Default 'float32'. */
  activations?: 'float32' | 'int16' | undefined;
}

export interface ForwardOptions {
  /** 'all' (default): the logits of every appended position, [n, vocabSize]; 'last': only the last row. */
  logits?: 'all' | 'last' | undefined;
  /** A Float32Array of exactly that many values to write the logits into (then returned). */
  out?: Float32Array | undefined;
}

export interface SamplingOptions {
  /** 0: greedy (argmax); default 1. */
  temperature?: number | undefined;
  /** Nucleus sampling (run.c's top-p); 0 or 1: off. Default 0.9. */
  topP?: number | undefined;
  /** Only the topK most likely tokens; 0 (default): off. */
  topK?: number | undefined;
  /** The generator's seed (xorshift64*, as run.c); default: random. */
  seed?: number | bigint | undefined;
}

export interface GenerateOptions extends SamplingOptions {
  /** At most this many tokens (default: until a stop token or maxSeqLen). */
  maxNewTokens?: number | undefined;
  /** Token ids that end generation, emitted but not appended (default [EOS, BOS]). */
  stop?: Int32Array | readonly number[] | undefined;
}

/** Why generation ended: a stop token, maxNewTokens, or the model holding maxSeqLen tokens. */
export type StopReason = 'stop' | 'maxNewTokens' | 'length';

export interface LlamaSaveOptions {
  /** Your JSON (e.g. { next: lastToken }), returned by restore. */
  meta?: JsonValue | undefined;
  /** saveChunks / saveStream: bytes per chunk (default 4 MiB). */
  chunkBytes?: number | undefined;
  /** save only: write into this Uint8Array of yours (see SaveIntoOptions) and return a view of it. */
  into?: Uint8Array | undefined;
  /** saveStream only: aborting it errors the stream and lets the snapshot go. */
  signal?: AbortSignal | undefined;
}

export class LlamaModel {
  private constructor();
  readonly config: LlamaConfig;
  readonly maxSeqLen: number;
  /** Tokens held. */
  readonly length: number;
  /** The KV cache's bytes, all layers. */
  readonly bytes: number;
  /** The cache group (read it; change it through the model). */
  readonly cache: KVCacheGroup;
  readonly keyDtype: CacheDType;
  /** Whether the KV cache keeps its newest page in float16. */
  readonly float16NewestPage: boolean;
  readonly valueDtype: CacheDType;
  readonly disposed: boolean;
  /** This model's last forward (or generate step): tokens, time in our attention steps, time in the dense parts. */
  /**
   * The last forward's time: attentionMs in our attention steps, productsMs in the weight products
   * (classifier included), otherMs in the rest (embedding, norms, SwiGLU, JS); denseMs = productsMs + otherMs.
   */
  readonly timing: { tokens: number; attentionMs: number; productsMs: number; otherMs: number; denseMs: number };
  /** The dtype the weights are kept in (loadLlama's weightDtype; a GGUF file's: the dtype most weight bytes are in). */
  readonly weightDtype: WeightDType;
  /** Names the weights (an FNV-1a hash of the checkpoint's or GGUF file's bytes, and their length): saved states and kept chats refuse other weights. */
  readonly fingerprint: string;
  /**
   * Appends the tokens at `length` and returns their logits (row-major [n, vocabSize],
   * or the last row). E_ARG for an id outside 0 .. vocabSize-1, E_CAPACITY past maxSeqLen:
   * nothing is appended then.
   */
  forward(tokens: Int32Array | Uint32Array | Uint16Array | Uint8Array | readonly number[], options?: ForwardOptions): Float32Array;
  /** The last appended token's logits, copied into `out` (or a new array); null when the model holds none (new, truncated, restored). */
  lastLogits(out?: Float32Array): Float32Array | null;
  /** Keeps the first n tokens. */
  truncate(n: number): void;
  /** A model with the same weights and, copy-on-write, this one's cache. */
  fork(): LlamaModel;
  /** The state (every layer's KV cache) in the portable KV state format. */
  save(options?: LlamaSaveOptions): Uint8Array;
  saveChunks(options?: LlamaSaveOptions): SaveChunks;
  saveStream(options?: LlamaSaveOptions): ReadableStream<Uint8Array>;
  /** A new model with these weights and a saved state (E_FORMAT for another model's state). */
  restore(source: KVStateSource, options?: { signal?: AbortSignal | undefined }): Promise<{ model: LlamaModel; meta: JsonValue | null }>;
  /**
   * Checks the arguments and appends the prompt (now), then returns a generator that
   * samples one token at a time (yielded). Every yielded token but the last is appended;
   * the generator returns why it stopped. A model changed between steps ends it (E_ARG).
   */
  stream(prompt: Int32Array | readonly number[], options?: GenerateOptions): Generator<number, StopReason, void>;
  /** stream() to its end. */
  generate(prompt: Int32Array | readonly number[], options?: GenerateOptions): { tokens: Int32Array; stop: StopReason };
  /** Frees the cache (the weights go with the last of a model and its forks). */
  dispose(): void;
}

/** A model from a llama2.c version-0 checkpoint. Synchronous. E_FORMAT: a file that is not one. */
export function loadLlama(sdpa: Sdpa, checkpoint: Uint8Array | ArrayBuffer | ArrayBufferView, options?: LoadLlamaOptions): LlamaModel;

/** What loadGguf reads: bytes in memory, a File / Blob, a fetch Response, a stream or an async iterable of chunks (a Node file stream). */
export type GgufSource = Uint8Array | ArrayBuffer | ArrayBufferView | Blob | Response | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;

export interface LoadGgufOptions {
  /** The most tokens the model holds (default min(llama.context_length, 4096); at most context_length). */
  maxSeqLen?: number | undefined;
  /** KV cache dtypes, float16NewestPage, maxChunk, reserve, activations: as loadLlama's. */
  dtype?: CacheDType | undefined;
  keyDtype?: CacheDType | undefined;
  valueDtype?: CacheDType | undefined;
  float16NewestPage?: boolean | undefined;
  maxChunk?: number | undefined;
  reserve?: boolean | undefined;
  activations?: 'float32' | 'int16' | undefined;
  /** Called after each chunk is in wasm memory: bytes read and the file's size (null when the source does not say). */
  onProgress?: ((progress: { loaded: number; total: number | null }) => void) | undefined;
  /** Aborting rejects with the signal's reason; nothing is kept. */
  signal?: AbortSignal | undefined;
}

/** A GGUF file's model card (inspectGguf, loadGguf). */
export interface GgufMetadata {
  /** GGUF version: 2 or 3. */
  readonly version: number;
  /** general.architecture ('llama' is the one this build runs). */
  readonly architecture: string | null;
  readonly name: string | null;
  /** The file's size in bytes (null: a stream that did not say). */
  readonly fileBytes: number | null;
  /** Weights' values (a tied classifier counted once). */
  readonly parameters: number;
  /** Bytes of the tensors: what the weights take in wasm memory. */
  readonly weightBytes: number;
  /** Tensors per ggml type, e.g. { F32: 65, Q4_K: 193, Q6_K: 33 }. */
  readonly tensorTypes: Readonly<Record<string, number>>;
  readonly contextLength: number | null;
  readonly embeddingLength: number | null;
  readonly blockCount: number | null;
  readonly headCount: number | null;
  readonly headCountKv: number | null;
  readonly feedForwardLength: number | null;
  readonly vocabSize: number | null;
  readonly ropeFreqBase: number | null;
  readonly rmsEps: number | null;
  /** tokenizer.ggml.model: 'llama' (SentencePiece) or 'gpt2' (byte-level BPE); null: no tokenizer. */
  readonly tokenizerModel: string | null;
  /** tokenizer.chat_template (Jinja), or null. */
  readonly chatTemplate: string | null;
  /** Whether this build runs it, and if not, why (in words: another architecture, a tensor type, too big for the heap). */
  readonly runnable: boolean;
  readonly problem: string | null;
  /** Every metadata key's value (numbers, bigint beyond 2^53, strings, booleans, typed arrays, arrays). */
  readonly keys: ReadonlyMap<string, unknown>;
}

/**
 * A model, its tokenizer (null when the file has none) and its card, from a GGUF file of architecture llama
 * (versions 2 and 3). The weights stream into wasm memory chunk by chunk in the file's types (GGUF_MATRIX_TYPES
 * for matrices, F32 for norms); no JS copy is kept. Everything but a short file is checked before any weight is
 * read: E_FORMAT (a malformed file, a missing or malformed key or tensor, another architecture), E_DTYPE (a tensor
 * type this build does not run: names the tensor and the types it runs), E_CAPACITY (more than the wasm heap holds).
 */
export function loadGguf(sdpa: Sdpa, source: GgufSource, options?: LoadGgufOptions): Promise<{ model: LlamaModel; tokenizer: GgufTokenizer | null; metadata: GgufMetadata }>;

/**
 * Reads only a GGUF file's header: its card, and whether (and why not) this build runs it with loadGguf's
 * defaults (its tokenizer too). Pass the whole file (a File, a Response, a stream: only the header's bytes are
 * read, then the source is cancelled); bytes in memory are taken as the whole file (its tensors must lie inside).
 */
export function inspectGguf(source: GgufSource, options?: { signal?: AbortSignal | undefined }): Promise<GgufMetadata>;

/** The ggml tensor types this build runs as weight matrices ('F32', 'F16', 'Q8_0', 'Q4_0', ...). */
export const GGUF_MATRIX_TYPES: readonly string[];

export interface EncodeOptions {
  /** Prepend <s> (default true). */
  bos?: boolean | undefined;
  /** Append </s> (default false). */
  eos?: boolean | undefined;
}

/** A streaming decoder: push(id) gives the text complete so far (never half a character), end() the rest. */
export interface TokenDecoder {
  push(id: number): string;
  end(): string;
}

export class Tokenizer {
  private constructor();
  readonly vocabSize: number;
  /** 1 */
  readonly bos: number;
  /** 2 */
  readonly eos: number;
  /** run.c's encode (a dummy-prefix space; byte fallback; merges by score). */
  encode(text: string, options?: EncodeOptions): Int32Array;
  decode(ids: Iterable<number>): string;
  /** `prev`: the token before the first pushed (default BOS: a first piece loses its leading space). */
  decoder(prev?: number): TokenDecoder;
  /** A piece's bytes. */
  piece(id: number): Uint8Array;
  score(id: number): number;
}

export interface GgufEncodeOptions {
  /** Prepend BOS (default: the file's tokenizer.ggml.add_bos_token; E_ARG when the vocab has no BOS). */
  bos?: boolean | undefined;
  /** Append EOS (default: tokenizer.ggml.add_eos_token). */
  eos?: boolean | undefined;
  /** Parse control tokens' text (<|eot_id|>, <s> ...) as those tokens, as llama.cpp's parse_special (default false; user-defined tokens are always parsed). */
  special?: boolean | undefined;
}

export interface ChatMessage {
  role: string;
  content: unknown;
  [key: string]: unknown;
}

export interface ChatTemplateOptions {
  /** End with the assistant's header (default true). */
  addGenerationPrompt?: boolean | undefined;
  /** Other variables the template reads (tools, documents, ...). */
  [variable: string]: unknown;
}

/**
 * A GGUF file's tokenizer (tokenizer.* keys), encoding and decoding as llama.cpp does:
 * 'llama' (SentencePiece BPE by scores, space prefix, byte fallback) or 'gpt2' (byte-level BPE by merge
 * rank, with the pre-tokenizer named by tokenizer.ggml.pre).
 */
export class GgufTokenizer {
  private constructor();
  readonly vocabSize: number;
  /** BOS id, or -1 when the file names none. */
  readonly bos: number;
  /** EOS id, or -1. */
  readonly eos: number;
  /** End-of-turn id (tokenizer.ggml.eot_token_id, else <|eot_id|>, <|im_end|> ... by text), or -1. */
  readonly eot: number;
  /** The ids that end a generation as llama.cpp treats them (EOS, EOT, EOM, FIM pad / repo / separator, <|endoftext|> ...), ascending; a copy. */
  readonly stopTokens: Int32Array;
  /** tokenizer.ggml.add_bos_token / add_eos_token (encode's defaults). */
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly model: 'llama' | 'gpt2';
  /** gpt2: the pre-tokenizer's name ('llama-bpe', 'qwen2', 'smollm', 'gpt-2', 'default', ...); llama: null. */
  readonly pre: string | null;
  /** tokenizer.chat_template (Jinja), or null. */
  readonly chatTemplate: string | null;
  encode(text: string, options?: GgufEncodeOptions): Int32Array;
  /** Control, unknown and unused tokens give nothing; the first SPM piece after a control token (or the start) loses its space prefix. */
  decode(ids: Iterable<number>): string;
  /** `prev`: the token before the first pushed (default BOS, or -1: the start). */
  decoder(prev?: number): TokenDecoder;
  /** The bytes a token stands for (control and user-defined tokens: their text). */
  piece(id: number): Uint8Array;
  /** tokenizer.ggml.scores' value (0 without scores). */
  score(id: number): number;
  tokenType(id: number): 'undefined' | 'normal' | 'unknown' | 'control' | 'user-defined' | 'unused' | 'byte';
  /**
   * The chat rendered by the file's template with @huggingface/jinja (bos_token / eos_token are the vocab's).
   * The renderer is imported on first use (`import('@huggingface/jinja')`); where a bare import does not
   * resolve (a module Worker, which has no import map), give it with setChatTemplateRenderer first.
   * Errors: E_FORMAT (no template, or one that does not parse), E_ARG (bad messages / options, a failed render),
   * E_LOAD (the renderer could not be imported).
   */
  applyChatTemplate(messages: readonly ChatMessage[], options?: ChatTemplateOptions): Promise<string>;
  /**
   * The ids of a chat as llama.cpp's chat feeds its model: applyChatTemplate's text with the template's own
   * BOS text (at the start) and EOS text (at the end) taken off, special tokens' text parsed, BOS / EOS added
   * as the file asks (add_bos_token / add_eos_token): BOS once whether or not the template writes it.
   */
  encodeChat(messages: readonly ChatMessage[], options?: ChatTemplateOptions): Promise<Int32Array>;
}

/** Gives chat templates their renderer: the @huggingface/jinja module (e.g. `await import(urlOfItsDistIndexJs)` in a Worker). */
export function setChatTemplateRenderer(jinja: { Template: new (template: string) => { render(context: Record<string, unknown>): string } }): void;

/**
 * A llama2.c tokenizer.bin (a Tokenizer; `vocabSize`: the checkpoint's, the file must hold exactly that many
 * pieces), or, for bytes starting "GGUF" (a vocab-only file or a whole model's header), the file's tokenizer
 * (a GgufTokenizer; `vocabSize`, when given, must be its token count).
 */
export function loadTokenizer(bytes: Uint8Array | ArrayBuffer | ArrayBufferView, options?: { vocabSize?: number | undefined }): Tokenizer | GgufTokenizer;

export interface Sampler {
  /** A token id from a row of vocabSize logits. Allocates nothing. */
  sample(logits: Float32Array): number;
  readonly temperature: number;
  readonly topP: number;
  readonly topK: number;
}
export function createSampler(vocabSize: number, options?: SamplingOptions): Sampler;
/** The index of the largest value (the first of equals). */
export function argmax(row: ArrayLike<number>): number;

export const BOS: 1;
export const EOS: 2;
