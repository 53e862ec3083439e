// Two busy threads, for the system test's JVM record: "main" burns CPU in
// spin(), "reader" reads a 1 MiB file over and over in readFile()
// (FileInputStream.read -> native readBytes -> read(2) -> vfs_read), so a
// CPU profile of the reader has Java, native and kernel frames in one stack.
// Usage: java SpinRead SECONDS FILE
// Writes FILE, then creates FILE.ready once both threads have done a round
// of work (the test waits for it instead of sleeping), and exits after
// SECONDS so a forgotten JVM does not run on.
import java.io.FileInputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.CountDownLatch;

public class SpinRead {
    static volatile long sink;
    static volatile boolean done;

    static long spin(long iters) {
        long x = sink | 1;
        for (long i = 0; i < iters; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        sink = x;
        return x;
    }

    static long readFile(Path file, byte[] buf) throws IOException {
        long bytes = 0;
        try (FileInputStream in = new FileInputStream(file.toFile())) {
            int n;
            while ((n = in.read(buf)) > 0)
                bytes += n;
        }
        return bytes;
    }

    public static void main(String[] args) throws Exception {
        long seconds = Long.parseLong(args[0]);
        Path file = Paths.get(args[1]);
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        Files.write(file, new byte[1 << 20]);
        CountDownLatch readerRan = new CountDownLatch(1);

        Thread reader = new Thread(() -> {
            byte[] buf = new byte[64 * 1024];
            long total = 0;
            try {
                while (!done) {
                    total += readFile(file, buf);
                    readerRan.countDown();
                }
            } catch (IOException e) {
                throw new RuntimeException(e);
            }
            sink += total;
        }, "reader");
        reader.setDaemon(true);
        reader.start();

        spin(1_000_000);
        readerRan.await();
        Files.createFile(Paths.get(args[1] + ".ready"));
        System.out.println("ready");
        while (System.nanoTime() < end)
            spin(10_000_000);
        done = true;
    }
}
