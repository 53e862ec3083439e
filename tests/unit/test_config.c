#include <arpa/inet.h>
#include <check.h>
#include <sys/stat.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "http.h"
#include "netaddr.h"
#include "jprof_proto.h"
#include "log.h"

static char tmpdir[] = "/tmp/jprof-test-config-XXXXXX";
static char path[256];

static void setup(void)
{
	strcpy(tmpdir, "/tmp/jprof-test-config-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(path, sizeof(path), "%s/jprofd.conf", tmpdir);
}

static void teardown(void)
{
	unlink(path);
	rmdir(tmpdir);
}

static void write_file(const char *text, size_t len)
{
	FILE *f = fopen(path, "we");

	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

/* Loads text over the defaults; returns config_load's result, err in err. */
static int load_text(const char *text, struct config *c, char *err, size_t errlen)
{
	write_file(text, strlen(text));
	config_defaults(c);
	err[0] = '\0';
	return config_load(c, path, true, err, errlen);
}

/* The message names the file and the line, and says what is wrong. */
static void assert_error_at(const char *text, unsigned line, const char *what)
{
	struct config c, before;
	char err[CONFIG_ERR_MAX], loc[300];

	config_defaults(&before);
	ck_assert_int_eq(load_text(text, &c, err, sizeof(err)), -EINVAL);
	snprintf(loc, sizeof(loc), "%s:%u: ", path, line);
	ck_assert_msg(strncmp(err, loc, strlen(loc)) == 0, "\"%s\" does not start with \"%s\"", err, loc);
	ck_assert_msg(strstr(err, what), "\"%s\" does not mention \"%s\"", err, what);
	/* A bad file changes nothing. */
	ck_assert_mem_eq(&c, &before, sizeof(c));
}

START_TEST(test_defaults)
{
	struct config c;

	config_defaults(&c);
	ck_assert_str_eq(c.socket, JPROF_DEFAULT_SOCKET);
	ck_assert_str_eq(c.group, "jprof");
	ck_assert_uint_eq(c.rate_hz, 19);
	ck_assert_uint_eq(c.max_sessions, 64);
	ck_assert_uint_eq(c.max_clients, 1024);
	ck_assert_int_eq(c.log_level, LOG_LVL_INFO);
	ck_assert_str_eq(c.http, "");
	ck_assert_uint_eq(c.max_clients_per_uid, 64);
	ck_assert_uint_eq(c.max_agents_per_uid, 64);
	ck_assert_uint_eq(c.max_sessions_per_uid, 8);
	ck_assert_uint_eq(c.max_perf_events_per_uid, 4096);
	ck_assert_uint_eq(c.max_output_per_uid, 64ull << 20);
	ck_assert_uint_eq(c.unwind_cold_s, 30);
	/* auto: a 512th of the host's memory, whole MiB within 12M..128M */
	ck_assert_uint_eq(c.unwind_max_memory, 0);
	ck_assert_uint_ge(config_unwind_memory(&c), 12ull << 20);
	ck_assert_uint_le(config_unwind_memory(&c), 128ull << 20);
	ck_assert_uint_eq(config_unwind_memory(&c) % (1ull << 20), 0);
	c.unwind_max_memory = 5ull << 20;
	ck_assert_uint_eq(config_unwind_memory(&c), 5ull << 20);
	ck_assert_uint_eq(c.set, 0);
}
END_TEST

START_TEST(test_every_key)
{
	struct config c;
	char err[CONFIG_ERR_MAX];

	ck_assert_int_eq(load_text("socket = /run/x/y.sock\n"
				   "group = profilers\n"
				   "rate = 99\n"
				   "max_sessions = 7\n"
				   "max_clients = 12\n"
				   "log_level = debug\n"
				   "http = 127.0.0.1:9464\n"
				   "agent = /opt/jprofd/libjprofagent.so\n"
				   "host_bucket = 5\n"
				   "host_retention = 120\n"
				   "host_max_memory = 3M\n"
				   "http_token_file = /etc/jprofd/http.token\n"
				   "http_socket = /run/x/http.sock\n"
				   "max_clients_per_uid = 3\n"
				   "max_agents_per_uid = 4\n"
				   "max_sessions_per_uid = 5\n"
				   "max_perf_events_per_uid = 600\n"
				   "max_output_per_uid = 512K\n"
				   "unwind = frame-pointers\n"
				   "unwind_max_memory = 2M\n"
				   "lines = off\n"
				   "lines_max_memory = 64M\n"
				   "symbols_max_memory = 96M\n"
				   "debug_root = /srv/debug\n"
				   "start_gate_ms = 500\n"
				   "report_dir = /var/lib/jprofd/reports\n"
				   "unwind_cold_s = 7\n"
				   "unwind_cache_dir = off\n"
				   "unwind_cache_max_bytes = 32M\n",
				   &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.unwind_cache_dir, "");
	ck_assert_uint_eq(c.unwind_cache_max_bytes, 32ull << 20);
	ck_assert_uint_eq(c.start_gate_ms, 500);
	ck_assert_str_eq(c.report_dir, "/var/lib/jprofd/reports");
	ck_assert_uint_eq(c.unwind_cold_s, 7);
	ck_assert(!c.lines);
	ck_assert_uint_eq(c.lines_max_memory, 64ull << 20);
	ck_assert_uint_eq(c.symbols_max_memory, 96ull << 20);
	ck_assert_str_eq(c.debug_root, "/srv/debug");
	ck_assert(c.unwind_fp_only);
	ck_assert_uint_eq(c.unwind_max_memory, 2ull << 20);
	ck_assert_uint_eq(c.max_clients_per_uid, 3);
	ck_assert_uint_eq(c.max_agents_per_uid, 4);
	ck_assert_uint_eq(c.max_sessions_per_uid, 5);
	ck_assert_uint_eq(c.max_perf_events_per_uid, 600);
	ck_assert_uint_eq(c.max_output_per_uid, 512ull << 10);
	ck_assert_uint_eq(c.host_bucket_s, 5);
	ck_assert_uint_eq(c.host_retention_s, 120);
	ck_assert_uint_eq(c.host_max_memory, 3ull << 20);
	ck_assert_str_eq(c.socket, "/run/x/y.sock");
	ck_assert_str_eq(c.group, "profilers");
	ck_assert_uint_eq(c.rate_hz, 99);
	ck_assert_uint_eq(c.max_sessions, 7);
	ck_assert_uint_eq(c.max_clients, 12);
	ck_assert_int_eq(c.log_level, LOG_LVL_DEBUG);
	ck_assert_str_eq(c.http, "127.0.0.1:9464");
	ck_assert_str_eq(c.agent, "/opt/jprofd/libjprofagent.so");
	ck_assert_str_eq(c.http_token_file, "/etc/jprofd/http.token");
	ck_assert_str_eq(c.http_socket, "/run/x/http.sock");
	ck_assert_uint_eq(c.set, (1u << CONFIG_NKEYS) - 1);
	ck_assert_uint_eq(c.line[CONFIG_HTTP], 7);
	ck_assert_uint_eq(c.line[CONFIG_HTTP_TOKEN_FILE], 12);
}
END_TEST

START_TEST(test_comments_blanks_spacing)
{
	struct config c;
	char err[CONFIG_ERR_MAX];

	ck_assert_int_eq(load_text("# jprofd configuration\n"
				   "\n"
				   "   \t\n"
				   "  # indented comment = with an equals sign\n"
				   "rate=0\n"
				   "\tgroup   =   \n"
				   "log_level = warning   \r\n"
				   "max_clients = 5", /* no final newline */
				   &c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.rate_hz, 0);
	ck_assert_str_eq(c.group, "");     /* empty: no authorized group */
	ck_assert_int_eq(c.log_level, LOG_LVL_WARNING);
	ck_assert_uint_eq(c.max_clients, 5);
	ck_assert_str_eq(c.socket, JPROF_DEFAULT_SOCKET);  /* untouched keys keep defaults */
	ck_assert_uint_eq(c.set, (1u << CONFIG_RATE) | (1u << CONFIG_GROUP) |
				 (1u << CONFIG_LOG_LEVEL) | (1u << CONFIG_MAX_CLIENTS));
}
END_TEST

START_TEST(test_shipped_file_is_all_defaults)
{
	/* packaging/jprofd.conf has every key commented out at its default, so
	 * loading it changes nothing, and each default it shows is the real one. */
	const char *src = getenv("JPROF_SOURCE_DIR");
	char shipped[512], line[1100], err[CONFIG_ERR_MAX];
	struct config c, d;
	unsigned shown = 0;
	FILE *f;

	ck_assert_ptr_nonnull(src);
	snprintf(shipped, sizeof(shipped), "%s/packaging/jprofd.conf", src);
	config_defaults(&c);
	config_defaults(&d);
	ck_assert_msg(config_load(&c, shipped, true, err, sizeof(err)) == 0, "%s", err);
	ck_assert_mem_eq(&c, &d, sizeof(c));
	f = fopen(shipped, "re");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		char key[64], val[512], want[512];
		int k, n = sscanf(line, "#%63[a-z_] = %511s", key, val);

		if (n < 1 || (k = config_key_lookup(key)) < 0)
			continue;
		if (n == 1)
			val[0] = '\0';
		config_format(&d, (enum config_key)k, want, sizeof(want));
		if (k == CONFIG_AGENT) {
			/* The default follows the install prefix; the file shows the
			 * package's. Both end in the same place. */
			static const char tail[] = "/jprofd/libjprofagent.so";
			size_t vl = strlen(val), tl = sizeof(tail) - 1;

			ck_assert_msg(vl > tl && strcmp(val + vl - tl, tail) == 0 &&
				      strcmp(want + strlen(want) - tl, tail) == 0,
				      "shipped conf shows agent = \"%s\"", val);
		} else {
			ck_assert_msg(strcmp(val, want) == 0,
				      "shipped conf shows %s = \"%s\", default is \"%s\"", key, val, want);
		}
		shown |= 1u << k;
	}
	fclose(f);
	ck_assert_uint_eq(shown, (1u << CONFIG_NKEYS) - 1);
}
END_TEST

START_TEST(test_unknown_key)
{
	assert_error_at("rate = 19\n\nsokcet = /run/a.sock\n", 3, "unknown key \"sokcet\"");
}
END_TEST

START_TEST(test_bad_values)
{
	assert_error_at("rate = fast\n", 1, "rate wants 0..10000");
	assert_error_at("host_bucket = 0\n", 1, "host_bucket wants");
	assert_error_at("host_retention = 1w\n", 1, "host_retention wants");
	assert_error_at("host_max_memory = 1000K\n", 1, "host_max_memory wants");
	assert_error_at("host_max_memory = 2T\n", 1, "host_max_memory wants");
	assert_error_at("host_max_memory = 99999999999999999999G\n", 1, "host_max_memory wants");
	assert_error_at("# x\nrate = 10001\n", 2, "rate wants");
	assert_error_at("unwind = dwarf\n", 1, "unwind wants cfi");
	assert_error_at("lines = yes\n", 1, "lines wants on or off");
	assert_error_at("lines_max_memory = 10K\n", 1, "lines_max_memory wants");
	assert_error_at("debug_root = relative/dir\n", 1, "debug_root wants an absolute path");
	assert_error_at("unwind_max_memory = 100K\n", 1, "unwind_max_memory wants");
	assert_error_at("unwind_cold_s = 0\n", 1, "unwind_cold_s wants");
	assert_error_at("rate = -1\n", 1, "rate wants");
	assert_error_at("rate = 19hz\n", 1, "rate wants");
	assert_error_at("rate =\n", 1, "rate wants");
	assert_error_at("rate = 99999999999999999999\n", 1, "rate wants");
	assert_error_at("max_sessions = 0\n", 1, "max_sessions wants 1..100000");
	assert_error_at("max_clients = 100001\n", 1, "max_clients wants");
	assert_error_at("max_clients_per_uid = 0\n", 1, "max_clients_per_uid wants 1..100000");
	assert_error_at("max_agents_per_uid = -1\n", 1, "max_agents_per_uid wants 1..100000");
	assert_error_at("max_sessions_per_uid = 8x\n", 1, "max_sessions_per_uid wants");
	assert_error_at("max_perf_events_per_uid = 1000001\n", 1,
			"max_perf_events_per_uid wants 1..1000000");
	assert_error_at("max_output_per_uid = 1K\n", 1, "max_output_per_uid wants 64K..16G");
	assert_error_at("max_output_per_uid = 17G\n", 1, "max_output_per_uid wants");
	assert_error_at("log_level = loud\n", 1, "log_level wants");
	assert_error_at("socket = relative.sock\n", 1, "socket wants an absolute path");
	assert_error_at("socket = /run/"
			"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
			"aaaaaaaaaa\n",
			1, "socket wants");
	assert_error_at("group = \"jprof\"\n", 1, "group wants a group name");
	assert_error_at("group = two words\n", 1, "group wants");
	assert_error_at("http = 127.0.0.1 9464\n", 1, "http wants");
	assert_error_at("http = localhost:9464\n", 1, "http wants ADDR:PORT with a numeric address");
	assert_error_at("http = 127.0.0.1:65536\n", 1, "http wants");
	assert_error_at("http = ::1:9464\n", 1, "http wants");
	assert_error_at("http = [::1]9464\n", 1, "http wants");
	assert_error_at("http = 127.0.0.1:\n", 1, "http wants");
	assert_error_at("http_token_file = token\n", 1, "http_token_file wants an absolute path");
	assert_error_at("http_socket = http.sock\n", 1, "http_socket wants an absolute path");
	assert_error_at("just some words\n", 1, "expected \"key = value\"");
	assert_error_at("= 5\n", 1, "unknown key \"\"");
}
END_TEST

START_TEST(test_duplicate_key)
{
	assert_error_at("rate = 19\nsocket = /run/a.sock\nrate = 99\n", 3, "duplicate key \"rate\"");
}
END_TEST

START_TEST(test_overlong_line)
{
	char text[CONFIG_LINE_MAX + 64];

	/* A comment of exactly the limit is fine, one byte more is not. */
	memset(text, ' ', sizeof(text));
	text[0] = '#';
	text[CONFIG_LINE_MAX] = '\n';
	text[CONFIG_LINE_MAX + 1] = '\0';
	{
		struct config c;
		char err[CONFIG_ERR_MAX];

		ck_assert_msg(load_text(text, &c, err, sizeof(err)) == 0, "%s", err);
	}
	snprintf(text, sizeof(text), "rate = 5\n#%*s\n", CONFIG_LINE_MAX, "");
	assert_error_at(text, 2, "line longer than");
}
END_TEST

START_TEST(test_nul_byte)
{
	struct config c;
	char err[CONFIG_ERR_MAX];

	write_file("rate = 5\nrate\0 = 7\n", 20);
	config_defaults(&c);
	ck_assert_int_eq(config_load(&c, path, true, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, ":2: NUL byte"), "%s", err);
}
END_TEST

START_TEST(test_missing_file)
{
	struct config c, d;
	char err[CONFIG_ERR_MAX] = "", want[400];

	config_defaults(&c);
	config_defaults(&d);
	/* The default file may be absent: built-in defaults. */
	ck_assert_int_eq(config_load(&c, path, false, err, sizeof(err)), 0);
	ck_assert_mem_eq(&c, &d, sizeof(c));
	/* A file the user named must exist. */
	ck_assert_int_eq(config_load(&c, path, true, err, sizeof(err)), -ENOENT);
	snprintf(want, sizeof(want), "%s: No such file or directory", path);
	ck_assert_str_eq(err, want);
	/* Other errors are errors even for the default file. */
	ck_assert_int_eq(config_load(&c, tmpdir, false, err, sizeof(err)), -EISDIR);
	ck_assert_msg(strstr(err, tmpdir) != NULL, "%s", err);
}
END_TEST

START_TEST(test_flags_override_file)
{
	struct config file, cli;
	char err[CONFIG_ERR_MAX];

	ck_assert_int_eq(load_text("rate = 99\ngroup = ops\nmax_clients = 9\n"
				   "max_clients_per_uid = 7\nmax_output_per_uid = 1M\n",
				   &file, err, sizeof(err)), 0);
	config_defaults(&cli);
	cli.set = 0;
	ck_assert_int_eq(config_set(&cli, CONFIG_RATE, "0", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&cli, CONFIG_MAX_PERF_EVENTS_PER_UID, "16", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&cli, CONFIG_MAX_OUTPUT_PER_UID, "2M", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&cli, CONFIG_SOCKET, "/tmp/t.sock", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&cli, CONFIG_GROUP, "", err, sizeof(err)), 0);
	config_override(&file, &cli);
	ck_assert_uint_eq(file.rate_hz, 0);           /* flag wins */
	ck_assert_str_eq(file.socket, "/tmp/t.sock");  /* flag over default */
	ck_assert_str_eq(file.group, "");              /* an empty flag still wins */
	ck_assert_uint_eq(file.max_clients, 9);        /* file kept where no flag */
	ck_assert_uint_eq(file.max_clients_per_uid, 7);
	ck_assert_uint_eq(file.max_perf_events_per_uid, 16);
	ck_assert_uint_eq(file.max_output_per_uid, 2ull << 20);
	ck_assert_int_eq(config_set(&cli, CONFIG_MAX_SESSIONS, "x", err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "max_sessions wants 1..100000, not \"x\"");
}
END_TEST

START_TEST(test_http_addresses)
{
	static const struct { const char *s; int family; unsigned port; bool loopback; } ok[] = {
		{ "127.0.0.1:9464", AF_INET, 9464, true },
		{ ":9464", AF_INET, 9464, true },         /* loopback by default */
		{ "9464", AF_INET, 9464, true },
		{ "127.1.2.3:80", AF_INET, 80, true },
		{ "0.0.0.0:9464", AF_INET, 9464, false },
		{ "192.0.2.7:1", AF_INET, 1, false },
		{ "[::1]:9464", AF_INET6, 9464, true },
		{ "[::]:9464", AF_INET6, 9464, false },
		{ "[::ffff:127.0.0.1]:9", AF_INET6, 9, true },
		{ "[2001:db8::1]:9464", AF_INET6, 9464, false },
	};
	struct sockaddr_storage ss;
	socklen_t len;
	bool lo;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(netaddr_parse(ok[i].s, &ss, &len, &lo) == 0, "%s", ok[i].s);
		ck_assert_int_eq(ss.ss_family, ok[i].family);
		ck_assert_uint_eq(ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
					((struct sockaddr_in6 *)&ss)->sin6_port), ok[i].port);
		ck_assert_msg(lo == ok[i].loopback, "%s: loopback %d", ok[i].s, lo);
	}
	ck_assert_int_eq(netaddr_parse("[::1]", &ss, &len, &lo), -EINVAL);
	ck_assert_int_eq(netaddr_parse("1.2.3.4:x", &ss, &len, &lo), -EINVAL);
	ck_assert_int_eq(netaddr_parse("", &ss, &len, &lo), -EINVAL);
}
END_TEST

/* A non-loopback listener without a token refuses to start, naming the
 * line it came from, or the flag. */
START_TEST(test_http_needs_token)
{
	struct config c, cli;
	char err[CONFIG_ERR_MAX], want[400];

	ck_assert_int_eq(load_text("rate = 19\nhttp = 0.0.0.0:9464\n", &c, err, sizeof(err)), 0);
	ck_assert_int_eq(config_check(&c, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:2: http = 0.0.0.0:9464 is not a loopback address", path);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
	ck_assert_msg(strstr(err, "http_token_file"), "%s", err);

	/* The token by flag makes it fine. */
	config_defaults(&cli);
	cli.set = 0;
	ck_assert_int_eq(config_set(&cli, CONFIG_HTTP_TOKEN_FILE, "/etc/t", err, sizeof(err)), 0);
	config_override(&c, &cli);
	ck_assert_int_eq(config_check(&c, path, err, sizeof(err)), 0);

	/* The address by flag: the message names the flags. */
	ck_assert_int_eq(load_text("http = 127.0.0.1:1\n", &c, err, sizeof(err)), 0);
	ck_assert_int_eq(config_check(&c, path, err, sizeof(err)), 0);
	config_defaults(&cli);
	cli.set = 0;
	ck_assert_int_eq(config_set(&cli, CONFIG_HTTP, "[::]:9464", err, sizeof(err)), 0);
	config_override(&c, &cli);
	ck_assert_int_eq(config_check(&c, path, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strncmp(err, "--http [::]:9464 is not a loopback address", 41) == 0, "%s", err);
	ck_assert_msg(strstr(err, "--http-token-file PATH"), "%s", err);

	/* Off, or loopback: no token needed. */
	config_defaults(&c);
	ck_assert_int_eq(config_check(&c, path, err, sizeof(err)), 0);

	/* The HTTP socket cannot be the control socket. */
	ck_assert_int_eq(load_text("socket = /run/j/s\nhttp_socket = /run/j/s\n", &c, err, sizeof(err)), 0);
	ck_assert_int_eq(config_check(&c, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:2: http_socket = /run/j/s is the control socket's path", path);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
}
END_TEST

START_TEST(test_http_token_file)
{
	char *tok = NULL, err[CONFIG_ERR_MAX];
	static const char good[] = "s3cr3t-t0ken-0123456789\n";

	write_file(good, strlen(good));
	ck_assert_int_eq(chmod(path, 0600), 0);
	ck_assert_msg(http_token_read(path, &tok, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(tok, "s3cr3t-t0ken-0123456789");
	free(tok);
	/* Readable by others: refused, naming the file. */
	ck_assert_int_eq(chmod(path, 0644), 0);
	ck_assert_int_eq(http_token_read(path, &tok, err, sizeof(err)), -EPERM);
	ck_assert_ptr_null(tok);
	ck_assert_msg(strstr(err, path) && strstr(err, "other users"), "%s", err);
	ck_assert_int_eq(chmod(path, 0640), 0);
	write_file("short\n", 6);
	ck_assert_int_eq(http_token_read(path, &tok, err, sizeof(err)), -EINVAL);
	write_file("two words in a token file\n", 26);
	ck_assert_int_eq(http_token_read(path, &tok, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(http_token_read(tmpdir, &tok, err, sizeof(err)), -EINVAL);  /* a directory */
	ck_assert_int_lt(http_token_read("/nonexistent/token", &tok, err, sizeof(err)), 0);
}
END_TEST

START_TEST(test_token_compare)
{
	ck_assert(http_token_equal("abcdefghijklmnop", "abcdefghijklmnop"));
	ck_assert(!http_token_equal("abcdefghijklmnop", "abcdefghijklmnoq"));
	ck_assert(!http_token_equal("abcdefghijklmnop", "abcdefghijklmno"));
	ck_assert(!http_token_equal("abcdefghijklmnop", "abcdefghijklmnopq"));
	ck_assert(!http_token_equal("abcdefghijklmnop", ""));
	ck_assert(!http_token_equal("abcdefghijklmnop", "Abcdefghijklmnop"));
}
END_TEST

START_TEST(test_key_names)
{
	for (int k = 0; k < CONFIG_NKEYS; k++)
		ck_assert_int_eq(config_key_lookup(config_key_name((enum config_key)k)), k);
	ck_assert_int_eq(config_key_lookup("Rate"), -ENOENT);
	ck_assert_ptr_null(config_key_name(CONFIG_NKEYS));
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_every_key);
	tcase_add_test(tc, test_comments_blanks_spacing);
	tcase_add_test(tc, test_shipped_file_is_all_defaults);
	tcase_add_test(tc, test_unknown_key);
	tcase_add_test(tc, test_bad_values);
	tcase_add_test(tc, test_duplicate_key);
	tcase_add_test(tc, test_overlong_line);
	tcase_add_test(tc, test_nul_byte);
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_flags_override_file);
	tcase_add_test(tc, test_key_names);
	tcase_add_test(tc, test_http_addresses);
	tcase_add_test(tc, test_http_needs_token);
	tcase_add_test(tc, test_http_token_file);
	tcase_add_test(tc, test_token_compare);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
