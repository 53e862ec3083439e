/* Event sets (proto/jprof_agent.h, JPAG_SET_ADD): another recording of this
 * JVM joins the running one. Same ring, same signal; its own interval, its
 * own perf fd per thread (its ring records carry its number), its own
 * THREADS_ARMED. The agent thread only. */
#include "link_int.h"

#include "agent.h"
#include "ring.h"
#include "threads.h"
#include "wall.h"

#include <errno.h>
#include <jni.h>
#include <signal.h>

int link_on_set_add(int sock, const struct jpag_set_add *sa, void *env)
{
	uint32_t set = sa->set;
	int sig, ret;

	/* Nothing to join, a set in use, or a number out of range: the
	 * daemon hears it is over (no fd was handed out for it). */
	if (!link_rec_on || set == 0 || set >= JPAG_MAX_SETS || (link_sets & 1u << set) ||
	    sa->interval_ns == 0) {
		agent_debug("event set %u refused", set);
		return link_send_set(sock, JPAG_STOPPED, set < JPAG_MAX_SETS ? set : 0, NULL, 0);
	}
	/* A real-time signal of its own if START's is not one already:
	 * queued, never merged with another set's pending signal. Without a
	 * free one, START's (merges then cost this set samples' Java frames). */
	sig = link_rec_signal >= SIGRTMIN ? link_rec_signal : ring_choose_signal(SIGRTMAX);
	if (sig < 0 || ring_install_signal(sig) < 0)
		sig = link_rec_signal;
	link_set_signal[set] = sig;
	link_sets |= 1u << set;
	link_set_interval[set] = sa->interval_ns;
	ring_set_interval(set, sa->interval_ns);
	agent_debug("event set %u: interval %llu ns, signal %d", set,
		    (unsigned long long)sa->interval_ns, sig);
	ret = 0;
	if ((sa->flags & JPAG_START_WALL) && (link_features & JPAG_FEATURE_WALL))
		ret = link_start_wall(sock, set, sa->interval_ns, link_rec_signal);
	if (ret == 0)
		ret = link_rescan(sock);
	/* The new recording has no thread names yet (the daemon gives every
	 * recording every name). */
	if (ret == 0)
		ret = threads_each(agent_jvmti, (JNIEnv *)env, link_send_name, &sock);
	if (ret == 0) {
		link_set_armed_at[set] = link_fd_asked;
		link_set_armed_due |= 1u << set;
		ret = link_send_armed(sock);
	}
	return ret;
}

int link_on_set_del(int sock, const struct jpag_set_del *sd)
{
	uint32_t set = sd->set;

	(void)sock;
	if (set >= JPAG_MAX_SETS || !(link_sets & 1u << set))
		return 0;
	if (link_wall_set == (int)set) {
		wall_stop();
		link_wall_set = -1;
	}
	link_drop_set(set);
	link_sets &= ~(1u << set);
	link_set_armed_due &= ~(1u << set);
	agent_debug("event set %u closed", set);
	return 0;
}
