#include "profile_msg.h"

#include <json-c/json.h>

#include "event.h"
#include "jprof_proto.h"

struct json_object *profile_msg_new(int64_t id, const char *status, enum jprof_format fmt,
				    const struct buf *data, const struct store *st,
				    struct json_object **summary)
{
	struct json_object *o = jprof_response_new(id, "profile");
	struct json_object *sum = json_object_new_object();
	struct json_object *types = json_object_new_array();
	struct json_object *values = json_object_new_array();
	const struct jprof_format_info *fi = jprof_format_info(fmt);
	struct store_totals tot;
	int wi = export_weight_index(st);

	*summary = NULL;
	if (!o || !sum || !types || !values || !fi)
		goto fail;
	json_object_object_add(o, "status", json_object_new_string(status));
	if (jprof_profile_add_data(o, fi->name, fi->binary, data->data, data->len) < 0)
		goto fail;
	store_get_totals(st, &tot);
	json_object_object_add(sum, "samples", json_object_new_int64((int64_t)tot.values[0]));
	json_object_object_add(sum, "weight_ns",
			       json_object_new_int64(wi < 0 ? 0 : (int64_t)tot.values[wi]));
	json_object_object_add(sum, "stacks", json_object_new_int64((int64_t)tot.stacks));
	json_object_object_add(sum, "truncated", json_object_new_boolean(tot.truncated));
	if (fi->time_ordered) {
		/* Samples in the time-ordered output, and those past its cap. */
		json_object_object_add(sum, "times", json_object_new_int64((int64_t)tot.times));
		json_object_object_add(sum, "times_dropped",
				       json_object_new_int64((int64_t)tot.times_dropped));
	}
	/* The typed totals: one value per sample type of the profile. */
	for (size_t i = 0; i < store_value_count(st); i++) {
		const struct sample_type *t = store_value_type(st, i);
		struct json_object *to = json_object_new_object();

		if (!to)
			goto fail;
		json_object_object_add(to, "type", json_object_new_string(t->type));
		json_object_object_add(to, "unit", json_object_new_string(t->unit));
		json_object_array_add(types, to);
		json_object_array_add(values, json_object_new_int64((int64_t)tot.values[i]));
	}
	json_object_object_add(sum, "sample_types", types);
	json_object_object_add(sum, "values", values);
	types = values = NULL;
	/* Last member, so what the caller adds to it keeps the wire order. */
	json_object_object_add(o, "summary", sum);
	*summary = sum;
	return o;
fail:
	json_object_put(o);
	json_object_put(sum);
	json_object_put(types);
	json_object_put(values);
	return NULL;
}

void profile_msg_host_meta(struct export_meta *meta, unsigned host_rate_hz)
{
	const struct event_info *ev = event_get(EVENT_CPU);

	meta->event = ev->perf_name;
	meta->period_type = ev->period_type;
	meta->period = host_rate_hz ? 1000000000ull / host_rate_hz : 0;
}
