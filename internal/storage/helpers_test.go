package storage

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// spec describes a v2 batch for makeBatch.
type spec struct {
	n        int   // records (default 1)
	baseTs   int64 // base timestamp
	tsStep   int64 // timestamp delta between records
	pid      int64 // producer id; 0 means "not idempotent" unless idem is set
	idem     bool
	pepoch   int16
	seq      int32
	codec    int16 // stored as-is: the records are not actually compressed
	value    string
	breakCRC bool
	txn      bool // transactional (attributes bit 4)
}

// makeBatch assembles a magic-v2 batch the way a client would (baseOffset 0,
// partitionLeaderEpoch -1) with uncompressed records.
func makeBatch(s spec) []byte {
	if s.n == 0 {
		s.n = 1
	}
	pid, seq := int64(-1), int32(-1)
	if s.idem {
		pid, seq = s.pid, s.seq
	}
	var recs []byte
	for i := 0; i < s.n; i++ {
		var body []byte
		body = append(body, 0) // attributes
		body = binary.AppendVarint(body, int64(i)*s.tsStep)
		body = binary.AppendVarint(body, int64(i))
		body = binary.AppendVarint(body, -1) // null key
		v := []byte(s.value)
		if len(v) == 0 {
			v = []byte("v")
		}
		body = binary.AppendVarint(body, int64(len(v)))
		body = append(body, v...)
		body = binary.AppendVarint(body, 0) // headers
		recs = binary.AppendVarint(recs, int64(len(body)))
		recs = append(recs, body...)
	}
	b := make([]byte, batchHeaderSize, batchHeaderSize+len(recs))
	be := binary.BigEndian
	be.PutUint32(b[offBatchLength:], uint32(batchHeaderSize-logOverhead+len(recs)))
	be.PutUint32(b[offLeaderEpoch:], 0xffffffff)
	b[offMagic] = 2
	attrs := uint16(s.codec)
	if s.txn {
		attrs |= attrTransactional
	}
	be.PutUint16(b[offAttributes:], attrs)
	be.PutUint32(b[offLastOffsetDelta:], uint32(s.n-1))
	be.PutUint64(b[offBaseTimestamp:], uint64(s.baseTs))
	be.PutUint64(b[offMaxTimestamp:], uint64(s.baseTs+int64(s.n-1)*s.tsStep))
	be.PutUint64(b[offProducerID:], uint64(pid))
	be.PutUint16(b[offProducerEpoch:], uint16(s.pepoch))
	be.PutUint32(b[offBaseSequence:], uint32(seq))
	be.PutUint32(b[offRecordCount:], uint32(s.n))
	b = append(b, recs...)
	crc := crc32.Checksum(b[offAttributes:], castagnoli)
	if s.breakCRC {
		crc++
	}
	be.PutUint32(b[offCRC:], crc)
	return b
}

// fixCRC recomputes the CRC after a test edited a batch.
func fixCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func openT(t testing.TB, dir string, o Options) *Log {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	l, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return l
}

func appendT(t testing.TB, l *Log, b []byte) AppendResult {
	t.Helper()
	r, err := l.Append(b, AppendOptions{})
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return r
}

func syncT(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// crash drops the Log without Close: no sync, no index, no snapshot.
func (l *Log) crash() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.closeFiles()
}

// readAll reads every batch from LogStartOffset to the high watermark.
func readAll(t testing.TB, l *Log) []batchHeader {
	t.Helper()
	var out []batchHeader
	for off := l.LogStartOffset(); off < l.HighWatermark(); {
		b, err := l.Read(off, 1<<20, true)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if len(b) == 0 {
			t.Fatalf("Read(%d) returned nothing below hw %d", off, l.HighWatermark())
		}
		for len(b) > 0 {
			h, err := validateStored(b)
			if err != nil {
				t.Fatalf("Read(%d) returned a bad batch: %v", off, err)
			}
			out = append(out, h)
			off = h.lastOffset() + 1
			b = b[h.size():]
		}
	}
	return out
}

// validateStored checks a batch as read back: framing and CRC.
func validateStored(b []byte) (batchHeader, error) {
	if len(b) < batchHeaderSize {
		return batchHeader{}, errors.New("short")
	}
	h := parseHeader(b)
	if !h.sane() || int64(len(b)) < h.size() {
		return h, errors.New("bad header")
	}
	if batchCRC(b[:h.size()]) != h.CRC {
		return h, errors.New("bad crc")
	}
	return h, nil
}

func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+logSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
