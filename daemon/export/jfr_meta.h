/* The types of a jprofd JFR recording and the metadata event that
 * describes them (see jfr.h). Names, fields and annotations are those
 * `jfr metadata` shows for the JDK's own recordings (JDK 17 and 25), so
 * tools that know jdk.ExecutionSample read ours the same way. */
#ifndef JPROF_JFR_META_H
#define JPROF_JFR_META_H

#include <stdint.h>

#include "buf.h"

/* Type ids (the chunk's own numbering; 0 and 1 are the metadata and
 * checkpoint events). Constant pools are written in this order. */
enum jfr_type {
	JFR_EVENT_EXECUTION_SAMPLE = 101,
	JFR_EVENT_NATIVE_SAMPLE = 102,
	JFR_EVENT_TRUNCATED = 103,       /* jprofd.RecordingTruncated */
	JFR_T_BOOLEAN = 4,
	JFR_T_INT = 8,
	JFR_T_LONG = 9,
	JFR_T_STRING = 10,
	JFR_T_THREAD = 20,
	JFR_T_THREAD_GROUP = 21,
	JFR_T_CLASS = 22,
	JFR_T_CLASS_LOADER = 23,
	JFR_T_METHOD = 24,
	JFR_T_SYMBOL = 25,
	JFR_T_THREAD_STATE = 26,
	JFR_T_MODULE = 27,
	JFR_T_PACKAGE = 28,
	JFR_T_STACK_TRACE = 29,
	JFR_T_FRAME_TYPE = 30,
	JFR_T_STACK_FRAME = 31,
	JFR_A_LABEL = 200,
	JFR_A_DESCRIPTION = 201,
	JFR_A_CATEGORY = 202,
	JFR_A_TIMESTAMP = 203,
	JFR_A_CONTENT_TYPE = 204,
	JFR_A_UNSIGNED = 205,
};

/* Appends the metadata event (id 1), its times in ticks. 0 or -ENOMEM. */
int jfr_meta_write(struct buf *out, uint64_t start_ticks);

#endif
