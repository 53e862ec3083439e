// A thread in native zlib (Deflater/Inflater over a buffer, through JNI)
// while another allocates hard and collects: frequent and long stop-the-world
// pauses, during which the first thread keeps running its native code and
// AsyncGetCallTrace refuses its samples (GC active). Run with one GC thread
// (-XX:+UseSerialGC), so that the native thread keeps a CPU meanwhile.
// Usage: java GcNative SECONDS
// Prints "ready" after the first round of zlib, {"rounds":..,"allocs":..} at
// the end.
import java.nio.ByteBuffer;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.zip.DataFormatException;
import java.util.zip.Deflater;
import java.util.zip.Inflater;

public class GcNative {
    static volatile long sink;
    // Counted down after the zlib thread's first round: its set-up (direct
    // buffers zeroed, page faults) is over when "ready" is printed.
    static final CountDownLatch started = new CountDownLatch(1);

    // Direct buffers: the native code reads and writes them with no JNI
    // critical region, which would hold the collector off (GCLocker, JDK
    // 17), so its calls run on through the pauses.
    static long zlibLoop(long endNs) throws DataFormatException {
        byte[] data = new byte[1 << 20];
        new Random(1).nextBytes(data);
        for (int i = 0; i < data.length; i += 3)
            data[i] = 0;    // compressible, but not trivially
        ByteBuffer in = ByteBuffer.allocateDirect(data.length).put(data);
        ByteBuffer packed = ByteBuffer.allocateDirect(data.length + (1 << 16));
        ByteBuffer out = ByteBuffer.allocateDirect(data.length);
        Deflater def = new Deflater(6);
        Inflater inf = new Inflater();
        long rounds = 0;
        while (System.nanoTime() < endNs) {
            in.flip();
            packed.clear();
            def.reset();
            def.setInput(in);
            def.finish();
            def.deflate(packed);
            packed.flip();
            out.clear();
            inf.reset();
            inf.setInput(packed);
            sink += inf.inflate(out);
            in.position(in.limit());
            if (rounds++ == 0)
                started.countDown();
        }
        return rounds;
    }

    // Allocates hard and keeps a graph of ~300k small objects live, then
    // asks for a full collection: the world stops most of the time, each
    // pause marking and compacting the whole graph.
    static long allocLoop(long endNs) {
        Object[] live = new Object[1 << 18];
        Random r = new Random(2);
        long allocs = 0;
        while (System.nanoTime() < endNs) {
            for (int i = 0; i < 20000; i++) {
                int k = r.nextInt(live.length);
                live[k] = new Object[] { live[r.nextInt(live.length)], new long[4] };
                sink += new byte[256].length;
            }
            allocs += 60000;
            System.gc();
        }
        return allocs;
    }

    public static void main(String[] args) throws Exception {
        long endNs = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        long[] result = new long[2];
        Thread zlib = new Thread(() -> {
            try {
                result[0] = zlibLoop(endNs);
            } catch (DataFormatException e) {
                throw new IllegalStateException(e);
            }
        }, "zlib");
        Thread alloc = new Thread(() -> result[1] = allocLoop(endNs), "alloc");
        zlib.start();
        alloc.start();
        started.await();
        System.out.println("ready");
        System.out.flush();
        zlib.join();
        alloc.join();
        System.out.println("{\"rounds\":" + result[0] + ",\"allocs\":" + result[1] + "}");
    }
}
