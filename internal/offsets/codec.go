package offsets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The group file (docs/offsets.md, "File format"): compact JSON, one object.
//
//	{"group":"g1",
//	 "offsets":{"orders/0":1042,"orders/1":977},
//	 "metadata":{"orders/0":"consumer-1"},
//	 "details":{"orders/0":[4,1723456789000,-1],"orders/1":[-1,1723456789000,-1]},
//	 "fence":{"controller_epoch":3,"assignment_version":57},
//	 "retention":{…},"membership":{…},"pending":[…]}
//
// Keys are "<topic>/<partition>", split at the last '/', the partition in canonical
// decimal (no sign, no leading zero). "offsets" holds every committed offset;
// "metadata" only non-empty metadata; "details" is [leader_epoch,
// commit_timestamp_ms, expire_timestamp_ms] per key (defaults -1, 0, -1 when the
// key or the field is absent); "group" is the group id (needed for hashed file
// names); "fence" is the writer's assignment stamp. Every field but "offsets" may
// be absent, and unknown fields are ignored. The encoder writes topics in byte
// order and partitions ascending, so equal states encode to equal bytes.

type fileFence struct {
	ControllerEpoch   int64 `json:"controller_epoch"`
	AssignmentVersion int64 `json:"assignment_version"`
}

type fileDoc struct {
	Group     *string            `json:"group"`
	Offsets   map[string]int64   `json:"offsets"`
	Metadata  map[string]string  `json:"metadata"`
	Details   map[string][]int64 `json:"details"`
	Fence     *fileFence         `json:"fence"`
	Pending   []pendingDoc       `json:"pending"`
	Retention *retentionDoc      `json:"retention"`
	// Membership is read on its own (decodeMembership), so that a damaged
	// section is ignored without losing the offsets.
	Membership json.RawMessage `json:"membership"`
}

// retentionDoc is what retention needs of the group's membership:
//
//	"retention":{"protocolType":"consumer","emptySince":1723456789000,"subscribed":["orders"]}
//
// emptySince is 0 (or absent) while the group has members; subscribed is
// absent when unknown. The section is absent for a group used for commits
// only.
type retentionDoc struct {
	ProtocolType string   `json:"protocolType"`
	EmptySince   int64    `json:"emptySince"`
	Subscribed   []string `json:"subscribed"`
}

// pendingDoc is one producer's staged transactional offsets:
//
//	"pending":[{"producerId":7,"producerEpoch":0,"transactionalId":"tx-1",
//	            "offsets":{"orders/0":[1042,4,"meta"]}}]
//
// each offset as [offset, leader_epoch, metadata, commit_timestamp_ms] (files
// written before the timestamp was kept have three elements: the store gives
// them the time it loaded the file). The section is absent when nothing is
// staged.
type pendingDoc struct {
	ProducerID      int64                      `json:"producerId"`
	ProducerEpoch   int16                      `json:"producerEpoch"`
	TransactionalID string                     `json:"transactionalId"`
	Offsets         map[string]json.RawMessage `json:"offsets"`
}

// decoded is the content of one group file.
type decoded struct {
	group    string
	hasGroup bool
	st       state
	fence    Fence
	txns     map[int64]Staged
	info     Retention
	members  *Membership
	// membersErr: the membership section was present but unreadable; it
	// is ignored (members is nil) and the offsets are kept.
	membersErr error
}

var errBadKey = errors.New("bad offset key")

func splitKey(k string) (TP, error) {
	i := strings.LastIndexByte(k, '/')
	if i < 0 {
		return TP{}, fmt.Errorf("%w %q", errBadKey, k)
	}
	p, err := strconv.ParseInt(k[i+1:], 10, 32)
	if err != nil || p < 0 || strconv.FormatInt(p, 10) != k[i+1:] {
		return TP{}, fmt.Errorf("%w %q", errBadKey, k)
	}
	return TP{Topic: k[:i], Partition: int32(p)}, nil
}

// decodeFile parses a group file. It never panics; it rejects keys that do not
// parse, so a damaged file is reported rather than silently shortened on the next
// write.
func decodeFile(data []byte) (decoded, error) {
	doc, ok := parseCanonical(data)
	if !ok {
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		if err := d.Decode(&doc); err != nil {
			return decoded{}, err
		}
	}
	var out decoded
	if doc.Group != nil {
		out.group, out.hasGroup = *doc.Group, true
	}
	if doc.Fence != nil {
		out.fence = Fence{doc.Fence.ControllerEpoch, doc.Fence.AssignmentVersion}
	}
	if r := doc.Retention; r != nil {
		out.info = Retention{ProtocolType: r.ProtocolType, EmptySince: r.EmptySince, Subscribed: r.Subscribed}
		if !slices.IsSorted(out.info.Subscribed) {
			slices.Sort(out.info.Subscribed)
		}
	}
	out.members, out.membersErr = decodeMembership(doc.Membership)
	intern := map[string]string{}
	topics := map[string]string{}
	for k, off := range doc.Offsets {
		tp, err := splitKey(k)
		if err != nil {
			return decoded{}, err
		}
		if t, ok := topics[tp.Topic]; ok {
			tp.Topic = t
		} else {
			topics[tp.Topic] = tp.Topic
		}
		e := entry{offset: off, leaderEpoch: -1, expireTs: -1, set: true}
		if m := doc.Metadata[k]; m != "" {
			if s, ok := intern[m]; ok {
				m = s
			} else {
				intern[m] = m
			}
			e.metadata = m
		}
		if det := doc.Details[k]; det != nil {
			if len(det) > 0 {
				if det[0] < -1<<31 || det[0] > 1<<31-1 {
					return decoded{}, fmt.Errorf("leader epoch %d of %q out of range", det[0], k)
				}
				e.leaderEpoch = int32(det[0])
			}
			if len(det) > 1 {
				e.commitTs = det[1]
			}
			if len(det) > 2 {
				e.expireTs = det[2]
			}
		}
		out.st.put(tp, e)
	}
	for _, p := range doc.Pending {
		st := Staged{ProducerEpoch: p.ProducerEpoch, TransactionalID: p.TransactionalID, Offsets: map[TP]Offset{}}
		for k, raw := range p.Offsets {
			tp, err := splitKey(k)
			if err != nil {
				return decoded{}, err
			}
			var fields []json.RawMessage
			if err := json.Unmarshal(raw, &fields); err != nil || len(fields) < 3 || len(fields) > 4 {
				return decoded{}, fmt.Errorf("pending offset %q: %s", k, raw)
			}
			o := Offset{ExpireTimestamp: -1}
			if json.Unmarshal(fields[0], &o.Offset) != nil || json.Unmarshal(fields[1], &o.LeaderEpoch) != nil ||
				json.Unmarshal(fields[2], &o.Metadata) != nil ||
				(len(fields) == 4 && json.Unmarshal(fields[3], &o.CommitTimestamp) != nil) {
				return decoded{}, fmt.Errorf("pending offset %q: %s", k, raw)
			}
			st.Offsets[tp] = o
		}
		if out.txns == nil {
			out.txns = map[int64]Staged{}
		}
		out.txns[p.ProducerID] = st
	}
	return out, nil
}

// stampMissing gives every committed and staged offset without a commit
// timestamp the time nowMs (a file in the spec's format, or written before
// staged offsets kept theirs) and reports whether it gave any: such a time
// is never taken as the epoch, which retention would count as decades old.
func stampMissing(st *state, txns map[int64]Staged, nowMs int64) bool {
	stamped := false
	for _, t := range st.topics {
		t.each(func(_ int32, e *entry) {
			if e.commitTs == 0 {
				e.commitTs, stamped = nowMs, true
			}
		})
	}
	for pid, s := range txns {
		for tp, o := range s.Offsets {
			if o.CommitTimestamp == 0 {
				o.CommitTimestamp, stamped = nowMs, true
				s.Offsets[tp] = o
			}
		}
		txns[pid] = s
	}
	return stamped
}

// appendPending appends the pending section (with its leading comma).
func appendPending(buf []byte, txns map[int64]Staged) []byte {
	buf = append(buf, `,"pending":[`...)
	pids := make([]int64, 0, len(txns))
	for pid := range txns {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for i, pid := range pids {
		st := txns[pid]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"producerId":`...)
		buf = strconv.AppendInt(buf, pid, 10)
		buf = append(buf, `,"producerEpoch":`...)
		buf = strconv.AppendInt(buf, int64(st.ProducerEpoch), 10)
		buf = append(buf, `,"transactionalId":`...)
		buf = appendString(buf, st.TransactionalID)
		buf = append(buf, `,"offsets":{`...)
		keys := make([]TP, 0, len(st.Offsets))
		for tp := range st.Offsets {
			keys = append(keys, tp)
		}
		slices.SortFunc(keys, func(a, b TP) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return int(a.Partition - b.Partition)
		})
		for j, tp := range keys {
			o := st.Offsets[tp]
			if j > 0 {
				buf = append(buf, ',')
			}
			buf = appendString(buf, tp.Topic+"/"+strconv.Itoa(int(tp.Partition)))
			buf = append(buf, ":["...)
			buf = strconv.AppendInt(buf, o.Offset, 10)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, int64(o.LeaderEpoch), 10)
			buf = append(buf, ',')
			buf = appendString(buf, o.Metadata)
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, o.CommitTimestamp, 10)
			buf = append(buf, ']')
		}
		buf = append(buf, "}}"...)
	}
	return append(buf, ']')
}

// appendRetention appends the retention section (with its leading comma).
func appendRetention(buf []byte, r Retention) []byte {
	buf = append(buf, `,"retention":{"protocolType":`...)
	buf = appendString(buf, r.ProtocolType)
	buf = append(buf, `,"emptySince":`...)
	buf = strconv.AppendInt(buf, r.EmptySince, 10)
	if r.Subscribed != nil {
		buf = append(buf, `,"subscribed":[`...)
		for i, t := range r.Subscribed {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendString(buf, t)
		}
		buf = append(buf, ']')
	}
	return append(buf, '}')
}

// encodeFile appends the file of group to buf: its offsets st, the writer's
// fence, the retention section unless info is the zero value, the
// membership section when members is not nil, and the pending section when
// txns is not empty.
func encodeFile(buf []byte, group string, st *state, fence Fence, info Retention, members *Membership, txns map[int64]Staged) []byte {
	buf = append(buf, `{"group":`...)
	buf = appendString(buf, group)
	names := st.sortedTopics()
	var key []byte // escaped topic + '/', rebuilt per topic
	section := func(name string, hasValue func(e *entry) bool, value func(b []byte, e *entry) []byte) {
		buf = append(buf, ',', '"')
		buf = append(buf, name...)
		buf = append(buf, `":{`...)
		first := true
		for _, topic := range names {
			key = appendString(key[:0], topic)
			key[len(key)-1] = '/'
			st.topics[topic].each(func(p int32, e *entry) {
				if !hasValue(e) {
					return
				}
				if !first {
					buf = append(buf, ',')
				}
				first = false
				buf = append(buf, key...)
				buf = strconv.AppendInt(buf, int64(p), 10)
				buf = append(buf, '"', ':')
				buf = value(buf, e)
			})
		}
		buf = append(buf, '}')
	}
	all := func(*entry) bool { return true }
	section("offsets", all, func(b []byte, e *entry) []byte { return strconv.AppendInt(b, e.offset, 10) })
	hasMeta := false
	st.each(func(_ string, _ int32, e *entry) { hasMeta = hasMeta || e.metadata != "" })
	if hasMeta {
		section("metadata", func(e *entry) bool { return e.metadata != "" },
			func(b []byte, e *entry) []byte { return appendString(b, e.metadata) })
	}
	section("details", all, func(b []byte, e *entry) []byte {
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(e.leaderEpoch), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, e.commitTs, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, e.expireTs, 10)
		return append(b, ']')
	})
	buf = append(buf, `,"fence":{"controller_epoch":`...)
	buf = strconv.AppendInt(buf, fence.ControllerEpoch, 10)
	buf = append(buf, `,"assignment_version":`...)
	buf = strconv.AppendInt(buf, fence.AssignmentVersion, 10)
	buf = append(buf, '}')
	if info.ProtocolType != "" || info.EmptySince != 0 || info.Subscribed != nil {
		buf = appendRetention(buf, info)
	}
	if members != nil {
		buf = appendMembership(buf, members)
	}
	if len(txns) > 0 {
		buf = appendPending(buf, txns)
	}
	return append(buf, "}\n"...)
}

// appendString appends s as a JSON string. Invalid UTF-8 bytes are written as
// U+FFFD, each byte on its own, which is what encoding/json does; validUTF8 applies
// the same mapping to in-memory strings so memory and disk agree.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// validUTF8 maps each invalid byte of s to U+FFFD, as appendString does.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString("\ufffd")
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
