#include "field.h"

struct json_object *field_member(struct json_object *obj, const char *key, enum json_type type)
{
	struct json_object *v;

	if (!obj || !json_object_is_type(obj, json_type_object) ||
	    !json_object_object_get_ex(obj, key, &v) || !json_object_is_type(v, type))
		return NULL;
	return v;
}

int64_t field_int(struct json_object *obj, const char *key)
{
	struct json_object *v = field_member(obj, key, json_type_int);
	int64_t x = v ? json_object_get_int64(v) : -1;

	return x < 0 ? -1 : x;
}

const char *field_str(struct json_object *obj, const char *key)
{
	struct json_object *v = field_member(obj, key, json_type_string);

	return v ? json_object_get_string(v) : NULL;
}

int field_bool(struct json_object *obj, const char *key)
{
	struct json_object *v = field_member(obj, key, json_type_boolean);

	return v ? json_object_get_boolean(v) : -1;
}
