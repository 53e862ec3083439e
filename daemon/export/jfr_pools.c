#include "jfr_pools.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "export_util.h"
#include "jfr_meta.h"

/* Descriptions of enum jfr_frame_type, by id - 1. */
static const char *const jfr_frame_type_names[JFR_FRAME_TYPES] = {
	"Interpreted", "JIT compiled", "Inlined", "Native", "Kernel", "Java", "Marker",
};

/* Synthetic classes of the frames that are not Java methods. */
#define JFR_CLASS_KERNEL "[kernel]"
#define JFR_CLASS_NATIVE "[native]"
#define JFR_CLASS_JIT "[jit]"
#define JFR_CLASS_MARKER "[jprofd]"

/* Descriptors when the name has none. `jfr print` needs "(...)" to format
 * a method: a Java method whose signature is unknown takes one parameter
 * of class "?" (shown "work(?)", not "work()", which would claim it has
 * none); a native, kernel or marker frame has "()". */
#define JFR_DESC_UNKNOWN "(L?;)"
#define JFR_DESC_NONE "()"

int jfr_pools_init(struct jfr_pools *p, const struct store *st)
{
	memset(p, 0, sizeof(*p));
	p->st = st;
	p->frames = calloc(store_frame_count(st) + 1, sizeof(*p->frames));
	p->stacks = calloc(store_stack_count(st) + 1, 1);
	if (!p->frames || !p->stacks) {
		jfr_pools_release(p);
		return -ENOMEM;
	}
	return 0;
}

void jfr_pools_release(struct jfr_pools *p)
{
	jfr_intern_release(&p->syms);
	jfr_intern_release(&p->pkgs);
	jfr_intern_release(&p->classes);
	jfr_intern_release(&p->methods);
	jfr_intern_release(&p->threads);
	free(p->frames);
	free(p->stacks);
	buf_release(&p->tmp);
	p->frames = NULL;
	p->stacks = NULL;
}

/* ---- names --------------------------------------------------------------- */

static bool jfr_all_digits(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* s[0..n) under the shared naming rules, appended to out. */
static int jfr_clean(struct buf *out, const char *s, size_t n)
{
	char *copy = strndup(s, n);
	int r;

	if (!copy)
		return -ENOMEM;
	r = export_text(copy, 0, out);
	free(copy);
	return r;
}

/* The number after the last c in name[0..end) if all of the rest is 1 to 9
 * digits: its position (*val set), else NULL. */
static const char *jfr_num_suffix(const char *name, size_t end, char c, int32_t *val)
{
	const char *at = NULL;

	for (const char *p = name; p < name + end; p++)
		if (*p == c)
			at = p;
	if (!at || (size_t)(name + end - at - 1) >= 10 ||
	    !jfr_all_digits(at + 1, (size_t)(name + end - at - 1)))
		return NULL;
	*val = (int32_t)strtol(at + 1, NULL, 10);
	return at;
}

int jfr_split_java_name(const char *name, struct buf *cls, struct buf *method, struct buf *desc,
			int32_t *line, int32_t *bci)
{
	size_t end = strlen(name), head;
	const char *paren, *suffix, *dot = NULL;
	int r;

	buf_reset(cls);
	buf_reset(method);
	buf_reset(desc);
	*line = -1;
	*bci = -1;
	/* "...@17": a bytecode index, then "...:42": a line; both after the
	 * descriptor when there is one. */
	if ((suffix = jfr_num_suffix(name, end, '@', bci)))
		end = (size_t)(suffix - name);
	if ((suffix = jfr_num_suffix(name, end, ':', line)))
		end = (size_t)(suffix - name);
	paren = memchr(name, '(', end);
	head = paren ? (size_t)(paren - name) : end;
	/* The method is after the last '.' of the head; the class before it. */
	for (const char *c = name; c < name + head; c++)
		if (*c == '.')
			dot = c;
	if (dot) {
		r = jfr_clean(cls, name, (size_t)(dot - name));
		if (r == 0)
			r = jfr_clean(method, dot + 1, head - (size_t)(dot - name) - 1);
	} else {
		r = jfr_clean(method, name, head);
	}
	if (r == 0 && paren)
		r = jfr_clean(desc, paren, end - head);
	if (r < 0)
		return r;
	/* The JVM's internal form: pkg/Cls (jfr and JMC show dots again). */
	for (size_t i = 0; i < cls->len; i++)
		if (cls->data[i] == '.')
			cls->data[i] = '/';
	return 0;
}

/* ---- pool entries -------------------------------------------------------- */

/* Symbol id (>= 1) of text s[0..n); -errno. */
static int64_t jfr_symbol(struct jfr_pools *p, const char *s, size_t n)
{
	int64_t i = jfr_intern(&p->syms, s ? s : "", s ? n : 0, NULL);

	return i < 0 ? i : i + 1;
}

/* Class id of the internal name cls (a Java class: with its package). */
static int64_t jfr_class(struct jfr_pools *p, const char *cls, size_t n, bool java)
{
	const char *slash = java ? memrchr(cls, '/', n) : NULL;
	uint32_t key[2] = { 0, 0 };
	int64_t id = jfr_symbol(p, cls, n);

	if (id >= 0)
		key[0] = (uint32_t)id;
	if (id >= 0 && slash) {
		int64_t name = jfr_symbol(p, cls, (size_t)(slash - cls));

		id = name < 0 ? name : jfr_intern(&p->pkgs, &(uint32_t){ (uint32_t)name }, sizeof(uint32_t), NULL);
		if (id >= 0)
			key[1] = (uint32_t)id + 1;
	}
	if (id >= 0)
		id = jfr_intern(&p->classes, key, sizeof(key), NULL);
	return id < 0 ? id : id + 1;
}

static int64_t jfr_method(struct jfr_pools *p, int64_t cls, const struct buf *name,
			  const struct buf *desc)
{
	uint32_t key[3] = { (uint32_t)cls, 0, 0 };
	int64_t id = jfr_symbol(p, name->data, name->len);

	if (id >= 0) {
		key[1] = (uint32_t)id;
		id = jfr_symbol(p, desc->data, desc->len);
	}
	if (id >= 0) {
		key[2] = (uint32_t)id;
		id = jfr_intern(&p->methods, key, sizeof(key), NULL);
	}
	return id < 0 ? id : id + 1;
}

static bool jfr_kind_is_java(enum frame_kind k)
{
	return k == FRAME_JAVA || k == FRAME_JAVA_INTERP || k == FRAME_JAVA_JIT ||
	       k == FRAME_JAVA_C1 || k == FRAME_JAVA_INLINED;
}

static uint8_t jfr_frame_type(enum frame_kind k)
{
	switch (k) {
	case FRAME_JAVA_INTERP:
		return JFR_FRAME_INTERPRETED;
	case FRAME_JAVA_JIT:
	case FRAME_JAVA_C1:
	case FRAME_JIT_UNKNOWN:
		return JFR_FRAME_JIT;
	case FRAME_JAVA_INLINED:
		return JFR_FRAME_INLINED;
	case FRAME_JAVA:
		return JFR_FRAME_JAVA;
	case FRAME_KERNEL:
		return JFR_FRAME_KERNEL;
	case FRAME_MARKER:
		return JFR_FRAME_MARKER;
	default:
		return JFR_FRAME_NATIVE;
	}
}

/* Fills ref for frame f: Java frames as their class and method; the others
 * as a function of a synthetic class (the module for native code). */
static int jfr_resolve(struct jfr_pools *p, const struct store_frame *f, struct jfr_frame_ref *ref)
{
	struct buf cls = BUF_INIT, name = BUF_INIT, desc = BUF_INIT;
	bool java = jfr_kind_is_java(f->kind);
	int64_t c;
	int r;

	ref->line = -1;
	ref->bci = -1;
	if (java) {
		r = jfr_split_java_name(f->name, &cls, &name, &desc, &ref->line, &ref->bci);
	} else {
		const char *k = f->kind == FRAME_KERNEL ? JFR_CLASS_KERNEL :
				f->kind == FRAME_JIT_UNKNOWN ? JFR_CLASS_JIT :
				f->kind == FRAME_MARKER ? JFR_CLASS_MARKER :
				f->module && *f->module ? NULL : JFR_CLASS_NATIVE;

		r = k ? buf_puts(&cls, k) : export_text(f->module, 0, &cls);
		if (r == 0)
			r = export_frame_name(f, 0, &name);
	}
	if (r == 0 && desc.len == 0)
		r = buf_puts(&desc, java ? JFR_DESC_UNKNOWN : JFR_DESC_NONE);
	if (r < 0)
		goto out;
	c = jfr_class(p, cls.data ? cls.data : "", cls.len, java);
	c = c < 0 ? c : jfr_method(p, c, &name, &desc);
	if (c < 0) {
		r = (int)c;
		goto out;
	}
	if (c > UINT32_MAX) {
		r = -E2BIG;
		goto out;
	}
	ref->method = (uint32_t)c;
	ref->type = jfr_frame_type(f->kind);
	ref->done = true;
out:
	buf_release(&cls);
	buf_release(&name);
	buf_release(&desc);
	return r;
}

int64_t jfr_pools_thread(struct jfr_pools *p, uint32_t pid, uint32_t tid)
{
	uint32_t key[2] = { pid, tid };
	int64_t i = jfr_intern(&p->threads, key, sizeof(key), NULL);

	return i < 0 ? i : i + 1;
}

int64_t jfr_pools_stack(struct jfr_pools *p, uint32_t idx, bool *java)
{
	const struct store_stack *s = store_stack_get(p->st, idx);
	int r = 0;

	*java = false;
	if (!s)
		return -EINVAL;
	for (uint32_t i = 0; i < s->nframes; i++) {
		const struct store_frame *f = store_frame_get(p->st, s->frames[i]);

		if (!f)
			return -EINVAL;
		*java = *java || jfr_kind_is_java(f->kind);
		if (!p->frames[s->frames[i]].done)
			r = jfr_resolve(p, f, &p->frames[s->frames[i]]);
		if (r < 0)
			return r;
	}
	if (s->nframes == 0 && !p->no_stack.done) {
		struct store_frame none = { .kind = FRAME_MARKER, .name = EXPORT_NO_STACK, .module = "" };

		r = jfr_resolve(p, &none, &p->no_stack);
		if (r < 0)
			return r;
	}
	p->stacks[idx] = 1;
	return (int64_t)idx + 1;
}

/* ---- the checkpoint event ------------------------------------------------ */

/* A pool's type and entry count, counted in p->npools. The JDK's reader
 * refuses a pool without entries ("must contain at least one element"):
 * an empty one is left out, its entries' loop writes nothing. */
static int jfr_pool_header(struct jfr_pools *p, struct buf *b, enum jfr_type type, size_t n)
{
	int r;

	if (n == 0)
		return 0;
	r = jfr_put_varint(b, type);
	if (r == 0)
		r = jfr_put_varint(b, n);
	if (r == 0)
		p->npools++;
	return r;
}

static int jfr_write_frame(struct buf *b, const struct jfr_frame_ref *f)
{
	int r = jfr_put_varint(b, f->method);

	if (r == 0)
		r = jfr_put_int(b, f->line);
	if (r == 0)
		r = jfr_put_int(b, f->bci);
	if (r == 0)
		r = jfr_put_varint(b, f->type);
	return r;
}

static int jfr_write_stacks(struct jfr_pools *p, struct buf *b)
{
	size_t n = 0, count = store_stack_count(p->st);
	int r;

	for (size_t i = 0; i < count; i++)
		n += p->stacks[i];
	r = jfr_pool_header(p, b, JFR_T_STACK_TRACE, n);
	for (size_t i = 0; r == 0 && i < count; i++) {
		const struct store_stack *s = store_stack_get(p->st, i);

		if (!p->stacks[i])
			continue;
		r = jfr_put_varint(b, i + 1);
		if (r == 0)
			r = buf_putc(b, 0);  /* truncated: no (the store keeps whole stacks) */
		if (r == 0)
			r = jfr_put_varint(b, s->nframes ? s->nframes : 1);
		if (r == 0 && s->nframes == 0)
			r = jfr_write_frame(b, &p->no_stack);
		/* JFR stacks are leaf first; the store's are root first. */
		for (uint32_t k = s->nframes; r == 0 && k > 0; k--)
			r = jfr_write_frame(b, &p->frames[s->frames[k - 1]]);
	}
	return r;
}

static int jfr_write_threads(struct jfr_pools *p, struct buf *b)
{
	int r = jfr_pool_header(p, b, JFR_T_THREAD, p->threads.n);

	for (size_t i = 0; r == 0 && i < p->threads.n; i++) {
		size_t len;
		const uint32_t *key = (const uint32_t *)jfr_intern_key(&p->threads, i, &len);
		const char *name = store_thread_name(p->st, key[0], key[1]);

		buf_reset(&p->tmp);
		r = name ? export_text(name, 0, &p->tmp) : buf_printf(&p->tmp, "[tid=%u]", key[1]);
		/* id, osName, osThreadId (the tid), javaName, javaThreadId
		 * (java.lang.Thread's id from the agent; 0, as JFR's own for a
		 * thread that is no Java thread, when not known), group
		 * (null), virtual (no) */
		if (r == 0)
			r = jfr_put_varint(b, i + 1);
		if (r == 0)
			r = jfr_put_string_n(b, p->tmp.data, p->tmp.len);
		if (r == 0)
			r = jfr_put_varint(b, key[1]);
		if (r == 0)
			r = jfr_put_string_n(b, p->tmp.data, p->tmp.len);
		if (r == 0)
			r = jfr_put_varints(b, (uint64_t[]){
				store_thread_java_id(p->st, key[0], key[1]), 0, 0 }, 3);
	}
	return r;
}

/* Pools whose entries are u32 ids: packages, classes, methods. */
static int jfr_write_id_pool(struct jfr_pools *p, struct buf *b, const struct jfr_intern *t,
			     enum jfr_type type)
{
	int r = jfr_pool_header(p, b, type, t->n);

	for (size_t i = 0; r == 0 && i < t->n; i++) {
		size_t len;
		const uint32_t *k = (const uint32_t *)jfr_intern_key(t, i, &len);

		/* Booleans are one byte: the varints 0 and 1. */
		if (type == JFR_T_PACKAGE)        /* name, module (null), exported */
			r = jfr_put_varints(b, (uint64_t[]){ i + 1, k[0], 0, 1 }, 4);
		else if (type == JFR_T_CLASS)     /* loader (null), name, package, modifiers, hidden */
			r = jfr_put_varints(b, (uint64_t[]){ i + 1, 0, k[0], k[1], 0, 0 }, 6);
		else                              /* class, name, descriptor, modifiers, hidden */
			r = jfr_put_varints(b, (uint64_t[]){ i + 1, k[0], k[1], k[2], 0, 0 }, 6);
	}
	return r;
}

static int jfr_write_fixed(struct jfr_pools *p, struct buf *b)
{
	int r = jfr_pool_header(p, b, JFR_T_FRAME_TYPE, JFR_FRAME_TYPES);

	for (size_t i = 0; r == 0 && i < JFR_FRAME_TYPES; i++) {
		r = jfr_put_varint(b, i + 1);
		if (r == 0)
			r = jfr_put_string(b, jfr_frame_type_names[i]);
	}
	if (r == 0)
		r = jfr_pool_header(p, b, JFR_T_THREAD_STATE, 1);
	if (r == 0)
		r = jfr_put_varint(b, JFR_STATE_RUNNABLE);
	if (r == 0)
		r = jfr_put_string(b, "STATE_RUNNABLE");
	if (r == 0)
		r = jfr_pool_header(p, b, JFR_T_SYMBOL, p->syms.n);
	for (size_t i = 0; r == 0 && i < p->syms.n; i++) {
		size_t len;
		const char *s = jfr_intern_key(&p->syms, i, &len);

		r = jfr_put_varint(b, i + 1);
		if (r == 0)
			r = jfr_put_string_n(b, s, len);
	}
	return r;
}

int jfr_pools_write(struct jfr_pools *p, struct buf *out, uint64_t start_ticks)
{
	struct buf body = BUF_INIT, pools = BUF_INIT;
	int r;

	p->npools = 0;
	r = jfr_write_fixed(p, &pools);   /* frame types, thread states, symbols */
	if (r == 0)
		r = jfr_write_threads(p, &pools);
	if (r == 0)
		r = jfr_write_stacks(p, &pools);
	if (r == 0)
		r = jfr_write_id_pool(p, &pools, &p->pkgs, JFR_T_PACKAGE);
	if (r == 0)
		r = jfr_write_id_pool(p, &pools, &p->classes, JFR_T_CLASS);
	if (r == 0)
		r = jfr_write_id_pool(p, &pools, &p->methods, JFR_T_METHOD);
	/* Checkpoint: type 1, start, duration 0, no previous checkpoint (delta
	 * 0), type flags 0 (a plain checkpoint), how many pools, the pools. */
	if (r == 0)
		r = jfr_put_varints(&body, (uint64_t[]){ 1, start_ticks, 0, 0, 0, p->npools }, 6);
	if (r == 0)
		r = buf_append(&body, pools.data, pools.len);
	if (r == 0)
		r = jfr_put_sized(out, &body);
	buf_release(&body);
	buf_release(&pools);
	return r;
}
