// Kafka 4's consumer group protocol (KIP-848, group.protocol=consumer) with Apache Kafka's Java
// consumer, unmodified: members joining and leaving while they consume, static membership,
// broker-side regular expressions, the range assignor and a refused assignor. Each scenario
// prints what the clients observed as one JSON object; tests/kafka/test_consumer_protocol.py
// checks it, against lakelog and (the same scenarios) against Apache Kafka.
//
//   java -cp <classes>:<kafka libs>/* ConsumerProtocol <scenario> <bootstrap> <name> [k=v ...]

import com.fasterxml.jackson.databind.ObjectMapper;
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
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ConsumerProtocol {
    private static final Duration POLL = Duration.ofMillis(100);
    private static final long WAIT_MS = 60_000;

    private final String bootstrap;
    private final String name;
    private final Map<String, String> extra;
    private final Map<String, Object> out = new LinkedHashMap<>();
    // Who holds each partition now, by the clients' own callbacks: a partition assigned to one
    // member while another still holds it is an overlap (the protocol must never allow one).
    private final Map<TopicPartition, String> holders = new ConcurrentHashMap<>();
    private final AtomicInteger overlaps = new AtomicInteger();
    private final Map<String, Integer> seen = new ConcurrentHashMap<>();

    private ConsumerProtocol(String bootstrap, String name, Map<String, String> extra) {
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
        ConsumerProtocol run = new ConsumerProtocol(args[1], args[2], extra);
        switch (args[0]) {
            case "members" -> run.members();
            case "static" -> run.staticMember();
            case "regex" -> run.regex();
            case "range" -> run.range();
            case "bad-assignor" -> run.badAssignor();
            case "upgrade" -> run.upgrade();
            case "downgrade" -> run.downgrade();
            case "remove-static" -> run.removeStatic();
            default -> throw new IllegalArgumentException("no scenario " + args[0]);
        }
        System.out.println(new ObjectMapper().writeValueAsString(run.out));
        System.exit(0);
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

    private void produce(String topic, int count) throws Exception {
        Map<String, Object> settings = new HashMap<>();
        settings.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        settings.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(config(settings))) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, topic + "/" + i));
            }
            producer.flush();
        }
    }

    private void createTopics(int partitions, String... topics) throws Exception {
        List<NewTopic> created = new ArrayList<>();
        for (String topic : topics) {
            created.add(new NewTopic(topic, partitions, (short) 1));
        }
        try (Admin admin = admin()) {
            admin.createTopics(created).all().get();
        }
    }

    /** A consumer of the new protocol on its own thread: polls, commits what it read after
     * each poll and before giving partitions up, and records what it holds. */
    private final class Member implements Runnable {
        final String id;
        final Map<String, Object> settings;
        final Object subscription;
        final AtomicBoolean stop = new AtomicBoolean();
        final Set<TopicPartition> held = ConcurrentHashMap.newKeySet();
        volatile String error;
        volatile String memberId;
        volatile long paceMs;  // a pause after each record: members join while records remain
        Thread thread;

        Member(String id, Object subscription, Map<String, Object> settings) {
            this.id = id;
            this.subscription = subscription;
            this.settings = settings;
        }

        Member start() {
            thread = new Thread(this, id);
            thread.start();
            return this;
        }

        void close() throws InterruptedException {
            stop.set(true);
            thread.join(WAIT_MS);
        }

        @Override
        public void run() {
            Map<String, Object> all = new HashMap<>(settings);
            all.put(ConsumerConfig.GROUP_ID_CONFIG, name + "-group");
            all.putIfAbsent(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            all.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            all.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            all.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            all.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
            all.putIfAbsent(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 50);  // short polls: quick rejoins
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(config(all))) {
                subscribe(consumer);
                while (!stop.get()) {
                    for (ConsumerRecord<String, String> record : consumer.poll(POLL)) {
                        seen.merge(record.value(), 1, Integer::sum);
                        if (paceMs > 0) {
                            Thread.sleep(paceMs);
                        }
                    }
                    consumer.commitSync();
                    memberId = consumer.groupMetadata().memberId();
                }
            } catch (Exception failure) {
                error = failure.getClass().getSimpleName();
            }
        }

        private void subscribe(KafkaConsumer<String, String> consumer) {
            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    consumer.commitSync();
                    release(partitions);
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> partitions) {
                    release(partitions);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    for (TopicPartition tp : partitions) {
                        String before = holders.put(tp, id);
                        if (before != null && !before.equals(id)) {
                            overlaps.incrementAndGet();
                        }
                        held.add(tp);
                    }
                }
            };
            if (subscription instanceof SubscriptionPattern pattern) {
                consumer.subscribe(pattern, listener);
            } else {
                @SuppressWarnings("unchecked")
                List<String> topics = (List<String>) subscription;
                consumer.subscribe(topics, listener);
            }
        }

        private void release(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) {
                holders.remove(tp, id);
                held.remove(tp);
            }
        }
    }

    private static void await(String what, BooleanSupplier condition) throws Exception {
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (!condition.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("timed out waiting for " + what);
            }
            Thread.sleep(50);
        }
    }

    private ConsumerGroupDescription describe(Admin admin) throws Exception {
        String group = name + "-group";
        return admin.describeConsumerGroups(List.of(group)).all().get().get(group);
    }

    private Map<String, Object> view(ConsumerGroupDescription description) {
        Map<String, Object> view = new LinkedHashMap<>();
        view.put("type", description.type().toString());
        view.put("state", description.groupState().toString());
        view.put("assignor", description.partitionAssignor());
        List<Map<String, Object>> members = new ArrayList<>();
        for (MemberDescription member : description.members()) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("instance", member.groupInstanceId().orElse(null));
            row.put("client", member.clientId());
            row.put("partitions", names(member.assignment().topicPartitions()));
            members.add(row);
        }
        members.sort((a, b) -> a.get("partitions").toString().compareTo(b.get("partitions").toString()));
        view.put("members", members);
        return view;
    }

    private static List<String> names(Collection<TopicPartition> partitions) {
        return new ArrayList<>(new TreeSet<>(partitions.stream().map(TopicPartition::toString).toList()));
    }

    private boolean allSeen(int count) {
        return seen.size() >= count;
    }

    private void recordSeen(int expected) {
        int duplicates = 0;
        for (int times : seen.values()) {
            duplicates += times - 1;
        }
        out.put("consumed", seen.size());
        out.put("expected", expected);
        out.put("duplicates", duplicates);
        out.put("overlaps", overlaps.get());
    }

    // ---- scenarios -------------------------------------------------------------------------

    /** Three members join one after another while consuming, one leaves; then the group is
     * described and listed with the AdminClient. */
    private void members() throws Exception {
        String topic = name;
        createTopics(6, topic);
        produce(topic, 600);
        Member first = new Member("c0", List.of(topic), Map.of()).start();
        await("c0 consuming", () -> seen.size() >= 50);
        Member second = new Member("c1", List.of(topic), Map.of()).start();
        Member third = new Member("c2", List.of(topic), Map.of()).start();
        await("three members holding partitions", () -> !second.held.isEmpty() && !third.held.isEmpty()
                && !first.held.isEmpty());
        out.put("held_by_three", List.of(first.held.size(), second.held.size(), third.held.size()));
        second.close();
        await("all records", () -> allSeen(600));
        await("two members holding everything", () -> first.held.size() + third.held.size() == 6);
        try (Admin admin = admin()) {
            await("a stable group", () -> stable(admin));
            out.put("group", view(describe(admin)));
            out.put("listed", listed(admin));
            Map<TopicPartition, OffsetAndMetadata> committed = admin
                    .listConsumerGroupOffsets(name + "-group").partitionsToOffsetAndMetadata().get();
            long total = 0;
            for (OffsetAndMetadata offset : committed.values()) {
                total += offset.offset();
            }
            out.put("committed_total", total);
        }
        first.close();
        third.close();
        out.put("errors", errors(first, second, third));
        recordSeen(600);
    }

    private boolean stable(Admin admin) {
        try {
            return describe(admin).groupState().toString().equals("Stable");
        } catch (Exception error) {
            return false;
        }
    }

    private List<String> listed(Admin admin) throws Exception {
        List<String> rows = new ArrayList<>();
        for (GroupListing listing : admin.listGroups().all().get()) {
            if (listing.groupId().equals(name + "-group")) {
                rows.add(listing.type().map(Object::toString).orElse("?") + "/" + listing.protocol());
            }
        }
        return rows;
    }

    private static List<String> errors(Member... members) {
        List<String> errors = new ArrayList<>();
        for (Member member : members) {
            if (member.error != null) {
                errors.add(member.id + ": " + member.error);
            }
        }
        return errors;
    }

    /** A static member (group.instance.id) leaves and comes back: same partitions, and the
     * other member's are never moved meanwhile. */
    private void staticMember() throws Exception {
        String topic = name;
        createTopics(4, topic);
        produce(topic, 200);
        Map<String, Object> fixed = Map.of(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "instance-a");
        Member a = new Member("a", List.of(topic), fixed).start();
        Member b = new Member("b", List.of(topic), Map.of()).start();
        await("both holding", () -> a.held.size() == 2 && b.held.size() == 2);
        await("all records", () -> allSeen(200));
        List<String> before = names(a.held);
        a.close();
        try (Admin admin = admin()) {
            ConsumerGroupDescription away = describe(admin);
            out.put("away_members", away.members().size());
            out.put("away_state", away.groupState().toString());
        }
        Member back = new Member("a2", List.of(topic), fixed).start();
        await("the static member back", () -> back.held.size() == 2);
        out.put("same_partitions", names(back.held).equals(before));
        out.put("b_kept", b.held.size());
        back.close();
        b.close();
        out.put("errors", errors(a, b, back));
        recordSeen(200);
    }

    /** A broker-side regular expression: matching topics are consumed, one created later too,
     * a topic that does not match is not. */
    private void regex() throws Exception {
        createTopics(2, name + "-one", name + "-two", "other-" + name);
        produce(name + "-one", 20);
        produce(name + "-two", 20);
        produce("other-" + name, 20);
        Member member = new Member("m", new SubscriptionPattern(name + "-.*"), Map.of()).start();
        await("the matching topics", () -> allSeen(40));
        createTopics(3, name + "-three");
        produce(name + "-three", 30);
        await("the topic created later", () -> allSeen(70));
        Thread.sleep(1000);
        out.put("held", names(member.held));
        member.close();
        out.put("errors", errors(member));
        out.put("other_consumed", seen.keySet().stream().filter(v -> v.startsWith("other-")).count());
        recordSeen(70);
    }

    /** group.remote.assignor=range over two co-partitioned topics: each member gets the same
     * partition numbers of both. */
    private void range() throws Exception {
        createTopics(4, name + "-a", name + "-b");
        Map<String, Object> ranged = Map.of(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, "range");
        List<String> topics = List.of(name + "-a", name + "-b");
        Member one = new Member("one", topics, ranged).start();
        Member two = new Member("two", topics, ranged).start();
        await("both holding four", () -> one.held.size() == 4 && two.held.size() == 4);
        try (Admin admin = admin()) {
            await("a stable group", () -> stable(admin));
            out.put("group", view(describe(admin)));
        }
        one.close();
        two.close();
        out.put("errors", errors(one, two));
        out.put("overlaps", overlaps.get());
    }

    /** KIP-848's online upgrade: two classic members consume; one by one, each is replaced by
     * a consumer protocol member (a rolling restart with group.protocol=consumer). The group
     * becomes a consumer group, keeping its offsets; no record is read twice. */
    private void upgrade() throws Exception {
        String topic = name;
        int count = 3000;
        List<Member> pair = classicPair(topic, count);
        Member c1 = pair.get(0);
        Member c2 = pair.get(1);
        long started = System.currentTimeMillis();
        Member n1 = paced(new Member("consumer-1", List.of(topic), Map.of())).start();
        await("the first consumer member holding", () -> !n1.held.isEmpty());
        List<Long> stepsMs = new ArrayList<>();
        stepsMs.add(System.currentTimeMillis() - started);
        try (Admin admin = admin()) {
            out.put("mixed", view(describe(admin)).get("type"));
        }
        c1.close();
        Member n2 = paced(new Member("consumer-2", List.of(topic), Map.of())).start();
        await("the second consumer member holding", () -> !n2.held.isEmpty());
        stepsMs.add(System.currentTimeMillis() - started);
        c2.close();
        stepsMs.add(System.currentTimeMillis() - started);
        out.put("steps_ms", stepsMs);
        out.put("left_before_end", count - seen.size());
        n1.paceMs = 0;
        n2.paceMs = 0;
        await("all records", () -> allSeen(count));
        await("the new members holding everything", () -> n1.held.size() + n2.held.size() == 4);
        try (Admin admin = admin()) {
            await("a stable group", () -> stable(admin));
            out.put("group", view(describe(admin)));
            long total = 0;
            for (OffsetAndMetadata offset : admin.listConsumerGroupOffsets(name + "-group")
                    .partitionsToOffsetAndMetadata().get().values()) {
                total += offset.offset();
            }
            out.put("committed_total", total);
        }
        n1.close();
        n2.close();
        out.put("errors", errors(c1, c2, n1, n2));
        recordSeen(count);
    }

    /** KIP-848's online downgrade: two classic members and one consumer protocol member share
     * the group (a consumer group); when the consumer member leaves, only classic members
     * remain and the group is a classic group again. No record is read twice. */
    private void downgrade() throws Exception {
        String topic = name;
        int count = 3000;
        List<Member> pair = classicPair(topic, count);
        Member c1 = pair.get(0);
        Member c2 = pair.get(1);
        Member n1 = paced(new Member("consumer-1", List.of(topic), Map.of())).start();
        await("the consumer member holding", () -> !n1.held.isEmpty());
        try (Admin admin = admin()) {
            out.put("mixed", view(describe(admin)).get("type"));
        }
        n1.close();
        out.put("left_before_end", count - seen.size());
        c1.paceMs = 0;
        c2.paceMs = 0;
        await("all records", () -> allSeen(count));
        await("the classic members holding everything", () -> c1.held.size() + c2.held.size() == 4);
        try (Admin admin = admin()) {
            await("a stable group", () -> stable(admin));
            out.put("group", view(describe(admin)));
        }
        c1.close();
        c2.close();
        out.put("errors", errors(c1, c2, n1));
        recordSeen(count);
    }

    /** An administrator removes a static member by its group.instance.id alone (LeaveGroup
     * v3+, as kafka-consumer-groups and Kafka Streams do): known, it goes; unknown, Kafka's
     * UnknownMemberIdException. */
    private void removeStatic() throws Exception {
        createTopics(2, name);
        Member member = new Member("static", List.of(name),
                Map.of(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "inst-1")).start();
        await("the static member holding", () -> member.held.size() == 2);
        String group = name + "-group";
        try (Admin admin = admin()) {
            var removal = admin.removeMembersFromConsumerGroup(group,
                    new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove("inst-1"))));
            removal.all().get();
            out.put("removed", true);
            var unknown = admin.removeMembersFromConsumerGroup(group,
                    new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove("nobody"))));
            try {
                unknown.all().get();
                out.put("unknown", "none");
            } catch (java.util.concurrent.ExecutionException refused) {
                out.put("unknown", refused.getCause().getClass().getSimpleName());
            }
        }
        member.close();
    }

    /** Two paced classic members of a new 4-partition topic of `count` records, holding two
     * partitions each. */
    private List<Member> classicPair(String topic, int count) throws Exception {
        createTopics(4, topic);
        produce(topic, count);
        Map<String, Object> classic = Map.of(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic",
                ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500);
        Member c1 = paced(new Member("classic-1", List.of(topic), classic)).start();
        Member c2 = paced(new Member("classic-2", List.of(topic), classic)).start();
        await("two classic members", () -> c1.held.size() == 2 && c2.held.size() == 2);
        return List.of(c1, c2);
    }

    private static Member paced(Member member) {
        member.paceMs = 5;
        return member;
    }

    /** An assignor the broker does not have: the consumer's poll fails with Kafka's error. */
    private void badAssignor() throws Exception {
        createTopics(1, name);
        Map<String, Object> bogus = Map.of(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, "bogus");
        Member member = new Member("m", List.of(name), bogus).start();
        await("the consumer to fail", () -> member.error != null);
        member.close();
        out.put("error", member.error);
    }
}
