// Package kafkatools runs Apache Kafka's own command-line tools (4.4.0, the
// reference cluster's jars: kafka-topics, kafka-consumer-groups,
// kafka-console-producer and -consumer, kafka-transactions, kafka-configs)
// against a kaas cluster and checks what they print, as an operator would
// read it. See docs/conformance.md, "Kafka's tools".
//
// The package has only tests; it imports clustertest and kafkaref.
package kafkatools
