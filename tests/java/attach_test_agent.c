/* A JVMTI agent for tests. Attached (tests/unit/test_attach.c): options
 * "out=<file>[;fail]"; Agent_OnAttach appends the whole options string and a
 * newline to <file> (so the test sees every call), then returns 0, or 7 when
 * the options contain ";fail". At startup (-agentpath:...=hold_alloc,
 * tests/integration/test_alloc_lock.py): takes and keeps
 * can_generate_sampled_object_alloc_events, which HotSpot grants to one
 * JVMTI environment at a time, as another profiler's agent would. */
#include <fcntl.h>
#include <jni.h>
#include <jvmti.h>
#include <string.h>
#include <unistd.h>

JNIEXPORT jint JNICALL Agent_OnAttach(JavaVM *vm, char *options, void *reserved)
{
	char path[512];
	const char *p, *end;
	size_t n;
	int fd;

	(void)vm;
	(void)reserved;
	if (!options || strncmp(options, "out=", 4) != 0)
		return 3;
	p = options + 4;
	end = strchr(p, ';');
	n = end ? (size_t)(end - p) : strlen(p);
	if (n == 0 || n >= sizeof(path))
		return 4;
	memcpy(path, p, n);
	path[n] = '\0';
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return 5;
	if (write(fd, options, strlen(options)) < 0 || write(fd, "\n", 1) < 0) {
		close(fd);
		return 6;
	}
	close(fd);
	return end && strcmp(end, ";fail") == 0 ? 7 : 0;
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved)
{
	jvmtiCapabilities caps = { .can_generate_sampled_object_alloc_events = 1 };
	jvmtiEnv *jvmti;

	(void)reserved;
	if (!options || strcmp(options, "hold_alloc") != 0)
		return 0;
	if ((*vm)->GetEnv(vm, (void **)&jvmti, JVMTI_VERSION_11) != JNI_OK)
		return 8;
	return (*jvmti)->AddCapabilities(jvmti, &caps) == JVMTI_ERROR_NONE ? 0 : 9;
}
