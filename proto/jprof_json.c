/* The codec's bounded JSON reading (jprof_proto_int.h): peer text is
 * scanned before json-c sees it, members are type- and range-checked, and
 * an error names what was wrong. */
#include "jprof_proto.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "jprof_proto_int.h"

int proto_fail(struct jprof_error *err, const char *code, const char *fmt, ...)
{
	va_list ap;

	err->code = code;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* How many bytes of peer text (valid UTF-8, as the tokener checked) to
 * quote in a message: at most max, never ending inside a character, so the
 * error line stays valid UTF-8 that the client can parse. */
int proto_quote_len(const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	if (n == max) /* cut: s[n] is the first byte left out */
		while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	return (int)n;
}

/* json-c accepts a few things that are not JSON even in strict mode (single
 * quoted strings, NaN, Infinity). Outside string literals JSON text only
 * contains structural characters, numbers and the literals true/false/null,
 * so a cheap scan rejects the rest. It also counts the top-level members,
 * because json-c silently keeps only the last of duplicate keys. */
static int proto_scan_text(const char *s, size_t len, size_t *top_members)
{
	static const char allowed[] = "{}[],:-+.0123456789eE \t\r\ntruefalsn";
	bool in_string = false;
	int depth = 0;
	size_t members = 0;

	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (in_string) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_string = false;
			continue;
		}
		if (c == '"') {
			in_string = true;
			continue;
		}
		if (c == '\0' || !strchr(allowed, c))
			return -EINVAL;
		if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']')
			depth--;
		else if (c == ':' && depth == 1)
			members++;
	}
	if (top_members)
		*top_members = members;
	return 0;
}

/* Parses strict JSON text into a new object; NULL with a reason in *why. */
struct json_object *proto_parse_text(const char *s, size_t len, int depth,
				     size_t *top_members, const char **why)
{
	struct json_tokener *tok = NULL;
	struct json_object *obj = NULL;
	enum json_tokener_error jerr;

	*why = NULL;
	/* One message per line: tolerate the terminator and a CR before it. */
	if (len > 0 && s[len - 1] == '\n')
		len--;
	if (len > 0 && s[len - 1] == '\r')
		len--;
	if (len > INT_MAX) {
		*why = "line too long";
		goto out;
	}
	if (memchr(s, '\0', len)) {
		*why = "NUL byte in line";
		goto out;
	}
	if (proto_scan_text(s, len, top_members) < 0) {
		*why = "not valid JSON";
		goto out;
	}
	tok = json_tokener_new_ex(depth);
	if (!tok) {
		*why = "out of memory";
		goto out;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	obj = json_tokener_parse_ex(tok, s, (int)len);
	jerr = json_tokener_get_error(tok);
	if (jerr == json_tokener_continue) {
		*why = "incomplete JSON text";
	} else if (jerr != json_tokener_success) {
		*why = json_tokener_error_desc(jerr);
	} else if (json_tokener_get_parse_end(tok) != len) {
		*why = "trailing characters after the JSON value";
	} else if (!json_object_is_type(obj, json_type_object)) {
		*why = "not a JSON object";
	}
	if (*why) {
		json_object_put(obj);
		obj = NULL;
	}
out:
	if (tok) /* json_tokener_free() is not NULL-safe */
		json_tokener_free(tok);
	return obj;
}

/* Integer member in [min, max]. json-c clamps integers that overflow 64 bits
 * to INT64_MIN/INT64_MAX (and uint64 ones read back as INT64_MAX), which are
 * outside every range used here, so huge numbers fail the range check. */
int proto_get_int(struct json_object *v, int64_t min, int64_t max, int64_t *out)
{
	int64_t x;

	if (!json_object_is_type(v, json_type_int))
		return -EINVAL;
	x = json_object_get_int64(v);
	if (x < min || x > max)
		return -ERANGE;
	*out = x;
	return 0;
}

int proto_get_int_member(struct json_object *v, const char *name, int64_t min,
			 int64_t max, int64_t *out, struct jprof_error *err)
{
	if (proto_get_int(v, min, max, out) < 0)
		return proto_fail(err, JPROF_E_BAD_REQUEST,
				  "member \"%s\" must be an integer in %" PRId64 "..%" PRId64,
				  name, min, max);
	return 0;
}

int proto_get_bool_member(struct json_object *v, const char *name, bool *out,
			  struct jprof_error *err)
{
	if (!json_object_is_type(v, json_type_boolean))
		return proto_fail(err, JPROF_E_BAD_REQUEST,
				  "member \"%s\" must be true or false", name);
	*out = json_object_get_boolean(v);
	return 0;
}

/* String member of 0..size-1 bytes without NUL, copied into buf. */
int proto_get_string_member(struct json_object *v, const char *name, char *buf,
			    size_t size, struct jprof_error *err)
{
	const char *s;
	size_t len;

	if (!json_object_is_type(v, json_type_string))
		return proto_fail(err, JPROF_E_BAD_REQUEST, "member \"%s\" must be a string",
				  name);
	s = json_object_get_string(v);
	len = (size_t)json_object_get_string_len(v);
	if (len >= size || strlen(s) != len)
		return proto_fail(err, JPROF_E_BAD_REQUEST,
				  "member \"%s\" must be a string of at most %zu bytes without NUL",
				  name, size - 1);
	memcpy(buf, s, len + 1);
	return 0;
}

