// Package group is the pure state machine of Kafka's classic consumer-group
// membership protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the
// generation checks of OffsetCommit/TxnOffsetCommit) for ONE group, as Apache
// Kafka's classic group coordinator runs it (spec coordination.md §7,
// protocol.md; KIP-394, KIP-345, KIP-814, KIP-559, KIP-800).
//
// It owns the membership of one group: members, pending (KIP-394) member ids,
// generation, protocol, leader and assignments. It owns no goroutine, does no
// I/O, never reads the clock (every input carries now) and takes no lock: a
// shell (coord's membership, under the group's mutex) feeds it requests and
// timer firings one at a time and performs the Output each call returns
// (responses to send, timers to arm or cancel, log events). A Group is not
// safe for concurrent use: its shell serialises every call.
//
// Its durable part (Snapshot) is written by the shell whenever an Output
// says so (Output.Persist) and restored by a coordinator that gains the
// group (Restore), so that a move continues the same generation.
//
// It imports the standard library and franz-go's kerr (error codes) and kmsg
// (consumer protocol metadata decoding) only; it must not import other kaas
// packages. The contract is described in docs/group.md.
package group
