/* jprofd socket API v1 codec: command names, events, request parsing.
 * Encoding and responses: jprof_reply.c; the bounded JSON reading both
 * use: jprof_json.c. Shared by the daemon, jprofctl and the tests; see
 * docs/protocol.md. */
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

