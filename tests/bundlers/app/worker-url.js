// The unbundled worker (import map and CDN pages): module workers do not see
// the page's import map, so the page resolves 'sdpa-wasm' and sends the URL.
import { decode } from './decode.js';

self.onmessage = async (e) => {
  const { createSdpa } = await import(e.data.module);
  self.postMessage(await decode(createSdpa, e.data.options));
};
