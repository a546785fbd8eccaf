// Records acknowledged per second by a group of consumers (Kafka 4.2's Java clients,
// unmodified): `share` runs KafkaShareConsumers (KIP-932; each record acquired by one member and
// accepted explicitly), `classic` runs KafkaConsumers of one consumer group (a partition per
// member, offsets committed after each poll). Each record costs `work_ms` of "processing"
// (a sleep), as a real consumer's work would. Prints one JSON object: records settled, seconds
// from the first record to the last, records settled twice.
//
//   java -cp <classes>:<kafka 4.2 clients libs>/* QueueBench <bootstrap> <topic> <group>
//        <share|classic> <consumers> <expected> <work ms> <timeout s>

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class QueueBench {
    static final ConcurrentHashMap<String, Boolean> settled = new ConcurrentHashMap<>();
    static final AtomicInteger duplicates = new AtomicInteger();
    static final AtomicLong first = new AtomicLong(0);
    static final AtomicLong last = new AtomicLong(0);
    static final AtomicBoolean stop = new AtomicBoolean();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], mode = args[3];
        int consumers = Integer.parseInt(args[4]);
        int expected = Integer.parseInt(args[5]);
        long workMs = Long.parseLong(args[6]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[7]) * 1000;
        Thread[] threads = new Thread[consumers];
        for (int i = 0; i < consumers; i++) {
            int index = i;
            threads[i] = new Thread(() -> {
                if (mode.equals("share")) {
                    share(index, bootstrap, topic, group, expected, workMs, deadline);
                } else {
                    classic(index, bootstrap, topic, group, expected, workMs, deadline);
                }
            });
            threads[i].start();
        }
        for (Thread thread : threads) {
            thread.join();
        }
        double seconds = (last.get() - first.get()) / 1e9;
        System.out.println("{\"settled\": " + settled.size() + ", \"seconds\": " + seconds
            + ", \"duplicates\": " + duplicates.get() + "}");
    }

    static Properties props(String bootstrap, String group, int index) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("client.id", "bench-" + index);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        // Small polls, as consumers whose records take time to process use: a consumer that
        // took 500 records at once would keep the others idle until their locks expired.
        props.put("max.poll.records", "50");
        return props;
    }

    static void work(ConsumerRecord<byte[], byte[]> record, long workMs, int expected) {
        first.compareAndSet(0, System.nanoTime());
        if (workMs > 0) {
            try {
                Thread.sleep(workMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (settled.put(record.partition() + ":" + record.offset(), true) != null) {
            duplicates.incrementAndGet();
        }
        last.set(System.nanoTime());
        if (settled.size() >= expected) {
            stop.set(true);
        }
    }

    static void share(int index, String bootstrap, String topic, String group, int expected,
            long workMs, long deadline) {
        Properties props = props(bootstrap, group, index);
        props.put("share.acknowledgement.mode", "explicit");
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (!stop.get() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    work(record, workMs, expected);
                    consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                }
                consumer.commitSync();
            }
        }
    }

    static void classic(int index, String bootstrap, String topic, String group, int expected,
            long workMs, long deadline) {
        Properties props = props(bootstrap, group, index);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (!stop.get() && System.currentTimeMillis() < deadline) {
                var records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    work(record, workMs, expected);
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
            }
        }
    }
}
