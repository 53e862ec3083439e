/* A stand-in for another profiler in the JVM, for
 * tests/integration/test_signal_coexistence.py only: it owns SIGPROF the way
 * async-profiler does, and counts what it gets.
 *
 * -agentpath:libsigprof_test_agent.so=out=FILE[,after=FILE2]
 *
 * At VMInit (on the thread that goes on to run main) a ticker thread starts;
 * with after=FILE2 it first waits for FILE2 to exist (a profiler started
 * after jprofd). It then installs its SIGPROF handler over whatever is there
 * (no chaining, as a profiler that does not look) and, every millisecond,
 * sends SIGPROF to the main thread with tgkill and waits for the handler to
 * see it before sending the next one: like async-profiler, which re-enables
 * its perf event only from its handler, one signal lost stops the stream.
 * After 1 s without it the signal counts as lost and the next one goes.
 *
 * FILE gets one line, rewritten every 100 ticks:
 *   "<sent> <received> <lost> <foreign> <ms since the handler was installed>"
 * foreign: SIGPROFs that were not the ticker's (e.g. a perf event's).
 */
#include <errno.h>
#include <fcntl.h>
#include <jvmti.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char out_path[512];
static char after_path[512];
static pid_t target_tid;
static sem_t acked;
static unsigned long received, foreign;

static void on_sigprof(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (si->si_code == SI_TKILL && si->si_pid == getpid()) {
		__atomic_add_fetch(&received, 1, __ATOMIC_RELAXED);
		sem_post(&acked);
	} else {
		__atomic_add_fetch(&foreign, 1, __ATOMIC_RELAXED);
	}
}

static long ms_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

static void report(unsigned long sent, unsigned long lost, const struct timespec *t0)
{
	char line[160], tmp[600];
	int n, fd;

	n = snprintf(line, sizeof(line), "%lu %lu %lu %lu %ld\n", sent,
		     __atomic_load_n(&received, __ATOMIC_RELAXED), lost,
		     __atomic_load_n(&foreign, __ATOMIC_RELAXED), ms_since(t0));
	/* Written whole under a temporary name, then renamed: the reader never
	 * sees half a line. */
	snprintf(tmp, sizeof(tmp), "%s.tmp", out_path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)n) == n)
		rename(tmp, out_path);
	close(fd);
}

static void *ticker(void *arg)
{
	const struct timespec tick = { .tv_nsec = 1000000 }, poll = { .tv_nsec = 10000000 };
	unsigned long sent = 0, lost = 0;
	struct sigaction sa;
	struct timespec t0;
	struct stat st;

	(void)arg;
	while (after_path[0] && stat(after_path, &st) < 0)
		nanosleep(&poll, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigprof;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPROF, &sa, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct timespec deadline;

		sent++;
		if (syscall(SYS_tgkill, getpid(), target_tid, SIGPROF) < 0)
			return NULL;  /* main has ended */
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += 1;
		while (sem_timedwait(&acked, &deadline) < 0) {
			if (errno == ETIMEDOUT) {
				lost++;
				break;
			}
		}
		if (sent % 100 == 0)
			report(sent, lost, &t0);
		nanosleep(&tick, NULL);
	}
	return NULL;
}

static void JNICALL on_vm_init(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread)
{
	pthread_t th;

	(void)jvmti;
	(void)jni;
	(void)thread;
	target_tid = (pid_t)syscall(SYS_gettid);
	pthread_create(&th, NULL, ticker, NULL);
	pthread_detach(th);
}

static int copy_opt(const char *opts, const char *key, char *out, size_t cap)
{
	const char *p = strstr(opts, key);
	size_t n;

	if (!p)
		return 0;
	p += strlen(key);
	n = strcspn(p, ",");
	if (n == 0 || n >= cap)
		return -1;
	memcpy(out, p, n);
	out[n] = '\0';
	return 1;
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved)
{
	jvmtiEventCallbacks cb = { .VMInit = on_vm_init };
	jvmtiEnv *jvmti;

	(void)reserved;
	if (!options || copy_opt(options, "out=", out_path, sizeof(out_path)) != 1 ||
	    copy_opt(options, "after=", after_path, sizeof(after_path)) < 0)
		return JNI_ERR;
	if (sem_init(&acked, 0, 0) < 0 ||
	    (*vm)->GetEnv(vm, (void **)&jvmti, JVMTI_VERSION_1_2) != JNI_OK ||
	    (*jvmti)->SetEventCallbacks(jvmti, &cb, sizeof(cb)) != JVMTI_ERROR_NONE ||
	    (*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_VM_INIT, NULL) !=
		    JVMTI_ERROR_NONE)
		return JNI_ERR;
	return JNI_OK;
}
