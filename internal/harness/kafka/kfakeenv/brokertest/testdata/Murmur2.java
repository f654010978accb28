// Murmur2 prints, for each line "<partitions> <hex key>" on stdin, the
// partition the Java client's default partitioner gives that key:
// Utils.toPositive(Utils.murmur2(key)) % partitions, from kafka-clients
// itself (run with the broker's jars on the class path).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
import org.apache.kafka.common.utils.Utils;

public class Murmur2 {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            String[] f = line.trim().split(" ", -1);
            int n = Integer.parseInt(f[0]);
            byte[] key = f.length > 1 ? HexFormat.of().parseHex(f[1]) : new byte[0];
            out.append(Utils.toPositive(Utils.murmur2(key)) % n).append('\n');
        }
        System.out.print(out);
    }
}
