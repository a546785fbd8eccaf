// A Kafka Streams application (kafka-streams 4.x, unmodified) with exactly_once_v2: orders
// (key customer, value "item:amount") are joined with the customers table (key customer, value
// region), re-keyed by region (a repartition topic) and summed per region in a state store
// (a compacted changelog topic); the totals go to <name>-region-totals. It also counts orders
// per item into <name>-item-counts (a second repartition and store).
//
//   java -cp <classes>:<kafka libs>/* StreamsApp <bootstrap> <name> <state dir> [k=v ...]
//
// It runs until its stdin ends (or it fails), then closes cleanly and prints its final state as
// JSON: {"state": ..., "error": ...}.

import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public final class StreamsApp {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String name = args[1];
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, name + "-app");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        for (int i = 3; i < args.length; i++) {
            String[] pair = args[i].split("=", 2);
            props.put(pair[0], pair[1]);
        }

        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, String> customers = builder.table(name + "-customers", Consumed.with(Serdes.String(), Serdes.String()));
        KStream<String, String> orders = builder.stream(name + "-orders", Consumed.with(Serdes.String(), Serdes.String()));
        orders.join(customers, (order, region) -> region + ":" + order.split(":")[1])
                .map((customer, regionAmount) -> KeyValue.pair(regionAmount.split(":")[0], regionAmount.split(":")[1]))
                .groupByKey(Grouped.with("by-region", Serdes.String(), Serdes.String()))
                .aggregate(() -> "0",
                        (region, amount, total) -> Long.toString(Long.parseLong(total) + Long.parseLong(amount)),
                        Materialized.as("region-totals"))
                .toStream()
                .to(name + "-region-totals", Produced.with(Serdes.String(), Serdes.String()));
        orders.groupBy((customer, order) -> order.split(":")[0], Grouped.with("by-item", Serdes.String(), Serdes.String()))
                .count(Materialized.as("item-counts"))
                .toStream()
                .mapValues(count -> Long.toString(count))
                .to(name + "-item-counts", Produced.with(Serdes.String(), Serdes.String()));

        AtomicReference<Throwable> failure = new AtomicReference<>();
        try (KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
            streams.setUncaughtExceptionHandler(error -> {
                failure.compareAndSet(null, error);
                return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            java.util.concurrent.CountDownLatch stdinEnded = new java.util.concurrent.CountDownLatch(1);
            Thread reader = new Thread(() -> {
                try {
                    while (System.in.read() != -1) {
                        // the test closes stdin to stop the application
                    }
                } catch (java.io.IOException ignored) {
                    // a closed stdin ends the application too
                }
                stdinEnded.countDown();
            });
            reader.setDaemon(true);
            reader.start();
            streams.start();
            while (stdinEnded.getCount() > 0 && failure.get() == null
                    && streams.state() != KafkaStreams.State.ERROR && streams.state() != KafkaStreams.State.NOT_RUNNING) {
                Thread.sleep(200);
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("state", streams.state().toString());
            Throwable error = failure.get();
            out.put("error", error == null ? null : error.toString() + (error.getCause() == null ? "" : " caused by " + error.getCause()));
            streams.close(Duration.ofSeconds(30));
            System.out.println(new ObjectMapper().writeValueAsString(out));
        }
    }
}
