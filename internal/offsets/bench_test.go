package offsets

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// BenchmarkRawDurableFile is L of performance.md: the durable small-file pattern
// (write temp, fsync, rename, fsync dir) with the bytes of a 1-partition file.
func BenchmarkRawDurableFile(b *testing.B) {
	for _, size := range []int{160, 140_000} {
		b.Run(fmt.Sprint("bytes=", size), func(b *testing.B) {
			dir := b.TempDir()
			data := make([]byte, size)
			d, err := os.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			for i := 0; b.Loop(); i++ {
				tmp := filepath.Join(dir, fmt.Sprint(".tmp-", i))
				f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				f.Write(data)
				f.Sync()
				f.Close()
				if err := os.Rename(tmp, filepath.Join(dir, "g.json")); err != nil {
					b.Fatal(err)
				}
				d.Sync()
			}
		})
	}
}

func benchOffsets(n int) map[TP]Offset {
	offs := make(map[TP]Offset, n)
	for p := range n {
		offs[TP{"orders", int32(p)}] = Offset{Offset: int64(p) * 1000, LeaderEpoch: 3, Metadata: "consumer-1", ExpireTimestamp: -1}
	}
	return offs
}

func benchCommit(b *testing.B, n int) {
	s := open(b, b.TempDir(), nil)
	ctx := context.Background()
	offs := benchOffsets(n)
	if err := s.Commit(ctx, "g", f1, offs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := s.Commit(ctx, "g", f1, offs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCommit1(b *testing.B)    { benchCommit(b, 1) }
func BenchmarkCommit1000(b *testing.B) { benchCommit(b, 1000) }

// BenchmarkCommitHotGroup64: 64 committers on one group (goal 4); reports
// acknowledged commits per second.
func BenchmarkCommitHotGroup64(b *testing.B) {
	s := open(b, b.TempDir(), nil)
	ctx := context.Background()
	var id atomic.Int32
	b.SetParallelism(32) // 64 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		tp := TP{"t", id.Add(1)}
		i := int64(0)
		for pb.Next() {
			i++
			if err := s.Commit(ctx, "hot", f1, map[TP]Offset{tp: {Offset: i, LeaderEpoch: -1, ExpireTimestamp: -1}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkEncode1000 is the encoder alone on a 1000-partition group.
func BenchmarkEncode1000(b *testing.B) {
	var st state
	for tp, o := range benchOffsets(1000) {
		st.put(tp, entryOf(o))
	}
	var buf []byte
	for b.Loop() {
		buf = encodeFile(buf[:0], "g", &st, f1, Retention{}, nil, nil)
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkCommit1000NoSync is the in-memory path (fsync off) of goal 5.
func BenchmarkCommit1000NoSync(b *testing.B) {
	s, _ := Open(Options{Dir: b.TempDir(), NoSync: true})
	defer s.Close()
	offs := benchOffsets(1000)
	for b.Loop() {
		s.Commit(context.Background(), "g", f1, offs)
	}
}
