/* The output formats: one table that the daemon's exporter registry, the
 * request codec, jprofctl (format by file extension, --help, `jprofctl
 * formats`), the bash completion and the docs all read. A new format is a
 * row here plus its renderer in daemon/export/ (see docs/architecture.md,
 * "Add an output format"). */
#ifndef JPROF_FORMATS_H
#define JPROF_FORMATS_H

#include <stdbool.h>
#include <stddef.h>

enum jprof_format {
	JPROF_FMT_COLLAPSED = 0,  /* folded stacks: "root;child;leaf value" */
	JPROF_FMT_RAW,            /* flat jprofd-profile JSON (frames + stacks) */
	JPROF_FMT_JSON,           /* jprofd-tree call tree */
	JPROF_FMT_HTML,           /* self-contained flame graph page */
	JPROF_FMT_PPROF,          /* gzipped perftools.profiles.Profile */
	JPROF_FMT_TEXT,           /* terminal summary */
	JPROF_FMT_TIMELINE,       /* Trace Event JSON: per-thread slices in time order */
	JPROF_FMT_SPEEDSCOPE,     /* speedscope's file format: one sampled profile per thread */
	JPROF_FMT_JFR,            /* JDK Flight Recorder recording (jfr, JMC, IntelliJ) */
	JPROF_FMT_COUNT
};

struct jprof_format_info {
	enum jprof_format id;
	const char *name;              /* on the wire and on the command line */
	const char *const *aliases;    /* NULL-terminated, may be NULL */
	const char *const *extensions; /* NULL-terminated, ".pb.gz"; the first is the usual one */
	bool binary;                   /* travels base64-encoded */
	bool all_values;               /* shows every sample type (else the chosen one) */
	bool time_ordered;             /* needs each sample's time: recordings keep them */
	const char *summary;           /* one line for --help and `jprofctl formats` */
};

/* Row of a format; NULL if out of range. */
const struct jprof_format_info *jprof_format_info(enum jprof_format id);
/* By name or alias (exact, lowercase); -EINVAL if unknown. */
int jprof_format_parse(const char *name);
/* By a file name's extension (case-insensitive, longest match); -ENOENT if
 * no format claims it. */
int jprof_format_for_path(const char *path);
/* "collapsed, json, ..." (names only, table order), for messages. */
const char *jprof_format_names(void);

#endif
