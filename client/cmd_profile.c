/* jprofctl profile: the continuous host profile the daemon keeps, for the
 * last minutes or a range back from now, filtered and grouped. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cmd.h"
#include "ctl.h"
#include "output.h"
#include "run.h"

static void cmd_profile_help(void)
{
	printf("Usage: jprofctl profile [--last TIME | --from AGO [--to AGO]] [filters] [options]\n"
	       "\n"
	       "Write the continuous host profile that jprofd keeps all the time (no new\n"
	       "recording): the last TIME of it, or the range from AGO to AGO before now.\n"
	       "\n"
	       "  -l, --last TIME        how far back: 60s, 5m, 1h or seconds (default 60s,\n"
	       "                         whole seconds up to 24h)\n"
	       "      --from AGO         start of a range, e.g. 10m (ten minutes ago)\n"
	       "      --to AGO           end of the range (default now), e.g. 5m\n"
	       "  -p, --pid PID          only this process (yours, unless you are root or in\n"
	       "                         group jprof; the whole host needs one of those)\n"
	       "  -c, --comm NAME        only processes named NAME\n"
	       "  -u, --unit UNIT        only processes of the systemd unit (nginx.service)\n"
	       "  -g, --cgroup CGROUP    only processes in the cgroup path (and below), or\n"
	       "                         of the container id (at least 12 digits)\n"
	       "      --group-by KEY     root frame per none, comm, pid, thread, unit or\n"
	       "                         cgroup (default comm; none with --pid)\n"
	       "  -o, --output FILE      write the profile to FILE (atomically) instead of\n"
	       "                         stdout\n");
	output_help_format("as for record (not timeline, speedscope or jfr: only record keeps the sample times they need)");
	printf("      --json-events      print the response on stderr as a JSON line (the\n"
	       "                         profile's data left out)\n"
	       "      --socket PATH      daemon socket (default $%s or %s)\n"
	       "  -h, --help             show this help\n"
	       "\n"
	       "Exit status: 0 profile written (an empty one if nothing matched), 1 error,\n"
	       "2 usage, 3 daemon not running, 4 permission denied, 5 no such process.\n",
	       JPROF_SOCKET_ENV, JPROF_DEFAULT_SOCKET);
}

/* A filter's value into its request field. CTL_CONTINUE or a usage error. */
static int cmd_profile_filter(const char *opt, const char *v, char *dst, size_t size)
{
	if (!*v || strlen(v) >= size)
		return ctl_usage_err("profile", "%s wants a non-empty value of at most %zu bytes", opt,
				     size - 1);
	memcpy(dst, v, strlen(v) + 1);
	return CTL_CONTINUE;
}

/* --last or --from/--to into the request. CTL_CONTINUE or a usage error. */
static int cmd_profile_span(struct jprof_profile_req *pr, int64_t last, int64_t from, int64_t to,
			    bool has_from, bool has_to)
{
	if (last && (has_from || has_to))
		return ctl_usage_err("profile", "give --last or --from/--to, not both");
	if (has_to && !has_from)
		return ctl_usage_err("profile", "--to needs --from");
	if (has_from) {
		if (from <= to)
			return ctl_usage_err("profile", "--from must be further back than --to");
		pr->has_range = true;
		pr->last_s = 0;
		pr->from_ms = -from;
		pr->to_ms = -to;
	} else if (last) {
		pr->last_s = (uint32_t)(last / 1000);
	}
	return CTL_CONTINUE;
}

int cmd_profile(int argc, char **argv, const char *socket_path)
{
	enum { OPT_FROM = 256, OPT_TO, OPT_GROUP_BY };
	static const struct option opts[] = {
		{ "last", required_argument, NULL, 'l' },
		{ "from", required_argument, NULL, OPT_FROM },
		{ "to", required_argument, NULL, OPT_TO },
		{ "pid", required_argument, NULL, 'p' },
		{ "comm", required_argument, NULL, 'c' },
		{ "unit", required_argument, NULL, 'u' },
		{ "cgroup", required_argument, NULL, 'g' },
		{ "group-by", required_argument, NULL, OPT_GROUP_BY },
		RUN_OPTIONS,
		{ NULL, 0, NULL, 0 },
	};
	struct jprof_profile_req *pr;
	struct run run;
	bool has_from = false, has_to = false;
	int64_t from = 0, to = 0, last = 0;
	int r = CTL_CONTINUE, o;

	run_init(&run, "profile", JPROF_CMD_PROFILE, socket_path, cmd_profile_help);
	pr = &run.req.profile;
	while ((o = run_getopt(&run, argc, argv, ":l:p:c:u:g:o:f:h", opts, &r)) != -1) {
		switch (o) {
		case 'l':
			if (args_parse_ago_ms(optarg, &last) < 0 || last % 1000 || last < 1000)
				r = ctl_usage_err("profile", "invalid --last '%s': use e.g. 60s, 5m, 1h "
						  "(whole seconds, 1s to 24h)", optarg);
			break;
		case OPT_FROM:
		case OPT_TO:
			if (args_parse_ago_ms(optarg, o == OPT_FROM ? &from : &to) < 0)
				r = ctl_usage_err("profile", "invalid %s '%s': use e.g. 10m, 90s (before "
						  "now, up to 24h)", o == OPT_FROM ? "--from" : "--to",
						  optarg);
			*(o == OPT_FROM ? &has_from : &has_to) = true;
			break;
		case 'p':
			if (args_parse_pid(optarg, &pr->pid) < 0)
				r = ctl_usage_err("profile", "invalid pid '%s'", optarg);
			break;
		case 'c':
			r = cmd_profile_filter("--comm", optarg, pr->comm, sizeof(pr->comm));
			break;
		case 'u':
			r = cmd_profile_filter("--unit", optarg, pr->unit, sizeof(pr->unit));
			break;
		case 'g':
			r = cmd_profile_filter("--cgroup", optarg, pr->cgroup, sizeof(pr->cgroup));
			break;
		case OPT_GROUP_BY:
			r = cmd_profile_filter("--group-by", optarg, pr->group_by, sizeof(pr->group_by));
			break;
		}
	}
	if (r == CTL_CONTINUE)
		r = cmd_profile_span(pr, last, from, to, has_from, has_to);
	if (r != CTL_CONTINUE)
		goto out;

	run.pid = pr->pid;
	if (pr->pid)
		snprintf(run.target, sizeof(run.target), "pid %d", pr->pid);
	else
		snprintf(run.target, sizeof(run.target), "the host");
	r = run_request(&run);
out:
	return r;
}
