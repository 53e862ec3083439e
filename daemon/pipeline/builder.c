#include "builder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "jprof_agent.h"
#include "jvmjoin.h"
#include "procinfo.h"
#include "symbols.h"
#include <linux/types.h>
#include "bpf/sampler.h"

/* Markers, user stack, kernel stack, a root frame, Java frames. */
#define BUILDER_MAX_FRAMES (2 * JP_MAX_STACK_DEPTH + 8 + JPRING_MAX_FRAMES)

struct builder {
	struct symbols *sym;
	struct procinfo *pi;
	struct sample_frame frames[BUILDER_MAX_FRAMES];
	size_t name_off[BUILDER_MAX_FRAMES];    /* offsets into arena, fixed up at the end */
	size_t module_off[BUILDER_MAX_FRAMES];
	/* User frames in files: address and mapping; path and build-id in the
	 * arena too (offsets), frames[i].loc set at the end. */
	struct frame_loc locs[BUILDER_MAX_FRAMES];
	size_t path_off[BUILDER_MAX_FRAMES], bid_off[BUILDER_MAX_FRAMES];
	bool has_loc[BUILDER_MAX_FRAMES];
	size_t n;
	struct buf arena;                        /* every name of the sample being built */
	struct sample_names names;
	struct sym_result r;                     /* scratch: large, kept off the stack */
	char java_name[SYM_NAME_MAX];
};

static const char *thread_name(const struct built_sample *bs, char *buf, size_t len)
{
	/* The name the thread had when sampled: it may have exited since. */
	if (bs->thread_comm) {
		snprintf(buf, len, "%s", bs->thread_comm);
		return buf;
	}
	return procinfo_thread_name((pid_t)bs->pid, bs->start_ns, (pid_t)bs->tid, buf, len);
}

static void begin(struct builder *b)
{
	b->n = 0;
	buf_reset(&b->arena);
}

static void push(struct builder *b, enum frame_kind kind, const char *name, const char *module)
{
	size_t off = b->arena.len;

	if (b->n >= BUILDER_MAX_FRAMES)
		return;
	/* On ENOMEM the frame keeps an empty name rather than vanishing. */
	if (buf_append(&b->arena, name, strlen(name) + 1) < 0 ||
	    buf_append(&b->arena, module, strlen(module) + 1) < 0) {
		b->arena.len = off;
		name = module = "";
		if (buf_append(&b->arena, "", 1) < 0)
			return;
		buf_append(&b->arena, "", 1);
	}
	b->frames[b->n].kind = kind;
	b->name_off[b->n] = off;
	b->module_off[b->n] = off + strlen(name) + 1;
	b->has_loc[b->n] = false;
	b->n++;
}

/* push() of a symbolized user frame, with where its code lies when known. */
static void push_sym(struct builder *b, const struct sym_result *r)
{
	size_t i = b->n, off;

	push(b, r->kind, r->name, r->module);
	if (!r->has_loc || b->n == i)
		return;
	off = b->arena.len;
	if (buf_append(&b->arena, r->loc.path, strlen(r->loc.path) + 1) < 0 ||
	    buf_append(&b->arena, r->loc.build_id, strlen(r->loc.build_id) + 1) < 0) {
		b->arena.len = off;  /* the frame stays, without an address */
		return;
	}
	b->locs[i] = r->loc;
	b->path_off[i] = off;
	b->bid_off[i] = off + strlen(r->loc.path) + 1;
	b->has_loc[i] = true;
}

/* Pointers into the arena, which no longer moves. */
static void finish(struct builder *b, struct built_sample *out)
{
	for (size_t i = 0; i < b->n; i++) {
		b->frames[i].name = b->arena.data + b->name_off[i];
		b->frames[i].module = b->arena.data + b->module_off[i];
		b->frames[i].loc = NULL;
		if (b->has_loc[i]) {
			b->locs[i].path = b->arena.data + b->path_off[i];
			b->locs[i].build_id = b->arena.data + b->bid_off[i];
			b->frames[i].loc = &b->locs[i];
		}
	}
	out->frames = b->frames;
	out->nframes = b->n;
	out->names = &b->names;
	out->thread_name = thread_name;
	out->thread_name_ctx = b;
}

static void reverse(struct builder *b, size_t from)
{
#define SWAP(a, b) do { __typeof__(a) t_ = (a); (a) = (b); (b) = t_; } while (0)
	for (size_t i = from, j = b->n; j-- > i; i++) {
		SWAP(b->frames[i], b->frames[j]);
		SWAP(b->name_off[i], b->name_off[j]);
		SWAP(b->module_off[i], b->module_off[j]);
		SWAP(b->locs[i], b->locs[j]);
		SWAP(b->path_off[i], b->path_off[j]);
		SWAP(b->bid_off[i], b->bid_off[j]);
		SWAP(b->has_loc[i], b->has_loc[j]);
	}
#undef SWAP
}

/* The jprofd agent's library in a JVM (libjprofagent.so, or its copy
 * .jprofagent-<uid>-<hash>.so: docs/attach.md). */
static bool agent_module(const char *m)
{
	size_t n = strlen(m);

	return strstr(m, "jprofagent") && n > 3 && !strcmp(m + n - 3, ".so");
}

/* JIT code, and the Java frames the BPF walk names in a JVM it knows
 * (daemon/hotspot/hs_proc.c): where an agent's Java frames take over. */
static bool java_code(enum frame_kind k)
{
	return k == FRAME_JIT_UNKNOWN || k == FRAME_JAVA_INTERP || k == FRAME_JAVA_JIT ||
	       k == FRAME_JAVA_C1 || k == FRAME_JAVA_INLINED || k == FRAME_JAVA;
}

/* User frames, root first (the stack map gives them leaf first). With
 * cut_at_jit, only the frames from the leaf up to the first address in JIT
 * code: from there on the Java frames tell the story (and frame-pointer
 * walks through JIT code are not to be trusted); jit_marker, if given,
 * stands where the stack was cut. A signal frame whose handler is the
 * jprofd agent's: the handler and all it called are the agent's work, not
 * the program's, and are left out with the signal frame (all the user
 * frames, if the unwind ended inside the handler); then true (the kernel
 * frames are the handler's too). */
static bool push_user(struct builder *b, uint32_t pid, uint64_t start, const uint64_t *uips,
		      uint32_t nu, bool kernel_mode, bool cut_at_jit, const char *jit_marker)
{
	size_t from = b->n;
	bool agent = false, cut = false;

	for (uint32_t i = 0; i < nu; i++) {
		/* Every user frame but an interrupted leaf is a return address; in
		 * kernel mode even the leaf points after the syscall instruction.
		 * The CFI walk tags the frame of a signal's return trampoline, and
		 * the frame the signal interrupted (no return address either). */
		uint64_t ip = uips[i] & ~(JP_IP_SIGNAL | JP_IP_INTERRUPTED);
		bool ret = (i > 0 || kernel_mode) && !(uips[i] & JP_IP_INTERRUPTED);

		if (uips[i] & JP_IP_SIGNAL) {
			if (agent) {
				b->n = from;
				agent = false;
				cut = true;
			} else {
				push(b, FRAME_MARKER, "[signal]", "");
			}
			continue;
		}
		if (symbols_resolve_user(b->sym, (pid_t)pid, start, ip, ret, &b->r) < 0)
			continue;
		agent = agent || agent_module(b->r.module);
		if (cut_at_jit && java_code(b->r.kind)) {
			if (jit_marker)
				push(b, FRAME_MARKER, jit_marker, "");
			break;
		}
		push_sym(b, &b->r);
	}
	/* The agent's frames and no signal frame after them (the unwind
	 * stopped inside the handler): where the handler ends is not known,
	 * so none of these user frames is shown, and a marker says whose the
	 * time is (never an empty stack: the agent thread's own off-CPU
	 * waits). */
	if (agent) {
		b->n = from;
		cut = true;
	}
	reverse(b, from);
	if (agent)
		push(b, FRAME_MARKER, "[jprofd_agent]", "");
	return cut;
}

/* Kernel frames root first (the stack map gives them leaf first); every
 * frame but the leaf is a return address, looked up at addr-1. Frames
 * without a symbol are "[kernel]" (never an address), one for a run of
 * them: without kallsyms a whole stack is one frame, not 20 equal ones. */
static void push_kernel(struct builder *b, const uint64_t *kips, uint32_t nk, bool lost)
{
	bool unknown_last = false;

	if (lost)
		push(b, FRAME_MARKER, "[kernel_stack_lost]", "");
	for (uint32_t i = nk; i-- > 0;) {
		uint64_t addr = i > 0 ? kips[i] - 1 : kips[i];
		int r = symbols_resolve_kernel(b->sym, addr, &b->r);

		if (r < 0 || (r > 0 && unknown_last))
			continue;
		unknown_last = r > 0;
		push(b, FRAME_KERNEL, b->r.name, b->r.module);
	}
}

/* The leaf frame of a sample of a wall-clock recording. */
static const char *state_frame(enum thread_state st)
{
	switch (st) {
	case THREAD_STATE_RUNNING: return "[running]";
	case THREAD_STATE_RUNNABLE: return "[runnable]";
	case THREAD_STATE_SLEEPING: return "[sleeping]";
	case THREAD_STATE_UNINTERRUPTIBLE: return "[uninterruptible]";
	case THREAD_STATE_UNKNOWN: break;
	}
	return NULL;
}

int builder_build(struct builder *b, const struct raw_sample *rs, const struct builder_opts *o,
		  struct built_sample *out)
{
	const char *state = o && o->thread_state ? state_frame(rs->state) : NULL;

	uint64_t start = procinfo_start_identity(rs->start_ns);

	begin(b);
	procinfo_get(b->pi, (pid_t)rs->pid, start, 0, &b->names);
	if (rs->comm)
		b->names.comm = rs->comm;
	if (o && o->process_root)
		push(b, FRAME_MARKER, b->names.comm[0] ? b->names.comm : "[unknown]", "");
	if (rs->ustack_lost)
		push(b, FRAME_MARKER, "[user_stack_lost]", "");
	/* A JVM thread sampled on the daemon's plain event, before the agent
	 * armed its own: in Java code its Java frames are missing, and the
	 * marker says so rather than showing JIT addresses as a whole stack. */
	if (!push_user(b, rs->pid, start, rs->uips, rs->nu, rs->kernel_mode,
		       o && o->java_unarmed, "[java_stack_missing]"))
		push_kernel(b, rs->kips, rs->nk, rs->kstack_lost);
	if (state)
		push(b, FRAME_MARKER, state, "");
	*out = (struct built_sample){
		.event = event_get(rs->event),
		.pid = rs->pid,
		.tid = rs->tid,
		.start_ns = start,
		.time_ns = rs->time_ns,
		.values = rs->values,
		.stack_lost = rs->ustack_lost || rs->kstack_lost,
	};
	finish(b, out);
	out->thread_comm = rs->thread_comm;
	return 0;
}

/* The agent's frame type as a frame kind: the same method shows as one
 * frame per way it ran, as in async-profiler. */
static enum frame_kind java_kind(uint8_t type)
{
	switch (type) {
	case JPRING_TYPE_INTERPRETED:
		return FRAME_JAVA_INTERP;
	case JPRING_TYPE_COMPILED:
		return FRAME_JAVA_JIT;
	case JPRING_TYPE_C1:
		return FRAME_JAVA_C1;
	case JPRING_TYPE_INLINED:
		return FRAME_JAVA_INLINED;
	default:
		return FRAME_JAVA;
	}
}

int builder_build_jvm(struct builder *b, uint32_t pid, uint64_t start_ns, const struct jvm_join *j,
		      const struct jvm_sample *js, const struct event_info *ev,
		      const uint64_t *values, struct built_sample *out)
{
	uint64_t start = procinfo_start_identity(start_ns);

	begin(b);
	procinfo_get(b->pi, (pid_t)pid, start, 0, &b->names);
	for (unsigned i = 0; i < js->njava && i < JPRING_MAX_FRAMES; i++) {
		jvm_join_frame_name(j, &js->java[i], b->java_name, sizeof(b->java_name));
		push(b, java_kind(js->java[i].type), b->java_name, "");
	}
	if (js->leaf)
		push(b, FRAME_JAVA, js->leaf, "");
	if (js->marker)
		push(b, FRAME_MARKER, js->marker, "");
	if (js->ustack_lost && !js->njava)
		push(b, FRAME_MARKER, "[user_stack_lost]", "");
	if (!push_user(b, pid, start, js->uips, js->nu, js->kernel_mode, js->java_context, NULL))
		push_kernel(b, js->kips, js->nk, js->kstack_lost);
	if (js->state)
		push(b, FRAME_MARKER, js->state, "");
	*out = (struct built_sample){
		.event = ev,
		.pid = pid,
		.tid = js->tid,
		.start_ns = start,
		.time_ns = js->time_ns,
		.values = values,
		.stack_lost = js->ustack_lost || js->kstack_lost,
		.has_java = js->njava > 0,
	};
	finish(b, out);
	return 0;
}

int builder_new(struct symbols *sym, struct procinfo *pi, struct builder **out)
{
	struct builder *b = calloc(1, sizeof(*b));

	*out = NULL;
	if (!b)
		return -ENOMEM;
	b->sym = sym;
	b->pi = pi;
	*out = b;
	return 0;
}

void builder_free(struct builder *b)
{
	if (!b)
		return;
	buf_release(&b->arena);
	free(b);
}
