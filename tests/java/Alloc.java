// Allocation-heavy: many short-lived objects, a share of them retained for a
// while in a bounded table so that collections have live data to move (the
// test runs it with a small -Xmx so GC threads are busy).
// Usage: java Alloc SECONDS
// Prints {"allocated":..,"gc_count":..,"gc_ms":..}.
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;

public class Alloc {
    static final class Node {
        final long value;
        final Node next;
        final byte[] payload;

        Node(long value, Node next, int size) {
            this.value = value;
            this.next = next;
            this.payload = new byte[size];
        }
    }

    static volatile long sink;

    static Node makeChain(long seed, int length) {
        Node n = null;
        for (int i = 0; i < length; i++)
            n = new Node(seed + i, n, 16 + (int) ((seed + i) & 255));
        return n;
    }

    public static void main(String[] args) {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        Node[] retained = new Node[20_000];
        long allocated = 0, seed = 0;

        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                Node n = makeChain(seed++, 8);
                allocated += 8;
                if ((seed & 15) == 0)
                    retained[(int) (seed % retained.length)] = n;
                else
                    sink += n.value;
            }
        }
        long gcCount = 0, gcMs = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            gcCount += Math.max(0, gc.getCollectionCount());
            gcMs += Math.max(0, gc.getCollectionTime());
        }
        System.out.println("{\"allocated\":" + allocated + ",\"gc_count\":" + gcCount
                + ",\"gc_ms\":" + gcMs + "}");
    }
}
