package offsets

import (
	bytespkg "bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func testMembership() *Membership {
	p := "range"
	return &Membership{ProtocolType: "consumer", Protocol: &p, Generation: 5, Leader: "c-1",
		Members: []Member{
			{ID: "c-1", InstanceID: "i-1", ClientID: "c", ClientHost: "/10.0.0.1", SessionTimeoutMs: 10000,
				RebalanceTimeoutMs: 60000, Protocols: []MemberProtocol{{Name: "range", Metadata: []byte{0, 1, 2}}},
				Assignment: []byte("assigned")},
			{ID: "c-2", ClientID: "c\"<>", ClientHost: "/10.0.0.2", SessionTimeoutMs: 6000, RebalanceTimeoutMs: 6000,
				Protocols: []MemberProtocol{{Name: "range"}, {Name: ""}}},
		}}
}

func setMembership(t *testing.T, s *Store, group string, own Owner, m *Membership) error {
	t.Helper()
	wait, err := s.SetMembership(group, own, m)
	if err != nil {
		return err
	}
	return wait(context.Background())
}

func TestMembershipSectionRoundTripsAndSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	ctx := context.Background()
	if err := s.Commit(ctx, "g", f1, map[TP]Offset{{"orders", 0}: off(7)}); err != nil {
		t.Fatal(err)
	}
	want := testMembership()
	if err := setMembership(t, s, "g", f1, want); err != nil {
		t.Fatal(err)
	}
	// Offsets and membership in one file; a reopened store reads both.
	s2 := open(t, dir, nil)
	got, _, err := s2.GroupState("g", f1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("membership after reopen:\n%+v\nwant\n%+v", got, want)
	}
	if offs, _ := diskState(t, dir, "g"); offs[TP{"orders", 0}].Offset != 7 {
		t.Fatalf("offsets: %v", offs)
	}
	// Canonical: re-encoding the decoded file gives the same bytes.
	data, _ := os.ReadFile(filepath.Join(dir, FileName("g")))
	d, err := decodeFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if again := encodeFile(nil, d.group, &d.st, d.fence, d.info, d.members, d.txns); string(again) != string(data) {
		t.Fatalf("not canonical:\n%s\n%s", data, again)
	}
	// A commit keeps the membership; nil removes the section.
	if err := s2.Commit(ctx, "g", f1, map[TP]Offset{{"orders", 1}: off(8)}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s2.GroupState("g", f1); !reflect.DeepEqual(got, want) {
		t.Fatalf("membership after a commit: %+v", got)
	}
	if err := setMembership(t, s2, "g", f1, nil); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := open(t, dir, nil).GroupState("g", f1); got != nil {
		t.Fatalf("membership after removal: %+v", got)
	}
}

// A reader that knows only the offsets fields (the spec's format, §6) reads
// a file with the membership section; a file without the section loads as
// before, with no membership.
func TestMembershipSectionAndOffsetsOnlyReadersAgree(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	if err := s.Commit(context.Background(), "new", f1, map[TP]Offset{{"orders", 0}: off(42)}); err != nil {
		t.Fatal(err)
	}
	if err := setMembership(t, s, "new", f1, testMembership()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, FileName("new")))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Offsets  map[string]int64  `json:"offsets"`
		Metadata map[string]string `json:"metadata"`
		Fence    struct {
			ControllerEpoch   int64 `json:"controller_epoch"`
			AssignmentVersion int64 `json:"assignment_version"`
		} `json:"fence"`
	}
	dec := json.NewDecoder(bytespkg.NewReader(data))
	dec.DisallowUnknownFields() // not what a reader does; only to show the section is a new field
	if err := dec.Decode(&spec); err == nil {
		t.Fatal("the membership section is not in the file")
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("an offsets-only reader cannot read the file: %v", err)
	}
	if spec.Offsets["orders/0"] != 42 || spec.Fence.ControllerEpoch != 1 {
		t.Fatalf("offsets-only reader: %+v", spec)
	}

	legacy := `{"offsets":{"orders/0":1042},"metadata":{"orders/0":"consumer-1"},"fence":{"controller_epoch":1,"assignment_version":1}}`
	if err := os.WriteFile(filepath.Join(dir, "legacy.json"), []byte(legacy), 0o644); err != nil {
		t.Fatal(err)
	}
	m, info, err := s.GroupState("legacy", f1)
	if err != nil || m != nil || info.ProtocolType != "" {
		t.Fatalf("old file: membership %+v %+v %v", m, info, err)
	}
	if offs, err := s.Load("legacy", f1); err != nil || offs[TP{"orders", 0}].Offset != 1042 {
		t.Fatalf("old file offsets: %v %v", offs, err)
	}
}

func TestCorruptMembershipSectionIsIgnoredAndLosesNoOffsets(t *testing.T) {
	for name, section := range map[string]string{
		"wrong types":  `{"generation":"five","members":{}}`,
		"bad base64":   `{"protocolType":"consumer","members":[{"memberId":"m","assignment":"%%%"}]}`,
		"not a object": `[1,2,3]`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := `{"group":"g","offsets":{"orders/0":10,"orders/1":11},"fence":{"controller_epoch":1,"assignment_version":1},"membership":` + section + `}`
			if err := os.WriteFile(filepath.Join(dir, FileName("g")), []byte(file), 0o644); err != nil {
				t.Fatal(err)
			}
			s := open(t, dir, nil)
			m, _, err := s.GroupState("g", f1)
			if err != nil || m != nil {
				t.Fatalf("damaged section: membership %+v, err %v", m, err)
			}
			if err := s.Commit(context.Background(), "g", f1, map[TP]Offset{{"orders", 2}: off(12)}); err != nil {
				t.Fatal(err)
			}
			offs, _ := diskState(t, dir, "g")
			if len(offs) != 3 || offs[TP{"orders", 0}].Offset != 10 || offs[TP{"orders", 1}].Offset != 11 {
				t.Fatalf("offsets after the damaged section was ignored: %v", offs)
			}
		})
	}
	// A file that is not JSON at all is an error, and nothing rewrites it.
	dir := t.TempDir()
	broken := `{"offsets":{"orders/0":10},"membership":{"members":[`
	path := filepath.Join(dir, FileName("g"))
	if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir, nil)
	if _, _, err := s.GroupState("g", f1); err == nil {
		t.Fatal("a truncated file read without error")
	}
	if err := setMembership(t, s, "g", f1, testMembership()); err == nil {
		t.Fatal("a membership write over an unreadable file succeeded")
	}
	if data, _ := os.ReadFile(path); string(data) != broken {
		t.Fatalf("unreadable file rewritten: %s", data)
	}
}

func TestMembershipWriteFencedByANewerOwner(t *testing.T) {
	dir := t.TempDir()
	old, cur := open(t, dir, nil), open(t, dir, nil)
	if err := setMembership(t, old, "g", Fence{1, 1}, testMembership()); err != nil {
		t.Fatal(err)
	}
	// The new owner writes under a newer stamp; the old one, still holding
	// the group in memory, tries to write membership and is refused.
	if err := cur.Commit(context.Background(), "g", Fence{1, 2}, map[TP]Offset{{"orders", 0}: off(1)}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, FileName("g")))
	stale := testMembership()
	stale.Generation = 9
	if err := setMembership(t, old, "g", Fence{1, 1}, stale); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale owner's membership write: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, FileName("g"))); string(after) != string(before) {
		t.Fatalf("file changed by a fenced owner:\n%s\n%s", before, after)
	}
}

// TestConsumerGroupSectionIsWrittenAsEncodingJSONWouldWriteIt: the
// consumer group state is appended as it is, without encoding/json's scan,
// and the section is byte for byte what encoding/json gives, and reads
// back to the same state.
func TestConsumerGroupSectionIsWrittenAsEncodingJSONWouldWriteIt(t *testing.T) {
	state, err := json.Marshal(map[string]any{"epoch": 7, "members": []any{map[string]any{"id": "m<1>&\"", "epoch": 7}}})
	if err != nil {
		t.Fatal(err)
	}
	m := &Membership{ProtocolType: "consumer", Generation: 7, Consumer: state}
	want, err := json.Marshal(membershipDoc{ProtocolType: "consumer", Generation: 7, Members: []memberDoc{}, ConsumerGroup: state})
	if err != nil {
		t.Fatal(err)
	}
	got := appendMembership(nil, m)
	if string(got) != `,"membership":`+string(want) {
		t.Fatalf("section differs from encoding/json:\n%s\n,\"membership\":%s", got, want)
	}
	var doc membershipDoc
	if err := json.Unmarshal(got[len(`,"membership":`):], &doc); err != nil {
		t.Fatal(err)
	}
	if string(doc.ConsumerGroup) != string(state) {
		t.Fatalf("read back %s, want %s", doc.ConsumerGroup, state)
	}
	// A classic group's section has no consumer group state.
	if b := appendMembership(nil, testMembership()); bytespkg.Contains(b, []byte("consumerGroup")) {
		t.Fatalf("classic section names a consumer group: %s", b)
	}
}
