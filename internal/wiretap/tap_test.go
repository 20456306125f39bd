package wiretap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kaas-dev/kaas/internal/testutil"
)

// frameRequest is a request as a client sends it: size, header v1 or v2,
// body.
func frameRequest(corr int32, clientID string, req kmsg.Request) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	if req.IsFlexible() {
		b = append(b, 0) // no tagged fields
	}
	b = req.AppendTo(b)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// frameResponse is an answer as a broker sends it: size, header v0 or v1
// (with tagged fields, here one of 3 bytes to skip), body.
func frameResponse(corr int32, resp kmsg.Response) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(corr))
	if resp.IsFlexible() && resp.Key() != keyApiVersions {
		b = append(b, 1, 5, 3, 'x', 'y', 'z') // one tagged field: tag 5, 3 bytes
	}
	b = resp.AppendTo(b)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// fakeBroker accepts one connection, records every byte it reads, and for
// each request frame writes what answer returns (raw frame bytes).
type fakeBroker struct {
	ln   net.Listener
	mu   sync.Mutex
	got  bytes.Buffer
	done chan struct{}
}

func startFakeBroker(t *testing.T, answer func(key, version int16, corr int32) []byte) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBroker{ln: ln, done: make(chan struct{})}
	t.Cleanup(func() { ln.Close(); <-fb.done })
	go func() {
		defer close(fb.done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for range 100 {
			var size [4]byte
			if _, err := io.ReadFull(c, size[:]); err != nil {
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(size[:]))
			if _, err := io.ReadFull(c, body); err != nil {
				return
			}
			fb.mu.Lock()
			fb.got.Write(size[:])
			fb.got.Write(body)
			fb.mu.Unlock()
			key, version, corr, _ := requestHead(body)
			if out := answer(key, version, corr); out != nil {
				// Written in two pieces: the tap must join them.
				half := len(out) / 2
				if _, err := c.Write(out[:half]); err != nil {
					return
				}
				time.Sleep(5 * time.Millisecond)
				if _, err := c.Write(out[half:]); err != nil {
					return
				}
			}
		}
	}()
	return fb
}

func (fb *fakeBroker) received() []byte {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return bytes.Clone(fb.got.Bytes())
}

type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (e *eventLog) observe(ev Event) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }
func (e *eventLog) list() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.evs...)
}

func startTap(t *testing.T, target string, obs func(Event)) *Tap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tap, err := Start(Config{Listen: addr, Target: target, Broker: 7, Observe: obs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tap.Close)
	return tap
}

// writeSlowly writes b one byte at a time: every frame arrives split
// across many reads.
func writeSlowly(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	for i := range b {
		if _, err := c.Write(b[i : i+1]); err != nil {
			t.Fatal(err)
		}
		if i%16 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

func readFrame(t *testing.T, c net.Conn) []byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	return append(size[:], body...)
}

// TestTapDecodesSplitFramesAndFlexibleHeaders: a flexible JoinGroup and a
// non-flexible SyncGroup, each request written a byte at a time and each
// answer in two writes, pass unchanged both ways; the JoinGroup's answer
// (header v1 with a tagged field to skip) yields its generation, the
// SyncGroup's its request's generation, a Heartbeat its error code; an
// untracked Metadata request passes without a trace.
func TestTapDecodesSplitFramesAndFlexibleHeaders(t *testing.T) {
	join := kmsg.NewPtrJoinGroupResponse()
	join.SetVersion(9)
	join.Generation = 7
	join.MemberID = "m-1"
	syncResp := kmsg.NewPtrSyncGroupResponse()
	syncResp.SetVersion(3)
	hb := kmsg.NewPtrHeartbeatResponse()
	hb.SetVersion(4)
	hb.ErrorCode = 27 // REBALANCE_IN_PROGRESS
	meta := kmsg.NewPtrMetadataResponse()
	meta.SetVersion(12)
	answerTo := func(key int16, corr int32) []byte {
		var r kmsg.Response
		switch key {
		case keyJoinGroup:
			r = join
		case keySyncGroup:
			r = syncResp
		case keyHeartbeat:
			r = hb
		case 3:
			r = meta
		}
		return frameResponse(corr, r)
	}
	fb := startFakeBroker(t, func(key, _ int16, corr int32) []byte { return answerTo(key, corr) })
	var got eventLog
	tap := startTap(t, fb.ln.Addr().String(), got.observe)

	c, err := net.Dial("tcp", tap.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	jr := kmsg.NewPtrJoinGroupRequest()
	jr.SetVersion(9)
	jr.Group, jr.ProtocolType = "g", "consumer"
	sr := kmsg.NewPtrSyncGroupRequest()
	sr.SetVersion(3)
	sr.Group, sr.Generation, sr.MemberID = "g", 7, "m-1"
	hr := kmsg.NewPtrHeartbeatRequest()
	hr.SetVersion(4)
	hr.Group, hr.Generation = "g", 7
	mr := kmsg.NewPtrMetadataRequest()
	mr.SetVersion(12)
	var sent []byte
	for i, req := range []kmsg.Request{jr, sr, mr, hr} {
		f := frameRequest(int32(100+i), "cli", req)
		sent = append(sent, f...)
		writeSlowly(t, c, f)
		if back, want := readFrame(t, c), answerTo(req.Key(), int32(100+i)); !bytes.Equal(back, want) {
			t.Fatalf("%s: answer changed by the tap:\n got %x\nwant %x", kmsg.NameForKey(req.Key()), back, want)
		}
	}
	if !bytes.Equal(fb.received(), sent) {
		t.Fatalf("requests changed by the tap:\n got %x\nwant %x", fb.received(), sent)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := len(got.list()); n != 3 {
			return errors.New("waiting for 3 events")
		}
		return nil
	})
	evs := got.list()
	want := []struct {
		key   int16
		gen   int32
		codes []int16
	}{{keyJoinGroup, 7, nil}, {keySyncGroup, 7, nil}, {keyHeartbeat, -1, []int16{27}}}
	for i, w := range want {
		ev := evs[i]
		if ev.Key != w.key || ev.Generation != w.gen || ev.Group != "g" || ev.ClientID != "cli" || ev.Broker != 7 ||
			len(ev.Codes) != len(w.codes) || (len(w.codes) > 0 && ev.Codes[0] != w.codes[0]) {
			t.Errorf("event %d = %+v, want key %d gen %d codes %v", i, ev, w.key, w.gen, w.codes)
		}
	}
	if n := tap.DecodeFailures(); n != 0 {
		t.Errorf("%d decode failures", n)
	}
}

// TestTapForwardsAnUndecodableAnswer: an answer the tap cannot decode is
// counted and forwarded unchanged, and the connection goes on: the next
// answer on it is decoded.
func TestTapForwardsAnUndecodableAnswer(t *testing.T) {
	garbage := binary.BigEndian.AppendUint32(nil, 6)
	garbage = append(garbage, 0, 0, 0, 1, 0xff, 0xff) // corr 1, then 2 bytes no OffsetCommit v2 body can be
	commit := kmsg.NewPtrOffsetCommitResponse()
	commit.SetVersion(2)
	commit.Topics = []kmsg.OffsetCommitResponseTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitResponseTopicPartition{
		{Partition: 0, ErrorCode: 22}, {Partition: 1, ErrorCode: 22}, {Partition: 2, ErrorCode: 25}}}}
	good := frameResponse(2, commit)
	fb := startFakeBroker(t, func(_, _ int16, corr int32) []byte {
		if corr == 1 {
			return garbage
		}
		return good
	})
	rec := NewRecorder("g", "admin")
	tap := startTap(t, fb.ln.Addr().String(), rec.Observe)
	c, err := net.Dial("tcp", tap.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.SetVersion(2)
	req.Group = "g"
	writeSlowly(t, c, frameRequest(1, "cli", req))
	if back := readFrame(t, c); !bytes.Equal(back, garbage) {
		t.Fatalf("undecodable answer changed: %x", back)
	}
	// The same request from an ignored client id is decoded, not recorded.
	writeSlowly(t, c, frameRequest(2, "admin", req))
	readFrame(t, c)
	writeSlowly(t, c, frameRequest(2, "cli", req))
	if back := readFrame(t, c); !bytes.Equal(back, good) {
		t.Fatalf("answer after the undecodable one changed: %x", back)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if s := rec.Since(time.Time{}); s.Errors[22] != 1 || s.Errors[25] != 1 {
			return errors.New("waiting for the commit's errors")
		}
		return nil
	})
	if n := tap.DecodeFailures(); n != 1 {
		t.Errorf("%d decode failures, want 1", n)
	}
}

// TestDecodeResponseHeaders: a flexible answer's header has tagged fields
// to skip; ApiVersions answers with the v0 header even at a flexible
// version.
func TestDecodeResponseHeaders(t *testing.T) {
	for _, tc := range []struct {
		req  kmsg.Request
		resp kmsg.Response
	}{
		{kmsg.NewPtrFindCoordinatorRequest(), kmsg.NewPtrFindCoordinatorResponse()},
		{kmsg.NewPtrApiVersionsRequest(), kmsg.NewPtrApiVersionsResponse()},
	} {
		tc.req.SetVersion(3)
		tc.resp.SetVersion(3)
		if !tc.resp.IsFlexible() {
			t.Fatalf("%T v3 is not flexible", tc.resp)
		}
		f := frameResponse(9, tc.resp)
		if _, err := decodeResponse(f[4:], call{req: tc.req}); err != nil {
			t.Errorf("%T: %v", tc.resp, err)
		}
	}
}

// TestRecorderCountsRebalancesAfterAMoment: generations completed before
// the moment are the baseline; a generation completed again after it (a
// member keeping its generation) is no rebalance.
func TestRecorderCountsRebalancesAfterAMoment(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rec := NewRecorder("g")
	for _, ev := range []Event{
		{At: t0, Group: "g", Generation: 1},
		{At: t0.Add(2 * time.Second), Group: "g", Generation: 1},
		{At: t0.Add(3 * time.Second), Group: "g", Generation: -1, Codes: []int16{16}},
		{At: t0.Add(4 * time.Second), Group: "g", Generation: 2},
		{At: t0.Add(5 * time.Second), Group: "g", Generation: 2},
		{At: t0.Add(6 * time.Second), Group: "other", Generation: 9},
		{At: t0.Add(7 * time.Second), Group: "g", Generation: 3, Codes: nil},
	} {
		rec.Observe(ev)
	}
	s := rec.Since(t0.Add(time.Second))
	if s.GenBefore != 1 || s.GenAfter != 3 || len(s.Rebalances) != 2 || s.Errors[16] != 1 {
		t.Errorf("summary %+v", s)
	}
	// Up to a moment: the generation formed at 7 s (members leaving at the
	// end of a run) is not counted.
	s = rec.Between(t0.Add(time.Second), t0.Add(7*time.Second))
	if s.GenBefore != 1 || s.GenAfter != 2 || len(s.Rebalances) != 1 || s.Errors[16] != 1 {
		t.Errorf("summary up to 7s %+v", s)
	}
}

// TestSplitterFramesInOneRead: several frames in one read, an empty one
// among them, the kept ones whole and the others skipped.
func TestSplitterFramesInOneRead(t *testing.T) {
	var kept [][]byte
	sp := &splitter{prefix: 1,
		want:  func(h []byte) bool { return len(h) > 0 && h[0] == 'k' },
		frame: func(b []byte) { kept = append(kept, bytes.Clone(b)) },
		fail:  func(err error) { t.Error(err) },
	}
	var stream []byte
	for _, f := range []string{"kone", "skip me", "", "ktwo!", "k"} {
		stream = binary.BigEndian.AppendUint32(stream, uint32(len(f)))
		stream = append(stream, f...)
	}
	sp.feed(stream[:9])
	sp.feed(stream[9:])
	if len(kept) != 3 || string(kept[0]) != "kone" || string(kept[1]) != "ktwo!" || string(kept[2]) != "k" {
		t.Errorf("kept %q", kept)
	}
}
