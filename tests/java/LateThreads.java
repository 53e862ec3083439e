// Threads that appear during a recording: main sleeps DELAY seconds, then
// starts 3 threads "late-worker-<i>" spinning in lateWork() until the end.
// Usage: java LateThreads SECONDS DELAY
// Prints {"late_work":..,"threads":3}.
import java.util.concurrent.atomic.AtomicLong;

public class LateThreads {
    static final AtomicLong total = new AtomicLong();

    static long lateWork(long endNs) {
        long x = Thread.currentThread().getId() | 1, n = 0;
        while (System.nanoTime() < endNs) {
            for (int i = 0; i < 100_000; i++) {
                x ^= x << 13;
                x ^= x >>> 7;
                x ^= x << 17;
            }
            n++;
        }
        return n + (x == 42 ? 1 : 0);
    }

    public static void main(String[] args) throws InterruptedException {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        long delay = args.length > 1 ? Long.parseLong(args[1]) : 2;
        long end = System.nanoTime() + seconds * 1_000_000_000L;

        Thread.sleep(delay * 1000);
        Thread[] workers = new Thread[3];
        for (int i = 0; i < workers.length; i++) {
            workers[i] = new Thread(() -> total.addAndGet(lateWork(end)), "late-worker-" + i);
            workers[i].start();
        }
        for (Thread t : workers)
            t.join();
        System.out.println("{\"late_work\":" + total.get() + ",\"threads\":" + workers.length + "}");
    }
}
