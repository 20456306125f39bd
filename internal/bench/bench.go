// Package bench owns `kaas-bench`: the goals of docs/performance (each a
// ratio taken in one run), the raw limits they are measured against, the
// targets they run on (kaas on the data dir, kaas on tmpfs, kfake, and an
// Apache Kafka cluster when the run is given one), one load
// generator shared by every target, and the report (table, markdown, PNG).
//
// It may import internal/broker and internal/wire (to start brokers and pin
// the client to the advertised versions); nothing in kaas imports it.
//
// A goal is one type implementing Goal, registered from an init function in
// its own file (goal_<name>.go). The Runner builds one Env per run; a goal
// takes its targets, limits and data dir from it and returns rows.
package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
)

// Reference names used in Row.RefName.
const (
	RefKfake = "kfake" // the peer, measured in this run
	RefL     = "L"     // a raw limit, measured in this run
	RefSpec  = "spec"  // an orientation figure from docs (limit rows only)
)

// Row is one measured comparison. Ratio is Ours/Reference; Target says which
// way it must fall ("≥ 1.0", "≤ 1.25", or "info" for rows with no goal).
type Row struct {
	Goal      string  // the goal's registered name
	What      string  // what was measured, with the target it ran on
	Unit      string  // unit of Ours and Reference ("rec/s", "µs", ...)
	Ours      float64 // kaas (or, for limit rows, the measured limit)
	Reference float64 // the peer or limit it is compared with
	RefName   string  // RefKfake, RefL or RefSpec
	Ratio     float64 // Ours / Reference
	Target    string  // "≥ 1.0", "≤ 1.25", "info"
	Met       bool
	Note      string
	// Kafka is the same measurement taken on Apache Kafka (kaas-bench
	// --kafka) in this run, in Unit; 0 when the run had no Kafka cluster or
	// the row has no like-for-like twin there. KafkaNote says what the
	// figure includes, or why it is missing.
	Kafka     float64
	KafkaNote string
}

// WithKafka returns r with the Kafka figure of the same measurement. err,
// when the measurement on Kafka failed, is kept in KafkaNote: the row of
// kaas stands either way.
func (r Row) WithKafka(v float64, note string, err error) Row {
	if err != nil {
		r.Kafka, r.KafkaNote = 0, "failed: "+err.Error()
		return r
	}
	r.Kafka, r.KafkaNote = v, note
	return r
}

// KafkaRatio is Ours / Kafka, 0 when there is no Kafka figure.
func (r Row) KafkaRatio() float64 { return ratio(r.Ours, r.Kafka) }

// AtLeast builds a row whose goal is Ours ≥ min × Reference.
func AtLeast(goal, what, unit string, ours, ref float64, refName string, min float64, note string) Row {
	r := Row{Goal: goal, What: what, Unit: unit, Ours: ours, Reference: ref, RefName: refName,
		Ratio: ratio(ours, ref), Target: fmt.Sprintf("≥ %.2g", min), Note: note}
	r.Met = r.Ratio >= min
	return r
}

// AtMost builds a row whose goal is Ours ≤ max × Reference.
func AtMost(goal, what, unit string, ours, ref float64, refName string, max float64, note string) Row {
	r := Row{Goal: goal, What: what, Unit: unit, Ours: ours, Reference: ref, RefName: refName,
		Ratio: ratio(ours, ref), Target: fmt.Sprintf("≤ %.3g", max), Note: note}
	r.Met = r.Ratio <= max
	return r
}

// Info builds a row with no goal, such as a measured limit next to the
// orientation figure of the spec (refName RefSpec).
func Info(goal, what, unit string, ours, ref float64, refName, note string) Row {
	return Row{Goal: goal, What: what, Unit: unit, Ours: ours, Reference: ref,
		RefName: refName, Ratio: ratio(ours, ref), Target: "info", Met: true, Note: note}
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}

// Goal is one benchmark. Run measures kaas and its reference in the same
// call, against the targets of env, and returns at least one row. Run must
// honour ctx and stay within about env.Duration per measurement it makes.
type Goal interface {
	Name() string
	// Describe says in one line what the goal measures and against what.
	Describe() string
	Run(ctx context.Context, env *Env) ([]Row, error)
}

var (
	regMu    sync.Mutex // guards registry
	registry []Goal     // in registration order; see Goals
)

// Register adds a goal; call it from an init function. A duplicate name panics.
func Register(g Goal) {
	regMu.Lock()
	defer regMu.Unlock()
	for _, h := range registry {
		if h.Name() == g.Name() {
			panic("bench: goal registered twice: " + g.Name())
		}
	}
	registry = append(registry, g)
}

// order puts the limits first (the other goals are measured against them),
// then the others by name.
var order = map[string]int{"limits": 0, "produce": 1, "fetch": 2}

// Goals lists the registered goals: limits, produce, fetch, then the rest by name.
func Goals() []Goal {
	regMu.Lock()
	defer regMu.Unlock()
	gs := slices.Clone(registry)
	slices.SortStableFunc(gs, func(a, b Goal) int {
		oa, ok := order[a.Name()]
		if !ok {
			oa = len(order)
		}
		ob, ok := order[b.Name()]
		if !ok {
			ob = len(order)
		}
		if oa != ob {
			return oa - ob
		}
		if oa == len(order) {
			switch {
			case a.Name() < b.Name():
				return -1
			case a.Name() > b.Name():
				return 1
			}
		}
		return 0
	})
	return gs
}

// Lookup returns the registered goal with that name.
func Lookup(name string) (Goal, bool) {
	for _, g := range Goals() {
		if g.Name() == name {
			return g, true
		}
	}
	return nil, false
}
