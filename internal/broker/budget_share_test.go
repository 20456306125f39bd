package broker

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Defect: a few connections that each sent most of a large request and
// stalled held the whole request budget (queued.max.request.bytes) until
// their read timeout, and every other client's requests waited: the issue
// saw a 100 KB produce wait 25 s behind 4 such connections. Large frames
// now draw from a share of the budget that leaves a quarter to small ones.
func TestStalledLargeRequestsLeaveRoomForSmallOnes(t *testing.T) {
	const frame = 4 << 20
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.MaxFrame = frame
		c.QueuedMaxRequestBytes = 2 * frame
		c.RequestReadTimeout = 30 * time.Second
	})
	for range 4 { // each declares 4 MiB, sends 3 MiB and stalls
		c := dial(t, b)
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		msg := binary.BigEndian.AppendUint32(nil, frame)
		msg = append(msg, make([]byte, 3<<20)...)
		go func() { _, _ = c.Write(msg) }()
	}
	time.Sleep(time.Second) // the stalled bytes have arrived
	c := dial(t, b)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // well inside the stalled requests' 30 s
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	if _, err := c.Write(rawFrame(req, 7)); err != nil {
		t.Fatal(err)
	}
	if corr, _ := readResponse(t, c); corr != 7 {
		t.Fatalf("correlation %d", corr)
	}
}
