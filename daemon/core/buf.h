/* Growable byte buffer used by the codec, exporters and the control server. */
#ifndef JPROF_BUF_H
#define JPROF_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
	char *data;     /* always NUL-terminated when non-NULL */
	size_t len;
	size_t cap;
};

#define BUF_INIT { NULL, 0, 0 }

/* Each returns 0 or -ENOMEM; on failure the buffer keeps its old content. */
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *data, size_t len);
int buf_puts(struct buf *b, const char *s);
int buf_putc(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap);
/* Appends the whole content of the file at path (read in chunks of `chunk`
 * bytes; /proc files report no size). 0 or -errno. */
int buf_read_file(struct buf *b, const char *path, size_t chunk);
/* Drops the first n bytes. */
void buf_consume(struct buf *b, size_t n);
void buf_reset(struct buf *b);
/* Frees storage; the buffer is empty and reusable afterwards. */
void buf_release(struct buf *b);
/* Hands the storage to the caller (NUL-terminated) and empties the buffer. */
char *buf_steal(struct buf *b, size_t *len);

#endif
