/* The "profile" message that ends a recording and answers a profile
 * request: the rendered data, its format and encoding, and a summary that
 * starts with the store's totals. One builder, so both answers keep the
 * same shape. */
#ifndef JPROF_PROFILE_MSG_H
#define JPROF_PROFILE_MSG_H

#include <stdint.h>

#include "buf.h"
#include "export.h"

struct json_object;

/* {"type":"profile","status":status,"format","encoding","data",
 * "summary":{samples, weight_ns, stacks, truncated, sample_types, values}}
 * for request id, with
 * data rendered from st as fmt. *summary (borrowed, part of the message)
 * takes the caller's further members. NULL on ENOMEM. */
struct json_object *profile_msg_new(int64_t id, const char *status, enum jprof_format fmt,
				    const struct buf *data, const struct store *st,
				    struct json_object **summary);

/* What the host view samples: its event (cpu-clock) and period at the
 * host rate, for the meta of host profiles (the profile request and the
 * pprof scrape endpoint). */
void profile_msg_host_meta(struct export_meta *meta, unsigned host_rate_hz);

#endif
