package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// openFDs counts the process's open file descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fdSlack covers descriptors opened briefly by the code under test (a
// directory being fsynced, a metadata file being read) and by the runtime.
const fdSlack = 8

// TestSegmentsDoNotHoldADescriptorEach is the regression test for every
// closed segment keeping its files open: a topic with tiny segments ran the
// process out of descriptors after about 20,000 records, and reopening a
// partition of 10,000 segments took 10,004 descriptors. With a pool of 16,
// writing, reopening and reading 2,000 segments stays within 16 descriptors
// (plus the active segment), and every record reads back.
func TestSegmentsDoNotHoldADescriptorEach(t *testing.T) {
	const segments, poolSize = 2000, 16
	dir := t.TempDir()
	pool := NewFilePool(poolSize)
	o := Options{SegmentBytes: 100, RetentionMs: -1, RetentionBytes: -1, Files: pool, Logger: discardLogger()}
	before := openFDs(t)
	check := func(when string) {
		t.Helper()
		if n := openFDs(t) - before; n > poolSize+1+fdSlack {
			t.Fatalf("%s: %d descriptors open beyond the %d before (pool of %d)", when, n, before, poolSize)
		}
		if st := pool.Stats(); st.Open > poolSize {
			t.Fatalf("%s: pool holds %d files, bound %d", when, st.Open, poolSize)
		}
	}

	l := openT(t, dir, o)
	for i := range segments {
		appendT(t, l, makeBatch(spec{baseTs: int64(i), value: fmt.Sprint(i)})) // each batch rolls a segment
		if i%500 == 0 {
			check(fmt.Sprintf("after %d appends", i))
		}
	}
	syncT(t, l)
	check("after writing")
	if n := len(segmentFiles(t, dir)); n < segments {
		t.Fatalf("%d segments, want %d", n, segments)
	}
	checkEveryRecord(t, l, segments)
	check("after reading the rolled segments")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t) - before; n > fdSlack {
		t.Fatalf("%d descriptors still open after Close", n)
	}

	l = openT(t, dir, o)
	check("after reopening")
	checkEveryRecord(t, l, segments)
	check("after reading the reopened segments")
	if st := pool.Stats(); st.Evictions == 0 || st.Reopens == 0 {
		t.Fatalf("the pool never evicted or reopened: %+v", st)
	}
	t.Logf("pool after reading %d segments: %+v; %d descriptors beyond the %d before", segments, pool.Stats(), openFDs(t)-before, before)

	// Retention deletes segments whose files may be in the pool or not.
	l.SetOptions(Options{SegmentBytes: 100, RetentionMs: -1, RetentionBytes: 50 * 100})
	if n, err := l.EnforceRetention(); err != nil || n < segments/2 {
		t.Fatalf("retention deleted %d segments: %v", n, err)
	}
	check("after retention")
	if got := readAll(t, l); len(got) == 0 || got[len(got)-1].lastOffset() != segments-1 {
		t.Fatalf("after retention: %d batches", len(got))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st := pool.Stats(); st.Open != 0 {
		t.Fatalf("pool holds %d files of a closed log", st.Open)
	}
	if n := openFDs(t) - before; n > fdSlack {
		t.Fatalf("%d descriptors still open after Close", n)
	}
}

// checkEveryRecord reads every offset and looks every timestamp up, across
// all segments.
func checkEveryRecord(t *testing.T, l *Log, n int) {
	t.Helper()
	got := readAll(t, l)
	if len(got) != n {
		t.Fatalf("read %d batches, want %d", len(got), n)
	}
	for i, h := range got {
		if h.BaseOffset != int64(i) || h.MaxTimestamp != int64(i) {
			t.Fatalf("batch %d: offset %d timestamp %d", i, h.BaseOffset, h.MaxTimestamp)
		}
	}
	for _, ts := range []int64{0, 1, int64(n / 2), int64(n - 1)} {
		if off, _, _, ok := l.OffsetForTimestamp(ts); !ok || off != ts {
			t.Fatalf("OffsetForTimestamp(%d) = %d, %v", ts, off, ok)
		}
	}
	if off, ts, ok := l.MaxTimestamp(); !ok || off != int64(n-1) || ts != int64(n-1) {
		t.Fatalf("MaxTimestamp = %d, %d, %v", off, ts, ok)
	}
}

// TestFilePoolKeepsAFileOpenForItsReader: a file evicted while a read uses it
// stays open until that read releases it, then is closed; a retired file is
// never reopened.
func TestFilePoolKeepsAFileOpenForItsReader(t *testing.T) {
	dir := t.TempDir()
	pool := NewFilePool(1)
	var files []*poolFile
	for i := range 3 {
		path := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(path, []byte{byte('a' + i)}, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, pool.file(path))
	}
	a, err := files[0].acquire()
	if err != nil {
		t.Fatal(err)
	}
	for _, pf := range files[1:] { // evicts files[0] while it is in use
		if _, err := pf.acquire(); err != nil {
			t.Fatal(err)
		}
		pf.release()
	}
	var b [1]byte
	if err := readFull(a, b[:], 0); err != nil || b[0] != 'a' {
		t.Fatalf("read from an evicted file in use: %q %v", b, err)
	}
	if st := pool.Stats(); st.Open != 2 || st.Evictions != 2 {
		t.Fatalf("while in use: %+v", st)
	}
	files[0].release()
	if st := pool.Stats(); st.Open != 1 {
		t.Fatalf("after release: %+v", st)
	}
	if _, err := a.Stat(); err == nil {
		t.Fatal("evicted file still open after its last release")
	}
	// Reopened on demand.
	f, err := files[0].acquire()
	if err != nil {
		t.Fatal(err)
	}
	if err := readFull(f, b[:], 0); err != nil || b[0] != 'a' {
		t.Fatalf("reopened: %q %v", b, err)
	}
	files[0].release()
	for _, pf := range files {
		pf.retire()
	}
	if _, err := files[0].acquire(); err == nil {
		t.Fatal("a retired file was reopened")
	}
	if st := pool.Stats(); st.Open != 0 {
		t.Fatalf("after retire: %+v", st)
	}
}

// TestReadsAndRollsShareATinyPool: concurrent readers of random offsets, an
// appender that rolls a segment per batch and syncs, and retention, all
// through a pool of 2 files (run with -race).
func TestReadsAndRollsShareATinyPool(t *testing.T) {
	pool := NewFilePool(2)
	l := openT(t, t.TempDir(), Options{SegmentBytes: 100, RetentionMs: -1, RetentionBytes: -1, Files: pool, Logger: discardLogger()})
	for i := range 200 {
		appendT(t, l, makeBatch(spec{baseTs: int64(i)}))
	}
	syncT(t, l)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				lso, hw := l.LogStartOffset(), l.HighWatermark()
				off := lso + rng.Int64N(hw-lso)
				b, err := l.Read(off, 1<<10, true)
				if err != nil {
					if l.LogStartOffset() > off { // retention moved the start meanwhile
						continue
					}
					errs <- fmt.Errorf("Read(%d): %w", off, err)
					return
				}
				if h, err := validateStored(b); err != nil || h.BaseOffset > off || h.lastOffset() < off {
					errs <- fmt.Errorf("Read(%d): batch %d..%d, %v", off, h.BaseOffset, h.lastOffset(), err)
					return
				}
				l.OffsetForTimestamp(rng.Int64N(400))
			}
		}()
	}
	for i := 200; i < 400; i++ {
		if _, err := l.Append(makeBatch(spec{baseTs: int64(i)}), AppendOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if i == 300 {
			l.SetOptions(Options{SegmentBytes: 100, RetentionMs: -1, RetentionBytes: 100 * 100})
			if _, err := l.EnforceRetention(); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if st := pool.Stats(); st.Open != 0 {
		t.Fatalf("pool holds %d files after Close", st.Open)
	}
}

// TestFilePoolRefusesAReplacedFile: a closed segment's file that was
// replaced or removed while the pool had it closed (a newer leader's
// retention, or the topic deleted and created again) is not read as if it
// were the same: the read fails with ErrFenced.
func TestFilePoolRefusesAReplacedFile(t *testing.T) {
	dir := t.TempDir()
	pool := NewFilePool(1)
	path, other := filepath.Join(dir, "seg"), filepath.Join(dir, "other")
	for _, p := range []string{path, other} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pf, po := pool.file(path), pool.file(other)
	evict := func() {
		t.Helper()
		if _, err := pf.acquire(); err != nil {
			t.Fatal(err)
		}
		pf.release()
		if _, err := po.acquire(); err != nil { // pushes pf out
			t.Fatal(err)
		}
		po.release()
	}
	evict()
	if err := os.WriteFile(path+".new", []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if _, err := pf.acquire(); !errors.Is(err, ErrFenced) {
		t.Fatalf("replaced file: %v", err)
	}
	pf2 := pool.file(path)
	if _, err := pf2.acquire(); err != nil {
		t.Fatal(err)
	}
	pf2.release()
	if _, err := po.acquire(); err != nil {
		t.Fatal(err)
	}
	po.release()
	os.Remove(path)
	if _, err := pf2.acquire(); !errors.Is(err, ErrFenced) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removed file: %v", err)
	}
}
