// Allocation split: big() allocates byte[3072] and small() byte[1024], one
// call each per round, so big() allocates three times the bytes of small()
// with the same number of objects. A profile that sums the sampled sizes
// without weighting them would show 9:1 (JVMTI samples an object with a
// probability that grows with its size); the right answer is 3:1.
// With GO, allocation starts once the file GO exists (so a recorder can be
// ready first), and after SECONDS the program prints and idles until killed.
// Usage: java AllocSplit SECONDS [GO]
// Prints {"big_bytes":..,"small_bytes":..,"rounds":..,"cpu_ns":..}: the
// array bytes (without object headers) each method allocated, and the main
// thread's CPU time over the same span (rounds per cpu_ns compares overhead
// even on a busy machine; bench/alloc_lock_overhead.sh).
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;

public class AllocSplit {
    static final byte[][] keep = new byte[64][];
    static volatile long sink;

    static void big(int i) {
        byte[] b = new byte[3072];
        b[i & 1023] = (byte) i;
        keep[i & 63] = b;   // escapes: the JIT cannot drop the allocation
    }

    static void small(int i) {
        byte[] b = new byte[1024];
        b[i & 1023] = (byte) i;
        keep[(i + 32) & 63] = b;
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        Path go = args.length > 1 ? Path.of(args[1]) : null;
        while (go != null && !Files.exists(go))
            Thread.sleep(10);
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        long cpu0 = mx.getCurrentThreadCpuTime();
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        long rounds = 0;

        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                big(i);
                small(i);
            }
            rounds += 1000;
            sink += keep[(int) (rounds & 63)].length;
        }
        System.out.println("{\"big_bytes\":" + rounds * 3072 + ",\"small_bytes\":" + rounds * 1024
                + ",\"rounds\":" + rounds + ",\"cpu_ns\":" + (mx.getCurrentThreadCpuTime() - cpu0) + "}");
        System.out.flush();
        while (go != null)
            Thread.sleep(1000);
    }
}
