#include "methods.h"

#include "agent.h"
#include "jprof_agent.h"
#include "htab.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

/* Caps so that a whole JPAG_METHOD fits in one frame: strings are cut (a
 * name longer than this is already unreadable), the line table gets the
 * rest. */
#define METHODS_MAX_STR 8192

static struct htab_map methods_known;  /* jmethodID values (a set: values unused) */
static pthread_mutex_t methods_lock = PTHREAD_MUTEX_INITIALIZER;
static bool methods_oom_logged;

static void methods_free(jvmtiEnv *jvmti, void *p)
{
	if (p)
		(*jvmti)->Deallocate(jvmti, p);
}

void methods_add_class(jvmtiEnv *jvmti, jclass klass)
{
	jmethodID *ids = NULL;
	jint n = 0;
	int ret = 0;

	/* Not yet prepared (GetLoadedClasses lists those too): its
	 * ClassPrepare event will come. */
	if ((*jvmti)->GetClassMethods(jvmti, klass, &n, &ids) != JVMTI_ERROR_NONE)
		return;
	pthread_mutex_lock(&methods_lock);
	for (jint i = 0; i < n && ret == 0; i++)
		if (ids[i])
			ret = htab_map_put(&methods_known, (uint64_t)(uintptr_t)ids[i], 0) < 0 ?
				      -ENOMEM : 0;
	if (ret < 0 && !methods_oom_logged) {
		methods_oom_logged = true;
		agent_warn("out of memory recording method ids; some frames will stay unnamed");
	}
	pthread_mutex_unlock(&methods_lock);
	methods_free(jvmti, ids);
}

void methods_add_loaded(jvmtiEnv *jvmti, JNIEnv *jni)
{
	jclass *classes = NULL;
	jint n = 0;

	if ((*jvmti)->GetLoadedClasses(jvmti, &n, &classes) != JVMTI_ERROR_NONE)
		return;
	for (jint i = 0; i < n; i++) {
		methods_add_class(jvmti, classes[i]);
		/* Local references of an attached native thread live until it
		 * detaches: free each one. */
		(*jni)->DeleteLocalRef(jni, classes[i]);
	}
	methods_free(jvmti, classes);
}

size_t methods_count(void)
{
	size_t n;

	pthread_mutex_lock(&methods_lock);
	n = htab_map_count(&methods_known);
	pthread_mutex_unlock(&methods_lock);
	return n;
}

static bool methods_is_known(uint64_t id)
{
	bool known;

	pthread_mutex_lock(&methods_lock);
	known = htab_map_get(&methods_known, id) != NULL;
	pthread_mutex_unlock(&methods_lock);
	return known;
}

static size_t methods_put_str(unsigned char **p, const char *s)
{
	size_t n = s ? strnlen(s, METHODS_MAX_STR) : 0;

	memcpy(*p, s, n);
	*p += n;
	return n;
}

int methods_describe(jvmtiEnv *jvmti, JNIEnv *jni, uint64_t id, unsigned char *buf, size_t cap)
{
	jmethodID mid = (jmethodID)(uintptr_t)id;
	char *csig = NULL, *name = NULL, *msig = NULL;
	jvmtiLineNumberEntry *lines = NULL;
	struct jpag_method hdr = { .id = id };
	jclass klass = NULL;
	jint nlines = 0;
	unsigned char *p;
	size_t room;
	int ret = -ENOENT;

	if (!id || !methods_is_known(id) || cap < sizeof(hdr) + 3 * METHODS_MAX_STR)
		return -ENOENT;
	if ((*jvmti)->GetMethodDeclaringClass(jvmti, mid, &klass) != JVMTI_ERROR_NONE ||
	    (*jvmti)->GetClassSignature(jvmti, klass, &csig, NULL) != JVMTI_ERROR_NONE ||
	    (*jvmti)->GetMethodName(jvmti, mid, &name, &msig, NULL) != JVMTI_ERROR_NONE)
		goto out;
	/* Absent information and native methods: no table, 0 lines. */
	if ((*jvmti)->GetLineNumberTable(jvmti, mid, &nlines, &lines) != JVMTI_ERROR_NONE) {
		lines = NULL;
		nlines = 0;
	}

	p = buf + sizeof(hdr);
	hdr.class_len = (uint16_t)methods_put_str(&p, csig);
	hdr.name_len = (uint16_t)methods_put_str(&p, name);
	hdr.sig_len = (uint16_t)methods_put_str(&p, msig);
	room = (cap - (size_t)(p - buf)) / sizeof(struct jpag_line);
	if (room > UINT16_MAX)
		room = UINT16_MAX;
	if ((size_t)nlines > room)
		nlines = (jint)room;
	for (jint i = 0; i < nlines; i++) {
		struct jpag_line l = {
			.bci = (int32_t)lines[i].start_location,
			.line = lines[i].line_number,
		};

		memcpy(p, &l, sizeof(l));
		p += sizeof(l);
	}
	hdr.nlines = (uint16_t)nlines;
	memcpy(buf, &hdr, sizeof(hdr));
	ret = (int)(p - buf);
out:
	methods_free(jvmti, csig);
	methods_free(jvmti, name);
	methods_free(jvmti, msig);
	methods_free(jvmti, lines);
	if (klass)
		(*jni)->DeleteLocalRef(jni, klass);
	return ret;
}
