// Java threads whose CPU time goes mostly to the VM, called from compiled
// code through runtime stubs: "alloc" allocates large arrays in a hot loop
// (C1/C2's new_type_array / _new_array_Java stubs -> the VM allocates and
// zeroes them outside the TLAB), "lock-1" and "lock-2" contend on one
// monitor (monitorenter's slow path spins in the VM). AsyncGetCallTrace
// answers "not Java" for many of these samples; the agent walks them from
// the thread's frame anchor (agent/javawalk.c).
// Usage: java RtStubs SECONDS
// Prints "ready" once every thread has run its loop for 300 ms.
import java.util.concurrent.CountDownLatch;

public class RtStubs {
    static volatile long sink;
    static final Object LOCK = new Object();
    static long counter;
    static final CountDownLatch started = new CountDownLatch(3);

    // Counted down once per thread, 300 ms into its loop (by time: under
    // contention on a loaded host a count of rounds took seconds).
    static boolean warm(boolean done, long startNs) {
        if (!done && System.nanoTime() - startNs > 300_000_000L) {
            started.countDown();
            return true;
        }
        return done;
    }

    static long allocLoop(long endNs) {
        long rounds = 0, startNs = System.nanoTime();
        boolean done = false;
        while (System.nanoTime() < endNs) {
            // 512 KiB: larger than a TLAB's free part most of the time,
            // smaller than a G1 region's half (not humongous).
            long[] a = new long[1 << 16];
            a[(int) (rounds & 0xffff)] = rounds;
            sink += a[(int) ((rounds * 7) & 0xffff)];
            rounds++;
            done = warm(done, startNs);
        }
        return rounds;
    }

    static long lockLoop(long endNs) {
        long rounds = 0, startNs = System.nanoTime();
        boolean done = false;
        while (System.nanoTime() < endNs) {
            synchronized (LOCK) {
                // Long enough inside that the other thread finds it held.
                for (int i = 0; i < 2000; i++)
                    counter += i ^ rounds;
            }
            rounds++;
            done = warm(done, startNs);
        }
        return rounds;
    }

    public static void main(String[] args) throws Exception {
        long endNs = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        long[] result = new long[3];
        Thread[] threads = {
            new Thread(() -> result[0] = allocLoop(endNs), "alloc"),
            new Thread(() -> result[1] = lockLoop(endNs), "lock-1"),
            new Thread(() -> result[2] = lockLoop(endNs), "lock-2"),
        };
        for (Thread t : threads)
            t.start();
        started.await();
        System.out.println("ready");
        System.out.flush();
        for (Thread t : threads)
            t.join();
        System.out.println("{\"allocs\":" + result[0] + ",\"locks\":" + (result[1] + result[2])
                           + ",\"sink\":" + (sink & 1) + "}");
    }
}
