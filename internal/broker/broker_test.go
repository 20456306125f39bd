package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/testutil"
	"github.com/kaas-dev/kaas/internal/wire"
)

// TestRegisteredVersionsAreServedByTheClientLibrary: every registered API
// and version exists in kmsg (the codec), and ApiVersions advertises exactly
// the registrations.
func TestRegisteredVersionsAreServedByTheClientLibrary(t *testing.T) {
	for k, a := range apis {
		req := kmsg.RequestForKey(k)
		if req == nil {
			t.Errorf("key %d is registered but unknown to kmsg", k)
			continue
		}
		if a.versions.Min < 0 || a.versions.Min > a.versions.Max || a.versions.Max > req.MaxVersion() {
			t.Errorf("%s: versions %d-%d outside kmsg's 0-%d", wire.Name(k), a.versions.Min, a.versions.Max, req.MaxVersion())
		}
	}
	adv := SupportedVersions()
	if len(adv) != len(apis) {
		t.Fatalf("ApiVersions lists %d keys, %d are registered", len(adv), len(apis))
	}
	for _, k := range adv {
		if a := apis[k.ApiKey]; a.versions.Min != k.MinVersion || a.versions.Max != k.MaxVersion {
			t.Errorf("%s advertised %d-%d, registered %d-%d", wire.Name(k.ApiKey), k.MinVersion, k.MaxVersion, a.versions.Min, a.versions.Max)
		}
	}
}

func TestProduceConsumeEveryCodecIdempotent(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	for _, codec := range []struct {
		name string
		c    kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()},
	} {
		t.Run(codec.name, func(t *testing.T) {
			topic := "codec-" + codec.name
			cl := client(t, b, kgo.ProducerBatchCompression(codec.c)) // idempotence is franz-go's default
			createTopic(t, cl, topic, 3, nil)
			produceN(t, cl, topic, 300)
			got := consume(t, b, topic, 300)
			if len(got) != 300 {
				t.Fatalf("got %d records", len(got))
			}
			seen := map[string]bool{}
			for _, r := range got {
				if seen[string(r.Value)] {
					t.Fatalf("duplicate %s", r.Value)
				}
				seen[string(r.Value)] = true
			}
		})
	}
}

func TestRestartReadsEverythingBack(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	createTopic(t, cl, "durable", 2, nil)
	produceN(t, cl, "durable", 500)
	cl.Close()
	stop(t, b)

	b2 := startBroker(t, dir, nil)
	got := consume(t, b2, "durable", 500)
	if len(got) != 500 {
		t.Fatalf("after restart: %d records", len(got))
	}
	// Appends continue after the recovered end.
	produceN(t, client(t, b2), "durable", 10)
	consume(t, b2, "durable", 510)
}

func TestCreateTopicsErrors(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	adm := kadm.NewClient(client(t, b))
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		topic      string
		partitions int32
		rf         int16
		configs    map[string]*string
		want       error
	}{
		{"escape", "../escape", 1, 1, nil, kerr.InvalidTopicException},
		{"slash", "a/b", 1, 1, nil, kerr.InvalidTopicException},
		{"dot", ".", 1, 1, nil, kerr.InvalidTopicException},
		{"reserved", "__cluster", 1, 1, nil, kerr.InvalidTopicException},
		{"too long", string(make([]byte, 250)), 1, 1, nil, kerr.InvalidTopicException},
		{"zero partitions", "zero", 0, 1, nil, kerr.InvalidPartitions},
		{"rf 3", "rf3", 1, 3, nil, kerr.InvalidReplicationFactor},
		{"unknown config", "cfg", 1, 1, map[string]*string{"no.such.config": kadm.StringPtr("1")}, kerr.InvalidConfig},
		{"bad retention", "ret", 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("soon")}, kerr.InvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := adm.CreateTopic(ctx, tc.partitions, tc.rf, tc.configs, tc.topic)
			if err == nil {
				err = resp.Err
			}
			if err != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// Nothing escaped the data dir, and no topic was registered.
	if _, err := os.Stat(filepath.Join(filepath.Dir(b.cfg.DataDir), "escape")); err == nil {
		t.Fatal("a topic directory escaped the data dir")
	}
	if n := len(b.topics.All()); n != 0 {
		t.Fatalf("%d topics registered by refused requests", n)
	}
	// Duplicate creation.
	createTopic(t, client(t, b), "twice", 1, nil)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "twice"); err != kerr.TopicAlreadyExists {
		t.Fatalf("second create: %v", err)
	}
	// Validate-only writes nothing.
	cl := client(t, b)
	req := kmsg.NewPtrCreateTopicsRequest()
	req.ValidateOnly = true
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "dry", 2, -1
	req.Topics = append(req.Topics, rt)
	cresp, err := req.RequestWith(ctx, cl)
	if err != nil || cresp.Topics[0].ErrorCode != 0 {
		t.Fatalf("validate only: %v %+v", err, cresp)
	}
	if _, ok := b.topics.Get("dry"); ok {
		t.Fatal("validate-only created the topic")
	}
}

func TestDeleteTopicRemovesDataAndRecreateStartsEmpty(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	createTopic(t, cl, "gone", 2, nil)
	produceN(t, cl, "gone", 50)
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	resp, err := adm.DeleteTopics(ctx, "gone")
	if err != nil || resp["gone"].Err != nil {
		t.Fatalf("delete: %v %v", err, resp["gone"].Err)
	}
	if _, err := os.Stat(filepath.Join(b.cfg.DataDir, "gone")); !os.IsNotExist(err) {
		t.Fatalf("data dir of deleted topic still there: %v", err)
	}
	resp, _ = adm.DeleteTopics(ctx, "gone")
	if resp["gone"].Err != kerr.UnknownTopicOrPartition {
		t.Fatalf("second delete: %v", resp["gone"].Err)
	}
	createTopic(t, cl, "gone", 2, nil)
	offs, err := adm.ListEndOffsets(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	offs.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("re-created topic partition %d ends at %d", o.Partition, o.Offset)
		}
	})
}

func TestListOffsets(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b, kgo.ProducerLinger(0))
	createTopic(t, cl, "lo", 1, nil)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 10 {
		r := &kgo.Record{Topic: "lo", Value: []byte("x"), Timestamp: base.Add(time.Duration(i) * time.Minute)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	start, _ := adm.ListStartOffsets(ctx, "lo")
	end, _ := adm.ListEndOffsets(ctx, "lo")
	if o, _ := start.Lookup("lo", 0); o.Offset != 0 {
		t.Fatalf("start %d", o.Offset)
	}
	if o, _ := end.Lookup("lo", 0); o.Offset != 10 {
		t.Fatalf("end %d", o.Offset)
	}
	at, err := adm.ListOffsetsAfterMilli(ctx, base.Add(4*time.Minute).UnixMilli(), "lo")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := at.Lookup("lo", 0); o.Offset != 4 {
		t.Fatalf("offset for timestamp: %d", o.Offset)
	}
	after, _ := adm.ListOffsetsAfterMilli(ctx, time.Now().Add(time.Hour).UnixMilli(), "lo")
	if o, _ := after.Lookup("lo", 0); o.Offset != 10 && o.Offset != -1 {
		t.Fatalf("offset after last timestamp: %d", o.Offset)
	}
	// Max timestamp (-3).
	req := kmsg.NewPtrListOffsetsRequest()
	req.SetVersion(7)
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "lo"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = -3
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.Offset != 9 || p.Timestamp != base.Add(9*time.Minute).UnixMilli() {
		t.Fatalf("max timestamp: offset %d ts %d", p.Offset, p.Timestamp)
	}
}

func TestProduceErrors(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	createTopic(t, cl, "small", 1, map[string]*string{"max.message.bytes": kadm.StringPtr("1000")})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := make([]byte, 5000)
	rand.Read(big) // incompressible: the batch stays over the limit
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: "small", Value: big}).FirstErr()
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("oversize record: %v", err)
	}
	// Unknown topic without auto-creation.
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 1000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "nope"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = []byte{1, 2, 3}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("unknown topic: %v", kerr.ErrorForCode(c))
	}
	// Garbage records on a real topic: corrupt, and nothing is stored.
	req.Topics[0].Topic = "small"
	resp, err = req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != kerr.CorruptMessage.Code && c != kerr.InvalidRecord.Code {
		t.Fatalf("garbage records: %v", kerr.ErrorForCode(c))
	}
}

func TestAutoCreateTopics(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.AutoCreateTopics = true; c.DefaultPartitions = 3 })
	cl := client(t, b, kgo.AllowAutoTopicCreation())
	produceN(t, cl, "auto", 20)
	tp, ok := b.topics.Get("auto")
	if !ok || tp.Partitions != 3 {
		t.Fatalf("auto-created topic: %+v %v", tp, ok)
	}
	off := startBroker(t, t.TempDir(), nil)
	adm := kadm.NewClient(client(t, off))
	md, err := adm.Metadata(context.Background(), "never")
	if err != nil {
		t.Fatal(err)
	}
	if md.Topics["never"].Err != kerr.UnknownTopicOrPartition {
		t.Fatalf("auto-creation off: %v", md.Topics["never"].Err)
	}
}

func TestFetchLongPollWakesOnProduce(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	createTopic(t, cl, "poll", 1, nil)
	got := make(chan int, 1)
	go func() {
		c2, _ := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.ConsumeTopics("poll"), kgo.FetchMaxWait(5*time.Second))
		defer c2.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		got <- len(c2.PollFetches(ctx).Records())
	}()
	time.Sleep(300 * time.Millisecond) // let the consumer park its fetch
	start := time.Now()
	produceN(t, cl, "poll", 1)
	select {
	case n := <-got:
		if n != 1 {
			t.Fatalf("got %d records", n)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("the parked fetch returned after %v, not when data arrived", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no records")
	}
}

func TestMetadataListsTopicsAndBroker(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	for i := range 3 {
		createTopic(t, cl, fmt.Sprintf("m%d", i), int32(i+1), nil)
	}
	md, err := kadm.NewClient(cl).Metadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n, td := range md.Topics {
		if td.IsInternal {
			continue // internal_test.go
		}
		names = append(names, n)
		for _, p := range td.Partitions {
			if p.Leader != 0 || p.Err != nil {
				t.Errorf("%s/%d: leader %d err %v", n, p.Partition, p.Leader, p.Err)
			}
		}
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[m0 m1 m2]" || len(md.Brokers) != 1 || md.Cluster == "" {
		t.Fatalf("metadata: %v brokers %v cluster %q", names, md.Brokers, md.Cluster)
	}
}

func TestAdminConfigsPartitionsCluster(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	ctx := context.Background()
	createTopic(t, cl, "adm", 2, map[string]*string{"retention.ms": kadm.StringPtr("60000")})
	adm := kadm.NewClient(cl)
	rc, err := adm.DescribeTopicConfigs(ctx, "adm")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rc {
		for _, c := range r.Configs {
			if c.Key == "retention.ms" && c.MaybeValue() == "60000" && c.Source == kmsg.ConfigSourceDynamicTopicConfig {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("retention.ms not described: %+v", rc)
	}
	if _, err := adm.CreatePartitions(ctx, 3, "adm"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		md, err := adm.Metadata(ctx, "adm")
		if err != nil {
			return err
		}
		if n := len(md.Topics["adm"].Partitions); n != 5 {
			return fmt.Errorf("%d partitions", n)
		}
		return nil
	})
	resp, _ := adm.CreatePartitions(ctx, -4, "adm") // would shrink
	if resp["adm"].Err != kerr.InvalidPartitions {
		t.Fatalf("shrink: %v", resp["adm"].Err)
	}
	produceN(t, cl, "adm", 50)
	dc := kmsg.NewPtrDescribeClusterRequest()
	dc.SetVersion(1)
	dc.EndpointType = 1
	dresp := roundTrip(t, b, dc).(*kmsg.DescribeClusterResponse)
	if dresp.ErrorCode != 0 || len(dresp.Brokers) != 1 || dresp.ControllerID != 0 || dresp.ClusterID != b.ClusterID() {
		t.Fatalf("describe cluster: %+v", dresp)
	}
	dc.EndpointType = 2
	if dresp := roundTrip(t, b, dc).(*kmsg.DescribeClusterResponse); dresp.ErrorCode != kerr.UnsupportedEndpointType.Code {
		t.Fatalf("controller endpoints: %d", dresp.ErrorCode)
	}
}

func TestLogAppendTimeOffsetOutOfRangeAndTopicIDs(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	ctx := context.Background()
	createTopic(t, cl, "lat", 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")})
	old := time.Now().Add(-24 * time.Hour)
	before := time.Now().Add(-time.Second)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "lat", Value: []byte("x"), Timestamp: old}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := consume(t, b, "lat", 1)
	if ts := got[0].Timestamp; ts.Before(before) || got[0].Attrs.TimestampType() != 1 {
		t.Fatalf("LogAppendTime topic kept the client's timestamp %v (type %d)", ts, got[0].Attrs.TimestampType())
	}
	// Fetch past the end: OFFSET_OUT_OF_RANGE.
	tp, _ := b.topics.Get("lat")
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(13) // by topic id
	req.MaxWaitMillis, req.MaxBytes = 100, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.TopicID = tp.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch = 99, 1<<20, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := roundTrip(t, b, req).(*kmsg.FetchResponse)
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != kerr.OffsetOutOfRange.Code || resp.Topics[0].TopicID != tp.ID {
		t.Fatalf("fetch past the end by topic id: %v", kerr.ErrorForCode(c))
	}
	req.Topics[0].Partitions[0].FetchOffset = 0
	resp = roundTrip(t, b, req).(*kmsg.FetchResponse)
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || len(p.RecordBatches) == 0 || p.HighWatermark != 1 {
		t.Fatalf("fetch by topic id: %+v", p)
	}
	req.Topics[0].TopicID = [16]byte{1}
	resp = roundTrip(t, b, req).(*kmsg.FetchResponse)
	if c := resp.Topics[0].Partitions[0].ErrorCode; c != kerr.UnknownTopicID.Code {
		t.Fatalf("unknown topic id: %v", kerr.ErrorForCode(c))
	}
}

func TestDeletedTopicOffsetsAreNotInheritedByARecreatedTopic(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	ctx := context.Background()
	createTopic(t, cl, "reborn", 1, nil)
	adm := kadm.NewClient(cl)
	o := kadm.Offsets{}
	o.AddOffset("reborn", 0, 500, -1)
	if _, err := adm.CommitOffsets(ctx, "g", o); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteTopics(ctx, "reborn"); err != nil {
		t.Fatal(err)
	}
	createTopic(t, cl, "reborn", 1, nil)
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := offs.Lookup("reborn", 0); ok && got.At != -1 {
		t.Fatalf("the re-created topic inherited a committed offset: %+v", got)
	}
}

func TestOffsetsRetentionExpiresEmptyGroups(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	b := startBroker(t, t.TempDir(), func(c *Config) { c.Now = clock })
	cl := client(t, b)
	ctx := context.Background()
	createTopic(t, cl, "ret", 1, nil)
	adm := kadm.NewClient(cl)
	o := kadm.Offsets{}
	o.AddOffset("ret", 0, 7, -1)
	if _, err := adm.CommitOffsets(ctx, "old-group", o); err != nil {
		t.Fatal(err)
	}
	b.coord.ExpireOffsets(ctx)
	if offs, _ := adm.FetchOffsets(ctx, "old-group"); offs["ret"][0].At != 7 {
		t.Fatal("expired before the retention passed")
	}
	now.Add((7*24*time.Hour + time.Minute).Milliseconds())
	b.coord.ExpireOffsets(ctx)
	offs, _ := adm.FetchOffsets(ctx, "old-group")
	if o, ok := offs.Lookup("ret", 0); ok && o.At != -1 {
		t.Fatalf("offset kept past retention: %+v", o)
	}
	listed, _ := adm.ListGroups(ctx)
	if _, ok := listed["old-group"]; ok {
		t.Fatal("a group with no offsets and no members is still listed")
	}
}

// TestStatusDocListsTheServedVersions: docs/status.md's table of APIs and
// versions is the registrations, no more and no less.
func TestStatusDocListsTheServedVersions(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "status.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, m := range regexp.MustCompile(`\b([A-Z][A-Za-z]+) (\d+(?:-\d+)?)\b`).FindAllStringSubmatch(string(data), -1) {
		listed[strings.ToLower(m[1])] = m[2] // InitProducerId (Kafka) is kmsg's InitProducerID
	}
	for _, k := range SupportedVersions() {
		want := strconv.Itoa(int(k.MinVersion))
		if k.MaxVersion != k.MinVersion {
			want += "-" + strconv.Itoa(int(k.MaxVersion))
		}
		name := strings.ToLower(wire.Name(k.ApiKey))
		if got, ok := listed[name]; !ok || got != want {
			t.Errorf("docs/status.md lists %s as %q; it is served at %s", name, got, want)
		}
		delete(listed, name)
	}
	for name, v := range listed {
		if keyOf(name) >= 0 {
			t.Errorf("docs/status.md lists %s %s, which is not served", name, v)
		}
	}
}

func keyOf(name string) int16 {
	for k := int16(0); k < 200; k++ {
		if strings.EqualFold(kmsg.NameForKey(k), name) {
			return k
		}
	}
	return -1
}
