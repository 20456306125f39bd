package broker

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Defect: the segment.ms topic config was accepted and ignored. Records 2 s
// apart on a topic with segment.ms=1000 now land in two segments.
func TestSegmentMsTopicConfigRollsSegments(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(client(t, b))
	ms := "1000"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"segment.ms": &ms}, "rolled"); err != nil {
		t.Fatal(err)
	}
	cl := client(t, b, kgo.DefaultProduceTopic("rolled"))
	start := time.Now()
	for _, at := range []time.Time{start, start.Add(2 * time.Second)} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v"), Timestamp: at}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := filepath.Glob(filepath.Join(dir, "rolled", "0", "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 2 {
		t.Fatalf("segments %v, want 2", segs)
	}
}
