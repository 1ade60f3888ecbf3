// The unbundled worker (import map and CDN pages): module workers do not see
// the page's import map, so the page resolves 'sdpa-wasm' and sends the URL.
import { decode } from './decode.js';

self.onmessage = async (e) => {
  const { createSdpa } = await import(e.data.module);
  const options = { ...e.data.options };
  // ?wasm=<url>&recipe=<code>: the app fetches the wasm itself and hands it over, with the
  // README's wasmBinary / wasmModule code (run as written, wasmUrl = <url>; its options are used)
  if (e.data.recipe) {
    const AsyncFunction = (async () => {}).constructor;
    let given = null;
    await new AsyncFunction('createSdpa', 'wasmUrl', e.data.recipe)((o) => { given = o; return {}; }, e.data.wasm);
    Object.assign(options, given);
  }
  self.postMessage(await decode(createSdpa, options));
};
