// shape.js: the dims helpers every module uses (one copy of each).

/** C keeps dims in int32 (include/sdpa.h). */
export const INT32_MAX = 0x7fffffff;

/** Element count of a tensor with these dims (1 for []). */
export function prod(dims) {
  let n = 1;
  for (let i = 0; i < dims.length; i++) n *= dims[i];
  return n;
}

/** Dims as messages show them: `[1, 8, 64]`. */
export const fmtDims = (dims) => `[${dims.join(', ')}]`;

/** A row count as messages say it: `1 row`, `3 rows`. */
export const fmtRows = (n) => `${n} ${n === 1 ? 'row' : 'rows'}`;
