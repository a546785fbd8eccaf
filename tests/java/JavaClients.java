// Apache Kafka's Java clients (kafka-clients 4.x, unmodified) against a Kafka listener: each
// scenario drives the producer, consumer or AdminClient as an application would and prints what
// it observed as one JSON object on stdout, which tests/kafka/test_java_clients.py checks exactly.
//
//   java -cp <classes>:<kafka libs>/* JavaClients <scenario> <bootstrap> <name> [extra client config k=v ...]
//
// A client call that fails is recorded as {"error": "<exception class>"}: the test says which
// failures are expected.

import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class JavaClients {
    private static final Duration POLL = Duration.ofMillis(200);
    private static final long WAIT_MS = 30_000;

    private final String bootstrap;
    private final String name;
    private final Map<String, String> extra;
    private final Map<String, Object> out = new LinkedHashMap<>();

    private JavaClients(String bootstrap, String name, Map<String, String> extra) {
        this.bootstrap = bootstrap;
        this.name = name;
        this.extra = extra;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> extra = new HashMap<>();
        for (int i = 3; i < args.length; i++) {
            String[] pair = args[i].split("=", 2);
            extra.put(pair[0], pair[1]);
        }
        JavaClients run = new JavaClients(args[1], args[2], extra);
        switch (args[0]) {
            case "produce-consume" -> run.produceConsume();
            case "transactions" -> run.transactions();
            case "topics" -> run.topics();
            case "records" -> run.records();
            case "groups" -> run.groups();
            case "acls" -> run.acls();
            default -> throw new IllegalArgumentException("no scenario " + args[0]);
        }
        System.out.println(new ObjectMapper().writeValueAsString(run.out));
    }

    // ---- clients ---------------------------------------------------------------------------

    private Properties config(Map<String, Object> settings) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.putAll(settings);
        props.putAll(extra);
        return props;
    }

    private Admin admin() {
        return Admin.create(config(Map.of()));
    }

    private KafkaProducer<String, String> producer(Map<String, Object> settings) {
        Map<String, Object> all = new HashMap<>(settings);
        all.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        all.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        all.putIfAbsent(ProducerConfig.LINGER_MS_CONFIG, 5);
        return new KafkaProducer<>(config(all));
    }

    private KafkaConsumer<String, String> consumer(String group, Map<String, Object> settings) {
        Map<String, Object> all = new HashMap<>(settings);
        all.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        all.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        all.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        all.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        if (group != null) {
            all.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        return new KafkaConsumer<>(config(all));
    }

    private interface Step {
        Object run() throws Exception;
    }

    /** out[key] = the step's result, or {"error": class} when it throws. */
    private void record(String key, Step step) {
        try {
            out.put(key, step.run());
        } catch (ExecutionException error) {
            out.put(key, Map.of("error", error.getCause().getClass().getSimpleName()));
        } catch (Exception error) {
            out.put(key, Map.of("error", error.getClass().getSimpleName()));
        }
    }

    private static List<Object> row(ConsumerRecord<String, String> record) {
        List<Object> row = new ArrayList<>();
        row.add(record.partition());
        row.add(record.offset());
        row.add(record.key());
        row.add(record.value());
        Map<String, String> headers = new TreeMap<>();
        for (Header header : record.headers()) {
            headers.put(header.key(), new String(header.value(), StandardCharsets.UTF_8));
        }
        row.add(headers);
        return row;
    }

    /** Every record polled until `count` arrived or WAIT_MS passed. */
    private static List<List<Object>> pollAll(KafkaConsumer<String, String> consumer, int count) {
        List<List<Object>> rows = new ArrayList<>();
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (rows.size() < count && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> record : consumer.poll(POLL)) {
                rows.add(row(record));
            }
        }
        return rows;
    }

    /** Records polled for `millis` (to show that nothing more arrives). */
    private static int pollFor(KafkaConsumer<String, String> consumer, long millis) {
        int seen = 0;
        long deadline = System.currentTimeMillis() + millis;
        while (System.currentTimeMillis() < deadline) {
            seen += consumer.poll(POLL).count();
        }
        return seen;
    }

    private static Map<String, Long> offsets(Map<TopicPartition, OffsetAndMetadata> committed) {
        Map<String, Long> result = new TreeMap<>();
        committed.forEach((tp, offset) -> result.put(tp.toString(), offset == null ? null : offset.offset()));
        return result;
    }

    private void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
    }

    // ---- scenarios -------------------------------------------------------------------------

    /** An idempotent producer (the Java default) and a group consumer that commits. */
    private void produceConsume() throws Exception {
        String topic = name;
        int count = 300;
        try (Admin admin = admin()) {
            createTopic(admin, topic, 3);
        }
        List<List<Object>> produced = new ArrayList<>();
        try (KafkaProducer<String, String> producer = producer(Map.of())) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                ProducerRecord<String, String> record = new ProducerRecord<>(topic, "k" + i, "v" + i);
                record.headers().add("n", Integer.toString(i).getBytes(StandardCharsets.UTF_8));
                sent.add(producer.send(record));
            }
            producer.flush();
            for (int i = 0; i < count; i++) {
                RecordMetadata metadata = sent.get(i).get();
                produced.add(List.of(metadata.partition(), metadata.offset(), "k" + i));
            }
        }
        out.put("produced", produced);
        String group = topic + "-group";
        try (KafkaConsumer<String, String> consumer = consumer(group, Map.of())) {
            consumer.subscribe(List.of(topic));
            out.put("consumed", pollAll(consumer, count));
            consumer.commitSync();
            Set<TopicPartition> assigned = consumer.assignment();
            out.put("assigned", assigned.size());
            out.put("committed", offsets(consumer.committed(assigned)));
            out.put("end_offsets", offsets(toOffsets(consumer.endOffsets(assigned))));
        }
        try (KafkaConsumer<String, String> again = consumer(group, Map.of())) {
            again.subscribe(List.of(topic));
            out.put("after_commit", pollFor(again, 3000));
        }
    }

    private static Map<TopicPartition, OffsetAndMetadata> toOffsets(Map<TopicPartition, Long> offsets) {
        Map<TopicPartition, OffsetAndMetadata> result = new HashMap<>();
        offsets.forEach((tp, offset) -> result.put(tp, new OffsetAndMetadata(offset)));
        return result;
    }

    /** Transactions: commit, abort, and a consume-transform-produce commit of the input's offsets. */
    private void transactions() throws Exception {
        String input = name + "-in";
        String output = name + "-out";
        try (Admin admin = admin()) {
            createTopic(admin, input, 1);
            createTopic(admin, output, 1);
        }
        try (KafkaProducer<String, String> plain = producer(Map.of())) {
            for (int i = 0; i < 4; i++) {
                plain.send(new ProducerRecord<>(input, "in" + i, "in" + i));
            }
        }
        Map<String, Object> transactional = Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, name + "-txn");
        String group = name + "-group";
        try (KafkaProducer<String, String> producer = producer(transactional)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(output, "a" + i, "committed-" + i));
            }
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                producer.send(new ProducerRecord<>(output, "b" + i, "aborted-" + i));
            }
            producer.flush();  // the records reach the log before the abort
            producer.abortTransaction();
            try (KafkaConsumer<String, String> source = consumer(group, Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
                source.subscribe(List.of(input));
                List<List<Object>> read = pollAll(source, 4);
                producer.beginTransaction();
                for (List<Object> record : read) {
                    producer.send(new ProducerRecord<>(output, (String) record.get(2), "from-" + record.get(3)));
                }
                Map<TopicPartition, OffsetAndMetadata> next = Map.of(new TopicPartition(input, 0), new OffsetAndMetadata(read.size()));
                producer.sendOffsetsToTransaction(next, source.groupMetadata());
                producer.commitTransaction();
                out.put("input_read", read.size());
            }
        }
        try (KafkaConsumer<String, String> committed = consumer(null, Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            committed.assign(List.of(new TopicPartition(output, 0)));
            out.put("read_committed", pollAll(committed, 7));
            out.put("read_committed_more", pollFor(committed, 1500));
        }
        try (KafkaConsumer<String, String> uncommitted = consumer(null, Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted"))) {
            uncommitted.assign(List.of(new TopicPartition(output, 0)));
            out.put("read_uncommitted", pollAll(uncommitted, 10));
        }
        try (Admin admin = admin()) {
            out.put("group_offsets", offsets(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()));
            TopicPartition tp = new TopicPartition(output, 0);
            ListOffsetsResult.ListOffsetsResultInfo end = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).partitionResult(tp).get();
            out.put("output_end", end.offset());
            // Transactions v2 (KIP-890): every end bumps the epoch (three ends: 0 -> 3)
            var described = admin.describeTransactions(List.of(name + "-txn")).all().get().get(name + "-txn");
            out.put("epoch_after", described.producerEpoch());
            out.put("state_after", described.state().toString());
        }
    }

    /** Topics through the AdminClient: create (with configs, validate-only, refusals), describe,
     *  configs, partitions, delete. */
    private void topics() throws Exception {
        String topic = name;
        try (Admin admin = admin()) {
            NewTopic configured = new NewTopic(topic, 2, (short) 1)
                    .configs(Map.of("cleanup.policy", "compact", "retention.ms", "1000"));
            record("create", () -> {
                var result = admin.createTopics(List.of(configured));
                result.all().get();
                Config config = result.config(topic).get();
                return Map.of(
                        "partitions", result.numPartitions(topic).get(),
                        "replication_factor", result.replicationFactor(topic).get(),
                        "topic_id_set", !result.topicId(topic).get().toString().isEmpty(),
                        "cleanup.policy", config.get("cleanup.policy").value(),
                        "retention.ms", config.get("retention.ms").value(),
                        "retention.ms_source", config.get("retention.ms").source().name());
            });
            record("create_again", () -> admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get());
            record("validate_only", () -> {
                admin.createTopics(List.of(new NewTopic(topic + "-dry", 1, (short) 1)),
                        new CreateTopicsOptions().validateOnly(true)).all().get();
                return admin.listTopics().names().get().contains(topic + "-dry");
            });
            record("bad_config", () -> admin.createTopics(List.of(new NewTopic(topic + "-bad", 1, (short) 1)
                    .configs(Map.of("retention.ms", "soon")))).all().get());
            record("bad_name", () -> admin.createTopics(List.of(new NewTopic("bad/name", 1, (short) 1))).all().get());
            record("listed", () -> admin.listTopics().names().get().contains(topic));
            record("describe", () -> describeTopic(admin, topic));
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            record("configs", () -> {
                Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
                ConfigEntry retention = config.get("retention.ms");
                ConfigEntry segment = config.get("segment.bytes");
                Map<String, Object> result = new LinkedHashMap<>();
                result.put("retention.ms", List.of(retention.value(), retention.source().name()));
                result.put("cleanup.policy", config.get("cleanup.policy").value());
                result.put("segment.bytes_present", segment != null);
                return result;
            });
            record("alter", () -> {
                Collection<AlterConfigOp> ops = List.of(
                        new AlterConfigOp(new ConfigEntry("retention.ms", "2000"), AlterConfigOp.OpType.SET),
                        new AlterConfigOp(new ConfigEntry("cleanup.policy", ""), AlterConfigOp.OpType.DELETE));
                admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
                Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
                return Map.of(
                        "retention.ms", config.get("retention.ms").value(),
                        "cleanup.policy", List.of(config.get("cleanup.policy").value(), config.get("cleanup.policy").source().name()));
            });
            record("alter_bad", () -> admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "-5"), AlterConfigOp.OpType.SET)))).all().get());
            record("add_partitions", () -> {
                admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
                return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
            });
            record("shrink_partitions", () -> admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all().get());
            record("cluster", () -> {
                DescribeClusterResult cluster = admin.describeCluster();
                return Map.of(
                        "nodes", cluster.nodes().get().size(),
                        "controller_set", cluster.controller().get() != null,
                        "cluster_id_set", cluster.clusterId().get() != null);
            });
            record("delete", () -> {
                admin.deleteTopics(List.of(topic)).all().get();
                return admin.listTopics().names().get().contains(topic);
            });
            record("delete_missing", () -> admin.deleteTopics(List.of(topic + "-never")).all().get());
        }
    }

    private static Map<String, Object> describeTopic(Admin admin, String topic) throws Exception {
        TopicDescription description = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        List<Object> partitions = new ArrayList<>();
        for (TopicPartitionInfo info : description.partitions()) {
            partitions.add(List.of(info.partition(), info.leader().id(), info.replicas().size(), info.isr().size()));
        }
        return Map.of("internal", description.isInternal(), "partitions", partitions);
    }

    /** Offsets and records through the AdminClient: list offsets (earliest, latest, by time), delete records. */
    private void records() throws Exception {
        String topic = name;
        TopicPartition tp = new TopicPartition(topic, 0);
        long[] times = new long[10];
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            try (KafkaProducer<String, String> producer = producer(Map.of())) {
                long base = System.currentTimeMillis() - 100_000;
                for (int i = 0; i < 10; i++) {
                    times[i] = base + i * 1000L;
                    producer.send(new ProducerRecord<>(topic, 0, times[i], "k" + i, "v" + i)).get();
                }
            }
            record("earliest", () -> offsetOf(admin, tp, OffsetSpec.earliest()));
            record("latest", () -> offsetOf(admin, tp, OffsetSpec.latest()));
            record("for_time", () -> offsetOf(admin, tp, OffsetSpec.forTimestamp(times[6])));
            record("after_last", () -> offsetOf(admin, tp, OffsetSpec.forTimestamp(times[9] + 1)));
            record("delete_records", () -> admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4)))
                    .lowWatermarks().get(tp).get().lowWatermark());
            record("earliest_after_delete", () -> offsetOf(admin, tp, OffsetSpec.earliest()));
            record("delete_past_end", () -> admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(99))).all().get());
            try (KafkaConsumer<String, String> consumer = consumer(null, Map.of())) {
                consumer.assign(List.of(tp));
                consumer.seekToBeginning(List.of(tp));
                out.put("read_after_delete", pollAll(consumer, 6));
                out.put("offsets_for_time", consumer.offsetsForTimes(Map.of(tp, times[2])).get(tp).offset());
            }
        }
    }

    private static long offsetOf(Admin admin, TopicPartition tp, OffsetSpec spec) throws Exception {
        return admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get().offset();
    }

    /** Consumer groups: two members share partitions, then the AdminClient lists, describes,
     *  moves, deletes offsets and deletes the group. */
    private void groups() throws Exception {
        String topic = name;
        String group = name + "-group";
        try (Admin admin = admin()) {
            createTopic(admin, topic, 4);
            try (KafkaProducer<String, String> producer = producer(Map.of())) {
                for (int i = 0; i < 40; i++) {
                    producer.send(new ProducerRecord<>(topic, i % 4, "k" + i, "v" + i));
                }
            }
            Map<String, Object> memberSettings = Map.of(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                    "org.apache.kafka.clients.consumer.RangeAssignor");
            try (KafkaConsumer<String, String> first = consumer(group, memberSettings);
                 KafkaConsumer<String, String> second = consumer(group, memberSettings)) {
                first.subscribe(List.of(topic));
                second.subscribe(List.of(topic));
                int seen = 0;
                long deadline = System.currentTimeMillis() + WAIT_MS;
                while (seen < 40 && System.currentTimeMillis() < deadline) {
                    seen += first.poll(POLL).count() + second.poll(POLL).count();
                }
                while ((first.assignment().size() != 2 || second.assignment().size() != 2) && System.currentTimeMillis() < deadline) {
                    first.poll(POLL);
                    second.poll(POLL);
                }
                // Until each member has read its partitions to the end (the eager rebalance
                // dropped the positions), so that both commits cover all four partitions.
                while (!atEnd(first, 10) || !atEnd(second, 10)) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("the members did not reach the end");
                    }
                    first.poll(POLL);
                    second.poll(POLL);
                }
                out.put("seen", seen);
                out.put("assignments", List.of(first.assignment().size(), second.assignment().size()));
                first.commitSync();
                second.commitSync();
                record("describe_active", () -> {
                    ConsumerGroupDescription description = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                    List<Integer> sizes = new ArrayList<>();
                    description.members().forEach(m -> sizes.add(m.assignment().topicPartitions().size()));
                    sizes.sort(null);
                    return Map.of(
                            "state", description.groupState().toString(),
                            "type", description.type().toString(),
                            "assignor", description.partitionAssignor(),
                            "member_partitions", sizes);
                });
            }
            record("listed", () -> {
                for (GroupListing listing : admin.listGroups().all().get()) {
                    if (listing.groupId().equals(group)) {
                        return Map.of("type", listing.type().map(Object::toString).orElse("none"),
                                "state", listing.groupState().map(Object::toString).orElse("none"),
                                "protocol", listing.protocol());
                    }
                }
                return "absent";
            });
            record("describe_empty", () -> admin.describeConsumerGroups(List.of(group)).all().get().get(group).groupState().toString());
            record("offsets", () -> offsets(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()));
            TopicPartition zero = new TopicPartition(topic, 0);
            record("alter_offsets", () -> {
                admin.alterConsumerGroupOffsets(group, Map.of(zero, new OffsetAndMetadata(3))).all().get();
                return admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().get(zero).offset();
            });
            record("delete_offsets", () -> {
                admin.deleteConsumerGroupOffsets(group, Set.of(zero)).all().get();
                return admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().containsKey(zero);
            });
            record("delete_group", () -> {
                admin.deleteConsumerGroups(List.of(group)).all().get();
                return admin.listGroups().all().get().stream().anyMatch(g -> g.groupId().equals(group));
            });
            record("describe_missing", () -> admin.describeConsumerGroups(List.of(name + "-never")).all().get().get(name + "-never").groupState().toString());
        }
    }

    private static boolean atEnd(KafkaConsumer<String, String> consumer, long end) {
        return consumer.assignment().stream().allMatch(tp -> consumer.position(tp) >= end);
    }

    /** ACLs through the AdminClient (on a node with lakelog's authorizer). */
    private void acls() throws Exception {
        var pattern = new org.apache.kafka.common.resource.ResourcePattern(
                org.apache.kafka.common.resource.ResourceType.TOPIC, name, org.apache.kafka.common.resource.PatternType.PREFIXED);
        var entry = new org.apache.kafka.common.acl.AccessControlEntry(
                "User:carol", "*", org.apache.kafka.common.acl.AclOperation.READ, org.apache.kafka.common.acl.AclPermissionType.ALLOW);
        var binding = new org.apache.kafka.common.acl.AclBinding(pattern, entry);
        try (Admin admin = admin()) {
            record("create", () -> {
                admin.createAcls(List.of(binding)).all().get();
                return true;
            });
            record("describe", () -> admin.describeAcls(binding.toFilter()).values().get().size());
            record("describe_any", () -> admin.describeAcls(org.apache.kafka.common.acl.AclBindingFilter.ANY).values().get().stream()
                    .filter(b -> b.entry().principal().equals("User:carol")).count());
            record("delete", () -> admin.deleteAcls(List.of(binding.toFilter())).all().get().size());
            record("describe_after_delete", () -> admin.describeAcls(binding.toFilter()).values().get().size());
        }
    }
}
