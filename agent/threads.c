/* Java thread names and the OS tids they belong to.
 *
 * A new thread is easy: ThreadStart runs on it, so gettid() is its tid. A
 * thread that already ran when the agent came has no JVMTI call that gives
 * its tid; the JVM knows it, though: java.lang.Thread.eetop holds the
 * thread's JavaThread, whose OSThread holds the tid. The offsets of those two
 * fields come from the table the JVM exports for its serviceability agent
 * (gHotSpotVMStructs); a JVM without it (not HotSpot, or a build that lacks
 * a field) simply gets names for new threads only. Every read of JVM memory
 * goes through agent_peek (process_vm_readv), so a thread that exits under our feet costs
 * a failed read, never a fault.
 */
#include "threads.h"

#include "agent.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct threads_offsets {
	bool tried, ok;
	jfieldID eetop;        /* java.lang.Thread.eetop (long) */
	uint64_t osthread;     /* Thread::_osthread (or JavaThread::_osthread) */
	uint64_t thread_id;    /* OSThread::_thread_id (pid_t on Linux) */
};

static struct threads_offsets threads_off;   /* the agent thread's */

static bool threads_sym_u64(const char *name, uint64_t *out)
{
	const uint64_t *p = agent_jvm_sym(name);

	return p && agent_peek((uintptr_t)p, out, sizeof(*out));
}

/* Reads a NUL-terminated string of the VMStructs table (short names only). */
static bool threads_peek_str(uintptr_t addr, char *buf, size_t cap)
{
	if (!agent_peek(addr, buf, cap - 1)) {
		/* Near the end of a mapping: try a shorter read. */
		if (!agent_peek(addr, buf, 16))
			return false;
		buf[16] = '\0';
		return true;
	}
	buf[cap - 1] = '\0';
	return true;
}

/* The offsets of Thread::_osthread and OSThread::_thread_id. */
static bool threads_find_fields(uint64_t *osthread, uint64_t *thread_id)
{
	uint64_t type_off, field_off, offset_off, static_off, stride;
	const uintptr_t *table = agent_jvm_sym("gHotSpotVMStructs");
	uintptr_t e;
	bool have_os = false, have_id = false;

	if (!table || !threads_sym_u64("gHotSpotVMStructEntryTypeNameOffset", &type_off) ||
	    !threads_sym_u64("gHotSpotVMStructEntryFieldNameOffset", &field_off) ||
	    !threads_sym_u64("gHotSpotVMStructEntryOffsetOffset", &offset_off) ||
	    !threads_sym_u64("gHotSpotVMStructEntryIsStaticOffset", &static_off) ||
	    !threads_sym_u64("gHotSpotVMStructEntryArrayStride", &stride) || !stride ||
	    !agent_peek((uintptr_t)table, &e, sizeof(e)))
		return false;
	/* The table ends with an entry whose type name is NULL; a bound
	 * anyway (JDK 17 has about 2,000 entries). */
	for (unsigned i = 0; i < 100000; i++, e += stride) {
		uintptr_t tname, fname;
		char t[32], f[32];
		int32_t is_static;
		uint64_t off;

		if (!agent_peek(e + type_off, &tname, sizeof(tname)) || !tname)
			break;
		if (!agent_peek(e + field_off, &fname, sizeof(fname)) || !fname ||
		    !agent_peek(e + static_off, &is_static, sizeof(is_static)) || is_static ||
		    !threads_peek_str(tname, t, sizeof(t)) || !threads_peek_str(fname, f, sizeof(f)))
			continue;
		if (!agent_peek(e + offset_off, &off, sizeof(off)))
			continue;
		if ((!strcmp(t, "Thread") || !strcmp(t, "JavaThread")) && !strcmp(f, "_osthread")) {
			*osthread = off;
			have_os = true;
		} else if (!strcmp(t, "OSThread") && !strcmp(f, "_thread_id")) {
			*thread_id = off;
			have_id = true;
		}
		if (have_os && have_id)
			return true;
	}
	return false;
}

static bool threads_setup(JNIEnv *jni)
{
	struct threads_offsets *o = &threads_off;
	jclass cls;

	if (o->tried)
		return o->ok;
	o->tried = true;
	cls = (*jni)->FindClass(jni, "java/lang/Thread");
	if (cls) {
		o->eetop = (*jni)->GetFieldID(jni, cls, "eetop", "J");
		(*jni)->DeleteLocalRef(jni, cls);
	}
	if ((*jni)->ExceptionCheck(jni))
		(*jni)->ExceptionClear(jni);
	o->ok = o->eetop && threads_find_fields(&o->osthread, &o->thread_id);
	if (!o->ok)
		agent_debug("no tids for threads started before the agent (JVM structures not found)");
	return o->ok;
}

/* The tid of a running java.lang.Thread, or 0. */
static uint32_t threads_tid_of(JNIEnv *jni, jthread t)
{
	const struct threads_offsets *o = &threads_off;
	jlong eetop = (*jni)->GetLongField(jni, t, o->eetop);
	uintptr_t osthread;
	int32_t tid;
	char path[48];

	if (!eetop || !agent_peek((uintptr_t)eetop + o->osthread, &osthread, sizeof(osthread)) ||
	    !agent_peek(osthread + o->thread_id, &tid, sizeof(tid)) || tid <= 0)
		return 0;
	/* A thread that ended meanwhile leaves eetop 0 (and its memory may be
	 * reused): only a tid read while eetop stayed put, of a thread of
	 * ours, counts. */
	if ((*jni)->GetLongField(jni, t, o->eetop) != eetop)
		return 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid);
	return access(path, F_OK) == 0 ? (uint32_t)tid : 0;
}

/* java.lang.Thread.tid, found once by whichever thread asks first (a
 * field id stays valid as long as its class, and Thread is never
 * unloaded); a read, not a call of getId(), which a subclass may override
 * in JDK 17. */
static jfieldID threads_tid_field;
static int threads_tid_tried;

uint64_t threads_java_id(JNIEnv *jni, jthread t)
{
	jfieldID f = __atomic_load_n(&threads_tid_field, __ATOMIC_ACQUIRE);
	jclass cls;
	jlong id;

	if (!t)
		return 0;
	if (!f && !__atomic_exchange_n(&threads_tid_tried, 1, __ATOMIC_ACQ_REL)) {
		cls = (*jni)->FindClass(jni, "java/lang/Thread");
		f = cls ? (*jni)->GetFieldID(jni, cls, "tid", "J") : NULL;
		if ((*jni)->ExceptionCheck(jni))
			(*jni)->ExceptionClear(jni);
		if (cls)
			(*jni)->DeleteLocalRef(jni, cls);
		if (!f)
			agent_debug("java.lang.Thread has no tid field: no Java thread ids");
		__atomic_store_n(&threads_tid_field, f, __ATOMIC_RELEASE);
	}
	if (!f)
		return 0;
	id = (*jni)->GetLongField(jni, t, f);
	return id > 0 ? (uint64_t)id : 0;
}

int threads_name(jvmtiEnv *jvmti, JNIEnv *jni, jthread t, char *buf, size_t cap)
{
	jvmtiThreadInfo info;
	size_t n;

	memset(&info, 0, sizeof(info));
	if (cap == 0 || (*jvmti)->GetThreadInfo(jvmti, t, &info) != JVMTI_ERROR_NONE)
		return -ENOENT;
	n = info.name ? strnlen(info.name, cap - 1) : 0;
	memcpy(buf, info.name ? info.name : "", n);
	buf[n] = '\0';
	if (info.name)
		(*jvmti)->Deallocate(jvmti, (unsigned char *)info.name);
	if (info.thread_group)
		(*jni)->DeleteLocalRef(jni, info.thread_group);
	if (info.context_class_loader)
		(*jni)->DeleteLocalRef(jni, info.context_class_loader);
	return n ? (int)n : -ENOENT;
}

int threads_each(jvmtiEnv *jvmti, JNIEnv *jni, threads_fn fn, void *arg)
{
	jthread *all = NULL;
	jint n = 0;
	int ret = 0;

	if (!threads_setup(jni))
		return 0;
	if ((*jvmti)->GetAllThreads(jvmti, &n, &all) != JVMTI_ERROR_NONE)
		return 0;
	for (jint i = 0; i < n; i++) {
		char name[JPAG_THREAD_NAME_MAX + 1];
		uint32_t tid = ret == 0 ? threads_tid_of(jni, all[i]) : 0;
		int len = tid ? threads_name(jvmti, jni, all[i], name, sizeof(name)) : -ENOENT;

		if (len > 0)
			ret = fn(tid, name, (size_t)len, threads_java_id(jni, all[i]), arg);
		(*jni)->DeleteLocalRef(jni, all[i]);
	}
	(*jvmti)->Deallocate(jvmti, (unsigned char *)all);
	return ret;
}
