package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestInternalTopicsAsKafkaShowsThem: Metadata lists __consumer_offsets and
// __transaction_state as internal topics with 50 partitions each, by name,
// by id and among all topics, with the same ids after a restart; they hold
// no records (Fetch at 0 is empty with high watermark 0, past it
// OFFSET_OUT_OF_RANGE; ListOffsets 0); DescribeConfigs shows Kafka's
// settings; Produce, CreateTopics, DeleteTopics and CreatePartitions are
// refused with Kafka's codes where Kafka refuses and nothing changes.
func TestInternalTopicsAsKafkaShowsThem(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b := startBroker(t, dir, nil)
	cl := client(t, b, kgo.RecordRetries(0))
	adm := kadm.NewClient(cl)
	md, err := adm.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string][16]byte{}
	for _, n := range []string{"__consumer_offsets", "__transaction_state"} {
		td, ok := md.Topics[n]
		if !ok || !td.IsInternal || len(td.Partitions) != 50 || td.ID == ([16]byte{}) {
			t.Fatalf("%s in Metadata: %+v", n, td)
		}
		for _, p := range td.Partitions {
			if p.Leader != 0 || p.Err != nil {
				t.Fatalf("%s/%d: leader %d, %v", n, p.Partition, p.Leader, p.Err)
			}
		}
		ids[n] = td.ID
	}
	byID := kmsg.NewPtrMetadataRequest()
	byID.Topics = []kmsg.MetadataRequestTopic{{TopicID: ids["__transaction_state"]}}
	if resp, err := byID.RequestWith(ctx, cl); err != nil || len(resp.Topics) != 1 || resp.Topics[0].Topic == nil ||
		*resp.Topics[0].Topic != "__transaction_state" || !resp.Topics[0].IsInternal {
		t.Fatalf("Metadata by id: %v %+v", err, resp)
	}

	// No records.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxBytes, fetch.MaxWaitMillis = 1<<20, 10
	fetch.Topics = []kmsg.FetchRequestTopic{{Topic: "__consumer_offsets", TopicID: ids["__consumer_offsets"], Partitions: []kmsg.FetchRequestTopicPartition{
		{Partition: 3, FetchOffset: 0, PartitionMaxBytes: 1 << 20, CurrentLeaderEpoch: -1},
		{Partition: 4, FetchOffset: 5, PartitionMaxBytes: 1 << 20, CurrentLeaderEpoch: -1},
		{Partition: 50, FetchOffset: 0, PartitionMaxBytes: 1 << 20, CurrentLeaderEpoch: -1},
	}}}
	fr, err := fetch.RequestWith(ctx, cl.Broker(0))
	if err != nil || len(fr.Topics) != 1 || len(fr.Topics[0].Partitions) != 3 {
		t.Fatalf("Fetch: %v %+v", err, fr)
	}
	ps := fr.Topics[0].Partitions
	if ps[0].ErrorCode != 0 || ps[0].HighWatermark != 0 || len(ps[0].RecordBatches) != 0 ||
		ps[1].ErrorCode != kerr.OffsetOutOfRange.Code || ps[2].ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("Fetch of the internal topic: %+v", ps)
	}
	ends, err := adm.ListEndOffsets(ctx, "__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := ends.Lookup("__consumer_offsets", 7); !ok || o.Err != nil || o.Offset != 0 {
		t.Fatalf("ListOffsets: %+v", o)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, "__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := rc.On("__consumer_offsets", nil); err != nil || !hasConfig(cfg, "cleanup.policy", "compact") {
		t.Fatalf("DescribeConfigs: %+v %v", cfg, err)
	}

	// Refused, as Kafka refuses (deleting and growing them is refused
	// where Kafka allows it: their state lives in files).
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "__consumer_offsets", Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.InvalidTopicException) {
		t.Fatalf("Produce: %v", err)
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "__transaction_state"); !errors.Is(err, kerr.TopicAlreadyExists) && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
		t.Fatalf("CreateTopics: %v %v", err, r.Err)
	}
	if rs, err := adm.DeleteTopics(ctx, "__consumer_offsets"); err != nil || !errors.Is(rs["__consumer_offsets"].Err, kerr.TopicDeletionDisabled) {
		t.Fatalf("DeleteTopics: %v %+v", err, rs)
	}
	if rs, err := adm.CreatePartitions(ctx, 60, "__consumer_offsets"); err != nil || !errors.Is(rs["__consumer_offsets"].Err, kerr.InvalidPartitions) {
		t.Fatalf("CreatePartitions: %v %+v", err, rs)
	}

	// The ids are the same after a restart (derived from the cluster id).
	b.Close(ctx)
	b2 := startBroker(t, dir, nil)
	md, err = kadm.NewClient(client(t, b2)).Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for n, id := range ids {
		if md.Topics[n].ID != id || len(md.Topics[n].Partitions) != 50 {
			t.Fatalf("%s after a restart: id %x, was %x", n, md.Topics[n].ID, id)
		}
	}
}

func hasConfig(rc kadm.ResourceConfig, key, value string) bool {
	for _, c := range rc.Configs {
		if c.Key == key && c.MaybeValue() == value {
			return true
		}
	}
	return false
}
