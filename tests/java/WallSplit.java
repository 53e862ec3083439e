// Wall-clock time with a known truth, nothing on the CPU: thread "sleeper"
// sleeps in a() and b() in turn, 7:3 (rounds of 10, 20 or 30 ms, random so
// that no sampling interval keeps hitting the same phase of a round); thread
// "reader" blocks in readBlocked(), a socket read from a local server that
// accepts and never writes. The program measures the sleeper's true split.
// Usage: java WallSplit SECONDS
// Prints {"a_ns":..,"b_ns":..,"rounds":..} once SECONDS have passed.
import java.io.InputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;

public class WallSplit {
    static volatile boolean done;
    static long aNs, bNs, rounds;

    static void a(long ms) throws InterruptedException {
        Thread.sleep(ms);
    }

    static void b(long ms) throws InterruptedException {
        Thread.sleep(ms);
    }

    static void sleeper() {
        java.util.Random rnd = new java.util.Random(7);
        try {
            while (!done) {
                long k = 1 + rnd.nextInt(3);   // whole ms: sleep() rounds to them
                long t0 = System.nanoTime();
                a(7 * k);
                long t1 = System.nanoTime();
                b(3 * k);
                long t2 = System.nanoTime();
                aNs += t1 - t0;
                bNs += t2 - t1;
                rounds++;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static int readBlocked(InputStream in) throws java.io.IOException {
        return in.read();
    }

    static void reader(int port) {
        try (Socket s = new Socket(InetAddress.getLoopbackAddress(), port)) {
            readBlocked(s.getInputStream());
        } catch (java.io.IOException e) {
            // The server closed it at the end: done.
        }
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        try (ServerSocket server = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            Thread r = new Thread(() -> reader(server.getLocalPort()), "reader");
            r.setDaemon(true);
            r.start();
            try (Socket peer = server.accept()) {
                peer.setKeepAlive(false);   // held open, never written to
                Thread sl = new Thread(WallSplit::sleeper, "sleeper");
                sl.start();
                Thread.sleep(seconds * 1000);
                done = true;
                sl.join();
            }
        }
        System.out.println("{\"a_ns\":" + aNs + ",\"b_ns\":" + bNs + ",\"rounds\":" + rounds + "}");
    }
}
