// A JVM for the attach tests to load an agent into: prints "ready" once its
// main thread runs, then idles. It exits when its stdin reaches EOF, so a
// test that dies without cleaning up does not leave it behind.
public class AttachTarget {
    public static void main(String[] args) throws Exception {
        Thread watcher = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                }
            } catch (java.io.IOException e) {
                // stdin unusable: same as EOF
            }
            System.exit(0);
        }, "stdin-watcher");
        watcher.setDaemon(true);
        watcher.start();
        System.out.println("ready");
        System.out.flush();
        while (true) {
            Thread.sleep(60_000);
        }
    }
}
