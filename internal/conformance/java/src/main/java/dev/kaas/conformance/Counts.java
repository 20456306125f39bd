package dev.kaas.conformance;

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

/**
 * A Kafka Streams application with exactly_once_v2 and a stateful
 * aggregation: it re-keys each input value "key:payload" by its key (a
 * repartition topic), counts the values per key in a state store backed by
 * a changelog topic (both topics created by Streams itself), and writes
 * every new count to the output as key → count. With exactly-once and no
 * record cache, each key's output is 1, 2, ..., n, each once.
 *
 * <p>On stdout: "S state" at each state change of the instance, "E message"
 * for each exception that kills a stream thread (the thread is replaced).
 * SIGTERM closes the instance.
 *
 * <p>Arguments: bootstrap input output application-id state-dir client-id.
 */
public final class Counts {
    public static void main(String[] args) throws InterruptedException {
        if (args.length != 6) {
            System.err.println("usage: Counts bootstrap input output application-id state-dir client-id");
            System.exit(2);
        }
        String bootstrap = args[0], input = args[1], output = args[2], app = args[3], stateDir = args[4], client = args[5];
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.CLIENT_ID_CONFIG, client);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG), 500);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 20000);

        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .selectKey((k, v) -> v.substring(0, v.indexOf(':')))
                .groupByKey(Grouped.with("by-key", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .mapValues(n -> Long.toString(n))
                .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams s = new KafkaStreams(b.build(), p);
        s.setStateListener((now, before) -> {
            System.out.println("S " + now);
            System.out.flush();
        });
        s.setUncaughtExceptionHandler(e -> {
            System.out.println("E " + e.getClass().getSimpleName() + ": " + e.getMessage());
            System.out.flush();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            s.close(Duration.ofSeconds(20));
            System.err.println("closed");
            closed.countDown();
        }));
        s.start();
        closed.await();
    }
}
