package wiretap

import (
	"slices"
	"sync"
	"time"
)

// Recorder keeps the events of one group, from every tap of a cluster,
// leaving out the requests of client ids it is told to ignore (a test's
// own admin client).
type Recorder struct {
	group  string
	ignore map[string]bool

	mu     sync.Mutex // guards events
	events []Event
}

// NewRecorder records group's events, but those of the ignored client ids.
func NewRecorder(group string, ignore ...string) *Recorder {
	r := &Recorder{group: group, ignore: map[string]bool{}}
	for _, id := range ignore {
		r.ignore[id] = true
	}
	return r
}

// Observe is a tap's Config.Observe.
func (r *Recorder) Observe(ev Event) {
	if ev.Group != r.group || r.ignore[ev.ClientID] {
		return
	}
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// Summary is what the group's answers said from a moment on.
type Summary struct {
	// Errors counts answers by error code (an answer carrying a code on
	// several partitions counts once).
	Errors map[int16]int
	// GenBefore is the highest generation completed before the moment
	// (-1: none); GenAfter the highest completed at all (-1: none).
	GenBefore, GenAfter int32
	// Rebalances are the distinct generations above GenBefore completed
	// from the moment on, in order.
	Rebalances []int32
}

// Since summarizes the events at or after from.
func (r *Recorder) Since(from time.Time) Summary { return r.Between(from, time.Time{}) }

// Between summarizes the events at or after from and before until (zero:
// no end), so that what happens after a run's measured part (its members
// leaving) is not counted.
func (r *Recorder) Between(from, until time.Time) Summary {
	r.mu.Lock()
	evs := slices.Clone(r.events)
	r.mu.Unlock()
	if !until.IsZero() {
		evs = slices.DeleteFunc(evs, func(ev Event) bool { return !ev.At.Before(until) })
	}
	s := Summary{Errors: map[int16]int{}, GenBefore: -1, GenAfter: -1}
	for _, ev := range evs {
		if ev.Generation >= 0 {
			s.GenAfter = max(s.GenAfter, ev.Generation)
			if ev.At.Before(from) {
				s.GenBefore = max(s.GenBefore, ev.Generation)
			}
		}
	}
	for _, ev := range evs {
		if ev.At.Before(from) {
			continue
		}
		for _, c := range ev.Codes {
			s.Errors[c]++
		}
		if ev.Generation > s.GenBefore && !slices.Contains(s.Rebalances, ev.Generation) {
			s.Rebalances = append(s.Rebalances, ev.Generation)
		}
	}
	slices.Sort(s.Rebalances)
	return s
}
