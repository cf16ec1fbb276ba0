// Java's transactional producer under scripts/bench (the `transactions` section), the twin of
// `bench_producer --transaction-records` and `rdkafka-bench --transaction-records`: the same
// command line, payload, transaction size and output lines, so that only the client differs.
// Kafka's ProducerPerformance ends its transactions by time (--transaction-duration-ms), not
// after a number of records, which is why this small program exists.
//
//   java -cp "<kafka libs>/*:<classes>" TxnPerf --bootstrap HOST:PORT --topic T --records N
//       --record-size BYTES --transaction-records T [-X key=value]...
//
// initTransactions() runs before the clock starts; then every T records are one transaction
// (beginTransaction, T sends, commitTransaction; the last one may be shorter); the end of the
// last commit ends the run. Latency is per record, from send() to its callback.
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnPerf {
    private static final String USAGE = "usage: --bootstrap HOST:PORT --topic T --records N "
            + "--record-size BYTES --transaction-records T [-X key=value]...";

    public static void main(String[] a) {
        String bootstrap = null, topic = null;
        long records = 0, perTxn = 0;
        int size = 100;
        Properties props = new Properties();
        try {
            for (int i = 0; i < a.length; i++) {
                String flag = a[i];
                if (i + 1 >= a.length) throw new IllegalArgumentException(flag + " needs a value");
                String v = a[++i];
                switch (flag) {
                    case "--bootstrap" -> bootstrap = v;
                    case "--topic" -> topic = v;
                    case "--records" -> records = Long.parseLong(v);
                    case "--record-size" -> size = Integer.parseInt(v);
                    case "--transaction-records" -> perTxn = Long.parseLong(v);
                    case "-X" -> {
                        int eq = v.indexOf('=');
                        if (eq < 0) throw new IllegalArgumentException("-X needs key=value");
                        props.put(v.substring(0, eq).trim(), v.substring(eq + 1).trim());
                    }
                    default -> throw new IllegalArgumentException("unknown argument " + flag);
                }
            }
            if (bootstrap == null || topic == null || records <= 0 || perTxn <= 0
                    || records > Integer.MAX_VALUE) {
                throw new IllegalArgumentException("--bootstrap, --topic, --records (at most 2^31-1) "
                        + "and --transaction-records are required");
            }
        } catch (IllegalArgumentException e) {
            System.err.println("TxnPerf: " + e.getMessage() + "\n" + USAGE);
            System.exit(2);
        }
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        System.exit(run(props, topic, (int) records, payload(size), perTxn));
    }

    private static int run(Properties props, String topic, int records, byte[] payload, long perTxn) {
        long[] latencyUs = new long[records];
        AtomicLong failed = new AtomicLong();
        long commits = 0, commitNs = 0, commitMaxNs = 0;
        double seconds;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            long start = System.nanoTime();
            for (int i = 0; i < records; i++) {
                if (i % perTxn == 0) producer.beginTransaction();
                final long sent = System.nanoTime();
                final int idx = i;
                producer.send(new ProducerRecord<>(topic, payload), (md, e) -> {
                    latencyUs[idx] = (System.nanoTime() - sent) / 1000;
                    if (e != null && failed.getAndIncrement() == 0) {
                        System.err.println("TxnPerf: delivery failed: " + e);
                    }
                });
                if ((i + 1) % perTxn == 0 || i + 1 == records) {
                    long t0 = System.nanoTime();
                    producer.commitTransaction();
                    long d = System.nanoTime() - t0;
                    commits++;
                    commitNs += d;
                    commitMaxNs = Math.max(commitMaxNs, d);
                }
            }
            seconds = (System.nanoTime() - start) / 1e9;
        } catch (RuntimeException e) {
            System.err.println("TxnPerf: " + e);
            return 1;
        }
        // close() joined the I/O thread that wrote latencyUs: its writes are visible here.
        Arrays.sort(latencyUs);
        double sum = 0;
        for (long us : latencyUs) sum += us;
        double rps = records / seconds;
        System.out.printf("result records=%d failed=%d seconds=%.3f records_per_sec=%.0f mb_per_sec=%.2f "
                        + "lat_avg_ms=%.3f lat_p50_ms=%.3f lat_p99_ms=%.3f lat_p999_ms=%.3f lat_max_ms=%.3f%n",
                records, failed.get(), seconds, rps, rps * payload.length / 1e6, sum / records / 1e3,
                quantileMs(latencyUs, 0.50), quantileMs(latencyUs, 0.99), quantileMs(latencyUs, 0.999),
                latencyUs[records - 1] / 1e3);
        System.out.printf("transactions count=%d commit_avg_ms=%.3f commit_max_ms=%.3f%n",
                commits, commitNs / 1e6 / Math.max(commits, 1), commitMaxNs / 1e6);
        return failed.get() == 0 ? 0 : 1;
    }

    private static double quantileMs(long[] sorted, double q) {
        int rank = (int) Math.min(Math.max(Math.ceil(q * sorted.length), 1), sorted.length);
        return sorted[rank - 1] / 1e3;
    }

    // The payload of bench_producer's common.rs: the same xorshift, the same capital letters.
    private static byte[] payload(int size) {
        long x = 0x9e3779b97f4a7c15L;
        byte[] p = new byte[size];
        for (int i = 0; i < size; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            p[i] = (byte) ('A' + Long.remainderUnsigned(x, 26));
        }
        return p;
    }
}
