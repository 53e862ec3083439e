// A contended monitor with a known holder: holder() keeps the LockWait$Box
// monitor for HOLD_MS at a time; waiter() enters the same monitor in a
// loop and measures how long each entry took (System.nanoTime). Contention
// starts once the file GO exists (so a recorder can be ready first) and
// lasts SECONDS; then the total wait is printed and the program idles until
// killed, holding no lock.
// Usage: java LockWait SECONDS GO
// Prints {"wait_ns":..,"entries":..,"contended":..}: the waiter's total time
// to enter, its entries, and those that took 1 ms or more.
import java.nio.file.Files;
import java.nio.file.Path;

public class LockWait {
    static final class Box {
        long value;
    }

    static final Box box = new Box();
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

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 5;
        Path go = Path.of(args.length > 1 ? args[1] : "/nonexistent");
        while (!Files.exists(go))
            Thread.sleep(10);
        Thread h = new Thread(() -> {
            try {
                holder();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "lock-holder");
        h.start();
        long[] r = waiter(System.nanoTime() + seconds * 1_000_000_000L);
        running = false;
        h.join();
        System.out.println("{\"wait_ns\":" + r[0] + ",\"entries\":" + r[1] + ",\"contended\":"
                + r[2] + "}");
        System.out.flush();
        while (true)
            Thread.sleep(1000);
    }
}
