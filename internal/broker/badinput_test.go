package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/wire"
)

// rawFrame encodes req as a client would, size prefix included.
func rawFrame(req kmsg.Request, corr int32) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func dial(t *testing.T, b *Broker) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// readResponse reads one response frame and returns its correlation id and body.
func readResponse(t *testing.T, c net.Conn) (int32, []byte) {
	t.Helper()
	frame, err := wire.ReadFrame(c, 1<<20, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return int32(binary.BigEndian.Uint32(frame)), frame[4:]
}

// expectClosed asserts the broker closed the connection.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var one [1]byte
	_, err := c.Read(one[:])
	if !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("connection not closed: %v", err)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// stillServes checks that a fresh connection gets answers.
func stillServes(t *testing.T, b *Broker) {
	t.Helper()
	c := dial(t, b)
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	if _, err := c.Write(rawFrame(req, 42)); err != nil {
		t.Fatal(err)
	}
	if corr, _ := readResponse(t, c); corr != 42 {
		t.Fatalf("correlation %d", corr)
	}
}

func TestBadFramesCloseTheConnectionOnly(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.MaxFrame = 1 << 16 })
	unsupported := kmsg.NewPtrFetchRequest()
	unsupported.SetVersion(2)
	truncated := rawFrame(kmsg.NewPtrCreateTopicsRequest(), 1)
	binary.BigEndian.PutUint32(truncated, uint32(len(truncated)-4-2))
	truncated = truncated[:len(truncated)-2]
	unknown := []byte{0, 0, 0, 10, 0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0, 0}
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"oversize frame", binary.BigEndian.AppendUint32(nil, 1<<20)},
		{"negative size", []byte{0xff, 0xff, 0xff, 0xf0}},
		{"truncated body", truncated},
		{"unknown api key", unknown},
		{"unsupported version", rawFrame(unsupported, 3)},
		{"frame shorter than a header", []byte{0, 0, 0, 2, 0, 18}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, b)
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			expectClosed(t, c)
			stillServes(t, b)
		})
	}
}

func TestApiVersionsUnsupportedVersionAnswersV0(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := dial(t, b)
	// A future ApiVersions version whose body we cannot know.
	frame := []byte{0, 18, 0, 99, 0, 0, 0, 9, 0, 0, 0xde, 0xad}
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(frame))), frame...)); err != nil {
		t.Fatal(err)
	}
	corr, body := readResponse(t, c)
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(0)
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if corr != 9 || resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) == 0 {
		t.Fatalf("corr %d error %d keys %d", corr, resp.ErrorCode, len(resp.ApiKeys))
	}
	// The connection stays usable.
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "kaas-test", "1.0"
	c.Write(rawFrame(req, 10))
	if corr, _ := readResponse(t, c); corr != 10 {
		t.Fatalf("correlation %d", corr)
	}
}

func TestPipelinedResponsesKeepRequestOrder(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	createTopic(t, cl, "order", 1, nil)
	c := dial(t, b)
	// A long-polling fetch, then quick requests: answers come in order.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(11)
	fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes = 300, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "order"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	var out []byte
	out = append(out, rawFrame(fetch, 1)...)
	for i := int32(2); i <= 20; i++ {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(int16(i % 13))
		out = append(out, rawFrame(req, i)...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	for want := int32(1); want <= 20; want++ {
		if corr, _ := readResponse(t, c); corr != want {
			t.Fatalf("response %d arrived in position %d", corr, want)
		}
	}
}

func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	cl := client(t, b)
	createTopic(t, cl, "drain", 1, nil)
	c := dial(t, b)
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(11)
	fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes = 2000, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "drain"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.PartitionMaxBytes = 1 << 20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	if _, err := c.Write(rawFrame(fetch, 5)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the fetch is parked
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- b.Close(ctx)
	}()
	if corr, _ := readResponse(t, c); corr != 5 {
		t.Fatalf("correlation %d", corr)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestProduceInvalidRequiredAcks(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	createTopic(t, client(t, b), "acks", 1, nil)
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = 2, 1000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "acks"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = []byte{}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	c := dial(t, b)
	if _, err := c.Write(rawFrame(req, 3)); err != nil {
		t.Fatal(err)
	}
	_, body := readResponse(t, c)
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(9)
	if err := resp.ReadFrom(body[1:]); err != nil { // skip the header's empty tags
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidRequiredAcks.Code {
		t.Fatalf("acks=2: %v", kerr.ErrorForCode(code))
	}
}

// roundTrip sends req at exactly its set version over a fresh connection
// and decodes the answer (kgo would renegotiate the version).
func roundTrip(t *testing.T, b *Broker, req kmsg.Request) kmsg.Response {
	t.Helper()
	c := dial(t, b)
	if _, err := c.Write(rawFrame(req, 77)); err != nil {
		t.Fatal(err)
	}
	corr, body := readResponse(t, c)
	if corr != 77 {
		t.Fatalf("correlation %d", corr)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		body = body[1:] // the response header's empty tags
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatalf("decode %s v%d: %v", wire.Name(req.Key()), req.GetVersion(), err)
	}
	return resp
}
