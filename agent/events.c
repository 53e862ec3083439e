/* Allocation and lock samples (see events.h). Records are queued in a few
 * fixed batches, each one JPAG_EVENTS payload: a callback never allocates
 * and never blocks on the socket; when every batch is full, records are
 * dropped and counted rather than slowing the application down. */
#include "events.h"

#include "agent.h"
#include "jprof_agent.h"
#include "link.h"
#include "park.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EVENTS_NBATCH 16
#define EVENTS_BATCH_BYTES (JPAG_MAX_PAYLOAD - 64)
/* HotSpot's own default heap sampling interval: what events_off restores
 * (JVMTI has no getter for the interval another agent may have set). */
#define EVENTS_JVM_DEFAULT_INTERVAL (512 * 1024)

struct events_batch {
	uint32_t count;
	size_t len;               /* bytes after the struct jpag_events header */
	unsigned char data[EVENTS_BATCH_BYTES];
};

static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static struct events_batch events_q[EVENTS_NBATCH];
static unsigned events_head, events_used;    /* oldest batch, batches holding records */
static uint64_t events_dropped;
static uint32_t events_kind;                 /* enum jpag_event bits of the events on */

/* Read by the callbacks without the lock. */
static uint64_t events_lock_threshold_ns;
static uint32_t events_gen;                  /* atomic: one more at every events_on */
/* Per thread, from MonitorContendedEnter to ...Entered: its time and the
 * events_gen it was taken under, in two pthread keys without destructors
 * (values, not pointers). Not __thread: a library with thread-local storage
 * makes its dlopen into a running JVM change every thread's TLS vector
 * (glibc resizes it at the thread's next dynamic TLS access), work this
 * agent has no business causing in a process it was loaded into late. */
static pthread_key_t events_key_ns, events_key_gen;

/* Agent thread only. */
static jvmtiEnv *events_jvmti;
static jvmtiCapabilities events_caps;        /* held now */
static unsigned char events_tx[JPAG_MAX_PAYLOAD] __attribute__((aligned(16)));

/* Appends one record (header, class, frames) to the newest batch. */
static void events_queue(uint32_t kind, uint64_t value, const char *cls,
			 const jvmtiFrameInfo *fi, jint nframes)
{
	struct jpag_event_rec rec = {
		.event = kind,
		.tid = (uint32_t)syscall(SYS_gettid),
		.time_ns = agent_now_ns(),
		.value = value,
	};
	size_t clen = cls ? strnlen(cls, JPAG_EVENT_CLASS_MAX) : 0;
	size_t cpad = (clen + 7) & ~(size_t)7;
	size_t need;
	struct events_batch *b;
	bool wake = false;

	if (nframes < 0)
		nframes = 0;
	rec.nframes = (uint16_t)nframes;
	rec.class_len = (uint16_t)clen;
	need = sizeof(rec) + cpad + (size_t)nframes * sizeof(struct jpring_frame);
	pthread_mutex_lock(&events_lock);
	if (!(events_kind & kind))
		goto out;   /* turned off while this callback ran */
	b = events_used ? &events_q[(events_head + events_used - 1) % EVENTS_NBATCH] : NULL;
	if (!b || b->len + need > sizeof(b->data)) {
		if (events_used == EVENTS_NBATCH) {
			events_dropped++;
			goto out;
		}
		b = &events_q[(events_head + events_used++) % EVENTS_NBATCH];
		b->count = 0;
		b->len = 0;
		/* A full batch: no need to wait for the periodic flush. */
		wake = events_used > 1;
	}
	memcpy(b->data + b->len, &rec, sizeof(rec));
	b->len += sizeof(rec);
	memset(b->data + b->len, 0, cpad);
	memcpy(b->data + b->len, cls, clen);
	b->len += cpad;
	for (jint i = 0; i < nframes; i++) {
		struct jpring_frame f = {
			.bci = (int32_t)fi[i].location,
			.method_id = (uint64_t)(uintptr_t)fi[i].method,
		};

		memcpy(b->data + b->len, &f, sizeof(f));
		b->len += sizeof(f);
	}
	b->count++;
out:
	pthread_mutex_unlock(&events_lock);
	if (wake)
		link_notify();
}

/* The stack of the current thread and klass's signature, queued. */
static void events_record(jvmtiEnv *jvmti, uint32_t kind, uint64_t value, jclass klass)
{
	jvmtiFrameInfo fi[JPAG_EVENT_MAX_FRAMES];
	jint n = 0;
	char *sig = NULL;

	if ((*jvmti)->GetStackTrace(jvmti, NULL, 0, JPAG_EVENT_MAX_FRAMES, fi, &n) !=
	    JVMTI_ERROR_NONE)
		n = 0;
	if (klass && (*jvmti)->GetClassSignature(jvmti, klass, &sig, NULL) != JVMTI_ERROR_NONE)
		sig = NULL;
	events_queue(kind, value, sig, fi, n);
	if (sig)
		(*jvmti)->Deallocate(jvmti, (unsigned char *)sig);
}

static void JNICALL events_on_alloc(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread, jobject object,
				    jclass klass, jlong size)
{
	events_record(jvmti, JPAG_EV_ALLOC, size > 0 ? (uint64_t)size : 0, klass);
}

uint64_t events_lock_start(uint32_t *gen)
{
	if (!(__atomic_load_n(&events_kind, __ATOMIC_RELAXED) & JPAG_EV_LOCK))
		return 0;
	*gen = __atomic_load_n(&events_gen, __ATOMIC_RELAXED);
	return agent_now_ns();
}

uint64_t events_lock_waited(uint64_t start, uint32_t gen)
{
	uint64_t wait;

	/* An older generation: started under an earlier recording. */
	if (!start || gen != __atomic_load_n(&events_gen, __ATOMIC_RELAXED))
		return 0;
	wait = agent_now_ns() - start;
	if (!wait || wait < __atomic_load_n(&events_lock_threshold_ns, __ATOMIC_RELAXED))
		return 0;
	return wait;
}

void events_lock_record(uint64_t wait_ns, jclass cls)
{
	events_record(events_jvmti, JPAG_EV_LOCK, wait_ns, cls);
}

static void JNICALL events_on_enter(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread, jobject object)
{
	uint32_t gen = 0;
	/* 0 when the event is off: the entered callback then records nothing. */
	uint64_t start = events_lock_start(&gen);

	pthread_setspecific(events_key_gen, (void *)(uintptr_t)gen);
	pthread_setspecific(events_key_ns, (void *)(uintptr_t)start);
}

static void JNICALL events_on_entered(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread,
				      jobject object)
{
	uint64_t start = (uintptr_t)pthread_getspecific(events_key_ns);
	uint32_t gen = (uint32_t)(uintptr_t)pthread_getspecific(events_key_gen);
	uint64_t wait = events_lock_waited(start, gen);
	jclass cls;

	/* No start: the event was turned on while this thread waited. */
	pthread_setspecific(events_key_ns, NULL);
	if (!wait)
		return;
	cls = (*jni)->GetObjectClass(jni, object);
	events_record(jvmti, JPAG_EV_LOCK, wait, cls);
	if (cls)
		(*jni)->DeleteLocalRef(jni, cls);
}

static void events_reason(jvmtiEnv *jvmti, jvmtiError err, const char *what, char *why,
			  size_t len)
{
	char *name = NULL;

	if ((*jvmti)->GetErrorName(jvmti, err, &name) != JVMTI_ERROR_NONE)
		name = NULL;
	snprintf(why, len, "%s: %s (%d)", what, name ? name : "JVMTI error", (int)err);
	if (name)
		(*jvmti)->Deallocate(jvmti, (unsigned char *)name);
}

/* The environment is created once and kept: callbacks may still be
 * running in it after an event is turned off. */
static int events_env(char *why, size_t len)
{
	jvmtiEventCallbacks cb = {
		.SampledObjectAlloc = events_on_alloc,
		.MonitorContendedEnter = events_on_enter,
		.MonitorContendedEntered = events_on_entered,
	};
	static bool keys_made;   /* once: the callbacks may still run after events_off */
	jvmtiError err;

	if (events_jvmti)
		return 0;
	if (!keys_made) {
		int r = pthread_key_create(&events_key_ns, NULL);

		if (r == 0 && (r = pthread_key_create(&events_key_gen, NULL)) != 0)
			pthread_key_delete(events_key_ns);
		if (r != 0) {
			snprintf(why, len, "no pthread key for lock waits: %s", strerror(r));
			return -r;
		}
		keys_made = true;
	}
	if ((*agent_vm)->GetEnv(agent_vm, (void **)&events_jvmti, JVMTI_VERSION_11) != JNI_OK) {
		events_jvmti = NULL;
		snprintf(why, len, "the JVM has no JVMTI 11 (JDK 11 or later is needed)");
		return -ENOTSUP;
	}
	err = (*events_jvmti)->SetEventCallbacks(events_jvmti, &cb, sizeof(cb));
	if (err != JVMTI_ERROR_NONE) {
		events_reason(events_jvmti, err, "SetEventCallbacks", why, len);
		return -EINVAL;
	}
	return 0;
}

/* java.util.concurrent waits for a lock recording (park.c). Without them
 * the recording still has the monitors: park.c said why once. */
static void events_park(bool on)
{
	JNIEnv *jni = NULL;
	char why[160];

	if ((*agent_vm)->GetEnv(agent_vm, (void **)&jni, JNI_VERSION_1_6) != JNI_OK || !jni)
		return;
	if (on)
		park_hook(jni, why, sizeof(why));
	else
		park_unhook(jni);
}

static const jvmtiEvent events_alloc_ev[] = { JVMTI_EVENT_SAMPLED_OBJECT_ALLOC };
static const jvmtiEvent events_lock_ev[] = { JVMTI_EVENT_MONITOR_CONTENDED_ENTER,
					     JVMTI_EVENT_MONITOR_CONTENDED_ENTERED };

/* The JVMTI events of kind on or off: JVMTI_ERROR_NONE or the first error
 * (the others are still set). */
static jvmtiError events_notify(uint32_t kind, jvmtiEventMode mode)
{
	const jvmtiEvent *ev = kind == JPAG_EV_ALLOC ? events_alloc_ev : events_lock_ev;
	size_t n = kind == JPAG_EV_ALLOC ? 1 : 2;
	jvmtiError first = JVMTI_ERROR_NONE, err;

	for (size_t i = 0; i < n; i++) {
		err = (*events_jvmti)->SetEventNotificationMode(events_jvmti, mode, ev[i], NULL);
		if (first == JVMTI_ERROR_NONE)
			first = err;
	}
	return first;
}

/* dst |= src, capability by capability (the struct is only bit-fields). */
static void events_caps_or(jvmtiCapabilities *dst, const jvmtiCapabilities *src)
{
	unsigned char *d = (unsigned char *)dst;
	const unsigned char *q = (const unsigned char *)src;

	for (size_t i = 0; i < sizeof(*dst); i++)
		d[i] |= q[i];
}

/* One event on, beside those already on (a recording of alloc and lock asks
 * for each); asking again for one that is on starts over with it alone. */
int events_on(uint32_t event, uint64_t param, char *why, size_t len)
{
	jvmtiCapabilities caps = { 0 };
	jvmtiError err = JVMTI_ERROR_NONE;
	uint32_t on;
	int ret;

	pthread_mutex_lock(&events_lock);
	on = events_kind;
	pthread_mutex_unlock(&events_lock);
	if (on & event)
		events_off();
	if (event == JPAG_EV_ALLOC) {
		if (param < 1 || param > INT32_MAX) {
			snprintf(why, len, "heap sampling interval %llu out of range",
				 (unsigned long long)param);
			return -ERANGE;
		}
		caps.can_generate_sampled_object_alloc_events = 1;
	} else if (event == JPAG_EV_LOCK) {
		caps.can_generate_monitor_events = 1;
	} else {
		snprintf(why, len, "unknown event %u", event);
		return -EINVAL;
	}
	ret = events_env(why, len);
	if (ret < 0)
		return ret;
	/* Refused when another agent holds an exclusive capability, or when
	 * the JVM cannot add it in the live phase. */
	err = (*events_jvmti)->AddCapabilities(events_jvmti, &caps);
	if (err != JVMTI_ERROR_NONE) {
		events_reason(events_jvmti, err, "AddCapabilities", why, len);
		return -ENOTSUP;
	}
	if (event == JPAG_EV_ALLOC) {
		err = (*events_jvmti)->SetHeapSamplingInterval(events_jvmti, (jint)param);
		if (err != JVMTI_ERROR_NONE) {
			events_reason(events_jvmti, err, "SetHeapSamplingInterval", why, len);
			ret = -EINVAL;
			goto fail;
		}
	} else {
		__atomic_store_n(&events_lock_threshold_ns, param, __ATOMIC_RELAXED);
		__atomic_add_fetch(&events_gen, 1, __ATOMIC_RELAXED);
	}
	events_caps_or(&events_caps, &caps);
	pthread_mutex_lock(&events_lock);
	if (!events_kind)
		events_dropped = 0;
	__atomic_store_n(&events_kind, events_kind | event, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&events_lock);
	err = events_notify(event, JVMTI_ENABLE);
	if (err != JVMTI_ERROR_NONE) {
		events_reason(events_jvmti, err, "SetEventNotificationMode", why, len);
		/* Undoes the interval and the capabilities too (all events: the
		 * daemon ends the recording on this answer). */
		events_off();
		return -EINVAL;
	}
	if (event == JPAG_EV_LOCK)
		events_park(true);
	agent_debug("event %u on (param %llu)", event, (unsigned long long)param);
	return 0;
fail:
	/* Only this event's: those already on keep theirs. */
	(*events_jvmti)->RelinquishCapabilities(events_jvmti, &caps);
	return ret;
}

void events_off(void)
{
	uint32_t kind;
	uint64_t dropped;

	pthread_mutex_lock(&events_lock);
	kind = events_kind;
	dropped = events_dropped;
	__atomic_store_n(&events_kind, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&events_lock);
	if (!kind)
		return;
	if (kind & JPAG_EV_ALLOC)
		events_notify(JPAG_EV_ALLOC, JVMTI_DISABLE);
	if (kind & JPAG_EV_LOCK) {
		events_notify(JPAG_EV_LOCK, JVMTI_DISABLE);
		events_park(false);
	}
	if (kind & JPAG_EV_ALLOC)
		(*events_jvmti)->SetHeapSamplingInterval(events_jvmti, EVENTS_JVM_DEFAULT_INTERVAL);
	/* Another agent may want them once we are done. */
	(*events_jvmti)->RelinquishCapabilities(events_jvmti, &events_caps);
	memset(&events_caps, 0, sizeof(events_caps));
	if (dropped)
		agent_warn("events %#x: %llu samples dropped (the daemon read too slowly)", kind,
			   (unsigned long long)dropped);
	agent_debug("events %#x off", kind);
}

bool events_active(void)
{
	bool on;

	pthread_mutex_lock(&events_lock);
	on = events_kind != 0;
	pthread_mutex_unlock(&events_lock);
	return on;
}

int events_flush(events_send_fn send, int sock)
{
	struct jpag_events hdr = { 0 };
	size_t len;
	int ret = 0;

	while (ret == 0) {
		pthread_mutex_lock(&events_lock);
		if (!events_used) {
			pthread_mutex_unlock(&events_lock);
			break;
		}
		/* Copied out so callbacks do not wait on the socket. */
		hdr.count = events_q[events_head].count;
		len = events_q[events_head].len;
		memcpy(events_tx, &hdr, sizeof(hdr));
		memcpy(events_tx + sizeof(hdr), events_q[events_head].data, len);
		events_head = (events_head + 1) % EVENTS_NBATCH;
		events_used--;
		pthread_mutex_unlock(&events_lock);
		if (hdr.count)
			ret = send(sock, JPAG_EVENTS, events_tx, sizeof(hdr) + len);
	}
	return ret;
}

void events_reset(void)
{
	pthread_mutex_lock(&events_lock);
	events_head = events_used = 0;
	pthread_mutex_unlock(&events_lock);
}
