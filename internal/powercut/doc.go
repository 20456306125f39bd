// Package powercut is the power-cut suite (tests only): a 3-broker kaas
// cluster of OS processes (internal/proctest) on an internal/powerfs mount,
// under an idempotent acks=all producer, a transactional producer and
// consumer-group offset commits, through power cuts (every broker killed -9,
// then every write not yet fsynced dropped and every namespace operation not
// yet made durable reverted) and injected disk faults. It checks that
// nothing a client was told is durable is ever lost: acknowledged records,
// acknowledged offset commits, committed transactions, and that no aborted
// transaction becomes visible. See docs/conformance/POWERCUT.md.
//
// Quick mode runs in the normal test command; KAAS_POWERCUT=long (or
// scripts/powercut.sh) runs the long mode and writes the results table.
package powercut
