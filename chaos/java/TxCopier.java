// TX's copier with Apache Kafka's Java clients (chaos/transactions.py): the exactly-once loop of
// Kafka's documentation, unmodified clients. A Kafka 4 producer uses KIP-890's second
// transaction protocol where the broker finalizes transaction.version 2 (lakelog does): Produce
// v12 adds partitions, TxnOffsetCommit v5 adds the group, EndTxn v5 bumps the epoch each time.
//
// It copies its input partitions to the output topic, each batch in one transaction with its
// input offsets, and prints one JSON line per event for the checker: {"begun": tag, "count": n}
// before the first record of a transaction is sent, {"committed": tag} once its commit is
// acknowledged, {"aborted": tag} once its abort is, {"error": name} for a failure. It stops
// when its standard input closes.
//
//   java -cp <classes>:<kafka libs>/* TxCopier <bootstrap> <index> <source> <sink> <group> <timeout ms> <partition>...

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxCopier {
    private static final int BATCH_RECORDS_MAX = 20;
    private static final Duration POLL = Duration.ofSeconds(1);

    private final String bootstrap;
    private final int index;
    private final String source;
    private final String sink;
    private final String group;
    private final int timeoutMs;
    private final List<TopicPartition> partitions = new ArrayList<>();
    private final AtomicBoolean stop = new AtomicBoolean();

    private TxCopier(String[] args) {
        bootstrap = args[0];
        index = Integer.parseInt(args[1]);
        source = args[2];
        sink = args[3];
        group = args[4];
        timeoutMs = Integer.parseInt(args[5]);
        for (int i = 6; i < args.length; i++) {
            partitions.add(new TopicPartition(source, Integer.parseInt(args[i])));
        }
    }

    public static void main(String[] args) throws Exception {
        TxCopier copier = new TxCopier(args);
        Thread watcher = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // input is only a signal: its end stops the copier
                }
            } catch (Exception ignored) {
                // a broken pipe stops it too
            }
            copier.stop.set(true);
        });
        watcher.setDaemon(true);
        watcher.start();
        copier.run();
        System.exit(0);
    }

    /** Copies until stopped; new clients after a fatal error (a fenced producer included). */
    private void run() {
        while (!stop.get()) {
            try (KafkaProducer<String, String> producer = producer();
                 KafkaConsumer<String, String> consumer = consumer()) {
                producer.initTransactions();
                rewind(consumer);
                copy(consumer, producer);
            } catch (KafkaException failure) {
                event("error", failure.getClass().getSimpleName());
                sleep(1000);
            }
        }
    }

    private void copy(KafkaConsumer<String, String> consumer, KafkaProducer<String, String> producer) {
        while (!stop.get()) {
            ConsumerRecords<String, String> records = consumer.poll(POLL);
            if (records.isEmpty()) {
                continue;
            }
            String tag = index + "-" + UUID.randomUUID().toString().replace("-", "").substring(0, 10);
            try {
                transaction(consumer, producer, records, tag);
            } catch (ProducerFencedException | OutOfOrderSequenceException
                     | InvalidProducerEpochException | AuthorizationException fatal) {
                throw fatal;  // the producer cannot go on: new clients
            } catch (KafkaException failure) {
                event("error", failure.getClass().getSimpleName());
                producer.abortTransaction();  // throws if it cannot: new clients
                event("aborted", tag);
                rewind(consumer);
            }
        }
    }

    private void transaction(KafkaConsumer<String, String> consumer,
            KafkaProducer<String, String> producer, ConsumerRecords<String, String> records,
            String tag) {
        producer.beginTransaction();
        System.out.printf("{\"begun\": \"%s\", \"count\": %d}%n", tag, records.count());
        System.out.flush();
        for (ConsumerRecord<String, String> record : records) {
            producer.send(new ProducerRecord<>(sink, record.value(), record.value() + "|" + tag));
        }
        Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
        for (TopicPartition tp : consumer.assignment()) {
            positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
        }
        producer.sendOffsetsToTransaction(positions, consumer.groupMetadata());
        while (true) {
            try {
                producer.commitTransaction();
                break;
            } catch (TimeoutException timedOut) {
                // Kafka allows the same commit again after a timeout: its outcome is unknown
                event("error", "commit-retried:TimeoutException");
            }
        }
        event("committed", tag);
    }

    /** Back to the committed offsets (the beginning where none): after an abort, or with new
     * clients, as Kafka's exactly-once loop does. */
    private void rewind(KafkaConsumer<String, String> consumer) {
        consumer.assign(partitions);
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(Set.copyOf(partitions));
        for (TopicPartition tp : partitions) {
            OffsetAndMetadata offset = committed.get(tp);
            if (offset == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, offset.offset());
            }
        }
    }

    private KafkaProducer<String, String> producer() {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "tx-java-copier-" + index);
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, timeoutMs);
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, timeoutMs);
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, Math.min(timeoutMs, 10_000));
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, timeoutMs);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(props);
    }

    private KafkaConsumer<String, String> consumer() {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, BATCH_RECORDS_MAX);
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, timeoutMs);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return new KafkaConsumer<>(props);
    }

    private static void event(String kind, String value) {
        System.out.printf("{\"%s\": \"%s\"}%n", kind, value);
        System.out.flush();
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
        }
    }
}
