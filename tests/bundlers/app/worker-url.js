// The unbundled worker (import map and CDN pages): module workers do not see
// the page's import map, so the page resolves 'sdpa-wasm' and sends the URL.
import { decode } from './decode.js';

self.onmessage = async (e) => {
  const { createSdpa } = await import(e.data.module);
  const options = { ...e.data.options };
  // ?wasm=<url>&as=module|binary: the app fetches the wasm itself and hands it over
  if (e.data.wasm) {
    const res = await fetch(e.data.wasm);
    if (e.data.as === 'module') options.wasmModule = await WebAssembly.compileStreaming(res);
    else options.wasmBinary = new Uint8Array(await res.arrayBuffer());
  }
  self.postMessage(await decode(createSdpa, options));
};
