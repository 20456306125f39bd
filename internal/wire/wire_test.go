package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// testVersions is what the tests decode: Metadata 0-12, Produce 3-11,
// CreateTopics 0-7, ApiVersions 0-4.
func testVersions(key int16) (Range, bool) {
	r, ok := map[int16]Range{
		kmsg.Metadata.Int16(): {0, 12}, kmsg.Produce.Int16(): {3, 11},
		kmsg.CreateTopics.Int16(): {0, 7}, kmsg.ApiVersions.Int16(): {0, 4},
	}[key]
	return r, ok
}

// frame builds a request frame body (without the size prefix) the way a
// client does: header v1/v2 then the body.
func frame(req kmsg.Request, corr int32, clientID string) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

func TestDecodeRoundTrip(t *testing.T) {
	for _, v := range []int16{0, 4, 9, 12} {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		name := "orders"
		req.Topics = []kmsg.MetadataRequestTopic{{Topic: &name}}
		got, err := Decode(frame(req, 7, "cli"), testVersions)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if got.CorrelationID != 7 || got.ClientID != "cli" || got.Version != v {
			t.Fatalf("v%d: header %+v", v, got.Header)
		}
		m := got.Body.(*kmsg.MetadataRequest)
		if len(m.Topics) != 1 || *m.Topics[0].Topic != "orders" {
			t.Fatalf("v%d: topics %+v", v, m.Topics)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	unsupported := kmsg.NewPtrProduceRequest()
	unsupported.SetVersion(2) // Kafka 4 dropped produce v0-v2; so do we
	truncated := frame(kmsg.NewPtrCreateTopicsRequest(), 1, "x")
	truncated = truncated[:len(truncated)-2]
	unknown := binary.BigEndian.AppendUint16(nil, 999)
	unknown = append(unknown, 0, 0, 0, 0, 0, 1, 0, 0)
	for _, tc := range []struct {
		name  string
		frame []byte
		want  error
	}{
		{"unknown key", unknown, ErrUnknownKey},
		{"unsupported version", frame(unsupported, 1, ""), ErrUnsupportedVersion},
		{"truncated body", truncated, ErrMalformed},
		{"truncated header", []byte{0, 3, 0, 1, 0, 0, 0, 1, 0, 9, 'a'}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.frame, testVersions)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReadFrameLimits(t *testing.T) {
	var big bytes.Buffer
	big.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
	if _, err := ReadFrame(&big, DefaultMaxFrame, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
	var neg bytes.Buffer
	neg.Write([]byte{0xff, 0xff, 0xff, 0xff})
	if _, err := ReadFrame(&neg, DefaultMaxFrame, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("negative: %v", err)
	}
	var tiny bytes.Buffer
	tiny.Write([]byte{0, 0, 0, 3, 1, 2, 3})
	if _, err := ReadFrame(&tiny, DefaultMaxFrame, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("tiny: %v", err)
	}
}

func TestAPIVersionsResponseHeaderIsV0(t *testing.T) {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(3) // flexible body, but the header stays v0
	out := AppendResponse(nil, 5, resp)
	body := resp.AppendTo(nil)
	if len(out) != 8+len(body) {
		t.Fatalf("ApiVersions v3 response carries header tags: %d vs %d", len(out), 8+len(body))
	}
	meta := kmsg.NewPtrMetadataResponse()
	meta.SetVersion(9)
	if out := AppendResponse(nil, 5, meta); len(out) != 9+len(meta.AppendTo(nil)) {
		t.Fatalf("flexible response lacks header tags")
	}
}

// FuzzDecode: arbitrary frames never panic.
func FuzzDecode(f *testing.F) {
	for _, v := range []int16{0, 9, 12} {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		f.Add(frame(req, 1, "seed"))
	}
	p := kmsg.NewPtrProduceRequest()
	p.SetVersion(9)
	p.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Records: []byte{1, 2, 3}}}}}
	f.Add(frame(p, 2, "seed"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 8 {
			return
		}
		_, _ = Decode(b, testVersions)
	})
}
