/* The "jfr" format: a JDK Flight Recorder recording (one chunk) of a
 * recording's sample times, written from the format's documentation:
 * jdk.ExecutionSample for samples with Java frames, jdk.NativeMethodSample
 * for the others, with threads, stack traces, methods, classes, packages
 * and symbols in constant pools. `jfr print`, JDK Mission Control and
 * IntelliJ read it. See docs/formats.md. */
#ifndef JPROF_JFR_H
#define JPROF_JFR_H

#include "buf.h"
#include "export_util.h"

int jfr_render(const struct export_job *job, struct buf *out);

#endif
