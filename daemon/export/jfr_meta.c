#include "jfr_meta.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "jfr_enc.h"

enum {
	F_POOL = 1,      /* a reference into the type's constant pool */
	F_ARRAY = 2,     /* a list of values */
	F_TICKS = 4,     /* @Timestamp("TICKS") */
};

struct jfr_field {
	const char *name;
	enum jfr_type type;
	unsigned flags;
	const char *label;
};

struct jfr_class {
	enum jfr_type id;
	const char *name;
	const char *super;           /* NULL: none */
	bool simple;                 /* one field, shown as its value */
	const char *label;
	const char *description;
	const char *category[2];     /* NULL-padded */
	bool content_type;           /* annotated @ContentType (Timestamp) */
	const struct jfr_field *fields;
	size_t nfields;
};

#define FIELDS(a) a, sizeof(a) / sizeof(a[0])

static const struct jfr_field sample_fields[] = {
	{ "startTime", JFR_T_LONG, F_TICKS, "Start Time" },
	{ "sampledThread", JFR_T_THREAD, F_POOL, "Thread" },
	{ "stackTrace", JFR_T_STACK_TRACE, F_POOL, "Stack Trace" },
	{ "state", JFR_T_THREAD_STATE, F_POOL, "Thread State" },
};
static const struct jfr_field truncated_fields[] = {
	{ "startTime", JFR_T_LONG, F_TICKS, "Start Time" },
	{ "message", JFR_T_STRING, 0, "Message" },
	{ "samplesKept", JFR_T_LONG, 0, "Samples Kept" },
	{ "samplesDropped", JFR_T_LONG, 0, "Samples Dropped" },
};
static const struct jfr_field thread_fields[] = {
	{ "osName", JFR_T_STRING, 0, "OS Thread Name" },
	{ "osThreadId", JFR_T_LONG, 0, "OS Thread Id" },
	{ "javaName", JFR_T_STRING, 0, "Java Thread Name" },
	{ "javaThreadId", JFR_T_LONG, 0, "Java Thread Id" },
	{ "group", JFR_T_THREAD_GROUP, F_POOL, "Java Thread Group" },
	{ "virtual", JFR_T_BOOLEAN, 0, "Virtual Thread" },
};
static const struct jfr_field thread_group_fields[] = {
	{ "parent", JFR_T_THREAD_GROUP, F_POOL, "Parent" },
	{ "name", JFR_T_STRING, 0, "Name" },
};
static const struct jfr_field class_fields[] = {
	{ "classLoader", JFR_T_CLASS_LOADER, F_POOL, "Class Loader" },
	{ "name", JFR_T_SYMBOL, F_POOL, "Name" },
	{ "package", JFR_T_PACKAGE, F_POOL, "Package" },
	{ "modifiers", JFR_T_INT, 0, "Access Modifiers" },
	{ "hidden", JFR_T_BOOLEAN, 0, "Hidden" },
};
static const struct jfr_field class_loader_fields[] = {
	{ "type", JFR_T_CLASS, F_POOL, "Type" },
	{ "name", JFR_T_SYMBOL, F_POOL, "Name" },
};
static const struct jfr_field method_fields[] = {
	{ "type", JFR_T_CLASS, F_POOL, "Type" },
	{ "name", JFR_T_SYMBOL, F_POOL, "Name" },
	{ "descriptor", JFR_T_SYMBOL, F_POOL, "Descriptor" },
	{ "modifiers", JFR_T_INT, 0, "Access Modifiers" },
	{ "hidden", JFR_T_BOOLEAN, 0, "Hidden" },
};
static const struct jfr_field symbol_fields[] = {
	{ "string", JFR_T_STRING, 0, "String" },
};
static const struct jfr_field name_fields[] = {
	{ "name", JFR_T_STRING, 0, "Name" },
};
static const struct jfr_field module_fields[] = {
	{ "name", JFR_T_SYMBOL, F_POOL, "Name" },
	{ "version", JFR_T_SYMBOL, F_POOL, "Version" },
	{ "location", JFR_T_SYMBOL, F_POOL, "Location" },
	{ "classLoader", JFR_T_CLASS_LOADER, F_POOL, "Class Loader" },
};
static const struct jfr_field package_fields[] = {
	{ "name", JFR_T_SYMBOL, F_POOL, "Name" },
	{ "module", JFR_T_MODULE, F_POOL, "Module" },
	{ "exported", JFR_T_BOOLEAN, 0, "Exported" },
};
static const struct jfr_field stack_trace_fields[] = {
	{ "truncated", JFR_T_BOOLEAN, 0, "Truncated" },
	{ "frames", JFR_T_STACK_FRAME, F_ARRAY, "Stack Frames" },
};
static const struct jfr_field frame_type_fields[] = {
	{ "description", JFR_T_STRING, 0, "Description" },
};
static const struct jfr_field stack_frame_fields[] = {
	{ "method", JFR_T_METHOD, F_POOL, "Java Method" },
	{ "lineNumber", JFR_T_INT, 0, "Line Number" },
	{ "bytecodeIndex", JFR_T_INT, 0, "Bytecode Index" },
	{ "type", JFR_T_FRAME_TYPE, F_POOL, "Frame Type" },
};
static const struct jfr_field value_field[] = {
	{ "value", JFR_T_STRING, 0, NULL },
};
static const struct jfr_field value_list_field[] = {
	{ "value", JFR_T_STRING, F_ARRAY, NULL },
};

#define ANNOTATION "java.lang.annotation.Annotation"

static const struct jfr_class jfr_classes[] = {
	{ JFR_EVENT_EXECUTION_SAMPLE, "jdk.ExecutionSample", "jdk.jfr.Event", false,
	  "Method Profiling Sample", "Snapshot of a thread executing Java code (jprofd: a CPU sample with Java frames)",
	  { "Java Virtual Machine", "Profiling" }, false, FIELDS(sample_fields) },
	{ JFR_EVENT_NATIVE_SAMPLE, "jdk.NativeMethodSample", "jdk.jfr.Event", false,
	  "Method Profiling Sample Native", "Snapshot of a thread in native code (jprofd: a CPU sample without Java frames)",
	  { "Java Virtual Machine", "Profiling" }, false, FIELDS(sample_fields) },
	{ JFR_EVENT_TRUNCATED, "jprofd.RecordingTruncated", "jdk.jfr.Event", false,
	  "Recording Truncated", "The recording kept the times of this many samples only; later samples are not in this file",
	  { "jprofd", NULL }, false, FIELDS(truncated_fields) },
	{ JFR_T_BOOLEAN, "boolean", NULL, false, NULL, NULL, { NULL, NULL }, false, NULL, 0 },
	{ JFR_T_INT, "int", NULL, false, NULL, NULL, { NULL, NULL }, false, NULL, 0 },
	{ JFR_T_LONG, "long", NULL, false, NULL, NULL, { NULL, NULL }, false, NULL, 0 },
	{ JFR_T_STRING, "java.lang.String", NULL, false, NULL, NULL, { NULL, NULL }, false, NULL, 0 },
	{ JFR_T_THREAD, "java.lang.Thread", NULL, false, "Thread", NULL, { NULL, NULL }, false,
	  FIELDS(thread_fields) },
	{ JFR_T_THREAD_GROUP, "jdk.types.ThreadGroup", NULL, false, "Thread Group", NULL, { NULL, NULL },
	  false, FIELDS(thread_group_fields) },
	{ JFR_T_CLASS, "java.lang.Class", NULL, false, "Java Class", NULL, { NULL, NULL }, false,
	  FIELDS(class_fields) },
	{ JFR_T_CLASS_LOADER, "jdk.types.ClassLoader", NULL, false, "Java Class Loader", NULL,
	  { NULL, NULL }, false, FIELDS(class_loader_fields) },
	{ JFR_T_METHOD, "jdk.types.Method", NULL, false, "Java Method", NULL, { NULL, NULL }, false,
	  FIELDS(method_fields) },
	{ JFR_T_SYMBOL, "jdk.types.Symbol", NULL, true, "Symbol", NULL, { NULL, NULL }, false,
	  FIELDS(symbol_fields) },
	{ JFR_T_THREAD_STATE, "jdk.types.ThreadState", NULL, true, "Java Thread State", NULL,
	  { NULL, NULL }, false, FIELDS(name_fields) },
	{ JFR_T_MODULE, "jdk.types.Module", NULL, false, "Module", NULL, { NULL, NULL }, false,
	  FIELDS(module_fields) },
	{ JFR_T_PACKAGE, "jdk.types.Package", NULL, false, "Package", NULL, { NULL, NULL }, false,
	  FIELDS(package_fields) },
	{ JFR_T_STACK_TRACE, "jdk.types.StackTrace", NULL, false, "Stacktrace", NULL, { NULL, NULL },
	  false, FIELDS(stack_trace_fields) },
	{ JFR_T_FRAME_TYPE, "jdk.types.FrameType", NULL, true, "Frame type", NULL, { NULL, NULL },
	  false, FIELDS(frame_type_fields) },
	{ JFR_T_STACK_FRAME, "jdk.types.StackFrame", NULL, false, NULL, NULL, { NULL, NULL }, false,
	  FIELDS(stack_frame_fields) },
	{ JFR_A_LABEL, "jdk.jfr.Label", ANNOTATION, false, NULL, NULL, { NULL, NULL }, false,
	  FIELDS(value_field) },
	{ JFR_A_DESCRIPTION, "jdk.jfr.Description", ANNOTATION, false, NULL, NULL, { NULL, NULL },
	  false, FIELDS(value_field) },
	{ JFR_A_CATEGORY, "jdk.jfr.Category", ANNOTATION, false, NULL, NULL, { NULL, NULL }, false,
	  FIELDS(value_list_field) },
	{ JFR_A_TIMESTAMP, "jdk.jfr.Timestamp", ANNOTATION, false, "Timestamp", "A point in time",
	  { NULL, NULL }, true, FIELDS(value_field) },
	{ JFR_A_CONTENT_TYPE, "jdk.jfr.ContentType", ANNOTATION, false, "Content Type",
	  "Semantic meaning of a value", { NULL, NULL }, false, NULL, 0 },
};

/* The metadata event's string table and element tree being built. */
struct jfr_meta_ctx {
	struct jfr_intern strs;
	struct buf tree;
};

static int meta_str(struct jfr_meta_ctx *c, const char *s)
{
	int64_t i = jfr_intern(&c->strs, s, strlen(s), NULL);

	return i < 0 ? (int)i : jfr_put_varint(&c->tree, (uint64_t)i);
}

/* One element: its name, nattr (key, value) string pairs, then how many
 * child elements follow it (written by the next calls). */
static int meta_element(struct jfr_meta_ctx *c, const char *name, size_t nchildren, size_t nattr, ...)
{
	va_list ap;
	int r = meta_str(c, name);

	if (r == 0)
		r = jfr_put_varint(&c->tree, nattr);
	va_start(ap, nattr);
	for (size_t i = 0; r == 0 && i < 2 * nattr; i++)
		r = meta_str(c, va_arg(ap, const char *));
	va_end(ap);
	if (r == 0)
		r = jfr_put_varint(&c->tree, nchildren);
	return r;
}

static int meta_annotation(struct jfr_meta_ctx *c, enum jfr_type cls, const char *value)
{
	char id[16];

	snprintf(id, sizeof(id), "%d", (int)cls);
	if (!value)
		return meta_element(c, "annotation", 0, 1, "class", id);
	return meta_element(c, "annotation", 0, 2, "class", id, "value", value);
}

static int meta_field(struct jfr_meta_ctx *c, const struct jfr_field *f)
{
	size_t nann = (f->label != NULL) + !!(f->flags & F_TICKS);
	char type[16];
	int r;

	snprintf(type, sizeof(type), "%d", (int)f->type);
	if (f->flags & F_POOL)
		r = meta_element(c, "field", nann, 3, "name", f->name, "class", type, "constantPool", "true");
	else if (f->flags & F_ARRAY)
		r = meta_element(c, "field", nann, 3, "name", f->name, "class", type, "dimension", "1");
	else
		r = meta_element(c, "field", nann, 2, "name", f->name, "class", type);
	if (r == 0 && f->label)
		r = meta_annotation(c, JFR_A_LABEL, f->label);
	if (r == 0 && (f->flags & F_TICKS))
		r = meta_annotation(c, JFR_A_TIMESTAMP, "TICKS");
	return r;
}

static int meta_class(struct jfr_meta_ctx *c, const struct jfr_class *k)
{
	size_t nchildren = k->nfields + (k->label != NULL) + (k->description != NULL) +
			   (k->category[0] != NULL) + k->content_type;
	char id[16];
	int r;

	snprintf(id, sizeof(id), "%d", (int)k->id);
	if (k->super)
		r = meta_element(c, "class", nchildren, 3, "name", k->name, "id", id, "superType", k->super);
	else if (k->simple)
		r = meta_element(c, "class", nchildren, 3, "name", k->name, "id", id, "simpleType", "true");
	else
		r = meta_element(c, "class", nchildren, 2, "name", k->name, "id", id);
	for (size_t i = 0; r == 0 && i < k->nfields; i++)
		r = meta_field(c, &k->fields[i]);
	if (r == 0 && k->content_type)
		r = meta_annotation(c, JFR_A_CONTENT_TYPE, NULL);
	if (r == 0 && k->label)
		r = meta_annotation(c, JFR_A_LABEL, k->label);
	if (r == 0 && k->description)
		r = meta_annotation(c, JFR_A_DESCRIPTION, k->description);
	if (r == 0 && k->category[0]) {
		char cls[16];

		snprintf(cls, sizeof(cls), "%d", (int)JFR_A_CATEGORY);
		if (k->category[1])
			r = meta_element(c, "annotation", 0, 3, "class", cls, "value-0", k->category[0],
					 "value-1", k->category[1]);
		else
			r = meta_element(c, "annotation", 0, 2, "class", cls, "value-0", k->category[0]);
	}
	return r;
}

int jfr_meta_write(struct buf *out, uint64_t start_ticks)
{
	struct jfr_meta_ctx c = { { BUF_INIT, NULL, 0, 0, { 0 } }, BUF_INIT };
	struct buf body = BUF_INIT;
	size_t nclasses = sizeof(jfr_classes) / sizeof(jfr_classes[0]);
	int r;

	/* root { metadata { class... }, region } */
	r = meta_element(&c, "root", 2, 0);
	if (r == 0)
		r = meta_element(&c, "metadata", nclasses, 0);
	for (size_t i = 0; r == 0 && i < nclasses; i++)
		r = meta_class(&c, &jfr_classes[i]);
	if (r == 0)
		r = meta_element(&c, "region", 0, 2, "locale", "en_US", "gmtOffset", "0");
	if (r < 0)
		goto out;
	/* Event header: type 0, start, duration 0, metadata id 1; then the
	 * string table and the tree that indexes it. */
	r = jfr_put_varint(&body, 0);
	if (r == 0)
		r = jfr_put_varint(&body, start_ticks);
	if (r == 0)
		r = jfr_put_varint(&body, 0);
	if (r == 0)
		r = jfr_put_varint(&body, 1);
	if (r == 0)
		r = jfr_put_varint(&body, c.strs.n);
	for (size_t i = 0; r == 0 && i < c.strs.n; i++) {
		size_t len;
		const char *s = jfr_intern_key(&c.strs, i, &len);

		r = jfr_put_string_n(&body, s, len);
	}
	if (r == 0)
		r = buf_append(&body, c.tree.data, c.tree.len);
	if (r == 0)
		r = jfr_put_sized(out, &body);
out:
	jfr_intern_release(&c.strs);
	buf_release(&c.tree);
	buf_release(&body);
	return r;
}
