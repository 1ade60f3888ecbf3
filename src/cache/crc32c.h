/* crc32c.h: CRC-32C (Castagnoli), the integrity check of saved KV state
 * (docs/FORMAT.md). Slicing-by-16 over 8 KiB of tables: no CRC instruction
 * exists in wasm, and this is what keeps save / load above 1 GB/s there. */
#ifndef SDPA_CRC32C_H
#define SDPA_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends `crc` (0 for the first piece; the previous call's result for the
 * next one) over n bytes: crc32c(crc32c(0, a), b) == crc32c(0, a || b).
 * crc32c(0, "123456789", 9) == 0xE3069283 (the standard check value). */
uint32_t sdpa_crc32c_update(uint32_t crc, const void * data, size_t n);

#endif
