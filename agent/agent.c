/* libjprofagent.so entry points: options, JVMTI capabilities and events.
 *
 * Loaded at startup (-agentpath:...=socket=PATH, Agent_OnLoad; the agent
 * thread starts at VMInit) or by jprofd through the attach mechanism
 * (Agent_OnAttach; starts at once). A later attach of the same library is
 * a no-op apart from "reconnect now". Options: comma-separated key=value,
 * socket=PATH (default /run/jprofd/jprofd.sock), verbose=1.
 */
#include "agent.h"

#include "codemap.h"
#include "link.h"
#include "methods.h"
#include "ring.h"
#include "threads.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define AGENT_DEFAULT_SOCKET "/run/jprofd/jprofd.sock"
#define AGENT_PATH_MAX 108   /* sun_path */

JavaVM *agent_vm;
jvmtiEnv *agent_jvmti;
bool agent_verbose;

static pthread_mutex_t agent_lock = PTHREAD_MUTEX_INITIALIZER;
static bool agent_ready;

static void agent_vlog(const char *fmt, va_list ap)
{
	char line[512];

	vsnprintf(line, sizeof(line), fmt, ap);
	/* One write: lines from several threads do not interleave. */
	dprintf(STDERR_FILENO, "jprofagent: %s\n", line);
}

void agent_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	agent_vlog(fmt, ap);
	va_end(ap);
}

void agent_debug(const char *fmt, ...)
{
	va_list ap;

	if (!agent_verbose)
		return;
	va_start(ap, fmt);
	agent_vlog(fmt, ap);
	va_end(ap);
}

void *agent_jvm_sym(const char *name)
{
	void *sym = dlsym(RTLD_DEFAULT, name);
	Dl_info info;
	void *jvm;

	if (sym || !agent_vm)
		return sym;
	/* libjvm may not be global: find it through one of its JNI functions. */
	if (dladdr((void *)(*agent_vm)->GetEnv, &info) && info.dli_fname) {
		jvm = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
		if (jvm)
			sym = dlsym(jvm, name);
		/* Keep the reference: libjvm is never unloaded anyway. */
	}
	return sym;
}

bool agent_peek(uintptr_t addr, void *out, size_t len)
{
	struct iovec local = { .iov_base = out, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)addr, .iov_len = len };

	if (!addr)
		return false;
	return syscall(SYS_process_vm_readv, (long)getpid(), &local, 1ul, &remote, 1ul, 0ul) ==
	       (long)len;
}

struct agent_opts {
	char socket[AGENT_PATH_MAX];
	bool has_socket;
	bool verbose;
};

static int agent_parse_opts(const char *s, struct agent_opts *o)
{
	memset(o, 0, sizeof(*o));
	strcpy(o->socket, AGENT_DEFAULT_SOCKET);
	while (s && *s) {
		size_t n = strcspn(s, ",");
		const char *eq = memchr(s, '=', n);
		size_t klen = eq ? (size_t)(eq - s) : n;
		const char *v = eq ? eq + 1 : s + n;
		size_t vlen = (size_t)(s + n - v);

		if (klen == 6 && !strncmp(s, "socket", 6)) {
			if (!vlen || vlen >= sizeof(o->socket))
				return -ENAMETOOLONG;
			memcpy(o->socket, v, vlen);
			o->socket[vlen] = '\0';
			o->has_socket = true;
		} else if (klen == 7 && !strncmp(s, "verbose", 7)) {
			o->verbose = !(vlen == 1 && v[0] == '0');
		}
		/* Unknown keys are ignored: a newer daemon may pass more. */
		s += n;
		if (*s == ',')
			s++;
	}
	return 0;
}

static void JNICALL agent_on_vm_init(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread)
{
	int ret = link_start();

	if (ret < 0)
		agent_warn("cannot start the agent thread: %s", strerror(-ret));
}

static void JNICALL agent_on_vm_death(jvmtiEnv *jvmti, JNIEnv *jni)
{
	link_vm_death();
}

/* Enabled only because AsyncGetCallTrace refuses to walk without it. */
static void JNICALL agent_on_class_load(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread,
					jclass klass)
{
}

static void JNICALL agent_on_class_prepare(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread,
					   jclass klass)
{
	methods_add_class(jvmti, klass);
}

static void JNICALL agent_on_thread_start(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread)
{
	char name[JPAG_THREAD_NAME_MAX + 1];

	/* JVMTI only while recording: a JVM that is not recorded pays nothing. */
	if (!link_is_recording())
		return;
	link_thread_event((uint32_t)syscall(SYS_gettid), true,
			  threads_name(jvmti, jni, thread, name, sizeof(name)) > 0 ? name : NULL,
			  threads_java_id(jni, thread));
}

static void JNICALL agent_on_thread_end(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread)
{
	link_thread_event((uint32_t)syscall(SYS_gettid), false, NULL, 0);
}

static int agent_setup_jvmti(bool live)
{
	static const jvmtiEvent events[] = {
		JVMTI_EVENT_CLASS_LOAD, JVMTI_EVENT_CLASS_PREPARE, JVMTI_EVENT_THREAD_START,
		JVMTI_EVENT_THREAD_END, JVMTI_EVENT_VM_DEATH,
	};
	jvmtiEventCallbacks cb = {
		.VMInit = agent_on_vm_init,
		.VMDeath = agent_on_vm_death,
		.ClassLoad = agent_on_class_load,
		.ClassPrepare = agent_on_class_prepare,
		.ThreadStart = agent_on_thread_start,
		.ThreadEnd = agent_on_thread_end,
	};
	jvmtiCapabilities caps = { .can_get_line_numbers = 1 };
	jvmtiEnv *jvmti = agent_jvmti;
	jvmtiError err;
	bool typed;

	/* Without it methods simply have no line table. */
	if ((*jvmti)->AddCapabilities(jvmti, &caps) != JVMTI_ERROR_NONE)
		agent_debug("no line numbers (can_get_line_numbers unavailable)");
	/* Without it Java frames have no type (interpreted, compiled...). */
	typed = codemap_setup(jvmti, &cb);
	if (!typed)
		agent_debug("no frame types (compiled method events unavailable)");
	err = (*jvmti)->SetEventCallbacks(jvmti, &cb, sizeof(cb));
	if (err != JVMTI_ERROR_NONE)
		goto out;
	for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
		err = (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, events[i], NULL);
		if (err != JVMTI_ERROR_NONE)
			goto out;
	}
	for (size_t i = 0; typed && i < sizeof(codemap_events) / sizeof(codemap_events[0]); i++)
		if ((*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, codemap_events[i],
						       NULL) != JVMTI_ERROR_NONE)
			agent_debug("no frame types (event %d)", codemap_events[i]);
	if (!live)
		err = (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE,
							 JVMTI_EVENT_VM_INIT, NULL);
out:
	if (err != JVMTI_ERROR_NONE) {
		agent_warn("JVMTI setup failed (error %d)", err);
		return -EINVAL;
	}
	return 0;
}

static jint agent_init(JavaVM *vm, const char *options, bool live)
{
	struct agent_opts o;
	jint ret = JNI_ERR;
	int err;

	pthread_mutex_lock(&agent_lock);
	if (agent_parse_opts(options, &o) < 0) {
		agent_warn("bad options \"%s\" (socket path too long or empty)", options);
		goto out;
	}
	if (agent_ready) {
		/* Same library, loaded again (a daemon's attach after
		 * -agentpath, or a second attach): no second setup. */
		agent_verbose = agent_verbose || o.verbose;
		agent_debug("already loaded; reconnecting if needed");
		link_kick(o.has_socket ? o.socket : NULL);
		ret = JNI_OK;
		goto out;
	}
	agent_verbose = o.verbose;
	agent_vm = vm;
	ret = (*vm)->GetEnv(vm, (void **)&agent_jvmti, JVMTI_VERSION_1_2);
	if (ret != JNI_OK) {
		/* Its code is ours: JNI_EDETACHED from a JVM still starting
		 * (JVMTI not live yet) tells the daemon to try again later. */
		agent_warn("no JVMTI environment (GetEnv: %d)", (int)ret);
		goto out;
	}
	ret = JNI_ERR;
	if (ring_init() < 0)
		agent_warn("AsyncGetCallTrace not found: samples will have no Java frames");
	if (codemap_init() < 0)
		agent_debug("no memory for the code map: Java frames will have no type");
	err = link_init(o.socket);
	if (err < 0) {
		agent_warn("cannot initialize: %s", strerror(-err));
		goto out;
	}
	if (agent_setup_jvmti(live) < 0)
		goto out;
	if (live) {
		err = link_start();
		if (err < 0) {
			agent_warn("cannot start the agent thread: %s", strerror(-err));
			goto out;
		}
	}
	agent_ready = true;
	agent_debug("loaded (%s), socket %s", live ? "attach" : "startup", o.socket);
	ret = JNI_OK;
out:
	pthread_mutex_unlock(&agent_lock);
	return ret;
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved)
{
	return agent_init(vm, options, false);
}

JNIEXPORT jint JNICALL Agent_OnAttach(JavaVM *vm, char *options, void *reserved)
{
	return agent_init(vm, options, true);
}

JNIEXPORT void JNICALL Agent_OnUnload(JavaVM *vm)
{
	/* Only at VM exit: VMDeath already quiesced the handler. */
}
