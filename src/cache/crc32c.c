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
        const uint32_t a = load_le32(p) ^ crc, b = load_le32(p + 4), c = load_le32(p + 8), d = load_le32(p + 12);
        crc = T[15][a & 0xff] ^ T[14][(a >> 8) & 0xff] ^ T[13][(a >> 16) & 0xff] ^ T[12][a >> 24] ^
              T[11][b & 0xff] ^ T[10][(b >> 8) & 0xff] ^ T[9][(b >> 16) & 0xff] ^ T[8][b >> 24] ^
              T[7][c & 0xff] ^ T[6][(c >> 8) & 0xff] ^ T[5][(c >> 16) & 0xff] ^ T[4][c >> 24] ^
              T[3][d & 0xff] ^ T[2][(d >> 8) & 0xff] ^ T[1][(d >> 16) & 0xff] ^ T[0][d >> 24];
        p += 16;
        n -= 16;
    }
    while (n--) crc = (crc >> 8) ^ T[0][(crc ^ *p++) & 0xff];
    return ~crc;
}
