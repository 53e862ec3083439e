// Calls where AsyncGetCallTrace often cannot start a walk: "mega" makes
// megamorphic interface and virtual calls (eight classes behind one
// interface and one abstract class: itable and vtable stubs); "recurse" makes
// deep recursive calls of small compiled methods (much of their time is in
// method entries and exits, before the frame is built or after it is gone).
// Usage: java HardWalks SECONDS [mega or recurse]
// Prints "ready" at once, {"calls":..} at the end.
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

    public static void main(String[] args) {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        if (args.length > 1 && args[1].equals("recurse")) {
            System.out.println("ready");
            System.out.flush();
            long calls = recurse(System.nanoTime() + seconds * 1_000_000_000L);
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
        long calls = loop(ops, bases, System.nanoTime() + seconds * 1_000_000_000L);
        System.out.println("{\"calls\":" + calls + "}");
    }
}
