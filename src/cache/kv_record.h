/* kv_record.h: the canonical stored form of one K or V row (a "row
 * record"), what saved KV state carries (docs/FORMAT.md, "Row records"),
 * independent of the page layouts of kv_format.h. Every byte of a record
 * that depends on a dtype is read or written by kv_record.c's functions,
 * one export and one import per dtype, which the dtype table holds
 * (kv_dtype.c, with each dtype's record parts):
 *
 *   float32  D x float32                                   4·D bytes
 *   float16  D x uint16 (binary16 bits)                    2·D bytes
 *   int8     D x int8, float32 scale, int8 zero point      D + 5 bytes
 *   int4     ceil(D/2) bytes of nibbles (element 2i low, 2i+1
 *            high; an odd D's last high nibble 0), G = ceil(D/64) float16
 *            scales, G float16 offsets                     ceil(D/2) + 4·G bytes
 *
 * All little-endian, no padding. */
#ifndef SDPA_KV_RECORD_H
#define SDPA_KV_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/kv_format.h"

/* A record part (sdpa_kv_record_part) and an import fault (sdpa_record_fault)
 * are kv_types.h's: the dtype table names them too. */

/* The parts of a `dtype` record (*n_parts of them, n_parts may be NULL);
 * NULL (and 0 parts) when this build cannot store that dtype in a cache. */
const sdpa_kv_record_part * sdpa_kv_record_parts(int32_t dtype, int32_t * n_parts);

/* Bytes of one row record of `dtype` (an sdpa_dtype number) and head dim D
 * (the sum of its parts); 0 when this build cannot store that dtype in a
 * cache (bool, unknown numbers), or D < 1. */
uint64_t sdpa_kv_record_bytes(int32_t dtype, int32_t head_dim);

/* Whether `dtype` names a record dtype of the format at all (float32,
 * float16, int8, int4), supported by this build or not. */
bool sdpa_kv_record_dtype_known(int32_t dtype);

/* The dtype's name ("float32", ...; "unknown" for other numbers). */
const char * sdpa_kv_record_dtype_name(int32_t dtype);

/* The dtype of the K (value = 0) or V block of a page format. */
int32_t sdpa_kv_record_block_dtype(const sdpa_page_format * f, int value);

/* The records of rows first .. first + n - 1 of the K (value = 0) or V
 * block of `page`, one each, `stride` bytes apart from `out` (the payload
 * interleaves a row's K and V records). */
void sdpa_kv_record_export(const sdpa_page_format * f, const void * page, int32_t first, int32_t n, int value,
                           unsigned char * out, size_t stride);

/* Checks the records of rows first .. first + n - 1 (one each, `stride`
 * bytes apart from `in`) and writes them into the K (value = 0) or V block
 * of `page` (a private page of this format). Stops at the first faulty
 * record (*bad_row: its index in 0 .. n-1; rows before it are written) and
 * returns its fault. *nonfinite |= whether the block now holds what the
 * kernels' in-place readers cannot convert: a float16 Inf or NaN, an int4
 * scale or offset that is (the caller sets SDPA_PAGE_MARK_K/V_NONFINITE). */
sdpa_record_fault sdpa_kv_record_import(const sdpa_page_format * f, void * page, int32_t first, int32_t n, int value,
                                        const unsigned char * in, size_t stride, int32_t * bad_row, bool * nonfinite);

/* Format versions 1 and 2 (docs/FORMAT.md) hold int4 records of 32-element
 * groups: ceil(D/2) nibble bytes, then ceil(D/32) scales and ceil(D/32)
 * offsets. From version 3 on, an int4 record has this build's groups
 * (SDPA_I4_GROUP); the two differ when D > 32. */
#define SDPA_I4_V2_GROUP 32
/* Bytes of a record of `dtype` at head dim D in a save of format `version`
 * (sdpa_kv_record_bytes but for an int4 record of version 1 or 2). */
uint64_t sdpa_kv_record_bytes_of_version(uint32_t version, int32_t dtype, int32_t head_dim);
/* sdpa_kv_record_import for a save of format `version`: an int4 record of
 * version 1 or 2 whose groups differ from this build's is decoded (each
 * element q * scale + offset of its 32-element group, as that build read
 * it) and encoded again as a write of those values (sdpa_int4_encode_group):
 * the row's stored values are this layout's rounding of the saved ones. */
sdpa_record_fault sdpa_kv_record_import_of_version(uint32_t version, const sdpa_page_format * f, void * page, int32_t first,
                                                   int32_t n, int value, const unsigned char * in, size_t stride,
                                                   int32_t * bad_row, bool * nonfinite);

/* A sentence for a fault ("its scale is -1 (bits 0xbf800000); expected ..."),
 * into buf (cap bytes), for E_FORMAT messages. `record` is the faulty record. */
void sdpa_kv_record_describe(sdpa_record_fault fault, int32_t dtype, int32_t head_dim, const unsigned char * record,
                             char * buf, size_t cap);

#endif
