/* A JVMTI agent for tests/unit/test_attach.c only. Options:
 * "out=<file>[;fail]". Agent_OnAttach appends the whole options string and a
 * newline to <file> (so the test sees every call), then returns 0, or 7 when
 * the options contain ";fail". */
#include <fcntl.h>
#include <jni.h>
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
