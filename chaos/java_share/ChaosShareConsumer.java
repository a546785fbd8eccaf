// One share consumer of the SQ chaos scenario (chaos/shares.py): Kafka 4.2's KafkaShareConsumer,
// unmodified, acknowledging explicitly. Records whose value ends in 7 are rejected, the others
// accepted. Prints, one line each, every delivery and every acknowledgement's outcome as the
// client learned it from commitSync:
//
//   D <partition> <offset> <delivery count> <value> <monotonic ns>
//   A <partition> <offset> <accept|reject> <ok|failed|unknown>
//
// "failed" is a refusal (InvalidRecordStateException: the records were not held any more), so
// the acknowledgement was not applied. Any other error (a disconnect, a timeout, the leader
// gone) leaves the outcome unknown: the leader may have stored the acknowledgement and died
// before answering (SQ seed 3 in a full-suite run: a kill between the store and the answer).
//
// and runs until the file `stop` exists.
//
//   java -cp ... ChaosShareConsumer <bootstrap> <group> <topic> <stop file>

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.errors.InvalidRecordStateException;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class ChaosShareConsumer {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("share.acknowledgement.mode", "explicit");
        props.put("max.poll.records", "20");
        props.put("request.timeout.ms", "10000");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        Path stop = Path.of(args[3]);
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            while (!Files.exists(stop)) {
                List<String[]> acked = new ArrayList<>();
                try {
                    for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(300))) {
                        short count = record.deliveryCount().orElse((short) -1);
                        say("D " + record.partition() + " " + record.offset() + " " + count + " "
                            + record.value() + " " + System.nanoTime());
                        boolean reject = record.value().endsWith("7");
                        consumer.acknowledge(record,
                            reject ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT);
                        acked.add(new String[] {String.valueOf(record.partition()),
                            String.valueOf(record.offset()), reject ? "reject" : "accept"});
                    }
                    report(acked, consumer.commitSync());
                } catch (KafkaException error) {
                    for (String[] a : acked) {
                        say("A " + a[0] + " " + a[1] + " " + a[2] + " unknown");
                    }
                    say("E " + error.getClass().getSimpleName());
                }
            }
        }
    }

    private static void report(List<String[]> acked,
            Map<TopicIdPartition, Optional<KafkaException>> outcomes) {
        for (String[] a : acked) {
            String outcome = "unknown";
            for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : outcomes.entrySet()) {
                if (String.valueOf(e.getKey().partition()).equals(a[0])) {
                    outcome = outcomeOf(e.getValue());
                }
            }
            say("A " + a[0] + " " + a[1] + " " + a[2] + " " + outcome);
        }
    }

    private static String outcomeOf(Optional<KafkaException> error) {
        if (error.isEmpty()) {
            return "ok";
        }
        return error.get() instanceof InvalidRecordStateException ? "failed" : "unknown";
    }

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
