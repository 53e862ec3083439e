/* New threads and execs of the processes the daemon watches. */
#include "jprof.bpf.h"

/* tgids whose new threads userspace wants to hear about. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} watched SEC(".maps");

/* Tells userspace that a thread of a watched tgid was created (type
 * JP_MSG_NEW_THREAD) or that a process exec'd (JP_MSG_EXEC, every process:
 * the symbolizer may hold the maps of the image it left). */
static __always_inline void report_task(__u32 type, __u32 tgid, __u32 tid)
{
	struct jp_msg_new_thread *m;

	if (type != JP_MSG_EXEC && !bpf_map_lookup_elem(&watched, &tgid))
		return;
	m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		struct jp_counters *c = get_counters();

		if (c)
			c->ringbuf_full++;
		return;
	}
	m->type = type;
	m->tgid = tgid;
	m->tid = tid;
	m->pad = 0;
	m->time_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(m, 0);
}

SEC("tp_btf/task_newtask")
int BPF_PROG(on_fork, struct task_struct *task, __u64 clone_flags)
{
	__u32 tgid, tid = task->pid, ctid;

	if (!(clone_flags & CLONE_THREAD))
		return 0;
	tgid = task->tgid;
	if (jp_pidns_ino) {
		/* The creator is a thread of the same process: its tgid in our
		 * namespace is the new thread's. The new tid we cannot name
		 * here, so userspace rescans the process. */
		if (current_ids(&tgid, &ctid))
			return 0;
		tid = 0;
	}
	report_task(JP_MSG_NEW_THREAD, tgid, tid);
	return 0;
}

/* After an exec has installed its credentials: the daemon checks again
 * that whoever records the process may still read it (a setuid program). */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid, tid;

	if (current_ids(&tgid, &tid))
		return 0;
	/* The old image's tables: the next sample asks for new ones. */
	bpf_map_delete_elem(&unwind_procs, &tgid);
	report_task(JP_MSG_EXEC, tgid, tid);
	return 0;
}
