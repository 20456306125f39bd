package broker

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

func seedFrame(req kmsg.Request) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint16(b, 1)
	b = append(b, 'f')
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

// FuzzDispatch feeds arbitrary frames through decoding and every handler:
// no input panics the broker or leaves a request unanswered, and every
// response encodes. Its seeds are a request of every served API at every
// served version, in the shape kmsg builds (its defaults), beside a few
// filled-in ones; scripts/test.sh fuzzes from them for a bounded time.
func FuzzDispatch(f *testing.F) {
	// One broker for every input of this fuzz process.
	b := newBroker(f, Config{ID: 0, DataDir: f.TempDir(), Listen: "127.0.0.1:0", AutoCreateTopics: true,
		Logger: slog.New(slog.DiscardHandler)}, nil)
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Close(ctx)
	})
	topic := "fz"
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(12)
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	meta.AllowAutoTopicCreation = true
	f.Add(seedFrame(meta))
	prod := kmsg.NewPtrProduceRequest()
	prod.SetVersion(9)
	prod.Acks = -1
	prod.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{Records: []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 49}}}}}
	f.Add(seedFrame(prod))
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(11)
	fetch.Topics = []kmsg.FetchRequestTopic{{Topic: topic, Partitions: []kmsg.FetchRequestTopicPartition{{PartitionMaxBytes: 1 << 20}}}}
	f.Add(seedFrame(fetch))
	join := kmsg.NewPtrJoinGroupRequest()
	join.SetVersion(9)
	join.Group, join.ProtocolType, join.SessionTimeoutMillis = "g", "consumer", 10000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	f.Add(seedFrame(join))
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.SetVersion(9)
	commit.Group, commit.Generation = "g", -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Offset: 1}}}}
	f.Add(seedFrame(commit))
	init := kmsg.NewPtrInitProducerIDRequest()
	tx := "tx"
	init.TransactionalID, init.TransactionTimeoutMillis = &tx, 1000
	f.Add(seedFrame(init))
	for _, k := range SupportedVersions() {
		for v := k.MinVersion; v <= k.MaxVersion; v++ {
			req := kmsg.RequestForKey(k.ApiKey)
			if req == nil {
				continue
			}
			req.SetVersion(v)
			if d, ok := req.(interface{ Default() }); ok {
				d.Default()
			}
			f.Add(seedFrame(req))
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 8 {
			return
		}
		req, err := wire.Decode(frame, supported)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		a, z := net.Pipe()
		defer a.Close()
		defer z.Close()
		c := &conn{nc: a, log: slog.New(slog.DiscardHandler), ctx: ctx, cancel: cancel}
		done := make(chan kmsg.Response, 1)
		go func() { done <- b.dispatch(ctx, c, req)() }()
		select {
		case resp := <-done:
			if resp != nil {
				wire.AppendResponse(nil, req.CorrelationID, resp)
			}
		case <-time.After(40 * time.Second):
			t.Fatalf("%s v%d never answered", wire.Name(req.Key), req.Version)
		}
	})
}
