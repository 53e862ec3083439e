// Short-lived threads next to a long one, for the same CPU time: main starts
// one thread after another, each spinning about 2 ms of its own CPU time in
// shortWork() and ending, while one long thread spins in longWork() in 2 ms
// steps, pausing whenever it is ahead of the short threads' total. A
// per-thread CPU clock that samples each thread every interval (10 ms)
// never samples a 2 ms thread unless its first sample falls at a random
// point of its CPU time.
// Usage: java ShortThreads SECONDS [PAUSE_MS]
// (PAUSE_MS: each short thread sleeps that long before it spins, so that a
// profiler's per-thread set-up is done before its CPU time starts: with and
// without it, the share of the short threads tells how much of their CPU
// time passes before their event counts.)
// Prints {"long_cpu_ns":..,"short_cpu_ns":..,"short_threads":..,
// "start_ns":..}: the CPU time (ThreadMXBean.getCurrentThreadCpuTime) spent
// inside each method, and the mean wall time from Thread.start() to the
// first line of a short thread's run() (what a profiler's set-up in
// ThreadStart costs the application).
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.concurrent.atomic.AtomicLong;

public class ShortThreads {
    static final long STEP_NS = 2_000_000;
    static final AtomicLong shortCpu = new AtomicLong();
    static final AtomicLong longCpu = new AtomicLong();
    static final AtomicLong startNs = new AtomicLong();
    static volatile long startedAt;
    static volatile long sink;

    static long spin(ThreadMXBean tmx, long cpuNs) {
        long start = tmx.getCurrentThreadCpuTime(), now = start;
        long x = sink | 1;
        while (now - start < cpuNs) {
            for (int i = 0; i < 2_000; i++) {
                x ^= x << 13;
                x ^= x >>> 7;
                x ^= x << 17;
            }
            now = tmx.getCurrentThreadCpuTime();
        }
        sink = x;
        return now - start;
    }

    static long shortWork(ThreadMXBean tmx) {
        return spin(tmx, STEP_NS);
    }

    static long longWork(ThreadMXBean tmx) {
        return spin(tmx, STEP_NS);
    }

    public static void main(String[] args) throws InterruptedException {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        long pauseMs = args.length > 1 ? Long.parseLong(args[1]) : 0;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        ThreadMXBean tmx = ManagementFactory.getThreadMXBean();
        long n = 0;

        Thread longer = new Thread(() -> {
            while (System.nanoTime() < end) {
                if (longCpu.get() > shortCpu.get()) {
                    try {
                        Thread.sleep(1);
                    } catch (InterruptedException e) {
                        return;
                    }
                    continue;
                }
                longCpu.addAndGet(longWork(tmx));
            }
        }, "long-worker");
        longer.start();
        while (System.nanoTime() < end) {
            Thread t = new Thread(() -> {
                startNs.addAndGet(System.nanoTime() - startedAt);
                if (pauseMs > 0) {
                    try {
                        Thread.sleep(pauseMs);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                shortCpu.addAndGet(shortWork(tmx));
            }, "short-" + (n % 1000));
            startedAt = System.nanoTime();
            t.start();
            t.join();
            n++;
        }
        longer.join();
        System.out.println("{\"long_cpu_ns\":" + longCpu.get() + ",\"short_cpu_ns\":" + shortCpu.get()
                + ",\"short_threads\":" + n + ",\"start_ns\":" + startNs.get() / Math.max(1, n) + "}");
    }
}
