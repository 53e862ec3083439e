/* A table's rows in a compact encoding, for the copies kept of evicted
 * tables (unwtab_rows.c, about 4 bytes a row) and the disk cache
 * (unwcache.c). Decoding checks what the builder guarantees of its rows
 * (pcs strictly increasing, known kinds, offsets within their fields), so
 * bytes from elsewhere never become rows BPF could not have been given. */
#ifndef JPROF_ROWCODE_H
#define JPROF_ROWCODE_H

#include <stddef.h>
#include <stdint.h>

#include <linux/types.h>

#include "bpf/sampler.h"

/* The most bytes one row takes. */
#define ROWCODE_MAX_ROW 21

/* Encodes n rows; NULL on ENOMEM. */
uint8_t *rowcode_encode(const struct jp_unwind_row *rows, size_t n, size_t *len);
/* Decodes exactly n rows from len bytes into out; -EINVAL if the bytes do
 * not hold n such rows and nothing more. */
int rowcode_decode(const uint8_t *p, size_t len, struct jp_unwind_row *out, size_t n);

#endif
