#include "profile_msg.h"

#include <json-c/json.h>

#include "jprof_proto.h"

struct json_object *profile_msg_new(int64_t id, const char *status, enum export_format fmt,
				    const struct buf *data, const struct store *st,
				    struct json_object **summary)
{
	struct json_object *o = jprof_response_new(id, "profile");
	struct json_object *sum = json_object_new_object();
	struct store_totals tot;

	*summary = NULL;
	if (!o || !sum)
		goto fail;
	json_object_object_add(o, "status", json_object_new_string(status));
	if (jprof_profile_add_data(o, export_format_name(fmt), export_format_is_binary(fmt), data->data,
				   data->len) < 0)
		goto fail;
	store_get_totals(st, &tot);
	json_object_object_add(sum, "samples", json_object_new_int64((int64_t)tot.samples));
	json_object_object_add(sum, "weight_ns", json_object_new_int64((int64_t)tot.weight_ns));
	json_object_object_add(sum, "stacks", json_object_new_int64((int64_t)tot.stacks));
	json_object_object_add(sum, "truncated", json_object_new_boolean(tot.truncated));
	/* Last member, so what the caller adds to it keeps the wire order. */
	json_object_object_add(o, "summary", sum);
	*summary = sum;
	return o;
fail:
	json_object_put(o);
	json_object_put(sum);
	return NULL;
}
