package dev.kaas.conformance;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * One member of the conformance suite's group: polls, prints "R partition
 * offset" on stdout for every record, then commits synchronously what the
 * poll returned. SIGTERM ends the loop; close() leaves the group.
 *
 * <p>Arguments: bootstrap topic group client-id protocol, where protocol is
 * classic or consumer (KIP-848: the coordinator assigns, so the classic
 * session, heartbeat and assignor settings are not set).
 */
public final class Member {
    private static volatile boolean stop;

    public static void main(String[] args) throws IOException {
        if (args.length != 5) {
            System.err.println("usage: Member bootstrap topic group client-id classic|consumer");
            System.exit(2);
        }
        String bootstrap = args[0], topic = args[1], group = args[2], clientId = args[3], protocol = args[4];
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "20000");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "500");
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        if (protocol.equals("classic")) {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        }
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        Writer out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.US_ASCII), 1 << 16);
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p);
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
        c.subscribe(List.of(topic));
        try {
            while (!stop) {
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(300));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    out.write("R " + r.partition() + " " + r.offset() + "\n");
                }
                out.flush();
                if (!recs.isEmpty()) {
                    try {
                        c.commitSync();
                    } catch (WakeupException e) {
                        throw e;
                    } catch (KafkaException e) {
                        System.err.println("commit: " + e);
                    }
                }
            }
        } catch (WakeupException e) {
            if (!stop) {
                throw e;
            }
        } finally {
            out.flush();
            // What was printed is committed before leaving, also when the
            // wake-up cut the last commit short.
            try {
                c.commitSync(Duration.ofSeconds(10));
            } catch (KafkaException e) {
                System.err.println("commit at close: " + e);
            }
            c.close(Duration.ofSeconds(20));
            System.err.println("closed");
        }
    }
}
