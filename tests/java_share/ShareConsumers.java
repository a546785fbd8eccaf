// Kafka's share consumers (KIP-932, KafkaShareConsumer of Kafka 4.2's Java clients, unmodified)
// reading one topic as a queue, each in its own thread, acknowledging every record explicitly.
// Prints one line per delivery ("<consumer> <partition> <offset> <delivery count> <value>
// <acknowledgement>") and "done" once `expected` records are accepted (or "timeout").
//
//   java -cp <classes>:<kafka 4.2 clients libs>/* ShareConsumers <bootstrap> <group> <topic>
//        <consumers> <expected> <mode> <timeout s>
//
// Modes: accept (every record), release-first (release a record's first delivery, accept the
// next), reject-odd (reject records whose value ends in an odd digit, accept the others).

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class ShareConsumers {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], topic = args[2], mode = args[5];
        int consumers = Integer.parseInt(args[3]);
        int expected = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[6]) * 1000;
        ConcurrentHashMap<String, Boolean> settled = new ConcurrentHashMap<>();
        AtomicBoolean stop = new AtomicBoolean();
        Thread[] threads = new Thread[consumers];
        for (int i = 0; i < consumers; i++) {
            int index = i;
            threads[i] = new Thread(() -> consume(index, bootstrap, group, topic, mode, expected,
                deadline, settled, stop));
            threads[i].start();
        }
        for (Thread thread : threads) {
            thread.join();
        }
        synchronized (System.out) {
            System.out.println(settled.size() >= expected ? "done" : "timeout");
        }
    }

    private static void consume(int index, String bootstrap, String group, String topic,
            String mode, int expected, long deadline, ConcurrentHashMap<String, Boolean> settled,
            AtomicBoolean stop) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("client.id", "share-" + index);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (!stop.get() && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> record : records) {
                    AcknowledgeType type = decide(mode, record);
                    consumer.acknowledge(record, type);
                    short count = record.deliveryCount().orElse((short) -1);
                    synchronized (System.out) {
                        System.out.println(index + " " + record.partition() + " "
                            + record.offset() + " " + count + " " + record.value() + " " + type);
                    }
                    if (type != AcknowledgeType.RELEASE) {
                        settled.put(record.partition() + ":" + record.offset(), true);
                    }
                }
                consumer.commitSync();
                if (settled.size() >= expected) {
                    stop.set(true);
                }
            }
        }
    }

    private static AcknowledgeType decide(String mode, ConsumerRecord<String, String> record) {
        short count = record.deliveryCount().orElse((short) 1);
        switch (mode) {
            case "release-first":
                return count == 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
            case "reject-odd":
                String value = record.value().replace("\"", "");  // JSON-produced: "v7"
                char last = value.charAt(value.length() - 1);
                return (last - '0') % 2 == 1 ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
            default:
                return AcknowledgeType.ACCEPT;
        }
    }
}
