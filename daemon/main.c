/* jprofd: argv, configuration, sd_listen_fds / sd_notify, signals, and wiring of modules. */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "agentlink.h"
#include "clock.h"
#include "config.h"
#include "control.h"
#include "hostview.h"
#include "http.h"
#include "jprof_proto.h"
#include "lines.h"
#include "log.h"
#include "loop.h"
#include "pipeline.h"
#include "pprof.h"
#include "quota.h"
#include "render.h"
#include "report.h"
#include "sampler.h"
#include "session.h"
#include "symbols.h"

struct options {
	struct config cli;           /* flags given; cli.set says which */
	const char *config_path;
	bool config_given;
	bool check_config;
};

/* How long a pprof rendering may wait for source lines the line worker has
 * not answered yet. Renderings run on the render worker, not the loop
 * (record/render.c), so the first scrape of a window carries the lines of
 * files the worker can read in this time; recordings also ask for them as
 * their profile grows (record/session.c). */
#define MAIN_LINES_BUDGET_MS 2000

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: jprofd [OPTIONS]\n"
		"\n"
		"System-wide eBPF profiler daemon. Runs as root in the foreground, samples\n"
		"every process with eBPF and serves profiles over a JSON Unix socket\n"
		"(see jprofd(8), jprofctl(1) and docs/protocol.md).\n"
		"\n"
		"Options (each overrides the same key of the configuration file):\n"
		"  -c, --config PATH      configuration file (default %s;\n"
		"                         a missing default file means built-in defaults)\n"
		"  -t, --check-config     check the configuration, print the result and exit\n"
		"  -s, --socket PATH      listen on PATH (default %s; ignored when\n"
		"                         started by systemd socket activation)\n"
		"  -g, --group NAME       members of NAME may record any process (default jprof;\n"
		"                         \"\" for none); root always may\n"
		"  -r, --rate HZ          always-on host sampling rate, 0 disables (default 19)\n"
		"  -a, --agent PATH       JVMTI agent loaded into JVMs (default\n"
		"                         " JPROF_AGENT_PATH ")\n"
		"      --host-bucket S    continuous profile window, seconds (default 10)\n"
		"      --host-retention S how long windows are kept, seconds (default 600)\n"
		"      --host-max-memory BYTES  memory for all windows, K/M/G suffix (default 64M)\n"
		"      --unwind MODE      user stacks: cfi (.eh_frame tables, default) or\n"
		"                         frame-pointers\n"
		"      --unwind-max-memory BYTES  memory for CFI tables, K/M/G suffix, or auto\n"
		"                         (default: RAM/512 within 12M..128M)\n"
		"      --unwind-cache-dir DIR|off  built CFI tables kept on disk (default\n"
		"                         /var/cache/jprofd/unwind)\n"
		"      --lines on|off     source file:line of user frames in pprof, from DWARF\n"
		"                         (default on)\n"
		"      --debug-root DIR   separate debug files (.build-id/xx/yyy.debug) (default\n"
		"                         /usr/lib/debug)\n"
		"      --report-dir DIR   write each closed host window as gzipped pprof into DIR\n"
		"                         (owned by root, not group/other-writable; off by default)\n"
		"      --max-sessions N   concurrent recordings (default 64)\n"
		"      --max-clients N    concurrent connections (default 1024)\n"
		"  Per-uid quotas (root has none, and a sixteenth of each total is kept for it):\n"
		"      --max-clients-per-uid N      connections (default 64)\n"
		"      --max-agents-per-uid N       JVM agent connections (default 64)\n"
		"      --max-sessions-per-uid N     recordings (default 8)\n"
		"      --max-perf-events-per-uid N  per-thread perf events (default 4096)\n"
		"      --max-output-per-uid BYTES   unread replies queued, K/M/G suffix (default 64M)\n"
		"      --http ADDR:PORT   serve /metrics and /debug/pprof/profile over HTTP\n"
		"                         (off by default; \":9464\" means 127.0.0.1:9464)\n"
		"      --http-token-file PATH\n"
		"                         bearer token HTTP clients must send; profiles need it\n"
		"                         on every address, and a non-loopback ADDR needs it\n"
		"      --http-socket PATH serve the same over a Unix socket, profiles to root\n"
		"                         and the group without a token (off by default)\n"
		"  -l, --log-level LEVEL  err, warning, notice, info (default) or debug\n"
		"  -h, --help             show this help\n"
		"  -V, --version          show the version\n",
		CONFIG_DEFAULT_PATH, JPROF_DEFAULT_SOCKET);
}

static int parse_args(int argc, char **argv, struct options *o)
{
	enum { OPT_MAX_SESSIONS = 256, OPT_MAX_CLIENTS, OPT_HOST_BUCKET, OPT_HOST_RETENTION,
	       OPT_HOST_MAX_MEMORY, OPT_HTTP, OPT_HTTP_TOKEN_FILE, OPT_HTTP_SOCKET, OPT_UNWIND,
	       OPT_UNWIND_MAX_MEMORY, OPT_LINES, OPT_DEBUG_ROOT, OPT_REPORT_DIR, OPT_UNWIND_CACHE_DIR,
	       /* a per-uid quota flag is OPT_QUOTA + its config key */
	       OPT_QUOTA = 512 };
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, 't' },
		{ "socket", required_argument, NULL, 's' },
		{ "group", required_argument, NULL, 'g' },
		{ "rate", required_argument, NULL, 'r' },
		{ "agent", required_argument, NULL, 'a' },
		{ "max-sessions", required_argument, NULL, OPT_MAX_SESSIONS },
		{ "max-clients", required_argument, NULL, OPT_MAX_CLIENTS },
		{ "host-bucket", required_argument, NULL, OPT_HOST_BUCKET },
		{ "host-retention", required_argument, NULL, OPT_HOST_RETENTION },
		{ "host-max-memory", required_argument, NULL, OPT_HOST_MAX_MEMORY },
		{ "http", required_argument, NULL, OPT_HTTP },
		{ "unwind", required_argument, NULL, OPT_UNWIND },
		{ "unwind-max-memory", required_argument, NULL, OPT_UNWIND_MAX_MEMORY },
		{ "unwind-cache-dir", required_argument, NULL, OPT_UNWIND_CACHE_DIR },
		{ "lines", required_argument, NULL, OPT_LINES },
		{ "debug-root", required_argument, NULL, OPT_DEBUG_ROOT },
		{ "report-dir", required_argument, NULL, OPT_REPORT_DIR },
		{ "http-token-file", required_argument, NULL, OPT_HTTP_TOKEN_FILE },
		{ "http-socket", required_argument, NULL, OPT_HTTP_SOCKET },
		{ "max-clients-per-uid", required_argument, NULL, OPT_QUOTA + CONFIG_MAX_CLIENTS_PER_UID },
		{ "max-agents-per-uid", required_argument, NULL, OPT_QUOTA + CONFIG_MAX_AGENTS_PER_UID },
		{ "max-sessions-per-uid", required_argument, NULL, OPT_QUOTA + CONFIG_MAX_SESSIONS_PER_UID },
		{ "max-perf-events-per-uid", required_argument, NULL,
		  OPT_QUOTA + CONFIG_MAX_PERF_EVENTS_PER_UID },
		{ "max-output-per-uid", required_argument, NULL, OPT_QUOTA + CONFIG_MAX_OUTPUT_PER_UID },
		{ "log-level", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	char err[CONFIG_ERR_MAX];
	int c, k;

	while ((c = getopt_long(argc, argv, "c:ts:g:r:a:l:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->config_path = optarg;
			o->config_given = true;
			continue;
		case 't':
			o->check_config = true;
			continue;
		case 's': k = CONFIG_SOCKET; break;
		case 'g': k = CONFIG_GROUP; break;
		case 'r': k = CONFIG_RATE; break;
		case 'a': k = CONFIG_AGENT; break;
		case OPT_MAX_SESSIONS: k = CONFIG_MAX_SESSIONS; break;
		case OPT_MAX_CLIENTS: k = CONFIG_MAX_CLIENTS; break;
		case OPT_HOST_BUCKET: k = CONFIG_HOST_BUCKET; break;
		case OPT_HOST_RETENTION: k = CONFIG_HOST_RETENTION; break;
		case OPT_HOST_MAX_MEMORY: k = CONFIG_HOST_MAX_MEMORY; break;
		case OPT_HTTP: k = CONFIG_HTTP; break;
		case OPT_UNWIND: k = CONFIG_UNWIND; break;
		case OPT_UNWIND_MAX_MEMORY: k = CONFIG_UNWIND_MAX_MEMORY; break;
		case OPT_UNWIND_CACHE_DIR: k = CONFIG_UNWIND_CACHE_DIR; break;
		case OPT_LINES: k = CONFIG_LINES; break;
		case OPT_DEBUG_ROOT: k = CONFIG_DEBUG_ROOT; break;
		case OPT_REPORT_DIR: k = CONFIG_REPORT_DIR; break;
		case OPT_HTTP_TOKEN_FILE: k = CONFIG_HTTP_TOKEN_FILE; break;
		case OPT_HTTP_SOCKET: k = CONFIG_HTTP_SOCKET; break;
		case 'l': k = CONFIG_LOG_LEVEL; break;
		case OPT_QUOTA + CONFIG_MAX_CLIENTS_PER_UID:
		case OPT_QUOTA + CONFIG_MAX_AGENTS_PER_UID:
		case OPT_QUOTA + CONFIG_MAX_SESSIONS_PER_UID:
		case OPT_QUOTA + CONFIG_MAX_PERF_EVENTS_PER_UID:
		case OPT_QUOTA + CONFIG_MAX_OUTPUT_PER_UID:
			k = c - OPT_QUOTA;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("jprofd %s (protocol %d)\n", JPROF_VERSION, JPROF_PROTO_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		if (config_set(&o->cli, (enum config_key)k, optarg, err, sizeof(err)) < 0) {
			fprintf(stderr, "jprofd: command line: %s\n", err);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "jprofd: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	return -1;
}

/* File, then flags over it. Returns 0, or 1 after saying why not to start. */
static int load_config(const struct options *o, struct config *cfg)
{
	char err[CONFIG_ERR_MAX];

	config_defaults(cfg);
	if (config_load(cfg, o->config_path, o->config_given, err, sizeof(err)) < 0) {
		log_err("%s; not starting", err);
		return 1;
	}
	config_override(cfg, &o->cli);
	if (config_check(cfg, o->config_path, err, sizeof(err)) < 0) {
		log_err("%s; not starting", err);
		return 1;
	}
	if (o->check_config) {
		printf("config %s: ok\n", o->config_path);
		for (int k = 0; k < CONFIG_NKEYS; k++) {
			char v[sizeof(cfg->http)];

			config_format(cfg, (enum config_key)k, v, sizeof(v));
			printf("%s = %s\n", config_key_name((enum config_key)k), v);
		}
	}
	return 0;
}

static void on_signal(struct loop_source *src, int signo, void *arg)
{
	log_notice("received %s, shutting down", strsignal(signo));
	loop_quit(arg);
}

static void on_ring(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	sampler_poll_ring(arg);
}

/* Returns the fd limit the daemon runs with. */
static uint64_t raise_fd_limit(void)
{
	struct rlimit rl;

	/* One perf fd per recorded thread: take the hard limit. */
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 1024;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	return rl.rlim_cur;
}

static void on_log_flush(struct loop_source *src, void *arg)
{
	log_flush_suppressed();
}

/* The per-uid quotas of cfg, and what all uids may hold together. Each
 * per-thread event holds two fds (the event and its BPF link); the fd table
 * is shared out so that events alone cannot fill it: connections, agents
 * and the daemon's own files keep max_clients + agents + 1024 fds. */
static void quota_limits_from(const struct config *cfg, uint64_t nofile, struct quota_limits *q)
{
	uint64_t keep = (uint64_t)cfg->max_clients + AGENTLINK_MAX_AGENTS + 1024;

	*q = (struct quota_limits){
		.per_uid = {
			[QUOTA_CLIENTS] = cfg->max_clients_per_uid,
			[QUOTA_AGENTS] = cfg->max_agents_per_uid,
			[QUOTA_SESSIONS] = cfg->max_sessions_per_uid,
			[QUOTA_PERF_EVENTS] = cfg->max_perf_events_per_uid,
			[QUOTA_OUTPUT] = cfg->max_output_per_uid,
		},
		.total = {
			[QUOTA_CLIENTS] = cfg->max_clients,
			[QUOTA_AGENTS] = AGENTLINK_MAX_AGENTS,
			[QUOTA_SESSIONS] = cfg->max_sessions,
			[QUOTA_PERF_EVENTS] = nofile > 2 * keep ? (nofile - keep) / 2 : nofile / 4,
		},
	};
}

/* Samples of a process without unwind tables are named after they are
 * unwound, often after it has exited: its maps and files are read now. */
static void on_young_process(uint32_t tgid, uint64_t start_ns, void *arg)
{
	symbols_prime(arg, (pid_t)tgid, start_ns);
}

/* Who hears of a process's exec: a recording waiting for it to leave its
 * launcher, and the symbolizer, whose maps of it are of the old image. */
struct exec_listeners {
	struct session_mgr *sessions;
	struct symbols *symbols;
};

static void on_exec(uint32_t tgid, void *arg)
{
	struct exec_listeners *l = arg;

	symbols_note_exec(l->symbols, (pid_t)tgid);
	session_mgr_on_exec(tgid, l->sessions);
}

int main(int argc, char **argv)
{
	struct options o = { .config_path = CONFIG_DEFAULT_PATH };
	struct config cfg;
	struct control_config ccfg = { .group = (gid_t)-1 };
	struct sampler_config scfg = { 0 };
	struct session_limits slim = { 0 };
	struct sampler_callbacks cb;
	struct session_mgr *sessions = NULL;
	struct pipeline *pipeline = NULL;
	struct sampler *sampler = NULL;
	struct symbols *symbols = NULL;
	struct exec_listeners exec_to;
	struct lines *lines = NULL;
	struct render *render = NULL;
	struct hostview *hostview = NULL;
	struct reports *reports = NULL;
	struct control *control = NULL;
	struct agentlink *agents = NULL;
	struct quota_limits qlim;
	struct quota *quota = NULL;
	struct http *http = NULL;
	char *http_token = NULL;
	struct sockaddr_un listen_addr = { 0 };
	struct loop *loop = NULL;
	bool own_socket = false;
	sigset_t mask;
	static const int stop_signals[] = { SIGTERM, SIGINT, SIGHUP };
	int ret = 1, r, nfds;

	/* Blocks of 256 KiB and more (a table build's rows and section data,
	 * megabytes each; rendering buffers) straight from mmap, so that they
	 * go back to the system when freed. glibc's default threshold rises
	 * after the first such free, and later big blocks then came from the
	 * heap and stayed: RSS +15 MB after cc1 ran three times under the host
	 * view, +2 MB with this. */
	mallopt(M_MMAP_THRESHOLD, 256 * 1024);
	config_defaults(&o.cli);
	o.cli.set = 0;
	r = parse_args(argc, argv, &o);
	if (r >= 0)
		return r;
	setvbuf(stderr, NULL, _IOLBF, 0);
	if (load_config(&o, &cfg) != 0)
		return 1;
	if (o.check_config)
		return 0;
	log_set_level((enum log_level)cfg.log_level);
	if (geteuid() != 0) {
		fprintf(stderr, "jprofd: must run as root (it loads BPF programs and opens perf events for any process)\n");
		return 1;
	}
	sampler_setup_logging();
	quota_limits_from(&cfg, raise_fd_limit(), &qlim);
	signal(SIGPIPE, SIG_IGN);
	/* Blocked so that only the loop sees them: the stop signals through
	 * its signal sources, SIGCHLD through pidfds (attach helpers). */
	sigemptyset(&mask);
	for (size_t i = 0; i < sizeof(stop_signals) / sizeof(stop_signals[0]); i++)
		sigaddset(&mask, stop_signals[i]);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);

	if (cfg.group[0]) {
		struct group *g = getgrnam(cfg.group);

		if (g) {
			ccfg.group = g->gr_gid;
			ccfg.group_name = cfg.group;
		} else {
			log_notice("group \"%s\" does not exist; only root may record other users' processes",
				   cfg.group);
		}
	}
	ccfg.max_clients = cfg.max_clients;
	slim.max_sessions = cfg.max_sessions;
	slim.gate_ms = cfg.start_gate_ms;
	scfg.host_rate_hz = cfg.rate_hz;
	scfg.no_unwind = cfg.unwind_fp_only;
	scfg.unwind_rows = (unsigned)(config_unwind_memory(&cfg) / sizeof(struct jp_unwind_row));
	scfg.unwind_cold_s = cfg.unwind_cold_s;
	scfg.unwind_cache_dir = cfg.unwind_cache_dir;
	scfg.unwind_cache_max_bytes = cfg.unwind_cache_max_bytes;

	r = loop_new(&loop);
	if (r < 0)
		goto out;
	r = quota_new(&qlim, &quota);
	if (r < 0)
		goto out;
	ccfg.quota = quota;
	slim.quota = quota;
	log_info("per-uid quotas: %u connections, %u agents, %u recordings, %u perf events, %llu bytes "
		 "of unread replies; perf events in all: %llu (fd limit)", cfg.max_clients_per_uid,
		 cfg.max_agents_per_uid, cfg.max_sessions_per_uid, cfg.max_perf_events_per_uid,
		 cfg.max_output_per_uid, (unsigned long long)qlim.total[QUOTA_PERF_EVENTS]);
	r = loop_add_timer(loop, 1000, 1000, on_log_flush, NULL, NULL);
	if (r < 0)
		goto out;
	symbols = symbols_new(NULL, NULL);
	if (!symbols) {
		log_err("cannot set up symbolization");
		goto out;
	}
	/* Kernel symbols now, before the first client: parsing /proc/kallsyms
	 * takes tens of ms, which the first drain would otherwise spend while
	 * clients wait. */
	symbols_kernel_available(symbols);
	r = symbols_set_debug_root(symbols, cfg.debug_root);
	if (r < 0)
		goto out;
	symbols_set_max_memory(symbols, cfg.symbols_max_memory);
	if (cfg.lines) {
		/* file:line for pprof, read on a worker thread. */
		r = lines_new(NULL, cfg.debug_root, cfg.lines_max_memory, &lines);
		if (r < 0) {
			log_err("cannot start the line-info worker: %s", strerror(-r));
			goto out;
		}
		symbols_set_lines(symbols, lines);
		pprof_set_lines(lines_lookup_cb, lines, MAIN_LINES_BUDGET_MS);
	}
	r = pipeline_new(loop, symbols, NULL, &pipeline);
	if (r < 0)
		goto out;
	r = session_mgr_new(loop, pipeline, &slim, &sessions);
	if (r < 0)
		goto out;
	/* Profiles are rendered on a thread of their own, off the loop. */
	r = render_new(loop, &render);
	if (r < 0) {
		log_err("cannot start the render worker: %s", strerror(-r));
		goto out;
	}
	session_mgr_set_render(sessions, render);
	ccfg.render = render;
	if (cfg.rate_hz) {
		struct hostview_config hcfg = {
			.bucket_s = cfg.host_bucket_s,
			.retention_s = cfg.host_retention_s,
			.max_bytes = (size_t)cfg.host_max_memory,
			.start_ns = clock_mono_ns(),  /* before the sampler starts */
		};

		r = hostview_new(&hcfg, &hostview);
		if (r < 0)
			goto out;
		pipeline_set_host(pipeline, &(struct pipeline_consumer){ hostview_consume, hostview });
		r = pipeline_add_tick(pipeline, hostview_on_tick, hostview);
		if (r < 0)
			goto out;
	}
	exec_to = (struct exec_listeners){ sessions, symbols };
	cb = (struct sampler_callbacks){ .sample = pipeline_on_sample, .sample_arg = pipeline,
					 .new_thread = session_mgr_on_new_thread,
					 .new_thread_arg = sessions,
					 .exec = on_exec, .exec_arg = &exec_to,
					 .young = on_young_process, .young_arg = symbols };
	r = sampler_new(&scfg, &cb, &sampler);
	if (r < 0)
		goto out;
	/* Java frames the BPF walk found in JVMs without an agent. */
	symbols_set_java(symbols, hs_procs_symbolize, sampler_hotspot(sampler));
	session_mgr_set_sampler(sessions, sampler);
	r = pipeline_set_sampler(pipeline, sampler);
	if (r < 0)
		goto out;
	r = loop_add_io(loop, sampler_ring_fd(sampler), EPOLLIN, on_ring, sampler, NULL);
	if (r < 0)
		goto out;
	r = agentlink_new(loop, session_mgr_on_agent, sessions, &agents);
	if (r < 0)
		goto out;
	agentlink_set_quota(agents, quota);
	r = control_new(loop, sessions, sampler, agents, &ccfg, &control);
	if (r < 0)
		goto out;
	control_set_hostview(control, hostview);
	{
		/* Reporters push closed host windows (report.h); the host view's
		 * bucket is their window. */
		struct report_settings rset = { .dir = cfg.report_dir, .period_s = cfg.host_bucket_s,
						.host_rate_hz = cfg.rate_hz };
		char err[CONFIG_ERR_MAX];

		r = reports_new(loop, hostview, render, &rset, &reports, err, sizeof(err));
		if (r < 0) {
			log_err("%s; not starting", err);
			goto out;
		}
	}

	if (cfg.http[0] || cfg.http_socket[0]) {
		struct http_config hcfg = { .listen = cfg.http[0] ? cfg.http : NULL,
					    .socket = cfg.http_socket[0] ? cfg.http_socket : NULL,
					    .group = ccfg.group, .group_name = ccfg.group_name };
		struct http_sources hsrc = { .sampler = sampler, .symbols = symbols, .agents = agents,
					     .hostview = hostview, .sessions = sessions, .control = control,
					     .render = render,
					     .host_rate_hz = cfg.rate_hz };
		char err[CONFIG_ERR_MAX];

		if (cfg.http_token_file[0]) {
			r = http_token_read(cfg.http_token_file, &http_token, err, sizeof(err));
			if (r < 0) {
				log_err("%s; not starting", err);
				goto out;
			}
			hcfg.token = http_token;
		}
		r = http_new(loop, &hcfg, &hsrc, &http);
		if (r < 0)
			goto out;
	}

	nfds = sd_listen_fds(1);
	if (nfds < 0) {
		log_err("sd_listen_fds failed: %s", strerror(-nfds));
		goto out;
	}
	if (nfds > 0) {
		for (int i = 0; i < nfds; i++) {
			int fd = SD_LISTEN_FDS_START + i;

			if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0) {
				log_err("inherited fd %d is not a listening Unix stream socket", fd);
				goto out;
			}
			r = control_add_listener(control, fd);
			if (r < 0)
				goto out;
		}
		log_info("listening on %d socket(s) passed by systemd", nfds);
		{
			socklen_t alen = sizeof(listen_addr);

			/* Agents are told where to connect: the first socket's path. */
			if (getsockname(SD_LISTEN_FDS_START, (struct sockaddr *)&listen_addr, &alen) < 0 ||
			    listen_addr.sun_path[0] != '/')
				snprintf(listen_addr.sun_path, sizeof(listen_addr.sun_path), "%s",
					 JPROF_DEFAULT_SOCKET);
		}
	} else {
		int fd;

		r = control_listen_unix(cfg.socket, &fd);
		if (r < 0) {
			log_err("cannot listen on %s: %s", cfg.socket,
				r == -EEXIST ? "a file that is not a socket is in the way" : strerror(-r));
			goto out;
		}
		own_socket = true;
		snprintf(listen_addr.sun_path, sizeof(listen_addr.sun_path), "%s", cfg.socket);
		r = control_add_listener(control, fd);
		if (r < 0)
			goto out;
	}

	session_mgr_set_jvm(sessions, agents, cfg.agent, listen_addr.sun_path);
	if (access(cfg.agent, R_OK) < 0)
		log_warn("agent %s is not readable (%s): JVM recordings will have native frames only",
			 cfg.agent, strerror(errno));

	for (size_t i = 0; i < sizeof(stop_signals) / sizeof(stop_signals[0]); i++) {
		r = loop_add_signal(loop, stop_signals[i], on_signal, loop, NULL);
		if (r < 0) {
			log_err("cannot set up signal handling: %s", strerror(-r));
			goto out;
		}
	}
	r = loop_enable_watchdog(loop);
	if (r < 0) {
		log_err("cannot set up the systemd watchdog: %s", strerror(-r));
		goto out;
	}
	log_info("jprofd %s ready on %s (host sampling %u Hz)", JPROF_VERSION,
		 nfds > 0 ? "systemd sockets" : cfg.socket, cfg.rate_hz);
	sd_notifyf(0, "READY=1\nSTATUS=Sampling at %u Hz, listening on %s\nMAINPID=%d", cfg.rate_hz,
		   nfds > 0 ? "systemd sockets" : cfg.socket, (int)getpid());

	r = loop_run(loop);
	if (r < 0) {
		log_err("event loop failed: %s", strerror(-r));
		goto out;
	}
	sd_notify(0, "STOPPING=1\nSTATUS=Shutting down");
	ret = 0;
out:
	/* Waiting HTTP profile requests are answered (503) before the modules
	 * they read go. Sessions next: they tell their clients, then the
	 * clients are flushed. */
	http_free(http);
	if (http_token) {
		explicit_bzero(http_token, strlen(http_token));
		free(http_token);
	}
	session_mgr_free(sessions);
	reports_free(reports);  /* cancels its renderings, closes its tap */
	control_free(control);
	agentlink_free(agents);
	/* Every job's requester has cancelled it by now; the running one is
	 * waited for (it may read source lines: lines goes later). */
	render_free(render);
	pipeline_free(pipeline);  /* stops watching the sampler's drain fd */
	sampler_free(sampler);
	hostview_free(hostview);
	pprof_set_lines(NULL, NULL, 0);
	symbols_free(symbols);
	lines_free(lines);
	quota_free(quota);
	loop_free(loop);
	if (own_socket)
		unlink(cfg.socket);
	if (ret == 0)
		log_info("jprofd stopped");
	return ret;
}
