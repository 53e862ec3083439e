// Allocations and a contended monitor in one JVM, for a recording of several
// events (-e cpu,alloc,lock): AllocSplit's big()/small() 3:1 byte split on the
// main thread and LockWait's waiter() on its Box monitor in thread
// "lock-waiter" (with its ReentrantLock pair), both for SECONDS; then the
// program idles until killed.
// Usage: java AllocLock SECONDS
public class AllocLock {
    public static void main(String[] args) throws Exception {
        String seconds = args.length > 0 ? args[0] : "10";
        Thread lock = new Thread(() -> {
            try {
                LockWait.main(new String[] { seconds, "/" });   // "/" exists: no wait for GO
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }, "lock-waiter");
        lock.setDaemon(true);
        lock.start();
        AllocSplit.main(new String[] { seconds });
        while (true)
            Thread.sleep(1000);
    }
}
