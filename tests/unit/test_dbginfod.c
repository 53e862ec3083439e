/* debuginfod lookups: budgets per uid and turns between uids, against a
 * small HTTP server in the test that records what it is asked and has no
 * debug file for anything (404). */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "clock.h"
#include "dbginfod.h"

#define MAX_SEEN 512

/* The server: build-ids in the order they were asked for. */
static struct {
	int lfd;
	pthread_t thread;
	pthread_mutex_t mu;
	bool go;                    /* accept only once the test says so */
	char seen[MAX_SEEN][129];
	size_t nseen;
	char cache[64];
} srv = { .lfd = -1, .mu = PTHREAD_MUTEX_INITIALIZER };

static void *server_main(void *arg)
{
	(void)arg;
	for (;;) {
		char req[2048], *p;
		size_t len = 0;
		ssize_t n;
		bool go;
		int fd;

		pthread_mutex_lock(&srv.mu);
		go = srv.go;
		pthread_mutex_unlock(&srv.mu);
		if (!go) {
			usleep(1000);
			continue;
		}
		fd = accept4(srv.lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			return NULL;  /* the listening socket was shut down */
		while (len < sizeof(req) - 1 && (n = read(fd, req + len, sizeof(req) - 1 - len)) > 0) {
			len += (size_t)n;
			req[len] = '\0';
			if (strstr(req, "\r\n\r\n"))
				break;
		}
		req[len] = '\0';
		p = strstr(req, "/buildid/");
		pthread_mutex_lock(&srv.mu);
		if (p && srv.nseen < MAX_SEEN) {
			size_t k = strcspn(p + 9, "/ ");

			if (k > 128)
				k = 128;
			memcpy(srv.seen[srv.nseen], p + 9, k);
			srv.seen[srv.nseen++][k] = '\0';
		}
		pthread_mutex_unlock(&srv.mu);
		dprintf(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
		close(fd);
	}
}

static void setup(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	char url[64];

	srv.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(srv.lfd, 0);
	ck_assert_int_eq(bind(srv.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(srv.lfd, 64), 0);
	ck_assert_int_eq(getsockname(srv.lfd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(sa.sin_port));
	setenv("DEBUGINFOD_URLS", url, 1);
	snprintf(srv.cache, sizeof(srv.cache), "/tmp/jprof-test-dbgcache-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(srv.cache));
	setenv("DEBUGINFOD_CACHE_PATH", srv.cache, 1);
	srv.nseen = 0;
	srv.go = false;
	ck_assert_int_eq(pthread_create(&srv.thread, NULL, server_main, NULL), 0);
}

static void teardown(void)
{
	char cmd[128];

	pthread_mutex_lock(&srv.mu);
	srv.go = true;
	pthread_mutex_unlock(&srv.mu);
	shutdown(srv.lfd, SHUT_RDWR);
	pthread_join(srv.thread, NULL);
	close(srv.lfd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", srv.cache);
	ck_assert_int_eq(system(cmd), 0);
}

static void make_id(uint8_t id[20], uint32_t owner, uint32_t i)
{
	memset(id, 0xab, 20);
	memcpy(id, &owner, sizeof(owner));
	memcpy(id + 4, &i, sizeof(i));
}

static void hex(const uint8_t *b, size_t len, char *out)
{
	for (size_t i = 0; i < len; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void wait_seen(size_t n)
{
	uint64_t deadline = clock_mono_ns() + 60ull * 1000000000ull;
	size_t got;

	do {
		pthread_mutex_lock(&srv.mu);
		got = srv.nseen;
		pthread_mutex_unlock(&srv.mu);
		if (got >= n)
			return;
		usleep(10000);
	} while (clock_mono_ns() < deadline);
	ck_abort_msg("the server saw %zu lookups, want %zu", got, n);
}

START_TEST(test_budget_per_uid)
{
	struct dbginfod *d;
	struct dbginfod_stats st;
	uint8_t id[20];
	unsigned yes = 0, no = 0;

	ck_assert_int_eq(dbginfod_new(&d), 0);
	/* One user maps many stripped files: its burst is asked, the rest not yet. */
	for (uint32_t i = 0; i < DBGINFOD_UID_BURST + 72; i++) {
		make_id(id, 1000, i);
		if (dbginfod_want(d, id, sizeof(id), 1000))
			yes++;
		else
			no++;
	}
	ck_assert_uint_eq(yes, DBGINFOD_UID_BURST);
	ck_assert_uint_eq(no, 72);
	/* A build-id asked already costs nothing and says so. */
	make_id(id, 1000, 0);
	ck_assert_int_eq(dbginfod_want(d, id, sizeof(id), 1000), 1);
	/* Another user, and root, are not held back by it. */
	make_id(id, 2000, 0);
	ck_assert_int_eq(dbginfod_want(d, id, sizeof(id), 2000), 1);
	for (uint32_t i = 0; i < 300; i++) {
		make_id(id, 0, i);
		ck_assert_int_eq(dbginfod_want(d, id, sizeof(id), 0), 1);
	}
	dbginfod_get_stats(d, &st);
	ck_assert_uint_eq(st.requested, DBGINFOD_UID_BURST + 1 + 300);
	ck_assert_uint_eq(st.refused, 72);
	dbginfod_free(d);
}
END_TEST

/* Uid 1000 asks for 40, then uid 2000 for 3: the worker takes them in
 * turns, so uid 2000's three are among the first lookups, not after 40. */
START_TEST(test_uids_take_turns)
{
	struct dbginfod *d;
	uint8_t id[20];
	char want[3][41];
	size_t found = 0;

	ck_assert_int_eq(dbginfod_new(&d), 0);
	for (uint32_t i = 0; i < 40; i++) {
		make_id(id, 1000, i);
		ck_assert_int_eq(dbginfod_want(d, id, sizeof(id), 1000), 1);
	}
	for (uint32_t i = 0; i < 3; i++) {
		make_id(id, 2000, i);
		hex(id, sizeof(id), want[i]);
		ck_assert_int_eq(dbginfod_want(d, id, sizeof(id), 2000), 1);
	}
	pthread_mutex_lock(&srv.mu);
	srv.go = true;
	pthread_mutex_unlock(&srv.mu);
	wait_seen(8);
	pthread_mutex_lock(&srv.mu);
	/* The first lookup may have started before uid 2000 asked: then turns
	 * go 2000, 1000, 2000, 1000, 2000. Either way, within 8. */
	for (size_t i = 0; i < 8; i++)
		for (size_t k = 0; k < 3; k++)
			if (strcmp(srv.seen[i], want[k]) == 0)
				found++;
	pthread_mutex_unlock(&srv.mu);
	ck_assert_uint_eq(found, 3);
	dbginfod_free(d);
}
END_TEST

static Suite *dbginfod_suite(void)
{
	Suite *s = suite_create("dbginfod");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_budget_per_uid);
	tcase_add_test(tc, test_uids_take_turns);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return jprof_check_run(dbginfod_suite());
}
