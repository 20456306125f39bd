package cgroup

import (
	"encoding/json"
	"fmt"
	"testing"
)

// reconciledGroup returns a group of n members on one topic of parts
// partitions, each member owning its share (the state a large group's
// snapshot is written in at every step of its reconciliation).
func reconciledGroup(tb testing.TB, n int, parts int32) *Group {
	tb.Helper()
	f := &fixture{im: NewImage(Topic{"a", topicA, parts}), now: t0}
	cfg := DefaultConfig()
	f.g = New("g", cfg)
	type mem struct {
		epoch int32
		owned []TopicPartitions
	}
	ms := make([]mem, n)
	for round := 0; round < 10; round++ {
		for i := range ms {
			in := HeartbeatInput{Version: 1, MemberID: fmt.Sprintf("member-%d", i), MemberEpoch: ms[i].epoch, RebalanceTimeoutMs: -1,
				OwnedSent: true, OwnedTopicPartitions: ms[i].owned}
			if ms[i].epoch == 0 {
				in.RebalanceTimeoutMs, in.SubscribedTopicNames, in.OwnedTopicPartitions = 10_000, []string{"a"}, []TopicPartitions{}
			}
			res, _ := f.g.Heartbeat(f.now, f.im, in)
			if res.Err != ErrNone {
				tb.Fatalf("heartbeat: %v %s", res.Err, res.ErrMessage)
			}
			ms[i].epoch = res.MemberEpoch
			if res.HasAssignment {
				ms[i].owned = res.Assignment
			}
			if ms[i].owned == nil {
				ms[i].owned = []TopicPartitions{}
			}
		}
	}
	return f.g
}

// BenchmarkSnapshot101 is what the coordinator does under the group's lock
// for each durable write of a 101-member group.
func BenchmarkSnapshot101(b *testing.B) {
	g := reconciledGroup(b, 101, 200)
	b.ReportAllocs()
	for b.Loop() {
		_ = g.Snapshot()
	}
}

// BenchmarkSnapshotEncode101 is the encoding of that snapshot, done
// outside the lock.
func BenchmarkSnapshotEncode101(b *testing.B) {
	s := reconciledGroup(b, 101, 200).Snapshot()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(s); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendSnapshot101(b *testing.B) {
	g := reconciledGroup(b, 101, 200)
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = g.AppendSnapshot(buf[:0])
	}
}

// checkEncoding: AppendSnapshot writes what encoding/json writes of the
// Snapshot, byte for byte.
func (f *fixture) checkEncoding() {
	f.t.Helper()
	want, err := json.Marshal(f.g.Snapshot())
	if err != nil {
		f.t.Fatal(err)
	}
	if got := f.g.AppendSnapshot(nil); string(got) != string(want) {
		f.t.Fatalf("AppendSnapshot differs from encoding/json:\n%s\n%s", got, want)
	}
}

func TestAppendSnapshotEscapesAsEncodingJSON(t *testing.T) {
	f := newFixture(t)
	f.checkEncoding() // no members
	// Each character encoding/json escapes or replaces, alone in a string.
	odd := []string{"lt<", "gt>", "amp&", `dq"`, `bs\`, "nl\n", "ctl\x01", "del\x7f", "e\u00e9", "ls\u2028", "bad\xff", "cut\xc3"}
	for i, s := range odd {
		in := f.joinIn(fmt.Sprintf("m-%d-%s", i, s), "a")
		in.InstanceID = ptr("instance-" + s)
		in.RackID = ptr("rack-" + s)
		in.ClientID, in.ClientHost = "client-"+s, "/127.0.0.1-"+s
		f.ok(in)
		f.checkEncoding()
	}
	re := f.joinIn("regex-member")
	re.SubscribedTopicRegex = ptr(`a|b<"\\`)
	re.SubscribedTopicNames = nil
	f.hb(re) // refused or not, the state is encoded alike
	f.checkEncoding()
}

// BenchmarkAssignJoin100 is the target computed when the 100th member
// joins a balanced group of 99 on 200 partitions.
func BenchmarkAssignJoin100(b *testing.B) {
	im := NewImage(Topic{"a", topicA, 200})
	subs := map[string][]string{}
	for i := range 99 {
		subs[fmt.Sprintf("member-%d", i)] = []string{"a"}
	}
	prev := assignUniform(subs, nil, nil, im)
	subs["member-99"] = []string{"a"}
	b.ReportAllocs()
	for b.Loop() {
		_ = assignUniform(subs, prev, nil, im)
	}
}
