/* Internals of the protocol codec's files (jprof_proto.c, jprof_json.c,
 * jprof_reply.c). Not for the codec's users. */
#ifndef JPROF_PROTO_INT_H
#define JPROF_PROTO_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "jprof_proto.h"

/* Requests are flat objects; anything deeper is wrong anyway, so keep the
 * tokener's recursion small. Responses nest a little (status). */
#define JPROF_REQUEST_DEPTH 8
#define JPROF_RESPONSE_DEPTH 32

/* jprof_json.c */
/* Fills err (code, formatted message); returns -EINVAL. */
int proto_fail(struct jprof_error *err, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* How many bytes of peer text (valid UTF-8, as the tokener checked) to
 * quote in a message: at most max, never ending inside a character, so the
 * error line stays valid UTF-8 that the client can parse. */
int proto_quote_len(const char *s, size_t max);
/* Parses strict JSON text into a new object; NULL with a reason in *why. */
struct json_object *proto_parse_text(const char *s, size_t len, int depth,
				     size_t *top_members, const char **why);
/* Integer member in [min, max]. json-c clamps integers that overflow 64 bits
 * to INT64_MIN/INT64_MAX (and uint64 ones read back as INT64_MAX), which are
 * outside every range used here, so huge numbers fail the range check. */
int proto_get_int(struct json_object *v, int64_t min, int64_t max, int64_t *out);
int proto_get_int_member(struct json_object *v, const char *name, int64_t min,
			 int64_t max, int64_t *out, struct jprof_error *err);
int proto_get_bool_member(struct json_object *v, const char *name, bool *out,
			  struct jprof_error *err);
/* String member of 0..size-1 bytes without NUL, copied into buf. */
int proto_get_string_member(struct json_object *v, const char *name, char *buf,
			    size_t size, struct jprof_error *err);

#endif
