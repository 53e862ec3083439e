// Threads with Java names longer than /proc's 15-byte comm: a worker named
// "worker-with-a-very-long-name-1" started at once, and one named
// "late-worker-with-a-long-name-2" started DELAY seconds later (during a
// recording that began before). Both spin in spin(); main spins in mainSpin().
// Usage: java ThreadNames SECONDS DELAY
// Prints "ready" once the first worker runs, {"tids":[..]} at the end.
import java.util.concurrent.atomic.AtomicLong;

public class ThreadNames {
    static final AtomicLong total = new AtomicLong();

    // The xorshift loop of LateThreads (compiled with it).
    static long spin(long endNs) {
        return LateThreads.lateWork(endNs);
    }

    static long mainSpin(long endNs) {
        return spin(endNs);
    }

    public static void main(String[] args) throws InterruptedException {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        long delay = args.length > 1 ? Long.parseLong(args[1]) : 3;
        long end = System.nanoTime() + seconds * 1_000_000_000L;

        Thread first = new Thread(() -> total.addAndGet(spin(end)), "worker-with-a-very-long-name-1");
        first.start();
        System.out.println("ready");
        System.out.flush();
        total.addAndGet(mainSpin(System.nanoTime() + delay * 1_000_000_000L));
        Thread late = new Thread(() -> total.addAndGet(spin(end)), "late-worker-with-a-long-name-2");
        late.start();
        total.addAndGet(mainSpin(end));
        first.join();
        late.join();
        System.out.println("{\"total\":" + total.get() + "}");
    }
}
