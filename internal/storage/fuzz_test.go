package storage

import (
	"bytes"
	"testing"
)

// FuzzAppend feeds arbitrary bytes to Append, followed by a valid batch, on
// one log per fuzz process: it must never panic, must accept or refuse the
// request whole, and the active segment on disk must always scan as a valid
// log ending at EndOffset (nothing torn, nothing foreign). TestFuzzSeedsReopen
// covers reopening after such appends.
func FuzzAppend(f *testing.F) {
	good := makeBatch(spec{n: 3, baseTs: 10, tsStep: 1})
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	var l *Log
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, in []byte) {
		if l == nil {
			var err error
			if l, err = Open(dir, Options{MaxMessageBytes: 4096, SegmentBytes: 64 << 10}); err != nil {
				t.Fatal(err)
			}
		}
		checkFuzzAppend(t, l, in, good)
	})
}

func fuzzSeeds() [][]byte {
	good := makeBatch(spec{n: 3, baseTs: 10, tsStep: 1})
	return [][]byte{
		good,
		append(append([]byte(nil), good...), good...),
		makeBatch(spec{breakCRC: true}),
		good[:40],
		makeBatch(spec{n: 2, codec: 3, idem: true, pid: 1, seq: 0}),
		{},
	}
}

func checkFuzzAppend(t *testing.T, l *Log, in, good []byte) {
	before := l.EndOffset()
	r, err := l.Append(in, AppendOptions{})
	if err != nil && l.EndOffset() != before {
		t.Fatalf("refused request moved the log end: %v", err)
	}
	if err == nil && !r.Duplicate && (r.BaseOffset != before || r.LastOffset != l.EndOffset()-1) {
		t.Fatalf("result %+v, leo %d -> %d", r, before, l.EndOffset())
	}
	appendT(t, l, good)
	l.mu.RLock()
	defer l.mu.RUnlock()
	seg := l.active()
	res, err := scanSegment(seg.log.w(), seg.base, fileSize(t, seg.log.path), defaultIndexInterval, l.minEpoch)
	if err != nil || res.stop != "" || res.end != l.EndOffset() {
		t.Fatalf("segment on disk: %+v %v, leo %d", res, err, l.EndOffset())
	}
}

// TestFuzzSeedsReopen appends the fuzz seeds, syncs, reopens and checks that
// the log read back is byte for byte the same.
func TestFuzzSeedsReopen(t *testing.T) {
	dir := t.TempDir()
	good := makeBatch(spec{n: 3, baseTs: 10, tsStep: 1})
	l := openT(t, dir, Options{MaxMessageBytes: 4096})
	for _, in := range fuzzSeeds() {
		checkFuzzAppend(t, l, in, good)
	}
	syncT(t, l)
	stored, err := l.Read(0, 1<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset()
	l.Close()
	l = openT(t, dir, Options{MaxMessageBytes: 4096})
	defer l.Close()
	again, err := l.Read(0, 1<<20, true)
	if err != nil || l.EndOffset() != end || !bytes.Equal(again, stored) {
		t.Fatalf("reopen changed the log: leo %d -> %d, %v", end, l.EndOffset(), err)
	}
}

// FuzzDecodeMetadata: the metadata decoders never panic on arbitrary input.
func FuzzDecodeMetadata(f *testing.F) {
	f.Add(encodeEpochFile(epochFile{Epoch: 3, History: []epochEntry{{1, 0}, {3, 10}}}))
	f.Add(encodeSnapshot(producerSnapshot{coverEnd: 5, producers: map[int64]*producerState{1: {batches: []producerBatch{{}}}}}))
	f.Fuzz(func(t *testing.T, in []byte) {
		decodeEpochFile(in)
		decodeSnapshot(in)
		unframe(sealMagic, in)
	})
}

func BenchmarkAppendSync(b *testing.B) {
	batch := makeBatch(spec{n: 10, value: string(make([]byte, 100))})
	b.Run("serial", func(b *testing.B) {
		l := openT(b, b.TempDir(), Options{})
		defer l.Close()
		b.SetBytes(int64(len(batch)))
		for b.Loop() {
			if _, err := l.Append(batch, AppendOptions{}); err != nil {
				b.Fatal(err)
			}
			if err := l.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := openT(b, b.TempDir(), Options{})
		defer l.Close()
		b.SetBytes(int64(len(batch)))
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := l.Append(batch, AppendOptions{}); err != nil {
					b.Error(err)
					return
				}
				if err := l.Sync(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(l.fsyncs.Load())/float64(b.N), "fsyncs/op")
	})
}
