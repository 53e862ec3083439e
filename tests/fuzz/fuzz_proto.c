/* libFuzzer harness: the control socket's request parser,
 * jprof_request_parse(), which the daemon runs on every line any local user
 * sends (daemon/api/requests.c). Input: one request line.
 *
 * Beyond "no crash", it checks what the daemon does with the result: the
 * error line built from a failure (requests_error -> jprof_error_line) is a
 * response the client can read back with the same code and message, and a
 * request that parses re-encodes to a line that parses to the same request
 * (jprofctl and the daemon share the codec). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "jprof_proto.h"

static void check_error_line(const struct jprof_request *req, const struct jprof_error *err)
{
	struct jprof_response resp;
	char *line;

	fuzz_check(err->code != NULL, "a parse failure without an error code");
	line = jprof_error_line(req->id, req->has_id, err->code, err->message);
	fuzz_check(line != NULL, "no error line");
	fuzz_check(jprof_response_parse(line, strlen(line), &resp) == 0,
		   "the daemon's error line is not a valid response: %s", line);
	fuzz_check(!resp.ok && strcmp(resp.err_code, err->code) == 0 &&
			   strcmp(resp.err_message, err->message) == 0,
		   "error line does not carry the error: %s", line);
	fuzz_check(resp.has_id == req->has_id && (!req->has_id || resp.id == req->id),
		   "error line does not echo the id: %s", line);
	jprof_response_free(&resp);
	free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct jprof_request req, again;
	struct jprof_error err;
	char *line;

	if (jprof_request_parse((const char *)data, size, &req, &err) < 0) {
		check_error_line(&req, &err);
		return 0;
	}
	fuzz_check(jprof_cmd_name(req.cmd) != NULL, "parsed an unknown command %d", (int)req.cmd);
	line = jprof_request_encode(&req);
	fuzz_check(line != NULL, "a parsed request does not encode");
	fuzz_check(jprof_request_parse(line, strlen(line), &again, &err) == 0,
		   "re-encoded request does not parse (%s): %s", err.message, line);
	/* Both were zeroed by the parser before being filled. */
	fuzz_check(memcmp(&req, &again, sizeof(req)) == 0, "round trip changed the request: %s",
		   line);
	free(line);
	return 0;
}
