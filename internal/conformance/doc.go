// Package conformance is the real-client conformance and chaos suite: it
// runs 3 kaas brokers as separate OS processes over one temp folder
// (internal/proctest) and drives consumer groups with every client of
// ../shared/clients.md — franz-go (eager range, cooperative-sticky, static
// membership), sarama, segmentio kafka-go, kafka-python,
// confluent-kafka-python, kcat -G, kafkajs and the Java KafkaConsumer, with
// the KIP-848 consumer protocol too where the client speaks it — through
// membership changes
// and broker failures: kill -9 of the group's coordinator, a rolling SIGTERM
// restart, kill -9 of the controller, and a SIGSTOP beyond the liveness
// timeout.
//
// Every scenario checks that every record produced with acks=all is
// consumed at least once, that committed offsets never go backwards, that
// the union of ListGroups over every broker lists the group exactly once,
// that every partition is owned exactly once when the group is stable, and
// that every client ends by itself when told to stop. It writes a results
// table (client × scenario, with the failover time) to $KAAS_CONFORMANCE_OUT
// or a fresh temp dir. See docs/conformance.md.
//
// Every client connection goes through a wiretap.Tap per broker, which
// counts the group's rebalances and error codes from the wire. With
// KAAS_CONFORMANCE_TARGET=kafka the same matrix runs against the Apache
// Kafka 4.4.0 reference cluster (internal/kafkaref).
//
// The package has only tests; it imports proctest, wiretap and kafkaref,
// never the broker.
package conformance
