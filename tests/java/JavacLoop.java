// A real program's deep, mixed stacks: the JDK's own compiler (javac,
// through javax.tools), compiling generated sources (generics, lambdas,
// streams) again and again, so its frames run interpreted, C1- and
// C2-compiled and inlined at once.
// Usage: java JavacLoop SECONDS DIR (DIR: where the sources and classes go)
// Prints "ready" after the first compilation, {"compiles":N} at the end.
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;

public class JavacLoop {
    static String source(int i) {
        StringBuilder b = new StringBuilder();
        b.append("package gen;\nimport java.util.*;\nimport java.util.function.*;\n")
            .append("import java.util.stream.*;\n")
            .append("public class C").append(i).append("<T extends Comparable<T>> {\n");
        for (int j = 0; j < 20; j++) {
            b.append("  public List<Map<String, T>> m").append(j)
                .append("(List<T> xs, Function<T, String> fn) {\n")
                .append("    return xs.stream().filter(x -> x.compareTo(xs.get(0)) > ").append(j)
                .append(").map(x -> Map.of(fn.apply(x), x))")
                .append(".sorted((a, c) -> a.toString().compareTo(c.toString()))")
                .append(".collect(Collectors.toList());\n  }\n");
        }
        return b.append("}\n").toString();
    }

    public static void main(String[] args) throws IOException {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        Path dir = Path.of(args[1]);
        Path out = Files.createDirectories(dir.resolve("out"));
        List<String> argv = new ArrayList<>(List.of("-nowarn", "-proc:none", "-d", out.toString()));
        for (int i = 0; i < 30; i++) {
            Path p = dir.resolve("C" + i + ".java");
            Files.writeString(p, source(i));
            argv.add(p.toString());
        }
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        long compiles = 0;
        boolean ready = false;
        while (System.nanoTime() < end) {
            if (javac.run(null, null, null, argv.toArray(new String[0])) != 0) {
                throw new IllegalStateException("javac failed");
            }
            compiles++;
            if (!ready) {
                System.out.println("ready");
                System.out.flush();
                ready = true;
            }
        }
        System.out.println("{\"compiles\":" + compiles + "}");
    }
}
