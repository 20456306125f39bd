package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kaas-dev/kaas/internal/testutil"
)

// Defect: on a quiet topic (less than segment.bytes per retention period)
// time retention never happened: the active segment was never deleted.
// Side by side with Kafka 4.4, retention.ms=10000 and 11 records: Kafka's
// log start offset was 11 within minutes, kaas's 0 after 16 minutes.
func TestTimeRetentionEmptiesAQuietTopic(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.RetentionCheck = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(client(t, b))
	ms := "1000"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": &ms}, "quiet"); err != nil {
		t.Fatal(err)
	}
	cl := client(t, b, kgo.DefaultProduceTopic("quiet"))
	for i := range 11 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := testutil.Poll(20*time.Second, func() error {
		starts, err := adm.ListStartOffsets(ctx, "quiet")
		if err != nil {
			return err
		}
		o, ok := starts.Lookup("quiet", 0)
		if !ok || o.Offset != 11 {
			return fmt.Errorf("log start offset %d, want 11", o.Offset)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatalf("produce after retention emptied the log: %v", err)
	}
}
