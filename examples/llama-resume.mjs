// The package's own model (models/fortunes) writing a fortune on sdpa-wasm's
// attention: a prompt, 24 sampled tokens, the conversation saved, restored in a
// new instance and continued with no prefill, exactly as if never interrupted.
import fs from 'node:fs';
import { createSdpa } from 'sdpa-wasm';
import { loadLlama, loadTokenizer } from 'sdpa-wasm/llama';

const checkpoint = fs.readFileSync(new URL('../models/fortunes/model.bin', import.meta.url));
const tokenizerFile = fs.readFileSync(new URL('../models/fortunes/tokenizer.bin', import.meta.url));
const sampling = { temperature: 0.8, topP: 0.9, maxNewTokens: 24, stop: [] };

const sdpa = await createSdpa();
const model = loadLlama(sdpa, checkpoint, { dtype: 'int8' });
const tokenizer = loadTokenizer(tokenizerFile, { vocabSize: model.config.vocabSize });
const prompt = tokenizer.encode('You will', { bos: true });

const first = model.generate(prompt, { ...sampling, seed: 1 });
// every generated token but the last is in the model: save the last one with it
const saved = model.save({ meta: { next: first.tokens.at(-1) } });
const second = model.generate([first.tokens.at(-1)], { ...sampling, seed: 2 });
sdpa.dispose();

// later, in another instance (another page load, a worker): restore and go on
const sdpa2 = await createSdpa({ threads: 1 });
const base = loadLlama(sdpa2, checkpoint);
const { model: resumed, meta } = await base.restore(saved);
const restoredAt = resumed.length;
const again = resumed.generate([meta.next], { ...sampling, seed: 2 });
console.log(tokenizer.decode([...prompt, ...first.tokens, ...again.tokens.slice(0, -1)]));
console.log('restored', restoredAt, 'tokens; the same continuation as without the save:',
  again.tokens.every((t, i) => t === second.tokens[i]));
sdpa2.dispose();
