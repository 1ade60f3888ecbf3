// sdpa-wasm/llama: a Llama-architecture runner (llama2.c's checkpoint and
// tokenizer formats, and GGUF files of architecture llama) whose every layer's attention and KV cache are sdpa-wasm's.
// Types: llama.d.ts; guide: docs/LLAMA.md.
export { loadLlama, LlamaModel } from './model.js';
export { loadGguf, inspectGguf, GGUF_MATRIX_TYPES } from './gguf-model.js';
export { loadTokenizer, Tokenizer, BOS, EOS } from './tokenizer.js';
export { setChatTemplateRenderer, GgufTokenizer } from './gguf-tokenizer.js';
export { createSampler, argmax } from './sampler.js';
