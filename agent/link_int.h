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
extern uint64_t link_interval_ns;        /* the recording's */
extern bool link_phase;                  /* random first period per fd */
extern uint32_t link_self_tid;           /* this thread: never sampled */
extern uint64_t link_fd_asked, link_fd_answered;
extern uint64_t link_armed_at;
extern bool link_armed_due;
extern struct htab_map link_tids;        /* tid -> packed fd/state */
extern unsigned char link_rx[JPAG_MAX_PAYLOAD];
extern unsigned char link_tx[JPAG_MAX_PAYLOAD];

void link_queue_free(struct link_tevent *q, size_t n);
void link_answer(uint32_t tid);

/* link_frame.c */
int link_send(int sock, uint16_t type, const void *payload, size_t len);
int link_recv_frame(int sock, struct jpag_hdr *hdr, int *fd);

/* link_tids.c */
void link_disarm(int fd);
int link_send_name(uint32_t tid, const char *name, size_t len, uint64_t java_id, void *arg);
int link_send_armed(int sock);
void link_on_perf_fd(const struct jpag_perf_fd *pf, int fd);
int link_rescan(int sock);
int link_drain_thread_events(int sock);

#endif
