/* The agent protocol, version 1: between jprofd and libjprofagent.so (the
 * JVMTI agent inside a JVM). Binary, little-endian host order (both ends run
 * on the same host), framed, length-checked. Shared by the daemon and the
 * agent; the agent includes nothing else from the project. Documented in
 * docs/agent.md.
 *
 * Transport: the agent connects to the daemon's ordinary Unix socket and its
 * first bytes are a frame header (magic "JPAG"), which tells the daemon this
 * is an agent, not a JSON client. The daemon identifies the agent's process
 * by SO_PEERCRED; nothing the agent says about itself is trusted.
 *
 * File descriptors (the ring memfd, perf event fds) travel as SCM_RIGHTS
 * attached to the first byte of the frame that announces them.
 */
#ifndef JPROF_AGENT_H
#define JPROF_AGENT_H

#include <stdint.h>

#define JPAG_MAGIC 0x4741504au          /* "JPAG" read as a little-endian u32 */
#define JPAG_VERSION 1
#define JPAG_MAX_PAYLOAD (64 * 1024)
/* The agent's own thread's name (/proc comm): recordings leave it out. */
#define JPAG_AGENT_THREAD_NAME "jprofagent"

struct jpag_hdr {
	uint32_t magic;      /* JPAG_MAGIC */
	uint16_t version;    /* JPAG_VERSION */
	uint16_t type;       /* enum jpag_type */
	uint32_t len;        /* payload bytes after this header, <= JPAG_MAX_PAYLOAD */
	uint32_t reserved;   /* 0 */
};

enum jpag_type {
	/* agent -> daemon */
	JPAG_HELLO = 1,          /* struct jpag_hello */
	JPAG_PERF_FD_REQ = 2,    /* struct jpag_perf_fd_req */
	JPAG_METHOD = 3,         /* struct jpag_method + strings + line table */
	JPAG_METHOD_UNKNOWN = 4, /* struct jpag_method_unknown */
	JPAG_STOPPED = 5,        /* no payload: every fd of the last START is closed */
	JPAG_THREAD_NAME = 10,   /* struct jpag_thread_name + name */
	JPAG_SIGNAL = 11,        /* struct jpag_signal; only to a daemon whose WELCOME
				    has JPAG_FEATURE_SIGNAL */
	JPAG_EVENT_STATUS = 12,  /* struct jpag_event_status: the answer to EVENT_ON, or
				    to a START with JPAG_START_WALL (JPAG_EV_WALL) */
	JPAG_EVENTS = 13,        /* struct jpag_events + records (alloc, lock samples) */
	JPAG_EVENTS_DONE = 14,   /* no payload: the event is off, every record was sent */
	JPAG_THREADS_ARMED = 15, /* no payload, once per START: the agent armed the event
				    of every thread it asked for at START (answers
				    received, failed ones included); only to a daemon
				    whose WELCOME has JPAG_FEATURE_ARMED */

	/* daemon -> agent */
	JPAG_WELCOME = 64,       /* struct jpag_welcome */
	JPAG_START = 65,         /* struct jpag_start, SCM_RIGHTS: the ring memfd */
	JPAG_PERF_FD = 66,       /* struct jpag_perf_fd, SCM_RIGHTS: the event fd when status == 0 */
	JPAG_RESOLVE = 67,       /* struct jpag_resolve */
	JPAG_STOP = 68,          /* no payload: disarm and close every event fd and the ring */
	JPAG_ERROR = 69,         /* struct jpag_error */
	JPAG_EVENT_ON = 70,      /* struct jpag_event_on: after START, a JVMTI event */
	JPAG_EVENT_OFF = 71,     /* no payload: turn it off, send what is left, then EVENTS_DONE */
	JPAG_SET_ADD = 72,       /* struct jpag_set_add: another recording's event set joins
				    the running START's (only to an agent whose HELLO has
				    JPAG_HELLO_SETS) */
	JPAG_SET_DEL = 73,       /* struct jpag_set_del: close that set's fds */
};

/* Event sets: several recordings of one JVM at once. START opens set 0 (the
 * ring, the signal); SET_ADD opens set 1..JPAG_MAX_SETS-1 on the same ring
 * and signal, with its own interval, and the agent asks for one perf fd per
 * thread and set. Frames of one set carry its number in jpag_hdr.reserved
 * (PERF_FD_REQ, PERF_FD, THREADS_ARMED, the wall EVENT_STATUS, STOPPED), and
 * each ring record in the high byte of its kind (JPRING_KIND_SET_SHIFT), so
 * the daemon gives every recording exactly the records of its own events.
 * Set 0 is 0 everywhere: what older peers send and expect. Names (METHOD,
 * THREAD_NAME) and SIGNAL are the process's, for every set. */
#define JPAG_MAX_SETS 4
/* In jpag_hello.agent_version above JPAG_VERSION (older daemons ignore
 * it): the agent understands SET_ADD / SET_DEL. */
#define JPAG_HELLO_SETS 0x10000u

struct jpag_hello {
	uint32_t agent_version;  /* JPAG_VERSION, | JPAG_HELLO_SETS */
	uint32_t pid;            /* getpid() in the agent's namespace (informational) */
	char jvm[64];            /* java.vm.name + version, NUL-terminated (informational) */
};

struct jpag_welcome {
	uint32_t version;        /* JPAG_VERSION */
	uint32_t features;       /* JPAG_FEATURE_*; 0 from daemons before them */
};
#define JPAG_FEATURE_SIGNAL 1u   /* the daemon understands JPAG_SIGNAL */
#define JPAG_FEATURE_WALL 2u     /* the daemon may set JPAG_START_WALL and reads wall
				    records (jpring_slot.kind) */
#define JPAG_FEATURE_ARMED 4u    /* the daemon understands JPAG_THREADS_ARMED: it keeps a
				    recording's events stopped until it comes (or a
				    deadline passes) */
#define JPAG_FEATURE_JAVA_ID 8u
#define JPAG_FEATURE_WALL_NATIVE 16u /* the daemon reads JPRING_BCI_NATIVE wall records */  /* the daemon reads JPAG_THREAD_JAVA_ID in JPAG_THREAD_NAME */

/* A recording of this process begins. The agent maps the ring (MAP_SHARED,
 * ring_bytes), installs its handler for `signal`, and asks for one perf fd per
 * thread (JPAG_PERF_FD_REQ) for every thread it has and every new one. */
struct jpag_start {
	uint64_t interval_ns;
	uint32_t signal;         /* signal to arm fds with (F_SETSIG); the agent accepts
				    SIGPROF, SIGVTALRM, SIGIO or a real-time signal only
				    and answers anything else with JPAG_STOPPED */
	uint32_t ring_bytes;     /* size of the memfd */
	uint32_t slot_bytes;     /* JPRING_SLOT_BYTES */
	uint32_t nslots;
	uint32_t max_frames;     /* JPRING_MAX_FRAMES */
	uint32_t flags;          /* JPAG_START_*; 0 from daemons before them */
};
struct jpag_set_add {
	uint32_t set;            /* 1..JPAG_MAX_SETS-1, not in use */
	uint32_t flags;          /* JPAG_START_WALL: the agent's wall timer for this set,
				    if it does not serve another set already (else its
				    EVENT_STATUS says -EBUSY) */
	uint64_t interval_ns;
};

struct jpag_set_del {
	uint32_t set;
	uint32_t reserved;
};

/* A wall-clock recording: besides the perf-event samples, every interval_ns
 * the agent signals (tgkill) each of its Java threads that is sleeping or in
 * uninterruptible sleep, whose handler writes a JPRING_KIND_WALL record. The
 * agent answers with JPAG_EVENT_STATUS (event JPAG_EV_WALL); an agent before
 * it ignores the flag and does not answer. Only with JPAG_FEATURE_WALL. */
#define JPAG_START_WALL 1u

/* The agent records with another signal than START proposed, because
 * another handler (another profiler) holds the proposed one (reason
 * JPAG_SIGNAL_AT_START), or took the agent's signal over during the
 * recording and the agent moved to a free one (JPAG_SIGNAL_TAKEN_OVER;
 * samples between the takeover and the move went to that handler). The
 * daemon reports it; it does not change what the daemon does. */
struct jpag_signal {
	uint32_t signal;         /* now armed: SIGPROF, SIGVTALRM, SIGIO or 32..64 */
	uint32_t reason;         /* enum jpag_signal_reason */
	uint32_t proposed;       /* the signal given up */
	uint32_t reserved;
};

enum jpag_signal_reason {
	JPAG_SIGNAL_AT_START = 1,
	JPAG_SIGNAL_TAKEN_OVER = 2,
};

struct jpag_perf_fd_req {
	uint32_t tid;            /* gettid() in the agent's pid namespace */
	uint32_t reserved;
};

struct jpag_perf_fd {
	uint32_t tid;            /* as requested */
	int32_t status;          /* 0: fd attached; else -errno (e.g. -EPERM: not our thread) */
};

/* Method ids the daemon saw in the ring and cannot name yet. */
struct jpag_resolve {
	uint32_t count;          /* <= JPAG_RESOLVE_MAX */
	uint32_t reserved;
	uint64_t ids[];          /* jmethodID values as written by the agent */
};
#define JPAG_RESOLVE_MAX 1024

/* Followed by class_len + name_len + sig_len bytes of text (no NULs; class in
 * JVM form "Ljava/lang/String;"), then nlines struct jpag_line. */
struct jpag_method {
	uint64_t id;
	uint16_t class_len;
	uint16_t name_len;
	uint16_t sig_len;
	uint16_t nlines;
};

struct jpag_line {
	int32_t bci;             /* start bci of the entry */
	int32_t line;
};

struct jpag_method_unknown {
	uint64_t id;
};

/* The Java name of one of the agent's threads (its java.lang.Thread name,
 * which /proc's comm truncates to 15 bytes), sent during a recording for
 * every live Java thread at START and for each new one at ThreadStart.
 * Followed by name_len bytes of modified UTF-8 (no NUL). */
struct jpag_thread_name {
	uint32_t tid;            /* gettid() in the agent's pid namespace */
	uint16_t name_len;       /* <= JPAG_THREAD_NAME_MAX */
	uint16_t flags;          /* JPAG_THREAD_*; 0 from agents before them */
};
/* The name is followed by the thread's Java id (uint64_t: the tid field of
 * java.lang.Thread, what getId() and threadId() return). Only to a daemon
 * whose WELCOME has JPAG_FEATURE_JAVA_ID. */
#define JPAG_THREAD_JAVA_ID 1u
#define JPAG_THREAD_NAME_MAX 256

/* JVMTI events the daemon can turn on for a recording, one EVENT_ON each
 * (the values are bits: several may be on at once; EVENT_OFF turns all
 * off). An agent that does not know EVENT_ON ignores it: the daemon times
 * out. */
enum jpag_event {
	JPAG_EV_ALLOC = 1,       /* SampledObjectAlloc; param: heap sampling interval (bytes) */
	JPAG_EV_LOCK = 2,        /* MonitorContendedEnter/Entered; param: threshold (ns) */
	JPAG_EV_WALL = 3,        /* never in EVENT_ON: only the EVENT_STATUS answering
				    a START with JPAG_START_WALL (status 0: the wall
				    timer runs) */
};

struct jpag_event_on {
	uint32_t event;          /* enum jpag_event */
	uint32_t reserved;
	uint64_t param;
};

/* status 0: on; else -errno and, from JVMTI, its reason (e.g.
 * "JVMTI_ERROR_NOT_AVAILABLE") in message. */
struct jpag_event_status {
	uint32_t event;
	int32_t status;
	char message[120];       /* NUL-terminated */
};

/* A batch of samples, followed by count records. Each record is a struct
 * jpag_event_rec, then class_len bytes of the class signature in JVM form
 * ("[B", "Ljava/lang/String;"), zero-padded to a multiple of 8, then
 * nframes struct jpring_frame (leaf first, bci as GetStackTrace's
 * location). The daemon checks every length against the frame. */
struct jpag_events {
	uint32_t count;
	uint32_t reserved;
};

struct jpag_event_rec {
	uint32_t event;          /* enum jpag_event */
	uint32_t tid;            /* gettid() (agent namespace) */
	uint64_t time_ns;        /* CLOCK_MONOTONIC */
	uint64_t value;          /* alloc: the object's size (bytes); lock: wait (ns) */
	uint16_t nframes;        /* <= JPAG_EVENT_MAX_FRAMES */
	uint16_t class_len;      /* <= JPAG_EVENT_CLASS_MAX */
	uint32_t reserved;
};
#define JPAG_EVENT_MAX_FRAMES 128
#define JPAG_EVENT_CLASS_MAX 512

struct jpag_error {
	int32_t code;            /* -errno */
	char message[124];       /* NUL-terminated */
};

/* ---- the shared-memory ring -------------------------------------------
 * Created by the daemon (memfd, sealed against shrinking and growing), written
 * by the agent's signal handlers (many producers, lock-free), read by the
 * daemon. Everything in it is untrusted by the daemon: it validates every
 * field and keeps its own read position and geometry.
 */
#define JPRING_MAGIC 0x474e5252u        /* "RRNG" */
#define JPRING_VERSION 1
#define JPRING_SLOT_BYTES 4096
#define JPRING_HEADER_BYTES 4096        /* header page; slots follow */
#define JPRING_MAX_FRAMES 254           /* (4096 - 32) / 16 */

struct jpring_header {
	uint32_t magic;
	uint32_t version;
	uint32_t slot_bytes;
	uint32_t nslots;
	uint64_t write_idx;      /* agent: next slot to reserve (monotonic, CAS) */
	uint64_t read_idx;       /* daemon: next slot it will read (monotonic) */
	uint64_t dropped;        /* agent: records not written because the ring was full */
};

/* ASGCT frame as written into the ring. */
struct jpring_frame {
	int32_t bci;             /* ASGCT lineno: bci, or -3 for a native method */
	int32_t type;            /* enum jpring_frame_type (0 from agents before it) */
	uint64_t method_id;      /* jmethodID, 0 if the JVM had none */
};

/* How a frame runs, as far as the agent knows (AsyncGetCallTrace does not
 * say): from the thread's own frames, walked alongside (docs/jvm.md, "Java
 * frame types"); unknown where that walk stopped. */
enum jpring_frame_type {
	JPRING_TYPE_UNKNOWN = 0,
	JPRING_TYPE_INTERPRETED = 1,
	JPRING_TYPE_COMPILED = 2,      /* the compiled method the pc is in */
	JPRING_TYPE_INLINED = 3,       /* inlined into the compiled frame below it */
	JPRING_TYPE_C1 = 4,            /* as COMPILED, by C1 (tiers 1-3); COMPILED is then C2
					  or a tier the agent could not read */
};

/* frames[0] of a record whose leaf the agent stepped over to walk the stack
 * (a VM stub, an adapter, or a compiled method's entry or exit, where
 * AsyncGetCallTrace cannot start): bci JPRING_BCI_STUB, method_id the kind
 * of code the pc was in (enum jpring_stub_kind; 0 from agents before it);
 * the Java frames of the callers follow. A leaf in a compiled method's own
 * code is written as that method instead (bci -1, type compiled). */
#define JPRING_BCI_STUB (-100)

/* A wall record (JPRING_KIND_WALL) of a thread without Java frames (one
 * that waits inside the VM: Signal Dispatcher, Attach Listener) holds its
 * native frames instead: every frame bci JPRING_BCI_NATIVE, method_id the
 * pc (frames[0] the interrupted one, then return addresses), type 0. Only
 * to a daemon whose WELCOME has JPAG_FEATURE_WALL_NATIVE. */
#define JPRING_BCI_NATIVE (-101)

/* The daemon names each kind (jvmjoin.c); any other value is unknown. */
enum jpring_stub_kind {
	JPRING_STUB_UNKNOWN = 0,       /* "[unknown_java_leaf]" */
	JPRING_STUB_OTHER = 1,         /* "[stub]": another announced stub or blob */
	JPRING_STUB_VTABLE = 2,        /* "[vtable stub]" */
	JPRING_STUB_ITABLE = 3,        /* "[itable stub]" */
	JPRING_STUB_METHOD_HANDLE = 4, /* "[method handle adapter]" */
	JPRING_STUB_CALL = 5,          /* "[call_stub]" */
	JPRING_STUB_ADAPTER = 6,       /* "[i2c/c2i adapter]" */
	JPRING_STUB_INTERPRETER = 7,   /* "[interpreter]" */
	JPRING_STUB_ARRAYCOPY = 8,     /* "[arraycopy stub]" */
	JPRING_STUB_RESOLVE = 9,       /* "[resolve stub]": call resolution, inline cache miss */
	JPRING_STUB_DISPATCH = 10,     /* "[vtable/itable stub]": an unannounced one, found in
					  the code cache's "vtable chunks" */
	/* A MethodHandle intrinsic's nmethod (frameless, never announced):
	 * "[MethodHandle.invokeBasic]", "[MethodHandle.linkToVirtual]", ... */
	JPRING_STUB_INVOKE_BASIC = 11,
	JPRING_STUB_LINK_TO_VIRTUAL = 12,
	JPRING_STUB_LINK_TO_STATIC = 13,
	JPRING_STUB_LINK_TO_SPECIAL = 14,
	JPRING_STUB_LINK_TO_INTERFACE = 15,
	JPRING_STUB_LINK_TO_NATIVE = 16,
	JPRING_STUB_KINDS = 17,
};

struct jpring_slot {
	uint64_t seq;            /* written last (release): slot index + 1 when complete */
	uint64_t time_ns;        /* CLOCK_MONOTONIC when the handler ran */
	uint32_t tid;            /* gettid() (agent namespace) */
	int32_t num_frames;      /* >= 0: frames written; < 0: ASGCT error code */
	uint16_t kind;           /* enum jpring_kind (0 from agents before it), and the
				    event set above JPRING_KIND_SET_SHIFT */
	uint16_t state;          /* JPRING_KIND_WALL: enum jpring_state; else 0 */
	uint32_t weight;         /* JPRING_KIND_WALL: intervals the record stands for,
				    1..JPRING_WALL_MAX_WEIGHT; else 0 */
	struct jpring_frame frames[JPRING_MAX_FRAMES];
};

enum jpring_kind {
	JPRING_KIND_CPU = 0,     /* a perf-event signal: joined with its BPF record */
	JPRING_KIND_WALL = 1,    /* the wall timer's signal to a blocked thread */
};

#define JPRING_KIND_SET_SHIFT 8
#define JPRING_KIND_MASK 0xffu

/* The thread's state when the wall timer looked (/proc stat letter). */
enum jpring_state {
	JPRING_STATE_SLEEPING = 1,         /* S */
	JPRING_STATE_UNINTERRUPTIBLE = 2,  /* D */
};

/* A thread looked at less often than every interval (more threads blocked
 * than the agent signals per tick) weighs the intervals since its last look. */
#define JPRING_WALL_MAX_WEIGHT 1024

/* AsyncGetCallTrace results below zero (HotSpot's forte.cpp ticks_*). */
enum jpring_asgct_error {
	JPRING_NO_CLASS_LOAD = -1,
	JPRING_GC_ACTIVE = -2,
	JPRING_UNKNOWN_NOT_JAVA = -3,
	JPRING_NOT_WALKABLE_NOT_JAVA = -4,
	JPRING_UNKNOWN_JAVA = -5,
	JPRING_NOT_WALKABLE_JAVA = -6,
	JPRING_UNKNOWN_STATE = -7,
	JPRING_THREAD_EXIT = -8,
	JPRING_DEOPT = -9,
	JPRING_SAFEPOINT = -10,
	JPRING_MIN_ERROR = -10,
};

_Static_assert(sizeof(struct jpag_hdr) == 16, "jpag_hdr");
_Static_assert(sizeof(struct jpag_start) == 32, "jpag_start");
_Static_assert(sizeof(struct jpag_method) == 16, "jpag_method");
_Static_assert(sizeof(struct jpag_thread_name) == 8, "jpag_thread_name");
_Static_assert(sizeof(struct jpag_signal) == 16, "jpag_signal");
_Static_assert(sizeof(struct jpag_event_on) == 16, "jpag_event_on");
_Static_assert(sizeof(struct jpag_set_add) == 16, "jpag_set_add");
_Static_assert(sizeof(struct jpag_set_del) == 8, "jpag_set_del");
_Static_assert(sizeof(struct jpag_event_status) == 128, "jpag_event_status");
_Static_assert(sizeof(struct jpag_event_rec) == 32, "jpag_event_rec");
_Static_assert(sizeof(struct jpring_header) == 40, "jpring_header");
_Static_assert(sizeof(struct jpring_frame) == 16, "jpring_frame");
_Static_assert(sizeof(struct jpring_slot) == JPRING_SLOT_BYTES, "jpring_slot");

#endif
