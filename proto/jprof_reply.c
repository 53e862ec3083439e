/* jprofd socket API v1 codec: version negotiation, request encoding (the
 * client's side), response envelopes and their parsing, base64. */
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

int jprof_hello_negotiate(const struct jprof_hello_req *hello)
{
	if (hello->min_version > JPROF_PROTO_VERSION || hello->max_version < JPROF_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	return JPROF_PROTO_VERSION;
}

/* json_object_object_add() only fails on ENOMEM; count failures instead of
 * checking each call. */
static void proto_add(struct json_object *obj, const char *key, struct json_object *val,
		      int *failed)
{
	if (!val || json_object_object_add(obj, key, val) < 0) {
		json_object_put(val);
		*failed = 1;
	}
}

char *jprof_request_encode(const struct jprof_request *req)
{
	struct json_object *root;
	const char *name = jprof_cmd_name(req->cmd);
	char *line = NULL;
	size_t len;
	int failed = 0;

	root = json_object_new_object();
	if (!root || !name)
		goto out;
	proto_add(root, "v", json_object_new_int(req->version ? req->version : JPROF_PROTO_VERSION),
		  &failed);
	proto_add(root, "id", json_object_new_int64(req->id), &failed);
	proto_add(root, "cmd", json_object_new_string(name), &failed);
	switch (req->cmd) {
	case JPROF_CMD_HELLO:
		proto_add(root, "min_version", json_object_new_int(req->hello.min_version), &failed);
		proto_add(root, "max_version", json_object_new_int(req->hello.max_version), &failed);
		if (req->hello.client[0])
			proto_add(root, "client", json_object_new_string(req->hello.client), &failed);
		break;
	case JPROF_CMD_RECORD:
		if (req->record.all)
			proto_add(root, "all", json_object_new_boolean(1), &failed);
		else
			proto_add(root, "pid", json_object_new_int(req->record.pid), &failed);
		proto_add(root, "duration_ms", json_object_new_uint64(req->record.duration_ms),
			  &failed);
		proto_add(root, "interval_us", json_object_new_uint64(req->record.interval_us),
			  &failed);
		if (req->record.format[0])
			proto_add(root, "format", json_object_new_string(req->record.format),
				  &failed);
		if (req->record.event[0] && strcmp(req->record.event, JPROF_EVENT_CPU) != 0)
			proto_add(root, "event", json_object_new_string(req->record.event), &failed);
		if (req->record.threshold_us)
			proto_add(root, "threshold_us", json_object_new_uint64(req->record.threshold_us),
				  &failed);
		if (req->record.lock_threshold_us)
			proto_add(root, "lock_threshold_us",
				  json_object_new_uint64(req->record.lock_threshold_us), &failed);
		if (req->record.alloc_bytes)
			proto_add(root, "alloc_bytes", json_object_new_uint64(req->record.alloc_bytes),
				  &failed);
		proto_add(root, "progress", json_object_new_boolean(req->record.progress), &failed);
		proto_add(root, "thread_frames", json_object_new_boolean(req->record.thread_frames),
			  &failed);
		if (req->record.java != JPROF_JAVA_AUTO)
			proto_add(root, "java", json_object_new_string(jprof_java_name(req->record.java)),
				  &failed);
		if (req->record.java_lines)
			proto_add(root, "java_lines", json_object_new_boolean(1), &failed);
		if (req->record.java_signatures)
			proto_add(root, "java_signatures", json_object_new_boolean(1), &failed);
		if (req->record.java_types)
			proto_add(root, "java_types", json_object_new_boolean(1), &failed);
		break;
	case JPROF_CMD_CANCEL:
		proto_add(root, "target", json_object_new_int64(req->cancel.target), &failed);
		break;
	case JPROF_CMD_PROFILE: {
		const struct jprof_profile_req *p = &req->profile;

		if (p->has_range) {
			proto_add(root, "from_ms", json_object_new_int64(p->from_ms), &failed);
			proto_add(root, "to_ms", json_object_new_int64(p->to_ms), &failed);
		} else {
			proto_add(root, "last_s", json_object_new_int64(p->last_s), &failed);
		}
		if (p->pid)
			proto_add(root, "pid", json_object_new_int(p->pid), &failed);
		if (p->comm[0])
			proto_add(root, "comm", json_object_new_string(p->comm), &failed);
		if (p->unit[0])
			proto_add(root, "unit", json_object_new_string(p->unit), &failed);
		if (p->cgroup[0])
			proto_add(root, "cgroup", json_object_new_string(p->cgroup), &failed);
		if (p->format[0])
			proto_add(root, "format", json_object_new_string(p->format), &failed);
		if (p->group_by[0])
			proto_add(root, "group_by", json_object_new_string(p->group_by), &failed);
		break;
	}
	case JPROF_CMD_STATUS:
		break;
	}
	if (!failed)
		line = jprof_json_line(root, &len);
out:
	json_object_put(root);
	return line;
}

struct json_object *jprof_response_new(int64_t id, const char *type)
{
	struct json_object *root = json_object_new_object();
	int failed = 0;

	if (!root)
		return NULL;
	proto_add(root, "v", json_object_new_int(JPROF_PROTO_VERSION), &failed);
	proto_add(root, "id", json_object_new_int64(id), &failed);
	proto_add(root, "ok", json_object_new_boolean(1), &failed);
	proto_add(root, "type", json_object_new_string(type), &failed);
	if (failed) {
		json_object_put(root);
		root = NULL;
	}
	return root;
}

char *jprof_error_line(int64_t id, bool has_id, const char *code, const char *message)
{
	struct json_object *root, *error = NULL;
	char *line = NULL;
	size_t len;
	int failed = 0;

	root = json_object_new_object();
	if (!root)
		goto out;
	proto_add(root, "v", json_object_new_int(JPROF_PROTO_VERSION), &failed);
	/* json_object_object_add() takes NULL as JSON null. */
	if (has_id)
		proto_add(root, "id", json_object_new_int64(id), &failed);
	else if (json_object_object_add(root, "id", NULL) < 0)
		failed = 1;
	proto_add(root, "ok", json_object_new_boolean(0), &failed);
	error = json_object_new_object();
	if (error) {
		proto_add(error, "code", json_object_new_string(code ? code : JPROF_E_INTERNAL),
			  &failed);
		proto_add(error, "message",
			  json_object_new_string(message ? message : (code ? code : "")), &failed);
	}
	proto_add(root, "error", error, &failed);
	if (!failed)
		line = jprof_json_line(root, &len);
out:
	json_object_put(root);
	return line;
}

char *jprof_json_line(struct json_object *obj, size_t *len)
{
	const char *text;
	size_t n = 0;
	char *line;

	text = json_object_to_json_string_length(
		obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
	if (!text)
		return NULL;
	line = malloc(n + 2);
	if (!line)
		return NULL;
	memcpy(line, text, n);
	line[n] = '\n';
	line[n + 1] = '\0';
	if (len)
		*len = n + 1;
	return line;
}

void jprof_json_add_u64(struct json_object *o, const char *key, uint64_t v)
{
	json_object_object_add(o, key, json_object_new_int64((int64_t)v));
}

int jprof_response_parse(const char *line, size_t len, struct jprof_response *resp)
{
	struct json_object *root, *v, *e;
	const char *why;
	int64_t x;
	int r = -EINVAL;

	memset(resp, 0, sizeof(*resp));
	root = proto_parse_text(line, len, JPROF_RESPONSE_DEPTH, NULL, &why);
	if (!root)
		goto out;
	resp->root = root;

	if (!json_object_object_get_ex(root, "v", &v) || proto_get_int(v, 1, INT32_MAX, &x) < 0)
		goto out;
	resp->version = (int)x;
	if (resp->version != JPROF_PROTO_VERSION)
		goto out;

	if (!json_object_object_get_ex(root, "id", &v))
		goto out;
	if (v) {
		if (proto_get_int(v, 0, JPROF_PROTO_ID_MAX, &x) < 0)
			goto out;
		resp->id = x;
		resp->has_id = true;
	}

	if (!json_object_object_get_ex(root, "ok", &v) ||
	    !json_object_is_type(v, json_type_boolean))
		goto out;
	resp->ok = json_object_get_boolean(v);

	if (resp->ok) {
		if (!json_object_object_get_ex(root, "type", &v) ||
		    !json_object_is_type(v, json_type_string))
			goto out;
		resp->type = json_object_get_string(v);
	} else {
		if (!json_object_object_get_ex(root, "error", &e) ||
		    !json_object_is_type(e, json_type_object))
			goto out;
		if (!json_object_object_get_ex(e, "code", &v) ||
		    !json_object_is_type(v, json_type_string))
			goto out;
		resp->err_code = json_object_get_string(v);
		if (!json_object_object_get_ex(e, "message", &v) ||
		    !json_object_is_type(v, json_type_string))
			goto out;
		resp->err_message = json_object_get_string(v);
		/* Success-only members must not be mistaken for a result. */
		resp->type = NULL;
	}
	r = 0;
out:
	if (r < 0)
		jprof_response_free(resp);
	return r;
}

void jprof_response_free(struct jprof_response *resp)
{
	if (!resp)
		return;
	json_object_put(resp->root);
	memset(resp, 0, sizeof(*resp));
}

static const char base64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *jprof_base64_encode(const void *data, size_t len)
{
	const unsigned char *in = data;
	size_t groups = len / 3 + (len % 3 != 0);
	char *out, *p;

	if (groups > (SIZE_MAX - 1) / 4)
		return NULL;
	out = malloc(groups * 4 + 1);
	if (!out)
		return NULL;
	p = out;
	for (size_t i = 0; i < len; i += 3) {
		size_t left = len - i;
		uint32_t w = (uint32_t)in[i] << 16;

		if (left > 1)
			w |= (uint32_t)in[i + 1] << 8;
		if (left > 2)
			w |= in[i + 2];
		*p++ = base64_alphabet[(w >> 18) & 63];
		*p++ = base64_alphabet[(w >> 12) & 63];
		*p++ = left > 1 ? base64_alphabet[(w >> 6) & 63] : '=';
		*p++ = left > 2 ? base64_alphabet[w & 63] : '=';
	}
	*p = '\0';
	return out;
}

static int base64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Strict: length a multiple of 4, padding only at the end, no whitespace, and
 * unused bits zero, so every byte string has exactly one accepted encoding. */
void *jprof_base64_decode(const char *text, size_t len, size_t *out_len)
{
	unsigned char *buf = NULL, *p;
	void *result = NULL;
	size_t pad = 0;

	if (len % 4 != 0)
		goto out;
	if (len >= 1 && text[len - 1] == '=')
		pad++;
	if (len >= 2 && text[len - 2] == '=')
		pad++;
	buf = malloc(len / 4 * 3 + 1);
	if (!buf)
		goto out;
	p = buf;
	for (size_t i = 0; i < len; i += 4) {
		size_t n = i + 4 == len ? 4 - pad : 4;
		uint32_t w = 0;

		for (size_t j = 0; j < 4; j++) {
			int d = j < n ? base64_value(text[i + j]) : 0;

			if (d < 0)
				goto out;
			w = w << 6 | (uint32_t)d;
		}
		if ((n == 2 && (w & 0xffff) != 0) || (n == 3 && (w & 0xff) != 0))
			goto out;
		*p++ = (unsigned char)(w >> 16);
		if (n > 2)
			*p++ = (unsigned char)(w >> 8);
		if (n > 3)
			*p++ = (unsigned char)w;
	}
	*out_len = (size_t)(p - buf);
	result = buf;
	buf = NULL;
out:
	free(buf);
	return result;
}

int jprof_profile_add_data(struct json_object *msg, const char *format, bool binary,
			   const void *data, size_t len)
{
	struct json_object *d;

	if (len > INT32_MAX)
		return -ENOMEM;
	if (binary) {
		char *b64 = jprof_base64_encode(data ? data : "", len);

		d = b64 ? json_object_new_string(b64) : NULL;
		free(b64);
	} else {
		d = json_object_new_string_len(data ? data : "", (int)len);
	}
	if (!d)
		return -ENOMEM;
	json_object_object_add(msg, "format", json_object_new_string(format));
	json_object_object_add(msg, "encoding", json_object_new_string(binary ? "base64" : "utf-8"));
	json_object_object_add(msg, "data", d);
	return 0;
}

