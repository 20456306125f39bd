package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestFirstErrorFindsTheCodeWhereTheAnswerPutsIt(t *testing.T) {
	top := kmsg.NewPtrFindCoordinatorResponse()
	top.ErrorCode = kerr.CoordinatorNotAvailable.Code

	produce := kmsg.NewPtrProduceResponse()
	pt := kmsg.NewProduceResponseTopic()
	ok, bad := kmsg.NewProduceResponseTopicPartition(), kmsg.NewProduceResponseTopicPartition()
	bad.ErrorCode = kerr.NotLeaderForPartition.Code
	pt.Partitions = append(pt.Partitions, ok, bad)
	produce.Topics = append(produce.Topics, pt)

	batched := kmsg.NewPtrFindCoordinatorResponse()
	c := kmsg.NewFindCoordinatorResponseCoordinator()
	c.ErrorCode = kerr.NotCoordinator.Code
	batched.Coordinators = append(batched.Coordinators, c)

	clean := kmsg.NewPtrProduceResponse()
	clean.Topics = append(clean.Topics, kmsg.ProduceResponseTopic{Partitions: []kmsg.ProduceResponseTopicPartition{ok}})

	for name, c := range map[string]struct {
		resp kmsg.Response
		want int16
	}{
		"top level":       {top, kerr.CoordinatorNotAvailable.Code},
		"a partition":     {produce, kerr.NotLeaderForPartition.Code},
		"a batched entry": {batched, kerr.NotCoordinator.Code},
		"none":            {clean, 0},
	} {
		if got := FirstError(c.resp); got != c.want {
			t.Errorf("%s: %d, want %d", name, got, c.want)
		}
	}
}

func TestNilBrokerRecordsNothing(t *testing.T) {
	var m *Broker
	m.Request(0, 9, kmsg.NewPtrProduceResponse(), 0)
	m.Connections(1)
	m.Produced(1, 1)
	m.Durable("log", 0)
	m.Committed(1)
	m.GroupLoaded(0)
	m.GroupFileCorrupt("g")
	m.ClientError("bad_request")
	m.RequestPanic(16)
	m.GroupsLost(1)
	m.Applied(0)
	m.Refused("max.connections")
	m.Observe(nil, nil)
}

// TestDashboardUsesOnlyMetricsThatExist: every metric the Grafana
// dashboard (deploy/grafana/kaas-dashboard.json) queries is one a broker
// exports.
func TestDashboardUsesOnlyMetricsThatExist(t *testing.T) {
	m := New()
	m.Request(0, 9, kmsg.NewPtrProduceResponse(), time.Millisecond)
	m.Request(1, 11, kmsg.NewPtrFetchResponse(), time.Millisecond)
	m.Connections(1)
	m.Refused("max.connections")
	m.Produced(10, 1)
	m.Durable("log", time.Millisecond)
	m.Committed(1)
	m.GroupLoaded(time.Millisecond)
	m.GroupsLost(1)
	m.Applied(time.Millisecond)
	m.Observe(func() []GroupStat { return []GroupStat{{Type: "classic", State: "Stable", Members: 1}} },
		func() ClusterStat { return ClusterStat{Brokers: map[string]int{"alive": 1}} })
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	data, err := os.ReadFile("../../deploy/grafana/kaas-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	name := regexp.MustCompile(`\b(?:kaas|go|process)_[a-z_]+\b`)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				base := n
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suffix)
				}
				if !have[n] && !have[base] {
					t.Errorf("panel %q queries %s, which no broker exports", p.Title, n)
				}
			}
		}
	}
}

// TestRecordsCountsDataRecordsOfWholeBatches: a Fetch answer's records are
// the data batches' record counts; a transaction marker and a batch cut
// short at the end of the answer are not counted.
func TestRecordsCountsDataRecordsOfWholeBatches(t *testing.T) {
	batch := func(records int32, attributes int16, body int) []byte {
		b := kmsg.RecordBatch{Magic: 2, Attributes: attributes, NumRecords: records, Records: make([]byte, body)}
		b.Length = int32(49 + body)
		return b.AppendTo(nil)
	}
	var b []byte
	b = append(b, batch(3, 0, 30)...)
	b = append(b, batch(1, 0x20|0x10, 8)...) // a commit marker
	b = append(b, batch(5, 0, 50)...)
	whole := len(b)
	b = append(b, batch(7, 0, 70)...)
	b = b[:len(b)-10] // the answer's size limit cut the last batch
	if n := Records(b[:whole]); n != 8 {
		t.Fatalf("whole batches: %d records, want 8", n)
	}
	if n := Records(b); n != 8 {
		t.Fatalf("with a cut batch: %d records, want 8", n)
	}
	if n := Records(b[:20]); n != 0 {
		t.Fatalf("a header cut short: %d records, want 0", n)
	}
}
