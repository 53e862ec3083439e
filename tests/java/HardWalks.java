// Calls where AsyncGetCallTrace often cannot start a walk: "mega" makes
// megamorphic interface and virtual calls (eight classes behind one
// interface and one abstract class: itable and vtable stubs); "recurse" makes
// deep recursive calls of small compiled methods (much of their time is in
// method entries and exits, before the frame is built or after it is gone);
// "indirect" calls through lambdas and MethodHandles (invokeExact on bound
// and filtered handles: method handle adapters and lambda forms); "throw"
// throws and catches an exception in a hot loop (the stack walk that fills
// the trace runs in the VM); "leaf" reads the clocks in a hot loop (compiled
// code calls os::javaTimeNanos and os::javaTimeMillis as leaf calls: the
// thread stays in state Java while it runs native code, with no frame anchor).
// Usage: java HardWalks SECONDS [mega, recurse, indirect, throw or leaf]
// Prints "ready" at once, {"calls":..} at the end.
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;

public class HardWalks {
    interface Op { long apply(long x); }

    abstract static class Base { abstract long step(long x); }

    static final class A extends Base implements Op {
        public long apply(long x) { return x * 3 + 1; }
        long step(long x) { return x ^ (x >>> 3); }
    }
    static final class B extends Base implements Op {
        public long apply(long x) { return x + 7; }
        long step(long x) { return x * 5; }
    }
    static final class C extends Base implements Op {
        public long apply(long x) { return x ^ 0x5555; }
        long step(long x) { return x + 11; }
    }
    static final class D extends Base implements Op {
        public long apply(long x) { return x - 3; }
        long step(long x) { return x << 1; }
    }
    static final class E extends Base implements Op {
        public long apply(long x) { return x * 7; }
        long step(long x) { return x - 13; }
    }
    static final class F extends Base implements Op {
        public long apply(long x) { return x >>> 1; }
        long step(long x) { return x ^ 0x3333; }
    }
    static final class G extends Base implements Op {
        public long apply(long x) { return x | 0x10; }
        long step(long x) { return x * 9; }
    }
    static final class H extends Base implements Op {
        public long apply(long x) { return x & 0xffffff; }
        long step(long x) { return x + 17; }
    }

    static long loop(Op[] ops, Base[] bases, long endNs) {
        long x = 1, calls = 0;
        while (System.nanoTime() < endNs) {
            for (int i = 0; i < 1_000_000; i++) {
                x = ops[(int) (x & 7)].apply(x);
                x = bases[(int) ((x >>> 3) & 7)].step(x);
            }
            calls += 2_000_000;
        }
        return calls + (x == 42 ? 1 : 0);
    }

    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    static long recurse(long endNs) {
        long calls = 0;
        while (System.nanoTime() < endNs)
            calls += fib(25);
        return calls;
    }

    static long twice(long x) {
        return x * 2 + 1;
    }

    static long mix(long x, long y) {
        return (x ^ y) + (x >>> 7);
    }

    static long indirect(long endNs) throws Throwable {
        java.util.function.LongUnaryOperator[] fs = {
            x -> x * 3 + 1, x -> x ^ (x >>> 5), x -> x + 0x9e37, x -> Long.rotateLeft(x, 7),
        };
        MethodHandles.Lookup lk = MethodHandles.lookup();
        MethodType unary = MethodType.methodType(long.class, long.class);
        MethodHandle tw = lk.findStatic(HardWalks.class, "twice", unary);
        MethodHandle mx = lk.findStatic(HardWalks.class, "mix",
                MethodType.methodType(long.class, long.class, long.class));
        // (x) -> mix(twice(x), 12345): a filter over an inserted argument.
        MethodHandle chain = MethodHandles.filterArguments(
                MethodHandles.insertArguments(mx, 1, 12345L), 0, tw);
        long x = 1, calls = 0;
        while (System.nanoTime() < endNs) {
            for (int i = 0; i < 200_000; i++) {
                x = fs[(int) (x & 3)].applyAsLong(x);
                x = (long) chain.invokeExact(x);
            }
            calls += 400_000;
        }
        return calls + (x == 42 ? 1 : 0);
    }

    static final class Miss extends Exception {
        private static final long serialVersionUID = 1L;

        Miss(long v) {
            super("miss " + (v & 0xff));
        }
    }

    static long check(long v, int depth) throws Miss {
        if (depth > 0)
            return check(v * 31 + depth, depth - 1);
        if ((v & 3) == 0)
            throw new Miss(v);
        return v;
    }

    static long throwing(long endNs) {
        long x = 1, caught = 0;
        while (System.nanoTime() < endNs) {
            for (int i = 0; i < 20_000; i++) {
                try {
                    x += check(x + i, 8);
                } catch (Miss e) {
                    caught++;
                    x += e.getStackTrace().length;
                }
            }
        }
        return caught + (x == 42 ? 1 : 0);
    }

    static long clocks(long endNs) {
        long x = 0, calls = 0;
        while (System.nanoTime() < endNs) {
            for (int i = 0; i < 1000; i++)
                x += System.nanoTime() ^ System.currentTimeMillis();
            calls += 2000;
        }
        return calls + (x == 42 ? 1 : 0);
    }

    public static void main(String[] args) throws Throwable {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        String mode = args.length > 1 ? args[1] : "mega";
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        if (!mode.equals("mega")) {
            System.out.println("ready");
            System.out.flush();
            long calls = mode.equals("recurse") ? recurse(end)
                    : mode.equals("indirect") ? indirect(end)
                    : mode.equals("leaf") ? clocks(end) : throwing(end);
            System.out.println("{\"calls\":" + calls + "}");
            return;
        }
        Object[] all = { new A(), new B(), new C(), new D(), new E(), new F(), new G(), new H() };
        Op[] ops = new Op[8];
        Base[] bases = new Base[8];
        for (int i = 0; i < 8; i++) {
            ops[i] = (Op) all[i];
            bases[i] = (Base) all[(i * 3) % 8];
        }
        System.out.println("ready");
        System.out.flush();
        long calls = loop(ops, bases, end);
        System.out.println("{\"calls\":" + calls + "}");
    }
}
