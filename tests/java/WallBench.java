// A JVM with many sleeping threads and one busy one, for the cost of
// wall-clock recording (bench/wall_overhead.sh): THREADS threads sleep 100 ms
// at a time, the main thread runs a CPU loop for SECONDS once GOFILE exists
// (so the agent is on before measuring starts).
// Usage: java WallBench SECONDS THREADS [GOFILE]
// Prints {"work":..,"cpu_ns":..,"process_cpu_ns":..,"wall_ns":..}: loop
// iterations, the main thread's CPU time (it pays for its own samples), and
// the whole process's CPU time over the measured span (the wall timer
// thread, every signal handler and the JVM's own threads).
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Paths;

public class WallBench {
    static volatile long sink;

    // A linear congruential step per iteration: CPU only, no memory.
    static long lcg(long iters) {
        long x = sink;
        for (long i = 0; i < iters; i++)
            x = x * 6364136223846793005L + 1442695040888963407L;
        sink = x;
        return iters;
    }

    static void sleeper() {
        try {
            for (;;)
                Thread.sleep(100);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static long processCpu() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        return os instanceof com.sun.management.OperatingSystemMXBean
                ? ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime() : -1;
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        int threads = args.length > 1 ? Integer.parseInt(args[1]) : 200;
        for (int i = 0; i < threads; i++) {
            Thread t = new Thread(WallBench::sleeper, "sleeper-" + i);
            t.setDaemon(true);
            t.start();
        }
        if (args.length > 2)
            while (!Files.exists(Paths.get(args[2])))
                Thread.sleep(10);
        java.lang.management.ThreadMXBean tmx = ManagementFactory.getThreadMXBean();
        long c0 = tmx.getCurrentThreadCpuTime(), p0 = processCpu(), t0 = System.nanoTime();
        long end = t0 + seconds * 1_000_000_000L, work = 0;
        while (System.nanoTime() < end)
            work += lcg(100_000);
        long c1 = tmx.getCurrentThreadCpuTime(), p1 = processCpu(), t1 = System.nanoTime();
        System.out.println("{\"work\":" + work + ",\"cpu_ns\":" + (c1 - c0)
                + ",\"process_cpu_ns\":" + (p1 - p0) + ",\"wall_ns\":" + (t1 - t0) + "}");
        for (;;)
            Thread.sleep(1000);
    }
}
