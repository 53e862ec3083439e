// A contended monitor with a known holder: holder() keeps the LockWait$Box
// monitor for HOLD_MS at a time; waiter() enters the same monitor in a
// loop and measures how long each entry took (System.nanoTime). The same
// with a java.util.concurrent lock at the same time: rholder() keeps a
// ReentrantLock, rwaiter() takes it. Contention starts once the file GO
// exists (so a recorder can be ready first) and lasts SECONDS; then the
// total waits are printed and the program idles until killed, holding no
// lock.
// Usage: java LockWait SECONDS GO
// Prints {"wait_ns":..,"entries":..,"contended":..,"park_wait_ns":..,
// "park_entries":..,"park_contended":..}: each waiter's total time to
// enter, its entries, and those that took 1 ms or more.
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.locks.ReentrantLock;

public class LockWait {
    static final class Box {
        long value;
    }

    static final Box box = new Box();
    static final ReentrantLock rlock = new ReentrantLock();
    static long rvalue;
    static final long HOLD_MS = 20;
    static volatile boolean running = true;

    static void holder() throws InterruptedException {
        while (running) {
            synchronized (box) {
                box.value++;
                Thread.sleep(HOLD_MS);
            }
            Thread.sleep(2);   // lets the waiter in between holds
        }
    }

    static long[] waiter(long end) throws InterruptedException {
        long waitNs = 0, entries = 0, contended = 0;
        while (System.nanoTime() < end) {
            long t0 = System.nanoTime();
            synchronized (box) {
                long took = System.nanoTime() - t0;
                waitNs += took;
                entries++;
                if (took >= 1_000_000)
                    contended++;
                box.value--;
            }
            Thread.sleep(1);   // the holder takes it again meanwhile
        }
        return new long[] { waitNs, entries, contended };
    }

    static void rholder() throws InterruptedException {
        while (running) {
            rlock.lock();
            try {
                rvalue++;
                Thread.sleep(HOLD_MS);
            } finally {
                rlock.unlock();
            }
            Thread.sleep(2);
        }
    }

    static long[] rwaiter(long end) throws InterruptedException {
        long waitNs = 0, entries = 0, contended = 0;
        while (System.nanoTime() < end) {
            long t0 = System.nanoTime();
            rlock.lock();
            try {
                long took = System.nanoTime() - t0;
                waitNs += took;
                entries++;
                if (took >= 1_000_000)
                    contended++;
                rvalue--;
            } finally {
                rlock.unlock();
            }
            Thread.sleep(1);
        }
        return new long[] { waitNs, entries, contended };
    }

    static Thread start(String name, Runnable r) {
        Thread t = new Thread(r, name);
        t.start();
        return t;
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 5;
        Path go = Path.of(args.length > 1 ? args[1] : "/nonexistent");
        while (!Files.exists(go))
            Thread.sleep(10);
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        long[][] pr = new long[1][];
        Thread h = start("lock-holder", () -> {
            try {
                holder();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Thread rh = start("rlock-holder", () -> {
            try {
                rholder();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Thread rw = start("rlock-waiter", () -> {
            try {
                pr[0] = rwaiter(end);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        long[] r = waiter(end);
        rw.join();
        running = false;
        h.join();
        rh.join();
        long[] p = pr[0];
        System.out.println("{\"wait_ns\":" + r[0] + ",\"entries\":" + r[1] + ",\"contended\":"
                + r[2] + ",\"park_wait_ns\":" + p[0] + ",\"park_entries\":" + p[1]
                + ",\"park_contended\":" + p[2] + "}");
        System.out.flush();
        while (true)
            Thread.sleep(1000);
    }
}
