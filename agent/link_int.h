/* link.c's own parts shared by its files: link.c (the agent thread, the
 * thread-event queue, the recording lifecycle, the connection),
 * link_frame.c (framing on the socket) and link_tids.c (per-thread perf
 * fds and thread names). No other module includes this. */
#ifndef JPROF_AGENT_LINK_INT_H
#define JPROF_AGENT_LINK_INT_H

#include "jprof_agent.h"
#include "htab.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum link_tid_state { TID_REQUESTED = 1, TID_ARMED = 2, TID_FAILED = 3 };

struct link_tevent {
	uint32_t tid;
	bool started;
	char *name;              /* started: its Java name (malloc'd), or NULL */
	uint64_t java_id;        /* started: its java.lang.Thread id, 0 if not known */
};

/* tid table keys: the tid in the low 32 bits, its event set above (one
 * fd per thread and set). */
static inline uint64_t link_key(uint32_t set, uint32_t tid)
{
	return (uint64_t)set << 32 | tid;
}

/* tid table values: fd in the low 32 bits, state above. */
static inline uint64_t link_pack(int fd, enum link_tid_state st)
{
	return (uint64_t)(uint32_t)fd | ((uint64_t)st << 32);
}

static inline int link_unpack_fd(uint64_t v)
{
	return (int)(uint32_t)v;
}

static inline enum link_tid_state link_unpack_state(uint64_t v)
{
	return (enum link_tid_state)(v >> 32);
}

/* link.c: shared with other threads (link_lock). */
extern pthread_mutex_t link_lock;
extern struct link_tevent *link_queue;  /* ThreadStart/End while recording */
extern size_t link_queue_len, link_queue_cap;
extern bool link_queue_oom;
extern int link_start_wait;              /* atomic: ThreadStart waits for its fd */
/* link.c: owned by the agent thread. */
extern bool link_rec_on;
extern int link_rec_signal;
extern uint32_t link_features;           /* the daemon's JPAG_FEATURE_* */
extern uint64_t link_interval_ns;        /* the recording's (set 0) */
/* Event sets (jprof_agent.h, JPAG_SET_ADD): bit s set while set s is open;
 * set 0 is START's. Each has its interval and its own THREADS_ARMED. */
extern uint32_t link_sets;
extern uint64_t link_set_interval[JPAG_MAX_SETS];
extern uint64_t link_set_armed_at[JPAG_MAX_SETS];
extern uint32_t link_set_armed_due;     /* bit s: THREADS_ARMED of set s to send */
/* Each set's signal: set 0's is START's (link_rec_signal); the others take
 * a real-time one, which queues: two sets' overflows on one thread while
 * the first signal is pending would merge into one SIGPROF. */
extern int link_set_signal[JPAG_MAX_SETS];
extern int link_wall_set;               /* the set the wall timer serves; -1 none */
extern bool link_phase;                  /* random first period per fd */
extern uint32_t link_self_tid;           /* this thread: never sampled */
extern uint64_t link_fd_asked, link_fd_answered;
extern struct htab_map link_tids;        /* link_key(set, tid) -> packed fd/state */
extern unsigned char link_rx[JPAG_MAX_PAYLOAD];
extern unsigned char link_tx[JPAG_MAX_PAYLOAD];

void link_queue_free(struct link_tevent *q, size_t n);
void link_answer(uint32_t tid);

/* The wall timer for set (answers JPAG_EVENT_STATUS): one timer, for the
 * first set that asks. */
int link_start_wall(int sock, uint32_t set, uint64_t interval_ns, int sig);

/* link_sets.c: SET_ADD and SET_DEL (env: the agent thread's JNI). */
int link_on_set_add(int sock, const struct jpag_set_add *sa, void *env);
int link_on_set_del(int sock, const struct jpag_set_del *sd);

/* link_frame.c */
int link_send(int sock, uint16_t type, const void *payload, size_t len);
/* A frame of event set `set` (in the header's reserved word). */
int link_send_set(int sock, uint16_t type, uint32_t set, const void *payload, size_t len);
int link_recv_frame(int sock, struct jpag_hdr *hdr, int *fd);

/* link_tids.c */
void link_disarm(int fd);
int link_send_name(uint32_t tid, const char *name, size_t len, uint64_t java_id, void *arg);
int link_send_armed(int sock);
void link_on_perf_fd(const struct jpag_perf_fd *pf, uint32_t set, int fd);
int link_rescan(int sock);
/* Closes every fd of set (its thread entries go). */
void link_drop_set(uint32_t set);
int link_drain_thread_events(int sock);

#endif
