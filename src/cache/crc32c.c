/* crc32c.c: CRC-32C by slicing-by-16 (see crc32c.h). */
#include "cache/crc32c.h"

#include <string.h>

#include "cache/crc32c_table.h"

static inline uint32_t load_le32(const unsigned char * p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t sdpa_crc32c_update(uint32_t crc, const void * data, size_t n) {
    const unsigned char * p = data;
    const uint32_t (*T)[256] = crc32c_table;
    crc = ~crc;
    while (n >= 16) {
        /* the first 4 bytes carry the register; the other 12 index the tables as they are
         * (a byte load instead of a shift and a mask: in wasm, an op per byte less) */
        const uint32_t a = load_le32(p) ^ crc;
        crc = T[15][a & 0xff] ^ T[14][(a >> 8) & 0xff] ^ T[13][(a >> 16) & 0xff] ^ T[12][a >> 24] ^
              T[11][p[4]] ^ T[10][p[5]] ^ T[9][p[6]] ^ T[8][p[7]] ^
              T[7][p[8]] ^ T[6][p[9]] ^ T[5][p[10]] ^ T[4][p[11]] ^
              T[3][p[12]] ^ T[2][p[13]] ^ T[1][p[14]] ^ T[0][p[15]];
        p += 16;
        n -= 16;
    }
    while (n--) crc = (crc >> 8) ^ T[0][(crc ^ *p++) & 0xff];
    return ~crc;
}
