// Package txn owns the transaction coordinator of one broker: the state of
// each transactional id this broker coordinates (routing tier: the hash
// only), its file on the shared volume, producer epochs and fencing, the
// two-phase end of a transaction (decision made durable, then markers to
// every partition and group, then completion), and the timeouts. It imports
// internal/offsets for the file naming and fence types; markers and producer
// ids come through interfaces, so it does not import the broker.
package txn

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/kaas-dev/kaas/internal/offsets"
)

// State of one transactional id.
type State string

const (
	Empty          State = "Empty"
	Ongoing        State = "Ongoing"
	PrepareCommit  State = "PrepareCommit"
	PrepareAbort   State = "PrepareAbort"
	CompleteCommit State = "CompleteCommit"
	CompleteAbort  State = "CompleteAbort"
)

// String implements fmt.Stringer.
func (s State) String() string { return string(s) }

// transitions lists the legal state changes.
var transitions = map[State][]State{
	Empty:          {Ongoing, PrepareAbort, Empty},
	Ongoing:        {Ongoing, PrepareCommit, PrepareAbort},
	PrepareCommit:  {CompleteCommit},
	PrepareAbort:   {CompleteAbort},
	CompleteCommit: {Ongoing, PrepareAbort, Empty},
	CompleteAbort:  {Ongoing, PrepareAbort, Empty},
}

// CanTransition reports whether from → to is legal.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// TP is a topic partition of a transaction.
type TP struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// Record is the state of one transactional id, and the content of its file
// <data>/__cluster/transactions/<offsets.FileName(id)>.json (compact JSON):
//
//	{"transactionalId":"tx-1","producerId":4000,"producerEpoch":3,"timeoutMs":60000,
//	 "state":"Ongoing","partitions":[{"topic":"out","partition":0}],"groups":["g1"],
//	 "startedAt":"…","updatedAt":"…","fence":{"controller_epoch":3,"assignment_version":57}}
//
// One file per transactional id, written only by the id's coordinator (temp
// file, fsync, rename, fsync dir), stamped with the writer's assignment
// fence: a broker never overwrites a file stamped by a newer assignment.
type Record struct {
	TransactionalID string    `json:"transactionalId"`
	ProducerID      int64     `json:"producerId"`
	ProducerEpoch   int16     `json:"producerEpoch"`
	TimeoutMs       int32     `json:"timeoutMs"`
	State           State     `json:"state"`
	Partitions      []TP      `json:"partitions,omitempty"`
	Groups          []string  `json:"groups,omitempty"`
	StartedAt       time.Time `json:"startedAt"`
	UpdatedAt       time.Time `json:"updatedAt"`
	Fence           fence     `json:"fence"`
}

type fence struct {
	ControllerEpoch   int64 `json:"controller_epoch"`
	AssignmentVersion int64 `json:"assignment_version"`
}

func (f fence) offsets() offsets.Fence {
	return offsets.Fence{ControllerEpoch: f.ControllerEpoch, AssignmentVersion: f.AssignmentVersion}
}

func fenceOf(f offsets.Fence) fence {
	return fence{ControllerEpoch: f.ControllerEpoch, AssignmentVersion: f.AssignmentVersion}
}

func (r *Record) clone() *Record {
	c := *r
	c.Partitions = append([]TP(nil), r.Partitions...)
	c.Groups = append([]string(nil), r.Groups...)
	return &c
}

func (r *Record) addPartitions(tps []TP) {
	have := map[TP]bool{}
	for _, tp := range r.Partitions {
		have[tp] = true
	}
	for _, tp := range tps {
		if !have[tp] {
			r.Partitions = append(r.Partitions, tp)
			have[tp] = true
		}
	}
	sort.Slice(r.Partitions, func(i, j int) bool {
		if r.Partitions[i].Topic != r.Partitions[j].Topic {
			return r.Partitions[i].Topic < r.Partitions[j].Topic
		}
		return r.Partitions[i].Partition < r.Partitions[j].Partition
	})
}

func (r *Record) addGroup(g string) {
	for _, x := range r.Groups {
		if x == g {
			return
		}
	}
	r.Groups = append(r.Groups, g)
	sort.Strings(r.Groups)
}

func decodeRecord(data []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("txn: decode: %w", err)
	}
	if _, ok := transitions[r.State]; !ok {
		return nil, fmt.Errorf("txn: decode: unknown state %q", r.State)
	}
	return &r, nil
}
