package wiretap

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The group APIs whose answers are reported, by key. Each answer's error
// codes are read where that API puts them: top level, per member, per
// partition, per coordinator key or per group.
const (
	keyOffsetCommit    = 8
	keyOffsetFetch     = 9
	keyFindCoordinator = 10
	keyJoinGroup       = 11
	keyHeartbeat       = 12
	keyLeaveGroup      = 13
	keySyncGroup       = 14
	keyApiVersions     = 18
	keyTxnOffsetCommit = 28
	// keyConsumerGroupHeartbeat is KIP-848's heartbeat: a member epoch in
	// a successful answer plays the part of a generation.
	keyConsumerGroupHeartbeat = 68
)

// tracked reports whether answers to key are decoded.
func tracked(key int16) bool {
	switch key {
	case keyOffsetCommit, keyOffsetFetch, keyFindCoordinator, keyJoinGroup,
		keyHeartbeat, keyLeaveGroup, keySyncGroup, keyTxnOffsetCommit, keyConsumerGroupHeartbeat:
		return true
	}
	return false
}

// call is a tracked request waiting for its answer.
type call struct {
	req      kmsg.Request
	clientID string
}

var errShort = errors.New("wiretap: frame shorter than its header")

// requestHead reads the fixed start of a request frame (size excluded):
// api key, api version, correlation id.
func requestHead(b []byte) (key, version int16, corr int32, ok bool) {
	if len(b) < 8 {
		return 0, 0, 0, false
	}
	return int16(binary.BigEndian.Uint16(b)), int16(binary.BigEndian.Uint16(b[2:])), int32(binary.BigEndian.Uint32(b[4:])), true
}

// decodeRequest parses a whole tracked request frame (size excluded):
// header v1 (key, version, correlation id, nullable client id) or, for a
// flexible version, v2 (the same and tagged fields), then the body.
func decodeRequest(b []byte) (corr int32, c call, err error) {
	key, version, corr, ok := requestHead(b)
	if !ok {
		return 0, call{}, errShort
	}
	req := kmsg.RequestForKey(key)
	if req == nil {
		return corr, call{}, fmt.Errorf("wiretap: request key %d unknown to kmsg", key)
	}
	req.SetVersion(version)
	rest := b[8:]
	if len(rest) < 2 {
		return corr, call{}, errShort
	}
	n := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	var clientID string
	if n >= 0 {
		if len(rest) < int(n) {
			return corr, call{}, errShort
		}
		clientID, rest = string(rest[:n]), rest[n:]
	}
	if req.IsFlexible() {
		if rest, err = skipTags(rest); err != nil {
			return corr, call{}, err
		}
	}
	if err := req.ReadFrom(rest); err != nil {
		return corr, call{}, fmt.Errorf("wiretap: %s v%d request: %w", kmsg.NameForKey(key), version, err)
	}
	return corr, call{req: req, clientID: clientID}, nil
}

// decodeResponse parses a whole response frame (size excluded) to the
// request c: header v0 (correlation id) or, when the response version is
// flexible, v1 (and tagged fields) — except ApiVersions, whose answer
// always has the v0 header so that a client that sent a version the broker
// does not know can read it.
func decodeResponse(b []byte, c call) (kmsg.Response, error) {
	if len(b) < 4 {
		return nil, errShort
	}
	resp := c.req.ResponseKind()
	resp.SetVersion(c.req.GetVersion())
	rest := b[4:]
	if resp.IsFlexible() && resp.Key() != keyApiVersions {
		var err error
		if rest, err = skipTags(rest); err != nil {
			return nil, err
		}
	}
	if err := resp.ReadFrom(rest); err != nil {
		return nil, fmt.Errorf("wiretap: %s v%d response: %w", kmsg.NameForKey(resp.Key()), resp.GetVersion(), err)
	}
	return resp, nil
}

// skipTags skips a tagged-field section: a count, then per field a tag, a
// size and that many bytes (all unsigned varints but the bytes).
func skipTags(b []byte) ([]byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, errors.New("wiretap: bad tagged-field count")
	}
	b = b[w:]
	for range n {
		if _, w = binary.Uvarint(b); w <= 0 {
			return nil, errors.New("wiretap: bad tag")
		}
		b = b[w:]
		size, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < size {
			return nil, errors.New("wiretap: bad tagged field size")
		}
		b = b[w+int(size):]
	}
	return b, nil
}

// events turns one answered group request into what it says about each
// group it names: the error codes it carries (each distinct code once; 0
// left out) and, for a JoinGroup or SyncGroup answered without error, the
// generation it completed.
func events(req kmsg.Request, resp kmsg.Response) []Event {
	one := func(group string, gen int32, codes ...int16) []Event {
		return []Event{{Group: group, Generation: gen, Codes: distinct(codes)}}
	}
	switch q := req.(type) {
	case *kmsg.JoinGroupRequest:
		r := resp.(*kmsg.JoinGroupResponse)
		gen := int32(-1)
		if r.ErrorCode == 0 {
			gen = r.Generation
		}
		return one(q.Group, gen, r.ErrorCode)
	case *kmsg.SyncGroupRequest:
		r := resp.(*kmsg.SyncGroupResponse)
		gen := int32(-1)
		if r.ErrorCode == 0 {
			gen = q.Generation
		}
		return one(q.Group, gen, r.ErrorCode)
	case *kmsg.HeartbeatRequest:
		return one(q.Group, -1, resp.(*kmsg.HeartbeatResponse).ErrorCode)
	case *kmsg.ConsumerGroupHeartbeatRequest:
		r := resp.(*kmsg.ConsumerGroupHeartbeatResponse)
		gen := int32(-1)
		if r.ErrorCode == 0 && r.MemberEpoch > 0 {
			gen = r.MemberEpoch
		}
		return one(q.Group, gen, r.ErrorCode)
	case *kmsg.LeaveGroupRequest:
		r := resp.(*kmsg.LeaveGroupResponse)
		codes := []int16{r.ErrorCode}
		for _, m := range r.Members {
			codes = append(codes, m.ErrorCode)
		}
		return one(q.Group, -1, codes...)
	case *kmsg.OffsetCommitRequest:
		var codes []int16
		for _, t := range resp.(*kmsg.OffsetCommitResponse).Topics {
			for _, p := range t.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
		return one(q.Group, -1, codes...)
	case *kmsg.TxnOffsetCommitRequest:
		var codes []int16
		for _, t := range resp.(*kmsg.TxnOffsetCommitResponse).Topics {
			for _, p := range t.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
		return one(q.Group, -1, codes...)
	case *kmsg.OffsetFetchRequest:
		r := resp.(*kmsg.OffsetFetchResponse)
		if len(q.Groups) == 0 { // v0-v7: one group
			codes := []int16{r.ErrorCode}
			for _, t := range r.Topics {
				for _, p := range t.Partitions {
					codes = append(codes, p.ErrorCode)
				}
			}
			return one(q.Group, -1, codes...)
		}
		var out []Event
		for _, g := range r.Groups {
			codes := []int16{g.ErrorCode}
			for _, t := range g.Topics {
				for _, p := range t.Partitions {
					codes = append(codes, p.ErrorCode)
				}
			}
			out = append(out, one(g.Group, -1, codes...)...)
		}
		return out
	case *kmsg.FindCoordinatorRequest:
		if q.CoordinatorType != 0 { // a transactional id, not a group
			return nil
		}
		r := resp.(*kmsg.FindCoordinatorResponse)
		if len(r.Coordinators) == 0 { // v0-v3: one key
			return one(q.CoordinatorKey, -1, r.ErrorCode)
		}
		var out []Event
		for _, c := range r.Coordinators {
			out = append(out, one(c.Key, -1, c.ErrorCode)...)
		}
		return out
	}
	return nil
}

func distinct(codes []int16) []int16 {
	var out []int16
	for _, c := range codes {
		if c == 0 {
			continue
		}
		dup := false
		for _, o := range out {
			dup = dup || o == c
		}
		if !dup {
			out = append(out, c)
		}
	}
	return out
}
