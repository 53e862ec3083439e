/* jprofd socket API, version 1: newline-delimited JSON over a Unix stream
 * socket. This header and jprof_proto.c are the one codec shared by the
 * daemon, jprofctl and the tests. The wire format is documented in
 * docs/protocol.md, with a JSON schema and examples in proto/. */
#ifndef JPROF_PROTO_H
#define JPROF_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_object;

#define JPROF_PROTO_VERSION 1
#define JPROF_DEFAULT_SOCKET "/run/jprofd/jprofd.sock"
#define JPROF_SOCKET_ENV "JPROFD_SOCKET"
/* Request ids (and cancel targets) are 0..2^53-1 so that they survive a
 * round trip through a JavaScript or Python float. */
#define JPROF_PROTO_ID_MAX ((INT64_C(1) << 53) - 1)
/* Longest request line the daemon accepts, newline included. */
#define JPROF_PROTO_MAX_REQUEST (64 * 1024)

/* Record limits and defaults. */
#define JPROF_DURATION_MS_DEFAULT 30000ULL
#define JPROF_DURATION_MS_MAX (24ULL * 3600 * 1000)
#define JPROF_INTERVAL_US_DEFAULT 10000ULL
#define JPROF_INTERVAL_US_MIN 100ULL
#define JPROF_INTERVAL_US_MAX 10000000ULL

/* Events a recording can measure ("event" member of record). The daemon's
 * event table (daemon/core/event.c) has one row per name, in this order. */
#define JPROF_EVENT_CPU "cpu"
#define JPROF_EVENT_OFFCPU "offcpu"
#define JPROF_EVENT_WALL "wall"
#define JPROF_EVENT_ALLOC "alloc"     /* JVM only: JVMTI sampled object allocations */
#define JPROF_EVENT_LOCK "lock"       /* JVM only: contended monitor entries */
#define JPROF_EVENT_COUNT 5
/* Off-CPU: intervals shorter than the threshold are skipped (counted). */
#define JPROF_THRESHOLD_US_DEFAULT 10ULL
#define JPROF_THRESHOLD_US_MIN 1ULL
#define JPROF_THRESHOLD_US_MAX 10000000ULL
/* Lock: contended entries that waited less than threshold_us are skipped. */
#define JPROF_LOCK_THRESHOLD_US_DEFAULT 10ULL
/* Alloc: JVMTI's heap sampling interval (mean bytes between samples). */
#define JPROF_ALLOC_BYTES_DEFAULT (512ULL * 1024)
#define JPROF_ALLOC_BYTES_MIN 1024ULL
#define JPROF_ALLOC_BYTES_MAX (1ULL << 30)

struct jprof_event_desc {
	const char *name;
	const char *values;    /* what its samples carry, with units */
	const char *summary;
};

/* The events, JPROF_EVENT_COUNT of them. */
extern const struct jprof_event_desc jprof_events[];
/* "cpu, offcpu", for error messages and help. */
const char *jprof_event_names(void);
/* A comma-separated list of event names ("cpu,alloc,lock") into ids (indexes
 * into jprof_events, at most JPROF_EVENT_COUNT, in the order given): any
 * distinct events, except wall with cpu or offcpu (wall holds both). 0, or
 * -EINVAL with why (naming the offending event) filled. */
int jprof_event_list_parse(const char *list, int *ids, size_t *n, char *why, size_t len);

/* Error codes (the "code" member of an error response). */
#define JPROF_E_BAD_JSON "bad_json"                 /* not a JSON object */
#define JPROF_E_BAD_REQUEST "bad_request"           /* missing/wrong-typed/out-of-range member */
#define JPROF_E_UNKNOWN_COMMAND "unknown_command"
#define JPROF_E_UNKNOWN_FIELD "unknown_field"
#define JPROF_E_UNSUPPORTED_VERSION "unsupported_version"
#define JPROF_E_LINE_TOO_LONG "line_too_long"
#define JPROF_E_PERMISSION_DENIED "permission_denied"
#define JPROF_E_NO_SUCH_PROCESS "no_such_process"
#define JPROF_E_NO_SUCH_SESSION "no_such_session"
#define JPROF_E_LIMIT "limit_exceeded"              /* a limit or per-uid quota reached */
#define JPROF_E_RESOURCE_EXHAUSTED "resource_exhausted"  /* the daemon is out of fds or memory */
#define JPROF_E_SHUTTING_DOWN "shutting_down"
#define JPROF_E_NOT_A_JVM "not_a_jvm"                /* "java":"require" on a process that is not one */
#define JPROF_E_ATTACH_FAILED "attach_failed"        /* "java":"require" and the agent could not be loaded */
#define JPROF_E_EVENT_UNAVAILABLE "event_unavailable"  /* the JVM refused alloc/lock (JVMTI's reason) */
#define JPROF_E_UNAVAILABLE "unavailable"          /* "profile" while the host view is off */
#define JPROF_E_INTERNAL "internal"

enum jprof_cmd {
	JPROF_CMD_HELLO = 1,
	JPROF_CMD_STATUS,
	JPROF_CMD_RECORD,
	JPROF_CMD_CANCEL,
	JPROF_CMD_PROFILE,
};

struct jprof_hello_req {
	int min_version;   /* default 1 */
	int max_version;   /* default 1 */
	char client[64];   /* optional free text, e.g. "jprofctl 0.1.0" */
};

/* Java frames for a recording: "auto" loads the agent into HotSpot JVMs and
 * falls back to native stacks with a warning; "off" never does; "require"
 * fails the request when the target is not an attachable JVM. */
enum jprof_java {
	JPROF_JAVA_AUTO = 0,
	JPROF_JAVA_OFF,
	JPROF_JAVA_REQUIRE,
};

/* "auto", "off", "require" */
const char *jprof_java_name(enum jprof_java j);

struct jprof_record_req {
	int32_t pid;            /* > 0 when !all */
	bool all;               /* whole host (root or the authorized group only) */
	uint64_t duration_ms;
	uint64_t interval_us;
	char format[32];        /* "collapsed", "json", "html", "pprof", "text", "raw"; default "json" */
	/* JPROF_EVENT_*, or several comma-separated ("cpu,alloc,lock"); default
	 * "cpu" (the daemon checks the names) */
	char event[64];
	/* offcpu and wall (and lock when it is the only event); 0 = not given
	 * (the event's default) */
	uint64_t threshold_us;
	uint64_t lock_threshold_us;  /* lock; 0 = not given (threshold_us, or the default) */
	uint64_t alloc_bytes;   /* alloc only; 0 = not given (JPROF_ALLOC_BYTES_DEFAULT) */
	bool progress;          /* default true */
	bool thread_frames;     /* default false */
	enum jprof_java java;   /* default JPROF_JAVA_AUTO */
	bool java_lines;        /* Java frames as Class.method:line; default false */
	bool java_signatures;   /* Java frames with their JVM signature; default false */
	bool java_types;        /* collapsed: Java frames with their type suffix; default false */
};

/* Continuous host profile limits. */
#define JPROF_LAST_S_DEFAULT 60
#define JPROF_LAST_S_MAX 86400
#define JPROF_RANGE_MS_MAX (86400LL * 1000)

/* "profile": the retained host view of the last last_s seconds, or of
 * [from_ms, to_ms] relative to now (both <= 0), optionally filtered. */
struct jprof_profile_req {
	uint32_t last_s;        /* default 60; 0 when a range is given */
	bool has_range;
	int64_t from_ms;        /* -86400000..-1 */
	int64_t to_ms;          /* from_ms+1..0; default 0 */
	int32_t pid;            /* 0 = any */
	char comm[64];          /* "" = any */
	char unit[256];
	char cgroup[1024];      /* path prefix ("/system.slice/x.service") or container id */
	char format[32];        /* default "collapsed" */
	char group_by[16];      /* "none", "comm", "pid", "thread", "unit", "cgroup"; "" = default */
};

struct jprof_cancel_req {
	int64_t target;         /* id of the record request to stop */
};

struct jprof_request {
	int version;
	int64_t id;
	bool has_id;            /* set by the parser as soon as "id" is readable */
	enum jprof_cmd cmd;
	union {
		struct jprof_hello_req hello;
		struct jprof_record_req record;
		struct jprof_cancel_req cancel;
		struct jprof_profile_req profile;
	};
};

struct jprof_error {
	const char *code;       /* one of JPROF_E_* */
	char message[256];
};

/* "hello", "status", "record", "cancel", "profile"; NULL for anything else. */
const char *jprof_cmd_name(enum jprof_cmd cmd);
/* The enum jprof_cmd value for a name, or -ENOENT. */
int jprof_cmd_from_name(const char *name);

/* Fills *req with defaults for cmd (used by clients before setting fields). */
void jprof_request_init(struct jprof_request *req, enum jprof_cmd cmd, int64_t id);

/* Parses one request line (without or with its trailing newline).
 * Strict: unknown members, wrong types and out-of-range values are errors.
 * Returns 0, or -EINVAL with *err filled; req->has_id/id are set whenever the
 * id could be read so the error can echo it. */
int jprof_request_parse(const char *line, size_t len, struct jprof_request *req,
			struct jprof_error *err);

/* The protocol version to answer a parsed hello with, or -EPROTONOSUPPORT
 * when [min_version, max_version] does not include a version we speak. */
int jprof_hello_negotiate(const struct jprof_hello_req *hello);

/* Encodes a request as one line ending in '\n'. malloc'd; NULL on ENOMEM. */
char *jprof_request_encode(const struct jprof_request *req);

/* A success response {"v":1,"id":id,"ok":true,"type":type}; add members
 * with json-c, then jprof_json_line(). NULL on ENOMEM. */
struct json_object *jprof_response_new(int64_t id, const char *type);

/* An error line {"v":1,"id":id|null,"ok":false,"error":{"code","message"}}\n.
 * malloc'd; NULL on ENOMEM. */
char *jprof_error_line(int64_t id, bool has_id, const char *code, const char *message);

/* Adds a rendered profile to a "profile" message: "format", "encoding"
 * ("base64" when binary, else "utf-8") and "data". 0 or -ENOMEM. */
int jprof_profile_add_data(struct json_object *msg, const char *format, bool binary,
			   const void *data, size_t len);

/* Serializes obj compactly as one line ending in '\n'. malloc'd; *len set. */
char *jprof_json_line(struct json_object *obj, size_t *len);

/* Adds key: v to o, an integer member (counters, sizes and times of the
 * protocol, all below 2^63). Out of memory leaves the member out. */
void jprof_json_add_u64(struct json_object *o, const char *key, uint64_t v);

/* Client side: one parsed response line. */
struct jprof_response {
	int version;
	int64_t id;
	bool has_id;
	bool ok;
	const char *type;          /* success: "hello", "status", "started", "progress", "profile", "cancelled" */
	const char *err_code;      /* failure */
	const char *err_message;   /* failure */
	struct json_object *root;  /* whole message; owned */
};

/* 0, or -EINVAL if the line is not a valid response envelope. */
int jprof_response_parse(const char *line, size_t len, struct jprof_response *resp);
void jprof_response_free(struct jprof_response *resp);

/* Base64 (RFC 4648, with padding) for binary profile formats.
 * encode: malloc'd NUL-terminated string. decode: malloc'd bytes, *out_len
 * set; NULL on invalid input or ENOMEM. */
char *jprof_base64_encode(const void *data, size_t len);
void *jprof_base64_decode(const char *text, size_t len, size_t *out_len);

#endif
