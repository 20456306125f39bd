package dev.kaas.conformance;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * A consume-transform-produce member with exactly-once semantics: it reads
 * its partitions of the input (read_committed), copies each poll's records
 * to the output and commits their offsets in the same transaction
 * (sendOffsetsToTransaction with the consumer's group metadata), through a
 * transactional, idempotent producer.
 *
 * <p>On stdout: "C n" after each committed transaction of n records, "E
 * message" for each error the application sees, "G revoked|assigned|lost
 * generation partitions" from the rebalance listener (the suite counts
 * them).
 * After an aborted transaction the consumer rewinds to the committed
 * offsets. SIGTERM ends the loop; both clients close.
 *
 * <p>Arguments: bootstrap input output group transactional-id.
 */
public final class Etl {
    private static volatile boolean stop;

    public static void main(String[] args) {
        if (args.length != 5) {
            System.err.println("usage: Etl bootstrap input output group transactional-id");
            System.exit(2);
        }
        String bootstrap = args[0], input = args[1], output = args[2], group = args[3], txnId = args[4];
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, txnId + "-consumer");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
        cp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        cp.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "20000");
        cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "500");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.CLIENT_ID_CONFIG, txnId + "-producer");
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        pp.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "20000");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp);
        KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp);
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop = true;
            c.wakeup();
            try {
                main.join(30_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        p.initTransactions();
        c.subscribe(List.of(input), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                System.out.println("G revoked " + c.groupMetadata().generationId() + " " + parts.size());
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                System.out.println("G assigned " + c.groupMetadata().generationId() + " " + parts.size());
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> parts) {
                System.out.println("G lost " + c.groupMetadata().generationId() + " " + parts.size());
            }
        });
        try {
            while (!stop) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(300));
                if (recs.isEmpty()) {
                    continue;
                }
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                p.beginTransaction();
                try {
                    for (ConsumerRecord<byte[], byte[]> r : recs) {
                        p.send(new ProducerRecord<>(output, r.key(), r.value()));
                        next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    p.sendOffsetsToTransaction(next, c.groupMetadata());
                    p.commitTransaction();
                    System.out.println("C " + recs.count());
                } catch (KafkaException e) {
                    // Abortable (a rebalance fenced the offsets, a timeout):
                    // abort, and read again from what is committed.
                    System.out.println("E " + e.getClass().getSimpleName() + ": " + e.getMessage());
                    p.abortTransaction();
                    rewind(c, next.keySet());
                }
                System.out.flush();
            }
        } catch (WakeupException e) {
            if (!stop) {
                throw e;
            }
        } finally {
            p.close(Duration.ofSeconds(10));
            c.close(Duration.ofSeconds(20));
            System.err.println("closed");
        }
    }

    // rewind seeks each partition still assigned to its committed offset.
    private static void rewind(KafkaConsumer<byte[], byte[]> c, Set<TopicPartition> parts) {
        Set<TopicPartition> mine = new java.util.HashSet<>(parts);
        mine.retainAll(c.assignment());
        Map<TopicPartition, OffsetAndMetadata> committed = c.committed(mine);
        for (TopicPartition tp : mine) {
            OffsetAndMetadata om = committed.get(tp);
            if (om != null) {
                c.seek(tp, om.offset());
            } else {
                c.seekToBeginning(List.of(tp));
            }
        }
    }
}
