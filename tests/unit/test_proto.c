/* Protocol codec: what a client or the daemon sees on the wire. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "jprof_proto.h"

static int parse_str(const char *line, struct jprof_request *req, struct jprof_error *err)
{
	return jprof_request_parse(line, strlen(line), req, err);
}

/* Asserts that line is rejected with code, that the id is echoed exactly when
 * expected, and that the message mentions needle (a member name, usually). */
static void expect_error_at(const char *line, size_t len, const char *code, bool has_id,
			    int64_t id, const char *needle)
{
	struct jprof_request req;
	struct jprof_error err;
	int r = jprof_request_parse(line, len, &req, &err);

	ck_assert_msg(r == -EINVAL, "accepted: %s", line);
	ck_assert_ptr_nonnull(err.code);
	ck_assert_msg(strcmp(err.code, code) == 0, "%s: code %s, want %s (%s)", line, err.code,
		      code, err.message);
	ck_assert_msg(req.has_id == has_id, "%s: has_id %d", line, req.has_id);
	if (has_id)
		ck_assert_int_eq(req.id, id);
	ck_assert_msg(err.message[0] != '\0', "%s: empty message", line);
	if (needle)
		ck_assert_msg(strstr(err.message, needle), "%s: message \"%s\" lacks \"%s\"", line,
			      err.message, needle);
}

static void expect_error(const char *line, const char *code, bool has_id, int64_t id,
			 const char *needle)
{
	expect_error_at(line, strlen(line), code, has_id, id, needle);
}

/* Encodes req, checks the line shape, parses it back. */
static void round_trip(const struct jprof_request *in, struct jprof_request *out)
{
	struct jprof_error err;
	char *line = jprof_request_encode(in);
	size_t len;

	ck_assert_ptr_nonnull(line);
	len = strlen(line);
	ck_assert_uint_gt(len, 1);
	ck_assert_int_eq(line[len - 1], '\n');
	ck_assert_ptr_eq(strchr(line, '\n'), line + len - 1);
	ck_assert_msg(jprof_request_parse(line, len, out, &err) == 0, "%s: %s", line, err.message);
	ck_assert_int_eq(out->version, 1);
	ck_assert(out->has_id);
	ck_assert_int_eq(out->id, in->id);
	ck_assert_int_eq(out->cmd, in->cmd);
	free(line);
}

START_TEST(test_round_trip_hello)
{
	struct jprof_request in, out;

	jprof_request_init(&in, JPROF_CMD_HELLO, 1);
	snprintf(in.hello.client, sizeof(in.hello.client), "jprofctl 0.1.0 \"quoted\" /x");
	round_trip(&in, &out);
	ck_assert_int_eq(out.hello.min_version, 1);
	ck_assert_int_eq(out.hello.max_version, 1);
	ck_assert_str_eq(out.hello.client, in.hello.client);
	ck_assert_int_eq(jprof_hello_negotiate(&out.hello), 1);

	out.hello.min_version = 2;
	out.hello.max_version = 3;
	ck_assert_int_eq(jprof_hello_negotiate(&out.hello), -EPROTONOSUPPORT);
}
END_TEST

START_TEST(test_round_trip_status)
{
	struct jprof_request in, out;

	jprof_request_init(&in, JPROF_CMD_STATUS, 0);
	round_trip(&in, &out);
	jprof_request_init(&in, JPROF_CMD_STATUS, JPROF_PROTO_ID_MAX);
	round_trip(&in, &out);
}
END_TEST

START_TEST(test_round_trip_record)
{
	struct jprof_request in, out;

	jprof_request_init(&in, JPROF_CMD_RECORD, 7);
	in.record.pid = 1234;
	in.record.duration_ms = 86400000;
	in.record.interval_us = 100;
	snprintf(in.record.format, sizeof(in.record.format), "collapsed");
	in.record.progress = false;
	in.record.thread_frames = true;
	in.record.java_types = true;
	round_trip(&in, &out);
	ck_assert_int_eq(out.record.pid, 1234);
	ck_assert(!out.record.all);
	ck_assert_uint_eq(out.record.duration_ms, 86400000);
	ck_assert_uint_eq(out.record.interval_us, 100);
	ck_assert_str_eq(out.record.format, "collapsed");
	ck_assert(!out.record.progress);
	ck_assert(out.record.thread_frames);
	ck_assert(out.record.java_types);

	jprof_request_init(&in, JPROF_CMD_RECORD, 8);
	in.record.all = true;
	round_trip(&in, &out);
	ck_assert(out.record.all);
	ck_assert_int_eq(out.record.pid, 0);
	ck_assert_uint_eq(out.record.duration_ms, JPROF_DURATION_MS_DEFAULT);
	ck_assert_uint_eq(out.record.interval_us, JPROF_INTERVAL_US_DEFAULT);
	ck_assert_str_eq(out.record.format, "json");
	ck_assert(out.record.progress);
	ck_assert(!out.record.thread_frames);
	ck_assert(!out.record.java_types);
}
END_TEST

/* A record request line the parser refuses with a message containing needle. */
static void ck_record_refused(const char *line, const char *needle)
{
	struct jprof_request out;
	struct jprof_error err;

	ck_assert_int_lt(jprof_request_parse(line, strlen(line), &out, &err), 0);
	ck_assert_msg(strstr(err.message, needle), "\"%s\" not in \"%s\"", needle, err.message);
}

START_TEST(test_record_event)
{
	struct jprof_request in, out;
	struct jprof_error err;
	const char *line;

	jprof_request_init(&in, JPROF_CMD_RECORD, 9);
	in.record.pid = 1;
	ck_assert_str_eq(in.record.event, "cpu");
	snprintf(in.record.event, sizeof(in.record.event), JPROF_EVENT_OFFCPU);
	in.record.threshold_us = 250;
	round_trip(&in, &out);
	ck_assert_str_eq(out.record.event, "offcpu");
	ck_assert_uint_eq(out.record.threshold_us, 250);

	ck_record_refused("{\"v\":1,\"id\":1,\"cmd\":\"record\",\"pid\":1,\"threshold_us\":0}", "threshold_us");
	ck_record_refused("{\"v\":1,\"id\":1,\"cmd\":\"record\",\"pid\":1,\"event\":\"Off CPU\"}", "cpu, offcpu");
	ck_assert_str_eq(jprof_event_names(), "cpu, offcpu, wall, alloc, lock");
	ck_assert_str_eq(jprof_event_names(), "cpu, offcpu, wall, alloc, lock");  /* built once, kept */
	line = "{\"v\":1,\"id\":1,\"cmd\":\"record\",\"pid\":1,\"event\":\"alloc\",\"alloc_bytes\":65536}";
	ck_assert_int_eq(jprof_request_parse(line, strlen(line), &out, &err), 0);
	ck_assert_str_eq(out.record.event, "alloc");
	ck_assert_uint_eq(out.record.alloc_bytes, 65536);
	ck_record_refused("{\"v\":1,\"id\":1,\"cmd\":\"record\",\"pid\":1,\"alloc_bytes\":1023}", "alloc_bytes");
	ck_record_refused("{\"v\":1,\"id\":1,\"cmd\":\"record\",\"pid\":1,\"alloc_bytes\":1073741825}", "alloc_bytes");

	/* Several events: the list travels as one string (the daemon checks
	 * the names), lock's threshold as lock_threshold_us. */
	snprintf(in.record.event, sizeof(in.record.event), "cpu,alloc,lock");
	in.record.threshold_us = 0;
	in.record.lock_threshold_us = 500;
	round_trip(&in, &out);
	ck_assert_str_eq(out.record.event, "cpu,alloc,lock");
	ck_assert_uint_eq(out.record.lock_threshold_us, 500);
	ck_assert_uint_eq(out.record.threshold_us, 0);
	line = "{\"v\":1,\"id\":1,\"cmd\":\"record\",\"pid\":1,\"event\":\"cpu,offcpu,alloc,lock\"}";
	ck_assert_int_eq(jprof_request_parse(line, strlen(line), &out, &err), 0);
	ck_assert_str_eq(out.record.event, "cpu,offcpu,alloc,lock");
	ck_record_refused("{\"v\":1,\"id\":1,\"cmd\":\"record\",\"pid\":1,\"event\":\"cpu, alloc\"}", "comma-separated");
	ck_record_refused("{\"v\":1,\"id\":1,\"cmd\":\"record\",\"pid\":1,\"lock_threshold_us\":0}", "lock_threshold_us");
}
END_TEST

START_TEST(test_round_trip_cancel)
{
	struct jprof_request in, out;

	jprof_request_init(&in, JPROF_CMD_CANCEL, 9);
	in.cancel.target = 8;
	round_trip(&in, &out);
	ck_assert_int_eq(out.cancel.target, 8);
}
END_TEST

START_TEST(test_record_defaults)
{
	struct jprof_request req;
	struct jprof_error err;

	ck_assert_int_eq(parse_str("{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":42}\n", &req, &err), 0);
	ck_assert_int_eq(req.cmd, JPROF_CMD_RECORD);
	ck_assert_int_eq(req.record.pid, 42);
	ck_assert_uint_eq(req.record.duration_ms, 30000);
	ck_assert_uint_eq(req.record.interval_us, 10000);
	ck_assert_str_eq(req.record.format, "json");
	ck_assert(req.record.progress);
	ck_assert(!req.record.thread_frames);

	/* Member order, whitespace and CRLF do not matter. */
	ck_assert_int_eq(parse_str(" { \"pid\" : 5 , \"cmd\":\"record\", \"id\":4, \"v\":1 }\r\n",
				   &req, &err), 0);
	ck_assert_int_eq(req.record.pid, 5);
	ck_assert_int_eq(req.id, 4);

	/* "all": false next to a pid is the same as leaving it out. */
	ck_assert_int_eq(parse_str("{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":42,\"all\":false}",
				   &req, &err), 0);
	ck_assert(!req.record.all);
}
END_TEST

START_TEST(test_bad_json)
{
	static const char *const lines[] = {
		"", "\n", "{", "}", "[1]", "42", "\"status\"", "null", "true",
		"{\"v\":1,\"id\":1,\"cmd\":\"status\"", "{\"v\":1,\"id\":1,\"cmd\":\"status\"} x",
		"{\"v\":1,\"id\":1,\"cmd\":\"status\"}{\"v\":1}",
		"{'v':1,'id':1,'cmd':'status'}", "{\"v\":1,\"id\":1,\"cmd\":\"status\",}",
		"{\"v\":1,\"id\":NaN,\"cmd\":\"status\"}", "{\"v\":1,\"id\":Infinity,\"cmd\":\"status\"}",
		"{\"v\":1,/*c*/\"id\":1,\"cmd\":\"status\"}", "{\"v\":01,\"id\":1,\"cmd\":\"status\"}",
		"{\"v\":1,\"id\":1,\"cmd\":\"st\xff\xfe\"}",
	};

	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
		expect_error(lines[i], JPROF_E_BAD_JSON, false, 0, NULL);
}
END_TEST

START_TEST(test_embedded_nul)
{
	static const char line[] = "{\"v\":1,\"id\":1,\"cmd\":\"status\"}\0{\"x\":1}\n";
	static const char line2[] = "{\"v\":1,\"id\":1,\"cmd\":\"sta\0tus\"}\n";

	expect_error_at(line, sizeof(line) - 1, JPROF_E_BAD_JSON, false, 0, "NUL");
	expect_error_at(line2, sizeof(line2) - 1, JPROF_E_BAD_JSON, false, 0, "NUL");
	/* An escaped NUL is valid JSON but never a valid command or name. */
	expect_error("{\"v\":1,\"id\":2,\"cmd\":\"status\\u0000x\"}", JPROF_E_UNKNOWN_COMMAND,
		     true, 2, NULL);
	expect_error("{\"v\":1,\"id\":2,\"cmd\":\"hello\",\"client\":\"a\\u0000b\"}",
		     JPROF_E_BAD_REQUEST, true, 2, "client");
}
END_TEST

START_TEST(test_missing_members)
{
	expect_error("{\"id\":5,\"cmd\":\"status\"}", JPROF_E_BAD_REQUEST, true, 5, "\"v\"");
	expect_error("{\"v\":1,\"cmd\":\"status\"}", JPROF_E_BAD_REQUEST, false, 0, "\"id\"");
	expect_error("{\"v\":1,\"id\":6}", JPROF_E_BAD_REQUEST, true, 6, "\"cmd\"");
	expect_error("{}", JPROF_E_BAD_REQUEST, false, 0, NULL);
	expect_error("{\"v\":1,\"id\":6,\"cmd\":\"cancel\"}", JPROF_E_BAD_REQUEST, true, 6,
		     "target");
}
END_TEST

START_TEST(test_version)
{
	expect_error("{\"v\":2,\"id\":11,\"cmd\":\"status\"}", JPROF_E_UNSUPPORTED_VERSION, true,
		     11, "2");
	expect_error("{\"v\":0,\"id\":11,\"cmd\":\"status\"}", JPROF_E_UNSUPPORTED_VERSION, true,
		     11, NULL);
	/* A newer client may send members v1 does not know: the version error wins. */
	expect_error("{\"v\":2,\"id\":11,\"cmd\":\"frobnicate\",\"new\":1}",
		     JPROF_E_UNSUPPORTED_VERSION, true, 11, NULL);
	expect_error("{\"v\":\"1\",\"id\":11,\"cmd\":\"status\"}", JPROF_E_BAD_REQUEST, true, 11,
		     "\"v\"");
	expect_error("{\"v\":1.0,\"id\":11,\"cmd\":\"status\"}", JPROF_E_BAD_REQUEST, true, 11,
		     "\"v\"");
}
END_TEST

START_TEST(test_unknown_command)
{
	expect_error("{\"v\":1,\"id\":12,\"cmd\":\"frobnicate\"}", JPROF_E_UNKNOWN_COMMAND, true,
		     12, "frobnicate");
	expect_error("{\"v\":1,\"id\":12,\"cmd\":\"STATUS\"}", JPROF_E_UNKNOWN_COMMAND, true, 12,
		     NULL);
	expect_error("{\"v\":1,\"id\":12,\"cmd\":\"\"}", JPROF_E_UNKNOWN_COMMAND, true, 12, NULL);
	expect_error("{\"v\":1,\"id\":12,\"cmd\":3}", JPROF_E_BAD_REQUEST, true, 12, "cmd");
}
END_TEST

START_TEST(test_unknown_field)
{
	expect_error("{\"v\":1,\"id\":13,\"cmd\":\"status\",\"verbose\":true}",
		     JPROF_E_UNKNOWN_FIELD, true, 13, "verbose");
	/* A member of another command is unknown here. */
	expect_error("{\"v\":1,\"id\":13,\"cmd\":\"status\",\"pid\":1}", JPROF_E_UNKNOWN_FIELD,
		     true, 13, "pid");
	expect_error("{\"v\":1,\"id\":13,\"cmd\":\"record\",\"pid\":1,\"duration\":5}",
		     JPROF_E_UNKNOWN_FIELD, true, 13, "duration");
	expect_error("{\"v\":1,\"id\":13,\"cmd\":\"cancel\",\"target\":1,\"session\":1}",
		     JPROF_E_UNKNOWN_FIELD, true, 13, "session");
	expect_error("{\"v\":1,\"id\":13,\"cmd\":\"hello\",\"Client\":\"x\"}",
		     JPROF_E_UNKNOWN_FIELD, true, 13, "Client");
}
END_TEST

START_TEST(test_duplicate_member)
{
	expect_error("{\"v\":1,\"id\":14,\"cmd\":\"record\",\"pid\":1,\"pid\":2}",
		     JPROF_E_BAD_REQUEST, true, 14, "duplicate");
	expect_error("{\"v\":1,\"id\":14,\"id\":15,\"cmd\":\"status\"}", JPROF_E_BAD_REQUEST, true,
		     15, "duplicate");
}
END_TEST

START_TEST(test_wrong_types)
{
	static const struct {
		const char *line;
		const char *member;
	} cases[] = {
		{ "{\"v\":1,\"id\":\"1\",\"cmd\":\"status\"}", "\"id\"" },
		{ "{\"v\":1,\"id\":1.5,\"cmd\":\"status\"}", "\"id\"" },
		{ "{\"v\":1,\"id\":true,\"cmd\":\"status\"}", "\"id\"" },
		{ "{\"v\":1,\"id\":null,\"cmd\":\"status\"}", "\"id\"" },
		{ "{\"v\":1,\"id\":[1],\"cmd\":\"status\"}", "\"id\"" },
	};
	static const struct {
		const char *line;
		const char *member;
	} with_id[] = {
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":\"1\"}", "\"pid\"" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1.0}", "\"pid\"" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"all\":1}", "\"all\"" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"all\":\"true\"}", "\"all\"" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1,\"duration_ms\":\"30s\"}", "duration_ms" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1,\"duration_ms\":1e3}", "duration_ms" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1,\"interval_us\":null}", "interval_us" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1,\"format\":1}", "format" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1,\"format\":\"\"}", "format" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1,\"format\":\"../x\"}", "format" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1,\"format\":\"abcdefghijklmnopqrstuvwxyz0123456\"}", "format" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1,\"progress\":0}", "progress" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"record\",\"pid\":1,\"thread_frames\":\"no\"}", "thread_frames" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"cancel\",\"target\":\"1\"}", "target" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"hello\",\"min_version\":\"1\"}", "min_version" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"hello\",\"max_version\":{}}", "max_version" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"hello\",\"client\":42}", "client" },
		{ "{\"v\":1,\"id\":2,\"cmd\":\"hello\",\"client\":\"0123456789012345678901234567890123456789012345678901234567890123\"}", "client" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_error(cases[i].line, JPROF_E_BAD_REQUEST, false, 0, cases[i].member);
	for (size_t i = 0; i < sizeof(with_id) / sizeof(with_id[0]); i++)
		expect_error(with_id[i].line, JPROF_E_BAD_REQUEST, true, 2, with_id[i].member);
}
END_TEST

START_TEST(test_out_of_range)
{
	static const struct {
		const char *line;
		const char *member;
	} cases[] = {
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":0}", "\"pid\"" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":-1}", "\"pid\"" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":2147483648}", "\"pid\"" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":1,\"duration_ms\":0}", "duration_ms" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":1,\"duration_ms\":86400001}", "duration_ms" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":1,\"duration_ms\":-30000}", "duration_ms" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":1,\"interval_us\":99}", "interval_us" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":1,\"interval_us\":10000001}", "interval_us" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"cancel\",\"target\":-1}", "target" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"cancel\",\"target\":9007199254740992}", "target" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"hello\",\"min_version\":0}", "min_version" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"hello\",\"min_version\":3,\"max_version\":2}", "min_version" },
		/* Beyond 64 bits: json-c clamps, the range check still fails. */
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":99999999999999999999999999}", "\"pid\"" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":-99999999999999999999999999}", "\"pid\"" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":1,\"duration_ms\":18446744073709551615}", "duration_ms" },
		{ "{\"v\":1,\"id\":3,\"cmd\":\"record\",\"pid\":1,\"interval_us\":18446744073709551616}", "interval_us" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_error(cases[i].line, JPROF_E_BAD_REQUEST, true, 3, cases[i].member);

	/* The limits themselves are accepted. */
	struct jprof_request req;
	struct jprof_error err;

	ck_assert_int_eq(parse_str("{\"v\":1,\"id\":9007199254740991,\"cmd\":\"record\",\"pid\":2147483647,"
				   "\"duration_ms\":1,\"interval_us\":10000000}", &req, &err), 0);
	ck_assert_int_eq(req.id, 9007199254740991LL);
	ck_assert_int_eq(req.record.pid, 2147483647);
	ck_assert_uint_eq(req.record.duration_ms, 1);
	ck_assert_uint_eq(req.record.interval_us, 10000000);
}
END_TEST

START_TEST(test_huge_ids)
{
	/* An id that cannot be echoed exactly is not echoed at all. */
	expect_error("{\"v\":1,\"id\":9007199254740992,\"cmd\":\"status\"}", JPROF_E_BAD_REQUEST,
		     false, 0, "\"id\"");
	expect_error("{\"v\":1,\"id\":-1,\"cmd\":\"status\"}", JPROF_E_BAD_REQUEST, false, 0,
		     "\"id\"");
	expect_error("{\"v\":1,\"id\":18446744073709551616,\"cmd\":\"status\"}",
		     JPROF_E_BAD_REQUEST, false, 0, "\"id\"");
	expect_error("{\"v\":1,\"id\":1e400,\"cmd\":\"status\"}", JPROF_E_BAD_REQUEST, false, 0,
		     NULL);
	expect_error("{\"v\":99999999999999999999999,\"id\":4,\"cmd\":\"status\"}",
		     JPROF_E_UNSUPPORTED_VERSION, true, 4, NULL);
}
END_TEST

START_TEST(test_pid_all)
{
	expect_error("{\"v\":1,\"id\":16,\"cmd\":\"record\",\"pid\":1,\"all\":true}",
		     JPROF_E_BAD_REQUEST, true, 16, "mutually exclusive");
	expect_error("{\"v\":1,\"id\":16,\"cmd\":\"record\"}", JPROF_E_BAD_REQUEST, true, 16,
		     "required");
	expect_error("{\"v\":1,\"id\":16,\"cmd\":\"record\",\"all\":false}", JPROF_E_BAD_REQUEST,
		     true, 16, "required");
}
END_TEST

START_TEST(test_line_too_long)
{
	size_t n = JPROF_PROTO_MAX_REQUEST + 1;
	char *line = malloc(n + 1);
	int off;

	ck_assert_ptr_nonnull(line);
	off = snprintf(line, n + 1, "{\"v\":1,\"id\":1,\"cmd\":\"hello\",\"client\":\"");
	memset(line + off, 'a', n - (size_t)off - 3);
	memcpy(line + n - 3, "\"}\n", 4);
	expect_error_at(line, n, JPROF_E_LINE_TOO_LONG, false, 0, NULL);
	free(line);
}
END_TEST

START_TEST(test_error_line)
{
	struct jprof_response resp;
	char *line;

	line = jprof_error_line(21, true, JPROF_E_NO_SUCH_PROCESS, "no process 99 / \"x\"");
	ck_assert_ptr_nonnull(line);
	ck_assert_str_eq(line, "{\"v\":1,\"id\":21,\"ok\":false,\"error\":{\"code\":\"no_such_process\","
			       "\"message\":\"no process 99 / \\\"x\\\"\"}}\n");
	ck_assert_int_eq(jprof_response_parse(line, strlen(line), &resp), 0);
	ck_assert(!resp.ok);
	ck_assert(resp.has_id);
	ck_assert_int_eq(resp.id, 21);
	ck_assert_str_eq(resp.err_code, "no_such_process");
	ck_assert_str_eq(resp.err_message, "no process 99 / \"x\"");
	ck_assert_ptr_null(resp.type);
	jprof_response_free(&resp);
	free(line);

	line = jprof_error_line(0, false, JPROF_E_BAD_JSON, "garbage");
	ck_assert_str_eq(line, "{\"v\":1,\"id\":null,\"ok\":false,\"error\":{\"code\":\"bad_json\","
			       "\"message\":\"garbage\"}}\n");
	ck_assert_int_eq(jprof_response_parse(line, strlen(line), &resp), 0);
	ck_assert(!resp.has_id);
	ck_assert_str_eq(resp.err_code, "bad_json");
	jprof_response_free(&resp);
	free(line);
}
END_TEST

START_TEST(test_response_success)
{
	struct jprof_response resp;
	struct json_object *obj, *v;
	size_t len;
	char *line;

	obj = jprof_response_new(5, "profile");
	ck_assert_ptr_nonnull(obj);
	json_object_object_add(obj, "data", json_object_new_string("main;a/b 1\nmain;c 2\n"));
	line = jprof_json_line(obj, &len);
	json_object_put(obj);
	ck_assert_ptr_nonnull(line);
	ck_assert_uint_eq(len, strlen(line));
	/* One line, slashes not escaped. */
	ck_assert_ptr_eq(strchr(line, '\n'), line + len - 1);
	ck_assert_ptr_nonnull(strstr(line, "a/b"));
	ck_assert(strncmp(line, "{\"v\":1,\"id\":5,\"ok\":true,\"type\":\"profile\"", 40) == 0);

	ck_assert_int_eq(jprof_response_parse(line, len, &resp), 0);
	ck_assert(resp.ok);
	ck_assert_int_eq(resp.version, 1);
	ck_assert_int_eq(resp.id, 5);
	ck_assert_str_eq(resp.type, "profile");
	ck_assert(json_object_object_get_ex(resp.root, "data", &v));
	ck_assert_str_eq(json_object_get_string(v), "main;a/b 1\nmain;c 2\n");
	jprof_response_free(&resp);
	jprof_response_free(&resp); /* idempotent */
	jprof_response_free(NULL);
	free(line);
}
END_TEST

START_TEST(test_response_garbage)
{
	static const char *const lines[] = {
		"", "\n", "nope", "[]", "{}", "null",
		"{\"v\":1,\"id\":1,\"ok\":true}",                       /* no type */
		"{\"v\":1,\"id\":1,\"ok\":true,\"type\":5}",
		"{\"v\":1,\"id\":1,\"ok\":\"true\",\"type\":\"status\"}",
		"{\"v\":1,\"id\":1,\"type\":\"status\"}",                /* no ok */
		"{\"v\":1,\"ok\":true,\"type\":\"status\"}",             /* no id */
		"{\"v\":1,\"id\":\"1\",\"ok\":true,\"type\":\"status\"}",
		"{\"v\":1,\"id\":-1,\"ok\":true,\"type\":\"status\"}",
		"{\"v\":2,\"id\":1,\"ok\":true,\"type\":\"status\"}",
		"{\"id\":1,\"ok\":true,\"type\":\"status\"}",
		"{\"v\":1,\"id\":1,\"ok\":false}",                       /* no error */
		"{\"v\":1,\"id\":1,\"ok\":false,\"error\":\"x\"}",
		"{\"v\":1,\"id\":1,\"ok\":false,\"error\":{\"code\":\"x\"}}",
		"{\"v\":1,\"id\":1,\"ok\":false,\"error\":{\"message\":\"x\"}}",
		"{\"v\":1,\"id\":1,\"ok\":false,\"error\":{\"code\":1,\"message\":\"x\"}}",
		"{\"v\":1,\"id\":1,\"ok\":true,\"type\":\"status\"} trailing",
		"{\"v\":1,\"id\":1,\"ok\":true,\"type\":\"st\xc3\"}",
	};
	static const char nul[] = "{\"v\":1,\"id\":1,\"ok\":true,\"type\":\"status\"}\0\n";
	struct jprof_response resp;

	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		ck_assert_msg(jprof_response_parse(lines[i], strlen(lines[i]), &resp) == -EINVAL,
			      "accepted: %s", lines[i]);
		ck_assert_ptr_null(resp.root);
	}
	ck_assert_int_eq(jprof_response_parse(nul, sizeof(nul) - 1, &resp), -EINVAL);
	/* Deep nesting must not recurse without bound. */
	{
		char deep[4096];
		size_t n = 0;

		n += (size_t)snprintf(deep, sizeof(deep), "{\"v\":1,\"id\":1,\"ok\":true,\"type\":\"x\",\"d\":");
		for (int i = 0; i < 1000; i++)
			deep[n++] = '[';
		for (int i = 0; i < 1000; i++)
			deep[n++] = ']';
		deep[n++] = '}';
		ck_assert_int_eq(jprof_response_parse(deep, n, &resp), -EINVAL);
	}
}
END_TEST

static void b64_check(const char *plain, const char *encoded)
{
	char *e = jprof_base64_encode(plain, strlen(plain));
	size_t n = 99;
	char *d;

	ck_assert_str_eq(e, encoded);
	d = jprof_base64_decode(encoded, strlen(encoded), &n);
	ck_assert_ptr_nonnull(d);
	ck_assert_uint_eq(n, strlen(plain));
	ck_assert(memcmp(d, plain, n) == 0);
	free(e);
	free(d);
}

START_TEST(test_base64_vectors)
{
	/* RFC 4648, section 10. */
	b64_check("", "");
	b64_check("f", "Zg==");
	b64_check("fo", "Zm8=");
	b64_check("foo", "Zm9v");
	b64_check("foob", "Zm9vYg==");
	b64_check("fooba", "Zm9vYmE=");
	b64_check("foobar", "Zm9vYmFy");
}
END_TEST

START_TEST(test_base64_round_trip)
{
	unsigned char data[256];

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)(255 - i * 7);
	for (size_t len = 0; len <= 10; len++) {
		for (size_t start = 0; start < 8; start++) {
			char *e = jprof_base64_encode(data + start * 31, len);
			size_t n = 12345;
			unsigned char *d;

			ck_assert_ptr_nonnull(e);
			ck_assert_uint_eq(strlen(e), (len + 2) / 3 * 4);
			d = jprof_base64_decode(e, strlen(e), &n);
			ck_assert_ptr_nonnull(d);
			ck_assert_uint_eq(n, len);
			ck_assert(memcmp(d, data + start * 31, len) == 0);
			free(d);
			free(e);
		}
	}
	/* Every byte value, including the 62nd and 63rd alphabet characters. */
	{
		char *e = jprof_base64_encode(data, sizeof(data));
		size_t n;
		unsigned char *d = jprof_base64_decode(e, strlen(e), &n);

		ck_assert_ptr_nonnull(strchr(e, '+'));
		ck_assert_ptr_nonnull(strchr(e, '/'));
		ck_assert_uint_eq(n, sizeof(data));
		ck_assert(memcmp(d, data, n) == 0);
		free(d);
		free(e);
	}
}
END_TEST

START_TEST(test_base64_invalid)
{
	static const char *const bad[] = {
		"Z", "Zg", "Zg=", "Zm9vY", "Z===", "====", "=Zg=", "Zg==Zg==", "Zm9v!A==",
		"Zm 9v", "Zm9v\n", "Zm9-", "Zm9_", "Zh==", "Zm9=", "Zg=A", "\xc3\xa9\x41\x41",
	};
	size_t n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(jprof_base64_decode(bad[i], strlen(bad[i]), &n) == NULL,
			      "accepted \"%s\"", bad[i]);
	ck_assert_ptr_null(jprof_base64_decode("Zm9v\0Zm9v", 9, &n));
	ck_assert_ptr_null(jprof_base64_decode("Zm\0v", 4, &n));
}
END_TEST

START_TEST(test_profile_request)
{
	struct jprof_request in, out;
	struct jprof_error err;

	/* Defaults: the last minute, collapsed, whole host, default grouping. */
	ck_assert_int_eq(parse_str("{\"v\":1,\"id\":4,\"cmd\":\"profile\"}", &out, &err), 0);
	ck_assert_int_eq(out.cmd, JPROF_CMD_PROFILE);
	ck_assert_uint_eq(out.profile.last_s, 60);
	ck_assert(!out.profile.has_range);
	ck_assert_int_eq(out.profile.pid, 0);
	ck_assert_str_eq(out.profile.format, "collapsed");
	ck_assert_str_eq(out.profile.group_by, "");

	jprof_request_init(&in, JPROF_CMD_PROFILE, 9);
	in.profile.last_s = 0;
	in.profile.has_range = true;
	in.profile.from_ms = -120000;
	in.profile.to_ms = -60000;
	in.profile.pid = 77;
	snprintf(in.profile.comm, sizeof(in.profile.comm), "nginx");
	snprintf(in.profile.unit, sizeof(in.profile.unit), "nginx.service");
	snprintf(in.profile.cgroup, sizeof(in.profile.cgroup), "/system.slice/nginx.service");
	snprintf(in.profile.format, sizeof(in.profile.format), "pprof");
	snprintf(in.profile.group_by, sizeof(in.profile.group_by), "unit");
	round_trip(&in, &out);
	ck_assert_int_eq(out.cmd, JPROF_CMD_PROFILE);
	ck_assert(out.profile.has_range);
	ck_assert_int_eq(out.profile.from_ms, -120000);
	ck_assert_int_eq(out.profile.to_ms, -60000);
	ck_assert_int_eq(out.profile.pid, 77);
	ck_assert_str_eq(out.profile.comm, "nginx");
	ck_assert_str_eq(out.profile.unit, "nginx.service");
	ck_assert_str_eq(out.profile.cgroup, "/system.slice/nginx.service");
	ck_assert_str_eq(out.profile.format, "pprof");
	ck_assert_str_eq(out.profile.group_by, "unit");

	jprof_request_init(&in, JPROF_CMD_PROFILE, 10);
	in.profile.last_s = 600;
	round_trip(&in, &out);
	ck_assert_uint_eq(out.profile.last_s, 600);
	ck_assert(!out.profile.has_range);

	/* from_ms alone runs up to now. */
	ck_assert_int_eq(parse_str("{\"v\":1,\"id\":4,\"cmd\":\"profile\",\"from_ms\":-5000}", &out, &err), 0);
	ck_assert(out.profile.has_range);
	ck_assert_int_eq(out.profile.to_ms, 0);
	ck_assert_str_eq(jprof_cmd_name(JPROF_CMD_PROFILE), "profile");
}
END_TEST

START_TEST(test_profile_strict)
{
	static const struct { const char *line, *code, *needle; } cases[] = {
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"duration_ms\":1000}", JPROF_E_UNKNOWN_FIELD, "duration_ms" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"all\":true}", JPROF_E_UNKNOWN_FIELD, "all" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"last_s\":0}", JPROF_E_BAD_REQUEST, "last_s" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"last_s\":86401}", JPROF_E_BAD_REQUEST, "last_s" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"last_s\":\"60s\"}", JPROF_E_BAD_REQUEST, "last_s" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"last_s\":1.5}", JPROF_E_BAD_REQUEST, "last_s" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"from_ms\":0}", JPROF_E_BAD_REQUEST, "from_ms" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"from_ms\":1000}", JPROF_E_BAD_REQUEST, "from_ms" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"from_ms\":-86400001}", JPROF_E_BAD_REQUEST, "from_ms" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"from_ms\":-1000,\"to_ms\":1}", JPROF_E_BAD_REQUEST, "to_ms" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"from_ms\":-1000,\"to_ms\":-1000}", JPROF_E_BAD_REQUEST, "before" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"from_ms\":-1000,\"to_ms\":-2000}", JPROF_E_BAD_REQUEST, "before" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"to_ms\":-1000}", JPROF_E_BAD_REQUEST, "from_ms" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"last_s\":10,\"from_ms\":-1000}", JPROF_E_BAD_REQUEST, "exclusive" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"pid\":0}", JPROF_E_BAD_REQUEST, "pid" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"pid\":\"1\"}", JPROF_E_BAD_REQUEST, "pid" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"comm\":\"\"}", JPROF_E_BAD_REQUEST, "comm" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"unit\":\"\"}", JPROF_E_BAD_REQUEST, "unit" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"cgroup\":7}", JPROF_E_BAD_REQUEST, "cgroup" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"group_by\":\"host\"}", JPROF_E_BAD_REQUEST, "group_by" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"format\":\"Pprof\"}", JPROF_E_BAD_REQUEST, "format" },
		{ "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"last_s\":5,\"last_s\":6}", JPROF_E_BAD_REQUEST, "duplicate" },
	};
	char longcomm[200];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_error(cases[i].line, cases[i].code, true, 5, cases[i].needle);
	snprintf(longcomm, sizeof(longcomm), "{\"v\":1,\"id\":5,\"cmd\":\"profile\",\"comm\":\"%0100d\"}", 0);
	expect_error(longcomm, JPROF_E_BAD_REQUEST, true, 5, "comm");
}
END_TEST

START_TEST(test_cmd_names)
{
	ck_assert_str_eq(jprof_cmd_name(JPROF_CMD_HELLO), "hello");
	ck_assert_str_eq(jprof_cmd_name(JPROF_CMD_CANCEL), "cancel");
	ck_assert_ptr_null(jprof_cmd_name((enum jprof_cmd)0));
	ck_assert_ptr_null(jprof_cmd_name((enum jprof_cmd)99));
	ck_assert_int_eq(jprof_cmd_from_name("record"), JPROF_CMD_RECORD);
	ck_assert_int_eq(jprof_cmd_from_name("nope"), -ENOENT);
}
END_TEST

static Suite *proto_suite(void)
{
	Suite *s = suite_create("proto");
	TCase *tc = tcase_create("codec");

	tcase_add_test(tc, test_round_trip_hello);
	tcase_add_test(tc, test_round_trip_status);
	tcase_add_test(tc, test_round_trip_record);
	tcase_add_test(tc, test_record_event);
	tcase_add_test(tc, test_round_trip_cancel);
	tcase_add_test(tc, test_record_defaults);
	tcase_add_test(tc, test_bad_json);
	tcase_add_test(tc, test_embedded_nul);
	tcase_add_test(tc, test_missing_members);
	tcase_add_test(tc, test_version);
	tcase_add_test(tc, test_unknown_command);
	tcase_add_test(tc, test_unknown_field);
	tcase_add_test(tc, test_duplicate_member);
	tcase_add_test(tc, test_wrong_types);
	tcase_add_test(tc, test_out_of_range);
	tcase_add_test(tc, test_huge_ids);
	tcase_add_test(tc, test_pid_all);
	tcase_add_test(tc, test_line_too_long);
	tcase_add_test(tc, test_error_line);
	tcase_add_test(tc, test_response_success);
	tcase_add_test(tc, test_response_garbage);
	tcase_add_test(tc, test_base64_vectors);
	tcase_add_test(tc, test_base64_round_trip);
	tcase_add_test(tc, test_base64_invalid);
	tcase_add_test(tc, test_cmd_names);
	tcase_add_test(tc, test_profile_request);
	tcase_add_test(tc, test_profile_strict);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(proto_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
