/* Timing java.util.concurrent lock waits (see park.h). */
#include "park.h"

#include "agent.h"
#include "events.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PARK_SYMBOL "Unsafe_Park"
#define PARK_CHUNK (64 * 1024)
#define PARK_MAX_NAMES 8          /* places "Unsafe_Park\0" occurs in .strtab */
#define PARK_MAX_SECTIONS 4096

typedef void(JNICALL *park_fn)(JNIEnv *, jobject, jboolean, jlong);

/* Set once on the agent thread before the wrapper is ever bound; read by
 * the wrapper on any thread. */
static park_fn park_orig;
static jclass park_unsafe;               /* global refs */
static jclass park_aqs, park_aqls;
static jfieldID park_blocker;            /* Thread.parkBlocker */
static bool park_ready;
static int park_err;                     /* the first preparation's outcome */
static char park_why[160];
static bool park_bound;                  /* the wrapper is Unsafe.park's binding */

/* Reads exactly len bytes at off. */
static bool park_pread(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (n <= 0)
			return false;
		done += (size_t)n;
	}
	return true;
}

/* Offsets in the string table [off, off + size) where PARK_SYMBOL ends a
 * string: a symbol named exactly that has one of them as st_name. */
static size_t park_find_names(int fd, char *buf, uint64_t off, uint64_t size,
			      uint64_t *names)
{
	const size_t nlen = sizeof(PARK_SYMBOL);    /* with the NUL */
	uint64_t pos = 0, last = UINT64_MAX;
	size_t n = 0;

	while (pos < size && n < PARK_MAX_NAMES) {
		size_t len = size - pos < PARK_CHUNK ? (size_t)(size - pos) : PARK_CHUNK;
		const char *p = buf, *end;

		if (!park_pread(fd, buf, len, off + pos))
			break;
		end = buf + len;
		while (n < PARK_MAX_NAMES && (p = memmem(p, (size_t)(end - p), PARK_SYMBOL, nlen))) {
			uint64_t at = pos + (uint64_t)(p - buf);

			if (last == UINT64_MAX || at > last)
				names[n++] = last = at;
			p++;
		}
		if (pos + len >= size)
			break;
		/* Overlap so a name across two chunks is seen. */
		pos += len - (nlen - 1);
	}
	return n;
}

/* The address of the JVM's Unsafe_Park, from the .symtab of the libjvm
 * that lm describes (HotSpot builds keep it; Debian's and Temurin's do). */
static int park_find(const char *path, const struct link_map *lm, void **fn, char *why,
		     size_t len)
{
	Elf64_Shdr *sh = NULL;
	Elf64_Ehdr eh;
	uint64_t names[PARK_MAX_NAMES];
	size_t nnames;
	struct stat st;
	char *buf = NULL;
	int fd, ret = -ENOENT;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(why, len, "cannot open %s: %s", path, strerror(-ret));
		return ret;
	}
	buf = malloc(PARK_CHUNK);
	if (!buf || fstat(fd, &st) < 0 || !park_pread(fd, &eh, sizeof(eh), 0) ||
	    memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 ||
	    eh.e_shnum > PARK_MAX_SECTIONS ||
	    eh.e_shoff + (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > (uint64_t)st.st_size) {
		snprintf(why, len, "%s is not a readable ELF64 file", path);
		ret = -ENOEXEC;
		goto out;
	}
	sh = calloc(eh.e_shnum, sizeof(*sh));
	if (!sh || !park_pread(fd, sh, eh.e_shnum * sizeof(*sh), eh.e_shoff)) {
		snprintf(why, len, "%s: cannot read its section headers", path);
		ret = -EIO;
		goto out;
	}
	snprintf(why, len, "%s has no symbol %s (no .symtab?)", path, PARK_SYMBOL);
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		const Elf64_Shdr *sym = &sh[i], *str;

		if (sym->sh_type != SHT_SYMTAB || sym->sh_link >= eh.e_shnum ||
		    sym->sh_entsize != sizeof(Elf64_Sym))
			continue;
		str = &sh[sym->sh_link];
		if (sym->sh_offset + sym->sh_size > (uint64_t)st.st_size ||
		    str->sh_offset + str->sh_size > (uint64_t)st.st_size)
			continue;
		nnames = park_find_names(fd, buf, str->sh_offset, str->sh_size, names);
		if (!nnames)
			continue;
		for (uint64_t pos = 0; pos < sym->sh_size;) {
			size_t chunk = sym->sh_size - pos < PARK_CHUNK ? (size_t)(sym->sh_size - pos)
								       : PARK_CHUNK;
			size_t count;

			chunk -= chunk % sizeof(Elf64_Sym);
			if (!chunk || !park_pread(fd, buf, chunk, sym->sh_offset + pos))
				break;
			count = chunk / sizeof(Elf64_Sym);
			for (size_t k = 0; k < count; k++) {
				Elf64_Sym s;

				memcpy(&s, buf + k * sizeof(s), sizeof(s));
				if (ELF64_ST_TYPE(s.st_info) != STT_FUNC || s.st_shndx == SHN_UNDEF ||
				    !s.st_value)
					continue;
				for (size_t j = 0; j < nnames; j++) {
					if (s.st_name == names[j]) {
						*fn = (void *)(lm->l_addr + s.st_value);
						ret = 0;
						goto out;
					}
				}
			}
			pos += chunk;
		}
	}
out:
	free(sh);
	free(buf);
	close(fd);
	return ret;
}

/* Everything the wrapper and the binding need, looked up once. */
static int park_prepare(JNIEnv *jni, char *why, size_t len)
{
	struct link_map *lm = NULL;
	Dl_info info, check;
	jclass thread = NULL, cls;
	void *fn = NULL;
	int ret;

	if (!dladdr1((void *)(*agent_vm)->GetEnv, &info, (void **)&lm, RTLD_DL_LINKMAP) ||
	    !info.dli_fname || !lm) {
		snprintf(why, len, "libjvm not found");
		return -ENOENT;
	}
	ret = park_find(info.dli_fname, lm, &fn, why, len);
	if (ret < 0)
		return ret;
	/* The address must fall inside the same libjvm. */
	if (!dladdr(fn, &check) || check.dli_fbase != info.dli_fbase) {
		snprintf(why, len, "%s in %s points outside it", PARK_SYMBOL, info.dli_fname);
		return -ENOENT;
	}
	park_orig = (park_fn)fn;

	cls = (*jni)->FindClass(jni, "jdk/internal/misc/Unsafe");
	if (cls) {
		park_unsafe = (*jni)->NewGlobalRef(jni, cls);
		(*jni)->DeleteLocalRef(jni, cls);
	}
	thread = (*jni)->FindClass(jni, "java/lang/Thread");
	if (thread)
		park_blocker = (*jni)->GetFieldID(jni, thread, "parkBlocker", "Ljava/lang/Object;");
	cls = (*jni)->FindClass(jni, "java/util/concurrent/locks/AbstractQueuedSynchronizer");
	if (cls) {
		park_aqs = (*jni)->NewGlobalRef(jni, cls);
		(*jni)->DeleteLocalRef(jni, cls);
	}
	cls = (*jni)->FindClass(jni, "java/util/concurrent/locks/AbstractQueuedLongSynchronizer");
	if (cls) {
		park_aqls = (*jni)->NewGlobalRef(jni, cls);
		(*jni)->DeleteLocalRef(jni, cls);
	}
	if (thread)
		(*jni)->DeleteLocalRef(jni, thread);
	if ((*jni)->ExceptionCheck(jni))
		(*jni)->ExceptionClear(jni);
	if (!park_unsafe || !park_blocker || !park_aqs || !park_aqls) {
		snprintf(why, len, "this JDK's Unsafe, Thread.parkBlocker or "
				   "AbstractQueued(Long)Synchronizer differ from JDK 11-25's");
		return -ENOENT;
	}
	return 0;
}

/* The class of the thread's park blocker when it is a lock-like
 * synchronizer (ReentrantLock, ReentrantReadWriteLock, Semaphore,
 * CountDownLatch...), else NULL: waits for a Condition, a Future or with no
 * blocker are waits, not contention, as Object.wait is not for monitors. */
static jclass park_blocker_class(JNIEnv *jni)
{
	jthread self = NULL;
	jobject blocker = NULL;
	jclass cls = NULL;

	if ((*agent_jvmti)->GetCurrentThread(agent_jvmti, &self) != JVMTI_ERROR_NONE || !self)
		return NULL;
	blocker = (*jni)->GetObjectField(jni, self, park_blocker);
	if (blocker && ((*jni)->IsInstanceOf(jni, blocker, park_aqs) ||
			(*jni)->IsInstanceOf(jni, blocker, park_aqls)))
		cls = (*jni)->GetObjectClass(jni, blocker);
	if (blocker)
		(*jni)->DeleteLocalRef(jni, blocker);
	(*jni)->DeleteLocalRef(jni, self);
	/* Never leave an exception of ours to the caller of park. */
	if ((*jni)->ExceptionCheck(jni))
		(*jni)->ExceptionClear(jni);
	return cls;
}

/* Unsafe.park while a lock recording may run: the JVM's park, timed. */
static void JNICALL park_wrapper(JNIEnv *jni, jobject unsafe, jboolean absolute, jlong time)
{
	uint32_t gen = 0;
	uint64_t start = events_lock_start(&gen), wait;
	jclass cls;

	park_orig(jni, unsafe, absolute, time);
	if (!start)
		return;
	wait = events_lock_waited(start, gen);
	if (!wait)
		return;
	cls = park_blocker_class(jni);
	if (!cls)
		return;
	events_lock_record(wait, cls);
	(*jni)->DeleteLocalRef(jni, cls);
}

static int park_bind(JNIEnv *jni, void *fn)
{
	JNINativeMethod m = {
		.name = (char *)"park",
		.signature = (char *)"(ZJ)V",
		.fnPtr = fn,
	};
	jint r = (*jni)->RegisterNatives(jni, park_unsafe, &m, 1);

	if ((*jni)->ExceptionCheck(jni))
		(*jni)->ExceptionClear(jni);
	return r == 0 ? 0 : -EINVAL;
}

int park_hook(JNIEnv *jni, char *why, size_t len)
{
	int ret;

	if (!park_ready) {
		park_err = park_prepare(jni, park_why, sizeof(park_why));
		park_ready = true;
		if (park_err < 0)
			agent_warn("-e lock: java.util.concurrent locks are not recorded: %s",
				   park_why);
	}
	if (park_err < 0) {
		snprintf(why, len, "%s", park_why);
		return park_err;
	}
	if (park_bound)
		return 0;
	ret = park_bind(jni, (void *)park_wrapper);
	if (ret < 0) {
		snprintf(why, len, "RegisterNatives(Unsafe.park) failed");
		return ret;
	}
	park_bound = true;
	agent_debug("Unsafe.park timed for -e lock");
	return 0;
}

void park_unhook(JNIEnv *jni)
{
	if (!park_bound)
		return;
	if (park_bind(jni, (void *)park_orig) < 0)
		agent_warn("RegisterNatives could not give Unsafe.park its own function back; "
			   "it stays timed while no lock recording runs");
	else
		park_bound = false;
}
