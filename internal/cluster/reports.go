package cluster

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kaas-dev/kaas/internal/fsutil"
	"github.com/kaas-dev/kaas/internal/volume"
)

// Broker report states.
const (
	StateRunning  = "running"
	StateDraining = "draining"
	StateStopped  = "stopped"
)

// Report is a broker's liveness report, sent to every peer's cluster
// listener about once a second (by the runtime loop, or by its heartbeat
// while the loop waits on the volume) and rewritten by the loop at
// <data>/__cluster/brokers/<id>.json, where brokers find each other's
// addresses and a new controller inherits what every broker last said
// (docs/cluster.md, "Liveness"). Observers judge liveness by seeing seq
// change, measured on their own clock: no clocks are compared between
// machines.
type Report struct {
	ID          string    `json:"id"`
	NodeID      int32     `json:"nodeId"`
	Host        string    `json:"host"`
	Port        int32     `json:"port"`
	Rack        string    `json:"rack,omitempty"`
	State       string    `json:"state"`
	Incarnation string    `json:"incarnation"`
	Seq         int64     `json:"seq"`
	At          time.Time `json:"at"`
	// Groups this broker coordinates and that have members or offsets in
	// use: the input of the controller's group balancing.
	Groups []string `json:"groups,omitempty"`
	// The assignment this broker acts on (controllerEpoch and
	// assignmentVersion of the newest it applied): a broker gaining a group
	// serves it once every other broker that may act on an older assignment
	// has applied the move (see docs/cluster.md, "Hand-off").
	AppliedEpoch   int64 `json:"appliedEpoch,omitempty"`
	AppliedVersion int64 `json:"appliedVersion,omitempty"`
	// Writing is the oldest assignment under which a write of this
	// broker's to a group or transaction file is in flight (nil: none). A
	// rename cannot be refused and a volume may hold one for seconds: a
	// broker gaining a group waits until no broker that may write it
	// under an older assignment has such a write in flight.
	Writing *fsutil.Stamp `json:"writing,omitempty"`
	// KnownEpoch is the highest controller epoch this broker knows: a
	// controller that hears of a higher one stops controlling at once.
	KnownEpoch int64 `json:"knownEpoch,omitempty"`
	// Leader: this broker holds the controller role at KnownEpoch.
	Leader bool `json:"leader,omitempty"`
	// ClusterAddr is this broker's cluster listener (host:port), where
	// the other brokers send their reports.
	ClusterAddr string `json:"clusterAddr,omitempty"`
}

func reportsDir(dataDir string) string { return volume.ReportsDir(dataDir) }

func writeReport(v Volume, dataDir string, r Report) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return v.WriteFile(filepath.Join(reportsDir(dataDir), r.ID+".json"), data)
}

// readReports reads every report file. One listed but unreadable (a read
// that failed: NFS answers ESTALE to one racing the rename that replaced
// the file) is named in unreadable: its broker is not removed, there is no
// news of it. One that is not a report (a foreign file) is skipped; a torn
// one is impossible with rename.
func readReports(v Volume, dataDir string) (reports map[string]Report, unreadable []string, err error) {
	dir := reportsDir(dataDir)
	names, err := v.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: list reports: %w", err)
	}
	out := make(map[string]Report, len(names))
	for _, file := range names {
		name, ok := strings.CutSuffix(file, ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		data, err := v.ReadFile(filepath.Join(dir, file))
		if err != nil {
			unreadable = append(unreadable, name)
			continue
		}
		var r Report
		if json.Unmarshal(data, &r) != nil || r.ID != name {
			continue
		}
		out[name] = r
	}
	return out, unreadable, nil
}

// watcher tracks when each broker's report last changed, on the local
// clock. Every broker runs one, so that a newly elected controller already
// knows who went quiet. Owned by the runtime loop.
type watcher struct {
	last    map[string]Report
	changed map[string]time.Time
}

func newWatcher() *watcher {
	return &watcher{last: map[string]Report{}, changed: map[string]time.Time{}}
}

// observe notes the reports read at now. A broker whose report is gone
// was removed and is forgotten; one named in unreadable keeps its last
// report, which ages as if unchanged.
func (w *watcher) observe(now time.Time, reports map[string]Report, unreadable []string) {
	for id, r := range reports {
		prev, ok := w.last[id]
		if !ok || prev.Seq != r.Seq || prev.Incarnation != r.Incarnation || prev.State != r.State {
			w.changed[id] = now
		}
		w.last[id] = r
	}
	for id := range w.last {
		if _, ok := reports[id]; !ok && !slices.Contains(unreadable, id) {
			delete(w.last, id) // report removed: the broker was removed
			delete(w.changed, id)
		}
	}
}

// health is the observed health of a reporting broker.
func (w *watcher) health(id string, now time.Time, deadAfter time.Duration) (Health, bool) {
	r, ok := w.last[id]
	if !ok {
		return Dead, false
	}
	switch {
	case r.State == StateStopped:
		return Dead, true
	case now.Sub(w.changed[id]) > deadAfter:
		return Dead, true
	case r.State == StateDraining:
		return Draining, true
	}
	return Alive, true
}

// quietFor is how long broker id's report has not changed.
func (w *watcher) quietFor(id string, now time.Time) time.Duration {
	t, ok := w.changed[id]
	if !ok {
		return 0
	}
	return now.Sub(t)
}
