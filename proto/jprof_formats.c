#include "jprof_formats.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

static const char *const collapsed_aliases[] = { "folded", NULL };
static const char *const collapsed_ext[] = { ".collapsed", ".folded", NULL };
static const char *const raw_ext[] = { ".raw.json", NULL };
static const char *const json_ext[] = { ".json", NULL };
static const char *const html_ext[] = { ".html", ".htm", NULL };
static const char *const pprof_ext[] = { ".pb.gz", ".pprof", NULL };
static const char *const text_ext[] = { ".txt", NULL };
static const char *const timeline_aliases[] = { "trace", "chrome", "perfetto", NULL };
static const char *const timeline_ext[] = { ".trace.json", NULL };
static const char *const speedscope_ext[] = { ".speedscope.json", NULL };
static const char *const jfr_ext[] = { ".jfr", NULL };

static const struct jprof_format_info formats[JPROF_FMT_COUNT] = {
	[JPROF_FMT_COLLAPSED] = { JPROF_FMT_COLLAPSED, "collapsed", collapsed_aliases, collapsed_ext,
				  false, false, false,
				  "folded stacks, one \"root;...;leaf value\" line each (flamegraph.pl, speedscope)" },
	[JPROF_FMT_RAW] = { JPROF_FMT_RAW, "raw", NULL, raw_ext, false, true, false,
			    "flat jprofd-profile JSON: frames, stacks, values, threads" },
	[JPROF_FMT_JSON] = { JPROF_FMT_JSON, "json", NULL, json_ext, false, true, false,
			     "jprofd-tree JSON call tree" },
	[JPROF_FMT_HTML] = { JPROF_FMT_HTML, "html", NULL, html_ext, false, false, false,
			     "self-contained interactive flame graph page" },
	[JPROF_FMT_PPROF] = { JPROF_FMT_PPROF, "pprof", NULL, pprof_ext, true, true, false,
			      "gzipped pprof protobuf (go tool pprof, Parca, Pyroscope, Grafana)" },
	[JPROF_FMT_TEXT] = { JPROF_FMT_TEXT, "text", NULL, text_ext, false, false, false,
			     "terminal summary: top functions and hottest stacks" },
	[JPROF_FMT_TIMELINE] = { JPROF_FMT_TIMELINE, "timeline", timeline_aliases, timeline_ext,
				 false, false, true,
				 "per-thread timeline, Trace Event JSON (Perfetto, chrome://tracing)" },
	[JPROF_FMT_SPEEDSCOPE] = { JPROF_FMT_SPEEDSCOPE, "speedscope", NULL, speedscope_ext,
				   false, false, true,
				   "per-thread timelines in speedscope's own JSON (speedscope.app)" },
	[JPROF_FMT_JFR] = { JPROF_FMT_JFR, "jfr", NULL, jfr_ext, true, false, true,
			    "JDK Flight Recorder file (jfr print, JDK Mission Control, IntelliJ)" },
};

const struct jprof_format_info *jprof_format_info(enum jprof_format id)
{
	if ((unsigned)id >= JPROF_FMT_COUNT)
		return NULL;
	return &formats[id];
}

int jprof_format_parse(const char *name)
{
	if (!name)
		return -EINVAL;
	for (int i = 0; i < JPROF_FMT_COUNT; i++) {
		if (strcmp(formats[i].name, name) == 0)
			return i;
		for (const char *const *a = formats[i].aliases; a && *a; a++)
			if (strcmp(*a, name) == 0)
				return i;
	}
	return -EINVAL;
}

static bool has_suffix(const char *s, size_t n, const char *suffix)
{
	size_t m = strlen(suffix);

	return n > m && strcasecmp(s + n - m, suffix) == 0;
}

int jprof_format_for_path(const char *path)
{
	size_t n = path ? strlen(path) : 0, best_len = 0;
	int best = -ENOENT;

	for (int i = 0; i < JPROF_FMT_COUNT; i++)
		for (const char *const *e = formats[i].extensions; e && *e; e++)
			if (strlen(*e) > best_len && has_suffix(path, n, *e)) {
				best = i;
				best_len = strlen(*e);
			}
	return best;
}

const char *jprof_format_names(void)
{
	static char names[256];

	if (!names[0]) {
		size_t off = 0;

		for (int i = 0; i < JPROF_FMT_COUNT && off < sizeof(names); i++) {
			size_t len = strlen(formats[i].name);

			if (off + len + 3 > sizeof(names))
				break;
			if (i) {
				memcpy(names + off, ", ", 2);
				off += 2;
			}
			memcpy(names + off, formats[i].name, len);
			off += len;
			names[off] = '\0';
		}
	}
	return names;
}
