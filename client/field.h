/* Reading members of the daemon's responses while tolerating anything:
 * a missing member or one of the wrong type reads as "unknown". */
#ifndef JPROF_CLIENT_FIELD_H
#define JPROF_CLIENT_FIELD_H

#include <stdint.h>

#include <json-c/json.h>

/* obj[key] when obj is an object and the member has that type; else NULL. */
struct json_object *field_member(struct json_object *obj, const char *key, enum json_type type);
/* -1 when missing, not an integer or negative: all counters are >= 0. */
int64_t field_int(struct json_object *obj, const char *key);
/* NULL when missing or not a string. */
const char *field_str(struct json_object *obj, const char *key);
/* 1 true, 0 false, -1 missing. */
int field_bool(struct json_object *obj, const char *key);

#endif
