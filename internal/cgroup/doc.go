// Package cgroup is the pure state machine of one KIP-848 consumer group
// (Apache Kafka's "consumer" group protocol, GA in 4.0): the coordinator
// computes a target assignment with a server-side assignor, and every member
// reconciles towards it one heartbeat at a time, with member epochs, so that
// a partition is never owned by two members at once and nobody stops the
// world. It serves ConsumerGroupHeartbeat (v0 server-generated member ids,
// v1 client-generated ones, KIP-1082), the data of ConsumerGroupDescribe,
// the member-epoch gate of OffsetCommit v9+ and TxnOffsetCommit with
// per-partition assignment epochs (KIP-1251), static membership, regular
// expression subscriptions, session and revocation timeouts, online
// migration from and to classic groups, and a durable Snapshot so that a
// coordinator move continues the same epochs.
//
// Like package group (the classic protocol) it owns no goroutine, does no
// I/O, never reads the clock (every input carries now) and takes no lock:
// its shell feeds it one input at a time and performs what the returned
// Output says (persist the snapshot, re-arm the one deadline timer). The
// topics it assigns come in as an Image, the shell's view of the topics at
// the time of the input. It imports the standard library and franz-go's
// kerr and kmsg only (kmsg decodes and encodes the consumer protocol
// subscriptions and assignments of the classic members a group takes in by
// online migration). The contract is described in docs/cgroup.md.
package cgroup
