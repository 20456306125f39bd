package coord

import (
	"path/filepath"
	"testing"

	"github.com/kaas-dev/kaas/internal/group"
	"github.com/kaas-dev/kaas/internal/metrics"
	"github.com/kaas-dev/kaas/internal/offsets"
)

// counter sums the samples of a metric family in m's registry whose
// labels include the given pair (any when label is "").
func counter(t *testing.T, m *metrics.Broker, name, label, value string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.Metric {
			match := label == ""
			for _, l := range s.Label {
				if l.GetName() == label && l.GetValue() == value {
					match = true
				}
			}
			if match && s.Counter != nil {
				sum += s.Counter.GetValue()
			}
		}
	}
	return sum
}

// TestAMoveIsCountedAsALoadNotARebalance: the broker that forms a
// generation counts it in kaas_group_generations_total; the broker the
// group moves to loads it (kaas_group_loads_total) and, since the members
// carry on in the same generation, counts no rebalance.
func TestAMoveIsCountedAsALoadNotARebalance(t *testing.T) {
	dir := t.TempDir()
	g := "counted"
	v1 := assignment(1, 2, nil, map[string]string{g: "kaas-0"})
	v2 := assignment(2, 2, nil, map[string]string{g: "kaas-1"})
	withMetrics := func(me string) (*Coordinator, *metrics.Broker) {
		st, err := offsets.Open(offsets.Options{Dir: filepath.Join(dir, "__cluster", "__consumer_offsets")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		gc := group.DefaultConfig()
		gc.InitialRebalanceDelay = 0
		m := metrics.New()
		return New(Config{Me: me, Store: st, Group: gc, Metrics: m}), m
	}
	a, am := withMetrics("kaas-0")
	a.Apply(nil, v1)
	member := joinAndSync(t, a, g)
	if n := counter(t, am, "kaas_group_generations_total", "type", "classic"); n != 1 {
		t.Fatalf("the first generation counted %v times", n)
	}

	b, bm := withMetrics("kaas-1")
	b.Apply(nil, v2)
	a.Apply(v1, v2)
	res, err := b.Heartbeat(g, group.HeartbeatInput{MemberID: member, Generation: 1})
	if err != nil || res.Err != 0 {
		t.Fatalf("heartbeat at the new owner: %v %s", err, group.ErrName(res.Err))
	}
	if n := counter(t, bm, "kaas_group_loads_total", "", ""); n != 1 {
		t.Fatalf("the new owner counted %v loads", n)
	}
	if n := counter(t, bm, "kaas_group_generations_total", "", ""); n != 0 {
		t.Fatalf("the move was counted as %v rebalances", n)
	}
	if n := counter(t, am, "kaas_group_moves_total", "direction", "lost"); n != 1 {
		t.Fatalf("the old owner counted %v groups lost", n)
	}
}
