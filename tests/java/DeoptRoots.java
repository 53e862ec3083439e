// A compiled frame marked for deoptimization below a frame that never
// returns: what a JFR recording leaves on JDK 17 (JRuby's script runs
// under a C1-compiled MethodHandle frame that the classes JFR loads
// invalidate). outer() is compiled during warm-up with Shape.f inlined
// (A is the only Shape: a class-hierarchy dependency), then called once
// for good; it calls run(), which loops until the end calling inner()
// (both kept out of line: -XX:CompileCommand=dontinline). When the file
// TRIGGER appears, B is loaded: outer()'s code is invalidated and its
// frame, below run(), returns to its deopt handler until run() ends.
// Usage: java -XX:CompileCommand=dontinline,DeoptRoots::inner
//   -XX:CompileCommand=dontinline,DeoptRoots::run DeoptRoots SECONDS TRIGGER
// Prints "ready" once outer() runs compiled for good, "loaded" after B.
import java.io.File;

public class DeoptRoots {
    static volatile long sink;
    static Shape shape = new A();

    abstract static class Shape {
        abstract long f(long x);
    }

    static final class A extends Shape {
        long f(long x) {
            return x + 1;
        }
    }

    static final class B extends Shape {
        long f(long x) {
            return x - 1;
        }
    }

    static long inner(long x) {
        for (int i = 0; i < 2000; i++) {
            x = x * 6364136223846793005L + i;
        }
        return x;
    }

    static long run(long x, long end, File trigger) throws ClassNotFoundException {
        boolean loaded = false;
        for (long i = 0; System.nanoTime() < end; i++) {
            x = inner(x);
            if (!loaded && (i & 1023) == 0 && trigger.exists()) {
                Class.forName("DeoptRoots$B");
                loaded = true;
                System.out.println("loaded");
                System.out.flush();
            }
        }
        return x;
    }

    static long outer(long x, long end, File trigger) throws ClassNotFoundException {
        return run(shape.f(x), end, trigger);
    }

    public static void main(String[] args) throws ClassNotFoundException {
        long seconds = Long.parseLong(args[0]);
        File trigger = new File(args[1]);
        long sum = 0;
        // Warm-up: outer() compiled as a whole method, Shape.f inlined.
        for (int i = 0; i < 20_000; i++) {
            sum += outer(i, 0, trigger);
        }
        System.out.println("ready");
        System.out.flush();
        sum += outer(sum, System.nanoTime() + seconds * 1_000_000_000L, trigger);
        sink = sum;
        System.out.println("{\"sum\":" + sum + "}");
    }
}
