package offsets

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaas-dev/kaas/internal/testutil"
)

// faultFS is the failing twin of osFS: fail, when set, is asked before every
// operation and may return an error instead of performing it.
type faultFS struct {
	osFS
	fail atomic.Pointer[func(op, path string) error]
}

func (f *faultFS) check(op, path string) error {
	if fn := f.fail.Load(); fn != nil {
		return (*fn)(op, path)
	}
	return nil
}

func (f *faultFS) setFail(fn func(op, path string) error) { f.fail.Store(&fn) }
func (f *faultFS) clear()                                 { f.fail.Store(nil) }

type faultFile struct {
	writeFile
	fs   *faultFS
	path string
}

func (w faultFile) Write(p []byte) (int, error) {
	if err := w.fs.check("write", w.path); err != nil {
		return 0, err
	}
	return w.writeFile.Write(p)
}

func (w faultFile) Sync() error {
	if err := w.fs.check("sync", w.path); err != nil {
		return err
	}
	return w.writeFile.Sync()
}

type faultDir struct {
	syncer
	fs *faultFS
}

func (d faultDir) Sync() error {
	if err := d.fs.check("syncdir", ""); err != nil {
		return err
	}
	return d.syncer.Sync()
}

func (f *faultFS) OpenDir(dir string) (syncer, error) {
	d, err := f.osFS.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	return faultDir{d, f}, nil
}

func (f *faultFS) CreateExcl(path string) (writeFile, error) {
	if err := f.check("create", path); err != nil {
		return nil, err
	}
	w, err := f.osFS.CreateExcl(path)
	if err != nil {
		return nil, err
	}
	return faultFile{w, f, path}, nil
}

func (f *faultFS) Rename(from, to string) error {
	if err := f.check("rename", to); err != nil {
		return err
	}
	return f.osFS.Rename(from, to)
}

func (f *faultFS) ReadFile(path string) ([]byte, fs.FileInfo, error) {
	if err := f.check("read", path); err != nil {
		return nil, nil, err
	}
	return f.osFS.ReadFile(path)
}

var errDisk = errors.New("injected disk error")

func open(t testing.TB, dir string, ffs *faultFS) *Store {
	t.Helper()
	o := Options{Dir: dir}
	if ffs != nil {
		o.fs = ffs
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func off(o int64) Offset {
	return Offset{Offset: o, LeaderEpoch: -1, ExpireTimestamp: -1, CommitTimestamp: 1000}
}

func diskState(t *testing.T, dir, group string) (map[TP]Offset, Fence) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, FileName(group)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := decodeFile(data)
	if err != nil {
		t.Fatal(err)
	}
	return d.st.snapshot(), d.fence
}

func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Fatalf("temp file left behind: %s", e.Name())
		}
	}
}

var f1 = Fence{1, 1}

func TestCommitLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	ctx := context.Background()
	want := map[TP]Offset{{"orders", 0}: {Offset: 5, LeaderEpoch: 2, Metadata: "m", CommitTimestamp: 7, ExpireTimestamp: -1}, {"a/b", 3}: off(9)}
	if err := s.Commit(ctx, "g", f1, want); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Load("g", nil)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("memory %v", got)
	}
	if disk, fence := diskState(t, dir, "g"); !reflect.DeepEqual(disk, want) || fence != f1 {
		t.Fatalf("disk %v %v", disk, fence)
	}
	// A fresh store (another broker) sees the same.
	got, _ = open(t, dir, nil).Load("g", nil)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reopened %v", got)
	}
	noTempFiles(t, dir)
}

// TestTrap1CommitForUnloadedGroupErasesOtherPartitions: spec §8 trap 1.
func TestTrap1CommitForUnloadedGroupErasesOtherPartitions(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a := open(t, dir, nil)
	a.Commit(ctx, "g", f1, map[TP]Offset{{"t", 0}: off(1), {"t", 1}: off(2), {"u", 0}: off(3)})
	b := open(t, dir, nil) // another broker, group never loaded there
	if err := b.Commit(ctx, "g", Fence{1, 2}, map[TP]Offset{{"t", 1}: off(20)}); err != nil {
		t.Fatal(err)
	}
	want := map[TP]Offset{{"t", 0}: off(1), {"t", 1}: off(20), {"u", 0}: off(3)}
	if disk, _ := diskState(t, dir, "g"); !reflect.DeepEqual(disk, want) {
		t.Fatalf("disk %v", disk)
	}
}

// TestTrap2DeleteGroupThatExistsOnlyAsFile: spec §8 trap 2.
func TestTrap2DeleteGroupThatExistsOnlyAsFile(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open(t, dir, nil).Commit(ctx, "g", f1, map[TP]Offset{{"t", 0}: off(1)})
	b := open(t, dir, nil)
	if ok, err := b.Exists("g"); !ok || err != nil {
		t.Fatalf("Exists = %v %v", ok, err)
	}
	existed, err := b.DeleteGroup(ctx, "g", f1)
	if !existed || err != nil {
		t.Fatalf("DeleteGroup = %v %v", existed, err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName("g"))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("file left: %v", err)
	}
	if ok, _ := b.Exists("g"); ok {
		t.Fatal("still exists")
	}
	if existed, err := b.DeleteGroup(ctx, "nope", f1); existed || err != nil {
		t.Fatalf("DeleteGroup(absent) = %v %v", existed, err)
	}
}

// TestTrap3MovedAwayAndBackResurrectsStaleOffsets: spec §8 trap 3.
func TestTrap3MovedAwayAndBackResurrectsStaleOffsets(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a, b := open(t, dir, nil), open(t, dir, nil)
	a.Commit(ctx, "g", f1, map[TP]Offset{{"t", 0}: off(1), {"t", 1}: off(1)})
	a.Evict("g") // moved to b
	if len(a.Resident()) != 0 {
		t.Fatalf("resident after evict: %v", a.Resident())
	}
	if err := b.Commit(ctx, "g", Fence{1, 2}, map[TP]Offset{{"t", 0}: off(50)}); err != nil {
		t.Fatal(err)
	}
	// Back to a: it must see b's offsets, and its next commit must keep them.
	got, _ := a.Load("g", nil)
	if got[TP{"t", 0}].Offset != 50 {
		t.Fatalf("stale offsets resurrected: %v", got)
	}
	if err := a.Commit(ctx, "g", Fence{1, 3}, map[TP]Offset{{"t", 1}: off(60)}); err != nil {
		t.Fatal(err)
	}
	want := map[TP]Offset{{"t", 0}: off(50), {"t", 1}: off(60)}
	if disk, _ := diskState(t, dir, "g"); !reflect.DeepEqual(disk, want) {
		t.Fatalf("disk %v", disk)
	}
	// Without Evict, the staleness check still notices b's write before a writes.
	b.Commit(ctx, "g", Fence{1, 4}, map[TP]Offset{{"t", 2}: off(70)})
	if err := a.Commit(ctx, "g", Fence{1, 5}, map[TP]Offset{{"t", 3}: off(80)}); err != nil {
		t.Fatal(err)
	}
	if disk, _ := diskState(t, dir, "g"); len(disk) != 4 || disk[TP{"t", 2}].Offset != 70 {
		t.Fatalf("disk %v", disk)
	}
}

// TestTrap4ConcurrentCommitsTornOrOlderFile: spec §8 trap 4, 64 goroutines on
// one group.
func TestTrap4ConcurrentCommitsTornOrOlderFile(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir, nil)
	const writers, rounds = 64, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				tp := TP{"t", int32(w)}
				if err := s.Commit(ctx, "hot", f1, map[TP]Offset{tp: off(int64(r))}); err != nil {
					t.Error(err)
					return
				}
				// Acked means durable and visible.
				if got, _ := s.Load("hot", nil); got[tp].Offset != int64(r) {
					t.Errorf("acked %d, memory has %d", r, got[tp].Offset)
				}
			}
		}()
	}
	wg.Wait()
	disk, _ := diskState(t, dir, "hot")
	if len(disk) != writers {
		t.Fatalf("disk has %d partitions", len(disk))
	}
	for tp, o := range disk {
		if o.Offset != rounds-1 {
			t.Fatalf("%v = %d, want %d", tp, o.Offset, rounds-1)
		}
	}
	noTempFiles(t, dir)
}

// TestTrap6DiskErrorReportedAsSuccess: spec §8 trap 6. Every caller covered by
// the failed write gets the error, and memory stays equal to disk.
func TestTrap6DiskErrorReportedAsSuccess(t *testing.T) {
	for _, op := range []string{"create", "write", "sync", "rename", "syncdir"} {
		t.Run(op, func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			ffs := &faultFS{}
			s := open(t, dir, ffs)
			base := map[TP]Offset{{"t", 0}: off(1), {"t", 1}: off(1)}
			if err := s.Commit(ctx, "g", f1, base); err != nil {
				t.Fatal(err)
			}
			// Hold the first failing write until all callers queued behind it.
			var n atomic.Int32
			release := make(chan struct{})
			ffs.setFail(func(o, path string) error {
				if o == "create" {
					<-release
				}
				if o == op {
					return errDisk
				}
				return nil
			})
			const callers = 8
			errs := make(chan error, callers)
			for i := range callers {
				go func() {
					n.Add(1)
					errs <- s.Commit(ctx, "g", f1, map[TP]Offset{{"t", int32(i % 3)}: off(100 + int64(i))})
				}()
			}
			testutil.WaitFor(t, 10*time.Second, func() error {
				if n.Load() != callers {
					return fmt.Errorf("%d of %d callers queued", n.Load(), callers)
				}
				return nil
			})
			time.Sleep(10 * time.Millisecond) // let them queue; correctness does not depend on it
			close(release)
			for range callers {
				if err := <-errs; !errors.Is(err, errDisk) {
					t.Fatalf("caller got %v, want the disk error", err)
				}
			}
			ffs.clear()
			got, err := s.Load("g", nil)
			if err != nil {
				t.Fatal(err)
			}
			disk, _ := diskState(t, dir, "g")
			if !reflect.DeepEqual(got, disk) {
				t.Fatalf("memory %v != disk %v", got, disk)
			}
			if op != "syncdir" && !reflect.DeepEqual(disk, base) {
				t.Fatalf("disk changed by a failed write: %v", disk)
			}
			noTempFiles(t, dir)
			// The store still works.
			if err := s.Commit(ctx, "g", f1, map[TP]Offset{{"t", 0}: off(7)}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFenceNewerOnDiskRefuses(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a, b := open(t, dir, nil), open(t, dir, nil)
	a.Commit(ctx, "g", Fence{2, 1}, map[TP]Offset{{"t", 0}: off(1)})
	b.Commit(ctx, "g", Fence{3, 0}, map[TP]Offset{{"t", 0}: off(2)}) // new owner, new controller
	before, _ := os.ReadFile(filepath.Join(dir, FileName("g")))
	for _, op := range []func() error{
		func() error { return a.Commit(ctx, "g", Fence{2, 99}, map[TP]Offset{{"t", 0}: off(3)}) },
		func() error { return a.Delete(ctx, "g", Fence{2, 99}, []TP{{"t", 0}}) },
		func() error { _, err := a.DeleteGroup(ctx, "g", Fence{2, 99}); return err },
		func() error { _, err := a.Expire(ctx, "g", Fence{2, 99}, 1<<62, 0, false); return err },
	} {
		if err := op(); !errors.Is(err, ErrFenced) {
			t.Fatalf("got %v, want ErrFenced", err)
		}
	}
	after, _ := os.ReadFile(filepath.Join(dir, FileName("g")))
	if string(before) != string(after) {
		t.Fatal("fenced writer changed the file")
	}
	if got, _ := a.Load("g", nil); got[TP{"t", 0}].Offset != 2 {
		t.Fatalf("memory %v", got)
	}
	// An equal or newer fence writes.
	if err := a.Commit(ctx, "g", Fence{3, 0}, map[TP]Offset{{"t", 0}: off(4)}); err != nil {
		t.Fatal(err)
	}
	if !(Fence{2, 9}).Less(Fence{3, 0}) || (Fence{3, 1}).Less(Fence{3, 0}) || (Fence{3, 0}).Less(Fence{3, 0}) {
		t.Fatal("Fence.Less")
	}
}

// TestCrashLeavesTempFiles: a writer crashed mid-write leaves a stray temp file
// and a torn temp file; the group file is intact and the temps are ignored, and
// CleanTemp removes them.
func TestCrashLeavesTempFiles(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir, nil)
	want := map[TP]Offset{{"t", 0}: off(1), {"t", 1}: off(2)}
	s.Commit(ctx, "g", f1, want)
	good, _ := os.ReadFile(filepath.Join(dir, FileName("g")))
	os.WriteFile(filepath.Join(dir, ".tmp-dead-1"), good, 0o644)
	os.WriteFile(filepath.Join(dir, ".tmp-dead-2"), good[:len(good)/2], 0o644)
	s.Close()

	r := open(t, dir, nil)
	got, err := r.Load("g", nil)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after crash: %v %v", got, err)
	}
	if ok, _ := r.Exists("g"); !ok {
		t.Fatal("group lost")
	}
	if err := r.DeleteTopic(ctx, "nope", func(string) (Owner, bool) { return f1, true }); err != nil {
		t.Fatalf("DeleteTopic tripped on temp files: %v", err)
	}
	if n, err := r.CleanTemp(ctx, time.Hour); n != 0 || err != nil {
		t.Fatalf("young temp files removed: %d %v", n, err)
	}
	if n, err := r.CleanTemp(ctx, 0); n != 2 || err != nil {
		t.Fatalf("CleanTemp = %d %v", n, err)
	}
	noTempFiles(t, dir)
}

func TestOpenIsLazy(t *testing.T) {
	dir := t.TempDir()
	for i := range 2000 {
		os.WriteFile(filepath.Join(dir, FileName(fmt.Sprint("g", i))), []byte(`{"offsets":{"t/0":1}}`), 0o644)
	}
	os.WriteFile(filepath.Join(dir, FileName("broken")), []byte(`{not json`), 0o644)
	ffs := &faultFS{}
	var reads atomic.Int32
	ffs.setFail(func(op, _ string) error {
		if op == "read" {
			reads.Add(1)
		}
		return nil
	})
	s := open(t, dir, ffs)
	if reads.Load() != 0 || len(s.Resident()) != 0 {
		t.Fatalf("Open read %d files", reads.Load())
	}
	got, err := s.Load("g7", nil)
	if err != nil || got[TP{"t", 0}].Offset != 1 || reads.Load() != 1 {
		t.Fatalf("Load = %v %v after %d reads", got, err, reads.Load())
	}
	if _, err := s.Load("broken", nil); err == nil {
		t.Fatal("a damaged file loaded")
	}
	if err := s.Commit(context.Background(), "broken", f1, map[TP]Offset{{"t", 0}: off(1)}); err == nil {
		t.Fatal("commit over a damaged file succeeded (would erase it)")
	}
}

func TestDeleteExpireDeleteTopic(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := open(t, dir, nil)
	recent := Offset{Offset: 1, LeaderEpoch: -1, CommitTimestamp: 9000, ExpireTimestamp: -1}
	s.Commit(ctx, "g", f1, map[TP]Offset{
		{"t", 0}: {Offset: 1, CommitTimestamp: 1000, ExpireTimestamp: -1},
		{"t", 1}: {Offset: 1, CommitTimestamp: 5000, ExpireTimestamp: -1},
		{"t", 2}: {Offset: 1, CommitTimestamp: 5000, ExpireTimestamp: 2000},
		{"u", 0}: off(1), {"gone", 0}: recent, {"gone", 9999}: recent,
	})
	s.Commit(ctx, "h", f1, map[TP]Offset{{"gone", 1}: off(1), {"keep", 1}: off(1)})
	s.Commit(ctx, strings.Repeat("L", 300), f1, map[TP]Offset{{"gone", 1}: off(1)})
	s.Evict("h")
	if err := s.Delete(ctx, "g", f1, []TP{{"u", 0}, {"absent", 0}}); err != nil {
		t.Fatal(err)
	}
	n, err := s.Expire(ctx, "g", f1, 4000, 2500, false)
	if err != nil || n != 2 { // t/0 by retention, t/2 by its explicit expiry
		t.Fatalf("Expire = %d %v", n, err)
	}
	if err := s.DeleteTopic(ctx, "gone", func(g string) (Owner, bool) { return f1, true }); err != nil {
		t.Fatal(err)
	}
	for g, want := range map[string]map[TP]Offset{
		"g":                      {{"t", 1}: {Offset: 1, LeaderEpoch: 0, CommitTimestamp: 5000, ExpireTimestamp: -1}},
		"h":                      {{"keep", 1}: off(1)},
		strings.Repeat("L", 300): {},
	} {
		disk, _ := diskState(t, dir, g)
		if !reflect.DeepEqual(disk, want) {
			t.Errorf("%.10s: disk %v want %v", g, disk, want)
		}
	}
	if res := s.Resident(); len(res) != 2 {
		t.Fatalf("resident %v (h must stay evicted)", res)
	}
}

func TestInvalidInput(t *testing.T) {
	s := open(t, t.TempDir(), nil)
	ctx := context.Background()
	if err := s.Commit(ctx, "g\xff", f1, nil); !errors.Is(err, ErrInvalidGroup) {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "g", f1, map[TP]Offset{{"t", -1}: off(1)}); !errors.Is(err, ErrInvalidTopic) {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, "g", f1, map[TP]Offset{{"", 0}: off(1)}); !errors.Is(err, ErrInvalidTopic) {
		t.Fatal(err)
	}
}

// TestMemoryPerOffset is performance goal 9: ≤ 100 B per committed offset at 1000.
func TestMemoryPerOffset(t *testing.T) {
	s := open(t, t.TempDir(), nil)
	s.noSync = true
	offs := make(map[TP]Offset, 1000)
	for p := range 1000 {
		offs[TP{"orders", int32(p)}] = Offset{Offset: int64(p), LeaderEpoch: 3, Metadata: "consumer-1", ExpireTimestamp: -1}
	}
	s.Commit(context.Background(), "warm", f1, offs)
	s.Evict("warm")
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	const groups = 20
	for i := range groups {
		if err := s.Commit(context.Background(), fmt.Sprint("g", i), f1, offs); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	per := float64(m1.HeapAlloc-m0.HeapAlloc) / (groups * 1000)
	t.Logf("%.1f B per committed offset", per)
	if per > 100 {
		t.Fatalf("%.1f B per committed offset, goal 100", per)
	}
	runtime.KeepAlive(offs)
}

// A damaged group file is reported once per version of it, however many
// requests read it; moving it aside lets the group start over.
func TestCorruptGroupFileIsReportedOnce(t *testing.T) {
	dir := t.TempDir()
	var reports []string
	s, err := Open(Options{Dir: dir, OnCorrupt: func(g string) { reports = append(reports, g) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.WriteFile(filepath.Join(dir, FileName("g")), []byte(`{"version":1,"offsets":[`), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Load("g", nil); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("load: %v", err)
		}
		s.Evict("g")
	}
	if len(reports) != 1 {
		t.Fatalf("reported %d times: %v", len(reports), reports)
	}
	name, err := s.SetAside("g", nil)
	if err != nil || !strings.HasPrefix(name, FileName("g")+".corrupt-") {
		t.Fatalf("set aside: %q %v", name, err)
	}
	if got, err := s.Load("g", nil); err != nil || len(got) != 0 {
		t.Fatalf("load after set aside: %v %v", got, err)
	}
	if name, err := s.SetAside("g", nil); name != "" || err != nil {
		t.Fatalf("second set aside: %q %v", name, err)
	}
}

// A former owner's write that a volume held lands after the new owner's
// (its broker was declared dead, so nobody waited for it): the new owner
// finds an older fence in the file at its next touch and writes its own,
// newer state back; an acknowledged commit is not lost.
func TestLateWriteOfAFormerOwnerIsWrittenOver(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	f2 := Fence{1, 2}
	oldOwner, newOwner := open(t, dir, nil), open(t, dir, nil)
	if err := oldOwner.Commit(ctx, "g", f1, map[TP]Offset{{"t", 0}: off(100)}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName("g"))
	late, err := os.ReadFile(path) // what the old owner's held rename carries
	if err != nil {
		t.Fatal(err)
	}
	if err := newOwner.Commit(ctx, "g", f2, map[TP]Offset{{"t", 0}: off(200), {"t", 1}: off(7)}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".late", late, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".late", path); err != nil { // it lands
		t.Fatal(err)
	}
	got, err := newOwner.Load("g", f2)
	if err != nil {
		t.Fatal(err)
	}
	if got[TP{"t", 0}].Offset != 200 || got[TP{"t", 1}].Offset != 7 {
		t.Fatalf("the new owner answers %v", got)
	}
	if disk, fence := diskState(t, dir, "g"); disk[TP{"t", 0}].Offset != 200 || disk[TP{"t", 1}].Offset != 7 || fence != f2 {
		t.Fatalf("on disk after the touch: %v under %v", disk, fence)
	}
}

// DeleteTopic read every group file in the folder, then asked whether this
// broker coordinates the group: on a cluster of N brokers, N times the
// reads needed, on every broker, for every deleted topic. It now reads
// only the files of the groups this broker coordinates (a hashed long name
// is the exception: its id is in the file).
func TestDeleteTopicReadsOnlyTheGroupsItCoordinates(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	w := open(t, dir, nil)
	for i := range 30 {
		if err := w.Commit(ctx, fmt.Sprintf("g%02d", i), f1, map[TP]Offset{{"gone", 0}: off(1)}); err != nil {
			t.Fatal(err)
		}
	}
	ffs := &faultFS{}
	var reads atomic.Int64
	ffs.setFail(func(op, path string) error {
		if op == "read" {
			reads.Add(1)
		}
		return nil
	})
	s := open(t, dir, ffs)
	mine := func(g string) (Owner, bool) { return f1, g < "g10" } // 10 of the 30
	if err := s.DeleteTopic(ctx, "gone", mine); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n > 10 {
		t.Fatalf("%d group files read to delete a topic from the 10 this store coordinates", n)
	}
	for i := range 30 {
		got, err := open(t, dir, nil).Load(fmt.Sprintf("g%02d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, has := got[TP{"gone", 0}]; has != (i >= 10) {
			t.Fatalf("group g%02d: offsets of the deleted topic %v", i, got)
		}
	}
}
