/* Method ids and their names: the join's second half (see jvmjoin.h).
 * Ids come from the ring, names from the agent: both are hostile input, so
 * only ids seen in joined samples are tracked (at most max_methods), only
 * those are asked about, and names are cleaned before use. */
#include "jvmjoin_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jmethod *jvm_join_method_get(const struct jvm_join *j, uint64_t id)
{
	const uint64_t *idx = id ? htab_map_get(&j->m_of_id, id) : NULL;

	return idx ? &j->m[*idx] : NULL;
}

static struct jmethod *method_add(struct jvm_join *j, uint64_t id)
{
	struct jmethod *m = jvm_join_method_get(j, id);

	if (m || id == 0)
		return m;
	if (j->nm >= j->o.max_methods)
		return NULL;
	m = jvm_join_table_get(j, &j->m_of_id, id, true, (void **)&j->m, &j->nm, &j->mcap,
			       sizeof(*j->m));
	if (m)
		m->id = id;
	return m;
}

bool jvm_join_frame_settled(const struct jvm_join *j, const struct jvm_frame *f)
{
	const struct jmethod *m = jvm_join_method_get(j, f->method_id);

	return !m || m->state == M_NAMED || m->state == M_UNKNOWN;
}

void jvm_join_want(struct jvm_join *j, const struct jvm_frame *f, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct jmethod *m = method_add(j, f[i].method_id);

		if (!m) {
			if (f[i].method_id)
				j->st.frames_over_methods++;
			continue;
		}
		if (m->state != M_NEW)
			continue;
		/* Compact the handed-out part away before growing. */
		if (j->wanted_head && j->nwanted == j->capwanted) {
			jvm_join_move(j->wanted, j->wanted + j->wanted_head,
				      (j->nwanted - j->wanted_head) * sizeof(uint64_t));
			j->nwanted -= j->wanted_head;
			j->wanted_head = 0;
		}
		if (jvm_join_grow(j, (void **)&j->wanted, &j->capwanted, j->nwanted + 1,
				  sizeof(uint64_t)) < 0)
			continue;  /* stays M_NEW: asked for by a later sample */
		m->state = M_ASKED;
		j->unanswered++;
		j->wanted[j->nwanted++] = m->id;
	}
}

unsigned jvm_join_wanted(struct jvm_join *j, uint64_t *ids, unsigned max)
{
	size_t left = j->nwanted - j->wanted_head;
	unsigned n = left < max ? (unsigned)left : max;

	if (n == 0)
		return 0;  /* wanted may still be NULL, and NULL + 0 is undefined */
	jvm_join_move(ids, j->wanted + j->wanted_head, n * sizeof(uint64_t));
	j->wanted_head += n;
	if (j->wanted_head == j->nwanted)
		j->wanted_head = j->nwanted = 0;
	return n;
}

size_t jvm_join_unanswered(const struct jvm_join *j)
{
	return j->unanswered;
}

void jvm_join_methods_free(struct jvm_join *j)
{
	for (size_t i = 0; i < j->nm; i++) {
		free(j->m[i].cls);
		free(j->m[i].name);
		free(j->m[i].sig);
		free(j->m[i].lines);
	}
	free(j->m);
	free(j->wanted);
	htab_map_release(&j->m_of_id);
}

/* Java names come from the profiled process: keep them printable UTF-8. */
static char *clean_text(const char *s, size_t len, bool jvm_class)
{
	char *out = malloc(len + 1), *o = out;
	size_t i = 0;

	if (!out)
		return NULL;
	if (jvm_class && len >= 2 && s[0] == 'L' && s[len - 1] == ';') {
		s++;
		len -= 2;
	}
	while (i < len) {
		unsigned char c = (unsigned char)s[i];
		size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 :
			   (c & 0xf8) == 0xf0 ? 4 : 0;
		bool ok = n > 0 && i + n <= len;

		for (size_t k = 1; ok && k < n; k++)
			ok = ((unsigned char)s[i + k] & 0xc0) == 0x80;
		if (!ok || (n == 1 && (c < 0x20 || c == 0x7f))) {
			*o++ = '?';
			i++;
			continue;
		}
		if (n == 1 && jvm_class && c == '/')
			*o++ = '.';
		else
			memcpy(o, s + i, n), o += n;
		i += n;
	}
	*o = '\0';
	return out;
}

char *jvm_join_class_name(const char *sig, size_t len)
{
	static const char prim[] = "ZBCSIJFD";
	static const char *const prim_name[] = { "boolean", "byte", "char", "short",
						 "int", "long", "float", "double" };
	size_t dims = 0, blen, total;
	const char *p;
	char *base, *out;

	while (dims < len && sig[dims] == '[')
		dims++;
	if (dims == len)
		return clean_text(sig, len, false);   /* not a signature: shown as sent */
	if (dims && len - dims == 1 && (p = memchr(prim, sig[dims], sizeof(prim) - 1)))
		base = strdup(prim_name[p - prim]);
	else
		base = clean_text(sig + dims, len - dims, true);
	if (!base || !dims)
		return base;
	blen = strlen(base);
	total = blen + 2 * dims + 1;
	out = realloc(base, total);
	if (!out) {
		free(base);
		return NULL;
	}
	for (size_t i = 0; i < dims; i++)
		memcpy(out + blen + 2 * i, "[]", 2);
	out[total - 1] = '\0';
	return out;
}

/* Bytes of a name as clean_text stores it. */
static size_t text_bytes(const char *s)
{
	return s ? strlen(s) + 1 : 0;
}

void jvm_join_method(struct jvm_join *j, uint64_t id, const char *cls, size_t cls_len,
		     const char *name, size_t name_len, const char *sig, size_t sig_len,
		     const struct jpag_line *lines, unsigned nlines, bool unknown)
{
	struct jmethod *m = jvm_join_method_get(j, id);

	/* Only ids we asked about: an agent cannot fill the table with junk. */
	if (!m || m->state == M_NAMED || m->state == M_UNKNOWN)
		return;
	if (m->state == M_ASKED)
		j->unanswered--;
	j->names_changed = true;
	/* Past the bounds, a name is as good as unknown. */
	if (unknown ||
	    jvm_join_bytes_fit(j, cls_len + name_len + sig_len + 3 + nlines * sizeof(*lines), true) < 0) {
		m->state = M_UNKNOWN;
		j->st.methods_unknown++;
		return;
	}
	m->cls = clean_text(cls, cls_len, true);
	m->name = clean_text(name, name_len, false);
	m->sig = clean_text(sig, sig_len, false);
	jvm_join_bytes_add(j, text_bytes(m->cls) + text_bytes(m->name) + text_bytes(m->sig));
	if (nlines) {
		m->lines = malloc(nlines * sizeof(*m->lines));
		if (m->lines) {
			memcpy(m->lines, lines, nlines * sizeof(*m->lines));
			m->nlines = nlines;
			jvm_join_bytes_add(j, nlines * sizeof(*m->lines));
		}
	}
	m->state = (m->cls && m->name && m->sig) ? M_NAMED : M_UNKNOWN;
	j->st.methods_named++;
}

int jvm_join_thread_name(struct jvm_join *j, uint32_t host_tid, const char *name, size_t len)
{
	struct tname *t = NULL;
	char *clean;
	int r;

	if (!host_tid || !len || len > JPAG_THREAD_NAME_MAX)
		return -EINVAL;
	if (j->ntn >= j->o.max_tids && !htab_map_get(&j->tn_of_tid, host_tid))
		return -E2BIG;
	r = jvm_join_bytes_fit(j, len + 1, true);
	if (r < 0)
		return r;
	clean = clean_text(name, len, false);
	if (clean)
		t = jvm_join_table_get(j, &j->tn_of_tid, host_tid, true, (void **)&j->tn, &j->ntn,
				       &j->tncap, sizeof(*j->tn));
	if (!t) {
		free(clean);
		return -ENOMEM;
	}
	if (t->name) {
		j->bytes -= text_bytes(t->name);
		free(t->name);
	}
	t->tid = host_tid;
	t->name = clean;
	jvm_join_bytes_add(j, text_bytes(clean));
	return 0;
}

int jvm_join_thread_java_id(struct jvm_join *j, uint32_t host_tid, uint64_t java_id)
{
	struct tname *t;

	if (!host_tid || !java_id)
		return -EINVAL;
	t = jvm_join_table_get(j, &j->tn_of_tid, host_tid, false, (void **)&j->tn, &j->ntn,
			       &j->tncap, sizeof(*j->tn));
	if (!t)
		return -ENOENT;
	t->java_id = java_id;
	return 0;
}

uint64_t jvm_join_thread_java_id_of(const struct jvm_join *j, uint32_t host_tid)
{
	const uint64_t *i = host_tid ? htab_map_get(&j->tn_of_tid, host_tid) : NULL;

	return i ? j->tn[*i].java_id : 0;
}

bool jvm_join_has_thread(const struct jvm_join *j, uint32_t host_tid)
{
	return host_tid && htab_map_get(&j->tn_of_tid, host_tid) != NULL;
}

void jvm_join_each_thread_name(const struct jvm_join *j,
			       void (*fn)(uint32_t host_tid, const char *name, void *arg), void *arg)
{
	for (size_t i = 0; i < j->ntn; i++)
		if (j->tn[i].name)
			fn(j->tn[i].tid, j->tn[i].name, arg);
}

/* ---- naming ---- */

const char *jvm_join_stub_marker(uint64_t kind)
{
	/* Indexed by enum jpring_stub_kind; the ring is the agent's to write,
	 * so any other value is an unknown leaf. */
	static const char *const names[JPRING_STUB_KINDS] = {
		[JPRING_STUB_UNKNOWN] = "[unknown_java_leaf]",
		[JPRING_STUB_OTHER] = "[stub]",
		[JPRING_STUB_VTABLE] = "[vtable stub]",
		[JPRING_STUB_ITABLE] = "[itable stub]",
		[JPRING_STUB_METHOD_HANDLE] = "[method handle adapter]",
		[JPRING_STUB_CALL] = "[call_stub]",
		[JPRING_STUB_ADAPTER] = "[i2c/c2i adapter]",
		[JPRING_STUB_INTERPRETER] = "[interpreter]",
		[JPRING_STUB_ARRAYCOPY] = "[arraycopy stub]",
		[JPRING_STUB_RESOLVE] = "[resolve stub]",
		[JPRING_STUB_DISPATCH] = "[vtable/itable stub]",
		[JPRING_STUB_INVOKE_BASIC] = "[MethodHandle.invokeBasic]",
		[JPRING_STUB_LINK_TO_VIRTUAL] = "[MethodHandle.linkToVirtual]",
		[JPRING_STUB_LINK_TO_STATIC] = "[MethodHandle.linkToStatic]",
		[JPRING_STUB_LINK_TO_SPECIAL] = "[MethodHandle.linkToSpecial]",
		[JPRING_STUB_LINK_TO_INTERFACE] = "[MethodHandle.linkToInterface]",
		[JPRING_STUB_LINK_TO_NATIVE] = "[MethodHandle.linkToNative]",
	};

	return kind < JPRING_STUB_KINDS ? names[kind] : names[JPRING_STUB_UNKNOWN];
}

const char *jvm_join_error_marker(int32_t code)
{
	switch (code) {
	case JPRING_NO_CLASS_LOAD:
		return "[no_class_load]";
	case JPRING_GC_ACTIVE:
		return "[gc_active]";
	case JPRING_UNKNOWN_NOT_JAVA:
	case JPRING_NOT_WALKABLE_NOT_JAVA:
		return NULL;  /* not a Java thread: its native stack says it all */
	case JPRING_UNKNOWN_JAVA:
		return "[unknown_java]";
	case JPRING_NOT_WALKABLE_JAVA:
		return "[not_walkable_java]";
	case JPRING_UNKNOWN_STATE:
		return "[unknown_state]";
	case JPRING_THREAD_EXIT:
		return "[thread_exit]";
	case JPRING_DEOPT:
		return "[deoptimization]";
	case JPRING_SAFEPOINT:
		return "[safepoint]";
	default:
		return "[java_error]";
	}
}

/* The line of bci in m's table, or -1: the entry that starts last at or
 * before bci (tables need not be sorted). */
static int32_t jvm_join_line_of(const struct jmethod *m, int32_t bci)
{
	int32_t line = -1, best = -1;

	for (unsigned i = 0; bci >= 0 && i < m->nlines; i++) {
		if (m->lines[i].bci <= bci && m->lines[i].bci > best) {
			best = m->lines[i].bci;
			line = m->lines[i].line;
		}
	}
	return line;
}

size_t jvm_join_frame_name(const struct jvm_join *j, const struct jvm_frame *f, char *buf,
			   size_t len)
{
	const struct jmethod *m = jvm_join_method_get(j, f->method_id);
	int n;

	if (!m && f->method_id && j->st.frames_over_methods) {
		/* Every id of an emitted sample was added, unless a bound refused it. */
		n = snprintf(buf, len, "[java_method_limit]");
	} else if (!m || m->state != M_NAMED) {
		n = snprintf(buf, len, "[unknown_java_method]");
	} else if (j->o.positions) {
		int32_t line = jvm_join_line_of(m, f->bci);

		n = snprintf(buf, len, "%s.%s%s", m->cls, m->name, j->o.signatures ? m->sig : "");
		if (n >= 0 && (size_t)n < len && line >= 0)
			n += snprintf(buf + n, len - (size_t)n, ":%d", line);
		if (n >= 0 && (size_t)n < len && f->bci >= 0)
			n += snprintf(buf + n, len - (size_t)n, "@%d", f->bci);
	} else if (j->o.signatures) {
		n = snprintf(buf, len, "%s.%s%s", m->cls, m->name, m->sig);
	} else if (j->o.lines && m->nlines && f->bci >= 0) {
		int32_t line = jvm_join_line_of(m, f->bci);

		n = line >= 0 ? snprintf(buf, len, "%s.%s:%d", m->cls, m->name, line)
			      : snprintf(buf, len, "%s.%s", m->cls, m->name);
	} else {
		n = snprintf(buf, len, "%s.%s", m->cls, m->name);
	}
	if (n < 0)
		return 0;
	return (size_t)n >= len ? len - 1 : (size_t)n;
}
