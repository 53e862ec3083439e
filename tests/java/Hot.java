/* One hot method (unit/test_hotspot.c): spin is called in a loop until
 * the JIT compiles it, and its nmethod is looked for in the code heap. */
public class Hot {
    static long spin(long x) {
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005L + 1442695040888963407L;
        return x;
    }

    public static void main(String[] args) {
        long x = 1;
        for (;;)
            x = spin(x) ^ (x >>> 7);
    }
}
