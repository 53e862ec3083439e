"""Issue 27, point 5: user stacks go through signal frames. sig_spin spends
most of its CPU in a SIGALRM handler, built without frame pointers. Its
stacks run sig_handler_work <- sig_handler <- the kernel's signal frame
(libc's __restore_rt, whose CFI says where the interrupted registers are)
<- sig_wait_loop <- sig_outer <- main. Before, the CFI walk stopped at the
trampoline (an unnamed libc.so.6+0x... frame, 5.7% of postgres's samples);
now the trampoline is `[signal]` and the walk reaches main and the C
library's start."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jproftest as jt  # noqa: E402

ROOTS = ("_start", "__libc_start_main", "__libc_start_call_main")
INTERRUPTED = ["main", "sig_outer", "sig_wait_loop"]   # then what it called, if anything
HANDLER = ["[signal]", "sig_handler", "sig_handler_work"]


def through_signal(f):
    """The interrupted code from the C library's start, then the handler."""
    return (any(r in f for r in ROOTS) and jt.has_seq(f, INTERRUPTED) and jt.has_seq(f, HANDLER)
            and f.index("sig_wait_loop") < f.index("[signal]"))


def main(t):
    d = t.start_daemon()

    with t.case("a signal handler's samples: main...sig_wait_loop...;[signal];sig_handler..."):
        w = t.workload("sig_spin", 60)
        out = os.path.join(t.outdir(), "sig.collapsed")
        t.ctl(["record", "--pid", str(w.pid), "-d", "3s", "-o", out, "-f", "collapsed",
               "--no-progress"], user="nobody", socket_path=d.socket, timeout=60, check_rc=0)
        with open(out) as f:
            stacks = jt.parse_collapsed(f.read())
        handler = jt.samples_matching(stacks, lambda f: "sig_handler_work" in f)
        through = jt.samples_matching(stacks, through_signal)
        jt.log("sig_spin: %d samples in the handler, %d of them through [signal] to the start"
               % (handler, through))
        jt.check(handler >= 50, "only %d samples in sig_handler_work:\n%s"
                 % (handler, jt.top_stacks(stacks)))
        jt.check(through >= 0.9 * handler,
                 "%d of %d handler samples reach _start through [signal]:\n%s"
                 % (through, handler, jt.top_stacks(stacks)))
        w.kill()


jt.run(main)
