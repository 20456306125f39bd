package broker

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/metrics"
)

// Defect: the version label of the request metrics took any version a
// client sent: one connection sending ApiVersions at every version grew
// /metrics by a series per version, for good. Versions outside the served
// range are now one label, "unsupported".
func TestRequestMetricLabelsStayAClosedSet(t *testing.T) {
	m := metrics.New()
	b := startBroker(t, t.TempDir(), func(c *Config) { c.Metrics = m })
	c := dial(t, b)
	const sent = 300
	for v := range sent {
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(int16(100 + v))
		if _, err := c.Write(rawFrame(req, int32(v))); err != nil {
			t.Fatal(err)
		}
		readResponse(t, c)
	}
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	if _, err := c.Write(rawFrame(req, sent)); err != nil {
		t.Fatal(err)
	}
	readResponse(t, c)
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "kaas_requests_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			api, version := "", ""
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "api":
					api = l.GetValue()
				case "version":
					version = l.GetValue()
				}
			}
			if api == "ApiVersions" {
				versions[version] += s.GetCounter().GetValue()
			}
		}
	}
	if len(versions) != 2 || versions["unsupported"] != sent || versions["3"] != 1 {
		t.Fatalf("ApiVersions series by version label: %v", versions)
	}
}
