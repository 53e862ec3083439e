/* The call tree every tree-shaped format is rendered from (json, html,
 * text): the store's stacks merged root first, one node per distinct path,
 * with self and total of the shown value (export_job.value), and of every
 * value when asked. Node names follow export.h's naming
 * rules; a node's key is its store frame id, or a synthetic frame
 * ("[no_stack]", a thread root frame) numbered after the store's frames. */
#ifndef JPROF_CALLTREE_H
#define JPROF_CALLTREE_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "export_util.h"
#include "store.h"

#define CALLTREE_NONE UINT32_MAX
#define CALLTREE_ROOT_KEY UINT32_MAX

struct calltree_node {
	uint32_t key;           /* CALLTREE_ROOT_KEY for node 0, the root */
	uint32_t parent;        /* CALLTREE_NONE for the root */
	uint32_t first_child;   /* CALLTREE_NONE when a leaf */
	uint32_t next_sibling;  /* CALLTREE_NONE when last */
	uint32_t depth;         /* root 0 */
	uint64_t self;          /* shown value of the stacks whose leaf is this node */
	uint64_t total;         /* shown value of this node and everything below */
};

struct calltree;

/* Builds the tree of job->st; job->opt->thread_frames adds a "[<name>
 * tid=N]" root frame. all_values also keeps the total of every value per
 * node (calltree_total_values), for formats that show them all. */
int calltree_build(const struct export_job *job, bool all_values, struct calltree **out);
void calltree_free(struct calltree *t);

size_t calltree_count(const struct calltree *t);
const struct calltree_node *calltree_node(const struct calltree *t, uint32_t idx);
/* The total of every value (store_value_count()) of a node; NULL unless
 * built with all_values. */
const uint64_t *calltree_total_values(const struct calltree *t, uint32_t idx);

/* Display name of a key ("all" for the root), NUL-terminated and valid
 * UTF-8 without control bytes; owned by the tree. */
const char *calltree_key_name(const struct calltree *t, uint32_t key);
/* Kind name: frame_kind_name(), "marker" for synthetic frames, "root". */
const char *calltree_key_kind(const struct calltree *t, uint32_t key);
/* Kind as a frame_kind (FRAME_MARKER for synthetic frames and the root). */
enum frame_kind calltree_key_frame_kind(const struct calltree *t, uint32_t key);
/* Number of distinct keys (store frames + synthetic frames). */
uint32_t calltree_key_count(const struct calltree *t);
/* With EXPORT_NAME_SUFFIX: the name plus its kind suffix, appended to out. */
int calltree_key_text(const struct calltree *t, uint32_t key, unsigned flags, struct buf *out);

enum calltree_order {
	CALLTREE_BY_TOTAL,  /* heaviest child first, then by name */
	CALLTREE_BY_NAME,   /* byte order of the display name, then kind */
};
/* Reorders every node's children. 0 or -ENOMEM. */
int calltree_sort(struct calltree *t, enum calltree_order order);

/* The "json" format: jprofd-tree, see docs/formats.md. */
int calltree_render_json(const struct export_job *job, struct buf *out);

#endif
