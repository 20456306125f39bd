// Package cluster owns the cluster runtime of one broker: controller
// election, broker liveness reports, and assignment.json (reading, applying,
// and, on the controller, computing and writing it). It imports only
// internal/route (the one routing function), internal/fsutil and
// internal/volume; it must not import the broker or the coordinator, which
// learn about assignments through the Runtime's hooks.
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"time"
)

// Health of a broker row.
type Health string

const (
	Alive    Health = "alive"
	Draining Health = "draining"
	Dead     Health = "dead"
)

// BrokerRow is one broker in assignment.json. id, health and lastSeen are
// the spec's fields; nodeId, host, port and rack are kaas extras that
// Metadata needs (readers that do not know them ignore them).
type BrokerRow struct {
	ID       string    `json:"id"`
	Health   Health    `json:"health"`
	LastSeen time.Time `json:"lastSeen"`
	NodeID   int32     `json:"nodeId"`
	Host     string    `json:"host,omitempty"`
	Port     int32     `json:"port,omitempty"`
	Rack     string    `json:"rack,omitempty"`
}

// PartitionRow is the leader of one partition and its leader epoch.
type PartitionRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Broker    string `json:"broker"`
	Epoch     int32  `json:"epoch"`
	Role      string `json:"role"`
}

// GroupRow is an explicit group placement (the controller's group balancing).
type GroupRow struct {
	GroupID string `json:"groupId"`
	Broker  string `json:"broker"`
	Epoch   int64  `json:"epoch"`
	// HandedOffAt is set on an entry minted when the group's broker stopped
	// being alive (drained or died): the entry is held for handOffHold even
	// before the new home reports the group in use (Compute).
	HandedOffAt time.Time `json:"handedOffAt,omitzero"`
}

// Assignment is assignment.json: compact JSON, camelCase, written only by
// the elected controller (temp file, fsync, rename, fsync dir).
//
//	{"controllerEpoch":3,"assignmentVersion":57,"generatedAt":"…","controller":"kaas-0",
//	 "brokers":[{"id":"kaas-0","health":"alive","lastSeen":"…","nodeId":0,"host":"127.0.0.1","port":9092}],
//	 "partitions":[{"topic":"orders","partition":0,"broker":"kaas-0","epoch":4,"role":"leader"}],
//	 "consumerGroups":[{"groupId":"g1","broker":"kaas-0","epoch":1}]}
//
// controllerEpoch rises with every election; assignmentVersion with every
// write by one controller. Readers ignore unknown fields and keep what they
// had when the file is missing or unparsable.
type Assignment struct {
	ControllerEpoch   int64          `json:"controllerEpoch"`
	AssignmentVersion int64          `json:"assignmentVersion"`
	GeneratedAt       time.Time      `json:"generatedAt"`
	Controller        string         `json:"controller"`
	Brokers           []BrokerRow    `json:"brokers"`
	Partitions        []PartitionRow `json:"partitions"`
	ConsumerGroups    []GroupRow     `json:"consumerGroups,omitempty"`
	// Removed lists the brokers removed on purpose (remove-broker), with
	// the process incarnation they had: every later controller reads it
	// here, so a removed broker stays removed through controller changes
	// and restarts, and a late report of that process is not a return. A
	// new process with the id (another incarnation) that reports alive
	// joins again and leaves the list.
	Removed []RemovedRow `json:"removed,omitempty"`
}

// RemovedRow is a broker removed from the cluster on purpose.
type RemovedRow struct {
	ID          string    `json:"id"`
	Incarnation string    `json:"incarnation,omitempty"`
	At          time.Time `json:"at"`
}

// maxRemoved bounds Assignment.Removed: the oldest removals are forgotten
// first (their processes are long gone).
const maxRemoved = 256

// Newer reports whether a is a later assignment than b: a higher controller
// epoch, or the same epoch and a higher version.
func (a *Assignment) Newer(b *Assignment) bool {
	if b == nil {
		return true
	}
	if a.ControllerEpoch != b.ControllerEpoch {
		return a.ControllerEpoch > b.ControllerEpoch
	}
	return a.AssignmentVersion > b.AssignmentVersion
}

// BrokerIDs is the full broker set: every row, whatever its health.
func (a *Assignment) BrokerIDs() []string {
	ids := make([]string, len(a.Brokers))
	for i, b := range a.Brokers {
		ids[i] = b.ID
	}
	sort.Strings(ids)
	return ids
}

// Row returns the row of broker id.
func (a *Assignment) Row(id string) (BrokerRow, bool) {
	for _, b := range a.Brokers {
		if b.ID == id {
			return b, true
		}
	}
	return BrokerRow{}, false
}

// IsAlive reports whether broker id's row is alive.
func (a *Assignment) IsAlive(id string) bool {
	r, ok := a.Row(id)
	return ok && r.Health == Alive
}

// Validate checks the invariants a reader relies on.
func (a *Assignment) Validate() error {
	seen := map[string]bool{}
	for _, b := range a.Brokers {
		if b.ID == "" || seen[b.ID] {
			return fmt.Errorf("assignment: broker id %q empty or repeated", b.ID)
		}
		switch b.Health {
		case Alive, Draining, Dead:
		default:
			return fmt.Errorf("assignment: broker %s has health %q", b.ID, b.Health)
		}
		seen[b.ID] = true
	}
	for _, p := range a.Partitions {
		if !seen[p.Broker] {
			return fmt.Errorf("assignment: %s/%d led by unknown broker %q", p.Topic, p.Partition, p.Broker)
		}
	}
	for _, g := range a.ConsumerGroups {
		if !seen[g.Broker] {
			return fmt.Errorf("assignment: group %q placed on unknown broker %q", g.GroupID, g.Broker)
		}
	}
	return nil
}

// ErrNoAssignment is returned by ReadAssignment when the file does not exist.
var ErrNoAssignment = errors.New("cluster: no assignment.json")

// DecodeAssignment parses and validates assignment.json.
func DecodeAssignment(data []byte) (*Assignment, error) {
	var a Assignment
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("cluster: decode assignment: %w", err)
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// ReadAssignment reads and decodes the file at path.
func ReadAssignment(path string) (*Assignment, error) { return readAssignment(OS{}, path) }

// readAssignment reads and decodes the file at path through v.
func readAssignment(v Volume, path string) (*Assignment, error) {
	data, err := v.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoAssignment
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: read assignment: %w", err)
	}
	return DecodeAssignment(data)
}

// sortRows orders rows so that equal assignments encode identically.
func (a *Assignment) sortRows() {
	sort.Slice(a.Brokers, func(i, j int) bool { return a.Brokers[i].ID < a.Brokers[j].ID })
	sort.Slice(a.Partitions, func(i, j int) bool {
		if a.Partitions[i].Topic != a.Partitions[j].Topic {
			return a.Partitions[i].Topic < a.Partitions[j].Topic
		}
		return a.Partitions[i].Partition < a.Partitions[j].Partition
	})
	sort.Slice(a.ConsumerGroups, func(i, j int) bool { return a.ConsumerGroups[i].GroupID < a.ConsumerGroups[j].GroupID })
}

// clone returns a deep copy.
func (a *Assignment) clone() *Assignment {
	c := *a
	c.Brokers = append([]BrokerRow(nil), a.Brokers...)
	c.Partitions = append([]PartitionRow(nil), a.Partitions...)
	c.ConsumerGroups = append([]GroupRow(nil), a.ConsumerGroups...)
	c.Removed = append([]RemovedRow(nil), a.Removed...)
	return &c
}
