package group

import "fmt"

// State is the state of a classic group (Apache Kafka's GroupState).
type State int8

const (
	// Empty: no members (pending KIP-394 member ids may exist). Offsets may
	// be committed by non-members (simple commits).
	Empty State = iota
	// PreparingRebalance: the join phase; JoinGroup requests are parked until
	// every member rejoined, the rebalance timeout, or the initial delay ends.
	PreparingRebalance
	// CompletingRebalance: JoinGroup answered; waiting for the leader's
	// SyncGroup with the assignment. Follower SyncGroups are parked.
	CompletingRebalance
	// Stable: the assignment is distributed.
	Stable
	// Dead: the group was unloaded (its coordinator moved) or deleted; it
	// holds no members and answers every request with NOT_COORDINATOR.
	Dead
)

var stateNames = [...]string{
	Empty:               "Empty",
	PreparingRebalance:  "PreparingRebalance",
	CompletingRebalance: "CompletingRebalance",
	Stable:              "Stable",
	Dead:                "Dead",
}

// String returns Kafka's name for the state, as DescribeGroups and
// ListGroups report it.
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// validPrevious is the transition table: validPrevious[to] lists the states
// a group may move to `to` from. It is Apache Kafka's GroupState table.
var validPrevious = map[State][]State{
	Empty:               {PreparingRebalance},
	PreparingRebalance:  {Empty, CompletingRebalance, Stable},
	CompletingRebalance: {PreparingRebalance},
	Stable:              {CompletingRebalance},
	Dead:                {Empty, PreparingRebalance, CompletingRebalance, Stable, Dead},
}

// CanTransition reports whether the transition table allows from → to.
func CanTransition(from, to State) bool {
	for _, s := range validPrevious[to] {
		if s == from {
			return true
		}
	}
	return false
}
