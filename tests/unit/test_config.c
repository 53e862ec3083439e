#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
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
				   "host_max_memory = 3M\n",
				   &c, err, sizeof(err)), 0);
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
	ck_assert_uint_eq(c.set, (1u << CONFIG_NKEYS) - 1);
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
	assert_error_at("rate = -1\n", 1, "rate wants");
	assert_error_at("rate = 19hz\n", 1, "rate wants");
	assert_error_at("rate =\n", 1, "rate wants");
	assert_error_at("rate = 99999999999999999999\n", 1, "rate wants");
	assert_error_at("max_sessions = 0\n", 1, "max_sessions wants 1..100000");
	assert_error_at("max_clients = 100001\n", 1, "max_clients wants");
	assert_error_at("log_level = loud\n", 1, "log_level wants");
	assert_error_at("socket = relative.sock\n", 1, "socket wants an absolute path");
	assert_error_at("socket = /run/"
			"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
			"aaaaaaaaaa\n",
			1, "socket wants");
	assert_error_at("group = \"jprof\"\n", 1, "group wants a group name");
	assert_error_at("group = two words\n", 1, "group wants");
	assert_error_at("http = 127.0.0.1 9464\n", 1, "http wants");
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

	ck_assert_int_eq(load_text("rate = 99\ngroup = ops\nmax_clients = 9\n", &file, err, sizeof(err)), 0);
	config_defaults(&cli);
	cli.set = 0;
	ck_assert_int_eq(config_set(&cli, CONFIG_RATE, "0", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&cli, CONFIG_SOCKET, "/tmp/t.sock", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&cli, CONFIG_GROUP, "", err, sizeof(err)), 0);
	config_override(&file, &cli);
	ck_assert_uint_eq(file.rate_hz, 0);           /* flag wins */
	ck_assert_str_eq(file.socket, "/tmp/t.sock");  /* flag over default */
	ck_assert_str_eq(file.group, "");              /* an empty flag still wins */
	ck_assert_uint_eq(file.max_clients, 9);        /* file kept where no flag */
	ck_assert_int_eq(config_set(&cli, CONFIG_MAX_SESSIONS, "x", err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "max_sessions wants 1..100000, not \"x\"");
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
