// Transactions of N records with Kafka's Java producer (kafka-clients 4.x, unmodified), for a
// number of seconds: begin, send N, commit. Prints {"records", "transactions", "seconds",
// "epoch"} as JSON. The transaction protocol is the one the cluster finalizes
// (transaction.version: 2 is KIP-890's).
//
//   java -cp <classes>:<kafka libs>/* TxnBench <bootstrap> <topic> <transactional id> <records per txn> <seconds>

import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnBench {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String transactionalId = args[2];
        int perTransaction = Integer.parseInt(args[3]);
        double seconds = Double.parseDouble(args[4]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("transactional.id", transactionalId);
        props.put("linger.ms", 5);
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        byte[] value = new byte[100];
        long records = 0;
        long transactions = 0;
        double elapsed;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            // one warm-up transaction, not counted
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, value));
            producer.commitTransaction();
            long start = System.nanoTime();
            long deadline = start + (long) (seconds * 1e9);
            while (System.nanoTime() < deadline) {
                producer.beginTransaction();
                for (int i = 0; i < perTransaction; i++) {
                    producer.send(new ProducerRecord<>(topic, value));
                }
                producer.commitTransaction();
                records += perTransaction;
                transactions++;
            }
            elapsed = (System.nanoTime() - start) / 1e9;
        }
        int epoch;
        try (Admin admin = Admin.create(Properties.class.cast(props.clone()))) {
            epoch = admin.describeTransactions(List.of(transactionalId)).all().get()
                    .get(transactionalId).producerEpoch();
        }
        System.out.printf("{\"records\": %d, \"transactions\": %d, \"seconds\": %.3f, \"epoch\": %d}%n",
                records, transactions, elapsed, epoch);
    }
}
