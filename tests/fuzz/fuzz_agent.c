/* libFuzzer harness: agent frames (daemon/jvm/agentlink.c). Any process can
 * connect to the daemon socket and speak the binary agent protocol; the
 * input is the byte stream such a peer sends.
 *
 * The route is the daemon's own: the control server hands a connection
 * over with the bytes it has already read (agentlink_adopt: here the first
 * 88 bytes, a hello frame's size), the rest arrives on the socket, followed
 * by the peer's EOF, and one loop round reads it. A hello binds a recording
 * (agent_start, as a session does) so perf fd requests and method records
 * reach the session callbacks, which check what they are given; so do
 * thread names, signal records, event statuses and event records. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentlink.h"
#include "fuzz.h"
#include "jring.h"
#include "log.h"
#include "loop.h"

#define FUZZ_FIRST_READ (sizeof(struct jpag_hdr) + sizeof(struct jpag_hello))

struct fuzz_agent {
	struct agent *agent;
	bool bound;
	unsigned gone;
	volatile unsigned sink;
};

static int perf_stand_in = -1;   /* a pipe end passed where a perf fd would be */
static int always_ready = -1;    /* readable eventfd: ends the loop round */

static int fa_perf_fd(void *ctx, uint32_t ns_tid, int *fd)
{
	struct fuzz_agent *fa = ctx;

	fuzz_check(!fa->gone, "perf fd request after the binding was gone");
	if (ns_tid % 2)
		return -EPERM;  /* as a session denies a thread of another process */
	*fd = perf_stand_in;
	return 0;
}

static void fa_method(void *ctx, const struct agentlink_method *m)
{
	struct fuzz_agent *fa = ctx;
	unsigned sum = 0;

	fuzz_check(!fa->gone, "method record after the binding was gone");
	if (m->unknown)
		return;
	fuzz_check(m->cls_len > 0 && m->name_len > 0, "method record with an empty name");
	fuzz_check(m->cls_len + m->name_len + m->sig_len +
				   (size_t)m->nlines * sizeof(struct jpag_line) <= JPAG_MAX_PAYLOAD,
		   "method record larger than a frame");
	/* Read every byte handed on: ASan checks the bounds. */
	for (size_t i = 0; i < m->cls_len; i++)
		sum += (unsigned char)m->cls[i];
	for (size_t i = 0; i < m->name_len; i++)
		sum += (unsigned char)m->name[i];
	for (size_t i = 0; i < m->sig_len; i++)
		sum += (unsigned char)m->sig[i];
	for (unsigned i = 0; i < m->nlines; i++)
		sum += (unsigned)m->lines[i].bci + (unsigned)m->lines[i].line;
	fa->sink += sum;
}

static void fa_gone(void *ctx, const char *why)
{
	struct fuzz_agent *fa = ctx;

	fuzz_check(why != NULL, "gone without a reason");
	fa->gone++;
	fuzz_check(fa->gone == 1, "the binding was told twice that it is gone");
}

static void fa_thread_name(void *ctx, uint32_t ns_tid, const char *name, size_t len)
{
	struct fuzz_agent *fa = ctx;
	unsigned sum = ns_tid;

	fuzz_check(!fa->gone, "thread name after the binding was gone");
	fuzz_check(len >= 1 && len <= JPAG_THREAD_NAME_MAX, "thread name of %zu bytes", len);
	for (size_t i = 0; i < len; i++)
		sum += (unsigned char)name[i];
	fa->sink += sum;
}

static bool fa_signal_ok(uint32_t sig)
{
	return sig == SIGPROF || sig == SIGVTALRM || sig == SIGIO || (sig >= 32 && sig <= 64);
}

static void fa_signal(void *ctx, uint32_t signal, uint32_t proposed, bool took_over)
{
	struct fuzz_agent *fa = ctx;

	fuzz_check(!fa->gone, "signal record after the binding was gone");
	fuzz_check(fa_signal_ok(signal) && fa_signal_ok(proposed) && signal != proposed,
		   "implausible signal %u (proposed %u) handed on", signal, proposed);
	fa->sink += signal + proposed + took_over;
}

static void fa_event_status(void *ctx, uint32_t event, int status, const char *why)
{
	struct fuzz_agent *fa = ctx;

	fuzz_check(!fa->gone, "event status after the binding was gone");
	fuzz_check(status <= 0, "event status %d handed on (only 0 or -errno)", status);
	fuzz_check(why && memchr(why, '\0', sizeof(((struct jpag_event_status *)0)->message)),
		   "event status reason not terminated");
	fa->sink += event + (unsigned)strlen(why);
}

static void fa_event(void *ctx, const struct jpag_event_rec *rec, const char *cls,
		     const struct jpring_frame *frames)
{
	struct fuzz_agent *fa = ctx;
	unsigned sum = rec->event + rec->tid;

	fuzz_check(!fa->gone, "event record after the binding was gone");
	fuzz_check(rec->nframes <= JPAG_EVENT_MAX_FRAMES && rec->class_len <= JPAG_EVENT_CLASS_MAX,
		   "event record of %u frames, class of %u bytes", rec->nframes, rec->class_len);
	/* Read every byte handed on: ASan checks the bounds. */
	for (unsigned i = 0; i < rec->class_len; i++)
		sum += (unsigned char)cls[i];
	for (unsigned i = 0; i < rec->nframes; i++)
		sum += (unsigned)frames[i].bci + (unsigned)frames[i].method_id;
	fa->sink += sum;
}

static void fa_events_done(void *ctx)
{
	struct fuzz_agent *fa = ctx;

	fuzz_check(!fa->gone, "events done after the binding was gone");
	fa->sink++;
}

static const struct agentlink_ops fa_ops = {
	.perf_fd = fa_perf_fd,
	.method = fa_method,
	.thread_name = fa_thread_name,
	.signal = fa_signal,
	.event_status = fa_event_status,
	.event = fa_event,
	.events_done = fa_events_done,
	.gone = fa_gone,
};

static void fa_on_connect(struct agent *a, pid_t pid, void *arg)
{
	struct fuzz_agent *fa = arg;
	static const uint64_t ids[] = { 0x7f0000001000, 0x7f0000002000, 1 };

	fuzz_check(pid == getpid(), "agent announced with pid %d", (int)pid);
	fa->agent = a;
	if (fa->bound)
		return;
	/* A small ring: the harness is about frames, not the ring. */
	if (agent_start(a, 10000000, SIGPROF, 2, 0, &fa_ops, fa) == 0) {
		fa->bound = true;
		fuzz_check(agent_ring(a) != NULL, "a bound agent has no ring");
		agent_resolve(a, ids, sizeof(ids) / sizeof(ids[0]));
	}
}

static void fa_quit(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	loop_quit(arg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int p[2];
	uint64_t one = 1;

	log_set_level(LOG_LVL_ERR);  /* every dropped agent logs a warning */
	if (pipe2(p, O_CLOEXEC) < 0)
		abort();
	perf_stand_in = p[0];
	close(p[1]);
	always_ready = eventfd(0, EFD_CLOEXEC);
	if (always_ready < 0 || write(always_ready, &one, sizeof(one)) != sizeof(one))
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_agent fa = { 0 };
	struct loop *loop = NULL;
	struct agentlink *link = NULL;
	struct loop_source *quit = NULL;
	size_t first = size < FUZZ_FIRST_READ ? size : FUZZ_FIRST_READ;
	int sv[2];

	if (loop_new(&loop) < 0 || agentlink_new(loop, fa_on_connect, &fa, &link) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	/* Takes sv[0]; may drop the agent at once. The peer is this process,
	 * so whatever identity the daemon reads from the socket is its own. */
	agentlink_adopt(link, sv[0], getpid(), getuid(), data, first);
	if (size > first)  /* what does not fit the socket buffer is cut */
		(void)send(sv[1], data + first, size - first, MSG_DONTWAIT | MSG_NOSIGNAL);
	shutdown(sv[1], SHUT_WR);
	/* One round: the agent's socket and the eventfd are ready together. */
	if (loop_add_io(loop, always_ready, EPOLLIN, fa_quit, loop, &quit) < 0 || loop_run(loop) < 0)
		abort();
	if (fa.bound)
		fuzz_check(fa.gone == 1, "the peer closed but the binding was not told");
	loop_remove(quit);
	agentlink_free(link);
	loop_free(loop);
	close(sv[1]);
	return 0;
}
