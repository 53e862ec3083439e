// CPU work split between alpha() (about 70 %) and beta() (about 30 %), in
// rounds of 5 to 15 ms. The program measures the true split itself.
// Round lengths are random: a workload with a fixed period sampled at a
// fixed interval that divides it (10 ms rounds, 5 ms samples) puts every
// sample at the same phase of the round, and the profiled split then
// depends on that phase, not on where the time goes.
// Usage: java CpuSplit SECONDS [STOP [START]]
// (ends early once the file STOP exists: a test that has recorded enough
// need not wait for the rest; with START, the counts begin when that file
// appears, so that the truth covers the recorded seconds, not the warm-up:
// on a machine whose load changes, the split of wall-clock targets moves)
// Prints {"alpha_ns":..,"beta_ns":..,"alpha_cpu_ns":..,"beta_cpu_ns":..,
// "rounds":..,"work":..,"cpu_ns":..}: wall time (System.nanoTime) and thread
// CPU time around each call. A CPU profiler measures CPU time; on a busy
// machine the wall split also counts time spent waiting for a CPU.
// (work: loop iterations done; cpu_ns: CPU time of the main thread, which
// also pays for a profiler's signal handler: work per cpu_ns compares
// overhead even on a busy machine).
import java.lang.management.ManagementFactory;

public class CpuSplit {
    static final long ALPHA_TARGET_NS = 7_000_000;
    static final long BETA_TARGET_NS = 3_000_000;
    static final long[] alphaData = new long[4096];
    static final double[] betaData = new double[4096];
    static volatile long sink;

    static long alpha(long iters) {
        long[] a = alphaData;
        long x = sink | 1;
        for (long i = 0; i < iters; i++) {
            int k = (int) (i & (a.length - 1));
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            a[k] += x;
        }
        sink = x;
        return iters;
    }

    static long beta(long iters) {
        double[] b = betaData;
        double y = (sink & 0xff) + 1.5;
        for (long i = 0; i < iters; i++) {
            int k = (int) ((i * 7) & (b.length - 1));
            y = y * 1.0000001 + b[k];
            b[k] = y * 0.5;
        }
        sink = (long) y;
        return iters;
    }

    // Per-call iteration count that hits target given the last call.
    static long adapt(long iters, long took, long target) {
        if (took <= 0)
            return iters * 2;
        long next = (long) ((double) iters * target / took);
        return Math.max(1000, Math.min(next, iters * 4));
    }

    public static void main(String[] args) {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        java.io.File stop = args.length > 1 ? new java.io.File(args[1]) : null;
        java.io.File start = args.length > 2 ? new java.io.File(args[2]) : null;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        java.lang.management.ThreadMXBean tmx = ManagementFactory.getThreadMXBean();
        long alphaNs = 0, betaNs = 0, alphaCpu = 0, betaCpu = 0, rounds = 0, work = 0;
        long aIters = 100_000, bIters = 100_000;
        java.util.Random rnd = new java.util.Random(42);

        while (System.nanoTime() < end && (stop == null || !stop.exists())) {
            if (start != null && start.exists()) {
                alphaNs = betaNs = alphaCpu = betaCpu = rounds = work = 0;
                start = null;
            }
            long c0 = tmx.getCurrentThreadCpuTime();
            long t0 = System.nanoTime();
            work += alpha(aIters);
            long t1 = System.nanoTime();
            long c1 = tmx.getCurrentThreadCpuTime();
            work += beta(bIters);
            long t2 = System.nanoTime();
            long c2 = tmx.getCurrentThreadCpuTime();
            alphaNs += t1 - t0;
            betaNs += t2 - t1;
            alphaCpu += c1 - c0;
            betaCpu += c2 - c1;
            double f = 0.5 + rnd.nextDouble();
            aIters = adapt(aIters, t1 - t0, (long) (ALPHA_TARGET_NS * f));
            bIters = adapt(bIters, t2 - t1, (long) (BETA_TARGET_NS * f));
            rounds++;
        }
        long cpuNs = ManagementFactory.getThreadMXBean().getCurrentThreadCpuTime();
        System.out.println("{\"alpha_ns\":" + alphaNs + ",\"beta_ns\":" + betaNs
                + ",\"alpha_cpu_ns\":" + alphaCpu + ",\"beta_cpu_ns\":" + betaCpu
                + ",\"rounds\":" + rounds + ",\"work\":" + work + ",\"cpu_ns\":" + cpuNs + "}");
    }
}
