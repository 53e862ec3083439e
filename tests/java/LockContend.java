// A contended monitor under load: THREADS threads each enter one shared
// monitor in a loop, do a little work inside and a little outside. The
// throughput is what a lock profiler slows down (bench/alloc_lock_overhead.sh).
// With KIND "reentrant" the lock is a java.util.concurrent ReentrantLock
// (waiters park) instead of a monitor.
// With GO, the loop starts once the file GO exists; after SECONDS the
// program prints and idles until killed.
// Usage: java LockContend SECONDS [GO [THREADS [monitor|reentrant]]]
// Prints {"ops":..,"cpu_ns":..}: monitor entries, and the CPU time of the
// threads that made them.
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

public class LockContend {
    static final Object lock = new Object();
    static final ReentrantLock rlock = new ReentrantLock();
    static boolean reentrant;
    static long shared;
    static volatile long sink;

    static long spin(long x, int n) {
        for (int i = 0; i < n; i++)
            x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }

    static long work(long end) {
        long ops = 0, x = 1;
        while ((ops & 255) != 0 || System.nanoTime() < end) {
            if (reentrant) {
                rlock.lock();
                try {
                    shared = spin(shared, 20);
                } finally {
                    rlock.unlock();
                }
            } else {
                synchronized (lock) {
                    shared = spin(shared, 20);
                }
            }
            x = spin(x, 20);
            ops++;
        }
        sink += x;
        return ops;
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        Path go = args.length > 1 ? Path.of(args[1]) : null;
        int nthreads = args.length > 2 ? Integer.parseInt(args[2]) : 2;
        reentrant = args.length > 3 && args[3].equals("reentrant");
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        AtomicLong ops = new AtomicLong(), cpu = new AtomicLong();
        while (go != null && !Files.exists(go))
            Thread.sleep(10);
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        Thread[] threads = new Thread[nthreads];
        for (int i = 0; i < nthreads; i++) {
            threads[i] = new Thread(() -> {
                long c0 = mx.getCurrentThreadCpuTime();
                ops.addAndGet(work(end));
                cpu.addAndGet(mx.getCurrentThreadCpuTime() - c0);
            }, "contender-" + i);
            threads[i].start();
        }
        for (Thread t : threads)
            t.join();
        System.out.println("{\"ops\":" + ops.get() + ",\"cpu_ns\":" + cpu.get() + "}");
        System.out.flush();
        while (go != null)
            Thread.sleep(1000);
    }
}
