// Syscall-heavy: reads /dev/zero in 64 KiB buffers (FileInputStream.read ->
// native readBytes -> read(2)).
// Usage: java IoRead SECONDS
// Prints {"bytes":..,"reads":..}.
import java.io.FileInputStream;
import java.io.IOException;

public class IoRead {
    public static void main(String[] args) throws IOException {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        byte[] buf = new byte[64 * 1024];
        long bytes = 0, reads = 0;

        try (FileInputStream in = new FileInputStream("/dev/zero")) {
            while (System.nanoTime() < end) {
                int n = in.read(buf);
                if (n < 0)
                    break;
                bytes += n;
                reads++;
            }
        }
        System.out.println("{\"bytes\":" + bytes + ",\"reads\":" + reads + "}");
    }
}
