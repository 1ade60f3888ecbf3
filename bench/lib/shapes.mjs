// The benchmark's shape table (bench/README.md, Shapes). keys = keys attended by the last query row.
//   decode:  Sq = 1 new token at position keys-1; the cache holds `keys` tokens.
//   prefill: Sq new tokens at positions past .. past+Sq-1, causal; cache holds past+Sq.

const decode = (family, Hq, Hkv, D, keys) => ({ id: `${family}-${keys}`, family, kind: 'decode', Hq, Hkv, D, Sq: 1, past: keys - 1, keys, causal: false });
const prefill = (family, Hq, Hkv, D, Sq, past) => ({ id: `${family}-${past}+${Sq}`, family, kind: 'prefill', Hq, Hkv, D, Sq, past, keys: past + Sq, causal: true });

export const SHAPES = [
  decode('A', 32, 8, 128, 512),
  decode('A', 32, 8, 128, 2048),
  decode('A', 32, 8, 128, 4096),
  decode('A', 32, 8, 128, 8192),
  decode('B', 14, 2, 64, 1024),
  decode('B', 14, 2, 64, 4096),
  decode('C', 32, 32, 64, 2048),
  decode('MQA', 8, 1, 128, 8192),
  prefill('D', 32, 8, 128, 128, 0),
  prefill('D', 32, 8, 128, 128, 1024),
];

/** --quick: a smoke subset that still exercises decode, MQA and causal prefill. */
export const QUICK_IDS = ['A-2048', 'MQA-8192', 'D-0+128'];

/** Work of one call (batch 1). Causal prefill counts only the keys each row can see. */
export function work(s) {
  let pairs = 0; // sum over query rows of keys visible
  for (let i = 0; i < s.Sq; i++) pairs += s.causal ? Math.min(s.keys, s.past + i + 1) : s.keys;
  const flops = 2 * s.Hq * pairs * (s.D + s.D);
  const kvBytes = 2 * s.Hkv * s.keys * s.D * 4;
  return { flops, kvBytes, pairs };
}

/** Lower bound in ms: max(KV bytes / bandwidth, FLOPs / peak). */
export function bound(s, limits) {
  const { flops, kvBytes } = work(s);
  const memMs = kvBytes / (limits.bwGBs * 1e6);
  const flopMs = flops / (limits.peakGFLOPs * 1e6);
  return { ms: Math.max(memMs, flopMs), memMs, flopMs, by: memMs >= flopMs ? 'memory' : 'compute' };
}

/** Query rows checked against the float64 reference (all rows for decode). */
export function checkRows(s) {
  if (s.Sq <= 8) return [...Array(s.Sq).keys()];
  return [...new Set([0, 1, 2, (s.Sq >> 1) - 1, s.Sq >> 1, s.Sq - 2, s.Sq - 1])];
}
