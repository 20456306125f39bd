package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Defect: a topic whose name starts with a dot (Kafka accepts ".hidden")
// was created with success, then invisible: it was not listed, produce
// after a refresh answered UNKNOWN_TOPIC_OR_PARTITION, and creating it
// again said TOPIC_ALREADY_EXISTS.
func TestTopicNamedWithALeadingDotIsServed(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(client(t, b))
	const topic = ".hidden"
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	cl := client(t, b, kgo.DefaultProduceTopic(topic))
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce to %q: %v", topic, err)
	}
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !listed.Has(topic) {
		t.Fatalf("%q not listed: %v", topic, listed.Names())
	}
	r, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
	if !errors.Is(err, kerr.TopicAlreadyExists) && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
		t.Fatalf("creating it again: %v %v", err, r.Err)
	}
}
