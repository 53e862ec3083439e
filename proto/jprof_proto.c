/* jprofd socket API v1 codec: request parsing/encoding, response envelopes,
 * base64. Shared by the daemon, jprofctl and the tests; see docs/protocol.md. */
#include "jprof_proto.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* Requests are flat objects; anything deeper is wrong anyway, so keep the
 * tokener's recursion small. Responses nest a little (status). */
#define JPROF_REQUEST_DEPTH 8
#define JPROF_RESPONSE_DEPTH 32

static const char *const cmd_names[] = {
	[JPROF_CMD_HELLO] = "hello",
	[JPROF_CMD_STATUS] = "status",
	[JPROF_CMD_RECORD] = "record",
	[JPROF_CMD_CANCEL] = "cancel",
	[JPROF_CMD_PROFILE] = "profile",
};

const char *jprof_cmd_name(enum jprof_cmd cmd)
{
	if ((int)cmd <= 0 || (size_t)cmd >= sizeof(cmd_names) / sizeof(cmd_names[0]))
		return NULL;
	return cmd_names[cmd];
}

int jprof_cmd_from_name(const char *name)
{
	for (size_t i = 1; i < sizeof(cmd_names) / sizeof(cmd_names[0]); i++)
		if (cmd_names[i] && strcmp(cmd_names[i], name) == 0)
			return (int)i;
	return -ENOENT;
}

static int proto_fail(struct jprof_error *err, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int proto_fail(struct jprof_error *err, const char *code, const char *fmt, ...)
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
static int proto_quote_len(const char *s, size_t max)
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
static struct json_object *proto_parse_text(const char *s, size_t len, int depth,
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
static int proto_get_int(struct json_object *v, int64_t min, int64_t max, int64_t *out)
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

static int proto_get_int_member(struct json_object *v, const char *name, int64_t min,
				int64_t max, int64_t *out, struct jprof_error *err)
{
	if (proto_get_int(v, min, max, out) < 0)
		return proto_fail(err, JPROF_E_BAD_REQUEST,
				  "member \"%s\" must be an integer in %" PRId64 "..%" PRId64,
				  name, min, max);
	return 0;
}

static int proto_get_bool_member(struct json_object *v, const char *name, bool *out,
				 struct jprof_error *err)
{
	if (!json_object_is_type(v, json_type_boolean))
		return proto_fail(err, JPROF_E_BAD_REQUEST,
				  "member \"%s\" must be true or false", name);
	*out = json_object_get_boolean(v);
	return 0;
}

/* String member of 0..size-1 bytes without NUL, copied into buf. */
static int proto_get_string_member(struct json_object *v, const char *name, char *buf,
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

void jprof_request_init(struct jprof_request *req, enum jprof_cmd cmd, int64_t id)
{
	memset(req, 0, sizeof(*req));
	req->version = JPROF_PROTO_VERSION;
	req->id = id;
	req->has_id = true;
	req->cmd = cmd;
	switch (cmd) {
	case JPROF_CMD_HELLO:
		req->hello.min_version = JPROF_PROTO_VERSION;
		req->hello.max_version = JPROF_PROTO_VERSION;
		break;
	case JPROF_CMD_RECORD:
		req->record.duration_ms = JPROF_DURATION_MS_DEFAULT;
		req->record.interval_us = JPROF_INTERVAL_US_DEFAULT;
		snprintf(req->record.format, sizeof(req->record.format), "json");
		snprintf(req->record.event, sizeof(req->record.event), JPROF_EVENT_CPU);
		req->record.progress = true;
		req->record.thread_frames = false;
		break;
	case JPROF_CMD_PROFILE:
		req->profile.last_s = JPROF_LAST_S_DEFAULT;
		snprintf(req->profile.format, sizeof(req->profile.format), "collapsed");
		break;
	case JPROF_CMD_STATUS:
	case JPROF_CMD_CANCEL:
		break;
	}
}

const struct jprof_event_desc jprof_events[JPROF_EVENT_COUNT] = {
	{ JPROF_EVENT_CPU, "samples (count), cpu (nanoseconds)",
	  "on-CPU time, sampled every interval of CPU time (-i)" },
	{ JPROF_EVENT_OFFCPU, "samples (count of intervals), offcpu (nanoseconds)",
	  "time off the CPU (blocked, sleeping, waiting for a CPU), every interval at least --threshold long" },
	{ JPROF_EVENT_WALL, "samples (count), wall (nanoseconds)",
	  "wall-clock time: cpu and offcpu together, thread state as leaf frame" },
	{ JPROF_EVENT_ALLOC, "samples (count), alloc_objects (count), alloc_space (bytes)",
	  "JVM only: Java heap allocations, sampled every --alloc bytes on average (default 512k)" },
	{ JPROF_EVENT_LOCK, "samples (count), lock (count of contended entries), lock_wait (nanoseconds)",
	  "JVM only: waits for a contended synchronized monitor or java.util.concurrent lock, each at least --lock long (default 10us)" },
};

const char *jprof_event_names(void)
{
	static char names[128];
	size_t len = 0;

	if (names[0])
		return names;
	for (int i = 0; i < JPROF_EVENT_COUNT; i++)
		len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s", i ? ", " : "",
					jprof_events[i].name);
	return names;
}

static int jprof_event_index(const char *name, size_t n)
{
	for (int i = 0; i < JPROF_EVENT_COUNT; i++)
		if (strlen(jprof_events[i].name) == n && !strncmp(jprof_events[i].name, name, n))
			return i;
	return -EINVAL;
}

static bool jprof_event_in(const int *ids, size_t n, const char *name)
{
	int want = jprof_event_index(name, strlen(name));

	for (size_t i = 0; i < n; i++)
		if (ids[i] == want)
			return true;
	return false;
}

int jprof_event_list_parse(const char *list, int *ids, size_t *n, char *why, size_t len)
{
	const char *p = list, *end;
	size_t l;
	int ev;

	*n = 0;
	for (;;) {
		end = strchr(p, ',');
		l = end ? (size_t)(end - p) : strlen(p);
		ev = jprof_event_index(p, l);
		if (ev < 0) {
			snprintf(why, len, "unknown event \"%.*s\"", (int)(l > 40 ? 40 : l), p);
			return -EINVAL;
		}
		for (size_t i = 0; i < *n; i++) {
			if (ids[i] == ev) {
				snprintf(why, len, "event \"%s\" is given twice", jprof_events[ev].name);
				return -EINVAL;
			}
		}
		ids[(*n)++] = ev;
		if (!end)
			break;
		p = end + 1;
	}
	if (jprof_event_in(ids, *n, JPROF_EVENT_WALL) &&
	    (jprof_event_in(ids, *n, JPROF_EVENT_CPU) || jprof_event_in(ids, *n, JPROF_EVENT_OFFCPU))) {
		snprintf(why, len, "wall cannot be combined with %s: wall already holds cpu and "
			 "offcpu time", jprof_event_in(ids, *n, JPROF_EVENT_CPU) ? "cpu" : "offcpu");
		return -EINVAL;
	}
	return 0;
}

const char *jprof_java_name(enum jprof_java j)
{
	switch (j) {
	case JPROF_JAVA_OFF:
		return "off";
	case JPROF_JAVA_REQUIRE:
		return "require";
	default:
		return "auto";
	}
}

static int proto_parse_hello(struct json_object *root, struct jprof_hello_req *h,
			     struct jprof_error *err)
{
	int64_t x;
	int r = 0;

	json_object_object_foreach(root, key, val) {
		if (strcmp(key, "min_version") == 0) {
			r = proto_get_int_member(val, key, 1, INT32_MAX, &x, err);
			h->min_version = (int)x;
		} else if (strcmp(key, "max_version") == 0) {
			r = proto_get_int_member(val, key, 1, INT32_MAX, &x, err);
			h->max_version = (int)x;
		} else if (strcmp(key, "client") == 0) {
			r = proto_get_string_member(val, key, h->client, sizeof(h->client), err);
		}
		if (r < 0)
			goto out;
	}
	if (h->min_version > h->max_version)
		r = proto_fail(err, JPROF_E_BAD_REQUEST,
			       "\"min_version\" (%d) is greater than \"max_version\" (%d)",
			       h->min_version, h->max_version);
out:
	return r;
}

/* A format name is a short lowercase word ("collapsed", "pprof"); the daemon
 * decides which names it knows. */
static bool proto_format_name_ok(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      *s == '-'))
			return false;
	return true;
}

/* Names (proto_format_name_ok) separated by single commas. */
static bool proto_event_list_ok(const char *s)
{
	char name[sizeof(((struct jprof_record_req *)0)->event)];
	const char *end;
	size_t n;

	for (;;) {
		end = strchr(s, ',');
		n = end ? (size_t)(end - s) : strlen(s);
		if (n >= sizeof(name))
			return false;
		memcpy(name, s, n);
		name[n] = '\0';
		if (!proto_format_name_ok(name))
			return false;
		if (!end)
			return true;
		s = end + 1;
	}
}

static int proto_parse_record(struct json_object *root, struct jprof_record_req *rec,
			      struct jprof_error *err)
{
	bool has_pid = false;
	int64_t x;
	int r = 0;

	json_object_object_foreach(root, key, val) {
		if (strcmp(key, "pid") == 0) {
			r = proto_get_int_member(val, key, 1, INT32_MAX, &x, err);
			rec->pid = (int32_t)x;
			has_pid = true;
		} else if (strcmp(key, "all") == 0) {
			r = proto_get_bool_member(val, key, &rec->all, err);
		} else if (strcmp(key, "duration_ms") == 0) {
			r = proto_get_int_member(val, key, 1, (int64_t)JPROF_DURATION_MS_MAX, &x, err);
			rec->duration_ms = (uint64_t)x;
		} else if (strcmp(key, "interval_us") == 0) {
			r = proto_get_int_member(val, key, (int64_t)JPROF_INTERVAL_US_MIN,
						 (int64_t)JPROF_INTERVAL_US_MAX, &x, err);
			rec->interval_us = (uint64_t)x;
		} else if (strcmp(key, "format") == 0) {
			r = proto_get_string_member(val, key, rec->format, sizeof(rec->format),
						    err);
			if (r == 0 && !proto_format_name_ok(rec->format))
				r = proto_fail(err, JPROF_E_BAD_REQUEST,
					       "member \"format\" must be a non-empty name of a-z, 0-9, '_' or '-'");
		} else if (strcmp(key, "event") == 0) {
			r = proto_get_string_member(val, key, rec->event, sizeof(rec->event), err);
			if (r == 0 && !proto_event_list_ok(rec->event))
				r = proto_fail(err, JPROF_E_BAD_REQUEST,
					       "member \"event\" must be an event name or a comma-separated "
					       "list of them: %s", jprof_event_names());
		} else if (strcmp(key, "threshold_us") == 0) {
			r = proto_get_int_member(val, key, (int64_t)JPROF_THRESHOLD_US_MIN,
						 (int64_t)JPROF_THRESHOLD_US_MAX, &x, err);
			rec->threshold_us = (uint64_t)x;
		} else if (strcmp(key, "lock_threshold_us") == 0) {
			r = proto_get_int_member(val, key, (int64_t)JPROF_THRESHOLD_US_MIN,
						 (int64_t)JPROF_THRESHOLD_US_MAX, &x, err);
			rec->lock_threshold_us = (uint64_t)x;
		} else if (strcmp(key, "alloc_bytes") == 0) {
			r = proto_get_int_member(val, key, (int64_t)JPROF_ALLOC_BYTES_MIN,
						 (int64_t)JPROF_ALLOC_BYTES_MAX, &x, err);
			rec->alloc_bytes = (uint64_t)x;
		} else if (strcmp(key, "progress") == 0) {
			r = proto_get_bool_member(val, key, &rec->progress, err);
		} else if (strcmp(key, "thread_frames") == 0) {
			r = proto_get_bool_member(val, key, &rec->thread_frames, err);
		} else if (strcmp(key, "java") == 0) {
			char j[16];

			r = proto_get_string_member(val, key, j, sizeof(j), err);
			if (r == 0) {
				if (strcmp(j, "auto") == 0)
					rec->java = JPROF_JAVA_AUTO;
				else if (strcmp(j, "off") == 0)
					rec->java = JPROF_JAVA_OFF;
				else if (strcmp(j, "require") == 0)
					rec->java = JPROF_JAVA_REQUIRE;
				else
					r = proto_fail(err, JPROF_E_BAD_REQUEST,
						       "member \"java\" must be \"auto\", \"off\" or \"require\"");
			}
		} else if (strcmp(key, "java_lines") == 0) {
			r = proto_get_bool_member(val, key, &rec->java_lines, err);
		} else if (strcmp(key, "java_signatures") == 0) {
			r = proto_get_bool_member(val, key, &rec->java_signatures, err);
		} else if (strcmp(key, "java_types") == 0) {
			r = proto_get_bool_member(val, key, &rec->java_types, err);
		}
		if (r < 0)
			goto out;
	}
	if (has_pid && rec->all)
		r = proto_fail(err, JPROF_E_BAD_REQUEST,
			       "members \"pid\" and \"all\" are mutually exclusive");
	else if (!has_pid && !rec->all)
		r = proto_fail(err, JPROF_E_BAD_REQUEST,
			       "one of \"pid\" (a process id) or \"all\": true is required");
out:
	return r;
}

static bool proto_group_ok(const char *g)
{
	static const char *const groups[] = { "none", "comm", "pid", "thread", "unit", "cgroup", NULL };

	for (const char *const *p = groups; *p; p++)
		if (!strcmp(g, *p))
			return true;
	return false;
}

static int proto_parse_profile(struct json_object *root, struct jprof_profile_req *p,
			       struct jprof_error *err)
{
	bool has_last = false, has_from = false, has_to = false;
	int64_t x;
	int r = 0;

	json_object_object_foreach(root, key, val) {
		if (strcmp(key, "last_s") == 0) {
			r = proto_get_int_member(val, key, 1, JPROF_LAST_S_MAX, &x, err);
			p->last_s = (uint32_t)x;
			has_last = true;
		} else if (strcmp(key, "from_ms") == 0) {
			r = proto_get_int_member(val, key, -JPROF_RANGE_MS_MAX, -1, &p->from_ms, err);
			has_from = true;
		} else if (strcmp(key, "to_ms") == 0) {
			r = proto_get_int_member(val, key, -JPROF_RANGE_MS_MAX, 0, &p->to_ms, err);
			has_to = true;
		} else if (strcmp(key, "pid") == 0) {
			r = proto_get_int_member(val, key, 1, INT32_MAX, &x, err);
			p->pid = (int32_t)x;
		} else if (strcmp(key, "comm") == 0) {
			r = proto_get_string_member(val, key, p->comm, sizeof(p->comm), err);
		} else if (strcmp(key, "unit") == 0) {
			r = proto_get_string_member(val, key, p->unit, sizeof(p->unit), err);
		} else if (strcmp(key, "cgroup") == 0) {
			r = proto_get_string_member(val, key, p->cgroup, sizeof(p->cgroup), err);
		} else if (strcmp(key, "format") == 0) {
			r = proto_get_string_member(val, key, p->format, sizeof(p->format), err);
			if (r == 0 && !proto_format_name_ok(p->format))
				r = proto_fail(err, JPROF_E_BAD_REQUEST,
					       "member \"format\" must be a non-empty name of a-z, 0-9, '_' or '-'");
		} else if (strcmp(key, "group_by") == 0) {
			r = proto_get_string_member(val, key, p->group_by, sizeof(p->group_by), err);
			if (r == 0 && !proto_group_ok(p->group_by))
				r = proto_fail(err, JPROF_E_BAD_REQUEST,
					       "member \"group_by\" must be \"none\", \"comm\", \"pid\", \"thread\", \"unit\" or \"cgroup\"");
		}
		if (r < 0)
			goto out;
	}
	if (has_last && (has_from || has_to)) {
		r = proto_fail(err, JPROF_E_BAD_REQUEST,
			       "member \"last_s\" and the range \"from_ms\"/\"to_ms\" are mutually exclusive");
	} else if (has_to && !has_from) {
		r = proto_fail(err, JPROF_E_BAD_REQUEST, "member \"to_ms\" needs \"from_ms\"");
	} else if (has_from && p->from_ms >= p->to_ms) {
		r = proto_fail(err, JPROF_E_BAD_REQUEST,
			       "member \"from_ms\" (%" PRId64 ") must be before \"to_ms\" (%" PRId64 ")",
			       p->from_ms, p->to_ms);
	} else if (has_from) {
		p->has_range = true;
		p->last_s = 0;
	}
	if (r == 0) {
		/* An empty filter string would silently match everything. */
		const char *empty = !p->comm[0] && json_object_object_get_ex(root, "comm", NULL) ? "comm" :
				    !p->unit[0] && json_object_object_get_ex(root, "unit", NULL) ? "unit" :
				    !p->cgroup[0] && json_object_object_get_ex(root, "cgroup", NULL) ? "cgroup" :
				    NULL;

		if (empty)
			r = proto_fail(err, JPROF_E_BAD_REQUEST, "member \"%s\" must not be empty", empty);
	}
out:
	return r;
}

static int proto_parse_cancel(struct json_object *root, struct jprof_cancel_req *c,
			      struct jprof_error *err)
{
	struct json_object *v;
	int r;

	if (!json_object_object_get_ex(root, "target", &v)) {
		r = proto_fail(err, JPROF_E_BAD_REQUEST,
			       "member \"target\" (id of a record request) is required");
		goto out;
	}
	r = proto_get_int_member(v, "target", 0, JPROF_PROTO_ID_MAX, &c->target, err);
out:
	return r;
}

/* Members each command accepts besides "v", "id" and "cmd". */
static bool proto_member_known(enum jprof_cmd cmd, const char *key)
{
	static const char *const hello[] = { "min_version", "max_version", "client", NULL };
	static const char *const record[] = { "pid", "all", "duration_ms", "interval_us",
					      "format", "event", "threshold_us", "lock_threshold_us",
					      "alloc_bytes", "progress",
					      "thread_frames", "java", "java_lines",
					      "java_signatures", "java_types", NULL };
	static const char *const cancel[] = { "target", NULL };
	static const char *const profile[] = { "last_s", "from_ms", "to_ms", "pid", "comm", "unit",
					       "cgroup", "format", "group_by", NULL };
	const char *const *list = NULL;

	if (!strcmp(key, "v") || !strcmp(key, "id") || !strcmp(key, "cmd"))
		return true;
	switch (cmd) {
	case JPROF_CMD_HELLO:
		list = hello;
		break;
	case JPROF_CMD_RECORD:
		list = record;
		break;
	case JPROF_CMD_CANCEL:
		list = cancel;
		break;
	case JPROF_CMD_PROFILE:
		list = profile;
		break;
	case JPROF_CMD_STATUS:
		break;
	}
	for (; list && *list; list++)
		if (!strcmp(key, *list))
			return true;
	return false;
}

int jprof_request_parse(const char *line, size_t len, struct jprof_request *req,
			struct jprof_error *err)
{
	struct json_object *root = NULL, *v;
	const char *why;
	size_t members = 0;
	int64_t x;
	int r, cmd;

	memset(req, 0, sizeof(*req));
	memset(err, 0, sizeof(*err));
	if (len > JPROF_PROTO_MAX_REQUEST) {
		r = proto_fail(err, JPROF_E_LINE_TOO_LONG,
			       "request line longer than %d bytes", JPROF_PROTO_MAX_REQUEST);
		goto out;
	}
	root = proto_parse_text(line, len, JPROF_REQUEST_DEPTH, &members, &why);
	if (!root) {
		r = proto_fail(err, JPROF_E_BAD_JSON,
			       "request is not a JSON object on one line: %s", why);
		goto out;
	}

	/* Read the id first so that every later error can echo it. */
	if (json_object_object_get_ex(root, "id", &v) &&
	    proto_get_int(v, 0, JPROF_PROTO_ID_MAX, &x) == 0) {
		req->id = x;
		req->has_id = true;
	}

	if (!json_object_object_get_ex(root, "v", &v)) {
		r = proto_fail(err, JPROF_E_BAD_REQUEST,
			       "member \"v\" (protocol version, %d) is required",
			       JPROF_PROTO_VERSION);
		goto out;
	}
	if (!json_object_is_type(v, json_type_int)) {
		r = proto_fail(err, JPROF_E_BAD_REQUEST, "member \"v\" must be an integer");
		goto out;
	}
	if (json_object_get_int64(v) != JPROF_PROTO_VERSION) {
		r = proto_fail(err, JPROF_E_UNSUPPORTED_VERSION,
			       "protocol version %" PRId64 " is not supported; this daemon speaks %d",
			       json_object_get_int64(v), JPROF_PROTO_VERSION);
		goto out;
	}
	req->version = JPROF_PROTO_VERSION;

	if (!req->has_id) {
		if (json_object_object_get_ex(root, "id", &v))
			r = proto_fail(err, JPROF_E_BAD_REQUEST,
				       "member \"id\" must be an integer in 0..%" PRId64,
				       JPROF_PROTO_ID_MAX);
		else
			r = proto_fail(err, JPROF_E_BAD_REQUEST, "member \"id\" is required");
		goto out;
	}

	if (members != (size_t)json_object_object_length(root)) {
		r = proto_fail(err, JPROF_E_BAD_REQUEST, "request has a duplicate member");
		goto out;
	}

	if (!json_object_object_get_ex(root, "cmd", &v)) {
		r = proto_fail(err, JPROF_E_BAD_REQUEST, "member \"cmd\" is required");
		goto out;
	}
	if (!json_object_is_type(v, json_type_string)) {
		r = proto_fail(err, JPROF_E_BAD_REQUEST, "member \"cmd\" must be a string");
		goto out;
	}
	cmd = jprof_cmd_from_name(json_object_get_string(v));
	if (cmd < 0 || strlen(json_object_get_string(v)) !=
			       (size_t)json_object_get_string_len(v)) {
		r = proto_fail(err, JPROF_E_UNKNOWN_COMMAND,
			       "unknown command \"%.*s\"; known: hello, status, record, cancel, profile",
			       proto_quote_len(json_object_get_string(v), 64),
			       json_object_get_string(v));
		goto out;
	}

	/* req->id is passed by value, so the reset inside keeps it. */
	jprof_request_init(req, (enum jprof_cmd)cmd, req->id);

	r = 0;
	json_object_object_foreach(root, key, val) {
		(void)val;
		if (!proto_member_known(req->cmd, key)) {
			r = proto_fail(err, JPROF_E_UNKNOWN_FIELD,
				       "unknown member \"%.*s\" in a \"%s\" request",
				       proto_quote_len(key, 64), key, jprof_cmd_name(req->cmd));
			goto out;
		}
	}

	switch (req->cmd) {
	case JPROF_CMD_HELLO:
		r = proto_parse_hello(root, &req->hello, err);
		break;
	case JPROF_CMD_RECORD:
		r = proto_parse_record(root, &req->record, err);
		break;
	case JPROF_CMD_CANCEL:
		r = proto_parse_cancel(root, &req->cancel, err);
		break;
	case JPROF_CMD_PROFILE:
		r = proto_parse_profile(root, &req->profile, err);
		break;
	case JPROF_CMD_STATUS:
		break;
	}
out:
	json_object_put(root);
	return r;
}

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
