// errors.js: SdpaError and the mapping from C status numbers (include/sdpa.h)
// to the stable string codes of CONTRACT.md section 2.

import { STATUS_CODES } from './abi.js';

/** Codes indexed by their `sdpa_status` number (js/abi.js, from C); the order is the table order. */
export { STATUS_CODES };

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
