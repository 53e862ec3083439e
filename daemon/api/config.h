/* jprofd's configuration: defaults, /etc/jprofd/jprofd.conf ("key = value"
 * lines, whole-line "#" comments) and command-line overrides, all validated
 * by the same per-key parser so a value means the same in both places. */
#ifndef JPROF_CONFIG_H
#define JPROF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#define CONFIG_DEFAULT_PATH "/etc/jprofd/jprofd.conf"
#define CONFIG_LINE_MAX 1024         /* bytes per line, newline excluded */
#define CONFIG_ERR_MAX 512           /* a buffer this big holds every message */

enum config_key {
	CONFIG_SOCKET,
	CONFIG_GROUP,
	CONFIG_RATE,
	CONFIG_MAX_SESSIONS,
	CONFIG_MAX_CLIENTS,
	CONFIG_LOG_LEVEL,
	CONFIG_HTTP,
	CONFIG_AGENT,
	CONFIG_HOST_BUCKET,
	CONFIG_HOST_RETENTION,
	CONFIG_HOST_MAX_MEMORY,
	CONFIG_HTTP_TOKEN_FILE,
	CONFIG_HTTP_SOCKET,
	/* per-uid quotas (uid 0 has none) */
	CONFIG_MAX_CLIENTS_PER_UID,
	CONFIG_MAX_AGENTS_PER_UID,
	CONFIG_MAX_SESSIONS_PER_UID,
	CONFIG_MAX_PERF_EVENTS_PER_UID,
	CONFIG_MAX_OUTPUT_PER_UID,
	CONFIG_UNWIND,
	CONFIG_UNWIND_MAX_MEMORY,
	CONFIG_LINES,
	CONFIG_LINES_MAX_MEMORY,
	CONFIG_SYMBOLS_MAX_MEMORY,
	CONFIG_DEBUG_ROOT,
	CONFIG_START_GATE_MS,
	CONFIG_REPORT_DIR,
	CONFIG_UNWIND_COLD_S,
	CONFIG_UNWIND_CACHE_DIR,
	CONFIG_UNWIND_CACHE_MAX_BYTES,
	CONFIG_NKEYS,
};

struct config {
	char socket[108];            /* sun_path size */
	char group[64];              /* "" = no authorized group */
	unsigned rate_hz;            /* host sampling, 0 = off */
	unsigned max_sessions;
	unsigned max_clients;
	int log_level;               /* enum log_level */
	char http[256];              /* HTTP listen address (http.h), "" = off */
	char agent[256];             /* JVMTI agent loaded into JVMs (absolute path) */
	unsigned host_bucket_s;      /* continuous profile: window length */
	unsigned host_retention_s;   /* how long windows are kept */
	unsigned long long host_max_memory;  /* bytes for all windows */
	char http_token_file[256];   /* bearer token for HTTP, "" = none (absolute path) */
	char http_socket[108];       /* HTTP on a Unix socket (sun_path size), "" = off */
	unsigned max_clients_per_uid;        /* connections */
	unsigned max_agents_per_uid;         /* JVM agent connections */
	unsigned max_sessions_per_uid;       /* recordings */
	unsigned max_perf_events_per_uid;    /* per-thread events over all its recordings */
	unsigned long long max_output_per_uid;  /* bytes of unread replies over all its connections */
	bool unwind_fp_only;         /* unwind = frame-pointers: no CFI tables */
	unsigned long long unwind_max_memory;  /* bytes of CFI table rows (BPF array); 0: auto
						* (config_unwind_memory) */
	bool lines;                  /* file:line from DWARF in pprof (default on) */
	unsigned long long lines_max_memory;   /* debug sections held open for lines */
	unsigned long long symbols_max_memory; /* ELF symbol tables held (symbols.h) */
	char debug_root[256];        /* separate debug files (absolute path) */
	unsigned start_gate_ms;      /* longest wait of a `record --pid` for its process to be ready */
	char report_dir[256];        /* each host window as pprof here (absolute path), "" = off */
	unsigned unwind_cold_s;      /* a table in use gives its rows up after so long unsampled */
	char unwind_cache_dir[256];  /* built unwind tables kept here (absolute path), "" = off */
	unsigned long long unwind_cache_max_bytes;  /* its size, least recently used removed */
	unsigned set;                /* bit (1 << key) for every key given */
	unsigned line[CONFIG_NKEYS]; /* file line a key came from; 0 = default or flag */
};

/* A decimal number in min..max (digits only, no sign or space): 0 or -EINVAL. */
int config_parse_uint(const char *s, unsigned min, unsigned max, unsigned *out);

/* Fills every key with its built-in default; set = 0. */
void config_defaults(struct config *c);

/* The key's name in the file ("max_sessions"), or NULL. */
const char *config_key_name(enum config_key k);
/* The key for a name, or -ENOENT. */
int config_key_lookup(const char *name);

/* Validates value for key k and stores it, marking the key set. On failure
 * returns -EINVAL and writes a message (without a location) to err. */
int config_set(struct config *c, enum config_key k, const char *value, char *err, size_t errlen);

/* Reads path into c (on top of what c holds). A missing file is fine when
 * !must_exist (returns 0, c untouched). Every error is -errno with a
 * message "PATH:LINE: what" (or "PATH: what") in err: unknown key, bad
 * value, duplicate key, line without "=", overlong line, unreadable file. */
int config_load(struct config *c, const char *path, bool must_exist, char *err, size_t errlen);

/* The value of key k as the file would spell it. */
void config_format(const struct config *c, enum config_key k, char *buf, size_t len);

/* Copies into dst every key set in src (command-line flags over the file). */
void config_override(struct config *dst, const struct config *src);

/* Rules across keys, checked on the final configuration (file, then flags):
 * an http address that is not loopback needs http_token_file; http_socket
 * is not the control socket's path. -EINVAL with a message naming the file
 * and line (path) or the flag in err. */
int config_check(const struct config *c, const char *path, char *err, size_t errlen);

/* unwind_max_memory, or when it is auto (0, the default) a 512th of the
 * host's memory within 12M..128M. */
unsigned long long config_unwind_memory(const struct config *c);

#endif
