package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/testutil"
)

func TestAppendReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := openT(t, dir, Options{LeaderEpoch: 3})
	var sent [][]byte
	for i := 0; i < 10; i++ {
		b := makeBatch(spec{n: i + 1, baseTs: 1000 + int64(i)})
		r := appendT(t, l, b)
		if r.BaseOffset != int64(i*(i+1)/2) || r.LastOffset != r.BaseOffset+int64(i) || r.LogAppendTime != -1 {
			t.Fatalf("batch %d: result %+v", i, r)
		}
		sent = append(sent, b)
	}
	if l.HighWatermark() != 0 || l.EndOffset() != 55 {
		t.Fatalf("before sync: hw %d leo %d", l.HighWatermark(), l.EndOffset())
	}
	if b, err := l.Read(0, 1<<20, true); err != nil || len(b) != 0 {
		t.Fatalf("read before sync: %d bytes, %v", len(b), err)
	}
	syncT(t, l)
	if l.HighWatermark() != 55 {
		t.Fatalf("hw %d after sync", l.HighWatermark())
	}
	got := readAll(t, l)
	if len(got) != 10 {
		t.Fatalf("read %d batches", len(got))
	}
	for i, h := range got {
		if h.LeaderEpoch != 3 || h.RecordCount != int32(i+1) {
			t.Fatalf("batch %d: %+v", i, h)
		}
	}
	// The stored bytes are the sent bytes with base offset and epoch rewritten.
	b, _ := l.Read(3, 1<<20, true)
	want := append([]byte(nil), sent[2]...)
	copy(want, b[:offMagic])
	if !bytes.Equal(b[:len(want)], want) {
		t.Fatalf("stored batch differs from the sent one beyond offset/epoch")
	}
	// maxBytes and minOne.
	if b, _ := l.Read(0, 10, false); len(b) != 0 {
		t.Fatalf("minOne=false returned %d bytes", len(b))
	}
	if b, _ := l.Read(0, 10, true); int64(len(b)) != parseHeader(b).size() {
		t.Fatalf("minOne=true returned %d bytes", len(b))
	}
	for _, tc := range []struct {
		off  int64
		want error
	}{{-1, ErrOffsetOutOfRange}, {56, ErrOffsetOutOfRange}, {55, nil}} {
		b, err := l.Read(tc.off, 100, true)
		if !errors.Is(err, tc.want) || len(b) != 0 {
			t.Errorf("Read(%d) = %d bytes, %v; want %v", tc.off, len(b), err, tc.want)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(makeBatch(spec{}), AppendOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	l = openT(t, dir, Options{LeaderEpoch: 3})
	defer l.Close()
	if l.EndOffset() != 55 || l.HighWatermark() != 55 || len(readAll(t, l)) != 10 {
		t.Fatalf("after reopen: leo %d hw %d", l.EndOffset(), l.HighWatermark())
	}
	if r := appendT(t, l, makeBatch(spec{})); r.BaseOffset != 55 {
		t.Fatalf("append after reopen at %d", r.BaseOffset)
	}
}

func TestAppendValidation(t *testing.T) {
	good := makeBatch(spec{n: 3})
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	big := makeBatch(spec{n: 1, value: string(make([]byte, 2000))})
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrInvalidRecord},
		{"short", good[:10], ErrCorrupt},
		{"length past end", good[:len(good)-1], ErrCorrupt},
		{"negative length", mut(func(b []byte) []byte { b[offBatchLength] = 0xff; return b }), ErrCorrupt},
		{"magic 1", mut(func(b []byte) []byte { b[offMagic] = 1; return b }), ErrUnsupportedMagic},
		{"magic 0", mut(func(b []byte) []byte { b[offMagic] = 0; return b }), ErrUnsupportedMagic},
		{"bad crc", makeBatch(spec{breakCRC: true}), ErrCorrupt},
		{"flipped record byte", mut(func(b []byte) []byte { b[len(b)-2] ^= 1; return b }), ErrCorrupt},
		{"zero records", mut(func(b []byte) []byte {
			b[offRecordCount+3], b[offLastOffsetDelta+3] = 0, 0xff
			b[offLastOffsetDelta], b[offLastOffsetDelta+1], b[offLastOffsetDelta+2] = 0xff, 0xff, 0xff
			return fixCRC(b)
		}), ErrInvalidRecord},
		{"lastOffsetDelta mismatch", mut(func(b []byte) []byte { b[offLastOffsetDelta+3] = 5; return fixCRC(b) }), ErrInvalidRecord},
		{"record count mismatch", mut(func(b []byte) []byte { b[offRecordCount+3] = 4; b[offLastOffsetDelta+3] = 3; return fixCRC(b) }), ErrInvalidRecord},
		{"control batch", mut(func(b []byte) []byte { b[offAttributes+1] |= attrControl; return fixCRC(b) }), ErrInvalidRecord},
		{"codec 6", mut(func(b []byte) []byte { b[offAttributes+1] |= 6; return fixCRC(b) }), ErrInvalidRecord},
		{"too large", big, ErrTooLarge},
		{"trailing garbage", append(append([]byte(nil), good...), 1, 2, 3), ErrCorrupt},
		{"second batch bad", append(append([]byte(nil), good...), makeBatch(spec{breakCRC: true})...), ErrCorrupt},
		{"second batch v1", append(append([]byte(nil), good...), mut(func(b []byte) []byte { b[offMagic] = 1; return b })...), ErrUnsupportedMagic},
	}
	l := openT(t, t.TempDir(), Options{MaxMessageBytes: 1000})
	defer l.Close()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Append(tc.in, AppendOptions{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if l.EndOffset() != 0 {
				t.Fatalf("a rejected request moved the log end to %d", l.EndOffset())
			}
		})
	}
	// A compressed batch is stored as-is (its records are opaque).
	if _, err := l.Append(makeBatch(spec{n: 2, codec: 4}), AppendOptions{}); err != nil {
		t.Fatalf("zstd batch: %v", err)
	}
	r := appendT(t, l, append(makeBatch(spec{n: 2}), makeBatch(spec{n: 3})...))
	if r.BaseOffset != 2 || r.LastOffset != 6 {
		t.Fatalf("two-batch request: %+v", r)
	}
}

func TestLogAppendTime(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	l := openT(t, t.TempDir(), Options{Now: func() time.Time { return now }})
	defer l.Close()
	r, err := l.Append(makeBatch(spec{n: 2, baseTs: 5}), AppendOptions{LogAppendTime: true})
	if err != nil || r.LogAppendTime != now.UnixMilli() {
		t.Fatalf("append: %+v %v", r, err)
	}
	syncT(t, l)
	h := readAll(t, l)[0] // readAll checks the recomputed CRC
	if !h.logAppendTime() || h.MaxTimestamp != now.UnixMilli() {
		t.Fatalf("stored header %+v", h)
	}
}

func TestHighWatermarkAndWait(t *testing.T) {
	l := openT(t, t.TempDir(), Options{})
	defer l.Close()
	ch := l.Wait()
	appendT(t, l, makeBatch(spec{}))
	select {
	case <-ch:
		t.Fatal("Wait fired before any fsync")
	default:
	}
	if l.HighWatermark() != 0 {
		t.Fatal("hw moved without fsync")
	}
	syncT(t, l)
	select {
	case <-ch:
	default:
		t.Fatal("Wait did not fire on advance")
	}
	ch2 := l.Wait()
	syncT(t, l) // nothing new: no advance
	select {
	case <-ch2:
		t.Fatal("Wait fired without an advance")
	default:
	}
	appendT(t, l, makeBatch(spec{}))
	syncT(t, l)
	<-ch2
	ch3 := l.Wait()
	l.Close()
	<-ch3
	<-l.Wait()
}

// TestGroupCommit parks the first fsync, lets many appenders pile up behind it
// and checks that one more fsync covers all of them.
func TestGroupCommit(t *testing.T) {
	l := openT(t, t.TempDir(), Options{})
	defer l.Close()
	release := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	l.syncHook = func() { once.Do(func() { close(entered); <-release }) }

	appendT(t, l, makeBatch(spec{}))
	first := make(chan error)
	go func() { first <- l.Sync() }()
	<-entered

	const n = 20
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			if _, err := l.Append(makeBatch(spec{}), AppendOptions{}); err != nil {
				errs <- err
				return
			}
			errs <- l.Sync()
		}()
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if w := l.syncWait.Load(); w != n {
			return fmt.Errorf("%d of %d callers waiting", w, n)
		}
		return nil
	})
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := l.fsyncs.Load(); got != 2 {
		t.Fatalf("%d fsyncs for %d appends, want 2", got, n+1)
	}
	if l.HighWatermark() != n+1 {
		t.Fatalf("hw %d", l.HighWatermark())
	}
}

func TestConcurrentAppendSyncRead(t *testing.T) {
	l := openT(t, t.TempDir(), Options{SegmentBytes: 4096, indexInterval: 256})
	defer l.Close()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, err := l.Append(makeBatch(spec{n: 3}), AppendOptions{}); err != nil {
					t.Error(err)
					return
				}
				if err := l.Sync(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // a reader following the high watermark
		defer wg.Done()
		off := int64(0)
		for off < 600 {
			select {
			case <-l.Wait():
			case <-time.After(5 * time.Second):
				t.Error("reader starved")
				return
			}
			for off < l.HighWatermark() {
				b, err := l.Read(off, 1000, true)
				if err != nil {
					t.Error(err)
					return
				}
				for len(b) > 0 {
					h, err := validateStored(b)
					if err != nil || h.BaseOffset != off {
						t.Errorf("at %d: %+v %v", off, h, err)
						return
					}
					off = h.lastOffset() + 1
					b = b[h.size():]
				}
			}
		}
	}()
	wg.Wait()
	if l.HighWatermark() != 600 {
		t.Fatalf("hw %d", l.HighWatermark())
	}
}

func TestSegmentsAndIndex(t *testing.T) {
	dir := t.TempDir()
	o := Options{SegmentBytes: 2000, indexInterval: 300}
	l := openT(t, dir, o)
	for i := 0; i < 100; i++ {
		appendT(t, l, makeBatch(spec{n: 1 + i%4, baseTs: int64(i) * 10}))
	}
	syncT(t, l)
	end := l.EndOffset()
	check := func(l *Log) {
		t.Helper()
		for off := int64(0); off < end; off++ {
			b, err := l.Read(off, 1, true)
			if err != nil {
				t.Fatalf("Read(%d): %v", off, err)
			}
			h := parseHeader(b)
			if h.BaseOffset > off || h.lastOffset() < off {
				t.Fatalf("Read(%d) returned batch %d..%d", off, h.BaseOffset, h.lastOffset())
			}
		}
	}
	check(l)
	if n := len(segmentFiles(t, dir)); n < 5 {
		t.Fatalf("only %d segments", n)
	}
	l.Close()
	l = openT(t, dir, o)
	check(l)
	l.Close()
	// Broken and missing indexes are rebuilt.
	idx, _ := filepath.Glob(filepath.Join(dir, "*"+indexSuffix))
	os.Remove(idx[0])
	os.WriteFile(idx[1], []byte("garbage that is not 24-aligned"), 0o644)
	os.WriteFile(idx[2], encodeIndex([]indexEntry{{offset: 7, pos: 0, maxTsBefore: math.MinInt64}}), 0o644)
	l = openT(t, dir, o)
	defer l.Close()
	check(l)
	if l.EndOffset() != end {
		t.Fatalf("end %d after index rebuild, want %d", l.EndOffset(), end)
	}
}

func TestTimestamps(t *testing.T) {
	l := openT(t, t.TempDir(), Options{SegmentBytes: 600, indexInterval: 100})
	defer l.Close()
	if _, _, ok := l.MaxTimestamp(); ok {
		t.Fatal("max timestamp of an empty log")
	}
	// Batch i holds 3 records with timestamps 100i, 100i+10, 100i+20 at offsets 3i..3i+2.
	for i := 0; i < 20; i++ {
		appendT(t, l, makeBatch(spec{n: 3, baseTs: int64(i) * 100, tsStep: 10}))
	}
	appendT(t, l, makeBatch(spec{n: 2, baseTs: 5000, codec: 1})) // offsets 60, 61 compressed
	appendT(t, l, makeBatch(spec{n: 1, baseTs: 50}))             // offset 62, out of order
	if _, _, _, ok := l.OffsetForTimestamp(0); ok {
		t.Fatal("found a timestamp before any sync")
	}
	syncT(t, l)
	for _, tc := range []struct {
		ts, off, gotTs int64
		ok             bool
	}{
		{-5, 0, 0, true}, {0, 0, 0, true}, {5, 1, 10, true}, {110, 4, 110, true},
		{115, 5, 120, true}, {121, 6, 200, true}, {1920, 59, 1920, true},
		{1921, 60, 5000, true}, {5000, 60, 5000, true}, {5001, 0, 0, false},
	} {
		off, ts, ep, ok := l.OffsetForTimestamp(tc.ts)
		if ok != tc.ok || (ok && (off != tc.off || ts != tc.gotTs || ep != 0)) {
			t.Errorf("OffsetForTimestamp(%d) = %d, %d, %d, %v; want %d, %d, %v", tc.ts, off, ts, ep, ok, tc.off, tc.gotTs, tc.ok)
		}
	}
	if off, ts, ok := l.MaxTimestamp(); !ok || off != 60 || ts != 5000 {
		t.Fatalf("MaxTimestamp = %d, %d, %v", off, ts, ok)
	}
	// Not yet durable: invisible.
	appendT(t, l, makeBatch(spec{n: 1, baseTs: 9000}))
	if off, ts, _ := l.MaxTimestamp(); off != 60 || ts != 5000 {
		t.Fatalf("MaxTimestamp saw an unsynced batch: %d %d", off, ts)
	}
	syncT(t, l)
	if off, ts, _ := l.MaxTimestamp(); off != 63 || ts != 9000 {
		t.Fatalf("MaxTimestamp = %d %d", off, ts)
	}
}

func TestRetention(t *testing.T) {
	dir := t.TempDir()
	now := time.UnixMilli(1_000_000)
	clock := func() time.Time { return now }
	o := Options{SegmentBytes: 500, RetentionMs: -1, RetentionBytes: -1, Now: clock}
	l := openT(t, dir, o)
	for i := 0; i < 30; i++ {
		appendT(t, l, makeBatch(spec{n: 2, baseTs: int64(i) * 1000}))
	}
	if n, err := l.EnforceRetention(); n != 0 || err != nil {
		t.Fatalf("retention with no limits: %d %v", n, err)
	}
	// Segments above the high watermark are never deleted.
	l.SetOptions(Options{SegmentBytes: 500, RetentionMs: 0, RetentionBytes: -1})
	if n, _ := l.EnforceRetention(); n != 0 {
		t.Fatalf("deleted %d unsynced segments", n)
	}
	syncT(t, l)
	segs := len(segmentFiles(t, dir))
	// By time: records up to ts 9999 are older than 1_000_000-990_000.
	l.SetOptions(Options{SegmentBytes: 500, RetentionMs: 990_000, RetentionBytes: -1})
	n, err := l.EnforceRetention()
	if err != nil || n == 0 {
		t.Fatalf("time retention: %d %v", n, err)
	}
	lso := l.LogStartOffset()
	if lso == 0 || lso > 20 {
		t.Fatalf("lso %d", lso)
	}
	if _, err := l.Read(lso-1, 100, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below lso: %v", err)
	}
	if _, err := l.Read(lso, 100, true); err != nil {
		t.Fatalf("read at lso: %v", err)
	}
	// By size: keep at most ~1000 bytes.
	l.SetOptions(Options{SegmentBytes: 500, RetentionMs: -1, RetentionBytes: 1000})
	n2, err := l.EnforceRetention()
	if err != nil || n2 == 0 {
		t.Fatalf("size retention: %d %v", n2, err)
	}
	if got := len(segmentFiles(t, dir)); got != segs-n-n2 || got > 4 {
		t.Fatalf("%d segments left (had %d, deleted %d+%d)", got, segs, n, n2)
	}
	lso = l.LogStartOffset()
	if r := appendT(t, l, makeBatch(spec{})); r.LogStartOffset != lso {
		t.Fatalf("append reports lso %d, want %d", r.LogStartOffset, lso)
	}
	syncT(t, l)
	l.Close()
	l = openT(t, dir, o)
	defer l.Close()
	if l.LogStartOffset() != lso || l.EndOffset() != 61 {
		t.Fatalf("after reopen: lso %d (want %d) end %d", l.LogStartOffset(), lso, l.EndOffset())
	}
	if _, err := l.Read(lso-1, 100, true); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below lso after reopen: %v", err)
	}
}

func TestRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "topic", "0")
	l := openT(t, dir, Options{})
	appendT(t, l, makeBatch(spec{}))
	l.Close()
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir still there: %v", err)
	}
}
