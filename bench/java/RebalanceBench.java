// A group of Kafka's Java consumers (kafka-clients 4.1, unmodified) rebalancing: `members - 1`
// consumers hold a topic's partitions; then, `rounds` times, one more joins (the clock runs until
// every member holds its balanced share) and one leaves (until the others hold every partition
// again). Each member polls on its own thread and learns its partitions from its own rebalance
// callbacks; a partition assigned while another member still holds it is counted as an overlap.
// Prints one JSON object: the join and leave times in milliseconds, and the overlaps.
//
//   java -cp <classes>:<kafka libs>/* RebalanceBench <bootstrap> <topic> <group> <classic|consumer> <members> <rounds> [extra consumer config k=v ...]

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class RebalanceBench {
    private static final long WAIT_MS = 120_000;

    private final String bootstrap;
    private final String topic;
    private final String group;
    private final String protocol;
    private final Map<String, String> extra = new LinkedHashMap<>();
    private final Map<TopicPartition, Member> holders = new ConcurrentHashMap<>();
    private final AtomicInteger overlaps = new AtomicInteger();

    private RebalanceBench(String bootstrap, String topic, String group, String protocol) {
        this.bootstrap = bootstrap;
        this.topic = topic;
        this.group = group;
        this.protocol = protocol;
    }

    public static void main(String[] args) throws Exception {
        RebalanceBench bench = new RebalanceBench(args[0], args[1], args[2], args[3]);
        for (int i = 6; i < args.length; i++) {
            String[] pair = args[i].split("=", 2);
            bench.extra.put(pair[0], pair[1]);
        }
        Map<String, Object> out = bench.run(Integer.parseInt(args[4]), Integer.parseInt(args[5]));
        System.out.println(new ObjectMapper().writeValueAsString(out));
        System.exit(0);
    }

    private Map<String, Object> run(int size, int rounds) throws Exception {
        int partitions = partitionCount();
        List<Member> members = new ArrayList<>();
        for (int i = 0; i < size - 1; i++) {
            members.add(new Member().start());
        }
        awaitBalanced(members, partitions);
        List<Long> joinMs = new ArrayList<>();
        List<Long> leaveMs = new ArrayList<>();
        for (int round = 0; round < rounds; round++) {
            long started = System.nanoTime();
            members.add(new Member().start());
            awaitBalanced(members, partitions);
            joinMs.add((System.nanoTime() - started) / 1_000_000);
            Member leaving = members.remove(0);
            started = System.nanoTime();
            leaving.close();
            awaitBalanced(members, partitions);
            leaveMs.add((System.nanoTime() - started) / 1_000_000);
        }
        for (Member member : members) {
            member.close();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("join_ms", joinMs);
        out.put("leave_ms", leaveMs);
        out.put("overlaps", overlaps.get());
        out.put("partitions", partitions);
        return out;
    }

    private int partitionCount() {
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config())) {
            return consumer.partitionsFor(topic).size();
        }
    }

    /** Every partition held, each member holding its balanced share (floor or ceiling). */
    private void awaitBalanced(List<Member> members, int partitions) throws InterruptedException {
        int low = partitions / members.size();
        int high = low + (partitions % members.size() == 0 ? 0 : 1);
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (System.currentTimeMillis() < deadline) {
            int total = 0;
            boolean balanced = true;
            for (Member member : members) {
                int held = member.held.size();
                total += held;
                balanced &= held >= low && held <= high;
            }
            if (balanced && total == partitions && holders.size() == partitions) {
                return;
            }
            Thread.sleep(5);
        }
        throw new IllegalStateException("the group did not balance within " + WAIT_MS + " ms");
    }

    private Properties config() {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest");
        props.putAll(extra);
        return props;
    }

    private final class Member implements Runnable, ConsumerRebalanceListener {
        final Set<TopicPartition> held = ConcurrentHashMap.newKeySet();
        final AtomicBoolean stop = new AtomicBoolean();
        Thread thread;

        Member start() {
            thread = new Thread(this);
            thread.start();
            return this;
        }

        void close() throws InterruptedException {
            stop.set(true);
            thread.join(WAIT_MS);
        }

        @Override
        public void run() {
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config())) {
                consumer.subscribe(List.of(topic), this);
                while (!stop.get()) {
                    consumer.poll(Duration.ofMillis(20));
                }
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) {
                Member before = holders.put(tp, this);
                if (before != null && before != this) {
                    overlaps.incrementAndGet();
                }
                held.add(tp);
            }
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            release(partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            release(partitions);
        }

        private void release(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) {
                holders.remove(tp, this);
                held.remove(tp);
            }
        }
    }
}
