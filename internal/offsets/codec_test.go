package offsets

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestDecodeSpecExample(t *testing.T) {
	d, err := decodeFile([]byte(`{"offsets":{"orders/0":1042,"orders/1":977,"a/b/c/7":5},
 "metadata":{"orders/0":"consumer-1"},
 "fence":{"controller_epoch":3,"assignment_version":57},"future":{"x":[1]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[TP]Offset{
		{"orders", 0}: {Offset: 1042, LeaderEpoch: -1, Metadata: "consumer-1", ExpireTimestamp: -1},
		{"orders", 1}: {Offset: 977, LeaderEpoch: -1, ExpireTimestamp: -1},
		{"a/b/c", 7}:  {Offset: 5, LeaderEpoch: -1, ExpireTimestamp: -1},
	}
	if got := d.st.snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	if d.fence != (Fence{3, 57}) || d.hasGroup {
		t.Fatalf("fence %v group %v", d.fence, d.hasGroup)
	}
	for _, bad := range []string{`{"offsets":{"orders":1}}`, `{"offsets":{"t/-1":1}}`, `{"offsets":{"t/01":1}}`, `{"offsets":{"t/+1":1}}`, `{"offsets":{"t/1":1.5}}`, `[`} {
		if _, err := decodeFile([]byte(bad)); err == nil {
			t.Errorf("decoded %s", bad)
		}
	}
}

func TestEncodeIsValidJSONAndRoundTrips(t *testing.T) {
	var st state
	st.put(TP{"t\"\\\n\x01ü", 0}, entry{offset: 1, leaderEpoch: 3, commitTs: 99, expireTs: -1, metadata: "m\x00\"", set: true})
	st.put(TP{"a/b", 70000}, entry{offset: -1, leaderEpoch: -1, commitTs: 1, expireTs: 5, set: true})
	st.put(TP{"a/b", 2}, entry{offset: 1 << 62, leaderEpoch: -1, expireTs: -1, metadata: validUTF8("\xff\xfe"), set: true})
	data := encodeFile(nil, "g\x00/..", &st, Fence{1, 2}, Retention{}, nil, nil)
	if !json.Valid(data) {
		t.Fatalf("invalid JSON: %s", data)
	}
	d, err := decodeFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if d.group != "g\x00/.." || d.fence != (Fence{1, 2}) || !reflect.DeepEqual(d.st.snapshot(), st.snapshot()) {
		t.Fatalf("round trip: %+v\n%s", d, data)
	}
	if again := encodeFile(nil, d.group, &d.st, d.fence, d.info, d.members, d.txns); !bytes.Equal(again, data) {
		t.Fatalf("not canonical:\n%s\n%s", data, again)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"offsets":{"orders/0":1042,"orders/1":977},"metadata":{"orders/0":"consumer-1"},"fence":{"controller_epoch":3,"assignment_version":57}}`))
	f.Add([]byte(`{"group":"g","offsets":{"a/b/0":1},"details":{"a/b/0":[4,5,6,7]}}`))
	f.Add([]byte(`{"offsets":{"t/5000":1,"t/0":2},"details":{"t/0":[]}}`))
	f.Add([]byte(`{"offsets":{"t/0":1},"membership":{"protocolType":"consumer","protocol":"range","generation":2,"leader":"m",` +
		`"members":[{"memberId":"m","clientId":"c","clientHost":"h","sessionTimeoutMs":1,"rebalanceTimeoutMs":1,` +
		`"protocols":[{"name":"range","metadata":"AAE="}],"assignment":"AQ=="}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := decodeFile(data)
		if err != nil {
			return
		}
		enc := encodeFile(nil, d.group, &d.st, d.fence, d.info, d.members, d.txns)
		d2, err := decodeFile(enc)
		if err != nil {
			t.Fatalf("decode(encode(x)): %v\n%s", err, enc)
		}
		if d2.group != d.group || d2.fence != d.fence || !reflect.DeepEqual(d2.st.snapshot(), d.st.snapshot()) ||
			!reflect.DeepEqual(d2.members, d.members) {
			t.Fatalf("decode(encode(x)) != x\n%s", enc)
		}
		if enc2 := encodeFile(nil, d2.group, &d2.st, d2.fence, d2.info, d2.members, d2.txns); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not canonical")
		}
	})
}

// FuzzFastPathAgrees: whenever the fast group-file parser accepts an input,
// encoding/json reads the same document from it.
func FuzzFastPathAgrees(f *testing.F) {
	var st state
	for p := range 5 {
		st.put(TP{"t/x", int32(p)}, entry{offset: int64(p), leaderEpoch: -1, expireTs: -1, set: true, metadata: "m\u00e9"})
	}
	f.Add(encodeFile(nil, "g", &st, Fence{1, 2}, Retention{}, nil, nil))
	f.Add([]byte(`{"offsets":{"a/0":-9223372036854775808}}`))
	f.Add([]byte(`{"offsets":{"a/0":1.5}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := parseCanonical(b)
		if !ok {
			return
		}
		var slow fileDoc
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&slow); err != nil {
			t.Fatalf("fast path accepted what encoding/json refuses (%v): %q", err, b)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("fast %+v\nslow %+v\ninput %q", fast, slow, b)
		}
	})
}
