// The chat rows' module Worker (import map and CDN pages): a Worker has no import
// map, so the page sends the package's URL and @huggingface/jinja's, which is
// handed to setChatTemplateRenderer (without it: the E_LOAD row).
import { renderChat } from './chat-check.js';

self.onmessage = async (e) => {
  const lib = await import(e.data.module);
  if (e.data.jinja) lib.setChatTemplateRenderer(await import(e.data.jinja));
  self.postMessage(await renderChat(lib.loadTokenizer, e.data.vocab));
};
