// errors.js: SdpaError and the mapping from C status numbers (include/sdpa.h)
// to the stable string codes of CONTRACT.md section 2.

/** Codes indexed by their `sdpa_status` number; the order is the table order. */
export const STATUS_CODES = Object.freeze([
  'OK',           // 0
  'E_ARG',        // 1
  'E_RANK',       // 2
  'E_DIMS',       // 3
  'E_DTYPE',      // 4
  'E_BATCH',      // 5
  'E_HEADS',      // 6
  'E_HEAD_DIM',   // 7
  'E_KV_LEN',     // 8
  'E_START_POS',  // 9
  'E_CAPACITY',   // 10
  'E_MASK_DTYPE', // 11
  'E_MASK_SHAPE', // 12
  'E_MASK_CAUSAL',// 13
  'E_DROPOUT',    // 14
  'E_SCALE',      // 15
  'E_DISPOSED',   // 16
  'E_OOM',        // 17
  'E_FORMAT',     // 18: saved KV state that cannot be read (docs/FORMAT.md)
]);

/**
 * Not a contract rule: the package itself cannot be loaded (a missing or
 * corrupt wasm/glue file, a failed instantiation). Ranked after every rule.
 */
export const E_LOAD = 'E_LOAD';

const RANK = new Map(STATUS_CODES.map((c, i) => [c, i]));
RANK.set(E_LOAD, STATUS_CODES.length);

/** Position of a code in the table order (lower = reported first). */
export function codeRank(code) {
  const r = RANK.get(code);
  return r === undefined ? STATUS_CODES.length + 1 : r;
}

/** String code for a C status number ('E_UNKNOWN' for numbers C should never return). */
export function codeOfStatus(status) {
  return STATUS_CODES[status] ?? 'E_UNKNOWN';
}

export class SdpaError extends Error {
  /**
   * @param {string} code one of STATUS_CODES (not 'OK'), or 'E_LOAD'
   * @param {string} message names the function, the argument, the rule, expected vs actual
   * @param {object} [options] { cause, status }
   */
  constructor(code, message, options = undefined) {
    super(message, options && options.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = 'SdpaError';
    this.code = code;
    if (options && options.status !== undefined) this.status = options.status;
  }
}
Object.defineProperty(SdpaError.prototype, 'name', { value: 'SdpaError', writable: true, configurable: true });

/** Shorthand used everywhere: `throw fail('E_DIMS', 'customSdpa: ...')`. */
export function fail(code, message) {
  return new SdpaError(code, message);
}
