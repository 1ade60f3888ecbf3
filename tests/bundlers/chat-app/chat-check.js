// A chat template rendered by sdpa-wasm/llama's GGUF tokenizer (the bundler
// suite's chat rows): the vocab-only GGUF at `url` (a template, <s> / </s>),
// rendered and tokenized. @huggingface/jinja is imported by the package on
// first use, or was given with setChatTemplateRenderer.
export async function renderChat(loadTokenizer, url) {
  try {
    const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
    const tokenizer = loadTokenizer(bytes);
    const text = await tokenizer.applyChatTemplate([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true });
    return { ok: true, text, ids: Array.from(tokenizer.encode(text, { bos: false, special: true })) };
  } catch (e) {
    return { ok: false, error: { name: e?.name ?? 'Error', code: e?.code ?? null, message: String(e?.message ?? e) } };
  }
}
