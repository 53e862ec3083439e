#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "netaddr.h"
#include "jprof_proto.h"
#include "log.h"

static const char *const key_names[CONFIG_NKEYS] = {
	[CONFIG_SOCKET] = "socket",
	[CONFIG_GROUP] = "group",
	[CONFIG_RATE] = "rate",
	[CONFIG_MAX_SESSIONS] = "max_sessions",
	[CONFIG_MAX_CLIENTS] = "max_clients",
	[CONFIG_LOG_LEVEL] = "log_level",
	[CONFIG_HTTP] = "http",
	[CONFIG_AGENT] = "agent",
	[CONFIG_HOST_BUCKET] = "host_bucket",
	[CONFIG_HOST_RETENTION] = "host_retention",
	[CONFIG_HOST_MAX_MEMORY] = "host_max_memory",
	[CONFIG_HTTP_TOKEN_FILE] = "http_token_file",
	[CONFIG_HTTP_SOCKET] = "http_socket",
	[CONFIG_MAX_CLIENTS_PER_UID] = "max_clients_per_uid",
	[CONFIG_MAX_AGENTS_PER_UID] = "max_agents_per_uid",
	[CONFIG_MAX_SESSIONS_PER_UID] = "max_sessions_per_uid",
	[CONFIG_MAX_PERF_EVENTS_PER_UID] = "max_perf_events_per_uid",
	[CONFIG_MAX_OUTPUT_PER_UID] = "max_output_per_uid",
	[CONFIG_UNWIND] = "unwind",
	[CONFIG_UNWIND_MAX_MEMORY] = "unwind_max_memory",
	[CONFIG_LINES] = "lines",
	[CONFIG_LINES_MAX_MEMORY] = "lines_max_memory",
	[CONFIG_SYMBOLS_MAX_MEMORY] = "symbols_max_memory",
	[CONFIG_DEBUG_ROOT] = "debug_root",
	[CONFIG_START_GATE_MS] = "start_gate_ms",
	[CONFIG_REPORT_DIR] = "report_dir",
	[CONFIG_UNWIND_COLD_S] = "unwind_cold_s",
	[CONFIG_UNWIND_CACHE_DIR] = "unwind_cache_dir",
	[CONFIG_UNWIND_CACHE_MAX_BYTES] = "unwind_cache_max_bytes",
};

/* The unwind tables' default: RAM/512, 12M..128M. The binaries one busy
 * host samples within a minute (gcc's cc1 479k rows, two libjvm 191k and
 * 231k, cmake, postgres, python, perl, nginx and their libraries: 2.2M rows,
 * 27 MB) did not fit the old fixed 12M; on a 24 GiB host this gives 48M,
 * 4M rows (the kernel's array: 64 MiB). */
unsigned long long config_unwind_memory(const struct config *c)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t m = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 512 : 0;

	if (c->unwind_max_memory)
		return c->unwind_max_memory;
	if (m < (12ull << 20))
		m = 12ull << 20;
	if (m > (128ull << 20))
		m = 128ull << 20;
	return m & ~((1ull << 20) - 1);
}

void config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->socket, sizeof(c->socket), "%s", JPROF_DEFAULT_SOCKET);
	snprintf(c->group, sizeof(c->group), "jprof");
	c->rate_hz = 19;
	c->max_sessions = 64;
	c->max_clients = 1024;
	c->log_level = LOG_LVL_INFO;
	snprintf(c->agent, sizeof(c->agent), "%s", JPROF_AGENT_PATH);
	c->host_bucket_s = 10;
	c->host_retention_s = 600;
	c->host_max_memory = 64ull << 20;
	c->max_clients_per_uid = 64;
	c->max_agents_per_uid = 64;
	c->max_sessions_per_uid = 8;
	c->max_perf_events_per_uid = 4096;
	c->max_output_per_uid = 64ull << 20;
	c->lines = true;
	c->lines_max_memory = 512ull << 20;
	c->symbols_max_memory = 1ull << 30;
	snprintf(c->debug_root, sizeof(c->debug_root), "/usr/lib/debug");
	c->start_gate_ms = 2000;
	c->unwind_cold_s = 30;
	snprintf(c->unwind_cache_dir, sizeof(c->unwind_cache_dir), "/var/cache/jprofd/unwind");
	c->unwind_cache_max_bytes = 256ull << 20;
}

const char *config_key_name(enum config_key k)
{
	return (unsigned)k < CONFIG_NKEYS ? key_names[k] : NULL;
}

int config_key_lookup(const char *name)
{
	for (int k = 0; k < CONFIG_NKEYS; k++)
		if (strcmp(name, key_names[k]) == 0)
			return k;
	return -ENOENT;
}

int config_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	unsigned long v;
	char *end;

	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/* Bytes with an optional K, M or G suffix (powers of 1024). */
static int parse_bytes(const char *s, unsigned long long min, unsigned long long max,
		       unsigned long long *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end == 'K')
		shift = 10;
	else if (*end == 'M')
		shift = 20;
	else if (*end == 'G')
		shift = 30;
	if (shift)
		end++;
	if (*end || v > (max >> shift) || (v << shift) < min)
		return -EINVAL;
	*out = v << shift;
	return 0;
}

/* Group names as useradd accepts them; rules out spaces and quotes, which
 * here would only be typos. */
static bool valid_group(const char *s)
{
	if (strlen(s) > 32)
		return false;
	for (const char *p = s; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("_.-", *p))
			return false;
	return true;
}

static bool has_space(const char *s)
{
	for (; *s; s++)
		if (isspace((unsigned char)*s))
			return true;
	return false;
}

/* The unsigned quota keys: where each is kept and its range. */
static unsigned *quota_field(struct config *c, enum config_key k, unsigned *max)
{
	*max = k == CONFIG_MAX_PERF_EVENTS_PER_UID ? 1000000 : 100000;
	switch (k) {
	case CONFIG_MAX_CLIENTS_PER_UID: return &c->max_clients_per_uid;
	case CONFIG_MAX_AGENTS_PER_UID: return &c->max_agents_per_uid;
	case CONFIG_MAX_SESSIONS_PER_UID: return &c->max_sessions_per_uid;
	case CONFIG_MAX_PERF_EVENTS_PER_UID: return &c->max_perf_events_per_uid;
	default: return NULL;
	}
}

int config_set(struct config *c, enum config_key k, const char *v, char *err, size_t errlen)
{
	unsigned *field, max;
	int lvl;

	switch (k) {
	case CONFIG_SOCKET:
		if (v[0] != '/' || strlen(v) >= sizeof(c->socket) || has_space(v)) {
			snprintf(err, errlen, "socket wants an absolute path of at most %zu bytes, not \"%s\"",
				 sizeof(c->socket) - 1, v);
			return -EINVAL;
		}
		snprintf(c->socket, sizeof(c->socket), "%s", v);
		break;
	case CONFIG_GROUP:
		if (!valid_group(v)) {
			snprintf(err, errlen, "group wants a group name (or nothing for none), not \"%s\"", v);
			return -EINVAL;
		}
		snprintf(c->group, sizeof(c->group), "%s", v);
		break;
	case CONFIG_RATE:
		if (config_parse_uint(v, 0, 10000, &c->rate_hz) < 0) {
			snprintf(err, errlen, "rate wants 0..10000 Hz (0 = off), not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_MAX_SESSIONS:
	case CONFIG_MAX_CLIENTS:
		if (config_parse_uint(v, 1, 100000, k == CONFIG_MAX_SESSIONS ? &c->max_sessions : &c->max_clients) < 0) {
			snprintf(err, errlen, "%s wants 1..100000, not \"%s\"", key_names[k], v);
			return -EINVAL;
		}
		break;
	case CONFIG_LOG_LEVEL:
		lvl = log_level_parse(v);
		if (lvl < 0) {
			snprintf(err, errlen, "log_level wants err, warning, notice, info or debug, not \"%s\"", v);
			return -EINVAL;
		}
		c->log_level = lvl;
		break;
	case CONFIG_HTTP: {
		struct sockaddr_storage ss;
		socklen_t slen;
		bool loopback;

		if (strlen(v) >= sizeof(c->http) ||
		    (v[0] && netaddr_parse(v, &ss, &slen, &loopback) < 0)) {
			snprintf(err, errlen, "http wants ADDR:PORT with a numeric address, such as "
				 "127.0.0.1:9464, [::1]:9464 or :9464 (loopback), or nothing for off; not \"%s\"", v);
			return -EINVAL;
		}
		snprintf(c->http, sizeof(c->http), "%s", v);
		break;
	}
	case CONFIG_AGENT:
		if (v[0] != '/' || strlen(v) >= sizeof(c->agent) || has_space(v)) {
			snprintf(err, errlen, "agent wants an absolute path of at most %zu bytes, not \"%s\"",
				 sizeof(c->agent) - 1, v);
			return -EINVAL;
		}
		snprintf(c->agent, sizeof(c->agent), "%s", v);
		break;
	case CONFIG_HOST_BUCKET:
		if (config_parse_uint(v, 1, 3600, &c->host_bucket_s) < 0) {
			snprintf(err, errlen, "host_bucket wants 1..3600 seconds, not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_HOST_RETENTION:
		if (config_parse_uint(v, 1, 7 * 86400, &c->host_retention_s) < 0) {
			snprintf(err, errlen, "host_retention wants 1..604800 seconds, not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_HOST_MAX_MEMORY:
		if (parse_bytes(v, 1ull << 20, 1ull << 40, &c->host_max_memory) < 0) {
			snprintf(err, errlen, "host_max_memory wants 1M..1024G (bytes, or K/M/G), not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_UNWIND:
		if (strcmp(v, "cfi") != 0 && strcmp(v, "frame-pointers") != 0) {
			snprintf(err, errlen, "unwind wants cfi (.eh_frame tables, the default) or "
				 "frame-pointers, not \"%s\"", v);
			return -EINVAL;
		}
		c->unwind_fp_only = strcmp(v, "frame-pointers") == 0;
		break;
	case CONFIG_UNWIND_MAX_MEMORY:
		if (strcmp(v, "auto") == 0) {
			c->unwind_max_memory = 0;
			break;
		}
		if (parse_bytes(v, 1ull << 20, 4ull << 30, &c->unwind_max_memory) < 0) {
			snprintf(err, errlen, "unwind_max_memory wants auto or 1M..4G (bytes, or K/M/G), "
				 "not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_LINES:
		if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
			snprintf(err, errlen, "lines wants on or off, not \"%s\"", v);
			return -EINVAL;
		}
		c->lines = strcmp(v, "on") == 0;
		break;
	case CONFIG_LINES_MAX_MEMORY:
		if (parse_bytes(v, 1ull << 20, 64ull << 30, &c->lines_max_memory) < 0) {
			snprintf(err, errlen, "lines_max_memory wants 1M..64G (bytes, or K/M/G), not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_SYMBOLS_MAX_MEMORY:
		if (parse_bytes(v, 4ull << 20, 64ull << 30, &c->symbols_max_memory) < 0) {
			snprintf(err, errlen, "symbols_max_memory wants 4M..64G (bytes, or K/M/G), not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_DEBUG_ROOT:
		if (v[0] != '/' || strlen(v) >= sizeof(c->debug_root) || has_space(v)) {
			snprintf(err, errlen, "debug_root wants an absolute path, not \"%s\"", v);
			return -EINVAL;
		}
		snprintf(c->debug_root, sizeof(c->debug_root), "%s", v);
		break;
	case CONFIG_UNWIND_COLD_S:
		if (config_parse_uint(v, 1, 86400, &c->unwind_cold_s) < 0) {
			snprintf(err, errlen, "unwind_cold_s wants 1..86400, not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_UNWIND_CACHE_DIR:
		/* "off" (or nothing): no cache. */
		if (strcmp(v, "off") == 0)
			v = "";
		if ((v[0] && v[0] != '/') || strlen(v) >= sizeof(c->unwind_cache_dir) || has_space(v)) {
			snprintf(err, errlen, "unwind_cache_dir wants an absolute path or off, not \"%s\"",
				 v);
			return -EINVAL;
		}
		snprintf(c->unwind_cache_dir, sizeof(c->unwind_cache_dir), "%s", v);
		break;
	case CONFIG_UNWIND_CACHE_MAX_BYTES:
		if (parse_bytes(v, 1ull << 20, 64ull << 30, &c->unwind_cache_max_bytes) < 0) {
			snprintf(err, errlen, "unwind_cache_max_bytes wants 1M..64G (bytes, or K/M/G), "
				 "not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_START_GATE_MS:
		if (config_parse_uint(v, 1, 60000, &c->start_gate_ms) < 0) {
			snprintf(err, errlen, "start_gate_ms wants 1..60000, not \"%s\"", v);
			return -EINVAL;
		}
		break;
	case CONFIG_REPORT_DIR:
		if ((v[0] && v[0] != '/') || strlen(v) >= sizeof(c->report_dir) || has_space(v)) {
			snprintf(err, errlen, "report_dir wants an absolute path (or nothing for off), "
				 "not \"%s\"", v);
			return -EINVAL;
		}
		snprintf(c->report_dir, sizeof(c->report_dir), "%s", v);
		break;
	case CONFIG_HTTP_TOKEN_FILE:
	case CONFIG_HTTP_SOCKET: {
		/* Optional absolute paths: empty means none (the token) or off. */
		bool sock = k == CONFIG_HTTP_SOCKET;
		char *dst = sock ? c->http_socket : c->http_token_file;
		size_t size = sock ? sizeof(c->http_socket) : sizeof(c->http_token_file);

		if ((v[0] && v[0] != '/') || strlen(v) >= size || has_space(v)) {
			snprintf(err, errlen, "%s wants an absolute path of at most %zu bytes (or nothing "
				 "for %s), not \"%s\"", key_names[k], size - 1, sock ? "off" : "none", v);
			return -EINVAL;
		}
		snprintf(dst, size, "%s", v);
		break;
	}
	case CONFIG_MAX_CLIENTS_PER_UID:
	case CONFIG_MAX_AGENTS_PER_UID:
	case CONFIG_MAX_SESSIONS_PER_UID:
	case CONFIG_MAX_PERF_EVENTS_PER_UID:
		field = quota_field(c, k, &max);
		if (config_parse_uint(v, 1, max, field) < 0) {
			snprintf(err, errlen, "%s wants 1..%u, not \"%s\"", key_names[k], max, v);
			return -EINVAL;
		}
		break;
	case CONFIG_MAX_OUTPUT_PER_UID:
		if (parse_bytes(v, 64ull << 10, 16ull << 30, &c->max_output_per_uid) < 0) {
			snprintf(err, errlen, "max_output_per_uid wants 64K..16G (bytes, or K/M/G), not \"%s\"", v);
			return -EINVAL;
		}
		break;
	default:
		snprintf(err, errlen, "no such key");
		return -EINVAL;
	}
	c->set |= 1u << k;
	return 0;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int config_load(struct config *c, const char *path, bool must_exist, char *err, size_t errlen)
{
	char msg[CONFIG_ERR_MAX], *line = NULL;
	struct config tmp = *c;
	unsigned seen = 0, lineno = 0;
	size_t cap = 0;
	struct stat st;
	ssize_t len;
	FILE *f;
	int r = 0;

	f = fopen(path, "re");
	if (!f) {
		r = -errno;
		if (r == -ENOENT && !must_exist)
			return 0;
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	/* fopen() opens a directory; reading it would only say "I/O error". */
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		r = -EISDIR;
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		goto out;
	}
	while ((len = getline(&line, &cap, f)) >= 0) {
		char *s, *eq, *key, *val;
		int k;

		lineno++;
		if (len && line[len - 1] == '\n')
			line[--len] = '\0';
		if (len > CONFIG_LINE_MAX) {
			snprintf(err, errlen, "%s:%u: line longer than %d bytes", path, lineno, CONFIG_LINE_MAX);
			r = -EINVAL;
			goto out;
		}
		if (memchr(line, '\0', (size_t)len)) {
			snprintf(err, errlen, "%s:%u: NUL byte in line", path, lineno);
			r = -EINVAL;
			goto out;
		}
		s = trim(line);
		if (!*s || *s == '#')
			continue;
		eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%u: expected \"key = value\", got \"%.60s\"", path, lineno, s);
			r = -EINVAL;
			goto out;
		}
		*eq = '\0';
		key = trim(s);
		val = trim(eq + 1);
		k = config_key_lookup(key);
		if (k < 0) {
			snprintf(err, errlen, "%s:%u: unknown key \"%.60s\"", path, lineno, key);
			r = -EINVAL;
			goto out;
		}
		if (seen & (1u << k)) {
			snprintf(err, errlen, "%s:%u: duplicate key \"%s\"", path, lineno, key);
			r = -EINVAL;
			goto out;
		}
		seen |= 1u << k;
		if (config_set(&tmp, (enum config_key)k, val, msg, sizeof(msg)) < 0) {
			snprintf(err, errlen, "%s:%u: %s", path, lineno, msg);
			r = -EINVAL;
			goto out;
		}
		tmp.line[k] = lineno;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		r = -EIO;
		goto out;
	}
	*c = tmp;
out:
	free(line);
	fclose(f);
	return r;
}

/* Bytes with the largest suffix that divides them. */
static void format_bytes(unsigned long long v, char *buf, size_t len)
{
	if (v && v % (1ull << 30) == 0)
		snprintf(buf, len, "%lluG", v >> 30);
	else if (v && v % (1ull << 20) == 0)
		snprintf(buf, len, "%lluM", v >> 20);
	else if (v && v % (1ull << 10) == 0)
		snprintf(buf, len, "%lluK", v >> 10);
	else
		snprintf(buf, len, "%llu", v);
}

void config_format(const struct config *c, enum config_key k, char *buf, size_t len)
{
	static const char *const levels[] = { [LOG_LVL_ERR] = "err", [LOG_LVL_WARNING] = "warning",
		[LOG_LVL_NOTICE] = "notice", [LOG_LVL_INFO] = "info", [LOG_LVL_DEBUG] = "debug" };

	switch (k) {
	case CONFIG_SOCKET: snprintf(buf, len, "%s", c->socket); break;
	case CONFIG_GROUP: snprintf(buf, len, "%s", c->group); break;
	case CONFIG_RATE: snprintf(buf, len, "%u", c->rate_hz); break;
	case CONFIG_MAX_SESSIONS: snprintf(buf, len, "%u", c->max_sessions); break;
	case CONFIG_MAX_CLIENTS: snprintf(buf, len, "%u", c->max_clients); break;
	case CONFIG_LOG_LEVEL:
		snprintf(buf, len, "%s", c->log_level >= LOG_LVL_ERR && c->log_level <= LOG_LVL_DEBUG ?
			 levels[c->log_level] : "?");
		break;
	case CONFIG_HTTP: snprintf(buf, len, "%s", c->http); break;
	case CONFIG_AGENT: snprintf(buf, len, "%s", c->agent); break;
	case CONFIG_HOST_BUCKET: snprintf(buf, len, "%u", c->host_bucket_s); break;
	case CONFIG_HOST_RETENTION: snprintf(buf, len, "%u", c->host_retention_s); break;
	case CONFIG_HOST_MAX_MEMORY: format_bytes(c->host_max_memory, buf, len); break;
	case CONFIG_HTTP_TOKEN_FILE: snprintf(buf, len, "%s", c->http_token_file); break;
	case CONFIG_HTTP_SOCKET: snprintf(buf, len, "%s", c->http_socket); break;
	case CONFIG_MAX_CLIENTS_PER_UID: snprintf(buf, len, "%u", c->max_clients_per_uid); break;
	case CONFIG_MAX_AGENTS_PER_UID: snprintf(buf, len, "%u", c->max_agents_per_uid); break;
	case CONFIG_MAX_SESSIONS_PER_UID: snprintf(buf, len, "%u", c->max_sessions_per_uid); break;
	case CONFIG_MAX_PERF_EVENTS_PER_UID:
		snprintf(buf, len, "%u", c->max_perf_events_per_uid);
		break;
	case CONFIG_MAX_OUTPUT_PER_UID: format_bytes(c->max_output_per_uid, buf, len); break;
	case CONFIG_UNWIND: snprintf(buf, len, "%s", c->unwind_fp_only ? "frame-pointers" : "cfi"); break;
	case CONFIG_UNWIND_MAX_MEMORY:
		if (c->unwind_max_memory)
			format_bytes(c->unwind_max_memory, buf, len);
		else
			snprintf(buf, len, "auto");
		break;
	case CONFIG_LINES: snprintf(buf, len, "%s", c->lines ? "on" : "off"); break;
	case CONFIG_LINES_MAX_MEMORY: format_bytes(c->lines_max_memory, buf, len); break;
	case CONFIG_SYMBOLS_MAX_MEMORY: format_bytes(c->symbols_max_memory, buf, len); break;
	case CONFIG_DEBUG_ROOT: snprintf(buf, len, "%s", c->debug_root); break;
	case CONFIG_REPORT_DIR: snprintf(buf, len, "%s", c->report_dir); break;
	case CONFIG_START_GATE_MS: snprintf(buf, len, "%u", c->start_gate_ms); break;
	case CONFIG_UNWIND_COLD_S: snprintf(buf, len, "%u", c->unwind_cold_s); break;
	case CONFIG_UNWIND_CACHE_DIR:
		snprintf(buf, len, "%s", c->unwind_cache_dir[0] ? c->unwind_cache_dir : "off");
		break;
	case CONFIG_UNWIND_CACHE_MAX_BYTES: format_bytes(c->unwind_cache_max_bytes, buf, len); break;
	default: snprintf(buf, len, "?"); break;
	}
}

void config_override(struct config *dst, const struct config *src)
{
	if (src->set & (1u << CONFIG_SOCKET))
		memcpy(dst->socket, src->socket, sizeof(dst->socket));
	if (src->set & (1u << CONFIG_GROUP))
		memcpy(dst->group, src->group, sizeof(dst->group));
	if (src->set & (1u << CONFIG_RATE))
		dst->rate_hz = src->rate_hz;
	if (src->set & (1u << CONFIG_MAX_SESSIONS))
		dst->max_sessions = src->max_sessions;
	if (src->set & (1u << CONFIG_MAX_CLIENTS))
		dst->max_clients = src->max_clients;
	if (src->set & (1u << CONFIG_LOG_LEVEL))
		dst->log_level = src->log_level;
	if (src->set & (1u << CONFIG_HTTP))
		memcpy(dst->http, src->http, sizeof(dst->http));
	if (src->set & (1u << CONFIG_AGENT))
		memcpy(dst->agent, src->agent, sizeof(dst->agent));
	if (src->set & (1u << CONFIG_HOST_BUCKET))
		dst->host_bucket_s = src->host_bucket_s;
	if (src->set & (1u << CONFIG_HOST_RETENTION))
		dst->host_retention_s = src->host_retention_s;
	if (src->set & (1u << CONFIG_HOST_MAX_MEMORY))
		dst->host_max_memory = src->host_max_memory;
	if (src->set & (1u << CONFIG_HTTP_TOKEN_FILE))
		memcpy(dst->http_token_file, src->http_token_file, sizeof(dst->http_token_file));
	if (src->set & (1u << CONFIG_HTTP_SOCKET))
		memcpy(dst->http_socket, src->http_socket, sizeof(dst->http_socket));
	if (src->set & (1u << CONFIG_MAX_CLIENTS_PER_UID))
		dst->max_clients_per_uid = src->max_clients_per_uid;
	if (src->set & (1u << CONFIG_MAX_AGENTS_PER_UID))
		dst->max_agents_per_uid = src->max_agents_per_uid;
	if (src->set & (1u << CONFIG_MAX_SESSIONS_PER_UID))
		dst->max_sessions_per_uid = src->max_sessions_per_uid;
	if (src->set & (1u << CONFIG_MAX_PERF_EVENTS_PER_UID))
		dst->max_perf_events_per_uid = src->max_perf_events_per_uid;
	if (src->set & (1u << CONFIG_MAX_OUTPUT_PER_UID))
		dst->max_output_per_uid = src->max_output_per_uid;
	if (src->set & (1u << CONFIG_UNWIND))
		dst->unwind_fp_only = src->unwind_fp_only;
	if (src->set & (1u << CONFIG_UNWIND_MAX_MEMORY))
		dst->unwind_max_memory = src->unwind_max_memory;
	if (src->set & (1u << CONFIG_LINES))
		dst->lines = src->lines;
	if (src->set & (1u << CONFIG_LINES_MAX_MEMORY))
		dst->lines_max_memory = src->lines_max_memory;
	if (src->set & (1u << CONFIG_SYMBOLS_MAX_MEMORY))
		dst->symbols_max_memory = src->symbols_max_memory;
	if (src->set & (1u << CONFIG_DEBUG_ROOT))
		memcpy(dst->debug_root, src->debug_root, sizeof(dst->debug_root));
	if (src->set & (1u << CONFIG_START_GATE_MS))
		dst->start_gate_ms = src->start_gate_ms;
	if (src->set & (1u << CONFIG_REPORT_DIR))
		memcpy(dst->report_dir, src->report_dir, sizeof(dst->report_dir));
	if (src->set & (1u << CONFIG_UNWIND_COLD_S))
		dst->unwind_cold_s = src->unwind_cold_s;
	if (src->set & (1u << CONFIG_UNWIND_CACHE_DIR))
		memcpy(dst->unwind_cache_dir, src->unwind_cache_dir, sizeof(dst->unwind_cache_dir));
	if (src->set & (1u << CONFIG_UNWIND_CACHE_MAX_BYTES))
		dst->unwind_cache_max_bytes = src->unwind_cache_max_bytes;
	for (int k = 0; k < CONFIG_NKEYS; k++)
		if (src->set & (1u << k))
			dst->line[k] = src->line[k];
	dst->set |= src->set;
}

int config_check(const struct config *c, const char *path, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t slen;
	bool loopback = true;

	if (c->http_socket[0] && strcmp(c->http_socket, c->socket) == 0) {
		if (c->line[CONFIG_HTTP_SOCKET])
			snprintf(err, errlen, "%s:%u: http_socket = %s is the control socket's path; give "
				 "the HTTP listener a path of its own (such as /run/jprofd/http.sock)", path,
				 c->line[CONFIG_HTTP_SOCKET], c->http_socket);
		else
			snprintf(err, errlen, "--http-socket %s is the control socket's path; give the HTTP "
				 "listener a path of its own (such as /run/jprofd/http.sock)", c->http_socket);
		return -EINVAL;
	}
	if (!c->http[0] || c->http_token_file[0])
		return 0;
	if (netaddr_parse(c->http, &ss, &slen, &loopback) < 0 || loopback)
		return 0;  /* a bad address was refused by config_set already */
	if (c->line[CONFIG_HTTP])
		snprintf(err, errlen, "%s:%u: http = %s is not a loopback address, and anyone who can "
			 "reach it could read every process's profile: set http_token_file to a file "
			 "holding a bearer token (or listen on 127.0.0.1)", path, c->line[CONFIG_HTTP], c->http);
	else
		snprintf(err, errlen, "--http %s is not a loopback address, and anyone who can reach it "
			 "could read every process's profile: add --http-token-file PATH naming a file "
			 "holding a bearer token (or listen on 127.0.0.1)", c->http);
	return -EINVAL;
}
