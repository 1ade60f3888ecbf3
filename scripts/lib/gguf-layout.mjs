// gguf-layout.mjs: a GGUF file laid out before its tensor data exists, for the
// converters that write large files (scripts/llama2c-to-gguf.mjs,
// scripts/random-gguf.mjs): the header comes from gguf-writer.mjs's writeGguf
// (given each tensor's offset and no data, it writes exactly the header and the
// padding up to the data section), the data is then written tensor by tensor,
// into one buffer (fillGguf) or streamed to a file (writeGgufFile), never
// both in memory.
//
//   planGguf({ metadata, tensors: [{ name, ne, type }], alignment = 32, version = 3 })
//     -> { header: Uint8Array (dataOffset bytes), dataOffset, offsets (per tensor,
//          from the data section's start), sizes (per tensor, bytes), fileBytes }
//   Each tensor starts at a multiple of the alignment; the file ends padded to
//   it (as writeGguf and llama.cpp's gguf.cpp lay files out).

import fs from 'node:fs';
import { writeGguf, ggmlBytes } from './gguf-writer.mjs';

const EMPTY = new Uint8Array(0);
const alignUp = (n, a) => Math.ceil(n / a) * a;

export function planGguf({ metadata = [], tensors = [], alignment = 32, version = 3 } = {}) {
  const offsets = [], sizes = [];
  let at = 0;
  for (const t of tensors) {
    const size = ggmlBytes(t.type, t.ne);
    if (!Number.isInteger(size)) throw new Error(`gguf-layout: tensor ${t.name} (${t.type}, ne ${t.ne.join(' x ')}) is not a whole number of blocks`);
    offsets.push(at);
    sizes.push(size);
    at += alignUp(size, alignment);
  }
  const header = writeGguf({ metadata: Array.isArray(metadata) ? metadata.slice() : metadata, tensors: tensors.map((t, i) => ({ name: t.name, ne: t.ne, type: t.type, data: EMPTY, offset: offsets[i] })), alignment, version });
  return { header, dataOffset: header.length, offsets, sizes, fileBytes: header.length + at };
}

/**
 * The whole file in one Uint8Array: the header, then tensor i's bytes from
 * data(i) (a Uint8Array of exactly sizes[i] bytes). For files that fit in memory.
 */
export function fillGguf(plan, data) {
  const out = new Uint8Array(plan.fileBytes);
  out.set(plan.header, 0);
  plan.sizes.forEach((size, i) => {
    const bytes = data(i);
    if (bytes.length !== size) throw new Error(`gguf-layout: tensor ${i} has ${bytes.length} bytes; its type and shape give ${size}`);
    out.set(bytes, plan.dataOffset + plan.offsets[i]);
  });
  return out;
}

/**
 * Streams the file to `path`: the header, then for each tensor the chunks
 * (Uint8Arrays) that chunks(i) yields, exactly sizes[i] bytes in all, then
 * zero padding. A chunk may be reused by the generator once yielded (it is
 * written before the next is asked for). Returns the file's length.
 */
export function writeGgufFile(path, plan, chunks) {
  const fd = fs.openSync(path, 'w');
  const zeros = new Uint8Array(4096);
  try {
    let at = 0;
    const put = (b) => { let done = 0; while (done < b.length) done += fs.writeSync(fd, b, done, b.length - done); at += b.length; };
    put(plan.header);
    plan.sizes.forEach((size, i) => {
      const start = plan.dataOffset + plan.offsets[i];
      while (at < start) put(zeros.subarray(0, Math.min(zeros.length, start - at)));
      let n = 0;
      for (const chunk of chunks(i)) { put(chunk); n += chunk.length; }
      if (n !== size) throw new Error(`gguf-layout: tensor ${i} got ${n} bytes; its type and shape give ${size}`);
    });
    while (at < plan.fileBytes) put(zeros.subarray(0, Math.min(zeros.length, plan.fileBytes - at)));
    return at;
  } finally {
    fs.closeSync(fd);
  }
}
