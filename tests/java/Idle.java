// A JVM to attach to: prints "ready" once started, then sleeps.
// Usage: java Idle [SECONDS]   (default 3600)
// Prints {"idle_s":..} at the end.
public class Idle {
    public static void main(String[] args) throws InterruptedException {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 3600;
        System.out.println("ready");
        System.out.flush();
        Thread.sleep(seconds * 1000);
        System.out.println("{\"idle_s\":" + seconds + "}");
    }
}
