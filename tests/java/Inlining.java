// A hot method with a small callee that the JIT inlines: hot() calls
// mix() (a few bytecodes, a frequent call site) in a loop, so after
// warm-up hot() runs compiled with mix() inlined into it. Under -Xint both
// stay interpreted.
// Usage: java Inlining SECONDS
// Prints "ready" once warmed up (or at once under -Xint), {"sum":..} at the end.
public class Inlining {
    static volatile long sink;

    // A loop whose trip count the JIT cannot know keeps a safepoint poll
    // (debug information) inside mix's own code once inlined, so samples
    // land in mix's scope, not only in hot's.
    static long mix(long x) {
        for (long k = (x & 7) + 16; k > 0; k--) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
        }
        return x;
    }

    static long hot(long iters) {
        long x = sink | 1;
        for (long i = 0; i < iters; i++) {
            x = mix(x + i);
        }
        return x;
    }

    public static void main(String[] args) {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        long sum = 0;
        boolean ready = false;
        long warm = System.nanoTime() + 1_000_000_000L;
        while (System.nanoTime() < end) {
            sum += hot(2_000);
            if (!ready && System.nanoTime() > warm) {
                System.out.println("ready");
                System.out.flush();
                ready = true;
            }
        }
        sink = sum;
        System.out.println("{\"sum\":" + sum + "}");
    }
}
