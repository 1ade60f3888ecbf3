// The chat rows' page script (bundled by Vite, webpack, esbuild; unbundled under an import map).
import { loadTokenizer } from 'sdpa-wasm/llama';
import { renderChat } from './chat-check.js';

renderChat(loadTokenizer, new URL('./vocab.gguf', import.meta.url)).then((r) => { window.__result = r; });
