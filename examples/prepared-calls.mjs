// A feed-forward block (RMSNorm, SwiGLU, a residual add) as prepared dense calls:
// the arguments are checked and written into wasm memory once, then each decode
// step's run() only checks liveness and calls the kernel. (Your model loads
// real weights; here they are made-up numbers.)
import { createSdpa, SdpaError } from 'sdpa-wasm';

const sdpa = await createSdpa();
const [dim, hidden] = [64, 160];
const filled = (dtype, dims, f) => {
  const src = sdpa.allocTensor('float32', dims);
  src.set(Float32Array.from({ length: src.length }, (_, i) => f(i)));
  if (dtype === 'float32') return src;
  const t = sdpa.quantize(src, sdpa.allocTensor(dtype, dims));
  src.dispose();
  return t;
};
const norm = filled('float32', [dim], () => 1);
const w1 = filled('q8_0', [hidden, dim], (i) => Math.sin(i)), w3 = filled('q8_0', [hidden, dim], (i) => Math.cos(i));
const w2 = filled('q8_0', [dim, hidden], (i) => Math.sin(0.5 * i) / 8);
const x = sdpa.allocTensor('float32', [1, dim]), xb = sdpa.allocTensor('float32', [1, dim]);
const hb = sdpa.allocTensor('float32', [1, hidden]), hb2 = sdpa.allocTensor('float32', [1, hidden]);

// once, before the loop
const block = [
  sdpa.prepareRmsNorm(x, norm, { out: xb }),
  sdpa.prepareLinear(xb, w1, { out: hb }),
  sdpa.prepareLinear(xb, w3, { out: hb2 }),
  sdpa.prepareSwiglu(hb, hb2, { out: hb }),
  sdpa.prepareLinear(hb, w2, { out: x, accumulate: true }),    // x += ffn(x)
];
x.set(Float32Array.from({ length: dim }, (_, i) => Math.cos(i / 4)));
for (let step = 0; step < 4; step++) {
  for (const call of block) call.run();                        // the tensors' current values
}
console.log(block.map((c) => c.name).join(', '));
console.log(Array.from(x.data.slice(0, 4), (v) => v.toFixed(4)).join(' '));

// a rule C checks fails at run() with the plain call's error; nothing is written
const wrong = sdpa.prepareLinear(xb, w2, { out: hb });         // w2 takes rows of 160, xb has 64
try {
  wrong.run();
} catch (e) {
  console.log(e instanceof SdpaError, e.code, e.message);
}
for (const call of [...block, wrong]) call.dispose();          // (sdpa.dispose() frees them too)
sdpa.dispose();
