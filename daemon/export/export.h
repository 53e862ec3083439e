/* Renders a store into the output formats. One module, one set of naming
 * rules (see symbols.h for how names are made). */
#ifndef JPROF_EXPORT_H
#define JPROF_EXPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "store.h"

enum export_format {
	EXPORT_COLLAPSED = 0,  /* folded stacks: "root;child;leaf count\n" */
	EXPORT_RAW,            /* "raw": flat jprofd-profile JSON (frames + stacks) */
	EXPORT_JSON,           /* "json": jprofd-tree call tree (calltree.c) */
	EXPORT_HTML,           /* self-contained flame graph page (flamegraph.c) */
	EXPORT_PPROF,          /* gzipped perftools.profiles.Profile (pprof.c) */
	EXPORT_TEXT,           /* terminal summary (textreport.c) */
	EXPORT_FORMAT_COUNT
};

struct export_meta {
	uint32_t pid;              /* 0 = whole host */
	const char *comm;          /* process name, or NULL */
	const char *event;         /* "cpu-clock" */
	uint64_t start_unix_ns;    /* wall clock at start */
	uint64_t duration_ns;
	uint64_t interval_ns;
	const char *status;        /* "complete", "cancelled", "process_exited", ... */
};

struct export_options {
	bool thread_frames;        /* prefix each stack with "[<thread name> tid=<tid>]" */
};

/* Every name export_format_parse() accepts, for messages. */
#define EXPORT_FORMAT_NAMES "collapsed, folded, json, raw, html, pprof, text"

/* "collapsed" (also "folded"), "raw", "json", "html", "pprof", "text";
 * -EINVAL otherwise. */
int export_format_parse(const char *name);
const char *export_format_name(enum export_format fmt);
bool export_format_is_binary(enum export_format fmt);

/* Appends the rendering to out. 0 or -errno. */
int export_render(const struct store *st, const struct export_meta *meta,
		  const struct export_options *opt, enum export_format fmt, struct buf *out);

/* ---- frame naming, shared by every renderer ------------------------------
 *
 * A frame's display name is its symbol name, plus " [module]" for a kernel
 * module's frame, with control bytes, DEL and bytes that are not well-formed
 * UTF-8 written as "\xNN". EXPORT_NAME_SUFFIX appends the kind suffix
 * ("_[k]", "_[j]", "_[i]", "_[0]"); EXPORT_NAME_NO_SEMICOLON also writes ';'
 * as "\x3b". Collapsed uses both, text the suffix, the rest neither (they
 * carry the kind separately). */
enum {
	EXPORT_NAME_SUFFIX = 1,
	EXPORT_NAME_NO_SEMICOLON = 2,
};
int export_frame_name(const struct store_frame *f, unsigned flags, struct buf *out);
/* Any string (thread, process names) under the same rules. */
int export_text(const char *s, unsigned flags, struct buf *out);

/* Helpers for the renderers: a JSON string literal (safe inside an HTML
 * <script>, see docs/formats.md), NULL as null; an unsigned decimal. */
int export_json_string(struct buf *out, const char *s);
int export_put_u64(struct buf *out, uint64_t v);

/* Collapsed-format text of one frame (kernel "_[k]", Java JIT "_[j]", inlined
 * "_[i]", interpreted "_[0]"; ';' written as "\x3b"), appended to out. */
int export_collapsed_frame(const struct store_frame *f, struct buf *out);

#endif
